//! The landing page, the conformance declaration and the collections (one
//! per layer).

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    CONFORMANCE, Form, REL_MAP, REL_MAP_TILESETS, REL_TILING_SCHEME, REL_VECTOR_TILESETS, answer,
    crs_uri, link, problem, self_links,
};
use crate::auth::Caller;
use crate::dimension::Kind;
use crate::http::error::ApiError;
use crate::http::reply::base_url;
use crate::http::state::Catalog;
use crate::model::Layer;
use crate::registry::Registry;
use std::sync::Arc;

/// The query every document takes.
#[derive(Debug, Default, Deserialize)]
pub struct DocQuery {
    /// `json` or `html`.
    pub f: Option<String>,
}

/// `GET /ogcapi`: the landing page.
pub async fn landing(
    State(state): State<Catalog>,
    caller: Caller,
    Query(q): Query<DocQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let form = Form::of(q.f.as_deref(), &headers)?;
    let base = format!("{}/ogcapi", base_url(&state.config, &headers));
    let mut links = self_links(&base).to_vec();
    links.extend([
        link(
            format!("{base}/api"),
            "service-desc",
            super::OPENAPI_JSON,
            "the API definition",
        ),
        link(
            format!("{base}/api?f=html"),
            "service-doc",
            "text/html",
            "the API definition as HTML",
        ),
        link(
            format!("{base}/conformance"),
            "conformance",
            "application/json",
            "conformance classes",
        ),
        link(
            format!("{base}/conformance"),
            "http://www.opengis.net/def/rel/ogc/1.0/conformance",
            "application/json",
            "conformance classes",
        ),
        link(
            format!("{base}/collections"),
            "data",
            "application/json",
            "the layers",
        ),
        link(
            format!("{base}/collections"),
            "http://www.opengis.net/def/rel/ogc/1.0/data",
            "application/json",
            "the layers",
        ),
        link(
            format!("{base}/tileMatrixSets"),
            "http://www.opengis.net/def/rel/ogc/1.0/tiling-schemes",
            "application/json",
            "tile matrix sets",
        ),
        link(
            format!("{base}/map"),
            REL_MAP,
            "image/png",
            "a map of every layer",
        ),
        link(
            format!("{base}/map/tiles"),
            REL_MAP_TILESETS,
            "application/json",
            "map tilesets of every layer",
        ),
    ]);
    let mut doc = json!({
        "title": "tessera",
        "description": "Map tiles and maps of the layers this server serves (OGC API - Tiles, OGC API - Maps).",
        "links": links,
    });
    // The extent of the dataset: every layer the caller may read
    // (req/dataset-map/desc-extent).
    let extent = state
        .registry
        .layers()
        .iter()
        .filter(|l| caller.sees(&l.name))
        .map(|l| l.source.info().lonlat_bounds)
        .reduce(|a, b| a.union(&b));
    if let Some(e) = extent {
        doc["extent"] = json!({ "spatial": {
            "bbox": [[e.min_x, e.min_y, e.max_x, e.max_y]],
            "crs": "http://www.opengis.net/def/crs/OGC/1.3/CRS84",
        } });
    }
    Ok(answer(&doc, form, "application/json"))
}

/// `GET /ogcapi/conformance`.
pub async fn conformance(
    Query(q): Query<DocQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let form = Form::of(q.f.as_deref(), &headers)?;
    Ok(answer(
        &json!({ "title": "conformance", "conformsTo": CONFORMANCE }),
        form,
        "application/json",
    ))
}

/// `GET /ogcapi/collections`.
pub async fn collections(
    State(state): State<Catalog>,
    caller: Caller,
    Query(q): Query<DocQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let form = Form::of(q.f.as_deref(), &headers)?;
    let base = format!("{}/ogcapi", base_url(&state.config, &headers));
    let collections: Vec<Value> = state
        .registry
        .layers()
        .iter()
        .filter(|l| caller.sees(&l.name))
        .map(|l| describe(l, &base))
        .collect();
    let doc = json!({
        "title": "layers",
        "links": self_links(&format!("{base}/collections")),
        "collections": collections,
    });
    Ok(answer(&doc, form, "application/json"))
}

/// `GET /ogcapi/collections/{collection}`.
pub async fn collection(
    State(state): State<Catalog>,
    caller: Caller,
    Path(name): Path<String>,
    Query(q): Query<DocQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let form = Form::of(q.f.as_deref(), &headers)?;
    let layer = collection_named(&state.registry, &name, &caller)?;
    let base = format!("{}/ogcapi", base_url(&state.config, &headers));
    Ok(answer(&describe(&layer, &base), form, "application/json"))
}

/// The 404 of a collection that is not served.
/// The collection `name`, or a problem naming the closest collection and
/// the first ones (among those `caller` may read).
pub fn collection_named(
    registry: &Registry,
    name: &str,
    caller: &Caller,
) -> Result<Arc<Layer>, ApiError> {
    registry
        .find_layer(name, &|n| caller.sees(n))
        .map_err(|unknown| {
            problem(ApiError::not_found(
                "NotFound",
                format!("no collection {unknown}; /ogcapi/collections lists them"),
            ))
        })
}

/// A layer as a collection: its extent (CRS84, its native CRS, and its
/// time values' interval) and links to its tilesets.
fn describe(layer: &Layer, base: &str) -> Value {
    let info = layer.source.info();
    let ll = info.lonlat_bounds;
    let native = &info.native_bounds;
    let href = format!("{base}/collections/{}", layer.name);
    let mut links = vec![
        link(
            format!("{href}?f=json"),
            "self",
            "application/json",
            "this collection",
        ),
        link(
            format!("{href}?f=html"),
            "alternate",
            "text/html",
            "this collection as HTML",
        ),
    ];
    if layer.formats.iter().any(|f| f.is_picture()) {
        links.push(link(
            format!("{href}/map/tiles"),
            REL_MAP_TILESETS,
            "application/json",
            "map tilesets",
        ));
        links.push(link(
            format!("{href}/map"),
            REL_MAP,
            "image/png",
            "a map of the layer",
        ));
    }
    if layer.formats.iter().any(|f| f.is_vector()) {
        links.push(link(
            format!("{href}/tiles"),
            REL_VECTOR_TILESETS,
            "application/json",
            "vector tilesets",
        ));
    }
    // The server's own map page of the layer (IANA's `preview` relation);
    // the HTML form of a collection shows it.
    let site = base.strip_suffix("/ogcapi").unwrap_or(base);
    links.push(link(
        format!("{site}/preview/{}", layer.name),
        "preview",
        "text/html",
        "map preview",
    ));
    for grid in &layer.grids {
        links.push(link(
            format!("{base}/tileMatrixSets/{grid}"),
            REL_TILING_SCHEME,
            "application/json",
            grid,
        ));
    }
    let mut extent = json!({
        "spatial": {
            "bbox": [[ll.min_x, ll.min_y, ll.max_x, ll.max_y]],
            "crs": "http://www.opengis.net/def/crs/OGC/1.3/CRS84",
            // In the storage CRS's axis order (latitude first for
            // EPSG:4326), an array of boxes as the Maps definitions have it.
            "storageCrsBbox": [if info.native_crs.authority_yx {
                [native.min_y, native.min_x, native.max_y, native.max_x]
            } else {
                [native.min_x, native.min_y, native.max_x, native.max_y]
            }],
        }
    });
    if let Some(time) = layer.dimensions.iter().find(|d| d.kind == Kind::Time)
        && let (Some(first), Some(last)) = (time.values.first(), time.values.last())
    {
        extent["temporal"] = json!({
            "interval": [[first, last]],
            "trs": "http://www.opengis.net/def/uom/ISO-8601/0/Gregorian",
        });
    }
    let mut doc = json!({
        "id": layer.name,
        "title": layer.title,
        "extent": extent,
        "itemType": if layer.formats.iter().all(|f| f.is_vector()) { "feature" } else { "map" },
        "crs": [
            "http://www.opengis.net/def/crs/OGC/1.3/CRS84",
            crs_uri(&info.native_crs.id),
        ],
        "storageCrs": crs_uri(&info.native_crs.id),
        "links": links,
    });
    if !layer.other_styles.is_empty() && layer.formats.iter().any(|f| f.is_picture()) {
        // The named styles, each with its map and map tilesets
        // (`/styles/{styleId}/map`, as OGC API - Maps and Tiles name them).
        let styles: Vec<Value> = layer
            .style_names()
            .map(|id| {
                json!({
                    "id": id,
                    "title": id,
                    "links": [
                        link(format!("{href}/styles/{id}/map"), REL_MAP, "image/png", &format!("a map in style {id}")),
                        link(format!("{href}/styles/{id}/map/tiles"), REL_MAP_TILESETS, "application/json", &format!("map tilesets in style {id}")),
                    ],
                })
            })
            .collect();
        doc["styles"] = json!(styles);
        doc["defaultStyle"] = json!(layer.style_name);
    }
    if let Some(d) = &layer.description {
        doc["description"] = json!(d);
    }
    if !layer.keywords.is_empty() {
        doc["keywords"] = json!(layer.keywords);
    }
    if let Some(a) = &layer.attribution {
        doc["attribution"] = json!(a);
    }
    doc
}

/// `layer` drawn with the style `style` names (`None`: its default).
pub(super) fn styled(
    layer: &std::sync::Arc<Layer>,
    style: Option<&str>,
) -> Result<std::sync::Arc<Layer>, ApiError> {
    layer
        .styled(style)
        .map_err(|e| super::problem(ApiError::not_found("StyleNotDefined", e.to_string())))
}

/// The grid of a dataset tileset: one a layer with images is tiled in.
pub(super) fn dataset_grid<'a>(
    registry: &'a Registry,
    tms: &str,
) -> Option<&'a crate::model::Grid> {
    registry
        .layers()
        .iter()
        .any(|l| l.grids.iter().any(|g| g == tms) && l.formats.iter().any(|f| f.is_picture()))
        .then(|| registry.grid(tms).map(AsRef::as_ref))
        .flatten()
        .filter(|g| !g.tms.id.ends_with(crate::model::HIDPI_SUFFIX))
}
