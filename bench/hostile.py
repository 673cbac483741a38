"""Before/after figures for the hostile-upstream and admin findings: two
tessera binaries, the same four cases each, one table.

1. A WMTS upstream whose capabilities send the tiles to a port never
   allowed: requests that port got, and whether its answer reached clients.
2. An upstream PNG of 1,009 bytes declaring 60000x60000, under
   `prlimit --as=6G`: what the client got and whether the server lived.
3. `POST /admin/truncate?zoom=0..24` on a file store holding 32 tiles:
   how long it ran (stopped after 60 s) and its CPU seconds.
4. A lease object in MinIO claiming an expiry a year ahead: what a request
   for a tile of that metatile got, and after how long.

Usage: python3 bench/hostile.py BEFORE_BIN AFTER_BIN (with var/minio/env
sourced)."""
import http.server
import json
import os
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import zlib
from pathlib import Path

import boto3

from common import ROOT, free_port, wait_http

TOKEN = "hostile-token-0123456789"


class Fixed(http.server.ThreadingHTTPServer):
    """Answers every GET with one body; counts requests."""

    def __init__(self, body, content_type="image/png"):
        self.count = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                outer.count += 1
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(outer.body)))
                self.end_headers()
                self.wfile.write(outer.body)

            def log_message(self, *args):
                pass

        self.body = body
        super().__init__(("127.0.0.1", free_port()), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()
        self.port = self.server_address[1]


def serve(binary, config_text, work, wrap=()):
    work.mkdir(parents=True, exist_ok=True)
    (work / "tessera.yaml").write_text(config_text)
    port = free_port()
    log = open(work / "log", "w")
    proc = subprocess.Popen([*wrap, binary, "serve", "--config", str(work / "tessera.yaml"),
                             "--listen", f"127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    wait_http(f"http://127.0.0.1:{port}/health")
    return port, proc


def get(port, path, method="GET", timeout=120):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                 headers={"Authorization": f"Bearer {TOKEN}"})
    start = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read(), time.monotonic() - start
    except urllib.error.HTTPError as e:
        return e.code, e.read(), time.monotonic() - start
    except OSError as e:
        return None, str(e).encode(), time.monotonic() - start


def stop(proc):
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


def ssrf(binary, work):
    up_port, up = serve(binary, f"layers:\n  - name: relief\n    source: {{ path: {ROOT}/data/shadedrelief-5400.tif }}\n",
                        work / "up")
    caps = urllib.request.urlopen(f"http://127.0.0.1:{up_port}/wmts/1.0.0/WMTSCapabilities.xml").read().decode()
    stop(up)
    canary = Fixed(b"SECRET-FROM-AN-INTERNAL-SERVICE")
    hostile = Fixed(caps.replace(f"127.0.0.1:{up_port}", f"127.0.0.1:{canary.port}").encode(), "application/xml")
    port, proc = serve(binary, f"""
gdal: {{ allowed_private_hosts: ["127.0.0.1:{hostile.port}"] }}
layers:
  - name: evil
    source: {{ type: wmts, url: "http://127.0.0.1:{hostile.port}/wmts", layer: relief, matrix_set: WebMercatorQuad }}
    grids: [WorldCRS84Quad]
""", work / "ssrf")
    status, body, _ = get(port, "/tiles/evil/WorldCRS84Quad/2/1/1.png")
    stop(proc)
    shown = "shown" if b"SECRET" in body else "not shown"
    return f"{status}; {canary.count} requests to the port never allowed; its answer {shown} to the client"


def png_bomb():
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", 60000, 60000, 8, 6, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 60001 * 8))
            + chunk(b"IEND", b""))


def bomb(binary, work):
    body = png_bomb()
    hostile = Fixed(body)
    port, proc = serve(binary, f"""
gdal: {{ allowed_private_hosts: ["127.0.0.1:{hostile.port}"] }}
layers:
  - name: bomb
    source: {{ type: xyz, url: "http://127.0.0.1:{hostile.port}/{{z}}/{{x}}/{{y}}.png", max_zoom: 8,
              http: {{ retries: 0 }} }}
    grids: [WorldCRS84Quad]
""", work / "bomb", wrap=("prlimit", f"--as={6 << 30}"))
    status, _, seconds = get(port, "/tiles/bomb/WorldCRS84Quad/3/2/1.png")
    time.sleep(1)
    alive = proc.poll() is None
    outcome = "alive" if alive else f"died (exit {proc.returncode})"
    if alive:
        stop(proc)
    answer = f"answer {status}" if status else "connection closed, no answer"
    return f"{len(body)}-byte PNG: {answer} after {seconds:.1f} s; server {outcome}"


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def truncate(binary, work):
    endpoint = os.environ["TESSERA_TEST_S3_ENDPOINT"]
    key, secret = os.environ["TESSERA_TEST_S3_ACCESS_KEY"], os.environ["TESSERA_TEST_S3_SECRET_KEY"]
    port, proc = serve(binary, f"""
admin:
  token: {TOKEN}
  sources_url: s3://tessera-bench-hostile/sources
  sources_file: {work / 'truncate' / 'sources.yaml'}
  options: {{ endpoint: '{endpoint}', access_key_id: {key}, secret_access_key: {secret}, region: us-east-1,
             allow_http: true }}
stores: {{ disk: {{ type: file, path: {work / 'truncate' / 'tiles'} }} }}
cache: {{ metatile_threads: 0 }}
layers:
  - name: relief
    source: {{ path: {ROOT}/data/shadedrelief-5400.tif }}
    max_zoom: 24
    cache: {{ store: disk, metatile: [4, 4] }}
""", work / "truncate")
    for path in ("/tiles/relief/WebMercatorQuad/4/8/4.png", "/tiles/relief/WebMercatorQuad/6/30/20.png"):
        get(port, path)
    held = len(list((work / "truncate" / "tiles").rglob("*.png")))
    before = cpu_seconds(proc.pid)
    status, body, seconds = get(port, "/admin/truncate?layer=relief&zoom=0..24", method="POST", timeout=60)
    cpu = cpu_seconds(proc.pid) - before
    stop(proc)
    if status is None:
        return f"{held} tiles held: no answer within 60 s, {cpu:.1f} CPU s spent"
    said = body.decode(errors="replace").strip()[:70]
    return f"{held} tiles held: {status} after {seconds:.1f} s, {cpu:.1f} CPU s; {said}"


def lease(binary, work):
    endpoint = os.environ["TESSERA_TEST_S3_ENDPOINT"]
    key, secret = os.environ["TESSERA_TEST_S3_ACCESS_KEY"], os.environ["TESSERA_TEST_S3_SECRET_KEY"]
    s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=key, aws_secret_access_key=secret,
                      region_name="us-east-1")
    bucket = "tessera-bench-hostile"
    try:
        s3.create_bucket(Bucket=bucket)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    prefix = f"lease-{int(time.time() * 1000)}"
    port, proc = serve(binary, f"""
cluster: {{ leases: true, lease_ttl_secs: 30, lease_wait_secs: 20 }}
stores:
  s3: {{ type: object, url: 's3://{bucket}/{prefix}', options: {{ endpoint: '{endpoint}', access_key_id: {key},
         secret_access_key: {secret}, region: us-east-1, allow_http: true }} }}
layers:
  - name: relief
    source: {{ path: {ROOT}/data/shadedrelief-5400.tif }}
    cache: {{ store: s3, metatile: [4, 4] }}
""", work / "lease")
    get(port, "/tiles/relief/WebMercatorQuad/4/8/8.png")
    tile_key = next(o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix)["Contents"]
                    if "/WebMercatorQuad/" in o["Key"])
    root = tile_key.split("/WebMercatorQuad/")[0]
    year = 365 * 24 * 3600 * 1000
    s3.put_object(Bucket=bucket, Key=f"{root}/WebMercatorQuad/4/leases/0-0-3-3.png",
                  Body=json.dumps({"node": "skewed", "expires_ms": int(time.time() * 1000) + year}).encode())
    status, _, seconds = get(port, "/tiles/relief/WebMercatorQuad/4/1/1.png")
    stop(proc)
    return f"{status} after {seconds:.1f} s (lease_wait_secs 20)"


def main():
    before, after = sys.argv[1], sys.argv[2]
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"tessera-hostile-{os.getpid()}"
    rows = []
    for name, case in (("1. WMTS template to a port never allowed", ssrf),
                       ("2. 60000x60000 PNG under prlimit --as=6G", bomb),
                       ("6. truncate zoom=0..24 of a file store", truncate),
                       ("7. lease claiming a year ahead", lease)):
        rows.append((name, case(before, work / "before"), case(after, work / "after")))
    print("| finding | before | after |\n|---|---|---|")
    for name, b, a in rows:
        print(f"| {name} | {b} | {a} |")


if __name__ == "__main__":
    main()
