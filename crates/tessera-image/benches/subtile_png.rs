//! PNG encoding of a tile read in place from a metatile buffer (stride and
//! offset) against encoding a standalone image of the same pixels.
//!
//! Run: `cargo bench -p tessera-image --bench subtile_png`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use tessera_grid::TileFormat;
use tessera_image::{Color, EncodeOptions, RgbaImage, encode};

const TILE: u32 = 256;
const GUTTER: u32 = 8;
const SIDE: u32 = 4 * TILE + 2 * GUTTER;

/// A 4x4 metatile with a gutter: smooth terrain-like shading plus grain, so
/// deflate works about as hard as on a real map tile. With `holes`, a band
/// of transparent pixels forces the RGBA path.
fn metatile(holes: bool) -> RgbaImage {
    let mut img = RgbaImage::transparent(SIDE, SIDE);
    let mut seed = 0x2545_F491_4F6C_DD1D_u64;
    for (i, px) in img.as_raw_mut().chunks_exact_mut(4).enumerate() {
        let (x, y) = ((i as u32 % SIDE) as f32, (i as u32 / SIDE) as f32);
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let grain = (seed % 9) as f32;
        let shade = 128.0 + 60.0 * (x / 37.0).sin() * (y / 53.0).cos() + grain;
        let alpha = if holes && (x + y) as u32 % 300 < 40 {
            0
        } else {
            255
        };
        px.copy_from_slice(&[shade as u8, (shade * 0.8) as u8, (shade * 0.6) as u8, alpha]);
    }
    img
}

fn bench(c: &mut Criterion) {
    let options = EncodeOptions::default();
    let white = Color([255, 255, 255, 255]);
    for (name, holes) in [("opaque", false), ("alpha", true)] {
        let meta = metatile(holes);
        // Tile (1, 2) of the metatile: an interior tile, rows far apart in memory.
        let (x, y) = (GUTTER + TILE, GUTTER + 2 * TILE);
        let view = meta.sub_view(x, y, TILE, TILE).expect("inside");
        let standalone = view.to_image();
        assert_eq!(
            encode(view, TileFormat::Png, &options, white).expect("encode"),
            encode(standalone.view(), TileFormat::Png, &options, white).expect("encode"),
            "the sub-view and the copy encode to the same bytes"
        );
        let mut group = c.benchmark_group(format!("png_{name}"));
        group.bench_function("standalone_tile", |b| {
            b.iter(|| {
                encode(
                    black_box(standalone.view()),
                    TileFormat::Png,
                    &options,
                    white,
                )
            });
        });
        group.bench_function("metatile_sub_view", |b| {
            b.iter(|| encode(black_box(view), TileFormat::Png, &options, white));
        });
        group.bench_function("copy_then_encode", |b| {
            b.iter(|| {
                let copy = black_box(view).to_image();
                encode(copy.view(), TileFormat::Png, &options, white)
            });
        });
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
