//! The configuration file: typed sections, `${ENV}` substitution, unknown
//! keys named in the error.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use tessera_grid::{Curve, GridSpec};
use tessera_image::{EncodeOptions, Format, StyleSpec};
use tessera_source::{GdalSettings, GdalSourceSpec};
use tessera_store::{Durability, FileLayout, Synchronous};

/// Errors that stop start-up, each saying what to change.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config {path}: {source}")]
    Read {
        /// Path of the file.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// `${NAME}` is used but the variable is not set and has no default.
    #[error(
        "config uses ${{{name}}} but the environment variable {name} is not set (write ${{{name}:-default}} to give a default)"
    )]
    MissingEnv {
        /// Variable name.
        name: String,
    },
    /// The YAML does not match the schema (names the unknown or bad key).
    #[error("invalid config: {0}")]
    Parse(String),
    /// Values are individually valid but do not fit together.
    #[error("invalid config: {0}")]
    Invalid(String),
}

/// The whole configuration file.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// HTTP server settings.
    #[serde(default)]
    pub server: ServerConfig,
    /// Request limits.
    #[serde(default)]
    pub limits: Limits,
    /// GDAL settings.
    #[serde(default)]
    pub gdal: GdalSettings,
    /// Encoder settings.
    #[serde(default)]
    pub encoding: EncodeOptions,
    /// Custom tile matrix sets, besides WebMercatorQuad and WorldCRS84Quad.
    #[serde(default)]
    pub grids: Vec<GridSpec>,
    /// Settings of the cached tile path (locks, encode pool).
    #[serde(default)]
    pub cache: CacheSettings,
    /// Named tile stores that layers cache into (default: one in-memory
    /// store named `default`).
    #[serde(default = "default_stores")]
    pub stores: BTreeMap<String, StoreConfig>,
    /// Layers to serve.
    pub layers: Vec<LayerConfig>,
    /// The admin API (`PUT /admin/sources/{name}`); off when absent.
    #[serde(default)]
    pub admin: Option<AdminConfig>,
}

/// The `admin:` section: uploads of source rasters to object storage.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    /// Bearer token the admin API requires (use `${ENV}`); at least 16
    /// characters.
    pub token: String,
    /// Where uploaded sources are stored: `s3://bucket/prefix` (GDAL then
    /// reads them through `/vsis3/`, with the endpoint and credentials of
    /// `gdal.config_options`), `gs://` (`/vsigs/`) or `az://` (`/vsiaz/`).
    pub sources_url: String,
    /// Client options of that store (as for `type: object` stores).
    #[serde(default)]
    pub options: BTreeMap<String, OptionValue>,
    /// JSON file recording the uploaded sources, so that they are served
    /// again after a restart.
    pub sources_file: String,
    /// Largest upload in MiB (default 4096); larger ones get 413.
    #[serde(default = "default_max_upload_mb")]
    pub max_upload_mb: u64,
    /// Multipart part size in MiB (default 16, at least 5).
    #[serde(default = "default_part_size_mb")]
    pub part_size_mb: u64,
    /// Parts uploading at once (default 4); memory per upload is at most
    /// parts in flight x part size.
    #[serde(default = "default_parts_in_flight")]
    pub parts_in_flight: usize,
    /// Longest wait for the next piece of a request body, in seconds
    /// (default 30); past it the upload is aborted.
    #[serde(default = "default_body_timeout_secs")]
    pub body_timeout_secs: u64,
    /// Read each stored object back and compare its CRC32C (default true).
    #[serde(default = "default_true")]
    pub verify: bool,
    /// Store that uploaded layers cache into (default: `default` when it
    /// exists, otherwise none).
    #[serde(default)]
    pub cache_store: Option<String>,
}

fn default_max_upload_mb() -> u64 {
    4096
}

fn default_part_size_mb() -> u64 {
    16
}

fn default_parts_in_flight() -> usize {
    4
}

fn default_body_timeout_secs() -> u64 {
    30
}

fn default_true() -> bool {
    true
}

/// The `server:` section.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address to listen on (default `127.0.0.1:8080`).
    pub listen: String,
    /// Public base URL used in capabilities and TileJSON (default: from the
    /// request's Host header).
    pub public_url: Option<String>,
    /// Longest time a render may take, including the wait for a render
    /// slot, in seconds (default 30). Past it the client gets 503.
    pub render_timeout_secs: f64,
    /// Renders running at once (default: number of CPU cores).
    pub max_concurrent_renders: usize,
    /// Service title in capabilities documents.
    pub title: String,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8080".into(),
            public_url: None,
            render_timeout_secs: 30.0,
            max_concurrent_renders: std::thread::available_parallelism().map_or(2, usize::from),
            title: "tessera".into(),
        }
    }
}

/// The `limits:` section.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Largest WMS GetMap WIDTH (default 4096).
    pub wms_max_width: u32,
    /// Largest WMS GetMap HEIGHT (default 4096).
    pub wms_max_height: u32,
    /// Largest WIDTH x HEIGHT (default 16 Mpixel).
    pub wms_max_pixels: u64,
    /// Most layers in one GetMap (default 8).
    pub wms_max_layers: usize,
    /// Longest query string accepted, in bytes (default 8192).
    pub max_query_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            wms_max_width: 4096,
            wms_max_height: 4096,
            wms_max_pixels: 4096 * 4096,
            wms_max_layers: 8,
            max_query_bytes: 8192,
        }
    }
}

/// The `cache:` section.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CacheSettings {
    /// Longest wait for a metatile or tile lock, in seconds (default 120).
    /// Past it the client gets 503 with Retry-After.
    pub lock_timeout_secs: f64,
    /// Threads that encode and save the other tiles of a rendered metatile
    /// (default 2 x CPU cores; 0 = everything on the request path).
    pub metatile_threads: usize,
    /// Jobs that may wait for those threads (default 64); when the queue is
    /// full the request path does the work itself.
    pub encode_queue_len: usize,
}

impl Default for CacheSettings {
    fn default() -> Self {
        Self {
            lock_timeout_secs: 120.0,
            metatile_threads: 2 * std::thread::available_parallelism().map_or(2, usize::from),
            encode_queue_len: 64,
        }
    }
}

/// A tile store under `stores:`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum StoreConfig {
    /// Tiles as files in `path/layer/grid/z/x/y.ext`.
    File {
        /// Root directory (created if missing).
        path: String,
        /// Row order of the tree (`xyz`, default, or `tms`).
        #[serde(default)]
        layout: FileLayout,
        /// In-memory LRU in front of the files, in MiB (default 64; 0 = none).
        #[serde(default = "default_file_memory_mb")]
        memory_mb: u64,
    },
    /// Tiles as records of an append-only journal in `path` (one fsync per
    /// batch of writes instead of one per tile).
    Journal {
        /// Directory of the segment files (created if missing).
        path: String,
        /// Segment file size in MiB (default 64).
        #[serde(default = "default_segment_mb")]
        segment_mb: u64,
        /// Adaptive wait before a sync for more writes to share it, in
        /// milliseconds (default 0: off).
        #[serde(default)]
        sync_window_ms: u64,
        /// In-memory LRU in front, in MiB (default 64; 0 = none).
        #[serde(default = "default_file_memory_mb")]
        memory_mb: u64,
    },
    /// Tiles in MBTiles 1.3 files under `path`, one per layer, grid and
    /// format (`layer.grid.ext.mbtiles`).
    Mbtiles {
        /// Directory of the files (created if missing).
        path: String,
        /// SQLite `synchronous` for ordinary writes: `off`, `normal`
        /// (default) or `full`; synced writes always use `full`.
        #[serde(default)]
        synchronous: Synchronous,
        /// In-memory LRU in front, in MiB (default 64; 0 = none).
        #[serde(default = "default_file_memory_mb")]
        memory_mb: u64,
    },
    /// Tiles in packs on an object store: the tiles of one aligned block
    /// of the Hilbert (or Z-order) curve in one object with a computed key,
    /// `prefix/layer/grid/z/index.ext.avro` (see docs/pack-format.md).
    Object {
        /// `s3://bucket/prefix`, `gs://bucket/prefix`,
        /// `az://container/prefix` or `file:///directory`.
        url: String,
        /// Client options with `object_store`'s keys (`endpoint`, `region`,
        /// `access_key_id`, `secret_access_key`, `allow_http`, `timeout`,
        /// ...); otherwise credentials come from the usual `AWS_*`,
        /// `GOOGLE_*` and `AZURE_*` environment variables.
        #[serde(default)]
        options: BTreeMap<String, OptionValue>,
        /// Tiles per pack: 1, 4, 16 (default), 64, ...
        #[serde(default = "default_pack_tiles")]
        pack_tiles: u32,
        /// Curve ordering tiles and packs: `hilbert` (default) or `zorder`.
        #[serde(default = "default_curve")]
        curve: Curve,
        /// Directory of the local read-through cache of packs (default:
        /// none).
        cache_path: Option<String>,
        /// Budget of the local cache in MiB (default 1024).
        #[serde(default = "default_pack_cache_mb")]
        cache_mb: u64,
        /// In-memory LRU of tiles in front, in MiB (default 64; 0 = none).
        #[serde(default = "default_file_memory_mb")]
        memory_mb: u64,
    },
    /// Tiles in memory only, least recently used evicted; lost on restart.
    Memory {
        /// Budget in MiB (default 256).
        #[serde(default = "default_memory_mb")]
        memory_mb: u64,
    },
}

/// A scalar option value (YAML may give `allow_http: true` or `timeout: 30s`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
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

fn default_pack_tiles() -> u32 {
    16
}

fn default_curve() -> Curve {
    Curve::Hilbert
}

fn default_pack_cache_mb() -> u64 {
    1024
}

fn default_file_memory_mb() -> u64 {
    64
}

fn default_memory_mb() -> u64 {
    256
}

fn default_segment_mb() -> u64 {
    64
}

fn default_stores() -> BTreeMap<String, StoreConfig> {
    BTreeMap::from([(
        DEFAULT_STORE.to_string(),
        StoreConfig::Memory {
            memory_mb: default_memory_mb(),
        },
    )])
}

/// The store a layer uses unless it names another.
pub const DEFAULT_STORE: &str = "default";
/// The `cache.store` value that turns caching off for a layer.
pub const NO_STORE: &str = "none";

/// A layer's `cache:` section.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LayerCacheConfig {
    /// Name of a store under `stores:` (default `default`), or `none` to
    /// render every tile request directly.
    pub store: String,
    /// Metatile size in tiles, `[columns, rows]` (default `[4, 4]`).
    pub metatile: [u32; 2],
    /// Extra pixels rendered around a metatile and cut away (default 8).
    pub gutter: u32,
    /// `Cache-Control: max-age` sent with tiles, in seconds (default 3600).
    pub max_age_secs: u64,
    /// Durability of tiles saved while serving (`buffered`, default, or
    /// `synced`). Seeding always writes `synced`.
    pub durability: Durability,
}

impl Default for LayerCacheConfig {
    fn default() -> Self {
        Self {
            store: DEFAULT_STORE.into(),
            metatile: [4, 4],
            gutter: 8,
            max_age_secs: 3600,
            durability: Durability::Buffered,
        }
    }
}

/// Largest metatile side in tiles.
pub const MAX_METATILE: u32 = 16;
/// Largest gutter in pixels.
pub const MAX_GUTTER: u32 = 512;

/// One layer.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LayerConfig {
    /// Name used in URLs, WMS LAYERS and WMTS (`[A-Za-z0-9_.-]+`).
    pub name: String,
    /// Human-readable title.
    #[serde(default)]
    pub title: Option<String>,
    /// Longer description.
    #[serde(default)]
    pub description: Option<String>,
    /// Attribution shown by map clients.
    #[serde(default)]
    pub attribution: Option<String>,
    /// Where the pixels come from.
    pub source: GdalSourceSpec,
    /// How bands become colors (default RGB passthrough).
    #[serde(default)]
    pub style: StyleSpec,
    /// Grids the layer is tiled in (default WebMercatorQuad and WorldCRS84Quad).
    #[serde(default = "default_grids")]
    pub grids: Vec<String>,
    /// Lowest zoom served as tiles (default 0).
    #[serde(default)]
    pub min_zoom: u8,
    /// Highest zoom served as tiles (default 20, capped by each grid).
    #[serde(default = "default_max_zoom")]
    pub max_zoom: u8,
    /// Tile formats offered (default png, jpeg, webp); the first is the default.
    #[serde(default = "default_formats")]
    pub formats: Vec<Format>,
    /// Extra CRSs to advertise in WMS capabilities (any EPSG code GDAL knows
    /// is accepted in GetMap regardless).
    #[serde(default)]
    pub wms_crs: Vec<String>,
    /// Caching, metatiling and client cache lifetime.
    #[serde(default)]
    pub cache: LayerCacheConfig,
}

fn default_grids() -> Vec<String> {
    vec![
        tessera_grid::WEB_MERCATOR_QUAD.into(),
        tessera_grid::WORLD_CRS84_QUAD.into(),
    ]
}

fn default_max_zoom() -> u8 {
    20
}

fn default_formats() -> Vec<Format> {
    Format::ALL.to_vec()
}

impl Config {
    /// Reads, substitutes and parses a configuration file.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Config::from_yaml(&text, |name| std::env::var(name).ok())
    }

    /// Parses YAML after replacing `${NAME}` and `${NAME:-default}` with
    /// values from `env`.
    pub fn from_yaml(
        text: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let text = substitute_env(text, env)?;
        let config: Config =
            serde_saphyr::from_str(&text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        config.check()?;
        Ok(config)
    }

    fn check(&self) -> Result<(), ConfigError> {
        let invalid = |m: String| Err(ConfigError::Invalid(m));
        if let Some(admin) = &self.admin {
            if admin.token.len() < 16 {
                return invalid("admin.token must be at least 16 characters".into());
            }
            if admin.part_size_mb < 5 || admin.parts_in_flight == 0 {
                return invalid(
                    "admin.part_size_mb must be at least 5 and admin.parts_in_flight at least 1"
                        .into(),
                );
            }
        }
        if self.layers.is_empty() {
            return invalid("`layers` is empty: add at least one layer".into());
        }
        let mut names = std::collections::HashSet::new();
        for layer in &self.layers {
            if !valid_name(&layer.name) {
                return invalid(format!(
                    "layer name {:?} must use only letters, digits, '_', '-' and '.'",
                    layer.name
                ));
            }
            if !names.insert(layer.name.as_str()) {
                return invalid(format!("layer {:?} is defined twice", layer.name));
            }
            if layer.min_zoom > layer.max_zoom {
                return invalid(format!(
                    "layer {:?}: min_zoom is above max_zoom",
                    layer.name
                ));
            }
            if layer.formats.is_empty() || layer.grids.is_empty() {
                return invalid(format!(
                    "layer {:?}: formats and grids may not be empty",
                    layer.name
                ));
            }
            let c = &layer.cache;
            if c.store != NO_STORE && !self.stores.contains_key(&c.store) {
                return invalid(format!(
                    "layer {:?}: cache.store {:?} is not defined under `stores:` (defined: {}; or use `none`)",
                    layer.name,
                    c.store,
                    self.stores.keys().cloned().collect::<Vec<_>>().join(", ")
                ));
            }
            if !c.metatile.iter().all(|n| (1..=MAX_METATILE).contains(n)) {
                return invalid(format!(
                    "layer {:?}: cache.metatile sides must be 1..={MAX_METATILE}",
                    layer.name
                ));
            }
            if c.gutter > MAX_GUTTER {
                return invalid(format!(
                    "layer {:?}: cache.gutter must be at most {MAX_GUTTER} pixels",
                    layer.name
                ));
            }
        }
        for name in self.stores.keys() {
            if !valid_name(name) || name == NO_STORE {
                return invalid(format!(
                    "store name {name:?} must use only letters, digits, '_', '-' and '.', and not be `none`"
                ));
            }
        }
        let c = &self.cache;
        if !(c.lock_timeout_secs.is_finite() && c.lock_timeout_secs > 0.0) {
            return invalid("cache.lock_timeout_secs must be a positive number".into());
        }
        let s = &self.server;
        if !(s.render_timeout_secs.is_finite() && s.render_timeout_secs > 0.0) {
            return invalid("server.render_timeout_secs must be a positive number".into());
        }
        if s.max_concurrent_renders == 0 {
            return invalid("server.max_concurrent_renders must be at least 1".into());
        }
        let l = &self.limits;
        if l.wms_max_width == 0
            || l.wms_max_height == 0
            || l.wms_max_pixels == 0
            || l.wms_max_layers == 0
        {
            return invalid("limits must be at least 1".into());
        }
        if !(1..=100).contains(&self.encoding.jpeg_quality) {
            return invalid("encoding.jpeg_quality must be 1..=100".into());
        }
        Ok(())
    }
}

/// Whether `name` is usable in URLs and as a store path component.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

fn substitute_env(text: &str, env: impl Fn(&str) -> Option<String>) -> Result<String, ConfigError> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err(ConfigError::Parse("unterminated ${ in config".into()));
        };
        let expr = &after[..end];
        let (name, default) = match expr.split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (expr, None),
        };
        match (env(name), default) {
            (Some(v), _) => out.push_str(&v),
            (None, Some(d)) => out.push_str(d),
            (None, None) => {
                return Err(ConfigError::MissingEnv {
                    name: name.to_string(),
                });
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "layers:\n  - name: a\n    source: { path: ${DATA}/x.tif }\n";

    #[test]
    fn substitutes_environment_variables_and_defaults() {
        let c = Config::from_yaml(MINIMAL, |n| (n == "DATA").then(|| "/d".to_string())).unwrap();
        assert_eq!(c.layers[0].source.path, "/d/x.tif");
        let c = Config::from_yaml(
            "layers:\n  - name: a\n    source: { path: ${NOPE:-/def}/x.tif }\n",
            |_| None,
        )
        .unwrap();
        assert_eq!(c.layers[0].source.path, "/def/x.tif");
    }

    #[test]
    fn a_missing_variable_is_named() {
        let err = Config::from_yaml(MINIMAL, |_| None).unwrap_err();
        assert!(
            matches!(&err, ConfigError::MissingEnv { name } if name == "DATA"),
            "{err}"
        );
    }

    #[test]
    fn unknown_keys_are_named_in_the_error() {
        let err = Config::from_yaml("layers:\n  - name: a\n    sourse: { path: /x }\n", |_| None)
            .unwrap_err();
        assert!(err.to_string().contains("sourse"), "{err}");
        let err = Config::from_yaml("servr: {}\nlayers: []\n", |_| None).unwrap_err();
        assert!(err.to_string().contains("servr"), "{err}");
    }

    #[test]
    fn cache_settings_are_checked_and_named() {
        let base = "layers:\n  - name: a\n    source: { path: /x }\n";
        for (extra, needle) in [
            ("    cache: { store: nowhere }\n", "nowhere"),
            ("    cache: { metatile: [0, 4] }\n", "metatile"),
            ("    cache: { metatile: [4, 17] }\n", "metatile"),
            ("    cache: { gutter: 100000 }\n", "gutter"),
        ] {
            let err = Config::from_yaml(&format!("{base}{extra}"), |_| None).unwrap_err();
            assert!(err.to_string().contains(needle), "{extra}: {err}");
        }
        let err = Config::from_yaml(
            &format!("cache: {{ lock_timeout_secs: 0 }}\n{base}"),
            |_| None,
        )
        .unwrap_err();
        assert!(err.to_string().contains("lock_timeout_secs"), "{err}");
        let err = Config::from_yaml(
            &format!("stores: {{ disk: {{ type: file, path: /x, colour: red }} }}\n{base}"),
            |_| None,
        )
        .unwrap_err();
        assert!(err.to_string().contains("colour"), "{err}");
    }

    #[test]
    fn stores_default_to_one_memory_store_and_layers_to_it() {
        let c = Config::from_yaml(MINIMAL, |_| Some("/d".into())).unwrap();
        assert!(matches!(
            c.stores.get(DEFAULT_STORE),
            Some(StoreConfig::Memory { memory_mb: 256 })
        ));
        assert_eq!(c.layers[0].cache.store, DEFAULT_STORE);
        assert_eq!(c.layers[0].cache.metatile, [4, 4]);
        let c = Config::from_yaml(
            "stores:\n  disk: { type: file, path: /c, layout: tms }\nlayers:\n  - name: a\n    source: { path: /x }\n    cache: { store: disk, durability: synced }\n",
            |_| None,
        )
        .unwrap();
        assert!(matches!(
            c.stores.get("disk"),
            Some(StoreConfig::File {
                layout: FileLayout::Tms,
                memory_mb: 64,
                ..
            })
        ));
        assert_eq!(c.layers[0].cache.durability, Durability::Synced);
    }

    #[test]
    fn inconsistent_layers_are_refused() {
        for yaml in [
            "layers: []\n",
            "layers:\n  - name: ../x\n    source: { path: /x }\n",
            "layers:\n  - name: a\n    source: { path: /x }\n  - name: a\n    source: { path: /y }\n",
            "layers:\n  - name: a\n    min_zoom: 5\n    max_zoom: 2\n    source: { path: /x }\n",
        ] {
            assert!(
                matches!(
                    Config::from_yaml(yaml, |_| None),
                    Err(ConfigError::Invalid(_))
                ),
                "{yaml}"
            );
        }
    }
}
