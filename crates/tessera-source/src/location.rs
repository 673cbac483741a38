//! Which source locations and GDAL drivers may be opened.
//!
//! A crafted source can make GDAL read any local file (a VRT pointing at
//! `/etc/shadow`) or make the server fetch from internal addresses
//! (`http://169.254.169.254/`). This module refuses both unless the
//! configuration says otherwise.

use std::net::{IpAddr, ToSocketAddrs};

use crate::SourceError;

/// What sources may point at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocationPolicy {
    /// GDAL drivers that may open sources.
    pub allowed_drivers: Vec<String>,
    /// Allow loopback, link-local and private network addresses in URLs.
    pub allow_private_network: bool,
    /// Hosts (`name` or `name:port`) that may be reached even though they
    /// resolve to a private address.
    pub allowed_private_hosts: Vec<String>,
}

impl Default for LocationPolicy {
    fn default() -> Self {
        Self {
            allowed_drivers: DEFAULT_DRIVERS.iter().map(|s| (*s).to_string()).collect(),
            allow_private_network: false,
            allowed_private_hosts: Vec::new(),
        }
    }
}

/// Raster drivers that read only the file they are given (and its usual
/// sidecars). VRT and friends, which can reference arbitrary files, are not
/// in the list.
pub const DEFAULT_DRIVERS: &[&str] = &[
    "GTiff",
    "COG",
    "PNG",
    "JPEG",
    "WEBP",
    "GPKG",
    "JP2OpenJPEG",
    "HFA",
    "AAIGrid",
    "netCDF",
    "GRIB",
];

/// Normalises a source location and checks it against `policy`.
///
/// Plain `http(s)://` URLs become `/vsicurl/` paths. `file://` URLs, other
/// `/vsi` handlers that reach the network in ways this check cannot see, and
/// URLs whose host resolves to a loopback, link-local, private or
/// unspecified address (unless allowed) are refused.
pub fn check_location(path: &str, policy: &LocationPolicy) -> Result<String, SourceError> {
    let refuse = |reason: &str| SourceError::NotAllowed {
        path: path.to_string(),
        reason: reason.to_string(),
    };
    if path.is_empty() || path.contains('\0') {
        return Err(refuse("empty path or NUL byte"));
    }
    let lower = path.to_ascii_lowercase();
    if lower.starts_with("file:") {
        return Err(refuse("file:// URLs are not sources; give a plain path"));
    }
    let normalized = if lower.starts_with("http://") || lower.starts_with("https://") {
        format!("/vsicurl/{path}")
    } else {
        path.to_string()
    };
    let lower = normalized.to_ascii_lowercase();
    if let Some(url) = lower.strip_prefix("/vsicurl/") {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(refuse("only http and https URLs may be read"));
        }
        if !policy.allow_private_network {
            check_public_host(url, &policy.allowed_private_hosts).map_err(|r| refuse(&r))?;
        }
    } else if lower.starts_with("/vsi") {
        let allowed = [
            "/vsis3/",
            "/vsigs/",
            "/vsiaz/",
            "/vsiadls/",
            "/vsimem/",
            "/vsizip/",
            "/vsigzip/",
        ];
        if !allowed.iter().any(|p| lower.starts_with(p)) {
            return Err(refuse("this /vsi handler is not allowed for sources"));
        }
        if (lower.starts_with("/vsizip/") || lower.starts_with("/vsigzip/"))
            && lower.contains("/vsicurl")
        {
            return Err(refuse("nested network handlers are not allowed"));
        }
    } else if let Some(reason) = special_file(std::path::Path::new(&normalized)) {
        return Err(refuse(reason));
    }
    check_everything_opened(&normalized, policy).map_err(|r| refuse(&r))?;
    Ok(normalized)
}

/// Why a local path that exists is not something to read as a raster: a
/// FIFO or a device blocks or never ends, a socket cannot be read at all.
fn special_file(path: &std::path::Path) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    let kind = std::fs::metadata(path).ok()?.file_type();
    if kind.is_fifo() {
        Some("it is a FIFO; only regular files are read")
    } else if kind.is_char_device() || kind.is_block_device() {
        Some("it is a device; only regular files are read")
    } else if kind.is_socket() {
        Some("it is a socket; only regular files are read")
    } else {
        None
    }
}

/// GDAL driver prefixes of connection strings (`GTIFF_DIR:1:path`,
/// `NETCDF:"path":var`, ...) and the driver each hands the string to.
const CONNECTION_PREFIXES: &[(&str, &str)] = &[
    ("GTIFF_DIR", "GTiff"),
    ("GTIFF_RAW", "GTiff"),
    ("NETCDF", "netCDF"),
    ("GPKG", "GPKG"),
    ("HDF5", "HDF5"),
    ("HDF4_SDS", "HDF4"),
    ("HDF4_EOS", "HDF4"),
    ("NITF_IM", "NITF"),
    ("JP2OPENJPEG", "JP2OpenJPEG"),
];

/// `/vsi` handlers a source may use anywhere in its string.
const ALLOWED_VSI: &[&str] = &[
    "vsicurl", "vsis3", "vsigs", "vsiaz", "vsiadls", "vsimem", "vsizip", "vsigzip",
];

/// Checks everything GDAL will open from `path`, wherever it stands in the
/// string: a driver prefix wrapping another path must name an allowed
/// driver, every `/vsi` handler must be allowed, and every URL must use
/// http(s) and (unless allowed) reach a public address.
fn check_everything_opened(path: &str, policy: &LocationPolicy) -> Result<(), String> {
    let lower = path.to_ascii_lowercase();
    if let Some((prefix, _)) = path.split_once(':')
        && !prefix.is_empty()
        && !prefix.starts_with('/')
        && prefix
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !lower.starts_with("http")
    {
        let upper = prefix.to_ascii_uppercase();
        let Some((_, driver)) = CONNECTION_PREFIXES.iter().find(|(p, _)| *p == upper) else {
            return Err(format!(
                "the connection-string prefix {prefix:?} is not one tessera can check"
            ));
        };
        if !policy.allowed_drivers.is_empty()
            && !policy
                .allowed_drivers
                .iter()
                .any(|d| d.eq_ignore_ascii_case(driver))
        {
            return Err(format!(
                "the {prefix}: prefix opens driver {driver}, which is not in gdal.allowed_drivers"
            ));
        }
    }
    if lower.contains("/vsicurl?") {
        return Err("the /vsicurl?url= form is not accepted; write /vsicurl/URL".into());
    }
    for (at, _) in lower.match_indices("/vsi") {
        let name: String = lower[at + 1..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !ALLOWED_VSI.contains(&name.as_str()) {
            return Err(format!("the /{name}/ handler is not allowed for sources"));
        }
    }
    for (at, _) in lower.match_indices("://") {
        let scheme_start = lower[..at]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '.' | '-')))
            .map_or(0, |i| i + 1);
        let scheme = &lower[scheme_start..at];
        if scheme != "http" && scheme != "https" {
            return Err(format!(
                "{scheme}:// URLs are not sources; only http and https"
            ));
        }
        let end = path[at..]
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | ',' | ';' | ')' | '>'))
            .map_or(path.len(), |i| at + i);
        if !policy.allow_private_network {
            check_public_host(&path[scheme_start..end], &policy.allowed_private_hosts)?;
        }
    }
    Ok(())
}

/// Whether `host` (at `port`) is listed in `allowed`, as `host` or
/// `host:port` (case-insensitive).
pub(crate) fn host_is_allowed(host: &str, port: u16, allowed: &[String]) -> bool {
    allowed.iter().any(|entry| {
        let entry = entry.trim();
        let (name, entry_port) = if let Some(rest) = entry.strip_prefix('[') {
            let (name, after) = rest.split_once(']').unwrap_or((rest, ""));
            (name, after.strip_prefix(':'))
        } else if entry.matches(':').count() == 1 {
            let (name, p) = entry.split_once(':').unwrap_or((entry, ""));
            (name, Some(p))
        } else {
            (entry, None)
        };
        name.eq_ignore_ascii_case(host) && entry_port.is_none_or(|p| p.parse() == Ok(port))
    })
}

fn check_public_host(url: &str, allowed: &[String]) -> Result<(), String> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let default_port = if url.to_ascii_lowercase().starts_with("https") {
        443
    } else {
        80
    };
    let (host, port) = if let Some(stripped) = host_port.strip_prefix('[') {
        let (h, p) = stripped.split_once(']').unwrap_or((stripped, ""));
        (
            h.to_string(),
            p.trim_start_matches(':').parse().unwrap_or(default_port),
        )
    } else {
        match host_port.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), p.parse().unwrap_or(default_port)),
            None => (host_port.to_string(), default_port),
        }
    };
    if host.is_empty() {
        return Err("URL has no host".into());
    }
    if host_is_allowed(&host, port, allowed) {
        return Ok(());
    }
    let addrs: Vec<IpAddr> = (host.as_str(), port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host}: {e}"))?
        .map(|a| a.ip())
        .collect();
    if let Some(ip) = addrs.iter().find(|ip| !is_public(ip)) {
        return Err(format!(
            "{host} resolves to {ip}, a loopback, link-local or private address \
             (list the host in gdal.allowed_private_hosts, or set \
             gdal.allow_private_network: true)"
        ));
    }
    Ok(())
}

/// Whether `ip` is a public address: not loopback, private, link-local,
/// unspecified, broadcast or carrier-grade NAT.
pub(crate) fn is_public(ip: &IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.octets()[0] == 100 && (v4.octets()[1] & 0xC0) == 64)
        }
        IpAddr::V6(v6) => {
            let seg0 = v6.segments()[0];
            !(v6.is_loopback()
                || v6.is_unspecified()
                || (seg0 & 0xFE00) == 0xFC00
                || (seg0 & 0xFFC0) == 0xFE80
                || v6
                    .to_ipv4_mapped()
                    .is_some_and(|v4| !is_public(&IpAddr::V4(v4))))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_wrapped_in_connection_strings_are_checked_too() {
        let strict = LocationPolicy::default();
        let open = LocationPolicy {
            allow_private_network: true,
            ..LocationPolicy::default()
        };
        for path in [
            "GTIFF_DIR:1:/vsicurl/http://127.0.0.1:8080/x.tif",
            "GTIFF_RAW:/vsicurl/http://127.0.0.1:8080/x.tif",
            "GPKG:/vsicurl/http://127.0.0.1:8080/x.gpkg:tiles",
            "NETCDF:\"http://127.0.0.1:8080/x.nc\":v",
            "/vsizip//vsis3/bucket/x.zip/http://127.0.0.1/y.tif",
        ] {
            let err = check_location(path, &strict).unwrap_err();
            assert!(
                matches!(&err, SourceError::NotAllowed { reason, .. } if reason.contains("127.0.0.1")),
                "{path}: {err}"
            );
        }
        assert!(check_location("GTIFF_DIR:1:/vsicurl/http://127.0.0.1:8080/x.tif", &open).is_ok());
        for (path, needle) in [
            ("GTIFF_DIR:1:/vsicurl/ftp://example.com/x.tif", "only http"),
            ("NETCDF:\"file:///etc/passwd\":v", "file://"),
            ("HDF5:/data/x.h5://a", "HDF5"),
            ("WEIRD:/data/x.tif", "WEIRD"),
            ("GTIFF_DIR:1:/vsistdin/", "vsistdin"),
            ("/vsicurl?url=http%3A%2F%2F127.0.0.1%2Fx.tif", "handler"),
            (
                "GTIFF_DIR:1:/vsicurl?url=http%3A%2F%2F127.0.0.1%2Fx.tif",
                "/vsicurl?url=",
            ),
        ] {
            let err = check_location(path, &open).unwrap_err();
            assert!(err.to_string().contains("not allowed"), "{path}: {err}");
            assert!(
                matches!(&err, SourceError::NotAllowed { reason, .. } if reason.contains(needle)),
                "{path}: {err:?}"
            );
        }
    }

    #[test]
    fn special_files_are_refused_and_regular_files_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe.tif");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(status.success());
        let policy = LocationPolicy::default();
        let err = check_location(fifo.to_str().unwrap(), &policy).unwrap_err();
        assert!(err.to_string().contains("not allowed"), "{err}");
        assert!(matches!(&err, SourceError::NotAllowed { reason, .. } if reason.contains("FIFO")));
        let err = check_location("/dev/zero", &policy).unwrap_err();
        assert!(
            matches!(&err, SourceError::NotAllowed { reason, .. } if reason.contains("device"))
        );
        let file = dir.path().join("x.tif");
        std::fs::write(&file, b"II*\0").unwrap();
        assert!(check_location(file.to_str().unwrap(), &policy).is_ok());
    }

    #[test]
    fn urls_to_loopback_link_local_and_private_ranges_are_refused() {
        let policy = LocationPolicy::default();
        for url in [
            "http://127.0.0.1/x.tif",
            "/vsicurl/http://169.254.169.254/latest/meta-data",
            "https://10.1.2.3/a.tif",
            "http://[::1]:8080/a.tif",
            "http://localhost/a.tif",
            "http://user@192.168.0.1/a.tif",
        ] {
            assert!(
                matches!(
                    check_location(url, &policy),
                    Err(SourceError::NotAllowed { .. })
                ),
                "{url} accepted"
            );
        }
    }

    #[test]
    fn private_urls_pass_when_the_policy_allows_them() {
        let policy = LocationPolicy {
            allow_private_network: true,
            ..LocationPolicy::default()
        };
        assert_eq!(
            check_location("http://127.0.0.1:9/a.tif", &policy).unwrap(),
            "/vsicurl/http://127.0.0.1:9/a.tif"
        );
    }

    #[test]
    fn listed_private_hosts_pass_by_name_or_name_and_port() {
        let policy = LocationPolicy {
            allowed_private_hosts: vec![
                "127.0.0.1:9".into(),
                "LOCALHOST".into(),
                "[::1]:8080".into(),
            ],
            ..LocationPolicy::default()
        };
        for url in [
            "http://127.0.0.1:9/a.tif",
            "http://localhost/a.tif",
            "https://localhost:8443/a.tif",
            "http://[::1]:8080/a.tif",
        ] {
            assert!(check_location(url, &policy).is_ok(), "{url} refused");
        }
        for url in [
            "http://127.0.0.1:10/a.tif",
            "http://127.0.0.1/a.tif",
            "http://[::1]:8081/a.tif",
            "http://10.0.0.1/a.tif",
        ] {
            assert!(check_location(url, &policy).is_err(), "{url} accepted");
        }
        assert!(host_is_allowed(
            "127.0.0.1",
            9,
            &policy.allowed_private_hosts
        ));
        assert!(!host_is_allowed(
            "127.0.0.1",
            443,
            &policy.allowed_private_hosts
        ));
    }

    #[test]
    fn file_urls_and_unknown_vsi_handlers_are_refused() {
        let policy = LocationPolicy::default();
        for p in [
            "file:///etc/passwd",
            "/vsistdin/",
            "/vsicurl/file:///etc/passwd",
            "/vsisubfile/0_10,/etc/passwd",
            "",
        ] {
            assert!(check_location(p, &policy).is_err(), "{p} accepted");
        }
        assert_eq!(
            check_location("/data/a.tif", &policy).unwrap(),
            "/data/a.tif"
        );
        assert_eq!(
            check_location("/vsis3/bucket/a.tif", &policy).unwrap(),
            "/vsis3/bucket/a.tif"
        );
    }
}
