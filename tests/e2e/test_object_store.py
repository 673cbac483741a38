"""The object-store cache from the real binary, on MinIO: `tessera seed`
writes curve-indexed packs under computed keys, Python's fastavro reads them,
a restarted server answers from them, and `tessera truncate` removes whole
packs by key (or rewrites the packs on an area's border)."""
import io
import json
import os
import subprocess
import urllib.request
import uuid

import fastavro

from conftest import relief_config, s3_bucket, serving

BUCKET = "tessera-e2e-packs"


def run(cfg, command, *args):
    r = subprocess.run([os.environ["TESSERA_BIN"], command, "--config", str(cfg), "--layer", "relief", *args],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return r.stdout


def client(s3):
    return s3_bucket(s3, BUCKET)


def keys(c, prefix):
    pages = c.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


def records(c, key):
    body = c.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    reader = fastavro.reader(io.BytesIO(body))
    assert reader.codec == "null"
    return list(reader)


def config(tmp_path, s3, prefix):
    store = (f"{{ type: object, url: 's3://{BUCKET}/{prefix}', pack_tiles: 16, "
             f"cache_path: {tmp_path / 'pack-cache'}, cache_mb: 64, memory_mb: 0, "
             f"options: {{ endpoint: '{s3['endpoint']}', access_key_id: {s3['key']}, "
             f"secret_access_key: {s3['secret']}, region: us-east-1, allow_http: true }} }}")
    return relief_config(tmp_path, store)


def x_cache(server, path):
    with urllib.request.urlopen(server.url + path) as resp:
        return resp.headers["X-Cache"], resp.read()


def test_seeded_packs_are_served_read_by_fastavro_and_truncated_by_key(s3, tmp_path, tmp_path_factory):
    c = client(s3)
    prefix = f"run-{uuid.uuid4().hex[:8]}"
    cfg = config(tmp_path, s3, prefix)
    out = run(cfg, "seed", "--zoom", "0..3")
    assert "85/85 tiles" in out, out

    # Zoom 0-2 fit in one pack each; zoom 3 (8 x 8) is four packs of 4 x 4.
    base = f"{prefix}/relief/WebMercatorQuad"
    stored = keys(c, prefix)
    # The layer's fingerprint sits beside its packs (docs/pack-format.md).
    fingerprint = c.get_object(Bucket=BUCKET, Key=f"{prefix}/relief/fingerprint")["Body"].read()
    assert len(fingerprint) == 16 and int(fingerprint, 16) >= 0, fingerprint
    stored = [k for k in stored if k != f"{prefix}/relief/fingerprint"]
    assert stored == sorted([f"{base}/0/0.png.avro", f"{base}/1/0.png.avro", f"{base}/2/0.png.avro"]
                            + [f"{base}/3/{i}.png.avro" for i in range(4)]), stored
    z3 = [r for k in stored if "/3/" in k for r in records(c, k)]
    assert sorted((r["x"], r["y"]) for r in z3) == sorted((x, y) for x in range(8) for y in range(8))
    assert all(r["media_type"] == "image/png" and r["data"][:8] == b"\x89PNG\r\n\x1a\n" for r in z3)

    with serving(tmp_path_factory, "--config", str(cfg)) as server:
        state, body = x_cache(server, "/tiles/relief/WebMercatorQuad/3/4/2.png")
        assert state == "HIT"
        assert body == next(r["data"] for r in z3 if (r["x"], r["y"]) == (4, 2))

    # The western half of zoom 3 is two whole packs: deleted by key.
    out = run(cfg, "truncate", "--zoom", "3", "--bbox", "-180,-85,-1,85")
    assert "2 objects deleted, 0 rewritten" in out, out
    left = [k for k in keys(c, prefix) if "/3/" in k]
    assert len(left) == 2
    assert all(r["x"] >= 4 for k in left for r in records(c, k))

    # A small polygon over Europe at zoom 2 rewrites the one pack of zoom 2.
    area = tmp_path / "europe.geojson"
    area.write_text(json.dumps({"type": "Polygon", "coordinates": [
        [[5, 45], [15, 45], [15, 55], [5, 55], [5, 45]]]}))
    out = run(cfg, "truncate", "--zoom", "2", "--polygon", str(area))
    assert "0 objects deleted, 1 rewritten" in out, out
    z2 = records(c, f"{base}/2/0.png.avro")
    assert len(z2) == 15 and (2, 1) not in {(r["x"], r["y"]) for r in z2}

    with serving(tmp_path_factory, "--config", str(cfg)) as server:
        assert x_cache(server, "/tiles/relief/WebMercatorQuad/3/6/2.png")[0] == "HIT"
        assert x_cache(server, "/tiles/relief/WebMercatorQuad/3/1/2.png")[0] == "MISS"
        assert x_cache(server, "/tiles/relief/WebMercatorQuad/2/2/1.png")[0] == "MISS"
        assert x_cache(server, "/tiles/relief/WebMercatorQuad/2/0/0.png")[0] == "HIT"


def test_a_bad_object_store_url_is_a_clear_error(tmp_path):
    cfg = relief_config(tmp_path, "{ type: object, url: 'ftp://example/tiles' }")
    r = subprocess.run([os.environ["TESSERA_BIN"], "check", str(cfg)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "unsupported scheme" in r.stderr, r.stderr
