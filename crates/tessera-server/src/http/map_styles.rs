//! `GET /styles/{layer}.json`: the MapLibre style document a vector layer
//! is drawn with, its source pointed at tessera's vector tiles, so that
//! MapLibre in a browser and tessera's PNG and WMS show one style.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use serde_json::{Value, json};
use tessera_grid::{TileFormat, WEB_MERCATOR_QUAD};

use super::base_url;
use super::error::ApiError;
use super::state::Catalog;
use crate::auth::Caller;
use crate::config::auth::Grant;

/// The document with its source (`source:` of the layer's style) made a
/// vector source of the layer's WebMercatorQuad MVT tiles (with the
/// caller's query credential), its other sources as written. Symbol
/// layers stay only when the document names `glyphs` (MapLibre needs
/// glyphs to draw text; tessera serves none).
pub async fn style(
    State(state): State<Catalog>,
    caller: Caller,
    Path(file): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let name = file.strip_suffix(".json").unwrap_or(&file);
    let layer = state
        .registry
        .layer(name)
        .ok_or_else(|| ApiError::not_found("LayerNotDefined", format!("unknown layer {name:?}")))?;
    caller.may(&layer.name, Grant::Tiles)?;
    let Some(spec) = &layer.maplibre else {
        return Err(ApiError::not_found(
            "NotFound",
            format!(
                "layer {name:?} is not drawn with a MapLibre style (style: {{ maplibre: ... }})"
            ),
        ));
    };
    if !layer.formats.contains(&TileFormat::Mvt)
        || !layer.grids.iter().any(|g| g == WEB_MERCATOR_QUAD)
    {
        return Err(ApiError::not_found(
            "NotFound",
            format!(
                "layer {name:?} offers no mvt tiles in {WEB_MERCATOR_QUAD} for MapLibre to draw"
            ),
        ));
    }
    let mut doc = (*spec.document).clone();
    let credential = caller.link_query();
    let query = if credential.is_empty() {
        String::new()
    } else {
        format!("?{credential}")
    };
    let b = layer.source.info().lonlat_bounds;
    let max_zoom = state
        .registry
        .grid(WEB_MERCATOR_QUAD)
        .map_or(layer.max_zoom, |g| layer.max_zoom_in(g));
    let tiles = json!({
        "type": "vector",
        "tiles": [format!(
            "{}/tiles/{}/{WEB_MERCATOR_QUAD}/{{z}}/{{x}}/{{y}}.mvt{query}",
            base_url(&state.config, &headers),
            layer.name
        )],
        "minzoom": layer.min_zoom,
        "maxzoom": max_zoom,
        "bounds": [b.min_x.max(-180.0), b.min_y.max(-85.0511), b.max_x.min(180.0), b.max_y.min(85.0511)],
    });
    if let Some(sources) = doc.get_mut("sources").and_then(Value::as_object_mut) {
        sources.insert(spec.source.clone(), tiles);
    }
    if doc.get("glyphs").is_none()
        && let Some(layers) = doc.get_mut("layers").and_then(Value::as_array_mut)
    {
        layers.retain(|l| l.get("type").and_then(Value::as_str) != Some("symbol"));
    }
    Ok(Json(doc))
}
