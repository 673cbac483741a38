//! The HTTP surface: routes, shared state and the tile lookup every tile
//! protocol shares. Each protocol lives in its own module; errors become
//! responses only in [`error`].

mod admin;
mod book;
mod elevation;
pub mod error;
mod fonts;
pub mod guard;
mod jobs;
mod map_styles;
mod ogcapi;
pub mod params;
mod preview;
pub mod reply;
mod searches;
mod sprites;
pub mod state;
mod templates;
mod tilejson;
pub mod tiles;
pub mod transport;
pub mod wms;
mod wmts;
pub mod xml;

use std::sync::Arc;

use axum::Router;
use axum::extract::{FromRef, State};
use axum::http::{StatusCode, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::compression::CompressionLayer;
use tower_http::set_header::SetResponseHeaderLayer;

use crate::auth::Caller;
use crate::service::Service;
use error::ApiError;
use transport::{access, cors, sendfile};

/// What reloads the configuration served (the serving process's
/// `serve::live::Live`), for `POST /admin/reload`.
pub trait Reload: Send + Sync + std::fmt::Debug {
    /// Reads the configuration again and, when it is valid and its layers
    /// and stores open, serves it; the number of layers served now. A
    /// configuration without some of the layers served now is refused
    /// unless `remove_layers`. Blocking: call it from a blocking thread.
    fn reload(&self, remove_layers: bool) -> Result<usize, crate::config::ConfigError>;
}

/// State shared by all handlers: the tile service (dereferences to it),
/// and, when it can be reloaded, the handle that reloads it.
#[derive(Debug, Clone)]
pub struct AppState {
    service: Arc<Service>,
    live: Option<std::sync::Weak<dyn Reload>>,
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

    /// A service that `live` serves and may replace.
    pub fn reloadable(service: Arc<Service>, live: std::sync::Weak<dyn Reload>) -> AppState {
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
    fast: tiles::fast::FastTiles,
}

impl App {
    /// The router and the short way for `state`.
    pub fn new(state: AppState) -> App {
        App {
            fast: tiles::fast::FastTiles::new(&state),
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
    /// [`transport::listener`]), a request the short way does not answer is handed to
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
        .route(crate::config::SCHEMA_PATH, get(config_schema))
        .route("/book", get(book::redirect))
        .route(book::BOOK_PATH, get(book::index))
        .route("/book/{*path}", get(book::file))
        .route("/fonts.json", get(fonts::list))
        .route("/fonts/{fontstack}/{file}", get(fonts::range))
        .route("/sprites/{file}", get(sprites::sprite))
        .route("/preview/{layer}", get(preview::page))
        .route("/static/viewer.js", get(preview::viewer_js))
        .route("/static/maplibre-gl.js", get(preview::maplibre_js))
        .route("/static/maplibre-gl.css", get(preview::maplibre_css))
        .route(
            "/tiles/{layer}/{grid}/tilejson.json",
            get(tilejson::tilejson),
        )
        .route("/styles/{file}", get(map_styles::style))
        .route(
            "/elevation/{layer}",
            get(elevation::point).post(elevation::profile),
        )
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
        .route("/searches", get(searches::list).post(searches::register))
        .route("/searches/{id}", get(searches::describe))
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

/// `GET /schema/config.json`: the configuration file's JSON Schema
/// ([`crate::config::Config::schema`]).
async fn config_schema() -> Response {
    // The same for the process's whole life: generated once.
    static SCHEMA: std::sync::LazyLock<String> =
        std::sync::LazyLock::new(|| crate::config::Config::schema().to_string());
    (
        [(axum::http::header::CONTENT_TYPE, "application/schema+json")],
        SCHEMA.as_str(),
    )
        .into_response()
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

/// The layer `name` as `caller` may read its tiles: 404 naming the known
/// layers when it sees none of that name, 403 without the grant (the
/// lookup of the preview, style and elevation pages).
pub(crate) fn tile_layer(
    registry: &crate::registry::Registry,
    caller: &crate::auth::Caller,
    name: &str,
) -> Result<std::sync::Arc<crate::model::Layer>, ApiError> {
    let layer = registry
        .find_layer(name, &|n| caller.sees(n))
        .map_err(|unknown| {
            ApiError::not_found("LayerNotDefined", format!("unknown layer {unknown}"))
        })?;
    caller.may(&layer.name, crate::config::auth::Grant::Tiles)?;
    Ok(layer)
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
