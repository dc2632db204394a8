//! Reading a server's `/metrics` back: the bot swarm's view of the server's own figures
//! (tick time, inputs within a tick, CPU and memory per player, input-to-effect latency)
//! over the part of a load run it chooses, from two scrapes.
//!
//! Only what volley's exporter writes is understood: one sample per line, `name{labels}
//! value`, labels without escaped quotes. Anything else is skipped.

use std::collections::HashMap;

/// One scrape: every sample by name and label set (as written, e.g. `kind="snapshot"`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scrape {
    samples: HashMap<String, Vec<(String, f64)>>,
}

impl Scrape {
    /// Parses the Prometheus text format as volley writes it.
    pub fn parse(text: &str) -> Self {
        let mut samples: HashMap<String, Vec<(String, f64)>> = HashMap::new();
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
            let Some((series, value)) = line.rsplit_once(' ') else { continue };
            let Ok(value) = value.parse::<f64>() else { continue };
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.strip_suffix('}').unwrap_or(rest)),
                None => (series, ""),
            };
            samples.entry(name.to_string()).or_default().push((labels.to_string(), value));
        }
        Self { samples }
    }

    /// The value of `name` with exactly `labels` (`""` for none).
    pub fn value(&self, name: &str, labels: &str) -> Option<f64> {
        self.samples.get(name)?.iter().find(|(l, _)| l == labels).map(|(_, v)| *v)
    }

    /// The sum of every series of `name`.
    pub fn sum(&self, name: &str) -> Option<f64> {
        self.samples.get(name).map(|s| s.iter().map(|(_, v)| v).sum())
    }

    /// A histogram's cumulative buckets `(le, count)`, ascending, `+Inf` last.
    fn buckets(&self, name: &str) -> Vec<(f64, f64)> {
        let mut b: Vec<(f64, f64)> = self
            .samples
            .get(&format!("{name}_bucket"))
            .into_iter()
            .flatten()
            .filter_map(|(labels, v)| {
                let le = labels.split(',').find_map(|l| l.strip_prefix("le=\""))?.trim_end_matches('"');
                let le = if le == "+Inf" { f64::INFINITY } else { le.parse().ok()? };
                Some((le, *v))
            })
            .collect();
        b.sort_by(|x, y| x.0.total_cmp(&y.0));
        b
    }

    /// The `q` quantile of histogram `name` over the samples recorded since `before`, as
    /// Prometheus' `histogram_quantile` estimates it (linear within the bucket; the highest
    /// finite bound when it falls in `+Inf`). `None` when no sample was recorded.
    pub fn quantile_since(&self, before: &Scrape, name: &str, q: f64) -> Option<f64> {
        let old = before.buckets(name);
        let delta: Vec<(f64, f64)> = self
            .buckets(name)
            .into_iter()
            .map(|(le, n)| (le, n - old.iter().find(|(l, _)| *l == le).map_or(0.0, |(_, o)| *o)))
            .collect();
        let total = delta.last()?.1;
        if total <= 0.0 {
            return None;
        }
        let rank = q.clamp(0.0, 1.0) * total;
        let mut prev = (0.0, 0.0);
        for &(le, n) in &delta {
            if n >= rank {
                if le.is_infinite() {
                    return Some(prev.0);
                }
                let within = if n > prev.1 { (rank - prev.1) / (n - prev.1) } else { 1.0 };
                return Some(prev.0 + (le - prev.0) * within);
            }
            prev = (le, n);
        }
        None
    }

    /// How much counter `name` (all series summed) grew since `before`.
    pub fn increase(&self, before: &Scrape, name: &str) -> f64 {
        self.sum(name).unwrap_or(0.0) - before.sum(name).unwrap_or(0.0)
    }
}

/// The server's figures over a load run, from a scrape at its start and one at its end.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServerFigures {
    /// Seconds of server CPU per player-tick.
    pub cpu_per_player_tick: Option<f64>,
    /// Resident memory per connected player at the end, bytes.
    pub memory_per_player: Option<f64>,
    /// Players connected at the end.
    pub players: f64,
    /// Tick duration p99, seconds.
    pub tick_p99: Option<f64>,
    /// Share of inputs applied by the first tick that started after they arrived.
    pub inputs_next_tick: Option<f64>,
    /// Share of inputs applied within one tick period of arriving (stricter: a tick that
    /// starts late counts against it).
    pub inputs_within_tick: Option<f64>,
    /// Input arrival to its effect leaving in a snapshot, without the wait for the tick: p50
    /// and p99, seconds.
    pub input_effect: (Option<f64>, Option<f64>),
    /// Share of player snapshots skipped because a newer tick replaced them.
    pub snapshots_replaced: Option<f64>,
}

impl ServerFigures {
    /// The figures between `start` and `end`.
    pub fn between(start: &Scrape, end: &Scrape) -> Self {
        let ratio = |a: f64, b: f64| (b > 0.0).then(|| a / b);
        let player_ticks = end.increase(start, "volley_player_ticks_total");
        let players = end.value("volley_players", "").unwrap_or(0.0);
        let snapshots = end.increase(start, "volley_snapshots_total");
        let replaced = end.increase(start, "volley_snapshots_replaced_total");
        Self {
            cpu_per_player_tick: ratio(end.increase(start, "process_cpu_seconds_total"), player_ticks),
            memory_per_player: ratio(end.value("process_resident_memory_bytes", "").unwrap_or(0.0), players),
            players,
            tick_p99: end.quantile_since(start, "volley_tick_duration_seconds", 0.99),
            inputs_next_tick: ratio(
                end.increase(start, "volley_inputs_next_tick_total"),
                end.increase(start, "volley_inputs_applied_total"),
            ),
            inputs_within_tick: ratio(
                end.increase(start, "volley_inputs_on_time_total"),
                end.increase(start, "volley_inputs_applied_total"),
            ),
            input_effect: (
                end.quantile_since(start, "volley_input_effect_seconds", 0.5),
                end.quantile_since(start, "volley_input_effect_seconds", 0.99),
            ),
            snapshots_replaced: ratio(replaced, snapshots + replaced),
        }
    }

    /// One line for a person.
    pub fn line(&self) -> String {
        let ms = |s: Option<f64>| s.map_or("-".to_string(), |s| format!("{:.2} ms", s * 1e3));
        let pct = |r: Option<f64>| r.map_or("-".to_string(), |r| format!("{:.2} %", r * 100.0));
        format!(
            "server (its /metrics, over the run): {} players; tick p99 {}; inputs applied at the next tick {} \
             (within one tick period {}); \
             CPU {} per player-tick; memory {} per player; input to effect p50 {} p99 {} \
             (histogram estimates); snapshots skipped {}",
            self.players,
            ms(self.tick_p99),
            pct(self.inputs_next_tick),
            pct(self.inputs_within_tick),
            self.cpu_per_player_tick.map_or("-".to_string(), |s| format!("{:.2} us", s * 1e6)),
            self.memory_per_player.map_or("-".to_string(), |b| format!("{:.1} KiB", b / 1024.0)),
            ms(self.input_effect.0),
            ms(self.input_effect.1),
            pct(self.snapshots_replaced),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = "# HELP x y\n# TYPE volley_tick_duration_seconds histogram\n\
        volley_tick_duration_seconds_bucket{le=\"0.001\"} 10\n\
        volley_tick_duration_seconds_bucket{le=\"0.002\"} 10\n\
        volley_tick_duration_seconds_bucket{le=\"+Inf\"} 10\n\
        volley_sent_bytes_total{kind=\"snapshot\"} 100\nvolley_sent_bytes_total{kind=\"control\"} 5\n\
        process_cpu_seconds_total 1.5\nvolley_player_ticks_total 1000\n";
    const AFTER: &str = "volley_tick_duration_seconds_bucket{le=\"0.001\"} 60\n\
        volley_tick_duration_seconds_bucket{le=\"0.002\"} 110\n\
        volley_tick_duration_seconds_bucket{le=\"+Inf\"} 110\n\
        volley_sent_bytes_total{kind=\"snapshot\"} 300\nvolley_sent_bytes_total{kind=\"control\"} 5\n\
        process_cpu_seconds_total 3.5\nvolley_player_ticks_total 101000\nvolley_players 50\n\
        process_resident_memory_bytes 5242880\ngarbage line\nvolley_bad NaNx\n";

    #[test]
    fn values_sums_and_increases() {
        let (a, b) = (Scrape::parse(BEFORE), Scrape::parse(AFTER));
        assert_eq!(b.value("volley_sent_bytes_total", "kind=\"snapshot\""), Some(300.0));
        assert_eq!(b.sum("volley_sent_bytes_total"), Some(305.0));
        assert_eq!(b.increase(&a, "volley_sent_bytes_total"), 200.0);
        assert_eq!(b.value("volley_bad", ""), None, "unparsable values are skipped");
        let f = ServerFigures::between(&a, &b);
        assert_eq!(f.cpu_per_player_tick, Some(2.0 / 100_000.0));
        assert_eq!(f.memory_per_player, Some(5242880.0 / 50.0));
        assert_eq!(f.inputs_within_tick, None, "no inputs counted");
    }

    #[test]
    fn quantiles_come_from_the_buckets_filled_between_the_scrapes() {
        let (a, b) = (Scrape::parse(BEFORE), Scrape::parse(AFTER));
        // 100 new samples: 50 in (0, 1 ms], 50 in (1 ms, 2 ms].
        let p50 = b.quantile_since(&a, "volley_tick_duration_seconds", 0.5).unwrap();
        assert!((p50 - 0.001).abs() < 1e-12, "{p50}");
        let p99 = b.quantile_since(&a, "volley_tick_duration_seconds", 0.99).unwrap();
        assert!((p99 - 0.00198).abs() < 1e-9, "{p99}");
        assert_eq!(a.quantile_since(&a, "volley_tick_duration_seconds", 0.5), None, "nothing new");
        assert_eq!(b.quantile_since(&a, "volley_nothing", 0.5), None);
    }
}
