"""Named styles (`styles:`): one dataset drawn several ways, chosen by WMS
STYLES, WMTS Style (KVP and RESTful), XYZ `?style=` and OGC API
`/styles/{styleId}/`; each style its own tiles in the cache (seeded and
truncated apart), its own legend, listed in every capabilities document
(read by OWSLib, valid against the OGC schemas); an unknown style is
StyleNotDefined (WMS) or InvalidParameterValue at STYLE (WMTS)."""
import json
import os
import subprocess
import urllib.parse
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from osgeo import gdal, osr

from conftest import http_get, serving
from imaging import decode
from test_ogc_conformance import assert_valid, schema, schemas  # noqa: F401 (a fixture)
from vectors import SHAPEFILE

BOUNDS = (0.0, 40.0, 10.0, 45.0)
TILE = "/tiles/scene/WebMercatorQuad/6/32/23.png"   # within BOUNDS


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("styles")
    path = d / "scene.tif"
    width, height = 200, 100
    y, x = np.mgrid[0:height, 0:width]
    ds = gdal.GetDriverByName("GTiff").Create(str(path), width, height, 4, gdal.GDT_UInt16)
    ds.SetGeoTransform((BOUNDS[0], (BOUNDS[2] - BOUNDS[0]) / width, 0, BOUNDS[3], 0,
                        -(BOUNDS[3] - BOUNDS[1]) / height))
    srs = osr.SpatialReference()
    srs.ImportFromEPSG(4326)
    ds.SetProjection(srs.ExportToWkt())
    for i, band in enumerate([x % 256, y * 2, (x + y) % 256, 255 - x], start=1):
        ds.GetRasterBand(i).WriteArray(band.astype(np.uint16))
    ds = None
    cfg = d / "styles.yaml"
    cfg.write_text(f"""
stores: {{ disk: {{ type: file, path: {d / 'tiles'} }} }}
layers:
  - name: scene
    source: {{ path: {path}, resampling: nearest }}
    grids: [WebMercatorQuad, WorldCRS84Quad]
    formats: [png]
    cache: {{ store: disk, metatile: [2, 2] }}
    styles:
      natural: {{ type: rgb, rescale: [0, 255] }}
      ndvi: {{ type: expression, expression: "(b4 - b3) / (b4 + b3)", rescale: [-1, 1], colormap: rdylgn }}
      red: {{ type: expression, expression: "b1", rescale: [0, 255], colormap: reds }}
  - name: countries
    source: {{ type: vector, path: "{SHAPEFILE}" }}
    grids: [WebMercatorQuad]
    formats: [png]
    cache: {{ store: disk, metatile: [2, 2] }}
    styles:
      green: [{{ fill: "#c8dcb4", stroke: "#3c3c3c" }}]
      by_continent:
        - {{ filter: {{ field: CONTINENT, eq: Europe }}, fill: "#0000ff" }}
        - {{ filter: {{ field: CONTINENT, eq: Africa }}, fill: "#ff0000" }}
""")
    with serving(tmp_path_factory, "--config", str(cfg)) as s:
        s.config = cfg
        s.store = d / "tiles"
        yield s


def tile(server, path):
    status, headers, body = http_get(server, path)
    assert status == 200, (path, status, body[:300])
    return headers, body


def test_each_style_draws_its_own_tiles_cached_under_its_own_key(server):
    first = {}
    for style in ["", "natural", "ndvi", "red"]:
        headers, body = tile(server, TILE + (f"?style={style}" if style else ""))
        first[style] = body
    assert first[""] == first["natural"], "the first style is the default"
    assert len({first["natural"], first["ndvi"], first["red"]}) == 3, "three styles, three pictures"
    ndvi = decode(first["ndvi"])
    assert ndvi[0].std() > 0 and not (ndvi[0] == ndvi[1]).all(), "a colour map, not grey"
    for style in ["ndvi", "red"]:
        headers, body = tile(server, f"{TILE}?style={style}")
        assert headers["X-Cache"] == "HIT" and body == first[style]
    keys = sorted(p.name for p in server.store.iterdir() if p.name.startswith("scene"))
    assert keys == ["scene", "scene~style=ndvi", "scene~style=red"], keys
    # Case does not matter, as in GeoServer.
    assert tile(server, f"{TILE}?style=NDVI")[1] == first["ndvi"]
    status, _, body = http_get(server, f"{TILE}?style=bogus")
    assert status == 404 and b'unknown style "bogus"' in body and b'"ndvi"' in body, body


def test_wmts_restful_and_kvp_take_the_style(server):
    _, xyz = tile(server, f"{TILE}?style=red")
    _, rest = tile(server, "/wmts/1.0.0/scene/red/WebMercatorQuad/6/23/32.png")
    kvp = urllib.parse.urlencode({"SERVICE": "WMTS", "REQUEST": "GetTile", "VERSION": "1.0.0", "LAYER": "scene",
                                  "STYLE": "red", "TILEMATRIXSET": "WebMercatorQuad", "TILEMATRIX": "6",
                                  "TILEROW": 23, "TILECOL": 32, "FORMAT": "image/png"})
    _, by_kvp = tile(server, f"/wmts?{kvp}")
    assert xyz == rest == by_kvp
    status, _, body = http_get(server, "/wmts/1.0.0/scene/bogus/WebMercatorQuad/6/23/32.png")
    assert status == 400, body
    report = ET.fromstring(body)
    exception = report.find("{http://www.opengis.net/ows/1.1}Exception")
    assert exception.get("exceptionCode") == "InvalidParameterValue" and exception.get("locator") == "STYLE"


def get_map(server, layers, styles, **extra):
    q = urllib.parse.urlencode({"SERVICE": "WMS", "VERSION": "1.3.0", "REQUEST": "GetMap", "LAYERS": layers,
                                "STYLES": styles, "CRS": "EPSG:4326", "BBOX": "40,0,45,10", "WIDTH": 200,
                                "HEIGHT": 100, "FORMAT": "image/png", **extra})
    return http_get(server, f"/wms?{q}")


def test_wms_styles_pick_each_layers_style(server):
    pictures = {}
    for style in ["", "natural", "ndvi", "red"]:
        status, headers, body = get_map(server, "scene", style)
        assert status == 200 and headers["Content-Type"] == "image/png", body[:300]
        pictures[style] = body
    assert pictures[""] == pictures["natural"] and len(set(pictures.values())) == 3
    # One style per layer, in order.
    status, _, both = get_map(server, "scene,countries", "red,by_continent")
    assert status == 200
    status, _, other = get_map(server, "scene,countries", "red,green")
    assert status == 200 and both != other
    for styles, why in [("bogus", b"bogus"), ("red,green,ndvi", b"one per layer")]:
        status, _, body = get_map(server, "scene,countries" if "," in styles else "scene", styles)
        assert status == 400 and b'code="StyleNotDefined"' in body and why in body, body


def test_legends_differ_by_style(server):
    def legend(layer, style):
        q = urllib.parse.urlencode({"SERVICE": "WMS", "VERSION": "1.3.0", "REQUEST": "GetLegendGraphic",
                                    "LAYER": layer, "STYLE": style, "FORMAT": "image/png"})
        return http_get(server, f"/wms?{q}")
    ndvi, red = legend("scene", "ndvi"), legend("scene", "red")
    assert ndvi[0] == red[0] == 200 and ndvi[2] != red[2]
    status, _, body = legend("scene", "natural")
    assert status == 400 and b"no legend" in body, "RGB has no legend"
    green, continents = legend("countries", "green"), legend("countries", "by_continent")
    assert green[0] == continents[0] == 200
    assert decode(green[2]).shape[1] < decode(continents[2]).shape[1], "one symbol against two"
    status, _, body = legend("scene", "bogus")
    assert status == 400 and b"StyleNotDefined" in body


def test_capabilities_list_every_style_for_owslib_and_the_schemas(server, schemas):
    from owslib.wms import WebMapService
    from owslib.wmts import WebMapTileService
    wms = WebMapService(server.url + "/wms", version="1.3.0")
    assert list(wms["scene"].styles) == ["natural", "ndvi", "red"]
    assert list(wms["countries"].styles) == ["green", "by_continent"]
    assert "STYLE=ndvi" in wms["scene"].styles["ndvi"]["legend"]
    assert "legend" not in wms["scene"].styles["natural"], "RGB has no legend"
    wms111 = WebMapService(server.url + "/wms", version="1.1.1")
    assert list(wms111["scene"].styles) == ["natural", "ndvi", "red"]
    wmts = WebMapTileService(server.url + "/wmts/1.0.0/WMTSCapabilities.xml")
    styles = wmts.contents["scene"].styles
    assert set(styles) == {"natural", "ndvi", "red"} and styles["natural"]["isDefault"]
    # OWSLib's own GetTile with a style.
    got = wmts.gettile(layer="scene", style="ndvi", tilematrixset="WebMercatorQuad", tilematrix="6",
                       row=23, column=32, format="image/png").read()
    assert got == tile(server, f"{TILE}?style=ndvi")[1]
    for path, xsd in [("/wms?SERVICE=WMS&REQUEST=GetCapabilities&VERSION=1.3.0", "wms/1.3.0/capabilities_1_3_0.xsd"),
                      ("/wmts/1.0.0/WMTSCapabilities.xml", "wmts/1.0.0/wmtsGetCapabilities_response.xsd")]:
        status, _, body = http_get(server, path)
        assert status == 200
        assert_valid(schema(schemas, xsd), body)


def test_tilejson_and_ogcapi_carry_the_style(server):
    status, _, body = http_get(server, "/tiles/scene/WebMercatorQuad/tilejson.json?style=ndvi")
    doc = json.loads(body)
    assert status == 200 and doc["styles"] == ["natural", "ndvi", "red"] and doc["style"] == "ndvi"
    assert doc["tiles"][0].endswith(".png?style=ndvi"), doc["tiles"]
    _, xyz = tile(server, f"{TILE}?style=ndvi")
    collection = json.loads(tile(server, "/ogcapi/collections/scene?f=json")[1])
    assert [s["id"] for s in collection["styles"]] == ["natural", "ndvi", "red"]
    assert collection["defaultStyle"] == "natural"
    tilesets = json.loads(tile(server, "/ogcapi/collections/scene/styles/ndvi/map/tiles?f=json")[1])
    tileset_href = next(link["href"] for link in tilesets["tilesets"][0]["links"] if link["rel"] == "self")
    assert "/styles/ndvi/map/tiles/" in tileset_href
    _, ogc = tile(server, "/ogcapi/collections/scene/styles/ndvi/map/tiles/WebMercatorQuad/6/23/32?f=png")
    assert ogc == xyz
    _, styled_map = tile(server, "/ogcapi/collections/scene/styles/red/map?f=png&bbox=0,40,10,45&width=200&height=100")
    _, plain_map = tile(server, "/ogcapi/collections/scene/map?f=png&bbox=0,40,10,45&width=200&height=100")
    assert styled_map != plain_map
    status, _, body = http_get(server, "/ogcapi/collections/scene/styles/bogus/map/tiles/WebMercatorQuad/6/23/32?f=png")
    assert status == 404 and b"StyleNotDefined" in body


def test_seed_and_truncate_by_style(server, tmp_path):
    def cli(*args):
        r = subprocess.run([os.environ["TESSERA_BIN"], *args, "--config", str(server.config), "--layer", "scene",
                            "--zoom", "0..3"], capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        return r.stderr
    out = cli("seed", "--style", "all")
    assert "scene in style ndvi" in out and "scene in style red" in out, out
    def stored(key):
        return sorted((server.store / key / "WebMercatorQuad").glob("3/**/*.png"))
    before = {key: stored(key) for key in ["scene", "scene~style=ndvi", "scene~style=red"]}
    assert all(before.values()), before
    cli("truncate", "--style", "red")
    # The extent's tiles go (a metatile's neighbours outside it stay).
    assert len(stored("scene~style=red")) < len(before["scene~style=red"])
    assert stored("scene~style=ndvi") == before["scene~style=ndvi"]
    assert stored("scene") == before["scene"]
    r = subprocess.run([os.environ["TESSERA_BIN"], "seed", "--config", str(server.config), "--layer", "scene",
                        "--zoom", "0", "--style", "bogus"], capture_output=True, text=True, timeout=600)
    assert r.returncode != 0 and "unknown style" in r.stderr, r.stderr


@pytest.mark.parametrize("styles, message", [
    ("style: { type: rgb, bands: [1, 1, 1] }\n    styles: { a: { type: rgb } }", "not both"),
    ("styles: { 'a b': { type: rgb } }", "must use only letters"),
    ("styles: { a: [{ fill: '#000000' }] }", "list of drawing rules"),
    ("styles: { a: { type: rgb }, A: { type: rgb } }", "named twice"),
    ("styles: { a: { type: bogus } }", 'style "a"'),
])
def test_bad_styles_are_refused_at_start(styles, message, tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(f"""
layers:
  - name: scene
    source: {{ path: /nonexistent.tif }}
    {styles}
""")
    r = subprocess.run([os.environ["TESSERA_BIN"], "check", str(cfg)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0 and message in r.stderr, r.stderr
