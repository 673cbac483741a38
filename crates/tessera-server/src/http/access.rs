//! The access log and the request metrics: one record per request, made
//! when its response headers are ready.
//!
//! A log line (target `tessera::access`, level info, unless
//! `server.access_log` is false) carries the method, path and query,
//! status, body bytes (when known), duration, cache status (`X-Cache`),
//! the layer(s) served and the caller's id (never its key: `key` and
//! `token` query parameters are written as `***`). Handlers name the layer by adding a
//! [`ServedLayers`] extension to their response.

use std::sync::Arc;
use std::time::Instant;

use axum::body::HttpBody;
use axum::extract::{Request, State};
use axum::http::{Method, Uri};
use axum::middleware::Next;
use axum::response::Response;

use super::state::Requests;
use crate::metrics::EndpointKind;
use crate::model::Layer;

/// The layer(s) a response served, for the access log.
#[derive(Debug, Clone)]
pub enum ServedLayers {
    /// One layer (a tile).
    One(Arc<Layer>),
    /// Several, as the request named them (a WMS map's `LAYERS`).
    Named(Arc<str>),
}

impl ServedLayers {
    fn names(&self) -> &str {
        match self {
            ServedLayers::One(layer) => &layer.name,
            ServedLayers::Named(names) => names,
        }
    }
}

/// Longest request target written to the log, in bytes.
const MAX_LOGGED_TARGET: usize = 2048;

/// Records the request in the metrics and, when enabled, the access log.
pub async fn record(State(state): State<Requests>, request: Request, next: Next) -> Response {
    let record = Record::begin(&state, request.method(), request.uri());
    let response = next.run(request).await;
    record.finish(&state, &response);
    response
}

/// One request being timed, from its arrival until its response headers.
pub struct Record {
    start: Instant,
    kind: EndpointKind,
    logged: Option<(Method, Uri)>,
}

impl Record {
    /// Starts timing a request (its method and target are kept only when
    /// the access log is on).
    pub fn begin(state: &Requests, method: &Method, uri: &Uri) -> Record {
        let log =
            state.access_log && tracing::enabled!(target: "tessera::access", tracing::Level::INFO);
        Record {
            start: Instant::now(),
            kind: EndpointKind::of(uri.path()),
            logged: log.then(|| (method.clone(), uri.clone())),
        }
    }

    /// Counts the request in the metrics and writes its access-log line.
    pub fn finish(self, state: &Requests, response: &Response) {
        let elapsed = self.start.elapsed();
        let status = response.status();
        state
            .metrics
            .http_request(self.kind, status.as_u16(), elapsed);
        let Some((method, uri)) = self.logged else {
            return;
        };
        let target = uri
            .path_and_query()
            .map_or_else(|| uri.path(), |pq| pq.as_str());
        let target = truncate(target, MAX_LOGGED_TARGET);
        let target = redact_credentials(target);
        let target: &str = &target;
        let bytes = response.body().size_hint().exact();
        let cache = response
            .headers()
            .get("x-cache")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-");
        let layers = response
            .extensions()
            .get::<ServedLayers>()
            .map_or("-", ServedLayers::names);
        let caller = response
            .extensions()
            .get::<super::guard::CallerId>()
            .map_or("-", |c| c.0.as_str());
        tracing::info!(
            target: "tessera::access",
            method = %method,
            target = target,
            status = status.as_u16(),
            bytes,
            duration_ms = elapsed.as_secs_f64() * 1000.0,
            cache,
            layer = layers,
            caller,
            "request"
        );
    }
}

/// `target` with the values of `key` and `token` query parameters (API
/// keys and tokens given in the URL) replaced by `***`.
fn redact_credentials(target: &str) -> std::borrow::Cow<'_, str> {
    let Some((path, query)) = target.split_once('?') else {
        return target.into();
    };
    let secret = |pair: &str| {
        let name = pair.split('=').next().unwrap_or_default();
        name.eq_ignore_ascii_case("key") || name.eq_ignore_ascii_case("token")
    };
    if !query.split('&').any(secret) {
        return target.into();
    }
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| {
            if secret(pair) {
                format!("{}=***", pair.split('=').next().unwrap_or_default())
            } else {
                pair.to_string()
            }
        })
        .collect();
    format!("{path}?{}", pairs.join("&")).into()
}

/// `s` cut to at most `max` bytes, on a character boundary.
fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_in_the_query_are_not_logged() {
        assert_eq!(
            redact_credentials("/wms?SERVICE=WMS&key=s3cret&LAYERS=a"),
            "/wms?SERVICE=WMS&key=***&LAYERS=a"
        );
        assert_eq!(
            redact_credentials("/t/1/2/3.png?TOKEN=a.b.c"),
            "/t/1/2/3.png?TOKEN=***"
        );
        assert_eq!(redact_credentials("/t?keys=1"), "/t?keys=1");
        assert_eq!(redact_credentials("/t"), "/t");
    }

    #[test]
    fn long_targets_are_cut_on_a_character_boundary() {
        assert_eq!(truncate("abc", 10), "abc");
        assert_eq!(truncate("aé", 2), "a");
        assert_eq!(truncate("abcdef", 4), "abcd");
    }
}
