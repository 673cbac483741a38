//! Space-filling curves over a tile matrix: Hilbert and Z-order (Morton)
//! indexes to and from (x, y), and a tile rectangle turned into merged index
//! ranges, so that tiles near each other on the map get nearby keys.

use std::ops::RangeInclusive;

use crate::TileRange;

/// Which curve orders the tiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Curve {
    /// Hilbert: consecutive indexes are always edge neighbours.
    Hilbert,
    /// Z-order (Morton): bits of x and y interleaved.
    Zorder,
}

/// The curve order (bits per axis) that covers a `width` x `height` matrix.
pub fn order_for(width: u32, height: u32) -> u8 {
    let side = width.max(height).max(1);
    (32 - (side - 1).leading_zeros()) as u8
}

impl Curve {
    /// The index of cell (x, y) on a curve of `order` bits per axis
    /// (x, y < 2^order, order <= 31).
    pub fn index(self, order: u8, x: u32, y: u32) -> u64 {
        match self {
            Curve::Zorder => spread(x) | (spread(y) << 1),
            Curve::Hilbert => hilbert_index(order, x, y),
        }
    }

    /// The cell at index `d` (the inverse of [`Curve::index`]).
    pub fn coords(self, order: u8, d: u64) -> (u32, u32) {
        match self {
            Curve::Zorder => (squeeze(d), squeeze(d >> 1)),
            Curve::Hilbert => hilbert_coords(order, d),
        }
    }

    /// The indexes of the cells of `rect` as sorted, merged, inclusive
    /// ranges. With more than `max_ranges` ranges, the closest neighbours
    /// are joined (the ranges then also cover cells outside `rect`, which a
    /// caller filters out); `max_ranges` of 0 means no limit.
    pub fn ranges(
        self,
        order: u8,
        rect: &TileRange,
        max_ranges: usize,
    ) -> Vec<RangeInclusive<u64>> {
        let mut out = Vec::new();
        self.collect(order, rect, 0, 0, order, &mut out);
        out.sort_unstable_by_key(|r| *r.start());
        let mut merged: Vec<RangeInclusive<u64>> = Vec::with_capacity(out.len());
        for r in out {
            match merged.last_mut() {
                Some(last) if *last.end() + 1 >= *r.start() => {
                    *last = *last.start()..=(*last.end()).max(*r.end());
                }
                _ => merged.push(r),
            }
        }
        if max_ranges > 0 {
            cap_ranges(&mut merged, max_ranges);
        }
        merged
    }

    /// Adds the ranges of the aligned block of side 2^level at (bx, by).
    fn collect(
        self,
        order: u8,
        rect: &TileRange,
        bx: u32,
        by: u32,
        level: u8,
        out: &mut Vec<RangeInclusive<u64>>,
    ) {
        let side = 1u64 << level;
        let (x0, y0) = (u64::from(bx), u64::from(by));
        let (x1, y1) = (x0 + side - 1, y0 + side - 1);
        let (rx0, ry0, rx1, ry1) = (
            u64::from(rect.min_x),
            u64::from(rect.min_y),
            u64::from(rect.max_x),
            u64::from(rect.max_y),
        );
        if x1 < rx0 || x0 > rx1 || y1 < ry0 || y0 > ry1 {
            return;
        }
        if (x0 >= rx0 && x1 <= rx1 && y0 >= ry0 && y1 <= ry1) || level == 0 {
            // An aligned block is one contiguous stretch of either curve.
            let cells = side * side;
            let base = self.index(order, bx, by) / cells * cells;
            out.push(base..=base + cells - 1);
            return;
        }
        let half = 1u32 << (level - 1);
        for (dx, dy) in [(0, 0), (half, 0), (0, half), (half, half)] {
            self.collect(order, rect, bx + dx, by + dy, level - 1, out);
        }
    }
}

/// Joins the ranges separated by the smallest gaps until at most `cap` remain.
fn cap_ranges(ranges: &mut Vec<RangeInclusive<u64>>, cap: usize) {
    if ranges.len() <= cap {
        return;
    }
    let mut gaps: Vec<(u64, usize)> = ranges
        .windows(2)
        .enumerate()
        .map(|(i, w)| (*w[1].start() - *w[0].end(), i))
        .collect();
    gaps.sort_unstable();
    // Close the smallest gaps: mark the boundaries to remove.
    let mut join = vec![false; ranges.len()];
    for (_, i) in gaps.iter().take(ranges.len() - cap) {
        join[*i] = true;
    }
    let mut out: Vec<RangeInclusive<u64>> = Vec::with_capacity(cap);
    let mut start = *ranges[0].start();
    for i in 0..ranges.len() {
        if !join[i] {
            out.push(start..=*ranges[i].end());
            if i + 1 < ranges.len() {
                start = *ranges[i + 1].start();
            }
        }
    }
    *ranges = out;
}

fn spread(v: u32) -> u64 {
    let mut x = u64::from(v);
    x = (x | (x << 16)) & 0x0000_FFFF_0000_FFFF;
    x = (x | (x << 8)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x << 4)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x << 2)) & 0x3333_3333_3333_3333;
    x = (x | (x << 1)) & 0x5555_5555_5555_5555;
    x
}

fn squeeze(v: u64) -> u32 {
    let mut x = v & 0x5555_5555_5555_5555;
    x = (x | (x >> 1)) & 0x3333_3333_3333_3333;
    x = (x | (x >> 2)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x >> 4)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x >> 8)) & 0x0000_FFFF_0000_FFFF;
    x = (x | (x >> 16)) & 0x0000_0000_FFFF_FFFF;
    x as u32
}

/// The classic iterative Hilbert mapping (rotate and flip per level).
fn hilbert_index(order: u8, x: u32, y: u32) -> u64 {
    let (mut x, mut y) = (u64::from(x), u64::from(y));
    let mut d = 0u64;
    let mut s = 1u64 << order.saturating_sub(1);
    while s > 0 {
        let rx = u64::from(x & s > 0);
        let ry = u64::from(y & s > 0);
        d += s * s * ((3 * rx) ^ ry);
        rotate(s, &mut x, &mut y, rx, ry);
        s /= 2;
    }
    d
}

fn hilbert_coords(order: u8, d: u64) -> (u32, u32) {
    let (mut x, mut y) = (0u64, 0u64);
    let mut t = d;
    let n = 1u64 << order;
    let mut s = 1u64;
    while s < n {
        let rx = 1 & (t / 2);
        let ry = 1 & (t ^ rx);
        rotate(s, &mut x, &mut y, rx, ry);
        x += s * rx;
        y += s * ry;
        t /= 4;
        s *= 2;
    }
    (x as u32, y as u32)
}

fn rotate(s: u64, x: &mut u64, y: &mut u64, rx: u64, ry: u64) {
    if ry == 0 {
        if rx == 1 {
            *x = s.wrapping_sub(1).wrapping_sub(*x) & (s.wrapping_mul(2).wrapping_sub(1));
            *y = s.wrapping_sub(1).wrapping_sub(*y) & (s.wrapping_mul(2).wrapping_sub(1));
        }
        std::mem::swap(x, y);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    struct Rng(u64);
    impl Rng {
        fn next(&mut self, below: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % below.max(1)
        }
    }

    #[test]
    fn index_and_coords_are_inverse_and_hilbert_steps_are_neighbours() {
        for curve in [Curve::Hilbert, Curve::Zorder] {
            for order in 0..=6u8 {
                let n = 1u32 << order;
                let mut seen = BTreeSet::new();
                for y in 0..n {
                    for x in 0..n {
                        let d = curve.index(order, x, y);
                        assert!(d < u64::from(n) * u64::from(n));
                        assert_eq!(curve.coords(order, d), (x, y), "{curve:?} order {order}");
                        seen.insert(d);
                    }
                }
                assert_eq!(
                    seen.len() as u64,
                    u64::from(n) * u64::from(n),
                    "a bijection"
                );
                if curve == Curve::Hilbert {
                    for d in 1..u64::from(n) * u64::from(n) {
                        let (a, b) = (curve.coords(order, d - 1), curve.coords(order, d));
                        assert_eq!(
                            a.0.abs_diff(b.0) + a.1.abs_diff(b.1),
                            1,
                            "order {order} step {d}"
                        );
                    }
                }
            }
        }
        let big = (1u32 << 24) - 3;
        for curve in [Curve::Hilbert, Curve::Zorder] {
            let d = curve.index(24, big, 12345);
            assert_eq!(curve.coords(24, d), (big, 12345));
        }
    }

    #[test]
    fn ranges_are_exactly_the_cells_of_the_rectangle_against_brute_force() {
        let mut rng = Rng(0x1234_5678_9ABC_DEF1);
        for _ in 0..400 {
            let order = rng.next(7) as u8;
            let n = 1u64 << order;
            let (a, b) = (rng.next(n) as u32, rng.next(n) as u32);
            let (c, d) = (rng.next(n) as u32, rng.next(n) as u32);
            let rect = TileRange {
                z: order,
                min_x: a.min(b),
                max_x: a.max(b),
                min_y: c.min(d),
                max_y: c.max(d),
            };
            for curve in [Curve::Hilbert, Curve::Zorder] {
                let brute: BTreeSet<u64> = (rect.min_y..=rect.max_y)
                    .flat_map(|y| (rect.min_x..=rect.max_x).map(move |x| (x, y)))
                    .map(|(x, y)| curve.index(order, x, y))
                    .collect();
                let ranges = curve.ranges(order, &rect, 0);
                let covered: BTreeSet<u64> = ranges.iter().flat_map(Clone::clone).collect();
                assert_eq!(covered, brute, "{curve:?} {rect:?}");
                assert!(
                    ranges.windows(2).all(|w| *w[0].end() + 1 < *w[1].start()),
                    "merged and sorted"
                );
                // With a cap: never more ranges, never a cell of the rectangle lost.
                let cap = 1 + rng.next(4) as usize;
                let capped = curve.ranges(order, &rect, cap);
                assert!(capped.len() <= cap);
                for cell in &brute {
                    assert!(
                        capped.iter().any(|r| r.contains(cell)),
                        "{curve:?} cap {cap} lost {cell}"
                    );
                }
            }
        }
    }

    /// Aligned blocks of 4^k indexes are 2^k x 2^k squares, and the block
    /// number is the index of the block on the coarser curve: what pack keys
    /// rely on.
    #[test]
    fn blocks_of_the_fine_curve_are_cells_of_the_coarse_one() {
        for curve in [Curve::Hilbert, Curve::Zorder] {
            for order in 0..=6u8 {
                for k in 0..=order {
                    let coarse = order - k;
                    for x in 0..1u32 << order {
                        for y in 0..1u32 << order {
                            assert_eq!(
                                curve.index(order, x, y) >> (2 * k),
                                curve.index(coarse, x >> k, y >> k),
                                "{curve:?} order {order} k {k} cell {x},{y}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn curve_order_covers_the_matrix() {
        assert_eq!(order_for(1, 1), 0);
        assert_eq!(order_for(2, 1), 1);
        assert_eq!(order_for(256, 256), 8);
        assert_eq!(order_for(257, 3), 9);
    }

    #[test]
    fn a_hilbert_rectangle_needs_fewer_ranges_than_z_order() {
        let rect = TileRange {
            z: 10,
            min_x: 100,
            max_x: 163,
            min_y: 300,
            max_y: 331,
        };
        let h = Curve::Hilbert.ranges(10, &rect, 0).len();
        let z = Curve::Zorder.ranges(10, &rect, 0).len();
        assert!(h <= z, "hilbert {h} vs z-order {z}");
    }
}
