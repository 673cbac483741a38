//! Process-wide GDAL settings: block cache size, network timeouts, and
//! in-memory files for the embedded demo data.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use gdal::errors::CplErrType;
use serde::Deserialize;

use crate::LocationPolicy;
use crate::location::DEFAULT_DRIVERS;

/// GDAL settings from the `gdal:` section of the configuration.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "each is a setting of the file, read by name"
)]
pub struct GdalSettings {
    /// Upper bound of GDAL's raster block cache, in MiB (default 256).
    pub cache_max_mb: u64,
    /// Timeout of each HTTP request GDAL makes, in seconds (default 30).
    pub http_timeout_secs: u64,
    /// Timeout for connecting to a remote source, in seconds (default 10).
    pub http_connect_timeout_secs: u64,
    /// Retries of a failed HTTP request (default 2).
    pub http_max_retry: u32,
    /// Decode the blocks of tiled Float32 TIFFs (DEMs; uncompressed,
    /// DEFLATE or LZW, any predictor) in tessera rather than in libtiff,
    /// and resample them where they lie with GDAL's own arithmetic, the
    /// same values as GDAL's read (default true): several times faster
    /// with the floating-point predictor. `false` leaves every block to
    /// GDAL.
    pub decode_float_blocks: bool,
    /// Upper bound of the blocks decoded by tessera kept for later reads,
    /// shared by every source, in MiB (default 128): of the Float32
    /// blocks, and of the byte blocks `shared_byte_blocks` keeps, each;
    /// they are apart from GDAL's cache (`cache_max_mb`).
    pub decoded_blocks_mb: u64,
    /// Keep the blocks of byte rasters (a JPEG or WebP COG's, say) that
    /// reads at a level's own scale take (tiles of a COG in their grid) in
    /// one cache shared by every thread, each block decoded once by GDAL
    /// however many reads in flight need it (default true), bounded by
    /// `decoded_blocks_mb` apart from the Float32 blocks. `false` leaves
    /// them to GDAL's cache, which is per dataset handle: two reads on two
    /// handles decode a block twice.
    pub shared_byte_blocks: bool,
    /// Dataset handles kept open per source for reuse (default 8).
    pub max_idle_handles: usize,
    /// Threads one read may decode the blocks it covers on (GDAL's
    /// `GDAL_NUM_THREADS`, shared by the process, and tessera's own pool
    /// for Float32 blocks): 0 (default) one per core, 1 none. A tile over several compressed blocks (a DEM's
    /// float blocks, a metatile) is read faster when cores are idle; warps
    /// stay on their render's thread (renders already run in parallel).
    /// `config_options: { GDAL_NUM_THREADS: ... }` takes precedence.
    pub threads: usize,
    /// Longest time opening a source may take at start, in seconds
    /// (default 60); past it start-up stops with an error naming the source.
    pub open_timeout_secs: f64,
    /// GDAL drivers allowed to open sources.
    pub allowed_drivers: Vec<String>,
    /// Allow every driver, including VRT, which can read arbitrary local files.
    pub allow_unsafe_drivers: bool,
    /// Allow sources at loopback, link-local and private network addresses.
    pub allow_private_network: bool,
    /// Hosts (`name` or `name:port`) that may be reached although they
    /// resolve to a private address: an internal COG server, say, while
    /// every other private address stays refused. Object-store endpoints
    /// set in `config_options` are added to it.
    pub allowed_private_hosts: Vec<String>,
    /// Further GDAL configuration options, for example `AWS_S3_ENDPOINT`,
    /// `AWS_ACCESS_KEY_ID: ${AWS_ACCESS_KEY_ID}` or `GS_NO_SIGN_REQUEST`.
    pub config_options: BTreeMap<String, String>,
}

impl Default for GdalSettings {
    fn default() -> Self {
        Self {
            cache_max_mb: 256,
            http_timeout_secs: 30,
            http_connect_timeout_secs: 10,
            http_max_retry: 2,
            decode_float_blocks: true,
            decoded_blocks_mb: 128,
            shared_byte_blocks: true,
            max_idle_handles: 8,
            threads: 0,
            open_timeout_secs: 60.0,
            allowed_drivers: DEFAULT_DRIVERS.iter().map(|s| (*s).to_string()).collect(),
            allow_unsafe_drivers: false,
            allow_private_network: false,
            allowed_private_hosts: Vec::new(),
            config_options: BTreeMap::new(),
        }
    }
}

impl GdalSettings {
    /// The hosts of object-store endpoints written in `config_options`
    /// (`AWS_S3_ENDPOINT`, `CPL_GS_ENDPOINT`, the `BlobEndpoint` of
    /// `AZURE_STORAGE_CONNECTION_STRING`): the operator chose them, so the
    /// egress guard lets GDAL reach them even on a private network.
    pub fn configured_endpoints(&self) -> Vec<String> {
        let authority = |url: &str| -> String {
            let rest = url.split_once("://").map_or(url, |(_, r)| r);
            rest.split(['/', '?', '#'])
                .next()
                .unwrap_or_default()
                .to_string()
        };
        let mut hosts = Vec::new();
        for key in ["AWS_S3_ENDPOINT", "CPL_GS_ENDPOINT"] {
            if let Some(url) = self.config_options.get(key) {
                hosts.push(authority(url));
            }
        }
        if let Some(conn) = self.config_options.get("AZURE_STORAGE_CONNECTION_STRING") {
            for part in conn.split(';') {
                if let Some((k, v)) = part.split_once('=')
                    && matches!(k.trim(), "BlobEndpoint" | "DfsEndpoint")
                {
                    hosts.push(authority(v.trim()));
                }
            }
        }
        hosts.retain(|h| !h.is_empty());
        hosts
    }

    /// The location policy these settings describe.
    pub fn policy(&self) -> LocationPolicy {
        LocationPolicy {
            allowed_drivers: if self.allow_unsafe_drivers {
                Vec::new()
            } else {
                self.allowed_drivers.clone()
            },
            allow_private_network: self.allow_private_network,
            allowed_private_hosts: self.allowed_private_hosts.clone(),
        }
    }
}

/// Applies the settings to the GDAL library (process-wide; call once at
/// start, again to change them).
///
/// Unless private networks are allowed, GDAL's HTTP requests go through the
/// egress guard (see `egress`), which checks every request GDAL makes,
/// redirects included, against the same rules as the source check; a
/// `GDAL_HTTP_PROXY` of the user's own replaces it (with a warning).
///
/// GDAL's own messages go to the log instead of straight to stderr: a
/// failure comes back to the caller as an error that carries GDAL's message
/// (so it is logged at debug level here, not printed twice), a warning is
/// logged as a warning.
pub fn configure_gdal(settings: &GdalSettings) -> Result<(), gdal::errors::GdalError> {
    gdal::config::set_error_handler(|class, code, message| match class {
        CplErrType::Warning => tracing::warn!(target: "gdal", code, "{message}"),
        CplErrType::Failure | CplErrType::Fatal => {
            tracing::debug!(target: "gdal", code, "{message}");
        }
        CplErrType::None | CplErrType::Debug => tracing::trace!(target: "gdal", code, "{message}"),
    });
    let cache = settings.cache_max_mb.saturating_mul(1024 * 1024);
    // SAFETY: GDALSetCacheMax64 only stores the new limit.
    unsafe { gdal_sys::GDALSetCacheMax64(i64::try_from(cache).unwrap_or(i64::MAX)) };
    DECODED_BYTES.store(
        usize::try_from(settings.decoded_blocks_mb.saturating_mul(1 << 20)).unwrap_or(usize::MAX),
        Ordering::Relaxed,
    );
    DECODE_THREADS.store(settings.threads, Ordering::Relaxed);
    let set = gdal::config::set_config_option;
    set("GDAL_HTTP_TIMEOUT", &settings.http_timeout_secs.to_string())?;
    set(
        "GDAL_HTTP_CONNECTTIMEOUT",
        &settings.http_connect_timeout_secs.to_string(),
    )?;
    set("GDAL_HTTP_MAX_RETRY", &settings.http_max_retry.to_string())?;
    set("GDAL_HTTP_RETRY_DELAY", "0.5")?;
    set("GDAL_DISABLE_READDIR_ON_OPEN", "EMPTY_DIR")?;
    set(
        "CPL_VSIL_CURL_ALLOWED_EXTENSIONS",
        ".tif,.tiff,.TIF,.TIFF,.jp2,.png,.jpg,.webp,.gpkg,.nc",
    )?;
    set("GDAL_PAM_ENABLED", "NO")?;
    set("CPL_DEBUG", "OFF")?;
    set("GDAL_NUM_THREADS", &num_threads(settings.threads))?;
    for (key, value) in &settings.config_options {
        set(key, value)?;
    }
    route_through_guard(settings)
}

/// Bytes the Float32 blocks decoded by tessera may hold, across sources
/// (`decoded_blocks_mb`), as [`configure_gdal`] last set it.
static DECODED_BYTES: AtomicUsize = AtomicUsize::new(128 << 20);
/// Threads one read may decode its blocks on (`threads`; 0: one per core).
static DECODE_THREADS: AtomicUsize = AtomicUsize::new(0);

/// The bytes Float32 blocks decoded by tessera may hold, and the threads
/// one read may decode them on (0: one per core), as the settings last
/// applied say.
pub(crate) fn decoding() -> (usize, usize) {
    (
        DECODED_BYTES.load(Ordering::Relaxed),
        DECODE_THREADS.load(Ordering::Relaxed),
    )
}

/// `GDAL_NUM_THREADS` for `threads` (0: one per core).
fn num_threads(threads: usize) -> String {
    if threads == 0 {
        "ALL_CPUS".to_string()
    } else {
        threads.to_string()
    }
}

/// Points GDAL's HTTP proxy at the egress guard when private networks are
/// refused; clears it when they are allowed.
fn route_through_guard(settings: &GdalSettings) -> Result<(), gdal::errors::GdalError> {
    let set = gdal::config::set_config_option;
    if settings.config_options.contains_key("GDAL_HTTP_PROXY") {
        if !settings.allow_private_network {
            tracing::warn!(
                "gdal.config_options sets GDAL_HTTP_PROXY: redirects GDAL follows are not checked against the private-network rule"
            );
        }
        return Ok(());
    }
    if settings.allow_private_network {
        for key in [
            "GDAL_HTTP_PROXY",
            "GDAL_HTTP_PROXYUSERPWD",
            "GDAL_PROXY_AUTH",
        ] {
            if !settings.config_options.contains_key(key) {
                gdal::config::clear_config_option(key)?;
            }
        }
        return Ok(());
    }
    for var in ["no_proxy", "NO_PROXY"] {
        if std::env::var_os(var).is_some_and(|v| !v.is_empty()) {
            tracing::warn!(
                variable = var,
                "the environment names hosts GDAL reaches without its proxy: requests to them are not checked against the private-network rule"
            );
        }
    }
    let mut allowed = settings.allowed_private_hosts.clone();
    allowed.extend(settings.configured_endpoints());
    let policy = crate::EgressPolicy {
        allowed_private_hosts: allowed,
        connect_timeout: std::time::Duration::from_secs(settings.http_connect_timeout_secs.max(1)),
    };
    match crate::egress_guard(policy) {
        Ok(guard) => {
            set("GDAL_HTTP_PROXY", &guard.address.to_string())?;
            set("GDAL_HTTP_PROXYUSERPWD", &guard.credentials)?;
            set("GDAL_PROXY_AUTH", "BASIC")
        }
        Err(e) => {
            // Without the guard GDAL must not reach the network unchecked:
            // point it at a proxy that cannot be reached.
            tracing::error!(
                error = &e as &dyn std::error::Error,
                "the egress guard cannot start; GDAL's HTTP requests will fail"
            );
            set("GDAL_HTTP_PROXY", "127.0.0.1:9")
        }
    }
}

/// Makes `bytes` readable by GDAL at `path` (which must start with
/// `/vsimem/`). The bytes are borrowed for the life of the process, never
/// copied.
pub fn register_static_file(path: &str, bytes: &'static [u8]) -> Result<(), String> {
    if !path.starts_with("/vsimem/") {
        return Err(format!("{path} is not under /vsimem/"));
    }
    let c_path = std::ffi::CString::new(path).map_err(|e| e.to_string())?;
    // SAFETY: GDAL only reads the buffer (files opened read-only; no
    // ownership taken, bTakeOwnership = 0), and `bytes` lives for 'static.
    let handle = unsafe {
        gdal_sys::VSIFileFromMemBuffer(
            c_path.as_ptr(),
            bytes.as_ptr().cast_mut(),
            bytes.len() as u64,
            0,
        )
    };
    if handle.is_null() {
        return Err(format!("GDAL refused to register {path}"));
    }
    // SAFETY: `handle` was just returned non-null by VSIFileFromMemBuffer.
    unsafe { gdal_sys::VSIFCloseL(handle) };
    Ok(())
}

/// Forgets what GDAL has cached of the network file at `path` (a `/vsis3/`,
/// `/vsigs/`, `/vsiaz/` or `/vsicurl/` path): the next open reads the
/// object again. Call it when the object was replaced.
pub fn forget_network_cache(path: &str) {
    if let Ok(prefix) = std::ffi::CString::new(path) {
        // SAFETY: a valid NUL-terminated string, only read during the call.
        unsafe { gdal_sys::VSICurlPartialClearCache(prefix.as_ptr()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_store_endpoints_in_config_options_are_trusted_hosts() {
        let mut settings = GdalSettings::default();
        for (k, v) in [
            ("AWS_S3_ENDPOINT", "127.0.0.1:9000"),
            ("CPL_GS_ENDPOINT", "http://localhost:4443/storage/v1/"),
            (
                "AZURE_STORAGE_CONNECTION_STRING",
                "DefaultEndpointsProtocol=http;AccountName=a;BlobEndpoint=http://127.0.0.1:10000/a;",
            ),
        ] {
            settings.config_options.insert(k.into(), v.into());
        }
        assert_eq!(
            settings.configured_endpoints(),
            ["127.0.0.1:9000", "localhost:4443", "127.0.0.1:10000"]
        );
    }

    #[test]
    fn reads_decode_on_every_core_unless_told_otherwise() {
        assert_eq!(num_threads(0), "ALL_CPUS");
        assert_eq!(num_threads(1), "1");
        let settings: GdalSettings = serde_json::from_str(r#"{"threads": 3}"#).unwrap();
        assert_eq!(num_threads(settings.threads), "3");
        assert_eq!(GdalSettings::default().threads, 0);
    }
}
