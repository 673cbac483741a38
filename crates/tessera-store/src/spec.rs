//! Store configuration: one deserializable spec per backend, each with its
//! own defaults, `validate()` and `open()`, so that a new backend brings its
//! options with it and the server's configuration only names the variant.
//!
//! Sizes are [`Size`]s written with units (`64MiB`, `1GiB`, `512KiB`); a
//! bare number is MiB, so the older `*_mb` keys, still accepted as another
//! name of the same key, mean what they always meant.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytesize::ByteSize;
use serde::{Deserialize, Deserializer};
use tessera_grid::Curve;

use crate::object::{ObjectLocation, open_url};
use crate::quota::{Eviction, QuotaOptions};
use crate::{
    DEFAULT_CACHE_CONTROL, FileLayout, FileStore, JournalOptions, JournalStore, MbtilesOptions,
    MbtilesStore, MemoryStore, PackOptions, PackStore, StoreError, Synchronous, TileObjectStore,
    TileStore,
};

/// One store under `stores:`, tagged by `type`.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum StoreSpec {
    /// Tiles as files in `path/layer/grid/z/x/y.ext`.
    File(FileSpec),
    /// Tiles as records of an append-only journal in `path` (one fsync per
    /// batch of writes instead of one per tile).
    Journal(JournalSpec),
    /// Tiles in MBTiles 1.3 files under `path`, one per layer, grid and
    /// format (`layer.grid.ext.mbtiles`).
    Mbtiles(MbtilesSpec),
    /// Tiles in packs on an object store: the tiles of one aligned block of
    /// the Hilbert (or Z-order) curve in one object with a computed key,
    /// `prefix/layer/grid/z/index.ext.avro` (see docs/pack-format.md).
    Object(ObjectSpec),
    /// Tiles in memory only, least recently used evicted; lost on restart.
    Memory(MemorySpec),
}

/// The file a quota's index is kept in, in the store's directory, unless
/// `quota_index` names another.
pub const QUOTA_INDEX: &str = ".quota.sqlite";

/// `type: file`.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileSpec {
    /// Root directory (created if missing).
    pub path: PathBuf,
    /// Row order of the tree (`xyz`, default, or `tms`).
    #[serde(default)]
    pub layout: FileLayout,
    /// In-memory LRU in front of the files (default 64MiB; 0 = none).
    #[serde(default, alias = "memory_mb")]
    pub memory: Option<Size>,
    /// Content hashes of files kept so that a hit on an unchanged file is
    /// sent without reading it (default [`crate::DEFAULT_HASH_CACHE`]
    /// entries, 80 bytes each; 0 = every hit is read).
    #[serde(default)]
    pub hash_cache: Option<usize>,
    /// Open files of the tiles hit lately kept for the next hits, as
    /// nginx's `open_file_cache` (default [`crate::DEFAULT_OPEN_FILES`],
    /// one descriptor each; 0 = every hit opens its file). A tile
    /// replaced, deleted or rewritten is seen at the next hit.
    #[serde(default)]
    pub open_files: Option<usize>,
    /// Seconds a kept file is used before its path is opened again, which
    /// is when a directory moved away by hand is seen (default 10).
    #[serde(default)]
    pub open_files_valid_secs: Option<u64>,
    /// Most bytes of tiles kept (a disk quota, enforced by evicting as
    /// `eviction` says; default: no quota).
    #[serde(default)]
    pub max_size: Option<Size>,
    /// Which tiles a quota evicts first: `lru` (default), `lfu` or `oldest`.
    #[serde(default)]
    pub eviction: Eviction,
    /// The quota's index file (default `.quota.sqlite` in `path`).
    #[serde(default)]
    pub quota_index: Option<PathBuf>,
    /// One hit in this many is recorded for the quota's order (default 4;
    /// 1 records every hit).
    #[serde(default)]
    pub quota_sample: Option<u32>,
}

/// Most content hashes a file store keeps (1.25 GiB of table).
const MAX_HASH_CACHE: usize = 1 << 24;

/// `type: journal`.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JournalSpec {
    /// Directory of the segment files (created if missing).
    pub path: PathBuf,
    /// Segment file size (default 64MiB).
    #[serde(default, alias = "segment_mb")]
    pub segment: Option<Size>,
    /// Adaptive wait before a sync for more writes to share it, in
    /// milliseconds (default 0: off).
    #[serde(default)]
    pub sync_window_ms: u64,
    /// The latency synced writes aim for, in milliseconds (default 5): the
    /// sync window never waits past it.
    #[serde(default)]
    pub max_latency_ms: Option<u64>,
    /// In-memory LRU in front (default 64MiB; 0 = none).
    #[serde(default, alias = "memory_mb")]
    pub memory: Option<Size>,
    /// Most bytes of tiles kept (a disk quota, enforced by evicting as
    /// `eviction` says; default: no quota).
    #[serde(default)]
    pub max_size: Option<Size>,
    /// Which tiles a quota evicts first: `lru` (default), `lfu` or `oldest`.
    #[serde(default)]
    pub eviction: Eviction,
    /// The quota's index file (default `.quota.sqlite` in `path`).
    #[serde(default)]
    pub quota_index: Option<PathBuf>,
    /// One hit in this many is recorded for the quota's order (default 4;
    /// 1 records every hit).
    #[serde(default)]
    pub quota_sample: Option<u32>,
}

/// `type: mbtiles`.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MbtilesSpec {
    /// Directory of the files (created if missing).
    pub path: PathBuf,
    /// SQLite `synchronous` for ordinary writes: `off`, `normal` (default)
    /// or `full`; synced writes always use `full`.
    #[serde(default)]
    pub synchronous: Synchronous,
    /// In-memory LRU in front (default 64MiB; 0 = none).
    #[serde(default, alias = "memory_mb")]
    pub memory: Option<Size>,
    /// Most bytes of tiles kept (a disk quota, enforced by evicting as
    /// `eviction` says; default: no quota).
    #[serde(default)]
    pub max_size: Option<Size>,
    /// Which tiles a quota evicts first: `lru` (default), `lfu` or `oldest`.
    #[serde(default)]
    pub eviction: Eviction,
    /// The quota's index file (default `.quota.sqlite` in `path`).
    #[serde(default)]
    pub quota_index: Option<PathBuf>,
    /// One hit in this many is recorded for the quota's order (default 4;
    /// 1 records every hit).
    #[serde(default)]
    pub quota_sample: Option<u32>,
}

/// `type: object`.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ObjectSpec {
    /// `s3://bucket/prefix`, `gs://bucket/prefix`, `az://container/prefix`
    /// or `file:///directory`.
    pub url: String,
    /// Client options with `object_store`'s keys (`endpoint`, `region`,
    /// `access_key_id`, `secret_access_key`, `allow_http`, `timeout`, ...);
    /// otherwise credentials come from the usual `AWS_*`, `GOOGLE_*` and
    /// `AZURE_*` environment variables.
    #[serde(default)]
    pub options: BTreeMap<String, OptionValue>,
    /// How tiles are laid out: `packs` (default: curve-indexed packs) or
    /// `xyz` (one object per tile at `prefix/layer/grid/z/x/y.ext` with
    /// Content-Type and Cache-Control, for a bucket or CDN to serve).
    #[serde(default)]
    pub layout: ObjectLayout,
    /// Cache-Control written on each tile object with `layout: xyz`
    /// (default `public, max-age=86400`).
    #[serde(default)]
    pub cache_control: Option<String>,
    /// Tiles per pack: 1, 4, 16 (default), 64, ...
    #[serde(default = "default_pack_tiles")]
    pub pack_tiles: u32,
    /// Curve ordering tiles and packs: `hilbert` (default) or `zorder`.
    #[serde(default = "default_curve")]
    pub curve: Curve,
    /// Directory of the local read-through cache of packs (default: none).
    #[serde(default)]
    pub cache_path: Option<PathBuf>,
    /// Budget of the local cache (default 1GiB).
    #[serde(default, alias = "cache_mb")]
    pub cache: Option<Size>,
    /// In-memory LRU of tiles in front (default 64MiB; 0 = none).
    #[serde(default, alias = "memory_mb")]
    pub memory: Option<Size>,
    /// A truncated range of more keys (`layout: xyz`) or packs than this
    /// is found by listing its zoom's prefix instead of by computed keys
    /// (default 65,536: a listing page and a batch delete both take 1,000
    /// keys, so listing costs less once a range holds more keys than the
    /// zoom holds objects).
    #[serde(default = "default_truncate_list_above")]
    pub truncate_list_above: u64,
    /// Memory for packs held decoded, so that a tile of a pack read lately
    /// is one lookup (default 64MiB; 0 = none).
    #[serde(default)]
    pub decoded: Option<Size>,
    /// Without `cache_path`, packs of more tiles than this are read by
    /// range: their header's tile index once, then each tile's bytes
    /// (default: never; packs are read whole and held).
    #[serde(default)]
    pub range_reads_above: Option<u32>,
}

fn default_truncate_list_above() -> u64 {
    crate::object_tiles::LIST_ABOVE_KEYS
}

impl ObjectSpec {
    /// Opens a client for the store's URL; `name` is the store's name in
    /// the configuration, for the error.
    pub fn location(&self, name: &str) -> Result<ObjectLocation, StoreError> {
        open_url(&self.url, &option_strings(&self.options)).map_err(|e| StoreError::Client {
            store: name.to_string(),
            url: self.url.clone(),
            source: Box::new(e),
        })
    }
}

/// How an object store lays out its tiles.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ObjectLayout {
    /// Curve-indexed packs (docs/pack-format.md).
    #[default]
    Packs,
    /// One object per tile, `z/x/y.ext`.
    Xyz,
}

/// `type: memory`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemorySpec {
    /// Budget (default 256MiB).
    #[serde(default, alias = "memory_mb")]
    pub memory: Option<Size>,
}

/// A scalar client option (YAML may give `allow_http: true` or
/// `timeout: 30s`).
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(untagged)]
pub enum OptionValue {
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A number.
    Float(f64),
    /// Text.
    Text(String),
}

impl std::fmt::Display for OptionValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OptionValue::Bool(b) => write!(f, "{b}"),
            OptionValue::Int(i) => write!(f, "{i}"),
            OptionValue::Float(x) => write!(f, "{x}"),
            OptionValue::Text(t) => f.write_str(t),
        }
    }
}

/// Client options as the text `object::open_url` takes.
pub fn option_strings(options: &BTreeMap<String, OptionValue>) -> BTreeMap<String, String> {
    options
        .iter()
        .map(|(k, v)| (k.clone(), v.to_string()))
        .collect()
}

fn default_pack_tiles() -> u32 {
    16
}

fn default_curve() -> Curve {
    Curve::Hilbert
}

const MIB: u64 = 1 << 20;
/// In-memory LRU in front of a persistent store, unless configured.
const DEFAULT_FRONT: u64 = 64 * MIB;
/// Budget of a memory-only store, unless configured.
const DEFAULT_MEMORY: u64 = 256 * MIB;
/// Journal segment size, unless configured.
const DEFAULT_SEGMENT: u64 = 64 * MIB;
/// Local pack cache budget, unless configured.
const DEFAULT_PACK_CACHE: u64 = 1024 * MIB;

/// A size in bytes: text with units (`64MiB`, `1GiB`, `512KiB`, `10MB`),
/// or a bare number of MiB (what the older `*_mb` keys held).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size(pub u64);

impl Size {
    /// `size`, or `default` bytes when it is not given.
    pub fn or(size: Option<Size>, default: u64) -> u64 {
        size.map_or(default, |s| s.0)
    }
}

impl schemars::JsonSchema for Size {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Size".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A size in bytes: text with units (64MiB, 1GiB, 512KiB, 10MB), or a bare number of MiB.",
            "anyOf": [
                { "type": "integer", "minimum": 0 },
                { "type": "string", "examples": ["64MiB", "1GiB"] }
            ]
        })
    }
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Size, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            Mib(u64),
            Text(String),
        }
        match Written::deserialize(deserializer)? {
            Written::Mib(n) => Ok(Size(n.saturating_mul(MIB))),
            Written::Text(t) if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) => t
                .parse::<u64>()
                .map(|n| Size(n.saturating_mul(MIB)))
                .map_err(serde::de::Error::custom),
            Written::Text(t) => t.trim().parse::<ByteSize>().map(|b| Size(b.as_u64())).map_err(|e| {
                serde::de::Error::custom(format!(
                    "{t:?} is not a size ({e}); write a number with a unit such as 64MiB or 1GiB"
                ))
            }),
        }
    }
}

impl StoreSpec {
    /// The backend's short name (`file`, `journal`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            StoreSpec::File(_) => "file",
            StoreSpec::Journal(_) => "journal",
            StoreSpec::Mbtiles(_) => "mbtiles",
            StoreSpec::Object(_) => "object",
            StoreSpec::Memory(_) => "memory",
        }
    }

    /// Checks the values that do not need the store to be opened; the
    /// message says what to change.
    pub fn validate(&self) -> Result<(), String> {
        if self.quota().is_some_and(|q| q.max_bytes == 0) {
            return Err("max_size must be more than 0 (leave it out for no quota)".into());
        }
        match self {
            StoreSpec::File(f) => match (f.hash_cache, f.open_files) {
                (Some(n), _) if n > MAX_HASH_CACHE => Err(format!(
                    "hash_cache must be at most {MAX_HASH_CACHE} entries (80 bytes each), not {n}"
                )),
                (_, Some(n)) if n > crate::MAX_OPEN_FILES => Err(format!(
                    "open_files must be at most {} (one file descriptor each), not {n}",
                    crate::MAX_OPEN_FILES
                )),
                _ => Ok(()),
            },
            StoreSpec::Mbtiles(_) | StoreSpec::Memory(_) => Ok(()),
            StoreSpec::Journal(j) => {
                let segment = Size::or(j.segment, DEFAULT_SEGMENT);
                if !(64 * 1024..=u64::from(u32::MAX)).contains(&segment) {
                    return Err("segment must be between 64KiB and 4GiB".into());
                }
                Ok(())
            }
            StoreSpec::Object(o) => {
                if o.layout == ObjectLayout::Xyz && o.cache_path.is_some() {
                    return Err("cache_path (a local cache of packs) does not apply to layout: xyz; remove it".into());
                }
                if let Some(cc) = &o.cache_control
                    && (cc.is_empty() || cc.chars().any(char::is_control))
                {
                    return Err(format!("cache_control {cc:?} is not a header value"));
                }
                let tiles = o.pack_tiles;
                if tiles == 0
                    || !tiles.is_power_of_two()
                    || !tiles.trailing_zeros().is_multiple_of(2)
                {
                    return Err(format!(
                        "pack_tiles must be 1, 4, 16, 64, ... (a power of four), not {tiles}"
                    ));
                }
                Ok(())
            }
        }
    }

    /// Bytes of the in-memory LRU to put in front of the opened store
    /// (0: none; always 0 for a memory store, which is one).
    pub fn front_bytes(&self) -> u64 {
        let memory = match self {
            StoreSpec::File(s) => s.memory,
            StoreSpec::Journal(s) => s.memory,
            StoreSpec::Mbtiles(s) => s.memory,
            StoreSpec::Object(s) => s.memory,
            StoreSpec::Memory(_) => return 0,
        };
        Size::or(memory, DEFAULT_FRONT)
    }

    /// The disk quota in front of the opened store, when `max_size` is
    /// set (file, journal and MBTiles stores).
    pub fn quota(&self) -> Option<QuotaOptions> {
        self.quota_with(Vec::new())
    }

    /// The disk quota in front of the opened store, with the quotas of
    /// single layers in it (`layers`: layer key, bytes): `None` when the
    /// store has no `max_size` and no layer a quota, or when the store is
    /// not a file, journal or MBTiles store.
    pub fn quota_with(&self, layers: Vec<(String, u64)>) -> Option<QuotaOptions> {
        let (max, eviction, index, path, sample) = match self {
            StoreSpec::File(s) => (
                s.max_size,
                s.eviction,
                &s.quota_index,
                &s.path,
                s.quota_sample,
            ),
            StoreSpec::Journal(s) => (
                s.max_size,
                s.eviction,
                &s.quota_index,
                &s.path,
                s.quota_sample,
            ),
            StoreSpec::Mbtiles(s) => (
                s.max_size,
                s.eviction,
                &s.quota_index,
                &s.path,
                s.quota_sample,
            ),
            StoreSpec::Object(_) | StoreSpec::Memory(_) => return None,
        };
        if max.is_none() && layers.is_empty() {
            return None;
        }
        let index = index.clone().unwrap_or_else(|| path.join(QUOTA_INDEX));
        let mut options = QuotaOptions::new(
            max.map_or(u64::MAX, |m| Size::or(Some(m), 0)),
            eviction,
            index,
        );
        options.layers = layers;
        if let Some(n) = sample {
            options.sample = n.max(1);
        }
        Some(options)
    }

    /// Resolves relative local paths against `base` (the directory of the
    /// configuration file).
    pub fn resolve_paths(&mut self, base: &Path) {
        let index = match self {
            StoreSpec::File(s) => s.quota_index.as_mut(),
            StoreSpec::Journal(s) => s.quota_index.as_mut(),
            StoreSpec::Mbtiles(s) => s.quota_index.as_mut(),
            StoreSpec::Object(_) | StoreSpec::Memory(_) => None,
        };
        if let Some(index) = index
            && index.is_relative()
        {
            *index = base.join(&*index);
        }
        let path = match self {
            StoreSpec::File(s) => &mut s.path,
            StoreSpec::Journal(s) => &mut s.path,
            StoreSpec::Mbtiles(s) => &mut s.path,
            StoreSpec::Object(s) => match &mut s.cache_path {
                Some(p) => p,
                None => return,
            },
            StoreSpec::Memory(_) => return,
        };
        if path.is_relative() {
            *path = base.join(&*path);
        }
    }

    /// Opens the backend (without the in-memory LRU of
    /// [`StoreSpec::front_bytes`], which the caller adds so that it can
    /// time both layers). `name` is the store's name in the configuration.
    pub fn open(&self, name: &str) -> Result<Arc<dyn TileStore>, StoreError> {
        let invalid = |message: String| StoreError::Invalid {
            store: name.to_string(),
            message,
        };
        self.validate().map_err(invalid)?;
        Ok(match self {
            StoreSpec::File(s) => {
                let store = FileStore::open(&s.path, s.layout)?;
                let store = match s.hash_cache {
                    Some(entries) => store.with_hash_cache(entries),
                    None => store,
                };
                Arc::new(
                    store.with_open_files(
                        s.open_files.unwrap_or(crate::DEFAULT_OPEN_FILES),
                        s.open_files_valid_secs
                            .map_or(crate::DEFAULT_OPEN_FILES_VALID, Duration::from_secs),
                    ),
                )
            }
            StoreSpec::Journal(s) => {
                let options = JournalOptions {
                    segment_size: Size::or(s.segment, DEFAULT_SEGMENT),
                    sync_window: (s.sync_window_ms > 0)
                        .then(|| Duration::from_millis(s.sync_window_ms)),
                    max_latency: s
                        .max_latency_ms
                        .map_or(JournalOptions::default().max_latency, Duration::from_millis),
                    ..JournalOptions::default()
                };
                Arc::new(JournalStore::open(&s.path, options)?)
            }
            StoreSpec::Mbtiles(s) => {
                let options = MbtilesOptions {
                    synchronous: s.synchronous,
                    ..MbtilesOptions::default()
                };
                Arc::new(MbtilesStore::open(&s.path, options)?)
            }
            StoreSpec::Object(s) => {
                let location = s.location(name)?;
                if s.layout == ObjectLayout::Xyz {
                    let cc = s.cache_control.as_deref().unwrap_or(DEFAULT_CACHE_CONTROL);
                    return Ok(Arc::new(
                        TileObjectStore::new(location, cc, 2)?
                            .listing_truncates_above(s.truncate_list_above),
                    ));
                }
                let cache_bytes = Size::or(s.cache, DEFAULT_PACK_CACHE);
                let packs = PackOptions {
                    pack_tiles: s.pack_tiles,
                    curve: s.curve,
                    cache: s.cache_path.as_ref().map(|p| (p.clone(), cache_bytes)),
                    list_above: s.truncate_list_above,
                    decoded_bytes: usize::try_from(Size::or(s.decoded, 64 << 20))
                        .unwrap_or(usize::MAX),
                    range_reads_above: s.range_reads_above,
                    ..PackOptions::default()
                };
                Arc::new(PackStore::new(location, &packs)?)
            }
            StoreSpec::Memory(s) => {
                let bytes = Size::or(s.memory, DEFAULT_MEMORY);
                Arc::new(MemoryStore::new(
                    usize::try_from(bytes).unwrap_or(usize::MAX),
                    None,
                ))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: serde_json::Value) -> StoreSpec {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn journal_latency_and_pack_memory_settings_are_read_with_their_defaults() {
        let StoreSpec::Journal(j) = spec(serde_json::json!({
            "type": "journal", "path": "/j", "max_latency_ms": 12
        })) else {
            panic!()
        };
        assert_eq!(j.max_latency_ms, Some(12));
        let StoreSpec::Journal(j) = spec(serde_json::json!({"type": "journal", "path": "/j"}))
        else {
            panic!()
        };
        assert_eq!(j.max_latency_ms, None);
        let StoreSpec::Object(o) = spec(serde_json::json!({
            "type": "object", "url": "file:///o", "decoded": "8MiB", "range_reads_above": 16
        })) else {
            panic!()
        };
        assert_eq!(Size::or(o.decoded, 0), 8 << 20);
        assert_eq!(o.range_reads_above, Some(16));
        let StoreSpec::Object(o) = spec(serde_json::json!({"type": "object", "url": "file:///o"}))
        else {
            panic!()
        };
        assert_eq!((o.decoded, o.range_reads_above), (None, None));
    }

    #[test]
    fn sizes_with_units_and_the_older_mib_keys_mean_the_same() {
        let units = spec(serde_json::json!({"type": "file", "path": "/c", "memory": "64MiB"}));
        let mib = spec(serde_json::json!({"type": "file", "path": "/c", "memory_mb": 64}));
        let bare = spec(serde_json::json!({"type": "file", "path": "/c", "memory": 64}));
        let default = spec(serde_json::json!({"type": "file", "path": "/c"}));
        for s in [&units, &mib, &bare, &default] {
            assert_eq!(s.front_bytes(), 64 << 20, "{s:?}");
        }
        let StoreSpec::Memory(m) = spec(serde_json::json!({"type": "memory", "memory": "1GiB"}))
        else {
            panic!()
        };
        assert_eq!(Size::or(m.memory, 0), 1 << 30);
        let both = serde_json::from_value::<StoreSpec>(
            serde_json::json!({"type": "file", "path": "/c", "memory": "1MiB", "memory_mb": 1}),
        )
        .unwrap_err();
        assert!(both.to_string().contains("duplicate field"), "{both}");
        let bad = serde_json::from_value::<StoreSpec>(
            serde_json::json!({"type": "file", "path": "/c", "memory": "lots"}),
        )
        .unwrap_err();
        assert!(bad.to_string().contains("64MiB"), "{bad}");
    }

    #[test]
    fn unknown_keys_and_bad_values_are_named() {
        let err = serde_json::from_value::<StoreSpec>(
            serde_json::json!({"type": "file", "path": "/c", "colour": "red"}),
        )
        .unwrap_err();
        assert!(err.to_string().contains("colour"), "{err}");
        let odd = spec(serde_json::json!({"type": "object", "url": "file:///x", "pack_tiles": 8}));
        assert!(odd.validate().unwrap_err().contains("power of four"));
        let small = spec(serde_json::json!({"type": "journal", "path": "/j", "segment": "4KiB"}));
        assert!(small.validate().unwrap_err().contains("64KiB"));
        let huge =
            spec(serde_json::json!({"type": "file", "path": "/c", "hash_cache": 1u64 << 40}));
        assert!(huge.validate().unwrap_err().contains("hash_cache"));
        let many =
            spec(serde_json::json!({"type": "file", "path": "/c", "open_files": 1u64 << 20}));
        assert!(many.validate().unwrap_err().contains("open_files"));
        let negative = serde_json::from_value::<StoreSpec>(
            serde_json::json!({"type": "file", "path": "/c", "hash_cache": -1}),
        )
        .unwrap_err();
        assert!(negative.to_string().contains("-1"), "{negative}");
    }

    #[test]
    fn a_file_store_without_a_hash_cache_always_reads_its_hits() {
        let dir = tempfile::tempdir().unwrap();
        let off = spec(serde_json::json!({"type": "file", "path": dir.path(), "hash_cache": 0}));
        let store = off.open("disk").unwrap();
        let k = crate::conformance::key("relief", 2, 1, 1, tessera_grid::TileFormat::Png);
        store
            .put(
                &k,
                bytes::Bytes::from_static(b"tile"),
                crate::Durability::Buffered,
            )
            .unwrap();
        for _ in 0..3 {
            assert!(matches!(store.peek_file(&k), Some(crate::Peeked::Held(_))));
        }
        let on = spec(serde_json::json!({"type": "file", "path": dir.path(), "hash_cache": 16}));
        let store = on.open("disk").unwrap();
        assert!(matches!(store.peek_file(&k), Some(crate::Peeked::Held(_))));
        assert!(matches!(store.peek_file(&k), Some(crate::Peeked::File(_))));
    }

    #[test]
    fn relative_paths_resolve_against_the_base() {
        let mut s = spec(serde_json::json!({"type": "mbtiles", "path": "cache/tiles"}));
        s.resolve_paths(Path::new("/etc/tessera"));
        let StoreSpec::Mbtiles(m) = s else { panic!() };
        assert_eq!(m.path, Path::new("/etc/tessera/cache/tiles"));
        let mut s = spec(serde_json::json!({"type": "file", "path": "/abs"}));
        s.resolve_paths(Path::new("/etc/tessera"));
        let StoreSpec::File(f) = s else { panic!() };
        assert_eq!(f.path, Path::new("/abs"));
    }

    #[test]
    fn only_a_memory_store_without_a_backing_store_is_volatile() {
        let m = spec(serde_json::json!({"type": "memory", "memory": "1MiB"}))
            .open("m")
            .unwrap();
        assert!(m.is_volatile());
        let dir = tempfile::tempdir().unwrap();
        let f = spec(serde_json::json!({"type": "file", "path": dir.path()}))
            .open("f")
            .unwrap();
        assert!(!f.is_volatile());
        let front = MemoryStore::new(1 << 20, Some(f));
        assert!(!front.is_volatile());
    }
}
