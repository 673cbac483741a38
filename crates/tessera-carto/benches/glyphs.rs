//! MapLibre glyph ranges of the bundled Noto Sans: made cold (every glyph
//! of the range outlined, rasterised at 24 px and turned into a distance
//! field, the range encoded) against served kept (the bytes made before),
//! for the Latin range and the Cyrillic one.
//!
//! Run: `scripts/bench-glyphs` (`cargo bench -p tessera-carto --bench glyphs`).

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use tessera_carto::glyphs::{BUNDLED, FontLibrary, Glyphs};

fn ranges(c: &mut Criterion) {
    for (group, range) in [("range_latin", "0-255"), ("range_cyrillic", "1024-1279")] {
        let mut g = c.benchmark_group(group);
        let kept = Glyphs::new(FontLibrary::bundled(), 16);
        let made = kept
            .range(BUNDLED, range)
            .expect("a range of the bundled font");
        assert!(made.len() > 1000, "a range with glyphs");
        g.bench_function("kept", |b| {
            b.iter(|| {
                black_box(
                    kept.range(black_box(BUNDLED), black_box(range))
                        .expect("a range"),
                )
            });
        });
        g.bench_function("cold", |b| {
            b.iter(|| {
                let fresh = Glyphs::new(FontLibrary::bundled(), 16);
                black_box(
                    fresh
                        .range(black_box(BUNDLED), black_box(range))
                        .expect("a range"),
                )
            });
        });
        g.finish();
    }
}

criterion_group!(benches, ranges);
criterion_main!(benches);
