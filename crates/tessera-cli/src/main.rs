//! `tessera`: a map tile server and tile cache in one binary.

use std::path::PathBuf;
use std::process::ExitCode;

mod area;
mod export;
mod progress;
mod runtime;
mod seed;
mod truncate;

use clap::{Parser, Subcommand};
use runtime::{CliError, CliResult};
use std::time::Duration;

use tessera_server::http::live::ConfigSource;
use tessera_server::http::transport::listener::ListenerSettings;
use tessera_server::{Config, Service, demo, http};

#[derive(Debug, Parser)]
#[command(
    name = "tessera",
    version,
    about = "A map tile server and tile cache: renders GDAL rasters and serves XYZ/TMS, WMTS, WMS and TileJSON.",
    long_about = None
)]
struct Cli {
    /// Log line format: `text`, or `json` (one object per line, for log
    /// collectors). Filter with TESSERA_LOG or RUST_LOG, e.g.
    /// `info,tessera::access=off`.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "TESSERA_LOG_FORMAT")]
    log_format: LogFormat,
    /// Log lines `serve` queues for its log writer; past them lines are
    /// dropped and counted, never waited for.
    #[arg(long, global = true, default_value_t = 65_536, env = "TESSERA_LOG_QUEUE_LINES",
          value_parser = clap::value_parser!(u32).range(1..))]
    log_queue_lines: u32,
    #[command(subcommand)]
    command: Command,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    /// Human-readable lines; colours only when stderr is a terminal.
    Text,
    /// One JSON object per line.
    Json,
}

/// Sends logs to stderr in `format`, filtered by `TESSERA_LOG` (or
/// `RUST_LOG`, default `info`).
///
/// With `queue_lines`, lines are formatted on the thread that logs them
/// and written by a thread of their own, in batches: a request never waits
/// for stderr. Access-log lines go to a writer of their own that writes
/// them in batches of up to 50 ms or 64 KiB (`http::transport::access_lines`), the others to
/// tracing-appender's. Each queue holds at most that many lines; past it
/// lines are dropped and counted (`tessera_log_lines_dropped_total`),
/// never waited for. Without it (batch commands, which may exit at once
/// on Ctrl-C), each line is written where it is logged. The guards
/// returned write what is queued when dropped.
fn init_logging(format: LogFormat, queue_lines: Option<usize>) -> Option<LogGuards> {
    use std::io::IsTerminal;
    let filter = ["TESSERA_LOG", "RUST_LOG"]
        .into_iter()
        .find_map(|var| tracing_subscriber::EnvFilter::try_from_env(var).ok())
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new("info"));
    let ansi = std::io::stderr().is_terminal() && format == LogFormat::Text;
    let Some(lines) = queue_lines else {
        let builder = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_ansi(ansi);
        match format {
            LogFormat::Text => builder.init(),
            LogFormat::Json => builder.json().init(),
        }
        return None;
    };
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .buffered_lines_limit(lines)
        .lossy(true)
        .thread_name("tessera-log")
        .finish(std::io::BufWriter::with_capacity(
            LOG_BATCH_BYTES,
            std::io::stderr(),
        ));
    // Access-log lines are formatted by the server itself (the same
    // layout, a fraction of the cost) and written in batches by a thread
    // of their own. Each batch is written whole under stderr's lock, so
    // the other writer's lines never land inside it.
    let started = tessera_server::http::transport::access_lines::Writer::start(
        lines,
        Box::new(|batch| {
            let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), batch);
        }),
    )
    .map_err(|e| {
        // Access lines then go through tracing, like any other line.
        eprintln!("cannot start the access-log writer ({e}); access lines go through tracing");
    })
    .ok();
    let access_lines = started.as_ref().map(|(lines, _)| lines.clone());
    if let Some(lines) = &access_lines {
        tessera_server::http::transport::access::write_lines_to(
            format == LogFormat::Json,
            lines.clone(),
        );
    }
    let dropped = writer.error_counter();
    tessera_server::metrics::count_dropped_log_lines(std::sync::Arc::new(move || {
        dropped.dropped_lines() as u64
            + access_lines.as_ref().map_or(
                0,
                tessera_server::http::transport::access_lines::Lines::dropped,
            )
    }));
    let access = started.map(|(_, writer)| writer);
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(ansi);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
    Some(LogGuards {
        _access: access,
        _other: guard,
    })
}

/// Kept while the process runs; dropped, they write the lines still queued.
struct LogGuards {
    // Dropped first: its last lines are written before the other writer's.
    _access: Option<tessera_server::http::transport::access_lines::Writer>,
    _other: tracing_appender::non_blocking::WorkerGuard,
}

/// The most bytes of log lines written to stderr at once.
const LOG_BATCH_BYTES: usize = 64 * 1024;

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve tiles and maps over HTTP.
    ///
    /// With files, serves each as a layer named after it (a DEM
    /// through a stretched grey ramp). Without files or --config, serves
    /// the embedded demo layers (Natural Earth relief, a Luxembourg DEM with
    /// hillshade, a Landsat 7 scene).
    Serve {
        /// YAML configuration file (`${ENV}` and `${ENV:-default}` are substituted).
        #[arg(short, long, env = "TESSERA_CONFIG", conflicts_with = "files")]
        config: Option<PathBuf>,
        /// Files to serve, one layer each, instead of a config: rasters
        /// GDAL reads, PMTiles and MBTiles archives, vector files, STAC
        /// catalogues and `postgresql://` URLs (a table each). A single
        /// `.yaml`/`.yml` file is read as the configuration, as with -c.
        files: Vec<PathBuf>,
        /// Address to listen on (HOST:PORT), overriding `server.listen` [default: 127.0.0.1:8080].
        #[arg(short, long, env = "TESSERA_LISTEN", value_parser = tessera_server::config::listen_address)]
        listen: Option<String>,
        /// With a database URL among the files: list its tables again every
        /// few seconds, serving new ones and dropping removed ones.
        #[arg(long)]
        watch: bool,
    },
    /// Check a configuration file: parse it, open every source, then exit.
    Check {
        /// YAML configuration file.
        #[arg(value_name = "CONFIG")]
        config_file: Option<PathBuf>,
        /// YAML configuration file, as the first argument.
        #[arg(short, long, env = "TESSERA_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Render a layer's tiles into its cache, metatile by metatile.
    ///
    /// Exits 0 only when every tile is durable in the store. Tiles already
    /// stored are skipped, so a seed that was stopped or killed can simply be
    /// run again. Ctrl-C finishes the metatiles in flight and exits 130.
    Seed(seed::SeedArgs),
    /// Remove a layer's cached tiles by zoom, bbox or polygon.
    ///
    /// Deletes computed keys only (whole packs on object stores, in batches,
    /// and rewrites packs on the area's border); nothing is listed.
    Truncate(truncate::TruncateArgs),
    /// Write a layer's cached tiles into one PMTiles or MBTiles archive.
    ///
    /// The archive is built in a temporary file and then renamed into place
    /// or streamed to object storage as a multipart upload (aborted on any
    /// failure, read back and checked unless --no-verify). Only Web Mercator
    /// (WebMercatorQuad-shaped) grids can be exported.
    Export(export::ExportArgs),
    /// Print the embedded demo configuration (a worked example of the format).
    DemoConfig,
    /// Print the SHA-256 of an API key, for `auth.keys[].sha256`.
    ///
    /// The key is read from standard input (one line) unless given, so
    /// that it stays out of the shell's history.
    HashKey {
        /// The key (default: read from standard input).
        key: Option<String>,
    },
}

/// Buffers of 8 MiB and more (upload parts, large metatiles) are mapped on
/// their own and given back to the system when freed. By default glibc
/// raises its mapping threshold to the size of the first such buffer freed
/// and keeps the later ones in its per-thread arenas, so the process held
/// on to what several threads once filled (docs/benchmarks/uploads.md).
/// Smaller buffers (a 4 x 4 metatile's 4 MiB image) stay in the arenas,
/// reused without page faults.
fn return_large_buffers_to_the_system() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; called first thing
    // in main, before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 8 << 20);
    }
}

fn main() -> ExitCode {
    return_large_buffers_to_the_system();
    let cli = Cli::parse();
    // Serving logs off the request threads; batch commands where they log.
    let queue =
        matches!(cli.command, Command::Serve { .. }).then_some(cli.log_queue_lines as usize);
    let _log_writer = init_logging(cli.log_format, queue);
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            runtime::print_error(error.as_ref());
            ExitCode::FAILURE
        }
    }
}

/// Values `check` lists of a dimension; past them, a count.
const LISTED_VALUES: usize = 12;

/// What `check` says of a dimension: its values (the first few) and the
/// value a request that names none gets.
fn dimension_line(d: &tessera_server::dimension::Dimension) -> String {
    let listed = d
        .values
        .iter()
        .take(LISTED_VALUES)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    let values = match d.values.len().checked_sub(LISTED_VALUES) {
        Some(more) if more > 0 => format!("{listed} and {more} more"),
        _ => listed,
    };
    let default = d.resolve(None).unwrap_or_else(|e| format!("none ({e})"));
    format!(
        "dimension {}: {} value(s): {values}; default {default}",
        d.name,
        d.values.len()
    )
}

/// Whether a file given to `serve` is a configuration (`.yaml`, `.yml`).
fn is_yaml(path: &std::path::Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("yaml") || e.eq_ignore_ascii_case("yml"))
}

fn load(config: Option<&PathBuf>) -> Result<Config, CliError> {
    Ok(match config {
        Some(path) => Config::from_file(path)?,
        None => demo::demo_config()?,
    })
}

/// Runs a command; returns the process exit status.
fn run(cli: Cli) -> CliResult {
    match cli.command {
        Command::Seed(args) => seed::seed(&args),
        Command::Truncate(args) => truncate::truncate(&args),
        Command::Export(args) => export::run(&args),
        Command::DemoConfig => {
            print!("{}", demo::DEMO_YAML);
            Ok(0)
        }
        Command::HashKey { key } => {
            let key = match key {
                Some(k) => k,
                None => {
                    let mut line = String::new();
                    std::io::stdin().read_line(&mut line)?;
                    line.trim_end_matches(['\r', '\n']).to_string()
                }
            };
            if key.len() < 16 {
                return Err("an API key should be at least 16 characters (random, say `openssl rand -hex 24`)".into());
            }
            println!("{}", tessera_server::auth::hash_key(&key));
            Ok(0)
        }
        Command::Check {
            config_file,
            config,
        } => {
            let config = area::config_path(config_file.as_ref(), config.as_ref())?;
            let service = Service::serving(load(Some(config))?)?;
            for layer in service.registry.layers() {
                let b = layer.source.info().lonlat_bounds;
                println!(
                    "layer {}: {} source, [{:.4}, {:.4}, {:.4}, {:.4}] (lon/lat)",
                    layer.name, layer.kind, b.min_x, b.min_y, b.max_x, b.max_y
                );
                for d in &layer.dimensions {
                    println!("  {}", dimension_line(d));
                }
                // A layer with dimensions reports its source at the
                // default values.
                let indent = if layer.dimensions.is_empty() {
                    "  "
                } else {
                    println!("  at the default value(s):");
                    "    "
                };
                for line in layer.source.report() {
                    println!("{indent}{line}");
                }
            }
            println!("ok: {} layer(s)", service.registry.layers().len());
            Ok(0)
        }
        Command::Serve {
            config,
            listen,
            files,
            watch,
        } => {
            let source = match (config, files.as_slice()) {
                (Some(path), _) => ConfigSource::File(path),
                (None, []) => ConfigSource::Demo,
                (None, [one]) if is_yaml(one) => ConfigSource::File(one.clone()),
                (None, _) => ConfigSource::Rasters(files, watch),
            };
            let mut config = source.load()?;
            warn_if_memory_only(&config);
            if let Some(listen) = &listen {
                config.server.listen.clone_from(listen);
            }
            let grace = Duration::try_from_secs_f64(config.server.shutdown_grace_secs)
                .unwrap_or(Duration::from_secs(10));
            let service = Service::serving(config)?;
            let runtime = runtime::runtime()?;
            let served = runtime.block_on(serve(service, source, listen));
            // Renders still running were cancelled when their requests
            // went; what does not stop within the grace period is left
            // behind rather than holding the exit.
            runtime.shutdown_timeout(grace);
            served.map(|()| 0)
        }
    }
}

async fn serve(
    service: Service,
    source: ConfigSource,
    listen_override: Option<String>,
) -> Result<(), CliError> {
    let listen = service.config.server.listen.clone();
    let listener = tokio::net::TcpListener::bind(&listen)
        .await
        .map_err(|e| CliError::from(format!("cannot listen on {listen}: {e}")))?;
    let addr = listener.local_addr()?;
    let settings = listener_settings(&service.config.server);
    let (live, routers) = http::live::Live::start(service, source, listen_override);
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
        tokio::spawn(tessera_server::cluster::watch_generations(
            move || watched.current().registry.layers(),
            metrics,
            every,
        ));
    }
    tokio::spawn(refresh_dimension_values(live.clone()));
    tokio::spawn(refresh_found_tables(live.clone()));
    tokio::spawn(http::archive_watch::watch_archives(live.clone()));
    tokio::spawn(refresh_jwks(live.clone()));
    tokio::spawn(reload_on_hangup(live));
    http::transport::listener::serve(listener, routers, settings, shutdown_signal()).await?;
    Ok(())
}

/// Says so when a layer caches in memory only: its tiles are lost on
/// restart, which surprises users of file-based caches.
fn warn_if_memory_only(config: &tessera_server::Config) {
    let memory: Vec<&str> = config
        .layers
        .iter()
        .filter(|l| {
            matches!(
                config.stores.get(&l.cache.store),
                Some(tessera_server::tessera_store::StoreSpec::Memory(_))
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

/// Reloads the configuration on each SIGHUP; a config that fails, or that
/// drops layers served now (which only `POST /admin/reload?remove_layers=true`
/// or a restart may do), is logged and the current one keeps serving.
/// Looks at where the layers' dimension values come from every
/// `refresh_secs` (the shortest configured; nothing when none is) and
/// reloads the configuration when they changed, so new values (a new
/// date's files) are served without a restart.
async fn refresh_dimension_values(live: std::sync::Arc<http::live::Live>) {
    use tessera_server::assemble::{refresh_interval, values_signature};
    let mut seen: Option<u128> = None;
    loop {
        let config = live.current().config.clone();
        let Some(every) = refresh_interval(&config) else {
            // Asked again after a while: a reload may add a refresh.
            tokio::time::sleep(std::time::Duration::from_secs(30)).await;
            seen = None;
            continue;
        };
        if seen.is_none() {
            let first = config.clone();
            seen = tokio::task::spawn_blocking(move || values_signature(&first))
                .await
                .ok();
        }
        tokio::time::sleep(every).await;
        let signature = tokio::task::spawn_blocking(move || values_signature(&config))
            .await
            .ok();
        match (seen, signature) {
            (Some(before), Some(now)) if before != now => {
                tracing::info!("dimension values changed: reloading the configuration");
                let reloading = live.clone();
                match tokio::task::spawn_blocking(move || reloading.reload(false)).await {
                    Ok(Ok(_)) => seen = signature,
                    Ok(Err(e)) => {
                        tracing::error!(
                            error = &e as &dyn std::error::Error,
                            "reloading for new dimension values failed; the old values keep serving"
                        );
                    }
                    Err(e) => {
                        tracing::error!(error = &e as &dyn std::error::Error, "the reload failed");
                    }
                }
            }
            _ => seen = signature.or(seen),
        }
    }
}

/// Lists the tables of `postgis_auto` sources again every `refresh_secs`
/// (the shortest; nothing when none is) and reloads when the layers they
/// make changed: new tables are served, dropped ones no longer.
async fn refresh_found_tables(live: std::sync::Arc<http::live::Live>) {
    loop {
        let Some(secs) = live.current().config.watch_secs else {
            // Asked again after a while: a reload may add a refresh.
            tokio::time::sleep(std::time::Duration::from_secs(30)).await;
            continue;
        };
        tokio::time::sleep(std::time::Duration::from_secs_f64(secs.max(0.5))).await;
        let probing = live.clone();
        let found = tokio::task::spawn_blocking(move || {
            probing
                .source()
                .load()
                .map(|c| c.layers.into_iter().map(|l| l.name).collect::<Vec<_>>())
        })
        .await;
        let served: Vec<String> = live
            .current()
            .config
            .layers
            .iter()
            .map(|l| l.name.clone())
            .collect();
        match found {
            Ok(Ok(names)) if names != served => {
                tracing::info!("the database's tables changed: reloading the configuration");
                let reloading = live.clone();
                if let Ok(Err(e)) =
                    tokio::task::spawn_blocking(move || reloading.reload(true)).await
                {
                    tracing::error!(
                        error = &e as &dyn std::error::Error,
                        "reloading for the database's tables failed; the old layers keep serving"
                    );
                }
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!(
                error = &e as &dyn std::error::Error,
                "listing the database's tables failed; the layers served stay"
            ),
            Err(e) => tracing::error!(
                error = &e as &dyn std::error::Error,
                "the table listing failed"
            ),
        }
    }
}

/// Reads the JWKS URL of `auth.jwt` at once, then every `refresh_secs`;
/// a failed read keeps the last good keys (and is logged). Follows
/// reloads: a new configuration's verifier is read at once.
async fn refresh_jwks(live: std::sync::Arc<http::live::Live>) {
    let mut last: Option<std::sync::Arc<tessera_server::auth::Access>> = None;
    let mut next = tokio::time::Instant::now();
    loop {
        let access = live.current().access.clone();
        let changed = match (&access, &last) {
            (Some(a), Some(b)) => !std::sync::Arc::ptr_eq(a, b),
            (a, b) => a.is_some() != b.is_some(),
        };
        last.clone_from(&access);
        let verifier = access.as_ref().and_then(|a| a.verifier());
        if let Some(v) = verifier
            && v.jwks_url().is_some()
            && (changed || tokio::time::Instant::now() >= next)
        {
            match v.refresh().await {
                Ok(n) => tracing::debug!(keys = n, "read the JWKS"),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the JWKS; the last good keys stay");
                }
            }
            next = tokio::time::Instant::now() + v.refresh_every();
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

async fn reload_on_hangup(live: std::sync::Arc<http::live::Live>) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut hangups) = signal(SignalKind::hangup()) else {
            tracing::warn!("cannot listen for SIGHUP: reload with POST /admin/reload");
            return;
        };
        while hangups.recv().await.is_some() {
            tracing::info!("SIGHUP: reloading the configuration");
            let live = live.clone();
            match tokio::task::spawn_blocking(move || live.reload(false)).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    tracing::error!(
                        error = &e as &dyn std::error::Error,
                        "the new configuration was refused; the old one keeps serving"
                    );
                }
                Err(e) => {
                    tracing::error!(error = &e as &dyn std::error::Error, "the reload failed");
                }
            }
        }
    }
}

/// Connection bounds from the `server:` section, with the open-file limit
/// raised to its hard limit first (the default connection limit follows it).
fn listener_settings(server: &tessera_server::config::ServerConfig) -> ListenerSettings {
    let open_files = match http::transport::listener::raise_open_file_limit() {
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
            0 => http::transport::listener::default_max_connections(open_files),
            n => n,
        },
        header_timeout: seconds(server.header_timeout_secs),
        idle_timeout: seconds(server.idle_timeout_secs),
        shutdown_grace: seconds(server.shutdown_grace_secs),
        connection_threads: match server.connection_threads {
            0 => crate::runtime::cores(),
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
