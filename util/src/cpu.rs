//! The calling thread's CPU time: what a piece of work cost, without the time the thread
//! waited for a core (on a busy machine a wall-clock span also counts other processes'
//! turns: a 100 µs piece of work the scheduler interrupts for a 4 ms slice reads 4.1 ms).

use std::time::Duration;

/// CPU time the calling thread has used so far (a system call; use it around pieces of
/// work, not per entity). On a platform without a thread clock, the monotonic clock.
pub fn thread_cpu_time() -> Duration {
    #[cfg(target_os = "linux")]
    {
        use nix::time::{ClockId, clock_gettime};
        if let Ok(t) = clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID) {
            return Duration::new(t.tv_sec().max(0) as u64, t.tv_nsec().clamp(0, 999_999_999) as u32);
        }
    }
    fallback()
}

/// CPU time spent on a piece of work that began at `began` (a [`thread_cpu_time`] reading),
/// less what reading the clock itself costs ([`clock_cost`]): for short pieces, where the two
/// system calls would otherwise be a good part of what is counted.
pub fn cpu_since(began: Duration) -> Duration {
    thread_cpu_time().saturating_sub(began).saturating_sub(clock_cost())
}

/// What one span of [`thread_cpu_time`] reads when nothing is done between its two
/// readings: the least of a few tries, measured once per process.
pub fn clock_cost() -> Duration {
    static COST: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *COST.get_or_init(|| {
        (0..16)
            .map(|_| {
                let t = thread_cpu_time();
                thread_cpu_time().saturating_sub(t)
            })
            .min()
            .unwrap_or_default()
    })
}

fn fallback() -> Duration {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_that_sleeps_uses_little_cpu_and_one_that_spins_uses_some() {
        let t0 = thread_cpu_time();
        std::thread::sleep(Duration::from_millis(50));
        let slept = thread_cpu_time() - t0;
        let t1 = thread_cpu_time();
        let spin = std::time::Instant::now();
        let mut x = 0u64;
        while spin.elapsed() < Duration::from_millis(20) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let spun = thread_cpu_time() - t1;
        assert!(slept < Duration::from_millis(25), "sleeping counted {slept:?}");
        assert!(spun > Duration::ZERO, "spinning counted nothing");
    }

    #[test]
    fn a_span_counts_the_work_less_the_clocks_own_cost() {
        let cost = clock_cost();
        assert!(cost < Duration::from_millis(1), "reading the clock took {cost:?}");
        let began = thread_cpu_time();
        assert!(cpu_since(began) <= Duration::from_millis(1), "nothing done between the readings");
        let began = thread_cpu_time();
        let mut x = 0u64;
        while thread_cpu_time() - began < Duration::from_millis(3) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        assert!(cpu_since(began) >= Duration::from_millis(2), "3 ms of spinning counted");
    }
}
