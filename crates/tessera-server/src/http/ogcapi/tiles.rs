//! A layer's tilesets (`/map/tiles` for images, `/tiles` for vector
//! tiles), each tileset's metadata and its tiles. A tile is looked up as an
//! XYZ or WMTS tile is ([`TileAddress`]) and served by the same cached path,
//! so it is the same tile, under the same key, with the same ETag.

use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, header};
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Value, json};
use tessera_grid::TileFormat;

use super::documents::{collection_named, dataset_grid, styled};
use super::subset::dimension_params;
use super::tms::registered_uri;
use super::{Form, REL_TILING_SCHEME, answer, crs_uri, link, problem, self_links, vary_on_accept};
use crate::auth::Caller;
use crate::http::error::{ApiError, Protocol};
use crate::http::reply::base_url;
use crate::http::state::{Catalog, Maps, Tiles};
use crate::http::tiles::address::{Rows, TileAddress, query_params};
use crate::http::tiles::serve_tile;
use crate::model::{Grid, HIDPI_SUFFIX, Layer};

/// Which tiles a tileset holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Images (`/map/tiles`).
    Map,
    /// Mapbox Vector Tiles (`/tiles`).
    Vector,
}

impl Kind {
    fn formats(self, layer: &Layer) -> Vec<TileFormat> {
        layer
            .formats
            .iter()
            .copied()
            .filter(|f| match self {
                Kind::Vector => f.is_vector(),
                // Elevation tiles are data, not maps: tile URLs only.
                Kind::Map => f.is_picture(),
            })
            .collect()
    }

    fn path(self) -> &'static str {
        match self {
            Kind::Map => "map/tiles",
            Kind::Vector => "tiles",
        }
    }

    fn data_type(self) -> &'static str {
        match self {
            Kind::Map => "map",
            Kind::Vector => "vector",
        }
    }
}

/// Which tiles a collection route serves, as a type: the three tile
/// handlers below are written once for both kinds.
pub trait Tiled {
    /// The kind.
    const KIND: Kind;
}

/// Images: `/collections/{collection}[/styles/{style}]/map/tiles...`.
#[derive(Debug)]
pub struct MapTiles;

impl Tiled for MapTiles {
    const KIND: Kind = Kind::Map;
}

/// Mapbox Vector Tiles: `/collections/{collection}/tiles...`.
#[derive(Debug)]
pub struct VectorTiles;

impl Tiled for VectorTiles {
    const KIND: Kind = Kind::Vector;
}

/// The captures of a collection's tileset paths (a style only on styled
/// map routes, a tile matrix set on a tileset's).
#[derive(Debug, Deserialize)]
pub struct SetPath {
    collection: String,
    style: Option<String>,
    tms: Option<String>,
}

/// The captures of a collection's tile paths.
#[derive(Debug, Deserialize)]
pub struct TilePath {
    collection: String,
    style: Option<String>,
    tms: String,
    matrix: String,
    row: String,
    col: String,
}

/// `GET /ogcapi/collections/{collection}[/styles/{style}]/map/tiles` and
/// `GET /ogcapi/collections/{collection}/tiles`: the collection's tilesets.
pub async fn collection_tilesets<T: Tiled>(
    State(state): State<Catalog>,
    caller: Caller,
    Path(p): Path<SetPath>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    tilesets(
        &state,
        &p.collection,
        p.style.as_deref(),
        query.as_deref(),
        &headers,
        T::KIND,
        &caller,
    )
}

/// `GET /ogcapi/collections/{collection}[/styles/{style}]/map/tiles/{tms}`
/// and `GET /ogcapi/collections/{collection}/tiles/{tms}`: one tileset.
pub async fn collection_tileset<T: Tiled>(
    State(state): State<Catalog>,
    caller: Caller,
    Path(p): Path<SetPath>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    tileset(
        &state,
        &p.collection,
        p.style.as_deref(),
        p.tms.as_deref().unwrap_or_default(),
        query.as_deref(),
        &headers,
        T::KIND,
        &caller,
    )
}

/// `GET .../map/tiles/{tms}/{matrix}/{row}/{col}` (styled or not) and
/// `GET .../tiles/{tms}/{matrix}/{row}/{col}`: one tile (a map tile drawn
/// uncached when its size or background is its own).
pub async fn collection_tile<T: Tiled>(
    State(state): State<Tiles>,
    State(maps): State<Maps>,
    caller: Caller,
    Path(p): Path<TilePath>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    tile(
        &state,
        p.style,
        (p.collection, p.tms, p.matrix, p.row, p.col),
        query.as_deref(),
        &headers,
        T::KIND,
        &caller,
        (T::KIND == Kind::Map).then_some(&maps),
    )
    .await
}

/// The path segments that name `style` under a collection (`styles/{style}/`),
/// empty for none.
pub(super) fn style_segment(style: Option<&str>) -> String {
    style.map_or_else(String::new, |s| format!("styles/{s}/"))
}

/// The layer named, when it has tiles of `kind`.
fn layer_of(
    state: &Catalog,
    name: &str,
    kind: Kind,
    caller: &Caller,
) -> Result<std::sync::Arc<Layer>, ApiError> {
    let layer = collection_named(&state.registry, name, caller)?;
    if kind.formats(&layer).is_empty() {
        return Err(problem(ApiError::not_found(
            "NotFound",
            format!("collection {name:?} has no {} tiles", kind.data_type()),
        )));
    }
    Ok(layer)
}

fn f_of(query: Option<&str>) -> Option<String> {
    query_params(query)
        .into_iter()
        .find(|(k, _)| k == "f")
        .map(|(_, v)| v)
}

fn tilesets(
    state: &Catalog,
    name: &str,
    style: Option<&str>,
    query: Option<&str>,
    headers: &HeaderMap,
    kind: Kind,
    caller: &Caller,
) -> Result<Response, ApiError> {
    let form = Form::of(f_of(query).as_deref(), headers)?;
    let layer = styled(&layer_of(state, name, kind, caller)?, style)?;
    let base = format!("{}/ogcapi", base_url(&state.config, headers));
    let here = format!(
        "{base}/collections/{name}/{}{}",
        style_segment(style),
        kind.path()
    );
    let sets: Vec<Value> = grids_of(state, &layer)
        .iter()
        .map(|g| {
            list_entry(
                (&base, &here),
                g,
                (
                    &format!("{} in {}", layer.title, g.tms.id),
                    kind.data_type(),
                ),
                kind.formats(&layer),
                limits_of(&layer, g),
            )
        })
        .collect();
    let doc = json!({
        "title": format!("{} tilesets of {}", kind.data_type(), layer.title),
        "links": self_links(&here),
        "tilesets": sets,
    });
    Ok(answer(&doc, form, "application/json"))
}

/// The grids of the dataset tilesets, sorted.
fn dataset_grids(state: &Catalog) -> Vec<&Grid> {
    let mut ids: Vec<String> = state
        .registry
        .layers()
        .iter()
        .filter(|l| l.formats.iter().any(|f| f.is_picture()))
        .flat_map(|l| l.grids.clone())
        .filter(|g| !g.ends_with(HIDPI_SUFFIX))
        .collect();
    ids.sort();
    ids.dedup();
    ids.iter()
        .filter_map(|g| state.registry.grid(g).map(AsRef::as_ref))
        .collect()
}

/// `GET /ogcapi/map/tiles`: a tileset per grid the layers are tiled in,
/// of the layers composited (`collections=` chooses them).
pub async fn dataset_tilesets(
    State(state): State<Catalog>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let form = Form::of(f_of(query.as_deref()).as_deref(), &headers)?;
    let base = format!("{}/ogcapi", base_url(&state.config, &headers));
    let here = format!("{base}/map/tiles");
    let sets: Vec<Value> = dataset_grids(&state)
        .iter()
        .map(|g| {
            list_entry(
                (&base, &here),
                g,
                (&format!("the layers in {}", g.tms.id), "map"),
                DATASET_FORMATS.to_vec(),
                whole_grid_limits(g),
            )
        })
        .collect();
    let doc = json!({
        "title": "map tilesets of the layers composited",
        "links": self_links(&here),
        "tilesets": sets,
    });
    Ok(answer(&doc, form, "application/json"))
}

/// `GET /ogcapi/map/tiles/{tms}`.
pub async fn dataset_tileset(
    State(state): State<Catalog>,
    Path(tms): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let form = Form::of(f_of(query.as_deref()).as_deref(), &headers)?;
    let grid = dataset_grid(&state.registry, &tms).ok_or_else(|| {
        problem(ApiError::not_found(
            "NotFound",
            format!("no dataset tileset in {tms:?}; /ogcapi/map/tiles lists them"),
        ))
    })?;
    let base = format!("{}/ogcapi", base_url(&state.config, &headers));
    let here = format!("{base}/map/tiles/{tms}");
    let limits = whole_grid_limits(grid);
    let mut links = vec![
        link(
            format!("{here}?f=json"),
            "self",
            "application/json",
            "this tileset",
        ),
        link(
            format!("{base}/tileMatrixSets/{tms}"),
            REL_TILING_SCHEME,
            "application/json",
            &tms,
        ),
    ];
    links.extend(item_links(&here, DATASET_FORMATS.to_vec()));
    let mut doc = json!({
        "title": format!("the layers in {tms}"),
        "dataType": "map",
        "crs": crs_uri(&grid.tms.crs),
        "tileMatrixSetLimits": limits,
        "links": links,
    });
    if let Some(uri) = registered_uri(&grid.tms) {
        doc["tileMatrixSetURI"] = json!(uri);
    }
    Ok(answer(&doc, form, "application/json"))
}

/// The layer's grids (not their HiDPI twins), in its order.
fn grids_of<'a>(state: &'a Catalog, layer: &Layer) -> Vec<&'a Grid> {
    layer
        .grids
        .iter()
        .filter(|g| !g.ends_with(HIDPI_SUFFIX))
        .filter_map(|g| state.registry.grid(g).map(AsRef::as_ref))
        .collect()
}

/// An entry of a tileset list (under `here`, the list's URL; `base`, the
/// API's): the list's required members and, beside them, what the OGC
/// suite reads from each entry: the set's id, its `limits` (where it has
/// any) and its tiles' `item` links in `formats`.
fn list_entry(
    (base, here): (&str, &str),
    grid: &Grid,
    (title, data_type): (&str, &str),
    formats: Vec<TileFormat>,
    limits: Vec<Value>,
) -> Value {
    let set = format!("{here}/{}", grid.tms.id);
    let mut links = vec![
        link(set.clone(), "self", "application/json", "the tileset"),
        link(
            format!("{base}/tileMatrixSets/{}", grid.tms.id),
            REL_TILING_SCHEME,
            "application/json",
            &grid.tms.id,
        ),
    ];
    links.extend(item_links(&set, formats));
    let mut entry = json!({
        "title": title,
        "dataType": data_type,
        "crs": crs_uri(&grid.tms.crs),
        "tileMatrixSetId": grid.tms.id,
        "links": links,
    });
    if !limits.is_empty() {
        entry["tileMatrixSetLimits"] = Value::Array(limits);
    }
    if let Some(uri) = registered_uri(&grid.tms) {
        entry["tileMatrixSetURI"] = json!(uri);
    }
    entry
}

/// The formats of the dataset map tiles.
const DATASET_FORMATS: [TileFormat; 2] = [TileFormat::Png, TileFormat::Jpeg];

/// Every tile of every matrix of `grid` (the dataset tilesets' limits).
fn whole_grid_limits(grid: &Grid) -> Vec<Value> {
    grid.tms
        .matrices
        .iter()
        .map(|m| {
            json!({
                "tileMatrix": m.id,
                "minTileRow": 0,
                "maxTileRow": m.matrix_height - 1,
                "minTileCol": 0,
                "maxTileCol": m.matrix_width - 1,
            })
        })
        .collect()
}

/// A tileset's `tileMatrixSetLimits`: the tiles `layer` has in each
/// matrix of `grid`.
fn limits_of(layer: &Layer, grid: &Grid) -> Vec<Value> {
    layer
        .tile_limits(&grid.tms.id, grid)
        .into_iter()
        .map(|l| {
            json!({
                "tileMatrix": l.matrix,
                "minTileRow": l.min_row,
                "maxTileRow": l.max_row,
                "minTileCol": l.min_col,
                "maxTileCol": l.max_col,
            })
        })
        .collect()
}

/// The templated `item` links to the tiles of the tileset at `set`, one
/// per format.
fn item_links(set: &str, formats: Vec<TileFormat>) -> Vec<Value> {
    formats
        .into_iter()
        .map(|format| {
            let mut item = link(
                format!(
                    "{set}/{{tileMatrix}}/{{tileRow}}/{{tileCol}}?f={}",
                    format.extension()
                ),
                "item",
                format.content_type(),
                &format!("{} tiles", format.extension()),
            );
            item["templated"] = json!(true);
            item
        })
        .collect()
}

fn tileset(
    state: &Catalog,
    name: &str,
    style: Option<&str>,
    tms: &str,
    query: Option<&str>,
    headers: &HeaderMap,
    kind: Kind,
    caller: &Caller,
) -> Result<Response, ApiError> {
    let form = Form::of(f_of(query).as_deref(), headers)?;
    let layer = styled(&layer_of(state, name, kind, caller)?, style)?;
    let Some(grid) = grids_of(state, &layer)
        .into_iter()
        .find(|g| g.tms.id == tms)
    else {
        return Err(problem(ApiError::not_found(
            "NotFound",
            format!(
                "collection {name:?} has no tileset in {tms:?}; its tilesets are listed at /ogcapi/collections/{name}/{}",
                kind.path()
            ),
        )));
    };
    let base = format!("{}/ogcapi", base_url(&state.config, headers));
    let here = format!(
        "{base}/collections/{name}/{}{}/{tms}",
        style_segment(style),
        kind.path()
    );
    let limits = limits_of(&layer, grid);
    let mut links = vec![
        link(
            format!("{here}?f=json"),
            "self",
            "application/json",
            "this tileset",
        ),
        link(
            format!("{base}/tileMatrixSets/{tms}"),
            REL_TILING_SCHEME,
            "application/json",
            tms,
        ),
        link(
            format!("{base}/collections/{name}"),
            "http://www.opengis.net/def/rel/ogc/1.0/geodata",
            "application/json",
            &layer.title,
        ),
    ];
    links.extend(item_links(&here, kind.formats(&layer)));
    let mut doc = json!({
        "title": format!("{} in {tms}", layer.title),
        "dataType": kind.data_type(),
        "crs": crs_uri(&grid.tms.crs),
        "tileMatrixSetLimits": limits,
        "links": links,
    });
    // The layer's extent in the tileset's CRS and axis order (readers such
    // as GDAL take it in the tileset's CRS whatever its `crs` says).
    if let Some(Some(e)) = layer.extents.get(tms) {
        let point = |x: f64, y: f64| {
            if grid.crs.authority_yx {
                [y, x]
            } else {
                [x, y]
            }
        };
        doc["boundingBox"] = json!({
            "lowerLeft": point(e.min_x, e.min_y),
            "upperRight": point(e.max_x, e.max_y),
            "crs": crs_uri(&grid.tms.crs),
        });
    }
    if let Some(uri) = registered_uri(&grid.tms) {
        doc["tileMatrixSetURI"] = json!(uri);
    }
    if let Some(a) = &layer.attribution {
        doc["attribution"] = json!(a);
    }
    Ok(answer(&doc, form, "application/json"))
}

async fn tile(
    state: &Tiles,
    style: Option<String>,
    (collection, tms, matrix, row, col): (String, String, String, String, String),
    query: Option<&str>,
    headers: &HeaderMap,
    kind: Kind,
    caller: &Caller,
    maps: Option<&Maps>,
) -> Result<Response, ApiError> {
    let layer = collection_named(&state.registry, &collection, caller)?;
    let offered = kind.formats(&layer);
    let mut params = query_params(query);
    let format = match params
        .iter()
        .find(|(k, _)| k == "f")
        .map(|(_, v)| v.clone())
    {
        Some(f) => super::format_param(&f)
            .filter(|t| offered.contains(t))
            .ok_or_else(|| {
                problem(ApiError::bad_request(
                    "InvalidParameterValue",
                    format!(
                        "f={f:?} is not a tile format of this tileset; it offers {}",
                        offered
                            .iter()
                            .map(|t| t.extension())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ))
            })?,
        None => accepted(headers, &offered).ok_or_else(|| {
            let mut e = ApiError::new(
                axum::http::StatusCode::NOT_ACCEPTABLE,
                "NotAcceptable",
                format!(
                    "collection {collection:?} has no {} tiles in a type Accept names",
                    kind.data_type()
                ),
            );
            e.protocol = Protocol::Problem;
            e
        })?,
    };
    // `datetime` is OGC API's `time`; `subset=name(value)` any other.
    dimension_params(&mut params)
        .map_err(|m| problem(ApiError::bad_request("InvalidParameterValue", m)))?;
    let drawn_style = style.clone();
    let address =
        TileAddress::of_ogcapi(collection, tms, style, (matrix, row, col), format, params);
    let tile = address
        .resolve(&state.registry, Rows::FromTop, &|n| caller.sees(n))
        .map_err(|e| ApiError::from_lookup(e, Protocol::Problem))?;
    // A size, scale or background of its own: the tile's area drawn
    // uncached, not the cached tile.
    if let Some(maps) = maps {
        let plain = styled(&layer, drawn_style.as_deref())?;
        let drawn = super::maps::drawn_collection_tile(
            maps,
            plain,
            (&tile.grid, tile.coord),
            query,
            headers,
            caller,
        );
        if let Some(answer) = drawn.await {
            return answer;
        }
    }
    let mut response = serve_tile(&state.cache, tile, headers, caller)
        .await
        .map_err(problem)?;
    vary_on_accept(&mut response);
    Ok(response)
}

/// The address of an OGC API map tile whose format `f=` names, or an
/// `Accept` of one image type, written without percent-escapes (the short
/// way for hits, [`crate::http::fast`]); `None` for anything else (the
/// router answers it, and negotiates a longer `Accept`).
pub fn fast_address(path: &str, query: Option<&str>, accept: Option<&str>) -> Option<TileAddress> {
    let rest = path.strip_prefix("/ogcapi/collections/")?;
    if rest.contains('%') {
        return None;
    }
    let mut parts = rest.split('/');
    let [layer, map, tiles, tms, matrix, row, col] =
        [(); 7].map(|()| parts.next().unwrap_or_default());
    if parts.next().is_some()
        || map != "map"
        || tiles != "tiles"
        || [layer, tms, matrix, row, col].iter().any(|p| p.is_empty())
    {
        return None;
    }
    let mut params = query_params(query);
    // A tile drawn at another size or on another background is no hit.
    if super::maps::draws_otherwise(&params) {
        return None;
    }
    let format = match params.iter().find(|(k, _)| k == "f") {
        Some((_, f)) => super::format_param(f)?,
        None => {
            // One type, as the router's negotiation would pick it.
            let accept = accept?.split(';').next()?.trim();
            match accept {
                "image/png" => TileFormat::Png,
                "image/jpeg" => TileFormat::Jpeg,
                "image/webp" => TileFormat::Webp,
                _ => return None,
            }
        }
    };
    if format.is_vector() {
        return None;
    }
    dimension_params(&mut params).ok()?;
    Some(TileAddress::of_ogcapi(
        layer.to_string(),
        tms.to_string(),
        None,
        (matrix.to_string(), row.to_string(), col.to_string()),
        format,
        params,
    ))
}

/// The first of `offered` that `Accept` takes (the first offered when it
/// takes anything, or is absent).
fn accepted(headers: &HeaderMap, offered: &[TileFormat]) -> Option<TileFormat> {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|a| a.to_str().ok())
        .unwrap_or("*/*");
    let types: Vec<&str> = accept
        .split(',')
        .map(|t| t.split(';').next().unwrap_or_default().trim())
        .collect();
    offered
        .iter()
        .copied()
        .find(|f| types.contains(&f.content_type()))
        .or_else(|| {
            types
                .iter()
                .any(|t| *t == "*/*" || *t == "image/*" && offered.iter().any(|f| !f.is_vector()))
                .then(|| offered.first().copied())
                .flatten()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datetime_and_subsets_become_dimension_parameters() {
        let mut p = vec![
            ("datetime".to_string(), "2024-01-01".to_string()),
            (
                "subset".to_string(),
                "elevation(500),scenario(\"low\")".to_string(),
            ),
        ];
        dimension_params(&mut p).unwrap();
        assert!(p.contains(&("time".into(), "2024-01-01".into())));
        assert!(p.contains(&("elevation".into(), "500".into())));
        assert!(p.contains(&("scenario".into(), "low".into())));
    }

    #[test]
    fn accept_chooses_among_the_offered_types() {
        let offered = [TileFormat::Png, TileFormat::Jpeg];
        let mut h = HeaderMap::new();
        assert_eq!(accepted(&h, &offered), Some(TileFormat::Png));
        h.insert(header::ACCEPT, "image/jpeg".parse().unwrap());
        assert_eq!(accepted(&h, &offered), Some(TileFormat::Jpeg));
        h.insert(header::ACCEPT, "application/json".parse().unwrap());
        assert_eq!(accepted(&h, &offered), None);
        h.insert(header::ACCEPT, "image/*".parse().unwrap());
        assert_eq!(accepted(&h, &offered), Some(TileFormat::Png));
    }
}
