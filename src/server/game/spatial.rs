//! A spatial index for what games ask of positions every tick: which entities are nearest a
//! player (its interest, for a [`Relevancy`](crate::server::Relevancy)), which are within a radius
//! (a blast, a hit, a zone's border).
//!
//! [`Grid`] is a uniform grid of square cells over a rectangle (points outside fall into
//! its border cells, so nothing is lost). Fill it once a tick with [`Grid::push`] (each
//! point gets the next item number: push in snapshot order and the items are snapshot
//! indices), then ask it as often as there are players. A query searches ring by ring
//! around the point's cell and stops as soon as the rings searched must hold the answer, so
//! its cost follows what is near, not the size of the world.
//!
//! ```
//! use glam::Vec2;
//! use volley::server::spatial::Grid;
//!
//! // A 100 m square arena, 5 m cells.
//! let mut grid = Grid::new(Vec2::splat(-50.0), Vec2::splat(50.0), 5.0);
//! for x in 0..10 {
//!     grid.push(Vec2::new(x as f32 * 3.0, 0.0)); // items 0..10
//! }
//! let mut near = Vec::new();
//! // The 3 nearest to (10, 0), by ascending item: 2 (at 6), 3 (at 9), 4 (at 12).
//! grid.nearest(Vec2::new(10.0, 0.0), 3, |_, _| true, &mut near);
//! assert_eq!(near.iter().map(|n| n.item).collect::<Vec<_>>(), [2, 3, 4]);
//! // Everything within 3.5 m of (10, 0): 3 and 4.
//! grid.within(Vec2::new(10.0, 0.0), 3.5, &mut near);
//! assert_eq!(near.iter().map(|n| n.item).collect::<Vec<_>>(), [3, 4]);
//! ```
//!
//! The arena's relevancy (`volley_arena::game::Nearby`: each player's 64 nearest, avatars
//! anywhere and shots within its view) and its shots' hits use it;
//! `cargo bench -p volley-arena --bench arena` measures it for 1000 players. A zone's border
//! relevancy searches one (`server::zone::BorderView::within`) where its border entities
//! spread over many view radii.

use std::cell::RefCell;
use std::sync::OnceLock;

use glam::Vec2;

/// Most cells along a side: a rectangle that would need more gets wider cells (memory stays
/// bounded whatever the game asks).
pub const MAX_CELLS_PER_SIDE: usize = 1024;

/// An item found near a point: its number (from [`Grid::push`]) and its squared distance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Near {
    /// The item's number.
    pub item: u32,
    /// Its squared distance from the point asked about.
    pub distance_squared: f32,
}

/// Points in square cells over a rectangle; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct Grid {
    /// The rectangle's lower corner.
    min: Vec2,
    /// A cell's side.
    cell: f32,
    /// Cells along x and y, with a border cell on each side for points outside.
    cols: usize,
    rows: usize,
    positions: Vec<Vec2>,
    /// Each item's cell (row by row).
    cell_of_item: Vec<u32>,
    /// The items by cell, built by the first query after a push.
    cells: OnceLock<Cells>,
}

/// Every item with its position, ordered by cell, row by row (a counting sort of the pushed
/// items): a cell's points, and a row of cells' points, are one run of memory.
#[derive(Debug, Clone, Default)]
struct Cells {
    /// Where each cell's points start in `points`, and one past the last cell's end.
    starts: Vec<u32>,
    points: Vec<(Vec2, u32)>,
}

impl Cells {
    /// The points of the cells `from..=to` (indices into the grid's cells, one row).
    #[inline]
    fn run(&self, from: usize, to: usize) -> &[(Vec2, u32)] {
        let (a, b) = (self.starts[from] as usize, self.starts[to + 1] as usize);
        &self.points[a..b]
    }
}

thread_local! {
    /// A query's candidates on this thread, and the bits that order the chosen by item (so
    /// that a query allocates nothing once warm).
    static SCRATCH: RefCell<Scratch> = const { RefCell::new(Scratch { candidates: Vec::new(), bits: Vec::new(), d2: Vec::new() }) };
}

/// A query's working memory ([`Grid::nearest`]).
struct Scratch {
    /// Candidates: squared distance's bits above item.
    candidates: Vec<u64>,
    /// A bit per item chosen.
    bits: Vec<u64>,
    /// The squared distance's bits of each item chosen, by item (only those are read).
    d2: Vec<u32>,
}

/// Grids of at most this many items order a query's answer by a bit per item rather than by
/// a sort.
const BIT_ORDER_ITEMS: usize = 1 << 16;

impl Grid {
    /// An empty grid over the rectangle from `min` to `max` in cells of side `cell` (wider
    /// if the rectangle would need more than [`MAX_CELLS_PER_SIDE`] along a side). A good
    /// cell is about the radius most queries need: a few cells hold a query's answer.
    pub fn new(min: Vec2, max: Vec2, cell: f32) -> Self {
        let size = (max - min).max(Vec2::ZERO);
        let size = if size.is_finite() { size } else { Vec2::ZERO };
        let widest = size.max_element() / (MAX_CELLS_PER_SIDE - 2) as f32;
        let cell = if cell.is_finite() && cell > 0.0 { cell.max(widest) } else { widest.max(1.0) };
        let side = |len: f32| ((len / cell).ceil() as usize).clamp(1, MAX_CELLS_PER_SIDE - 2) + 2;
        let (cols, rows) = (side(size.x), side(size.y));
        let min = if min.is_finite() { min } else { Vec2::ZERO };
        Self { min, cell, cols, rows, positions: Vec::new(), cell_of_item: Vec::new(), cells: OnceLock::new() }
    }

    /// Empties the grid, keeping its points' memory (for the next tick's points).
    pub fn clear(&mut self) {
        self.positions.clear();
        self.cell_of_item.clear();
        self.cells.take();
    }

    /// Adds a point; returns its item number (0 for the first since the last
    /// [`clear`](Self::clear), then 1, 2, …).
    pub fn push(&mut self, at: Vec2) -> u32 {
        let item = self.positions.len() as u32;
        let (x, y) = self.cell_of(at);
        self.positions.push(at);
        self.cell_of_item.push((y * self.cols + x) as u32);
        self.cells.take();
        item
    }

    /// The items by cell, sorted into place by the first query after a push (once for all
    /// the queries of a tick, on whichever thread asks first).
    fn cells(&self) -> &Cells {
        self.cells.get_or_init(|| {
            let n = self.cols * self.rows;
            let mut starts = vec![0u32; n + 1];
            for &c in &self.cell_of_item {
                starts[c as usize + 1] += 1;
            }
            for i in 0..n {
                starts[i + 1] += starts[i];
            }
            let mut next = starts.clone();
            let mut points = vec![(Vec2::ZERO, 0u32); self.positions.len()];
            for (item, (&c, &at)) in self.cell_of_item.iter().zip(&self.positions).enumerate() {
                let slot = &mut next[c as usize];
                points[*slot as usize] = (at, item as u32);
                *slot += 1;
            }
            Cells { starts, points }
        })
    }

    /// How many points it holds.
    pub fn len(&self) -> usize {
        self.positions.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.positions.is_empty()
    }

    /// Where item `item` is, if there is such an item.
    pub fn position(&self, item: u32) -> Option<Vec2> {
        self.positions.get(item as usize).copied()
    }

    /// The cell (column, row) a point falls in; points outside the rectangle fall in its
    /// border cells (a point that is not a number, in the first).
    pub fn cell_of(&self, at: Vec2) -> (usize, usize) {
        let c = |v: f32, lo: f32, n: usize| (((v - lo) / self.cell).floor() + 1.0).clamp(0.0, n as f32 - 1.0) as usize;
        (c(at.x, self.min.x, self.cols), c(at.y, self.min.y, self.rows))
    }

    /// The items in the `(2 × rings + 1)²` cells around `at`'s cell (nearest cells are not
    /// first: every item of them, in no particular order). With `rings = 1` and cells at
    /// least as wide as a reach, these hold everything within that reach of `at`.
    pub fn around(&self, at: Vec2, rings: usize) -> impl Iterator<Item = u32> + '_ {
        let (cx, cy) = self.cell_of(at);
        let (x0, x1) = (cx.saturating_sub(rings), (cx + rings).min(self.cols - 1));
        let (y0, y1) = (cy.saturating_sub(rings), (cy + rings).min(self.rows - 1));
        let cells = self.cells();
        (y0..=y1).flat_map(move |y| cells.run(y * self.cols + x0, y * self.cols + x1).iter().map(|(_, i)| *i))
    }

    /// Every item within `radius` of `at`, by ascending item, into `out` (cleared first).
    pub fn within(&self, at: Vec2, radius: f32, out: &mut Vec<Near>) {
        out.clear();
        out.extend(self.near(at, radius));
        out.sort_unstable_by_key(|n| n.item);
    }

    /// Every item within `radius` of `at`, in no particular order (cell by cell): what
    /// [`within`](Self::within) gives, for a caller that turns each into something else
    /// (and orders those itself) without a list between.
    pub fn near(&self, at: Vec2, radius: f32) -> impl Iterator<Item = Near> + '_ {
        let r2 = radius * radius;
        let rings =
            if radius.is_finite() { (radius / self.cell).ceil().max(0.0) as usize } else { self.cols.max(self.rows) };
        self.around(at, rings).filter_map(move |item| {
            let d2 = at.distance_squared(self.positions[item as usize]);
            (d2 <= r2).then_some(Near { item, distance_squared: d2 })
        })
    }

    /// The `k` items nearest `at` among those `keep(item, distance_squared)` accepts, by
    /// ascending item, into `out` (cleared first). Equal distances go to the lower item.
    /// `keep` is asked about the items of the cells searched, so it sees some that do not
    /// make the `k` nearest.
    pub fn nearest(&self, at: Vec2, k: usize, keep: impl FnMut(u32, f32) -> bool, out: &mut Vec<Near>) {
        out.clear();
        if k == 0 {
            return;
        }
        SCRATCH.with_borrow_mut(|scratch| self.nearest_into(at, k, keep, scratch, out));
    }

    /// [`nearest`](Self::nearest) with the candidates in `candidates`. A candidate is one
    /// integer, its squared distance's bits above its item (a non-negative float's bits
    /// order as the float does), so choosing the nearest and ordering them by item are
    /// selections and sorts of plain integers.
    fn nearest_into(
        &self,
        at: Vec2,
        k: usize,
        mut keep: impl FnMut(u32, f32) -> bool,
        scratch: &mut Scratch,
        out: &mut Vec<Near>,
    ) {
        let Scratch { candidates, bits, d2 } = scratch;
        candidates.clear();
        let (cx, cy) = self.cell_of(at);
        let (last_x, last_y) = (self.cols - 1, self.rows - 1);
        let cells = self.cells();
        let cols = self.cols;
        // The points of cells x0..=x1 of row y, kept or not.
        let mut take = |y: usize, x0: usize, x1: usize, candidates: &mut Vec<u64>| {
            for &(position, item) in cells.run(y * cols + x0, y * cols + x1) {
                let d2 = at.distance_squared(position);
                if keep(item, d2) {
                    candidates.push(u64::from(d2.to_bits()) << 32 | u64::from(item));
                }
            }
        };
        for r in 0..self.cols.max(self.rows) {
            let (x0, x1) = (cx.saturating_sub(r), (cx + r).min(last_x));
            let (y0, y1) = (cy.saturating_sub(r), (cy + r).min(last_y));
            // Only the ring's own cells (the inner rings are done): its top and bottom rows
            // where the grid has them (each row's cells one run of points), then its left
            // and right columns between.
            if r == 0 {
                take(cy, cx, cx, candidates);
            } else {
                for y in [cy.checked_sub(r), Some(cy + r).filter(|y| *y <= last_y)].into_iter().flatten() {
                    take(y, x0, x1, candidates);
                }
                let (inner0, inner1) = ((cy + 1).saturating_sub(r).max(y0), (cy + r - 1).min(y1));
                for x in [cx.checked_sub(r), Some(cx + r).filter(|x| *x <= last_x)].into_iter().flatten() {
                    for y in inner0..=inner1 {
                        take(y, x, x, candidates);
                    }
                }
            }
            // Everything nearer than the searched square's nearest outer edge is in (a
            // border cell has nothing beyond it).
            let side = |lo: usize, hi: usize, last: usize, v: f32, min: f32| {
                let below = if lo == 0 { f32::INFINITY } else { v - ((lo - 1) as f32 * self.cell + min) };
                let above = if hi == last { f32::INFINITY } else { (hi as f32 * self.cell + min) - v };
                below.min(above)
            };
            let covered = side(x0, x1, last_x, at.x, self.min.x).min(side(y0, y1, last_y, at.y, self.min.y));
            let within = u64::from((covered * covered).to_bits()) << 32 | u64::from(u32::MAX);
            let enough = candidates.len() >= k && candidates.iter().filter(|c| **c <= within).count() >= k;
            if enough || (x0 == 0 && y0 == 0 && x1 == last_x && y1 == last_y) {
                break;
            }
        }
        if candidates.len() > k {
            candidates.select_nth_unstable(k - 1);
            candidates.truncate(k);
        }
        // By item. Few items in all (a bit each is fewer words than a sort's comparisons):
        // a bit per item chosen, read in order; else a sort, item above distance.
        let n = self.positions.len();
        let words = n.div_ceil(64);
        if n <= BIT_ORDER_ITEMS && words <= candidates.len() * 4 {
            bits.clear();
            bits.resize(words, 0);
            if d2.len() < n {
                d2.resize(n, 0);
            }
            for c in candidates.iter() {
                let item = *c as u32 as usize;
                bits[item / 64] |= 1 << (item % 64);
                d2[item] = (*c >> 32) as u32;
            }
            out.reserve(candidates.len());
            for (w, word) in bits.iter().enumerate() {
                let mut word = *word;
                while word != 0 {
                    let item = w * 64 + word.trailing_zeros() as usize;
                    word &= word - 1;
                    out.push(Near { item: item as u32, distance_squared: f32::from_bits(d2[item]) });
                }
            }
            return;
        }
        for c in candidates.iter_mut() {
            *c = c.rotate_left(32);
        }
        candidates.sort_unstable();
        out.extend(
            candidates.iter().map(|c| Near { item: (*c >> 32) as u32, distance_squared: f32::from_bits(*c as u32) }),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The brute-force answer: every kept item by distance then item, the first `k`, by item.
    fn brute(points: &[Vec2], at: Vec2, k: usize, keep: impl Fn(u32, f32) -> bool) -> Vec<u32> {
        let mut all: Vec<(u32, u32)> = points
            .iter()
            .enumerate()
            .map(|(i, p)| (at.distance_squared(*p), i as u32))
            .filter(|(d2, i)| keep(*i, *d2))
            .map(|(d2, i)| (d2.to_bits(), i))
            .collect();
        all.sort_unstable();
        let mut first: Vec<u32> = all.into_iter().take(k).map(|(_, i)| i).collect();
        first.sort_unstable();
        first
    }

    proptest! {
        /// The nearest k and everything within a radius are what a search of every point
        /// finds, for points inside and outside the rectangle and any cell size.
        #[test]
        fn queries_find_what_a_full_search_finds(
            points in prop::collection::vec((-80.0f32..80.0, -80.0f32..80.0), 0..300),
            at in (-90.0f32..90.0, -90.0f32..90.0),
            k in 0usize..40,
            cell in 0.5f32..30.0,
            radius in 0.0f32..60.0,
            odd_out in any::<bool>(),
        ) {
            let points: Vec<Vec2> = points.into_iter().map(|(x, y)| Vec2::new(x, y)).collect();
            let at = Vec2::new(at.0, at.1);
            let mut grid = Grid::new(Vec2::splat(-50.0), Vec2::new(50.0, 30.0), cell);
            for p in &points {
                grid.push(*p);
            }
            // Leave odd items out far away, as the arena leaves shots beyond the view.
            let keep = |item: u32, d2: f32| !odd_out || item.is_multiple_of(2) || d2 <= 400.0;
            let mut out = Vec::new();
            grid.nearest(at, k, keep, &mut out);
            let got: Vec<u32> = out.iter().map(|n| n.item).collect();
            prop_assert_eq!(got, brute(&points, at, k, keep));
            grid.within(at, radius, &mut out);
            let got: Vec<u32> = out.iter().map(|n| n.item).collect();
            let want: Vec<u32> = (0..points.len() as u32)
                .filter(|i| at.distance_squared(points[*i as usize]) <= radius * radius)
                .collect();
            prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn bad_numbers_lose_nothing_and_panic_nowhere() {
        let mut grid = Grid::new(Vec2::splat(f32::NAN), Vec2::splat(f32::INFINITY), -1.0);
        for p in [Vec2::NAN, Vec2::INFINITY, Vec2::NEG_INFINITY, Vec2::ZERO, Vec2::splat(1e30)] {
            grid.push(p);
        }
        let mut out = Vec::new();
        grid.nearest(Vec2::ZERO, 10, |_, _| true, &mut out);
        assert_eq!(out.len(), 5, "every point is found, even those with no distance");
        grid.within(Vec2::NAN, f32::INFINITY, &mut out);
        assert!(out.is_empty(), "nothing is within any distance of no place");
        // A rectangle far too large for its cells gets wider ones, not a billion of them.
        let huge = Grid::new(Vec2::splat(-1e9), Vec2::splat(1e9), 0.001);
        assert!(huge.cols * huge.rows <= MAX_CELLS_PER_SIDE * MAX_CELLS_PER_SIDE);
        assert_eq!(grid.position(3), Some(Vec2::ZERO));
        assert_eq!(grid.position(9), None);
    }
}
