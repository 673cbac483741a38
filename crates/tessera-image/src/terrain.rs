//! Elevations as pixels: the style of the elevation tile formats
//! (Terrarium, Terrain-RGB), whose red, green and blue are a code of the
//! band's value in metres. The source has already resampled the values
//! (GDAL interpolates elevations, never these bytes); this only encodes.

use tessera_grid::ElevationEncoding;

use crate::{PixelScale, Raster, RgbaImage, Style, StyleError};

/// Encodes band 1 of a single-band raster as `encoding`, every pixel
/// opaque: a pixel without data (nodata, NaN, outside the source) is sea
/// level (0 m), since a transparent pixel's colour would still be read as
/// an elevation by `raster-dem` clients.
#[derive(Debug, Clone, Copy)]
pub struct ElevationStyle {
    encoding: ElevationEncoding,
}

impl ElevationStyle {
    /// The style of tiles in `encoding`.
    pub fn new(encoding: ElevationEncoding) -> ElevationStyle {
        ElevationStyle { encoding }
    }
}

impl Style for ElevationStyle {
    fn bands(&self) -> Vec<usize> {
        vec![1]
    }

    fn apply(&self, raster: &Raster, _scale: PixelScale) -> Result<RgbaImage, StyleError> {
        let band = raster.bands.first().ok_or(StyleError::MissingBand {
            band: 1,
            available: 0,
        })?;
        let mut out = RgbaImage::transparent(raster.width, raster.height);
        let sea = self.encoding.encode(0.0);
        for (i, px) in out.as_raw_mut().chunks_exact_mut(4).enumerate() {
            let rgb = if raster.valid[i] == 0 {
                sea
            } else {
                self.encoding.encode(band.get(i))
            };
            px.copy_from_slice(&[rgb[0], rgb[1], rgb[2], 255]);
        }
        Ok(out)
    }

    fn values(&self, raster: &Raster) -> Option<Result<Vec<f32>, StyleError>> {
        let band = raster.bands.first()?;
        Some(Ok((0..band.len())
            .map(|i| {
                if raster.valid[i] == 0 {
                    f32::NAN
                } else {
                    band.get(i)
                }
            })
            .collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BandData;

    #[test]
    fn values_become_codes_and_missing_ones_sea_level() {
        let raster = Raster {
            width: 4,
            height: 1,
            bands: vec![BandData::F32(vec![1000.0, f32::NAN, -50.25, 1e38])],
            valid: vec![255, 255, 0, 255],
        };
        let scale = PixelScale {
            res_x: 1.0,
            res_y: 1.0,
            ground_x: 1.0,
            ground_y: 1.0,
        };
        for encoding in [ElevationEncoding::Terrarium, ElevationEncoding::TerrainRgb] {
            let image = ElevationStyle::new(encoding).apply(&raster, scale).unwrap();
            let px: Vec<[u8; 3]> = image
                .as_raw()
                .chunks_exact(4)
                .inspect(|p| assert_eq!(p[3], 255))
                .map(|p| [p[0], p[1], p[2]])
                .collect();
            let near = |v: f64, want: f64| (v - want).abs() < 1e-9;
            assert!(near(encoding.decode(px[0]), 1000.0));
            assert!(near(encoding.decode(px[1]), 0.0));
            assert!(near(encoding.decode(px[2]), 0.0));
            assert_eq!(px[3], [255, 255, 255]);
        }
    }
}
