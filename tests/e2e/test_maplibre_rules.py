"""A style document for every vector layer: a layer drawn with rules gets
`/styles/{layer}.json` made from them (fills, lines, circles, labels with
tessera's glyphs), which MapLibre GL JS in headless Chromium draws as
tessera draws its PNG (fills per pixel, labels as text), and the preview
draws it, with a toggle to the server's pictures."""
import json

import numpy as np
import pytest

from conftest import ROOT, http_get, serving
from imaging import decode
from vectors import MapLibreView, countries_and_places, side_by_side


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("rules")
    gpkg = countries_and_places(d / "world.gpkg")
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
