#!/usr/bin/env python3
"""The GeoServer/GeoWebCache metatile scenarios, on this machine.

1. Direct render with no cache, then a file cache with 0 %, 50 %, 75 % and
   94 % hits (1, 2, 4 and 16 tiles asked of every 4x4 metatile, each
   metatile's tiles asked one after the other by concurrent clients), each
   with the encode pool on (metatile_threads = 2 x cores) and off (0).
   Every scenario starts on an empty cache; renders are read from /metrics
   and duplicates (renders beyond the distinct metatiles) must be 0.
2. Cache-hit throughput over HTTP with many connections: tessera serving a
   seeded file store (with and without its memory LRU) next to nginx serving
   the same files, measured with wrk in the same run.

Run it with scripts/bench-metatile (it builds the release binary and
installs nginx and wrk from Debian when missing).
"""
import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from common import ROOT, ensure_tools, machine, metric, nginx_static, percentile, run_load, tessera, wrk

LAYER = "relief"
ZOOM = 8  # 256 x 256 tiles, 64 x 64 metatiles


def config(store_dir, threads, cached, memory_mb=0):
    store = f"{{ type: file, path: {store_dir}, memory_mb: {memory_mb} }}"
    cache = "{ store: disk }" if cached else "{ store: none }"
    return f"""
server: {{ title: bench }}
cache: {{ metatile_threads: {threads} }}
stores:
  disk: {store}
layers:
  - name: {LAYER}
    source: {{ path: {ROOT}/data/shadedrelief-5400.tif, resampling: bilinear }}
    max_zoom: 8
    formats: [png]
    cache: {cache}
"""


def scenario_paths(per_metatile, requests):
    """`requests` paths: `per_metatile` tiles of each of requests/per_metatile
    metatiles, taken row by row from the middle of zoom 8."""
    metatiles = requests // per_metatile
    side = 64
    start = (side * side - metatiles) // 2
    # Which tiles of the 4x4 block: spread over the block.
    order = [(0, 0), (2, 2), (1, 3), (3, 1), (0, 2), (2, 0), (1, 1), (3, 3),
             (0, 1), (0, 3), (1, 0), (1, 2), (2, 1), (2, 3), (3, 0), (3, 2)]
    paths = []
    for m in range(start, start + metatiles):
        mx, my = m % side, m // side
        for dx, dy in order[:per_metatile]:
            paths.append(f"/tiles/{LAYER}/WebMercatorQuad/{ZOOM}/{mx * 4 + dx}/{my * 4 + dy}.png")
    return paths, metatiles


def run_scenarios(binary, clients, requests, runs, pool_threads):
    rows = []
    cases = [("direct render, no cache", 1, False)] + [
        (f"cache, {hit}% hits ({k} per metatile)", k, True) for k, hit in ((1, 0), (2, 50), (4, 75), (16, 94))
    ]
    for name, k, cached in cases:
        pools = (pool_threads, 0) if cached else (pool_threads,)
        # Pool on and off alternate run by run, so that a drift in the
        # machine's speed falls on both alike.
        results = {pool: ([], [], [], [], []) for pool in pools}
        for run in range(runs):
            for pool in pools:
                rates, p50s, p99s, dups, hit_ratios = results[pool]
                paths, metatiles = scenario_paths(k, requests)
                with tempfile.TemporaryDirectory() as work:
                    with tessera(binary, config(Path(work) / "cache", pool, cached), work) as port:
                        # Warm GDAL's block cache on other tiles (zoom 7) first.
                        run_load(port, [f"/tiles/{LAYER}/WebMercatorQuad/7/{x}/{y}.png"
                                        for x in range(0, 128, 8) for y in range(0, 128, 8)], clients)
                        base = metric(port, f'tessera_metatile_renders_total{{layer="{LAYER}"}}')
                        secs, lat, errors, hits = run_load(port, paths, clients)
                        if errors:
                            raise SystemExit(f"{name}: {len(errors)} failed requests, first {errors[0]}")
                        renders = metric(port, f'tessera_metatile_renders_total{{layer="{LAYER}"}}') - base
                rates.append(len(paths) / secs)
                p50s.append(percentile(lat, 50))
                p99s.append(percentile(lat, 99))
                dups.append(int(renders - (len(paths) if not cached else metatiles)))
                hit_ratios.append(hits / len(paths))
        for pool in pools:
            rates, p50s, p99s, dups, hit_ratios = results[pool]
            row = (name, "-" if not cached else ("on" if pool else "off"), requests, statistics.median(rates),
                   statistics.median(p50s), statistics.median(p99s), statistics.median(hit_ratios), max(dups))
            rows.append(row)
            print(f"{name:36} pool={row[1]:3} {row[3]:8.1f} tiles/s  p50 {row[4]:6.1f} ms  p99 {row[5]:7.1f} ms"
                  f"  hits {row[6]:.0%}  duplicates {row[7]}  runs {[round(r, 1) for r in rates]}", flush=True)
    return rows


def run_hits(binary, connections, seconds, runs):
    ensure_tools()
    rows = []
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        store = work / "cache"
        cfg = work / "seed.yaml"
        cfg.write_text(config(store, 4, True))
        subprocess.run([binary, "seed", "--config", str(cfg), "--layer", LAYER, "--grid", "WebMercatorQuad",
                        "--zoom", "0..6"], check=True, capture_output=True)
        files = sorted(store.glob(f"{LAYER}/WebMercatorQuad/*/*/*.png"))
        paths = [f"/tiles/{p.relative_to(store)}" for p in files]
        paths_file = work / "paths.txt"
        paths_file.write_text("\n".join(paths) + "\n")

        with nginx_static(work, store) as (nginx_port, _):
            servers = [("nginx (static files)", None)] + [
                ("tessera, file store + 1 GiB memory LRU (holds every tile)", 1024),
                ("tessera, file store only", 0),
            ]
            for name, memory in servers:
                results = []
                for _ in range(runs):
                    if memory is None:
                        results.append(wrk(f"http://127.0.0.1:{nginx_port}", paths_file, connections, seconds))
                        continue
                    with tessera(binary, config(store, 4, True, memory), work) as port:
                        wrk(f"http://127.0.0.1:{port}", paths_file, connections, 2)  # warm up
                        results.append(wrk(f"http://127.0.0.1:{port}", paths_file, connections, seconds))
                rate = statistics.median(r[0] for r in results)
                mid = sorted(results, key=lambda r: r[0])[len(results) // 2]
                rows.append((name, len(paths), connections, rate, mid[1], mid[2]))
                print(f"{name:42} {rate:10.0f} req/s  p50 {mid[1]}  p99 {mid[2]}", flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--out", default=str(ROOT / "docs/benchmarks/metatile.md"))
    args = ap.parse_args()
    pool_threads = 2 * os.cpu_count()

    scenario_rows = run_scenarios(args.binary, args.clients, args.requests, args.runs, pool_threads)
    hit_rows = run_hits(args.binary, args.connections, args.seconds, args.runs)

    lines = [
        "# Metatiling: the GeoServer/GeoWebCache scenarios",
        "",
        "Command: `scripts/bench-metatile`",
        "",
        machine(),
        "",
        f"## Render and cache scenarios ({args.clients} clients, medians of {args.runs} runs)",
        "",
        f"Layer: the demo relief (5400x2700 JPEG COG from EPSG:4326), PNG tiles of zoom {ZOOM} in",
        "WebMercatorQuad, 4x4 metatiles with an 8-pixel gutter, a file store with no memory LRU,",
        "render slots = cores. Each scenario starts on an empty cache with GDAL's block cache warmed",
        f"on other tiles; {args.requests} requests, the tiles of one metatile asked one after the",
        f"other by {args.clients} keep-alive clients. Pool on: `metatile_threads = {pool_threads}`;",
        "off: `metatile_threads = 0` (every tile of the metatile encoded and stored before the",
        "response). Duplicates: metatile renders beyond the distinct metatiles asked (direct",
        "render: beyond one per request).",
        "",
        "| scenario | pool | requests | tiles/s | p50 ms | p99 ms | hits | duplicate renders |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, pool, n, rate, p50, p99, hits, dups in scenario_rows:
        lines.append(f"| {name} | {pool} | {n} | {rate:.1f} | {p50:.1f} | {p99:.1f} | {hits:.0%} | {dups} |")
    rate_of = {(name, pool): rate for name, pool, _, rate, *_ in scenario_rows}
    lines += [
        "",
        "Pool on against off, same scenario (runs alternate on and off):",
        "",
        "| scenario | tiles/s on / off |",
        "|---|---:|",
    ]
    for name, pool, *_ in scenario_rows:
        if pool == "on" and (name, "off") in rate_of:
            lines.append(f"| {name} | {rate_of[(name, 'on')] / rate_of[(name, 'off')]:.2f} |")
    lines += [
        "",
        f"## Cache hits over HTTP ({args.connections} connections, wrk, medians of {args.runs} runs of {args.seconds} s)",
        "",
        "The tiles of zoom 0-6 seeded into a file store, every one of them requested in turn,",
        "from nginx serving the store directory as static files and from tessera, in the same run.",
        "wrk runs on the same 2 cores as the server.",
        "",
        "| server | distinct tiles | connections | requests/s | p50 | p99 |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, n, conns, rate, p50, p99 in hit_rows:
        lines.append(f"| {name} | {n} | {conns} | {rate:.0f} | {p50} | {p99} |")
    lines.append("")
    Path(args.out).write_text("\n".join(lines))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
