"""Several `tessera serve` nodes and `tessera seed` shards sharing one
bucket on MinIO: a metatile is rendered once across all of them (leases
with conditional PUTs), a dead holder's lease is taken over after its time
to live, faults on conditional PUTs become clear 503s with nothing left
behind, a truncate on one node is seen by the others within the check
interval on every store they can share, and seed shards split a plan
without overlap."""
import concurrent.futures
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

import pytest

from cogserver import start_cog_server
from conftest import ROOT, free_port, http_get as get, metric, s3_bucket, server_env, serving

BUCKET = "tessera-e2e-cluster"
LAYER = "relief"
# The 16 tiles of one 4 x 4 metatile at zoom 4.
META_TILES = [(4, x, y) for x in range(8, 12) for y in range(4, 8)]


S3 = []


@pytest.fixture(autouse=True)
def minio(s3):
    """MinIO's endpoint and credentials, for every config of this module."""
    S3[:] = [s3]


def s3_options(s3, endpoint=None):
    return (f"{{ endpoint: '{endpoint or s3['endpoint']}', access_key_id: {s3['key']}, "
            f"secret_access_key: {s3['secret']}, region: us-east-1, allow_http: true, "
            f"max_retries: 1, timeout: 10s }}")


def object_store(s3, prefix, layout="packs", endpoint=None, memory="16MiB"):
    return (f"{{ type: object, url: 's3://{BUCKET}/{prefix}', layout: {layout}, "
            f"memory: {memory}, options: {s3_options(s3, endpoint)} }}")


def node_config(tmp_path, name, store, leases=True, ttl=30, wait=60, source=None, extra=""):
    s3 = S3[0]
    """A node's config: layer relief cached in `store` with 4 x 4 metatiles."""
    path = tmp_path / f"{name}.yaml"
    source = source or f"{ROOT}/data/shadedrelief-5400.tif"
    path.write_text(f"""
gdal: {{ allow_private_network: true }}
cluster:
  leases: {str(leases).lower()}
  lease_ttl_secs: {ttl}
  lease_wait_secs: {wait}
  node_id: {name}
  generation_check_secs: 1
admin:
  token: secret-token-0123456789
  sources_url: s3://{BUCKET}/sources-{uuid.uuid4().hex[:8]}
  options: {s3_options(s3)}
  sources_file: {tmp_path}/sources-{name}.yaml
stores:
  shared: {store}
layers:
  - name: {LAYER}
    source: {{ path: "{source}" }}
    grids: [WebMercatorQuad]
    max_zoom: 8
    cache: {{ store: shared, metatile: [4, 4] }}
{extra}""")
    return path


def renders(server):
    return metric(server, "tessera_metatile_renders_total", layer=LAYER)


def keys(c, prefix):
    pages = c.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


def leases_left(c, prefix):
    return [k for k in keys(c, prefix) if "/leases/" in k]


def wait_until(check, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    pytest.fail(f"{what} did not happen within {timeout} s", pytrace=False)


def quietly(f, *args):
    """Calls f, ignoring its failure (a request to a node about to be killed)."""
    try:
        f(*args)
    except OSError:
        pass


def tile_path(z, x, y):
    return f"/tiles/{LAYER}/WebMercatorQuad/{z}/{x}/{y}.png"


def shared_store(kind, s3, prefix):
    """The config of an object store on MinIO, Azurite or fake-gcs-server."""
    if kind == "s3":
        return object_store(s3, prefix)
    if kind == "azure":
        server_env("AZURITE_BLOB_STORAGE_URL", "azurite")
        url = server_env("TESSERA_TEST_AZURE_URL", "azurite")
        return f"{{ type: object, url: '{url}/{prefix}', memory: 16MiB, options: {{ use_emulator: true }} }}"
    url = server_env("TESSERA_TEST_GCS_URL", "fake-gcs")
    key = server_env("TESSERA_TEST_GCS_KEY", "fake-gcs")
    return f"{{ type: object, url: '{url}/{prefix}', memory: 16MiB, options: {{ service_account_key: '{key}' }} }}"


@pytest.mark.parametrize("kind", ["s3", "azure", "gcs"])
def test_600_requests_over_three_nodes_render_the_metatile_once(kind, s3, tmp_path, tmp_path_factory):
    c = s3_bucket(s3, BUCKET)
    prefix = f"single-{uuid.uuid4().hex[:8]}"
    store = shared_store(kind, s3, prefix)
    configs = [node_config(tmp_path, f"node{i}", store) for i in range(3)]
    with serving(tmp_path_factory, "--config", str(configs[0])) as a, \
            serving(tmp_path_factory, "--config", str(configs[1])) as b, \
            serving(tmp_path_factory, "--config", str(configs[2])) as n3:
        nodes = [a, b, n3]
        jobs = [(nodes[i % 3], META_TILES[i % 16]) for i in range(600)]
        with concurrent.futures.ThreadPoolExecutor(64) as pool:
            answers = list(pool.map(lambda j: (j[1], get(j[0], tile_path(*j[1]))), jobs))
        statuses = [a[1][0] for a in answers]
        assert statuses == [200] * 600, {s: statuses.count(s) for s in set(statuses)}
        by_tile = {}
        for t, (_, _, body) in answers:
            by_tile.setdefault(t, set()).add(body)
        assert all(len(v) == 1 for v in by_tile.values()), "every tile is byte-identical on every node"
        assert sum(renders(n) for n in nodes) == 1, [renders(n) for n in nodes]
        # One node won the lease and rendered. A waiter that asks again just
        # after the holder deleted its lease (its tiles stored) wins too,
        # then reads the tiles instead of rendering: renders, not wins, are
        # the invariant.
        won = sum(metric(n, "tessera_lease_requests_total", outcome="won") for n in nodes)
        assert won >= 1, won
        lost = sum(metric(n, "tessera_lease_requests_total", outcome="lost") for n in nodes)
        assert lost >= 1, "the other nodes waited for the holder's tiles"
        if kind == "s3":
            # The holder deletes its lease once the 16 tiles are stored.
            wait_until(lambda: not leases_left(c, prefix), 10, "the lease's deletion")


def test_a_holder_killed_mid_render_is_taken_over_after_the_ttl(s3, tmp_path, tmp_path_factory):
    c = s3_bucket(s3, BUCKET)
    prefix = f"takeover-{uuid.uuid4().hex[:8]}"
    cog = start_cog_server()
    try:
        store = object_store(s3, prefix)
        source = f"{cog.url}/shadedrelief-5400.tif"
        ttl = 3
        holder_cfg = node_config(tmp_path, "holder", store, ttl=ttl, wait=60, source=source)
        taker_cfg = node_config(tmp_path, "taker", store, ttl=ttl, wait=60, source=source)
        with serving(tmp_path_factory, "--config", str(holder_cfg)) as holder, \
                serving(tmp_path_factory, "--config", str(taker_cfg)) as taker:
            cog.delay = 0.5  # each range read of the source: a slow source
            threading.Thread(target=quietly, args=(get, holder, tile_path(*META_TILES[0]), None, 30),
                             daemon=True).start()
            wait_until(lambda: leases_left(c, prefix), 30, "the holder's lease")
            start = time.monotonic()
            result = {}
            t = threading.Thread(target=lambda: result.update(r=get(taker, tile_path(*META_TILES[5]))))
            t.start()
            time.sleep(0.5)
            holder.proc.send_signal(signal.SIGKILL)
            t.join(timeout=90)
            assert not t.is_alive(), "the taker's client hung"
            status, headers, body = result["r"]
            elapsed = time.monotonic() - start
            assert status == 200 or (status == 503 and headers.get("Retry-After")), (status, body)
            assert status == 200, (status, body)
            assert body[:8] == b"\x89PNG\r\n\x1a\n"
            # Not before the dead holder's lease expired, and well within the wait bound.
            assert elapsed >= 0.5, elapsed
            assert elapsed < 60, elapsed
            assert metric(taker, "tessera_lease_requests_total", outcome="taken_over") == 1
            assert renders(taker) == 1
            cog.delay = 0
            wait_until(lambda: not leases_left(c, prefix), 10, "the taker's lease deletion")
    finally:
        cog.shutdown()


def start_proxy(upstream_port, *plan):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts/lib/faulty-proxy.py"), str(port), str(upstream_port), *plan],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return port, proc


@pytest.mark.parametrize("plan", [["--conditional", "--fail-all"],
                                  ["--conditional", "--stall", "1", "--stall-secs", "8"]])
def test_failing_or_stalled_conditional_puts_give_503_and_leave_nothing(plan, s3, tmp_path, tmp_path_factory):
    c = s3_bucket(s3, BUCKET)
    prefix = f"faulty-{uuid.uuid4().hex[:8]}"
    upstream = int(s3["endpoint"].rsplit(":", 1)[1])
    port, proxy = start_proxy(upstream, *plan)
    try:
        store = object_store(s3, prefix, endpoint=f"http://127.0.0.1:{port}")
        cfg = node_config(tmp_path, "faulty", store, ttl=2, wait=3)
        with serving(tmp_path_factory, "--config", str(cfg)) as node:
            for z, x, y in META_TILES[:3]:
                start = time.monotonic()
                status, headers, body = get(node, tile_path(z, x, y), timeout=60)
                assert status == 503, (status, body)
                assert headers.get("Retry-After"), headers
                assert b"try again later" in body, body
                assert time.monotonic() - start < 30, "bounded by the lease wait and the client timeout"
            assert renders(node) == 0, "nothing is rendered without the lease"
            assert metric(node, "tessera_lease_requests_total", outcome="error") >= 3
        time.sleep(2.5)  # past the TTL
        stored = [k for k in keys(c, prefix) if not k.endswith("/fingerprint")]
        assert stored == [], f"no tile and no lease left behind: {stored}"
    finally:
        proxy.kill()


def admin_truncate(server, query, token="secret-token-0123456789"):
    req = urllib.request.Request(server.url + "/admin/truncate?" + query, method="POST",
                                 headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.mark.parametrize("kind", ["packs", "xyz", "file", "mbtiles"])
def test_a_truncate_on_one_node_is_seen_by_the_others_within_the_interval(kind, s3, tmp_path, tmp_path_factory):
    s3_bucket(s3, BUCKET)
    prefix = f"gen-{kind}-{uuid.uuid4().hex[:8]}"
    store = {
        "packs": lambda: object_store(s3, prefix),
        "xyz": lambda: object_store(s3, prefix, layout="xyz"),
        "file": lambda: f"{{ type: file, path: {tmp_path / 'tiles'}, memory: 16MiB }}",
        "mbtiles": lambda: f"{{ type: mbtiles, path: {tmp_path / 'mbtiles'}, memory: 16MiB }}",
    }[kind]()
    # Every tile of a rendered metatile is stored before the answer, so the
    # truncate cannot race with the saves of the first render.
    inline = "cache: { metatile_threads: 0 }\n"
    configs = [node_config(tmp_path, f"n{i}", store, leases=kind in ("packs", "xyz"), extra=inline)
               for i in range(3)]
    # One tile for each of B and C, in different metatiles (a render of one
    # does not store the other).
    paths = {1: tile_path(4, 8, 4), 2: tile_path(4, 12, 4)}
    path = paths[1]
    with serving(tmp_path_factory, "--config", str(configs[0])) as a, \
            serving(tmp_path_factory, "--config", str(configs[1])) as b, \
            serving(tmp_path_factory, "--config", str(configs[2])) as n3:
        for p in paths.values():
            assert get(a, p)[1]["X-Cache"] == "MISS"
            for n in (b, n3):
                assert get(n, p)[1]["X-Cache"] == "HIT"
                assert get(n, p)[1]["X-Cache"] == "HIT"  # now from its memory
        for query, token, status, needle in [
            (f"layer={LAYER}&zoom=4", "wrong-token-0123456789", 401, "Bearer"),
            (f"layer={LAYER}", None, 400, "zoom"),
            ("layer=nope&zoom=4", None, 400, "unknown layer"),
            (f"layer={LAYER}&zoom=4&bbox=1,2,3", None, 400, "4 numbers"),
        ]:
            answer = admin_truncate(a, query, *([token] if token else []))
            assert answer[0] == status and needle in answer[1], (query, answer)
        assert get(a, paths[1])[1]["X-Cache"] == "HIT", "a refused truncate removes nothing"
        status, text = admin_truncate(a, f"layer={LAYER}&zoom=4")
        assert status == 200 and "other nodes told" in text, text
        truncated = time.monotonic()
        for n, p in ((b, paths[1]), (n3, paths[2])):
            wait_until(lambda n=n, p=p: get(n, p)[1]["X-Cache"] == "MISS", 5,
                       f"a MISS on {n.url} after the truncate")
        assert time.monotonic() - truncated < 5
        for n in (b, n3):
            assert metric(n, "tessera_generation_checks_total", result="changed") >= 1
        # The same through the CLI on another process.
        assert get(a, path)[1]["X-Cache"] == "HIT"
        r = subprocess.run([os.environ["TESSERA_BIN"], "truncate", "--config", str(configs[0]),
                            "--layer", LAYER, "--zoom", "4"], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert "serving nodes sharing the store drop their copies" in r.stdout, r.stdout
        wait_until(lambda: get(a, path)[1]["X-Cache"] == "MISS", 5, "a MISS on the node after the CLI truncate")


def test_a_truncate_of_one_dimension_value_is_seen_by_the_other_nodes(s3, tmp_path, tmp_path_factory):
    """Each dimension value keeps its tiles under a key of its own, but a
    node watches one generation per configured layer: a truncate of one
    value on one node drops the copies another node holds in memory."""
    from test_dimensions import solid
    s3_bucket(s3, BUCKET)
    series = tmp_path / "series"
    series.mkdir()
    for date, color in {"2024-01-01": (200, 30, 30), "2024-02-01": (30, 200, 30)}.items():
        solid(series / f"day_{date}.tif", color, -180, 180)
    store = object_store(s3, f"gen-dim-{uuid.uuid4().hex[:8]}")
    extra = f"""  - name: series
    source: {{ type: mosaic, dir: {series}, glob: '*.tif' }}
    grids: [WebMercatorQuad]
    cache: {{ store: shared, metatile: [2, 2] }}
    dimensions:
      time: {{ from_path: 'day_(.*)\\.tif' }}
cache: {{ metatile_threads: 0 }}
"""
    configs = [node_config(tmp_path, f"n{i}", store, extra=extra) for i in range(2)]
    paths = {d: f"/tiles/series/WebMercatorQuad/2/1/2.png?time={d}" for d in ("2024-01-01", "2024-02-01")}
    with serving(tmp_path_factory, "--config", str(configs[0])) as a, \
            serving(tmp_path_factory, "--config", str(configs[1])) as b:
        bodies = {}
        for d, p in paths.items():
            assert get(a, p)[1]["X-Cache"] == "MISS"
            for _ in range(2):  # from the shared store, then from its memory
                _, headers, bodies[d] = get(b, p)
                assert headers["X-Cache"] == "HIT", (d, headers)
        query = "layer=series&zoom=2&dimension=" + urllib.parse.quote("time=2024-01-01")
        status, text = admin_truncate(a, query)
        assert status == 200 and "other nodes told" in text, text
        wait_until(lambda: get(b, paths["2024-01-01"])[1]["X-Cache"] == "MISS", 5,
                   "a MISS on the other node for the truncated value")
        # The other value's tiles are still in the shared store.
        _, headers, body = get(b, paths["2024-02-01"])
        assert headers["X-Cache"] == "HIT" and body == bodies["2024-02-01"], headers


def seed(cfg, *args, env=None):
    return subprocess.Popen([os.environ["TESSERA_BIN"], "seed", "--config", str(cfg), "--layer", LAYER,
                             "--zoom", "0..5", "--threads", "2", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})


def test_four_seed_shards_and_a_serving_node_render_each_metatile_once(s3, tmp_path, tmp_path_factory):
    c = s3_bucket(s3, BUCKET)
    prefix = f"shards-{uuid.uuid4().hex[:8]}"
    store = object_store(s3, prefix)
    cfg = node_config(tmp_path, "seeder", store)
    plan_metatiles = 1 + 1 + 1 + 4 + 16 + 64  # zoom 0..5 in 4 x 4 metatiles
    with serving(tmp_path_factory, "--config", str(node_config(tmp_path, "server", store))) as node:
        stop = threading.Event()
        served = []

        def load():
            i = 0
            while not stop.is_set():
                z = 5
                x, y = (i * 7) % 32, (i * 13) % 32
                served.append(get(node, tile_path(z, x, y))[0])
                i += 1

        loader = threading.Thread(target=load)
        loader.start()
        shards = [seed(cfg, "--shard", f"{i}/4") for i in range(3)]
        shards.append(seed(cfg, "--shard", "auto/4", env={"JOB_COMPLETION_INDEX": "3"}))
        outputs = [p.communicate(timeout=600) for p in shards]
        stop.set()
        loader.join()
        for p, (out, err) in zip(shards, outputs):
            assert p.returncode == 0, err
        assert "shard 3 of 4" in outputs[3][1]
        planned = [int(re.search(r"in (\d+) metatiles", err).group(1)) for _, err in outputs]
        assert sum(planned) == plan_metatiles and max(planned) - min(planned) <= 1, planned
        rendered = [int(re.search(r"\((\d+) rendered", out).group(1)) for out, _ in outputs]
        assert set(served) == {200}, set(served)
        total = sum(rendered) + renders(node)
        assert total == plan_metatiles, (rendered, renders(node))
        # Every tile is there: a full seed renders nothing.
        out, err = seed(cfg).communicate(timeout=600)
        assert "(0 rendered" in out, out + err
        assert "1365/1365 tiles" in out, out
        wait_until(lambda: not leases_left(c, prefix), 10, "every lease's deletion")


def test_a_lease_claiming_the_far_future_or_too_big_to_be_ours_does_not_block_its_metatile(
        s3, tmp_path, tmp_path_factory):
    c = s3_bucket(s3, BUCKET)
    prefix = f"skew-{uuid.uuid4().hex[:8]}"
    cfg = node_config(tmp_path, "a", object_store(s3, prefix), ttl=5, wait=20)
    with serving(tmp_path_factory, "--config", str(cfg)) as node:
        # A render elsewhere shows where the layer's objects live.
        assert get(node, tile_path(4, 8, 8))[0] == 200
        tile_key = next(k for k in keys(c, prefix) if "/WebMercatorQuad/" in k)
        layer_root = tile_key.split("/WebMercatorQuad/")[0]
        year = 365 * 24 * 3600 * 1000
        evil = {
            # A node whose clock is a year ahead, or a bad writer.
            (4, 0, 0): json.dumps({"node": "skewed", "expires_ms": int(time.time() * 1000) + year}).encode(),
            # A foreign object far larger than any lease.
            (4, 4, 0): b" " * (8 << 20),
        }
        for (z, x, y), body in evil.items():
            lease = f"{layer_root}/WebMercatorQuad/{z}/leases/{x}-{y}-{x + 3}-{y + 3}.png"
            c.put_object(Bucket=BUCKET, Key=lease, Body=body)
            status, headers, body = get(node, tile_path(z, x + 1, y + 1), timeout=60)
            assert status == 200, (status, body[:300])
        assert metric(node, "tessera_lease_requests_total", outcome="taken_over") >= 2
        # Released once the siblings are saved (after the answers).
        wait_until(lambda: leases_left(c, prefix) == [], 60, "the leases to be released")


def admin(server, method, query, timeout=60, token="secret-token-0123456789"):
    req = urllib.request.Request(server.url + "/admin/truncate?" + query, method=method,
                                 headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_a_long_truncate_is_a_job_joined_watched_and_cancelled(s3, tmp_path, tmp_path_factory):
    # Zooms 0..24 of the world by computed keys (listing turned off) are
    # 3.7e14 keys: work that never ends must be watchable and stoppable.
    s3_bucket(s3, BUCKET)
    prefix = f"world-{uuid.uuid4().hex[:8]}"
    store = object_store(s3, prefix, layout="xyz").replace("layout: xyz,", "layout: xyz, truncate_list_above: 1000000000000000000,")
    cfg = node_config(tmp_path, "a", store, leases=False, extra="").read_text().replace("max_zoom: 8", "max_zoom: 24")
    (tmp_path / "world.yaml").write_text(cfg)
    with serving(tmp_path_factory, "--config", str(tmp_path / "world.yaml")) as node:
        query = f"layer={LAYER}&zoom=0..24"
        answers = []
        threads = [threading.Thread(target=lambda: answers.append(admin(node, "POST", query, timeout=120)))
                   for _ in range(2)]
        for t in threads:
            t.start()
            time.sleep(0.5)

        def one_job_with_two_waiting():
            status, body = admin(node, "GET", "")
            jobs = json.loads(body)
            return status == 200 and len(jobs) == 1 and jobs[0]["waiting"] == 2 and jobs[0]["removed"] > 0

        wait_until(one_job_with_two_waiting, 60, "one running truncation with both requests waiting")
        status, body = admin(node, "DELETE", f"layer={LAYER}")
        assert status == 200 and body.startswith("1 "), (status, body)
        for t in threads:
            t.join(timeout=60)
        assert sorted(s for s, _ in answers) == [409, 409], answers
        assert all("cancelled after" in b for _, b in answers), answers
        wait_until(lambda: json.loads(admin(node, "GET", "")[1]) == [], 30, "the job to go")
        # A client that leaves stops its job.
        quietly(admin, node, "POST", query, 1)
        wait_until(lambda: json.loads(admin(node, "GET", "")[1]) == [], 30, "the abandoned job to stop")



@pytest.mark.parametrize("layout", ["xyz", "packs"])
def test_a_whole_world_truncate_of_an_object_store_lists_its_deep_zooms_and_ends(layout, s3, tmp_path,
                                                                                 tmp_path_factory):
    # Zooms 0..24 of the world are 3.7e14 keys (2.3e13 packs): the zooms of
    # more than 65,536 keys or packs are listed, not computed.
    c = s3_bucket(s3, BUCKET)
    prefix = f"world-{layout}-{uuid.uuid4().hex[:8]}"
    cfg = node_config(tmp_path, "a", object_store(s3, prefix, layout=layout), leases=False,
                      extra="cache: { metatile_threads: 0 }\n").read_text().replace("max_zoom: 8", "max_zoom: 24")
    (tmp_path / "world.yaml").write_text(cfg)
    with serving(tmp_path_factory, "--config", str(tmp_path / "world.yaml")) as node:
        for path in (tile_path(4, 8, 4), tile_path(14, 8192, 5446)):
            assert get(node, path)[0] == 200
        stored = lambda: [k for k in keys(c, prefix) if k.endswith(".png") or k.endswith(".avro")]  # noqa: E731
        assert stored(), "nothing was stored"
        status, body = admin(node, "POST", f"layer={LAYER}&zoom=0..24", timeout=300)
        assert status == 200, body
        assert stored() == []
        assert get(node, tile_path(14, 8192, 5446))[1]["X-Cache"] == "MISS"


def test_a_whole_world_truncate_of_a_file_store_costs_what_it_holds(tmp_path, tmp_path_factory):
    cfg = node_config(tmp_path, "f", f"{{ type: file, path: {tmp_path / 'tiles'} }}", leases=False,
                      extra="cache: { metatile_threads: 0 }\n").read_text().replace("max_zoom: 8", "max_zoom: 24")
    (tmp_path / "file.yaml").write_text(cfg)
    with serving(tmp_path_factory, "--config", str(tmp_path / "file.yaml")) as node:
        for path in (tile_path(4, 8, 4), tile_path(6, 30, 20)):
            assert get(node, path)[0] == 200
        held = len(list((tmp_path / "tiles").rglob("*.png")))
        assert held == 32, held
        status, body = admin(node, "POST", f"layer={LAYER}&zoom=0..24", timeout=120)
        assert status == 200, body
        assert f"{held} objects deleted" in body, body
        assert list((tmp_path / "tiles").rglob("*.png")) == []
        assert get(node, tile_path(4, 8, 4))[1]["X-Cache"] == "MISS"


def test_300_requests_at_one_time_value_over_two_nodes_render_its_metatile_once(s3, tmp_path, tmp_path_factory):
    """A layer with a time dimension on two nodes sharing one bucket: 300
    concurrent requests for one metatile at one value render it once; the
    other value's tiles are rendered (once) apart and differ."""
    c = s3_bucket(s3, BUCKET)
    prefix = f"dimension-{uuid.uuid4().hex[:8]}"
    inverted = tmp_path / "inverted.tif"
    subprocess.run(["gdal_translate", "-q", "-scale", "0", "255", "255", "0",
                    f"{ROOT}/data/shadedrelief-5400.tif", str(inverted)], check=True)
    configs = []
    for name in ("node0", "node1"):
        path = tmp_path / f"{name}.yaml"
        path.write_text(f"""
cluster: {{ leases: true, lease_ttl_secs: 30, lease_wait_secs: 60, node_id: {name} }}
stores:
  shared: {object_store(s3, prefix)}
layers:
  - name: {LAYER}
    source: {{ path: "{ROOT}/data/shadedrelief-5400.tif" }}
    grids: [WebMercatorQuad]
    max_zoom: 8
    cache: {{ store: shared, metatile: [4, 4] }}
    dimensions:
      time:
        values:
          - {{ value: 2024-01-01, path: "{ROOT}/data/shadedrelief-5400.tif" }}
          - {{ value: 2024-02-01, path: "{inverted}" }}
""")
        configs.append(path)
    with serving(tmp_path_factory, "--config", str(configs[0])) as a, \
            serving(tmp_path_factory, "--config", str(configs[1])) as b:
        nodes = [a, b]

        def burst(value, count):
            jobs = [(nodes[i % 2], META_TILES[i % 16]) for i in range(count)]
            with concurrent.futures.ThreadPoolExecutor(64) as pool:
                answers = list(pool.map(
                    lambda j: (j[1], get(j[0], tile_path(*j[1]) + f"?time={value}")), jobs))
            statuses = [s for _, (s, _, _) in answers]
            assert statuses == [200] * count, {s: statuses.count(s) for s in set(statuses)}
            by_tile = {}
            for t, (_, _, body) in answers:
                by_tile.setdefault(t, set()).add(body)
            assert all(len(v) == 1 for v in by_tile.values()), "every tile is byte-identical on both nodes"
            return {t: next(iter(v)) for t, v in by_tile.items()}

        january = burst("2024-01-01", 300)
        assert sum(renders(n) for n in nodes) == 1, [renders(n) for n in nodes]
        february = burst("2024-02-01T00:00:00Z", 32)
        assert sum(renders(n) for n in nodes) == 2, [renders(n) for n in nodes]
        assert all(january[t] != february[t] for t in META_TILES), "each value has its own tiles"
        # Both values' tiles lie under the layer key at their value (object
        # names escape its `~`).
        stored = [urllib.parse.unquote(k) for k in keys(c, prefix)]
        for value in ("2024-01-01T000000Z", "2024-02-01T000000Z"):
            assert any(f"{LAYER}~time={value}" in k for k in stored), (value, stored[:10])
        wait_until(lambda: not leases_left(c, prefix), 10, "the leases' deletion")
