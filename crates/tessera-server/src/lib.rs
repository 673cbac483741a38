//! The tessera server: configuration, the registry of layers and grids, the
//! render path and the HTTP endpoints (XYZ/TMS, WMTS, WMS, TileJSON,
//! preview, health).

pub mod config;
pub mod demo;
pub mod encode_pool;
pub mod export;
pub mod http;
pub mod locks;
pub mod metatile;
pub mod metrics;
pub mod registry;
pub mod render;
pub mod seed;
pub mod sources;
pub mod tile_cache;

use std::sync::Arc;
use std::time::Duration;

pub use config::{Config, ConfigError};
pub use tessera_grid;
pub use tessera_image;
pub use tessera_store;

use http::AppState;
use metrics::Metrics;
use registry::{Registry, WrapSource};
use render::Renderer;
use tile_cache::{TileCache, TileCacheSettings};

/// Builds the application state from a configuration: configures GDAL and
/// opens every layer's source and every store.
pub fn build_state(config: Config) -> Result<AppState, ConfigError> {
    build_state_with(config, &|_, source| source)
}

/// [`build_state`], letting `wrap_source` wrap each layer's source (tests
/// count, delay or block reads with it).
pub fn build_state_with(config: Config, wrap_source: &WrapSource) -> Result<AppState, ConfigError> {
    tessera_source::configure_gdal(&config.gdal)
        .map_err(|e| ConfigError::Invalid(format!("gdal: {e}")))?;
    let metrics = Arc::new(Metrics::new());
    let registry = Registry::load(&config, &metrics, wrap_source)?;
    let renderer = Renderer::new(
        config.server.max_concurrent_renders,
        Duration::from_secs_f64(config.server.render_timeout_secs),
        config.encoding,
    );
    let tiles = TileCache::new(
        renderer.clone(),
        metrics.clone(),
        TileCacheSettings {
            lock_timeout: Duration::from_secs_f64(config.cache.lock_timeout_secs),
            metatile_threads: config.cache.metatile_threads,
            encode_queue_len: config.cache.encode_queue_len,
        },
    );
    let uploads = match &config.admin {
        Some(admin) => {
            let uploads = sources::Uploads::open(admin)?;
            let stores: Vec<&str> = registry.stores.keys().map(String::as_str).collect();
            for (name, file) in uploads.recorded()? {
                let layer = uploads
                    .layer_config(&name, &file, &stores)
                    .and_then(|lc| registry.build_layer(&lc, &config, wrap_source))
                    .and_then(|layer| registry.add_layer(layer, &config));
                if let Err(e) = layer {
                    tracing::error!(source = %name, error = %e, "an uploaded source cannot be served");
                }
            }
            Some(Arc::new(uploads))
        }
        None => None,
    };
    Ok(AppState {
        registry: Arc::new(registry),
        renderer,
        tiles: Arc::new(tiles),
        metrics,
        config: Arc::new(config),
        uploads,
    })
}
