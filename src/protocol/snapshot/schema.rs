//! What the world replicates: entity kinds, their fields, and the [`replicated!`] declaration.
//!
//! [`replicated!`]: crate::replicated

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::protocol::quant::{FieldSpec, Quant};

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
    /// Each field's name and quantizer as data, in declaration order, for clients without
    /// the game's Rust types ([`Schema::to_json`]). [`replicated!`] writes it; a hand-written
    /// kind may leave it empty (its fields are then `field0`, `field1`… with their words as
    /// they are).
    ///
    /// [`replicated!`]: crate::replicated
    fn describe() -> Vec<(&'static str, Quant)> {
        Vec::new()
    }
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
#[derive(Debug, Clone, PartialEq)]
pub struct KindSchema {
    /// The kind's name.
    pub name: Cow<'static, str>,
    fields: Vec<FieldSpec>,
    /// Each field's name and quantizer as data ([`Replicate::describe`]).
    described: Vec<(Cow<'static, str>, Quant)>,
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
        Self::described(name.into(), fields, Vec::new())
    }

    /// A kind from its fields, with their names and quantizers (missing ones are named by
    /// their place and go raw).
    fn described(name: Cow<'static, str>, fields: Vec<FieldSpec>, described: Vec<(Cow<'static, str>, Quant)>) -> Self {
        let described = (0..fields.len())
            .map(|i| described.get(i).cloned().unwrap_or_else(|| (format!("field{i}").into(), Quant::Raw)))
            .collect();
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
        Self { name, fields, described, offsets, words, ranges, widths, orders }
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

    /// Each field's name and quantizer, in order.
    pub fn described_fields(&self) -> impl Iterator<Item = (&str, Quant)> + '_ {
        self.described.iter().map(|(n, q)| (n.as_ref(), *q))
    }

    /// How many numbers an entity of this kind decodes to ([`KindSchema::decode`]): each
    /// field's [`Quant::values`], in order.
    pub fn values(&self) -> usize {
        self.described.iter().zip(&self.fields).map(|((_, q), f)| q.values(usize::from(f.components))).sum()
    }

    /// Decodes an entity's words into [`KindSchema::values`] numbers in `out` (cleared
    /// first), blended from `from`'s words towards `words` by `t` when `from` is given (as
    /// [`Quant::decode`], field by field).
    pub fn decode(&self, words: &[u32], from: Option<&[u32]>, t: f32, out: &mut Vec<f64>) {
        out.clear();
        for (i, ((_, q), f)) in self.described.iter().zip(&self.fields).enumerate() {
            let (start, n) = (usize::from(self.offsets[i]), usize::from(f.components));
            let at = out.len();
            out.resize(at + q.values(n), 0.0);
            fn part(w: &[u32], start: usize, n: usize) -> &[u32] {
                w.get(start..start + n).unwrap_or(&[])
            }
            q.decode(part(words, start, n), from.map(|f| part(f, start, n)), t, &mut out[at..]);
        }
    }

    /// Bits of a full (non-delta) entity of this kind, at most.
    pub fn max_full_bits(&self) -> u32 {
        self.fields.iter().map(|f| f.full_bits() + u32::from(f.at_rest)).sum()
    }
}

/// Every replicated kind of a game, shared by server and client (same order on both).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Schema {
    kinds: Vec<KindSchema>,
    /// Each kind's Rust type (`None` for a kind read from a description).
    names: Vec<Option<std::any::TypeId>>,
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
    /// A schema's description ([`Schema::from_json`]) could not be read, or does not hold.
    #[error("schema description: {0}")]
    Description(String),
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
        if self.names.contains(&Some(type_id)) {
            return Err(SchemaError::Duplicate(T::NAME));
        }
        let described = T::describe().into_iter().map(|(n, q)| (Cow::Borrowed(n), q)).collect();
        let kind = KindSchema::described(Cow::Borrowed(T::NAME), T::fields(), described);
        if kind.words == 0 || kind.words > 64 {
            return Err(SchemaError::BadSize(T::NAME));
        }
        let id = KindId::try_from(self.kinds.len())
            .ok()
            .filter(|id| usize::from(*id) < MAX_KINDS)
            .ok_or(SchemaError::TooMany)?;
        self.kinds.push(kind);
        self.names.push(Some(type_id));
        Ok(id)
    }

    /// The id of a registered type.
    pub fn kind_of<T: 'static>(&self) -> Option<KindId> {
        let t = std::any::TypeId::of::<T>();
        self.names.iter().position(|n| *n == Some(t)).map(|i| i as KindId)
    }

    /// The id of the kind named `name`.
    pub fn kind_named(&self, name: &str) -> Option<KindId> {
        self.kinds.iter().position(|k| k.name == name).map(|i| i as KindId)
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

    /// The schema as data ([`SchemaDoc`]): what a client in another language reads to decode
    /// snapshots without the game's Rust types (`volley schema` prints the arena's).
    pub fn describe(&self) -> SchemaDoc {
        SchemaDoc {
            format: SCHEMA_DOC_FORMAT,
            fingerprint: format!("{:016x}", self.fingerprint()),
            kinds: self
                .kinds
                .iter()
                .map(|k| KindDoc {
                    name: k.name.to_string(),
                    fields: k
                        .fields
                        .iter()
                        .zip(&k.described)
                        .map(|(f, (name, quant))| FieldDoc {
                            name: name.to_string(),
                            quant: *quant,
                            widths: f.widths().to_vec(),
                            at_rest: f.at_rest,
                            rotation: f.rotation,
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    /// [`Schema::describe`] as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(&self.describe()).unwrap_or_default()
    }

    /// A schema from its description ([`Schema::to_json`]), with no Rust types behind its
    /// kinds: a client reads its entities as numbers ([`KindSchema::decode`]). Kinds are
    /// looked up by name ([`Schema::kind_named`]).
    ///
    /// ```
    /// # volley::replicated! {
    /// #     /// A runner.
    /// #     #[derive(Debug, Clone, PartialEq)]
    /// #     pub struct Runner { pub position: glam::Vec2 = volley::protocol::quant::Vec2Q::bounded(glam::Vec2::splat(-50.0), glam::Vec2::splat(50.0), 0.01) }
    /// # }
    /// use volley::protocol::snapshot::Schema;
    /// let mut schema = Schema::new();
    /// schema.register::<Runner>().unwrap();
    /// let read = Schema::from_json(&schema.to_json()).unwrap();
    /// assert_eq!(read.fingerprint(), schema.fingerprint());
    /// assert_eq!(read.kind(read.kind_named("Runner").unwrap()).unwrap().values(), 2);
    /// ```
    ///
    /// # Errors
    /// [`SchemaError::Description`] when the text is not such a description (an unknown
    /// format, a quantizer whose layout is not the one stated, a width out of 1 to 32, a
    /// kind with no words or more than 64), or when its fingerprint is not the schema's.
    pub fn from_json(text: &str) -> Result<Self, SchemaError> {
        let bad = |why: String| SchemaError::Description(why);
        if text.len() > MAX_SCHEMA_JSON_BYTES {
            return Err(bad(format!("{} bytes, at most {MAX_SCHEMA_JSON_BYTES}", text.len())));
        }
        let doc: SchemaDoc = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
        if doc.format != SCHEMA_DOC_FORMAT {
            return Err(bad(format!("format {}, this library reads {SCHEMA_DOC_FORMAT}", doc.format)));
        }
        if doc.kinds.len() > MAX_KINDS {
            return Err(bad(format!("{} kinds, at most {MAX_KINDS}", doc.kinds.len())));
        }
        let mut schema = Schema::new();
        for k in doc.kinds {
            let mut fields = Vec::with_capacity(k.fields.len());
            let mut described = Vec::with_capacity(k.fields.len());
            for f in k.fields {
                let n = f.widths.len();
                if !(1..=4).contains(&n) || f.widths.iter().any(|w| !(1..=32).contains(w)) {
                    return Err(bad(format!("{}.{}: 1 to 4 widths of 1 to 32 bits", k.name, f.name)));
                }
                let mut widths = [0u8; 4];
                widths[..n].copy_from_slice(&f.widths);
                let spec = FieldSpec { components: n as u8, widths, at_rest: f.at_rest, rotation: f.rotation };
                if f.quant.spec().is_some_and(|q| q != spec) {
                    return Err(bad(format!("{}.{}: its quantizer does not give the layout stated", k.name, f.name)));
                }
                fields.push(spec);
                described.push((Cow::Owned(f.name), f.quant));
            }
            let kind = KindSchema::described(Cow::Owned(k.name), fields, described);
            if kind.words == 0 || kind.words > 64 {
                return Err(bad(format!("kind {} must have 1 to 64 words", kind.name)));
            }
            schema.kinds.push(kind);
            schema.names.push(None);
        }
        let fingerprint = format!("{:016x}", schema.fingerprint());
        if doc.fingerprint != fingerprint {
            return Err(bad(format!("fingerprint {} stated, {fingerprint} computed", doc.fingerprint)));
        }
        Ok(schema)
    }
}

/// The format of [`SchemaDoc`] this library writes and reads.
pub const SCHEMA_DOC_FORMAT: u32 = 1;

/// The longest schema description [`Schema::from_json`] reads, in bytes.
pub const MAX_SCHEMA_JSON_BYTES: usize = 4 << 20;

/// A schema as data ([`Schema::describe`]), for clients in other languages: its kinds in
/// order (a kind's id is its place), each field's name, quantizer and wire layout, and the
/// fingerprint the two sides compare.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchemaDoc {
    /// [`SCHEMA_DOC_FORMAT`].
    pub format: u32,
    /// [`Schema::fingerprint`], 16 hex digits.
    pub fingerprint: String,
    /// The kinds, by id.
    pub kinds: Vec<KindDoc>,
}

/// One kind in a [`SchemaDoc`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KindDoc {
    /// Its name.
    pub name: String,
    /// Its fields, in order.
    pub fields: Vec<FieldDoc>,
}

/// One field in a [`KindDoc`]: its name, its quantizer, and its layout on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldDoc {
    /// Its name.
    pub name: String,
    /// How its words become numbers.
    pub quant: Quant,
    /// Bits of each component (1 to 4 of them).
    pub widths: Vec<u8>,
    /// Whether all-zero costs one bit.
    pub at_rest: bool,
    /// Whether it is a smallest-three rotation.
    pub rotation: bool,
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

            fn describe() -> ::std::vec::Vec<(&'static str, $crate::protocol::quant::Quant)> {
                ::std::vec![ $( (stringify!($field), $crate::protocol::quant::Quantizer::<$ty>::describe(&$quant)) ),* ]
            }
        }
    };
}
