//! Layers and grids as loaded from the configuration, and the cache of CRSs
//! that requests name.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tessera_grid::TileFormat;
use tessera_grid::mercator;
use tessera_grid::{BBox, TileMatrixSet};
use tessera_image::{ColorRamp, Style, build_style};
use tessera_source::{Crs, Source, SourceError, open_source};

use tessera_store::cluster::Coordinator;
use tessera_store::{Durability, MemoryStore, TileStore};

use crate::cluster::Leases;
use crate::config::{Config, ConfigError, LayerConfig, NO_STORE};
use crate::fingerprint;
use crate::metatile::MetatileSpec;
use crate::metrics::{Metrics, TimedStore};
use crate::service::LayerSelection;

/// CRSs remembered from requests; further distinct CRSs are parsed per request.
const MAX_CACHED_CRS: usize = 256;

/// A grid with its parsed CRS.
#[derive(Debug)]
pub struct Grid {
    /// The tile matrix set.
    pub tms: TileMatrixSet,
    /// Its CRS.
    pub crs: Arc<Crs>,
}

/// A hook that may wrap a layer's opened source (given the layer name).
pub type WrapSource = dyn Fn(&str, Arc<dyn Source>) -> Arc<dyn Source>;

/// A servable layer: a source, a style and where it may be tiled.
#[derive(Debug)]
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
    pub style: Box<dyn Style>,
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
    /// another fingerprint for that name (see [`crate::fingerprint`]).
    pub cache_key: String,
    /// What its pixels are made from ([`crate::fingerprint::of_layer`]).
    pub fingerprint: String,
    /// The kind of its source (`gdal`, `wms`, `xyz`, `wmts`, `mosaic`).
    pub kind: &'static str,
    /// Whether its tiles may be the source's own tiles, passed through
    /// unchanged where the source can ([`Source::passthrough`]): an upstream
    /// tile service whose style changes nothing (RGB as it is).
    pub passthrough: bool,
    /// `Cache-Control: max-age` for its tiles, in seconds.
    pub max_age_secs: u64,
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

/// How many times the pixels a HiDPI tile has (`@2x`).
pub const HIDPI_FACTOR: u32 = 2;

/// The suffix of a HiDPI grid's identifier and of a HiDPI tile's row.
pub const HIDPI_SUFFIX: &str = "@2x";

/// Everything the server can serve.
#[derive(Debug)]
pub struct Registry {
    /// Layers in configuration order, then layers added while running
    /// (uploaded sources).
    layers: std::sync::RwLock<Vec<Arc<Layer>>>,
    /// Grids by identifier.
    pub grids: HashMap<String, Arc<Grid>>,
    /// Tile stores by name.
    pub stores: HashMap<String, Arc<dyn TileStore>>,
    /// The coordinators of the stores other processes can share, by store
    /// name.
    pub coordinators: HashMap<String, Arc<Coordinator>>,
    crs_cache: Mutex<HashMap<String, Arc<Crs>>>,
}

impl Registry {
    /// Builds every grid, then opens the stores and sources of the selected
    /// layers (with [`LayerSelection::All`], every store). Fails with an
    /// error that names the layer, grid or store at fault.
    ///
    /// `wrap_source` sees each layer's opened source and may wrap it (tests
    /// use it to count, slow down or block reads); pass `|_, s| s` otherwise.
    /// Stores in `kept` (already open, with the same spec) are used as they
    /// are instead of being opened again.
    pub fn load(
        config: &Config,
        metrics: &Arc<Metrics>,
        wrap_source: &WrapSource,
        selection: LayerSelection<'_>,
        kept: HashMap<String, Arc<dyn TileStore>>,
    ) -> Result<Registry, ConfigError> {
        let layers: Vec<&LayerConfig> = match selection {
            LayerSelection::All => config.layers.iter().collect(),
            LayerSelection::Only(name) => config.layers.iter().filter(|l| l.name == name).collect(),
        };
        let wanted_stores: Vec<&str> = match (selection, layers.as_slice()) {
            (LayerSelection::All, _) => config.stores.keys().map(String::as_str).collect(),
            (LayerSelection::Only(_), [layer]) => vec![layer.cache.store.as_str()],
            // Not a configured layer: an uploaded source may have the name,
            // caching into the admin API's store; without the admin API
            // there is nothing to open.
            (LayerSelection::Only(_), _) => config
                .admin
                .as_ref()
                .map(|a| {
                    a.cache_store
                        .as_deref()
                        .unwrap_or(crate::config::DEFAULT_STORE)
                })
                .into_iter()
                .collect(),
        };
        let stores = open_stores(config, &wanted_stores, metrics, kept)?;
        let mut coordinators = HashMap::new();
        for name in stores.keys() {
            let failed = |source| ConfigError::Store {
                store: name.clone(),
                source,
            };
            if let Some(c) = Coordinator::for_store(name, &config.stores[name]).map_err(failed)? {
                coordinators.insert(name.clone(), Arc::new(c));
            }
        }
        let mut grids = HashMap::new();
        for tms in [
            TileMatrixSet::web_mercator_quad(),
            TileMatrixSet::world_crs84_quad(),
        ] {
            let crs = Arc::new(Crs::parse(&tms.crs).map_err(|source| ConfigError::GridCrs {
                grid: tms.id.clone(),
                source,
            })?);
            grids.insert(tms.id.clone(), Arc::new(Grid { tms, crs }));
        }
        for spec in &config.grids {
            let crs = Crs::parse(&spec.crs).map_err(|source| ConfigError::GridCrs {
                grid: spec.id.clone(),
                source,
            })?;
            let tms = TileMatrixSet::from_spec(spec, crs.meters_per_unit).map_err(|source| {
                ConfigError::Grid {
                    grid: spec.id.clone(),
                    source,
                }
            })?;
            if grids.contains_key(&tms.id) {
                return Err(ConfigError::Invalid(format!(
                    "grid {:?} is defined twice",
                    tms.id
                )));
            }
            grids.insert(
                tms.id.clone(),
                Arc::new(Grid {
                    tms,
                    crs: Arc::new(crs),
                }),
            );
        }
        // Every grid also at twice the pixels, for HiDPI (`{y}@2x.png`).
        let hidpi: Vec<Arc<Grid>> = grids
            .values()
            .map(|g| {
                Arc::new(Grid {
                    tms: g.tms.scaled(HIDPI_FACTOR),
                    crs: g.crs.clone(),
                })
            })
            .collect();
        for g in hidpi {
            grids.insert(g.tms.id.clone(), g);
        }
        let mut registry = Registry {
            layers: std::sync::RwLock::new(Vec::new()),
            grids,
            stores,
            coordinators,
            crs_cache: Mutex::new(HashMap::new()),
        };
        for lc in layers {
            registry.push_layer(registry.build_layer(lc, config, wrap_source)?);
        }
        Ok(registry)
    }

    /// Builds a layer from its configuration, with this registry's grids
    /// and stores.
    pub fn build_layer(
        &self,
        lc: &LayerConfig,
        config: &Config,
        wrap_source: &WrapSource,
    ) -> Result<Arc<Layer>, ConfigError> {
        let (grids, stores) = (&self.grids, &self.stores);
        {
            let in_layer = |e: &dyn std::fmt::Display| {
                ConfigError::Invalid(format!("layer {:?}: {e}", lc.name))
            };
            let opened =
                open_source(&lc.source, &config.gdal).map_err(|source| ConfigError::Source {
                    layer: lc.name.clone(),
                    source,
                })?;
            let source: Arc<dyn Source> = wrap_source(&lc.name, opened);
            let style = build_style(&lc.style, source.info().band_count).map_err(|source| {
                ConfigError::Style {
                    layer: lc.name.clone(),
                    source,
                }
            })?;
            let mut extents = HashMap::new();
            for g in &lc.grids {
                let grid = grids.get(g).ok_or_else(|| {
                    in_layer(&format!("unknown grid {g:?} (define it under `grids:`)"))
                })?;
                if lc.formats.contains(&TileFormat::Mvt)
                    && grid.tms.tile_width != grid.tms.tile_height
                {
                    return Err(in_layer(&format!(
                        "vector tiles (format mvt) need square tiles; grid {g:?} has {}x{}",
                        grid.tms.tile_width, grid.tms.tile_height
                    )));
                }
                let extent = layer_extent(source.as_ref(), grid);
                extents.insert(format!("{g}{HIDPI_SUFFIX}"), extent);
                extents.insert(g.clone(), extent);
            }
            for c in &lc.wms_crs {
                Crs::parse(c).map_err(|source| ConfigError::LayerCrs {
                    layer: lc.name.clone(),
                    crs: c.clone(),
                    source,
                })?;
            }
            if lc.cache.store != NO_STORE && !stores.contains_key(&lc.cache.store) {
                return Err(in_layer(&format!("unknown store {:?}", lc.cache.store)));
            }
            let coordinator = self.coordinators.get(&lc.cache.store).cloned();
            let leases = match (&coordinator, config.cluster.leases) {
                (Some(c), true) if c.supports_leases() => Some(Arc::new(Leases {
                    coordinator: c.clone(),
                    node: config.cluster.node(),
                    ttl: Duration::from_secs_f64(config.cluster.lease_ttl_secs),
                    wait: Duration::from_secs_f64(
                        config
                            .cluster
                            .lease_wait_secs
                            .unwrap_or(2.0 * config.cluster.lease_ttl_secs),
                    ),
                })),
                (_, true) if lc.cache.store != NO_STORE => {
                    return Err(in_layer(&format!(
                        "cluster.leases needs an object store that honours conditional writes, and store {:?} does not",
                        lc.cache.store
                    )));
                }
                _ => None,
            };
            let cache = (lc.cache.store != NO_STORE).then(|| LayerCache {
                coordinator,
                leases,
                store_name: lc.cache.store.clone(),
                store: stores[&lc.cache.store].clone(),
                metatile: MetatileSpec {
                    cols: lc.cache.metatile[0],
                    rows: lc.cache.metatile[1],
                    gutter: lc.cache.gutter,
                },
                durability: lc.cache.durability,
                freshness: Freshness {
                    max_stored_age: lc.cache.max_stored_age.map(Duration::from_secs_f64),
                    refresh_before: lc.cache.refresh_before,
                },
            });
            let layer_grids: Vec<&Grid> = lc
                .grids
                .iter()
                .filter_map(|g| grids.get(g).map(AsRef::as_ref))
                .collect();
            let fingerprint = fingerprint::of_layer(lc, &config.encoding, &layer_grids);
            let base_key = lc.cache.key.clone().unwrap_or_else(|| lc.name.clone());
            let cache_key = match &cache {
                None => base_key,
                Some(c) => fingerprint::store_key(c.store.as_ref(), &base_key, &fingerprint)
                    .unwrap_or_else(|e| {
                        // Tiles under the fingerprinted key are right
                        // whatever the store recorded.
                        tracing::warn!(
                            layer = %lc.name,
                            error = &e as &dyn std::error::Error,
                            "cannot read or record the layer's fingerprint in its store; keeping its tiles under a key with the fingerprint"
                        );
                        format!("{base_key}@{fingerprint}")
                    }),
            };
            if cache_key != lc.cache.key.as_deref().unwrap_or(&lc.name) {
                tracing::info!(
                    layer = %lc.name,
                    key = %cache_key,
                    "the layer's source, style, grids or encoding differ from what the tiles under its plain key were made from: its tiles are kept under this key"
                );
            }
            Ok(Arc::new(Layer {
                name: lc.name.clone(),
                title: lc.title.clone().unwrap_or_else(|| lc.name.clone()),
                description: lc.description.clone(),
                keywords: lc.keywords.clone(),
                attribution: lc.attribution.clone(),
                source,
                style,
                ramp: match &lc.style {
                    tessera_image::StyleSpec::Ramp(r) => ColorRamp::new(r.stops.clone()).ok(),
                    tessera_image::StyleSpec::Hillshade(h) => {
                        h.ramp.clone().and_then(|stops| ColorRamp::new(stops).ok())
                    }
                    tessera_image::StyleSpec::Rgb(_) => None,
                },
                grids: lc.grids.clone(),
                min_zoom: lc.min_zoom,
                max_zoom: lc.max_zoom,
                formats: lc.formats.clone(),
                wms_crs: lc.wms_crs.clone(),
                extents,
                cache,
                cache_key,
                fingerprint,
                kind: lc.source.kind(),
                passthrough: matches!(lc.source, tessera_source::SourceSpec::Vector(_))
                    || lc.style == tessera_image::StyleSpec::default()
                        && matches!(
                            lc.source,
                            tessera_source::SourceSpec::Xyz(_)
                                | tessera_source::SourceSpec::Wmts(_)
                        ),
                max_age_secs: lc.cache.max_age_secs,
            }))
        }
    }

    fn push_layer(&mut self, layer: Arc<Layer>) {
        self.layers
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(layer);
    }

    /// Adds a layer while serving, or replaces the added layer of that
    /// name. Fails when a configured layer has the name.
    pub fn add_layer(&self, layer: Arc<Layer>, configured: &Config) -> Result<(), ConfigError> {
        if configured.layers.iter().any(|l| l.name == layer.name) {
            return Err(ConfigError::Invalid(format!(
                "layer {:?} is defined in the configuration",
                layer.name
            )));
        }
        let mut layers = self
            .layers
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        layers.retain(|l| l.name != layer.name);
        layers.push(layer);
        Ok(())
    }

    /// Every layer, in order (a snapshot).
    pub fn layers(&self) -> Vec<Arc<Layer>> {
        self.layers
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// A layer by name.
    pub fn layer(&self, name: &str) -> Option<Arc<Layer>> {
        self.layers
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .find(|l| l.name == name)
            .cloned()
    }

    /// Names of the opened stores.
    pub fn store_names(&self) -> impl Iterator<Item = &str> {
        self.stores.keys().map(String::as_str)
    }

    /// A grid by identifier.
    pub fn grid(&self, id: &str) -> Option<&Arc<Grid>> {
        self.grids.get(id)
    }

    /// Parses a CRS named in a request, remembering a bounded number of them.
    pub fn crs(&self, text: &str) -> Result<Arc<Crs>, SourceError> {
        let key = text.to_ascii_uppercase();
        if let Ok(cache) = self.crs_cache.lock()
            && let Some(c) = cache.get(&key)
        {
            return Ok(c.clone());
        }
        let crs = Arc::new(Crs::parse(text)?);
        if let Ok(mut cache) = self.crs_cache.lock()
            && cache.len() < MAX_CACHED_CRS
        {
            cache.insert(key, crs.clone());
        }
        Ok(crs)
    }
}

/// Opens the configured stores named in `wanted` (names not configured
/// are skipped), each timed into the metrics and, where configured, behind
/// an in-memory LRU; a store found in `kept` is taken from there.
fn open_stores(
    config: &Config,
    wanted: &[&str],
    metrics: &Arc<Metrics>,
    mut kept: HashMap<String, Arc<dyn TileStore>>,
) -> Result<HashMap<String, Arc<dyn TileStore>>, ConfigError> {
    let timed = |s: Arc<dyn TileStore>| -> Arc<dyn TileStore> {
        Arc::new(TimedStore::new(s, metrics.clone()))
    };
    let mut stores = HashMap::new();
    for (name, spec) in config
        .stores
        .iter()
        .filter(|(n, _)| wanted.contains(&n.as_str()))
    {
        if let Some(store) = kept.remove(name) {
            stores.insert(name.clone(), store);
            continue;
        }
        let failed = |source| ConfigError::Store {
            store: name.clone(),
            source,
        };
        let backend = timed(spec.open(name).map_err(failed)?);
        let front = spec.front_bytes();
        let store = if front == 0 {
            backend
        } else {
            let bytes = usize::try_from(front).unwrap_or(usize::MAX);
            timed(Arc::new(MemoryStore::new(bytes, Some(backend))))
        };
        stores.insert(name.clone(), store);
    }
    Ok(stores)
}

fn layer_extent(source: &dyn Source, grid: &Grid) -> Option<BBox> {
    let info = source.info();
    let direct = info
        .native_crs
        .transform_bbox(&info.native_bounds, &grid.crs)
        .ok();
    // Sources reaching the poles cannot be transformed to Web Mercator as a
    // whole: clip their lon/lat extent to the latitudes it can represent.
    let b = direct.or_else(|| {
        let ll = info.lonlat_bounds;
        let clipped = BBox::new(
            ll.min_x,
            ll.min_y.max(-mercator::MAX_LATITUDE),
            ll.max_x,
            ll.max_y.min(mercator::MAX_LATITUDE),
        )
        .ok()?;
        Crs::parse("OGC:CRS84")
            .ok()?
            .transform_bbox(&clipped, &grid.crs)
            .ok()
    })?;
    b.intersection(&grid.tms.extent)
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
