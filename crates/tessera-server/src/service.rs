//! The tile service: layers, renderer, tile cache and metrics, built once
//! from a configuration and shared by every protocol edge and every batch
//! command.
//!
//! Two modes. [`Mode::Serving`] opens every layer and store, starts the
//! encode pool that saves the siblings of a rendered metatile, and opens the
//! uploaded-sources store of the admin API. [`Mode::Batch`] (seed, truncate,
//! export) opens only the layer it was asked for, its grids and its store,
//! starts no pool (seeding encodes every tile inline) and no uploads: a
//! broken source of another layer does not stop the command, and nothing
//! runs that the command does not use.

use std::sync::Arc;
use std::time::Duration;

use tessera_carto::glyphs::{FontLibrary, Glyphs};
use tessera_carto::sprites::{Sprites, Variant};

use crate::assemble::{self, WrapSource};
use crate::auth::Access;
use crate::config::{Config, ConfigError};
use crate::jobs::Jobs;
use crate::metrics::Metrics;
pub use crate::model::LayerSelection;
use crate::registry::Registry;
use crate::render::{RenderLimits, Renderer};
use crate::searches::Searches;
use crate::sources::Uploads;
use crate::tile_cache::{TileCache, TileCacheSettings};

/// What a [`Service`] is built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Answering requests: every layer, the encode pool, uploads.
    Serving,
    /// A command over one layer's tiles: that layer only, no pool, no
    /// uploads.
    Batch,
}

/// Layers, renderer, tile cache and metrics: everything a request or a
/// batch command works with.
#[derive(Debug)]
pub struct Service {
    /// Layers, grids and stores.
    pub registry: Arc<Registry>,
    /// The render pool.
    pub renderer: Renderer,
    /// The cached tile path (locks; the encode pool when serving).
    pub tiles: Arc<TileCache>,
    /// Metrics served at `/metrics`.
    pub metrics: Arc<Metrics>,
    /// The configuration the service was built from.
    pub config: Arc<Config>,
    /// Uploaded sources (the admin API), when serving with `admin:`.
    pub uploads: Option<Arc<Uploads>>,
    /// The mode it was built in.
    pub mode: Mode,
    /// Access control on reads, when the config has an `auth:` section.
    pub access: Option<Arc<Access>>,
    /// Admin jobs (`/admin/jobs`), when serving with `admin:`; a reload
    /// keeps them while their directory is unchanged.
    pub jobs: Option<Arc<Jobs>>,
    /// MapLibre glyph ranges of the bundled and configured fonts; a reload
    /// keeps them (and the ranges made) while `fonts:` is unchanged.
    pub glyphs: Arc<Glyphs>,
    /// MapLibre sprite sets (`sprites:`).
    pub sprites: Arc<Sprites>,
    /// STAC searches registered at run time (`searches:`), when serving
    /// with that section.
    pub searches: Option<Arc<Searches>>,
}

impl Service {
    /// The serving service: configures GDAL and opens every layer's source
    /// and every store.
    pub fn serving(config: Config) -> Result<Service, ConfigError> {
        Service::open(
            config,
            Mode::Serving,
            LayerSelection::All,
            &assemble::no_wrap(),
        )
    }

    /// The batch service for commands over `layer`'s tiles.
    pub fn batch(config: Config, layer: &str) -> Result<Service, ConfigError> {
        Service::open(
            config,
            Mode::Batch,
            LayerSelection::Only(layer),
            &assemble::no_wrap(),
        )
    }

    /// Builds a service; `wrap_source` may wrap each layer's opened source
    /// (tests count, delay or block reads with it).
    pub fn open(
        config: Config,
        mode: Mode,
        layers: LayerSelection<'_>,
        wrap_source: &Arc<WrapSource>,
    ) -> Result<Service, ConfigError> {
        Service::build(config, mode, layers, wrap_source, None)
    }

    /// A serving service for `config` that takes over what did not change
    /// from this one: the metrics, every store whose spec is unchanged (a
    /// journal or MBTiles is not reopened), the render slots and the tile
    /// cache's locks when their settings are unchanged, and the uploads
    /// store. Sources are opened again. Fails, leaving this service as it
    /// is, when `config` cannot be served.
    pub fn reload(&self, config: Config) -> Result<Service, ConfigError> {
        Service::build(
            config,
            Mode::Serving,
            LayerSelection::All,
            &assemble::no_wrap(),
            Some(self),
        )
    }

    fn build(
        mut config: Config,
        mode: Mode,
        layers: LayerSelection<'_>,
        wrap_source: &Arc<WrapSource>,
        previous: Option<&Service>,
    ) -> Result<Service, ConfigError> {
        assemble::discover(&mut config)?;
        tessera_source::configure_gdal(&config.gdal).map_err(ConfigError::Gdal)?;
        let metrics = previous.map_or_else(|| Arc::new(Metrics::new()), |p| p.metrics.clone());
        let kept_stores = previous
            .map(|p| {
                p.registry
                    .stores
                    .iter()
                    .filter(|(name, _)| p.config.stores.get(*name) == config.stores.get(*name))
                    .map(|(name, store)| (name.clone(), store.clone()))
                    .collect()
            })
            .unwrap_or_default();
        let registry = assemble::registry(&config, &metrics, wrap_source, layers, kept_stores)?;
        let limits = RenderLimits {
            max_concurrent: config.server.max_concurrent_renders,
            map_share: config.server.wms_render_share,
            timeout: Duration::from_secs_f64(config.server.render_timeout_secs),
            max_source_pixels: config.limits.max_source_pixels,
        };
        let settings = TileCacheSettings {
            lock_timeout: Duration::from_secs_f64(config.cache.lock_timeout_secs),
            metatile_threads: match mode {
                Mode::Serving => config.cache.metatile_threads,
                Mode::Batch => 0,
            },
            encode_queue_len: config.cache.encode_queue_len,
            idle_siblings: match mode {
                Mode::Serving => config.cache.idle_siblings,
                Mode::Batch => false,
            },
        };
        let (renderer, tiles) = match previous {
            Some(p)
                if p.renderer.limits() == &limits
                    && p.renderer.encoding() == &config.encoding
                    && p.tiles.settings() == &settings =>
            {
                (p.renderer.clone(), p.tiles.clone())
            }
            _ => {
                let renderer = Renderer::new(limits, config.encoding, metrics.clone());
                let tiles = TileCache::new(renderer.clone(), metrics.clone(), settings);
                (renderer, Arc::new(tiles))
            }
        };
        let uploads = match (&config.admin, mode, layers) {
            (Some(admin), Mode::Serving, _) if admin.uploads().is_some() => {
                let uploads = match previous.and_then(|p| p.uploads.clone()) {
                    Some(kept) if &kept.config == admin => kept,
                    _ => Arc::new(
                        Uploads::open(admin)?
                            .ok_or_else(|| ConfigError::Invalid("admin: uploads are off".into()))?,
                    ),
                };
                for (name, file) in uploads.recorded()? {
                    if let Err(e) =
                        uploads.serve_as_layer(&registry, &name, &file, &config, wrap_source)
                    {
                        tracing::error!(source = %name, error = &e as &dyn std::error::Error, "an uploaded source cannot be served");
                    }
                }
                Some(uploads)
            }
            (Some(admin), Mode::Batch, LayerSelection::Only(name))
                if registry.layer(name).is_none() =>
            {
                // The layer may be an uploaded source: open just that one.
                if let Some(uploads) = Uploads::open(admin)?
                    && let Some(file) = uploads.recorded()?.get(name)
                {
                    uploads.serve_as_layer(&registry, name, file, &config, wrap_source)?;
                }
                None
            }
            _ => None,
        };
        let jobs = match (&config.admin, mode) {
            (Some(admin), Mode::Serving) => {
                let dir = admin.jobs_dir_path();
                match previous.and_then(|p| p.jobs.clone()) {
                    Some(kept) if kept.dir() == dir => Some(kept),
                    _ => {
                        let threads = std::thread::available_parallelism().map_or(1, usize::from);
                        let jobs = Jobs::open(&dir, threads).map_err(|e| {
                            ConfigError::Invalid(format!("admin.jobs_dir {}: {e}", dir.display()))
                        })?;
                        Some(Arc::new(jobs))
                    }
                }
            }
            _ => None,
        };
        let access = match &config.auth {
            Some(auth) => {
                let access = Access::new(auth).map_err(ConfigError::Invalid)?;
                // A reload keeps the keys of an unchanged JWKS.
                if let (Some(new), Some(old)) = (
                    access.verifier(),
                    previous
                        .and_then(|p| p.access.as_ref())
                        .and_then(|a| a.verifier()),
                ) {
                    new.keep_keys_of(old);
                }
                Some(Arc::new(access))
            }
            None => None,
        };
        let glyphs = match previous {
            Some(p)
                if p.config.fonts == config.fonts
                    && p.config.limits.max_font_bytes == config.limits.max_font_bytes
                    && p.config.limits.glyph_ranges_kept == config.limits.glyph_ranges_kept =>
            {
                p.glyphs.clone()
            }
            _ => Arc::new(load_glyphs(&config)?),
        };
        let sprites = Arc::new(load_sprites(&config, mode)?);
        let wanted = match layers {
            LayerSelection::Only(name) => name.starts_with(crate::searches::LAYER_PREFIX),
            LayerSelection::All => mode == Mode::Serving,
        };
        let searches = match Searches::open(&config)? {
            Some(searches) if wanted => {
                searches.restore(&registry, &config, wrap_source);
                Some(Arc::new(searches))
            }
            _ => None,
        };
        let registry = Arc::new(registry);
        if let (Some(searches), Mode::Serving) = (&searches, mode) {
            Searches::keep_swept(searches, &registry);
        }
        Ok(Service {
            glyphs,
            sprites,
            access,
            registry,
            searches,
            renderer,
            tiles,
            metrics,
            config: Arc::new(config),
            uploads,
            mode,
            jobs,
        })
    }
}

/// The glyph ranges of the configured fonts (`fonts:`), warnings logged.
fn load_glyphs(config: &Config) -> Result<Glyphs, ConfigError> {
    let (library, warnings) = FontLibrary::load(&config.fonts, config.limits.max_font_bytes)
        .map_err(|e| ConfigError::Invalid(format!("fonts: {e}")))?;
    for warning in warnings {
        tracing::warn!("fonts: {warning}");
    }
    // Labels drawn on the server fall back across the same fonts.
    tessera_carto::text::use_fonts(library.label_fonts());
    Ok(Glyphs::new(library, config.limits.glyph_ranges_kept))
}

/// The sprite sets of `sprites:`; when serving, each made once now, so
/// that an SVG left out is named at start (a folder that cannot be read,
/// or holds no icon, stops the start).
fn load_sprites(config: &Config, mode: Mode) -> Result<Sprites, ConfigError> {
    let sprites = Sprites::new(&config.sprites, config.limits.sprites());
    if mode == Mode::Serving {
        for name in sprites.names() {
            let sheet = sprites
                .sheet(
                    name,
                    Variant {
                        ratio: 1,
                        sdf: false,
                    },
                )
                .map_err(|e| ConfigError::Invalid(format!("sprites: {e}")))?;
            for warning in &sheet.warnings {
                tracing::warn!(sprites = name, "{warning}");
            }
        }
    }
    Ok(sprites)
}
