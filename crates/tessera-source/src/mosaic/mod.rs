//! Many rasters as one source: a directory and glob, a list, or a tile
//! index GDAL reads (as `gdaltindex` writes it). Footprints sit in an
//! R-tree; a read opens only the pieces its window touches, through a
//! bounded LRU of open pieces, and composites them in a fixed order (later
//! pieces over earlier ones, nodata and alpha honoured).

mod overview;
mod stac;

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, PoisonError};

use rstar::{AABB, RTree, RTreeObject};
use serde::Deserialize;
use tessera_grid::BBox;
use tessera_image::{BandData, Raster};

use crate::gdal::Whole;
use crate::warp::empty_raster;
use crate::{
    Crs, GdalSettings, GdalSource, GdalSourceSpec, Resampling, Source, SourceError, SourceInfo,
    WindowRequest,
};
use overview::Overviews;

/// Metres per degree of longitude at the equator (WGS 84).
const METERS_PER_DEGREE: f64 = 111_319.490_793_273_58;

/// `source: { type: mosaic, ... }`: give `dir` (with `glob`), `paths`, or
/// `index`.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MosaicSpec {
    /// A directory whose files matching `glob` are the pieces.
    #[serde(default)]
    pub dir: Option<String>,
    /// File-name pattern within `dir` (default `*.tif`); `**/` descends.
    #[serde(default = "default_glob")]
    pub glob: String,
    /// The pieces, listed (paths GDAL opens).
    #[serde(default)]
    pub paths: Vec<String>,
    /// A vector file GDAL reads (GeoPackage, Shapefile, FlatGeobuf) with
    /// one feature per piece: its footprint and its path.
    #[serde(default)]
    pub index: Option<String>,
    /// The index's field holding each piece's path (default `location`,
    /// as `gdaltindex` writes it).
    #[serde(default = "default_location_field")]
    pub location_field: String,
    /// A local STAC ItemCollection, item or static catalog: each item's
    /// `asset` is a piece, its `bbox` the footprint.
    #[serde(default)]
    pub stac: Option<String>,
    /// The asset of each STAC item that is its piece (default: the first
    /// whose media type is a TIFF or whose href ends in `.tif`).
    #[serde(default)]
    pub asset: Option<String>,
    /// An index field to order the pieces by, ascending (later pieces are
    /// drawn over earlier ones; default: the index's order, or path order).
    #[serde(default)]
    pub sort: Option<String>,
    /// Pieces held open at once (default 64).
    #[serde(default = "default_max_open")]
    pub max_open: usize,
    /// Longest side, in pixels, of an overview of the whole mosaic
    /// (default 2048; 0: none). A window whose pixels are at least as
    /// coarse as the overview's is read from it, as GDAL reads a single
    /// file's overviews, instead of from every piece it touches. It is
    /// read from all the pieces, in the window's CRS, at the first such
    /// window, and kept in memory: (bands + 1) x side² bytes at most for
    /// 8-bit data (16 MiB for RGB at 2048 x 2048), 4 bytes per band
    /// sample otherwise; one per CRS, for at most four CRSs.
    #[serde(default = "default_overview")]
    pub overview: u32,
    /// Resampling when warping each piece.
    #[serde(default)]
    pub resampling: Resampling,
}

impl MosaicSpec {
    /// The paths of the pieces of a mosaic of `dir` (and `glob`) or of
    /// `paths`, sorted as the mosaic takes them; `None` for a mosaic of an
    /// index.
    pub fn piece_paths(&self) -> Option<Result<Vec<String>, SourceError>> {
        if self.index.is_some() || self.stac.is_some() {
            return None;
        }
        if let Some(dir) = &self.dir {
            return Some(
                glob_files(Path::new(dir), &self.glob)
                    .map(|files| files.iter().map(|p| p.display().to_string()).collect())
                    .map_err(|e| SourceError::Open {
                        path: format!("{dir}/{}", self.glob),
                        source: e.into(),
                    }),
            );
        }
        Some(Ok(self.paths.clone()))
    }

    /// Each piece of a mosaic of an `index` or of `stac` items with the
    /// values of `fields` (index fields, item properties; `None` where a
    /// piece has none): what a dimension's `from_field` reads. Times are
    /// written in ISO 8601. `None` for a mosaic of `dir` or `paths`.
    #[allow(clippy::type_complexity)] // (path, values) rows
    pub fn piece_fields(
        &self,
        fields: &[&str],
    ) -> Option<Result<Vec<(String, Vec<Option<String>>)>, SourceError>> {
        let failed = |path: &String| {
            let path = path.clone();
            move |e: String| SourceError::Open {
                path,
                source: e.into(),
            }
        };
        if let Some(index) = &self.index {
            return Some(
                read_index(index, self, fields)
                    .map(|rows| rows.into_iter().map(|r| (r.path, r.fields)).collect())
                    .map_err(failed(index)),
            );
        }
        let stac_file = self.stac.as_ref()?;
        Some(
            stac::read_items(stac_file, self.asset.as_deref())
                .map(|items| {
                    items
                        .into_iter()
                        .map(|item| {
                            let values = fields
                                .iter()
                                .map(|f| stac::property_text(item.properties.get(*f)))
                                .collect();
                            (item.path, values)
                        })
                        .collect()
                })
                .map_err(failed(stac_file)),
        )
    }
}

fn default_glob() -> String {
    "*.tif".into()
}

fn default_location_field() -> String {
    "location".into()
}

fn default_max_open() -> usize {
    64
}

fn default_overview() -> u32 {
    2048
}

/// One piece: its path and its footprint in longitude/latitude.
#[derive(Debug, Clone)]
struct Piece {
    order: usize,
    path: String,
    lonlat: BBox,
    /// What was read at the scan (CRS, bounds, bands, overviews), kept for
    /// the mosaic's life; only its dataset handles come and go with the
    /// LRU of open pieces.
    source: Arc<GdalSource>,
}

impl RTreeObject for Piece {
    type Envelope = AABB<[f64; 2]>;

    fn envelope(&self) -> Self::Envelope {
        AABB::from_corners(
            [self.lonlat.min_x, self.lonlat.min_y],
            [self.lonlat.max_x, self.lonlat.max_y],
        )
    }
}

/// What `tessera check` reports about a mosaic.
#[derive(Debug, Clone, PartialEq)]
pub struct MosaicReport {
    /// Pieces that opened.
    pub pieces: usize,
    /// Their total extent in longitude/latitude.
    pub lonlat: BBox,
    /// Their CRSs, each with how many pieces use it.
    pub crs: Vec<(String, usize)>,
    /// Pieces that could not be used, with why.
    pub bad: Vec<(String, String)>,
}

/// Many rasters read as one.
#[derive(Debug)]
pub struct MosaicSource {
    name: String,
    tree: RTree<Piece>,
    open: Mutex<lru::LruCache<usize, Arc<GdalSource>>>,
    info: SourceInfo,
    report: MosaicReport,
    /// Coarse reads of the whole mosaic, per request CRS (none when
    /// `overview` is 0).
    overviews: Option<Overviews>,
    resampling: Resampling,
}

impl MosaicSource {
    /// Finds the pieces, reads each one's footprint (from the index, or by
    /// opening it once), and checks that they agree on their bands. Bad
    /// pieces are left out and reported; none usable is an error.
    pub fn open(spec: &MosaicSpec, settings: &GdalSettings) -> Result<MosaicSource, SourceError> {
        let name = spec
            .index
            .clone()
            .or_else(|| spec.stac.clone())
            .or_else(|| spec.dir.as_ref().map(|d| format!("{d}/{}", spec.glob)))
            .unwrap_or_else(|| format!("{} listed pieces", spec.paths.len()));
        let open_err = |message: String| SourceError::Open {
            path: name.clone(),
            source: message.into(),
        };
        let given = [
            spec.dir.is_some(),
            !spec.paths.is_empty(),
            spec.index.is_some(),
            spec.stac.is_some(),
        ];
        if given.iter().filter(|g| **g).count() != 1 {
            return Err(open_err(
                "give exactly one of `dir` (with `glob`), `paths`, `index` or `stac`".into(),
            ));
        }
        if spec.max_open == 0 {
            return Err(open_err("max_open must be at least 1".into()));
        }
        let listed: Vec<(String, Option<BBox>)> = if let Some(index) = &spec.index {
            read_index(index, spec, &[])
                .map_err(open_err)?
                .into_iter()
                .map(|r| (r.path, r.footprint))
                .collect()
        } else if let Some(stac) = &spec.stac {
            stac::read_items(stac, spec.asset.as_deref())
                .map_err(open_err)?
                .into_iter()
                .map(|i| (i.path, i.footprint))
                .collect()
        } else if let Some(dir) = &spec.dir {
            glob_files(Path::new(dir), &spec.glob)
                .map_err(open_err)?
                .into_iter()
                .map(|p| (p.display().to_string(), None))
                .collect()
        } else {
            spec.paths.iter().map(|p| (p.clone(), None)).collect()
        };
        let wgs84 = Crs::parse("OGC:CRS84")?;
        let mut pieces = Vec::new();
        let mut bad = Vec::new();
        let mut crs_count: HashMap<String, usize> = HashMap::new();
        let mut first: Option<SourceInfo> = None;
        let opened = open_all(&listed, spec.resampling, settings, &wgs84);
        for (order, ((path, footprint), opened)) in listed.into_iter().zip(opened).enumerate() {
            let source = match opened {
                Ok(s) => {
                    // Not in the LRU yet: no handle stays open.
                    s.close_idle();
                    s
                }
                Err(e) => {
                    bad.push((path, crate::error_chain(&e)));
                    continue;
                }
            };
            let info = source.info().clone();
            if let Some(f) = &first
                && (f.band_count != info.band_count || f.is_byte != info.is_byte)
            {
                bad.push((
                    path,
                    format!(
                        "has {} {} bands where the first piece has {} {}",
                        info.band_count,
                        kind(info.is_byte),
                        f.band_count,
                        kind(f.is_byte)
                    ),
                ));
                continue;
            }
            *crs_count.entry(info.native_crs.id.clone()).or_default() += 1;
            let lonlat = footprint.unwrap_or(info.lonlat_bounds);
            pieces.push((order, path, lonlat, source));
            first.get_or_insert(info);
        }
        for (path, why) in &bad {
            tracing::warn!(mosaic = %name, piece = %path, reason = %why, "a mosaic piece is left out");
        }
        let Some(first) = first else {
            return Err(open_err(format!(
                "no piece can be used ({} found{})",
                bad.len(),
                bad.first()
                    .map(|(p, why)| format!("; {p}: {why}"))
                    .unwrap_or_default()
            )));
        };
        let lonlat = pieces
            .iter()
            .map(|p| p.2)
            .reduce(|a, b| a.union(&b))
            .unwrap_or(first.lonlat_bounds);
        let pieces: Vec<Piece> = pieces
            .into_iter()
            .map(|(order, path, own, source)| Piece {
                order,
                path,
                lonlat: own,
                source: Arc::new(source.with_area_of_interest(&lonlat)),
            })
            .collect();
        let mut crs: Vec<(String, usize)> = crs_count.into_iter().collect();
        crs.sort();
        let report = MosaicReport {
            pieces: pieces.len(),
            lonlat,
            crs,
            bad,
        };
        // The mosaic's own CRS is longitude/latitude; its resolution is
        // the first piece's, in degrees.
        let native_resolution = if first.native_crs.geographic {
            first.native_resolution
        } else {
            first.native_resolution * first.native_crs.meters_per_unit / METERS_PER_DEGREE
        };
        let info = SourceInfo {
            band_count: first.band_count,
            is_byte: first.is_byte,
            native_crs: wgs84.clone(),
            native_bounds: lonlat,
            lonlat_bounds: lonlat,
            native_resolution,
        };
        let capacity = NonZeroUsize::new(spec.max_open).expect("checked above");
        Ok(MosaicSource {
            name,
            tree: RTree::bulk_load(pieces),
            open: Mutex::new(lru::LruCache::new(capacity)),
            overviews: Overviews::new(spec.overview, lonlat),
            info,
            report,
            resampling: spec.resampling,
        })
    }

    /// Counts, extent, CRSs and bad pieces, for `tessera check`.
    pub fn report(&self) -> &MosaicReport {
        &self.report
    }

    /// Puts the piece at the front of the LRU of open pieces (logged when
    /// it was not there: its next read opens a handle); the piece pushed
    /// out closes its handles.
    fn touch(&self, piece: &Piece) {
        let evicted = {
            let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
            if open.get(&piece.order).is_some() {
                return;
            }
            open.push(piece.order, piece.source.clone())
        };
        tracing::debug!(mosaic = %self.name, piece = %piece.path, "mosaic piece opened");
        if let Some((_, out)) = evicted {
            out.close_idle();
        }
    }

    /// Closes the piece's handles when it left the LRU while it was read.
    fn settle(&self, piece: &Piece) {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if !open.contains(&piece.order) {
            piece.source.close_idle();
        }
    }

    /// Draws every piece touching `window` (the request's extent in
    /// longitude/latitude) into the request's pixels, in order.
    fn read_pieces(
        &self,
        request: &WindowRequest<'_>,
        window: &BBox,
    ) -> Result<Raster, SourceError> {
        let mut out = empty_raster(&self.info, request.width, request.height);
        let envelope =
            AABB::from_corners([window.min_x, window.min_y], [window.max_x, window.max_y]);
        let mut hits: Vec<&Piece> = self
            .tree
            .locate_in_envelope_intersecting(&envelope)
            .collect();
        hits.sort_by_key(|p| p.order);
        for piece in hits {
            self.touch(piece);
            let part = piece.source.read_part(request, Whole::Never);
            self.settle(piece);
            let part = part.map_err(|e| match e {
                SourceError::Cancelled => SourceError::Cancelled,
                other => SourceError::Read {
                    path: piece.path.clone(),
                    source: Box::new(other),
                },
            })?;
            if let Some((raster, x0, y0)) = part {
                over(&mut out, &raster, x0, y0);
            }
        }
        Ok(out)
    }
}

/// Opens every listed piece (reading its CRS, bounds and bands, with no
/// handle left open), on as many threads as there are cores: GDAL spends
/// most of a scan building each file's CRS, and pieces open independently.
fn open_all(
    listed: &[(String, Option<BBox>)],
    resampling: Resampling,
    settings: &GdalSettings,
    wgs84: &Crs,
) -> Vec<Result<GdalSource, SourceError>> {
    let open_one = |path: &str| {
        let opened = GdalSource::open_here(
            &GdalSourceSpec {
                path: path.to_string(),
                resampling,
                bands: Vec::new(),
            },
            settings,
            &|crs, bounds| crs.transform_bbox(bounds, wgs84),
        );
        if let Ok(s) = &opened {
            // Not in the LRU yet: no handle stays open.
            s.close_idle();
        }
        opened
    };
    let threads = std::thread::available_parallelism()
        .map_or(1, NonZeroUsize::get)
        .min(listed.len().div_ceil(16))
        .max(1);
    let next = AtomicUsize::new(0);
    let mut done: Vec<(usize, Result<GdalSource, SourceError>)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, AtomicOrdering::Relaxed);
                        let Some((path, _)) = listed.get(i) else {
                            return mine;
                        };
                        mine.push((i, open_one(path)));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, r)| r).collect()
}

fn kind(is_byte: bool) -> &'static str {
    if is_byte { "8-bit" } else { "non-8-bit" }
}

impl Source for MosaicSource {
    fn info(&self) -> &SourceInfo {
        &self.info
    }

    fn report(&self) -> Vec<String> {
        let r = &self.report;
        let mut lines = vec![
            format!(
                "{} piece{} over [{:.4}, {:.4}, {:.4}, {:.4}] (lon/lat)",
                r.pieces,
                if r.pieces == 1 { "" } else { "s" },
                r.lonlat.min_x,
                r.lonlat.min_y,
                r.lonlat.max_x,
                r.lonlat.max_y
            ),
            format!(
                "CRSs: {}",
                r.crs
                    .iter()
                    .map(|(c, n)| format!("{c} ({n})"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ];
        lines.push(format!("bad pieces: {}", r.bad.len()));
        for (path, why) in &r.bad {
            lines.push(format!("  {path}: {why}"));
        }
        lines
    }

    fn read(&self, request: &WindowRequest<'_>) -> Result<Raster, SourceError> {
        let wgs84 = &self.info.native_crs;
        let Ok(window) = request.crs.transform_bbox(&request.bbox, wgs84) else {
            return Ok(empty_raster(&self.info, request.width, request.height));
        };
        if let Some(overviews) = &self.overviews
            && let Some(read) = overviews.read(request, &self.info, self.resampling, |whole| {
                let lonlat = whole.crs.transform_bbox(&whole.bbox, wgs84)?;
                self.read_pieces(whole, &lonlat)
            })?
        {
            return Ok(read);
        }
        self.read_pieces(request, &window)
    }
}

/// Draws `top`, whose top-left pixel is (`x0`, `y0`) of `out`, over `out`:
/// where `top` is fully valid it replaces `out`; partial validity (edges)
/// blends by it, as alpha compositing does.
fn over(out: &mut Raster, top: &Raster, x0: u32, y0: u32) {
    let (ow, tw) = (out.width as usize, top.width as usize);
    for row in 0..top.height as usize {
        let (t0, o0) = (row * tw, (y0 as usize + row) * ow + x0 as usize);
        if top.valid[t0..t0 + tw].iter().all(|v| *v == 255) && copy_row(out, top, t0, o0, tw) {
            continue;
        }
        for col in 0..tw {
            let t = row * tw + col;
            let a_top = f32::from(top.valid[t]) / 255.0;
            if a_top == 0.0 {
                continue;
            }
            let o = (y0 as usize + row) * ow + x0 as usize + col;
            if top.valid[t] == 255 {
                for (dst, src) in out.bands.iter_mut().zip(&top.bands) {
                    match (dst, src) {
                        (BandData::U8(d), BandData::U8(s)) => d[o] = s[t],
                        (BandData::F32(d), s) => d[o] = s.get(t),
                        (BandData::U8(d), s) => d[o] = s.get(t).round().clamp(0.0, 255.0) as u8,
                    }
                }
                out.valid[o] = 255;
                continue;
            }
            let a_out = f32::from(out.valid[o]) / 255.0;
            let a = a_top + a_out * (1.0 - a_top);
            for (dst, src) in out.bands.iter_mut().zip(&top.bands) {
                let v = (src.get(t) * a_top + dst.get(o) * a_out * (1.0 - a_top)) / a;
                match dst {
                    BandData::U8(d) => d[o] = v.round().clamp(0.0, 255.0) as u8,
                    BandData::F32(d) => d[o] = v,
                }
            }
            out.valid[o] = (a * 255.0).round() as u8;
        }
    }
}

/// Copies `len` pixels of `top` from `t0` over `out` at `o0`, all opaque,
/// when every band pair has one type (a slice copy); `false` (nothing
/// written) otherwise.
fn copy_row(out: &mut Raster, top: &Raster, t0: usize, o0: usize, len: usize) -> bool {
    if !out
        .bands
        .iter()
        .zip(&top.bands)
        .all(|(o, t)| o.same_type(t))
    {
        return false;
    }
    for (dst, src) in out.bands.iter_mut().zip(&top.bands) {
        dst.copy_span(o0, src, t0, len);
    }
    out.valid[o0..o0 + len].fill(255);
    true
}

/// Files under `dir` whose path relative to it matches `pattern` (`*`
/// within a name, `**/` across directories), sorted.
fn glob_files(dir: &Path, pattern: &str) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    let recursive = pattern.contains("**/");
    let name_pattern = pattern.rsplit('/').next().unwrap_or(pattern).to_string();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries =
            std::fs::read_dir(&d).map_err(|e| format!("cannot list {}: {e}", d.display()))?;
        for entry in entries {
            let entry = entry.map_err(|e| format!("cannot list {}: {e}", d.display()))?;
            let path = entry.path();
            if path.is_dir() {
                if recursive {
                    stack.push(path);
                }
            } else if wildcard(&name_pattern, &entry.file_name().to_string_lossy()) {
                out.push(path);
            }
        }
    }
    out.sort();
    if out.is_empty() {
        return Err(format!("no file in {} matches {pattern:?}", dir.display()));
    }
    Ok(out)
}

/// Whether `name` matches `pattern` whole: `*` any run of characters,
/// `?` one character, anything else itself.
pub fn wildcard(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ni, mut star, mut mark) = (0, 0, None, 0);
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ni;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ni = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// A piece an index lists.
struct IndexRow {
    path: String,
    footprint: Option<BBox>,
    /// The values of the fields asked for.
    fields: Vec<Option<String>>,
}

/// The index's pieces: each feature's location (relative paths taken
/// against the index's directory), footprint in longitude/latitude and
/// the values of `fields` (dates and times in ISO 8601), in feature order
/// or by `spec.sort`.
fn read_index(index: &str, spec: &MosaicSpec, fields: &[&str]) -> Result<Vec<IndexRow>, String> {
    use gdal::vector::LayerAccess;
    let ds = gdal::Dataset::open_ex(
        index,
        gdal::DatasetOptions {
            open_flags: gdal::GdalOpenFlags::GDAL_OF_VECTOR | gdal::GdalOpenFlags::GDAL_OF_READONLY,
            ..gdal::DatasetOptions::default()
        },
    )
    .map_err(|e| format!("cannot open the index {index}: {e}"))?;
    let mut layer = ds
        .layer(0)
        .map_err(|e| format!("the index {index} has no layer: {e}"))?;
    let base = Path::new(index)
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let mut wgs84 = gdal::spatial_ref::SpatialRef::from_epsg(4326).map_err(|e| e.to_string())?;
    wgs84.set_axis_mapping_strategy(gdal::spatial_ref::AxisMappingStrategy::TraditionalGisOrder);
    let transform = layer
        .spatial_ref()
        .map(|mut srs| {
            srs.set_axis_mapping_strategy(
                gdal::spatial_ref::AxisMappingStrategy::TraditionalGisOrder,
            );
            gdal::spatial_ref::CoordTransform::new(&srs, &wgs84)
        })
        .transpose()
        .map_err(|e| format!("the index's CRS: {e}"))?;
    let mut rows: Vec<(Option<String>, IndexRow)> = Vec::new();
    for feature in layer.features() {
        let value = |name: &str| -> Result<Option<String>, String> {
            let index = feature
                .field_index(name)
                .map_err(|e| format!("the index has no field {name:?}: {e}"))?;
            let value = feature
                .field(index)
                .map_err(|e| format!("field {name:?}: {e}"))?;
            Ok(value.and_then(|v| match v {
                gdal::vector::FieldValue::DateTimeValue(t) => Some(t.to_rfc3339()),
                gdal::vector::FieldValue::DateValue(d) => Some(d.to_string()),
                gdal::vector::FieldValue::IntegerValue(n) => Some(n.to_string()),
                gdal::vector::FieldValue::Integer64Value(n) => Some(n.to_string()),
                gdal::vector::FieldValue::RealValue(n) => Some(n.to_string()),
                other => other.into_string(),
            }))
        };
        let values = fields.iter().map(|f| value(f)).collect::<Result<_, _>>()?;
        let field = |name: &str| -> Result<Option<String>, String> {
            let index = feature
                .field_index(name)
                .map_err(|e| format!("the index has no field {name:?}: {e}"))?;
            feature
                .field_as_string(index)
                .map_err(|e| format!("field {name:?}: {e}"))
        };
        let location = field(&spec.location_field)?
            .ok_or_else(|| format!("a feature of the index has no {:?}", spec.location_field))?;
        let sort_key = match &spec.sort {
            Some(name) => field(name)?,
            None => None,
        };
        let footprint = feature.geometry().and_then(|g| {
            let env = g.envelope();
            let mut xs = [env.MinX, env.MaxX, env.MinX, env.MaxX];
            let mut ys = [env.MinY, env.MinY, env.MaxY, env.MaxY];
            if let Some(t) = &transform {
                let mut zs = [0.0; 4];
                t.transform_coords(&mut xs, &mut ys, &mut zs).ok()?;
            }
            let min = |v: &[f64; 4]| v.iter().copied().fold(f64::INFINITY, f64::min);
            let max = |v: &[f64; 4]| v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            BBox::new(min(&xs), min(&ys), max(&xs), max(&ys)).ok()
        });
        let path = if Path::new(&location).is_relative() && !location.starts_with("/vsi") {
            base.join(&location).display().to_string()
        } else {
            location
        };
        rows.push((
            sort_key,
            IndexRow {
                path,
                footprint,
                fields: values,
            },
        ));
    }
    if spec.sort.is_some() {
        rows.sort_by(|a, b| a.0.cmp(&b.0));
    }
    if rows.is_empty() {
        return Err(format!("the index {index} lists no piece"));
    }
    Ok(rows.into_iter().map(|(_, row)| row).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_match_whole_names() {
        assert!(wildcard("*.tif", "a.tif"));
        assert!(!wildcard("*.tif", "a.tif.aux.xml"));
        assert!(wildcard("piece_??.tif", "piece_07.tif"));
        assert!(!wildcard("piece_??.tif", "piece_7.tif"));
        assert!(wildcard("*", "anything"));
    }

    #[test]
    fn over_replaces_where_opaque_and_blends_partial_edges() {
        let mk = |v: u8, a: u8| Raster {
            width: 1,
            height: 1,
            bands: vec![BandData::U8(vec![v])],
            valid: vec![a],
        };
        let mut out = mk(10, 255);
        over(&mut out, &mk(200, 255), 0, 0);
        assert_eq!((out.bands[0].get(0), out.valid[0]), (200.0, 255));
        let mut out = mk(0, 0);
        over(&mut out, &mk(100, 128), 0, 0);
        assert_eq!((out.bands[0].get(0), out.valid[0]), (100.0, 128));
        // Two half-covered edges make a whole pixel.
        over(&mut out, &mk(200, 128), 0, 0);
        assert!(out.valid[0] >= 190, "{}", out.valid[0]);
        // The later piece weighs more, as "over" says.
        assert!(
            (160.0..=172.0).contains(&out.bands[0].get(0)),
            "{}",
            out.bands[0].get(0)
        );
    }

    #[test]
    fn opaque_rows_are_copied_where_they_go_and_others_drawn_pixel_by_pixel() {
        let mut out = Raster {
            width: 5,
            height: 4,
            bands: vec![BandData::U8(vec![9; 20])],
            valid: vec![255; 20],
        };
        // Its first row opaque, its second with a transparent pixel.
        let top = Raster {
            width: 3,
            height: 2,
            bands: vec![BandData::U8(vec![1, 2, 3, 4, 5, 6])],
            valid: vec![255, 255, 255, 255, 0, 255],
        };
        over(&mut out, &top, 1, 1);
        let BandData::U8(v) = &out.bands[0] else {
            panic!("bytes expected")
        };
        #[rustfmt::skip]
        let want = [
            9, 9, 9, 9, 9,
            9, 1, 2, 3, 9,
            9, 4, 9, 6, 9,
            9, 9, 9, 9, 9,
        ];
        assert_eq!(v.as_slice(), &want);
        assert!(out.valid.iter().all(|a| *a == 255));
    }
}
