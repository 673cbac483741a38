//! `tessera seed`: argument parsing, progress display and the summary.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use clap::Args;
use tessera_server::Service;
use tessera_server::plan::{Shard, TilePlan};
use tessera_server::seeding::{SeedEnd, SeedOptions, SeedStats, run};

use crate::area::AreaArgs;
use crate::progress::{Progress, rate_and_eta};
use crate::runtime::{CliResult, cores, runtime};

/// Exit status of a seed stopped with Ctrl-C (128 + SIGINT).
pub const CANCELLED: u8 = 130;

/// Arguments of `tessera seed`.
#[derive(Debug, Args)]
pub struct SeedArgs {
    #[command(flatten)]
    area: AreaArgs,
    /// Tile format (png, jpg, webp) [default: the layer's first format].
    #[arg(long)]
    format: Option<String>,
    /// Metatiles rendered at once, 1 to 1024 [default: CPU cores].
    #[arg(long, value_parser = thread_count)]
    threads: Option<usize>,
    /// Render metatiles whose tiles are all stored already.
    #[arg(long)]
    force: bool,
    /// Most tiles rendered per second (so that a seed does not overwhelm
    /// an upstream service); tiles found stored do not count.
    #[arg(long, value_parser = positive_rate)]
    rate: Option<f64>,
    /// Seed part I of N (`I/N`, I from 0): a contiguous run of the plan's
    /// metatiles along the Hilbert curve; `auto/N` reads I from
    /// JOB_COMPLETION_INDEX (Kubernetes Indexed Job) or SLURM_ARRAY_TASK_ID.
    #[arg(long)]
    shard: Option<String>,
}

/// Runs a seed; returns the process exit status.
pub fn seed(args: &SeedArgs) -> CliResult {
    let (service, mut plans) = args.area.plans(args.format.as_deref())?;
    if let Some(text) = &args.shard {
        let shard = Shard::parse(text, |v| std::env::var(v).ok())?;
        eprintln!("shard {} of {} (from 0)", shard.index, shard.count);
        plans = plans.into_iter().map(|p| p.sharded(shard)).collect();
    }
    let runtime = runtime()?;
    let options = SeedOptions {
        concurrency: args.threads.unwrap_or_else(cores),
        force: args.force,
        rate: args.rate,
        ..SeedOptions::default()
    };
    // One dimension value after the other; the first that does not end
    // well ends the seed.
    for plan in &plans {
        let status = seed_plan(&runtime, &service, plan, &options)?;
        if status != 0 {
            return Ok(status);
        }
    }
    Ok(0)
}

/// Renders `plan` as `options` say, showing progress and a summary;
/// returns the process exit status (0 when every tile is stored,
/// [`CANCELLED`] after Ctrl-C).
pub fn seed_plan(
    runtime: &tokio::runtime::Runtime,
    service: &Service,
    plan: &TilePlan,
    options: &SeedOptions,
) -> CliResult {
    let threads = options.concurrency;
    let size = plan.size();
    let (metatiles, total) = (size.metatiles, size.tiles);
    let zooms = (
        plan.ranges.iter().map(|r| r.z).min().unwrap_or(0),
        plan.ranges.iter().map(|r| r.z).max().unwrap_or(0),
    );
    let (cols, rows) = plan.metatile_size();
    // Vector tiles are cut one by one, in blocks the size of a metatile
    // (one lock, one store batch); images are rendered a metatile at once.
    let (unit, made) = if plan.format.is_vector() {
        ("blocks", "cut")
    } else {
        ("metatiles", "rendered")
    };
    let area = plan.area_tiles();
    let rounded = if area == total {
        String::new()
    } else {
        format!(
            "; {area} tiles in the area, rounded out to whole {unit} (an export of the area \
             writes those {area})"
        )
    };
    eprintln!(
        "seeding {} in {} at zoom {}..{} as {}: {total} tiles in {metatiles} {unit} of \
         {cols}x{rows}, {threads} at once{rounded}",
        plan.layer.label(),
        plan.grid.tms.id,
        zooms.0,
        zooms.1,
        plan.format.extension(),
    );
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
        run(&service.tiles, plan, options, &cancel, |s, _| {
            display.update(s.tiles_done, start);
        })
        .await
    });
    display.finish();
    let summary = |verb: &str, s: &SeedStats| {
        let secs = start.elapsed().as_secs_f64();
        let (rate, _) = rate_and_eta(s.tiles_done, total, start);
        format!(
            "{verb}: {}/{total} tiles in {}/{metatiles} {unit} ({} {made}, {} already stored, {} tiles written) in {secs:.1} s, {rate:.0} tiles/s",
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
            Err(e.into())
        }
    }
}

/// Parses `--rate`: tiles per second, in the range the jobs API takes.
fn positive_rate(text: &str) -> Result<f64, String> {
    let rate = text
        .parse::<f64>()
        .map_err(|_| format!("{text:?} is not a number of tiles per second"))?;
    tessera_server::seeding::check_options(None, Some(rate)).map(|()| rate)
}

/// Parses `--threads`: metatiles at once, in the range the jobs API takes.
fn thread_count(text: &str) -> Result<usize, String> {
    let threads = text
        .parse::<usize>()
        .map_err(|_| format!("{text:?} is not a number of metatiles"))?;
    tessera_server::seeding::check_options(Some(threads), None).map(|()| threads)
}
