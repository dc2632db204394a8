//! Reliability above the connection layer: packet acks, RTT/jitter/loss estimates, a
//! newest-wins state channel, reliable ordered messages with fragmentation, and unreliable
//! events, and a client's send rate that follows its link (sans-IO; time is passed in).

pub mod channel;
pub mod rate;
pub mod rtt;
pub mod seq;

pub use channel::{Channel, ChannelConfig, ChannelStats, Mark, QueueError, ReceiveError};
pub use rate::{RateConfig, SendRate};
pub use rtt::LinkEstimate;
