//! `tessera`: a map tile server and tile cache in one binary.

use std::path::PathBuf;
use std::process::ExitCode;

mod area;
mod check;
mod export;
mod progress;
mod runtime;
mod seed_command;
mod truncate;

use clap::{Parser, Subcommand};
use runtime::{CliError, CliResult};
use tessera_server::demo;
use tessera_server::serve::live::ConfigSource;
use tessera_server::serve::{Overrides, Serving};

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
        /// The folder of the built manual, served at /book/, overriding
        /// `server.book` [default: /usr/share/doc/tessera/book].
        #[arg(long, env = "TESSERA_BOOK", value_name = "DIR")]
        book: Option<PathBuf>,
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
        /// Parse and validate only (keys, types, names that refer to
        /// stores, grids and layers), opening no source: for a
        /// configuration whose files, buckets or databases are not in reach
        /// here.
        #[arg(long)]
        no_open: bool,
    },
    /// Render a layer's tiles into its cache, metatile by metatile.
    ///
    /// Exits 0 only when every tile is durable in the store. Tiles already
    /// stored are skipped, so a seed that was stopped or killed can simply be
    /// run again. Ctrl-C finishes the metatiles in flight and exits 130.
    Seed(seed_command::SeedArgs),
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
    /// Print the JSON Schema of the configuration file, for editors
    /// (`# yaml-language-server: $schema=...`); a running server serves it
    /// at /schema/config.json.
    ConfigSchema,
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
/// reused without page faults: up to 32 MiB freed at the top of an arena
/// is kept rather than given back at once (glibc's default, 128 KiB, made
/// every cold metatile fault its buffers in again: a fifth of a cold
/// tile's time, docs/benchmarks/cold-floor.md). `MALLOC_TRIM_THRESHOLD_`
/// in the environment still decides.
fn return_large_buffers_to_the_system() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let trim_set = std::env::var_os("MALLOC_TRIM_THRESHOLD_").is_some();
        // SAFETY: mallopt only sets an allocator parameter; called first
        // thing in main, before any other thread exists.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 8 << 20);
            if !trim_set {
                libc::mallopt(libc::M_TRIM_THRESHOLD, 32 << 20);
            }
        }
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

/// Whether a file given to `serve` is a configuration (`.yaml`, `.yml`).
fn is_yaml(path: &std::path::Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("yaml") || e.eq_ignore_ascii_case("yml"))
}

/// Runs a command; returns the process exit status.
fn run(cli: Cli) -> CliResult {
    match cli.command {
        Command::Seed(args) => seed_command::seed(&args),
        Command::Truncate(args) => truncate::truncate(&args),
        Command::Export(args) => export::run(&args),
        Command::DemoConfig => {
            print!("{}", demo::DEMO_YAML);
            Ok(0)
        }
        Command::ConfigSchema => {
            let schema = tessera_server::Config::schema();
            println!("{schema:#}");
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
            no_open,
        } => check::check(config_file.as_ref(), config.as_ref(), no_open),
        Command::Serve {
            config,
            listen,
            book,
            files,
            watch,
        } => {
            let source = match (config, files.as_slice()) {
                (Some(path), _) => ConfigSource::File(path),
                (None, []) => ConfigSource::Demo,
                (None, [one]) if is_yaml(one) => ConfigSource::File(one.clone()),
                (None, _) => ConfigSource::Rasters(files, watch),
            };
            let serving = Serving::open(source, Overrides { listen, book })?;
            let grace = serving.grace();
            let runtime = runtime::runtime()?;
            let served = runtime.block_on(serving.run(runtime::cores()));
            // Renders still running were cancelled when their requests
            // went; what does not stop within the grace period is left
            // behind rather than holding the exit.
            runtime.shutdown_timeout(grace);
            served.map(|()| 0).map_err(CliError::from)
        }
    }
}
