//! Cheap checks that a tile passed through from an upstream or a database
//! is whole and of its format, before it is stored: a `\x89PNG` header
//! followed by an HTML page, or half a PNG, must never become a cache hit.
//!
//! The checks walk the format's framing (PNG chunks with their CRCs, JPEG
//! markers up to the scan and the end-of-image marker, the RIFF length of a
//! WebP, the protobuf of an MVT) without decoding pixels.

use geozero::mvt::{Message, Tile};
use tessera_grid::TileFormat;

/// Largest unpacked MVT read while checking one (a tile is rarely above
/// 1 MB; this bounds a gzip bomb).
pub const MOST_MVT_BYTES: u64 = 64 << 20;

/// Why a tile is not whole.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a complete {format} tile: {reason}")]
pub struct Incomplete {
    /// The format expected.
    pub format: &'static str,
    /// What is wrong.
    pub reason: String,
}

fn incomplete(format: &'static str, reason: impl Into<String>) -> Incomplete {
    Incomplete {
        format,
        reason: reason.into(),
    }
}

/// Checks that `bytes` are one complete tile of `format` (PNG, paletted
/// PNG, JPEG, WebP, the mixed format's PNG or JPEG, or MVT, gzip-packed or
/// not).
pub fn check_complete(bytes: &[u8], format: TileFormat) -> Result<(), Incomplete> {
    match format {
        TileFormat::Png | TileFormat::Png8 => check_png(bytes),
        TileFormat::Jpeg => check_jpeg(bytes),
        TileFormat::Webp => check_webp(bytes),
        TileFormat::Mixed => match TileFormat::sniff(bytes) {
            Some(TileFormat::Jpeg) => check_jpeg(bytes),
            _ => check_png(bytes),
        },
        TileFormat::Mvt => mvt_layer_features(bytes).map(|_| ()),
        // Made here from an MVT, never fetched or read from an archive.
        TileFormat::Mlt => Ok(()),
        elevation => check_complete(bytes, elevation.container()),
    }
}

const PNG_SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";

fn check_png(bytes: &[u8]) -> Result<(), Incomplete> {
    let bad = |r: &str| incomplete("PNG", r);
    let mut rest = bytes
        .strip_prefix(PNG_SIGNATURE)
        .ok_or_else(|| bad("no PNG signature"))?;
    let mut first = true;
    loop {
        let (head, after) = rest
            .split_at_checked(8)
            .ok_or_else(|| bad("cut before IEND"))?;
        let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let kind = &head[4..8];
        if !kind.iter().all(u8::is_ascii_alphabetic) {
            return Err(bad("a chunk type is not letters"));
        }
        if first && kind != b"IHDR" {
            return Err(bad("the first chunk is not IHDR"));
        }
        first = false;
        let (data, after) = after
            .split_at_checked(len)
            .ok_or_else(|| bad("a chunk runs past the end"))?;
        let (crc, after) = after
            .split_at_checked(4)
            .ok_or_else(|| bad("a chunk's CRC is missing"))?;
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(kind);
        hasher.update(data);
        if hasher.finalize().to_be_bytes() != crc {
            return Err(bad(&format!(
                "the {} chunk's CRC does not match",
                String::from_utf8_lossy(kind)
            )));
        }
        if kind == b"IEND" {
            // Bytes after IEND (some encoders pad) are never read.
            return Ok(());
        }
        rest = after;
    }
}

fn check_jpeg(bytes: &[u8]) -> Result<(), Incomplete> {
    let bad = |r: &str| incomplete("JPEG", r);
    if !bytes.starts_with(&[0xFF, 0xD8]) {
        return Err(bad("no start-of-image marker"));
    }
    // Encoders may pad after the end-of-image marker; a little is allowed.
    let tail = &bytes[bytes.len().saturating_sub(64)..];
    if !tail.windows(2).any(|w| w == [0xFF, 0xD9]) {
        return Err(bad("no end-of-image marker (cut short?)"));
    }
    // The segments before the scan must chain by their lengths to SOS.
    let mut at = 2;
    loop {
        let marker = match bytes.get(at..at + 2) {
            Some([0xFF, m]) => *m,
            _ => return Err(bad("the segments do not chain")),
        };
        match marker {
            // Fill bytes.
            0xFF => at += 1,
            // Markers without a length.
            0x01 | 0xD0..=0xD7 => at += 2,
            0xD9 => return Err(bad("the image ends before its scan")),
            _ => {
                let len = bytes
                    .get(at + 2..at + 4)
                    .map(|l| usize::from(u16::from_be_bytes([l[0], l[1]])))
                    .ok_or_else(|| bad("a segment is cut"))?;
                if len < 2 || at + 2 + len > bytes.len() {
                    return Err(bad("a segment runs past the end"));
                }
                if marker == 0xDA {
                    return Ok(());
                }
                at += 2 + len;
            }
        }
    }
}

fn check_webp(bytes: &[u8]) -> Result<(), Incomplete> {
    let bad = |r: &str| incomplete("WebP", r);
    if bytes.len() < 12 || &bytes[..4] != b"RIFF" || &bytes[8..12] != b"WEBP" {
        return Err(bad("no RIFF WEBP header"));
    }
    let size = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]) as usize;
    if size.saturating_add(8) > bytes.len() {
        return Err(bad(&format!(
            "the RIFF header says {} bytes, the tile has only {}",
            size.saturating_add(8),
            bytes.len()
        )));
    }
    match bytes.get(12..16) {
        Some(b"VP8 " | b"VP8L" | b"VP8X") => Ok(()),
        _ => Err(bad("its first chunk is not VP8, VP8L or VP8X")),
    }
}

/// The number of features of each layer of an MVT (gzip-packed or not),
/// read through the whole protobuf: framing errors, a cut gzip stream and
/// more than [`MOST_MVT_BYTES`] unpacked are errors.
pub fn mvt_layer_features(bytes: &[u8]) -> Result<Vec<(String, usize)>, Incomplete> {
    let bad = |r: String| incomplete("MVT", r);
    let unpacked;
    let raw = if bytes.starts_with(&[0x1F, 0x8B]) {
        unpacked = crate::inflate::gunzip_capped(bytes, MOST_MVT_BYTES).map_err(|e| match e {
            crate::inflate::InflateError::TooLarge { .. } => {
                bad(format!("more than {MOST_MVT_BYTES} bytes unpacked"))
            }
            damaged @ crate::inflate::InflateError::Damaged(_) => bad(damaged.to_string()),
        })?;
        unpacked.as_slice()
    } else {
        bytes
    };
    let tile = Tile::decode(raw).map_err(|e| bad(format!("the protobuf is damaged: {e}")))?;
    Ok(tile
        .layers
        .into_iter()
        .map(|l| (l.name, l.features.len()))
        .collect())
}

/// Checks that a tile is whole: a vector tile gzip-compressed as stored
/// (an archive's) by its signature; any other by its framing, and an image
/// by the size it declares.
pub(crate) fn check_tile(
    bytes: &[u8],
    format: TileFormat,
    size: (u32, u32),
) -> Result<(), Incomplete> {
    if format == TileFormat::Mvt && bytes.starts_with(&[0x1f, 0x8b]) {
        return Ok(());
    }
    check_complete(bytes, format).and_then(|()| same_size(bytes, format, size))
}

/// Checks that an image tile declares the tile's size (an MVT has none).
fn same_size(
    bytes: &[u8],
    format: TileFormat,
    (width, height): (u32, u32),
) -> Result<(), Incomplete> {
    let image = match format {
        TileFormat::Mvt | TileFormat::Mlt => return Ok(()),
        TileFormat::Mixed | TileFormat::Png8 => TileFormat::sniff(bytes).unwrap_or(TileFormat::Png),
        other => other,
    };
    let wrong = |reason: String| Incomplete {
        format: "image",
        reason,
    };
    match tessera_image::declared_size(bytes, image) {
        Ok(size) if size == (width, height) => Ok(()),
        Ok((w, h)) => Err(wrong(format!(
            "it declares {w}x{h} pixels, not the tile's {width}x{height}"
        ))),
        Err(e) => Err(wrong(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn png() -> Vec<u8> {
        let image = tessera_image::RgbaImage::transparent(8, 8);
        tessera_image::encode(
            image.view(),
            TileFormat::Png,
            &tessera_image::EncodeOptions::default(),
            tessera_image::Color([0; 4]),
        )
        .unwrap()
    }

    fn encoded(format: TileFormat) -> Vec<u8> {
        let mut data = Vec::new();
        for i in 0..64u32 {
            data.extend_from_slice(&[(i * 4) as u8, 10, 200, 255]);
        }
        let image = tessera_image::RgbaImage::from_raw(8, 8, data).unwrap();
        tessera_image::encode(
            image.view(),
            format,
            &tessera_image::EncodeOptions::default(),
            tessera_image::Color([255; 4]),
        )
        .unwrap()
    }

    #[test]
    fn whole_tiles_pass_and_cut_ones_do_not() {
        for format in [TileFormat::Png, TileFormat::Jpeg, TileFormat::Webp] {
            let bytes = encoded(format);
            assert_eq!(check_complete(&bytes, format), Ok(()), "{format}");
            for cut in [bytes.len() / 2, bytes.len() - 1, 13] {
                let e = check_complete(&bytes[..cut], format).unwrap_err();
                assert_eq!(e.format, format_name(format), "{format} cut at {cut}: {e}");
            }
        }
        assert_eq!(check_complete(&png(), TileFormat::Png), Ok(()));
        // Padding after the end is never read, and is no damage.
        for format in [TileFormat::Png, TileFormat::Webp, TileFormat::Jpeg] {
            let mut padded = encoded(format);
            padded.extend_from_slice(&[0; 7]);
            assert_eq!(check_complete(&padded, format), Ok(()), "{format}");
        }
    }

    fn format_name(format: TileFormat) -> &'static str {
        match format {
            TileFormat::Jpeg => "JPEG",
            TileFormat::Webp => "WebP",
            _ => "PNG",
        }
    }

    #[test]
    fn a_png_signature_followed_by_html_is_refused() {
        let mut bytes = PNG_SIGNATURE.to_vec();
        bytes.extend_from_slice(b"<html><body>502 Bad Gateway</body></html>");
        let e = check_complete(&bytes, TileFormat::Png).unwrap_err();
        assert!(e.reason.contains("chunk"), "{e}");
        // A flipped byte inside a chunk fails its CRC.
        let mut flipped = png();
        let at = flipped.len() - 20;
        flipped[at] ^= 0x40;
        let e = check_complete(&flipped, TileFormat::Png).unwrap_err();
        assert!(e.reason.contains("CRC"), "{e}");
    }

    #[test]
    fn mvt_tiles_are_read_through_and_their_features_counted() {
        let empty = tessera_grid::EMPTY_MVT;
        assert_eq!(mvt_layer_features(empty), Ok(Vec::new()));
        assert_eq!(check_complete(empty, TileFormat::Mvt), Ok(()));
        let e = check_complete(&empty[..empty.len() - 3], TileFormat::Mvt).unwrap_err();
        assert!(e.reason.contains("gzip"), "{e}");
        // Field 3 (layers), length 100, with 2 bytes present.
        let e = check_complete(&[0x1A, 100, 0x78, 0x02], TileFormat::Mvt).unwrap_err();
        assert!(e.reason.contains("protobuf"), "{e}");
    }
}
