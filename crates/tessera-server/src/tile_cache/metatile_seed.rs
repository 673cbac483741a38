//! Seeding one metatile: under its locks (and lease), skip it when every
//! tile is stored, else render and encode every tile and hand them back
//! unstored, so the seed can render the next metatile while this one is
//! written.

use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use tessera_grid::TileFormat;
use tessera_store::{Durability, MemoryStore, StoreError, TileKey, TileStore};
use tokio::sync::Semaphore;

use super::lease::Leased;
use super::lookup::MetaKey;
use super::miss::{BatchSaver, Owned};
use super::{TileCache, TileError, TileRequest, run_blocking};
use crate::cluster::LeaseHolder;
use crate::locks::KeyGuard;
use crate::metatile::Metatile;
use crate::model::{Freshness, Grid, Layer, LayerCache, tile_key};
use crate::render::{self, RenderError};

/// What a seed step did with one metatile.
#[derive(Debug)]
pub enum SeedStep {
    /// Every tile was already stored.
    Skipped,
    /// Rendered and encoded; still to be stored.
    Rendered(Unstored),
    /// Asked with [`Locking::Try`], and a lock was held by someone else:
    /// nothing was done and nothing is held.
    Busy,
}

/// How a seed step takes its metatile's locks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Locking {
    /// Waits for each (bounded by the cache's lock timeout), as requests do.
    Wait,
    /// Takes them only if all are free at once, else answers
    /// [`SeedStep::Busy`]: for a seed that holds other metatiles' locks
    /// while it gathers a store's write group, which must never wait for a
    /// lock meanwhile (another seed gathering the same group would wait
    /// for it in turn).
    Try,
}

/// A seeded metatile's tiles, encoded and not yet stored. The tiles' locks
/// (and the metatile's lease) are held until [`Unstored::store`] has made
/// them durable, so the next metatile can render while this one is
/// written and synced. Dropped unstored, the locks and the lease go and
/// nothing is written (another request or seed renders it again).
pub struct Unstored {
    batch: Vec<(TileKey, Bytes)>,
    guards: Vec<KeyGuard<TileKey>>,
    leases: Vec<Arc<LeaseHolder>>,
    store: Arc<dyn TileStore>,
    unsaved: Arc<MemoryStore>,
}

impl std::fmt::Debug for Unstored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unstored")
            .field("tiles", &self.batch.len())
            .field("leases", &self.leases.len())
            .finish_non_exhaustive()
    }
}

impl Unstored {
    /// The tiles to store.
    pub fn len(&self) -> usize {
        self.batch.len()
    }

    /// Whether there is no tile to store.
    pub fn is_empty(&self) -> bool {
        self.batch.is_empty()
    }

    /// Adds `other`'s tiles, locks and leases (a metatile of the same write
    /// group, [`TileCache::write_group`]): one [`Unstored::store`] then
    /// writes both with one `put_many`.
    pub fn absorb(&mut self, other: Unstored) {
        self.batch.extend(other.batch);
        self.guards.extend(other.guards);
        self.leases.extend(other.leases);
    }

    /// Stores every tile with [`Durability::Synced`] in one `put_many`,
    /// then releases the locks and the lease; returns the count. A failed
    /// write keeps the tiles in memory before their locks go (as a
    /// request's failed save does) and is the seed's error.
    pub async fn store(self) -> Result<usize, TileError> {
        let Unstored {
            batch,
            guards,
            leases,
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
        for lease in leases {
            lease.release().await;
        }
        stored??;
        Ok(count)
    }
}

/// The store's write group of `meta`'s tiles
/// ([`TileStore::write_group`] of its first tile), when the seed should
/// gather the group's metatiles and store them together: the layer is
/// cached, its store groups tiles, and no cluster leases are asked (a
/// lease is waited for, which a gathering seed must not do).
pub fn write_group(
    layer: &Arc<Layer>,
    grid: &Arc<Grid>,
    format: TileFormat,
    meta: &Metatile,
) -> Option<String> {
    let cache = layer.cache.as_ref()?;
    // Leases, and keys by source state (one per metatile), group nothing.
    if cache.leases.is_some() || super::state::keyed_by_state(layer) {
        return None;
    }
    let first = meta.tiles(&grid.tms).next()?;
    cache
        .store
        .write_group(&tile_key(layer, grid, format, first))
}

/// Seeds one metatile: takes its locks as `locking` says, skips it when
/// every tile is stored (unless `force`), otherwise asks its source to
/// fetch ahead ([`render::prefetch_layer`]), renders it and encodes
/// every tile under one of `slots` (the seed's workers), and returns
/// them for [`Unstored::store`] (under their locks).
pub async fn seed_metatile(
    tile_cache: &TileCache,
    layer: &Arc<Layer>,
    grid: &Arc<Grid>,
    format: TileFormat,
    meta: Metatile,
    force: bool,
    locking: Locking,
    slots: &Semaphore,
) -> Result<SeedStep, TileError> {
    let cache = layer
        .cache
        .as_ref()
        .ok_or_else(|| TileError::NotCached(layer.name.clone()))?;
    let tms = &grid.tms;
    let first = meta.tiles(tms).next().expect("a metatile has tiles");
    let layer = &super::state::layer_at_state(layer, grid, cache, first).await?;
    let req = TileRequest {
        layer: layer.clone(),
        grid: grid.clone(),
        coord: first,
        format,
    };
    let (meta_guard, tiles) = match locking {
        Locking::Wait => {
            let meta_guard = super::lookup::lock_metatile(tile_cache, &req, &meta).await?;
            let mut tiles = Vec::new();
            for coord in meta.tiles(tms) {
                let key = req.key_of(coord);
                let guard = super::lookup::lock_tile(tile_cache, key.clone()).await?;
                tiles.push(Owned {
                    coord,
                    key,
                    guard,
                    lease: None,
                });
            }
            (meta_guard, tiles)
        }
        Locking::Try => {
            let keys = meta.tiles(tms).map(|coord| req.key_of(coord));
            let Some((meta_guard, guards)) =
                super::lookup::try_lock_all(tile_cache, &req, &meta, keys)
            else {
                return Ok(SeedStep::Busy);
            };
            let tiles = meta
                .tiles(tms)
                .zip(guards)
                .map(|(coord, (key, guard))| Owned {
                    coord,
                    key,
                    guard,
                    lease: None,
                })
                .collect();
            (meta_guard, tiles)
        }
    };
    if !force {
        let store = cache.store.clone();
        let keys: Vec<TileKey> = tiles.iter().map(|t| t.key.clone()).collect();
        let freshness = cache.freshness;
        let all_stored =
            run_blocking(move || all_stored_and_fresh(store.as_ref(), &keys, freshness)).await??;
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
        match super::lease::lease(tile_cache, &req, cache, &meta, wanted).await? {
            Leased::Stored(_) => return Ok(SeedStep::Skipped),
            Leased::Render(held) => lease = held,
        }
    }
    match seed_leased(tile_cache, &req, cache, meta, meta_guard, tiles, slots).await {
        Ok(mut unstored) => {
            unstored.leases.extend(lease);
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
pub(super) async fn seed_leased(
    tile_cache: &TileCache,
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
        leases: Vec::new(),
        store: cache.store.clone(),
        unsaved: tile_cache.unsaved.clone(),
    };
    if !req.format.is_vector() {
        let tms = &req.grid.tms;
        let (width, height) = meta.render_size(tms);
        render::prefetch_layer(
            &req.layer,
            &*req.layer.style_for(req.format),
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
            made.push((
                t.key.clone(),
                super::passthrough::vector_tile(tile_cache, &one).await?,
            ));
        }
        drop(meta_guard);
        let guards = tiles.into_iter().map(|t| t.guard).collect();
        return Ok(unstored(made, guards));
    }
    let cutter = super::miss::render_metatile(tile_cache, req, meta).await?;
    drop(meta_guard);
    let saver = BatchSaver {
        metrics: tile_cache.metrics.clone(),
        layer: req.layer.name.clone(),
        unsaved: tile_cache.unsaved.clone(),
        store: cache.store.clone(),
        durability: Durability::Synced,
    };
    let (batch, _, guards) = run_blocking(move || saver.encode(&cutter, tiles, None)).await??;
    // Seeds own no tile leases (the metatile's lease is the seed's).
    let guards = guards.into_iter().map(|(guard, _)| guard).collect();
    Ok(unstored(batch, guards))
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
