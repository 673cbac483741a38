"""A style document for every vector layer: a layer drawn with rules gets
`/styles/{layer}.json` made from them (fills, lines, circles, labels with
tessera's glyphs), which MapLibre GL JS in headless Chromium draws as
tessera draws its PNG (fills per pixel, labels as text), and the preview
draws it, with a toggle to the server's pictures."""
import json
import urllib.parse

import numpy as np
import pytest

from conftest import ROOT, http_get, serving
from imaging import decode
from sdf import ascender_px, compile_schema, tinysdf_fields, write_ranges
from vectors import MapLibreView, countries_and_places, side_by_side


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return countries_and_places(tmp_path_factory.mktemp("world") / "world.gpkg")


@pytest.fixture(scope="module")
def server(tmp_path_factory, world):
    d = tmp_path_factory.mktemp("rules")
    gpkg = world
    cfg = d / "tessera.yaml"
    cfg.write_text(f"""
stores: {{ mem: {{ type: memory }} }}
layers:
  - name: ruled
    title: Countries by rules
    source:
      type: vector
      path: {gpkg}
      layers:
        - layer: countries
          fields: [NAME, CONTINENT, POP_EST]
          style:
            - {{ fill: "#e8e4d8", stroke: "#7a7a7a", stroke_width: 1 }}
            - {{ filter: {{ field: CONTINENT, eq: Europe }}, fill: "#e8c9a0" }}
        - layer: places
          fields: [name]
          style:
            - {{ fill: "#b03030", marker: {{ size: 8 }} }}
            - label: {{ text: "{{name}}", size: 14, color: "#000000", halo: {{ color: "#ffffff", width: 2 }},
                        offset: [0, -10] }}
    formats: [mvt, png]
    grids: [WebMercatorQuad]
    cache: {{ store: mem }}
  - name: plain
    source: {{ path: {ROOT}/data/elev.tif }}
    cache: {{ store: mem }}
""")
    with serving(tmp_path_factory, "--config", str(cfg)) as s:
        yield s


def test_a_rule_styled_layer_has_a_style_document(server):
    status, headers, body = http_get(server, "/styles/ruled.json")
    assert status == 200 and headers["Content-Type"] == "application/json", body[:300]
    doc = json.loads(body)
    assert doc["version"] == 8 and doc["name"] == "Countries by rules"
    assert doc["glyphs"] == f"{server.url}/fonts/{{fontstack}}/{{range}}.pbf"
    assert doc["sources"]["ruled"]["tiles"] == [f"{server.url}/tiles/ruled/WebMercatorQuad/{{z}}/{{x}}/{{y}}.mvt"]
    kinds = [(l["source-layer"], l["type"]) for l in doc["layers"]]
    assert ("countries", "fill") in kinds and ("countries", "line") in kinds and ("places", "circle") in kinds
    symbols = [l for l in doc["layers"] if l["type"] == "symbol"]
    assert symbols and all(l["layout"]["text-field"] == "{name}" for l in symbols)
    assert doc["layers"][-1]["type"] == "symbol", "labels over everything"
    status, _, body = http_get(server, "/styles/plain.json")
    assert status == 404 and b"docs: styles#style-documents" in body


def test_maplibre_draws_the_rules_as_tessera_does_with_labels(server, browser):
    from selenium.webdriver.support.ui import WebDriverWait
    browser.get(f"{server.url}/preview/ruled")
    WebDriverWait(browser, 120).until(lambda d: d.execute_script("return document.body.dataset.idle === '1'"))
    assert browser.find_element("id", "status").text == ""
    lon, lat, zoom = 10.0, 48.0, 3.0
    browser.execute_script(f"document.body.dataset.idle = '0'; tesseraMap.jumpTo({{center: [{lon}, {lat}], "
                           f"zoom: {zoom}}}); tesseraMap.once('idle', () => {{ document.body.dataset.idle = '1'; }});")
    WebDriverWait(browser, 120).until(lambda d: d.execute_script("return document.body.dataset.idle === '1'"))
    theirs = decode(browser.find_element("id", "map").screenshot_as_png)[:3].astype(int)
    height, width = theirs.shape[1:]
    view = MapLibreView(lon, lat, zoom, width, height)
    status, _, body = http_get(server, view.getmap("ruled", TRANSPARENT="FALSE", BGCOLOR="0xF2EFE9"))
    assert status == 200, body[:300]
    ours = decode(body)[:3].astype(int)
    side_by_side(ours, theirs, "maplibre-rules-vs-tessera.png")
    # Fills: Europe, Turkey (Asia), the sea, in both pictures.
    for place, colour in [((2.5, 46.5), (0xe8, 0xc9, 0xa0)), ((35.0, 39.0), (0xe8, 0xe4, 0xd8)),
                          ((-15.0, 45.0), (0xf2, 0xef, 0xe9))]:
        at = view.pixel(*place)
        for name, picture in (("tessera", ours), ("maplibre", theirs)):
            got = picture[:, at[0], at[1]]
            assert np.abs(got - np.array(colour)).max() <= 8, (name, place, got, colour)
    # Labels: black text in both, in about the same amount (each places
    # its own, so not pixel for pixel).
    text = {name: int((p.max(axis=0) < 60).sum()) for name, p in (("tessera", ours), ("maplibre", theirs))}
    assert text["maplibre"] > 500 and text["tessera"] > 500, text
    assert 0.3 < text["maplibre"] / text["tessera"] < 3, text


def test_the_preview_toggles_to_the_server_pictures(server, browser):
    from selenium.webdriver.support.ui import WebDriverWait
    browser.get(f"{server.url}/preview/ruled")
    WebDriverWait(browser, 120).until(lambda d: d.execute_script("return document.body.dataset.idle === '1'"))
    button = browser.find_element("id", "compare")
    assert button.is_displayed() and button.text == "server PNG"
    button.click()
    WebDriverWait(browser, 120).until(lambda d: d.execute_script(
        "return document.body.dataset.idle === '1' && !!tesseraMap.getLayer('server-png')"))
    assert browser.execute_script("return tesseraMap.getLayoutProperty('ruled-countries-0-fill', 'visibility')") \
        == "none"
    assert button.text == "MapLibre"
    button.click()
    WebDriverWait(browser, 60).until(lambda d: d.execute_script("return !tesseraMap.getLayer('server-png')"))


def dilated(mask, by):
    """`mask` grown by `by` pixels in every direction (a square)."""
    out = mask.copy()
    for dy in range(-by, by + 1):
        for dx in range(-by, by + 1):
            out |= np.roll(np.roll(mask, dy, axis=0), dx, axis=1)
    return out


def test_labels_land_where_maplibre_places_them_with_reference_glyphs(server, world, browser, page_server,
                                                                     tmp_path):
    """tessera's style of the countries and places drawn by MapLibre GL JS
    twice: with tessera's glyphs, and with glyph ranges made from TinySDF's
    fields of the same font (MapLibre's own SDF generator, in Chromium;
    written with the reference schema into a fixture folder). MapLibre's
    collision placement then shows the same labels (measured: the same set,
    asserted: at least 90 % shared), and the text's pixels land in the same
    places (at least 90 % of each picture's text within 2 pixels of the
    other's; the glyphs' metrics agree to a pixel, see test_glyphs)."""
    from osgeo import ogr
    from selenium.webdriver.support.ui import WebDriverWait
    source = ogr.Open(str(world))
    names = [f.GetField("name") for f in source.GetLayerByName("places")]
    chars = set("".join(n for n in names if n)) | set(" 0123456789")
    url, folder = page_server
    proto = compile_schema(tmp_path / "proto")
    fields = tinysdf_fields(browser, page_server, chars)
    write_ranges(proto, fields, folder / "glyphs", "Noto Sans Regular", ascender_px())
    status, _, body = http_get(server, "/styles/ruled.json")
    assert status == 200, body[:300]
    style = json.loads(body)
    symbols = [l["id"] for l in style["layers"] if l["type"] == "symbol"]
    assert symbols and all(l["layout"]["text-font"] == ["Noto Sans Regular"]
                           for l in style["layers"] if l["type"] == "symbol")
    (folder / "style-tessera.json").write_text(json.dumps(style))
    style["glyphs"] = f"{url}/glyphs/{{fontstack}}/{{range}}.pbf"
    (folder / "style-reference.json").write_text(json.dumps(style))
    (folder / "labels.html").write_text(f"""<!doctype html><html><head><meta charset="utf-8">
<link rel="stylesheet" href="{server.url}/static/maplibre-gl.css">
<script src="{server.url}/static/maplibre-gl.js"></script></head>
<body style="margin:0"><div id="map" style="width:760px;height:520px"></div><script>
window.errors = [];
const style = new URL(new URLSearchParams(location.search).get('style'), location.href).href;
const map = new maplibregl.Map({{container: 'map', style, center: [10, 48], zoom: 3, fadeDuration: 0,
  attributionControl: false, interactive: false}});
map.on('error', e => window.errors.push(String(e.error && e.error.message)));
map.once('idle', () => {{
  window.placed = map.queryRenderedFeatures({{layers: {json.dumps(symbols)}}}).map(f => f.properties.name);
  window.idle = true;
}});
</script></body></html>""")
    placed, ink, pictures = {}, {}, {}
    for which in ("tessera", "reference"):
        browser.get(f"{url}/labels.html?style={urllib.parse.quote(f'style-{which}.json')}")
        WebDriverWait(browser, 120).until(lambda d: d.execute_script("return window.idle === true"))
        assert browser.execute_script("return window.errors") == [], which
        placed[which] = set(browser.execute_script("return window.placed"))
        pixels = decode(browser.find_element("id", "map").screenshot_as_png)[:3].astype(int)
        ink[which], pictures[which] = pixels.max(axis=0) < 60, pixels
    side_by_side(pictures["tessera"], pictures["reference"], "maplibre-labels-tessera-vs-reference.png")
    shared = placed["tessera"] & placed["reference"]
    assert len(placed["reference"]) >= 10, placed
    assert len(shared) >= 0.9 * max(len(placed["tessera"]), len(placed["reference"])), placed
    for a, b in (("tessera", "reference"), ("reference", "tessera")):
        near = (ink[a] & dilated(ink[b], 2)).sum() / ink[a].sum()
        assert ink[a].sum() > 500 and near >= 0.9, (a, b, near, int(ink[a].sum()), int(ink[b].sum()))
    print({"placed": {k: len(v) for k, v in placed.items()}, "shared": len(shared),
           "ink": {k: int(v.sum()) for k, v in ink.items()}})
