"""Reloading the configuration without a restart: SIGHUP and POST
/admin/reload swap layers and stores at once, keep unchanged stores open,
refuse a bad config while the old one keeps serving, and let requests in
flight finish on the config they started with."""
import http.client
import signal
import threading
import time
import urllib.parse

from conftest import ROOT, fetch, serving

TOKEN = "reload-token-0123456789"
BIG_HILLSHADE = ("/wms?SERVICE=WMS&REQUEST=GetMap&VERSION=1.1.1&LAYERS=elevation&STYLES=&SRS=EPSG:3857"
                 "&BBOX=600000,6300000,750000,6450000&WIDTH=4096&HEIGHT=4096&FORMAT=image/png")


def write_config(path, layers, admin=""):
    blocks = {
        "relief": f"  - name: relief\n    source: {{ path: {ROOT}/data/shadedrelief-5400.tif }}\n"
                  f"    cache: {{ store: journal }}\n",
        "elevation": f"  - name: elevation\n    source: {{ path: {ROOT}/data/elev.tif }}\n"
                     f"    style: {{ type: hillshade }}\n    cache: {{ store: none }}\n",
        "landsat": f"  - name: landsat\n    source: {{ path: {ROOT}/data/L7_ETMs.tif }}\n    cache: {{ store: none }}\n",
        "broken": "  - name: broken\n    source: { path: /nonexistent/nothing.tif }\n    cache: { store: none }\n",
    }
    path.write_text(f"""
server: {{ max_concurrent_renders: 2, render_timeout_secs: 120 }}
stores:
  journal: {{ type: journal, path: {path.parent / 'journal'} }}
{admin}layers:
""" + "".join(blocks[name] for name in layers))


def admin_yaml(s3):
    return (f"admin:\n  token: {TOKEN}\n  sources_url: s3://tessera-test/reload\n  sources_file: sources.json\n"
            f"  options: {{ endpoint: '{s3['endpoint']}', access_key_id: {s3['key']}, "
            f"secret_access_key: {s3['secret']}, region: us-east-1, allow_http: true }}\n")


def status(server, path):
    return fetch(server, path)[0]


def tile(server, layer):
    url = urllib.parse.urlsplit(server.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=120)
    conn.request("GET", f"/tiles/{layer}/WebMercatorQuad/2/2/1.png")
    r = conn.getresponse()
    r.read()
    return r.status, r.getheader("X-Cache")


def post_reload(server, token=TOKEN, query=""):
    url = urllib.parse.urlsplit(server.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=120)
    conn.request("POST", "/admin/reload" + query, headers={"Authorization": f"Bearer {token}"} if token else {})
    r = conn.getresponse()
    return r.status, r.read().decode()


def wait_for(condition, what, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_sighup_adds_layers_and_keeps_the_unchanged_journal_open(tmp_path_factory):
    config = tmp_path_factory.mktemp("reload") / "tessera.yaml"
    write_config(config, ["relief", "elevation"])
    with serving(tmp_path_factory, "--config", str(config)) as server:
        assert tile(server, "relief") == (200, "MISS")
        assert tile(server, "relief") == (200, "HIT")
        assert status(server, "/tiles/landsat/WebMercatorQuad/tilejson.json") == 404
        write_config(config, ["relief", "elevation", "landsat"])
        server.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: status(server, "/tiles/landsat/WebMercatorQuad/tilejson.json") == 200, "landsat")
        assert status(server, "/tiles/elevation/WebMercatorQuad/tilejson.json") == 200
        # The journal was kept open (reopening it would fail: it is locked),
        # and what it holds is still served.
        assert tile(server, "relief") == (200, "HIT")
        assert "configuration reloaded" in server.log_text()


def test_a_bad_config_is_refused_and_the_old_one_keeps_serving(tmp_path_factory, s3):
    config = tmp_path_factory.mktemp("reload") / "tessera.yaml"
    write_config(config, ["relief"], admin_yaml(s3))
    with serving(tmp_path_factory, "--config", str(config)) as server:
        assert tile(server, "relief")[0] == 200
        write_config(config, ["relief", "broken"], admin_yaml(s3))
        assert post_reload(server, token=None)[0] == 401
        code, body = post_reload(server)
        assert code == 400 and "nonexistent/nothing.tif" in body and "old one keeps serving" in body, body
        config.write_text("layers: [ this is not: yaml")
        server.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "not valid YAML" in server.log_text(), "the refusal in the log")
        assert tile(server, "relief") == (200, "HIT")
        assert status(server, "/tiles/broken/WebMercatorQuad/tilejson.json") == 404
        write_config(config, ["relief", "landsat"], admin_yaml(s3))
        code, body = post_reload(server)
        assert (code, body) == (200, "reloaded: 2 layer(s)\n")
        assert status(server, "/tiles/landsat/WebMercatorQuad/tilejson.json") == 200


def test_a_request_in_flight_finishes_on_the_config_it_started_with(tmp_path_factory, s3):
    config = tmp_path_factory.mktemp("reload") / "tessera.yaml"
    write_config(config, ["relief", "elevation"], admin_yaml(s3))
    with serving(tmp_path_factory, "--config", str(config)) as server:
        result = {}
        waiting = threading.Thread(target=lambda: result.update(map=fetch(server, BIG_HILLSHADE, timeout=300)))
        waiting.start()
        wait_for(lambda: "renders: 1 of 2" in fetch(server, "/ready")[1].decode(), "the map to render")
        write_config(config, ["relief"], admin_yaml(s3))
        assert post_reload(server, query="?remove_layers=true") == (200, "reloaded: 1 layer(s)\n")
        # The layer is gone for new requests...
        code, body = fetch(server, BIG_HILLSHADE.replace("4096", "64"))
        assert code == 404 and b"LayerNotDefined" in body, body
        # ...and the map that started before the reload is drawn in full.
        waiting.join(timeout=300)
        code, body = result["map"]
        assert code == 200 and body[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_refused_reload_leaves_gdals_settings_as_they_were(tmp_path_factory):
    # The serving config reads a COG from a loopback server; the refused one
    # would have sent GDAL through the private-network guard.
    from test_remote_sources import start_cog_server
    cogs = start_cog_server()
    config = tmp_path_factory.mktemp("reload") / "tessera.yaml"

    def write(allow_private, broken):
        headers = ", config_options: { GDAL_HTTP_HEADERS: 'X-Refused: yes' }" if broken else ""
        config.write_text(f"""
gdal: {{ allow_private_network: {str(allow_private).lower()}{headers} }}
layers:
  - name: remote
    source: {{ path: "{cogs.url}/shadedrelief-5400.tif" }}
    cache: {{ store: none }}
""" + ("  - name: broken\n    source: { path: /nonexistent/nothing.tif }\n    cache: { store: none }\n"
       if broken else ""))

    write(allow_private=True, broken=False)
    try:
        with serving(tmp_path_factory, "--config", str(config)) as server:
            # No tile yet: only the file's header has been read, so the tile
            # below needs new range reads from the server.
            write(allow_private=False, broken=True)
            server.proc.send_signal(signal.SIGHUP)
            wait_for(lambda: "old one keeps serving" in server.log_text(), "the refusal")
            seen = len(cogs.headers_seen)
            assert status(server, "/tiles/remote/WebMercatorQuad/2/2/1.png") == 200
            later = cogs.headers_seen[seen:]
            assert later and not any("X-Refused" in h for h in later), "an option only the refused config had"
    finally:
        cogs.shutdown()


def test_a_reload_that_drops_layers_is_refused_unless_asked(tmp_path_factory, s3):
    # A config file cut at a layer boundary once reloaded with the layers
    # before the cut only.
    config = tmp_path_factory.mktemp("reload") / "tessera.yaml"
    write_config(config, ["relief", "elevation", "landsat"], admin_yaml(s3))
    with serving(tmp_path_factory, "--config", str(config)) as server:
        text = config.read_text()
        config.write_text(text[:text.index("  - name: elevation")])
        code, body = post_reload(server)
        assert code == 400 and "elevation" in body and "landsat" in body and "remove_layers" in body, body
        server.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "drops layers" in server.log_text(), "the refusal in the log")
        assert status(server, "/tiles/landsat/WebMercatorQuad/tilejson.json") == 200
        code, body = post_reload(server, query="?remove_layers=true")
        assert (code, body) == (200, "reloaded: 1 layer(s)\n"), body
        assert status(server, "/tiles/landsat/WebMercatorQuad/tilejson.json") == 404
