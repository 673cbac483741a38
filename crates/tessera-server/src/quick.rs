//! `tessera serve FILE...`: a configuration with one layer per raster
//! file, named after the file, styled from what its bands hold, and one
//! layer per data layer of a vector file (a GeoPackage, a shapefile, a
//! GeoJSON), served as vector tiles and as maps drawn with a default style.
//!
//! Styles are chosen as a user would by hand: three or more 8-bit bands
//! are shown as they are; one 8-bit band as grey; one band of another type
//! (a DEM, a temperature grid) through a grey ramp stretched over its
//! minimum and maximum; several bands of another type as RGB stretched
//! over their common range. Statistics are GDAL's approximate ones (read
//! from overviews), so a large file opens fast.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use gdal::raster::{ColorInterpretation, GdalDataType};
use gdal::vector::LayerAccess;
use gdal::{Dataset, DatasetOptions, GdalOpenFlags};
use serde_json::{Value, json};

use tessera_source::archive::ArchiveFormat;
use tessera_source::{GdalSettings, Source, SourceSpec};

use crate::config::{Config, ConfigError, clean_name, default_vector_rule};

/// A configuration serving each of `paths` as a layer (in the embedded
/// defaults otherwise: memory store, default limits).
pub fn config_for_files(paths: &[PathBuf], watch: bool) -> Result<Config, ConfigError> {
    // A file that is not there is said first, before any is opened.
    for path in paths {
        let written = path.to_string_lossy();
        let local =
            !is_database(&written) && !written.contains("://") && !written.starts_with("/vsi");
        if local && let Err(reason) = std::fs::metadata(path) {
            return Err(ConfigError::Open {
                path: path.display().to_string(),
                reason,
            });
        }
    }
    let bases = base_names(paths);
    let mut names = Names::default();
    let mut layers = Vec::with_capacity(paths.len());
    // Archives opened to read their metadata, handed to assembly.
    let mut opened = Vec::new();
    for (path, base) in paths.iter().zip(bases) {
        let written = path.to_string_lossy();
        if is_database(&written) {
            layers.push(database_entry(&written, watch, &mut names));
            continue;
        }
        if let Some(kind) = ArchiveFormat::of_path(&written) {
            let name = names.claim(&base, &written)?;
            let (layer, location, source) = archive_layer(&written, kind, &name)?;
            layers.push(layer);
            opened.push((location, source));
            continue;
        }
        let absolute = std::path::absolute(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let text = absolute.to_string_lossy().into_owned();
        let invalid =
            |reason: String| ConfigError::Invalid(format!("{}: {reason}", path.display()));
        let title = absolute
            .file_name()
            .map_or(String::new(), |f| f.to_string_lossy().into_owned());
        // `${` in a path is not a variable.
        let escaped = text.replace("${", "$${");
        let ds = open_any(&text).map_err(invalid)?;
        let driver = ds.driver().short_name();
        if ds.raster_count() == 0 {
            let data_layers: Vec<String> = ds.layers().map(|l| l.name()).collect();
            if data_layers.is_empty() {
                return Err(invalid(
                    "it holds neither raster bands nor vector layers".into(),
                ));
            }
            for data_layer in &data_layers {
                // A file of one layer is named after the file, as a raster.
                let name = if data_layers.len() == 1 {
                    names.claim(&base, &written)?
                } else {
                    names.claim(
                        &clean_name(data_layer),
                        &format!("{written} ({data_layer})"),
                    )?
                };
                layers.push(json!({
                    "name": name,
                    "title": if data_layers.len() == 1 { title.clone() } else { format!("{title}: {data_layer}") },
                    "description": format!("Vector layer {data_layer:?} of {title} ({driver})."),
                    "keywords": ["vector", driver],
                    "source": {
                        "type": "vector",
                        "path": escaped,
                        "layer": data_layer,
                        "style": [default_vector_rule()],
                    },
                    "formats": ["mvt", "png"],
                }));
            }
            continue;
        }
        let name = names.claim(&base, &written)?;
        let style = style_for(&ds).map_err(invalid)?;
        let (width, height) = ds.raster_size();
        let bands = match ds.raster_count() {
            1 => "1 band".to_string(),
            n => format!("{n} bands"),
        };
        let mut layer = json!({
            "name": name,
            "description": format!("{title} ({driver} raster, {width} x {height} pixels, {bands})."),
            "keywords": ["raster", driver],
            "title": if title.is_empty() { name.clone() } else { title },
            "source": { "path": escaped },
        });
        if let Some(style) = style {
            layer["style"] = style;
        }
        // Past its pixels a client magnifies tiles itself; the server
        // draws two zooms more (as gdal2tiles and TiTiler offer).
        if let Some(max_zoom) = max_zoom_past_native(&ds) {
            layer["max_zoom"] = json!(max_zoom);
        }
        layers.push(layer);
    }
    let doc = json!({
        "service": {
            "abstract": match paths.len() {
                1 => "A file served by tessera as maps and tiles.".to_string(),
                n => format!("{n} files served by tessera as maps and tiles."),
            },
            "keywords": ["tessera"],
        },
        "layers": layers,
    });
    let config = Config::from_yaml(&doc.to_string(), |_| None)?;
    for (location, source) in opened {
        config.opened.keep(&location, source);
    }
    Ok(config)
}

/// How often `--watch` lists a database's tables again, in seconds.
const WATCH_SECS: f64 = 5.0;

/// Whether `text` names a PostgreSQL database (a URL or a `PG:` string).
fn is_database(text: &str) -> bool {
    text.starts_with("postgres://") || text.starts_with("postgresql://") || text.starts_with("PG:")
}

/// The entry serving every table of the database `url` with a geometry
/// column as a layer (`postgis_auto`), as vector tiles and maps drawn with
/// a default style; with `watch`, its tables are listed again every
/// [`WATCH_SECS`].
fn database_entry(url: &str, watch: bool, names: &mut Names) -> Value {
    let mut source = json!({ "type": "postgis_auto", "path": url.replace("${", "$${") });
    if watch {
        source["refresh_secs"] = json!(WATCH_SECS);
    }
    json!({
        "name": names.numbered("postgis", url),
        "source": source,
        "formats": ["mvt", "png"],
        "grids": ["WebMercatorQuad", "WorldCRS84Quad"],
    })
}

/// The layer `name` serving the tile archive at `written` (a path, an
/// `http(s)://` URL or an object URL) in its own grid, format and zooms,
/// its tiles passed through as stored (and kept in the memory cache); with
/// the archive's location and the source opened to read its metadata.
fn archive_layer(
    written: &str,
    kind: ArchiveFormat,
    name: &str,
) -> Result<(Value, String, Arc<dyn Source>), ConfigError> {
    let invalid = |reason: String| ConfigError::Invalid(format!("{written}: {reason}"));
    let is_url = written.contains("://");
    let location = if is_url {
        written.to_string()
    } else {
        std::path::absolute(written)
            .map_err(|source| ConfigError::Read {
                path: written.to_string(),
                source,
            })?
            .to_string_lossy()
            .into_owned()
    };
    let spec: SourceSpec = serde_json::from_value(json!({ "type": kind.name(), "path": location }))
        .map_err(|e| invalid(e.to_string()))?;
    let source = crate::assemble::open_layer_source(&spec, &GdalSettings::default())
        .map_err(|e| invalid(tessera_source::error_chain(&e)))?;
    let meta = source
        .tile_metadata()
        .ok_or_else(|| invalid("not read as a tile archive".into()))?;
    let file = file_name(&location);
    let format = meta.format;
    let layer = json!({
        "name": name,
        "title": meta.name.clone().unwrap_or_else(|| file.to_string()),
        "description": meta.description.clone().unwrap_or_else(|| format!("The {} archive {file}.", kind.name())),
        "keywords": ["archive", kind.name()],
        "source": { "type": kind.name(), "path": location.replace("${", "$${") },
        "grids": ["WebMercatorQuad"],
        // A vector archive is also drawn into pictures (the default style).
        "formats": if format.is_vector() { json!([format.extension(), "png"]) } else { json!([format.extension()]) },
        "min_zoom": meta.min_zoom,
        "max_zoom": meta.max_zoom,
        // Cached in the default memory store as every quick layer is: an
        // archive replaced in place is noticed within its `check_secs`
        // and reloads, its old tiles then under an old fingerprint.
    });
    Ok((layer, location, source))
}

/// Zooms a file layer offers past the zoom of its own pixels.
const ZOOMS_PAST_NATIVE: u8 = 2;

/// [`ZOOMS_PAST_NATIVE`] past the Web Mercator zoom whose pixels are as
/// fine as the raster's own at its centre (the first whose resolution is
/// at or below it), within WebMercatorQuad's zooms; `None` for a raster
/// without a georeference.
fn max_zoom_past_native(ds: &Dataset) -> Option<u8> {
    use gdal::spatial_ref::{AxisMappingStrategy, CoordTransform, SpatialRef};
    let gt = ds.geo_transform().ok()?;
    let mut from = ds.spatial_ref().ok()?;
    from.set_axis_mapping_strategy(AxisMappingStrategy::TraditionalGisOrder);
    let mut to = SpatialRef::from_epsg(3857).ok()?;
    to.set_axis_mapping_strategy(AxisMappingStrategy::TraditionalGisOrder);
    let transform = CoordTransform::new(&from, &to).ok()?;
    let (width, height) = ds.raster_size();
    let (col, row) = (width as f64 / 2.0, height as f64 / 2.0);
    let x = gt[0] + gt[1] * col + gt[2] * row;
    let y = gt[3] + gt[4] * col + gt[5] * row;
    // The centre pixel and its neighbours to the right and below.
    let mut xs = [x, x + gt[1], x + gt[2]];
    let mut ys = [y, y + gt[4], y + gt[5]];
    transform
        .transform_coords(&mut xs, &mut ys, &mut [0.0; 3])
        .ok()?;
    let across = (xs[1] - xs[0]).hypot(ys[1] - ys[0]);
    let down = (xs[2] - xs[0]).hypot(ys[2] - ys[0]);
    let resolution = across.min(down);
    if !resolution.is_finite() || resolution <= 0.0 {
        return None;
    }
    let grid = tessera_grid::TileMatrixSet::web_mercator_quad();
    let native = grid.zoom_for_resolution(resolution);
    Some(
        native
            .saturating_add(ZOOMS_PAST_NATIVE)
            .min(grid.max_zoom()),
    )
}

/// Opens `path` as raster or vector data, read-only.
fn open_any(path: &str) -> Result<Dataset, String> {
    let options = DatasetOptions {
        open_flags: GdalOpenFlags::GDAL_OF_RASTER
            | GdalOpenFlags::GDAL_OF_VECTOR
            | GdalOpenFlags::GDAL_OF_READONLY,
        ..DatasetOptions::default()
    };
    Dataset::open_ex(path, options).map_err(|e| format!("GDAL cannot open it: {e}"))
}

/// The last segment of a path or URL, without a query or fragment.
fn file_name(written: &str) -> &str {
    written
        .rsplit('/')
        .next()
        .unwrap_or(written)
        .split(['?', '#'])
        .next()
        .unwrap_or_default()
}

/// The layer name of each file: its stem with every character a layer
/// name may not hold replaced by `_` (`layer` when nothing is left); when
/// two files share a stem (`world.pmtiles`, `world.mbtiles`), stem and
/// extension (`world-pmtiles`, `world-mbtiles`). Databases get theirs
/// later, numbered.
fn base_names(paths: &[PathBuf]) -> Vec<String> {
    let split: Vec<(String, String)> = paths
        .iter()
        .map(|p| {
            let file = file_name(&p.to_string_lossy()).to_string();
            match file.rsplit_once('.') {
                Some((stem, ext)) if !stem.is_empty() => (clean_name(stem), clean_name(ext)),
                _ => (clean_name(&file), String::new()),
            }
        })
        .collect();
    split
        .iter()
        .map(|(stem, ext)| {
            let shared = split.iter().filter(|(s, _)| s == stem).count() > 1;
            if shared && !ext.is_empty() {
                format!("{stem}-{ext}")
            } else {
                stem.clone()
            }
        })
        .collect()
}

/// The layer names given so far, each with what it serves.
#[derive(Default)]
struct Names(HashMap<String, String>);

impl Names {
    /// `name` for `what`, or an error naming both when another file has
    /// it: a layer is never renamed behind its user's back.
    fn claim(&mut self, name: &str, what: &str) -> Result<String, ConfigError> {
        if let Some(other) = self.0.get(name) {
            return Err(ConfigError::Invalid(format!(
                "{other} and {what} would both be served as layer {name:?}: rename one \
                 of the files, or write a configuration that names the layers"
            )));
        }
        self.0.insert(name.to_string(), what.to_string());
        Ok(name.to_string())
    }

    /// `name`, or `name-2`, `name-3`, ... when taken (databases, whose
    /// layers are named by their tables under this prefix).
    fn numbered(&mut self, name: &str, what: &str) -> String {
        let mut candidate = name.to_string();
        let mut n = 1;
        while self.0.contains_key(&candidate) {
            n += 1;
            candidate = format!("{name}-{n}");
        }
        self.0.insert(candidate.clone(), what.to_string());
        candidate
    }
}

/// The style for the raster `ds`: `None` for the default (RGB as it is),
/// or a style section.
fn style_for(ds: &Dataset) -> Result<Option<Value>, String> {
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
    fn names_come_from_file_stems_and_extensions_when_stems_clash() {
        let paths: Vec<PathBuf> = [
            "/d/My Ortho (2024).tif",
            "/a/world.pmtiles",
            "/b/world.mbtiles",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(
            base_names(&paths),
            ["My_Ortho__2024_", "world-pmtiles", "world-mbtiles"]
        );
        let mut names = Names::default();
        assert_eq!(names.claim("dem", "/a/dem.tif").unwrap(), "dem");
        let clash = names.claim("dem", "/b/dem.tif").unwrap_err().to_string();
        assert!(clash.contains("/a/dem.tif and /b/dem.tif"), "{clash}");
        assert_eq!(names.numbered("postgis", "pg1"), "postgis");
        assert_eq!(names.numbered("postgis", "pg2"), "postgis-2");
    }
}
