//! [`PackStore`]: tiles kept in packs on an object store.
//!
//! A pack holds the tiles of one aligned square block of 2^k x 2^k tiles of
//! one zoom, which is also one run of 4^k consecutive indexes on the
//! Hilbert (or Z-order) curve. Its key is computed, never listed:
//!
//! `<prefix>/<layer>/<grid>/<z>/<pack index, zero-padded>.<ext>.avro`
//!
//! where the pack index is the curve index of any of its tiles divided by
//! 4^k, padded to the width of the zoom's largest index so keys sort in
//! curve order. A missing object is an empty pack. A write into a pack that
//! already holds tiles reads it, merges and writes it back with a
//! conditional put on the version read (If-Match), retrying on conflict, so
//! two writers never lose each other's tiles; a write that fills the whole
//! block (a metatile the size of the pack) is a single unconditional PUT.
//! Packs read are held in memory (a tile is then one lookup), and reads go
//! through an optional [`DiskCache`]. Without a local cache and with
//! `range_reads_above` set, a larger pack is read by range: its header (the
//! tile index) once, then only the asked tile's bytes.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, UNIX_EPOCH};

use bytes::Bytes;
use object_store::path::Path;
use object_store::{Attributes, PutMode, PutPayload, UpdateVersion};
use tessera_grid::{Curve, TileRange, order_for};

use crate::object::{ObjectLocation, RequestSnapshot};
use crate::object_io::{ObjectIo, RangeRead};
use crate::pack::{HeaderRead, PackIndex, PackedTile, merge, read_pack, write_pack};
use crate::pack_cache::{DecodedPacks, Found, Held};
use crate::{
    AreaRange, DiskCache, Durability, StoreError, StoredTile, TileArea, TileKey, TileStore,
    TruncateReport, check_not_empty,
};

/// How a [`PackStore`] lays out and reaches its packs.
#[derive(Debug, Clone)]
pub struct PackOptions {
    /// Tiles per pack: 1, 4, 16, 64, ... (a power of four).
    pub pack_tiles: u32,
    /// The curve that orders tiles and packs.
    pub curve: Curve,
    /// Local read-through cache: directory and capacity in bytes.
    pub cache: Option<(PathBuf, u64)>,
    /// Conditional merge attempts before a write gives up (conflicts with
    /// other processes writing the same pack).
    pub merge_attempts: u32,
    /// Keys per batch delete when truncating.
    pub delete_batch: usize,
    /// Cap on the curve ranges one truncated tile range becomes (0: none).
    pub max_ranges: usize,
    /// Threads of the runtime that drives the object store client.
    pub io_threads: usize,
    /// A truncated zoom touching more packs than this finds them by
    /// listing its prefix instead of by computed keys.
    pub list_above: u64,
    /// Memory for packs held decoded, in bytes (0: none; default 64 MiB).
    pub decoded_bytes: usize,
    /// Without a local cache, packs of more tiles than this are read by
    /// range (header, then the tile) instead of whole and held (default
    /// `None`: never; on the benchmark's MinIO a ranged GET per tile cost
    /// more than one whole GET per pack, see docs/benchmarks/packs.md).
    pub range_reads_above: Option<u32>,
}

impl Default for PackOptions {
    fn default() -> PackOptions {
        PackOptions {
            pack_tiles: 16,
            curve: Curve::Hilbert,
            cache: None,
            merge_attempts: 16,
            delete_batch: 1000,
            max_ranges: 256,
            io_threads: 2,
            list_above: crate::object_tiles::LIST_ABOVE_KEYS,
            decoded_bytes: 64 << 20,
            range_reads_above: None,
        }
    }
}

const STRIPES: usize = 64;

/// Tiles in curve-indexed packs on an object store.
#[derive(Debug)]
pub struct PackStore {
    io: ObjectIo,
    /// log4 of the tiles per pack.
    level: u8,
    curve: Curve,
    cache: Option<DiskCache>,
    decoded: DecodedPacks,
    /// Whether packs are read by range (header, then the tile).
    range_reads: bool,
    /// Writers of one pack in this process take turns (conditional puts
    /// settle conflicts with other processes).
    stripes: Vec<Mutex<()>>,
    merge_attempts: u32,
    delete_batch: usize,
    max_ranges: usize,
    list_above: u64,
}

/// One pack: its key and the block of tiles it covers.
#[derive(Debug, Clone)]
struct PackRef {
    path: Path,
    /// The block, clipped to the matrix.
    block: TileRange,
}

impl PackRef {
    fn cells(&self) -> u64 {
        self.block.count()
    }
}

impl PackStore {
    /// A store over `location` (see [`crate::object::open_url`]).
    pub fn new(location: ObjectLocation, options: &PackOptions) -> Result<PackStore, StoreError> {
        let invalid = |message: String| StoreError::Invalid {
            store: "object".into(),
            message,
        };
        let tiles = options.pack_tiles;
        if tiles == 0 || !tiles.is_power_of_two() || !tiles.trailing_zeros().is_multiple_of(2) {
            return Err(invalid(format!(
                "pack_tiles must be 1, 4, 16, 64, ... (a power of four), not {tiles}"
            )));
        }
        let cache = match &options.cache {
            Some((dir, bytes)) => Some(
                DiskCache::open(dir, *bytes)
                    .map_err(|e| invalid(format!("local cache {}: {e}", dir.display())))?,
            ),
            None => None,
        };
        Ok(PackStore {
            io: ObjectIo::new(location, options.io_threads)?,
            level: (tiles.trailing_zeros() / 2) as u8,
            curve: options.curve,
            range_reads: cache.is_none() && options.range_reads_above.is_some_and(|n| tiles > n),
            cache,
            decoded: DecodedPacks::new(options.decoded_bytes),
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            merge_attempts: options.merge_attempts.max(1),
            delete_batch: options.delete_batch.max(1),
            max_ranges: options.max_ranges,
            list_above: options.list_above,
        })
    }

    /// Requests sent so far, by kind.
    pub fn requests(&self) -> RequestSnapshot {
        self.io.requests()
    }

    /// The object key of the pack holding `key`.
    pub fn pack_key(&self, key: &TileKey) -> String {
        self.locate(key).path.to_string()
    }

    /// The order of the pack curve (bits per axis) for a matrix, and `k`,
    /// the log2 of the side of a pack's block of tiles.
    fn geometry(&self, width: u32, height: u32) -> (u8, u8) {
        let order = order_for(width, height);
        let k = self.level.min(order);
        (order - k, k)
    }

    fn pack_path(
        &self,
        layer: &str,
        grid: &str,
        z: u8,
        ext: &str,
        coarse_order: u8,
        index: u64,
    ) -> Path {
        let max = (1u64 << (2 * u32::from(coarse_order))) - 1;
        let width = max.to_string().len();
        self.io
            .zoom_prefix(layer, grid, z)
            .join(format!("{index:0width$}.{ext}.avro").as_str())
    }

    fn locate(&self, key: &TileKey) -> PackRef {
        let (coarse, k) = self.geometry(key.matrix_width, key.matrix_height);
        let (bx, by) = (key.coord.x() >> k, key.coord.y() >> k);
        let index = self.curve.index(coarse, bx, by);
        self.pack_ref(
            &key.layer,
            &key.grid,
            key.coord.z(),
            key.format.extension(),
            (key.matrix_width, key.matrix_height),
            coarse,
            k,
            (bx, by),
            index,
        )
    }

    fn pack_ref(
        &self,
        layer: &str,
        grid: &str,
        z: u8,
        ext: &str,
        (width, height): (u32, u32),
        coarse: u8,
        k: u8,
        (bx, by): (u32, u32),
        index: u64,
    ) -> PackRef {
        let side = 1u32 << k;
        let (x0, y0) = (bx << k, by << k);
        PackRef {
            path: self.pack_path(layer, grid, z, ext, coarse, index),
            block: TileRange {
                z,
                min_x: x0,
                min_y: y0,
                max_x: (x0 + side - 1).min(width.saturating_sub(1)),
                max_y: (y0 + side - 1).min(height.saturating_sub(1)),
            },
        }
    }

    fn stripe(&self, path: &Path) -> std::sync::MutexGuard<'_, ()> {
        let h = xxhash_rust::xxh3::xxh3_64(path.as_ref().as_bytes()) as usize;
        self.stripes[h % STRIPES]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The pack's bytes and version, `None` when it does not exist.
    fn fetch(&self, path: &Path) -> Result<Option<(Bytes, UpdateVersion)>, StoreError> {
        Ok(self.io.fetch(path)?.map(|f| (f.bytes, f.version)))
    }

    /// The pack's bytes for reading, through the local cache, with their
    /// version when read from the object store itself.
    fn read_bytes(
        &self,
        path: &Path,
    ) -> Result<Option<(Bytes, Option<UpdateVersion>)>, StoreError> {
        match &self.cache {
            Some(cache) => Ok(cache
                .get_or_fetch(path.as_ref(), || Ok(self.fetch(path)?.map(|(b, _)| b)))?
                .map(|b| (b, None))),
            None => Ok(self.fetch(path)?.map(|(b, v)| (b, Some(v)))),
        }
    }

    /// Tile `key` of `held`, the pack at `path` (`None`: no such object);
    /// a tile the pack's index places in the object is read by range.
    fn find_tile(
        &self,
        path: &Path,
        held: Option<Arc<Held>>,
        key: &TileKey,
    ) -> Result<Option<StoredTile>, StoreError> {
        let (z, x, y) = (key.coord.z(), key.coord.x(), key.coord.y());
        let Some(held) = held else {
            return Ok(None);
        };
        let (range, created, version) =
            match held.find(z, x, y).map_err(|e| self.unreadable(path, e))? {
                Found::Tile(bytes, created) => return Ok(Some(stored_tile(bytes, created))),
                Found::Absent => return Ok(None),
                Found::At(range, created, version) => (range, created, version),
            };
        let want = range.end - range.start;
        if let RangeRead::Bytes(bytes, _) = self.io.fetch_range(path, range, version)?
            && bytes.len() as u64 == want
        {
            return Ok(Some(stored_tile(bytes, created)));
        }
        // Rewritten or deleted since its header was read: read it whole
        // (one GET is one version, however often it is rewritten).
        self.decoded.invalidate(path.as_ref());
        let generation = self.decoded.generation(path.as_ref());
        let Some((bytes, version)) = self.read_bytes(path)? else {
            return Ok(None);
        };
        let held =
            Arc::new(Held::from_bytes(bytes, version).map_err(|e| self.unreadable(path, e))?);
        let found = held.find(z, x, y).map_err(|e| self.unreadable(path, e))?;
        self.decoded.insert(path.to_string(), held, generation);
        Ok(match found {
            Found::Tile(bytes, created) => Some(stored_tile(bytes, created)),
            Found::Absent | Found::At(..) => None,
        })
    }

    /// [`PackStore::held`], once per pack within one call (also when packs
    /// are not held in memory between calls).
    fn held_once(
        &self,
        packs: &mut HashMap<String, Option<Arc<Held>>>,
        path: &Path,
    ) -> Result<Option<Arc<Held>>, StoreError> {
        if let Some(held) = packs.get(path.as_ref()) {
            return Ok(held.clone());
        }
        let held = self.held(path)?;
        packs.insert(path.to_string(), held.clone());
        Ok(held)
    }

    /// The pack at `path` as held in memory, read first when it is not
    /// (concurrent reads of one pack share one read); `None` when it does
    /// not exist.
    fn held(&self, path: &Path) -> Result<Option<Arc<Held>>, StoreError> {
        self.decoded.get_or_load(path.as_ref(), || self.load(path))
    }

    /// Reads the pack at `path` into the form held in memory; `None` when
    /// it does not exist.
    fn load(&self, path: &Path) -> Result<Option<Held>, StoreError> {
        if self.range_reads {
            let (head, version) = match self.io.fetch_range(path, 0..HEADER_GUESS, None)? {
                RangeRead::Bytes(head, version) => (head, version),
                RangeRead::Missing => return Ok(None),
                // No condition was asked: read whole below.
                RangeRead::Changed => (Bytes::new(), None),
            };
            let mut read = PackIndex::read(&head).map_err(|e| self.unreadable(path, e))?;
            if let HeaderRead::NeedAtLeast(n) = read
                && head.len() as u64 == HEADER_GUESS
            {
                // A header larger than the guess: fetch up to its end, of
                // the same version.
                read =
                    match self
                        .io
                        .fetch_range(path, 0..n as u64 + HEADER_GUESS, version.clone())?
                    {
                        RangeRead::Bytes(head, _) => {
                            PackIndex::read(&head).map_err(|e| self.unreadable(path, e))?
                        }
                        // Changed meanwhile: read whole below.
                        RangeRead::Missing | RangeRead::Changed => HeaderRead::NoIndex,
                    };
            }
            if let HeaderRead::Index(index) = read {
                return Ok(Some(Held::IndexOnly(index, version)));
            }
            // No index (or a header cut short): read whole and decode below.
        }
        let Some((bytes, version)) = self.read_bytes(path)? else {
            return Ok(None);
        };
        Held::from_bytes(bytes, version)
            .map(Some)
            .map_err(|e| self.unreadable(path, e))
    }

    /// The error for a pack that cannot be read; its local copy is dropped.
    fn unreadable(&self, path: &Path, e: crate::pack::PackError) -> StoreError {
        self.decoded.invalidate(path.as_ref());
        if let Some(c) = &self.cache {
            c.invalidate(path.as_ref());
        }
        ObjectIo::io("read", path.as_ref(), e)
    }

    /// Writes `body` under `path` with `mode`; `Ok(false)` when the
    /// condition failed (someone else wrote first).
    /// A pack written whole is then held in memory with the version
    /// written, so the next write into it merges without reading it again.
    fn put_object(&self, path: &Path, body: Vec<u8>, mode: PutMode) -> Result<bool, StoreError> {
        let body = Bytes::from(body);
        let written = self.io.put_versioned(
            path,
            PutPayload::from(body.clone()),
            mode,
            Attributes::new(),
        );
        // After the write (also a failed one): a read that began before it
        // and ends after is not kept either.
        self.decoded.invalidate(path.as_ref());
        let written = written?;
        if let Some(c) = &self.cache {
            match written {
                Some(_) => c.replace(path.as_ref(), &body),
                None => c.invalidate(path.as_ref()),
            }
        }
        if let Some(version) = written.clone() {
            let generation = self.decoded.generation(path.as_ref());
            if let Ok(held) = Held::from_bytes(body, Some(version)) {
                self.decoded
                    .insert(path.to_string(), Arc::new(held), generation);
            }
        }
        Ok(written.is_some())
    }

    /// The tiles and version of the pack as this store last read or wrote
    /// it, when held whole with a known version.
    fn held_for_merge(&self, path: &Path) -> Option<(Vec<PackedTile>, UpdateVersion)> {
        let held = self.decoded.get(path.as_ref())?;
        let Held::Whole {
            bytes,
            version: Some(version),
            ..
        } = held.as_ref()
        else {
            return None;
        };
        if version.e_tag.is_none() && version.version.is_none() {
            return None;
        }
        Some((read_pack(bytes).ok()?, version.clone()))
    }

    /// Reads the pack, applies `change` to its tiles and writes it back on
    /// the version read; retried on conflict. `change` returns `false` when
    /// nothing needs writing.
    fn update(
        &self,
        pack: &PackRef,
        mut change: impl FnMut(Vec<PackedTile>) -> Option<Vec<PackedTile>>,
    ) -> Result<(), StoreError> {
        let _turn = self.stripe(&pack.path);
        for attempt in 0..self.merge_attempts {
            // The pack as last read or written here, when its version is
            // known: a conditional write on it needs no read; a lost
            // condition reads it again below.
            let held = if attempt == 0 && self.io.conditional_put {
                self.held_for_merge(&pack.path)
            } else {
                None
            };
            let fetched = match held {
                Some((tiles, version)) => Some((tiles, version)),
                None => self.fetch(&pack.path)?.map(|(bytes, version)| {
                    let tiles = read_pack(&bytes).unwrap_or_else(|e| {
                        tracing::warn!(key = %pack.path, error = %e, "replacing an unreadable pack");
                        Vec::new()
                    });
                    (tiles, version)
                }),
            };
            let (tiles, mode) = match fetched {
                None => (Vec::new(), PutMode::Create),
                Some((tiles, version)) => (tiles, PutMode::Update(version)),
            };
            let Some(tiles) = change(tiles) else {
                return Ok(());
            };
            let mode = if self.io.conditional_put {
                mode
            } else {
                PutMode::Overwrite
            };
            let body =
                write_pack(&tiles).map_err(|e| ObjectIo::io("encode", pack.path.as_ref(), e))?;
            if self.put_object(&pack.path, body, mode)? {
                return Ok(());
            }
            // Someone else wrote the pack since it was read: back off a
            // little (more each time, spread by a per-attempt jitter) and
            // merge again on what they wrote.
            let jitter = u64::from(std::process::id() ^ attempt.wrapping_mul(2_654_435_761)) % 10;
            std::thread::sleep(Duration::from_millis((5 << attempt.min(6)) + jitter));
        }
        Err(ObjectIo::io(
            "put",
            pack.path.as_ref(),
            format!(
                "{} conditional writes lost to other writers",
                self.merge_attempts
            ),
        ))
    }

    fn write_pack_tiles(&self, pack: &PackRef, new: Vec<PackedTile>) -> Result<(), StoreError> {
        let new = merge(Vec::new(), new);
        if self.level == 0 || new.len() as u64 == pack.cells() {
            // The whole block is written: nothing to merge with.
            let _turn = self.stripe(&pack.path);
            let body =
                write_pack(&new).map_err(|e| ObjectIo::io("encode", pack.path.as_ref(), e))?;
            self.put_object(&pack.path, body, PutMode::Overwrite)?;
            return Ok(());
        }
        self.update(pack, |old| Some(merge(old, new.clone())))
    }

    /// Deletes pack objects in batches; missing ones count as deleted.
    fn delete_objects(&self, paths: &[Path]) -> Result<u64, StoreError> {
        if let Some(c) = &self.cache {
            for p in paths {
                c.invalidate(p.as_ref());
            }
        }
        let deleted = self.io.delete(paths, self.delete_batch);
        for p in paths {
            self.decoded.invalidate(p.as_ref());
        }
        deleted
    }
}

/// A packed tile as a [`StoredTile`] (its time is the record's `created`).
fn stored_tile(bytes: Bytes, created_ms: i64) -> StoredTile {
    StoredTile {
        stored_at: u64::try_from(created_ms)
            .ok()
            .filter(|ms| *ms > 0)
            .map(|ms| UNIX_EPOCH + Duration::from_millis(ms)),
        bytes,
    }
}

/// Bytes fetched first when a pack's header is read by range: enough for
/// the schema and the index of 64 tiles.
const HEADER_GUESS: u64 = 8 << 10;

fn in_ranges(ranges: &[&TileRange], x: u32, y: u32) -> bool {
    ranges
        .iter()
        .any(|r| (r.min_x..=r.max_x).contains(&x) && (r.min_y..=r.max_y).contains(&y))
}

fn overlap(a: &TileRange, b: &TileRange) -> u64 {
    let (x0, x1) = (a.min_x.max(b.min_x), a.max_x.min(b.max_x));
    let (y0, y1) = (a.min_y.max(b.min_y), a.max_y.min(b.max_y));
    if x0 > x1 || y0 > y1 {
        return 0;
    }
    u64::from(x1 - x0 + 1) * u64::from(y1 - y0 + 1)
}

impl TileStore for PackStore {
    fn name(&self) -> &'static str {
        "object"
    }

    fn get(&self, key: &TileKey) -> Result<Option<Bytes>, StoreError> {
        Ok(self.get_stored(key)?.map(|t| t.bytes))
    }

    /// The time is the record's `created` field.
    fn get_stored(&self, key: &TileKey) -> Result<Option<StoredTile>, StoreError> {
        let pack = self.locate(key);
        let held = self.held(&pack.path)?;
        self.find_tile(&pack.path, held, key)
    }

    /// Kept in the object `<prefix>/<layer>/fingerprint`, created with a
    /// create-only PUT, so that nodes sharing the bucket agree on the first
    /// claim.
    fn claim_fingerprint(&self, layer: &str, fingerprint: &str) -> Result<String, StoreError> {
        self.io.claim_fingerprint(layer, fingerprint)
    }

    /// Packs of more than one tile: a metatile's tiles in one write are one
    /// PUT per pack instead of a conditional merge per tile.
    fn prefers_batches(&self) -> bool {
        self.level > 0
    }

    /// The pack's object key, for packs of more than one tile: a metatile
    /// written alone into a pack its siblings fill later is a merge (read,
    /// write the pack so far) each time.
    fn write_group(&self, key: &TileKey) -> Option<String> {
        (self.level > 0).then(|| self.pack_key(key))
    }

    /// Drops the local cache's and memory's copies of the tile's pack.
    fn forget(&self, key: &TileKey) {
        let path = self.locate(key).path;
        self.decoded.invalidate(path.as_ref());
        if let Some(c) = &self.cache {
            c.invalidate(path.as_ref());
        }
    }

    /// Empties the local cache (its files are named by hashes of their
    /// keys, so one layer's packs cannot be told apart) and memory.
    fn forget_layer(&self, _layer: &str) {
        self.decoded.clear();
        if let Some(c) = &self.cache {
            c.clear();
        }
    }

    /// One read per pack, however many of its tiles are asked (packs read
    /// by range: the header once, then each tile asked).
    fn get_many(&self, keys: &[TileKey]) -> Result<Vec<Option<StoredTile>>, StoreError> {
        let mut packs = HashMap::new();
        keys.iter()
            .map(|k| {
                let path = self.locate(k).path;
                let held = self.held_once(&mut packs, &path)?;
                self.find_tile(&path, held, k)
            })
            .collect()
    }

    /// One read per pack (its header, when read by range), however many
    /// of its tiles are asked.
    fn all_exist(&self, keys: &[TileKey]) -> Result<bool, StoreError> {
        let mut packs = HashMap::new();
        for k in keys {
            let path = self.locate(k).path;
            let Some(held) = self.held_once(&mut packs, &path)? else {
                return Ok(false);
            };
            let found = held
                .find(k.coord.z(), k.coord.x(), k.coord.y())
                .map_err(|e| self.unreadable(&path, e))?;
            if matches!(found, Found::Absent) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn put(&self, key: &TileKey, data: Bytes, durability: Durability) -> Result<(), StoreError> {
        self.put_many(vec![(key.clone(), data)], durability)
    }

    /// Every object store acknowledges a PUT once it is durable, so both
    /// durabilities are the same here.
    fn put_many(
        &self,
        tiles: Vec<(TileKey, Bytes)>,
        _durability: Durability,
    ) -> Result<(), StoreError> {
        let mut packs: BTreeMap<String, (PackRef, Vec<PackedTile>)> = BTreeMap::new();
        for (key, data) in tiles {
            check_not_empty("object", &key, &data)?;
            let pack = self.locate(&key);
            let tile = PackedTile::new(
                key.coord.z(),
                key.coord.x(),
                key.coord.y(),
                key.format.content_type(),
                data,
            );
            packs
                .entry(pack.path.to_string())
                .or_insert_with(|| (pack, Vec::new()))
                .1
                .push(tile);
        }
        for (pack, tiles) in packs.into_values() {
            self.write_pack_tiles(&pack, tiles)?;
        }
        Ok(())
    }

    fn delete(&self, key: &TileKey) -> Result<(), StoreError> {
        let pack = self.locate(key);
        if self.level == 0 {
            self.delete_objects(&[pack.path])?;
            return Ok(());
        }
        let (x, y, z) = (key.coord.x(), key.coord.y(), key.coord.z());
        self.update(&pack, |mut tiles| {
            let before = tiles.len();
            tiles.retain(|t| !(t.z == z && t.x == x && t.y == y));
            (tiles.len() != before).then_some(tiles)
        })
    }

    /// One listing of the layer keys under the store's prefix (with a
    /// delimiter: the keys, not their objects); any grid and format.
    fn layer_keys(
        &self,
        prefix: &str,
        _grid: &str,
        _format: tessera_grid::TileFormat,
    ) -> Result<Option<Vec<String>>, StoreError> {
        self.io.layer_dirs(prefix).map(Some)
    }

    /// Packs wholly inside the area are deleted by computed key, in batches;
    /// packs on its border are rewritten without the area's tiles. Nothing
    /// is listed.
    fn truncate(&self, area: &TileArea) -> Result<TruncateReport, StoreError> {
        let mut report = TruncateReport::default();
        let mut by_zoom: BTreeMap<u8, Vec<&AreaRange>> = BTreeMap::new();
        for r in &area.ranges {
            by_zoom.entry(r.range.z).or_default().push(r);
        }
        for (z, ranges) in by_zoom {
            let (width, height) = (ranges[0].matrix_width, ranges[0].matrix_height);
            let (coarse, k) = self.geometry(width, height);
            let tile_ranges: Vec<&TileRange> = ranges.iter().map(|r| &r.range).collect();
            let blocks: u64 = tile_ranges
                .iter()
                .map(|r| {
                    u64::from((r.max_x >> k) - (r.min_x >> k) + 1)
                        * u64::from((r.max_y >> k) - (r.min_y >> k) + 1)
                })
                .sum();
            if blocks > self.list_above {
                self.truncate_listed(area, z, (width, height), &tile_ranges, &mut report)?;
                continue;
            }
            // Each pack the area touches, in key order, with the number of
            // the area's tiles it holds.
            let mut packs: Vec<(u64, PackRef)> = Vec::new();
            let mut covered: HashMap<u64, u64> = HashMap::new();
            for r in &tile_ranges {
                let blocks = TileRange {
                    z,
                    min_x: r.min_x >> k,
                    min_y: r.min_y >> k,
                    max_x: r.max_x >> k,
                    max_y: r.max_y >> k,
                };
                for span in self.curve.ranges(coarse, &blocks, self.max_ranges) {
                    for index in span {
                        if index % 4096 == 0 {
                            area.progress.check(self.name())?;
                        }
                        let (bx, by) = self.curve.coords(coarse, index);
                        if bx < blocks.min_x
                            || bx > blocks.max_x
                            || by < blocks.min_y
                            || by > blocks.max_y
                        {
                            continue; // over-fetch of a capped range
                        }
                        let pack = self.pack_ref(
                            &area.layer,
                            &area.grid,
                            z,
                            area.format.extension(),
                            (width, height),
                            coarse,
                            k,
                            (bx, by),
                            index,
                        );
                        let n = overlap(&pack.block, r);
                        if n == 0 {
                            continue;
                        }
                        let slot = covered.entry(index).or_insert(0);
                        if *slot == 0 {
                            packs.push((index, pack));
                        }
                        *slot += n;
                    }
                }
            }
            packs.sort_by_key(|(i, _)| *i);
            self.remove_packs(area, z, packs, &covered, &tile_ranges, &mut report)?;
        }
        Ok(report)
    }
}

impl PackStore {
    /// Deletes the packs wholly covered by the area (`covered`: the area's
    /// tiles each pack holds) and rewrites the others without them.
    fn remove_packs(
        &self,
        area: &TileArea,
        z: u8,
        packs: Vec<(u64, PackRef)>,
        covered: &HashMap<u64, u64>,
        tile_ranges: &[&TileRange],
        report: &mut TruncateReport,
    ) -> Result<(), StoreError> {
        let mut whole = Vec::new();
        for (index, pack) in packs {
            if covered[&index] >= pack.cells() {
                whole.push(pack.path);
            } else {
                area.progress.check(self.name())?;
                self.update(&pack, |mut tiles| {
                    let before = tiles.len();
                    tiles.retain(|t| !(t.z == z && in_ranges(tile_ranges, t.x, t.y)));
                    (tiles.len() != before).then_some(tiles)
                })?;
                report.objects_rewritten += 1;
            }
        }
        let n = self.delete_objects(&whole)?;
        report.objects_deleted += n;
        area.progress.add(n);
        Ok(())
    }

    /// Truncates zoom `z` by listing the packs stored under its prefix, a
    /// page at a time: what is stored, not what the ranges could hold.
    fn truncate_listed(
        &self,
        area: &TileArea,
        z: u8,
        (width, height): (u32, u32),
        tile_ranges: &[&TileRange],
        report: &mut TruncateReport,
    ) -> Result<(), StoreError> {
        let (coarse, k) = self.geometry(width, height);
        let zoom = self.io.zoom_prefix(&area.layer, &area.grid, z);
        let suffix = format!(".{}.avro", area.format.extension());
        self.io
            .for_each_page(&zoom, 1000, &area.progress, self.name(), |page| {
                let mut packs = Vec::new();
                let mut covered = HashMap::new();
                for key in &page {
                    let Some(index) = key
                        .filename()
                        .and_then(|f| f.strip_suffix(suffix.as_str()))
                        .and_then(|i| i.parse::<u64>().ok())
                    else {
                        continue;
                    };
                    let (bx, by) = self.curve.coords(coarse, index);
                    let pack = self.pack_ref(
                        &area.layer,
                        &area.grid,
                        z,
                        area.format.extension(),
                        (width, height),
                        coarse,
                        k,
                        (bx, by),
                        index,
                    );
                    // A key that is not where this index's pack would be (a
                    // foreign object) is left alone.
                    if pack.path != *key {
                        continue;
                    }
                    let n: u64 = tile_ranges.iter().map(|r| overlap(&pack.block, r)).sum();
                    if n > 0 {
                        covered.insert(index, n);
                        packs.push((index, pack));
                    }
                }
                self.remove_packs(area, z, packs, &covered, tile_ranges, report)
            })
    }
}
