//! Mapbox Vector Tiles (spec 2.1): features cut to a tile plus a buffer,
//! simplified to about half a pixel, quantized to the tile's extent, with
//! exterior rings clockwise on screen and holes anticlockwise, attributes
//! as typed values. Two ways: here, from features read through OGR, or by
//! PostGIS (`ST_AsMVTGeom`/`ST_AsMVT`) in one query per tile. Each layer
//! is its own `Tile` message; concatenated, they are one tile (protobuf
//! appends repeated fields).

use gdal::Dataset;
use gdal::vector::sql::Dialect;
use gdal::vector::{FieldValue, Geometry, LayerAccess};
use geos::Geom;
use geozero::mvt::tile::{Feature, GeomType, Layer};
use geozero::mvt::{Message, TagsBuilder, Tile, TileValue};
use tessera_grid::{BBox, TileCoord, TileMatrixSet};

use super::pool::{Pool, reset_gdal_error};
use super::{DataLayer, Features, MvtSettings};
use crate::{Crs, SourceError};
use tessera_carto::geometry::{build_polygons, coords};

/// One tile's place: its bounding box in the grid's CRS and how it maps
/// to tile coordinates.
pub(super) struct Frame<'a> {
    bbox: BBox,
    /// The grid's extent: the buffer stops there (it does not wrap).
    grid_extent: BBox,
    crs: &'a Crs,
    settings: MvtSettings,
    /// The grid's tile width in pixels (simplification is half a pixel).
    tile_px: u32,
}

impl<'a> Frame<'a> {
    pub(super) fn new(
        grid: &TileMatrixSet,
        coord: TileCoord,
        crs: &'a Crs,
        settings: MvtSettings,
    ) -> Frame<'a> {
        Frame {
            bbox: grid.tile_bbox(coord),
            grid_extent: grid.extent,
            crs,
            settings,
            tile_px: grid.tile_width.max(1),
        }
    }

    /// The tile grown by the buffer, in the grid's CRS, within the grid's
    /// extent (a buffer past the antimeridian would wrap around the world
    /// once transformed).
    pub(super) fn buffered_bbox(&self) -> BBox {
        let f = f64::from(self.settings.buffer) / f64::from(self.settings.extent);
        let grown = self
            .bbox
            .buffered(self.bbox.width() * f, self.bbox.height() * f);
        let e = &self.grid_extent;
        BBox {
            min_x: grown.min_x.max(e.min_x),
            min_y: grown.min_y.max(e.min_y),
            max_x: grown.max_x.min(e.max_x),
            max_y: grown.max_y.min(e.max_y),
        }
    }

    /// The grid CRS's PostGIS SRID, when it has one PostGIS knows.
    pub(super) fn srid(&self) -> Option<i32> {
        match self.crs.id.as_str() {
            "OGC:CRS84" => Some(4326),
            id => id.strip_prefix("EPSG:")?.parse().ok(),
        }
    }

    fn scale(&self) -> (f64, f64) {
        let e = f64::from(self.settings.extent);
        (e / self.bbox.width(), e / self.bbox.height())
    }
}

/// A PostGIS table as SQL names it.
#[derive(Debug, Clone)]
pub(super) struct PgTable {
    /// `"schema"."table"` (or `"table"`).
    relation: String,
    /// `"geom"`.
    geometry: String,
    srid: i32,
}

impl PgTable {
    /// The table behind an OGR PostgreSQL layer, when its geometry column
    /// and SRID are known.
    pub(super) fn of(layer: &gdal::vector::Layer<'_>, crs: &Crs) -> Option<PgTable> {
        // SAFETY: a valid layer handle; the string belongs to the layer and
        // is copied at once.
        let column = unsafe {
            let p = gdal_sys::OGR_L_GetGeometryColumn(layer.c_layer());
            (!p.is_null()).then(|| std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned())
        }?;
        if column.is_empty() {
            return None;
        }
        let srid = crs.id.strip_prefix("EPSG:")?.parse().ok()?;
        let relation = layer
            .name()
            .split('.')
            .map(quote_ident)
            .collect::<Vec<_>>()
            .join(".");
        Some(PgTable {
            relation,
            geometry: quote_ident(&column),
            srid,
        })
    }
}

fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn quote_text(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// How a tile query names the tile's bounds.
pub(super) enum Bounds<'a> {
    /// As numbers in the text (GDAL's connection).
    Literal(&'a Frame<'a>),
    /// As parameters `$1..$4` (the tile) and `$5..$8` (buffered), in the
    /// order of [`Frame::params`].
    Parameters,
}

impl Frame<'_> {
    /// The tile's and the buffered tile's bounds, for [`Bounds::Parameters`].
    pub(super) fn params(&self) -> [f64; 8] {
        let (t, b) = (&self.bbox, self.buffered_bbox());
        [
            t.min_x, t.min_y, t.max_x, t.max_y, b.min_x, b.min_y, b.max_x, b.max_y,
        ]
    }
}

/// One query whose first value is the tile: each layer's `ST_AsMVT`,
/// concatenated. Rows are found by `&&` on the table's geometry index with
/// the buffered tile in the table's SRID, plus the layer's `where`; each
/// layer takes at most `most + 1` rows, and the second value is the most
/// rows any layer found (above `most` is an error the caller raises; the
/// database never builds a larger tile).
pub(super) fn tile_sql(
    tables: &[(&DataLayer, &PgTable)],
    settings: MvtSettings,
    srid: i32,
    bounds: &Bounds<'_>,
    most: u64,
) -> String {
    let limit = most.saturating_add(1);
    let MvtSettings { extent, buffer, .. } = settings;
    let (tile, buffered) = match bounds {
        Bounds::Literal(frame) => {
            let envelope = |b: &BBox| {
                format!(
                    "ST_MakeEnvelope({:?}, {:?}, {:?}, {:?}, {srid})",
                    b.min_x, b.min_y, b.max_x, b.max_y
                )
            };
            (envelope(&frame.bbox), envelope(&frame.buffered_bbox()))
        }
        Bounds::Parameters => (
            format!("ST_MakeEnvelope($1::float8, $2::float8, $3::float8, $4::float8, {srid})"),
            format!("ST_MakeEnvelope($5::float8, $6::float8, $7::float8, $8::float8, {srid})"),
        ),
    };
    let mut counts = Vec::new();
    let parts: Vec<String> = tables
        .iter()
        .map(|(dl, t)| {
            let geom = format!("t.{}", t.geometry);
            let (in_grid, search) = if t.srid == srid {
                (geom.clone(), buffered.clone())
            } else {
                (
                    format!("ST_Transform({geom}, {srid})"),
                    format!("ST_Transform({buffered}, {})", t.srid),
                )
            };
            let mut columns = String::new();
            for (f, _) in &dl.fields {
                columns.push_str(", t.");
                columns.push_str(&quote_ident(f));
            }
            let filter = dl
                .filter
                .as_ref()
                .map(|w| format!(" AND ({w})"))
                .unwrap_or_default();
            counts.push(format!(
                "(SELECT count(*) FROM (SELECT 1 FROM {relation} t WHERE {geom} && {search}{filter} \
                 LIMIT {limit}) c)",
                relation = t.relation,
            ));
            format!(
                "(SELECT COALESCE(ST_AsMVT(q, {name}, {extent}, 'mvt_geom'), ''::bytea) FROM \
                 (SELECT ST_AsMVTGeom({in_grid}, {tile}, {extent}, {buffer}, true) AS mvt_geom\
                 {columns} FROM {relation} t WHERE {geom} && {search}{filter} LIMIT {limit}) q)",
                name = quote_text(&dl.name),
                relation = t.relation,
            )
        })
        .collect();
    format!(
        "SELECT {} AS tile, GREATEST({}) AS most_rows",
        parts.join(" || "),
        counts.join(", ")
    )
}

/// Runs a query of [`tile_sql`] and returns its bytes and the most rows
/// a layer found.
pub(super) fn run_tile_sql(
    ds: &Dataset,
    sql: &str,
    pool: &Pool<Dataset>,
) -> Result<(bytes::Bytes, u64), SourceError> {
    reset_gdal_error();
    let result = ds.execute_sql(sql, None, Dialect::DEFAULT);
    pool.check_gdal_error("the tile query failed")?;
    let mut rows = result
        .map_err(|e| SourceError::Upstream {
            url: String::new(),
            message: format!("the tile query failed: {e}"),
        })?
        .ok_or_else(|| SourceError::Upstream {
            url: String::new(),
            message: "the tile query returned no rows".into(),
        })?;
    let feature = rows.features().next();
    pool.check_gdal_error("reading the tile failed")?;
    let Some(feature) = feature else {
        return Ok((bytes::Bytes::new(), 0));
    };
    let rows = feature
        .field_as_integer64(1)
        .ok()
        .flatten()
        .map_or(0, |n| u64::try_from(n).unwrap_or(0));
    let mut len = 0i32;
    // SAFETY: a valid feature with one field; the returned buffer belongs
    // to the feature and is copied before the feature is dropped.
    let bytes = unsafe {
        let p = gdal_sys::OGR_F_GetFieldAsBinary(feature.c_feature(), 0, &raw mut len);
        if p.is_null() || len <= 0 {
            Vec::new()
        } else {
            std::slice::from_raw_parts(p, len as usize).to_vec()
        }
    };
    Ok((bytes::Bytes::from(bytes), rows))
}

/// `raw` gzip-compressed; nothing is [`tessera_grid::EMPTY_MVT`].
pub(super) fn gzip(raw: &[u8]) -> bytes::Bytes {
    use std::io::Write;
    if raw.is_empty() {
        return bytes::Bytes::from_static(tessera_grid::EMPTY_MVT);
    }
    let mut z = flate2::write::GzEncoder::new(
        Vec::with_capacity(raw.len() / 2 + 64),
        flate2::Compression::fast(),
    );
    // Writing to a Vec cannot fail.
    let _ = z.write_all(raw);
    bytes::Bytes::from(z.finish().unwrap_or_default())
}

/// A feature's geometry in tile coordinates, before quantization.
enum TileGeometry {
    Points(Vec<(f64, f64)>),
    Lines(Vec<Vec<(f64, f64)>>),
    Polygons(Vec<Vec<Vec<(f64, f64)>>>),
}

/// Cuts `features` (in `from`) into the tile and appends them to `out` as
/// one layer named `name` with the attributes `fields`; nothing when no
/// feature reaches the tile.
pub(super) fn encode_layer(
    out: &mut Vec<u8>,
    name: &str,
    fields: &[String],
    features: Features,
    from: &Crs,
    frame: &Frame<'_>,
) -> Result<(), SourceError> {
    let extent = frame.settings.extent;
    let mut tags = TagsBuilder::new();
    let mut encoded = Vec::new();
    let clip = clip_box(frame);
    for (values, geometry) in features {
        let Some(parts) = tile_parts(&geometry, from, frame)? else {
            continue;
        };
        let Some((kind, commands)) = cut(parts, &clip, frame) else {
            continue;
        };
        let mut feature = Feature {
            geometry: commands,
            ..Feature::default()
        };
        feature.set_type(kind);
        for (field, value) in fields.iter().zip(values) {
            if let Some(v) = tile_value(value) {
                let (k, v) = tags.insert_ref(field, v);
                feature.tags.push(k);
                feature.tags.push(v);
            }
        }
        encoded.push(feature);
    }
    if encoded.is_empty() {
        return Ok(());
    }
    let (keys, values) = tags.into_tags();
    let tile = Tile {
        layers: vec![Layer {
            version: 2,
            name: name.to_string(),
            features: encoded,
            keys,
            values: values.into_iter().map(Into::into).collect(),
            extent: Some(extent),
        }],
    };
    tile.encode(out).map_err(|e| SourceError::Read {
        path: name.to_string(),
        source: e.to_string().into(),
    })
}

fn tile_value(v: Option<FieldValue>) -> Option<TileValue> {
    Some(match v? {
        FieldValue::IntegerValue(i) => TileValue::Int(i64::from(i)),
        FieldValue::Integer64Value(i) => TileValue::Int(i),
        FieldValue::RealValue(r) => TileValue::Double(r),
        FieldValue::StringValue(s) => TileValue::Str(s),
        FieldValue::DateValue(d) => TileValue::Str(d.to_string()),
        FieldValue::DateTimeValue(d) => TileValue::Str(d.to_string()),
        _ => return None,
    })
}

/// The tile plus its buffer, in tile coordinates.
fn clip_box(frame: &Frame<'_>) -> (f64, f64, f64, f64) {
    let b = f64::from(frame.settings.buffer);
    let e = f64::from(frame.settings.extent);
    (-b, -b, e + b, e + b)
}

/// `g`'s parts in tile coordinates (y down), or `None` for a geometry with
/// no parts this format holds.
fn tile_parts(
    g: &Geometry,
    from: &Crs,
    frame: &Frame<'_>,
) -> Result<Option<TileGeometry>, SourceError> {
    let (sx, sy) = frame.scale();
    let (x0, y1) = (frame.bbox.min_x, frame.bbox.max_y);
    let ring = |g: &Geometry| -> Result<Vec<(f64, f64)>, SourceError> {
        let mut pts = Vec::new();
        g.get_points(&mut pts);
        let (mut xs, mut ys): (Vec<f64>, Vec<f64>) = pts.iter().map(|p| (p.0, p.1)).unzip();
        from.transform_points(frame.crs, &mut xs, &mut ys)?;
        // Points within half a unit of the last kept one are one point
        // once quantized: dropped before GEOS sees them.
        let mut out: Vec<(f64, f64)> = Vec::with_capacity(xs.len());
        for (x, y) in xs.into_iter().zip(ys) {
            let p = ((x - x0) * sx, (y1 - y) * sy);
            if !(p.0.is_finite() && p.1.is_finite()) {
                continue;
            }
            match out.last() {
                Some(q) if (p.0 - q.0).abs() < 0.5 && (p.1 - q.1).abs() < 0.5 => {}
                _ => out.push(p),
            }
        }
        Ok(out)
    };
    let mut parts = super::Parts::new();
    super::split(g, &|g, _| ring(g), &mut parts)?;
    let super::Parts {
        points,
        lines,
        polygons,
    } = parts;
    // A feature is one type in this format: polygons first, then lines.
    Ok(if !polygons.is_empty() {
        Some(TileGeometry::Polygons(polygons))
    } else if !lines.is_empty() {
        Some(TileGeometry::Lines(lines))
    } else if !points.is_empty() {
        Some(TileGeometry::Points(points))
    } else {
        None
    })
}

/// Simplifies, clips, quantizes and encodes one feature's parts; `None`
/// when nothing is left in the tile. Lines and polygons go through GEOS:
/// simplification, a rectangle clip, and snap-rounding to the integer
/// grid, whose output is valid.
fn cut(
    parts: TileGeometry,
    clip: &(f64, f64, f64, f64),
    frame: &Frame<'_>,
) -> Option<(GeomType, Vec<u32>)> {
    // Half a pixel of the grid's tiles, in tile coordinates.
    let tolerance = f64::from(frame.settings.extent) / f64::from(frame.tile_px) / 2.0;
    match parts {
        TileGeometry::Points(points) => {
            let kept: Vec<(i32, i32)> = points
                .into_iter()
                .filter(|p| p.0 >= clip.0 && p.0 <= clip.2 && p.1 >= clip.1 && p.1 <= clip.3)
                .map(quantize)
                .collect();
            (!kept.is_empty()).then(|| (GeomType::Point, encode_points(&kept)))
        }
        TileGeometry::Lines(lines) => {
            let g = build_lines(&lines).ok()?;
            let g = g.simplify(tolerance).ok()?;
            let g = snapped(&clipped(g, clip)?)?;
            let mut out = Vec::new();
            collect_lines(&g, &mut out);
            let lines: Vec<Vec<(i32, i32)>> = out
                .iter()
                .map(|l| dedup(l.iter().copied().map(quantize)))
                .filter(|l| l.len() >= 2)
                .collect();
            (!lines.is_empty()).then(|| (GeomType::Linestring, encode_lines(&lines)))
        }
        TileGeometry::Polygons(polygons) => {
            let g = build_polygons(&polygons, tolerance).ok()?;
            let g = snapped(&clipped(g, clip)?)?;
            let polygons = quantized_polygons(&g);
            (!polygons.is_empty()).then(|| (GeomType::Polygon, encode_polygons(&polygons)))
        }
    }
}

/// `g` within the clip box: itself when it lies inside, else GEOS's
/// rectangle clip; `None` when nothing is inside.
fn clipped(g: geos::Geometry, clip: &(f64, f64, f64, f64)) -> Option<geos::Geometry> {
    let (x0, y0, x1, y1) = (
        g.get_x_min().ok()?,
        g.get_y_min().ok()?,
        g.get_x_max().ok()?,
        g.get_y_max().ok()?,
    );
    if x0 >= clip.0 && y0 >= clip.1 && x1 <= clip.2 && y1 <= clip.3 {
        return Some(g);
    }
    if x1 < clip.0 || y1 < clip.1 || x0 > clip.2 || y0 > clip.3 {
        return None;
    }
    let cut = g.clip_by_rect(clip.0, clip.1, clip.2, clip.3).ok()?;
    (!cut.is_empty().ok()?).then_some(cut)
}

/// `g` snap-rounded to the integer grid (valid output; parts that
/// collapse are dropped). An invalid input (some data has self-touching
/// rings) is repaired first.
fn snapped(g: &geos::Geometry) -> Option<geos::Geometry> {
    let out = match g.set_precision(1.0, geos::Precision::ValidOutput) {
        Ok(out) => out,
        Err(_) => g
            .make_valid()
            .ok()?
            .set_precision(1.0, geos::Precision::ValidOutput)
            .ok()?,
    };
    (!out.is_empty().ok()?).then_some(out)
}

fn quantize(p: (f64, f64)) -> (i32, i32) {
    (p.0.round() as i32, p.1.round() as i32)
}

fn dedup(points: impl Iterator<Item = (i32, i32)>) -> Vec<(i32, i32)> {
    let mut out: Vec<(i32, i32)> = Vec::new();
    for p in points {
        if out.last() != Some(&p) {
            out.push(p);
        }
    }
    out
}

fn build_lines(lines: &[Vec<(f64, f64)>]) -> geos::GResult<geos::Geometry> {
    let parts = lines
        .iter()
        .filter(|l| l.len() >= 2)
        .map(|l| geos::Geometry::create_line_string(coords(l)?))
        .collect::<geos::GResult<Vec<_>>>()?;
    geos::Geometry::create_multiline_string(parts)
}

/// Width and height of the points' bounding box.
fn points_of(g: &impl Geom) -> Vec<(f64, f64)> {
    g.get_coord_seq()
        .and_then(|s| s.as_buffer(Some(geos::CoordType::XY)))
        .map(|flat| flat.chunks_exact(2).map(|c| (c[0], c[1])).collect())
        .unwrap_or_default()
}

fn collect_lines(g: &impl Geom, out: &mut Vec<Vec<(f64, f64)>>) {
    use geos::GeometryTypes as T;
    match g.geometry_type() {
        Ok(T::LineString | T::LinearRing) => out.push(points_of(g)),
        Ok(T::MultiLineString | T::GeometryCollection) => {
            for i in 0..g.get_num_geometries().unwrap_or(0) {
                if let Ok(part) = g.get_geometry_n(i) {
                    collect_lines(&part, out);
                }
            }
        }
        _ => {}
    }
}

/// The polygons of `g` (other parts left out), quantized: repeated points
/// dropped, rings of no area dropped, exteriors clockwise on screen
/// (positive area with y down) and holes the other way.
fn quantized_polygons(g: &impl Geom) -> Vec<Vec<Vec<(i32, i32)>>> {
    let mut out = Vec::new();
    add_polygons(g, &mut out);
    out
}

fn add_polygons(g: &impl Geom, out: &mut Vec<Vec<Vec<(i32, i32)>>>) {
    use geos::GeometryTypes as T;
    match g.geometry_type() {
        Ok(T::Polygon) => {
            let Ok(exterior) = g.get_exterior_ring() else {
                return;
            };
            let mut rings = Vec::new();
            let holes = g.get_num_interior_rings().unwrap_or(0);
            let mut all = vec![points_of(&exterior)];
            for i in 0..holes {
                if let Ok(h) = g.get_interior_ring_n(i) {
                    all.push(points_of(&h));
                }
            }
            for (i, pts) in all.into_iter().enumerate() {
                let mut ring = dedup(pts.into_iter().map(quantize));
                if ring.len() > 1 && ring.first() == ring.last() {
                    ring.pop();
                }
                let area = signed_area(&ring);
                if ring.len() < 3 || area == 0 {
                    if i == 0 {
                        return;
                    }
                    continue;
                }
                if (area > 0) != (i == 0) {
                    ring.reverse();
                }
                rings.push(ring);
            }
            out.push(rings);
        }
        Ok(T::MultiPolygon | T::GeometryCollection) => {
            for i in 0..g.get_num_geometries().unwrap_or(0) {
                if let Ok(part) = g.get_geometry_n(i) {
                    add_polygons(&part, out);
                }
            }
        }
        _ => {}
    }
}

/// Twice the ring's signed area by the surveyor's formula (positive for
/// clockwise rings on screen, y down).
fn signed_area(ring: &[(i32, i32)]) -> i64 {
    let n = ring.len();
    (0..n)
        .map(|i| {
            let (a, b) = (ring[i], ring[(i + 1) % n]);
            i64::from(a.0) * i64::from(b.1) - i64::from(b.0) * i64::from(a.1)
        })
        .sum()
}

const MOVE_TO: u32 = 1;
const LINE_TO: u32 = 2;
const CLOSE_PATH: u32 = 7;

fn command(id: u32, count: usize) -> u32 {
    (id & 0x7) | ((count as u32) << 3)
}

fn zigzag(v: i32) -> u32 {
    ((v << 1) ^ (v >> 31)) as u32
}

/// Writes geometry commands with coordinates relative to a cursor.
struct Pen {
    at: (i32, i32),
    out: Vec<u32>,
}

impl Pen {
    fn new() -> Pen {
        Pen {
            at: (0, 0),
            out: Vec::new(),
        }
    }

    fn to(&mut self, p: (i32, i32)) {
        self.out.push(zigzag(p.0 - self.at.0));
        self.out.push(zigzag(p.1 - self.at.1));
        self.at = p;
    }

    fn path(&mut self, points: &[(i32, i32)], close: bool) {
        self.out.push(command(MOVE_TO, 1));
        self.to(points[0]);
        self.out.push(command(LINE_TO, points.len() - 1));
        for &p in &points[1..] {
            self.to(p);
        }
        if close {
            self.out.push(command(CLOSE_PATH, 1));
        }
    }
}

fn encode_points(points: &[(i32, i32)]) -> Vec<u32> {
    let mut pen = Pen::new();
    pen.out.push(command(MOVE_TO, points.len()));
    for &p in points {
        pen.to(p);
    }
    pen.out
}

fn encode_lines(lines: &[Vec<(i32, i32)>]) -> Vec<u32> {
    let mut pen = Pen::new();
    for l in lines {
        pen.path(l, false);
    }
    pen.out
}

fn encode_polygons(polygons: &[Vec<Vec<(i32, i32)>>]) -> Vec<u32> {
    let mut pen = Pen::new();
    for rings in polygons {
        for r in rings {
            pen.path(r, true);
        }
    }
    pen.out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_and_parameters_follow_the_specification() {
        // The specification's examples (4.3.5): a point, a line, a polygon.
        assert_eq!(encode_points(&[(25, 17)]), [9, 50, 34]);
        assert_eq!(
            encode_lines(&[vec![(2, 2), (2, 10), (10, 10)]]),
            [9, 4, 4, 18, 0, 16, 16, 0]
        );
        assert_eq!(
            encode_polygons(&[vec![vec![(3, 6), (8, 12), (20, 34)]]]),
            [9, 6, 12, 18, 10, 12, 24, 44, 15]
        );
    }

    #[test]
    fn the_empty_tile_is_the_gzip_of_nothing() {
        use std::io::Read;
        let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut z, b"").unwrap();
        assert_eq!(z.finish().unwrap(), tessera_grid::EMPTY_MVT);
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(tessera_grid::EMPTY_MVT)
            .read_to_end(&mut out)
            .unwrap();
        assert!(out.is_empty());
        assert_eq!(gzip(b"").as_ref(), tessera_grid::EMPTY_MVT);
    }

    #[test]
    fn rings_are_wound_exterior_clockwise_and_holes_the_other_way() {
        // An exterior given anticlockwise on screen, a hole clockwise.
        let outer = vec![
            (0.0, 0.0),
            (0.0, 10.0),
            (10.0, 10.0),
            (10.0, 0.0),
            (0.0, 0.0),
        ];
        let hole = vec![(3.0, 3.0), (6.0, 3.0), (6.0, 6.0), (3.0, 6.0), (3.0, 3.0)];
        let g = build_polygons(&[vec![outer, hole]], 0.0).unwrap();
        let p = quantized_polygons(&g);
        assert_eq!(p[0].len(), 2);
        assert_eq!(p.len(), 1);
        assert!(signed_area(&p[0][0]) > 0);
        assert!(signed_area(&p[0][1]) < 0);
        assert_eq!(p[0][0].len(), 4, "the closing point is implied");
    }

    #[test]
    fn clipping_keeps_the_buffer_and_drops_what_is_outside() {
        let clip = (-64.0, -64.0, 4160.0, 4160.0);
        let inside = build_lines(&[vec![(0.0, 0.0), (100.0, 100.0)]]).unwrap();
        assert!(clipped(inside, &clip).is_some());
        let outside = build_lines(&[vec![(5000.0, 0.0), (6000.0, 100.0)]]).unwrap();
        assert!(clipped(outside, &clip).is_none());
        let across = build_lines(&[vec![(-1000.0, 10.0), (1000.0, 10.0)]]).unwrap();
        let cut = clipped(across, &clip).unwrap();
        assert!((cut.get_x_min().unwrap() + 64.0).abs() < 1e-9);
    }

    #[test]
    fn snap_rounding_leaves_no_invalid_polygon() {
        // Two parts a fraction apart: rounded one by one they would
        // overlap; snap-rounded together they stay valid.
        let a = vec![(0.0, 0.0), (10.2, 0.0), (10.2, 10.0), (0.0, 10.0)];
        let b = vec![(10.4, 0.0), (20.0, 0.0), (20.0, 10.0), (10.4, 10.0)];
        let g = snapped(&build_polygons(&[vec![a], vec![b]], 0.0).unwrap()).unwrap();
        assert!(g.is_valid().unwrap());
        // A bow-tie (invalid) is repaired, not dropped.
        let bow = vec![(0.0, 0.0), (10.0, 10.0), (10.0, 0.0), (0.0, 10.0)];
        let g = snapped(&build_polygons(&[vec![bow]], 0.0).unwrap()).unwrap();
        assert!(g.is_valid().unwrap());
        assert!(!quantized_polygons(&g).is_empty());
    }
}
