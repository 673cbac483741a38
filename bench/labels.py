"""Labelled places and countries, every tile of zooms 0 to 6 (5,461):
tessera's seed against MapServer drawing the same labels in its own tile
mode (docs/benchmarks/labels.md).

The same data (the demo countries and cities), the same symbols and the
same font (tessera's bundled Noto Sans, which scripts/mapserver gives
MapServer): countries filled and outlined with their names, cities as red
dots with their names above, halos. tessera seeds the layer with `tessera
seed --threads 2` (metatiles of 4x4, labels placed per metatile) into a
file store; MapServer renders each tile alone (`mode=tile`, its labels
kept off the tile's edges), asked once by one curl process 2 transfers at
a time from MapServer under FastCGI with 2 processes (as many as the
cores). A third row seeds the same layer without labels, for what labels
cost. Tiles/s and the bytes of all tiles; medians of the runs, alternating.

    scripts/mapserver start --fastcgi 2 && source var/mapserver/env
    python3 bench/labels.py --binary target/release/tessera [--runs 3]
"""
import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from osgeo import gdal

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
COUNTRIES = ROOT / "var/demo/countries/ne_50m_admin_0_countries.shp"
PLACES = ROOT / "var/demo/places/naturalearth_cities.shp"
MAX_ZOOM = 6


def layer_yaml(gpkg, labels):
    country = ('\n            - label: { text: "{NAME}", size: 11, color: "#555555", '
               'halo: { color: "#ffffff", width: 2 }, priority: POP_EST }') if labels else ""
    place = ('\n            - label: { text: "{name}", size: 12, halo: { width: 2 }, priority: 1e12, '
             'offset: [0, -9] }') if labels else ""
    return f"""
  - name: map
    source:
      type: vector
      path: {gpkg}
      layers:
        - layer: countries
          style:
            - {{ fill: "#e8e4d8", stroke: "#9a9a9a" }}{country}
        - layer: places
          style:
            - {{ fill: "#aa0000", marker: {{ size: 5 }} }}{place}
    grids: [WebMercatorQuad]
    formats: [png]
    max_zoom: {MAX_ZOOM}
    cache: {{ store: disk, metatile: [4, 4] }}
"""


def seed(binary, work, gpkg, labels):
    """Seconds, tiles and bytes of one seed into an empty file store."""
    tiles = work / "tiles"
    subprocess.run(["rm", "-rf", str(tiles)], check=True)
    cfg = work / "labels.yaml"
    cfg.write_text(f"stores: {{ disk: {{ type: file, path: {tiles} }} }}\nlayers:{layer_yaml(gpkg, labels)}")
    start = time.monotonic()
    subprocess.run([binary, "seed", "--config", str(cfg), "--layer", "map", "--zoom", f"0..{MAX_ZOOM}",
                    "--threads", "2"], check=True, capture_output=True, env={**os.environ, "TESSERA_LOG": "warn"})
    took = time.monotonic() - start
    files = [p for p in tiles.rglob("*.png")]
    return took, len(files), sum(p.stat().st_size for p in files)


def mapserver(url):
    """Seconds, tiles and bytes of MapServer drawing every tile once."""
    paths = [f"?mode=tile&tilemode=gmap&tile={x}+{y}+{z}&layers=country_names%20places"
             for z in range(MAX_ZOOM + 1) for x in range(2 ** z) for y in range(2 ** z)]
    config = "".join(f'url = "{url}{p}"\noutput = "/dev/null"\n' for p in paths)
    start = time.monotonic()
    out = subprocess.run(["curl", "--no-progress-meter", "--parallel", "--parallel-max", "2",
                          "-w", "%{http_code} %{size_download}\\n", "-K", "-"], input=config,
                         capture_output=True, text=True, check=True, timeout=3600).stdout
    took = time.monotonic() - start
    answers = [line.split() for line in out.splitlines()]
    if len(answers) != len(paths) or {a[0] for a in answers} != {"200"}:
        raise SystemExit(f"MapServer answered {sorted({a[0] for a in answers})} for {len(answers)} tiles")
    return took, len(answers), sum(int(a[1]) for a in answers)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--binary", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--work", default="/tmp/tessera-bench-labels")
    args = ap.parse_args()
    url = os.environ.get("TESSERA_TEST_WMS_URL")
    if not url:
        raise SystemExit("start MapServer first: scripts/mapserver start --fastcgi 2 && source var/mapserver/env")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    gpkg = work / "places.gpkg"
    if not gpkg.exists():
        gdal.VectorTranslate(str(gpkg), str(COUNTRIES), layerName="countries", format="GPKG")
        gdal.VectorTranslate(str(gpkg), str(PLACES), layerName="places", accessMode="append", format="GPKG")
    kinds = {
        "tessera seed, labels": lambda: seed(args.binary, work, gpkg, True),
        "MapServer tile mode, labels": lambda: mapserver(url),
        "tessera seed, no labels": lambda: seed(args.binary, work, gpkg, False),
    }
    results = {k: [] for k in kinds}
    for r in range(args.runs):
        order = list(kinds) if r % 2 == 0 else list(reversed(kinds))
        for kind in order:
            took, n, size = kinds[kind]()
            results[kind].append((n / took, n, size))
            print(f"  {kind:28} run {r}: {n} tiles in {took:.1f} s, {n / took:.1f} tiles/s, {size / 1e6:.1f} MB",
                  file=sys.stderr)
    med = {k: statistics.median(v[0] for v in vs) for k, vs in results.items()}
    print(machine())
    print()
    print(f"| zooms 0-{MAX_ZOOM}, countries and cities | tiles | tiles/s (median of {args.runs}) | MB of tiles |")
    print("| --- | --- | --- | --- |")
    for kind, vs in results.items():
        print(f"| {kind} | {vs[0][1]} | {med[kind]:.1f} | {vs[0][2] / 1e6:.1f} |")
    ratio = med["tessera seed, labels"] / med["MapServer tile mode, labels"]
    cost = med["tessera seed, labels"] / med["tessera seed, no labels"]
    print(f"| ratio tessera / MapServer (labels) | | {ratio:.2f} | |")
    print(f"| tessera with labels / without | | {cost:.2f} | |")


if __name__ == "__main__":
    main()
