//! The rest of a metatile whose tile was read alone, read while renders
//! are idle.
//!
//! A tile that is its source's own pixels is read alone on the request
//! path (`passthrough`): a metatile would make the client wait for tiles it
//! did not ask for. The metatile's other tiles are still the likely next
//! requests (a client pans, a viewer fills its screen), so when a render
//! slot is free after such a miss, one background task reads them one by
//! one, as a metatile's siblings would have been, and stores them. It
//! stops as soon as every render slot is taken: it uses a core requests
//! leave idle and never queues ahead of them.
//!
//! It waits for no lock: a sibling whose tile lock is held (a request
//! reading it) or that the store holds is passed over, and a request for a
//! sibling the task is reading waits on that tile's lock and then hits, so
//! no tile is read twice. One task runs at a time in the process; a
//! metatile whose tile was read alone while it runs waits on a stack
//! ([`Waiting`]) and is read next, newest first (the likeliest next
//! requests: a viewer filling its screen, a scan moving along a row), at
//! most [`MAX_PENDING`] of them, the oldest dropped. When the task stops
//! because the slots are taken, what waits is dropped with it.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tessera_grid::TileCoord;
use tessera_store::{Durability, MemoryStore, Peek, TileKey, TileStore};

use super::{TileCache, TileRequest, put_or_keep, run_blocking};
use crate::locks::KeyedLocks;
use crate::metatile::Metatile;
use crate::metrics::Metrics;
use crate::model::LayerCache;
use crate::render::Renderer;
use crate::throttle::Throttle;

/// Most metatiles waiting for the background task: a few screens' worth
/// (16 metatiles of 4 x 4 are 240 tiles), a few kilobytes of addresses.
pub(super) const MAX_PENDING: usize = 16;

/// Whether a render slot is free for a read no request waits for.
fn idle(renderer: &Renderer) -> bool {
    let slots = renderer.slots_in_use();
    slots.busy < slots.slots
}

/// The metatiles whose other tiles wait to be read, newest on top, and
/// whether a task reads them. Shared by a cache path's clones.
pub(super) type IdleReads = Waiting<Where>;

/// Metatiles waiting to be read, each with `W`, where its tiles are read
/// from and stored.
#[derive(Debug)]
pub(super) struct Waiting<W>(Mutex<Pending<W>>);

impl<W> Default for Waiting<W> {
    fn default() -> Self {
        Waiting(Mutex::new(Pending {
            jobs: Vec::new(),
            running: false,
        }))
    }
}

#[derive(Debug)]
struct Pending<W> {
    jobs: Vec<Job<W>>,
    running: bool,
}

/// One metatile's tiles left to read, the next one last.
#[derive(Debug)]
struct Job<W> {
    at: Arc<W>,
    coords: Vec<TileCoord>,
}

/// Where a metatile's tiles are read from and stored.
#[derive(Debug)]
pub(super) struct Where {
    req: TileRequest,
    store: Arc<dyn TileStore>,
    durability: Durability,
}

impl<W> Waiting<W> {
    fn pending(&self) -> MutexGuard<'_, Pending<W>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Puts `job` on top, dropping the oldest beyond [`MAX_PENDING`];
    /// true when no task was running (the caller starts one, which counts
    /// as running from now on).
    fn push(&self, job: Job<W>) -> bool {
        let mut pending = self.pending();
        if pending.jobs.len() >= MAX_PENDING {
            pending.jobs.remove(0);
        }
        pending.jobs.push(job);
        !std::mem::replace(&mut pending.running, true)
    }

    /// The next tile to read, of the newest metatile; `None` when none is
    /// left or `go_on` is false, and then everything waiting is dropped and
    /// no task runs any more (under the same lock as [`Waiting::push`],
    /// so a job pushed meanwhile starts a new task).
    fn next(&self, go_on: bool) -> Option<(Arc<W>, TileCoord)> {
        let mut pending = self.pending();
        if go_on {
            while let Some(job) = pending.jobs.last_mut() {
                if let Some(coord) = job.coords.pop() {
                    return Some((job.at.clone(), coord));
                }
                pending.jobs.pop();
            }
        }
        pending.jobs.clear();
        pending.running = false;
        None
    }
}

/// Reads the other tiles of `req`'s metatile in the background, when the
/// cache path reads siblings while idle
/// ([`super::TileCacheSettings::idle_siblings`]) and a render slot is
/// free: starts the task, or puts the metatile on top of those waiting
/// for the running one. Returns at once.
pub(super) fn read_siblings(tile_cache: &TileCache, req: &TileRequest, cache: &LayerCache) {
    if !tile_cache.settings.idle_siblings || !idle(&tile_cache.renderer) {
        return;
    }
    let meta = Metatile::containing(&req.grid.tms, req.coord, cache.metatile);
    let mut coords: Vec<TileCoord> = meta
        .tiles(&req.grid.tms)
        .filter(|c| *c != req.coord)
        .collect();
    if coords.is_empty() {
        return;
    }
    coords.reverse();
    let at = Arc::new(Where {
        req: req.clone(),
        store: cache.store.clone(),
        durability: cache.durability,
    });
    if !tile_cache.idle.push(Job { at, coords }) {
        return;
    }
    let task = Siblings {
        reads: tile_cache.idle.clone(),
        renderer: tile_cache.renderer.clone(),
        metrics: tile_cache.metrics.clone(),
        locks: tile_cache.tile_locks.clone(),
        unsaved: tile_cache.unsaved.clone(),
        warnings: tile_cache.warnings.clone(),
        ended: false,
    };
    tokio::spawn(task.run());
}

/// What the background task needs of the cache path.
struct Siblings {
    reads: Arc<IdleReads>,
    renderer: Renderer,
    metrics: Arc<Metrics>,
    locks: KeyedLocks<TileKey>,
    unsaved: Arc<MemoryStore>,
    warnings: Arc<Throttle>,
    /// Set when the task ran to its end (and [`Waiting::next`] said no
    /// task runs); a task dropped before (a panic, the runtime shutting
    /// down) says so when dropped.
    ended: bool,
}

impl Drop for Siblings {
    fn drop(&mut self) {
        if !self.ended {
            let _ = self.reads.next(false);
        }
    }
}

impl Siblings {
    async fn run(mut self) {
        let mut go_on = true;
        while let Some((at, coord)) = self.reads.next(go_on && idle(&self.renderer)) {
            go_on = self.read(&at, coord).await;
        }
        self.ended = true;
    }

    /// Reads and stores one sibling unless it is locked or held; false
    /// when its read failed (the task stops).
    async fn read(&self, at: &Where, coord: TileCoord) -> bool {
        let key = at.req.key_of(coord);
        let Some(guard) = self.locks.try_lock(key.clone()) else {
            return true;
        };
        if self.held(&at.store, &key).await {
            return true;
        }
        let sibling = TileRequest {
            coord,
            ..at.req.clone()
        };
        let bytes = match super::alone::read_alone(&self.renderer, &sibling).await {
            // Drawn from part of the data: left for a request to read.
            Ok((_, Some(partial))) if !partial.lasts() => return true,
            Ok((bytes, _)) => bytes,
            Err(e) => {
                tracing::debug!(tile = %key, error = &e as &dyn std::error::Error, "reading a sibling while idle failed");
                return false;
            }
        };
        self.metrics.idle_tile_read(&at.req.layer.name);
        let (store, unsaved, warnings, durability) = (
            at.store.clone(),
            self.unsaved.clone(),
            self.warnings.clone(),
            at.durability,
        );
        let _ = run_blocking(move || {
            put_or_keep(&*store, &unsaved, &warnings, &key, bytes, durability);
            drop(guard);
        })
        .await;
        true
    }

    /// Whether `store` (or memory, for tiles whose save failed) holds the
    /// tile, or cannot say: only a tile known absent is read.
    async fn held(&self, store: &Arc<dyn TileStore>, key: &TileKey) -> bool {
        if self.unsaved.peek(key).is_some() {
            return true;
        }
        match store.peek_or_absent(key) {
            Peek::Held(_) => true,
            Peek::Absent => false,
            Peek::Unknown => {
                let (store, key) = (store.clone(), key.clone());
                !matches!(run_blocking(move || store.get(&key)).await, Ok(Ok(None)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(at: u32, xs: &[u32]) -> Job<u32> {
        Job {
            at: Arc::new(at),
            coords: xs
                .iter()
                .rev()
                .map(|&x| TileCoord::restored(3, x, 0))
                .collect(),
        }
    }

    fn next(waiting: &Waiting<u32>) -> Option<(u32, u32)> {
        waiting.next(true).map(|(at, c)| (*at, c.x()))
    }

    #[test]
    fn the_newest_metatile_is_read_first_and_a_task_starts_only_when_none_runs() {
        let waiting = Waiting::default();
        assert!(
            waiting.push(job(1, &[1, 2])),
            "the first push starts a task"
        );
        assert_eq!(next(&waiting), Some((1, 1)));
        assert!(!waiting.push(job(2, &[5, 6])), "a task runs");
        assert_eq!(next(&waiting), Some((2, 5)));
        assert_eq!(next(&waiting), Some((2, 6)));
        assert_eq!(next(&waiting), Some((1, 2)));
        assert_eq!(next(&waiting), None);
        assert!(
            waiting.push(job(3, &[7])),
            "the task ended: the next push starts one"
        );
    }

    #[test]
    fn the_oldest_beyond_the_bound_are_dropped_and_a_stop_drops_all() {
        let waiting = Waiting::default();
        for at in 0..u32::try_from(MAX_PENDING).unwrap() + 2 {
            let _ = waiting.push(job(at, &[at]));
        }
        let mut read = Vec::new();
        while let Some((at, _)) = next(&waiting) {
            read.push(at);
        }
        let newest = u32::try_from(MAX_PENDING).unwrap() + 1;
        assert_eq!(read.len(), MAX_PENDING);
        assert_eq!(read.first(), Some(&newest));
        assert_eq!(read.last(), Some(&2), "0 and 1 were dropped");
        assert!(waiting.push(job(9, &[1, 2])));
        assert_eq!(waiting.next(false), None, "a stop");
        assert!(waiting.push(job(10, &[3])), "nothing ran after the stop");
        assert_eq!(next(&waiting), Some((10, 3)), "the stop dropped job 9");
    }
}
