"""MapLibre glyph ranges over HTTP: tessera's cold ranges (the first
request of each), and warm ranges at 1 and 8 connections next to nginx
serving the same bytes from a file (the floor for a static asset),
alternating tessera and nginx, two rounds, medians. Writes a markdown
table to stdout.

    python3 bench/glyphs_http.py --binary target/release/tessera
"""
import argparse
import statistics
import subprocess
import tempfile
import urllib.request
from pathlib import Path

from common import ROOT, ensure_tools, machine, nginx_static, tessera, wrk

STACK = "Noto%20Sans%20Regular"
# Ranges of the bundled font that have glyphs: Latin, Latin Extended,
# IPA and spacing, Greek, Cyrillic, Latin Extended Additional, punctuation.
COLD = ["0-255", "256-511", "512-767", "768-1023", "1024-1279", "7680-7935", "8192-8447"]
CONFIG = f"layers:\n  - name: relief\n    source: {{ path: {ROOT}/data/shadedrelief-5400.tif }}\n"


def cold_ms(port):
    """Milliseconds of each range's first request, as curl times it."""
    times = []
    for r in COLD:
        out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code} %{time_total}",
                              f"http://127.0.0.1:{port}/fonts/{STACK}/{r}.pbf"],
                             capture_output=True, text=True, check=True).stdout.split()
        if out[0] != "200":
            raise SystemExit(f"range {r}: {out[0]}")
        times.append(float(out[1]) * 1000)
    return times


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--seconds", type=int, default=10)
    args = parser.parse_args()
    ensure_tools()
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        with tessera(args.binary, CONFIG, work / "tessera") as port:
            colds = cold_ms(port)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/fonts/{STACK}/0-255.pbf") as r:
                body = r.read()
        static = work / "static"
        static.mkdir()
        (static / "0-255.pbf").write_bytes(body)
        paths = work / "paths.txt"
        for round_ in range(2):
            for server in ("tessera", "nginx"):
                if server == "tessera":
                    paths.write_text(f"/fonts/{STACK}/0-255.pbf\n")
                    with tessera(args.binary, CONFIG, work / "tessera") as port:
                        # Made once before the load: the load is warm.
                        urllib.request.urlopen(f"http://127.0.0.1:{port}/fonts/{STACK}/0-255.pbf").read()
                        for c in (1, 8):
                            rows.setdefault((server, c), []).append(
                                wrk(f"http://127.0.0.1:{port}", paths, c, args.seconds)[0])
                else:
                    paths.write_text("/fonts/0-255.pbf\n")
                    with nginx_static(work, static, prefix="/fonts/") as (port, _):
                        for c in (1, 8):
                            rows.setdefault((server, c), []).append(
                                wrk(f"http://127.0.0.1:{port}", paths, c, args.seconds)[0])
    print("# MapLibre glyph ranges over HTTP\n")
    print("Command: `scripts/bench-glyphs-http` (`bench/glyphs_http.py`, wrk).")
    print(machine() + "\n")
    print(f"A range of {len(body):,} bytes (Noto Sans Regular, U+0000-00FF). Cold: the first request of")
    print(f"each of {len(COLD)} ranges of the bundled font, timed by curl (made on the request). Warm:")
    print(f"wrk for {args.seconds} s on the Latin range after it was made once, next to nginx serving the")
    print("same bytes from a file (sendfile), tessera and nginx alternating, two rounds, medians.\n")
    print(f"Cold ranges: median {statistics.median(colds):.1f} ms, slowest {max(colds):.1f} ms "
          "(goal: at most 50 ms).\n")
    print("| connections | tessera req/s | nginx req/s | tessera / nginx |")
    print("|---:|---:|---:|---:|")
    for c in (1, 8):
        t, n = statistics.median(rows[("tessera", c)]), statistics.median(rows[("nginx", c)])
        print(f"| {c} | {t:,.0f} | {n:,.0f} | {t / n:.2f} |")


if __name__ == "__main__":
    main()
