//! Progress of a long command: a bar on a terminal, a plain line every
//! few seconds otherwise (logs, CI).

use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// How often a line is printed when stderr is not a terminal.
const LINE_EVERY: Duration = Duration::from_secs(2);

/// Progress over `total` tiles.
#[derive(Debug, Clone)]
pub enum Progress {
    /// On a terminal.
    Bar(indicatif::ProgressBar),
    /// Elsewhere.
    Lines {
        /// Tiles to handle.
        total: u64,
        /// When the last line was printed.
        last: Instant,
    },
}

impl Progress {
    /// Progress over `total` tiles, drawn on stderr.
    pub fn new(total: u64) -> Progress {
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

    /// `done` tiles handled since `start`.
    pub fn update(&mut self, done: u64, start: Instant) {
        match self {
            Progress::Bar(bar) => bar.set_position(done),
            Progress::Lines { total, last } => {
                if last.elapsed() >= LINE_EVERY {
                    *last = Instant::now();
                    let (rate, eta) = rate_and_eta(done, *total, start);
                    eprintln!(
                        "progress: {done}/{total} tiles ({:.0}%), {rate:.0} tiles/s, ETA {}",
                        100.0 * done as f64 / (*total).max(1) as f64,
                        eta.map_or_else(|| "?".into(), |d| format!("{:.0} s", d.as_secs_f64())),
                    );
                }
            }
        }
    }

    /// Clears the bar.
    pub fn finish(&self) {
        if let Progress::Bar(bar) = self {
            bar.finish_and_clear();
        }
    }
}

/// Rate and estimated time left, from the `done` tiles (of `total_tiles`)
/// handled since `start`.
pub fn rate_and_eta(done: u64, total_tiles: u64, start: Instant) -> (f64, Option<Duration>) {
    let secs = start.elapsed().as_secs_f64();
    let rate = if secs > 0.0 { done as f64 / secs } else { 0.0 };
    let left = total_tiles.saturating_sub(done);
    let eta = (rate > 0.0).then(|| Duration::from_secs_f64(left as f64 / rate));
    (rate, eta)
}
