#!/usr/bin/env python3
"""System calls per cache hit served from files: tessera's file store (no
memory LRU) and nginx (sendfile, one worker per core), both with their
access log on, written to a file. The access-log benchmark's 341 tiles
(bench/access_log.py), asked 10,000 times over 8 keep-alive connections;
`strace -c` attached to every thread of each server after a warm-up pass,
so only the hits are counted. Counts, not times: a busy machine does not
change them. Writes the table for docs/benchmarks/access-log.md.

    var/venv/bin/python bench/hits_strace.py --binary target/release/tessera [--hits 10000]

Needs strace, nginx and curl (Debian). Never run by CI.
"""
import argparse
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from access_log import PATHS, tessera  # noqa: E402
from common import curl_pass, nginx_static, run_load  # noqa: E402


def tasks(pids):
    """Every thread of the processes `pids` and of their children."""
    found = set()
    for pid in pids:
        found.update(int(t.name) for t in Path(f"/proc/{pid}/task").iterdir())
        children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
        found.update(tasks([int(c) for c in children]))
    return found


def counted(pids, port, paths, clients, out):
    """{syscall: calls} while `paths` are asked of the server `pids`."""
    strace = subprocess.Popen(["strace", "-c", "-f", "-o", str(out)]
                              + [a for t in sorted(tasks(pids)) for a in ("-p", str(t))],
                              stderr=subprocess.DEVNULL)
    time.sleep(1)
    _, _, errors, _ = run_load(port, paths, clients)
    strace.send_signal(signal.SIGINT)
    strace.wait(timeout=60)
    if errors:
        raise SystemExit(f"{len(errors)} failed requests, first {errors[0]}")
    calls = {}
    for line in out.read_text().splitlines():
        cols = line.split()
        # % time, seconds, usecs/call, calls, [errors], syscall
        if len(cols) >= 5 and re.fullmatch(r"[\d.]+", cols[0]) and cols[-1] != "total":
            calls[cols[-1]] = int(cols[3])
    return calls


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--binary", required=True)
    ap.add_argument("--hits", type=int, default=10_000)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--work", type=Path, default=Path("/tmp/tessera-bench-strace"))
    args = ap.parse_args()
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    files = work / "file"
    with tessera(args.binary, files, "file", True) as port:
        curl_pass(f"http://127.0.0.1:{port}", PATHS)
        pid = int(subprocess.run(["fuser", f"{port}/tcp"], capture_output=True, text=True).stdout.split()[0])
        curl_pass(f"http://127.0.0.1:{port}", PATHS)
        paths = (PATHS * (args.hits // len(PATHS) + 1))[:args.hits]
        ours = counted([pid], port, paths, args.clients, work / "tessera.strace")
    tile_root = next((files / "tiles").glob("relief*/WebMercatorQuad")).parent
    nginx_paths = [f"/tiles/{p.relative_to(tile_root)}" for p in sorted(tile_root.rglob("*.png"))]
    theirs = {}
    for cached in (False, True):
        with nginx_static(work, tile_root, access_log=work / "nginx-access.log",
                          open_file_cache=cached) as (port, proc):
            curl_pass(f"http://127.0.0.1:{port}", nginx_paths)
            paths = (nginx_paths * (args.hits // len(nginx_paths) + 1))[:args.hits]
            theirs[cached] = counted([proc.pid], port, paths, args.clients, work / f"nginx-{cached}.strace")
    counts = [ours, theirs[False], theirs[True]]
    names = sorted(set().union(*counts), key=lambda n: -sum(c.get(n, 0) for c in counts))
    lines = [f"| system call ({args.hits} hits, {args.clients} connections) | tessera per hit | nginx per hit "
             "| nginx with `open_file_cache` per hit |",
             "| --- | ---: | ---: | ---: |"]
    for n in names:
        per = [c.get(n, 0) / args.hits for c in counts]
        if max(per) >= 0.005:
            lines.append(f"| `{n}` | " + " | ".join(f"{v:.2f}" for v in per) + " |")
    lines.append("| all | " + " | ".join(f"{sum(c.values()) / args.hits:.2f}" for c in counts) + " |")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
