//! `tessera serve FILE...`: a configuration with one layer per raster
//! file, named after the file, styled from what its bands hold.
//!
//! Styles are chosen as a user would by hand: three or more 8-bit bands
//! are shown as they are; one 8-bit band as grey; one band of another type
//! (a DEM, a temperature grid) through a grey ramp stretched over its
//! minimum and maximum; several bands of another type as RGB stretched
//! over their common range. Statistics are GDAL's approximate ones (read
//! from overviews), so a large file opens fast.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use gdal::Dataset;
use gdal::raster::{ColorInterpretation, GdalDataType};
use serde_json::{Value, json};

use crate::config::{Config, ConfigError, valid_name};

/// A configuration serving each of `paths` as a layer (in the embedded
/// defaults otherwise: memory store, default limits).
pub fn config_for_files(paths: &[PathBuf]) -> Result<Config, ConfigError> {
    let mut names = HashSet::new();
    let mut layers = Vec::with_capacity(paths.len());
    for path in paths {
        let absolute = std::path::absolute(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let text = absolute.to_string_lossy().into_owned();
        let name = unique_name(&layer_name(&absolute), &mut names);
        let style = style_for(&text)
            .map_err(|reason| ConfigError::Invalid(format!("{}: {reason}", path.display())))?;
        let mut layer = json!({
            "name": name,
            "title": absolute.file_name().map_or(name.clone(), |f| f.to_string_lossy().into_owned()),
            // `${` in a path is not a variable.
            "source": { "path": text.replace("${", "$${") },
        });
        if let Some(style) = style {
            layer["style"] = style;
        }
        layers.push(layer);
    }
    let doc = json!({ "layers": layers });
    Config::from_yaml(&doc.to_string(), |_| None)
}

/// The file's stem with every character a layer name may not hold
/// replaced by `_` (`layer` when nothing is left).
fn layer_name(path: &Path) -> String {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if valid_name(&name) {
        name
    } else {
        "layer".into()
    }
}

/// `name`, or `name-2`, `name-3`, ... when taken.
fn unique_name(name: &str, taken: &mut HashSet<String>) -> String {
    let mut candidate = name.to_string();
    let mut n = 1;
    while !taken.insert(candidate.clone()) {
        n += 1;
        candidate = format!("{name}-{n}");
    }
    candidate
}

/// The style for the raster at `path`: `None` for the default (RGB as it
/// is), or a style section.
fn style_for(path: &str) -> Result<Option<Value>, String> {
    let ds = Dataset::open(path).map_err(|e| format!("GDAL cannot open it: {e}"))?;
    let count = ds.raster_count();
    let last = ds.rasterband(count).map_err(|e| e.to_string())?;
    let data_bands = if count > 1 && last.color_interpretation() == ColorInterpretation::AlphaBand {
        count - 1
    } else {
        count
    };
    if data_bands == 0 {
        return Err("it has no raster bands".into());
    }
    let band = ds.rasterband(1).map_err(|e| e.to_string())?;
    if band.band_type() == GdalDataType::UInt8 {
        // 8-bit: shown as it is (one band as grey, three as RGB).
        return Ok(None);
    }
    let mut range: Option<(f64, f64)> = None;
    for b in 1..=data_bands.min(3) {
        let band = ds.rasterband(b).map_err(|e| e.to_string())?;
        let stats = band
            .compute_raster_min_max(true)
            .map_err(|e| format!("cannot read band {b}'s range: {e}"))?;
        range = Some(match range {
            None => (stats.min, stats.max),
            Some((lo, hi)) => (lo.min(stats.min), hi.max(stats.max)),
        });
    }
    let (lo, hi) = range.unwrap_or((0.0, 1.0));
    let hi = if hi > lo { hi } else { lo + 1.0 };
    Ok(Some(if data_bands == 1 {
        json!({
            "type": "ramp",
            "stops": [
                { "value": lo, "color": "#000000" },
                { "value": hi, "color": "#ffffff" },
            ],
        })
    } else {
        json!({ "type": "rgb", "rescale": [lo, hi] })
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_from_file_stems_and_stay_unique() {
        let mut taken = HashSet::new();
        assert_eq!(
            layer_name(Path::new("/d/My Ortho (2024).tif")),
            "My_Ortho__2024_"
        );
        assert_eq!(unique_name("dem", &mut taken), "dem");
        assert_eq!(unique_name("dem", &mut taken), "dem-2");
        assert_eq!(unique_name("dem", &mut taken), "dem-3");
    }
}
