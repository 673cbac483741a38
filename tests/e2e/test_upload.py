"""`PUT /admin/sources/{name}` from the real binary to MinIO: the body is
streamed into a multipart upload, the stored object is exact, GDAL serves it
as a layer (also after a restart), and bad requests, disconnects and stalls
leave no object and no multipart upload behind."""
import http.client
import json
import os
import re
import socket
import time
import urllib.parse
import urllib.request

import pytest
from osgeo import gdal

from conftest import s3_bucket, serving

gdal.UseExceptions()
BUCKET = "tessera-e2e-sources"
TOKEN = "upload-token-0123456789abcdef"


@pytest.fixture(scope="module")
def bucket(s3):
    return s3_bucket(s3, BUCKET)


@pytest.fixture(scope="module")
def raster(tmp_path_factory):
    """An uncompressed GeoTIFF of the demo relief at half size: about 46 MB,
    nine 5 MiB parts."""
    path = tmp_path_factory.mktemp("raster") / "relief-raw.tif"
    gdal.Translate(str(path), os.path.join(os.environ["TESSERA_DATA_DIR"], "shadedrelief.tif"),
                   widthPct=50, heightPct=50, creationOptions=["COMPRESS=NONE", "TILED=YES"])
    return path


def config(tmp_path, s3, prefix, local, **admin):
    """A config with the admin API on MinIO and a layer `local` reading
    `local` from disk."""
    host = s3["endpoint"].removeprefix("http://")
    settings = {"max_upload_mb": 100, "part_size_mb": 5, "parts_in_flight": 2, "body_timeout_secs": 3}
    settings.update(admin)
    extra = "".join(f"    {k}: {v}\n" for k, v in settings.items())
    path = tmp_path / "tessera.yaml"
    path.write_text(f"""
gdal:
  config_options:
    AWS_S3_ENDPOINT: {host}
    AWS_HTTPS: "NO"
    AWS_VIRTUAL_HOSTING: "FALSE"
    AWS_ACCESS_KEY_ID: {s3['key']}
    AWS_SECRET_ACCESS_KEY: {s3['secret']}
admin:
    token: {TOKEN}
    sources_url: s3://{BUCKET}/{prefix}
    sources_file: {tmp_path / 'sources.json'}
    options: {{ endpoint: '{s3['endpoint']}', access_key_id: {s3['key']}, secret_access_key: {s3['secret']}, region: us-east-1, allow_http: true }}
{extra}layers:
  - name: local
    source: {{ path: "{local}" }}
    max_zoom: 8
""")
    return path


def put(server, name, body=None, headers=None, token=TOKEN):
    url = urllib.parse.urlsplit(server.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=120)
    h = {"Authorization": f"Bearer {token}"} if token else {}
    h.update(headers or {})
    try:
        conn.request("PUT", f"/admin/sources/{name}", body=body, headers=h,
                     encode_chunked="Transfer-Encoding" in h)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server answered before reading the whole body (413)
    resp = conn.getresponse()
    return resp.status, resp.read().decode()


def uploads_left(c, key):
    return c.list_multipart_uploads(Bucket=BUCKET, Prefix=key).get("Uploads", [])


def fetch_tile(server, path):
    """(X-Cache, body) of a tile."""
    with urllib.request.urlopen(server.url + path, timeout=60) as r:
        return r.headers["X-Cache"], r.read()


def objects(c, prefix):
    """Keys of the objects whose key starts with `prefix`."""
    return [o["Key"] for o in c.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])]


def exists(c, key):
    try:
        c.head_object(Bucket=BUCKET, Key=key)
        return True
    except c.exceptions.ClientError:
        return False


def test_an_uploaded_raster_is_stored_exactly_and_served(s3, bucket, raster, tmp_path, tmp_path_factory):
    prefix = f"run-{time.time_ns()}"
    cfg = config(tmp_path, s3, prefix, raster)
    data = raster.read_bytes()
    with serving(tmp_path_factory, "--config", str(cfg)) as server:
        # Chunked: http.client streams an iterable body with Transfer-Encoding: chunked.
        chunks = (data[i:i + 256 * 1024] for i in range(0, len(data), 256 * 1024))
        status, text = put(server, "relief", body=chunks, headers={"Transfer-Encoding": "chunked"})
        assert status == 201, text
        reply = json.loads(text)
        assert reply["bytes"] == len(data)
        assert reply["parts"] == -(-len(data) // (5 << 20))
        assert len(reply["crc32c"]) == 8
        # A new object per upload: <name>.<version>.<ext>.
        key = reply["object"].removeprefix(f"s3://{BUCKET}/")
        assert re.fullmatch(rf"{prefix}/relief\.[0-9a-f]+\.tif", key), reply["object"]
        stored = bucket.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        assert stored == data, "the stored object is the sent file, byte for byte"
        for path in ["/tiles/relief/WebMercatorQuad/2/2/1.png", "/tiles/relief/WebMercatorQuad/0/0/0.png"]:
            status, ctype, body = server.get(path)
            assert (status, ctype) == (200, "image/png")
            assert body == server.get(path.replace("/relief/", "/local/"))[2]
        # Content-Length upload of the same name replaces it.
        status, text = put(server, "relief", body=data, headers={"Content-Length": str(len(data))})
        assert status == 201, text
        replacement = json.loads(text)["object"].removeprefix(f"s3://{BUCKET}/")
        assert objects(bucket, f"{prefix}/relief.") == [replacement], "the replaced object is deleted"
    assert json.loads((tmp_path / "sources.json").read_text()) == {"relief": replacement.rsplit("/", 1)[1]}
    with serving(tmp_path_factory, "--config", str(cfg)) as server:
        status, ctype, _ = server.get("/tiles/relief/WebMercatorQuad/1/1/0.png")
        assert (status, ctype) == (200, "image/png"), "the source is served after a restart"


def test_bad_uploads_get_clear_errors_and_leave_nothing(s3, bucket, raster, tmp_path, tmp_path_factory):
    prefix = f"run-{time.time_ns()}"
    cfg = config(tmp_path, s3, prefix, raster, max_upload_mb=20)
    with serving(tmp_path_factory, "--config", str(cfg)) as server:
        assert put(server, "x", body=b"abc", token=None)[0] == 401
        assert put(server, "x", body=b"abc", token="wrong-token-0123456789abcdef")[0] == 401
        assert put(server, "x", body=b"")[0] == 400
        status, text = put(server, "x", body=b"", headers={"Transfer-Encoding": "chunked"})
        assert status == 400 and "empty" in text
        assert put(server, "local", body=b"abc")[0] == 409
        # Declared too large: refused before any byte is read.
        status, text = put(server, "big", body=b"", headers={"Content-Length": str(50 << 20)})
        assert status == 413, text
        # Chunked and too large: refused once past the limit, upload aborted.
        data = raster.read_bytes()
        chunks = (data[i:i + 1 << 20] for i in range(0, len(data), 1 << 20))
        status, _ = put(server, "big2", body=chunks, headers={"Transfer-Encoding": "chunked"})
        assert status == 413
        # Not a raster: refused before anything is stored.
        status, text = put(server, "notes", body=b"not a raster" * 1000)
        assert status == 415, text
        # Looks like a TIFF, is not one: GDAL refuses it and it is not kept.
        status, text = put(server, "broken", body=b"II*\0" + b"\0" * 100_000)
        assert status == 422, text
        # A client that goes away half way.
        url = urllib.parse.urlsplit(server.url)
        sock = socket.create_connection((url.hostname, url.port))
        sock.sendall((f"PUT /admin/sources/gone HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
                      f"Content-Length: {18 << 20}\r\n\r\n").encode() + data[:12 << 20])
        time.sleep(1)
        sock.close()
        # A client that stalls past body_timeout_secs (3 s).
        sock = socket.create_connection((url.hostname, url.port))
        sock.sendall((f"PUT /admin/sources/stalled HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
                      f"Content-Length: {18 << 20}\r\n\r\n").encode() + data[:11 << 20])
        sock.settimeout(30)
        answer = sock.recv(4096).decode(errors="replace")
        sock.close()
        assert answer.startswith("HTTP/1.1 408"), answer
        # The aborts run after the connections closed: waited for with a
        # deadline, never a fixed sleep.
        names = ["x", "big", "big2", "notes", "broken", "gone", "stalled"]
        deadline = time.monotonic() + 60
        while any(objects(bucket, f"{prefix}/{n}.") or uploads_left(bucket, f"{prefix}/{n}.") for n in names):
            assert time.monotonic() < deadline, "an object or a multipart upload was left"
            time.sleep(0.2)
        for name in names:
            assert objects(bucket, f"{prefix}/{name}.") == [], f"{name}: no object"
            assert uploads_left(bucket, f"{prefix}/{name}.") == [], f"{name}: no multipart upload left"
        for name in ["notes", "broken", "gone", "stalled"]:
            url = urllib.parse.urlsplit(server.url)
            conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
            conn.request("GET", f"/tiles/{name}/WebMercatorQuad/0/0/0.png")
            assert conn.getresponse().status == 404, f"{name} is not a layer"


def test_replacing_an_uploaded_source_serves_the_new_bytes(s3, bucket, raster, tmp_path, tmp_path_factory):
    # GDAL keeps what it read of a /vsis3/ object: a replaced source must
    # not be rendered from the old object's cached bytes.
    inverted = tmp_path / "inverted.tif"
    gdal.Translate(str(inverted), str(raster), scaleParams=[[0, 255, 255, 0]],
                   creationOptions=["COMPRESS=NONE", "TILED=YES"])
    prefix = f"run-{time.time_ns()}"
    cfg = config(tmp_path, s3, prefix, raster)
    cfg.write_text(cfg.read_text() + f"""  - name: local_inverted
    source: {{ path: "{inverted}" }}
    max_zoom: 8
""")
    query = ("/wms?SERVICE=WMS&REQUEST=GetMap&VERSION=1.3.0&LAYERS={}&STYLES=&CRS=EPSG:4326"
             "&BBOX=-60,-120,60,120&WIDTH=300&HEIGHT=150&FORMAT=image/png")
    with serving(tmp_path_factory, "--config", str(cfg)) as server:
        status, text = put(server, "swap", body=raster.read_bytes())
        assert status == 201, text
        first = server.get(query.format("swap"))[2]
        assert first == server.get(query.format("local"))[2]
        status, text = put(server, "swap", body=inverted.read_bytes())
        assert status == 201, text
        second = server.get(query.format("swap"))[2]
        assert second == server.get(query.format("local_inverted"))[2], "the new bytes are served"
        assert second != first
        # Cached tiles too: the replaced source's tiles are not served as
        # HITs of the new one.
        tile = "/tiles/swap/WebMercatorQuad/2/2/1.png"
        status, text = put(server, "swap", body=raster.read_bytes())
        assert status == 201, text
        assert fetch_tile(server, tile)[0] == "MISS"
        assert fetch_tile(server, tile) == ("HIT", fetch_tile(server, tile.replace("/swap/", "/local/"))[1])
        status, text = put(server, "swap", body=inverted.read_bytes())
        assert status == 201, text
        cache, body = fetch_tile(server, tile)
        assert cache == "MISS", "a replaced source's tiles are rendered again"
        assert body == fetch_tile(server, tile.replace("/swap/", "/local_inverted/"))[1]
