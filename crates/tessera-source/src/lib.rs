//! Sources of pixels.
//!
//! A [`Source`] reads an arbitrary pixel window of a bounding box in a target
//! CRS and returns the bands as a [`Raster`] with a validity mask. The
//! window-based contract is what lets a tile, a metatile with a gutter and a
//! WMS GetMap share one render path. [`GdalSource`] implements it for every
//! raster GDAL can read (local files, COGs over HTTP, `/vsis3/` ...), warping
//! with a pool of dataset handles so that no handle is used by two threads at
//! once.

#[cfg(feature = "archive")]
pub mod archive;
pub mod complete;
mod crs;
mod dimensions;
mod egress;
mod error;
mod features;
mod gdal;
mod http_settings;
pub mod local_file;
mod location;
mod mosaic;
pub mod partial;
#[cfg(feature = "stac")]
pub mod pgstac;
mod settings;
mod spec;
#[cfg(feature = "stac")]
pub mod stac_api;
#[cfg(any(feature = "upstream", feature = "archive"))]
pub mod tiled;
#[cfg(feature = "upstream")]
pub mod upstream;
#[cfg(feature = "vector")]
pub mod vector;
mod warp;

pub use crs::Crs;
pub use dimensions::{AskedValue, Found, Listed, ValueKind};
pub use egress::{EgressPolicy, GuardAddress, guard as egress_guard};
pub use error::{Cause, SourceError, excerpt};
pub use features::{FeatureSource, FoundFeature, LegendSymbol, VectorLayerInfo};
pub use gdal::GdalError;
pub use gdal::{BandMetadata, GdalSource, GdalSourceSpec, band_metadata};
pub use http_settings::{HttpSettings, NetworkPolicy};
pub use location::{LocationPolicy, check_location};
pub use mosaic::{MosaicReport, MosaicSource, MosaicSpec, wildcard};
pub use settings::{GdalSettings, configure_gdal, forget_network_cache, register_static_file};
pub use spec::{SourceSpec, open_source};
pub use tessera_grid::TileMetadata;
pub use tessera_image::inflate;
#[cfg(any(feature = "upstream", feature = "archive"))]
pub use tiled::{TileFetch, TiledSource};
#[cfg(feature = "upstream")]
pub use upstream::tiles::{WmtsSourceSpec, XyzSourceSpec};
#[cfg(feature = "upstream")]
pub use upstream::wms::{WmsSource, WmsSourceSpec, WmsVersion};
#[cfg(feature = "vector")]
pub use vector::VectorError;
#[cfg(feature = "vector")]
pub use vector::{
    PostgisAutoSpec, SpatialTable, ValueFilter, VectorLayerSpec, VectorSource, VectorSpec,
};
pub use warp::Resampling;

use tessera_grid::{BBox, TileCoord, TileFormat, TileMatrixSet};
use tessera_image::Raster;

/// What a source is and where its data lies.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceInfo {
    /// Number of data bands (an alpha band is not counted).
    pub band_count: usize,
    /// Whether all data bands are 8-bit.
    pub is_byte: bool,
    /// The source's own CRS.
    pub native_crs: Crs,
    /// Extent in the native CRS.
    pub native_bounds: BBox,
    /// Extent in longitude/latitude (WGS 84).
    pub lonlat_bounds: BBox,
    /// Native pixel size, in native CRS units.
    pub native_resolution: f64,
}

/// A request for pixels: `width` x `height` pixels covering `bbox` in `crs`.
#[derive(Debug, Clone, Copy)]
pub struct WindowRequest<'a> {
    /// Area to read, in `crs` (x/y order).
    pub bbox: BBox,
    /// Target CRS.
    pub crs: &'a Crs,
    /// Output width in pixels.
    pub width: u32,
    /// Output height in pixels.
    pub height: u32,
    /// Raised when the read is no longer wanted: the source stops as soon
    /// as it can (between warp chunks) with [`SourceError::Cancelled`].
    pub cancel: Option<&'a std::sync::atomic::AtomicBool>,
    /// Most source pixels the read may touch, counted at the resolution
    /// the source would read (after its choice of overview); a read
    /// estimated above it fails with [`SourceError::TooManySourcePixels`]
    /// before any pixel is read. `None`: no limit.
    pub max_source_pixels: Option<u64>,
    /// How the window's rows fall into tiles a client asks for one at a
    /// time (a metatile's); `None` for one picture (a WMS map).
    pub tile_rows: Option<TileRows>,
}

/// How a window's rows fall into tiles: a first band of `first` rows (a
/// metatile's gutter and first row of tiles), then bands of `height` rows.
///
/// A source that plans each read as a whole (GDAL's warper chooses its
/// overview and its filter's size for the whole window) reads a window
/// whose scale varies from row to row (Web Mercator at low zooms) one
/// band at a time, so that each tile is drawn as it would be alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileRows {
    /// Rows of the first band (at least 1).
    pub first: u32,
    /// Rows of each band after the first (at least 1).
    pub height: u32,
}

impl TileRows {
    /// Rows above the first tile (a metatile's gutter): the margin of the
    /// window that belongs to its neighbours.
    pub fn margin(&self) -> u32 {
        self.first.saturating_sub(self.height)
    }

    /// The bands of a window of `total` rows: (first row, rows), top first,
    /// the last one cut at `total`; a last band shorter than a quarter of
    /// `height` (a metatile's bottom gutter) joins the one before.
    pub fn bands(self, total: u32) -> Vec<(u32, u32)> {
        let mut bands: Vec<(u32, u32)> = Vec::new();
        let mut start = 0;
        let mut next = self.first.max(1);
        while start < total {
            let end = next.min(total);
            bands.push((start, end - start));
            start = end;
            next = end + self.height.max(1);
        }
        if let [.., before, (_, rows)] = bands.as_slice()
            && *rows < self.height / 4
        {
            let joined = (before.0, before.1 + rows);
            bands.pop();
            bands.pop();
            bands.push(joined);
        }
        bands
    }

    /// The same bands seen from a window that starts at row `y0` of this
    /// one.
    #[must_use]
    pub fn from_row(self, y0: u32) -> TileRows {
        let height = self.height.max(1);
        let first = if y0 < self.first {
            self.first - y0
        } else {
            height - (y0 - self.first) % height
        };
        TileRows { first, height }
    }
}

/// A source of raster pixels.
///
/// Contract: [`Source::read`] is blocking and may be called from many
/// threads at once; it returns exactly `width * height` samples per band and
/// a validity mask where pixels outside the data or equal to nodata are 0.
/// An area entirely outside the source is not an error: every pixel is
/// invalid.
pub trait Source: Send + Sync + std::fmt::Debug {
    /// Static facts about the source.
    fn info(&self) -> &SourceInfo;

    /// Reads and warps one window.
    fn read(&self, request: &WindowRequest<'_>) -> Result<Raster, SourceError>;

    /// The width and height of a pixel of the source's own grid, in its
    /// native CRS's units; the grid starts at the native bounds'
    /// north-west corner. By default square pixels of
    /// [`SourceInfo::native_resolution`].
    fn native_pixel(&self) -> (f64, f64) {
        let r = self.info().native_resolution;
        (r, r)
    }

    /// A hint that `request` will be read soon (cancel flag aside): a
    /// source whose reads wait on the network may start fetching it now,
    /// so that the read finds it answered. Never blocks, never fails; a
    /// fetch nobody reads is dropped. Nothing by default.
    fn prefetch(&self, request: &WindowRequest<'_>) {
        let _ = request;
    }

    /// The window as the upstream's own RGBA image, when this source's
    /// pixels are colours already (an upstream image service) and it can
    /// answer this window without warping: the same pixels as
    /// [`Source::read`]'s bands 1-3 and validity, interleaved. `None` when
    /// the caller must [`Source::read`] (the default).
    fn read_image(
        &self,
        request: &WindowRequest<'_>,
    ) -> Option<Result<tessera_image::RgbaImage, SourceError>> {
        let _ = request;
        None
    }

    /// The encoded tile `coord` of `grid` in `format`, as the upstream has
    /// it, when this source can pass tiles through (an upstream tile
    /// service whose grid cuts the same tiles and whose tiles are in that
    /// format): `Some(Ok(None))` when the upstream has no such tile. `None`
    /// when the tile must be rendered (the default).
    fn passthrough(
        &self,
        grid: &TileMatrixSet,
        coord: TileCoord,
        format: TileFormat,
        cancel: Option<&std::sync::atomic::AtomicBool>,
    ) -> Option<Result<Option<bytes::Bytes>, SourceError>> {
        let _ = (grid, coord, format, cancel);
        None
    }

    /// Whether [`Source::passthrough`] may answer for tiles of `grid` at
    /// zoom `z` in `format`: false spares the caller asking (a hand-off to
    /// a blocking thread). True by default.
    fn may_pass_through(&self, grid: &TileMatrixSet, z: u8, format: TileFormat) -> bool {
        let _ = (grid, z, format);
        true
    }

    /// Whether a tile of `grid` at zoom `z` is the source's own pixels,
    /// read without resampling (a raster in the grid's CRS whose full
    /// resolution or an overview has the matrix's cells as pixels): such a
    /// tile is one block of the source or a few, and is read alone rather
    /// than cut from a metatile, where [`Source::passthrough`] cannot pass
    /// it through. False by default.
    fn own_pixels(&self, grid: &TileMatrixSet, z: u8) -> bool {
        let _ = (grid, z);
        false
    }

    /// Whether [`Source::passthrough`] reads only memory and local files
    /// that honour [`archive::without_waiting`] (a local PMTiles): then it
    /// may be tried on the caller's thread, answering from the page cache,
    /// rather than handed to a blocking one. False by default.
    fn passthrough_is_local(&self) -> bool {
        false
    }

    /// What the source says about itself when it is a tile archive;
    /// `None` by default.
    fn tile_metadata(&self) -> Option<&TileMetadata> {
        None
    }

    /// A tile archive's version now, looked up again (blocking: a `stat`
    /// or one request): a version other than its
    /// [`TileMetadata::version`] says the archive was replaced since it
    /// was opened. `None` for sources that are not archives.
    fn version_now(&self) -> Option<Result<Option<String>, SourceError>> {
        None
    }

    /// What this source draws over `bbox` (in `crs`) now, as a token
    /// that changes when its data there changes (the ids and row versions
    /// of a catalogue's items over the area): cached tiles are keyed by
    /// it, so a new item invalidates exactly the tiles it covers. Blocking
    /// (one query). `None` for sources whose data does not change while
    /// they are open (the default).
    fn state(&self, _bbox: &BBox, _crs: &Crs) -> Option<Result<String, SourceError>> {
        None
    }

    /// Whether [`Source::state`] answers: the source's data changes while
    /// it is open, and its tiles are cached by state. False by default.
    fn changes_while_open(&self) -> bool {
        false
    }

    /// The values this source lists itself for dimension `name` (`field`:
    /// the field holding them in a source of features; at most `most`):
    /// a WMS's or WMTS's capabilities, a vector field's distinct values.
    /// `None` when it lists none.
    fn listed_values(&self, _name: &str, _field: Option<&str>, _most: usize) -> Found<Listed> {
        None
    }

    /// Whether a value of dimension `name` reaches this source (a tile
    /// template must have a place for it); by default not.
    fn takes_value(&self, _name: &str) -> bool {
        false
    }

    /// This source at `values` (one per dimension): an upstream asked with
    /// them, a vector source drawing the features whose field lies in each
    /// range. `None` when values do not reach it (its values come from its
    /// configuration). Shares this source's connections.
    fn at_values(&self, _values: &[AskedValue]) -> Found<std::sync::Arc<dyn Source>> {
        None
    }

    /// The source's vector features (data layers, feature info, legend
    /// symbols), when it has them; `None` by default.
    fn as_features(&self) -> Option<&dyn FeatureSource> {
        None
    }

    /// Each data layer's name (as vector tiles hold it) and the style
    /// rules it is drawn with into pictures, defaults applied, in drawing
    /// order: what a MapLibre style of its vector tiles draws. Empty for a
    /// source not drawn by rules (the default).
    #[cfg(feature = "vector")]
    fn style_rules(&self) -> Vec<(String, Vec<tessera_carto::style::Rule>)> {
        Vec::new()
    }

    /// Lines `tessera check` prints about the source beyond its extent (a
    /// mosaic's pieces, CRSs and bad files); none by default.
    fn report(&self) -> Vec<String> {
        Vec::new()
    }
}

/// `e` and its causes, `: `-separated (for messages that must carry the
/// whole story in one line: API answers, lists of bad files).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
