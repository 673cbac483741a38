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
//! no tile is read twice. One task runs at a time in the process.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tessera_grid::TileCoord;
use tessera_store::{Durability, MemoryStore, Peek, TileKey, TileStore};

use super::{TileCache, TileRequest, run_blocking};
use crate::locks::KeyedLocks;
use crate::metatile::Metatile;
use crate::metrics::Metrics;
use crate::model::LayerCache;
use crate::render::Renderer;
use crate::throttle::Throttle;

/// Whether a render slot is free for a read no request waits for.
fn idle(renderer: &Renderer) -> bool {
    let slots = renderer.slots_in_use();
    slots.busy < slots.slots
}

/// Starts reading the other tiles of `req`'s metatile in the background,
/// when the cache path reads siblings while idle
/// ([`super::TileCacheSettings::idle_siblings`]), a render slot is free
/// and no such task runs already. Returns at once.
pub(super) fn read_siblings(tile_cache: &TileCache, req: &TileRequest, cache: &LayerCache) {
    if !tile_cache.settings.idle_siblings || !idle(&tile_cache.renderer) {
        return;
    }
    let meta = Metatile::containing(&req.grid.tms, req.coord, cache.metatile);
    let coords: Vec<TileCoord> = meta
        .tiles(&req.grid.tms)
        .filter(|c| *c != req.coord)
        .collect();
    if coords.is_empty() || tile_cache.idle_running.swap(true, Ordering::AcqRel) {
        return;
    }
    let task = Siblings {
        running: Running(tile_cache.idle_running.clone()),
        renderer: tile_cache.renderer.clone(),
        metrics: tile_cache.metrics.clone(),
        locks: tile_cache.tile_locks.clone(),
        unsaved: tile_cache.unsaved.clone(),
        warnings: tile_cache.warnings.clone(),
        store: cache.store.clone(),
        durability: cache.durability,
        req: req.clone(),
    };
    tokio::spawn(task.run(coords));
}

/// Clears the one-task flag when the task ends, however it ends.
struct Running(Arc<AtomicBool>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// What the background task needs of the cache path.
struct Siblings {
    running: Running,
    renderer: Renderer,
    metrics: Arc<Metrics>,
    locks: KeyedLocks<TileKey>,
    unsaved: Arc<MemoryStore>,
    warnings: Arc<Throttle>,
    store: Arc<dyn TileStore>,
    durability: Durability,
    req: TileRequest,
}

impl Siblings {
    async fn run(self, coords: Vec<TileCoord>) {
        for coord in coords {
            if !idle(&self.renderer) {
                break;
            }
            let key = self.req.key_of(coord);
            let Some(guard) = self.locks.try_lock(key.clone()) else {
                continue;
            };
            if self.held(&key).await {
                continue;
            }
            let sibling = TileRequest {
                coord,
                ..self.req.clone()
            };
            let bytes = match super::alone::read_alone(&self.renderer, &sibling).await {
                // Drawn from part of the data: left for a request to read.
                Ok((_, Some(partial))) if !partial.lasts() => continue,
                Ok((bytes, _)) => bytes,
                Err(e) => {
                    tracing::debug!(tile = %key, error = &e as &dyn std::error::Error, "reading a sibling while idle failed");
                    break;
                }
            };
            self.metrics.idle_tile_read(&self.req.layer.name);
            let (store, unsaved, warnings, durability) = (
                self.store.clone(),
                self.unsaved.clone(),
                self.warnings.clone(),
                self.durability,
            );
            let _ = run_blocking(move || {
                if let Err(e) = store.put(&key, bytes.clone(), durability) {
                    let _ = unsaved.put(&key, bytes, Durability::Buffered);
                    if let Some(held_back) = warnings.allow() {
                        tracing::warn!(tile = %key, error = &e as &dyn std::error::Error, held_back, "saving a tile failed; it is kept in memory");
                    }
                }
                drop(guard);
            })
            .await;
        }
        drop(self.running);
    }

    /// Whether the store (or memory, for tiles whose save failed) holds
    /// the tile, or cannot say: only a tile known absent is read.
    async fn held(&self, key: &TileKey) -> bool {
        if self.unsaved.peek(key).is_some() {
            return true;
        }
        match self.store.peek_or_absent(key) {
            Peek::Held(_) => true,
            Peek::Absent => false,
            Peek::Unknown => {
                let (store, key) = (self.store.clone(), key.clone());
                !matches!(run_blocking(move || store.get(&key)).await, Ok(Ok(None)))
            }
        }
    }
}
