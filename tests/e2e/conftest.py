"""Starts the real `tessera` binary for end-to-end tests.

The binary comes from TESSERA_BIN (set by scripts/test). A missing binary or
tool is a failure, never a skip.
"""
import contextlib
import http.server
import os
import re
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import boto3
import pytest

ROOT = Path(__file__).resolve().parents[2]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def qgis_wmts(capabilities, layer, matrix_set, extent, picture=None):
    """What QGIS (headless, Debian's python3-qgis) found loading `layer`
    of the WMTS at `capabilities` in `matrix_set` and rendering `extent`
    (`qgis_wmts.py`'s JSON: valid, opaque, mean), the rendering saved at
    `picture` when given; a script that fails, fails the test."""
    import json
    import sys

    try:
        import qgis  # noqa: F401
    except ImportError:
        pytest.fail("python3-qgis is not installed; run scripts/install-deps", pytrace=False)
    run = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("qgis_wmts.py")), capabilities, layer, matrix_set,
         *(str(v) for v in extent), *([str(picture)] if picture else [])],
        capture_output=True, text=True, timeout=300, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def require_tool(name):
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed; run scripts/install-deps", pytrace=False)
    return path


class Server:
    def __init__(self, url, proc, log):
        self.url = url
        self.proc = proc
        self.log = log

    def log_text(self, settle=0.2, timeout=10):
        """Everything the server wrote to stdout and stderr so far, once its
        log has stopped growing for `settle` seconds (at most `timeout`):
        `tessera serve` writes its log on a thread of its own, a moment
        after what it logs."""
        deadline = time.monotonic() + timeout
        size, still_since = -1, time.monotonic()
        while time.monotonic() < deadline:
            now = self.log.stat().st_size
            if now != size:
                size, still_since = now, time.monotonic()
            elif time.monotonic() - still_since >= settle:
                break
            time.sleep(0.02)
        return self.log.read_text()

    def get(self, path):
        with urllib.request.urlopen(self.url + path, timeout=60) as r:
            return r.status, r.headers.get("Content-Type"), r.read()


def http_get(server, path, headers=None, timeout=120):
    """GET `path` with `headers`: (status, headers, body), error statuses
    included."""
    request = urllib.request.Request(server.url + path, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def metric(server, name, **labels):
    """The sum of a counter's samples on /metrics whose labels include
    `labels`."""
    _, _, body = http_get(server, "/metrics")
    total = 0.0
    for line in body.decode().splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def server_env(name, script):
    """The variable `name` a test server's env file sets; fails loudly
    when the server was not started."""
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: start the server with scripts/{script} start "
                    f"(scripts/test does) and source var/{script}/env", pytrace=False)
    return value


def fetch(server, path, timeout=60):
    """GET `path`: (status, body), error statuses included."""
    try:
        with urllib.request.urlopen(server.url + path, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def start_server(tmp_path_factory, *args):
    binary = os.environ.get("TESSERA_BIN")
    if not binary or not os.access(binary, os.X_OK):
        pytest.fail("TESSERA_BIN does not name the tessera binary; run the tests through scripts/test", pytrace=False)
    # A port found free may be taken (by any process's outgoing connection)
    # before tessera binds it: a start refused for that alone is tried again
    # on another port.
    for _attempt in range(5):
        server = _start_once(tmp_path_factory, binary, args)
        if server is not None:
            return server
    pytest.fail("tessera found no free port in 5 attempts", pytrace=False)


def _start_once(tmp_path_factory, binary, args):
    """A healthy server, or None when its port was taken before it bound it."""
    port = free_port()
    log = tmp_path_factory.mktemp("tessera") / "server.log"
    proc = subprocess.Popen(
        [binary, "serve", "--listen", f"127.0.0.1:{port}", *args],
        stdout=open(log, "w"),
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            text = log.read_text()
            if "Address already in use" in text:
                return None
            pytest.fail(f"tessera exited early:\n{text}", pytrace=False)
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return Server(url, proc, log)
        except OSError:
            time.sleep(0.2)
    proc.kill()
    pytest.fail(f"tessera did not become healthy:\n{log.read_text()}", pytrace=False)


@contextlib.contextmanager
def serving(tmp_path_factory, *args):
    """A tessera started with `args`, stopped when the block ends."""
    server = start_server(tmp_path_factory, *args)
    try:
        yield server
    finally:
        server.proc.terminate()
        server.proc.wait(timeout=20)


@contextlib.contextmanager
def nginx_running(tmp_path, conf):
    """Debian's nginx started on `conf` (a whole nginx.conf, listening on
    127.0.0.1) with `tmp_path` as its prefix, stopped when the block ends;
    yields once it is accepting connections."""
    nginx = require_tool("nginx")
    (tmp_path / "logs").mkdir(exist_ok=True)
    conf_path = tmp_path / "nginx.conf"
    conf_path.write_text(conf)
    base = [nginx, "-p", str(tmp_path), "-c", str(conf_path), "-e", "stderr"]
    check = subprocess.run([*base, "-t"], capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stderr
    proc = subprocess.Popen([*base, "-g", f"daemon off; pid {tmp_path}/nginx.pid;"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        port = int(re.search(r"listen 127\.0\.0\.1:(\d+)", conf).group(1))
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read().decode()
                assert time.monotonic() < deadline, "nginx is not accepting connections"
                time.sleep(0.1)
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def relief_config(tmp_path, store_yaml):
    """A config serving the repo's relief raster in WebMercatorQuad, cached
    in the store `disk` described by `store_yaml`; returns its path."""
    path = tmp_path / "tessera.yaml"
    path.write_text(
        f"""
stores:
  disk: {store_yaml}
layers:
  - name: relief
    source: {{ path: {ROOT}/data/shadedrelief-5400.tif, resampling: bilinear }}
    grids: [WebMercatorQuad]
    max_zoom: 8
    cache: {{ store: disk }}
"""
    )
    return path


def assert_same_tile(server, remote_path, local_path):
    """The remote layer's tile is a PNG byte-identical to the local layer's."""
    status, ctype, remote = server.get(remote_path)
    assert (status, ctype) == (200, "image/png")
    _, _, local = server.get(local_path)
    assert remote == local


@pytest.fixture(scope="session")
def tessera(tmp_path_factory):
    with serving(tmp_path_factory) as server:
        yield server


@pytest.fixture(scope="session")
def demo_data():
    return ROOT / "data"


@pytest.fixture(scope="session")
def s3():
    """MinIO's endpoint and credentials (scripts/minio writes them)."""
    endpoint = os.environ.get("TESSERA_TEST_S3_ENDPOINT")
    if not endpoint:
        pytest.fail("TESSERA_TEST_S3_ENDPOINT is not set: start MinIO with scripts/minio start "
                    "(scripts/test does) and source var/minio/env", pytrace=False)
    return {
        "endpoint": endpoint,
        "key": os.environ["TESSERA_TEST_S3_ACCESS_KEY"],
        "secret": os.environ["TESSERA_TEST_S3_SECRET_KEY"],
    }


def s3_bucket(s3, name):
    """A boto3 client for MinIO, with bucket `name` created if missing."""
    c = boto3.client("s3", endpoint_url=s3["endpoint"], aws_access_key_id=s3["key"],
                     aws_secret_access_key=s3["secret"], region_name="us-east-1")
    if name not in [b["Name"] for b in c.list_buckets()["Buckets"]]:
        c.create_bucket(Bucket=name)
    return c


class QuietPages(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def page_server(tmp_path):
    """A static web server of `tmp_path` on a free loopback port (a page
    on another origin than tessera's): its URL and the folder."""
    handler = lambda *a, **k: QuietPages(*a, directory=str(tmp_path), **k)  # noqa: E731
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", tmp_path
    httpd.shutdown()


@pytest.fixture
def browser(tmp_path):
    """A headless Chromium (Debian's, through chromedriver) with WebGL in
    software (SwiftShader), for MapLibre GL JS."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    chromium = require_tool("chromium")
    driver_path = require_tool("chromedriver")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless", "--no-sandbox", "--use-angle=swiftshader", "--enable-unsafe-swiftshader",
                 "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--hide-scrollbars",
                 f"--user-data-dir={tmp_path / 'profile'}", "--window-size=800,600"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    yield driver
    driver.quit()
