"""Caching that cannot serve the wrong picture: a changed source, style or
encoding is never answered with tiles of the old one (after a reload, after
a restart, across nodes sharing a store); stored tiles expire by age
(`cache.max_stored_age`) or by date (`cache.refresh_before`), when served and
when seeded; tiles carry `Last-Modified` and honour `If-Modified-Since`."""
import http.client
import os
import shutil
import signal
import subprocess
import time
import urllib.parse
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime, parsedate_to_datetime

from conftest import ROOT, require_tool, serving

TILE = "/tiles/relief/WebMercatorQuad/2/2/1.png"
TILE_FILE = ("relief", "WebMercatorQuad", "2", "2", "1.png")


def write_config(path, cache_dir, source=None, style="{ type: rgb }", cache_extra="", png="fast", store_extra=""):
    source = source or ROOT / "data" / "shadedrelief-5400.tif"
    path.write_text(f"""
encoding: {{ png_compression: {png} }}
stores:
  disk: {{ type: file, path: {cache_dir}{store_extra} }}
layers:
  - name: relief
    source: {{ path: {source} }}
    style: {style}
    grids: [WebMercatorQuad]
    max_zoom: 6
    cache: {{ store: disk{cache_extra} }}
""")


def get(server, path, headers=None):
    """(status, headers, body) of a GET."""
    url = urllib.parse.urlsplit(server.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=120)
    conn.request("GET", path, headers=headers or {})
    r = conn.getresponse()
    body = r.read()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, body


def tile(server):
    status, headers, body = get(server, TILE)
    assert status == 200, body
    return headers["x-cache"], body


def reload(server):
    """SIGHUP, then wait until the server logs the reload."""
    before = server.log_text().count("configuration reloaded")
    server.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 60
    while server.log_text().count("configuration reloaded") == before:
        assert "reload refused" not in server.log_text(), server.log_text()
        assert time.monotonic() < deadline, server.log_text()
        time.sleep(0.1)


BRIGHT = "{ type: rgb, rescale: [0, 128] }"


def test_a_style_changed_by_reload_is_never_served_from_the_old_tiles(tmp_path, tmp_path_factory):
    config, cache = tmp_path / "tessera.yaml", tmp_path / "tiles"
    write_config(config, cache)
    with serving(tmp_path_factory, "--config", str(config)) as server:
        assert tile(server)[0] == "MISS"
        status, plain = tile(server)
        assert status == "HIT"
        write_config(config, cache, style=BRIGHT)
        reload(server)
        status, bright = tile(server)
        assert status == "MISS", "a tile of the old style was served as a hit"
        assert bright != plain
        assert tile(server) == ("HIT", bright)
        # Back to the first style: its tiles are right again and still kept.
        write_config(config, cache)
        reload(server)
        assert tile(server) == ("HIT", plain)
        # The encoder settings determine the bytes too.
        write_config(config, cache, png="high")
        reload(server)
        status, smaller = tile(server)
        assert status == "MISS"
        assert tile(server) == ("HIT", smaller)
    # The plain key keeps the first fingerprint; the others got their own keys.
    keys = sorted(p.name for p in (cache / ".fingerprints").iterdir())
    assert keys[0] == "relief" and len(keys) == 3 and all(k.startswith("relief@") for k in keys[1:]), keys


def test_a_source_file_replaced_in_place_is_rendered_again_after_a_restart(tmp_path, tmp_path_factory):
    gdal_translate = require_tool("gdal_translate")
    source = tmp_path / "relief.tif"
    shutil.copy(ROOT / "data" / "shadedrelief-5400.tif", source)
    config, cache = tmp_path / "tessera.yaml", tmp_path / "tiles"
    write_config(config, cache, source=source)
    with serving(tmp_path_factory, "--config", str(config)) as server:
        assert tile(server)[0] == "MISS"
        status, before = tile(server)
        assert status == "HIT"
    # The same path now holds other pixels (inverted).
    inverted = tmp_path / "inverted.tif"
    subprocess.run([gdal_translate, "-q", "-scale", "0", "255", "255", "0", str(source), str(inverted)],
                   check=True)
    os.replace(inverted, source)
    with serving(tmp_path_factory, "--config", str(config)) as server:
        status, after = tile(server)
        assert status == "MISS", "a tile of the replaced file was served as a hit"
        assert after != before
        assert tile(server) == ("HIT", after)


def test_nodes_sharing_a_store_agree_on_whose_tiles_are_whose(tmp_path, tmp_path_factory):
    cache = tmp_path / "tiles"
    plain, bright = tmp_path / "plain.yaml", tmp_path / "bright.yaml"
    write_config(plain, cache)
    write_config(bright, cache, style=BRIGHT)
    with serving(tmp_path_factory, "--config", str(plain)) as a, \
            serving(tmp_path_factory, "--config", str(bright)) as b:
        assert tile(a)[0] == "MISS"
        _, a_bytes = tile(a)
        status, b_bytes = tile(b)
        assert status == "MISS", "a node with another style was served the first node's tile"
        assert b_bytes != a_bytes
        assert tile(a) == ("HIT", a_bytes)
        assert tile(b) == ("HIT", b_bytes)
        # A third node with the first node's config finds its tiles.
        with serving(tmp_path_factory, "--config", str(plain)) as c:
            assert tile(c) == ("HIT", a_bytes)


def test_tiles_older_than_max_stored_age_are_rendered_again(tmp_path, tmp_path_factory):
    config, cache = tmp_path / "tessera.yaml", tmp_path / "tiles"
    # No memory LRU in front: the file's time is the only store time.
    write_config(config, cache, cache_extra=", max_stored_age: 1h", store_extra=", memory: 0")
    stored = cache.joinpath(*TILE_FILE)
    with serving(tmp_path_factory, "--config", str(config)) as server:
        assert tile(server)[0] == "MISS"
        assert tile(server)[0] == "HIT"
        # The tile was stored two hours ago.
        two_hours_ago = time.time() - 7200
        os.utime(stored, (two_hours_ago, two_hours_ago))
        assert tile(server)[0] == "MISS"
        # The answer goes out before the tile is saved (on the encode pool).
        deadline = time.monotonic() + 60
        while stored.stat().st_mtime < two_hours_ago + 3600:
            assert time.monotonic() < deadline, "the stale tile was not stored again"
            time.sleep(0.05)
        assert tile(server)[0] == "HIT"


def test_refresh_before_renders_tiles_stored_before_it_when_served_and_when_seeded(tmp_path, tmp_path_factory):
    config, cache = tmp_path / "tessera.yaml", tmp_path / "tiles"
    write_config(config, cache)
    seed = [os.environ["TESSERA_BIN"], "seed", "--config", str(config), "--layer", "relief",
            "--grid", "WebMercatorQuad", "--zoom", "0..2"]
    first = subprocess.run(seed, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr
    again = subprocess.run(seed, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "(0 rendered" in again.stdout, again.stdout
    # Every tile stored so far is older than the refresh date.
    time.sleep(1.1)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    time.sleep(1.1)
    write_config(config, cache, cache_extra=f", refresh_before: '{stamp}'")
    refreshed = subprocess.run(seed, capture_output=True, text=True, timeout=600)
    assert refreshed.returncode == 0, refreshed.stderr
    assert "(0 rendered" not in refreshed.stdout, refreshed.stdout
    settled = subprocess.run(seed, capture_output=True, text=True, timeout=600)
    assert "(0 rendered" in settled.stdout, settled.stdout
    # When served: stale until stored again after the date.
    write_config(config, cache, cache_extra=", refresh_before: '2999-01-01T00:00:00Z'")
    with serving(tmp_path_factory, "--config", str(config)) as server:
        assert tile(server)[0] == "MISS"
        assert tile(server)[0] == "MISS"


def test_last_modified_and_if_modified_since(tmp_path, tmp_path_factory):
    config, cache = tmp_path / "tessera.yaml", tmp_path / "tiles"
    write_config(config, cache)
    with serving(tmp_path_factory, "--config", str(config)) as server:
        status, miss, _ = get(server, TILE)
        assert status == 200 and "last-modified" in miss
        status, hit, body = get(server, TILE)
        assert status == 200 and hit["x-cache"] == "HIT"
        stored = datetime.fromtimestamp(cache.joinpath(*TILE_FILE).stat().st_mtime, timezone.utc)
        modified = parsedate_to_datetime(hit["last-modified"])
        assert abs((modified - stored).total_seconds()) < 1, (modified, stored)
        # Not modified since then: 304 with no body, validators kept.
        status, h, b = get(server, TILE, {"If-Modified-Since": hit["last-modified"]})
        assert (status, b) == (304, b"")
        assert h["etag"] == hit["etag"] and h["last-modified"] == hit["last-modified"]
        # Modified since an hour before: the tile.
        earlier = format_datetime(modified - timedelta(hours=1), usegmt=True)
        status, _, b = get(server, TILE, {"If-Modified-Since": earlier})
        assert (status, b) == (200, body)
        # If-None-Match wins over If-Modified-Since (RFC 9110, 13.2.2).
        status, _, b = get(server, TILE, {"If-None-Match": '"0"', "If-Modified-Since": hit["last-modified"]})
        assert (status, b) == (200, body)
        # A date that is no HTTP date is ignored.
        status, _, b = get(server, TILE, {"If-Modified-Since": "yesterday"})
        assert (status, b) == (200, body)
