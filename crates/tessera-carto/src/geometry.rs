//! Geometry both cutting and drawing build with GEOS: polygons from rings
//! of points.

use geos::Geom;

/// A multipolygon of closed rings (rings of fewer than three points are
/// left out; a polygon whose exterior is, too), each polygon larger than a
/// few `tolerance`s simplified by Douglas-Peucker (a fraction of the cost
/// of the topology-preserving kind: what it breaks, snap-rounding
/// repairs); smaller ones are kept as they are, so that a small island
/// stays in the tile as PostGIS keeps it.
pub fn build_polygons(
    polygons: &[Vec<Vec<(f64, f64)>>],
    tolerance: f64,
) -> geos::GResult<geos::Geometry> {
    let mut parts = Vec::with_capacity(polygons.len());
    for rings in polygons {
        let mut closed = Vec::with_capacity(rings.len());
        for (i, r) in rings.iter().enumerate() {
            let open = if r.len() > 1 && r.first() == r.last() {
                &r[..r.len() - 1]
            } else {
                &r[..]
            };
            if open.len() < 3 {
                if i == 0 {
                    break;
                }
                continue;
            }
            let mut ring = open.to_vec();
            ring.push(open[0]);
            closed.push(geos::Geometry::create_linear_ring(coords(&ring)?)?);
        }
        if closed.is_empty() {
            continue;
        }
        let exterior = closed.remove(0);
        let polygon = geos::Geometry::create_polygon(exterior, closed)?;
        let (w, h) = extent_of(&rings[0]);
        if tolerance > 0.0 && w.max(h) > 4.0 * tolerance {
            let simple = polygon.simplify(tolerance)?;
            if !simple.is_empty()? {
                for i in 0..simple.get_num_geometries()? {
                    parts.push(geos::Geom::clone(&simple.get_geometry_n(i)?)?);
                }
                continue;
            }
        }
        parts.push(polygon);
    }
    geos::Geometry::create_multipolygon(parts)
}

/// The points as a GEOS coordinate sequence.
pub fn coords(points: &[(f64, f64)]) -> geos::GResult<geos::CoordSeq> {
    let flat: Vec<[f64; 2]> = points.iter().map(|&(x, y)| [x, y]).collect();
    geos::CoordSeq::new_from_vec(&flat)
}

/// The width and height of the points' bounds.
fn extent_of(points: &[(f64, f64)]) -> (f64, f64) {
    let (mut x0, mut y0, mut x1, mut y1) = (f64::MAX, f64::MAX, f64::MIN, f64::MIN);
    for &(x, y) in points {
        x0 = x0.min(x);
        y0 = y0.min(y);
        x1 = x1.max(x);
        y1 = y1.max(y);
    }
    ((x1 - x0).max(0.0), (y1 - y0).max(0.0))
}
