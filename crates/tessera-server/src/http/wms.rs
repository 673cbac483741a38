//! WMS 1.1.1 and 1.3.0: GetCapabilities and GetMap.
//!
//! Axis order: WMS 1.3.0 gives BBOX in the CRS's own axis order (latitude
//! first for EPSG:4326), 1.1.1 always x/y. Both are turned into an x/y
//! [`BBox`] here, so the two versions give the same picture.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use tessera_grid::BBox;
use tessera_grid::TileFormat;
use tessera_image::Color;

use super::error::{ApiError, Protocol};
use super::params::Kvp;
use super::xml::escape;
use super::{AppState, base_url, image_response};
use crate::registry::Layer;
use crate::render::ImageRequest;

/// WMS versions spoken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    V111,
    V130,
}

impl Version {
    fn protocol(self) -> Protocol {
        match self {
            Version::V111 => Protocol::Wms111,
            Version::V130 => Protocol::Wms130,
        }
    }

    /// Version negotiation: anything below 1.3.0 gets 1.1.1.
    fn negotiate(text: Option<&str>) -> Version {
        match text {
            Some(v) if version_lt(v, "1.3.0") => Version::V111,
            _ => Version::V130,
        }
    }
}

fn version_lt(a: &str, b: &str) -> bool {
    let parse = |s: &str| {
        s.split('.')
            .map(|p| p.parse::<u32>().unwrap_or(0))
            .collect::<Vec<_>>()
    };
    parse(a) < parse(b)
}

/// `GET /wms?SERVICE=WMS&REQUEST=...`.
pub async fn kvp(
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let query = query.unwrap_or_default();
    let kvp = Kvp::parse(&query, state.config.limits.max_query_bytes)
        .map_err(|e| ApiError::from(e).speaking(Protocol::Wms130))?;
    let version = Version::negotiate(kvp.get("version"));
    let err = |e: ApiError| e.speaking(version.protocol());
    let request = kvp.service_request("WMS").map_err(err)?;
    match request.to_ascii_lowercase().as_str() {
        "getcapabilities" | "capabilities" => Ok(capabilities(&state, &headers, version)),
        "getmap" | "map" => {
            if let Some(v) = kvp.get("version")
                && v != "1.1.1"
                && v != "1.3.0"
            {
                return Err(err(ApiError::bad_request(
                    "InvalidParameterValue",
                    format!("VERSION {v:?} is not supported; use 1.1.1 or 1.3.0"),
                )
                .at("VERSION")));
            }
            let request = parse_get_map(&state, &kvp, version).map_err(err)?;
            let format = request.format;
            let bytes = state
                .renderer
                .render(request)
                .await
                .map_err(|e| err(e.into()))?;
            Ok(image_response(format, bytes))
        }
        other => Err(err(ApiError::bad_request(
            "OperationNotSupported",
            format!("REQUEST {other:?} is not supported; use GetCapabilities or GetMap"),
        )
        .at("REQUEST"))),
    }
}

fn parse_get_map(state: &AppState, kvp: &Kvp, version: Version) -> Result<ImageRequest, ApiError> {
    let limits = &state.config.limits;
    let required = |name: &'static str| {
        kvp.get(name).ok_or_else(|| {
            ApiError::bad_request("MissingParameterValue", format!("{name} is required")).at(name)
        })
    };

    let names: Vec<&str> = required("LAYERS")?.split(',').collect();
    if names.len() > limits.wms_max_layers {
        return Err(ApiError::bad_request(
            "InvalidParameterValue",
            format!("at most {} layers per request", limits.wms_max_layers),
        )
        .at("LAYERS"));
    }
    let mut layers: Vec<Arc<Layer>> = Vec::with_capacity(names.len());
    for name in &names {
        let layer = state.registry.layer(name).ok_or_else(|| {
            ApiError::not_found("LayerNotDefined", format!("unknown layer {name:?}")).at("LAYERS")
        })?;
        layers.push(layer.clone());
    }
    if let Some(styles) = kvp.get("styles") {
        let styles: Vec<&str> = styles.split(',').collect();
        if styles.len() > 1 && styles.len() != names.len() {
            return Err(ApiError::bad_request(
                "StyleNotDefined",
                "STYLES must list one style per layer",
            )
            .at("STYLES"));
        }
        if let Some(bad) = styles
            .iter()
            .find(|s| !(s.is_empty() || s.eq_ignore_ascii_case("default")))
        {
            return Err(ApiError::bad_request(
                "StyleNotDefined",
                format!("unknown style {bad:?}; use \"default\" or leave it empty"),
            )
            .at("STYLES"));
        }
    }

    let (crs_key, crs_code) = match version {
        Version::V130 => ("CRS", "InvalidCRS"),
        Version::V111 => ("SRS", "InvalidSRS"),
    };
    let crs_text = kvp
        .get(crs_key)
        .or_else(|| kvp.get(if crs_key == "CRS" { "SRS" } else { "CRS" }))
        .ok_or_else(|| {
            ApiError::bad_request("MissingParameterValue", format!("{crs_key} is required"))
                .at(crs_key)
        })?;
    let crs = state.registry.crs(crs_text).map_err(|_| {
        ApiError::bad_request(crs_code, format!("unknown {crs_key} {crs_text:?}")).at(crs_key)
    })?;

    let bbox_text = required("BBOX")?;
    let bad_bbox = |why: &str| {
        ApiError::bad_request("InvalidParameterValue", format!("BBOX {bbox_text:?} {why}"))
            .at("BBOX")
    };
    let values: Vec<f64> = bbox_text
        .split(',')
        .map(|v| v.trim().parse::<f64>())
        .collect::<Result<_, _>>()
        .map_err(|_| bad_bbox("must be four comma-separated numbers"))?;
    let [a, b, c, d] = values[..] else {
        return Err(bad_bbox("must be four comma-separated numbers"));
    };
    let (min_x, min_y, max_x, max_y) = if version == Version::V130 && crs.authority_yx {
        (b, a, d, c)
    } else {
        (a, b, c, d)
    };
    let bbox = BBox::new(min_x, min_y, max_x, max_y)
        .map_err(|_| bad_bbox("must be finite with minimum below maximum on both axes"))?;

    let width = parse_size(required("WIDTH")?, "WIDTH", limits.wms_max_width)?;
    let height = parse_size(required("HEIGHT")?, "HEIGHT", limits.wms_max_height)?;
    if u64::from(width) * u64::from(height) > limits.wms_max_pixels {
        return Err(ApiError::bad_request(
            "InvalidParameterValue",
            format!(
                "WIDTH x HEIGHT is {} pixels; the limit is {}",
                u64::from(width) * u64::from(height),
                limits.wms_max_pixels
            ),
        )
        .at("WIDTH"));
    }

    let format_text = required("FORMAT")?;
    let format = TileFormat::from_mime(format_text).ok_or_else(|| {
        ApiError::bad_request(
            "InvalidFormat",
            format!(
                "FORMAT {format_text:?} is not supported; use image/png, image/jpeg or image/webp"
            ),
        )
        .at("FORMAT")
    })?;
    let transparent = match kvp.get("transparent") {
        None => false,
        Some(t) if t.eq_ignore_ascii_case("true") => true,
        Some(t) if t.eq_ignore_ascii_case("false") => false,
        Some(t) => {
            return Err(ApiError::bad_request(
                "InvalidParameterValue",
                format!("TRANSPARENT {t:?} must be TRUE or FALSE"),
            )
            .at("TRANSPARENT"));
        }
    };
    let background = match kvp.get("bgcolor") {
        None => Color([255, 255, 255, 255]),
        Some(t) => Color::parse(t).filter(|_| t.len() == 8).ok_or_else(|| {
            ApiError::bad_request(
                "InvalidParameterValue",
                format!("BGCOLOR {t:?} must be 0xRRGGBB"),
            )
            .at("BGCOLOR")
        })?,
    };
    Ok(ImageRequest {
        layers,
        bbox,
        crs,
        width,
        height,
        format,
        transparent,
        background,
    })
}

/// Parses WIDTH or HEIGHT: plain digits, 1..=max, checked before anything is allocated.
fn parse_size(text: &str, name: &'static str, max: u32) -> Result<u32, ApiError> {
    let bad = || {
        ApiError::bad_request(
            "InvalidParameterValue",
            format!("{name} {text:?} must be an integer from 1 to {max}"),
        )
        .at(name)
    };
    if text.is_empty() || text.len() > 10 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let v: u64 = text.parse().map_err(|_| bad())?;
    if v == 0 || v > u64::from(max) {
        return Err(bad());
    }
    Ok(v as u32)
}

fn capabilities(state: &AppState, headers: &HeaderMap, version: Version) -> Response {
    let base = escape(&base_url(&state.config, headers)).into_owned();
    let title = escape(&state.config.server.title);
    let mut formats = String::new();
    for f in TileFormat::ALL {
        let _ = write!(formats, "<Format>{}</Format>", f.content_type());
    }
    let online = format!(
        "<DCPType><HTTP><Get><OnlineResource xmlns:xlink=\"http://www.w3.org/1999/xlink\" xlink:type=\"simple\" xlink:href=\"{base}/wms?\"/></Get></HTTP></DCPType>"
    );
    let limits = &state.config.limits;
    let (crs_tag, mut common_crs): (&str, Vec<String>) = match version {
        Version::V130 => (
            "CRS",
            vec!["CRS:84".into(), "EPSG:4326".into(), "EPSG:3857".into()],
        ),
        Version::V111 => ("SRS", vec!["EPSG:4326".into(), "EPSG:3857".into()]),
    };
    for layer in &state.registry.layers() {
        let native = &layer.source.info().native_crs.id;
        for c in layer.wms_crs.iter().chain(std::iter::once(native)) {
            if c.starts_with("EPSG:") && !common_crs.contains(c) {
                common_crs.push(c.clone());
            }
        }
    }
    let mut x = String::with_capacity(32 * 1024);
    match version {
        Version::V130 => {
            let _ = write!(
                x,
                r#"<?xml version="1.0" encoding="UTF-8"?>
<WMS_Capabilities version="1.3.0" xmlns="http://www.opengis.net/wms" xmlns:xlink="http://www.w3.org/1999/xlink" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xsi:schemaLocation="http://www.opengis.net/wms http://schemas.opengis.net/wms/1.3.0/capabilities_1_3_0.xsd">
  <Service>
    <Name>WMS</Name>
    <Title>{title}</Title>
    <OnlineResource xlink:type="simple" xlink:href="{base}/wms?"/>
    <LayerLimit>{}</LayerLimit>
    <MaxWidth>{}</MaxWidth>
    <MaxHeight>{}</MaxHeight>
  </Service>
  <Capability>
    <Request>
      <GetCapabilities><Format>text/xml</Format>{online}</GetCapabilities>
      <GetMap>{formats}{online}</GetMap>
    </Request>
    <Exception><Format>XML</Format></Exception>
"#,
                limits.wms_max_layers, limits.wms_max_width, limits.wms_max_height
            );
        }
        Version::V111 => {
            let _ = write!(
                x,
                r#"<?xml version="1.0" encoding="UTF-8"?>
<WMT_MS_Capabilities version="1.1.1">
  <Service>
    <Name>OGC:WMS</Name>
    <Title>{title}</Title>
    <OnlineResource xmlns:xlink="http://www.w3.org/1999/xlink" xlink:type="simple" xlink:href="{base}/wms?"/>
  </Service>
  <Capability>
    <Request>
      <GetCapabilities><Format>application/vnd.ogc.wms_xml</Format>{online}</GetCapabilities>
      <GetMap>{formats}{online}</GetMap>
    </Request>
    <Exception><Format>application/vnd.ogc.se_xml</Format></Exception>
"#
            );
        }
    }
    let _ = write!(x, "    <Layer>\n      <Title>{title}</Title>\n");
    for c in &common_crs {
        let _ = writeln!(x, "      <{crs_tag}>{}</{crs_tag}>", escape(c));
    }
    let world = BBox {
        min_x: -180.0,
        min_y: -90.0,
        max_x: 180.0,
        max_y: 90.0,
    };
    write_geo_bbox(&mut x, version, &world, "      ");
    for layer in &state.registry.layers() {
        let b = layer.source.info().lonlat_bounds;
        let b = BBox {
            min_x: b.min_x.max(-180.0),
            min_y: b.min_y.max(-90.0),
            max_x: b.max_x.min(180.0),
            max_y: b.max_y.min(90.0),
        };
        let _ = write!(
            x,
            "      <Layer queryable=\"0\" opaque=\"0\">\n        <Name>{}</Name>\n        <Title>{}</Title>\n",
            escape(&layer.name),
            escape(&layer.title)
        );
        if let Some(d) = &layer.description {
            let _ = writeln!(x, "        <Abstract>{}</Abstract>", escape(d));
        }
        write_geo_bbox(&mut x, version, &b, "        ");
        match version {
            Version::V130 => {
                let _ = writeln!(
                    x,
                    "        <BoundingBox CRS=\"CRS:84\" minx=\"{}\" miny=\"{}\" maxx=\"{}\" maxy=\"{}\"/>\n        <BoundingBox CRS=\"EPSG:4326\" minx=\"{}\" miny=\"{}\" maxx=\"{}\" maxy=\"{}\"/>",
                    b.min_x, b.min_y, b.max_x, b.max_y, b.min_y, b.min_x, b.max_y, b.max_x
                );
            }
            Version::V111 => {
                let _ = writeln!(
                    x,
                    "        <BoundingBox SRS=\"EPSG:4326\" minx=\"{}\" miny=\"{}\" maxx=\"{}\" maxy=\"{}\"/>",
                    b.min_x, b.min_y, b.max_x, b.max_y
                );
            }
        }
        if let Some(Some(m)) = layer.extents.get(tessera_grid::WEB_MERCATOR_QUAD) {
            let _ = writeln!(
                x,
                "        <BoundingBox {crs_tag}=\"EPSG:3857\" minx=\"{}\" miny=\"{}\" maxx=\"{}\" maxy=\"{}\"/>",
                m.min_x, m.min_y, m.max_x, m.max_y
            );
        }
        x.push_str(
            "        <Style><Name>default</Name><Title>default</Title></Style>\n      </Layer>\n",
        );
    }
    x.push_str("    </Layer>\n  </Capability>\n");
    x.push_str(match version {
        Version::V130 => "</WMS_Capabilities>\n",
        Version::V111 => "</WMT_MS_Capabilities>\n",
    });
    let content_type = match version {
        Version::V130 => "text/xml; charset=utf-8",
        Version::V111 => "application/vnd.ogc.wms_xml; charset=utf-8",
    };
    let mut r = x.into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

fn write_geo_bbox(x: &mut String, version: Version, b: &BBox, indent: &str) {
    let _ = match version {
        Version::V130 => writeln!(
            x,
            "{indent}<EX_GeographicBoundingBox><westBoundLongitude>{}</westBoundLongitude><eastBoundLongitude>{}</eastBoundLongitude><southBoundLatitude>{}</southBoundLatitude><northBoundLatitude>{}</northBoundLatitude></EX_GeographicBoundingBox>",
            b.min_x, b.max_x, b.min_y, b.max_y
        ),
        Version::V111 => writeln!(
            x,
            "{indent}<LatLonBoundingBox minx=\"{}\" miny=\"{}\" maxx=\"{}\" maxy=\"{}\"/>",
            b.min_x, b.min_y, b.max_x, b.max_y
        ),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_below_1_3_0_negotiate_to_1_1_1() {
        assert_eq!(Version::negotiate(Some("1.1.1")), Version::V111);
        assert_eq!(Version::negotiate(Some("1.1.0")), Version::V111);
        assert_eq!(Version::negotiate(Some("1.3.0")), Version::V130);
        assert_eq!(Version::negotiate(Some("2.0")), Version::V130);
        assert_eq!(Version::negotiate(None), Version::V130);
    }

    #[test]
    fn sizes_are_plain_positive_integers_within_the_limit() {
        assert_eq!(parse_size("256", "WIDTH", 4096).unwrap(), 256);
        for bad in ["0", "-1", "1.5", "", "4097", "99999999999", "1e3", " 1"] {
            assert!(parse_size(bad, "WIDTH", 4096).is_err(), "{bad:?}");
        }
    }
}
