//! One-pass decoding of the PNGs map servers send most: 8-bit RGB or RGBA,
//! not interlaced, without a transparency chunk.
//!
//! The `png` crate inflates through a streaming decoder and copies every
//! row out of its window; here the image data is inflated whole with
//! libdeflate straight into the buffer that becomes the image, and each
//! row is unfiltered where it lands. A 1040x1040 RGBA GetMap decodes in
//! about half the time when unfiltered (as MapServer writes it) and three
//! quarters with adaptive filters (bench `decode_png`). Any other PNG is
//! left to the `png` crate ([`decode`] answers `Ok(None)`).

use crate::RgbaImage;

/// The eight bytes every PNG starts with.
const SIGNATURE: &[u8; 8] = b"\x89PNG\r\n\x1a\n";

/// Why a PNG of the kind this module decodes is not a valid image.
#[derive(Debug, thiserror::Error)]
pub enum PlainPngError {
    /// A chunk runs past the end of the bytes.
    #[error("a chunk runs past the end of the data (truncated)")]
    Truncated,
    /// A chunk's CRC does not match its contents.
    #[error("the {0} chunk's CRC does not match")]
    Crc(String),
    /// The image data is not a valid zlib stream.
    #[error("the image data does not inflate: {0}")]
    Inflate(String),
    /// The image data inflates to another length than the header implies.
    #[error("the image data is {got} bytes, not the {want} its header implies")]
    Length {
        /// Bytes inflated.
        got: usize,
        /// Bytes the header implies.
        want: usize,
    },
    /// A row names a filter PNG does not have.
    #[error("row {row} names filter {filter}, which PNG does not have")]
    Filter {
        /// Row, from 0.
        row: usize,
        /// The filter byte.
        filter: u8,
    },
}

/// The header fields this module reads.
struct Header {
    width: u32,
    height: u32,
    /// Bytes per pixel: 3 (RGB) or 4 (RGBA).
    bpp: usize,
}

/// Decodes `bytes` when it is an 8-bit RGB or RGBA PNG, not interlaced and
/// without `tRNS`, and `want` (width, height) is its size. `Ok(None)`: a PNG
/// of another kind or size (the caller decodes it otherwise and reports
/// the size); `Err`: one of this kind that is damaged or truncated.
pub fn decode(bytes: &[u8], want: (u32, u32)) -> Result<Option<RgbaImage>, PlainPngError> {
    let Some(chunks) = bytes.strip_prefix(SIGNATURE) else {
        return Ok(None);
    };
    let mut header = None;
    let mut idat: Vec<&[u8]> = Vec::new();
    let mut rest = chunks;
    loop {
        let Chunk {
            kind,
            data,
            rest: next,
        } = chunk(rest)?;
        rest = next;
        match &kind {
            b"IHDR" => match read_header(data) {
                Some(h) if (h.width, h.height) == want => header = Some(h),
                _ => return Ok(None),
            },
            b"IDAT" => idat.push(data),
            b"IEND" => break,
            // Colour-key transparency, animation: the png crate's job.
            b"tRNS" | b"acTL" => return Ok(None),
            // Another critical chunk (upper-case first letter) than a
            // suggested palette: not a kind this module knows.
            [first, ..] if first.is_ascii_uppercase() && &kind != b"PLTE" => return Ok(None),
            _ => {}
        }
        if header.is_none() {
            // IHDR must come first.
            return Ok(None);
        }
    }
    let Some(header) = header else {
        return Ok(None);
    };
    let zlib = if let [one] = idat.as_slice() {
        std::borrow::Cow::Borrowed(*one)
    } else {
        std::borrow::Cow::Owned(idat.concat())
    };
    decode_data(&header, &zlib).map(Some)
}

/// A chunk as read by [`chunk`].
struct Chunk<'a> {
    kind: [u8; 4],
    data: &'a [u8],
    /// The bytes after the chunk.
    rest: &'a [u8],
}

/// The chunk `bytes` starts with, its CRC checked.
fn chunk(bytes: &[u8]) -> Result<Chunk<'_>, PlainPngError> {
    let (len, rest) = bytes
        .split_first_chunk::<4>()
        .ok_or(PlainPngError::Truncated)?;
    let len = u32::from_be_bytes(*len) as usize;
    if rest.len() < len + 8 {
        return Err(PlainPngError::Truncated);
    }
    let (typed, rest) = rest.split_at(4 + len);
    let (crc, rest) = rest.split_at(4);
    let kind: [u8; 4] = typed[..4].try_into().expect("four bytes");
    if crc32fast::hash(typed).to_be_bytes() != crc {
        return Err(PlainPngError::Crc(
            String::from_utf8_lossy(&kind).into_owned(),
        ));
    }
    Ok(Chunk {
        kind,
        data: &typed[4..],
        rest,
    })
}

/// The header when the image is 8-bit RGB or RGBA, not interlaced, with
/// the standard compression and filter methods.
fn read_header(data: &[u8]) -> Option<Header> {
    let &[w0, w1, w2, w3, h0, h1, h2, h3, 8, colour, 0, 0, 0] = data else {
        return None;
    };
    let bpp = match colour {
        2 => 3,
        6 => 4,
        _ => return None,
    };
    let (width, height) = (
        u32::from_be_bytes([w0, w1, w2, w3]),
        u32::from_be_bytes([h0, h1, h2, h3]),
    );
    (width > 0 && height > 0).then_some(Header { width, height, bpp })
}

/// Inflates the image data and unfilters it into an RGBA image.
fn decode_data(header: &Header, zlib: &[u8]) -> Result<RgbaImage, PlainPngError> {
    let (w, h) = (header.width as usize, header.height as usize);
    let line = w * header.bpp;
    let want = h * (line + 1);
    let stride = w * 4;
    // RGBA: inflated into the image's own buffer (one byte a row longer:
    // the filter bytes), each row then moved back over the filter bytes
    // before it and unfiltered in place. RGB: inflated aside, each row
    // unfiltered there and widened into the image.
    let mut raw = vec![0u8; want];
    let got = libdeflater::Decompressor::new()
        .zlib_decompress(zlib, &mut raw)
        .map_err(|e| PlainPngError::Inflate(e.to_string()))?;
    if got != want {
        return Err(PlainPngError::Length { got, want });
    }
    let zeros = vec![0u8; line];
    if header.bpp == 4 {
        for row in 0..h {
            let filter = raw[row * (line + 1)];
            let start = row * stride;
            raw.copy_within(start + row + 1..start + row + 1 + line, start);
            let (done, current) = raw.split_at_mut(start);
            let prior = if row == 0 {
                &zeros[..]
            } else {
                &done[start - stride..]
            };
            unfilter::<4>(filter, prior, &mut current[..line])
                .map_err(|filter| PlainPngError::Filter { row, filter })?;
        }
        raw.truncate(h * stride);
        return Ok(RgbaImage::from_raw(header.width, header.height, raw).expect("sized"));
    }
    let mut rgba = vec![255u8; h * stride];
    for row in 0..h {
        let start = row * (line + 1);
        let (done, current) = raw.split_at_mut(start + 1);
        let prior = if row == 0 {
            &zeros[..]
        } else {
            &done[start - line..start]
        };
        let current = &mut current[..line];
        unfilter::<3>(done[start], prior, current)
            .map_err(|filter| PlainPngError::Filter { row, filter })?;
        for (rgb, out) in current
            .chunks_exact(3)
            .zip(rgba[row * stride..(row + 1) * stride].chunks_exact_mut(4))
        {
            out[..3].copy_from_slice(rgb);
        }
    }
    Ok(RgbaImage::from_raw(header.width, header.height, rgba).expect("sized"))
}

/// Undoes PNG filter `filter` on `current` (one row, `BPP` bytes a pixel)
/// given the unfiltered row above it (`prior`, zeros for the first row).
/// `Err(filter)` when the filter byte is not one of PNG's five.
fn unfilter<const BPP: usize>(filter: u8, prior: &[u8], current: &mut [u8]) -> Result<(), u8> {
    match filter {
        0 => {}
        1 => {
            let mut left = [0u8; BPP];
            for px in current.chunks_exact_mut(BPP) {
                for i in 0..BPP {
                    px[i] = px[i].wrapping_add(left[i]);
                }
                left.copy_from_slice(px);
            }
        }
        2 => {
            for (c, p) in current.iter_mut().zip(prior) {
                *c = c.wrapping_add(*p);
            }
        }
        3 => {
            let mut left = [0u8; BPP];
            for (px, up) in current.chunks_exact_mut(BPP).zip(prior.chunks_exact(BPP)) {
                for i in 0..BPP {
                    // The mean rounded down.
                    px[i] = px[i].wrapping_add(left[i].midpoint(up[i]));
                }
                left.copy_from_slice(px);
            }
        }
        4 => {
            let (mut left, mut up_left) = ([0i16; BPP], [0i16; BPP]);
            for (px, up) in current.chunks_exact_mut(BPP).zip(prior.chunks_exact(BPP)) {
                let up: [i16; BPP] = std::array::from_fn(|i| i16::from(up[i]));
                let mut out = [0u8; BPP];
                for i in 0..BPP {
                    out[i] = px[i].wrapping_add(paeth(left[i], up[i], up_left[i]));
                }
                px.copy_from_slice(&out);
                left = out.map(i16::from);
                up_left = up;
            }
        }
        other => return Err(other),
    }
    Ok(())
}

/// The Paeth predictor: of left (`a`), above (`b`) and above-left (`c`),
/// the one nearest `a + b - c` (ties to `a`, then `b`). Written without
/// branches, as stb_image does: `c` is nearest unless it lies outside
/// `a..=b` by more than the gap to the nearer end, and then that end is.
fn paeth(a: i16, b: i16, c: i16) -> u8 {
    let threshold = 3 * c - (a + b);
    let (low, high) = (a.min(b), a.max(b));
    let picked = if high <= threshold { low } else { c };
    (if threshold <= low { high } else { picked }) as u8
}

/// The Paeth predictor as the PNG specification writes it.
#[cfg(test)]
fn paeth_reference(a: u8, b: u8, c: u8) -> u8 {
    let (ia, ib, ic) = (i16::from(a), i16::from(b), i16::from(c));
    let p = ia + ib - ic;
    let (pa, pb, pc) = ((p - ia).abs(), (p - ib).abs(), (p - ic).abs());
    if pa <= pb && pa <= pc {
        a
    } else if pb <= pc {
        b
    } else {
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `w` x `h` image with smooth gradients, edges and noise (so every
    /// filter wins on some row), as PNG with `filter` and `colour`.
    fn png(w: u32, h: u32, colour: png::ColorType, filter: png::Filter, level: u8) -> Vec<u8> {
        let bpp = if colour == png::ColorType::Rgb { 3 } else { 4 };
        let mut seed = 0x2545_f491_u32;
        let mut data = Vec::new();
        for y in 0..h {
            for x in 0..w {
                seed ^= seed << 13;
                seed ^= seed >> 17;
                seed ^= seed << 5;
                let noise = if y % 7 == 3 { seed as u8 } else { 0 };
                let px = [
                    (x * 3 + y) as u8 ^ noise,
                    (y * 5) as u8,
                    if x > w / 2 { 200 } else { 10 },
                    (x + y) as u8 | 1,
                ];
                data.extend_from_slice(&px[..bpp]);
            }
        }
        let mut out = Vec::new();
        let mut e = png::Encoder::new(&mut out, w, h);
        e.set_color(colour);
        e.set_depth(png::BitDepth::Eight);
        e.set_filter(filter);
        e.set_deflate_compression(png::DeflateCompression::Level(level));
        let mut writer = e.write_header().unwrap();
        writer.write_image_data(&data).unwrap();
        writer.finish().unwrap();
        out
    }

    /// `bytes` decoded to RGBA by the png crate (the path for PNGs this
    /// module leaves).
    fn reference(bytes: &[u8]) -> Vec<u8> {
        crate::decode::decode_png(bytes).unwrap().as_raw().to_vec()
    }

    #[test]
    fn the_branch_free_paeth_predictor_is_the_specifications() {
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                for c in (0..=255u8).step_by(5).chain([1, 254]) {
                    assert_eq!(
                        paeth(a.into(), b.into(), c.into()),
                        paeth_reference(a, b, c),
                        "{a} {b} {c}"
                    );
                }
            }
        }
    }

    #[test]
    fn every_filter_colour_and_width_decodes_as_the_png_crate_does() {
        use png::Filter::{Adaptive, Avg, NoFilter, Paeth, Sub, Up};
        for colour in [png::ColorType::Rgb, png::ColorType::Rgba] {
            for filter in [NoFilter, Sub, Up, Avg, Paeth, Adaptive] {
                for (w, h) in [(1, 1), (3, 5), (255, 9), (64, 64)] {
                    let bytes = png(w, h, colour, filter, 6);
                    let image = decode(&bytes, (w, h)).unwrap().expect("decoded here");
                    assert_eq!(
                        image.as_raw(),
                        &reference(&bytes),
                        "{colour:?} {filter:?} {w}x{h}"
                    );
                }
            }
        }
    }

    #[test]
    fn other_kinds_and_sizes_are_left_to_the_png_crate() {
        let rgb = png(8, 8, png::ColorType::Rgb, png::Filter::Sub, 6);
        assert!(decode(&rgb, (8, 9)).unwrap().is_none(), "another size");
        assert!(decode(b"GIF89a", (8, 8)).unwrap().is_none(), "not a PNG");
        for colour in [png::ColorType::Grayscale, png::ColorType::GrayscaleAlpha] {
            let mut out = Vec::new();
            let mut e = png::Encoder::new(&mut out, 2, 2);
            e.set_color(colour);
            let mut writer = e.write_header().unwrap();
            let len = if colour == png::ColorType::Grayscale {
                4
            } else {
                8
            };
            writer.write_image_data(&vec![9; len]).unwrap();
            writer.finish().unwrap();
            assert!(decode(&out, (2, 2)).unwrap().is_none(), "{colour:?}");
        }
        let mut out = Vec::new();
        let mut e = png::Encoder::new(&mut out, 2, 2);
        e.set_color(png::ColorType::Rgb);
        e.set_trns(vec![0, 0, 0, 0, 0, 0]);
        let mut writer = e.write_header().unwrap();
        writer.write_image_data(&[1; 12]).unwrap();
        writer.finish().unwrap();
        assert!(decode(&out, (2, 2)).unwrap().is_none(), "colour key");
    }

    #[test]
    fn damaged_and_truncated_images_are_errors() {
        let bytes = png(40, 40, png::ColorType::Rgba, png::Filter::Paeth, 6);
        for cut in [bytes.len() - 1, bytes.len() / 2, 40] {
            let e = decode(&bytes[..cut], (40, 40)).unwrap_err();
            assert!(matches!(e, PlainPngError::Truncated), "cut at {cut}: {e}");
        }
        // A flipped byte in the image data fails its chunk's CRC.
        let idat = bytes.windows(4).position(|w| w == b"IDAT").unwrap();
        let mut flipped = bytes.clone();
        flipped[idat + 10] ^= 0x40;
        let e = decode(&flipped, (40, 40)).unwrap_err();
        assert!(e.to_string().contains("IDAT chunk's CRC"), "{e}");
        // Image data that is not zlib.
        let e = decode(&assemble(2, 2, 2, b"not zlib at all"), (2, 2)).unwrap_err();
        assert!(matches!(e, PlainPngError::Inflate(_)), "{e}");
    }

    /// `raw` as a zlib stream.
    fn zlib(raw: &[u8]) -> Vec<u8> {
        let mut z = libdeflater::Compressor::new(libdeflater::CompressionLvl::default());
        let mut data = vec![0; z.zlib_compress_bound(raw.len())];
        let n = z.zlib_compress(raw, &mut data).unwrap();
        data.truncate(n);
        data
    }

    /// A PNG put together by hand, with `idat` as its image data.
    fn assemble(w: u32, h: u32, colour: u8, idat: &[u8]) -> Vec<u8> {
        let mut out = SIGNATURE.to_vec();
        let mut put = |kind: &[u8; 4], data: &[u8]| {
            out.extend_from_slice(&u32::try_from(data.len()).unwrap().to_be_bytes());
            let start = out.len();
            out.extend_from_slice(kind);
            out.extend_from_slice(data);
            let crc = crc32fast::hash(&out[start..]);
            out.extend_from_slice(&crc.to_be_bytes());
        };
        let mut ihdr = Vec::new();
        ihdr.extend_from_slice(&w.to_be_bytes());
        ihdr.extend_from_slice(&h.to_be_bytes());
        ihdr.extend_from_slice(&[8, colour, 0, 0, 0]);
        put(b"IHDR", &ihdr);
        put(b"IDAT", idat);
        put(b"IEND", &[]);
        out
    }

    #[test]
    fn an_unknown_filter_byte_and_a_wrong_data_length_are_named() {
        // Two rows of two RGB pixels; the second row's filter byte is 7.
        let mut raw = vec![0u8; 2 * (1 + 6)];
        raw[7] = 7;
        let e = decode(&assemble(2, 2, 2, &zlib(&raw)), (2, 2)).unwrap_err();
        assert!(e.to_string().contains("row 1 names filter 7"), "{e}");
        let e = decode(&assemble(2, 2, 2, &zlib(&raw[..13])), (2, 2)).unwrap_err();
        assert!(e.to_string().contains("13 bytes, not the 14"), "{e}");
        let e = decode(&assemble(2, 2, 6, &zlib(&raw)), (2, 2)).unwrap_err();
        assert!(
            matches!(e, PlainPngError::Length { .. } | PlainPngError::Inflate(_)),
            "{e}"
        );
        raw[7] = 2;
        let image = decode(&assemble(2, 2, 2, &zlib(&raw)), (2, 2))
            .unwrap()
            .unwrap();
        assert_eq!(image.as_raw(), &[0, 0, 0, 255].repeat(4)[..]);
    }
}
