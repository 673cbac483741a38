//! WMS GetFeatureInfo: what lies under one pixel of a map. Vector layers
//! answer the features within a few pixels of it (their offered fields),
//! raster layers the value of each band there. As JSON (a GeoJSON feature
//! collection without geometries), GML (MapServer's `msGMLOutput`, which
//! WMS 1.1.1's queryable profile asks for), HTML tables or plain text.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tessera_grid::BBox;
use tessera_source::{Crs, WindowRequest};

use super::Version;
use super::get_map::{bbox, crs, layers, size};
use crate::config::Limits;
use crate::http::error::ApiError;
use crate::http::params::Kvp;
use crate::model::Layer;
use crate::registry::Registry;
use crate::render::{RenderError, Renderer};

/// Pixels around the point a vector feature may lie within (GeoServer's
/// `BUFFER` vendor parameter changes it, up to [`MAX_BUFFER`]).
const DEFAULT_BUFFER: u32 = 3;
/// The largest `BUFFER`.
const MAX_BUFFER: u32 = 50;
/// The largest `FEATURE_COUNT`.
const MAX_FEATURE_COUNT: usize = 100;

/// The answer's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InfoFormat {
    Json,
    Gml,
    Html,
    Text,
}

impl InfoFormat {
    const NAMES: [&'static str; 4] = [
        "application/json",
        "application/vnd.ogc.gml",
        "text/html",
        "text/plain",
    ];

    fn parse(text: Option<&str>) -> Result<InfoFormat, ApiError> {
        let Some(text) = text else {
            return Ok(InfoFormat::Text);
        };
        let base = text.split(';').next().unwrap_or_default().trim();
        match base.to_ascii_lowercase().as_str() {
            "application/json" | "json" | "application/geo+json" => Ok(InfoFormat::Json),
            "application/vnd.ogc.gml" | "application/gml+xml" | "text/xml" => Ok(InfoFormat::Gml),
            "text/html" => Ok(InfoFormat::Html),
            "text/plain" => Ok(InfoFormat::Text),
            _ => Err(ApiError::bad_request(
                "InvalidFormat",
                format!(
                    "INFO_FORMAT {text:?} is not supported; use one of {}",
                    InfoFormat::NAMES.join(", ")
                ),
            )
            .at("INFO_FORMAT")),
        }
    }
}

/// The info formats capabilities list.
pub(super) fn formats() -> &'static [&'static str] {
    &InfoFormat::NAMES
}

/// What one layer has at the point.
struct Found {
    layer: String,
    features: Vec<Vec<(String, Value)>>,
}

/// Parses a GetFeatureInfo, queries its layers under a map's render slot
/// and answers in its INFO_FORMAT.
pub(super) async fn respond(
    kvp: &Kvp,
    version: Version,
    registry: &Registry,
    limits: &Limits,
    renderer: &Renderer,
    sees: &(dyn Fn(&str) -> bool + Sync),
    schema: &str,
) -> Result<Response, ApiError> {
    let map_layers = layers(kvp, registry, limits, sees)?;
    let crs = crs(kvp, version, registry)?;
    let bbox = bbox(kvp, version, &crs)?;
    let (width, height) = size(kvp, limits)?;
    let format = InfoFormat::parse(kvp.get("info_format"))?;
    let queried = query_layers(kvp, &map_layers, registry, sees)?;
    let (i, j) = point(kvp, version, width, height)?;
    let count = match kvp.get("feature_count") {
        None => 1,
        Some(t) => t
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_FEATURE_COUNT).contains(n))
            .ok_or_else(|| {
                ApiError::bad_request(
                    "InvalidParameterValue",
                    format!("FEATURE_COUNT {t:?} must be an integer from 1 to {MAX_FEATURE_COUNT}"),
                )
                .at("FEATURE_COUNT")
            })?,
    };
    let buffer = match kvp.get("buffer") {
        None => DEFAULT_BUFFER,
        Some(t) => t
            .parse::<u32>()
            .ok()
            .filter(|n| *n <= MAX_BUFFER)
            .ok_or_else(|| {
                ApiError::bad_request(
                    "InvalidParameterValue",
                    format!("BUFFER {t:?} must be an integer from 0 to {MAX_BUFFER} (pixels)"),
                )
                .at("BUFFER")
            })?,
    };
    let res_x = bbox.width() / f64::from(width);
    let res_y = bbox.height() / f64::from(height);
    let at = (
        bbox.min_x + (f64::from(i) + 0.5) * res_x,
        bbox.max_y - (f64::from(j) + 0.5) * res_y,
    );
    let found = renderer
        .query(move |budget| {
            let mut out = Vec::with_capacity(queried.len());
            // Topmost layer first, as a map shows them.
            for layer in queried.iter().rev() {
                if budget.cancel.load(std::sync::atomic::Ordering::Acquire) {
                    return Err(RenderError::Cancelled);
                }
                out.extend(query_layer(
                    layer,
                    at,
                    &crs,
                    (res_x, res_y),
                    buffer,
                    count,
                    budget.max_source_pixels,
                )?);
            }
            Ok(out)
        })
        .await
        .map_err(|e| ApiError::from(e).speaking(version.protocol()))?;
    Ok(write(format, &found, schema))
}

/// QUERY_LAYERS: layers of LAYERS. A name the service does not have is
/// `LayerNotDefined`; one it has that the map does not show is
/// `LayerNotQueryable`.
fn query_layers(
    kvp: &Kvp,
    map_layers: &[Arc<Layer>],
    registry: &Registry,
    sees: &dyn Fn(&str) -> bool,
) -> Result<Vec<Arc<Layer>>, ApiError> {
    kvp.required("QUERY_LAYERS")?
        .split(',')
        .map(|name| {
            if let Err(unknown) = registry.find_layer(name, sees) {
                return Err(ApiError::not_found(
                    "LayerNotDefined",
                    format!("QUERY_LAYERS names a layer this service does not have: {unknown}"),
                )
                .at("QUERY_LAYERS"));
            }
            map_layers
                .iter()
                .find(|l| l.name == name)
                .cloned()
                .ok_or_else(|| {
                    ApiError::bad_request(
                        "LayerNotQueryable",
                        format!("QUERY_LAYERS names {name:?}, which is not in LAYERS"),
                    )
                    .at("QUERY_LAYERS")
                })
        })
        .collect()
}

/// I/J (1.3.0) or X/Y (1.1.1; each accepts the other's names): a pixel of
/// the map, from its top-left corner.
fn point(kvp: &Kvp, version: Version, width: u32, height: u32) -> Result<(u32, u32), ApiError> {
    let (xs, ys) = match version {
        Version::V130 => (["I", "X"], ["J", "Y"]),
        Version::V111 => (["X", "I"], ["Y", "J"]),
    };
    let code = match version {
        Version::V130 => "InvalidPoint",
        Version::V111 => "InvalidParameterValue",
    };
    let one = |names: [&'static str; 2], max: u32| -> Result<u32, ApiError> {
        let text = kvp
            .get(names[0])
            .or_else(|| kvp.get(names[1]))
            .ok_or_else(|| {
                ApiError::bad_request("MissingParameterValue", format!("{} is required", names[0]))
                    .at(names[0])
            })?;
        text.parse::<u32>()
            .ok()
            .filter(|v| *v < max)
            .ok_or_else(|| {
                ApiError::bad_request(
                    code,
                    format!(
                        "{} {text:?} must be a pixel of the map, 0 to {}",
                        names[0],
                        max - 1
                    ),
                )
                .at(names[0])
            })
    };
    Ok((one(xs, width)?, one(ys, height)?))
}

/// One layer at the point: features of a vector layer, band values of a
/// raster one.
fn query_layer(
    layer: &Layer,
    at: (f64, f64),
    crs: &Crs,
    (res_x, res_y): (f64, f64),
    buffer: u32,
    count: usize,
    max_source_pixels: u64,
) -> Result<Option<Found>, RenderError> {
    if let Some(vector) = layer.source.as_features() {
        let tolerance = f64::from(buffer.max(1)) * res_x.max(res_y);
        let features = vector.features_at(at, crs, res_x, tolerance, count)?;
        if features.is_empty() {
            return Ok(None);
        }
        return Ok(Some(Found {
            layer: layer.name.clone(),
            features: features
                .into_iter()
                .map(|f| {
                    let mut props = vec![("source_layer".to_string(), Value::String(f.layer))];
                    props.extend(f.attributes);
                    props
                })
                .collect(),
        }));
    }
    // The pixel of the map at the point, read as the map reads it.
    let pixel = BBox::new(
        at.0 - res_x / 2.0,
        at.1 - res_y / 2.0,
        at.0 + res_x / 2.0,
        at.1 + res_y / 2.0,
    )
    .map_err(|e| {
        RenderError::Source(tessera_source::SourceError::Read {
            path: layer.name.clone(),
            source: e.to_string().into(),
        })
    })?;
    let raster = layer.source.read(&WindowRequest {
        bbox: pixel,
        crs,
        width: 1,
        height: 1,
        cancel: None,
        max_source_pixels: Some(max_source_pixels),
        tile_rows: None,
    })?;
    if raster.valid.first().copied().unwrap_or(0) == 0 {
        return Ok(None);
    }
    let number =
        |v: f32| serde_json::Number::from_f64(f64::from(v)).map_or(Value::Null, Value::Number);
    let mut bands: Vec<(String, Value)> = raster
        .bands
        .iter()
        .enumerate()
        .map(|(b, data)| (format!("band_{}", b + 1), number(data.get(0))))
        .collect();
    // A style that computes a value (band math): that value too.
    if let Some(values) = layer.style.values(&raster) {
        let value = values.map_err(RenderError::Style)?;
        bands.push((
            "value".to_string(),
            value.first().map_or(Value::Null, |v| number(*v)),
        ));
    }
    Ok(Some(Found {
        layer: layer.name.clone(),
        features: vec![bands],
    }))
}

fn write(format: InfoFormat, found: &[Found], schema: &str) -> Response {
    let (content_type, body) = match format {
        InfoFormat::Json => ("application/json", json_body(found)),
        InfoFormat::Gml => ("application/vnd.ogc.gml", gml_body(found, schema)),
        InfoFormat::Html => ("text/html; charset=utf-8", html_body(found)),
        InfoFormat::Text => ("text/plain; charset=utf-8", text_body(found)),
    };
    let mut r = body.into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

fn json_body(found: &[Found]) -> String {
    let features: Vec<Value> = found
        .iter()
        .flat_map(|f| {
            f.features.iter().map(|props| {
                let properties: serde_json::Map<String, Value> = props.iter().cloned().collect();
                json!({
                    "type": "Feature",
                    "layer": f.layer,
                    "geometry": null,
                    "properties": properties,
                })
            })
        })
        .collect();
    json!({ "type": "FeatureCollection", "features": features }).to_string()
}

/// MapServer's GML answer: a `{layer}_layer` element per layer holding a
/// `{layer}_feature` element per feature, one child per attribute; names
/// made valid XML names, values escaped. Its schema ([`schema_document`])
/// is at `schema` with the layers' names as `LAYERS`.
fn gml_body(found: &[Found], schema: &str) -> String {
    let layers: Vec<String> = found
        .iter()
        .map(|f| form_urlencoded::byte_serialize(f.layer.as_bytes()).collect())
        .collect();
    let location = escape(&format!("{schema}?LAYERS={}", layers.join(",")));
    let mut out = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<msGMLOutput \
         xmlns:gml=\"http://www.opengis.net/gml\" \
         xmlns:xlink=\"http://www.w3.org/1999/xlink\" \
         xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" \
         xsi:noNamespaceSchemaLocation=\"{location}\">\n",
    );
    for f in found {
        let layer = xml_name(&f.layer);
        let _ = writeln!(
            out,
            "  <{layer}_layer>\n    <gml:name>{}</gml:name>",
            escape(&f.layer)
        );
        for props in &f.features {
            let _ = writeln!(out, "    <{layer}_feature>");
            for (k, v) in props {
                let name = xml_name(k);
                let _ = writeln!(out, "      <{name}>{}</{name}>", escape(&plain(v)));
            }
            let _ = writeln!(out, "    </{layer}_feature>");
        }
        let _ = writeln!(out, "  </{layer}_layer>");
    }
    out.push_str("</msGMLOutput>\n");
    out
}

/// The GML 3.1.1 schema `gml:name` comes from.
const GML_SCHEMA: &str = "http://schemas.opengis.net/gml/3.1.1/base/gml.xsd";

/// The XML Schema of a GML feature info answer about `layers`: an
/// `msGMLOutput` of `{layer}_layer` elements, each a `gml:name` and
/// `{layer}_feature` elements whose children are the attributes (any
/// names: a raster's bands, a table's fields, as the answer gives them).
pub fn schema_document(layers: &[&str]) -> String {
    let mut layer_elements = String::new();
    let mut names: Vec<String> = layers.iter().map(|l| xml_name(l)).collect();
    names.sort();
    names.dedup();
    for name in names {
        let _ = write!(
            layer_elements,
            "        <xs:element name=\"{name}_layer\">\n          <xs:complexType>\n            <xs:sequence>\n              <xs:element ref=\"gml:name\"/>\n              <xs:element name=\"{name}_feature\" minOccurs=\"0\" maxOccurs=\"unbounded\">\n                <xs:complexType>\n                  <xs:sequence>\n                    <xs:any processContents=\"lax\" minOccurs=\"0\" maxOccurs=\"unbounded\"/>\n                  </xs:sequence>\n                </xs:complexType>\n              </xs:element>\n            </xs:sequence>\n          </xs:complexType>\n        </xs:element>\n"
        );
    }
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<xs:schema xmlns:xs=\"http://www.w3.org/2001/XMLSchema\" \
         xmlns:gml=\"http://www.opengis.net/gml\" elementFormDefault=\"unqualified\">\n  \
         <xs:import namespace=\"http://www.opengis.net/gml\" schemaLocation=\"{GML_SCHEMA}\"/>\n  \
         <xs:element name=\"msGMLOutput\">\n    <xs:complexType>\n      \
         <xs:choice minOccurs=\"0\" maxOccurs=\"unbounded\">\n{layer_elements}      </xs:choice>\n    \
         </xs:complexType>\n  </xs:element>\n</xs:schema>\n"
    )
}

/// `text` as an XML element name: characters a name may not hold become
/// `_`, and one that cannot start a name (a digit, `-`, `.`, or `xml`)
/// gets `_` before it.
fn xml_name(text: &str) -> String {
    let mut name: String = text
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let bad_start = name
        .chars()
        .next()
        .is_none_or(|c| !(c.is_alphabetic() || c == '_'))
        || name.to_ascii_lowercase().starts_with("xml");
    if bad_start {
        name.insert(0, '_');
    }
    name
}

fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn html_body(found: &[Found]) -> String {
    let mut out = String::from(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Feature info</title></head><body>\n",
    );
    if found.is_empty() {
        out.push_str("<p>Nothing here.</p>\n");
    }
    for f in found {
        let _ = writeln!(out, "<h2>{}</h2>", escape(&f.layer));
        let Some(first) = f.features.first() else {
            continue;
        };
        out.push_str("<table>\n<tr>");
        for (k, _) in first {
            let _ = write!(out, "<th>{}</th>", escape(k));
        }
        out.push_str("</tr>\n");
        for props in &f.features {
            out.push_str("<tr>");
            for (_, v) in props {
                let _ = write!(out, "<td>{}</td>", escape(&plain(v)));
            }
            out.push_str("</tr>\n");
        }
        out.push_str("</table>\n");
    }
    out.push_str("</body></html>\n");
    out
}

fn text_body(found: &[Found]) -> String {
    let mut out = String::new();
    if found.is_empty() {
        out.push_str("no features were found\n");
    }
    for f in found {
        let _ = writeln!(out, "Layer '{}'", f.layer);
        for (n, props) in f.features.iter().enumerate() {
            let _ = writeln!(out, "  Feature {}:", n + 1);
            for (k, v) in props {
                let _ = writeln!(out, "    {k} = '{}'", plain(v));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found() -> Vec<Found> {
        vec![Found {
            layer: "countries".into(),
            features: vec![vec![
                ("name".into(), Value::String("France <FR>".into())),
                ("pop".into(), json!(67_000_000)),
            ]],
        }]
    }

    #[test]
    fn the_three_formats_carry_the_same_values() {
        let j: Value = serde_json::from_str(&json_body(&found())).unwrap();
        assert_eq!(j["features"][0]["properties"]["name"], "France <FR>");
        assert_eq!(j["features"][0]["layer"], "countries");
        let h = html_body(&found());
        assert!(h.contains("<td>France &lt;FR&gt;</td>") && h.contains("<td>67000000</td>"));
        let t = text_body(&found());
        assert!(t.contains("Layer 'countries'") && t.contains("name = 'France <FR>'"));
        assert!(text_body(&[]).contains("no features"));
    }

    #[test]
    fn attribute_names_become_xml_names_and_values_are_escaped() {
        assert_eq!(xml_name("NAME"), "NAME");
        assert_eq!(xml_name("pop est"), "pop_est");
        assert_eq!(xml_name("2020"), "_2020");
        assert_eq!(xml_name("xmlns"), "_xmlns");
        assert_eq!(xml_name(""), "_");
        let gml = gml_body(
            &[Found {
                layer: "my layer".into(),
                features: vec![vec![("a<b".into(), Value::String("x & <y>".into()))]],
            }],
            "http://h/wms/schema/feature_info.xsd",
        );
        assert!(gml.contains("<my_layer_layer>"), "{gml}");
        assert!(gml.contains("<a_b>x &amp; &lt;y&gt;</a_b>"), "{gml}");
        assert!(
            gml.contains(r#"xsi:noNamespaceSchemaLocation="http://h/wms/schema/feature_info.xsd?LAYERS=my+layer""#),
            "{gml}"
        );
        let xsd = schema_document(&["my layer", "my layer", "b"]);
        assert_eq!(xsd.matches(r#"name="my_layer_layer""#).count(), 1, "{xsd}");
        assert!(xsd.contains(r#"name="b_feature""#), "{xsd}");
    }

    #[test]
    fn info_formats_parse_and_bad_ones_are_named() {
        assert_eq!(InfoFormat::parse(None).unwrap(), InfoFormat::Text);
        assert_eq!(
            InfoFormat::parse(Some("application/json; subtype=geojson")).unwrap(),
            InfoFormat::Json
        );
        assert_eq!(
            InfoFormat::parse(Some("text/html")).unwrap(),
            InfoFormat::Html
        );
        assert_eq!(
            InfoFormat::parse(Some("application/vnd.ogc.gml")).unwrap(),
            InfoFormat::Gml
        );
        let e = InfoFormat::parse(Some("application/x-shapefile")).unwrap_err();
        assert!(e.message.contains("text/plain"));
    }
}
