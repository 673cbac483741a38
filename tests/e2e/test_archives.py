"""Tile archives as sources: PMTiles and MBTiles made by GDAL's MBTiles and
MVT drivers, by go-pmtiles `convert` and by `tessera export`, served by
`tessera serve x.pmtiles` (and `y.mbtiles`, and `s3://...`) byte for byte
as `pmtiles tile` and sqlite3 read them; vector tiles kept gzip; read over
HTTP range requests and from MinIO; warped into another grid and into WMS
maps; noticed when replaced in place; a corrupt archive refused at start
with a clear error, or a 502 for the tile it spoils."""
import concurrent.futures
import gzip
import json
import os
import shutil
import sqlite3
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

import numpy as np
import pytest

from cogserver import start_cog_server
from conftest import ROOT, http_get as get, require_tool, s3_bucket, server_env, serving
from imaging import decode
from test_export import pmtiles, pmtiles_tool, tessera
from test_vector_tiles import assert_preview_draws_countries

RASTER_TILES = [(z, x, y) for z in range(4) for x in range(2 ** z) for y in range(2 ** z)]


def run(*args):
    r = subprocess.run([str(a) for a in args], capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    return r.stdout


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    """relief.mbtiles (GDAL, PNG, zooms 0-3), relief.pmtiles (its
    `pmtiles convert`), countries.mbtiles (GDAL's MVT driver, gzip, zooms
    0-3) and countries.pmtiles (its convert)."""
    d = tmp_path_factory.mktemp("archives")
    gpkg = os.environ.get("TESSERA_TEST_GPKG")
    if not gpkg:
        pytest.fail("TESSERA_TEST_GPKG is not set: start scripts/postgis (scripts/test does)", pytrace=False)
    run("gdal_translate", "-q", "-of", "MBTiles", "-co", "TILE_FORMAT=PNG", "-co", "ZOOM_LEVEL_STRATEGY=LOWER",
        ROOT / "data/shadedrelief-5400.tif", d / "relief.mbtiles")
    run("gdaladdo", "-q", "-r", "average", d / "relief.mbtiles", "2", "4", "8")
    # Inside Web Mercator's square: GDAL 3.6's MVT writer adds tiles past
    # the edges of world-wide data, which go-pmtiles refuses.
    run("ogr2ogr", "-f", "MVT", d / "countries.mbtiles", gpkg, "countries", "-clipsrc", "-170", "-75", "170", "75",
        "-dsco", "MAXZOOM=3", "-dsco", "NAME=countries")
    for name in ("relief", "countries"):
        pmtiles("convert", d / f"{name}.mbtiles", d / f"{name}.pmtiles")
    return d


def mbtiles_tile(path, z, x, y):
    """The blob sqlite3 holds for XYZ tile z/x/y (rows from the bottom)."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        row = db.execute("SELECT tile_data FROM tiles WHERE zoom_level=? AND tile_column=? AND tile_row=?",
                         (z, x, 2 ** z - 1 - y)).fetchone()
    return row[0] if row else None


def test_raster_archives_serve_their_bytes_as_stored(archives, tmp_path_factory):
    with serving(tmp_path_factory, archives / "relief.pmtiles", archives / "relief.mbtiles") as server:
        # One stem, two archives: each named by stem and extension, never
        # renamed behind the user's back.
        status, _, tilejson = get(server, "/tiles/relief-pmtiles/WebMercatorQuad/tilejson.json")
        assert status == 200
        doc = __import__("json").loads(tilejson)
        assert (doc["minzoom"], doc["maxzoom"]) == (0, 3)
        assert doc["tiles"][0].endswith("/tiles/relief-pmtiles/WebMercatorQuad/{z}/{x}/{y}.png")
        for z, x, y in RASTER_TILES:
            want = pmtiles("tile", archives / "relief.pmtiles", z, x, y)
            assert want == mbtiles_tile(archives / "relief.mbtiles", z, x, y)
            for layer in ("relief-pmtiles", "relief-mbtiles"):
                status, headers, body = get(server, f"/tiles/{layer}/WebMercatorQuad/{z}/{x}/{y}.png")
                assert status == 200 and headers["Content-Type"] == "image/png", (layer, z, x, y, body[:200])
                assert body == want, (layer, z, x, y)
        # Past the archive's zooms: none.
        status, _, _ = get(server, "/tiles/relief-pmtiles/WebMercatorQuad/4/0/0.png")
        assert status == 404
        # A WMS map of the archive is its tiles decoded and warped.
        status, headers, png = get(server, "/wms?SERVICE=WMS&VERSION=1.3.0&REQUEST=GetMap&LAYERS=relief-mbtiles"
                                           "&STYLES=&CRS=CRS:84&BBOX=-180,-60,180,60&WIDTH=360&HEIGHT=120&FORMAT=image/png")
        assert status == 200 and headers["Content-Type"] == "image/png", png[:300]
        img = decode(png)
        assert img.shape[1:] == (120, 360) and img[:3].std() > 10, "a picture, not a blank"


def test_an_archive_made_by_tessera_export_is_served_as_exported(tmp_path, tmp_path_factory):
    cfg = tmp_path / "seed.yaml"
    cfg.write_text(f"""
stores: {{ disk: {{ type: file, path: {tmp_path / 'cache'} }} }}
layers:
  - name: relief
    source: {{ path: {ROOT}/data/shadedrelief-5400.tif }}
    grids: [WebMercatorQuad]
    max_zoom: 2
    cache: {{ store: disk }}
""")
    tessera("seed", "--config", cfg, "--layer", "relief", "--zoom", "0..2")
    out = tmp_path / "exported.pmtiles"
    tessera("export", "--config", cfg, "--layer", "relief", "--zoom", "0..2", "--format", "pmtiles", "--to", out)
    with serving(tmp_path_factory, out) as server:
        for z in range(3):
            for x in range(2 ** z):
                for y in range(2 ** z):
                    _, _, body = get(server, f"/tiles/exported/WebMercatorQuad/{z}/{x}/{y}.png")
                    assert body == pmtiles("tile", out, z, x, y), (z, x, y)


def test_vector_archives_pass_through_gzip_with_their_layers(archives, tmp_path_factory):
    with serving(tmp_path_factory, archives / "countries.pmtiles", archives / "countries.mbtiles") as server:
        status, _, tilejson = get(server, "/tiles/countries-pmtiles/WebMercatorQuad/tilejson.json")
        doc = __import__("json").loads(tilejson)
        assert status == 200 and doc["format"] == "pbf"
        assert [l["id"] for l in doc["vector_layers"]] == ["countries"], doc["vector_layers"]
        assert "NAME" in doc["vector_layers"][0]["fields"]
        assert doc["bounds"] == pytest.approx([-170, -75, 170, 75], abs=1e-6)
        checked = 0
        for z in range(4):
            for x in range(2 ** z):
                for y in range(2 ** z):
                    stored = mbtiles_tile(archives / "countries.mbtiles", z, x, y)
                    if stored is None:
                        continue
                    assert pmtiles("tile", archives / "countries.pmtiles", z, x, y) == stored
                    for layer in ("countries-pmtiles", "countries-mbtiles"):
                        path = f"/tiles/{layer}/WebMercatorQuad/{z}/{x}/{y}.mvt"
                        status, headers, body = get(server, path, {"Accept-Encoding": "gzip"})
                        assert status == 200 and headers["Content-Encoding"] == "gzip", (path, status)
                        assert body == stored, path
                        status, headers, body = get(server, path)
                        assert status == 200 and headers.get("Content-Encoding") is None
                        assert body == gzip.decompress(stored), path
                    checked += 1
        assert checked > 20, checked


def test_an_archive_over_http_is_read_by_ranges_once_per_tile(archives, tmp_path_factory, tmp_path):
    web = start_cog_server(archives)
    # The archives are looked at for replacement only every hour here: each
    # look is a range request, which the counts below would see.
    cfg = tmp_path / "http.yaml"
    cfg.write_text(f"""
gdal: {{ allowed_private_hosts: ["{web.authority}"] }}
layers:
  - name: relief
    source: {{ type: pmtiles, path: "{web.url}/relief.pmtiles", check_secs: 3600 }}
    grids: [WebMercatorQuad]
    formats: [png]
    max_zoom: 3
    cache: {{ store: none }}
  - name: relief-mb
    source: {{ type: mbtiles, path: "{web.url}/relief.mbtiles", download_dir: "{tmp_path / 'copies'}",
              check_secs: 3600 }}
    grids: [WebMercatorQuad]
    formats: [png]
    max_zoom: 3
    cache: {{ store: none }}
""")
    with serving(tmp_path_factory, "--config", cfg) as server:
        opened = len(web.ranges)
        for z, x, y in RASTER_TILES[:21]:
            before = len(web.ranges)
            _, _, body = get(server, f"/tiles/relief/WebMercatorQuad/{z}/{x}/{y}.png")
            assert body == pmtiles("tile", archives / "relief.pmtiles", z, x, y), (z, x, y)
            # One range per tile: this archive's directory is its root.
            assert len(web.ranges) - before == 1, web.ranges[before:]
            _, _, body = get(server, f"/tiles/relief-mb/WebMercatorQuad/{z}/{x}/{y}.png")
            assert body == mbtiles_tile(archives / "relief.mbtiles", z, x, y), (z, x, y)
        assert opened >= 2, "the header, then the MBTiles copy"
        assert list((tmp_path / "copies").glob("*.mbtiles")), "the MBTiles was copied to be read"


def test_an_archive_in_minio_is_served_by_its_url(archives, tmp_path_factory, s3, monkeypatch):
    bucket = "tessera-e2e-archives"
    s3_bucket(s3, bucket).upload_file(str(archives / "relief.pmtiles"), bucket, "maps/relief.pmtiles")
    for k, v in {"AWS_ENDPOINT_URL": s3["endpoint"], "AWS_ACCESS_KEY_ID": s3["key"],
                 "AWS_SECRET_ACCESS_KEY": s3["secret"], "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}.items():
        monkeypatch.setenv(k, v)
    with serving(tmp_path_factory, f"s3://{bucket}/maps/relief.pmtiles") as server:
        for z, x, y in RASTER_TILES[:21]:
            status, _, body = get(server, f"/tiles/relief/WebMercatorQuad/{z}/{x}/{y}.png")
            assert status == 200 and body == pmtiles("tile", archives / "relief.pmtiles", z, x, y), (z, x, y)


class CountingProxy:
    """Forwards every request to `upstream` (host:port) as it came, Host
    header included (so S3 signatures hold), and remembers each request's
    method, path and Range."""

    def __init__(self, upstream):
        import http.client
        import http.server
        import threading
        seen = self.seen = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                seen.append((self.command, self.path, self.headers.get("Range")))
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                conn = http.client.HTTPConnection(upstream, timeout=30)
                conn.request(self.command, self.path, body=body, headers=dict(self.headers))
                answer = conn.getresponse()
                data = answer.read()
                self.send_response(answer.status)
                for k, v in answer.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                # A HEAD answer says the object's length, not its own.
                self.send_header("Content-Length", answer.getheader("Content-Length", "0")
                                 if self.command == "HEAD" else str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_HEAD = do_PUT = do_POST = do_GET

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_serve_opens_an_archive_in_a_bucket_once(archives, tmp_path_factory, s3, monkeypatch):
    """`serve s3://...` reads the archive's header to name the layer and its
    zooms; the layer then serves from that same opened archive, so the
    header is fetched once, not once more by the assembly."""
    bucket = "tessera-e2e-archives"
    s3_bucket(s3, bucket).upload_file(str(archives / "relief.pmtiles"), bucket, "maps/once.pmtiles")
    proxy = CountingProxy(s3["endpoint"].split("://", 1)[1])
    for k, v in {"AWS_ENDPOINT_URL": proxy.url, "AWS_ACCESS_KEY_ID": s3["key"],
                 "AWS_SECRET_ACCESS_KEY": s3["secret"], "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}.items():
        monkeypatch.setenv(k, v)
    with serving(tmp_path_factory, f"s3://{bucket}/maps/once.pmtiles") as server:
        # Each range of the archive read once (a second opening would read
        # its magic number, header and directories again).
        reads = [r for r in proxy.seen if r[0] == "GET"]
        assert reads and len(reads) == len(set(reads)), "\n".join(map(str, proxy.seen))
        assert [r for r in reads if r[2].startswith("bytes=0-")], reads
        status, _, body = get(server, "/tiles/once/WebMercatorQuad/0/0/0.png")
        assert status == 200 and body == pmtiles("tile", archives / "relief.pmtiles", 0, 0, 0)
    proxy.server.shutdown()


def leaf_archive(path):
    """A vector PMTiles of zooms 0-7 (21845 distinct gzip tiles of random
    sizes) written by the protomaps `pmtiles` library: its directory is too
    large for the root, so it has leaf directories. Returns (tiles by
    (z, x, y), the leaf section's (offset, length))."""
    import random
    from pmtiles.tile import Compression, TileType, zxy_to_tileid
    from pmtiles.writer import Writer
    rng = random.Random(7)
    tiles = {}
    with open(path, "wb") as f:
        writer = Writer(f)
        for z in range(8):
            for x in range(2 ** z):
                for y in range(2 ** z):
                    tiles[(z, x, y)] = gzip.compress(f"{z}/{x}/{y}".encode() + rng.randbytes(rng.randint(10, 300)),
                                                     mtime=0)
        for (z, x, y), body in sorted(tiles.items(), key=lambda t: zxy_to_tileid(*t[0])):
            writer.write_tile(zxy_to_tileid(z, x, y), body)
        writer.finalize({"tile_type": TileType.MVT, "tile_compression": Compression.GZIP,
                         "min_lon_e7": -1800000000, "min_lat_e7": -850000000, "max_lon_e7": 1800000000,
                         "max_lat_e7": 850000000, "center_zoom": 0, "center_lon_e7": 0, "center_lat_e7": 0},
                        {"name": "leaf", "vector_layers": [{"id": "x", "fields": {}}]})
    header = path.read_bytes()[:127]
    leaf = (int.from_bytes(header[40:48], "little"), int.from_bytes(header[48:56], "little"))
    assert leaf[1] > 0, "the archive must have leaf directories"
    return tiles, leaf


def test_leaf_directories_are_read_once_however_many_ask(tmp_path, tmp_path_factory):
    tiles, (leaf_start, leaf_len) = leaf_archive(tmp_path / "leaf.pmtiles")
    web = start_cog_server(tmp_path)
    # Looked at for replacement only every hour: a look is a range request.
    cfg = tmp_path / "leaf.yaml"
    cfg.write_text(f"""
gdal: {{ allowed_private_hosts: ["{web.authority}"] }}
layers:
  - name: leaf
    source: {{ type: pmtiles, path: "{web.url}/leaf.pmtiles", check_secs: 3600 }}
    grids: [WebMercatorQuad]
    formats: [mvt]
    max_zoom: 7
    cache: {{ store: none }}
""")
    # 64 neighbours at zoom 7 (under one or two leaves), asked at once,
    # then again: each leaf directory is read once, every tile once per ask.
    wanted = [(7, x, y) for x in range(40, 48) for y in range(40, 48)]
    with serving(tmp_path_factory, "--config", cfg) as server:
        web.ranges.clear()
        for _ in range(2):
            with concurrent.futures.ThreadPoolExecutor(32) as pool:
                answers = list(pool.map(lambda t: get(server, "/tiles/leaf/WebMercatorQuad/%d/%d/%d.mvt" % t,
                                                      {"Accept-Encoding": "gzip"}), wanted))
            for t, (status, headers, body) in zip(wanted, answers):
                assert status == 200 and headers["Content-Encoding"] == "gzip", (t, status)
                assert body == tiles[t], t
        leaf_reads = [(start, end) for _, start, end in web.ranges if leaf_start <= start < leaf_start + leaf_len]
        assert leaf_reads, "the tiles' leaf directories were read"
        assert len(leaf_reads) == len(set(leaf_reads)), f"a leaf directory was read twice: {leaf_reads}"
        assert len(web.ranges) == len(leaf_reads) + 2 * len(wanted), web.ranges


# Azurite's well-known development account.
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def put_object(kind, url, data):
    """Writes `data` at `url` (az://container/key on Azurite, gs://bucket/key
    on fake-gcs-server) with the servers' own clients: the Azure SDK, and
    fake-gcs-server's JSON upload API."""
    bucket, key = url.split("://", 1)[1].split("/", 1)
    if kind == "azure":
        from azure.storage.blob import BlobServiceClient
        endpoint = server_env("AZURITE_BLOB_STORAGE_URL", "azurite")
        service = BlobServiceClient(f"{endpoint}/devstoreaccount1",
                                    credential={"account_name": "devstoreaccount1", "account_key": AZURITE_KEY})
        service.get_blob_client(bucket, key).upload_blob(data, overwrite=True)
        return
    base = json.loads(server_env("TESSERA_TEST_GCS_KEY", "fake-gcs"))["gcs_base_url"]
    request = urllib.request.Request(
        f"{base}/upload/storage/v1/b/{bucket}/o?uploadType=media&name={urllib.parse.quote(key, safe='')}",
        data=data, method="POST", headers={"Content-Type": "application/octet-stream"})
    with urllib.request.urlopen(request, timeout=60) as r:
        assert r.status == 200, r.status


@pytest.mark.parametrize("kind", ["azure", "gcs"])
def test_an_archive_in_azure_or_gcs_is_served_by_its_url(kind, archives, tmp_path, tmp_path_factory):
    if kind == "azure":
        url = server_env("TESSERA_TEST_AZURE_URL", "azurite")
        options = "{ use_emulator: 'true' }"
    else:
        url = server_env("TESSERA_TEST_GCS_URL", "fake-gcs")
        options = "{ service_account_key: '%s' }" % server_env("TESSERA_TEST_GCS_KEY", "fake-gcs")
    url = f"{url}/archives-{os.urandom(4).hex()}/relief.pmtiles"
    put_object(kind, url, (archives / "relief.pmtiles").read_bytes())
    cfg = tmp_path / f"{kind}.yaml"
    cfg.write_text(f"""
layers:
  - name: relief
    source: {{ type: pmtiles, path: "{url}", options: {options} }}
    grids: [WebMercatorQuad]
    formats: [png]
    max_zoom: 3
    cache: {{ store: none }}
""")
    with serving(tmp_path_factory, "--config", str(cfg)) as server:
        for z, x, y in RASTER_TILES[:21]:
            status, _, body = get(server, f"/tiles/relief/WebMercatorQuad/{z}/{x}/{y}.png")
            assert status == 200 and body == pmtiles("tile", archives / "relief.pmtiles", z, x, y), (z, x, y)
        tilejson = json.loads(get(server, "/tiles/relief/WebMercatorQuad/tilejson.json")[2])
        assert tilejson["maxzoom"] == 3, tilejson


def test_archives_are_warped_into_other_grids(archives, tmp_path_factory, tmp_path):
    cfg = tmp_path / "warp.yaml"
    cfg.write_text(f"""
layers:
  - name: archived
    source: {{ type: pmtiles, path: {archives / 'relief.pmtiles'} }}
    grids: [WorldCRS84Quad]
    formats: [png]
    max_zoom: 2
  - name: original
    source: {{ path: {ROOT}/data/shadedrelief-5400.tif }}
    grids: [WorldCRS84Quad]
    formats: [png]
    max_zoom: 2
""")
    with serving(tmp_path_factory, "--config", cfg) as server:
        # Mid latitudes (the archive, in Web Mercator, stops at 85 degrees).
        for path in ("/tiles/{}/WorldCRS84Quad/2/3/1.png", "/tiles/{}/WorldCRS84Quad/2/5/2.png"):
            _, _, a = get(server, path.format("archived"))
            _, _, b = get(server, path.format("original"))
            diff = np.abs(decode(a)[:3].astype(float) - decode(b)[:3].astype(float)).mean()
            assert diff < 12, (path, diff)


def test_an_archive_replaced_in_place_is_read_again(archives, tmp_path_factory, tmp_path):
    live = tmp_path / "live.pmtiles"
    shutil.copy(archives / "relief.pmtiles", live)
    with serving(tmp_path_factory, live) as server:
        _, _, before = get(server, "/tiles/live/WebMercatorQuad/1/0/0.png")
        assert before == pmtiles("tile", live, 1, 0, 0)
        # Replaced by a rename, as a publisher would: another archive.
        other = tmp_path / "other.pmtiles"
        run("gdal_translate", "-q", "-of", "MBTiles", "-co", "TILE_FORMAT=PNG", "-co", "ZOOM_LEVEL_STRATEGY=LOWER",
            "-scale", "0", "255", "255", "0", ROOT / "data/shadedrelief-5400.tif", tmp_path / "other.mbtiles")
        run("gdaladdo", "-q", "-r", "average", tmp_path / "other.mbtiles", "2", "4", "8")
        pmtiles("convert", tmp_path / "other.mbtiles", other)
        os.rename(other, live)
        expected = pmtiles("tile", live, 1, 0, 0)
        assert expected != before
        # The quick layer caches in memory: the archive is looked at every
        # 5 s (`check_secs`) and a replaced one reloads the configuration,
        # after which the cached tile is never served again.
        deadline = time.monotonic() + 30
        while (after := get(server, "/tiles/live/WebMercatorQuad/1/0/0.png")[2]) != expected:
            assert after == before, "neither the old tile nor the new one"
            assert time.monotonic() < deadline, "the replaced archive was not noticed within 30 s"
            time.sleep(0.2)
        for _ in range(5):
            assert get(server, "/tiles/live/WebMercatorQuad/1/0/0.png")[2] == expected
        # Tiles not cached before are the new archive's at once.
        assert get(server, "/tiles/live/WebMercatorQuad/2/1/1.png")[2] == pmtiles("tile", live, 2, 1, 1)


def corrupt(src, dst, edit):
    data = bytearray(src.read_bytes())
    edit(data)
    dst.write_bytes(bytes(data))
    return dst


def test_corrupt_archives_are_refused_at_start_with_a_clear_error(archives, tmp_path):
    pm = archives / "relief.pmtiles"
    size = pm.stat().st_size
    root_offset = int.from_bytes(pm.read_bytes()[8:16], "little")
    cases = {
        "wrong magic": (corrupt(pm, tmp_path / "magic.pmtiles", lambda d: d.__setitem__(slice(0, 7), b"NOTPMTI")),
                        "wrong magic number"),
        "truncated header": (corrupt(pm, tmp_path / "short.pmtiles", lambda d: d.__delitem__(slice(60, None))),
                             "corrupt PMTiles header"),
        "root past the end": (corrupt(pm, tmp_path / "past.pmtiles", lambda d: d.__setitem__(
            slice(8, 16), (size + 1000).to_bytes(8, "little"))), "corrupt PMTiles header"),
        "version 4": (corrupt(pm, tmp_path / "v4.pmtiles", lambda d: d.__setitem__(7, 4)), "PMTiles version 4"),
        "version 2": (corrupt(pm, tmp_path / "v2.pmtiles", lambda d: d.__setitem__(slice(0, 4), b"PM\x02\x00")),
                      "version other than 3"),
    }
    assert root_offset == 127
    mb = tmp_path / "nometa.mbtiles"
    shutil.copy(archives / "relief.mbtiles", mb)
    with sqlite3.connect(mb) as db:
        db.execute("DROP TABLE metadata")
    notiles = tmp_path / "notiles.mbtiles"
    shutil.copy(archives / "relief.mbtiles", notiles)
    with sqlite3.connect(notiles) as db:
        db.execute("DROP TABLE tiles")
    badmeta = tmp_path / "badmeta.mbtiles"
    shutil.copy(archives / "relief.mbtiles", badmeta)
    with sqlite3.connect(badmeta) as db:
        db.execute("UPDATE metadata SET value='west,south' WHERE name='bounds'")
    notdb = tmp_path / "text.mbtiles"
    notdb.write_text("not a database " * 100)
    cases.update({
        "mbtiles without metadata": (mb, "no `metadata` table"),
        "mbtiles without tiles": (notiles, "no `tiles` table"),
        "bad metadata": (badmeta, "metadata bounds"),
        "not sqlite": (notdb, "not an MBTiles database"),
    })
    for what, (path, message) in cases.items():
        r = subprocess.run([os.environ["TESSERA_BIN"], "serve", "--listen", "127.0.0.1:1", path],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode != 0, what
        assert message in r.stderr and "panicked" not in r.stderr, (what, r.stderr[-1500:])


def test_a_tile_spoiled_in_the_archive_is_a_502_and_the_others_are_served(archives, tmp_path_factory, tmp_path):
    # A leaf-less archive whose root directory names a tile past the data
    # section: that tile alone fails.
    pm = archives / "relief.pmtiles"
    data = bytearray(pm.read_bytes())
    data_length_at = 64  # header: data section length
    real = int.from_bytes(data[data_length_at:data_length_at + 8], "little")
    data[data_length_at:data_length_at + 8] = (real - 5000).to_bytes(8, "little")
    spoiled = tmp_path / "spoiled.pmtiles"
    spoiled.write_bytes(bytes(data))
    with serving(tmp_path_factory, spoiled) as server:
        codes = {}
        for z, x, y in RASTER_TILES:
            status, headers, body = get(server, f"/tiles/spoiled/WebMercatorQuad/{z}/{x}/{y}.png")
            codes.setdefault(status, 0)
            codes[status] += 1
            if status == 200:
                assert body == pmtiles("tile", pm, z, x, y)
        assert codes.get(502, 0) >= 1 and codes.get(200, 0) >= 60, codes
        assert "panicked" not in server.log_text()


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def directory(entries):
    """A PMTiles v3 directory (uncompressed) of (tile_id, run_length,
    length, offset) entries."""
    out, last = bytearray(varint(len(entries))), 0
    for tile_id, *_ in entries:
        out += varint(tile_id - last)
        last = tile_id
    for _, run, _, _ in entries:
        out += varint(run)
    for _, _, length, _ in entries:
        out += varint(length)
    for _, _, _, offset in entries:
        out += varint(offset + 1)
    return bytes(out)


def test_a_directory_loop_is_a_502_not_a_hang(tmp_path, tmp_path_factory):
    """A leaf directory that names itself as the leaf of tile 0."""
    length = 4
    while len(leaf := directory([(0, 0, length, 0)])) != length:
        length = len(leaf)
    root = directory([(0, 0, len(leaf), 0)])
    meta = b"{}"
    header = bytearray(b"PMTiles\x03")
    offsets = [127, len(root), 127 + len(root), len(meta), 127 + len(root) + len(meta), len(leaf),
               127 + len(root) + len(meta) + len(leaf), 0, 1, 1, 1]
    for v in offsets:
        header += v.to_bytes(8, "little")
    # clustered, internal compression none, tile compression none, PNG,
    # zooms 0-0, the world, centre 0,0 at zoom 0.
    header += bytes([1, 1, 1, 2, 0, 0])
    for v in (-1800000000, -850000000, 1800000000, 850000000):
        header += v.to_bytes(4, "little", signed=True)
    header += bytes([0]) + (0).to_bytes(4, "little") + (0).to_bytes(4, "little")
    assert len(header) == 127
    path = tmp_path / "loop.pmtiles"
    path.write_bytes(bytes(header) + root + meta + leaf)
    with serving(tmp_path_factory, path) as server:
        status, _, body = get(server, "/tiles/loop/WebMercatorQuad/0/0/0.png")
        assert status == 502, (status, body[:300])
        assert "panicked" not in server.log_text()
        assert "leaf directories nested too deep" in server.log_text()


def test_maplibre_draws_a_vector_pmtiles_layer(archives, tmp_path_factory, browser):
    """tessera's preview (MapLibre GL JS in headless Chromium) of the
    countries PMTiles served by `tessera serve countries.pmtiles`."""
    with serving(tmp_path_factory, archives / "countries.pmtiles") as server:
        assert_preview_draws_countries(browser, f"{server.url}/preview/countries", "NAME", 20)


def test_a_vector_archive_is_drawn_with_the_layer_style(archives, tmp_path, tmp_path_factory):
    """PNG tiles and WMS maps of a vector archive: its features drawn with
    the layer's rules (filters on the archive's attributes too), as the
    same features drawn from the GeoPackage they came from."""
    gpkg = os.environ["TESSERA_TEST_GPKG"]
    style = '[{ fill: "#336699", stroke: "#336699", stroke_width: 1 }, ' \
            '{ filter: { field: NAME, eq: France }, fill: "#cc0000" }]'
    cfg = tmp_path / "drawn.yaml"
    cfg.write_text(f"""
layers:
  - name: archived
    source: {{ type: pmtiles, path: {archives / 'countries.pmtiles'}, style: {style} }}
    grids: [WebMercatorQuad]
    formats: [mvt, png]
    max_zoom: 6
    cache: {{ store: none }}
  - name: original
    source: {{ type: vector, path: "{gpkg}", layer: countries, style: {style} }}
    grids: [WebMercatorQuad]
    formats: [png]
    cache: {{ store: none }}
""")
    with serving(tmp_path_factory, "--config", cfg) as server:
        def wms(layer):
            status, headers, png = get(server, f"/wms?SERVICE=WMS&VERSION=1.3.0&REQUEST=GetMap&LAYERS={layer}"
                                               "&STYLES=&CRS=CRS:84&BBOX=-12,35,30,60&WIDTH=420&HEIGHT=250"
                                               "&FORMAT=image/png&TRANSPARENT=TRUE")
            assert status == 200 and headers["Content-Type"] == "image/png", png[:300]
            return decode(png)
        archived, original = wms("archived"), wms("original")
        a, o = archived[3] > 0, original[3] > 0
        iou = (a & o).sum() / (a | o).sum()
        assert iou > 0.9, iou
        # Paris (2.35 E, 48.85 N) is France, drawn red; Madrid is not.
        px = lambda lon, lat: (int((60 - lat) / 25 * 250), int((lon + 12) / 42 * 420))
        y, x = px(2.35, 48.85)
        assert tuple(archived[:3, y, x]) == (0xcc, 0, 0), archived[:, y, x]
        y, x = px(-3.7, 40.4)
        assert tuple(archived[:3, y, x]) == (0x33, 0x66, 0x99), archived[:, y, x]
        # A PNG tile past the archive's zooms: drawn from its deepest tiles.
        status, headers, png = get(server, "/tiles/archived/WebMercatorQuad/5/16/11.png")
        assert status == 200 and decode(png)[3].max() > 0


def test_an_archive_of_512_pixel_tiles_passes_through_at_2x(tmp_path, tmp_path_factory):
    """Tiles of 512 pixels are the HiDPI twin's (`WebMercatorQuad@2x`):
    passed through there, drawn down to 256 pixels in WebMercatorQuad."""
    big = tmp_path / "big.mbtiles"
    run("gdal_translate", "-q", "-of", "MBTiles", "-co", "TILE_FORMAT=PNG", "-co", "BLOCKSIZE=512",
        "-co", "ZOOM_LEVEL_STRATEGY=LOWER", ROOT / "data/shadedrelief-5400.tif", big)
    run("gdaladdo", "-q", "-r", "average", big, "2", "4")
    with serving(tmp_path_factory, big) as server:
        for z, x, y in [(0, 0, 0), (1, 0, 0), (2, 3, 1)]:
            status, _, body = get(server, f"/tiles/big/WebMercatorQuad@2x/{z}/{x}/{y}.png")
            assert status == 200 and body == mbtiles_tile(big, z, x, y), (z, x, y)
            status, _, small = get(server, f"/tiles/big/WebMercatorQuad/{z}/{x}/{y}.png")
            assert status == 200 and decode(small).shape[1:] == (256, 256), (z, x, y)
