//! The merged delta snapshot: what the world sends each player every snapshot tick.
//!
//! - [`schema`]: entity kinds and their quantized fields, declared with
//!   [`replicated!`](crate::replicated).
//! - [`world`]: one tick's quantized state, shared (`Arc`) by every player.
//! - [`sender`]: per player, the history of sent snapshots and the encoder of a delta against
//!   the newest snapshot the player acknowledged (full snapshot when there is none), within a
//!   byte budget, with a priority accumulator.
//! - [`receiver`]: per client, the decoder and the ring of snapshots it can be based on.
//!
//! Wire format (bits, least significant first): tick (32), has-baseline (1), and with a
//! baseline `tick - baseline - 1` (Exp-Golomb k=2), has-second-reference (1) and its distance
//! before the baseline (k=2), range-coded (1), and in a range-coded packet with a second
//! reference, predicted by the game's [`Predictor`] (1); then the record count (k=4), the gap
//! code's order (2 bits), and records in id order: id gap (Exp-Golomb of that order), an
//! operation when there is a baseline (`0` changed, `10` created, `11` destroyed), and for
//! created entities the kind and every field, for changed ones a per-field change mask and
//! component deltas. Unchanged entities cost nothing. In a range-coded packet (a sender that
//! predicts) the records' places, operations and the changed entities' bits (prediction
//! flag, masks, deltas) go to a range-coded stream after the bit stream instead, its length in
//! the packet's last two bytes. There a record's place is one flag per baseline entity passed
//! ("the next record is here", or for a creation before it, whose id gap then follows), in
//! the context of the flag before and of whether that entity moved between the second
//! reference and the baseline: moving entities are the ones likely to change. Likewise a
//! changed entity's field mask is coded by which fields moved, each component's "zero
//! residual" flag by whether it moved, and a residual's sign by which way it moved (and
//! whether the delta is against the prediction); a non-zero residual's length goes through a
//! tree as deep as the component's width needs, then its sign, the bit below its leading one
//! (modelled) and the rest plain.

mod cache;
mod codec;
pub mod predictor;
pub mod receiver;
pub mod schema;
pub mod sender;
pub mod world;

pub use predictor::Predictor;
pub use receiver::SnapshotReceiver;
pub use schema::{
    EntityId, FieldDoc, KindDoc, KindId, KindSchema, MAX_KINDS, MAX_SCHEMA_JSON_BYTES, Replicate, SCHEMA_DOC_FORMAT,
    Schema, SchemaDoc, SchemaError,
};
pub use sender::{EncodeStats, Interest, SenderConfig, SnapshotSender};
pub use world::{EntityRef, SnapshotBuilder, WorldError, WorldSnapshot};

use crate::protocol::bits::BitError;

/// Why a snapshot could not be encoded or decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    /// The input ended early or is inconsistent.
    #[error("malformed snapshot")]
    Malformed,
    /// A kind the schema does not have.
    #[error("unknown entity kind")]
    UnknownKind,
    /// The delta's baseline is no longer (or was never) held by the receiver.
    #[error("baseline snapshot missing")]
    BaselineMissing,
    /// Ticks passed to the sender must increase.
    #[error("snapshot ticks must increase")]
    TickNotIncreasing,
    /// Not even the header fits in the budget.
    #[error("snapshot does not fit in its budget")]
    OverBudget,
    /// The snapshot was coded against the game's own [`Predictor`], and this receiver has
    /// none.
    #[error("snapshot needs the game's predictor, and the receiver has none")]
    PredictorMissing,
}

impl From<BitError> for SnapshotError {
    fn from(_: BitError) -> Self {
        Self::Malformed
    }
}

/// Bits of a kind id on the wire.
fn kind_bits(schema: &Schema) -> u32 {
    crate::protocol::bits::bits_for(schema.len().saturating_sub(1) as u32)
}
