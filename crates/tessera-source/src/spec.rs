//! A layer's `source:` section: which kind of source, and its settings.

use std::sync::Arc;

use serde::Deserialize;

use crate::upstream::client::NetworkPolicy;
use crate::{
    GdalSettings, GdalSource, GdalSourceSpec, Source, SourceError, WmsSource, WmsSourceSpec,
};

/// A layer's source, tagged by `type` (`gdal` when absent).
#[derive(Debug, Clone, PartialEq)]
pub enum SourceSpec {
    /// A raster GDAL reads (`type: gdal`, the default).
    Gdal(GdalSourceSpec),
    /// An upstream WMS (`type: wms`).
    Wms(Box<WmsSourceSpec>),
}

impl SourceSpec {
    /// The kind, as written in `type`.
    pub fn kind(&self) -> &'static str {
        match self {
            SourceSpec::Gdal(_) => "gdal",
            SourceSpec::Wms(_) => "wms",
        }
    }

    /// The GDAL source's settings, when it is one.
    pub fn as_gdal(&self) -> Option<&GdalSourceSpec> {
        match self {
            SourceSpec::Gdal(g) => Some(g),
            SourceSpec::Wms(_) => None,
        }
    }

    /// What of the settings determines the pixels, as text (for a layer's
    /// fingerprint): not timeouts, credentials or headers.
    pub fn identity(&self) -> String {
        match self {
            SourceSpec::Gdal(g) => format!("gdal {:?} {:?}", g.path, g.resampling),
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
        }
    }

    /// The GDAL source's path or the upstream's URL, for messages.
    pub fn location(&self) -> &str {
        match self {
            SourceSpec::Gdal(g) => &g.path,
            SourceSpec::Wms(w) => &w.url,
        }
    }
}

impl From<GdalSourceSpec> for SourceSpec {
    fn from(spec: GdalSourceSpec) -> Self {
        SourceSpec::Gdal(spec)
    }
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
                        "source type must be a word (gdal or wms), not {other}"
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
            "wms" => serde_json::from_value(value)
                .map(|w| SourceSpec::Wms(Box::new(w)))
                .map_err(|e| D::Error::custom(format!("wms source: {e}"))),
            other => Err(D::Error::custom(format!(
                "unknown source type {other:?}: expected gdal or wms"
            ))),
        }
    }
}

/// Opens the source `spec` describes, with the process's GDAL settings
/// (the private-network policy among them).
pub fn open_source(spec: &SourceSpec, gdal: &GdalSettings) -> Result<Arc<dyn Source>, SourceError> {
    Ok(match spec {
        SourceSpec::Gdal(g) => Arc::new(GdalSource::open(g, gdal)?),
        SourceSpec::Wms(w) => Arc::new(WmsSource::open(
            w,
            NetworkPolicy {
                allow_private_network: gdal.allow_private_network,
                allowed_private_hosts: gdal.allowed_private_hosts.clone(),
            },
        )?),
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
