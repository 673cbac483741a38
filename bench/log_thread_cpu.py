"""CPU per request, and the log writer threads' share of it, for cache hits
with the access log on: tessera (memory LRU in front of a file store, every
tile held) under wrk, each binary in turn, the threads' CPU time read from
/proc before and after each run (docs/benchmarks/access-log.md).

A throughput ratio on a shared 2-core machine moves by 10 % from run to run;
CPU time per request, split by thread, shows a writer thread's cost even
then.

    python3 bench/log_thread_cpu.py --binary before=B --binary after=A [--runs 3] [--seconds 8]
"""
import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from access_log import PATHS, tessera  # noqa: E402
from common import curl_pass, ensure_tools, machine, wrk  # noqa: E402


def thread_cpu(pid):
    """CPU seconds by thread name (names as /proc cuts them, 15 bytes)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
            fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue  # the thread ended meanwhile
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def is_log_writer(name):
    return name.startswith("tessera-log") or name.startswith("tessera-access")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--binary", action="append", required=True, help="name=path")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--work", default="/tmp/tessera-bench-log-cpu")
    args = ap.parse_args()
    ensure_tools()
    binaries = dict(b.split("=", 1) for b in args.binary)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    paths_file = work / "paths.txt"
    paths_file.write_text("\n".join(PATHS) + "\n")
    total = {name: [] for name in binaries}
    writers = {name: [] for name in binaries}
    for r in range(args.runs):
        for name in (list(binaries) if r % 2 == 0 else list(reversed(binaries))):
            with tessera(binaries[name], work / name, "memory", True) as port:
                base = f"http://127.0.0.1:{port}"
                curl_pass(base, PATHS)
                curl_pass(base, PATHS)
                pid = next(int(p) for p in os.listdir("/proc") if p.isdigit() and _listens(p, port))
                before = thread_cpu(pid)
                rate = wrk(base, paths_file, args.connections, args.seconds)[0]
                after = thread_cpu(pid)
            requests = rate * args.seconds
            per = {k: (after[k] - before.get(k, 0.0)) / requests * 1e6 for k in after}
            total[name].append(sum(per.values()))
            writers[name].append(sum(v for k, v in per.items() if is_log_writer(k)))
            print(f"  {name} run {r}: {rate:.0f} req/s, {total[name][-1]:.1f} us CPU/request, "
                  f"log writer threads {writers[name][-1]:.3f} us", file=sys.stderr)
    print(machine())
    print()
    print(f"| memory LRU hits, access log on, wrk {args.connections} connections, {args.seconds} s, "
          f"medians of {args.runs} | CPU us/request | log writer threads us/request | writers' share |")
    print("| --- | ---: | ---: | ---: |")
    for name in binaries:
        t, w = statistics.median(total[name]), statistics.median(writers[name])
        print(f"| {name} | {t:.1f} | {w:.3f} | {w / t * 100:.1f} % |")


def _listens(pid, port):
    """Whether process `pid` is `tessera serve` on `port`."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (FileNotFoundError, PermissionError):
        return False
    return b"serve" in cmd and f"127.0.0.1:{port}".encode() in cmd


if __name__ == "__main__":
    main()
