"""STAC searches registered at run time (`POST /searches`): kept in pgSTAC's
own `searches` table (the id is pgSTAC's hash), served as layer
`search:{id}` by every protocol like the configured `type: stac` layer they
are registered against, limited in number, forgotten unused, read back
after a restart, seeded by an admin job."""
import json
import urllib.parse

import numpy as np
import pytest

from conftest import http_get, serving
from test_jobs import TOKEN, call, wait_for
from test_stac_source import TILES, catalogue, sql  # noqa: F401 (a fixture)

BY_CLOUD = {"collections": ["scenes"], "sortby": [{"field": "properties.eo:cloud_cover", "direction": "asc"}]}

CONFIG = """
admin: {{ token: {token}, jobs_dir: {jobs} }}
searches: {{ layer: {name}, max_searches: {most}, expire_after_secs: {expire} }}
stores:
  default: {{ type: file, path: {cache}, memory: 0 }}
layers:
  - name: {name}
    source: {{ type: stac, pgstac: {dsn}, search: {{ collections: [scenes] }}, asset: visual, resampling: nearest }}
    grids: [WebMercatorQuad]
  - name: first
    source:
      type: stac
      pgstac: {dsn}
      search: {{ collections: [scenes], sortby: [{{ field: properties.eo:cloud_cover, direction: asc }}] }}
      asset: visual
      resampling: nearest
    cache: {{ store: none }}
"""


def write_config(folder, dsn, name="scenes", most=10, expire=3600):
    """A config whose searches are served like layer `name` (searches are
    kept in pgSTAC by the layer they are registered against)."""
    config = folder / "tessera.yaml"
    config.write_text(CONFIG.format(token=TOKEN, jobs=folder / "jobs", most=most, expire=expire,
                                    cache=folder / "cache", dsn=dsn, name=name))
    return config


@pytest.fixture(scope="module")
def config(catalogue, tmp_path_factory):  # noqa: F811
    dsn, _, _ = catalogue
    return write_config(tmp_path_factory.mktemp("searches"), dsn)


@pytest.fixture(scope="module")
def server(config, tmp_path_factory):
    with serving(tmp_path_factory, "--config", str(config)) as s:
        yield s


def register(server, body, token=TOKEN):
    return call(server, "POST", "/searches", body, token=token)[:2]


def tile(server, layer, z, x, y):
    status, headers, body = http_get(server, f"/tiles/{urllib.parse.quote(layer)}/WebMercatorQuad/{z}/{x}/{y}.png")
    return status, headers, body


def test_registering_takes_the_admin_token(server):
    assert register(server, BY_CLOUD, token=None)[0] == 401
    assert register(server, BY_CLOUD, token="wrong-token-0123456789")[0] == 401


def test_a_registered_search_is_a_layer_of_every_protocol(server, catalogue):  # noqa: F811
    dsn, _, _ = catalogue
    status, body = register(server, {**BY_CLOUD, "metadata": {"name": "clearest first"}})
    assert status in (200, 201), body
    search_id = body["id"]
    assert len(search_id) == 32 and body["layer"] == f"search:{search_id}"
    # Registered again: the same id, nothing new.
    assert register(server, BY_CLOUD | {"metadata": {"name": "clearest first"}}) == (200, body)
    # The id is pgSTAC's own hash of the search, kept in its table.
    (kept,) = sql(dsn, "SELECT search, metadata FROM searches WHERE hash = %s", search_id)
    assert kept[0]["collections"] == ["scenes"] and kept[1]["name"] == "clearest first"
    layer = f"search:{search_id}"
    # Its tiles are those of the configured layer with the same search.
    for z, x, y in TILES:
        status, headers, registered = tile(server, layer, z, x, y)
        assert status == 200, registered[:300]
        assert registered == server.get(f"/tiles/first/WebMercatorQuad/{z}/{x}/{y}.png")[2]
    status, _, again = tile(server, layer, *TILES[0])
    assert status == 200
    # TileJSON, WMTS and OGC API name it.
    tilejson = json.loads(server.get(f"/tiles/{layer}/WebMercatorQuad/tilejson.json")[2])
    assert tilejson["tiles"][0].endswith(f"/tiles/{layer}/WebMercatorQuad/{{z}}/{{x}}/{{y}}.png")
    capabilities = server.get("/wmts?SERVICE=WMTS&REQUEST=GetCapabilities")[2].decode()
    assert f"<ows:Identifier>{layer}</ows:Identifier>" in capabilities
    collection = json.loads(server.get(f"/ogcapi/collections/{layer}")[2])
    assert collection["id"] == layer and collection["title"] == "clearest first"
    # Listed and described.
    status, listed, _ = call(server, "GET", "/searches", token=None)
    assert status == 200 and search_id in [s["id"] for s in listed["searches"]]
    status, described, _ = call(server, "GET", f"/searches/{search_id}", token=None)
    assert status == 200, described
    assert described["search"] == BY_CLOUD and described["served_like"] == "scenes"
    assert described["expires"] > described["last_used"]


@pytest.mark.parametrize("body, status, says", [
    ({"collections": ["scenes"], "filter": {"op": "bogus-op", "args": [{"property": "eo:cloud_cover"}, 1]}},
     400, "pgSTAC refused the search"),
    ({"collections": ["scenes"], "limit": 5}, 400, 'unknown key "limit"'),
    ([1, 2], 400, "a search is a JSON object"),
    ({"collections": ["nothing-here"]}, 400, "the search finds no item"),
    ({"collections": ["scenes"], "ids": ["x" * 70000]}, 413, "searches.max_body_bytes"),
])
def test_bad_searches_are_refused_with_the_reason(server, body, status, says):
    got, answer = register(server, body)
    assert got == status and says in answer, answer


def test_unknown_searches_answer_404(server):
    assert call(server, "GET", "/searches/0123456789abcdef0123456789abcdef", token=None)[0] == 404
    assert call(server, "GET", "/searches/../admin", token=None)[0] == 404
    assert tile(server, "search:0123456789abcdef0123456789abcdef", *TILES[0])[0] == 404


def test_a_registered_search_is_seeded_by_a_job(server):
    status, body = register(server, BY_CLOUD)
    assert status in (200, 201), body
    layer = body["layer"]
    z, x, y = TILES[1]
    status, job, _ = call(server, "POST", "/admin/jobs", {"kind": "seed", "layer": layer, "zoom": f"{z}..{z}",
                                                          "bbox": "6.04,49.72,6.06,49.74"})
    assert status == 201, job
    done = wait_for(lambda: (r := call(server, "GET", f"/admin/jobs/{job['id']}")[1])["state"] != "running" and r,
                    "the seed to end", timeout=300)
    assert done["state"] == "done" and done["tiles_written"] >= 1 and done["errors"] == [], done
    status, headers, _ = tile(server, layer, z, x, y)
    assert status == 200 and headers["X-Cache"] == "HIT"


def test_registered_searches_survive_a_restart(server, catalogue, tmp_path_factory):  # noqa: F811
    status, body = register(server, {"collections": ["scenes"], "datetime": "2024-06-01T00:00:00Z/2024-06-10T00:00:00Z"})
    assert status in (200, 201), body
    before = tile(server, body["layer"], *TILES[0])
    assert before[0] == 200
    # Another process on the same catalogue (its own cache and jobs).
    config = write_config(tmp_path_factory.mktemp("restarted"), catalogue[0])
    with serving(tmp_path_factory, "--config", str(config)) as again:
        status, described, _ = call(again, "GET", f"/searches/{body['id']}", token=None)
        assert status == 200, described
        after = tile(again, body["layer"], *TILES[0])
        assert after[0] == 200 and after[2] == before[2]


def test_searches_are_limited_in_number_and_expire_unused(catalogue, tmp_path_factory):  # noqa: F811
    dsn, _, _ = catalogue
    config = write_config(tmp_path_factory.mktemp("few"), dsn, name="few", most=1, expire=2)
    with serving(tmp_path_factory, "--config", str(config)) as server:
        one = {"collections": ["scenes"], "datetime": "2024-06-01T00:00:00Z/2024-06-05T00:00:00Z"}
        two = {"collections": ["scenes"], "datetime": "2024-06-06T00:00:00Z/2024-06-15T00:00:00Z"}
        status, first = register(server, one)
        assert status == 201, first
        status, refused = register(server, two)
        assert status == 429 and "searches.max_searches" in refused, refused
        # Unused for expire_after_secs: forgotten, its id 404, room again.
        wait_for(lambda: call(server, "GET", f"/searches/{first['id']}", token=None)[0] == 404,
                 "the search to expire")
        assert tile(server, first["layer"], *TILES[0])[0] == 404
        assert register(server, two)[0] == 201


def test_searches_on_one_database_share_its_connections(catalogue, tmp_path_factory):  # noqa: F811
    """Each registered search is a source of its own; on one database they
    share one pool, so twenty searches drawn do not hold twenty pools of
    connections (pgSTAC's server allows 100 in all)."""
    dsn, _, _ = catalogue
    config = write_config(tmp_path_factory.mktemp("many"), dsn, name="many", most=30)
    with serving(tmp_path_factory, "--config", str(config)) as server:
        for day in range(1, 21):
            body = {"collections": ["scenes"], "datetime": f"2024-05-{day:02d}T00:00:00Z/2024-07-01T00:00:00Z"}
            status, registered = register(server, body)
            assert status == 201, registered
            assert tile(server, registered["layer"], *TILES[0])[0] == 200
        held = sql(dsn, "SELECT count(*) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND application_name = 'tessera'")[0][0]
        assert 1 <= held <= 4, f"{held} connections held for 20 searches drawn one after another"


PAGE = """<!doctype html>
<html><head><meta charset="utf-8">
<link rel="stylesheet" href="{tessera}/static/maplibre-gl.css">
<script src="{tessera}/static/maplibre-gl.js"></script>
<style>html, body, #map {{ margin: 0; width: 100%; height: 100%; background: #ffffff; }}</style>
</head><body><div id="map"></div><script>
window.map = new maplibregl.Map({{
  container: "map", center: [6.08, 49.76], zoom: 12, fadeDuration: 0,
  style: {{ version: 8, sources: {{ search: {{ type: "raster", url: "{tilejson}", tileSize: 256 }} }},
           layers: [{{ id: "search", type: "raster", source: "search", paint: {{ "raster-fade-duration": 0 }} }}] }}
}});
</script></body></html>
"""


def test_qgis_and_maplibre_draw_a_registered_search(server, browser, page_server):
    from selenium.webdriver.support.ui import WebDriverWait

    from conftest import qgis_wmts
    from imaging import decode

    status, body = register(server, BY_CLOUD)
    assert status in (200, 201), body
    layer = body["layer"]
    # QGIS: the WMTS layer, over the scenes (Web Mercator metres).
    found = qgis_wmts(f"{server.url}/wmts/1.0.0/WMTSCapabilities.xml", layer, "WebMercatorQuad",
                      (671000, 6405000, 683000, 6415000))
    assert found["valid"], found
    assert found["opaque"] > 40, found
    # MapLibre GL JS: a raster source of the search's TileJSON.
    url, folder = page_server
    (folder / "search.html").write_text(PAGE.format(
        tessera=server.url, tilejson=f"{server.url}/tiles/{layer}/WebMercatorQuad/tilejson.json"))
    browser.get(f"{url}/search.html")
    WebDriverWait(browser, 120).until(lambda d: d.execute_script(
        "return map.loaded() && map.areTilesLoaded() && map.getSource('search').loaded()"))
    rgb = decode(browser.find_element("id", "map").screenshot_as_png)[:3].astype(int)
    drawn = np.abs(rgb - 255).sum(axis=0) > 30
    assert drawn.mean() > 0.3, f"only {drawn.mean():.0%} of the map shows the scenes"
    assert rgb[:, drawn].std(axis=1).min() > 10, "the scenes are drawn as a flat colour"
