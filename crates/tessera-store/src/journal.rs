//! Tiles in a [`tessera_journal::Journal`]: one record per write, an
//! in-memory index from key to record position rebuilt by replay at open.
//!
//! A metatile's tiles are appended together and made durable by the
//! journal's one `fdatasync` for the batch, instead of one file and one
//! fsync per tile.
//!
//! The index is checkpointed to `index.ckpt` (on close and every
//! `CHECKPOINT_EVERY` writes) with the journal's durable position; opening
//! loads the checkpoint and replays only the records from that position on.
//! Replaying records whose effect the checkpoint already holds is harmless:
//! each record sets or removes one key.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tessera_grid::{TileCoord, TileFormat};
use tessera_journal::{Journal, JournalError, JournalOptions, Persist, Position, RecordKind};

use crate::fingerprint::{FINGERPRINT_DIR, claim_in_dir};
use crate::journal_index::{Entry, TileIndex};
use crate::{
    Durability, StoreError, StoredTile, TileArea, TileKey, TileStore, TruncateReport,
    check_not_empty,
};

/// Writes between two automatic index checkpoints.
const CHECKPOINT_EVERY: u64 = 100_000;
/// Writes between two checks for segments worth compacting.
const COMPACT_CHECK_EVERY: u64 = 10_000;
const CHECKPOINT_FILE: &str = "index.ckpt";
const CHECKPOINT_MAGIC: &[u8; 8] = b"TSRIDX2\0";

/// What a compaction did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompactStats {
    /// Segments given back for reuse.
    pub segments_released: u64,
    /// Live records copied forward.
    pub records_copied: u64,
    /// Bytes of dead records reclaimed.
    pub bytes_reclaimed: u64,
}

/// A tile store on an append-only journal.
#[derive(Debug)]
pub struct JournalStore {
    journal: Journal,
    index: TileIndex,
    dir: PathBuf,
    /// Held shared by every write from its append to its index update, and
    /// exclusively by a checkpoint and by each compaction copy, so neither
    /// ever sees a record in the journal whose index entry is still missing.
    gate: RwLock<()>,
    writes_since_checkpoint: AtomicU64,
    writes: AtomicU64,
    /// Compact segments whose live bytes fall below this share.
    compact_below: f64,
}

fn io(op: &'static str, key: &dyn std::fmt::Display, e: &JournalError) -> StoreError {
    StoreError::Io {
        store: "journal".into(),
        op,
        key: key.to_string(),
        source: Box::new(e.clone()),
    }
}

fn read_lock<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write_lock<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl JournalStore {
    /// Opens (creating if needed) the journal in `dir` and rebuilds the
    /// index from its checkpoint and the records after it. Segments whose
    /// live share falls below `compact_below` (default 0.5) are compacted as
    /// writes go on.
    pub fn open(
        dir: impl AsRef<Path>,
        options: JournalOptions,
    ) -> Result<JournalStore, StoreError> {
        Self::open_with(dir, options, 0.5)
    }

    /// [`JournalStore::open`] with the compaction threshold.
    pub fn open_with(
        dir: impl AsRef<Path>,
        options: JournalOptions,
        compact_below: f64,
    ) -> Result<JournalStore, StoreError> {
        let dir = dir.as_ref();
        let (index, from) = match load_checkpoint(&dir.join(CHECKPOINT_FILE)) {
            Ok(Some((index, from))) => (index, Some(from)),
            Ok(None) => (TileIndex::default(), None),
            Err(reason) => {
                tracing::warn!(dir = %dir.display(), %reason, "ignoring the index checkpoint; replaying the whole journal");
                (TileIndex::default(), None)
            }
        };
        let mut undecodable = 0u64;
        let (journal, recovery) =
            Journal::open(dir, options, from, |r| match decode_key(r.payload) {
                Some((key, _)) => index.apply(
                    key,
                    r.kind,
                    Entry {
                        at: r.position,
                        len: r.payload.len() as u32,
                    },
                ),
                None => undecodable += 1,
            })
            .map_err(|e| io("open", &dir.display(), &e))?;
        if undecodable > 0 {
            tracing::warn!(undecodable, dir = %dir.display(), "journal records that are not tiles were ignored");
        }
        if let Some(cut) = recovery.cut_at {
            // Entries of the checkpoint past a torn tail point at nothing.
            index.retain_before(cut);
        }
        Ok(JournalStore {
            journal,
            index,
            dir: dir.to_path_buf(),
            gate: RwLock::new(()),
            writes_since_checkpoint: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            compact_below,
        })
    }

    /// Tiles indexed.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether no tile is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Segment files the journal holds (for tests and reports).
    pub fn segment_count(&self) -> usize {
        self.journal.segments().len()
    }

    /// Writes the index with the journal's durable position to
    /// `index.ckpt` (atomically), so the next open replays only what
    /// follows.
    ///
    /// Writes are held off only while the position is read (until the
    /// appends in flight are indexed); the index is then read one shard at
    /// a time while writes go on. An entry written meanwhile may or may not
    /// be in the checkpoint: its record is after the position, so the next
    /// open replays it either way.
    pub fn checkpoint(&self) -> Result<(), StoreError> {
        let position = {
            let _quiet = write_lock(&self.gate);
            self.journal.durable_position()
        };
        self.writes_since_checkpoint.store(0, Ordering::Relaxed);
        let path = self.dir.join(CHECKPOINT_FILE);
        write_checkpoint(&path, position, &self.index).map_err(|e| StoreError::Io {
            store: "journal".into(),
            op: "checkpoint",
            key: path.display().to_string(),
            source: e.into(),
        })
    }

    /// Copies the live records of every full segment whose live share is
    /// below `below` to the head of the journal and gives the segment back
    /// for reuse. Writes go on meanwhile; each copy briefly holds them off.
    pub fn compact(&self, below: f64) -> Result<CompactStats, StoreError> {
        let segments = self.journal.segments();
        let oldest = segments.first().map(|s| s.id);
        let live_bytes = self.index.segment_bytes();
        let mut stats = CompactStats::default();
        for seg in segments.iter().filter(|s| !s.active) {
            let live = live_bytes.get(&seg.id).copied().unwrap_or(0);
            let used = seg.used_bytes.saturating_sub(32).max(1);
            if live as f64 / used as f64 >= below {
                continue;
            }
            let (keys, dead) = self.index.in_segment(seg.id);
            let mut buf = Vec::new();
            for (key, old) in keys {
                let _quiet = write_lock(&self.gate);
                if self.index.live(&key) != Some(old) {
                    continue; // replaced or deleted meanwhile
                }
                self.journal
                    .read(old.at, &mut buf)
                    .map_err(|e| io("compact", &key, &e))?;
                let at = self
                    .journal
                    .append(RecordKind::Update, &buf, Persist::Buffered)
                    .map_err(|e| io("compact", &key, &e))?;
                self.index
                    .write(&key)
                    .set_live(key, Entry { at, len: old.len });
                stats.records_copied += 1;
            }
            for (key, old) in dead {
                let _quiet = write_lock(&self.gate);
                let mut shard = self.index.write(&key);
                if shard.tombstone(&key) != Some(old) {
                    continue;
                }
                if Some(seg.id) == oldest {
                    // No older segment can hold an add this delete must hide.
                    shard.remove_tombstone(&key);
                    continue;
                }
                drop(shard);
                let head = encode_key(&key);
                let at = self
                    .journal
                    .append(RecordKind::Delete, &head, Persist::Buffered)
                    .map_err(|e| io("compact", &key, &e))?;
                self.index
                    .write(&key)
                    .set_tombstone(key, Entry { at, len: old.len });
                stats.records_copied += 1;
            }
            // The copies must be on disk before the originals go.
            self.journal
                .sync()
                .map_err(|e| io("compact", &seg.id, &e))?;
            self.journal
                .release(seg.id)
                .map_err(|e| io("compact", &seg.id, &e))?;
            stats.segments_released += 1;
            stats.bytes_reclaimed += used.saturating_sub(live);
        }
        Ok(stats)
    }

    fn after_write(&self) {
        if self.writes_since_checkpoint.fetch_add(1, Ordering::Relaxed) + 1 >= CHECKPOINT_EVERY
            && let Err(e) = self.checkpoint()
        {
            tracing::warn!(
                error = &e as &dyn std::error::Error,
                "index checkpoint failed; the next start replays more"
            );
        }
        if (self.writes.fetch_add(1, Ordering::Relaxed) + 1).is_multiple_of(COMPACT_CHECK_EVERY) {
            match self.compact(self.compact_below) {
                Ok(s) if s.segments_released > 0 => {
                    tracing::info!(
                        released = s.segments_released,
                        copied = s.records_copied,
                        "journal compacted"
                    );
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(
                    error = &e as &dyn std::error::Error,
                    "journal compaction failed"
                ),
            }
        }
    }

    fn append(
        &self,
        key: &TileKey,
        kind: RecordKind,
        data: &[u8],
        persist: Persist,
    ) -> Result<Entry, StoreError> {
        let stamp = (kind != RecordKind::Delete).then(SystemTime::now);
        let head = encode_head(key, stamp);
        let len = head.len() + data.len();
        let at = self
            .journal
            .append_with(kind, len, persist, |buf| {
                buf.extend_from_slice(&head);
                buf.extend_from_slice(data);
            })
            .map_err(|e| io("put", key, &e))?;
        Ok(Entry {
            at,
            len: len as u32,
        })
    }

    fn write(&self, tiles: &[(TileKey, Bytes)], durability: Durability) -> Result<(), StoreError> {
        for (key, data) in tiles {
            check_not_empty(self.name(), key, data)?;
        }
        for (i, (key, data)) in tiles.iter().enumerate() {
            // One fsync covers the batch: only the last record asks for it.
            let persist = if durability == Durability::Synced && i + 1 == tiles.len() {
                Persist::Synced
            } else {
                Persist::Buffered
            };
            {
                let _gate = read_lock(&self.gate);
                let kind = if self.index.live(key).is_some() {
                    RecordKind::Update
                } else {
                    RecordKind::Add
                };
                let entry = self.append(key, kind, data, persist)?;
                self.index.apply(key.clone(), kind, entry);
            }
            self.after_write();
        }
        Ok(())
    }
}

impl TileStore for JournalStore {
    /// From the index in memory (keys whole).
    fn scan(
        &self,
        _matrix: crate::MatrixOf<'_>,
        f: &mut dyn FnMut(TileKey, u64),
    ) -> Result<bool, StoreError> {
        let mut live: Vec<(TileKey, u64)> = Vec::new();
        self.index.for_each_live(|k, e| {
            live.push((
                k.clone(),
                u64::from(e.len).saturating_sub(stamped_head_len(k)),
            ));
        });
        for (key, len) in live {
            f(key, len);
        }
        Ok(true)
    }

    /// From the index in memory.
    fn sync_counts(&self) -> Option<crate::SyncCounts> {
        let (acks, syncs) = self.journal.stats();
        Some(crate::SyncCounts {
            acks,
            syncs,
            late_acks: self.journal.late_acks(),
            slow_syncs: self.journal.slow_syncs(),
        })
    }

    /// From the index: the layers of its live tiles.
    fn layer_keys(
        &self,
        prefix: &str,
        grid: &str,
        format: tessera_grid::TileFormat,
    ) -> Result<Option<Vec<String>>, StoreError> {
        let mut keys = std::collections::BTreeSet::new();
        self.index.for_each_live(|key, _| {
            if key.layer.starts_with(prefix) && key.grid == grid && key.format == format {
                keys.insert(key.layer.clone());
            }
        });
        Ok(Some(keys.into_iter().collect()))
    }

    fn count_by_zoom(&self) -> Result<Option<Vec<crate::quota::ZoomUsage>>, StoreError> {
        let mut counts: std::collections::BTreeMap<(String, u8), (u64, u64)> =
            std::collections::BTreeMap::new();
        self.index.for_each_live(|key, entry| {
            let c = counts
                .entry((key.layer.clone(), key.coord.z()))
                .or_default();
            c.0 += 1;
            c.1 += u64::from(entry.len).saturating_sub(stamped_head_len(key));
        });
        Ok(Some(crate::quota::zoom_usage(counts)))
    }

    /// Compacts the segments whose live share fell below `compact_below`.
    fn reclaim(&self) -> Result<(), StoreError> {
        let s = self.compact(self.compact_below)?;
        if s.segments_released > 0 {
            tracing::info!(
                released = s.segments_released,
                copied = s.records_copied,
                "journal compacted after evictions"
            );
        }
        Ok(())
    }

    #[allow(clippy::unnecessary_literal_bound)] // the trait allows owned names
    fn name(&self) -> &str {
        "journal"
    }

    fn get(&self, key: &TileKey) -> Result<Option<Bytes>, StoreError> {
        Ok(self.get_stored(key)?.map(|t| t.bytes))
    }

    /// The time is kept in the record's head (records written before
    /// stamps existed answer `None`).
    fn get_stored(&self, key: &TileKey) -> Result<Option<StoredTile>, StoreError> {
        let Some(position) = self.index.live(key).map(|e| e.at) else {
            return Ok(None);
        };
        let mut buf = Vec::new();
        self.journal
            .read(position, &mut buf)
            .map_err(|e| io("get", key, &e))?;
        match decode_head(&buf) {
            Some((k, stored_at, at)) if &k == key => Ok(Some(StoredTile {
                bytes: Bytes::from(buf).slice(at..),
                stored_at,
            })),
            _ => Err(io(
                "get",
                key,
                &JournalError::Corrupt {
                    segment: position.segment,
                    offset: position.offset,
                    reason: "record does not hold this tile".into(),
                },
            )),
        }
    }

    fn put(&self, key: &TileKey, data: Bytes, durability: Durability) -> Result<(), StoreError> {
        self.write(&[(key.clone(), data)], durability)
    }

    fn put_many(
        &self,
        tiles: Vec<(TileKey, Bytes)>,
        durability: Durability,
    ) -> Result<(), StoreError> {
        self.write(&tiles, durability)
    }

    fn delete(&self, key: &TileKey) -> Result<(), StoreError> {
        if self.index.live(key).is_none() {
            return Ok(());
        }
        {
            let _gate = read_lock(&self.gate);
            let entry = self.append(key, RecordKind::Delete, &[], Persist::Buffered)?;
            self.index.apply(key.clone(), RecordKind::Delete, entry);
        }
        self.after_write();
        Ok(())
    }

    fn exists(&self, key: &TileKey) -> Result<bool, StoreError> {
        Ok(self.index.live(key).is_some())
    }

    /// Deletes the live records in the area: a scan of the index (what the
    /// journal holds), never of the area's keys.
    fn truncate(&self, area: &TileArea) -> Result<TruncateReport, StoreError> {
        let mut held: Vec<TileKey> = Vec::new();
        self.index.for_each_live(|k, _| {
            if area.contains(k) {
                held.push(k.clone());
            }
        });
        let mut report = TruncateReport::default();
        for key in held {
            area.progress.check(self.name())?;
            self.delete(&key)?;
            report.objects_deleted += 1;
            area.progress.add(1);
        }
        Ok(report)
    }

    /// Kept in `<journal dir>/.fingerprints/<layer>`.
    fn claim_fingerprint(&self, layer: &str, fingerprint: &str) -> Result<String, StoreError> {
        let dir = self.dir.join(FINGERPRINT_DIR);
        claim_in_dir(&dir, layer, fingerprint).map_err(|e| StoreError::Io {
            store: "journal".into(),
            op: "claim",
            key: dir.join(layer).display().to_string(),
            source: Box::new(e),
        })
    }
}

impl Drop for JournalStore {
    fn drop(&mut self) {
        if let Err(e) = self.checkpoint() {
            tracing::warn!(
                error = &e as &dyn std::error::Error,
                "index checkpoint at close failed; the next start replays the journal"
            );
        }
    }
}

/// `magic, segment u64, offset u32, live count u64, (key, segment u64,
/// offset u32, len u32)*, tombstone count u64, (same)*, crc32c u32`.
fn write_checkpoint(path: &Path, at: Position, index: &TileIndex) -> std::io::Result<()> {
    // Live entries and tombstones gathered apart, each section after its count.
    let (mut live, mut dead) = (Vec::new(), Vec::new());
    let (mut live_count, mut dead_count) = (0u64, 0u64);
    let put = |into: &mut Vec<u8>, key: &TileKey, e: Entry| {
        into.extend_from_slice(&encode_key(key));
        into.extend_from_slice(&e.at.segment.to_le_bytes());
        into.extend_from_slice(&e.at.offset.to_le_bytes());
        into.extend_from_slice(&e.len.to_le_bytes());
    };
    index.for_each(
        |k, e| {
            put(&mut live, k, e);
            live_count += 1;
        },
        |k, e| {
            put(&mut dead, k, e);
            dead_count += 1;
        },
    );
    let mut buf = Vec::with_capacity(44 + live.len() + dead.len());
    buf.extend_from_slice(CHECKPOINT_MAGIC);
    buf.extend_from_slice(&at.segment.to_le_bytes());
    buf.extend_from_slice(&at.offset.to_le_bytes());
    for (count, section) in [(live_count, live), (dead_count, dead)] {
        buf.extend_from_slice(&count.to_le_bytes());
        buf.extend_from_slice(&section);
    }
    let crc = crc32c::crc32c(&buf);
    buf.extend_from_slice(&crc.to_le_bytes());
    let tmp = path.with_extension("ckpt.tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&buf)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(path.parent().unwrap_or(Path::new(".")))?.sync_all()
}

fn load_checkpoint(path: &Path) -> Result<Option<(TileIndex, Position)>, String> {
    let buf = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    if buf.len() < 40 || &buf[..8] != CHECKPOINT_MAGIC {
        return Err("not an index checkpoint of this version".into());
    }
    let (body, crc) = buf.split_at(buf.len() - 4);
    if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().map_err(|_| "short")?) {
        return Err("checkpoint checksum mismatch".into());
    }
    let truncated = || "checkpoint truncated".to_string();
    let u64_at = |o: usize| -> Result<u64, String> {
        Ok(u64::from_le_bytes(
            body.get(o..o + 8)
                .ok_or_else(truncated)?
                .try_into()
                .map_err(|_| truncated())?,
        ))
    };
    let u32_at = |o: usize| -> Result<u32, String> {
        Ok(u32::from_le_bytes(
            body.get(o..o + 4)
                .ok_or_else(truncated)?
                .try_into()
                .map_err(|_| truncated())?,
        ))
    };
    let at = Position {
        segment: u64_at(8)?,
        offset: u32_at(16)?,
    };
    let mut off = 20;
    let index = TileIndex::default();
    for kind in [RecordKind::Add, RecordKind::Delete] {
        let count = u64_at(off)?;
        off += 8;
        for _ in 0..count {
            let (key, used) = decode_key(body.get(off..).ok_or_else(truncated)?)
                .ok_or("bad key in checkpoint")?;
            off += used;
            let entry = Entry {
                at: Position {
                    segment: u64_at(off)?,
                    offset: u32_at(off + 8)?,
                },
                len: u32_at(off + 12)?,
            };
            index.apply(key, kind, entry);
            off += 16;
        }
    }
    Ok(Some((index, at)))
}

/// `[u16 length][layer][0][grid][0][extension][0][z u8][x u32][y u32][matrix height u32][matrix width u32]`,
/// little endian (the form the index checkpoint keeps).
/// The length of [`encode_head`] with a time stamp (a record written
/// before stamps existed has 8 bytes less).
fn stamped_head_len(key: &TileKey) -> u64 {
    (2 + key.layer.len() + key.grid.len() + key.format.extension().len() + 3 + 25) as u64
}

fn encode_key(key: &TileKey) -> Vec<u8> {
    encode_head(key, None)
}

/// The head of a tile record: [`encode_key`] with, when given, the time
/// the tile was stored (`[u64 milliseconds since 1970]`) after the matrix
/// width, counted in the length. Records written before stamps existed
/// have none.
fn encode_head(key: &TileKey, stored_at: Option<SystemTime>) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.layer.len() + key.grid.len() + 32);
    k.extend_from_slice(&[0, 0]);
    for part in [
        key.layer.as_bytes(),
        key.grid.as_bytes(),
        key.format.extension().as_bytes(),
    ] {
        k.extend_from_slice(part);
        k.push(0);
    }
    k.push(key.coord.z());
    k.extend_from_slice(&key.coord.x().to_le_bytes());
    k.extend_from_slice(&key.coord.y().to_le_bytes());
    k.extend_from_slice(&key.matrix_height.to_le_bytes());
    k.extend_from_slice(&key.matrix_width.to_le_bytes());
    if let Some(at) = stored_at {
        let ms = at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
        k.extend_from_slice(&u64::try_from(ms).unwrap_or(u64::MAX).to_le_bytes());
    }
    let len = u16::try_from(k.len() - 2).expect("names are at most 128 bytes");
    k[0..2].copy_from_slice(&len.to_le_bytes());
    k
}

/// The key at the start of a record and where the tile bytes begin.
fn decode_key(p: &[u8]) -> Option<(TileKey, usize)> {
    decode_head(p).map(|(key, _, at)| (key, at))
}

/// The key at the start of a record, the time it was stored when the
/// record says, and where the tile bytes begin.
fn decode_head(p: &[u8]) -> Option<(TileKey, Option<SystemTime>, usize)> {
    let len = usize::from(u16::from_le_bytes(p.get(0..2)?.try_into().ok()?));
    let k = p.get(2..2 + len)?;
    let mut parts = k.splitn(4, |b| *b == 0);
    let layer = std::str::from_utf8(parts.next()?).ok()?.to_string();
    let grid = std::str::from_utf8(parts.next()?).ok()?.to_string();
    let extension = parts.next()?;
    let format = TileFormat::ALL
        .into_iter()
        .find(|f| f.extension().as_bytes() == extension)?;
    let rest = parts.next()?;
    let stored_at = match rest.len() {
        17 => None,
        25 => {
            let ms = u64::from_le_bytes(rest[17..25].try_into().ok()?);
            Some(UNIX_EPOCH + std::time::Duration::from_millis(ms))
        }
        _ => return None,
    };
    let x = u32::from_le_bytes(rest[1..5].try_into().ok()?);
    let y = u32::from_le_bytes(rest[5..9].try_into().ok()?);
    let matrix_height = u32::from_le_bytes(rest[9..13].try_into().ok()?);
    let matrix_width = u32::from_le_bytes(rest[13..17].try_into().ok()?);
    let coord = TileCoord::restored(rest[0], x, y);
    Some((
        TileKey {
            layer,
            grid,
            coord,
            matrix_height,
            matrix_width,
            format,
        },
        stored_at,
        2 + len,
    ))
}
