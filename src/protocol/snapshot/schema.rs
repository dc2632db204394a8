//! What the world replicates: entity kinds, their fields, and the [`replicated!`] declaration.
//!
//! [`replicated!`]: crate::replicated

use crate::protocol::quant::FieldSpec;

/// An entity's stable id, chosen by the world.
pub type EntityId = u32;
/// An index into the [`Schema`]'s kinds.
pub type KindId = u16;

/// Kinds a schema may hold (kind ids use 15 bits; the sender keeps a flag in the 16th).
pub const MAX_KINDS: usize = 1 << 15;

/// A type whose values replicate as quantized fields. Implement it with [`replicated!`].
///
/// [`replicated!`]: crate::replicated
pub trait Replicate: Sized {
    /// The kind's name (for logs and the admin endpoint).
    const NAME: &'static str;
    /// The wire layout of each field, in declaration order.
    fn fields() -> Vec<FieldSpec>;
    /// Quantizes every field into `out` (exactly the kind's word count).
    fn quantize(&self, out: &mut [u32]);
    /// Rebuilds a value from quantized words.
    fn dequantize(words: &[u32]) -> Self;
    /// `a` blended towards `b` by `t`, field by field as each field's quantizer blends
    /// ([`Quantizer::blend`](crate::protocol::quant::Quantizer::blend)): what
    /// [`GameClient::entities`](crate::client::GameClient::entities) draws between two snapshots.
    fn blend(a: &Self, b: &Self, t: f32) -> Self;
}

/// One field's place in an entity's words, flattened for the codec's inner loops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FieldRange {
    pub start: u16,
    pub end: u16,
    pub at_rest: bool,
    /// A smallest-three rotation (four components: index, then three).
    pub rotation: bool,
}

/// One entity kind's layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindSchema {
    /// The kind's name.
    pub name: &'static str,
    fields: Vec<FieldSpec>,
    offsets: Vec<u16>,
    words: usize,
    pub(crate) ranges: Vec<FieldRange>,
    /// Bit width of each word.
    pub(crate) widths: Vec<u8>,
    /// Each word's default Exp-Golomb order for deltas (a packet may override them).
    pub(crate) orders: Vec<u8>,
}

impl KindSchema {
    /// A kind from its fields.
    pub fn new(name: &'static str, fields: Vec<FieldSpec>) -> Self {
        let mut offsets = Vec::with_capacity(fields.len());
        let mut ranges = Vec::with_capacity(fields.len());
        let mut widths = Vec::new();
        let mut words = 0usize;
        for f in &fields {
            offsets.push(words as u16);
            let start = words as u16;
            words += f.components as usize;
            widths.extend_from_slice(f.widths());
            let rotation = f.rotation && f.components == 4 && f.widths[0] == 2;
            ranges.push(FieldRange { start, end: words as u16, at_rest: f.at_rest, rotation });
        }
        let orders = widths.iter().map(|w| super::codec::default_order(u32::from(*w)) as u8).collect();
        Self { name, fields, offsets, words, ranges, widths, orders }
    }

    /// The fields, in order.
    pub fn fields(&self) -> &[FieldSpec] {
        &self.fields
    }

    /// Where each field's words start.
    pub fn offsets(&self) -> &[u16] {
        &self.offsets
    }

    /// Words per entity of this kind.
    pub fn words(&self) -> usize {
        self.words
    }

    /// Bits of a full (non-delta) entity of this kind, at most.
    pub fn max_full_bits(&self) -> u32 {
        self.fields.iter().map(|f| f.full_bits() + u32::from(f.at_rest)).sum()
    }
}

/// Every replicated kind of a game, shared by server and client (same order on both).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Schema {
    kinds: Vec<KindSchema>,
    names: Vec<std::any::TypeId>,
}

/// A kind registered twice, or too many kinds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// The type is registered already.
    #[error("kind {0} is registered twice")]
    Duplicate(&'static str),
    /// More than [`MAX_KINDS`] kinds.
    #[error("too many kinds (at most 32 768)")]
    TooMany,
    /// The kind has no fields, or more than 64 words.
    #[error("kind {0} must have 1 to 64 words")]
    BadSize(&'static str),
}

impl Schema {
    /// An empty schema.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `T`; its id is the registration order.
    ///
    /// # Errors
    /// When `T` is registered already, has no fields or too many, or there are too many kinds.
    pub fn register<T: Replicate + 'static>(&mut self) -> Result<KindId, SchemaError> {
        let type_id = std::any::TypeId::of::<T>();
        if self.names.contains(&type_id) {
            return Err(SchemaError::Duplicate(T::NAME));
        }
        let kind = KindSchema::new(T::NAME, T::fields());
        if kind.words == 0 || kind.words > 64 {
            return Err(SchemaError::BadSize(T::NAME));
        }
        let id = KindId::try_from(self.kinds.len())
            .ok()
            .filter(|id| usize::from(*id) < MAX_KINDS)
            .ok_or(SchemaError::TooMany)?;
        self.kinds.push(kind);
        self.names.push(type_id);
        Ok(id)
    }

    /// The id of a registered type.
    pub fn kind_of<T: 'static>(&self) -> Option<KindId> {
        let t = std::any::TypeId::of::<T>();
        self.names.iter().position(|n| *n == t).map(|i| i as KindId)
    }

    /// A kind's layout.
    pub fn kind(&self, id: KindId) -> Option<&KindSchema> {
        self.kinds.get(id as usize)
    }

    /// Number of kinds.
    pub fn len(&self) -> usize {
        self.kinds.len()
    }

    /// Whether no kind is registered.
    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }

    /// A 64-bit digest of the kinds in order: their names and every field's layout. Two
    /// schemas that code snapshots alike have the same one; a recording made with one
    /// refuses to play with another ([`crate::protocol::recording`]).
    ///
    /// ```
    /// use volley::protocol::snapshot::Schema;
    /// assert_eq!(Schema::new().fingerprint(), Schema::new().fingerprint());
    /// ```
    pub fn fingerprint(&self) -> u64 {
        // FNV-1a: stable across builds and platforms (unlike `std`'s hasher).
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut eat = |bytes: &[u8]| {
            for b in bytes {
                h ^= u64::from(*b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        };
        for k in &self.kinds {
            eat(&(k.name.len() as u32).to_le_bytes());
            eat(k.name.as_bytes());
            eat(&(k.fields.len() as u32).to_le_bytes());
            for f in &k.fields {
                eat(&[f.components, u8::from(f.at_rest), u8::from(f.rotation)]);
                eat(&f.widths);
            }
        }
        h
    }
}

/// Declares a replicated struct: each field names its type and its quantizer once, and the
/// macro writes the struct and its [`Replicate`] implementation — no bit code by hand.
///
/// ```
/// use glam::{Quat, Vec3};
/// use volley::protocol::quant::{Bits, QuatQ, Vec3Q};
///
/// volley::replicated! {
///     /// A crate in the arena.
///     #[derive(Debug, Clone, PartialEq)]
///     pub struct Crate {
///         /// Where it is, to 1/512 m.
///         pub position: Vec3 = Vec3Q::bounded(Vec3::splat(-256.0), Vec3::splat(256.0), 1.0 / 512.0),
///         /// Which way it faces.
///         pub rotation: Quat = QuatQ::new(9),
///         /// Hit points left.
///         pub health: u8 = Bits(7),
///     }
/// }
/// ```
#[macro_export]
macro_rules! replicated {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $( $(#[$fmeta:meta])* $fvis:vis $field:ident : $ty:ty = $quant:expr ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis struct $name {
            $( $(#[$fmeta])* $fvis $field: $ty, )*
        }

        impl $crate::protocol::snapshot::Replicate for $name {
            const NAME: &'static str = stringify!($name);

            fn fields() -> ::std::vec::Vec<$crate::protocol::quant::FieldSpec> {
                ::std::vec![ $( $crate::protocol::quant::Quantizer::<$ty>::spec(&$quant) ),* ]
            }

            fn quantize(&self, out: &mut [u32]) {
                let mut at = 0usize;
                $(
                    let q = $quant;
                    let n = $crate::protocol::quant::Quantizer::<$ty>::spec(&q).components as usize;
                    if let Some(slot) = out.get_mut(at..at + n) {
                        $crate::protocol::quant::Quantizer::<$ty>::quantize(&q, &self.$field, slot);
                    }
                    at += n;
                )*
                let _ = at;
            }

            fn dequantize(words: &[u32]) -> Self {
                let mut at = 0usize;
                $(
                    let q = $quant;
                    let n = $crate::protocol::quant::Quantizer::<$ty>::spec(&q).components as usize;
                    let $field = $crate::protocol::quant::Quantizer::<$ty>::dequantize(&q, words.get(at..at + n).unwrap_or(&[]));
                    at += n;
                )*
                let _ = at;
                Self { $( $field, )* }
            }

            fn blend(a: &Self, b: &Self, t: f32) -> Self {
                Self { $( $field: $crate::protocol::quant::Quantizer::<$ty>::blend(&$quant, &a.$field, &b.$field, t), )* }
            }
        }
    };
}
