//! `/ogcapi/tileMatrixSets`: every grid as an OGC 2D TileMatrixSet 2.0
//! JSON document (OGC 17-083r4), the built-in ones with their registered
//! URIs.

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::{Value, json};
use tessera_grid::TileMatrixSet;
use tessera_source::Crs;

use super::documents::DocQuery;
use super::{Form, answer, crs_uri, link, problem, self_links};
use crate::http::error::ApiError;
use crate::http::reply::base_url;
use crate::http::state::Catalog;
use crate::model::{Grid, HIDPI_SUFFIX};

/// `GET /ogcapi/tileMatrixSets`.
pub async fn list(
    State(state): State<Catalog>,
    Query(q): Query<DocQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let form = Form::of(q.f.as_deref(), &headers)?;
    let base = format!("{}/ogcapi", base_url(&state.config, &headers));
    let mut grids: Vec<&Grid> = state
        .registry
        .grids
        .values()
        .map(AsRef::as_ref)
        .filter(|g| !g.tms.id.ends_with(HIDPI_SUFFIX))
        .collect();
    grids.sort_by(|a, b| a.tms.id.cmp(&b.tms.id));
    let sets: Vec<Value> = grids
        .iter()
        .map(|g| {
            let mut entry = json!({
                "id": g.tms.id,
                "title": g.tms.title,
                "crs": crs_uri(&g.tms.crs),
                "links": [link(format!("{base}/tileMatrixSets/{}", g.tms.id), "self", "application/json", &g.tms.title)],
            });
            if let Some(uri) = registered_uri(&g.tms) {
                entry["uri"] = json!(uri);
            }
            entry
        })
        .collect();
    let doc = json!({
        "title": "tile matrix sets",
        "links": self_links(&format!("{base}/tileMatrixSets")),
        "tileMatrixSets": sets,
    });
    Ok(answer(&doc, form, "application/json"))
}

/// `GET /ogcapi/tileMatrixSets/{id}`.
pub async fn one(
    State(state): State<Catalog>,
    Path(id): Path<String>,
    Query(q): Query<DocQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let form = Form::of(q.f.as_deref(), &headers)?;
    let grid = state
        .registry
        .grid(&id)
        .filter(|g| !g.tms.id.ends_with(HIDPI_SUFFIX))
        .ok_or_else(|| {
            problem(ApiError::not_found(
                "NotFound",
                format!("no tile matrix set {id:?}; /ogcapi/tileMatrixSets lists them"),
            ))
        })?;
    Ok(answer(&document(grid), form, "application/json"))
}

/// The registered URI of a built-in grid.
pub fn registered_uri(tms: &TileMatrixSet) -> Option<String> {
    matches!(tms.id.as_str(), "WebMercatorQuad" | "WorldCRS84Quad").then(|| {
        format!(
            "http://www.opengis.net/def/tilematrixset/OGC/1.0/{}",
            tms.id
        )
    })
}

/// The grid as a TileMatrixSet 2.0 JSON document: points and axes in the
/// CRS's own axis order. It also carries the members the 2019 draft named
/// otherwise (`identifier`, `supportedCRS`, `topLeftCorner`), which the 2.0
/// schema allows beside its own and GDAL's OGCAPI driver up to 3.6 reads.
pub fn document(grid: &Grid) -> Value {
    let tms = &grid.tms;
    let crs: &Crs = &grid.crs;
    let yx = crs.authority_yx;
    let axes = match (crs.geographic, yx) {
        (true, true) => ["Lat", "Lon"],
        (true, false) => ["Lon", "Lat"],
        (false, true) => ["Y", "X"],
        (false, false) => ["X", "Y"],
    };
    let point = |x: f64, y: f64| if yx { [y, x] } else { [x, y] };
    let matrices: Vec<Value> = tms
        .matrices
        .iter()
        .map(|m| {
            json!({
                "id": m.id,
                "scaleDenominator": m.scale_denominator,
                "cellSize": m.resolution,
                "cornerOfOrigin": "topLeft",
                "pointOfOrigin": point(tms.origin_x, tms.origin_y),
                "tileWidth": tms.tile_width,
                "tileHeight": tms.tile_height,
                "matrixWidth": m.matrix_width,
                "matrixHeight": m.matrix_height,
                // The 2019 draft's names, which GDAL up to 3.6 reads.
                "identifier": m.id,
                "topLeftCorner": point(tms.origin_x, tms.origin_y),
            })
        })
        .collect();
    let e = &tms.extent;
    let mut doc = json!({
        "id": tms.id,
        "title": tms.title,
        "crs": crs_uri(&tms.crs),
        "orderedAxes": axes,
        "boundingBox": {
            "lowerLeft": point(e.min_x, e.min_y),
            "upperRight": point(e.max_x, e.max_y),
            "crs": crs_uri(&tms.crs),
            "orderedAxes": axes,
        },
        "tileMatrices": matrices,
        // The 2019 draft's names, which GDAL up to 3.6 reads.
        "identifier": tms.id,
        "supportedCRS": crs_uri(&tms.crs),
    });
    if let Some(uri) = registered_uri(tms) {
        doc["uri"] = json!(uri);
    }
    if let Some(wkss) = &tms.well_known_scale_set {
        // `urn:ogc:def:wkss:OGC:1.0:GoogleMapsCompatible` as a URI.
        let uri = match wkss.strip_prefix("urn:ogc:def:wkss:OGC:1.0:") {
            Some(name) => format!("http://www.opengis.net/def/wkss/OGC/1.0/{name}"),
            None => wkss.clone(),
        };
        doc["wellKnownScaleSet"] = json!(uri);
    }
    doc
}
