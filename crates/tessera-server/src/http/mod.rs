//! The HTTP surface: routes, shared state and the tile lookup every tile
//! protocol shares. Each protocol lives in its own module; errors become
//! responses only in [`error`].

pub mod access;
pub mod access_lines;
pub mod address;
mod admin;
pub mod archive_watch;
pub mod body;
mod cors;
pub mod error;
mod fast;
pub mod guard;
mod jobs;
pub mod listener;
pub mod live;
mod map_styles;
mod ogcapi;
pub mod params;
mod preview;
pub mod sendfile;
pub mod state;
mod templates;
mod tilejson;
mod tiles;
pub mod wms;
mod wmts;
pub mod xml;

use std::sync::Arc;

use axum::Router;
use axum::extract::{FromRef, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use tessera_grid::TileFormat;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::compression::CompressionLayer;
use tower_http::set_header::SetResponseHeaderLayer;

use crate::auth::Caller;
use crate::config::Config;
use crate::config::auth::Grant;
use crate::service::Service;
use crate::tile_cache::{CacheStatus, Tile, TileCache, TileRequest};
use error::ApiError;

/// State shared by all handlers: the tile service (dereferences to it),
/// and, when it can be reloaded, the handle that reloads it.
#[derive(Debug, Clone)]
pub struct AppState {
    service: Arc<Service>,
    live: Option<std::sync::Weak<live::Live>>,
}

impl AppState {
    /// Wraps a service for the handlers (not reloadable).
    pub fn new(service: Service) -> AppState {
        AppState {
            service: Arc::new(service),
            live: None,
        }
    }

    /// The service the handlers' states are taken from (see [`state`]).
    pub fn service(&self) -> &Arc<Service> {
        &self.service
    }

    /// A service that [`live::Live`] serves and may replace.
    fn live(service: Arc<Service>, live: std::sync::Weak<live::Live>) -> AppState {
        AppState {
            service,
            live: Some(live),
        }
    }
}

/// What the listener answers each request with: the router, and the short
/// way for tile hits ([`fast`]), built from the same state. The listener
/// holds the current one; a reload replaces it whole.
#[derive(Debug)]
pub struct App {
    router: Router,
    fast: fast::FastTiles,
}

impl App {
    /// The router and the short way for `state`.
    pub fn new(state: AppState) -> App {
        App {
            fast: fast::FastTiles::new(&state),
            router: router(state),
        }
    }

    /// The short way's answer to `request` when it is a tile hit the short
    /// way takes (counted and logged as the router would), else `None`.
    pub fn try_fast<B>(&self, request: &axum::http::Request<B>) -> Option<Response> {
        self.try_fast_with(request, None)
    }

    /// [`App::try_fast`], answering tiles kept as files with the file
    /// itself through `files` (the connection's queue) when given.
    fn try_fast_with<B>(
        &self,
        request: &axum::http::Request<B>,
        files: Option<&sendfile::FileBodies>,
    ) -> Option<Response> {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.fast.serve(request, files)
        }))
        .ok()
        .flatten()
    }

    /// Answers `request`: a tile hit the short way can take at once,
    /// everything else through the router. A panic on the short way sends
    /// the request to the router, which turns its own panics into 500s.
    pub fn call<B>(
        &self,
        request: axum::http::Request<B>,
    ) -> impl Future<Output = Result<Response, std::convert::Infallible>> + use<B>
    where
        B: axum::body::HttpBody<Data = Bytes> + Send + 'static,
        B::Error: Into<axum::BoxError>,
    {
        self.call_with(request, None, None)
    }

    /// [`App::call`] for a connection whose file bodies wait in `files`
    /// (see [`sendfile`]). With `runtime` (from a connection thread, see
    /// [`listener`]), a request the short way does not answer is handed to
    /// `runtime`, where the handlers run, as a task aborted when the
    /// returned future is dropped (as the handler's own future would be);
    /// a task that panics there is a 500.
    pub fn call_with<B>(
        &self,
        request: axum::http::Request<B>,
        files: Option<&sendfile::FileBodies>,
        runtime: Option<&tokio::runtime::Handle>,
    ) -> impl Future<Output = Result<Response, std::convert::Infallible>> + use<B>
    where
        B: axum::body::HttpBody<Data = Bytes> + Send + 'static,
        B::Error: Into<axum::BoxError>,
    {
        use futures::future::{Either, ready};
        use tower::ServiceExt;
        if let Some(response) = self.try_fast_with(&request, files) {
            return Either::Left(ready(Ok(response)));
        }
        let routed = self
            .router
            .clone()
            .oneshot(request.map(axum::body::Body::new));
        let Some(runtime) = runtime else {
            return Either::Right(Either::Left(routed));
        };
        let mut task = AbortOnDrop(runtime.spawn(routed));
        Either::Right(Either::Right(async move {
            Ok(match (&mut task.0).await {
                Ok(Ok(response)) => response,
                Ok(Err(never)) => match never {},
                Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
            })
        }))
    }
}

/// A task aborted when its handle is dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Builds the router with every endpoint: the read endpoints with CORS
/// (unless off), the admin endpoints without it (unless configured), text
/// responses compressed (unless off), every request counted and logged.
pub fn router(state: AppState) -> Router {
    let server = &state.service.config.server;
    let mut reads = Router::new()
        .route("/", get(preview::index))
        .route("/health", get(health))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics))
        .route("/preview/{layer}", get(preview::page))
        .route("/static/viewer.js", get(preview::viewer_js))
        .route("/static/maplibre-gl.js", get(preview::maplibre_js))
        .route("/static/maplibre-gl.css", get(preview::maplibre_css))
        .route(
            "/tiles/{layer}/{grid}/tilejson.json",
            get(tilejson::tilejson),
        )
        .route("/styles/{file}", get(map_styles::style))
        .route("/tiles/{layer}/{grid}/{z}/{x}/{file}", get(tiles::xyz))
        .route("/tms/1.0.0/{layer}/{grid}/{z}/{x}/{file}", get(tiles::tms))
        .route("/wmts", get(wmts::kvp))
        // The RESTful base URL the capabilities list for every operation:
        // clients send KVP to it too.
        .route("/wmts/1.0.0", get(wmts::kvp))
        .route("/wmts/1.0.0/", get(wmts::kvp))
        .route(
            "/wmts/1.0.0/WMTSCapabilities.xml",
            get(wmts::capabilities_rest),
        )
        .route(
            "/wmts/1.0.0/{layer}/{style}/{tms}/{z}/{row}/{file}",
            get(wmts::rest_tile),
        )
        // A layer with a dimension: its value between style and set.
        .route(
            "/wmts/1.0.0/{layer}/{style}/{dim}/{tms}/{z}/{row}/{file}",
            get(wmts::rest_tile),
        )
        .route("/wms", get(wms::kvp))
        .route(
            "/wms/schema/feature_info.xsd",
            get(wms::feature_info_schema),
        )
        .merge(ogcapi::routes().route_layer(middleware::from_fn_with_state(
            state::Catalog::from_ref(&state),
            ogcapi::guard,
        )))
        .fallback(not_found)
        // Every read's caller, identified before any handler runs.
        .layer(middleware::from_fn_with_state(
            guard::Guard::from_ref(&state),
            guard::identify,
        ));
    if let Some(layer) = cors::read_layer(&server.cors) {
        reads = reads
            .layer(layer)
            .layer(middleware::from_fn(cors::preflight_no_content));
    }
    let mut admin = Router::new()
        .route(
            "/admin/sources/{name}",
            axum::routing::put(admin::put_source),
        )
        .route("/admin/reload", axum::routing::post(admin::reload))
        .route("/admin", axum::routing::get(jobs::page))
        .route(
            "/admin/jobs",
            axum::routing::post(jobs::start).get(jobs::list),
        )
        .route(
            "/admin/jobs/{id}",
            axum::routing::get(jobs::report).delete(jobs::cancel),
        )
        .route("/admin/stats", axum::routing::get(jobs::stats))
        .route(
            "/admin/truncate",
            axum::routing::post(admin::truncate)
                .get(admin::truncations)
                .delete(admin::cancel_truncate),
        );
    if let Some(layer) = cors::admin_layer(&server.cors) {
        admin = admin
            .layer(layer)
            .layer(middleware::from_fn(cors::preflight_no_content));
    }
    let mut app = reads.merge(admin);
    if server.compression {
        // The default predicate leaves images (and bodies under 32 bytes)
        // alone and sets `Vary: Accept-Encoding`.
        app = app.layer(CompressionLayer::new());
    }
    app.layer(middleware::from_fn_with_state(
        state::Requests::from_ref(&state),
        access::record,
    ))
    .layer(CatchPanicLayer::custom(panic_response))
    // Pages, documents and errors are read as the type they are sent as,
    // never sniffed into HTML by a browser.
    .layer(SetResponseHeaderLayer::if_not_present(
        axum::http::header::X_CONTENT_TYPE_OPTIONS,
        NOSNIFF,
    ))
    .with_state(state)
}

/// `X-Content-Type-Options` of every answer (the router's and the short
/// way's alike).
pub(crate) const NOSNIFF: axum::http::HeaderValue = axum::http::HeaderValue::from_static("nosniff");

async fn health() -> &'static str {
    "ok\n"
}

/// `GET /ready`: 503 while a store fails writes (a load balancer should
/// send traffic elsewhere); otherwise 200, with how busy the render slots
/// are (all of them, and the share WMS maps may hold).
async fn ready(State(state): State<state::Status>) -> Response {
    let slots = state.renderer.slots_in_use();
    let saturated = |busy: usize, all: usize| if busy >= all { " (saturated)" } else { "" };
    let renders = format!(
        "renders: {} of {} slots busy{}\nwms maps: {} of {} slots busy{}",
        slots.busy,
        slots.slots,
        saturated(slots.busy, slots.slots),
        slots.map_busy,
        slots.map_slots,
        saturated(slots.map_busy, slots.map_slots),
    );
    let degraded = state.metrics.degraded_stores();
    if degraded.is_empty() {
        (StatusCode::OK, format!("ok\n{renders}\n")).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "not ready: writes fail in store(s) {}\n{renders}\n",
                degraded.join(", ")
            ),
        )
            .into_response()
    }
}

/// `GET /metrics`: to anyone, or, with `auth.metrics: granted`, to
/// callers granted `metrics` (it names every layer and caller).
async fn metrics(State(state): State<state::Status>, caller: Caller) -> Response {
    if let Err(refusal) = caller.may_read_metrics() {
        return ApiError::from(refusal).into_response();
    }
    for (name, store) in &state.registry.stores {
        if let Some((usage, _)) = store.quota() {
            state.metrics.observe_quota(name, &usage);
        }
        if let Some(counts) = store.sync_counts() {
            state.metrics.observe_sync_counts(name, &counts);
        }
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.render(),
    )
        .into_response()
}

async fn not_found() -> ApiError {
    ApiError::not_found(
        "NotFound",
        "no such endpoint; the index at / lists what is served",
    )
}

fn panic_response(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    tracing::error!("a request handler panicked");
    (StatusCode::INTERNAL_SERVER_ERROR, "internal error\n").into_response()
}

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
fn accepts_gzip(headers: &HeaderMap) -> bool {
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
fn gunzip(packed: &[u8]) -> Result<Bytes, ApiError> {
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

/// A header value written without a `String` on the way (the value is
/// copied once, into the header); `None` when it is longer than 64 bytes or
/// not a valid header value.
fn header_value(args: std::fmt::Arguments<'_>) -> Option<HeaderValue> {
    use std::io::Write;
    let mut buf = [0u8; 64];
    let mut cursor = std::io::Cursor::new(&mut buf[..]);
    cursor.write_fmt(args).ok()?;
    let len = usize::try_from(cursor.position()).ok()?;
    HeaderValue::from_bytes(&buf[..len]).ok()
}

/// Serves one tile through the cache: `X-Cache: HIT|MISS`, a strong ETag
/// (a hash of the bytes), `Last-Modified` (when the tile was stored, if the
/// store knows), `Cache-Control` from the layer, and 304 when the client's
/// `If-None-Match` matches, or, without one, when the tile was stored no
/// later than its `If-Modified-Since` (RFC 9110, 13.2.2).
///
/// The caller must be granted the layer's tiles (asked before the cache
/// is), and within its miss budget for a tile the cache does not hold; a
/// protected layer's tile is `Cache-Control: private`.
pub async fn serve_tile(
    cache: &TileCache,
    tile: TileRequest,
    request_headers: &HeaderMap,
    caller: &Caller,
) -> Result<Response, ApiError> {
    caller.may(&tile.layer.name, Grant::Tiles)?;
    let private = caller.protects(&tile.layer.name);
    // A caller whose misses are limited apart: what is cached first, then
    // a render only within its miss budget.
    if caller.limits_misses() {
        if let Some(held) = cache.held(&tile).await {
            return tile_response(tile, held, request_headers, private);
        }
        caller.admit_miss()?;
    }
    let result = cache.get(&tile).await?;
    tile_response(tile, result, request_headers, private)
}

/// The response for `tile`, found as `result`, with the headers
/// [`serve_tile`] promises (`private`: for its caller only).
fn tile_response(
    tile: TileRequest,
    result: Tile,
    request_headers: &HeaderMap,
    private: bool,
) -> Result<Response, ApiError> {
    // Vector tiles are kept gzip-compressed: sent so to clients that accept
    // gzip, unpacked for the others (each variant with its own ETag).
    let vector = tile.format.is_vector();
    let packed = vector && accepts_gzip(request_headers);
    let etag = if vector && !packed {
        header_value(format_args!("\"{:032x}-identity\"", result.hash))
    } else {
        header_value(format_args!("\"{:032x}\"", result.hash))
    };
    let last_modified = result.stored_at.map(httpdate::HttpDate::from);
    let not_modified = if request_headers.contains_key(header::IF_NONE_MATCH) {
        request_headers
            .get_all(header::IF_NONE_MATCH)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .any(|candidate| {
                candidate == "*"
                    || etag
                        .as_ref()
                        .is_some_and(|e| candidate.as_bytes() == e.as_bytes())
            })
    } else {
        let since = request_headers
            .get(header::IF_MODIFIED_SINCE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<httpdate::HttpDate>().ok());
        matches!((last_modified, since), (Some(m), Some(s)) if m <= s)
    };
    let mut response = if not_modified {
        StatusCode::NOT_MODIFIED.into_response()
    } else if vector && (result.bytes.is_empty() || result.bytes == tessera_grid::EMPTY_MVT) {
        // No feature reaches the tile.
        StatusCode::NO_CONTENT.into_response()
    } else if packed {
        let mut r = image_response(tile.format, result.bytes);
        r.headers_mut()
            .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        r
    } else if vector {
        image_response(tile.format, gunzip(&result.bytes)?)
    } else {
        image_response(tile.format, result.bytes)
    };
    if vector {
        response
            .headers_mut()
            .insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    }
    let headers = response.headers_mut();
    headers.reserve(12);
    if let Some(v) = etag {
        headers.insert(header::ETAG, v);
    }
    if let Some(v) = last_modified.and_then(|m| header_value(format_args!("{m}"))) {
        headers.insert(header::LAST_MODIFIED, v);
    }
    if let Some(v) = header_value(format_args!("public, max-age={}", tile.layer.max_age_secs)) {
        headers.insert(header::CACHE_CONTROL, v);
    }
    if private {
        guard::keep_from_shared_caches(headers);
    }
    headers.insert(
        "x-cache",
        HeaderValue::from_static(match result.status {
            CacheStatus::Hit => "HIT",
            CacheStatus::Miss => "MISS",
        }),
    );
    response
        .extensions_mut()
        .insert(access::ServedLayers::One(tile.layer));
    Ok(response)
}
