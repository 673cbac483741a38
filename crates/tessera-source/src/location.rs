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
}

impl Default for LocationPolicy {
    fn default() -> Self {
        Self {
            allowed_drivers: DEFAULT_DRIVERS.iter().map(|s| (*s).to_string()).collect(),
            allow_private_network: false,
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
            check_public_host(url).map_err(|r| refuse(&r))?;
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

fn check_public_host(url: &str) -> Result<(), String> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = if let Some(stripped) = host_port.strip_prefix('[') {
        let (h, p) = stripped.split_once(']').unwrap_or((stripped, ""));
        (
            h.to_string(),
            p.trim_start_matches(':').parse().unwrap_or(80),
        )
    } else {
        match host_port.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), p.parse().unwrap_or(80)),
            None => (host_port.to_string(), 80),
        }
    };
    if host.is_empty() {
        return Err("URL has no host".into());
    }
    let addrs: Vec<IpAddr> = (host.as_str(), port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host}: {e}"))?
        .map(|a| a.ip())
        .collect();
    if let Some(ip) = addrs.iter().find(|ip| !is_public(ip)) {
        return Err(format!(
            "{host} resolves to {ip}, a loopback, link-local or private address \
             (set gdal.allow_private_network: true to allow it)"
        ));
    }
    Ok(())
}

fn is_public(ip: &IpAddr) -> bool {
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
