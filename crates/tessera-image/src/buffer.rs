//! Raster buffers: multi-band source pixels and 8-bit RGBA images with views.

/// Samples of one band, row-major, `width * height` long.
#[derive(Debug, Clone, PartialEq)]
pub enum BandData {
    /// 8-bit samples (most imagery).
    U8(Vec<u8>),
    /// 32-bit float samples (elevation and other measurements).
    F32(Vec<f32>),
}

impl BandData {
    /// Sample at index `i` as a float.
    pub fn get(&self, i: usize) -> f32 {
        match self {
            BandData::U8(v) => f32::from(v[i]),
            BandData::F32(v) => v[i],
        }
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        match self {
            BandData::U8(v) => v.len(),
            BandData::F32(v) => v.len(),
        }
    }

    /// Whether the band has no samples.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `self` and `other` hold samples of one type.
    pub fn same_type(&self, other: &BandData) -> bool {
        matches!(
            (self, other),
            (BandData::U8(_), BandData::U8(_)) | (BandData::F32(_), BandData::F32(_))
        )
    }

    /// Copies `len` samples of `src` from index `from` over `self` at
    /// index `at`; `false` (nothing written) when the two hold different
    /// sample types.
    pub fn copy_span(&mut self, at: usize, src: &BandData, from: usize, len: usize) -> bool {
        match (self, src) {
            (BandData::U8(d), BandData::U8(s)) => {
                d[at..at + len].copy_from_slice(&s[from..from + len]);
                true
            }
            (BandData::F32(d), BandData::F32(s)) => {
                d[at..at + len].copy_from_slice(&s[from..from + len]);
                true
            }
            _ => false,
        }
    }
}

/// Pixels read from a source for one window: the data bands plus a validity
/// mask (0 = no data / outside the source, 255 = valid, values between are
/// partial coverage at edges).
#[derive(Debug, Clone, PartialEq)]
pub struct Raster {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// Data bands, in source band order.
    pub bands: Vec<BandData>,
    /// Validity / alpha of every pixel, `width * height` long.
    pub valid: Vec<u8>,
}

impl Raster {
    /// The three colour channels of `image` as byte bands, and its alpha as
    /// the validity.
    pub fn from_rgba(image: &RgbaImage) -> Raster {
        let n = image.width as usize * image.height as usize;
        let (mut r, mut g, mut b, mut a) = (vec![0; n], vec![0; n], vec![0; n], vec![0; n]);
        for ((((px, r), g), b), a) in image
            .data
            .chunks_exact(4)
            .zip(&mut r)
            .zip(&mut g)
            .zip(&mut b)
            .zip(&mut a)
        {
            (*r, *g, *b, *a) = (px[0], px[1], px[2], px[3]);
        }
        Raster {
            width: image.width,
            height: image.height,
            bands: vec![BandData::U8(r), BandData::U8(g), BandData::U8(b)],
            valid: a,
        }
    }
}

/// An owned 8-bit RGBA image, rows packed (`stride = width * 4`).
#[derive(Debug, Clone, PartialEq)]
pub struct RgbaImage {
    width: u32,
    height: u32,
    data: Vec<u8>,
}

/// A canvas that cannot be made: larger than [`MAX_CANVAS_PIXELS`], or
/// more than the allocator gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "a {width}x{height} image is larger than can be made (at most {MAX_CANVAS_PIXELS} pixels, memory permitting)"
)]
pub struct CanvasTooLarge {
    /// The width asked for.
    pub width: u64,
    /// The height asked for.
    pub height: u64,
}

/// Most pixels of a canvas sized from outside input (an upstream's tile
/// size, a stitched range): 256 Mpixel, 1 GiB of RGBA. Configured limits
/// (the WMS size, the metatile) are far below it; it is the last line for
/// sizes nothing else bounded.
pub const MAX_CANVAS_PIXELS: u64 = 1 << 28;

impl RgbaImage {
    /// A fully transparent image of a size from outside input: the size is
    /// checked (with no overflow) against [`MAX_CANVAS_PIXELS`] and the
    /// memory reserved fallibly, so that no input can make the allocation
    /// abort the process.
    pub fn try_transparent(width: u64, height: u64) -> Result<Self, CanvasTooLarge> {
        let too_large = CanvasTooLarge { width, height };
        let pixels = width.checked_mul(height).ok_or(too_large)?;
        if pixels > MAX_CANVAS_PIXELS {
            return Err(too_large);
        }
        let (Ok(w), Ok(h), Ok(len)) = (
            u32::try_from(width),
            u32::try_from(height),
            usize::try_from(pixels * 4),
        ) else {
            return Err(too_large);
        };
        let mut data = Vec::new();
        data.try_reserve_exact(len).map_err(|_| too_large)?;
        data.resize(len, 0);
        Ok(Self {
            width: w,
            height: h,
            data,
        })
    }

    /// A fully transparent image, of a size the program bounded (a tile, a
    /// metatile, a map within the configured limits); a size from outside
    /// input goes through [`RgbaImage::try_transparent`].
    pub fn transparent(width: u32, height: u32) -> Self {
        Self {
            width,
            height,
            data: vec![0; width as usize * height as usize * 4],
        }
    }

    /// Clears the colour of every fully transparent pixel (`[0, 0, 0, 0]`),
    /// as every style leaves them.
    pub fn clear_transparent(&mut self) {
        for px in self.data.chunks_exact_mut(4) {
            if px[3] == 0 {
                px.fill(0);
            }
        }
    }

    /// Wraps packed RGBA bytes; `None` if the length does not match.
    pub fn from_raw(width: u32, height: u32, data: Vec<u8>) -> Option<Self> {
        (data.len() == width as usize * height as usize * 4).then_some(Self {
            width,
            height,
            data,
        })
    }

    /// Width in pixels.
    pub fn width(&self) -> u32 {
        self.width
    }

    /// Height in pixels.
    pub fn height(&self) -> u32 {
        self.height
    }

    /// Packed RGBA bytes.
    pub fn as_raw(&self) -> &[u8] {
        &self.data
    }

    /// Mutable packed RGBA bytes.
    pub fn as_raw_mut(&mut self) -> &mut [u8] {
        &mut self.data
    }

    /// A view of the whole image.
    pub fn view(&self) -> ImageView<'_> {
        ImageView {
            data: &self.data,
            width: self.width,
            height: self.height,
            stride: self.width as usize * 4,
        }
    }

    /// A view of the rectangle at (`x`, `y`) of `width` x `height`, borrowing
    /// this image's rows (no copy). `None` if it does not fit.
    pub fn sub_view(&self, x: u32, y: u32, width: u32, height: u32) -> Option<ImageView<'_>> {
        if width == 0
            || height == 0
            || x.checked_add(width)? > self.width
            || y.checked_add(height)? > self.height
        {
            return None;
        }
        let stride = self.width as usize * 4;
        let start = y as usize * stride + x as usize * 4;
        let end = start + (height as usize - 1) * stride + width as usize * 4;
        Some(ImageView {
            data: &self.data[start..end],
            width,
            height,
            stride,
        })
    }

    /// Alpha-composites `top` over this image (same size; "source over").
    pub fn composite_over(&mut self, top: &RgbaImage) {
        debug_assert_eq!((self.width, self.height), (top.width, top.height));
        for (dst, src) in self.data.chunks_exact_mut(4).zip(top.data.chunks_exact(4)) {
            let sa = u32::from(src[3]);
            if sa == 255 {
                dst.copy_from_slice(src);
            } else if sa > 0 {
                let da = u32::from(dst[3]);
                let out_a = sa + da * (255 - sa) / 255;
                for c in 0..3 {
                    let v = (u32::from(src[c]) * sa + u32::from(dst[c]) * da * (255 - sa) / 255)
                        / out_a.max(1);
                    dst[c] = v.min(255) as u8;
                }
                dst[3] = out_a as u8;
            }
        }
    }
}

/// A borrowed rectangle of RGBA pixels: `height` rows of `width * 4` bytes,
/// each starting `stride` bytes after the previous one.
#[derive(Debug, Clone, Copy)]
pub struct ImageView<'a> {
    data: &'a [u8],
    width: u32,
    height: u32,
    stride: usize,
}

impl<'a> ImageView<'a> {
    /// Width in pixels.
    pub fn width(&self) -> u32 {
        self.width
    }

    /// Height in pixels.
    pub fn height(&self) -> u32 {
        self.height
    }

    /// The RGBA bytes of row `y` (exactly `width * 4` long).
    pub fn row(&self, y: u32) -> &'a [u8] {
        let start = y as usize * self.stride;
        &self.data[start..start + self.width as usize * 4]
    }

    /// Iterates over the rows, top to bottom.
    pub fn rows(&self) -> impl Iterator<Item = &'a [u8]> + '_ {
        (0..self.height).map(move |y| self.row(y))
    }

    /// Whether every pixel is fully opaque.
    pub fn is_opaque(&self) -> bool {
        // A whole row folded as words, without a branch per pixel.
        self.rows()
            .all(|row| fold_pixels(row, u32::MAX, |a, b| a & b) >> 24 == 0xff)
    }

    /// Whether every pixel is fully transparent.
    pub fn is_transparent(&self) -> bool {
        self.rows()
            .all(|row| fold_pixels(row, 0, |a, b| a | b) >> 24 == 0)
    }

    /// Copies the view into a packed image (for encoders that need one
    /// contiguous buffer).
    pub fn to_image(&self) -> RgbaImage {
        let mut data = Vec::with_capacity(self.width as usize * self.height as usize * 4);
        for row in self.rows() {
            data.extend_from_slice(row);
        }
        RgbaImage {
            width: self.width,
            height: self.height,
            data,
        }
    }
}

/// `row`'s RGBA pixels as little-endian words (alpha in the top byte),
/// folded with `f` from `init`.
fn fold_pixels(row: &[u8], init: u32, f: impl Fn(u32, u32) -> u32) -> u32 {
    row.chunks_exact(4)
        .map(|p| u32::from_le_bytes([p[0], p[1], p[2], p[3]]))
        .fold(init, f)
}

impl Raster {
    /// One row of float samples, every pixel valid (for tests).
    #[cfg(test)]
    pub(crate) fn row(bands: Vec<Vec<f32>>) -> Raster {
        let n = bands[0].len();
        Raster {
            width: u32::try_from(n).unwrap(),
            height: 1,
            bands: bands.into_iter().map(BandData::F32).collect(),
            valid: vec![255; n],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbered(width: u32, height: u32) -> RgbaImage {
        let data = (0..width * height * 4).map(|i| (i % 251) as u8).collect();
        RgbaImage::from_raw(width, height, data).unwrap()
    }

    #[test]
    fn sub_view_reads_the_right_rows_without_copying() {
        let img = numbered(8, 6);
        let v = img.sub_view(2, 3, 4, 2).unwrap();
        let stride = 8 * 4;
        assert_eq!(v.row(0), &img.as_raw()[3 * stride + 8..3 * stride + 24]);
        assert_eq!(v.row(1), &img.as_raw()[4 * stride + 8..4 * stride + 24]);
        assert!(std::ptr::eq(
            v.row(0).as_ptr(),
            img.as_raw()[3 * stride + 8..].as_ptr()
        ));
    }

    #[test]
    fn sub_view_outside_the_image_is_none() {
        let img = numbered(8, 6);
        assert!(img.sub_view(5, 0, 4, 1).is_none());
        assert!(img.sub_view(0, 6, 1, 1).is_none());
        assert!(img.sub_view(u32::MAX, 0, 2, 1).is_none());
        assert!(img.sub_view(0, 0, 0, 1).is_none());
    }

    #[test]
    fn composite_over_keeps_opaque_top_and_blends_half_alpha() {
        let mut base = RgbaImage::from_raw(2, 1, vec![0, 0, 255, 255, 0, 0, 255, 255]).unwrap();
        let top = RgbaImage::from_raw(2, 1, vec![255, 0, 0, 255, 255, 0, 0, 128]).unwrap();
        base.composite_over(&top);
        assert_eq!(&base.as_raw()[0..4], &[255, 0, 0, 255]);
        let p = &base.as_raw()[4..8];
        assert_eq!(p[3], 255);
        assert!((i32::from(p[0]) - 128).abs() <= 1 && (i32::from(p[2]) - 127).abs() <= 1);
    }
}
