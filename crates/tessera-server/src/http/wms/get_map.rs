//! WMS GetMap: the KVP request parsed and checked into a [`GetMap`], every
//! limit checked before anything is allocated.
//!
//! Axis order: WMS 1.3.0 gives BBOX in the CRS's own axis order (latitude
//! first for EPSG:4326), 1.1.1 always x/y. Both become an x/y [`BBox`]
//! here, so the two versions give the same picture.

use std::sync::Arc;

use tessera_grid::{BBox, TileFormat};
use tessera_image::Color;
use tessera_source::Crs;

use super::Version;
use crate::config::Limits;
use crate::http::error::{ApiError, docs};
use crate::http::params::Kvp;
use crate::http::tiles::address::dimension_param;
use crate::model::Layer;
use crate::registry::Registry;
use crate::render::ImageRequest;

/// A valid GetMap: the image to render.
#[derive(Debug, Clone)]
pub struct GetMap {
    /// What to render, ready for the renderer.
    pub image: ImageRequest,
}

impl GetMap {
    /// Parses and checks the GetMap parameters of `kvp` as WMS `version`
    /// defines them, against the layers of `registry` and the `limits`.
    /// An unknown layer's hint names only layers `sees` lets the caller
    /// know of.
    pub fn from_kvp(
        kvp: &Kvp,
        version: Version,
        registry: &Registry,
        limits: &Limits,
        sees: &dyn Fn(&str) -> bool,
    ) -> Result<GetMap, ApiError> {
        let layers = layers(kvp, registry, limits, sees)?;
        let crs = crs(kvp, version, registry)?;
        let bbox = bbox(kvp, version, &crs)?;
        let (width, height) = size(kvp, limits)?;
        Ok(GetMap {
            image: ImageRequest {
                layers,
                bbox,
                crs,
                width,
                height,
                format: format(kvp)?,
                transparent: transparent(kvp)?,
                background: background(kvp)?,
                keep_alpha: true,
            },
        })
    }
}

/// LAYERS: known layers, at most `wms_max_layers`, each drawn with its
/// style in STYLES (one per layer, or one for all; empty: the defaults) at
/// the dimension values the request gives.
pub(super) fn layers(
    kvp: &Kvp,
    registry: &Registry,
    limits: &Limits,
    sees: &dyn Fn(&str) -> bool,
) -> Result<Vec<Arc<Layer>>, ApiError> {
    let names: Vec<&str> = kvp.required("LAYERS")?.split(',').collect();
    if names.len() > limits.wms_max_layers {
        return Err(ApiError::bad_request(
            "InvalidParameterValue",
            format!("at most {} layers per request", limits.wms_max_layers),
        )
        .at("LAYERS")
        .documented(docs::LIMITS));
    }
    let styles: Vec<&str> = kvp
        .get("styles")
        .map_or_else(Vec::new, |s| s.split(',').collect());
    if styles.len() > 1 && styles.len() != names.len() {
        return Err(ApiError::bad_request(
            "StyleNotDefined",
            format!(
                "STYLES lists {} styles for {} layers: give one per layer, or leave it empty",
                styles.len(),
                names.len()
            ),
        )
        .at("STYLES"));
    }
    names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let layer = registry.find_layer(name, sees).map_err(|unknown| {
                ApiError::not_found("LayerNotDefined", format!("unknown layer {unknown}"))
                    .at("LAYERS")
            })?;
            let style = styles.get(i).or(styles.first()).copied();
            let layer = layer.styled(style).map_err(|e| {
                ApiError::bad_request("StyleNotDefined", format!("layer {name:?}: {e}"))
                    .at("STYLES")
            })?;
            // Each layer at the values the request gives for its dimensions.
            layer
                .at(|dimension| dimension_param(|k| kvp.get(k), dimension))
                .map_err(|e| ApiError::from_dimension(&e))
        })
        .collect()
}

/// CRS (1.3.0) or SRS (1.1.1); the other name is accepted too.
pub(super) fn crs(kvp: &Kvp, version: Version, registry: &Registry) -> Result<Arc<Crs>, ApiError> {
    let (key, other, code) = match version {
        Version::V130 => ("CRS", "SRS", "InvalidCRS"),
        Version::V111 => ("SRS", "CRS", "InvalidSRS"),
    };
    let text = kvp.get(key).or_else(|| kvp.get(other)).ok_or_else(|| {
        ApiError::bad_request("MissingParameterValue", format!("{key} is required")).at(key)
    })?;
    registry
        .crs(text)
        .map_err(|_| ApiError::bad_request(code, format!("unknown {key} {text:?}")).at(key))
}

/// BBOX: four finite numbers, minimum below maximum, in the CRS's axis
/// order for 1.3.0.
pub(super) fn bbox(kvp: &Kvp, version: Version, crs: &Crs) -> Result<BBox, ApiError> {
    let text = kvp.required("BBOX")?;
    let bad = |why: &str| {
        ApiError::bad_request("InvalidParameterValue", format!("BBOX {text:?} {why}")).at("BBOX")
    };
    let values: Vec<f64> = text
        .split(',')
        .map(|v| v.trim().parse::<f64>())
        .collect::<Result<_, _>>()
        .map_err(|_| bad("must be four comma-separated numbers"))?;
    let [a, b, c, d] = values[..] else {
        return Err(bad("must be four comma-separated numbers"));
    };
    let (min_x, min_y, max_x, max_y) = if version == Version::V130 && crs.authority_yx {
        (b, a, d, c)
    } else {
        (a, b, c, d)
    };
    BBox::new(min_x, min_y, max_x, max_y)
        .map_err(|_| bad("must be finite with minimum below maximum on both axes"))
}

/// WIDTH and HEIGHT, each and their product within the limits.
pub(super) fn size(kvp: &Kvp, limits: &Limits) -> Result<(u32, u32), ApiError> {
    let width = parse_size(kvp.required("WIDTH")?, "WIDTH", limits.wms_max_width)?;
    let height = parse_size(kvp.required("HEIGHT")?, "HEIGHT", limits.wms_max_height)?;
    let pixels = u64::from(width) * u64::from(height);
    if pixels > limits.wms_max_pixels {
        return Err(ApiError::bad_request(
            "InvalidParameterValue",
            format!(
                "WIDTH x HEIGHT is {pixels} pixels; the limit is {}",
                limits.wms_max_pixels
            ),
        )
        .at("WIDTH")
        .documented(docs::LIMITS));
    }
    Ok((width, height))
}

/// Parses WIDTH or HEIGHT: plain digits, 1..=max, checked before anything
/// is allocated.
fn parse_size(text: &str, name: &'static str, max: u32) -> Result<u32, ApiError> {
    let bad = || {
        ApiError::bad_request(
            "InvalidParameterValue",
            format!("{name} {text:?} must be an integer from 1 to {max}"),
        )
        .at(name)
        .documented(docs::LIMITS)
    };
    if text.is_empty() || text.len() > 10 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let v: u64 = text.parse().map_err(|_| bad())?;
    if v == 0 || v > u64::from(max) {
        return Err(bad());
    }
    Ok(v as u32)
}

/// FORMAT: a media type of a format tessera encodes.
fn format(kvp: &Kvp) -> Result<TileFormat, ApiError> {
    let text = kvp.required("FORMAT")?;
    // The mixed JPEG/PNG format is a tile format: a map must be one
    // media type, the one asked for.
    TileFormat::from_mime(text)
        .filter(|f| f.is_picture() && *f != TileFormat::Mixed)
        .ok_or_else(|| {
            ApiError::bad_request(
                "InvalidFormat",
                format!(
                    "FORMAT {text:?} is not supported; use image/png, image/jpeg or image/webp"
                ),
            )
            .at("FORMAT")
        })
}

/// TRANSPARENT: `TRUE` or `FALSE` in any case (default false).
fn transparent(kvp: &Kvp) -> Result<bool, ApiError> {
    match kvp.get("transparent") {
        None => Ok(false),
        Some(t) if t.eq_ignore_ascii_case("true") => Ok(true),
        Some(t) if t.eq_ignore_ascii_case("false") => Ok(false),
        Some(t) => Err(ApiError::bad_request(
            "InvalidParameterValue",
            format!("TRANSPARENT {t:?} must be TRUE or FALSE"),
        )
        .at("TRANSPARENT")),
    }
}

/// BGCOLOR: `0xRRGGBB` (default white).
fn background(kvp: &Kvp) -> Result<Color, ApiError> {
    match kvp.get("bgcolor") {
        None => Ok(Color([255, 255, 255, 255])),
        Some(t) => Color::parse(t).filter(|_| t.len() == 8).ok_or_else(|| {
            ApiError::bad_request(
                "InvalidParameterValue",
                format!("BGCOLOR {t:?} must be 0xRRGGBB"),
            )
            .at("BGCOLOR")
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_plain_positive_integers_within_the_limit() {
        assert_eq!(parse_size("256", "WIDTH", 4096).unwrap(), 256);
        for bad in ["0", "-1", "1.5", "", "4097", "99999999999", "1e3", " 1"] {
            assert!(parse_size(bad, "WIDTH", 4096).is_err(), "{bad:?}");
        }
    }
}
