"""A STAC API as a source (`type: stac, stac_api: ...`): stac-fastapi-pgstac
(scripts/stac-api) over the same pgSTAC catalogue as test_stac_source, so
the same search must give the same tiles byte for byte as through pgSTAC's
SQL, with the API's paging (`next` links with a POST body) followed. A STAC
API that pages forever or answers megabytes is a faulty server written
here (no real one can be made to), named in the log, never a hang."""
import contextlib
import http.server
import json
import os
import socket
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import http_get, serving
from test_stac_source import PIXEL, TILES, catalogue, item, lonlat_bounds, make_scene, sql, tile_of  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
BY_CLOUD = "{ collections: [scenes], sortby: [{ field: properties.eo:cloud_cover, direction: asc }] }"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def stac_api(catalogue):  # noqa: F811
    """stac-fastapi-pgstac over the catalogue: its URL."""
    dsn, _, _ = catalogue
    port = free_port()
    proc = subprocess.Popen([str(ROOT / "scripts/stac-api"), "serve", "--dsn", dsn, "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                assert json.load(r)["type"] == "Catalog"
            break
        except (OSError, ValueError):
            assert proc.poll() is None, f"stac-fastapi-pgstac stopped: {proc.stderr.read()}"
            assert time.monotonic() < deadline, "stac-fastapi-pgstac did not answer within 60 s"
            time.sleep(0.3)
    yield url, port
    proc.terminate()
    proc.wait(timeout=20)


def layers(dsn, api, port):
    return f"""
gdal: {{ allowed_private_hosts: ["127.0.0.1:{port}"] }}
layers:
  - name: api_first
    source: {{ type: stac, stac_api: "{api}", search: {BY_CLOUD}, asset: visual, resampling: nearest }}
    cache: {{ store: none }}
  - name: api_paged
    source: {{ type: stac, stac_api: "{api}", search: {BY_CLOUD}, asset: visual, resampling: nearest, page: 1 }}
    cache: {{ store: none }}
  - name: api_mean
    source: {{ type: stac, stac_api: "{api}", search: {{ collections: [scenes] }}, asset: visual, method: mean,
               resampling: nearest }}
    cache: {{ store: none }}
  - name: api_cached
    source: {{ type: stac, stac_api: "{api}", search: {BY_CLOUD}, asset: visual, resampling: nearest }}
  - name: pg_first
    source: {{ type: stac, pgstac: {dsn}, search: {BY_CLOUD}, asset: visual, resampling: nearest }}
    cache: {{ store: none }}
  - name: pg_mean
    source: {{ type: stac, pgstac: {dsn}, search: {{ collections: [scenes] }}, asset: visual, method: mean,
               resampling: nearest }}
    cache: {{ store: none }}
"""


@pytest.fixture(scope="module")
def server(catalogue, stac_api, tmp_path_factory):  # noqa: F811
    dsn, _, _ = catalogue
    api, port = stac_api
    config = tmp_path_factory.mktemp("stacapi") / "tessera.yaml"
    config.write_text(layers(dsn, api, port))
    with serving(tmp_path_factory, "--config", str(config)) as s:
        yield s


@pytest.mark.parametrize("z, x, y", TILES)
def test_the_api_gives_the_bytes_pgstac_gives(server, z, x, y):
    for method in ("first", "mean"):
        through_sql = server.get(f"/tiles/pg_{method}/WebMercatorQuad/{z}/{x}/{y}.png")[2]
        assert server.get(f"/tiles/api_{method}/WebMercatorQuad/{z}/{x}/{y}.png")[2] == through_sql, method
    # Asked one item a page, following the API's `next` links.
    assert server.get(f"/tiles/api_paged/WebMercatorQuad/{z}/{x}/{y}.png")[2] == \
        server.get(f"/tiles/pg_first/WebMercatorQuad/{z}/{x}/{y}.png")[2]


def test_a_new_scene_reaches_the_cached_tiles_it_covers_through_the_api(server, catalogue):  # noqa: F811
    dsn, _, folder = catalogue
    inside, outside = tile_of(6.06, 49.74, 14), tile_of(6.19, 49.79, 14)

    def get(t):
        status, headers, body = http_get(server, "/tiles/api_cached/WebMercatorQuad/%d/%d/%d.png" % t)
        assert status == 200, body[:300]
        return headers["X-Cache"], body

    before = {t: get(t)[1] for t in (inside, outside)}
    assert get(inside) == ("HIT", before[inside])
    w, s, e, n = lonlat_bounds(*inside)
    west, north = round(w / PIXEL) * PIXEL, round(n / PIXEL) * PIXEL
    path = make_scene(folder / "api-clear.tif", 97, west, north)
    sql(dsn, "SELECT create_item(%s::jsonb)", json.dumps(item("api-clear", path, west, north, 0, 22)))
    try:
        status, body = get(inside)
        assert status == "MISS" and body != before[inside]
        assert body == server.get("/tiles/pg_first/WebMercatorQuad/%d/%d/%d.png" % inside)[2]
        assert get(outside) == ("HIT", before[outside])
    finally:
        sql(dsn, "SELECT delete_item('api-clear')")


def test_a_search_the_api_refuses_is_named_at_start(catalogue, stac_api, tmp_path):  # noqa: F811
    api, port = stac_api
    config = tmp_path / "bad.yaml"
    config.write_text(f"""
gdal: {{ allowed_private_hosts: ["127.0.0.1:{port}"] }}
layers:
  - name: bad
    source: {{ type: stac, stac_api: "{api}", asset: visual,
               search: {{ collections: [scenes], datetime: "not-a-date" }} }}
""")
    r = subprocess.run([os.environ["TESSERA_BIN"], "check", str(config)], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "answered 400" in r.stderr, r.stderr


def test_a_private_api_is_refused_without_allowed_private_hosts(stac_api, tmp_path):
    api, _ = stac_api
    config = tmp_path / "private.yaml"
    config.write_text(f"layers:\n  - name: p\n    source: {{ type: stac, stac_api: \"{api}\", asset: visual }}\n")
    r = subprocess.run([os.environ["TESSERA_BIN"], "check", str(config)], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "private address" in r.stderr, r.stderr


class Hostile(http.server.BaseHTTPRequestHandler):
    """A STAC API whose every search page has one item and a `next` link
    (it never ends), or (`/huge/`) answers 4 MB of item properties."""
    item = None

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.searches += 1
        feature = dict(self.item)
        if self.path.startswith("/huge/"):
            feature = {**feature, "properties": {**feature["properties"], "padding": "x" * (4 << 20)}}
        page = {"type": "FeatureCollection", "features": [feature],
                "links": [{"rel": "next", "method": "POST", "href": self.path,
                           "body": {**body, "token": f"next:{self.server.searches}"}}]}
        data = json.dumps(page).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/geo+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        data = json.dumps({"type": "Collection", "id": "scenes",
                           "extent": {"spatial": {"bbox": [[5.9, 49.6, 6.3, 49.9]]}}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextlib.contextmanager
def hostile(scene):
    Hostile.item = scene
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    httpd.searches = 0
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield httpd
    finally:
        httpd.shutdown()


def test_an_api_that_pages_forever_or_answers_megabytes_is_bounded(catalogue, tmp_path_factory):  # noqa: F811
    _, items, _ = catalogue
    with hostile(items[1]) as httpd:
        port = httpd.server_address[1]
        config = tmp_path_factory.mktemp("hostile") / "tessera.yaml"
        config.write_text(f"""
gdal: {{ allowed_private_hosts: ["127.0.0.1:{port}"] }}
layers:
  - name: forever
    source: {{ type: stac, stac_api: "http://127.0.0.1:{port}/", search: {{ collections: [scenes] }},
               asset: visual, method: mean, page: 1, max_items: 12 }}
    cache: {{ store: none }}
""")
        with serving(tmp_path_factory, "--config", str(config)) as server:
            z, x, y = TILES[0]
            asked_before = httpd.searches
            status, _, body = http_get(server, f"/tiles/forever/WebMercatorQuad/{z}/{x}/{y}.png")
            assert status == 200, body[:300]
            # One item per page, never an end: stopped at max_items pages.
            assert 1 <= httpd.searches - asked_before <= 12
        # A page past http.max_body_bytes is refused, and said so.
        huge = config.with_name("huge.yaml")
        huge.write_text(f"""
gdal: {{ allowed_private_hosts: ["127.0.0.1:{port}"] }}
layers:
  - name: huge
    source: {{ type: stac, stac_api: "http://127.0.0.1:{port}/huge/", search: {{ collections: [scenes] }},
               asset: visual, http: {{ max_body_bytes: 1048576 }} }}
""")
        r = subprocess.run([os.environ["TESSERA_BIN"], "check", str(huge)], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode != 0 and "max_body_bytes" in r.stderr, r.stderr
