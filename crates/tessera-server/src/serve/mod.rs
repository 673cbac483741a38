//! The serving process: `tessera serve` as a library call. [`Serving`]
//! reads the configuration and builds the service; [`Serving::run`] listens,
//! serves through [`live::Live`] (which swaps the service whole on a
//! reload), resumes admin jobs, and starts the background work that follows
//! reloads: generations of shared caches, dimension values and PostGIS
//! tables looked at again, replaced archives ([`archive_watch`]), the JWKS,
//! SIGHUP ([`refresh`]). It ends on SIGINT or SIGTERM.

pub mod archive_watch;
pub mod live;
mod refresh;

use std::time::Duration;

use crate::config::{Config, ConfigError};
use crate::http::transport::listener::{self, ListenerSettings};
use crate::service::Service;
use live::{ConfigSource, Live};

/// Why serving stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The configuration could not be read, or its layers or stores not
    /// opened.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The address could not be listened on.
    #[error("cannot listen on {address}")]
    Listen {
        /// The address, as configured.
        address: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// Accepting or serving connections failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// What the command line sets over the configuration file, applied again
/// on every reload.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--listen`, over `server.listen`.
    pub listen: Option<String>,
    /// `--book`, over `server.book`.
    pub book: Option<std::path::PathBuf>,
}

impl Overrides {
    /// Sets what is overridden in `config`.
    pub fn apply(&self, config: &mut Config) {
        if let Some(listen) = &self.listen {
            config.server.listen.clone_from(listen);
        }
        if let Some(book) = &self.book {
            config.server.book.clone_from(book);
        }
    }
}

/// A service ready to be served: read from its configuration's source,
/// with the command line's [`Overrides`] applied.
#[derive(Debug)]
pub struct Serving {
    service: Service,
    source: ConfigSource,
    overrides: Overrides,
    grace: Duration,
}

impl Serving {
    /// Reads the configuration from `source` (warning when tiles would be
    /// cached in memory only), applies `overrides` and builds the service.
    /// Blocking: it opens every layer's source.
    pub fn open(source: ConfigSource, overrides: Overrides) -> Result<Serving, ConfigError> {
        let mut config = source.load()?;
        warn_if_memory_only(&config);
        overrides.apply(&mut config);
        let grace = Duration::try_from_secs_f64(config.server.shutdown_grace_secs)
            .unwrap_or(Duration::from_secs(10));
        Ok(Serving {
            service: Service::serving(config)?,
            source,
            overrides,
            grace,
        })
    }

    /// How long work still running at shutdown may take
    /// (`server.shutdown_grace_secs`): what does not stop within it is left
    /// behind rather than holding the exit.
    pub fn grace(&self) -> Duration {
        self.grace
    }

    /// Listens and serves until SIGINT or SIGTERM; connection threads
    /// default to `cores`.
    pub async fn run(self, cores: usize) -> Result<(), ServeError> {
        serve(self.service, self.source, self.overrides, cores).await
    }
}

async fn serve(
    service: Service,
    source: ConfigSource,
    overrides: Overrides,
    cores: usize,
) -> Result<(), ServeError> {
    let listen = service.config.server.listen.clone();
    let listener = tokio::net::TcpListener::bind(&listen)
        .await
        .map_err(|source| ServeError::Listen {
            address: listen.clone(),
            source,
        })?;
    let addr = listener.local_addr()?;
    let settings = listener_settings(&service.config.server, cores);
    let (live, routers) = Live::start(service, source, overrides);
    let state = live.current();
    // Admin jobs that were running when the process stopped go on.
    if let Some(jobs) = &state.jobs {
        let resumed = jobs.resume(&state.registry, &state.tiles, &state.config.cluster.node());
        if !resumed.is_empty() {
            tracing::info!(jobs = resumed.join(", "), "resumed admin jobs");
        }
    }
    let first = state
        .registry
        .layers()
        .first()
        .map(|l| l.name.clone())
        .unwrap_or_default();
    tracing::info!(
        layers = state.registry.layers().len(),
        "tessera listening on http://{addr}/"
    );
    println!(
        "tessera is serving {} layer(s) on http://{addr}/",
        state.registry.layers().len()
    );
    println!("preview: http://{addr}/preview/{first}");
    let every = std::time::Duration::from_secs_f64(state.config.cluster.generation_check_secs);
    // A reload keeps the metrics: the ones of the first service are the
    // ones every later one counts into.
    let metrics = state.metrics.clone();
    drop(state);
    if !every.is_zero() {
        let watched = live.clone();
        tokio::spawn(crate::cluster::watch_generations(
            move || watched.current().registry.layers(),
            metrics,
            every,
        ));
    }
    tokio::spawn(refresh::refresh_dimension_values(live.clone()));
    tokio::spawn(refresh::refresh_found_tables(live.clone()));
    tokio::spawn(archive_watch::watch_archives(live.clone()));
    tokio::spawn(refresh::refresh_jwks(live.clone()));
    tokio::spawn(refresh::reload_on_hangup(live));
    listener::serve(listener, routers, settings, shutdown_signal()).await?;
    Ok(())
}

/// Says so when a layer caches in memory only: its tiles are lost on
/// restart, which surprises users of file-based caches.
fn warn_if_memory_only(config: &Config) {
    let memory: Vec<&str> = config
        .layers
        .iter()
        .filter(|l| {
            matches!(
                config.stores.get(&l.cache.store),
                Some(tessera_store::StoreSpec::Memory(_))
            )
        })
        .map(|l| l.name.as_str())
        .collect();
    if !memory.is_empty() {
        tracing::warn!(
            layers = memory.join(", "),
            "tiles are cached in memory only and lost on restart; add a file, mbtiles or journal store under `stores:` to keep them"
        );
    }
}

/// Connection bounds from the `server:` section, with the open-file limit
/// raised to its hard limit first (the default connection limit follows it;
/// connection threads default to `cores`).
fn listener_settings(server: &crate::config::ServerConfig, cores: usize) -> ListenerSettings {
    let open_files = match listener::raise_open_file_limit() {
        Ok((before, after)) => {
            if after > before {
                tracing::info!(before, after, "raised the open-file limit");
            }
            after
        }
        Err(e) => {
            tracing::warn!(
                error = &e as &dyn std::error::Error,
                "cannot read or raise the open-file limit"
            );
            1024
        }
    };
    let seconds = |s: f64| Duration::try_from_secs_f64(s).unwrap_or(Duration::MAX);
    ListenerSettings {
        max_connections: match server.max_connections {
            0 => listener::default_max_connections(open_files),
            n => n,
        },
        header_timeout: seconds(server.header_timeout_secs),
        idle_timeout: seconds(server.idle_timeout_secs),
        shutdown_grace: seconds(server.shutdown_grace_secs),
        connection_threads: match server.connection_threads {
            0 => cores,
            n => n,
        },
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            s.recv().await;
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutting down");
}
