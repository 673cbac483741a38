//! OGC API – Maps: `/ogcapi/collections/{layer}/map` (one layer) and
//! `/ogcapi/map` (every layer, or those `collections=` names, composited
//! bottom first), rendered by the WMS renderer under the same limits and
//! render slots as a GetMap.
//!
//! `bbox` (in `bbox-crs`, default CRS84, in that CRS's axis order), `crs`
//! (of the image, default CRS84), `width`/`height` (either one with the
//! other from the bbox's aspect; default 1024 wide), `f` or `Accept`
//! (png, jpeg, webp), `transparent` (default true), `bgcolor`, `datetime`
//! and `subset=name(value)` for dimensions.

use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use tessera_grid::{BBox, TileFormat};
use tessera_image::Color;
use tessera_source::Crs;

use super::documents::unknown;
use super::problem;
use crate::http::address::{dimension_param, query_params};
use crate::http::error::ApiError;
use crate::http::image_response;
use crate::http::state::Maps;
use crate::model::Layer;
use crate::render::{Demand, ImageRequest};

/// The default width of a map that names no size.
const DEFAULT_WIDTH: u32 = 1024;

/// `GET /ogcapi/collections/{collection}/map`.
pub async fn collection_map(
    State(state): State<Maps>,
    Path(collection): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let layer = state
        .registry
        .layer(&collection)
        .ok_or_else(|| unknown(&collection))?;
    map(
        &state,
        vec![layer],
        query_params(query.as_deref()),
        &headers,
    )
    .await
}

/// `GET /ogcapi/map`: the layers `collections=` names (default: every
/// layer with images), bottom first.
pub async fn dataset_map(
    State(state): State<Maps>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let params = query_params(query.as_deref());
    let layers = dataset_layers(&state, &params)?;
    map(&state, layers, params, &headers).await
}

/// `GET /ogcapi/map/tiles/{tms}/{tileMatrix}/{tileRow}/{tileCol}`: a tile
/// of the layers `collections=` names (default: every layer with images)
/// that are tiled in the set, composited bottom first by the WMS renderer.
/// Not cached: any combination of layers may be asked, as for a GetMap.
pub async fn dataset_tile(
    State(state): State<Maps>,
    Path((tms, matrix, row, col)): Path<(String, String, String, String)>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let not_found = |m: String| problem(ApiError::not_found("NotFound", m));
    let grid = super::tiles::dataset_grid(&state.registry, &tms)
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
    let layers = dataset_layers(&state, &params)?
        .into_iter()
        .filter(|l| l.grids.contains(&tms))
        .collect::<Vec<_>>();
    let mut extra = vec![
        ("width".to_string(), grid.tms.tile_width.to_string()),
        ("height".to_string(), grid.tms.tile_height.to_string()),
    ];
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
    let mut all: Vec<(String, String)> = params
        .into_iter()
        .filter(|(k, _)| !matches!(k.as_str(), "width" | "height" | "crs" | "bbox-crs" | "bbox"))
        .collect();
    all.extend(extra);
    map(&state, layers, all, &headers).await
}

/// The layers `collections=` names among `params`, or every layer with
/// images.
fn dataset_layers(state: &Maps, params: &[(String, String)]) -> Result<Vec<Arc<Layer>>, ApiError> {
    Ok(match params.iter().find(|(k, _)| k == "collections") {
        Some((_, names)) => names
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(|n| state.registry.layer(n).ok_or_else(|| unknown(n)))
            .collect::<Result<Vec<_>, _>>()?,
        None => state
            .registry
            .layers()
            .into_iter()
            .filter(|l| l.formats.iter().any(|f| !f.is_vector()))
            .collect(),
    })
}

fn bad(code: &'static str, message: String) -> ApiError {
    problem(ApiError::bad_request(code, message))
}

async fn map(
    state: &Maps,
    layers: Vec<Arc<Layer>>,
    mut params: Vec<(String, String)>,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let limits = &state.config.limits;
    if layers.is_empty() {
        return Err(bad("InvalidParameterValue", "no collection to draw".into()));
    }
    if layers.len() > limits.wms_max_layers {
        return Err(bad(
            "InvalidParameterValue",
            format!(
                "{} collections; at most {} are drawn at once (limits.wms_max_layers)",
                layers.len(),
                limits.wms_max_layers
            ),
        ));
    }
    super::tiles::dimension_params(&mut params);
    let get = |name: &str| {
        params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let mut at = Vec::with_capacity(layers.len());
    for layer in &layers {
        if layer.formats.iter().all(|f| f.is_vector()) {
            return Err(bad(
                "InvalidParameterValue",
                format!("collection {:?} has no map (vector tiles only)", layer.name),
            ));
        }
        at.push(
            layer
                .at(|d| dimension_param(get, d))
                .map_err(|e| problem(ApiError::from_dimension(&e)))?,
        );
    }
    let crs_of = |text: Option<&str>, what: &str| -> Result<Arc<Crs>, ApiError> {
        let text = text.unwrap_or("http://www.opengis.net/def/crs/OGC/1.3/CRS84");
        state
            .registry
            .crs(&crs_name(text))
            .map_err(|e| bad("InvalidParameterValue", format!("{what} {text:?}: {e}")))
    };
    let crs = crs_of(get("crs"), "crs")?;
    let bbox_crs = crs_of(get("bbox-crs"), "bbox-crs")?;
    let asked = match get("bbox") {
        Some(text) => parse_bbox(text, &bbox_crs)?,
        None => {
            // The layers' extent in lon/lat.
            let mut all = layers[0].source.info().lonlat_bounds;
            for l in &layers[1..] {
                all = all.union(&l.source.info().lonlat_bounds);
            }
            let lonlat = state
                .registry
                .crs("OGC:CRS84")
                .map_err(|e| problem(ApiError::internal(&e)))?;
            lonlat
                .transform_bbox(&all, &bbox_crs)
                .map_err(|e| bad("InvalidParameterValue", format!("the layers' extent: {e}")))?
        }
    };
    let bbox = if bbox_crs.id == crs.id {
        asked
    } else {
        bbox_crs.transform_bbox(&asked, &crs).map_err(|e| {
            bad(
                "InvalidParameterValue",
                format!("bbox cannot be taken into crs: {e}"),
            )
        })?
    };
    let (width, height) = size(get("width"), get("height"), &bbox, limits)?;
    let format = match get("f") {
        Some(f) => TileFormat::from_extension(f)
            .filter(|t| !t.is_vector() && *t != TileFormat::Mixed)
            .ok_or_else(|| {
                bad(
                    "InvalidParameterValue",
                    format!("f={f:?}: maps are png, jpeg or webp"),
                )
            })?,
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
    let transparent = match get("transparent") {
        None | Some("true") => true,
        Some("false") => false,
        Some(t) => {
            return Err(bad(
                "InvalidParameterValue",
                format!("transparent={t:?}: true or false"),
            ));
        }
    };
    let background = match get("bgcolor") {
        None => Color([255, 255, 255, 255]),
        Some(t) => Color::parse(t).ok_or_else(|| {
            bad(
                "InvalidParameterValue",
                format!("bgcolor={t:?}: 0xRRGGBB or #RRGGBB"),
            )
        })?,
    };
    let crs_uri = super::crs_uri(&crs.id);
    let image = ImageRequest {
        layers: at,
        bbox,
        crs,
        width,
        height,
        format,
        transparent,
        background,
    };
    let bytes = state
        .renderer
        .render(image, Demand::Map)
        .await
        .map_err(|e| problem(e.into()))?;
    let mut response = image_response(format, bytes);
    if let Ok(v) = HeaderValue::from_str(&format!("<{crs_uri}>")) {
        response.headers_mut().insert("Content-Crs", v);
    }
    Ok(response)
}

/// A CRS as a URI or `EPSG:n` in the form the registry parses.
fn crs_name(text: &str) -> String {
    let t = text.trim().trim_start_matches('[').trim_end_matches(']');
    if let Some(code) = t.strip_prefix("http://www.opengis.net/def/crs/EPSG/0/") {
        return format!("EPSG:{code}");
    }
    match t {
        "http://www.opengis.net/def/crs/OGC/1.3/CRS84" | "CRS84" | "CRS:84" => "OGC:CRS84".into(),
        other => other.to_string(),
    }
}

/// `bbox=a,b,c,d` in `crs`'s axis order (latitude first for EPSG:4326),
/// as an x/y box.
fn parse_bbox(text: &str, crs: &Crs) -> Result<BBox, ApiError> {
    let v: Vec<f64> = text
        .split(',')
        .map(|p| p.trim().parse::<f64>())
        .collect::<Result<_, _>>()
        .map_err(|_| {
            bad(
                "InvalidParameterValue",
                format!("bbox={text:?}: four numbers"),
            )
        })?;
    let [a, b, c, d] = v[..] else {
        return Err(bad(
            "InvalidParameterValue",
            format!("bbox={text:?}: four numbers"),
        ));
    };
    let (min_x, min_y, max_x, max_y) = if crs.authority_yx {
        (b, a, d, c)
    } else {
        (a, b, c, d)
    };
    BBox::new(min_x, min_y, max_x, max_y)
        .map_err(|e| bad("InvalidParameterValue", format!("bbox={text:?}: {e}")))
}

/// The image size: both given, one with the other from the bbox's aspect,
/// or neither (`DEFAULT_WIDTH` wide); within the WMS limits.
fn size(
    width: Option<&str>,
    height: Option<&str>,
    bbox: &BBox,
    limits: &crate::config::Limits,
) -> Result<(u32, u32), ApiError> {
    let number = |text: &str, name: &str| {
        text.parse::<u32>().ok().filter(|n| *n > 0).ok_or_else(|| {
            bad(
                "InvalidParameterValue",
                format!("{name}={text:?}: a positive integer"),
            )
        })
    };
    let aspect = bbox.height() / bbox.width();
    let other = |n: u32, ratio: f64| {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // clamped to u32
        let v = (f64::from(n) * ratio)
            .round()
            .clamp(1.0, f64::from(u32::MAX)) as u32;
        v
    };
    let (w, h) = match (width, height) {
        (Some(w), Some(h)) => (number(w, "width")?, number(h, "height")?),
        (Some(w), None) => {
            let w = number(w, "width")?;
            (w, other(w, aspect))
        }
        (None, Some(h)) => {
            let h = number(h, "height")?;
            (other(h, 1.0 / aspect), h)
        }
        (None, None) => (DEFAULT_WIDTH, other(DEFAULT_WIDTH, aspect)),
    };
    if w > limits.wms_max_width
        || h > limits.wms_max_height
        || u64::from(w) * u64::from(h) > limits.wms_max_pixels
    {
        return Err(bad(
            "InvalidParameterValue",
            format!(
                "a {w} x {h} map is beyond the limits ({} x {}, {} pixels)",
                limits.wms_max_width, limits.wms_max_height, limits.wms_max_pixels
            ),
        ));
    }
    Ok((w, h))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crs_uris_and_bboxes() {
        assert_eq!(
            crs_name("http://www.opengis.net/def/crs/EPSG/0/3857"),
            "EPSG:3857"
        );
        assert_eq!(
            crs_name("[http://www.opengis.net/def/crs/OGC/1.3/CRS84]"),
            "OGC:CRS84"
        );
        let lat_first = Crs::parse("EPSG:4326").unwrap();
        let b = parse_bbox("10,20,30,40", &lat_first).unwrap();
        assert_eq!(
            (b.min_x, b.min_y, b.max_x, b.max_y),
            (20.0, 10.0, 40.0, 30.0)
        );
        assert!(parse_bbox("1,2,3", &lat_first).is_err());
    }

    #[test]
    fn sizes_follow_the_bbox_aspect_within_the_limits() {
        let limits = crate::config::Limits::default();
        let bbox = BBox::new(-180.0, -90.0, 180.0, 90.0).unwrap();
        assert_eq!(size(Some("400"), None, &bbox, &limits).unwrap(), (400, 200));
        assert_eq!(size(None, Some("100"), &bbox, &limits).unwrap(), (200, 100));
        assert_eq!(size(None, None, &bbox, &limits).unwrap(), (1024, 512));
        assert!(size(Some("0"), None, &bbox, &limits).is_err());
        assert!(size(Some("100000"), Some("100000"), &bbox, &limits).is_err());
    }
}
