#!/usr/bin/env python3
"""Cold tiles with and without paletted PNGs (`encoding.png_palette`),
alternating in one invocation: bench/peers.py's COG and its z0-6 tiles,
tessera cold (an empty file store per run) at 1 and 8 connections; prints
each run's tiles/s and mean stored PNG bytes, and the median of the paired
ratios (palette on / off), which a busy machine disturbs less than the
rates. docs/benchmarks/png-size.md quotes it.

    var/venv/bin/python bench/png_palette_ab.py --binary target/release/tessera [--runs 5]

Never run by CI.
"""
import argparse
import atexit
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import run_load, tessera_process  # noqa: E402
from peers import LAYER, ZOOMS, build_cog, tessera_config, tiles_z  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--binary", required=True, help="tessera, release build")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--data", type=Path, default=Path(os.environ.get("TESSERA_CACHE_DIR",
                                                                       Path.home() / ".cache/tessera")) / "peers-data")
    args = ap.parse_args()
    cog = build_cog(args.data)
    tiles = tiles_z(ZOOMS)
    paths = [f"/tiles/{LAYER}/WebMercatorQuad/{z}/{x}/{y}.png" for z, x, y in tiles]
    work = Path(tempfile.mkdtemp(prefix="tessera-palette-"))
    atexit.register(shutil.rmtree, work, True)  # gigabytes of tiles: never left behind
    rates = {}
    for run in range(args.runs):
        for palette in ("true", "false"):
            for clients in (1, 8):
                d = work / f"{palette}-{run}-{clients}"
                d.mkdir()
                cfg = tessera_config(cog, d / "tiles").replace(
                    "stores:", f"encoding: {{ png_palette: {palette} }}\nstores:")
                with tessera_process(args.binary, cfg, d) as (port, _):
                    secs, _, errors, _ = run_load(port, paths, clients)
                if errors:
                    raise SystemExit(f"{len(errors)} failed requests, first {errors[0]}")
                mean = statistics.mean(f.stat().st_size for f in (d / "tiles").rglob("*.png"))
                rates.setdefault((palette, clients), []).append(len(tiles) / secs)
                print(run, f"png_palette: {palette}", f"{clients} connection(s)",
                      f"{len(tiles) / secs:.1f} tiles/s, mean {mean:.0f} B", flush=True)
    for clients in (1, 8):
        ratios = [a / b for a, b in zip(rates[("true", clients)], rates[("false", clients)])]
        print(f"{clients} connection(s): palette on / off, median of {args.runs} paired runs: "
              f"{statistics.median(ratios):.2f}")


if __name__ == "__main__":
    sys.exit(main())
