"""MapLibre glyph ranges (`/fonts/{fontstack}/{start}-{end}.pbf`): decoded
with the reference schema (fixtures/glyphs.proto through protoc), each
field compared with the one TinySDF (MapLibre's own SDF generator) draws in
headless Chromium from the same font file, fontstacks falling back font by
font, caching headers, clear refusals, hostile font files named at start,
and MapLibre GL JS drawing text with them."""
import os
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request

import numpy as np
import pytest

from conftest import ROOT, serving
from sdf import BUNDLED, compile_schema, tinysdf_fields

DEJAVU = "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf"


@pytest.fixture(scope="module")
def proto(tmp_path_factory):
    return compile_schema(tmp_path_factory.mktemp("proto"))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not os.path.exists(DEJAVU):
        pytest.fail(f"{DEJAVU} is missing: install fonts-dejavu-core (scripts/install-deps does)", pytrace=False)
    d = tmp_path_factory.mktemp("glyphs")
    fonts = d / "fonts"
    fonts.mkdir()
    shutil.copy(DEJAVU, fonts)
    (fonts / "notes.txt").write_text("not a font, and not named like one")
    (fonts / "broken.ttf").write_bytes(b"\x00\x01\x00\x00" + b"\x00" * 60)
    cfg = d / "tessera.yaml"
    cfg.write_text(f"fonts: [{fonts}]\n"
                   f"layers:\n  - name: relief\n    source: {{ path: {ROOT}/data/shadedrelief-5400.tif }}\n")
    with serving(tmp_path_factory, "--config", cfg) as s:
        yield s


def get(server, path, headers=None):
    request = urllib.request.Request(server.url + path, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def decode(proto, body):
    message = proto.glyphs()
    message.ParseFromString(body)
    [stack] = message.stacks
    return stack


def test_fonts_json_lists_the_bundled_and_the_configured_fonts(server):
    import json
    status, headers, body = get(server, "/fonts.json")
    assert status == 200 and headers["Content-Type"] == "application/json"
    fonts = json.loads(body)
    assert fonts["Noto Sans Regular"]["family"] == "Noto Sans"
    assert fonts["DejaVu Sans Bold"]["style"] == "Bold"
    assert fonts["DejaVu Sans Bold"]["glyphs"] > 3000
    assert len(fonts) == 2, "the broken file was left out"
    log = server.log_text()
    assert "broken.ttf" in log and "left out" in log, log[-2000:]


def test_a_range_decodes_with_the_reference_schema(server, proto):
    status, headers, body = get(server, "/fonts/Noto%20Sans%20Regular/0-255.pbf")
    assert status == 200 and headers["Content-Type"] == "application/x-protobuf"
    assert "max-age" in headers["Cache-Control"] and headers["ETag"]
    stack = decode(proto, body)
    assert stack.name == "Noto Sans Regular" and stack.range == "0-255"
    ids = {g.id for g in stack.glyphs}
    assert set(range(32, 127)) <= ids, "printable ASCII"
    for g in stack.glyphs:
        assert len(g.bitmap) == (g.width + 6) * (g.height + 6), g.id
    status, headers2, _ = get(server, "/fonts/Noto%20Sans%20Regular/0-255.pbf",
                               {"If-None-Match": headers["ETag"]})
    assert status == 304 and headers2["ETag"] == headers["ETag"]


def test_a_fontstack_takes_each_glyph_from_the_first_font_that_has_it(server, proto):
    # Noto Sans (as bundled) has no box drawing (U+2500..); DejaVu Sans has.
    _, _, noto = get(server, "/fonts/Noto%20Sans%20Regular/9472-9727.pbf")
    _, _, dejavu = get(server, "/fonts/DejaVu%20Sans%20Bold/9472-9727.pbf")
    status, _, both = get(server, "/fonts/Noto%20Sans%20Regular,DejaVu%20Sans%20Bold/9472-9727.pbf")
    assert status == 200
    noto, dejavu, both = (
        {g.id: g for g in decode(proto, b).glyphs} for b in (noto, dejavu, both))
    only_dejavu = set(dejavu) - set(noto)
    assert 0x2500 in only_dejavu, "a box-drawing line from DejaVu only"
    assert all(both[c] == dejavu[c] for c in only_dejavu), "glyphs the first font lacks from the second"
    shared = set(noto) & set(dejavu)
    assert all(both[c] == noto[c] for c in shared), "the first font wins where both have a glyph"
    assert set(both) == set(noto) | set(dejavu)
    assert decode(proto, get(server, "/fonts/Noto%20Sans%20Regular,DejaVu%20Sans%20Bold/9472-9727.pbf")[2]).name \
        == "Noto Sans Regular,DejaVu Sans Bold"


def test_unknown_fonts_and_bad_ranges_are_refused_clearly(server):
    status, _, body = get(server, "/fonts/Comic%20Sans/0-255.pbf")
    assert status == 404 and b"Comic Sans" in body and b"Noto Sans Regular" in body and b"DejaVu Sans Bold" in body
    for bad in ("65536-65791.pbf", "1-256.pbf", "0-511.pbf", "a-b.pbf", "0-255.png", "0-255"):
        status, _, body = get(server, f"/fonts/Noto%20Sans%20Regular/{bad}")
        assert status == 400, (bad, status, body)
        assert b"docs: styles#fonts-and-glyphs" in body, body
    status, _, _ = get(server, "/fonts/" + urllib.parse.quote(",".join(["Noto Sans Regular"] * 9)) + "/0-255.pbf")
    assert status == 400


def test_hostile_font_files_named_in_the_config_stop_the_start(tmp_path, tmp_path_factory):
    big = tmp_path / "big.ttf"
    with open(big, "wb") as f:
        f.truncate(100 << 20)
    truncated = tmp_path / "truncated.ttf"
    truncated.write_bytes(BUNDLED.read_bytes()[:5000])
    for path, says in ((big, "more than the"), (truncated, "is not a font")):
        cfg = tmp_path / "hostile.yaml"
        cfg.write_text(f"fonts: [{path}]\n"
                       f"layers:\n  - name: relief\n    source: {{ path: {ROOT}/data/shadedrelief-5400.tif }}\n")
        out = subprocess.run([os.environ["TESSERA_BIN"], "check", str(cfg)], capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 1 and path.name in out.stderr and says in out.stderr, out.stderr


SAMPLE = "AQagjy@&%8ßÉøλЖ"


def test_each_field_matches_tinysdf_drawing_the_same_font(server, proto, browser, page_server):
    """TinySDF (fontSize 24, buffer 3, radius 8, cutoff 0.25, as MapLibre
    asks) draws the sample from the bundled font file in Chromium. TinySDF
    rasterises with the browser's font engine and measures the ink with
    canvas text metrics (hinted: a pixel tighter at the top or bottom than
    the outline's box, which tessera rounds out as FreeType does), so the
    tolerances, measured on this sample, are: width, left, top and advance
    within 1 pixel, height within 2; on the ink's pixels (either field
    above 64), aligned by the metrics (give or take a pixel), a mean difference of at most 12 of
    255 (0.38 pixel of distance; measured 4-10), no bias beyond 6 (either
    way; measured -3.7 to 1.1) and a 95th percentile of at most 40 (1.25
    pixels; measured 17-29)."""
    theirs = tinysdf_fields(browser, page_server, SAMPLE)
    ours = {}
    for start in sorted({ord(c) // 256 * 256 for c in SAMPLE}):
        _, _, body = get(server, f"/fonts/Noto%20Sans%20Regular/{start}-{start + 255}.pbf")
        ours.update({g.id: g for g in decode(proto, body).glyphs})
    # tessera's `top` is from the font's ascender (a space's top is minus
    # it), TinySDF's glyphTop from the baseline.
    _, _, body = get(server, "/fonts/Noto%20Sans%20Regular/0-255.pbf")
    ascender = -next(g for g in decode(proto, body).glyphs if g.id == 32).top
    report = []
    for c in SAMPLE:
        o, t = ours[ord(c)], theirs[ord(c)]
        report.append(f"{c}: ours {o.width}x{o.height} at {o.left},{o.top + ascender} adv {o.advance}; "
                      f"tinysdf {t['glyphWidth']}x{t['glyphHeight']} at {t['glyphLeft']},{t['glyphTop']} "
                      f"adv {t['glyphAdvance']:.2f}")
        assert abs(o.width - t["glyphWidth"]) <= 1 and abs(o.height - t["glyphHeight"]) <= 2, report[-1]
        assert abs(o.left - t["glyphLeft"]) <= 1 and abs(o.top + ascender - t["glyphTop"]) <= 1, report[-1]
        assert abs(o.advance - t["glyphAdvance"]) <= 1, report[-1]
        a = np.frombuffer(o.bitmap, np.uint8).reshape(o.height + 6, o.width + 6).astype(int)
        b = np.array(t["data"], int).reshape(t["height"], t["width"])
        # Aligned on the ink's top left corner (each bitmap starts 3 px
        # before it), compared where both have pixels.
        dy = (t["glyphTop"]) - (o.top + ascender)
        dx = o.left - t["glyphLeft"]
        best = None
        for sy in (dy - 1, dy, dy + 1):
            for sx in (dx - 1, dx, dx + 1):
                ay, by = max(0, -sy), max(0, sy)
                ax, bx = max(0, -sx), max(0, sx)
                h = min(a.shape[0] - ay, b.shape[0] - by)
                w = min(a.shape[1] - ax, b.shape[1] - bx)
                if h <= 0 or w <= 0:
                    continue
                pa, pb = a[ay:ay + h, ax:ax + w], b[by:by + h, bx:bx + w]
                diff = np.percentile(np.abs(pa - pb), 95)
                near = (pa > 64) | (pb > 64)
                bias = (pa - pb)[near].mean()
                if best is None or diff < best[0]:
                    best = (diff, bias, np.abs(pa - pb)[near].mean(), (sx - dx, sy - dy))
        report.append(f"{c}: p95 |diff| {best[0]:.0f}, bias {best[1]:.1f}, mean {best[2]:.1f}, shift {best[3]}")
        assert best[0] <= 40 and abs(best[1]) <= 6 and best[2] <= 12, "\n".join(report)
    print("\n".join(report))


def test_maplibre_draws_text_with_tessera_s_glyphs(server, browser, page_server):
    """A style whose `glyphs` is tessera's: MapLibre GL JS (the vendored
    build) asks for the ranges, draws the label, and draws it bolder from
    the bold font, with no error."""
    from selenium.webdriver.support.ui import WebDriverWait

    from imaging import decode as decode_png
    url, folder = page_server
    (folder / "map.html").write_text(f"""<!doctype html><html><head><meta charset="utf-8">
<link rel="stylesheet" href="{server.url}/static/maplibre-gl.css">
<script src="{server.url}/static/maplibre-gl.js"></script></head>
<body style="margin:0"><div id="map" style="width:600px;height:300px"></div><script>
window.errors = [];
const font = new URLSearchParams(location.search).get('font');
const map = new maplibregl.Map({{container: 'map', center: [0, 0], zoom: 2, fadeDuration: 0,
  attributionControl: false, style: {{
  version: 8, glyphs: '{server.url}/fonts/{{fontstack}}/{{range}}.pbf',
  sources: {{p: {{type: 'geojson', data: {{type: 'Feature', properties: {{name: 'Tessera Ångström'}},
    geometry: {{type: 'Point', coordinates: [0, 0]}}}}}}}},
  layers: [{{id: 'bg', type: 'background', paint: {{'background-color': '#ffffff'}}}},
           {{id: 't', type: 'symbol', source: 'p', layout: {{'text-field': ['get', 'name'],
             'text-font': [font], 'text-size': 32}}, paint: {{'text-color': '#000000'}}}}]}}}});
map.on('error', e => window.errors.push(String(e.error && e.error.message)));
map.on('idle', () => {{ window.idle = true; }});
</script></body></html>""")
    dark = {}
    for font in ("Noto Sans Regular", "DejaVu Sans Bold"):
        browser.get(f"{url}/map.html?font={urllib.parse.quote(font)}")
        WebDriverWait(browser, 60).until(lambda d: d.execute_script("return window.idle === true"))
        assert browser.execute_script("return window.errors") == []
        pixels = decode_png(browser.find_element("id", "map").screenshot_as_png)[:3].astype(int)
        ink = pixels.max(axis=0) < 100
        h, w = ink.shape
        from PIL import Image
        out = ROOT / "var" / "test-output"
        out.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.moveaxis(pixels.astype(np.uint8), 0, -1)).save(out / f"glyphs-{font.replace(' ', '-')}.png")
        assert ink[:, : w // 6].sum() == 0 and ink[:, -w // 6:].sum() == 0, "the label is in the middle"
        dark[font] = int(ink.sum())
        assert dark[font] > 500, (font, dark)
    assert dark["DejaVu Sans Bold"] > 1.2 * dark["Noto Sans Regular"], dark
