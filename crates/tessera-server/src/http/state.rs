//! The parts of the service each handler takes (axum `FromRef` substates
//! of [`AppState`]): a handler names what it uses, and nothing reaches the
//! whole [`crate::service::Service`] but the router's builder.

use std::sync::{Arc, Weak};

use axum::extract::FromRef;

use super::AppState;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::registry::Registry;
use crate::render::Renderer;
use crate::sources::Uploads;
use crate::tile_cache::TileCache;

/// The tile endpoints' state: the layers and the cached tile path.
#[derive(Debug, Clone)]
pub struct Tiles {
    /// Layers and grids.
    pub registry: Arc<Registry>,
    /// The cached tile path.
    pub cache: Arc<TileCache>,
}

/// What documents (capabilities, TileJSON, preview) and request parsing
/// read: the layers and the configuration.
#[derive(Debug, Clone)]
pub struct Catalog {
    /// Layers and grids.
    pub registry: Arc<Registry>,
    /// The configuration served.
    pub config: Arc<Config>,
}

/// What WMS needs: the catalog's parts and the renderer.
#[derive(Debug, Clone)]
pub struct Maps {
    /// Layers and grids.
    pub registry: Arc<Registry>,
    /// The configuration served.
    pub config: Arc<Config>,
    /// The render pool.
    pub renderer: Renderer,
}

/// What the health and metrics endpoints read.
#[derive(Debug, Clone)]
pub struct Status {
    /// Layers and stores (the quotas' gauges are read from the stores).
    pub registry: Arc<Registry>,
    /// The render pool (its busy slots).
    pub renderer: Renderer,
    /// The metrics.
    pub metrics: Arc<Metrics>,
}

/// What counting and logging requests needs.
#[derive(Debug, Clone)]
pub struct Requests {
    /// Whether the access log is on (`server.access_log`).
    pub access_log: bool,
    /// The metrics requests are counted in.
    pub metrics: Arc<Metrics>,
}

/// The admin endpoints' state: the catalog, the uploaded sources and the
/// handle that reloads the service.
#[derive(Debug, Clone)]
pub struct Admin {
    /// Layers and grids.
    pub registry: Arc<Registry>,
    /// The configuration served.
    pub config: Arc<Config>,
    /// Uploaded sources, when the admin API takes them.
    pub uploads: Option<Arc<Uploads>>,
    /// The reloadable service, when it is one.
    pub live: Option<Weak<dyn super::Reload>>,
    /// Admin jobs, when the admin API is on.
    pub jobs: Option<Arc<crate::jobs::Jobs>>,
    /// The cached tile path jobs seed through.
    pub tiles: Arc<TileCache>,
    /// The metrics (`/admin/stats` reads them).
    pub metrics: Arc<Metrics>,
}

impl Maps {
    /// The catalog's parts of this state.
    pub fn catalog(&self) -> Catalog {
        Catalog {
            registry: self.registry.clone(),
            config: self.config.clone(),
        }
    }
}

impl FromRef<AppState> for Tiles {
    fn from_ref(state: &AppState) -> Tiles {
        Tiles {
            registry: state.service.registry.clone(),
            cache: state.service.tiles.clone(),
        }
    }
}

/// What the glyph and sprite endpoints read: fonts and ranges made,
/// sprite sets and sheets made.
#[derive(Debug, Clone)]
pub struct Fonts {
    /// Glyph ranges of the configured fonts.
    pub glyphs: Arc<tessera_carto::glyphs::Glyphs>,
    /// The configured sprite sets.
    pub sprites: Arc<tessera_carto::sprites::Sprites>,
}

impl FromRef<AppState> for Fonts {
    fn from_ref(state: &AppState) -> Fonts {
        Fonts {
            glyphs: state.service.glyphs.clone(),
            sprites: state.service.sprites.clone(),
        }
    }
}

/// What style documents read: the catalog's parts and the fonts served
/// (a document's text is pointed at them).
#[derive(Debug, Clone)]
pub struct Styles {
    /// Layers and grids.
    pub registry: Arc<Registry>,
    /// The configuration served.
    pub config: Arc<Config>,
    /// Glyph ranges of the configured fonts.
    pub glyphs: Arc<tessera_carto::glyphs::Glyphs>,
    /// The configured sprite sets.
    pub sprites: Arc<tessera_carto::sprites::Sprites>,
}

impl FromRef<AppState> for Styles {
    fn from_ref(state: &AppState) -> Styles {
        Styles {
            registry: state.service.registry.clone(),
            config: state.service.config.clone(),
            glyphs: state.service.glyphs.clone(),
            sprites: state.service.sprites.clone(),
        }
    }
}

impl FromRef<AppState> for Catalog {
    fn from_ref(state: &AppState) -> Catalog {
        Catalog {
            registry: state.service.registry.clone(),
            config: state.service.config.clone(),
        }
    }
}

impl FromRef<AppState> for Maps {
    fn from_ref(state: &AppState) -> Maps {
        Maps {
            registry: state.service.registry.clone(),
            config: state.service.config.clone(),
            renderer: state.service.renderer.clone(),
        }
    }
}

impl FromRef<AppState> for Status {
    fn from_ref(state: &AppState) -> Status {
        Status {
            registry: state.service.registry.clone(),
            renderer: state.service.renderer.clone(),
            metrics: state.service.metrics.clone(),
        }
    }
}

impl FromRef<AppState> for Requests {
    fn from_ref(state: &AppState) -> Requests {
        Requests {
            access_log: state.service.config.server.access_log,
            metrics: state.service.metrics.clone(),
        }
    }
}

impl FromRef<AppState> for super::guard::Guard {
    fn from_ref(state: &AppState) -> super::guard::Guard {
        super::guard::Guard {
            access: state.service.access.clone(),
            metrics: state.service.metrics.clone(),
        }
    }
}

/// What the registered searches' endpoints read.
#[derive(Debug, Clone)]
pub struct Registered {
    /// Layers (a registered search is one).
    pub registry: Arc<Registry>,
    /// The configuration served.
    pub config: Arc<Config>,
    /// The registered searches, when `searches:` is configured.
    pub searches: Option<Arc<crate::searches::Searches>>,
}

impl FromRef<AppState> for Registered {
    fn from_ref(state: &AppState) -> Registered {
        Registered {
            registry: state.service.registry.clone(),
            config: state.service.config.clone(),
            searches: state.service.searches.clone(),
        }
    }
}

impl FromRef<AppState> for Admin {
    fn from_ref(state: &AppState) -> Admin {
        Admin {
            registry: state.service.registry.clone(),
            config: state.service.config.clone(),
            uploads: state.service.uploads.clone(),
            live: state.live.clone(),
            jobs: state.service.jobs.clone(),
            tiles: state.service.tiles.clone(),
            metrics: state.service.metrics.clone(),
        }
    }
}
