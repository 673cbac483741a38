//! OGC API – Tiles 1.0 and Maps 1.0 under `/ogcapi`: the landing page,
//! conformance, collections (one per layer), tile matrix sets as
//! TileMatrixSet 2.0 JSON, each layer's tilesets and their tiles (the same
//! tiles, keys and ETags as XYZ and WMTS: one cache), and maps (the WMS
//! renderer).
//!
//! Documents are JSON for programs and HTML for browsers (`?f=json|html`,
//! else `Accept`); errors are RFC 7807 problem details. Links are absolute,
//! built from [`super::reply::base_url`] like every other protocol's.

mod documents;
mod map_view;
mod maps;
mod openapi;
mod subset;
mod tiles;
mod tms;

pub use tiles::fast_address;
use tiles::{MapTiles, VectorTiles};

use std::fmt::Write as _;

use axum::Router;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};
use tessera_grid::TileFormat;

use axum::extract::{Request, State};
use axum::middleware::Next;

use super::AppState;
use super::error::{ApiError, Protocol};
use super::state::Catalog;
use crate::auth::{Caller, Refusal};
use crate::config::auth::Grant;

/// The routes of the OGC API.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/ogcapi", get(documents::landing))
        .route("/ogcapi/", get(documents::landing))
        .route("/ogcapi/conformance", get(documents::conformance))
        .route("/ogcapi/api", get(openapi::api))
        .route("/ogcapi/collections", get(documents::collections))
        .route(
            "/ogcapi/collections/{collection}",
            get(documents::collection),
        )
        .route("/ogcapi/map", get(maps::dataset_map))
        .route("/ogcapi/map/tiles", get(tiles::dataset_tilesets))
        .route("/ogcapi/map/tiles/{tms}", get(tiles::dataset_tileset))
        .route(
            "/ogcapi/map/tiles/{tms}/{matrix}/{row}/{col}",
            get(maps::dataset_tile),
        )
        .route(
            "/ogcapi/collections/{collection}/map",
            get(maps::collection_map),
        )
        .route("/ogcapi/tileMatrixSets", get(tms::list))
        .route("/ogcapi/tileMatrixSets/{id}", get(tms::one))
        .route(
            "/ogcapi/collections/{collection}/map/tiles",
            get(tiles::collection_tilesets::<MapTiles>),
        )
        .route(
            "/ogcapi/collections/{collection}/map/tiles/{tms}",
            get(tiles::collection_tileset::<MapTiles>),
        )
        .route(
            "/ogcapi/collections/{collection}/map/tiles/{tms}/{matrix}/{row}/{col}",
            get(tiles::collection_tile::<MapTiles>),
        )
        .route(
            "/ogcapi/collections/{collection}/styles/{style}/map",
            get(maps::styled_collection_map),
        )
        .route(
            "/ogcapi/collections/{collection}/styles/{style}/map/tiles",
            get(tiles::collection_tilesets::<MapTiles>),
        )
        .route(
            "/ogcapi/collections/{collection}/styles/{style}/map/tiles/{tms}",
            get(tiles::collection_tileset::<MapTiles>),
        )
        .route(
            "/ogcapi/collections/{collection}/styles/{style}/map/tiles/{tms}/{matrix}/{row}/{col}",
            get(tiles::collection_tile::<MapTiles>),
        )
        .route(
            "/ogcapi/collections/{collection}/tiles",
            get(tiles::collection_tilesets::<VectorTiles>),
        )
        .route(
            "/ogcapi/collections/{collection}/tiles/{tms}",
            get(tiles::collection_tileset::<VectorTiles>),
        )
        .route(
            "/ogcapi/collections/{collection}/tiles/{tms}/{matrix}/{row}/{col}",
            get(tiles::collection_tile::<VectorTiles>),
        )
}

/// Access control of the OGC API's paths, before their handlers: a
/// collection's documents need the caller to see the layer, its maps the
/// `maps` grant and its tiles the `tiles` grant (asked again by the tile
/// path); a dataset map or tile needs `maps` on every collection it draws
/// (`collections=`, else every layer with images). Refusals are problem
/// details.
pub async fn guard(
    State(state): State<Catalog>,
    caller: Caller,
    request: Request,
    next: Next,
) -> Response {
    let refused = |r: Refusal| {
        let mut e = ApiError::from(r);
        e.protocol = Protocol::Problem;
        e.into_response()
    };
    if !caller.controlled() {
        return next.run(request).await;
    }
    let path = request.uri().path();
    if let Some(rest) = path.strip_prefix("/ogcapi/collections/") {
        let (id, tail) = rest.split_once('/').unwrap_or((rest, ""));
        // A styled resource is guarded as its unstyled one.
        let tail = tail
            .strip_prefix("styles/")
            .and_then(|t| t.split_once('/'))
            .map_or(tail, |(_, t)| t);
        let id = percent_decode(id);
        if state.registry.layer(&id).is_some() {
            let allowed = if tail.starts_with("map/tiles") || tail.starts_with("tiles") {
                caller.may(&id, Grant::Tiles)
            } else if tail.starts_with("map") {
                caller.may(&id, Grant::Maps)
            } else if caller.sees(&id) {
                Ok(())
            } else {
                caller.may(&id, Grant::Tiles)
            };
            if let Err(r) = allowed {
                return refused(r);
            }
        }
    } else if path == "/ogcapi/map" || path.starts_with("/ogcapi/map/tiles/") {
        let named = super::tiles::address::query_params(request.uri().query())
            .into_iter()
            .find(|(k, _)| k == "collections")
            .map(|(_, v)| v);
        let drawn: Vec<String> = match named {
            Some(names) => names
                .split(',')
                .map(|n| n.trim().to_string())
                .filter(|n| !n.is_empty())
                .collect(),
            None => state
                .registry
                .layers()
                .iter()
                .filter(|l| l.formats.iter().any(|f| f.is_picture()))
                .map(|l| l.name.clone())
                .collect(),
        };
        for name in drawn.iter().filter(|n| state.registry.layer(n).is_some()) {
            if let Err(r) = caller.may(name, Grant::Maps) {
                return refused(r);
            }
        }
    }
    next.run(request).await
}

/// `text` with percent-escapes decoded (as the router decodes path
/// segments).
fn percent_decode(text: &str) -> String {
    url::form_urlencoded::parse(format!("x={}", text.replace('+', "%2B")).as_bytes())
        .next()
        .map_or_else(|| text.to_string(), |(_, v)| v.into_owned())
}

/// The media type of the OpenAPI document (`/ogcapi/api`).
pub const OPENAPI_JSON: &str = "application/vnd.oai.openapi+json;version=3.0";

/// The conformance classes implemented (each checked by
/// `tests/e2e/test_ogcapi.py`).
pub const CONFORMANCE: &[&str] = &[
    "http://www.opengis.net/spec/ogcapi-common-1/1.0/conf/core",
    "http://www.opengis.net/spec/ogcapi-common-1/1.0/conf/landing-page",
    "http://www.opengis.net/spec/ogcapi-common-1/1.0/conf/json",
    "http://www.opengis.net/spec/ogcapi-common-1/1.0/conf/html",
    "http://www.opengis.net/spec/ogcapi-common-1/1.0/conf/oas30",
    "http://www.opengis.net/spec/ogcapi-common-2/1.0/conf/collections",
    "http://www.opengis.net/spec/ogcapi-tiles-1/1.0/conf/core",
    "http://www.opengis.net/spec/ogcapi-tiles-1/1.0/conf/tileset",
    "http://www.opengis.net/spec/ogcapi-tiles-1/1.0/conf/tilesets-list",
    "http://www.opengis.net/spec/ogcapi-tiles-1/1.0/conf/oas30",
    "http://www.opengis.net/spec/ogcapi-tiles-1/1.0/conf/geodata-tilesets",
    "http://www.opengis.net/spec/ogcapi-tiles-1/1.0/conf/dataset-tilesets",
    "http://www.opengis.net/spec/ogcapi-tiles-1/1.0/conf/png",
    "http://www.opengis.net/spec/ogcapi-tiles-1/1.0/conf/jpeg",
    "http://www.opengis.net/spec/ogcapi-tiles-1/1.0/conf/mvt",
    "http://www.opengis.net/spec/ogcapi-maps-1/1.0/conf/core",
    "http://www.opengis.net/spec/ogcapi-maps-1/1.0/conf/collection-map",
    "http://www.opengis.net/spec/ogcapi-maps-1/1.0/conf/dataset-map",
    "http://www.opengis.net/spec/ogcapi-maps-1/1.0/conf/tilesets",
    "http://www.opengis.net/spec/ogcapi-maps-1/1.0/conf/collections-selection",
    "http://www.opengis.net/spec/ogcapi-maps-1/1.0/conf/background",
    "http://www.opengis.net/spec/ogcapi-maps-1/1.0/conf/scaling",
    "http://www.opengis.net/spec/ogcapi-maps-1/1.0/conf/display-resolution",
    "http://www.opengis.net/spec/ogcapi-maps-1/1.0/conf/spatial-subsetting",
    "http://www.opengis.net/spec/ogcapi-maps-1/1.0/conf/datetime",
    "http://www.opengis.net/spec/ogcapi-maps-1/1.0/conf/general-subsetting",
    "http://www.opengis.net/spec/ogcapi-maps-1/1.0/conf/crs",
    "http://www.opengis.net/spec/ogcapi-maps-1/1.0/conf/png",
    "http://www.opengis.net/spec/ogcapi-maps-1/1.0/conf/jpeg",
];

/// The link relation of a map.
pub const REL_MAP: &str = "http://www.opengis.net/def/rel/ogc/1.0/map";

/// The link relation of a layer's map tilesets.
pub const REL_MAP_TILESETS: &str = "http://www.opengis.net/def/rel/ogc/1.0/tilesets-map";
/// The link relation of a layer's vector tilesets.
pub const REL_VECTOR_TILESETS: &str = "http://www.opengis.net/def/rel/ogc/1.0/tilesets-vector";
/// The link relation of a tileset's tile matrix set.
pub const REL_TILING_SCHEME: &str = "http://www.opengis.net/def/rel/ogc/1.0/tiling-scheme";

/// A JSON link.
pub fn link(href: impl Into<String>, rel: &str, media_type: &str, title: &str) -> Value {
    json!({ "href": href.into(), "rel": rel, "type": media_type, "title": title })
}

/// The `self` (JSON) and `alternate` (HTML) links of the document at
/// `href`.
pub fn self_links(href: &str) -> [Value; 2] {
    [
        link(
            format!("{href}?f=json"),
            "self",
            "application/json",
            "this document",
        ),
        link(
            format!("{href}?f=html"),
            "alternate",
            "text/html",
            "this document as HTML",
        ),
    ]
}

/// The answer's form: JSON (the default for programs) or HTML (for
/// browsers), from `f` or else `Accept`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// `application/json`.
    Json,
    /// `text/html`.
    Html,
}

impl Form {
    /// `f=json|html` when given (anything else is a 400), else HTML when
    /// `Accept` names `text/html` before any JSON type.
    pub fn of(f: Option<&str>, headers: &HeaderMap) -> Result<Form, ApiError> {
        match f.map(str::to_ascii_lowercase).as_deref() {
            Some("json" | "application/json") => return Ok(Form::Json),
            Some("html" | "text/html") => return Ok(Form::Html),
            Some(other) => {
                return Err(problem(ApiError::bad_request(
                    "InvalidParameterValue",
                    format!("f={other:?}: documents are f=json or f=html"),
                )));
            }
            None => {}
        }
        let accept = headers
            .get(header::ACCEPT)
            .and_then(|a| a.to_str().ok())
            .unwrap_or_default();
        let html = accept.find("text/html");
        let json = accept.find("json");
        Ok(match (html, json) {
            (Some(h), Some(j)) if h < j => Form::Html,
            (Some(_), None) => Form::Html,
            _ => Form::Json,
        })
    }
}

/// The image or tile format an `f` parameter names: a short name
/// (`png`, `jpeg`, `mvt`) or a media type (`image/png`).
pub fn format_param(f: &str) -> Option<TileFormat> {
    TileFormat::from_extension(f).or_else(|| TileFormat::from_mime(f))
}

/// `Vary: Accept` on an answer whose form or format, without `f=`, is
/// the one `Accept` names (added to a `Vary` the answer has, such as a
/// vector tile's `Accept-Encoding`).
pub fn vary_on_accept(response: &mut Response) {
    crate::http::reply::vary_on(
        response.headers_mut(),
        "accept",
        HeaderValue::from_static("accept"),
    );
}

/// An error as problem details.
pub fn problem(e: ApiError) -> ApiError {
    e.speaking(Protocol::Problem)
}

/// `doc` in `form`: JSON as it is, or an HTML page of its title,
/// description, links and body.
pub fn answer(doc: &Value, form: Form, json_type: &'static str) -> Response {
    match form {
        Form::Json => {
            let mut response = doc.to_string().into_response();
            response
                .headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(json_type));
            vary_on_accept(&mut response);
            response
        }
        Form::Html => {
            let mut response = html_page(doc).into_response();
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            );
            vary_on_accept(&mut response);
            response
        }
    }
}

/// A plain page of a document: its title and description, its links
/// (followable), and the document itself.
fn html_page(doc: &Value) -> String {
    let esc = |s: &str| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;")
    };
    let title = doc
        .get("title")
        .or_else(|| doc.get("id"))
        .and_then(Value::as_str)
        .unwrap_or("OGC API");
    let mut page = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title></head><body>\n<h1>{}</h1>\n",
        esc(title),
        esc(title)
    );
    if let Some(d) = doc.get("description").and_then(Value::as_str) {
        let _ = writeln!(page, "<p>{}</p>", esc(d));
    }
    page.push_str(
        "<p><a href=\"/book/protocols.html#ogc-api---tiles-and-maps\">The manual on OGC API</a></p>\n",
    );
    // A document with a map preview of its own (a collection) shows it.
    let preview = doc
        .get("links")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|l| l.get("rel").and_then(Value::as_str) == Some("preview"))
        .and_then(|l| l.get("href").and_then(Value::as_str));
    if let Some(href) = preview {
        let _ = writeln!(
            page,
            "<p><a href=\"{0}\">Open the map</a></p>\n<iframe src=\"{0}\" title=\"map\" \
             style=\"width:100%;height:60vh;border:1px solid #ccc\"></iframe>",
            esc(href)
        );
    }
    let mut links = Vec::new();
    collect_links(doc, &mut links);
    if !links.is_empty() {
        page.push_str("<ul>\n");
        for (href, rel, title) in links {
            let _ = writeln!(
                page,
                "<li><a href=\"{}\">{}</a> ({})</li>",
                esc(&href),
                esc(if title.is_empty() { &href } else { &title }),
                esc(&rel)
            );
        }
        page.push_str("</ul>\n");
    }
    let pretty = serde_json::to_string_pretty(doc).unwrap_or_default();
    let _ = writeln!(page, "<pre>{}</pre>\n</body></html>", esc(&pretty));
    page
}

/// Every non-templated link in `doc`, depth first: (href, rel, title).
fn collect_links(doc: &Value, out: &mut Vec<(String, String, String)>) {
    match doc {
        Value::Object(map) => {
            if let (Some(Value::String(href)), Some(Value::String(rel))) =
                (map.get("href"), map.get("rel"))
                && map.get("templated") != Some(&Value::Bool(true))
            {
                let title = map.get("title").and_then(Value::as_str).unwrap_or_default();
                out.push((href.clone(), rel.clone(), title.to_string()));
            }
            for v in map.values() {
                collect_links(v, out);
            }
        }
        Value::Array(items) => {
            for v in items {
                collect_links(v, out);
            }
        }
        _ => {}
    }
}

/// The OGC URI of a CRS tessera writes as `EPSG:n` or `OGC:CRS84` (other
/// spellings as they are).
pub fn crs_uri(crs: &str) -> String {
    if let Some(code) = crs
        .strip_prefix("EPSG:")
        .or_else(|| crs.strip_prefix("epsg:"))
    {
        return format!("http://www.opengis.net/def/crs/EPSG/0/{code}");
    }
    match crs {
        "OGC:CRS84" | "CRS:84" => "http://www.opengis.net/def/crs/OGC/1.3/CRS84".into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_come_from_f_then_accept() {
        let mut h = HeaderMap::new();
        assert_eq!(Form::of(None, &h).unwrap(), Form::Json);
        h.insert(
            header::ACCEPT,
            HeaderValue::from_static("text/html,application/xhtml+xml,*/*;q=0.8"),
        );
        assert_eq!(Form::of(None, &h).unwrap(), Form::Html);
        assert_eq!(Form::of(Some("json"), &h).unwrap(), Form::Json);
        h.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/json, text/html"),
        );
        assert_eq!(Form::of(None, &h).unwrap(), Form::Json);
        assert!(Form::of(Some("xml"), &h).is_err());
    }

    #[test]
    fn crs_uris() {
        assert_eq!(
            crs_uri("EPSG:3857"),
            "http://www.opengis.net/def/crs/EPSG/0/3857"
        );
        assert_eq!(
            crs_uri("OGC:CRS84"),
            "http://www.opengis.net/def/crs/OGC/1.3/CRS84"
        );
    }

    #[test]
    fn pages_list_the_links_and_escape_text() {
        let page = html_page(&json!({
            "title": "a <b>",
            "links": [{ "href": "http://x/y?a=1&b=2", "rel": "self", "title": "" },
                      { "href": "http://x/{z}", "rel": "item", "templated": true }]
        }));
        assert!(page.contains("<h1>a &lt;b&gt;</h1>"));
        assert!(page.contains("href=\"http://x/y?a=1&amp;b=2\""));
        assert!(!page.contains("href=\"http://x/{z}\""));
    }
}
