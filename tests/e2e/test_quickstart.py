"""Starting the way users of martin or titiler start: `tessera serve
FILE...`, with sensible styles; a warning when tiles live only in memory;
links right behind a TLS proxy; TileJSON that says which grid it is."""
import gzip
import json
import shutil
import subprocess

import mapbox_vector_tile
import numpy as np

from conftest import ROOT, fetch, serving
from imaging import decode
from vectors import PLACES, SHAPEFILE


def tilejson(server, layer, grid="WebMercatorQuad", headers=None):
    import urllib.request
    req = urllib.request.Request(f"{server.url}/tiles/{layer}/{grid}/tilejson.json", headers=headers or {})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def test_serve_files_makes_a_layer_per_file_and_stretches_a_dem(tmp_path_factory):
    folder = tmp_path_factory.mktemp("files")
    shutil.copy(ROOT / "data/elev.tif", folder / "Luxembourg DEM.tif")
    with serving(tmp_path_factory, str(folder / "Luxembourg DEM.tif"), str(ROOT / "data/L7_ETMs.tif")) as server:
        doc = tilejson(server, "Luxembourg_DEM")
        assert doc["name"] == "Luxembourg_DEM"
        assert tilejson(server, "L7_ETMs")["name"] == "L7_ETMs"
        # The DEM spans 140-560 m: a stretched grey ramp uses the whole
        # range, not an almost white (or black) picture.
        bbox = "600000,6350000,720000,6500000"
        status, body = fetch(server, "/wms?SERVICE=WMS&REQUEST=GetMap&VERSION=1.3.0&LAYERS=Luxembourg_DEM&STYLES="
                                     f"&CRS=EPSG:3857&BBOX={bbox}&WIDTH=128&HEIGHT=160&FORMAT=image/png&TRANSPARENT=TRUE")
        assert status == 200
        rgba = decode(body).astype(int)
        grey = rgba[0][rgba[3] > 0]
        assert grey.size > 1000
        assert grey.min() < 60 and grey.max() > 190 and 60 < grey.mean() < 190, (grey.min(), grey.max(), grey.mean())
        assert (rgba[0] == rgba[1]).all() and (rgba[1] == rgba[2]).all(), "a grey ramp"
        # Capabilities say what each file is.
        status, body = fetch(server, "/wms?SERVICE=WMS&REQUEST=GetCapabilities&VERSION=1.3.0")
        text = body.decode()
        assert "Luxembourg DEM.tif (GTiff raster, 95 x 90 pixels, 1 band)." in text, text[:500]
        assert "<Keyword>raster</Keyword>" in text and "<Keyword>tessera</Keyword>" in text
    assert "cached in memory only" in server.log_text()


def test_links_follow_the_proxy_only_when_trusted(tmp_path_factory):
    forwarded = {"X-Forwarded-Proto": "https", "X-Forwarded-Host": "maps.example.org",
                 "X-Forwarded-Prefix": "/tessera"}
    config = tmp_path_factory.mktemp("proxy") / "tessera.yaml"
    config.write_text(f"""
server: {{ trust_forwarded: true }}
layers:
  - name: relief
    source: {{ path: {ROOT}/data/shadedrelief-5400.tif }}
""")
    with serving(tmp_path_factory, "--config", str(config)) as server:
        doc = tilejson(server, "relief", headers=forwarded)
        assert doc["tiles"][0].startswith("https://maps.example.org/tessera/tiles/relief/"), doc["tiles"]
        doc = tilejson(server, "relief", headers={"Forwarded": 'for=1.2.3.4;proto=https;host="tiles.example.net"'})
        assert doc["tiles"][0].startswith("https://tiles.example.net/tiles/relief/"), doc["tiles"]
    with serving(tmp_path_factory) as server:
        doc = tilejson(server, "relief", headers=forwarded)
        assert doc["tiles"][0].startswith(server.url + "/tiles/"), doc["tiles"]


def test_tilejson_names_its_grid_and_keeps_polar_latitudes_outside_web_mercator(tessera):
    merc = tilejson(tessera, "relief")
    assert merc["crs"] == "EPSG:3857" and merc["tileMatrixSet"] == "WebMercatorQuad"
    assert merc["bounds"][3] < 85.06
    geo = tilejson(tessera, "relief", "WorldCRS84Quad")
    assert geo["tileMatrixSet"] == "WorldCRS84Quad" and geo["crs"] != "EPSG:3857"
    assert geo["bounds"][3] > 89.0 and geo["bounds"][1] < -89.0, geo["bounds"]


def test_serve_vector_files_makes_a_layer_per_data_layer_drawn_and_cut_into_tiles(tmp_path_factory):
    folder = tmp_path_factory.mktemp("vector-files")
    gpkg = folder / "world.gpkg"
    for source, name in [(SHAPEFILE, "countries"), (PLACES, "places")]:
        subprocess.run(["ogr2ogr", "-f", "GPKG", *(["-update"] if gpkg.exists() else []), "-nln", name,
                        "-nlt", "PROMOTE_TO_MULTI", str(gpkg), str(source)], check=True, timeout=120)
    geojson = folder / "Some Places.geojson"
    subprocess.run(["ogr2ogr", "-f", "GeoJSON", str(geojson), str(PLACES)], check=True, timeout=120)
    # A table of one point: an extent of no width is a layer like any other.
    one = folder / "one.geojson"
    one.write_text(json.dumps({"type": "FeatureCollection", "features": [
        {"type": "Feature", "properties": {"name": "Olinda"}, "geometry": {"type": "Point", "coordinates": [-34.85, -8.01]}}]}))
    with serving(tmp_path_factory, str(gpkg), str(geojson), str(one)) as server:
        status, body = fetch(server, "/tiles/one/WebMercatorQuad/0/0/0.png")
        assert status == 200 and (decode(body)[3] > 0).sum() > 10, "the point drawn"
        # A GeoPackage of two layers: one layer each; a GeoJSON: named after the file.
        for layer in ["countries", "places", "Some_Places"]:
            doc = tilejson(server, layer)
            assert doc["vector_layers"], doc
        status, body = fetch(server, "/tiles/countries/WebMercatorQuad/1/1/0.mvt")
        assert status == 200
        tile = mapbox_vector_tile.decode(gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body)
        assert len(tile["countries"]["features"]) > 20
        # Drawn with the default style: a blue outline over a translucent fill.
        status, body = fetch(server, "/tiles/countries/WebMercatorQuad/1/1/0.png")
        assert status == 200
        rgba = decode(body).astype(int)
        drawn = rgba[3] > 0
        assert drawn.mean() > 0.2
        blue = (rgba[2] > rgba[0] + 60) & drawn
        assert blue.sum() / drawn.sum() > 0.9
        status, body = fetch(server, "/tiles/Some_Places/WebMercatorQuad/2/2/1.png")
        assert status == 200 and (decode(body)[3] > 0).sum() > 20, "cities drawn as markers"
