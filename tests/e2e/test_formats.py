"""Image formats users ask for: paletted PNG (PNG8) and HiDPI (@2x) tiles,
through the real binary."""
import json
import struct

from conftest import ROOT, fetch, serving
from imaging import decode

WMS = ("/wms?SERVICE=WMS&REQUEST=GetMap&VERSION=1.3.0&LAYERS=relief&STYLES=&CRS=EPSG:3857"
       "&BBOX=-10000000,-5000000,10000000,5000000&WIDTH=512&HEIGHT=256&TRANSPARENT=TRUE")


def png_header(body):
    """(width, height, colour type) of a PNG."""
    assert body[:8] == b"\x89PNG\r\n\x1a\n", body[:40]
    width, height, _depth, colour = struct.unpack(">IIBB", body[16:26])
    return width, height, colour


PALETTE, RGB, RGBA = 3, 2, 6


def relief_config(tmp_path_factory, formats):
    path = tmp_path_factory.mktemp("formats") / "tessera.yaml"
    path.write_text(f"""
layers:
  - name: relief
    source: {{ path: {ROOT}/data/shadedrelief-5400.tif }}
    formats: [{", ".join(formats)}]
""")
    return path


def test_wms_png8_is_paletted_and_smaller_by_either_name(tessera):
    status, full = fetch(tessera, f"{WMS}&FORMAT=image/png")
    assert status == 200 and png_header(full)[2] in (RGB, RGBA)
    for name in ("image/png8", "image/png;%20mode=8bit"):
        status, body = fetch(tessera, f"{WMS}&FORMAT={name}")
        assert status == 200
        assert png_header(body) == (512, 256, PALETTE)
        assert len(body) < 0.75 * len(full), (len(body), len(full))
    status, caps = fetch(tessera, "/wms?SERVICE=WMS&REQUEST=GetCapabilities&VERSION=1.3.0")
    assert b"<Format>image/png8</Format>" in caps


def test_a_png8_layer_serves_paletted_tiles_under_its_own_extension(tmp_path_factory):
    with serving(tmp_path_factory, "--config", str(relief_config(tmp_path_factory, ["png8", "jpeg"]))) as server:
        status, body = fetch(server, "/tiles/relief/WebMercatorQuad/2/1/1.png8")
        assert status == 200 and png_header(body) == (256, 256, PALETTE)
        assert fetch(server, "/tiles/relief/WebMercatorQuad/2/1/1.png")[0] == 404
        doc = json.loads(fetch(server, "/tiles/relief/WebMercatorQuad/tilejson.json")[1])
        assert doc["tiles"][0].endswith("/tiles/relief/WebMercatorQuad/{z}/{x}/{y}.png8")
        status, caps = fetch(server, "/wmts?SERVICE=WMTS&REQUEST=GetCapabilities")
        assert b"<Format>image/png8</Format>" in caps and b"{TileCol}.png8" in caps
        status, body = fetch(server, "/wmts?SERVICE=WMTS&REQUEST=GetTile&VERSION=1.0.0&LAYER=relief&STYLE=default"
                                     "&TILEMATRIXSET=WebMercatorQuad&TILEMATRIX=2&TILEROW=1&TILECOL=1&FORMAT=image/png8")
        assert status == 200 and png_header(body)[2] == PALETTE


def test_hidpi_tiles_have_twice_the_pixels_of_the_same_area(tessera):
    status, normal = fetch(tessera, "/tiles/relief/WebMercatorQuad/3/4/2.png")
    assert status == 200 and png_header(normal)[:2] == (256, 256)
    status, hidpi = fetch(tessera, "/tiles/relief/WebMercatorQuad/3/4/2@2x.png")
    assert status == 200 and png_header(hidpi)[:2] == (512, 512)
    # Rendered from the source at twice the resolution, not upscaled: the
    # same area as a WMS map of 512x512 pixels.
    from imaging import decode
    import numpy as np
    bbox = "0,5009377.085697311,5009377.085697311,10018754.171394622"
    status, wms = fetch(tessera, "/wms?SERVICE=WMS&REQUEST=GetMap&VERSION=1.3.0&LAYERS=relief&STYLES="
                                 f"&CRS=EPSG:3857&BBOX={bbox}&WIDTH=512&HEIGHT=512&FORMAT=image/png&TRANSPARENT=TRUE")
    assert status == 200
    # A transparent map keeps its alpha channel; the tile, opaque, is RGB.
    a, b = decode(hidpi).astype(int), decode(wms).astype(int)
    assert a.shape[0] == 3 and b.shape[0] == 4 and (b[3] == 255).all()
    assert np.abs(a - b[:3]).mean() < 2.0, np.abs(a - b[:3]).mean()
    doc = json.loads(fetch(tessera, "/tiles/relief/WebMercatorQuad/tilejson.json?tile_scale=2")[1])
    assert doc["tiles"][0].endswith("/{z}/{x}/{y}@2x.png") and doc["tileSize"] == 512
    assert json.loads(fetch(tessera, "/tiles/relief/WebMercatorQuad/tilejson.json")[1])["tileSize"] == 256
    assert fetch(tessera, "/tiles/relief/WebMercatorQuad/tilejson.json?tile_scale=3")[0] == 400
    # TMS rows count from the bottom; @2x works there too.
    status, tms = fetch(tessera, "/tms/1.0.0/relief/WebMercatorQuad/3/4/5@2x.png")
    assert status == 200 and tms == hidpi


def test_mixed_tiles_are_jpeg_where_opaque_and_png_where_not(tmp_path_factory):
    path = tmp_path_factory.mktemp("mixed") / "tessera.yaml"
    # The Luxembourg DEM covers part of a zoom-8 tile: opaque tiles inside
    # it, transparent ones at its border.
    path.write_text(f"""
layers:
  - name: elevation
    source: {{ path: {ROOT}/data/elev.tif }}
    style: {{ type: hillshade }}
    formats: [mixed]
""")
    import urllib.request
    with serving(tmp_path_factory, "--config", str(path)) as server:
        def get(p):
            with urllib.request.urlopen(server.url + p, timeout=60) as r:
                return r.headers["Content-Type"], r.read()
        # Inside Luxembourg (zoom 11, x 1058, y 696): opaque, so JPEG.
        ctype, body = get("/tiles/elevation/WebMercatorQuad/11/1058/696.jpeg-png")
        assert ctype == "image/jpeg" and body[:3] == b"\xff\xd8\xff"
        # The DEM's north-west corner: partly transparent, so PNG.
        ctype, body = get("/tiles/elevation/WebMercatorQuad/8/132/86.jpeg-png")
        assert ctype == "image/png" and png_header(body)[2] in (RGBA, PALETTE)
        assert (decode(body)[3] == 0).any(), "the corner keeps its transparent pixels"
        status, caps = fetch(server, "/wmts?SERVICE=WMTS&REQUEST=GetCapabilities")
        assert b"<Format>image/vnd.jpeg-png</Format>" in caps
