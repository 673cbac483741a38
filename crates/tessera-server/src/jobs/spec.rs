//! What a job is asked to do (`POST /admin/jobs`), and the plans it becomes.

use serde::{Deserialize, Serialize};

use crate::plan::{
    PlanArea, TilePlan, parse_bbox, parse_zooms, polygons_from_geojson, styled_layers_at,
};
use crate::registry::Registry;
use crate::suggest::Unknown;

/// What a job does to its tiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobKind {
    /// Renders the metatiles not stored yet (`tessera seed`).
    Seed,
    /// Renders every metatile again, stored or not (`tessera seed --force`).
    Reseed,
    /// Removes the tiles (`tessera truncate`).
    Truncate,
}

/// A job's request, as posted and as recorded (the record is this JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    /// What to do.
    pub kind: JobKind,
    /// The layer.
    pub layer: String,
    /// Zooms: `A..B` or `Z`.
    pub zoom: String,
    /// The grid (default: the layer's first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grid: Option<String>,
    /// The tile format's extension (default: the layer's first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    /// `minx,miny,maxx,maxy` (default: the layer's extent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bbox: Option<String>,
    /// The CRS of `bbox` (default `EPSG:4326`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bbox_crs: Option<String>,
    /// A GeoJSON Polygon or MultiPolygon (a Feature or FeatureCollection
    /// of them) in lon/lat: only the metatiles it touches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub polygon: Option<serde_json::Value>,
    /// Dimension values, one spec per dimension as `--dimension` takes
    /// them (`time=all`, `elevation=0,500`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dimensions: Vec<String>,
    /// Styles (`all`: every one); none: the default style.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub styles: Vec<String>,
    /// Metatiles rendered at once (default: the CPU cores).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<usize>,
    /// Most tiles rendered per second (default: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
}

impl JobSpec {
    /// The plans the job works through, one per style and dimension value
    /// (each plan's metatiles in their fixed order, which the record of
    /// done metatiles refers to), or why the spec is refused.
    pub fn plans(&self, registry: &Registry) -> Result<Vec<TilePlan>, String> {
        crate::seeding::check_options(self.threads, self.rate)?;
        let layer = registry
            .find_layer(&self.layer, &|_| true)
            .map_err(|unknown| format!("unknown layer {unknown}"))?;
        let zooms = parse_zooms(&self.zoom)?;
        let grid = match &self.grid {
            Some(g) => g.clone(),
            None => layer
                .grids
                .first()
                .cloned()
                .ok_or("the layer has no grid")?,
        };
        let format = match &self.format {
            Some(f) => Some(tessera_grid::TileFormat::from_extension(f).ok_or_else(|| {
                let offered = layer.formats.iter().map(|f| f.extension());
                format!("unknown format {}", Unknown::among(f, "formats", offered))
            })?),
            None => None,
        };
        let area = match (&self.bbox, &self.polygon) {
            (Some(_), Some(_)) => return Err("give `bbox` or `polygon`, not both".into()),
            (Some(b), None) => PlanArea::BBox(
                parse_bbox(b)?,
                self.bbox_crs.clone().unwrap_or_else(|| "EPSG:4326".into()),
            ),
            (None, Some(p)) => PlanArea::Polygons(
                polygons_from_geojson(&p.to_string())
                    .map_err(|e| tessera_source::error_chain(&e))?,
            ),
            (None, None) => PlanArea::Extent,
        };
        let plan = TilePlan::new(registry, &self.layer, &grid, format, zooms, &area)
            .map_err(|e| tessera_source::error_chain(&e))?;
        let styles: Vec<&str> = self.styles.iter().map(String::as_str).collect();
        let specs: Vec<&str> = self.dimensions.iter().map(String::as_str).collect();
        let layers = styled_layers_at(&plan.layer, &styles, &specs)
            .map_err(|e| tessera_source::error_chain(&e))?;
        Ok(plan.at_each(layers))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_reads_from_json_and_refuses_unknown_fields() {
        let spec: JobSpec = serde_json::from_value(serde_json::json!({
            "kind": "seed", "layer": "relief", "zoom": "0..3", "rate": 50.0
        }))
        .unwrap();
        assert_eq!(spec.kind, JobKind::Seed);
        assert_eq!(spec.rate, Some(50.0));
        let again: JobSpec = serde_json::from_str(&serde_json::to_string(&spec).unwrap()).unwrap();
        assert_eq!(again, spec);
        let typo = serde_json::from_value::<JobSpec>(serde_json::json!({
            "kind": "seed", "layer": "relief", "zooms": "0..3"
        }));
        assert!(typo.is_err());
        let kind = serde_json::from_value::<JobSpec>(serde_json::json!({
            "kind": "burn", "layer": "relief", "zoom": "0"
        }));
        assert!(kind.is_err());
    }
}
