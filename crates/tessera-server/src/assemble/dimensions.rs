//! Layers with dimensions: the values of each dimension, read from the
//! configuration (`values:`, each with its raster), from a mosaic's pieces
//! (`from_path:` over their paths, `from_field:` over an index's fields or
//! STAC items' properties) or from the bands of one file (`from_bands:`),
//! or from an upstream WMS that is asked for each value (listed, or read
//! from its capabilities), and the layer at each combination of values,
//! each with its own source, fingerprint and layer key.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use tessera_source::{AskedValue, GdalSourceSpec, Listed, MosaicSpec, Source, SourceSpec};

use super::{WrapSource, plain_layer};
use crate::config::{Config, ConfigError, DimensionConfig, KindConfig, LayerConfig, ValueConfig};
use crate::dimension::{DefaultValue, Dimension, Kind, canonical, time_from_offset};
use crate::model::{AtValue, Layer, values_id};
use crate::registry::Registry;

/// What the layer at a value is made with, when first asked: the grids,
/// stores and coordinators of the registry it is built for, the
/// configuration and the source hook.
struct Maker {
    registry: Registry,
    config: Config,
    wrap_source: Arc<WrapSource>,
}

/// A combination of values (one per dimension, in the layer's dimension
/// order): its source and the files its pixels come from.
struct Combination {
    values: Values,
    source: SourceSpec,
    files: Vec<String>,
    /// The source already open (an upstream asked with the values), else
    /// opened from `source`.
    opened: Option<Arc<dyn Source>>,
}

/// A dimension as configured, with its kind.
struct Configured<'a> {
    name: &'a str,
    config: &'a DimensionConfig,
    kind: Kind,
}

/// Where the values of a layer's dimensions come from (one place for all).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    Listed,
    Path,
    Bands,
    Field,
    Upstream,
    Vector,
    Items,
}

impl Origin {
    fn of(dc: &DimensionConfig, source: &SourceSpec) -> Result<Origin, String> {
        if source.kind() == "stac" {
            return match dc.from_items.as_deref() {
                Some("datetime")
                    if dc.values.is_empty()
                        && dc.from_path.is_none()
                        && dc.from_bands.is_none()
                        && dc.from_field.is_none() =>
                {
                    Ok(Origin::Items)
                }
                _ => Err(
                    "a STAC search layer is served at its items' datetimes: give \
                          `from_items: datetime` (and `resolution:`) alone"
                        .into(),
                ),
            };
        }
        if dc.from_items.is_some() || dc.resolution.is_some() {
            return Err(
                "`from_items` and `resolution` are for a STAC search layer (`type: stac`)".into(),
            );
        }
        if source.kind() == "vector" {
            if dc.from_field.is_none() || dc.from_path.is_some() || dc.from_bands.is_some() {
                return Err("a vector layer compares a field with each value: give `from_field:` (its values are the field's, or those listed in `values:`)".into());
            }
            if dc.values.iter().any(|v| v.path.is_some()) {
                return Err(
                    "a vector layer filters its features by each value: `values:` have no paths"
                        .into(),
                );
            }
            return Ok(Origin::Vector);
        }
        if matches!(source.kind(), "wms" | "wmts" | "xyz") {
            if dc.from_path.is_some() || dc.from_bands.is_some() || dc.from_field.is_some() {
                return Err(
                    "an upstream service is asked for each value: list them in `values:` \
                     (without paths) or leave them to its capabilities (WMS, WMTS)"
                        .into(),
                );
            }
            if dc.values.iter().any(|v| v.path.is_some()) {
                return Err(
                    "an upstream service is asked for each value: `values:` have no paths".into(),
                );
            }
            return Ok(Origin::Upstream);
        }
        let given = [
            (!dc.values.is_empty(), Origin::Listed),
            (dc.from_path.is_some(), Origin::Path),
            (dc.from_bands.is_some(), Origin::Bands),
            (dc.from_field.is_some(), Origin::Field),
        ];
        let mut found = given.iter().filter(|(g, _)| *g).map(|(_, o)| *o);
        match (found.next(), found.next()) {
            (Some(origin), None) => Ok(origin),
            _ => Err(
                "give one of `values:` (each with its path), `from_path:` (a mosaic's \
                 pieces), `from_bands:` (a band metadata item) or `from_field:` (an index \
                 field or STAC property)"
                    .into(),
            ),
        }
    }
}

/// The layer `lc` (which has dimensions) as configured: the layer at its
/// default values, holding the layer at every combination of values.
pub(super) fn layer(
    registry: &Registry,
    lc: &LayerConfig,
    config: &Config,
    wrap_source: &Arc<WrapSource>,
) -> Result<Arc<Layer>, ConfigError> {
    let invalid = |m: String| ConfigError::Invalid(format!("layer {:?}: {m}", lc.name));
    let mut configured = Vec::with_capacity(lc.dimensions.len());
    let mut origin = None;
    for (name, dc) in &lc.dimensions {
        let in_dimension = |m: String| invalid(format!("dimension {name:?}: {m}"));
        if !(name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            && name.starts_with(|c: char| c.is_ascii_lowercase()))
        {
            return Err(invalid(format!(
                "dimension name {name:?} must be lower case letters, digits and '_'"
            )));
        }
        let this = Origin::of(dc, &lc.source).map_err(in_dimension)?;
        if origin.is_some_and(|o| o != this) {
            return Err(invalid(
                "the values of all its dimensions come from one place (all `from_path`, all \
                 `from_bands` or all `from_field`)"
                    .into(),
            ));
        }
        origin = Some(this);
        let kind = match dc.kind {
            Some(KindConfig::Time) => Kind::Time,
            Some(KindConfig::Number) => Kind::Number,
            Some(KindConfig::Text) => Kind::Text,
            None => Kind::for_name(name),
        };
        configured.push(Configured {
            name,
            config: dc,
            kind,
        });
    }
    let mut vector_source = None;
    let combinations = match origin {
        Some(Origin::Listed) => match configured.as_slice() {
            [one] => listed_values(lc, one),
            _ => Err("`values:` with their own paths are for a layer with one dimension".into()),
        },
        Some(Origin::Path) => from_path(lc, &configured),
        Some(Origin::Bands) => from_bands(lc, config, &configured),
        Some(Origin::Field) => from_field(lc, &configured),
        Some(Origin::Upstream) => upstream(lc, config, &configured, wrap_source),
        Some(Origin::Vector) => match configured.as_slice() {
            [one] => vector(lc, config, one, wrap_source, &mut vector_source),
            _ => Err("a vector layer takes one dimension".into()),
        },
        Some(Origin::Items) => match configured.as_slice() {
            [one] if one.kind == Kind::Time => items(lc, config, one, wrap_source),
            _ => Err("a STAC search layer takes one dimension, of times".into()),
        },
        None => Err("no dimension".into()),
    }
    .map_err(invalid)?;
    let mut dimensions = Vec::with_capacity(configured.len());
    for (i, d) in configured.iter().enumerate() {
        dimensions.push(
            dimension(d, combinations.iter().map(|c| c.values[i].1.clone()))
                .map_err(|m| invalid(format!("dimension {:?}: {m}", d.name)))?,
        );
    }
    let mut defaults = Vec::with_capacity(dimensions.len());
    for d in &dimensions {
        let value = d
            .default_value()
            .map_err(|e| invalid(format!("dimension {:?}: {e}", d.name)))?;
        defaults.push((d.name.clone(), value));
    }
    let default_id = values_id(&defaults);
    // The layer at the default values is made now (it is the layer as
    // configured); the others when first asked.
    let maker = Arc::new(Maker {
        registry: Registry::new(
            registry.grids.clone(),
            registry.stores.clone(),
            registry.coordinators.clone(),
        ),
        config: config.clone(),
        wrap_source: wrap_source.clone(),
    });
    let mut at_values = HashMap::with_capacity(combinations.len());
    let mut default = None;
    // Each value's layer is `lc` with its source and no dimensions (cloned
    // from one copy without them: the values listed there can be many).
    let template = LayerConfig {
        dimensions: std::collections::BTreeMap::new(),
        ..lc.clone()
    };
    for c in combinations {
        let id = values_id(&c.values);
        let mut at = template.clone();
        at.source = c.source;
        let value = if id == default_id {
            let layer = Arc::new(plain_layer(
                registry,
                &at,
                config,
                wrap_source,
                &c.values,
                &c.files,
                c.opened,
            )?);
            default = Some(layer.clone());
            AtValue::made(layer)
        } else {
            let maker = maker.clone();
            AtValue::lazy(Box::new(move || {
                plain_layer(
                    &maker.registry,
                    &at,
                    &maker.config,
                    &maker.wrap_source,
                    &c.values,
                    &c.files,
                    c.opened.clone(),
                )
                .map_err(|e| tessera_source::error_chain(&e))
            }))
        };
        if at_values.insert(id.clone(), Arc::new(value)).is_some() {
            return Err(invalid(format!("values {id:?} are listed twice")));
        }
    }
    let Some(default) = default else {
        return Err(invalid(format!(
            "nothing is served at the default values {defaults:?} (set each dimension's `default:`)"
        )));
    };
    let mut layer = (*default).clone();
    layer.values = Vec::new();
    if let (Some(source), [d]) = (vector_source, configured.as_slice()) {
        layer.ranges = Some(ranges(&layer, source, d));
    }
    layer.dimensions = dimensions;
    layer.at_values = at_values;
    Ok(Arc::new(layer))
}

/// The layer at ranges of `d`'s values: `template` (the layer at a value)
/// drawing the features of `source` whose field lies in the range, not
/// cached (any range may be asked).
fn ranges(template: &Layer, source: Arc<dyn Source>, d: &Configured<'_>) -> crate::model::Ranges {
    let template = template.clone();
    let (name, kind) = (d.name.to_string(), value_kind(d.kind));
    let field = d.config.from_field.clone().unwrap_or_default();
    crate::model::Ranges::new(Arc::new(move |from: &str, to: &str| {
        let asked = [AskedValue {
            name: name.clone(),
            kind,
            field: Some(field.clone()),
            spelled: format!("{from}/{to}"),
            from: from.to_string(),
            to: to.to_string(),
        }];
        let at = source
            .at_values(&asked)
            .ok_or("the source takes no values")?
            .map_err(|e| tessera_source::error_chain(&e))?;
        let range = format!("{from}/{to}");
        let mut layer = template.clone();
        layer.source = at;
        layer.cache = None;
        layer.cache_key =
            crate::dimension::layer_key(&template.name, &[(name.clone(), format!("{from}--{to}"))]);
        layer.values = vec![(name.clone(), range)];
        Ok(layer)
    }))
}

fn value_kind(kind: Kind) -> tessera_source::ValueKind {
    match kind {
        Kind::Time => tessera_source::ValueKind::Time,
        Kind::Number => tessera_source::ValueKind::Number,
        Kind::Text => tessera_source::ValueKind::Text,
    }
}

/// The values of a vector layer's field (its distinct values, or those
/// listed), each the layer's features whose field has that value; the
/// source is opened once and shared by every value (and by ranges, through
/// `opened`).
fn vector(
    lc: &LayerConfig,
    config: &Config,
    d: &Configured<'_>,
    wrap_source: &Arc<WrapSource>,
    opened: &mut Option<Arc<dyn Source>>,
) -> Result<Vec<Combination>, String> {
    if !matches!(lc.source, SourceSpec::Vector(_)) {
        return Err("`from_field` on a layer of features needs a vector source".into());
    }
    let failed = |e: tessera_source::SourceError| tessera_source::error_chain(&e);
    let field = d.config.from_field.as_deref().unwrap_or_default();
    let source = tessera_source::open_source(&lc.source, &config.gdal).map_err(failed)?;
    let raw: Vec<String> = if d.config.values.is_empty() {
        match source.listed_values(d.name, Some(field), crate::dimension::MAX_EXPANDED) {
            Some(Ok(Listed::Values(values))) => values,
            Some(Ok(Listed::Extent(text))) => vec![text],
            Some(Err(e)) => return Err(failed(e)),
            None => return Err(format!("field {field:?} has no value")),
        }
    } else {
        d.config.values.iter().map(|v| v.value.clone()).collect()
    };
    let mut seen = std::collections::BTreeSet::new();
    let mut combinations = Vec::new();
    for text in raw {
        let value = canonical(d.kind, d.name, &text)
            .map_err(|e| format!("field {field:?} value {text:?}: {e}"))?;
        if !seen.insert(value.clone()) {
            continue;
        }
        let asked = [AskedValue::one(
            d.name,
            value_kind(d.kind),
            Some(field),
            &value,
            &value,
        )];
        let at = source
            .at_values(&asked)
            .ok_or("`from_field` on a layer of features needs a vector source")?
            .map_err(failed)?;
        combinations.push(Combination {
            values: vec![(d.name.to_string(), value)],
            source: lc.source.at_values(&asked),
            files: Vec::new(),
            opened: Some(wrap_source(&lc.name, at)),
        });
    }
    if combinations.is_empty() {
        return Err(format!("field {field:?} has no value"));
    }
    *opened = Some(source);
    Ok(combinations)
}

/// The values of a STAC search layer's time dimension: one per period
/// (`resolution`, default a day) in which the search finds items, each the
/// layer with its search narrowed to that period
/// ([`tessera_source::pgstac::StacSource::within`], sharing the
/// catalogue's connections).
fn items(
    lc: &LayerConfig,
    config: &Config,
    d: &Configured<'_>,
    wrap_source: &Arc<WrapSource>,
) -> Result<Vec<Combination>, String> {
    use tessera_source::pgstac::StacSource;
    let SourceSpec::Stac(spec) = &lc.source else {
        return Err("`from_items` needs a STAC search source".into());
    };
    let failed = |e: tessera_source::SourceError| tessera_source::error_chain(&e);
    let period = d.config.resolution.unwrap_or_default();
    let source = StacSource::open(spec, &config.gdal).map_err(failed)?;
    let starts = source
        .periods(period, crate::dimension::MAX_EXPANDED)
        .map_err(failed)?;
    let mut combinations = Vec::with_capacity(starts.len());
    for start in starts {
        let value = canonical(d.kind, d.name, &start).map_err(|e| format!("{start:?}: {e}"))?;
        let begins = chrono::DateTime::parse_from_rfc3339(&start)
            .map_err(|e| format!("{start:?}: {e}"))?
            .with_timezone(&chrono::Utc);
        let ends = period
            .next(begins)
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let at = source.within(&start, &ends).map_err(failed)?;
        let mut narrowed = (**spec).clone();
        narrowed.search = at.search().clone();
        combinations.push(Combination {
            values: vec![(d.name.to_string(), value)],
            source: SourceSpec::Stac(Box::new(narrowed)),
            files: Vec::new(),
            opened: Some(wrap_source(&lc.name, Arc::new(at))),
        });
    }
    if combinations.is_empty() {
        return Err("the search finds no item with a datetime".into());
    }
    Ok(combinations)
}

/// The dimension `d` with the canonical `values` found for it (repeats
/// dropped), sorted, indexed and with its default.
fn dimension(
    d: &Configured<'_>,
    values: impl Iterator<Item = String>,
) -> Result<Dimension, String> {
    let mut dimension = Dimension {
        name: d.name.to_string(),
        kind: d.kind,
        values: Vec::new(),
        default: DefaultValue::Latest,
        nearest: d.config.nearest,
        max_listed: d.config.max_values,
        spellings: HashMap::new(),
    };
    let mut values: Vec<String> = values.collect();
    dimension.sort(&mut values);
    values.dedup();
    dimension.values = values;
    dimension.index_spellings();
    dimension.default = match d.config.default.as_deref().map(str::trim) {
        None | Some("latest") => DefaultValue::Latest,
        Some("earliest") => DefaultValue::Earliest,
        Some(text) => {
            let value = canonical(d.kind, d.name, text).map_err(|e| e.to_string())?;
            if !dimension.values.contains(&value) {
                return Err(format!("default {value:?} is not one of its values"));
            }
            DefaultValue::Value(value)
        }
    };
    Ok(dimension)
}

/// Listed values of the layer's one dimension, each a GDAL source with the
/// layer's settings and its own path.
fn listed_values(lc: &LayerConfig, d: &Configured<'_>) -> Result<Vec<Combination>, String> {
    let Some(gdal) = lc.source.as_gdal() else {
        return Err("`values:` with paths need a GDAL source (`source: { path: ... }`)".into());
    };
    let listed: &[ValueConfig] = &d.config.values;
    let mut seen = std::collections::HashSet::new();
    listed
        .iter()
        .map(|v| {
            let Some(path) = &v.path else {
                return Err(format!(
                    "dimension {:?}: value {:?} needs the `path` of its raster",
                    d.name, v.value
                ));
            };
            let value = canonical(d.kind, d.name, &v.value).map_err(|e| e.to_string())?;
            if !seen.insert(value.clone()) {
                return Err(format!(
                    "dimension {:?}: value {value:?} is listed twice",
                    d.name
                ));
            }
            Ok(Combination {
                values: vec![(d.name.to_string(), value)],
                source: SourceSpec::Gdal(GdalSourceSpec {
                    path: path.clone(),
                    ..gdal.clone()
                }),
                files: vec![path.clone()],
                opened: None,
            })
        })
        .collect()
}

/// Values, one per dimension (name, canonical value).
type Values = Vec<(String, String)>;

/// Things (pieces, bands) grouped by their values, one value per dimension;
/// those lacking a value are counted and left out.
fn group<T>(
    items: impl Iterator<Item = (Vec<Option<String>>, T)>,
    dimensions: &[Configured<'_>],
    what: &str,
    lc: &LayerConfig,
) -> Result<BTreeMap<Values, Vec<T>>, String> {
    let mut groups: BTreeMap<Values, Vec<T>> = BTreeMap::new();
    let mut lacking = 0;
    // Items whose value is not one (`2024-13-45` for a date): left out
    // with a warning, so that one odd file name does not stop the layer.
    let mut unreadable = 0;
    let mut first_unreadable = None;
    'items: for (raw, item) in items {
        let mut values = Vec::with_capacity(dimensions.len());
        for (d, raw) in dimensions.iter().zip(raw) {
            let Some(raw) = raw else {
                lacking += 1;
                continue 'items;
            };
            match canonical(d.kind, d.name, &raw) {
                Ok(value) => values.push((d.name.to_string(), value)),
                Err(e) => {
                    unreadable += 1;
                    first_unreadable
                        .get_or_insert_with(|| format!("{what} with {:?} {raw:?}: {e}", d.name));
                    continue 'items;
                }
            }
        }
        groups.entry(values).or_default().push(item);
    }
    if let Some(first) = &first_unreadable {
        tracing::warn!(layer = %lc.name, unreadable, first = %first, what, "left out: their dimension value is not one");
    }
    if groups.is_empty() {
        return Err(match first_unreadable {
            Some(first) => format!("no {what} has a value for every dimension ({first})"),
            None => format!("no {what} has a value for every dimension"),
        });
    }
    if lacking > 0 {
        tracing::warn!(layer = %lc.name, lacking, what, "left out: they have no value for some dimension");
    }
    Ok(groups)
}

/// The mosaic of `lc`'s source and its pieces as paths, one mosaic of
/// the pieces of each combination.
fn mosaic_of(lc: &LayerConfig, asking: &str) -> Result<MosaicSpec, String> {
    match &lc.source {
        SourceSpec::Mosaic(m) => Ok((**m).clone()),
        _ => Err(format!("`{asking}` needs a mosaic source (`type: mosaic`)")),
    }
}

fn mosaics(mosaic: &MosaicSpec, groups: BTreeMap<Values, Vec<String>>) -> Vec<Combination> {
    groups
        .into_iter()
        .map(|(values, paths)| Combination {
            values,
            source: SourceSpec::Mosaic(Box::new(MosaicSpec {
                dir: None,
                index: None,
                stac: None,
                paths: paths.clone(),
                ..mosaic.clone()
            })),
            files: paths,
            opened: None,
        })
        .collect()
}

/// The values of a mosaic's pieces: each piece's path matched by each
/// dimension's pattern, whose first group is its value. Pieces a pattern
/// does not match are left out (and counted in the log).
fn from_path(lc: &LayerConfig, dimensions: &[Configured<'_>]) -> Result<Vec<Combination>, String> {
    let mosaic = mosaic_of(lc, "from_path")?;
    let Some(paths) = mosaic.piece_paths() else {
        return Err(
            "`from_path` needs a mosaic of `dir` or `paths` (from_field reads an index)".into(),
        );
    };
    let paths = paths.map_err(|e| tessera_source::error_chain(&e))?;
    let mut patterns = Vec::with_capacity(dimensions.len());
    for d in dimensions {
        let pattern = d.config.from_path.as_deref().unwrap_or_default();
        let regex =
            regex::Regex::new(pattern).map_err(|e| format!("from_path {pattern:?}: {e}"))?;
        if regex.captures_len() < 2 {
            return Err(format!(
                "from_path {pattern:?} has no group to take the value from"
            ));
        }
        patterns.push(regex);
    }
    let found = paths.into_iter().map(|path| {
        let raw = patterns
            .iter()
            .map(|r| {
                r.captures(&path)
                    .and_then(|c| c.get(1))
                    .map(|m| m.as_str().to_string())
            })
            .collect();
        (raw, path)
    });
    let groups = group(found, dimensions, "mosaic piece", lc)?;
    Ok(mosaics(&mosaic, groups))
}

/// The values of a mosaic's pieces read from its index's fields or its
/// STAC items' properties.
fn from_field(lc: &LayerConfig, dimensions: &[Configured<'_>]) -> Result<Vec<Combination>, String> {
    let mosaic = mosaic_of(lc, "from_field")?;
    let fields: Vec<&str> = dimensions
        .iter()
        .map(|d| d.config.from_field.as_deref().unwrap_or_default())
        .collect();
    let Some(rows) = mosaic.piece_fields(&fields) else {
        return Err("`from_field` needs a mosaic of an `index` or of `stac` items".into());
    };
    let rows = rows.map_err(|e| tessera_source::error_chain(&e))?;
    let groups = group(
        rows.into_iter().map(|(path, values)| (values, path)),
        dimensions,
        "mosaic piece",
        lc,
    )?;
    Ok(mosaics(&mosaic, groups))
}

/// The values of the bands of the layer's one raster, from each band's
/// metadata item `from_bands`: the bands of each combination are its
/// source.
fn from_bands(
    lc: &LayerConfig,
    config: &Config,
    dimensions: &[Configured<'_>],
) -> Result<Vec<Combination>, String> {
    let Some(gdal) = lc.source.as_gdal() else {
        return Err("`from_bands` needs a GDAL source (`source: { path: ... }`)".into());
    };
    if !gdal.bands.is_empty() {
        return Err("`from_bands` chooses the bands: leave `bands:` out of the source".into());
    }
    // Each band's raw value of each dimension.
    let mut raw: BTreeMap<usize, Vec<Option<String>>> = BTreeMap::new();
    for (i, d) in dimensions.iter().enumerate() {
        let key = d.config.from_bands.as_deref().unwrap_or_default();
        let (bands, dataset) = tessera_source::band_metadata(gdal, &config.gdal, key)
            .map_err(|e| tessera_source::error_chain(&e))?;
        if bands.is_empty() {
            return Err(format!(
                "no band of {:?} has the metadata item {key:?}",
                gdal.path
            ));
        }
        for (band, text) in bands {
            let value = band_value(d.kind, key, &text, &dataset)?;
            raw.entry(band)
                .or_insert_with(|| vec![None; dimensions.len()])[i] = Some(value);
        }
    }
    let groups = group(
        raw.into_iter().map(|(band, values)| (values, band)),
        dimensions,
        "band",
        lc,
    )?;
    Ok(groups
        .into_iter()
        .map(|(values, bands)| Combination {
            values,
            source: SourceSpec::Gdal(GdalSourceSpec {
                bands,
                ..gdal.clone()
            }),
            files: vec![gdal.path.clone()],
            opened: None,
        })
        .collect())
}

/// Combinations of the values of an upstream service's dimensions: each
/// dimension's values listed in the configuration, or else read from the
/// upstream's capabilities (WMS, WMTS: [`Source::listed_values`]); the
/// upstream is opened once and asked with each combination's values,
/// spelled as listed ([`Source::at_values`]): a WMS with `TIME=`,
/// `ELEVATION=`, `DIM_<NAME>=`, a tile service with `{time}` (any case:
/// `{Time}`) in its URL template (a WMTS KVP template: a parameter).
fn upstream(
    lc: &LayerConfig,
    config: &Config,
    dimensions: &[Configured<'_>],
    wrap_source: &Arc<WrapSource>,
) -> Result<Vec<Combination>, String> {
    let failed = |e: tessera_source::SourceError| tessera_source::error_chain(&e);
    let opened = tessera_source::open_source(&lc.source, &config.gdal).map_err(failed)?;
    if let Some(d) = dimensions.iter().find(|d| !opened.takes_value(d.name)) {
        return Err(format!(
            "dimension {:?}: the upstream's tile URL template has no {{{}}} to put its value in",
            d.name, d.name
        ));
    }
    // Each dimension's (canonical value, spelling asked upstream).
    let mut each: Vec<Vec<(String, String)>> = Vec::with_capacity(dimensions.len());
    for d in dimensions {
        let values = if d.config.values.is_empty() {
            let unlisted = || {
                format!(
                    "dimension {:?}: the upstream's capabilities list no values for it; list them in `values:`",
                    d.name
                )
            };
            match opened
                .listed_values(d.name, None, crate::dimension::MAX_EXPANDED)
                .ok_or_else(unlisted)?
                .map_err(failed)?
            {
                Listed::Extent(text) => crate::dimension::expand_extent(d.kind, d.name, &text)?,
                Listed::Values(values) => values
                    .iter()
                    .map(|v| {
                        canonical(d.kind, d.name, v)
                            .map(|c| (c, v.clone()))
                            .map_err(|e| e.to_string())
                    })
                    .collect::<Result<_, _>>()?,
            }
        } else {
            d.config
                .values
                .iter()
                .map(|v| {
                    canonical(d.kind, d.name, &v.value)
                        .map(|c| (c, v.value.trim().to_string()))
                        .map_err(|e| e.to_string())
                })
                .collect::<Result<_, _>>()?
        };
        each.push(values);
    }
    let total = each
        .iter()
        .map(Vec::len)
        .try_fold(1usize, usize::checked_mul);
    if total.is_none_or(|t| t > crate::dimension::MAX_EXPANDED) {
        return Err(format!(
            "the values of its dimensions make more than {} combinations",
            crate::dimension::MAX_EXPANDED
        ));
    }
    let mut combinations = Vec::new();
    let lens: Vec<usize> = each.iter().map(Vec::len).collect();
    let mut at = vec![0usize; each.len()];
    loop {
        let mut values = Vec::with_capacity(each.len());
        let mut asked = Vec::with_capacity(each.len());
        for ((d, options), i) in dimensions.iter().zip(&each).zip(&at) {
            let (value, spelling) = &options[*i];
            values.push((d.name.to_string(), value.clone()));
            asked.push(AskedValue::one(
                d.name,
                value_kind(d.kind),
                None,
                value,
                spelling,
            ));
        }
        let at_values = opened
            .at_values(&asked)
            .ok_or("values passed on need an upstream WMS, WMTS or XYZ source")?
            .map_err(failed)?;
        combinations.push(Combination {
            values,
            // A WMS's spec names the values; a tile service's is the same
            // (the layer key names them).
            source: lc.source.at_values(&asked),
            files: Vec::new(),
            opened: Some(wrap_source(&lc.name, at_values)),
        });
        if !crate::dimension::next_combination(&mut at, &lens) {
            return Ok(combinations);
        }
    }
}

/// A band's metadata value of `key` as a dimension value's text: for a
/// time given as a number, the time it stands for (a netCDF axis' offset
/// in its `units`, GRIB's seconds since 1970); other values as they are.
fn band_value(
    kind: Kind,
    key: &str,
    text: &str,
    dataset: &[(String, String)],
) -> Result<String, String> {
    let text = text.trim();
    if kind != Kind::Time {
        return Ok(text.to_string());
    }
    // GRIB writes `1704067200 sec UTC`.
    let number = text.strip_suffix(" sec UTC").unwrap_or(text).trim();
    let Ok(offset) = number.parse::<f64>() else {
        return Ok(text.to_string());
    };
    let units = match key.strip_prefix("NETCDF_DIM_") {
        Some(axis) => {
            let units_key = format!("{axis}#units");
            dataset
                .iter()
                .find(|(k, _)| *k == units_key)
                .map(|(_, v)| v.clone())
                .ok_or_else(|| {
                    format!("{key}={text}: the file has no {units_key} to read it as a time")
                })?
        }
        None => "seconds since 1970-01-01T00:00:00Z".to_string(),
    };
    time_from_offset(offset, &units)
        .ok_or_else(|| format!("{key}={text}: {units:?} is not `<unit> since <time>`"))
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
            .flat_map(|d| d.values.iter().filter_map(|v| v.path.clone()))
            .collect();
        files.extend(lc.source.local_file().map(str::to_string));
        if let SourceSpec::Mosaic(m) = &lc.source {
            files.extend(m.index.iter().chain(&m.stac).cloned());
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn band_values_are_times_of_netcdf_axes_and_grib_seconds() {
        let nc = [(
            "time#units".to_string(),
            "hours since 2024-01-01 00:00:00".to_string(),
        )];
        assert_eq!(
            band_value(Kind::Time, "NETCDF_DIM_time", "6", &nc).unwrap(),
            "2024-01-01T06:00:00Z"
        );
        let e = band_value(Kind::Time, "NETCDF_DIM_step", "6", &nc).unwrap_err();
        assert!(e.contains("step#units"), "{e}");
        assert_eq!(
            band_value(Kind::Time, "GRIB_VALID_TIME", "  1704067200 sec UTC", &[]).unwrap(),
            "2024-01-01T00:00:00Z"
        );
        // Text that is already a time, and numbers, as they are.
        assert_eq!(
            band_value(Kind::Time, "DATE", "2024-01-01", &[]).unwrap(),
            "2024-01-01"
        );
        assert_eq!(
            band_value(Kind::Number, "NETCDF_DIM_level", " 850 ", &nc).unwrap(),
            "850"
        );
    }
}
