//! Seeding: render every metatile of a [`TilePlan`] into its layer's
//! store, on the same locks as serving, each metatile stored durably before
//! it counts as done; storing one overlaps rendering the next. Where the
//! store writes tiles in groups (packs), the metatiles of one group are
//! gathered and stored together ([`crate::tile_cache::TileCache::write_group`]).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::task::{Id, JoinSet};
use tokio::time::Instant;

use crate::metatile::Metatile;
use crate::plan::TilePlan;
use crate::tile_cache::{Locking, SeedStep, TileCache, TileError, Unstored};

/// Most tiles a gathered write group holds before it is stored anyway (a
/// store whose groups are far larger than a few metatiles).
const MAX_GATHERED_TILES: usize = 1024;

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
    /// Tiles of the metatiles [`SeedOptions::skip`] named (counted in
    /// `tiles_done` too).
    pub tiles_skipped: u64,
}

/// How a seed runs.
#[derive(Debug, Clone, Default)]
pub struct SeedOptions {
    /// Metatiles rendered at once (at least 1).
    pub concurrency: usize,
    /// Render metatiles whose tiles are all stored already.
    pub force: bool,
    /// Most tiles rendered per second, so that a seed does not overwhelm
    /// an upstream service; `None`: as fast as it goes. Tiles found stored
    /// do not count.
    pub rate: Option<f64>,
    /// Metatiles not to take, by their place in the plan's order (those a
    /// job had done before a restart); they count as done.
    pub skip: HashSet<u64>,
}

/// Most metatiles a seed renders at once (`--threads`, a job's `threads`).
pub const MAX_CONCURRENCY: usize = 1024;

/// Slowest seed rate, in tiles per second (one a day; `--rate`, a job's
/// `rate`).
pub const MIN_RATE: f64 = 1.0 / 86_400.0;

/// Checks a seed's concurrency and rate as the CLI and the jobs API take
/// them: threads from 1 to [`MAX_CONCURRENCY`], a rate of at least
/// [`MIN_RATE`] tiles per second (finite). The message names the value.
pub fn check_options(threads: Option<usize>, rate: Option<f64>) -> Result<(), String> {
    if let Some(threads) = threads
        && !(1..=MAX_CONCURRENCY).contains(&threads)
    {
        return Err(format!(
            "`threads` {threads}: from 1 to {MAX_CONCURRENCY} metatiles at once"
        ));
    }
    if let Some(rate) = rate
        && !(rate.is_finite() && rate >= MIN_RATE)
    {
        return Err(format!(
            "`rate` {rate}: a positive number of tiles per second, at least one a day ({MIN_RATE:.1e})"
        ));
    }
    Ok(())
}

impl SeedOptions {
    /// `concurrency` metatiles at once, nothing else set.
    pub fn with_concurrency(concurrency: usize) -> SeedOptions {
        SeedOptions {
            concurrency,
            ..SeedOptions::default()
        }
    }
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
/// done only once stored.
///
/// When the layer's store writes tiles in groups, the metatiles of a group
/// (consecutive in the plan's order) are taken with [`Locking::Try`] and
/// kept, locked and unstored, until the plan moves past the group; then
/// they are stored with one `put_many`. A metatile whose locks are held by
/// someone else is taken again afterwards, alone and waiting for its
/// locks, and only once every group gathered so far is on its way to the
/// store: a seed never waits for a lock while it holds a group open, so
/// two seeds (or a seed and requests) over one group cannot deadlock.
///
/// With a `rate`, metatiles are dispatched no faster than it allows, and a
/// metatile found stored gives its share back.
///
/// `cancel` stops the dispatch of new metatiles; those in flight finish.
/// `progress` is called after every metatile (or group) is stored or
/// found stored, with the places in the plan's order of the metatiles
/// that are now done.
pub async fn run(
    tiles: &Arc<TileCache>,
    plan: &TilePlan,
    options: &SeedOptions,
    cancel: &AtomicBool,
    mut progress: impl FnMut(&SeedStats, &[u64]),
) -> SeedEnd {
    let (concurrency, force) = (options.concurrency.clamp(1, MAX_CONCURRENCY), options.force);
    let pace = |tiles: u64| {
        options
            .rate
            .filter(|r| *r > 0.0)
            .map(|r| Duration::try_from_secs_f64(tiles as f64 / r).unwrap_or(Duration::MAX))
    };
    let mut next_dispatch = Instant::now();
    let workers = Arc::new(Semaphore::new(concurrency));
    let mut stats = SeedStats::default();
    let mut rendering = JoinSet::new();
    // Each rendering metatile's write group, and whether it is a retry.
    let mut in_flight: HashMap<Id, (Option<String>, bool)> = HashMap::new();
    let mut storing = JoinSet::new();
    let mut groups = Groups::default();
    let mut retry: VecDeque<(u64, Metatile)> = VecDeque::new();
    let mut waiting = 0usize;
    let mut exhausted = false;
    let mut failure = None;
    let mut pending = plan.metatiles().enumerate().map(|(i, m)| (i as u64, m));
    loop {
        let stopping = || failure.is_some() || cancel.load(Ordering::SeqCst);
        while rendering.len() < concurrency + 1
            && storing.len() < concurrency
            && !stopping()
            && Instant::now() >= next_dispatch
        {
            let ((place, meta), group, is_retry) = if waiting == 0
                && let Some(meta) = retry.pop_front()
            {
                // It will wait for its locks: nothing may stay gathered.
                for flush in groups.close_all() {
                    storing.spawn(flush.store());
                }
                waiting += 1;
                (meta, None, true)
            } else if exhausted {
                break;
            } else {
                let Some((place, meta)) = pending.next() else {
                    exhausted = true;
                    break;
                };
                if options.skip.contains(&place) {
                    let n = u64::from(meta.cols() * meta.rows());
                    stats.metatiles_done += 1;
                    stats.tiles_done += n;
                    stats.tiles_skipped += n;
                    continue;
                }
                let group = tiles.write_group(&plan.layer, &plan.grid, plan.format, &meta);
                for flush in groups.dispatched(group.as_deref()) {
                    storing.spawn(flush.store());
                }
                ((place, meta), group, false)
            };
            let locking = if group.is_some() {
                Locking::Try
            } else {
                Locking::Wait
            };
            let (tiles, layer, grid, format) = (
                tiles.clone(),
                plan.layer.clone(),
                plan.grid.clone(),
                plan.format,
            );
            let n = u64::from(meta.cols() * meta.rows());
            if let Some(share) = pace(n) {
                // Unused time is kept for at most one metatile.
                let now = Instant::now();
                next_dispatch = next_dispatch.max(now.checked_sub(share).unwrap_or(now)) + share;
            }
            let workers = workers.clone();
            let handle = rendering.spawn(async move {
                let step = crate::tile_cache::seed_metatile(
                    &tiles, &layer, &grid, format, meta, force, locking, &workers,
                )
                .await;
                (n, place, meta, step)
            });
            in_flight.insert(handle.id(), (group, is_retry));
        }
        if exhausted || stopping() {
            for flush in groups.close_all() {
                storing.spawn(flush.store());
            }
        }
        if rendering.is_empty() && storing.is_empty() && (retry.is_empty() || stopping()) {
            if exhausted || stopping() {
                break;
            }
            // Only the rate holds the next metatile back.
            tokio::time::sleep_until(next_dispatch).await;
            continue;
        }
        let paced = !stopping() && Instant::now() < next_dispatch;
        tokio::select! {
            () = tokio::time::sleep_until(next_dispatch), if paced => {},
            Some(joined) = rendering.join_next_with_id() => {
                let id = match &joined {
                    Ok((id, _)) => *id,
                    Err(e) => e.id(),
                };
                let (group, was_retry) = in_flight.remove(&id).unwrap_or((None, false));
                if was_retry {
                    waiting -= 1;
                }
                let mut rendered = None;
                match joined {
                    Ok((_, (n, place, _, Ok(SeedStep::Skipped)))) => {
                        if let Some(share) = pace(n) {
                            next_dispatch = next_dispatch.checked_sub(share).unwrap_or(next_dispatch);
                        }
                        stats.metatiles_done += 1;
                        stats.tiles_done += n;
                        progress(&stats, &[place]);
                    }
                    Ok((_, (n, place, _, Ok(SeedStep::Rendered(unstored))))) => {
                        rendered = Some(Gathered { places: vec![place], tiles: n, unstored });
                    }
                    Ok((_, (n, place, meta, Ok(SeedStep::Busy)))) => {
                        // Dispatched again: its share is taken again then.
                        if let Some(share) = pace(n) {
                            next_dispatch = next_dispatch.checked_sub(share).unwrap_or(next_dispatch);
                        }
                        retry.push_back((place, meta));
                        if let Some(g) = &group {
                            groups.close(g);
                        }
                    }
                    Ok((_, (_, _, _, Err(e)))) => {
                        failure.get_or_insert(e);
                    }
                    Err(join) => {
                        failure.get_or_insert(TileError::Task(join));
                    }
                }
                let flush = match &group {
                    Some(g) => groups.finished(g, rendered),
                    None => rendered,
                };
                if let Some(flush) = flush {
                    storing.spawn(flush.store());
                }
            },
            Some(joined) = storing.join_next() => match joined {
                Ok((places, n, Ok(written))) => {
                    let m = places.len() as u64;
                    stats.metatiles_done += m;
                    stats.metatiles_rendered += m;
                    stats.tiles_done += n;
                    stats.tiles_written += written as u64;
                    progress(&stats, &places);
                }
                Ok((_, _, Err(e))) => {
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
        None if cancel.load(Ordering::SeqCst)
            && (!retry.is_empty() || pending.next().is_some()) =>
        {
            SeedEnd::Cancelled(stats)
        }
        None => SeedEnd::Complete(stats),
    }
}

/// Rendered metatiles waiting to be stored together.
#[derive(Debug)]
struct Gathered {
    /// The metatiles' places in the plan's order.
    places: Vec<u64>,
    tiles: u64,
    unstored: Unstored,
}

impl Gathered {
    /// Stores the tiles; answers the places and tile count with the result.
    async fn store(self) -> (Vec<u64>, u64, Result<usize, TileError>) {
        (self.places, self.tiles, self.unstored.store().await)
    }

    fn absorb(&mut self, other: Gathered) {
        self.places.extend(other.places);
        self.tiles += other.tiles;
        self.unstored.absorb(other.unstored);
    }
}

/// One write group a seed is gathering.
#[derive(Debug, Default)]
struct Group {
    gathered: Option<Gathered>,
    /// Its metatiles being rendered.
    rendering: usize,
    /// Whether more of its metatiles may still be dispatched.
    open: bool,
}

/// The write groups a seed is gathering: a group is stored once it is
/// closed (the plan moved past it, a lock of it was busy, or the seed is
/// ending) and none of its metatiles is still rendering. At most the last
/// dispatched group is open.
#[derive(Debug, Default)]
struct Groups {
    by_name: HashMap<String, Group>,
    open: Option<String>,
}

impl Groups {
    /// A metatile of `group` (or of none) is being dispatched: the group
    /// open before, if another, closes. Answers what is now to be stored.
    fn dispatched(&mut self, group: Option<&str>) -> Vec<Gathered> {
        let mut flushed = Vec::new();
        if self.open.as_deref() != group
            && let Some(previous) = self.open.take()
        {
            flushed.extend(self.close(&previous));
        }
        if let Some(name) = group {
            let entry = self.by_name.entry(name.to_string()).or_default();
            entry.rendering += 1;
            entry.open = true;
            self.open = Some(name.to_string());
        }
        flushed
    }

    /// A metatile of `group` is done rendering (`rendered`, or skipped,
    /// busy or failed). Answers what is now to be stored.
    fn finished(&mut self, group: &str, rendered: Option<Gathered>) -> Option<Gathered> {
        let entry = self.by_name.entry(group.to_string()).or_default();
        entry.rendering = entry.rendering.saturating_sub(1);
        if let Some(rendered) = rendered {
            match &mut entry.gathered {
                Some(g) => g.absorb(rendered),
                None => entry.gathered = Some(rendered),
            }
        }
        let full = entry
            .gathered
            .as_ref()
            .is_some_and(|g| g.unstored.len() >= MAX_GATHERED_TILES);
        if full {
            return entry.gathered.take();
        }
        self.take_if_done(group)
    }

    /// No more metatiles of `group` are gathered. Answers what is now to be
    /// stored.
    fn close(&mut self, group: &str) -> Option<Gathered> {
        if let Some(entry) = self.by_name.get_mut(group) {
            entry.open = false;
        }
        if self.open.as_deref() == Some(group) {
            self.open = None;
        }
        self.take_if_done(group)
    }

    /// Closes every group. Answers what is now to be stored (groups with
    /// metatiles still rendering are stored when those finish).
    fn close_all(&mut self) -> Vec<Gathered> {
        let names: Vec<String> = self.by_name.keys().cloned().collect();
        names.iter().filter_map(|g| self.close(g)).collect()
    }

    fn take_if_done(&mut self, group: &str) -> Option<Gathered> {
        let entry = self.by_name.get(group)?;
        if entry.open || entry.rendering > 0 {
            return None;
        }
        self.by_name.remove(group)?.gathered
    }
}
