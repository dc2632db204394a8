//! The tick's timing and the inputs' way to it: durations, lateness, an input's delay and its effect.

use super::ServerMetrics;
use std::sync::atomic::Ordering;
use std::time::Duration;

impl ServerMetrics {
    /// Records one tick's duration and how late it started.
    pub(crate) fn record_tick(&self, took: Duration, lateness: Duration) {
        self.ticks.fetch_add(1, Ordering::Relaxed);
        self.hist.tick_duration.record(took.as_secs_f64());
        self.hist.tick_lateness.record(lateness.as_secs_f64());
        let unix = crate::server::unix_now().as_micros() as u64;
        self.last_tick_unix_us.store(unix, Ordering::Relaxed);
        self.last_tick_at_us.store(self.started.elapsed().as_micros() as u64, Ordering::Relaxed);
        if let Ok(mut r) = self.ticks_us.lock() {
            r.push(took);
        }
        if let Ok(mut r) = self.lateness_us.lock() {
            r.push(lateness);
        }
    }

    /// Sets the tick period (the budget a tick must fit in).
    pub(crate) fn set_tick_period(&self, period: Duration) {
        if let Ok(mut p) = self.tick_period.lock() {
            *p = period;
        }
    }

    /// The tick period.
    pub fn tick_period(&self) -> Duration {
        self.tick_period.lock().map(|p| *p).unwrap_or(Duration::from_secs(1) / 60)
    }

    /// Quantile of how late recent ticks started after their scheduled time.
    pub fn tick_lateness_quantile(&self, q: f64) -> Duration {
        self.lateness_us.lock().map(|r| r.quantile(q)).unwrap_or_default()
    }

    /// Records how long an input waited from arrival to being applied, whether that was
    /// within one tick period, and whether it was applied by the first tick after its arrival
    /// (`next_tick`: it arrived after the previous tick took its inputs).
    pub(crate) fn record_input(&self, d: Duration, tick: Duration, next_tick: bool) {
        self.inputs_applied.fetch_add(1, Ordering::Relaxed);
        if d <= tick {
            self.inputs_on_time.fetch_add(1, Ordering::Relaxed);
        }
        if next_tick {
            self.inputs_next_tick.fetch_add(1, Ordering::Relaxed);
        }
        self.record_input_delay(d);
    }

    /// Records how long an input waited from arrival to being applied.
    pub(crate) fn record_input_delay(&self, d: Duration) {
        self.hot.input_delay.record(d.as_secs_f64());
        if let Ok(mut r) = self.input_delay_us.lock() {
            r.push(d);
        }
    }

    /// Records the server's added latency for one input: from its arrival to the snapshot
    /// with its effect leaving, without the wait for the tick to begin.
    pub(crate) fn record_input_effect(&self, d: Duration) {
        self.hot.input_effect.record(d.as_secs_f64());
        if let Ok(mut r) = self.input_effect_us.lock() {
            r.push(d);
        }
    }

    /// Records how far (seconds) behind the newest snapshot an input's reported view was.
    pub(crate) fn record_view_age(&self, seconds: f64) {
        self.hot.view_age.record(seconds);
    }

    /// Quantile of the added input-to-effect latency over recent inputs.
    pub fn input_effect_quantile(&self, q: f64) -> Duration {
        self.input_effect_us.lock().map(|r| r.quantile(q)).unwrap_or_default()
    }

    /// Time since the newest tick finished (since start, before the first tick).
    pub fn since_last_tick(&self) -> Duration {
        let at = Duration::from_micros(self.last_tick_at_us.load(Ordering::Relaxed));
        self.started.elapsed().saturating_sub(at)
    }

    /// Tick duration quantile over the recent ticks.
    pub fn tick_quantile(&self, q: f64) -> Duration {
        self.ticks_us.lock().map(|r| r.quantile(q)).unwrap_or_default()
    }

    /// Input delay quantile over recent inputs.
    pub fn input_delay_quantile(&self, q: f64) -> Duration {
        self.input_delay_us.lock().map(|r| r.quantile(q)).unwrap_or_default()
    }
}
