//! The tessera server: configuration, the registry of layers and grids, the
//! render path and the HTTP endpoints (XYZ/TMS, WMTS, WMS, TileJSON,
//! preview, health).

pub mod config;
pub mod demo;
pub mod http;
pub mod registry;
pub mod render;

use std::sync::Arc;
use std::time::Duration;

pub use config::{Config, ConfigError};

use http::AppState;
use registry::Registry;
use render::Renderer;

/// Builds the application state from a configuration: configures GDAL and
/// opens every layer's source.
pub fn build_state(config: Config) -> Result<AppState, ConfigError> {
    tessera_source::configure_gdal(&config.gdal)
        .map_err(|e| ConfigError::Invalid(format!("gdal: {e}")))?;
    let registry = Registry::load(&config)?;
    let renderer = Renderer::new(
        config.server.max_concurrent_renders,
        Duration::from_secs_f64(config.server.render_timeout_secs),
        config.encoding,
    );
    Ok(AppState {
        registry: Arc::new(registry),
        renderer,
        config: Arc::new(config),
    })
}
