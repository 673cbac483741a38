//! The configuration file: typed sections, `${ENV}` substitution in values
//! ([`env`]), unknown keys named in the error with where they are, relative
//! paths resolved against the file's directory. Each store's options are
//! its backend's own spec ([`StoreSpec`], in `tessera-store`).

pub mod auth;
mod cors;
mod dimensions;
mod env;
mod error;
mod searches;
mod styles;

pub use cors::CorsSettings;
pub use dimensions::{DimensionConfig, KindConfig, ValueConfig};
pub use error::ConfigError;
pub use searches::SearchesConfig;
pub use styles::{
    DEFAULT_STYLE, LayerStyle, MapLibreRef, NamedStyle, NamedStyles, STYLE_KEY, StyleDraw,
    default_vector_rule,
};

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use tessera_grid::{GridSpec, TileFormat};
use tessera_image::EncodeOptions;
use tessera_source::{GdalSettings, Resampling, SourceSpec};
use tessera_store::{Durability, MemorySpec, OptionValue, Size, StoreSpec};

/// The whole configuration file.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
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
    /// Several nodes sharing stores: leases and shared invalidation.
    #[serde(default)]
    pub cluster: ClusterSettings,
    /// Named tile stores that layers cache into (default: one in-memory
    /// store named `default`).
    #[serde(default = "default_stores")]
    pub stores: BTreeMap<String, StoreSpec>,
    /// Layers to serve.
    pub layers: Vec<LayerConfig>,
    /// The admin API (`PUT /admin/sources/{name}`); off when absent.
    #[serde(default)]
    pub admin: Option<AdminConfig>,
    /// Access control on reads (API keys, JWTs, public layers, rates);
    /// without it every layer is public.
    #[serde(default)]
    pub auth: Option<auth::AuthConfig>,
    /// STAC searches registered at run time (`POST /searches`), served
    /// like a configured `type: stac` layer; off when absent.
    #[serde(default)]
    pub searches: Option<SearchesConfig>,
    /// Who runs the service and on what terms, for capabilities documents.
    #[serde(default)]
    pub service: ServiceMetadata,
    /// OGC API settings.
    #[serde(default)]
    pub ogcapi: OgcApiConfig,
    /// WMTS settings.
    #[serde(default)]
    pub wmts: WmtsConfig,
    /// Font files (TTF, OTF, TTC) and folders of them, besides the bundled
    /// Noto Sans Regular: their faces are served as MapLibre glyph ranges
    /// at `/fonts/{fontstack}/{start}-{end}.pbf`, each named by its family
    /// and style (`Open Sans Bold`). A file named here that is not a font
    /// stops the start; one found in a folder is left out with a warning.
    #[serde(default)]
    pub fonts: Vec<PathBuf>,
    /// Sprite sets: a name and a folder of SVG icons (`maki: icons/maki`),
    /// served as MapLibre sprites at `/sprites/{name}.json`, `.png`,
    /// `@2x.json`, `@2x.png` (`?sdf=true`: recolourable SDF icons). An SVG
    /// that cannot be an icon is named in the log and left out.
    #[serde(default)]
    pub sprites: BTreeMap<String, PathBuf>,
    /// How often the layers found by themselves (`postgis_auto`) are looked
    /// for again, in seconds: the shortest `refresh_secs` (none: never).
    #[serde(skip)]
    pub watch_secs: Option<f64>,
    /// Sources opened while the configuration was written, taken by
    /// assembly instead of opening them again.
    #[serde(skip)]
    pub opened: OpenedSources,
}

/// Tile archives opened while a configuration was written (`serve FILE`
/// reads an archive's metadata to name its layer and zooms), by path:
/// assembly takes each once instead of opening it a second time (for an
/// archive in a bucket or on a web server, a second round of header and
/// directory reads). Shared by the clones of one configuration; never
/// compared (two configurations differ by what they say, not by this).
#[derive(Clone, Default)]
pub struct OpenedSources(Arc<std::sync::Mutex<HashMap<String, Arc<dyn tessera_source::Source>>>>);

impl OpenedSources {
    /// Keeps `source`, opened from the archive at `path`.
    pub fn keep(&self, path: &str, source: Arc<dyn tessera_source::Source>) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(path.to_string(), source);
    }

    /// The source kept for the archive `spec` names, once.
    pub fn take(&self, spec: &SourceSpec) -> Option<Arc<dyn tessera_source::Source>> {
        let SourceSpec::Archive(_, archive) = spec else {
            return None;
        };
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&archive.path)
    }
}

impl PartialEq for OpenedSources {
    fn eq(&self, _: &OpenedSources) -> bool {
        true
    }
}

impl std::fmt::Debug for OpenedSources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let count = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len();
        write!(f, "OpenedSources({count})")
    }
}

/// The `wmts:` section.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WmtsConfig {
    /// Whether a layer whose zooms are fewer than its grid's, and that is
    /// drawn from its source (not an archive or tiles passed through),
    /// also links the grid's whole TileMatrixSet, and serves every zoom of
    /// it (past its own by drawing its pixels larger), beside the set of
    /// its own zooms (`{grid}:{min}-{max}`): clients and projects that name
    /// `WebMercatorQuad` keep working (default true).
    #[serde(default = "yes")]
    pub link_full_grid: bool,
}

impl Default for WmtsConfig {
    fn default() -> Self {
        WmtsConfig {
            link_full_grid: true,
        }
    }
}

fn yes() -> bool {
    true
}

/// The `ogcapi:` section.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OgcApiConfig {
    /// The layers the dataset map (`/ogcapi/map` and its tiles) draws when
    /// a request names no `collections`, bottom first (default: the first
    /// `limits.wms_max_layers` layers with images, in configured order).
    #[serde(default)]
    pub default_collections: Option<Vec<String>>,
}

/// The `service:` section: what WMS and WMTS capabilities say about the
/// service (abstract, keywords, contact, fees, access constraints). Every
/// field is optional; what is absent is left out of the documents.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServiceMetadata {
    /// A description of the service.
    #[serde(rename = "abstract")]
    pub abstract_text: Option<String>,
    /// Keywords.
    #[serde(default)]
    pub keywords: Vec<String>,
    /// Fees (`none`, say).
    pub fees: Option<String>,
    /// Access constraints (`none`, a licence).
    pub access_constraints: Option<String>,
    /// Who to contact.
    #[serde(default)]
    pub contact: Contact,
}

/// The contact of the `service:` section.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Contact {
    /// A person's name.
    pub person: Option<String>,
    /// The organization (also the WMTS provider name).
    pub organization: Option<String>,
    /// The person's position.
    pub position: Option<String>,
    /// E-mail address.
    pub email: Option<String>,
    /// Telephone number.
    pub phone: Option<String>,
    /// The provider's web site.
    pub site: Option<String>,
}

/// A layer's `data_url`: a web page (or file) about the data, listed as
/// `DataURL` in WMS capabilities. A page that is no metadata record
/// (ISO 19115, FGDC) belongs here, not in `metadata_url`.
#[derive(Debug, Clone, Deserialize, PartialEq, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DataUrl {
    /// Where it is.
    pub url: String,
    /// Its media type (default `text/html`).
    #[serde(default = "text_html")]
    pub format: String,
}

fn text_html() -> String {
    "text/html".into()
}

/// A layer's `metadata_url`: a metadata record about the data, listed as
/// `MetadataURL` in WMS capabilities.
#[derive(Debug, Clone, Deserialize, PartialEq, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MetadataUrl {
    /// Where the record is.
    pub url: String,
    /// The record's standard (default `ISO19115:2003`).
    #[serde(default = "iso19115", rename = "type")]
    pub kind: String,
    /// Its media type (default `text/xml`).
    #[serde(default = "text_xml")]
    pub format: String,
}

fn iso19115() -> String {
    "ISO19115:2003".into()
}

fn text_xml() -> String {
    "text/xml".into()
}

/// The `admin:` section: uploads of source rasters to object storage.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    /// Bearer token the admin API requires (use `${ENV}`); at least 16
    /// characters.
    pub token: String,
    /// Where uploaded sources are stored: `s3://bucket/prefix` (GDAL then
    /// reads them through `/vsis3/`, with the endpoint and credentials of
    /// `gdal.config_options`), `gs://` (`/vsigs/`) or `az://` (`/vsiaz/`).
    /// Without it (and `sources_file`), uploads are off and the rest of
    /// the admin API (jobs, stats, reload, truncate) works all the same.
    #[serde(default)]
    pub sources_url: Option<String>,
    /// Client options of that store (as for `type: object` stores).
    #[serde(default)]
    pub options: BTreeMap<String, OptionValue>,
    /// JSON file recording the uploaded sources, so that they are served
    /// again after a restart (given with `sources_url`).
    #[serde(default)]
    pub sources_file: Option<String>,
    /// Largest upload (default 4GiB; `max_upload_mb` is the older name);
    /// larger ones get 413.
    #[serde(default, alias = "max_upload_mb")]
    pub max_upload: Option<Size>,
    /// Multipart part size (default 16MiB, at least 5MiB; `part_size_mb`
    /// is the older name).
    #[serde(default, alias = "part_size_mb")]
    pub part_size: Option<Size>,
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
    /// Directory of the records of admin jobs (`/admin/jobs`), from which
    /// jobs running when the process stopped go on after a restart
    /// (default: `jobs` beside `sources_file` when uploads are on, else
    /// `jobs` in the config file's directory; a relative path is taken
    /// from the config file's directory).
    #[serde(default)]
    pub jobs_dir: Option<String>,
    /// Largest job spec `POST /admin/jobs` takes (default 32MiB: a
    /// polygon of real detail); larger ones get 413.
    #[serde(default)]
    pub max_job_spec: Option<Size>,
}

impl AdminConfig {
    /// The largest job spec in bytes.
    pub fn max_job_spec_bytes(&self) -> usize {
        usize::try_from(Size::or(self.max_job_spec, 32 << 20)).unwrap_or(usize::MAX)
    }

    /// The directory of the jobs' records (`jobs_dir`, set from its
    /// defaults when the configuration is read from a file; `jobs` in the
    /// working directory otherwise).
    pub fn jobs_dir_path(&self) -> std::path::PathBuf {
        match (&self.jobs_dir, &self.sources_file) {
            (Some(d), _) => d.into(),
            (None, Some(file)) => std::path::Path::new(file)
                .parent()
                .unwrap_or_else(|| std::path::Path::new("."))
                .join("jobs"),
            (None, None) => "jobs".into(),
        }
    }

    /// Where uploads go and are recorded, when uploads are on.
    pub fn uploads(&self) -> Option<(&str, &str)> {
        self.sources_url
            .as_deref()
            .zip(self.sources_file.as_deref())
    }

    /// The largest upload in bytes.
    pub fn max_upload_bytes(&self) -> u64 {
        Size::or(self.max_upload, 4096 << 20)
    }

    /// The multipart part size in bytes.
    pub fn part_size_bytes(&self) -> u64 {
        Size::or(self.part_size, 16 << 20)
    }
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
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address to listen on (default `127.0.0.1:8080`).
    pub listen: String,
    /// Public base URL used in capabilities and TileJSON (default: from the
    /// request's Host header).
    pub public_url: Option<String>,
    /// Longest time a render may take, including the wait for a render
    /// slot, in seconds or with a unit (`30s`, `2m`; default 30). Past it the
    /// client gets 503.
    #[serde(deserialize_with = "seconds")]
    #[schemars(with = "Seconds")]
    pub render_timeout_secs: f64,
    /// Renders running at once, each on a render thread of its own
    /// (default: two per CPU core). A render also waits (for a block
    /// another render is decoding, for its source's reads, for memory), so
    /// one per core leaves the cores idle for part of a pass over short
    /// renders (tiles of a COG's own pixels); two per core keeps them busy
    /// (docs/benchmarks/cold-floor.md).
    pub max_concurrent_renders: usize,
    /// Share of the render slots WMS GetMap requests may hold at once
    /// (0 to 1, default 0.5; at least one slot): the rest is kept for tiles,
    /// so large maps cannot starve tile clients. 1 lets maps take them all.
    pub wms_render_share: f64,
    /// Service title in capabilities documents.
    pub title: String,
    /// Longest wait for a request's headers, in seconds or with a unit
    /// (default 10); past it the connection is closed.
    #[serde(deserialize_with = "seconds")]
    #[schemars(with = "Seconds")]
    pub header_timeout_secs: f64,
    /// Longest time a connection may stay open with no request in flight
    /// (default 60).
    #[serde(deserialize_with = "seconds")]
    #[schemars(with = "Seconds")]
    pub idle_timeout_secs: f64,
    /// Most connections open at once (default 0: most of the open-file
    /// limit); at the limit the connection idle for longest is closed.
    pub max_connections: usize,
    /// Threads that read connections and answer tile hits, each with its
    /// own event loop (default 0: one per CPU core). Other requests are
    /// handed to the main runtime.
    pub connection_threads: usize,
    /// How long a shutdown waits for requests in flight (default 10).
    #[serde(deserialize_with = "seconds")]
    #[schemars(with = "Seconds")]
    pub shutdown_grace_secs: f64,
    /// Cross-origin access for web pages on other origins (default: every
    /// origin may read; never the admin endpoints).
    pub cors: CorsSettings,
    /// Compress text responses (capabilities, TileJSON, exceptions,
    /// metrics) with gzip, br or zstd as the client accepts (default
    /// true); images are never compressed again.
    pub compression: bool,
    /// One log line per request at info level, target `tessera::access`
    /// (default true).
    pub access_log: bool,
    /// Build links (capabilities, TileJSON) from the `Forwarded` or
    /// `X-Forwarded-Proto/Host/Prefix` headers a reverse proxy sets
    /// (default false: only behind a proxy that sets them, since clients
    /// could otherwise choose the links).
    pub trust_forwarded: bool,
    /// The folder of the built manual (`scripts/docs` writes it to
    /// `target/book`), served at `/book/` and linked from the HTML pages and
    /// error messages (default `/usr/share/doc/tessera/book`, where the
    /// Debian package installs it). When it is missing, `/book/` says how
    /// to build it.
    pub book: std::path::PathBuf,
}

/// Where the Debian package installs the manual: `server.book`'s default.
pub const DEFAULT_BOOK: &str = "/usr/share/doc/tessera/book";

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8080".into(),
            public_url: None,
            render_timeout_secs: 30.0,
            max_concurrent_renders: 2 * std::thread::available_parallelism().map_or(2, usize::from),
            wms_render_share: 0.5,
            title: "tessera".into(),
            header_timeout_secs: 10.0,
            idle_timeout_secs: 60.0,
            max_connections: 0,
            connection_threads: 0,
            shutdown_grace_secs: 10.0,
            cors: CorsSettings::default(),
            compression: true,
            access_log: true,
            trust_forwarded: false,
            book: DEFAULT_BOOK.into(),
        }
    }
}

/// The `limits:` section.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
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
    /// Most source pixels one layer's read may touch, at the resolution
    /// the source reads after choosing an overview (default 268,435,456:
    /// a 16384x16384 raster without overviews); a larger read answers 400
    /// before anything is read.
    pub max_source_pixels: u64,
    /// Largest font file read (`fonts:`), in bytes (default 67,108,864: 64
    /// MiB); a larger one is refused before it is read.
    pub max_font_bytes: u64,
    /// Glyph ranges kept in memory once made (default 4096, about 100 MB
    /// at most; past it they are made again when asked).
    pub glyph_ranges_kept: usize,
    /// Largest SVG icon read for a sprite, in bytes (default 1,048,576).
    pub sprite_max_bytes: u64,
    /// Most XML nodes in one SVG icon (default 20,000).
    pub sprite_max_nodes: u32,
    /// Largest side of an SVG icon, in CSS pixels (default 512).
    pub sprite_max_side: u32,
    /// Most icons in one sprite set (default 5,000).
    pub sprite_max_icons: usize,
    /// Most samples one elevation profile (`POST /elevation/{layer}`)
    /// answers (default 1,000).
    pub profile_max_samples: usize,
    /// Most vertices in a profile's line (default 10,000); its body may
    /// be 64 bytes per vertex.
    pub profile_max_vertices: usize,
}

impl Limits {
    /// What one sprite icon may cost.
    pub fn sprites(&self) -> tessera_carto::sprites::SpriteLimits {
        tessera_carto::sprites::SpriteLimits {
            max_bytes: self.sprite_max_bytes,
            max_nodes: self.sprite_max_nodes,
            max_side: self.sprite_max_side,
            max_icons: self.sprite_max_icons,
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            wms_max_width: 4096,
            wms_max_height: 4096,
            wms_max_pixels: 4096 * 4096,
            wms_max_layers: 8,
            max_query_bytes: 8192,
            max_source_pixels: 1 << 28,
            max_font_bytes: 64 << 20,
            glyph_ranges_kept: 4096,
            sprite_max_bytes: 1 << 20,
            sprite_max_nodes: 20_000,
            sprite_max_side: 512,
            sprite_max_icons: 5_000,
            profile_max_samples: 1_000,
            profile_max_vertices: 10_000,
        }
    }
}

/// The `cache:` section.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct CacheSettings {
    /// Longest wait for a metatile or tile lock, in seconds or with a unit
    /// (default 120). Past it the client gets 503 with Retry-After.
    #[serde(deserialize_with = "seconds")]
    #[schemars(with = "Seconds")]
    pub lock_timeout_secs: f64,
    /// Threads that encode and save the other tiles of a rendered metatile
    /// (default 2 x CPU cores; 0 = everything on the request path).
    pub metatile_threads: usize,
    /// Jobs that may wait for those threads (default 64); when the queue is
    /// full the request path does the work itself.
    pub encode_queue_len: usize,
    /// When a tile is its source's own pixels and so is read alone (not
    /// cut from a metatile), read the other tiles of its metatile in the
    /// background while a render slot is free, and store them, as a
    /// metatile would have (default true). The reads stop as soon as
    /// requests take every render slot.
    pub idle_siblings: bool,
}

impl Default for CacheSettings {
    fn default() -> Self {
        Self {
            lock_timeout_secs: 120.0,
            metatile_threads: 2 * std::thread::available_parallelism().map_or(2, usize::from),
            encode_queue_len: 64,
            idle_siblings: true,
        }
    }
}

/// The `cluster:` section: how nodes sharing a store coordinate through it
/// (see `tessera_store::cluster`).
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterSettings {
    /// Render a metatile on one node only: a lease object is created in the
    /// layer's object store before rendering (default off). Every cached
    /// layer's store must then be an object store that honours conditional
    /// writes (S3, GCS, Azure, MinIO).
    pub leases: bool,
    /// How long a lease lasts unless renewed, in seconds (default 30). A
    /// node that died holding one delays its metatile this long. Every
    /// node of a cluster must use the same value: a lease claiming more
    /// than twice this node's TTL ahead is taken over.
    #[serde(deserialize_with = "seconds")]
    #[schemars(with = "Seconds")]
    pub lease_ttl_secs: f64,
    /// Longest wait of a node that lost a lease for the holder's tiles, in
    /// seconds (default: twice `lease_ttl_secs`, time for a dead holder's
    /// lease to expire and be taken over); past it, a 503 with Retry-After.
    /// A lease claiming to run more than two TTLs ahead counts as expired.
    #[serde(default, deserialize_with = "optional_seconds")]
    #[schemars(with = "Option<Seconds>")]
    pub lease_wait_secs: Option<f64>,
    /// This node's name in leases (default: host name and process id).
    pub node_id: Option<String>,
    /// How often each layer's generation object is checked, in seconds
    /// (default 5; 0 = never). A truncate on another node or by
    /// `tessera truncate` is seen within this time.
    #[serde(deserialize_with = "seconds")]
    #[schemars(with = "Seconds")]
    pub generation_check_secs: f64,
}

/// `listen` when it is an address to listen on (`IP:PORT`, `[IPv6]:PORT`
/// or `NAME:PORT`), or a message saying how to write one.
pub fn listen_address(listen: &str) -> Result<String, String> {
    if is_listen_address(listen) {
        Ok(listen.to_string())
    } else {
        Err(format!(
            "{listen:?} is not an address to listen on: write HOST:PORT, for \
             example 127.0.0.1:8080, [::1]:8080 or localhost:8080"
        ))
    }
}

/// Whether `listen` is `IP:PORT`, `[IPv6]:PORT` or `NAME:PORT`.
fn is_listen_address(listen: &str) -> bool {
    if listen.parse::<std::net::SocketAddr>().is_ok() {
        return true;
    }
    let Some((host, port)) = listen.rsplit_once(':') else {
        return false;
    };
    port.parse::<u16>().is_ok()
        && !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
}

impl Default for ClusterSettings {
    fn default() -> Self {
        Self {
            leases: false,
            lease_ttl_secs: 30.0,
            lease_wait_secs: None,
            node_id: None,
            generation_check_secs: 5.0,
        }
    }
}

impl ClusterSettings {
    /// The node's name: `node_id`, else `host-pid`.
    pub fn node(&self) -> String {
        self.node_id.clone().unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map_or_else(|_| "node".into(), |h| h.trim().to_string());
            format!("{host}-{}", std::process::id())
        })
    }
}

fn default_stores() -> BTreeMap<String, StoreSpec> {
    BTreeMap::from([(
        DEFAULT_STORE.to_string(),
        StoreSpec::Memory(MemorySpec::default()),
    )])
}

/// The store a layer uses unless it names another.
pub const DEFAULT_STORE: &str = "default";
/// The `cache.store` value that turns caching off for a layer.
pub const NO_STORE: &str = "none";

/// A layer's `cache:` section.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
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
    /// The name the layer's tiles are kept under in its store (default:
    /// the layer name). A new key starts an empty cache. Changes of the
    /// source, style, grids or encoding need none: they change the layer's
    /// fingerprint, and tiles of another fingerprint are never served.
    pub key: Option<String>,
    /// Stored tiles older than this (seconds, or with a unit: `12h`, `7d`)
    /// are rendered again when asked for, and by `tessera seed`.
    #[serde(deserialize_with = "optional_seconds")]
    #[schemars(with = "Option<Seconds>")]
    pub max_stored_age: Option<f64>,
    /// Stored tiles written before this time (RFC 3339, `2026-11-01T00:00:00Z`)
    /// are rendered again when asked for, and by `tessera seed`.
    #[serde(deserialize_with = "optional_timestamp")]
    #[schemars(with = "Option<Timestamp>")]
    pub refresh_before: Option<std::time::SystemTime>,
    /// Most bytes of this layer's tiles in its store (a quota of the layer
    /// alone, all its dimension values counted; its least recently used
    /// tiles, or as the store's `eviction` says, go first). A file, journal
    /// or MBTiles store only.
    pub max_size: Option<tessera_store::Size>,
}

impl Default for LayerCacheConfig {
    fn default() -> Self {
        Self {
            max_size: None,
            key: None,
            max_stored_age: None,
            refresh_before: None,
            store: DEFAULT_STORE.into(),
            metatile: [4, 4],
            gutter: 8,
            max_age_secs: 3600,
            durability: Durability::Buffered,
        }
    }
}

/// Longest render or lock timeout, in seconds (a day).
pub const MAX_TIMEOUT_SECS: f64 = 86_400.0;

/// Largest metatile side in tiles.
pub const MAX_METATILE: u32 = 16;
/// Largest gutter in pixels.
pub const MAX_GUTTER: u32 = 512;

/// One layer.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
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
    /// A metadata record about the layer's data (WMS `MetadataURL`).
    #[serde(default)]
    pub metadata_url: Option<MetadataUrl>,
    /// A web page about the layer's data (WMS `DataURL`).
    #[serde(default)]
    pub data_url: Option<DataUrl>,
    /// Keywords describing the layer (WMS `KeywordList`, WMTS
    /// `ows:Keywords`).
    #[serde(default)]
    pub keywords: Vec<String>,
    /// Attribution shown by map clients.
    #[serde(default)]
    pub attribution: Option<String>,
    /// Where the pixels come from: a raster GDAL reads (the default, or
    /// `type: gdal`) or an upstream WMS (`type: wms`).
    pub source: SourceSpec,
    /// How bands become colors (default RGB passthrough), or a MapLibre
    /// style document a vector source draws with.
    #[serde(default)]
    pub style: LayerStyle,
    /// Several named styles instead of `style:`, in the order written; the
    /// first is the default (see [`NamedStyles`]).
    #[serde(default)]
    pub styles: Option<NamedStyles>,
    /// Grids the layer is tiled in (default WebMercatorQuad and WorldCRS84Quad).
    #[serde(default = "default_grids")]
    pub grids: Vec<String>,
    /// Lowest zoom served as tiles (default 0).
    #[serde(default)]
    pub min_zoom: u8,
    /// Highest zoom served as tiles (default: the deepest of each grid,
    /// as GeoWebCache and MapProxy serve every level of a grid; a lower
    /// one makes WMTS link a TileMatrixSet of the layer's zooms only).
    #[serde(default = "default_max_zoom")]
    pub max_zoom: u8,
    /// Tile formats offered (default png, jpeg, webp; png8 on request);
    /// the first is the default. Vector layers offer `mvt`, and `mlt`
    /// (MapLibre Tiles, made from the mvt tiles) with it.
    #[serde(default = "default_formats")]
    pub formats: Vec<TileFormat>,
    /// Extra CRSs to advertise in WMS capabilities (any EPSG code GDAL knows
    /// is accepted in GetMap regardless).
    #[serde(default)]
    pub wms_crs: Vec<String>,
    /// Caching, metatiling and client cache lifetime.
    #[serde(default)]
    pub cache: LayerCacheConfig,
    /// Dimensions (time, elevation, any name) by name, lower case; none by
    /// default.
    #[serde(default)]
    pub dimensions: std::collections::BTreeMap<String, DimensionConfig>,
}

/// Whether `source` can give the elevation tiles of `format`: a raster
/// whose values are interpolated (elevations, not colours, are resampled),
/// so not a vector source, nor a tile archive or upstream service (their
/// pixels are colours), nor nearest or mode resampling. Its band count is
/// checked when it opens.
fn check_elevation_source(
    layer: &str,
    format: TileFormat,
    source: &SourceSpec,
) -> Result<(), String> {
    let resampling = match source {
        SourceSpec::Gdal(g) => g.resampling,
        SourceSpec::Mosaic(m) => m.resampling,
        #[allow(unreachable_patterns, reason = "other variants exist with features")]
        _ => {
            return Err(format!(
                "layer {layer:?}: format {format} encodes the elevations of a single-band raster (type: gdal or mosaic); this source draws colours"
            ));
        }
    };
    if matches!(resampling, Resampling::Nearest | Resampling::Mode) {
        return Err(format!(
            "layer {layer:?}: format {format} interpolates elevations before encoding them: choose resampling bilinear, cubic, cubicspline or lanczos (not {})",
            format!("{resampling:?}").to_lowercase()
        ));
    }
    Ok(())
}

fn default_grids() -> Vec<String> {
    vec![
        tessera_grid::WEB_MERCATOR_QUAD.into(),
        tessera_grid::WORLD_CRS84_QUAD.into(),
    ]
}

fn default_max_zoom() -> u8 {
    u8::MAX
}

fn default_formats() -> Vec<TileFormat> {
    vec![TileFormat::Png, TileFormat::Jpeg, TileFormat::Webp]
}

/// The URL path the running server serves [`Config::schema`] at.
pub const SCHEMA_PATH: &str = "/schema/config.json";

impl Config {
    /// The JSON Schema (draft 2020-12) of the configuration file, generated
    /// from these types and their doc comments: what editors use to
    /// complete and check `tessera.yaml` (the YAML language server's
    /// `# yaml-language-server: $schema=...` line). Reading a file checks
    /// more than the schema can say (references between sections, ranges).
    pub fn schema() -> serde_json::Value {
        let mut schema =
            serde_json::to_value(schemars::schema_for!(Config)).expect("a schema is plain JSON");
        schema["title"] = "tessera configuration".into();
        schema
    }

    /// Reads, substitutes and parses a configuration file. Relative paths
    /// in it (sources, stores, the admin sources file) are taken relative
    /// to the file's directory.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let read_error = |source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        };
        let text = std::fs::read_to_string(path).map_err(read_error)?;
        let base = std::path::absolute(path)
            .map_err(read_error)?
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let mut config = Config::parse(&text, &|name| std::env::var(name).ok())?;
        config.resolve_paths(&base);
        config.check()?;
        Ok(config)
    }

    /// Parses YAML, replacing `${NAME}` and `${NAME:-default}` in values
    /// with values from `env`. Relative paths stay relative (to the working
    /// directory).
    pub fn from_yaml(
        text: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let config = Config::parse(text, &env)?;
        config.check()?;
        Ok(config)
    }

    fn parse(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let mut doc: serde_json::Value = serde_saphyr::from_str(text).map_err(|e| {
            let mut message = e.to_string();
            if text.contains("${") {
                // `{` and `}` end a plain value inside `{ ... }` or `[ ... ]`.
                message.push_str("\n(a value that uses ${...} inside { } or [ ] must be quoted)");
            }
            ConfigError::Yaml(message)
        })?;
        env::substitute(&mut doc, env)?;
        serde_path_to_error::deserialize(doc).map_err(|e| {
            let path = e.path().to_string();
            ConfigError::Schema {
                at: if path == "." {
                    String::new()
                } else {
                    format!(" at {path}")
                },
                message: crate::suggest::serde_message(&e.into_inner().to_string()),
            }
        })
    }

    /// Makes relative local paths absolute against `base`.
    fn resolve_paths(&mut self, base: &Path) {
        for layer in &mut self.layers {
            if let Some(path) = layer.source.local_file_mut()
                && is_relative_file(path)
            {
                *path = base.join(&*path).display().to_string();
            }
            let named = layer.styles.iter_mut().flat_map(|s| &mut s.0);
            let documents = named
                .filter_map(|s| match &mut s.draw {
                    StyleDraw::MapLibre(m) => Some(m),
                    _ => None,
                })
                .chain(match &mut layer.style {
                    LayerStyle::MapLibre(m) => Some(m),
                    LayerStyle::Raster(_) => None,
                });
            for m in documents {
                if Path::new(&m.maplibre).is_relative() {
                    m.maplibre = base.join(&m.maplibre).display().to_string();
                }
            }
            for path in layer
                .dimensions
                .values_mut()
                .flat_map(|d| &mut d.values)
                .filter_map(|v| v.path.as_mut())
            {
                if is_relative_file(path) {
                    *path = base.join(&*path).display().to_string();
                }
            }
        }
        for store in self.stores.values_mut() {
            store.resolve_paths(base);
        }
        for path in self.fonts.iter_mut().chain(self.sprites.values_mut()) {
            if path.is_relative() {
                *path = base.join(&*path);
            }
        }
        if let Some(admin) = &mut self.admin {
            if let Some(file) = admin.sources_file.as_mut()
                && Path::new(file.as_str()).is_relative()
            {
                *file = base.join(&*file).display().to_string();
            }
            if let Some(dir) = admin.jobs_dir.as_mut() {
                if Path::new(dir.as_str()).is_relative() {
                    *dir = base.join(&*dir).display().to_string();
                }
            } else if admin.sources_file.is_none() {
                admin.jobs_dir = Some(base.join("jobs").display().to_string());
            }
        }
    }

    /// Checks every rule within the configuration (names, references
    /// between sections, ranges); run when it is read, and again once
    /// `assemble::discover` found what it names.
    pub fn check(&self) -> Result<(), ConfigError> {
        let invalid = |m: String| Err(ConfigError::Invalid(m));
        if let Some(searches) = &self.searches {
            match self.layers.iter().find(|l| l.name == searches.layer) {
                None => {
                    let unknown = crate::suggest::Unknown::among(
                        &searches.layer,
                        "layers",
                        self.layers.iter().map(|l| l.name.as_str()),
                    );
                    return invalid(format!("searches.layer: unknown layer {unknown}"));
                }
                Some(l) if !matches!(&l.source, SourceSpec::Stac(s) if s.pgstac.is_some()) => {
                    return invalid(format!(
                        "searches.layer {:?} is not a `type: stac` layer with `pgstac`: a registered search is kept in pgSTAC and served like one",
                        searches.layer
                    ));
                }
                Some(_) => {}
            }
        }
        if let Some(names) = &self.ogcapi.default_collections {
            if names.len() > self.limits.wms_max_layers {
                return invalid(format!(
                    "ogcapi.default_collections names {} layers; a map draws at most \
                     limits.wms_max_layers ({})",
                    names.len(),
                    self.limits.wms_max_layers
                ));
            }
            for name in names {
                if !self.layers.iter().any(|l| l.name == *name) {
                    let unknown = crate::suggest::Unknown::among(
                        name,
                        "layers",
                        self.layers.iter().map(|l| l.name.as_str()),
                    );
                    return invalid(format!(
                        "ogcapi.default_collections: unknown layer {unknown}"
                    ));
                }
            }
        }
        if let Some(admin) = &self.admin {
            if admin.token.len() < 16 {
                return invalid("admin.token must be at least 16 characters".into());
            }
            if admin.sources_url.is_some() != admin.sources_file.is_some() {
                return invalid(
                    "admin.sources_url and admin.sources_file go together (uploads of sources); \
                     give both, or neither to keep uploads off"
                        .into(),
                );
            }
            if admin.part_size_bytes() < 5 << 20 || admin.parts_in_flight == 0 {
                return invalid(
                    "admin.part_size must be at least 5MiB and admin.parts_in_flight at least 1"
                        .into(),
                );
            }
        }
        if self.layers.is_empty() {
            return invalid("`layers` is empty: add at least one layer".into());
        }
        if let Err(message) = listen_address(&self.server.listen) {
            return invalid(format!("server.listen {message}"));
        }
        self.server.cors.check().or_else(invalid)?;
        if let Some(auth) = &self.auth {
            auth.check().or_else(invalid)?;
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
            if let Some(key) = &layer.cache.key
                && !valid_name(key)
            {
                return invalid(format!(
                    "layer {:?}: cache.key {key:?} must use only letters, digits, '_', '-' and '.'",
                    layer.name
                ));
            }
            layer.check_styles().or_else(invalid)?;
            if matches!(layer.style, LayerStyle::MapLibre(_))
                && !matches!(layer.source, SourceSpec::Vector(_))
            {
                return invalid(format!(
                    "layer {:?}: a MapLibre style is drawn by vector sources (type: vector) only",
                    layer.name
                ));
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
            if let Some(vector) = layer.formats.iter().find(|f| f.is_vector())
                && !matches!(
                    layer.source,
                    SourceSpec::Vector(_) | SourceSpec::PostgisAuto(_) | SourceSpec::Archive(..)
                )
            {
                return invalid(format!(
                    "layer {:?}: format {vector} (vector tiles) needs a vector source (type: vector) or a vector tile archive (pmtiles, mbtiles)",
                    layer.name
                ));
            }
            if let Some(elevation) = layer.formats.iter().find(|f| f.elevation().is_some()) {
                check_elevation_source(&layer.name, *elevation, &layer.source).or_else(invalid)?;
            }
            if layer.formats.contains(&TileFormat::Mlt) && !layer.formats.contains(&TileFormat::Mvt)
            {
                return invalid(format!(
                    "layer {:?}: format mlt is made from the layer's mvt tiles: list mvt too (formats: [mvt, mlt])",
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
            if let Some(max) = c.max_size {
                let quotable = matches!(
                    self.stores.get(&c.store),
                    Some(StoreSpec::File(_) | StoreSpec::Journal(_) | StoreSpec::Mbtiles(_))
                );
                if !quotable {
                    return invalid(format!(
                        "layer {:?}: cache.max_size needs a file, journal or mbtiles store (store {:?} is not one)",
                        layer.name, c.store
                    ));
                }
                if tessera_store::Size::or(Some(max), 0) == 0 {
                    return invalid(format!(
                        "layer {:?}: cache.max_size must be more than 0 (leave it out for no quota)",
                        layer.name
                    ));
                }
            }
            if c.max_stored_age
                .is_some_and(|a| !(a.is_finite() && a > 0.0))
            {
                return invalid(format!(
                    "layer {:?}: cache.max_stored_age must be a positive duration",
                    layer.name
                ));
            }
        }
        for (name, spec) in &self.stores {
            if !valid_name(name) || name == NO_STORE {
                return invalid(format!(
                    "store name {name:?} must use only letters, digits, '_', '-' and '.', and not be `none`"
                ));
            }
            spec.validate()
                .or_else(|m| invalid(format!("store {name:?}: {m}")))?;
        }
        self.check_ranges()
    }

    /// Every numeric setting within its range: a value outside it (or not
    /// a number) stops start-up with the range in the message, before any
    /// arithmetic on it can overflow.
    fn check_ranges(&self) -> Result<(), ConfigError> {
        let (s, c, l, e) = (&self.server, &self.cache, &self.limits, &self.encoding);
        let k = &self.cluster;
        let ranges: [(&str, f64, f64, f64); 24] = [
            (
                "cluster.lease_ttl_secs",
                k.lease_ttl_secs,
                1.0,
                MAX_TIMEOUT_SECS,
            ),
            (
                "cluster.lease_wait_secs",
                k.lease_wait_secs.unwrap_or(1.0),
                0.001,
                MAX_TIMEOUT_SECS,
            ),
            (
                "cluster.generation_check_secs",
                k.generation_check_secs,
                0.0,
                MAX_TIMEOUT_SECS,
            ),
            (
                "server.header_timeout_secs",
                s.header_timeout_secs,
                0.1,
                3600.0,
            ),
            (
                "server.idle_timeout_secs",
                s.idle_timeout_secs,
                0.1,
                MAX_TIMEOUT_SECS,
            ),
            (
                "server.shutdown_grace_secs",
                s.shutdown_grace_secs,
                0.0,
                3600.0,
            ),
            (
                "server.max_connections",
                s.max_connections as f64,
                0.0,
                1_000_000.0,
            ),
            (
                "server.connection_threads",
                s.connection_threads as f64,
                0.0,
                1024.0,
            ),
            (
                "server.render_timeout_secs",
                s.render_timeout_secs,
                0.001,
                MAX_TIMEOUT_SECS,
            ),
            (
                "server.max_concurrent_renders",
                s.max_concurrent_renders as f64,
                1.0,
                1024.0,
            ),
            ("server.wms_render_share", s.wms_render_share, 0.0, 1.0),
            (
                "limits.max_source_pixels",
                l.max_source_pixels as f64,
                1.0,
                1e15,
            ),
            (
                "cache.lock_timeout_secs",
                c.lock_timeout_secs,
                0.001,
                MAX_TIMEOUT_SECS,
            ),
            (
                "cache.metatile_threads",
                c.metatile_threads as f64,
                0.0,
                1024.0,
            ),
            (
                "cache.encode_queue_len",
                c.encode_queue_len as f64,
                0.0,
                1_048_576.0,
            ),
            (
                "limits.wms_max_width",
                f64::from(l.wms_max_width),
                1.0,
                65_535.0,
            ),
            (
                "limits.wms_max_height",
                f64::from(l.wms_max_height),
                1.0,
                65_535.0,
            ),
            (
                "limits.wms_max_pixels",
                l.wms_max_pixels as f64,
                1.0,
                1_073_741_824.0,
            ),
            ("limits.wms_max_layers", l.wms_max_layers as f64, 1.0, 256.0),
            (
                "limits.max_query_bytes",
                l.max_query_bytes as f64,
                256.0,
                1_048_576.0,
            ),
            (
                "encoding.jpeg_quality",
                f64::from(e.jpeg_quality),
                1.0,
                100.0,
            ),
            (
                "encoding.webp_quality",
                f64::from(e.webp_quality),
                0.0,
                100.0,
            ),
            (
                "gdal.cache_max_mb",
                self.gdal.cache_max_mb as f64,
                0.0,
                1_048_576.0,
            ),
            (
                "gdal.open_timeout_secs",
                self.gdal.open_timeout_secs,
                0.001,
                MAX_TIMEOUT_SECS,
            ),
        ];
        match ranges
            .iter()
            .find(|(_, v, lo, hi)| !(v.is_finite() && (*lo..=*hi).contains(v)))
        {
            Some((name, v, lo, hi)) => Err(ConfigError::Invalid(format!(
                "{name} is {v}; it must be from {lo} to {hi}"
            ))),
            None => Ok(()),
        }
    }
}

/// A duration in seconds: a number, or text with a unit (`500ms`, `10s`,
/// `2m`, `1h`).
/// The schema of a duration ([`seconds`]): a number of seconds, or text
/// with a unit.
pub(super) struct Seconds;

impl schemars::JsonSchema for Seconds {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Seconds".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A duration: a number of seconds, or text with a unit (500ms, 30s, 2m, 1h, 1d).",
            "anyOf": [
                { "type": "number", "minimum": 0 },
                { "type": "string", "pattern": "^\\s*[0-9.]+\\s*(ms|s|m|min|h|d)?\\s*$" }
            ]
        })
    }
}

/// The schema of a time ([`optional_timestamp`]): RFC 3339 text.
struct Timestamp;

impl schemars::JsonSchema for Timestamp {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Timestamp".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A time, RFC 3339 (2026-11-01T00:00:00Z).",
            "type": "string"
        })
    }
}

pub(super) fn optional_seconds<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<f64>, D::Error> {
    seconds(deserializer).map(Some)
}

fn optional_timestamp<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<std::time::SystemTime>, D::Error> {
    let text = String::deserialize(deserializer)?;
    humantime::parse_rfc3339_weak(text.trim())
        .map(Some)
        .map_err(|e| {
            serde::de::Error::custom(format!(
                "{text:?} is not a time: write RFC 3339, as \"2026-11-01T00:00:00Z\" ({e})"
            ))
        })
}

fn seconds<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Written {
        Number(f64),
        Text(String),
    }
    let text = match Written::deserialize(deserializer)? {
        Written::Number(n) => return Ok(n),
        Written::Text(t) => t,
    };
    let t = text.trim();
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let scale = match unit {
        "ms" => 0.001,
        "" | "s" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        "d" => 86_400.0,
        _ => f64::NAN,
    };
    match number.trim().parse::<f64>() {
        Ok(n) if scale.is_finite() => Ok(n * scale),
        _ => Err(serde::de::Error::custom(format!(
            "{text:?} is not a duration: write seconds, or a number with ms, s, m, h or d (\"30s\", \"2m\", \"7d\")"
        ))),
    }
}

/// Whether a source path is a relative file path (not a URL, not a `/vsi`
/// path, not a driver connection string such as `PG:...` or `WMS:...`).
fn is_relative_file(path: &str) -> bool {
    let connection_string = path.split_once(':').is_some_and(|(prefix, _)| {
        !prefix.is_empty()
            && prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
    });
    !path.is_empty() && !connection_string && Path::new(path).is_relative()
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

/// `text` with every character a layer name may not hold replaced by `_`
/// (`layer` when nothing is left).
pub fn clean_name(text: &str) -> String {
    let name: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if valid_name(&name) {
        name
    } else {
        "layer".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "layers:\n  - name: a\n    source: { path: \"${DATA}/x.tif\" }\n";

    #[test]
    fn lease_settings_are_read_and_checked() {
        let layer = "layers:\n  - name: a\n    source: { path: /x.tif }\n    cache: { store: s }\n";
        let ok = format!(
            "cluster: {{ leases: true, lease_ttl_secs: 10s }}\nstores:\n  s: {{ type: object, url: 's3://b/p' }}\n{layer}"
        );
        let c = Config::from_yaml(&ok, |_| None).unwrap();
        assert!(c.cluster.leases);
        assert!((c.cluster.lease_ttl_secs - 10.0).abs() < 1e-9);
        let err = Config::from_yaml(
            &format!(
                "cluster: {{ lease_ttl_secs: 0.5 }}\nstores:\n  s: {{ type: memory }}\n{layer}"
            ),
            |_| None,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("cluster.lease_ttl_secs"), "{err}");
    }

    #[test]
    fn substitutes_environment_variables_and_defaults() {
        let c = Config::from_yaml(MINIMAL, |n| (n == "DATA").then(|| "/d".to_string())).unwrap();
        assert_eq!(c.layers[0].source.location(), "/d/x.tif");
        let c = Config::from_yaml(
            "layers:\n  - name: a\n    source:\n      path: ${NOPE:-/def}/x.tif\n",
            |_| None,
        )
        .unwrap();
        assert_eq!(c.layers[0].source.location(), "/def/x.tif");
    }

    #[test]
    fn listen_must_be_an_address_with_a_port() {
        let base = "layers:\n  - name: a\n    source: { path: /x }\n";
        let parse = |listen: &str| {
            Config::from_yaml(&format!("server: {{ listen: '{listen}' }}\n{base}"), |_| {
                None
            })
        };
        for good in ["127.0.0.1:8080", "[::1]:80", "localhost:8080", "0.0.0.0:0"] {
            assert!(parse(good).is_ok(), "{good}");
        }
        for bad in [
            "not an address",
            "127.0.0.1",
            "localhost:http",
            ":8080",
            "a b:80",
            "1.2.3.4:70000",
        ] {
            let err = parse(bad).unwrap_err();
            assert!(err.to_string().contains("server.listen"), "{bad}: {err}");
        }
    }

    #[test]
    fn cors_is_a_switch_or_a_map_of_checked_origins() {
        let base = "layers:\n  - name: a\n    source: { path: /x }\n";
        let parse =
            |server: &str| Config::from_yaml(&format!("server: {server}\n{base}"), |_| None);
        let c = Config::from_yaml(base, |_| None).unwrap();
        assert!(c.server.cors.enabled && c.server.cors.any_origin() && !c.server.cors.admin);
        assert!(!parse("{ cors: false }").unwrap().server.cors.enabled);
        assert!(!parse("{ cors: off }").unwrap().server.cors.enabled);
        let c = parse("{ cors: { origins: [\"https://maps.example\", \"http://localhost:3000\"], max_age_secs: 60 } }")
            .unwrap();
        assert_eq!(c.server.cors.origins.len(), 2);
        assert_eq!(c.server.cors.max_age_secs, 60);
        let err = parse("{ cors: { origin: [\"*\"] } }").unwrap_err();
        assert!(err.to_string().contains("origin"), "{err}");
        for bad in [
            "https://maps.example/",
            "maps.example",
            "ftp://x",
            "https://*.example",
        ] {
            let err = parse(&format!("{{ cors: {{ origins: [\"{bad}\"] }} }}")).unwrap_err();
            assert!(err.to_string().contains("is not an origin"), "{bad}: {err}");
        }
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
        let default = &c.stores[DEFAULT_STORE];
        assert_eq!(default.kind(), "memory");
        let budget = default.open("default").unwrap();
        assert!(budget.is_volatile());
        assert_eq!(c.layers[0].cache.store, DEFAULT_STORE);
        assert_eq!(c.layers[0].cache.metatile, [4, 4]);
        let c = Config::from_yaml(
            "stores:\n  disk: { type: file, path: /c, layout: tms }\nlayers:\n  - name: a\n    source: { path: /x }\n    cache: { store: disk, durability: synced }\n",
            |_| None,
        )
        .unwrap();
        let Some(StoreSpec::File(disk)) = c.stores.get("disk") else {
            panic!("{:?}", c.stores)
        };
        assert_eq!(disk.layout, tessera_store::FileLayout::Tms);
        assert_eq!(c.stores["disk"].front_bytes(), 64 << 20);
        assert_eq!(c.layers[0].cache.durability, Durability::Synced);
    }

    #[test]
    fn sizes_take_units_and_the_older_mib_keys_mean_the_same() {
        let yaml = |store: &str| {
            format!(
                "stores:\n  disk: {{ type: file, path: /c, {store} }}\nlayers:\n  - name: a\n    source: {{ path: /x }}\n    cache: {{ store: disk }}\n"
            )
        };
        let units = Config::from_yaml(&yaml("memory: 64MiB"), |_| None).unwrap();
        let mib = Config::from_yaml(&yaml("memory_mb: 64"), |_| None).unwrap();
        assert_eq!(units.stores["disk"].front_bytes(), 64 << 20);
        assert_eq!(mib.stores["disk"].front_bytes(), 64 << 20);
        let big = Config::from_yaml(&yaml("memory: 1GiB"), |_| None).unwrap();
        assert_eq!(big.stores["disk"].front_bytes(), 1 << 30);
        let err = Config::from_yaml(&yaml("memory: 1MiB, memory_mb: 1"), |_| None).unwrap_err();
        assert!(err.to_string().contains("duplicate field"), "{err}");
        let err = Config::from_yaml(&yaml("memory: lots"), |_| None).unwrap_err();
        assert!(err.to_string().contains("stores.disk"), "{err}");
    }

    #[test]
    fn variables_in_comments_are_ignored_and_doubled_dollars_are_literal() {
        let c = Config::from_yaml(
            "# set ${UNSET} before starting\nserver:\n  title: \"tiles $${z}\" # ${ALSO_UNSET}\nlayers:\n  - name: a\n    source: { path: /x }\n",
            |_| None,
        )
        .unwrap();
        assert_eq!(c.server.title, "tiles ${z}");
    }

    #[test]
    fn a_whole_value_variable_can_be_a_number() {
        let c = Config::from_yaml(
            "server:\n  max_concurrent_renders: ${RENDERS}\nlayers:\n  - name: a\n    source: { path: /x }\n",
            |n| (n == "RENDERS").then(|| "3".to_string()),
        )
        .unwrap();
        assert_eq!(c.server.max_concurrent_renders, 3);
    }

    #[test]
    fn relative_paths_resolve_against_the_config_files_directory() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tessera.yaml");
        std::fs::write(
            &file,
            "stores:\n  default: { type: file, path: cache }\nlayers:\n  - name: a\n    source: { path: data/relief.tif }\n  - name: b\n    source: { path: /abs/x.tif }\n  - name: c\n    source: { path: \"PG:dbname=gis\" }\n  - name: d\n    source: { path: \"/vsicurl/https://example.com/x.tif\" }\n",
        )
        .unwrap();
        let c = Config::from_file(&file).unwrap();
        let base = std::path::absolute(dir.path()).unwrap();
        assert_eq!(
            c.layers[0].source.location(),
            base.join("data/relief.tif").display().to_string()
        );
        assert_eq!(c.layers[1].source.location(), "/abs/x.tif");
        assert_eq!(c.layers[2].source.location(), "PG:dbname=gis");
        assert_eq!(
            c.layers[3].source.location(),
            "/vsicurl/https://example.com/x.tif"
        );
        let Some(StoreSpec::File(disk)) = c.stores.get("default") else {
            panic!()
        };
        assert_eq!(disk.path, base.join("cache"));
    }

    #[test]
    fn durations_take_units() {
        let base = "layers:\n  - name: a\n    source: { path: /x }\n";
        let c = Config::from_yaml(
            &format!("server: {{ render_timeout_secs: 2m }}\ncache: {{ lock_timeout_secs: 1500ms }}\n{base}"),
            |_| None,
        )
        .unwrap();
        assert!((c.server.render_timeout_secs - 120.0).abs() < 1e-9);
        assert!((c.cache.lock_timeout_secs - 1.5).abs() < 1e-9);
        let c = Config::from_yaml(
            &format!("server: {{ render_timeout_secs: 10s }}\n{base}"),
            |_| None,
        )
        .unwrap();
        assert!((c.server.render_timeout_secs - 10.0).abs() < 1e-9);
        let err = Config::from_yaml(
            &format!("server: {{ render_timeout_secs: 10 parsecs }}\n{base}"),
            |_| None,
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("not a duration") && err.to_string().contains("server"),
            "{err}"
        );
    }

    #[test]
    fn numbers_out_of_range_are_refused_with_the_range() {
        let base = "layers:\n  - name: a\n    source: { path: /x }\n";
        for (yaml, needle) in [
            (
                "server: { render_timeout_secs: 1e19 }\n",
                "server.render_timeout_secs",
            ),
            (
                "server: { render_timeout_secs: 1e20 }\n",
                "server.render_timeout_secs",
            ),
            (
                "cache: { lock_timeout_secs: 1e20 }\n",
                "cache.lock_timeout_secs",
            ),
            (
                "server: { max_concurrent_renders: 4000000000000000000 }\n",
                "server.max_concurrent_renders",
            ),
            (
                "cache: { metatile_threads: 100000 }\n",
                "cache.metatile_threads",
            ),
            ("encoding: { webp_quality: 999 }\n", "encoding.webp_quality"),
            ("encoding: { jpeg_quality: 0 }\n", "encoding.jpeg_quality"),
            ("limits: { wms_max_width: 0 }\n", "limits.wms_max_width"),
        ] {
            let err = Config::from_yaml(&format!("{yaml}{base}"), |_| None).unwrap_err();
            assert!(
                matches!(&err, ConfigError::Invalid(m) if m.contains(needle) && m.contains("must be from")),
                "{yaml}: {err}"
            );
        }
        assert!(
            Config::from_yaml(
                &format!("server: {{ render_timeout_secs: 86400 }}\n{base}"),
                |_| None
            )
            .is_ok()
        );
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
