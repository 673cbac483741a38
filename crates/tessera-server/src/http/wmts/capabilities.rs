//! WMTS GetCapabilities, written from the template
//! `templates/wmts_1_0_0.xml`: every layer with its formats, the limits of
//! its extent in each grid, the RESTful template, and each grid used.
//!
//! WMTS gives a layer's link one TileMatrixLimits per TileMatrix of the
//! set (07-057r7, table 8), so a layer whose zooms are fewer than its
//! grid's links a set of its zooms only, named `{grid}:{min}-{max}`
//! ([`set_id`]); tile requests naming it are tiles of the grid.

use axum::http::HeaderMap;
use axum::response::Response;
use serde::Serialize;

use crate::auth::Caller;
use crate::config::ServiceMetadata;
use crate::config::auth::Grant;
use crate::http::error::ApiError;
use crate::http::reply::base_url;
use crate::http::state::Catalog;
use crate::http::templates::{self, Extent};
use crate::model::{Grid, Layer, TileLimits};

#[derive(Debug, Serialize)]
struct Capabilities {
    sections: Sections,
    title: String,
    service: ServiceMetadata,
    base: String,
    /// The caller's query credential and `&` (`key=...&`), or empty: KVP
    /// links carry it.
    cred: String,
    /// The caller's query credential alone, for RESTful links.
    cred_pair: String,
    layers: Vec<WmtsLayer>,
    matrix_sets: Vec<MatrixSet>,
}

#[derive(Debug, Serialize)]
struct WmtsLayer {
    name: String,
    title: String,
    #[serde(rename = "abstract")]
    description: Option<String>,
    keywords: Vec<String>,
    lonlat: Extent,
    /// The layer's extent in the CRS of each matrix set it links, so that
    /// clients (GDAL) need not take a world's ±90° to Web Mercator.
    bboxes: Vec<CrsBox>,
    styles: Vec<crate::http::wms::legend::ListedStyle>,
    formats: Vec<Format>,
    links: Vec<MatrixSetLink>,
    dimensions: Vec<WmtsDimension>,
}

/// An `ows:BoundingBox`: corners in the CRS's own axis order.
#[derive(Debug, Serialize)]
struct CrsBox {
    crs: String,
    lower: String,
    upper: String,
}

/// A layer's dimension as WMTS lists it.
#[derive(Debug, Serialize)]
struct WmtsDimension {
    /// `Time`, `Elevation`, or the dimension's name.
    id: String,
    /// The dimension's name: its query parameter in a tile URL.
    name: String,
    units: &'static str,
    default: String,
    values: Vec<String>,
}

/// The WMTS identifier of dimension `name`: `Time` and `Elevation` as
/// the standard writes them, other names as they are.
pub(super) fn dimension_id(name: &str) -> String {
    match name {
        "time" => "Time".into(),
        "elevation" => "Elevation".into(),
        other => other.into(),
    }
}

#[derive(Debug, Serialize)]
struct Format {
    media_type: &'static str,
    extension: &'static str,
}

#[derive(Debug, Serialize)]
struct MatrixSetLink {
    grid: String,
    limits: Vec<TileLimits>,
}

#[derive(Debug, Serialize)]
struct MatrixSet {
    title: String,
    id: String,
    crs_urn: String,
    well_known_scale_set: Option<String>,
    top_left_corner: String,
    tile_width: u32,
    tile_height: u32,
    matrices: Vec<Matrix>,
}

#[derive(Debug, Serialize)]
struct Matrix {
    id: String,
    scale_denominator: String,
    width: u32,
    height: u32,
}

/// The sections of the capabilities document to write (`Sections` in a
/// KVP GetCapabilities; all by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "one flag per OWS section, each read by name in the template"
)]
pub struct Sections {
    identification: bool,
    provider: bool,
    operations: bool,
    contents: bool,
    /// `All` or no `Sections`: the whole document, `ServiceMetadataURL`
    /// included (the WMTS suite counts it as a section of its own).
    all: bool,
}

impl Sections {
    /// Every section.
    pub const ALL: Sections = Sections {
        identification: true,
        provider: true,
        operations: true,
        contents: true,
        all: true,
    };

    /// Parses the comma-separated `Sections` parameter (OWS 1.1, 7.3.3);
    /// an empty one names no section and is refused.
    pub fn parse(text: &str) -> Result<Sections, ApiError> {
        if text.split(',').all(|n| n.trim().is_empty()) {
            return Err(ApiError::bad_request(
                "MissingParameterValue",
                "Sections is empty: name ServiceIdentification, ServiceProvider, \
                 OperationsMetadata, Contents, Themes or All, or leave it out",
            )
            .at("Sections"));
        }
        let mut s = Sections {
            identification: false,
            provider: false,
            operations: false,
            contents: false,
            all: false,
        };
        for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            // Section names are case-insensitive (OWS 1.1, 7.3.3 as the
            // WMTS test suite reads it).
            match name.to_ascii_lowercase().as_str() {
                "serviceidentification" => s.identification = true,
                "serviceprovider" => s.provider = true,
                "operationsmetadata" => s.operations = true,
                "contents" => s.contents = true,
                // No Themes are offered: asking for them is not an error.
                "themes" => {}
                "all" => s = Sections::ALL,
                _ => {
                    let other = name;
                    return Err(ApiError::bad_request(
                        "InvalidParameterValue",
                        format!(
                            "section {other:?} is not one of ServiceIdentification, ServiceProvider, \
                             OperationsMetadata, Contents, Themes, All"
                        ),
                    )
                    .at("Sections"));
                }
            }
        }
        Ok(s)
    }
}

/// The capabilities document, with `sections`.
pub fn response(
    state: &Catalog,
    headers: &HeaderMap,
    sections: Sections,
    caller: &Caller,
) -> Result<Response, ApiError> {
    // The layers the caller may read tiles of, and no other.
    let layers: Vec<_> = state
        .registry
        .layers()
        .into_iter()
        .filter(|l| caller.may(&l.name, Grant::Tiles).is_ok())
        .collect();
    let cred_pair = caller.link_query();
    // Each (grid, zoom range) linked, in order of first use.
    let mut used: Vec<(&Grid, u8, u8)> = Vec::new();
    let whole = state.config.wmts.link_full_grid;
    for layer in &layers {
        for grid in layer.grids.iter().filter_map(|g| state.registry.grid(g)) {
            for (lo, hi) in linked_ranges(layer, grid, whole) {
                if !used
                    .iter()
                    .any(|(g, l, h)| g.tms.id == grid.tms.id && (*l, *h) == (lo, hi))
                {
                    used.push((grid, lo, hi));
                }
            }
        }
    }
    let doc = Capabilities {
        sections,
        title: state.config.server.title.clone(),
        service: state.config.service.clone(),
        base: base_url(&state.config, headers),
        cred: if cred_pair.is_empty() {
            String::new()
        } else {
            format!("{cred_pair}&")
        },
        cred_pair,
        layers: layers.iter().map(|l| layer(state, l, whole)).collect(),
        matrix_sets: used
            .iter()
            .map(|(grid, lo, hi)| matrix_set(grid, *lo, *hi))
            .collect(),
    };
    templates::xml_response(
        templates::WMTS_1_0_0,
        &doc,
        "application/xml; charset=utf-8",
    )
}

/// The zoom ranges of `grid` a layer links: its own zooms, and with
/// `whole` (`wmts.link_full_grid`) the grid's whole set too where its own
/// are fewer and it is drawn at any zoom (clients that name the grid's
/// set, as tutorials and saved projects do, keep finding it).
fn linked_ranges(layer: &Layer, grid: &Grid, whole: bool) -> Vec<(u8, u8)> {
    let own = (layer.min_zoom, layer.max_zoom_in(grid));
    let full = (0, grid.tms.max_zoom());
    if whole && own != full && layer.drawn_at_any_zoom() {
        vec![full, own]
    } else {
        vec![own]
    }
}

fn layer(state: &Catalog, layer: &Layer, whole: bool) -> WmtsLayer {
    WmtsLayer {
        name: layer.name.clone(),
        title: layer.title.clone(),
        description: layer.description.clone(),
        keywords: layer.keywords.clone(),
        lonlat: Extent::lonlat(&layer.source.info().lonlat_bounds),
        bboxes: bounding_boxes(state, layer),
        styles: crate::http::wms::legend::ListedStyle::of(layer),
        formats: layer
            .formats
            .iter()
            .map(|f| Format {
                media_type: f.format_name(),
                extension: f.extension(),
            })
            .collect(),
        links: layer
            .grids
            .iter()
            .filter_map(|gid| Some((gid, state.registry.grid(gid)?)))
            .flat_map(|(gid, grid)| {
                linked_ranges(layer, grid, whole)
                    .into_iter()
                    .map(move |(lo, hi)| MatrixSetLink {
                        grid: set_id(grid, lo, hi),
                        limits: layer.tile_limits_at(gid, grid, lo..=hi),
                    })
            })
            .collect(),
        dimensions: layer
            .dimensions
            .iter()
            .map(|d| WmtsDimension {
                id: dimension_id(&d.name),
                name: d.name.clone(),
                units: d.kind.units(),
                default: d.default_value().unwrap_or_default(),
                values: d.listed(),
            })
            .collect(),
    }
}

/// The layer's extent in the CRS of each grid it is tiled in (the first
/// grid of a CRS), within the grid's extent.
fn bounding_boxes(state: &Catalog, layer: &Layer) -> Vec<CrsBox> {
    let mut boxes: Vec<CrsBox> = Vec::new();
    for gid in &layer.grids {
        let Some(grid) = state.registry.grid(gid) else {
            continue;
        };
        let Some(extent) = layer
            .extents
            .get(gid)
            .copied()
            .flatten()
            .and_then(|e| e.intersection(&grid.tms.extent))
        else {
            continue;
        };
        let crs = set_crs(grid);
        if boxes.iter().any(|b| b.crs == crs) {
            continue;
        }
        let corner = |x: f64, y: f64| {
            if grid.crs.authority_yx {
                format!("{y} {x}")
            } else {
                format!("{x} {y}")
            }
        };
        boxes.push(CrsBox {
            crs,
            lower: corner(extent.min_x, extent.min_y),
            upper: corner(extent.max_x, extent.max_y),
        });
    }
    boxes
}

/// The CRS a matrix set of `grid` names: the exact one the WMTS standard
/// gives GoogleMapsCompatible (07-057r7, annex E.4), which its test suite
/// compares as text; the grid's own otherwise.
fn set_crs(grid: &Grid) -> String {
    if grid.tms.well_known_scale_set.as_deref() == Some(GOOGLE_MAPS_COMPATIBLE) {
        GOOGLE_MAPS_CRS.to_string()
    } else {
        grid.tms.crs_urn.clone()
    }
}

/// The parameter that puts `coord` outside the TileMatrixSetLimits the
/// capabilities give the layer in `grid` (`TILECOL` first, as the column
/// is checked first), `None` when it lies inside them.
pub fn outside_limits(
    layer: &Layer,
    grid: &Grid,
    coord: tessera_grid::TileCoord,
) -> Option<&'static str> {
    let extent = layer.extents.get(&grid.tms.id).copied().flatten()?;
    match grid.tms.tiles_in_bbox(coord.z(), &extent) {
        None => Some("TILEMATRIX"),
        Some(r) if !(r.min_x..=r.max_x).contains(&coord.x()) => Some("TILECOL"),
        Some(r) if !(r.min_y..=r.max_y).contains(&coord.y()) => Some("TILEROW"),
        Some(_) => None,
    }
}

/// The tiles the layer's extent covers at each of its zooms in `grid` (the
/// whole matrix where the extent is unknown).
/// The well-known scale set of Web Mercator tiles.
const GOOGLE_MAPS_COMPATIBLE: &str = "urn:ogc:def:wkss:OGC:1.0:GoogleMapsCompatible";
/// Its CRS as WMTS 1.0.0's annex E.4 writes it.
const GOOGLE_MAPS_CRS: &str = "urn:ogc:def:crs:EPSG:6.18:3:3857";

/// The identifier of the TileMatrixSet of `grid`'s zooms `lo` to `hi`:
/// the grid's own for all of them, else `{grid}:{lo}-{hi}`.
fn set_id(grid: &Grid, lo: u8, hi: u8) -> String {
    if lo == 0 && hi == grid.tms.max_zoom() {
        grid.tms.id.clone()
    } else {
        format!("{}:{lo}-{hi}", grid.tms.id)
    }
}

/// The grid a TileMatrixSet identifier names: a grid's own identifier, or
/// one [`set_id`] made for some of its zooms (the zooms are checked as
/// for any tile of the layer).
pub fn grid_of_set(id: &str) -> &str {
    match id.rsplit_once(':') {
        Some((grid, range))
            if range
                .split_once('-')
                .is_some_and(|(a, b)| a.parse::<u8>().is_ok() && b.parse::<u8>().is_ok()) =>
        {
            grid
        }
        _ => id,
    }
}

fn matrix_set(grid: &Grid, lo: u8, hi: u8) -> MatrixSet {
    let tms = &grid.tms;
    // TopLeftCorner follows the CRS's axis order (latitude first for EPSG:4326).
    let top_left_corner = if grid.crs.authority_yx {
        format!("{} {}", tms.origin_y, tms.origin_x)
    } else {
        format!("{} {}", tms.origin_x, tms.origin_y)
    };
    MatrixSet {
        title: tms.title.clone(),
        id: set_id(grid, lo, hi),
        crs_urn: set_crs(grid),
        // WMTS 1.0's GoogleCRS84Quad (annex E.3) has a level above
        // WorldCRS84Quad's first: only GoogleMapsCompatible, which
        // WebMercatorQuad matches from level 0, is declared.
        well_known_scale_set: tms
            .well_known_scale_set
            .clone()
            .filter(|w| w == GOOGLE_MAPS_COMPATIBLE),
        top_left_corner,
        tile_width: tms.tile_width,
        tile_height: tms.tile_height,
        // None when the layer's lowest zoom is past the grid's deepest.
        matrices: tms
            .matrices
            .get(usize::from(lo)..=usize::from(hi))
            .unwrap_or_default()
            .iter()
            .map(|m| Matrix {
                id: m.id.clone(),
                scale_denominator: m.scale_denominator.to_string(),
                width: m.matrix_width,
                height: m.matrix_height,
            })
            .collect(),
    }
}
