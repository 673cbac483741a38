"""Admin jobs (`/admin/jobs`) through the real binary: a seed job reports
its progress and stores every tile; killed with SIGKILL half-way it goes
on after a restart without writing again what it had done; a cancel stops
it; and `tessera seed --rate` holds its rate."""
import http.client
import json
import os
import re
import signal
import subprocess
import time
import urllib.parse

from conftest import ROOT, s3_bucket, serving, start_server

TOKEN = "jobs-token-0123456789"
# relief at zoom 0..4: 1+4+16+64+256 tiles in 1+1+1+4+16 metatiles.
TILES_0_4 = 341
# and zoom 0..5: 1024 more in 64 metatiles.
TILES_0_5 = 1365


def config_text(tmp_path, s3, store, prefix):
    """A configuration: the relief layer (zooms 0-8) cached in `store` (a
    YAML flow mapping), the admin API on with its sources under `prefix`."""
    return f"""
stores:
  disk: {store}
admin:
  token: {TOKEN}
  sources_url: s3://tessera-test/{prefix}
  sources_file: {tmp_path / 'sources.json'}
  jobs_dir: {tmp_path / 'jobs'}
  options: {{ endpoint: '{s3['endpoint']}', access_key_id: {s3['key']}, secret_access_key: {s3['secret']}, region: us-east-1, allow_http: true }}
layers:
  - name: relief
    source: {{ path: {ROOT}/data/shadedrelief-5400.tif, resampling: bilinear }}
    grids: [WebMercatorQuad]
    max_zoom: 8
    cache: {{ store: disk }}
"""


def write_config(tmp_path, s3):
    cache = tmp_path / "cache"
    config = tmp_path / "tessera.yaml"
    config.write_text(config_text(tmp_path, s3, f"{{ type: file, path: {cache}, memory: 0 }}", "jobs"))
    return config, cache


def call(server, method, path, body=None, token=TOKEN):
    url = urllib.parse.urlsplit(server.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    data = None
    if body is not None:
        data = json.dumps(body)
        headers["Content-Type"] = "application/json"
    conn.request(method, path, body=data, headers=headers)
    r = conn.getresponse()
    text = r.read().decode()
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = text
    return r.status, parsed, r.getheader("Location")


def report(server, job_id):
    status, body, _ = call(server, "GET", f"/admin/jobs/{job_id}")
    assert status == 200, body
    return body


def wait_for(condition, what, timeout=300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def tile_files(cache):
    root = cache / "relief" / "WebMercatorQuad"
    return sorted(root.rglob("*.png")) if root.exists() else []


def stop(server):
    server.proc.terminate()
    server.proc.wait(timeout=20)


def test_a_seed_job_reports_its_progress_and_stores_every_tile(s3, tmp_path, tmp_path_factory):
    s3_bucket(s3, "tessera-test")
    config, cache = write_config(tmp_path, s3)
    server = start_server(tmp_path_factory, "--config", str(config))
    try:
        # The admin token is required; a bad spec is refused with why.
        assert call(server, "GET", "/admin/jobs", token=None)[0] == 401
        assert call(server, "GET", "/admin/jobs", token="wrong-token-0123456789")[0] == 401
        status, body, _ = call(server, "POST", "/admin/jobs", {"kind": "seed", "layer": "nope", "zoom": "0..2"})
        assert status == 400 and "unknown layer" in body, body
        status, body, _ = call(server, "POST", "/admin/jobs", {"kind": "seed", "layer": "relief", "zooms": "0..2"})
        assert status == 400 and "zooms" in body, body
        status, body, _ = call(server, "POST", "/admin/jobs",
                               {"kind": "seed", "layer": "relief", "zoom": "0..2", "rate": -1})
        assert status == 400 and "rate" in body, body
        assert call(server, "GET", "/admin/jobs/nothing-here")[0] == 404

        status, job, location = call(server, "POST", "/admin/jobs",
                                     {"kind": "seed", "layer": "relief", "zoom": "0..4", "threads": 2})
        assert status == 201, job
        assert location == f"/admin/jobs/{job['id']}"
        assert job["state"] == "running" and job["kind"] == "seed" and job["layer"] == "relief"
        done = wait_for(lambda: (r := report(server, job["id"]))["state"] != "running" and r, "the job to end")
        assert done["state"] == "done", done
        assert done["tiles_planned"] == TILES_0_4
        assert done["tiles_done"] == TILES_0_4
        assert done["tiles_written"] == TILES_0_4
        assert done["errors"] == []
        assert done["eta_seconds"] is None and done["tiles_per_second"] > 0
        assert len(tile_files(cache)) == TILES_0_4
        # Statistics: the store (no quota) counted by zoom, the renders.
        status, stats, _ = call(server, "GET", "/admin/stats")
        assert status == 200, stats
        (relief,) = [layer for layer in stats["layers"] if layer["layer"] == "relief"]
        assert [(z["z"], z["tiles"]) for z in relief["stored"]] == [(0, 1), (1, 4), (2, 16), (3, 64), (4, 256)]
        assert sum(z["bytes"] for z in relief["stored"]) == sum(f.stat().st_size for f in tile_files(cache))
        assert relief["metatile_renders"] == 1 + 1 + 1 + 4 + 16
        assert relief["render_times"]["count"] >= 23 and relief["render_times"]["p50_ms"] > 0
        assert stats["stores"] == []
        status, listed, _ = call(server, "GET", "/admin/jobs")
        assert status == 200 and [j["id"] for j in listed] == [job["id"]]
        assert listed[0]["spec"]["zoom"] == "0..4"

        # A polygon plans only the metatiles it touches.
        triangle = {"type": "Polygon", "coordinates": [[[5, 45], [11, 45], [8, 48], [5, 45]]]}
        status, shaped, _ = call(server, "POST", "/admin/jobs",
                                 {"kind": "seed", "layer": "relief", "zoom": "5", "polygon": triangle})
        assert status == 201, shaped
        shaped = wait_for(lambda: (r := report(server, shaped["id"]))["state"] != "running" and r, "the polygon")
        assert shaped["state"] == "done" and shaped["tiles_planned"] == 16, shaped
        status, both, _ = call(server, "POST", "/admin/jobs",
                               {"kind": "seed", "layer": "relief", "zoom": "5", "polygon": triangle, "bbox": "5,45,11,48"})
        assert status == 400 and "not both" in both, both
        status, body, _ = call(server, "DELETE", f"/admin/jobs/{shaped['id']}")
        assert status == 202 and body["state"] == "done", body

        # A reseed renders every tile again; a truncate removes them.
        status, again, _ = call(server, "POST", "/admin/jobs", {"kind": "reseed", "layer": "relief", "zoom": "3"})
        assert status == 201, again
        again = wait_for(lambda: (r := report(server, again["id"]))["state"] != "running" and r, "the reseed")
        assert (again["state"], again["tiles_written"]) == ("done", 64), again
        status, cut, _ = call(server, "POST", "/admin/jobs", {"kind": "truncate", "layer": "relief", "zoom": "4"})
        assert status == 201, cut
        cut = wait_for(lambda: (r := report(server, cut["id"]))["state"] != "running" and r, "the truncate")
        assert cut["state"] == "done" and cut["objects_removed"] >= 1, cut
        assert len(tile_files(cache)) == TILES_0_4 - 256 + 16

        # The page is served with the admin API on (the data needs the token).
        status, page, _ = call(server, "GET", "/admin", token=None)
        assert status == 200 and "/admin/jobs" in page
    finally:
        stop(server)
    # Jobs that ended are listed after a restart, as they ended.
    server = start_server(tmp_path_factory, "--config", str(config))
    try:
        status, listed, _ = call(server, "GET", "/admin/jobs")
        assert status == 200
        assert [(j["kind"], j["state"]) for j in listed] == [
            ("seed", "done"), ("seed", "done"), ("reseed", "done"), ("truncate", "done")]
    finally:
        stop(server)


def test_a_seed_job_killed_with_sigkill_resumes_after_a_restart_without_writing_twice(s3, tmp_path, tmp_path_factory):
    s3_bucket(s3, "tessera-test")
    config, cache = write_config(tmp_path, s3)
    server = start_server(tmp_path_factory, "--config", str(config))
    killed = False
    try:
        # Slowed down so that the kill lands half-way.
        status, job, _ = call(server, "POST", "/admin/jobs",
                              {"kind": "seed", "layer": "relief", "zoom": "0..5", "threads": 2, "rate": 150})
        assert status == 201, job
        before = wait_for(lambda: (r := report(server, job["id"]))["tiles_done"] >= 400 and r, "400 tiles done")
        assert before["state"] == "running", before
        server.proc.send_signal(signal.SIGKILL)
        server.proc.wait(timeout=20)
        killed = True
    finally:
        if not killed:
            stop(server)
    on_disk = len(tile_files(cache))
    assert before["tiles_done"] <= on_disk < TILES_0_5, (before, on_disk)
    server = start_server(tmp_path_factory, "--config", str(config))
    try:
        resumed = report(server, job["id"])
        assert resumed["resumed"] is True, resumed
        done = wait_for(lambda: (r := report(server, job["id"]))["state"] != "running" and r, "the resumed job")
        assert done["state"] == "done", done
        assert done["tiles_done"] == done["tiles_planned"] == TILES_0_5
        # What was counted done before the kill was stored: not written again.
        assert done["tiles_written"] <= TILES_0_5 - before["tiles_done"], (before, done)
        print(f"killed at {before['tiles_done']} tiles done ({on_disk} on disk); "
              f"the resumed job wrote {done['tiles_written']}")
        files = tile_files(cache)
        assert len(files) == TILES_0_5
        assert all(f.read_bytes().startswith(b"\x89PNG") for f in files)
    finally:
        stop(server)


def test_a_cancelled_job_stops_and_writes_nothing_more(s3, tmp_path, tmp_path_factory):
    s3_bucket(s3, "tessera-test")
    config, cache = write_config(tmp_path, s3)
    server = start_server(tmp_path_factory, "--config", str(config))
    try:
        status, job, _ = call(server, "POST", "/admin/jobs",
                              {"kind": "seed", "layer": "relief", "zoom": "0..5", "rate": 60})
        assert status == 201, job
        wait_for(lambda: report(server, job["id"])["tiles_done"] > 0, "a first metatile")
        asked = time.monotonic()
        status, body, _ = call(server, "DELETE", f"/admin/jobs/{job['id']}")
        assert status == 202, body
        ended = wait_for(lambda: (r := report(server, job["id"]))["state"] != "running" and r, "the cancel", timeout=30)
        took = time.monotonic() - asked
        assert ended["state"] == "cancelled", ended
        print(f"cancelled {took:.2f} s after the DELETE")
        count = len(tile_files(cache))
        assert count == ended["tiles_written"] < TILES_0_5
        time.sleep(1.0)
        assert len(tile_files(cache)) == count, "tiles written after the job ended"
        assert call(server, "DELETE", "/admin/jobs/unknown")[0] == 404
    finally:
        stop(server)


def test_the_admin_api_is_on_with_a_token_alone_and_uploads_stay_off(tmp_path, tmp_path_factory):
    # No bucket, no sources file: jobs, stats, reload and truncate work;
    # uploads say how to turn them on. Jobs are recorded beside the config.
    config = tmp_path / "tessera.yaml"
    config.write_text(f"""
stores:
  disk: {{ type: file, path: {tmp_path / 'cache'}, memory: 0 }}
admin: {{ token: {TOKEN} }}
layers:
  - name: relief
    source: {{ path: {ROOT}/data/shadedrelief-5400.tif }}
    grids: [WebMercatorQuad]
    max_zoom: 8
    cache: {{ store: disk }}
""")
    check = subprocess.run([os.environ["TESSERA_BIN"], "check", str(config)], capture_output=True, text=True,
                           timeout=120)
    assert check.returncode == 0, check.stderr
    with serving(tmp_path_factory, "--config", str(config)) as server:
        status, job, _ = call(server, "POST", "/admin/jobs", {"kind": "seed", "layer": "relief", "zoom": "0..2"})
        assert status == 201, job
        done = wait_for(lambda: (r := report(server, job["id"]))["state"] != "running" and r, "the seed")
        assert done["state"] == "done" and done["tiles_done"] == 21, done
        assert (tmp_path / "jobs" / f"{job['id']}.json").exists()
        assert call(server, "GET", "/admin/stats")[0] == 200
        assert call(server, "POST", "/admin/reload")[0] == 200
        status, body, _ = call(server, "PUT", "/admin/sources/x", {"not": "a raster"})
        assert status == 404 and "admin.sources_url" in json.dumps(body), (status, body)
        assert call(server, "PUT", "/admin/sources/x", {"not": "a raster"}, token="wrong-token-0123456789")[0] == 401
    # One of the two upload keys alone is refused, naming both.
    config.write_text(config.read_text().replace(f"admin: {{ token: {TOKEN} }}",
                                                 f"admin: {{ token: {TOKEN}, sources_url: s3://b/p }}"))
    check = subprocess.run([os.environ["TESSERA_BIN"], "check", str(config)], capture_output=True, text=True,
                           timeout=120)
    assert check.returncode != 0 and "sources_file" in check.stderr, check.stderr


def test_job_specs_out_of_range_are_refused_with_the_cli_rules(s3, tmp_path, tmp_path_factory):
    s3_bucket(s3, "tessera-test")
    config, _ = write_config(tmp_path, s3)
    with_seed = {"kind": "seed", "layer": "relief", "zoom": "0..2"}
    with serving(tmp_path_factory, "--config", str(config)) as server:
        for extra, named in [({"threads": 2 ** 63}, "threads"), ({"threads": 0}, "threads"),
                             ({"threads": 1025}, "threads"), ({"rate": 1e-300}, "rate"), ({"rate": 0}, "rate")]:
            status, body, _ = call(server, "POST", "/admin/jobs", {**with_seed, **extra})
            assert status == 400 and named in json.dumps(body), (extra, status, body)
        assert call(server, "GET", "/admin/jobs")[1] == [], "a refused spec starts no job"
    # The CLI takes the same ranges.
    for flag, value in [("--threads", "1025"), ("--rate", "1e-300")]:
        r = subprocess.run([os.environ["TESSERA_BIN"], "seed", "--config", str(config), "--layer", "relief",
                            "--zoom", "0..1", flag, value], capture_output=True, text=True, timeout=120)
        assert r.returncode != 0 and flag.removeprefix("--") in r.stderr, r.stderr[-1000:]


def test_a_job_with_a_polygon_of_real_detail_is_taken_and_the_spec_limit_is_named(s3, tmp_path, tmp_path_factory):
    import math
    s3_bucket(s3, "tessera-test")
    config, _ = write_config(tmp_path, s3)
    # A ring of 200,000 points around Iceland: some 6 MB of GeoJSON.
    ring = [[-19 + 4 * math.cos(2 * math.pi * i / 200000), 65 + 1.5 * math.sin(2 * math.pi * i / 200000)]
            for i in range(200000)]
    ring.append(ring[0])
    polygon = {"type": "Polygon", "coordinates": [ring]}
    with serving(tmp_path_factory, "--config", str(config)) as server:
        status, job, _ = call(server, "POST", "/admin/jobs",
                              {"kind": "seed", "layer": "relief", "zoom": "0..3", "polygon": polygon})
        assert status == 201, str(job)[:500]
        assert len(json.dumps(polygon)) > 4 << 20
        status, body, _ = call(server, "POST", "/admin/jobs", {"kind": "seed", "layer": "relief", "zoom": "0..3",
                                                               "padding": "x" * (33 << 20)})
        assert status == 413 and "admin.max_job_spec" in json.dumps(body), (status, str(body)[:300])
        # A parameter given twice is refused, not taken as its last value.
        status, body, _ = call(server, "POST", "/admin/truncate?layer=relief&layer=other&zoom=0..1")
        assert status == 400 and "given twice" in json.dumps(body), (status, body)


def test_whole_world_jobs_to_zoom_24_are_planned_at_once_and_cancelled_by_delete(s3, tmp_path, tmp_path_factory):
    s3_bucket(s3, "tessera-test")
    config = tmp_path / "tessera.yaml"
    config.write_text(config_text(tmp_path, s3, f"{{ type: file, path: {tmp_path / 'cache'}, memory: 0 }}",
                                  "deep").replace("max_zoom: 8", "max_zoom: 24"))
    world = sum(4 ** z for z in range(25))
    with serving(tmp_path_factory, "--config", str(config)) as server:
        for kind in ("seed", "truncate"):
            status, job, _ = call(server, "POST", "/admin/jobs",
                                  {"kind": kind, "layer": "relief", "zoom": "0..24", "rate": 10})
            assert status == 201, job
            planned = wait_for(lambda: report(server, job["id"])["tiles_planned"], f"the {kind} plan", timeout=20)
            assert planned == world, (kind, planned)
            assert call(server, "DELETE", f"/admin/jobs/{job['id']}")[0] == 202
            ended = wait_for(lambda: (r := report(server, job["id"]))["state"] != "running" and r,
                             f"the {kind} cancel", timeout=30)
            # A truncation of an empty cache may end before the DELETE.
            assert ended["state"] == "cancelled" or (kind, ended["state"]) == ("truncate", "done"), ended
        rss = int(next(line.split()[1] for line in open(f"/proc/{server.proc.pid}/status")
                       if line.startswith("VmHWM:")))
        assert rss < 1024 * 1024, f"peak RSS {rss} kB"


def test_seed_rate_holds_the_rate_asked(tmp_path):
    config = tmp_path / "tessera.yaml"
    config.write_text(f"""
stores:
  disk: {{ type: file, path: {tmp_path / 'cache'}, memory: 0 }}
layers:
  - name: relief
    source: {{ path: {ROOT}/data/shadedrelief-5400.tif, resampling: bilinear }}
    grids: [WebMercatorQuad]
    max_zoom: 8
    cache: {{ store: disk }}
""")
    run = subprocess.run(
        [os.environ["TESSERA_BIN"], "seed", "--config", str(config), "--layer", "relief",
         "--grid", "WebMercatorQuad", "--zoom", "0..4", "--rate", "50"],
        capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    found = re.search(r"seed complete: (\d+)/(\d+) tiles .* in ([0-9.]+) s, (\d+) tiles/s", run.stdout)
    assert found, run.stdout
    tiles, secs = int(found.group(1)), float(found.group(3))
    assert tiles == TILES_0_4
    rate = tiles / secs
    print(f"--rate 50: {rate:.1f} tiles/s ({tiles} tiles in {secs:.1f} s)")
    # Never faster than asked (the limiter's own promise); slower only by
    # the last metatile's render, which a loaded machine can stretch.
    assert rate <= 55, f"{rate:.1f} tiles/s with --rate 50"
    assert rate >= 45, f"{rate:.1f} tiles/s with --rate 50 ({secs:.2f} s for {tiles} tiles)"
    bad = subprocess.run(
        [os.environ["TESSERA_BIN"], "seed", "--config", str(config), "--layer", "relief",
         "--grid", "WebMercatorQuad", "--zoom", "0", "--rate", "0"],
        capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "positive number of tiles per second" in bad.stderr, bad.stderr


def test_the_admin_page_logs_in_starts_a_job_and_shows_its_progress(s3, tmp_path, tmp_path_factory, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    s3_bucket(s3, "tessera-test")
    config, cache = write_config(tmp_path, s3)
    server = start_server(tmp_path_factory, "--config", str(config))
    try:
        browser.get(server.url + "/admin")
        wait = WebDriverWait(browser, 60)
        # A wrong token is refused, and the login form comes back.
        browser.find_element(By.ID, "token").send_keys("not-the-token-0123456789")
        browser.find_element(By.CSS_SELECTOR, "#login button").click()
        wait.until(lambda d: "refused" in d.find_element(By.ID, "error").text)
        assert browser.find_element(By.ID, "login").is_displayed()
        token = browser.find_element(By.ID, "token")
        token.clear()
        token.send_keys(TOKEN)
        browser.find_element(By.CSS_SELECTOR, "#login button").click()
        wait.until(lambda d: d.find_element(By.ID, "main").is_displayed())
        # Start a seed from the page's form.
        browser.find_element(By.ID, "layer").send_keys("relief")
        browser.find_element(By.ID, "zoom").send_keys("0..3")
        browser.find_element(By.CSS_SELECTOR, "#new button").click()
        # The page redraws its tables every second: read them in one script.
        job_id = wait.until(lambda d: d.execute_script(
            "const r = document.querySelector('#jobs tr'); return r && r.dataset.id;"))
        done = wait_for(lambda: (r := report(server, job_id))["state"] == "done" and r, "the page's job")
        assert done["tiles_done"] == 85 and done["kind"] == "seed"
        # The page shows it done, its bar full, and the layer's statistics.
        row = f"#jobs tr[data-id='{job_id}']"
        wait.until(lambda d: d.execute_script(
            f"const r = document.querySelector(\"{row}\"); return !!r && r.textContent.includes('done');"))
        assert browser.execute_script(
            f"const b = document.querySelector(\"{row} progress\"); return [b.value, b.max];") == [85, 85]
        wait.until(lambda d: d.execute_script(
            "return document.getElementById('layers').textContent.includes('relief');"))
        assert len(tile_files(cache)) == 85
    finally:
        stop(server)
