"""What OGC API tiles cost against XYZ (docs/benchmarks/ogcapi.md): one
server holding every tile of z0-4 in its memory LRU; wrk over the same
tiles as XYZ paths and as OGC API paths (`.../map/tiles/WebMercatorQuad/
{z}/{row}/{col}?f=png`, the short way) and without `f=` (`Accept:
image/png`, through the router), runs alternating; medians and ratios.

    python3 bench/ogcapi.py --binary target/release/tessera [--runs 3] [--seconds 8]
"""
import argparse
import statistics
import sys
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, tessera, wrk  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--binary", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--work", default="/tmp/tessera-bench-ogcapi")
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    config = f"""
stores: {{ mem: {{ type: memory, memory: 1GiB }} }}
layers:
  - name: relief
    source: {{ path: {ROOT}/data/shadedrelief-5400.tif }}
    grids: [WebMercatorQuad]
    cache: {{ store: mem }}
server: {{ access_log: false }}
"""
    tiles = [(z, x, y) for z in range(5) for x in range(2 ** z) for y in range(2 ** z)]
    paths = {
        "XYZ": [f"/tiles/relief/WebMercatorQuad/{z}/{x}/{y}.png" for z, x, y in tiles],
        "OGC API": [f"/ogcapi/collections/relief/map/tiles/WebMercatorQuad/{z}/{y}/{x}?f=png"
                    for z, x, y in tiles],
        # Without f=, the format comes from Accept: the router answers.
        "OGC API, Accept": [f"/ogcapi/collections/relief/map/tiles/WebMercatorQuad/{z}/{y}/{x}"
                            for z, x, y in tiles],
    }
    headers = {"OGC API, Accept": {"Accept": "image/png"}}
    files = {}
    for i, (kind, ps) in enumerate(paths.items()):
        files[kind] = work / f"paths-{i}.txt"
        files[kind].write_text("\n".join(ps) + "\n")
    rates = {k: [] for k in paths}
    with tessera(args.binary, config, work / "server") as port:
        base = f"http://127.0.0.1:{port}"
        for p in paths["XYZ"]:  # every tile rendered and held in memory
            urllib.request.urlopen(base + p, timeout=120).read()
        for kind in paths:
            wrk(base, files[kind], 64, 2, headers.get(kind))  # warm up
        for run in range(args.runs):
            for kind in (list(paths) if run % 2 == 0 else list(reversed(paths))):
                rate, p50, p99 = wrk(base, files[kind], 64, args.seconds, headers.get(kind))
                rates[kind].append(rate)
                print(f"  {kind:16} run {run}: {rate:.0f} req/s p50 {p50} p99 {p99}", file=sys.stderr)
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(machine())
    print()
    print(f"| cache hits, memory LRU, 64 connections, z0-4 (wrk, {args.seconds} s) | req/s (median of {args.runs}) |")
    print("| --- | --- |")
    for kind, rate in med.items():
        print(f"| {kind} | {rate:.0f} |")
    print(f"| ratio (OGC API / XYZ) | {med['OGC API'] / med['XYZ']:.2f} |")
    print(f"| ratio (OGC API by Accept / XYZ) | {med['OGC API, Accept'] / med['XYZ']:.2f} |")


if __name__ == "__main__":
    main()
