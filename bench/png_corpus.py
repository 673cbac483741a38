#!/usr/bin/env python3
"""The tiles of docs/benchmarks/png-size.md, as PNG files in folders for
`cargo bench -p tessera-image --bench png_size -- DIR`:

- `mapserver-nearest/`: 300 random z3-8 tiles of bench/peers.py's COG as
  MapServer's own GetMap PNGs (Debian's `mapserv`, run as a CGI, nearest
  resampling), the bytes to compare with;
- `relief/`, `elevation/`, `landsat/`: the demo layers as tessera draws them
  (up to 400 tiles over each layer's area, five zooms);
- `classes/`: the demo DEM in four classes (`expression` style, intervals);
- `countries/`: Natural Earth countries filled, outlined and labelled.

    var/venv/bin/python bench/png_corpus.py --binary target/release/tessera --out DIR

Never run by CI.
"""
import argparse
import math
import os
import random
import subprocess
import sys
import urllib.request
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).parent))
from common import ROOT, tessera_process  # noqa: E402
import peers  # noqa: E402

DEMO = ROOT / "var" / "demo"


def mapserver_tiles(cog, out, count=300):
    """MapServer's PNGs of `count` random z3-8 tiles (nearest)."""
    out.mkdir(parents=True, exist_ok=True)
    mapfile = peers.mapfile(out, cog)
    mapfile.write_text(mapfile.read_text().replace("RESAMPLE=BILINEAR", "RESAMPLE=NEAREST"))
    conf = out / "mapserver.conf"
    conf.write_text(f'CONFIG\n ENV\n  MS_MAPFILE "{mapfile}"\n END\nEND\n')
    rnd = random.Random(7)
    for _ in range(count):
        z = rnd.randint(3, 8)
        x, y = rnd.randrange(2 ** z), rnd.randrange(2 ** z)
        size = 2 * peers.WORLD / 2 ** z
        minx, maxy = -peers.WORLD + x * size, peers.WORLD - y * size
        qs = (f"SERVICE=WMS&VERSION=1.1.1&REQUEST=GetMap&LAYERS={peers.LAYER}&STYLES=&SRS=EPSG:3857"
              f"&BBOX={minx},{maxy - size},{minx + size},{maxy}&WIDTH=256&HEIGHT=256&FORMAT=image/png")
        env = dict(os.environ, MAPSERVER_CONFIG_FILE=str(conf), REQUEST_METHOD="GET", QUERY_STRING=qs)
        body = subprocess.run(["mapserv", "-nh", f"QUERY_STRING={qs}"], env=env, capture_output=True,
                              check=True).stdout
        (out / f"{z}_{x}_{y}.png").write_bytes(body[body.index(b"\x89PNG"):])


def tiles_over(bbox, zooms):
    """WebMercatorQuad (z, x, y) over a lon/lat box."""
    w, s, e, n = bbox
    for z in zooms:
        def xy(lon, lat):
            x = int((lon + 180) / 360 * 2 ** z)
            y = int((1 - math.asinh(math.tan(math.radians(lat))) / math.pi) / 2 * 2 ** z)
            return min(max(x, 0), 2 ** z - 1), min(max(y, 0), 2 ** z - 1)
        (x0, y0), (x1, y1) = xy(w, n), xy(e, s)
        for x in range(x0, x1 + 1):
            for y in range(y0, y1 + 1):
                yield z, x, y


def tessera_tiles(binary, out, count=400):
    """The demo layers, four classes of the DEM and the countries, as tessera draws them."""
    demo = yaml.safe_load(subprocess.run([binary, "demo-config"], capture_output=True, text=True,
                                         check=True).stdout)
    layers = demo["layers"]
    for layer in layers:
        layer.pop("formats", None)
        layer["source"]["path"] = layer["source"]["path"].replace(
            "/vsimem/tessera-demo/shadedrelief-5400.tif", str(DEMO / "shadedrelief.tif")).replace(
            "/vsimem/tessera-demo/", f"{DEMO}/")
    layers.append({"name": "classes", "source": {"path": str(DEMO / "elev.tif"), "resampling": "nearest"},
                   "style": {"type": "expression", "expression": "b1", "intervals": [
                       {"max": 200, "color": "#1a9850"}, {"min": 200, "max": 300, "color": "#91cf60"},
                       {"min": 300, "max": 400, "color": "#fee08b"}, {"min": 400, "color": "#d73027"}]}})
    layers.append({"name": "countries", "grids": ["WebMercatorQuad"], "source": {
        "type": "vector", "path": str(DEMO / "countries" / "ne_50m_admin_0_countries.shp"),
        "layers": [{"layer": "ne_50m_admin_0_countries", "style": [
            {"fill": "#e8e4d8", "stroke": "#9a9a9a"},
            {"label": {"text": "{NAME}", "size": 11, "color": "#555555",
                       "halo": {"color": "#ffffff", "width": 2}}}]}]}})
    for layer in layers:
        layer["cache"] = {"store": "mem", "metatile": [4, 4], "gutter": 8}
    demo["stores"] = {"mem": {"type": "memory"}}
    demo["server"]["access_log"] = False
    areas = {"relief": ((-180, -85, 180, 85), range(0, 5)),
             "elevation": ((5.74, 49.44, 6.53, 50.19), range(8, 13)),
             "classes": ((5.74, 49.44, 6.53, 50.19), range(8, 13)),
             "landsat": ((-34.91, -8.04, -34.83, -7.95), range(11, 16)),
             "countries": ((-180, -85, 180, 85), range(0, 5))}
    with tessera_process(binary, yaml.safe_dump(demo), out / "tessera") as (port, _):
        for name, (bbox, zooms) in areas.items():
            folder = out / name
            folder.mkdir(parents=True, exist_ok=True)
            for z, x, y in list(tiles_over(bbox, zooms))[:count]:
                url = f"http://127.0.0.1:{port}/tiles/{name}/WebMercatorQuad/{z}/{x}/{y}.png"
                with urllib.request.urlopen(url, timeout=60) as r:
                    (folder / f"{z}_{x}_{y}.png").write_bytes(r.read())


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--binary", required=True, help="tessera, release build")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--data", type=Path, default=Path(os.environ.get("TESSERA_CACHE_DIR",
                                                                       Path.home() / ".cache/tessera")) / "peers-data")
    args = ap.parse_args()
    mapserver_tiles(peers.build_cog(args.data), args.out / "mapserver-nearest")
    tessera_tiles(args.binary, args.out)


if __name__ == "__main__":
    sys.exit(main())
