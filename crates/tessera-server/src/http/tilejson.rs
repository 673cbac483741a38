//! TileJSON 3.0.0 per layer and grid.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, RawQuery, State};
use axum::http::HeaderMap;
use serde::Deserialize;
use serde_json::{Value, json};
use tessera_grid::{TileFormat, mercator};

use super::error::ApiError;
use super::error::Protocol;
use super::reply::base_url;
use super::state::Catalog;
use super::tiles::address::{dimension_param, query_params, resolve_layer_grid};
use crate::auth::Caller;
use crate::config::auth::Grant;
use crate::model::{HIDPI_FACTOR, HIDPI_SUFFIX};

/// The query of a TileJSON request.
#[derive(Debug, Deserialize)]
pub struct TileJsonQuery {
    /// 2 for HiDPI tiles (`{y}@2x.png`, twice the pixels); default 1.
    tile_scale: Option<u32>,
    /// The tiles' format, as a URL extension (`png`, `mvt`, ...); default
    /// the layer's first.
    format: Option<String>,
}

/// `GET /tiles/{layer}/{grid}/tilejson.json[?tile_scale=2][&format=mvt]`.
/// For vector tiles, `vector_layers` lists each data layer with its fields.
/// A layer with dimensions lists them (`dimensions`: values and default);
/// its tile URLs carry the value the request names (`?time=...`), or the
/// default. A layer with named styles lists them (`styles`), and its tile
/// URLs carry the style the request names (`?style=...`).
pub async fn tilejson(
    State(state): State<Catalog>,
    caller: Caller,
    Path((layer, grid)): Path<(String, String)>,
    Query(query): Query<TileJsonQuery>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let (layer, grid) = resolve_layer_grid(&state.registry, &layer, &grid, &|n| caller.sees(n))
        .map_err(|e| ApiError::from_lookup(e, Protocol::Plain))?;
    caller.may(&layer.name, Grant::Tiles)?;
    let params = query_params(raw.as_deref());
    let mut tile_query = Vec::new();
    // A credential that came in the query goes on in the tile URLs.
    let credential = caller.link_query();
    if !credential.is_empty() {
        tile_query.push(credential);
    }
    // A style asked for goes on in the tile URLs too.
    let asked_style = params
        .iter()
        .find(|(k, _)| k == "style")
        .map(|(_, v)| v.as_str());
    let styled = layer
        .styled(asked_style)
        .map_err(|e| ApiError::not_found("StyleNotDefined", e.to_string()))?;
    if !Arc::ptr_eq(&styled, &layer) {
        tile_query.push(format!(
            "style={}",
            url::form_urlencoded::byte_serialize(styled.style_name.as_bytes()).collect::<String>()
        ));
    }
    let styles: Vec<&str> = layer.style_names().collect();
    let layer = styled;
    let mut dimensions = serde_json::Map::new();
    for d in &layer.dimensions {
        let asked = dimension_param(
            |n| params.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str()),
            &d.name,
        );
        let value = d
            .resolve(asked.as_deref())
            .map_err(|e| ApiError::from_dimension(&e))?;
        let key = match d.name.as_str() {
            "time" | "elevation" => d.name.clone(),
            other => format!("dim_{other}"),
        };
        tile_query.push(format!(
            "{key}={}",
            url::form_urlencoded::byte_serialize(value.as_bytes()).collect::<String>()
        ));
        dimensions.insert(
            d.name.clone(),
            json!({ "values": d.values, "default": d.default_value().ok(), "value": value }),
        );
    }
    let tile_query = if tile_query.is_empty() {
        String::new()
    } else {
        format!("?{}", tile_query.join("&"))
    };
    let (row_suffix, tile_size) = match query.tile_scale.unwrap_or(1) {
        1 => ("", grid.tms.tile_width),
        HIDPI_FACTOR => (HIDPI_SUFFIX, grid.tms.tile_width * HIDPI_FACTOR),
        other => {
            return Err(ApiError::bad_request(
                "InvalidParameterValue",
                format!("tile_scale {other} is not offered; use 1 or {HIDPI_FACTOR}"),
            ));
        }
    };
    let base = base_url(&state.config, &headers);
    let format = match &query.format {
        None => layer.formats[0],
        Some(text) => TileFormat::from_extension(text)
            .filter(|f| layer.formats.contains(f))
            .ok_or_else(|| {
                ApiError::bad_request(
                    "InvalidParameterValue",
                    format!(
                        "format {text:?} is not offered by layer {:?}; it offers {}",
                        layer.name,
                        layer
                            .formats
                            .iter()
                            .map(|f| f.extension())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
            })?,
    };
    let ext = format.extension();
    let b = layer.source.info().lonlat_bounds;
    // Web Mercator stops at about 85.05 degrees; other grids (WorldCRS84Quad,
    // custom ones) keep the latitudes their tiles can hold.
    let max_lat = if grid.crs.id == mercator::CRS {
        mercator::MAX_LATITUDE
    } else {
        90.0
    };
    let bounds = [
        b.min_x.max(-180.0),
        b.min_y.max(-max_lat),
        b.max_x.min(180.0),
        b.max_y.min(max_lat),
    ];
    let max_zoom = layer.max_zoom_in(&grid);
    let center_zoom = layer.center_zoom(&grid).clamp(layer.min_zoom, max_zoom);
    let mut doc = json!({
        "tilejson": "3.0.0",
        "name": layer.name,
        "description": layer.description.clone().unwrap_or_else(|| layer.title.clone()),
        "version": "1.0.0",
        "scheme": "xyz",
        "tiles": [format!("{base}/tiles/{}/{}/{{z}}/{{x}}/{{y}}{row_suffix}.{ext}{tile_query}", layer.name, grid.tms.id)],
        "tileSize": tile_size,
        // Not in TileJSON 3.0.0 (which assumes Web Mercator): the grid's CRS
        // and tile matrix set, for clients of other grids.
        "crs": grid.tms.crs,
        "tileMatrixSet": grid.tms.id,
        "minzoom": layer.min_zoom,
        "maxzoom": max_zoom,
        "bounds": bounds,
        "center": [f64::midpoint(bounds[0], bounds[2]), f64::midpoint(bounds[1], bounds[3]), center_zoom],
    });
    // An archive's own centre, when it lies within the bounds.
    if let Some((lon, lat, zoom)) = layer.source.tile_metadata().and_then(|m| m.center)
        && (bounds[0]..=bounds[2]).contains(&lon)
        && (bounds[1]..=bounds[3]).contains(&lat)
    {
        doc["center"] = json!([lon, lat, zoom.clamp(layer.min_zoom, max_zoom)]);
    }
    if !dimensions.is_empty() {
        doc["dimensions"] = Value::Object(dimensions);
    }
    // Not in TileJSON 3.0.0: a layer's named styles (`?style=` picks one).
    if styles.len() > 1 {
        doc["styles"] = json!(styles);
        doc["style"] = json!(layer.style_name);
    }
    if let Some(a) = &layer.attribution {
        doc["attribution"] = Value::String(a.clone());
    }
    if format.is_vector() {
        doc["format"] = Value::String(format.archive_name().into());
        // How MapLibre reads the tiles (its vector source's `encoding`).
        if format == TileFormat::Mlt {
            doc["encoding"] = Value::String("mlt".into());
        }
        doc["vector_layers"] = layer.vector_layers(layer.min_zoom, max_zoom);
    }
    // Elevation tiles: how a `raster-dem` source decodes them (MapLibre's
    // and Mapbox's `encoding`: `terrarium` or `mapbox`).
    if let Some(encoding) = format.elevation() {
        doc["format"] = Value::String(format.archive_name().into());
        doc["encoding"] = Value::String(encoding.maplibre_name().into());
    }
    Ok(Json(doc))
}
