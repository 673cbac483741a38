//! What a configuration names but does not hold, found before its layers
//! are built (reading the configuration itself does no I/O): the tables
//! of `postgis_auto` entries, and the MapLibre style documents of layers
//! drawn with one.
//!
//! Layers whose source is `postgis_auto` become one `vector` layer per
//! table or view with a geometry column, found at start and on every
//! reload: named `schema.table`, drawn with a default style unless the
//! entry has one, and otherwise as the entry says (grids, formats, cache,
//! zooms).

use serde_json::json;
use tessera_carto::maplibre::MapLibreSpec;
use tessera_source::{PostgisAutoSpec, SourceSpec, SpatialTable};

use crate::config::{
    Config, ConfigError, LayerConfig, LayerStyle, clean_name, default_vector_rule,
};

/// Finds what `config` names but does not hold: each `postgis_auto` entry
/// replaced by a layer per spatial table (the shortest `refresh_secs`
/// recorded in `watch_secs`), then the whole checked again. A
/// configuration found already is left as it is.
pub fn discover(config: &mut Config) -> Result<(), ConfigError> {
    if config.expand_postgis_auto()? {
        config.check()?;
    }
    Ok(())
}

/// Reads the MapLibre document of `style` into the source spec `source`
/// (a vector source's) draws with; nothing for a raster style.
pub fn read_maplibre(style: &LayerStyle, source: &mut SourceSpec) -> Result<(), String> {
    let LayerStyle::MapLibre(m) = style else {
        return Ok(());
    };
    let SourceSpec::Vector(v) = source else {
        return Err("a MapLibre style is drawn by vector sources (type: vector) only".into());
    };
    // A style document is small; 64 MiB is far past any real one.
    let text =
        tessera_source::local_file::read_regular_text(std::path::Path::new(&m.maplibre), 64 << 20)
            .map_err(|e| format!("the MapLibre style: {e}"))?;
    let document: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| format!("the MapLibre style {} is not JSON: {e}", m.maplibre))?;
    v.maplibre = Some(MapLibreSpec {
        document: std::sync::Arc::new(document),
        source: m.source.clone(),
    });
    Ok(())
}

impl Config {
    /// Replaces each `postgis_auto` layer with a layer per spatial table,
    /// and records the shortest `refresh_secs` among them; whether there
    /// was any.
    fn expand_postgis_auto(&mut self) -> Result<bool, ConfigError> {
        if !self
            .layers
            .iter()
            .any(|l| matches!(l.source, SourceSpec::PostgisAuto(_)))
        {
            return Ok(false);
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
        Ok(true)
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
