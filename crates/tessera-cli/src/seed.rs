//! `tessera seed`: argument parsing, progress display and the summary.

use std::io::IsTerminal;
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use tessera_server::seed::{
    SeedArea, SeedEnd, SeedPlan, SeedStats, polygons_from_geojson, rate_and_eta, run,
};
use tessera_server::tessera_grid::BBox;
use tessera_server::tessera_image::Format;
use tessera_server::{Config, build_state};

/// Exit status of a seed stopped with Ctrl-C (128 + SIGINT).
pub const CANCELLED: u8 = 130;

/// Arguments of `tessera seed`.
#[derive(Debug, Args)]
pub struct SeedArgs {
    /// YAML configuration file.
    #[arg(short, long, env = "TESSERA_CONFIG")]
    config: PathBuf,
    /// Layer to seed.
    #[arg(long)]
    layer: String,
    /// Grid to seed [default: the layer's first grid].
    #[arg(long)]
    grid: Option<String>,
    /// Zoom levels: `A..B` (inclusive) or a single `Z`.
    #[arg(long, value_parser = parse_zooms)]
    zoom: RangeInclusive<u8>,
    /// Limit to `minx,miny,maxx,maxy` (in --bbox-crs); always limited to the layer's extent.
    #[arg(long, value_parser = parse_bbox, allow_hyphen_values = true)]
    bbox: Option<BBox>,
    /// CRS of --bbox.
    #[arg(long, default_value = "EPSG:4326")]
    bbox_crs: String,
    /// Limit to the Polygon/MultiPolygon areas of a GeoJSON file (lon/lat).
    #[arg(long, conflicts_with = "bbox")]
    polygon: Option<PathBuf>,
    /// Tile format (png, jpg, webp) [default: the layer's first format].
    #[arg(long)]
    format: Option<String>,
    /// Metatiles rendered at once [default: CPU cores].
    #[arg(long)]
    threads: Option<usize>,
    /// Render metatiles whose tiles are all stored already.
    #[arg(long)]
    force: bool,
}

fn parse_zooms(text: &str) -> Result<RangeInclusive<u8>, String> {
    let parse = |t: &str| {
        t.trim()
            .parse::<u8>()
            .map_err(|_| format!("{t:?} is not a zoom level (0..=255)"))
    };
    let (a, b) = match text.split_once("..") {
        Some((a, b)) => (parse(a)?, parse(b.trim_start_matches('='))?),
        None => {
            let z = parse(text)?;
            (z, z)
        }
    };
    if a > b {
        return Err(format!(
            "zoom range {text:?} is empty: write A..B with A <= B"
        ));
    }
    Ok(a..=b)
}

fn parse_bbox(text: &str) -> Result<BBox, String> {
    let v: Vec<f64> = text
        .split(',')
        .map(|p| {
            p.trim()
                .parse::<f64>()
                .map_err(|_| format!("{p:?} is not a number"))
        })
        .collect::<Result<_, _>>()?;
    let [a, b, c, d] = v[..] else {
        return Err(format!("--bbox needs 4 numbers, got {}", v.len()));
    };
    BBox::new(a, b, c, d).map_err(|e| e.to_string())
}

/// Runs a seed; returns the process exit status.
pub fn seed(args: &SeedArgs) -> Result<u8, String> {
    let config = Config::from_file(&args.config).map_err(|e| e.to_string())?;
    let state = build_state(config).map_err(|e| e.to_string())?;
    let format = match &args.format {
        Some(f) => Some(Format::from_extension(f).ok_or_else(|| format!("unknown format {f:?}"))?),
        None => None,
    };
    let grid = match &args.grid {
        Some(g) => g.clone(),
        None => state
            .registry
            .layer(&args.layer)
            .and_then(|l| l.grids.first().cloned())
            .ok_or_else(|| format!("unknown layer {:?}", args.layer))?,
    };
    let area = match (&args.bbox, &args.polygon) {
        (Some(b), _) => SeedArea::BBox(*b, args.bbox_crs.clone()),
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            SeedArea::Polygons(polygons_from_geojson(&text).map_err(|e| e.to_string())?)
        }
        (None, None) => SeedArea::Extent,
    };
    let plan = SeedPlan::new(
        &state.config,
        &state.registry,
        &args.layer,
        &grid,
        format,
        args.zoom.clone(),
        &area,
    )
    .map_err(|e| e.to_string())?;
    let (metatiles, total) = plan.size();
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, usize::from));
    eprintln!(
        "seeding {} in {} at zoom {}..{} as {}: {total} tiles in {metatiles} metatiles, {threads} at once",
        plan.layer.name,
        plan.grid.tms.id,
        args.zoom.start(),
        args.zoom.end(),
        plan.format.extension(),
    );

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let cancel = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let mut display = Progress::new(total);
    let end = runtime.block_on(async {
        let flag = cancel.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("\nstopping: finishing the metatiles in flight (Ctrl-C again to abort)");
                flag.store(true, Ordering::SeqCst);
                if tokio::signal::ctrl_c().await.is_ok() {
                    std::process::exit(i32::from(CANCELLED));
                }
            }
        });
        run(&state.tiles, &plan, threads, args.force, &cancel, |s| {
            display.update(s, start);
        })
        .await
    });
    display.finish();
    let summary = |verb: &str, s: &SeedStats| {
        let secs = start.elapsed().as_secs_f64();
        let (rate, _) = rate_and_eta(s, total, start);
        format!(
            "{verb}: {}/{total} tiles in {}/{metatiles} metatiles ({} rendered, {} already stored, {} tiles written) in {secs:.1} s, {rate:.0} tiles/s",
            s.tiles_done,
            s.metatiles_done,
            s.metatiles_rendered,
            s.metatiles_done - s.metatiles_rendered,
            s.tiles_written,
        )
    };
    match end {
        SeedEnd::Complete(s) => {
            println!("{}", summary("seed complete", &s));
            Ok(0)
        }
        SeedEnd::Cancelled(s) => {
            println!("{}", summary("seed stopped", &s));
            Ok(CANCELLED)
        }
        SeedEnd::Failed(s, e) => {
            println!("{}", summary("seed failed", &s));
            Err(e.to_string())
        }
    }
}

/// A progress bar on a terminal, a plain line every few seconds otherwise.
enum Progress {
    Bar(indicatif::ProgressBar),
    Lines { total: u64, last: Instant },
}

const LINE_EVERY: Duration = Duration::from_secs(2);

impl Progress {
    fn new(total: u64) -> Progress {
        if std::io::stderr().is_terminal() {
            let bar = indicatif::ProgressBar::new(total);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{wide_bar} {pos}/{len} tiles  {per_sec}  ETA {eta}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            Progress::Bar(bar)
        } else {
            Progress::Lines {
                total,
                last: Instant::now(),
            }
        }
    }

    fn update(&mut self, s: &SeedStats, start: Instant) {
        match self {
            Progress::Bar(bar) => bar.set_position(s.tiles_done),
            Progress::Lines { total, last } => {
                if last.elapsed() >= LINE_EVERY {
                    *last = Instant::now();
                    let (rate, eta) = rate_and_eta(s, *total, start);
                    eprintln!(
                        "progress: {}/{} tiles ({:.0}%), {rate:.0} tiles/s, ETA {}",
                        s.tiles_done,
                        total,
                        100.0 * s.tiles_done as f64 / (*total).max(1) as f64,
                        eta.map_or_else(|| "?".into(), |d| format!("{:.0} s", d.as_secs_f64())),
                    );
                }
            }
        }
    }

    fn finish(&self) {
        if let Progress::Bar(bar) = self {
            bar.finish_and_clear();
        }
    }
}
