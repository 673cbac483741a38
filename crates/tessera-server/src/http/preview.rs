//! The index page, the per-layer preview page and its viewer script.
//!
//! The viewer is a small script of our own (`viewer.js`), served by the
//! binary: it needs no internet access and understands every grid the
//! server offers, custom ones included.

use std::fmt::Write as _;

use axum::extract::{Path, State};
use axum::http::{HeaderValue, header};
use axum::response::{Html, IntoResponse, Response};
use serde_json::json;

use super::AppState;
use super::error::ApiError;
use super::xml::escape;

const VIEWER_JS: &str = include_str!("viewer.js");

const STYLE: &str = "body{font:14px system-ui,sans-serif;margin:0}header{padding:8px 12px;background:#223;color:#eee;display:flex;gap:12px;align-items:center}\
header a{color:#9cf}#map{position:absolute;top:48px;bottom:24px;left:0;right:0;overflow:hidden;background:#202024;cursor:grab;touch-action:none}\
.tile{position:absolute;user-select:none;-webkit-user-drag:none}#status{position:absolute;bottom:0;height:24px;left:0;right:0;padding:2px 12px;background:#eee;font:12px monospace}\
table{border-collapse:collapse;margin:12px}td,th{padding:4px 10px;border-bottom:1px solid #ccc;text-align:left}";

/// `GET /`: what is served, with links.
pub async fn index(State(state): State<AppState>) -> Html<String> {
    let mut rows = String::new();
    for layer in &state.registry.layers() {
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
         <a href=\"/wmts/1.0.0/WMTSCapabilities.xml\">WMTS</a></header>\
         <table><tr><th>layer (preview)</th><th>title</th><th>TileJSON per grid</th></tr>{rows}</table></body></html>",
        title = escape(&state.config.server.title)
    ))
}

/// `GET /preview/{layer}`: a pan-and-zoom map of the layer.
pub async fn page(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Html<String>, ApiError> {
    let layer = state
        .registry
        .layer(&name)
        .ok_or_else(|| ApiError::not_found("LayerNotDefined", format!("unknown layer {name:?}")))?;
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
        "formats": layer.formats.iter().map(|f| f.extension()).collect::<Vec<_>>(),
    });
    // `</` cannot end the script element early once escaped this way.
    let config = config.to_string().replace("</", "<\\/");
    Ok(Html(format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{title} - tessera</title><style>{STYLE}</style></head><body>\
         <header><a href=\"/\">tessera</a><b>{title}</b><select id=\"grid\"></select><select id=\"format\"></select>\
         <button id=\"zoom-in\">+</button><button id=\"zoom-out\">&minus;</button></header>\
         <div id=\"map\"></div><div id=\"status\"></div>\
         <script type=\"application/json\" id=\"tessera-config\">{config}</script>\
         <script src=\"/static/viewer.js\"></script></body></html>",
        title = escape(&layer.title)
    )))
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
