//! Vector data through GDAL/OGR (GeoPackage, Shapefile, GeoJSON,
//! FlatGeobuf, PostGIS): features in a window, reprojected, simplified to
//! about half a pixel and drawn with a style (`style.rs`, `draw.rs`).
//!
//! Each read takes a dataset handle (for PostGIS, a connection) from a
//! bounded pool, filters by the window's bounding box in the data's CRS (the
//! database's `&&` on its geometry index for PostGIS) and by `where`, and
//! reads only the features there.

pub mod draw;
pub mod style;

use std::sync::{Condvar, Mutex, PoisonError};
use std::time::Duration;

use gdal::vector::{FieldValue, Geometry, LayerAccess, OGRwkbGeometryType, geometry_type_flatten};
use gdal::{Dataset, DatasetOptions, GdalOpenFlags};
use serde::Deserialize;
use tessera_grid::BBox;
use tessera_image::Raster;

use crate::{Crs, Source, SourceError, SourceInfo, WindowRequest};
use draw::{Canvas, Shapes};
use style::{Attribute, Rule};

/// Metres per pixel of Web Mercator's zoom 0 (256-pixel tiles): zoom
/// levels of style rules are measured against it.
const ZOOM0_METERS_PER_PIXEL: f64 = 156_543.033_928_040_97;

/// `source: { type: vector, ... }`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct VectorSpec {
    /// A file GDAL reads as vector data, a `PG:` connection string or a
    /// `postgres://` URL (credentials through `${ENV}`).
    pub path: String,
    /// The layer (a table for PostGIS); the first one when absent.
    #[serde(default)]
    pub layer: Option<String>,
    /// An attribute filter in OGR SQL (pushed to the database by PostGIS).
    #[serde(default, rename = "where")]
    pub filter: Option<String>,
    /// Attributes the layer offers (vector tiles, feature info); the style's
    /// filter fields are read in any case. Each must exist.
    #[serde(default)]
    pub fields: Vec<String>,
    /// How features are drawn into map images: rules in drawing order.
    pub style: Vec<Rule>,
    /// Most features one read may draw (default 200,000): more is an error
    /// that says to narrow the window or the `where`.
    #[serde(default = "default_max_features")]
    pub max_features: u64,
    /// Most handles (database connections) reads use at once (default 4).
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// PostgreSQL's `statement_timeout` and the longest wait for a free
    /// connection, in milliseconds (default 10,000).
    #[serde(default = "default_statement_timeout_ms")]
    pub statement_timeout_ms: u64,
}

fn default_max_features() -> u64 {
    200_000
}

fn default_max_connections() -> usize {
    4
}

fn default_statement_timeout_ms() -> u64 {
    10_000
}

impl VectorSpec {
    /// The text GDAL opens: a `postgres://` URL becomes a `PG:` string,
    /// and PostgreSQL sources get a connect timeout and the statement
    /// timeout.
    fn gdal_path(&self) -> String {
        let secs = self.statement_timeout_ms.div_ceil(1000).max(1);
        let ms = self.statement_timeout_ms;
        let timeouts = format!("connect_timeout={secs} options='-c statement_timeout={ms}'");
        if self.path.starts_with("postgres://") || self.path.starts_with("postgresql://") {
            // GDAL appends `application_name=...` to the string, which a
            // URL cannot take: the URL is written as key=value pairs.
            return match conninfo_of_url(&self.path) {
                Some(conninfo) => format!("PG:{conninfo} {timeouts}"),
                None => format!("PG:{}", self.path),
            };
        }
        if let Some(conn) = self.path.strip_prefix("PG:") {
            return format!("PG:{conn} {timeouts}");
        }
        self.path.clone()
    }

    /// Whether the data is in PostgreSQL.
    pub fn is_postgres(&self) -> bool {
        self.path.starts_with("PG:")
            || self.path.starts_with("postgres://")
            || self.path.starts_with("postgresql://")
    }

    /// The path with any password replaced by `***`, for messages.
    pub fn shown_path(&self) -> String {
        redact(&self.path)
    }
}

/// A `postgres://user:password@host:port/dbname?key=value` URL as libpq
/// key=value pairs (values quoted); `None` when it does not parse.
fn conninfo_of_url(text: &str) -> Option<String> {
    let url = url::Url::parse(text).ok()?;
    let quote = |v: &str| format!("'{}'", v.replace('\\', "\\\\").replace('\'', "\\'"));
    let decode = |v: &str| {
        url::form_urlencoded::parse(format!("v={v}").as_bytes())
            .next()
            .map(|(_, v)| v.into_owned())
            .unwrap_or_default()
    };
    let mut pairs = Vec::new();
    if let Some(host) = url.host_str() {
        pairs.push(format!(
            "host={}",
            quote(host.trim_start_matches('[').trim_end_matches(']'))
        ));
    }
    if let Some(port) = url.port() {
        pairs.push(format!("port={port}"));
    }
    if !url.username().is_empty() {
        pairs.push(format!("user={}", quote(&decode(url.username()))));
    }
    if let Some(password) = url.password() {
        pairs.push(format!("password={}", quote(&decode(password))));
    }
    let db = url.path().trim_start_matches('/');
    if !db.is_empty() {
        pairs.push(format!("dbname={}", quote(&decode(db))));
    }
    for (k, v) in url.query_pairs() {
        pairs.push(format!("{k}={}", quote(&v)));
    }
    Some(pairs.join(" "))
}

/// `text` with the password of a `PG:` string (`password=...`) or of a
/// URL's user information replaced by `***`.
fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("password=") {
        out.push_str(&rest[..at + "password=".len()]);
        out.push_str("***");
        rest = &rest[at + "password=".len()..];
        let end = rest.find([' ', '&']).unwrap_or(rest.len());
        rest = &rest[end..];
    }
    out.push_str(rest);
    if let Some(scheme) = out.find("://") {
        let after = scheme + 3;
        if let Some(at) = out[after..].find('@').map(|i| i + after)
            && let Some(colon) = out[after..at].find(':').map(|i| i + after)
        {
            out.replace_range(colon + 1..at, "***");
        }
    }
    out
}

/// Features of one layer of a vector dataset, drawn with a style.
#[derive(Debug)]
pub struct VectorSource {
    spec: VectorSpec,
    gdal_path: String,
    shown: String,
    layer: String,
    info: SourceInfo,
    /// The attributes the style reads.
    style_fields: Vec<String>,
    pool: Pool,
    report: Vec<String>,
}

/// Dataset handles: idle ones to reuse, and how many are out.
#[derive(Debug)]
struct Pool {
    idle: Mutex<(Vec<Dataset>, usize)>,
    freed: Condvar,
    max: usize,
    wait: Duration,
}

impl VectorSource {
    /// Opens the dataset and its layer, checks the fields and the style,
    /// and reads the layer's CRS and extent.
    pub fn open(spec: &VectorSpec) -> Result<VectorSource, SourceError> {
        let shown = spec.shown_path();
        let open_err = |message: String| SourceError::Open {
            path: shown.clone(),
            source: message.into(),
        };
        style::check_rules(&spec.style).map_err(&open_err)?;
        if spec.max_connections == 0 {
            return Err(open_err("max_connections must be at least 1".into()));
        }
        let gdal_path = spec.gdal_path();
        let ds = open_vector(&gdal_path, &shown)?;
        let names: Vec<String> = ds.layers().map(|l| l.name()).collect();
        let layer_name = match &spec.layer {
            Some(l) => l.clone(),
            None => names
                .first()
                .cloned()
                .ok_or_else(|| open_err("the dataset has no layers".into()))?,
        };
        let mut layer = ds.layer_by_name(&layer_name).map_err(|_| {
            open_err(format!(
                "it has no layer {layer_name:?}; its layers: {}",
                list(&names)
            ))
        })?;
        let available: Vec<String> = layer.defn().fields().map(|f| f.name()).collect();
        let style_fields = style::fields_used(&spec.style);
        for f in spec.fields.iter().chain(&style_fields) {
            if !available.contains(f) {
                return Err(open_err(format!(
                    "layer {layer_name:?} has no field {f:?}; its fields: {}",
                    list(&available)
                )));
            }
        }
        let srs = layer.spatial_ref().ok_or_else(|| {
            open_err(format!(
                "layer {layer_name:?} has no coordinate reference system"
            ))
        })?;
        let wkt = srs
            .to_wkt()
            .map_err(|e| open_err(format!("its CRS cannot be read: {e}")))?;
        let native_crs = Crs::from_wkt(&wkt)?;
        let extent = layer.get_extent().map_err(|e| {
            open_err(format!(
                "layer {layer_name:?} has no extent (is it empty?): {e}"
            ))
        })?;
        let native_bounds = BBox::new(extent.MinX, extent.MinY, extent.MaxX, extent.MaxY)
            .map_err(|e| open_err(format!("layer {layer_name:?} has a bad extent: {e}")))?;
        let lonlat = Crs::parse("OGC:CRS84")?;
        let lonlat_bounds = native_crs.transform_bbox(&native_bounds, &lonlat)?;
        let count = layer.feature_count();
        let geometry = gdal::vector::geometry_type_to_name(unsafe_geom_type(&layer));
        // The filter last: the extent and count above are the table's, and
        // a costly `where` is paid by reads, under their timeout.
        if let Some(w) = &spec.filter {
            layer.set_attribute_filter(w).map_err(|e| {
                open_err(format!(
                    "where {w:?} is not valid for layer {layer_name:?}: {e}"
                ))
            })?;
        }
        let info = SourceInfo {
            band_count: 3,
            is_byte: true,
            native_crs: native_crs.clone(),
            native_bounds,
            lonlat_bounds,
            // Vector data has no resolution of its own: fine enough for
            // zoom 24 of its extent.
            native_resolution: native_bounds.width().max(native_bounds.height())
                / f64::from(1u32 << 24),
        };
        let report = vec![
            format!(
                "layer {layer_name:?}: {count} features ({geometry}), CRS {}",
                native_crs.id
            ),
            format!(
                "extent [{:.4}, {:.4}, {:.4}, {:.4}] (lon/lat)",
                lonlat_bounds.min_x, lonlat_bounds.min_y, lonlat_bounds.max_x, lonlat_bounds.max_y
            ),
            format!("fields: {}", list(&available)),
        ];
        let pool = Pool {
            idle: Mutex::new((vec![ds], 0)),
            freed: Condvar::new(),
            max: spec.max_connections,
            wait: Duration::from_millis(spec.statement_timeout_ms),
        };
        Ok(VectorSource {
            spec: spec.clone(),
            gdal_path,
            shown,
            layer: layer_name,
            info,
            style_fields,
            pool,
            report,
        })
    }

    /// A database that cannot be reached is unavailable (503 with
    /// Retry-After), like a down upstream; a file keeps its open error.
    fn unavailable(&self, e: SourceError) -> SourceError {
        if !self.spec.is_postgres() {
            return e;
        }
        let message = match &e {
            SourceError::Open { source, .. } => source.to_string(),
            other => other.to_string(),
        };
        SourceError::UpstreamUnavailable {
            url: self.shown.clone(),
            message,
            retry_after_secs: 5,
        }
    }

    fn read_err(&self, message: String) -> SourceError {
        SourceError::Read {
            path: self.shown.clone(),
            source: message.into(),
        }
    }

    /// A handle from the pool, or a new one while fewer than `max` are out;
    /// waits up to the statement timeout for one to come back.
    fn acquire(&self) -> Result<Dataset, SourceError> {
        let deadline = std::time::Instant::now() + self.pool.wait;
        let mut guard = self
            .pool
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(ds) = guard.0.pop() {
                guard.1 += 1;
                return Ok(ds);
            }
            if guard.1 < self.pool.max {
                guard.1 += 1;
                drop(guard);
                return open_vector(&self.gdal_path, &self.shown)
                    .map_err(|e| self.unavailable(e))
                    .inspect_err(|_| self.give_back(None));
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(self.read_err(format!(
                    "all {} connections stayed busy for {} ms (max_connections, statement_timeout_ms)",
                    self.pool.max, self.spec.statement_timeout_ms
                )));
            }
            guard = self
                .pool
                .freed
                .wait_timeout(guard, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Returns a handle (or only its place, after a failed read: the
    /// handle may be a broken connection).
    fn give_back(&self, ds: Option<Dataset>) {
        let mut guard = self
            .pool
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        guard.1 = guard.1.saturating_sub(1);
        if let Some(ds) = ds {
            guard.0.push(ds);
        }
        drop(guard);
        self.pool.freed.notify_one();
    }

    /// Features in `bbox` (data CRS) with the style's attributes, as
    /// geometries in the data's CRS.
    fn features(
        &self,
        ds: &Dataset,
        bbox: &BBox,
        cancel: Option<&std::sync::atomic::AtomicBool>,
    ) -> Result<Vec<(Vec<Attribute>, Geometry)>, SourceError> {
        let mut layer = ds
            .layer_by_name(&self.layer)
            .map_err(|e| self.read_err(format!("layer {:?}: {e}", self.layer)))?;
        if let Some(w) = &self.spec.filter {
            layer
                .set_attribute_filter(w)
                .map_err(|e| self.read_err(format!("where {w:?}: {e}")))?;
        }
        layer.set_spatial_filter_rect(bbox.min_x, bbox.min_y, bbox.max_x, bbox.max_y);
        let indexes: Vec<Option<usize>> = self
            .style_fields
            .iter()
            .map(|f| layer.defn().field_index(f).ok())
            .collect();
        // SAFETY: plain calls on this thread's GDAL error state.
        unsafe { gdal_sys::CPLErrorReset() };
        let mut out = Vec::new();
        for feature in layer.features() {
            if out.len() as u64 >= self.spec.max_features {
                return Err(self.read_err(format!(
                    "more than {} features in the window (max_features): narrow `where` or draw \
                     this layer only from a higher zoom",
                    self.spec.max_features
                )));
            }
            if out.len() % 1024 == 0
                && cancel.is_some_and(|c| c.load(std::sync::atomic::Ordering::Acquire))
            {
                return Err(SourceError::Cancelled);
            }
            let Some(geometry) = feature.geometry() else {
                continue;
            };
            let attributes = indexes
                .iter()
                .map(|i| match i.map(|i| feature.field(i)) {
                    Some(Ok(Some(v))) => attribute(v),
                    _ => Attribute::Null,
                })
                .collect();
            out.push((attributes, geometry.clone()));
        }
        // An error while iterating ends the iteration like its end does: a
        // lost connection or a statement timeout is told by GDAL's error
        // state.
        // SAFETY: reads this thread's GDAL error state; the message is
        // copied before any other GDAL call.
        let failed = unsafe { gdal_sys::CPLGetLastErrorType() } >= gdal_sys::CPLErr::CE_Failure;
        if failed {
            // SAFETY: as above.
            let message = unsafe { std::ffi::CStr::from_ptr(gdal_sys::CPLGetLastErrorMsg()) }
                .to_string_lossy()
                .into_owned();
            let message = format!("reading features failed: {}", redact(&message));
            // The database's own words (a statement timeout, a lost
            // connection) are the upstream's message.
            return Err(if self.spec.is_postgres() {
                SourceError::Upstream {
                    url: self.shown.clone(),
                    message,
                }
            } else {
                self.read_err(message)
            });
        }
        Ok(out)
    }
}

fn list(names: &[String]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

/// The layer's declared geometry type.
fn unsafe_geom_type(layer: &gdal::vector::Layer<'_>) -> OGRwkbGeometryType::Type {
    // SAFETY: a valid layer handle; the call only reads its definition.
    unsafe { gdal_sys::OGR_L_GetGeomType(layer.c_layer()) }
}

fn attribute(v: FieldValue) -> Attribute {
    match v {
        FieldValue::IntegerValue(i) => Attribute::Number(f64::from(i)),
        FieldValue::Integer64Value(i) => Attribute::Number(i as f64),
        FieldValue::RealValue(r) => Attribute::Number(r),
        FieldValue::StringValue(s) => Attribute::Text(s),
        FieldValue::DateValue(d) => Attribute::Text(d.to_string()),
        FieldValue::DateTimeValue(d) => Attribute::Text(d.to_string()),
        _ => Attribute::Null,
    }
}

/// Opens `path` as vector data, read-only.
fn open_vector(path: &str, shown: &str) -> Result<Dataset, SourceError> {
    let options = DatasetOptions {
        open_flags: GdalOpenFlags::GDAL_OF_VECTOR
            | GdalOpenFlags::GDAL_OF_READONLY
            | GdalOpenFlags::GDAL_OF_VERBOSE_ERROR,
        ..DatasetOptions::default()
    };
    Dataset::open_ex(path, options).map_err(|e| SourceError::Open {
        path: shown.to_string(),
        source: redact(&e.to_string()).into(),
    })
}

/// The geometry's parts in output pixels: points, lines or polygon rings,
/// each transformed from `from` to the request's CRS and thinned to
/// vertices at least half a pixel apart.
struct Projector<'a> {
    from: &'a Crs,
    req: &'a WindowRequest<'a>,
    res_x: f64,
    res_y: f64,
}

impl Projector<'_> {
    fn ring(&self, g: &Geometry, close: bool) -> Result<Vec<(f32, f32)>, SourceError> {
        let mut pts = Vec::new();
        g.get_points(&mut pts);
        let (mut xs, mut ys): (Vec<f64>, Vec<f64>) = pts.iter().map(|p| (p.0, p.1)).unzip();
        self.from.transform_points(self.req.crs, &mut xs, &mut ys)?;
        let b = &self.req.bbox;
        let mut out: Vec<(f32, f32)> = Vec::with_capacity(xs.len());
        for (x, y) in xs.into_iter().zip(ys) {
            let p = (
                ((x - b.min_x) / self.res_x) as f32,
                ((b.max_y - y) / self.res_y) as f32,
            );
            if !(p.0.is_finite() && p.1.is_finite()) {
                continue;
            }
            match out.last() {
                Some(q) if (p.0 - q.0).abs() < 0.5 && (p.1 - q.1).abs() < 0.5 => {}
                _ => out.push(p),
            }
        }
        if close && out.len() < 3 {
            out.clear();
        }
        Ok(out)
    }

    /// Adds `g`'s parts to `points`, `lines` and `polygons`.
    fn add(
        &self,
        g: &Geometry,
        points: &mut Vec<(f32, f32)>,
        lines: &mut Vec<Vec<(f32, f32)>>,
        polygons: &mut Vec<Vec<Vec<(f32, f32)>>>,
    ) -> Result<(), SourceError> {
        use OGRwkbGeometryType as T;
        match geometry_type_flatten(g.geometry_type()) {
            T::wkbPoint => points.extend(self.ring(g, false)?),
            T::wkbLineString => {
                let l = self.ring(g, false)?;
                if !l.is_empty() {
                    lines.push(l);
                }
            }
            T::wkbPolygon => {
                let mut rings = Vec::with_capacity(g.geometry_count());
                for i in 0..g.geometry_count() {
                    let r = self.ring(&g.get_geometry(i), true)?;
                    if !r.is_empty() {
                        rings.push(r);
                    }
                }
                if !rings.is_empty() {
                    polygons.push(rings);
                }
            }
            T::wkbMultiPoint
            | T::wkbMultiLineString
            | T::wkbMultiPolygon
            | T::wkbGeometryCollection => {
                for i in 0..g.geometry_count() {
                    self.add(&g.get_geometry(i), points, lines, polygons)?;
                }
            }
            // Curves and surfaces GDAL can linearise: not drawn yet.
            _ => {}
        }
        Ok(())
    }
}

impl Source for VectorSource {
    fn info(&self) -> &SourceInfo {
        &self.info
    }

    fn report(&self) -> Vec<String> {
        self.report.clone()
    }

    fn read(&self, req: &WindowRequest<'_>) -> Result<Raster, SourceError> {
        let mut canvas = Canvas::new(req.width, req.height).ok_or(SourceError::TooLarge {
            width: req.width,
            height: req.height,
        })?;
        let res_x = req.bbox.width() / f64::from(req.width);
        let res_y = req.bbox.height() / f64::from(req.height);
        let zoom = (ZOOM0_METERS_PER_PIXEL / (res_x * req.crs.meters_per_unit)).log2();
        let rules: Vec<&Rule> = self
            .spec
            .style
            .iter()
            .filter(|r| r.draws_at(zoom))
            .collect();
        if rules.is_empty() {
            return Ok(canvas.into_raster());
        }
        // Symbols reach past a feature by half their width: features that
        // far outside the window still draw into it.
        let reach = rules
            .iter()
            .map(|r| {
                r.stroke_width
                    .max(r.marker.as_ref().map_or(6.0, |m| m.size))
            })
            .fold(0.0f32, f32::max);
        let margin = f64::from(reach) / 2.0 + 1.0;
        let grown = req.bbox.buffered(margin * res_x, margin * res_y);
        let Ok(window) = req.crs.transform_bbox(&grown, &self.info.native_crs) else {
            return Ok(canvas.into_raster());
        };
        let ds = self.acquire()?;
        let features = self.features(&ds, &window, req.cancel);
        self.give_back(features.is_ok().then_some(ds));
        let projector = Projector {
            from: &self.info.native_crs,
            req,
            res_x,
            res_y,
        };
        for (attributes, geometry) in features? {
            let (mut points, mut lines, mut polygons) = (Vec::new(), Vec::new(), Vec::new());
            projector.add(&geometry, &mut points, &mut lines, &mut polygons)?;
            for rule in &rules {
                let passes = rule.filter.as_ref().is_none_or(|f| {
                    let at = self.style_fields.iter().position(|n| *n == f.field);
                    at.is_some_and(|i| f.matches(&attributes[i]))
                });
                if !passes {
                    continue;
                }
                if !polygons.is_empty() {
                    canvas.draw(&Shapes::Polygons(polygons.clone()), rule);
                }
                if !lines.is_empty() {
                    canvas.draw(&Shapes::Lines(lines.clone()), rule);
                }
                if !points.is_empty() {
                    canvas.draw(&Shapes::Points(points.clone()), rule);
                }
            }
        }
        if req
            .cancel
            .is_some_and(|c| c.load(std::sync::atomic::Ordering::Acquire))
        {
            return Err(SourceError::Cancelled);
        }
        Ok(canvas.into_raster())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_hidden_in_connection_strings_and_urls() {
        assert_eq!(
            redact("PG:host=db user=u password=s3cret dbname=x"),
            "PG:host=db user=u password=*** dbname=x"
        );
        assert_eq!(
            redact("postgres://u:s3cret@db:5432/x"),
            "postgres://u:***@db:5432/x"
        );
        assert_eq!(redact("data/countries.gpkg"), "data/countries.gpkg");
    }

    #[test]
    fn postgres_sources_get_connect_and_statement_timeouts() {
        let spec = |path: &str| VectorSpec {
            path: path.into(),
            layer: None,
            filter: None,
            fields: vec![],
            style: vec![],
            max_features: 1,
            max_connections: 1,
            statement_timeout_ms: 2500,
        };
        assert_eq!(
            spec("postgres://u:p%40ss@h:5433/db?sslmode=disable").gdal_path(),
            "PG:host='h' port=5433 user='u' password='p@ss' dbname='db' sslmode='disable' \
             connect_timeout=3 options='-c statement_timeout=2500'"
        );
        assert_eq!(
            spec("PG:host=h dbname=db").gdal_path(),
            "PG:host=h dbname=db connect_timeout=3 options='-c statement_timeout=2500'"
        );
        assert_eq!(spec("a.gpkg").gdal_path(), "a.gpkg");
        assert!(spec("PG:host=h").is_postgres() && !spec("a.gpkg").is_postgres());
    }
}
