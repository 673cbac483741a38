//! The tessera server: one tile [`service::Service`] (layers, renderer,
//! tile cache, metrics) built from a configuration, the batch work over a
//! [`plan::TilePlan`] (seed, export), and the HTTP edges (XYZ/TMS, WMTS,
//! WMS, TileJSON, preview, admin, health) that wrap the service.

pub mod archive_objects;
pub mod assemble;
pub mod auth;
pub mod cluster;
pub mod config;
pub mod demo;
pub mod dimension;
pub mod encode_pool;
pub mod export;
pub mod fingerprint;
pub mod http;
pub mod jobs;
pub mod locks;
pub mod metatile;
pub mod metrics;
pub mod mlt;
pub mod model;
pub mod plan;
pub mod quick;
pub mod registry;
pub mod render;
pub mod searches;
pub mod seeding;
pub mod serve;
pub mod service;
pub mod sources;
pub mod suggest;
pub mod throttle;
pub mod tile_cache;
pub mod truncate;

pub use config::{Config, ConfigError};
pub use service::{LayerSelection, Mode, Service};
pub use tessera_archive;
pub use tessera_grid;
pub use tessera_image;
pub use tessera_store;
