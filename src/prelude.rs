//! What a game's server and client code usually needs, in one import:
//!
//! ```
//! use volley::prelude::*;
//!
//! volley::replicated! {
//!     /// A player's dot.
//!     #[derive(Debug, Clone, PartialEq)]
//!     pub struct Dot {
//!         /// Where it is, to the centimetre in a 200 m square.
//!         pub position: glam::Vec2 = Vec2Q::bounded(glam::Vec2::splat(-100.0), glam::Vec2::splat(100.0), 0.01),
//!     }
//! }
//!
//! #[derive(Default)]
//! struct Dots(Vec<PlayerId>);
//!
//! impl World for Dots {
//!     fn schema(&self) -> Schema {
//!         let mut s = Schema::new();
//!         s.register::<Dot>().expect("a fresh schema");
//!         s
//!     }
//!     fn join(&mut self, player: PlayerId) {
//!         self.0.push(player);
//!     }
//!     fn leave(&mut self, player: PlayerId) {
//!         self.0.retain(|p| *p != player);
//!     }
//!     fn input(&mut self, _: PlayerId, _: &[u8]) {}
//!     fn tick(&mut self, _: u32, _: std::time::Duration) {}
//!     fn snapshot(&self, out: &mut SnapshotBuilder<'_>) {
//!         for p in &self.0 {
//!             let _ = out.insert(*p, &Dot { position: glam::Vec2::ZERO });
//!         }
//!     }
//! }
//!
//! // The same world in the deterministic stepper, with one client on a perfect link.
//! let mut stepper = Stepper::new(Dots::default(), 60, 4);
//! stepper.add_client(LinkProfile::PERFECT);
//! stepper.run(30);
//! assert_eq!(stepper.players(), 1);
//! ```

pub use crate::DEFAULT_PROTOCOL_ID;
pub use crate::client::polled::PolledClient;
pub use crate::client::udp::UdpClient;
pub use crate::client::{GameClient, LinkStatus, ViewMode};
pub use crate::protocol::input::ViewTime;
pub use crate::protocol::netcode::token::{ConnectToken, TokenParams};
pub use crate::protocol::netcode::{Key, generate_key};
pub use crate::protocol::quant::{AngleQ, Bits, Flag, QuatQ, Vec2Q, Vec3Q};
pub use crate::protocol::session::SessionEnd;
pub use crate::protocol::snapshot::{EntityId, Interest, Schema, SnapshotBuilder, WorldSnapshot};
pub use crate::protocol::system::{EnterReason, SpectatorControl, SpectatorStatus, WorldNotice};
pub use crate::server::extensions::spectate::{Hearing, SpectatorWorld, Spectators};
pub use crate::server::{
    Audience, Everything, JoinInfo, Origin, Outbox, PlayerId, Relevancy, ServerConfig, ServerHandle, World, WorldFault,
    WorldId, WorldOptions, Worlds, decode_message, start, unix_now,
};
pub use crate::testing::Stepper;
pub use crate::transport::conditioner::LinkProfile;
