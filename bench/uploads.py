#!/usr/bin/env python3
"""Upload throughput of `PUT /admin/sources/{name}` into MinIO, next to
standard clients uploading the same file to the same MinIO in the same run.

For each file size (256 MiB and 2 GiB uncompressed GeoTIFFs made from the
demo relief with GDAL, cached in --work) it uploads with curl through a
tessera started for each setting: a single PUT (part size above the file:
the whole body is held, then sent) and multipart with 5, 16 and 64 MiB parts
x 1, 2, 4 and 8 parts in flight. Baselines, same file, same MinIO: boto3
`upload_file` (its defaults: 8 MiB parts, 10 threads), boto3 `put_object`
(one PUT) and curl straight to MinIO (one PUT, SigV4). The peak RSS of
tessera is read from /proc (VmHWM, reset before each upload through
/proc/PID/clear_refs). Each cell is the median of --runs uploads; every
object is deleted after it is timed. The tessera request includes opening
the stored file with GDAL to register it (a few range reads); read-back
verification is off (`verify: false`) and measured once separately.

Run it with scripts/bench-uploads (it builds the release binary and starts
MinIO); the table goes to docs/benchmarks/uploads.md.
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import boto3
from boto3.s3.transfer import TransferConfig
from osgeo import gdal

from common import ROOT, free_port, machine, wait_http

gdal.UseExceptions()
TOKEN = "bench-token-0123456789abcdef"
BUCKET = "tessera-bench-uploads"
MIB = 1 << 20

# 3 bands of bytes: width x height chosen so the file is just over the size.
SIZES = {"256 MiB": (13376, 6690), "2 GiB": (37840, 18920)}


def make_file(work, label, size):
    w, h = size
    path = Path(work) / f"relief-{w}x{h}.tif"
    if not path.exists():
        print(f"making {path} ({label})", flush=True)
        tmp = path.with_suffix(".tmp.tif")
        gdal.Translate(str(tmp), str(ROOT / "data/shadedrelief-5400.tif"), width=w, height=h,
                       resampleAlg="bilinear", creationOptions=["COMPRESS=NONE", "TILED=YES", "BIGTIFF=IF_NEEDED"])
        tmp.rename(path)
    return path


def s3_client(env):
    return boto3.client("s3", endpoint_url=env["endpoint"], aws_access_key_id=env["key"],
                        aws_secret_access_key=env["secret"], region_name="us-east-1")


def config_text(env, work, part_mb, inflight, verify=False):
    host = env["endpoint"].removeprefix("http://")
    return f"""
gdal:
  config_options:
    AWS_S3_ENDPOINT: {host}
    AWS_HTTPS: "NO"
    AWS_VIRTUAL_HOSTING: "FALSE"
    AWS_ACCESS_KEY_ID: {env['key']}
    AWS_SECRET_ACCESS_KEY: {env['secret']}
admin:
  token: {TOKEN}
  sources_url: s3://{BUCKET}/sources
  sources_file: {work}/sources-{uuid.uuid4().hex[:6]}.json
  options: {{ endpoint: '{env['endpoint']}', access_key_id: {env['key']}, secret_access_key: {env['secret']}, region: us-east-1, allow_http: true }}
  max_upload_mb: 8192
  part_size_mb: {part_mb}
  parts_in_flight: {inflight}
  verify: {str(verify).lower()}
layers:
  - name: relief
    source: {{ path: {ROOT}/data/shadedrelief-5400.tif }}
"""


class Tessera:
    def __init__(self, binary, text, work):
        self.config = Path(work) / f"bench-{uuid.uuid4().hex[:6]}.yaml"
        self.config.write_text(text)
        self.port = free_port()
        self.proc = subprocess.Popen([binary, "serve", "--config", str(self.config), "--listen",
                                      f"127.0.0.1:{self.port}"], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, env={**os.environ, "TESSERA_LOG": "warn"})
        wait_http(f"http://127.0.0.1:{self.port}/health")

    def reset_peak(self):
        Path(f"/proc/{self.proc.pid}/clear_refs").write_text("5")

    def memory_mib(self, field):
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def upload(self, path, name):
        self.reset_peak()
        idle = self.memory_mib("VmRSS")
        t0 = time.perf_counter()
        r = subprocess.run(["curl", "-s", "-o", "-", "-w", "\n%{http_code}", "-T", str(path),
                            "-H", f"Authorization: Bearer {TOKEN}",
                            f"http://127.0.0.1:{self.port}/admin/sources/{name}"],
                           capture_output=True, text=True, timeout=1800)
        secs = time.perf_counter() - t0
        body, code = r.stdout.rsplit("\n", 1)
        if code != "201":
            raise SystemExit(f"upload failed: {code} {body} {r.stderr}")
        return secs, self.memory_mib("VmHWM"), idle, json.loads(body)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.config.unlink()


def curl_direct(env, path, key):
    t0 = time.perf_counter()
    subprocess.run(["curl", "-sf", "-o", "/dev/null", "--aws-sigv4", "aws:amz:us-east-1:s3",
                    "--user", f"{env['key']}:{env['secret']}", "-T", str(path),
                    f"{env['endpoint']}/{BUCKET}/{key}"], check=True, timeout=1800)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--sizes", default="256 MiB,2 GiB")
    ap.add_argument("--parts", default="5,16,64")
    ap.add_argument("--inflight", default="1,2,4,8")
    ap.add_argument("--work", default="/var/tmp/tessera-bench-uploads")
    ap.add_argument("--out", default=str(ROOT / "docs/benchmarks/uploads.md"))
    ap.add_argument("--skip-single", action="store_true", help="leave out tessera's single-PUT setting")
    args = ap.parse_args()
    env = {"endpoint": os.environ["TESSERA_TEST_S3_ENDPOINT"], "key": os.environ["TESSERA_TEST_S3_ACCESS_KEY"],
           "secret": os.environ["TESSERA_TEST_S3_SECRET_KEY"]}
    Path(args.work).mkdir(parents=True, exist_ok=True)
    c = s3_client(env)
    if BUCKET not in [b["Name"] for b in c.list_buckets()["Buckets"]]:
        c.create_bucket(Bucket=BUCKET)

    settings = ([] if args.skip_single else [("single PUT", 8192, 1)]) + [
        (f"multipart {p} MiB x {n}", p, n) for p in map(int, args.parts.split(",")) for n in map(int, args.inflight.split(","))]
    rows = []
    for label in args.sizes.split(","):
        path = make_file(args.work, label, SIZES[label])
        size = path.stat().st_size
        mib = size / MIB

        def timed(name, fn):
            secs = []
            for _ in range(args.runs):
                key = f"baseline/{uuid.uuid4().hex}.tif"
                secs.append(fn(key))
                c.delete_object(Bucket=BUCKET, Key=key)
            s = statistics.median(secs)
            rows.append((label, name, mib / s, s, None, None))
            print(rows[-1], flush=True)
            return s

        base = timed("curl -> MinIO, one PUT", lambda key: curl_direct(env, path, key))
        timed("boto3 upload_file (8 MiB x 10 threads)", lambda key: _boto(c, path, key, TransferConfig()))
        timed("boto3 put_object, one PUT", lambda key: _put(c, path, key))
        for name, part, inflight in settings:
            server = Tessera(args.binary, config_text(env, args.work, part, inflight), args.work)
            try:
                secs, peaks, idles, parts = [], [], [], None
                for _ in range(args.runs):
                    src = f"b{uuid.uuid4().hex[:8]}"
                    s, peak, idle, answer = server.upload(path, src)
                    assert answer["bytes"] == size, answer
                    secs.append(s)
                    peaks.append(peak)
                    idles.append(idle)
                    parts = answer["parts"]
                    c.delete_object(Bucket=BUCKET, Key=f"sources/{src}.tif")
            finally:
                server.stop()
            s = statistics.median(secs)
            rows.append((label, f"tessera, {name} ({parts} parts)", mib / s, s,
                         (statistics.median(peaks), statistics.median(idles)), base / s))
            print(rows[-1], flush=True)
        # Read-back verification, once, at the default setting.
        server = Tessera(args.binary, config_text(env, args.work, 16, 4, verify=True), args.work)
        try:
            src = f"b{uuid.uuid4().hex[:8]}"
            s, peak, idle, answer = server.upload(path, src)
            c.delete_object(Bucket=BUCKET, Key=f"sources/{src}.tif")
        finally:
            server.stop()
        rows.append((label, f"tessera, multipart 16 MiB x 4 + read-back CRC32C check ({answer['parts']} parts, 1 run)",
                     mib / s, s, (peak, idle), base / s))
        print(rows[-1], flush=True)

    lines = [
        "# Upload throughput: `PUT /admin/sources/{name}` into MinIO",
        "",
        f"Command: `scripts/bench-uploads --runs {args.runs}` ({Path(__file__).name}). {machine()}",
        "MinIO runs on the same machine (single drive, loopback), so client, tessera and MinIO share",
        "2 cores. Every request is `curl -T FILE` (Content-Length) to tessera, which streams it into",
        "MinIO; the time includes registering the stored file as a layer (GDAL opens it over",
        "`/vsis3/`). `vs curl` = throughput relative to curl's own single PUT of the same file",
        "straight to MinIO, timed in the same run. Peak RSS is tessera's VmHWM during the upload",
        "(reset before it), median over the cell's uploads; \"over idle\" subtracts its RSS just before",
        "the upload (a fresh tessera idles at about 60-70 MiB; memory freed after an upload stays with",
        "the allocator, so later uploads of a cell start higher and show less \"over idle\").",
        "Files are tiled GeoTIFFs, so \"256 MiB\" is 268 MiB and \"2 GiB\" 2053 MiB on disk.",
        f"Medians of {args.runs} uploads per cell.",
        "",
        "| file | client / setting | MiB/s | seconds | tessera peak RSS MiB (over idle) | vs curl |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for label, name, rate, secs, peak, ratio in rows:
        lines.append(f"| {label} | {name} | {rate:.0f} | {secs:.2f} | "
                     f"{'' if peak is None else f'{peak[0]:.0f} ({peak[0] - peak[1]:.0f})'} | "
                     f"{'' if ratio is None else f'{ratio:.2f}'} |")
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


def _boto(c, path, key, config):
    t0 = time.perf_counter()
    c.upload_file(str(path), BUCKET, key, Config=config)
    return time.perf_counter() - t0


def _put(c, path, key):
    t0 = time.perf_counter()
    with open(path, "rb") as f:
        c.put_object(Bucket=BUCKET, Key=key, Body=f)
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
