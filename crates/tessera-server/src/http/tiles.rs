//! XYZ (`/tiles/...`) and TMS (`/tms/1.0.0/...`) tile endpoints.

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use tessera_grid::GridError;
use tessera_grid::TileFormat;

use super::error::ApiError;
use super::{AppState, TileLookupError, resolve_tile, serve_tile};

type TilePath = Path<(String, String, String, String, String)>;

/// `GET /tiles/{layer}/{grid}/{z}/{x}/{y}.{ext}`: rows from the top.
pub async fn xyz(
    State(state): State<AppState>,
    Path((layer, grid, z, x, file)): TilePath,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    serve(&state, &headers, &layer, &grid, (&z, &x, &file), false).await
}

/// `GET /tms/1.0.0/{layer}/{grid}/{z}/{x}/{y}.{ext}`: rows from the bottom.
pub async fn tms(
    State(state): State<AppState>,
    Path((layer, grid, z, x, file)): TilePath,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    serve(&state, &headers, &layer, &grid, (&z, &x, &file), true).await
}

async fn serve(
    state: &AppState,
    headers: &HeaderMap,
    layer: &str,
    grid: &str,
    (z, x, file): (&str, &str, &str),
    tms_rows: bool,
) -> Result<Response, ApiError> {
    let (y, ext) = file.rsplit_once('.').unwrap_or((file, ""));
    let tile = resolve_tile(
        &state.registry,
        layer,
        grid,
        (z, x, y),
        tms_rows,
        TileFormat::from_extension(ext),
        ext,
    )
    .map_err(plain_error)?;
    serve_tile(state, tile, headers).await
}

/// Maps a lookup failure to a plain-text 400/404.
pub fn plain_error(e: TileLookupError) -> ApiError {
    match e {
        TileLookupError::UnknownLayer(name) => {
            ApiError::not_found("LayerNotDefined", format!("unknown layer {name:?}"))
        }
        TileLookupError::UnknownGrid(name) => ApiError::not_found(
            "InvalidParameterValue",
            format!("grid {name:?} is not offered for this layer"),
        ),
        TileLookupError::UnknownFormat(ext) => ApiError::not_found(
            "InvalidFormat",
            format!("format {ext:?} is not offered for this layer"),
        ),
        TileLookupError::Coord(e @ GridError::NotAnInteger { .. }) => {
            ApiError::bad_request("InvalidParameterValue", e.to_string())
        }
        TileLookupError::Coord(e) => ApiError::not_found("TileOutOfRange", e.to_string()),
        TileLookupError::ZoomOutsideLayer { z, min, max } => ApiError::not_found(
            "TileOutOfRange",
            format!("zoom {z} is outside this layer's zoom range {min}..={max}"),
        ),
    }
}
