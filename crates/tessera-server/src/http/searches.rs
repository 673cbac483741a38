//! `POST /searches` (register a STAC search, as titiler-pgstac's
//! `/searches/register`), `GET /searches` (the registered ones a caller may
//! see) and `GET /searches/{id}` (one): a registered search is served as
//! layer `search:{id}` by every protocol.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::error::ApiError;
use super::state::Registered;
use crate::auth::Caller;
use crate::config::auth::Grant;
use crate::searches::{LAYER_PREFIX, SearchError, Searches, is_search_id};

/// The manual's section on registered searches.
const DOCS: &str = "sources#registered-searches";

fn searches(state: &Registered) -> Result<&Arc<Searches>, ApiError> {
    state.searches.as_ref().ok_or_else(|| {
        ApiError::not_found(
            "NotFound",
            "searches are not registered here (no `searches:` section)",
        )
        .documented(DOCS)
    })
}

/// Whether the caller may register a search: the admin token, else (with
/// `auth:`) a credential granted tiles on `search:*`, else
/// `searches.public`.
fn may_register(
    state: &Registered,
    searches: &Searches,
    headers: &HeaderMap,
    caller: &Caller,
) -> Result<(), ApiError> {
    if let Some(admin) = &state.config.admin
        && super::admin::authorized(headers, &admin.token)
    {
        return Ok(());
    }
    if state.config.auth.is_some() {
        return Ok(caller.may(&format!("{LAYER_PREFIX}*"), Grant::Tiles)?);
    }
    if searches.config.public {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::UNAUTHORIZED,
        "Unauthorized",
        "registering a search takes the admin token (Authorization: Bearer), a credential granted `search:*` (auth:), or `searches.public: true`",
    )
    .documented(DOCS))
}

/// The links of search `id`.
fn links(id: &str) -> Value {
    let layer = format!("{LAYER_PREFIX}{id}");
    json!([
        {"rel": "self", "href": format!("/searches/{id}"), "type": "application/json"},
        {"rel": "tilejson", "href": format!("/tiles/{layer}/WebMercatorQuad/tilejson.json"),
         "type": "application/json"},
        {"rel": "tiles", "href": format!("/tiles/{layer}/WebMercatorQuad/{{z}}/{{x}}/{{y}}.png"),
         "type": "image/png"},
        {"rel": "preview", "href": format!("/preview/{layer}"), "type": "text/html"},
        {"rel": "collection", "href": format!("/ogcapi/collections/{layer}"),
         "type": "application/json"},
    ])
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// `POST /searches`: registers the search in the body (a STAC API search:
/// `collections`, `ids`, `datetime`, `bbox`, `intersects`, `filter`
/// (CQL2-JSON), `sortby`, `query`, and an optional `metadata` with a
/// `name`). 201 with its id and links when new here, 200 when it was
/// registered already; 400 for a search pgSTAC refuses (its message), 413
/// past `searches.max_body_bytes`, 429 when `max_searches` are registered.
pub async fn register(
    State(state): State<Registered>,
    caller: Caller,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let searches = searches(&state)?.clone();
    may_register(&state, &searches, &headers, &caller)?;
    let most = searches.config.max_body_bytes;
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "InvalidParameterValue",
            format!("a search of more than {most} bytes (searches.max_body_bytes)"),
        )
    };
    let bytes = super::transport::body::small_body(&headers, body, most)
        .await
        .ok_or_else(too_large)?;
    let search: Value = serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::bad_request(
            "InvalidParameterValue",
            format!("the body is not JSON: {e}"),
        )
        .documented(DOCS)
    })?;
    let (registry, config) = (state.registry.clone(), state.config.clone());
    let registered = tokio::task::spawn_blocking(move || {
        searches.register(&search, &registry, &config, &crate::assemble::no_wrap())
    })
    .await
    .map_err(|e| ApiError::upstream("registering the search", &e))?;
    let (id, new) = registered.map_err(|e| {
        let status = match e {
            SearchError::Invalid(_) | SearchError::Refused(_) => StatusCode::BAD_REQUEST,
            SearchError::Full(..) => StatusCode::TOO_MANY_REQUESTS,
            SearchError::Unavailable(_) => StatusCode::BAD_GATEWAY,
        };
        ApiError::new(status, "InvalidParameterValue", e.to_string()).documented(DOCS)
    })?;
    let status = if new {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(json_response(
        status,
        &json!({"id": &id, "layer": format!("{LAYER_PREFIX}{id}"), "links": links(&id)}),
    ))
}

/// `GET /searches`: the registered searches the caller may read.
pub async fn list(State(state): State<Registered>, caller: Caller) -> Result<Response, ApiError> {
    let searches = searches(&state)?;
    let listed: Vec<Value> = searches
        .ids()
        .into_iter()
        .filter(|id| caller.sees(&format!("{LAYER_PREFIX}{id}")))
        .map(|id| json!({"id": id, "links": links(&id)}))
        .collect();
    Ok(json_response(
        StatusCode::OK,
        &json!({"searches": listed, "max_searches": searches.config.max_searches}),
    ))
}

/// `GET /searches/{id}`: the search, its metadata, when it was registered
/// and last used, when it expires, and its links; 404 when it is not
/// registered (or has expired).
pub async fn describe(
    State(state): State<Registered>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let searches = searches(&state)?;
    let unknown = || {
        ApiError::not_found(
            "NotFound",
            format!("no search {id:?} is registered (or it expired unused)"),
        )
        .documented(DOCS)
    };
    if !is_search_id(&id) {
        return Err(unknown());
    }
    caller.may(&format!("{LAYER_PREFIX}{id}"), Grant::Tiles)?;
    let mut described = searches.describe(&id).ok_or_else(unknown)?;
    described["links"] = links(&id);
    Ok(json_response(StatusCode::OK, &described))
}
