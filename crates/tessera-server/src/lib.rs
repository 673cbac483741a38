//! The tessera server: one tile [`service::Service`] (layers, renderer,
//! tile cache, metrics) built from a configuration, the batch work over a
//! [`plan::TilePlan`] (seed, export), and the HTTP edges (XYZ/TMS, WMTS,
//! WMS, TileJSON, preview, admin, health) that wrap the service.

pub mod config;
pub mod demo;
pub mod encode_pool;
pub mod export;
pub mod http;
pub mod locks;
pub mod metatile;
pub mod metrics;
pub mod plan;
pub mod registry;
pub mod render;
pub mod seed;
pub mod service;
pub mod sources;
pub mod tile_cache;

pub use config::{Config, ConfigError};
pub use service::{LayerSelection, Mode, Service};
pub use tessera_grid;
pub use tessera_image;
pub use tessera_store;

/// Displays an error with every cause beneath it on one line
/// (`outer: cause: root cause`), for logs.
pub fn error_chain<'a>(error: &'a (dyn std::error::Error + 'static)) -> ErrorChain<'a> {
    ErrorChain(error)
}

/// See [`error_chain`].
#[derive(Debug, Clone, Copy)]
pub struct ErrorChain<'a>(&'a (dyn std::error::Error + 'static));

impl std::fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut cause = self.0.source();
        while let Some(e) = cause {
            write!(f, ": {e}")?;
            cause = e.source();
        }
        Ok(())
    }
}
