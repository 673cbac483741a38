"""tessera against go-pmtiles' `pmtiles serve` on the same PMTiles archive
(docs/benchmarks/archives.md): the relief raster cut to z0-5 by GDAL's
MBTiles driver (zooms 0-4) and converted by `pmtiles convert` (341 tiles).

- local file: first reads (each server started fresh, every tile asked
  once by curl, 8 transfers at a time; seconds, median of the runs) and
  warm requests/s (wrk, 64 connections, alternating runs; medians);
  tessera both without a cache (`store: none`: every tile read from the
  archive) and with a memory cache (as `tessera serve x.pmtiles` has);
- over HTTP: both servers read the archive from one loopback range server
  that counts the range requests of a first pass over every tile;
- on MinIO (when `TESSERA_TEST_S3_*` name one: `scripts/minio start` and
  `source var/minio/env`): first pass and warm requests/s, both servers
  reading the object by ranges (tessera also with a memory cache).

    python3 bench/archives.py --binary target/release/tessera --pmtiles $(scripts/go-pmtiles) \\
        [--runs 3] [--seconds 8]
"""
import argparse
import contextlib
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))
from common import curl_pass, free_port, machine, wait_http, wrk  # noqa: E402
from cogserver import start_cog_server  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TILES = [(z, x, y) for z in range(5) for x in range(2 ** z) for y in range(2 ** z)]


def run(*args):
    subprocess.run([str(a) for a in args], check=True, capture_output=True)


def make_archive(work, pmtiles_bin):
    archive = work / "relief.pmtiles"
    if archive.exists():
        return archive
    mb = work / "relief.mbtiles"
    run("gdal_translate", "-q", "-of", "MBTiles", "-co", "TILE_FORMAT=PNG", "-co", "ZOOM_LEVEL_STRATEGY=UPPER",
        ROOT / "data/shadedrelief-5400.tif", mb)
    run("gdaladdo", "-q", "-r", "average", mb, "2", "4", "8", "16")
    run(pmtiles_bin, "convert", mb, archive)
    return archive


@contextlib.contextmanager
def process(args, health):
    proc = subprocess.Popen([str(a) for a in args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "TESSERA_LOG": "warn"})
    try:
        wait_http(health)
        yield
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def pmtiles_server(pmtiles_bin, directory=None, bucket=None):
    port = free_port()
    args = [pmtiles_bin, "serve", directory or ".", "--port", port, "--interface", "127.0.0.1", "--quiet"]
    if bucket:
        args += ["--bucket", bucket]
    return port, process(args, f"http://127.0.0.1:{port}/relief/0/0/0.png")


def tessera_server(binary, work, config=None, archive=None):
    port = free_port()
    if config:
        path = work / f"tessera-{port}.yaml"
        path.write_text(config)
        args = [binary, "serve", "--config", path, "--listen", f"127.0.0.1:{port}"]
    else:
        args = [binary, "serve", archive, "--listen", f"127.0.0.1:{port}"]
    return port, process(args, f"http://127.0.0.1:{port}/health")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--binary", required=True)
    ap.add_argument("--pmtiles", required=True, help="go-pmtiles binary (scripts/go-pmtiles)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--work", default="/tmp/tessera-bench-archives")
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    archive = make_archive(work, args.pmtiles)
    paths = {
        "go-pmtiles": [f"/relief/{z}/{x}/{y}.png" for z, x, y in TILES],
        "tessera": [f"/tiles/relief/WebMercatorQuad/{z}/{x}/{y}.png" for z, x, y in TILES],
    }
    paths["tessera, memory cache"] = paths["tessera"]
    files = {}
    for i, (kind, ps) in enumerate(paths.items()):
        files[kind] = work / f"paths-{i}.txt"
        files[kind].write_text("\n".join(ps) + "\n")
    cached = f"""
stores: {{ mem: {{ type: memory, memory: 512MiB }} }}
server: {{ access_log: false }}
layers:
  - name: relief
    source: {{ type: pmtiles, path: {archive} }}
    grids: [WebMercatorQuad]
    formats: [png]
    max_zoom: 4
    cache: {{ store: mem }}
"""
    uncached = cached.replace("store: mem }", "store: none }")

    def servers():
        return {
            "go-pmtiles": pmtiles_server(args.pmtiles, str(work)),
            "tessera": tessera_server(args.binary, work, config=uncached),
            "tessera, memory cache": tessera_server(args.binary, work, config=cached),
        }

    first = {k: [] for k in paths}
    warm = {k: [] for k in paths}
    for r in range(args.runs):
        order = list(paths) if r % 2 == 0 else list(reversed(paths))
        for kind in order:
            port, running = servers()[kind]
            with running:
                base = f"http://127.0.0.1:{port}"
                first[kind].append(curl_pass(base, paths[kind]))
                wrk(base, files[kind], 64, 2)  # warm up
                rate, p50, p99 = wrk(base, files[kind], 64, args.seconds)
                warm[kind].append(rate)
                print(f"  {kind:22} run {r}: first pass {first[kind][-1]:.2f} s, warm {rate:.0f} req/s "
                      f"p50 {p50} p99 {p99}", file=sys.stderr)

    # Over HTTP, counted by the range server.
    web = start_cog_server(work)
    remote = f"""
gdal: {{ allowed_private_hosts: ["{web.authority}"] }}
server: {{ access_log: false }}
layers:
  - name: relief
    source: {{ type: pmtiles, path: "{web.url}/relief.pmtiles", check_secs: 3600 }}
    grids: [WebMercatorQuad]
    formats: [png]
    max_zoom: 4
    cache: {{ store: none }}
"""
    ranges, remote_first = {}, {k: [] for k in ("go-pmtiles", "tessera")}
    for r in range(args.runs):
        kinds = ["go-pmtiles", "tessera"] if r % 2 == 0 else ["tessera", "go-pmtiles"]
        for kind in kinds:
            port, running = (pmtiles_server(args.pmtiles, ".", bucket=web.url) if kind == "go-pmtiles"
                             else tessera_server(args.binary, work, config=remote))
            with running:
                web.ranges.clear()
                remote_first[kind].append(curl_pass(f"http://127.0.0.1:{port}", paths[kind]))
                ranges[kind] = len(web.ranges)
                print(f"  over HTTP {kind:12} run {r}: first pass {remote_first[kind][-1]:.2f} s, "
                      f"{ranges[kind]} ranges", file=sys.stderr)

    minio = on_minio(args, work, archive, paths, files) if os.environ.get("TESSERA_TEST_S3_ENDPOINT") else None

    med_first = {k: statistics.median(v) for k, v in first.items()}
    med_warm = {k: statistics.median(v) for k, v in warm.items()}
    print(machine())
    print()
    print(f"| {len(TILES)} tiles, local PMTiles | first pass, curl 8 parallel (s, median of {args.runs}) "
          f"| warm, wrk 64 connections {args.seconds} s (req/s, median of {args.runs}) |")
    print("| --- | --- | --- |")
    for kind in paths:
        print(f"| {kind} | {med_first[kind]:.2f} | {med_warm[kind]:.0f} |")
    g = "go-pmtiles"
    print(f"| ratio tessera / go-pmtiles | {med_first[g] / med_first['tessera']:.2f} (speed) "
          f"| {med_warm['tessera'] / med_warm[g]:.2f} |")
    print(f"| ratio tessera with a memory cache / go-pmtiles | "
          f"{med_first[g] / med_first['tessera, memory cache']:.2f} (speed) "
          f"| {med_warm['tessera, memory cache'] / med_warm[g]:.2f} |")
    print()
    print(f"| over HTTP (loopback range server), first pass | seconds (median of {args.runs}) | range requests |")
    print("| --- | --- | --- |")
    for kind in ranges:
        print(f"| {kind} | {statistics.median(remote_first[kind]):.2f} | {ranges[kind]} |")
    if minio:
        print()
        print(f"| on MinIO (loopback) | first pass (s, median of {args.runs}) | warm (req/s, median of {args.runs}) |")
        print("| --- | --- | --- |")
        for kind, (f, w) in minio.items():
            print(f"| {kind} | {statistics.median(f):.2f} | {statistics.median(w):.0f} |")
        g = minio["go-pmtiles"]
        for kind in ("tessera", "tessera, memory cache"):
            t = minio[kind]
            print(f"| ratio {kind} / go-pmtiles | {statistics.median(g[0]) / statistics.median(t[0]):.2f} (speed) "
                  f"| {statistics.median(t[1]) / statistics.median(g[1]):.2f} |")


def on_minio(args, work, archive, paths, files):
    """Both servers reading the archive from MinIO: {kind: (first passes,
    warm rates)}."""
    endpoint = os.environ["TESSERA_TEST_S3_ENDPOINT"]
    key, secret = os.environ["TESSERA_TEST_S3_ACCESS_KEY"], os.environ["TESSERA_TEST_S3_SECRET_KEY"]
    bucket = "tessera-bench-archives"
    sign = ["--aws-sigv4", "aws:amz:us-east-1:s3", "--user", f"{key}:{secret}"]
    subprocess.run(["curl", "-s", "-X", "PUT", *sign, f"{endpoint}/{bucket}"], check=True, capture_output=True)
    subprocess.run(["curl", "-sf", "-T", archive, *sign, f"{endpoint}/{bucket}/relief.pmtiles"], check=True,
                   capture_output=True)
    env = {"AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret, "AWS_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": "true"}
    os.environ.update(env)
    config = f"""
server: {{ access_log: false }}
layers:
  - name: relief
    source: {{ type: pmtiles, path: "s3://{bucket}/relief.pmtiles" }}
    grids: [WebMercatorQuad]
    formats: [png]
    max_zoom: 4
    cache: {{ store: none }}
"""
    cached = config.replace("cache: { store: none }", "cache: { store: mem }").replace(
        "server: {", "stores: { mem: { type: memory, memory: 512MiB } }\nserver: {")
    go_bucket = f"s3://{bucket}?endpoint={endpoint}&use_path_style=true&region=us-east-1"
    kinds = ["go-pmtiles", "tessera", "tessera, memory cache"]
    result = {k: ([], []) for k in kinds}
    for r in range(args.runs):
        for kind in (kinds if r % 2 == 0 else list(reversed(kinds))):
            if kind == "go-pmtiles":
                port, running = pmtiles_server(args.pmtiles, ".", bucket=go_bucket)
            elif kind == "tessera":
                port, running = tessera_server(args.binary, work, config=config)
            else:
                port, running = tessera_server(args.binary, work, config=cached)
            with running:
                base = f"http://127.0.0.1:{port}"
                result[kind][0].append(curl_pass(base, paths[kind]))
                wrk(base, files[kind], 64, 2)
                rate, _, _ = wrk(base, files[kind], 64, args.seconds)
                result[kind][1].append(rate)
                print(f"  on MinIO {kind:22} run {r}: first pass {result[kind][0][-1]:.2f} s, warm {rate:.0f} req/s",
                      file=sys.stderr)
    return result


if __name__ == "__main__":
    main()
