//! Each player's figures (`/players`, never a label) and the link figures every player reports once a second.

use super::ServerMetrics;
use serde::Serialize;
use std::time::Duration;

/// One player's figures for the admin endpoint (never a label).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct PlayerStats {
    /// The player's id (slot).
    pub id: u32,
    /// The client's address (shown only with `show_addresses`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub addr: String,
    /// Seconds since the connection was accepted.
    pub connected_seconds: f64,
    /// Smoothed round-trip time.
    pub rtt_seconds: f64,
    /// Round-trip variation.
    pub jitter_seconds: f64,
    /// Estimated packet loss.
    pub loss_ratio: f64,
    /// Ticks between the newest snapshot and the baseline it was encoded against (`None`:
    /// the last one was full).
    pub baseline_age_ticks: Option<u32>,
    /// Bytes sent to this player.
    pub sent_bytes: u64,
    /// Bytes received from this player.
    pub received_bytes: u64,
    /// Snapshots sent.
    pub snapshots: u64,
    /// Snapshots sent in full.
    pub full_snapshots: u64,
    /// Reliable messages resent.
    pub reliable_resends: u64,
    /// Reliable messages waiting for an ack.
    pub reliable_queue: u64,
    /// Its send rate budget, in bytes a second.
    pub send_rate_bytes_per_second: u32,
}

impl ServerMetrics {
    /// Records one player's link figures and send rate in bytes a second (sampled about
    /// once a second per player).
    pub(crate) fn record_link(&self, rtt: Duration, jitter: Duration, loss: f64, send_rate: u32) {
        self.hist.send_rate.record(f64::from(send_rate));
        self.hist.rtt.record(rtt.as_secs_f64());
        self.hist.jitter.record(jitter.as_secs_f64());
        self.hist.loss.record(loss.clamp(0.0, 1.0));
    }

    /// A session resumed on a new connection `gap` after its client was last heard.
    pub(crate) fn record_resumed(&self, gap: Duration) {
        self.resumed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.hist.resume_gap.record(gap.as_secs_f64());
    }

    /// Replaces one player's figures (the player actor calls this about once a second).
    pub(crate) fn set_player(&self, stats: PlayerStats) {
        if let Ok(mut m) = self.per_player.lock() {
            m.insert(stats.id, stats);
        }
    }

    /// A connected player's address, from its figures.
    pub(crate) fn player_addr(&self, id: u32) -> Option<std::net::SocketAddr> {
        self.per_player.lock().ok()?.get(&id)?.addr.parse().ok()
    }

    /// Whether a player's figures are held (it is connected).
    pub(crate) fn has_player(&self, id: u32) -> bool {
        self.per_player.lock().is_ok_and(|m| m.contains_key(&id))
    }

    /// The `q` quantile (0 to 1) of the connected players' round-trip times, from their
    /// newest figures (each refreshed about once a second): a median (`0.5`) that one hostile
    /// client's seconds-long RTT cannot move, unlike a mean. Zero with no player.
    pub fn rtt_quantile(&self, q: f64) -> Duration {
        let mut rtts: Vec<f64> =
            self.per_player.lock().map(|m| m.values().map(|p| p.rtt_seconds).collect()).unwrap_or_default();
        if rtts.is_empty() {
            return Duration::ZERO;
        }
        rtts.sort_unstable_by(f64::total_cmp);
        let i = ((rtts.len() - 1) as f64 * q.clamp(0.0, 1.0)).round() as usize;
        Duration::from_secs_f64(rtts[i].max(0.0))
    }

    /// Forgets a player's figures.
    pub(crate) fn remove_player(&self, id: u32) {
        if let Ok(mut m) = self.per_player.lock() {
            m.remove(&id);
        }
    }

    /// Every connected player's figures, as a JSON array; with their addresses only if
    /// `with_addresses`.
    pub fn players_json(&self, with_addresses: bool) -> String {
        let mut list: Vec<PlayerStats> =
            self.per_player.lock().map(|m| m.values().cloned().collect()).unwrap_or_default();
        if !with_addresses {
            list.iter_mut().for_each(|p| p.addr.clear());
        }
        serde_json::to_string(&list).unwrap_or_else(|_| "[]".into())
    }
}
