//! The journal store's in-memory index: tile key → record position, split
//! into shards by key hash.
//!
//! A write locks only its key's shard, so writers finishing the same batch
//! do not queue on one lock, and a shard's table grows (rehashing) at a
//! sixty-fourth of the index's size. Whole-index readers (checkpoint, scan,
//! truncate) hold one shard at a time, so they never stop every writer for
//! as long as the index takes to copy. Each shard also counts the bytes its
//! entries hold per segment, so deciding which segments to compact does not
//! walk the index.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use tessera_journal::{Position, RecordKind};

use crate::TileKey;

/// Shards of every index: enough that 64 writers rarely meet on one.
const SHARDS: usize = 64;

/// Bytes a record takes in its segment beyond its payload (its frame).
const FRAME_BYTES: u64 = 33;

/// A key and its record.
pub(crate) type Located = (TileKey, Entry);

/// Where a tile's record is and how long its payload is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    pub at: Position,
    pub len: u32,
}

impl Entry {
    fn bytes(&self) -> u64 {
        u64::from(self.len) + FRAME_BYTES
    }
}

/// One shard: live keys, tombstones, and the bytes both hold per segment.
#[derive(Debug, Default)]
pub(crate) struct Shard {
    live: HashMap<TileKey, Entry>,
    /// Delete records of keys that are absent, kept so compaction can carry
    /// them forward while an older add of the key may still be on disk.
    tombstones: HashMap<TileKey, Entry>,
    /// Bytes of the entries above, by segment id.
    segment_bytes: HashMap<u64, u64>,
}

impl Shard {
    /// The live entry of `key`.
    pub fn live(&self, key: &TileKey) -> Option<Entry> {
        self.live.get(key).copied()
    }

    /// The tombstone of `key`.
    pub fn tombstone(&self, key: &TileKey) -> Option<Entry> {
        self.tombstones.get(key).copied()
    }

    /// Applies one record of `kind` for `key` at `entry`.
    pub fn apply(&mut self, key: TileKey, kind: RecordKind, entry: Entry) {
        match kind {
            RecordKind::Add | RecordKind::Update => {
                let gone = self.tombstones.remove(&key);
                self.forget(gone);
                self.set_live(key, entry);
            }
            RecordKind::Delete => {
                let gone = self.live.remove(&key);
                self.forget(gone);
                self.set_tombstone(key, entry);
            }
        }
    }

    /// Points `key`'s live entry at `entry` (a compaction's copy).
    pub fn set_live(&mut self, key: TileKey, entry: Entry) {
        self.count(entry);
        let old = self.live.insert(key, entry);
        self.forget(old);
    }

    /// Points `key`'s tombstone at `entry` (a compaction's copy).
    pub fn set_tombstone(&mut self, key: TileKey, entry: Entry) {
        self.count(entry);
        let old = self.tombstones.insert(key, entry);
        self.forget(old);
    }

    /// Drops `key`'s tombstone.
    pub fn remove_tombstone(&mut self, key: &TileKey) {
        let gone = self.tombstones.remove(key);
        self.forget(gone);
    }

    fn count(&mut self, entry: Entry) {
        *self.segment_bytes.entry(entry.at.segment).or_default() += entry.bytes();
    }

    fn forget(&mut self, entry: Option<Entry>) {
        let Some(entry) = entry else { return };
        if let Some(held) = self.segment_bytes.get_mut(&entry.at.segment) {
            *held = held.saturating_sub(entry.bytes());
            if *held == 0 {
                self.segment_bytes.remove(&entry.at.segment);
            }
        }
    }

    /// Drops the entries at or past `cut` (a torn tail: they point at nothing).
    fn retain_before(&mut self, cut: Position) {
        let mut gone = Vec::new();
        for map in [&mut self.live, &mut self.tombstones] {
            map.retain(|_, e| {
                let keep = e.at < cut;
                if !keep {
                    gone.push(*e);
                }
                keep
            });
        }
        for e in gone {
            self.forget(Some(e));
        }
    }
}

/// The index, sharded by key.
#[derive(Debug)]
pub(crate) struct TileIndex {
    shards: Box<[RwLock<Shard>]>,
    hasher: RandomState,
}

impl Default for TileIndex {
    fn default() -> Self {
        TileIndex {
            shards: (0..SHARDS).map(|_| RwLock::default()).collect(),
            hasher: RandomState::new(),
        }
    }
}

impl TileIndex {
    fn slot(&self, key: &TileKey) -> &RwLock<Shard> {
        // The high bits: the shard's own table hashes with other keys.
        let h = self.hasher.hash_one(key);
        &self.shards[(h >> 58) as usize % self.shards.len()]
    }

    /// `key`'s shard, for reading.
    pub fn read(&self, key: &TileKey) -> RwLockReadGuard<'_, Shard> {
        self.slot(key)
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `key`'s shard, for writing.
    pub fn write(&self, key: &TileKey) -> RwLockWriteGuard<'_, Shard> {
        self.slot(key)
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Every shard in turn, each read-locked only while `f` runs on it.
    fn each(&self, mut f: impl FnMut(&Shard)) {
        for shard in &self.shards {
            f(&shard
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner));
        }
    }

    /// Every shard in turn, write-locked while `f` runs on it.
    fn each_mut(&self, mut f: impl FnMut(&mut Shard)) {
        for shard in &self.shards {
            f(&mut shard
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner));
        }
    }

    /// The live entry of `key`.
    pub fn live(&self, key: &TileKey) -> Option<Entry> {
        self.read(key).live(key)
    }

    /// Applies one record (see [`Shard::apply`]).
    pub fn apply(&self, key: TileKey, kind: RecordKind, entry: Entry) {
        self.write(&key).apply(key, kind, entry);
    }

    /// Live keys.
    pub fn len(&self) -> usize {
        let mut n = 0;
        self.each(|s| n += s.live.len());
        n
    }

    /// Drops the entries at or past `cut`.
    pub fn retain_before(&self, cut: Position) {
        self.each_mut(|s| s.retain_before(cut));
    }

    /// Bytes the live entries and tombstones hold, by segment.
    pub fn segment_bytes(&self) -> HashMap<u64, u64> {
        let mut all: HashMap<u64, u64> = HashMap::new();
        self.each(|s| {
            for (segment, bytes) in &s.segment_bytes {
                *all.entry(*segment).or_default() += bytes;
            }
        });
        all
    }

    /// The live entries and tombstones whose records are in `segment`.
    pub fn in_segment(&self, segment: u64) -> (Vec<Located>, Vec<Located>) {
        let (mut live, mut dead) = (Vec::new(), Vec::new());
        let pick = |map: &HashMap<TileKey, Entry>, into: &mut Vec<Located>| {
            into.extend(
                map.iter()
                    .filter(|(_, e)| e.at.segment == segment)
                    .map(|(k, e)| (k.clone(), *e)),
            );
        };
        self.each(|s| {
            pick(&s.live, &mut live);
            pick(&s.tombstones, &mut dead);
        });
        (live, dead)
    }

    /// Calls `f` with each live key and entry, one shard at a time (keys
    /// written meanwhile may or may not be seen).
    pub fn for_each_live(&self, mut f: impl FnMut(&TileKey, Entry)) {
        self.each(|s| {
            for (k, e) in &s.live {
                f(k, *e);
            }
        });
    }

    /// Calls `live` with each live key and entry and `dead` with each
    /// tombstone, one shard at a time.
    pub fn for_each(
        &self,
        mut live: impl FnMut(&TileKey, Entry),
        mut dead: impl FnMut(&TileKey, Entry),
    ) {
        self.each(|s| {
            for (k, e) in &s.live {
                live(k, *e);
            }
            for (k, e) in &s.tombstones {
                dead(k, *e);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_grid::{TileFormat, TileMatrixSet};

    fn key(x: u32) -> TileKey {
        let tms = TileMatrixSet::web_mercator_quad();
        TileKey {
            layer: "l".into(),
            grid: tms.id.clone(),
            coord: tms.tile(10, u64::from(x), 0).expect("in the grid"),
            matrix_height: 1024,
            matrix_width: 1024,
            format: TileFormat::Png,
        }
    }

    fn at(segment: u64, offset: u32, len: u32) -> Entry {
        Entry {
            at: Position { segment, offset },
            len,
        }
    }

    #[test]
    fn segment_bytes_follow_every_change() {
        let index = TileIndex::default();
        index.apply(key(1), RecordKind::Add, at(1, 32, 100));
        index.apply(key(2), RecordKind::Add, at(1, 200, 50));
        assert_eq!(index.segment_bytes()[&1], 100 + 50 + 2 * FRAME_BYTES);
        // Rewritten into segment 2: segment 1 holds only key 2.
        index.apply(key(1), RecordKind::Update, at(2, 32, 10));
        assert_eq!(index.segment_bytes()[&1], 50 + FRAME_BYTES);
        assert_eq!(index.segment_bytes()[&2], 10 + FRAME_BYTES);
        // A delete leaves a tombstone, which holds bytes too.
        index.apply(key(2), RecordKind::Delete, at(2, 100, 20));
        assert!(!index.segment_bytes().contains_key(&1));
        assert_eq!(index.segment_bytes()[&2], 10 + 20 + 2 * FRAME_BYTES);
        index.write(&key(2)).remove_tombstone(&key(2));
        assert_eq!(index.segment_bytes()[&2], 10 + FRAME_BYTES);
        assert_eq!(index.len(), 1);
        index.retain_before(Position {
            segment: 2,
            offset: 0,
        });
        assert_eq!(index.len(), 0);
        assert!(index.segment_bytes().is_empty());
    }

    #[test]
    fn keys_spread_over_shards() {
        let index = TileIndex::default();
        for x in 0..1000 {
            index.apply(key(x), RecordKind::Add, at(1, x, 1));
        }
        let used = index
            .shards
            .iter()
            .filter(|s| !s.read().unwrap().live.is_empty())
            .count();
        assert!(used > SHARDS / 2, "1000 keys in only {used} shards");
        assert_eq!(index.len(), 1000);
        assert_eq!(index.live(&key(7)), Some(at(1, 7, 1)));
    }
}
