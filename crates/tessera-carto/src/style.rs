//! How features are drawn: a list of rules, each with an optional filter on
//! one attribute, a zoom range and the symbols it draws (fill, stroke,
//! marker). Every rule whose filter and zooms match a feature draws it, in
//! the order the rules are written.

use serde::{Deserialize, Serialize};

/// A colour written `#rrggbb` or `#rrggbbaa`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(into = "String")]
pub struct Color {
    /// Red, green, blue and alpha, 0..255, not premultiplied.
    pub rgba: [u8; 4],
}

impl From<Color> for String {
    fn from(c: Color) -> String {
        let [r, g, b, a] = c.rgba;
        format!("#{r:02x}{g:02x}{b:02x}{a:02x}")
    }
}

impl std::str::FromStr for Color {
    type Err = String;

    fn from_str(text: &str) -> Result<Color, String> {
        let hex = text
            .strip_prefix('#')
            .filter(|h| (h.len() == 6 || h.len() == 8) && h.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(|| format!("colour {text:?} is not #rrggbb or #rrggbbaa"))?;
        let byte = |i: usize| u8::from_str_radix(&hex[i..i + 2], 16).unwrap_or(0);
        let alpha = if hex.len() == 8 { byte(6) } else { 255 };
        Ok(Color {
            rgba: [byte(0), byte(2), byte(4), alpha],
        })
    }
}

impl<'de> Deserialize<'de> for Color {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl schemars::JsonSchema for Color {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "CssColor".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "A colour as CSS writes it: #rgb, #rrggbb, #rrggbbaa, rgb(), hsl() or a name."
        })
    }
}

/// A value an attribute is compared with: a number or a string.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum Value {
    /// Any number (integers compare as numbers too).
    Number(f64),
    /// Text, compared exactly.
    Text(String),
}

/// A feature's attribute value as read from the source.
#[derive(Debug, Clone, PartialEq)]
pub enum Attribute {
    /// No value (a null field or a missing one).
    Null,
    /// A number.
    Number(f64),
    /// Text.
    Text(String),
}

/// `filter:` of a rule: one attribute against one condition. Give exactly
/// one of `eq`, `in`, or a range (`min` inclusive, `max` exclusive).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Filter {
    /// The attribute's name.
    pub field: String,
    /// Equal to this value.
    #[serde(default)]
    pub eq: Option<Value>,
    /// Equal to one of these values.
    #[serde(default, rename = "in")]
    pub any_of: Option<Vec<Value>>,
    /// At least this number.
    #[serde(default)]
    pub min: Option<f64>,
    /// Less than this number.
    #[serde(default)]
    pub max: Option<f64>,
}

impl Filter {
    fn check(&self) -> Result<(), String> {
        let given = [
            self.eq.is_some(),
            self.any_of.is_some(),
            self.min.is_some() || self.max.is_some(),
        ];
        if given.iter().filter(|g| **g).count() != 1 {
            return Err(format!(
                "the filter on {:?} needs exactly one of eq, in, or min/max",
                self.field
            ));
        }
        Ok(())
    }

    /// Whether `value` passes.
    pub fn matches(&self, value: &Attribute) -> bool {
        let same = |v: &Value| match (v, value) {
            (Value::Number(n), Attribute::Number(a)) => same_number(*n, *a),
            (Value::Text(t), Attribute::Text(a)) => t == a,
            (Value::Text(t), Attribute::Number(a)) => {
                t.parse::<f64>().is_ok_and(|n| same_number(n, *a))
            }
            (Value::Number(n), Attribute::Text(a)) => {
                a.parse::<f64>().is_ok_and(|v| same_number(v, *n))
            }
            (_, Attribute::Null) => false,
        };
        if let Some(v) = &self.eq {
            return same(v);
        }
        if let Some(list) = &self.any_of {
            return list.iter().any(same);
        }
        let Attribute::Number(n) = value else {
            return false;
        };
        self.min.is_none_or(|m| *n >= m) && self.max.is_none_or(|m| *n < m)
    }
}

/// Whether two attribute numbers are the same value (exactly: values read
/// from data compare equal only to what is written in the rule).
fn same_number(a: f64, b: f64) -> bool {
    a.partial_cmp(&b) == Some(std::cmp::Ordering::Equal)
}

/// A point marker's shape.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Shape {
    /// A disc.
    #[default]
    Circle,
    /// An axis-aligned square.
    Square,
}

/// `marker:` of a rule: how points are drawn (filled with the rule's
/// `fill`, outlined with its `stroke`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Marker {
    /// Its shape (default circle).
    #[serde(default)]
    pub shape: Shape,
    /// Its width in pixels (default 6).
    #[serde(default = "default_marker_size")]
    pub size: f32,
}

fn default_marker_size() -> f32 {
    6.0
}

fn one() -> f32 {
    1.0
}

/// One rule of a vector style.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// A name for legends (default: the filter, or "features").
    #[serde(default)]
    pub name: Option<String>,
    /// Which features it draws (all when absent).
    #[serde(default)]
    pub filter: Option<Filter>,
    /// The lowest zoom (Web Mercator levels, fractional) it draws at.
    #[serde(default)]
    pub min_zoom: Option<f64>,
    /// The zoom from which it no longer draws.
    #[serde(default)]
    pub max_zoom: Option<f64>,
    /// Polygon and marker fill.
    #[serde(default)]
    pub fill: Option<Color>,
    /// Multiplies the fill's alpha (0..1, default 1).
    #[serde(default = "one")]
    pub fill_opacity: f32,
    /// Line, polygon outline and marker outline colour.
    #[serde(default)]
    pub stroke: Option<Color>,
    /// Stroke width in pixels (default 1).
    #[serde(default = "one")]
    pub stroke_width: f32,
    /// Multiplies the stroke's alpha (0..1, default 1).
    #[serde(default = "one")]
    pub stroke_opacity: f32,
    /// Dash pattern in pixels, on and off lengths (an even count).
    #[serde(default)]
    pub dash: Option<Vec<f32>>,
    /// How points are drawn (a 6-pixel circle when absent).
    #[serde(default)]
    pub marker: Option<Marker>,
    /// Text drawn for each feature the rule selects.
    #[serde(default)]
    pub label: Option<crate::label::Label>,
}

impl Rule {
    /// Whether the rule draws symbols (a fill or a stroke), not only a
    /// label.
    pub fn has_symbols(&self) -> bool {
        self.fill.is_some() || self.stroke.is_some()
    }

    /// Whether the rule draws at `zoom`.
    pub fn draws_at(&self, zoom: f64) -> bool {
        self.min_zoom.is_none_or(|z| zoom >= z) && self.max_zoom.is_none_or(|z| zoom < z)
    }

    /// Its name for legends.
    pub fn label(&self) -> String {
        if let Some(n) = &self.name {
            return n.clone();
        }
        match &self.filter {
            None => "features".into(),
            Some(f) => match (&f.eq, &f.any_of) {
                (Some(v), _) => format!("{} = {}", f.field, value_text(v)),
                (_, Some(list)) => format!(
                    "{} in {}",
                    f.field,
                    list.iter().map(value_text).collect::<Vec<_>>().join(", ")
                ),
                _ => format!(
                    "{} in [{}, {})",
                    f.field,
                    f.min.map_or("-inf".into(), |v| v.to_string()),
                    f.max.map_or("inf".into(), |v| v.to_string())
                ),
            },
        }
    }
}

fn value_text(v: &Value) -> String {
    match v {
        Value::Number(n) => n.to_string(),
        Value::Text(t) => t.clone(),
    }
}

/// Checks the rules: filters well formed, opacities in 0..1, widths and
/// sizes positive, dashes an even count of positive lengths. No rules is
/// allowed: the layer draws nothing into images (vector tiles only).
pub fn check_rules(rules: &[Rule]) -> Result<(), String> {
    for (i, r) in rules.iter().enumerate() {
        let at = |m: String| format!("style rule {}: {m}", i + 1);
        if let Some(f) = &r.filter {
            f.check().map_err(at)?;
        }
        for (name, v) in [
            ("fill_opacity", r.fill_opacity),
            ("stroke_opacity", r.stroke_opacity),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(at(format!("{name} must be between 0 and 1, not {v}")));
            }
        }
        if !(r.stroke_width > 0.0 && r.stroke_width <= 100.0) {
            return Err(at(format!(
                "stroke_width must be in (0, 100], not {}",
                r.stroke_width
            )));
        }
        if let Some(m) = &r.marker
            && !(m.size > 0.0 && m.size <= 256.0)
        {
            return Err(at(format!(
                "marker size must be in (0, 256], not {}",
                m.size
            )));
        }
        if let Some(d) = &r.dash
            && (d.is_empty() || d.len() % 2 != 0 || d.iter().any(|v| v.is_nan() || *v <= 0.0))
        {
            return Err(at("dash needs an even count of positive lengths".into()));
        }
        if r.fill.is_none() && r.stroke.is_none() && r.label.is_none() {
            return Err(at(
                "a rule draws nothing without fill, stroke or label".into()
            ));
        }
        if let Some(l) = &r.label {
            l.check().map_err(at)?;
        }
    }
    Ok(())
}

/// The attributes the rules read.
pub fn fields_used(rules: &[Rule]) -> Vec<String> {
    let mut fields: Vec<String> = rules
        .iter()
        .filter_map(|r| r.filter.as_ref().map(|f| f.field.clone()))
        .chain(
            rules
                .iter()
                .flat_map(|r| r.label.iter().flat_map(crate::label::Label::fields)),
        )
        .collect();
    fields.sort();
    fields.dedup();
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(json: &str) -> Vec<Rule> {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn colours_parse_with_and_without_alpha_and_bad_ones_say_why() {
        assert_eq!("#ff8000".parse::<Color>().unwrap().rgba, [255, 128, 0, 255]);
        assert_eq!(
            "#ff800080".parse::<Color>().unwrap().rgba,
            [255, 128, 0, 128]
        );
        let e = "red".parse::<Color>().unwrap_err();
        assert!(e.contains("#rrggbb"), "{e}");
    }

    #[test]
    fn filters_match_equality_lists_and_ranges() {
        let r = rules(
            r##"[{"filter": {"field": "continent", "eq": "Europe"}, "fill": "#000000"},
                 {"filter": {"field": "pop", "min": 10, "max": 20}, "fill": "#000000"},
                 {"filter": {"field": "iso", "in": ["FR", 42]}, "fill": "#000000"}]"##,
        );
        check_rules(&r).unwrap();
        let f = |i: usize| r[i].filter.as_ref().unwrap();
        assert!(f(0).matches(&Attribute::Text("Europe".into())));
        assert!(!f(0).matches(&Attribute::Text("Asia".into())));
        assert!(!f(0).matches(&Attribute::Null));
        assert!(f(1).matches(&Attribute::Number(10.0)));
        assert!(!f(1).matches(&Attribute::Number(20.0)));
        assert!(f(2).matches(&Attribute::Text("FR".into())));
        assert!(f(2).matches(&Attribute::Number(42.0)));
        assert_eq!(fields_used(&r), ["continent", "iso", "pop"]);
    }

    #[test]
    fn bad_rules_are_named() {
        let e = check_rules(&rules(r##"[{"fill": "#000000"}, {"stroke_width": 2}]"##)).unwrap_err();
        assert!(e.contains("rule 2") && e.contains("draws nothing"), "{e}");
        let e = check_rules(&rules(
            r##"[{"filter": {"field": "a", "eq": 1, "min": 2}, "fill": "#000000"}]"##,
        ))
        .unwrap_err();
        assert!(e.contains("exactly one"), "{e}");
        let e = check_rules(&rules(r##"[{"stroke": "#000000", "dash": [4]}]"##)).unwrap_err();
        assert!(e.contains("even"), "{e}");
    }

    #[test]
    fn zoom_ranges_include_the_minimum_and_exclude_the_maximum() {
        let r = rules(r##"[{"min_zoom": 3, "max_zoom": 6, "fill": "#000000"}]"##);
        assert!(
            !r[0].draws_at(2.9) && r[0].draws_at(3.0) && r[0].draws_at(5.9) && !r[0].draws_at(6.0)
        );
    }
}
