//! A layer's named styles (`styles:`): several ways of drawing one
//! dataset, chosen per request by WMS `STYLES`, WMTS `Style`, XYZ
//! `?style=` or an OGC API `styleId`. Written as a mapping in the order
//! wanted; the first is the default.
//!
//! A style is what the layer's `style:` would be: a raster style (`type:
//! rgb`, `ramp`, `hillshade`, `expression`) for raster sources, a list of
//! drawing rules for vector sources and vector tile archives (what their
//! source's `style:` takes), or a MapLibre style document for vector
//! sources.

use serde::{Deserialize, Deserializer};
use tessera_carto::style::Rule;
use tessera_image::StyleSpec;
use tessera_source::SourceSpec;

use super::{LayerConfig, valid_name};

/// The cache key part that names a style other than the default:
/// `{key}~style={name}`. `~` is not allowed in a key, so it cannot clash
/// with a configured one.
pub const STYLE_KEY: &str = "style";

/// A layer's `style:`: a raster style (tagged by `type`), or a MapLibre
/// style document drawn by a vector source (`{ maplibre: style.json,
/// source: name }`).
#[derive(Debug, Clone, PartialEq)]
pub enum LayerStyle {
    /// A raster style.
    Raster(StyleSpec),
    /// A MapLibre style document.
    MapLibre(MapLibreRef),
}

impl Default for LayerStyle {
    fn default() -> Self {
        LayerStyle::Raster(StyleSpec::default())
    }
}

/// `style: { maplibre: style.json, source: name }`.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MapLibreRef {
    /// The style document's file (relative to the configuration file).
    pub maplibre: String,
    /// The name of the document's source this layer's data is.
    pub source: String,
}

impl schemars::JsonSchema for LayerStyle {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "LayerStyle".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let raster = generator.subschema_for::<StyleSpec>();
        let maplibre = generator.subschema_for::<MapLibreRef>();
        schemars::json_schema!({
            "description": "A raster style (tagged by `type`), or a MapLibre style document drawn by a vector source.",
            "anyOf": [raster, maplibre]
        })
    }
}

impl<'de> Deserialize<'de> for LayerStyle {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let value = serde_json::Value::deserialize(deserializer)?;
        if value.get("maplibre").is_some() {
            return serde_json::from_value(value)
                .map(LayerStyle::MapLibre)
                .map_err(D::Error::custom);
        }
        serde_json::from_value(value)
            .map(LayerStyle::Raster)
            .map_err(D::Error::custom)
    }
}

impl LayerStyle {
    /// The raster style it is (the default RGB for a MapLibre document,
    /// which the vector source draws).
    pub fn raster(&self) -> StyleSpec {
        match self {
            LayerStyle::Raster(s) => s.clone(),
            LayerStyle::MapLibre(_) => StyleSpec::default(),
        }
    }
}

/// One named style.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedStyle {
    /// Its name (`[A-Za-z0-9_.-]+`).
    pub name: String,
    /// How it draws.
    pub draw: StyleDraw,
}

/// How a named style draws.
#[derive(Debug, Clone, PartialEq)]
pub enum StyleDraw {
    /// A raster style (what `style:` takes).
    Raster(StyleSpec),
    /// Vector drawing rules (what a vector source's `style:` takes).
    Rules(Vec<Rule>),
    /// A MapLibre style document (`{ maplibre: style.json, source: name }`).
    MapLibre(MapLibreRef),
}

/// A layer's named styles in the order written; the first is the default.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NamedStyles(pub Vec<NamedStyle>);

impl schemars::JsonSchema for NamedStyles {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "NamedStyles".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let rules = generator.subschema_for::<Vec<Rule>>();
        let raster = generator.subschema_for::<StyleSpec>();
        let maplibre = generator.subschema_for::<MapLibreRef>();
        schemars::json_schema!({
            "description": "Named styles in the order written, the first the default: each a raster style, a list of drawing rules, or a MapLibre style document.",
            "type": "object",
            "additionalProperties": { "anyOf": [rules, maplibre, raster] }
        })
    }
}

impl<'de> Deserialize<'de> for NamedStyles {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        // The configuration keeps mappings in the order written
        // (serde_json's `preserve_order`).
        let map = serde_json::Map::<String, serde_json::Value>::deserialize(deserializer)?;
        let mut styles = Vec::with_capacity(map.len());
        for (name, value) in map {
            let draw = match value {
                serde_json::Value::Array(_) => serde_json::from_value(value).map(StyleDraw::Rules),
                other if other.get("maplibre").is_some() => {
                    serde_json::from_value(other).map(StyleDraw::MapLibre)
                }
                other => serde_json::from_value(other).map(StyleDraw::Raster),
            }
            .map_err(|e| D::Error::custom(format!("style {name:?}: {e}")))?;
            styles.push(NamedStyle { name, draw });
        }
        Ok(NamedStyles(styles))
    }
}

impl LayerConfig {
    /// Checks `styles:` against the rest of the layer: not beside `style:`,
    /// at least one, names valid and distinct, each of the kind its source
    /// draws with.
    pub(super) fn check_styles(&self) -> Result<(), String> {
        let Some(styles) = &self.styles else {
            return Ok(());
        };
        let at = |m: String| format!("layer {:?}: {m}", self.name);
        if self.style != LayerStyle::default() {
            return Err(at("give `style:` or `styles:`, not both".into()));
        }
        if styles.0.is_empty() {
            return Err(at("`styles:` names no style".into()));
        }
        if self.dimensions.contains_key(STYLE_KEY) {
            return Err(at(
                "a layer with `styles:` cannot have a dimension named `style`".into(),
            ));
        }
        let rules_source = matches!(self.source, SourceSpec::Archive(..))
            || matches!(&self.source, SourceSpec::Vector(v) if v.layers.is_empty());
        let vector = matches!(
            self.source,
            SourceSpec::Vector(_) | SourceSpec::PostgisAuto(_)
        );
        let mut seen = std::collections::HashSet::new();
        for s in &styles.0 {
            if !valid_name(&s.name) {
                return Err(at(format!(
                    "style name {:?} must use only letters, digits, '_', '-' and '.'",
                    s.name
                )));
            }
            if !seen.insert(s.name.to_ascii_lowercase()) {
                return Err(at(format!("style {:?} is named twice", s.name)));
            }
            match &s.draw {
                StyleDraw::Rules(rules) if rules_source => {
                    tessera_carto::style::check_rules(rules)
                        .map_err(|m| at(format!("style {:?}: {m}", s.name)))?;
                }
                StyleDraw::Rules(_) => {
                    return Err(at(format!(
                        "style {:?} is a list of drawing rules, which only a vector source with one data \
                         layer (`layer:`, not `layers:`) or a vector tile archive takes",
                        s.name
                    )));
                }
                StyleDraw::Raster(_) if vector => {
                    return Err(at(format!(
                        "style {:?}: a vector source is drawn with a list of rules \
                         (`- {{ fill: \"#c8dcb4\" }}`), not a raster style",
                        s.name
                    )));
                }
                StyleDraw::Raster(_) => {}
                StyleDraw::MapLibre(_) if matches!(self.source, SourceSpec::Vector(_)) => {}
                StyleDraw::MapLibre(_) => {
                    return Err(at(format!(
                        "style {:?}: a MapLibre style is drawn by vector sources (type: vector) only",
                        s.name
                    )));
                }
            }
        }
        Ok(())
    }

    /// The names of its styles, the default first (`default` alone for a
    /// layer without `styles:`).
    pub fn style_names(&self) -> Vec<String> {
        match &self.styles {
            None => vec![DEFAULT_STYLE.to_string()],
            Some(s) => s.0.iter().map(|s| s.name.clone()).collect(),
        }
    }

    /// The layer drawn with its `index`th named style: that style as its
    /// `style:` (or its source's rules), that style alone under `styles:`
    /// (the first is the style's name, [`LayerConfig::style_names`]), and, for any style
    /// but the default, its tiles under `{key}~style={name}`. The layer
    /// itself when it has no `styles:`.
    #[must_use]
    pub fn with_style(&self, index: usize) -> LayerConfig {
        let Some(styles) = &self.styles else {
            return self.clone();
        };
        let named = &styles.0[index];
        // It keeps its own entry alone under `styles:`, for its name.
        let mut styled = LayerConfig {
            styles: Some(NamedStyles(vec![named.clone()])),
            ..self.clone()
        };
        match &named.draw {
            StyleDraw::Raster(spec) => styled.style = LayerStyle::Raster(spec.clone()),
            StyleDraw::MapLibre(m) => styled.style = LayerStyle::MapLibre(m.clone()),
            StyleDraw::Rules(rules) => match &mut styled.source {
                SourceSpec::Vector(v) => v.style.clone_from(rules),
                SourceSpec::Archive(_, a) => a.style.clone_from(rules),
                _ => {}
            },
        }
        if index > 0 {
            let base = self.cache.key.as_deref().unwrap_or(&self.name);
            styled.cache.key = Some(format!("{base}~{STYLE_KEY}={}", named.name));
        }
        styled
    }
}

/// The name of the style of a layer without `styles:` (WMS, WMTS).
pub const DEFAULT_STYLE: &str = "default";

/// The drawing of a table without a style: Leaflet's default path style
/// (a blue outline over a translucent fill), which draws polygons, lines
/// and points (as 6-pixel circles) alike.
pub fn default_vector_rule() -> serde_json::Value {
    serde_json::json!({
        "fill": "#3388ff",
        "fill_opacity": 0.2,
        "stroke": "#3388ff",
        "stroke_width": 2,
    })
}
