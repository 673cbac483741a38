//! Metatile geometry: which block of tiles a tile belongs to, the area and
//! pixel size rendered for the block (with its gutter), and where each tile
//! sits in the rendered image.

use tessera_grid::{BBox, TileCoord, TileMatrixSet, TileRange};
use tessera_source::TileRows;

/// How a layer groups tiles for rendering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetatileSpec {
    /// Tiles across.
    pub cols: u32,
    /// Tiles down.
    pub rows: u32,
    /// Extra pixels rendered on every side and cut away, so that resampling
    /// and styles see real neighbours at tile edges.
    pub gutter: u32,
}

/// One block of tiles at one zoom, clipped to the matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Metatile {
    /// The tiles it covers.
    pub range: TileRange,
    /// Gutter in pixels.
    pub gutter: u32,
}

impl Metatile {
    /// The metatile that holds `tile`: blocks are aligned to multiples of the
    /// block size from the grid's origin and clipped at the matrix edge.
    pub fn containing(tms: &TileMatrixSet, tile: TileCoord, spec: MetatileSpec) -> Metatile {
        let (cols, rows) = (spec.cols.max(1), spec.rows.max(1));
        let m = tms
            .matrix(tile.z())
            .expect("a TileCoord is always inside its grid");
        let min_x = tile.x() / cols * cols;
        let min_y = tile.y() / rows * rows;
        Metatile {
            range: TileRange {
                z: tile.z(),
                min_x,
                min_y,
                max_x: (min_x + cols - 1).min(m.matrix_width - 1),
                max_y: (min_y + rows - 1).min(m.matrix_height - 1),
            },
            gutter: spec.gutter,
        }
    }

    /// Tiles across.
    pub fn cols(&self) -> u32 {
        self.range.max_x - self.range.min_x + 1
    }

    /// Tiles down.
    pub fn rows(&self) -> u32 {
        self.range.max_y - self.range.min_y + 1
    }

    /// Every tile of the block, row by row from the top left.
    pub fn tiles<'a>(&self, tms: &'a TileMatrixSet) -> impl Iterator<Item = TileCoord> + 'a {
        let r = self.range;
        (r.min_y..=r.max_y).flat_map(move |y| {
            (r.min_x..=r.max_x).map(move |x| {
                tms.tile(u32::from(r.z), u64::from(x), u64::from(y))
                    .expect("a metatile is clipped to its matrix")
            })
        })
    }

    /// The area to render: the tiles plus the gutter, in the grid's CRS.
    pub fn render_bbox(&self, tms: &TileMatrixSet) -> BBox {
        let inner = tms.tile_range_bbox(&self.range);
        let res = tms
            .matrix(self.range.z)
            .expect("a metatile's zoom is in its grid")
            .resolution;
        let g = f64::from(self.gutter) * res;
        inner.buffered(g, g)
    }

    /// How the rendered image's rows fall into tiles: the top gutter and
    /// the first row of tiles, then a row of tiles at a time.
    pub fn tile_rows(&self, tms: &TileMatrixSet) -> TileRows {
        TileRows {
            first: self.gutter + tms.tile_height,
            height: tms.tile_height,
        }
    }

    /// Width and height of the rendered image, gutter included.
    pub fn render_size(&self, tms: &TileMatrixSet) -> (u32, u32) {
        (
            self.cols() * tms.tile_width + 2 * self.gutter,
            self.rows() * tms.tile_height + 2 * self.gutter,
        )
    }

    /// Top-left pixel of `tile` in the rendered image.
    pub fn pixel_offset(&self, tms: &TileMatrixSet, tile: TileCoord) -> (u32, u32) {
        (
            self.gutter + (tile.x() - self.range.min_x) * tms.tile_width,
            self.gutter + (tile.y() - self.range.min_y) * tms.tile_height,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: MetatileSpec = MetatileSpec {
        cols: 4,
        rows: 4,
        gutter: 8,
    };

    #[test]
    fn blocks_are_aligned_and_clipped() {
        let tms = TileMatrixSet::web_mercator_quad();
        let m = Metatile::containing(&tms, tms.tile(5, 13, 6).unwrap(), SPEC);
        assert_eq!(
            (m.range.min_x, m.range.min_y, m.cols(), m.rows()),
            (12, 4, 4, 4)
        );
        let z1 = Metatile::containing(&tms, tms.tile(1, 1, 0).unwrap(), SPEC);
        assert_eq!((z1.cols(), z1.rows()), (2, 2));
        assert_eq!(z1.tiles(&tms).count(), 4);
        // WorldCRS84Quad is two tiles wide at zoom 0 and one high.
        let crs84 = TileMatrixSet::world_crs84_quad();
        let w = Metatile::containing(&crs84, crs84.tile(0, 1, 0).unwrap(), SPEC);
        assert_eq!((w.cols(), w.rows()), (2, 1));
    }

    #[test]
    fn every_tile_of_a_block_maps_to_the_same_block() {
        let tms = TileMatrixSet::web_mercator_quad();
        let m = Metatile::containing(&tms, tms.tile(6, 21, 38).unwrap(), SPEC);
        for t in m.tiles(&tms) {
            assert_eq!(Metatile::containing(&tms, t, SPEC), m);
        }
    }

    #[test]
    fn tile_pixels_line_up_with_tile_bboxes() {
        let tms = TileMatrixSet::web_mercator_quad();
        let t = tms.tile(7, 45, 50).unwrap();
        let m = Metatile::containing(&tms, t, SPEC);
        let bbox = m.render_bbox(&tms);
        let (w, h) = m.render_size(&tms);
        assert_eq!((w, h), (4 * 256 + 16, 4 * 256 + 16));
        let res = bbox.width() / f64::from(w);
        let (px, py) = m.pixel_offset(&tms, t);
        let tb = tms.tile_bbox(t);
        assert!((bbox.min_x + f64::from(px) * res - tb.min_x).abs() < 1e-6);
        assert!((bbox.max_y - f64::from(py) * res - tb.max_y).abs() < 1e-6);
    }
}
