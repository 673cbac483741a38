"""`tessera seed`: durable, resumable after SIGKILL and Ctrl-C, never a truncated tile."""
import os
import signal
import struct
import subprocess
import time
import zlib

import pytest

from conftest import relief_config, serving
from imaging import decode

# relief at zoom 0..6 in WebMercatorQuad: 1+4+16+64+256+1024+4096 tiles in
# 1+1+1+4+16+64+256 metatiles of 4x4.
TOTAL_TILES = 5461
TOTAL_METATILES = 343


def write_config(tmp_path, store="file"):
    cache = tmp_path / "cache"
    store_yaml = f"{{ type: file, path: {cache}, memory_mb: 0 }}" if store == "file" else "{ type: memory }"
    return relief_config(tmp_path, store_yaml), cache


def seed_cmd(config, *extra, zoom="0..6"):
    return [os.environ["TESSERA_BIN"], "seed", "--config", str(config), "--layer", "relief",
            "--grid", "WebMercatorQuad", "--zoom", zoom, *extra]


def tile_files(cache):
    root = cache / "relief" / "WebMercatorQuad"
    return sorted(p for p in root.rglob("*.png")) if root.exists() else []


def png_is_whole(data: bytes) -> bool:
    """Walks every chunk and checks its CRC; a truncated file fails."""
    if not data.startswith(b"\x89PNG\r\n\x1a\n"):
        return False
    pos = 8
    while pos + 12 <= len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        if len(body) != length:
            return False
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length] or b"\0\0\0\0")
        if zlib.crc32(kind + body) != crc:
            return False
        pos += 12 + length
        if kind == b"IEND":
            return pos == len(data)
    return False


def run_seed(config, *extra, zoom="0..6"):
    return subprocess.run(seed_cmd(config, *extra, zoom=zoom), capture_output=True, text=True, timeout=900)


def test_seed_killed_with_sigkill_then_run_again_completes_with_no_truncated_tile(tmp_path, tmp_path_factory):
    config, cache = write_config(tmp_path)
    for cycle, fraction in enumerate((0.15, 0.5)):
        proc = subprocess.Popen(seed_cmd(config, "--threads", "2"), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        deadline = time.monotonic() + 600
        while len(tile_files(cache)) < fraction * TOTAL_TILES:
            assert proc.poll() is None, f"seed ended before the kill: {proc.communicate()}"
            assert time.monotonic() < deadline, "seed made no progress"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        files = tile_files(cache)
        assert 0 < len(files) < TOTAL_TILES, f"cycle {cycle}: killed half way ({len(files)} tiles)"
        for f in files:
            assert png_is_whole(f.read_bytes()), f"truncated tile visible after SIGKILL: {f}"
        # A server on the killed cache serves only whole tiles.
        with serving(tmp_path_factory, "--config", str(config)) as server:
            for f in files[:: max(1, len(files) // 40)]:
                z, x, y = f.parts[-3], f.parts[-2], f.stem
                status, ctype, body = server.get(f"/tiles/relief/WebMercatorQuad/{z}/{x}/{y}.png")
                assert status == 200 and ctype == "image/png"
                assert body == f.read_bytes()
                assert decode(body).shape == (3, 256, 256) or decode(body).shape == (4, 256, 256)

    r = run_seed(config)
    assert r.returncode == 0, r.stderr + r.stdout
    assert "seed complete" in r.stdout
    assert f"{TOTAL_TILES}/{TOTAL_TILES} tiles" in r.stdout
    # Metatiles stored before the kills were skipped, not rendered again.
    rendered = int(r.stdout.split(" rendered")[0].rsplit("(", 1)[1])
    assert 0 < rendered < TOTAL_METATILES, r.stdout
    files = tile_files(cache)
    assert len(files) == TOTAL_TILES
    assert all(png_is_whole(f.read_bytes()) for f in files)
    # The dead processes' staging directories were swept.
    assert list((cache / ".staging").iterdir()) == []


def test_ctrl_c_stops_cleanly_with_a_summary_and_a_rerun_finishes(tmp_path):
    config, cache = write_config(tmp_path)
    proc = subprocess.Popen(seed_cmd(config, "--threads", "1"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600
    while len(tile_files(cache)) < 200:
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "seed stopped" in out and "stopping" in err
    stopped_at = len(tile_files(cache))
    assert stopped_at < TOTAL_TILES
    assert all(png_is_whole(f.read_bytes()) for f in tile_files(cache))
    r = run_seed(config)
    assert r.returncode == 0 and len(tile_files(cache)) == TOTAL_TILES


def test_progress_lines_when_not_on_a_terminal(tmp_path):
    config, _ = write_config(tmp_path)
    r = run_seed(config, "--bbox", "-10,35,30,60", zoom="0..4")
    assert r.returncode == 0, r.stderr
    assert "seeding relief in WebMercatorQuad at zoom 0..4 as png" in r.stderr
    assert "seed complete" in r.stdout
    # A bbox limits the work to the metatiles that cover it.
    tiles = int(r.stdout.split("/")[0].split()[-1])
    assert 0 < tiles < 341


def test_a_polygon_limits_the_seed_to_the_metatiles_it_touches(tmp_path):
    config, cache = write_config(tmp_path)
    # A thin diagonal band across Europe: its bbox covers many more tiles.
    polygon = tmp_path / "band.geojson"
    polygon.write_text('{"type":"Feature","properties":{},"geometry":{"type":"Polygon",'
                       '"coordinates":[[[-10,36],[-8,36],[30,60],[28,60],[-10,36]]]}}')
    r = run_seed(config, "--polygon", str(polygon), zoom="6")
    assert r.returncode == 0, r.stderr
    with_polygon = len(tile_files(cache))
    other = tmp_path / "bbox"
    other.mkdir()
    bbox_config, bbox_cache = write_config(other)
    r = run_seed(bbox_config, "--bbox", "-10,36,30,60", zoom="6")
    assert r.returncode == 0, r.stderr
    with_bbox = len(tile_files(bbox_cache))
    assert 0 < with_polygon < with_bbox, (with_polygon, with_bbox)
    tiles = cache / "relief/WebMercatorQuad/6"
    assert (tiles / "33/22.png").exists(), "(10E, 48N) lies on the band"
    assert not (tiles / "30/19.png").exists(), "(8W, 58N) is far from the band"
    r = run_seed(config, "--polygon", str(polygon), "--bbox", "0,0,1,1", zoom="6")
    assert r.returncode != 0 and "cannot be used with" in r.stderr


@pytest.mark.parametrize(
    "zoom, args, message",
    [
        ("0..12", [], "outside layer"),
        ("5..2", [], "empty"),
        ("0..1", ["--bbox", "1,2,3"], "4 numbers"),
        ("0..1", ["--format", "tiff"], "unknown format"),
    ],
)
def test_bad_seed_arguments_are_clear_errors(tmp_path, zoom, args, message):
    config, _ = write_config(tmp_path)
    r = run_seed(config, *args, zoom=zoom)
    assert r.returncode != 0
    assert message in r.stderr, r.stderr


def test_seeding_a_memory_store_is_refused(tmp_path):
    config, _ = write_config(tmp_path, store="memory")
    r = run_seed(config)
    assert r.returncode == 1
    assert "in-memory store" in r.stderr
