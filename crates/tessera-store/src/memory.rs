//! A bounded in-memory LRU of tiles, on its own or in front of another store.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use bytes::Bytes;
use lru::LruCache;

use crate::{
    Durability, HeldTile, Peek, StoreError, StoredTile, TileArea, TileKey, TileStore,
    TruncateReport, check_not_empty, content_hash,
};

/// Tiles kept in memory, at most `capacity_bytes` of payload, least recently
/// used evicted first.
///
/// With an inner store it is a read-through, write-through cache: writes go
/// to the inner store first (with the asked durability) and are remembered
/// only once acknowledged there; misses are read from the inner store.
/// Without one it is a volatile store whose tiles may be evicted at any time.
#[derive(Debug)]
pub struct MemoryStore {
    name: String,
    inner: Option<Arc<dyn TileStore>>,
    capacity_bytes: usize,
    state: Mutex<Lru>,
    /// Fingerprints claimed while there is no inner store to keep them.
    fingerprints: Mutex<HashMap<String, String>>,
}

#[derive(Debug)]
struct Lru {
    tiles: LruCache<TileKey, HeldTile>,
    bytes: usize,
    /// Bumped by every write and delete, so a read of the inner store that
    /// raced with one does not put a stale tile into memory.
    generation: u64,
}

impl MemoryStore {
    /// A cache of at most `capacity_bytes`, in front of `inner` if given.
    pub fn new(capacity_bytes: usize, inner: Option<Arc<dyn TileStore>>) -> MemoryStore {
        let name = match &inner {
            Some(s) => format!("memory+{}", s.name()),
            None => "memory".into(),
        };
        MemoryStore {
            name,
            inner,
            capacity_bytes,
            state: Mutex::new(Lru {
                tiles: LruCache::unbounded(),
                bytes: 0,
                generation: 0,
            }),
            fingerprints: Mutex::new(HashMap::new()),
        }
    }

    /// Bytes of payload held in memory.
    pub fn resident_bytes(&self) -> usize {
        self.lock().bytes
    }

    /// Tiles held in memory.
    pub fn resident_tiles(&self) -> usize {
        self.lock().tiles.len()
    }

    fn lock(&self) -> MutexGuard<'_, Lru> {
        // The state is a cache: after a panic elsewhere it is still coherent
        // enough to use (every update keeps `bytes` in step with `tiles`).
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn remember(&self, lru: &mut Lru, key: &TileKey, data: Bytes, stored_at: Option<SystemTime>) {
        let held = HeldTile {
            hash: content_hash(&data),
            bytes: data,
            stored_at,
        };
        self.remember_held(lru, key, held);
    }

    fn remember_held(&self, lru: &mut Lru, key: &TileKey, held: HeldTile) {
        if held.bytes.len() > self.capacity_bytes {
            if let Some(old) = lru.tiles.pop(key) {
                lru.bytes -= old.bytes.len();
            }
            return;
        }
        lru.bytes += held.bytes.len();
        if let Some(old) = lru.tiles.put(key.clone(), held) {
            lru.bytes -= old.bytes.len();
        }
        while lru.bytes > self.capacity_bytes {
            match lru.tiles.pop_lru() {
                Some((_, old)) => lru.bytes -= old.bytes.len(),
                None => break,
            }
        }
    }
}

impl TileStore for MemoryStore {
    fn name(&self) -> &str {
        &self.name
    }

    fn is_volatile(&self) -> bool {
        self.inner.as_ref().is_none_or(|inner| inner.is_volatile())
    }

    /// What memory holds, else what the inner store can answer without
    /// blocking (kept in memory from then on).
    fn peek(&self, key: &TileKey) -> Option<HeldTile> {
        match self.peek_or_absent(key) {
            Peek::Held(held) => Some(held),
            Peek::Absent | Peek::Unknown => None,
        }
    }

    /// What memory holds, else what the inner store tells without
    /// blocking (a tile it holds is kept in memory from then on); with no
    /// inner store, what memory does not hold is absent.
    fn peek_or_absent(&self, key: &TileKey) -> Peek {
        let generation = {
            let mut lru = self.lock();
            if let Some(held) = lru.tiles.get(key) {
                return Peek::Held(held.clone());
            }
            lru.generation
        };
        let Some(inner) = self.inner.as_ref() else {
            return Peek::Absent;
        };
        let peeked = inner.peek_or_absent(key);
        if let Peek::Held(held) = &peeked {
            let mut lru = self.lock();
            if lru.generation == generation {
                self.remember_held(&mut lru, key, held.clone());
            }
        }
        peeked
    }

    fn get(&self, key: &TileKey) -> Result<Option<Bytes>, StoreError> {
        Ok(self.get_stored(key)?.map(|t| t.bytes))
    }

    /// Tiles put here are stamped when the write is acknowledged; tiles
    /// read through keep the inner store's time.
    fn get_stored(&self, key: &TileKey) -> Result<Option<StoredTile>, StoreError> {
        let generation = {
            let mut lru = self.lock();
            if let Some(held) = lru.tiles.get(key) {
                return Ok(Some(StoredTile {
                    bytes: held.bytes.clone(),
                    stored_at: held.stored_at,
                }));
            }
            lru.generation
        };
        let Some(inner) = &self.inner else {
            return Ok(None);
        };
        let found = inner.get_stored(key)?;
        if let Some(tile) = &found {
            let mut lru = self.lock();
            if lru.generation == generation {
                self.remember(&mut lru, key, tile.bytes.clone(), tile.stored_at);
            }
        }
        Ok(found)
    }

    /// What is held is answered from memory; the rest is read from the
    /// inner store in one call and kept.
    fn get_many(&self, keys: &[TileKey]) -> Result<Vec<Option<StoredTile>>, StoreError> {
        let (mut found, generation) = {
            let mut lru = self.lock();
            let found: Vec<Option<StoredTile>> = keys
                .iter()
                .map(|k| {
                    lru.tiles.get(k).map(|held| StoredTile {
                        bytes: held.bytes.clone(),
                        stored_at: held.stored_at,
                    })
                })
                .collect();
            (found, lru.generation)
        };
        let Some(inner) = &self.inner else {
            return Ok(found);
        };
        let missing: Vec<usize> = (0..keys.len()).filter(|i| found[*i].is_none()).collect();
        if missing.is_empty() {
            return Ok(found);
        }
        let wanted: Vec<TileKey> = missing.iter().map(|i| keys[*i].clone()).collect();
        let read = inner.get_many(&wanted)?;
        let mut lru = self.lock();
        for (i, tile) in missing.into_iter().zip(read) {
            if let Some(t) = &tile
                && lru.generation == generation
            {
                self.remember(&mut lru, &keys[i], t.bytes.clone(), t.stored_at);
            }
            found[i] = tile;
        }
        Ok(found)
    }

    /// Kept by the inner store; without one, in memory for as long as the
    /// store lives (its tiles live no longer).
    fn claim_fingerprint(&self, layer: &str, fingerprint: &str) -> Result<String, StoreError> {
        if let Some(inner) = &self.inner {
            return inner.claim_fingerprint(layer, fingerprint);
        }
        let mut claimed = self
            .fingerprints
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(claimed
            .entry(layer.to_string())
            .or_insert_with(|| fingerprint.to_string())
            .clone())
    }

    fn put(&self, key: &TileKey, data: Bytes, durability: Durability) -> Result<(), StoreError> {
        check_not_empty(&self.name, key, &data)?;
        self.put_many(vec![(key.clone(), data)], durability)
    }

    fn put_many(
        &self,
        tiles: Vec<(TileKey, Bytes)>,
        durability: Durability,
    ) -> Result<(), StoreError> {
        for (key, data) in &tiles {
            check_not_empty(&self.name, key, data)?;
        }
        if let Some(inner) = &self.inner {
            // Forget the old values first: if the inner write fails half
            // way, memory must not keep answering with what was replaced.
            {
                let mut lru = self.lock();
                lru.generation += 1;
                for (key, _) in &tiles {
                    if let Some(old) = lru.tiles.pop(key) {
                        lru.bytes -= old.bytes.len();
                    }
                }
            }
            inner.put_many(tiles.clone(), durability)?;
        }
        let stored_at = Some(SystemTime::now());
        let mut lru = self.lock();
        lru.generation += 1;
        for (key, data) in tiles {
            self.remember(&mut lru, &key, data, stored_at);
        }
        Ok(())
    }

    fn delete(&self, key: &TileKey) -> Result<(), StoreError> {
        {
            let mut lru = self.lock();
            lru.generation += 1;
            if let Some(old) = lru.tiles.pop(key) {
                lru.bytes -= old.bytes.len();
            }
        }
        if let Some(inner) = &self.inner {
            inner.delete(key)?;
        }
        // A read that raced with the inner delete may have put the old tile
        // back: drop it again, and move the generation on so that reads
        // still in flight cannot.
        let mut lru = self.lock();
        lru.generation += 1;
        if let Some(old) = lru.tiles.pop(key) {
            lru.bytes -= old.bytes.len();
        }
        Ok(())
    }

    fn prefers_batches(&self) -> bool {
        self.inner.as_ref().is_some_and(|i| i.prefers_batches())
    }

    fn write_group(&self, key: &TileKey) -> Option<String> {
        self.inner.as_ref().and_then(|i| i.write_group(key))
    }

    fn reclaim(&self) -> Result<(), StoreError> {
        self.inner.as_ref().map_or(Ok(()), |i| i.reclaim())
    }

    fn scan(
        &self,
        matrix: crate::MatrixOf<'_>,
        f: &mut dyn FnMut(TileKey, u64),
    ) -> Result<bool, StoreError> {
        self.inner.as_ref().map_or(Ok(false), |i| i.scan(matrix, f))
    }

    /// The keys of the tiles held in memory (a scan of what is held), with
    /// the inner store's; `None` when the inner store cannot list them.
    fn layer_keys(
        &self,
        prefix: &str,
        grid: &str,
        format: tessera_grid::TileFormat,
    ) -> Result<Option<Vec<String>>, StoreError> {
        let inner = match &self.inner {
            Some(inner) => match inner.layer_keys(prefix, grid, format)? {
                Some(keys) => keys,
                None => return Ok(None),
            },
            None => Vec::new(),
        };
        let mut keys: std::collections::BTreeSet<String> = inner.into_iter().collect();
        keys.extend(
            self.lock()
                .tiles
                .iter()
                .filter(|(k, _)| {
                    k.layer.starts_with(prefix) && k.grid == grid && k.format == format
                })
                .map(|(k, _)| k.layer.clone()),
        );
        Ok(Some(keys.into_iter().collect()))
    }

    fn count_by_zoom(&self) -> Result<Option<Vec<crate::quota::ZoomUsage>>, StoreError> {
        self.inner.as_ref().map_or(Ok(None), |i| i.count_by_zoom())
    }

    fn sync_counts(&self) -> Option<crate::SyncCounts> {
        self.inner.as_ref().and_then(|i| i.sync_counts())
    }

    /// Drops the held copy when there is a store behind (alone, memory is
    /// the only copy and is kept).
    fn forget(&self, key: &TileKey) {
        if let Some(inner) = &self.inner {
            let mut lru = self.lock();
            lru.generation += 1;
            if let Some(old) = lru.tiles.pop(key) {
                lru.bytes -= old.bytes.len();
            }
            drop(lru);
            inner.forget(key);
        }
    }

    /// Drops the held tiles of the layer and of the keys kept under it
    /// when there is a store behind (a scan of what is held).
    fn forget_layer(&self, layer: &str) {
        if let Some(inner) = &self.inner {
            let mut lru = self.lock();
            lru.generation += 1;
            let gone: Vec<TileKey> = lru
                .tiles
                .iter()
                .filter(|(k, _)| crate::quota::is_key_of(&k.layer, layer))
                .map(|(k, _)| k.clone())
                .collect();
            for k in gone {
                if let Some(old) = lru.tiles.pop(&k) {
                    lru.bytes -= old.bytes.len();
                }
            }
            drop(lru);
            inner.forget_layer(layer);
        }
    }

    fn all_exist(&self, keys: &[TileKey]) -> Result<bool, StoreError> {
        let missing: Vec<TileKey> = {
            let lru = self.lock();
            keys.iter()
                .filter(|k| !lru.tiles.contains(k))
                .cloned()
                .collect()
        };
        match &self.inner {
            _ if missing.is_empty() => Ok(true),
            Some(inner) => inner.all_exist(&missing),
            None => Ok(false),
        }
    }

    /// Truncates the inner store, then forgets the area's tiles held in
    /// memory (a scan of what is held, not of the area).
    fn truncate(&self, area: &TileArea) -> Result<TruncateReport, StoreError> {
        let forget = |lru: &mut Lru| {
            lru.generation += 1;
            let gone: Vec<TileKey> = lru
                .tiles
                .iter()
                .filter(|(k, _)| area.contains(k))
                .map(|(k, _)| k.clone())
                .collect();
            for k in gone {
                if let Some(old) = lru.tiles.pop(&k) {
                    lru.bytes -= old.bytes.len();
                }
            }
        };
        forget(&mut self.lock());
        let report = match &self.inner {
            Some(inner) => inner.truncate(area)?,
            None => TruncateReport::default(),
        };
        forget(&mut self.lock());
        Ok(report)
    }

    fn exists(&self, key: &TileKey) -> Result<bool, StoreError> {
        if self.lock().tiles.contains(key) {
            return Ok(true);
        }
        match &self.inner {
            Some(inner) => inner.exists(key),
            None => Ok(false),
        }
    }
}
