//! Where rendered tiles are kept.
//!
//! This crate defines the [`TileStore`] contract that every cache backend
//! implements, the key and durability types they share, the backends that
//! need nothing but the local machine ([`FileStore`], [`MemoryStore`],
//! [`JournalStore`], [`MbtilesStore`]) and a shared conformance suite
//! (feature `conformance`) that every backend's tests call.

pub mod cluster;
#[cfg(feature = "conformance")]
pub mod conformance;
mod disk_cache;
mod file;
mod fingerprint;
mod journal;
mod journal_index;
mod mbtiles;
mod memory;
pub mod object;
mod object_io;
mod object_tiles;
mod open_files;
pub mod pack;
mod pack_cache;
mod packs;
pub mod quota;
mod spec;
pub mod upload;

pub use bytesize::ByteSize;
pub use disk_cache::DiskCache;
pub use file::{DEFAULT_HASH_CACHE, FileLayout, FileStore};
pub use journal::JournalStore;
pub use mbtiles::{MbtilesOptions, MbtilesStore, Synchronous};
pub use memory::MemoryStore;
pub use object_tiles::{DEFAULT_CACHE_CONTROL, TileObjectStore};
pub use open_files::{DEFAULT_OPEN_FILES, DEFAULT_OPEN_FILES_VALID, MAX_OPEN_FILES};
pub use packs::{PackOptions, PackStore};
pub use quota::{Eviction, QuotaOptions, QuotaStore};
pub use spec::{
    FileSpec, JournalSpec, MbtilesSpec, MemorySpec, ObjectLayout, ObjectSpec, OptionValue, Size,
    StoreSpec, option_strings,
};
pub use tessera_journal::JournalOptions;

/// A journal's group commit since its store opened: writes acknowledged,
/// `fdatasync` calls, acknowledgements later than `max_latency` after
/// their write was queued, and syncs that alone took longer than
/// `max_latency` (late because of the disk, whatever the batching did).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyncCounts {
    /// Writes (and deletes) acknowledged.
    pub acks: u64,
    /// `fdatasync` calls.
    pub syncs: u64,
    /// Acknowledgements later than `max_latency`.
    pub late_acks: u64,
    /// Syncs that alone took longer than `max_latency`.
    pub slow_syncs: u64,
}

use std::time::SystemTime;

use bytes::Bytes;
use tessera_grid::{TileCoord, TileFormat, TileRange};

/// Identifies one stored tile: layer, grid, coordinate and format.
///
/// Built only from validated parts: the layer and grid names come from the
/// configuration (checked to be `[A-Za-z0-9_.-]+`), the coordinate from the
/// grid, the format from a parsed request or the configuration. Nothing from a request is used raw,
/// so a key can never name a path outside a store's root.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TileKey {
    /// Layer name.
    pub layer: String,
    /// Grid identifier.
    pub grid: String,
    /// Tile coordinate (rows from the top).
    pub coord: TileCoord,
    /// Number of rows of the matrix at the tile's zoom, so that stores with
    /// bottom-up row order (TMS layout, MBTiles) can flip `coord.y()`.
    pub matrix_height: u32,
    /// Number of columns of the matrix at the tile's zoom, so that stores
    /// that order tiles along a space-filling curve know its size.
    pub matrix_width: u32,
    /// The encoded format (its extension names files and keys).
    pub format: TileFormat,
}

impl TileKey {
    /// The row counted from the bottom of the matrix (TMS order).
    pub fn tms_row(&self) -> u32 {
        self.matrix_height
            .saturating_sub(1)
            .saturating_sub(self.coord.y())
    }
}

impl std::fmt::Display for TileKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/{}/{}.{}",
            self.layer,
            self.grid,
            self.coord,
            self.format.extension()
        )
    }
}

/// How durable a write must be before it is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// Handed to the operating system: survives the process being killed,
    /// may be lost (never torn) on power failure.
    #[default]
    Buffered,
    /// On stable storage before the call returns.
    Synced,
}

/// Errors from tile stores.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// An I/O failure, with the key it concerned and its cause.
    #[error("store {store}: {op} {key} failed")]
    Io {
        /// Store name.
        store: String,
        /// Operation.
        op: &'static str,
        /// Key concerned, as `layer/grid/z/x/y.ext` (or a path for store-wide
        /// operations).
        key: String,
        /// The failure underneath (the file system's, SQLite's, the
        /// journal's or the object store client's error).
        #[source]
        source: Cause,
    },
    /// The caller broke the contract (for example an empty tile), or the
    /// store's configuration is inconsistent.
    #[error("store {store}: {message}")]
    Invalid {
        /// Store name.
        store: String,
        /// What was wrong.
        message: String,
    },
    /// The work was cancelled ([`TruncateProgress::cancel`]).
    #[error("store {store}: cancelled after {done} objects")]
    Cancelled {
        /// Store name.
        store: String,
        /// Objects removed before it stopped.
        done: u64,
    },
    /// No client could be built for an object store URL.
    #[error("store {store}: cannot open a client for {url}")]
    Client {
        /// Store name.
        store: String,
        /// The URL as configured.
        url: String,
        /// The client's error.
        #[source]
        source: Box<object_store::Error>,
    },
}

/// The error underneath a [`StoreError`].
pub type Cause = Box<dyn std::error::Error + Send + Sync>;

/// A cache of encoded tiles.
///
/// Contract for implementations:
/// - `get` returns exactly the bytes of the last acknowledged `put` for the
///   key, or `None`; never a partial tile, even after the process was killed
///   in the middle of a write.
/// - Tiles are never empty: `put` of zero bytes is [`StoreError::Invalid`].
/// - `put` with [`Durability::Synced`] returns only once the tile survives a
///   power failure; with [`Durability::Buffered`] it survives the process
///   being killed and may be lost, but never torn, on power failure.
/// - `put_many` is equivalent to `put` of each tile (a backend may batch,
///   for example one directory sync for a whole metatile); when it fails some
///   tiles may be stored and others not, each of them whole or absent.
/// - `delete` of a missing key succeeds; after it returns, `get` is `None`.
/// - `exists` agrees with `get`.
/// - All methods may be called concurrently from many threads, also for the
///   same key: concurrent puts leave one of the written values, whole.
/// - Methods block; async callers run them on blocking threads.
pub trait TileStore: Send + Sync + std::fmt::Debug {
    /// A short name for logs and metrics (`file`, `memory`, ...).
    fn name(&self) -> &str;

    /// Whether the tiles are lost when the process exits (a memory-only
    /// store). Batch commands refuse to seed into such a store, since
    /// whatever they wrote would be gone when they exit. The default is
    /// `false`: the store keeps what it acknowledged.
    fn is_volatile(&self) -> bool {
        false
    }

    /// Reads a tile.
    fn get(&self, key: &TileKey) -> Result<Option<Bytes>, StoreError>;

    /// Reads a tile with the time it was stored. Agrees with `get` on the
    /// bytes; `stored_at` is `None` when the store does not know (the
    /// default, and tiles written by other tools).
    fn get_stored(&self, key: &TileKey) -> Result<Option<StoredTile>, StoreError> {
        Ok(self.get(key)?.map(|bytes| StoredTile {
            bytes,
            stored_at: None,
        }))
    }

    /// Reads several tiles (the tiles of one metatile), in the order of
    /// `keys`. Stores that group tiles read each group once; a store with
    /// memory in front keeps what it read. The default reads them one by
    /// one.
    fn get_many(&self, keys: &[TileKey]) -> Result<Vec<Option<StoredTile>>, StoreError> {
        keys.iter().map(|k| self.get_stored(k)).collect()
    }

    /// Records that the tiles kept under the layer key `layer` are made
    /// from what `fingerprint` names, unless a fingerprint is recorded for
    /// that key already, and returns the recorded one (the given one when
    /// there was none). The record is kept with the tiles, so processes
    /// sharing the store agree: of concurrent claims with different
    /// fingerprints exactly one is recorded and every caller gets it back.
    /// A store that cannot record (a read-only file) returns the one
    /// recorded, or the given one when there is none.
    fn claim_fingerprint(&self, layer: &str, fingerprint: &str) -> Result<String, StoreError>;

    /// Answers from memory only, without blocking: `Some` when the tile is
    /// held in memory (its bytes then equal what `get` returns), `None` when
    /// `get` must be asked. Async callers try it before moving to a blocking
    /// thread. The default holds nothing in memory.
    fn peek(&self, key: &TileKey) -> Option<HeldTile> {
        let _ = key;
        None
    }

    /// Like [`TileStore::peek`], and [`Peek::Absent`] when the store can
    /// tell as cheaply that it holds no tile for `key` (a file store whose
    /// file is not there, a memory-only store), so that a miss needs no
    /// blocking thread. Never `Absent` for a tile whose `put` was
    /// acknowledged and not deleted since. The default answers what
    /// `peek` does, and `Unknown` for the rest.
    fn peek_or_absent(&self, key: &TileKey) -> Peek {
        self.peek(key).map_or(Peek::Unknown, Peek::Held)
    }

    /// Like [`TileStore::peek`], but a store that keeps each tile as a
    /// whole file may answer with the open file instead of its bytes
    /// ([`Peeked::File`]), so that a server can hand it to the socket
    /// without reading it. It does so only when every page of the file is
    /// in the page cache and its content hash is known without reading it.
    /// The default answers what `peek` does.
    fn peek_file(&self, key: &TileKey) -> Option<Peeked> {
        self.peek(key).map(Peeked::Held)
    }

    /// Whether writing a metatile's tiles with one `put_many` costs much
    /// less than writing them one by one (tiles grouped into objects on an
    /// object store); the tile cache then saves a rendered metatile's tiles
    /// in one batch. The default is `false`.
    fn prefers_batches(&self) -> bool {
        false
    }

    /// The name of the object `key` is written into together with other
    /// tiles (its pack), when one `put_many` of a whole group costs about
    /// one write while each part written alone costs a write of the group
    /// so far: a seed then hands the store a group's metatiles together.
    /// `None` (the default) when every tile is its own write, or a write
    /// costs the same however tiles are batched.
    fn write_group(&self, key: &TileKey) -> Option<String> {
        let _ = key;
        None
    }

    /// Gives back the space of tiles deleted, where deleting leaves it
    /// taken (a journal compacts the segments mostly dead); called after a
    /// quota evicted. The default has nothing to give back.
    fn reclaim(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Calls `f` with the key and byte length of every tile the store
    /// holds, rebuilding keys with `matrix` (a grid's columns and rows at a
    /// zoom) where the store keeps rows flipped (TMS layout, MBTiles) or
    /// does not record the matrix; tiles of grids `matrix` does not know
    /// are left out. `Ok(false)`: the store cannot list its tiles (object
    /// stores, memory alone). Costs what the store holds: for indexing a
    /// store once (a quota set on a store that has tiles).
    fn scan(
        &self,
        matrix: MatrixOf<'_>,
        f: &mut dyn FnMut(TileKey, u64),
    ) -> Result<bool, StoreError> {
        let _ = (matrix, f);
        Ok(false)
    }

    /// The layer keys starting with `prefix` under which the store may
    /// hold tiles of `grid` in `format`, sorted, each once: every key it
    /// holds such tiles under is named (a store that lists directories may
    /// also name a key whose tiles are all gone). `None`: the store cannot
    /// list its keys. For truncating the keys a layer's tiles were stored
    /// under at other states of its source (`layer~items=...`): costs one
    /// listing of the store's layer keys (a directory, a bucket prefix with
    /// a delimiter, the journal's or the memory's index), never a walk of
    /// the tiles.
    fn layer_keys(
        &self,
        prefix: &str,
        grid: &str,
        format: TileFormat,
    ) -> Result<Option<Vec<String>>, StoreError> {
        let _ = (prefix, grid, format);
        Ok(None)
    }

    /// Tiles and bytes the store holds per layer key and zoom, counted from
    /// what it holds (a directory walk, a query per MBTiles file, the
    /// journal's index, a quota's index): `None` for a store that cannot
    /// count without reading everything (object stores, memory alone).
    /// Costs what the store holds: call it now and then, not per request.
    fn count_by_zoom(&self) -> Result<Option<Vec<quota::ZoomUsage>>, StoreError> {
        Ok(None)
    }

    /// How a store that writes through a journal has kept its latency
    /// bound since it opened ([`SyncCounts`]); `None` for other stores.
    fn sync_counts(&self) -> Option<SyncCounts> {
        None
    }

    /// How full the store is against its quota, with the tiles and bytes
    /// it holds per layer key and zoom, when it has one
    /// ([`quota::QuotaStore`]). The default has none.
    fn quota(&self) -> Option<(quota::QuotaUsage, Vec<quota::ZoomUsage>)> {
        None
    }

    /// Drops every copy of the tile of `key` held in this process (in
    /// memory, or the whole group it belongs to in a local cache of a
    /// shared store), so the next read asks the store itself: another
    /// process may have written it. The default holds nothing.
    fn forget(&self, key: &TileKey) {
        let _ = key;
    }

    /// Drops every copy of the tiles of layer key `layer` and of the keys
    /// kept under it (its named styles', dimension values' and
    /// fingerprints' keys, [`quota::is_key_of`]) held in this process,
    /// after another process truncated some of them. The default holds
    /// nothing.
    fn forget_layer(&self, layer: &str) {
        let _ = layer;
    }

    /// Replaces the quotas of single layers (layer key, bytes) of a store
    /// with a quota ([`QuotaStore`]), evicting at once where one is passed.
    /// Answers whether the store has a quota to set them on; others answer
    /// `false` and change nothing.
    fn set_layer_quotas(&self, layers: &[(String, u64)]) -> Result<bool, StoreError> {
        let _ = layers;
        Ok(false)
    }

    /// Writes a tile.
    fn put(&self, key: &TileKey, data: Bytes, durability: Durability) -> Result<(), StoreError>;

    /// Writes several tiles (the tiles of one metatile).
    fn put_many(
        &self,
        tiles: Vec<(TileKey, Bytes)>,
        durability: Durability,
    ) -> Result<(), StoreError> {
        for (key, data) in tiles {
            self.put(&key, data, durability)?;
        }
        Ok(())
    }

    /// Removes a tile.
    fn delete(&self, key: &TileKey) -> Result<(), StoreError>;

    /// Whether a tile is stored.
    fn exists(&self, key: &TileKey) -> Result<bool, StoreError> {
        Ok(self.get(key)?.is_some())
    }

    /// Whether every one of `keys` is stored (stops at the first missing
    /// one). Stores that group tiles answer with one read per group.
    fn all_exist(&self, keys: &[TileKey]) -> Result<bool, StoreError> {
        for k in keys {
            if !self.exists(k)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Removes every tile of `area`. Object stores delete by computed keys
    /// (never by listing); local stores cost what they hold in the area,
    /// never what the area could hold (a whole zoom is a directory or one
    /// statement). Progress is counted in `area.progress`, and raising its
    /// `cancel` stops the work with [`StoreError::Cancelled`]. The default
    /// deletes tile by tile (for stores whose areas are small: the memory
    /// LRU, tests); stores that group tiles delete whole groups.
    fn truncate(&self, area: &TileArea) -> Result<TruncateReport, StoreError> {
        let mut report = TruncateReport::default();
        for AreaRange {
            range,
            matrix_width,
            matrix_height,
        } in &area.ranges
        {
            for y in range.min_y..=range.max_y {
                area.progress.check(self.name())?;
                for x in range.min_x..=range.max_x {
                    self.delete(&TileKey {
                        layer: area.layer.clone(),
                        grid: area.grid.clone(),
                        coord: TileCoord::restored(range.z, x, y),
                        matrix_height: *matrix_height,
                        matrix_width: *matrix_width,
                        format: area.format,
                    })?;
                    report.objects_deleted += 1;
                    area.progress.add(1);
                }
            }
        }
        Ok(report)
    }
}

/// A grid's matrix size (columns, rows) at a zoom, by grid id; `None` for
/// a grid or zoom it does not know ([`TileStore::scan`]).
pub type MatrixOf<'a> = &'a dyn Fn(&str, u8) -> Option<(u32, u32)>;

/// Progress of a truncation, shared with whoever watches it: what has been
/// removed so far, and a flag that stops it.
#[derive(Debug, Default)]
pub struct TruncateProgress {
    /// Raised to stop the work at its next step.
    pub cancel: std::sync::atomic::AtomicBool,
    /// Objects (tiles, packs, rows) removed so far.
    pub done: std::sync::atomic::AtomicU64,
}

impl TruncateProgress {
    /// Counts `n` more objects removed.
    pub fn add(&self, n: u64) {
        self.done.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }

    /// Objects removed so far.
    pub fn done(&self) -> u64 {
        self.done.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// [`StoreError::Cancelled`] once `cancel` is raised.
    pub fn check(&self, store: &str) -> Result<(), StoreError> {
        if self.cancel.load(std::sync::atomic::Ordering::Relaxed) {
            Err(StoreError::Cancelled {
                store: store.to_string(),
                done: self.done(),
            })
        } else {
            Ok(())
        }
    }
}

/// Tiles of one layer, grid and format, as tile ranges.
#[derive(Debug, Clone)]
pub struct TileArea {
    /// Layer name.
    pub layer: String,
    /// Grid identifier.
    pub grid: String,
    /// Tile format.
    pub format: TileFormat,
    /// Disjoint tile ranges, each with the matrix size at its zoom.
    pub ranges: Vec<AreaRange>,
    /// Counts what a truncation removed, and stops it.
    pub progress: std::sync::Arc<TruncateProgress>,
}

/// One tile range of a [`TileArea`], with the size of the matrix at its
/// zoom (stores that flip rows or order tiles along a curve need it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AreaRange {
    /// The tiles.
    pub range: TileRange,
    /// Columns of the matrix at `range.z`.
    pub matrix_width: u32,
    /// Rows of the matrix at `range.z`.
    pub matrix_height: u32,
}

impl TileArea {
    /// Whether the tile of `key` lies in the area.
    pub fn contains(&self, key: &TileKey) -> bool {
        key.layer == self.layer
            && key.grid == self.grid
            && key.format == self.format
            && self.ranges.iter().any(|AreaRange { range: r, .. }| {
                r.z == key.coord.z()
                    && (r.min_x..=r.max_x).contains(&key.coord.x())
                    && (r.min_y..=r.max_y).contains(&key.coord.y())
            })
    }
}

/// What a truncation removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TruncateReport {
    /// Objects deleted: tiles or rows a local store held, or (object
    /// stores, which never list) keys deleted, held or not.
    pub objects_deleted: u64,
    /// Packs on the area's border rewritten without the area's tiles.
    pub objects_rewritten: u64,
}

/// A tile read from a store, with when it was stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredTile {
    /// The encoded tile.
    pub bytes: Bytes,
    /// When it was written (`None`: the store does not record it).
    pub stored_at: Option<SystemTime>,
}

/// A tile held in memory, with its content hash computed once when it was
/// remembered (servers use it as the ETag without hashing on every hit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldTile {
    /// The encoded tile.
    pub bytes: Bytes,
    /// [`content_hash`] of `bytes`.
    pub hash: u128,
    /// When it was written to the store (`None`: not known).
    pub stored_at: Option<SystemTime>,
}

/// A tile kept whole in a file the page cache holds, opened (see
/// [`TileStore::peek_file`]).
#[derive(Debug)]
pub struct HeldFile {
    /// The tile's file, to be read at explicit offsets (`pread`,
    /// `sendfile` with an offset): the store may hand the same open file
    /// to several hits.
    pub file: std::sync::Arc<std::fs::File>,
    /// Its length in bytes when it was opened (never 0).
    pub len: u64,
    /// [`content_hash`] of its bytes.
    pub hash: u128,
    /// When it was written to the store (`None`: not known).
    pub stored_at: Option<SystemTime>,
}

/// What [`TileStore::peek_or_absent`] can tell without blocking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peek {
    /// The tile, as [`TileStore::peek`] answers it.
    Held(HeldTile),
    /// The store holds no tile for the key: `get` would answer `None`.
    Absent,
    /// Not known without blocking: `get` must be asked.
    Unknown,
}

/// What [`TileStore::peek_file`] found.
#[derive(Debug)]
pub enum Peeked {
    /// The tile's bytes.
    Held(HeldTile),
    /// The tile's open file.
    File(HeldFile),
}

/// A 128-bit hash of a tile's bytes (XXH3-128): equal bytes, equal hash.
pub fn content_hash(bytes: &[u8]) -> u128 {
    xxhash_rust::xxh3::xxh3_128(bytes)
}

/// Refuses an empty tile, as the contract requires of every backend.
pub(crate) fn check_not_empty(store: &str, key: &TileKey, data: &[u8]) -> Result<(), StoreError> {
    if data.is_empty() {
        return Err(StoreError::Invalid {
            store: store.to_string(),
            message: format!("refusing to store an empty tile for {key}"),
        });
    }
    Ok(())
}
