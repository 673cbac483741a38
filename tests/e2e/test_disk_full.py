"""A cache disk that fills while serving, or is read-only: tiles are still answered, each
metatile is rendered once (the tiles that could not be saved are kept in
memory), the store is reported degraded in /ready and the metrics, and the
log gets a few warnings, not one per tile. The disk is a small tmpfs mounted
for the test (root is needed, as in CI)."""
import contextlib
import os
import re
import subprocess
import time
import urllib.request

from conftest import ROOT, fetch, serving


@contextlib.contextmanager
def tmpfs(path, size):
    path.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                       capture_output=True, text=True)
    assert r.returncode == 0, f"cannot mount a tmpfs (this test needs root): {r.stderr}"
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def test_a_full_cache_disk_degrades_the_store_without_rendering_twice_or_flooding_the_log(tmp_path_factory):
    base = tmp_path_factory.mktemp("full")
    with tmpfs(base / "disk", "160k") as disk:
        config = base / "tessera.yaml"
        config.write_text(f"""
stores:
  disk: {{ type: file, path: {disk}/cache, memory: 0 }}
layers:
  - name: relief
    source: {{ path: {ROOT}/data/shadedrelief-5400.tif }}
    grids: [WebMercatorQuad]
    cache: {{ store: disk }}
""")
        with serving(tmp_path_factory, "--config", str(config)) as server:
            metatiles = set()
            for mx in range(4):
                for my in range(2):
                    metatiles.add((mx, my))
                    for dx in range(4):
                        for dy in range(4):
                            x, y = mx * 4 + dx, 8 + my * 4 + dy
                            status, body = fetch(server, f"/tiles/relief/WebMercatorQuad/5/{x}/{y}.png")
                            assert status == 200 and body.startswith(b"\x89PNG"), (x, y, status)
            _, metrics = fetch(server, "/metrics")
            text = metrics.decode()
            renders = re.search(r'tessera_metatile_renders_total\{layer="relief"\} (\d+)', text)
            assert renders and int(renders.group(1)) == len(metatiles), text[:2000]
            assert re.search(r'tessera_store_degraded\{store="[^"]*"\} 1', text), text[-1500:]
            status, body = fetch(server, "/ready")
            assert status == 503 and b"writes fail" in body, body
            status, _ = fetch(server, "/health")
            assert status == 200
        log = server.log_text()
        warnings = len(re.findall(r"saving a (tile|metatile) failed", log))
        assert 1 <= warnings <= 3, f"{warnings} warnings about failed saves:\n{log[-3000:]}"


def test_an_mbtiles_store_on_a_read_only_file_system_serves_what_it_holds(tmp_path_factory):
    base = tmp_path_factory.mktemp("ro")
    with tmpfs(base / "disk", "16m") as disk:
        config = base / "tessera.yaml"
        config.write_text(f"""
stores:
  archive: {{ type: mbtiles, path: {disk}/mbtiles, memory: 0 }}
layers:
  - name: relief
    source: {{ path: {ROOT}/data/shadedrelief-5400.tif }}
    grids: [WebMercatorQuad]
    cache: {{ store: archive }}
""")
        seeded = subprocess.run([os.environ["TESSERA_BIN"], "seed", "--config", str(config), "--layer", "relief",
                                 "--zoom", "0..2"], capture_output=True, text=True, timeout=300)
        assert seeded.returncode == 0, seeded.stderr
        r = subprocess.run(["mount", "-o", "remount,ro", str(disk)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        with serving(tmp_path_factory, "--config", str(config)) as server:
            for z, x, y in [(0, 0, 0), (1, 1, 0), (2, 3, 1)]:
                with urllib.request.urlopen(f"{server.url}/tiles/relief/WebMercatorQuad/{z}/{x}/{y}.png") as resp:
                    assert resp.status == 200 and resp.headers["X-Cache"] == "HIT", (z, x, y)
            _, metrics = fetch(server, "/metrics")
            assert not re.search(r'tessera_metatile_renders_total\{layer="relief"\} [1-9]', metrics.decode()), \
                "nothing was rendered"
            # A tile it does not hold is rendered and answered, not stored.
            status, _ = fetch(server, "/tiles/relief/WebMercatorQuad/3/1/1.png")
            assert status == 200
            # The save fails on the pool after the answer: /ready says so
            # once it has.
            deadline = time.monotonic() + 30
            while True:
                status, body = fetch(server, "/ready")
                if status == 503 or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            assert status == 503 and b"writes fail" in body, body
        log = server.log_text()
        assert log.count("serving its tiles read-only") == 1, log[-2000:]
