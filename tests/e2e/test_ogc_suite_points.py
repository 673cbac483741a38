"""What the OGC's executable test suites for OGC API - Maps and Tiles
check, written from the requirements (the suites run outside this
repository): maps drawn in the collection's storage CRS with Content-Crs and
Content-Bbox, the landing page's extent and the storage CRS's bbox where
the Maps definitions put it, map tiles that honour size and background,
`f` as media types, collections named by URL, a default set for the
dataset map, default sizes within the limits, RGBA maps when transparent,
operation ids, and tileset-list entries that carry their set, limits and
tiles. docs/conformance.md maps each requirement to its test."""
import json
import subprocess
import urllib.parse

import pytest

from conftest import ROOT, http_get as get, serving
from imaging import decode

RELIEF = ROOT / "data" / "shadedrelief-5400.tif"


def png_color_type(body):
    """The colour type of a PNG's IHDR: 2 RGB, 6 RGBA."""
    assert body[:8] == b"\x89PNG\r\n\x1a\n", body[:40]
    return body[25]


def doc(server, path):
    status, headers, body = get(server, path)
    assert status == 200, (path, status, body[:300])
    return json.loads(body)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("suite-points")
    tall = d / "tall.tif"
    # 0.0006 x 0.0048 degrees at the native resolution: a default map
    # 1024 wide would be 8192 tall, past the 4096 limit.
    subprocess.run(["gdal_translate", "-q", "-srcwin", "2000", "500", "60", "480", "-a_srs", "EPSG:4326",
                    "-a_ullr", "10", "50.0048", "10.0006", "50", RELIEF, tall], check=True, timeout=120)
    utm = d / "utm.tif"
    subprocess.run(["gdalwarp", "-q", "-t_srs", "EPSG:32632", "-tr", "2000", "2000", "-te", "300000", "5300000",
                    "500000", "5500000", RELIEF, utm], check=True, timeout=120)
    config = d / "tessera.yaml"
    config.write_text(f"""
limits: {{ wms_max_layers: 2 }}
layers:
  - name: relief
    source: {{ path: {RELIEF} }}
    grids: [WebMercatorQuad, WorldCRS84Quad]
    max_zoom: 6
  - name: utm
    source: {{ path: {utm} }}
    max_zoom: 8
  - name: tall
    source: {{ path: {tall} }}
    max_zoom: 12
""")
    with serving(tmp_path_factory, "--config", config) as s:
        yield s


def test_a_collection_map_is_drawn_in_its_storage_crs_with_content_crs_and_bbox(server):
    collection = doc(server, "/ogcapi/collections/utm?f=json")
    assert collection["storageCrs"] == "http://www.opengis.net/def/crs/EPSG/0/32632"
    status, headers, png = get(server, "/ogcapi/collections/utm/map?width=200")
    assert status == 200, png[:300]
    assert headers["Content-Crs"] == "<http://www.opengis.net/def/crs/EPSG/0/32632>"
    bbox = [float(v) for v in headers["Content-Bbox"].split(",")]
    stored = collection["extent"]["spatial"]["storageCrsBbox"][0]
    assert bbox == pytest.approx(stored, abs=1), (bbox, stored)
    # A crs asked for is drawn and said.
    status, headers, _ = get(server, "/ogcapi/collections/utm/map?width=200&crs=http://www.opengis.net/def/crs/OGC/1.3/CRS84")
    assert status == 200 and headers["Content-Crs"] == "<http://www.opengis.net/def/crs/OGC/1.3/CRS84>"
    west, south, east, north = (float(v) for v in headers["Content-Bbox"].split(","))
    assert 6 < west < east < 10 and 47 < south < north < 50, headers["Content-Bbox"]
    # The dataset map, of several collections, is in CRS84.
    status, headers, _ = get(server, "/ogcapi/map?collections=relief&width=100")
    assert status == 200 and headers["Content-Crs"] == "<http://www.opengis.net/def/crs/OGC/1.3/CRS84>"
    assert [float(v) for v in headers["Content-Bbox"].split(",")] == pytest.approx([-180, -90, 180, 90], abs=0.01)


def test_the_landing_page_has_an_extent_and_storage_bboxes_sit_in_the_spatial_extent(server):
    landing = doc(server, "/ogcapi?f=json")
    bbox = landing["extent"]["spatial"]["bbox"][0]
    assert bbox == pytest.approx([-180, -90, 180, 90], abs=0.01), bbox
    collection = doc(server, "/ogcapi/collections/relief?f=json")
    assert "storageCrsBbox" not in collection
    boxes = collection["extent"]["spatial"]["storageCrsBbox"]
    assert isinstance(boxes, list) and len(boxes) == 1 and len(boxes[0]) == 4, boxes
    # EPSG:4326's own axis order: latitude first.
    assert boxes[0] == pytest.approx([-90, -180, 90, 180], abs=0.01), boxes


def test_map_tiles_honour_size_and_background_and_are_not_the_cached_tile(server):
    tile = "/ogcapi/collections/relief/map/tiles/WebMercatorQuad/1/0/0"
    status, _, plain = get(server, tile)
    assert status == 200 and decode(plain).shape[1:] == (256, 256)
    status, _, big = get(server, f"{tile}?width=512&height=512")
    assert status == 200 and decode(big).shape[1:] == (512, 512), big[:200]
    # Asked again plainly, the cached tile is still the 256 one.
    assert get(server, tile)[2] == plain
    status, _, red = get(server, f"{tile}?bgcolor=0xFF0000&transparent=false")
    assert status == 200 and png_color_type(red) == 2
    status, _, clear = get(server, f"{tile}?transparent=true")
    assert status == 200 and png_color_type(clear) == 6
    status, _, small = get(server, "/ogcapi/map/tiles/WebMercatorQuad/1/0/0?collections=relief&width=128&height=128")
    assert status == 200 and decode(small).shape[1:] == (128, 128)


def test_f_takes_media_types_and_map_links_carry_no_query(server):
    for f in ("image/png", "png"):
        status, headers, body = get(server, "/ogcapi/collections/relief/map?width=64&f=" + urllib.parse.quote(f))
        assert status == 200 and headers["Content-Type"] == "image/png", (f, body[:200])
        status, headers, _ = get(server, "/ogcapi/collections/relief/map/tiles/WebMercatorQuad/0/0/0?f="
                                 + urllib.parse.quote(f))
        assert status == 200 and headers["Content-Type"] == "image/png", f
    status, headers, _ = get(server, "/ogcapi/collections/relief/map?width=64&f=image%2Fjpeg")
    assert status == 200 and headers["Content-Type"] == "image/jpeg"
    for f in ("application/json", "json"):
        status, headers, _ = get(server, "/ogcapi?f=" + urllib.parse.quote(f))
        assert status == 200 and headers["Content-Type"].startswith("application/json"), f
    status, headers, _ = get(server, "/ogcapi?f=text%2Fhtml")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    landing = doc(server, "/ogcapi?f=json")
    maps = [l for l in landing["links"] if l["rel"].endswith("/map")]
    assert maps and all("?" not in l["href"] and l["type"] == "image/png" for l in maps), maps
    # A client appends its own query to the link.
    href = maps[0]["href"].split("://", 1)[1].split("/", 1)[1]
    status, _, _ = get(server, f"/{href}?collections=relief&width=50")
    assert status == 200


def test_collections_are_named_by_id_or_by_url(server):
    url = urllib.parse.quote(f"{server.url}/ogcapi/collections/relief", safe="")
    status, headers, body = get(server, f"/ogcapi/map?collections={url}&width=80")
    assert status == 200, body[:300]
    assert [float(v) for v in headers["Content-Bbox"].split(",")] == pytest.approx([-180, -90, 180, 90], abs=0.01)


def test_the_dataset_map_draws_a_default_set_within_the_limit(server, tmp_path, tmp_path_factory):
    # Three layers, at most two a map: the dataset map of no collections
    # is the first two, not a 400; naming three stays a 400.
    status, headers, body = get(server, "/ogcapi/map?width=100")
    assert status == 200, body[:300]
    status, _, _ = get(server, "/ogcapi/map/tiles/WebMercatorQuad/0/0/0")
    assert status == 200
    status, _, body = get(server, "/ogcapi/map?collections=relief,utm,tall&width=100")
    assert status == 400 and b"at most 2" in body, body
    config = tmp_path / "default.yaml"
    config.write_text(f"""
ogcapi: {{ default_collections: [utm] }}
layers:
  - name: relief
    source: {{ path: {RELIEF} }}
  - name: utm
    source: {{ path: {RELIEF} }}
""")
    with serving(tmp_path_factory, "--config", config) as other:
        status, headers, _ = get(other, "/ogcapi/map?width=100")
        assert status == 200
    config.write_text(config.read_text().replace("[utm]", "[utn]"))
    r = subprocess.run([__import__("os").environ["TESSERA_BIN"], "check", config], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0 and 'unknown layer "utn"; did you mean "utm"?' in r.stderr, r.stderr


def test_a_tall_layers_default_map_fits_the_limits_keeping_its_aspect(server):
    status, _, body = get(server, "/ogcapi/collections/tall/map")
    assert status == 200, body[:300]
    height, width = decode(body).shape[1:]
    assert height <= 4096 and width <= 4096, (width, height)
    assert height / width == pytest.approx(8, rel=0.02), (width, height)


def test_a_transparent_map_is_rgba_and_an_opaque_one_rgb(server):
    _, _, clear = get(server, "/ogcapi/collections/relief/map?width=64&transparent=true")
    assert png_color_type(clear) == 6
    _, _, opaque = get(server, "/ogcapi/collections/relief/map?width=64&transparent=false")
    assert png_color_type(opaque) == 2
    _, _, dataset = get(server, "/ogcapi/map?collections=relief&width=64&transparent=true")
    assert png_color_type(dataset) == 6


def test_every_operation_has_an_operation_id_as_the_standards_name_them(server):
    api = doc(server, "/ogcapi/api")
    ids = {path: item["get"]["operationId"] for path, item in api["paths"].items()}
    assert len(set(ids.values())) == len(ids), ids
    assert ids["/"] == "getLandingPage" and ids["/conformance"] == "getConformance"
    assert ids["/collections/{collectionId}/map/tiles/{tileMatrixSetId}/{tileMatrix}/{tileRow}/{tileCol}"] \
        .endswith(".collection.map.getTile")
    assert ids["/map/tiles/{tileMatrixSetId}/{tileMatrix}/{tileRow}/{tileCol}"].endswith(".dataset.map.getTile")
    assert ids["/collections/{collectionId}/map/tiles"].endswith(".collection.map.getTileSetsList")
    assert ids["/collections/{collectionId}/map"].endswith(".collection.getMap")
    assert ids["/map"].endswith(".dataset.getMap")
    conformance = doc(server, "/ogcapi/conformance")["conformsTo"]
    assert "http://www.opengis.net/spec/ogcapi-tiles-1/1.0/conf/oas30" in conformance


def test_tileset_list_entries_carry_their_set_limits_and_tiles(server):
    for path in ("/ogcapi/collections/relief/map/tiles", "/ogcapi/map/tiles"):
        entries = doc(server, path + "?f=json")["tilesets"]
        assert entries, path
        for entry in entries:
            assert entry["tileMatrixSetId"] in ("WebMercatorQuad", "WorldCRS84Quad"), entry
            assert entry["tileMatrixSetLimits"], entry
            items = [l for l in entry["links"] if l["rel"] == "item"]
            assert items and all(l["templated"] and "{tileMatrix}/{tileRow}/{tileCol}" in l["href"] for l in items)
            # The item link answers a tile.
            href = items[0]["href"].split("://", 1)[1].split("/", 1)[1]
            status, _, _ = get(server, "/" + href.replace("{tileMatrix}", "0").replace("{tileRow}", "0")
                               .replace("{tileCol}", "0"))
            assert status == 200, href
