//! What many answers share: the base URL links are built from, an image
//! as a response, gzip as a client takes it, header values written without
//! allocating.

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use tessera_grid::TileFormat;

use super::error::ApiError;
use crate::config::Config;

/// The base URL clients should use for links: `server.public_url`; else,
/// with `server.trust_forwarded`, the scheme, host and path prefix a proxy
/// in front names (`Forwarded: proto=..;host=..`, or `X-Forwarded-Proto`,
/// `X-Forwarded-Host` and `X-Forwarded-Prefix`); else the request's Host
/// header. Host names are used only when they look like one.
pub fn base_url(config: &Config, headers: &HeaderMap) -> String {
    if let Some(url) = &config.server.public_url {
        return url.trim_end_matches('/').to_string();
    }
    let text = |name: &str| headers.get(name).and_then(|h| h.to_str().ok());
    let mut scheme = "http";
    let mut host = None;
    let mut prefix = "";
    if config.server.trust_forwarded {
        // The first element of `Forwarded` is the proxy nearest the client.
        if let Some(first) = text("forwarded").and_then(|f| f.split(',').next()) {
            for pair in first.split(';') {
                if let Some((k, v)) = pair.trim().split_once('=') {
                    let v = v.trim_matches('"');
                    match k.trim().to_ascii_lowercase().as_str() {
                        "proto" => scheme = forwarded_scheme(v).unwrap_or(scheme),
                        "host" => host = Some(v),
                        _ => {}
                    }
                }
            }
        }
        let first = |name: &str| text(name).and_then(|v| v.split(',').next()).map(str::trim);
        if let Some(proto) = first("x-forwarded-proto").and_then(forwarded_scheme) {
            scheme = proto;
        }
        host = host.or_else(|| first("x-forwarded-host"));
        prefix = first("x-forwarded-prefix")
            .filter(|p| {
                p.starts_with('/')
                    && p.chars().all(|c| {
                        c.is_ascii_alphanumeric() || matches!(c, '/' | '-' | '_' | '.' | '~')
                    })
            })
            .map_or("", |p| p.trim_end_matches('/'));
    }
    let host = host
        .filter(|h| looks_like_host(h))
        .or_else(|| text("host").filter(|h| looks_like_host(h)))
        .unwrap_or(&config.server.listen);
    format!("{scheme}://{host}{prefix}")
}

/// `http` or `https` when `v` names one of them.
fn forwarded_scheme(v: &str) -> Option<&'static str> {
    match v.to_ascii_lowercase().as_str() {
        "https" => Some("https"),
        "http" => Some("http"),
        _ => None,
    }
}

fn looks_like_host(h: &str) -> bool {
    !h.is_empty()
        && h.len() <= 255
        && h.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'))
}

/// Whether the request's `Accept-Encoding` takes gzip (not with `q=0`).
pub(crate) fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|item| {
            let mut parts = item.split(';').map(str::trim);
            let coding = parts.next().unwrap_or_default();
            let refused = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            (coding.eq_ignore_ascii_case("gzip") || coding == "*") && !refused
        })
}

/// A stored vector tile unpacked, for clients that do not take gzip; one
/// that unpacks past [`tessera_source::complete::MOST_MVT_BYTES`] is a 406
/// (it is served packed only), never a body of any size.
pub(crate) fn gunzip(packed: &[u8]) -> Result<Bytes, ApiError> {
    use tessera_source::complete::MOST_MVT_BYTES;
    use tessera_source::inflate::{InflateError, gunzip_capped};
    match gunzip_capped(packed, MOST_MVT_BYTES) {
        Ok(out) => Ok(Bytes::from(out)),
        Err(InflateError::TooLarge { cap }) => Err(ApiError::new(
            StatusCode::NOT_ACCEPTABLE,
            "NotAcceptable",
            format!(
                "this vector tile unpacks to more than {cap} bytes; ask for it with Accept-Encoding: gzip"
            ),
        )),
        Err(e @ InflateError::Damaged(_)) => Err(ApiError::internal(&e)),
    }
}

/// An encoded image as a response.
pub fn image_response(format: TileFormat, bytes: Bytes) -> Response {
    let content_type = format.content_type_of(&bytes);
    let mut r = bytes.into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

/// `bytes` made from the configuration (glyph ranges, sprite sheets) as a
/// response of `content_type`: its content hash as the `ETag`, a 304 when
/// `request` already holds it (`If-None-Match`), and `cache_control`.
pub fn made_bytes(
    bytes: Bytes,
    content_type: &'static str,
    cache_control: &'static str,
    request: &HeaderMap,
) -> Response {
    let etag = header_value(format_args!(
        "\"{:032x}\"",
        tessera_store::content_hash(&bytes)
    ));
    let held = etag.as_ref().is_some_and(|etag| {
        request
            .get_all(header::IF_NONE_MATCH)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|candidate| {
                candidate.trim() == "*" || candidate.trim().as_bytes() == etag.as_bytes()
            })
    });
    let mut response = if held {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, content_type)], bytes).into_response()
    };
    let out = response.headers_mut();
    if let Some(etag) = etag {
        out.insert(header::ETAG, etag);
    }
    out.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(cache_control),
    );
    response
}

/// A header value written without a `String` on the way (the value is
/// copied once, into the header); `None` when it is longer than 64 bytes or
/// not a valid header value.
pub(crate) fn header_value(args: std::fmt::Arguments<'_>) -> Option<HeaderValue> {
    use std::io::Write;
    let mut buf = [0u8; 64];
    let mut cursor = std::io::Cursor::new(&mut buf[..]);
    cursor.write_fmt(args).ok()?;
    let len = usize::try_from(cursor.position()).ok()?;
    HeaderValue::from_bytes(&buf[..len]).ok()
}

/// Adds `value` to the answer's `Vary` unless it already names `name`
/// (case-insensitively): an answer may vary on several things at once.
pub fn vary_on(headers: &mut HeaderMap, name: &str, value: HeaderValue) {
    let varies = headers
        .get_all(header::VARY)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|v| v.trim().eq_ignore_ascii_case(name));
    if !varies {
        headers.append(header::VARY, value);
    }
}
