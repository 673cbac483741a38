//! Paletted PNGs: a view's exact colours when it has at most 256 (lossless:
//! classified rasters, styled vector tiles, low zooms), and the writer of
//! every paletted PNG tessera makes.
//!
//! Palette indices are one byte a pixel, a third of the RGB bytes. At the
//! `fast` effort each row is stored as its difference from the row above
//! (PNG's `Up` filter) and deflated by fdeflate, as the RGB tiles are:
//! then a tile of few colours costs no more CPU than its RGB PNG and takes
//! fewer bytes (half, on classified rasters). At `balanced` and `high`
//! the indices are left unfiltered (they are not intensities) and
//! deflated by libdeflate at levels 6 and 12: half the bytes again, at
//! about three times the CPU (`cargo bench -p tessera-image --bench
//! png_size`, docs/benchmarks/png-size.md).

use std::cell::RefCell;

use crate::ImageView;
use crate::PngCompression;
use crate::encode::EncodeError;

/// Colours a paletted PNG can hold.
pub(crate) const MAX_COLOURS: usize = 256;

/// A paletted image: its colours and its scanlines, each row preceded by
/// its filter type (0, none, until [`write`] filters them), as the PNG's
/// image data holds them before deflating.
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

/// The colours seen so far and their indices: open addressing with
/// linear probes over [`SLOTS`] slots.
struct Colours {
    keys: [u32; SLOTS],
    indices: [u16; SLOTS],
    palette: Vec<[u8; 4]>,
}

impl Colours {
    fn new() -> Self {
        Self {
            keys: [0; SLOTS],
            indices: [u16::MAX; SLOTS],
            palette: Vec::with_capacity(MAX_COLOURS),
        }
    }

    /// The index of `key` (RGBA as a little-endian word), given one if it
    /// is new; `None` when it would be the 257th colour.
    fn index(&mut self, key: u32) -> Option<u8> {
        let mut slot = slot_of(key);
        loop {
            match self.indices[slot] {
                u16::MAX => {
                    let next = self.palette.len();
                    if next == MAX_COLOURS {
                        return None;
                    }
                    self.keys[slot] = key;
                    // Below 256: checked just above.
                    self.indices[slot] = next as u16;
                    self.palette.push(key.to_le_bytes());
                    return Some(next as u8);
                }
                i if self.keys[slot] == key => return Some(i as u8),
                _ => slot = (slot + 1) % SLOTS,
            }
        }
    }
}

/// Every how many pixels [`exact`] first looks, to give up early on a
/// tile of many colours (photographs, relief) without reading it all.
const SAMPLE_STEP: usize = 61;

/// The pixel at `i` of a row, as a little-endian word.
fn key_at(row: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([row[4 * i], row[4 * i + 1], row[4 * i + 2], row[4 * i + 3]])
}

/// `view` as a palette of its exact colours, when it has at most 256;
/// `None` as soon as a 257th colour appears (first among a sparse sample
/// of the pixels, then among all). Every byte is kept, even the colour of
/// fully transparent pixels.
pub(crate) fn exact(view: ImageView<'_>) -> Option<Indexed> {
    let w = view.width() as usize;
    let mut sample = Colours::new();
    let mut at = 0;
    for row in view.rows() {
        while at < w {
            sample.index(key_at(row, at))?;
            at += SAMPLE_STEP;
        }
        at -= w;
    }
    let mut colours = Colours::new();
    let mut scanlines = vec![0u8; (w + 1) * view.height() as usize];
    let (mut last_key, mut last_index) = match view.rows().next() {
        Some(row) if w > 0 => (key_at(row, 0), colours.index(key_at(row, 0))?),
        _ => (0, 0),
    };
    // Each scanline: its filter byte (0, already there), then its indices;
    // runs of one colour skip the table.
    for (row, line) in view.rows().zip(scanlines.chunks_exact_mut(w + 1)) {
        for (p, out) in row.chunks_exact(4).zip(&mut line[1..]) {
            let key = u32::from_le_bytes([p[0], p[1], p[2], p[3]]);
            if key != last_key {
                last_index = colours.index(key)?;
                last_key = key;
            }
            *out = last_index;
        }
    }
    Some(Indexed {
        palette: colours.palette,
        scanlines,
        width: view.width(),
        height: view.height(),
    })
}

thread_local! {
    /// One libdeflate compressor per thread and level: its state is large
    /// enough that allocating it per tile shows.
    static COMPRESSOR: RefCell<Option<(i32, libdeflater::Compressor)>> = const { RefCell::new(None) };
}

/// Rewrites every row of `scanlines` (each `width + 1` bytes, its filter
/// byte first) as its difference from the row above: PNG's `Up` filter.
fn filter_up(scanlines: &mut [u8], width: usize) {
    let line = width + 1;
    // Bottom up, so that the row above is still unfiltered.
    for r in (1..scanlines.len() / line).rev() {
        let (above, below) = scanlines.split_at_mut(r * line);
        let above = &above[(r - 1) * line + 1..];
        let row = &mut below[..line];
        row[0] = 2;
        for (b, a) in row[1..].iter_mut().zip(above) {
            *b = b.wrapping_sub(*a);
        }
    }
}

/// Deflates `data` into a zlib stream with libdeflate at `level`.
fn libdeflate(data: &[u8], level: i32) -> Result<Vec<u8>, EncodeError> {
    COMPRESSOR.with(|cell| {
        let mut cell = cell.borrow_mut();
        let compressor = match cell.as_mut() {
            Some((l, c)) if *l == level => c,
            _ => {
                let lvl = libdeflater::CompressionLvl::new(level)
                    .map_err(|e| EncodeError::Deflate(format!("{e:?}")))?;
                &mut cell.insert((level, libdeflater::Compressor::new(lvl))).1
            }
        };
        let mut out = vec![0; compressor.zlib_compress_bound(data.len())];
        let n = compressor
            .zlib_compress(data, &mut out)
            .map_err(|e| EncodeError::Deflate(e.to_string()))?;
        out.truncate(n);
        Ok(out)
    })
}

/// Deflates `data` into a zlib stream with fdeflate.
fn fdeflate(data: &[u8]) -> Result<Vec<u8>, EncodeError> {
    let deflate = |e: std::io::Error| EncodeError::Deflate(e.to_string());
    let mut compressor =
        fdeflate::Compressor::new(Vec::with_capacity(data.len() / 4)).map_err(deflate)?;
    compressor.write_data(data).map_err(deflate)?;
    compressor.finish().map_err(deflate)
}

/// The PNG of `image`: 8-bit indexed colour, a `tRNS` chunk when any colour
/// is not opaque, the scanlines deflated as `compression` says.
pub(crate) fn write(
    mut image: Indexed,
    compression: PngCompression,
) -> Result<Vec<u8>, EncodeError> {
    let deflated = match compression {
        PngCompression::Fast => {
            filter_up(&mut image.scanlines, image.width as usize);
            fdeflate(&image.scanlines)?
        }
        PngCompression::Balanced => libdeflate(&image.scanlines, 6)?,
        PngCompression::High => libdeflate(&image.scanlines, 12)?,
    };
    let mut png = Vec::with_capacity(deflated.len() + image.palette.len() * 4 + 64);
    png.extend_from_slice(b"\x89PNG\r\n\x1a\n");
    let mut header = Vec::with_capacity(13);
    header.extend_from_slice(&image.width.to_be_bytes());
    header.extend_from_slice(&image.height.to_be_bytes());
    // 8 bits, indexed colour, deflate, filters per row, no interlace.
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
        for effort in [
            PngCompression::Fast,
            PngCompression::Balanced,
            PngCompression::High,
        ] {
            let indexed = exact(img.view()).expect("256 colours fit");
            let (colour, rgba) = decode_rgba(&write(indexed, effort).unwrap());
            assert_eq!(colour, png::ColorType::Indexed);
            assert_eq!(rgba, img.as_raw().to_vec(), "{effort:?}");
        }
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
        let (_, rgba) = decode_rgba(&write(indexed, PngCompression::Fast).unwrap());
        assert_eq!(rgba, img.as_raw().to_vec());
    }

    #[test]
    fn an_opaque_palette_has_no_transparency_chunk() {
        let img = image(8, 8, |x, _| [x as u8 * 30, 0, 0, 255]);
        let png = write(exact(img.view()).unwrap(), PngCompression::Fast).unwrap();
        assert!(!png.windows(4).any(|w| w == b"tRNS"));
    }
}
