//! `PUT /admin/sources/{name}`: a source raster uploaded into object
//! storage as its body arrives, then served as layer `{name}`.
//!
//! The body is pulled from hyper one frame at a time, in order, and each
//! frame is copied into the current part of a multipart upload (`Upload`)
//! and dropped, so hyper reuses its receive buffer; the next frame is only
//! read once there is room, so at most `parts_in_flight` x `part_size`
//! bytes of parts are held ([`super::transport::body`]). No
//! task per chunk, no queue. Every failure ends with the upload aborted: nothing partial is
//! ever visible.

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use object_store::ObjectStoreExt;
use std::sync::Arc;

use bytes::Bytes;
use tessera_store::upload::{Upload, verify};

use super::error::ApiError;
use super::state::Admin;
use super::transport::body::{BodyError, BodyReader};
use crate::config::valid_name;
use crate::sources::{Uploads, sniff_extension};

/// Handles `PUT /admin/sources/{name}`.
pub async fn put_source(
    State(state): State<Admin>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    match upload(&state, &name, &headers, body).await {
        Ok(r) => r,
        Err(e) => error_response(e),
    }
}

/// The response for an admin error: a 401 also says which scheme to use.
fn error_response(e: ApiError) -> Response {
    let challenge = e.status == StatusCode::UNAUTHORIZED;
    let mut r = e.into_response();
    if challenge {
        r.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    r
}

/// 401: no valid bearer token.
fn unauthorized() -> ApiError {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        "Unauthorized",
        "a valid `Authorization: Bearer <token>` header is required",
    )
}

/// Handles `POST /admin/reload[?remove_layers=true]`: reads the config file
/// again and serves it (see [`super::Reload`]); 200 with the layer count, or
/// 400 with why the config was refused (the old one keeps serving), among
/// which layers dropped without `remove_layers=true`.
pub async fn reload(
    State(state): State<Admin>,
    headers: HeaderMap,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
) -> Response {
    if let Some(refused) = refusal(&state, &headers) {
        return refused;
    }
    let Some(live) = state.live.as_ref().and_then(std::sync::Weak::upgrade) else {
        return ApiError::new(
            StatusCode::CONFLICT,
            "Conflict",
            "this server cannot reload its configuration",
        )
        .into_response();
    };
    let remove_layers = query_value(query.as_deref(), "remove_layers").as_deref() == Some("true");
    match tokio::task::spawn_blocking(move || live.reload(remove_layers)).await {
        Ok(Ok(layers)) => {
            (StatusCode::OK, format!("reloaded: {layers} layer(s)\n")).into_response()
        }
        Ok(Err(e)) => {
            let message = tessera_source::error_chain(&e);
            tracing::error!(
                error = &e as &dyn std::error::Error,
                "the new configuration was refused; the old one keeps serving"
            );
            ApiError::bad_request(
                "InvalidConfiguration",
                format!(
                    "the configuration was not reloaded (the old one keeps serving): {message}"
                ),
            )
            .into_response()
        }
        Err(join) => ApiError::internal(&join).into_response(),
    }
}

/// Handles `POST /admin/truncate?layer=L&zoom=A..B[&grid=G][&format=F]
/// [&bbox=minx,miny,maxx,maxy[&bbox_crs=EPSG:4326]]`: removes the tiles as
/// `tessera truncate` does and tells the nodes sharing the store (a new
/// generation of the layer). It runs as a job (`crate::truncate`): an
/// identical request joins it, `GET /admin/truncate` shows its progress,
/// `DELETE /admin/truncate?layer=L` stops it, and it stops when every
/// request waiting for it has gone. 200 with what was removed; 400 for a
/// bad argument; 409 when it was cancelled; 502 when the store fails.
pub async fn truncate(
    State(state): State<Admin>,
    headers: HeaderMap,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
) -> Response {
    if let Some(refused) = refusal(&state, &headers) {
        return refused;
    }
    let plans = match truncate_plan(&state, query.as_deref().unwrap_or("")) {
        Ok(plans) => plans,
        Err(message) => {
            return ApiError::bad_request("InvalidParameterValue", message).into_response();
        }
    };
    // One dimension value after the other (a layer without dimensions
    // has one plan); the first that does not end well is the answer.
    let mut text = String::new();
    for plan in plans {
        match truncate_one(&state, plan).await {
            Ok(line) => text.push_str(&line),
            Err(refused) => return refused,
        }
    }
    (StatusCode::OK, text).into_response()
}

/// Truncates one plan (one dimension value's tiles) as a job: the line
/// saying what was removed, or the answer saying why not.
async fn truncate_one(state: &Admin, plan: crate::plan::TilePlan) -> Result<String, Response> {
    let layer = plan.layer.label();
    let waiting = crate::truncate::start_or_join(plan, state.config.cluster.node());
    let joined = if waiting.joined() {
        " (joined a running truncation of the same area)"
    } else {
        ""
    };
    match waiting.outcome().await {
        Ok(done) => {
            let announced = match &done.announced {
                Ok(true) => "other nodes told".to_string(),
                Ok(false) => "the store is not shared".to_string(),
                Err(e) => format!("other nodes could NOT be told: {e}"),
            };
            Ok(format!(
                "truncated {layer}{joined}: {} objects deleted, {} rewritten; {announced}\n",
                done.report.objects_deleted, done.report.objects_rewritten
            ))
        }
        Err(e) => match &*e {
            crate::truncate::TruncateError::Store(tessera_store::StoreError::Cancelled {
                done,
                ..
            }) => Err(ApiError::new(
                StatusCode::CONFLICT,
                "Cancelled",
                format!("the truncation of {layer} was cancelled after {done} objects"),
            )
            .into_response()),
            _ => {
                tracing::error!(error = &*e as &dyn std::error::Error, "truncate failed");
                Err(ApiError::new(
                    StatusCode::BAD_GATEWAY,
                    "StoreFailed",
                    "the truncation failed; the server log has the details",
                )
                .into_response())
            }
        },
    }
}

/// Handles `GET /admin/truncate`: the truncations running, as JSON (layer,
/// area, objects removed so far, seconds, requests waiting).
pub async fn truncations(State(state): State<Admin>, headers: HeaderMap) -> Response {
    if let Some(refused) = refusal(&state, &headers) {
        return refused;
    }
    axum::Json(crate::truncate::running()).into_response()
}

/// Handles `DELETE /admin/truncate?layer=L`: stops the layer's running
/// truncations (what was removed stays removed); 200 with how many.
pub async fn cancel_truncate(
    State(state): State<Admin>,
    headers: HeaderMap,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
) -> Response {
    if let Some(refused) = refusal(&state, &headers) {
        return refused;
    }
    let Some(layer) = query_value(query.as_deref(), "layer") else {
        return ApiError::bad_request("MissingParameterValue", "missing `layer`").into_response();
    };
    let n = crate::truncate::cancel(&layer);
    (
        StatusCode::OK,
        format!("{n} truncation(s) of {layer:?} asked to stop\n"),
    )
        .into_response()
}

/// The plans a truncate request names: one per dimension value
/// (`dimension=NAME=VALUES`, as `tessera truncate --dimension`) and style
/// (`style=NAME,...` or `all`, as `--style`).
fn truncate_plan(state: &Admin, query: &str) -> Result<Vec<crate::plan::TilePlan>, String> {
    let mut args: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
        // A name given twice is refused, as the read endpoints refuse it:
        // `layer=a&layer=b` truncates neither, not just the last.
        let name = k.to_ascii_lowercase();
        if let Some(first) = args.get(&name)
            && *first != v
        {
            return Err(format!("`{name}` is given twice ({first:?} and {v:?})"));
        }
        args.insert(name, v.into_owned());
    }
    let split = |name: &str, by: char| -> Vec<String> {
        args.get(name)
            .map(|v| {
                v.split(by)
                    .filter(|s| !s.trim().is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    let spec = crate::jobs::JobSpec {
        kind: crate::jobs::JobKind::Truncate,
        layer: args.get("layer").ok_or("missing `layer`")?.clone(),
        zoom: args
            .get("zoom")
            .ok_or("missing `zoom` (A..B or Z)")?
            .clone(),
        grid: args.get("grid").cloned(),
        format: args.get("format").cloned(),
        bbox: args.get("bbox").cloned(),
        bbox_crs: args.get("bbox_crs").cloned(),
        polygon: None,
        // `dimension=time=all;elevation=0,500`: one spec per dimension;
        // `style=ndvi,red` or `style=all`.
        dimensions: split("dimension", ';'),
        styles: split("style", ','),
        threads: None,
        rate: None,
    };
    spec.plans(&state.registry)
}

/// The value of the query parameter `name` (in any case), decoded.
fn query_value(query: Option<&str>, name: &str) -> Option<String> {
    url::form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.into_owned())
}

/// The answer refusing a request to an admin endpoint: 404 when the admin
/// API is off, 401 without the token; `None` lets it through.
pub(super) fn refusal(state: &Admin, headers: &HeaderMap) -> Option<Response> {
    let Some(admin) = &state.config.admin else {
        return Some(
            ApiError::not_found(
                "NotFound",
                "the admin API is not enabled (no `admin:` section)",
            )
            .into_response(),
        );
    };
    (!authorized(headers, &admin.token)).then(|| error_response(unauthorized()))
}

pub(super) fn authorized(headers: &HeaderMap, token: &str) -> bool {
    let Some(given) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return false;
    };
    // Compare in constant time for equal lengths.
    given.len() == token.len()
        && given
            .bytes()
            .zip(token.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

async fn upload(
    state: &Admin,
    name: &str,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let Some(uploads) = state.uploads.clone() else {
        if let Some(refused) = refusal(state, headers) {
            return Ok(refused);
        }
        return Err(ApiError::not_found(
            "NotFound",
            "uploads of sources are off: give admin.sources_url and admin.sources_file",
        ));
    };
    if !authorized(headers, &uploads.config.token) {
        return Err(unauthorized());
    }
    if !valid_name(name) {
        return Err(ApiError::bad_request(
            "InvalidParameterValue",
            "a source name uses only letters, digits, '_', '-' and '.'",
        ));
    }
    if state.config.layers.iter().any(|l| l.name == name) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "Conflict",
            format!("layer {name:?} is defined in the configuration"),
        ));
    }
    let max = uploads.config.max_upload_bytes();
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "PayloadTooLarge",
            format!("the upload is larger than the {max} bytes allowed (admin.max_upload)"),
        )
    };
    let empty = || ApiError::bad_request("MissingBody", "the request body is empty");
    if let Some(len) = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
    {
        if len > max {
            return Err(too_large());
        }
        if len == 0 {
            return Err(empty());
        }
    }

    // Nothing is stored before the first bytes show a raster format GDAL
    // reads; the object is named `<name>.<ext>` so GDAL's network file
    // systems open it.
    let stall = Duration::from_secs(uploads.config.body_timeout_secs);
    let mut reader = BodyReader::new(body, max, stall);
    let mut head: Vec<Bytes> = Vec::new();
    let mut up: Option<(Upload, String)> = None;
    loop {
        let data = match reader.next().await {
            Ok(Some(data)) => data,
            Ok(None) => break,
            Err(e) => {
                abort(&mut up).await;
                return Err(match e {
                    BodyError::Stalled(_) => ApiError::new(
                        StatusCode::REQUEST_TIMEOUT,
                        "RequestTimeout",
                        format!("{e} (admin.body_timeout_secs); nothing was stored"),
                    ),
                    BodyError::TooLarge(_) => too_large(),
                    BodyError::Incomplete(_) => {
                        ApiError::bad_request("IncompleteBody", format!("{e}; nothing was stored"))
                    }
                });
            }
        };
        match &mut up {
            Some((u, _)) => u
                .write(&data)
                .await
                .map_err(|e| ApiError::upstream("storing the upload", &e))?,
            None => {
                head.push(data);
                if head.iter().map(Bytes::len).sum::<usize>() >= SNIFF_BYTES {
                    up = Some(start(&uploads, name, std::mem::take(&mut head)).await?);
                }
            }
        }
    }
    if reader.received() == 0 {
        return Err(empty());
    }
    let (up, file) = match up {
        Some(u) => u,
        None => start(&uploads, name, head).await?,
    };
    let path = uploads.object_path(&file);
    let done = up
        .finish()
        .await
        .map_err(|e| ApiError::upstream("storing the upload", &e))?;
    if uploads.config.verify {
        verify(&uploads.store, &path, &done)
            .await
            .map_err(|e| ApiError::upstream("verifying the stored upload", &e))?;
    }
    register(state, &uploads, name, &file).await?;
    let body = serde_json::json!({
        "name": name,
        "bytes": done.bytes,
        "crc32c": format!("{:08x}", done.crc32c),
        "parts": done.parts,
        "object": format!("{}/{file}", uploads.url().trim_end_matches('/')),
        "gdal_path": uploads.gdal_path(&file),
        "tilejson": format!("/tiles/{name}/WebMercatorQuad/tilejson.json"),
    });
    Ok((
        StatusCode::CREATED,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response())
}

/// Opens the stored raster with GDAL as layer `name` and records it; a file
/// GDAL cannot read is deleted again and refused.
async fn register(
    state: &Admin,
    uploads: &Arc<Uploads>,
    name: &str,
    file: &str,
) -> Result<(), ApiError> {
    let (state2, uploads2) = (state.clone(), uploads.clone());
    let (name2, file2) = (name.to_string(), file.to_string());
    let result = tokio::task::spawn_blocking(move || {
        uploads2.serve_as_layer(
            &state2.registry,
            &name2,
            &file2,
            &state2.config,
            &crate::assemble::no_wrap(),
        )?;
        uploads2.record(&name2, &file2)
    })
    .await
    .map_err(|e| ApiError::upstream("registering the upload", &e))?;
    match result {
        Ok(Some(old)) if old != file => {
            // Replaced: the old object goes.
            let _ = uploads.store.delete(&uploads.object_path(&old)).await;
        }
        Ok(_) => {}
        Err(e) => {
            let _ = uploads.store.delete(&uploads.object_path(file)).await;
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "InvalidSource",
                format!("the upload is not a raster tessera can serve: {e}; it was not kept"),
            ));
        }
    }
    Ok(())
}

/// Bytes looked at to tell the raster format.
const SNIFF_BYTES: usize = 16;

/// Starts the upload once the first bytes show a raster format, and sends
/// them.
async fn start(
    uploads: &Arc<Uploads>,
    name: &str,
    head: Vec<Bytes>,
) -> Result<(Upload, String), ApiError> {
    let first: Vec<u8> = head
        .iter()
        .flat_map(|b| b.iter().copied())
        .take(SNIFF_BYTES)
        .collect();
    let Some(ext) = sniff_extension(&first) else {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            "the body is not a raster format tessera serves (GeoTIFF, JPEG 2000, PNG, JPEG, GeoPackage, netCDF); nothing was stored",
        ));
    };
    // A new object per upload: the one being served is not overwritten
    // while GDAL reads it, and its tiles keep their own cache key.
    let version = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let file = format!("{name}.{version:x}.{ext}");
    let mut up = Upload::new(
        uploads.store.clone(),
        uploads.object_path(&file),
        uploads.upload_options(),
    );
    for chunk in head {
        up.write(&chunk)
            .await
            .map_err(|e| ApiError::upstream("storing the upload", &e))?;
    }
    Ok((up, file))
}

async fn abort(up: &mut Option<(Upload, String)>) {
    if let Some((u, _)) = up {
        u.abort().await;
    }
}
