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

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use tessera_grid::TileCoord;
use tessera_journal::{Journal, JournalError, JournalOptions, Persist, Position, RecordKind};

use crate::{Durability, StoreError, TileKey, TileStore, check_not_empty};

/// Writes between two automatic index checkpoints.
const CHECKPOINT_EVERY: u64 = 100_000;
const CHECKPOINT_FILE: &str = "index.ckpt";
const CHECKPOINT_MAGIC: &[u8; 8] = b"TSRIDX1\0";

/// A tile store on an append-only journal.
#[derive(Debug)]
pub struct JournalStore {
    journal: Journal,
    index: RwLock<HashMap<TileKey, Position>>,
    dir: PathBuf,
    /// Held shared by every write from its append to its index update, and
    /// exclusively by a checkpoint, so a checkpoint never sees a record in
    /// the journal whose index entry is still missing.
    gate: RwLock<()>,
    writes_since_checkpoint: AtomicU64,
}

fn io(op: &'static str, key: &dyn std::fmt::Display, e: &JournalError) -> StoreError {
    StoreError::Io {
        store: "journal".into(),
        op,
        key: key.to_string(),
        message: e.to_string(),
    }
}

impl JournalStore {
    /// Opens (creating if needed) the journal in `dir` and rebuilds the index.
    pub fn open(
        dir: impl AsRef<Path>,
        options: JournalOptions,
    ) -> Result<JournalStore, StoreError> {
        let dir = dir.as_ref();
        let (mut index, from) = match load_checkpoint(&dir.join(CHECKPOINT_FILE)) {
            Ok(Some((index, from))) => (index, Some(from)),
            Ok(None) => (HashMap::new(), None),
            Err(reason) => {
                tracing::warn!(dir = %dir.display(), %reason, "ignoring the index checkpoint; replaying the whole journal");
                (HashMap::new(), None)
            }
        };
        let mut undecodable = 0u64;
        let (journal, recovery) =
            Journal::open(dir, options, from, |r| match decode_key(r.payload) {
                Some((key, _)) => match r.kind {
                    RecordKind::Add | RecordKind::Update => {
                        index.insert(key, r.position);
                    }
                    RecordKind::Delete => {
                        index.remove(&key);
                    }
                },
                None => undecodable += 1,
            })
            .map_err(|e| io("open", &dir.display(), &e))?;
        if undecodable > 0 {
            tracing::warn!(undecodable, dir = %dir.display(), "journal records that are not tiles were ignored");
        }
        if let Some(cut) = recovery.cut_at {
            // Entries of the checkpoint past a torn tail point at nothing.
            index.retain(|_, p| *p < cut);
        }
        Ok(JournalStore {
            journal,
            index: RwLock::new(index),
            dir: dir.to_path_buf(),
            gate: RwLock::new(()),
            writes_since_checkpoint: AtomicU64::new(0),
        })
    }

    /// Writes the index with the journal's durable position to
    /// `index.ckpt` (atomically), so the next open replays only what
    /// follows.
    pub fn checkpoint(&self) -> Result<(), StoreError> {
        let (position, snapshot) = {
            let _quiet = self
                .gate
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let position = self.journal.durable_position();
            let index = self
                .index
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            (position, index.clone())
        };
        self.writes_since_checkpoint.store(0, Ordering::Relaxed);
        let path = self.dir.join(CHECKPOINT_FILE);
        write_checkpoint(&path, position, &snapshot).map_err(|e| StoreError::Io {
            store: "journal".into(),
            op: "checkpoint",
            key: path.display().to_string(),
            message: e.to_string(),
        })
    }

    fn after_write(&self) {
        if self.writes_since_checkpoint.fetch_add(1, Ordering::Relaxed) + 1 >= CHECKPOINT_EVERY
            && let Err(e) = self.checkpoint()
        {
            tracing::warn!(error = %e, "index checkpoint failed; the next start replays more");
        }
    }

    /// Tiles indexed.
    pub fn len(&self) -> usize {
        self.index
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }

    /// Whether no tile is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn append(
        &self,
        key: &TileKey,
        kind: RecordKind,
        data: &[u8],
        persist: Persist,
    ) -> Result<Position, StoreError> {
        let head = encode_key(key);
        self.journal
            .append_with(kind, head.len() + data.len(), persist, |buf| {
                buf.extend_from_slice(&head);
                buf.extend_from_slice(data);
            })
            .map_err(|e| io("put", key, &e))
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
            let kind = if self
                .index
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .contains_key(key)
            {
                RecordKind::Update
            } else {
                RecordKind::Add
            };
            {
                let _gate = self
                    .gate
                    .read()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let position = self.append(key, kind, data, persist)?;
                self.index
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .insert(key.clone(), position);
            }
            self.after_write();
        }
        Ok(())
    }
}

impl TileStore for JournalStore {
    #[allow(clippy::unnecessary_literal_bound)] // the trait allows owned names
    fn name(&self) -> &str {
        "journal"
    }

    fn get(&self, key: &TileKey) -> Result<Option<Bytes>, StoreError> {
        let Some(position) = self
            .index
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(key)
            .copied()
        else {
            return Ok(None);
        };
        let mut buf = Vec::new();
        self.journal
            .read(position, &mut buf)
            .map_err(|e| io("get", key, &e))?;
        match decode_key(&buf) {
            Some((k, at)) if &k == key => Ok(Some(Bytes::from(buf).slice(at..))),
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
        if !self
            .index
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains_key(key)
        {
            return Ok(());
        }
        {
            let _gate = self
                .gate
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            self.append(key, RecordKind::Delete, &[], Persist::Buffered)?;
            self.index
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .remove(key);
        }
        self.after_write();
        Ok(())
    }

    fn exists(&self, key: &TileKey) -> Result<bool, StoreError> {
        Ok(self
            .index
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains_key(key))
    }
}

impl Drop for JournalStore {
    fn drop(&mut self) {
        if let Err(e) = self.checkpoint() {
            tracing::warn!(error = %e, "index checkpoint at close failed; the next start replays the journal");
        }
    }
}

/// `magic, segment u64, offset u32, count u64, (key, segment u64, offset u32)*, crc32c u32`.
fn write_checkpoint(
    path: &Path,
    at: Position,
    index: &HashMap<TileKey, Position>,
) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(32 + index.len() * 48);
    buf.extend_from_slice(CHECKPOINT_MAGIC);
    buf.extend_from_slice(&at.segment.to_le_bytes());
    buf.extend_from_slice(&at.offset.to_le_bytes());
    buf.extend_from_slice(&(index.len() as u64).to_le_bytes());
    for (key, p) in index {
        buf.extend_from_slice(&encode_key(key));
        buf.extend_from_slice(&p.segment.to_le_bytes());
        buf.extend_from_slice(&p.offset.to_le_bytes());
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

type Checkpoint = (HashMap<TileKey, Position>, Position);

fn load_checkpoint(path: &Path) -> Result<Option<Checkpoint>, String> {
    let buf = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    if buf.len() < 32 || &buf[..8] != CHECKPOINT_MAGIC {
        return Err("not an index checkpoint".into());
    }
    let (body, crc) = buf.split_at(buf.len() - 4);
    if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().map_err(|_| "short")?) {
        return Err("checkpoint checksum mismatch".into());
    }
    let u64_at = |o: usize| u64::from_le_bytes(body[o..o + 8].try_into().expect("8 bytes"));
    let u32_at = |o: usize| u32::from_le_bytes(body[o..o + 4].try_into().expect("4 bytes"));
    let at = Position {
        segment: u64_at(8),
        offset: u32_at(16),
    };
    let count = u64_at(20);
    let mut index = HashMap::with_capacity(usize::try_from(count).unwrap_or(0).min(1 << 24));
    let mut off = 28;
    for _ in 0..count {
        let (key, used) = decode_key(&body[off..]).ok_or("bad key in checkpoint")?;
        off += used;
        if off + 12 > body.len() {
            return Err("checkpoint truncated".into());
        }
        index.insert(
            key,
            Position {
                segment: u64_at(off),
                offset: u32_at(off + 8),
            },
        );
        off += 12;
    }
    Ok(Some((index, at)))
}

/// `[u16 length][layer][0][grid][0][extension][0][z u8][x u32][y u32][matrix height u32]`, little endian.
fn encode_key(key: &TileKey) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.layer.len() + key.grid.len() + 24);
    k.extend_from_slice(&[0, 0]);
    for part in [
        key.layer.as_bytes(),
        key.grid.as_bytes(),
        key.extension.as_bytes(),
    ] {
        k.extend_from_slice(part);
        k.push(0);
    }
    k.push(key.coord.z());
    k.extend_from_slice(&key.coord.x().to_le_bytes());
    k.extend_from_slice(&key.coord.y().to_le_bytes());
    k.extend_from_slice(&key.matrix_height.to_le_bytes());
    let len = u16::try_from(k.len() - 2).expect("names are at most 128 bytes");
    k[0..2].copy_from_slice(&len.to_le_bytes());
    k
}

/// The key at the start of a record and where the tile bytes begin.
fn decode_key(p: &[u8]) -> Option<(TileKey, usize)> {
    let len = usize::from(u16::from_le_bytes(p.get(0..2)?.try_into().ok()?));
    let k = p.get(2..2 + len)?;
    let mut parts = k.splitn(4, |b| *b == 0);
    let layer = std::str::from_utf8(parts.next()?).ok()?.to_string();
    let grid = std::str::from_utf8(parts.next()?).ok()?.to_string();
    let extension = match parts.next()? {
        b"png" => "png",
        b"jpg" => "jpg",
        b"webp" => "webp",
        _ => return None,
    };
    let rest = parts.next()?;
    if rest.len() != 13 {
        return None;
    }
    let x = u32::from_le_bytes(rest[1..5].try_into().ok()?);
    let y = u32::from_le_bytes(rest[5..9].try_into().ok()?);
    let matrix_height = u32::from_le_bytes(rest[9..13].try_into().ok()?);
    let coord = TileCoord::restored(rest[0], x, y);
    Some((
        TileKey {
            layer,
            grid,
            coord,
            matrix_height,
            extension,
        },
        2 + len,
    ))
}
