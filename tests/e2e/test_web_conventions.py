"""What web clients expect of a map server: CORS for pages on other
origins (checked in headless Chromium), compressed text, access logs and
request metrics."""
import gzip
import http.client
import http.server
import json
import threading
import time
import urllib.parse

import brotli
import pytest
import zstandard
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from conftest import ROOT, require_tool, serving

TILE = "/tiles/relief/WebMercatorQuad/2/1/1.png"
CAPS = "/wms?SERVICE=WMS&REQUEST=GetCapabilities&VERSION=1.3.0"


def request(server, method, path, headers=None):
    url = urllib.parse.urlsplit(server.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    conn.request(method, path, headers=headers or {})
    r = conn.getresponse()
    body = r.read()
    conn.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, body


def config_with(tmp_path_factory, server_yaml):
    path = tmp_path_factory.mktemp("web") / "tessera.yaml"
    path.write_text(f"""
server:
{server_yaml}
layers:
  - name: relief
    source: {{ path: {ROOT}/data/shadedrelief-5400.tif }}
""")
    return path


# --- CORS -----------------------------------------------------------------

PAGE = """<!doctype html><html><body><script>
async function check(base) {
  const out = {};
  try {
    const r = await fetch(base + '/tiles/relief/WebMercatorQuad/2/1/1.png');
    out.fetch = r.status + ' ' + (await r.arrayBuffer()).byteLength;
  } catch (e) { out.fetch = 'error ' + e; }
  try {
    // A custom header makes the browser send a preflight first.
    const r = await fetch(base + '/tiles/relief/WebMercatorQuad/tilejson.json',
                          { headers: { 'X-Requested-With': 'tessera-test' } });
    out.preflighted = r.status + ' ' + (await r.json()).tilejson;
  } catch (e) { out.preflighted = 'error ' + e; }
  try {
    const img = new Image();
    img.crossOrigin = 'anonymous';
    img.src = base + '/tiles/relief/WebMercatorQuad/2/2/1.png';
    await img.decode();
    const gl = document.createElement('canvas').getContext('webgl');
    if (!gl) { out.webgl = 'no webgl'; return out; }
    const tex = gl.createTexture();
    gl.bindTexture(gl.TEXTURE_2D, tex);
    gl.texImage2D(gl.TEXTURE_2D, 0, gl.RGBA, gl.RGBA, gl.UNSIGNED_BYTE, img);
    const fb = gl.createFramebuffer();
    gl.bindFramebuffer(gl.FRAMEBUFFER, fb);
    gl.framebufferTexture2D(gl.FRAMEBUFFER, gl.COLOR_ATTACHMENT0, gl.TEXTURE_2D, tex, 0);
    const px = new Uint8Array(256 * 256 * 4);
    gl.readPixels(0, 0, 256, 256, gl.RGBA, gl.UNSIGNED_BYTE, px);
    let lit = 0;
    for (let i = 0; i < px.length; i += 4) if (px[i] + px[i + 1] + px[i + 2] > 0) lit++;
    out.webgl = 'texture ' + gl.getError() + ' ' + lit;
  } catch (e) { out.webgl = 'error ' + e; }
  return out;
}
</script></body></html>"""


@pytest.fixture
def other_origin():
    """A page on a second loopback origin (another port)."""
    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = PAGE.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


@pytest.fixture
def browser(tmp_path):
    options = webdriver.ChromeOptions()
    options.binary_location = require_tool("chromium")
    for flag in ("--headless", "--no-sandbox", "--disable-quic", "--no-first-run",
                 "--use-angle=swiftshader", "--enable-unsafe-swiftshader",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(require_tool("chromedriver")), options=options)
    driver.set_script_timeout(60)
    yield driver
    driver.quit()


def check_from_page(browser, page, base):
    browser.get(page)
    return browser.execute_async_script(
        "const done = arguments[arguments.length - 1]; check(arguments[0]).then(done);", base)


def test_a_page_on_another_origin_fetches_tiles_and_uses_them_as_webgl_textures(tessera, browser, other_origin):
    out = check_from_page(browser, other_origin, tessera.url)
    assert out["fetch"].startswith("200 ") and int(out["fetch"].split()[1]) > 100, out
    assert out["preflighted"] == "200 3.0.0", out
    kind, error, lit = out["webgl"].split()
    assert (kind, error) == ("texture", "0") and int(lit) > 1000, out


def test_with_cors_off_the_browser_blocks_the_other_origin(tmp_path_factory, browser, other_origin):
    config = config_with(tmp_path_factory, "  cors: false")
    with serving(tmp_path_factory, "--config", str(config)) as server:
        out = check_from_page(browser, other_origin, server.url)
    assert out["fetch"].startswith("error"), out
    assert out["preflighted"].startswith("error"), out
    assert out["webgl"].startswith("error"), out


def test_cors_headers_preflight_and_the_admin_endpoints(tessera):
    status, headers, _ = request(tessera, "GET", TILE, {"Origin": "http://example.org"})
    assert status == 200 and headers["access-control-allow-origin"] == "*"
    status, headers, body = request(tessera, "OPTIONS", TILE, {
        "Origin": "http://example.org", "Access-Control-Request-Method": "GET",
        "Access-Control-Request-Headers": "x-requested-with"})
    assert status == 204 and body == b"", (status, headers)
    assert headers["access-control-allow-origin"] == "*"
    assert "GET" in headers["access-control-allow-methods"]
    assert "x-requested-with" in headers["access-control-allow-headers"].lower()
    assert int(headers["access-control-max-age"]) > 0
    # Error responses carry it too, so a page can read why.
    status, headers, _ = request(tessera, "GET", "/tiles/nope/WebMercatorQuad/0/0/0.png", {"Origin": "http://x.org"})
    assert status == 404 and headers["access-control-allow-origin"] == "*"


def test_listed_origins_only_and_never_the_admin_api_unless_configured(tmp_path_factory, s3):
    admin = (f"admin:\n  token: 0123456789abcdef0123\n  sources_url: s3://tessera-test/cors\n"
             f"  sources_file: sources.json\n  options: {{ endpoint: '{s3['endpoint']}', access_key_id: {s3['key']}, "
             f"secret_access_key: {s3['secret']}, region: us-east-1, allow_http: true }}\n")
    preflight_put = {"Origin": "http://maps.example", "Access-Control-Request-Method": "PUT",
                     "Access-Control-Request-Headers": "authorization"}
    for server_yaml, admin_cors in [
        ('  cors: { origins: ["http://maps.example"], max_age_secs: 60 }', False),
        ('  cors: { origins: ["http://maps.example"], admin: true }', True),
    ]:
        config = config_with(tmp_path_factory, server_yaml)
        config.write_text(config.read_text() + admin)
        with serving(tmp_path_factory, "--config", str(config)) as server:
            status, headers, _ = request(server, "GET", TILE, {"Origin": "http://maps.example"})
            assert headers.get("access-control-allow-origin") == "http://maps.example"
            assert "origin" in headers.get("vary", "").lower()
            _, headers, _ = request(server, "GET", TILE, {"Origin": "http://evil.example"})
            assert "access-control-allow-origin" not in headers
            if not admin_cors:
                status, headers, _ = request(server, "OPTIONS", TILE, {
                    "Origin": "http://maps.example", "Access-Control-Request-Method": "GET"})
                assert status == 204 and headers["access-control-max-age"] == "60"
            status, headers, _ = request(server, "OPTIONS", "/admin/sources/x", preflight_put)
            if admin_cors:
                assert status == 204 and headers.get("access-control-allow-origin") == "http://maps.example"
                assert "PUT" in headers["access-control-allow-methods"]
            else:
                assert status == 405 and "access-control-allow-origin" not in headers, (status, headers)
                status, headers, _ = request(server, "PUT", "/admin/sources/x", {"Origin": "http://maps.example"})
                assert status == 401 and "access-control-allow-origin" not in headers, (status, headers)


# --- compression ----------------------------------------------------------

DECODERS = {
    "gzip": gzip.decompress,
    "br": brotli.decompress,
    "zstd": lambda b: zstandard.ZstdDecompressor().decompressobj().decompress(b),
}


@pytest.mark.parametrize("encoding", sorted(DECODERS))
def test_text_responses_are_compressed_as_the_client_asks(tessera, encoding):
    _, plain_headers, plain = request(tessera, "GET", CAPS)
    for path in (CAPS, "/wmts/1.0.0/WMTSCapabilities.xml", "/tiles/relief/WebMercatorQuad/tilejson.json",
                 "/metrics", "/wms?SERVICE=WMS&REQUEST=Nope&VERSION=1.3.0"):
        status, headers, body = request(tessera, "GET", path, {"Accept-Encoding": encoding})
        assert headers.get("content-encoding") == encoding, (path, headers)
        assert "accept-encoding" in headers.get("vary", "").lower(), (path, headers)
        decoded = DECODERS[encoding](body)
        assert len(body) < len(decoded), path
        if path == CAPS:
            assert decoded == plain
    assert "content-encoding" not in plain_headers
    assert "accept-encoding" in plain_headers.get("vary", "").lower()


def test_images_are_never_compressed_again(tessera):
    for path in (TILE, "/tiles/relief/WebMercatorQuad/2/1/1.jpg", "/tiles/relief/WebMercatorQuad/2/1/1.webp"):
        status, headers, body = request(tessera, "GET", path, {"Accept-Encoding": "gzip, br, zstd"})
        assert status == 200 and "content-encoding" not in headers, (path, headers)


# --- logs and metrics -----------------------------------------------------

def test_one_access_log_line_per_request_in_json_without_colours(tmp_path_factory):
    config = config_with(tmp_path_factory, "  access_log: true")
    with serving(tmp_path_factory, "--config", str(config), "--log-format", "json") as server:
        request(server, "GET", TILE)
        request(server, "GET", TILE)
        request(server, "GET", "/wms?SERVICE=WMS&REQUEST=GetMap&VERSION=1.3.0&LAYERS=relief&STYLES=&CRS=EPSG:3857"
                "&BBOX=0,0,1000000,1000000&WIDTH=64&HEIGHT=64&FORMAT=image/png")
        request(server, "GET", "/tiles/nope/WebMercatorQuad/0/0/0.png")
        time.sleep(0.5)
    log = server.log_text()
    assert "\x1b[" not in log, "ANSI colour codes in a log written to a file"
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    access = [line["fields"] for line in lines if line.get("target") == "tessera::access"]
    tiles = [a for a in access if a["target"] == TILE]
    assert [t["cache"] for t in tiles] == ["MISS", "HIT"], access
    assert all(t["status"] == 200 and t["layer"] == "relief" and t["method"] == "GET" for t in tiles)
    assert all(t["bytes"] > 100 and t["duration_ms"] >= 0 for t in tiles)
    wms = [a for a in access if a["target"].startswith("/wms")]
    assert len(wms) == 1 and wms[0]["layer"] == "relief" and wms[0]["status"] == 200
    missing = [a for a in access if "/nope/" in a["target"]]
    assert len(missing) == 1 and missing[0]["status"] == 404


def test_a_full_log_queue_drops_and_counts_lines_and_never_holds_a_request(tmp_path_factory):
    """With a queue of one line, a burst of requests is answered in full;
    every access line is either written or counted as dropped."""
    import re
    from concurrent.futures import ThreadPoolExecutor
    config = config_with(tmp_path_factory, "  access_log: true")
    with serving(tmp_path_factory, "--config", str(config), "--log-queue-lines", "1") as server:
        def written():
            return server.log_text().count('target="/tiles/')

        request(server, "GET", TILE)
        # Lines are written in batches, within a fraction of a second.
        deadline = time.monotonic() + 10
        while written() < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        before = written()
        assert before == 1
        with ThreadPoolExecutor(8) as pool:
            statuses = list(pool.map(lambda _: request(server, "GET", TILE)[0], range(400)))
        assert statuses == [200] * 400

        def dropped():
            metrics = request(server, "GET", "/metrics")[2].decode()
            return int(re.search(r"^tessera_log_lines_dropped_total (\d+)$", metrics, re.M).group(1))

        deadline = time.monotonic() + 10
        while written() - before + dropped() < 400 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert written() - before <= 400 and written() - before + dropped() >= 400, (written(), dropped())


def test_the_access_log_can_be_switched_off(tmp_path_factory):
    config = config_with(tmp_path_factory, "  access_log: false")
    with serving(tmp_path_factory, "--config", str(config)) as server:
        request(server, "GET", TILE)
        time.sleep(0.5)
    assert "tessera::access" not in server.log_text()


def test_request_metrics_by_endpoint_kind_and_status_render_time_and_build_info(tessera):
    request(tessera, "GET", TILE)
    request(tessera, "GET", "/tiles/nope/WebMercatorQuad/0/0/0.png")
    request(tessera, "GET", "/wms?SERVICE=WMS&REQUEST=GetMap&VERSION=1.3.0&LAYERS=relief&STYLES=&CRS=EPSG:3857"
            "&BBOX=0,0,1000000,1000000&WIDTH=64&HEIGHT=64&FORMAT=image/png")
    request(tessera, "GET", CAPS)
    _, _, body = request(tessera, "GET", "/metrics")
    text = body.decode()

    def count(kind, status):
        prefix = f'tessera_http_request_seconds_count{{kind="{kind}",status="{status}"}} '
        return sum(int(float(line.split()[-1])) for line in text.splitlines() if line.startswith(prefix))

    assert count("tile", "2xx") >= 1 and count("tile", "4xx") >= 1, text
    assert count("wms", "2xx") >= 2, text
    assert 'tessera_http_request_seconds_bucket{le="0.0001",kind="tile",status="2xx"}' in text
    assert 'tessera_render_seconds_count{layer="relief"}' in text
    assert 'tessera_build_info{version="' in text


def test_pages_documents_errors_and_tiles_are_never_sniffed(tessera):
    for path, status in (("/", 200), ("/preview/relief", 200), (CAPS, 200), (TILE, 200),
                         (TILE, 200), ("/tiles/nope/WebMercatorQuad/0/0/0.png", 404)):
        got, headers, _ = request(tessera, "GET", path)
        assert got == status, (path, got)
        assert headers.get("x-content-type-options") == "nosniff", (path, headers)
