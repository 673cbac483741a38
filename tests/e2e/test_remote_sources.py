"""A COG read over HTTP through GDAL's /vsicurl/, and the policy that
refuses private-network URLs unless the config allows them."""
import http.server
import os
import subprocess
import threading

import pytest

from conftest import assert_same_tile, serving

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class RangeHandler(http.server.SimpleHTTPRequestHandler):
    """Static files with HTTP range requests, as object stores and CDNs serve COGs."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, directory=os.path.join(ROOT, "data"), **kwargs)

    def log_message(self, *args):
        pass

    def send_head(self):
        self.server.hits += 1
        self.server.headers_seen.append(dict(self.headers))
        if self.path.startswith("/to/"):
            # /to/NAME redirects to NAME on the server's redirect target.
            self.send_response(302)
            self.send_header("Location", f"{self.server.redirect_to}/{self.path.removeprefix('/to/')}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        rng = self.headers.get("Range")
        path = self.translate_path(self.path)
        if not rng or not os.path.isfile(path):
            return super().send_head()
        size = os.path.getsize(path)
        start, _, end = rng.removeprefix("bytes=").partition("-")
        start = int(start)
        end = min(int(end) if end else size - 1, size - 1)
        f = open(path, "rb")
        f.seek(start)
        self.send_response(206)
        self.send_header("Content-Type", "image/tiff")
        self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        self.remaining = end - start + 1
        return f

    def copyfile(self, source, outputfile):
        remaining = getattr(self, "remaining", None)
        if remaining is None:
            return super().copyfile(source, outputfile)
        outputfile.write(source.read(remaining))


def start_cog_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), RangeHandler)
    server.hits = 0
    server.headers_seen = []
    server.redirect_to = None
    server.url = f"http://127.0.0.1:{server.server_address[1]}"
    server.authority = f"127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def cog_server():
    server = start_cog_server()
    yield server.url
    server.shutdown()


@pytest.fixture
def redirecting_pair():
    """Two COG servers; the front one redirects /to/NAME to the back one."""
    front, back = start_cog_server(), start_cog_server()
    front.redirect_to = back.url
    yield front, back
    front.shutdown()
    back.shutdown()


def write_config(path, url, allow_private):
    path.write_text(f"""
gdal:
  allow_private_network: {str(allow_private).lower()}
layers:
  - name: remote
    source: {{ path: "{url}/shadedrelief-5400.tif" }}
    max_zoom: 8
  - name: local
    source: {{ path: "{ROOT}/data/shadedrelief-5400.tif" }}
    max_zoom: 8
""")


def test_a_cog_over_http_renders_the_same_tile_as_the_local_file(cog_server, tmp_path_factory):
    config = tmp_path_factory.mktemp("remote") / "tessera.yaml"
    write_config(config, cog_server, allow_private=True)
    with serving(tmp_path_factory, "--config", str(config)) as server:
        assert_same_tile(server, "/tiles/remote/WebMercatorQuad/4/8/5.png", "/tiles/local/WebMercatorQuad/4/8/5.png")


def test_a_private_network_url_is_refused_unless_allowed(cog_server, tmp_path):
    config = tmp_path / "tessera.yaml"
    write_config(config, cog_server, allow_private=False)
    r = subprocess.run([os.environ["TESSERA_BIN"], "check", str(config)], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "loopback, link-local or private address" in r.stderr, r.stderr
    assert "allow_private_network" in r.stderr


def redirect_config(path, front, allowed):
    allowed_yaml = ", ".join(f'"{a}"' for a in allowed)
    path.write_text(f"""
gdal:
  allowed_private_hosts: [{allowed_yaml}]
layers:
  - name: remote
    source: {{ path: "{front.url}/to/shadedrelief-5400.tif" }}
    max_zoom: 8
  - name: local
    source: {{ path: "{ROOT}/data/shadedrelief-5400.tif" }}
    max_zoom: 8
""")


def test_a_redirect_to_a_private_host_is_refused_although_gdal_follows_redirects(redirecting_pair, tmp_path):
    front, back = redirecting_pair
    config = tmp_path / "tessera.yaml"
    redirect_config(config, front, [front.authority])
    r = subprocess.run([os.environ["TESSERA_BIN"], "check", str(config)], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0, r.stdout
    assert "cannot open source" in r.stderr, r.stderr
    assert front.hits >= 1, "the listed host is reached"
    assert back.hits == 0, f"the redirect target was reached {back.hits} times"


def test_listed_private_hosts_are_reached_through_the_guard_redirects_included(redirecting_pair, tmp_path_factory):
    front, back = redirecting_pair
    config = tmp_path_factory.mktemp("redirect") / "tessera.yaml"
    redirect_config(config, front, [front.authority, back.authority])
    with serving(tmp_path_factory, "--config", str(config)) as server:
        assert_same_tile(server, "/tiles/remote/WebMercatorQuad/4/8/5.png", "/tiles/local/WebMercatorQuad/4/8/5.png")
    assert back.hits >= 2, "range reads went to the redirect target"
