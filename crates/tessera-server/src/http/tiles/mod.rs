//! The tile request's room: the XYZ (`/tiles/...`) and TMS
//! (`/tms/1.0.0/...`) endpoints, [`serve_tile`] which every tile protocol
//! ends in, the addresses and their lookup ([`address`], with the replies
//! to a lookup that names no tile), and the short way for hits ([`fast`]).

pub mod address;
pub(crate) mod fast;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::auth::Caller;
use crate::config::auth::Grant;
use crate::http::error::{ApiError, Protocol};
use crate::http::guard;
use crate::http::reply::{accepts_gzip, gunzip, header_value, image_response};
use crate::http::state::Tiles;
use crate::http::transport::access;
use crate::tile_cache::{CacheStatus, Tile, TileCache, TileRequest};
use address::{Rows, TileAddress};
use tessera_grid::TileFormat;

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
    let mut tile = address
        .resolve(&state.registry, rows, &|n| caller.sees(n))
        .map_err(|e| ApiError::from_lookup(e, Protocol::Plain))?;
    if tile.format == TileFormat::Mvt
        && tile.layer.formats.contains(&TileFormat::Mlt)
        && prefers_mlt(headers)
    {
        tile.format = TileFormat::Mlt;
    }
    serve_tile(&state.cache, tile, headers, caller).await
}

/// Whether `Accept` asks for MapLibre Tiles over Mapbox Vector Tiles: it
/// names `application/vnd.maplibre-tile` with a quality above MVT's (or
/// names no MVT type). An `.mvt` or `.pbf` address of a layer that offers
/// both is answered in MLT then, as MapLibre asks for it.
fn prefers_mlt(headers: &HeaderMap) -> bool {
    let (mut mlt, mut mvt) = (None::<f32>, None::<f32>);
    for accept in headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
    {
        for range in accept.split(',') {
            let mut parts = range.split(';');
            let kind = parts.next().unwrap_or_default().trim();
            let quality = parts
                .find_map(|p| p.trim().strip_prefix("q="))
                .and_then(|q| q.trim().parse().ok())
                .unwrap_or(1.0);
            if kind.eq_ignore_ascii_case(TileFormat::Mlt.content_type()) {
                mlt = Some(quality);
            } else if kind.eq_ignore_ascii_case(TileFormat::Mvt.content_type())
                || kind.eq_ignore_ascii_case("application/x-protobuf")
            {
                mvt = Some(quality);
            }
        }
    }
    match (mlt, mvt) {
        (Some(mlt), None) => mlt > 0.0,
        (Some(mlt), Some(mvt)) => mlt > mvt,
        _ => false,
    }
}

/// Serves one tile through the cache: `X-Cache: HIT|MISS`
/// (`X-Tessera-Partial` when its source stopped at a limit), a strong ETag
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
pub(crate) fn tile_response(
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
        // A layer with both vector formats answers `.mvt` addresses by
        // `Accept` too.
        let vary = if tile.layer.formats.contains(&TileFormat::Mlt) {
            "accept-encoding, accept"
        } else {
            "accept-encoding"
        };
        response
            .headers_mut()
            .insert(header::VARY, HeaderValue::from_static(vary));
    }
    let headers = response.headers_mut();
    headers.reserve(12);
    if let Some(v) = etag {
        headers.insert(header::ETAG, v);
    }
    if let Some(v) = last_modified.and_then(|m| header_value(format_args!("{m}"))) {
        headers.insert(header::LAST_MODIFIED, v);
    }
    match result.partial {
        // Drawn from what could be read in time, not stored: not for
        // shared caches either.
        Some(partial) if !partial.lasts() => {
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        }
        _ => {
            if let Some(v) =
                header_value(format_args!("public, max-age={}", tile.layer.max_age_secs))
            {
                headers.insert(header::CACHE_CONTROL, v);
            }
        }
    }
    if let Some(partial) = result.partial {
        headers.insert(
            "x-tessera-partial",
            HeaderValue::from_static(partial.name()),
        );
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

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, value.parse().unwrap());
        h
    }

    #[test]
    fn accept_chooses_mlt_only_when_it_ranks_above_mvt() {
        assert!(!prefers_mlt(&HeaderMap::new()));
        assert!(!prefers_mlt(&accept("*/*")));
        assert!(prefers_mlt(&accept("application/vnd.maplibre-tile")));
        assert!(prefers_mlt(&accept(
            "application/vnd.maplibre-tile, application/vnd.mapbox-vector-tile;q=0.9"
        )));
        assert!(!prefers_mlt(&accept(
            "application/vnd.maplibre-tile;q=0.5, application/vnd.mapbox-vector-tile"
        )));
        assert!(!prefers_mlt(&accept(
            "application/vnd.maplibre-tile, application/x-protobuf"
        )));
        assert!(!prefers_mlt(&accept("application/vnd.maplibre-tile;q=0")));
    }
}
