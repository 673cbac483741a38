"""tessera in front of upstream tile services, with a second tessera process
as the upstream: an XYZ template (rows from the top), a TMS template
(`{-y}`), and a WMTS layer read from its capabilities (REST and KVP). Where
the grid and format are the upstream's and nothing is styled, tiles pass
through byte for byte, one upstream request each; other grids are stitched
from the covering tiles and warped; a tile the upstream lacks is
transparent, not an error."""
import urllib.parse

import numpy as np
import pytest

from conftest import ROOT, fetch, serving
from imaging import decode


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    config = tmp_path_factory.mktemp("upstream") / "tessera.yaml"
    # Another PNG compression than the cascade's: a tile that was decoded
    # and encoded again would not be byte-identical.
    config.write_text(f"""
encoding: {{ png_compression: high }}
stores: {{ mem: {{ type: memory }} }}
layers:
  - name: relief
    source: {{ path: {ROOT}/data/shadedrelief-5400.tif }}
    grids: [WebMercatorQuad, WorldCRS84Quad]
    max_zoom: 8
    cache: {{ store: mem }}
""")
    with serving(tmp_path_factory, "--config", str(config)) as server:
        yield server


def upstream_requests(server, prefix):
    """Access-log lines of requests whose target starts with `prefix`."""
    return sum(1 for line in server.log_text().splitlines()
               if "tessera::access" in line and f'target="{prefix}' in line)


@pytest.fixture(scope="module")
def cascade(upstream, tmp_path_factory):
    u = urllib.parse.urlsplit(upstream.url)
    base = upstream.url
    config = tmp_path_factory.mktemp("cascade") / "tessera.yaml"
    config.write_text(f"""
gdal: {{ allowed_private_hosts: ["{u.hostname}:{u.port}"] }}
stores: {{ mem: {{ type: memory }} }}
layers:
  - name: xyz
    source: {{ type: xyz, url: "{base}/tiles/relief/WebMercatorQuad/{{z}}/{{x}}/{{y}}.png", max_zoom: 12 }}
    grids: [WebMercatorQuad, WorldCRS84Quad]
    formats: [png, jpeg]
    cache: {{ store: mem }}
  - name: tms
    source: {{ type: xyz, url: "{base}/tms/1.0.0/relief/WebMercatorQuad/{{z}}/{{x}}/{{-y}}.png", max_zoom: 8 }}
    grids: [WebMercatorQuad]
    cache: {{ store: mem }}
  - name: wmts
    source: {{ type: wmts, url: "{base}/wmts/1.0.0/WMTSCapabilities.xml", layer: relief, matrix_set: WebMercatorQuad }}
    grids: [WebMercatorQuad, WorldCRS84Quad]
    cache: {{ store: mem }}
  - name: wmtskvp
    source: {{ type: wmts, url: "{base}/wmts", layer: relief, matrix_set: WorldCRS84Quad }}
    grids: [WorldCRS84Quad]
    cache: {{ store: mem }}
""")
    with serving(tmp_path_factory, "--config", str(config)) as server:
        yield server


def test_tiles_of_the_upstreams_grid_pass_through_byte_for_byte(upstream, cascade):
    for layer, tile in [("xyz", "3/4/2"), ("tms", "4/8/5"), ("wmts", "5/16/10")]:
        before = upstream_requests(upstream, "/tiles/relief") + upstream_requests(upstream, "/tms/") \
            + upstream_requests(upstream, "/wmts/")
        status, ours = fetch(cascade, f"/tiles/{layer}/WebMercatorQuad/{tile}.png")
        assert status == 200, ours
        after = upstream_requests(upstream, "/tiles/relief") + upstream_requests(upstream, "/tms/") \
            + upstream_requests(upstream, "/wmts/")
        _, theirs = fetch(upstream, f"/tiles/relief/WebMercatorQuad/{tile}.png")
        assert ours == theirs, layer
        assert after - before == 1, (layer, after - before)
    # WMTS by KVP, in WorldCRS84Quad.
    status, ours = fetch(cascade, "/tiles/wmtskvp/WorldCRS84Quad/2/3/1.png")
    assert status == 200
    assert ours == fetch(upstream, "/tiles/relief/WorldCRS84Quad/2/3/1.png")[1]


def rgb_difference(a, b):
    d = np.abs(a[:3].astype(np.int16) - b[:3].astype(np.int16))
    return d.mean()


def test_other_grids_and_formats_are_stitched_from_the_covering_tiles(upstream, cascade):
    # WorldCRS84Quad from Web Mercator tiles: stitched and warped.
    status, ours = fetch(cascade, "/tiles/xyz/WorldCRS84Quad/3/9/2.png")
    assert status == 200, ours
    _, theirs = fetch(upstream, "/tiles/relief/WorldCRS84Quad/3/9/2.png")
    assert rgb_difference(decode(ours), decode(theirs)) < 6
    # JPEG of the PNG upstream: the same pixels, re-encoded.
    status, jpeg = fetch(cascade, "/tiles/xyz/WebMercatorQuad/4/9/5.jpg")
    assert status == 200 and jpeg[:3] == b"\xff\xd8\xff"
    _, png = fetch(upstream, "/tiles/relief/WebMercatorQuad/4/9/5.png")
    assert rgb_difference(decode(jpeg), decode(png)) < 4


def test_a_tile_the_upstream_does_not_have_is_transparent(cascade):
    # The upstream layer stops at zoom 8: its zoom-10 tiles are 404 there.
    status, body = fetch(cascade, "/tiles/xyz/WebMercatorQuad/10/540/360.png")
    assert status == 200, body
    assert decode(body).shape[0] == 4 and decode(body)[3].max() == 0


def test_a_metatile_asks_for_each_covering_tile_once_and_keeps_its_pixels(upstream, cascade):
    """A JPEG metatile from PNG tiles: the covering tiles are fetched ahead
    of the render and taken by it, each asked once, and the pixels are
    the upstream's (cropped, not warped: the grids are the same)."""
    import re

    def targets():
        return re.findall(r'target="(/tiles/relief/WebMercatorQuad/6/[^"]+)"', upstream.log_text())

    before = len(targets())
    status, jpeg = fetch(cascade, "/tiles/xyz/WebMercatorQuad/6/41/22.jpg")
    assert status == 200 and jpeg[:3] == b"\xff\xd8\xff"
    asked = targets()[before:]
    assert asked, "no upstream tile was asked for"
    assert len(asked) == len(set(asked)), sorted(asked)
    assert "/tiles/relief/WebMercatorQuad/6/41/22.png" in asked
    _, png = fetch(upstream, "/tiles/relief/WebMercatorQuad/6/41/22.png")
    assert rgb_difference(decode(jpeg), decode(png)) < 4
