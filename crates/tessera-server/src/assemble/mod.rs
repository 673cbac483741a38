//! The one place that turns the configuration into objects: grids, stores
//! (timed, behind their memory LRU), coordinators, and layers with their
//! sources, styles, extents, fingerprints and cache keys. Rules that span
//! sections of the configuration (a layer's grids and stores exist, leases
//! need a store that honours conditional writes) are checked here.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tessera_grid::mercator;
use tessera_grid::{BBox, TileMatrixSet};
use tessera_image::{ColorRamp, build_style};
use tessera_source::{Crs, Source, open_source};

use crate::archive_objects::ObjectBytes;
use tessera_store::cluster::Coordinator;
use tessera_store::{MemoryStore, QuotaStore, StoreSpec, TileStore};

mod dimensions;
mod discover;

pub use dimensions::{refresh_interval, values_signature};
pub use discover::discover;

use crate::config::{Config, ConfigError, LayerConfig, NO_STORE};
use crate::fingerprint;
use crate::metatile::MetatileSpec;
use crate::metrics::{Metrics, TimedStore};
use crate::model::{
    Freshness, Grid, HIDPI_FACTOR, HIDPI_SUFFIX, Layer, LayerCache, LayerSelection, Leases,
};
use crate::registry::Registry;

/// A hook that may wrap a layer's opened source (given the layer name);
/// kept by layers whose values are opened when first asked.
pub type WrapSource = dyn Fn(&str, Arc<dyn Source>) -> Arc<dyn Source> + Send + Sync;

/// The hook that wraps nothing.
pub fn no_wrap() -> Arc<WrapSource> {
    Arc::new(|_, source| source)
}

/// Builds every grid, then opens the stores and sources of the selected
/// layers (with [`LayerSelection::All`], every store). Fails with an error
/// that names the layer, grid or store at fault.
///
/// `wrap_source` sees each layer's opened source and may wrap it (tests use
/// it to count, slow down or block reads); pass `|_, s| s` otherwise. Stores
/// in `kept` (already open, with the same spec) are used as they are
/// instead of being opened again.
#[allow(clippy::implicit_hasher)] // the stores of the service it replaces
pub fn registry(
    config: &Config,
    metrics: &Arc<Metrics>,
    wrap_source: &Arc<WrapSource>,
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
        // caching into the admin API's store; without the admin API there
        // is nothing to open.
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
    let grids = grids(config)?;
    let stores = open_stores(config, &wanted_stores, metrics, kept, &grids)?;
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
    let mut registry = Registry::new(grids, stores, coordinators);
    for lc in layers {
        let layer = layer(&registry, lc, config, wrap_source)?;
        registry.push_layer(layer);
    }
    Ok(registry)
}

/// The built-in grids, the configured ones, and each of them at twice the
/// pixels for HiDPI (`<id>@2x`), by identifier.
pub fn grids(config: &Config) -> Result<HashMap<String, Arc<Grid>>, ConfigError> {
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
    Ok(grids)
}

/// Checks what can be checked without opening a source: the grids build,
/// and every grid a layer names is one of them (with the closest name when
/// it is not). `tessera check --no-open` stops here.
pub fn check_names(config: &Config) -> Result<(), ConfigError> {
    let grids = grids(config)?;
    let mut offered: Vec<&str> = grids
        .keys()
        .filter(|k| !k.ends_with(HIDPI_SUFFIX))
        .map(String::as_str)
        .collect();
    offered.sort_unstable();
    for lc in &config.layers {
        for g in &lc.grids {
            if !grids.contains_key(g) {
                let unknown = crate::suggest::Unknown::among(g, "grids", offered.iter().copied());
                return Err(ConfigError::Invalid(format!(
                    "layer {:?}: unknown grid {unknown} (define it under `grids:`)",
                    lc.name
                )));
            }
        }
    }
    Ok(())
}

/// Opens a layer's source: as [`open_source`] does, and a tile archive in
/// an object store with the object store clients ([`ObjectBytes`]).
pub fn open_layer_source(
    spec: &tessera_source::SourceSpec,
    gdal: &tessera_source::GdalSettings,
) -> Result<Arc<dyn Source>, tessera_source::SourceError> {
    use tessera_source::archive::{self, Place};
    if let tessera_source::SourceSpec::Archive(kind, a) = spec
        && a.place() == Place::Object
    {
        let bytes = ObjectBytes::open(&a.path, &a.options).map_err(|m| {
            tessera_source::SourceError::Open {
                path: a.path.clone(),
                source: m.into(),
            }
        })?;
        let policy = tessera_source::upstream::client::NetworkPolicy {
            allow_private_network: gdal.allow_private_network,
            allowed_private_hosts: gdal.allowed_private_hosts.clone(),
        };
        return Ok(Arc::new(archive::open(
            *kind,
            a,
            policy,
            Some(Arc::new(bytes)),
        )?));
    }
    open_source(spec, gdal)
}

/// The source of layer `lc`: the one opened while `config` was written
/// ([`crate::config::OpenedSources`]), else opened now.
fn configured_source(config: &Config, lc: &LayerConfig) -> Result<Arc<dyn Source>, ConfigError> {
    match config.opened.take(&lc.source) {
        Some(source) => Ok(source),
        None => open_layer_source(&lc.source, &config.gdal).map_err(|source| ConfigError::Source {
            layer: lc.name.clone(),
            source,
        }),
    }
}

/// Builds a layer from its configuration, with `registry`'s grids and
/// stores; a layer with dimensions with the layer at each of its values
/// ([`dimensions`]).
pub fn layer(
    registry: &Registry,
    lc: &LayerConfig,
    config: &Config,
    wrap_source: &Arc<WrapSource>,
) -> Result<Arc<Layer>, ConfigError> {
    let names = lc.style_names();
    let mut styled = Vec::with_capacity(names.len());
    // Styles that draw from the same source spec share its opening.
    let mut opened: Option<(tessera_source::SourceSpec, Arc<dyn Source>)> = None;
    for (i, name) in names.into_iter().enumerate() {
        let mut slc = lc.with_style(i);
        let drawn = slc.style.clone();
        discover::read_maplibre(&drawn, &mut slc.source)
            .map_err(|m| ConfigError::Invalid(format!("layer {:?}: {m}", lc.name)))?;
        let layer = if slc.dimensions.is_empty() {
            let source = match &opened {
                Some((spec, source)) if *spec == slc.source => source.clone(),
                _ => {
                    let source = wrap_source(&lc.name, configured_source(config, &slc)?);
                    opened = Some((slc.source.clone(), source.clone()));
                    source
                }
            };
            Arc::new(plain_layer(
                registry,
                &slc,
                config,
                wrap_source,
                &[],
                &[],
                Some(source),
            )?)
        } else {
            dimensions::layer(registry, &slc, config, wrap_source)?
        };
        styled.push((name, layer));
    }
    let (_, first) = styled.remove(0);
    if styled.is_empty() {
        return Ok(first);
    }
    let mut layer = Arc::unwrap_or_clone(first);
    layer.other_styles = styled;
    Ok(Arc::new(layer))
}

/// Builds `lc` as one layer at `values` (name, canonical value; none for a
/// layer without dimensions), its tiles under the layer key at those values
/// ([`crate::dimension::layer_key`]) and its fingerprint also covering the
/// size and time of the `files` its pixels come from. Its source is
/// `opened` (already wrapped), or opened from `lc.source`.
fn plain_layer(
    registry: &Registry,
    lc: &LayerConfig,
    config: &Config,
    wrap_source: &Arc<WrapSource>,
    values: &[(String, String)],
    files: &[String],
    opened: Option<Arc<dyn Source>>,
) -> Result<Layer, ConfigError> {
    let (grids, stores) = (&registry.grids, &registry.stores);
    let in_layer =
        |e: &dyn std::fmt::Display| ConfigError::Invalid(format!("layer {:?}: {e}", lc.name));
    let source: Arc<dyn Source> = match opened {
        Some(source) => source,
        None => wrap_source(&lc.name, configured_source(config, lc)?),
    };
    let raster_style = lc.style.raster();
    let style: Arc<dyn tessera_image::Style> = build_style(&raster_style, source.info().band_count)
        .map_err(|source| ConfigError::Style {
            layer: lc.name.clone(),
            source,
        })?
        .into();
    let bands = source.info().band_count;
    if let Some(elevation) = lc.formats.iter().find(|f| f.elevation().is_some())
        && bands != 1
    {
        return Err(in_layer(&format!(
            "format {elevation} encodes one band of elevations; the source has {bands} bands (a DEM has one: pick it with `bands: [n]`)"
        )));
    }
    let mut extents = HashMap::new();
    for g in &lc.grids {
        let grid = grids
            .get(g)
            .ok_or_else(|| in_layer(&format!("unknown grid {g:?} (define it under `grids:`)")))?;
        if lc.formats.iter().any(|f| f.is_vector()) && grid.tms.tile_width != grid.tms.tile_height {
            return Err(in_layer(&format!(
                "vector tiles (formats mvt, mlt) need square tiles; grid {g:?} has {}x{}",
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
    let coordinator = registry.coordinators.get(&lc.cache.store).cloned();
    let leases = leases(lc, config, coordinator.as_ref())?;
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
    let layer_grids: Vec<&TileMatrixSet> = lc
        .grids
        .iter()
        .filter_map(|g| grids.get(g).map(|g| &g.tms))
        .collect();
    let mut fingerprint = fingerprint::of_layer(lc, &config.encoding, &layer_grids);
    if !files.is_empty() {
        fingerprint = fingerprint::with_files(&fingerprint, files);
    }
    // An archive: its version (an ETag, a file's identity, size and time)
    // as opened.
    if let Some(version) = source.tile_metadata().and_then(|m| m.version.as_deref()) {
        fingerprint = fingerprint::with_version(&fingerprint, version);
    }
    let base_key = crate::dimension::layer_key(lc.cache.key.as_deref().unwrap_or(&lc.name), values);
    let plain_key = base_key.clone();
    let cache_key = match &cache {
        None => base_key,
        Some(c) => fingerprint::cache_key(c.store.as_ref(), &base_key, &fingerprint)
            .unwrap_or_else(|e| {
                // Tiles under the fingerprinted key are right whatever the
                // store recorded.
                tracing::warn!(
                    layer = %lc.name,
                    error = &e as &dyn std::error::Error,
                    "cannot read or record the layer's fingerprint in its store; keeping its tiles under a key with the fingerprint"
                );
                format!("{base_key}@{fingerprint}")
            }),
    };
    if cache_key != plain_key {
        tracing::info!(
            layer = %lc.name,
            key = %cache_key,
            "the layer's source, style, grids or encoding differ from what the tiles under its plain key were made from: its tiles are kept under this key"
        );
    }
    Ok(Layer {
        name: lc.name.clone(),
        title: lc.title.clone().unwrap_or_else(|| lc.name.clone()),
        description: lc
            .description
            .clone()
            .or_else(|| source.tile_metadata().and_then(|m| m.description.clone())),
        keywords: lc.keywords.clone(),
        attribution: lc
            .attribution
            .clone()
            .or_else(|| source.tile_metadata().and_then(|m| m.attribution.clone())),
        source,
        style,
        ramp: match &raster_style {
            tessera_image::StyleSpec::Ramp(r) => ColorRamp::new(r.stops.clone()).ok(),
            tessera_image::StyleSpec::Hillshade(h) => {
                h.ramp.clone().and_then(|stops| ColorRamp::new(stops).ok())
            }
            tessera_image::StyleSpec::Slope(s) => {
                s.ramp.clone().and_then(|stops| ColorRamp::new(stops).ok())
            }
            tessera_image::StyleSpec::Aspect(a) => {
                a.ramp.clone().and_then(|stops| ColorRamp::new(stops).ok())
            }
            tessera_image::StyleSpec::Expression(e) => tessera_image::band_math::legend_ramp(e),
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
            || raster_style == tessera_image::StyleSpec::default()
                && matches!(
                    lc.source,
                    tessera_source::SourceSpec::Xyz(_)
                        | tessera_source::SourceSpec::Wmts(_)
                        | tessera_source::SourceSpec::Archive(..)
                        | tessera_source::SourceSpec::Gdal(_)
                ),
        max_age_secs: lc.cache.max_age_secs,
        dimensions: Vec::new(),
        at_values: HashMap::new(),
        ranges: None,
        style_name: lc.style_names().swap_remove(0),
        maplibre: match &lc.source {
            tessera_source::SourceSpec::Vector(v) => v.maplibre.clone(),
            _ => None,
        },
        other_styles: Vec::new(),
        last_used: None,
        values: values.to_vec(),
    })
}

/// Builds the layer of an uploaded source and adds it to `registry` while
/// serving (replacing the uploaded layer of that name). Fails when a
/// configured layer has the name.
pub fn add_layer(
    registry: &Registry,
    lc: &LayerConfig,
    config: &Config,
    wrap_source: &Arc<WrapSource>,
) -> Result<(), ConfigError> {
    if config.layers.iter().any(|l| l.name == lc.name) {
        return Err(ConfigError::Invalid(format!(
            "layer {:?} is defined in the configuration",
            lc.name
        )));
    }
    registry.add_layer(layer(registry, lc, config, wrap_source)?);
    Ok(())
}

/// How `lc`'s metatiles are leased: `None` when `cluster.leases` is off or
/// the layer is not cached. Leases need an object store that honours
/// conditional writes; any other store is refused, whether its kind says so
/// (a file, memory or local store) or its coordinator does.
fn leases(
    lc: &LayerConfig,
    config: &Config,
    coordinator: Option<&Arc<Coordinator>>,
) -> Result<Option<Arc<Leases>>, ConfigError> {
    let store = &lc.cache.store;
    if !config.cluster.leases || store == NO_STORE {
        return Ok(None);
    }
    let Some(spec) = config.stores.get(store) else {
        return Ok(None);
    };
    let refused = |what: String| {
        ConfigError::Invalid(format!(
            "layer {:?}: cluster.leases needs an object store that honours conditional writes (s3://, gs://, az://), and store {store:?} is {what}; use such a store for the layer or set cluster.leases: false",
            lc.name
        ))
    };
    match spec {
        StoreSpec::Object(o) if o.url.starts_with("file:") => {
            return Err(refused(format!("local ({})", o.url)));
        }
        StoreSpec::Object(_) => {}
        other => return Err(refused(format!("a {} store", other.kind()))),
    }
    match coordinator {
        Some(c) if c.supports_leases() => Ok(Some(Arc::new(Leases {
            coordinator: c.clone(),
            node: config.cluster.node(),
            ttl: Duration::from_secs_f64(config.cluster.lease_ttl_secs),
            wait: Duration::from_secs_f64(
                config
                    .cluster
                    .lease_wait_secs
                    .unwrap_or(2.0 * config.cluster.lease_ttl_secs),
            ),
        }))),
        _ => Err(refused("one whose conditional writes are off".into())),
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
    grids: &HashMap<String, Arc<Grid>>,
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
        let failed = |source| ConfigError::Store {
            store: name.clone(),
            source,
        };
        let layer_quotas: Vec<(String, u64)> = config
            .layers
            .iter()
            .filter(|l| &l.cache.store == name)
            .filter_map(|l| {
                let max = tessera_store::Size::or(l.cache.max_size, 0);
                (max > 0).then(|| (l.cache.key.clone().unwrap_or_else(|| l.name.clone()), max))
            })
            .collect();
        if let Some(store) = kept.remove(name) {
            // Kept with its quota, which takes the layers' quotas now
            // configured; one without a quota gets one in front if a layer
            // now asks for it (the store itself is never opened twice).
            let store = if store.set_layer_quotas(&layer_quotas).map_err(failed)? {
                store
            } else {
                behind_quota(store, spec.quota_with(layer_quotas), grids).map_err(failed)?
            };
            stores.insert(name.clone(), store);
            continue;
        }
        let backend = timed(spec.open(name).map_err(failed)?);
        let front = spec.front_bytes();
        let store = if front == 0 {
            backend
        } else {
            let bytes = usize::try_from(front).unwrap_or(usize::MAX);
            timed(Arc::new(MemoryStore::new(bytes, Some(backend))))
        };
        // The quota sees every hit and write, the memory's included.
        let store = behind_quota(store, spec.quota_with(layer_quotas), grids).map_err(failed)?;
        stores.insert(name.clone(), store);
    }
    Ok(stores)
}

/// `store` behind a quota with `options` (none: as it is); a quota whose
/// index is new indexes the tiles the store already holds.
fn behind_quota(
    store: Arc<dyn TileStore>,
    options: Option<tessera_store::QuotaOptions>,
    grids: &HashMap<String, Arc<Grid>>,
) -> Result<Arc<dyn TileStore>, tessera_store::StoreError> {
    let Some(options) = options else {
        return Ok(store);
    };
    let name = store.name().to_string();
    let quota = QuotaStore::open(store, options)?;
    if quota.is_new() {
        // A quota set on a store that has tiles: index them.
        let matrix = |grid: &str, z: u8| {
            let m = grids.get(grid)?.tms.matrix(z)?;
            Some((m.matrix_width, m.matrix_height))
        };
        let added = quota.index_existing(&matrix)?;
        if added > 0 {
            tracing::info!(store = %name, tiles = added, "indexed the store's tiles for its quota");
        }
    }
    Ok(Arc::new(quota))
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
    fn leases_are_refused_on_stores_without_conditional_writes() {
        let layer = "layers:\n  - name: a\n    source: { path: /x.tif }\n    cache: { store: s }\n";
        for (store, kind) in [
            ("{ type: file, path: /tmp/t }", "a file store"),
            ("{ type: memory }", "a memory store"),
            (
                "{ type: object, url: 'file:///tmp/t' }",
                "local (file:///tmp/t)",
            ),
        ] {
            let text = format!("cluster: {{ leases: true }}\nstores:\n  s: {store}\n{layer}");
            let config = Config::from_yaml(&text, |_| None).unwrap();
            let err = leases(&config.layers[0], &config, None)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("cluster.leases") && err.contains(kind) && err.contains("\"a\""),
                "{store}: {err}"
            );
        }
        // Leases off: no store is refused.
        let text = format!("stores:\n  s: {{ type: memory }}\n{layer}");
        let config = Config::from_yaml(&text, |_| None).unwrap();
        assert!(leases(&config.layers[0], &config, None).unwrap().is_none());
    }
}
