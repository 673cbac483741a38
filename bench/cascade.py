#!/usr/bin/env python3
"""Cold seeding through an upstream WMS, and of a 1,000-piece mosaic.

Cascade: tessera and MapProxy (pip MapProxy, 4x4 metatiles with an 8-pixel
buffer, like tessera's metatiles and gutter) in front of the same MapServer
(scripts/mapserver, behind lighttpd FastCGI with 2 processes, as MapServer
is deployed), each seeding zoom 0..Z of the relief layer into an
empty file cache with 2 workers (tiles/s, upstream GetMaps from lighttpd's
access log, peak RSS and CPU time of the seeding process tree), and each serving every tile
of zoom 0..Z once from an empty cache to 1 and 8 clients (tiles/s, p50/p99,
GetMaps). Mosaic: `tessera seed` of the
relief as one COG and as 1,000 COG pieces in two CRSs: tiles/s and the most
files the seed held open. The seeding is run again with MapServer's
answers replayed from a recording (bench/replay.py), as if MapServer had
cores of its own. Each cell is the median of --runs; the table goes
to docs/benchmarks/cascade.md.

Run it with scripts/bench-cascade (it builds the release binary, starts
MapServer and installs MapProxy).
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from replay import Replay
from common import ROOT, free_port, machine, mapproxy_config, percentile, run_load, tessera, wait_http

WEB_MERCATOR_TILES = {z: 4 ** z for z in range(0, 12)}

# On ext4 without a journal (this machine's), every file creation skips the
# inodes freed in the last 30 seconds (35 while their inode block is dirty),
# one by one. A run started right after another tool deleted files (MapProxy
# deletes a lock file per metatile) pays for those deletions; each timed seed
# in the replayed section starts once they have aged out.
RECENT_DELETIONS_S = 36


def tiles_through(max_zoom):
    return sum(WEB_MERCATOR_TILES[z] for z in range(0, max_zoom + 1))


def timed(cmd, env=None, watch_prefix=None):
    """Runs `cmd` under /usr/bin/time -v: (seconds, peak RSS MiB, most open
    files under `watch_prefix`, stdout, CPU seconds of the process and its
    children)."""
    start = time.monotonic()
    proc = subprocess.Popen(["/usr/bin/time", "-v", *cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    most = 0

    def watch():
        nonlocal most
        while proc.poll() is None:
            try:
                for child in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split():
                    fds = Path(f"/proc/{child}/fd")
                    n = sum(1 for fd in fds.iterdir() if os.readlink(fd).startswith(watch_prefix))
                    most = max(most, n)
            except OSError:
                pass
            time.sleep(0.01)

    watcher = None
    if watch_prefix:
        watcher = threading.Thread(target=watch)
        watcher.start()
    out, err = proc.communicate()
    secs = time.monotonic() - start
    if watcher:
        watcher.join()
    if proc.returncode != 0:
        sys.exit(f"{cmd[0]} failed:\n{out}\n{err}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", err).group(1)) / 1024
    cpu = sum(float(re.search(rf"{kind} time \(seconds\): ([\d.]+)", err).group(1)) for kind in ("User", "System"))
    return secs, rss, most, out, cpu


def getmaps(log):
    return sum(1 for line in Path(log).read_text().splitlines() if "request=getmap" in line.lower())


def restart_mapserver():
    """A fresh lighttpd (its access log is flushed when it stops)."""
    subprocess.run([str(ROOT / "scripts/mapserver"), "stop"], check=True, capture_output=True)
    subprocess.run([str(ROOT / "scripts/mapserver"), "start", "--fastcgi", "2"], check=True, capture_output=True)
    env = dict(line.removeprefix("export ").split("=", 1)
               for line in (ROOT / "var/mapserver/env").read_text().splitlines() if line.strip())
    return env["TESSERA_TEST_WMS_URL"], env["TESSERA_TEST_WMS_ACCESS_LOG"]


def flush_mapserver_log():
    subprocess.run([str(ROOT / "scripts/mapserver"), "stop"], check=True, capture_output=True)


def seed_tessera(binary, url, work, max_zoom):
    config = Path(work) / "tessera.yaml"
    config.write_text(tessera_config(url, work))
    return timed([binary, "seed", "--config", str(config), "--layer", "cascade", "--grid", "WebMercatorQuad",
                  "--zoom", f"0..{max_zoom}", "--threads", "2"])


def tessera_config(url, work):
    port = url.split(":")[2].split("/")[0]
    return f"""
gdal: {{ allowed_private_hosts: ["127.0.0.1:{port}"] }}
stores: {{ disk: {{ type: file, path: {work}/tessera-tiles, memory: 0 }} }}
layers:
  - name: cascade
    source: {{ type: wms, url: "{url}", layers: [relief] }}
    grids: [WebMercatorQuad]
    cache: {{ store: disk, metatile: [4, 4], gutter: 8 }}
"""


def cascade_mapproxy_config(url, work):
    return mapproxy_config("cascade", "cascade_cache", url, "relief", f"{work}/mapproxy-tiles",
                           '["EPSG:3857", "EPSG:4326"]', transparent=True)


def tile_paths(prefix, max_zoom, suffix):
    """Every tile of zoom 0..max_zoom, in a fixed shuffled order."""
    import random
    tiles = [(z, x, y) for z in range(max_zoom + 1) for x in range(2 ** z) for y in range(2 ** z)]
    random.Random(7).shuffle(tiles)
    return [f"{prefix}/{z}/{x}/{y}{suffix}" for z, x, y in tiles]


def load_tessera(binary, url, work, max_zoom, clients):
    """Cache-miss requests: every tile once, from an empty cache."""
    with tessera(binary, tessera_config(url, work), work) as port:
        return run_load(port, tile_paths("/tiles/cascade/WebMercatorQuad", max_zoom, ".png"), clients)


def load_mapproxy(gunicorn, url, work, max_zoom, clients):
    conf = Path(work) / "mapproxy.yaml"
    conf.write_text(cascade_mapproxy_config(url, work))
    app = Path(work) / "app.py"
    app.write_text(f"from mapproxy.wsgiapp import make_wsgi_app\napplication = make_wsgi_app({str(conf)!r})\n")
    port = free_port()
    # Two processes with eight threads: as many cores as tessera gets.
    proc = subprocess.Popen([gunicorn, "--chdir", work, "-w", "2", "--threads", "8", "-b", f"127.0.0.1:{port}",
                             "--timeout", "300", "app:application"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_http(f"http://127.0.0.1:{port}/tms/1.0.0/")
        # MapProxy's tile service with rows from the top, as tessera's XYZ
        # (its TMS service numbers GLOBAL_WEBMERCATOR's levels from 1).
        paths = tile_paths("/tiles/1.0.0/cascade/GLOBAL_WEBMERCATOR", max_zoom, ".png?origin=nw")
        return run_load(port, paths, clients)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def seed_mapproxy(mapproxy_seed, url, work, max_zoom):
    conf = Path(work) / "mapproxy.yaml"
    conf.write_text(cascade_mapproxy_config(url, work))
    seed = Path(work) / "seed.yaml"
    seed.write_text(f"""
seeds:
  all:
    caches: [cascade_cache]
    levels: {{ from: 0, to: {max_zoom} }}
""")
    return timed([mapproxy_seed, "-f", str(conf), "-s", str(seed), "-c", "2", "--quiet"])


def replayed(binary, mapproxy_seed, runs, max_zoom):
    """Seeding and cache-miss requests as above, with MapServer's answers
    replayed from a recording (bench/replay.py): each tool seeds once
    through the recorder, then the two take turns, `runs` times each,
    seeding and then serving every tile once to 1 and 8 clients from the
    recording. Returns ({tool: [(seconds, peak RSS, GetMaps, CPU
    seconds)]}, {(tool, clients): [(seconds, p50, p99, GetMaps)]})."""
    url, _ = restart_mapserver()
    gunicorn = str(Path(mapproxy_seed).parent / "gunicorn")
    tools = (("tessera", seed_tessera, binary, load_tessera, binary),
             ("MapProxy", seed_mapproxy, mapproxy_seed, load_mapproxy, gunicorn))
    seeds = {name: [] for name, *_ in tools}
    loads = {(name, c): [] for name, *_ in tools for c in (1, 8)}
    # Every run's tiles stay until the section ends, the tools take turns,
    # and each seed waits RECENT_DELETIONS_S first: on a file system without
    # a journal (this machine's ext4) creating a file scans past the inodes
    # deleted in the last half minute, so a run's time would depend on what
    # was deleted before it. The recording passes take whatever the
    # sections before left.
    try:
        with Replay(url) as replay, tempfile.TemporaryDirectory() as section:
            upstream = replay.url_for(url)

            def checked(name):
                if replay.unknown:
                    sys.exit(f"{name} sent {replay.unknown} requests the recording does not hold")
                return replay.served

            for _, seed, program, _, _ in tools:
                seed(program, upstream, tempfile.mkdtemp(dir=section), max_zoom)
            replay.recording = False
            for _ in range(runs):
                for name, seed, program, load, server in tools:
                    time.sleep(RECENT_DELETIONS_S)
                    replay.reset_counts()
                    secs, rss, _, _, cpu = seed(program, upstream, tempfile.mkdtemp(dir=section), max_zoom)
                    seeds[name].append((secs, rss, checked(name), cpu))
                    print(f"{name} (replayed upstream): {secs:.1f} s, {rss:.0f} MiB, {seeds[name][-1][2]} GetMaps, "
                          f"{cpu:.2f} s CPU", flush=True)
                    for clients in (1, 8):
                        replay.reset_counts()
                        secs, lat, errors, _ = load(server, upstream, tempfile.mkdtemp(dir=section), max_zoom,
                                                    clients)
                        if errors:
                            sys.exit(f"{name}: {len(errors)} failed requests, e.g. {errors[:3]}")
                        loads[(name, clients)].append(
                            (secs, percentile(lat, 50), percentile(lat, 99), checked(name)))
                        print(f"{name} {clients} clients (replayed upstream): {secs:.1f} s, "
                              f"p99 {percentile(lat, 99):.0f} ms", flush=True)
    finally:
        flush_mapserver_log()
    return seeds, loads


def seed_single_and_mosaic(binary, work, pieces, max_zoom, kind):
    source = (f"{{ path: {ROOT}/data/shadedrelief-5400.tif }}" if kind == "single"
              else f"{{ type: mosaic, dir: {pieces}, max_open: 64 }}")
    config = Path(work) / f"{kind}.yaml"
    config.write_text(f"""
stores: {{ disk: {{ type: file, path: {work}/{kind}-tiles }} }}
layers:
  - name: {kind}
    source: {source}
    grids: [WebMercatorQuad]
    cache: {{ store: disk }}
""")
    return timed([binary, "seed", "--config", str(config), "--layer", kind, "--grid", "WebMercatorQuad",
                  "--zoom", f"0..{max_zoom}", "--threads", "2"], watch_prefix=str(pieces) if kind == "mosaic" else None)


def make_pieces(out):
    """The relief cut into 40 x 25 COGs, every other one between 80 degrees
    south and north warped to EPSG:3857 (as tests/e2e/test_mosaic.py)."""
    from osgeo import gdal
    gdal.UseExceptions()
    src = gdal.Open(str(ROOT / "data/shadedrelief-5400.tif"))
    gt = src.GetGeoTransform()
    w, h = src.RasterXSize // 40, src.RasterYSize // 25
    for r in range(25):
        for c in range(40):
            west, north = gt[0] + c * w * gt[1], gt[3] + r * h * gt[5]
            east, south = west + w * gt[1], north + h * gt[5]
            name = out / f"piece_{r:02d}_{c:02d}.tif"
            if (r + c) % 2 and south > -80 and north < 80:
                gdal.Warp(str(name), src, format="COG", dstSRS="EPSG:3857", outputBounds=(west, south, east, north),
                          outputBoundsSRS="EPSG:4326", width=w, height=h, resampleAlg="bilinear", dstAlpha=True)
            else:
                gdal.Translate(str(name), src, format="COG", srcWin=[c * w, r * h, w, h])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--mapproxy-seed", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--max-zoom", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "docs/benchmarks/cascade.md"))
    args = ap.parse_args()
    tiles = tiles_through(args.max_zoom)
    results = {}
    for name, seed in (("tessera", seed_tessera), ("MapProxy", seed_mapproxy)):
        runs = []
        for _ in range(args.runs):
            url, log = restart_mapserver()
            with tempfile.TemporaryDirectory() as work:
                secs, rss, _, _, cpu = seed(args.binary if name == "tessera" else args.mapproxy_seed, url, work,
                                            args.max_zoom)
            flush_mapserver_log()
            runs.append((secs, rss, getmaps(log), cpu))
            print(f"{name}: {secs:.1f} s, {rss:.0f} MiB, {runs[-1][2]} GetMaps, {cpu:.2f} s CPU", flush=True)
        results[name] = runs
    replayed_seeds, replayed_loads = replayed(args.binary, args.mapproxy_seed, args.runs, args.max_zoom)
    gunicorn = str(Path(args.mapproxy_seed).parent / "gunicorn")
    loads = {}
    for name, load in (("tessera", load_tessera), ("MapProxy", load_mapproxy)):
        for clients in (1, 8):
            runs = []
            for _ in range(args.runs):
                url, log = restart_mapserver()
                with tempfile.TemporaryDirectory() as work:
                    secs, lat, errors, _ = load(args.binary if name == "tessera" else gunicorn, url, work,
                                                args.max_zoom, clients)
                flush_mapserver_log()
                if errors:
                    sys.exit(f"{name}: {len(errors)} failed requests, e.g. {errors[:3]}")
                runs.append((secs, percentile(lat, 50), percentile(lat, 99), getmaps(log)))
                print(f"{name} {clients} clients: {secs:.1f} s, p50 {runs[-1][1]:.0f} ms, "
                      f"p99 {runs[-1][2]:.0f} ms, {runs[-1][3]} GetMaps", flush=True)
            loads[(name, clients)] = runs
    mosaic = {}
    # The two take turns (the machine's speed drifts over minutes), every
    # run's tiles stay until the section ends, and the first run waits for
    # the deletions of the section before to age out (see
    # RECENT_DELETIONS_S).
    with tempfile.TemporaryDirectory() as data:
        pieces = Path(data) / "pieces"
        pieces.mkdir()
        make_pieces(pieces)
        time.sleep(RECENT_DELETIONS_S)
        for _ in range(args.runs):
            for kind in ("single", "mosaic"):
                work = tempfile.mkdtemp(dir=data)
                mosaic.setdefault(kind, []).append(
                    seed_single_and_mosaic(args.binary, work, pieces, args.max_zoom, kind)[:3])
                print(f"{kind}: {mosaic[kind][-1][0]:.1f} s, {mosaic[kind][-1][2]} files open at most", flush=True)

    def med(runs, i):
        return statistics.median(r[i] for r in runs)

    t, m = results["tessera"], results["MapProxy"]
    lines = [
        "# Cascading an upstream WMS, and mosaics",
        "",
        machine(),
        "",
        "Command: `scripts/bench-cascade` "
        f"(`--runs {args.runs} --max-zoom {args.max_zoom}`); medians of {args.runs} runs.",
        "",
        f"## Seeding zoom 0..{args.max_zoom} ({tiles} tiles) from MapServer FastCGI, 2 workers, 4x4 metatiles, "
        "8-pixel buffer",
        "",
        "CPU: user + system time of the seeding command and its children (MapServer's not included): "
        "what the cache itself spends per tile.",
        "",
        "| | tiles/s | upstream GetMaps | peak RSS (MiB) | cache CPU (ms/tile) |",
        "|---|---:|---:|---:|---:|",
        f"| tessera | {tiles / med(t, 0):.1f} | {med(t, 2):.0f} | {med(t, 1):.0f} | {1000 * med(t, 3) / tiles:.2f} |",
        f"| MapProxy {mapproxy_version(args.mapproxy_seed)} | {tiles / med(m, 0):.1f} | {med(m, 2):.0f} "
        f"| {med(m, 1):.0f} | {1000 * med(m, 3) / tiles:.2f} |",
        f"| ratio tessera / MapProxy | {med(m, 0) / med(t, 0):.2f} | | | {med(m, 3) / med(t, 3):.2f} (less CPU) |",
        "",
        f"## Seeding and cache misses, zoom 0..{args.max_zoom}, with MapServer's answers replayed "
        "(the upstream on its own cores)",
        "",
        "Each tool seeds once through a recorder in front of MapServer (bench/replay.py); then the two "
        "take turns seeding, and serving every tile once from an empty cache, from the recording: the same "
        "GetMaps, answered byte for byte with MapServer's own images, without MapServer's CPU on these 2 "
        "cores (a request the recording lacks fails the run). Every run's tiles are kept until the section "
        f"ends, and each seed starts {RECENT_DELETIONS_S} s after the step before: this machine's ext4 has "
        "no journal, and "
        "creating a file there scans past the inodes deleted in the last half minute (MapProxy deletes a "
        "lock file per metatile).",
        "",
        "| seeding | tiles/s | upstream GetMaps | peak RSS (MiB) | cache CPU (ms/tile) |",
        "|---|---:|---:|---:|---:|",
        *[f"| {name} | {tiles / med(replayed_seeds[name], 0):.1f} | {med(replayed_seeds[name], 2):.0f} "
          f"| {med(replayed_seeds[name], 1):.0f} | {1000 * med(replayed_seeds[name], 3) / tiles:.2f} |"
          for name in ("tessera", "MapProxy")],
        f"| ratio tessera / MapProxy | {med(replayed_seeds['MapProxy'], 0) / med(replayed_seeds['tessera'], 0):.2f} "
        f"| | | {med(replayed_seeds['MapProxy'], 3) / med(replayed_seeds['tessera'], 3):.2f} (less CPU) |",
        "",
        "| cache misses | clients | tiles/s | p50 (ms) | p99 (ms) | upstream GetMaps |",
        "|---|---:|---:|---:|---:|---:|",
        *[f"| {name} | {c} | {tiles / med(replayed_loads[(name, c)], 0):.1f} | "
          f"{med(replayed_loads[(name, c)], 1):.0f} | {med(replayed_loads[(name, c)], 2):.0f} "
          f"| {med(replayed_loads[(name, c)], 3):.0f} |" for c in (1, 8) for name in ("tessera", "MapProxy")],
        *[f"| ratio tessera / MapProxy | {c} | "
          f"{med(replayed_loads[('MapProxy', c)], 0) / med(replayed_loads[('tessera', c)], 0):.2f} | | | |"
          for c in (1, 8)],
        "",
        f"## Cache-miss requests: every tile of zoom 0..{args.max_zoom} once, empty cache "
        "(tessera serve; MapProxy under gunicorn, 2 workers x 8 threads)",
        "",
        "| server | clients | tiles/s | p50 (ms) | p99 (ms) | upstream GetMaps |",
        "|---|---:|---:|---:|---:|---:|",
        *[f"| {name} | {c} | {tiles / med(loads[(name, c)], 0):.1f} | {med(loads[(name, c)], 1):.0f} "
          f"| {med(loads[(name, c)], 2):.0f} | {med(loads[(name, c)], 3):.0f} |"
          for c in (1, 8) for name in ("tessera", "MapProxy")],
        *[f"| ratio tessera / MapProxy | {c} | "
          f"{med(loads[('MapProxy', c)], 0) / med(loads[('tessera', c)], 0):.2f} | | | |" for c in (1, 8)],
        "",
        f"## Seeding zoom 0..{args.max_zoom}: one COG against 1,000 COG pieces in two CRSs "
        "(mosaic overview: the default 2048)",
        "",
        "| source | tiles/s | most piece files open | peak RSS (MiB) |",
        "|---|---:|---:|---:|",
        f"| single COG | {tiles / med(mosaic['single'], 0):.1f} | | {med(mosaic['single'], 1):.0f} |",
        f"| mosaic, max_open 64 | {tiles / med(mosaic['mosaic'], 0):.1f} | {med(mosaic['mosaic'], 2):.0f} "
        f"| {med(mosaic['mosaic'], 1):.0f} |",
        f"| ratio mosaic / single | {med(mosaic['single'], 0) / med(mosaic['mosaic'], 0):.2f} | | |",
        "",
        READING,
    ]
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))


READING = """## Reading

- MapServer runs behind lighttpd FastCGI with 2 processes, as it is
  deployed (`scripts/mapserver start --fastcgi 2`), on the same 2 cores
  as the cache in front of it. Both caches send it the same 87 GetMaps
  (one per 4x4 metatile with its buffer). A 1040x1040 PNG GetMap costs
  MapServer about 125 ms of CPU here (48 ms as JPEG: most of it is its
  PNG encoding), so the 87 GetMaps are about 10.9 s of its CPU: against
  this upstream on these cores no cache seeds faster than about 250
  tiles/s, and twice MapProxy's rate is out of reach at the same request
  count. The first table is bounded by MapServer; the cache CPU column is
  what each tool adds per tile.
- The replayed section takes MapServer's CPU off these cores, as when the
  upstream has cores of its own (the usual deployment): the caches get
  MapServer's own bytes from a recording, as fast as loopback serves them,
  and the tiles/s are the caches' own. tessera renders one metatile while
  the one before is written and synced (`seed::run`), inflates the GetMap
  in one call (libdeflate) straight into the metatile's RGBA image under
  the default style, and writes new tiles as unnamed files linked into
  place (no shared staging directory); what is left of its CPU is
  encoding the tiles' PNGs (about half), inflating the GetMaps (about a
  fifth) and the kernel's file creation.
- Runs on this machine vary by 10-30 % between invocations (shared cores
  whose speed drifts over minutes, and an ext4 without a journal whose
  file creation skips, one by one, every inode freed in the last half
  minute: a profile of tessera seeding right after another run's tiles
  were deleted showed a fifth of its CPU there). In the replayed and the
  mosaic sections the tools take turns, keep their tiles until the
  section ends, and the replayed seeds and the first mosaic run start
  once earlier deletions have aged out, so that both see the same
  conditions.
- The mosaic reads windows at least as coarse as its overview (zooms 0-3
  here) from the overview, read once from all 1,000 pieces in two strips;
  windows that arrive meanwhile wait for it instead of reading the pieces
  again. Pieces in the grid's CRS (with their alpha band) are read with
  `RasterIO`, the EPSG:4326 pieces and the single EPSG:4326 COG are
  warped. The remaining gap is the scan of the 1,000 pieces at start, the
  overview's read, and zooms 4-5, where a metatile reads 20-60 pieces: a
  warp set-up and a composite per piece, where the single file has one
  warp. Peak RSS is mostly GDAL's block cache (the default 5 % of RAM),
  filled by the pieces' blocks.
"""


def mapproxy_version(seed_bin):
    python = Path(seed_bin).parent / "python"
    r = subprocess.run([str(python), "-c", "import importlib.metadata as m; print(m.version('MapProxy'))"],
                       capture_output=True, text=True)
    return r.stdout.strip()


if __name__ == "__main__":
    main()
