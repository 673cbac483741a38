//! The cached tile path: look a tile up, and on a miss render its metatile
//! once, answer with the requested tile and save the others on the encode
//! pool.
//!
//! Lock protocol (see `docs/ARCHITECTURE.md`, "Metatiles and locks"):
//! 1. read the store; a hit is answered without any lock;
//! 2. take the metatile lock, then the tile lock (always in this order), and
//!    read the store again: whoever held the locks may just have saved it;
//! 3. render the metatile, then take every sibling's tile lock while still
//!    holding the metatile lock, and release the metatile lock;
//! 4. encode the requested tile on the request path and answer; each
//!    sibling's guard moves into the pool job that encodes and saves that
//!    sibling, and is dropped when the tile is stored.
//!
//! Only holders of a metatile lock ever wait for tile locks of that
//! metatile, and pool jobs wait for nothing, so there is no cycle: no
//! deadlock. A neighbour asking for a sibling waits on the metatile lock,
//! then on the sibling's tile lock until the save is done, and then hits:
//! a metatile is never rendered twice. Every wait is bounded by
//! `cache.lock_timeout_secs`.
//!
//! One job per file: `types` (requests, tiles, errors), `lookup` (store
//! reads and the two lock levels), `miss` (render, cut, save on the pool),
//! `passthrough` (uncached layers, vector tiles, upstream tiles passed
//! through), `alone` (a tile rendered alone, for `passthrough` and
//! `idle`), `idle` (the rest of a metatile whose tile was read alone,
//! read while renders are idle), `seed` (one seeded metatile, stored by
//! the caller), `lease`
//! (the cluster lease protocol), and this module: the [`TileCache`] and
//! its entry points.

mod alone;
mod idle;
mod lease;
mod lookup;
mod metatile_seed;
mod miss;
mod passthrough;
pub(crate) mod state;
#[cfg(test)]
mod tests;
mod types;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tessera_image::Color;
use tessera_store::{Durability, MemoryStore, Peeked, TileKey, TileStore};

pub use metatile_seed::{Locking, SeedStep, Unstored, seed_metatile};
pub use state::layer_at_state;
pub use types::{CacheStatus, Tile, TileError, TileRequest};

use crate::encode_pool::EncodePool;
use crate::locks::KeyedLocks;
use crate::metrics::{Metrics, RequestResult};
use crate::render::{RenderError, Renderer};
use crate::throttle::Throttle;
use lookup::MetaKey;
use tessera_grid::TileFormat;

use crate::metatile::Metatile;
use crate::model::{Grid, Layer};

/// Tiles are rendered with a transparent background; JPEG flattens over white.
const BACKGROUND: Color = Color([255, 255, 255, 255]);

/// Settings of the tile cache path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileCacheSettings {
    /// Longest wait for any lock.
    pub lock_timeout: Duration,
    /// Encode pool threads (0: everything inline).
    pub metatile_threads: usize,
    /// Encode pool queue length.
    pub encode_queue_len: usize,
    /// Read the other tiles of a metatile whose tile was read alone (a
    /// source's own pixels) in the background while a render slot is free
    /// (`cache.idle_siblings`; off for batch commands, which seed them).
    pub idle_siblings: bool,
}

/// Tiles rendered while their store refused writes, kept in memory (up to
/// this many bytes) so that a full disk does not make every request render
/// its metatile again.
const UNSAVED_BYTES: usize = 64 << 20;

/// Least time between two warnings about failed saves or reads.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// The cached tile path, shared by every tile endpoint and by seeding.
#[derive(Debug)]
pub struct TileCache {
    /// Tiles whose save failed, served from memory until evicted.
    unsaved: Arc<MemoryStore>,
    /// Warnings about failed saves and reads.
    warnings: Arc<Throttle>,
    renderer: Renderer,
    metrics: Arc<Metrics>,
    pool: EncodePool,
    metatile_locks: KeyedLocks<MetaKey>,
    tile_locks: KeyedLocks<TileKey>,
    /// The metatiles `idle`'s background task reads, and whether it runs.
    idle: Arc<idle::IdleReads>,
    lock_timeout: Duration,
    settings: TileCacheSettings,
}

impl TileCache {
    /// A cache path rendering with `renderer`.
    pub fn new(renderer: Renderer, metrics: Arc<Metrics>, settings: TileCacheSettings) -> Self {
        let pool = EncodePool::new(
            settings.metatile_threads,
            settings.encode_queue_len,
            metrics.encode_queue_depth().clone(),
        );
        TileCache {
            unsaved: Arc::new(MemoryStore::new(UNSAVED_BYTES, None)),
            warnings: Arc::new(Throttle::new(WARN_EVERY)),
            renderer,
            metrics,
            pool,
            metatile_locks: KeyedLocks::new(),
            tile_locks: KeyedLocks::new(),
            idle: Arc::default(),
            lock_timeout: settings.lock_timeout,
            settings,
        }
    }

    /// The settings the cache path was built with.
    pub fn settings(&self) -> &TileCacheSettings {
        &self.settings
    }

    /// Metatile and tile locks currently held or awaited.
    pub fn locks_in_use(&self) -> (usize, usize) {
        (self.metatile_locks.len(), self.tile_locks.len())
    }

    /// Returns the tile, from the store or rendered, and counts the request.
    pub async fn get(&self, req: &TileRequest) -> Result<Tile, TileError> {
        if let Some(used) = &req.layer.last_used {
            used.store(
                crate::searches::now_secs(),
                std::sync::atomic::Ordering::Relaxed,
            );
        }
        let result = match &req.layer.cache {
            Some(cache) if state::keyed_by_state(&req.layer) => {
                match state::at_state(req, cache).await {
                    Ok(at) => miss::get_cached(self, &at, cache).await,
                    Err(e) => Err(e),
                }
            }
            Some(cache) => miss::get_cached(self, req, cache).await,
            None => passthrough::render_uncached(self, req).await,
        };
        let outcome = match &result {
            Ok(Tile {
                status: CacheStatus::Hit,
                ..
            }) => RequestResult::Hit,
            Ok(_) => RequestResult::Miss,
            Err(e) => {
                self.metrics
                    .tile_failed(&req.layer.name, tessera_source::error_chain(e));
                RequestResult::Error
            }
        };
        self.metrics.tile_request(&req.layer.name, outcome);
        result
    }

    /// The tile when its layer's store holds it fresh (read as
    /// [`TileCache::get`] reads it, counted as a hit), else `None`: nothing
    /// is rendered. A layer without a cache holds nothing.
    pub async fn held(&self, req: &TileRequest) -> Option<Tile> {
        let cache = req.layer.cache.as_ref()?;
        let req = &state::at_state(req, cache).await.ok()?;
        let held = lookup::lookup(self, &cache.store, &req.key_of(req.coord)).await?;
        if !cache.freshness.is_fresh(held.stored_at, SystemTime::now()) {
            return None;
        }
        self.metrics
            .tile_request(&req.layer.name, RequestResult::Hit);
        Some(Tile::hit(held))
    }

    /// The tile when its layer's store holds it fresh and answers without
    /// blocking (memory, or a file in the page cache); `None` when
    /// [`TileCache::get`] must be asked. Not counted: the caller counts it
    /// with [`TileCache::count_hit`] once it answers with it (a caller may
    /// still refuse the request, for its rate).
    pub fn peek_hit(&self, req: &TileRequest) -> Option<Tile> {
        match Self::peek_hit_as(req, false)? {
            Peeked::Held(held) => Some(Tile::hit(held)),
            Peeked::File(_) => None,
        }
    }

    /// Like [`TileCache::peek_hit`], but the tile may come as its open
    /// file (see [`TileStore::peek_file`]); a [`Peeked::Held`] becomes a
    /// [`Tile`] with [`Tile::hit`].
    pub fn peek_hit_file(&self, req: &TileRequest) -> Option<Peeked> {
        Self::peek_hit_as(req, true)
    }

    fn peek_hit_as(req: &TileRequest, file: bool) -> Option<Peeked> {
        let cache = req.layer.cache.as_ref()?;
        // Its key depends on its source's state: asked on the slow path.
        if state::keyed_by_state(&req.layer) {
            return None;
        }
        let key = req.key_of(req.coord);
        let peeked = if file {
            cache.store.peek_file(&key)?
        } else {
            Peeked::Held(cache.store.peek(&key)?)
        };
        let stored_at = match &peeked {
            Peeked::Held(held) => held.stored_at,
            Peeked::File(file) => file.stored_at,
        };
        if !cache.freshness.is_fresh(stored_at, SystemTime::now()) {
            return None;
        }
        Some(peeked)
    }

    /// The store's write group of `meta`'s tiles, when a seed should
    /// gather the group's metatiles and store them together (see
    /// [`metatile_seed::write_group`]).
    pub fn write_group(
        &self,
        layer: &Arc<Layer>,
        grid: &Arc<Grid>,
        format: TileFormat,
        meta: &Metatile,
    ) -> Option<String> {
        metatile_seed::write_group(layer, grid, format, meta)
    }

    /// Counts a tile request of `layer` answered from
    /// [`TileCache::peek_hit`] or [`TileCache::peek_hit_file`] as a hit.
    pub fn count_hit(&self, layer: &str) {
        self.metrics.tile_request(layer, RequestResult::Hit);
    }
}

/// Stores a tile on the calling (blocking) thread; when the store
/// refuses it, keeps it in `unsaved` (so a request waiting on its lock
/// finds it instead of rendering again) and warns, throttled.
pub(super) fn put_or_keep(
    store: &dyn TileStore,
    unsaved: &MemoryStore,
    warnings: &Throttle,
    key: &TileKey,
    bytes: bytes::Bytes,
    durability: Durability,
) {
    if let Err(e) = store.put(key, bytes.clone(), durability) {
        let _ = unsaved.put(key, bytes, Durability::Buffered);
        if let Some(held_back) = warnings.allow() {
            tracing::warn!(tile = %key, error = &e as &dyn std::error::Error, held_back, "saving a tile failed; it is kept in memory");
        }
    }
}

pub(super) async fn run_blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, RenderError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(RenderError::Task)
}
