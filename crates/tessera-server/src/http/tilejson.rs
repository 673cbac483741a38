//! TileJSON 3.0.0 per layer and grid.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use serde_json::{Value, json};
use tessera_grid::mercator;

use super::address::resolve_layer_grid;
use super::error::ApiError;
use super::error::Protocol;
use super::{AppState, base_url};

/// `GET /tiles/{layer}/{grid}/tilejson.json`.
pub async fn tilejson(
    State(state): State<AppState>,
    Path((layer, grid)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let (layer, grid) = resolve_layer_grid(&state.registry, &layer, &grid)
        .map_err(|e| ApiError::from_lookup(e, Protocol::Plain))?;
    let base = base_url(&state.config, &headers);
    let ext = layer.formats[0].extension();
    let b = layer.source.info().lonlat_bounds;
    let bounds = [
        b.min_x.max(-180.0),
        b.min_y.max(-mercator::MAX_LATITUDE),
        b.max_x.min(180.0),
        b.max_y.min(mercator::MAX_LATITUDE),
    ];
    let max_zoom = layer.max_zoom_in(&grid);
    let center_zoom = layer.center_zoom(&grid).clamp(layer.min_zoom, max_zoom);
    let mut doc = json!({
        "tilejson": "3.0.0",
        "name": layer.name,
        "description": layer.description.clone().unwrap_or_else(|| layer.title.clone()),
        "version": "1.0.0",
        "scheme": "xyz",
        "tiles": [format!("{base}/tiles/{}/{}/{{z}}/{{x}}/{{y}}.{ext}", layer.name, grid.tms.id)],
        "minzoom": layer.min_zoom,
        "maxzoom": max_zoom,
        "bounds": bounds,
        "center": [f64::midpoint(bounds[0], bounds[2]), f64::midpoint(bounds[1], bounds[3]), center_zoom],
    });
    if let Some(a) = &layer.attribution {
        doc["attribution"] = Value::String(a.clone());
    }
    Ok(Json(doc))
}
