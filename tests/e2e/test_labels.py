"""Labels on vector layers: the demo countries named at their poles of
inaccessibility and the demo cities beside their dots, in the bundled font.

A metatile's labels are placed once before it is cut: from the server's
debug output of placements, every label is placed once, no two overlap and
none reaches into the gutter; the four tiles put together differ from the
same layer without labels exactly inside the placed boxes, every box has
its text drawn (on both sides of a tile edge it crosses). The same places
drawn by MapServer with the same font are kept beside tessera's picture in
var/test-output/ for a look, and both carry about as much text."""
import io
import json
import os
import urllib.parse
import urllib.request

import numpy as np
import pytest

from conftest import ROOT, http_get, server_env, serving
from imaging import decode
from vectors import countries_and_places

COUNTRY_LABEL = '{ text: "{NAME}", size: 11, color: "#555555", halo: { color: "#ffffff", width: 2 }, priority: POP_EST }'
PLACE_LABEL = '{ text: "{name}", size: 12, halo: { width: 2 }, priority: 1e12, offset: [0, -9] }'


def layer(name, labels, gpkg):
    country = f"\n            - label: {COUNTRY_LABEL}" if labels else ""
    place = f"\n            - label: {PLACE_LABEL}" if labels else ""
    return f"""
  - name: {name}
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
    cache: {{ store: mem, metatile: [2, 2], gutter: 16 }}"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("labels")
    # The countries and cities MapServer draws.
    gpkg = countries_and_places(d / "places.gpkg")
    cfg = d / "labels.yaml"
    cfg.write_text("stores: { mem: { type: memory } }\nlayers:" + layer("labelled", True, gpkg)
                   + layer("plain", False, gpkg) + "\n")
    os.environ["TESSERA_LOG"] = "info,tessera::labels=debug"
    try:
        with serving(tmp_path_factory, "--log-format", "json", "--config", str(cfg)) as s:
            yield s
    finally:
        del os.environ["TESSERA_LOG"]


def placements(server):
    out = []
    for line in server.log_text().splitlines():
        if '"label placed"' in line:
            fields = json.loads(line)["fields"]
            fields["boxes"] = json.loads(fields["boxes"])
            out.append(fields)
    return out


def stitched(server, layer, z, x0, y0):
    rows = []
    for y in (y0, y0 + 1):
        row = []
        for x in (x0, x0 + 1):
            status, _, body = http_get(server, f"/tiles/{layer}/WebMercatorQuad/{z}/{x}/{y}.png")
            assert status == 200, body[:200]
            row.append(decode(body).astype(int))
        rows.append(np.concatenate(row, axis=2))
    return np.concatenate(rows, axis=1)


@pytest.mark.parametrize("z, x0, y0", [(3, 4, 2), (4, 8, 4)])
def test_a_metatiles_labels_are_placed_once_without_overlaps_and_drawn_whole_across_tile_edges(server, z, x0, y0):
    before = len(placements(server))
    labelled = stitched(server, "labelled", z, x0, y0)
    placed = placements(server)[before:]
    assert placed, "the metatile has labels"
    texts = [p["text"] for p in placed]
    assert len(texts) == len(set(texts)), f"a label placed twice: {texts}"
    size, margin = placed[0]["width"], placed[0]["margin"]
    assert size == 512 + 2 * 16 and margin == 16
    boxes = [(p["text"], b) for p in placed for b in p["boxes"]]
    for i, (ta, a) in enumerate(boxes):
        assert margin <= a[0] and margin <= a[1] and a[2] <= size - margin and a[3] <= size - margin, (ta, a)
        for tb, b in boxes[i + 1:]:
            if ta != tb:
                assert not (a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]), (ta, a, tb, b)
    plain = stitched(server, "plain", z, x0, y0)
    changed = (np.abs(labelled - plain).max(axis=0) > 0)
    inside = np.zeros_like(changed)
    crossing = 0
    for text, b in boxes:
        # Box corners in the stitched tiles (the gutter cut away), a pixel
        # more for antialiasing.
        left, top = int(b[0] - margin - 1), int(b[1] - margin - 1)
        right, bottom = int(np.ceil(b[2] - margin + 1)), int(np.ceil(b[3] - margin + 1))
        inside[max(top, 0):bottom, max(left, 0):right] = True
        drawn = changed[max(top, 0):bottom, max(left, 0):right]
        assert drawn.sum() >= 10, f"{text!r} is not drawn in its box {b}"
        # A label whose ink lies on both sides of the tiles' middle edge is
        # drawn on two tiles, whole: the tiles were cut from one picture.
        ink = np.argwhere(drawn) + [max(top, 0), max(left, 0)]
        if len(ink) and ((ink[:, 1].min() < 256 <= ink[:, 1].max()) or (ink[:, 0].min() < 256 <= ink[:, 0].max())):
            crossing += 1
    assert not (changed & ~inside).any(), "something was drawn outside every placed label's box"
    assert crossing > 0, "no label crossed a tile edge here: pick another metatile"


def test_labels_compared_with_mapserver_drawing_the_same_places(server):
    url = server_env("TESSERA_TEST_WMS_URL", "mapserver")
    bbox = "-2000000,3000000,5000000,8000000"
    query = {"SERVICE": "WMS", "VERSION": "1.3.0", "REQUEST": "GetMap", "STYLES": "", "CRS": "EPSG:3857",
             "BBOX": bbox, "WIDTH": 700, "HEIGHT": 500, "FORMAT": "image/png", "TRANSPARENT": "TRUE"}
    status, _, ours = http_get(server, "/wms?" + urllib.parse.urlencode({**query, "LAYERS": "labelled"}))
    assert status == 200, ours[:300]
    with urllib.request.urlopen(url + "?" + urllib.parse.urlencode({**query, "LAYERS": "country_names,places"}),
                                timeout=60) as r:
        theirs = r.read()
    a, b = decode(ours), decode(theirs)
    assert a.shape[1:] == b.shape[1:] == (500, 700)
    # Kept for a look: tessera left, MapServer right.
    from PIL import Image
    out = ROOT / "var" / "test-output"
    out.mkdir(parents=True, exist_ok=True)
    side = Image.new("RGBA", (1410, 500), "white")
    side.paste(Image.open(io.BytesIO(ours)).convert("RGBA"), (0, 0))
    side.paste(Image.open(io.BytesIO(theirs)).convert("RGBA"), (710, 0))
    side.save(out / "labels-vs-mapserver.png")
    print(f"side by side: {out / 'labels-vs-mapserver.png'}")

    def text_pixels(img):
        rgb = img[:3].astype(int)
        # The places' black text and the countries' grey text.
        return int(((rgb.max(axis=0) < 110) & (img[3] > 0)).sum())
    ours_text, theirs_text = text_pixels(a), text_pixels(b)
    assert theirs_text > 1000, "MapServer drew its labels"
    assert 0.5 < ours_text / theirs_text < 2, (ours_text, theirs_text)
    # The polygons themselves agree (land against sea, labels aside).
    land_a, land_b = a[3] > 0, b[3] > 0
    assert (land_a == land_b).mean() > 0.97
