"""Cache hits of several tessera binaries side by side, and nginx, on the
access-log benchmark's tiles and configuration (bench/access_log.py):
alternating rounds, each server's requests/s under wrk and its CPU time per
request (all its threads, from /proc), medians of the rounds
(docs/benchmarks/access-log.md).

    python3 bench/hits_ab.py --binary before=B --binary after=A [--store memory|file]
        [--runs 3] [--seconds 8] [--hog] [--wmts] [--no-nginx]

`--wmts` asks for the same tiles by WMTS KVP GetTile, which the router
answers (not the short way); nginx is then left out.
"""
import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from access_log import PATHS, hog, tessera  # noqa: E402
from common import curl_pass, ensure_tools, machine, nginx_static, wrk  # noqa: E402
from log_thread_cpu import thread_cpu  # noqa: E402


def cpu_seconds(pids):
    """User and system CPU seconds of every thread of `pids`."""
    return sum(sum(thread_cpu(pid).values()) for pid in pids)


def measure(base, paths, pids, connections, seconds):
    """(requests/s, CPU us per request) of the server `pids` under wrk."""
    before = cpu_seconds(pids)
    rate = wrk(base, paths, connections, seconds)[0]
    used = cpu_seconds(pids) - before
    return rate, used / (rate * seconds) * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--binary", action="append", required=True, help="name=path")
    ap.add_argument("--store", choices=["memory", "file"], default="memory")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--hog", action="store_true")
    ap.add_argument("--wmts", action="store_true")
    ap.add_argument("--no-nginx", action="store_true")
    ap.add_argument("--work", default="/tmp/tessera-bench-hits-ab")
    args = ap.parse_args()
    ensure_tools()
    binaries = dict(b.split("=", 1) for b in args.binary)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    warm = work / "paths.txt"
    warm.write_text("\n".join(PATHS) + "\n")
    asked = warm
    if args.wmts:
        asked = work / "wmts-paths.txt"
        asked.write_text("".join(
            "/wmts?SERVICE=WMTS&REQUEST=GetTile&VERSION=1.0.0&LAYER=relief&STYLE=default"
            f"&TILEMATRIXSET=WebMercatorQuad&TILEMATRIX={z}&TILEROW={y}&TILECOL={x}&FORMAT=image/png\n"
            for z in range(5) for x in range(2 ** z) for y in range(2 ** z)))
    names = list(binaries)
    tile_root = None
    if not (args.no_nginx or args.wmts):
        names.append("nginx")
        # The tiles as files for nginx: seeded once by tessera's file store.
        files = work / "nginx-tiles"
        with tessera(next(iter(binaries.values())), files, "file", False) as port:
            curl_pass(f"http://127.0.0.1:{port}", PATHS)
        tile_root = next((files / "tiles").glob("relief*/WebMercatorQuad")).parent
        nginx_paths = work / "nginx-paths.txt"
        nginx_paths.write_text("".join(f"/tiles/{p.relative_to(tile_root)}\n"
                                       for p in sorted(tile_root.rglob("*.png"))))

    def run(name):
        if name == "nginx":
            with nginx_static(work, tile_root, access_log=work / "nginx-access.log") as (port, proc):
                time.sleep(0.3)  # its workers started
                workers = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                                         text=True, check=True).stdout.split()
                return measure(f"http://127.0.0.1:{port}", nginx_paths, workers, args.connections,
                               args.seconds)
        with tessera(binaries[name], work / f"{args.store}-{name}", args.store, True) as port:
            base = f"http://127.0.0.1:{port}"
            curl_pass(base, PATHS)
            curl_pass(base, PATHS)
            pid = subprocess.run(["pgrep", "-f", "--", f"--listen 127.0.0.1:{port}"], capture_output=True,
                                 text=True, check=True).stdout.split()[0]
            return measure(base, asked, [pid], args.connections, args.seconds)

    results = {name: [] for name in names}
    with hog(args.hog):
        for r in range(args.runs):
            for name in (names if r % 2 == 0 else list(reversed(names))):
                rate, cpu = run(name)
                results[name].append((rate, cpu))
                print(f"  {name:10} run {r}: {rate:.0f} req/s, {cpu:.1f} us CPU/request", file=sys.stderr)
    print(machine() + (" With a CPU hog per core beside the servers." if args.hog else ""))
    print()
    kind = "WMTS KVP" if args.wmts else "XYZ"
    print(f"| {args.store} hits ({kind}), wrk {args.connections} connections, {args.seconds} s, "
          f"medians of {args.runs} | requests/s | CPU us/request |")
    print("| --- | ---: | ---: |")
    for name, rows in results.items():
        print(f"| {name} | {statistics.median(r for r, _ in rows):.0f} "
              f"| {statistics.median(c for _, c in rows):.1f} |")


if __name__ == "__main__":
    main()
