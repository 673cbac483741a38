#!/usr/bin/env python3
"""Items per tile against tile time for a `type: stac` layer over pgSTAC;
writes docs/benchmarks/stac.md.

A fresh pgSTAC database (pypgstac migrate) in the PostGIS test server
(scripts/postgis start) holds 10, 100 and 1000 scenes stacked over the
same area (256 x 256 RGB GeoTIFFs, each shifted by a pixel, random cloud
cover); for each count, tessera (release build, no cache) serves a layer
whose search finds them all, and --tiles tiles of zoom 14 inside the area
are asked once each at 1 connection, with `method: first` (which stops
once the tile is full) and `method: mean` (which reads every item, up to
`max_items`, set here to 1000). Medians of --runs.

Run it with scripts/bench-stac. Never run by CI: it measures, it does not
test.
"""
import argparse
import atexit
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

from common import ROOT, machine, run_load, tessera_process, wait_quiet

PIXEL = 0.0002
SIZE = 256
WEST, NORTH = 6.0, 49.8


def sql(dsn, statement, *args):
    import psycopg
    with psycopg.connect(dsn, autocommit=True, options="-c search_path=pgstac,public") as conn:
        cursor = conn.execute(statement, args)
        return cursor.fetchall() if cursor.description else []


def scene(path, index):
    from osgeo import gdal
    import numpy as np
    ds = gdal.GetDriverByName("GTiff").Create(str(path), SIZE, SIZE, 3, gdal.GDT_Byte, ["TILED=YES"])
    west, north = WEST + (index % 16) * PIXEL, NORTH - (index // 16 % 16) * PIXEL
    ds.SetGeoTransform((west, PIXEL, 0, north, 0, -PIXEL))
    ds.SetProjection('GEOGCS["WGS 84",DATUM["WGS_1984",SPHEROID["WGS 84",6378137,298.257223563]],'
                     'PRIMEM["Greenwich",0],UNIT["degree",0.0174532925199433],AUTHORITY["EPSG","4326"]]')
    for b in range(3):
        ds.GetRasterBand(b + 1).WriteArray(np.full((SIZE, SIZE), (index * 7 + b * 50) % 256, np.uint8))
    ds = None
    east, south = west + SIZE * PIXEL, north - SIZE * PIXEL
    return {
        "type": "Feature", "stac_version": "1.0.0", "id": f"s{index}", "collection": "stack",
        "geometry": {"type": "Polygon", "coordinates": [[[west, south], [east, south], [east, north],
                                                         [west, north], [west, south]]]},
        "bbox": [west, south, east, north],
        "properties": {"datetime": "2024-06-01T10:00:00Z", "eo:cloud_cover": random.uniform(0, 100)},
        "assets": {"visual": {"href": str(path), "type": "image/tiff"}}, "links": [],
    }


def tiles(count, z=14):
    """`count` zoom-z tiles inside the area every scene covers."""
    inner = (WEST + 16 * PIXEL, NORTH - SIZE * PIXEL, WEST + SIZE * PIXEL, NORTH - 16 * PIXEL)
    n = 2 ** z
    col = lambda lon: int((lon + 180) / 360 * n)  # noqa: E731
    row = lambda lat: int((1 - math.asinh(math.tan(math.radians(lat))) / math.pi) / 2 * n)  # noqa: E731
    all_tiles = [(z, x, y) for x in range(col(inner[0]) + 1, col(inner[2])) for y in range(row(inner[3]) + 1,
                                                                                         row(inner[1]))]
    return all_tiles[:count]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tiles", type=int, default=4)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks" / "stac.md")
    args = ap.parse_args()
    server = os.environ.get("TESSERA_TEST_PG_URL")
    if not server:
        raise SystemExit("start PostGIS first: scripts/postgis start, then source var/postgis/env")
    random.seed(1)
    rows = []
    work = Path(tempfile.mkdtemp(prefix="tessera-stac-"))
    atexit.register(shutil.rmtree, work, True)  # gigabytes of tiles: never left behind
    for count in (10, 100, 1000):
        name = f"stacbench_{uuid.uuid4().hex[:8]}"
        sql(server, f"CREATE DATABASE {name}")
        dsn = server.rsplit("/", 1)[0] + "/" + name
        try:
            subprocess.run([str(Path(sys.executable).with_name("pypgstac")), "migrate", "--dsn", dsn],
                           check=True, capture_output=True, timeout=300)
            collection = {"type": "Collection", "stac_version": "1.0.0", "id": "stack", "description": "bench",
                          "license": "proprietary", "links": [],
                          "extent": {"spatial": {"bbox": [[5.9, 49.7, 6.2, 49.9]]},
                                     "temporal": {"interval": [["2024-06-01T00:00:00Z", None]]}}}
            sql(dsn, "SELECT create_collection(%s::jsonb)", json.dumps(collection))
            sql(dsn, "INSERT INTO queryables (name, definition, property_wrapper) "
                     """VALUES ('eo:cloud_cover', '{"type": "number"}', 'to_float')""")
            items = [scene(work / f"{count}-{i}.tif", i) for i in range(count)]
            sql(dsn, "SELECT create_items(%s::jsonb)", json.dumps(items))
            config = f"""
layers:
  - name: first
    source: {{ type: stac, pgstac: {dsn}, search: {{ collections: [stack],
               sortby: [{{ field: properties.eo:cloud_cover, direction: asc }}] }},
               asset: visual, method: first, max_items: 1000, max_seconds: 600 }}
    cache: {{ store: none }}
  - name: mean
    source: {{ type: stac, pgstac: {dsn}, search: {{ collections: [stack] }},
               asset: visual, method: mean, max_items: 1000, max_seconds: 600 }}
    cache: {{ store: none }}
"""
            with tessera_process(args.binary, config, work / f"serve-{count}") as (port, _):
                row = [count]
                for method in ("first", "mean"):
                    paths = [f"/tiles/{method}/WebMercatorQuad/{z}/{x}/{y}.png" for z, x, y in tiles(args.tiles)]
                    times = []
                    for _ in range(args.runs):
                        wait_quiet()
                        seconds, latencies, errors, _ = run_load(port, paths, 1)
                        if errors:
                            raise SystemExit(f"errors: {errors[:3]}")
                        times.append(statistics.median(latencies))
                    row.append(statistics.median(times))
                rows.append(row)
                print(row, flush=True)
        finally:
            sql(server, f"DROP DATABASE {name} WITH (FORCE)")
    lines = [
        "# STAC searches in pgSTAC: items per tile",
        "",
        f"Command: `scripts/bench-stac --runs {args.runs} --tiles {args.tiles}`; medians of {args.runs} runs, "
        "1 connection, no cache, the machine left to go quiet before each.",
        "",
        machine(),
        "",
        "Data: 10, 100 and 1000 RGB scenes (256 x 256 GeoTIFFs, local files) stacked over the same area in a "
        "pgSTAC 0.9 database of the PostGIS test server; each zoom-14 tile asked lies inside every scene. "
        "`first` asks pgSTAC for 8 items at a time (`page`) and stops once the tile is full (here after the clearest scene), so its time does not grow with the items found; `mean` reads every item "
        "(`max_items: 1000`).",
        "",
        "| items over the tile | `first`: median tile time | `mean`: median tile time |",
        "|---:|---:|---:|",
    ]
    for count, first, mean in rows:
        lines.append(f"| {count} | {first:.1f} ms | {mean:.1f} ms |")
    lines.append("")
    # The comparison with titiler-pgstac (bench/stac_peers.py) is kept.
    text = args.out.read_text() if args.out.exists() else ""
    kept = text[text.index("## Against titiler-pgstac"):] if "## Against titiler-pgstac" in text else ""
    args.out.write_text("\n".join(lines) + ("\n" + kept if kept else ""))
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
