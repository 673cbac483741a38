//! Tile addresses: the one typed extractor every tile route shares (XYZ,
//! TMS, WMTS RESTful; WMTS KVP builds the same type from its query), and
//! its resolution against the registry into a [`TileRequest`].
//!
//! Resolution checks, in order: the layer, the grid, the style, the
//! format, the coordinate in the grid, and the zoom in the layer's range.
//! Every failure is a [`TileLookupError`]; `error.rs` turns it into the
//! reply of the protocol that asked.

use std::sync::Arc;

use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;
use serde::Deserialize;
use tessera_grid::{GridError, TileFormat};

use crate::dimension::DimensionError;
use crate::http::error::{ApiError, Protocol};
use crate::http::params::Kvp;
use crate::model::{Grid, HIDPI_SUFFIX, Layer};
use crate::registry::Registry;
use crate::suggest::Unknown;
use crate::tile_cache::TileRequest;

/// Which way a tile address counts rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rows {
    /// Row 0 at the top (XYZ, WMTS).
    FromTop,
    /// Row 0 at the bottom (TMS).
    FromBottom,
}

/// How an address names its zoom level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Level {
    /// The zoom number (XYZ, TMS).
    Zoom(String),
    /// A WMTS `TileMatrix` identifier of the grid.
    Matrix(String),
}

/// A tile address as a client wrote it: split into its parts, not yet
/// looked up. Built from the path of `/tiles/{layer}/{grid}/{z}/{x}/{y}.{ext}`,
/// `/tms/1.0.0/...` (same shape) and
/// `/wmts/1.0.0/{layer}/{style}/{TileMatrixSet}/{TileMatrix}/{TileRow}/{TileCol}.{ext}`,
/// or from a WMTS KVP GetTile with [`TileAddress::from_wmts_kvp`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TileAddress {
    /// Layer name.
    pub layer: String,
    /// Grid (TileMatrixSet) identifier.
    pub grid: String,
    /// The style written in the path or as WMTS `STYLE` (`None` for
    /// XYZ/TMS, whose `?style=` is among `params`).
    pub style: Option<String>,
    /// Zoom level or matrix identifier.
    pub level: Level,
    /// Column, as written.
    pub col: String,
    /// Row, as written.
    pub row: String,
    /// The format, when the text names one.
    pub format: Option<TileFormat>,
    /// The format as written (extension or media type), for messages.
    pub format_text: String,
    /// Parameters that may name dimension values (the query's, or a WMTS
    /// KVP request's), names lower case; see [`dimension_param`].
    pub params: Vec<(String, String)>,
    /// A dimension value written in the path (WMTS RESTful, between style
    /// and TileMatrixSet): the value of the layer's dimension.
    pub path_dimension: Option<String>,
}

/// The value a request gives for dimension `name` among `get`'s
/// parameters (names lower case): `time` and `elevation` by their names,
/// any other as `dim_<name>` (WMS's form) or by its name.
pub fn dimension_param<'a>(get: impl Fn(&str) -> Option<&'a str>, name: &str) -> Option<String> {
    match name {
        "time" | "elevation" => get(name),
        other => get(&format!("dim_{other}")).or_else(|| get(other)),
    }
    .map(str::to_string)
}

/// Why a tile address does not name a tile.
#[derive(Debug)]
pub enum TileLookupError {
    /// The layer has no such style.
    UnknownStyle(crate::model::UnknownStyle),
    /// No such layer.
    UnknownLayer(Unknown),
    /// No such grid, or the layer is not tiled in it.
    UnknownGrid(Unknown),
    /// No such TileMatrix in the grid.
    UnknownMatrix {
        /// The identifier asked for, with the grid's identifiers.
        matrix: Unknown,
        /// The grid.
        grid: String,
    },
    /// Format not offered by the layer.
    UnknownFormat(Unknown),
    /// The coordinate is malformed or outside the grid.
    Coord(GridError),
    /// A dimension value the layer does not have, or not written as one.
    Dimension(crate::dimension::DimensionError),
    /// The zoom is outside the layer's zoom range.
    ZoomOutsideLayer {
        /// Requested zoom.
        z: u8,
        /// Layer minimum.
        min: u8,
        /// Layer maximum in this grid.
        max: u8,
    },
}

/// The path parameters of the tile routes (names as in the router).
#[derive(Debug, Deserialize)]
struct RoutePath {
    layer: String,
    grid: Option<String>,
    style: Option<String>,
    dim: Option<String>,
    tms: Option<String>,
    z: String,
    x: Option<String>,
    row: Option<String>,
    file: String,
}

impl<S: Send + Sync> FromRequestParts<S> for TileAddress {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path(p) = Path::<RoutePath>::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::bad_request("InvalidParameterValue", e.body_text()))?;
        let mut address = TileAddress::from_route(p)?;
        address.params = query_params(parts.uri.query());
        Ok(address)
    }
}

/// The parameters of `query`, names lower case (at most the first 32).
pub fn query_params(query: Option<&str>) -> Vec<(String, String)> {
    query.map_or_else(Vec::new, |q| {
        url::form_urlencoded::parse(q.as_bytes())
            .take(32)
            .map(|(k, v)| (k.to_ascii_lowercase(), v.into_owned()))
            .collect()
    })
}

impl TileAddress {
    /// The address of an OGC API tile: `layer`'s tile at `matrix`, `row`,
    /// `col` of tile matrix set `grid`, drawn with `style`, in `format`,
    /// with the query's `params` (dimensions already read from `datetime`
    /// and `subset`). The router's OGC API handler and the short way for
    /// hits both build it here.
    pub fn of_ogcapi(
        layer: String,
        grid: String,
        style: Option<String>,
        (matrix, row, col): (String, String, String),
        format: TileFormat,
        params: Vec<(String, String)>,
    ) -> TileAddress {
        TileAddress {
            layer,
            grid,
            style,
            level: Level::Matrix(matrix),
            col,
            row,
            format: Some(format),
            format_text: format.extension().to_string(),
            params,
            path_dimension: None,
        }
    }

    /// The style the address asks for: its WMTS style, else a `style`
    /// parameter (XYZ, TMS and OGC API `?style=`).
    pub fn style_asked(&self) -> Option<&str> {
        self.style.as_deref().or_else(|| {
            self.params
                .iter()
                .find(|(k, _)| k == "style")
                .map(|(_, v)| v.as_str())
        })
    }

    /// The value the address gives for dimension `name`, if any: a
    /// parameter, else (for the layer's first dimension, `first`) the value
    /// in its path.
    pub fn dimension(&self, name: &str, first: bool) -> Option<String> {
        dimension_param(
            |n| {
                self.params
                    .iter()
                    .find(|(k, _)| k == n)
                    .map(|(_, v)| v.as_str())
            },
            name,
        )
        .or_else(|| self.path_dimension.clone().filter(|_| first))
    }
}

impl TileAddress {
    /// The address of an XYZ (`/tiles/...`) or TMS (`/tms/1.0.0/...`) tile
    /// path, and which way it counts rows, when `path` is one written
    /// without percent-escapes; `None` for anything else (the router then
    /// decodes escapes and names what is wrong).
    pub fn from_tile_path(path: &str) -> Option<(TileAddress, Rows)> {
        let (rest, rows) = if let Some(rest) = path.strip_prefix("/tiles/") {
            (rest, Rows::FromTop)
        } else {
            (path.strip_prefix("/tms/1.0.0/")?, Rows::FromBottom)
        };
        if rest.contains('%') {
            return None;
        }
        let mut parts = rest.split('/');
        let [layer, grid, z, x, file] = [(); 5].map(|()| parts.next().unwrap_or_default());
        if parts.next().is_some() || [layer, grid, z, x, file].iter().any(|p| p.is_empty()) {
            return None;
        }
        let route = RoutePath {
            layer: layer.into(),
            grid: Some(grid.into()),
            style: None,
            dim: None,
            tms: None,
            z: z.into(),
            x: Some(x.into()),
            row: None,
            file: file.into(),
        };
        TileAddress::from_route(route).ok().map(|a| (a, rows))
    }

    fn from_route(p: RoutePath) -> Result<TileAddress, ApiError> {
        // The longest extension a format has (`3.terrarium.png`), else
        // after the last dot (`0.5.png` is a bad row, not a format `5.png`).
        let (last, extension) = match TileFormat::split_extension(&p.file) {
            Some((stem, _)) => (stem, &p.file[stem.len() + 1..]),
            None => p.file.rsplit_once('.').unwrap_or((&p.file, "")),
        };
        let (grid, level, col, row) = match (p.tms, p.row, p.grid, p.x) {
            // WMTS RESTful: .../{TileMatrix}/{TileRow}/{TileCol}.{ext}
            (Some(tms), Some(row), _, _) => (tms, Level::Matrix(p.z), last.to_string(), row),
            // XYZ and TMS: .../{z}/{x}/{y}.{ext}, or {y}@2x.{ext} for the
            // same tile at twice the pixels (the grid's HiDPI twin).
            (_, _, Some(grid), Some(x)) => match last.strip_suffix(HIDPI_SUFFIX) {
                Some(row) => (
                    format!("{grid}{HIDPI_SUFFIX}"),
                    Level::Zoom(p.z),
                    x,
                    row.to_string(),
                ),
                None => (grid, Level::Zoom(p.z), x, last.to_string()),
            },
            _ => {
                return Err(ApiError::not_found(
                    "NotFound",
                    "not a tile address; the index at / lists what is served",
                ));
            }
        };
        Ok(TileAddress {
            layer: p.layer,
            grid,
            style: p.style,
            level,
            col,
            row,
            format: TileFormat::from_extension(extension),
            format_text: extension.to_string(),
            params: Vec::new(),
            path_dimension: p.dim,
        })
    }

    /// The address of a WMTS KVP GetTile (`LAYER`, `STYLE`, `TILEMATRIXSET`,
    /// `TILEMATRIX`, `TILEROW`, `TILECOL`, `FORMAT` as a media type).
    pub fn from_wmts_kvp(kvp: &Kvp) -> Result<TileAddress, ApiError> {
        let layer = kvp.required("LAYER")?;
        // STYLE is mandatory in a GetTile (WMTS 1.0.0, table 25).
        let style = kvp.required("STYLE")?;
        let grid = kvp.required("TILEMATRIXSET")?;
        let matrix = kvp.required("TILEMATRIX")?;
        let row = kvp.required("TILEROW")?;
        let col = kvp.required("TILECOL")?;
        let format_text = kvp.required("FORMAT")?;
        Ok(TileAddress {
            layer: layer.to_string(),
            grid: grid.to_string(),
            style: Some(style.to_string()),
            level: Level::Matrix(matrix.to_string()),
            col: col.to_string(),
            row: row.to_string(),
            format: TileFormat::from_mime(format_text),
            format_text: format_text.to_string(),
            params: kvp.pairs(),
            path_dimension: None,
        })
    }

    /// Looks the address up: a tile of a layer, in a grid and format the
    /// layer offers, at a zoom in its range.
    ///
    /// An unknown layer's hint names only layers `sees` lets the caller
    /// know of.
    pub fn resolve(
        &self,
        registry: &Registry,
        rows: Rows,
        sees: &dyn Fn(&str) -> bool,
    ) -> Result<TileRequest, TileLookupError> {
        self.resolve_zooms(registry, rows, sees, false)
    }

    /// [`TileAddress::resolve`] at any zoom of the grid for a layer
    /// [`Layer::drawn_at_any_zoom`] (a WMTS request naming a grid's whole
    /// TileMatrixSet, which such a layer links); other layers keep theirs.
    pub fn resolve_in_whole_grid(
        &self,
        registry: &Registry,
        rows: Rows,
        sees: &dyn Fn(&str) -> bool,
    ) -> Result<TileRequest, TileLookupError> {
        self.resolve_zooms(registry, rows, sees, true)
    }

    fn resolve_zooms(
        &self,
        registry: &Registry,
        rows: Rows,
        sees: &dyn Fn(&str) -> bool,
        whole_grid: bool,
    ) -> Result<TileRequest, TileLookupError> {
        let zoom = match (&self.level, registry.grid(&self.grid)) {
            (Level::Zoom(z), _) => z.clone(),
            // TileMatrix identifiers are looked up in the grid; an unknown
            // grid is reported once the layer is known to exist.
            (Level::Matrix(id), Some(grid)) => grid
                .tms
                .matrices
                .iter()
                .position(|m| m.id == *id)
                .ok_or_else(|| TileLookupError::UnknownMatrix {
                    matrix: Unknown::among(
                        id,
                        "TileMatrix identifiers",
                        grid.tms.matrices.iter().map(|m| m.id.as_str()),
                    ),
                    grid: self.grid.clone(),
                })?
                .to_string(),
            (Level::Matrix(_), None) => String::new(),
        };
        let (layer, grid) = resolve_layer_grid(registry, &self.layer, &self.grid, sees)?;
        let layer = layer
            .styled(self.style_asked())
            .map_err(TileLookupError::UnknownStyle)?;
        if let Some(value) = &self.path_dimension
            && layer.dimensions.is_empty()
        {
            // A value in the path of a layer that has no dimension.
            return Err(TileLookupError::Dimension(DimensionError::Unknown {
                name: "dimension".into(),
                value: value.chars().take(64).collect(),
            }));
        }
        let layer = layer
            .at(|name| {
                let first = layer.dimensions.first().is_some_and(|d| d.name == name);
                self.dimension(name, first)
            })
            .map_err(TileLookupError::Dimension)?;
        let format = self
            .format
            .filter(|f| layer.formats.contains(f))
            .ok_or_else(|| {
                // Listed as the request wrote it: media types for WMTS
                // `FORMAT`, extensions in paths.
                let names = layer.formats.iter().map(|f| {
                    if self.format_text.contains('/') {
                        f.format_name()
                    } else {
                        f.extension()
                    }
                });
                TileLookupError::UnknownFormat(Unknown::among(&self.format_text, "formats", names))
            })?;
        // A TMS row is in range exactly when the XYZ row is, so the address
        // is validated as given and then flipped.
        let parsed = grid
            .tms
            .parse_tile(&zoom, &self.col, &self.row)
            .map_err(TileLookupError::Coord)?;
        let coord = match grid.tms.flip_row(parsed.z(), u64::from(parsed.y())) {
            Some(flipped) if rows == Rows::FromBottom => grid
                .tms
                .tile(u32::from(parsed.z()), u64::from(parsed.x()), flipped)
                .map_err(TileLookupError::Coord)?,
            _ => parsed,
        };
        let max = layer.max_zoom_in(&grid);
        let any_zoom = whole_grid && layer.drawn_at_any_zoom();
        if !any_zoom && (coord.z() < layer.min_zoom || coord.z() > max) {
            return Err(TileLookupError::ZoomOutsideLayer {
                z: coord.z(),
                min: layer.min_zoom,
                max,
            });
        }
        Ok(TileRequest {
            layer,
            grid,
            coord,
            format,
        })
    }
}

/// Looks a layer and grid up by name; the grid must be one the layer is
/// tiled in, or the HiDPI twin (`{grid}@2x`) of one. An unknown layer's
/// hint names only layers `sees` lets the caller know of.
pub fn resolve_layer_grid(
    registry: &Registry,
    layer: &str,
    grid: &str,
    sees: &dyn Fn(&str) -> bool,
) -> Result<(Arc<Layer>, Arc<Grid>), TileLookupError> {
    let layer = registry
        .find_layer(layer, sees)
        .map_err(TileLookupError::UnknownLayer)?;
    let base = grid.strip_suffix(HIDPI_SUFFIX).unwrap_or(grid);
    let unknown = || {
        TileLookupError::UnknownGrid(Unknown::among(
            grid,
            "grids",
            layer.grids.iter().map(String::as_str),
        ))
    };
    if !layer.grids.iter().any(|g| g == base) {
        return Err(unknown());
    }
    let grid = registry.grid(grid).ok_or_else(unknown)?;
    Ok((layer, grid.clone()))
}

/// The replies to a tile address that names no tile.
impl ApiError {
    /// The reply to a tile address that names no tile: for tile URLs a
    /// plain 404 (400 for a malformed number), for WMTS an OWS exception
    /// with the parameter at fault.
    pub fn from_lookup(e: TileLookupError, protocol: Protocol) -> ApiError {
        match protocol {
            Protocol::Wmts => wmts_lookup_error(e).speaking(Protocol::Wmts),
            _ => plain_lookup_error(e).speaking(protocol),
        }
    }
}

fn plain_lookup_error(e: TileLookupError) -> ApiError {
    match e {
        TileLookupError::UnknownLayer(name) => {
            ApiError::not_found("LayerNotDefined", format!("unknown layer {name}"))
        }
        TileLookupError::UnknownGrid(name) => ApiError::not_found(
            "InvalidParameterValue",
            format!(
                "grid {:?} is not offered for this layer{}",
                name.asked,
                name.hint()
            ),
        ),
        TileLookupError::UnknownStyle(unknown) => {
            ApiError::not_found("StyleNotDefined", unknown.to_string())
        }
        TileLookupError::UnknownMatrix { matrix, grid } => ApiError::not_found(
            "InvalidParameterValue",
            format!("unknown TileMatrix {matrix} in {grid:?}"),
        ),
        TileLookupError::UnknownFormat(ext) => ApiError::not_found(
            "InvalidFormat",
            format!(
                "format {:?} is not offered for this layer{}",
                ext.asked,
                ext.hint()
            ),
        ),
        TileLookupError::Coord(e @ GridError::NotAnInteger { .. }) => {
            ApiError::bad_request("InvalidParameterValue", e.to_string())
        }
        TileLookupError::Coord(e) => ApiError::not_found("TileOutOfRange", e.to_string()),
        TileLookupError::Dimension(e) => ApiError::from_dimension(&e),
        TileLookupError::ZoomOutsideLayer { z, min, max } => ApiError::not_found(
            "TileOutOfRange",
            format!("zoom {z} is outside this layer's zoom levels, {min} to {max}"),
        ),
    }
}

fn wmts_lookup_error(e: TileLookupError) -> ApiError {
    let invalid =
        |message: String, at: &str| ApiError::bad_request("InvalidParameterValue", message).at(at);
    match e {
        // WMTS 1.0.0 has no StyleNotDefined: a bad STYLE is an invalid value.
        TileLookupError::UnknownStyle(unknown) => invalid(unknown.to_string(), "STYLE"),
        TileLookupError::UnknownMatrix { matrix, grid } => invalid(
            format!("unknown TileMatrix {matrix} in {grid:?}"),
            "TILEMATRIX",
        ),
        TileLookupError::UnknownLayer(n) => invalid(format!("unknown layer {n}"), "LAYER"),
        TileLookupError::UnknownGrid(n) => invalid(
            format!(
                "TileMatrixSet {:?} is not offered for this layer{}",
                n.asked,
                n.hint()
            ),
            "TILEMATRIXSET",
        ),
        TileLookupError::UnknownFormat(f) => invalid(
            format!(
                "format {:?} is not offered for this layer{}",
                f.asked,
                f.hint()
            ),
            "FORMAT",
        ),
        TileLookupError::Coord(e @ GridError::NotAnInteger { axis, .. }) => invalid(
            e.to_string(),
            if axis == "x" { "TILECOL" } else { "TILEROW" },
        ),
        TileLookupError::Coord(GridError::TileOutOfRange {
            x,
            y,
            width,
            height,
            ..
        }) => ApiError::bad_request(
            "TileOutOfRange",
            format!(
                "TileRow {y} / TileCol {x} is outside the matrix ({width} columns, {height} rows)"
            ),
        )
        .at(if x >= u64::from(width) {
            "TILECOL"
        } else {
            "TILEROW"
        }),
        TileLookupError::Coord(e) => {
            ApiError::bad_request("TileOutOfRange", e.to_string()).at("TILEMATRIX")
        }
        TileLookupError::Dimension(e) => ApiError::from_dimension(&e),
        TileLookupError::ZoomOutsideLayer { z, min, max } => ApiError::bad_request(
            "TileOutOfRange",
            format!("TileMatrix {z} is outside this layer's zoom levels, {min} to {max}"),
        )
        .at("TILEMATRIX"),
    }
}
