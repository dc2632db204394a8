//! The figures' tests.

mod bucket_tests {
    use super::super::hot::*;
    use super::super::*;

    /// `histogram_quantile`'s reading of `name`: the bucket `(lo, hi]` its `q` quantile
    /// falls in, from the rendered text.
    fn quantile_bucket(text: &str, name: &str, q: f64) -> (f64, f64) {
        let prefix = format!("{name}_bucket{{le=\"");
        let buckets: Vec<(f64, f64)> = text
            .lines()
            .filter_map(|l| l.strip_prefix(&prefix))
            .filter_map(|rest| {
                let (le, n) = rest.split_once("\"} ")?;
                Some((if le == "+Inf" { f64::INFINITY } else { le.parse().ok()? }, n.trim().parse().ok()?))
            })
            .collect();
        let total = buckets.last().map_or(0.0, |b| b.1);
        let i = buckets.iter().position(|(_, n)| *n >= q * total).unwrap_or(0);
        (if i == 0 { 0.0 } else { buckets[i - 1].0 }, buckets[i].0)
    }

    /// A hot histogram renders as the exporter's do: cumulative buckets whose edge is
    /// inclusive, `+Inf`, sum and count, with samples from several threads all counted.
    #[test]
    fn hot_histograms_count_every_thread_and_render_as_prometheus_reads_them() {
        let h = HotHistogram::new("x_bytes", "stage=\"sent\"", &[1.0, 10.0]);
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    for v in [0.5, 1.0, 7.0, 10.0, 11.0, f64::NAN] {
                        h.record(v);
                    }
                });
            }
        });
        let mut text = String::new();
        h.render(&mut text);
        assert_eq!(
            text,
            "x_bytes_bucket{stage=\"sent\",le=\"1\"} 6\nx_bytes_bucket{stage=\"sent\",le=\"10\"} 12\n\
             x_bytes_bucket{stage=\"sent\",le=\"+Inf\"} 15\nx_bytes_sum{stage=\"sent\"} 88.5\nx_bytes_count{stage=\"sent\"} 15\n"
        );
        let h = HotHistogram::new("y_seconds", "", &[0.5]);
        h.record(0.25);
        let mut text = String::new();
        h.render(&mut text);
        assert_eq!(
            text,
            "y_seconds_bucket{le=\"0.5\"} 1\ny_seconds_bucket{le=\"+Inf\"} 1\ny_seconds_sum 0.25\ny_seconds_count 1\n"
        );
        // Each family once, with its help and type, in the server's exposition.
        let m = ServerMetrics::new();
        m.record_snapshot(100, 120, None, 0);
        let text = m.render();
        for family in
            ["volley_snapshot_size_bytes", "volley_input_delay_seconds", "volley_snapshot_baseline_age_seconds"]
        {
            assert_eq!(text.matches(&format!("# TYPE {family} histogram")).count(), 1, "{family}");
            assert_eq!(text.matches(&format!("# HELP {family} ")).count(), 1, "{family}");
        }
        assert!(text.contains("volley_snapshot_size_bytes_bucket{stage=\"encoded\",le=\"128\"} 1\n"));
        assert!(text.contains("volley_snapshot_size_bytes_count{stage=\"sent\"} 1\n"));
    }

    #[test]
    fn whole_tick_values_fall_in_narrow_buckets_at_any_tick_rate() {
        for hz in [60u16, 30, 20] {
            let m = ServerMetrics::with_tick_rate(hz);
            let p = Duration::from_secs(1) / u32::from(hz);
            for _ in 0..100 {
                m.record_snapshot(10, 20, Some(p), 0);
                m.record_tick(Duration::from_micros(30), Duration::ZERO);
                m.record_input_delay(p / 2);
            }
            m.upkeep();
            let text = m.render();
            let (lo, hi) = quantile_bucket(&text, "volley_snapshot_baseline_age_seconds", 0.5);
            let tick = p.as_secs_f64();
            assert!(lo < tick && tick <= hi && hi - lo <= 0.1 * tick + 1e-9, "{hz} Hz: a one-tick age in ({lo}, {hi}]");
            let (lo, hi) = quantile_bucket(&text, "volley_tick_duration_seconds", 0.5);
            assert!(lo > 0.0 && hi <= 0.00005, "a 30 us tick's median is not in the first bucket: ({lo}, {hi}]");
            let edge = text
                .lines()
                .filter_map(|l| l.strip_prefix("volley_input_delay_seconds_bucket{le=\""))
                .filter_map(|r| r.split_once('"')?.0.parse::<f64>().ok())
                .any(|le| (le - tick).abs() < 1e-9);
            assert!(edge, "{hz} Hz: an input-delay bucket edge at the tick period");
        }
    }
}

mod rtt_tests {
    use super::super::players::*;
    use super::super::*;

    #[test]
    fn one_hostile_clients_rtt_does_not_move_the_players_median() {
        let m = ServerMetrics::new();
        assert_eq!(m.rtt_quantile(0.5), Duration::ZERO, "no player");
        for id in 0..9 {
            m.set_player(PlayerStats { id, rtt_seconds: 0.020 + f64::from(id) * 0.001, ..PlayerStats::default() });
        }
        // A client that never acknowledges reads a ten-second RTT: a mean of all ten would be
        // over a second; the median is still the others'.
        m.set_player(PlayerStats { id: 9, rtt_seconds: 10.1, ..PlayerStats::default() });
        let median = m.rtt_quantile(0.5);
        assert!(median >= Duration::from_millis(24) && median <= Duration::from_millis(26), "{median:?}");
        assert_eq!(m.rtt_quantile(1.0), Duration::from_secs_f64(10.1));
        m.remove_player(9);
        assert!(m.rtt_quantile(1.0) < Duration::from_millis(30));
    }
}
