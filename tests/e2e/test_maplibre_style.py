"""MapLibre style documents (`style: { maplibre: style.json, source: world }`):
the demo countries and cities drawn by tessera as PNG and by MapLibre GL JS
in headless Chromium from tessera's vector tiles and the same document
(served at /styles/{layer}.json), per pixel, on fills and lines; what the
document has that tessera does not draw is listed once at start."""
import base64
import json
import urllib.parse

import numpy as np
import pytest

from conftest import http_get, serving
from imaging import decode
from vectors import MapLibreView, countries_and_places, side_by_side

STYLE = {
    "version": 8,
    "name": "test",
    "sources": {
        "world": {"type": "vector", "url": "https://tiles.example.invalid/world.json"},
        "imagery": {"type": "raster", "tiles": ["https://tiles.example.invalid/{z}/{x}/{y}.png"]},
    },
    "layers": [
        {"id": "water", "type": "background", "paint": {"background-color": "#d0e4f0"}},
        {"id": "imagery", "type": "raster", "source": "imagery"},
        {"id": "land", "type": "fill", "source": "world", "source-layer": "countries",
         "filter": ["!=", ["get", "CONTINENT"], "Europe"],
         "paint": {"fill-color": "#e8e4d8", "fill-translate": [0, 0]}},
        {"id": "europe", "type": "fill", "source": "world", "source-layer": "countries",
         "filter": ["==", "CONTINENT", "Europe"],
         "paint": {"fill-color": ["match", ["get", "NAME"], ["France", "Spain"], "#c0392b", "#3a6ea5"],
                   "fill-opacity": ["interpolate", ["linear"], ["zoom"], 1, 0.6, 6, 1]}},
        {"id": "borders", "type": "line", "source": "world", "source-layer": "countries",
         "paint": {"line-color": "#404040",
                   "line-width": ["interpolate", ["exponential", 1.5], ["zoom"], 1, 0.5, 8, 3]}},
        {"id": "cities", "type": "circle", "source": "world", "source-layer": "places", "minzoom": 2,
         "paint": {"circle-radius": ["step", ["zoom"], 2, 4, 4], "circle-color": "#aa0000",
                   "circle-stroke-color": "#ffffff", "circle-stroke-width": 1}},
    ],
}
# The same with the cities' names: tessera draws them in its own font, and
# serves MapLibre that font's glyphs.
NAMED = {**STYLE, "layers": STYLE["layers"] + [
    {"id": "names", "type": "symbol", "source": "world", "source-layer": "places",
     "layout": {"text-field": "{name}", "text-size": 12, "text-offset": [0, -1]},
     "paint": {"text-color": "#000000", "text-halo-color": "#ffffff", "text-halo-width": 1}},
]}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("maplibre")
    gpkg = countries_and_places(d / "world.gpkg")
    (d / "style.json").write_text(json.dumps(STYLE))
    (d / "named.json").write_text(json.dumps(NAMED))

    def layer(name, style):
        return f"""
  - name: {name}
    source:
      type: vector
      path: {gpkg}
      layers:
        - {{ layer: countries, fields: [NAME, CONTINENT] }}
        - {{ layer: places, fields: [name] }}
    style: {{ maplibre: {style}, source: world }}
    formats: [mvt, png]
    grids: [WebMercatorQuad]
    cache: {{ store: mem }}"""
    cfg = d / "maplibre.yaml"
    styled = layer("styled", "style.json").replace(
        "    style: { maplibre: style.json, source: world }",
        "    styles:\n      plain: { maplibre: style.json, source: world }\n"
        "      named: { maplibre: named.json, source: world }")
    cfg.write_text("stores: { mem: { type: memory } }\nlayers:" + layer("world", "style.json")
                   + layer("named", "named.json") + styled + "\n")
    with serving(tmp_path_factory, "--config", str(cfg)) as s:
        yield s


def test_what_is_not_drawn_is_listed_once_at_start(server):
    log = server.log_text()
    assert log.count("MapLibre style: not drawn") == 4, "once per layer and style: " + log
    for part in ['layer "imagery": type raster is not drawn', "property fill-translate is not drawn"]:
        assert part in log, log


def test_the_style_is_served_with_its_source_pointing_at_tessera(server):
    status, headers, body = http_get(server, "/styles/named.json")
    assert status == 200 and headers["Content-Type"] == "application/json", body[:300]
    doc = json.loads(body)
    world = doc["sources"]["world"]
    assert world["type"] == "vector"
    assert world["tiles"] == [f"{server.url}/tiles/named/WebMercatorQuad/{{z}}/{{x}}/{{y}}.mvt"]
    assert doc["sources"]["imagery"] == STYLE["sources"]["imagery"], "other sources as written"
    assert [l["id"] for l in doc["layers"]] == ["water", "imagery", "land", "europe", "borders", "cities", "names"]
    assert doc["glyphs"] == f"{server.url}/fonts/{{fontstack}}/{{range}}.pbf", "text from tessera's glyphs"
    assert doc["layers"][-1]["layout"]["text-font"] == ["Noto Sans Regular"], "the font tessera draws labels in"
    assert http_get(server, "/styles/nope.json")[0] == 404


def test_maplibre_and_tessera_draw_the_same_map(server, browser):
    from selenium.webdriver.support.ui import WebDriverWait
    browser.get(f"{server.url}/preview/world")
    WebDriverWait(browser, 120).until(lambda d: d.execute_script("return document.body.dataset.idle === '1'"))
    errors = browser.find_element("id", "status").text
    # Only the raster source, which is unreachable here, may fail.
    assert errors in ("", "Failed to fetch"), errors
    # The raster layer's tiles are unreachable here: hide it for the comparison.
    browser.execute_script("tesseraMap.setLayoutProperty('imagery', 'visibility', 'none');")
    lon, lat, zoom = 8.0, 47.0, 3.0
    browser.execute_script(f"document.body.dataset.idle = '0'; tesseraMap.jumpTo({{center: [{lon}, {lat}], "
                           f"zoom: {zoom}}}); tesseraMap.once('idle', () => {{ document.body.dataset.idle = '1'; }});")
    WebDriverWait(browser, 120).until(lambda d: d.execute_script("return document.body.dataset.idle === '1'"))
    png = browser.execute_script("return tesseraMap.getCanvas().toDataURL('image/png');")
    theirs = decode(base64.b64decode(png.split(",", 1)[1]))[:3].astype(int)
    height, width = theirs.shape[1:]
    view = MapLibreView(lon, lat, zoom, width, height)
    status, _, body = http_get(server, view.getmap("world"))
    assert status == 200, body[:300]
    ours = decode(body)[:3].astype(int)
    picture = side_by_side(ours, theirs, "maplibre-vs-tessera.png")
    diff = np.abs(ours - theirs).max(axis=0)
    # Antialiasing aside (edges differ by a pixel), the pictures agree.
    assert (diff > 48).mean() < 0.02, f"{(diff > 48).mean():.1%} of pixels differ; see {picture}"
    assert np.median(diff) <= 4

    water = np.array([0xd0, 0xe4, 0xf0])
    opacity = 0.6 + (zoom - 1) / 5 * 0.4   # Europe's fill-opacity at this zoom, over the water

    def europe(c):
        return opacity * np.array(c) + (1 - opacity) * water
    for place, colour in [((2.5, 46.5), europe((0xc0, 0x39, 0x2b))), ((10.5, 51.0), europe((0x3a, 0x6e, 0xa5))),
                          ((35.0, 39.0), (0xe8, 0xe4, 0xd8)), ((-15.0, 45.0), water)]:
        at = view.pixel(*place)
        for picture in (ours, theirs):
            got = picture[:, at[0], at[1]]
            assert np.abs(got - np.array(colour)).max() <= 6, (place, got, colour)


def test_symbol_layers_are_drawn_as_labels_in_tesseras_font(server):
    def picture(layer):
        q = urllib.parse.urlencode({"SERVICE": "WMS", "VERSION": "1.3.0", "REQUEST": "GetMap", "LAYERS": layer,
                                    "STYLES": "", "CRS": "EPSG:4326", "BBOX": "44,-2,53,12", "WIDTH": 600,
                                    "HEIGHT": 400, "FORMAT": "image/png"})
        status, _, body = http_get(server, f"/wms?{q}")
        assert status == 200, body[:300]
        return decode(body)[:3].astype(int)
    plain, named = picture("world"), picture("named")
    dark = (named.max(axis=0) < 60) & (plain.max(axis=0) >= 60)
    assert dark.sum() > 300, "city names drawn in black"
    changed = np.abs(named - plain).max(axis=0) > 0
    assert changed.mean() < 0.15, "only the names differ"


def test_named_styles_may_be_maplibre_documents(server):
    tile = "/tiles/{}/WebMercatorQuad/4/8/5.png"
    plain, named = http_get(server, tile.format("world"))[2], http_get(server, tile.format("named"))[2]
    assert plain != named
    assert http_get(server, tile.format("styled"))[2] == plain
    assert http_get(server, tile.format("styled") + "?style=named")[2] == named
    doc = json.loads(http_get(server, "/styles/styled.json?style=named")[2])
    assert doc["sources"]["world"]["tiles"][0].endswith(".mvt?style=named")
