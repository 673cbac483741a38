"""What access control costs on cache hits (docs/benchmarks/auth.md): the
relief layer (zooms 0-4, 341 tiles, a memory store, access log off) seeded
by a warm-up, then asked by wrk (64 connections) without an `auth:`
section and as a protected layer read with an `X-API-Key`; runs
alternate; medians and their ratio.

    python3 bench/auth.py --binary target/release/tessera [--runs 5] [--seconds 8]
"""
import argparse
import hashlib
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, tessera, wrk  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
KEY = "bench-key-0123456789abcdef"
LAYER = f"""
server: {{ access_log: false }}
stores: {{ mem: {{ type: memory, memory: 512MiB }} }}
layers:
  - name: relief
    source: {{ path: {ROOT}/data/shadedrelief-5400.tif }}
    grids: [WebMercatorQuad]
    formats: [png]
    max_zoom: 4
    cache: {{ store: mem }}
"""
AUTH = f"""
auth:
  keys:
    - {{ id: bench, sha256: {hashlib.sha256(KEY.encode()).hexdigest()}, layers: [relief] }}
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--binary", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--work", default="/tmp/tessera-bench-auth")
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    paths = work / "paths.txt"
    paths.write_text("\n".join(f"/tiles/relief/WebMercatorQuad/{z}/{x}/{y}.png"
                               for z in range(5) for x in range(2 ** z) for y in range(2 ** z)) + "\n")
    kinds = {"no auth section": (LAYER, None), "API key (X-API-Key)": (LAYER + AUTH, {"X-API-Key": KEY})}
    rates = {k: [] for k in kinds}
    for r in range(args.runs):
        for kind in (list(kinds) if r % 2 == 0 else list(reversed(kinds))):
            config, headers = kinds[kind]
            with tessera(args.binary, config, work) as port:
                base = f"http://127.0.0.1:{port}"
                for _ in range(2):  # renders, then warm
                    wrk(base, paths, 64, 2, headers)
                rate, p50, p99 = wrk(base, paths, 64, args.seconds, headers)
                rates[kind].append(rate)
                print(f"  {kind:22} run {r}: {rate:.0f} req/s p50 {p50} p99 {p99}", file=sys.stderr)
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(machine())
    print()
    print(f"| cache hits, wrk 64 connections {args.seconds} s | req/s (median of {args.runs}) |")
    print("| --- | --- |")
    for kind, rate in med.items():
        print(f"| {kind} | {rate:.0f} |")
    a, b = list(med)
    print(f"| ratio with a key / without auth | {med[b] / med[a]:.2f} |")


if __name__ == "__main__":
    main()
