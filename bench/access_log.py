"""What the access log costs cache hits: tessera with `server.access_log`
on and off, and nginx with its access log on and off, serving the same
341 tiles (the demo relief, zooms 0-4) to wrk, alternating, medians of the
runs (docs/benchmarks/access-log.md).

tessera keeps the tiles in a file store with its memory LRU in front
(1 GiB, every tile held) and, in a second configuration, in the file store
only; nginx serves the same tiles as
files (sendfile, one worker per core). Both write their logs to a file, as
under systemd or a container runtime (tessera: stderr redirected; nginx:
`access_log <file>` with its default buffering, none). With `--hog`, a
`yes > /dev/null` per core runs beside both servers for the whole run
(`--hog-kind compiler`: a C compiler per core, `gcc -O2` of a generated
file over and over, which also allocates, reads and writes files): the
ratios must hold on a busy machine.

    python3 bench/access_log.py --binary target/release/tessera [--runs 5] [--seconds 8] [--hog [--hog-kind compiler]]
"""
import argparse
import contextlib
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, curl_pass, ensure_tools, free_port, machine, nginx_static, wait_http, wrk  # noqa: E402

PATHS = [f"/tiles/relief/WebMercatorQuad/{z}/{x}/{y}.png" for z in range(5) for x in range(2 ** z)
         for y in range(2 ** z)]


@contextlib.contextmanager
def tessera(binary, work, store, access_log):
    work.mkdir(parents=True, exist_ok=True)
    cfg = work / "tessera.yaml"
    tiles = work / "tiles"
    # As bench/peers.py: the memory LRU in front of a file store holds
    # every tile; the file store alone reads each hit from its file.
    memory_mb = 1024 if store == "memory" else 0
    cfg.write_text(f"""
server: {{ access_log: {str(access_log).lower()} }}
stores: {{ disk: {{ type: file, path: {tiles}, memory_mb: {memory_mb} }} }}
layers:
  - name: relief
    source: {{ path: {ROOT}/data/shadedrelief-5400.tif }}
    grids: [WebMercatorQuad]
    formats: [png]
    cache: {{ store: disk }}
""")
    port = free_port()
    log = open(work / f"tessera-{port}.log", "w")
    proc = subprocess.Popen([binary, "serve", "--config", str(cfg), "--listen", f"127.0.0.1:{port}"],
                            stdout=log, stderr=log, env={**os.environ, "TESSERA_LOG": "info"})
    try:
        wait_http(f"http://127.0.0.1:{port}/health")
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def compiler_source(work):
    """A C file that keeps `gcc -O2` busy for about a second."""
    src = Path(work) / "hog.c"
    funcs = [f"""
int f{i}(int *a, int n) {{
    int s = {i};
    for (int j = 0; j < n; j++) {{
        s += a[j] * (j ^ {i}) + (s >> 3);
        if (s % {i + 7} == 0) s ^= a[(j + {i}) % n];
    }}
    return s;
}}""" for i in range(1500)]
    src.write_text("\n".join(funcs) + "\n")
    return src


@contextlib.contextmanager
def hog(on, kind="yes", work="/tmp"):
    count = os.cpu_count() if on else 0
    if kind == "compiler" and count:
        # Each loop in its own process group, killed whole at the end: no
        # compiler is left running into the next benchmark.
        src = compiler_source(work)
        procs = [subprocess.Popen(["sh", "-c", f"while :; do gcc -O2 -c {src} -o /dev/null; done"],
                                  start_new_session=True) for _ in range(count)]
    else:
        # `yes` itself, not a shell running it: killing a shell would
        # leave its `yes` running past the benchmark.
        procs = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(count)]
    try:
        yield
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                if kind == "compiler":
                    os.killpg(p.pid, 9)
                else:
                    p.kill()
            p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--binary", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--hog", action="store_true")
    ap.add_argument("--hog-kind", choices=["yes", "compiler"], default="yes")
    ap.add_argument("--work", default="/tmp/tessera-bench-access-log")
    args = ap.parse_args()
    ensure_tools()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    paths_file = work / "paths.txt"
    paths_file.write_text("\n".join(PATHS) + "\n")
    # The tiles as files for nginx: seeded once by tessera's file store.
    files = work / "file"
    with tessera(args.binary, files, "file", False) as port:
        curl_pass(f"http://127.0.0.1:{port}", PATHS)
    tile_root = next((files / "tiles").glob("relief*/WebMercatorQuad")).parent
    nginx_paths = work / "nginx-paths.txt"
    nginx_paths.write_text("".join(f"/tiles/{p.relative_to(tile_root)}\n" for p in sorted(tile_root.rglob("*.png"))))

    def run_tessera(store, log):
        with tessera(args.binary, work / store, store, log) as port:
            base = f"http://127.0.0.1:{port}"
            curl_pass(base, PATHS)
            curl_pass(base, PATHS)
            return wrk(base, paths_file, args.connections, args.seconds)[0]

    def run_nginx(log):
        with nginx_static(work, tile_root, access_log=work / "nginx-access.log" if log else None) as (port, _):
            return wrk(f"http://127.0.0.1:{port}", nginx_paths, args.connections, args.seconds)[0]

    kinds = {
        "tessera, memory LRU, access log off": lambda: run_tessera("memory", False),
        "tessera, memory LRU, access log on": lambda: run_tessera("memory", True),
        "tessera, file store, access log on": lambda: run_tessera("file", True),
        "nginx, access log off": lambda: run_nginx(False),
        "nginx, access log on": lambda: run_nginx(True),
    }
    rates = {k: [] for k in kinds}
    with hog(args.hog, args.hog_kind, work):
        for r in range(args.runs):
            for kind in (list(kinds) if r % 2 == 0 else list(reversed(kinds))):
                rate = kinds[kind]()
                rates[kind].append(rate)
                print(f"  {kind:38} run {r}: {rate:.0f} req/s", file=sys.stderr)
    med = {k: statistics.median(v) for k, v in rates.items()}
    beside = {"yes": "a CPU hog (`yes`)", "compiler": "a C compiler (`gcc -O2` in a loop)"}[args.hog_kind]
    print(machine() + (f" With {beside} per core beside the servers." if args.hog else ""))
    print()
    print(f"| {len(PATHS)} cached tiles, wrk {args.connections} connections, {args.seconds} s | requests/s (median of {args.runs}) |")
    print("| --- | ---: |")
    for kind, rate in med.items():
        print(f"| {kind} | {rate:.0f} |")
    on, off = med["tessera, memory LRU, access log on"], med["tessera, memory LRU, access log off"]
    print(f"| tessera access log on / off | {on / off:.2f} |")
    print(f"| memory LRU / nginx, both logging | {on / med['nginx, access log on']:.2f} |")
    print(f"| file store / nginx, both logging | {med['tessera, file store, access log on'] / med['nginx, access log on']:.2f} |")
    print(f"| nginx access log on / off | {med['nginx, access log on'] / med['nginx, access log off']:.2f} |")


if __name__ == "__main__":
    main()
