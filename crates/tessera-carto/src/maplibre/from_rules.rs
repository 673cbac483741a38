//! Style rules written as MapLibre style layers, so that a browser drawing
//! a rule-styled layer's vector tiles shows what tessera draws into PNG:
//! a rule's fill as a `fill` layer, its stroke as a `line` layer, its
//! points as a `circle` layer, its label as `symbol` layers (at points and
//! polygons' insides, and along lines), each filtered by the rule's filter
//! and geometry type, between the rule's zooms.
//!
//! Rules count zooms in 256-pixel Web Mercator levels; MapLibre counts
//! 512-pixel ones, one level lower: a rule from zoom 4 is a layer from
//! MapLibre zoom 3. Square markers are drawn as circles (MapLibre has no
//! square circle).

use serde_json::{Value as Json, json};

use crate::label::{Label, Priority};
use crate::style::{Color, Filter, Rule, Shape, Value};

/// Levels between a rule's 256-pixel zooms and MapLibre's.
const ZOOM_OFFSET: f64 = 1.0;

/// The MapLibre layers drawing `rules` over `source_layer` of `source`:
/// every rule's fill, then every rule's stroke, then points, then labels
/// (as tessera places labels over every symbol), each kind in the rules'
/// order, their ids starting with `prefix`; text in `font`. tessera draws
/// feature by feature, every rule of a feature before the next feature,
/// so a later rule's fill covers only that feature's outline and every
/// shared border shows; MapLibre draws layer by layer, so strokes come
/// after all fills to show the same borders.
pub fn layers(
    prefix: &str,
    source: &str,
    source_layer: &str,
    rules: &[Rule],
    font: &str,
) -> Vec<Json> {
    let mut fills = Vec::new();
    let mut strokes = Vec::new();
    let mut points = Vec::new();
    let mut labels = Vec::new();
    for (i, rule) in rules.iter().enumerate() {
        let base = |id: &str, kind: &str, geometry: &[&str]| {
            let mut layer = json!({
                "id": format!("{prefix}-{i}-{id}"),
                "type": kind,
                "source": source,
                "source-layer": source_layer,
                "filter": filter(rule.filter.as_ref(), geometry),
            });
            zooms(&mut layer, rule.min_zoom, rule.max_zoom);
            layer
        };
        if let Some(fill) = &rule.fill {
            let mut layer = base("fill", "fill", &["Polygon", "MultiPolygon"]);
            layer["paint"] = json!({
                "fill-color": color(*fill),
                "fill-opacity": f64::from(rule.fill_opacity),
            });
            fills.push(layer);
        }
        if let Some(stroke) = &rule.stroke {
            let mut layer = base(
                "line",
                "line",
                &["LineString", "MultiLineString", "Polygon", "MultiPolygon"],
            );
            let mut paint = json!({
                "line-color": color(*stroke),
                "line-width": f64::from(rule.stroke_width),
                "line-opacity": f64::from(rule.stroke_opacity),
            });
            // MapLibre's dashes are in line widths, tessera's in pixels.
            if let Some(dash) = &rule.dash {
                let width = rule.stroke_width.max(0.1);
                paint["line-dasharray"] = json!(
                    dash.iter()
                        .map(|d| f64::from(d / width))
                        .collect::<Vec<_>>()
                );
            }
            layer["paint"] = paint;
            strokes.push(layer);
        }
        if rule.has_symbols() {
            let marker = rule.marker.clone().unwrap_or(crate::style::Marker {
                shape: Shape::Circle,
                size: 6.0,
            });
            let mut layer = base("point", "circle", &["Point", "MultiPoint"]);
            let mut paint = json!({ "circle-radius": f64::from(marker.size / 2.0) });
            match &rule.fill {
                Some(fill) => {
                    paint["circle-color"] = color(*fill);
                    paint["circle-opacity"] = json!(f64::from(rule.fill_opacity));
                }
                None => paint["circle-opacity"] = json!(0.0),
            }
            if let Some(stroke) = &rule.stroke {
                paint["circle-stroke-color"] = color(*stroke);
                paint["circle-stroke-width"] = json!(f64::from(rule.stroke_width));
                paint["circle-stroke-opacity"] = json!(f64::from(rule.stroke_opacity));
            }
            layer["paint"] = paint;
            points.push(layer);
        }
        if let Some(label) = &rule.label {
            let min_zoom = match (rule.min_zoom, label.min_zoom) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
            for (id, placement, geometry) in [
                (
                    "label",
                    "point",
                    &["Point", "MultiPoint", "Polygon", "MultiPolygon"][..],
                ),
                ("label-line", "line", &["LineString", "MultiLineString"][..]),
            ] {
                let mut layer = base(id, "symbol", geometry);
                zooms(&mut layer, min_zoom, rule.max_zoom);
                layer["layout"] = text_layout(label, font, placement);
                layer["paint"] = text_paint(label);
                labels.push(layer);
            }
        }
    }
    fills.extend(strokes);
    fills.extend(points);
    fills.extend(labels);
    fills
}

/// `minzoom`/`maxzoom` of a layer from a rule's zooms.
fn zooms(layer: &mut Json, min: Option<f64>, max: Option<f64>) {
    let map = layer.as_object_mut().expect("a layer is an object");
    map.remove("minzoom");
    map.remove("maxzoom");
    if let Some(z) = min {
        map.insert("minzoom".into(), json!((z - ZOOM_OFFSET).max(0.0)));
    }
    if let Some(z) = max {
        map.insert("maxzoom".into(), json!((z - ZOOM_OFFSET).clamp(0.0, 24.0)));
    }
}

/// A label's layout: its text (`{field}` tokens as MapLibre reads them
/// too), font, size, padding, offset (in ems) and priority (MapLibre
/// places lower sort keys first; tessera higher priorities first).
fn text_layout(label: &Label, font: &str, placement: &str) -> Json {
    let size = f64::from(label.size.max(1.0));
    let mut layout = json!({
        "text-field": label.text,
        "text-font": [font],
        "text-size": size,
        "text-padding": f64::from(label.padding),
        "symbol-placement": placement,
    });
    // MapLibre wraps point labels at 10 ems unless told; tessera draws one
    // line unless `max_width` says.
    if placement == "point" {
        layout["text-max-width"] = json!(label.max_width.map_or(1000.0, f64::from));
    }
    if label.offset != [0.0, 0.0] {
        layout["text-offset"] = json!([
            f64::from(label.offset[0]) / size,
            f64::from(label.offset[1]) / size
        ]);
    }
    match &label.priority {
        Some(Priority::Value(v)) => layout["symbol-sort-key"] = json!(-v),
        Some(Priority::Field(f)) => {
            layout["symbol-sort-key"] = json!(["*", -1, ["to-number", ["get", f], 0]]);
        }
        None => {}
    }
    layout
}

/// A label's paint: colour and halo.
fn text_paint(label: &Label) -> Json {
    let mut paint = json!({ "text-color": color(label.color) });
    if let Some(halo) = &label.halo {
        paint["text-halo-color"] = color(halo.color);
        paint["text-halo-width"] = json!(f64::from(halo.width));
    }
    paint
}

/// `color` as a CSS colour MapLibre reads.
fn color(color: Color) -> Json {
    let [r, g, b, a] = color.rgba;
    if a == 255 {
        json!(format!("#{r:02x}{g:02x}{b:02x}"))
    } else {
        json!(format!("rgba({r}, {g}, {b}, {:.3})", f64::from(a) / 255.0))
    }
}

/// A filter admitting `geometry` types and what the rule's filter admits.
fn filter(rule: Option<&Filter>, geometry: &[&str]) -> Json {
    let geometry = json!(["match", ["geometry-type"], geometry, true, false]);
    match rule.map(condition) {
        Some(condition) => json!(["all", geometry, condition]),
        None => geometry,
    }
}

/// A rule's filter as an expression: `eq`, `in`, or `min <= v < max` on a
/// number.
fn condition(f: &Filter) -> Json {
    let get = json!(["get", f.field]);
    let value = |v: &Value| match v {
        Value::Number(n) => json!(n),
        Value::Text(t) => json!(t),
    };
    if let Some(v) = &f.eq {
        return json!(["==", get, value(v)]);
    }
    if let Some(list) = &f.any_of {
        return json!([
            "in",
            get,
            ["literal", list.iter().map(value).collect::<Vec<_>>()]
        ]);
    }
    // `all` stops at the first false: the comparisons see numbers only.
    let mut all = vec![json!("all"), json!(["==", ["typeof", get], "number"])];
    if let Some(min) = f.min {
        all.push(json!([">=", get, min]));
    }
    if let Some(max) = f.max {
        all.push(json!(["<", get, max]));
    }
    Json::Array(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules_of(json_text: &str) -> Vec<Rule> {
        serde_json::from_str(json_text).unwrap()
    }

    #[test]
    fn a_fill_stroke_and_label_rule_makes_its_layers_labels_last() {
        let rules = rules_of(
            r##"[{"fill": "#c8dcb4", "stroke": "#3c3c3c", "stroke_width": 2, "dash": [4, 2],
                  "filter": {"field": "CONTINENT", "eq": "Europe"}, "min_zoom": 2},
                 {"label": {"text": "{NAME}", "size": 11, "halo": {"width": 2}, "priority": "POP_EST"}}]"##,
        );
        let layers = layers("world", "world", "countries", &rules, "Noto Sans Regular");
        let kinds: Vec<&str> = layers.iter().map(|l| l["type"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["fill", "line", "circle", "symbol", "symbol"]);
        let two = rules_of(r##"[{"fill": "#ffffff", "stroke": "#000000"}, {"fill": "#ff0000"}]"##);
        let kinds: Vec<String> = super::layers("p", "s", "l", &two, "F")
            .iter()
            .map(|l| l["id"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(
            kinds,
            ["p-0-fill", "p-1-fill", "p-0-line", "p-0-point", "p-1-point"],
            "strokes over every fill"
        );
        assert_eq!(layers[0]["paint"]["fill-color"], "#c8dcb4");
        assert_eq!(
            layers[0]["minzoom"], 1.0,
            "256-pixel zoom 2 is MapLibre's 1"
        );
        assert_eq!(layers[1]["paint"]["line-dasharray"], json!([2.0, 1.0]));
        assert_eq!(
            layers[0]["filter"][2],
            json!(["==", ["get", "CONTINENT"], "Europe"])
        );
        let label = &layers[3];
        assert_eq!(label["layout"]["text-field"], "{NAME}");
        assert_eq!(label["layout"]["text-font"], json!(["Noto Sans Regular"]));
        assert_eq!(
            label["layout"]["symbol-sort-key"],
            json!(["*", -1, ["to-number", ["get", "POP_EST"], 0]])
        );
        assert_eq!(label["paint"]["text-halo-width"], 2.0);
        assert_eq!(layers[4]["layout"]["symbol-placement"], "line");
    }

    #[test]
    fn ranges_and_lists_become_expressions() {
        let range = condition(&Filter {
            field: "pop".into(),
            eq: None,
            any_of: None,
            min: Some(10.0),
            max: Some(20.0),
        });
        assert_eq!(range[0], "all");
        assert_eq!(range.as_array().unwrap().len(), 4);
        let list = condition(&Filter {
            field: "k".into(),
            eq: None,
            any_of: Some(vec![Value::Text("a".into()), Value::Number(2.0)]),
            min: None,
            max: None,
        });
        assert_eq!(list, json!(["in", ["get", "k"], ["literal", ["a", 2.0]]]));
    }
}
