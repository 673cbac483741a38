"""What a dimension costs (docs/benchmarks/dimensions.md).

1. Seeding: 12 time values of a mosaic (one world GeoTIFF per month, made
   here with GDAL) as one layer with a `time` dimension
   (`tessera seed --dimension time=all`), against the same 12 files as 12
   layers without dimensions seeded one after the other: the dimension
   must cost nothing. Runs alternate; medians.
2. Cache hits: one server holding every tile in its memory LRU; wrk over
   the same tiles of a layer without dimensions and of the dimension layer
   with `?time=` (each value's key parsed and checked per request).
   Runs alternate; medians, and the ratio.
3. Capabilities with 10,000 values: size and time of a WMS 1.3.0 and a
   WMTS GetCapabilities (values listed: max_values 10000).

    python3 bench/dimensions.py --binary target/release/tessera [--max-zoom 5] [--runs 3]
"""
import argparse
import datetime
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
from osgeo import gdal, osr

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import free_port, machine, tessera, wait_http, wrk  # noqa: E402

gdal.UseExceptions()
MONTHS = [f"2024-{m:02d}-01" for m in range(1, 13)]


def world(path, month):
    """A 2048 x 1024 world GeoTIFF in EPSG:4326 whose pattern depends on
    `month` (so tiles differ and PNG encoding does real work)."""
    y, x = np.mgrid[0:1024, 0:2048]
    bands = [(x * (month + 1) // 8) % 256, (y * (month + 3) // 8) % 256, ((x + y) * month // 16) % 256]
    ds = gdal.GetDriverByName("GTiff").Create(str(path), 2048, 1024, 3, gdal.GDT_Byte,
                                              options=["TILED=YES", "COMPRESS=DEFLATE"])
    ds.SetGeoTransform([-180, 360 / 2048, 0, 90, 0, -180 / 1024])
    srs = osr.SpatialReference()
    srs.ImportFromEPSG(4326)
    ds.SetProjection(srs.ExportToWkt())
    for i, b in enumerate(bands, start=1):
        ds.GetRasterBand(i).WriteArray(b.astype(np.uint8))
    ds.FlushCache()


def seed(binary, config, layer, zooms, extra=()):
    start = time.monotonic()
    subprocess.run([binary, "seed", "--config", str(config), "--layer", layer, "--zoom", zooms, *extra],
                   check=True, capture_output=True)
    return time.monotonic() - start


def bench_seed(binary, work, data, max_zoom, runs):
    zooms = f"0..{max_zoom}"
    tiles = sum(4 ** z for z in range(max_zoom + 1)) * len(MONTHS)
    times = {"dimension": [], "layers": []}
    for run in range(runs):
        for kind in (["dimension", "layers"] if run % 2 == 0 else ["layers", "dimension"]):
            cache = work / f"cache-{kind}-{run}"
            config = work / f"seed-{kind}.yaml"
            if kind == "dimension":
                config.write_text(f"""
stores: {{ disk: {{ type: file, path: {cache}, memory_mb: 0 }} }}
layers:
  - name: series
    source: {{ type: mosaic, dir: {data}, glob: '*.tif' }}
    grids: [WebMercatorQuad]
    cache: {{ store: disk }}
    dimensions:
      time: {{ from_path: 'month_(.*)\\.tif' }}
""")
                times[kind].append(seed(binary, config, "series", zooms, ["--dimension", "time=all"]))
            else:
                layers = "".join(f"""
  - name: m{i}
    source: {{ type: mosaic, paths: [{data}/month_{m}.tif] }}
    grids: [WebMercatorQuad]
    cache: {{ store: disk }}
""" for i, m in enumerate(MONTHS))
                config.write_text(f"stores: {{ disk: {{ type: file, path: {cache}, memory_mb: 0 }} }}\nlayers:{layers}")
                times[kind].append(sum(seed(binary, config, f"m{i}", zooms) for i in range(len(MONTHS))))
            print(f"  seed {kind:9} run {run}: {times[kind][-1]:.1f} s", file=sys.stderr)
    med = {k: statistics.median(v) for k, v in times.items()}
    return tiles, med


def bench_hits(binary, work, data, runs, seconds):
    config = f"""
stores: {{ mem: {{ type: memory, memory: 1GiB }} }}
layers:
  - name: plain
    source: {{ type: mosaic, paths: [{data}/month_2024-06-01.tif] }}
    grids: [WebMercatorQuad]
    cache: {{ store: mem }}
  - name: series
    source: {{ type: mosaic, dir: {data}, glob: '*.tif' }}
    grids: [WebMercatorQuad]
    cache: {{ store: mem }}
    dimensions:
      time: {{ from_path: 'month_(.*)\\.tif' }}
server: {{ access_log: false }}
"""
    tiles = [(z, x, y) for z in range(5) for x in range(2 ** z) for y in range(2 ** z)]
    paths = {
        "without": [f"/tiles/plain/WebMercatorQuad/{z}/{x}/{y}.png" for z, x, y in tiles],
        "with ?time=": [f"/tiles/series/WebMercatorQuad/{z}/{x}/{y}.png?time=2024-06-01" for z, x, y in tiles],
    }
    files = {}
    for kind, ps in paths.items():
        files[kind] = work / f"paths-{len(files)}.txt"
        files[kind].write_text("\n".join(ps) + "\n")
    rates = {k: [] for k in paths}
    with tessera(binary, config, work / "hits") as port:
        base = f"http://127.0.0.1:{port}"
        for ps in paths.values():
            for p in ps:  # every tile rendered and held in memory
                urllib.request.urlopen(base + p, timeout=120).read()
        for kind in paths:
            wrk(base, files[kind], 64, 2)  # warm up
        for run in range(runs):
            for kind in (list(paths) if run % 2 == 0 else list(reversed(paths))):
                rate, p50, p99 = wrk(base, files[kind], 64, seconds)
                rates[kind].append(rate)
                print(f"  hits {kind:12} run {run}: {rate:.0f} req/s p50 {p50} p99 {p99}", file=sys.stderr)
    return {k: statistics.median(v) for k, v in rates.items()}


def bench_capabilities(binary, work, data):
    listed = work / "listed"
    listed.mkdir(exist_ok=True)
    start = datetime.datetime(2000, 1, 1)
    # 10,000 hourly values, each the same file (values listed in the config).
    values = "".join(f"\n          - {{ value: '{(start + datetime.timedelta(hours=h)).isoformat()}Z', "
                     f"path: {data}/month_2024-01-01.tif }}" for h in range(10_000))
    config = f"""
stores: {{ mem: {{ type: memory }} }}
layers:
  - name: hourly
    source: {{ path: {data}/month_2024-01-01.tif }}
    grids: [WebMercatorQuad]
    cache: {{ store: mem }}
    dimensions:
      time:
        max_values: 10000
        values:{values}
"""
    out = {}
    (work / "caps").mkdir(exist_ok=True)
    path = work / "caps" / "tessera.yaml"
    path.write_text(config)
    port = free_port()
    started = time.monotonic()
    proc = subprocess.Popen([binary, "serve", "--config", str(path), "--listen", f"127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # Only the default value is opened at start; the others when first asked.
        wait_http(f"http://127.0.0.1:{port}/health", seconds=1800)
        out["server start (10,000 values, the default opened)"] = (0, time.monotonic() - started)
        # A value never asked: its source opened, its tile rendered; then
        # another tile of that value (opened already).
        value = (start + datetime.timedelta(hours=5000)).isoformat() + "Z"
        for name, tile in [("first tile of a value never asked (opened, rendered)", "2/1/1"),
                           ("another tile of that value (its metatile: a hit)", "2/2/1")]:
            t = time.monotonic()
            size = len(urllib.request.urlopen(
                f"http://127.0.0.1:{port}/tiles/hourly/WebMercatorQuad/{tile}.png?time={value}",
                timeout=120).read())
            out[name] = (size, time.monotonic() - t)
        for name, path in [("WMS 1.3.0", "/wms?SERVICE=WMS&REQUEST=GetCapabilities&VERSION=1.3.0"),
                           ("WMTS 1.0.0", "/wmts?SERVICE=WMTS&REQUEST=GetCapabilities&VERSION=1.0.0")]:
            times, size = [], 0
            for _ in range(5):
                t = time.monotonic()
                size = len(urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=120).read())
                times.append(time.monotonic() - t)
            out[name] = (size, statistics.median(times))
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--work", default="/tmp/tessera-bench-dimensions")
    ap.add_argument("--max-zoom", type=int, default=5)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--parts", default="seed,hits,caps", help="which parts to run (comma-separated)")
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    work = Path(args.work)
    data = work / "data"
    data.mkdir(parents=True, exist_ok=True)
    for i, m in enumerate(MONTHS):
        if not (data / f"month_{m}.tif").exists():
            world(data / f"month_{m}.tif", i + 1)
    print(machine())
    print()
    if "seed" in parts:
        print_seed(args, *bench_seed(args.binary, work, data, args.max_zoom, args.runs))
    if "hits" in parts:
        print_hits(args, bench_hits(args.binary, work, data, args.runs, args.seconds))
    if "caps" in parts:
        print_caps(bench_capabilities(args.binary, work, data))


def print_seed(args, tiles, seeded):
    print(f"| seeding 12 values, z0-{args.max_zoom} ({tiles} tiles) | seconds (median of {args.runs}) | tiles/s |")
    print("| --- | --- | --- |")
    print(f"| one layer, `time` dimension, `--dimension time=all` | {seeded['dimension']:.1f} | {tiles / seeded['dimension']:.0f} |")
    print(f"| 12 layers without dimensions, one after the other | {seeded['layers']:.1f} | {tiles / seeded['layers']:.0f} |")
    print(f"| ratio (dimension / layers, time) | {seeded['dimension'] / seeded['layers']:.2f} | |")
    print()


def print_hits(args, hits):
    print(f"| cache hits, memory LRU, 64 connections, z0-4 | req/s (median of {args.runs}) |")
    print("| --- | --- |")
    for k, v in hits.items():
        print(f"| {k} | {v:.0f} |")
    print(f"| ratio (with / without) | {hits['with ?time='] / hits['without']:.2f} |")
    print()


def print_caps(caps):
    print("| capabilities, 10,000 values listed | bytes | seconds (median of 5) |")
    print("| --- | --- | --- |")
    for k, (size, secs) in caps.items():
        print(f"| {k} | {size} | {secs:.3f} |")


if __name__ == "__main__":
    main()
