"""NDVI tiles: tessera's band math (`style: {type: expression}`) against
TiTiler's `expression=` on the same 4-band COG (docs/benchmarks/band_math.md).

The COG: 4096x4096 pixels, 4 UInt16 bands (red in 3, near infrared in 4),
DEFLATE, internal overviews, in Web Mercator, covering one zoom-4 tile so
that zoom 8 reads it at its own resolution. Both servers render every tile
(TiTiler has no cache; tessera's layer has `store: none`), as PNG through
RdYlGn over [-1, 1]. A pass asks every tile of zoom 8 (256) and of zoom 6
(16) once with curl, 8 transfers at a time; tiles/s, median of the runs,
servers alternating. TiTiler runs under uvicorn with 2 workers (as many as
the cores), as in bench/peers.py.

    scripts/bench-peers sets up the venv; then
    python3 bench/band_math.py --binary target/release/tessera --venv $TESSERA_CACHE_DIR/peers-venv [--runs 3]
"""
import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import urllib.parse
from pathlib import Path

import numpy as np
from osgeo import gdal, osr

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import curl_pass, free_port, machine, wait_http  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SIZE = 4096
WORLD = 20037508.342789244
# Zoom-4 tile (8, 5): 16x16 tiles at zoom 8.
X0, Y0 = -WORLD + 8 * (2 * WORLD / 16), WORLD - 5 * (2 * WORLD / 16)
SPAN = 2 * WORLD / 16
EXPRESSION = "(b4 - b3) / (b4 + b3)"


def make_cog(work):
    cog = work / "scene-cog.tif"
    if cog.exists():
        return cog
    raw = work / "scene.tif"
    ds = gdal.GetDriverByName("GTiff").Create(str(raw), SIZE, SIZE, 4, gdal.GDT_UInt16,
                                              ["TILED=YES", "COMPRESS=DEFLATE"])
    ds.SetGeoTransform((X0, SPAN / SIZE, 0, Y0, 0, -SPAN / SIZE))
    srs = osr.SpatialReference()
    srs.ImportFromEPSG(3857)
    ds.SetProjection(srs.ExportToWkt())
    rng = np.random.default_rng(5)
    for row in range(0, SIZE, 512):
        y, x = np.mgrid[row:row + 512, 0:SIZE]
        red = 800 + 600 * np.sin(x / 150.0) + rng.uniform(0, 200, (512, SIZE))
        nir = 1500 + 1200 * np.cos(y / 90.0) + rng.uniform(0, 300, (512, SIZE))
        for i, band in enumerate([red * 0.6, red * 0.8, red, nir], start=1):
            ds.GetRasterBand(i).WriteArray(band.astype(np.uint16), 0, row)
    ds = None
    subprocess.run(["gdal_translate", "-q", "-of", "COG", "-co", "COMPRESS=DEFLATE", "-co", "OVERVIEWS=AUTO",
                    str(raw), str(cog)], check=True)
    raw.unlink()
    return cog


@contextlib.contextmanager
def process(args, health, env=None, cwd=None):
    proc = subprocess.Popen([str(a) for a in args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "TESSERA_LOG": "warn", **(env or {})}, cwd=cwd)
    try:
        wait_http(health, seconds=120)
        yield
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def tessera(binary, work, cog):
    port = free_port()
    cfg = work / "band-math.yaml"
    cfg.write_text(f"""
server: {{ access_log: false }}
layers:
  - name: ndvi
    source: {{ path: {cog} }}
    style: {{ type: expression, expression: "{EXPRESSION}", rescale: [-1, 1], colormap: rdylgn }}
    grids: [WebMercatorQuad]
    formats: [png]
    max_zoom: 10
    cache: {{ store: none }}
""")
    return port, process([binary, "serve", "--config", cfg, "--listen", f"127.0.0.1:{port}"],
                         f"http://127.0.0.1:{port}/health")


def titiler(venv, work):
    port = free_port()
    cmd = [f"{venv}/bin/python", ROOT / "bench/titiler_nodelay.py", "--port", port, "--workers", "2"]
    env = {"GDAL_CACHEMAX": "256", "GDAL_DISABLE_READDIR_ON_OPEN": "EMPTY_DIR"}
    return port, process(cmd, f"http://127.0.0.1:{port}/healthz", env=env, cwd=work)


def tiles():
    out = []
    for z, n in ((8, 16), (6, 4)):
        x0, y0 = 8 * n, 5 * n
        out += [(z, x0 + i, y0 + j) for i in range(n) for j in range(n)]
    return out


def paths(kind, cog):
    if kind == "tessera":
        return [f"/tiles/ndvi/WebMercatorQuad/{z}/{x}/{y}.png" for z, x, y in tiles()]
    query = urllib.parse.urlencode({"url": str(cog), "expression": EXPRESSION, "rescale": "-1,1",
                                    "colormap_name": "rdylgn"})
    return [f"/cog/tiles/WebMercatorQuad/{z}/{x}/{y}.png?{query}" for z, x, y in tiles()]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--binary", required=True)
    ap.add_argument("--venv", required=True, help="virtualenv with titiler.application and uvicorn")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--work", default="/tmp/tessera-bench-band-math")
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    cog = make_cog(work)
    rates = {"tessera": [], "TiTiler": []}
    n = len(tiles())
    for r in range(args.runs):
        for kind in (["tessera", "TiTiler"] if r % 2 == 0 else ["TiTiler", "tessera"]):
            port, running = tessera(args.binary, work, cog) if kind == "tessera" else titiler(args.venv, work)
            with running:
                base = f"http://127.0.0.1:{port}"
                ps = paths(kind, cog)
                curl_pass(base, ps[-1:])  # opened once before timing
                secs = curl_pass(base, ps)
                rates[kind].append(n / secs)
                print(f"  {kind:8} run {r}: {n} tiles in {secs:.2f} s, {n / secs:.1f} tiles/s", file=sys.stderr)
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(machine())
    print()
    print(f"| NDVI tiles, {n} (z8 native, z6 overviews), curl 8 parallel | tiles/s (median of {args.runs}) |")
    print("| --- | --- |")
    for kind, rate in med.items():
        print(f"| {kind} | {rate:.1f} |")
    print(f"| ratio tessera / TiTiler | {med['tessera'] / med['TiTiler']:.2f} |")


if __name__ == "__main__":
    main()
