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

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use tessera_grid::TileFormat;
use tessera_grid::{TileCoord, TileRange};
use tessera_image::{Color, EncodeOptions, ImageView, RgbaImage, encode};
use tessera_store::cluster::Acquired;
use tessera_store::{
    Durability, HeldTile, MemoryStore, Peeked, StoreError, TileKey, TileStore, content_hash,
};
use tokio::sync::Semaphore;

use crate::cluster::{LeaseHolder, jittered};
use crate::encode_pool::{EncodePool, Job};
use crate::locks::{KeyGuard, KeyedLocks, LockTimeout};
use crate::metatile::Metatile;
use crate::metrics::{LeaseOutcome, LockKind, Metrics, RequestResult};
use crate::registry::{Freshness, Grid, Layer, LayerCache};
use crate::render::{self, Demand, ImageRequest, RenderError, Renderer};
use crate::throttle::Throttle;

/// Tiles are rendered with a transparent background; JPEG flattens over white.
const BACKGROUND: Color = Color([255, 255, 255, 255]);

/// A validated request for one tile of one layer.
#[derive(Debug, Clone)]
pub struct TileRequest {
    /// The layer.
    pub layer: Arc<Layer>,
    /// The grid.
    pub grid: Arc<Grid>,
    /// The tile.
    pub coord: TileCoord,
    /// The format.
    pub format: TileFormat,
}

/// Whether a tile came from the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheStatus {
    /// Read from the store.
    Hit,
    /// Rendered for this request.
    Miss,
}

/// An encoded tile and where it came from.
#[derive(Debug, Clone)]
pub struct Tile {
    /// Encoded bytes.
    pub bytes: Bytes,
    /// [`tessera_store::content_hash`] of the bytes (the ETag).
    pub hash: u128,
    /// Hit or miss.
    pub status: CacheStatus,
    /// When the tile was stored (a miss: now; `None`: the store does not
    /// know). Sent as `Last-Modified`.
    pub stored_at: Option<SystemTime>,
}

impl Tile {
    /// A hit on the tile `held`.
    pub fn hit(held: HeldTile) -> Tile {
        Tile {
            bytes: held.bytes,
            hash: held.hash,
            status: CacheStatus::Hit,
            stored_at: held.stored_at,
        }
    }
}

/// What a seed step did with one metatile.
#[derive(Debug)]
pub enum SeedStep {
    /// Every tile was already stored.
    Skipped,
    /// Rendered and encoded; still to be stored.
    Rendered(Unstored),
}

/// A seeded metatile's tiles, encoded and not yet stored. The tiles' locks
/// (and the metatile's lease) are held until [`Unstored::store`] has made
/// them durable, so the next metatile can render while this one is
/// written and synced. Dropped unstored, the locks and the lease go and
/// nothing is written (another request or seed renders it again).
pub struct Unstored {
    batch: Vec<(TileKey, Bytes)>,
    guards: Vec<KeyGuard<TileKey>>,
    lease: Option<Arc<LeaseHolder>>,
    store: Arc<dyn TileStore>,
    unsaved: Arc<MemoryStore>,
}

impl std::fmt::Debug for Unstored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unstored")
            .field("tiles", &self.batch.len())
            .field("leased", &self.lease.is_some())
            .finish_non_exhaustive()
    }
}

impl Unstored {
    /// Stores every tile with [`Durability::Synced`] in one `put_many`,
    /// then releases the locks and the lease; returns the count. A failed
    /// write keeps the tiles in memory before their locks go (as a
    /// request's failed save does) and is the seed's error.
    pub async fn store(self) -> Result<usize, TileError> {
        let Unstored {
            batch,
            guards,
            lease,
            store,
            unsaved,
        } = self;
        let count = batch.len();
        let stored = run_blocking(move || {
            let stored = store.put_many(batch.clone(), Durability::Synced);
            if stored.is_err() {
                let _ = unsaved.put_many(batch, Durability::Buffered);
            }
            stored
        })
        .await;
        drop(guards);
        if let Some(lease) = lease {
            lease.release().await;
        }
        stored??;
        Ok(count)
    }
}

/// Why a tile could not be produced.
#[derive(Debug, thiserror::Error)]
pub enum TileError {
    /// The render failed or timed out.
    #[error(transparent)]
    Render(#[from] RenderError),
    /// A lock wait timed out.
    #[error("waited {after:?} for the {kind} lock of this tile")]
    LockTimeout {
        /// `metatile` or `tile`.
        kind: &'static str,
        /// The configured timeout.
        after: Duration,
    },
    /// The store failed (seeding only: serving renders when a read fails
    /// and answers with the tile when a write fails).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A seeding task panicked or was cancelled.
    #[error("a seeding task failed")]
    Task(#[source] tokio::task::JoinError),
    /// Another node holds the metatile's lease and its tiles did not
    /// appear within `cluster.lease_wait_secs`.
    #[error(
        "another node ({holder}) is rendering this metatile and its tiles did not appear within {after:?}"
    )]
    LeaseWait {
        /// The node holding the lease.
        holder: String,
        /// The configured wait.
        after: Duration,
    },
    /// The lease could not be asked for (the store failed or did not
    /// answer in time); nothing was rendered.
    #[error("cannot ask for the metatile's lease")]
    Lease(#[source] StoreError),
    /// The layer has no cache to seed into.
    #[error("layer {0:?} has no cache store (its `cache.store` is `none`)")]
    NotCached(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct MetaKey {
    layer: String,
    grid: String,
    format: TileFormat,
    range: TileRange,
}

/// Settings of the tile cache path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileCacheSettings {
    /// Longest wait for any lock.
    pub lock_timeout: Duration,
    /// Encode pool threads (0: everything inline).
    pub metatile_threads: usize,
    /// Encode pool queue length.
    pub encode_queue_len: usize,
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
    lock_timeout: Duration,
    settings: TileCacheSettings,
}

/// A sibling tile whose lock is held until it is saved (and, with leases,
/// the metatile's lease, deleted when the last of its tiles is saved).
struct Owned {
    coord: TileCoord,
    key: TileKey,
    guard: KeyGuard<TileKey>,
    lease: Option<Arc<LeaseHolder>>,
}

/// What asking for a metatile's lease led to.
enum Leased {
    /// This node holds the lease: render.
    Render(Option<Arc<LeaseHolder>>),
    /// Another node stored the tile meanwhile.
    Stored(HeldTile),
}

/// A metatile's encoded tiles, and the store's verdict on saving them (a
/// seed fails on it, a request still answers with its tile).
type Saved = (Vec<(TileCoord, Bytes)>, Result<(), StoreError>);

/// Encodes a metatile's tiles and stores them in one `put_many`, then
/// releases their locks (and lease): the seeding path, and the serving path
/// for stores that prefer batches.
struct BatchSaver {
    metrics: Arc<Metrics>,
    layer: String,
    unsaved: Arc<MemoryStore>,
    store: Arc<dyn TileStore>,
    durability: Durability,
}

impl BatchSaver {
    /// Encodes `tiles` (`known`: one tile already encoded) and stores them;
    /// returns the encoded tiles and the store's verdict. A failed write
    /// keeps the tiles in memory before their locks go (see `save_job`).
    fn save(
        &self,
        cutter: &Cutter,
        tiles: Vec<Owned>,
        known: Option<&(TileCoord, Bytes)>,
    ) -> Result<Saved, TileError> {
        let (batch, encoded, guards) = self.encode(cutter, tiles, known)?;
        let stored = self.store.put_many(batch.clone(), self.durability);
        if stored.is_err() {
            let _ = self.unsaved.put_many(batch, Durability::Buffered);
        }
        drop(guards);
        Ok((encoded, stored))
    }

    /// Encodes `tiles` (`known`: one tile already encoded): the batch to
    /// store, the tiles by coordinate, and the locks (and leases) to
    /// release once they are stored.
    #[allow(clippy::type_complexity)] // three plain parts of one step
    fn encode(
        &self,
        cutter: &Cutter,
        tiles: Vec<Owned>,
        known: Option<&(TileCoord, Bytes)>,
    ) -> Result<
        (
            Vec<(TileKey, Bytes)>,
            Vec<(TileCoord, Bytes)>,
            Vec<(KeyGuard<TileKey>, Option<Arc<LeaseHolder>>)>,
        ),
        TileError,
    > {
        let mut batch = Vec::with_capacity(tiles.len());
        let mut encoded = Vec::with_capacity(tiles.len());
        let mut guards = Vec::with_capacity(tiles.len());
        let mut made = 0;
        for Owned {
            coord,
            key,
            guard,
            lease,
        } in tiles
        {
            let bytes = match known {
                Some((c, b)) if *c == coord => b.clone(),
                _ => {
                    made += 1;
                    cutter.encode(coord)?
                }
            };
            batch.push((key, bytes.clone()));
            encoded.push((coord, bytes));
            guards.push((guard, lease));
        }
        self.metrics.tiles_encoded(&self.layer, made);
        Ok((batch, encoded, guards))
    }
}

/// Everything a pool job needs to cut, encode and save tiles.
#[derive(Clone)]
struct Cutter {
    image: Arc<RgbaImage>,
    meta: Metatile,
    grid: Arc<Grid>,
    format: TileFormat,
    encoding: EncodeOptions,
}

impl Cutter {
    fn view(&self, coord: TileCoord) -> ImageView<'_> {
        let tms = &self.grid.tms;
        let (x, y) = self.meta.pixel_offset(tms, coord);
        self.image
            .sub_view(x, y, tms.tile_width, tms.tile_height)
            .expect("a metatile's tiles lie inside its image")
    }

    fn encode(&self, coord: TileCoord) -> Result<Bytes, RenderError> {
        Ok(Bytes::from(encode(
            self.view(coord),
            self.format,
            &self.encoding,
            BACKGROUND,
        )?))
    }
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
        let result = match &req.layer.cache {
            Some(cache) => self.get_cached(req, cache).await,
            None => self.render_uncached(req).await,
        };
        let outcome = match &result {
            Ok(Tile {
                status: CacheStatus::Hit,
                ..
            }) => RequestResult::Hit,
            Ok(_) => RequestResult::Miss,
            Err(_) => RequestResult::Error,
        };
        self.metrics.tile_request(&req.layer.name, outcome);
        result
    }

    /// The tile when its layer's store holds it fresh and answers without
    /// blocking (memory, or a file in the page cache), counted as a hit;
    /// `None` when [`TileCache::get`] must be asked.
    pub fn peek_hit(&self, req: &TileRequest) -> Option<Tile> {
        match self.peek_hit_as(req, false)? {
            Peeked::Held(held) => Some(Tile::hit(held)),
            Peeked::File(_) => None,
        }
    }

    /// Like [`TileCache::peek_hit`], but the tile may come as its open
    /// file (see [`TileStore::peek_file`]); a [`Peeked::Held`] becomes a
    /// [`Tile`] with [`Tile::hit`].
    pub fn peek_hit_file(&self, req: &TileRequest) -> Option<Peeked> {
        self.peek_hit_as(req, true)
    }

    fn peek_hit_as(&self, req: &TileRequest, file: bool) -> Option<Peeked> {
        let cache = req.layer.cache.as_ref()?;
        let key = tile_key(req, req.coord);
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
        self.metrics
            .tile_request(&req.layer.name, RequestResult::Hit);
        Some(peeked)
    }

    async fn render_uncached(&self, req: &TileRequest) -> Result<Tile, TileError> {
        if req.format.is_vector() {
            let bytes = self.vector_tile(req).await?;
            return Ok(miss(bytes));
        }
        let tms = &req.grid.tms;
        let bytes = self
            .renderer
            .render(
                ImageRequest {
                    layers: vec![req.layer.clone()],
                    bbox: tms.tile_bbox(req.coord),
                    crs: req.grid.crs.clone(),
                    width: tms.tile_width,
                    height: tms.tile_height,
                    format: req.format,
                    transparent: true,
                    background: BACKGROUND,
                },
                Demand::Tiles,
            )
            .await?;
        self.metrics.metatile_rendered(&req.layer.name);
        self.metrics.tiles_encoded(&req.layer.name, 1);
        Ok(miss(bytes))
    }

    async fn get_cached(&self, req: &TileRequest, cache: &LayerCache) -> Result<Tile, TileError> {
        let key = tile_key(req, req.coord);
        let fresh = |held: &HeldTile| cache.freshness.is_fresh(held.stored_at, SystemTime::now());
        if let Some(held) = self.lookup(&cache.store, &key).await
            && fresh(&held)
        {
            return Ok(Tile::hit(held));
        }
        if req.layer.passthrough
            && let Some(tile) = self.pass_through(req, cache, &key).await?
        {
            return Ok(tile);
        }
        let meta = Metatile::containing(&req.grid.tms, req.coord, cache.metatile);
        let meta_guard = self.lock_metatile(req, &meta).await?;
        let own_guard = self.lock_tile(key.clone()).await?;
        // A stale tile is rendered again, like a missing one.
        if let Some(held) = self.lookup(&cache.store, &key).await
            && fresh(&held)
        {
            return Ok(Tile::hit(held));
        }
        let lease = match self.lease(req, cache, &meta, Some(&key)).await? {
            Leased::Render(lease) => lease,
            Leased::Stored(held) => {
                // Another node stored the metatile: its other tiles are
                // read once (one GET per pack) into this node's memory, so
                // the requests that follow for them are hits.
                let keys: Vec<TileKey> = meta
                    .tiles(&req.grid.tms)
                    .filter(|c| *c != req.coord)
                    .map(|c| tile_key(req, c))
                    .collect();
                let store = cache.store.clone();
                let _ = run_blocking(move || store.get_many(&keys)).await;
                return Ok(Tile::hit(held));
            }
        };
        let cutter = self.render_metatile(req, meta).await?;
        let mut siblings = Vec::with_capacity(meta.tiles(&req.grid.tms).count());
        for coord in meta.tiles(&req.grid.tms) {
            if coord != req.coord {
                let key = tile_key(req, coord);
                let guard = self.lock_tile(key.clone()).await?;
                siblings.push(Owned {
                    coord,
                    key,
                    guard,
                    lease: lease.clone(),
                });
            }
        }
        drop(meta_guard);
        siblings.push(Owned {
            coord: req.coord,
            key,
            guard: own_guard,
            lease,
        });

        if self.pool.threads() == 0 {
            let (encoded, stored) = self
                .encode_and_store(
                    &req.layer.name,
                    cutter,
                    siblings,
                    cache.store.clone(),
                    cache.durability,
                )
                .await?;
            if let Err(e) = stored
                && let Some(held_back) = self.warnings.allow()
            {
                tracing::warn!(tile = %tile_key(req, req.coord), error = &e as &dyn std::error::Error, held_back, "saving a metatile failed; its tiles are kept in memory");
            }
            let own = encoded.into_iter().find(|(c, _)| *c == req.coord);
            return Ok(miss(
                own.map(|(_, b)| b)
                    .expect("the requested tile is in its metatile"),
            ));
        }

        let own = siblings.pop().expect("the requested tile was pushed last");
        let own_bytes = {
            let cutter = cutter.clone();
            let coord = own.coord;
            run_blocking(move || cutter.encode(coord)).await??
        };
        self.metrics.tiles_encoded(&req.layer.name, 1);

        let mut leftovers: Vec<Job> = Vec::new();
        let mut submit = |job: Job| {
            if let Err(job) = self.pool.try_submit(job) {
                leftovers.push(job);
            }
        };
        if cache.store.prefers_batches() {
            // One write for the metatile (tiles grouped in objects: one PUT
            // instead of a conditional merge per tile).
            let saver = BatchSaver {
                metrics: self.metrics.clone(),
                layer: req.layer.name.clone(),
                unsaved: self.unsaved.clone(),
                store: cache.store.clone(),
                durability: cache.durability,
            };
            let (warnings, first) = (self.warnings.clone(), tile_key(req, req.coord));
            let known = Some((own.coord, own_bytes.clone()));
            let cutter = cutter.clone();
            let mut tiles = siblings;
            tiles.push(own);
            submit(Box::new(move || {
                match saver.save(&cutter, tiles, known.as_ref()) {
                    Ok((_, Ok(()))) => {}
                    Ok((_, Err(e))) => {
                        if let Some(held_back) = warnings.allow() {
                            tracing::warn!(tile = %first, error = &e as &dyn std::error::Error, held_back, "saving a metatile failed; its tiles are kept in memory");
                        }
                    }
                    Err(e) => {
                        if let Some(held_back) = warnings.allow() {
                            tracing::warn!(tile = %first, error = &e as &dyn std::error::Error, held_back, "encoding a metatile's tiles failed");
                        }
                    }
                }
            }));
        } else {
            submit(self.save_job(cache, own, Some(own_bytes.clone()), &cutter, req));
            for sibling in siblings {
                submit(self.save_job(cache, sibling, None, &cutter, req));
            }
        }
        if !leftovers.is_empty() {
            // The pool is saturated: this request does the work itself.
            run_blocking(move || leftovers.into_iter().for_each(|job| job())).await?;
        }
        Ok(miss(own_bytes))
    }

    /// A vector tile made by the layer's source (on a blocking thread).
    async fn vector_tile(&self, req: &TileRequest) -> Result<Bytes, TileError> {
        let (source, tms, coord, format) = (
            req.layer.source.clone(),
            req.grid.tms.clone(),
            req.coord,
            req.format,
        );
        let made = run_blocking(move || source.passthrough(&tms, coord, format, None)).await?;
        let bytes = made
            .ok_or_else(|| {
                TileError::Render(RenderError::Source(tessera_source::SourceError::Read {
                    path: req.layer.name.clone(),
                    source: "the layer's source does not make vector tiles".into(),
                }))
            })?
            .map_err(|e| TileError::Render(RenderError::Source(e)))?;
        self.metrics.metatile_rendered(&req.layer.name);
        self.metrics.tiles_encoded(&req.layer.name, 1);
        Ok(bytes.unwrap_or_else(|| Bytes::from_static(tessera_grid::EMPTY_MVT)))
    }

    /// Serves the source's own tile when it passes tiles through for this
    /// grid and format (an upstream tile service with the same tiles): one
    /// upstream tile, under the tile lock only, stored as it came. `None`
    /// when the source cannot; a tile the upstream lacks is rendered alone
    /// (transparent) and stored.
    async fn pass_through(
        &self,
        req: &TileRequest,
        cache: &LayerCache,
        key: &TileKey,
    ) -> Result<Option<Tile>, TileError> {
        let guard = self.lock_tile(key.clone()).await?;
        if let Some(held) = self.lookup(&cache.store, key).await
            && cache.freshness.is_fresh(held.stored_at, SystemTime::now())
        {
            return Ok(Some(Tile::hit(held)));
        }
        if req.format.is_vector() {
            let bytes = self.vector_tile(req).await?;
            self.save_passed(cache, key, bytes.clone()).await?;
            drop(guard);
            return Ok(Some(miss(bytes)));
        }
        let (source, tms, coord, format) = (
            req.layer.source.clone(),
            req.grid.tms.clone(),
            req.coord,
            req.format,
        );
        let fetched = run_blocking(move || source.passthrough(&tms, coord, format, None)).await?;
        let bytes = match fetched {
            None => return Ok(None),
            Some(Err(e)) => return Err(TileError::Render(RenderError::Source(e))),
            Some(Ok(Some(bytes))) => bytes,
            Some(Ok(None)) => self.render_uncached(req).await?.bytes,
        };
        self.save_passed(cache, key, bytes.clone()).await?;
        drop(guard);
        Ok(Some(miss(bytes)))
    }

    /// Stores a tile that was not cut from a metatile; a failed write
    /// keeps it in memory and is logged (throttled), as for metatiles.
    async fn save_passed(
        &self,
        cache: &LayerCache,
        key: &TileKey,
        bytes: Bytes,
    ) -> Result<(), TileError> {
        let (store, k, b, durability) = (cache.store.clone(), key.clone(), bytes, cache.durability);
        let (unsaved, warnings) = (self.unsaved.clone(), self.warnings.clone());
        run_blocking(move || {
            if let Err(e) = store.put(&k, b.clone(), durability) {
                let _ = unsaved.put(&k, b, Durability::Buffered);
                if let Some(held_back) = warnings.allow() {
                    tracing::warn!(tile = %k, error = &e as &dyn std::error::Error, held_back, "saving a tile failed; it is kept in memory");
                }
            }
        })
        .await?;
        Ok(())
    }

    /// A pool job that encodes (unless `bytes` is given) and saves one tile,
    /// then releases its lock.
    fn save_job(
        &self,
        cache: &LayerCache,
        tile: Owned,
        bytes: Option<Bytes>,
        cutter: &Cutter,
        req: &TileRequest,
    ) -> Job {
        let store = cache.store.clone();
        let durability = cache.durability;
        let cutter = cutter.clone();
        let metrics = self.metrics.clone();
        let layer = req.layer.name.clone();
        let (unsaved, warnings) = (self.unsaved.clone(), self.warnings.clone());
        Box::new(move || {
            let Owned {
                coord,
                key,
                guard,
                lease,
            } = tile;
            let bytes = match bytes {
                Some(b) => b,
                None => match cutter.encode(coord) {
                    Ok(b) => {
                        metrics.tiles_encoded(&layer, 1);
                        b
                    }
                    Err(e) => {
                        if let Some(held_back) = warnings.allow() {
                            tracing::warn!(tile = %key, error = &e as &dyn std::error::Error, held_back, "encoding a sibling tile failed");
                        }
                        return;
                    }
                },
            };
            if let Err(e) = store.put(&key, bytes.clone(), durability) {
                // Kept in memory before the lock goes, so a neighbour
                // waiting for this tile finds it instead of rendering again.
                let _ = unsaved.put(&key, bytes, Durability::Buffered);
                if let Some(held_back) = warnings.allow() {
                    tracing::warn!(tile = %key, error = &e as &dyn std::error::Error, held_back, "saving a tile failed; it is kept in memory");
                }
            }
            drop(guard);
            drop(lease);
        })
    }

    /// Seeds one metatile: takes its locks, skips it when every tile is
    /// stored (unless `force`), otherwise asks its source to fetch ahead
    /// ([`render::prefetch_layer`]), renders it and encodes every tile
    /// under one of `slots` (the seed's workers), and returns them for
    /// [`Unstored::store`] (under their locks).
    pub async fn seed_metatile(
        &self,
        layer: &Arc<Layer>,
        grid: &Arc<Grid>,
        format: TileFormat,
        meta: Metatile,
        force: bool,
        slots: &Semaphore,
    ) -> Result<SeedStep, TileError> {
        let cache = layer
            .cache
            .as_ref()
            .ok_or_else(|| TileError::NotCached(layer.name.clone()))?;
        let tms = &grid.tms;
        let first = meta.tiles(tms).next().expect("a metatile has tiles");
        let req = TileRequest {
            layer: layer.clone(),
            grid: grid.clone(),
            coord: first,
            format,
        };
        let meta_guard = self.lock_metatile(&req, &meta).await?;
        let mut tiles = Vec::new();
        for coord in meta.tiles(tms) {
            let key = tile_key(&req, coord);
            let guard = self.lock_tile(key.clone()).await?;
            tiles.push(Owned {
                coord,
                key,
                guard,
                lease: None,
            });
        }
        if !force {
            let store = cache.store.clone();
            let keys: Vec<TileKey> = tiles.iter().map(|t| t.key.clone()).collect();
            let freshness = cache.freshness;
            let all_stored =
                run_blocking(move || all_stored_and_fresh(store.as_ref(), &keys, freshness))
                    .await??;
            if all_stored {
                return Ok(SeedStep::Skipped);
            }
        }
        // With leases, the seed holds its metatile's lease until every tile
        // is stored, and deletes it before returning (the command may exit
        // right after).
        let mut lease = None;
        if cache.leases.is_some() {
            // The last tile of the metatile is the one waited for when
            // another node holds the lease (its tiles are stored together).
            let last = tiles.last().expect("a metatile has tiles").key.clone();
            let wanted = (!force).then_some(&last);
            match self.lease(&req, cache, &meta, wanted).await? {
                Leased::Stored(_) => return Ok(SeedStep::Skipped),
                Leased::Render(held) => lease = held,
            }
        }
        match self
            .seed_leased(&req, cache, meta, meta_guard, tiles, slots)
            .await
        {
            Ok(mut unstored) => {
                unstored.lease = lease;
                Ok(SeedStep::Rendered(unstored))
            }
            Err(e) => {
                if let Some(lease) = lease {
                    lease.release().await;
                }
                Err(e)
            }
        }
    }

    /// The rendering part of [`TileCache::seed_metatile`], under its locks.
    async fn seed_leased(
        &self,
        req: &TileRequest,
        cache: &LayerCache,
        meta: Metatile,
        meta_guard: KeyGuard<MetaKey>,
        tiles: Vec<Owned>,
        slots: &Semaphore,
    ) -> Result<Unstored, TileError> {
        let unstored = |batch, guards| Unstored {
            batch,
            guards,
            lease: None,
            store: cache.store.clone(),
            unsaved: self.unsaved.clone(),
        };
        if !req.format.is_vector() {
            let tms = &req.grid.tms;
            let (width, height) = meta.render_size(tms);
            render::prefetch_layer(
                &req.layer,
                &meta.render_bbox(tms),
                &req.grid.crs,
                width,
                height,
            );
        }
        let _slot = slots.acquire().await.map_err(|_| RenderError::Closed)?;
        if req.format.is_vector() {
            // Vector tiles are cut one by one (no metatile to share).
            let mut made = Vec::with_capacity(tiles.len());
            for t in &tiles {
                let one = TileRequest {
                    coord: t.coord,
                    ..req.clone()
                };
                made.push((t.key.clone(), self.vector_tile(&one).await?));
            }
            drop(meta_guard);
            let guards = tiles.into_iter().map(|t| t.guard).collect();
            return Ok(unstored(made, guards));
        }
        let cutter = self.render_metatile(req, meta).await?;
        drop(meta_guard);
        let saver = BatchSaver {
            metrics: self.metrics.clone(),
            layer: req.layer.name.clone(),
            unsaved: self.unsaved.clone(),
            store: cache.store.clone(),
            durability: Durability::Synced,
        };
        let (batch, _, guards) = run_blocking(move || saver.encode(&cutter, tiles, None)).await??;
        // Seeds own no tile leases (the metatile's lease is the seed's).
        let guards = guards.into_iter().map(|(guard, _)| guard).collect();
        Ok(unstored(batch, guards))
    }

    /// Encodes every tile and stores them in one batch, then releases their
    /// locks. Returns the encoded tiles, and the store's verdict separately:
    /// a seed fails on it, a request still answers with its tile.
    async fn encode_and_store(
        &self,
        layer: &str,
        cutter: Cutter,
        tiles: Vec<Owned>,
        store: Arc<dyn TileStore>,
        durability: Durability,
    ) -> Result<Saved, TileError> {
        let saver = BatchSaver {
            metrics: self.metrics.clone(),
            layer: layer.to_string(),
            unsaved: self.unsaved.clone(),
            store,
            durability,
        };
        run_blocking(move || saver.save(&cutter, tiles, None)).await?
    }

    /// With leases on (`cluster.leases`), asks for the metatile's lease
    /// (the caller holds the local metatile lock, so a node asks once per
    /// metatile at a time). Won or taken over: re-reads the tile from the
    /// store itself (another node may have stored it since the last read)
    /// and renders unless it is there. Held by another node: waits, with
    /// back-off and jitter, for `key` to appear in the store, asking again
    /// now and then (the holder may have died or given up), at most
    /// `cluster.lease_wait_secs`. With `key` `None` (a forced seed, which
    /// renders whatever is stored) the store is not read: it waits for the
    /// lease itself.
    async fn lease(
        &self,
        req: &TileRequest,
        cache: &LayerCache,
        meta: &Metatile,
        key: Option<&TileKey>,
    ) -> Result<Leased, TileError> {
        let Some(leases) = &cache.leases else {
            return Ok(Leased::Render(None));
        };
        let path = leases.coordinator.lease_path(
            &req.layer.cache_key,
            &req.grid.tms.id,
            req.format,
            &meta.range,
        );
        let start = Instant::now();
        let mut delay = Duration::from_millis(20);
        let mut lost = false;
        loop {
            let left = leases.wait.saturating_sub(start.elapsed());
            let asked = tokio::time::timeout(
                left.max(Duration::from_millis(1)),
                leases.coordinator.acquire(&path, &leases.node, leases.ttl),
            )
            .await;
            let held = match asked {
                Err(_) => {
                    self.metrics.lease_requested(LeaseOutcome::Error);
                    return Err(TileError::Lease(StoreError::Io {
                        store: cache.store_name.clone(),
                        op: "lease",
                        key: path,
                        source: format!("no answer within {:?}", leases.wait).into(),
                    }));
                }
                Ok(Err(e)) => {
                    self.metrics.lease_requested(LeaseOutcome::Error);
                    return Err(TileError::Lease(e));
                }
                Ok(Ok(Acquired::Won(h))) => {
                    self.metrics.lease_requested(LeaseOutcome::Won);
                    h
                }
                Ok(Ok(Acquired::TakenOver(h))) => {
                    self.metrics.lease_requested(LeaseOutcome::TakenOver);
                    tracing::info!(lease = %h.key(), "took over an expired lease");
                    h
                }
                Ok(Ok(Acquired::Held(info))) => {
                    if !lost {
                        self.metrics.lease_requested(LeaseOutcome::Lost);
                        lost = true;
                    }
                    let mut polls = 0u32;
                    loop {
                        if start.elapsed() >= leases.wait {
                            return Err(TileError::LeaseWait {
                                holder: info.node,
                                after: leases.wait,
                            });
                        }
                        let left = leases.wait.saturating_sub(start.elapsed());
                        tokio::time::sleep(jittered(delay).min(left)).await;
                        delay = (delay * 2).min(Duration::from_millis(500));
                        if let Some(key) = key
                            && let Some(held) = self.read_through(cache, key).await
                        {
                            self.metrics.lease_waited(start);
                            return Ok(Leased::Stored(held));
                        }
                        polls += 1;
                        if key.is_none()
                            || polls.is_multiple_of(4)
                            || info.expired_for(SystemTime::now(), leases.ttl)
                        {
                            break;
                        }
                    }
                    continue;
                }
            };
            let holder = LeaseHolder::start(leases, held);
            if lost {
                self.metrics.lease_waited(start);
            }
            if let Some(key) = key
                && let Some(held) = self.read_through(cache, key).await
            {
                return Ok(Leased::Stored(held));
            }
            return Ok(Leased::Render(Some(holder)));
        }
    }

    /// Reads a fresh `key` from the store itself, past this process's copies.
    async fn read_through(&self, cache: &LayerCache, key: &TileKey) -> Option<HeldTile> {
        let (store, k) = (cache.store.clone(), key.clone());
        run_blocking(move || store.forget(&k)).await.ok()?;
        self.lookup(&cache.store, key)
            .await
            .filter(|held| cache.freshness.is_fresh(held.stored_at, SystemTime::now()))
    }

    async fn render_metatile(
        &self,
        req: &TileRequest,
        meta: Metatile,
    ) -> Result<Cutter, TileError> {
        let tms = &req.grid.tms;
        let image = self
            .renderer
            .render_image(
                req.layer.clone(),
                meta.render_bbox(tms),
                req.grid.crs.clone(),
                meta.render_size(tms),
                meta.tile_rows(tms),
            )
            .await?;
        self.metrics.metatile_rendered(&req.layer.name);
        Ok(Cutter {
            image: Arc::new(image),
            meta,
            grid: req.grid.clone(),
            format: req.format,
            encoding: *self.renderer.encoding(),
        })
    }

    /// Reads the store: from memory inline when it holds the tile, else on a
    /// blocking thread. A failing store is logged and treated as a miss: the
    /// tile is rendered rather than refused.
    async fn lookup(&self, store: &Arc<dyn TileStore>, key: &TileKey) -> Option<HeldTile> {
        if let Some(held) = store.peek(key) {
            return Some(held);
        }
        let (store, k) = (store.clone(), key.clone());
        match run_blocking(move || {
            store.get_stored(&k).map(|found| {
                found.map(|t| HeldTile {
                    hash: content_hash(&t.bytes),
                    bytes: t.bytes,
                    stored_at: t.stored_at,
                })
            })
        })
        .await
        {
            // Tiles the store refused are only looked for after it misses,
            // so hits never touch the unsaved map.
            Ok(Ok(found)) => found.or_else(|| self.unsaved.peek(key)),
            Ok(Err(e)) => {
                if let Some(held_back) = self.warnings.allow() {
                    tracing::warn!(tile = %key, error = &e as &dyn std::error::Error, held_back, "cache read failed; rendering instead");
                }
                self.unsaved.peek(key)
            }
            Err(e) => {
                tracing::warn!(tile = %key, error = &e as &dyn std::error::Error, "cache read task failed");
                self.unsaved.peek(key)
            }
        }
    }

    async fn lock_metatile(
        &self,
        req: &TileRequest,
        meta: &Metatile,
    ) -> Result<KeyGuard<MetaKey>, TileError> {
        let key = MetaKey {
            layer: req.layer.cache_key.clone(),
            grid: req.grid.tms.id.clone(),
            format: req.format,
            range: meta.range,
        };
        let start = Instant::now();
        let result = self.metatile_locks.lock(key, self.lock_timeout).await;
        self.metrics.lock_waited(LockKind::Metatile, start);
        result.map_err(|LockTimeout(after)| TileError::LockTimeout {
            kind: "metatile",
            after,
        })
    }

    async fn lock_tile(&self, key: TileKey) -> Result<KeyGuard<TileKey>, TileError> {
        let start = Instant::now();
        let result = self.tile_locks.lock(key, self.lock_timeout).await;
        self.metrics.lock_waited(LockKind::Tile, start);
        result.map_err(|LockTimeout(after)| TileError::LockTimeout {
            kind: "tile",
            after,
        })
    }
}

fn miss(bytes: Bytes) -> Tile {
    Tile {
        hash: content_hash(&bytes),
        bytes,
        status: CacheStatus::Miss,
        stored_at: Some(SystemTime::now()),
    }
}

/// Whether every one of `keys` is stored and, when the layer's tiles
/// expire, still fresh (one read per tile then; else [`TileStore::all_exist`]).
fn all_stored_and_fresh(
    store: &dyn TileStore,
    keys: &[TileKey],
    freshness: Freshness,
) -> Result<bool, StoreError> {
    if !freshness.expires() {
        return store.all_exist(keys);
    }
    let now = SystemTime::now();
    for k in keys {
        match store.get_stored(k)? {
            Some(t) if freshness.is_fresh(t.stored_at, now) => {}
            _ => return Ok(false),
        }
    }
    Ok(true)
}

/// The store key of tile `coord` of the request's layer, grid and format.
pub fn tile_key(req: &TileRequest, coord: TileCoord) -> TileKey {
    store_key(&req.layer, &req.grid, req.format, coord)
}

/// The store key of tile `coord` of `layer` in `grid` and `format`.
pub fn store_key(layer: &Layer, grid: &Grid, format: TileFormat, coord: TileCoord) -> TileKey {
    let matrix = grid
        .tms
        .matrix(coord.z())
        .expect("a TileCoord is inside its grid");
    TileKey {
        layer: layer.cache_key.clone(),
        grid: grid.tms.id.clone(),
        coord,
        matrix_height: matrix.matrix_height,
        matrix_width: matrix.matrix_width,
        format,
    }
}

async fn run_blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, RenderError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(RenderError::Task)
}
