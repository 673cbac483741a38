"""Vector layers as Mapbox Vector Tiles, feature info and legends: the demo
countries and populated places from PostGIS (scripts/postgis; cut by the
database with ST_AsMVT, or read and cut by tessera), from a GeoPackage and
from the Shapefiles. Tiles are decoded by the independent `mapbox-vector-tile`
package and compared with an OGR query of the same area; MapLibre GL JS in
headless Chromium draws them; GetFeatureInfo finds the country under a
point; GetLegendGraphic draws one symbol per rule."""
import gzip
import math
import os
import json
import subprocess
import threading
import urllib.error
import urllib.request

import mapbox_vector_tile
import numpy as np
import pytest
from lxml import etree
from osgeo import gdal, ogr, osr
from shapely.geometry import shape

from conftest import ROOT, fetch, serving
from imaging import decode
from vectors import HALF, PLACES, SHAPEFILE, env, pg_ctl, tile_bounds, vector_config

gdal.UseExceptions()
ogr.UseExceptions()
EXTENT, BUFFER = 4096, 64
RULES = ('[{ name: land, fill: "#00ff00" },'
         ' { name: europe, filter: { field: CONTINENT, eq: Europe }, fill: "#ff0000", stroke: "#000000" },'
         ' { name: populous, filter: { field: POP_EST, min: 100000000 }, fill: "#0000ff", min_zoom: 3 }]')


def sources():
    pg, gpkg = env("TESSERA_TEST_PG"), env("TESSERA_TEST_GPKG")
    layers = ('[{{ layer: countries, fields: [{n}, {p}, {c}], style: [{{ fill: "#336699" }}] }},'
              ' {{ layer: places, fields: [name], min_zoom: 2,'
              ' style: [{{ fill: "#ff0000", marker: {{ shape: circle, size: 6 }} }}] }}]')
    lower = layers.format(n="name", p="pop_est", c="continent")
    upper = layers.format(n="NAME", p="POP_EST", c="CONTINENT")
    return {
        "postgis": f'{{ type: vector, path: "{pg}", layers: {lower} }}',
        "postgis-here": f'{{ type: vector, path: "{pg}", layers: {lower}, mvt: {{ in_database: false }} }}',
        "gpkg": f'{{ type: vector, path: "{gpkg}", layers: {upper} }}',
    }


def config(tmp_path, source, extra=""):
    return vector_config(tmp_path, "world", source, extra, formats="[mvt, png]", metatile=(4, 4))


def reference(path, layer, z, x, y):
    """Features of `layer` whose geometry meets the tile grown by the
    buffer (an OGR spatial filter with GEOS's exact test), by name."""
    west, south, east, north = tile_bounds(z, x, y)
    grow = (east - west) * BUFFER / EXTENT
    # The buffer does not wrap around the antimeridian or reach past the
    # grid's edge (neither do the tiles).
    west, south = max(west - grow, -HALF), max(south - grow, -HALF)
    east, north = min(east + grow, HALF), min(north + grow, HALF)
    ring = ogr.Geometry(ogr.wkbLinearRing)
    for px, py in [(west, south), (east, south), (east, north), (west, north), (west, south)]:
        ring.AddPoint_2D(px, py)
    box = ogr.Geometry(ogr.wkbPolygon)
    box.AddGeometry(ring)
    box.Segmentize(grow)
    mercator, lonlat = osr.SpatialReference(), osr.SpatialReference()
    mercator.ImportFromEPSG(3857)
    lonlat.ImportFromEPSG(4326)
    lonlat.SetAxisMappingStrategy(osr.OAMS_TRADITIONAL_GIS_ORDER)
    box.AssignSpatialReference(mercator)
    box.TransformTo(lonlat)
    ds = ogr.Open(str(path))
    lyr = ds.GetLayerByName(layer) if layer else ds.GetLayer(0)
    lyr.SetSpatialFilter(box)
    names = [f.GetField(f.GetFieldIndex("NAME") if f.GetFieldIndex("NAME") >= 0 else f.GetFieldIndex("name"))
             for f in lyr]
    return names


def mvt(server, z, x, y):
    status, body = fetch(server, f"/tiles/world/WebMercatorQuad/{z}/{x}/{y}.mvt")
    if status == 204:
        return {}
    assert status == 200, body[:300]
    return mapbox_vector_tile.decode(body)


@pytest.mark.parametrize("kind", ["postgis", "postgis-here", "gpkg"])
def test_vector_tiles_hold_what_an_ogr_query_of_the_tile_holds(kind, tmp_path, tmp_path_factory):
    with serving(tmp_path_factory, "--config", str(config(tmp_path, sources()[kind]))) as server:
        for z, x, y in [(1, 1, 0), (3, 4, 2), (4, 8, 5), (5, 16, 11)]:
            tile = mvt(server, z, x, y)
            countries = tile["countries"]
            assert countries["extent"] == EXTENT
            names = sorted(f["properties"].get("name", f["properties"].get("NAME")) for f in countries["features"])
            expected = sorted(reference(SHAPEFILE, None, z, x, y))
            # A country that meets only the buffer's edge by less than a
            # unit of the extent is gone once quantized: at most one.
            missing = set(expected) - set(names)
            assert set(names) <= set(expected), (kind, z, x, y, set(names) - set(expected))
            assert len(missing) <= 1, (kind, z, x, y, missing)
            assert len(names) >= 3, "the tile holds countries"
            for f in countries["features"]:
                geometry = shape(f["geometry"])
                assert geometry.is_valid, (kind, z, x, y, f["properties"])
                assert f["geometry"]["type"] in ("Polygon", "MultiPolygon")
                xs, ys = zip(*[c for poly in _polygons(f["geometry"]) for ring in poly for c in ring])
                assert -BUFFER - 1 <= min(xs) and max(xs) <= EXTENT + BUFFER + 1, (min(xs), max(xs))
                assert -BUFFER - 1 <= min(ys) and max(ys) <= EXTENT + BUFFER + 1, (min(ys), max(ys))
            pops = [f["properties"].get("pop_est", f["properties"].get("POP_EST")) for f in countries["features"]]
            assert all(isinstance(p, (int, float, str)) for p in pops)
            if kind == "gpkg":
                assert all(isinstance(p, (int, float)) for p in pops), "numbers stay numbers"
            if z >= 2:
                places = sorted(f["properties"]["name"] for f in tile.get("places", {"features": []})["features"])
                assert places == sorted(reference(PLACES, None, z, x, y)), (kind, z, x, y)
                # Each point within one unit of where the extent puts it.
                status, body = fetch(server, f"/tiles/world/WebMercatorQuad/{z}/{x}/{y}.mvt")
                raw = mapbox_vector_tile.decode(body, default_options={"y_coord_down": True})
                expected = place_coordinates()
                west, south, east, north = tile_bounds(z, x, y)
                for f in raw["places"]["features"]:
                    lon, lat = expected[f["properties"]["name"]]
                    mx = lon / 180 * HALF
                    my = math.log(math.tan(math.pi / 4 + math.radians(lat) / 2)) / math.pi * HALF
                    ex, ey = (mx - west) / (east - west) * EXTENT, (north - my) / (north - south) * EXTENT
                    gx, gy = f["geometry"]["coordinates"]
                    assert abs(gx - ex) <= 1 and abs(gy - ey) <= 1, (f["properties"]["name"], gx, gy, ex, ey)
            else:
                assert "places" not in tile, "places start at zoom 2"


def place_coordinates():
    """Every populated place's (lon, lat), by name."""
    ds = ogr.Open(str(PLACES))
    return {f.GetField("name"): (f.GetGeometryRef().GetX(), f.GetGeometryRef().GetY()) for f in ds.GetLayer(0)}


def _polygons(geometry):
    if geometry["type"] == "Polygon":
        return [geometry["coordinates"]]
    return geometry["coordinates"]


def test_tiles_are_gzip_for_clients_that_take_it_and_empty_tiles_are_204(tmp_path, tmp_path_factory):
    with serving(tmp_path_factory, "--config", str(config(tmp_path, sources()["postgis"]))) as server:
        path = "/tiles/world/WebMercatorQuad/3/4/2.pbf"
        request = urllib.request.Request(server.url + path, headers={"Accept-Encoding": "gzip"})
        with urllib.request.urlopen(request, timeout=60) as r:
            assert r.headers["Content-Encoding"] == "gzip"
            assert r.headers["Content-Type"] == "application/vnd.mapbox-vector-tile"
            assert "accept-encoding" in r.headers["Vary"].lower()
            packed, packed_etag = r.read(), r.headers["ETag"]
        with urllib.request.urlopen(server.url + path, timeout=60) as r:
            assert r.headers.get("Content-Encoding") is None
            plain, plain_etag = r.read(), r.headers["ETag"]
            assert r.headers["X-Cache"] == "HIT"
        assert gzip.decompress(packed) == plain
        assert packed_etag != plain_etag
        assert mapbox_vector_tile.decode(plain)["countries"]["features"]
        # The southern Pacific at zoom 4: no land, no places.
        assert reference(SHAPEFILE, None, 4, 0, 11) == []
        for _ in range(2):
            status, body = fetch(server, "/tiles/world/WebMercatorQuad/4/0/11.mvt")
            assert (status, body) == (204, b"")


def test_tilejson_lists_the_vector_layers_with_their_fields(tmp_path, tmp_path_factory):
    with serving(tmp_path_factory, "--config", str(config(tmp_path, sources()["gpkg"]))) as server:
        status, body = fetch(server, "/tiles/world/WebMercatorQuad/tilejson.json")
        assert status == 200
        doc = json.loads(body)
        assert doc["format"] == "pbf"
        assert doc["tiles"][0].endswith("/tiles/world/WebMercatorQuad/{z}/{x}/{y}.mvt")
        layers = {l["id"]: l for l in doc["vector_layers"]}
        assert layers["countries"]["fields"] == {"NAME": "String", "POP_EST": "Number", "CONTINENT": "String"}
        assert layers["places"]["fields"] == {"name": "String"} and layers["places"]["minzoom"] == 2
        status, body = fetch(server, "/tiles/world/WebMercatorQuad/tilejson.json?format=png")
        assert "vector_layers" not in json.loads(body)
        status, body = fetch(server, "/tiles/world/WebMercatorQuad/tilejson.json?format=webp")
        assert status == 400 and b"mvt, png" in body


def renders(server):
    status, body = fetch(server, "/metrics")
    total = 0.0
    for line in body.decode().splitlines():
        if line.startswith("tessera_metatile_renders_total") and 'layer="world"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_concurrent_requests_for_one_vector_tile_make_it_once(tmp_path, tmp_path_factory):
    with serving(tmp_path_factory, "--config", str(config(tmp_path, sources()["postgis"]))) as server:
        results = []

        def get():
            results.append(fetch(server, "/tiles/world/WebMercatorQuad/4/8/5.mvt"))

        threads = [threading.Thread(target=get) for _ in range(24)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert {s for s, _ in results} == {200}
        assert len({b for _, b in results}) == 1, "every answer has the same bytes"
        assert renders(server) == 1, "metatiling is off for vector tiles, and one request made the tile"
        # A neighbour in the same 4x4 metatile is its own tile.
        assert fetch(server, "/tiles/world/WebMercatorQuad/4/9/5.mvt")[0] == 200
        assert renders(server) == 2


def test_a_seed_stores_vector_tiles_that_are_then_hits(tmp_path, tmp_path_factory):
    path = config(tmp_path, sources()["gpkg"])
    binary = os.environ["TESSERA_BIN"]
    done = subprocess.run([binary, "seed", "--config", str(path), "--layer", "world", "--format", "mvt",
                           "--zoom", "0..2"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    stored = sorted((tmp_path / "tiles").rglob("*.mvt"))
    assert len(stored) == 1 + 4 + 16
    with serving(tmp_path_factory, "--config", str(path)) as server:
        with urllib.request.urlopen(server.url + "/tiles/world/WebMercatorQuad/2/2/1.mvt", timeout=60) as r:
            assert r.headers["X-Cache"] == "HIT"
            assert mapbox_vector_tile.decode(r.read())["places"]["features"]
        assert renders(server) == 0


def test_a_database_restart_costs_no_request_and_a_down_database_is_a_503(tmp_path, tmp_path_factory):
    with serving(tmp_path_factory, "--config", str(config(tmp_path, sources()["postgis"]))) as server:
        assert fetch(server, "/tiles/world/WebMercatorQuad/2/2/1.mvt")[0] == 200
        # The pooled connection dies with the restart: the next tile is
        # read again on a new connection, not failed.
        pg_ctl("stop")
        pg_ctl("start")
        status, body = fetch(server, "/tiles/world/WebMercatorQuad/2/1/1.mvt")
        assert status == 200, body[:300]
        pg_ctl("stop")
        try:
            with pytest.raises(urllib.error.HTTPError) as down:
                urllib.request.urlopen(server.url + "/tiles/world/WebMercatorQuad/3/4/2.mvt", timeout=60)
            assert down.value.code == 503, down.value.read()[:300]
            assert down.value.headers["Retry-After"]
        finally:
            pg_ctl("start")
        # Nothing was cached for it: it is made now.
        status, body = fetch(server, "/tiles/world/WebMercatorQuad/3/4/2.mvt")
        assert status == 200 and mapbox_vector_tile.decode(body)["countries"]["features"]


def test_mvt_is_refused_for_a_raster_layer(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(f"""
layers:
  - name: relief
    source: {{ path: {ROOT}/data/shadedrelief-5400.tif }}
    formats: [png, mvt]
""")
    binary = os.environ["TESSERA_BIN"]
    done = subprocess.run([binary, "check", str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "mvt (vector tiles) needs a vector source" in done.stderr


def wms(server, request, **params):
    query = "&".join(f"{k}={v}" for k, v in {"SERVICE": "WMS", "VERSION": "1.3.0", "REQUEST": request,
                                               **params}.items())
    return fetch(server, f"/wms?{query}")


def test_feature_info_finds_the_country_and_the_pixel_under_a_point(tmp_path, tmp_path_factory):
    with serving(tmp_path_factory, "--config", str(config(tmp_path, sources()["postgis"]))) as server:
        # Paris in a 1.3.0 EPSG:4326 map (latitude first): France.
        common = dict(LAYERS="relief,world", QUERY_LAYERS="world", CRS="EPSG:4326", BBOX="40,-5,52,10",
                      WIDTH=150, HEIGHT=120, I=int((2.35 + 5) / 15 * 150), J=int((52 - 48.86) / 12 * 120))
        status, body = wms(server, "GetFeatureInfo", INFO_FORMAT="application/json", **common)
        assert status == 200, body
        features = json.loads(body)["features"]
        # The topmost first: the place drawn over the country.
        assert [f["properties"]["name"] for f in features] == ["Paris"]
        status, body = wms(server, "GetFeatureInfo", INFO_FORMAT="application/json", FEATURE_COUNT=5, **common)
        features = json.loads(body)["features"]
        assert [f["properties"]["name"] for f in features] == ["Paris", "France"]
        assert [f["properties"]["source_layer"] for f in features] == ["places", "countries"]
        assert features[1]["properties"]["continent"] == "Europe"
        # Off Paris (Lyon, 20 pixels south-east): the country only.
        common.update(I=int((4.85 + 5) / 15 * 150), J=int((52 - 45.76) / 12 * 120))
        status, body = wms(server, "GetFeatureInfo", INFO_FORMAT="text/html", **common)
        assert status == 200 and b"<td>France</td>" in body
        status, body = wms(server, "GetFeatureInfo", INFO_FORMAT="text/plain", **common)
        assert status == 200 and b"name = 'France'" in body
        # The Atlantic: nothing.
        status, body = wms(server, "GetFeatureInfo", INFO_FORMAT="application/json", **{**common, "I": 2, "J": 60})
        assert json.loads(body)["features"] == []
        # The raster layer: its bands at the pixel.
        status, body = wms(server, "GetFeatureInfo", INFO_FORMAT="application/json",
                           **{**common, "QUERY_LAYERS": "relief"})
        props = json.loads(body)["features"][0]["properties"]
        assert set(props) == {"band_1", "band_2", "band_3"}
        assert all(0 <= v <= 255 for v in props.values())
        # Errors name the parameter.
        # A layer the service does not have is not defined; one it has
        # that the map does not show is not queryable.
        status, body = wms(server, "GetFeatureInfo", **{**common, "QUERY_LAYERS": "nope"})
        assert status == 404 and b'code="LayerNotDefined"' in body, body
        status, body = wms(server, "GetFeatureInfo", **{**common, "LAYERS": "relief"})
        assert status == 400 and b'code="LayerNotQueryable"' in body, body
        status, body = wms(server, "GetFeatureInfo", **{**common, "I": 999})
        assert status == 400 and b"InvalidPoint" in body
        # GML, as WMS 1.1.1's queryable profile asks, answered as the
        # format listed (Content-Type equal to it).
        url = server.url + "/wms?SERVICE=WMS&VERSION=1.1.1&REQUEST=GetFeatureInfo&INFO_FORMAT=application/vnd.ogc.gml&" + \
            "&".join(f"{k}={v}" for k, v in {**common, "SRS": "EPSG:4326", "BBOX": "-5,40,10,52",
                                              "X": common["I"], "Y": common["J"]}.items() if k not in ("CRS", "I", "J"))
        with urllib.request.urlopen(url, timeout=60) as r:
            assert r.headers["Content-Type"] == "application/vnd.ogc.gml"
            doc = etree.fromstring(r.read())
        assert doc.tag == "msGMLOutput"
        assert [e.text for e in doc.iter("name")] == ["France"]
        assert doc.find("world_layer/world_feature/continent").text == "Europe"
        status, body = wms(server, "GetFeatureInfo", INFO_FORMAT="application/x-bogus", **common)
        assert status == 400 and b"INFO_FORMAT" in body


def test_legend_graphic_draws_one_symbol_per_rule(tmp_path, tmp_path_factory):
    source = f'{{ type: vector, path: "{SHAPEFILE}", fields: [NAME], style: {RULES} }}'
    extra = f"""  - name: heights
    source: {{ path: {ROOT}/data/elev.tif }}
    style: {{ type: ramp, stops: [{{ value: 200, color: "#0000ff" }}, {{ value: 500, color: "#ff0000" }}] }}
    cache: {{ store: mem }}
"""
    with serving(tmp_path_factory, "--config", str(config(tmp_path, source, extra))) as server:
        status, body = wms(server, "GetLegendGraphic", LAYER="world", FORMAT="image/png")
        assert status == 200
        legend = decode(body)
        assert legend.shape[0] == 4, "RGBA"
        alpha = legend[3]
        drawn_rows = alpha.max(axis=1) > 0
        # Runs of drawn rows separated by transparent gaps: one per rule.
        runs = np.sum(drawn_rows[1:] & ~drawn_rows[:-1]) + int(drawn_rows[0])
        assert runs == 3
        centres = [legend[:3, int(20 * i + 4 * i + 10), 10] for i in range(3)]
        assert [list(c) for c in centres] == [[0, 255, 0], [255, 0, 0], [0, 0, 255]]
        status, body = wms(server, "GetLegendGraphic", LAYER="world", FORMAT="application/json")
        assert [r["name"] for r in json.loads(body)["rules"]] == ["land", "europe", "populous"]
        status, body = wms(server, "GetLegendGraphic", LAYER="heights", FORMAT="image/png")
        ramp = decode(body)
        assert list(ramp[:3, 0, 5]) == [255, 0, 0] and list(ramp[:3, -1, 5]) == [0, 0, 255], "high at the top"
        status, body = wms(server, "GetLegendGraphic", LAYER="relief")
        assert status == 400 and b"no legend" in body
        status, caps = wms(server, "GetCapabilities")
        assert caps.count(b'queryable="1"') == 3
        assert b"REQUEST=GetLegendGraphic&amp;FORMAT=image%2Fpng&amp;LAYER=world" in caps
        assert caps.count(b"<LegendURL") == 2


def assert_preview_draws_countries(browser, url, name_field, least):
    """The preview at `url` (MapLibre GL JS) drew more than `least` features
    of the data layer `countries`, France under Paris's longitude (by its
    `name_field`), and land over 10 to 90 % of the map."""
    from selenium.webdriver.support.ui import WebDriverWait
    browser.get(url)
    WebDriverWait(browser, 120).until(lambda d: d.execute_script(
        "return document.body.dataset.idle === '1' || document.getElementById('status').textContent !== ''"))
    assert browser.find_element("id", "status").text == ""
    drawn = browser.execute_script(
        "return window.tesseraMap.queryRenderedFeatures().filter(f => f.sourceLayer === 'countries').length")
    assert drawn > least, drawn
    centre = browser.execute_script(
        "const p = window.tesseraMap.project([2.35, 46.6]);"
        "return window.tesseraMap.queryRenderedFeatures([p.x, p.y])"
        f".filter(f => f.sourceLayer === 'countries').map(f => f.properties.{name_field})")
    assert "France" in centre, centre
    pixels = decode(browser.find_element("id", "map").screenshot_as_png)[:3].astype(int)
    # The preview's background under a style document that has none.
    background = np.array([0xf2, 0xef, 0xe9])[:, None, None]
    land = np.abs(pixels - background).sum(axis=0) > 30
    assert 0.1 < land.mean() < 0.9, f"{land.mean():.0%} of the map is drawn"


def test_maplibre_draws_the_vector_tiles(tmp_path, tmp_path_factory, browser):
    with serving(tmp_path_factory, "--config", str(config(tmp_path, sources()["postgis"]))) as server:
        assert_preview_draws_countries(browser, f"{server.url}/preview/world", "name", 50)


@pytest.mark.parametrize("kind", ["postgis", "postgis-here", "gpkg"])
def test_a_window_over_max_features_is_a_400_for_maps_and_database_cut_tiles_alike(kind, tmp_path,
                                                                                  tmp_path_factory):
    # 177 countries at zoom 0; the limit is 20. Once a 500 for drawn maps,
    # and ignored by the database's ST_AsMVT (a tile of every feature).
    source = sources()[kind].replace("type: vector,", "type: vector, max_features: 20,")
    with serving(tmp_path_factory, "--config", str(config(tmp_path, source))) as server:
        for path in ("/tiles/world/WebMercatorQuad/0/0/0.mvt", "/tiles/world/WebMercatorQuad/0/0/0.png",
                     "/wms?SERVICE=WMS&REQUEST=GetMap&VERSION=1.3.0&LAYERS=world&STYLES=&CRS=EPSG:4326"
                     "&BBOX=-90,-180,90,180&WIDTH=256&HEIGHT=128&FORMAT=image/png"):
            status, body = fetch(server, path)
            assert status == 400, (kind, path, status, body[:300])
            assert b"max_features" in body, body[:300]
        # A window under the limit is served.
        status, _ = fetch(server, "/tiles/world/WebMercatorQuad/6/33/22.mvt")
        assert status in (200, 204), status


def test_feature_info_shows_every_attribute_unless_fields_narrow_them(tmp_path, tmp_path_factory):
    path = tmp_path / "things.gpkg"
    ds = ogr.GetDriverByName("GPKG").CreateDataSource(str(path))
    srs = osr.SpatialReference()
    srs.ImportFromEPSG(4326)
    layer = ds.CreateLayer("things", srs, ogr.wkbPolygon)
    for name, kind in [("name", ogr.OFTString), ("rank", ogr.OFTInteger), ("photo", ogr.OFTBinary)]:
        layer.CreateField(ogr.FieldDefn(name, kind))
    feature = ogr.Feature(layer.GetLayerDefn())
    feature["name"] = "é" * 5000
    feature["rank"] = 7
    feature.SetFieldBinaryFromHexString("photo", "DEADBEEF")
    feature.SetGeometry(ogr.CreateGeometryFromWkt("POLYGON ((0 0, 10 0, 10 10, 0 10, 0 0))"))
    layer.CreateFeature(feature)
    ds = None
    style = '[{ fill: "#336699" }]'
    narrow = f"""  - name: narrow
    source: {{ type: vector, path: "{path}", fields: [rank], style: {style} }}
    grids: [WebMercatorQuad]
    cache: {{ store: mem }}
"""
    source = f'{{ type: vector, path: "{path}", style: {style} }}'
    with serving(tmp_path_factory, "--config", str(vector_config(tmp_path, "things", source, narrow))) as server:
        common = dict(CRS="EPSG:4326", BBOX="-5,-5,15,15", WIDTH=100, HEIGHT=100, I=50, J=50,
                      INFO_FORMAT="application/json")
        status, body = wms(server, "GetFeatureInfo", LAYERS="things", QUERY_LAYERS="things", **common)
        assert status == 200, body
        props = json.loads(body)["features"][0]["properties"]
        # Every attribute but the binary one; long text cut (in characters).
        assert props["rank"] == 7 and "photo" not in props
        assert props["name"] == "é" * 1024 + "…"
        status, body = wms(server, "GetFeatureInfo", LAYERS="narrow", QUERY_LAYERS="narrow", **common)
        props = json.loads(body)["features"][0]["properties"]
        assert props["rank"] == 7 and "name" not in props
