"""Turns criterion's estimates for one of the criterion benches into a
markdown table: `criterion_table.py <criterion dir> subtile|decode|glyphs`.

Each variant is compared with the bench's baseline variant of the same
group, as a ratio of medians from the same run.
"""
import json
import os
import platform
import sys
from datetime import date
from pathlib import Path

BENCHES = {
    "subtile": {
        "title": "Sub-tile PNG encoding: in place from the metatile vs a standalone tile",
        "command": "`scripts/bench-subtile-png` (criterion, `crates/tessera-image/benches/subtile_png.rs`)",
        "about": [
            "A 256x256 tile is encoded (PNG, `fast` compression) from rows of a 1040x1040 metatile",
            "buffer (stride 4160 bytes, offset of tile (1, 2) past an 8-pixel gutter), from a standalone",
            "copy of the same pixels, and by copying the sub-image first. Both paths produce identical",
            "bytes (asserted by the bench and by the unit test `png_of_a_sub_view_is_identical_to_png_of_a_copied_tile`).",
        ],
        "column": "pixels",
        "groups": ("png_opaque", "png_alpha"),
        "variants": ("standalone_tile", "metatile_sub_view", "copy_then_encode"),
        "unit": ("µs", 1e3),
    },
    "decode": {
        "title": "Decoding an upstream's 1040x1040 PNG: tessera against the png crate",
        "command": "`scripts/bench-decode-png` (criterion, `crates/tessera-image/benches/decode_png.rs`)",
        "about": [
            "A 1040x1040 RGBA image (a 4x4 metatile with its gutter, relief-like shading with grain)",
            "deflated at zlib's default level, once without row filters (as MapServer writes its PNGs)",
            "and once with adaptive filters (as libpng and most other encoders do), decoded to RGBA by",
            "tessera's `decode` (8-bit RGB/RGBA inflated whole with libdeflate and unfiltered in place)",
            "and by the `png` crate's streaming decoder, which tessera used before. Both give the same",
            "pixels (asserted by the bench and by the unit tests of `plain_png`).",
        ],
        "column": "row filters",
        "groups": ("decode_unfiltered", "decode_adaptive"),
        "variants": ("png_crate", "tessera"),
        "unit": ("ms", 1e6),
    },
    "glyphs": {
        "title": "MapLibre glyph ranges: made cold against served kept",
        "command": "`scripts/bench-glyphs` (criterion, `crates/tessera-carto/benches/glyphs.rs`)",
        "about": [
            "A glyph range of the bundled Noto Sans Regular (24 px, 3 px border, radius 8), made cold",
            "(every glyph outlined, rasterised and turned into a distance field, the range encoded in",
            "glyphs.proto) and served kept (the bytes made before, as every request after the first",
            "gets them), Latin (U+0000-00FF) and Cyrillic (U+0400-04FF). A cold range's goal is at",
            "most 50 ms; a request after the first costs the lookup (and the HTTP answer around it).",
        ],
        "column": "range",
        "groups": ("range_latin", "range_cyrillic"),
        "variants": ("cold", "kept"),
        "unit": ("µs", 1e3),
    },
}

root, spec = Path(sys.argv[1]), BENCHES[sys.argv[2]]
print(f"# {spec['title']}\n")
print(f"Command: {spec['command']}.")
print(f"Machine: {platform.machine()}, {len(os.sched_getaffinity(0))} cores; {date.today()}.\n")
print("\n".join(spec["about"]) + "\n")
baseline = spec["variants"][0]
print(f"| {spec['column']} | variant | median | vs {baseline} |")
print("|---|---|---:|---:|")
unit, per = spec["unit"]
for group in spec["groups"]:
    est = {}
    for variant in spec["variants"]:
        data = json.loads((root / group / variant / "new" / "estimates.json").read_text())
        est[variant] = data["median"]["point_estimate"] / per
    for variant, value in est.items():
        label = group.split("_", 1)[1]
        digits = 2 if value < 10 else 0 if unit == "µs" else 2
        ratio = value / est[baseline]
        shown = f"{ratio:.3f}" if ratio >= 0.01 else f"{ratio:.1e}"
        print(f"| {label} | {variant} | {value:.{digits}f} {unit} | {shown} |")
