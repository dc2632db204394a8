//! Quantization: turning game values into small unsigned integers and back.
//!
//! Each quantizer describes a field once — its range and resolution — and from that the codec
//! knows how many components (1 to 4) and bits it takes. Users name a quantizer per field in
//! [`replicated!`](crate::replicated) and write no bit code. All constructors are `const fn`,
//! so a quantizer written inline in a declaration costs nothing at run time.
//!
//! | quantizer | value | components |
//! | --- | --- | --- |
//! | [`Bits`] | `u32`, `u16`, `u8` | 1 |
//! | [`Flag`] | `bool` | 1 (1 bit) |
//! | [`Scalar`] | `f32` in a bounded range | 1 |
//! | [`Vec2Q`], [`Vec3Q`] | `glam::Vec2`, `glam::Vec3` in a box | 2, 3 |
//! | [`VelocityQ`] | `glam::Vec3` with an "at rest" case that costs 1 bit | 3 |
//! | [`QuatQ`] | `glam::Quat`, smallest three (9 bits a component by default) | 4 |
//! | [`AngleQ`] | `f32` radians, wrapped | 1 |
//! | [`FloatQ`] | `f32` in a custom float format (sign, exponent, mantissa, bias) | 1 |
//!
//! Each built-in quantizer also describes itself as data ([`Quant`], [`Quantizer::describe`]):
//! a client in another language decodes a field's words from that description alone.

use glam::{Quat, Vec2, Vec3};
use serde::{Deserialize, Serialize};

/// How a field is laid out on the wire: up to four unsigned components.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldSpec {
    /// Components used (1 to 4).
    pub components: u8,
    /// Bits of each component (1 to 32); unused entries are 0.
    pub widths: [u8; 4],
    /// Whether an all-zero value is common enough to cost one bit ("at rest").
    pub at_rest: bool,
    /// Whether the field is a smallest-three rotation ([`QuatQ`]'s layout: a 2-bit index of
    /// the dropped component, then three components in ±1/√2): predicted snapshots
    /// extrapolate it as a rotation, not component by component.
    pub rotation: bool,
}

impl FieldSpec {
    /// One component of `bits` bits.
    pub const fn single(bits: u32) -> Self {
        Self { components: 1, widths: [bits as u8, 0, 0, 0], at_rest: false, rotation: false }
    }

    /// The widths of the components in use.
    pub fn widths(&self) -> &[u8] {
        &self.widths[..self.components as usize]
    }

    /// Bits of the full (non-delta) encoding, excluding any at-rest flag.
    pub fn full_bits(&self) -> u32 {
        self.widths().iter().map(|w| u32::from(*w)).sum()
    }
}

/// A field quantizer for values of type `T`.
pub trait Quantizer<T> {
    /// The wire layout.
    fn spec(&self) -> FieldSpec;
    /// Quantizes `value` into `out` (exactly `spec().components` words), each within its width.
    fn quantize(&self, value: &T, out: &mut [u32]);
    /// The value that `words` stand for.
    fn dequantize(&self, words: &[u32]) -> T;
    /// `a` blended towards `b` by `t` (0: `a`, 1: `b`; past 1 extrapolates where the value is
    /// continuous): what a client draws between two snapshots. By default the nearer of
    /// the two (integers and flags step at the midpoint); real numbers and vectors blend
    /// linearly, rotations along the shorter arc, angles the shorter way round.
    fn blend(&self, a: &T, b: &T, t: f32) -> T
    where
        T: Clone,
    {
        if t < 0.5 { a.clone() } else { b.clone() }
    }

    /// The quantizer as data, for clients without the game's Rust types (see [`Quant`]). A
    /// game's own quantizer need not say: its words then go to such clients as they are
    /// ([`Quant::Raw`]).
    fn describe(&self) -> Quant {
        Quant::Raw
    }
}

/// `a + (b - a)·t`, for the real-valued quantizers.
fn lerp(a: f32, b: f32, t: f32) -> f32 {
    a + (b - a) * t
}

const fn mask(bits: u32) -> u32 {
    if bits >= 32 { u32::MAX } else { (1u32 << bits) - 1 }
}

/// Bits needed to hold `0..=max` (at least 1).
const fn bits_for(max: u32) -> u32 {
    let b = 32 - max.leading_zeros();
    if b == 0 { 1 } else { b }
}

/// Reads component `i`, or 0 if absent (never panics on a short slice).
fn word(words: &[u32], i: usize) -> u32 {
    words.get(i).copied().unwrap_or(0)
}

fn put(out: &mut [u32], i: usize, v: u32) {
    if let Some(w) = out.get_mut(i) {
        *w = v;
    }
}

/// An unsigned integer in `bits` bits (values above the range are clamped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bits(pub u32);

impl Quantizer<u32> for Bits {
    fn spec(&self) -> FieldSpec {
        FieldSpec::single(self.0.clamp(1, 32))
    }
    fn describe(&self) -> Quant {
        Quant::Bits { bits: self.0.clamp(1, 32) }
    }
    fn quantize(&self, value: &u32, out: &mut [u32]) {
        put(out, 0, (*value).min(mask(self.0.clamp(1, 32))));
    }
    fn dequantize(&self, words: &[u32]) -> u32 {
        word(words, 0) & mask(self.0.clamp(1, 32))
    }
}

impl Quantizer<u16> for Bits {
    fn spec(&self) -> FieldSpec {
        FieldSpec::single(self.0.clamp(1, 16))
    }
    fn describe(&self) -> Quant {
        Quant::Bits { bits: self.0.clamp(1, 16) }
    }
    fn quantize(&self, value: &u16, out: &mut [u32]) {
        put(out, 0, u32::from(*value).min(mask(self.0.clamp(1, 16))));
    }
    fn dequantize(&self, words: &[u32]) -> u16 {
        (word(words, 0) & mask(self.0.clamp(1, 16))) as u16
    }
}

impl Quantizer<u8> for Bits {
    fn spec(&self) -> FieldSpec {
        FieldSpec::single(self.0.clamp(1, 8))
    }
    fn describe(&self) -> Quant {
        Quant::Bits { bits: self.0.clamp(1, 8) }
    }
    fn quantize(&self, value: &u8, out: &mut [u32]) {
        put(out, 0, u32::from(*value).min(mask(self.0.clamp(1, 8))));
    }
    fn dequantize(&self, words: &[u32]) -> u8 {
        (word(words, 0) & mask(self.0.clamp(1, 8))) as u8
    }
}

/// A boolean in one bit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flag;

impl Quantizer<bool> for Flag {
    fn spec(&self) -> FieldSpec {
        FieldSpec::single(1)
    }
    fn describe(&self) -> Quant {
        Quant::Flag
    }
    fn quantize(&self, value: &bool, out: &mut [u32]) {
        put(out, 0, u32::from(*value));
    }
    fn dequantize(&self, words: &[u32]) -> bool {
        word(words, 0) & 1 == 1
    }
}

/// A real number in `[min, max]` with a fixed step; values outside are clamped, NaN is `min`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scalar {
    min: f32,
    max: f32,
    steps: u32,
    bits: u32,
}

impl Scalar {
    /// Steps of at most `resolution` over `[min, max]` (for example 1/512 for 512 units a
    /// metre). A range too fine for 32 bits is coarsened to fit.
    pub const fn with_resolution(min: f32, max: f32, resolution: f32) -> Self {
        let span = if max > min { max - min } else { 0.0 };
        let res = if resolution > 0.0 { resolution } else { 1.0 };
        let steps_f = span / res + 0.999_999;
        let steps = if steps_f >= 4_294_967_295.0 { u32::MAX } else { steps_f as u32 };
        Self { min, max: if max > min { max } else { min }, steps, bits: bits_for(steps) }
    }

    /// `bits` bits (1 to 32) over `[min, max]`.
    pub const fn with_bits(min: f32, max: f32, bits: u32) -> Self {
        let bits = if bits == 0 {
            1
        } else if bits > 32 {
            32
        } else {
            bits
        };
        Self { min, max: if max > min { max } else { min }, steps: mask(bits), bits }
    }

    /// Bits per value.
    pub const fn bits(&self) -> u32 {
        self.bits
    }

    /// The largest error of a value inside the range (half a step).
    pub fn max_error(&self) -> f32 {
        if self.steps == 0 { 0.0 } else { (self.max - self.min) / self.steps as f32 * 0.5 }
    }

    /// Quantizes one value.
    pub fn q(&self, v: f32) -> u32 {
        if self.steps == 0 || v.is_nan() {
            return 0;
        }
        let (min, max) = (f64::from(self.min), f64::from(self.max));
        let t = ((f64::from(v) - min) / (max - min)).clamp(0.0, 1.0);
        (t * f64::from(self.steps)).round() as u32
    }

    /// The value a quantized word stands for.
    pub fn dq(&self, q: u32) -> f32 {
        if self.steps == 0 {
            return self.min;
        }
        let t = f64::from(q.min(self.steps)) / f64::from(self.steps);
        (f64::from(self.min) + t * f64::from(self.max - self.min)) as f32
    }
}

impl Quantizer<f32> for Scalar {
    fn spec(&self) -> FieldSpec {
        FieldSpec::single(self.bits)
    }
    fn describe(&self) -> Quant {
        Quant::Scalar((*self).into())
    }
    fn quantize(&self, value: &f32, out: &mut [u32]) {
        put(out, 0, self.q(*value));
    }
    fn dequantize(&self, words: &[u32]) -> f32 {
        self.dq(word(words, 0))
    }
    fn blend(&self, a: &f32, b: &f32, t: f32) -> f32 {
        lerp(*a, *b, t)
    }
}

/// A `Vec2` in a box, one [`Scalar`] an axis.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Vec2Q {
    /// x axis.
    pub x: Scalar,
    /// y axis.
    pub y: Scalar,
}

impl Vec2Q {
    /// The same resolution on both axes.
    pub const fn bounded(min: Vec2, max: Vec2, resolution: f32) -> Self {
        Self {
            x: Scalar::with_resolution(min.x, max.x, resolution),
            y: Scalar::with_resolution(min.y, max.y, resolution),
        }
    }
}

impl Quantizer<Vec2> for Vec2Q {
    fn spec(&self) -> FieldSpec {
        FieldSpec {
            components: 2,
            widths: [self.x.bits as u8, self.y.bits as u8, 0, 0],
            at_rest: false,
            rotation: false,
        }
    }
    fn describe(&self) -> Quant {
        Quant::Vec2 { x: self.x.into(), y: self.y.into() }
    }
    fn quantize(&self, v: &Vec2, out: &mut [u32]) {
        put(out, 0, self.x.q(v.x));
        put(out, 1, self.y.q(v.y));
    }
    fn dequantize(&self, w: &[u32]) -> Vec2 {
        Vec2::new(self.x.dq(word(w, 0)), self.y.dq(word(w, 1)))
    }
    fn blend(&self, a: &Vec2, b: &Vec2, t: f32) -> Vec2 {
        a.lerp(*b, t)
    }
}

/// A `Vec3` in a box, one [`Scalar`] an axis.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Vec3Q {
    /// x axis.
    pub x: Scalar,
    /// y axis.
    pub y: Scalar,
    /// z axis.
    pub z: Scalar,
}

impl Vec3Q {
    /// The same resolution on every axis.
    pub const fn bounded(min: Vec3, max: Vec3, resolution: f32) -> Self {
        Self {
            x: Scalar::with_resolution(min.x, max.x, resolution),
            y: Scalar::with_resolution(min.y, max.y, resolution),
            z: Scalar::with_resolution(min.z, max.z, resolution),
        }
    }

    fn spec3(&self, at_rest: bool) -> FieldSpec {
        FieldSpec {
            components: 3,
            widths: [self.x.bits as u8, self.y.bits as u8, self.z.bits as u8, 0],
            at_rest,
            rotation: false,
        }
    }

    fn q3(&self, v: &Vec3, out: &mut [u32]) {
        put(out, 0, self.x.q(v.x));
        put(out, 1, self.y.q(v.y));
        put(out, 2, self.z.q(v.z));
    }

    fn dq3(&self, w: &[u32]) -> Vec3 {
        Vec3::new(self.x.dq(word(w, 0)), self.y.dq(word(w, 1)), self.z.dq(word(w, 2)))
    }
}

impl Quantizer<Vec3> for Vec3Q {
    fn spec(&self) -> FieldSpec {
        self.spec3(false)
    }
    fn describe(&self) -> Quant {
        Quant::Vec3 { x: self.x.into(), y: self.y.into(), z: self.z.into() }
    }
    fn quantize(&self, v: &Vec3, out: &mut [u32]) {
        self.q3(v, out);
    }
    fn dequantize(&self, w: &[u32]) -> Vec3 {
        self.dq3(w)
    }
    fn blend(&self, a: &Vec3, b: &Vec3, t: f32) -> Vec3 {
        a.lerp(*b, t)
    }
}

/// A velocity: a [`Vec3Q`] symmetric around zero whose "at rest" value (exactly zero, or
/// anything that quantizes to it) costs a single bit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VelocityQ(Vec3Q);

impl VelocityQ {
    /// Each axis in `[-max, max]` with the given resolution.
    pub const fn new(max: f32, resolution: f32) -> Self {
        let m = Vec3::splat(max);
        Self(Vec3Q::bounded(Vec3::new(-max, -max, -max), m, resolution))
    }

    /// Which word means zero on each axis (the at-rest value the codec compares against).
    fn zero_words(&self) -> [u32; 3] {
        [self.0.x.q(0.0), self.0.y.q(0.0), self.0.z.q(0.0)]
    }
}

impl Quantizer<Vec3> for VelocityQ {
    fn spec(&self) -> FieldSpec {
        self.0.spec3(true)
    }
    fn describe(&self) -> Quant {
        Quant::Velocity { x: self.0.x.into(), y: self.0.y.into(), z: self.0.z.into() }
    }
    fn quantize(&self, v: &Vec3, out: &mut [u32]) {
        // Store offsets from the zero word so that "at rest" is all-zero words.
        let z = self.zero_words();
        let mut raw = [0u32; 3];
        self.0.q3(v, &mut raw);
        for i in 0..3 {
            put(out, i, raw[i].wrapping_sub(z[i]) & mask(u32::from(self.spec().widths[i])));
        }
    }
    fn dequantize(&self, w: &[u32]) -> Vec3 {
        let z = self.zero_words();
        let spec = self.spec();
        let raw: [u32; 3] = std::array::from_fn(|i| word(w, i).wrapping_add(z[i]) & mask(u32::from(spec.widths[i])));
        self.0.dq3(&raw)
    }
    fn blend(&self, a: &Vec3, b: &Vec3, t: f32) -> Vec3 {
        a.lerp(*b, t)
    }
}

/// A rotation as the smallest three components of a unit quaternion: 2 bits name the
/// dropped largest component, and the other three (in ±1/√2) take `bits` bits each.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QuatQ {
    component: Scalar,
}

impl QuatQ {
    /// `bits` bits a component (9 is the classic choice: 29 bits in all).
    pub const fn new(bits: u32) -> Self {
        let r = std::f32::consts::FRAC_1_SQRT_2;
        Self { component: Scalar::with_bits(-r, r, bits) }
    }
}

impl Default for QuatQ {
    fn default() -> Self {
        Self::new(9)
    }
}

impl Quantizer<Quat> for QuatQ {
    fn spec(&self) -> FieldSpec {
        let b = self.component.bits as u8;
        FieldSpec { components: 4, widths: [2, b, b, b], at_rest: false, rotation: true }
    }
    fn describe(&self) -> Quant {
        Quant::Quat { bits: self.component.bits }
    }
    fn quantize(&self, q: &Quat, out: &mut [u32]) {
        let q = if q.is_finite() && q.length_squared() > 0.0 { q.normalize() } else { Quat::IDENTITY };
        let a = q.to_array();
        let mut largest = 0;
        for i in 1..4 {
            if a[i].abs() > a[largest].abs() {
                largest = i;
            }
        }
        let sign = if a[largest] < 0.0 { -1.0 } else { 1.0 };
        put(out, 0, largest as u32);
        let mut k = 1;
        for (i, c) in a.iter().enumerate() {
            if i != largest {
                put(out, k, self.component.q(c * sign));
                k += 1;
            }
        }
    }
    fn dequantize(&self, w: &[u32]) -> Quat {
        let largest = (word(w, 0) & 3) as usize;
        let small = [self.component.dq(word(w, 1)), self.component.dq(word(w, 2)), self.component.dq(word(w, 3))];
        let rest = 1.0 - small.iter().map(|c| c * c).sum::<f32>();
        let mut a = [0.0f32; 4];
        let mut k = 0;
        for (i, slot) in a.iter_mut().enumerate() {
            if i == largest {
                *slot = rest.max(0.0).sqrt();
            } else {
                *slot = small[k];
                k += 1;
            }
        }
        Quat::from_array(a).normalize()
    }
    fn blend(&self, a: &Quat, b: &Quat, t: f32) -> Quat {
        a.slerp(*b, t)
    }
}

/// An angle in radians, wrapped to `[-π, π)`, in `bits` bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AngleQ(pub u32);

impl Quantizer<f32> for AngleQ {
    fn spec(&self) -> FieldSpec {
        FieldSpec::single(self.0.clamp(1, 32))
    }
    fn describe(&self) -> Quant {
        Quant::Angle { bits: self.0.clamp(1, 32) }
    }
    fn quantize(&self, v: &f32, out: &mut [u32]) {
        let bits = self.0.clamp(1, 32);
        let turns = if v.is_finite() { (f64::from(*v) / std::f64::consts::TAU).rem_euclid(1.0) } else { 0.0 };
        let q = (turns * (f64::from(mask(bits)) + 1.0)).round() as u64;
        put(out, 0, (q & u64::from(mask(bits))) as u32);
    }
    fn dequantize(&self, w: &[u32]) -> f32 {
        let bits = self.0.clamp(1, 32);
        let turns = f64::from(word(w, 0) & mask(bits)) / (f64::from(mask(bits)) + 1.0);
        let a = turns * std::f64::consts::TAU;
        (if a >= std::f64::consts::PI { a - std::f64::consts::TAU } else { a }) as f32
    }
    fn blend(&self, a: &f32, b: &f32, t: f32) -> f32 {
        // The shorter way round, wrapped back to [-π, π).
        let d = (b - a + std::f32::consts::PI).rem_euclid(std::f32::consts::TAU) - std::f32::consts::PI;
        (a + d * t + std::f32::consts::PI).rem_euclid(std::f32::consts::TAU) - std::f32::consts::PI
    }
}

/// A custom floating-point format, as Bazinga chose per property: an optional sign bit,
/// `exponent_bits` of exponent with a `bias`, and `mantissa_bits` of mantissa. Zero is exact;
/// values beyond the largest finite one clamp to it; values below the smallest normal flush
/// to zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FloatQ {
    /// Whether a sign bit is stored (otherwise negatives clamp to zero).
    pub signed: bool,
    /// Exponent bits (1 to 8).
    pub exponent_bits: u32,
    /// Mantissa bits (0 to 23).
    pub mantissa_bits: u32,
    /// Exponent bias: the stored exponent `e` means 2^(e - bias).
    pub bias: i32,
}

impl FloatQ {
    /// Half-precision layout (1 + 5 + 10 bits, bias 15). Unlike IEEE half it has no
    /// infinities or subnormals, so its largest value is 131008.
    pub const HALF: Self = Self { signed: true, exponent_bits: 5, mantissa_bits: 10, bias: 15 };

    fn bits(&self) -> u32 {
        u32::from(self.signed) + self.exponent_bits.clamp(1, 8) + self.mantissa_bits.min(23)
    }
}

impl Quantizer<f32> for FloatQ {
    fn spec(&self) -> FieldSpec {
        FieldSpec::single(self.bits())
    }
    fn describe(&self) -> Quant {
        Quant::Float {
            signed: self.signed,
            exponent_bits: self.exponent_bits,
            mantissa_bits: self.mantissa_bits,
            bias: self.bias,
        }
    }
    fn quantize(&self, v: &f32, out: &mut [u32]) {
        let (eb, mb) = (self.exponent_bits.clamp(1, 8), self.mantissa_bits.min(23));
        let v = if v.is_nan() { 0.0 } else { *v };
        let negative = v < 0.0 && self.signed;
        let mag = if self.signed { v.abs() } else { v.max(0.0) };
        // Stored exponent 0 is reserved for zero; 1..=2^eb-1 are normal numbers.
        let max_e = mask(eb) as i32;
        let word = if mag == 0.0 {
            0
        } else {
            let bits = mag.to_bits();
            let e = ((bits >> 23) & 0xff) as i32 - 127; // unbiased exponent of v
            let mut m = bits & 0x7f_ffff;
            let mut stored_e = e + self.bias;
            // Round the mantissa to mb bits.
            let drop = 23 - mb;
            if drop > 0 {
                m = (m + (1 << (drop - 1))) >> drop;
                if m >> mb != 0 {
                    m = 0;
                    stored_e += 1;
                }
            }
            if stored_e < 1 {
                0
            } else if stored_e > max_e {
                (max_e as u32) << mb | mask(mb) & if mb == 0 { 0 } else { u32::MAX }
            } else {
                (stored_e as u32) << mb | m
            }
        };
        let sign = if negative && word != 0 { 1u32 << (eb + mb) } else { 0 };
        put(out, 0, sign | word);
    }
    fn dequantize(&self, w: &[u32]) -> f32 {
        let (eb, mb) = (self.exponent_bits.clamp(1, 8), self.mantissa_bits.min(23));
        let word = word(w, 0);
        let stored_e = ((word >> mb) & mask(eb)) as i32;
        if stored_e == 0 {
            return 0.0;
        }
        let m = word & if mb == 0 { 0 } else { mask(mb) };
        let mag = (1.0 + m as f32 / (1u64 << mb) as f32) * 2f32.powi(stored_e - self.bias);
        if self.signed && (word >> (eb + mb)) & 1 == 1 { -mag } else { mag }
    }
    fn blend(&self, a: &f32, b: &f32, t: f32) -> f32 {
        lerp(*a, *b, t)
    }
}

// ----- quantizers described, for clients in other languages -----

/// A [`Scalar`]'s parameters: `q` in `0..=steps` stands for `min + q / steps · (max − min)`,
/// in `bits` bits.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScalarParts {
    /// The value of `q = 0`.
    pub min: f32,
    /// The value of `q = steps`.
    pub max: f32,
    /// Steps between `min` and `max` (0: every value is `min`).
    pub steps: u32,
    /// Bits on the wire.
    pub bits: u32,
}

impl From<Scalar> for ScalarParts {
    fn from(s: Scalar) -> Self {
        Self { min: s.min, max: s.max, steps: s.steps, bits: s.bits }
    }
}

impl From<ScalarParts> for Scalar {
    fn from(p: ScalarParts) -> Self {
        let bits = p.bits.clamp(1, 32);
        Self { min: p.min, max: if p.max > p.min { p.max } else { p.min }, steps: p.steps.min(mask(bits)), bits }
    }
}

/// A field's quantizer as data: what a client without the game's Rust types (one in C, C#
/// or Python, through `volley-ffi`) needs to turn the field's words back into numbers and to
/// blend two snapshots' values as [`GameClient::entities`] does. Every built-in quantizer
/// describes itself ([`Quantizer::describe`]); a game's own quantizer is [`Quant::Raw`]: its
/// words are handed over as they are.
///
/// The numbers a field decodes to ([`Quant::values`]), in order: one for `bits`, `flag`
/// (0 or 1), `scalar`, `angle` (radians in −π..π) and `float`; x, y for `vec2`; x, y, z for
/// `vec3` and `velocity`; x, y, z, w for `quat`; one per word for `raw`.
///
/// [`GameClient::entities`]: crate::client::GameClient::entities
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Quant {
    /// [`Bits`]: an unsigned integer in `bits` bits.
    Bits {
        /// Its width.
        bits: u32,
    },
    /// [`Flag`]: a boolean in one bit.
    Flag,
    /// [`Scalar`]: a real number on a uniform grid.
    Scalar(ScalarParts),
    /// [`Vec2Q`]: two scalars.
    Vec2 {
        /// x.
        x: ScalarParts,
        /// y.
        y: ScalarParts,
    },
    /// [`Vec3Q`]: three scalars.
    Vec3 {
        /// x.
        x: ScalarParts,
        /// y.
        y: ScalarParts,
        /// z.
        z: ScalarParts,
    },
    /// [`VelocityQ`]: three scalars, each word stored as its offset from the word of 0
    /// (modulo its width), so that "at rest" is all zero.
    Velocity {
        /// x.
        x: ScalarParts,
        /// y.
        y: ScalarParts,
        /// z.
        z: ScalarParts,
    },
    /// [`QuatQ`]: a smallest-three rotation, each of the three in ±1/√2 on `bits` bits.
    Quat {
        /// Bits of each of the three components.
        bits: u32,
    },
    /// [`AngleQ`]: an angle as a fraction of a turn in `bits` bits.
    Angle {
        /// Its width.
        bits: u32,
    },
    /// [`FloatQ`]: a small floating-point number.
    Float {
        /// Whether it has a sign bit.
        signed: bool,
        /// Exponent bits.
        exponent_bits: u32,
        /// Mantissa bits.
        mantissa_bits: u32,
        /// Exponent bias.
        bias: i32,
    },
    /// A quantizer of the game's own: its words, unchanged (blended by taking the nearer).
    Raw,
}

impl Quant {
    /// How many numbers the field decodes to (`components`: the field's words, for `raw`).
    pub fn values(&self, components: usize) -> usize {
        match self {
            Self::Bits { .. } | Self::Flag | Self::Scalar(_) | Self::Angle { .. } | Self::Float { .. } => 1,
            Self::Vec2 { .. } => 2,
            Self::Vec3 { .. } | Self::Velocity { .. } => 3,
            Self::Quat { .. } => 4,
            Self::Raw => components,
        }
    }

    /// The wire layout this quantizer gives its field (`None` for `raw`: the description
    /// says it).
    pub fn spec(&self) -> Option<FieldSpec> {
        Some(match *self {
            Self::Bits { bits } => Quantizer::<u32>::spec(&Bits(bits)),
            Self::Flag => Quantizer::<bool>::spec(&Flag),
            Self::Scalar(p) => Quantizer::<f32>::spec(&Scalar::from(p)),
            Self::Vec2 { x, y } => Quantizer::<Vec2>::spec(&Vec2Q { x: x.into(), y: y.into() }),
            Self::Vec3 { x, y, z } => Quantizer::<Vec3>::spec(&Vec3Q { x: x.into(), y: y.into(), z: z.into() }),
            Self::Velocity { x, y, z } => {
                Quantizer::<Vec3>::spec(&VelocityQ(Vec3Q { x: x.into(), y: y.into(), z: z.into() }))
            }
            Self::Quat { bits } => Quantizer::<Quat>::spec(&QuatQ::new(bits)),
            Self::Angle { bits } => Quantizer::<f32>::spec(&AngleQ(bits)),
            Self::Float { signed, exponent_bits, mantissa_bits, bias } => {
                Quantizer::<f32>::spec(&FloatQ { signed, exponent_bits, mantissa_bits, bias })
            }
            Self::Raw => return None,
        })
    }

    /// Decodes a field's words into `out` (at least [`Quant::values`] long), blended from
    /// `from`'s value towards `words`' by `t` when `from` is given (`t` = 1: `words`' own;
    /// past 1 extrapolates, as [`Quantizer::blend`]). The built-in quantizers' own code does
    /// the work, so the numbers are exactly what the Rust client draws.
    pub fn decode(&self, words: &[u32], from: Option<&[u32]>, t: f32, out: &mut [f64]) {
        fn one<T: Clone, Q: Quantizer<T>>(q: &Q, words: &[u32], from: Option<&[u32]>, t: f32) -> T {
            let here = q.dequantize(words);
            match from {
                Some(f) => q.blend(&q.dequantize(f), &here, t),
                None => here,
            }
        }
        let mut put = |vals: &[f64]| {
            for (o, v) in out.iter_mut().zip(vals) {
                *o = *v;
            }
        };
        match *self {
            Self::Bits { bits } => put(&[f64::from(one::<u32, _>(&Bits(bits), words, from, t))]),
            Self::Flag => put(&[f64::from(u8::from(one::<bool, _>(&Flag, words, from, t)))]),
            Self::Scalar(p) => put(&[f64::from(one::<f32, _>(&Scalar::from(p), words, from, t))]),
            Self::Vec2 { x, y } => {
                let v = one::<Vec2, _>(&Vec2Q { x: x.into(), y: y.into() }, words, from, t);
                put(&[f64::from(v.x), f64::from(v.y)]);
            }
            Self::Vec3 { x, y, z } => {
                let v = one::<Vec3, _>(&Vec3Q { x: x.into(), y: y.into(), z: z.into() }, words, from, t);
                put(&[f64::from(v.x), f64::from(v.y), f64::from(v.z)]);
            }
            Self::Velocity { x, y, z } => {
                let v = one::<Vec3, _>(&VelocityQ(Vec3Q { x: x.into(), y: y.into(), z: z.into() }), words, from, t);
                put(&[f64::from(v.x), f64::from(v.y), f64::from(v.z)]);
            }
            Self::Quat { bits } => {
                let q = one::<Quat, _>(&QuatQ::new(bits), words, from, t);
                put(&[f64::from(q.x), f64::from(q.y), f64::from(q.z), f64::from(q.w)]);
            }
            Self::Angle { bits } => put(&[f64::from(one::<f32, _>(&AngleQ(bits), words, from, t))]),
            Self::Float { signed, exponent_bits, mantissa_bits, bias } => {
                let q = FloatQ { signed, exponent_bits, mantissa_bits, bias };
                put(&[f64::from(one::<f32, _>(&q, words, from, t))]);
            }
            Self::Raw => {
                let w = match from {
                    Some(f) if t < 0.5 => f,
                    _ => words,
                };
                for (o, v) in out.iter_mut().zip(w) {
                    *o = f64::from(*v);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round<T, Q: Quantizer<T>>(q: &Q, v: &T) -> (T, [u32; 4]) {
        let mut w = [0u32; 4];
        q.quantize(v, &mut w);
        let spec = q.spec();
        for (i, width) in spec.widths().iter().enumerate() {
            assert!(u64::from(w[i]) < 1u64 << width, "component {i} = {} exceeds {width} bits", w[i]);
        }
        (q.dequantize(&w), w)
    }

    #[test]
    fn fiedler_cube_position_and_orientation_sizes() {
        // 512 units a metre in a bounded volume, smallest-three at 9 bits.
        let pos = Vec3Q::bounded(Vec3::new(-256.0, -256.0, 0.0), Vec3::new(255.99, 255.99, 31.99), 1.0 / 512.0);
        assert_eq!(Quantizer::<Vec3>::spec(&pos).full_bits(), 18 + 18 + 14);
        assert_eq!(QuatQ::new(9).spec().full_bits(), 29);
    }

    proptest! {
        #[test]
        fn scalars_stay_within_half_a_step(v in -300.0f32..300.0) {
            let s = Scalar::with_resolution(-256.0, 256.0, 1.0 / 512.0);
            let (back, _) = round(&s, &v);
            let expect = v.clamp(-256.0, 256.0);
            prop_assert!((back - expect).abs() <= s.max_error() * 1.001 + 1e-6, "{v} -> {back}");
        }

        #[test]
        fn quaternions_stay_close(x in -1.0f32..1.0, y in -1.0f32..1.0, z in -1.0f32..1.0, w in -1.0f32..1.0) {
            let q = Quat::from_xyzw(x, y, z, w);
            prop_assume!(q.length() > 0.1);
            let q = q.normalize();
            let (back, _) = round(&QuatQ::new(9), &q);
            // q and -q are the same rotation.
            prop_assert!(q.dot(back).abs() > 0.9995, "{q:?} -> {back:?}");
        }

        #[test]
        fn angles_wrap_and_stay_close(a in -20.0f32..20.0) {
            let (back, _) = round(&AngleQ(12), &a);
            let diff = (back - a).rem_euclid(std::f32::consts::TAU);
            let diff = diff.min(std::f32::consts::TAU - diff);
            prop_assert!(diff <= std::f32::consts::TAU / 4096.0, "{a} -> {back}");
            prop_assert!((-std::f32::consts::PI..std::f32::consts::PI).contains(&back));
        }

        #[test]
        fn velocities_round_trip_and_rest_is_all_zero(x in -20.0f32..20.0, y in -20.0f32..20.0, z in -20.0f32..20.0) {
            let q = VelocityQ::new(16.0, 1.0 / 64.0);
            let v = Vec3::new(x, y, z);
            let (back, _) = round(&q, &v);
            prop_assert!((back - v.clamp(Vec3::splat(-16.0), Vec3::splat(16.0))).abs().max_element() <= 1.0 / 64.0);
            let (rest, words) = round(&q, &Vec3::ZERO);
            prop_assert_eq!(words, [0, 0, 0, 0]);
            prop_assert!(rest.abs().max_element() <= 1.0 / 128.0);
        }

        #[test]
        fn custom_floats_keep_relative_precision(v in -60000.0f32..60000.0) {
            let (back, _) = round(&FloatQ::HALF, &v);
            if v.abs() >= 6.2e-5 {
                prop_assert!(((back - v) / v).abs() <= 1.0 / 1024.0, "{v} -> {back}");
            } else {
                prop_assert!(back.abs() <= 6.2e-5);
            }
        }

        #[test]
        fn garbage_words_never_panic(words in proptest::collection::vec(any::<u32>(), 0..5)) {
            let _ = QuatQ::new(9).dequantize(&words);
            let _ = Quantizer::<f32>::dequantize(&FloatQ { signed: true, exponent_bits: 8, mantissa_bits: 0, bias: 0 }, &words);
            let _ = Quantizer::<Vec3>::dequantize(&VelocityQ::new(1.0, 0.1), &words);
            let _ = Quantizer::<f32>::dequantize(&AngleQ(32), &words);
        }
    }

    #[test]
    fn edge_values() {
        assert_eq!(round(&Scalar::with_bits(0.0, 1.0, 8), &f32::NAN).0, 0.0);
        assert_eq!(round(&Scalar::with_bits(0.0, 1.0, 8), &f32::INFINITY).0, 1.0);
        assert_eq!(round(&Bits(4), &99u32).0, 15);
        assert!(round(&Flag, &true).0);
        assert_eq!(round(&FloatQ::HALF, &0.0).0, 0.0);
        assert_eq!(round(&FloatQ::HALF, &1.0e9).0, 131008.0, "clamps to the largest value");
        assert!(round(&QuatQ::new(9), &Quat::from_xyzw(f32::NAN, 0.0, 0.0, 1.0)).0.dot(Quat::IDENTITY) > 0.9999);
        let degenerate = Scalar::with_resolution(5.0, 5.0, 0.1);
        assert_eq!(round(&degenerate, &7.0).0, 5.0);
    }

    #[test]
    fn blends_follow_each_quantizers_meaning() {
        // Angles go the shorter way round, across ±π.
        let a = AngleQ(16);
        let mid = a.blend(&3.0, &-3.0, 0.5);
        assert!((mid.abs() - std::f32::consts::PI).abs() < 1e-4, "{mid}");
        assert!((a.blend(&0.1, &0.3, 0.5) - 0.2).abs() < 1e-6);
        // Vectors and reals linearly, extrapolating past 1.
        let v = Vec2Q::bounded(Vec2::splat(-10.0), Vec2::splat(10.0), 0.01);
        assert_eq!(v.blend(&Vec2::ZERO, &Vec2::ONE, 1.5), Vec2::splat(1.5));
        assert_eq!(Scalar::with_bits(0.0, 1.0, 8).blend(&0.0, &1.0, 0.25), 0.25);
        // Rotations along the shorter arc.
        let q = QuatQ::new(9);
        let half = q.blend(&Quat::IDENTITY, &Quat::from_rotation_z(1.0), 0.5);
        assert!(half.angle_between(Quat::from_rotation_z(0.5)) < 1e-4);
        // Integers and flags step at the midpoint.
        assert_eq!(Quantizer::<u32>::blend(&Bits(8), &3, &9, 0.49), 3);
        assert_eq!(Quantizer::<u32>::blend(&Bits(8), &3, &9, 0.5), 9);
        assert!(Flag.blend(&false, &true, 0.7));
    }
}
