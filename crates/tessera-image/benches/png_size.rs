//! PNG bytes against CPU, on real tiles: every PNG under the given folders
//! is decoded to RGBA, then encoded with each way of making a PNG, one
//! thread; prints per way the tiles per second and the mean bytes, and
//! the mean bytes of the files as they were (another server's PNGs, for
//! comparison).
//!
//!     cargo bench -p tessera-image --bench png_size -- DIR...
//!
//! The ways: tessera's encoder as it is (`encode`, a palette for tiles of
//! at most 256 colours), without the palette, and at the `balanced`
//! effort; the `png` crate at zlib
//! levels 1, 2 and 6 with its adaptive filters; and libdeflate at levels
//! 1, 2 and 6 on rows filtered beforehand by the `png` crate's heuristic
//! (libdeflate timed alone: its rows show the least that level costs,
//! filters not counted).

use std::path::{Path, PathBuf};
use std::time::Instant;

use tessera_grid::TileFormat;
use tessera_image::{Color, EncodeOptions, PngCompression, RgbaImage, encode};

fn pngs(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            pngs(&p, out);
        } else if p.extension().is_some_and(|x| x == "png") {
            out.push(p);
        }
    }
}

/// A tile as RGBA and as the bytes it came as.
struct Tile {
    image: RgbaImage,
    file_bytes: usize,
}

fn load(path: &Path) -> Option<Tile> {
    let bytes = std::fs::read(path).ok()?;
    let (w, h) = tessera_image::declared_size(&bytes, TileFormat::Png).ok()?;
    let image = tessera_image::decode(&bytes, w, h).ok()?;
    Some(Tile {
        image,
        file_bytes: bytes.len(),
    })
}

/// Opaque tiles as RGB (as tessera writes them), others as RGBA.
fn samples(image: &RgbaImage) -> (Vec<u8>, png::ColorType, usize) {
    if image.view().is_opaque() {
        let rgb = image
            .as_raw()
            .chunks_exact(4)
            .flat_map(|p| [p[0], p[1], p[2]])
            .collect();
        (rgb, png::ColorType::Rgb, 3)
    } else {
        (image.as_raw().to_vec(), png::ColorType::Rgba, 4)
    }
}

/// The `png` crate at a zlib level, adaptive filters.
fn zlib(image: &RgbaImage, level: u8) -> usize {
    let (data, colour, _) = samples(image);
    let mut out = Vec::new();
    let mut e = png::Encoder::new(&mut out, image.width(), image.height());
    e.set_color(colour);
    e.set_depth(png::BitDepth::Eight);
    e.set_deflate_compression(png::DeflateCompression::Level(level));
    e.set_filter(png::Filter::Adaptive);
    let mut w = e.write_header().expect("header");
    w.write_image_data(&data).expect("pixels");
    w.finish().expect("finish");
    out.len()
}

/// Scanlines filtered as the `png` crate's adaptive heuristic filters
/// them: per row, the filter whose bytes have the least sum of absolute
/// values.
fn filtered(image: &RgbaImage) -> Vec<u8> {
    let (data, _, bpp) = samples(image);
    let row = image.width() as usize * bpp;
    let mut out = Vec::with_capacity(data.len() + image.height() as usize);
    let zero = vec![0u8; row];
    let mut best = vec![0u8; row];
    let mut trial = vec![0u8; row];
    for (r, cur) in data.chunks_exact(row).enumerate() {
        let prev = if r == 0 {
            &zero[..]
        } else {
            &data[(r - 1) * row..r * row]
        };
        let mut best_kind = 0u8;
        let mut best_sum = u64::MAX;
        for kind in 0..5u8 {
            for i in 0..row {
                let a = if i >= bpp { cur[i - bpp] } else { 0 };
                let c = if i >= bpp { prev[i - bpp] } else { 0 };
                let b = prev[i];
                let pred = match kind {
                    0 => 0,
                    1 => a,
                    2 => b,
                    3 => a.midpoint(b),
                    _ => paeth(a, b, c),
                };
                trial[i] = cur[i].wrapping_sub(pred);
            }
            let sum = trial
                .iter()
                .map(|&v| u64::from(v.cast_signed().unsigned_abs()))
                .sum();
            if sum < best_sum {
                (best_sum, best_kind) = (sum, kind);
                best.copy_from_slice(&trial);
            }
        }
        out.push(best_kind);
        out.extend_from_slice(&best);
    }
    out
}

fn paeth(a: u8, b: u8, c: u8) -> u8 {
    let p = i16::from(a) + i16::from(b) - i16::from(c);
    let (pa, pb, pc) = (
        (p - i16::from(a)).abs(),
        (p - i16::from(b)).abs(),
        (p - i16::from(c)).abs(),
    );
    if pa <= pb && pa <= pc {
        a
    } else if pb <= pc {
        b
    } else {
        c
    }
}

fn main() {
    let dirs: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let mut files = Vec::new();
    for d in &dirs {
        pngs(Path::new(d), &mut files);
    }
    files.sort();
    let tiles: Vec<Tile> = files.iter().filter_map(|f| load(f)).collect();
    assert!(!tiles.is_empty(), "no PNG under {dirs:?}");
    #[allow(clippy::cast_precision_loss, reason = "counts far below 2^52")]
    let n = tiles.len() as f64;
    let mean = |total: usize| {
        #[allow(clippy::cast_precision_loss, reason = "counts far below 2^52")]
        let t = total as f64;
        t / n
    };
    let files_mean = mean(tiles.iter().map(|t| t.file_bytes).sum());
    println!(
        "{} tiles from {}; the files as they were: mean {files_mean:.0} B",
        tiles.len(),
        dirs.join(" ")
    );
    let clear = Color([0; 4]);
    let tiles = &tiles;
    let tessera = |options: EncodeOptions| {
        move |i: usize| {
            encode(tiles[i].image.view(), TileFormat::Png, &options, clear)
                .expect("encodes")
                .len()
        }
    };
    let prefiltered: Vec<Vec<u8>> = tiles.iter().map(|t| filtered(&t.image)).collect();
    let libdeflate = |level: i32| {
        let compressor = std::cell::RefCell::new(libdeflater::Compressor::new(
            libdeflater::CompressionLvl::new(level).expect("a libdeflate level"),
        ));
        let prefiltered = &prefiltered;
        move |i: usize| {
            let rows = &prefiltered[i];
            let mut c = compressor.borrow_mut();
            let mut out = vec![0; c.zlib_compress_bound(rows.len())];
            // Signature, IHDR, IDAT and IEND around the deflated rows.
            c.zlib_compress(rows, &mut out).expect("deflates") + 57
        }
    };
    let ways: Vec<(String, Way<'_>)> = vec![
        (
            "tessera (fdeflate, adaptive filters; palette when <= 256 colours)".into(),
            Box::new(tessera(EncodeOptions::default())),
        ),
        (
            "tessera without the palette".into(),
            Box::new(tessera(EncodeOptions {
                png_palette: false,
                ..EncodeOptions::default()
            })),
        ),
        (
            "tessera, png_compression: balanced".into(),
            Box::new(tessera(EncodeOptions {
                png_compression: PngCompression::Balanced,
                ..EncodeOptions::default()
            })),
        ),
        (
            "png crate, zlib level 1".into(),
            Box::new(|i| zlib(&tiles[i].image, 1)),
        ),
        (
            "png crate, zlib level 2".into(),
            Box::new(|i| zlib(&tiles[i].image, 2)),
        ),
        (
            "png crate, zlib level 6".into(),
            Box::new(|i| zlib(&tiles[i].image, 6)),
        ),
        (
            "libdeflate level 1 (deflate alone, filters not timed)".into(),
            Box::new(libdeflate(1)),
        ),
        (
            "libdeflate level 2 (deflate alone, filters not timed)".into(),
            Box::new(libdeflate(2)),
        ),
        (
            "libdeflate level 6 (deflate alone, filters not timed)".into(),
            Box::new(libdeflate(6)),
        ),
    ];
    // Rounds alternate the ways, so a busy moment slows them all alike.
    let mut rates = vec![Vec::new(); ways.len()];
    let mut bytes = vec![0; ways.len()];
    for _ in 0..ROUNDS {
        for (k, (_, way)) in ways.iter().enumerate() {
            let start = Instant::now();
            bytes[k] = (0..tiles.len()).map(way).sum();
            rates[k].push(n / start.elapsed().as_secs_f64());
        }
    }
    println!("| encoder | tiles/s (median of {ROUNDS}) | mean bytes |");
    println!("|---|---:|---:|");
    for (k, (name, _)) in ways.iter().enumerate() {
        rates[k].sort_by(f64::total_cmp);
        println!(
            "| {name} | {:.0} | {:.0} |",
            rates[k][ROUNDS / 2],
            mean(bytes[k])
        );
    }
}

/// One way of making a PNG: the bytes it makes of the tile at an index.
type Way<'a> = Box<dyn Fn(usize) -> usize + 'a>;

/// Rounds over every way; the rate quoted is their median.
const ROUNDS: usize = 5;
