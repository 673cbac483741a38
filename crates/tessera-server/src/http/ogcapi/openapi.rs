//! `/ogcapi/api`: an OpenAPI 3.0 document of what is served here: every
//! path of the OGC API, its parameters (the collections and tile matrix
//! sets served, as enumerations) and the media types it answers with.

use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use tessera_grid::TileFormat;

use super::documents::DocQuery;
use super::{Form, OPENAPI_JSON, answer};
use crate::auth::Caller;
use crate::http::error::ApiError;
use crate::http::reply::base_url;
use crate::http::state::Catalog;
use crate::model::HIDPI_SUFFIX;

/// `GET /ogcapi/api`.
pub async fn api(
    State(state): State<Catalog>,
    caller: Caller,
    Query(q): Query<DocQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let form = Form::of(q.f.as_deref(), &headers)?;
    let base = format!("{}/ogcapi", base_url(&state.config, &headers));
    let mut layers = state.registry.layers();
    layers.retain(|l| caller.sees(&l.name));
    let collections: Vec<&str> = layers.iter().map(|l| l.name.as_str()).collect();
    let mut sets: Vec<&str> = state
        .registry
        .grids
        .keys()
        .map(String::as_str)
        .filter(|g| !g.ends_with(HIDPI_SUFFIX))
        .collect();
    sets.sort_unstable();
    let doc = document(&base, &collections, &sets);
    Ok(match form {
        Form::Json => {
            let mut response = doc.to_string().into_response();
            response
                .headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(OPENAPI_JSON));
            response
        }
        Form::Html => answer(&doc, form, "application/json"),
    })
}

/// The operation id of `name`: OGC API - Tiles' and Maps' suffixes
/// (`.collection.map.getTile`) after the server's name, other names as
/// they are (`getLandingPage`).
fn operation_id(name: &str) -> String {
    if name.starts_with('.') {
        format!("tessera{name}")
    } else {
        name.to_string()
    }
}

fn document(base: &str, collections: &[&str], sets: &[&str]) -> Value {
    let path_param = |name: &str, values: &[&str], description: &str| {
        json!({
            "name": name, "in": "path", "required": true, "description": description,
            "schema": { "type": "string", "enum": values },
        })
    };
    let free_path_param = |name: &str, description: &str| {
        json!({
            "name": name, "in": "path", "required": true, "description": description,
            "schema": { "type": "string" },
        })
    };
    let query = |name: &str, description: &str, schema: Value| json!({ "name": name, "in": "query", "required": false, "description": description, "schema": schema });
    let f_doc = query(
        "f",
        "json or html (else Accept)",
        json!({ "type": "string", "enum": ["json", "html"] }),
    );
    let collection = path_param("collectionId", collections, "a layer");
    let tms = path_param("tileMatrixSetId", sets, "a tile matrix set");
    let datetime = query(
        "datetime",
        "a time of the layer's time dimension, or an interval (a/b, ../b, a/..) whose latest it takes",
        json!({ "type": "string" }),
    );
    let subset = query(
        "subset",
        "axis(value) or axis(low:high),...: a dimension's value (an interval takes the greatest within), or Lat/Lon/E/N to cut a map's area",
        json!({ "type": "string" }),
    );
    // Operation ids as OGC API - Tiles (table 11) and Maps name them: the
    // tile, tileset and map operations end in theirs (`.collection.map.getTile`).
    let json_doc = |id: &str, summary: &str, params: Vec<Value>| {
        json!({ "get": {
            "operationId": operation_id(id),
            "summary": summary,
            "parameters": params,
            "responses": {
                "200": { "description": summary, "content": {
                    "application/json": { "schema": { "type": "object" } },
                    "text/html": { "schema": { "type": "string" } },
                } },
                "default": { "description": "a problem", "content": {
                    "application/problem+json": { "schema": { "type": "object" } } } },
            },
        } })
    };
    let image = |types: &[&str]| {
        let mut content = Map::new();
        for t in types {
            content.insert(
                (*t).to_string(),
                json!({ "schema": { "type": "string", "format": "binary" } }),
            );
        }
        Value::Object(content)
    };
    let raster: Vec<&str> = [TileFormat::Png, TileFormat::Jpeg, TileFormat::Webp]
        .iter()
        .map(|f| f.content_type())
        .collect();
    let collections_param = query(
        "collections",
        "the collections drawn, bottom first (default: all)",
        json!({ "type": "string" }),
    );
    let tile = |id: &str, summary: &str, types: &[&str], formats: &[&str], first: &Value| {
        json!({ "get": {
            "operationId": operation_id(id),
            "summary": summary,
            "parameters": [
                first.clone(), tms.clone(),
                free_path_param("tileMatrix", "a tile matrix of the set"),
                free_path_param("tileRow", "a row, from the top"),
                free_path_param("tileCol", "a column, from the left"),
                query("f", "the format (else Accept)", json!({ "type": "string", "enum": formats })),
                datetime.clone(), subset.clone(),
            ],
            "responses": {
                "200": { "description": "the tile", "content": image(types) },
                "204": { "description": "a vector tile without features" },
                "default": { "description": "a problem", "content": {
                    "application/problem+json": { "schema": { "type": "object" } } } },
            },
        } })
    };
    let map_params = |mut first: Vec<Value>| {
        first.extend([
            query(
                "bbox",
                "minx,miny,maxx,maxy in bbox-crs's axis order",
                json!({ "type": "string" }),
            ),
            query(
                "bbox-crs",
                "the CRS of bbox (default CRS84)",
                json!({ "type": "string", "format": "uri" }),
            ),
            query(
                "crs",
                "the CRS of the map (default CRS84)",
                json!({ "type": "string", "format": "uri" }),
            ),
            query(
                "subset-crs",
                "the CRS of a spatial subset (default CRS84)",
                json!({ "type": "string", "format": "uri" }),
            ),
            query(
                "center",
                "x,y in center-crs's axis order: the map around it, at scale-denominator (else the native scale)",
                json!({ "type": "string" }),
            ),
            query(
                "center-crs",
                "the CRS of center (default CRS84)",
                json!({ "type": "string", "format": "uri" }),
            ),
            query(
                "width",
                "pixels (with only height: from the area's aspect)",
                json!({ "type": "integer", "minimum": 1 }),
            ),
            query(
                "height",
                "pixels (with only width: from the area's aspect)",
                json!({ "type": "integer", "minimum": 1 }),
            ),
            query(
                "scale-denominator",
                "the map's scale: its size from the area, or its area around center",
                json!({ "type": "number", "minimum": 0, "exclusiveMinimum": true }),
            ),
            query(
                "mm-per-pixel",
                "the display resolution a scale assumes (default 0.28)",
                json!({ "type": "number", "minimum": 0, "exclusiveMinimum": true }),
            ),
            query(
                "f",
                "the format (else Accept)",
                json!({ "type": "string", "enum": ["png", "jpeg", "webp"] }),
            ),
            query(
                "transparent",
                "a transparent background (default: without bgcolor)",
                json!({ "type": "boolean" }),
            ),
            query(
                "bgcolor",
                "the background colour: a web colour name, 0xRRGGBB or 0xAARRGGBB",
                json!({ "type": "string" }),
            ),
            datetime.clone(),
            subset.clone(),
        ]);
        first
    };
    let map = |id: &str, summary: &str, params: Vec<Value>| {
        json!({ "get": {
            "operationId": operation_id(id),
            "summary": summary,
            "parameters": map_params(params),
            "responses": {
                "200": { "description": "the map", "content": image(&raster) },
                "default": { "description": "a problem", "content": {
                    "application/problem+json": { "schema": { "type": "object" } } } },
            },
        } })
    };
    let mut paths = Map::new();
    let mut add = |path: &str, item: Value| {
        paths.insert(path.to_string(), item);
    };
    add(
        "/",
        json_doc("getLandingPage", "the landing page", vec![f_doc.clone()]),
    );
    add(
        "/api",
        json!({ "get": { "operationId": "getAPI", "summary": "this document", "responses": { "200": {
            "description": "this document",
            "content": { OPENAPI_JSON: { "schema": { "type": "object" } } } } } } }),
    );
    add(
        "/conformance",
        json_doc(
            "getConformance",
            "the conformance classes",
            vec![f_doc.clone()],
        ),
    );
    add(
        "/collections",
        json_doc(
            "getCollectionsList",
            "the collections (layers)",
            vec![f_doc.clone()],
        ),
    );
    add(
        "/collections/{collectionId}",
        json_doc(
            "getCollection",
            "a collection",
            vec![collection.clone(), f_doc.clone()],
        ),
    );
    add(
        "/tileMatrixSets",
        json_doc(
            "getTileMatrixSetsList",
            "the tile matrix sets",
            vec![f_doc.clone()],
        ),
    );
    add(
        "/tileMatrixSets/{tileMatrixSetId}",
        json_doc(
            "getTileMatrixSet",
            "a tile matrix set",
            vec![tms.clone(), f_doc.clone()],
        ),
    );
    add(
        "/collections/{collectionId}/map/tiles",
        json_doc(
            ".collection.map.getTileSetsList",
            "a collection's map tilesets",
            vec![collection.clone(), f_doc.clone()],
        ),
    );
    add(
        "/collections/{collectionId}/map/tiles/{tileMatrixSetId}",
        json_doc(
            ".collection.map.getTileSet",
            "a map tileset",
            vec![collection.clone(), tms.clone(), f_doc.clone()],
        ),
    );
    add(
        "/collections/{collectionId}/map/tiles/{tileMatrixSetId}/{tileMatrix}/{tileRow}/{tileCol}",
        tile(
            ".collection.map.getTile",
            "a map tile",
            &raster,
            &["png", "jpeg", "webp"],
            &collection,
        ),
    );
    add(
        "/collections/{collectionId}/tiles",
        json_doc(
            ".collection.vector.getTileSetsList",
            "a collection's vector tilesets",
            vec![collection.clone(), f_doc.clone()],
        ),
    );
    add(
        "/collections/{collectionId}/tiles/{tileMatrixSetId}",
        json_doc(
            ".collection.vector.getTileSet",
            "a vector tileset",
            vec![collection.clone(), tms.clone(), f_doc.clone()],
        ),
    );
    add(
        "/collections/{collectionId}/tiles/{tileMatrixSetId}/{tileMatrix}/{tileRow}/{tileCol}",
        tile(
            ".collection.vector.getTile",
            "a vector tile",
            &[
                TileFormat::Mvt.content_type(),
                TileFormat::Mlt.content_type(),
            ],
            &["mvt", "mlt"],
            &collection,
        ),
    );
    add(
        "/map/tiles",
        json_doc(
            ".dataset.map.getTileSetsList",
            "the map tilesets of the collections composited",
            vec![f_doc.clone()],
        ),
    );
    add(
        "/map/tiles/{tileMatrixSetId}",
        json_doc(
            ".dataset.map.getTileSet",
            "a map tileset of the collections composited",
            vec![tms.clone(), f_doc.clone()],
        ),
    );
    add(
        "/map/tiles/{tileMatrixSetId}/{tileMatrix}/{tileRow}/{tileCol}",
        tile(
            ".dataset.map.getTile",
            "a map tile of the collections composited",
            &raster,
            &["png", "jpeg", "webp"],
            &collections_param,
        ),
    );
    add(
        "/collections/{collectionId}/map",
        map(
            ".collection.getMap",
            "a map of a collection",
            vec![collection.clone()],
        ),
    );
    add(
        "/map",
        map(
            ".dataset.getMap",
            "a map of several collections",
            vec![query(
                "collections",
                "the collections drawn, bottom first (default: all)",
                json!({ "type": "string" }),
            )],
        ),
    );
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "tessera",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Map tiles and maps of the layers this server serves (OGC API - Tiles, OGC API - Maps).",
        },
        "servers": [{ "url": base }],
        "paths": paths,
    })
}
