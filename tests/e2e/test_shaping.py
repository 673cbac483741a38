"""Labels shaped on the server: Arabic (right to left, letters joined) and
Devanagari (vowel signs reordered, conjuncts) set in fonts the
configuration names, against the same text set by Chromium (HarfBuzz, the
browser's own shaper) in the same font files: the ink of each label has
the same width and height within a few pixels, and overlaps once aligned.
Text set glyph by glyph in the order typed (unshaped) is much wider for
Arabic (isolated forms, reversed) and misplaces Devanagari's vowel sign."""
import http.server
import json
import threading

import numpy as np
import pytest

from conftest import http_get, serving
from imaging import decode

NOTO = "/usr/share/fonts/truetype/noto"
FONTS = {"arabic": f"{NOTO}/NotoSansArabic-Regular.ttf", "devanagari": f"{NOTO}/NotoSansDevanagari-Regular.ttf"}
LABELS = {"arabic": ("القاهرة الكبرى", 31.2, 30.0), "devanagari": ("नई दिल्ली", 77.2, 28.6)}
SIZE = 28
WIDTH, HEIGHT = 480, 120
RES = 0.01  # degrees per pixel of the maps asked


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    import os
    for path in FONTS.values():
        if not os.path.exists(path):
            pytest.fail(f"{path} is missing: install fonts-noto-core (scripts/install-deps does)", pytrace=False)
    d = tmp_path_factory.mktemp("shaping")
    features = [{"type": "Feature", "properties": {"name": text},
                 "geometry": {"type": "Point", "coordinates": [lon, lat]}}
                for text, lon, lat in LABELS.values()]
    (d / "places.geojson").write_text(json.dumps({"type": "FeatureCollection", "features": features},
                                                 ensure_ascii=False))
    cfg = d / "tessera.yaml"
    cfg.write_text(f"""
fonts: [{FONTS["arabic"]}, {FONTS["devanagari"]}]
stores: {{ mem: {{ type: memory }} }}
layers:
  - name: places
    source:
      type: vector
      path: {d / "places.geojson"}
      fields: [name]
      style:
        - label: {{ text: "{{name}}", size: {SIZE}, color: "#000000", padding: 0 }}
    cache: {{ store: mem }}
""")
    with serving(tmp_path_factory, "--config", str(cfg)) as s:
        yield s


def ink(rgb):
    """The dark pixels of a picture, cropped to their box."""
    mask = rgb.max(axis=0) < 128
    rows, cols = np.nonzero(mask)
    assert rows.size, "no text drawn"
    return mask[rows.min():rows.max() + 1, cols.min():cols.max() + 1]


def overlap(a, b):
    """The best intersection over union of two masks placed at their top
    left corners, give or take two pixels."""
    best = 0.0
    h, w = max(a.shape[0], b.shape[0]) + 4, max(a.shape[1], b.shape[1]) + 4
    for dy in range(-2, 3):
        for dx in range(-2, 3):
            ca, cb = np.zeros((h, w), bool), np.zeros((h, w), bool)
            ca[2:2 + a.shape[0], 2:2 + a.shape[1]] = a
            cb[2 + dy:2 + dy + b.shape[0], 2 + dx:2 + dx + b.shape[1]] = b
            best = max(best, (ca & cb).sum() / (ca | cb).sum())
    return best


class Static(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.mark.parametrize("script", ["arabic", "devanagari"])
def test_labels_are_shaped_as_the_browser_shapes_them(script, server, browser, tmp_path):
    from selenium.webdriver.support.ui import WebDriverWait
    text, lon, lat = LABELS[script]
    bbox = [lat - HEIGHT / 2 * RES, lon - WIDTH / 2 * RES, lat + HEIGHT / 2 * RES, lon + WIDTH / 2 * RES]
    status, _, body = http_get(server, "/wms?SERVICE=WMS&VERSION=1.3.0&REQUEST=GetMap&LAYERS=places&STYLES="
                                       f"&CRS=EPSG:4326&BBOX={','.join(map(str, bbox))}&WIDTH={WIDTH}"
                                       f"&HEIGHT={HEIGHT}&FORMAT=image/png&TRANSPARENT=FALSE")
    assert status == 200, body[:300]
    ours = ink(decode(body)[:3].astype(int))
    import shutil
    shutil.copy(FONTS[script], tmp_path / "font.ttf")
    (tmp_path / "index.html").write_text(f"""<!doctype html><html><head><meta charset="utf-8">
<style>@font-face {{ font-family: 'Label'; src: url(font.ttf); }}
body {{ margin: 0; background: #fff; }}
#t {{ width: {WIDTH}px; height: {HEIGHT}px; font: {SIZE}px 'Label'; line-height: {HEIGHT}px;
     text-align: center; color: #000; white-space: nowrap; }}</style></head>
<body><div id="t">{text}</div><script>document.fonts.ready.then(() => {{ window.ready = true; }});</script>
</body></html>""")
    handler = lambda *a, **k: Static(*a, directory=str(tmp_path), **k)  # noqa: E731
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        browser.get(f"http://127.0.0.1:{httpd.server_address[1]}/index.html")
        WebDriverWait(browser, 30).until(lambda d: d.execute_script("return window.ready === true"))
        theirs = ink(decode(browser.find_element("id", "t").screenshot_as_png)[:3].astype(int))
    finally:
        httpd.shutdown()
    from PIL import Image
    from conftest import ROOT
    out = ROOT / "var" / "test-output"
    out.mkdir(parents=True, exist_ok=True)
    h, w = max(ours.shape[0], theirs.shape[0]), ours.shape[1] + theirs.shape[1] + 10
    side = np.full((h, w), 255, np.uint8)
    side[:ours.shape[0], :ours.shape[1]] = np.where(ours, 0, 255)
    side[:theirs.shape[0], ours.shape[1] + 10:] = np.where(theirs, 0, 255)
    Image.fromarray(side).save(out / f"shaping-{script}.png")
    score = overlap(ours, theirs)
    report = f"{script}: ours {ours.shape}, the browser's {theirs.shape}, overlap {score:.2f}"
    print(report)
    assert abs(ours.shape[1] - theirs.shape[1]) <= 4 and abs(ours.shape[0] - theirs.shape[0]) <= 4, report
    assert score >= 0.7, report
