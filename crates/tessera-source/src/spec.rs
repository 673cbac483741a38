//! A layer's `source:` section: which kind of source, and its settings.

use std::fmt::Write as _;
use std::sync::Arc;

use serde::Deserialize;

#[cfg(any(feature = "upstream", feature = "archive"))]
use crate::NetworkPolicy;
#[cfg(feature = "archive")]
use crate::archive::{ArchiveFormat, ArchiveSpec, Place};
use crate::{
    GdalSettings, GdalSource, GdalSourceSpec, MosaicSource, MosaicSpec, Source, SourceError,
};
#[cfg(feature = "vector")]
use crate::{PostgisAutoSpec, VectorSource, VectorSpec};
#[cfg(feature = "upstream")]
use crate::{WmsSource, WmsSourceSpec, WmtsSourceSpec, XyzSourceSpec};

/// A layer's source, tagged by `type` (`gdal` when absent).
#[derive(Debug, Clone, PartialEq)]
pub enum SourceSpec {
    /// A raster GDAL reads (`type: gdal`, the default).
    Gdal(GdalSourceSpec),
    /// An upstream WMS (`type: wms`).
    #[cfg(feature = "upstream")]
    Wms(Box<WmsSourceSpec>),
    /// An upstream XYZ/TMS tile service (`type: xyz`).
    #[cfg(feature = "upstream")]
    Xyz(Box<XyzSourceSpec>),
    /// A layer of an upstream WMTS (`type: wmts`).
    #[cfg(feature = "upstream")]
    Wmts(Box<WmtsSourceSpec>),
    /// Many rasters as one (`type: mosaic`).
    Mosaic(Box<MosaicSpec>),
    /// Features drawn with a style (`type: vector`).
    #[cfg(feature = "vector")]
    Vector(Box<VectorSpec>),
    /// Every table of a PostGIS database with a geometry column, one layer
    /// each (`type: postgis_auto`): expanded by the server into `vector`
    /// layers, never opened as one source.
    #[cfg(feature = "vector")]
    PostgisAuto(Box<PostgisAutoSpec>),
    /// A tile archive (`type: pmtiles` or `type: mbtiles`).
    #[cfg(feature = "archive")]
    Archive(ArchiveFormat, Box<ArchiveSpec>),
    /// A STAC search in pgSTAC, mosaicked per window (`type: stac`).
    #[cfg(feature = "stac")]
    Stac(Box<crate::pgstac::StacSpec>),
}

impl SourceSpec {
    /// The spec of this source at dimension `values` ([`crate::Source::at_values`]),
    /// as it names them: a WMS's GetMap parameters, a vector source's
    /// filter; any other spec is the same at every value (its layer key
    /// names the values).
    #[must_use]
    #[cfg_attr(
        not(any(feature = "upstream", feature = "vector")),
        allow(
            unused_variables,
            reason = "only upstream and vector specs name values"
        )
    )]
    pub fn at_values(&self, values: &[crate::AskedValue]) -> SourceSpec {
        let mut spec = self.clone();
        match &mut spec {
            #[cfg(feature = "upstream")]
            SourceSpec::Wms(w) => w.params.extend(WmsSource::params_of(values)),
            #[cfg(feature = "vector")]
            SourceSpec::Vector(v) => {
                if let [value] = values {
                    v.value_filter = Some(crate::ValueFilter {
                        field: value.field.clone().unwrap_or_default(),
                        kind: value.kind,
                        from: value.from.clone(),
                        to: value.to.clone(),
                    });
                }
            }
            _ => {}
        }
        spec
    }

    /// The kind, as written in `type`.
    pub fn kind(&self) -> &'static str {
        match self {
            SourceSpec::Gdal(_) => "gdal",
            #[cfg(feature = "upstream")]
            SourceSpec::Wms(_) => "wms",
            #[cfg(feature = "upstream")]
            SourceSpec::Xyz(_) => "xyz",
            #[cfg(feature = "upstream")]
            SourceSpec::Wmts(_) => "wmts",
            SourceSpec::Mosaic(_) => "mosaic",
            #[cfg(feature = "vector")]
            SourceSpec::Vector(_) => "vector",
            #[cfg(feature = "vector")]
            SourceSpec::PostgisAuto(_) => "postgis_auto",
            #[cfg(feature = "archive")]
            SourceSpec::Archive(kind, _) => kind.name(),
            #[cfg(feature = "stac")]
            SourceSpec::Stac(_) => "stac",
        }
    }

    /// The GDAL source's settings, when it is one.
    pub fn as_gdal(&self) -> Option<&GdalSourceSpec> {
        if let SourceSpec::Gdal(g) = self {
            Some(g)
        } else {
            None
        }
    }

    /// The local file (or GDAL path) a GDAL or vector source reads, whose
    /// size and time tell a changed source; `None` for upstreams, mosaics
    /// and databases.
    pub fn local_file(&self) -> Option<&str> {
        match self {
            SourceSpec::Gdal(g) => Some(&g.path),
            #[cfg(feature = "vector")]
            SourceSpec::Vector(v) if !v.is_postgres() => Some(&v.path),
            #[cfg(feature = "archive")]
            SourceSpec::Archive(_, a) if a.place() == Place::Local => Some(&a.path),
            _ => None,
        }
    }

    /// The local file's path to make absolute against the configuration's
    /// directory, when it is relative.
    pub fn local_file_mut(&mut self) -> Option<&mut String> {
        match self {
            SourceSpec::Gdal(g) => Some(&mut g.path),
            #[cfg(feature = "vector")]
            SourceSpec::Vector(v) if !v.is_postgres() => Some(&mut v.path),
            #[cfg(feature = "archive")]
            SourceSpec::Archive(_, a) if a.place() == Place::Local => Some(&mut a.path),
            _ => None,
        }
    }

    /// What of the settings determines the pixels, as text (for a layer's
    /// fingerprint): not timeouts, credentials or headers.
    pub fn identity(&self) -> String {
        match self {
            SourceSpec::Gdal(g) if g.bands.is_empty() => {
                format!("gdal {:?} {:?}", g.path, g.resampling)
            }
            SourceSpec::Gdal(g) => {
                format!("gdal {:?} {:?} bands {:?}", g.path, g.resampling, g.bands)
            }
            #[cfg(feature = "upstream")]
            SourceSpec::Wms(w) => format!(
                "wms {:?} {:?} {:?} {:?} {:?} {} {:?} {:?} {:?}",
                w.url,
                w.layers,
                w.styles,
                w.version,
                w.format,
                w.transparent,
                w.params,
                w.crs,
                w.resampling
            ),
            #[cfg(feature = "upstream")]
            SourceSpec::Xyz(x) => format!(
                "xyz {:?} {:?} {} {} {:?} {:?}",
                x.url, x.grid, x.min_zoom, x.max_zoom, x.format, x.resampling
            ),
            #[cfg(feature = "upstream")]
            SourceSpec::Wmts(w) => format!(
                "wmts {:?} {:?} {:?} {:?} {:?} {:?}",
                w.url, w.layer, w.style, w.matrix_set, w.format, w.resampling
            ),
            SourceSpec::Mosaic(m) => {
                let mut id = format!(
                    "mosaic {:?} {:?} {:?} {:?} {:?} {:?} {:?}",
                    m.dir, m.glob, m.paths, m.index, m.location_field, m.sort, m.resampling
                );
                if let Some(stac) = &m.stac {
                    let _ = write!(id, " stac {stac:?} {:?}", m.asset);
                }
                id
            }
            #[cfg(feature = "vector")]
            SourceSpec::Vector(v) => {
                let mut id = format!(
                    "vector {:?} {:?} {:?} {:?} {}",
                    v.path,
                    v.layer,
                    v.filter,
                    v.fields,
                    serde_json::to_string(&v.style).unwrap_or_default()
                );
                if let Some(m) = &v.maplibre {
                    let _ = write!(id, " maplibre {:?} {}", m.source, m.document);
                }
                if let Some(c) = &v.contours {
                    let _ = write!(id, " contours {c:?}");
                }
                if let Some(f) = &v.value_filter {
                    let _ = write!(
                        id,
                        " {:?} {:?} from {:?} to {:?}",
                        f.field, f.kind, f.from, f.to
                    );
                }
                id
            }
            #[cfg(feature = "vector")]
            SourceSpec::PostgisAuto(a) => format!("postgis_auto {:?}", a.path),
            #[cfg(feature = "archive")]
            SourceSpec::Archive(kind, a) => {
                format!("{} {:?} {:?}", kind.name(), a.path, a.resampling)
            }
            #[cfg(feature = "stac")]
            SourceSpec::Stac(s) => format!(
                "stac {:?} {:?} {} {:?} {:?} {:?} {:?} {}",
                s.pgstac,
                s.stac_api,
                s.search,
                s.asset,
                s.assets,
                s.method,
                s.resampling,
                s.max_items
            ),
        }
    }

    /// The GDAL source's path or the upstream's URL, for messages.
    pub fn location(&self) -> &str {
        match self {
            SourceSpec::Gdal(g) => &g.path,
            #[cfg(feature = "upstream")]
            SourceSpec::Wms(w) => &w.url,
            #[cfg(feature = "upstream")]
            SourceSpec::Xyz(x) => &x.url,
            #[cfg(feature = "upstream")]
            SourceSpec::Wmts(w) => &w.url,
            SourceSpec::Mosaic(m) => m
                .index
                .as_deref()
                .or(m.dir.as_deref())
                .or(m.paths.first().map(String::as_str))
                .unwrap_or("mosaic"),
            #[cfg(feature = "vector")]
            SourceSpec::Vector(v) => &v.path,
            #[cfg(feature = "vector")]
            SourceSpec::PostgisAuto(a) => &a.path,
            #[cfg(feature = "archive")]
            SourceSpec::Archive(_, a) => &a.path,
            #[cfg(feature = "stac")]
            SourceSpec::Stac(s) => s.stac_api.as_deref().unwrap_or("pgstac"),
        }
    }
}

impl From<GdalSourceSpec> for SourceSpec {
    fn from(spec: GdalSourceSpec) -> Self {
        SourceSpec::Gdal(spec)
    }
}

impl schemars::JsonSchema for SourceSpec {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "SourceSpec".into()
    }

    /// One schema per `type`, each its backend's spec with `type` added
    /// (optional for `gdal`, the default).
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let mut kinds = vec![tagged::<GdalSourceSpec>(generator, &["gdal"], false)];
        kinds.push(tagged::<MosaicSpec>(generator, &["mosaic"], true));
        #[cfg(feature = "upstream")]
        kinds.extend([
            tagged::<WmsSourceSpec>(generator, &["wms"], true),
            tagged::<XyzSourceSpec>(generator, &["xyz"], true),
            tagged::<WmtsSourceSpec>(generator, &["wmts"], true),
        ]);
        #[cfg(feature = "vector")]
        kinds.extend([
            tagged::<VectorSpec>(generator, &["vector"], true),
            tagged::<crate::vector::ContourSpec>(generator, &["contours"], true),
            tagged::<PostgisAutoSpec>(generator, &["postgis_auto"], true),
        ]);
        #[cfg(feature = "stac")]
        kinds.push(tagged::<crate::pgstac::StacSpec>(
            generator,
            &["stac"],
            true,
        ));
        #[cfg(feature = "archive")]
        kinds.push(tagged::<ArchiveSpec>(
            generator,
            &["pmtiles", "mbtiles"],
            true,
        ));
        schemars::json_schema!({
            "description": "A layer's source, tagged by `type` (`gdal` when absent).",
            "oneOf": kinds
        })
    }
}

/// `T`'s schema with a `type` property of one of `kinds` (required or
/// not).
fn tagged<T: schemars::JsonSchema>(
    generator: &mut schemars::SchemaGenerator,
    kinds: &[&str],
    required: bool,
) -> schemars::Schema {
    let mut schema = T::json_schema(generator);
    if let Some(object) = schema.as_object_mut() {
        if let Some(properties) = object
            .entry("properties")
            .or_insert_with(|| serde_json::json!({}))
            .as_object_mut()
        {
            properties.insert("type".into(), serde_json::json!({ "enum": kinds }));
        }
        if required
            && let Some(list) = object
                .entry("required")
                .or_insert_with(|| serde_json::json!([]))
                .as_array_mut()
        {
            list.push("type".into());
        }
    }
    schema
}

impl<'de> Deserialize<'de> for SourceSpec {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut value = serde_json::Value::deserialize(deserializer)?;
        let kind = match value.as_object_mut() {
            Some(map) => match map.remove("type") {
                None => "gdal".to_string(),
                Some(serde_json::Value::String(s)) => s,
                Some(other) => {
                    return Err(D::Error::custom(format!(
                        "source type must be a word (gdal, wms, xyz, wmts, mosaic, vector, contours, stac, postgis_auto, pmtiles, mbtiles), not {other}"
                    )));
                }
            },
            None => {
                return Err(D::Error::custom(
                    "a source is a mapping (path: ..., or type: ...)",
                ));
            }
        };
        match kind.as_str() {
            "gdal" => serde_json::from_value(value)
                .map(SourceSpec::Gdal)
                .map_err(|e| D::Error::custom(format!("gdal source: {e}"))),
            #[cfg(not(feature = "upstream"))]
            "wms" | "xyz" | "wmts" => Err(D::Error::custom(format!(
                "{kind} sources are not in this build of tessera (cargo feature `upstream`)"
            ))),
            #[cfg(not(feature = "vector"))]
            "vector" | "postgis_auto" => Err(D::Error::custom(
                "vector sources are not in this build of tessera (cargo feature `vector`)",
            )),
            #[cfg(feature = "vector")]
            "postgis_auto" => serde_json::from_value(value)
                .map(|a| SourceSpec::PostgisAuto(Box::new(a)))
                .map_err(|e| D::Error::custom(format!("postgis_auto source: {e}"))),
            #[cfg(not(feature = "archive"))]
            "pmtiles" | "mbtiles" => Err(D::Error::custom(format!(
                "{kind} sources are not in this build of tessera (cargo feature `archive`)"
            ))),
            #[cfg(feature = "archive")]
            "pmtiles" | "mbtiles" => {
                let archive = if kind == "pmtiles" {
                    ArchiveFormat::Pmtiles
                } else {
                    ArchiveFormat::Mbtiles
                };
                serde_json::from_value(value)
                    .map(|a| SourceSpec::Archive(archive, Box::new(a)))
                    .map_err(|e| D::Error::custom(format!("{kind} source: {e}")))
            }
            #[cfg(feature = "upstream")]
            "wms" => serde_json::from_value(value)
                .map(|w| SourceSpec::Wms(Box::new(w)))
                .map_err(|e| D::Error::custom(format!("wms source: {e}"))),
            #[cfg(feature = "upstream")]
            "xyz" => serde_json::from_value(value)
                .map(|x| SourceSpec::Xyz(Box::new(x)))
                .map_err(|e| D::Error::custom(format!("xyz source: {e}"))),
            #[cfg(feature = "upstream")]
            "wmts" => serde_json::from_value(value)
                .map(|w| SourceSpec::Wmts(Box::new(w)))
                .map_err(|e| D::Error::custom(format!("wmts source: {e}"))),
            "mosaic" => serde_json::from_value(value)
                .map(|m| SourceSpec::Mosaic(Box::new(m)))
                .map_err(|e| D::Error::custom(format!("mosaic source: {e}"))),
            #[cfg(feature = "vector")]
            "contours" => serde_json::from_value::<crate::vector::ContourSpec>(value)
                .map(|c| SourceSpec::Vector(Box::new(crate::vector::VectorSpec::of_contours(c))))
                .map_err(|e| D::Error::custom(format!("contours source: {e}"))),
            #[cfg(feature = "stac")]
            "stac" => serde_json::from_value(value)
                .map(|s| SourceSpec::Stac(Box::new(s)))
                .map_err(|e| D::Error::custom(format!("stac source: {e}"))),
            #[cfg(not(feature = "stac"))]
            "stac" => Err(D::Error::custom(
                "stac sources are not in this build of tessera (cargo feature `stac`)",
            )),
            #[cfg(feature = "vector")]
            "vector" => serde_json::from_value(value)
                .map(|v| SourceSpec::Vector(Box::new(v)))
                .map_err(|e| D::Error::custom(format!("vector source: {e}"))),
            other => Err(D::Error::custom(format!(
                "unknown source type {other:?}: expected gdal, wms, xyz, wmts, mosaic, vector, contours, stac, postgis_auto, pmtiles or mbtiles"
            ))),
        }
    }
}

/// Opens the source `spec` describes, with the process's GDAL settings
/// (the private-network policy among them).
pub fn open_source(spec: &SourceSpec, gdal: &GdalSettings) -> Result<Arc<dyn Source>, SourceError> {
    #[cfg(any(feature = "upstream", feature = "archive"))]
    let policy = || NetworkPolicy {
        allow_private_network: gdal.allow_private_network,
        allowed_private_hosts: gdal.allowed_private_hosts.clone(),
    };
    Ok(match spec {
        SourceSpec::Gdal(g) => Arc::new(GdalSource::open(g, gdal)?),
        #[cfg(feature = "upstream")]
        SourceSpec::Wms(w) => Arc::new(WmsSource::open(w, policy())?),
        #[cfg(feature = "upstream")]
        SourceSpec::Xyz(x) => Arc::new(crate::upstream::tiles::open_xyz(x, policy())?),
        #[cfg(feature = "upstream")]
        SourceSpec::Wmts(w) => Arc::new(crate::upstream::tiles::open_wmts(w, policy())?),
        SourceSpec::Mosaic(m) => Arc::new(MosaicSource::open(m, gdal)?),
        #[cfg(feature = "vector")]
        SourceSpec::Vector(v) => Arc::new(VectorSource::contours(v, gdal)?),
        #[cfg(feature = "vector")]
        SourceSpec::PostgisAuto(a) => {
            return Err(SourceError::Open {
                path: a.path.clone(),
                source: "a postgis_auto source is expanded into one layer per table by the server"
                    .into(),
            });
        }
        #[cfg(feature = "archive")]
        SourceSpec::Archive(kind, a) => Arc::new(crate::archive::open(*kind, a, policy(), None)?),
        #[cfg(feature = "stac")]
        SourceSpec::Stac(s) => Arc::new(crate::pgstac::StacSource::open(s, gdal)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<SourceSpec, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn a_source_without_a_type_is_gdal_and_types_pick_their_settings() {
        let s = parse(r#"{"path": "x.tif"}"#).unwrap();
        assert_eq!(s.as_gdal().unwrap().path, "x.tif");
        let s = parse(r#"{"type": "gdal", "path": "x.tif", "resampling": "nearest"}"#).unwrap();
        assert_eq!(s.kind(), "gdal");
        let s = parse(r#"{"type": "wms", "url": "http://h/wms", "layers": ["a", "b"]}"#).unwrap();
        assert_eq!(s.kind(), "wms");
        assert_eq!(s.location(), "http://h/wms");
    }

    #[test]
    fn bad_sources_say_what_is_wrong() {
        let e = parse(r#"{"type": "ftp", "url": "x"}"#).unwrap_err();
        assert!(e.contains("unknown source type \"ftp\""), "{e}");
        let e = parse(r#"{"type": "wms", "url": "http://h/wms"}"#).unwrap_err();
        assert!(e.contains("wms source") && e.contains("layers"), "{e}");
        let e = parse(r#"{"path": "x.tif", "pth": 1}"#).unwrap_err();
        assert!(e.contains("pth"), "{e}");
    }
}
