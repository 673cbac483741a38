"""Access control on reads (`auth:`): API keys (as SHA-256 hashes) and
JWTs (HS256 with a secret; RS256, ES256 and EdDSA from a JWKS), per layer
and per grant, through the real binary: curl-like requests, OWSLib, GDAL
(GDAL_HTTP_HEADERS) and QGIS with a key in the URL. Refused: bad keys,
expired tokens, a wrong audience, `alg: none`, HS256 signed with the RSA
public key. Two callers with different grants hammering one metatile get
one render and only what they may; a rate limit answers 429 then lets the
caller in again; the admin token stays separate."""
import base64
import concurrent.futures
import hashlib
import hmac
import http.server
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm
from owslib.wms import WebMapService
from owslib.wmts import WebMapTileService

from conftest import ROOT, http_get as get, metric, serving
from imaging import decode

KEY_A = "key-a-0123456789abcdef0123"   # relief and relief-*: tiles only
KEY_B = "key-b-0123456789abcdef0123"   # relief: everything
KEY_C = "key-c-0123456789abcdef0123"   # nothing of relief
SECRET = "a-shared-secret-of-at-least-32-bytes!"
ISSUER = "https://id.example.test/"
AUDIENCE = "tessera"
RELIEF = f"{ROOT}/data/shadedrelief-5400.tif"


def sha(key):
    return hashlib.sha256(key.encode()).hexdigest()


@pytest.fixture(scope="module")
def signing_keys():
    """An RSA, a P-256 and an Ed25519 key, with the JWKS of their public
    halves (kid rsa-1, ec-1, ed-1)."""
    keys = {"rsa-1": (rsa.generate_private_key(public_exponent=65537, key_size=2048), RSAAlgorithm, "RS256"),
            "ec-1": (ec.generate_private_key(ec.SECP256R1()), ECAlgorithm, "ES256"),
            "ed-1": (ed25519.Ed25519PrivateKey.generate(), OKPAlgorithm, "EdDSA")}
    jwks = []
    for kid, (private, algorithm, _) in keys.items():
        jwk = json.loads(algorithm.to_jwk(private.public_key()))
        jwk["kid"] = kid
        jwks.append(jwk)
    return keys, {"keys": jwks}


def config(tmp_path, jwks_path=None, extra_auth="", rate="", failed="{ per_second: 1000, burst: 1000 }"):
    jwt_section = ""
    if jwks_path:
        jwt_section = f"""
  jwt:
    jwks: {jwks_path}
    secret: "{SECRET}"
    issuer: "{ISSUER}"
    audience: {AUDIENCE}
    leeway_secs: 5"""
    path = tmp_path / "auth.yaml"
    path.write_text(f"""
auth:
  keys:
    - {{ id: partner-a, sha256: {sha(KEY_A)}, layers: ["relief", "relief-*"], grants: [tiles]{rate} }}
    - {{ id: partner-b, sha256: {sha(KEY_B)}, layers: [relief] }}
    - {{ id: partner-c, sha256: {sha(KEY_C)}, layers: [open] }}
  public: [open]
  failed_credentials: {failed}{jwt_section}{extra_auth}
layers:
  - name: relief
    source: {{ path: {RELIEF} }}
    grids: [WebMercatorQuad]
    max_zoom: 6
  - name: relief-copy
    source: {{ path: {RELIEF} }}
    grids: [WebMercatorQuad]
    max_zoom: 6
  - name: open
    source: {{ path: {RELIEF} }}
    grids: [WebMercatorQuad]
    max_zoom: 6
""")
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory, signing_keys):
    tmp = tmp_path_factory.mktemp("auth")
    jwks = tmp / "jwks.json"
    jwks.write_text(json.dumps(signing_keys[1]))
    with serving(tmp_path_factory, "--config", str(config(tmp, jwks))) as s:
        yield s


def token(claims=None, key=SECRET, algorithm="HS256", kid=None, **overrides):
    now = int(time.time())
    body = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "exp": now + 300, "nbf": now - 5,
            "layers": ["relief"], **(claims or {})}
    body.update(overrides)
    return jwt.encode(body, key, algorithm=algorithm, headers={"kid": kid} if kid else None)


TILE = "/tiles/{}/WebMercatorQuad/2/1/1.png"


def test_without_credentials_only_public_layers_are_served_or_listed(server):
    status, headers, _ = get(server, TILE.format("open"))
    assert status == 200 and headers["Cache-Control"].startswith("public")
    status, headers, body = get(server, TILE.format("relief"))
    assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer"), body
    assert b"X-API-Key" in body
    assert get(server, "/tiles/relief/WebMercatorQuad/tilejson.json")[0] == 401
    assert get(server, "/ogcapi/collections/relief")[0] == 401
    assert get(server, "/ogcapi/collections/relief/map?width=64&height=32")[0] == 401
    assert get(server, "/ogcapi/map?width=64&height=32")[0] == 401, "the dataset map draws protected layers"
    assert get(server, "/ogcapi/map?width=64&height=32&collections=open")[0] == 200
    wms = get(server, "/wms?SERVICE=WMS&REQUEST=GetCapabilities")[2].decode()
    assert "<Name>open</Name>" in wms and "<Name>relief</Name>" not in wms
    wmts = get(server, "/wmts/1.0.0/WMTSCapabilities.xml")[2].decode()
    assert "<ows:Identifier>open</ows:Identifier>" in wmts and ">relief<" not in wmts
    ids = [c["id"] for c in json.loads(get(server, "/ogcapi/collections?f=json")[2])["collections"]]
    assert ids == ["open"], ids
    index = get(server, "/")[2].decode()
    assert "/preview/open" in index and "/preview/relief" not in index
    status, _, body = get(server, "/wms?SERVICE=WMS&VERSION=1.3.0&REQUEST=GetMap&LAYERS=relief&STYLES=&CRS=EPSG:4326"
                                  "&BBOX=-90,-180,90,180&WIDTH=64&HEIGHT=32&FORMAT=image/png")
    assert status == 401 and b"ServiceExceptionReport" in body


def test_api_keys_by_header_bearer_or_query_each_with_its_grants(server):
    for headers in ({"X-API-Key": KEY_A}, {"Authorization": f"Bearer {KEY_A}"}):
        status, h, body = get(server, TILE.format("relief"), headers)
        assert status == 200 and h["Cache-Control"].startswith("private"), (headers, status)
        assert decode(body).shape[1:] == (256, 256)
    assert get(server, TILE.format("relief-copy") + f"?key={KEY_A}")[0] == 200, "a glob, a query key"
    # The query key is not part of the tile's cache key: one tile, one ETag.
    by_header = get(server, TILE.format("relief"), {"X-API-Key": KEY_B})
    by_query = get(server, TILE.format("relief") + f"?key={KEY_A}")
    assert by_query[1]["X-Cache"] == "HIT" and by_query[1]["ETag"] == by_header[1]["ETag"]
    assert by_query[2] == by_header[2]
    # A wrong key is a 401 even for a public layer; a layer not granted a 403.
    assert get(server, TILE.format("open"), {"X-API-Key": "key-z-0123456789abcdef0123"})[0] == 401
    assert get(server, TILE.format("relief"), {"X-API-Key": KEY_C})[0] == 403
    # partner-a may read tiles, not maps nor feature info; partner-b may.
    getmap = ("/wms?SERVICE=WMS&VERSION=1.3.0&REQUEST=GetMap&LAYERS=relief&STYLES=&CRS=EPSG:4326"
              "&BBOX=-90,-180,90,180&WIDTH=64&HEIGHT=32&FORMAT=image/png")
    assert get(server, getmap, {"X-API-Key": KEY_A})[0] == 403
    status, h, _ = get(server, getmap, {"X-API-Key": KEY_B})
    assert status == 200 and h["Cache-Control"] == "private"
    info = ("/wms?SERVICE=WMS&VERSION=1.3.0&REQUEST=GetFeatureInfo&LAYERS=relief&QUERY_LAYERS=relief&STYLES="
            "&CRS=EPSG:4326&BBOX=-90,-180,90,180&WIDTH=64&HEIGHT=32&I=10&J=10&INFO_FORMAT=application/json")
    assert get(server, info, {"X-API-Key": KEY_A})[0] == 403
    assert get(server, info, {"X-API-Key": KEY_B})[0] == 200
    # Documents list what the caller may read.
    wms = get(server, "/wms?SERVICE=WMS&REQUEST=GetCapabilities", {"X-API-Key": KEY_B})[2].decode()
    assert "<Name>relief</Name>" in wms and "<Name>relief-copy</Name>" not in wms
    ids = {c["id"] for c in json.loads(get(server, "/ogcapi/collections?f=json", {"X-API-Key": KEY_A})[2])["collections"]}
    assert ids == {"relief", "relief-copy", "open"}, ids


def test_a_query_key_is_carried_by_the_capabilities_and_kept_out_of_the_log(server):
    wms = get(server, f"/wms?SERVICE=WMS&REQUEST=GetCapabilities&key={KEY_B}")[2].decode()
    assert f"/wms?key={KEY_B}&amp;" in wms, wms[:2000]
    wmts = get(server, f"/wmts/1.0.0/WMTSCapabilities.xml?key={KEY_A}")[2].decode()
    assert f"{{TileCol}}.png?key={KEY_A}" in wmts and f"/wmts?key={KEY_A}&amp;" in wmts
    tj = json.loads(get(server, f"/tiles/relief/WebMercatorQuad/tilejson.json?key={KEY_A}")[2])
    assert tj["tiles"][0].endswith(f".png?key={KEY_A}"), tj["tiles"]
    assert get(server, tj["tiles"][0].replace(server.url, "").format(z=1, x=0, y=0))[0] == 200
    # The access log names the caller, never the key.
    deadline = time.monotonic() + 10
    while "partner-a" not in server.log.read_text():
        assert time.monotonic() < deadline, "no access-log line names partner-a"
        time.sleep(0.1)
    log = server.log.read_text()
    assert KEY_A not in log and KEY_B not in log and "key=***" in log


def test_a_percent_encoded_credential_name_is_read_and_kept_out_of_the_log_alike(server):
    # `%6bey` is `key`: the caller is identified by it, and the log hides
    # it as it hides `key=`.
    for name, key in [("%6bey", KEY_A), ("k%65y", KEY_B), ("%4B%45%59", KEY_C)]:
        status, _, _ = get(server, TILE.format("open") + f"?{name}={key}")
        assert status == 200, name
    status, _, _ = get(server, TILE.format("relief") + f"?k%65y={KEY_A}")
    assert status == 200, "the encoded name is a credential"
    jwt_token = token()
    assert get(server, TILE.format("relief") + f"?t%6fken={jwt_token}")[0] == 200
    deadline = time.monotonic() + 10
    while "t%6fken=***" not in server.log.read_text():
        assert time.monotonic() < deadline, "no access-log line with the redacted token"
        time.sleep(0.1)
    log = server.log.read_text()
    for secret in (KEY_A, KEY_B, KEY_C, jwt_token):
        assert secret not in log, secret[:8]
    assert "%6bey=***" in log and "k%65y=***" in log


def test_a_token_naming_critical_extensions_is_refused(server):
    crit = jwt.encode({"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "exp": int(time.time()) + 300,
                       "layers": ["relief"]}, SECRET, algorithm="HS256",
                      headers={"crit": ["http://example.test/unknown"], "http://example.test/unknown": True})
    status, _, body = get(server, TILE.format("relief"), {"Authorization": f"Bearer {crit}"})
    assert status == 401, body
    assert get(server, TILE.format("relief"), {"Authorization": f"Bearer {token()}"})[0] == 200


@pytest.mark.parametrize("url", ["http://127.0.0.1.nip.io/jwks.json", "http://localhost.attacker.test/jwks.json",
                                 "http://127.0.0.1@attacker.test/jwks.json", "http://localhost:80@attacker.test/jwks.json"])
def test_a_jwks_url_in_clear_is_only_taken_from_this_machine(tmp_path, url):
    cfg = config(tmp_path, url)
    result = subprocess.run([os.environ["TESSERA_BIN"], "check", str(cfg)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode != 0, result.stdout
    assert "auth.jwt.jwks" in result.stderr and url in result.stderr, result.stderr


class HugeJwks(http.server.BaseHTTPRequestHandler):
    """Answers a JWKS that never ends, without a Content-Length, counting
    the bytes it could send."""
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        chunk = b" " * (1 << 16)
        try:
            self.wfile.write(b'{"keys": [')
            for _ in range(1 << 15):   # up to 2 GiB
                self.wfile.write(chunk)
                self.server.sent += len(chunk)
        except OSError:
            pass

    def log_message(self, *args):
        pass


def test_an_endless_jwks_is_refused_as_it_streams_in(tmp_path, tmp_path_factory, signing_keys):
    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), HugeJwks)
    web.sent = 0
    threading.Thread(target=web.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{web.server_address[1]}/jwks.json"
    try:
        with serving(tmp_path_factory, "--config", str(config(tmp_path, url))) as s:
            deadline = time.monotonic() + 30
            while "more than 1 MiB" not in s.log_text(settle=0.1):
                assert time.monotonic() < deadline, s.log_text()
                time.sleep(0.2)
            rss = int(next(line.split()[1] for line in open(f"/proc/{s.proc.pid}/status")
                           if line.startswith("VmHWM:")))
            # Refused within a few MiB of the cap, not after the whole body.
            assert web.sent < 256 << 20, web.sent
            assert rss < 512 * 1024, f"peak RSS {rss} kB"
            assert get(s, TILE.format("relief"), {"X-API-Key": KEY_A})[0] == 200
    finally:
        web.shutdown()


def test_owslib_and_gdal_send_keys_in_headers(server, tmp_path):
    wms = WebMapService(f"{server.url}/wms", version="1.3.0", headers={"X-API-Key": KEY_B})
    assert set(wms.contents) == {"relief", "open"}
    img = wms.getmap(layers=["relief"], styles=[""], srs="EPSG:4326", bbox=(-180, -90, 180, 90),
                     size=(128, 64), format="image/png")
    assert decode(img.read()).std() > 10
    wmts = WebMapTileService(f"{server.url}/wmts/1.0.0/WMTSCapabilities.xml", headers={"X-API-Key": KEY_A})
    assert set(wmts.contents) == {"relief", "relief-copy", "open"}
    # GDAL's WMTS driver with the key in GDAL_HTTP_HEADERS; without it the
    # protected layer is not there.
    out = tmp_path / "relief.tif"
    src = f"WMTS:{server.url}/wmts/1.0.0/WMTSCapabilities.xml,layer=relief,tilematrixset=WebMercatorQuad:0-6"
    env = {**os.environ, "GDAL_HTTP_HEADERS": f"X-API-Key: {KEY_A}"}
    window = ["-projwin", "-10000000", "10000000", "10000000", "-10000000", "-outsize", "256", "256"]
    r = subprocess.run(["gdal_translate", "-q", *window, src, str(out)], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    info = json.loads(subprocess.run(["gdalinfo", "-json", "-stats", str(out)], capture_output=True, text=True,
                                     check=True).stdout)
    assert info["bands"][0]["stdDev"] > 10
    r = subprocess.run(["gdal_translate", "-q", *window, src, str(tmp_path / "no.tif")], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300, env={**os.environ, "GDAL_HTTP_HEADERS": ""})
    assert r.returncode != 0


def test_qgis_reads_a_layer_with_the_key_in_the_url(server):
    run = subprocess.run(
        [sys.executable, os.path.join(os.path.dirname(__file__), "qgis_wms_key.py"),
         f"{server.url}/wms?key={KEY_B}", "relief"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert run.returncode == 0, run.stderr[-2000:]
    found = json.loads(run.stdout.strip().splitlines()[-1])
    assert found["valid"] and found["drawn"] > 0.9, found
    # Without the key QGIS gets no such layer.
    run = subprocess.run(
        [sys.executable, os.path.join(os.path.dirname(__file__), "qgis_wms_key.py"), f"{server.url}/wms", "relief"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    found = json.loads(run.stdout.strip().splitlines()[-1])
    assert found["drawn"] == 0.0, found


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def test_tokens_are_checked_and_the_tricks_refused(server, signing_keys):
    keys, _ = signing_keys
    bearer = lambda t: {"Authorization": f"Bearer {t}"}  # noqa: E731
    assert get(server, TILE.format("relief"), bearer(token()))[0] == 200
    for kid, (private, _, alg) in keys.items():
        assert get(server, TILE.format("relief"), bearer(token(key=private, algorithm=alg, kid=kid)))[0] == 200, alg
    assert get(server, TILE.format("relief") + f"?token={token()}")[0] == 200
    refused = {
        "expired": token(exp=int(time.time()) - 60),
        "not yet valid": token(nbf=int(time.time()) + 600),
        "wrong audience": token(aud="someone-else"),
        "wrong issuer": token(iss="https://evil.test/"),
        "wrong secret": token(key="another-secret-of-at-least-32-bytes"),
        "alg none": jwt.encode({"iss": ISSUER, "aud": AUDIENCE, "exp": int(time.time()) + 300,
                                "layers": ["relief"]}, None, algorithm="none"),
        "unknown kid": token(key=keys["rsa-1"][0], algorithm="RS256", kid="rsa-9"),
        "a key of another family": token(key=keys["ec-1"][0], algorithm="ES256", kid="rsa-1"),
    }
    # HS256 signed with the RSA public key as the HMAC secret (the key
    # confusion attack).
    pem = keys["rsa-1"][0].public_key().public_bytes(serialization.Encoding.PEM,
                                                      serialization.PublicFormat.SubjectPublicKeyInfo)
    head = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "rsa-1"}).encode())
    body = b64(json.dumps({"iss": ISSUER, "aud": AUDIENCE, "exp": int(time.time()) + 300,
                           "layers": ["relief"]}).encode())
    signature = b64(hmac.new(pem, f"{head}.{body}".encode(), hashlib.sha256).digest())
    refused["HS256 with the RSA public key"] = f"{head}.{body}.{signature}"
    for why, bad in refused.items():
        status, headers, _ = get(server, TILE.format("relief"), bearer(bad))
        assert status == 401 and "WWW-Authenticate" in headers, (why, status)
    # Valid, but not for this layer, or not for maps.
    assert get(server, TILE.format("relief-copy"), bearer(token()))[0] == 403
    getmap = ("/wms?SERVICE=WMS&VERSION=1.3.0&REQUEST=GetMap&LAYERS=relief&STYLES=&CRS=EPSG:4326"
              "&BBOX=-90,-180,90,180&WIDTH=64&HEIGHT=32&FORMAT=image/png")
    assert get(server, getmap, bearer(token({"grants": ["tiles"]})))[0] == 403
    assert get(server, getmap, bearer(token({"grants": ["maps"], "layers": ["relief*"]})))[0] == 200


class Jwks(http.server.BaseHTTPRequestHandler):
    """Serves `server.document` as the JWKS, or 500 while `server.down`."""
    def do_GET(self):
        self.server.reads += 1
        if self.server.down:
            self.send_response(500)
            self.end_headers()
            return
        data = json.dumps(self.server.document).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_a_jwks_url_is_read_again_and_its_last_good_keys_kept(tmp_path, tmp_path_factory, signing_keys):
    keys, jwks = signing_keys
    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Jwks)
    web.document, web.down, web.reads = {"keys": [jwks["keys"][0]]}, False, 0
    threading.Thread(target=web.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{web.server_address[1]}/jwks.json"
    cfg = config(tmp_path, url, extra_auth="\n    refresh_secs: 1")
    rsa_token = token(key=keys["rsa-1"][0], algorithm="RS256", kid="rsa-1")
    ec_token = token(key=keys["ec-1"][0], algorithm="ES256", kid="ec-1")
    try:
        with serving(tmp_path_factory, "--config", str(cfg)) as s:
            def status(t):
                return get(s, TILE.format("relief"), {"Authorization": f"Bearer {t}"})[0]

            deadline = time.monotonic() + 20
            while status(rsa_token) != 200:
                assert time.monotonic() < deadline, "the JWKS was not read"
                time.sleep(0.2)
            assert status(ec_token) == 401, "ec-1 is not in the JWKS yet"
            # The JWKS fails: the last good keys stay.
            web.down = True
            reads = web.reads
            deadline = time.monotonic() + 20
            while web.reads < reads + 2:
                assert time.monotonic() < deadline, "the JWKS was not read again"
                time.sleep(0.2)
            assert status(rsa_token) == 200
            # A rotation: the new key is taken at the next read.
            web.document, web.down = jwks, False
            deadline = time.monotonic() + 20
            while status(ec_token) != 200:
                assert time.monotonic() < deadline, "the rotated JWKS was not taken"
                time.sleep(0.2)
    finally:
        web.shutdown()


def test_callers_with_other_grants_on_one_metatile_get_one_render_and_only_their_due(tmp_path, tmp_path_factory):
    with serving(tmp_path_factory, "--config", str(config(tmp_path))) as s:
        tiles = [(3, x, y) for x in range(4) for y in range(4)]   # one 4x4 metatile
        callers = {"a": {"X-API-Key": KEY_A}, "b": {"X-API-Key": KEY_B}, "c": {"X-API-Key": KEY_C},
                   "anonymous": {}}
        jobs = [(who, t) for t in tiles for who in callers] * 3
        with concurrent.futures.ThreadPoolExecutor(48) as pool:
            answers = list(pool.map(
                lambda j: (j, get(s, "/tiles/relief/WebMercatorQuad/%d/%d/%d.png" % j[1], callers[j[0]])), jobs))
        by_tile = {}
        for (who, t), (status, headers, body) in answers:
            if who in ("a", "b"):
                assert status == 200 and headers["Cache-Control"].startswith("private"), (who, t, status)
                by_tile.setdefault(t, set()).add(body)
            elif who == "c":
                assert status == 403 and not body.startswith(b"\x89PNG"), (who, t, status)
            else:
                assert status == 401 and not body.startswith(b"\x89PNG"), (who, t, status)
        assert all(len(v) == 1 for v in by_tile.values()) and len(by_tile) == 16
        assert metric(s, "tessera_metatile_renders_total", layer="relief") == 1
        assert metric(s, "tessera_caller_requests_total", caller="partner-c", outcome="forbidden") == 48
        assert metric(s, "tessera_caller_requests_total", caller="partner-a", outcome="miss") \
            + metric(s, "tessera_caller_requests_total", caller="partner-a", outcome="hit") == 48


def test_a_rate_limit_answers_429_then_lets_the_caller_in_again(tmp_path, tmp_path_factory):
    cfg = config(tmp_path, rate=", rate: { per_second: 0.5, burst: 3 }")
    with serving(tmp_path_factory, "--config", str(cfg)) as s:
        statuses = [get(s, TILE.format("relief"), {"X-API-Key": KEY_A}) for _ in range(6)]
        codes = [st for st, _, _ in statuses]
        assert codes[:3] == [200, 200, 200] and 429 in codes[3:], codes
        limited = next(h for st, h, _ in statuses if st == 429)
        wait = int(limited["Retry-After"])
        assert 1 <= wait <= 3, wait
        # Another caller is not held back.
        other = get(s, TILE.format("relief"), {"X-API-Key": KEY_B})
        assert other[0] == 200
        time.sleep(wait)
        again = get(s, TILE.format("relief"), {"X-API-Key": KEY_A})
        assert again[0] == 200
        assert metric(s, "tessera_caller_requests_total", caller="partner-a", outcome="limited") >= 1
        # Only answered hits count as hits: one refused for its rate (the
        # tile is held in memory, so it was found the short way) does not.
        answered_hits = sum(1 for st, h, _ in statuses + [other, again] if st == 200 and h["X-Cache"] == "HIT")
        assert answered_hits >= 2
        assert metric(s, "tessera_tile_requests_total", layer="relief", result="hit") == answered_hits


def test_a_miss_budget_serves_cached_tiles_and_refuses_renders_past_it(tmp_path, tmp_path_factory):
    cfg = config(tmp_path, rate=", rate: { per_second: 100, misses_per_second: 0.05, miss_burst: 2 }")
    path = "/tiles/relief/WebMercatorQuad/5/{}/0.png"
    with serving(tmp_path_factory, "--config", str(cfg)) as s:
        key = {"X-API-Key": KEY_A}
        # Two renders (tiles of two metatiles) within the budget, a third past it.
        for x in (0, 4):
            status, headers, _ = get(s, path.format(x), key)
            assert status == 200 and headers["X-Cache"] == "MISS", (x, status)
        status, headers, _ = get(s, path.format(8), key)
        assert status == 429 and int(headers["Retry-After"]) >= 1, status
        # What is cached is still served (once its save landed).
        deadline = time.monotonic() + 30
        while (answer := get(s, path.format(0), key))[0] != 200:
            assert answer[0] == 429 and time.monotonic() < deadline, answer[0]
            time.sleep(0.2)
        assert answer[1]["X-Cache"] == "HIT"
        assert get(s, path.format(1), key)[1]["X-Cache"] == "HIT", "a sibling of the same metatile"
        # Another caller renders as it may.
        assert get(s, path.format(8), {"X-API-Key": KEY_B})[0] == 200
        assert metric(s, "tessera_caller_requests_total", caller="partner-a", outcome="limited") >= 1


def test_maps_and_dataset_tiles_are_renders_counted_by_pixels_against_the_miss_budget(tmp_path, tmp_path_factory):
    cfg = config(tmp_path, rate=", rate: { per_second: 100, misses_per_second: 0.05, miss_burst: 4 }")
    cfg.write_text(cfg.read_text().replace('layers: ["relief", "relief-*"], grants: [tiles]',
                                           'layers: ["relief", "relief-*"], grants: [tiles, maps]'))
    key = {"X-API-Key": KEY_A}
    getmap = ("/wms?SERVICE=WMS&VERSION=1.3.0&REQUEST=GetMap&LAYERS=relief&STYLES=&CRS=EPSG:4326"
              "&BBOX=-90,-180,90,180&WIDTH={}&HEIGHT={}&FORMAT=image/png")
    with serving(tmp_path_factory, "--config", str(cfg)) as s:
        # One map of a tile's worth costs one miss; a 1024x512 map eight:
        # served (the budget held a miss), then paid for.
        assert get(s, getmap.format(256, 256), key)[0] == 200
        assert get(s, getmap.format(1024, 512), key)[0] == 200
        for path in (getmap.format(64, 64), "/ogcapi/collections/relief/map?width=64&height=64",
                     "/ogcapi/map/tiles/WebMercatorQuad/1/0/0?collections=relief"):
            status, headers, _ = get(s, path, key)
            assert status == 429 and int(headers["Retry-After"]) >= 60, (path, status)
        # Another caller is not held back.
        assert get(s, getmap.format(1024, 512), {"X-API-Key": KEY_B})[0] == 200


def test_rates_outside_a_sane_range_are_refused_by_check_and_a_slow_one_waits_without_failing(
        tmp_path, tmp_path_factory):
    for rate in ("per_second: 1e-20", "per_second: 10, misses_per_second: 1e-20", "per_second: 1e7"):
        cfg = config(tmp_path, rate=f", rate: {{ {rate} }}")
        r = subprocess.run([os.environ["TESSERA_BIN"], "check", str(cfg)], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode != 0 and "per_second" in r.stderr, (rate, r.stderr[-1000:])
    cfg = config(tmp_path, rate=", rate: { per_second: 1.2e-5, burst: 1 }")
    with serving(tmp_path_factory, "--config", str(cfg)) as s:
        assert get(s, TILE.format("relief"), {"X-API-Key": KEY_A})[0] == 200
        status, headers, _ = get(s, TILE.format("relief"), {"X-API-Key": KEY_A})
        assert status == 429 and 1 <= int(headers["Retry-After"]) <= 86400, (status, dict(headers))


def test_an_address_guessing_keys_is_held_back_and_metrics_can_need_a_grant(tmp_path, tmp_path_factory):
    # The defaults: 20 credentials that are not valid at once, then 1 a second.
    cfg = config(tmp_path, failed="{ per_second: 1, burst: 20 }",
                 extra_auth="\n  metrics: granted")
    cfg.write_text(cfg.read_text().replace("layers: [open] }", "layers: [open], grants: [tiles, metrics] }"))
    with serving(tmp_path_factory, "--config", str(cfg)) as s:
        # Held in memory: the short way would answer it.
        assert get(s, TILE.format("relief"), {"X-API-Key": KEY_B})[0] == 200
        codes = [get(s, TILE.format("open"), {"X-API-Key": f"guess-{i:04d}"})[0] for i in range(40)]
        assert codes[:20] == [401] * 20 and set(codes[20:]) == {429}, codes
        # While held back, a right key from that address is not even looked
        # at, for a cached tile too...
        status, headers, _ = get(s, TILE.format("relief"), {"X-API-Key": KEY_B})
        assert status == 429 and int(headers["Retry-After"]) >= 1
        # ...and a request without a credential is served as before.
        assert get(s, TILE.format("open"))[0] == 200
        # /metrics only to a caller granted `metrics` (partner-c); the
        # held-back address is let in again after its wait.
        time.sleep(int(headers["Retry-After"]))
        assert get(s, "/metrics")[0] == 401
        assert get(s, "/metrics", {"X-API-Key": KEY_B})[0] == 403
        status, _, body = get(s, "/metrics", {"X-API-Key": KEY_C})
        assert status == 200 and b"tessera_" in body


def test_the_admin_token_and_the_api_keys_stay_apart(tmp_path, tmp_path_factory, s3):
    admin_token = "admin-token-0123456789abcdef"
    cfg = config(tmp_path)
    cfg.write_text(cfg.read_text() + (
        f"admin:\n  token: {admin_token}\n  sources_url: s3://tessera-test/auth-admin\n  sources_file: sources.json\n"
        f"  options: {{ endpoint: '{s3['endpoint']}', access_key_id: {s3['key']}, "
        f"secret_access_key: {s3['secret']}, region: us-east-1, allow_http: true }}\n"))
    with serving(tmp_path_factory, "--config", str(cfg)) as s:
        def reload(headers):
            request = urllib.request.Request(s.url + "/admin/reload", method="POST", headers=headers)
            try:
                with urllib.request.urlopen(request, timeout=60) as r:
                    return r.status
            except urllib.error.HTTPError as e:
                return e.code
        assert reload({"Authorization": f"Bearer {KEY_B}"}) == 401, "an API key is not the admin token"
        assert reload({"Authorization": f"Bearer {admin_token}"}) == 200
        assert get(s, TILE.format("relief"), {"Authorization": f"Bearer {admin_token}"})[0] == 401
        assert get(s, TILE.format("relief"), {"X-API-Key": admin_token})[0] == 401
