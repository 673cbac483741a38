//! Reading the store and taking the two levels of locks: the metatile
//! lock, then the tile lock, each wait bounded by `cache.lock_timeout_secs`.

use std::sync::Arc;
use std::time::Instant;

use tessera_grid::{TileFormat, TileRange};
use tessera_store::{HeldTile, Peek, TileKey, TileStore, content_hash};

use super::{TileCache, TileError, TileRequest, run_blocking};
use crate::locks::{KeyGuard, KeyedLocks, LockTimeout};
use crate::metatile::Metatile;
use crate::metrics::LockKind;

/// What a metatile lock is taken on: one metatile of one layer key, grid
/// and format.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct MetaKey {
    layer: String,
    grid: String,
    format: TileFormat,
    range: TileRange,
}

/// A tile's key and its held lock.
pub(super) type LockedTile = (TileKey, KeyGuard<TileKey>);

impl MetaKey {
    fn of(req: &TileRequest, meta: &Metatile) -> MetaKey {
        MetaKey {
            layer: req.layer.cache_key.clone(),
            grid: req.grid.tms.id.clone(),
            format: req.format,
            range: meta.range,
        }
    }
}

/// Reads the store: from memory inline when it holds the tile, nothing
/// when it tells inline that it has none, else on a blocking thread. A
/// failing store is logged and treated as a miss: the tile is rendered
/// rather than refused.
pub(super) async fn lookup(
    tile_cache: &TileCache,
    store: &Arc<dyn TileStore>,
    key: &TileKey,
) -> Option<HeldTile> {
    match store.peek_or_absent(key) {
        Peek::Held(held) => return Some(held),
        Peek::Absent => return tile_cache.unsaved.peek(key),
        Peek::Unknown => {}
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
        Ok(Ok(found)) => found.or_else(|| tile_cache.unsaved.peek(key)),
        Ok(Err(e)) => {
            if let Some(held_back) = tile_cache.warnings.allow() {
                tracing::warn!(tile = %key, error = &e as &dyn std::error::Error, held_back, "cache read failed; rendering instead");
            }
            tile_cache.unsaved.peek(key)
        }
        Err(e) => {
            tracing::warn!(tile = %key, error = &e as &dyn std::error::Error, "cache read task failed");
            tile_cache.unsaved.peek(key)
        }
    }
}

pub(super) async fn lock_metatile(
    tile_cache: &TileCache,
    req: &TileRequest,
    meta: &Metatile,
) -> Result<KeyGuard<MetaKey>, TileError> {
    let key = MetaKey::of(req, meta);
    take(
        tile_cache,
        &tile_cache.metatile_locks,
        key,
        LockKind::Metatile,
    )
    .await
}

/// Takes the metatile's lock and its tiles' locks (keys from `keys`)
/// if none is held, without waiting; `None` (and nothing held) when one
/// is.
pub(super) fn try_lock_all(
    tile_cache: &TileCache,
    req: &TileRequest,
    meta: &Metatile,
    keys: impl IntoIterator<Item = TileKey>,
) -> Option<(KeyGuard<MetaKey>, Vec<LockedTile>)> {
    let meta_guard = tile_cache.metatile_locks.try_lock(MetaKey::of(req, meta))?;
    let tiles = keys
        .into_iter()
        .map(|key| Some((key.clone(), tile_cache.tile_locks.try_lock(key)?)))
        .collect::<Option<Vec<_>>>()?;
    Some((meta_guard, tiles))
}

pub(super) async fn lock_tile(
    tile_cache: &TileCache,
    key: TileKey,
) -> Result<KeyGuard<TileKey>, TileError> {
    take(tile_cache, &tile_cache.tile_locks, key, LockKind::Tile).await
}

/// Takes `key`'s lock among `locks` (metatile or tile locks, as `kind`
/// says) within the lock timeout, counting the wait.
async fn take<K: Eq + std::hash::Hash + Clone>(
    tile_cache: &TileCache,
    locks: &KeyedLocks<K>,
    key: K,
    kind: LockKind,
) -> Result<KeyGuard<K>, TileError> {
    let start = Instant::now();
    let result = locks.lock(key, tile_cache.lock_timeout).await;
    tile_cache.metrics.lock_waited(kind, start);
    result.map_err(|LockTimeout(after)| TileError::LockTimeout {
        kind: match kind {
            LockKind::Metatile => "metatile",
            LockKind::Tile => "tile",
        },
        after,
    })
}
