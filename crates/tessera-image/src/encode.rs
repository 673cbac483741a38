//! Tile encoders: PNG (streamed row by row from a view), JPEG and WebP.

use serde::Deserialize;

use tessera_grid::TileFormat;

use crate::{Color, ImageView, indexed_png};

/// zlib effort for PNG.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, schemars::JsonSchema)]
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

impl PngCompression {
    /// The `png` crate's level for this effort.
    fn png(self) -> png::Compression {
        match self {
            PngCompression::Fast => png::Compression::Fast,
            PngCompression::Balanced => png::Compression::Balanced,
            PngCompression::High => png::Compression::High,
        }
    }
}

/// Encoder settings.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct EncodeOptions {
    /// PNG compression effort.
    pub png_compression: PngCompression,
    /// JPEG quality, 1..=100.
    pub jpeg_quality: u8,
    /// WebP quality, 0..=100.
    pub webp_quality: f32,
    /// PNG tiles with at most 256 colours (classified rasters, styled
    /// vector layers, low zooms) written as paletted PNGs: the same pixels
    /// in fewer bytes, deflated at `png_compression`'s effort. Maps (WMS
    /// GetMap, OGC API maps) keep RGB or RGBA.
    pub png_palette: bool,
}

impl Default for EncodeOptions {
    fn default() -> Self {
        Self {
            png_compression: PngCompression::Fast,
            jpeg_quality: 85,
            webp_quality: 80.0,
            png_palette: true,
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
    /// Deflating a paletted PNG's pixels failed.
    #[error("deflating the PNG failed: {0}")]
    Deflate(String),
    /// The WebP encoder failed.
    #[error("WebP encoding failed")]
    Webp(String),
    /// The format holds features, not pixels (vector tiles come from a
    /// vector source, never from an image).
    #[error("{0} tiles are made from vector data, not encoded from an image")]
    NotAnImage(TileFormat),
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
        // Mixed: JPEG where the tile is opaque, PNG where it is not.
        TileFormat::Mixed if view.is_opaque() => {
            encode_jpeg(view, options.jpeg_quality, background)
        }
        TileFormat::Png | TileFormat::Mixed => match options
            .png_palette
            .then(|| indexed_png::exact(view))
            .flatten()
        {
            Some(indexed) => indexed_png::write(indexed, options.png_compression),
            None => encode_png(view, options.png_compression, false),
        },
        TileFormat::Png8 => encode_png8(view, options.png_compression),
        TileFormat::Jpeg => encode_jpeg(view, options.jpeg_quality, background),
        TileFormat::Webp => encode_webp(view, options.webp_quality),
        // Elevations: the pixels are codes, kept exactly.
        TileFormat::TerrariumPng | TileFormat::TerrainRgbPng => {
            encode_png(view, options.png_compression, false)
        }
        TileFormat::TerrariumWebp | TileFormat::TerrainRgbWebp => encode_webp_lossless(view),
        TileFormat::Mvt | TileFormat::Mlt => Err(EncodeError::NotAnImage(format)),
    }
}

/// `view` as an RGBA PNG even where every pixel is opaque: a map asked
/// with a transparent background keeps its alpha channel (clients and
/// the OGC suites read the colour model, not the pixels).
pub fn encode_png_with_alpha(
    view: ImageView<'_>,
    options: &EncodeOptions,
) -> Result<Vec<u8>, EncodeError> {
    encode_png(view, options.png_compression, true)
}

fn encode_png(
    view: ImageView<'_>,
    compression: PngCompression,
    alpha: bool,
) -> Result<Vec<u8>, EncodeError> {
    use std::io::Write;
    let opaque = !alpha && view.is_opaque();
    let mut out = Vec::with_capacity(view.width() as usize * view.height() as usize);
    let mut encoder = png::Encoder::new(&mut out, view.width(), view.height());
    encoder.set_color(if opaque {
        png::ColorType::Rgb
    } else {
        png::ColorType::Rgba
    });
    encoder.set_depth(png::BitDepth::Eight);
    encoder.set_compression(compression.png());
    let mut writer = encoder.write_header()?;
    let channels = if opaque { 3 } else { 4 };
    let row_bytes = view.width() as usize * channels;
    let mut stream = writer.stream_writer_with_size(row_bytes * view.height() as usize)?;
    if opaque {
        let mut rgb = vec![0u8; row_bytes];
        for row in view.rows() {
            rgba_to_rgb(row, &mut rgb);
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

/// Drops the alpha of `rgba` pixels into `rgb` (three bytes a pixel), four
/// pixels (as little-endian words) into three words at a time.
fn rgba_to_rgb(rgba: &[u8], rgb: &mut [u8]) {
    let word = |s: &[u8], i: usize| u32::from_le_bytes([s[i], s[i + 1], s[i + 2], s[i + 3]]);
    let mut dst = rgb.chunks_exact_mut(12);
    let mut src = rgba.chunks_exact(16);
    for (d, s) in (&mut dst).zip(&mut src) {
        let (p0, p1, p2, p3) = (word(s, 0), word(s, 4), word(s, 8), word(s, 12));
        d[0..4].copy_from_slice(&((p0 & 0x00ff_ffff) | (p1 << 24)).to_le_bytes());
        d[4..8].copy_from_slice(&(((p1 >> 8) & 0xffff) | (p2 << 16)).to_le_bytes());
        d[8..12].copy_from_slice(&(((p2 >> 16) & 0xff) | (p3 << 8)).to_le_bytes());
    }
    for (d, s) in dst
        .into_remainder()
        .chunks_exact_mut(3)
        .zip(src.remainder().chunks_exact(4))
    {
        d.copy_from_slice(&s[..3]);
    }
}

/// Encodes a paletted PNG: the exact colours when the tile has at most 256,
/// otherwise a NeuQuant palette of 255 colours trained on the pixels that
/// are not fully transparent, with index 0 kept fully transparent so that
/// transparent areas stay exactly transparent.
fn encode_png8(view: ImageView<'_>, compression: PngCompression) -> Result<Vec<u8>, EncodeError> {
    if let Some(exact) = indexed_png::exact(view) {
        return indexed_png::write(exact, compression);
    }
    let visible: Vec<u8> = view
        .rows()
        .flat_map(|row| row.chunks_exact(4))
        .filter(|p| p[3] != 0)
        .flatten()
        .copied()
        .collect();
    let quant = color_quant::NeuQuant::new(10, indexed_png::MAX_COLOURS - 1, &visible);
    let palette = std::iter::once([0; 4])
        .chain(
            quant
                .color_map_rgba()
                .chunks_exact(4)
                .map(|c| [c[0], c[1], c[2], c[3]]),
        )
        .collect();
    let indexed = indexed_png::Indexed::map(view, palette, |p| {
        if p[3] == 0 {
            0
        } else {
            // index_of is below 255: the palette has 255 entries.
            quant.index_of(p) as u8 + 1
        }
    });
    indexed_png::write(indexed, compression)
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
    webp_with(view, |encoder| {
        encoder.encode_simple(false, quality.clamp(0.0, 100.0))
    })
}

/// Lossless WebP: every pixel's bytes kept (elevation codes).
/// Lossless WebP at libwebp's method 1 and effort 50: on elevation tiles
/// about twice as fast as its defaults (method 4, effort 75) for the same
/// bytes within 1 %; method 0 at effort 20 is faster still but twice the
/// bytes (docs/benchmarks/terrain.md).
fn encode_webp_lossless(view: ImageView<'_>) -> Result<Vec<u8>, EncodeError> {
    webp_with(view, |encoder| {
        let mut config = webp::WebPConfig::new()
            .map_err(|()| webp::WebPEncodingError::VP8_ENC_ERROR_INVALID_CONFIGURATION)?;
        config.lossless = 1;
        config.exact = 1;
        config.method = WEBP_LOSSLESS_METHOD;
        config.quality = WEBP_LOSSLESS_EFFORT;
        encoder.encode_advanced(&config)
    })
}

/// libwebp's method for lossless tiles (0 fastest, 6 smallest).
const WEBP_LOSSLESS_METHOD: i32 = 1;

/// libwebp's effort for lossless tiles (its `quality`: 0 fastest, 100
/// smallest).
const WEBP_LOSSLESS_EFFORT: f32 = 50.0;

fn webp_with(
    view: ImageView<'_>,
    run: impl FnOnce(&webp::Encoder<'_>) -> Result<webp::WebPMemory, webp::WebPEncodingError>,
) -> Result<Vec<u8>, EncodeError> {
    if view.width() > 16383 || view.height() > 16383 {
        return Err(EncodeError::Webp(
            "WebP images are at most 16383 pixels wide and high".into(),
        ));
    }
    let packed = view.to_image();
    let encoder = webp::Encoder::from_rgba(packed.as_raw(), view.width(), view.height());
    let memory = run(&encoder).map_err(|e| EncodeError::Webp(format!("{e:?}")))?;
    Ok(memory.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alpha_is_dropped_from_every_pixel_whole_blocks_and_the_rest() {
        for pixels in [0usize, 1, 3, 4, 5, 8, 11, 256] {
            let rgba: Vec<u8> = (0..pixels * 4).map(|i| (i * 7 % 251) as u8).collect();
            let mut rgb = vec![0; pixels * 3];
            rgba_to_rgb(&rgba, &mut rgb);
            let want: Vec<u8> = rgba
                .chunks_exact(4)
                .flat_map(|p| [p[0], p[1], p[2]])
                .collect();
            assert_eq!(rgb, want, "{pixels} pixels");
        }
    }
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

    /// Decodes a paletted PNG into RGBA, checking it is paletted.
    fn decode_png8(bytes: &[u8]) -> Vec<u8> {
        let mut decoder = png::Decoder::new(std::io::Cursor::new(bytes));
        decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::ALPHA);
        let header = png::Decoder::new(std::io::Cursor::new(bytes))
            .read_info()
            .unwrap();
        assert_eq!(header.info().color_type, png::ColorType::Indexed);
        let (_, rgba) = {
            let mut reader = decoder.read_info().unwrap();
            let mut buf = vec![0; reader.output_buffer_size().unwrap()];
            let info = reader.next_frame(&mut buf).unwrap();
            buf.truncate(info.buffer_size());
            (info, buf)
        };
        rgba
    }

    #[test]
    fn png8_keeps_few_colours_exactly_and_transparency_everywhere() {
        let opts = EncodeOptions::default();
        let bg = Color([0, 0, 0, 0]);
        // Four colours, a transparent half: exact.
        let mut data = Vec::new();
        for y in 0..64u32 {
            for x in 0..64u32 {
                data.extend_from_slice(&match (x < 32, y < 32) {
                    (true, _) => [0, 0, 0, 0],
                    (false, true) => [200, 30, 40, 255],
                    (false, false) => [10, 20, 250, 128],
                });
            }
        }
        let flat = RgbaImage::from_raw(64, 64, data.clone()).unwrap();
        let bytes = encode(flat.view(), TileFormat::Png8, &opts, bg).unwrap();
        assert_eq!(decode_png8(&bytes), data);
        // A gradient of thousands of colours: 256 at most, transparent
        // pixels exactly transparent, the rest close.
        let mut smooth = Vec::new();
        for y in 0..128u32 {
            for x in 0..128u32 {
                smooth.extend_from_slice(&[(x * 2) as u8, (y * 2) as u8, (x + y) as u8, 255]);
            }
        }
        let mut grad = RgbaImage::from_raw(128, 128, smooth).unwrap();
        for px in grad.as_raw_mut().chunks_exact_mut(4).step_by(3) {
            px.copy_from_slice(&[0, 0, 0, 0]);
        }
        let bytes = encode(grad.view(), TileFormat::Png8, &opts, bg).unwrap();
        let rgba = decode_png8(&bytes);
        let full = encode(grad.view(), TileFormat::Png, &opts, bg).unwrap();
        assert!(
            bytes.len() < full.len(),
            "{} >= {}",
            bytes.len(),
            full.len()
        );
        let mut error = 0u64;
        for (got, want) in rgba.chunks_exact(4).zip(grad.as_raw().chunks_exact(4)) {
            if want[3] == 0 {
                assert_eq!(got[3], 0);
            } else {
                assert_eq!(got[3], 255);
                error += (0..3)
                    .map(|i| u64::from(got[i].abs_diff(want[i])))
                    .sum::<u64>();
            }
        }
        let mean = error as f64 / (128.0 * 128.0 * 2.0 / 3.0 * 3.0);
        assert!(mean < 8.0, "mean channel error {mean}");
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
    fn a_tile_of_few_colours_is_a_palette_unless_turned_off() {
        // Four classes in rings and a transparent band: 5 colours, kept
        // exactly.
        let mut data = Vec::new();
        for y in 0..256u32 {
            for x in 0..256u32 {
                data.extend_from_slice(&match ((x * x + 3 * y * y) / 997 % 4, y < 8) {
                    (_, true) => [0, 0, 0, 0],
                    (0, _) => [26, 152, 80, 255],
                    (1, _) => [145, 207, 96, 255],
                    (2, _) => [254, 224, 139, 255],
                    _ => [215, 48, 39, 255],
                });
            }
        }
        let img = RgbaImage::from_raw(256, 256, data).unwrap();
        let on = EncodeOptions::default();
        let paletted = encode(img.view(), TileFormat::Png, &on, Color([0; 4])).unwrap();
        assert_eq!(decode_png8(&paletted), img.as_raw().to_vec());
        let off = EncodeOptions {
            png_palette: false,
            ..on
        };
        let full = encode(img.view(), TileFormat::Png, &off, Color([0; 4])).unwrap();
        let (info, pixels) = decode_png(&full);
        assert_eq!(info.color_type, png::ColorType::Rgba);
        assert_eq!(pixels, img.as_raw().to_vec());
        assert!(
            paletted.len() < full.len(),
            "{} >= {}",
            paletted.len(),
            full.len()
        );
    }

    #[test]
    fn opaque_png_is_written_as_rgb() {
        // More than 256 colours: not a palette.
        let img = gradient(64, 16, 255);
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
