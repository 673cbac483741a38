//! XYZ (`/tiles/...`) and TMS (`/tms/1.0.0/...`) tile endpoints.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;

use super::address::{Rows, TileAddress};
use super::error::{ApiError, Protocol};
use super::serve_tile;
use super::state::Tiles;
use crate::auth::Caller;

/// `GET /tiles/{layer}/{grid}/{z}/{x}/{y}.{ext}`: rows from the top.
pub async fn xyz(
    State(state): State<Tiles>,
    caller: Caller,
    address: TileAddress,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    serve(&state, &headers, &address, Rows::FromTop, &caller).await
}

/// `GET /tms/1.0.0/{layer}/{grid}/{z}/{x}/{y}.{ext}`: rows from the bottom.
pub async fn tms(
    State(state): State<Tiles>,
    caller: Caller,
    address: TileAddress,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    serve(&state, &headers, &address, Rows::FromBottom, &caller).await
}

async fn serve(
    state: &Tiles,
    headers: &HeaderMap,
    address: &TileAddress,
    rows: Rows,
    caller: &Caller,
) -> Result<Response, ApiError> {
    let tile = address
        .resolve(&state.registry, rows, &|n| caller.sees(n))
        .map_err(|e| ApiError::from_lookup(e, Protocol::Plain))?;
    serve_tile(&state.cache, tile, headers, caller).await
}
