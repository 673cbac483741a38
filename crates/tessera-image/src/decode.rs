//! Decoding images fetched from upstream services (PNG, JPEG, WebP) into
//! RGBA, with their size checked.

use tessera_grid::TileFormat;

use crate::{RgbaImage, plain_png};

/// Why an image could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The bytes start with no known image signature.
    #[error("not a PNG, JPEG or WebP image ({} bytes, starting {:?})", .len, .start)]
    Unknown {
        /// Length of the body.
        len: usize,
        /// Its first bytes, lossily as text (an error page shows here).
        start: String,
    },
    /// The image is damaged or truncated.
    #[error("a damaged or truncated {format} image: {message}")]
    Damaged {
        /// The format its signature names.
        format: &'static str,
        /// The decoder's message.
        message: String,
    },
    /// The image has another size than asked for.
    #[error("the image is {got_w}x{got_h} pixels, not the {want_w}x{want_h} asked for")]
    WrongSize {
        /// Width decoded.
        got_w: u32,
        /// Height decoded.
        got_h: u32,
        /// Width expected.
        want_w: u32,
        /// Height expected.
        want_h: u32,
    },
}

/// Decodes a PNG (any colour type and depth), JPEG or WebP image into RGBA
/// (8 bits per channel) and checks that it is `width` x `height` pixels.
///
/// The size the image declares in its header is checked before anything
/// is allocated for its pixels: a small file that claims to be 60000x60000
/// is a [`DecodeError::WrongSize`] at once, so the pixels allocated never
/// exceed the size asked for (which the caller bounds).
pub fn decode(bytes: &[u8], width: u32, height: u32) -> Result<RgbaImage, DecodeError> {
    let format = TileFormat::sniff(bytes);
    if let Some(format @ (TileFormat::Png | TileFormat::Jpeg | TileFormat::Webp)) = format {
        let (got_w, got_h) = declared_size(bytes, format)?;
        if (got_w, got_h) != (width, height) {
            return Err(DecodeError::WrongSize {
                got_w,
                got_h,
                want_w: width,
                want_h: height,
            });
        }
    }
    let image = match format {
        Some(TileFormat::Png) => match plain_png::decode(bytes, (width, height)) {
            Ok(Some(image)) => Ok(image),
            Ok(None) => decode_png(bytes),
            Err(e) => Err(damaged("PNG")(&e)),
        },
        Some(TileFormat::Jpeg) => decode_jpeg(bytes),
        Some(TileFormat::Webp) => decode_webp(bytes),
        _ => Err(DecodeError::Unknown {
            len: bytes.len(),
            start: String::from_utf8_lossy(&bytes[..bytes.len().min(UNKNOWN_EXCERPT)]).into_owned(),
        }),
    }?;
    if (image.width(), image.height()) != (width, height) {
        return Err(DecodeError::WrongSize {
            got_w: image.width(),
            got_h: image.height(),
            want_w: width,
            want_h: height,
        });
    }
    Ok(image)
}

/// Bytes of an unrecognised body kept in [`DecodeError::Unknown`] (for the
/// log; shown escaped by its `Debug` formatting).
const UNKNOWN_EXCERPT: usize = 48;

/// The width and height an image's header declares, read without decoding
/// (and without allocating for) its pixels.
pub fn declared_size(bytes: &[u8], format: TileFormat) -> Result<(u32, u32), DecodeError> {
    match format {
        TileFormat::Png => {
            // Signature (8), IHDR length (4) and type (4), width, height.
            let be = |at: usize| {
                bytes
                    .get(at..at + 4)
                    .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
            };
            match (bytes.get(12..16), be(16), be(20)) {
                (Some(b"IHDR"), Some(w), Some(h)) => Ok((w, h)),
                _ => Err(damaged("PNG")(&"no IHDR chunk first")),
            }
        }
        TileFormat::Jpeg => {
            let mut decoder =
                zune_jpeg::JpegDecoder::new(zune_jpeg::zune_core::bytestream::ZCursor::new(bytes));
            decoder.decode_headers().map_err(|e| damaged("JPEG")(&e))?;
            let (w, h) = decoder
                .dimensions()
                .ok_or_else(|| damaged("JPEG")(&"no image size in the header"))?;
            let fit = |v: usize| u32::try_from(v).map_err(|e| damaged("JPEG")(&e));
            Ok((fit(w)?, fit(h)?))
        }
        TileFormat::Webp => webp::BitstreamFeatures::new(bytes)
            .map(|f| (f.width(), f.height()))
            .ok_or_else(|| damaged("WebP")(&"no readable header")),
        other => Err(DecodeError::Unknown {
            len: bytes.len(),
            start: format!("a {other} tile is not an image"),
        }),
    }
}

fn damaged(format: &'static str) -> impl Fn(&dyn std::fmt::Display) -> DecodeError {
    move |e| DecodeError::Damaged {
        format,
        message: e.to_string(),
    }
}

/// Any PNG, with the `png` crate (what [`plain_png`] leaves).
pub(crate) fn decode_png(bytes: &[u8]) -> Result<RgbaImage, DecodeError> {
    let err = damaged("PNG");
    let mut decoder = png::Decoder::new(std::io::Cursor::new(bytes));
    // Palette, grey and 16-bit images come out as 8-bit RGB(A) or grey(A).
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().map_err(|e| err(&e))?;
    let size = reader
        .output_buffer_size()
        .ok_or_else(|| err(&"the image is too large"))?;
    let mut buf = vec![0; size];
    let info = reader.next_frame(&mut buf).map_err(|e| err(&e))?;
    buf.truncate(info.buffer_size());
    let (w, h) = (info.width, info.height);
    let rgba: Vec<u8> = match info.color_type {
        png::ColorType::Rgba => buf,
        png::ColorType::Rgb => buf
            .chunks_exact(3)
            .flat_map(|p| [p[0], p[1], p[2], 255])
            .collect(),
        png::ColorType::GrayscaleAlpha => buf
            .chunks_exact(2)
            .flat_map(|p| [p[0], p[0], p[0], p[1]])
            .collect(),
        png::ColorType::Grayscale => buf.iter().flat_map(|&g| [g, g, g, 255]).collect(),
        png::ColorType::Indexed => return Err(err(&"a palette was not expanded")),
    };
    RgbaImage::from_raw(w, h, rgba).ok_or_else(|| err(&"the pixel data is short"))
}

fn decode_jpeg(bytes: &[u8]) -> Result<RgbaImage, DecodeError> {
    let err = damaged("JPEG");
    let options = zune_jpeg::zune_core::options::DecoderOptions::default()
        .jpeg_set_out_colorspace(zune_jpeg::zune_core::colorspace::ColorSpace::RGBA);
    let mut decoder = zune_jpeg::JpegDecoder::new_with_options(
        zune_jpeg::zune_core::bytestream::ZCursor::new(bytes),
        options,
    );
    let pixels = decoder.decode().map_err(|e| err(&e))?;
    let (w, h) = decoder
        .dimensions()
        .ok_or_else(|| err(&"no image size in the header"))?;
    let (w, h) = (
        u32::try_from(w).map_err(|e| err(&e))?,
        u32::try_from(h).map_err(|e| err(&e))?,
    );
    RgbaImage::from_raw(w, h, pixels).ok_or_else(|| err(&"the pixel data is short"))
}

fn decode_webp(bytes: &[u8]) -> Result<RgbaImage, DecodeError> {
    let err = damaged("WebP");
    let image = webp::Decoder::new(bytes)
        .decode()
        .ok_or_else(|| err(&"libwebp could not decode it"))?;
    let (w, h) = (image.width(), image.height());
    let rgba: Vec<u8> = if image.is_alpha() {
        image.to_vec()
    } else {
        image
            .chunks_exact(3)
            .flat_map(|p| [p[0], p[1], p[2], 255])
            .collect()
    };
    RgbaImage::from_raw(w, h, rgba).ok_or_else(|| err(&"the pixel data is short"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Color, EncodeOptions, encode};

    fn sample() -> RgbaImage {
        let mut data = Vec::new();
        for y in 0..16u32 {
            for x in 0..16u32 {
                data.extend_from_slice(&[
                    (x * 16) as u8,
                    (y * 16) as u8,
                    128,
                    if x < 8 { 255 } else { 0 },
                ]);
            }
        }
        RgbaImage::from_raw(16, 16, data).unwrap()
    }

    #[test]
    fn png_round_trips_exactly_and_jpeg_and_webp_come_back_close() {
        let image = sample();
        let opts = EncodeOptions::default();
        let white = Color([255, 255, 255, 255]);
        let png = encode(image.view(), TileFormat::Png, &opts, white).unwrap();
        assert_eq!(decode(&png, 16, 16).unwrap(), image);
        for format in [TileFormat::Jpeg, TileFormat::Webp] {
            let bytes = encode(image.view(), format, &opts, white).unwrap();
            let back = decode(&bytes, 16, 16).unwrap();
            // Opaque pixels keep their colour within the codec's loss.
            let a = &image.as_raw()[0..4];
            let b = &back.as_raw()[0..4];
            assert!(
                a.iter().zip(b).take(3).all(|(x, y)| x.abs_diff(*y) < 24),
                "{format}: {a:?} vs {b:?}"
            );
        }
    }

    #[test]
    fn damaged_unknown_and_wrong_sized_images_are_errors_that_say_so() {
        let png = encode(
            sample().view(),
            TileFormat::Png,
            &EncodeOptions::default(),
            Color([0; 4]),
        )
        .unwrap();
        let e = decode(&png[..png.len() / 2], 16, 16).unwrap_err();
        assert!(
            matches!(e, DecodeError::Damaged { format: "PNG", .. }),
            "{e}"
        );
        let e = decode(b"<?xml version='1.0'?><ServiceExceptionReport/>", 16, 16).unwrap_err();
        assert!(e.to_string().contains("ServiceExceptionReport"), "{e}");
        let e = decode(&png, 32, 16).unwrap_err();
        assert!(e.to_string().contains("16x16 pixels, not the 32x16"), "{e}");
    }

    /// `bytes` with the size its header declares changed to `w` x `h` (the
    /// pixel data left as it is).
    fn declaring(format: TileFormat, w: u32, h: u32) -> Vec<u8> {
        let mut bytes = encode(
            sample().view(),
            format,
            &EncodeOptions::default(),
            Color([0; 4]),
        )
        .unwrap();
        match format {
            TileFormat::Png => {
                bytes[16..20].copy_from_slice(&w.to_be_bytes());
                bytes[20..24].copy_from_slice(&h.to_be_bytes());
            }
            TileFormat::Jpeg => {
                let sof = bytes
                    .windows(2)
                    .position(|m| m[0] == 0xFF && (m[1] == 0xC0 || m[1] == 0xC2))
                    .unwrap();
                let (h, w) = (u16::try_from(h).unwrap(), u16::try_from(w).unwrap());
                bytes[sof + 5..sof + 7].copy_from_slice(&h.to_be_bytes());
                bytes[sof + 7..sof + 9].copy_from_slice(&w.to_be_bytes());
            }
            _ => unreachable!(),
        }
        bytes
    }

    #[test]
    fn a_small_file_declaring_a_huge_image_is_refused_from_its_header() {
        // The pixels 60000x60000 would need (14.4 GB) are never asked for:
        // the size is checked before the decoder allocates anything (the
        // end-to-end test runs the server under `prlimit --as`).
        for (format, w, h) in [
            (TileFormat::Png, 60_000, 60_000),
            (TileFormat::Jpeg, 16_000, 16_000),
        ] {
            let bytes = declaring(format, w, h);
            assert_eq!(declared_size(&bytes, format).unwrap(), (w, h));
            let e = decode(&bytes, 16, 16).unwrap_err();
            assert!(
                matches!(e, DecodeError::WrongSize { got_w, got_h, .. } if (got_w, got_h) == (w, h)),
                "{format}: {e}"
            );
        }
        let webp = encode(
            sample().view(),
            TileFormat::Webp,
            &EncodeOptions::default(),
            Color([0; 4]),
        )
        .unwrap();
        assert_eq!(declared_size(&webp, TileFormat::Webp).unwrap(), (16, 16));
        assert!(matches!(
            decode(&webp, 256, 256),
            Err(DecodeError::WrongSize { got_w: 16, .. })
        ));
    }
}
