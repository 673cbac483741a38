"""Cold passes of a demo layer (a warped raster cut from metatiles into the
in-memory cache) with several render-slot counts side by side: every z0-6
tile of WebMercatorQuad once, one curl process at 1 and 8 connections, a
fresh process every pass; medians of the rounds
(docs/benchmarks/cold-floor.md, where two render slots per core are
weighed against one for the renders that are long).

    TMPDIR=/mnt/benchfs var/venv/bin/python bench/demo_slots_ab.py \
        --binary B [--layer relief] [--slots 2 --slots 4] [--runs 3]

Never run by CI.
"""
import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, curl_load, tessera_process, wait_quiet  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--binary", required=True)
    ap.add_argument("--layer", default="relief")
    ap.add_argument("--slots", type=int, action="append")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    slots = args.slots or [2, 4]
    demo = subprocess.run([args.binary, "demo-config"], capture_output=True, text=True, check=True).stdout
    demo = demo.replace("/vsimem/tessera-demo/", f"{ROOT}/data/")
    if not re.search(r"(?m)^server:\n", demo):
        raise SystemExit("the demo configuration has no server section")
    paths = [f"/tiles/{args.layer}/WebMercatorQuad/{z}/{x}/{y}.png"
             for z in range(7) for y in range(2 ** z) for x in range(2 ** z)]
    rates = {}
    for run in range(args.runs):
        for clients in (1, 8):
            for n in (slots if run % 2 == 0 else slots[::-1]):
                wait_quiet()
                config = re.sub(r"(?m)^server:\n", f"server:\n  max_concurrent_renders: {n}\n", demo, count=1)
                work = Path(tempfile.mkdtemp(prefix="tessera-slots-ab-"))
                try:
                    with tessera_process(args.binary, config, work) as (port, _):
                        secs, _, errors, _ = curl_load(port, paths, clients)
                finally:
                    shutil.rmtree(work, ignore_errors=True)
                if errors:
                    raise SystemExit(f"{len(errors)} failed requests, first {errors[0]}")
                rates.setdefault((n, clients), []).append(len(paths) / secs)
                print(f"  round {run} {n} slots {clients} connection(s): {len(paths) / secs:.0f} tiles/s",
                      file=sys.stderr, flush=True)
    print("| render slots | connections | tiles/s (median) | rounds |")
    print("|---:|---:|---:|---|")
    for clients in (1, 8):
        for n in slots:
            v = rates[(n, clients)]
            print(f"| {n} | {clients} | {statistics.median(v):.0f} | {', '.join(f'{r:.0f}' for r in v)} |")


if __name__ == "__main__":
    main()
