"""Tiles of a COG in the tile grid: its JPEG and WebP blocks passed through
as `.jpg`/`.webp` tiles (byte for byte the blocks GDAL reports, with the
JPEG tables put back), its own pixels read without resampling (pixel for
pixel gdalwarp's tile), one range request per tile over HTTP, the same
bytes from S3, and `tessera check` saying where it is aligned."""
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from osgeo import gdal

from cogserver import start_cog_server
from conftest import ROOT, http_get, metric, s3_bucket, serving
from imaging import decode

gdal.UseExceptions()

WORLD = 20037508.342789244


@pytest.fixture(scope="module")
def cogs(tmp_path_factory):
    """The demo relief in Web Mercator, 4096 pixels (zoom 4), as COGs cut
    in the grid's tiles: JPEG and WebP blocks, and one 4000 pixels wide
    (its right and bottom blocks partly outside the data)."""
    d = tmp_path_factory.mktemp("cogs")
    world = d / "world.tif"
    gdal.Warp(str(world), str(ROOT / "data/shadedrelief-5400.tif"), dstSRS="EPSG:3857",
              outputBounds=(-WORLD, -WORLD, WORLD, WORLD), width=4096, height=4096, resampleAlg="bilinear")
    for name, compress in [("jpeg.tif", "JPEG"), ("webp.tif", "WEBP")]:
        gdal.Translate(str(d / name), str(world), format="COG",
                       creationOptions=["TILING_SCHEME=GoogleMapsCompatible", f"COMPRESS={compress}"])
    gdal.Translate(str(d / "part.tif"), str(world), format="COG", srcWin=[0, 0, 4000, 4000],
                   creationOptions=["COMPRESS=JPEG", "BLOCKSIZE=256"])
    return d


def config(path, source_dir, extra_layers="", settings=""):
    path.write_text(f"""{settings}
stores:
  disk: {{ type: file, path: {path.parent / "store"} }}
layers:
  - name: jpeg
    source: {{ path: "{source_dir}/jpeg.tif", resampling: bilinear }}
    grids: [WebMercatorQuad]
    max_zoom: 6
    formats: [png, jpeg, mixed]
    cache: {{ store: disk }}
  - name: webp
    source: {{ path: "{source_dir}/webp.tif" }}
    grids: [WebMercatorQuad]
    max_zoom: 6
    formats: [webp]
    cache: {{ store: disk }}
  - name: part
    source: {{ path: "{source_dir}/part.tif" }}
    grids: [WebMercatorQuad]
    max_zoom: 6
    formats: [jpeg]
    cache: {{ store: none }}
{extra_layers}""")
    return path


def block(path, z, x, y):
    """The bytes GDAL says block (x, y) of the COG's level for zoom `z`
    holds (the full resolution is zoom 4), JPEG tables put back."""
    ds = gdal.Open(str(path))
    band = ds.GetRasterBand(1)
    if z < 4:
        band = band.GetOverview(4 - z - 1)
    offset = int(band.GetMetadataItem(f"BLOCK_OFFSET_{x}_{y}", "TIFF"))
    size = int(band.GetMetadataItem(f"BLOCK_SIZE_{x}_{y}", "TIFF"))
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read(size)
    tables = band.GetMetadataItem("JPEGTABLES", "TIFF")
    if tables:
        tables = bytes.fromhex(tables)
        data = data[:2] + tables[2:-2] + data[2:]
    return data


def gdalwarp_tile(path, z, x, y):
    """gdalwarp's bilinear 256 x 256 tile (x, y, z) of the COG."""
    span = 2 * WORLD / 2 ** z
    minx, maxy = -WORLD + x * span, WORLD - y * span
    ds = gdal.Warp("", str(path), format="MEM", outputBounds=(minx, maxy - span, minx + span, maxy),
                   width=256, height=256, resampleAlg="bilinear")
    return ds.ReadAsArray()


def test_tessera_check_names_the_zooms_of_own_pixels_and_of_blocks(cogs, tmp_path):
    cfg = config(tmp_path / "tessera.yaml", cogs)
    r = subprocess.run([os.environ["TESSERA_BIN"], "check", str(cfg)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "tiles of WebMercatorQuad are the raster's own pixels (read without resampling, alone) at zooms 0-4" in out, out
    assert "tiles of WebMercatorQuad are its JPEG blocks (.jpg tiles passed through undecoded) at zooms 0-4" in out, out
    assert "tiles of WebMercatorQuad are its WEBP blocks (.webp tiles passed through undecoded) at zooms 0-4" in out, out


def test_blocks_pass_through_byte_for_byte_and_own_pixels_match_gdalwarp(cogs, tmp_path_factory):
    cfg = config(tmp_path_factory.mktemp("local") / "tessera.yaml", cogs)
    with serving(tmp_path_factory, "--config", str(cfg)) as server:
        for z, x, y in [(0, 0, 0), (2, 1, 2), (3, 5, 3), (4, 9, 6), (4, 15, 15)]:
            status, headers, body = http_get(server, f"/tiles/jpeg/WebMercatorQuad/{z}/{x}/{y}.jpg")
            assert status == 200 and headers["Content-Type"] == "image/jpeg"
            assert body == block(cogs / "jpeg.tif", z, x, y), (z, x, y)
            status, headers, body = http_get(server, f"/tiles/webp/WebMercatorQuad/{z}/{x}/{y}.webp")
            assert status == 200 and headers["Content-Type"] == "image/webp"
            assert body == block(cogs / "webp.tif", z, x, y), (z, x, y)
            # The same tile as PNG: the COG's pixels, decoded, as gdalwarp
            # gives them for the tile (no resampling either way).
            status, _, body = http_get(server, f"/tiles/jpeg/WebMercatorQuad/{z}/{x}/{y}.png")
            assert status == 200
            assert np.array_equal(decode(body)[:3], gdalwarp_tile(cogs / "jpeg.tif", z, x, y)), (z, x, y)
        # The mixed format is JPEG where the tile is opaque: the block.
        status, headers, body = http_get(server, "/tiles/jpeg/WebMercatorQuad/3/2/5.jpeg-png")
        assert status == 200 and headers["Content-Type"] == "image/jpeg"
        assert body == block(cogs / "jpeg.tif", 3, 2, 5)
        # A hit is the block too, from the store.
        _, _, again = http_get(server, "/tiles/jpeg/WebMercatorQuad/3/5/3.jpg")
        assert again == block(cogs / "jpeg.tif", 3, 5, 3)
        # Past the data's zooms the tile is drawn (resampled), not a block.
        status, headers, body = http_get(server, "/tiles/jpeg/WebMercatorQuad/5/18/12.jpg")
        assert status == 200 and headers["Content-Type"] == "image/jpeg"
        assert decode(body).shape == (3, 256, 256)
        # A block partly outside the data is rendered: its pixels past the
        # edge are not data.
        status, _, inside = http_get(server, "/tiles/part/WebMercatorQuad/4/14/3.jpg")
        assert status == 200 and inside == block(cogs / "part.tif", 4, 14, 3)
        status, _, edge = http_get(server, "/tiles/part/WebMercatorQuad/4/15/3.jpg")
        assert status == 200 and edge != block(cogs / "part.tif", 4, 15, 3)
        assert decode(edge).shape == (3, 256, 256)


def test_a_damaged_block_is_an_error_not_a_tile(cogs, tmp_path_factory):
    d = tmp_path_factory.mktemp("damaged")
    data = bytearray((cogs / "jpeg.tif").read_bytes())
    ds = gdal.Open(str(cogs / "jpeg.tif"))  # kept: its band needs it
    band = ds.GetRasterBand(1)
    offset = int(band.GetMetadataItem("BLOCK_OFFSET_3_4", "TIFF"))
    size = int(band.GetMetadataItem("BLOCK_SIZE_3_4", "TIFF"))
    data[offset + size - 2: offset + size] = b"\0\0"  # no end-of-image marker
    (d / "jpeg.tif").write_bytes(bytes(data))
    for name in ("webp.tif", "part.tif"):
        (d / name).symlink_to(cogs / name)
    cfg = config(d / "tessera.yaml", d)
    with serving(tmp_path_factory, "--config", str(cfg)) as server:
        status, _, _ = http_get(server, "/tiles/jpeg/WebMercatorQuad/4/3/4.jpg")
        assert status == 500, status
        log = server.log_text()
        assert "a damaged block: not a complete JPEG tile" in log and "jpeg.tif" in log, log
        assert not (d / "store/jpeg/WebMercatorQuad/4/3/4.jpg").exists()
        status, _, _ = http_get(server, "/tiles/jpeg/WebMercatorQuad/4/4/4.jpg")
        assert status == 200


def test_one_range_request_per_tile_over_http_and_the_same_bytes_from_s3(cogs, tmp_path_factory, s3, monkeypatch):
    cog_server = start_cog_server(cogs)
    client = s3_bucket(s3, "tessera-cogs")
    client.upload_file(str(cogs / "jpeg.tif"), "tessera-cogs", "jpeg.tif")
    monkeypatch.setenv("TEST_KEY", s3["key"])
    monkeypatch.setenv("TEST_SECRET", s3["secret"])
    d = tmp_path_factory.mktemp("remote")
    cfg = d / "tessera.yaml"
    cfg.write_text(f"""
gdal:
  allow_private_network: true
  config_options:
    AWS_S3_ENDPOINT: {s3["endpoint"].removeprefix("http://")}
    AWS_HTTPS: "NO"
    AWS_VIRTUAL_HOSTING: "FALSE"
    AWS_ACCESS_KEY_ID: ${{TEST_KEY}}
    AWS_SECRET_ACCESS_KEY: ${{TEST_SECRET}}
layers:
  - name: http
    source: {{ path: "{cog_server.url}/jpeg.tif" }}
    grids: [WebMercatorQuad]
    formats: [jpeg]
  - name: s3
    source: {{ path: /vsis3/tessera-cogs/jpeg.tif }}
    grids: [WebMercatorQuad]
    formats: [jpeg]
  - name: http_png
    source: {{ path: "{cog_server.url}/jpeg.tif" }}
    grids: [WebMercatorQuad]
    formats: [png]
    cache: {{ store: none }}
""")
    try:
        with serving(tmp_path_factory, "--config", str(cfg)) as server:
            tiles = [(4, x, y) for x, y in [(1, 2), (5, 9), (9, 6), (12, 12), (15, 0)]] + [(2, 3, 1), (0, 0, 0)]
            # The header and block tables were read when the source opened.
            before = len(cog_server.ranges)
            for z, x, y in tiles:
                status, _, body = http_get(server, f"/tiles/http/WebMercatorQuad/{z}/{x}/{y}.jpg")
                assert status == 200 and body == block(cogs / "jpeg.tif", z, x, y), (z, x, y)
                status, _, body = http_get(server, f"/tiles/s3/WebMercatorQuad/{z}/{x}/{y}.jpg")
                assert status == 200 and body == block(cogs / "jpeg.tif", z, x, y), (z, x, y)
            # At most one request per tile (none where GDAL's cache of the
            # file's first bytes already holds the block), none for S3's.
            asked = cog_server.ranges[before:]
            assert len(tiles) - 2 <= len(asked) <= len(tiles), asked
            # Own pixels decoded by GDAL: one block read, one request.
            before = len(cog_server.ranges)
            png_tiles = [(4, 2, 2), (4, 6, 10), (4, 11, 3), (4, 13, 13)]
            for z, x, y in png_tiles:
                status, _, _ = http_get(server, f"/tiles/http_png/WebMercatorQuad/{z}/{x}/{y}.png")
                assert status == 200
            asked = cog_server.ranges[before:]
            assert 1 <= len(asked) <= len(png_tiles), asked
    finally:
        cog_server.shutdown()


def test_a_tile_read_alone_is_rendered_once_for_many_requests_at_once(cogs, tmp_path_factory):
    # Without the idle reads of its metatile's other tiles (the next test).
    cfg = config(tmp_path_factory.mktemp("once") / "tessera.yaml", cogs, settings="cache: { idle_siblings: false }")
    with serving(tmp_path_factory, "--config", str(cfg)) as server:
        path = "/tiles/jpeg/WebMercatorQuad/4/7/7.png"
        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(lambda _: http_get(server, path), range(32)))
        assert {a[0] for a in answers} == {200}
        assert len({a[2] for a in answers}) == 1, "every answer the same bytes"
        assert metric(server, "tessera_metatile_renders_total", layer="jpeg") == 1
        # No metatile: its neighbours were not rendered with it.
        stored = cfg.parent / "store/jpeg/WebMercatorQuad/4"
        deadline = time.monotonic() + 30
        while not (stored / "7/7.png").exists():
            assert time.monotonic() < deadline, "the tile was never stored"
            time.sleep(0.05)
        assert sorted(p.relative_to(stored).as_posix() for p in stored.rglob("*.png")) == ["7/7.png"]


def test_the_rest_of_a_tiles_metatile_is_read_while_renders_are_idle(cogs, tmp_path_factory):
    """One request for a tile that is the COG's own pixels is answered with
    that tile alone; the other 15 tiles of its 4 x 4 metatile are then read
    in the background (the server being otherwise idle) and stored, each
    once, with the bytes a server without idle reads answers for them."""
    cfg = config(tmp_path_factory.mktemp("idle") / "tessera.yaml", cogs)
    stored = cfg.parent / "store/jpeg/WebMercatorQuad/4"
    metatile = sorted(f"{x}/{y}.png" for x in range(4, 8) for y in range(4, 8))
    with serving(tmp_path_factory, "--config", str(cfg)) as server:
        status, _, _ = http_get(server, "/tiles/jpeg/WebMercatorQuad/4/7/7.png")
        assert status == 200
        deadline = time.monotonic() + 60
        while (sorted(p.relative_to(stored).as_posix() for p in stored.rglob("*.png")) != metatile
               or metric(server, "tessera_idle_tile_reads_total", layer="jpeg") < 15):
            assert time.monotonic() < deadline, sorted(p.name for p in stored.rglob("*"))
            time.sleep(0.05)
        assert metric(server, "tessera_idle_tile_reads_total", layer="jpeg") == 15
        assert metric(server, "tessera_metatile_renders_total", layer="jpeg") == 1
        siblings = {}
        for tile in metatile:
            status, _, body = http_get(server, f"/tiles/jpeg/WebMercatorQuad/4/{tile}")
            assert status == 200, tile
            siblings[tile] = body
        # Every one of them a hit: nothing rendered again, nothing read twice.
        assert metric(server, "tessera_metatile_renders_total", layer="jpeg") == 1
        assert metric(server, "tessera_idle_tile_reads_total", layer="jpeg") == 15
    other = config(tmp_path_factory.mktemp("not-idle") / "tessera.yaml", cogs, settings="cache: { idle_siblings: false }")
    with serving(tmp_path_factory, "--config", str(other)) as server:
        for tile, body in siblings.items():
            status, _, own = http_get(server, f"/tiles/jpeg/WebMercatorQuad/4/{tile}")
            assert status == 200, tile
            assert own == body, f"{tile}: the idle read's bytes differ from a request's"


def test_metatiles_read_alone_while_the_idle_reader_runs_wait_for_it_and_none_is_lost(cogs, tmp_path_factory):
    """Four tiles of four metatiles asked back to back: the idle reader
    busy with the first, the others wait on its stack (at most 16) and are
    read after it, so all 60 siblings are stored, each read once, and no
    tile is rendered twice."""
    cfg = config(tmp_path_factory.mktemp("idle-stack") / "tessera.yaml", cogs,
                 settings="server: { max_concurrent_renders: 2 }")
    stored = cfg.parent / "store/jpeg/WebMercatorQuad/4"
    asked = [(x, 0) for x in (0, 4, 8, 12)]
    every = sorted(f"{x}/{y}.png" for mx, _ in asked for x in range(mx, mx + 4) for y in range(4))
    with serving(tmp_path_factory, "--config", str(cfg)) as server:
        for x, y in asked:
            status, _, _ = http_get(server, f"/tiles/jpeg/WebMercatorQuad/4/{x}/{y}.png")
            assert status == 200
        deadline = time.monotonic() + 90
        while (sorted(p.relative_to(stored).as_posix() for p in stored.rglob("*.png")) != every
               or metric(server, "tessera_idle_tile_reads_total", layer="jpeg") < 60):
            assert time.monotonic() < deadline, sorted(p.relative_to(stored).as_posix() for p in stored.rglob("*"))
            time.sleep(0.05)
        assert metric(server, "tessera_idle_tile_reads_total", layer="jpeg") == 60
        assert metric(server, "tessera_metatile_renders_total", layer="jpeg") == 4
        for tile in every:
            status, _, _ = http_get(server, f"/tiles/jpeg/WebMercatorQuad/4/{tile}")
            assert status == 200, tile
        assert metric(server, "tessera_metatile_renders_total", layer="jpeg") == 4
        assert metric(server, "tessera_idle_tile_reads_total", layer="jpeg") == 60
