"""A mosaic of 1,000 COG pieces cut from the demo relief, half of them
warped to Web Mercator: its tiles equal the single file's, seams included;
a render opens only the pieces it touches; coarse tiles are read from the
overview; `max_open` bounds the open files under a seed; bad pieces are named and left out; a `gdaltindex` index is
the same mosaic as the directory."""
import math
import os
import re
import subprocess
import threading
import time

import numpy as np
import pytest
from osgeo import gdal

from conftest import ROOT, fetch, require_tool, serving
from imaging import decode

gdal.UseExceptions()
COLS, ROWS = 40, 25
HALF = 20037508.342789244


@pytest.fixture(scope="module")
def pieces(tmp_path_factory):
    """1,000 COGs: the relief cut in 40 x 25; every other piece between
    80 degrees south and north warped to EPSG:3857. Returns the directory
    and each piece's lon/lat bounds."""
    out = tmp_path_factory.mktemp("pieces")
    src = gdal.Open(str(ROOT / "data" / "shadedrelief-5400.tif"))
    gt = src.GetGeoTransform()
    w, h = src.RasterXSize // COLS, src.RasterYSize // ROWS
    bounds = {}
    for r in range(ROWS):
        for c in range(COLS):
            west, north = gt[0] + c * w * gt[1], gt[3] + r * h * gt[5]
            east, south = west + w * gt[1], north + h * gt[5]
            name = out / f"piece_{r:02d}_{c:02d}.tif"
            if (r + c) % 2 and south > -80 and north < 80:
                gdal.Warp(str(name), src, format="COG", dstSRS="EPSG:3857", outputBounds=(west, south, east, north),
                          outputBoundsSRS="EPSG:4326", width=w, height=h, resampleAlg="bilinear", dstAlpha=True)
            else:
                gdal.Translate(str(name), src, format="COG", srcWin=[c * w, r * h, w, h])
            bounds[name.name] = (west, south, east, north)
    return out, bounds


def write_config(path, extra_layers, gdal_settings=""):
    path.write_text(f"""
{gdal_settings}
stores: {{ mem: {{ type: memory }} }}
layers:
  - name: single
    source: {{ path: {ROOT}/data/shadedrelief-5400.tif }}
    grids: [WebMercatorQuad]
    cache: {{ store: mem }}
{extra_layers}
""")
    return path


def mosaic_layer(name, source, cache="{ store: mem }"):
    return f"""  - name: {name}
    source: {source}
    grids: [WebMercatorQuad]
    cache: {cache}
"""


def rgb_difference(a, b):
    d = np.abs(a[:3].astype(np.int16) - b[:3].astype(np.int16))
    return d.mean(), np.percentile(d, 99)


def test_mosaic_tiles_equal_the_single_files_at_several_zooms_and_seams(pieces, tmp_path, tmp_path_factory):
    directory, _ = pieces
    config = write_config(tmp_path / "tessera.yaml",
                          mosaic_layer("mosaic", f"{{ type: mosaic, dir: {directory}, glob: '*.tif' }}"))
    with serving(tmp_path_factory, "--config", str(config)) as server:
        # z2 whole quarter-worlds, z5 and z7 across seams of both CRSs.
        for z, x, y in [(2, 1, 1), (5, 17, 11), (7, 70, 45), (7, 64, 50)]:
            status, ours = fetch(server, f"/tiles/mosaic/WebMercatorQuad/{z}/{x}/{y}.png")
            assert status == 200, ours
            _, theirs = fetch(server, f"/tiles/single/WebMercatorQuad/{z}/{x}/{y}.png")
            mean, p99 = rgb_difference(decode(ours), decode(theirs))
            assert mean < 2.5 and p99 < 40, (z, x, y, mean, p99)
        # WMS draws it, and the capabilities give the pieces' extent.
        status, body = fetch(server, "/wms?SERVICE=WMS&REQUEST=GetMap&VERSION=1.3.0&LAYERS=mosaic&STYLES="
                                     "&CRS=EPSG:3857&BBOX=0,0,5000000,5000000&WIDTH=300&HEIGHT=300&FORMAT=image/png")
        assert status == 200 and body[:4] == b"\x89PNG", body[:200]
        _, caps = fetch(server, "/wmts/1.0.0/WMTSCapabilities.xml")
        chunk = next(c for c in caps.decode().split("<Layer>") if "<ows:Identifier>mosaic</ows:Identifier>" in c)
        lower = [float(v) for v in re.search(r"<ows:LowerCorner>([^<]+)<", chunk).group(1).split()]
        upper = [float(v) for v in re.search(r"<ows:UpperCorner>([^<]+)<", chunk).group(1).split()]
        assert np.allclose(lower + upper, [-180, -90, 180, 90], atol=1e-6), (lower, upper)


def lonlat_of_mercator(x, y):
    return x / HALF * 180, math.degrees(2 * math.atan(math.exp(y / HALF * math.pi)) - math.pi / 2)


def test_a_render_opens_only_the_pieces_it_touches(pieces, tmp_path, tmp_path_factory, monkeypatch):
    directory, bounds = pieces
    monkeypatch.setenv("TESSERA_LOG", "info,tessera_source=debug")
    config = write_config(tmp_path / "tessera.yaml", mosaic_layer(
        "mosaic", f"{{ type: mosaic, dir: {directory} }}", "{ store: mem, metatile: [1, 1], gutter: 0 }"))
    z, x, y = 6, 35, 22
    size = 2 * HALF / 2 ** z
    west, south = lonlat_of_mercator(-HALF + x * size, HALF - (y + 1) * size)
    east, north = lonlat_of_mercator(-HALF + (x + 1) * size, HALF - y * size)
    strictly = [n for n, (w, s, e, nn) in bounds.items() if w < east and e > west and s < north and nn > south]
    touching = [n for n, (w, s, e, nn) in bounds.items() if w <= east and e >= west and s <= north and nn >= south]
    with serving(tmp_path_factory, "--config", str(config)) as server:
        before = server.log_text().count("mosaic piece opened")
        assert fetch(server, f"/tiles/mosaic/WebMercatorQuad/{z}/{x}/{y}.png")[0] == 200
        opened = server.log_text().count("mosaic piece opened") - before
    assert 0 < len(strictly) <= opened <= len(touching) + 2, (opened, len(strictly), len(touching))
    assert opened < 20


def test_coarse_tiles_are_read_from_the_overview_and_equal_the_single_files(pieces, tmp_path, tmp_path_factory,
                                                                            monkeypatch):
    directory, _ = pieces
    monkeypatch.setenv("TESSERA_LOG", "info,tessera_source=debug")
    one_by_one = "{ store: mem, metatile: [1, 1], gutter: 0 }"
    config = write_config(tmp_path / "tessera.yaml",
                          mosaic_layer("mosaic", f"{{ type: mosaic, dir: {directory}, overview: 1024 }}", one_by_one)
                          + mosaic_layer("without", f"{{ type: mosaic, dir: {directory}, overview: 0 }}", one_by_one))
    with serving(tmp_path_factory, "--config", str(config)) as server:
        log = server.log_text
        # The first tile as coarse as the overview reads every piece once ...
        assert fetch(server, "/tiles/mosaic/WebMercatorQuad/1/0/0.png")[0] == 200
        assert log().count("mosaic overview read") == 1, log()[-3000:]
        assert log().count("mosaic piece opened") >= 1000
        # ... then coarse tiles open no piece, and look like the single
        # file's and like the pieces read one by one.
        tiles = [(0, 0, 0), (1, 1, 0), (2, 1, 1), (2, 3, 2)]
        before = log().count("mosaic piece opened")
        ours = {}
        for z, x, y in tiles:
            status, ours[(z, x, y)] = fetch(server, f"/tiles/mosaic/WebMercatorQuad/{z}/{x}/{y}.png")
            assert status == 200, ours[(z, x, y)]
        assert log().count("mosaic piece opened") == before
        assert log().count("mosaic overview read") == 1
        # The same pieces read one by one differ by the second resampling
        # only; the single file is read from its own overviews, which
        # differ from the pieces by up to 3 levels on average at zoom 1.
        for z, x, y in tiles:
            for layer, most_mean, most_p99 in (("without", 1.5, 20), ("single", 4.0, 40)):
                status, other = fetch(server, f"/tiles/{layer}/WebMercatorQuad/{z}/{x}/{y}.png")
                assert status == 200, other
                mean, p99 = rgb_difference(decode(ours[(z, x, y)]), decode(other))
                assert mean < most_mean and p99 < most_p99, (layer, z, x, y, mean, p99)
        # Finer tiles read the pieces they touch.
        before = log().count("mosaic piece opened")
        assert fetch(server, "/tiles/mosaic/WebMercatorQuad/6/35/22.png")[0] == 200
        assert 0 < log().count("mosaic piece opened") - before < 20


def test_max_open_bounds_the_open_pieces_under_a_seed(pieces, tmp_path):
    directory, _ = pieces
    config = write_config(tmp_path / "tessera.yaml", mosaic_layer(
        "mosaic", f"{{ type: mosaic, dir: {directory}, max_open: 8 }}",
        f"{{ store: disk }}"), gdal_settings="gdal: { max_idle_handles: 1 }")
    config.write_text(config.read_text().replace(
        "stores: { mem: { type: memory } }",
        f"stores: {{ mem: {{ type: memory }}, disk: {{ type: file, path: {tmp_path / 'tiles'} }} }}"))
    proc = subprocess.Popen([os.environ["TESSERA_BIN"], "seed", "--config", str(config), "--layer", "mosaic",
                             "--grid", "WebMercatorQuad", "--zoom", "0..4", "--threads", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    most = 0
    prefix = str(directory)

    def watch():
        nonlocal most
        fd_dir = f"/proc/{proc.pid}/fd"
        while proc.poll() is None:
            try:
                n = sum(1 for fd in os.listdir(fd_dir)
                        if os.readlink(os.path.join(fd_dir, fd)).startswith(prefix))
            except OSError:
                n = 0
            most = max(most, n)
            time.sleep(0.005)

    watcher = threading.Thread(target=watch)
    watcher.start()
    out, err = proc.communicate(timeout=900)
    watcher.join()
    assert proc.returncode == 0, err
    assert "seed complete" in out, out
    # 8 pieces in the LRU, plus at most one being opened or still read by
    # each thread reading pieces after its eviction: the two render
    # threads, and one more while the overview is read in two strips.
    assert 0 < most <= 8 + 3, most


def test_bad_pieces_are_named_and_left_out_and_the_rest_renders(pieces, tmp_path, tmp_path_factory):
    directory, _ = pieces
    corrupt = tmp_path / "corrupt.tif"
    corrupt.write_bytes(b"II*\x00" + b"\x00" * 100)
    good = sorted(str(p) for p in directory.glob("piece_1*.tif"))
    listed = good + [str(tmp_path / "missing.tif"), str(corrupt)]
    source = "{ type: mosaic, paths: [" + ", ".join(f'"{p}"' for p in listed) + "] }"
    config = write_config(tmp_path / "tessera.yaml", mosaic_layer("mosaic", source))
    r = subprocess.run([os.environ["TESSERA_BIN"], "check", str(config)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"{len(good)} pieces" in r.stdout and "bad pieces: 2" in r.stdout, r.stdout
    assert "missing.tif" in r.stdout and "corrupt.tif" in r.stdout, r.stdout
    assert "EPSG:4326" in r.stdout and "EPSG:3857" in r.stdout, r.stdout
    with serving(tmp_path_factory, "--config", str(config)) as server:
        assert fetch(server, "/tiles/mosaic/WebMercatorQuad/2/2/1.png")[0] == 200
    # Nothing usable: an error that says so.
    only_bad = "{ type: mosaic, paths: [\"" + str(corrupt) + "\"] }"
    write_config(tmp_path / "bad.yaml", mosaic_layer("mosaic", only_bad))
    r = subprocess.run([os.environ["TESSERA_BIN"], "check", str(tmp_path / "bad.yaml")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "no piece can be used" in r.stderr and "corrupt.tif" in r.stderr, r.stderr


def test_a_gdaltindex_index_is_the_same_mosaic_as_the_directory(pieces, tmp_path, tmp_path_factory):
    directory, _ = pieces
    gdaltindex = require_tool("gdaltindex")
    index = tmp_path / "index.gpkg"
    files = sorted(str(p) for p in directory.glob("*.tif"))
    subprocess.run([gdaltindex, "-f", "GPKG", "-t_srs", "EPSG:4326", str(index), *files], check=True,
                   capture_output=True)
    config = write_config(tmp_path / "tessera.yaml",
                          mosaic_layer("bydir", f"{{ type: mosaic, dir: {directory} }}")
                          + mosaic_layer("byindex", f"{{ type: mosaic, index: {index} }}"))
    with serving(tmp_path_factory, "--config", str(config)) as server:
        for tile in ["3/4/2", "6/35/22"]:
            status, a = fetch(server, f"/tiles/bydir/WebMercatorQuad/{tile}.png")
            assert status == 200
            assert fetch(server, f"/tiles/byindex/WebMercatorQuad/{tile}.png") == (200, a)
