//! Zones: one map split among several server processes, each running the part of the map
//! given to it (the first piece of "one world over several servers"; see `docs/zones.md`).
//!
//! [`ZoneLayout`] is the geometry every zone server and the tools share: which zone owns a
//! position, which zones border which, and which neighbours must see an entity because it
//! stands within the border margin of their region. Sans-IO, like the rest of `protocol`:
//! plain numbers in, answers out.
//!
//! ```
//! use glam::Vec2;
//! use volley::protocol::zone::ZoneLayout;
//!
//! // A 2×2 grid over a 200 × 200 map, entities within 10 units of a border seen across it.
//! let zones = ZoneLayout::grid(Vec2::ZERO, Vec2::splat(200.0), 2, 2, 10.0).unwrap();
//! let p = Vec2::new(95.0, 50.0); // in zone 0, 5 units from zone 1
//! assert_eq!(zones.owner(p), Some(0));
//! assert_eq!(zones.near(0, p).collect::<Vec<_>>(), vec![1]);
//! ```

use glam::Vec2;

/// A zone's number: its index in the layout.
pub type ZoneId = u16;

/// The most zones a layout may hold.
pub const MAX_ZONES: usize = 256;

/// A zone's region: the half-open rectangle `min <= p < max`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Region {
    /// The corner with the smallest coordinates (inside).
    pub min: Vec2,
    /// The corner with the largest coordinates (outside).
    pub max: Vec2,
}

impl Region {
    /// Whether `p` lies in the region.
    pub fn contains(&self, p: Vec2) -> bool {
        p.x >= self.min.x && p.y >= self.min.y && p.x < self.max.x && p.y < self.max.y
    }

    /// The distance from `p` to the region (0 inside).
    pub fn distance(&self, p: Vec2) -> f32 {
        let d = (self.min - p).max(p - self.max).max(Vec2::ZERO);
        d.length()
    }

    /// The distance between two regions (0 when they touch or overlap).
    fn gap(&self, other: &Region) -> f32 {
        let d = (self.min - other.max).max(other.min - self.max).max(Vec2::ZERO);
        d.length()
    }

    fn overlaps(&self, other: &Region) -> bool {
        self.min.x < other.max.x && other.min.x < self.max.x && self.min.y < other.max.y && other.min.y < self.max.y
    }
}

/// Why a layout was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ZoneError {
    /// No zones, or more than [`MAX_ZONES`].
    #[error("a layout needs 1 to {MAX_ZONES} zones, not {0}")]
    Count(usize),
    /// A region with a corner that is not finite, or no area.
    #[error("zone {0}'s region is empty or not finite")]
    BadRegion(usize),
    /// Two regions overlap: a position would have two owners.
    #[error("zones {0} and {1} overlap")]
    Overlap(usize, usize),
    /// The margin is negative or not finite.
    #[error("the border margin must be a finite number ≥ 0, not {0}")]
    Margin(f32),
}

/// The zones of one map, and the border margin within which an entity is seen across a
/// border.
#[derive(Debug, Clone, PartialEq)]
pub struct ZoneLayout {
    regions: Vec<Region>,
    margin: f32,
    /// Per zone, the zones whose regions lie within the margin of its own.
    neighbours: Vec<Vec<ZoneId>>,
}

impl ZoneLayout {
    /// A layout of these regions (zone `i` is `regions[i]`).
    ///
    /// # Errors
    /// When there are none or too many, one is empty or not finite, two overlap, or the
    /// margin is negative.
    pub fn new(regions: Vec<Region>, margin: f32) -> Result<Self, ZoneError> {
        if regions.is_empty() || regions.len() > MAX_ZONES {
            return Err(ZoneError::Count(regions.len()));
        }
        if !(margin.is_finite() && margin >= 0.0) {
            return Err(ZoneError::Margin(margin));
        }
        for (i, r) in regions.iter().enumerate() {
            if !(r.min.is_finite() && r.max.is_finite() && r.min.x < r.max.x && r.min.y < r.max.y) {
                return Err(ZoneError::BadRegion(i));
            }
            if let Some(j) = regions[..i].iter().position(|o| o.overlaps(r)) {
                return Err(ZoneError::Overlap(j, i));
            }
        }
        let neighbours = (0..regions.len())
            .map(|i| {
                (0..regions.len())
                    .filter(|&j| j != i && regions[i].gap(&regions[j]) <= margin)
                    .map(|j| j as ZoneId)
                    .collect()
            })
            .collect();
        Ok(Self { regions, margin, neighbours })
    }

    /// `cols × rows` equal zones over the rectangle from `min` to `max`, numbered row by row
    /// from `min`.
    ///
    /// # Errors
    /// As [`ZoneLayout::new`] (a grid of 0 cells, or an empty rectangle).
    pub fn grid(min: Vec2, max: Vec2, cols: u16, rows: u16, margin: f32) -> Result<Self, ZoneError> {
        let (c, r) = (f32::from(cols.max(1)), f32::from(rows.max(1)));
        let cell = (max - min) / Vec2::new(c, r);
        let mut regions = Vec::with_capacity(usize::from(cols) * usize::from(rows));
        for y in 0..rows {
            for x in 0..cols {
                let lo = min + cell * Vec2::new(f32::from(x), f32::from(y));
                // The last row and column end exactly at `max` (no rounding gap).
                let hi = Vec2::new(
                    if x + 1 == cols { max.x } else { lo.x + cell.x },
                    if y + 1 == rows { max.y } else { lo.y + cell.y },
                );
                regions.push(Region { min: lo, max: hi });
            }
        }
        Self::new(regions, margin)
    }

    /// How many zones.
    pub fn len(&self) -> usize {
        self.regions.len()
    }

    /// Whether it has no zones (never: a layout has at least one).
    pub fn is_empty(&self) -> bool {
        self.regions.is_empty()
    }

    /// The border margin.
    pub fn margin(&self) -> f32 {
        self.margin
    }

    /// Zone `zone`'s region.
    pub fn region(&self, zone: ZoneId) -> Option<&Region> {
        self.regions.get(usize::from(zone))
    }

    /// The zone that owns `p`, if any does (a position outside every region has no owner).
    pub fn owner(&self, p: Vec2) -> Option<ZoneId> {
        self.regions.iter().position(|r| r.contains(p)).map(|i| i as ZoneId)
    }

    /// The zones whose regions lie within the margin of `zone`'s (the ones it exchanges
    /// border entities with), in order.
    pub fn neighbours(&self, zone: ZoneId) -> &[ZoneId] {
        self.neighbours.get(usize::from(zone)).map_or(&[], Vec::as_slice)
    }

    /// The neighbours of `zone` that must see an entity at `p`: those whose region lies
    /// within the margin of `p`, in order.
    pub fn near(&self, zone: ZoneId, p: Vec2) -> impl Iterator<Item = ZoneId> + '_ {
        self.neighbours(zone).iter().copied().filter(move |&n| self.regions[usize::from(n)].distance(p) <= self.margin)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn grid() -> ZoneLayout {
        ZoneLayout::grid(Vec2::ZERO, Vec2::splat(200.0), 2, 2, 10.0).unwrap()
    }

    #[test]
    fn every_position_on_the_map_has_exactly_one_owner() {
        let z = grid();
        let mut seen = [0u32; 4];
        for x in 0..200 {
            for y in 0..200 {
                let p = Vec2::new(x as f32 + 0.5, y as f32 + 0.5);
                seen[usize::from(z.owner(p).unwrap())] += 1;
            }
        }
        assert_eq!(seen, [10_000; 4]);
        assert_eq!(z.owner(Vec2::new(100.0, 0.0)), Some(1), "a shared edge belongs to the zone it starts");
        assert_eq!(z.owner(Vec2::new(200.0, 0.0)), None, "off the map");
        assert_eq!(z.owner(Vec2::new(-0.1, 5.0)), None);
    }

    #[test]
    fn neighbours_are_the_zones_within_the_margin_corners_included() {
        let z = grid();
        assert_eq!(z.neighbours(0), &[1, 2, 3]);
        let far = ZoneLayout::new(
            vec![
                Region { min: Vec2::ZERO, max: Vec2::splat(10.0) },
                Region { min: Vec2::new(15.0, 0.0), max: Vec2::new(25.0, 10.0) },
                Region { min: Vec2::new(40.0, 0.0), max: Vec2::new(50.0, 10.0) },
            ],
            5.0,
        )
        .unwrap();
        assert_eq!(far.neighbours(0), &[1]);
        assert_eq!(far.neighbours(1), &[0]);
        assert!(far.neighbours(2).is_empty());
        assert!(far.neighbours(9).is_empty());
    }

    #[test]
    fn an_entity_is_sent_to_the_neighbours_within_the_margin_of_it() {
        let z = grid();
        let near = |zone, x, y| z.near(zone, Vec2::new(x, y)).collect::<Vec<_>>();
        assert_eq!(near(0, 50.0, 50.0), Vec::<ZoneId>::new(), "deep inside");
        assert_eq!(near(0, 95.0, 50.0), vec![1]);
        assert_eq!(near(0, 50.0, 95.0), vec![2]);
        assert_eq!(near(0, 95.0, 95.0), vec![1, 2, 3], "at the corner all three");
        assert_eq!(near(0, 92.0, 92.0), vec![1, 2], "the diagonal zone is 11.3 away");
        assert_eq!(near(0, 90.0, 50.0), vec![1], "exactly the margin counts");
        assert_eq!(near(0, 89.9, 50.0), Vec::<ZoneId>::new());
    }

    #[test]
    fn bad_layouts_are_refused() {
        let r = |a: f32, b: f32| Region { min: Vec2::splat(a), max: Vec2::splat(b) };
        assert_eq!(ZoneLayout::new(vec![], 1.0), Err(ZoneError::Count(0)));
        assert_eq!(ZoneLayout::new(vec![r(0.0, 1.0)], -1.0), Err(ZoneError::Margin(-1.0)));
        assert_eq!(ZoneLayout::new(vec![r(1.0, 1.0)], 1.0), Err(ZoneError::BadRegion(0)));
        assert_eq!(ZoneLayout::new(vec![r(0.0, f32::NAN)], 1.0), Err(ZoneError::BadRegion(0)));
        assert_eq!(ZoneLayout::new(vec![r(0.0, 2.0), r(1.0, 3.0)], 1.0), Err(ZoneError::Overlap(0, 1)));
        assert!(ZoneLayout::grid(Vec2::ZERO, Vec2::ZERO, 2, 2, 1.0).is_err());
        assert!(ZoneLayout::new(vec![r(0.0, 1.0), r(1.0, 2.0)], 0.0).is_ok(), "touching is not overlapping");
    }
}
