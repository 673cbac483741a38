//! The index page, the per-layer preview page and its viewer script.
//!
//! The viewer is a small script of our own (`viewer.js`), served by the
//! binary: it needs no internet access and understands every grid the
//! server offers, custom ones included. Vector tiles are shown with
//! MapLibre GL JS (a pinned build vendored in `vendor/maplibre-gl`, see
//! `scripts/vendor-maplibre`), also served by the binary.

use std::fmt::Write as _;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, header};
use axum::response::{Html, IntoResponse, Response};
use serde_json::json;

use tessera_grid::{TileFormat, WEB_MERCATOR_QUAD};

use super::error::ApiError;
use super::state::Catalog;
use super::xml::escape;
use crate::auth::Caller;
use crate::model::Layer;

const VIEWER_JS: &str = include_str!("viewer.js");
const MAPLIBRE_JS: &str = include_str!("../../vendor/maplibre-gl/maplibre-gl.js");
const MAPLIBRE_CSS: &str = include_str!("../../vendor/maplibre-gl/maplibre-gl.css");

const STYLE: &str = "body{font:14px system-ui,sans-serif;margin:0}header{box-sizing:border-box;height:48px;padding:0 12px;background:#223;color:#eee;display:flex;gap:12px;align-items:center;overflow:hidden;white-space:nowrap}\
header a{color:#9cf}#map{position:absolute;top:48px;bottom:24px;left:0;right:0;overflow:hidden;background:#202024;cursor:grab;touch-action:none}\
.tile{position:absolute;user-select:none;-webkit-user-drag:none}#status{position:absolute;bottom:0;height:24px;left:0;right:0;padding:2px 12px;background:#eee;font:12px monospace}\
table{border-collapse:collapse;margin:12px}td,th{padding:4px 10px;border-bottom:1px solid #ccc;text-align:left}";

/// `GET /`: what is served, with links.
pub async fn index(State(state): State<Catalog>, caller: Caller) -> Html<String> {
    let mut rows = String::new();
    for layer in state
        .registry
        .layers()
        .iter()
        .filter(|l| caller.sees(&l.name))
    {
        let name = escape(&layer.name);
        let grids: Vec<String> = layer
            .grids
            .iter()
            .map(|g| {
                let g = escape(g);
                format!("<a href=\"/tiles/{name}/{g}/tilejson.json\">{g}</a>")
            })
            .collect();
        let _ = write!(
            rows,
            "<tr><td><a href=\"/preview/{name}\">{name}</a></td><td>{}</td><td>{}</td></tr>",
            escape(&layer.title),
            grids.join(", ")
        );
    }
    Html(format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{title}</title><style>{STYLE}</style></head><body>\
         <header><b>{title}</b><a href=\"/wms?SERVICE=WMS&amp;REQUEST=GetCapabilities\">WMS</a>\
         <a href=\"/wmts/1.0.0/WMTSCapabilities.xml\">WMTS</a><a href=\"/ogcapi\">OGC API</a>{admin}<a href=\"/book/\">manual</a></header>\
         <table><tr><th>layer (preview)</th><th>title</th><th>TileJSON per grid</th></tr>{rows}</table></body></html>",
        title = escape(&state.config.server.title),
        admin = if state.config.admin.is_some() {
            "<a href=\"/admin\">admin</a>"
        } else {
            ""
        },
    ))
}

/// The preview page's query.
#[derive(Debug, serde::Deserialize)]
pub struct PreviewQuery {
    /// `mvt` for the vector tiles of a layer that offers them and images
    /// too (the vector tiles are shown by default when they come first).
    format: Option<String>,
}

/// `GET /preview/{layer}[?format=mvt]`: a pan-and-zoom map of the layer;
/// its vector tiles in MapLibre GL JS when it offers them on
/// WebMercatorQuad and they come first or are asked for.
pub async fn page(
    State(state): State<Catalog>,
    caller: Caller,
    Path(name): Path<String>,
    Query(query): Query<PreviewQuery>,
) -> Result<Html<String>, ApiError> {
    let layer = super::tile_layer(&state.registry, &caller, &name)?;
    let vector = layer.formats.contains(&TileFormat::Mvt)
        && layer.grids.iter().any(|g| g == WEB_MERCATOR_QUAD)
        && match query.format.as_deref() {
            Some(f) => TileFormat::from_extension(f) == Some(TileFormat::Mvt),
            None => layer.formats[0] == TileFormat::Mvt,
        };
    if vector {
        return Ok(vector_page(&layer));
    }
    // Elevation tiles asked (or the layer's first format): the 3D view.
    let elevation = match query.format.as_deref() {
        Some(f) => TileFormat::from_extension(f).filter(|f| layer.formats.contains(f)),
        None => Some(layer.formats[0]),
    }
    .filter(|f| f.elevation().is_some());
    if let Some(format) = elevation
        && layer.grids.iter().any(|g| g == WEB_MERCATOR_QUAD)
    {
        return Ok(terrain_page(&layer, format));
    }
    let mut grids = Vec::new();
    for gid in &layer.grids {
        let Some(grid) = state.registry.grid(gid) else {
            continue;
        };
        let tms = &grid.tms;
        let extent = layer
            .extents
            .get(gid)
            .copied()
            .flatten()
            .unwrap_or(tms.extent);
        grids.push(json!({
            "id": tms.id,
            // How the status line shows the centre: longitude and latitude
            // from Web Mercator metres or degrees, else in the grid's CRS.
            "lonlat": if grid.crs.geographic {
                "degrees"
            } else if tms.crs.eq_ignore_ascii_case(tessera_grid::mercator::CRS) {
                "mercator"
            } else {
                ""
            },
            "crs": tms.crs,
            "tileWidth": tms.tile_width,
            "tileHeight": tms.tile_height,
            "originX": tms.origin_x,
            "originY": tms.origin_y,
            "minZoom": layer.min_zoom,
            "maxZoom": layer.max_zoom_in(grid),
            "extent": [extent.min_x, extent.min_y, extent.max_x, extent.max_y],
            "matrices": tms.matrices.iter().map(|m| json!({"w": m.matrix_width, "h": m.matrix_height, "res": m.resolution})).collect::<Vec<_>>(),
        }));
    }
    let config = json!({
        "tileBase": format!("/tiles/{}", layer.name),
        "grids": grids,
        "formats": layer.formats.iter().filter(|f| f.is_picture()).map(|f| f.extension()).collect::<Vec<_>>(),
        // A list of values per dimension; tiles are asked at the one chosen.
        "dimensions": layer.dimensions.iter().map(|d| json!({
            "name": d.name,
            "values": d.values,
            "default": d.default_value().ok(),
        })).collect::<Vec<_>>(),
    });
    // `</` cannot end the script element early once escaped this way.
    let config = config.to_string().replace("</", "<\\/");
    // A layer that also has vector tiles links to their MapLibre view.
    let other = if layer.formats.contains(&TileFormat::Mvt) {
        format!(
            "<a href=\"/preview/{}?format=mvt\">vector tiles (MapLibre)</a>",
            escape(&layer.name)
        )
    } else if let Some(dem) = layer.formats.iter().find(|f| f.elevation().is_some()) {
        format!(
            "<a href=\"/preview/{}?format={dem}\">3D (terrain)</a>",
            escape(&layer.name)
        )
    } else {
        String::new()
    };
    Ok(Html(format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{title} - tessera</title><style>{STYLE}</style></head><body>\
         <header><a href=\"/\">tessera</a><b>{title}</b><select id=\"grid\"></select><select id=\"format\"></select><span id=\"dimensions\"></span>\
         <button id=\"zoom-in\">+</button><button id=\"zoom-out\">&minus;</button>{other}<a href=\"/book/clients.html\">in your client</a></header>\
         <div id=\"map\"></div><div id=\"status\"></div>\
         <script type=\"application/json\" id=\"tessera-config\">{config}</script>\
         <script src=\"/static/viewer.js\"></script></body></html>",
        title = escape(&layer.title)
    )))
}

/// The vector tiles of `layer` in MapLibre GL JS: one source from the
/// layer's TileJSON, and per data layer a fill and outline (polygons), a
/// line or circles, by its geometry type.
fn vector_page(layer: &Layer) -> Html<String> {
    // The pictures the server draws from the layer's own style and labels.
    let drawn = if layer.formats.iter().any(|f| f.is_picture()) {
        format!(
            "<a href=\"/preview/{}?format=png\">as the server draws it (its style and labels)</a>",
            escape(&layer.name)
        )
    } else {
        String::new()
    };
    // Each data layer and its geometry type: a vector source's own, or an
    // archive's `vector_layers` (whose geometry is not said: drawn by the
    // type of each feature).
    let mut data_layers: Vec<(String, Option<String>)> = layer
        .source
        .as_features()
        .map(tessera_source::FeatureSource::vector_layers)
        .unwrap_or_default()
        .into_iter()
        .map(|l| (l.name, Some(l.geometry.to_ascii_lowercase())))
        .collect();
    if data_layers.is_empty()
        && let Some(listed) = layer
            .source
            .tile_metadata()
            .and_then(|m| m.vector_layers.as_ref())
            .and_then(serde_json::Value::as_array)
    {
        data_layers = listed
            .iter()
            .filter_map(|l| l.get("id").and_then(serde_json::Value::as_str))
            .map(|id| (id.to_string(), None))
            .collect();
    }
    let palette = [
        "#3a6ea5", "#c0392b", "#27ae60", "#8e44ad", "#d35400", "#16a085",
    ];
    let mut layers = Vec::new();
    for (i, (id, geometry)) in data_layers.iter().enumerate() {
        let color = palette[i % palette.len()];
        let is = |kind: &str| {
            geometry.as_deref().is_none_or(|g| match kind {
                "Polygon" => g.contains("polygon") || g.contains("surface"),
                "LineString" => g.contains("line") || g.contains("curve"),
                _ => {
                    !(g.contains("polygon")
                        || g.contains("surface")
                        || g.contains("line")
                        || g.contains("curve"))
                }
            })
        };
        // Without a known geometry each drawing takes its own features.
        let only = |kind: &str| {
            if geometry.is_none() {
                json!(["==", "$type", kind])
            } else {
                json!(["all"])
            }
        };
        if is("Polygon") {
            layers.push(
                json!({"id": format!("{id}-fill"), "type": "fill", "source": "tessera", "filter": only("Polygon"),
                "source-layer": id, "paint": {"fill-color": color, "fill-opacity": 0.6}}),
            );
            layers.push(
                json!({"id": format!("{id}-outline"), "type": "line", "source": "tessera", "filter": only("Polygon"),
                "source-layer": id, "paint": {"line-color": "#ffffff", "line-width": 0.5}}),
            );
        }
        if is("LineString") {
            layers.push(
                json!({"id": format!("{id}-line"), "type": "line", "source": "tessera", "filter": only("LineString"),
                "source-layer": id, "paint": {"line-color": color, "line-width": 1.5}}),
            );
        }
        if is("Point") {
            layers.push(
                json!({"id": format!("{id}-point"), "type": "circle", "source": "tessera", "filter": only("Point"),
                "source-layer": id, "paint": {"circle-color": color, "circle-radius": 4,
                "circle-stroke-color": "#ffffff", "circle-stroke-width": 1}}),
            );
        }
    }
    let b = layer.source.info().lonlat_bounds;
    // A layer drawn with a MapLibre style or with rules shows its style
    // document (the one `/styles/{layer}.json` serves, labels and all).
    let own_style = (layer.maplibre.is_some() || !layer.source.style_rules().is_empty())
        .then(|| json!(format!("/styles/{}.json", layer.name)));
    // The server's pictures of the same layer, to compare (a toggle).
    let png = layer.formats.iter().find(|f| f.is_picture()).map(|f| {
        format!(
            "/tiles/{}/{WEB_MERCATOR_QUAD}/{{z}}/{{x}}/{{y}}.{}",
            layer.name,
            f.extension()
        )
    });
    let config = json!({
        "png": png,
        "style": own_style.unwrap_or_else(|| json!({
            "version": 8,
            "sources": {"tessera": {"type": "vector",
                "url": format!("/tiles/{}/{WEB_MERCATOR_QUAD}/tilejson.json?format=mvt", layer.name)}},
            "layers": std::iter::once(json!({"id": "background", "type": "background",
                "paint": {"background-color": "#202024"}})).chain(layers).collect::<Vec<_>>(),
        })),
        "bounds": [b.min_x.max(-180.0), b.min_y.max(-85.0), b.max_x.min(180.0), b.max_y.min(85.0)],
    });
    let config = config.to_string().replace("</", "<\\/");
    Html(format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{title} - tessera</title><style>{STYLE}</style>\
         <link rel=\"stylesheet\" href=\"/static/maplibre-gl.css\"></head><body>\
         <header><a href=\"/\">tessera</a><b>{title}</b><span>vector tiles</span>{drawn}<button id=\"compare\" hidden>server PNG</button><a href=\"/book/clients.html\">in your client</a><span id=\"position\"></span></header>\
         <div id=\"map\"></div><div id=\"status\"></div>\
         <script type=\"application/json\" id=\"tessera-config\">{config}</script>\
         <script src=\"/static/maplibre-gl.js\"></script><script>\
         const c = JSON.parse(document.getElementById('tessera-config').textContent);\
         const map = new maplibregl.Map({{container: 'map', style: c.style, bounds: c.bounds, \
           fitBoundsOptions: {{padding: 20}}, attributionControl: false, \
           preserveDrawingBuffer: true}});\
         window.tesseraMap = map;\
         const once = Math.log2(map.getContainer().clientWidth / 512);\
         if (map.getZoom() < once) {{ map.jumpTo({{zoom: once}}); }}\
         const position = () => {{ const p = map.getCenter(); \
           document.getElementById('position').textContent = `zoom ${{map.getZoom().toFixed(1)}}  centre \
           ${{Math.abs(p.lat).toFixed(4)}}°${{p.lat >= 0 ? 'N' : 'S'}} ${{Math.abs(p.lng).toFixed(4)}}°${{p.lng >= 0 ? 'E' : 'W'}}`; }};\
         map.on('moveend', position); map.on('load', position);\
         map.on('load', () => {{ const layers = map.getStyle().layers; \
           if (!layers.some(l => l.type === 'background')) {{ map.addLayer({{id: 'preview-background', type: 'background', \
             paint: {{'background-color': '#f2efe9'}}}}, layers.length ? layers[0].id : undefined); }} \
           if (!c.png) return; const own = map.getStyle().layers.map(l => l.id); \
           const button = document.getElementById('compare'); button.hidden = false; \
           button.onclick = () => {{ const showing = !!map.getLayer('server-png'); \
             if (showing) {{ map.removeLayer('server-png'); map.removeSource('server-png'); }} \
             else {{ map.addSource('server-png', {{type: 'raster', tiles: [location.origin + c.png], tileSize: 256}}); \
               map.addLayer({{id: 'server-png', type: 'raster', source: 'server-png'}}); }} \
             for (const id of own) {{ if (id !== 'preview-background') map.setLayoutProperty(id, 'visibility', showing ? 'visible' : 'none'); }} \
             button.textContent = showing ? 'server PNG' : 'MapLibre'; \
             document.body.dataset.idle = '0'; map.once('idle', () => {{ document.body.dataset.idle = '1'; }}); }}; }});\
         map.on('idle', () => {{ document.body.dataset.idle = '1'; }});\
         map.on('error', (e) => {{ document.getElementById('status').textContent = String(e.error && e.error.message || e); }});\
         </script></body></html>",
        title = escape(&layer.title)
    ))
}

/// The elevation tiles of `layer` in `format` as MapLibre's 3D terrain
/// (the layer's `/styles/{layer}.json` of that format: its pictures under
/// a hillshade, `terrain` on), tilted, with a slider for the terrain's
/// exaggeration (0 is flat) and a link to the 2D pictures.
fn terrain_page(layer: &Layer, format: TileFormat) -> Html<String> {
    let b = layer.source.info().lonlat_bounds;
    let config = json!({
        "style": format!("/styles/{}.json?format={}", layer.name, format.extension()),
        "bounds": [b.min_x.max(-180.0), b.min_y.max(-85.0), b.max_x.min(180.0), b.max_y.min(85.0)],
    });
    let config = config.to_string().replace("</", "<\\/");
    let flat = if layer.formats.iter().any(|f| f.is_picture()) {
        format!(
            "<a href=\"/preview/{}?format=png\">2D</a>",
            escape(&layer.name)
        )
    } else {
        String::new()
    };
    Html(format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{title} - tessera</title><style>{STYLE}</style>\
         <link rel=\"stylesheet\" href=\"/static/maplibre-gl.css\"></head><body>\
         <header><a href=\"/\">tessera</a><b>{title}</b><span>terrain ({format})</span>\
         <label>exaggeration <input id=\"exaggeration\" type=\"range\" min=\"0\" max=\"5\" step=\"0.1\" value=\"1\">\
         <output id=\"exaggeration-value\">1.0</output></label>{flat}<a href=\"/book/terrain.html\">terrain</a><span id=\"position\"></span></header>\
         <div id=\"map\"></div><div id=\"status\"></div>\
         <script type=\"application/json\" id=\"tessera-config\">{config}</script>\
         <script src=\"/static/maplibre-gl.js\"></script><script>\
         const c = JSON.parse(document.getElementById('tessera-config').textContent);\
         const map = new maplibregl.Map({{container: 'map', style: c.style, bounds: c.bounds, \
           fitBoundsOptions: {{padding: 20}}, pitch: 60, maxPitch: 85, attributionControl: false, \
           preserveDrawingBuffer: true}});\
         window.tesseraMap = map;\
         map.addControl(new maplibregl.NavigationControl({{visualizePitch: true}}));\
         const slider = document.getElementById('exaggeration');\
         slider.oninput = () => {{ const t = map.getTerrain(); const e = Number(slider.value); \
           document.getElementById('exaggeration-value').textContent = e.toFixed(1); \
           if (t) map.setTerrain({{source: t.source, exaggeration: e}}); }};\
         const position = () => {{ const p = map.getCenter(); \
           document.getElementById('position').textContent = `zoom ${{map.getZoom().toFixed(1)}}  centre \
           ${{Math.abs(p.lat).toFixed(4)}}°${{p.lat >= 0 ? 'N' : 'S'}} ${{Math.abs(p.lng).toFixed(4)}}°${{p.lng >= 0 ? 'E' : 'W'}}`; }};\
         map.on('moveend', position); map.on('load', position);\
         map.on('idle', () => {{ document.body.dataset.idle = '1'; }});\
         map.on('error', (e) => {{ document.getElementById('status').textContent = String(e.error && e.error.message || e); }});\
         </script></body></html>",
        title = escape(&layer.title)
    ))
}

/// `GET /static/maplibre-gl.js`: the vendored MapLibre GL JS build.
pub async fn maplibre_js() -> Response {
    static_text(MAPLIBRE_JS, "text/javascript; charset=utf-8")
}

/// `GET /static/maplibre-gl.css`.
pub async fn maplibre_css() -> Response {
    static_text(MAPLIBRE_CSS, "text/css; charset=utf-8")
}

fn static_text(body: &'static str, content_type: &'static str) -> Response {
    let mut r = body.into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=86400"),
    );
    r
}

/// `GET /static/viewer.js`.
pub async fn viewer_js() -> Response {
    let mut r = VIEWER_JS.into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/javascript; charset=utf-8"),
    );
    r
}
