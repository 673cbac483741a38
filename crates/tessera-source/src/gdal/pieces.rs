//! How one window is cut into the warps GDAL plans well.
//!
//! GDAL's warper plans a window as a whole: it chooses the overview from
//! the span of source columns the window covers, and the size of its
//! resampling filter from the ratio of source to target pixels over each
//! chunk it warps. Two kinds of window defeat that plan. One that crosses
//! the antimeridian (a metatile's gutter at the edge of a world grid)
//! covers source columns on both sides of the world, so GDAL reads an
//! overview far coarser than the window needs. A tall one whose vertical
//! scale varies from row to row (Web Mercator at low zooms) gets one filter
//! size for rows that each need their own. So a window is cut at the
//! world's edges (the parts past them shifted back into the world) and,
//! when its scale varies, into bands of tile rows: each tile is then drawn
//! as it is when warped alone.

use tessera_grid::BBox;

use crate::{Crs, WindowRequest};

/// Relative change of vertical scale between bands below which a window is
/// warped whole (the filter sizes would differ by less).
const SCALE_TOLERANCE: f64 = 0.01;

/// Part of a window: its area and where its pixels go in the window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Piece {
    /// Area in the window's CRS (shifted into the world when the window
    /// crosses its edge).
    pub bbox: BBox,
    /// First column in the window.
    pub x0: u32,
    /// First row in the window.
    pub y0: u32,
    /// Columns.
    pub width: u32,
    /// Rows.
    pub height: u32,
}

impl Piece {
    /// The request for this piece's pixels: `req`'s settings, the piece's
    /// area and size, and `req`'s tile rows as seen from the piece (none
    /// for a band, which is one row of tiles).
    pub(crate) fn request<'a>(&self, req: &WindowRequest<'a>, band: bool) -> WindowRequest<'a> {
        WindowRequest {
            bbox: self.bbox,
            width: self.width,
            height: self.height,
            tile_rows: if band {
                None
            } else {
                req.tile_rows.map(|r| r.from_row(self.y0))
            },
            ..*req
        }
    }
}

/// The window's columns cut at the edges of its CRS's world, each part
/// shifted into the world (one part for a window wholly past an edge);
/// `None` when the window stays inside it, its
/// CRS has no world edges (meridians that converge), or it spans more
/// than two worlds (left to GDAL's own wrapping).
pub(crate) fn columns_in_world(req: &WindowRequest<'_>) -> Option<Vec<Piece>> {
    let (west, east) = req.crs.world_x_range()?;
    let world = east - west;
    let b = req.bbox;
    if (b.min_x >= west && b.max_x <= east) || b.width() > 2.0 * world || req.width < 2 {
        return None;
    }
    let res = b.width() / f64::from(req.width);
    // The columns where the window meets an edge of the world.
    let mut cuts = vec![0u32];
    let first = ((b.min_x - west) / world).floor() as i64 + 1;
    let last = ((b.max_x - west) / world).ceil() as i64 - 1;
    for k in first..=last {
        let edge = west + k as f64 * world;
        let column = ((edge - b.min_x) / res).round();
        if column > 0.0 && column < f64::from(req.width) {
            cuts.push(column as u32);
        }
    }
    cuts.push(req.width);
    cuts.dedup();
    let pieces: Vec<Piece> = cuts
        .windows(2)
        .map(|pair| {
            let (c0, c1) = (pair[0], pair[1]);
            let lo = b.min_x + f64::from(c0) * res;
            let hi = b.min_x + f64::from(c1) * res;
            // Which world the piece lies in, by its middle; shifted back
            // and held inside the world's edges (a piece ending a rounding
            // error past an edge would wrap again).
            let k = ((f64::midpoint(lo, hi) - west) / world).floor();
            let shift = k * world;
            let (x0, x1) = ((lo - shift).max(west), (hi - shift).min(east));
            BBox::new(x0, b.min_y, x1, b.max_y).ok().map(|bbox| Piece {
                bbox,
                x0: c0,
                y0: 0,
                width: c1 - c0,
                height: req.height,
            })
        })
        .collect::<Option<_>>()?;
    // One piece is a window wholly past an edge, shifted back.
    (!pieces.is_empty()).then_some(pieces)
}

/// The window's bands of tile rows when its vertical scale in the source
/// varies between them (and the source is read coarser than the window
/// somewhere: an enlarged read has one filter size whatever the scale);
/// `None` to warp it whole. `row_height` is the height of a source pixel
/// in `native` units.
pub(crate) fn bands(req: &WindowRequest<'_>, native: &Crs, row_height: f64) -> Option<Vec<Piece>> {
    let rows = req.tile_rows?;
    let bands = rows.bands(req.height);
    if bands.len() < 2 || row_height.is_nan() || row_height <= 0.0 {
        return None;
    }
    let b = req.bbox;
    let res = b.height() / f64::from(req.height);
    let x = f64::midpoint(b.min_x, b.max_x);
    let mut ys: Vec<f64> = bands
        .iter()
        .map(|(y0, _)| b.max_y - f64::from(*y0) * res)
        .chain(std::iter::once(b.min_y))
        .collect();
    let mut xs = vec![x; ys.len()];
    req.crs.transform_points(native, &mut xs, &mut ys).ok()?;
    let scales: Vec<f64> = bands
        .iter()
        .zip(ys.windows(2))
        .map(|((_, h), pair)| (pair[0] - pair[1]).abs() / row_height / f64::from(*h))
        .collect();
    let (lo, hi) = scales.iter().fold((f64::INFINITY, 0.0_f64), |(lo, hi), s| {
        (lo.min(*s), hi.max(*s))
    });
    if !(lo.is_finite() && hi > 1.0 && hi > lo * (1.0 + SCALE_TOLERANCE)) {
        return None;
    }
    bands
        .into_iter()
        .map(|(y0, height)| {
            BBox::new(
                b.min_x,
                b.max_y - f64::from(y0 + height) * res,
                b.max_x,
                b.max_y - f64::from(y0) * res,
            )
            .ok()
            .map(|bbox| Piece {
                bbox,
                x0: 0,
                y0,
                width: req.width,
                height,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TileRows;

    const HALF: f64 = 20_037_508.342_789_244;

    fn window(crs: &Crs, bbox: BBox, width: u32, height: u32) -> WindowRequest<'_> {
        WindowRequest {
            bbox,
            crs,
            width,
            height,
            cancel: None,
            max_source_pixels: None,
            tile_rows: Some(TileRows {
                first: 8 + 256,
                height: 256,
            }),
        }
    }

    #[test]
    fn a_gutter_past_the_antimeridian_is_warped_from_the_other_side() {
        let mercator = Crs::parse("EPSG:3857").unwrap();
        // Zoom 3, columns 4-7 with an 8-pixel gutter.
        let g = 8.0 * HALF / 4.0 / 256.0;
        let req = window(
            &mercator,
            BBox::new(-g, 0.0, HALF + g, HALF / 2.0).unwrap(),
            1040,
            272,
        );
        let pieces = columns_in_world(&req).unwrap();
        assert_eq!(pieces.len(), 2);
        assert_eq!((pieces[0].x0, pieces[0].width), (0, 1032));
        assert_eq!((pieces[1].x0, pieces[1].width), (1032, 8));
        assert!((pieces[0].bbox.max_x - HALF).abs() < 1e-6);
        assert!((pieces[1].bbox.min_x + HALF).abs() < 1e-6);
        assert!((pieces[1].bbox.max_x - (-HALF + g)).abs() < 1e-6);
        // Zoom 0: a gutter on both sides.
        let g = 8.0 * 2.0 * HALF / 256.0;
        let req = window(
            &mercator,
            BBox::new(-HALF - g, -HALF - g, HALF + g, HALF + g).unwrap(),
            272,
            272,
        );
        let widths: Vec<(u32, u32)> = columns_in_world(&req)
            .unwrap()
            .iter()
            .map(|p| (p.x0, p.width))
            .collect();
        assert_eq!(widths, [(0, 8), (8, 256), (264, 8)]);
        // Inside the world, or in a CRS without world edges: whole.
        let inside = window(&mercator, BBox::new(0.0, 0.0, 1e6, 1e6).unwrap(), 256, 256);
        assert!(columns_in_world(&inside).is_none());
        let utm = Crs::parse("EPSG:31985").unwrap();
        let far = window(&utm, BBox::new(-1e8, 0.0, 1e8, 1e6).unwrap(), 256, 256);
        assert!(columns_in_world(&far).is_none());
        // In lon/lat too.
        let lonlat = Crs::parse("OGC:CRS84").unwrap();
        let req = window(
            &lonlat,
            BBox::new(170.0, 0.0, 190.0, 10.0).unwrap(),
            200,
            100,
        );
        let pieces = columns_in_world(&req).unwrap();
        assert_eq!((pieces[0].width, pieces[1].width), (100, 100));
        assert_eq!(
            pieces[1].bbox,
            BBox::new(-180.0, 0.0, -170.0, 10.0).unwrap()
        );
    }

    #[test]
    fn a_tall_window_whose_scale_varies_is_read_in_bands_of_tile_rows() {
        let mercator = Crs::parse("EPSG:3857").unwrap();
        let lonlat = Crs::parse("OGC:CRS84").unwrap();
        // Zoom 3, rows 0-3 (0-85°N) with an 8-pixel gutter, from a source of
        // 1/15° pixels: about 3 source rows per row at the equator.
        let g = 8.0 * HALF / 4.0 / 256.0;
        let req = window(
            &mercator,
            BBox::new(0.0, -g, HALF, HALF + g).unwrap(),
            1024,
            1040,
        );
        let bands = bands(&req, &lonlat, 1.0 / 15.0).unwrap();
        let rows: Vec<(u32, u32)> = bands.iter().map(|p| (p.y0, p.height)).collect();
        assert_eq!(rows, [(0, 264), (264, 256), (520, 256), (776, 264)]);
        assert!((bands[3].bbox.min_y + g).abs() < 1e-6);
        // The same window from a coarse source is enlarged everywhere.
        assert!(super::bands(&req, &lonlat, 1.0).is_none());
        // A window in the source's own CRS has one scale.
        let req = window(&lonlat, BBox::new(0.0, 0.0, 90.0, 90.0).unwrap(), 512, 512);
        assert!(super::bands(&req, &lonlat, 1.0 / 15.0).is_none());
    }

    #[test]
    fn tile_rows_seen_from_a_part_of_the_window() {
        let rows = TileRows {
            first: 264,
            height: 256,
        };
        assert_eq!(rows.bands(600), [(0, 264), (264, 256), (520, 80)]);
        // A metatile's bottom gutter joins the last row of tiles.
        assert_eq!(rows.bands(784), [(0, 264), (264, 256), (520, 264)]);
        assert_eq!(rows.from_row(0), rows);
        assert_eq!(rows.from_row(100).first, 164);
        assert_eq!(rows.from_row(264).first, 256);
        assert_eq!(rows.from_row(300).first, 220);
    }
}
