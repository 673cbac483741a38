//! Upstream tile services as sources: an XYZ/TMS URL template, or a WMTS
//! layer read from its capabilities. A read fetches the upstream tiles that
//! cover the window at the nearest zoom, all at once, stitches them and
//! crops (same grid) or warps (any other) into the window. When a layer's
//! grid is the upstream's grid and nothing is styled, tiles pass through
//! as the upstream sent them ([`Source::passthrough`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use bytes::Bytes;
use serde::Deserialize;
use tessera_grid::{BBox, GridSpec, TileCoord, TileFormat, TileMatrix, TileMatrixSet, TileRange};
use tessera_image::{Raster, RgbaImage, decode};

use super::answer::{BasicAuth, empty, fetch_error, refuse_non_image, same_coordinates};
use super::client::{
    FetchError, Fetched, HttpSettings, NetworkPolicy, Prefetched, UpstreamClient, excerpt, redacted,
};
use crate::complete::check_complete;
use crate::warp::warp_rgba;
use crate::{Crs, Resampling, Source, SourceError, SourceInfo, WindowRequest};

/// Most upstream tiles one read may fetch.
const MAX_TILES_PER_READ: u64 = 1024;

/// `source: { type: xyz, ... }`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct XyzSourceSpec {
    /// URL template with `{z}`, `{x}` and `{y}` (rows from the top) or
    /// `{-y}` (rows from the bottom, TMS).
    pub url: String,
    /// The upstream's tile grid (default: WebMercatorQuad, 256-pixel tiles).
    #[serde(default)]
    pub grid: Option<GridSpec>,
    /// Lowest zoom the upstream has (default 0).
    #[serde(default)]
    pub min_zoom: u8,
    /// Highest zoom the upstream has (default 19).
    #[serde(default = "default_max_zoom")]
    pub max_zoom: u8,
    /// The upstream's tile format, for passing tiles through (default:
    /// from the template's extension, else PNG).
    #[serde(default)]
    pub format: Option<TileFormat>,
    /// Area the upstream covers, in longitude/latitude `[west, south, east,
    /// north]` (default: the grid's).
    #[serde(default)]
    pub bounds: Option<[f64; 4]>,
    /// HTTP headers for every request.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// HTTP basic auth for every request.
    #[serde(default)]
    pub basic_auth: Option<BasicAuth>,
    /// Resampling when the window is not the upstream's pixel grid.
    #[serde(default)]
    pub resampling: Resampling,
    /// Timeouts, concurrency, retries and the circuit.
    #[serde(default)]
    pub http: HttpSettings,
}

fn default_max_zoom() -> u8 {
    19
}

/// `source: { type: wmts, ... }`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WmtsSourceSpec {
    /// The capabilities document (`.../WMTSCapabilities.xml`, or the KVP
    /// endpoint, to which `SERVICE=WMTS&REQUEST=GetCapabilities` is added).
    pub url: String,
    /// The layer's identifier.
    pub layer: String,
    /// Its style (default: the default style).
    #[serde(default)]
    pub style: Option<String>,
    /// The tile matrix set (default: the first the layer links).
    #[serde(default)]
    pub matrix_set: Option<String>,
    /// The format (default: `image/png` if offered, else the first).
    #[serde(default)]
    pub format: Option<String>,
    /// HTTP headers for every request.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// HTTP basic auth for every request.
    #[serde(default)]
    pub basic_auth: Option<BasicAuth>,
    /// Resampling when the window is not the upstream's pixel grid.
    #[serde(default)]
    pub resampling: Resampling,
    /// Timeouts, concurrency, retries and the circuit.
    #[serde(default)]
    pub http: HttpSettings,
}

/// Where a source's tiles come from.
#[derive(Debug, Clone)]
enum Template {
    /// `{z}`, `{x}`, `{y}`/`{-y}` in a URL, and for WMTS `{TileMatrix}`,
    /// `{TileRow}`, `{TileCol}` with the matrix identifiers, asked with
    /// `client`.
    Url(String, Arc<UpstreamClient>),
    /// A tile archive (PMTiles, MBTiles).
    #[cfg(feature = "archive")]
    Archive(Arc<dyn crate::archive::TileArchive>),
}

/// An upstream tile service, or a tile archive: tiles of one grid, read
/// by coordinates.
#[derive(Debug)]
pub struct TileSource {
    name: String,
    template: Template,
    grid: TileMatrixSet,
    crs: Crs,
    min_zoom: u8,
    max_zoom: u8,
    format: TileFormat,
    resampling: Resampling,
    info: SourceInfo,
    /// Tiles started ahead of their reads ([`Source::prefetch`]).
    prefetched: Prefetched,
    /// A WMTS layer's dimensions: identifier and the values listed.
    dimensions: Vec<(String, Vec<String>)>,
    /// What an archive says about itself.
    metadata: Option<crate::TileMetadata>,
    /// How a vector archive's tiles are drawn into pictures.
    #[cfg(feature = "archive")]
    rules: Arc<Vec<tessera_carto::style::Rule>>,
}

/// Most tiles fetched ahead and kept for their reads: a few metatile
/// windows (a 4x4 metatile with its gutter covers up to 36 tiles).
const MOST_PREFETCHED: usize = 256;

impl TileSource {
    /// An XYZ/TMS upstream.
    pub fn open_xyz(
        spec: &XyzSourceSpec,
        policy: NetworkPolicy,
    ) -> Result<TileSource, SourceError> {
        let open_err = |message: String| SourceError::Open {
            path: spec.url.clone(),
            source: message.into(),
        };
        // GDAL's spelling (`${z}`, written `$${z}` past env substitution)
        // means the same.
        let template = ["z", "x", "y", "-y"].iter().fold(spec.url.clone(), |u, k| {
            u.replace(&format!("${{{k}}}"), &format!("{{{k}}}"))
        });
        let has = |k: &str| template.contains(k);
        if !(has("{z}") && has("{x}") && (has("{y}") || has("{-y}"))) {
            return Err(open_err(
                "the URL template needs {z}, {x} and {y} (or {-y} for rows from the bottom)".into(),
            ));
        }
        let (grid, crs) = match &spec.grid {
            None => (TileMatrixSet::web_mercator_quad(), Crs::parse("EPSG:3857")?),
            Some(g) => {
                let crs = Crs::parse(&g.crs)?;
                let grid = TileMatrixSet::from_spec(g, crs.meters_per_unit)
                    .map_err(|e| open_err(e.to_string()))?;
                (grid, crs)
            }
        };
        if spec.min_zoom > spec.max_zoom {
            return Err(open_err("min_zoom is above max_zoom".into()));
        }
        let format = spec.format.unwrap_or_else(|| {
            let path = spec.url.split('?').next().unwrap_or_default();
            std::path::Path::new(path)
                .extension()
                .and_then(|e| e.to_str())
                .and_then(TileFormat::from_extension)
                .unwrap_or(TileFormat::Png)
        });
        let sample = fill(&template, &grid, TileCoord::restored(0, 0, 0));
        let url = reqwest::Url::parse(&sample).map_err(|e| open_err(format!("not a URL: {e}")))?;
        let auth = spec
            .basic_auth
            .as_ref()
            .map(|a| (a.user.clone(), a.password.clone()));
        let client = Arc::new(
            UpstreamClient::new(&url, spec.http.clone(), policy, &spec.headers, auth)
                .map_err(open_err)?,
        );
        let lonlat = match spec.bounds {
            Some([w, s, e, n]) => {
                BBox::new(w, s, e, n).map_err(|e| open_err(format!("bounds: {e}")))?
            }
            None => lonlat_of(&grid, &crs)?,
        };
        Ok(TileSource::new(
            spec.url.clone(),
            Template::Url(template, client),
            grid,
            crs,
            (spec.min_zoom, spec.max_zoom),
            format,
            spec.resampling,
            lonlat,
        ))
    }

    /// A WMTS layer, from the service's capabilities (read within the
    /// HTTP timeouts).
    pub fn open_wmts(
        spec: &WmtsSourceSpec,
        policy: NetworkPolicy,
    ) -> Result<TileSource, SourceError> {
        let open_err = |message: String| SourceError::Open {
            path: spec.url.clone(),
            source: message.into(),
        };
        let mut url =
            reqwest::Url::parse(&spec.url).map_err(|e| open_err(format!("not a URL: {e}")))?;
        if !url.path().to_ascii_lowercase().ends_with(".xml") {
            url.query_pairs_mut()
                .append_pair("SERVICE", "WMTS")
                .append_pair("REQUEST", "GetCapabilities");
        }
        let auth = spec
            .basic_auth
            .as_ref()
            .map(|a| (a.user.clone(), a.password.clone()));
        let client = Arc::new(
            UpstreamClient::new(&url, spec.http.clone(), policy, &spec.headers, auth)
                .map_err(open_err)?,
        );
        let fetched = client
            .get(&url, None)
            .map_err(|e| open_err(format!("its capabilities could not be read: {e}")))?;
        if fetched.status != 200 {
            return Err(open_err(format!(
                "its capabilities answered {}",
                fetched.status
            )));
        }
        let text = String::from_utf8_lossy(&fetched.body);
        let layer = super::wmts_caps::parse(&text, spec).map_err(open_err)?;
        let crs = Crs::parse(&layer.crs)?;
        let grid = layer.grid(&crs).map_err(open_err)?;
        let template = layer.template.clone();
        // A template must be a URL the client may ask.
        reqwest::Url::parse(&template.replace(['{', '}'], ""))
            .map_err(|e| open_err(format!("tile URL {template}: {e}")))?;
        let max_zoom = grid.max_zoom();
        let lonlat = match layer.lonlat {
            Some(b) => b,
            None => lonlat_of(&grid, &crs)?,
        };
        let mut source = TileSource::new(
            format!("{} (WMTS layer {})", spec.url, spec.layer),
            Template::Url(template, client),
            grid,
            crs,
            (0, max_zoom),
            layer.format,
            spec.resampling,
            lonlat,
        );
        source.dimensions = layer.dimensions;
        Ok(source)
    }

    #[allow(clippy::too_many_arguments)] // the parts of a source, once
    fn new(
        name: String,
        template: Template,
        grid: TileMatrixSet,
        crs: Crs,
        (min_zoom, max_zoom): (u8, u8),
        format: TileFormat,
        resampling: Resampling,
        lonlat: BBox,
    ) -> TileSource {
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
        TileSource {
            name,
            template,
            grid,
            crs,
            min_zoom,
            max_zoom,
            format,
            resampling,
            info,
            prefetched: Prefetched::new(MOST_PREFETCHED),
            dimensions: Vec::new(),
            metadata: None,
            #[cfg(feature = "archive")]
            rules: Arc::new(Vec::new()),
        }
    }

    /// A tile archive's tiles as a source, in WebMercatorQuad (the grid
    /// PMTiles and MBTiles hold), over the zooms and extent the archive
    /// says.
    #[cfg(feature = "archive")]
    pub fn open_archive(
        name: String,
        archive: Arc<dyn crate::archive::TileArchive>,
        resampling: Resampling,
        rules: Vec<tessera_carto::style::Rule>,
    ) -> Result<TileSource, SourceError> {
        let crs = Crs::parse("EPSG:3857")?;
        let metadata = archive.metadata().clone();
        // Raster tiles of 512 pixels (or more) cut the same tiles with more
        // pixels: the HiDPI twin of the grid (`WebMercatorQuad@2x`).
        let grid = match sample_width(archive.as_ref(), &metadata) {
            Some(w) if w > 256 && w % 256 == 0 => {
                TileMatrixSet::web_mercator_quad().scaled(w / 256)
            }
            _ => TileMatrixSet::web_mercator_quad(),
        };
        let lonlat = match metadata.bounds {
            Some(b) => b,
            None => lonlat_of(&grid, &crs)?,
        };
        let mut source = TileSource::new(
            name,
            Template::Archive(archive),
            grid,
            crs,
            (metadata.min_zoom, metadata.max_zoom),
            metadata.format,
            resampling,
            lonlat,
        );
        source.metadata = Some(metadata);
        source.rules = Arc::new(rules);
        Ok(source)
    }

    /// The values a WMTS layer lists for its dimension `name` (any case);
    /// `None` for XYZ and a layer without it.
    pub fn dimension_values(&self, name: &str) -> Option<&[String]> {
        self.dimensions
            .iter()
            .find(|(id, _)| id.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }

    /// Whether a value of dimension `name` reaches the upstream: its
    /// template has `{name}` (any case) or is a KVP query it can join.
    pub fn takes_value(&self, name: &str) -> bool {
        let template = match &self.template {
            Template::Url(template, _) => template,
            #[cfg(feature = "archive")]
            Template::Archive(_) => return false,
        };
        template.contains('?')
            || template
                .to_ascii_lowercase()
                .contains(&format!("{{{}}}", name.to_ascii_lowercase()))
    }

    /// The same upstream with dimension `values` (name, value as the
    /// upstream spells it) in its tile URLs: `{name}` in the template (any
    /// case, `{Time}` as WMTS writes it), or, for a KVP template without
    /// it, added as a parameter. It shares this source's client (its
    /// connections and concurrency bound).
    #[must_use]
    pub fn with_values(&self, values: &[(String, String)]) -> TileSource {
        let (mut template, client) = match &self.template {
            Template::Url(template, client) => (template.clone(), client.clone()),
            #[cfg(feature = "archive")]
            Template::Archive(_) => {
                return self.with_template(self.template.clone(), self.name.clone());
            }
        };
        let mut name = self.name.clone();
        for (dimension, value) in values {
            let encoded: String = url::form_urlencoded::byte_serialize(value.as_bytes()).collect();
            let placeholder = format!("{{{dimension}}}");
            let found = template
                .to_ascii_lowercase()
                .find(&placeholder.to_ascii_lowercase());
            match found {
                Some(at) => template.replace_range(at..at + placeholder.len(), &encoded),
                None if template.contains('?') => {
                    let id = self
                        .dimensions
                        .iter()
                        .find(|(id, _)| id.eq_ignore_ascii_case(dimension))
                        .map_or(dimension.as_str(), |(id, _)| id.as_str());
                    let _ = write!(template, "&{id}={encoded}");
                }
                None => {}
            }
            let _ = write!(name, " {dimension}={value}");
        }
        self.with_template(Template::Url(template, client), name)
    }

    /// This source with another template (and name): the same grid,
    /// zooms, format and extent; its own prefetched tiles.
    fn with_template(&self, template: Template, name: String) -> TileSource {
        TileSource {
            name,
            template,
            grid: self.grid.clone(),
            crs: self.crs.clone(),
            min_zoom: self.min_zoom,
            max_zoom: self.max_zoom,
            format: self.format,
            resampling: self.resampling,
            info: self.info.clone(),
            prefetched: Prefetched::new(MOST_PREFETCHED),
            dimensions: self.dimensions.clone(),
            metadata: self.metadata.clone(),
            #[cfg(feature = "archive")]
            rules: self.rules.clone(),
        }
    }

    /// The upstream's grid.
    pub fn grid(&self) -> &TileMatrixSet {
        &self.grid
    }

    fn url_of(&self, coord: TileCoord) -> Result<reqwest::Url, SourceError> {
        let t = match &self.template {
            Template::Url(t, _) => t,
            #[cfg(feature = "archive")]
            Template::Archive(a) => {
                return Err(SourceError::Upstream {
                    url: a.describe(coord),
                    message: "an archive's tiles have no URL".into(),
                });
            }
        };
        let text = fill(t, &self.grid, coord);
        reqwest::Url::parse(&text).map_err(|e| SourceError::Upstream {
            url: text.clone(),
            message: format!("not a URL: {e}"),
        })
    }

    /// The upstream tiles a read of `request` stitches; `None` when the
    /// window is outside the upstream's extent (every pixel empty).
    fn plan(&self, request: &WindowRequest<'_>) -> Result<Option<ReadPlan>, SourceError> {
        let read_err = |e: SourceError| SourceError::Read {
            path: self.name.clone(),
            source: Box::new(e),
        };
        let same = same_coordinates(&self.crs, request.crs);
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
            // The window's pixels spread over its footprint upstream.
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

    /// Fetches the tiles at `coords` at once (those fetched ahead taken);
    /// each is its encoded bytes, or `None` where the upstream has no tile
    /// (404, 204).
    fn fetch_tiles(
        &self,
        coords: &[TileCoord],
        cancel: Option<&AtomicBool>,
    ) -> Result<Vec<Option<Bytes>>, SourceError> {
        let client = match &self.template {
            Template::Url(_, client) => client,
            #[cfg(feature = "archive")]
            Template::Archive(archive) => return archive.tiles(coords),
        };
        let urls = coords
            .iter()
            .map(|c| self.url_of(*c))
            .collect::<Result<Vec<_>, _>>()?;
        let answers = self.prefetched.get_all(client, &urls, cancel);
        urls.iter()
            .zip(answers)
            .map(|(url, answer)| judge(url, answer))
            .collect()
    }

    /// Where tile `coord` comes from, for messages (a URL without its
    /// secrets, or an archive and the tile).
    fn describe(&self, coord: TileCoord) -> String {
        match &self.template {
            Template::Url(..) => self
                .url_of(coord)
                .map_or_else(|_| self.name.clone(), |u| redacted(&u)),
            #[cfg(feature = "archive")]
            Template::Archive(a) => a.describe(coord),
        }
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
        // Sized from the upstream's tile size: checked before anything is
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
                url: self.describe(*coord),
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

/// What an upstream tile answer means: bytes, no tile, or an error.
fn judge(
    url: &reqwest::Url,
    answer: Result<Fetched, FetchError>,
) -> Result<Option<Bytes>, SourceError> {
    let fetched = answer.map_err(|e| fetch_error(url, e))?;
    if matches!(fetched.status, 404 | 204) {
        return Ok(None);
    }
    refuse_non_image(url, &fetched, "a tile")?;
    Ok(Some(fetched.body))
}

/// The width in pixels of a raster archive's tile at its centre (or the
/// middle of its bounds) at its lowest zoom; `None` for vector tiles, or
/// when there is no tile there or it says no size.
#[cfg(feature = "archive")]
fn sample_width(
    archive: &dyn crate::archive::TileArchive,
    meta: &crate::TileMetadata,
) -> Option<u32> {
    if meta.format == TileFormat::Mvt {
        return None;
    }
    let (lon, lat) = match (meta.center, meta.bounds) {
        (Some((lon, lat, _)), _) => (lon, lat),
        (None, Some(b)) => (
            f64::midpoint(b.min_x, b.max_x),
            f64::midpoint(b.min_y, b.max_y),
        ),
        (None, None) => (0.0, 0.0),
    };
    let z = meta.min_zoom;
    let n = f64::from(1u32 << z);
    let lat = lat.clamp(-85.0511, 85.0511).to_radians();
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // clamped to the matrix
    let (x, y) = (
        (((lon + 180.0) / 360.0 * n).floor().clamp(0.0, n - 1.0)) as u32,
        (((1.0 - lat.tan().asinh() / std::f64::consts::PI) / 2.0 * n)
            .floor()
            .clamp(0.0, n - 1.0)) as u32,
    );
    let tile = archive
        .tiles(&[TileCoord::restored(z, x, y)])
        .ok()?
        .pop()??;
    tessera_image::declared_size(&tile, TileFormat::sniff(&tile).unwrap_or(meta.format))
        .ok()
        .map(|(w, _)| w)
}

/// The template with the tile's numbers (and WMTS matrix identifier) in.
fn fill(template: &str, grid: &TileMatrixSet, c: TileCoord) -> String {
    let matrix = grid.matrix(c.z());
    let flipped = matrix.map_or(0, |m| {
        m.matrix_height.saturating_sub(1).saturating_sub(c.y())
    });
    let matrix_id = matrix.map_or_else(|| c.z().to_string(), |m| m.id.clone());
    template
        .replace("{z}", &c.z().to_string())
        .replace("{x}", &c.x().to_string())
        .replace("{-y}", &flipped.to_string())
        .replace("{y}", &c.y().to_string())
        .replace("{TileMatrix}", &matrix_id)
        .replace("{TileCol}", &c.x().to_string())
        .replace("{TileRow}", &c.y().to_string())
}

/// The grid's extent in longitude/latitude.
fn lonlat_of(grid: &TileMatrixSet, crs: &Crs) -> Result<BBox, SourceError> {
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

impl Source for TileSource {
    fn info(&self) -> &SourceInfo {
        &self.info
    }

    fn tile_metadata(&self) -> Option<&crate::TileMetadata> {
        self.metadata.as_ref()
    }

    fn passthrough_is_local(&self) -> bool {
        match &self.template {
            Template::Url(..) => false,
            #[cfg(feature = "archive")]
            Template::Archive(a) => a.is_local(),
        }
    }

    fn version_now(&self) -> Option<Result<Option<String>, SourceError>> {
        match &self.template {
            Template::Url(..) => None,
            #[cfg(feature = "archive")]
            Template::Archive(a) => {
                Some(a.version_now().map_err(|message| SourceError::Upstream {
                    url: self.name.clone(),
                    message,
                }))
            }
        }
    }

    /// Starts fetching the tiles covering `request`'s window.
    fn prefetch(&self, request: &WindowRequest<'_>) {
        let client = match &self.template {
            Template::Url(_, client) => client,
            #[cfg(feature = "archive")]
            Template::Archive(_) => return,
        };
        if let Ok(Some(plan)) = self.plan(request) {
            for coord in plan.coords() {
                if let Ok(url) = self.url_of(coord) {
                    self.prefetched.start(client, url);
                }
            }
        }
    }

    /// The covering tiles cropped, when the window is on the upstream's
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
            return Ok(empty(request.width, request.height));
        };
        #[cfg(feature = "archive")]
        if self.format == TileFormat::Mvt {
            // A vector archive: its features drawn with the layer's rules.
            let coords = plan.coords();
            let tiles: Vec<(TileCoord, Bytes)> = coords
                .iter()
                .copied()
                .zip(self.fetch_tiles(&coords, request.cancel)?)
                .filter_map(|(c, t)| t.map(|t| (c, t)))
                .collect();
            return crate::archive::draw_vector_tiles(
                &tiles,
                &self.grid,
                &self.crs,
                request,
                &self.rules,
                f64::from(plan.range.z),
            )
            .map_err(|message| SourceError::Upstream {
                url: self.name.clone(),
                message,
            });
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
                                    excerpt(&b[..b.len().min(16)])
                                ),
                            }),
                        }
                    }
                    None => Ok(None),
                }),
        )
    }
}

/// Checks that a tile is whole: a vector tile gzip-compressed as stored
/// (an archive's) by its signature; any other by its framing, and an image
/// by the size it declares.
fn check_tile(
    bytes: &[u8],
    format: TileFormat,
    size: (u32, u32),
) -> Result<(), crate::complete::Incomplete> {
    if format == TileFormat::Mvt && bytes.starts_with(&[0x1f, 0x8b]) {
        return Ok(());
    }
    check_complete(bytes, format).and_then(|()| same_size(bytes, format, size))
}

/// Checks that an image tile declares the tile's size (an MVT has none).
fn same_size(
    bytes: &[u8],
    format: TileFormat,
    (width, height): (u32, u32),
) -> Result<(), crate::complete::Incomplete> {
    let image = match format {
        TileFormat::Mvt => return Ok(()),
        TileFormat::Mixed | TileFormat::Png8 => TileFormat::sniff(bytes).unwrap_or(TileFormat::Png),
        other => other,
    };
    let wrong = |reason: String| crate::complete::Incomplete {
        format: "image",
        reason,
    };
    match tessera_image::declared_size(bytes, image) {
        Ok(size) if size == (width, height) => Ok(()),
        Ok((w, h)) => Err(wrong(format!(
            "it declares {w}x{h} pixels, not the tile's {width}x{height}"
        ))),
        Err(e) => Err(wrong(e.to_string())),
    }
}

/// The tiles of `range`, row by row.
fn range_coords(range: &TileRange) -> Vec<TileCoord> {
    (range.min_y..=range.max_y)
        .flat_map(|y| (range.min_x..=range.max_x).map(move |x| TileCoord::restored(range.z, x, y)))
        .collect()
}

/// What a read stitches: the covering tiles, their extent and resolution,
/// and whether the window is in the upstream's own CRS.
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
    fn aligned_at(&self, source: &TileSource, request: &WindowRequest<'_>) -> Option<(u32, u32)> {
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
    fn templates_take_rows_from_the_top_or_the_bottom_and_wmts_matrix_ids() {
        let g = TileMatrixSet::web_mercator_quad();
        let c = TileCoord::restored(3, 5, 1);
        assert_eq!(
            fill("http://h/{z}/{x}/{y}.png", &g, c),
            "http://h/3/5/1.png"
        );
        assert_eq!(
            fill("http://h/{z}/{x}/{-y}.png", &g, c),
            "http://h/3/5/6.png"
        );
        assert_eq!(
            fill("http://h/{TileMatrix}/{TileRow}/{TileCol}.png", &g, c),
            "http://h/3/1/5.png"
        );
    }

    #[test]
    fn gdal_style_placeholders_mean_the_same() {
        let spec: XyzSourceSpec =
            serde_json::from_str(r#"{"url": "http://tiles.example/${z}/${x}/${-y}.png"}"#).unwrap();
        let source = TileSource::open_xyz(&spec, NetworkPolicy::default()).unwrap();
        assert_eq!(
            source
                .url_of(TileCoord::restored(3, 5, 1))
                .unwrap()
                .as_str(),
            "http://tiles.example/3/5/6.png"
        );
        let bad: XyzSourceSpec =
            serde_json::from_str(r#"{"url": "http://tiles.example/{z}/{x}.png"}"#).unwrap();
        let e = TileSource::open_xyz(&bad, NetworkPolicy::default()).unwrap_err();
        let cause = std::error::Error::source(&e)
            .map(ToString::to_string)
            .unwrap_or_default();
        assert!(cause.contains("needs {z}, {x} and {y}"), "{cause}");
    }

    #[test]
    fn values_fill_their_placeholder_in_any_case_or_join_a_kvp_query() {
        let open = |url: &str| {
            let spec: XyzSourceSpec =
                serde_json::from_str(&format!(r#"{{"url": "{url}"}}"#)).unwrap();
            TileSource::open_xyz(&spec, NetworkPolicy::default()).unwrap()
        };
        let c = TileCoord::restored(1, 0, 1);
        let at = |s: &TileSource| s.url_of(c).unwrap().as_str().to_string();
        let values = [("time".to_string(), "2024-01-01T00:00:00Z".to_string())];
        let rest = open("http://h/{Time}/{z}/{x}/{y}.png").with_values(&values);
        assert_eq!(at(&rest), "http://h/2024-01-01T00%3A00%3A00Z/1/0/1.png");
        let kvp = open("http://h/tile?z={z}&x={x}&y={y}").with_values(&values);
        assert_eq!(
            at(&kvp),
            "http://h/tile?z=1&x=0&y=1&time=2024-01-01T00%3A00%3A00Z"
        );
        assert!(open("http://h/{TIME}/{z}/{x}/{y}.png").takes_value("time"));
        assert!(open("http://h/t?z={z}&x={x}&y={y}").takes_value("time"));
        assert!(!open("http://h/{z}/{x}/{y}.png").takes_value("time"));
    }

    #[test]
    fn grids_cut_the_same_tiles_only_when_everything_agrees() {
        let a = TileMatrixSet::web_mercator_quad();
        assert!(same_tiles(&a, &TileMatrixSet::web_mercator_quad(), 10));
        assert!(!same_tiles(&a, &TileMatrixSet::world_crs84_quad(), 2));
        assert!(!same_tiles(&a, &a.scaled(2), 2));
    }
}
