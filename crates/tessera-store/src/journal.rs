//! Tiles in a [`tessera_journal::Journal`]: one record per write, an
//! in-memory index from key to record position rebuilt by replay at open.
//!
//! A metatile's tiles are appended together and made durable by the
//! journal's one `fdatasync` for the batch, instead of one file and one
//! fsync per tile.

use std::collections::HashMap;
use std::path::Path;
use std::sync::RwLock;

use bytes::Bytes;
use tessera_grid::TileCoord;
use tessera_journal::{Journal, JournalError, JournalOptions, Persist, Position, RecordKind};

use crate::{Durability, StoreError, TileKey, TileStore, check_not_empty};

/// A tile store on an append-only journal.
#[derive(Debug)]
pub struct JournalStore {
    journal: Journal,
    index: RwLock<HashMap<TileKey, Position>>,
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
        let mut index = HashMap::new();
        let mut undecodable = 0u64;
        let (journal, _) = Journal::open(dir, options, None, |r| match decode_key(r.payload) {
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
        Ok(JournalStore {
            journal,
            index: RwLock::new(index),
        })
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
            let position = self.append(key, kind, data, persist)?;
            self.index
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(key.clone(), position);
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
        self.append(key, RecordKind::Delete, &[], Persist::Buffered)?;
        self.index
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(key);
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
