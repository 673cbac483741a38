"""MapLibre sprites (`sprites: { name: folder of SVGs }`): the sheet and its
index at 1x and 2x, SDF icons, a folder changed while serving, broken and
hostile SVGs named at start and left out (no file or network reached from
one), and MapLibre GL JS drawing icons from tessera's sprite, recoloured
when they are SDF icons."""
import http.server
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import numpy as np
import pytest

from conftest import ROOT, serving
from imaging import decode

RED_SQUARE = ('<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16">'
              '<rect width="16" height="16" fill="#cc0000"/></svg>')
DISC = ('<svg xmlns="http://www.w3.org/2000/svg" width="20" height="20">'
        '<circle cx="10" cy="10" r="9" fill="#000000"/></svg>')


class Counting(http.server.BaseHTTPRequestHandler):
    """Counts every request an SVG might make."""
    hits = []

    def do_GET(self):
        Counting.hits.append(self.path)
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def lure():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Counting)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(scope="module")
def server(tmp_path_factory, lure):
    d = tmp_path_factory.mktemp("sprites")
    icons = d / "icons"
    icons.mkdir()
    (icons / "square.svg").write_text(RED_SQUARE)
    (icons / "disc.svg").write_text(DISC)
    (icons / "broken.svg").write_text("<svg")
    (icons / "local-file.svg").write_text(
        '<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" width="8" height="8">'
        '<image xlink:href="file:///etc/hostname" width="8" height="8"/>'
        '<image href="../secret.png" width="8" height="8"/></svg>')
    (icons / "remote.svg").write_text(
        '<svg xmlns="http://www.w3.org/2000/svg" width="8" height="8">'
        f'<image href="{lure}/pixel.png" width="8" height="8"/>'
        f'<use href="{lure}/other.svg#shape"/></svg>')
    (icons / "many.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg" width="8" height="8">'
                                    + '<rect width="1" height="1"/>' * 100_000 + "</svg>")
    (icons / "entity.svg").write_text('<?xml version="1.0"?><!DOCTYPE svg [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
                                      '<svg xmlns="http://www.w3.org/2000/svg" width="8" height="8">'
                                      '<text>&x;</text></svg>')
    cfg = d / "tessera.yaml"
    cfg.write_text(f"sprites: {{ icons: {icons} }}\n"
                   f"layers:\n  - name: relief\n    source: {{ path: {ROOT}/data/shadedrelief-5400.tif }}\n")
    with serving(tmp_path_factory, "--config", cfg) as s:
        s.icons = icons
        yield s


def rgba(png):
    """A PNG of any colour type (the sheets are optimised, palettes and
    all) as a (4, rows, cols) array."""
    import io

    from PIL import Image
    return np.moveaxis(np.asarray(Image.open(io.BytesIO(png)).convert("RGBA")), -1, 0)


def get(server, path):
    try:
        with urllib.request.urlopen(server.url + path, timeout=60) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def test_bad_svgs_are_named_at_start_and_left_out_reaching_nothing(server):
    log = server.log_text()
    for name in ("broken.svg", "many.svg", "entity.svg"):
        assert name in log and "left out" in log, (name, log[-3000:])
    status, _, body = get(server, "/sprites/icons.json")
    assert status == 200
    index = json.loads(body)
    assert {"square", "disc"} <= set(index) and not {"broken", "many", "entity"} & set(index), index
    assert Counting.hits == [], "an SVG reached the network"


def test_the_sheet_and_index_at_1x_and_2x(server):
    _, headers, body = get(server, "/sprites/icons.json")
    assert headers["Content-Type"] == "application/json" and headers["ETag"]
    index = json.loads(body)
    square = index["square"]
    assert (square["width"], square["height"], square["pixelRatio"]) == (16, 16, 1)
    status, headers, png = get(server, "/sprites/icons.png")
    assert status == 200 and headers["Content-Type"] == "image/png"
    sheet = rgba(png)
    x, y = square["x"], square["y"]
    assert tuple(sheet[:, y + 8, x + 8]) == (0xcc, 0, 0, 255), "the square's middle is red"
    # Icons whose images were left out are drawn without them: transparent.
    for name in ("local-file", "remote"):
        assert name in index, f"{name}: an icon whose outside references are dropped is still an icon"
        e = index[name]
        assert sheet[3, e["y"]:e["y"] + e["height"], e["x"]:e["x"] + e["width"]].max() == 0, name
    _, _, body2 = get(server, "/sprites/icons@2x.json")
    square2 = json.loads(body2)["square"]
    assert (square2["width"], square2["pixelRatio"]) == (32, 2)
    sheet2 = rgba(get(server, "/sprites/icons@2x.png")[2])
    assert sheet2.shape[1] >= 32 and sheet2.shape[2] >= 32


def test_sdf_icons_say_so(server):
    index = json.loads(get(server, "/sprites/icons.json?sdf=true")[2])
    assert index["square"]["sdf"] is True
    # Buffered around, for the field beyond the edge.
    assert index["square"]["width"] > 16 and index["square"]["height"] == index["square"]["width"]


def test_unknown_sets_and_names_are_refused(server):
    status, _, body = get(server, "/sprites/maki.json")
    assert status == 404 and b"maki" in body and b"icons" in body
    for bad in ("icons.svg", "icons@3x.png", "@2x.json"):
        status, _, body = get(server, f"/sprites/{bad}")
        assert status in (400, 404), (bad, status)


def test_a_new_icon_in_the_folder_is_served_without_a_restart(server):
    (server.icons / "added.svg").write_text(RED_SQUARE.replace("#cc0000", "#00aa00"))
    deadline = time.monotonic() + 30
    while "added" not in json.loads(get(server, "/sprites/icons.json")[2]):
        assert time.monotonic() < deadline, "the new icon never appeared"
        time.sleep(0.5)


def test_maplibre_draws_icons_from_tessera_s_sprite(server, browser):
    """A symbol layer with `icon-image` from tessera's sprite: the red
    square drawn as it is; the disc from the SDF sprite recoloured blue by
    `icon-color`."""
    from selenium.webdriver.support.ui import WebDriverWait
    page = server.icons.parent / "page"
    page.mkdir(exist_ok=True)
    shots = {}
    for sdf, icon, paint in ((False, "square", {}), (True, "disc", {"icon-color": "#0000ff"})):
        sprite = f"{server.url}/sprites/icons" + ("?sdf=true" if sdf else "")
        style = {"version": 8, "sprite": sprite,
                 "sources": {"p": {"type": "geojson", "data": {"type": "Feature", "properties": {},
                                                                "geometry": {"type": "Point",
                                                                             "coordinates": [0, 0]}}}},
                 "layers": [{"id": "bg", "type": "background", "paint": {"background-color": "#ffffff"}},
                            {"id": "i", "type": "symbol", "source": "p",
                             "layout": {"icon-image": icon, "icon-size": 2}, "paint": paint}]}
        (page / f"{icon}.html").write_text(f"""<!doctype html><html><head><meta charset="utf-8">
<link rel="stylesheet" href="{server.url}/static/maplibre-gl.css">
<script src="{server.url}/static/maplibre-gl.js"></script></head>
<body style="margin:0"><div id="map" style="width:300px;height:200px"></div><script>
window.errors = [];
const map = new maplibregl.Map({{container: 'map', center: [0, 0], zoom: 1, fadeDuration: 0,
  attributionControl: false, style: {json.dumps(style)}}});
map.on('error', e => window.errors.push(String(e.error && e.error.message)));
map.on('idle', () => {{ window.idle = true; }});
</script></body></html>""")
        browser.get((page / f"{icon}.html").as_uri())
        WebDriverWait(browser, 60).until(lambda d: d.execute_script("return window.idle === true"))
        assert browser.execute_script("return window.errors") == []
        shots[icon] = decode(browser.find_element("id", "map").screenshot_as_png)[:3].astype(int)
    centre = shots["square"][:, 85:115, 135:165]
    red = (centre[0] > 150) & (centre[1] < 60) & (centre[2] < 60)
    assert red.mean() > 0.5, "the red square at the point"
    disc = shots["disc"][:, 85:115, 135:165]
    blue = (disc[2] > 150) & (disc[0] < 80) & (disc[1] < 80)
    assert blue.mean() > 0.3, "the SDF disc recoloured blue"
