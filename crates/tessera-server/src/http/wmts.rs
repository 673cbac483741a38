//! WMTS 1.0.0: GetCapabilities and GetTile, in KVP and RESTful encodings.

use std::fmt::Write as _;

use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use tessera_grid::GridError;
use tessera_grid::TileFormat;

use super::error::{ApiError, Protocol};
use super::params::Kvp;
use super::xml::escape;
use super::{AppState, TileLookupError, base_url, resolve_tile, serve_tile};
use crate::registry::Grid;

/// `GET /wmts?SERVICE=WMTS&REQUEST=...`.
pub async fn kvp(
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let err = |e: ApiError| e.speaking(Protocol::Wmts);
    let kvp = Kvp::parse(
        query.as_deref().unwrap_or(""),
        state.config.limits.max_query_bytes,
    )
    .map_err(|e| err(e.into()))?;
    let request = kvp.service_request("WMTS").map_err(err)?;
    match request.to_ascii_lowercase().as_str() {
        "getcapabilities" => Ok(capabilities(&state, &headers)),
        "gettile" => {
            let required = |name: &'static str| {
                kvp.get(name).ok_or_else(|| {
                    err(ApiError::bad_request(
                        "MissingParameterValue",
                        format!("{name} is required"),
                    )
                    .at(name))
                })
            };
            let version = kvp.get("version").unwrap_or("1.0.0");
            if version != "1.0.0" {
                return Err(err(ApiError::bad_request(
                    "VersionNegotiationFailed",
                    format!("VERSION {version:?} is not supported; use 1.0.0"),
                )
                .at("VERSION")));
            }
            let layer = required("LAYER")?;
            let style = kvp.get("style").unwrap_or("default");
            let tms = required("TILEMATRIXSET")?;
            let matrix = required("TILEMATRIX")?;
            let row = required("TILEROW")?;
            let col = required("TILECOL")?;
            let format_text = required("FORMAT")?;
            get_tile(
                &state,
                &headers,
                layer,
                style,
                tms,
                matrix,
                row,
                col,
                TileFormat::from_mime(format_text),
                format_text,
            )
            .await
        }
        other => Err(err(ApiError::bad_request(
            "OperationNotSupported",
            format!("REQUEST {other:?} is not supported; use GetCapabilities or GetTile"),
        )
        .at("REQUEST"))),
    }
}

/// `GET /wmts/1.0.0/WMTSCapabilities.xml`.
pub async fn capabilities_rest(State(state): State<AppState>, headers: HeaderMap) -> Response {
    capabilities(&state, &headers)
}

/// `GET /wmts/1.0.0/{layer}/{style}/{TileMatrixSet}/{TileMatrix}/{TileRow}/{TileCol}.{ext}`.
pub async fn rest_tile(
    State(state): State<AppState>,
    Path((layer, style, tms, matrix, row, file)): Path<(
        String,
        String,
        String,
        String,
        String,
        String,
    )>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (col, ext) = file.rsplit_once('.').unwrap_or((&file, ""));
    get_tile(
        &state,
        &headers,
        &layer,
        &style,
        &tms,
        &matrix,
        &row,
        col,
        TileFormat::from_extension(ext),
        ext,
    )
    .await
}

#[allow(clippy::too_many_arguments)]
async fn get_tile(
    state: &AppState,
    headers: &HeaderMap,
    layer: &str,
    style: &str,
    tms: &str,
    matrix: &str,
    row: &str,
    col: &str,
    format: Option<TileFormat>,
    format_text: &str,
) -> Result<Response, ApiError> {
    let err = |e: ApiError| e.speaking(Protocol::Wmts);
    if !(style.is_empty() || style.eq_ignore_ascii_case("default")) {
        return Err(err(ApiError::bad_request(
            "InvalidParameterValue",
            format!("unknown style {style:?}; use \"default\""),
        )
        .at("STYLE")));
    }
    // TileMatrix identifiers are the zoom numbers.
    let z = match state.registry.grid(tms) {
        Some(grid) => grid
            .tms
            .matrices
            .iter()
            .position(|m| m.id == matrix)
            .ok_or_else(|| {
                err(ApiError::bad_request(
                    "InvalidParameterValue",
                    format!("unknown TileMatrix {matrix:?} in {tms:?}"),
                )
                .at("TILEMATRIX"))
            })?
            .to_string(),
        None => String::new(),
    };
    let tile = resolve_tile(&state.registry, layer, tms, (&z, col, row), false, format, format_text).map_err(|e| {
        err(match e {
            TileLookupError::UnknownLayer(n) => ApiError::bad_request("InvalidParameterValue", format!("unknown layer {n:?}")).at("LAYER"),
            TileLookupError::UnknownGrid(n) => {
                ApiError::bad_request("InvalidParameterValue", format!("TileMatrixSet {n:?} is not offered for this layer")).at("TILEMATRIXSET")
            }
            TileLookupError::UnknownFormat(f) => {
                ApiError::bad_request("InvalidParameterValue", format!("format {f:?} is not offered for this layer")).at("FORMAT")
            }
            TileLookupError::Coord(e @ GridError::NotAnInteger { axis, .. }) => {
                ApiError::bad_request("InvalidParameterValue", e.to_string()).at(if axis == "x" { "TILECOL" } else { "TILEROW" })
            }
            TileLookupError::Coord(GridError::TileOutOfRange { x, y, width, height, .. }) => ApiError::bad_request(
                "TileOutOfRange",
                format!("TileRow {y} / TileCol {x} is outside the matrix ({width} columns, {height} rows)"),
            )
            .at(if x >= u64::from(width) { "TILECOL" } else { "TILEROW" }),
            TileLookupError::Coord(e) => ApiError::bad_request("TileOutOfRange", e.to_string()).at("TILEMATRIX"),
            TileLookupError::ZoomOutsideLayer { z, min, max } => ApiError::bad_request(
                "TileOutOfRange",
                format!("TileMatrix {z} is outside this layer's range {min}..={max}"),
            )
            .at("TILEMATRIX"),
        })
    })?;
    serve_tile(state, tile, headers).await.map_err(err)
}

fn capabilities(state: &AppState, headers: &HeaderMap) -> Response {
    let base = base_url(&state.config, headers);
    let base_x = escape(&base);
    let title = escape(&state.config.server.title);
    let mut x = String::with_capacity(64 * 1024);
    let _ = write!(
        x,
        r#"<?xml version="1.0" encoding="UTF-8"?>
<Capabilities xmlns="http://www.opengis.net/wmts/1.0" xmlns:ows="http://www.opengis.net/ows/1.1" xmlns:xlink="http://www.w3.org/1999/xlink" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xmlns:gml="http://www.opengis.net/gml" xsi:schemaLocation="http://www.opengis.net/wmts/1.0 http://schemas.opengis.net/wmts/1.0/wmtsGetCapabilities_response.xsd" version="1.0.0">
  <ows:ServiceIdentification>
    <ows:Title>{title}</ows:Title>
    <ows:ServiceType>OGC WMTS</ows:ServiceType>
    <ows:ServiceTypeVersion>1.0.0</ows:ServiceTypeVersion>
  </ows:ServiceIdentification>
  <ows:OperationsMetadata>
"#
    );
    for op in ["GetCapabilities", "GetTile"] {
        let _ = write!(
            x,
            r#"    <ows:Operation name="{op}">
      <ows:DCP><ows:HTTP><ows:Get xlink:href="{base_x}/wmts?"><ows:Constraint name="GetEncoding"><ows:AllowedValues><ows:Value>KVP</ows:Value></ows:AllowedValues></ows:Constraint></ows:Get>
      <ows:Get xlink:href="{base_x}/wmts/1.0.0/"><ows:Constraint name="GetEncoding"><ows:AllowedValues><ows:Value>RESTful</ows:Value></ows:AllowedValues></ows:Constraint></ows:Get></ows:HTTP></ows:DCP>
    </ows:Operation>
"#
        );
    }
    x.push_str("  </ows:OperationsMetadata>\n  <Contents>\n");
    let mut used_grids: Vec<&str> = Vec::new();
    let layers = state.registry.layers();
    for layer in &layers {
        let b = layer.source.info().lonlat_bounds;
        let name = escape(&layer.name);
        let _ = write!(
            x,
            "    <Layer>\n      <ows:Title>{}</ows:Title>\n      <ows:WGS84BoundingBox>\n        <ows:LowerCorner>{} {}</ows:LowerCorner>\n        <ows:UpperCorner>{} {}</ows:UpperCorner>\n      </ows:WGS84BoundingBox>\n      <ows:Identifier>{name}</ows:Identifier>\n      <Style isDefault=\"true\"><ows:Identifier>default</ows:Identifier></Style>\n",
            escape(&layer.title),
            b.min_x.max(-180.0),
            b.min_y.max(-90.0),
            b.max_x.min(180.0),
            b.max_y.min(90.0)
        );
        for f in &layer.formats {
            let _ = writeln!(x, "      <Format>{}</Format>", f.content_type());
        }
        for gid in &layer.grids {
            let Some(grid) = state.registry.grid(gid) else {
                continue;
            };
            if !used_grids.contains(&gid.as_str()) {
                used_grids.push(gid);
            }
            let _ = write!(
                x,
                "      <TileMatrixSetLink>\n        <TileMatrixSet>{}</TileMatrixSet>\n        <TileMatrixSetLimits>\n",
                escape(gid)
            );
            let extent = layer.extents.get(gid).copied().flatten();
            for z in layer.min_zoom..=layer.max_zoom_in(grid) {
                let m = &grid.tms.matrices[usize::from(z)];
                let range = extent.and_then(|e| grid.tms.tiles_in_bbox(z, &e));
                let (min_col, max_col, min_row, max_row) = match range {
                    Some(r) => (r.min_x, r.max_x, r.min_y, r.max_y),
                    None => (0, m.matrix_width - 1, 0, m.matrix_height - 1),
                };
                let _ = writeln!(
                    x,
                    "          <TileMatrixLimits><TileMatrix>{}</TileMatrix><MinTileRow>{min_row}</MinTileRow><MaxTileRow>{max_row}</MaxTileRow><MinTileCol>{min_col}</MinTileCol><MaxTileCol>{max_col}</MaxTileCol></TileMatrixLimits>",
                    escape(&m.id)
                );
            }
            x.push_str("        </TileMatrixSetLimits>\n      </TileMatrixSetLink>\n");
        }
        for f in &layer.formats {
            let _ = writeln!(
                x,
                "      <ResourceURL format=\"{}\" resourceType=\"tile\" template=\"{base_x}/wmts/1.0.0/{name}/{{Style}}/{{TileMatrixSet}}/{{TileMatrix}}/{{TileRow}}/{{TileCol}}.{}\"/>",
                f.content_type(),
                f.extension()
            );
        }
        x.push_str("    </Layer>\n");
    }
    for gid in used_grids {
        if let Some(grid) = state.registry.grid(gid) {
            write_tile_matrix_set(&mut x, grid);
        }
    }
    let _ = write!(
        x,
        "  </Contents>\n  <ServiceMetadataURL xlink:href=\"{base_x}/wmts/1.0.0/WMTSCapabilities.xml\"/>\n</Capabilities>\n"
    );
    let mut r = x.into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/xml; charset=utf-8"),
    );
    r
}

fn write_tile_matrix_set(x: &mut String, grid: &Grid) {
    let tms = &grid.tms;
    let _ = write!(
        x,
        "    <TileMatrixSet>\n      <ows:Title>{}</ows:Title>\n      <ows:Identifier>{}</ows:Identifier>\n      <ows:SupportedCRS>{}</ows:SupportedCRS>\n",
        escape(&tms.title),
        escape(&tms.id),
        escape(&tms.crs_urn)
    );
    if let Some(wkss) = &tms.well_known_scale_set {
        let _ = writeln!(
            x,
            "      <WellKnownScaleSet>{}</WellKnownScaleSet>",
            escape(wkss)
        );
    }
    // TopLeftCorner follows the CRS's axis order (latitude first for EPSG:4326).
    let corner = if grid.crs.authority_yx {
        format!("{} {}", tms.origin_y, tms.origin_x)
    } else {
        format!("{} {}", tms.origin_x, tms.origin_y)
    };
    for m in &tms.matrices {
        let _ = write!(
            x,
            "      <TileMatrix>\n        <ows:Identifier>{}</ows:Identifier>\n        <ScaleDenominator>{}</ScaleDenominator>\n        <TopLeftCorner>{corner}</TopLeftCorner>\n        <TileWidth>{}</TileWidth>\n        <TileHeight>{}</TileHeight>\n        <MatrixWidth>{}</MatrixWidth>\n        <MatrixHeight>{}</MatrixHeight>\n      </TileMatrix>\n",
            escape(&m.id),
            m.scale_denominator,
            tms.tile_width,
            tms.tile_height,
            m.matrix_width,
            m.matrix_height
        );
    }
    x.push_str("    </TileMatrixSet>\n");
}
