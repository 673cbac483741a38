"""Turns criterion's estimates for the sub-tile PNG bench into a markdown table.

Each variant is compared with `standalone_tile` of the same group, as a ratio
of medians from the same run.
"""
import json
import platform
import sys
from datetime import date
from pathlib import Path

root = Path(sys.argv[1])
print("# Sub-tile PNG encoding: in place from the metatile vs a standalone tile\n")
print("Command: `scripts/bench-subtile-png` (criterion, `crates/tessera-image/benches/subtile_png.rs`).")
print(f"Machine: {platform.machine()}, {len(__import__('os').sched_getaffinity(0))} cores; {date.today()}.\n")
print("A 256x256 tile is encoded (PNG, `fast` compression) from rows of a 1040x1040 metatile")
print("buffer (stride 4160 bytes, offset of tile (1, 2) past an 8-pixel gutter), from a standalone")
print("copy of the same pixels, and by copying the sub-image first. Both paths produce identical")
print("bytes (asserted by the bench and by the unit test `png_of_a_sub_view_is_identical_to_png_of_a_copied_tile`).\n")
print("| pixels | variant | median | vs standalone |")
print("|---|---|---:|---:|")
for group in ("png_opaque", "png_alpha"):
    est = {}
    for variant in ("standalone_tile", "metatile_sub_view", "copy_then_encode"):
        data = json.loads((root / group / variant / "new" / "estimates.json").read_text())
        est[variant] = data["median"]["point_estimate"] / 1e3  # ns -> µs
    base = est["standalone_tile"]
    for variant, us in est.items():
        print(f"| {group.removeprefix('png_')} | {variant} | {us:.0f} µs | {us / base:.3f} |")
