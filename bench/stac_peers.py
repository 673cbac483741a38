#!/usr/bin/env python3
"""A registered STAC search served by tessera and by titiler-pgstac, side
by side over the same pgSTAC database and COGs; appends its table to
docs/benchmarks/stac.md (replacing an earlier one).

Data: --scenes RGB COGs (1024 x 1024, DEFLATE, overviews, EPSG:4326,
about 10 m pixels) on a grid where each overlaps its neighbours by half,
with random cloud cover, in a fresh pgSTAC database of the PostGIS test
server. The same search (the collection, clearest first) is registered in
each server (`POST /searches` in tessera, `POST /searches/register` in
titiler-pgstac) and its tiles asked at zooms 12-14 inside the area, each
tile once (cold: never asked before, in either server), at 1 and 8
connections; then the same tiles again (warm: tessera answers from its
cache, titiler-pgstac caches nothing and renders again). Both draw the
first item with data per pixel (`first`), nearest resampling, PNG.
tessera caches in memory with 1 x 1 metatiles (a random tile's 15
neighbours would be rendered for nothing). titiler-pgstac runs under
uvicorn with 2 workers and TCP_NODELAY (bench/titiler_nodelay.py).
Time to first tile: from the registration request to the first tile's
last byte, for a search neither server has seen. Medians of --runs.

Run it with scripts/bench-stac --peers. Never run by CI.
"""
import argparse
import atexit
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

from common import ROOT, curl_pass_hits, ensure_tools, free_port, machine, tessera_process, wait_http, wait_quiet, wrk

PIXEL = 0.0001
SIZE = 1024
WEST, NORTH = 6.0, 49.9
COLS = 6


def sql(dsn, statement, *args):
    import psycopg
    with psycopg.connect(dsn, autocommit=True, options="-c search_path=pgstac,public") as conn:
        cursor = conn.execute(statement, args)
        return cursor.fetchall() if cursor.description else []


def scene(folder, index):
    """Scene `index`: a COG on the half-overlapping grid, and its item."""
    import numpy as np
    from osgeo import gdal
    span = SIZE * PIXEL
    west = WEST + (index % COLS) * span / 2
    north = NORTH - (index // COLS) * span / 2
    mem = gdal.GetDriverByName("MEM").Create("", SIZE, SIZE, 3, gdal.GDT_Byte)
    mem.SetGeoTransform((west, PIXEL, 0, north, 0, -PIXEL))
    mem.SetProjection('GEOGCS["WGS 84",DATUM["WGS_1984",SPHEROID["WGS 84",6378137,298.257223563]],'
                      'PRIMEM["Greenwich",0],UNIT["degree",0.0174532925199433],AUTHORITY["EPSG","4326"]]')
    yy, xx = np.mgrid[0:SIZE, 0:SIZE]
    for b in range(3):
        values = (index * 37 + b * 71 + (xx // 3 + yy // 5) + ((xx * yy) >> 9)) % 256
        mem.GetRasterBand(b + 1).WriteArray(values.astype(np.uint8))
    path = folder / f"scene{index}.tif"
    gdal.Translate(str(path), mem, format="COG", creationOptions=["COMPRESS=DEFLATE", "BLOCKSIZE=512"])
    east, south = west + span, north - span
    return {
        "type": "Feature", "stac_version": "1.0.0", "id": f"scene{index}", "collection": "bench",
        "geometry": {"type": "Polygon", "coordinates": [[[west, south], [east, south], [east, north],
                                                         [west, north], [west, south]]]},
        "bbox": [west, south, east, north],
        "properties": {"datetime": f"2024-06-{1 + index % 28:02d}T10:00:00Z",
                       "eo:cloud_cover": round(random.uniform(0, 100), 2)},
        "assets": {"visual": {"href": str(path), "type": "image/tiff; application=geotiff; profile=cloud-optimized",
                              "roles": ["visual"]}},
        "links": [],
    }


def tile_list(bounds, zooms, count, seed):
    """`count` distinct tiles at `zooms` inside `bounds` (lon/lat), in a
    random order of `seed`."""
    import math
    west, south, east, north = bounds
    rng = random.Random(seed)
    found = set()
    for _ in range(count * 1000):
        if len(found) == count:
            break
        z = rng.choice(zooms)
        n = 2 ** z
        lon, lat = rng.uniform(west, east), rng.uniform(south, north)
        x = int((lon + 180) / 360 * n)
        y = int((1 - math.asinh(math.tan(math.radians(lat))) / math.pi) / 2 * n)
        found.add((z, x, y))
    if len(found) < count:
        raise SystemExit(f"the area holds fewer than {count} tiles at zooms {zooms}: more --scenes or fewer --tiles")
    tiles = sorted(found)
    rng.shuffle(tiles)
    return tiles


def post(url, body, headers=None):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", **(headers or {})})
    with urllib.request.urlopen(request, timeout=120) as r:
        return json.load(r)


def fetch(url):
    with urllib.request.urlopen(url, timeout=300) as r:
        r.read()
        return r.status


class Titiler:
    """titiler-pgstac under uvicorn (2 workers, TCP_NODELAY) on `dsn`."""

    def __init__(self, venv, dsn, workdir):
        self.port = free_port()
        env = {**os.environ, "DATABASE_URL": dsn.replace("postgres://", "postgresql://"),
               "TITILER_PGSTAC_API_DEBUG": "FALSE", "GDAL_CACHEMAX": "200",
               "GDAL_DISABLE_READDIR_ON_OPEN": "EMPTY_DIR", "CPL_VSIL_CURL_ALLOWED_EXTENSIONS": ".tif",
               "VSI_CACHE": "TRUE"}
        self.log = open(workdir / "titiler.log", "w")
        self.proc = subprocess.Popen(
            [f"{venv}/bin/python", str(ROOT / "bench/titiler_nodelay.py"), "--port", str(self.port),
             "--workers", "2", "--app", "titiler.pgstac.main:app"],
            env=env, stdout=self.log, stderr=subprocess.STDOUT)
        wait_http(f"http://127.0.0.1:{self.port}/healthz", 120)

    def register(self, search):
        return post(f"http://127.0.0.1:{self.port}/searches/register", search)["id"]

    def paths(self, search_id, tiles):
        return [f"/searches/{search_id}/tiles/WebMercatorQuad/{z}/{x}/{y}.png?assets=visual" for z, x, y in tiles]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.log.close()


def measure(port, paths, clients):
    """Tiles per second of asking `paths` once each over `clients`
    connections of one curl (a client that costs far less than either
    server), and how many were cache hits; errors stop the benchmark."""
    wait_quiet()
    seconds, hits = curl_pass_hits(f"http://127.0.0.1:{port}", paths, clients)
    return len(paths) / seconds, hits


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--venv", required=True, help="a virtualenv with titiler.pgstac and uvicorn")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--scenes", type=int, default=24)
    ap.add_argument("--tiles", type=int, default=48, help="tiles per connection count and run")
    ap.add_argument("--warm-seconds", type=int, default=10)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks" / "stac.md")
    args = ap.parse_args()
    ensure_tools()
    server = os.environ.get("TESSERA_TEST_PG_URL")
    if not server:
        raise SystemExit("start PostGIS first: scripts/postgis start, then source var/postgis/env")
    random.seed(7)
    work = Path(tempfile.mkdtemp(prefix="tessera-stac-peers-"))
    atexit.register(shutil.rmtree, work, True)  # gigabytes of tiles: never left behind
    name = f"stacpeers_{uuid.uuid4().hex[:8]}"
    sql(server, f"CREATE DATABASE {name}")
    dsn = server.rsplit("/", 1)[0] + "/" + name
    titiler = None
    try:
        subprocess.run([str(Path(sys.executable).with_name("pypgstac")), "migrate", "--dsn", dsn],
                       check=True, capture_output=True, timeout=300)
        items = [scene(work, i) for i in range(args.scenes)]
        xs = [c for i in items for c in (i["bbox"][0], i["bbox"][2])]
        ys = [c for i in items for c in (i["bbox"][1], i["bbox"][3])]
        extent = [min(xs), min(ys), max(xs), max(ys)]
        collection = {"type": "Collection", "stac_version": "1.0.0", "id": "bench", "description": "bench",
                      "license": "proprietary", "links": [],
                      "extent": {"spatial": {"bbox": [extent]},
                                 "temporal": {"interval": [["2024-06-01T00:00:00Z", None]]}}}
        sql(dsn, "SELECT create_collection(%s::jsonb)", json.dumps(collection))
        sql(dsn, "INSERT INTO queryables (name, definition, property_wrapper) "
                 """VALUES ('eo:cloud_cover', '{"type": "number"}', 'to_float')""")
        sql(dsn, "SELECT create_items(%s::jsonb)", json.dumps(items))
        span = SIZE * PIXEL
        inner = (extent[0] + span / 4, extent[1] + span / 4, extent[2] - span / 4, extent[3] - span / 4)
        config = f"""
searches: {{ layer: scenes, public: true, max_searches: 1000 }}
stores: {{ mem: {{ type: memory, memory: 2GiB }} }}
layers:
  - name: scenes
    source: {{ type: stac, pgstac: {dsn}, search: {{ collections: [bench] }}, asset: visual,
               method: first, resampling: nearest }}
    cache: {{ store: mem, metatile: [1, 1] }}
"""
        titiler = Titiler(args.venv, dsn, work)
        results = {}
        # Every tile any run asks, distinct: one first tile (zoom 13) and
        # 2 x --tiles for the two connection counts per run.
        firsts = tile_list(inner, [13], args.runs, 1000)
        pool = [t for t in tile_list(inner, [12, 13, 14, 15], 2 * args.tiles * args.runs + args.runs, 100)
                if t not in firsts][:2 * args.tiles * args.runs]
        if len(pool) < 2 * args.tiles * args.runs:
            raise SystemExit("the area holds too few tiles for --runs x --tiles: more --scenes")
        with tessera_process(args.binary, config, work / "tessera") as (port, _):
            for run in range(args.runs):
                # A search neither server has seen: time to its first tile.
                search = {"collections": ["bench"], "datetime": f"2024-05-{run + 1:02d}T00:00:00Z/2024-07-01T00:00:00Z",
                          "sortby": [{"field": "properties.eo:cloud_cover", "direction": "asc"}]}
                first_tile = firsts[run]
                z, x, y = first_tile
                wait_quiet()
                t0 = time.perf_counter()
                ours = post(f"http://127.0.0.1:{port}/searches", search)["layer"]
                fetch(f"http://127.0.0.1:{port}/tiles/{ours}/WebMercatorQuad/{z}/{x}/{y}.png")
                results.setdefault(("first tile", "tessera"), []).append((time.perf_counter() - t0) * 1000)
                wait_quiet()
                t0 = time.perf_counter()
                theirs = titiler.register(search)
                fetch(f"http://127.0.0.1:{titiler.port}" + titiler.paths(theirs, [first_tile])[0])
                results.setdefault(("first tile", "titiler-pgstac"), []).append((time.perf_counter() - t0) * 1000)
                # Distinct tiles for each connection count (none asked before).
                fresh = pool[run * 2 * args.tiles:(run + 1) * 2 * args.tiles]
                for clients in (1, 8):
                    tiles = fresh[:args.tiles] if clients == 1 else fresh[args.tiles:]
                    mine = [f"/tiles/{ours}/WebMercatorQuad/{z}/{x}/{y}.png" for z, x, y in tiles]
                    cold, hits = measure(port, mine, clients)
                    assert hits == 0, f"{hits} cold tiles were hits"
                    other, _ = measure(titiler.port, titiler.paths(theirs, tiles), clients)
                    # Warm: the same tiles again and again for --warm-seconds
                    # (wrk), every one a hit in tessera, a render in
                    # titiler-pgstac.
                    _, hits = measure(port, mine, clients)
                    assert hits == len(mine), f"only {hits} of {len(mine)} warm tiles were hits"
                    listed = work / f"warm-{run}-{clients}.txt"
                    listed.write_text("\n".join(mine) + "\n")
                    wait_quiet()
                    warm = wrk(f"http://127.0.0.1:{port}", listed, clients, args.warm_seconds)[0]
                    listed.write_text("\n".join(titiler.paths(theirs, tiles)) + "\n")
                    wait_quiet()
                    again = wrk(f"http://127.0.0.1:{titiler.port}", listed, clients, args.warm_seconds)[0]
                    results.setdefault(("again", clients, "titiler-pgstac"), []).append(again)
                    results.setdefault(("cold", clients, "tessera"), []).append(cold)
                    results.setdefault(("warm", clients, "tessera"), []).append(warm)
                    results.setdefault(("cold", clients, "titiler-pgstac"), []).append(other)
                    print(run, clients, f"cold {cold:.1f}/s warm {warm:.1f}/s titiler {other:.1f}/s", flush=True)
        med = {k: statistics.median(v) for k, v in results.items()}
        lines = [
            "## Against titiler-pgstac: one registered search",
            "",
            f"Command: `scripts/bench-stac --peers --runs {args.runs} --scenes {args.scenes} --tiles {args.tiles} "
            f"--warm-seconds {args.warm_seconds}`; "
            f"medians of {args.runs} runs, the machine left to go quiet before each measurement.",
            "",
            machine(),
            "",
            f"Data: {args.scenes} RGB COGs (1024 x 1024, DEFLATE, 512-pixel blocks with overviews, EPSG:4326, "
            "about 10 m pixels, local files), each overlapping its neighbours by half, random cloud cover, in a "
            "fresh pgSTAC 0.9 database; the search: the collection, clearest first, `first` per pixel, nearest "
            f"resampling, PNG. {args.tiles} distinct random tiles at zooms 12-15 inside the area per connection "
            "count and run, each asked once cold (never asked before by either server; one curl process, "
            "`--parallel` over reused connections), then warm: the same tiles cycled for --warm-seconds with wrk (tessera answers from "
            "its cache; titiler-pgstac, which caches nothing, renders them again with its GDAL caches warm); "
            "titiler-pgstac 3.2.0 under uvicorn with 2 workers and TCP_NODELAY (`bench/titiler_nodelay.py`), "
            "tessera with its cache in memory and 1 x 1 metatiles. Tiles/s are medians of the runs; a ratio is "
            "the median of each run's ratio (the two servers measured back to back: this host's speed drifts "
            "between runs).",
            "",
            "| | tessera | titiler-pgstac | ratio |",
            "|---|---:|---:|---:|",
        ]
        def paired(ours, theirs):
            """The median of each run's ratio: the two were measured back
            to back, so a host slowing down between runs moves both."""
            return statistics.median(o / t for o, t in zip(results[ours], results[theirs]))

        for clients in (1, 8):
            ours, theirs = med[("cold", clients, "tessera")], med[("cold", clients, "titiler-pgstac")]
            ratio = paired(("cold", clients, "tessera"), ("cold", clients, "titiler-pgstac"))
            lines.append(f"| cold, {clients} connection{'s' if clients > 1 else ''} | {ours:.1f} tiles/s | "
                         f"{theirs:.1f} tiles/s | {ratio:.1f}x |")
        for clients in (1, 8):
            ours, theirs = med[("warm", clients, "tessera")], med[("again", clients, "titiler-pgstac")]
            ratio = paired(("warm", clients, "tessera"), ("again", clients, "titiler-pgstac"))
            lines.append(f"| warm, {clients} connection{'s' if clients > 1 else ''} (titiler-pgstac renders "
                         f"again) | {ours:.0f} tiles/s | {theirs:.1f} tiles/s | {ratio:.0f}x |")
        ours, theirs = med[("first tile", "tessera")], med[("first tile", "titiler-pgstac")]
        lines.append(f"| time to first tile of a new search | {ours:.0f} ms | {theirs:.0f} ms | "
                     f"{theirs / ours:.1f}x |")
        lines.append("")
        text = args.out.read_text() if args.out.exists() else ""
        head = text.split("## Against titiler-pgstac")[0].rstrip()
        head = head.replace("\nAgainst titiler-pgstac (the issue's goal) is not measured yet.", "").rstrip()
        args.out.write_text(head + "\n\n" + "\n".join(lines))
        print("\n".join(lines))
    finally:
        if titiler:
            titiler.stop()
        sql(server, f"DROP DATABASE {name} WITH (FORCE)")


if __name__ == "__main__":
    sys.exit(main())
