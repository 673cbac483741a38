"""MapLibre Tiles (MLT): tessera's `.mlt` tiles of the demo countries and
places decode with the reference decoder (npm `@maplibre/mlt`, installed by
scripts/mlt-clients) to the same layers, features, properties and
geometries as the MVT of the same tile (decoded by `mapbox-vector-tile`);
`Accept` picks MLT on an `.mvt` address; TileJSON, the style document and
OGC API name the encoding; seeded MLT tiles exported to PMTiles and MBTiles
read back with go-pmtiles and sqlite3; MapLibre GL JS 5 draws the same map
from the MLT tiles as from the MVT tiles."""
import base64
import gzip
import json
import os
import shutil
import sqlite3
import subprocess

import mapbox_vector_tile
import numpy as np
import pytest

from conftest import ROOT, http_get, serving
from imaging import decode
from vectors import countries_and_places

MLT = "application/vnd.maplibre-tile"
MVT = "application/vnd.mapbox-vector-tile"
TILES = [(0, 0, 0), (2, 2, 1), (3, 4, 2), (4, 8, 5), (5, 17, 11), (6, 33, 22)]


def clients():
    folder = os.environ.get("TESSERA_MLT_CLIENTS")
    if not folder or not os.path.isfile(os.path.join(folder, "mlt-decode.js")):
        pytest.fail("TESSERA_MLT_CLIENTS is not set: run scripts/mlt-clients (scripts/test does)", pytrace=False)
    return folder


def config_text(tmp, gpkg, store="disk"):
    return f"""
stores: {{ disk: {{ type: file, path: {tmp / 'tiles'} }} }}
layers:
  - name: world
    source: {{ type: vector, path: {gpkg}, layers: [
      {{ layer: countries, fields: [NAME, POP_EST, CONTINENT], style: [{{ fill: "#336699" }}] }},
      {{ layer: places, fields: [name], style: [{{ fill: "#ff0000", marker: {{ shape: circle, size: 6 }} }}] }}] }}
    formats: [mvt, mlt, png]
    grids: [WebMercatorQuad]
    cache: {{ store: {store} }}
  - name: mvt-only
    source: {{ type: vector, path: {gpkg}, layers: [{{ layer: countries, style: [{{ fill: "#336699" }}] }}] }}
    formats: [mvt]
    grids: [WebMercatorQuad]
    cache: {{ store: disk }}
"""


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mlt")
    gpkg = countries_and_places(tmp / "world.gpkg")
    path = tmp / "tessera.yaml"
    path.write_text(config_text(tmp, gpkg))
    with serving(tmp_path_factory, str(path)) as server:
        yield server, path, tmp


def mlt_features(folder, body, tmp):
    """The reference decoder's reading of an MLT tile."""
    path = tmp / "tile.mlt"
    path.write_bytes(body)
    run = subprocess.run(["node", os.path.join(folder, "mlt-decode.js"), str(path)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout)


def open_ring(points):
    points = [tuple(p) for p in points]
    return points[:-1] if len(points) > 1 and points[0] == points[-1] else points


def mvt_parts(geometry):
    """An MVT feature's geometry as the parts MLT keeps: rings and lines in
    order, each point of a multipoint a part."""
    kind, c = geometry["type"], geometry["coordinates"]
    if kind == "Point":
        return [[c]]
    if kind in ("MultiPoint",):
        return [[p] for p in c]
    if kind == "LineString":
        return [c]
    if kind in ("MultiLineString", "Polygon"):
        return list(c)
    if kind == "MultiPolygon":
        return [ring for polygon in c for ring in polygon]
    raise AssertionError(kind)


def signature(properties, parts):
    """A feature as something to compare in any order: its properties
    (numbers as floats, absent values left out) and its open rings."""
    props = {k: (float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v)
             for k, v in properties.items() if v is not None}
    return json.dumps([sorted(props.items()), [open_ring(p) for p in parts]], sort_keys=True)


def test_mlt_tiles_hold_the_features_of_the_mvt_tiles(setup):
    server, _, tmp = setup
    folder = clients()
    total = {"countries": 0, "places": 0}
    for z, x, y in TILES:
        status, headers, mvt = http_get(server, f"/tiles/world/WebMercatorQuad/{z}/{x}/{y}.mvt")
        assert status == 200 and headers["Content-Type"] == MVT, (z, x, y, status)
        status, headers, mlt = http_get(server, f"/tiles/world/WebMercatorQuad/{z}/{x}/{y}.mlt")
        assert status == 200 and headers["Content-Type"] == MLT, (z, x, y, status, mlt[:200])
        theirs = mlt_features(folder, mlt, tmp)
        ours = mapbox_vector_tile.decode(mvt, default_options={"y_coord_down": True})
        assert sorted(theirs) == sorted(ours), (z, x, y)
        for name, layer in ours.items():
            assert theirs[name]["extent"] == layer["extent"] == 4096
            want = sorted(signature(f["properties"], mvt_parts(f["geometry"])) for f in layer["features"])
            got = sorted(signature(f["properties"], f["rings"]) for f in theirs[name]["features"])
            assert got == want, (z, x, y, name, len(got), len(want))
            total[name] += len(want)
        # The column encoding is smaller than the protobuf, unpacked.
        assert len(mlt) < len(mvt), (z, x, y, len(mlt), len(mvt))
    assert total["countries"] > 100 and total["places"] > 20, total


def test_accept_picks_mlt_and_responses_vary_on_it(setup):
    server, _, _ = setup
    path = "/tiles/world/WebMercatorQuad/3/4/2"
    _, _, mlt = http_get(server, path + ".mlt")
    status, headers, body = http_get(server, path + ".pbf", {"Accept": MLT})
    assert status == 200 and headers["Content-Type"] == MLT and body == mlt
    assert "accept" in [v.strip() for v in headers["Vary"].split(",")], headers["Vary"]
    status, headers, body = http_get(server, path + ".mvt", {"Accept": f"{MLT};q=0.5, {MVT}"})
    assert headers["Content-Type"] == MVT and body != mlt
    status, headers, body = http_get(server, path + ".mlt", {"Accept-Encoding": "gzip"})
    assert headers["Content-Encoding"] == "gzip" and gzip.decompress(body) == mlt
    # A layer without MLT: its MVT whatever the Accept, and no `.mlt`.
    status, headers, body = http_get(server, "/tiles/mvt-only/WebMercatorQuad/3/4/2.mvt", {"Accept": MLT})
    assert headers["Content-Type"] == MVT and headers["Vary"] == "accept-encoding"
    status, _, body = http_get(server, "/tiles/mvt-only/WebMercatorQuad/3/4/2.mlt")
    assert status in (400, 404) and b"mvt" in body, (status, body[:300])
    # A tile no feature reaches (the South Pacific): no content, as for MVT.
    assert http_get(server, "/tiles/world/WebMercatorQuad/6/2/40.mlt")[0] == 204


def test_tilejson_styles_and_ogc_api_name_the_encoding(setup):
    server, _, _ = setup
    status, _, body = http_get(server, "/tiles/world/WebMercatorQuad/tilejson.json?format=mlt")
    doc = json.loads(body)
    assert status == 200 and doc["encoding"] == "mlt" and doc["format"] == "mlt"
    assert doc["tiles"][0].endswith(".mlt") and [l["id"] for l in doc["vector_layers"]] == ["countries", "places"]
    assert "encoding" not in json.loads(http_get(server, "/tiles/world/WebMercatorQuad/tilejson.json?format=mvt")[2])
    status, _, body = http_get(server, "/styles/world.json?format=mlt")
    source = json.loads(body)["sources"]["world"]
    assert status == 200 and source["encoding"] == "mlt" and source["tiles"][0].endswith(".mlt")
    assert "encoding" not in json.loads(http_get(server, "/styles/world.json")[2])["sources"]["world"]
    status, _, body = http_get(server, "/styles/world.json?format=png")
    assert status == 400 and b"mvt, mlt" in body, body[:300]
    status, _, body = http_get(server, "/styles/mvt-only.json?format=mlt")
    assert status == 400, body[:300]
    # OGC API - Tiles: the vector tiles in either encoding, by `f` or `Accept`.
    tile = "/ogcapi/collections/world/tiles/WebMercatorQuad/3/2/4"
    status, headers, body = http_get(server, tile, {"Accept": MLT})
    assert status == 200 and headers["Content-Type"] == MLT, (status, body[:300])
    assert "accept" in headers["Vary"] and "accept-encoding" in headers["Vary"], headers["Vary"]
    assert http_get(server, tile + "?f=mlt")[1]["Content-Type"] == MLT
    assert http_get(server, tile, {"Accept": MVT})[1]["Content-Type"] == MVT
    status, _, body = http_get(server, "/ogcapi/collections/world/tiles/WebMercatorQuad?f=json")
    assert status == 200 and MLT in body.decode(), body[:500]
    status, _, body = http_get(server, "/ogcapi/api?f=json")
    assert MLT in body.decode()


def test_mlt_only_layers_are_refused_with_the_reason(tmp_path):
    gpkg = countries_and_places(tmp_path / "world.gpkg")
    path = tmp_path / "tessera.yaml"
    path.write_text(config_text(tmp_path, gpkg).replace("formats: [mvt, mlt, png]", "formats: [mlt, png]"))
    run = subprocess.run([os.environ["TESSERA_BIN"], "check", "--no-open", str(path)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode != 0 and "list mvt too" in run.stderr, run.stderr


def test_seeded_mlt_tiles_export_to_archives_the_reference_tools_read(setup, tmp_path):
    server, config, _ = setup
    folder = clients()
    binary = os.environ["TESSERA_BIN"]
    seed = subprocess.run([binary, "seed", str(config), "--layer", "world", "--zoom", "0..2", "--format", "mlt"],
                          capture_output=True, text=True, timeout=600)
    assert seed.returncode == 0 and "21/21 tiles" in seed.stderr + seed.stdout, seed.stderr
    pmtiles_bin = os.environ.get("TESSERA_PMTILES_BIN")
    if not pmtiles_bin:
        pytest.fail("TESSERA_PMTILES_BIN is not set: run scripts/go-pmtiles (scripts/test does)", pytrace=False)
    archives = {}
    for kind in ("pmtiles", "mbtiles"):
        archives[kind] = tmp_path / f"world.{kind}"
        run = subprocess.run([binary, "export", str(config), "--layer", "world", "--zoom", "0..2", "--format", kind,
                              "--tile-format", "mlt", "--to", str(archives[kind])],
                             capture_output=True, text=True, timeout=600)
        assert run.returncode == 0 and "21 tiles" in run.stderr + run.stdout, run.stderr
    show = subprocess.run([pmtiles_bin, "show", str(archives["pmtiles"])], capture_output=True, text=True, timeout=60)
    assert show.returncode == 0 and "tile type: mlt" in show.stdout, show.stdout
    assert subprocess.run([pmtiles_bin, "verify", str(archives["pmtiles"])], capture_output=True,
                          timeout=60).returncode == 0
    _, _, served = http_get(server, "/tiles/world/WebMercatorQuad/2/2/1.mlt")
    one = subprocess.run([pmtiles_bin, "tile", str(archives["pmtiles"]), "2", "2", "1"], capture_output=True,
                         timeout=60)
    assert one.returncode == 0, one.stderr
    from_pmtiles = gzip.decompress(one.stdout) if one.stdout[:2] == b"\x1f\x8b" else one.stdout
    assert from_pmtiles == served
    with sqlite3.connect(archives["mbtiles"]) as db:
        meta = dict(db.execute("SELECT name, value FROM metadata"))
        # TMS rows in MBTiles: row 1 of zoom 2 is row 2 from the bottom.
        (data,) = db.execute("SELECT tile_data FROM tiles WHERE zoom_level=2 AND tile_column=2 AND tile_row=2"
                             ).fetchone()
    assert meta["format"] == "mlt" and "vector_layers" in meta["json"], meta
    assert gzip.decompress(data) == served
    assert sorted(mlt_features(folder, gzip.decompress(data), tmp_path)) == ["countries", "places"]


def test_maplibre_draws_the_mlt_tiles_as_it_draws_the_mvt_tiles(setup, browser, page_server):
    """MapLibre GL JS 5 (its vector source's `encoding: "mlt"`) draws the
    countries and places from tessera's MLT tiles and, in the same page,
    from its MVT tiles: the two pictures are the same."""
    from selenium.webdriver.support.ui import WebDriverWait
    server, _, _ = setup
    folder = clients()
    url, pages = page_server
    shutil.copytree(os.path.join(folder, "maplibre-gl"), pages / "maplibre-gl")
    (pages / "map.html").write_text(f"""<!doctype html><html><head><meta charset="utf-8">
<link rel="stylesheet" href="maplibre-gl/maplibre-gl.css">
<script src="maplibre-gl/maplibre-gl.js"></script></head>
<body style="margin:0"><div id="map" style="width:640px;height:400px"></div><script>
window.errors = [];
const encoding = new URLSearchParams(location.search).get('encoding');
const map = new maplibregl.Map({{container: 'map', center: [10, 48], zoom: 3, fadeDuration: 0,
  attributionControl: false, canvasContextAttributes: {{preserveDrawingBuffer: true}}, style: {{
  version: 8,
  sources: {{w: {{type: 'vector', encoding: encoding,
    tiles: ['{server.url}/tiles/world/WebMercatorQuad/{{z}}/{{x}}/{{y}}.' + encoding], maxzoom: 6}}}},
  layers: [{{id: 'bg', type: 'background', paint: {{'background-color': '#ffffff'}}}},
           {{id: 'land', type: 'fill', source: 'w', 'source-layer': 'countries',
             paint: {{'fill-color': ['case', ['==', ['get', 'CONTINENT'], 'Europe'], '#c0392b', '#3a6ea5']}}}},
           {{id: 'borders', type: 'line', source: 'w', 'source-layer': 'countries',
             paint: {{'line-color': '#000000'}}}},
           {{id: 'cities', type: 'circle', source: 'w', 'source-layer': 'places',
             paint: {{'circle-color': '#00ff00', 'circle-radius': 3}}}}]}}}});
map.on('error', e => window.errors.push(String(e.error && e.error.message)));
map.on('idle', () => {{ window.idle = true; }});
</script></body></html>""")
    pictures = {}
    for encoding in ("mlt", "mvt"):
        browser.get(f"{url}/map.html?encoding={encoding}")
        WebDriverWait(browser, 120).until(lambda d: d.execute_script("return window.idle === true"))
        assert browser.execute_script("return window.errors") == [], encoding
        png = browser.execute_script("return map.getCanvas().toDataURL('image/png');")
        pictures[encoding] = decode(base64.b64decode(png.split(",", 1)[1]))[:3].astype(int)
    assert ".mlt" in server.log_text(), "MapLibre asked for the MLT tiles"
    from vectors import side_by_side
    picture = side_by_side(pictures["mlt"], pictures["mvt"], "mlt-vs-mvt.png")
    mlt = pictures["mlt"]
    europe = (np.abs(mlt - np.array([0xc0, 0x39, 0x2b])[:, None, None]).max(axis=0) <= 8).mean()
    cities = (np.abs(mlt - np.array([0, 0xff, 0])[:, None, None]).max(axis=0) <= 30).sum()
    assert europe > 0.2 and cities > 50, (europe, cities, picture)
    diff = np.abs(pictures["mlt"] - pictures["mvt"]).max(axis=0)
    assert (diff > 32).mean() < 0.002, f"{(diff > 32).mean():.2%} of pixels differ; see {picture}"
