"""`tessera export` from the real binary: PMTiles checked by go-pmtiles'
`pmtiles verify` and read back tile by tile with `pmtiles tile`, MBTiles
opened with the sqlite3 command-line shell, both holding exactly the tiles a
server answers from the same cache; an export streamed to MinIO as a
multipart upload; a failing upload (every part refused by a faulty proxy in
front of MinIO) leaves no object and no parts."""
import json
import os
import subprocess
import sys
import uuid

import pytest

from conftest import ROOT, free_port, relief_config, require_tool, s3_bucket, serving

BUCKET = "tessera-e2e-exports"


def tessera(*args, check=True):
    r = subprocess.run([os.environ["TESSERA_BIN"], *map(str, args)], capture_output=True, text=True, timeout=600)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def pmtiles_tool():
    path = os.environ.get("TESSERA_PMTILES_BIN")
    if not path or not os.access(path, os.X_OK):
        pytest.fail("TESSERA_PMTILES_BIN does not name go-pmtiles; scripts/test builds it with scripts/go-pmtiles",
                    pytrace=False)
    return path


def pmtiles(*args):
    r = subprocess.run([pmtiles_tool(), *map(str, args)], capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    return r.stdout


def s3_options(s3, endpoint=None):
    opts = {"endpoint": endpoint or s3["endpoint"], "access_key_id": s3["key"],
            "secret_access_key": s3["secret"], "region": "us-east-1", "allow_http": "true"}
    return [a for k, v in opts.items() for a in ("--option", f"{k}={v}")]


def client(s3):
    return s3_bucket(s3, BUCKET)


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    """A file-store cache of relief seeded at zoom 0-4 (341 tiles, about 13 MB)."""
    tmp = tmp_path_factory.mktemp("export")
    cfg = relief_config(tmp, f"{{ type: file, path: {tmp / 'cache'} }}")
    out = tessera("seed", "--config", cfg, "--layer", "relief", "--zoom", "0..4").stdout
    assert "341/341 tiles" in out, out
    return cfg


def served_tiles(tmp_path_factory, cfg, coords):
    with serving(tmp_path_factory, "--config", str(cfg)) as server:
        return {c: server.get("/tiles/relief/WebMercatorQuad/%d/%d/%d.png" % c)[2] for c in coords}


ALL = [(z, x, y) for z in range(4) for x in range(2 ** z) for y in range(2 ** z)]


def test_pmtiles_passes_pmtiles_verify_and_holds_the_served_tiles(seeded, tmp_path, tmp_path_factory):
    out = tmp_path / "relief.pmtiles"
    r = tessera("export", "--config", seeded, "--layer", "relief", "--zoom", "0..3",
                "--format", "pmtiles", "--to", out)
    assert "export complete: 85 tiles (0 not in the cache" in r.stdout, r.stdout
    assert oct(out.stat().st_mode & 0o777) == "0o644"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tessera-export-")]

    pmtiles("verify", out)
    show = pmtiles("show", out).decode()
    for line in ["tile type: png", "min zoom: 0", "max zoom: 3", "addressed tiles count: 85",
                 "clustered: true", "tile compression: none", "name relief"]:
        assert line in show, show

    served = served_tiles(tmp_path_factory, seeded, ALL)
    for z, x, y in ALL:
        assert pmtiles("tile", out, z, x, y) == served[(z, x, y)], (z, x, y)


def test_mbtiles_opens_in_sqlite3_with_the_served_tiles(seeded, tmp_path, tmp_path_factory):
    sqlite3 = require_tool("sqlite3")
    out = tmp_path / "relief.mbtiles"
    tessera("export", "--config", seeded, "--layer", "relief", "--zoom", "0..3",
            "--format", "mbtiles", "--to", out)

    def query(sql):
        r = subprocess.run([sqlite3, "-readonly", str(out), sql], capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr.decode()
        return r.stdout

    assert query("PRAGMA integrity_check;").strip() == b"ok"
    assert query("SELECT zoom_level, count(*) FROM tiles GROUP BY 1 ORDER BY 1;").decode().split() == \
        ["0|1", "1|4", "2|16", "3|64"]
    meta = dict(line.split("|", 1) for line in query("SELECT name, value FROM metadata;").decode().splitlines())
    assert (meta["name"], meta["format"], meta["minzoom"], meta["maxzoom"]) == ("relief", "png", "0", "3")
    assert [float(v) for v in meta["bounds"].split(",")] == pytest.approx([-180, -85.0511, 180, 85.0511], abs=1e-3)

    # TMS rows: XYZ row y is stored as 2^z - 1 - y.
    served = served_tiles(tmp_path_factory, seeded, ALL)
    for z, x, y in ALL:
        blob = query(f"SELECT hex(tile_data) FROM tiles WHERE zoom_level={z} AND tile_column={x} "
                     f"AND tile_row={2 ** z - 1 - y};").strip()
        assert bytes.fromhex(blob.decode()) == served[(z, x, y)], (z, x, y)


def test_missing_tiles_are_left_out_or_rendered_when_asked(tmp_path):
    cfg = relief_config(tmp_path, f"{{ type: file, path: {tmp_path / 'cache'} }}")
    r = tessera("export", "--config", cfg, "--layer", "relief", "--zoom", "0..2",
                "--format", "pmtiles", "--to", tmp_path / "none.pmtiles", check=False)
    assert r.returncode == 1
    assert "the cache holds none of the 21 planned tiles" in r.stderr, r.stderr
    assert not (tmp_path / "none.pmtiles").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tessera-export-")]

    tessera("seed", "--config", cfg, "--layer", "relief", "--zoom", "0..1")
    r = tessera("export", "--config", cfg, "--layer", "relief", "--zoom", "0..2",
                "--format", "pmtiles", "--to", tmp_path / "part.pmtiles")
    assert "5 tiles (16 not in the cache, left out)" in r.stdout, r.stdout
    pmtiles("verify", tmp_path / "part.pmtiles")
    assert "max zoom: 1" in pmtiles("show", tmp_path / "part.pmtiles").decode()

    r = tessera("export", "--config", cfg, "--layer", "relief", "--zoom", "0..2",
                "--format", "pmtiles", "--to", tmp_path / "all.pmtiles", "--render-missing")
    assert "21 tiles (0 not in the cache" in r.stdout, r.stdout
    pmtiles("verify", tmp_path / "all.pmtiles")


def test_bad_requests_are_clear_errors(seeded, tmp_path):
    def fails(*args):
        r = tessera("export", "--config", seeded, "--layer", "relief", "--zoom", "0..1", *args, check=False)
        assert r.returncode != 0
        return r.stderr

    assert "use pmtiles or mbtiles" in fails("--format", "geotiff", "--to", tmp_path / "x")
    assert "names no object" in fails("--format", "pmtiles", "--to", "s3://bucket/")
    assert "unsupported scheme" in fails("--format", "pmtiles", "--to", "ftp://host/x.pmtiles")
    assert "below the 5 MiB" in fails("--format", "pmtiles", "--to", "s3://b/x.pmtiles", "--part-size-mb", "1",
                                      "--option", "endpoint=http://127.0.0.1:9", "--option", "allow_http=true")


def test_export_to_minio_is_a_verified_multipart_upload(seeded, s3, tmp_path):
    c = client(s3)
    key = f"exports/{uuid.uuid4().hex[:8]}/relief.pmtiles"
    r = tessera("export", "--config", seeded, "--layer", "relief", "--zoom", "0..4", "--format", "pmtiles",
                "--to", f"s3://{BUCKET}/{key}", "--part-size-mb", "5", *s3_options(s3))
    local = tmp_path / "local.pmtiles"
    tessera("export", "--config", seeded, "--layer", "relief", "--zoom", "0..4", "--format", "pmtiles",
            "--to", local)
    size = local.stat().st_size
    assert size > 5 << 20, "the archive must span several parts"
    assert f"{size} bytes to s3://{BUCKET}/{key}, {-(-size // (5 << 20))} parts" in r.stdout, r.stdout

    fetched = tmp_path / "fetched.pmtiles"
    c.download_file(BUCKET, key, str(fetched))
    assert fetched.read_bytes() == local.read_bytes()
    pmtiles("verify", fetched)
    head = c.head_object(Bucket=BUCKET, Key=key)
    assert "-" in head["ETag"], "a multipart object"
    assert head.get("ContentEncoding") is None, "nothing is compressed on the way"


def test_failed_upload_leaves_no_object_and_no_parts(seeded, s3):
    c = client(s3)
    key = f"exports/{uuid.uuid4().hex[:8]}/relief.mbtiles"
    port = free_port()
    upstream = s3["endpoint"].rsplit(":", 1)[1]
    proxy = subprocess.Popen([sys.executable, str(ROOT / "scripts/lib/faulty-proxy.py"), str(port), upstream,
                              "--fail-all"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proxy.stdout.readline().strip() == "ready"
        r = tessera("export", "--config", seeded, "--layer", "relief", "--zoom", "0..4", "--format", "mbtiles",
                    "--to", f"s3://{BUCKET}/{key}", "--part-size-mb", "5",
                    *s3_options(s3, f"http://127.0.0.1:{port}"), "--option", "max_retries=1",
                    "--option", "retry_timeout_secs=5", check=False)
    finally:
        proxy.kill()
        proxy.wait()
    assert r.returncode == 1, r.stdout
    assert f"uploading s3://{BUCKET}/{key}" in r.stderr, r.stderr
    assert "Contents" not in c.list_objects_v2(Bucket=BUCKET, Prefix=key)
    # The upload was aborted before the command exited.
    assert not c.list_multipart_uploads(Bucket=BUCKET, Prefix=key).get("Uploads")


def test_vector_exports_hold_each_tile_gzip_packed_once_as_the_reference_readers_read_it(tmp_path,
                                                                                       tmp_path_factory,
                                                                                       browser):
    import gzip
    import mapbox_vector_tile
    import sqlite3
    from vectors import countries_and_places
    gpkg = countries_and_places(tmp_path / "world.gpkg")
    cfg = tmp_path / "tessera.yaml"
    cfg.write_text(f"""
stores: {{ disk: {{ type: file, path: {tmp_path / 'cache'} }} }}
layers:
  - name: world
    source: {{ type: vector, path: {gpkg}, layers: [{{ layer: countries, fields: [NAME] }}] }}
    formats: [mvt]
    grids: [WebMercatorQuad]
    cache: {{ store: disk }}
""")
    tessera("seed", "--config", cfg, "--layer", "world", "--format", "mvt", "--zoom", "0..2")
    archives = {}
    for kind in ("pmtiles", "mbtiles"):
        archives[kind] = tmp_path / f"world.{kind}"
        tessera("export", "--config", cfg, "--layer", "world", "--format", kind, "--zoom", "0..2",
                "--to", archives[kind])
    pmtiles("verify", archives["pmtiles"])
    show = pmtiles("show", archives["pmtiles"]).decode()
    assert "tile type: mvt" in show and "tile compression: gzip" in show, show

    def unpacked_once(stored, where):
        assert stored[:2] == b"\x1f\x8b", where
        raw = gzip.decompress(stored)
        assert raw[:2] != b"\x1f\x8b", f"{where}: gzip-packed twice"
        return mapbox_vector_tile.decode(raw)

    db = sqlite3.connect(archives["mbtiles"])
    checked = 0
    for z in range(3):
        for x in range(2 ** z):
            for y in range(2 ** z):
                row = db.execute("SELECT tile_data FROM tiles WHERE zoom_level=? AND tile_column=? AND tile_row=?",
                                 (z, x, (1 << z) - 1 - y)).fetchone()
                if row is None:
                    continue
                from_mbtiles = unpacked_once(row[0], f"mbtiles {z}/{x}/{y}")
                from_pmtiles = unpacked_once(pmtiles("tile", archives["pmtiles"], z, x, y), f"pmtiles {z}/{x}/{y}")
                assert from_pmtiles == from_mbtiles and "countries" in from_pmtiles, (z, x, y)
                checked += 1
    assert checked >= 10, checked
    # Both say what their tiles hold (MBTiles 1.3's `json` row).
    (json_row,) = db.execute("SELECT value FROM metadata WHERE name = 'json'").fetchone()
    metadata = {"mbtiles": json.loads(json_row)["vector_layers"],
                "pmtiles": json.loads(pmtiles("show", "--metadata", archives["pmtiles"]))["vector_layers"]}
    for kind, layers in metadata.items():
        assert [l["id"] for l in layers] == ["countries"], (kind, layers)
        assert layers[0]["fields"] == {"NAME": "String"}, (kind, layers)
        assert (layers[0]["minzoom"], layers[0]["maxzoom"]) == (0, 2), (kind, layers)
    # Served back by tessera: its TileJSON lists the layers, the tiles
    # decode, and its drawing of them too.
    with serving(tmp_path_factory, archives["pmtiles"]) as server:
        tilejson = json.loads(server.get("/tiles/world/WebMercatorQuad/tilejson.json")[2])
        assert [l["id"] for l in tilejson["vector_layers"]] == ["countries"], tilejson
        for z, x, y in [(0, 0, 0), (2, 2, 1)]:
            status, _, body = server.get(f"/tiles/world/WebMercatorQuad/{z}/{x}/{y}.mvt")
            assert status == 200 and "countries" in mapbox_vector_tile.decode(
                gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body), (z, x, y)
        status, content_type, _ = server.get("/tiles/world/WebMercatorQuad/1/1/0.png")
        assert status == 200 and content_type == "image/png"
        # MapLibre GL JS (headless Chromium) draws the exported archive.
        from test_vector_tiles import assert_preview_draws_countries
        assert_preview_draws_countries(browser, f"{server.url}/preview/world", "NAME", 20)
