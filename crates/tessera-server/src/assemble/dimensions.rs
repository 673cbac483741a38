//! Layers with dimensions: the values each dimension has, read from the
//! configuration (`values:`, each with its raster) or from a mosaic's
//! pieces (`from_path:`), and the layer at each value, each with its own
//! source, fingerprint and layer key.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use tessera_source::{GdalSourceSpec, MosaicSpec, SourceSpec};

use super::{WrapSource, plain_layer};
use crate::config::{Config, ConfigError, DimensionConfig, KindConfig, LayerConfig, ValueConfig};
use crate::dimension::{DefaultValue, Dimension, Kind, canonical};
use crate::model::{Layer, values_id};
use crate::registry::Registry;

/// A value of a dimension: its source and the files its pixels come from.
struct Value {
    canonical: String,
    source: SourceSpec,
    files: Vec<String>,
}

/// The layer `lc` (which has dimensions) as configured: the layer at its
/// default values, holding the layer at every value.
pub(super) fn layer(
    registry: &Registry,
    lc: &LayerConfig,
    config: &Config,
    wrap_source: &WrapSource,
) -> Result<Arc<Layer>, ConfigError> {
    let invalid = |m: String| ConfigError::Invalid(format!("layer {:?}: {m}", lc.name));
    let dimensions: Vec<(&String, &DimensionConfig)> = lc.dimensions.iter().collect();
    let [(name, dc)] = dimensions[..] else {
        return Err(invalid(
            "a layer takes one dimension whose values have their own sources (more are not served yet)"
                .into(),
        ));
    };
    if !(name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && name.starts_with(|c: char| c.is_ascii_lowercase()))
    {
        return Err(invalid(format!(
            "dimension name {name:?} must be lower case letters, digits and '_'"
        )));
    }
    let kind = match dc.kind {
        Some(KindConfig::Time) => Kind::Time,
        Some(KindConfig::Number) => Kind::Number,
        Some(KindConfig::Text) => Kind::Text,
        None => Kind::for_name(name),
    };
    let in_dimension = |m: String| invalid(format!("dimension {name:?}: {m}"));
    let values = match (dc.values.as_slice(), &dc.from_path) {
        ([], Some(pattern)) => from_path(lc, name, kind, pattern).map_err(in_dimension)?,
        (listed, None) if !listed.is_empty() => {
            listed_values(lc, name, kind, listed).map_err(in_dimension)?
        }
        _ => {
            return Err(in_dimension(
                "give either `values:` (each with its path) or `from_path:` (a mosaic's pieces)"
                    .into(),
            ));
        }
    };
    let mut dimension = Dimension {
        name: name.clone(),
        kind,
        values: values.iter().map(|v| v.canonical.clone()).collect(),
        default: DefaultValue::Latest,
        nearest: dc.nearest,
        max_listed: dc.max_values,
        spellings: HashMap::new(),
    };
    let mut sorted = dimension.values.clone();
    dimension.sort(&mut sorted);
    if sorted.len() != dimension.values.len() {
        return Err(in_dimension("a value is listed twice".into()));
    }
    dimension.values = sorted;
    dimension.index_spellings();
    dimension.default = match dc.default.as_deref().map(str::trim) {
        None | Some("latest") => DefaultValue::Latest,
        Some("earliest") => DefaultValue::Earliest,
        Some(text) => {
            let value = canonical(kind, name, text).map_err(|e| in_dimension(e.to_string()))?;
            if !dimension.values.contains(&value) {
                return Err(in_dimension(format!(
                    "default {value:?} is not one of its values"
                )));
            }
            DefaultValue::Value(value)
        }
    };
    let mut at_values = HashMap::with_capacity(values.len());
    for v in values {
        let mut at = lc.clone();
        at.source = v.source;
        at.dimensions.clear();
        let key_values = vec![(name.clone(), v.canonical)];
        let layer = plain_layer(registry, &at, config, wrap_source, &key_values, &v.files)?;
        at_values.insert(values_id(&key_values), Arc::new(layer));
    }
    let default = dimension
        .default_value()
        .map_err(|e| in_dimension(e.to_string()))?;
    let mut configured = (*at_values[&default]).clone();
    configured.values = Vec::new();
    configured.dimensions = vec![dimension];
    configured.at_values = at_values;
    Ok(Arc::new(configured))
}

/// Listed values, each a GDAL source with the layer's settings and its
/// own path.
fn listed_values(
    lc: &LayerConfig,
    name: &str,
    kind: Kind,
    listed: &[ValueConfig],
) -> Result<Vec<Value>, String> {
    let Some(gdal) = lc.source.as_gdal() else {
        return Err("`values:` with paths need a GDAL source (`source: { path: ... }`)".into());
    };
    listed
        .iter()
        .map(|v| {
            let value = canonical(kind, name, &v.value).map_err(|e| e.to_string())?;
            Ok(Value {
                canonical: value,
                source: SourceSpec::Gdal(GdalSourceSpec {
                    path: v.path.clone(),
                    ..gdal.clone()
                }),
                files: vec![v.path.clone()],
            })
        })
        .collect()
}

/// The values of a mosaic's pieces: each piece's path matched by
/// `pattern`, whose first group is its value; one mosaic of the pieces of
/// each value. Pieces the pattern does not match are left out (and named
/// in the log).
fn from_path(
    lc: &LayerConfig,
    name: &str,
    kind: Kind,
    pattern: &str,
) -> Result<Vec<Value>, String> {
    let SourceSpec::Mosaic(mosaic) = &lc.source else {
        return Err("`from_path` needs a mosaic source (`type: mosaic`)".into());
    };
    let Some(paths) = mosaic.piece_paths() else {
        return Err("`from_path` needs a mosaic of `dir` or `paths` (not of an index)".into());
    };
    let paths = paths.map_err(|e| tessera_source::error_chain(&e))?;
    let regex = regex::Regex::new(pattern).map_err(|e| format!("from_path {pattern:?}: {e}"))?;
    if regex.captures_len() < 2 {
        return Err(format!(
            "from_path {pattern:?} has no group to take the value from"
        ));
    }
    let mut by_value: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut unmatched = 0;
    for path in paths {
        let Some(found) = regex.captures(&path).and_then(|c| c.get(1)) else {
            unmatched += 1;
            continue;
        };
        let value =
            canonical(kind, name, found.as_str()).map_err(|e| format!("piece {path:?}: {e}"))?;
        by_value.entry(value).or_default().push(path);
    }
    if by_value.is_empty() {
        return Err(format!(
            "from_path {pattern:?} matches none of the mosaic's pieces"
        ));
    }
    if unmatched > 0 {
        tracing::warn!(layer = %lc.name, dimension = name, unmatched, "pieces of the mosaic whose path from_path does not match are left out");
    }
    Ok(by_value
        .into_iter()
        .map(|(value, paths)| Value {
            canonical: value,
            source: SourceSpec::Mosaic(Box::new(MosaicSpec {
                dir: None,
                paths: paths.clone(),
                ..(**mosaic).clone()
            })),
            files: paths,
        })
        .collect())
}

/// The shortest `refresh_secs` of the configured dimensions: how often
/// [`values_signature`] should be looked at; `None` when no dimension asks.
pub fn refresh_interval(config: &Config) -> Option<std::time::Duration> {
    config
        .layers
        .iter()
        .flat_map(|l| l.dimensions.values())
        .filter_map(|d| d.refresh_secs)
        .map(|s| std::time::Duration::from_secs_f64(s.max(0.5)))
        .min()
}

/// A hash of where the dimension values of `config` come from, as a
/// reload would read it: every mosaic piece path (with its size and time)
/// and every listed file's size and time. A different hash means the
/// values or their pixels changed.
pub fn values_signature(config: &Config) -> u128 {
    use std::fmt::Write as _;
    let mut text = String::new();
    for lc in config.layers.iter().filter(|l| !l.dimensions.is_empty()) {
        let mut files: Vec<String> = lc
            .dimensions
            .values()
            .flat_map(|d| d.values.iter().map(|v| v.path.clone()))
            .collect();
        if lc.dimensions.values().any(|d| d.from_path.is_some())
            && let SourceSpec::Mosaic(m) = &lc.source
        {
            match m.piece_paths() {
                Some(Ok(paths)) => files.extend(paths),
                Some(Err(e)) => {
                    let _ = writeln!(text, "{} {e}", lc.name);
                }
                None => {}
            }
        }
        for path in files {
            let stamp = crate::fingerprint::file_stamp(&path);
            let _ = writeln!(text, "{} {path} {stamp:?}", lc.name);
        }
    }
    tessera_store::content_hash(text.as_bytes())
}
