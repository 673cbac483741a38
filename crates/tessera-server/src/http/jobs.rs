//! `/admin/jobs`: seed, reseed and truncate jobs started, watched and
//! cancelled over HTTP ([`crate::jobs`]); `/admin/stats`: per layer and per
//! store statistics; and `/admin`, a small page that shows both, jobs with
//! progress bars (it asks for the admin token and sends it as a bearer
//! token; the page itself holds nothing secret).

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};

use super::admin::refusal;
use super::error::ApiError;
use super::state::Admin;
use crate::jobs::{JobSpec, Jobs, StartError};
use tessera_store::quota::ZoomUsage;

/// The admin page.
const PAGE: &str = include_str!("admin.html");

/// The jobs, or the answer refusing the request (admin API off, no token,
/// or not serving).
fn jobs<'a>(
    state: &'a Admin,
    headers: &HeaderMap,
) -> Result<&'a std::sync::Arc<Jobs>, Box<Response>> {
    if let Some(refused) = refusal(state, headers) {
        return Err(Box::new(refused));
    }
    state.jobs.as_ref().ok_or_else(|| {
        Box::new(
            ApiError::not_found("NotFound", "jobs run only in a serving process").into_response(),
        )
    })
}

fn unknown(id: &str) -> Response {
    ApiError::not_found("NotFound", format!("no job {id:?}")).into_response()
}

/// Handles `POST /admin/jobs` with a JSON [`JobSpec`] (`kind` seed,
/// reseed or truncate; `layer`; `zoom`; optional `grid`, `format`, `bbox`
/// with `bbox_crs`, `polygon` (GeoJSON), `dimensions`, `styles`,
/// `threads`, `rate`): 201 with the job's report and its URL in
/// `Location`; 400 for a spec that does not plan.
pub async fn start(State(state): State<Admin>, headers: HeaderMap, body: Body) -> Response {
    let jobs = match jobs(&state, &headers) {
        Ok(j) => j,
        Err(refused) => return *refused,
    };
    // `jobs` answered: the admin API is on.
    let limit = state
        .config
        .admin
        .as_ref()
        .map_or(0, crate::config::AdminConfig::max_job_spec_bytes);
    let body = match axum::body::to_bytes(body, limit).await {
        Ok(b) => b,
        Err(e) => {
            let too_large = std::error::Error::source(&e)
                .is_some_and(<dyn std::error::Error>::is::<http_body_util::LengthLimitError>);
            return if too_large {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "InvalidParameterValue",
                    format!("a job spec of more than {limit} bytes (admin.max_job_spec)"),
                )
                .into_response()
            } else {
                ApiError::bad_request("InvalidParameterValue", format!("the job spec: {e}"))
                    .into_response()
            };
        }
    };
    let spec: JobSpec = match serde_json::from_slice(&body) {
        Ok(s) => s,
        Err(e) => {
            return ApiError::bad_request("InvalidParameterValue", format!("job: {e}"))
                .into_response();
        }
    };
    match jobs.start(
        spec,
        &state.registry,
        &state.tiles,
        &state.config.cluster.node(),
    ) {
        Ok(report) => {
            let mut r = (StatusCode::CREATED, Json(&report)).into_response();
            if let Ok(v) = HeaderValue::from_str(&format!("/admin/jobs/{}", report.id)) {
                r.headers_mut().insert(header::LOCATION, v);
            }
            r
        }
        Err(StartError::Refused(message)) => {
            ApiError::bad_request("InvalidParameterValue", message).into_response()
        }
        Err(StartError::Record(message)) => {
            tracing::error!(error = %message, "a job could not be recorded");
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "NoApplicableCode",
                message,
            )
            .into_response()
        }
    }
}

/// Handles `GET /admin/jobs`: every job of this process and those recorded
/// before it, oldest first.
pub async fn list(State(state): State<Admin>, headers: HeaderMap) -> Response {
    match jobs(&state, &headers) {
        Ok(jobs) => Json(jobs.list()).into_response(),
        Err(refused) => *refused,
    }
}

/// Handles `GET /admin/jobs/{id}`: how the job stands (state, tiles
/// planned and done, tiles per second, ETA, errors); 404 for an unknown id.
pub async fn report(
    State(state): State<Admin>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    match jobs(&state, &headers) {
        Ok(jobs) => jobs
            .report(&id)
            .map_or_else(|| unknown(&id), |r| Json(r).into_response()),
        Err(refused) => *refused,
    }
}

/// Handles `DELETE /admin/jobs/{id}`: asks the job to stop (no new
/// metatile starts; those in flight finish, so what is counted done is
/// stored); 202 with its report, 404 for an unknown id.
pub async fn cancel(
    State(state): State<Admin>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    match jobs(&state, &headers) {
        Ok(jobs) => jobs.cancel(&id).map_or_else(
            || unknown(&id),
            |r| (StatusCode::ACCEPTED, Json(r)).into_response(),
        ),
        Err(refused) => *refused,
    }
}

/// Handles `GET /admin`: the jobs page (404 when the admin API is off).
pub async fn page(State(state): State<Admin>) -> Response {
    if state.config.admin.is_none() {
        return ApiError::not_found(
            "NotFound",
            "the admin API is not enabled (no `admin:` section)",
        )
        .into_response();
    }
    let mut r = Html(PAGE).into_response();
    // The page runs its own script only, and is never framed.
    r.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; frame-ancestors 'none'",
        ),
    );
    r
}

/// One layer in `/admin/stats`.
#[derive(Debug, serde::Serialize)]
struct LayerReport {
    layer: String,
    store: Option<String>,
    #[serde(flatten)]
    counts: crate::metrics::LayerCounts,
    /// Tiles and bytes stored per zoom (from a quota's index, or counted
    /// from the store at most every 30 s); `null` for stores that cannot
    /// count (object stores, memory).
    stored: Option<Vec<ZoomStored>>,
}

#[derive(Debug, serde::Serialize)]
struct ZoomStored {
    z: u8,
    tiles: u64,
    bytes: u64,
}

#[derive(Debug, serde::Serialize)]
struct StoreReport {
    store: String,
    quota: Option<tessera_store::quota::QuotaUsage>,
}

/// How long a store's own count (a directory walk, ...) is reused.
const COUNT_FOR: std::time::Duration = std::time::Duration::from_secs(30);

/// Counts of stores without a quota, with when they were made.
type Counted = std::collections::HashMap<String, (std::time::Instant, Option<Vec<ZoomUsage>>)>;

static COUNTED: std::sync::LazyLock<std::sync::Mutex<Counted>> =
    std::sync::LazyLock::new(std::sync::Mutex::default);

/// Store `name`'s count by layer key and zoom, made at most every
/// [`COUNT_FOR`]; `None` when it cannot count (or failed: logged).
fn counted(name: &str, store: &dyn tessera_store::TileStore) -> Option<Vec<ZoomUsage>> {
    let mut cache = COUNTED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((at, zooms)) = cache.get(name)
        && at.elapsed() < COUNT_FOR
    {
        return zooms.clone();
    }
    let zooms = store.count_by_zoom().unwrap_or_else(|e| {
        tracing::warn!(
            store = name,
            error = &e as &dyn std::error::Error,
            "cannot count the store's tiles"
        );
        None
    });
    cache.insert(name.to_string(), (std::time::Instant::now(), zooms.clone()));
    zooms
}

/// Handles `GET /admin/stats`: per layer, tile requests (hits, misses,
/// errors, hit ratio), metatiles rendered, render time percentiles, the
/// last error, and the tiles and bytes stored per zoom (file, journal and
/// MBTiles stores); per store with a quota, how full it is and what it
/// evicted.
pub async fn stats(State(state): State<Admin>, headers: HeaderMap) -> Response {
    if let Some(refused) = refusal(&state, &headers) {
        return refused;
    }
    let registry = state.registry.clone();
    let metrics = state.metrics.clone();
    // Reading the quota indexes is blocking work.
    let built = tokio::task::spawn_blocking(move || {
        let quotas: std::collections::BTreeMap<String, _> = registry
            .stores
            .iter()
            .filter_map(|(name, store)| Some((name.clone(), store.quota()?)))
            .collect();
        // Per store, what it holds by layer key and zoom: a quota's index,
        // else the store's own count (a walk: kept for a while).
        let mut held: std::collections::BTreeMap<String, Option<Vec<ZoomUsage>>> =
            std::collections::BTreeMap::new();
        for (name, store) in &registry.stores {
            let zooms = match quotas.get(name) {
                Some((_, zooms)) => Some(zooms.clone()),
                None => counted(name, store.as_ref()),
            };
            held.insert(name.clone(), zooms);
        }
        let layers: Vec<LayerReport> = registry
            .layers()
            .iter()
            .map(|layer| {
                let store = layer.cache.as_ref().map(|c| c.store_name.clone());
                let stored = store
                    .as_ref()
                    .and_then(|s| held.get(s)?.as_ref())
                    .map(|zooms| {
                        let mut by_zoom: std::collections::BTreeMap<u8, (u64, u64)> =
                            std::collections::BTreeMap::new();
                        for z in zooms
                            .iter()
                            .filter(|z| tessera_store::quota::is_key_of(&z.layer, &layer.cache_key))
                        {
                            let e = by_zoom.entry(z.z).or_default();
                            e.0 += z.tiles;
                            e.1 += z.bytes;
                        }
                        by_zoom
                            .into_iter()
                            .map(|(z, (tiles, bytes))| ZoomStored { z, tiles, bytes })
                            .collect()
                    });
                LayerReport {
                    layer: layer.name.clone(),
                    store,
                    counts: metrics.layer_counts(&layer.name),
                    stored,
                }
            })
            .collect();
        let stores: Vec<StoreReport> = quotas
            .into_iter()
            .map(|(store, (usage, _))| StoreReport {
                store,
                quota: Some(usage),
            })
            .collect();
        serde_json::json!({ "layers": layers, "stores": stores })
    })
    .await;
    match built {
        Ok(body) => Json(body).into_response(),
        Err(e) => ApiError::internal(&e).into_response(),
    }
}
