//! The layer model: what a layer is (its source, style, grids and cache),
//! the grids it is tiled in, and the key each of its tiles is stored and
//! locked under.
//!
//! A leaf: it imports nothing of the server but [`crate::metatile`], so
//! every part that works with layers (the tile cache, the renderer, the
//! protocols, batch plans) can use it without the configuration or the
//! building of layers from it ([`crate::assemble`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tessera_grid::{BBox, TileCoord, TileFormat, TileMatrixSet};
use tessera_image::{ColorRamp, Style};
use tessera_source::{Crs, Source};
use tessera_store::cluster::Coordinator;
use tessera_store::{Durability, TileKey, TileStore};

use crate::dimension::{Dimension, DimensionError};
use crate::metatile::MetatileSpec;

/// A grid with its parsed CRS.
#[derive(Debug)]
pub struct Grid {
    /// The tile matrix set.
    pub tms: TileMatrixSet,
    /// Its CRS.
    pub crs: Arc<Crs>,
}

/// A servable layer: a source, a style and where it may be tiled.
///
/// A layer with dimensions is served at one value of each: [`Layer::at`]
/// gives the layer at those values, a layer like this one whose source and
/// cache key are that value's, so that everything downstream (the tile
/// cache, its locks and leases, seeding, truncation) keys by value without
/// knowing about dimensions. Its name stays the layer's (metrics labels
/// stay bounded).
#[derive(Debug, Clone)]
pub struct Layer {
    /// URL name.
    pub name: String,
    /// Title.
    pub title: String,
    /// Description.
    pub description: Option<String>,
    /// Keywords (capabilities documents).
    pub keywords: Vec<String>,
    /// Attribution.
    pub attribution: Option<String>,
    /// Pixel source.
    pub source: Arc<dyn Source>,
    /// Style.
    pub style: Arc<dyn Style>,
    /// The colour ramp of a ramp or hillshade style (its legend), if any.
    pub ramp: Option<ColorRamp>,
    /// Grids this layer is tiled in, in configuration order.
    pub grids: Vec<String>,
    /// Lowest tile zoom.
    pub min_zoom: u8,
    /// Highest tile zoom (per grid it is also capped by the grid).
    pub max_zoom: u8,
    /// Offered formats; the first is the default.
    pub formats: Vec<TileFormat>,
    /// Extra WMS CRSs to advertise.
    pub wms_crs: Vec<String>,
    /// The layer's extent in each grid's CRS (`None`: could not be transformed).
    pub extents: HashMap<String, Option<BBox>>,
    /// Where its tiles are cached (`None`: every tile request renders).
    pub cache: Option<LayerCache>,
    /// The name its tiles are stored and locked under: `cache.key` (or the
    /// layer name), with `@<fingerprint>` appended when the store records
    /// another fingerprint for that name (see `crate::fingerprint`).
    pub cache_key: String,
    /// What its pixels are made from (`crate::fingerprint::of_layer`).
    pub fingerprint: String,
    /// The kind of its source (`gdal`, `wms`, `xyz`, `wmts`, `mosaic`).
    pub kind: &'static str,
    /// Whether its tiles may be the source's own tiles, passed through
    /// unchanged where the source can ([`Source::passthrough`]), or read
    /// alone where they are its own pixels ([`Source::own_pixels`]): an
    /// upstream tile service or a GDAL raster whose style changes nothing
    /// (RGB as it is).
    pub passthrough: bool,
    /// `Cache-Control: max-age` for its tiles, in seconds.
    pub max_age_secs: u64,
    /// Its dimensions, by name in order (none for most layers).
    pub dimensions: Vec<Dimension>,
    /// The layer at each combination of dimension values (its values
    /// joined by [`values_id`]), opened when first asked; empty without
    /// dimensions, and in a layer that is itself at values.
    pub at_values: HashMap<String, Arc<AtValue>>,
    /// The dimension values this layer is at (name, canonical value); empty
    /// for a layer without dimensions and for the layer as configured.
    pub values: Vec<(String, String)>,
    /// The layer at ranges of its one dimension's values
    /// (`TIME=2024-01-01/2024-01-31`), for sources that can filter by one
    /// (vector layers); `None` otherwise.
    pub ranges: Option<Ranges>,
    /// The name of the style it draws with (`default` for a layer without
    /// named styles).
    pub style_name: String,
    /// The MapLibre style document its vector source draws with, if any
    /// (served at `/styles/{layer}.json`).
    pub maplibre: Option<tessera_carto::maplibre::MapLibreSpec>,
    /// The layer's other named styles in order, each the layer drawn with
    /// it (its own tiles, fingerprint and legend); empty for a layer with
    /// one style, and in the layers held here.
    pub other_styles: Vec<(String, Arc<Layer>)>,
    /// When its tiles were last asked for (seconds since the epoch), for a
    /// layer that expires unused (a registered search); `None` for others.
    pub last_used: Option<Arc<std::sync::atomic::AtomicU64>>,
}

/// A style a layer does not have (WMS and WMTS `StyleNotDefined`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownStyle {
    /// The style asked for (at most 64 characters of it).
    pub asked: String,
    /// The styles the layer has, the default first.
    pub known: Vec<String>,
}

impl std::fmt::Display for UnknownStyle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "unknown style {:?}; the layer's styles are {} (empty for the first)",
            self.asked,
            self.known
                .iter()
                .map(|k| format!("{k:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

/// Builds the layer at one combination of values.
pub type ValueMaker = dyn Fn() -> Result<Layer, String> + Send + Sync;

/// The layer at one combination of dimension values: its source opened,
/// its fingerprint claimed in its store, when first asked (a layer with
/// thousands of values starts at once). Requests for it meanwhile wait
/// for that one opening; a failed opening is tried again by the next
/// request.
pub struct AtValue {
    made: std::sync::Mutex<Option<Arc<Layer>>>,
    make: Box<ValueMaker>,
}

impl AtValue {
    /// A value whose layer is already made.
    pub fn made(layer: Arc<Layer>) -> AtValue {
        AtValue {
            made: std::sync::Mutex::new(Some(layer.clone())),
            make: Box::new(move || Ok((*layer).clone())),
        }
    }

    /// A value whose layer `make` builds when first asked.
    pub fn lazy(make: Box<ValueMaker>) -> AtValue {
        AtValue {
            made: std::sync::Mutex::new(None),
            make,
        }
    }

    /// The layer at the value, made now if it was not yet.
    pub fn layer(&self) -> Result<Arc<Layer>, String> {
        let mut made = self
            .made
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(layer) = made.as_ref() {
            return Ok(layer.clone());
        }
        let layer = Arc::new((self.make)()?);
        *made = Some(layer.clone());
        Ok(layer)
    }

    /// Whether the layer was made already.
    pub fn is_made(&self) -> bool {
        self.made.lock().is_ok_and(|m| m.is_some())
    }
}

impl std::fmt::Debug for AtValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AtValue")
            .field("made", &self.is_made())
            .finish_non_exhaustive()
    }
}

/// Builds the layer at a range of values (from, to: canonical).
pub type RangeMaker = dyn Fn(&str, &str) -> Result<Layer, String> + Send + Sync;

/// Layers at ranges (from, to) made so far.
type MadeRanges = HashMap<(String, String), Arc<Layer>>;

/// The layer at ranges of values, made when first asked and kept (at most
/// [`Ranges::MOST`]; beyond, those kept are dropped and made again when
/// asked). Layers at ranges are not cached: any range may be asked.
#[derive(Clone)]
pub struct Ranges {
    make: Arc<RangeMaker>,
    made: Arc<std::sync::Mutex<MadeRanges>>,
}

impl Ranges {
    /// Layers at ranges kept at most.
    pub const MOST: usize = 64;

    /// Ranges made by `make`.
    pub fn new(make: Arc<RangeMaker>) -> Ranges {
        Ranges {
            make,
            made: Arc::default(),
        }
    }

    /// The layer at the range from `from` to `to`.
    pub fn get(&self, from: &str, to: &str) -> Result<Arc<Layer>, String> {
        let key = (from.to_string(), to.to_string());
        let lock = || {
            self.made
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        if let Some(layer) = lock().get(&key) {
            return Ok(layer.clone());
        }
        let layer = Arc::new((self.make)(from, to)?);
        let mut made = lock();
        if made.len() >= Self::MOST {
            made.clear();
        }
        made.insert(key, layer.clone());
        Ok(layer)
    }
}

impl std::fmt::Debug for Ranges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ranges")
            .field("made", &self.made.lock().map_or(0, |m| m.len()))
            .finish_non_exhaustive()
    }
}

/// The identifier of a combination of canonical dimension values (in the
/// layer's dimension order): the values joined by `~`.
pub fn values_id(values: &[(String, String)]) -> String {
    values
        .iter()
        .map(|(_, v)| v.as_str())
        .collect::<Vec<_>>()
        .join("~")
}

/// How a layer's tiles are cached.
#[derive(Debug, Clone)]
pub struct LayerCache {
    /// Name of the store under `stores:`.
    pub store_name: String,
    /// The store.
    pub store: Arc<dyn TileStore>,
    /// Metatile size and gutter.
    pub metatile: MetatileSpec,
    /// Durability of tiles saved while serving.
    pub durability: Durability,
    /// Which stored tiles are too old to serve.
    pub freshness: Freshness,
    /// Where nodes sharing the store meet (its bucket or directory), for
    /// the layer's generation; `None` when no other process can share it.
    pub coordinator: Option<Arc<Coordinator>>,
    /// Leases before rendering (`cluster.leases`), `None` when off.
    pub leases: Option<Arc<Leases>>,
}

/// Which stored tiles are too old to serve (`cache.max_stored_age`,
/// `cache.refresh_before`): they are rendered again when asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Freshness {
    /// Tiles stored longer ago than this are stale.
    pub max_stored_age: Option<Duration>,
    /// Tiles stored before this time are stale.
    pub refresh_before: Option<SystemTime>,
}

impl Freshness {
    /// Whether any tile can be stale.
    pub fn expires(&self) -> bool {
        self.max_stored_age.is_some() || self.refresh_before.is_some()
    }

    /// Whether a tile stored at `stored_at` may be served at `now`. Tiles
    /// whose store time is unknown (written by other tools) are served.
    pub fn is_fresh(&self, stored_at: Option<SystemTime>, now: SystemTime) -> bool {
        let Some(at) = stored_at else {
            return true;
        };
        let too_old = self
            .max_stored_age
            .is_some_and(|age| now.duration_since(at).is_ok_and(|elapsed| elapsed > age));
        let before = self.refresh_before.is_some_and(|t| at < t);
        !(too_old || before)
    }
}

impl Layer {
    /// The `vector_layers` of its vector tiles (TileJSON 3.0.0, MBTiles
    /// 1.3's `json` row, PMTiles' metadata): each data layer's id, fields
    /// and types, geometry, and zooms within the layer's from `min_zoom`
    /// to `max_zoom`; an archive's own list when its source is one that
    /// names none itself. Empty for a layer without vector data.
    pub fn vector_layers(&self, min_zoom: u8, max_zoom: u8) -> serde_json::Value {
        let layers: Vec<serde_json::Value> = self
            .source
            .as_features()
            .map(tessera_source::FeatureSource::vector_layers)
            .unwrap_or_default()
            .into_iter()
            .map(|l| {
                let fields: serde_json::Map<String, serde_json::Value> = l
                    .fields
                    .into_iter()
                    .map(|(name, kind)| (name, serde_json::Value::String(kind.into())))
                    .collect();
                serde_json::json!({
                    "id": l.name,
                    "fields": fields,
                    "minzoom": l.min_zoom.max(min_zoom),
                    "maxzoom": l.max_zoom.map_or(max_zoom, |m| m.min(max_zoom)),
                    "description": l.geometry,
                })
            })
            .collect();
        match self
            .source
            .tile_metadata()
            .and_then(|m| m.vector_layers.clone())
        {
            // An archive's, as it lists them.
            Some(listed) if layers.is_empty() => listed,
            _ => serde_json::Value::Array(layers),
        }
    }

    /// The style tiles of `format` are drawn with: the elevation formats'
    /// encoding of the band's values, the layer's style otherwise.
    pub fn style_for(&self, format: TileFormat) -> Arc<dyn Style> {
        match format.elevation() {
            Some(encoding) => Arc::new(tessera_image::ElevationStyle::new(encoding)),
            None => self.style.clone(),
        }
    }

    /// The names of its styles, the one it draws with (the default) first.
    pub fn style_names(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.style_name.as_str())
            .chain(self.other_styles.iter().map(|(n, _)| n.as_str()))
    }

    /// The layer drawn with the style `asked` names (ASCII case ignored):
    /// itself for `None`, an empty name, its own style's name or `default`
    /// (unless another style has that name).
    pub fn styled(self: &Arc<Self>, asked: Option<&str>) -> Result<Arc<Layer>, UnknownStyle> {
        let Some(asked) = asked.filter(|a| !a.is_empty()) else {
            return Ok(self.clone());
        };
        if asked.eq_ignore_ascii_case(&self.style_name) {
            return Ok(self.clone());
        }
        if let Some((_, layer)) = self
            .other_styles
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(asked))
        {
            return Ok(layer.clone());
        }
        if asked.eq_ignore_ascii_case("default") {
            return Ok(self.clone());
        }
        Err(UnknownStyle {
            asked: asked.chars().take(64).collect(),
            known: self.style_names().map(str::to_string).collect(),
        })
    }

    /// The layer at the dimension values a request asks for: `asked` gives
    /// the text a request has for a dimension's name (`None`: the
    /// default). A layer without dimensions is itself whatever is asked.
    pub fn at(
        self: &Arc<Self>,
        asked: impl Fn(&str) -> Option<String>,
    ) -> Result<Arc<Layer>, DimensionError> {
        if self.dimensions.is_empty() {
            return Ok(self.clone());
        }
        if let [d] = self.dimensions.as_slice() {
            let asked = asked(&d.name);
            if let (Some(ranges), Some(text)) = (&self.ranges, asked.as_deref())
                && let Some(range) = d.range(text)
            {
                let (from, to) = range?;
                return ranges.get(&from, &to).map_err(|reason| {
                    tracing::warn!(layer = %self.name, %reason, "the layer at a range of values cannot be made");
                    DimensionError::Unknown {
                        name: d.name.clone(),
                        value: format!("{from}/{to}"),
                    }
                });
            }
            // One dimension: its value is the identifier.
            let value = d.resolve(asked.as_deref())?;
            return self.opened_at(&value, || (d.name.clone(), value.clone()));
        }
        let mut values = Vec::with_capacity(self.dimensions.len());
        for d in &self.dimensions {
            values.push((d.name.clone(), d.resolve(asked(&d.name).as_deref())?));
        }
        let id = values_id(&values);
        self.opened_at(&id, || values.swap_remove(0))
    }

    /// The layer at the values `id` names, opened if it was not yet;
    /// `named` gives the dimension and value to name in errors.
    fn opened_at(
        &self,
        id: &str,
        named: impl FnOnce() -> (String, String),
    ) -> Result<Arc<Layer>, DimensionError> {
        let Some(at) = self.at_values.get(id) else {
            let (name, value) = named();
            return Err(DimensionError::Unknown { name, value });
        };
        at.layer().map_err(|reason| {
            let (name, value) = named();
            tracing::error!(layer = %self.name, dimension = %name, %value, %reason, "the layer at a value cannot be opened");
            DimensionError::Unavailable { name, value }
        })
    }

    /// The layer's name, with its style unless that is `default` and the
    /// dimension values it is at (`scene in style ndvi at
    /// time=2024-01-01T00:00:00Z`), for messages.
    pub fn label(&self) -> String {
        let mut label = self.name.clone();
        if self.style_name != "default" {
            label.push_str(" in style ");
            label.push_str(&self.style_name);
        }
        for (i, (name, value)) in self.values.iter().enumerate() {
            label.push_str(if i == 0 { " at " } else { ", " });
            label.push_str(name);
            label.push('=');
            label.push_str(value);
        }
        label
    }

    /// The tiles of each of its zooms in `grid` (identifier `gid`, the
    /// grid or its HiDPI twin) that hold its extent (the whole matrix where
    /// the extent is unknown there), from its lowest zoom to its highest.
    pub fn tile_limits(&self, gid: &str, grid: &Grid) -> Vec<TileLimits> {
        self.tile_limits_at(gid, grid, self.min_zoom..=self.max_zoom_in(grid))
    }

    /// [`Layer::tile_limits`] at `zooms` (of the grid's).
    pub fn tile_limits_at(
        &self,
        gid: &str,
        grid: &Grid,
        zooms: std::ops::RangeInclusive<u8>,
    ) -> Vec<TileLimits> {
        let extent = self.extents.get(gid).copied().flatten();
        zooms
            .map(|z| {
                let m = &grid.tms.matrices[usize::from(z)];
                let range = extent.and_then(|e| grid.tms.tiles_in_bbox(z, &e));
                let (min_col, max_col, min_row, max_row) = match range {
                    Some(r) => (r.min_x, r.max_x, r.min_y, r.max_y),
                    None => (0, m.matrix_width - 1, 0, m.matrix_height - 1),
                };
                TileLimits {
                    matrix: m.id.clone(),
                    min_row,
                    max_row,
                    min_col,
                    max_col,
                }
            })
            .collect()
    }

    /// Whether the layer can be drawn at any zoom of a grid, past its own
    /// zooms (its source's pixels drawn larger or smaller): a layer drawn
    /// from its source, not a tile archive or tiles passed through as the
    /// source has them.
    pub fn drawn_at_any_zoom(&self) -> bool {
        !(self.passthrough && self.kind != "gdal") && self.source.tile_metadata().is_none()
    }

    /// Highest zoom of this layer in `grid`.
    pub fn max_zoom_in(&self, grid: &Grid) -> u8 {
        self.max_zoom.min(grid.tms.max_zoom())
    }

    /// The zoom at which the layer's extent fills about four tiles across
    /// in `grid` (the minimum zoom when the extent is unknown there).
    pub fn center_zoom(&self, grid: &Grid) -> u8 {
        let Some(Some(extent)) = self.extents.get(&grid.tms.id) else {
            return self.min_zoom;
        };
        let wanted = extent.width().max(extent.height()) / (4.0 * f64::from(grid.tms.tile_width));
        grid.tms.zoom_for_resolution(wanted)
    }
}

/// The tiles of one matrix a layer has: rows and columns from the top left,
/// both ends included.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TileLimits {
    /// The matrix identifier.
    pub matrix: String,
    /// First row.
    pub min_row: u32,
    /// Last row.
    pub max_row: u32,
    /// First column.
    pub min_col: u32,
    /// Last column.
    pub max_col: u32,
}

/// How many times the pixels a HiDPI tile has (`@2x`).
pub const HIDPI_FACTOR: u32 = 2;

/// The suffix of a HiDPI grid's identifier and of a HiDPI tile's row.
pub const HIDPI_SUFFIX: &str = "@2x";

/// How a layer's metatiles are leased (`cluster.leases`): the data; the
/// protocol is [`crate::cluster`]'s and the tile cache's.
#[derive(Debug)]
pub struct Leases {
    /// Where the lease objects are kept (the layer's object store).
    pub coordinator: Arc<Coordinator>,
    /// This node's name, written into its leases.
    pub node: String,
    /// A lease's time to live unless renewed.
    pub ttl: Duration,
    /// Longest wait for another node's tiles.
    pub wait: Duration,
}

/// Which configured layers a service opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerSelection<'a> {
    /// Every layer of the configuration (and, serving, every uploaded one).
    All,
    /// One layer by name: a configured one, or else an uploaded source
    /// recorded by the admin API.
    Only(&'a str),
}

/// The key tile `coord` of `layer` in `grid` and `format` is stored and
/// locked under (the layer's [`Layer::cache_key`], the grid, the tile and
/// its matrix's size).
pub fn tile_key(layer: &Layer, grid: &Grid, format: TileFormat, coord: TileCoord) -> TileKey {
    let matrix = grid
        .tms
        .matrix(coord.z())
        .expect("a TileCoord is inside its grid");
    TileKey {
        layer: layer.cache_key.clone(),
        grid: grid.tms.id.clone(),
        coord,
        matrix_height: matrix.matrix_height,
        matrix_width: matrix.matrix_width,
        format,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freshness_by_age_and_by_date() {
        let now = SystemTime::now();
        let hour = Duration::from_hours(1);
        let never = Freshness::default();
        assert!(!never.expires());
        assert!(never.is_fresh(Some(now - 100 * hour), now));
        let by_age = Freshness {
            max_stored_age: Some(hour),
            refresh_before: None,
        };
        assert!(by_age.is_fresh(Some(now - hour / 2), now));
        assert!(!by_age.is_fresh(Some(now - 2 * hour), now));
        // A store that does not know when: served.
        assert!(by_age.is_fresh(None, now));
        let by_date = Freshness {
            max_stored_age: None,
            refresh_before: Some(now - hour),
        };
        assert!(!by_date.is_fresh(Some(now - 2 * hour), now));
        assert!(by_date.is_fresh(Some(now - hour / 2), now));
    }
}
