//! Tile pyramids as sources: tiles of one grid, fetched by coordinates
//! from wherever they are ([`TileFetch`]: an upstream XYZ/WMTS service, a
//! tile archive). A read fetches the tiles that cover the window at the
//! nearest zoom, all at once, stitches them and crops (same grid) or warps
//! (any other) into the window. When a layer's grid is the pyramid's and
//! nothing is styled, tiles pass through as fetched
//! ([`Source::passthrough`]).

use std::fmt::{Debug, Write as _};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use bytes::Bytes;
use tessera_grid::{BBox, TileCoord, TileFormat, TileMatrix, TileMatrixSet, TileRange};
use tessera_image::{Raster, RgbaImage, decode};

use crate::complete::check_tile;
use crate::warp::{empty_raster, warp_rgba};
use crate::{
    AskedValue, Crs, Found, Listed, Resampling, Source, SourceError, SourceInfo, TileMetadata,
    WindowRequest,
};

/// Most tiles one read may fetch.
const MAX_TILES_PER_READ: u64 = 1024;

/// Where a pyramid's tiles come from: tiles fetched by coordinates of the
/// pyramid's grid (rows from the top). Upstream services (HTTP) and tile
/// archives implement it; [`TiledSource`] plans, stitches and warps.
pub trait TileFetch: Send + Sync + Debug {
    /// The tiles at `coords` of `grid`, fetched at once: each its bytes as
    /// stored or sent (vector tiles gzip-compressed), `None` where there is
    /// no tile.
    fn tiles(
        &self,
        grid: &TileMatrixSet,
        coords: &[TileCoord],
        cancel: Option<&AtomicBool>,
    ) -> Result<Vec<Option<Bytes>>, SourceError>;

    /// Where tile `coord` comes from, for messages (no secrets).
    fn describe(&self, grid: &TileMatrixSet, coord: TileCoord) -> String;

    /// Starts fetching tiles a read will soon ask for; by default nothing.
    fn prefetch(&self, _grid: &TileMatrixSet, _coords: &[TileCoord]) {}

    /// Whether tiles are read from a local file (no network) by reads that
    /// honour `archive::without_waiting`: then they may be tried on the
    /// caller's thread. By default not.
    fn is_local(&self) -> bool {
        false
    }

    /// The tiles' version now, looked up again ([`Source::version_now`]);
    /// by default none (a service's tiles have no version).
    fn version_now(&self) -> Option<Result<Option<String>, SourceError>> {
        None
    }

    /// Vector tiles (`tiles`, at zoom `zoom` of `grid`, in `crs`) drawn
    /// into `request`'s window; `None` when these tiles are not drawn (the
    /// window is then empty).
    fn draw(
        &self,
        _tiles: &[(TileCoord, Bytes)],
        _grid: &TileMatrixSet,
        _crs: &Crs,
        _request: &WindowRequest<'_>,
        _zoom: f64,
    ) -> Option<Result<Raster, SourceError>> {
        None
    }

    /// The rules vector tiles are drawn with (see [`TileFetch::draw`]);
    /// `None` when they are not drawn.
    #[cfg(feature = "vector")]
    fn rules(&self) -> Option<&[tessera_carto::style::Rule]> {
        None
    }

    /// The values the tiles list for dimension `name` (any case); by
    /// default none.
    fn dimension_values(&self, _name: &str) -> Option<&[String]> {
        None
    }

    /// Whether a value of dimension `name` reaches where the tiles come
    /// from; by default not.
    fn takes_value(&self, _name: &str) -> bool {
        false
    }

    /// The tiles at dimension `values` (name, value as spelled where the
    /// tiles come from); `None` when values change nothing.
    fn at_values(&self, _values: &[(String, String)]) -> Option<Arc<dyn TileFetch>> {
        None
    }
}

/// What a pyramid is: its grid and CRS, its zooms, its tiles' format and
/// the area it covers.
#[derive(Debug, Clone)]
pub struct Pyramid {
    /// The grid its tiles are cut in.
    pub grid: TileMatrixSet,
    /// The grid's CRS.
    pub crs: Crs,
    /// Lowest and highest zoom it has (the highest capped at the grid's).
    pub zooms: (u8, u8),
    /// Its tiles' format.
    pub format: TileFormat,
    /// The area it covers, in longitude/latitude.
    pub lonlat: BBox,
}

/// A tile pyramid as a source: tiles of one grid, read by coordinates
/// through a [`TileFetch`].
#[derive(Debug)]
pub struct TiledSource {
    name: String,
    fetch: Arc<dyn TileFetch>,
    grid: TileMatrixSet,
    crs: Crs,
    min_zoom: u8,
    max_zoom: u8,
    format: TileFormat,
    resampling: Resampling,
    info: SourceInfo,
    /// What an archive says about itself.
    metadata: Option<TileMetadata>,
}

impl TiledSource {
    /// The pyramid's tiles, fetched by `fetch`, as a source named `name`
    /// (in messages), warped with `resampling` where a window is not on
    /// the grid.
    pub fn new(
        name: String,
        fetch: Arc<dyn TileFetch>,
        pyramid: Pyramid,
        resampling: Resampling,
    ) -> TiledSource {
        let Pyramid {
            grid,
            crs,
            zooms: (min_zoom, max_zoom),
            format,
            lonlat,
        } = pyramid;
        let max_zoom = max_zoom.min(grid.max_zoom());
        let native_bounds = Crs::parse("OGC:CRS84")
            .ok()
            .and_then(|w| w.transform_bbox(&lonlat, &crs).ok())
            .and_then(|b| b.intersection(&grid.extent))
            .unwrap_or(grid.extent);
        let native_resolution = grid
            .matrix(max_zoom)
            .map_or(native_bounds.width() / 256.0, |m| m.resolution);
        let info = SourceInfo {
            band_count: 3,
            is_byte: true,
            native_crs: crs.clone(),
            native_bounds,
            lonlat_bounds: lonlat,
            native_resolution,
        };
        TiledSource {
            name,
            fetch,
            grid,
            crs,
            min_zoom,
            max_zoom,
            format,
            resampling,
            info,
            metadata: None,
        }
    }

    /// This source with what its archive says about itself.
    #[must_use]
    pub fn with_metadata(mut self, metadata: TileMetadata) -> TiledSource {
        self.metadata = Some(metadata);
        self
    }

    /// The same pyramid at dimension `values` (name, value as the upstream
    /// spells it): the same grid, zooms, format and extent; its fetch's
    /// own (an upstream's tile URLs with the values in, sharing its
    /// client).
    #[must_use]
    pub fn with_values(&self, values: &[(String, String)]) -> TiledSource {
        let mut name = self.name.clone();
        let fetch = match self.fetch.at_values(values) {
            Some(fetch) => {
                for (dimension, value) in values {
                    let _ = write!(name, " {dimension}={value}");
                }
                fetch
            }
            None => self.fetch.clone(),
        };
        TiledSource {
            name,
            fetch,
            grid: self.grid.clone(),
            crs: self.crs.clone(),
            min_zoom: self.min_zoom,
            max_zoom: self.max_zoom,
            format: self.format,
            resampling: self.resampling,
            info: self.info.clone(),
            metadata: self.metadata.clone(),
        }
    }

    /// The pyramid's grid.
    pub fn grid(&self) -> &TileMatrixSet {
        &self.grid
    }

    /// The tiles a read of `request` stitches; `None` when the window is
    /// outside the pyramid's extent (every pixel empty).
    fn plan(&self, request: &WindowRequest<'_>) -> Result<Option<ReadPlan>, SourceError> {
        let read_err = |e: SourceError| SourceError::Read {
            path: self.name.clone(),
            source: Box::new(e),
        };
        let same = self.crs.same_coordinates(request.crs);
        let window = if same {
            request.bbox
        } else {
            let Some(part) = request.bbox.intersection(
                &self
                    .crs
                    .transform_bbox(&self.info.native_bounds, request.crs)
                    .map_err(read_err)?,
            ) else {
                return Ok(None);
            };
            request
                .crs
                .transform_bbox(&part, &self.crs)
                .map_err(read_err)?
        };
        let Some(window) = window.intersection(&self.grid.extent) else {
            return Ok(None);
        };
        let resolution = if same {
            request.bbox.width() / f64::from(request.width)
        } else {
            // The window's pixels spread over its footprint in the pyramid.
            (window.width() * window.height()
                / (f64::from(request.width) * f64::from(request.height)))
            .sqrt()
        };
        let z = self
            .grid
            .zoom_for_resolution(resolution)
            .clamp(self.min_zoom, self.max_zoom);
        let Some(range) = self.grid.tiles_in_bbox(z, &window) else {
            return Ok(None);
        };
        if range.count() > MAX_TILES_PER_READ {
            return Err(SourceError::Upstream {
                url: self.name.clone(),
                message: format!(
                    "the window needs {} upstream tiles at zoom {z}, more than {MAX_TILES_PER_READ}; the upstream has no coarser zoom for it (min_zoom)",
                    range.count()
                ),
            });
        }
        Ok(Some(ReadPlan {
            covered: self.grid.tile_range_bbox(&range),
            resolution: self.grid.matrix(z).map(|m| m.resolution),
            range,
            same,
        }))
    }

    /// The tiles at `coords`, fetched at once.
    fn fetch_tiles(
        &self,
        coords: &[TileCoord],
        cancel: Option<&AtomicBool>,
    ) -> Result<Vec<Option<Bytes>>, SourceError> {
        self.fetch.tiles(&self.grid, coords, cancel)
    }

    /// Stitches the tiles of `range` into one image covering the range.
    fn stitched(
        &self,
        range: &TileRange,
        cancel: Option<&AtomicBool>,
    ) -> Result<RgbaImage, SourceError> {
        let (tw, th) = (self.grid.tile_width, self.grid.tile_height);
        let cols = range.max_x - range.min_x + 1;
        let rows = range.max_y - range.min_y + 1;
        // Sized from the pyramid's tile size: checked before anything is
        // fetched or allocated.
        let mut out = RgbaImage::try_transparent(
            u64::from(cols) * u64::from(tw),
            u64::from(rows) * u64::from(th),
        )
        .map_err(|e| SourceError::Upstream {
            url: self.name.clone(),
            message: e.to_string(),
        })?;
        let coords = range_coords(range);
        let tiles = self.fetch_tiles(&coords, cancel)?;
        let stride = out.width() as usize * 4;
        for (coord, bytes) in coords.iter().zip(tiles) {
            let Some(bytes) = bytes else { continue };
            let image = decode(&bytes, tw, th).map_err(|e| SourceError::Upstream {
                url: self.fetch.describe(&self.grid, *coord),
                message: e.to_string(),
            })?;
            let (ox, oy) = (
                (coord.x() - range.min_x) * tw,
                (coord.y() - range.min_y) * th,
            );
            let dst = out.as_raw_mut();
            for (row, line) in image.as_raw().chunks_exact((tw * 4) as usize).enumerate() {
                let at = (oy as usize + row) * stride + (ox * 4) as usize;
                dst[at..at + line.len()].copy_from_slice(line);
            }
        }
        Ok(out)
    }
}

/// The grid's extent in longitude/latitude (Web Mercator's when it cannot
/// be transformed).
pub fn lonlat_of(grid: &TileMatrixSet, crs: &Crs) -> Result<BBox, SourceError> {
    let wgs84 = Crs::parse("OGC:CRS84")?;
    crs.transform_bbox(&grid.extent, &wgs84).or_else(|_| {
        Ok(BBox {
            min_x: -180.0,
            min_y: -85.06,
            max_x: 180.0,
            max_y: 85.06,
        })
    })
}

/// Whether `a` and `b` cut the same tiles at zooms `0..=max_zoom` (same
/// CRS, origin, tile size, and per zoom the same resolution and matrix).
pub fn same_tiles(a: &TileMatrixSet, b: &TileMatrixSet, max_zoom: u8) -> bool {
    let close = |x: f64, y: f64| (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0);
    let matrices = |m: &TileMatrix, n: &TileMatrix| {
        close(m.resolution, n.resolution)
            && m.matrix_width == n.matrix_width
            && m.matrix_height == n.matrix_height
    };
    a.crs == b.crs
        && close(a.origin_x, b.origin_x)
        && close(a.origin_y, b.origin_y)
        && (a.tile_width, a.tile_height) == (b.tile_width, b.tile_height)
        && (0..=max_zoom).all(|z| match (a.matrix(z), b.matrix(z)) {
            (Some(m), Some(n)) => matrices(m, n),
            (None, None) => true,
            _ => false,
        })
}

impl Source for TiledSource {
    fn info(&self) -> &SourceInfo {
        &self.info
    }

    /// A WMTS layer's values, as its capabilities list them.
    fn listed_values(&self, name: &str, _field: Option<&str>, _most: usize) -> Found<Listed> {
        self.fetch
            .dimension_values(name)
            .map(|v| Ok(Listed::Values(v.to_vec())))
    }

    /// Whether the tiles' URL template has a place for the value (`{name}`,
    /// any case, or a KVP query it can join).
    fn takes_value(&self, name: &str) -> bool {
        self.fetch.takes_value(name)
    }

    /// The same pyramid with the values, as spelled, in its tile URLs.
    fn at_values(&self, values: &[AskedValue]) -> Found<Arc<dyn Source>> {
        let pairs: Vec<(String, String)> = values
            .iter()
            .map(|v| (v.name.clone(), v.spelled.clone()))
            .collect();
        Some(Ok(Arc::new(self.with_values(&pairs))))
    }

    fn tile_metadata(&self) -> Option<&TileMetadata> {
        self.metadata.as_ref()
    }

    /// Every data layer the tiles list (`vector_layers`' ids) with the
    /// rules they are drawn with.
    #[cfg(feature = "vector")]
    fn style_rules(&self) -> Vec<(String, Vec<tessera_carto::style::Rule>)> {
        let Some(rules) = self.fetch.rules() else {
            return Vec::new();
        };
        self.metadata
            .as_ref()
            .and_then(|m| m.vector_layers.as_ref())
            .and_then(serde_json::Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|l| l.get("id").and_then(serde_json::Value::as_str))
            .map(|id| (id.to_string(), rules.to_vec()))
            .collect()
    }

    fn passthrough_is_local(&self) -> bool {
        self.fetch.is_local()
    }

    fn version_now(&self) -> Option<Result<Option<String>, SourceError>> {
        self.fetch.version_now()
    }

    /// Starts fetching the tiles covering `request`'s window.
    fn prefetch(&self, request: &WindowRequest<'_>) {
        if let Ok(Some(plan)) = self.plan(request) {
            self.fetch.prefetch(&self.grid, &plan.coords());
        }
    }

    /// The covering tiles cropped, when the window is on the pyramid's
    /// pixel grid in its own CRS.
    fn read_image(&self, request: &WindowRequest<'_>) -> Option<Result<RgbaImage, SourceError>> {
        if self.format == TileFormat::Mvt {
            // Features to draw, not pixels to crop.
            return None;
        }
        let plan = match self.plan(request) {
            Ok(Some(plan)) if plan.same => plan,
            Ok(_) => return None,
            Err(e) => return Some(Err(e)),
        };
        let at = plan.aligned_at(self, request)?;
        Some(
            self.stitched(&plan.range, request.cancel)
                .map(|image| crop_at(&image, at, request)),
        )
    }

    fn read(&self, request: &WindowRequest<'_>) -> Result<Raster, SourceError> {
        let Some(plan) = self.plan(request)? else {
            return Ok(empty_raster(&self.info, request.width, request.height));
        };
        if self.format == TileFormat::Mvt {
            // Vector tiles: their features drawn by the fetch's rules.
            let coords = plan.coords();
            let tiles: Vec<(TileCoord, Bytes)> = coords
                .iter()
                .copied()
                .zip(self.fetch_tiles(&coords, request.cancel)?)
                .filter_map(|(c, t)| t.map(|t| (c, t)))
                .collect();
            return self
                .fetch
                .draw(
                    &tiles,
                    &self.grid,
                    &self.crs,
                    request,
                    f64::from(plan.range.z),
                )
                .unwrap_or_else(|| Ok(empty_raster(&self.info, request.width, request.height)));
        }
        let image = self.stitched(&plan.range, request.cancel)?;
        if plan.same
            && let Some(at) = plan.aligned_at(self, request)
        {
            return Ok(Raster::from_rgba(&crop_at(&image, at, request)));
        }
        warp_rgba(&image, &plan.covered, &self.crs, request, self.resampling).map_err(|source| {
            SourceError::Read {
                path: self.name.clone(),
                source,
            }
        })
    }

    fn passthrough(
        &self,
        grid: &TileMatrixSet,
        coord: TileCoord,
        format: TileFormat,
        cancel: Option<&AtomicBool>,
    ) -> Option<Result<Option<Bytes>, SourceError>> {
        if format != self.format
            || coord.z() < self.min_zoom
            || coord.z() > self.max_zoom
            || !same_tiles(grid, &self.grid, coord.z())
        {
            return None;
        }
        Some(
            self.fetch_tiles(&[coord], cancel)
                .map(|mut v| v.pop().flatten())
                .and_then(|bytes| match bytes {
                    // A tile is stored as it came only when it is whole:
                    // the right signature, and its framing complete.
                    Some(b) => {
                        match check_tile(&b, format, (self.grid.tile_width, self.grid.tile_height))
                        {
                            Ok(()) => Ok(Some(b)),
                            Err(e) => Err(SourceError::Upstream {
                                url: self.name.clone(),
                                message: format!(
                                    "{e} ({} bytes, starting {})",
                                    b.len(),
                                    crate::excerpt(&b[..b.len().min(16)])
                                ),
                            }),
                        }
                    }
                    None => Ok(None),
                }),
        )
    }
}

/// The tiles of `range`, row by row.
fn range_coords(range: &TileRange) -> Vec<TileCoord> {
    (range.min_y..=range.max_y)
        .flat_map(|y| (range.min_x..=range.max_x).map(move |x| TileCoord::restored(range.z, x, y)))
        .collect()
}

/// What a read stitches: the covering tiles, their extent and resolution,
/// and whether the window is in the pyramid's own CRS.
#[derive(Debug)]
struct ReadPlan {
    range: TileRange,
    covered: BBox,
    resolution: Option<f64>,
    same: bool,
}

impl ReadPlan {
    fn coords(&self) -> Vec<TileCoord> {
        range_coords(&self.range)
    }

    /// Where the window starts (column, row) in the stitched image, when
    /// it is on the image's pixel grid at its resolution and inside it;
    /// `None` otherwise (the window is warped).
    fn aligned_at(&self, source: &TiledSource, request: &WindowRequest<'_>) -> Option<(u32, u32)> {
        let res = self.resolution?;
        let want = request.bbox.width() / f64::from(request.width);
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-6 * res;
        if !close(want, res) || !close(request.bbox.height() / f64::from(request.height), res) {
            return None;
        }
        let col = (request.bbox.min_x - self.covered.min_x) / res;
        let row = (self.covered.max_y - request.bbox.max_y) / res;
        if (col - col.round()).abs() > 1e-6
            || (row - row.round()).abs() > 1e-6
            || col < 0.0
            || row < 0.0
        {
            return None;
        }
        let (col, row) = (col.round() as u32, row.round() as u32);
        let width = (self.range.max_x - self.range.min_x + 1) * source.grid.tile_width;
        let height = (self.range.max_y - self.range.min_y + 1) * source.grid.tile_height;
        (u64::from(col) + u64::from(request.width) <= u64::from(width)
            && u64::from(row) + u64::from(request.height) <= u64::from(height))
        .then_some((col, row))
    }
}

/// The window of `request`'s size cut from `image` at `(col, row)` (an
/// [`ReadPlan::aligned_at`] position).
fn crop_at(image: &RgbaImage, (col, row): (u32, u32), request: &WindowRequest<'_>) -> RgbaImage {
    let stride = (image.width() * 4) as usize;
    let mut data = Vec::with_capacity((request.width * request.height * 4) as usize);
    for r in row..row + request.height {
        let at = r as usize * stride + (col * 4) as usize;
        data.extend_from_slice(&image.as_raw()[at..at + (request.width * 4) as usize]);
    }
    RgbaImage::from_raw(request.width, request.height, data)
        .expect("a crop inside the image has its size")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grids_cut_the_same_tiles_only_when_everything_agrees() {
        let a = TileMatrixSet::web_mercator_quad();
        assert!(same_tiles(&a, &TileMatrixSet::web_mercator_quad(), 10));
        assert!(!same_tiles(&a, &TileMatrixSet::world_crs84_quad(), 2));
        assert!(!same_tiles(&a, &a.scaled(2), 2));
    }
}
