"""tessera as a cache in front of a real upstream WMS (MapServer, started by
scripts/mapserver): tiles equal what MapServer draws for the same box, in
WMS 1.1.1 and 1.3.0 (axis order), a grid in a CRS the upstream lacks is
warped, one metatile is one upstream GetMap however many clients ask, and
upstream faults (through a faulty proxy in front of MapServer) become clear
502/503 answers that are never cached, with a circuit that recovers."""
import http.client
import os
import re
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from conftest import fetch, serving
from imaging import decode

HALF = 20037508.342789244


@pytest.fixture(scope="module")
def mapserver():
    url = os.environ.get("TESSERA_TEST_WMS_URL")
    if not url:
        pytest.fail("TESSERA_TEST_WMS_URL is not set: start MapServer with scripts/mapserver start "
                    "(scripts/test does) and source var/mapserver/env", pytrace=False)
    return url


class FaultyWms:
    """A loopback proxy in front of MapServer that counts GetMaps and, on
    demand, answers them slowly, with 500, with an exception document, with
    a truncated image or by resetting the connection."""

    def __init__(self, upstream):
        self.upstream = upstream
        self.mode = "pass"
        self.getmaps = 0
        self.last_getmap = None
        self.in_flight = 0
        self.most_in_flight = 0
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def reply(self, status, ctype, body):
                self.send_response(status)
                self.done_in_flight()
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                query = urllib.parse.urlsplit(self.path).query
                is_map = "request=getmap" in query.lower()
                mode = proxy.mode if is_map else "pass"
                self.counted = is_map
                if is_map:
                    with proxy.lock:
                        proxy.getmaps += 1
                        proxy.last_getmap = query
                        proxy.in_flight += 1
                        proxy.most_in_flight = max(proxy.most_in_flight, proxy.in_flight)
                try:
                    self.answer(mode, query)
                finally:
                    self.done_in_flight()

            def done_in_flight(self):
                # A GetMap stops counting once its answer starts: the client
                # may have the whole body (and send its next request) before
                # this thread runs again.
                if getattr(self, "counted", False):
                    self.counted = False
                    with proxy.lock:
                        proxy.in_flight -= 1

            def answer(self, mode, query):
                if mode == "reset":
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    self.connection.close()
                    return
                if mode == "500":
                    return self.reply(500, "text/plain", b"internal error")
                if mode == "exception":
                    return self.reply(200, "text/xml", (
                        b"<?xml version='1.0'?><ServiceExceptionReport version=\"1.3.0\">"
                        b"<ServiceException code=\"LayerNotDefined\">the layer went away</ServiceException>"
                        b"</ServiceExceptionReport>"))
                if mode == "slow":
                    time.sleep(6)
                if mode == "delay":
                    time.sleep(0.3)
                with urllib.request.urlopen(f"{proxy.upstream}?{query}", timeout=60) as r:
                    body = r.read()
                    ctype = r.headers.get("Content-Type", "application/octet-stream")
                if mode == "truncated":
                    body = body[: len(body) // 2]
                self.reply(200, ctype, body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/mapserv"

    def close(self):
        self.server.shutdown()


@pytest.fixture
def faulty(mapserver):
    proxy = FaultyWms(mapserver)
    yield proxy
    proxy.close()


def host_port(url):
    u = urllib.parse.urlsplit(url)
    return f"{u.hostname}:{u.port}"


def write_config(path, url, version="1.3.0", extra="", http="", server=""):
    path.write_text(f"""
{server}
gdal: {{ allowed_private_hosts: ["{host_port(url)}"] }}
stores: {{ mem: {{ type: memory }} }}
layers:
  - name: cascade
    source: {{ type: wms, url: "{url}", layers: [relief], version: "{version}"{extra}{http} }}
    grids: [WebMercatorQuad, WorldCRS84Quad]
    cache: {{ store: mem }}
""")
    return path


def mercator_bbox(z, x, y):
    size = 2 * HALF / 2 ** z
    return (-HALF + x * size, HALF - (y + 1) * size, -HALF + (x + 1) * size, HALF - y * size)


def upstream_map(mapserver, version, crs, bbox, size=256):
    key = "SRS" if version == "1.1.1" else "CRS"
    q = urllib.parse.urlencode({
        "SERVICE": "WMS", "REQUEST": "GetMap", "VERSION": version, "LAYERS": "relief", "STYLES": "",
        key: crs, "BBOX": ",".join(repr(v) for v in bbox), "WIDTH": size, "HEIGHT": size,
        "FORMAT": "image/png", "TRANSPARENT": "TRUE"})
    with urllib.request.urlopen(f"{mapserver}?{q}", timeout=60) as r:
        return decode(r.read())


def rgb_difference(a, b):
    a = a[:3].astype(np.int16)
    b = b[:3].astype(np.int16)
    d = np.abs(a - b)
    return d.mean(), np.percentile(d, 99)


def get(server, path, timeout=120):
    u = urllib.parse.urlsplit(server.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    conn.request("GET", path)
    r = conn.getresponse()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()


def crop_of_the_same_getmap(mapserver, query, tile_box):
    """MapServer's answer to the very GetMap tessera sent (`query`), cut to
    `tile_box` (x/y order), as a (bands, 256, 256) array."""
    params = dict(urllib.parse.parse_qsl(query))
    with urllib.request.urlopen(f"{mapserver}?{query}", timeout=60) as r:
        image = decode(r.read())
    b = [float(v) for v in params["BBOX"].split(",")]
    if params["VERSION"] == "1.3.0" and params.get("CRS") == "EPSG:4326":
        b = [b[1], b[0], b[3], b[2]]  # latitude first in 1.3.0
    width, height = int(params["WIDTH"]), int(params["HEIGHT"])
    res_x, res_y = (b[2] - b[0]) / width, (b[3] - b[1]) / height
    col, row = round((tile_box[0] - b[0]) / res_x), round((b[3] - tile_box[3]) / res_y)
    return image[:, row:row + 256, col:col + 256]


@pytest.mark.parametrize("version", ["1.1.1", "1.3.0"])
def test_tiles_are_the_pixels_mapserver_draws_for_the_same_box(faulty, version, tmp_path, tmp_path_factory):
    config = write_config(tmp_path / "tessera.yaml", faulty.url, version)
    mercator = [((2, 2, 1), mercator_bbox(2, 2, 1)), ((4, 8, 5), mercator_bbox(4, 8, 5))]
    size = 180 / 4
    lonlat = [((2, 3, 1), (-180 + 3 * size, 90 - 2 * size, -180 + 4 * size, 90 - size))]
    with serving(tmp_path_factory, "--config", str(config)) as server:
        for grid, tiles, crs in [("WebMercatorQuad", mercator, "EPSG:3857"), ("WorldCRS84Quad", lonlat, "EPSG:4326")]:
            for (z, x, y), box in tiles:
                status, tile = fetch(server, f"/tiles/cascade/{grid}/{z}/{x}/{y}.png")
                assert status == 200, tile
                query = faulty.last_getmap
                assert f"VERSION={version}" in query and urllib.parse.quote(crs) in query, query
                ours = decode(tile)
                # The very pixels MapServer drew for the metatile (1.3.0
                # asks EPSG:4326 latitude first; the crop proves the order).
                theirs = crop_of_the_same_getmap(faulty.upstream, query, box)
                assert np.array_equal(ours[:3], theirs[:3]), (grid, z, x, y, rgb_difference(ours, theirs))
                # And close to what MapServer draws for the tile alone.
                alone = upstream_map(faulty.upstream, "1.1.1", crs, box)
                assert rgb_difference(ours, alone)[0] < 8, (grid, z, x, y)
        # The layer works everywhere a GDAL layer does: WMS, WMTS capabilities
        # (its extent is the upstream layer's).
        status, body = fetch(server, "/wms?SERVICE=WMS&REQUEST=GetMap&VERSION=1.3.0&LAYERS=cascade&STYLES="
                                     "&CRS=EPSG:3857&BBOX=0,0,5000000,5000000&WIDTH=300&HEIGHT=300&FORMAT=image/png")
        assert status == 200 and body[:4] == b"\x89PNG", body[:200]
        status, caps = fetch(server, "/wmts/1.0.0/WMTSCapabilities.xml")
        chunk = next(c for c in caps.decode().split("<Layer>") if "<ows:Identifier>cascade</ows:Identifier>" in c)
        corners = [float(v) for name in ("Lower", "Upper")
                   for v in re.search(rf"<ows:{name}Corner>([^<]+)<", chunk).group(1).split()]
        assert np.allclose(corners, [-180, -90, 180, 90], atol=1e-6), corners


def test_a_grid_in_a_crs_the_upstream_is_not_asked_in_is_warped(mapserver, tmp_path, tmp_path_factory):
    # Only EPSG:4326 is asked for: WebMercatorQuad tiles are warped from it.
    config = write_config(tmp_path / "tessera.yaml", mapserver, extra=", crs: [EPSG:4326]")
    with serving(tmp_path_factory, "--config", str(config)) as server:
        status, tile = fetch(server, "/tiles/cascade/WebMercatorQuad/3/4/2.png")
        assert status == 200, tile
        mean, p99 = rgb_difference(decode(tile), upstream_map(mapserver, "1.1.1", "EPSG:3857",
                                                              mercator_bbox(3, 4, 2)))
        assert mean < 8, mean


def test_sources_that_cannot_work_are_refused_at_start_with_the_reason(mapserver, tmp_path, tmp_path_factory):
    import subprocess
    binary = os.environ["TESSERA_BIN"]
    cases = [
        (write_config(tmp_path / "a.yaml", mapserver, extra=", crs: [EPSG:99999999]"), "offers no CRS"),
        (write_config(tmp_path / "b.yaml", mapserver).read_text().replace("[relief]", "[nope]"), "no layer \"nope\""),
    ]
    (tmp_path / "b.yaml").write_text(cases[1][0])
    cases[1] = (tmp_path / "b.yaml", cases[1][1])
    # Without allowing the private address, the guard refuses it.
    guarded = tmp_path / "c.yaml"
    guarded.write_text(write_config(tmp_path / "c.yaml", mapserver).read_text()
                       .replace(f'allowed_private_hosts: ["{host_port(mapserver)}"]', "allowed_private_hosts: []"))
    cases.append((guarded, "allowed_private_hosts"))
    for config, expected in cases:
        r = subprocess.run([binary, "check", str(config)], capture_output=True, text=True, timeout=120)
        assert r.returncode != 0 and expected in (r.stderr + r.stdout), (config, r.stdout, r.stderr)


def test_clients_asking_for_one_metatile_at_once_cause_one_upstream_getmap(faulty, tmp_path, tmp_path_factory):
    config = write_config(tmp_path / "tessera.yaml", faulty.url)
    with serving(tmp_path_factory, "--config", str(config)) as server:
        faulty.getmaps = 0
        # The 16 tiles of metatile (0..3, 4..7) at zoom 4, asked at once.
        paths = [f"/tiles/cascade/WebMercatorQuad/4/{x}/{y}.png" for x in range(4) for y in range(4, 8)]
        with ThreadPoolExecutor(16) as pool:
            results = list(pool.map(lambda p: fetch(server, p), paths))
        assert all(status == 200 for status, _ in results), [s for s, _ in results]
        assert faulty.getmaps == 1


def test_no_more_getmaps_than_max_concurrent_are_in_flight(faulty, tmp_path, tmp_path_factory):
    config = write_config(tmp_path / "tessera.yaml", faulty.url, http=", http: { max_concurrent: 1 }",
                          server="server: { max_concurrent_renders: 4 }")
    with serving(tmp_path_factory, "--config", str(config)) as server:
        faulty.mode = "delay"
        faulty.most_in_flight = 0
        # Eight metatiles at once: four render slots, one upstream request.
        paths = [f"/tiles/cascade/WebMercatorQuad/5/{x * 4}/8.png" for x in range(8)]
        with ThreadPoolExecutor(8) as pool:
            statuses = [s for s, _ in pool.map(lambda p: fetch(server, p), paths)]
        assert statuses == [200] * 8
        assert faulty.most_in_flight == 1, faulty.most_in_flight


def test_a_seed_fetches_the_next_metatile_ahead_and_asks_for_each_once(faulty, tmp_path):
    config = tmp_path / "tessera.yaml"
    config.write_text(f"""
gdal: {{ allowed_private_hosts: ["{host_port(faulty.url)}"] }}
stores: {{ disk: {{ type: file, path: {tmp_path / "tiles"} }} }}
layers:
  - name: cascade
    source: {{ type: wms, url: "{faulty.url}", layers: [relief] }}
    grids: [WebMercatorQuad]
    cache: {{ store: disk }}
""")
    seed = [os.environ["TESSERA_BIN"], "seed", "--config", str(config), "--layer", "cascade",
            "--grid", "WebMercatorQuad", "--zoom", "0..3", "--threads", "1"]
    faulty.mode = "delay"
    faulty.getmaps = 0
    faulty.most_in_flight = 0
    r = subprocess.run(seed, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "7/7 metatiles (7 rendered" in r.stdout, r.stdout
    # One worker renders while the next metatile's GetMap is already out:
    # two in flight, never more, and each metatile asked for once.
    assert faulty.getmaps == 7, faulty.getmaps
    assert faulty.most_in_flight == 2, faulty.most_in_flight
    # Stored metatiles are skipped before anything is fetched for them.
    r = subprocess.run(seed, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "0 rendered, 7 already stored" in r.stdout, r.stdout
    assert faulty.getmaps == 7, faulty.getmaps


FAST_FAIL = (", http: { timeout_secs: 2, connect_timeout_secs: 2, retries: 1, retry_backoff_ms: 50, "
             "circuit_failures: 100, circuit_open_secs: 2 }")


@pytest.mark.parametrize("mode, says", [
    ("exception", "LayerNotDefined: the layer went away"),
    ("500", "answered 500"),
    ("truncated", "damaged or truncated"),
    ("reset", "failed"),
    ("slow", "timed out"),
])
def test_upstream_faults_are_502_with_its_message_logged_and_never_cached(faulty, mode, says, tmp_path,
                                                                       tmp_path_factory):
    config = write_config(tmp_path / "tessera.yaml", faulty.url, http=FAST_FAIL)
    with serving(tmp_path_factory, "--config", str(config)) as server:
        path = "/tiles/cascade/WebMercatorQuad/3/2/3.png"
        faulty.mode = mode
        start = time.monotonic()
        status, _, body = get(server, path)
        elapsed = time.monotonic() - start
        assert status == 502, (status, body[:200])
        # The upstream's words stay in the log; the client is not shown them.
        assert says in server.log_text(), server.log_text()[-2000:]
        assert body.decode().strip() == "the layer's upstream service failed; the server log has the details (docs: sources)", body
        # Two attempts of at most 2 s each (and the backoff): no request
        # waits for the upstream past its timeouts.
        assert elapsed < 30, elapsed
        # Nothing of the fault was kept: the next answer is a fresh render.
        faulty.mode = "pass"
        status, headers, body = get(server, path)
        assert (status, headers.get("x-cache")) == (200, "MISS")
        assert get(server, path)[1].get("x-cache") == "HIT"


def test_the_circuit_opens_after_repeated_failures_answers_503_and_recovers(faulty, tmp_path, tmp_path_factory):
    http = (", http: { timeout_secs: 5, retries: 0, circuit_failures: 3, circuit_open_secs: 3 }")
    config = write_config(tmp_path / "tessera.yaml", faulty.url, http=http)
    with serving(tmp_path_factory, "--config", str(config)) as server:
        faulty.mode = "500"
        for i in range(3):
            assert get(server, f"/tiles/cascade/WebMercatorQuad/5/{i * 4}/0.png")[0] == 502
        asked = faulty.getmaps
        status, headers, body = get(server, "/tiles/cascade/WebMercatorQuad/5/20/0.png")
        assert status == 503 and int(headers["retry-after"]) >= 1, (status, headers, body)
        assert b"unavailable" in body
        assert faulty.getmaps == asked, "an open circuit still asked the upstream"
        # The upstream is back; after the open period one request tries it.
        faulty.mode = "pass"
        deadline = time.monotonic() + 30
        while True:
            status, _, _ = get(server, "/tiles/cascade/WebMercatorQuad/5/20/0.png")
            if status == 200:
                break
            assert status == 503 and time.monotonic() < deadline, status
            time.sleep(0.5)
        assert get(server, "/tiles/cascade/WebMercatorQuad/5/0/0.png")[0] == 200
