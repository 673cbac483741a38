#!/usr/bin/env python3
"""Vector tiles from PostGIS, and the countries drawn as PNG tiles.

Vector tiles: the demo countries and populated places in PostGIS
(scripts/postgis), every WebMercatorQuad tile of zoom 0..Z as one tile of
two layers (countries with name, pop_est and continent; places with name),
requested with `Accept-Encoding: gzip` by wrk for --seconds at 1 and 8
connections, cycling through the tiles:
  - tessera, no cache, the database cutting the tiles (ST_AsMVT), and
    tessera cutting them itself (`mvt.in_database: false`);
  - Martin (cargo install martin, PostGIS only), its tile cache off;
  - the bare ST_AsMVT queries through psql (the lower bound: no HTTP, no
    server), sequential and in 8 psql processes;
  - cache on: tessera's memory store and Martin's own tile cache, both
    warmed with one pass over the tiles first.
Both servers use 8 database connections.

PNG: `tessera seed` of the countries at zoom 0..P (fill and outline as the
MapServer test server's mapfile draws them) against MapServer (CGI behind
lighttpd, scripts/mapserver) answering one 256x256 GetMap per tile, 2
clients; and tessera without cache answering the same tiles one by one.

Each figure is the median of --runs; the tables go to
docs/benchmarks/vector.md. Run it with scripts/bench-vector.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, ensure_tools, free_port, machine, run_load, tessera, wait_http, wrk

HALF = 20037508.342789244
GZIP = {"Accept-Encoding": "gzip"}


def tiles(max_zoom):
    return [(z, x, y) for z in range(max_zoom + 1) for x in range(2 ** z) for y in range(2 ** z)]


def pg_env():
    env = {}
    for line in (ROOT / "var/postgis/env").read_text().splitlines():
        k, v = line.removeprefix("export ").split("=", 1)
        env[k] = v.strip('"')
    return env


def tessera_vector_config(pg, cached, in_database):
    store = "{ type: memory, memory: 1GiB }" if cached else None
    stores = f"stores: {{ mem: {store} }}\n" if cached else ""
    return f"""{stores}layers:
  - name: world
    source:
      type: vector
      path: "{pg}"
      max_connections: 8
      layers:
        - {{ layer: countries, fields: [name, pop_est, continent] }}
        - {{ layer: places, fields: [name] }}
      mvt: {{ in_database: {str(in_database).lower()} }}
    formats: [mvt]
    grids: [WebMercatorQuad]
    cache: {{ store: {'mem' if cached else 'none'} }}
"""


def martin_config(url, port, cache_mb):
    return f"""listen_addresses: "127.0.0.1:{port}"
cache:
  size_mb: {cache_mb}
postgres:
  connection_string: "{url}"
  pool_size: 8
  auto_publish: false
  tables:
    countries:
      schema: public
      table: countries
      srid: 4326
      geometry_column: geom
      geometry_type: MULTIPOLYGON
      properties: {{ name: varchar, pop_est: numeric, continent: varchar }}
    places:
      schema: public
      table: places
      srid: 4326
      geometry_column: geom
      geometry_type: POINT
      properties: {{ name: varchar }}
"""


class Martin:
    def __init__(self, binary, url, cache_mb, work):
        self.port = free_port()
        config = Path(work) / f"martin-{cache_mb}.yaml"
        config.write_text(martin_config(url, self.port, cache_mb))
        self.proc = subprocess.Popen([binary, "--config", str(config)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, env={**os.environ, "RUST_LOG": "warn"})
        wait_http(f"http://127.0.0.1:{self.port}/health")

    def __enter__(self):
        return self.port

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def paths_file(work, name, paths):
    f = Path(work) / f"{name}.txt"
    f.write_text("\n".join(paths) + "\n")
    return f


def measure(port, paths, seconds, connections, warm):
    if warm:
        _, _, errors, _ = run_load(port, paths, 4)
        errors = [e for e in errors if e[1] != 204]
        if errors:
            sys.exit(f"warming failed: {errors[:3]}")
    return wrk(f"http://127.0.0.1:{port}", paths_file(tempfile.gettempdir(), f"p{port}", paths), connections,
               seconds, headers=GZIP)


def st_asmvt_sql(z, x, y):
    """Martin's query shape for one tile of both layers."""
    parts = []
    for table, cols in (("countries", "name, pop_est, continent"), ("places", "name")):
        parts.append(
            f"(SELECT COALESCE(ST_AsMVT(q, '{table}', 4096, 'geom'), ''::bytea) FROM "
            f"(SELECT ST_AsMVTGeom(ST_Transform(geom, 3857), ST_TileEnvelope({z}, {x}, {y}), 4096, 64, true) "
            f"AS geom, {cols} FROM {table} WHERE geom && "
            f"ST_Transform(ST_TileEnvelope({z}, {x}, {y}, margin => 64.0 / 4096), 4326)) q "
            f"WHERE q.geom IS NOT NULL)")
    return f"SELECT length({' || '.join(parts)});"


def bare_queries(env, work, all_tiles, processes):
    """Tiles/s of the ST_AsMVT queries alone, through `processes` psql
    sessions running their share of the tiles one after another."""
    files = []
    for i in range(processes):
        f = Path(work) / f"tiles-{processes}-{i}.sql"
        f.write_text("\n".join(st_asmvt_sql(*t) for t in all_tiles[i::processes]) + "\n")
        files.append(f)
    host, port = "127.0.0.1", env["TESSERA_TEST_PG_URL"].rsplit(":", 1)[1].split("/")[0]
    t0 = time.perf_counter()
    procs = [subprocess.Popen(["psql", "-X", "-q", "-h", host, "-p", port, "-U", "postgres", "-d", "postgres",
                               "-o", "/dev/null", "-f", str(f)], stderr=subprocess.PIPE) for f in files]
    for p in procs:
        _, err = p.communicate()
        if p.returncode != 0 or err:
            sys.exit(f"psql failed: {err.decode()[:500]}")
    return len(all_tiles) / (time.perf_counter() - t0)


def png_config(store):
    stores = f"stores: {{ disk: {{ type: file, path: {store} }} }}\n" if store else ""
    return f"""{stores}layers:
  - name: countries
    source:
      type: vector
      path: {ROOT}/var/demo/countries/ne_50m_admin_0_countries.shp
      style: [{{ fill: "#c8dcb4", stroke: "#3c3c3c", stroke_width: 1 }}]
    formats: [png]
    grids: [WebMercatorQuad]
    cache: {{ store: {'disk' if store else 'none'} }}
"""


def mapserver_url():
    env = dict(line.removeprefix("export ").split("=", 1)
               for line in (ROOT / "var/mapserver/env").read_text().splitlines() if "=" in line)
    return env["TESSERA_TEST_WMS_URL"].strip('"')


def getmap_paths(base, max_zoom):
    """One 256x256 GetMap per tile, as paths of MapServer's URL."""
    from urllib.parse import urlsplit
    u = urlsplit(base)
    out = []
    for z, x, y in tiles(max_zoom):
        size = 2 * HALF / 2 ** z
        bbox = f"{-HALF + x * size},{HALF - (y + 1) * size},{-HALF + (x + 1) * size},{HALF - y * size}"
        q = (f"SERVICE=WMS&VERSION=1.1.1&REQUEST=GetMap&LAYERS=countries&STYLES=&SRS=EPSG:3857&BBOX={bbox}"
             f"&WIDTH=256&HEIGHT=256&FORMAT=image/png&TRANSPARENT=TRUE")
        out.append(f"{u.path}?{u.query + '&' if u.query else ''}{q}")
    return u.port, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--martin", required=True)
    ap.add_argument("--max-zoom", type=int, default=5)
    ap.add_argument("--png-max-zoom", type=int, default=6)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "docs/benchmarks/vector.md"))
    args = ap.parse_args()
    ensure_tools()
    env = pg_env()
    pg, url = env["TESSERA_TEST_PG"], env["TESSERA_TEST_PG_URL"]
    all_tiles = tiles(args.max_zoom)
    tessera_paths = [f"/tiles/world/WebMercatorQuad/{z}/{x}/{y}.mvt" for z, x, y in all_tiles]
    martin_paths = [f"/countries,places/{z}/{x}/{y}" for z, x, y in all_tiles]
    med = statistics.median
    rows = {}

    def record(key, value):
        rows.setdefault(key, []).append(value)
        print(f"{key}: {value:.1f}", flush=True)

    with tempfile.TemporaryDirectory() as work:
        for run in range(args.runs):
            for clients in (1, 8):
                record(("bare", clients), bare_queries(env, work, all_tiles, clients))
                for in_db in (True, False):
                    with tessera(args.binary, tessera_vector_config(pg, False, in_db), work) as port:
                        rate, _, _ = measure(port, tessera_paths, args.seconds, clients, warm=False)
                        record((f"tessera-off-{'db' if in_db else 'here'}", clients), rate)
                with Martin(args.martin, url, 0, work) as port:
                    rate, _, _ = measure(port, martin_paths, args.seconds, clients, warm=False)
                    record(("martin-off", clients), rate)
                with tessera(args.binary, tessera_vector_config(pg, True, True), work) as port:
                    rate, _, _ = measure(port, tessera_paths, args.seconds, clients, warm=True)
                    record(("tessera-on", clients), rate)
                with Martin(args.martin, url, 512, work) as port:
                    rate, _, _ = measure(port, martin_paths, args.seconds, clients, warm=True)
                    record(("martin-on", clients), rate)
            # PNG tiles of the countries.
            store = Path(work) / f"png-{run}"
            cfg = Path(work) / "png.yaml"
            cfg.write_text(png_config(store))
            t0 = time.perf_counter()
            subprocess.run([args.binary, "seed", "--config", str(cfg), "--layer", "countries", "--zoom",
                            f"0..{args.png_max_zoom}", "--threads", "2"], check=True, capture_output=True)
            record(("png-seed", 2), len(tiles(args.png_max_zoom)) / (time.perf_counter() - t0))
            with tessera(args.binary, png_config(""), work) as port:
                paths = [f"/tiles/countries/WebMercatorQuad/{z}/{x}/{y}.png" for z, x, y in tiles(args.png_max_zoom)]
                secs, _, errors, _ = run_load(port, paths, 2)
                if errors:
                    sys.exit(f"tessera PNG tiles failed: {errors[:3]}")
                record(("png-tessera-tiles", 2), len(paths) / secs)
            ms_port, ms_paths = getmap_paths(mapserver_url(), args.png_max_zoom)
            secs, _, errors, _ = run_load(ms_port, ms_paths, 2)
            if errors:
                sys.exit(f"MapServer failed: {errors[:3]}")
            record(("png-mapserver", 2), len(ms_paths) / secs)

    n = len(all_tiles)
    lines = [
        "# Vector tiles from PostGIS, and vector data drawn as PNG",
        "",
        f"`scripts/bench-vector --runs {args.runs} --max-zoom {args.max_zoom} --png-max-zoom {args.png_max_zoom}"
        f" --seconds {args.seconds}` (bench/vector.py). {machine()}",
        "",
        f"Vector tiles: every WebMercatorQuad tile of zoom 0..{args.max_zoom} ({n} tiles) as one tile of the demo",
        "countries (name, pop_est, continent) and populated places (name) in PostGIS 3 / PostgreSQL 15",
        "(`scripts/postgis`), requested by wrk with `Accept-Encoding: gzip`, cycling through the tiles for",
        f"{args.seconds} s; Martin 1.14.0 (`cargo install martin --no-default-features --features postgres`)",
        "serves `/countries,places/{z}/{x}/{y}`. Both use 8 database connections. The bare query is Martin's",
        "ST_AsMVTGeom/ST_AsMVT query shape for the same tile, run by psql (1 or 8 sessions). Medians of",
        f"{args.runs} runs, tiles/s.",
        "",
        "| | 1 client | 8 clients |",
        "|---|---:|---:|",
    ]
    labels = [
        ("bare", "bare ST_AsMVT queries (psql, lower bound of the work)"),
        ("tessera-off-db", "tessera, no cache, PostGIS cuts (`in_database: true`, default)"),
        ("tessera-off-here", "tessera, no cache, tessera cuts (`in_database: false`)"),
        ("martin-off", "Martin, tile cache off (`cache.size_mb: 0`)"),
        ("tessera-on", "tessera, memory store, warm"),
        ("martin-on", "Martin, its tile cache, warm"),
    ]
    for key, label in labels:
        lines.append(f"| {label} | {med(rows[(key, 1)]):.0f} | {med(rows[(key, 8)]):.0f} |")
    ratio = lambda a, b, c: med(rows[(a, c)]) / med(rows[(b, c)])  # noqa: E731
    lines += [
        "",
        "| ratio | 1 client | 8 clients |",
        "|---|---:|---:|",
        f"| cache off: tessera (PostGIS cuts) / Martin | {ratio('tessera-off-db', 'martin-off', 1):.2f} "
        f"| {ratio('tessera-off-db', 'martin-off', 8):.2f} |",
        f"| cache off: tessera cutting / PostGIS cutting | {ratio('tessera-off-here', 'tessera-off-db', 1):.2f} "
        f"| {ratio('tessera-off-here', 'tessera-off-db', 8):.2f} |",
        f"| cache on: tessera / Martin (no cache) | {ratio('tessera-on', 'martin-off', 1):.1f} "
        f"| {ratio('tessera-on', 'martin-off', 8):.1f} |",
        f"| cache on: tessera / Martin (its cache) | {ratio('tessera-on', 'martin-on', 1):.2f} "
        f"| {ratio('tessera-on', 'martin-on', 8):.2f} |",
        "",
        f"PNG tiles of the countries at zoom 0..{args.png_max_zoom} ({len(tiles(args.png_max_zoom))} tiles; fill",
        "and 1-pixel outline as the MapServer test server draws them), tiles/s, medians:",
        "",
        "| | tiles/s |",
        "|---|---:|",
        f"| `tessera seed --threads 2` (4x4 metatiles, file store) | {med(rows[('png-seed', 2)]):.0f} |",
        f"| tessera, no cache, every tile requested once, 2 clients | {med(rows[('png-tessera-tiles', 2)]):.0f} |",
        f"| MapServer CGI, one 256x256 GetMap per tile, 2 clients | {med(rows[('png-mapserver', 2)]):.0f} |",
        "",
        "Raw figures (tiles/s per run):",
        "",
    ]
    for (key, clients), values in sorted(rows.items()):
        lines.append(f"- {key}, {clients} client(s): {', '.join(f'{v:.1f}' for v in values)}")
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
