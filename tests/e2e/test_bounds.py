"""What outside input can make tessera spend, through the real binary:
archives whose directories, metadata or tiles unpack to gigabytes, MBTiles
blobs and metadata values of hundreds of megabytes, vector tiles that
unpack to a gigabyte for a client without gzip, STAC catalogs that link
to devices, FIFOs or themselves, and a mosaic piece with an odd name. Each
is refused with a message that names it, in bounded memory (the peak
resident size of the process is read from the kernel), and the rest keeps
being served."""
import http.server
import json
import os
import sqlite3
import subprocess
import threading
import time
import zlib

import pytest

from conftest import ROOT, http_get as get, serving
from test_archives import directory

RELIEF = ROOT / "data" / "shadedrelief-5400.tif"
MIB = 1 << 20


def gzip_of_zeros(size, byte=b"\0"):
    """`size` bytes of `byte`, gzip-packed without holding them."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = byte * (16 * MIB)
    out = bytearray()
    for _ in range(size // len(chunk)):
        out += packer.compress(chunk)
    return bytes(out + packer.flush())


def peak_kib(pid):
    """The peak resident size of a running process, in KiB."""
    with open(f"/proc/{pid}/status") as f:
        return int(next(line.split()[1] for line in f if line.startswith("VmHWM:")))


def run_check(config):
    """`tessera check config` as a child whose peak resident size the
    kernel reports: (exit code, stderr, peak KiB)."""
    pid = os.fork()
    if pid == 0:
        err = os.open(str(config) + ".stderr", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(err, 2)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.execv(os.environ["TESSERA_BIN"], [os.environ["TESSERA_BIN"], "check", str(config)])
    deadline = time.monotonic() + 120
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.wait4(pid, 0)
            pytest.fail("tessera check did not end within 120 s", pytrace=False)
        time.sleep(0.05)
    code = os.waitstatus_to_exitcode(status)
    return code, open(str(config) + ".stderr").read(), usage.ru_maxrss


def pmtiles_archive(path, leaf=None, metadata=b"{}"):
    """A PMTiles v3 archive of one (one-byte) tile at 0/0/0, its
    directories and metadata gzip-packed (`metadata` given packed when it
    starts as gzip); with `leaf` (packed bytes), the root's one entry is a
    leaf directory of those bytes."""
    if leaf is None:
        root = zlib_gzip(directory([(0, 1, 1, 0)]))
        leaf = b""
    else:
        root = zlib_gzip(directory([(0, 0, len(leaf), 0)]))
    meta = metadata if metadata.startswith(b"\x1f\x8b") else zlib_gzip(metadata)
    data = b"\0"
    sections = [127, len(root), 127 + len(root), len(meta), 127 + len(root) + len(meta), len(leaf),
                127 + len(root) + len(meta) + len(leaf), len(data), 1, 1, 1]
    header = bytearray(b"PMTiles\x03")
    for v in sections:
        header += v.to_bytes(8, "little")
    # clustered, internal compression gzip, tile compression none, PNG,
    # zooms 0-0, the world, centre 0,0 at zoom 0.
    header += bytes([1, 2, 1, 2, 0, 0])
    for v in (-1800000000, -850000000, 1800000000, 850000000):
        header += v.to_bytes(4, "little", signed=True)
    header += bytes([0]) + (0).to_bytes(4, "little") + (0).to_bytes(4, "little")
    assert len(header) == 127
    path.write_bytes(bytes(header) + root + meta + leaf + data)
    return path


def zlib_gzip(data):
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    return packer.compress(data) + packer.flush()


def test_a_pmtiles_leaf_directory_that_unpacks_to_512_mib_is_a_502_in_bounded_memory(tmp_path, tmp_path_factory):
    bomb = gzip_of_zeros(512 * MIB)
    assert len(bomb) < 1 * MIB
    path = pmtiles_archive(tmp_path / "leafbomb.pmtiles", leaf=bomb)
    with serving(tmp_path_factory, path) as server:
        before = peak_kib(server.proc.pid)
        status, _, body = get(server, "/tiles/leafbomb/WebMercatorQuad/0/0/0.png")
        assert status == 502, (status, body[:300])
        assert "unpacks to more than 8388608 bytes" in server.log_text()
        grown = peak_kib(server.proc.pid) - before
        # The cap (8 MiB), not the bomb (512 MiB).
        assert grown < 64 * 1024, f"the peak grew by {grown} KiB"
        assert get(server, "/health")[0] == 200


def test_pmtiles_metadata_that_unpacks_to_a_gigabyte_is_refused_at_start(tmp_path):
    path = pmtiles_archive(tmp_path / "metabomb.pmtiles", metadata=gzip_of_zeros(1024 * MIB, b" "))
    config = tmp_path / "tessera.yaml"
    config.write_text(f"layers:\n  - name: m\n    source: {{ type: pmtiles, path: {path} }}\n")
    code, stderr, peak = run_check(config)
    assert code != 0 and "unpacks to more than 16777216 bytes" in stderr, stderr[-2000:]
    assert peak < 256 * 1024, f"tessera check peaked at {peak} KiB"


def mbtiles(path, tiles, metadata):
    """An MBTiles database of `tiles` ((z, x, y) -> an SQL expression of the
    blob) and `metadata` (name -> value)."""
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE metadata (name TEXT, value TEXT)")
    db.execute("CREATE TABLE tiles (zoom_level INTEGER, tile_column INTEGER, tile_row INTEGER, tile_data BLOB)")
    db.executemany("INSERT INTO metadata VALUES (?, ?)", metadata.items())
    for (z, x, y), blob in tiles.items():
        row = (1 << z) - 1 - y
        if isinstance(blob, str):
            db.execute(f"INSERT INTO tiles VALUES (?, ?, ?, {blob})", (z, x, row))
        else:
            db.execute("INSERT INTO tiles VALUES (?, ?, ?, ?)", (z, x, row, blob))
    db.commit()
    db.close()
    return path


def test_an_mbtiles_blob_of_256_mib_is_a_502_without_reading_it(tmp_path, tmp_path_factory):
    path = mbtiles(tmp_path / "blob.mbtiles", {(0, 0, 0): "zeroblob(268435456)", (1, 0, 0): zlib_gzip(b"")},
                   {"name": "blob", "format": "pbf", "minzoom": "0", "maxzoom": "1"})
    with serving(tmp_path_factory, path) as server:
        before = peak_kib(server.proc.pid)
        status, _, body = get(server, "/tiles/blob/WebMercatorQuad/0/0/0.mvt", {"Accept-Encoding": "gzip"})
        assert status == 502, (status, body[:300])
        assert "a tile of 268435456 bytes, more than 67108864" in server.log_text()
        grown = peak_kib(server.proc.pid) - before
        assert grown < 64 * 1024, f"the peak grew by {grown} KiB"


def test_mbtiles_metadata_values_are_capped_and_quoted_short(tmp_path):
    huge = mbtiles(tmp_path / "huge.mbtiles", {}, {"name": "x", "format": "png", "json": "x" * (20 * MIB)})
    config = tmp_path / "huge.yaml"
    config.write_text(f"layers:\n  - name: h\n    source: {{ type: mbtiles, path: {huge} }}\n")
    code, stderr, peak = run_check(config)
    assert code != 0 and '"json" holds 20971520 bytes, more than 16777216' in stderr, stderr[-2000:]
    assert peak < 256 * 1024, f"tessera check peaked at {peak} KiB"
    # A broken value of 10 MB is named by its start and its length.
    broken = mbtiles(tmp_path / "broken.mbtiles", {}, {"name": "x", "format": "png", "bounds": "1," * (5 * MIB)})
    config = tmp_path / "broken.yaml"
    config.write_text(f"layers:\n  - name: b\n    source: {{ type: mbtiles, path: {broken} }}\n")
    code, stderr, _ = run_check(config)
    assert code != 0 and "(10485760 bytes) is not 4 numbers" in stderr, stderr[-2000:]
    assert len(stderr) < 4000, f"{len(stderr)} bytes of message"


def test_a_vector_tile_that_unpacks_to_a_gigabyte_is_refused_to_clients_without_gzip(tmp_path, tmp_path_factory):
    bomb = gzip_of_zeros(1024 * MIB)
    path = mbtiles(tmp_path / "mvt.mbtiles", {(0, 0, 0): bomb},
                   {"name": "mvt", "format": "pbf", "minzoom": "0", "maxzoom": "0"})
    with serving(tmp_path_factory, path) as server:
        status, headers, body = get(server, "/tiles/mvt/WebMercatorQuad/0/0/0.mvt", {"Accept-Encoding": "gzip"})
        assert status == 200 and headers["Content-Encoding"] == "gzip" and body == bomb
        before = peak_kib(server.proc.pid)
        status, _, body = get(server, "/tiles/mvt/WebMercatorQuad/0/0/0.mvt", {"Accept-Encoding": "identity"})
        assert status == 406 and b"Accept-Encoding: gzip" in body, (status, body[:300])
        grown = peak_kib(server.proc.pid) - before
        # The cap (64 MiB), not the gigabyte.
        assert grown < 160 * 1024, f"the peak grew by {grown} KiB"


def stac_config(tmp_path, root):
    config = tmp_path / "stac.yaml"
    config.write_text(f"layers:\n  - name: s\n    source: {{ type: mosaic, stac: {root} }}\n")
    return config


@pytest.mark.parametrize("target", ["/dev/zero", "/dev/urandom", "fifo"])
def test_stac_links_to_devices_and_fifos_are_refused_at_once(tmp_path, target):
    if target == "fifo":
        target = str(tmp_path / "fifo")
        os.mkfifo(target)
    catalog = tmp_path / "catalog.json"
    catalog.write_text(json.dumps({"type": "Catalog", "id": "c", "links": [{"rel": "child", "href": target}]}))
    for root in (catalog, target):
        started = time.monotonic()
        code, stderr, peak = run_check(stac_config(tmp_path, root))
        assert code != 0 and f"{target} is not a regular file" in stderr, stderr[-2000:]
        assert time.monotonic() - started < 60 and peak < 256 * 1024, peak


def test_a_stac_catalog_linking_to_itself_a_thousand_times_is_read_once(tmp_path):
    item = {"type": "Feature", "stac_version": "1.0.0", "id": "relief", "bbox": [-180, -90, 180, 90],
            "geometry": None, "properties": {"datetime": "2024-01-01T00:00:00Z"},
            "assets": {"data": {"href": str(RELIEF), "type": "image/tiff; application=geotiff"}}}
    (tmp_path / "item.json").write_text(json.dumps(item))
    links = [{"rel": "item", "href": "item.json"}]
    links += [{"rel": "child", "href": "catalog.json" if i % 2 else "./catalog.json"} for i in range(1000)]
    catalog = tmp_path / "catalog.json"
    catalog.write_text(json.dumps({"type": "Catalog", "id": "c", "links": links}))
    started = time.monotonic()
    code, stderr, peak = run_check(stac_config(tmp_path, catalog))
    assert code == 0, stderr[-2000:]
    assert time.monotonic() - started < 60 and peak < 512 * 1024, peak


def test_an_oddly_named_mosaic_piece_is_left_out_with_a_warning(tmp_path, tmp_path_factory):
    series = tmp_path / "series"
    series.mkdir()
    for name in ("ndvi_2024-01-01.tif", "ndvi_2024-02-01.tif", "ndvi_2024-13-45.tif"):
        subprocess.run(["gdal_translate", "-q", "-outsize", "64", "32", str(RELIEF), str(series / name)],
                       check=True, timeout=120)
    config = tmp_path / "tessera.yaml"
    config.write_text(f"""
layers:
  - name: ndvi
    source: {{ type: mosaic, dir: {series}, glob: '*.tif' }}
    dimensions:
      time: {{ from_path: 'ndvi_(\\d{{4}}-\\d{{2}}-\\d{{2}})\\.tif' }}
""")
    code, stderr, _ = run_check(config)
    assert code == 0, stderr[-2000:]
    assert "2024-13-45" in stderr and "left out" in stderr, stderr[-2000:]
    with serving(tmp_path_factory, "--config", config) as server:
        caps = get(server, "/wmts/1.0.0/WMTSCapabilities.xml")[2].decode()
        assert "2024-01-01" in caps and "2024-02-01" in caps and "2024-13-45" not in caps


class RemoteArchive(http.server.BaseHTTPRequestHandler):
    """Range requests of `server.body` (bytes), or of endless zeros when it
    is None; the ETag is `server.etag()`."""

    def do_GET(self):
        start, _, end = self.headers["Range"].removeprefix("bytes=").partition("-")
        start, end = int(start), int(end)
        if self.server.body is None:
            data, total = b"\0" * (end - start + 1), "*"
        else:
            data, total = self.server.body[start:end + 1], str(len(self.server.body))
        self.server.sent += len(data)
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {start}-{start + len(data) - 1}/{total}")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("ETag", self.server.etag())
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def remote_archive(body, etag):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), RemoteArchive)
    server.body, server.etag, server.sent = body, etag, 0
    server.url = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_a_remote_mbtiles_that_never_ends_is_copied_up_to_its_cap_and_nothing_is_left(tmp_path):
    web = remote_archive(None, lambda: '"v1"')
    copies = tmp_path / "copies"
    config = tmp_path / "tessera.yaml"
    config.write_text(f"""
gdal: {{ allowed_private_hosts: ["{web.url.removeprefix('http://')}"] }}
layers:
  - name: endless
    source: {{ type: mbtiles, path: "{web.url}/endless.mbtiles", download_dir: {copies},
              max_copy_bytes: 67108864 }}
""")
    try:
        code, stderr, _ = run_check(config)
        assert code != 0 and "longer than max_copy_bytes (67108864 bytes)" in stderr, stderr[-2000:]
        assert web.sent <= 80 * MIB, web.sent
        assert list(copies.iterdir()) == [], "a failed copy was left behind"
    finally:
        web.shutdown()


def small_mbtiles(path):
    """The relief at 512x256 as an MBTiles written by GDAL (zooms 0-1)."""
    subprocess.run(["gdal_translate", "-q", "-of", "MBTiles", "-outsize", "512", "256", str(RELIEF), str(path)],
                   check=True, timeout=120)
    return path


def slow_mbtiles(path):
    """`small_mbtiles` whose `tiles` is a view that counts to 40 million
    first at every query (seconds)."""
    small_mbtiles(path)
    db = sqlite3.connect(path)
    db.executescript("""
        ALTER TABLE tiles RENAME TO tiles_stored;
        CREATE VIEW tiles AS SELECT * FROM tiles_stored WHERE (WITH RECURSIVE c(x) AS
            (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 40000000) SELECT count(*) FROM c) > 0;
    """)
    db.commit()
    db.close()
    return path


def test_a_remote_mbtiles_whose_etag_flaps_is_not_reloaded_and_its_old_copies_go(tmp_path, tmp_path_factory):
    archive = small_mbtiles(tmp_path / "small.mbtiles")
    state = {"frozen": None}
    web = remote_archive(archive.read_bytes(),
                         lambda: state["frozen"] or f'"{time.monotonic_ns() // 500_000_000}"')
    copies = tmp_path / "copies"
    config = tmp_path / "tessera.yaml"
    config.write_text(f"""
gdal: {{ allowed_private_hosts: ["{web.url.removeprefix('http://')}"] }}
layers:
  - name: flapping
    source: {{ type: mbtiles, path: "{web.url}/small.mbtiles", download_dir: {copies},
              check_secs: 1, settle_secs: 4 }}
""")
    try:
        with serving(tmp_path_factory, "--config", str(config)) as server:
            # A new ETag every half second, looked at every second: no
            # version holds for 4 s, nothing is reloaded or copied again.
            time.sleep(8)
            log = server.log_text()
            assert "reloading the configuration" not in log, log[-3000:]
            assert len(list(copies.glob("*.mbtiles"))) == 1
            # A version that holds is taken (once), and its copy replaces
            # the old one.
            state["frozen"] = '"v2"'
            deadline = time.monotonic() + 30
            while "reloading the configuration" not in server.log_text():
                assert time.monotonic() < deadline, "the settled version was not taken"
                time.sleep(0.2)
            deadline = time.monotonic() + 30
            while len(kept := list(copies.glob("*.mbtiles*"))) != 1 or "removed the copy" not in server.log_text():
                assert time.monotonic() < deadline, kept
                time.sleep(0.2)
            assert server.log_text().count("reloading the configuration") == 1
            assert get(server, "/tiles/flapping/WebMercatorQuad/0/0/0.png")[0] == 200
    finally:
        web.shutdown()


def test_a_slow_local_mbtiles_never_holds_the_thread_other_requests_need(tmp_path, tmp_path_factory):
    archive = slow_mbtiles(tmp_path / "slow.mbtiles")
    # One core: one connection thread and one runtime worker, which a read
    # on either would hold.
    taskset = "/usr/bin/taskset"
    assert os.access(taskset, os.X_OK), "taskset (util-linux) is missing"
    wrapper = tmp_path / "tessera-one-core"
    wrapper.write_text(f"#!/bin/sh\nexec {taskset} -c 0 {os.environ['TESSERA_BIN']} \"$@\"\n")
    wrapper.chmod(0o755)
    real, os.environ["TESSERA_BIN"] = os.environ["TESSERA_BIN"], str(wrapper)
    try:
        with serving(tmp_path_factory, archive) as server:
            slow = {}

            def read_slowly():
                slow["answer"] = get(server, "/tiles/slow/WebMercatorQuad/1/0/0.png", timeout=300)
                slow["at"] = time.monotonic()

            reader = threading.Thread(target=read_slowly)
            reader.start()
            time.sleep(2)
            assert reader.is_alive(), "the slow read ended before the test could look"
            status, _, _ = get(server, "/health", timeout=300)
            health_at = time.monotonic()
            assert status == 200
            reader.join(timeout=300)
            assert slow["answer"][0] == 200
            # /health was answered while the archive was still being read
            # (the read takes seconds), not after it.
            assert slow["at"] - health_at > 1.0, "/health waited for the slow archive read"
    finally:
        os.environ["TESSERA_BIN"] = real
