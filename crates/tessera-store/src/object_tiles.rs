//! [`TileObjectStore`]: one object per tile on an object store, at the
//! plain address web maps use, `<prefix>/<layer>/<grid>/<z>/<x>/<y>.<ext>`
//! (rows from the top), each with its Content-Type, Content-Encoding
//! (gzip-packed vector tiles) and Cache-Control, so that the bucket or a CDN
//! in front of it can serve the tiles directly.
//!
//! Costs one request per tile where packs cost one per pack; take it when
//! the bucket itself is to be served.

use bytes::Bytes;
use object_store::path::Path;
use object_store::{Attribute, Attributes, PutPayload};
use tessera_grid::{TileCoord, TileFormat, TileRange};

use crate::object::{ObjectLocation, RequestSnapshot};
use crate::object_io::ObjectIo;
use crate::{
    AreaRange, Durability, StoreError, StoredTile, TileArea, TileKey, TileStore, TruncateReport,
    check_not_empty,
};

/// By default, a truncated range of more keys than this is found by
/// listing its zoom instead of by computed keys (`truncate_list_above`).
pub const LIST_ABOVE_KEYS: u64 = 1 << 16;

/// Cache-Control written on every tile unless configured.
pub const DEFAULT_CACHE_CONTROL: &str = "public, max-age=86400";

/// PUTs of one metatile's tiles in flight at once.
const PUTS_IN_FLIGHT: usize = 16;

/// Tiles as single objects at `z/x/y.ext` on an object store.
#[derive(Debug)]
pub struct TileObjectStore {
    io: ObjectIo,
    cache_control: String,
    delete_batch: usize,
    list_above: u64,
}

impl TileObjectStore {
    /// A store over `location` (see [`crate::object::open_url`]) writing
    /// `cache_control` on each tile, with `io_threads` I/O threads.
    pub fn new(
        location: ObjectLocation,
        cache_control: &str,
        io_threads: usize,
    ) -> Result<TileObjectStore, StoreError> {
        Ok(TileObjectStore {
            io: ObjectIo::new(location, io_threads)?,
            cache_control: cache_control.to_string(),
            delete_batch: 1000,
            list_above: LIST_ABOVE_KEYS,
        })
    }

    /// Truncates ranges of more than `keys` keys by listing their zoom
    /// (default [`LIST_ABOVE_KEYS`]).
    #[must_use]
    pub fn listing_truncates_above(mut self, keys: u64) -> TileObjectStore {
        self.list_above = keys;
        self
    }

    /// Requests sent so far, by kind.
    pub fn requests(&self) -> RequestSnapshot {
        self.io.requests()
    }

    fn path(&self, layer: &str, grid: &str, z: u8, x: u32, y: u32, format: TileFormat) -> Path {
        self.io
            .zoom_prefix(layer, grid, z)
            .join(x.to_string().as_str())
            .join(format!("{y}.{}", format.extension()).as_str())
    }

    /// Deletes the stored tiles of `range` found by listing the keys
    /// under its zoom (`prefix/layer/grid/z/`), a page at a time; returns
    /// how many were deleted.
    fn truncate_listed(&self, area: &TileArea, range: &TileRange) -> Result<u64, StoreError> {
        let zoom = self.io.zoom_prefix(&area.layer, &area.grid, range.z);
        let ext = format!(".{}", area.format.extension());
        let mut deleted = 0;
        self.io.for_each_page(
            &zoom,
            self.delete_batch,
            &area.progress,
            self.name(),
            |page| {
                let doomed: Vec<Path> = page
                    .into_iter()
                    .filter(|key| {
                        let parts: Vec<_> = key.parts().collect();
                        let [.., x, y] = parts.as_slice() else {
                            return false;
                        };
                        let x = x.as_ref().parse::<u32>().ok();
                        let y = y
                            .as_ref()
                            .strip_suffix(ext.as_str())
                            .and_then(|y| y.parse::<u32>().ok());
                        matches!((x, y), (Some(x), Some(y))
                            if (range.min_x..=range.max_x).contains(&x)
                                && (range.min_y..=range.max_y).contains(&y))
                    })
                    .collect();
                let n = self.io.delete(&doomed, self.delete_batch)?;
                deleted += n;
                area.progress.add(n);
                Ok(())
            },
        )?;
        Ok(deleted)
    }

    /// The object key of a tile.
    pub fn tile_key(&self, key: &TileKey) -> String {
        self.key_path(key).to_string()
    }

    fn key_path(&self, key: &TileKey) -> Path {
        let c = key.coord;
        self.path(&key.layer, &key.grid, c.z(), c.x(), c.y(), key.format)
    }

    /// The HTTP attributes of a tile of `format` (none on the local file
    /// system, which cannot keep them).
    fn attributes(&self, format: TileFormat) -> Attributes {
        let mut a = Attributes::new();
        if !self.io.conditional_put {
            return a;
        }
        a.insert(Attribute::ContentType, format.content_type().into());
        a.insert(Attribute::CacheControl, self.cache_control.clone().into());
        if format.is_vector() {
            a.insert(Attribute::ContentEncoding, "gzip".into());
        }
        a
    }
}

impl TileStore for TileObjectStore {
    fn name(&self) -> &'static str {
        "object"
    }

    fn get(&self, key: &TileKey) -> Result<Option<Bytes>, StoreError> {
        Ok(self.get_stored(key)?.map(|t| t.bytes))
    }

    /// The time is the object's Last-Modified.
    fn get_stored(&self, key: &TileKey) -> Result<Option<StoredTile>, StoreError> {
        Ok(self.io.fetch(&self.key_path(key))?.map(|f| StoredTile {
            bytes: f.bytes,
            stored_at: Some(f.modified),
        }))
    }

    fn claim_fingerprint(&self, layer: &str, fingerprint: &str) -> Result<String, StoreError> {
        self.io.claim_fingerprint(layer, fingerprint)
    }

    fn put(&self, key: &TileKey, data: Bytes, durability: Durability) -> Result<(), StoreError> {
        self.put_many(vec![(key.clone(), data)], durability)
    }

    /// The tiles are written concurrently; every object store acknowledges
    /// a PUT once it is durable, so both durabilities are the same here.
    fn put_many(
        &self,
        tiles: Vec<(TileKey, Bytes)>,
        _durability: Durability,
    ) -> Result<(), StoreError> {
        let mut writes = Vec::with_capacity(tiles.len());
        for (key, data) in tiles {
            check_not_empty("object", &key, &data)?;
            writes.push((
                self.key_path(&key),
                PutPayload::from(data),
                self.attributes(key.format),
            ));
        }
        self.io.put_all(writes, PUTS_IN_FLIGHT)
    }

    fn delete(&self, key: &TileKey) -> Result<(), StoreError> {
        self.io.delete(&[self.key_path(key)], 1).map(|_| ())
    }

    /// One listing of the layer keys under the store's prefix (with a
    /// delimiter: the keys, not their objects); any grid and format.
    fn layer_keys(
        &self,
        prefix: &str,
        _grid: &str,
        _format: TileFormat,
    ) -> Result<Option<Vec<String>>, StoreError> {
        self.io.layer_dirs(prefix).map(Some)
    }

    /// Deletes the area's tiles by computed key, in batches; a range of
    /// more keys than `truncate_list_above` (a whole zoom of a deep grid) is
    /// instead found by listing its zoom's prefix, page by page, so that
    /// it costs what is stored there, not what the range could hold.
    fn truncate(&self, area: &TileArea) -> Result<TruncateReport, StoreError> {
        let mut report = TruncateReport::default();
        let mut batch = Vec::with_capacity(self.delete_batch);
        for AreaRange { range, .. } in &area.ranges {
            if range.count() > self.list_above {
                let n = self.truncate_listed(area, range)?;
                report.objects_deleted += n;
                continue;
            }
            for y in range.min_y..=range.max_y {
                for x in range.min_x..=range.max_x {
                    let c = TileCoord::restored(range.z, x, y);
                    batch.push(self.path(
                        &area.layer,
                        &area.grid,
                        c.z(),
                        c.x(),
                        c.y(),
                        area.format,
                    ));
                    if batch.len() == self.delete_batch {
                        area.progress.check(self.name())?;
                        let n = self.io.delete(&batch, self.delete_batch)?;
                        report.objects_deleted += n;
                        area.progress.add(n);
                        batch.clear();
                    }
                }
            }
        }
        report.objects_deleted += self.io.delete(&batch, self.delete_batch)?;
        Ok(report)
    }
}
