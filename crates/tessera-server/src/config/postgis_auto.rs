//! Layers whose source is `postgis_auto` become one `vector` layer per
//! table or view with a geometry column, found when the configuration is
//! read (at start and on every reload): named `schema.table`, drawn with a
//! default style unless the entry has one, and otherwise as the entry says
//! (grids, formats, cache, zooms).

use serde_json::json;
use tessera_source::{PostgisAutoSpec, SourceSpec, SpatialTable};

use super::{Config, ConfigError, LayerConfig, clean_name};

/// The drawing of a table without a style: Leaflet's default path style
/// (a blue outline over a translucent fill), which draws polygons, lines
/// and points (as 6-pixel circles) alike.
pub fn default_vector_rule() -> serde_json::Value {
    json!({
        "fill": "#3388ff",
        "fill_opacity": 0.2,
        "stroke": "#3388ff",
        "stroke_width": 2,
    })
}

impl Config {
    /// Replaces each `postgis_auto` layer with a layer per spatial table,
    /// and records the shortest `refresh_secs` among them.
    pub(super) fn expand_postgis_auto(&mut self) -> Result<(), ConfigError> {
        if !self
            .layers
            .iter()
            .any(|l| matches!(l.source, SourceSpec::PostgisAuto(_)))
        {
            return Ok(());
        }
        let mut layers = Vec::with_capacity(self.layers.len());
        for entry in std::mem::take(&mut self.layers) {
            let SourceSpec::PostgisAuto(auto) = &entry.source else {
                layers.push(entry);
                continue;
            };
            if let Some(secs) = auto.refresh_secs {
                self.watch_secs = Some(self.watch_secs.map_or(secs, |w| w.min(secs)));
            }
            let tables = auto.discover().map_err(|source| ConfigError::Source {
                layer: entry.name.clone(),
                source,
            })?;
            tracing::info!(entry = %entry.name, tables = tables.len(), "PostGIS tables found");
            for table in &tables {
                layers.push(table_layer(&entry, auto, table)?);
            }
        }
        self.layers = layers;
        Ok(())
    }
}

/// The layer of one table, from the entry that found it.
fn table_layer(
    entry: &LayerConfig,
    auto: &PostgisAutoSpec,
    table: &SpatialTable,
) -> Result<LayerConfig, ConfigError> {
    let qualified = format!("{}.{}", table.schema, table.table);
    let name = clean_name(&qualified);
    let source = json!({
        "type": "vector",
        "path": auto.path,
        "layer": qualified,
        "fields": table.columns,
        "style": [default_vector_rule()],
    });
    let source: SourceSpec = serde_json::from_value(source).map_err(|e| {
        ConfigError::Invalid(format!("layer {:?}: table {qualified}: {e}", entry.name))
    })?;
    let mut layer = entry.clone();
    layer.name = name;
    layer.title = Some(qualified.clone());
    layer.description = Some(format!(
        "{} features of the PostGIS table {qualified} (SRID {}).",
        table.kind.to_ascii_lowercase(),
        table.srid
    ));
    layer.source = source;
    Ok(layer)
}
