//! MapLibre style documents, as a vector source draws them: the style's
//! `background`, `fill`, `line`, `circle` and `symbol` (text) layers whose
//! `source` is the one named, in order, each over the features of its
//! `source-layer` (a data layer of the source) that its `filter` admits,
//! at its zooms, with the paint and layout properties below evaluated per
//! feature ([`expr`]). Everything else in the style is listed once when
//! the source opens ([`MapLibreStyle::unsupported`]), never silently
//! ignored.
//!
//! Zooms are MapLibre's: a map at zoom `z` is `512 * 2^z` pixels around,
//! one level below the 256-pixel levels of style rules.

pub mod expr;
pub mod from_rules;

use std::sync::Arc;

use serde_json::Value as Json;

use expr::{Context, Val};

/// A style document and the name of its source this vector source is.
#[derive(Debug, Clone, PartialEq)]
pub struct MapLibreSpec {
    /// The style document.
    pub document: Arc<Json>,
    /// The name of the source (under the document's `sources`) whose
    /// layers are drawn.
    pub source: String,
}

/// Paint and layout properties drawn, per layer type.
const SUPPORTED: &[(&str, &[&str])] = &[
    (
        "background",
        &["background-color", "background-opacity", "visibility"],
    ),
    (
        "fill",
        &[
            "fill-color",
            "fill-opacity",
            "fill-outline-color",
            "fill-antialias",
            "visibility",
        ],
    ),
    (
        "line",
        &[
            "line-color",
            "line-width",
            "line-opacity",
            "line-dasharray",
            "line-cap",
            "line-join",
            "visibility",
        ],
    ),
    (
        "circle",
        &[
            "circle-radius",
            "circle-color",
            "circle-opacity",
            "circle-stroke-color",
            "circle-stroke-width",
            "circle-stroke-opacity",
            "visibility",
        ],
    ),
    (
        "symbol",
        &[
            "text-field",
            "text-size",
            "text-color",
            "text-opacity",
            "text-halo-color",
            "text-halo-width",
            "text-offset",
            "text-padding",
            "text-max-width",
            "symbol-placement",
            "symbol-sort-key",
            "text-font",
            "visibility",
        ],
    ),
];

/// The kind of a style layer drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The whole window in one colour.
    Background,
    /// Polygons filled.
    Fill,
    /// Lines, and polygons' outlines.
    Line,
    /// Points as circles.
    Circle,
    /// Text at points, polygons' poles or along lines.
    Symbol,
}

/// One style layer drawn.
#[derive(Debug, Clone)]
pub struct StyleLayer {
    /// Its `id`.
    pub id: String,
    /// Its type.
    pub kind: Kind,
    /// The data layer it draws (none for the background).
    pub source_layer: Option<String>,
    /// Its `filter`.
    pub filter: Option<Json>,
    /// Drawn from this zoom (MapLibre's).
    pub min_zoom: f64,
    /// Drawn below this zoom.
    pub max_zoom: f64,
    paint: serde_json::Map<String, Json>,
    layout: serde_json::Map<String, Json>,
}

/// A style document, read for one source.
#[derive(Debug, Clone)]
pub struct MapLibreStyle {
    /// Its layers drawn, in order.
    pub layers: Vec<StyleLayer>,
    /// What the document has that is not drawn, one line each.
    pub unsupported: Vec<String>,
    /// The attributes each data layer's style layers read.
    pub fields: Vec<(String, Vec<String>)>,
}

impl MapLibreStyle {
    /// Reads `spec`'s document for its source, whose data layers are
    /// `data_layers`. A document without `layers`, a source it does not
    /// name, or a layer of it reading a data layer the source lacks is an
    /// error; what is not drawn is listed in `unsupported`.
    pub fn read(spec: &MapLibreSpec, data_layers: &[&str]) -> Result<MapLibreStyle, String> {
        let doc = &*spec.document;
        let sources = doc
            .get("sources")
            .and_then(Json::as_object)
            .ok_or("the style has no `sources`")?;
        if !sources.contains_key(&spec.source) {
            return Err(format!(
                "the style has no source {:?} (it has {})",
                spec.source,
                sources
                    .keys()
                    .map(|k| format!("{k:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let listed = doc
            .get("layers")
            .and_then(Json::as_array)
            .ok_or("the style has no `layers` list")?;
        let mut layers = Vec::new();
        let mut unsupported = Vec::new();
        let mut fields: Vec<(String, Vec<String>)> = Vec::new();
        for l in listed {
            let id = l
                .get("id")
                .and_then(Json::as_str)
                .unwrap_or("?")
                .to_string();
            let kind_name = l.get("type").and_then(Json::as_str).unwrap_or("?");
            let source = l.get("source").and_then(Json::as_str);
            let kind = match kind_name {
                "background" => Kind::Background,
                "fill" => Kind::Fill,
                "line" => Kind::Line,
                "circle" => Kind::Circle,
                "symbol" => Kind::Symbol,
                other => {
                    unsupported.push(format!("layer {id:?}: type {other} is not drawn"));
                    continue;
                }
            };
            if kind != Kind::Background && source != Some(spec.source.as_str()) {
                // Another source's layer (a basemap under the data): not ours.
                unsupported.push(format!(
                    "layer {id:?}: its source {:?} is not this layer's {:?}",
                    source.unwrap_or(""),
                    spec.source
                ));
                continue;
            }
            let source_layer = l
                .get("source-layer")
                .and_then(Json::as_str)
                .map(str::to_string);
            if let Some(sl) = &source_layer
                && !data_layers.contains(&sl.as_str())
            {
                return Err(format!(
                    "layer {id:?} draws source-layer {sl:?}, which the source does not have (it has {})",
                    data_layers.join(", ")
                ));
            }
            if kind != Kind::Background && source_layer.is_none() {
                return Err(format!("layer {id:?} names no source-layer"));
            }
            let object = |key: &str| {
                l.get(key)
                    .and_then(Json::as_object)
                    .cloned()
                    .unwrap_or_default()
            };
            let (paint, layout) = (object("paint"), object("layout"));
            let allowed = SUPPORTED
                .iter()
                .find(|(k, _)| *k == kind_name)
                .map_or(&[][..], |(_, p)| *p);
            let mut read = Vec::new();
            for (name, value) in paint.iter().chain(layout.iter()) {
                if !allowed.contains(&name.as_str()) {
                    unsupported.push(format!("layer {id:?}: property {name} is not drawn"));
                    continue;
                }
                let mut unknown = Vec::new();
                expr::scan(value, &mut unknown, &mut read);
                if let Some(Json::String(template)) = (name == "text-field").then_some(value) {
                    read.extend(template_fields(template));
                }
                for u in unknown {
                    unsupported.push(format!("layer {id:?}: {name}: {u} is not evaluated"));
                }
            }
            let filter = l.get("filter").cloned();
            if let Some(f) = &filter {
                let mut unknown = Vec::new();
                expr::scan(f, &mut unknown, &mut read);
                for u in unknown {
                    unsupported.push(format!("layer {id:?}: filter: {u} is not evaluated"));
                }
            }
            if let Some(sl) = &source_layer {
                match fields.iter_mut().find(|(n, _)| n == sl) {
                    Some((_, f)) => f.extend(read),
                    None => fields.push((sl.clone(), read)),
                }
            }
            layers.push(StyleLayer {
                id,
                kind,
                source_layer,
                filter,
                min_zoom: l.get("minzoom").and_then(Json::as_f64).unwrap_or(0.0),
                max_zoom: l
                    .get("maxzoom")
                    .and_then(Json::as_f64)
                    .unwrap_or(f64::INFINITY),
                paint,
                layout,
            });
        }
        for (_, f) in &mut fields {
            f.sort();
            f.dedup();
        }
        Ok(MapLibreStyle {
            layers,
            unsupported,
            fields,
        })
    }
}

/// The `{field}` tokens of a legacy `text-field` template.
fn template_fields(template: &str) -> Vec<String> {
    template
        .split('{')
        .skip(1)
        .filter_map(|p| p.split_once('}').map(|(f, _)| f.trim().to_string()))
        .filter(|f| !f.is_empty())
        .collect()
}

impl StyleLayer {
    /// Whether it is drawn at `zoom` (MapLibre's).
    pub fn draws_at(&self, zoom: f64) -> bool {
        zoom >= self.min_zoom
            && zoom < self.max_zoom
            && self.layout.get("visibility").and_then(Json::as_str) != Some("none")
    }

    /// Whether its filter admits the feature in `ctx`.
    pub fn admits(&self, ctx: &Context<'_>) -> bool {
        self.filter
            .as_ref()
            .is_none_or(|f| expr::eval(f, ctx).truthy())
    }

    /// A paint property's value (`None` when the style does not set it).
    pub fn paint(&self, name: &str, ctx: &Context<'_>) -> Option<Val> {
        self.paint.get(name).map(|v| expr::eval(v, ctx))
    }

    /// A layout property's value.
    pub fn layout(&self, name: &str, ctx: &Context<'_>) -> Option<Val> {
        self.layout.get(name).map(|v| expr::eval(v, ctx))
    }

    /// A number property (paint, else layout), or `default`.
    pub fn number(&self, name: &str, ctx: &Context<'_>, default: f64) -> f64 {
        self.paint(name, ctx)
            .or_else(|| self.layout(name, ctx))
            .and_then(|v| v.num())
            .unwrap_or(default)
    }

    /// A colour property as RGBA in 0..1, or `default`.
    pub fn color(&self, name: &str, ctx: &Context<'_>, default: [f32; 4]) -> [f32; 4] {
        self.paint(name, ctx)
            .and_then(|v| v.color())
            .unwrap_or(default)
    }

    /// The text of a symbol layer's `text-field` for the feature in `ctx`
    /// (a legacy `{field}` template, or an expression).
    pub fn text(&self, ctx: &Context<'_>) -> Option<String> {
        let value = self.layout.get("text-field")?;
        let text = match value {
            Json::String(template) if template.contains('{') => {
                let mut out = String::new();
                let mut rest = template.as_str();
                while let Some(open) = rest.find('{') {
                    out.push_str(&rest[..open]);
                    let Some(close) = rest[open..].find('}') else {
                        break;
                    };
                    let name = &rest[open + 1..open + close];
                    if let Some(t) = expr::eval(&serde_json::json!(["get", name]), ctx).text() {
                        out.push_str(&t);
                    }
                    rest = &rest[open + close + 1..];
                }
                out.push_str(rest);
                out
            }
            other => expr::eval(other, ctx).text()?,
        };
        let text = text.trim().to_string();
        (!text.is_empty()).then_some(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_document_is_read_for_its_source_and_what_is_not_drawn_is_listed() {
        let doc = json!({
            "version": 8,
            "sources": { "world": { "type": "vector" }, "sat": { "type": "raster" } },
            "layers": [
                { "id": "bg", "type": "background", "paint": { "background-color": "#fff" } },
                { "id": "imagery", "type": "raster", "source": "sat" },
                { "id": "land", "type": "fill", "source": "world", "source-layer": "countries",
                  "filter": ["==", "continent", "Europe"],
                  "paint": { "fill-color": "#c8dcb4", "fill-pattern": "dots" } },
                { "id": "names", "type": "symbol", "source": "world", "source-layer": "countries",
                  "layout": { "text-field": "{name} ({iso})", "text-size": ["within", {}] } }
            ]
        });
        let spec = MapLibreSpec {
            document: Arc::new(doc),
            source: "world".into(),
        };
        let style = MapLibreStyle::read(&spec, &["countries"]).unwrap();
        let ids: Vec<&str> = style.layers.iter().map(|l| l.id.as_str()).collect();
        assert_eq!(ids, ["bg", "land", "names"]);
        let text = style.unsupported.join("\n");
        for part in [
            "type raster is not drawn",
            "fill-pattern is not drawn",
            "within is not evaluated",
        ] {
            assert!(text.contains(part), "{text}");
        }
        assert_eq!(
            style.fields,
            [(
                "countries".to_string(),
                vec!["continent".into(), "iso".into(), "name".into()]
            )]
        );
        let bad = MapLibreStyle::read(&spec, &["rivers"]).unwrap_err();
        assert!(bad.contains("source-layer \"countries\""), "{bad}");
        let spec = MapLibreSpec {
            source: "nope".into(),
            ..spec
        };
        assert!(
            MapLibreStyle::read(&spec, &["countries"])
                .unwrap_err()
                .contains("no source \"nope\"")
        );
    }
}
