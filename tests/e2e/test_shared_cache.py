"""Answers that depend on the caller are never kept by a shared cache.

tessera runs behind Debian's nginx with `proxy_cache` and `proxy_cache_valid
200 1m` (what a CDN's default TTL does too). Every route of a protected
layer and every document that lists layers is fetched first with a key
that may read everything, then anonymously: the anonymous caller must get
its own answer from tessera (a 401, or a document without the protected
layer), never the keyed one out of nginx's cache. A public layer's tile is
cached (the check that the cache is on at all)."""
import pytest

from conftest import free_port, http_get as get, nginx_running, serving
from test_auth import KEY_B, config

# The protected layer's every route (KEY_B may read `relief` in every way).
PROTECTED = [
    "/tiles/relief/WebMercatorQuad/2/1/1.png",
    "/tiles/relief/WebMercatorQuad/tilejson.json",
    "/tms/1.0.0/relief/WebMercatorQuad/2/1/2.png",
    "/wmts/1.0.0/relief/default/WebMercatorQuad/2/1/1.png",
    "/wmts?SERVICE=WMTS&REQUEST=GetTile&VERSION=1.0.0&LAYER=relief&STYLE=default&TILEMATRIXSET=WebMercatorQuad"
    "&TILEMATRIX=2&TILEROW=1&TILECOL=1&FORMAT=image/png",
    "/wms?SERVICE=WMS&VERSION=1.3.0&REQUEST=GetMap&LAYERS=relief&STYLES=&CRS=EPSG:4326"
    "&BBOX=-90,-180,90,180&WIDTH=64&HEIGHT=32&FORMAT=image/png",
    "/wms?SERVICE=WMS&VERSION=1.3.0&REQUEST=GetFeatureInfo&LAYERS=relief&QUERY_LAYERS=relief&STYLES="
    "&CRS=EPSG:4326&BBOX=-90,-180,90,180&WIDTH=64&HEIGHT=32&I=10&J=10&INFO_FORMAT=text/plain",
    "/wms?SERVICE=WMS&VERSION=1.3.0&REQUEST=GetLegendGraphic&LAYER=relief&FORMAT=image/png",
    "/ogcapi/collections/relief",
    "/ogcapi/collections/relief?f=json",
    "/ogcapi/collections/relief/map?width=64&height=32",
    "/ogcapi/collections/relief/styles/default/map?width=64&height=32",
    "/ogcapi/collections/relief/map/tiles",
    "/ogcapi/collections/relief/map/tiles/WebMercatorQuad",
    "/ogcapi/collections/relief/map/tiles/WebMercatorQuad/2/1/1",
    "/ogcapi/collections/relief/styles/default/map/tiles/WebMercatorQuad/2/1/1",
    "/ogcapi/collections/relief/tiles",
    "/ogcapi/map?width=64&height=32&collections=relief",
    "/ogcapi/map/tiles/WebMercatorQuad/2/1/1?collections=relief",
    "/preview/relief",
    "/styles/relief.json",
]

# Documents whose content is filtered by caller.
DOCUMENTS = [
    "/",
    "/wms?SERVICE=WMS&REQUEST=GetCapabilities",
    "/wms?SERVICE=WMS&VERSION=1.1.1&REQUEST=GetCapabilities",
    "/wmts/1.0.0/WMTSCapabilities.xml",
    "/wmts?SERVICE=WMTS&REQUEST=GetCapabilities",
    "/ogcapi/collections",
    "/ogcapi/collections?f=json",
    "/ogcapi/map/tiles",
    "/ogcapi/map/tiles/WebMercatorQuad",
    "/ogcapi/map?width=64&height=32",
]

# `user root`: the cache lies under the test's private temporary directory
# (ignored when nginx is not started as root).
NGINX = """
user root;
worker_processes 1;
events {{ worker_connections 256; }}
http {{
    proxy_cache_path {cache} keys_zone=shared:1m;
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass {upstream};
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_cache shared;
            proxy_cache_valid 200 1m;
            add_header X-Shared-Cache $upstream_cache_status always;
        }}
    }}
}}
"""


class Front:
    def __init__(self, port):
        self.url = f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def front(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shared-cache")
    with serving(tmp_path_factory, "--config", str(config(tmp))) as s:
        port = free_port()
        conf = NGINX.format(cache=tmp / "cache", port=port, upstream=s.url)
        with nginx_running(tmp, conf):
            yield Front(port)


def test_a_public_tile_is_kept_by_the_shared_cache(front):
    path = "/tiles/open/WebMercatorQuad/2/1/1.png"
    first = get(front, path)
    assert first[0] == 200 and first[1]["Cache-Control"].startswith("public")
    second = get(front, path)
    assert second[0] == 200 and second[1]["X-Shared-Cache"] == "HIT", dict(second[1])


@pytest.mark.parametrize("path", PROTECTED + DOCUMENTS)
def test_an_answer_for_one_caller_is_never_served_to_another(front, path):
    status, headers, body = get(front, path, {"X-API-Key": KEY_B})
    # Once more with the key, then anonymously.
    again = get(front, path, {"X-API-Key": KEY_B})
    anonymous_status, anonymous_headers, anonymous_body = get(front, path)
    if (status, body) == (anonymous_status, anonymous_body):
        # The same answer for both (a document naming no layer): nothing
        # to keep apart, and a shared cache may keep it.
        assert path in DOCUMENTS, path
        return
    control = headers.get("Cache-Control", "")
    assert "private" in control or "no-store" in control, (status, control)
    assert "public" not in control, control
    vary = ",".join(headers.get_all("Vary") or [])
    assert "authorization" in vary.lower() and "x-api-key" in vary.lower(), vary
    # nginx asked tessera each time.
    assert again[1]["X-Shared-Cache"] != "HIT", path
    assert anonymous_headers["X-Shared-Cache"] != "HIT", path
    if path in PROTECTED and status == 200:
        assert anonymous_status == 401, (path, anonymous_status)
    if anonymous_status == 200:
        assert b"relief" not in anonymous_body.replace(b"shadedrelief", b""), path
