//! Tiles that are a raster's own pixels, and tiles that are its blocks.
//!
//! A tile matrix whose cells are the pixels of one of the raster's levels
//! (the full resolution or an overview), on the same origin, needs no
//! resampling: a tile is read as it is stored, one block or a few, and is
//! best read alone rather than cut from a metatile ([`Levels::own_pixels`]).
//! When, moreover, the level's blocks are the matrix's tiles (a COG that
//! GDAL wrote with `TILING_SCHEME=GoogleMapsCompatible`, say) and a block
//! is JPEG or WebP, a `.jpg` or `.webp` tile is the block itself, passed on
//! undecoded ([`Blocks::tile`]): the TIFF's block tables are read once, by
//! range, and each tile is then one range read (one request over HTTP or
//! S3) through GDAL's virtual file system, so the source's credentials,
//! timeouts and location rules apply as to its other reads.

use std::ffi::CString;
use std::sync::{Mutex, PoisonError};

use bytes::Bytes;
use gdal::Dataset;
use tessera_grid::{TileCoord, TileFormat, TileMatrixSet};

use super::aligned::{AlignedGrid, same_axes};
use super::tiff::{self, Directory};
use crate::Crs;

/// TIFF compression codes of blocks that are whole images of a tile
/// format.
const JPEG: u64 = 7;
const WEBP: u64 = 50001;
/// TIFF photometric interpretation of JPEG's own colour model.
const YCBCR: u64 = 6;

/// The raster's levels: full resolution first, then its overviews.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Levels {
    /// The full resolution's geotransform (north up).
    gt: [f64; 6],
    /// Each level's width and height in pixels.
    sizes: Vec<(u64, u64)>,
}

/// Where a tile matrix falls on one of the raster's levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OnLevel {
    /// The level (0: full resolution).
    pub level: usize,
    /// The level's pixel column and row of the matrix's first tile's
    /// north-west corner, negated: tile `(x, y)` starts at level pixel
    /// `(x * tile_width - px, y * tile_height - py)`.
    pub px: i64,
    pub py: i64,
}

impl Levels {
    /// The levels of `ds` read as `grid` reads it (north up, no nodata):
    /// those of band 1.
    pub(crate) fn of(ds: &Dataset, grid: &AlignedGrid) -> Option<Levels> {
        let band = ds.rasterband(1).ok()?;
        let mut sizes = vec![(band.x_size() as u64, band.y_size() as u64)];
        for i in 0..band.overview_count().ok()? {
            let o = band.overview(usize::try_from(i).ok()?).ok()?;
            sizes.push((o.x_size() as u64, o.y_size() as u64));
        }
        Some(Levels {
            gt: grid.geo_transform(),
            sizes,
        })
    }

    /// The level whose pixels are the cells of `grid`'s matrix `z`, on
    /// the same origin: its resolution is the matrix's (a level's pixel
    /// is a whole number of full-resolution pixels on each axis) and the
    /// matrix's corner falls on a pixel corner. `None` when no level does,
    /// or `crs` (the source's) is not the grid's.
    pub(crate) fn own_pixels(&self, grid: &TileMatrixSet, z: u8, crs: &Crs) -> Option<OnLevel> {
        let matrix = grid.matrix(z)?;
        // The grid's CRS as written is most often the source's id: no
        // parse (a lookup and a copy) on every tile.
        if grid.crs != crs.id && !Crs::parse(&grid.crs).is_ok_and(|g| same_axes(&g, crs)) {
            return None;
        }
        let cell = matrix.resolution;
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(f64::MIN_POSITIVE);
        let (w0, h0) = self.sizes[0];
        let level = self.sizes.iter().position(|&(w, h)| {
            w > 0
                && h > 0
                && w0 % w == 0
                && h0 % h == 0
                && close(self.gt[1] * (w0 / w) as f64, cell)
                && close(-self.gt[5] * (h0 / h) as f64, cell)
        })?;
        let whole = |v: f64| (v - v.round()).abs() < 1e-6;
        let px = (self.gt[0] - grid.origin_x) / cell;
        let py = (grid.origin_y - self.gt[3]) / cell;
        (whole(px) && whole(py)).then(|| OnLevel {
            level,
            px: px.round() as i64,
            py: py.round() as i64,
        })
    }

    /// Lines for `tessera check`: at which zooms of `grid` tiles are the
    /// raster's own pixels, and at which its blocks (`blocks`, when read).
    pub(crate) fn report(
        &self,
        grid: &TileMatrixSet,
        crs: &Crs,
        blocks: Option<&Blocks>,
    ) -> Vec<String> {
        let zooms: Vec<(u8, OnLevel)> = (0..=grid.max_zoom())
            .filter_map(|z| self.own_pixels(grid, z, crs).map(|on| (z, on)))
            .collect();
        let mut lines = Vec::new();
        if zooms.is_empty() {
            return lines;
        }
        let own: Vec<u8> = zooms.iter().map(|&(z, _)| z).collect();
        lines.push(format!(
            "tiles of {} are the raster's own pixels (read without resampling, alone) at zooms {}",
            grid.id,
            spans(&own)
        ));
        if let Some(blocks) = blocks {
            let passed: Vec<(u8, &'static str)> = zooms
                .iter()
                .filter_map(|&(z, on)| blocks.kind(grid, on).map(|k| (z, k)))
                .collect();
            for kind in ["jpeg", "webp"] {
                let at: Vec<u8> = passed.iter().filter(|p| p.1 == kind).map(|p| p.0).collect();
                if !at.is_empty() {
                    lines.push(format!(
                        "tiles of {} are its {} blocks (.{} tiles passed through undecoded) at zooms {}",
                        grid.id,
                        kind.to_uppercase(),
                        if kind == "jpeg" { "jpg" } else { kind },
                        spans(&at)
                    ));
                }
            }
        }
        lines
    }
}

/// `0-3, 5` for `[0, 1, 2, 3, 5]`.
fn spans(zooms: &[u8]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < zooms.len() {
        let mut j = i;
        while j + 1 < zooms.len() && zooms[j + 1] == zooms[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            zooms[i].to_string()
        } else {
            format!("{}-{}", zooms[i], zooms[j])
        });
        i = j + 1;
    }
    out.join(", ")
}

/// The block tables of a tiled TIFF's levels, for blocks passed through.
#[derive(Debug)]
pub(crate) struct Blocks {
    path: String,
    /// Open handles on the file, each used by one thread at a time.
    files: Mutex<Vec<VsiFile>>,
    /// Per level of [`Levels`] (matched by size), its directory.
    levels: Vec<Option<Directory>>,
    /// Bands the source reads, and whether the last of them is alpha.
    bands: usize,
    has_alpha: bool,
}

impl Blocks {
    /// Reads the block tables of the TIFF at `path` (through GDAL's
    /// virtual file system) for `levels`, on one handle kept for the
    /// blocks; an error saying why when it is not a TIFF or is damaged.
    pub(crate) fn read(path: &str, levels: &Levels, grid: &AlignedGrid) -> Result<Blocks, String> {
        let file = VsiFile::open(path)?;
        let read = |offset: u64, len: usize| {
            file.read_at(offset, len, true)
                .map_err(|e| format!("{e} of {path}"))
        };
        let dirs = tiff::directories(&read)?;
        let images: Vec<Directory> = dirs.into_iter().filter(|d| !d.is_mask()).collect();
        let levels = levels
            .sizes
            .iter()
            .map(|&(w, h)| {
                images
                    .iter()
                    .find(|d| (d.width, d.height) == (w, h) && d.block.is_some())
                    .cloned()
            })
            .collect();
        Ok(Blocks {
            path: path.to_string(),
            files: Mutex::new(vec![file]),
            levels,
            bands: grid.bands(),
            has_alpha: grid.has_alpha(),
        })
    }

    /// What a level's blocks are when they are the matrix's tiles and
    /// whole images of a tile format: `jpeg` (3 bands, YCbCr: a JPEG
    /// file once its tables are put back) or `webp` (3 bands, or 4 with
    /// alpha).
    fn kind(&self, grid: &TileMatrixSet, on: OnLevel) -> Option<&'static str> {
        let d = self.levels.get(on.level)?.as_ref()?;
        let (bw, bh) = d.block?;
        let (tw, th) = (u64::from(grid.tile_width), u64::from(grid.tile_height));
        let on_blocks = (bw, bh) == (tw, th)
            && on.px.rem_euclid(tw as i64) == 0
            && on.py.rem_euclid(th as i64) == 0;
        if !on_blocks || d.planar != 1 || d.bits != 8 {
            return None;
        }
        match d.compression {
            JPEG if d.photometric == YCBCR
                && d.samples == 3
                && self.bands == 3
                && !self.has_alpha
                && d.jpeg_tables.as_deref().is_none_or(is_jpeg) =>
            {
                Some("jpeg")
            }
            // Three samples without alpha, or four with it.
            WEBP if self.bands == 3 && d.samples == 3 + u64::from(self.has_alpha) => Some("webp"),
            _ => None,
        }
    }

    /// Whether tiles of `grid` on level `on` in `format` are blocks passed
    /// through (those wholly inside the raster).
    pub(crate) fn passes(&self, grid: &TileMatrixSet, on: OnLevel, format: TileFormat) -> bool {
        self.kind(grid, on) == Self::wanted(format)
    }

    /// The kind of block a tile `format` passes through.
    fn wanted(format: TileFormat) -> Option<&'static str> {
        match format {
            TileFormat::Jpeg | TileFormat::Mixed => Some("jpeg"),
            TileFormat::Webp => Some("webp"),
            _ => None,
        }
    }

    /// Tile `coord` of `grid` in `format` as the block it is, when it is
    /// one: the matrix's tiles are the level's blocks, the block is whole
    /// image of `format` (JPEG for `.jpg` and the mixed format, which is
    /// JPEG where opaque; WebP for `.webp`) and lies wholly inside the
    /// raster. `None` when the tile must be rendered; an error when the
    /// read fails.
    pub(crate) fn tile(
        &self,
        grid: &TileMatrixSet,
        coord: TileCoord,
        format: TileFormat,
        on: OnLevel,
    ) -> Option<Result<Bytes, String>> {
        let kind = self.kind(grid, on)?;
        if Some(kind) != Self::wanted(format) {
            return None;
        }
        let d = self.levels[on.level].as_ref()?;
        let (bw, bh) = d.block?;
        let col = i64::from(coord.x()) * bw as i64 - on.px;
        let row = i64::from(coord.y()) * bh as i64 - on.py;
        // Wholly inside: a block past the raster's edge holds pixels
        // that are not data.
        if col < 0 || row < 0 || col as u64 + bw > d.width || row as u64 + bh > d.height {
            return None;
        }
        let index = usize::try_from(row as u64 / bh * d.blocks_across() + col as u64 / bw).ok()?;
        let (offset, len) = (*d.offsets.get(index)?, *d.counts.get(index)?);
        if offset == 0 || len == 0 {
            // A sparse block (not written): GDAL reads it as empty.
            return None;
        }
        let len = usize::try_from(len).ok()?;
        Some(
            self.read_block(offset, len)
                .map(|block| match (kind, &d.jpeg_tables) {
                    ("jpeg", Some(tables)) => with_tables(&block, tables),
                    _ => Bytes::from(block),
                }),
        )
    }

    /// `len` bytes at `offset`, on a pooled open handle (at most
    /// [`FILES_KEPT`] kept): no open and close per tile.
    /// The directory of level `level` (0: full resolution), when it is
    /// a tiled image of the file.
    pub(crate) fn level(&self, level: usize) -> Option<&Directory> {
        self.levels.get(level)?.as_ref()
    }

    /// The levels, as GDAL lists them.
    pub(crate) fn level_count(&self) -> usize {
        self.levels.len()
    }

    /// `len` bytes of the file at `offset` (a block), all of them.
    pub(crate) fn read_block(&self, offset: u64, len: usize) -> Result<Vec<u8>, String> {
        let pooled = self
            .files
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let file = match pooled {
            Some(f) => f,
            None => VsiFile::open(&self.path)?,
        };
        let read = file.read_at(offset, len, false);
        let mut files = self.files.lock().unwrap_or_else(PoisonError::into_inner);
        if read.is_ok() && files.len() < FILES_KEPT {
            files.push(file);
        }
        read.map_err(|e| format!("{e} of {}", self.path))
    }
}

/// Open handles on a file kept per source.
const FILES_KEPT: usize = 8;

/// A file open through GDAL's virtual file system, closed when dropped.
#[derive(Debug)]
struct VsiFile(*mut gdal_sys::VSILFILE);

// SAFETY: a VSILFILE may move between threads; it is used by one thread
// at a time (taken from and given back to a pool under a mutex).
unsafe impl Send for VsiFile {}

impl VsiFile {
    fn open(path: &str) -> Result<VsiFile, String> {
        let c_path = CString::new(path).map_err(|_| "a path with a NUL byte".to_string())?;
        // SAFETY: both strings are NUL-terminated and outlive the call.
        let fp = unsafe { gdal_sys::VSIFOpenL(c_path.as_ptr(), c"rb".as_ptr()) };
        if fp.is_null() {
            return Err(format!("cannot open {path}"));
        }
        Ok(VsiFile(fp))
    }

    /// `len` bytes from `offset`: all of them, or (`short_ok`) as many as
    /// the file has.
    fn read_at(&self, offset: u64, len: usize, short_ok: bool) -> Result<Vec<u8>, String> {
        let mut buf = vec![0u8; len];
        // SAFETY: the handle is open until drop; `buf` has `len` writable
        // bytes.
        let read = unsafe {
            if gdal_sys::VSIFSeekL(self.0, offset, libc::SEEK_SET) == 0 {
                gdal_sys::VSIFReadL(buf.as_mut_ptr().cast(), 1, len, self.0)
            } else {
                0
            }
        };
        if read < len && !short_ok {
            return Err(format!("read {read} of {len} bytes at byte {offset}"));
        }
        buf.truncate(read);
        Ok(buf)
    }
}

impl Drop for VsiFile {
    fn drop(&mut self) {
        // SAFETY: the handle is open and not used after this.
        unsafe { gdal_sys::VSIFCloseL(self.0) };
    }
}

/// Whether `b` is framed as a JPEG stream (start and end of image).
fn is_jpeg(b: &[u8]) -> bool {
    b.len() >= 4 && b.starts_with(&[0xff, 0xd8]) && b.ends_with(&[0xff, 0xd9])
}

/// A JPEG file from an abbreviated block and the tables it leaves out:
/// the block's start of image, the tables (between their own start and
/// end of image), and the rest of the block.
fn with_tables(block: &[u8], tables: &[u8]) -> Bytes {
    if !block.starts_with(&[0xff, 0xd8]) || !is_jpeg(tables) {
        return Bytes::copy_from_slice(block);
    }
    let inner = &tables[2..tables.len() - 2];
    let mut out = Vec::with_capacity(block.len() + inner.len());
    out.extend_from_slice(&block[..2]);
    out.extend_from_slice(inner);
    out.extend_from_slice(&block[2..]);
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_join_runs() {
        assert_eq!(spans(&[0, 1, 2, 3, 5, 7, 8]), "0-3, 5, 7-8");
        assert_eq!(spans(&[4]), "4");
    }

    #[test]
    fn tables_go_between_the_start_and_the_frame() {
        let tables = [0xff, 0xd8, 0xff, 0xdb, 1, 2, 0xff, 0xd9];
        let block = [0xff, 0xd8, 0xff, 0xc0, 9, 0xff, 0xd9];
        let whole = with_tables(&block, &tables);
        assert_eq!(
            &whole[..],
            &[0xff, 0xd8, 0xff, 0xdb, 1, 2, 0xff, 0xc0, 9, 0xff, 0xd9]
        );
        // Tables that are not framed as JPEG leave the block as it is.
        assert_eq!(&with_tables(&block, &[1, 2])[..], &block);
    }

    fn web_mercator_levels(origin_tiles: (f64, f64), z: u8, size: u64, overviews: u32) -> Levels {
        let grid = TileMatrixSet::web_mercator_quad();
        let cell = grid.matrix(z).unwrap().resolution;
        let mut sizes = vec![(size, size)];
        for k in 1..=overviews {
            sizes.push((size >> k, size >> k));
        }
        Levels {
            gt: [
                grid.origin_x + origin_tiles.0 * 256.0 * cell,
                cell,
                0.0,
                grid.origin_y - origin_tiles.1 * 256.0 * cell,
                0.0,
                -cell,
            ],
            sizes,
        }
    }

    #[test]
    fn finds_the_level_of_each_zoom() {
        let crs = Crs::parse("EPSG:3857").unwrap();
        let grid = TileMatrixSet::web_mercator_quad();
        // A z8 raster starting at tile (4, 6) with three overviews.
        let levels = web_mercator_levels((4.0, 6.0), 8, 4096, 3);
        let on = levels.own_pixels(&grid, 8, &crs).unwrap();
        assert_eq!(
            on,
            OnLevel {
                level: 0,
                px: 1024,
                py: 1536
            }
        );
        let on = levels.own_pixels(&grid, 6, &crs).unwrap();
        assert_eq!(
            on,
            OnLevel {
                level: 2,
                px: 256,
                py: 384
            }
        );
        assert!(
            levels.own_pixels(&grid, 4, &crs).is_none(),
            "no z4 overview"
        );
        assert!(
            levels.own_pixels(&grid, 9, &crs).is_none(),
            "finer than the data"
        );
        let other = Crs::parse("EPSG:4326").unwrap();
        assert!(levels.own_pixels(&grid, 8, &other).is_none());
        // Half a pixel off the grid: resampled.
        let mut shifted = levels.clone();
        shifted.gt[0] += shifted.gt[1] / 2.0;
        assert!(shifted.own_pixels(&grid, 8, &crs).is_none());
        let lines = levels.report(&grid, &crs, None);
        assert_eq!(lines.len(), 1);
        assert!(lines[0].ends_with("zooms 5-8"), "{lines:?}");
    }
}
