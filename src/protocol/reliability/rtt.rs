//! Round-trip time, jitter and packet loss estimates from acknowledgements.

use std::time::Duration;

/// Smoothed RTT with variance (RFC 6298's estimator), and an exponentially weighted loss ratio.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkEstimate {
    srtt: Option<f64>,
    rttvar: f64,
    loss: f64,
    min_rtt: Option<f64>,
}

impl Default for LinkEstimate {
    fn default() -> Self {
        Self { srtt: None, rttvar: 0.0, loss: 0.0, min_rtt: None }
    }
}

impl LinkEstimate {
    /// Takes one round-trip sample.
    pub fn rtt_sample(&mut self, rtt: Duration) {
        let r = rtt.as_secs_f64();
        self.min_rtt = Some(self.min_rtt.map_or(r, |m| m.min(r)));
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2.0;
            }
            Some(s) => {
                self.rttvar = 0.75 * self.rttvar + 0.25 * (s - r).abs();
                self.srtt = Some(0.875 * s + 0.125 * r);
            }
        }
    }

    /// Records whether one packet was delivered (acknowledged) or lost.
    pub fn delivery(&mut self, delivered: bool) {
        let x = if delivered { 0.0 } else { 1.0 };
        self.loss = 0.95 * self.loss + 0.05 * x;
    }

    /// Smoothed round-trip time (zero before the first sample).
    pub fn rtt(&self) -> Duration {
        Duration::from_secs_f64(self.srtt.unwrap_or(0.0))
    }

    /// Round-trip variation: the jitter estimate.
    pub fn jitter(&self) -> Duration {
        Duration::from_secs_f64(self.rttvar)
    }

    /// Smallest round trip seen.
    pub fn min_rtt(&self) -> Duration {
        Duration::from_secs_f64(self.min_rtt.unwrap_or(0.0))
    }

    /// Fraction of packets lost lately (0 to 1).
    pub fn loss(&self) -> f64 {
        self.loss
    }

    /// How long to wait for an ack before resending: srtt + 4·rttvar, 20 ms to 1 s, and
    /// 100 ms before any sample.
    pub fn resend_timeout(&self) -> Duration {
        match self.srtt {
            None => Duration::from_millis(100),
            Some(s) => Duration::from_secs_f64((s + 4.0 * self.rttvar).clamp(0.02, 1.0)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converges_to_a_steady_rtt_with_small_jitter() {
        let mut e = LinkEstimate::default();
        assert_eq!(e.resend_timeout(), Duration::from_millis(100));
        for i in 0..200 {
            e.rtt_sample(Duration::from_millis(50 + (i % 3)));
        }
        assert!((e.rtt().as_secs_f64() - 0.051).abs() < 0.002, "{:?}", e.rtt());
        assert!(e.jitter() < Duration::from_millis(3));
        assert_eq!(e.min_rtt(), Duration::from_millis(50));
        assert!(e.resend_timeout() < Duration::from_millis(65));
    }

    #[test]
    fn loss_tracks_the_delivery_ratio() {
        let mut e = LinkEstimate::default();
        for i in 0..1000 {
            e.delivery(i % 5 != 0);
        }
        assert!((e.loss() - 0.2).abs() < 0.06, "{}", e.loss());
    }
}
