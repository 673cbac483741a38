"""Hostile and unlucky input against the real binary: each case here was
once a 5xx, a hang or a panic."""
import json
import urllib.error
import urllib.request

from conftest import ROOT, serving


def get(server, path):
    try:
        with urllib.request.urlopen(server.url + path, timeout=60) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


def test_a_vertical_crs_in_getmap_is_a_400_with_the_protocols_exception(tessera):
    base = "/wms?SERVICE=WMS&REQUEST=GetMap&LAYERS=relief&STYLES=&FORMAT=image/png&WIDTH=64&HEIGHT=64"
    status, body = get(tessera, f"{base}&VERSION=1.3.0&CRS=EPSG:5773&BBOX=0,0,10,10")
    assert status == 400 and 'code="InvalidCRS"' in body, body
    status, body = get(tessera, f"{base}&VERSION=1.1.1&SRS=EPSG:5773&BBOX=0,0,10,10")
    assert status == 400 and 'code="InvalidSRS"' in body, body


def test_environment_values_are_taken_whole_and_never_rewrite_the_config(tmp_path_factory, monkeypatch):
    # Each value once changed the config it was substituted into: a newline
    # added a key, " #" cut the value, leading spaces were dropped, digits
    # with "_" became a number and ": " stopped start-up.
    monkeypatch.setenv("TESSERA_TEST_TITLE", "  tiles #secret-tail\n  evil: 1")
    monkeypatch.setenv("TESSERA_TEST_ATTRIBUTION", "1_234_567_890_123_456")
    monkeypatch.setenv("TESSERA_TEST_DESCRIPTION", "abcdefgh: 0123")
    config = tmp_path_factory.mktemp("env") / "tessera.yaml"
    config.write_text(f"""
server:
  title: ${{TESSERA_TEST_TITLE}}   # ${{NOT_SET_AND_ONLY_IN_A_COMMENT}}
layers:
  - name: elevation
    description: ${{TESSERA_TEST_DESCRIPTION}}
    attribution: ${{TESSERA_TEST_ATTRIBUTION}}
    source: {{ path: {ROOT}/data/elev.tif }}
""")
    with serving(tmp_path_factory, "--config", str(config)) as server:
        status, caps = get(server, "/wms?SERVICE=WMS&REQUEST=GetCapabilities&VERSION=1.3.0")
        assert status == 200
        assert "<Title>  tiles #secret-tail\n  evil: 1</Title>" in caps, caps[:600]
        status, body = get(server, "/tiles/elevation/WebMercatorQuad/tilejson.json")
        doc = json.loads(body)
        assert doc["attribution"] == "1_234_567_890_123_456"
        assert doc["description"] == "abcdefgh: 0123"
