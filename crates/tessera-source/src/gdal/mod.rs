//! The GDAL raster source: any GDAL-readable dataset, warped per window.

pub(crate) mod aligned;
mod byte_blocks;
mod cog;
mod float_blocks;
mod pieces;
mod plane;
mod tiff;

pub use crate::error::GdalError;

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use gdal::raster::{ColorInterpretation, GdalDataType};
use gdal::{Dataset, DatasetOptions, GdalOpenFlags, Metadata as _};
use serde::Deserialize;
use tessera_grid::BBox;
use tessera_image::Raster;

use crate::warp::{Resampling, WarpError, empty_raster, mem_dataset, read_mem, run_gdal_warp};
use crate::{
    Cause, Crs, GdalSettings, Source, SourceError, SourceInfo, WindowRequest, check_location,
};
use aligned::AlignedGrid;
use pieces::Piece;

/// Pixels beyond which a single read is refused (about 256 MiB of RGBA).
const MAX_WINDOW_PIXELS: usize = 64 * 1024 * 1024;
/// Target CRSs whose footprint of the source is remembered.
const MAX_FOOTPRINTS: usize = 64;

/// Configuration of a GDAL source.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GdalSourceSpec {
    /// A path, an `http(s)://` URL or a GDAL `/vsi` path.
    pub path: String,
    /// Resampling used when warping (default bilinear).
    #[serde(default)]
    pub resampling: Resampling,
    /// Only these bands (numbered from 1), in this order: one time step of
    /// a netCDF or GRIB file, say. Empty: every band.
    #[serde(default)]
    pub bands: Vec<usize>,
}

/// A raster read through GDAL, warped into the requested window.
///
/// Dataset handles are not thread-safe; each read takes one handle from an
/// idle pool (or opens a new one) and puts it back afterwards, so a handle is
/// only ever used by one thread at a time.
#[derive(Debug)]
pub struct GdalSource {
    path: String,
    resampling: Resampling,
    has_alpha: bool,
    info: SourceInfo,
    allowed_drivers: Vec<String>,
    max_idle: usize,
    idle: Mutex<Vec<Dataset>>,
    footprints: Mutex<HashMap<String, Option<BBox>>>,
    /// Full-resolution pixels in the dataset.
    pixels: f64,
    /// How many times coarser each overview is than the full resolution,
    /// finest first.
    overview_factors: Vec<f64>,
    /// Height of a full-resolution pixel in the native CRS's units.
    row_height: f64,
    /// The warp's `AREA_OF_INTEREST` transformer option (lon/lat): PROJ
    /// picks the coordinate operation for it, and GDAL reuses an operation
    /// set up for the same CRSs and area, where it would otherwise set one
    /// up (a database search) for every warp of a window of its own.
    area_of_interest: String,
    /// The source's pixel grid when windows in its own CRS can be read
    /// with `RasterIO` instead of the warper.
    aligned: Option<AlignedGrid>,
    /// The raster's levels when it can be read with `RasterIO`: where a
    /// tile matrix is its own pixels.
    levels: Option<cog::Levels>,
    /// A tiled TIFF's block tables, read when first needed (`None` inside:
    /// not a TIFF, or unreadable, said once in the log).
    blocks: OnceLock<Option<cog::Blocks>>,
    /// Whether GDAL reads the path as a GeoTIFF (blocks may pass through).
    is_tiff: bool,
    /// Whether Float32 blocks may be decoded here ([`float_blocks`]).
    decode_floats: bool,
    /// The TIFF's levels when its blocks are decoded here, found when
    /// first needed.
    floats: OnceLock<Option<float_blocks::FloatLevels>>,
    /// The levels of a byte raster whose reads at a level's own scale
    /// come from blocks shared by every thread ([`byte_blocks`]).
    shared_bytes: Option<byte_blocks::ByteLevels>,
}

impl GdalSource {
    /// Opens the dataset, checks it against the settings' policy and reads
    /// its metadata, within `settings.open_timeout_secs`: the open runs on
    /// a thread of its own, and one that does not finish in time (a server
    /// that never answers, a file system that hangs) is left behind with an
    /// error naming the source.
    pub fn open(spec: &GdalSourceSpec, settings: &GdalSettings) -> Result<Self, SourceError> {
        let timeout = Duration::try_from_secs_f64(settings.open_timeout_secs)
            .unwrap_or(Duration::from_mins(1));
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let (spec_owned, settings_owned) = (spec.clone(), settings.clone());
        std::thread::Builder::new()
            .name("tessera-open".into())
            .spawn(move || {
                let _ = tx.send(Self::open_now(&spec_owned, &settings_owned));
            })
            .map_err(|e| SourceError::Open {
                path: spec.path.clone(),
                source: e.into(),
            })?;
        rx.recv_timeout(timeout).unwrap_or_else(|_| {
            Err(SourceError::Open {
                path: spec.path.clone(),
                source: format!(
                    "opening did not finish within {} s (gdal.open_timeout_secs)",
                    timeout.as_secs_f64()
                )
                .into(),
            })
        })
    }

    fn open_now(spec: &GdalSourceSpec, settings: &GdalSettings) -> Result<Self, SourceError> {
        let lonlat = Crs::parse("OGC:CRS84")?;
        let source = Self::open_here(spec, settings, &|crs, bounds| {
            crs.transform_bbox(bounds, &lonlat)
        })?;
        for line in source.alignment() {
            tracing::info!(source = %source.path, "{line}");
        }
        Ok(source)
    }

    /// Where the well-known grids' tiles are the raster's own pixels or
    /// blocks ([`cog`]), a line each.
    fn alignment(&self) -> Vec<String> {
        let Some(levels) = &self.levels else {
            return Vec::new();
        };
        [
            tessera_grid::TileMatrixSet::web_mercator_quad(),
            tessera_grid::TileMatrixSet::world_crs84_quad(),
        ]
        .iter()
        .flat_map(|grid| levels.report(grid, &self.info.native_crs, self.blocks()))
        .chain(
            self.float_levels()
                .map(|_| "its Float32 blocks are decoded by tessera, not libtiff".to_string()),
        )
        .collect()
    }

    /// The levels whose Float32 blocks are decoded here, and the file's
    /// blocks; `None` when GDAL decodes them.
    fn float_levels(&self) -> Option<(&float_blocks::FloatLevels, &cog::Blocks)> {
        if !self.decode_floats || self.info.is_byte {
            return None;
        }
        let blocks = self.blocks()?;
        let floats = self
            .floats
            .get_or_init(|| {
                float_blocks::FloatLevels::of(blocks, self.aligned.as_ref()?)
                    .inspect_err(|why| {
                        tracing::debug!(source = %self.path, why, "blocks decoded by GDAL");
                    })
                    .ok()
            })
            .as_ref()?;
        Some((floats, blocks))
    }

    /// The TIFF's block tables, read on first use.
    fn blocks(&self) -> Option<&cog::Blocks> {
        self.blocks
            .get_or_init(|| {
                let (levels, grid) = (self.levels.as_ref()?, self.aligned.as_ref()?);
                if !self.is_tiff {
                    return None;
                }
                cog::Blocks::read(&self.path, levels, grid)
                    .inspect_err(|e| {
                        tracing::warn!(source = %self.path, error = %e, "the TIFF's block tables are unreadable; its tiles are rendered, not passed through");
                    })
                    .ok()
            })
            .as_ref()
    }

    /// [`GdalSource::open`] on the calling thread (no open timeout), with
    /// the dataset's longitude/latitude bounds from `lonlat_of` (native
    /// CRS, native bounds): a mosaic that knows them, or transforms many
    /// pieces with one transformation, saves PROJ's setup per piece.
    pub(crate) fn open_here(
        spec: &GdalSourceSpec,
        settings: &GdalSettings,
        lonlat_of: LonLatOf<'_>,
    ) -> Result<Self, SourceError> {
        let policy = settings.policy();
        let mut allowed_drivers = policy.allowed_drivers.clone();
        let mut path = check_location(&spec.path, &policy)?;
        let mut ds = open_dataset(&path, &allowed_drivers)?;
        if !spec.bands.is_empty() {
            // GDAL's `vrt://` string of bands of the file just opened with
            // the allowed drivers: the VRT driver reads that file only.
            path = band_subset(&path, &ds, &spec.bands)?;
            allowed_drivers = vec!["VRT".to_string()];
            ds = open_dataset(&path, &allowed_drivers)?;
        }
        let (has_alpha, info) = read_info(&path, &ds, lonlat_of)?;
        let (w, h) = ds.raster_size();
        let overview_factors = overview_factors(&ds);
        let row_height = ds.geo_transform().map_or(0.0, |gt| gt[4].hypot(gt[5]));
        let aligned = AlignedGrid::of(&ds, info.band_count, has_alpha, info.is_byte);
        let levels = aligned.as_ref().and_then(|grid| cog::Levels::of(&ds, grid));
        let is_tiff = ds.driver().short_name() == "GTiff";
        let shared_bytes = aligned
            .as_ref()
            .filter(|grid| {
                settings.shared_byte_blocks
                    && info.is_byte
                    && !grid.has_alpha()
                    && grid.nodata().is_none()
            })
            .and_then(|_| {
                byte_blocks::ByteLevels::of(&ds, info.band_count)
                    .inspect_err(|why| {
                        tracing::debug!(source = %path, why, "byte blocks left to GDAL's cache");
                    })
                    .ok()
            });
        let info_lonlat = info.lonlat_bounds;
        let source = Self {
            path,
            resampling: spec.resampling,
            has_alpha,
            info,
            allowed_drivers,
            max_idle: settings.max_idle_handles,
            idle: Mutex::new(Vec::new()),
            footprints: Mutex::new(HashMap::new()),
            pixels: w as f64 * h as f64,
            overview_factors,
            row_height,
            area_of_interest: String::new(),
            aligned,
            levels,
            blocks: OnceLock::new(),
            is_tiff,
            decode_floats: settings.decode_float_blocks,
            floats: OnceLock::new(),
            shared_bytes,
        }
        .with_area_of_interest(&info_lonlat);
        source.release(ds);
        Ok(source)
    }

    /// The same source, its warps choosing coordinate operations for the
    /// lon/lat `area` (its own bounds unless a mosaic gives its whole
    /// extent to all its pieces, so they share one operation per CRS).
    pub(crate) fn with_area_of_interest(mut self, area: &BBox) -> Self {
        let clamp = |v: f64, limit: f64| v.clamp(-limit, limit);
        self.area_of_interest = format!(
            "AREA_OF_INTEREST={},{},{},{}",
            clamp(area.min_x, 180.0),
            clamp(area.min_y, 90.0),
            clamp(area.max_x, 180.0),
            clamp(area.max_y, 90.0)
        );
        self
    }

    /// The path or URL GDAL opens.
    pub fn path(&self) -> &str {
        &self.path
    }

    fn acquire(&self) -> Result<Dataset, SourceError> {
        let pooled = self
            .idle
            .lock()
            .map_err(|_| self.read_err("handle pool poisoned"))?
            .pop();
        match pooled {
            Some(ds) => Ok(ds),
            None => open_dataset(&self.path, &self.allowed_drivers),
        }
    }

    fn release(&self, ds: Dataset) {
        if let Ok(mut idle) = self.idle.lock()
            && idle.len() < self.max_idle
        {
            idle.push(ds);
        }
    }

    /// Closes the idle dataset handles (a mosaic piece leaving its LRU of
    /// open pieces); the next read opens one again.
    pub(crate) fn close_idle(&self) {
        let idle = std::mem::take(&mut *self.idle.lock().unwrap_or_else(PoisonError::into_inner));
        drop(idle);
    }

    fn read_err(&self, message: &str) -> SourceError {
        SourceError::Read {
            path: self.path.clone(),
            source: message.into(),
        }
    }

    /// A block passed through, once checked whole and of the tile's size
    /// ([`crate::complete::check_tile`], as upstream tiles are): a damaged
    /// file's block is an error, never a stored tile.
    fn checked(
        &self,
        bytes: bytes::Bytes,
        format: tessera_grid::TileFormat,
        grid: &tessera_grid::TileMatrixSet,
    ) -> Result<Option<bytes::Bytes>, SourceError> {
        crate::complete::check_tile(&bytes, format, (grid.tile_width, grid.tile_height))
            .map(|()| Some(bytes))
            .map_err(|e| self.read_err(&format!("a damaged block: {e}")))
    }

    /// The source's footprint in `crs`, remembered per CRS.
    fn footprint(&self, crs: &Crs) -> Option<BBox> {
        if let Ok(cache) = self.footprints.lock()
            && let Some(f) = cache.get(&crs.wkt)
        {
            return *f;
        }
        let footprint = match self
            .info
            .native_crs
            .transform_bbox(&self.info.native_bounds, crs)
        {
            Ok(b) => Some(b),
            // The native extent does not fit the target CRS as a whole (a
            // polar area in Web Mercator): fall back to lon/lat bounds.
            Err(_) => Crs::parse("OGC:CRS84")
                .and_then(|ll| ll.transform_bbox(&self.info.lonlat_bounds, crs))
                .ok(),
        };
        if let Ok(mut cache) = self.footprints.lock()
            && cache.len() < MAX_FOOTPRINTS
        {
            cache.insert(crs.wkt.clone(), footprint);
        }
        footprint
    }

    /// Refuses a read estimated to touch more than `req.max_source_pixels`
    /// source pixels. The estimate takes the share of the dataset's
    /// footprint that the window covers (exact for an affine mapping,
    /// approximate under reprojection), and divides by the overview GDAL's
    /// `-ovr AUTO` would pick: the coarsest one still at least as fine as
    /// the output.
    fn check_source_pixels(
        &self,
        req: &WindowRequest<'_>,
        footprint: &BBox,
    ) -> Result<(), SourceError> {
        let Some(limit) = req.max_source_pixels else {
            return Ok(());
        };
        let Some(inter) = footprint.intersection(&req.bbox) else {
            return Ok(());
        };
        let footprint_area = footprint.width() * footprint.height();
        let out_pixel_area =
            (req.bbox.width() / f64::from(req.width)) * (req.bbox.height() / f64::from(req.height));
        if !(footprint_area > 0.0 && out_pixel_area > 0.0) {
            return Ok(());
        }
        let inter_area = inter.width() * inter.height();
        let full = self.pixels * inter_area / footprint_area;
        let out = (inter_area / out_pixel_area).max(1.0);
        let ratio = (full / out).sqrt();
        let factor = self
            .overview_factors
            .iter()
            .copied()
            .filter(|f| *f <= ratio)
            .fold(1.0, f64::max);
        let estimated = full / (factor * factor);
        if estimated > limit as f64 {
            return Err(GdalError::TooManySourcePixels {
                path: self.path.clone(),
                estimated: estimated as u64,
                limit,
            }
            .into());
        }
        Ok(())
    }

    /// Reads `req`: cut at the world's edges and into bands of tile rows
    /// where GDAL would plan the whole window worse than its tiles
    /// ([`pieces`]), each piece read with `RasterIO` when it is on the
    /// source's own axes, else through the warper.
    fn warp(&self, src: &Dataset, req: &WindowRequest<'_>) -> Result<Raster, SourceError> {
        if let Some(columns) = pieces::columns_in_world(req) {
            return self.warp_pieces(src, req, &columns, false);
        }
        self.warp_in_world(src, req)
    }

    /// Reads each piece of `req` (bands of tile rows when `bands`) and
    /// puts them together.
    fn warp_pieces(
        &self,
        src: &Dataset,
        req: &WindowRequest<'_>,
        pieces: &[Piece],
        bands: bool,
    ) -> Result<Raster, SourceError> {
        let mut whole = empty_raster(&self.info, req.width, req.height);
        for piece in pieces {
            let part = piece.request(req, bands);
            let raster = if bands {
                self.gdal_warp(src, &part)?
            } else {
                self.warp_in_world(src, &part)?
            };
            PixelWindow {
                x0: piece.x0,
                y0: piece.y0,
                x1: piece.x0 + piece.width,
                y1: piece.y0 + piece.height,
            }
            .paste(&raster, &mut whole);
        }
        Ok(whole)
    }

    fn warp_in_world(&self, src: &Dataset, req: &WindowRequest<'_>) -> Result<Raster, SourceError> {
        let err = |source: Cause| SourceError::Read {
            path: self.path.clone(),
            source,
        };
        // The warper wraps longitudes past the antimeridian; RasterIO
        // would leave them empty.
        let wraps = req.crs.geographic && (req.bbox.min_x < -180.0 || req.bbox.max_x > 180.0);
        if let Some(grid) = &self.aligned
            && aligned::same_axes(req.crs, &self.info.native_crs)
            && !wraps
        {
            if let Some(read) = self
                .float_levels()
                .and_then(|(f, blocks)| f.read(blocks, grid, req, &self.info, self.resampling))
            {
                return read.map_err(|m| err(m.into()));
            }
            if let Some(shared) = &self.shared_bytes
                && let Some(raster) = grid
                    .read_from(&shared.reader(src), req, &self.info, self.resampling)
                    .map_err(|m| err(m.into()))?
            {
                return Ok(raster);
            }
            return grid
                .read(src, req, &self.info, self.resampling)
                .map_err(|m| err(m.into()));
        }
        if let Some(bands) = pieces::bands(req, &self.info.native_crs, self.row_height) {
            return self.warp_pieces(src, req, &bands, true);
        }
        self.gdal_warp(src, req)
    }

    /// Reads `req` through GDAL's warper (any CRS, nodata, masks, alpha).
    fn gdal_warp(&self, src: &Dataset, req: &WindowRequest<'_>) -> Result<Raster, SourceError> {
        let err = |source: Cause| SourceError::Read {
            path: self.path.clone(),
            source,
        };
        let (w, h) = (req.width as usize, req.height as usize);
        let dst = mem_dataset(
            self.info.is_byte,
            (w, h),
            self.info.band_count + 1,
            &req.bbox,
            req.crs,
        )
        .map_err(|e| err(e.into()))?;

        let mut args = vec![
            "-to",
            &self.area_of_interest,
            "-r",
            self.resampling.gdal_name(),
            "-dstalpha",
            "-ovr",
            "AUTO",
            "-et",
            "0.125",
            "-wo",
            "INIT_DEST=0",
        ];
        if self.has_alpha {
            args.push("-srcalpha");
        }
        run_gdal_warp(src, &dst, &args, req.cancel).map_err(|e| match e {
            WarpError::Cancelled => SourceError::Cancelled,
            WarpError::Failed(m) => err(m.into()),
        })?;

        read_mem(&dst, self.info.band_count, self.info.is_byte).map_err(|e| err(e.into()))
    }
}

/// The `vrt://` connection string of `bands` (numbered from 1) of the
/// dataset `ds` opened from `path`; refused when a band is not in it or the
/// path cannot be written in that form.
fn band_subset(path: &str, ds: &Dataset, bands: &[usize]) -> Result<String, SourceError> {
    let count = ds.raster_count();
    if let Some(b) = bands.iter().find(|&&b| b == 0 || b > count) {
        return Err(SourceError::Open {
            path: path.to_string(),
            source: format!("it has no band {b} (bands 1 to {count})").into(),
        });
    }
    if path.contains(['?', '&']) {
        return Err(SourceError::NotAllowed {
            path: path.to_string(),
            reason: "bands cannot be chosen of a path with '?' or '&'".into(),
        });
    }
    let list: Vec<String> = bands.iter().map(ToString::to_string).collect();
    Ok(format!("vrt://{path}?bands={}", list.join(",")))
}

/// Each band's value of one metadata item (band number from 1, value),
/// and the dataset's metadata items (key, value).
pub type BandMetadata = (Vec<(usize, String)>, Vec<(String, String)>);

/// The metadata item `key` of each band of the raster `spec` names (band
/// number from 1, value), the bands without it left out, and the dataset's
/// metadata (`time#units` of a netCDF file, say), checked against the
/// settings' policy like a source: what a dimension read from the bands of
/// one file (`NETCDF_DIM_time`, `GRIB_VALID_TIME`) is made of.
pub fn band_metadata(
    spec: &GdalSourceSpec,
    settings: &GdalSettings,
    key: &str,
) -> Result<BandMetadata, SourceError> {
    let policy = settings.policy();
    let path = check_location(&spec.path, &policy)?;
    let ds = open_dataset(&path, &policy.allowed_drivers)?;
    let bands = (1..=ds.raster_count())
        .filter_map(|b| {
            let band = ds.rasterband(b).ok()?;
            Some((b, band.metadata_item(key, "")?))
        })
        .collect();
    let dataset = ds
        .metadata_domain("")
        .unwrap_or_default()
        .into_iter()
        .filter_map(|item| {
            let (k, v) = item.split_once('=')?;
            Some((k.to_string(), v.to_string()))
        })
        .collect();
    Ok((bands, dataset))
}

/// Opens `path` read-only with the allowed drivers (all drivers when the list is empty).
fn open_dataset(path: &str, allowed_drivers: &[String]) -> Result<Dataset, SourceError> {
    let drivers: Vec<&str> = allowed_drivers.iter().map(String::as_str).collect();
    let options = DatasetOptions {
        open_flags: GdalOpenFlags::GDAL_OF_RASTER
            | GdalOpenFlags::GDAL_OF_READONLY
            | GdalOpenFlags::GDAL_OF_VERBOSE_ERROR,
        allowed_drivers: if drivers.is_empty() {
            None
        } else {
            Some(&drivers)
        },
        ..DatasetOptions::default()
    };
    Dataset::open_ex(path, options).map_err(|e| {
        // GDAL's "not recognized as a supported file format" hides why:
        // say which driver would read it, and what to change.
        match identify_driver(path, GdalOpenFlags::GDAL_OF_RASTER.bits()) {
            Some(name) if !drivers.is_empty() && !drivers.contains(&name.as_str()) => {
                return SourceError::NotAllowed {
                    path: path.to_string(),
                    reason: format!(
                        "it is a {name} dataset and the {name} driver is not allowed (gdal.allowed_drivers); \
                         drivers that read further files, as VRT does, need gdal.allow_unsafe_drivers, \
                         and many rasters are served as one by a `type: mosaic` source"
                    ),
                };
            }
            Some(_) => {}
            None => {
                if let Some(name) = identify_driver(path, GdalOpenFlags::GDAL_OF_VECTOR.bits()) {
                    return SourceError::Open {
                        path: path.to_string(),
                        source: format!(
                            "it is vector data ({name}); a `source:` of type gdal reads rasters"
                        )
                        .into(),
                    };
                }
            }
        }
        SourceError::Open {
            path: path.to_string(),
            source: Box::new(e),
        }
    })
}

/// The short name of the driver that would open `path` as `kind` (the
/// `GDAL_OF_RASTER` or `GDAL_OF_VECTOR` bits), among all drivers.
fn identify_driver(path: &str, kind: u32) -> Option<String> {
    let c_path = CString::new(path).ok()?;
    // SAFETY: a valid C string; no driver list (all drivers); the returned
    // handle is owned by GDAL's driver manager and only read here.
    let driver = unsafe {
        gdal_sys::GDALIdentifyDriverEx(c_path.as_ptr(), kind, std::ptr::null(), std::ptr::null())
    };
    if driver.is_null() {
        return None;
    }
    // SAFETY: a driver handle from GDAL; the short name is a static string.
    let name = unsafe { CStr::from_ptr(gdal_sys::GDALGetDriverShortName(driver)) };
    Some(name.to_string_lossy().into_owned())
}

/// How many times coarser than the full resolution each overview of the
/// first band is, finest first (empty without overviews).
fn overview_factors(ds: &Dataset) -> Vec<f64> {
    let Ok(band) = ds.rasterband(1) else {
        return Vec::new();
    };
    let full = band.x_size() as f64;
    let count = band.overview_count().unwrap_or(0);
    let mut factors: Vec<f64> = (0..usize::try_from(count).unwrap_or(0))
        .filter_map(|i| band.overview(i).ok())
        .map(|o| full / o.x_size().max(1) as f64)
        .collect();
    factors.sort_by(f64::total_cmp);
    factors
}

/// Reads a dataset's facts; also tells whether its last band is an alpha band.
/// Finds a dataset's longitude/latitude bounds from its CRS and bounds.
pub(crate) type LonLatOf<'a> = &'a dyn Fn(&Crs, &BBox) -> Result<BBox, SourceError>;

fn read_info(
    path: &str,
    ds: &Dataset,
    lonlat_of: LonLatOf<'_>,
) -> Result<(bool, SourceInfo), SourceError> {
    let err = |source: Cause| SourceError::Open {
        path: path.to_string(),
        source,
    };
    let count = ds.raster_count();
    if count == 0 {
        return Err(err("dataset has no raster bands".into()));
    }
    let last = ds.rasterband(count).map_err(|e| err(e.into()))?;
    let has_alpha = count > 1 && last.color_interpretation() == ColorInterpretation::AlphaBand;
    let band_count = if has_alpha { count - 1 } else { count };
    let mut is_byte = true;
    for b in 1..=band_count {
        let band = ds.rasterband(b).map_err(|e| err(e.into()))?;
        is_byte &= band.band_type() == GdalDataType::UInt8;
    }
    let wkt = ds.projection();
    if wkt.is_empty() {
        return Err(err("dataset has no coordinate reference system".into()));
    }
    let native_crs = Crs::from_wkt(&wkt)?;
    let gt = ds
        .geo_transform()
        .map_err(|e| err(format!("no geotransform: {e}").into()))?;
    let (w, h) = ds.raster_size();
    let corners = [
        (0.0, 0.0),
        (w as f64, 0.0),
        (0.0, h as f64),
        (w as f64, h as f64),
    ]
    .map(|(px, py)| {
        (
            gt[0] + px * gt[1] + py * gt[2],
            gt[3] + px * gt[4] + py * gt[5],
        )
    });
    let xs = corners.map(|c| c.0);
    let ys = corners.map(|c| c.1);
    let fold = |v: [f64; 4], f: fn(f64, f64) -> f64| v.into_iter().reduce(f).unwrap_or(0.0);
    let native_bounds = BBox::new(
        fold(xs, f64::min),
        fold(ys, f64::min),
        fold(xs, f64::max),
        fold(ys, f64::max),
    )
    .map_err(|e| err(format!("bad extent: {e}").into()))?;
    let lonlat_bounds = lonlat_of(&native_crs, &native_bounds)?;
    let info = SourceInfo {
        band_count,
        is_byte,
        native_crs,
        native_bounds,
        lonlat_bounds,
        native_resolution: gt[1].hypot(gt[2]),
    };
    Ok((has_alpha, info))
}

/// A rectangle of output pixels: columns `x0..x1`, rows `y0..y1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PixelWindow {
    x0: u32,
    y0: u32,
    x1: u32,
    y1: u32,
}

impl PixelWindow {
    fn whole(req: &WindowRequest<'_>) -> PixelWindow {
        PixelWindow {
            x0: 0,
            y0: 0,
            x1: req.width,
            y1: req.height,
        }
    }

    /// Pixels in the window.
    fn area(&self) -> u64 {
        u64::from(self.x1 - self.x0) * u64::from(self.y1 - self.y0)
    }

    /// The same read for these pixels only (the pixel grid is kept).
    fn request<'a>(&self, req: &WindowRequest<'a>) -> WindowRequest<'a> {
        let b = req.bbox;
        let (rx, ry) = (
            b.width() / f64::from(req.width),
            b.height() / f64::from(req.height),
        );
        WindowRequest {
            bbox: BBox {
                min_x: b.min_x + f64::from(self.x0) * rx,
                max_x: b.min_x + f64::from(self.x1) * rx,
                max_y: b.max_y - f64::from(self.y0) * ry,
                min_y: b.max_y - f64::from(self.y1) * ry,
            },
            width: self.x1 - self.x0,
            height: self.y1 - self.y0,
            tile_rows: req.tile_rows.map(|r| r.from_row(self.y0)),
            ..*req
        }
    }

    /// Copies `part` (read for this window) into `whole`.
    fn paste(&self, part: &Raster, whole: &mut Raster) {
        let (pw, ww) = (part.width as usize, whole.width as usize);
        for row in 0..part.height as usize {
            let from = row * pw;
            let to = (self.y0 as usize + row) * ww + self.x0 as usize;
            whole.valid[to..to + pw].copy_from_slice(&part.valid[from..from + pw]);
            for (dst, src) in whole.bands.iter_mut().zip(&part.bands) {
                dst.copy_span(to, src, from, pw);
            }
        }
    }
}

/// The output pixels of `req` that `footprint` touches, with one pixel of
/// margin for resampling; `None` when it touches none (less than a pixel).
fn covered_pixels(req: &WindowRequest<'_>, footprint: &BBox) -> Option<PixelWindow> {
    let b = req.bbox;
    let inter = footprint.intersection(&b)?;
    let (w, h) = (f64::from(req.width), f64::from(req.height));
    let (rx, ry) = (b.width() / w, b.height() / h);
    let x0 = ((inter.min_x - b.min_x) / rx).floor() - 1.0;
    let x1 = ((inter.max_x - b.min_x) / rx).ceil() + 1.0;
    let y0 = ((b.max_y - inter.max_y) / ry).floor() - 1.0;
    let y1 = ((b.max_y - inter.min_y) / ry).ceil() + 1.0;
    // Less than a pixel of data in a window much larger than it: nothing to
    // show at this size.
    if (inter.width() / rx) * (inter.height() / ry) < 0.25 && (x1 - x0 - 2.0) <= 1.0 {
        return None;
    }
    let clamp = |v: f64, max: f64| v.clamp(0.0, max) as u32;
    let window = PixelWindow {
        x0: clamp(x0, w),
        y0: clamp(y0, h),
        x1: clamp(x1, w),
        y1: clamp(y1, h),
    };
    (window.x1 > window.x0 && window.y1 > window.y0).then_some(window)
}

impl Source for GdalSource {
    fn info(&self) -> &SourceInfo {
        &self.info
    }

    /// Never reads: block tables not read yet (a source opened without
    /// its alignment logged) leave the answer to [`Source::passthrough`],
    /// on a blocking thread.
    fn may_pass_through(
        &self,
        grid: &tessera_grid::TileMatrixSet,
        z: u8,
        format: tessera_grid::TileFormat,
    ) -> bool {
        use tessera_grid::TileFormat;
        matches!(
            format,
            TileFormat::Jpeg | TileFormat::Mixed | TileFormat::Webp
        ) && self.levels.as_ref().is_some_and(|l| {
            l.own_pixels(grid, z, &self.info.native_crs)
                .is_some_and(|on| match self.blocks.get() {
                    Some(blocks) => blocks.as_ref().is_some_and(|b| b.passes(grid, on, format)),
                    None => self.is_tiff,
                })
        })
    }

    fn own_pixels(&self, grid: &tessera_grid::TileMatrixSet, z: u8) -> bool {
        self.levels
            .as_ref()
            .is_some_and(|l| l.own_pixels(grid, z, &self.info.native_crs).is_some())
    }

    /// A JPEG or WebP block of a tiled TIFF whose blocks are the grid's
    /// tiles, as it is stored ([`cog`]).
    fn passthrough(
        &self,
        grid: &tessera_grid::TileMatrixSet,
        coord: tessera_grid::TileCoord,
        format: tessera_grid::TileFormat,
        _cancel: Option<&std::sync::atomic::AtomicBool>,
    ) -> Option<Result<Option<bytes::Bytes>, SourceError>> {
        use tessera_grid::TileFormat;
        if !matches!(
            format,
            TileFormat::Jpeg | TileFormat::Mixed | TileFormat::Webp
        ) {
            return None;
        }
        let on = self
            .levels
            .as_ref()?
            .own_pixels(grid, coord.z(), &self.info.native_crs)?;
        let read = self.blocks()?.tile(grid, coord, format, on)?;
        Some(
            read.map_err(|m| self.read_err(&m))
                .and_then(|bytes| self.checked(bytes, format, grid)),
        )
    }

    fn report(&self) -> Vec<String> {
        self.alignment()
    }

    fn native_pixel(&self) -> (f64, f64) {
        (self.info.native_resolution, self.row_height)
    }

    fn read(&self, req: &WindowRequest<'_>) -> Result<Raster, SourceError> {
        match self.read_part(req, Whole::WhenMostlyCovered)? {
            None => Ok(empty_raster(&self.info, req.width, req.height)),
            Some((part, 0, 0)) if (part.width, part.height) == (req.width, req.height) => Ok(part),
            Some((part, x0, y0)) => {
                let mut whole = empty_raster(&self.info, req.width, req.height);
                PixelWindow {
                    x0,
                    y0,
                    x1: x0 + part.width,
                    y1: y0 + part.height,
                }
                .paste(&part, &mut whole);
                Ok(whole)
            }
        }
    }
}

/// When [`GdalSource::read_part`] warps the whole window rather than the
/// pixels over the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Whole {
    /// When the data covers a sixteenth of the window or more: GDAL's warp
    /// of a part can differ from its warp of the whole window at the data's
    /// edge (it plans source windows and overviews per warp), so a single
    /// source's picture does not depend on how a window was cut.
    WhenMostlyCovered,
    /// Never: a mosaic piece, whose edges are seams blended with the next
    /// piece anyway, warps only the pixels it covers.
    Never,
}

impl GdalSource {
    /// The pixels of `req` over the data, and where they go in the window
    /// (column, row of the part's top-left): the whole window when the data
    /// covers much of it (`Whole::WhenMostlyCovered`), else only the part it
    /// covers; `None` when the window misses the data. A mosaic composites
    /// the parts of its pieces (`Whole::Never`) without warping whole
    /// windows of nothing.
    pub(crate) fn read_part(
        &self,
        req: &WindowRequest<'_>,
        whole: Whole,
    ) -> Result<Option<(Raster, u32, u32)>, SourceError> {
        let pixels = req.width as usize * req.height as usize;
        if pixels == 0 || pixels > MAX_WINDOW_PIXELS {
            return Err(SourceError::TooLarge {
                width: req.width,
                height: req.height,
            });
        }
        // A window that misses the data, or holds less than a pixel of it
        // (a bbox of 1e15 m), is empty at once; one far larger than the
        // data warps only the pixels over it, so GDAL is never handed
        // coordinates it would spend minutes on.
        let inner = match self.footprint(req.crs) {
            Some(f) => match covered_pixels(req, &f) {
                Some(inner) => {
                    self.check_source_pixels(req, &f)?;
                    inner
                }
                None => return Ok(None),
            },
            None => PixelWindow::whole(req),
        };
        let ds = self.acquire()?;
        let mostly = inner.area() * 16 >= u64::from(req.width) * u64::from(req.height);
        let result = if whole == Whole::WhenMostlyCovered && mostly {
            self.warp(&ds, req).map(|whole| (whole, 0, 0))
        } else {
            self.warp(&ds, &inner.request(req))
                .map(|part| (part, inner.x0, inner.y0))
        };
        // A handle whose read failed may be in a bad state: drop it.
        if result.is_ok() {
            self.release(ds);
        }
        result.map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gdal::DriverManager;
    use gdal::raster::Buffer;
    use tessera_image::BandData;

    fn data(name: &str) -> String {
        // Read when the test runs, not baked in at build time: a test
        // binary built in another checkout sharing the target directory
        // must still find this checkout's files.
        let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo test sets CARGO_MANIFEST_DIR");
        format!("{dir}/../../data/{name}")
    }

    fn open(name: &str) -> GdalSource {
        open_path(&data(name), Resampling::Bilinear)
    }

    fn open_path(path: &str, resampling: Resampling) -> GdalSource {
        GdalSource::open(
            &GdalSourceSpec {
                path: path.to_string(),
                resampling,
                bands: Vec::new(),
            },
            &GdalSettings::default(),
        )
        .unwrap()
    }

    /// Mean absolute difference of two rasters' byte bands (0-255), and
    /// whether their valid masks agree.
    fn compare(a: &Raster, b: &Raster) -> (f64, bool) {
        let mut sum = 0.0;
        let mut n = 0.0_f64;
        for (x, y) in a.bands.iter().zip(&b.bands) {
            let (BandData::U8(x), BandData::U8(y)) = (x, y) else {
                panic!("byte bands expected");
            };
            for ((p, q), (va, vb)) in x.iter().zip(y).zip(a.valid.iter().zip(&b.valid)) {
                if *va == 255 && *vb == 255 {
                    sum += f64::from(p.abs_diff(*q));
                    n += 1.0;
                }
            }
        }
        let masks = a
            .valid
            .iter()
            .zip(&b.valid)
            .filter(|(x, y)| (**x == 255) != (**y == 255))
            .count();
        // Edge pixels may differ by the half pixel the two round by.
        (sum / n.max(1.0), masks <= (a.width + a.height) as usize * 2)
    }

    /// `bbox` of `crs` read `size` as the source reads it (RasterIO where
    /// it can) and through GDAL's warper.
    fn read_both_ways(
        s: &GdalSource,
        ds: &Dataset,
        crs: &Crs,
        bbox: BBox,
        (width, height): (u32, u32),
    ) -> (Raster, Raster) {
        let req = WindowRequest {
            bbox,
            crs,
            width,
            height,
            cancel: None,
            max_source_pixels: None,
            tile_rows: None,
        };
        (s.warp(ds, &req).unwrap(), s.gdal_warp(ds, &req).unwrap())
    }

    #[test]
    fn windows_in_the_sources_own_crs_read_with_rasterio_match_the_warper() {
        let s = open("shadedrelief-5400.tif");
        assert!(
            s.aligned.is_some(),
            "a north-up COG without nodata is read with RasterIO"
        );
        let ds = s.acquire().unwrap();
        let crs = s.info().native_crs.clone();
        let windows = [
            // Downsampled whole world (an overview), a native-resolution
            // window, an upsampled one, and windows hanging over the edges.
            (BBox::new(-180.0, -90.0, 180.0, 90.0).unwrap(), 512, 256),
            (BBox::new(0.0, 0.0, 10.0, 10.0).unwrap(), 150, 150),
            (BBox::new(5.0, 45.0, 6.0, 46.0).unwrap(), 256, 256),
            (BBox::new(100.0, 80.0, 120.0, 100.0).unwrap(), 256, 256),
            (BBox::new(-180.0, -100.0, -150.0, -50.0).unwrap(), 300, 300),
            // Past the antimeridian the warper wraps longitudes: it reads.
            (BBox::new(170.0, 80.0, 190.0, 100.0).unwrap(), 256, 256),
        ];
        for (bbox, w, h) in windows {
            let (fast, warped) = read_both_ways(&s, &ds, &crs, bbox, (w, h));
            let (diff, masks) = compare(&fast, &warped);
            assert!(diff < 4.0, "{bbox:?}: mean difference {diff}");
            assert!(
                masks,
                "{bbox:?}: the valid masks differ beyond the edge pixels"
            );
            let valid = fast.valid.iter().filter(|v| **v == 255).count();
            assert!(valid > 0, "{bbox:?}: nothing read");
        }
        // Another CRS goes through the warper.
        let mercator = Crs::parse("EPSG:3857").unwrap();
        let req = WindowRequest {
            bbox: BBox::new(0.0, 0.0, 1_000_000.0, 1_000_000.0).unwrap(),
            crs: &mercator,
            width: 64,
            height: 64,
            cancel: None,
            max_source_pixels: None,
            tile_rows: None,
        };
        assert_eq!(s.warp(&ds, &req).unwrap(), s.gdal_warp(&ds, &req).unwrap());
        s.release(ds);
    }

    #[test]
    fn a_dem_with_nodata_read_with_rasterio_matches_the_warper() {
        let s = open("elev.tif");
        assert!(
            s.aligned.is_some(),
            "one band of numbers with a nodata value is read with RasterIO"
        );
        let ds = s.acquire().unwrap();
        let crs = s.info().native_crs.clone();
        let b = s.info().native_bounds;
        let (cx, cy) = (
            f64::midpoint(b.min_x, b.max_x),
            f64::midpoint(b.min_y, b.max_y),
        );
        let (dx, dy) = (b.width(), b.height());
        let windows = [
            // The whole DEM downsampled and upsampled, a corner window
            // past its edges, and a window on the nodata boundary.
            (b, 40, 40),
            (b, 300, 300),
            (
                BBox::new(b.min_x - dx / 4.0, cy, cx, b.max_y + dy / 4.0).unwrap(),
                256,
                256,
            ),
            (
                BBox::new(cx - dx / 8.0, cy - dy / 8.0, cx + dx / 8.0, cy + dy / 8.0).unwrap(),
                256,
                256,
            ),
        ];
        let mut checked = 0;
        for (bbox, w, h) in windows {
            let (fast, warped) = read_both_ways(&s, &ds, &crs, bbox, (w, h));
            let (BandData::F32(a), BandData::F32(b)) = (&fast.bands[0], &warped.bands[0]) else {
                panic!("a DEM reads as numbers");
            };
            let mut diffs: Vec<f32> = a
                .iter()
                .zip(b)
                .zip(fast.valid.iter().zip(&warped.valid))
                .filter(|(_, (x, y))| **x == 255 && **y == 255)
                .map(|((p, q), _)| (p - q).abs())
                .collect();
            diffs.sort_by(f32::total_cmp);
            let median = diffs[diffs.len() / 2];
            assert!(median < 1.0, "{bbox:?}: median difference {median} m");
            // The masks agree (a pixel is valid when the source pixel under
            // its centre is), but for edge pixels, which may differ by the
            // half pixel the two round by.
            let differ = fast
                .valid
                .iter()
                .zip(&warped.valid)
                .filter(|(x, y)| (**x == 255) != (**y == 255))
                .count();
            let invalid = fast.valid.iter().filter(|v| **v == 0).count();
            assert!(invalid > 0, "{bbox:?}: the nodata is read as invalid");
            assert!(
                differ <= (w + h) as usize * 2,
                "{bbox:?}: {differ} of {} pixels valid in one read only",
                fast.valid.len()
            );
            assert!(
                a.iter()
                    .zip(&fast.valid)
                    .all(|(v, ok)| *ok == 255 || *v == 0.0),
                "invalid pixels hold 0, as the warper leaves them"
            );
            checked += diffs.len();
        }
        assert!(checked > 10_000, "{checked} valid pixels compared");
        s.release(ds);
    }

    /// A 1000 x 700 Float32 DEM in Web Mercator (slopes, a hole of nodata
    /// -9999 as large as a block, negative values), written as a tiled
    /// GeoTIFF with `options` by `driver` (`GTiff` or `COG`).
    fn write_float_dem(path: &str, driver: &str, options: &[&str]) {
        let (w, h) = (1000usize, 700usize);
        let mut values = vec![0f32; w * h];
        for (i, v) in values.iter_mut().enumerate() {
            let (x, y) = ((i % w) as f32, (i / w) as f32);
            *v = if (300.0..600.0).contains(&x) && (256.0..540.0).contains(&y) {
                -9999.0
            } else {
                (x * 0.013).sin() * 800.0 + y * 1.7 - 200.0 + (x * y * 1e-4).cos() * 3.25
            };
        }
        let mem = DriverManager::get_driver_by_name("MEM").unwrap();
        let mut ds = mem.create_with_band_type::<f32, _>("", w, h, 1).unwrap();
        ds.set_geo_transform(&[100_000.0, 30.0, 0.0, 6_000_000.0, 0.0, -30.0])
            .unwrap();
        ds.set_projection(&Crs::parse("EPSG:3857").unwrap().wkt)
            .unwrap();
        let mut band = ds.rasterband(1).unwrap();
        band.set_no_data_value(Some(-9999.0)).unwrap();
        band.write((0, 0), (w, h), &mut Buffer::new((w, h), values))
            .unwrap();
        let mut list = gdal::cpl::CslStringList::new();
        for option in options {
            list.add_string(option).unwrap();
        }
        let out = DriverManager::get_driver_by_name(driver).unwrap();
        ds.create_copy(&out, path, &list).unwrap();
    }

    #[test]
    fn float32_blocks_decoded_here_read_as_gdal_reads_them() {
        let dir = tempfile::tempdir().unwrap();
        let variants: [(&str, &[&str]); 6] = [
            (
                "COG",
                &["COMPRESS=DEFLATE", "PREDICTOR=YES", "BLOCKSIZE=256"],
            ),
            ("COG", &["COMPRESS=LZW", "PREDICTOR=YES", "BLOCKSIZE=128"]),
            (
                "GTiff",
                &[
                    "TILED=YES",
                    "COMPRESS=DEFLATE",
                    "PREDICTOR=2",
                    "SPARSE_OK=TRUE",
                ],
            ),
            (
                "GTiff",
                &[
                    "TILED=YES",
                    "COMPRESS=DEFLATE",
                    "PREDICTOR=2",
                    "ENDIANNESS=BIG",
                ],
            ),
            ("GTiff", &["TILED=YES", "ENDIANNESS=BIG"]),
            ("GTiff", &["TILED=YES", "BLOCKXSIZE=512", "BLOCKYSIZE=256"]),
        ];
        let mercator = Crs::parse("EPSG:3857").unwrap();
        // Windows as tiles ask them: shrunk by 1, 1.5, 2, 3 and 9 (the
        // overviews and past them), enlarged, off the grid's pixels, over
        // the hole and hanging past the edges.
        let (x0, y1) = (100_000.0, 6_000_000.0);
        let windows = [
            (0.0, 0.0, 7680.0, 256),
            (1234.5, 987.6, 11520.0, 256),
            (3000.0, 7000.0, 15360.0, 256),
            (-2000.0, 100.0, 23040.0, 256),
            (0.0, 0.0, 30000.0, 512),
            (8000.0, 9000.0, 69120.0, 256),
            (15000.0, 4000.0, 1000.0, 256),
            (28000.0, 19000.0, 5000.0, 256),
        ];
        for (i, (driver, options)) in variants.iter().enumerate() {
            let path = format!("{}/dem{i}.tif", dir.path().display());
            write_float_dem(&path, driver, options);
            for resampling in [Resampling::Nearest, Resampling::Bilinear, Resampling::Cubic] {
                let here = open_path(&path, resampling);
                let gdal = GdalSource::open(
                    &GdalSourceSpec {
                        path: path.clone(),
                        resampling,
                        bands: Vec::new(),
                    },
                    &GdalSettings {
                        decode_float_blocks: false,
                        ..GdalSettings::default()
                    },
                )
                .unwrap();
                assert!(here.float_levels().is_some(), "{options:?}: decoded here");
                assert!(gdal.float_levels().is_none());
                let (a_ds, b_ds) = (here.acquire().unwrap(), gdal.acquire().unwrap());
                for &(dx, dy, span, size) in &windows {
                    let bbox = BBox::new(x0 + dx, y1 - dy - span, x0 + dx + span, y1 - dy).unwrap();
                    let req = WindowRequest {
                        bbox,
                        crs: &mercator,
                        width: size,
                        height: size,
                        cancel: None,
                        max_source_pixels: None,
                        tile_rows: None,
                    };
                    let (a, b) = (
                        here.warp(&a_ds, &req).unwrap(),
                        gdal.warp(&b_ds, &req).unwrap(),
                    );
                    let what = format!("{options:?} {resampling:?} {bbox:?}");
                    assert_eq!(a.valid, b.valid, "{what}: the same pixels valid");
                    let (BandData::F32(p), BandData::F32(q)) = (&a.bands[0], &b.bands[0]) else {
                        panic!("a DEM reads as numbers");
                    };
                    let worst = p
                        .iter()
                        .zip(q)
                        .map(|(x, y)| (x - y).abs())
                        .fold(0f32, f32::max);
                    assert!(worst <= 1e-3, "{what}: values differ by {worst}");
                    assert!(a.valid.contains(&255), "{what}: something read");
                }
            }
        }
    }

    #[test]
    fn big_endian_float_predictor_blocks_are_left_to_gdal() {
        let dir = tempfile::tempdir().unwrap();
        let path = format!("{}/dem.tif", dir.path().display());
        write_float_dem(
            &path,
            "GTiff",
            &[
                "TILED=YES",
                "COMPRESS=DEFLATE",
                "PREDICTOR=3",
                "ENDIANNESS=BIG",
            ],
        );
        assert!(
            open_path(&path, Resampling::Bilinear)
                .float_levels()
                .is_none()
        );
    }

    #[test]
    fn a_corrupt_float32_block_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = format!("{}/dem.tif", dir.path().display());
        write_float_dem(
            &path,
            "GTiff",
            &["TILED=YES", "COMPRESS=DEFLATE", "PREDICTOR=3"],
        );
        let offset: u64 = {
            let ds = Dataset::open(&path).unwrap();
            ds.rasterband(1)
                .unwrap()
                .metadata_item("BLOCK_OFFSET_0_0", "TIFF")
                .unwrap()
                .parse()
                .unwrap()
        };
        let mut bytes = std::fs::read(&path).unwrap();
        let at = usize::try_from(offset).unwrap();
        bytes[at + 2..at + 40].fill(0xff);
        std::fs::write(&path, bytes).unwrap();
        let s = open_path(&path, Resampling::Bilinear);
        assert!(s.float_levels().is_some());
        let crs = Crs::parse("EPSG:3857").unwrap();
        let req = WindowRequest {
            bbox: BBox::new(100_000.0, 5_990_000.0, 110_000.0, 6_000_000.0).unwrap(),
            crs: &crs,
            width: 256,
            height: 256,
            cancel: None,
            max_source_pixels: None,
            tile_rows: None,
        };
        let e = format!("{:?}", s.read(&req).unwrap_err());
        assert!(e.contains("block 0 of level 0"), "{e}");
    }

    #[test]
    fn a_vrt_or_vector_file_is_refused_with_the_reason_not_gdals_unsupported_format() {
        let dir = tempfile::tempdir().unwrap();
        let vrt = dir.path().join("x.vrt");
        let translated = gdal::Dataset::open(data("elev.tif")).unwrap();
        let driver = DriverManager::get_driver_by_name("VRT").unwrap();
        translated
            .create_copy(&driver, &vrt, &gdal::cpl::CslStringList::new())
            .unwrap();
        let spec = |p: &std::path::Path| GdalSourceSpec {
            path: p.display().to_string(),
            resampling: Resampling::Bilinear,
            bands: Vec::new(),
        };
        let e = GdalSource::open(&spec(&vrt), &GdalSettings::default()).unwrap_err();
        assert!(
            matches!(&e, SourceError::NotAllowed { reason, .. }
                if reason.contains("VRT dataset") && reason.contains("allow_unsafe_drivers") && reason.contains("mosaic")),
            "{e}"
        );
        let geojson = dir.path().join("points.geojson");
        std::fs::write(
            &geojson,
            r#"{"type":"FeatureCollection","features":[{"type":"Feature","properties":{},"geometry":{"type":"Point","coordinates":[1,2]}}]}"#,
        )
        .unwrap();
        let e = GdalSource::open(&spec(&geojson), &GdalSettings::default()).unwrap_err();
        let cause = std::error::Error::source(&e)
            .map(ToString::to_string)
            .unwrap_or_default();
        assert!(cause.contains("vector data (GeoJSON)"), "{e}: {cause}");
    }

    #[test]
    fn only_the_pixels_over_the_footprint_are_read() {
        let crs = Crs::parse("EPSG:3857").unwrap();
        let req = |bbox: BBox| WindowRequest {
            bbox,
            crs: &crs,
            width: 100,
            height: 100,
            cancel: None,
            max_source_pixels: None,
            tile_rows: None,
        };
        let footprint = BBox::new(0.0, 0.0, 50.0, 50.0).unwrap();
        let inside = req(BBox::new(10.0, 10.0, 20.0, 20.0).unwrap());
        assert_eq!(
            covered_pixels(&inside, &footprint),
            Some(PixelWindow::whole(&inside))
        );
        // The data fills the lower left quarter: that quarter plus a pixel.
        let half = req(BBox::new(0.0, 0.0, 100.0, 100.0).unwrap());
        let w = covered_pixels(&half, &footprint).unwrap();
        assert_eq!((w.x0, w.y0, w.x1, w.y1), (0, 49, 51, 100));
        let sub = w.request(&half);
        assert_eq!((sub.width, sub.height), (51, 51));
        assert!((sub.bbox.max_x - 51.0).abs() < 1e-9 && (sub.bbox.max_y - 51.0).abs() < 1e-9);
        // A window a trillion times larger than the data: nothing to read.
        let huge = req(BBox::new(-1e15, -1e15, 1e15, 1e15).unwrap());
        assert_eq!(covered_pixels(&huge, &footprint), None);
        let away = req(BBox::new(1000.0, 1000.0, 2000.0, 2000.0).unwrap());
        assert_eq!(covered_pixels(&away, &footprint), None);
    }

    #[test]
    fn reads_metadata_of_the_demo_dem() {
        let s = open("elev.tif");
        let info = s.info();
        assert_eq!(info.band_count, 1);
        assert!(!info.is_byte);
        assert_eq!(info.native_crs.id, "EPSG:4326");
        assert!((info.lonlat_bounds.min_x - 5.7416).abs() < 1e-3);
    }

    #[test]
    fn warps_a_window_into_web_mercator_with_nodata_as_invalid() {
        let s = open("elev.tif");
        let merc = Crs::parse("EPSG:3857").unwrap();
        // Covers Luxembourg and some area around it.
        let bbox = BBox::new(600_000.0, 6_350_000.0, 720_000.0, 6_500_000.0).unwrap();
        let r = s
            .read(&WindowRequest {
                cancel: None,
                max_source_pixels: None,
                tile_rows: None,
                bbox,
                crs: &merc,
                width: 64,
                height: 80,
            })
            .unwrap();
        assert_eq!(r.valid.len(), 64 * 80);
        let valid = r.valid.iter().filter(|v| **v == 255).count();
        let invalid = r.valid.iter().filter(|v| **v == 0).count();
        assert!(
            valid > 500 && invalid > 500,
            "valid {valid} invalid {invalid}"
        );
        let BandData::F32(values) = &r.bands[0] else {
            panic!("expected floats")
        };
        let max = values
            .iter()
            .zip(&r.valid)
            .filter(|(_, v)| **v == 255)
            .map(|(x, _)| *x)
            .fold(0.0, f32::max);
        assert!((400.0..600.0).contains(&max), "max elevation {max}");
    }

    #[test]
    fn reads_beyond_the_source_pixel_limit_are_refused_after_overview_choice() {
        // 349x352 pixels with overviews 2x, 4x, 8x and 16x coarser.
        let s = open("L7_ETMs.tif");
        let crs = s.info().native_crs.clone();
        let bbox = s.info().native_bounds;
        let read = |size: u32, limit: u64| {
            s.read(&WindowRequest {
                bbox,
                crs: &crs,
                width: size,
                height: size,
                cancel: None,
                max_source_pixels: Some(limit),
                tile_rows: None,
            })
        };
        // The whole dataset at full resolution reads all 122,848 pixels.
        match read(350, 100_000) {
            Err(SourceError::Gdal(GdalError::TooManySourcePixels {
                estimated, limit, ..
            })) => {
                assert!((120_000..126_000).contains(&estimated), "{estimated}");
                assert_eq!(limit, 100_000);
            }
            other => panic!("expected TooManySourcePixels, got {other:?}"),
        }
        assert!(read(350, 130_000).is_ok());
        // At 22x22 the 16x overview is read: about 490 pixels.
        assert!(read(22, 1_000).is_ok());
        // Without overviews every full-resolution pixel counts, whatever the
        // output size: 95x90 = 8,550.
        let flat = open("elev.tif");
        let (crs, bbox) = (flat.info().native_crs.clone(), flat.info().native_bounds);
        let flat_read = |limit: u64| {
            flat.read(&WindowRequest {
                bbox,
                crs: &crs,
                width: 10,
                height: 10,
                cancel: None,
                max_source_pixels: Some(limit),
                tile_rows: None,
            })
        };
        assert!(matches!(
            flat_read(8_000),
            Err(SourceError::Gdal(GdalError::TooManySourcePixels { .. }))
        ));
        assert!(flat_read(9_000).is_ok());
    }

    #[test]
    fn a_window_outside_the_source_is_all_invalid() {
        let s = open("elev.tif");
        let merc = Crs::parse("EPSG:3857").unwrap();
        let bbox = BBox::new(-1e6, -1e6, 0.0, 0.0).unwrap();
        let r = s
            .read(&WindowRequest {
                cancel: None,
                max_source_pixels: None,
                tile_rows: None,
                bbox,
                crs: &merc,
                width: 16,
                height: 16,
            })
            .unwrap();
        assert!(r.valid.iter().all(|v| *v == 0));
    }

    #[test]
    fn an_alpha_band_is_the_validity_mask_not_a_data_band() {
        use gdal::raster::Buffer;
        // A 4x4 RGBA image whose left half is transparent.
        let path = format!("/vsimem/rgba-{}.tif", std::process::id());
        {
            let driver = DriverManager::get_driver_by_name("MEM").unwrap();
            let mut mem = driver.create_with_band_type::<u8, _>("", 4, 4, 4).unwrap();
            mem.set_geo_transform(&[0.0, 1.0, 0.0, 4.0, 0.0, -1.0])
                .unwrap();
            mem.set_projection(&Crs::parse("EPSG:4326").unwrap().wkt)
                .unwrap();
            for b in 1..=3 {
                let mut band = mem.rasterband(b).unwrap();
                band.write(
                    (0, 0),
                    (4, 4),
                    &mut Buffer::new((4, 4), vec![100u8 * (b as u8 - 1) + 7; 16]),
                )
                .unwrap();
            }
            let mut alpha = mem.rasterband(4).unwrap();
            alpha
                .set_color_interpretation(ColorInterpretation::AlphaBand)
                .unwrap();
            let mask: Vec<u8> = (0..16).map(|i| if i % 4 < 2 { 0 } else { 255 }).collect();
            alpha
                .write((0, 0), (4, 4), &mut Buffer::new((4, 4), mask))
                .unwrap();
            let gtiff = DriverManager::get_driver_by_name("GTiff").unwrap();
            mem.create_copy(&gtiff, &path, &gdal::cpl::CslStringList::new())
                .unwrap();
        }
        let s = open_path(&path, Resampling::Nearest);
        assert_eq!(s.info().band_count, 3);
        let crs = Crs::parse("EPSG:4326").unwrap();
        let r = s
            .read(&WindowRequest {
                cancel: None,
                max_source_pixels: None,
                tile_rows: None,
                bbox: BBox::new(0.0, 0.0, 4.0, 4.0).unwrap(),
                crs: &crs,
                width: 4,
                height: 4,
            })
            .unwrap();
        assert_eq!(r.bands.len(), 3);
        assert_eq!(&r.valid[..4], &[0, 0, 255, 255]);
        let BandData::U8(blue) = &r.bands[2] else {
            panic!("expected bytes")
        };
        assert!(blue.iter().zip(&r.valid).all(|(b, v)| *v == 0 || *b == 207));
        gdal::vsi::unlink_mem_file(&path).unwrap();
    }

    /// A request of `size` x `size` pixels over `bbox` (min x, min y, max
    /// x, max y) in `crs`.
    fn square(crs: &Crs, bbox: (f64, f64, f64, f64), size: u32) -> WindowRequest<'_> {
        WindowRequest {
            bbox: BBox::new(bbox.0, bbox.1, bbox.2, bbox.3).unwrap(),
            crs,
            width: size,
            height: size,
            cancel: None,
            max_source_pixels: None,
            tile_rows: None,
        }
    }

    /// Writes a 64x64 GeoTIFF at `path` in Web Mercator (100 m pixels, top
    /// left at (0, 6400)) with `bands` as its bands, the last one an alpha
    /// band when `alpha` is set.
    fn write_mercator_64<T: gdal::raster::GdalType + Copy>(
        path: &str,
        bands: Vec<Vec<T>>,
        alpha: bool,
    ) {
        let driver = DriverManager::get_driver_by_name("MEM").unwrap();
        let count = bands.len();
        let mut mem = driver
            .create_with_band_type::<T, _>("", 64, 64, count)
            .unwrap();
        mem.set_geo_transform(&[0.0, 100.0, 0.0, 6400.0, 0.0, -100.0])
            .unwrap();
        mem.set_projection(&Crs::parse("EPSG:3857").unwrap().wkt)
            .unwrap();
        for (i, data) in bands.into_iter().enumerate() {
            let mut band = mem.rasterband(i + 1).unwrap();
            band.write((0, 0), (64, 64), &mut Buffer::new((64, 64), data))
                .unwrap();
            if alpha && i + 1 == count {
                band.set_color_interpretation(ColorInterpretation::AlphaBand)
                    .unwrap();
            }
        }
        let gtiff = DriverManager::get_driver_by_name("GTiff").unwrap();
        mem.create_copy(&gtiff, path, &gdal::cpl::CslStringList::new())
            .unwrap();
    }

    #[test]
    fn alpha_sources_in_their_own_crs_are_read_with_rasterio_without_dark_edges() {
        // A 64x64 RGBA raster in Web Mercator (as `gdalwarp -dstalpha`
        // writes one): a disc of colour (200, 150, 100), black and
        // transparent around it.
        let path = format!("/vsimem/disc-{}.tif", std::process::id());
        let inside: Vec<bool> = (0..64 * 64)
            .map(|i| {
                let (x, y) = (f64::from(i % 64) - 31.5, f64::from(i / 64) - 31.5);
                x.hypot(y) < 24.0
            })
            .collect();
        let planes = [200u8, 150, 100, 255].map(|colour| {
            inside
                .iter()
                .map(|&i| if i { colour } else { 0 })
                .collect::<Vec<u8>>()
        });
        write_mercator_64(&path, Vec::from(planes), true);
        let s = open_path(&path, Resampling::Bilinear);
        assert!(s.aligned.is_some(), "an alpha band keeps the RasterIO path");
        let ds = s.acquire().unwrap();
        let crs = Crs::parse("EPSG:3857").unwrap();
        // Downsampled and upsampled, off the pixel grid.
        for (bbox, size) in [
            ((-130.0, 70.0, 6530.0, 6730.0), 37),
            ((1230.0, 1230.0, 3330.0, 3330.0), 61),
        ] {
            let req = square(&crs, bbox, size);
            let (fast, warped) = (s.warp(&ds, &req).unwrap(), s.gdal_warp(&ds, &req).unwrap());
            let partial = fast.valid.iter().filter(|v| **v > 0 && **v < 255).count();
            assert!(partial > 0, "{bbox:?}: the disc's edge is blended");
            for (b, colour) in [200u8, 150, 100].into_iter().enumerate() {
                let BandData::U8(band) = &fast.bands[b] else {
                    panic!("byte bands expected");
                };
                for (v, a) in band.iter().zip(&fast.valid) {
                    if *a > 0 {
                        assert!(
                            v.abs_diff(colour) <= 2,
                            "{bbox:?}: band {b} is {v} at alpha {a}"
                        );
                    }
                }
            }
            let opaque = |r: &Raster| r.valid.iter().filter(|v| **v >= 128).count();
            let (a, b) = (opaque(&fast), opaque(&warped));
            assert!(
                a.abs_diff(b) * 20 <= b,
                "{bbox:?}: {a} opaque pixels against {b}"
            );
        }
        s.release(ds);
        gdal::vsi::unlink_mem_file(&path).unwrap();
    }

    #[test]
    fn a_dem_with_nodata_read_nearest_has_the_warpers_mask() {
        let s = open_path(&data("elev.tif"), Resampling::Nearest);
        let ds = s.acquire().unwrap();
        let crs = s.info().native_crs.clone();
        let b = s.info().native_bounds;
        for size in [40, 300] {
            let (fast, warped) = read_both_ways(&s, &ds, &crs, b, (size, size));
            let differ = fast
                .valid
                .iter()
                .zip(&warped.valid)
                .filter(|(x, y)| (**x == 255) != (**y == 255))
                .count();
            assert!(fast.valid.contains(&0) && fast.valid.contains(&255));
            assert!(
                differ <= size as usize * 4,
                "{size}: {differ} pixels differ"
            );
        }
        s.release(ds);
    }

    #[test]
    fn a_nodata_value_past_f32s_range_keeps_the_warper() {
        for (nodata, aligned) in [(-1e300, false), (-9999.5, true), (f64::NAN, true)] {
            let path = format!("/vsimem/f64-{}-{nodata}.tif", std::process::id());
            write_mercator_64(&path, vec![vec![1.0f64; 64 * 64]], false);
            {
                let ds = Dataset::open_ex(
                    &path,
                    gdal::DatasetOptions {
                        open_flags: gdal::GdalOpenFlags::GDAL_OF_UPDATE
                            | gdal::GdalOpenFlags::GDAL_OF_RASTER,
                        ..Default::default()
                    },
                )
                .unwrap();
                ds.rasterband(1)
                    .unwrap()
                    .set_no_data_value(Some(nodata))
                    .unwrap();
            }
            let s = open_path(&path, Resampling::Bilinear);
            assert_eq!(s.aligned.is_some(), aligned, "nodata {nodata}");
        }
    }

    #[test]
    fn float_bands_in_the_sources_crs_are_read_with_rasterio_as_the_warper_reads_them() {
        // A 64x64 Float32 ramp in Web Mercator, no nodata.
        let path = format!("/vsimem/ramp-{}.tif", std::process::id());
        let ramp: Vec<f32> = (0..64 * 64)
            .map(|i| (i % 64 + i / 64) as f32 * 0.5)
            .collect();
        write_mercator_64(&path, vec![ramp], false);
        let s = open_path(&path, Resampling::Bilinear);
        assert!(s.aligned.is_some());
        let ds = s.acquire().unwrap();
        let crs = Crs::parse("EPSG:3857").unwrap();
        // On whole pixels (a block copy), and a window across the edge at
        // another scale (resampled).
        for (bbox, size) in [
            ((1600.0, 1600.0, 4800.0, 4800.0), 32),
            ((-1000.0, 3000.0, 3000.0, 7000.0), 50),
        ] {
            let req = square(&crs, bbox, size);
            let (fast, warped) = (s.warp(&ds, &req).unwrap(), s.gdal_warp(&ds, &req).unwrap());
            let (BandData::F32(a), BandData::F32(b)) = (&fast.bands[0], &warped.bands[0]) else {
                panic!("float bands expected");
            };
            let both: Vec<(f32, f32)> = a
                .iter()
                .zip(b)
                .zip(fast.valid.iter().zip(&warped.valid))
                .filter(|(_, (x, y))| **x == 255 && **y == 255)
                .map(|((p, q), _)| (*p, *q))
                .collect();
            assert!(
                both.len() > (size * size / 4) as usize,
                "{bbox:?}: too few pixels read"
            );
            let worst = both.iter().map(|(p, q)| (p - q).abs()).fold(0.0, f32::max);
            assert!(worst <= 1.0, "{bbox:?}: differs from the warper by {worst}");
        }
        s.release(ds);
        gdal::vsi::unlink_mem_file(&path).unwrap();
    }

    #[test]
    fn vrt_sources_are_refused_by_default() {
        let dir = std::env::temp_dir().join(format!("tessera-vrt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let vrt = dir.join("x.vrt");
        std::fs::write(
            &vrt,
            format!(
                "<VRTDataset rasterXSize=\"1\" rasterYSize=\"1\"><VRTRasterBand dataType=\"Byte\" band=\"1\">\
                 <SimpleSource><SourceFilename>{}</SourceFilename><SourceBand>1</SourceBand></SimpleSource>\
                 </VRTRasterBand></VRTDataset>",
                data("elev.tif")
            ),
        )
        .unwrap();
        let spec = GdalSourceSpec {
            path: vrt.display().to_string(),
            resampling: Resampling::Nearest,
            bands: Vec::new(),
        };
        let err = GdalSource::open(&spec, &GdalSettings::default()).unwrap_err();
        assert!(matches!(err, SourceError::NotAllowed { .. }), "{err}");
        let allow = GdalSettings {
            allow_unsafe_drivers: true,
            ..GdalSettings::default()
        };
        let e = GdalSource::open(&spec, &allow);
        // With unsafe drivers allowed, the VRT opens (it then lacks a CRS).
        assert!(!matches!(e, Err(SourceError::NotAllowed { .. })));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
