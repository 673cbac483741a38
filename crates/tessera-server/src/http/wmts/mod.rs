//! WMTS 1.0.0: GetCapabilities and GetTile, in KVP and RESTful encodings.
//! Both GetTile encodings become a [`TileAddress`]; capabilities are
//! written from a template in [`capabilities`].

mod capabilities;

use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::Response;
use capabilities::Sections;

use super::error::{ApiError, Protocol};
use super::params::Kvp;
use super::state::{Catalog, Tiles};
use super::tiles::address::{Rows, TileAddress};
use super::tiles::serve_tile;
use crate::auth::Caller;

/// `GET /wmts?SERVICE=WMTS&REQUEST=...`.
pub async fn kvp(
    State(state): State<Catalog>,
    State(tiles): State<Tiles>,
    caller: Caller,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let err = |e: ApiError| e.speaking(Protocol::Wmts);
    let kvp = Kvp::parse(
        query.as_deref().unwrap_or(""),
        state.config.limits.max_query_bytes,
    )
    .map_err(|e| err(e.into()))?;
    // SERVICE is mandatory in every WMTS KVP request (WMTS 1.0.0, 7.1.1.1).
    kvp.required("SERVICE").map_err(|e| err(e.into()))?;
    let request = kvp.service_request("WMTS").map_err(|e| err(e.into()))?;
    match request.to_ascii_lowercase().as_str() {
        "getcapabilities" => {
            if let Some(accepted) = kvp.get("acceptversions")
                && !accepted.split(',').any(|v| v.trim() == "1.0.0")
            {
                return Err(err(ApiError::bad_request(
                    "VersionNegotiationFailed",
                    format!(
                        "none of AcceptVersions {accepted:?} is offered; this server speaks 1.0.0"
                    ),
                )));
            }
            let sections = match kvp.get("sections") {
                Some(text) => Sections::parse(text).map_err(err)?,
                None => Sections::ALL,
            };
            capabilities::response(&state, &headers, sections, &caller).map_err(err)
        }
        "gettile" => {
            let version = kvp.get("version").unwrap_or("1.0.0");
            if version != "1.0.0" {
                return Err(err(ApiError::bad_request(
                    "VersionNegotiationFailed",
                    format!("VERSION {version:?} is not supported; use 1.0.0"),
                )
                .at("VERSION")));
            }
            let address = TileAddress::from_wmts_kvp(&kvp).map_err(err)?;
            let whole = state.config.wmts.link_full_grid;
            get_tile(&tiles, &headers, &address, &caller, whole).await
        }
        // An operation WMTS defines that this server does not offer.
        "getfeatureinfo" => Err(err(ApiError::bad_request(
            "OperationNotSupported",
            "GetFeatureInfo is not offered; use GetCapabilities or GetTile",
        )
        .at("REQUEST"))),
        // A name WMTS does not define is a bad value of REQUEST, as the
        // WMTS 1.0.0 test suite expects (07-057r7, table 28).
        other => Err(err(ApiError::bad_request(
            "InvalidParameterValue",
            format!("REQUEST {other:?} is not a WMTS operation; use GetCapabilities or GetTile"),
        )
        .at("REQUEST"))),
    }
}

/// `GET /wmts/1.0.0/WMTSCapabilities.xml`; with a `REQUEST` in its query,
/// a KVP request like one to `/wmts` (clients that append KVP to any URL
/// the capabilities list).
pub async fn capabilities_rest(
    state: State<Catalog>,
    tiles: State<Tiles>,
    caller: Caller,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    if query.as_deref().is_some_and(has_request) {
        return kvp(state, tiles, caller, RawQuery(query), headers).await;
    }
    capabilities::response(&state, &headers, Sections::ALL, &caller)
        .map_err(|e| e.speaking(Protocol::Wmts))
}

/// Whether a query string holds a `REQUEST` parameter (any case).
fn has_request(query: &str) -> bool {
    query.split('&').any(|pair| {
        pair.split('=')
            .next()
            .is_some_and(|k| k.eq_ignore_ascii_case("request"))
    })
}

/// `GET /wmts/1.0.0/{layer}/{style}/{TileMatrixSet}/{TileMatrix}/{TileRow}/{TileCol}.{ext}`.
pub async fn rest_tile(
    State(state): State<Tiles>,
    State(catalog): State<Catalog>,
    caller: Caller,
    address: TileAddress,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let whole = catalog.config.wmts.link_full_grid;
    get_tile(&state, &headers, &address, &caller, whole).await
}

/// A GetTile; with `link_full_grid`, a request naming a grid's whole
/// TileMatrixSet is a tile at any of its zooms (as the capabilities link
/// it for layers drawn from their source).
async fn get_tile(
    state: &Tiles,
    headers: &HeaderMap,
    address: &TileAddress,
    caller: &Caller,
    link_full_grid: bool,
) -> Result<Response, ApiError> {
    // A TileMatrixSet of some of a grid's zooms names tiles of the grid.
    let mut address = address.clone();
    let whole_grid = state.registry.grid(&address.grid).is_some();
    if !whole_grid {
        address.grid = capabilities::grid_of_set(&address.grid).to_string();
    }
    let sees = |n: &str| caller.sees(n);
    let tile = if whole_grid && link_full_grid {
        address.resolve_in_whole_grid(&state.registry, Rows::FromTop, &sees)
    } else {
        address.resolve(&state.registry, Rows::FromTop, &sees)
    }
    .map_err(|e| ApiError::from_lookup(e, Protocol::Wmts))?;
    // Outside the TileMatrixSetLimits the capabilities give the layer.
    if let Some(locator) = capabilities::outside_limits(&tile.layer, &tile.grid, tile.coord) {
        return Err(ApiError::bad_request(
            "TileOutOfRange",
            format!(
                "tile row {} column {} of matrix {} is outside layer {:?}'s TileMatrixSetLimits",
                tile.coord.y(),
                tile.coord.x(),
                tile.coord.z(),
                tile.layer.name
            ),
        )
        .at(locator)
        .speaking(Protocol::Wmts));
    }
    serve_tile(&state.cache, tile, headers, caller)
        .await
        .map_err(|e| e.speaking(Protocol::Wmts))
}
