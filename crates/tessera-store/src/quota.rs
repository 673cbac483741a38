//! A disk quota in front of a store (`max_size`): every tile written is
//! recorded with its size in an index beside the store (a small SQLite
//! file), hits are recorded there too (sampled and batched: a few per
//! second in one transaction, never a sync per hit), and a write that takes
//! the store past its quota first evicts tiles, least recently used (`lru`),
//! least often used (`lfu`) or oldest stored (`oldest`), down to 95 % of it
//! with the tiles being written counted: what the store holds stays within
//! its quota.
//! The index survives restarts, so what was used lately is kept after one.
//!
//! The store keeps serving and rendering at its quota: a write is never
//! refused for lack of room it can make. Tiles the index does not know
//! (stored before the quota was set) are not counted and not evicted.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};
use tessera_grid::{TileCoord, TileFormat};
use xxhash_rust::xxh3::Xxh3Builder;

use crate::{
    Durability, HeldTile, Peek, Peeked, StoreError, StoredTile, TileArea, TileKey, TileStore,
    TruncateReport,
};

/// Which tiles go first when a store is over its quota.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Eviction {
    /// Least recently read or written.
    #[default]
    Lru,
    /// Least often read (then least recently).
    Lfu,
    /// Stored longest ago.
    Oldest,
}

/// A quota's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct QuotaOptions {
    /// Most bytes of tiles kept.
    pub max_bytes: u64,
    /// Which tiles go first.
    pub eviction: Eviction,
    /// The index file (created if missing).
    pub index: PathBuf,
    /// How often recorded hits are written to the index.
    pub flush_every: Duration,
    /// One hit in `sample` is recorded (counted `sample` times).
    pub sample: u32,
    /// Quotas of single layers in the store: a layer key (with its
    /// dimension values' and fingerprints' keys, [`is_key_of`]) and its
    /// most bytes. A write passing a layer's quota evicts that layer's
    /// tiles only.
    pub layers: Vec<(String, u64)>,
}

/// Whether index key `key` is kept under layer key `base`: `base` itself,
/// or one of its dimension values' (`base~name=value`) or fingerprints'
/// (`base@fingerprint`) keys.
pub fn is_key_of(key: &str, base: &str) -> bool {
    key.strip_prefix(base)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(['~', '@']))
}

/// The configured layer key a layer key is kept under: `key` up to its
/// first named style, dimension value (`~`) or fingerprint (`@`), so every
/// key of one configured layer [`is_key_of`] it (layer keys are letters,
/// digits, `_`, `-` and `.` before those).
pub fn root_of(key: &str) -> &str {
    key.split(['~', '@']).next().unwrap_or(key)
}

impl QuotaOptions {
    /// `max_bytes` with `eviction`, the index at `index`, hits written every
    /// second, one in four recorded.
    pub fn new(max_bytes: u64, eviction: Eviction, index: PathBuf) -> QuotaOptions {
        QuotaOptions {
            max_bytes,
            eviction,
            index,
            flush_every: Duration::from_secs(1),
            sample: 4,
            layers: Vec::new(),
        }
    }
}

/// How full a store with a quota is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct QuotaUsage {
    /// The quota in bytes.
    pub max_bytes: u64,
    /// Bytes of the tiles the index knows.
    pub used_bytes: u64,
    /// Tiles the index knows.
    pub tiles: u64,
    /// Tiles evicted since the store opened.
    pub evicted_tiles: u64,
    /// Bytes evicted since the store opened.
    pub evicted_bytes: u64,
}

/// Tiles and bytes stored at one zoom of one layer key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ZoomUsage {
    /// The layer key.
    pub layer: String,
    /// The zoom.
    pub z: u8,
    /// Tiles.
    pub tiles: u64,
    /// Bytes.
    pub bytes: u64,
}

/// Counts by (layer key, zoom) as [`ZoomUsage`] rows, in key order.
pub fn zoom_usage(counts: std::collections::BTreeMap<(String, u8), (u64, u64)>) -> Vec<ZoomUsage> {
    counts
        .into_iter()
        .map(|((layer, z), (tiles, bytes))| ZoomUsage {
            layer,
            z,
            tiles,
            bytes,
        })
        .collect()
}

/// Hits recorded and not yet written, striped by thread (a key hit on two
/// threads may be in two stripes; writing them takes the latest time and
/// adds the counts).
type Hits = Vec<Mutex<HashMap<TileKey, (u64, u64), Xxh3Builder>>>;

thread_local! {
    /// This thread's hits seen (for sampling) and its stripe of `Hits`.
    static SAMPLER: std::cell::Cell<(u64, usize)> = const { std::cell::Cell::new((0, usize::MAX)) };
}

/// Stripes handed to threads in turn.
static NEXT_STRIPE: AtomicU64 = AtomicU64::new(0);

const STRIPES: usize = 16;
/// Rows taken per eviction round.
const EVICT_BATCH: usize = 256;

/// Bytes the quota index's write-ahead log is cut back to after a
/// checkpoint.
const WAL_LIMIT_BYTES: i64 = 1 << 20;

/// Bytes admitted to be written and not yet recorded.
#[derive(Debug, Default)]
struct Pending {
    bytes: u64,
    /// Per layer quota, by its key.
    layers: HashMap<String, u64>,
    /// The tiles being written (admitted, not yet recorded), with how many
    /// writes of each are in flight: eviction leaves them alone, or it
    /// could delete a tile just written again while the index keeps it.
    writing: HashMap<TileKey, usize>,
}

/// A write's bytes: in all, and per layer quota (key, quota, bytes).
struct Incoming {
    bytes: u64,
    layers: Vec<(String, u64, u64)>,
    keys: Vec<TileKey>,
}

/// A tile chosen for eviction, as its row read.
struct Victim {
    key: TileKey,
    size: u64,
    stored: i64,
}

/// A store with a quota ([`QuotaOptions`]) in front of `inner`.
#[derive(Debug)]
pub struct QuotaStore {
    inner: Arc<dyn TileStore>,
    shared: Arc<Shared>,
    flusher: Option<JoinHandle<()>>,
    /// The index was created by this open.
    new_index: bool,
}

#[derive(Debug)]
struct Shared {
    options: QuotaOptions,
    index: Mutex<Connection>,
    /// Bytes admitted and not yet recorded; held by the one admitting or
    /// evicting (writers are admitted one at a time).
    pending: Mutex<Pending>,
    /// Signalled when a write's bytes are recorded (a writer waiting for
    /// room may find some to evict).
    written: Condvar,
    used: AtomicU64,
    tiles: AtomicU64,
    evicted_tiles: AtomicU64,
    evicted_bytes: AtomicU64,
    /// The layer quotas (from `options.layers`, replaced by
    /// [`QuotaStore::set_layer_quotas`]).
    layers: Mutex<Arc<Vec<(String, u64)>>>,
    /// Bytes held per layer quota, by its key.
    layer_used: Mutex<HashMap<String, u64>>,
    /// `evicted_bytes` when the store last reclaimed space.
    reclaimed_at: AtomicU64,
    hits: Hits,
    /// The last time handed out (milliseconds since the epoch), so that
    /// times only grow, across restarts too.
    clock: AtomicU64,
    stop: (Mutex<bool>, Condvar),
}

fn now_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn as_sql(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl QuotaStore {
    /// Puts a quota in front of `inner`, opening (or creating) its index.
    pub fn open(
        inner: Arc<dyn TileStore>,
        options: QuotaOptions,
    ) -> Result<QuotaStore, StoreError> {
        let name = inner.name().to_string();
        let index_path = options.index.display().to_string();
        let fail = |e: &dyn std::fmt::Display| StoreError::Io {
            store: name.clone(),
            op: "quota index",
            key: index_path.clone(),
            source: e.to_string().into(),
        };
        if let Some(dir) = options.index.parent() {
            std::fs::create_dir_all(dir).map_err(|e| fail(&e))?;
        }
        let new_index = !options.index.exists();
        let conn = open_index(&options.index, options.eviction).map_err(|e| fail(&e))?;
        let (tiles, used, last): (i64, i64, i64) = conn
            .query_row(
                "SELECT count(*), coalesce(sum(size), 0), coalesce(max(max(access, stored)), 0) FROM tiles",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .map_err(|e| fail(&e))?;
        let layers = options.layers.clone();
        let shared = Arc::new(Shared {
            options,
            index: Mutex::new(conn),
            pending: Mutex::new(Pending::default()),
            written: Condvar::new(),
            used: AtomicU64::new(u64::try_from(used).unwrap_or(0)),
            tiles: AtomicU64::new(u64::try_from(tiles).unwrap_or(0)),
            evicted_tiles: AtomicU64::new(0),
            evicted_bytes: AtomicU64::new(0),
            layers: Mutex::new(Arc::new(layers)),
            layer_used: Mutex::new(HashMap::new()),
            reclaimed_at: AtomicU64::new(0),
            hits: (0..STRIPES)
                .map(|_| Mutex::new(HashMap::with_hasher(Xxh3Builder::new())))
                .collect(),
            clock: AtomicU64::new(u64::try_from(last).unwrap_or(0)),
            stop: (Mutex::new(false), Condvar::new()),
        });
        let flushing = shared.clone();
        let flusher = std::thread::Builder::new()
            .name("tessera-quota".into())
            .spawn(move || flushing.flush_until_stopped())
            .map_err(|e| fail(&e))?;
        let store = QuotaStore {
            inner,
            shared,
            flusher: Some(flusher),
            new_index,
        };
        store
            .shared
            .count_layers()
            .map_err(|e| store.index_error(&e))?;
        // A quota lowered since the last run applies at once.
        store.make_room()?;
        Ok(store)
    }

    /// Whether this open created the index: tiles the store held before
    /// are not in it until [`QuotaStore::index_existing`].
    pub fn is_new(&self) -> bool {
        self.new_index
    }

    /// Records every tile the store holds that the index lacks
    /// ([`TileStore::scan`], keys rebuilt with `matrix`) as written and read
    /// before anything since, so that they are evicted first; then evicts
    /// if the store is over its quota. Answers the tiles added (0 when the
    /// store cannot list its tiles).
    pub fn index_existing(&self, matrix: crate::MatrixOf<'_>) -> Result<u64, StoreError> {
        const BATCH: usize = 10_000;
        let mut batch: Vec<(TileKey, u64)> = Vec::with_capacity(BATCH);
        let mut added = 0u64;
        let mut failed = None;
        let mut flush = |batch: &mut Vec<(TileKey, u64)>, failed: &mut Option<rusqlite::Error>| {
            if failed.is_none() {
                match self.shared.record_existing(batch) {
                    Ok(n) => added += n,
                    Err(e) => *failed = Some(e),
                }
            }
            batch.clear();
        };
        let listed = self.inner.scan(matrix, &mut |key, size| {
            batch.push((key, size));
            if batch.len() >= BATCH {
                flush(&mut batch, &mut failed);
            }
        })?;
        flush(&mut batch, &mut failed);
        if let Some(e) = failed {
            return Err(self.index_error(&e));
        }
        if !listed {
            return Ok(0);
        }
        self.make_room()?;
        Ok(added)
    }

    /// How full the store is.
    pub fn usage(&self) -> QuotaUsage {
        self.shared.usage()
    }

    /// Writes the hits recorded so far to the index (they are otherwise
    /// written every `flush_every`).
    pub fn flush(&self) -> Result<(), StoreError> {
        self.shared.flush_hits().map_err(|e| self.index_error(&e))
    }

    fn index_error(&self, e: &rusqlite::Error) -> StoreError {
        StoreError::Io {
            store: self.inner.name().to_string(),
            op: "quota index",
            key: self.shared.options.index.display().to_string(),
            source: e.to_string().into(),
        }
    }

    /// Writes `tiles` with `write`: the write is admitted first (the store
    /// evicting until what it holds, what is being written and these
    /// tiles fit its quotas, or waiting for writes in flight when evicting
    /// cannot make room before they land), then the tiles are recorded.
    fn write(
        &self,
        tiles: &[(TileKey, u64)],
        write: impl FnOnce() -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let incoming = self.incoming(tiles);
        self.admit(&incoming)?;
        let written = write().and_then(|()| {
            self.shared
                .record_writes(tiles)
                .map_err(|e| self.index_error(&e))
        });
        {
            let mut pending = lock(&self.shared.pending);
            pending.bytes -= incoming.bytes;
            for (base, _, bytes) in &incoming.layers {
                if let Some(p) = pending.layers.get_mut(base) {
                    *p -= bytes;
                }
            }
            for key in &incoming.keys {
                if let Some(n) = pending.writing.get_mut(key) {
                    *n -= 1;
                    if *n == 0 {
                        pending.writing.remove(key);
                    }
                }
            }
        }
        self.shared.written.notify_all();
        written
    }

    /// The bytes of `tiles`, in all and per layer quota they fall under.
    fn incoming(&self, tiles: &[(TileKey, u64)]) -> Incoming {
        let layers = self
            .shared
            .layer_quotas()
            .iter()
            .filter_map(|(base, max)| {
                let theirs: u64 = tiles
                    .iter()
                    .filter(|(k, _)| is_key_of(&k.layer, base))
                    .map(|(_, n)| n)
                    .sum();
                (theirs > 0).then(|| (base.clone(), *max, theirs))
            })
            .collect();
        Incoming {
            bytes: tiles.iter().map(|(_, n)| n).sum(),
            layers,
            keys: tiles.iter().map(|(k, _)| k.clone()).collect(),
        }
    }

    /// Waits until `incoming` fits beside what is held and being written,
    /// evicting first, then counts it as being written. A write that
    /// cannot fit even with nothing else in flight (larger than its quota)
    /// is let through alone.
    fn admit(&self, incoming: &Incoming) -> Result<(), StoreError> {
        let mut pending = lock(&self.shared.pending);
        let mut flushed = false;
        loop {
            if !self.fits(&pending, incoming) {
                if !flushed {
                    // Recent hits first, so the order is up to date.
                    self.shared.flush_hits().map_err(|e| self.index_error(&e))?;
                    flushed = true;
                }
                self.evict_for(&pending, incoming)?;
            }
            if self.fits(&pending, incoming) || pending.bytes == 0 {
                pending.bytes += incoming.bytes;
                for (base, _, bytes) in &incoming.layers {
                    *pending.layers.entry(base.clone()).or_insert(0) += bytes;
                }
                for key in &incoming.keys {
                    *pending.writing.entry(key.clone()).or_insert(0) += 1;
                }
                return Ok(());
            }
            // What is in flight is not in the index yet: once it is, it
            // can be evicted.
            pending = self
                .shared
                .written
                .wait_timeout(pending, Duration::from_millis(100))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Whether `incoming` fits every quota beside what is held and pending.
    fn fits(&self, pending: &Pending, incoming: &Incoming) -> bool {
        let shared = &self.shared;
        shared.used.load(Ordering::SeqCst) + pending.bytes + incoming.bytes
            <= shared.options.max_bytes
            && incoming.layers.iter().all(|(base, max, bytes)| {
                shared.layer_held(base) + pending.layers.get(base).copied().unwrap_or(0) + bytes
                    <= *max
            })
    }

    /// Evicts down to 95 % of each quota `incoming` passes, counting what
    /// is pending and incoming; then gives back space deleting leaves
    /// taken (a journal's) once a quarter of the quota was evicted since
    /// the last time.
    fn evict_for(&self, pending: &Pending, incoming: &Incoming) -> Result<(), StoreError> {
        let max = self.shared.options.max_bytes;
        let writing = &pending.writing;
        self.evict(
            None,
            max - max / 20,
            pending.bytes + incoming.bytes,
            writing,
        )?;
        for (base, max, bytes) in &incoming.layers {
            let queued = pending.layers.get(base).copied().unwrap_or(0);
            self.evict(Some(base), max - max / 20, queued + bytes, writing)?;
        }
        let evicted = self.shared.evicted_bytes.load(Ordering::SeqCst);
        if evicted - self.shared.reclaimed_at.load(Ordering::SeqCst) >= max / 4 {
            self.shared.reclaimed_at.store(evicted, Ordering::SeqCst);
            self.inner.reclaim()?;
        }
        Ok(())
    }

    /// Brings the store and each layer quota within 95 % of their quota
    /// (a quota lowered since the last run, tiles indexed at first start).
    fn make_room(&self) -> Result<(), StoreError> {
        let nothing = Incoming {
            bytes: 0,
            keys: Vec::new(),
            layers: self
                .shared
                .layer_quotas()
                .iter()
                .map(|(base, max)| (base.clone(), *max, 0))
                .collect(),
        };
        let pending = lock(&self.shared.pending);
        if self.fits(&pending, &nothing) {
            return Ok(());
        }
        self.shared.flush_hits().map_err(|e| self.index_error(&e))?;
        self.evict_for(&pending, &nothing)
    }

    /// Evicts tiles (of layer quota `base` only when given) in the
    /// policy's order while what they hold plus `pending` bytes passes
    /// `target`, or until none are left; never a tile of `writing` (being
    /// written again: the write records it after this).
    fn evict(
        &self,
        base: Option<&str>,
        target: u64,
        pending: u64,
        writing: &HashMap<TileKey, usize>,
    ) -> Result<(), StoreError> {
        let shared = &self.shared;
        let held = || match base {
            Some(base) => shared.layer_held(base),
            None => shared.used.load(Ordering::SeqCst),
        };
        while held() + pending > target {
            let victims = shared
                .victims_of(base, EVICT_BATCH)
                .map_err(|e| self.index_error(&e))?;
            if victims.is_empty() {
                break;
            }
            let mut gone = Vec::with_capacity(victims.len());
            for victim in victims {
                if held() + pending <= target {
                    break;
                }
                if writing.contains_key(&victim.key) {
                    continue;
                }
                self.inner.delete(&victim.key)?;
                shared.evicted_tiles.fetch_add(1, Ordering::SeqCst);
                shared
                    .evicted_bytes
                    .fetch_add(victim.size, Ordering::SeqCst);
                // Counted off as it goes, so the loop stops at the target.
                shared.count(&victim.key.layer, victim.size, false);
                gone.push(victim);
            }
            if gone.is_empty() {
                // Every candidate is being written: what is left to evict
                // comes after their writes.
                break;
            }
            shared
                .forget_rows(&gone)
                .map_err(|e| self.index_error(&e))?;
        }
        Ok(())
    }

    fn hit(&self, key: &TileKey) {
        self.shared.hit(key);
    }
}

impl Drop for QuotaStore {
    fn drop(&mut self) {
        {
            let (stop, wake) = &self.shared.stop;
            *lock(stop) = true;
            wake.notify_all();
        }
        if let Some(t) = self.flusher.take() {
            let _ = t.join();
        }
        if let Err(e) = self.shared.flush_hits() {
            tracing::warn!(error = %e, "the quota index's last hits were not written");
        }
    }
}

fn open_index(path: &Path, eviction: Eviction) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(10))?;
    // WAL with `synchronous = NORMAL`: a commit is a write to the log, not
    // a sync, and survives a killed process (a power cut may lose the last
    // ones: hits and a few tiles' rows, which only makes the order older).
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    // The log beside the tiles stays small: checkpointed every 256 pages
    // (1 MiB, not SQLite's 4 MiB) and cut back to 1 MiB after each, so the
    // store's folder holds tiles, not the quota's bookkeeping.
    conn.pragma_update(None, "wal_autocheckpoint", 256)?;
    conn.pragma_update(None, "journal_size_limit", WAL_LIMIT_BYTES)?;
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS tiles (
            layer TEXT NOT NULL, grid TEXT NOT NULL, format TEXT NOT NULL,
            z INTEGER NOT NULL, x INTEGER NOT NULL, y INTEGER NOT NULL,
            mw INTEGER NOT NULL, mh INTEGER NOT NULL,
            size INTEGER NOT NULL, stored INTEGER NOT NULL,
            access INTEGER NOT NULL, hits INTEGER NOT NULL,
            PRIMARY KEY (layer, grid, format, z, x, y)) WITHOUT ROWID;",
    )?;
    let order = match eviction {
        Eviction::Lru => "CREATE INDEX IF NOT EXISTS by_access ON tiles (access)",
        Eviction::Lfu => "CREATE INDEX IF NOT EXISTS by_hits ON tiles (hits, access)",
        Eviction::Oldest => "CREATE INDEX IF NOT EXISTS by_stored ON tiles (stored)",
    };
    conn.execute_batch(order)?;
    Ok(conn)
}

fn key_params(key: &TileKey) -> (String, String, &'static str, u8, u32, u32) {
    (
        key.layer.clone(),
        key.grid.clone(),
        key.format.extension(),
        key.coord.z(),
        key.coord.x(),
        key.coord.y(),
    )
}

impl Shared {
    /// Now, in milliseconds since the epoch, and later than any time
    /// handed out before (so that the order of writes and hits is kept even
    /// within a millisecond, or when the clock steps back).
    fn tick(&self) -> u64 {
        let now = now_millis();
        let mut last = self.clock.load(Ordering::SeqCst);
        loop {
            let next = now.max(last + 1);
            match self
                .clock
                .compare_exchange(last, next, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return next,
                Err(seen) => last = seen,
            }
        }
    }

    fn usage(&self) -> QuotaUsage {
        QuotaUsage {
            max_bytes: self.options.max_bytes,
            used_bytes: self.used.load(Ordering::SeqCst),
            tiles: self.tiles.load(Ordering::SeqCst),
            evicted_tiles: self.evicted_tiles.load(Ordering::SeqCst),
            evicted_bytes: self.evicted_bytes.load(Ordering::SeqCst),
        }
    }

    fn record_writes(&self, tiles: &[(TileKey, u64)]) -> rusqlite::Result<()> {
        let mut conn = lock(&self.index);
        let tx = conn.transaction()?;
        {
            let mut old = tx.prepare_cached(
                "SELECT size FROM tiles WHERE layer=?1 AND grid=?2 AND format=?3 AND z=?4 AND x=?5 AND y=?6",
            )?;
            let mut put = tx.prepare_cached(
                "INSERT INTO tiles (layer, grid, format, z, x, y, mw, mh, size, stored, access, hits)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10, 0)
                 ON CONFLICT DO UPDATE SET size = excluded.size, stored = excluded.stored,
                     access = excluded.access, mw = excluded.mw, mh = excluded.mh",
            )?;
            for (key, size) in tiles {
                self.add_to_layer(&key.layer, *size, true);
                let (l, g, f, z, x, y) = key_params(key);
                let before: Option<i64> = old
                    .query_row(params![l, g, f, z, x, y], |r| r.get(0))
                    .optional()?;
                put.execute(params![
                    l,
                    g,
                    f,
                    z,
                    x,
                    y,
                    key.matrix_width,
                    key.matrix_height,
                    as_sql(*size),
                    as_sql(self.tick())
                ])?;
                match before {
                    Some(b) => {
                        let b = u64::try_from(b).unwrap_or(0);
                        self.used.fetch_sub(b, Ordering::SeqCst);
                        self.add_to_layer(&key.layer, b, false);
                    }
                    None => {
                        self.tiles.fetch_add(1, Ordering::SeqCst);
                    }
                }
                self.used.fetch_add(*size, Ordering::SeqCst);
            }
        }
        tx.commit()
    }

    /// Records tiles found in the store (not written through the quota) as
    /// written and read at time 0, keeping rows the index has; answers the
    /// rows added.
    fn record_existing(&self, tiles: &[(TileKey, u64)]) -> rusqlite::Result<u64> {
        let mut added = 0;
        let mut conn = lock(&self.index);
        let tx = conn.transaction()?;
        {
            let mut put = tx.prepare_cached(
                "INSERT OR IGNORE INTO tiles (layer, grid, format, z, x, y, mw, mh, size, stored, access, hits)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 0, 0, 0)",
            )?;
            for (key, size) in tiles {
                let (l, g, f, z, x, y) = key_params(key);
                if put.execute(params![
                    l,
                    g,
                    f,
                    z,
                    x,
                    y,
                    key.matrix_width,
                    key.matrix_height,
                    as_sql(*size)
                ])? > 0
                {
                    added += 1;
                    self.tiles.fetch_add(1, Ordering::SeqCst);
                    self.used.fetch_add(*size, Ordering::SeqCst);
                    self.add_to_layer(&key.layer, *size, true);
                }
            }
        }
        tx.commit()?;
        Ok(added)
    }

    /// Removes the rows of evicted tiles (whose bytes were counted off).
    /// A row written again since it was chosen is kept (the tile may be
    /// there), and as the rewrite took the old bytes off already, they
    /// are counted back once.
    fn forget_rows(&self, victims: &[Victim]) -> rusqlite::Result<()> {
        if victims.is_empty() {
            return Ok(());
        }
        let mut conn = lock(&self.index);
        let tx = conn.transaction()?;
        {
            let mut gone = tx.prepare_cached(
                "DELETE FROM tiles WHERE layer=?1 AND grid=?2 AND format=?3 AND z=?4 AND x=?5 AND y=?6 AND stored=?7",
            )?;
            for v in victims {
                let (l, g, f, z, x, y) = key_params(&v.key);
                if gone.execute(params![l, g, f, z, x, y, v.stored])? > 0 {
                    self.tiles.fetch_sub(1, Ordering::SeqCst);
                } else {
                    self.count(&v.key.layer, v.size, true);
                }
            }
        }
        tx.commit()
    }

    /// Adds (or takes off) a tile's bytes to what the store and its
    /// layer's quota hold.
    fn count(&self, layer: &str, bytes: u64, add: bool) {
        if add {
            self.used.fetch_add(bytes, Ordering::SeqCst);
        } else {
            self.used.fetch_sub(bytes, Ordering::SeqCst);
        }
        self.add_to_layer(layer, bytes, add);
    }

    /// Bytes held under layer quota `base`.
    fn layer_held(&self, base: &str) -> u64 {
        lock(&self.layer_used).get(base).copied().unwrap_or(0)
    }

    /// Removes a tile's row (deleted from the store), counting its bytes off.
    fn deleted(&self, key: &TileKey) -> rusqlite::Result<()> {
        let conn = lock(&self.index);
        let (l, g, f, z, x, y) = key_params(key);
        let size: Option<i64> = conn
            .query_row(
                "DELETE FROM tiles WHERE layer=?1 AND grid=?2 AND format=?3 AND z=?4 AND x=?5 AND y=?6 RETURNING size",
                params![l, g, f, z, x, y],
                |r| r.get(0),
            )
            .optional()?;
        if let Some(size) = size {
            let size = u64::try_from(size).unwrap_or(0);
            self.used.fetch_sub(size, Ordering::SeqCst);
            self.add_to_layer(&key.layer, size, false);
            self.tiles.fetch_sub(1, Ordering::SeqCst);
        }
        Ok(())
    }

    /// The layer quotas now.
    fn layer_quotas(&self) -> Arc<Vec<(String, u64)>> {
        lock(&self.layers).clone()
    }

    /// Adds (or takes off) `bytes` of a tile of layer key `layer` to the
    /// layer quota it falls under, if any.
    fn add_to_layer(&self, layer: &str, bytes: u64, add: bool) {
        let quotas = self.layer_quotas();
        let Some((base, _)) = quotas.iter().find(|(b, _)| is_key_of(layer, b)) else {
            return;
        };
        let mut used = lock(&self.layer_used);
        let held = used.entry(base.clone()).or_insert(0);
        *held = if add {
            *held + bytes
        } else {
            held.saturating_sub(bytes)
        };
    }

    /// Counts the bytes of every layer quota from the index.
    fn count_layers(&self) -> rusqlite::Result<()> {
        let quotas = self.layer_quotas();
        if quotas.is_empty() {
            lock(&self.layer_used).clear();
            return Ok(());
        }
        let mut totals: HashMap<String, u64> = HashMap::new();
        {
            let conn = lock(&self.index);
            let mut q = conn
                .prepare_cached("SELECT layer, coalesce(sum(size), 0) FROM tiles GROUP BY layer")?;
            let rows = q.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
            for row in rows {
                let (layer, bytes) = row?;
                if let Some((base, _)) = quotas.iter().find(|(b, _)| is_key_of(&layer, b)) {
                    *totals.entry(base.clone()).or_insert(0) += u64::try_from(bytes).unwrap_or(0);
                }
            }
        }
        *lock(&self.layer_used) = totals;
        Ok(())
    }

    /// Removes the rows of a truncated area and counts again.
    fn truncated(&self, area: &TileArea) -> rusqlite::Result<()> {
        let mut conn = lock(&self.index);
        let tx = conn.transaction()?;
        {
            let mut cut = tx.prepare_cached(
                "DELETE FROM tiles WHERE layer=?1 AND grid=?2 AND format=?3 AND z=?4
                 AND x BETWEEN ?5 AND ?6 AND y BETWEEN ?7 AND ?8",
            )?;
            for r in &area.ranges {
                let range = &r.range;
                cut.execute(params![
                    area.layer,
                    area.grid,
                    area.format.extension(),
                    range.z,
                    range.min_x,
                    range.max_x,
                    range.min_y,
                    range.max_y
                ])?;
            }
        }
        let (tiles, used): (i64, i64) = tx.query_row(
            "SELECT count(*), coalesce(sum(size), 0) FROM tiles",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        tx.commit()?;
        self.tiles
            .store(u64::try_from(tiles).unwrap_or(0), Ordering::SeqCst);
        self.used
            .store(u64::try_from(used).unwrap_or(0), Ordering::SeqCst);
        self.count_layers()
    }

    /// The next tiles to evict, of the layer quota `base` only when given.
    fn victims_of(&self, base: Option<&str>, n: usize) -> rusqlite::Result<Vec<Victim>> {
        let order = match self.options.eviction {
            Eviction::Lru => "access",
            Eviction::Lfu => "hits, access",
            Eviction::Oldest => "stored",
        };
        // A layer's keys: itself, `base~...` and `base@...`.
        let filter = if base.is_some() {
            "WHERE layer = ?2 OR substr(layer, 1, length(?2) + 1) IN (?2 || '~', ?2 || '@')"
        } else {
            "WHERE ?2 IS NULL"
        };
        let conn = lock(&self.index);
        let mut q = conn.prepare_cached(&format!(
            "SELECT layer, grid, format, z, x, y, mw, mh, size, stored FROM tiles {filter} ORDER BY {order} LIMIT ?1"
        ))?;
        let rows = q.query_map(params![i64::try_from(n).unwrap_or(i64::MAX), base], |r| {
            let format: String = r.get(2)?;
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                format,
                r.get::<_, u8>(3)?,
                r.get::<_, u32>(4)?,
                r.get::<_, u32>(5)?,
                r.get::<_, u32>(6)?,
                r.get::<_, u32>(7)?,
                r.get::<_, i64>(8)?,
                r.get::<_, i64>(9)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (layer, grid, format, z, x, y, mw, mh, size, stored) = row?;
            let Some(format) = TileFormat::from_extension(&format) else {
                continue;
            };
            out.push(Victim {
                key: TileKey {
                    layer,
                    grid,
                    coord: TileCoord::restored(z, x, y),
                    matrix_height: mh,
                    matrix_width: mw,
                    format,
                },
                size: u64::try_from(size).unwrap_or(0),
                stored,
            });
        }
        Ok(out)
    }

    /// Records a hit, one in `sample` of this thread's: nothing shared is
    /// touched for the others, and a recorded one takes its thread's
    /// stripe (uncontended) and clones the key only the first time.
    fn hit(&self, key: &TileKey) {
        let sample = u64::from(self.options.sample.max(1));
        let stripe = SAMPLER.with(|cell| {
            let (seen, mut stripe) = cell.get();
            if stripe == usize::MAX {
                stripe = usize::try_from(NEXT_STRIPE.fetch_add(1, Ordering::Relaxed)).unwrap_or(0)
                    % STRIPES;
            }
            cell.set((seen + 1, stripe));
            seen.is_multiple_of(sample).then_some(stripe)
        });
        let Some(stripe) = stripe else { return };
        // After the last write (of this tile too) without a shared
        // read-modify-write: a write in the same millisecond may tie.
        let now = now_millis().max(self.clock.load(Ordering::Relaxed) + 1);
        let mut hits = lock(&self.hits[stripe]);
        if let Some(entry) = hits.get_mut(key) {
            entry.0 = entry.0.max(now);
            entry.1 += sample;
        } else {
            hits.insert(key.clone(), (now, sample));
        }
    }

    fn flush_hits(&self) -> rusqlite::Result<()> {
        let taken: Vec<HashMap<TileKey, (u64, u64), Xxh3Builder>> = self
            .hits
            .iter()
            .map(|s| std::mem::take(&mut *lock(s)))
            .collect();
        if taken.iter().all(HashMap::is_empty) {
            return Ok(());
        }
        let mut conn = lock(&self.index);
        let tx = conn.transaction()?;
        {
            let mut touch = tx.prepare_cached(
                "UPDATE tiles SET access = max(access, ?7), hits = hits + ?8
                 WHERE layer=?1 AND grid=?2 AND format=?3 AND z=?4 AND x=?5 AND y=?6",
            )?;
            for (key, (at, count)) in taken.iter().flatten() {
                let (l, g, f, z, x, y) = key_params(key);
                touch.execute(params![l, g, f, z, x, y, as_sql(*at), as_sql(*count)])?;
            }
        }
        tx.commit()
    }

    fn flush_until_stopped(&self) {
        let (stop, wake) = &self.stop;
        loop {
            let stopped = lock(stop);
            let (stopped, _) = wake
                .wait_timeout_while(stopped, self.options.flush_every, |s| !*s)
                .unwrap_or_else(PoisonError::into_inner);
            if *stopped {
                return;
            }
            drop(stopped);
            if let Err(e) = self.flush_hits() {
                tracing::warn!(error = %e, "cannot write hits to the quota index");
            }
        }
    }

    /// Tiles and bytes per layer key and zoom, from the index.
    fn by_zoom(&self) -> rusqlite::Result<Vec<ZoomUsage>> {
        let conn = lock(&self.index);
        let mut q = conn.prepare_cached(
            "SELECT layer, z, count(*), coalesce(sum(size), 0) FROM tiles GROUP BY layer, z ORDER BY layer, z",
        )?;
        let rows = q.query_map([], |r| {
            Ok(ZoomUsage {
                layer: r.get(0)?,
                z: r.get(1)?,
                tiles: u64::try_from(r.get::<_, i64>(2)?).unwrap_or(0),
                bytes: u64::try_from(r.get::<_, i64>(3)?).unwrap_or(0),
            })
        })?;
        rows.collect()
    }
}

impl QuotaStore {
    /// Tiles and bytes stored per layer key and zoom (those the index knows).
    pub fn by_zoom(&self) -> Result<Vec<ZoomUsage>, StoreError> {
        self.shared.by_zoom().map_err(|e| self.index_error(&e))
    }
}

impl TileStore for QuotaStore {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn is_volatile(&self) -> bool {
        self.inner.is_volatile()
    }

    fn get(&self, key: &TileKey) -> Result<Option<Bytes>, StoreError> {
        let found = self.inner.get(key)?;
        if found.is_some() {
            self.hit(key);
        }
        Ok(found)
    }

    fn get_stored(&self, key: &TileKey) -> Result<Option<StoredTile>, StoreError> {
        let found = self.inner.get_stored(key)?;
        if found.is_some() {
            self.hit(key);
        }
        Ok(found)
    }

    fn get_many(&self, keys: &[TileKey]) -> Result<Vec<Option<StoredTile>>, StoreError> {
        let found = self.inner.get_many(keys)?;
        for (key, tile) in keys.iter().zip(&found) {
            if tile.is_some() {
                self.hit(key);
            }
        }
        Ok(found)
    }

    fn claim_fingerprint(&self, layer: &str, fingerprint: &str) -> Result<String, StoreError> {
        self.inner.claim_fingerprint(layer, fingerprint)
    }

    fn peek(&self, key: &TileKey) -> Option<HeldTile> {
        let held = self.inner.peek(key)?;
        self.hit(key);
        Some(held)
    }

    fn peek_file(&self, key: &TileKey) -> Option<Peeked> {
        let peeked = self.inner.peek_file(key)?;
        self.hit(key);
        Some(peeked)
    }

    fn peek_or_absent(&self, key: &TileKey) -> Peek {
        let peeked = self.inner.peek_or_absent(key);
        if matches!(peeked, Peek::Held(_)) {
            self.hit(key);
        }
        peeked
    }

    fn prefers_batches(&self) -> bool {
        self.inner.prefers_batches()
    }

    fn write_group(&self, key: &TileKey) -> Option<String> {
        self.inner.write_group(key)
    }

    fn reclaim(&self) -> Result<(), StoreError> {
        self.inner.reclaim()
    }

    fn forget(&self, key: &TileKey) {
        self.inner.forget(key);
    }

    fn forget_layer(&self, layer: &str) {
        self.inner.forget_layer(layer);
    }

    fn put(&self, key: &TileKey, data: Bytes, durability: Durability) -> Result<(), StoreError> {
        let size = data.len() as u64;
        self.write(&[(key.clone(), size)], || {
            self.inner.put(key, data, durability)
        })
    }

    fn put_many(
        &self,
        tiles: Vec<(TileKey, Bytes)>,
        durability: Durability,
    ) -> Result<(), StoreError> {
        let sizes: Vec<(TileKey, u64)> = tiles
            .iter()
            .map(|(k, d)| (k.clone(), d.len() as u64))
            .collect();
        self.write(&sizes, || self.inner.put_many(tiles, durability))
    }

    fn delete(&self, key: &TileKey) -> Result<(), StoreError> {
        self.inner.delete(key)?;
        self.shared.deleted(key).map_err(|e| self.index_error(&e))
    }

    fn exists(&self, key: &TileKey) -> Result<bool, StoreError> {
        self.inner.exists(key)
    }

    fn all_exist(&self, keys: &[TileKey]) -> Result<bool, StoreError> {
        self.inner.all_exist(keys)
    }

    fn truncate(&self, area: &TileArea) -> Result<TruncateReport, StoreError> {
        let report = self.inner.truncate(area)?;
        self.shared
            .truncated(area)
            .map_err(|e| self.index_error(&e))?;
        Ok(report)
    }

    fn layer_keys(
        &self,
        prefix: &str,
        grid: &str,
        format: tessera_grid::TileFormat,
    ) -> Result<Option<Vec<String>>, StoreError> {
        self.inner.layer_keys(prefix, grid, format)
    }

    /// From the index (cheap): the tiles the quota knows.
    fn count_by_zoom(&self) -> Result<Option<Vec<ZoomUsage>>, StoreError> {
        self.by_zoom().map(Some)
    }

    fn sync_counts(&self) -> Option<crate::SyncCounts> {
        self.inner.sync_counts()
    }

    fn quota(&self) -> Option<(QuotaUsage, Vec<ZoomUsage>)> {
        Some((self.usage(), self.by_zoom().unwrap_or_default()))
    }

    /// Counts the layers' bytes again under the new quotas, then evicts
    /// where one is passed.
    fn set_layer_quotas(&self, layers: &[(String, u64)]) -> Result<bool, StoreError> {
        if *self.shared.layer_quotas() != layers {
            *lock(&self.shared.layers) = Arc::new(layers.to_vec());
            self.shared
                .count_layers()
                .map_err(|e| self.index_error(&e))?;
            self.make_room()?;
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryStore;

    fn key(x: u32) -> TileKey {
        TileKey {
            layer: "l".into(),
            grid: "g".into(),
            coord: TileCoord::restored(10, x, 7),
            matrix_height: 1024,
            matrix_width: 1024,
            format: TileFormat::Png,
        }
    }

    fn tile() -> Bytes {
        Bytes::from(vec![7u8; 1000])
    }

    /// Options with every hit recorded, the index in `dir`.
    fn options(dir: &Path, max: u64, eviction: Eviction) -> QuotaOptions {
        let mut options = QuotaOptions::new(max, eviction, dir.join("quota.sqlite"));
        options.sample = 1;
        options
    }

    fn open(dir: &Path, max: u64, eviction: Eviction, inner: &Arc<MemoryStore>) -> QuotaStore {
        QuotaStore::open(inner.clone(), options(dir, max, eviction)).unwrap()
    }

    fn stored(inner: &MemoryStore, n: u32) -> Vec<u32> {
        (0..n)
            .filter(|x| inner.get(&key(*x)).unwrap().is_some())
            .collect()
    }

    /// A store whose writes take a while, keeping the most bytes it held.
    #[derive(Debug, Default)]
    struct Slow {
        tiles: Mutex<HashMap<TileKey, u64>>,
        peak: AtomicU64,
    }

    impl TileStore for Slow {
        fn name(&self) -> &'static str {
            "slow"
        }

        fn get(&self, key: &TileKey) -> Result<Option<Bytes>, StoreError> {
            let size = lock(&self.tiles).get(key).copied();
            Ok(size.map(|n| Bytes::from(vec![0u8; usize::try_from(n).unwrap()])))
        }

        fn claim_fingerprint(&self, _: &str, fingerprint: &str) -> Result<String, StoreError> {
            Ok(fingerprint.to_string())
        }

        fn put(&self, key: &TileKey, data: Bytes, _: Durability) -> Result<(), StoreError> {
            {
                let mut tiles = lock(&self.tiles);
                tiles.insert(key.clone(), data.len() as u64);
                self.peak.fetch_max(tiles.values().sum(), Ordering::SeqCst);
            }
            std::thread::sleep(Duration::from_millis(2));
            Ok(())
        }

        fn delete(&self, key: &TileKey) -> Result<(), StoreError> {
            lock(&self.tiles).remove(key);
            Ok(())
        }
    }

    #[test]
    fn concurrent_writes_wait_for_room_rather_than_pass_the_quota() {
        // Eight writers of 4 x 1,000 bytes at once against a quota of
        // 10,000: what is in flight is not in the index to be evicted, so
        // writers wait for it to land instead of all going through.
        let dir = tempfile::tempdir().unwrap();
        let inner = Arc::new(Slow::default());
        let options = options(dir.path(), 10_000, Eviction::Lru);
        let quota = QuotaStore::open(inner.clone(), options).unwrap();
        std::thread::scope(|s| {
            for w in 0..8u32 {
                let quota = &quota;
                s.spawn(move || {
                    for b in 0..10u32 {
                        let tiles = (0..4)
                            .map(|i| (key(w * 1_000 + b * 10 + i), tile()))
                            .collect();
                        quota.put_many(tiles, Durability::Synced).unwrap();
                    }
                });
            }
        });
        let peak = inner.peak.load(Ordering::SeqCst);
        assert!(peak <= 10_000, "the store held {peak} bytes at once");
        let usage = quota.usage();
        let held: u64 = lock(&inner.tiles).values().sum();
        assert_eq!(usage.used_bytes, held);
        assert_eq!(usage.tiles + usage.evicted_tiles, 320);
    }

    #[test]
    fn a_tile_written_again_while_eviction_runs_is_neither_deleted_nor_counted_wrong() {
        // Writers rewrite tiles 0..4 over and over while others write new
        // tiles into a quota of ten: eviction picks the rewritten tiles as
        // victims, and one being written again must not be deleted under
        // its write (the index would count a tile the store lacks).
        let dir = tempfile::tempdir().unwrap();
        let inner = Arc::new(Slow::default());
        let quota =
            QuotaStore::open(inner.clone(), options(dir.path(), 10_000, Eviction::Oldest)).unwrap();
        std::thread::scope(|s| {
            for w in 0..4u32 {
                let quota = &quota;
                s.spawn(move || {
                    for _ in 0..60 {
                        quota.put(&key(w), tile(), Durability::Synced).unwrap();
                    }
                });
                s.spawn(move || {
                    for n in 0..60u32 {
                        quota
                            .put(&key(100 + w * 100 + n), tile(), Durability::Synced)
                            .unwrap();
                    }
                });
            }
        });
        let usage = quota.usage();
        let held: u64 = lock(&inner.tiles).values().sum();
        assert_eq!(usage.used_bytes, held, "{usage:?}");
        let indexed: u64 = quota.by_zoom().unwrap().iter().map(|z| z.tiles).sum();
        assert_eq!(indexed, lock(&inner.tiles).len() as u64);
    }

    #[test]
    fn the_quota_index_log_stays_small_beside_the_tiles() {
        let dir = tempfile::tempdir().unwrap();
        let inner = Arc::new(MemoryStore::new(1 << 30, None));
        let quota = open(dir.path(), 1 << 30, Eviction::Lru, &inner);
        for x in 0..6000 {
            quota.put(&key(x), tile(), Durability::Synced).unwrap();
        }
        let wal = std::fs::metadata(dir.path().join("quota.sqlite-wal")).map_or(0, |m| m.len());
        assert!(wal <= 2 << 20, "a log of {wal} bytes");
    }

    #[test]
    fn a_store_over_its_quota_evicts_the_least_recently_used_and_stays_within_it() {
        let dir = tempfile::tempdir().unwrap();
        let inner = Arc::new(MemoryStore::new(1 << 30, None));
        let quota = open(dir.path(), 5_500, Eviction::Lru, &inner);
        for x in 0..5 {
            quota.put(&key(x), tile(), Durability::Synced).unwrap();
        }
        assert_eq!(quota.usage().used_bytes, 5_000);
        // Tile 0 is read: the next write evicts tile 1, the least recent.
        assert!(quota.get(&key(0)).unwrap().is_some());
        quota.put(&key(5), tile(), Durability::Synced).unwrap();
        assert_eq!(stored(&inner, 6), vec![0, 2, 3, 4, 5]);
        for x in 6..40 {
            quota.put(&key(x), tile(), Durability::Synced).unwrap();
            assert!(quota.usage().used_bytes <= 5_500);
            assert!(
                quota.get(&key(x)).unwrap().is_some(),
                "a tile just written is kept"
            );
        }
        let usage = quota.usage();
        assert_eq!(usage.tiles + usage.evicted_tiles, 40);
        assert_eq!(usage.used_bytes, usage.tiles * 1_000);
        assert_eq!(usage.evicted_bytes, usage.evicted_tiles * 1_000);
        assert_eq!(stored(&inner, 40).len() as u64, usage.tiles);
        // Rewriting a tile counts its new size, not both.
        let before = usage.used_bytes;
        quota
            .put(&key(39), Bytes::from(vec![1u8; 500]), Durability::Synced)
            .unwrap();
        assert_eq!(quota.usage().used_bytes, before - 500);
        quota.delete(&key(39)).unwrap();
        assert_eq!(quota.usage().used_bytes, before - 1_000);
        assert_eq!(quota.usage().tiles, usage.tiles - 1);
        let zooms = quota.by_zoom().unwrap();
        assert_eq!(
            zooms,
            vec![ZoomUsage {
                layer: "l".into(),
                z: 10,
                tiles: usage.tiles - 1,
                bytes: before - 1_000
            }]
        );
    }

    #[test]
    fn the_order_survives_a_restart_and_a_lowered_quota_applies_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let inner = Arc::new(MemoryStore::new(1 << 30, None));
        let quota = open(dir.path(), 10_000, Eviction::Lru, &inner);
        for x in 0..10 {
            quota.put(&key(x), tile(), Durability::Synced).unwrap();
        }
        // Read the oldest three: they are now the most recently used.
        for x in 0..3 {
            assert!(quota.get(&key(x)).unwrap().is_some());
        }
        drop(quota);
        let quota = open(dir.path(), 4_000, Eviction::Lru, &inner);
        let usage = quota.usage();
        assert!(usage.used_bytes <= 4_000, "{usage:?}");
        let kept = stored(&inner, 10);
        assert!(kept.iter().all(|x| [0, 1, 2, 9].contains(x)), "{kept:?}");
        assert!(
            kept.contains(&0) && kept.contains(&1) && kept.contains(&2),
            "{kept:?}"
        );
    }

    #[test]
    fn lfu_keeps_the_tiles_read_most_and_oldest_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        let inner = Arc::new(MemoryStore::new(1 << 30, None));
        let quota = open(dir.path(), 3_500, Eviction::Lfu, &inner);
        for x in 0..3 {
            quota.put(&key(x), tile(), Durability::Synced).unwrap();
        }
        for _ in 0..3 {
            quota.get(&key(0)).unwrap();
        }
        quota.get(&key(2)).unwrap();
        quota.put(&key(3), tile(), Durability::Synced).unwrap();
        assert_eq!(stored(&inner, 4), vec![0, 2, 3]);
        drop(quota);

        let dir = tempfile::tempdir().unwrap();
        let inner = Arc::new(MemoryStore::new(1 << 30, None));
        let quota = open(dir.path(), 3_500, Eviction::Oldest, &inner);
        for x in 0..3 {
            quota.put(&key(x), tile(), Durability::Synced).unwrap();
        }
        quota.get(&key(0)).unwrap();
        quota.put(&key(3), tile(), Durability::Synced).unwrap();
        assert_eq!(
            stored(&inner, 4),
            vec![1, 2, 3],
            "read or not, the oldest goes"
        );
    }

    fn key_of(layer: &str, x: u32) -> TileKey {
        TileKey {
            layer: layer.into(),
            ..key(x)
        }
    }

    #[test]
    fn a_configured_layer_holds_its_styles_values_and_fingerprints_keys() {
        for key in [
            "relief",
            "relief@5f3a",
            "relief~time=2024-01-01T000000Z",
            "relief~style=night~time=2024-01-01T000000Z@77aa",
        ] {
            assert_eq!(root_of(key), "relief", "{key}");
            assert!(is_key_of(key, root_of(key)), "{key}");
        }
        assert!(!is_key_of("relief2", "relief"));
        assert!(!is_key_of("relief-night", "relief"));
    }

    #[test]
    fn forgetting_a_layer_drops_its_values_and_styles_held_in_memory() {
        let behind = Arc::new(MemoryStore::new(1 << 30, None));
        let memory = MemoryStore::new(1 << 30, Some(behind));
        for (n, layer) in ["a", "a~time=1", "a~style=x@f", "ab", "b~time=1"]
            .into_iter()
            .enumerate()
        {
            memory
                .put(&key_of(layer, n as u32), tile(), Durability::Buffered)
                .unwrap();
        }
        assert_eq!(memory.resident_tiles(), 5);
        memory.forget_layer("a");
        assert_eq!(memory.resident_tiles(), 2, "ab and b~time=1 stay");
    }

    #[test]
    fn a_layer_over_its_own_quota_evicts_its_own_tiles_only() {
        let dir = tempfile::tempdir().unwrap();
        let inner = Arc::new(MemoryStore::new(1 << 30, None));
        let mut options = options(dir.path(), u64::MAX, Eviction::Lru);
        options.layers = vec![("a".into(), 3_500)];
        let quota = QuotaStore::open(inner.clone(), options.clone()).unwrap();
        // Layer b first (older), then a and its dimension values' keys.
        for x in 0..5 {
            quota
                .put(&key_of("b", x), tile(), Durability::Synced)
                .unwrap();
        }
        for (i, layer) in ["a", "a~time=2024", "a@f00d", "a", "a.hd"]
            .iter()
            .enumerate()
        {
            let x = u32::try_from(i).unwrap();
            quota
                .put(&key_of(layer, x), tile(), Durability::Synced)
                .unwrap();
        }
        let has = |layer: &str, x| inner.get(&key_of(layer, x)).unwrap().is_some();
        assert!(
            (0..5).all(|x| has("b", x)),
            "another layer's tiles are not evicted"
        );
        assert!(has("a.hd", 4), "a.hd is another layer, not a's");
        assert!(!has("a", 0), "a's least recently used went");
        assert!(has("a~time=2024", 1) && has("a@f00d", 2) && has("a", 3));
        assert_eq!(quota.usage().evicted_tiles, 1);
        drop(quota);
        // Counted again at open: a lower layer quota applies at once.
        options.layers = vec![("a".into(), 1_500)];
        let quota = QuotaStore::open(inner.clone(), options).unwrap();
        assert_eq!(quota.usage().evicted_tiles, 2);
        assert!(has("a", 3) && !has("a~time=2024", 1) && !has("a@f00d", 2));
        assert!((0..5).all(|x| has("b", x)) && has("a.hd", 4));
    }

    #[test]
    fn layer_quotas_set_on_an_open_store_apply_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let inner = Arc::new(MemoryStore::new(1 << 30, None));
        let options = options(dir.path(), u64::MAX, Eviction::Lru);
        let quota = QuotaStore::open(inner.clone(), options).unwrap();
        for x in 0..4 {
            for layer in ["a", "b"] {
                quota
                    .put(&key_of(layer, x), tile(), Durability::Synced)
                    .unwrap();
            }
        }
        let has = |layer: &str, x| inner.get(&key_of(layer, x)).unwrap().is_some();
        // A reload gives layer a room for two and a half tiles (evicting
        // down to 95 % of it): its two oldest go.
        assert!(quota.set_layer_quotas(&[("a".into(), 2_500)]).unwrap());
        assert!(!has("a", 0) && !has("a", 1) && has("a", 2) && has("a", 3));
        assert!((0..4).all(|x| has("b", x)));
        quota
            .put(&key_of("a", 9), tile(), Durability::Synced)
            .unwrap();
        assert!(!has("a", 2) && has("a", 9), "written against the new quota");
        // Taken off again: a grows freely.
        assert!(quota.set_layer_quotas(&[]).unwrap());
        for x in 10..14 {
            quota
                .put(&key_of("a", x), tile(), Durability::Synced)
                .unwrap();
        }
        assert!((10..14).all(|x| has("a", x)) && has("a", 9));
        assert_eq!(quota.usage().evicted_tiles, 3);
        // A store without a quota has none to set.
        assert!(!inner.set_layer_quotas(&[("a".into(), 1)]).unwrap());
    }

    #[test]
    fn file_journal_and_mbtiles_stores_count_what_they_hold_by_layer_and_zoom() {
        let dir = tempfile::tempdir().unwrap();
        let stores: Vec<(&str, Arc<dyn TileStore>)> = vec![
            (
                "file",
                Arc::new(
                    crate::FileStore::open(dir.path().join("f"), crate::FileLayout::Tms).unwrap(),
                ),
            ),
            (
                "journal",
                Arc::new(
                    crate::JournalStore::open(
                        dir.path().join("j"),
                        crate::JournalOptions::default(),
                    )
                    .unwrap(),
                ),
            ),
            (
                "mbtiles",
                Arc::new(
                    crate::MbtilesStore::open(
                        dir.path().join("m"),
                        crate::MbtilesOptions::default(),
                    )
                    .unwrap(),
                ),
            ),
        ];
        let at = |layer: &str, z: u8, x: u32| TileKey {
            layer: layer.into(),
            coord: TileCoord::restored(z, x, 0),
            matrix_height: 1 << z,
            matrix_width: 1 << z,
            ..key(0)
        };
        for (name, store) in &stores {
            for x in 0..3 {
                store
                    .put(&at("a.b", 2, x), tile(), Durability::Synced)
                    .unwrap();
            }
            store
                .put(
                    &at("a.b", 3, 0),
                    Bytes::from(vec![1u8; 10]),
                    Durability::Synced,
                )
                .unwrap();
            store
                .put(&at("c", 2, 1), tile(), Durability::Synced)
                .unwrap();
            store.delete(&at("a.b", 2, 2)).unwrap();
            let counted = store.count_by_zoom().unwrap().unwrap();
            let row = |layer: &str, z, tiles, bytes| ZoomUsage {
                layer: layer.into(),
                z,
                tiles,
                bytes,
            };
            assert_eq!(
                counted,
                vec![
                    row("a.b", 2, 2, 2_000),
                    row("a.b", 3, 1, 10),
                    row("c", 2, 1, 1_000)
                ],
                "{name}"
            );
            // The scan rebuilds each key, rows flipped back.
            let matrix = |grid: &str, z: u8| (grid == "g").then_some((1u32 << z, 1u32 << z));
            let mut scanned = Vec::new();
            assert!(
                store
                    .scan(&matrix, &mut |k, n| scanned.push((k, n)))
                    .unwrap()
            );
            scanned.sort_by_key(|(k, _)| (k.layer.clone(), k.coord.z(), k.coord.x()));
            assert_eq!(
                scanned,
                vec![
                    (at("a.b", 2, 0), 1_000),
                    (at("a.b", 2, 1), 1_000),
                    (at("a.b", 3, 0), 10),
                    (at("c", 2, 1), 1_000)
                ],
                "{name}"
            );
            let unknown = |_: &str, _: u8| None;
            let mut none = 0;
            store.scan(&unknown, &mut |_, _| none += 1).unwrap();
            if *name != "journal" {
                assert_eq!(none, 0, "{name}: tiles of grids not known are left out");
            }
        }
    }

    #[test]
    fn a_quota_set_on_a_store_with_tiles_indexes_them_and_evicts_them_first() {
        let dir = tempfile::tempdir().unwrap();
        let files =
            Arc::new(crate::FileStore::open(dir.path().join("f"), crate::FileLayout::Tms).unwrap());
        let at = |x: u32, y: u32| TileKey {
            coord: TileCoord::restored(3, x, y),
            matrix_height: 8,
            matrix_width: 8,
            ..key(0)
        };
        for x in 0..4 {
            files.put(&at(x, 1), tile(), Durability::Synced).unwrap();
        }
        let matrix = |grid: &str, z: u8| (grid == "g").then_some((1u32 << z, 1u32 << z));
        let options = options(dir.path(), 4_500, Eviction::Lru);
        let quota = QuotaStore::open(files.clone(), options.clone()).unwrap();
        assert!(quota.is_new());
        assert_eq!(quota.usage().tiles, 0);
        assert_eq!(quota.index_existing(&matrix).unwrap(), 4);
        assert_eq!(quota.usage().used_bytes, 4_000);
        // A new tile goes past the quota: an old one goes, not the new one,
        // and the key rebuilt from the TMS row names the right file.
        quota.put(&at(7, 7), tile(), Durability::Synced).unwrap();
        assert_eq!(quota.usage().evicted_tiles, 1);
        assert!(files.get(&at(7, 7)).unwrap().is_some());
        let left = (0..4)
            .filter(|x| files.get(&at(*x, 1)).unwrap().is_some())
            .count();
        assert_eq!(left, 3);
        drop(quota);
        // Opened again, the index is not new and holds them all.
        let quota = QuotaStore::open(files, options).unwrap();
        assert!(!quota.is_new());
        assert_eq!(quota.usage().tiles, 4);
        assert_eq!(
            quota.index_existing(&matrix).unwrap(),
            0,
            "nothing is indexed twice"
        );
    }

    #[test]
    fn a_truncated_area_is_counted_off() {
        let dir = tempfile::tempdir().unwrap();
        let inner = Arc::new(MemoryStore::new(1 << 30, None));
        let quota = open(dir.path(), 100_000, Eviction::Lru, &inner);
        for x in 0..10 {
            quota.put(&key(x), tile(), Durability::Synced).unwrap();
        }
        let area = TileArea {
            progress: Arc::default(),
            layer: "l".into(),
            grid: "g".into(),
            format: TileFormat::Png,
            ranges: vec![crate::AreaRange {
                range: tessera_grid::TileRange {
                    z: 10,
                    min_x: 0,
                    max_x: 5,
                    min_y: 0,
                    max_y: 1023,
                },
                matrix_width: 1024,
                matrix_height: 1024,
            }],
        };
        quota.truncate(&area).unwrap();
        assert_eq!(quota.usage().used_bytes, 4_000);
        assert_eq!(stored(&inner, 10), vec![6, 7, 8, 9]);
    }
}
