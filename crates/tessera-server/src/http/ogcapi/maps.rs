//! OGC API – Maps: `/ogcapi/collections/{layer}/map` (one layer) and
//! `/ogcapi/map` (every layer, or those `collections=` names, composited
//! bottom first), rendered by the WMS renderer under the same limits and
//! render slots as a GetMap.
//!
//! The area, CRS, size and background come from [`super::map_view`]; the
//! format from `f` or `Accept` (png, jpeg, webp); dimension values from
//! `datetime` and `subset=name(value)`, an interval taking the greatest
//! value within it.

use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use tessera_grid::{TileCoord, TileFormat};

use super::documents::collection_named;
use super::map_view::{self, Scene, bad, param};
use super::{problem, subset};
use crate::auth::Caller;
use crate::http::error::ApiError;
use crate::http::reply::image_response;
use crate::http::state::Maps;
use crate::http::tiles::address::{dimension_param, query_params};
use crate::model::{Grid, Layer};
use crate::render::{Demand, ImageRequest};

/// `GET /ogcapi/collections/{collection}/map`.
pub async fn collection_map(
    State(state): State<Maps>,
    caller: Caller,
    Path(collection): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let asked = Asked {
        caller: &caller,
        query: query.as_deref(),
        headers: &headers,
    };
    one_map(&state, &collection, None, asked).await
}

/// `GET /ogcapi/collections/{collection}/styles/{style}/map`: the layer
/// drawn with one of its named styles.
pub async fn styled_collection_map(
    State(state): State<Maps>,
    caller: Caller,
    Path((collection, style)): Path<(String, String)>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let asked = Asked {
        caller: &caller,
        query: query.as_deref(),
        headers: &headers,
    };
    one_map(&state, &collection, Some(&style), asked).await
}

/// Who asked for a map, and how.
#[derive(Clone, Copy)]
struct Asked<'a> {
    caller: &'a Caller,
    query: Option<&'a str>,
    headers: &'a HeaderMap,
}

/// CRS84, the CRS of a map of several collections that names none.
const CRS84: &str = "OGC:CRS84";

/// A map of one collection, in `style` (`None`: its default).
async fn one_map(
    state: &Maps,
    collection: &str,
    style: Option<&str>,
    asked: Asked<'_>,
) -> Result<Response, ApiError> {
    let layer = collection_named(&state.registry, collection, asked.caller)?;
    let layer = super::documents::styled(&layer, style)?;
    // Drawn in the collection's storage CRS unless `crs` names another
    // (OGC API - Maps, req/core/map-response).
    let storage = layer.source.info().native_crs.id.clone();
    map(
        state,
        vec![layer],
        query_params(asked.query),
        asked,
        &storage,
    )
    .await
}

/// `GET /ogcapi/map`: the layers `collections=` names (default: every
/// layer with images), bottom first.
pub async fn dataset_map(
    State(state): State<Maps>,
    caller: Caller,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let params = query_params(query.as_deref());
    let layers = dataset_layers(&state, &params, &caller)?;
    let asked = Asked {
        caller: &caller,
        query: query.as_deref(),
        headers: &headers,
    };
    map(&state, layers, params, asked, CRS84).await
}

/// `GET /ogcapi/map/tiles/{tms}/{tileMatrix}/{tileRow}/{tileCol}`: a tile
/// of the layers `collections=` names (default: every layer with images)
/// that are tiled in the set, composited bottom first by the WMS renderer.
/// Not cached: any combination of layers may be asked, as for a GetMap.
pub async fn dataset_tile(
    State(state): State<Maps>,
    caller: Caller,
    Path((tms, matrix, row, col)): Path<(String, String, String, String)>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let not_found = |m: String| problem(ApiError::not_found("NotFound", m));
    let grid = super::documents::dataset_grid(&state.registry, &tms)
        .ok_or_else(|| not_found(format!("no dataset tileset in {tms:?}")))?;
    let z = grid
        .tms
        .matrices
        .iter()
        .position(|m| m.id == matrix)
        .ok_or_else(|| not_found(format!("{tms} has no tile matrix {matrix:?}")))?;
    let coord = grid
        .tms
        .parse_tile(&z.to_string(), &col, &row)
        .map_err(|e| not_found(format!("no tile {matrix}/{row}/{col} in {tms}: {e}")))?;
    let params = query_params(query.as_deref());
    let layers = dataset_layers(&state, &params, &caller)?
        .into_iter()
        .filter(|l| l.grids.contains(&tms))
        .collect::<Vec<_>>();
    let asked = Asked {
        caller: &caller,
        query: query.as_deref(),
        headers: &headers,
    };
    tile_map(&state, layers, (grid, coord), params, asked).await
}

/// The parameters that draw a map tile otherwise than the cached tile:
/// its size (`width`, `height`, or a scale), its background.
pub const DRAWING_PARAMETERS: [&str; 6] = [
    "width",
    "height",
    "scale-denominator",
    "mm-per-pixel",
    "bgcolor",
    "transparent",
];

/// Whether `params` name one of [`DRAWING_PARAMETERS`]: the tile asked is
/// not the cached one.
pub fn draws_otherwise(params: &[(String, String)]) -> bool {
    params
        .iter()
        .any(|(k, _)| DRAWING_PARAMETERS.contains(&k.as_str()))
}

/// `GET /ogcapi/collections/{collection}/map/tiles/{tms}/{m}/{r}/{c}`
/// with a parameter of [`DRAWING_PARAMETERS`]: the tile's area drawn
/// uncached at that size or on that background (Maps' Scaling and
/// Background classes hold for tiles too); `None` for a plain tile, which
/// the tile cache answers.
pub async fn drawn_collection_tile(
    state: &Maps,
    layer: Arc<Layer>,
    (grid, coord): (&Grid, TileCoord),
    query: Option<&str>,
    headers: &HeaderMap,
    caller: &Caller,
) -> Option<Result<Response, ApiError>> {
    let params = query_params(query);
    if !draws_otherwise(&params) {
        return None;
    }
    let asked = Asked {
        caller,
        query,
        headers,
    };
    Some(tile_map(state, vec![layer], (grid, coord), params, asked).await)
}

/// A map of `layers` over the area of tile `coord` of `grid`, in the
/// grid's CRS: the tile's size unless `params` name a size or a scale,
/// with their background and dimension values.
async fn tile_map(
    state: &Maps,
    layers: Vec<Arc<Layer>>,
    (grid, coord): (&Grid, TileCoord),
    params: Vec<(String, String)>,
    asked: Asked<'_>,
) -> Result<Response, ApiError> {
    let sized = params
        .iter()
        .any(|(k, _)| matches!(k.as_str(), "width" | "height" | "scale-denominator"));
    let mut extra = Vec::new();
    if !sized {
        extra.push(("width".to_string(), grid.tms.tile_width.to_string()));
        extra.push(("height".to_string(), grid.tms.tile_height.to_string()));
    }
    let b = grid.tms.tile_bbox(coord);
    let crs = super::crs_uri(&grid.tms.crs);
    extra.push(("crs".into(), crs.clone()));
    extra.push(("bbox-crs".into(), crs));
    // In the grid CRS's axis order, as `bbox` is read.
    let (a, c, d, e) = if grid.crs.authority_yx {
        (b.min_y, b.min_x, b.max_y, b.max_x)
    } else {
        (b.min_x, b.min_y, b.max_x, b.max_y)
    };
    extra.push(("bbox".into(), format!("{a},{c},{d},{e}")));
    // The tile names the area and its CRS; the size, scale and
    // background are the request's.
    let mut all: Vec<(String, String)> = params
        .into_iter()
        .filter(|(k, _)| {
            !matches!(
                k.as_str(),
                "crs" | "bbox-crs" | "bbox" | "center" | "center-crs"
            )
        })
        .collect();
    all.extend(extra);
    map(state, layers, all, asked, CRS84).await
}

/// The layers `collections=` names among `params` (by id or by the
/// collection's URL), or the default set: `ogcapi.default_collections`,
/// else the first `limits.wms_max_layers` layers with images, in
/// configured order (so that the dataset map the landing page links is
/// drawn on a server of any size).
fn dataset_layers(
    state: &Maps,
    params: &[(String, String)],
    caller: &Caller,
) -> Result<Vec<Arc<Layer>>, ApiError> {
    Ok(match params.iter().find(|(k, _)| k == "collections") {
        Some((_, names)) => names
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(|n| collection_named(&state.registry, collection_id(n), caller))
            .collect::<Result<Vec<_>, _>>()?,
        None => match &state.config.ogcapi.default_collections {
            Some(names) => names
                .iter()
                .map(|n| collection_named(&state.registry, n, caller))
                .collect::<Result<Vec<_>, _>>()?,
            None => state
                .registry
                .layers()
                .into_iter()
                .filter(|l| l.formats.iter().any(|f| f.is_picture()))
                .take(state.config.limits.wms_max_layers)
                .collect(),
        },
    })
}

/// A collection named in `collections=`: its id, or the id at the end of
/// its URL (`https://host/ogcapi/collections/relief`).
fn collection_id(named: &str) -> &str {
    let path = named.split(['?', '#']).next().unwrap_or(named);
    match path.rsplit_once("/collections/") {
        Some((_, id)) => id.trim_end_matches('/'),
        None => named,
    }
}

async fn map(
    state: &Maps,
    layers: Vec<Arc<Layer>>,
    params: Vec<(String, String)>,
    asked: Asked<'_>,
    default_crs: &str,
) -> Result<Response, ApiError> {
    let headers = asked.headers;
    let limits = &state.config.limits;
    if layers.is_empty() {
        return Err(bad("no collection to draw".into()));
    }
    if layers.len() > limits.wms_max_layers {
        return Err(bad(format!(
            "{} collections; at most {} are drawn at once (limits.wms_max_layers)",
            layers.len(),
            limits.wms_max_layers
        )));
    }
    let subsets = subset::parse(
        params
            .iter()
            .filter(|(k, _)| k == "subset")
            .map(|(_, v)| v.as_str()),
    )
    .map_err(bad)?;
    let mut dimensions = params.clone();
    super::subset::dimension_params(&mut dimensions).map_err(bad)?;
    let get = |name: &str| param(&params, name);
    let mut at = Vec::with_capacity(layers.len());
    for layer in &layers {
        if layer.formats.iter().all(|f| f.is_vector()) {
            return Err(bad(format!(
                "collection {:?} has no map (vector tiles only)",
                layer.name
            )));
        }
        at.push(layer_at(layer, &dimensions)?);
    }
    let mut extent = layers[0].source.info().lonlat_bounds;
    for l in &layers[1..] {
        extent = extent.union(&l.source.info().lonlat_bounds);
    }
    let native = layers[0].source.info();
    let crs_of = |name: &str| state.registry.crs(name).map_err(|e| e.to_string());
    let view = Scene {
        params: &params,
        subsets: &subsets,
        crs_of: &crs_of,
        extent,
        native_metres_per_pixel: (native.native_resolution > 0.0)
            .then_some(native.native_resolution * native.native_crs.meters_per_unit),
        limits,
        default_crs,
        storage_extent: (layers.len() == 1)
            .then_some((native.native_crs.id.as_str(), native.native_bounds)),
    }
    .view()?;
    let format = match get("f") {
        Some(f) => super::format_param(f)
            .filter(|t| t.is_picture() && *t != TileFormat::Mixed)
            .ok_or_else(|| bad(format!("f={f:?}: maps are png, jpeg or webp")))?,
        None => accepted(headers).ok_or_else(|| {
            let mut e = ApiError::new(
                StatusCode::NOT_ACCEPTABLE,
                "NotAcceptable",
                "maps are image/png, image/jpeg or image/webp; Accept names none",
            );
            e.protocol = crate::http::error::Protocol::Problem;
            e
        })?,
    };
    let background = map_view::background(&params)?;
    let crs_uri = super::crs_uri(&view.crs.id);
    // The map's area in its CRS's axis order (latitude first for EPSG:4326).
    let b = view.bbox;
    let content_bbox = if view.crs.authority_yx {
        [b.min_y, b.min_x, b.max_y, b.max_x]
    } else {
        [b.min_x, b.min_y, b.max_x, b.max_y]
    };
    let image = ImageRequest {
        layers: at,
        bbox: view.bbox,
        crs: view.crs,
        width: view.width,
        height: view.height,
        format,
        transparent: background.transparent,
        background: background.color,
        keep_alpha: true,
    };
    asked
        .caller
        .admit_render(u64::from(image.width) * u64::from(image.height))
        .map_err(|r| problem(r.into()))?;
    let bytes = state
        .renderer
        .render(image, Demand::Map)
        .await
        .map_err(|e| problem(e.into()))?;
    let mut response = image_response(format, bytes);
    if let Ok(v) = HeaderValue::from_str(&format!("<{crs_uri}>")) {
        response.headers_mut().insert("Content-Crs", v);
    }
    let bbox_text = content_bbox.map(|v| v.to_string()).join(",");
    if let Ok(v) = HeaderValue::from_str(&bbox_text) {
        response.headers_mut().insert("Content-Bbox", v);
    }
    Ok(response)
}

/// `layer` at the dimension values `params` name; an interval (`datetime`
/// or a `subset` trim) takes the greatest value within it where the layer
/// has listed values (a layer of ranges draws the whole interval).
fn layer_at(layer: &Arc<Layer>, params: &[(String, String)]) -> Result<Arc<Layer>, ApiError> {
    let get = |name: &str| param(params, name);
    let mut asked = Vec::with_capacity(layer.dimensions.len());
    for d in &layer.dimensions {
        let Some(text) = dimension_param(get, &d.name) else {
            continue;
        };
        let text = match (&layer.ranges, d.greatest_within(&text)) {
            (None, Some(within)) => within.map_err(|e| problem(ApiError::from_dimension(&e)))?,
            _ => text,
        };
        asked.push((d.name.clone(), text));
    }
    layer
        .at(|name| {
            asked
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        })
        .map_err(|e| problem(ApiError::from_dimension(&e)))
}

/// The map format `Accept` asks for (PNG when it takes anything).
fn accepted(headers: &HeaderMap) -> Option<TileFormat> {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|a| a.to_str().ok())
        .unwrap_or("*/*");
    accept
        .split(',')
        .map(|t| t.split(';').next().unwrap_or_default().trim())
        .find_map(|t| match t {
            "image/png" | "image/*" | "*/*" => Some(TileFormat::Png),
            "image/jpeg" => Some(TileFormat::Jpeg),
            "image/webp" => Some(TileFormat::Webp),
            _ => None,
        })
}
