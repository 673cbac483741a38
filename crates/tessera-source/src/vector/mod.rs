//! Vector data through GDAL/OGR (GeoPackage, Shapefile, GeoJSON,
//! FlatGeobuf, PostGIS): features in a window, reprojected, simplified to
//! about half a pixel and drawn with a style (tessera-carto's rules or a MapLibre document,
//! `maplibre_draw.rs`), cut
//! into Mapbox Vector Tiles (`mvt.rs`), or found at a point (feature info).
//!
//! Each read takes a dataset handle (for PostGIS, a connection) from a
//! bounded pool (`pool.rs`), filters by the window's bounding box in the
//! data's CRS (the database's `&&` on its geometry index for PostGIS) and by
//! `where`, and reads only the features there.

mod auto;
mod contours;
mod maplibre_draw;
mod mvt;
mod pg;
mod pool;
mod spec;
mod values;

use gdal::vector::{FieldValue, Geometry, LayerAccess, OGRFieldType, OGRwkbGeometryType};
use gdal::vector::{geometry_type_flatten, geometry_type_to_name};
use gdal::{Dataset, DatasetOptions, GdalOpenFlags};
use tessera_grid::{BBox, TileCoord, TileFormat, TileMatrixSet};
use tessera_image::Raster;

pub use crate::error::VectorError;
use crate::{
    AskedValue, Crs, FeatureSource, Found, FoundFeature, LegendSymbol, Listed, Source, SourceError,
    SourceInfo, VectorLayerInfo, WindowRequest,
};
pub use auto::{PostgisAutoSpec, SpatialTable};
pub use contours::{CONTOUR_FIELDS, CONTOUR_LAYER, ContourSpec, Units as ContourUnits};
use pool::Pool;
pub use spec::{MvtSettings, VectorLayerSpec, VectorSpec};
use tessera_carto::draw::{self, Canvas, Shapes};
use tessera_carto::style::{self, Attribute, Rule};
use tessera_carto::{label, maplibre};
pub use values::{ValueFilter, ValueKind};

/// Metres per pixel of Web Mercator's zoom 0 (256-pixel tiles): zoom
/// levels of style rules are measured against it.
const ZOOM0_METERS_PER_PIXEL: f64 = 156_543.033_928_040_97;

/// Features of one or more layers of a vector dataset, drawn with their
/// styles, cut into vector tiles, or found at a point.
#[derive(Debug)]
pub struct VectorSource {
    spec: VectorSpec,
    shown: String,
    layers: Vec<DataLayer>,
    info: SourceInfo,
    /// Shared by the source at each dimension value ([`VectorSource::at_values`]).
    pool: std::sync::Arc<Pool<Dataset>>,
    /// Native connections for tiles PostGIS cuts, when the connection
    /// settings allow them (else `pool` runs the tile queries).
    tiles: Option<std::sync::Arc<Pool<pg::Connection>>>,
    report: Vec<String>,
    /// The MapLibre style it draws with instead of its rules, if any.
    maplibre: Option<std::sync::Arc<maplibre::MapLibreStyle>>,
    /// Contour lines made from a DEM, when these are its features (its
    /// pool then has no dataset).
    contours: Option<std::sync::Arc<contours::Contours>>,
}

/// Where features are read for: the window in the data layer's CRS, and
/// the map that asks (its CRS, its window there and its resolution), on
/// whose pixels generated features (contours) are made.
struct FeatureWindow<'a> {
    /// The window in the data layer's CRS.
    layer_bbox: BBox,
    /// The map's CRS.
    crs: &'a Crs,
    /// The window in the map's CRS.
    bbox: BBox,
    /// The map's units per pixel, across and down.
    resolution: (f64, f64),
    /// A vector tile's own box (in the map's CRS), where generated lines
    /// are cut so that neighbouring tiles meet.
    tile: Option<BBox>,
}

/// One data layer, as opened.
#[derive(Debug, Clone)]
struct DataLayer {
    /// Name in vector tiles and feature info.
    name: String,
    /// The dataset's layer.
    layer: String,
    filter: Option<String>,
    /// Offered attributes, with their MVT/TileJSON types.
    fields: Vec<(String, &'static str)>,
    /// The attributes feature info shows: `fields` when given, else every
    /// one but binary ones, in the layer's order.
    info_fields: Vec<String>,
    style: Vec<Rule>,
    /// The attributes the style reads.
    style_fields: Vec<String>,
    min_zoom: u8,
    max_zoom: Option<u8>,
    crs: Crs,
    geometry: OGRwkbGeometryType::Type,
    /// The table's address for SQL, for PostGIS layers.
    table: Option<mvt::PgTable>,
    /// Every field of the data layer.
    available: Vec<String>,
    /// Only features whose field (named) a dimension value admits, tested
    /// here (files; PostGIS gets the condition in `filter`).
    admit: Option<(String, values::Admit)>,
}

/// Features read from a data layer: the asked-for attributes (in the
/// order asked) and the geometry in the layer's CRS.
type Features = Vec<(Vec<Option<FieldValue>>, Geometry)>;

impl VectorSource {
    /// Opens the dataset and its layers, checks the fields and the styles,
    /// and reads the layers' CRSs and extents.
    pub fn open(spec: &VectorSpec) -> Result<VectorSource, SourceError> {
        let shown = spec.shown_path();
        let open_err = |message: String| SourceError::Open {
            path: shown.clone(),
            source: message.into(),
        };
        let wanted = spec.data_layers().map_err(&open_err)?;
        if spec.max_connections == 0 {
            return Err(open_err("max_connections must be at least 1".into()));
        }
        if spec.mvt.extent == 0 || spec.mvt.buffer > spec.mvt.extent {
            return Err(open_err(
                "mvt.extent must be at least 1 and mvt.buffer at most the extent".into(),
            ));
        }
        let gdal_path = spec.gdal_path();
        let ds = open_vector(&gdal_path, &shown)?;
        pool::reset_gdal_error();
        let names: Vec<String> = ds.layers().map(|l| l.name()).collect();
        // Listing a database's tables is a query: a statement timeout or a
        // lost connection shows as no layers, and GDAL's error says why.
        if let Some(failure) = pool::gdal_failure() {
            return Err(open_err(format!(
                "listing its layers failed: {failure} (is statement_timeout_ms too small for the \
                 database's catalogue?)"
            )));
        }
        let lonlat = Crs::parse("OGC:CRS84")?;
        let mut layers = Vec::with_capacity(wanted.len());
        let mut report = Vec::new();
        let mut lonlat_bounds: Option<BBox> = None;
        for want in &wanted {
            style::check_rules(&want.style).map_err(&open_err)?;
            let layer_name = match &want.layer {
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
            let available: Vec<(String, OGRFieldType::Type)> = layer
                .defn()
                .fields()
                .map(|f| (f.name(), f.field_type()))
                .collect();
            let style_fields = style::fields_used(&want.style);
            let mut fields = Vec::with_capacity(want.fields.len());
            for f in want.fields.iter().chain(&style_fields) {
                let Some((_, kind)) = available.iter().find(|(n, _)| n == f) else {
                    let all: Vec<String> = available.iter().map(|(n, _)| n.clone()).collect();
                    return Err(open_err(format!(
                        "layer {layer_name:?} has no field {f:?}; its fields: {}",
                        list(&all)
                    )));
                };
                if want.fields.contains(f) && !fields.iter().any(|(n, _)| n == f) {
                    fields.push((f.clone(), field_kind(*kind)));
                }
            }
            let info_fields = if want.fields.is_empty() {
                available
                    .iter()
                    .filter(|(_, kind)| *kind != OGRFieldType::OFTBinary)
                    .map(|(n, _)| n.clone())
                    .collect()
            } else {
                want.fields.clone()
            };
            let srs = layer.spatial_ref().ok_or_else(|| {
                open_err(format!(
                    "layer {layer_name:?} has no coordinate reference system"
                ))
            })?;
            let wkt = srs
                .to_wkt()
                .map_err(|e| open_err(format!("its CRS cannot be read: {e}")))?;
            let crs = Crs::from_wkt(&wkt)?;
            pool::reset_gdal_error();
            let extent = layer.get_extent().map_err(|e| {
                // The database's own words first: a statement cancelled by
                // `statement_timeout_ms` is no empty table.
                match pool::gdal_failure() {
                    Some(why)
                        if why.contains("statement timeout")
                            || why.contains("canceling statement") =>
                    {
                        open_err(format!(
                            "layer {layer_name:?}: the query of its extent timed out ({}); \
                             raise statement_timeout_ms",
                            why.trim()
                        ))
                    }
                    Some(why) => open_err(format!(
                        "layer {layer_name:?}: its extent cannot be read: {}",
                        why.trim()
                    )),
                    None => open_err(format!(
                        "layer {layer_name:?} has no extent (is it empty?): {e}"
                    )),
                }
            })?;
            let bounds = extent_bbox(&extent, &crs)
                .map_err(|e| open_err(format!("layer {layer_name:?} has a bad extent: {e}")))?;
            let ll = crs.transform_bbox(&bounds, &lonlat)?;
            lonlat_bounds = Some(lonlat_bounds.map_or(ll, |b| b.union(&ll)));
            let count = layer.feature_count();
            // SAFETY: a valid layer handle; the call only reads its definition.
            let geometry = unsafe { gdal_sys::OGR_L_GetGeomType(layer.c_layer()) };
            // The filter last: the extent and count above are the table's,
            // and a costly `where` is paid by reads, under their timeout.
            if let Some(w) = &want.filter {
                layer.set_attribute_filter(w).map_err(|e| {
                    open_err(format!(
                        "where {w:?} is not valid for layer {layer_name:?}: {e}"
                    ))
                })?;
            }
            let table = if spec.is_postgres() && spec.mvt.in_database {
                mvt::PgTable::of(&layer, &crs)
            } else {
                None
            };
            let name = want.name.clone().unwrap_or_else(|| layer_name.clone());
            if layers.iter().any(|l: &DataLayer| l.name == name) {
                return Err(open_err(format!(
                    "two layers are named {name:?}; give them distinct `name`s"
                )));
            }
            // The fields tiles carry, not every column of the table.
            let served = if fields.is_empty() {
                format!(
                    "none (of {} columns; list them under `fields:`)",
                    available.len()
                )
            } else {
                list(
                    &fields
                        .iter()
                        .map(|(n, kind)| format!("{n} ({kind})"))
                        .collect::<Vec<_>>(),
                )
            };
            report.push(format!(
                "layer {layer_name:?}{}: {count} features ({}), CRS {}, extent [{:.4}, {:.4}, \
                 {:.4}, {:.4}] (lon/lat), served fields: {served}",
                if name == layer_name {
                    String::new()
                } else {
                    format!(" as {name:?}")
                },
                geometry_type_to_name(geometry),
                crs.id,
                ll.min_x,
                ll.min_y,
                ll.max_x,
                ll.max_y,
            ));
            layers.push(DataLayer {
                name,
                layer: layer_name,
                filter: want.filter.clone(),
                fields,
                info_fields,
                style: want.style.clone(),
                style_fields,
                min_zoom: want.min_zoom.unwrap_or(0),
                max_zoom: want.max_zoom,
                crs,
                geometry,
                table,
                available: available.iter().map(|(n, _)| n.clone()).collect(),
                admit: None,
            });
        }
        let lonlat_bounds = lonlat_bounds.ok_or_else(|| open_err("no layers".into()))?;
        let native_crs = layers[0].crs.clone();
        let native_bounds = lonlat.transform_bbox(&lonlat_bounds, &native_crs)?;
        let info = SourceInfo {
            band_count: 3,
            is_byte: true,
            native_crs,
            native_bounds,
            lonlat_bounds,
            // Vector data has no resolution of its own: fine enough for
            // zoom 24 of its extent.
            native_resolution: native_bounds.width().max(native_bounds.height())
                / f64::from(1u32 << 24),
        };
        let (opened_path, opened_shown) = (gdal_path, shown.clone());
        let pool = std::sync::Arc::new(Pool::new(
            Some(ds),
            Box::new(move || open_vector(&opened_path, &opened_shown)),
            shown.clone(),
            spec.max_connections,
            spec.statement_timeout_ms,
            spec.is_postgres(),
        ));
        let native = layers.iter().any(|l| l.table.is_some());
        let tiles = pg::config(spec).filter(|_| native).map(|config| {
            let shown_here = shown.clone();
            std::sync::Arc::new(Pool::new(
                None,
                Box::new(move || pg::connect(&config, &shown_here)),
                shown.clone(),
                spec.max_connections,
                spec.statement_timeout_ms,
                true,
            ))
        });
        let maplibre = match &spec.maplibre {
            None => None,
            Some(m) => {
                let names: Vec<&str> = layers.iter().map(|l| l.name.as_str()).collect();
                let style = maplibre::MapLibreStyle::read(m, &names)
                    .map_err(|e| open_err(format!("MapLibre style: {e}")))?;
                if !style.unsupported.is_empty() {
                    // Once, at start: what the document has that is not drawn.
                    tracing::warn!(
                        source = %shown,
                        "MapLibre style: not drawn: {}",
                        style.unsupported.join("; ")
                    );
                    report.extend(
                        style
                            .unsupported
                            .iter()
                            .map(|u| format!("MapLibre style: not drawn: {u}")),
                    );
                }
                Some(std::sync::Arc::new(style))
            }
        };
        let source = VectorSource {
            spec: spec.clone(),
            shown,
            layers,
            info,
            pool,
            tiles,
            report,
            maplibre,
            contours: None,
        };
        match &spec.value_filter {
            Some(filter) => source.at_values(filter.clone()),
            None => Ok(source),
        }
    }

    /// The contour lines of `spec`'s DEM (`spec.contours`, from a `type:
    /// contours` source) as one data layer, `contours`, with the
    /// attributes `ele` and `level`: the DEM opened with `gdal`'s
    /// settings, the numbers and the style checked.
    pub fn contours(
        spec: &VectorSpec,
        gdal: &crate::GdalSettings,
    ) -> Result<VectorSource, SourceError> {
        let Some(lines) = spec.contours.as_deref() else {
            return VectorSource::open(spec);
        };
        let shown = lines.dem.path.clone();
        let open_err = |message: String| SourceError::Open {
            path: shown.clone(),
            source: message.into(),
        };
        style::check_rules(&lines.style).map_err(&open_err)?;
        let style_fields = style::fields_used(&lines.style);
        if let Some(other) = style_fields
            .iter()
            .find(|f| !CONTOUR_FIELDS.contains(&f.as_str()))
        {
            return Err(open_err(format!(
                "contours: the style reads {other:?}; contour lines have `ele` and `level`"
            )));
        }
        let dem: std::sync::Arc<dyn Source> =
            std::sync::Arc::new(crate::GdalSource::open(&lines.dem, gdal)?);
        let generator = contours::Contours::new(dem, lines.clone()).map_err(&open_err)?;
        let dem_info = generator.dem().info().clone();
        let fields: Vec<(String, &'static str)> = CONTOUR_FIELDS
            .iter()
            .map(|f| ((*f).to_string(), "Number"))
            .collect();
        let names: Vec<String> = fields.iter().map(|(n, _)| n.clone()).collect();
        let layer = DataLayer {
            name: CONTOUR_LAYER.into(),
            layer: CONTOUR_LAYER.into(),
            filter: None,
            fields,
            info_fields: names.clone(),
            style: lines.style.clone(),
            style_fields,
            min_zoom: lines.min_zoom(),
            max_zoom: None,
            crs: dem_info.native_crs.clone(),
            geometry: OGRwkbGeometryType::wkbMultiLineString,
            table: None,
            available: names,
            admit: None,
        };
        let report = vec![format!(
            "contour lines of {shown:?}: every {} {:?} (zooms {:?}), major every {}",
            lines.interval,
            lines.units,
            lines.zooms,
            lines.major.unwrap_or(lines.interval * 5.0)
        )];
        let no_dataset = shown.clone();
        Ok(VectorSource {
            spec: spec.clone(),
            shown: shown.clone(),
            layers: vec![layer],
            info: SourceInfo {
                band_count: 3,
                is_byte: true,
                ..dem_info
            },
            pool: std::sync::Arc::new(Pool::new(
                None,
                Box::new(move || {
                    Err(SourceError::Open {
                        path: no_dataset.clone(),
                        source: "contour lines are made from a DEM and have no dataset".into(),
                    })
                }),
                shown,
                1,
                spec.statement_timeout_ms,
                false,
            )),
            tiles: None,
            report,
            maplibre: None,
            contours: Some(std::sync::Arc::new(generator)),
        })
    }

    /// The features of `dl` in `window` with the attributes `fields`, and
    /// the CRS their geometries are in: the dataset's, in the layer's CRS,
    /// or contour lines made on the asking map's pixels, in its CRS.
    fn read_features(
        &self,
        dl: &DataLayer,
        window: &FeatureWindow<'_>,
        fields: &[String],
        cancel: Option<&std::sync::atomic::AtomicBool>,
    ) -> Result<(Features, Crs), SourceError> {
        match &self.contours {
            Some(lines) => {
                let zoom = zoom_of(window.resolution.0, window.crs);
                let levels = lines.levels(
                    &window.bbox,
                    window.crs,
                    window.resolution,
                    zoom,
                    window.tile.as_ref(),
                    cancel,
                )?;
                Ok((contours::features(levels, fields), window.crs.clone()))
            }
            None => {
                let features = self
                    .pool
                    .with_handle(|ds| self.features(ds, dl, &window.layer_bbox, fields, cancel))?;
                Ok((features, dl.crs.clone()))
            }
        }
    }

    /// The same layers drawing only the features `filter` admits: the
    /// source of a layer at a dimension value (or a range of values). It
    /// shares this source's connections; PostgreSQL filters (and cuts
    /// tiles of) the features, files are filtered as they are read. Fails
    /// when a data layer lacks the field.
    pub fn at_values(&self, filter: ValueFilter) -> Result<VectorSource, SourceError> {
        let admit = filter.admit().map_err(|e| self.read_err(e))?;
        let mut layers = self.layers.clone();
        for dl in &mut layers {
            if !dl.available.contains(&filter.field) {
                return Err(SourceError::Open {
                    path: self.shown.clone(),
                    source: format!(
                        "layer {:?} has no field {:?}; its fields: {}",
                        dl.layer,
                        filter.field,
                        list(&dl.available)
                    )
                    .into(),
                });
            }
            if self.spec.is_postgres() {
                let condition = filter.sql();
                dl.filter = Some(match &dl.filter {
                    Some(w) => format!("({w}) AND ({condition})"),
                    None => condition,
                });
            } else {
                dl.admit = Some((filter.field.clone(), admit.clone()));
            }
        }
        let mut spec = self.spec.clone();
        spec.value_filter = Some(filter);
        Ok(VectorSource {
            spec,
            shown: self.shown.clone(),
            layers,
            info: self.info.clone(),
            pool: self.pool.clone(),
            tiles: self.tiles.clone(),
            report: self.report.clone(),
            maplibre: self.maplibre.clone(),
            contours: self.contours.clone(),
        })
    }

    /// The distinct values of `field` over the data layers, as text (times
    /// in ISO 8601), sorted as text; more than `most` is an error.
    pub fn distinct_values(&self, field: &str, most: usize) -> Result<Vec<String>, SourceError> {
        let mut all = std::collections::BTreeSet::new();
        for dl in &self.layers {
            let found = self.pool.with_handle(|ds| {
                values::distinct(ds, &dl.layer, field, most).map_err(|e| self.read_err(e))
            })?;
            all.extend(found);
        }
        Ok(all.into_iter().collect())
    }

    fn read_err(&self, message: String) -> SourceError {
        SourceError::Read {
            path: self.shown.clone(),
            source: message.into(),
        }
    }

    /// Features of `dl` in `bbox` (the layer's CRS) with the attributes
    /// `fields`, as geometries in the layer's CRS.
    fn features(
        &self,
        ds: &Dataset,
        dl: &DataLayer,
        bbox: &BBox,
        fields: &[String],
        cancel: Option<&std::sync::atomic::AtomicBool>,
    ) -> Result<Features, SourceError> {
        let mut layer = ds
            .layer_by_name(&dl.layer)
            .map_err(|e| self.read_err(format!("layer {:?}: {e}", dl.layer)))?;
        if let Some(w) = &dl.filter {
            layer
                .set_attribute_filter(w)
                .map_err(|e| self.read_err(format!("where {w:?}: {e}")))?;
        }
        layer.set_spatial_filter_rect(bbox.min_x, bbox.min_y, bbox.max_x, bbox.max_y);
        let indexes: Vec<Option<usize>> = fields
            .iter()
            .map(|f| layer.defn().field_index(f).ok())
            .collect();
        let admit = dl
            .admit
            .as_ref()
            .map(|(field, admit)| (layer.defn().field_index(field).ok(), admit));
        pool::reset_gdal_error();
        let mut out = Vec::new();
        for feature in layer.features() {
            if out.len() as u64 >= self.spec.max_features {
                return Err(VectorError::TooManyFeatures {
                    layer: dl.name.clone(),
                    limit: self.spec.max_features,
                }
                .into());
            }
            if out.len() % 1024 == 0 && cancelled(cancel) {
                return Err(SourceError::Cancelled);
            }
            if let Some((index, admit)) = &admit {
                let value = index.and_then(|i| feature.field(i).ok().flatten());
                if !admit.admits(value.as_ref()) {
                    continue;
                }
            }
            let Some(geometry) = feature.geometry() else {
                continue;
            };
            let attributes = indexes
                .iter()
                .map(|i| i.and_then(|i| feature.field(i).ok().flatten()))
                .collect();
            out.push((attributes, geometry.clone()));
        }
        // An error while iterating ends the iteration like its end does: a
        // lost connection or a statement timeout is told by GDAL's error
        // state.
        self.pool.check_gdal_error("reading features failed")?;
        Ok(out)
    }

    /// The vector tile `coord` of `grid`, gzip-compressed (as MBTiles and
    /// PMTiles keep them; [`tessera_grid::EMPTY_MVT`] when no feature
    /// reaches the tile): every
    /// data layer the zoom holds, cut by the database (`ST_AsMVT`) where it
    /// can, else here.
    fn mvt_tile(
        &self,
        grid: &TileMatrixSet,
        coord: TileCoord,
        cancel: Option<&std::sync::atomic::AtomicBool>,
    ) -> Result<bytes::Bytes, SourceError> {
        let crs = Crs::parse(&grid.crs)?;
        let frame = mvt::Frame::new(grid, coord, &crs, self.spec.mvt);
        let layers: Vec<&DataLayer> = self
            .layers
            .iter()
            .filter(|l| coord.z() >= l.min_zoom && l.max_zoom.is_none_or(|m| coord.z() <= m))
            .collect();
        if layers.is_empty() {
            return Ok(mvt::gzip(&[]));
        }
        let in_database: Option<Vec<(&DataLayer, &mvt::PgTable)>> = layers
            .iter()
            .map(|l| l.table.as_ref().map(|t| (*l, t)))
            .collect();
        if let (Some(tables), Some(srid)) = (in_database, frame.srid()) {
            let most = self.spec.max_features;
            let (raw, rows) = if let Some(native) = &self.tiles {
                let sql =
                    mvt::tile_sql(&tables, self.spec.mvt, srid, &mvt::Bounds::Parameters, most);
                let params = frame.params();
                native.with_handle(|c| pg::tile(c, &sql, &params, &self.shown))?
            } else {
                let sql = mvt::tile_sql(
                    &tables,
                    self.spec.mvt,
                    srid,
                    &mvt::Bounds::Literal(&frame),
                    most,
                );
                self.pool
                    .with_handle(|ds| mvt::run_tile_sql(ds, &sql, &self.pool))?
            };
            if rows > most {
                let names: Vec<&str> = tables.iter().map(|(dl, _)| dl.name.as_str()).collect();
                return Err(VectorError::TooManyFeatures {
                    layer: names.join(","),
                    limit: most,
                }
                .into());
            }
            return Ok(mvt::gzip(&raw));
        }
        let mut out = Vec::new();
        let tile = grid.tile_bbox(coord);
        let resolution = (
            tile.width() / f64::from(grid.tile_width),
            tile.height() / f64::from(grid.tile_height),
        );
        for dl in layers {
            let bbox = frame.buffered_bbox();
            let Ok(layer_bbox) = crs.transform_bbox(&bbox, &dl.crs) else {
                continue;
            };
            let names: Vec<String> = dl.fields.iter().map(|(n, _)| n.clone()).collect();
            let window = FeatureWindow {
                layer_bbox,
                crs: &crs,
                bbox,
                resolution,
                tile: Some(tile),
            };
            let (features, from) = self.read_features(dl, &window, &names, cancel)?;
            if cancelled(cancel) {
                return Err(SourceError::Cancelled);
            }
            mvt::encode_layer(&mut out, &dl.name, &names, features, &from, &frame)?;
        }
        Ok(mvt::gzip(&out))
    }

    /// Draws `dl`'s features that its rules at `zoom` select, and adds
    /// their labels to `labels` (placed once every layer is drawn).
    fn draw_layer<'a>(
        &self,
        canvas: &mut Canvas,
        dl: &'a DataLayer,
        req: &WindowRequest<'_>,
        zoom: f64,
        labels: &mut Vec<label::Candidate<'a>>,
    ) -> Result<(), SourceError> {
        let rules: Vec<&Rule> = dl.style.iter().filter(|r| r.draws_at(zoom)).collect();
        if rules.is_empty() {
            return Ok(());
        }
        let res_x = req.bbox.width() / f64::from(req.width);
        let res_y = req.bbox.height() / f64::from(req.height);
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
        let Ok(layer_bbox) = req.crs.transform_bbox(&grown, &dl.crs) else {
            return Ok(());
        };
        let window = FeatureWindow {
            layer_bbox,
            crs: req.crs,
            bbox: grown,
            resolution: (res_x, res_y),
            tile: None,
        };
        let (features, from) = self.read_features(dl, &window, &dl.style_fields, req.cancel)?;
        let projector = Projector {
            from: &from,
            req,
            res_x,
            res_y,
        };
        let within = label_area(req);
        for (n, (values, geometry)) in features.into_iter().enumerate() {
            if n % 1024 == 1023 && cancelled(req.cancel) {
                return Err(SourceError::Cancelled);
            }
            let attributes: Vec<Attribute> = values.into_iter().map(attribute).collect();
            let mut parts = Parts::new();
            split(&geometry, &|g, ring| projector.ring(g, ring), &mut parts)?;
            let Parts {
                points,
                lines,
                polygons,
            } = parts;
            for rule in &rules {
                let passes = rule.filter.as_ref().is_none_or(|f| {
                    let at = dl.style_fields.iter().position(|n| *n == f.field);
                    at.is_some_and(|i| f.matches(&attributes[i]))
                });
                if !passes {
                    continue;
                }
                if let Some(l) = rule.label.as_ref().filter(|l| l.draws_at(zoom)) {
                    labels.extend(label_candidate(
                        l,
                        within,
                        dl,
                        &attributes,
                        &points,
                        &lines,
                        &polygons,
                    ));
                }
                if !rule.has_symbols() {
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
        Ok(())
    }
}

/// The label `style` gives a feature (its `attributes`, in the order of
/// `dl.style_fields`) of these parts: on its first point, at the pole of
/// its polygons, or along its longest line; `None` without text or room.
fn label_candidate<'a>(
    style: &'a label::Label,
    within: [f32; 4],
    dl: &DataLayer,
    attributes: &[Attribute],
    points: &[(f32, f32)],
    lines: &[Vec<(f32, f32)>],
    polygons: &[Vec<Vec<(f32, f32)>>],
) -> Option<label::Candidate<'a>> {
    let value = |name: &str| {
        dl.style_fields
            .iter()
            .position(|n| n == name)
            .map(|i| &attributes[i])
    };
    let text = style.text_of(value)?;
    let priority = match &style.priority {
        Some(label::Priority::Value(v)) => *v,
        Some(label::Priority::Field(f)) => match value(f) {
            Some(Attribute::Number(n)) => *n,
            Some(Attribute::Text(t)) => t.parse().unwrap_or(f64::MIN),
            _ => f64::MIN,
        },
        None => f64::MIN,
    };
    let anchor = if let Some(&(x, y)) = points.first() {
        label::Anchor::Point(x, y)
    } else if !polygons.is_empty() {
        label::polygon_anchor(polygons, style.size / 2.0, within)?
    } else {
        let longest = lines
            .iter()
            .max_by(|a, b| line_length(a).total_cmp(&line_length(b)))?;
        label::Anchor::Line(longest.clone())
    };
    Some(label::Candidate {
        style: std::borrow::Cow::Borrowed(style),
        text,
        priority,
        anchor,
    })
}

/// Where a window's labels may lie: the window but its margin (a
/// metatile's gutter), left, top, right, bottom in pixels.
fn label_area(req: &WindowRequest<'_>) -> [f32; 4] {
    #[allow(
        clippy::cast_precision_loss,
        reason = "window sizes are far below 2^24"
    )]
    let (margin, width, height) = (
        req.tile_rows.map_or(0, |r| r.margin()) as f32,
        req.width as f32,
        req.height as f32,
    );
    [margin, margin, width - margin, height - margin]
}

/// The length of a line in pixels.
fn line_length(line: &[(f32, f32)]) -> f32 {
    line.windows(2)
        .map(|w| (w[1].0 - w[0].0).hypot(w[1].1 - w[0].1))
        .sum()
}

/// The Web Mercator zoom level (fractional) of a map of `resolution`
/// units of `crs` per pixel: style rules' zooms are measured so.
fn zoom_of(resolution: f64, crs: &Crs) -> f64 {
    (ZOOM0_METERS_PER_PIXEL / (resolution * crs.meters_per_unit)).log2()
}

fn cancelled(cancel: Option<&std::sync::atomic::AtomicBool>) -> bool {
    cancel.is_some_and(|c| c.load(std::sync::atomic::Ordering::Acquire))
}

fn list(names: &[String]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

/// A field's type as TileJSON's `vector_layers` names it.
fn field_kind(kind: OGRFieldType::Type) -> &'static str {
    match kind {
        OGRFieldType::OFTInteger | OGRFieldType::OFTInteger64 | OGRFieldType::OFTReal => "Number",
        _ => "String",
    }
}

fn attribute(v: Option<FieldValue>) -> Attribute {
    match v {
        Some(FieldValue::IntegerValue(i)) => Attribute::Number(f64::from(i)),
        Some(FieldValue::Integer64Value(i)) => Attribute::Number(i as f64),
        Some(FieldValue::RealValue(r)) => Attribute::Number(r),
        Some(FieldValue::StringValue(s)) => Attribute::Text(s),
        Some(FieldValue::DateValue(d)) => Attribute::Text(d.to_string()),
        Some(FieldValue::DateTimeValue(d)) => Attribute::Text(d.to_string()),
        _ => Attribute::Null,
    }
}

/// A layer's extent as a box; one of no width or height (a single point,
/// a north-south line) grown by a millimetre (1e-8 degrees in a
/// geographic CRS) on each side, so a table of one point is a layer like
/// any other.
fn extent_bbox(
    extent: &gdal::vector::Envelope,
    crs: &Crs,
) -> Result<BBox, tessera_grid::GridError> {
    let pad = if crs.geographic {
        1e-8
    } else {
        1e-3 / crs.meters_per_unit.max(1e-9)
    };
    let grow = |lo: f64, hi: f64| {
        if hi > lo {
            (lo, hi)
        } else {
            (lo - pad, hi + pad)
        }
    };
    let (min_x, max_x) = grow(extent.MinX, extent.MaxX);
    let (min_y, max_y) = grow(extent.MinY, extent.MaxY);
    BBox::new(min_x, min_y, max_x, max_y)
}

/// An attribute's value as feature info shows it: text cut after
/// `max_chars` characters (with `…`), lists as arrays.
fn json_value(v: Option<FieldValue>, max_chars: usize) -> serde_json::Value {
    let number = |r: f64| {
        serde_json::Number::from_f64(r).map_or(serde_json::Value::Null, serde_json::Value::Number)
    };
    let text = |s: String| -> serde_json::Value {
        match s.char_indices().nth(max_chars) {
            Some((at, _)) => format!("{}…", &s[..at]).into(),
            None => s.into(),
        }
    };
    match v {
        Some(FieldValue::IntegerValue(i)) => i.into(),
        Some(FieldValue::Integer64Value(i)) => i.into(),
        Some(FieldValue::RealValue(r)) => number(r),
        Some(FieldValue::StringValue(s)) => text(s),
        Some(FieldValue::DateValue(d)) => d.to_string().into(),
        Some(FieldValue::DateTimeValue(d)) => d.to_string().into(),
        Some(FieldValue::IntegerListValue(l)) => l.into(),
        Some(FieldValue::Integer64ListValue(l)) => l.into(),
        Some(FieldValue::RealListValue(l)) => l.into_iter().map(number).collect(),
        Some(FieldValue::StringListValue(l)) => l.into_iter().map(text).collect(),
        None => serde_json::Value::Null,
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
        source: spec::redact(&e.to_string()).into(),
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
}

/// A geometry's parts by kind: points, lines, and polygons as lists of
/// rings (exterior first).
struct Parts<P> {
    points: Vec<P>,
    lines: Vec<Vec<P>>,
    polygons: Vec<Vec<Vec<P>>>,
}

impl<P> Parts<P> {
    fn new() -> Parts<P> {
        Parts {
            points: Vec::new(),
            lines: Vec::new(),
            polygons: Vec::new(),
        }
    }
}

/// Adds `g`'s parts to `parts`, each point list as `coords` maps it (told
/// whether it is a polygon ring); empty lists are dropped. Collections are
/// walked into their members, and curves go as GDAL linearises them.
fn split<P>(
    g: &Geometry,
    coords: &impl Fn(&Geometry, bool) -> Result<Vec<P>, SourceError>,
    parts: &mut Parts<P>,
) -> Result<(), SourceError> {
    use OGRwkbGeometryType as T;
    match geometry_type_flatten(g.geometry_type()) {
        T::wkbPoint => parts.points.extend(coords(g, false)?),
        T::wkbLineString => {
            let l = coords(g, false)?;
            if !l.is_empty() {
                parts.lines.push(l);
            }
        }
        T::wkbPolygon => {
            let mut rings = Vec::with_capacity(g.geometry_count());
            for i in 0..g.geometry_count() {
                let r = coords(&g.get_geometry(i), true)?;
                if !r.is_empty() {
                    rings.push(r);
                }
            }
            if !rings.is_empty() {
                parts.polygons.push(rings);
            }
        }
        T::wkbMultiPoint
        | T::wkbMultiLineString
        | T::wkbMultiPolygon
        | T::wkbGeometryCollection => {
            for i in 0..g.geometry_count() {
                split(&g.get_geometry(i), coords, parts)?;
            }
        }
        _ => {
            if let Some(linear) = linearised(g) {
                split(&linear, coords, parts)?;
            }
        }
    }
    Ok(())
}

/// A curved geometry (circular strings, compound curves, curve polygons)
/// as GDAL approximates it with straight segments; `None` when GDAL has no
/// linear form of it.
fn linearised(g: &Geometry) -> Option<Geometry> {
    // SAFETY: `g` is a valid geometry; the call returns a new geometry
    // owned by the caller, or null.
    let linear =
        unsafe { gdal_sys::OGR_G_GetLinearGeometry(g.c_geometry(), 0.0, std::ptr::null_mut()) };
    if linear.is_null() {
        return None;
    }
    let linear = take_geometry(linear);
    // SAFETY: a plain function of the type code.
    let still_curved = unsafe { gdal_sys::OGR_GT_IsNonLinear(linear.geometry_type()) } != 0;
    (!still_curved).then_some(linear)
}

/// An owned [`Geometry`] of a new, non-null geometry GDAL returned (the
/// handle is destroyed; the value is a copy).
fn take_geometry(handle: gdal_sys::OGRGeometryH) -> Geometry {
    // SAFETY: `handle` is a valid geometry owned by the caller; the view
    // does not own it, the clone is owned, and the handle is destroyed
    // once, after the clone and before anything else refers to it.
    unsafe {
        let view = Geometry::lazy_feature_geometry();
        view.set_c_geometry(handle);
        let owned = view.clone();
        drop(view);
        gdal_sys::OGR_G_DestroyGeometry(handle);
        owned
    }
}

impl Source for VectorSource {
    fn info(&self) -> &SourceInfo {
        &self.info
    }

    /// The field's distinct values (at most `most`).
    fn listed_values(&self, _name: &str, field: Option<&str>, most: usize) -> Found<Listed> {
        let field = field?;
        Some(self.distinct_values(field, most).map(Listed::Values))
    }

    fn takes_value(&self, _name: &str) -> bool {
        true
    }

    /// The features whose field lies in the value's range (one dimension,
    /// with its field).
    fn at_values(&self, values: &[AskedValue]) -> Found<std::sync::Arc<dyn Source>> {
        let [value] = values else {
            return Some(Err(self.read_err(
                "a vector source filters its features by one dimension".into(),
            )));
        };
        let Some(field) = &value.field else {
            return Some(Err(self.read_err(format!(
                "dimension {:?} names no field to filter by (from_field)",
                value.name
            ))));
        };
        let filter = ValueFilter {
            field: field.clone(),
            kind: value.kind,
            from: value.from.clone(),
            to: value.to.clone(),
        };
        Some(
            self.at_values(filter)
                .map(|at| std::sync::Arc::new(at) as std::sync::Arc<dyn Source>),
        )
    }

    fn report(&self) -> Vec<String> {
        self.report.clone()
    }

    fn read(&self, req: &WindowRequest<'_>) -> Result<Raster, SourceError> {
        let mut canvas = Canvas::new(req.width, req.height).ok_or(SourceError::TooLarge {
            width: req.width,
            height: req.height,
        })?;
        let zoom = zoom_of(req.bbox.width() / f64::from(req.width), req.crs);
        let mut labels = Vec::new();
        match &self.maplibre {
            Some(style) => labels = self.draw_maplibre(style, &mut canvas, req, zoom)?,
            None => {
                for dl in &self.layers {
                    if cancelled(req.cancel) {
                        return Err(SourceError::Cancelled);
                    }
                    self.draw_layer(&mut canvas, dl, req, zoom, &mut labels)?;
                }
            }
        }
        if cancelled(req.cancel) {
            return Err(SourceError::Cancelled);
        }
        if !labels.is_empty() {
            // A metatile's labels stay off its gutter (its neighbours').
            let margin = req.tile_rows.map_or(0, |r| r.margin());
            #[allow(
                clippy::cast_precision_loss,
                reason = "a gutter is at most a few hundred pixels"
            )]
            let placed = canvas.place_labels(labels, margin as f32);
            for p in &placed {
                tracing::debug!(
                    target: "tessera::labels",
                    text = %p.text,
                    boxes = ?p.boxes,
                    width = req.width,
                    height = req.height,
                    margin,
                    "label placed"
                );
            }
        }
        Ok(canvas.into_raster())
    }

    fn passthrough(
        &self,
        grid: &TileMatrixSet,
        coord: TileCoord,
        format: TileFormat,
        cancel: Option<&std::sync::atomic::AtomicBool>,
    ) -> Option<Result<Option<bytes::Bytes>, SourceError>> {
        format
            .is_vector()
            .then(|| self.mvt_tile(grid, coord, cancel).map(Some))
    }

    fn as_features(&self) -> Option<&dyn FeatureSource> {
        Some(self)
    }

    fn style_rules(&self) -> Vec<(String, Vec<Rule>)> {
        self.layers
            .iter()
            .map(|l| (l.name.clone(), l.style.clone()))
            .collect()
    }
}

impl FeatureSource for VectorSource {
    /// A layer whose style draws nothing at that scale is not queried (a
    /// layer without a style is).
    fn features_at(
        &self,
        point: (f64, f64),
        crs: &Crs,
        resolution: f64,
        tolerance: f64,
        limit: usize,
    ) -> Result<Vec<FoundFeature>, SourceError> {
        let zoom = zoom_of(resolution, crs);
        let probe = BBox::new(
            point.0 - tolerance,
            point.1 - tolerance,
            point.0 + tolerance,
            point.1 + tolerance,
        )
        .map_err(|e| self.read_err(e.to_string()))?;
        let mut found = Vec::new();
        // Topmost first: layers are drawn in order, so the last is on top.
        for dl in self.layers.iter().rev() {
            if !dl.style.is_empty() && !dl.style.iter().any(|r| r.draws_at(zoom)) {
                continue;
            }
            let Ok(layer_bbox) = crs.transform_bbox(&probe, &dl.crs) else {
                continue;
            };
            let names = &dl.info_fields;
            let window = FeatureWindow {
                layer_bbox,
                crs,
                bbox: probe,
                resolution: (resolution, resolution),
                tile: None,
            };
            let (features, from) = self.read_features(dl, &window, names, None)?;
            // The probe in the features' CRS.
            let area = if from == dl.crs { layer_bbox } else { probe };
            let mut area = Geometry::bbox(area.min_x, area.min_y, area.max_x, area.max_y)
                .map_err(|e| self.read_err(e.to_string()))?;
            area.flatten_to_2d();
            for (values, geometry) in features {
                if found.len() >= limit {
                    return Ok(found);
                }
                if !geometry.intersects(&area) {
                    continue;
                }
                found.push(FoundFeature {
                    layer: dl.name.clone(),
                    attributes: names
                        .iter()
                        .cloned()
                        .zip(
                            values
                                .into_iter()
                                .map(|v| json_value(v, self.spec.info_max_chars)),
                        )
                        .collect(),
                });
            }
        }
        Ok(found)
    }

    fn vector_layers(&self) -> Vec<VectorLayerInfo> {
        self.layers
            .iter()
            .map(|l| VectorLayerInfo {
                name: l.name.clone(),
                fields: l.fields.clone(),
                min_zoom: l.min_zoom,
                max_zoom: l.max_zoom,
                geometry: geometry_type_to_name(l.geometry),
            })
            .collect()
    }

    fn rule_count(&self) -> usize {
        // Rules that draw only labels have no legend symbol.
        self.layers
            .iter()
            .map(|l| l.style.iter().filter(|r| r.has_symbols()).count())
            .sum()
    }

    fn legend(&self, size: u32) -> Vec<LegendSymbol> {
        /// The legend symbol drawn for an OGR geometry type.
        fn symbol_kind(geometry: OGRwkbGeometryType::Type) -> draw::SymbolKind {
            use OGRwkbGeometryType as T;
            match geometry_type_flatten(geometry) {
                T::wkbPoint | T::wkbMultiPoint => draw::SymbolKind::Point,
                T::wkbLineString
                | T::wkbMultiLineString
                | T::wkbCircularString
                | T::wkbCompoundCurve
                | T::wkbMultiCurve => draw::SymbolKind::Line,
                _ => draw::SymbolKind::Area,
            }
        }
        let mut out = Vec::new();
        for dl in &self.layers {
            for rule in dl.style.iter().filter(|r| r.has_symbols()) {
                if let Some(symbol) = draw::symbol(rule, symbol_kind(dl.geometry), size) {
                    out.push(LegendSymbol {
                        layer: dl.name.clone(),
                        label: rule.label(),
                        symbol,
                    });
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curves_are_split_as_their_linear_approximations() {
        let coords = |g: &Geometry, _ring: bool| -> Result<Vec<(f64, f64)>, SourceError> {
            let mut pts = Vec::new();
            g.get_points(&mut pts);
            Ok(pts.into_iter().map(|p| (p.0, p.1)).collect())
        };
        let mut parts = Parts::new();
        let arc = Geometry::from_wkt("CIRCULARSTRING (0 0, 1 1, 2 0)").unwrap();
        split(&arc, &coords, &mut parts).unwrap();
        assert_eq!(parts.lines.len(), 1);
        assert!(
            parts.lines[0].len() > 3,
            "the arc is approximated by segments"
        );
        let disc = Geometry::from_wkt("CURVEPOLYGON (CIRCULARSTRING (0 0, 2 0, 0 0))").unwrap();
        split(&disc, &coords, &mut parts).unwrap();
        assert_eq!(parts.polygons.len(), 1);
        let collection =
            Geometry::from_wkt("GEOMETRYCOLLECTION (POINT (1 2), LINESTRING (0 0, 1 1))").unwrap();
        split(&collection, &coords, &mut parts).unwrap();
        assert_eq!((parts.points.len(), parts.lines.len()), (1, 2));
    }
}
