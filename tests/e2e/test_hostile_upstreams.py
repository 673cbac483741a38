"""Hostile upstreams against the real binary: an upstream tessera is allowed
to reach (listed in gdal.allowed_private_hosts) that tries to make it fetch
from elsewhere, answers images that declare huge sizes, XML with entities,
capabilities with 100,000 CRSs and damaged tiles. Each served by this test on
127.0.0.1."""
import http.server
import os
import struct
import subprocess
import threading
import urllib.parse
import urllib.request
import zlib

import pytest

from conftest import ROOT, fetch, free_port, serving


class Hostile:
    """An HTTP server on 127.0.0.1 whose answers the test sets by what the
    request target contains: `routes[part] = (status, content_type, body)`,
    the longest matching part first; it records the requests it gets."""

    def __init__(self):
        self.routes = {}
        self.requests = []
        hostile = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                hostile.requests.append(self.path)
                for part, (status, content_type, body) in sorted(hostile.routes.items(),
                                                                 key=lambda kv: -len(kv[0])):
                    if part in self.path:
                        break
                else:
                    status, content_type, body = 404, "text/plain", b"no such path"
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.port = free_port()
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.port}"

    def close(self):
        self.httpd.shutdown()


@pytest.fixture
def hostile():
    h = Hostile()
    yield h
    h.close()


@pytest.fixture
def canary():
    """A server nobody may reach: it would answer a secret."""
    c = Hostile()
    c.routes["/"] = (200, "image/png", b"SECRET-FROM-AN-INTERNAL-SERVICE")
    yield c
    c.close()


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_declaring(width, height, idat=b""):
    """A small, well-formed PNG whose header declares width x height."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr)
            + png_chunk(b"IDAT", zlib.compress(idat or b"\0" * 1000)) + png_chunk(b"IEND", b""))


def write(tmp_path, text):
    path = tmp_path / "tessera.yaml"
    path.write_text(text)
    return path


def limited_binary(tmp_path, gib):
    """A wrapper of TESSERA_BIN that runs it with `gib` GiB of address
    space: an allocation of a size read from outside input aborts it."""
    prlimit = "/usr/bin/prlimit"
    assert os.access(prlimit, os.X_OK), "prlimit (util-linux) is missing"
    wrapper = tmp_path / "tessera-limited"
    wrapper.write_text(f"#!/bin/sh\nexec {prlimit} --as={gib << 30} {os.environ['TESSERA_BIN']} \"$@\"\n")
    wrapper.chmod(0o755)
    return str(wrapper)


def tessera_capabilities(tmp_path_factory):
    """The WMTS capabilities of a real tessera serving the relief as layer
    `relief` (stopped since), and the port it listened on."""
    upstream_config = write(tmp_path_factory.mktemp("up"), f"""
layers:
  - name: relief
    source: {{ path: {ROOT}/data/shadedrelief-5400.tif }}
""")
    with serving(tmp_path_factory, "--config", str(upstream_config)) as upstream:
        caps = urllib.request.urlopen(upstream.url + "/wmts/1.0.0/WMTSCapabilities.xml").read().decode()
    return caps, urllib.parse.urlsplit(upstream.url).port


def test_a_wmts_upstream_cannot_send_tessera_to_a_port_or_address_never_allowed(
        hostile, canary, tmp_path, tmp_path_factory):
    # The capabilities are a real tessera's, with the tile template moved to
    # another port (the canary's), written once as an address literal and
    # once as the allowed name: neither was ever allowed.
    caps, port = tessera_capabilities(tmp_path_factory)
    assert f"127.0.0.1:{port}" in caps
    for host in ("127.0.0.1", "localhost"):
        evil = caps.replace(f"http://127.0.0.1:{port}", f"http://{host}:{canary.port}")
        hostile.routes["/wmts"] = (200, "application/xml", evil.encode())
        config = write(tmp_path, f"""
gdal: {{ allowed_private_hosts: ["{host}:{hostile.port}"] }}
layers:
  - name: evil
    source: {{ type: wmts, url: "http://{host}:{hostile.port}/wmts", layer: relief, matrix_set: WebMercatorQuad,
              http: {{ retries: 0 }} }}
    grids: [WebMercatorQuad, WorldCRS84Quad]
""")
        with serving(tmp_path_factory, "--config", str(config)) as server:
            for path in ("/tiles/evil/WebMercatorQuad/2/1/1.png", "/tiles/evil/WorldCRS84Quad/2/1/1.png"):
                status, body = fetch(server, path)
                assert status == 502, (host, path, status, body[:300])
                assert b"SECRET" not in body and str(canary.port).encode() not in body, body
            assert canary.requests == [], (host, canary.requests)
            assert "private address" in server.log_text() or "private addresses" in server.log_text()


def test_an_upstream_image_declaring_60000_pixels_square_is_refused_before_any_allocation(
        hostile, tmp_path, tmp_path_factory):
    # 1 KB that would make the decoder ask for 14.4 GB. The server runs with
    # 6 GB of address space: an allocation of the declared size aborts it.
    bomb = png_declaring(60000, 60000)
    assert len(bomb) < 2000
    hostile.routes["/t/"] = (200, "image/png", bomb)
    config = write(tmp_path, f"""
gdal: {{ allowed_private_hosts: ["127.0.0.1:{hostile.port}"] }}
layers:
  - name: bomb
    source: {{ type: xyz, url: "{hostile.url}/t/{{z}}/{{x}}/{{y}}.png", max_zoom: 8, http: {{ retries: 0 }} }}
    grids: [WebMercatorQuad, WorldCRS84Quad]
""")
    real = os.environ["TESSERA_BIN"]
    os.environ["TESSERA_BIN"] = limited_binary(tmp_path, 6)
    try:
        with serving(tmp_path_factory, "--config", str(config)) as server:
            # Stitched and warped (another grid), and passed through.
            for path in ("/tiles/bomb/WorldCRS84Quad/3/2/1.png", "/tiles/bomb/WebMercatorQuad/3/2/1.png"):
                status, body = fetch(server, path)
                assert status == 502, (path, status, body[:300])
            assert server.proc.poll() is None, server.log_text()[-3000:]
            assert "60000x60000" in server.log_text()
            # Not cached: the next answer asks again.
            asked = len(hostile.requests)
            assert fetch(server, "/tiles/bomb/WebMercatorQuad/3/2/1.png")[0] == 502
            assert len(hostile.requests) > asked
    finally:
        os.environ["TESSERA_BIN"] = real


@pytest.mark.parametrize("side", [100000, 60000, 0])
def test_wmts_capabilities_declaring_huge_tiles_are_refused_before_any_canvas(
        side, hostile, tmp_path, tmp_path_factory):
    caps, _ = tessera_capabilities(tmp_path_factory)
    assert "<TileWidth>256</TileWidth>" in caps
    evil = caps.replace("<TileWidth>256</TileWidth>", f"<TileWidth>{side}</TileWidth>") \
        .replace("<TileHeight>256</TileHeight>", f"<TileHeight>{side}</TileHeight>")
    hostile.routes["/wmts"] = (200, "application/xml", evil.encode())
    config = write(tmp_path, f"""
gdal: {{ allowed_private_hosts: ["127.0.0.1:{hostile.port}"] }}
layers:
  - name: evil
    source: {{ type: wmts, url: "{hostile.url}/wmts", layer: relief, matrix_set: WebMercatorQuad,
              http: {{ retries: 0 }} }}
    grids: [WebMercatorQuad, WorldCRS84Quad]
""")
    # The capabilities are read at start: the layer is refused with a
    # message that names the size, and nothing is allocated for it.
    result = subprocess.run([limited_binary(tmp_path, 6), "check", str(config)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode != 0, result.stdout
    assert result.returncode > 0, f"killed by signal {-result.returncode}: {result.stderr[-2000:]}"
    assert f"tiles of {side}x{side} pixels" in result.stderr, result.stderr[-2000:]


@pytest.mark.parametrize("damage", ["html after the signature", "half a png", "wrong size"])
def test_a_damaged_pass_through_tile_is_never_cached(damage, hostile, tmp_path, tmp_path_factory):
    upstream_config = write(tmp_path_factory.mktemp("up"), f"""
layers:
  - name: relief
    source: {{ path: {ROOT}/data/shadedrelief-5400.tif }}
""")
    with serving(tmp_path_factory, "--config", str(upstream_config)) as upstream:
        tile = urllib.request.urlopen(upstream.url + "/tiles/relief/WebMercatorQuad/2/1/1.png").read()
    bad = {
        "html after the signature": b"\x89PNG\r\n\x1a\n<html><body>502 Bad Gateway</body></html>",
        "half a png": tile[: len(tile) // 2],
        "wrong size": png_declaring(512, 512),
    }[damage]
    hostile.routes["/t/"] = (200, "image/png", bad)
    config = write(tmp_path, f"""
gdal: {{ allowed_private_hosts: ["127.0.0.1:{hostile.port}"] }}
stores: {{ disk: {{ type: file, path: {tmp_path}/cache }} }}
layers:
  - name: pass
    source: {{ type: xyz, url: "{hostile.url}/t/{{z}}/{{x}}/{{y}}.png", max_zoom: 8, http: {{ retries: 0 }} }}
    cache: {{ store: disk }}
""")
    with serving(tmp_path_factory, "--config", str(config)) as server:
        status, body = fetch(server, "/tiles/pass/WebMercatorQuad/2/1/1.png")
        assert status == 502, (status, body[:200])
        assert b"<html>" not in body
        assert not list((tmp_path / "cache").rglob("*.png")), "a damaged tile was stored"
        hostile.routes["/t/"] = (200, "image/png", tile)
        with urllib.request.urlopen(server.url + "/tiles/pass/WebMercatorQuad/2/1/1.png") as r:
            assert r.headers["X-Cache"] == "MISS"
            assert r.read() == tile


def entity_bomb(root, inner=None):
    """One 1 MB entity referenced a thousand times (in `inner`, an element
    inside `root`, when given): 1 GB once expanded."""
    big = "x" * (1 << 20)
    refs = "&e;" * 1000
    body = f'<{inner} code="X">{refs}</{inner}>' if inner else refs
    return (f'<?xml version="1.0"?><!DOCTYPE {root} [<!ENTITY e "{big}">]>'
            f'<{root}>{body}</{root}>').encode()


def wms_capabilities(crs_list):
    crs = "".join(f"<CRS>{c}</CRS>" for c in crs_list)
    return f"""<?xml version="1.0"?>
<WMS_Capabilities version="1.3.0" xmlns="http://www.opengis.net/wms">
<Service><Name>WMS</Name><Title>t</Title></Service>
<Capability><Request><GetMap><Format>image/png</Format></GetMap></Request>
<Layer><Title>root</Title>{crs}
<Layer><Name>relief</Name><Title>r</Title>
<EX_GeographicBoundingBox><westBoundLongitude>-180</westBoundLongitude><eastBoundLongitude>180</eastBoundLongitude>
<southBoundLatitude>-85</southBoundLatitude><northBoundLatitude>85</northBoundLatitude></EX_GeographicBoundingBox>
</Layer></Layer></Capability></WMS_Capabilities>""".encode()


def wms_config(tmp_path, hostile):
    return write(tmp_path, f"""
gdal: {{ allowed_private_hosts: ["127.0.0.1:{hostile.port}"] }}
layers:
  - name: cascade
    source: {{ type: wms, url: "{hostile.url}/wms", layers: [relief], http: {{ retries: 0 }} }}
""")


def check(config):
    return subprocess.run([os.environ["TESSERA_BIN"], "check", str(config)],
                          capture_output=True, text=True, timeout=300)


def test_capabilities_declaring_entities_are_refused_without_expanding_them(hostile, tmp_path):
    hostile.routes["/wms"] = (200, "text/xml", entity_bomb("WMS_Capabilities"))
    r = check(wms_config(tmp_path, hostile))
    assert r.returncode != 0
    assert "declares XML entities" in r.stderr, r.stderr[-2000:]
    assert len(r.stderr) < 20_000, f"{len(r.stderr)} bytes of messages"


def test_an_exception_with_a_quadratic_entity_is_a_short_log_line_not_a_gigabyte(
        hostile, tmp_path, tmp_path_factory):
    hostile.routes["/wms"] = (200, "text/xml", wms_capabilities(["EPSG:3857"]))
    with serving(tmp_path_factory, "--config", str(wms_config(tmp_path, hostile))) as server:
        hostile.routes["REQUEST=GetMap"] = (
            200, "application/vnd.ogc.se_xml", entity_bomb("ServiceExceptionReport", "ServiceException"))
        status, body = fetch(server, "/tiles/cascade/WebMercatorQuad/2/1/1.png")
        assert status == 502, (status, body[:300])
        assert len(body) < 1000
        longest = max(len(line) for line in server.log_text().splitlines())
        assert longest < 4000, f"a log line of {longest} bytes"
        assert any("GetMap" in p for p in hostile.requests), hostile.requests


def test_capabilities_listing_100000_crss_open_and_keep_the_usable_one(hostile, tmp_path):
    # EPSG:3857 last of 100,000: once a minute of CPU; what is parsed now is
    # bounded, and the common web CRS is still found.
    codes = [f"EPSG:{100000 + i}" for i in range(100_000)] + ["EPSG:3857"]
    hostile.routes["/wms"] = (200, "text/xml", wms_capabilities(codes))
    r = check(wms_config(tmp_path, hostile))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "cascade" in r.stdout, r.stdout
