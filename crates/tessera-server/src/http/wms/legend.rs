//! WMS GetLegendGraphic (SLD profile, as GeoServer and MapServer answer
//! it): a vector layer's symbols, one per style rule, stacked top to
//! bottom; a ramp or hillshade layer's colour ramp, highest value at the
//! top. As PNG, or as JSON naming each rule or stop.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tessera_grid::TileFormat;
use tessera_image::{Color, EncodeOptions, Raster, RgbaImage, encode};

use crate::http::error::ApiError;
use crate::http::params::Kvp;
use crate::model::Layer;
use crate::registry::Registry;

/// Default symbol size in pixels (WIDTH and HEIGHT).
const DEFAULT_SIZE: u32 = 20;
/// The largest WIDTH or HEIGHT.
const MAX_SIZE: u32 = 512;
/// Pixels between two symbols.
const GAP: u32 = 4;

/// One of a layer's styles as capabilities documents list it, with its
/// legend's size when it has one.
#[derive(Debug, serde::Serialize)]
pub(crate) struct ListedStyle {
    name: String,
    legend: Option<LegendSize>,
}

/// A legend's size in pixels.
#[derive(Debug, serde::Serialize)]
struct LegendSize {
    width: u32,
    height: u32,
}

impl ListedStyle {
    /// `layer`'s styles, the default first.
    pub(crate) fn of(layer: &Layer) -> Vec<ListedStyle> {
        std::iter::once((layer.style_name.as_str(), layer))
            .chain(
                layer
                    .other_styles
                    .iter()
                    .map(|(n, l)| (n.as_str(), l.as_ref())),
            )
            .map(|(name, styled)| ListedStyle {
                name: name.to_string(),
                legend: legend_size(styled).map(|(width, height)| LegendSize { width, height }),
            })
            .collect()
    }
}

/// The default legend's size in pixels, when the layer has one (a styled
/// vector layer, or a ramp).
pub(super) fn legend_size(layer: &Layer) -> Option<(u32, u32)> {
    let rules = layer
        .source
        .as_features()
        .map_or(0, tessera_source::FeatureSource::rule_count);
    if rules > 0 {
        let n = u32::try_from(rules).unwrap_or(u32::MAX / 64);
        return Some((DEFAULT_SIZE, n * DEFAULT_SIZE + (n - 1) * GAP));
    }
    layer
        .ramp
        .as_ref()
        .map(|_| (DEFAULT_SIZE, DEFAULT_SIZE * 5))
}

/// Answers a GetLegendGraphic.
pub(super) fn respond(
    kvp: &Kvp,
    registry: &Registry,
    sees: &dyn Fn(&str) -> bool,
) -> Result<Response, ApiError> {
    let name = kvp.required("LAYER")?;
    let layer = registry.find_layer(name, sees).map_err(|unknown| {
        ApiError::not_found("LayerNotDefined", format!("unknown layer {unknown}")).at("LAYER")
    })?;
    let layer = layer.styled(kvp.get("style")).map_err(|e| {
        ApiError::bad_request("StyleNotDefined", format!("layer {name:?}: {e}")).at("STYLE")
    })?;
    let json = match kvp.get("format") {
        None => false,
        Some(f) if f.eq_ignore_ascii_case("application/json") => true,
        Some(f) if TileFormat::from_mime(f) == Some(TileFormat::Png) => false,
        Some(f) => {
            return Err(ApiError::bad_request(
                "InvalidFormat",
                format!(
                    "FORMAT {f:?} is not supported for legends; use image/png or application/json"
                ),
            )
            .at("FORMAT"));
        }
    };
    let width = dimension(kvp, "WIDTH")?;
    let height = dimension(kvp, "HEIGHT")?;
    let rule = kvp.get("rule");
    if let Some(vector) = layer.source.as_features() {
        let mut symbols = vector.legend(width.max(height));
        if let Some(r) = rule {
            symbols.retain(|s| s.label == r);
            if symbols.is_empty() {
                return Err(ApiError::bad_request(
                    "InvalidParameterValue",
                    format!("layer {name:?} has no rule {r:?}"),
                )
                .at("RULE"));
            }
        }
        if !symbols.is_empty() {
            if json {
                let rules: Vec<Value> = symbols
                    .iter()
                    .map(|s| json!({ "name": s.label, "layer": s.layer }))
                    .collect();
                return Ok(json_response(&json!({ "layer": name, "rules": rules })));
            }
            let rasters: Vec<&Raster> = symbols.iter().map(|s| &s.symbol).collect();
            return png_response(&stack(&rasters));
        }
    }
    if let Some(ramp) = &layer.ramp {
        if json {
            let stops: Vec<Value> = ramp
                .stops()
                .iter()
                .map(|s| json!({ "value": s.value, "color": hex(s.color) }))
                .collect();
            return Ok(json_response(&json!({ "layer": name, "ramp": stops })));
        }
        // A strip five symbols tall: the highest value at the top.
        let (w, h) = (width, height.saturating_mul(5).min(MAX_SIZE * 5));
        let stops = ramp.stops();
        let (lo, hi) = (stops[0].value, stops[stops.len() - 1].value);
        let mut data = Vec::with_capacity(w as usize * h as usize * 4);
        for y in 0..h {
            let t = if h > 1 {
                f64::from(y) / f64::from(h - 1)
            } else {
                0.0
            };
            let c = ramp.color_at(hi - t * (hi - lo));
            for _ in 0..w {
                data.extend_from_slice(&c);
            }
        }
        let img = RgbaImage::from_raw(w, h, data).ok_or_else(|| {
            ApiError::bad_request("InvalidParameterValue", "legend size is too large")
        })?;
        return png_response(&img);
    }
    Err(ApiError::bad_request(
        "InvalidParameterValue",
        format!(
            "layer {name:?} has no legend: it shows its source's own colours (only styled \
             vector layers and ramp or hillshade styles have one)"
        ),
    )
    .at("LAYER"))
}

fn dimension(kvp: &Kvp, name: &'static str) -> Result<u32, ApiError> {
    let Some(text) = kvp.get(name) else {
        return Ok(DEFAULT_SIZE);
    };
    text.parse::<u32>()
        .ok()
        .filter(|v| (1..=MAX_SIZE).contains(v))
        .ok_or_else(|| {
            ApiError::bad_request(
                "InvalidParameterValue",
                format!("{name} {text:?} must be an integer from 1 to {MAX_SIZE}"),
            )
            .at(name)
        })
}

fn hex(c: Color) -> String {
    let [r, g, b, a] = c.0;
    format!("#{r:02x}{g:02x}{b:02x}{a:02x}")
}

/// Symbols stacked top to bottom, `GAP` pixels apart.
fn stack(symbols: &[&Raster]) -> RgbaImage {
    let width = symbols.iter().map(|s| s.width).max().unwrap_or(1);
    let height = symbols.iter().map(|s| s.height).sum::<u32>()
        + GAP * (symbols.len().saturating_sub(1) as u32);
    let mut data = vec![0u8; width as usize * height as usize * 4];
    let mut top = 0usize;
    for s in symbols {
        for y in 0..s.height as usize {
            for x in 0..s.width as usize {
                let i = y * s.width as usize + x;
                let at = ((top + y) * width as usize + x) * 4;
                for (b, band) in s.bands.iter().take(3).enumerate() {
                    data[at + b] = band.get(i) as u8;
                }
                data[at + 3] = s.valid[i];
            }
        }
        top += s.height as usize + GAP as usize;
    }
    RgbaImage::from_raw(width, height, data).unwrap_or_else(|| RgbaImage::transparent(1, 1))
}

fn png_response(img: &RgbaImage) -> Result<Response, ApiError> {
    let bytes = encode(
        img.view(),
        TileFormat::Png,
        &EncodeOptions::default(),
        Color([0; 4]),
    )
    .map_err(|e| ApiError::internal(&e))?;
    let mut r = bytes.into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("image/png"));
    Ok(r)
}

fn json_response(doc: &Value) -> Response {
    let mut r = doc.to_string().into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_image::BandData;

    fn square(size: u32, alpha: u8) -> Raster {
        let n = (size * size) as usize;
        Raster {
            width: size,
            height: size,
            bands: vec![
                BandData::U8(vec![255; n]),
                BandData::U8(vec![0; n]),
                BandData::U8(vec![0; n]),
            ],
            valid: vec![alpha; n],
        }
    }

    #[test]
    fn symbols_stack_with_gaps_between_them() {
        let (a, b) = (square(10, 255), square(10, 128));
        let img = stack(&[&a, &b]);
        assert_eq!((img.width(), img.height()), (10, 10 + GAP + 10));
        let alpha = |y: u32| img.as_raw()[(y * 10 * 4 + 3) as usize];
        assert_eq!(alpha(0), 255);
        assert_eq!(alpha(10), 0, "the gap is transparent");
        assert_eq!(alpha(10 + GAP), 128);
    }
}
