"""Disk quotas through the real binary: a file, MBTiles or journal store
with `max_size: 2MiB` under a seed job of about 20 MiB of tiles stays
within 10 % of its quota while every tile request is answered; after a
restart, the tiles read last are kept and the others evicted first; the
journal's files shrink as it compacts; usage and evictions are on
/metrics and /admin/stats."""
import http.client
import sqlite3
import threading
import time
import urllib.parse

import pytest

from conftest import s3_bucket, start_server
from test_jobs import call, config_text, report, stop, wait_for

QUOTA = 2 * 1024 * 1024
# Zooms 4..5 of the west half of the world: 128 + 512 tiles, about 20 MiB.
SEED = {"kind": "seed", "layer": "relief", "zoom": "4..5", "bbox": "-180,-85,-0.001,85", "threads": 2}


def write_config(tmp_path, s3, kind):
    store = {
        "file": f"{{ type: file, path: {tmp_path / 'store'}, memory: 0, max_size: 2MiB, quota_sample: 1 }}",
        "mbtiles": f"{{ type: mbtiles, path: {tmp_path / 'store'}, memory: 0, max_size: 2MiB, quota_sample: 1 }}",
        "journal": f"{{ type: journal, path: {tmp_path / 'store'}, segment: 1MiB, memory: 0, max_size: 2MiB, quota_sample: 1 }}",
    }[kind]
    config = tmp_path / "tessera.yaml"
    config.write_text(config_text(tmp_path, s3, store, "quotas"))
    return config, tmp_path / "store"


def stored_bytes(kind, store):
    """The tiles' bytes as the store itself holds them."""
    if kind == "file":
        return sum(p.stat().st_size for p in (store / "relief").rglob("*.png"))
    if kind == "mbtiles":
        total = 0
        for f in store.glob("*.mbtiles"):
            with sqlite3.connect(f"file:{f}?mode=ro", uri=True) as db:
                total += db.execute("SELECT coalesce(sum(length(tile_data)), 0) FROM tiles").fetchone()[0]
        return total
    return None


def journal_files(store):
    return sum(p.stat().st_size for p in store.glob("*.log"))


def get(server, z, x, y):
    """GET a tile: its status and X-Cache."""
    url = urllib.parse.urlsplit(server.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    conn.request("GET", f"/tiles/relief/WebMercatorQuad/{z}/{x}/{y}.png")
    r = conn.getresponse()
    r.read()
    return r.status, r.getheader("X-Cache")


def cache_state(server, z, x, y):
    status, state = get(server, z, x, y)
    assert status == 200, (z, x, y, status)
    return state


def quota_of(server):
    status, stats, _ = call(server, "GET", "/admin/stats")
    assert status == 200, stats
    (store,) = [s for s in stats["stores"] if s["store"] == "disk"]
    return store["quota"], stats


@pytest.mark.parametrize("kind", ["file", "mbtiles", "journal"])
def test_a_store_at_its_quota_stays_within_it_and_keeps_what_was_read_last(kind, s3, tmp_path, tmp_path_factory):
    s3_bucket(s3, "tessera-test")
    config, store = write_config(tmp_path, s3, kind)
    server = start_server(tmp_path_factory, "--config", str(config))
    try:
        status, job, _ = call(server, "POST", "/admin/jobs", SEED)
        assert status == 201, job
        # Requests all along: every one answered, the store at its quota
        # evicting rather than refusing.
        failures, answered, done = [], [0], threading.Event()

        def ask():
            i = 0
            while not done.is_set():
                z, x, y = 3, i % 8, (i // 8) % 8
                status, _ = get(server, z, x, y)
                if status != 200:
                    failures.append((z, x, y, status))
                answered[0] += 1
                i += 1

        asker = threading.Thread(target=ask)
        asker.start()
        try:
            peak = 0
            while (r := report(server, job["id"]))["state"] == "running":
                peak = max(peak, quota_of(server)[0]["used_bytes"])
                time.sleep(0.2)
        finally:
            done.set()
            asker.join(timeout=60)
        assert r["state"] == "done", r
        assert failures == [] and answered[0] > 0, failures
        # Requests' tiles are saved after their answers: wait (with a
        # deadline, never a fixed sleep) until the saves have landed and
        # the count stops moving.
        def settled():
            first = quota_of(server)[0]
            time.sleep(0.3)
            second = quota_of(server)
            return second if first == second[0] else None
        usage, stats = wait_for(settled, "the saves after the answers", timeout=60)
        written = r["tiles_written"]
        assert usage["max_bytes"] == QUOTA
        assert usage["used_bytes"] <= QUOTA * 1.1 and peak <= QUOTA * 1.1, (usage, peak)
        assert usage["evicted_bytes"] >= 8 * QUOTA, usage
        on_disk = stored_bytes(kind, store)
        if on_disk is not None:
            assert on_disk <= QUOTA * 1.1, f"{on_disk} bytes of tiles in the {kind} store"
            assert on_disk == usage["used_bytes"], (on_disk, usage)
        else:
            # The journal: what was evicted is given back by compaction.
            files = journal_files(store)
            assert files < 8 * QUOTA, f"{files} bytes of segments after writing {written} tiles"
        (relief,) = [layer for layer in stats["layers"] if layer["layer"] == "relief"]
        assert sum(z["bytes"] for z in relief["stored"]) == usage["used_bytes"]
        assert relief["metatile_renders"] >= 1 and relief["render_times"]["count"] >= 1
        metrics = call(server, "GET", "/metrics", token=None)[1]
        assert f'tessera_store_quota_bytes{{store="disk"}} {QUOTA}' in metrics
        assert 'tessera_store_evicted_tiles{store="disk"}' in metrics

        # Find five stored tiles and read them (every hit recorded:
        # `quota_sample: 1`), then wait for the hits to reach the index.
        kept = []
        for x in range(16):
            for y in range(32):
                if len(kept) < 5 and cache_state(server, 5, x, y) == "HIT":
                    kept.append((5, x, y))
        assert len(kept) == 5, kept
        for _ in range(8):
            for t in kept:
                assert cache_state(server, *t) == "HIT"
        time.sleep(2.5)
    finally:
        stop(server)

    # After a restart, write half a quota more: tiles not read go first.
    server = start_server(tmp_path_factory, "--config", str(config))
    try:
        before, _ = quota_of(server)
        assert before["used_bytes"] <= QUOTA * 1.1, before
        status, job, _ = call(server, "POST", "/admin/jobs",
                              {"kind": "seed", "layer": "relief", "zoom": "5", "bbox": "0.001,0.001,20,20"})
        assert status == 201, job
        r = wait_for(lambda: (r := report(server, job["id"]))["state"] != "running" and r, "the second seed")
        assert r["state"] == "done" and r["tiles_written"] >= 4, r
        after, _ = quota_of(server)
        assert after["evicted_tiles"] > 0, after
        assert after["used_bytes"] <= QUOTA * 1.1, after
        for t in kept:
            assert cache_state(server, *t) == "HIT", f"{t}, read last before the restart, was evicted"
    finally:
        stop(server)


def seeded_without_quota(config, store, path):
    """Writes `config` without its store's quota to `path` and seeds zooms
    0..4 into the file store with it (about 14 MiB); answers the bytes."""
    import os
    import subprocess
    path.write_text(config.read_text().replace(", max_size: 2MiB, quota_sample: 1", ""))
    seeded = subprocess.run(
        [os.environ["TESSERA_BIN"], "seed", "--config", str(path), "--layer", "relief",
         "--grid", "WebMercatorQuad", "--zoom", "0..4"], capture_output=True, text=True, timeout=600)
    assert seeded.returncode == 0, seeded.stderr
    before = stored_bytes("file", store)
    assert before > 4 * QUOTA
    return before


def test_a_quota_set_on_a_store_that_has_tiles_counts_them_and_evicts_them_first(s3, tmp_path, tmp_path_factory):
    s3_bucket(s3, "tessera-test")
    config, store = write_config(tmp_path, s3, "file")
    # The store filled without a quota.
    before = seeded_without_quota(config, store, tmp_path / "unlimited.yaml")
    assert not (store / ".quota.sqlite").exists()
    # With the quota: indexed at start and brought within it.
    server = start_server(tmp_path_factory, "--config", str(config))
    try:
        usage, _ = quota_of(server)
        on_disk = stored_bytes("file", store)
        assert on_disk == usage["used_bytes"] <= QUOTA, (on_disk, usage)
        assert usage["evicted_bytes"] == before - on_disk, (before, on_disk, usage)
        assert "indexed the store's tiles for its quota" in server.log_text()
    finally:
        stop(server)


def test_a_reload_applies_a_layer_quota_to_a_store_it_keeps(s3, tmp_path, tmp_path_factory):
    s3_bucket(s3, "tessera-test")
    config, store = write_config(tmp_path, s3, "file")
    before = seeded_without_quota(config, store, config)
    server = start_server(tmp_path_factory, "--config", str(config))
    try:
        plain = config.read_text()
        # The store is kept open; the layer's new quota puts one in front of it.
        for size, limit in [("2MiB", QUOTA), ("1MiB", QUOTA // 2)]:
            config.write_text(plain.replace("cache: { store: disk }", f"cache: {{ store: disk, max_size: {size} }}"))
            status, body, _ = call(server, "POST", "/admin/reload")
            assert status == 200, body
            on_disk = stored_bytes("file", store)
            assert 0 < on_disk <= limit, (size, on_disk)
            assert cache_state(server, 0, 0, 0) in ("HIT", "MISS")
        # The second quota was set on the quota the first reload made.
        usage, stats = quota_of(server)
        (relief,) = [layer for layer in stats["layers"] if layer["layer"] == "relief"]
        assert sum(z["bytes"] for z in relief["stored"]) == stored_bytes("file", store) <= QUOTA // 2
        assert usage["evicted_bytes"] >= before - QUOTA // 2, usage
    finally:
        stop(server)
