//! Tile encoders: PNG (streamed row by row from a view), JPEG and WebP.

use serde::Deserialize;

use tessera_grid::TileFormat;

use crate::{Color, ImageView};

/// zlib effort for PNG.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PngCompression {
    /// Fastest reasonable compression (the default: tiles are encoded on the request path).
    #[default]
    Fast,
    /// zlib's balanced level.
    Balanced,
    /// Smallest files, slowest.
    High,
}

/// Encoder settings.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EncodeOptions {
    /// PNG compression effort.
    pub png_compression: PngCompression,
    /// JPEG quality, 1..=100.
    pub jpeg_quality: u8,
    /// WebP quality, 0..=100.
    pub webp_quality: f32,
}

impl Default for EncodeOptions {
    fn default() -> Self {
        Self {
            png_compression: PngCompression::Fast,
            jpeg_quality: 85,
            webp_quality: 80.0,
        }
    }
}

/// Errors from encoding.
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    /// The PNG encoder failed.
    #[error("PNG encoding failed")]
    Png(#[from] png::EncodingError),
    /// The JPEG encoder failed.
    #[error("JPEG encoding failed")]
    Jpeg(#[from] jpeg_encoder::EncodingError),
    /// The WebP encoder failed.
    #[error("WebP encoding failed")]
    Webp(String),
}

/// Encodes `view` as `format`. Transparent pixels are composited over
/// `background` for formats without alpha (JPEG). PNG is written as RGB when
/// every pixel is opaque, RGBA otherwise, streaming rows straight from the
/// view so that a tile cut out of a metatile is never copied.
pub fn encode(
    view: ImageView<'_>,
    format: TileFormat,
    options: &EncodeOptions,
    background: Color,
) -> Result<Vec<u8>, EncodeError> {
    match format {
        TileFormat::Png => encode_png(view, options.png_compression),
        TileFormat::Jpeg => encode_jpeg(view, options.jpeg_quality, background),
        TileFormat::Webp => encode_webp(view, options.webp_quality),
    }
}

fn encode_png(view: ImageView<'_>, compression: PngCompression) -> Result<Vec<u8>, EncodeError> {
    use std::io::Write;
    let opaque = view.is_opaque();
    let mut out = Vec::with_capacity(view.width() as usize * view.height() as usize);
    let mut encoder = png::Encoder::new(&mut out, view.width(), view.height());
    encoder.set_color(if opaque {
        png::ColorType::Rgb
    } else {
        png::ColorType::Rgba
    });
    encoder.set_depth(png::BitDepth::Eight);
    encoder.set_compression(match compression {
        PngCompression::Fast => png::Compression::Fast,
        PngCompression::Balanced => png::Compression::Balanced,
        PngCompression::High => png::Compression::High,
    });
    let mut writer = encoder.write_header()?;
    let channels = if opaque { 3 } else { 4 };
    let row_bytes = view.width() as usize * channels;
    let mut stream = writer.stream_writer_with_size(row_bytes * view.height() as usize)?;
    if opaque {
        let mut rgb = vec![0u8; row_bytes];
        for row in view.rows() {
            for (d, s) in rgb.chunks_exact_mut(3).zip(row.chunks_exact(4)) {
                d.copy_from_slice(&s[..3]);
            }
            stream.write_all(&rgb).map_err(png::EncodingError::from)?;
        }
    } else {
        for row in view.rows() {
            stream.write_all(row).map_err(png::EncodingError::from)?;
        }
    }
    stream.finish()?;
    writer.finish()?;
    Ok(out)
}

fn flatten(view: ImageView<'_>, background: Color) -> Vec<u8> {
    let [br, bg, bb, _] = background.0;
    let mut rgb = Vec::with_capacity(view.width() as usize * view.height() as usize * 3);
    for row in view.rows() {
        for p in row.chunks_exact(4) {
            let a = u16::from(p[3]);
            let mix = |c: u8, b: u8| ((u16::from(c) * a + u16::from(b) * (255 - a)) / 255) as u8;
            rgb.extend_from_slice(&[mix(p[0], br), mix(p[1], bg), mix(p[2], bb)]);
        }
    }
    rgb
}

fn encode_jpeg(
    view: ImageView<'_>,
    quality: u8,
    background: Color,
) -> Result<Vec<u8>, EncodeError> {
    let rgb = flatten(view, background);
    let mut out = Vec::new();
    let encoder = jpeg_encoder::Encoder::new(&mut out, quality.clamp(1, 100));
    encoder.encode(
        &rgb,
        view.width() as u16,
        view.height() as u16,
        jpeg_encoder::ColorType::Rgb,
    )?;
    Ok(out)
}

fn encode_webp(view: ImageView<'_>, quality: f32) -> Result<Vec<u8>, EncodeError> {
    if view.width() > 16383 || view.height() > 16383 {
        return Err(EncodeError::Webp(
            "WebP images are at most 16383 pixels wide and high".into(),
        ));
    }
    let packed = view.to_image();
    let encoder = webp::Encoder::from_rgba(packed.as_raw(), view.width(), view.height());
    let memory = encoder
        .encode_simple(false, quality.clamp(0.0, 100.0))
        .map_err(|e| EncodeError::Webp(format!("{e:?}")))?;
    Ok(memory.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RgbaImage;

    fn gradient(w: u32, h: u32, alpha: u8) -> RgbaImage {
        let mut data = Vec::new();
        for y in 0..h {
            for x in 0..w {
                data.extend_from_slice(&[(x * 7) as u8, (y * 5) as u8, ((x + y) * 3) as u8, alpha]);
            }
        }
        RgbaImage::from_raw(w, h, data).unwrap()
    }

    fn decode_png(bytes: &[u8]) -> (png::OutputInfo, Vec<u8>) {
        let mut reader = png::Decoder::new(std::io::Cursor::new(bytes))
            .read_info()
            .unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        buf.truncate(info.buffer_size());
        (info, buf)
    }

    #[test]
    fn png_of_a_sub_view_is_identical_to_png_of_a_copied_tile() {
        let meta = gradient(64, 48, 200);
        let view = meta.sub_view(16, 8, 32, 32).unwrap();
        let copied = view.to_image();
        let opts = EncodeOptions::default();
        let bg = Color([255, 255, 255, 255]);
        let a = encode(view, TileFormat::Png, &opts, bg).unwrap();
        let b = encode(copied.view(), TileFormat::Png, &opts, bg).unwrap();
        assert_eq!(a, b);
        let (info, pixels) = decode_png(&a);
        assert_eq!(info.color_type, png::ColorType::Rgba);
        assert_eq!(pixels, copied.as_raw());
    }

    #[test]
    fn opaque_png_is_written_as_rgb() {
        let img = gradient(10, 4, 255);
        let bytes = encode(
            img.view(),
            TileFormat::Png,
            &EncodeOptions::default(),
            Color([0; 4]),
        )
        .unwrap();
        let (info, pixels) = decode_png(&bytes);
        assert_eq!(info.color_type, png::ColorType::Rgb);
        assert_eq!(
            &pixels[..6],
            &img.as_raw()[..3]
                .iter()
                .chain(&img.as_raw()[4..7])
                .copied()
                .collect::<Vec<_>>()[..]
        );
    }

    #[test]
    fn jpeg_and_webp_produce_their_signatures() {
        let img = gradient(40, 30, 255);
        let opts = EncodeOptions::default();
        let jpg = encode(img.view(), TileFormat::Jpeg, &opts, Color([255; 4])).unwrap();
        assert_eq!(&jpg[..3], &[0xFF, 0xD8, 0xFF]);
        assert_eq!(&jpg[jpg.len() - 2..], &[0xFF, 0xD9]);
        let webp = encode(img.view(), TileFormat::Webp, &opts, Color([255; 4])).unwrap();
        assert_eq!(&webp[..4], b"RIFF");
        assert_eq!(&webp[8..12], b"WEBP");
    }

    #[test]
    fn jpeg_composites_transparency_over_the_background() {
        let img = RgbaImage::transparent(2, 1);
        let rgb = flatten(img.view(), Color([10, 20, 30, 255]));
        assert_eq!(rgb, vec![10, 20, 30, 10, 20, 30]);
    }
}
