//! Styles of an elevation band's relief, from the slope of each pixel's
//! 3 x 3 neighbourhood by Horn's method (as `gdaldem`): hillshade (one
//! light, or four weighed by aspect), slope and aspect through a ramp.
//! Each reads one pixel of margin on every side.

use serde::Deserialize;

use crate::style::{HillshadeSpec, band, one, one_f};
use crate::{Color, ColorRamp, PixelScale, RampStop, Raster, RgbaImage, Style, StyleError};

/// `type: slope`: steepness through a ramp (default white on flat ground
/// to dark red at 60 degrees and above).
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SlopeSpec {
    /// Elevation band (1-based, default 1).
    #[serde(default = "one")]
    pub band: usize,
    /// Vertical exaggeration (default 1).
    #[serde(default = "one_f")]
    pub z_factor: f64,
    /// Ratio of horizontal units to elevation units (`gdaldem -s`); worked
    /// out from the map's CRS and latitude when absent.
    #[serde(default)]
    pub scale: Option<f64>,
    /// Slope in percent (rise over run x 100) instead of degrees.
    #[serde(default)]
    pub percent: bool,
    /// The ramp over the slope's values.
    #[serde(default)]
    pub ramp: Option<Vec<RampStop>>,
    /// A value to treat as no data besides the source's own nodata.
    #[serde(default)]
    pub nodata: Option<f64>,
}

/// `type: aspect`: the compass direction slopes face, 0 to 360 degrees
/// clockwise from north, through a ramp (default a colour wheel: north
/// red, east yellow, south cyan, west blue). Flat pixels are transparent.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AspectSpec {
    /// Elevation band (1-based, default 1).
    #[serde(default = "one")]
    pub band: usize,
    /// The ramp over 0-360 degrees.
    #[serde(default)]
    pub ramp: Option<Vec<RampStop>>,
    /// A value to treat as no data besides the source's own nodata.
    #[serde(default)]
    pub nodata: Option<f64>,
}

/// The elevations around one pixel, by row from the north-west: `a b c /
/// d e f / g h i` (a missing neighbour takes the centre's value, as
/// `gdaldem -compute_edges` does).
struct Window([f64; 9]);

impl Window {
    /// Rise eastwards and southwards over 8 pixel widths (Horn): GDAL's
    /// `dx` (right minus left) and `dy` (bottom minus top).
    fn horn(&self) -> (f64, f64) {
        let [a, b, c, d, _, f, g, h, i] = self.0;
        (
            (c + 2.0 * f + i) - (a + 2.0 * d + g),
            (g + 2.0 * h + i) - (a + 2.0 * b + c),
        )
    }
}

/// Runs `pixel` over every pixel of `raster` but its 1-pixel margin, with
/// its elevation window and validity; `None` leaves it transparent.
fn each_pixel(
    raster: &Raster,
    band_index: usize,
    nodata: Option<f64>,
    pixel: impl Fn(&Window, u8) -> Option<[u8; 4]>,
) -> Result<RgbaImage, StyleError> {
    let data = band(raster, band_index)?;
    let (w, h) = (raster.width as usize, raster.height as usize);
    if w < 3 || h < 3 {
        return Ok(RgbaImage::transparent(
            raster.width.saturating_sub(2),
            raster.height.saturating_sub(2),
        ));
    }
    let valid_value = |i: usize| -> Option<f64> {
        let v = f64::from(data.get(i));
        (raster.valid[i] > 0 && !v.is_nan() && nodata != Some(v)).then_some(v)
    };
    let (ow, oh) = (w - 2, h - 2);
    #[allow(
        clippy::cast_possible_truncation,
        reason = "ow and oh come from u32 sizes"
    )]
    let mut out = RgbaImage::transparent(ow as u32, oh as u32);
    let pixels = out.as_raw_mut();
    for oy in 0..oh {
        for ox in 0..ow {
            let (cx, cy) = (ox + 1, oy + 1);
            let center = cy * w + cx;
            let Some(e) = valid_value(center) else {
                continue;
            };
            let mut around = [e; 9];
            for (k, v) in around.iter_mut().enumerate() {
                let i = (cy + k / 3 - 1) * w + (cx + k % 3 - 1);
                *v = valid_value(i).unwrap_or(e);
            }
            if let Some(rgba) = pixel(&Window(around), raster.valid[center]) {
                pixels[(oy * ow + ox) * 4..(oy * ow + ox) * 4 + 4].copy_from_slice(&rgba);
            }
        }
    }
    Ok(out)
}

/// A pixel's width and height in elevation units: the map's resolution
/// times `scale` (as `gdaldem -s`), or its size on the ground.
fn pixel_size(scale: Option<f64>, px: PixelScale) -> (f64, f64) {
    match scale {
        Some(s) => (px.res_x * s, px.res_y * s),
        None => (px.ground_x, px.ground_y),
    }
}

/// A ramp's colour with its alpha scaled by the pixel's validity.
fn ramp_pixel(ramp: &ColorRamp, value: f64, alpha: u8) -> [u8; 4] {
    let mut c = ramp.color_at(value);
    #[allow(clippy::cast_possible_truncation, reason = "a product of bytes / 255")]
    {
        c[3] = ((u16::from(c[3]) * u16::from(alpha)) / 255) as u8;
    }
    c
}

fn stops(pairs: &[(f64, [u8; 4])]) -> Vec<RampStop> {
    pairs
        .iter()
        .map(|&(value, c)| RampStop {
            value,
            color: Color(c),
        })
        .collect()
}

/// Shaded relief (see [`HillshadeSpec`]).
#[derive(Debug)]
pub(crate) struct HillshadeStyle {
    spec: HillshadeSpec,
    ramp: Option<ColorRamp>,
}

impl HillshadeStyle {
    pub(crate) fn new(spec: &HillshadeSpec) -> Result<HillshadeStyle, StyleError> {
        let ramp = match &spec.ramp {
            Some(stops) => Some(ColorRamp::new(stops.clone()).map_err(StyleError::Invalid)?),
            None => None,
        };
        Ok(HillshadeStyle {
            spec: spec.clone(),
            ramp,
        })
    }

    /// The light on a slope rising `dx` eastwards and `dy` southwards per
    /// pixel size, 0 to 1 (`gdaldem hillshade`'s grey less 1, over 254).
    fn shade(&self, x: f64, y: f64) -> f64 {
        let alt = self.spec.altitude.to_radians();
        let z = self.spec.z_factor;
        if self.spec.multidirectional {
            // gdaldem's oblique-weighted light from 225, 270, 315 and 360
            // degrees.
            let xx_yy = x * x + y * y;
            if xx_yy == 0.0 {
                return alt.sin();
            }
            let (sin_alt, cos_alt_z) = (alt.sin(), alt.cos() * z);
            // cos(225°), the diagonal lights' share of each gradient.
            let diagonal = -std::f64::consts::FRAC_1_SQRT_2 * cos_alt_z;
            let lit = |v: f64| v.max(0.0);
            let v225 = sin_alt + (x - y) * diagonal;
            let v270 = sin_alt - x * cos_alt_z;
            let v315 = sin_alt + (x + y) * diagonal;
            let v360 = sin_alt - y * cos_alt_z;
            let w225 = 0.5 * xx_yy - x * y;
            let w270 = x * x;
            let w315 = xx_yy - w225;
            let w360 = y * y;
            let weighed =
                (w225 * lit(v225) + w270 * lit(v270) + w315 * lit(v315) + w360 * lit(v360)) / xx_yy;
            return (weighed / 2.0 / (1.0 + z * z * xx_yy).sqrt()).clamp(0.0, 1.0);
        }
        let az = self.spec.azimuth.to_radians();
        let slope = std::f64::consts::FRAC_PI_2 - (z * x.hypot(y)).atan();
        let aspect = y.atan2(x);
        (alt.sin() * slope.sin()
            + alt.cos() * slope.cos() * (az - std::f64::consts::FRAC_PI_2 - aspect).cos())
        .clamp(0.0, 1.0)
    }
}

impl Style for HillshadeStyle {
    fn margin(&self) -> u32 {
        1
    }

    fn bands(&self) -> Vec<usize> {
        vec![self.spec.band]
    }

    fn apply(&self, raster: &Raster, scale: PixelScale) -> Result<RgbaImage, StyleError> {
        let (ewres, nsres) = pixel_size(self.spec.scale, scale);
        each_pixel(raster, self.spec.band, self.spec.nodata, |window, alpha| {
            let (dx, dy) = window.horn();
            // gdaldem's x (left minus right) and y (rows run southwards: a
            // north-up geotransform's negative north-south resolution).
            let (x, y) = (-dx / (8.0 * ewres), dy / (-8.0 * nsres));
            let shade = self.shade(x, y);
            #[allow(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "rounded and clamped to a byte"
            )]
            Some(match &self.ramp {
                None => {
                    let g = (1.0 + 254.0 * shade).round() as u8;
                    [g, g, g, alpha]
                }
                Some(ramp) => {
                    let mut c = ramp_pixel(ramp, window.0[4], alpha);
                    let k = 1.0 - self.spec.blend + self.spec.blend * shade;
                    for ch in c.iter_mut().take(3) {
                        *ch = (f64::from(*ch) * k).round().clamp(0.0, 255.0) as u8;
                    }
                    c
                }
            })
        })
    }
}

/// Steepness through a ramp (see [`SlopeSpec`]).
#[derive(Debug)]
pub(crate) struct SlopeStyle {
    spec: SlopeSpec,
    ramp: ColorRamp,
}

impl SlopeStyle {
    pub(crate) fn new(spec: &SlopeSpec) -> Result<SlopeStyle, StyleError> {
        if !spec.z_factor.is_finite() || spec.scale.is_some_and(|v| !(v.is_finite() && v > 0.0)) {
            return Err(StyleError::Invalid(
                "slope z_factor and scale must be finite (scale > 0)".into(),
            ));
        }
        let steep = if spec.percent { 173.0 } else { 60.0 };
        let default = stops(&[
            (0.0, [255, 255, 255, 255]),
            (steep / 3.0, [250, 200, 120, 255]),
            (steep, [120, 20, 20, 255]),
        ]);
        let ramp =
            ColorRamp::new(spec.ramp.clone().unwrap_or(default)).map_err(StyleError::Invalid)?;
        Ok(SlopeStyle {
            spec: spec.clone(),
            ramp,
        })
    }
}

impl Style for SlopeStyle {
    fn margin(&self) -> u32 {
        1
    }

    fn bands(&self) -> Vec<usize> {
        vec![self.spec.band]
    }

    fn apply(&self, raster: &Raster, scale: PixelScale) -> Result<RgbaImage, StyleError> {
        let (ewres, nsres) = pixel_size(self.spec.scale, scale);
        each_pixel(raster, self.spec.band, self.spec.nodata, |window, alpha| {
            let (dx, dy) = window.horn();
            let rise = self.spec.z_factor * (dx / (8.0 * ewres)).hypot(dy / (8.0 * nsres));
            let value = if self.spec.percent {
                100.0 * rise
            } else {
                rise.atan().to_degrees()
            };
            Some(ramp_pixel(&self.ramp, value, alpha))
        })
    }
}

/// The direction slopes face through a ramp (see [`AspectSpec`]).
#[derive(Debug)]
pub(crate) struct AspectStyle {
    spec: AspectSpec,
    ramp: ColorRamp,
}

impl AspectStyle {
    pub(crate) fn new(spec: &AspectSpec) -> Result<AspectStyle, StyleError> {
        let default = stops(&[
            (0.0, [230, 40, 40, 255]),
            (90.0, [235, 220, 50, 255]),
            (180.0, [40, 200, 210, 255]),
            (270.0, [50, 70, 220, 255]),
            (360.0, [230, 40, 40, 255]),
        ]);
        let ramp =
            ColorRamp::new(spec.ramp.clone().unwrap_or(default)).map_err(StyleError::Invalid)?;
        Ok(AspectStyle {
            spec: spec.clone(),
            ramp,
        })
    }
}

/// The compass direction (0 to 360 degrees clockwise from north) a slope
/// rising `dx` eastwards and `dy` southwards faces, as `gdaldem aspect`;
/// `None` on flat ground.
fn aspect_degrees(dx: f64, dy: f64) -> Option<f64> {
    if dx == 0.0 && dy == 0.0 {
        return None;
    }
    let a = dy.atan2(-dx).to_degrees();
    let azimuth = if a > 90.0 { 450.0 - a } else { 90.0 - a };
    Some(if azimuth >= 360.0 {
        azimuth - 360.0
    } else {
        azimuth
    })
}

impl Style for AspectStyle {
    fn margin(&self) -> u32 {
        1
    }

    fn bands(&self) -> Vec<usize> {
        vec![self.spec.band]
    }

    fn apply(&self, raster: &Raster, _scale: PixelScale) -> Result<RgbaImage, StyleError> {
        each_pixel(raster, self.spec.band, self.spec.nodata, |window, alpha| {
            let (dx, dy) = window.horn();
            aspect_degrees(dx, dy).map(|a| ramp_pixel(&self.ramp, a, alpha))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aspects_point_downhill_clockwise_from_north() {
        // Rising eastwards: the slope faces west.
        assert_eq!(aspect_degrees(1.0, 0.0), Some(270.0));
        // Rising southwards: faces north.
        assert_eq!(aspect_degrees(0.0, 1.0), Some(0.0));
        assert_eq!(aspect_degrees(-1.0, 0.0), Some(90.0));
        assert_eq!(aspect_degrees(0.0, -1.0), Some(180.0));
        assert_eq!(aspect_degrees(0.0, 0.0), None);
    }

    fn ramp_of(max: f64) -> Vec<RampStop> {
        stops(&[(0.0, [0, 0, 0, 255]), (max, [255, 255, 255, 255])])
    }

    fn plane(dx_per_px: f32) -> Raster {
        let v: Vec<f32> = (0..9).map(|i| (i % 3) as f32 * dx_per_px).collect();
        Raster {
            width: 3,
            height: 3,
            bands: vec![crate::BandData::F32(v)],
            valid: vec![255; 9],
        }
    }

    const TEN: PixelScale = PixelScale {
        res_x: 10.0,
        res_y: 10.0,
        ground_x: 10.0,
        ground_y: 10.0,
    };

    #[test]
    fn a_plane_rising_one_in_one_is_45_degrees_and_100_percent() {
        let spec = SlopeSpec {
            band: 1,
            z_factor: 1.0,
            scale: None,
            percent: false,
            ramp: Some(ramp_of(90.0)),
            nodata: None,
        };
        let degrees = SlopeStyle::new(&spec)
            .unwrap()
            .apply(&plane(10.0), TEN)
            .unwrap();
        assert_eq!(degrees.as_raw()[0], 128);
        let percent = SlopeStyle::new(&SlopeSpec {
            percent: true,
            ramp: Some(ramp_of(200.0)),
            ..spec
        })
        .unwrap()
        .apply(&plane(10.0), TEN)
        .unwrap();
        assert_eq!(percent.as_raw()[0], 128);
    }

    #[test]
    fn multidirectional_light_reaches_every_slope() {
        let spec = HillshadeSpec {
            band: 1,
            azimuth: 315.0,
            altitude: 45.0,
            z_factor: 1.0,
            scale: None,
            ramp: None,
            blend: 0.7,
            nodata: None,
            multidirectional: true,
        };
        let style = HillshadeStyle::new(&spec).unwrap();
        for slope in [5.0, -5.0] {
            let lit = style.apply(&plane(slope), TEN).unwrap();
            assert!(lit.as_raw()[0] > 60, "{slope}: {}", lit.as_raw()[0]);
        }
    }
}
