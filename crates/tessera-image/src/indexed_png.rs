//! Paletted PNGs: a view's exact colours when it has at most 256 (lossless:
//! classified rasters, styled vector tiles, low zooms), and the writer of
//! every paletted PNG tessera makes, deflated with libdeflate.
//!
//! Palette indices are one byte a pixel, a third of the RGB bytes, and are
//! left unfiltered (indices are not intensities); libdeflate at level 6
//! makes them smaller than the RGB PNG at about the same CPU
//! (`cargo bench -p tessera-image --bench png_size`,
//! docs/benchmarks/cold-floor.md).

use std::cell::RefCell;

use crate::ImageView;
use crate::encode::EncodeError;

/// Colours a paletted PNG can hold.
pub(crate) const MAX_COLOURS: usize = 256;

/// libdeflate's level for palette indices: on classified tiles 40 % fewer
/// bytes than level 2 at about its speed.
const LEVEL: i32 = 6;

/// A paletted image: its colours and its scanlines, each row preceded by
/// its filter type (always 0, none), as the PNG's image data holds them
/// before deflating.
pub(crate) struct Indexed {
    palette: Vec<[u8; 4]>,
    scanlines: Vec<u8>,
    width: u32,
    height: u32,
}

impl Indexed {
    /// Maps every pixel of `view` to an index by `index_of`, over `palette`.
    pub(crate) fn map(
        view: ImageView<'_>,
        palette: Vec<[u8; 4]>,
        mut index_of: impl FnMut(&[u8]) -> u8,
    ) -> Self {
        let w = view.width() as usize;
        let mut scanlines = Vec::with_capacity((w + 1) * view.height() as usize);
        for row in view.rows() {
            scanlines.push(0);
            scanlines.extend(row.chunks_exact(4).map(&mut index_of));
        }
        Self {
            palette,
            scanlines,
            width: view.width(),
            height: view.height(),
        }
    }
}

/// Slots of the colour table [`exact`] probes: four times the colours it
/// may hold, so probes stay short.
const SLOTS: usize = 4 * MAX_COLOURS;

/// The slot a colour's probe starts at (Fibonacci hashing: the top bits of
/// the product).
fn slot_of(key: u32) -> usize {
    (key.wrapping_mul(0x9E37_79B1) >> (32 - SLOTS.trailing_zeros())) as usize
}

/// `view` as a palette of its exact colours, when it has at most 256;
/// `None` as soon as a 257th colour appears. Every byte is kept, even the
/// colour of fully transparent pixels.
pub(crate) fn exact(view: ImageView<'_>) -> Option<Indexed> {
    // Open addressing with linear probes; runs of one colour skip the table.
    let mut keys = [0u32; SLOTS];
    let mut indices = [u16::MAX; SLOTS];
    let mut palette: Vec<[u8; 4]> = Vec::with_capacity(MAX_COLOURS);
    let w = view.width() as usize;
    let mut scanlines = Vec::with_capacity((w + 1) * view.height() as usize);
    let mut last: Option<(u32, u8)> = None;
    for row in view.rows() {
        scanlines.push(0);
        for p in row.chunks_exact(4) {
            let key = u32::from_le_bytes([p[0], p[1], p[2], p[3]]);
            if let Some((k, i)) = last
                && k == key
            {
                scanlines.push(i);
                continue;
            }
            let mut slot = slot_of(key);
            let index = loop {
                match indices[slot] {
                    u16::MAX => {
                        if palette.len() == MAX_COLOURS {
                            return None;
                        }
                        keys[slot] = key;
                        // Below 256: the palette holds at most 256 here.
                        indices[slot] = palette.len() as u16;
                        palette.push(key.to_le_bytes());
                        break indices[slot] as u8;
                    }
                    i if keys[slot] == key => break i as u8,
                    _ => slot = (slot + 1) % SLOTS,
                }
            };
            last = Some((key, index));
            scanlines.push(index);
        }
    }
    Some(Indexed {
        palette,
        scanlines,
        width: view.width(),
        height: view.height(),
    })
}

thread_local! {
    /// One compressor per thread: libdeflate's state is large enough that
    /// allocating it per tile shows.
    static COMPRESSOR: RefCell<Option<libdeflater::Compressor>> = const { RefCell::new(None) };
}

/// The PNG of `image`: 8-bit indexed colour, a `tRNS` chunk when any colour
/// is not opaque, the scanlines deflated by libdeflate.
pub(crate) fn write(image: &Indexed) -> Result<Vec<u8>, EncodeError> {
    let deflated = COMPRESSOR.with(|cell| {
        let mut cell = cell.borrow_mut();
        let compressor = match cell.as_mut() {
            Some(c) => c,
            None => cell.insert(libdeflater::Compressor::new(
                libdeflater::CompressionLvl::new(LEVEL)
                    .map_err(|e| EncodeError::Deflate(format!("{e:?}")))?,
            )),
        };
        let mut out = vec![0; compressor.zlib_compress_bound(image.scanlines.len())];
        let n = compressor
            .zlib_compress(&image.scanlines, &mut out)
            .map_err(|e| EncodeError::Deflate(e.to_string()))?;
        out.truncate(n);
        Ok::<_, EncodeError>(out)
    })?;
    let mut png = Vec::with_capacity(deflated.len() + image.palette.len() * 4 + 64);
    png.extend_from_slice(b"\x89PNG\r\n\x1a\n");
    let mut header = Vec::with_capacity(13);
    header.extend_from_slice(&image.width.to_be_bytes());
    header.extend_from_slice(&image.height.to_be_bytes());
    // 8 bits, indexed colour, deflate, adaptive filtering, no interlace.
    header.extend_from_slice(&[8, 3, 0, 0, 0]);
    chunk(&mut png, *b"IHDR", &header);
    let plte: Vec<u8> = image
        .palette
        .iter()
        .flat_map(|c| [c[0], c[1], c[2]])
        .collect();
    chunk(&mut png, *b"PLTE", &plte);
    // tRNS may stop at the last colour that is not opaque.
    if let Some(last) = image.palette.iter().rposition(|c| c[3] != 255) {
        let alphas: Vec<u8> = image.palette[..=last].iter().map(|c| c[3]).collect();
        chunk(&mut png, *b"tRNS", &alphas);
    }
    chunk(&mut png, *b"IDAT", &deflated);
    chunk(&mut png, *b"IEND", &[]);
    Ok(png)
}

/// Appends one chunk: length, type, data, CRC of type and data.
fn chunk(out: &mut Vec<u8>, kind: [u8; 4], data: &[u8]) {
    // Chunks here are at most a tile's deflated pixels: far below 2^31.
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(&kind);
    out.extend_from_slice(data);
    let mut crc = crc32fast::Hasher::new();
    crc.update(&kind);
    crc.update(data);
    out.extend_from_slice(&crc.finalize().to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RgbaImage;

    fn decode_rgba(bytes: &[u8]) -> (png::ColorType, Vec<u8>) {
        let mut decoder = png::Decoder::new(std::io::Cursor::new(bytes));
        decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::ALPHA);
        let mut reader = decoder.read_info().unwrap();
        let colour = reader.info().color_type;
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        buf.truncate(info.buffer_size());
        (colour, buf)
    }

    fn image(w: u32, h: u32, colour: impl Fn(u32, u32) -> [u8; 4]) -> RgbaImage {
        let data = (0..h)
            .flat_map(|y| (0..w).map(move |x| (x, y)))
            .flat_map(|(x, y)| colour(x, y))
            .collect();
        RgbaImage::from_raw(w, h, data).unwrap()
    }

    #[test]
    fn at_most_256_colours_round_trip_exactly() {
        // 256 colours, some translucent, one transparent with a colour.
        let img = image(64, 48, |x, y| {
            let c = ((x + 64 * y) % 256) as u8;
            match c {
                0 => [c, 9, 9, 0],
                1..=16 => [c, 0, 0, 128],
                _ => [c, c / 2, 255 - c, 255],
            }
        });
        let indexed = exact(img.view()).expect("256 colours fit");
        let (colour, rgba) = decode_rgba(&write(&indexed).unwrap());
        assert_eq!(colour, png::ColorType::Indexed);
        assert_eq!(rgba, img.as_raw().to_vec());
    }

    #[test]
    fn a_257th_colour_is_refused() {
        let img = image(257, 1, |x, _| [(x % 256) as u8, (x / 256) as u8, 0, 255]);
        assert!(exact(img.view()).is_none());
        let img = image(256, 1, |x, _| [x as u8, 0, 0, 255]);
        assert!(exact(img.view()).is_some());
    }

    #[test]
    fn colours_that_share_a_slot_stay_apart() {
        // 256 colours whose probes all start in the same four slots: each
        // probes past the others and still decodes to itself.
        let crowded: Vec<[u8; 4]> = (0..1u32 << 24)
            .map(|c| {
                let b = c.to_le_bytes();
                [b[0], b[1], b[2], 255]
            })
            .filter(|c| slot_of(u32::from_le_bytes(*c)) < 4)
            .take(MAX_COLOURS)
            .collect();
        assert_eq!(crowded.len(), MAX_COLOURS);
        let img = image(16, 16, |x, y| crowded[(x + 16 * y) as usize]);
        let indexed = exact(img.view()).expect("256 colours");
        let (_, rgba) = decode_rgba(&write(&indexed).unwrap());
        assert_eq!(rgba, img.as_raw().to_vec());
    }

    #[test]
    fn an_opaque_palette_has_no_transparency_chunk() {
        let img = image(8, 8, |x, _| [x as u8 * 30, 0, 0, 255]);
        let png = write(&exact(img.view()).unwrap()).unwrap();
        assert!(!png.windows(4).any(|w| w == b"tRNS"));
    }
}
