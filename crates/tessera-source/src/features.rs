//! What a source of vector features offers besides pixels: its data
//! layers as vector tiles hold them, the features near a point (feature
//! info) and a legend symbol per style rule. A capability, not a backend:
//! any source may offer it through [`Source::as_features`](crate::Source::as_features).

use tessera_image::Raster;

use crate::{Crs, SourceError};

/// A vector layer as vector tiles hold it (TileJSON's `vector_layers`).
#[derive(Debug, Clone, PartialEq)]
pub struct VectorLayerInfo {
    /// Its name in the tiles.
    pub name: String,
    /// Its attributes and their types (`Number`, `String`, `Boolean`).
    pub fields: Vec<(String, &'static str)>,
    /// The lowest zoom whose tiles hold it.
    pub min_zoom: u8,
    /// The highest zoom whose tiles hold it (`None`: every zoom).
    pub max_zoom: Option<u8>,
    /// The data's geometry type (`Polygon`, `Multi Polygon`, `Point`, ...).
    pub geometry: String,
}

/// A feature found at a point (feature info).
#[derive(Debug, Clone, PartialEq)]
pub struct FoundFeature {
    /// The data layer's name (as in vector tiles).
    pub layer: String,
    /// The layer's offered fields, with their values (JSON null for none).
    pub attributes: Vec<(String, serde_json::Value)>,
}

/// One legend entry: a rule's name and its symbol.
#[derive(Debug)]
pub struct LegendSymbol {
    /// The data layer it belongs to.
    pub layer: String,
    /// The rule's name.
    pub label: String,
    /// The symbol, drawn as the rule draws the layer's geometry type.
    pub symbol: Raster,
}

/// A source of vector features (see the module documentation).
pub trait FeatureSource: Send + Sync {
    /// The data layers as vector tiles hold them.
    fn vector_layers(&self) -> Vec<VectorLayerInfo>;

    /// How many style rules the layers have in all.
    fn rule_count(&self) -> usize;

    /// One symbol of `size` pixels per style rule, in drawing order.
    fn legend(&self, size: u32) -> Vec<LegendSymbol>;

    /// FeatureSource whose geometry lies within `tolerance` (CRS units) of
    /// `point` in `crs`, topmost layer first, at most `limit`, on a map of
    /// `resolution` (CRS units per pixel).
    fn features_at(
        &self,
        point: (f64, f64),
        crs: &Crs,
        resolution: f64,
        tolerance: f64,
        limit: usize,
    ) -> Result<Vec<FoundFeature>, SourceError>;
}
