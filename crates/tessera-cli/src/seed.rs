//! `tessera seed`: argument parsing, progress display and the summary.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use tessera_server::seed::{SeedEnd, SeedStats, rate_and_eta, run};

use crate::area::AreaArgs;

/// Exit status of a seed stopped with Ctrl-C (128 + SIGINT).
pub const CANCELLED: u8 = 130;

/// Arguments of `tessera seed`.
#[derive(Debug, Args)]
pub struct SeedArgs {
    #[command(flatten)]
    area: AreaArgs,
    /// Metatiles rendered at once [default: CPU cores].
    #[arg(long)]
    threads: Option<usize>,
    /// Render metatiles whose tiles are all stored already.
    #[arg(long)]
    force: bool,
}

/// Runs a seed; returns the process exit status.
pub fn seed(args: &SeedArgs) -> Result<u8, String> {
    let (state, plan) = args.area.plan()?;
    let zoom = &args.area.zoom;
    let (metatiles, total) = plan.size();
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, usize::from));
    eprintln!(
        "seeding {} in {} at zoom {}..{} as {}: {total} tiles in {metatiles} metatiles, {threads} at once",
        plan.layer.name,
        plan.grid.tms.id,
        zoom.start(),
        zoom.end(),
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
