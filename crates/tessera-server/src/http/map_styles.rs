//! `GET /styles/{layer}.json`: the MapLibre style document a vector layer
//! is drawn with, its source pointed at tessera's vector tiles, so that
//! MapLibre in a browser and tessera's PNG and WMS show one style.

use axum::Json;
use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use serde_json::{Value, json};
use tessera_grid::{TileFormat, WEB_MERCATOR_QUAD};

use super::error::ApiError;
use super::reply::base_url;
use super::state::Catalog;
use crate::auth::Caller;
use crate::config::auth::Grant;

/// The document with its source (`source:` of the layer's style) made a
/// vector source of the layer's WebMercatorQuad MVT tiles (with the
/// caller's query credential), its other sources as written; `?style=`
/// names one of the layer's named styles. Symbol
/// layers stay only when the document names `glyphs` (MapLibre needs
/// glyphs to draw text; tessera serves none).
pub async fn style(
    State(state): State<Catalog>,
    caller: Caller,
    Path(file): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let name = file.strip_suffix(".json").unwrap_or(&file);
    let layer = state
        .registry
        .find_layer(name, &|n| caller.sees(n))
        .map_err(|unknown| {
            ApiError::not_found("LayerNotDefined", format!("unknown layer {unknown}"))
        })?;
    caller.may(&layer.name, Grant::Tiles)?;
    // `?style=`: one of the layer's named styles.
    let asked = super::tiles::address::query_params(query.as_deref())
        .into_iter()
        .find(|(k, _)| k == "style")
        .map(|(_, v)| v);
    let layer = layer
        .styled(asked.as_deref())
        .map_err(|e| ApiError::not_found("StyleNotDefined", e.to_string()))?;
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
    let mut tile_query: Vec<String> = Vec::new();
    if !credential.is_empty() {
        tile_query.push(credential);
    }
    if !layer.other_styles.is_empty() || asked.is_some() {
        tile_query.push(format!(
            "style={}",
            url::form_urlencoded::byte_serialize(layer.style_name.as_bytes()).collect::<String>()
        ));
    }
    let query = if tile_query.is_empty() {
        String::new()
    } else {
        format!("?{}", tile_query.join("&"))
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
