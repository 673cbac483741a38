//! `GET /styles/{layer}.json`: the MapLibre style document a vector layer
//! is drawn with, its source pointed at tessera's vector tiles, so that
//! MapLibre in a browser and tessera's PNG and WMS show one style.

use axum::Json;
use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use serde_json::{Value, json};
use tessera_carto::glyphs::{BUNDLED, Glyphs};
use tessera_carto::maplibre::from_rules;
use tessera_grid::{TileFormat, WEB_MERCATOR_QUAD};

use super::error::ApiError;
use super::reply::base_url;
use super::state::Styles;
use crate::auth::Caller;

/// The manual's page on MapLibre styles.
const DOCS: &str = "styles#style-documents";

/// The layer's style document: its MapLibre document (`style: {
/// maplibre: ... }`), or one made from its rules ([`from_rules`]), with
/// its source made a vector source of the layer's WebMercatorQuad MVT
/// tiles (with the caller's query credential), other sources as written;
/// `?style=` names one of the layer's named styles. Text is drawn with
/// tessera's glyphs (`/fonts/`) unless the document names glyphs of its
/// own for fonts tessera does not have; a document that has no glyphs and
/// whose fonts tessera cannot serve loses its symbol layers (MapLibre
/// cannot draw their text). A `sprite` that names a sprite set of
/// `sprites:` is made its URL here. `?format=mlt` points the source at
/// the layer's MapLibre Tiles instead (`encoding: "mlt"`, MapLibre GL JS
/// 5 and later), when the layer offers them.
pub async fn style(
    State(state): State<Styles>,
    caller: Caller,
    Path(file): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let name = file.strip_suffix(".json").unwrap_or(&file);
    let layer = super::tile_layer(&state.registry, &caller, name)?;
    let params = super::tiles::address::query_params(query.as_deref());
    // `?style=`: one of the layer's named styles.
    let asked = params
        .iter()
        .find(|(k, _)| k == "style")
        .map(|(_, v)| v.clone());
    let format_param = params.iter().find(|(k, _)| k == "format").map(|(_, v)| v);
    // A DEM with elevation tiles: a 3D style.
    if !layer.formats.contains(&TileFormat::Mvt)
        && layer.formats.iter().any(|f| f.elevation().is_some())
    {
        let base = base_url(&state.config, &headers);
        let max_zoom = state
            .registry
            .grid(WEB_MERCATOR_QUAD)
            .map(|g| (layer.max_zoom_in(g), g.tms.tile_width))
            .ok_or_else(|| no_mercator(name))?;
        return terrain_style(
            &layer,
            format_param.map(String::as_str),
            &base,
            max_zoom,
            &caller.link_query(),
        )
        .map(Json);
    }
    // `?format=`: the tiles' encoding, mvt unless mlt is asked.
    let tiles_format = match format_param {
        None => TileFormat::Mvt,
        Some(f) => TileFormat::from_extension(f)
            .filter(|f| f.is_vector() && layer.formats.contains(f))
            .ok_or_else(|| {
                ApiError::bad_request(
                    "InvalidParameterValue",
                    format!(
                        "format {f:?} is not offered for this layer's vector tiles (mvt{})",
                        if layer.formats.contains(&TileFormat::Mlt) {
                            ", mlt"
                        } else {
                            ""
                        }
                    ),
                )
                .documented(DOCS)
            })?,
    };
    let layer = layer
        .styled(asked.as_deref())
        .map_err(|e| ApiError::not_found("StyleNotDefined", e.to_string()))?;
    if !layer.formats.contains(&TileFormat::Mvt)
        || !layer.grids.iter().any(|g| g == WEB_MERCATOR_QUAD)
    {
        return Err(ApiError::not_found(
            "NotFound",
            format!(
                "layer {name:?} offers no mvt tiles in {WEB_MERCATOR_QUAD} for MapLibre to draw"
            ),
        )
        .documented(DOCS));
    }
    let base = base_url(&state.config, &headers);
    let glyphs_url = format!("{base}/fonts/{{fontstack}}/{{range}}.pbf");
    // The document, and the name of its source that is this layer.
    let (mut doc, source) = match &layer.maplibre {
        Some(spec) => {
            let mut doc = (*spec.document).clone();
            glyphs_from_here(&mut doc, &glyphs_url, &state.glyphs);
            // `"sprite": "maki"`, a set of `sprites:`: served here.
            if let Some(name) = doc.get("sprite").and_then(Value::as_str)
                && state.sprites.names().any(|n| n == name)
            {
                doc["sprite"] = json!(format!("{base}/sprites/{name}"));
            }
            (doc, spec.source.clone())
        }
        None => {
            let rules = layer.source.style_rules();
            if rules.is_empty() {
                return Err(ApiError::not_found(
                    "NotFound",
                    format!(
                        "layer {name:?} is not drawn from vector features, so has no MapLibre style"
                    ),
                )
                .documented(DOCS));
            }
            let mut layers = Vec::new();
            for (data_layer, rules) in &rules {
                layers.extend(from_rules::layers(
                    &format!("{}-{data_layer}", layer.name),
                    &layer.name,
                    data_layer,
                    rules,
                    BUNDLED,
                ));
            }
            let doc = json!({
                "version": 8,
                "name": layer.title,
                "glyphs": glyphs_url,
                "sources": {},
                "layers": layers,
            });
            (doc, layer.name.clone())
        }
    };
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
    let mut tiles = json!({
        "type": "vector",
        "tiles": [format!(
            "{}/tiles/{}/{WEB_MERCATOR_QUAD}/{{z}}/{{x}}/{{y}}.{}{query}",
            base,
            layer.name,
            tiles_format.extension()
        )],
        "minzoom": layer.min_zoom,
        "maxzoom": max_zoom,
        "bounds": [b.min_x.max(-180.0), b.min_y.max(-85.0511), b.max_x.min(180.0), b.max_y.min(85.0511)],
    });
    if tiles_format == TileFormat::Mlt {
        tiles["encoding"] = json!("mlt");
    }
    if let Some(sources) = doc.get_mut("sources").and_then(Value::as_object_mut) {
        sources.insert(source, tiles);
    }
    if doc.get("glyphs").is_none()
        && let Some(layers) = doc.get_mut("layers").and_then(Value::as_array_mut)
    {
        layers.retain(|l| l.get("type").and_then(Value::as_str) != Some("symbol"));
    }
    Ok(Json(doc))
}

/// The 404 of a layer not tiled in WebMercatorQuad.
fn no_mercator(name: &str) -> ApiError {
    ApiError::not_found(
        "NotFound",
        format!("layer {name:?} has no tiles in {WEB_MERCATOR_QUAD} for MapLibre to draw"),
    )
    .documented(DOCS)
}

/// The style of a layer of elevation tiles (`formats: [terrarium.png,
/// ...]`): the layer's picture tiles (its first picture format, if any)
/// under a hillshade of its elevations, with `terrain` on (MapLibre's 3D
/// view) from a second `raster-dem` source of the same tiles (MapLibre
/// reads terrain and hillshade best from separate sources). `format` names
/// the elevation format (default: the layer's first); `(max_zoom,
/// tile_size)` are the layer's in WebMercatorQuad; `credential` is added
/// to every tile URL.
fn terrain_style(
    layer: &crate::model::Layer,
    format: Option<&str>,
    base: &str,
    (max_zoom, tile_size): (u8, u32),
    credential: &str,
) -> Result<Value, ApiError> {
    let offered: Vec<TileFormat> = layer
        .formats
        .iter()
        .copied()
        .filter(|f| f.elevation().is_some())
        .collect();
    let elevation = match format {
        None => offered[0],
        Some(f) => TileFormat::from_extension(f)
            .filter(|f| offered.contains(f))
            .ok_or_else(|| {
                let names: Vec<&str> = offered.iter().map(|f| f.extension()).collect();
                ApiError::bad_request(
                    "InvalidParameterValue",
                    format!(
                        "format {f:?} is not one of this layer's elevation formats ({})",
                        names.join(", ")
                    ),
                )
                .documented(DOCS)
            })?,
    };
    if !layer.grids.iter().any(|g| g == WEB_MERCATOR_QUAD) {
        return Err(no_mercator(&layer.name));
    }
    let query = if credential.is_empty() {
        String::new()
    } else {
        format!("?{credential}")
    };
    let url = |format: TileFormat| {
        format!(
            "{base}/tiles/{}/{WEB_MERCATOR_QUAD}/{{z}}/{{x}}/{{y}}.{}{query}",
            layer.name,
            format.extension()
        )
    };
    let b = layer.source.info().lonlat_bounds;
    let bounds = json!([
        b.min_x.max(-180.0),
        b.min_y.max(-85.0511),
        b.max_x.min(180.0),
        b.max_y.min(85.0511)
    ]);
    let encoding = elevation
        .elevation()
        .map(tessera_grid::ElevationEncoding::maplibre_name);
    let dem = json!({
        "type": "raster-dem",
        "tiles": [url(elevation)],
        "tileSize": tile_size,
        "encoding": encoding,
        "minzoom": layer.min_zoom,
        "maxzoom": max_zoom,
        "bounds": bounds,
    });
    let mut sources = serde_json::Map::new();
    let mut layers = vec![
        json!({"id": "background", "type": "background", "paint": {"background-color": "#f2efe9"}}),
    ];
    if let Some(picture) = layer.formats.iter().copied().find(|f| f.is_picture()) {
        sources.insert(
            layer.name.clone(),
            json!({"type": "raster", "tiles": [url(picture)], "tileSize": tile_size,
                "minzoom": layer.min_zoom, "maxzoom": max_zoom, "bounds": bounds}),
        );
        layers.push(json!({"id": layer.name, "type": "raster", "source": layer.name}));
    }
    let hillshade = format!("{}-hillshade", layer.name);
    let terrain = format!("{}-terrain", layer.name);
    sources.insert(hillshade.clone(), dem.clone());
    sources.insert(terrain.clone(), dem);
    layers.push(
        json!({"id": hillshade, "type": "hillshade", "source": hillshade,
        "paint": {"hillshade-exaggeration": 0.5, "hillshade-shadow-color": "#473b24"}}),
    );
    Ok(json!({
        "version": 8,
        "name": layer.title,
        "sources": sources,
        "layers": layers,
        "terrain": {"source": terrain, "exaggeration": 1.0},
        "center": [f64::midpoint(b.min_x, b.max_x), f64::midpoint(b.min_y, b.max_y)],
    }))
}

/// Points a document's text at tessera's glyphs (`glyphs_url`) when every
/// font its symbol layers name is served here; symbol layers naming no
/// font (MapLibre's default is Open Sans, which tessera lacks) get the
/// bundled font, as tessera draws them. A document whose own glyphs serve
/// fonts tessera lacks keeps them.
fn glyphs_from_here(doc: &mut Value, glyphs_url: &str, glyphs: &Glyphs) {
    let Some(layers) = doc.get("layers").and_then(Value::as_array) else {
        return;
    };
    let fonts: Vec<&str> = layers
        .iter()
        .filter(|l| l.get("type").and_then(Value::as_str) == Some("symbol"))
        .filter_map(|l| l.pointer("/layout/text-font"))
        .flat_map(|f| match f {
            // A literal list; an expression is not looked into.
            Value::Array(names) => names.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        })
        .collect();
    if !fonts.iter().all(|f| glyphs.library().get(f).is_some()) {
        return;
    }
    doc["glyphs"] = json!(glyphs_url);
    if let Some(layers) = doc.get_mut("layers").and_then(Value::as_array_mut) {
        for layer in layers
            .iter_mut()
            .filter(|l| l.get("type").and_then(Value::as_str) == Some("symbol"))
        {
            if layer.pointer("/layout/text-font").is_none() {
                if layer.get("layout").is_none() {
                    layer["layout"] = json!({});
                }
                layer["layout"]["text-font"] = json!([BUNDLED]);
            }
        }
    }
}
