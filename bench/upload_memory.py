"""Peak memory of one 2 GiB upload through a fresh tessera, builds side by
side: each round times curl's own PUT straight to MinIO, then one upload
through each binary (a fresh process each, so the peak over idle is the
upload's alone; the binaries' order reversed every round), deleting every
object after it is timed. curl -T with --aws-sigv4 sends UNSIGNED-PAYLOAD;
`--unsigned` has tessera do the same, else it signs each part's SHA-256.

    scripts/minio start && source var/minio/env
    var/venv/bin/python bench/upload_memory.py --binary before=PATH --binary after=PATH --rounds 3

Prints a markdown table: per binary, the medians over the rounds of MiB/s,
its ratio to curl's MiB/s in the same round, peak RSS and peak over idle
(VmHWM minus VmRSS just before the upload), with the part settings.
"""
import argparse
import os
import shutil
import statistics
import time
import uuid
from pathlib import Path

import uploads as U


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", action="append", required=True, help="NAME=PATH, repeated")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", default="2 GiB")
    ap.add_argument("--parts", type=int, default=16)
    ap.add_argument("--inflight", type=int, default=4)
    ap.add_argument("--work", default="/var/tmp/tessera-bench-uploads")
    ap.add_argument("--unsigned", action="store_true",
                    help="tessera sends parts with UNSIGNED-PAYLOAD (`unsigned_payload` in admin.options), as curl does")
    ap.add_argument("--settle", type=float, default=5.0, help="seconds to wait after each delete")
    ap.add_argument("--trash", help="MinIO's .minio.sys/tmp, emptied after each round (deleted objects wait there)")
    args = ap.parse_args()
    env = {"endpoint": os.environ["TESSERA_TEST_S3_ENDPOINT"], "key": os.environ["TESSERA_TEST_S3_ACCESS_KEY"],
           "secret": os.environ["TESSERA_TEST_S3_SECRET_KEY"]}
    Path(args.work).mkdir(parents=True, exist_ok=True)
    c = U.s3_client(env)
    if U.BUCKET not in [b["Name"] for b in c.list_buckets()["Buckets"]]:
        c.create_bucket(Bucket=U.BUCKET)
    path = U.make_file(args.work, args.size, U.SIZES[args.size])
    mib = path.stat().st_size / U.MIB
    binaries = [b.split("=", 1) for b in args.binary]
    rows = {name: [] for name, _ in binaries}
    for r in range(args.rounds):
        key = f"baseline/{uuid.uuid4().hex}.tif"
        curl = mib / U.curl_direct(env, path, key)
        c.delete_object(Bucket=U.BUCKET, Key=key)
        time.sleep(args.settle)
        # Each round reverses the order: the upload right after another
        # one meets MinIO still settling the last.
        for name, binary in (binaries if r % 2 == 0 else binaries[::-1]):
            text = U.config_text(env, args.work, args.parts, args.inflight)
            if args.unsigned:
                text = text.replace("allow_http: true }", "allow_http: true, unsigned_payload: 'true' }")
            t = U.Tessera(binary, text, args.work)
            try:
                src = f"m{uuid.uuid4().hex[:8]}"
                secs, hwm, idle, body = t.upload(path, src)
            finally:
                t.stop()
            for o in c.list_objects_v2(Bucket=U.BUCKET, Prefix="sources/").get("Contents", []):
                c.delete_object(Bucket=U.BUCKET, Key=o["Key"])
            time.sleep(args.settle)
            rate = mib / secs
            rows[name].append((rate, rate / curl, hwm, hwm - idle))
            print(f"round {r + 1} {name}: {rate:.0f} MiB/s ({rate / curl:.2f} x curl {curl:.0f}), "
                  f"peak {hwm:.0f} MiB, {hwm - idle:.0f} over idle", flush=True)
        if args.trash:
            for p in Path(args.trash).iterdir():
                shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
    signed = "UNSIGNED-PAYLOAD" if args.unsigned else "payload signed (SHA-256)"
    print(f"\n{args.size}, {args.parts} MiB parts x {args.inflight} in flight, {signed}, "
          f"medians of {args.rounds} rounds\n")
    print("| build | MiB/s | vs curl (same round) | peak RSS MiB | peak over idle MiB |")
    print("|---|---:|---:|---:|---:|")
    for name, _ in binaries:
        cols = list(zip(*rows[name]))
        m = [statistics.median(c) for c in cols]
        print(f"| {name} | {m[0]:.0f} | {m[1]:.2f} | {m[2]:.0f} | {m[3]:.0f} |")


if __name__ == "__main__":
    main()
