#!/usr/bin/env python3
"""Cold tiles of a COG cut in the tile grid (issue 61, part 2); writes
docs/benchmarks/cog-tiles.md.

The data: bench/peers.py's 16384 x 16384 Web Mercator relief rewritten
by GDAL's COG driver with `TILING_SCHEME=GoogleMapsCompatible` (256-pixel
JPEG blocks, quality 85, overviews: zooms 3-6 are its levels). The tiles:
every tile of zooms 3-6 (5440), shuffled with a fixed seed.

1. `.jpg` tiles, no cache: the COG's blocks passed through, against the
   same tiles from a PMTiles archive (made from those blocks, `pmtiles
   convert`), both uncached layers of the same tessera, wrk cycling over
   the list (every request reads its source), 1 and 8 connections.
2. `.png` tiles, cold (an empty file store, a Python client): the COG's
   own pixels read alone, against a baseline tessera binary
   (`--baseline`, the same server before the change: 4 x 4 metatiles cut
   from RasterIO windows), 1 and 8 connections; once over every tile,
   and once over a sparse sample (one tile of each 4 x 4 metatile, as
   random visits to a large map ask).

Medians of --runs, the two sides alternating within each run. Never run
by CI; run it with scripts/bench-cog-tiles.
"""
import argparse
import atexit
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common import ROOT, machine, run_load, tessera_process, wait_quiet, wrk

sys.path.insert(0, str(Path(__file__).parent))
from peers import build_cog  # noqa: E402

ZOOMS = range(3, 7)


def grid_cog(data):
    """The peers' COG rewritten in the grid's tiles (cached in `data`)."""
    out = data / "relief16k-gm.tif"
    if not out.exists():
        subprocess.run(["gdal_translate", "-q", "-of", "COG", "-co", "TILING_SCHEME=GoogleMapsCompatible",
                        "-co", "COMPRESS=JPEG", "-co", "QUALITY=85", "-co", "RESAMPLING=bilinear",
                        str(build_cog(data)), str(out)], check=True)
    return out


def tiles():
    listed = [(z, x, y) for z in ZOOMS for x in range(2 ** z) for y in range(2 ** z)]
    random.Random(61).shuffle(listed)
    return listed


def config(cog, store, pmtiles=None):
    archive = f"""
  - name: archive
    source: {{ type: pmtiles, path: {pmtiles} }}
    formats: [jpeg]
    cache: {{ store: none }}""" if pmtiles else ""
    return f"""
server: {{ title: cog, access_log: false }}
stores:
  disk: {{ type: file, path: {store} }}
layers:
  - name: cog
    source: {{ path: {cog}, resampling: bilinear }}
    grids: [WebMercatorQuad]
    max_zoom: 6
    formats: [png, jpeg]
    cache: {{ store: disk, metatile: [4, 4], gutter: 8 }}
  - name: blocks
    source: {{ path: {cog}, resampling: bilinear }}
    grids: [WebMercatorQuad]
    max_zoom: 6
    formats: [jpeg]
    cache: {{ store: none }}{archive}
"""


def make_pmtiles(binary, pmtiles_bin, cog, listed, work):
    """The COG's blocks as tessera passes them through, in an MBTiles
    converted by go-pmtiles."""
    mbtiles, out = work / "blocks.mbtiles", work / "blocks.pmtiles"
    db = sqlite3.connect(mbtiles)
    db.executescript("""
        CREATE TABLE metadata (name TEXT, value TEXT);
        CREATE TABLE tiles (zoom_level INTEGER, tile_column INTEGER, tile_row INTEGER, tile_data BLOB);
        INSERT INTO metadata VALUES ('name', 'blocks'), ('format', 'jpg'), ('minzoom', '3'), ('maxzoom', '6'),
            ('bounds', '-180,-85.0511,180,85.0511');
    """)
    import http.client
    with tessera_process(binary, config(cog, work / "unused"), work) as (port, _):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        for z, x, y in listed:
            conn.request("GET", f"/tiles/blocks/WebMercatorQuad/{z}/{x}/{y}.jpg")
            r = conn.getresponse()
            body = r.read()
            if r.status != 200:
                raise SystemExit(f"tile {z}/{x}/{y}: {r.status}")
            db.execute("INSERT INTO tiles VALUES (?, ?, ?, ?)", (z, x, 2 ** z - 1 - y, body))
    db.commit()
    db.close()
    subprocess.run([pmtiles_bin, "convert", str(mbtiles), str(out)], check=True, capture_output=True)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True, help="tessera, release build")
    ap.add_argument("--baseline", required=True, help="tessera before the change, release build")
    ap.add_argument("--pmtiles", required=True, help="go-pmtiles (scripts/go-pmtiles)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=10, help="each wrk measurement")
    ap.add_argument("--data", type=Path, default=Path.home() / ".cache/tessera/peers-data")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks" / "cog-tiles.md")
    args = ap.parse_args()
    cog = grid_cog(args.data)
    listed = tiles()
    seen, sparse = set(), []
    for z, x, y in listed:
        if (z, x // 4, y // 4) not in seen:
            seen.add((z, x // 4, y // 4))
            sparse.append((z, x, y))
    work = Path(tempfile.mkdtemp(prefix="tessera-cog-"))
    atexit.register(shutil.rmtree, work, True)  # gigabytes of tiles: never left behind
    pmtiles = make_pmtiles(args.binary, args.pmtiles, cog, listed, work)
    jpg_paths = work / "jpg.txt"
    rows = {}
    for run in range(args.runs):
        # 1. Blocks passed through against the PMTiles archive.
        for clients in (1, 8):
            for layer in ("blocks", "archive"):
                jpg_paths.write_text("".join(f"/tiles/{layer}/WebMercatorQuad/{z}/{x}/{y}.jpg\n"
                                             for z, x, y in listed))
                wait_quiet()
                d = work / f"jpg-{run}-{clients}-{layer}"
                d.mkdir()
                with tessera_process(args.binary, config(cog, d / "tiles", pmtiles), d) as (port, _):
                    rate, p50, p99 = wrk(f"http://127.0.0.1:{port}", jpg_paths, clients, args.seconds)
                rows.setdefault((layer, clients), []).append(rate)
                print(run, layer, clients, f"{rate:.0f} tiles/s p50 {p50} p99 {p99}", flush=True)
        # 2. PNG: own pixels read alone against the baseline's metatiles.
        for sample, chosen in (("all", listed), ("sparse", sparse)):
            for clients in (1, 8):
                for side, binary in (("alone", args.binary), ("baseline", args.baseline)):
                    wait_quiet()
                    d = work / f"png-{run}-{sample}-{clients}-{side}"
                    d.mkdir()
                    with tessera_process(binary, config(cog, d / "tiles"), d) as (port, _):
                        secs, _, errors, hits = run_load(port, [f"/tiles/cog/WebMercatorQuad/{z}/{x}/{y}.png"
                                                                for z, x, y in chosen], clients)
                    if errors:
                        raise SystemExit(f"{side}: {len(errors)} failed requests, first {errors[0]}")
                    rows.setdefault((side, sample, clients), []).append(len(chosen) / secs)
                    if sample == "all":
                        sizes = [f.stat().st_size for f in (d / "tiles").rglob("*.png")]
                        rows.setdefault((side, "bytes"), []).append(statistics.mean(sizes))
                    print(run, side, sample, clients, f"{len(chosen) / secs:.0f} tiles/s ({hits} hits)", flush=True)
    med = {k: statistics.median(v) for k, v in rows.items()}
    lines = [
        "# Cold tiles of a COG in the tile grid",
        "",
        f"Command: `scripts/bench-cog-tiles --runs {args.runs}` (the baseline: tessera built from the commit "
        "before the change); medians of "
        f"{args.runs} runs, the machine left to go quiet before each measurement.",
        "",
        machine(),
        "",
        f"Data: the 16384 x 16384 Web Mercator relief of bench/peers.py rewritten by GDAL's COG driver with "
        "`TILING_SCHEME=GoogleMapsCompatible` (256-pixel JPEG blocks, quality 85; zooms 3-6 are its levels, "
        f"`tessera check` says so). Tiles: all {len(listed)} tiles of zooms 3-6, shuffled.",
        "",
        "## `.jpg`: blocks passed through, against a PMTiles archive of the same tiles",
        "",
        f"Both uncached layers of one tessera; wrk cycling over the list for {args.seconds} s, so every "
        "request reads its source (from the page cache).",
        "",
        "| connections | COG blocks (tiles/s) | PMTiles (tiles/s) | COG / PMTiles |",
        "|---:|---:|---:|---:|",
    ]
    for clients in (1, 8):
        b, a = med[("blocks", clients)], med[("archive", clients)]
        lines.append(f"| {clients} | {b:.0f} | {a:.0f} | {b / a:.2f} |")
    lines += [
        "",
        "## `.png`: the COG's own pixels read alone, against the baseline's metatiles",
        "",
        "Cold: an empty file store, a Python client on keep-alive connections; the baseline cuts 4 x 4 "
        "metatiles (8-pixel gutter) from RasterIO windows and stores all 16 tiles. *All*: one pass over every "
        f"tile; *sparse*: one tile of each metatile ({len(sparse)} tiles), as random visits to a large map ask.",
        "",
        "| tiles | connections | read alone (tiles/s) | baseline (tiles/s) | alone / baseline |",
        "|---|---:|---:|---:|---:|",
    ]
    for sample in ("all", "sparse"):
        for clients in (1, 8):
            n, b = med[("alone", sample, clients)], med[("baseline", sample, clients)]
            lines.append(f"| {sample} | {clients} | {n:.0f} | {b:.0f} | {n / b:.2f} |")
    lines += [
        "",
        f"Mean PNG bytes: {med[('alone', 'bytes')]:.0f} read alone, {med[('baseline', 'bytes')]:.0f} baseline.",
        "",
        "A block passed through costs a lookup of its offset, one read through GDAL's virtual file system "
        "(a seek and a read on a handle kept open) and the completeness check; a PMTiles tile, one read of an "
        "archive held open. Read alone, a PNG tile does only its own work (one block decoded, one PNG), where a metatile "
        "decodes and encodes 16 tiles for the one asked: on random visits it is several times faster. On a pass "
        "over every tile with one connection the metatile keeps the second core busy encoding the siblings the "
        "next requests will hit, which a tile read alone cannot; with 8 connections both use both cores.",
        "",
    ]
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
