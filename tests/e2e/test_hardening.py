"""Hostile and unlucky input against the real binary: each case here was
once a 5xx, a hang or a panic."""
import json
import os
import signal
import threading
import time
import urllib.request

from conftest import ROOT, fetch, serving


def get(server, path):
    status, body = fetch(server, path)
    return status, body.decode("utf-8", "replace")


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


def process_cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


BIG_HILLSHADE = ("/wms?SERVICE=WMS&REQUEST=GetMap&VERSION=1.1.1&LAYERS=elevation&STYLES=&SRS=EPSG:3857"
                 "&BBOX=600000,6300000,750000,6450000&WIDTH=4096&HEIGHT=4096&FORMAT=image/png")


def hillshade_server(tmp_path_factory, render_timeout):
    config = tmp_path_factory.mktemp("cancel") / "tessera.yaml"
    config.write_text(f"""
server: {{ render_timeout_secs: {render_timeout} }}
layers:
  - name: elevation
    source: {{ path: {ROOT}/data/elev.tif }}
    style: {{ type: hillshade }}
""")
    return serving(tmp_path_factory, "--config", str(config))


def cpu_after(server, seconds=3.0):
    """CPU the server burns from 1 s after now, for `seconds`."""
    time.sleep(1.0)
    before = process_cpu_seconds(server.proc.pid)
    time.sleep(seconds)
    return process_cpu_seconds(server.proc.pid) - before


def test_a_render_past_its_timeout_stops_burning_cpu(tmp_path_factory):
    # The whole render costs seconds of CPU; past its timeout it stops
    # between two warp chunks or before the next step.
    with hillshade_server(tmp_path_factory, 0.3) as server:
        status, body = get(server, BIG_HILLSHADE)
        assert status == 503, body[:300]
        burnt = cpu_after(server)
        assert burnt < 0.5, f"{burnt:.2f} s of CPU spent after the 503"


def test_a_render_whose_client_left_stops_burning_cpu(tmp_path_factory):
    with hillshade_server(tmp_path_factory, 60) as server:
        try:
            urllib.request.urlopen(server.url + BIG_HILLSHADE, timeout=0.3)
        except OSError:
            pass
        burnt = cpu_after(server)
        assert burnt < 0.5, f"{burnt:.2f} s of CPU spent after the client left"


def test_a_window_far_larger_than_the_data_is_answered_at_once(tessera):
    # A bbox of 1e15 m once kept GDAL busy for minutes past the timeout.
    status, _ = get(tessera, "/wms?SERVICE=WMS&REQUEST=GetMap&VERSION=1.3.0&LAYERS=relief&STYLES=&CRS=EPSG:3857"
                    "&BBOX=-1e15,-1e15,1e15,1e15&WIDTH=256&HEIGHT=256&FORMAT=image/png")
    assert status == 200
    assert cpu_after(tessera, 2.0) < 0.5


def test_sigterm_during_a_long_render_exits_within_the_grace_period(tmp_path_factory):
    config = tmp_path_factory.mktemp("term") / "tessera.yaml"
    config.write_text(f"""
server: {{ render_timeout_secs: 60, shutdown_grace_secs: 2 }}
layers:
  - name: elevation
    source: {{ path: {ROOT}/data/elev.tif }}
    style: {{ type: hillshade }}
""")
    with serving(tmp_path_factory, "--config", str(config)) as server:
        def ask():
            try:
                get(server, BIG_HILLSHADE)
            except OSError:
                pass  # the server went away: expected

        waiting = threading.Thread(target=ask, daemon=True)
        waiting.start()
        time.sleep(0.5)
        start = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        server.proc.wait(timeout=30)
        took = time.monotonic() - start
        assert took < 2 + 3, f"exited {took:.1f} s after SIGTERM (grace 2 s)"


def test_reads_of_more_source_pixels_than_the_limit_are_refused_before_reading(tmp_path_factory):
    # 5400x2700 pixels with overviews 4x and 8x coarser.
    config = tmp_path_factory.mktemp("pixels") / "tessera.yaml"
    config.write_text(f"""
limits: {{ max_source_pixels: 1000000 }}
layers:
  - name: relief
    source: {{ path: {ROOT}/data/shadedrelief-5400.tif }}
""")
    world = ("/wms?SERVICE=WMS&REQUEST=GetMap&VERSION=1.1.1&LAYERS=relief&STYLES=&SRS=EPSG:4326"
             "&BBOX=-180,-90,180,90&FORMAT=image/png")
    with serving(tmp_path_factory, "--config", str(config)) as server:
        # Full resolution: all 14.6 million pixels would be read.
        status, body = get(server, f"{world}&WIDTH=4096&HEIGHT=2048")
        assert status == 400, body
        assert 'code="InvalidParameterValue"' in body and "limits.max_source_pixels" in body, body
        assert cpu_after(server, 1.0) < 0.5
        # At 512x256 the 8x overview is read: about 230,000 pixels.
        status, _ = get(server, f"{world}&WIDTH=512&HEIGHT=256")
        assert status == 200
        status, _ = get(server, "/tiles/relief/WebMercatorQuad/0/0/0.png")
        assert status == 200


def slow_style_config(d):
    """A configuration in directory `d`: layer `slow`, the demo countries
    under a MapLibre style of 10,000 line layers (minutes to draw a big
    map), and the relief; one render slot for WMS maps, a 2 s timeout."""
    from vectors import countries_and_places
    gpkg = countries_and_places(d / "world.gpkg")
    layers = [{"id": f"l{i}", "type": "line", "source": "world", "source-layer": "countries",
               "paint": {"line-color": "#404040", "line-width": 6}} for i in range(10000)]
    (d / "style.json").write_text(json.dumps({"version": 8, "sources": {"world": {"type": "vector"}},
                                              "layers": layers}))
    config = d / "tessera.yaml"
    config.write_text(f"""
server: {{ render_timeout_secs: 2, max_concurrent_renders: 2, wms_render_share: 0.5 }}
layers:
  - name: slow
    source: {{ type: vector, path: {gpkg}, layers: [{{ layer: countries }}] }}
    style: {{ maplibre: {d / 'style.json'}, source: world }}
  - name: relief
    source: {{ path: {ROOT}/data/shadedrelief-5400.tif }}
""")
    return config


def test_a_maplibre_style_of_10000_layers_past_its_timeout_frees_its_slot(tmp_path_factory):
    config = slow_style_config(tmp_path_factory.mktemp("slow-style"))
    getmap = ("/wms?SERVICE=WMS&VERSION=1.3.0&REQUEST=GetMap&LAYERS={}&STYLES=&CRS=EPSG:4326"
              "&BBOX=-90,-180,90,180&WIDTH={}&HEIGHT={}&FORMAT=image/png")
    with serving(tmp_path_factory, "--config", str(config)) as server:
        status, body = get(server, getmap.format("slow", 2048, 1024))
        assert status == 503, body[:300]
        # The abandoned render stops between style layers and gives its
        # slot back: the next map is drawn, not refused for a busy slot.
        status, body = get(server, getmap.format("relief", 256, 128))
        assert status == 200, body[:300]
        deadline = time.monotonic() + 10
        while "wms maps: 0 of 1 slots busy" not in (ready := get(server, "/ready")[1]):
            assert time.monotonic() < deadline, ready
            time.sleep(0.1)
        burnt = cpu_after(server)
        assert burnt < 0.5, f"{burnt:.2f} s of CPU spent after the 503"
