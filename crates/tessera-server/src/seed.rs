//! Seeding: render every metatile of a [`TilePlan`] into its layer's
//! store, on the same locks as serving, each metatile stored durably before
//! it counts as done; storing one overlaps rendering the next.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::plan::TilePlan;
use crate::tile_cache::{SeedStep, TileCache, TileError};

/// Counts after a seed (or so far).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SeedStats {
    /// Metatiles handled (rendered or skipped).
    pub metatiles_done: u64,
    /// Metatiles rendered.
    pub metatiles_rendered: u64,
    /// Tiles handled (written or already present).
    pub tiles_done: u64,
    /// Tiles written.
    pub tiles_written: u64,
}

/// How a seed ended.
#[derive(Debug)]
pub enum SeedEnd {
    /// Every metatile is durable in the store.
    Complete(SeedStats),
    /// Stopped on request; the metatiles counted are durable.
    Cancelled(SeedStats),
    /// A metatile failed; the ones counted are durable.
    Failed(SeedStats, TileError),
}

/// Runs `plan` with up to `concurrency` metatiles rendering and encoding,
/// one more taken ahead (locked, checked against the store, its upstream
/// fetch started: it waits for a worker), and up to `concurrency` more
/// being stored: a metatile's upstream fetch and its durable write (with
/// its syncs) overlap other metatiles' renders, and a metatile counts as
/// done only once stored. `cancel` stops the dispatch of new metatiles;
/// those in flight finish. `progress` is called after every metatile.
pub async fn run(
    tiles: &Arc<TileCache>,
    plan: &TilePlan,
    concurrency: usize,
    force: bool,
    cancel: &AtomicBool,
    mut progress: impl FnMut(&SeedStats),
) -> SeedEnd {
    let concurrency = concurrency.max(1);
    let workers = Arc::new(Semaphore::new(concurrency));
    let mut stats = SeedStats::default();
    let mut rendering = JoinSet::new();
    let mut storing = JoinSet::new();
    let mut failure = None;
    let mut pending = plan.metatiles();
    loop {
        while rendering.len() < concurrency + 1
            && storing.len() < concurrency
            && failure.is_none()
            && !cancel.load(Ordering::SeqCst)
        {
            let Some(meta) = pending.next() else { break };
            let (tiles, layer, grid, format) = (
                tiles.clone(),
                plan.layer.clone(),
                plan.grid.clone(),
                plan.format,
            );
            let n = u64::from(meta.cols() * meta.rows());
            let workers = workers.clone();
            rendering.spawn(async move {
                (
                    n,
                    tiles
                        .seed_metatile(&layer, &grid, format, meta, force, &workers)
                        .await,
                )
            });
        }
        if rendering.is_empty() && storing.is_empty() {
            break;
        }
        tokio::select! {
            Some(joined) = rendering.join_next() => match joined {
                Ok((n, Ok(SeedStep::Skipped))) => {
                    stats.metatiles_done += 1;
                    stats.tiles_done += n;
                    progress(&stats);
                }
                Ok((n, Ok(SeedStep::Rendered(unstored)))) => {
                    storing.spawn(async move { (n, unstored.store().await) });
                }
                Ok((_, Err(e))) => {
                    failure.get_or_insert(e);
                }
                Err(join) => {
                    failure.get_or_insert(TileError::Task(join));
                }
            },
            Some(joined) = storing.join_next() => match joined {
                Ok((n, Ok(written))) => {
                    stats.metatiles_done += 1;
                    stats.metatiles_rendered += 1;
                    stats.tiles_done += n;
                    stats.tiles_written += written as u64;
                    progress(&stats);
                }
                Ok((_, Err(e))) => {
                    failure.get_or_insert(e);
                }
                Err(join) => {
                    failure.get_or_insert(TileError::Task(join));
                }
            },
            else => break,
        }
    }
    match failure {
        Some(e) => SeedEnd::Failed(stats, e),
        None if cancel.load(Ordering::SeqCst) && pending.next().is_some() => {
            SeedEnd::Cancelled(stats)
        }
        None => SeedEnd::Complete(stats),
    }
}
