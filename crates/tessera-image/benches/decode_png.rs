//! Decoding a 1040x1040 RGBA GetMap answer (a 4x4 metatile with its
//! gutter) with tessera's `decode` against the `png` crate's decoder, which
//! tessera used for every PNG before: once unfiltered, as MapServer writes
//! its PNGs, and once with libpng's adaptive filters, both deflated at zlib's
//! default level.
//!
//! Run: `cargo bench -p tessera-image --bench decode_png`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use tessera_image::decode;

const SIDE: u32 = 1040;

/// Terrain-like shading with grain, like a hillshaded relief map.
fn getmap(filter: png::Filter) -> Vec<u8> {
    let mut pixels = Vec::with_capacity((SIDE * SIDE * 4) as usize);
    let mut seed = 0x2545_F491_4F6C_DD1D_u64;
    for i in 0..SIDE * SIDE {
        let (x, y) = ((i % SIDE) as f32, (i / SIDE) as f32);
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let shade = 128.0 + 60.0 * (x / 37.0).sin() * (y / 53.0).cos() + (seed % 9) as f32;
        pixels.extend_from_slice(&[shade as u8, (shade * 0.8) as u8, (shade * 0.6) as u8, 255]);
    }
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, SIDE, SIDE);
    encoder.set_color(png::ColorType::Rgba);
    encoder.set_depth(png::BitDepth::Eight);
    encoder.set_filter(filter);
    encoder.set_deflate_compression(png::DeflateCompression::Level(6));
    let mut writer = encoder.write_header().expect("header");
    writer.write_image_data(&pixels).expect("data");
    writer.finish().expect("finish");
    out
}

/// The `png` crate's decoding into an RGBA buffer.
fn png_crate(bytes: &[u8]) -> Vec<u8> {
    let mut reader = png::Decoder::new(std::io::Cursor::new(bytes))
        .read_info()
        .expect("header");
    let mut buf = vec![0; reader.output_buffer_size().expect("size")];
    reader.next_frame(&mut buf).expect("frame");
    buf
}

fn bench(c: &mut Criterion) {
    for (name, filter) in [
        ("unfiltered", png::Filter::NoFilter),
        ("adaptive", png::Filter::Adaptive),
    ] {
        let bytes = getmap(filter);
        assert_eq!(
            decode(&bytes, SIDE, SIDE).expect("decode").as_raw(),
            &png_crate(&bytes)[..],
            "both decoders give the same pixels"
        );
        let mut group = c.benchmark_group(format!("decode_{name}"));
        group.bench_function("png_crate", |b| b.iter(|| png_crate(black_box(&bytes))));
        group.bench_function("tessera", |b| {
            b.iter(|| decode(black_box(&bytes), SIDE, SIDE).expect("decode"));
        });
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30);
    targets = bench
}
criterion_main!(benches);
