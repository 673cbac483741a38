//! Reloading without a restart: the service being served, swapped whole on
//! `SIGHUP` or `POST /admin/reload`.
//!
//! A reload reads the config file again, checks it completely and builds
//! the next [`Service`] from it, taking over what did not change (stores,
//! render slots, locks, metrics; see [`Service::reload`]). Only then is the
//! router that serves it published: each request is routed by the router
//! current when it arrives and keeps that service to its end, so requests
//! in flight finish on the config they started with. A config that fails
//! leaves the current one serving. `server.listen` cannot change without a
//! restart.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use tokio::sync::watch;

use super::Overrides;
use crate::config::{Config, ConfigError};
use crate::http::{App, AppState, Reload};
use crate::service::Service;

/// Where the configuration comes from, read again on each reload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    /// The embedded demo configuration.
    Demo,
    /// A configuration file.
    File(PathBuf),
    /// Files, archives and databases named on the command line, one layer
    /// each ([`crate::quick`]); `watch` looks for a database's new tables
    /// every few seconds.
    Rasters(Vec<PathBuf>, bool),
}

impl ConfigSource {
    /// Reads the configuration.
    pub fn load(&self) -> Result<Config, ConfigError> {
        match self {
            ConfigSource::Demo => crate::demo::demo_config(),
            ConfigSource::File(path) => Config::from_file(path),
            ConfigSource::Rasters(paths, watch) => crate::quick::config_for_files(paths, *watch),
        }
        .and_then(|mut config| {
            crate::assemble::discover(&mut config)?;
            Ok(config)
        })
    }
}

/// The service being served and how to build the next one.
#[derive(Debug)]
pub struct Live {
    routers: watch::Sender<Arc<App>>,
    /// The current service; the lock also makes reloads take turns.
    current: Mutex<Arc<Service>>,
    source: ConfigSource,
    /// What the command line sets over the file (`--listen`, `--book`).
    overrides: Overrides,
    /// Where the listener listens.
    listen: String,
    me: Weak<Live>,
}

impl Live {
    /// Serves `service`; a reload reads `source` again, applies
    /// `overrides` to it, and keeps listening on `service`'s
    /// `server.listen`. Returns the handle and the routers the listener
    /// takes each request's router from.
    pub fn start(
        service: Service,
        source: ConfigSource,
        overrides: Overrides,
    ) -> (Arc<Live>, watch::Receiver<Arc<App>>) {
        let listen = service.config.server.listen.clone();
        let service = Arc::new(service);
        let live = Arc::new_cyclic(|me: &Weak<Live>| {
            let reload: Weak<dyn Reload> = me.clone();
            let first = Arc::new(App::new(AppState::reloadable(service.clone(), reload)));
            Live {
                routers: watch::Sender::new(first),
                current: Mutex::new(service),
                source,
                overrides,
                listen,
                me: me.clone(),
            }
        });
        let routers = live.routers.subscribe();
        (live, routers)
    }

    /// The service requests are routed to now.
    pub fn current(&self) -> Arc<Service> {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Where the configuration comes from.
    pub fn source(&self) -> &ConfigSource {
        &self.source
    }
}

impl Reload for Live {
    /// Reads the config again and, when it is valid and its layers and
    /// stores open, serves it. A config without some of the layers served
    /// now is refused unless `remove_layers` (a file cut short, or written
    /// in place while it was read, must not drop layers): write a new
    /// config to another name and rename it over the old one. Blocking (it
    /// opens sources): call it from a blocking thread.
    fn reload(&self, remove_layers: bool) -> Result<usize, ConfigError> {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        let mut config = self.source.load()?;
        if !remove_layers {
            let dropped: Vec<&str> = current
                .config
                .layers
                .iter()
                .map(|l| l.name.as_str())
                .filter(|name| !config.layers.iter().any(|l| l.name == *name))
                .collect();
            if !dropped.is_empty() {
                return Err(ConfigError::Invalid(format!(
                    "the new configuration drops layers {} that are served now; if that is meant, \
                     reload with POST /admin/reload?remove_layers=true or restart (write a config \
                     to another name and rename it over the old one, so that a reload never \
                     reads a file half written)",
                    dropped.join(", ")
                )));
            }
        }
        self.overrides.apply(&mut config);
        if config.server.listen != self.listen {
            tracing::warn!(
                configured = %config.server.listen,
                listening = %self.listen,
                "server.listen changed: a restart is needed to listen elsewhere; still listening on the old address"
            );
        }
        config.server.listen.clone_from(&self.listen);
        let refused_options: Vec<String> = config.gdal.config_options.keys().cloned().collect();
        let next = match current.reload(config) {
            Ok(next) => Arc::new(next),
            Err(e) => {
                // Building the next service set GDAL's process-wide options
                // from the refused config: drop the ones only it had and put
                // the serving config's back.
                for key in refused_options
                    .iter()
                    .filter(|k| !current.config.gdal.config_options.contains_key(*k))
                {
                    if let Err(e) = gdal::config::clear_config_option(key) {
                        tracing::warn!(
                            key,
                            error = &e as &dyn std::error::Error,
                            "a GDAL option of the refused config could not be cleared"
                        );
                    }
                }
                if let Err(restore) = tessera_source::configure_gdal(&current.config.gdal) {
                    tracing::error!(
                        error = &restore as &dyn std::error::Error,
                        "GDAL's settings could not be restored after a refused reload"
                    );
                }
                return Err(e);
            }
        };
        let layers = next.registry.layers().len();
        // The old router is dropped once the requests it routed are done.
        let reload: Weak<dyn Reload> = self.me.clone();
        drop(
            self.routers
                .send_replace(Arc::new(App::new(AppState::reloadable(
                    next.clone(),
                    reload,
                )))),
        );
        *current = next;
        tracing::info!(layers, "configuration reloaded");
        Ok(layers)
    }
}
