//! `GET /sprites/{name}.json`, `.png`, `@2x.json`, `@2x.png` (`?sdf=true`
//! for SDF icons): MapLibre sprite sheets of the configured sprite sets
//! ([`tessera_carto::sprites`]).

use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use axum::response::Response;
use tessera_carto::sprites::{SpriteError, Variant};

use super::error::ApiError;
use super::reply::made_bytes;
use super::state::Fonts;

/// The manual's page on sprites.
const DOCS: &str = "styles#sprites";

/// A short `max-age`: a set's folder may change; the ETag tells.
const CACHE_CONTROL: &str = "public, max-age=60";

/// The sheet or index `file` names (`maki.json`, `maki@2x.png`).
pub async fn sprite(
    State(state): State<Fonts>,
    Path(file): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let bad = || {
        ApiError::bad_request(
            "InvalidParameterValue",
            "a sprite is asked as NAME.json, NAME.png, NAME@2x.json or NAME@2x.png",
        )
        .documented(DOCS)
    };
    let (stem, png) = if let Some(stem) = file.strip_suffix(".png") {
        (stem, true)
    } else if let Some(stem) = file.strip_suffix(".json") {
        (stem, false)
    } else {
        return Err(bad());
    };
    let (name, ratio) = match stem.strip_suffix("@2x") {
        Some(name) => (name, 2),
        None => (stem, 1),
    };
    if name.is_empty() || name.contains('@') {
        return Err(bad());
    }
    let sdf = super::tiles::address::query_params(query.as_deref())
        .into_iter()
        .any(|(k, v)| k == "sdf" && v == "true");
    let sprites = state.sprites.clone();
    let name = name.to_string();
    let sheet = tokio::task::spawn_blocking(move || sprites.sheet(&name, Variant { ratio, sdf }))
        .await
        .map_err(|e| ApiError::internal(&e))?
        .map_err(|e| match e {
            SpriteError::Unknown { .. } => {
                ApiError::not_found("NotFound", e.to_string()).documented(DOCS)
            }
            SpriteError::Unreadable { .. } => ApiError::internal(&e),
        })?;
    let (bytes, content_type) = if png {
        (sheet.png, "image/png")
    } else {
        (sheet.index, "application/json")
    };
    Ok(made_bytes(
        bytes::Bytes::from_owner(bytes),
        content_type,
        CACHE_CONTROL,
        &headers,
    ))
}
