//! Which tiles of a zoom a polygon touches, row by row, as column spans.
//!
//! A tile touches the polygon when an edge passes through it or it lies
//! inside (even-odd rule, so holes work). Per tile row, the edges clipped to
//! the row's band give the tiles they cross, and the crossings of the row's
//! centre line give the tiles inside; the union is exact and costs
//! O(rows x edges), not O(tiles x edges).

use crate::{TileMatrixSet, TileRange};

/// A polygon in the grid's CRS: the exterior ring first, then holes; rings
/// need not be closed (the last point joins the first).
pub type Polygon = Vec<Vec<[f64; 2]>>;

impl TileMatrixSet {
    /// The tiles at zoom `z` that `polygons` touch, as one-row ranges of
    /// consecutive columns, top row first. Empty when the zoom does not
    /// exist or nothing is touched.
    #[allow(clippy::float_cmp)] // exact on purpose: a horizontal edge has no slope
    pub fn tiles_in_polygons(&self, z: u8, polygons: &[Polygon]) -> Vec<TileRange> {
        let Some(m) = self.matrix(z) else {
            return Vec::new();
        };
        let span_x = m.resolution * f64::from(self.tile_width);
        let span_y = m.resolution * f64::from(self.tile_height);
        // Edges in tile units: column = (x - origin_x) / span_x, row = (origin_y - y) / span_y.
        let mut edges = Vec::new();
        for ring in polygons.iter().flatten() {
            if ring.len() < 3 {
                continue;
            }
            for i in 0..ring.len() {
                let a = ring[i];
                let b = ring[(i + 1) % ring.len()];
                let to_tile = |p: [f64; 2]| {
                    (
                        (p[0] - self.origin_x) / span_x,
                        (self.origin_y - p[1]) / span_y,
                    )
                };
                edges.push((to_tile(a), to_tile(b)));
            }
        }
        let (w, h) = (f64::from(m.matrix_width), f64::from(m.matrix_height));
        let (min_row, max_row) = edges
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), ((_, r0), (_, r1))| {
                (lo.min(*r0).min(*r1), hi.max(*r0).max(*r1))
            });
        if edges.is_empty() || max_row < 0.0 || min_row >= h {
            return Vec::new();
        }
        let first = min_row.floor().max(0.0) as u32;
        let last = (max_row.ceil() - 1.0).min(h - 1.0).max(0.0) as u32;
        let mut out = Vec::new();
        let mut cols: Vec<(f64, f64)> = Vec::new();
        for row in first..=last {
            let (top, bottom) = (f64::from(row), f64::from(row) + 1.0);
            cols.clear();
            // Tiles crossed by edges: each edge clipped to the band.
            for &((c0, r0), (c1, r1)) in &edges {
                let (lo, hi) = (r0.min(r1), r0.max(r1));
                if hi < top || lo > bottom {
                    continue;
                }
                let at = |r: f64| {
                    if r1 == r0 {
                        c0
                    } else {
                        c0 + (c1 - c0) * (r - r0) / (r1 - r0)
                    }
                };
                let (ra, rb) = (lo.max(top), hi.min(bottom));
                let (xa, xb) = if r1 == r0 { (c0, c1) } else { (at(ra), at(rb)) };
                cols.push((xa.min(xb), xa.max(xb)));
            }
            // Tiles inside: crossings of the centre line, even-odd.
            let mid = f64::from(row) + 0.5;
            let mut xs: Vec<f64> = edges
                .iter()
                .filter(|((_, r0), (_, r1))| (*r0 <= mid) != (*r1 <= mid))
                .map(|((c0, r0), (c1, r1))| c0 + (c1 - c0) * (mid - r0) / (r1 - r0))
                .collect();
            xs.sort_by(f64::total_cmp);
            for pair in xs.chunks_exact(2) {
                // Tiles whose centre lies between the crossings.
                cols.push((pair[0] + 0.5, pair[1] - 0.5));
            }
            let mut spans: Vec<(u32, u32)> = cols
                .iter()
                .filter(|(a, b)| a <= b && *b >= 0.0 && *a < w)
                .map(|(a, b)| {
                    let first = a.floor().max(0.0) as u32;
                    let last = (b.ceil() - 1.0).max(a.floor()).min(w - 1.0).max(0.0) as u32;
                    (first, last)
                })
                .collect();
            spans.sort_unstable();
            let mut merged: Vec<(u32, u32)> = Vec::new();
            for (a, b) in spans {
                match merged.last_mut() {
                    Some(last) if a <= last.1 + 1 => last.1 = last.1.max(b),
                    _ => merged.push((a, b)),
                }
            }
            out.extend(merged.into_iter().map(|(a, b)| TileRange {
                z,
                min_x: a,
                max_x: b,
                min_y: row,
                max_y: row,
            }));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// Brute force: does the polygon touch the unit box at (col, row)?
    type Edge = ((f64, f64), (f64, f64));

    fn touches(edges: &[Edge], col: f64, row: f64) -> bool {
        let inside = |x: f64, y: f64| {
            edges
                .iter()
                .filter(|((_, r0), (_, r1))| (*r0 <= y) != (*r1 <= y))
                .filter(|((c0, r0), (c1, r1))| x < c0 + (c1 - c0) * (y - r0) / (r1 - r0))
                .count()
                % 2
                == 1
        };
        if inside(col + 0.5, row + 0.5) {
            return true;
        }
        // Any edge meeting the box: clip the segment (Liang-Barsky).
        edges.iter().any(|&((x0, y0), (x1, y1))| {
            let (dx, dy) = (x1 - x0, y1 - y0);
            let (mut t0, mut t1) = (0.0f64, 1.0f64);
            for (p, q) in [
                (-dx, x0 - col),
                (dx, col + 1.0 - x0),
                (-dy, y0 - row),
                (dy, row + 1.0 - y0),
            ] {
                if p == 0.0 {
                    if q < 0.0 {
                        return false;
                    }
                } else {
                    let t = q / p;
                    if p < 0.0 {
                        t0 = t0.max(t);
                    } else {
                        t1 = t1.min(t);
                    }
                }
            }
            t0 <= t1
        })
    }

    #[test]
    fn polygon_coverage_matches_brute_force_for_random_star_polygons_with_holes() {
        let tms = TileMatrixSet::web_mercator_quad();
        let mut seed = 0x2545_F491_4F6C_DD1D_u64;
        let mut rnd = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 11) as f64 / (1u64 << 53) as f64
        };
        let mut total = 0;
        for case in 0..200 {
            let z = 2 + (case % 4) as u8;
            let n = f64::from(1u32 << z);
            let half = crate::mercator::HALF_EXTENT_M;
            let span = 2.0 * half / n;
            let (cx, cy) = (-half + rnd() * 2.0 * half, -half + rnd() * 2.0 * half);
            let radius = span * (0.3 + rnd() * n / 3.0);
            let ring = |r: f64, k: usize, rnd: &mut dyn FnMut() -> f64| -> Vec<[f64; 2]> {
                let mut angles: Vec<f64> = (0..k).map(|_| rnd() * std::f64::consts::TAU).collect();
                angles.sort_by(f64::total_cmp);
                angles
                    .iter()
                    .map(|a| {
                        let rr = r * (0.4 + 0.6 * rnd());
                        [cx + rr * a.cos(), cy + rr * a.sin()]
                    })
                    .collect()
            };
            let mut polygon = vec![ring(radius, 5 + case % 9, &mut rnd)];
            if case % 3 == 0 {
                polygon.push(ring(radius * 0.2, 4, &mut rnd));
            }
            let got: BTreeSet<(u32, u32)> = tms
                .tiles_in_polygons(z, &[polygon.clone()])
                .iter()
                .flat_map(|r| (r.min_x..=r.max_x).map(move |x| (x, r.min_y)))
                .collect();
            let edges: Vec<_> = polygon
                .iter()
                .flat_map(|ring| {
                    (0..ring.len()).map(move |i| (ring[i], ring[(i + 1) % ring.len()]))
                })
                .map(|(a, b)| {
                    let t = |p: [f64; 2]| ((p[0] + half) / span, (half - p[1]) / span);
                    (t(a), t(b))
                })
                .collect();
            let n = 1u32 << z;
            let brute: BTreeSet<(u32, u32)> = (0..n)
                .flat_map(|y| (0..n).map(move |x| (x, y)))
                .filter(|&(x, y)| touches(&edges, f64::from(x), f64::from(y)))
                .collect();
            assert_eq!(got, brute, "case {case} at zoom {z}");
            total += brute.len();
        }
        assert!(total > 1000, "the polygons touch tiles ({total})");
    }

    #[test]
    fn a_box_polygon_gives_the_same_tiles_as_the_bbox() {
        let tms = TileMatrixSet::web_mercator_quad();
        let b = crate::BBox::new(-1_000_000.0, 2_000_000.0, 3_000_000.0, 5_500_000.0).unwrap();
        let ring = vec![
            [b.min_x, b.min_y],
            [b.max_x, b.min_y],
            [b.max_x, b.max_y],
            [b.min_x, b.max_y],
        ];
        let spans = tms.tiles_in_polygons(7, &[vec![ring]]);
        let r = tms.tiles_in_bbox(7, &b).unwrap();
        assert_eq!(spans.len() as u32, r.max_y - r.min_y + 1);
        assert!(
            spans
                .iter()
                .all(|s| (s.min_x, s.max_x) == (r.min_x, r.max_x))
        );
    }
}
