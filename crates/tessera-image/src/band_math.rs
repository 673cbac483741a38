//! The `expression` style: band math ([`crate::expression`]) and then a
//! picture of its value: through a named colour map (viridis, magma,
//! ColorBrewer's rdylgn, ...: the `colorous` crate's tables of matplotlib's
//! and ColorBrewer's colours) over a `rescale` range, through a ramp of
//! stops, into discrete `intervals`, or as grey; or three expressions
//! (`"b4; b3; b2"`) as red, green and blue.

use serde::Deserialize;

use crate::expression::Expression;
use crate::{Color, ColorRamp, PixelScale, RampStop, Raster, RgbaImage, Style, StyleError};

/// `type: expression` settings.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExpressionSpec {
    /// One expression, or three separated by `;` (red, green, blue).
    pub expression: String,
    /// The range `[min, max]` of values mapped onto the colour map (or onto
    /// 0..255 for grey and RGB; default `[0, 255]` there).
    #[serde(default)]
    pub rescale: Option<[f64; 2]>,
    /// A named colour map (`viridis`; `viridis_r` reversed), or ramp stops
    /// in the expression's values.
    #[serde(default)]
    pub colormap: Option<ColormapSpec>,
    /// Discrete classes: the colour of the first interval holding the
    /// value (`min` included, `max` excluded); a value in none is
    /// transparent.
    #[serde(default)]
    pub intervals: Option<Vec<Interval>>,
    /// A band value taken as no data besides the source's own.
    #[serde(default)]
    pub nodata: Option<f64>,
}

/// A colour map: a name, or stops.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(untagged)]
pub enum ColormapSpec {
    /// A named map.
    Named(String),
    /// Ramp stops in the expression's values.
    Stops(Vec<RampStop>),
}

/// One class of `intervals`.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Interval {
    /// Lowest value of the class (default: no lower bound).
    #[serde(default)]
    pub min: Option<f64>,
    /// Value above the class (default: no upper bound).
    #[serde(default)]
    pub max: Option<f64>,
    /// Its colour.
    pub color: Color,
}

/// The named colour maps, as written in a style (lower case; `_r`
/// reverses any of them).
pub const COLORMAPS: &[&str] = &[
    "viridis",
    "magma",
    "inferno",
    "plasma",
    "cividis",
    "turbo",
    "cubehelix",
    "rainbow",
    "sinebow",
    "warm",
    "cool",
    "spectral",
    "rdylgn",
    "rdylbu",
    "rdbu",
    "rdgy",
    "brbg",
    "piyg",
    "prgn",
    "puor",
    "greys",
    "blues",
    "greens",
    "oranges",
    "purples",
    "reds",
    "bugn",
    "bupu",
    "gnbu",
    "orrd",
    "pubu",
    "pubugn",
    "purd",
    "rdpu",
    "ylgn",
    "ylgnbu",
    "ylorbr",
    "ylorrd",
];

/// The 256 colours of named map `name` from its low end to its high end,
/// as matplotlib has them: the viridis family and the other continuous
/// maps sampled; a ColorBrewer map interpolated linearly between its class
/// colours (9 for sequential maps, 11 for diverging ones), as matplotlib
/// builds its own from the same colours.
pub fn colormap_lut(name: &str) -> Result<Vec<[u8; 4]>, StyleError> {
    use colorous as c;
    let lower = name.to_ascii_lowercase();
    let (base, reversed) = match lower.strip_suffix("_r") {
        Some(base) => (base, true),
        None => (lower.as_str(), false),
    };
    let (gradient, classes) = match base {
        "viridis" => (c::VIRIDIS, 0),
        "magma" => (c::MAGMA, 0),
        "inferno" => (c::INFERNO, 0),
        "plasma" => (c::PLASMA, 0),
        "cividis" => (c::CIVIDIS, 0),
        "turbo" => (c::TURBO, 0),
        "cubehelix" => (c::CUBEHELIX, 0),
        "rainbow" => (c::RAINBOW, 0),
        "sinebow" => (c::SINEBOW, 0),
        "warm" => (c::WARM, 0),
        "cool" => (c::COOL, 0),
        "brbg" => (c::BROWN_GREEN, 11),
        "prgn" => (c::PURPLE_GREEN, 11),
        "piyg" => (c::PINK_GREEN, 11),
        "puor" => (c::PURPLE_ORANGE, 11),
        "rdbu" => (c::RED_BLUE, 11),
        "rdgy" => (c::RED_GREY, 11),
        "rdylbu" => (c::RED_YELLOW_BLUE, 11),
        "rdylgn" => (c::RED_YELLOW_GREEN, 11),
        "spectral" => (c::SPECTRAL, 11),
        "bugn" => (c::BLUE_GREEN, 9),
        "bupu" => (c::BLUE_PURPLE, 9),
        "gnbu" => (c::GREEN_BLUE, 9),
        "orrd" => (c::ORANGE_RED, 9),
        "pubugn" => (c::PURPLE_BLUE_GREEN, 9),
        "pubu" => (c::PURPLE_BLUE, 9),
        "purd" => (c::PURPLE_RED, 9),
        "rdpu" => (c::RED_PURPLE, 9),
        "ylgnbu" => (c::YELLOW_GREEN_BLUE, 9),
        "ylgn" => (c::YELLOW_GREEN, 9),
        "ylorbr" => (c::YELLOW_ORANGE_BROWN, 9),
        "ylorrd" => (c::YELLOW_ORANGE_RED, 9),
        "blues" => (c::BLUES, 9),
        "greens" => (c::GREENS, 9),
        "greys" => (c::GREYS, 9),
        "oranges" => (c::ORANGES, 9),
        "purples" => (c::PURPLES, 9),
        "reds" => (c::REDS, 9),
        _ => {
            return Err(StyleError::Invalid(format!(
                "colormap {name:?} is not known; named maps: {} (add _r to reverse one), or give stops",
                COLORMAPS.join(", ")
            )));
        }
    };
    let rgb = |c: colorous::Color| [c.r, c.g, c.b];
    let at = |t: f64| -> [u8; 4] {
        let [r, g, b] = if classes == 0 {
            rgb(gradient.eval_continuous(t))
        } else {
            let x = t * (classes - 1) as f64;
            let i = (x.floor() as usize).min(classes - 2);
            let f = x - i as f64;
            let lo = rgb(gradient.eval_rational(i, classes));
            let hi = rgb(gradient.eval_rational(i + 1, classes));
            let mix =
                |a: u8, b: u8| (f64::from(a) + (f64::from(b) - f64::from(a)) * f).round() as u8;
            [mix(lo[0], hi[0]), mix(lo[1], hi[1]), mix(lo[2], hi[2])]
        };
        [r, g, b, 255]
    };
    Ok((0..256u16)
        .map(|i| {
            let t = f64::from(i) / 255.0;
            at(if reversed { 1.0 - t } else { t })
        })
        .collect())
}

/// The ramp a legend shows for `spec`: its stops, its named map sampled
/// over `rescale`, or grey over `rescale`; `None` for RGB, classes or a
/// spec that does not build.
pub fn legend_ramp(spec: &ExpressionSpec) -> Option<ColorRamp> {
    if spec.expression.contains(';') || spec.intervals.is_some() {
        return None;
    }
    let [lo, hi] = spec.rescale.unwrap_or([0.0, 255.0]);
    let sampled = |colors: &dyn Fn(usize) -> [u8; 4]| {
        ColorRamp::new(
            (0..=8)
                .map(|i| RampStop {
                    value: lo + (hi - lo) * i as f64 / 8.0,
                    color: Color(colors(i * 255 / 8)),
                })
                .collect(),
        )
        .ok()
    };
    match &spec.colormap {
        Some(ColormapSpec::Stops(stops)) => ColorRamp::new(stops.clone()).ok(),
        Some(ColormapSpec::Named(name)) => {
            let lut = colormap_lut(name).ok()?;
            spec.rescale?;
            sampled(&|i| lut[i])
        }
        None => sampled(&|i| {
            let g = u8::try_from(i).unwrap_or(u8::MAX);
            [g, g, g, 255]
        }),
    }
}

/// How one value becomes a colour.
#[derive(Debug)]
enum Paint {
    /// A named map over `rescale`.
    Lut(Vec<[u8; 4]>, [f64; 2]),
    /// Ramp stops.
    Ramp(ColorRamp),
    /// Discrete classes.
    Classes(Vec<Interval>),
    /// Grey over `rescale`.
    Grey([f64; 2]),
}

/// The compiled `expression` style.
#[derive(Debug)]
pub struct ExpressionStyle {
    expressions: Vec<Expression>,
    paint: Paint,
    rescale: [f64; 2],
    nodata: Option<f64>,
}

impl ExpressionStyle {
    /// Compiles `spec` for a source of `band_count` bands.
    pub fn new(spec: &ExpressionSpec, band_count: usize) -> Result<ExpressionStyle, StyleError> {
        let invalid = |m: String| StyleError::Invalid(m);
        let expressions = spec
            .expression
            .split(';')
            .map(|text| {
                Expression::parse(text.trim()).map_err(|e| invalid(format!("expression: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if expressions.len() != 1 && expressions.len() != 3 {
            return Err(invalid(format!(
                "{} expressions: give one (a value) or three separated by ';' (red, green, blue)",
                expressions.len()
            )));
        }
        if let Some(band) = expressions
            .iter()
            .flat_map(|e| e.bands().iter().copied())
            .find(|b| *b > band_count)
        {
            return Err(StyleError::MissingBand {
                band,
                available: band_count,
            });
        }
        if let Some([lo, hi]) = spec.rescale
            && !(lo.is_finite() && hi.is_finite() && lo < hi)
        {
            return Err(invalid("rescale must be [min, max] with min < max".into()));
        }
        let rescale = spec.rescale.unwrap_or([0.0, 255.0]);
        let paint = match (&spec.colormap, &spec.intervals) {
            (Some(_), Some(_)) => {
                return Err(invalid("give colormap or intervals, not both".into()));
            }
            _ if expressions.len() == 3
                && (spec.colormap.is_some() || spec.intervals.is_some()) =>
            {
                return Err(invalid(
                    "three expressions are red, green and blue: a colormap or intervals take one"
                        .into(),
                ));
            }
            (Some(ColormapSpec::Named(name)), None) => {
                let range = spec.rescale.ok_or_else(|| {
                    invalid(format!(
                        "colormap {name:?} needs rescale: [min, max], the values at its two ends"
                    ))
                })?;
                Paint::Lut(colormap_lut(name)?, range)
            }
            (Some(ColormapSpec::Stops(stops)), None) => {
                Paint::Ramp(ColorRamp::new(stops.clone()).map_err(invalid)?)
            }
            (None, Some(classes)) => {
                if classes.is_empty() {
                    return Err(invalid("intervals is empty".into()));
                }
                if classes
                    .iter()
                    .any(|c| matches!((c.min, c.max), (Some(lo), Some(hi)) if lo.partial_cmp(&hi) != Some(std::cmp::Ordering::Less)))
                {
                    return Err(invalid("each interval needs min < max".into()));
                }
                Paint::Classes(classes.clone())
            }
            (None, None) => Paint::Grey(rescale),
        };
        Ok(ExpressionStyle {
            expressions,
            paint,
            rescale,
            nodata: spec.nodata,
        })
    }

    fn color(&self, v: f64) -> Option<[u8; 4]> {
        let unit = |[lo, hi]: [f64; 2]| ((v - lo) / (hi - lo)).clamp(0.0, 1.0);
        Some(match &self.paint {
            Paint::Lut(lut, range) => lut[(unit(*range) * 255.0).round() as usize],
            Paint::Ramp(ramp) => ramp.color_at(v),
            Paint::Classes(classes) => {
                classes
                    .iter()
                    .find(|c| c.min.is_none_or(|lo| v >= lo) && c.max.is_none_or(|hi| v < hi))?
                    .color
                    .0
            }
            Paint::Grey(range) => {
                let g = (unit(*range) * 255.0).round() as u8;
                [g, g, g, 255]
            }
        })
    }
}

impl Style for ExpressionStyle {
    fn bands(&self) -> Vec<usize> {
        let mut bands: Vec<usize> = self
            .expressions
            .iter()
            .flat_map(|e| e.bands().iter().copied())
            .collect();
        bands.sort_unstable();
        bands.dedup();
        if bands.is_empty() {
            bands.push(1);
        }
        bands
    }

    /// The value of the (first) expression.
    fn values(&self, raster: &Raster) -> Option<Result<Vec<f32>, StyleError>> {
        Some(
            self.expressions[0]
                .evaluate(raster, self.nodata)
                .map_err(StyleError::Invalid),
        )
    }

    fn apply(&self, raster: &Raster, _scale: PixelScale) -> Result<RgbaImage, StyleError> {
        let mut out = RgbaImage::transparent(raster.width, raster.height);
        let values = self
            .expressions
            .iter()
            .map(|e| e.evaluate(raster, self.nodata).map_err(StyleError::Invalid))
            .collect::<Result<Vec<_>, _>>()?;
        let pixels = out.as_raw_mut().chunks_exact_mut(4);
        if let [r, g, b] = &values[..] {
            let [lo, hi] = self.rescale;
            let byte = |v: f32| {
                ((f64::from(v) - lo) / (hi - lo) * 255.0)
                    .round()
                    .clamp(0.0, 255.0) as u8
            };
            for (i, px) in pixels.enumerate() {
                if r[i].is_nan() || g[i].is_nan() || b[i].is_nan() {
                    continue;
                }
                px.copy_from_slice(&[byte(r[i]), byte(g[i]), byte(b[i]), raster.valid[i]]);
            }
            return Ok(out);
        }
        for (i, px) in pixels.enumerate() {
            let v = values[0][i];
            if v.is_nan() {
                continue;
            }
            if let Some(c) = self.color(f64::from(v)) {
                px.copy_from_slice(&c);
                px[3] = ((u16::from(c[3]) * u16::from(raster.valid[i])) / 255) as u8;
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml_like: serde_json::Value) -> ExpressionSpec {
        serde_json::from_value(yaml_like).unwrap()
    }

    fn scale() -> PixelScale {
        PixelScale {
            res_x: 1.0,
            res_y: 1.0,
            ground_x: 1.0,
            ground_y: 1.0,
        }
    }

    #[test]
    fn ndvi_through_a_named_map_takes_its_ends_and_middle() {
        let style = ExpressionStyle::new(
            &spec(serde_json::json!({"expression": "(b2 - b1) / (b2 + b1)", "rescale": [-1, 1], "colormap": "viridis"})),
            2,
        )
        .unwrap();
        let img = style
            .apply(
                &Raster::row(vec![vec![1.0, 0.0, 1.0, 0.0], vec![0.0, 1.0, 1.0, 0.0]]),
                scale(),
            )
            .unwrap();
        let lut = colormap_lut("viridis").unwrap();
        let px = |i: usize| &img.as_raw()[i * 4..i * 4 + 4];
        assert_eq!(px(0), lut[0], "-1 is the low end");
        assert_eq!(px(1), lut[255], "1 is the high end");
        assert_eq!(px(2), lut[128], "0 is the middle");
        assert_eq!(px(3)[3], 0, "0/0 is transparent");
        // Viridis's ends, as matplotlib has them (within rounding).
        let near = |a: [u8; 4], b: [u8; 3]| a.iter().zip(b).all(|(x, y)| x.abs_diff(y) <= 2);
        assert!(near(lut[0], [68, 1, 84]), "{:?}", lut[0]);
        assert!(near(lut[255], [253, 231, 37]), "{:?}", lut[255]);
        assert_eq!(colormap_lut("viridis_r").unwrap()[0], lut[255]);
    }

    #[test]
    fn intervals_classify_and_three_expressions_are_rgb() {
        let style = ExpressionStyle::new(
            &spec(serde_json::json!({"expression": "b1", "intervals": [
                {"max": 0, "color": "#0000ff"}, {"min": 0, "max": 10, "color": "#00ff00"}]})),
            1,
        )
        .unwrap();
        let img = style
            .apply(&Raster::row(vec![vec![-5.0, 0.0, 10.0]]), scale())
            .unwrap();
        assert_eq!(img.as_raw(), &[0, 0, 255, 255, 0, 255, 0, 255, 0, 0, 0, 0]);
        let rgb = ExpressionStyle::new(
            &spec(serde_json::json!({"expression": "b1; b1 * 2; 0", "rescale": [0, 100]})),
            1,
        )
        .unwrap();
        let img = rgb.apply(&Raster::row(vec![vec![50.0]]), scale()).unwrap();
        assert_eq!(img.as_raw(), &[128, 255, 0, 255]);
    }

    #[test]
    fn mistakes_are_refused_when_the_style_is_built() {
        for (value, says) in [
            (
                serde_json::json!({"expression": "b1", "colormap": "viridis"}),
                "needs rescale",
            ),
            (
                serde_json::json!({"expression": "b1", "colormap": "nope", "rescale": [0, 1]}),
                "not known",
            ),
            (serde_json::json!({"expression": "b1; b2"}), "2 expressions"),
            (
                serde_json::json!({"expression": "b1; b1; b1", "colormap": "viridis", "rescale": [0, 1]}),
                "take one",
            ),
            (serde_json::json!({"expression": "b1 +"}), "expression:"),
        ] {
            let e = ExpressionStyle::new(&spec(value.clone()), 1).unwrap_err();
            assert!(e.to_string().contains(says), "{value}: {e}");
        }
        assert!(matches!(
            ExpressionStyle::new(&spec(serde_json::json!({"expression": "b4"})), 3),
            Err(StyleError::MissingBand { band: 4, .. })
        ));
    }
}
