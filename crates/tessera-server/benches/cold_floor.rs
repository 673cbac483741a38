//! The floor of a cold tile: for each tile of a list, the least work any
//! server must do — read and decode the source blocks the tile covers
//! (GDAL's `RasterIO` over the COG's own overviews, no warp: the COG is
//! in the tile grid), resample to 256 x 256, encode the PNG at tessera's
//! default level — in a tight loop, one dataset opened per thread before
//! the clock starts, no HTTP, no locks, no cache of tiles. Prints the
//! tiles per second and the mean PNG bytes; `bench/cold_floor.py` sets it
//! beside tessera serving the same tiles cold.
//!
//!     cargo bench -p tessera-server --bench cold_floor -- COG TILES THREADS [nearest|bilinear] [pairs]
//!
//! `COG`: a Web Mercator raster covering the whole WebMercatorQuad square
//! (3 bands); `TILES`: a file of `z x y` lines. Each thread takes the next
//! tile of the list; with `pairs`, the next two rows of tiles of a zoom
//! instead, so that the tiles of one 512-pixel block (two rows of two)
//! are read by one thread and its block decoded once, where threads
//! taking tiles in turn decode a block on each of their datasets.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use gdal::Dataset;
use gdal::raster::ResampleAlg;
use tessera_grid::TileFormat;
use tessera_image::{Color, EncodeOptions, RgbaImage, encode};

/// Half the side of the WebMercatorQuad square, in metres.
const HALF: f64 = 20_037_508.342_789_244;
/// Tile side in pixels.
const TILE: usize = 256;

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let [cog, list, threads, rest @ ..] = args.as_slice() else {
        eprintln!("usage: cold_floor COG TILES THREADS [nearest|bilinear] [pairs]");
        std::process::exit(2);
    };
    let threads: usize = threads.parse().expect("THREADS is a number");
    let resampling = match rest.first().map(String::as_str) {
        Some("nearest") => ResampleAlg::NearestNeighbour,
        _ => ResampleAlg::Bilinear,
    };
    let tiles: Vec<(u32, u64, u64)> = std::fs::read_to_string(list)
        .expect("the tile list can be read")
        .lines()
        .filter_map(|l| {
            let mut p = l.split_whitespace().map(str::parse::<u64>);
            match (p.next(), p.next(), p.next()) {
                (Some(Ok(z)), Some(Ok(x)), Some(Ok(y))) => Some((u32::try_from(z).ok()?, x, y)),
                _ => None,
            }
        })
        .collect();
    let bytes = AtomicU64::new(0);
    let next = AtomicU64::new(0);
    // The units threads take: one tile each, or two rows of a zoom.
    let pairs = rest.iter().any(|a| a == "pairs");
    let mut units: Vec<std::ops::Range<usize>> = Vec::new();
    for (i, &(z, _, y)) in tiles.iter().enumerate() {
        match units.last_mut() {
            Some(unit) if pairs && tiles[unit.start].0 == z && tiles[unit.start].2 / 2 == y / 2 => {
                unit.end = i + 1;
            }
            _ => units.push(i..i + 1),
        }
    }
    let datasets: Vec<Dataset> = (0..threads)
        .map(|_| Dataset::open(cog).expect("the COG opens"))
        .collect();
    let start = Instant::now();
    std::thread::scope(|s| {
        for ds in datasets {
            let (tiles, units, bytes, next) = (&tiles, &units, &bytes, &next);
            s.spawn(move || {
                loop {
                    let i =
                        usize::try_from(next.fetch_add(1, Ordering::Relaxed)).unwrap_or(usize::MAX);
                    let Some(unit) = units.get(i) else { break };
                    for &tile in &tiles[unit.clone()] {
                        let png = floor_tile(&ds, tile, resampling);
                        bytes.fetch_add(png.len() as u64, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let seconds = start.elapsed().as_secs_f64();
    #[allow(clippy::cast_precision_loss, reason = "counts far below 2^52")]
    let (n, total) = (tiles.len() as f64, bytes.load(Ordering::Relaxed) as f64);
    println!(
        "{} tiles, {threads} thread(s): {:.1} tiles/s, mean {:.0} B",
        tiles.len(),
        n / seconds,
        total / n
    );
}

/// One tile's PNG: the COG's window of `tile` read and resampled by GDAL,
/// made RGBA and encoded.
fn floor_tile(ds: &Dataset, (z, x, y): (u32, u64, u64), resampling: ResampleAlg) -> Vec<u8> {
    let gt = ds.geo_transform().expect("the COG has a geotransform");
    #[allow(clippy::cast_precision_loss, reason = "tile indices far below 2^52")]
    let (span, x, y) = (2.0 * HALF / f64::from(1u32 << z), x as f64, y as f64);
    let (west, north) = (-HALF + x * span, HALF - y * span);
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "pixel offsets inside the COG"
    )]
    let window = (
        ((west - gt[0]) / gt[1]).round() as isize,
        ((north - gt[3]) / gt[5]).round() as isize,
    );
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "a tile's side in source pixels"
    )]
    let side = (span / gt[1]).round() as usize;
    let mut rgba = vec![255u8; TILE * TILE * 4];
    for b in 0..3 {
        let band = ds.rasterband(b + 1).expect("the COG has 3 bands");
        let read = band
            .read_as::<u8>(window, (side, side), (TILE, TILE), Some(resampling))
            .expect("the window reads");
        for (px, v) in rgba.chunks_exact_mut(4).zip(read.data()) {
            px[b] = *v;
        }
    }
    let image = RgbaImage::from_raw(256, 256, rgba).expect("a 256 x 256 RGBA buffer");
    encode(
        image.view(),
        TileFormat::Png,
        &EncodeOptions::default(),
        Color([255, 255, 255, 255]),
    )
    .expect("the PNG encodes")
}
