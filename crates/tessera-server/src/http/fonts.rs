//! `GET /fonts/{fontstack}/{start}-{end}.pbf` (MapLibre glyph ranges) and
//! `GET /fonts.json` (the fonts offered), from the service's
//! [`tessera_carto::glyphs::Glyphs`].

use axum::extract::{Path, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use tessera_carto::glyphs::GlyphError;

use super::error::ApiError;
use super::reply::made_bytes;
use super::state::Fonts;

/// How long clients and caches may keep a range: fonts change only with
/// the configuration, and the ETag tells.
const CACHE_CONTROL: &str = "public, max-age=86400";

/// The manual's page on fonts and glyphs.
const DOCS: &str = "styles#fonts-and-glyphs";

/// `GET /fonts.json`: every font by name, with its family, style, how many
/// code points it covers and the first and last.
pub async fn list(State(state): State<Fonts>) -> Response {
    let fonts: serde_json::Map<String, serde_json::Value> = state
        .glyphs
        .library()
        .faces()
        .map(|(name, face)| {
            (
                name.to_string(),
                serde_json::json!({
                    "family": face.family,
                    "style": face.style,
                    "glyphs": face.code_points,
                    "start": face.range.0,
                    "end": face.range.1,
                }),
            )
        })
        .collect();
    (
        [(header::CONTENT_TYPE, "application/json")],
        serde_json::Value::Object(fonts).to_string(),
    )
        .into_response()
}

/// `GET /fonts/{fontstack}/{range}.pbf`: a glyph range, made on the first
/// request (on a blocking thread) and kept.
pub async fn range(
    State(state): State<Fonts>,
    Path((fontstack, file)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let range = file.strip_suffix(".pbf").ok_or_else(|| {
        ApiError::bad_request(
            "InvalidParameterValue",
            "a glyph range is asked as START-END.pbf (e.g. 0-255.pbf)",
        )
        .documented(DOCS)
    })?;
    let refused = |e: GlyphError| match e {
        GlyphError::UnknownFont { .. } => {
            ApiError::not_found("NotFound", e.to_string()).documented(DOCS)
        }
        GlyphError::BadRequest(_) => {
            ApiError::bad_request("InvalidParameterValue", e.to_string()).documented(DOCS)
        }
        other => ApiError::internal(&other),
    };
    // A range made before is answered here; one to make, on a blocking
    // thread.
    let bytes = match state.glyphs.kept(&fontstack, range).map_err(refused)? {
        Some(kept) => kept,
        None => {
            let glyphs = state.glyphs.clone();
            let range = range.to_string();
            tokio::task::spawn_blocking(move || glyphs.range(&fontstack, &range))
                .await
                .map_err(|e| ApiError::internal(&e))?
                .map_err(refused)?
        }
    };
    Ok(made_bytes(
        bytes::Bytes::from_owner(bytes),
        "application/x-protobuf",
        CACHE_CONTROL,
        &headers,
    ))
}
