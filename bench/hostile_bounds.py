"""Before/after figures for the fourth round of hostile findings: two
tessera binaries, the same cases each, one table (docs/benchmarks/hostile.md).

1. Shared caches: the protected layer's routes and the caller-filtered
   documents of tests/e2e/test_shared_cache.py, asked through Debian's
   nginx (`proxy_cache_valid 200 1m`) with a key, then anonymously: how
   many caller-dependent answers nginx served the anonymous client from
   its cache.
5. A WMTS upstream declaring tiles of 100000x100000 pixels, the server
   under `prlimit --as=6G`: what start and a tile in another grid (its
   tiles stitched) got.
7. Decompression: a PMTiles leaf directory of 1 MB unpacking to 512 MiB
   (one tile), a gzip MVT unpacking to 1 GiB sent to a client without
   gzip, an MBTiles blob of 256 MiB, PMTiles metadata unpacking to 1 GiB
   (`tessera check`): the answer and the process's peak resident memory
   (start included).
9. A WMS GetMap of a 10,000-layer MapLibre style past its 2 s timeout:
   how long the WMS render slot stayed busy after the 503, and the CPU
   seconds spent in the 3 s after it.
10. Admin jobs: a whole-world seed to zoom 24 (seconds until planned, peak
    memory, the state 30 s after its DELETE), and `threads: 2^63`.
11. An MBTiles whose `tiles` view takes seconds per query, the server on
    one core: how long `/health` took while a tile of it was read.

Usage (MinIO from `scripts/minio start`, then `source var/minio/env`):
    cd bench && ../var/venv/bin/python hostile_bounds.py BEFORE_BIN AFTER_BIN [CASES, e.g. 5,7]
"""
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))
from common import ROOT, free_port, wait_http  # noqa: E402
from hostile import stop  # noqa: E402
import test_auth  # noqa: E402
import test_bounds  # noqa: E402
import test_hardening  # noqa: E402
import test_shared_cache  # noqa: E402

MIB = 1 << 20
TOKEN = "hostile-token-0123456789"


def start(binary, args, work, wrap=()):
    """A tessera serving `args`; (port, process), or (None, message) when
    it did not start."""
    work.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = work / "log"
    proc = subprocess.Popen([*wrap, binary, "serve", "--listen", f"127.0.0.1:{port}", *map(str, args)],
                            stdout=open(log, "w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            lines = [line for line in log.read_text().splitlines() if line.strip()]
            return None, f"exit {proc.returncode}: {lines[-1][:160] if lines else ''}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return port, proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    return None, "did not start within 120 s"


def get(port, path, headers=None, method="GET", body=None, timeout=300):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers or {}, method=method,
                                 data=body)
    began = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers, r.read(), time.monotonic() - began
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read(), time.monotonic() - began
    except OSError as e:
        return None, {}, str(e).encode(), time.monotonic() - began


def peak_mib(pid):
    return test_bounds.peak_kib(pid) / 1024


def shared_cache(binary, work):
    work.mkdir(parents=True, exist_ok=True)
    cfg = test_auth.config(work)
    # The test's generous budget of bad credentials is a key the binary
    # before does not know; neither binary needs it here.
    cfg.write_text("\n".join(line for line in cfg.read_text().splitlines()
                             if "failed_credentials" not in line))
    port, proc = start(binary, ["--config", cfg], work)
    nginx_port = free_port()
    conf = test_shared_cache.NGINX.format(cache=work / "cache", port=nginx_port,
                                          upstream=f"http://127.0.0.1:{port}")
    (work / "logs").mkdir(exist_ok=True)
    (work / "nginx.conf").write_text(conf)
    nginx = subprocess.Popen(["nginx", "-p", str(work), "-c", str(work / "nginx.conf"), "-e", "stderr",
                              "-g", f"daemon off; pid {work}/nginx.pid;"], stderr=subprocess.DEVNULL)
    wait_http(f"http://127.0.0.1:{nginx_port}/health")
    dependent = leaked = 0
    try:
        for path in test_shared_cache.PROTECTED + test_shared_cache.DOCUMENTS:
            keyed = get(nginx_port, path, {"X-API-Key": test_auth.KEY_B})
            direct = get(port, path)
            if (keyed[0], keyed[2]) == (direct[0], direct[2]):
                continue
            dependent += 1
            anonymous = get(nginx_port, path)
            if anonymous[1].get("X-Shared-Cache") == "HIT":
                leaked += 1
    finally:
        nginx.terminate()
        nginx.wait(timeout=10)
        stop(proc)
    return f"{leaked} of {dependent} caller-dependent answers served to an anonymous client from the cache"


def huge_wmts_tiles(binary, work):
    up_port, up = start(binary, [ROOT / "data" / "shadedrelief-5400.tif"], work / "up")
    caps = urllib.request.urlopen(f"http://127.0.0.1:{up_port}/wmts/1.0.0/WMTSCapabilities.xml").read().decode()
    tile = urllib.request.urlopen(f"http://127.0.0.1:{up_port}/tiles/shadedrelief-5400/WebMercatorQuad/0/0/0.png")
    png = tile.read()
    stop(up)
    evil = caps.replace("<TileWidth>256</TileWidth>", "<TileWidth>100000</TileWidth>") \
        .replace("<TileHeight>256</TileHeight>", "<TileHeight>100000</TileHeight>")
    # The capabilities, and a (small) tile at every tile URL they name.
    hostile = Fixed(evil.encode(), "application/xml", tiles=png)
    evil = evil.replace(f"127.0.0.1:{up_port}", f"127.0.0.1:{hostile.port}")
    hostile.body = evil.encode()
    cfg = work / "wmts.yaml"
    cfg.write_text(f"""
gdal: {{ allowed_private_hosts: ["127.0.0.1:{hostile.port}"] }}
layers:
  - name: evil
    source: {{ type: wmts, url: "http://127.0.0.1:{hostile.port}/wmts", layer: shadedrelief-5400,
              matrix_set: WebMercatorQuad, http: {{ retries: 0 }} }}
    grids: [WorldCRS84Quad]
""")
    port, proc = start(binary, ["--config", cfg], work, wrap=("prlimit", f"--as={6 << 30}"))
    if port is None:
        return f"refused at start ({proc})"
    # Another grid: the upstream's tiles are stitched into a canvas.
    status, _, _, seconds = get(port, "/tiles/evil/WorldCRS84Quad/2/1/1.png")
    time.sleep(1)
    alive = proc.poll() is None
    if alive:
        stop(proc)
    answer = f"answer {status}" if status else "connection closed, no answer"
    return f"started; a tile: {answer} after {seconds:.1f} s; server " + (
        "alive" if alive else f"died (exit {proc.returncode})")


class Fixed:
    """An HTTP server answering every GET with `body` (settable), or with
    the PNG `tiles` for paths under `/wmts/1.0.0/`."""

    def __init__(self, body, content_type, tiles=None):
        import http.server
        self.body = body
        fixed = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                tile = tiles is not None and self.path.startswith("/wmts/1.0.0/")
                data = tiles if tile else fixed.body
                self.send_response(200)
                self.send_header("Content-Type", "image/png" if tile else content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def one_request_cost(binary, work, archive, path, headers):
    port, proc = start(binary, [archive], work)
    if port is None:
        return f"refused at start ({proc})"
    status, _, body, _ = get(port, path, headers)
    # The process's peak, start included (a start may read the tile too).
    peak = peak_mib(proc.pid) if proc.poll() is None else float("nan")
    alive = proc.poll() is None
    stop(proc)
    return f"{status}, {len(body) / MIB:.1f} MiB body, peak {peak:.0f} MiB" + ("" if alive else ", server died")


def decompression(binary, work):
    work.mkdir(parents=True, exist_ok=True)
    leaf = test_bounds.pmtiles_archive(work / "leaf.pmtiles", leaf=test_bounds.gzip_of_zeros(512 * MIB))
    mvt = test_bounds.mbtiles(work / "mvt.mbtiles", {(0, 0, 0): test_bounds.gzip_of_zeros(1024 * MIB)},
                              {"name": "mvt", "format": "pbf", "minzoom": "0", "maxzoom": "0"})
    blob = test_bounds.mbtiles(work / "blob.mbtiles", {(0, 0, 0): "zeroblob(268435456)"},
                               {"name": "blob", "format": "pbf", "minzoom": "0", "maxzoom": "0"})
    meta = test_bounds.pmtiles_archive(work / "meta.pmtiles", metadata=test_bounds.gzip_of_zeros(1024 * MIB, b" "))
    figures = {
        "PMTiles leaf to 512 MiB": one_request_cost(binary, work / "a", leaf,
                                                     "/tiles/leaf/WebMercatorQuad/0/0/0.png", {}),
        "MVT to 1 GiB, no gzip": one_request_cost(binary, work / "b", mvt, "/tiles/mvt/WebMercatorQuad/0/0/0.mvt",
                                                  {"Accept-Encoding": "identity"}),
        "MBTiles blob of 256 MiB": one_request_cost(binary, work / "c", blob,
                                                    "/tiles/blob/WebMercatorQuad/0/0/0.mvt",
                                                    {"Accept-Encoding": "gzip"}),
    }
    cfg = work / "meta.yaml"
    cfg.write_text(f"layers:\n  - name: m\n    source: {{ type: pmtiles, path: {meta} }}\n")
    os.environ["TESSERA_BIN"] = binary
    code, _, peak = test_bounds.run_check(cfg)
    figures["PMTiles metadata to 1 GiB (check)"] = f"exit {code}, peak {peak / 1024:.0f} MiB"
    return "; ".join(f"{k}: {v}" for k, v in figures.items())


def slow_style(binary, work):
    work.mkdir(parents=True, exist_ok=True)
    cfg = test_hardening.slow_style_config(work)
    port, proc = start(binary, ["--config", cfg], work)
    status, _, _, _ = get(port, "/wms?SERVICE=WMS&VERSION=1.3.0&REQUEST=GetMap&LAYERS=slow&STYLES=&CRS=EPSG:4326"
                                "&BBOX=-90,-180,90,180&WIDTH=2048&HEIGHT=1024&FORMAT=image/png")
    answered = time.monotonic()
    busy = None
    while time.monotonic() - answered < 300:
        if "wms maps: 0 of 1" in get(port, "/ready")[2].decode():
            busy = time.monotonic() - answered
            break
        time.sleep(0.1)
    cpu_then = cpu_seconds(proc.pid)
    time.sleep(3)
    burnt = cpu_seconds(proc.pid) - cpu_then
    stop(proc)
    held = f"{busy:.1f} s" if busy is not None else "more than 300 s"
    return f"{status}; the WMS slot busy {held} after it; {burnt:.1f} CPU s in the next 3 s"


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def jobs(binary, work):
    import boto3
    s3 = {"endpoint": os.environ["TESSERA_TEST_S3_ENDPOINT"], "key": os.environ["TESSERA_TEST_S3_ACCESS_KEY"],
          "secret": os.environ["TESSERA_TEST_S3_SECRET_KEY"]}
    client = boto3.client("s3", endpoint_url=s3["endpoint"], aws_access_key_id=s3["key"],
                          aws_secret_access_key=s3["secret"], region_name="us-east-1")
    try:
        client.create_bucket(Bucket="tessera-test")
    except client.exceptions.BucketAlreadyOwnedByYou:
        pass
    work.mkdir(parents=True, exist_ok=True)
    cfg = work / "tessera.yaml"
    cfg.write_text(f"""
stores:
  disk: {{ type: file, path: {work / 'cache'}, memory: 0 }}
admin:
  token: {TOKEN}
  sources_url: s3://tessera-test/hostile-jobs
  sources_file: {work / 'sources.json'}
  options: {{ endpoint: '{s3['endpoint']}', access_key_id: {s3['key']}, secret_access_key: {s3['secret']},
             region: us-east-1, allow_http: true }}
layers:
  - name: relief
    source: {{ path: {ROOT}/data/shadedrelief-5400.tif }}
    grids: [WebMercatorQuad]
    max_zoom: 24
    cache: {{ store: disk }}
""")
    port, proc = start(binary, ["--config", cfg], work)
    auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}

    def post(spec):
        status, _, body, _ = get(port, "/admin/jobs", auth, "POST", json.dumps(spec).encode())
        return status, json.loads(body) if body.startswith(b"{") else body

    status, job = post({"kind": "seed", "layer": "relief", "zoom": "0..24", "rate": 10})
    began = time.monotonic()
    planned = None
    while time.monotonic() - began < 120:
        report = json.loads(get(port, f"/admin/jobs/{job['id']}", auth)[2])
        if report["tiles_planned"]:
            planned = time.monotonic() - began
            break
        time.sleep(0.2)
    get(port, f"/admin/jobs/{job['id']}", auth, "DELETE")
    time.sleep(30)
    state = json.loads(get(port, f"/admin/jobs/{job['id']}", auth)[2])["state"]
    peak = peak_mib(proc.pid)
    status2, job2 = post({"kind": "seed", "layer": "relief", "zoom": "0..2", "threads": 2 ** 63})
    time.sleep(5)
    state2 = (json.loads(get(port, f"/admin/jobs/{job2['id']}", auth)[2])["state"]
              if isinstance(job2, dict) and "id" in job2 else "no job")
    stop(proc)
    took = f"planned after {planned:.1f} s" if planned is not None else "not planned within 120 s"
    return (f"z0..24 seed: {took}, peak {peak:.0f} MiB, {state} 30 s after DELETE; "
            f"threads 2^63: {status2}, job {state2} after 5 s")


def slow_archive(binary, work):
    work.mkdir(parents=True, exist_ok=True)
    archive = test_bounds.slow_mbtiles(work / "slow.mbtiles")
    port, proc = start(binary, [archive], work, wrap=("taskset", "-c", "0"))
    slow = {}
    reader = threading.Thread(target=lambda: slow.update(answer=get(port, "/tiles/slow/WebMercatorQuad/1/0/0.png")))
    reader.start()
    time.sleep(1)
    health = get(port, "/health")
    reader.join()
    stop(proc)
    return f"/health {health[0]} after {health[3]:.2f} s while a tile read took {slow['answer'][3]:.1f} s"


CASES = [
    ("1. caller-dependent answers behind nginx proxy_cache", shared_cache),
    ("5. WMTS tiles of 100000x100000, prlimit --as=6G", huge_wmts_tiles),
    ("7. decompression bombs", decompression),
    ("9. 10,000-layer MapLibre GetMap past its 2 s timeout", slow_style),
    ("10. admin jobs", jobs),
    ("11. a slow MBTiles view, one core", slow_archive),
]


def main():
    before, after = sys.argv[1:3]
    # Optionally the numbers of the cases to run (`1,5`).
    only = sys.argv[3].split(",") if len(sys.argv) > 3 else None
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"hostile-bounds-{os.getpid()}"
    print("| finding | before | after |\n|---|---|---|")
    for name, case in CASES:
        if only and name.split(".")[0] not in only:
            continue
        cells = [case(binary, work / f"{case.__name__}-{i}") for i, binary in enumerate((before, after))]
        print(f"| {name} | {cells[0]} | {cells[1]} |", flush=True)


if __name__ == "__main__":
    main()
