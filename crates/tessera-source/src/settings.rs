//! Process-wide GDAL settings: block cache size, network timeouts, and
//! in-memory files for the embedded demo data.

use std::collections::BTreeMap;

use gdal::errors::CplErrType;
use serde::Deserialize;

use crate::LocationPolicy;
use crate::location::DEFAULT_DRIVERS;

/// GDAL settings from the `gdal:` section of the configuration.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct GdalSettings {
    /// Upper bound of GDAL's raster block cache, in MiB (default 256).
    pub cache_max_mb: u64,
    /// Timeout of each HTTP request GDAL makes, in seconds (default 30).
    pub http_timeout_secs: u64,
    /// Timeout for connecting to a remote source, in seconds (default 10).
    pub http_connect_timeout_secs: u64,
    /// Retries of a failed HTTP request (default 2).
    pub http_max_retry: u32,
    /// Dataset handles kept open per source for reuse (default 8).
    pub max_idle_handles: usize,
    /// Longest time opening a source may take at start, in seconds
    /// (default 60); past it start-up stops with an error naming the source.
    pub open_timeout_secs: f64,
    /// GDAL drivers allowed to open sources.
    pub allowed_drivers: Vec<String>,
    /// Allow every driver, including VRT, which can read arbitrary local files.
    pub allow_unsafe_drivers: bool,
    /// Allow sources at loopback, link-local and private network addresses.
    pub allow_private_network: bool,
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
            max_idle_handles: 8,
            open_timeout_secs: 60.0,
            allowed_drivers: DEFAULT_DRIVERS.iter().map(|s| (*s).to_string()).collect(),
            allow_unsafe_drivers: false,
            allow_private_network: false,
            config_options: BTreeMap::new(),
        }
    }
}

impl GdalSettings {
    /// The location policy these settings describe.
    pub fn policy(&self) -> LocationPolicy {
        LocationPolicy {
            allowed_drivers: if self.allow_unsafe_drivers {
                Vec::new()
            } else {
                self.allowed_drivers.clone()
            },
            allow_private_network: self.allow_private_network,
        }
    }
}

/// Applies the settings to the GDAL library (process-wide; call once at start).
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
    for (key, value) in &settings.config_options {
        set(key, value)?;
    }
    Ok(())
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
