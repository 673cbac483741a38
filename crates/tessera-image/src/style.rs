//! Styles: how source bands become RGBA pixels.
//!
//! A [`Style`] receives a [`Raster`] that is larger than the output by
//! [`Style::margin`] pixels on every side (hillshade needs its neighbours),
//! and returns an [`RgbaImage`] of the inner window. Pixels that the raster
//! marks invalid become transparent.

use serde::Deserialize;

use crate::{BandData, ColorRamp, RampStop, Raster, RgbaImage};

/// Errors from building or applying a style.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum StyleError {
    /// The style configuration is inconsistent.
    #[error("invalid style: {0}")]
    Invalid(String),
    /// The raster does not have what the style needs.
    #[error("style needs band {band} but the source has {available} band(s)")]
    MissingBand {
        /// 1-based band index asked for.
        band: usize,
        /// Bands the source offers.
        available: usize,
    },
}

/// The size of one raster pixel, both in CRS units and on the ground (in
/// metres, to match elevations in metres). The caller works out the ground
/// size from the target CRS and the window's latitude.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PixelScale {
    /// Pixel width in CRS units.
    pub res_x: f64,
    /// Pixel height in CRS units.
    pub res_y: f64,
    /// Pixel width on the ground.
    pub ground_x: f64,
    /// Pixel height on the ground.
    pub ground_y: f64,
}

/// Turns source bands into RGBA.
pub trait Style: Send + Sync + std::fmt::Debug {
    /// Pixels of context needed around the output window on each side.
    fn margin(&self) -> u32 {
        0
    }

    /// 1-based source band indexes this style reads.
    fn bands(&self) -> Vec<usize>;

    /// Styles `raster` (output size plus the margin on each side). `scale`
    /// is the ground size of the raster's pixels.
    fn apply(&self, raster: &Raster, scale: PixelScale) -> Result<RgbaImage, StyleError>;

    /// Whether the style's image of a source's RGBA pixels (bands 1-3 as
    /// colour, the validity as alpha) is those pixels, with the colour of
    /// fully transparent ones cleared ([`RgbaImage::clear_transparent`]):
    /// a renderer may then take an upstream's image without
    /// [`Style::apply`]. False by default.
    fn keeps_rgba(&self) -> bool {
        false
    }

    /// The value the style computes from the bands at every pixel (band
    /// math's result, NaN where there is none), when it computes one:
    /// feature info reports it. `None` by default.
    fn values(&self, raster: &Raster) -> Option<Result<Vec<f32>, StyleError>> {
        let _ = raster;
        None
    }
}

/// Style configuration, tagged by `type`.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum StyleSpec {
    /// RGB(A) passthrough, optionally with band selection and a linear stretch.
    Rgb(RgbSpec),
    /// A single band through a color ramp.
    Ramp(RampSpec),
    /// Shaded relief from a single elevation band, optionally over a ramp.
    Hillshade(HillshadeSpec),
    /// The steepness of an elevation band (degrees, or percent) through a
    /// ramp, as `gdaldem slope`.
    Slope(crate::relief::SlopeSpec),
    /// The direction an elevation band's slopes face (degrees clockwise
    /// from north) through a ramp, as `gdaldem aspect`.
    Aspect(crate::relief::AspectSpec),
    /// Band math, then a colour map, classes, grey or RGB.
    Expression(crate::band_math::ExpressionSpec),
}

impl Default for StyleSpec {
    fn default() -> Self {
        StyleSpec::Rgb(RgbSpec::default())
    }
}

/// RGB(A) passthrough settings.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RgbSpec {
    /// Bands for red, green and blue (1-based); default `[1, 2, 3]`, or
    /// `[1, 1, 1]` for a single-band source.
    #[serde(default)]
    pub bands: Option<[usize; 3]>,
    /// Linear stretch `[min, max]` mapped to 0..255; none means values are used as they are.
    #[serde(default)]
    pub rescale: Option<[f64; 2]>,
}

/// Color ramp settings.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RampSpec {
    /// Band to color (1-based, default 1).
    #[serde(default = "one")]
    pub band: usize,
    /// Ramp stops, increasing by value.
    pub stops: Vec<RampStop>,
    /// A value to treat as no data besides the source's own nodata.
    #[serde(default)]
    pub nodata: Option<f64>,
}

/// Hillshade settings (Horn's method, as `gdaldem hillshade`).
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HillshadeSpec {
    /// Elevation band (1-based, default 1).
    #[serde(default = "one")]
    pub band: usize,
    /// Direction of the light in degrees clockwise from north (default 315).
    #[serde(default = "default_azimuth")]
    pub azimuth: f64,
    /// Altitude of the light above the horizon in degrees (default 45).
    #[serde(default = "default_altitude")]
    pub altitude: f64,
    /// Vertical exaggeration (default 1).
    #[serde(default = "one_f")]
    pub z_factor: f64,
    /// Ratio of horizontal units to elevation units (like `gdaldem -s`, for
    /// example 111120 for degrees over metres). When absent the server works
    /// it out from the target CRS and latitude.
    #[serde(default)]
    pub scale: Option<f64>,
    /// A color ramp to shade; grey when absent.
    #[serde(default)]
    pub ramp: Option<Vec<RampStop>>,
    /// How strongly the shading darkens the ramp colors, 0..=1 (default 0.7).
    #[serde(default = "default_blend")]
    pub blend: f64,
    /// A value to treat as no data besides the source's own nodata.
    #[serde(default)]
    pub nodata: Option<f64>,
    /// Light from four directions (225, 270, 315 and 360 degrees) weighed
    /// by each slope's aspect, as `gdaldem hillshade -multidirectional`:
    /// every slope is lit from somewhere; `azimuth` is then unused.
    #[serde(default)]
    pub multidirectional: bool,
}

pub(crate) fn one() -> usize {
    1
}
pub(crate) fn one_f() -> f64 {
    1.0
}
fn default_azimuth() -> f64 {
    315.0
}
fn default_altitude() -> f64 {
    45.0
}
fn default_blend() -> f64 {
    0.7
}

/// Builds a style from its configuration, given the source's band count.
pub fn build_style(spec: &StyleSpec, band_count: usize) -> Result<Box<dyn Style>, StyleError> {
    let check_band = |band: usize| {
        if band == 0 || band > band_count {
            Err(StyleError::MissingBand {
                band,
                available: band_count,
            })
        } else {
            Ok(())
        }
    };
    match spec {
        StyleSpec::Rgb(s) => {
            let bands = s.bands.unwrap_or(if band_count >= 3 {
                [1, 2, 3]
            } else {
                [1, 1, 1]
            });
            for b in bands {
                check_band(b)?;
            }
            if let Some([lo, hi]) = s.rescale
                && !(lo.is_finite() && hi.is_finite() && lo < hi)
            {
                return Err(StyleError::Invalid(
                    "rescale must be [min, max] with min < max".into(),
                ));
            }
            Ok(Box::new(RgbStyle {
                bands,
                rescale: s.rescale,
            }))
        }
        StyleSpec::Ramp(s) => {
            check_band(s.band)?;
            Ok(Box::new(RampStyle {
                band: s.band,
                ramp: ColorRamp::new(s.stops.clone()).map_err(StyleError::Invalid)?,
                nodata: s.nodata,
            }))
        }
        StyleSpec::Expression(s) => Ok(Box::new(crate::band_math::ExpressionStyle::new(
            s, band_count,
        )?)),
        StyleSpec::Hillshade(s) => {
            check_band(s.band)?;
            if !(0.0..=90.0).contains(&s.altitude) || !s.azimuth.is_finite() {
                return Err(StyleError::Invalid(
                    "hillshade altitude must be 0..=90 and azimuth finite".into(),
                ));
            }
            if !(0.0..=1.0).contains(&s.blend) {
                return Err(StyleError::Invalid("hillshade blend must be 0..=1".into()));
            }
            if !s.z_factor.is_finite() || s.scale.is_some_and(|v| !(v.is_finite() && v > 0.0)) {
                return Err(StyleError::Invalid(
                    "hillshade z_factor and scale must be finite (scale > 0)".into(),
                ));
            }
            Ok(Box::new(crate::relief::HillshadeStyle::new(s)?))
        }
        StyleSpec::Slope(s) => {
            check_band(s.band)?;
            Ok(Box::new(crate::relief::SlopeStyle::new(s)?))
        }
        StyleSpec::Aspect(s) => {
            check_band(s.band)?;
            Ok(Box::new(crate::relief::AspectStyle::new(s)?))
        }
    }
}

pub(crate) fn band(raster: &Raster, index: usize) -> Result<&BandData, StyleError> {
    raster
        .bands
        .get(index.wrapping_sub(1))
        .ok_or(StyleError::MissingBand {
            band: index,
            available: raster.bands.len(),
        })
}

#[derive(Debug)]
struct RgbStyle {
    bands: [usize; 3],
    rescale: Option<[f64; 2]>,
}

impl Style for RgbStyle {
    fn bands(&self) -> Vec<usize> {
        self.bands.to_vec()
    }

    fn keeps_rgba(&self) -> bool {
        self.bands == [1, 2, 3] && self.rescale.is_none()
    }

    fn apply(&self, raster: &Raster, _scale: PixelScale) -> Result<RgbaImage, StyleError> {
        let channels = [
            band(raster, self.bands[0])?,
            band(raster, self.bands[1])?,
            band(raster, self.bands[2])?,
        ];
        let mut out = RgbaImage::transparent(raster.width, raster.height);
        if self.rescale.is_none()
            && let [BandData::U8(r), BandData::U8(g), BandData::U8(b)] = channels
        {
            // Bytes as they are: one pass without a branch per pixel
            // (invalid pixels stay transparent black).
            let pixels = out.as_raw_mut().chunks_exact_mut(4);
            for ((((px, r), g), b), a) in pixels.zip(r).zip(g).zip(b).zip(&raster.valid) {
                let keep = if *a == 0 { 0 } else { 0xff };
                px.copy_from_slice(&[r & keep, g & keep, b & keep, *a]);
            }
            return Ok(out);
        }
        let (offset, factor) = match self.rescale {
            Some([lo, hi]) => (lo as f32, 255.0 / (hi - lo) as f32),
            None => (0.0, 1.0),
        };
        for (i, px) in out.as_raw_mut().chunks_exact_mut(4).enumerate() {
            let alpha = raster.valid[i];
            if alpha == 0 {
                continue;
            }
            for (c, data) in channels.iter().enumerate() {
                px[c] = match data {
                    BandData::U8(v) if self.rescale.is_none() => v[i],
                    _ => ((data.get(i) - offset) * factor).round().clamp(0.0, 255.0) as u8,
                };
            }
            px[3] = alpha;
        }
        Ok(out)
    }
}

#[derive(Debug)]
struct RampStyle {
    band: usize,
    ramp: ColorRamp,
    nodata: Option<f64>,
}

impl Style for RampStyle {
    fn bands(&self) -> Vec<usize> {
        vec![self.band]
    }

    fn apply(&self, raster: &Raster, _scale: PixelScale) -> Result<RgbaImage, StyleError> {
        let data = band(raster, self.band)?;
        let mut out = RgbaImage::transparent(raster.width, raster.height);
        for (i, px) in out.as_raw_mut().chunks_exact_mut(4).enumerate() {
            let v = f64::from(data.get(i));
            if raster.valid[i] == 0 || v.is_nan() || self.nodata == Some(v) {
                continue;
            }
            let c = self.ramp.color_at(v);
            px.copy_from_slice(&c);
            px[3] = ((u16::from(c[3]) * u16::from(raster.valid[i])) / 255) as u8;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Color;

    fn f32_raster(w: u32, h: u32, f: impl Fn(u32, u32) -> f32) -> Raster {
        let mut v = Vec::new();
        for y in 0..h {
            for x in 0..w {
                v.push(f(x, y));
            }
        }
        Raster {
            width: w,
            height: h,
            bands: vec![BandData::F32(v)],
            valid: vec![255; (w * h) as usize],
        }
    }

    fn hillshade(spec: HillshadeSpec) -> Box<dyn Style> {
        build_style(&StyleSpec::Hillshade(spec), 1).unwrap()
    }

    fn default_hillshade() -> HillshadeSpec {
        HillshadeSpec {
            band: 1,
            azimuth: 315.0,
            altitude: 45.0,
            z_factor: 1.0,
            scale: None,
            ramp: None,
            blend: 0.7,
            nodata: None,
            multidirectional: false,
        }
    }

    const UNIT: PixelScale = PixelScale {
        res_x: 10.0,
        res_y: 10.0,
        ground_x: 10.0,
        ground_y: 10.0,
    };

    #[test]
    fn flat_ground_is_lit_by_the_sine_of_the_altitude() {
        let s = hillshade(default_hillshade());
        let img = s.apply(&f32_raster(5, 5, |_, _| 100.0), UNIT).unwrap();
        assert_eq!((img.width(), img.height()), (3, 3));
        // 1 + 254 * sin(45°) = 180.6
        assert_eq!(img.as_raw()[0], 181);
        assert_eq!(img.as_raw()[3], 255);
    }

    #[test]
    fn slopes_facing_the_light_are_brighter_than_slopes_facing_away() {
        let s = hillshade(default_hillshade());
        // Elevation rises to the south-east: the slope faces north-west, toward the light.
        let facing = s
            .apply(&f32_raster(3, 3, |x, y| (x + y) as f32 * 5.0), UNIT)
            .unwrap();
        let away = s
            .apply(&f32_raster(3, 3, |x, y| -((x + y) as f32) * 5.0), UNIT)
            .unwrap();
        assert!(facing.as_raw()[0] > 230, "{}", facing.as_raw()[0]);
        assert!(away.as_raw()[0] < 120, "{}", away.as_raw()[0]);
        // Light from the north-east: a slope rising to the south-west faces it.
        let s = hillshade(HillshadeSpec {
            azimuth: 45.0,
            ..default_hillshade()
        });
        let ne = s
            .apply(&f32_raster(3, 3, |x, y| (2 - x + y) as f32 * 5.0), UNIT)
            .unwrap();
        let nw = s
            .apply(&f32_raster(3, 3, |x, y| (x + y) as f32 * 5.0), UNIT)
            .unwrap();
        assert!(ne.as_raw()[0] > 230, "{}", ne.as_raw()[0]);
        assert!((120..200).contains(&nw.as_raw()[0]), "{}", nw.as_raw()[0]);
    }

    #[test]
    fn nodata_pixels_become_transparent() {
        let mut r = f32_raster(4, 3, |_, _| 10.0);
        r.valid[5] = 0;
        let s = hillshade(default_hillshade());
        let img = s.apply(&r, UNIT).unwrap();
        assert_eq!(img.as_raw()[3], 0);
        assert_eq!(img.as_raw()[7], 255);

        let ramp = build_style(
            &StyleSpec::Ramp(RampSpec {
                band: 1,
                stops: vec![RampStop {
                    value: 0.0,
                    color: Color([1, 2, 3, 255]),
                }],
                nodata: Some(-1.0),
            }),
            1,
        )
        .unwrap();
        let img = ramp
            .apply(
                &f32_raster(2, 1, |x, _| if x == 0 { -1.0 } else { 5.0 }),
                UNIT,
            )
            .unwrap();
        assert_eq!(img.as_raw(), &[0, 0, 0, 0, 1, 2, 3, 255]);
    }

    #[test]
    fn rgb_passthrough_with_band_selection_and_stretch() {
        let r = Raster {
            width: 1,
            height: 1,
            bands: vec![
                BandData::U8(vec![10]),
                BandData::U8(vec![20]),
                BandData::U8(vec![30]),
            ],
            valid: vec![255],
        };
        let s = build_style(
            &StyleSpec::Rgb(RgbSpec {
                bands: Some([3, 2, 1]),
                rescale: None,
            }),
            3,
        )
        .unwrap();
        assert_eq!(s.apply(&r, UNIT).unwrap().as_raw(), &[30, 20, 10, 255]);
        let s = build_style(
            &StyleSpec::Rgb(RgbSpec {
                bands: None,
                rescale: Some([10.0, 30.0]),
            }),
            3,
        )
        .unwrap();
        assert_eq!(s.apply(&r, UNIT).unwrap().as_raw(), &[0, 128, 255, 255]);
    }

    #[test]
    fn rgb_bytes_keep_partial_alpha_and_leave_invalid_pixels_transparent_black() {
        let r = Raster {
            width: 3,
            height: 1,
            bands: vec![
                BandData::U8(vec![10, 11, 12]),
                BandData::U8(vec![20, 21, 22]),
                BandData::U8(vec![30, 31, 32]),
            ],
            valid: vec![255, 0, 128],
        };
        let s = build_style(&StyleSpec::Rgb(RgbSpec::default()), 3).unwrap();
        assert_eq!(
            s.apply(&r, UNIT).unwrap().as_raw(),
            &[10, 20, 30, 255, 0, 0, 0, 0, 12, 22, 32, 128]
        );
    }

    #[test]
    fn styles_refuse_bands_the_source_does_not_have() {
        let err = build_style(
            &StyleSpec::Rgb(RgbSpec {
                bands: Some([1, 2, 4]),
                rescale: None,
            }),
            3,
        )
        .unwrap_err();
        assert_eq!(
            err,
            StyleError::MissingBand {
                band: 4,
                available: 3
            }
        );
    }
}
