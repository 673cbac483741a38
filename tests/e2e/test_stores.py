"""The journal and MBTiles stores from the real binary: seeded, served, and
the MBTiles files read by sqlite3 and by GDAL's MBTiles driver."""
import os
import sqlite3
import subprocess
import time
import urllib.request

from osgeo import gdal

from conftest import ROOT, metric, relief_config, require_tool, serving
from imaging import decode

gdal.UseExceptions()


def seed(cfg, zoom="0..3"):
    r = subprocess.run([os.environ["TESSERA_BIN"], "seed", "--config", str(cfg), "--layer", "relief",
                        "--zoom", zoom], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return r


def test_mbtiles_seeded_by_tessera_open_in_sqlite3_and_gdal(tmp_path, tmp_path_factory):
    sqlite_cli = require_tool("sqlite3")
    cfg = relief_config(tmp_path, f"{{ type: mbtiles, path: {tmp_path / 'mbtiles'}, synchronous: full }}")
    seed(cfg)
    db = tmp_path / "mbtiles" / "relief.WebMercatorQuad.png.mbtiles"
    out = subprocess.run([sqlite_cli, str(db), "PRAGMA integrity_check; SELECT count(*) FROM tiles;"
                          "SELECT value FROM metadata WHERE name='format';"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == ["ok", str(1 + 4 + 16 + 64), "png"]

    ds = gdal.Open(str(db))
    assert ds.GetDriver().ShortName == "MBTiles"
    assert (ds.RasterXSize, ds.RasterYSize) == (2048, 2048), "zoom 3 is the highest level"
    assert ds.GetRasterBand(1).GetOverviewCount() == 3

    with serving(tmp_path_factory, "--config", str(cfg)) as server:
        for z, x, y in [(3, 4, 2), (2, 1, 1), (0, 0, 0)]:
            status, _, body = server.get(f"/tiles/relief/WebMercatorQuad/{z}/{x}/{y}.png")
            assert status == 200
            with sqlite3.connect(db) as conn:
                (stored,) = conn.execute(
                    "SELECT tile_data FROM tiles WHERE zoom_level=? AND tile_column=? AND tile_row=?",
                    (z, x, 2**z - 1 - y)).fetchone()
            assert body == stored, f"{z}/{x}/{y}: served tile is the stored row (TMS order)"
        _, _, served = server.get("/tiles/relief/WebMercatorQuad/3/4/2.png")
    # GDAL's picture of tile 3/4/2 (column 4, row 2 from the top) is the served tile.
    ref = ds.ReadAsArray(4 * 256, 2 * 256, 256, 256)
    assert (decode(served)[:3] == ref[:3]).all()


def test_journal_store_survives_a_restart_and_serves_seeded_tiles(tmp_path, tmp_path_factory):
    cfg = relief_config(tmp_path, f"{{ type: journal, path: {tmp_path / 'journal'}, segment_mb: 4 }}")
    r = seed(cfg)
    assert "85/85 tiles" in r.stdout
    assert any(p.name.startswith("seg-") for p in (tmp_path / "journal").iterdir())
    with serving(tmp_path_factory, "--config", str(cfg)) as server:
        with urllib.request.urlopen(server.url + "/tiles/relief/WebMercatorQuad/3/4/2.png") as resp:
            assert resp.headers["X-Cache"] == "HIT"
            assert decode(resp.read()).shape[1:] == (256, 256)
    # A second seed finds every tile stored.
    r = seed(cfg)
    assert "(0 rendered, 7 already stored" in r.stdout, r.stdout


def test_journal_metrics_count_acknowledgements_and_syncs_past_the_latency_bound(tmp_path, tmp_path_factory):
    """/metrics shows per journal store its acknowledgements and syncs, and
    those later than `max_latency`: with a bound of 0 every synced write is
    late and every sync slower than it."""
    cfg = tmp_path / "tessera.yaml"
    cfg.write_text(f"""
stores:
  disk: {{ type: journal, path: {tmp_path / 'journal'}, max_latency_ms: 0 }}
layers:
  - name: relief
    source: {{ path: {ROOT}/data/shadedrelief-5400.tif, resampling: bilinear }}
    grids: [WebMercatorQuad]
    max_zoom: 8
    cache: {{ store: disk, durability: synced }}
""")
    with serving(tmp_path_factory, "--config", str(cfg)) as server:
        status, _, _ = server.get("/tiles/relief/WebMercatorQuad/4/8/4.png")
        assert status == 200
        # The metatile's 16 tiles are saved after the answer: wait for them.
        deadline = time.monotonic() + 60
        while metric(server, "tessera_journal_late_acks", store="disk") < 16:
            assert time.monotonic() < deadline, "the metatile's synced saves never showed"
            time.sleep(0.1)
        acks = metric(server, "tessera_journal_acks", store="disk")
        syncs = metric(server, "tessera_journal_syncs", store="disk")
        late = metric(server, "tessera_journal_late_acks", store="disk")
        slow = metric(server, "tessera_journal_slow_syncs", store="disk")
        assert 16 <= late <= acks, (late, acks)
        assert syncs >= 1 and slow == syncs, (slow, syncs)


def test_concurrent_seeds_into_one_mbtiles_file_never_fail_on_a_locked_database(tmp_path):
    """MapProxy fails with "database is locked" past four seed workers; here
    three seed processes of four threads each write the same file at once."""
    cfg = relief_config(tmp_path, f"{{ type: mbtiles, path: {tmp_path / 'mbtiles'}, synchronous: full }}")
    procs = [
        subprocess.Popen([os.environ["TESSERA_BIN"], "seed", "--config", str(cfg), "--layer", "relief",
                          "--zoom", "0..4", "--threads", "4", "--force"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    for p in procs:
        out, err = p.communicate(timeout=900)
        assert p.returncode == 0, err
        assert "locked" not in err + out
    db = tmp_path / "mbtiles" / "relief.WebMercatorQuad.png.mbtiles"
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert conn.execute("SELECT count(*) FROM tiles").fetchone() == (1 + 4 + 16 + 64 + 256,)
