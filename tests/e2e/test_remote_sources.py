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


@pytest.fixture(scope="module")
def cog_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), RangeHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


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
