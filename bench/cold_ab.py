"""Cold passes of several tessera binaries side by side: bench/cold_floor.py's
tessera part (every z0-6 tile of the peers COG once, an empty file store on
$TMPDIR, 4 x 4 metatiles, one curl process at 1 and 8 connections), each
binary a fresh process on a fresh store every round, the binaries' order
reversed every other round; medians of the rounds and each round's rates
(docs/benchmarks/cold-floor.md).

    TMPDIR=/mnt/benchfs var/venv/bin/python bench/cold_ab.py \
        --binary before=B --binary after=A [--runs 4]
        [--settings after='cache: { idle_siblings: false }']

A binary may be named twice with different settings (YAML merged into the
configuration), to compare settings of one binary.

The COG is built by bench/peers.py into $TESSERA_CACHE_DIR/peers-data once.
Never run by CI.
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cold_floor import cold_pass  # noqa: E402
from common import wait_quiet  # noqa: E402
from peers import ZOOMS, build_cog, tiles_z  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--binary", action="append", required=True, help="NAME=PATH, twice or more")
    ap.add_argument("--settings", action="append", default=[], help="NAME=YAML: that variant's settings")
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--data", type=Path, default=Path(os.environ.get("TESSERA_CACHE_DIR",
                                                                       Path.home() / ".cache/tessera")) / "peers-data")
    args = ap.parse_args()
    binaries = [b.split("=", 1) for b in args.binary]
    settings = dict(s.split("=", 1) for s in args.settings)
    cog = build_cog(args.data)
    tiles = tiles_z(ZOOMS)
    rates = {}
    for run in range(args.runs):
        order = binaries if run % 2 == 0 else binaries[::-1]
        for clients in (1, 8):
            for name, binary in order:
                wait_quiet()
                work = Path(tempfile.mkdtemp(prefix="tessera-cold-ab-"))
                try:
                    rate, _ = cold_pass(binary, cog, work, tiles, clients, settings.get(name, ""))
                finally:
                    shutil.rmtree(work, ignore_errors=True)
                rates.setdefault((name, clients), []).append(rate)
                print(f"  round {run} {name} {clients} connection(s): {rate:.0f} tiles/s",
                      file=sys.stderr, flush=True)
    print("| binary | connections | tiles/s (median) | rounds |")
    print("|---|---:|---:|---|")
    for clients in (1, 8):
        for name, _ in binaries:
            v = rates[(name, clients)]
            print(f"| {name} | {clients} | {statistics.median(v):.0f} | {', '.join(f'{r:.0f}' for r in v)} |")


if __name__ == "__main__":
    main()
