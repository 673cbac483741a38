//! The access log and the request metrics: one record per request, made
//! when its response headers are ready.
//!
//! A log line (target `tessera::access`, level info, unless
//! `server.access_log` is false) carries the method, path and query,
//! status, body bytes (when known), duration, cache status (`X-Cache`),
//! the layer(s) served and the caller's id (never its key: `key` and
//! `token` query parameters are written as `***`). Handlers name the layer by adding a
//! [`ServedLayers`] extension to their response.
//!
//! When the process hands it a writer ([`write_lines_to`], as `tessera
//! serve` does), a line is formatted here, in tracing's text or JSON
//! layout, and given to that writer: a few hundred nanoseconds a request
//! instead of tracing's field-by-field formatting. `TESSERA_LOG` still
//! decides whether the target is logged.

use std::sync::Arc;
use std::time::Instant;

use axum::body::HttpBody;
use axum::extract::{Request, State};
use axum::http::{Method, Uri};
use axum::middleware::Next;
use axum::response::Response;

use crate::http::state::Requests;
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
            .get::<crate::http::guard::CallerId>()
            .map_or("-", |c| c.0.as_str());
        if let Some(sink) = SINK.get() {
            let line = Line {
                method: method.as_str(),
                target,
                status: status.as_u16(),
                bytes,
                duration_ms: elapsed.as_secs_f64() * 1000.0,
                cache,
                layer: layers,
                caller,
            };
            sink.lines.push(&line.format(sink.json));
            return;
        }
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

/// Where access-log lines go when the process writes them itself.
struct Sink {
    json: bool,
    lines: super::access_lines::Lines,
}

static SINK: std::sync::OnceLock<Sink> = std::sync::OnceLock::new();

/// From now on, each access-log line is formatted here (tracing's JSON
/// layout with `json`, else its text layout without colours) and queued
/// on `lines` (see [`super::access_lines`]: batched for a writer thread,
/// dropped and counted past its limit, never waited for). Set once.
pub fn write_lines_to(json: bool, lines: super::access_lines::Lines) {
    let _ = SINK.set(Sink { json, lines });
}

/// One access-log line's fields.
struct Line<'a> {
    method: &'a str,
    target: &'a str,
    status: u16,
    bytes: Option<u64>,
    duration_ms: f64,
    cache: &'a str,
    layer: &'a str,
    caller: &'a str,
}

impl Line<'_> {
    /// The line as tracing-subscriber writes an info event of target
    /// `tessera::access` with these fields, newline included.
    fn format(&self, json: bool) -> Vec<u8> {
        use std::fmt::Write;
        let now = time::OffsetDateTime::now_utc();
        let timestamp = format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
            now.year(),
            u8::from(now.month()),
            now.day(),
            now.hour(),
            now.minute(),
            now.second(),
            now.microsecond()
        );
        let mut out = String::with_capacity(160 + self.target.len());
        if json {
            let text = |s: &str| serde_json::Value::from(s).to_string();
            let _ = write!(
                out,
                "{{\"timestamp\":\"{timestamp}\",\"level\":\"INFO\",\"fields\":{{\"message\":\"request\",\"method\":{},\"target\":{},\"status\":{}",
                text(self.method),
                text(self.target),
                self.status
            );
            if let Some(b) = self.bytes {
                let _ = write!(out, ",\"bytes\":{b}");
            }
            let _ = writeln!(
                out,
                ",\"duration_ms\":{},\"cache\":{},\"layer\":{},\"caller\":{}}},\"target\":\"tessera::access\"}}",
                self.duration_ms,
                text(self.cache),
                text(self.layer),
                text(self.caller)
            );
        } else {
            let _ = write!(
                out,
                "{timestamp}  INFO tessera::access: request method={} target={:?} status={}",
                self.method, self.target, self.status
            );
            if let Some(b) = self.bytes {
                let _ = write!(out, " bytes={b}");
            }
            let _ = writeln!(
                out,
                " duration_ms={} cache={:?} layer={:?} caller={:?}",
                self.duration_ms, self.cache, self.layer, self.caller
            );
        }
        out.into_bytes()
    }
}

/// `target` with the values of `key` and `token` query parameters (API
/// keys and tokens given in the URL) replaced by `***`.
fn redact_credentials(target: &str) -> std::borrow::Cow<'_, str> {
    let Some((path, query)) = target.split_once('?') else {
        return target.into();
    };
    let secret = |pair: &str| {
        crate::auth::credential_name(pair.split('=').next().unwrap_or_default()).is_some()
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

    fn line() -> Line<'static> {
        Line {
            method: "GET",
            target: "/tiles/relief/WebMercatorQuad/2/1/1.png?time=2024",
            status: 200,
            bytes: Some(1234),
            duration_ms: 0.3175,
            cache: "HIT",
            layer: "relief",
            caller: "jwt:a \"b\"",
        }
    }

    /// What tracing-subscriber writes for the same event, in `json` or text.
    fn by_tracing(json: bool) -> String {
        #[derive(Clone, Default)]
        struct Buffer(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Buffer {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buffer = Buffer::default();
        let out = buffer.clone();
        let builder = tracing_subscriber::fmt()
            .with_writer(move || out.clone())
            .with_ansi(false);
        let l = line();
        let event = || {
            tracing::info!(
                target: "tessera::access",
                method = %l.method,
                target = l.target,
                status = l.status,
                bytes = l.bytes,
                duration_ms = l.duration_ms,
                cache = l.cache,
                layer = l.layer,
                caller = l.caller,
                "request"
            );
        };
        if json {
            tracing::subscriber::with_default(builder.json().finish(), event);
        } else {
            tracing::subscriber::with_default(builder.finish(), event);
        }
        String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn lines_written_here_read_as_tracings_own() {
        for json in [false, true] {
            let ours = String::from_utf8(line().format(json)).unwrap();
            let theirs = by_tracing(json);
            // The same but for the moment they were written.
            let cut = |s: &str| {
                s.split_once(if json { "Z\"," } else { "Z " })
                    .unwrap()
                    .1
                    .to_string()
            };
            assert_eq!(cut(&ours), cut(&theirs), "json: {json}");
            assert_eq!(ours.len(), theirs.len(), "{ours}{theirs}");
        }
    }

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
        assert_eq!(
            redact_credentials("/t?%6bey=s3cret&k%65y=s3cret&t%6Fken=a.b.c"),
            "/t?%6bey=***&k%65y=***&t%6Fken=***"
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
