"""OGC API - Tiles under /ogcapi: the landing page, conformance,
collections, tile matrix sets (compared with the OGC registry's
definitions as morecantile ships them), tilesets and tiles, read by GDAL's
OGCAPI driver; tiles are the XYZ tiles (same bytes, same ETag, one render);
every link answers; errors are problem details."""
import importlib.util
import json
import os
import re
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from osgeo import gdal

from conftest import ROOT, serving
from imaging import decode
from test_dimensions import DATES, assert_color, solid
from test_ogc_conformance import schemas  # noqa: F401 (a fixture)

gdal.UseExceptions()


def get(server, path, accept=None):
    """(status, headers, body) of `path` (or an absolute URL)."""
    url = path if path.startswith("http") else server.url + path
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def doc(server, path):
    status, headers, body = get(server, path)
    assert status == 200, (path, body[:300])
    assert headers["Content-Type"].startswith("application/json"), headers["Content-Type"]
    return json.loads(body)


def renders(server, layer):
    _, _, body = get(server, "/metrics")
    m = re.search(rf'tessera_metatile_renders_total{{layer="{layer}"}} (\d+)', body.decode())
    return int(m.group(1)) if m else 0


def write_config(data, public_url):
    """The layers served here, with `server.public_url` when given."""
    series = data / "series"
    series.mkdir(exist_ok=True)
    for date, color in DATES.items():
        solid(series / f"day_{date}.tif", color, -180, 180)
    gpkg = os.environ.get("TESSERA_TEST_GPKG")
    if not gpkg:
        pytest.fail("TESSERA_TEST_GPKG is not set: start scripts/postgis (scripts/test does)", pytrace=False)
    config = data / ("public.yaml" if public_url else "direct.yaml")
    server = f'server: {{ public_url: "{public_url}" }}' if public_url else ""
    config.write_text(f"""
{server}
stores: {{ mem: {{ type: memory }} }}
layers:
  - name: relief
    title: Shaded relief
    source: {{ path: {ROOT}/data/shadedrelief-5400.tif }}
    grids: [WebMercatorQuad, WorldCRS84Quad]
    formats: [png, jpeg]
    max_zoom: 6
    cache: {{ store: mem, metatile: [2, 2] }}
  - name: countries
    source: {{ type: vector, path: "{gpkg}", fields: [NAME], style: [{{ fill: "#336699" }}] }}
    grids: [WebMercatorQuad]
    formats: [mvt, png]
    max_zoom: 5
    cache: {{ store: mem }}
  - name: series
    source: {{ type: mosaic, dir: {series} }}
    grids: [WebMercatorQuad]
    max_zoom: 4
    cache: {{ store: mem }}
    dimensions:
      time: {{ from_path: 'day_(\\d{{4}}-\\d{{2}}-\\d{{2}})' }}
""")
    return config


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return tmp_path_factory.mktemp("ogcapi")


@pytest.fixture(scope="module")
def server(tmp_path_factory, data):
    """Links built from a public URL (mapped back to this server by `local`)."""
    with serving(tmp_path_factory, "--config", str(write_config(data, "http://maps.example.test/base"))) as s:
        yield s


@pytest.fixture(scope="module")
def direct(tmp_path_factory, data):
    """Links to this server itself, for clients that follow them."""
    with serving(tmp_path_factory, "--config", str(write_config(data, None))) as s:
        yield s


def local(href):
    """An href of the public URL as a path of this server."""
    prefix = "http://maps.example.test/base"
    assert href.startswith(prefix), href
    return href[len(prefix):]


def test_landing_conformance_and_collections(server):
    landing = doc(server, "/ogcapi")
    rels = {l["rel"]: l["href"] for l in landing["links"]}
    assert rels["conformance"] == "http://maps.example.test/base/ogcapi/conformance"
    assert rels["data"] == "http://maps.example.test/base/ogcapi/collections"
    assert rels["http://www.opengis.net/def/rel/ogc/1.0/tiling-schemes"].endswith("/ogcapi/tileMatrixSets")
    conformance = doc(server, "/ogcapi/conformance")["conformsTo"]
    assert "http://www.opengis.net/spec/ogcapi-tiles-1/1.0/conf/core" in conformance
    assert "http://www.opengis.net/spec/ogcapi-tiles-1/1.0/conf/mvt" in conformance
    collections = {c["id"]: c for c in doc(server, "/ogcapi/collections")["collections"]}
    assert set(collections) == {"relief", "countries", "series"}
    relief = doc(server, "/ogcapi/collections/relief")
    assert relief["title"] == "Shaded relief"
    bbox = relief["extent"]["spatial"]["bbox"][0]
    assert bbox == pytest.approx([-180, -90, 180, 90], abs=1e-6)
    assert relief["storageCrs"] == "http://www.opengis.net/def/crs/OGC/1.3/CRS84" or \
        relief["storageCrs"] == "http://www.opengis.net/def/crs/EPSG/0/4326"
    rels = {l["rel"] for l in relief["links"]}
    assert "http://www.opengis.net/def/rel/ogc/1.0/tilesets-map" in rels
    assert "http://www.opengis.net/def/rel/ogc/1.0/tilesets-vector" not in rels
    countries = collections["countries"]
    assert "http://www.opengis.net/def/rel/ogc/1.0/tilesets-vector" in {l["rel"] for l in countries["links"]}
    series = collections["series"]
    assert series["extent"]["temporal"]["interval"] == [["2024-01-01T00:00:00Z", "2024-03-01T00:00:00Z"]]
    # Browsers get HTML (by Accept or f=html), whose links are followable.
    for path, accept in (("/ogcapi/collections", "text/html,application/xhtml+xml,*/*;q=0.8"),
                         ("/ogcapi/collections?f=html", None)):
        status, headers, body = get(server, path, accept)
        assert status == 200 and headers["Content-Type"].startswith("text/html"), path
        assert b'href="http://maps.example.test/base/ogcapi/collections/relief' in body


def test_tile_matrix_sets_are_the_registered_ones(server):
    # The registry's definitions as morecantile (PyPI) ships them: read as
    # files, without importing it (and PROJ through it).
    spec = importlib.util.find_spec("morecantile")
    assert spec is not None, "morecantile is not installed; run scripts/install-deps"
    registry = Path(spec.submodule_search_locations[0]) / "data"
    listed = {t["id"] for t in doc(server, "/ogcapi/tileMatrixSets")["tileMatrixSets"]}
    assert {"WebMercatorQuad", "WorldCRS84Quad"} <= listed
    assert not any("@" in t for t in listed), "HiDPI twins are not tile matrix sets of their own"
    for tms_id in ("WebMercatorQuad", "WorldCRS84Quad"):
        ours = doc(server, f"/ogcapi/tileMatrixSets/{tms_id}")
        theirs = json.loads((registry / f"{tms_id}.json").read_text())
        assert ours["uri"] == theirs["uri"]
        their_crs = theirs["crs"]["uri"] if isinstance(theirs["crs"], dict) else theirs["crs"]
        assert ours["crs"] == their_crs
        assert ours["orderedAxes"] == theirs["orderedAxes"]
        assert len(ours["tileMatrices"]) >= 19
        for a, b in zip(ours["tileMatrices"], theirs["tileMatrices"]):
            assert a["id"] == b["id"]
            assert a["scaleDenominator"] == pytest.approx(b["scaleDenominator"], rel=1e-9)
            assert a["cellSize"] == pytest.approx(b["cellSize"], rel=1e-9)
            assert a["pointOfOrigin"] == pytest.approx(b["pointOfOrigin"], rel=1e-9)
            for k in ("tileWidth", "tileHeight", "matrixWidth", "matrixHeight"):
                assert a[k] == b[k], (tms_id, a["id"], k)
    status, headers, body = get(server, "/ogcapi/tileMatrixSets/NoSuchGrid")
    assert status == 404 and headers["Content-Type"] == "application/problem+json"
    assert json.loads(body)["status"] == 404


def test_tilesets_list_limits_and_tile_templates(server):
    sets = doc(server, "/ogcapi/collections/relief/map/tiles")["tilesets"]
    assert {s["crs"] for s in sets} == {"http://www.opengis.net/def/crs/EPSG/0/3857",
                                        "http://www.opengis.net/def/crs/OGC/1.3/CRS84"}
    tileset = doc(server, "/ogcapi/collections/relief/map/tiles/WebMercatorQuad")
    assert tileset["dataType"] == "map"
    assert tileset["tileMatrixSetURI"] == "http://www.opengis.net/def/tilematrixset/OGC/1.0/WebMercatorQuad"
    limits = tileset["tileMatrixSetLimits"]
    assert [l["tileMatrix"] for l in limits] == [str(z) for z in range(7)]
    assert limits[3] == {"tileMatrix": "3", "minTileRow": 0, "maxTileRow": 7, "minTileCol": 0, "maxTileCol": 7}
    items = {l["type"]: l["href"] for l in tileset["links"] if l["rel"] == "item"}
    assert set(items) == {"image/png", "image/jpeg"} and all(l.get("templated") for l in tileset["links"]
                                                              if l["rel"] == "item")
    url = items["image/jpeg"].replace("{tileMatrix}", "2").replace("{tileRow}", "1").replace("{tileCol}", "2")
    status, headers, body = get(server, local(url))
    assert status == 200 and headers["Content-Type"] == "image/jpeg" and body[:2] == b"\xff\xd8"
    vector = doc(server, "/ogcapi/collections/countries/tiles/WebMercatorQuad")
    assert vector["dataType"] == "vector"
    assert [l["type"] for l in vector["links"] if l["rel"] == "item"] == ["application/vnd.mapbox-vector-tile"]
    # A layer without vector tiles has no vector tilesets.
    status, headers, body = get(server, "/ogcapi/collections/relief/tiles")
    assert status == 404 and headers["Content-Type"] == "application/problem+json"


def test_tiles_are_the_xyz_tiles_from_one_cache(server):
    before = renders(server, "relief")
    status, headers, ogc = get(server, "/ogcapi/collections/relief/map/tiles/WebMercatorQuad/4/5/9?f=png")
    assert status == 200 and headers["Content-Type"] == "image/png", ogc[:200]
    status, xyz_headers, xyz = get(server, "/tiles/relief/WebMercatorQuad/4/9/5.png")
    assert status == 200 and xyz == ogc
    assert xyz_headers["ETag"] == headers["ETag"]
    assert "accept" in headers.get_all("Vary"), headers.get_all("Vary")
    assert xyz_headers["X-Cache"] == "HIT"
    assert renders(server, "relief") - before == 1
    # Accept chooses the format when f is absent.
    status, headers, body = get(server, "/ogcapi/collections/relief/map/tiles/WebMercatorQuad/4/5/9",
                                accept="image/jpeg")
    assert status == 200 and headers["Content-Type"] == "image/jpeg"
    status, headers, body = get(server, "/ogcapi/collections/relief/map/tiles/WebMercatorQuad/4/5/9",
                                accept="application/geo+json")
    assert status == 406 and headers["Content-Type"] == "application/problem+json"
    # Vector tiles: the same bytes as /tiles/...mvt.
    status, headers, mvt = get(server, "/ogcapi/collections/countries/tiles/WebMercatorQuad/2/1/2?f=mvt")
    status2, _, xyz_mvt = get(server, "/tiles/countries/WebMercatorQuad/2/2/1.mvt")
    assert status == 200 and status2 == 200 and mvt == xyz_mvt and len(mvt) > 100
    # datetime picks a dimension value, as ?time= does.
    for date, color in DATES.items():
        status, _, body = get(server, f"/ogcapi/collections/series/map/tiles/WebMercatorQuad/1/0/1?datetime={date}")
        assert status == 200, body
        assert_color(body, color)


def test_errors_are_problem_details(server):
    for path, status in [("/ogcapi/collections/nope", 404),
                         ("/ogcapi?f=xml", 400),
                         ("/ogcapi/collections/relief/map/tiles/WebMercatorQuad/4/99/0?f=png", 404),
                         ("/ogcapi/collections/relief/map/tiles/WebMercatorQuad/99/0/0?f=png", 404),
                         ("/ogcapi/collections/relief/map/tiles/WebMercatorQuad/2/0/0?f=webp", 400),
                         ("/ogcapi/collections/series/map/tiles/WebMercatorQuad/1/0/0?datetime=1999-01-01", 400)]:
        got, headers, body = get(server, path)
        assert got == status, (path, got, body[:300])
        assert headers["Content-Type"] == "application/problem+json", (path, headers["Content-Type"])
        problem = json.loads(body)
        assert problem["status"] == status and problem["detail"], problem


def crawl(server):
    """Every JSON document reachable by links from the landing page (the
    public URL mapped back to this server), by path; asserts that every
    href answers 200."""
    seen, documents, queue = set(), {}, ["/ogcapi"]
    while queue:
        path = queue.pop()
        if path in seen:
            continue
        seen.add(path)
        status, headers, body = get(server, path)
        assert status == 200, (path, status, body[:200])
        if not headers["Content-Type"].startswith("application/json"):
            continue
        documents[path] = json.loads(body)

        def walk(node):
            if isinstance(node, dict):
                if "href" in node and not node.get("templated"):
                    queue.append(local(node["href"]))
                for v in node.values():
                    walk(v)
            elif isinstance(node, list):
                for v in node:
                    walk(v)
        walk(documents[path])
    assert len(seen) > 20, len(seen)
    return documents


def test_every_link_answers(server):
    crawl(server)


class OgcApiDefinition:
    """The official OpenAPI definition of OGC API - Tiles or Maps (bundled
    JSON, as scripts/ogc-schemas takes it from the OGC reference): checks a
    document against the schema of the 200 answer of its path."""

    def __init__(self, schemas, part):
        import jsonschema
        path = schemas / f"ogcapi/{part}/ogcapi-{part}-1.bundled.json"
        if not path.is_file():
            pytest.fail(f"{path} is missing: scripts/ogc-schemas found no OGC reference "
                        "(set TESSERA_OGC_REFERENCE)", pytrace=False)
        self.definition = json.loads(path.read_text())
        # A defect of the definitions' `extent-uad`: its additionalProperties
        # are meant for "additional dimensions ... beyond those described in
        # temporal and spatial" (its description) but, declared beside no
        # properties, apply to `spatial` and `temporal` too, so that no
        # extent with a bbox is valid. Declared here, as intended.
        uad = self.definition["components"]["schemas"].get("extent-uad")
        if uad:
            uad["allOf"][1].setdefault("properties", {}).update({"spatial": {}, "temporal": {}})
        self.resolver = jsonschema.RefResolver("", self.definition)
        self.paths = [(re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", t.rstrip("/")) + "/?$"), t)
                      for t in self.definition["paths"]]

    def resolve(self, node):
        while "$ref" in node:
            node = self.resolver.resolve(node["$ref"])[1]
        return node

    def template(self, path):
        """The definition's path template matching `path` (under /ogcapi)."""
        found = [t for regex, t in self.paths if regex.match(path[len("/ogcapi"):])]
        return found[0] if found else None

    def validate(self, path, document, status="200"):
        import jsonschema
        template = self.template(path)
        response = self.resolve(self.definition["paths"][template]["get"]["responses"][status])
        schema = self.resolve(response["content"]["application/json"]["schema"])
        jsonschema.Draft4Validator(schema, resolver=self.resolver).validate(document)


def tms_validator(schemas, name):
    """A validator of the OGC TileMatrixSet 2.0 JSON schema `name`, its
    relative references read from the files beside it."""
    import jsonschema
    folder = schemas / "tms/2.0/json"
    if not (folder / name).is_file():
        pytest.fail(f"{folder / name} is missing: scripts/ogc-schemas found no OGC reference", pytrace=False)
    schema = json.loads((folder / name).read_text())
    resolver = jsonschema.RefResolver((folder / name).as_uri(), schema)
    return jsonschema.Draft201909Validator(schema, resolver=resolver)


def test_documents_are_valid_against_the_official_definitions(server, schemas):
    """Every JSON document served (crawled from the landing page) is valid
    against the OGC API - Tiles and Maps definitions where they describe its
    path; tile matrix sets and tilesets against the TileMatrixSet 2.0 JSON
    schemas; problem details against the definitions' exception schema."""
    tiles, maps = OgcApiDefinition(schemas, "tiles"), OgcApiDefinition(schemas, "maps")
    tile_matrix_set, tileset = tms_validator(schemas, "tileMatrixSet.json"), tms_validator(schemas, "tileSet.json")
    documents = crawl(server)
    checked = {"tiles": 0, "maps": 0, "tms": 0, "tileset": 0}
    for path, document in documents.items():
        bare = path.split("?")[0]
        for name, definition in (("tiles", tiles), ("maps", maps)):
            if definition.template(bare):
                definition.validate(bare, document)
                checked[name] += 1
        if re.fullmatch(r"/ogcapi/tileMatrixSets/[^/]+", bare):
            tile_matrix_set.validate(document)
            checked["tms"] += 1
        if re.fullmatch(r"/ogcapi(/collections/[^/]+)?(/map)?/tiles/[^/]+", bare):
            tileset.validate(document)
            checked["tileset"] += 1
    # Landing, conformance, collections, three collections, tile matrix
    # sets, raster, vector and dataset tilesets all were among them.
    assert checked["tiles"] >= 12 and checked["maps"] >= 8, checked
    assert checked["tms"] >= 2 and checked["tileset"] >= 4, checked
    for template in ("/", "/conformance", "/collections", "/collections/{collectionId}", "/tileMatrixSets",
                     "/tileMatrixSets/{tileMatrixSetId}", "/collections/{collectionId}/map/tiles",
                     "/collections/{collectionId}/map/tiles/{tileMatrixSetId}", "/collections/{collectionId}/tiles",
                     "/collections/{collectionId}/tiles/{tileMatrixSetId}", "/map/tiles",
                     "/map/tiles/{tileMatrixSetId}"):
        assert any(tiles.template(p.split("?")[0]) == template for p in documents), template
    # Errors: the definitions' exception schema.
    tile = "/ogcapi/collections/relief/map/tiles/WebMercatorQuad/2/0/9"
    for path, accept, code in ((tile, None, "404"), (tile.replace("/9", "/0"), "application/geo+json", "406")):
        status, _, body = get(server, path, accept)
        assert str(status) == code, (path, status)
        tiles.validate(path, json.loads(body), code)


def test_gdal_ogcapi_driver_reads_the_map_tiles(direct):
    """GDAL 3.6's driver crops to the collection's lon/lat bbox without
    reprojecting it, so it reads the WorldCRS84Quad tileset (which it
    prefers anyway)."""
    server = direct
    ds = gdal.OpenEx(f"OGCAPI:{server.url}/ogcapi/collections/relief", open_options=["API=TILES"])
    assert ds is not None
    # Zoom 6 of WorldCRS84Quad: 2 x 64 tiles across, 64 down.
    assert (ds.RasterXSize, ds.RasterYSize) == (256 * 128, 256 * 64)
    gt = ds.GetGeoTransform()
    assert gt[0] == pytest.approx(-180) and gt[3] == pytest.approx(90)
    assert gt[1] == pytest.approx(360 / (256 * 128)) and gt[5] == pytest.approx(-gt[1])
    assert "CRS84" in ds.GetProjection() or "4326" in ds.GetProjection()
    # A window read through the tiles is the WMS picture of that window.
    x0, y0, w, h = 256 * 40, 256 * 20, 512, 256
    window = ds.ReadAsArray(x0, y0, w, h)
    west, north = gt[0] + x0 * gt[1], gt[3] + y0 * gt[5]
    east, south = west + w * gt[1], north + h * gt[5]
    status, _, png = get(server, "/wms?SERVICE=WMS&VERSION=1.3.0&REQUEST=GetMap&LAYERS=relief&STYLES=&CRS=CRS:84"
                                 f"&BBOX={west},{south},{east},{north}&WIDTH={w}&HEIGHT={h}&FORMAT=image/png")
    assert status == 200
    wms = decode(png)[:3].astype(float)
    diff = np.abs(window[:3].astype(float) - wms).mean()
    assert diff < 4, diff


OGR_READ_VECTOR_TILES = """
import json, sys
import pyogrio.raw
url, tms = sys.argv[1], sys.argv[2]
layers = [str(name) for name, _ in pyogrio.list_layers(url)]
meta, _, geometries, fields = pyogrio.raw.read(url, layer="Zoom level 1", TILEMATRIXSET=tms)
print(json.dumps({"layers": layers, "crs": meta["crs"], "fields": [str(f) for f in meta["fields"]],
                  "features": len(geometries), "names": sorted({str(v) for v in fields[1]})}))
"""


def test_gdal_ogcapi_driver_lists_the_vector_tiles_layers(direct):
    """The OGCAPI driver reads an MVT tileset as one layer per zoom level.
    Debian's GDAL 3.6.2 builds that driver without its vector branch (it is
    compiled only where the GML driver's define reaches it, which 3.6's
    CMake order does not), so this runs GDAL 3.12 as pyogrio's wheel bundles
    it, in a process of its own (two GDALs do not share one)."""
    import subprocess
    import sys
    from osgeo import ogr
    gpkg = ogr.Open(os.environ["TESSERA_TEST_GPKG"])
    names = {f.GetField("NAME") for f in gpkg.GetLayer(0)}
    url = f"OGCAPI:{direct.url}/ogcapi/collections/countries"
    run = subprocess.run([sys.executable, "-c", OGR_READ_VECTOR_TILES, url, "WebMercatorQuad"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout)
    assert got["layers"] == [f"Zoom level {z}" for z in range(6)], got["layers"]
    assert "EPSG:3857" in got["crs"], got["crs"]
    assert "NAME" in got["fields"], got["fields"]
    # The features of zoom level 1 are the countries (a few islands smaller
    # than a pixel at that zoom may drop out).
    assert set(got["names"]) <= names, set(got["names"]) - names
    assert len(got["names"]) >= 0.9 * len(names), (len(got["names"]), len(names))
    assert {"France", "Brazil", "Japan"} <= set(got["names"])


def test_maps_of_a_collection_and_of_several(server):
    # width alone: the height from the bbox's aspect (bbox in CRS84); the
    # map in the collection's storage CRS by default, its area said in
    # that CRS's axis order.
    status, headers, body = get(server, "/ogcapi/collections/relief/map?bbox=-10,30,30,60&width=400&f=png")
    assert status == 200 and headers["Content-Type"] == "image/png", body[:300]
    assert decode(body).shape[1:] == (300, 400)
    assert headers["Content-Crs"] == "<http://www.opengis.net/def/crs/EPSG/0/4326>"
    assert [float(v) for v in headers["Content-Bbox"].split(",")] == pytest.approx([30, -10, 60, 30])
    # The same window as WMS draws it.
    status, _, wms = get(server, "/wms?SERVICE=WMS&VERSION=1.3.0&REQUEST=GetMap&LAYERS=relief&STYLES=&CRS=CRS:84"
                                 "&BBOX=-10,30,30,60&WIDTH=400&HEIGHT=300&FORMAT=image/png&TRANSPARENT=TRUE")
    assert np.abs(decode(body).astype(float) - decode(wms).astype(float)).mean() < 1
    # Another CRS, the bbox given in EPSG:4326 (latitude first).
    status, headers, body = get(server, "/ogcapi/collections/relief/map?bbox=30,-10,60,30"
                                        "&bbox-crs=http://www.opengis.net/def/crs/EPSG/0/4326"
                                        "&crs=http://www.opengis.net/def/crs/EPSG/0/3857&width=256&height=256")
    assert status == 200 and headers["Content-Crs"] == "<http://www.opengis.net/def/crs/EPSG/0/3857>", body[:300]
    # Several collections, bottom first; the background where none draws.
    status, _, body = get(server, "/ogcapi/map?collections=countries&bbox=-40,-10,-20,10&width=64&height=64"
                                  "&transparent=false&bgcolor=0xFF0000&f=png")
    assert status == 200, body[:300]
    img = decode(body)
    assert tuple(img[:3, 32, 32]) == (255, 0, 0), "the mid-Atlantic is the background"
    status, _, body = get(server, "/ogcapi/map?collections=relief,countries&bbox=0,40,20,50&width=64&f=jpeg")
    assert status == 200 and body[:2] == b"\xff\xd8"
    # Dimension values, as for tiles.
    for date, color in DATES.items():
        status, _, body = get(server, f"/ogcapi/collections/series/map?datetime={date}&width=64&height=32")
        assert status == 200, body[:300]
        assert_color(body, color)
    for path, code in [("/ogcapi/collections/relief/map?bbox=1,2,3", 400),
                       ("/ogcapi/collections/relief/map?width=100000&height=100000", 400),
                       ("/ogcapi/collections/nope/map", 404),
                       ("/ogcapi/map?collections=relief,nope", 404),
                       ("/ogcapi/collections/relief/map?f=mvt", 400),
                       ("/ogcapi/collections/series/map?datetime=1999-01-01", 400)]:
        status, headers, body = get(server, path)
        assert status == code and headers["Content-Type"] == "application/problem+json", (path, status, body[:200])


# The scale at which a CRS84 pixel is one degree (0.28 mm pixels).
ONE_DEGREE = 2 * np.pi * 6378137 / 360 / 0.00028


def test_maps_honour_the_declared_classes(server):
    """Each Maps class declared beyond core: background, scaling, display
    resolution, spatial subsetting, datetime, general subsetting, crs."""
    conformance = doc(server, "/ogcapi/conformance")["conformsTo"]
    for name in ("background", "scaling", "display-resolution", "spatial-subsetting", "datetime",
                 "general-subsetting", "crs", "collections-selection", "tilesets"):
        assert f"http://www.opengis.net/spec/ogcapi-maps-1/1.0/conf/{name}" in conformance, name

    def image(query, layer="countries"):
        status, headers, body = get(server, f"/ogcapi/collections/{layer}/map?{query}")
        assert status == 200 and headers["Content-Type"] == "image/png", (query, status, body[:300])
        return decode(body), headers, body

    # Background: a web colour name or 0x[AA]RRGGBB; transparent unless a
    # bgcolor is given (the mid-Atlantic has no country).
    atlantic = "bbox=-40,-10,-20,10&width=32&height=32&f=png"
    img, _, _ = image(atlantic)
    assert img.shape[0] == 4 and img[3, 16, 16] == 0, "transparent by default"
    img, _, _ = image(atlantic + "&bgcolor=navy")
    assert tuple(img[:, 16, 16]) in ((0, 0, 128, 255), (0, 0, 128)), img[:, 16, 16]
    img, _, _ = image(atlantic + "&bgcolor=0xFF00FF00")
    assert tuple(img[:3, 16, 16]) == (0, 255, 0)
    img, _, _ = image(atlantic + "&bgcolor=navy&transparent=true")
    assert img[3, 16, 16] == 0
    # Scaling: the size from a scale denominator over the area; display
    # resolution: the same scale on pixels twice as large halves it.
    img, _, _ = image(f"bbox=-180,-90,180,90&scale-denominator={ONE_DEGREE}", "relief")
    assert img.shape[1:] == (180, 360)
    img, _, _ = image(f"bbox=-180,-90,180,90&scale-denominator={ONE_DEGREE}&mm-per-pixel=0.56", "relief")
    assert img.shape[1:] == (90, 180)
    # Spatial subsetting: bbox, bbox-crs, subset, subset-crs and center
    # name the same window, drawn the same.
    _, _, by_bbox = image("bbox=0,-45,90,45&width=90&height=90", "relief")
    for query in ("subset=Lat(-45:45),Lon(0:90)&width=90&height=90",
                  "subset=Lon(0:90)&subset=Lat(-45:45)&width=90&height=90",
                  "bbox=-45,0,45,90&bbox-crs=http://www.opengis.net/def/crs/EPSG/0/4326&width=90&height=90",
                  f"center=45,0&scale-denominator={ONE_DEGREE}&width=90&height=90",
                  f"center=0,45&center-crs=http://www.opengis.net/def/crs/EPSG/0/4326"
                  f"&scale-denominator={ONE_DEGREE}&width=90&height=90"):
        _, _, body = image(query, "relief")
        assert body == by_bbox, query
    _, _, merc = image("subset=E(0:5009377.085697311),N(0:5009377.085697311)"
                       "&subset-crs=http://www.opengis.net/def/crs/EPSG/0/3857&width=64&height=64"
                       "&crs=http://www.opengis.net/def/crs/EPSG/0/3857", "relief")
    _, _, merc_bbox = image("bbox=0,0,5009377.085697311,5009377.085697311"
                            "&bbox-crs=http://www.opengis.net/def/crs/EPSG/0/3857&width=64&height=64"
                            "&crs=http://www.opengis.net/def/crs/EPSG/0/3857", "relief")
    assert merc == merc_bbox
    # Datetime: an instant, or an interval whose latest value is drawn;
    # general subsetting: the same by subset.
    dates = list(DATES)
    for query, date in ((f"datetime={dates[1]}", dates[1]),
                        ("datetime=../2024-01-31", dates[0]),
                        ("datetime=2024-01-15/..", dates[-1]),
                        ("datetime=2024-01-15/2024-02-15", dates[1]),
                        ('subset=time("2024-02-01T00:00:00Z")', dates[1]),
                        ('subset=time("2024-01-15":"2024-02-15")', dates[1]),
                        ("subset=time(*:\"2024-01-31\")", dates[0])):
        quoted = query.replace('"', "%22")
        status, _, body = get(server, f"/ogcapi/collections/series/map?{quoted}&width=64&height=32")
        assert status == 200, (query, body[:300])
        assert_color(body, DATES[date])
    # CRS: the image's CRS in Content-Crs.
    _, headers, _ = image("crs=http://www.opengis.net/def/crs/EPSG/0/3857&width=64&height=64", "relief")
    assert headers["Content-Crs"] == "<http://www.opengis.net/def/crs/EPSG/0/3857>"
    # What the classes refuse, as problems.
    for query, code in [("bbox=0,0,10,10&subset=Lat(0:10)", 400),
                        ("subset=Lat(10)", 400),
                        ("center=0,0&bbox=0,0,10,10", 400),
                        (f"bbox=0,0,10,10&scale-denominator={ONE_DEGREE}&width=10", 400),
                        ("scale-denominator=-1", 400),
                        ("bgcolor=nocolour", 400),
                        ("transparent=maybe", 400),
                        ("subset=Lat(1:2", 400)]:
        status, headers, body = get(server, f"/ogcapi/collections/relief/map?{query}")
        assert status == code and headers["Content-Type"] == "application/problem+json", (query, status, body[:200])
    status, headers, _ = get(server, "/ogcapi/collections/series/map?datetime=2023-01-01/2023-12-31")
    assert status in (400, 404) and headers["Content-Type"] == "application/problem+json", status


def test_gdal_ogcapi_driver_reads_the_map(direct):
    ds = gdal.OpenEx(f"OGCAPI:{direct.url}/ogcapi/collections/relief", open_options=["API=MAP"])
    gt = ds.GetGeoTransform()
    assert gt[0] == pytest.approx(-180) and gt[3] == pytest.approx(90)
    whole = ds.ReadAsArray(0, 0, ds.RasterXSize, ds.RasterYSize, buf_xsize=360, buf_ysize=180)
    status, _, png = get(direct, "/wms?SERVICE=WMS&VERSION=1.3.0&REQUEST=GetMap&LAYERS=relief&STYLES=&CRS=CRS:84"
                                 "&BBOX=-180,-90,180,90&WIDTH=360&HEIGHT=180&FORMAT=image/png")
    wms = decode(png)[:3].astype(float)
    assert np.abs(whole[:3].astype(float) - wms).mean() < 8


def test_gdal_reads_a_regional_collection_through_the_map_as_the_readme_says(tmp_path, tmp_path_factory):
    """The book's GDAL command (docs/book/src/protocols.md) for a layer that does not cover the world:
    `-oo API=MAP` reads the right picture. GDAL 3.6's tiles reader clamps
    rows to the tileset's limits but keeps the whole matrix's height, so
    `API=TILES` gets a georeference with a wrong pixel aspect and blocks
    that are not there (the book says so; a GDAL that mends it fails
    this test, and the book then recommends the tiles again)."""
    import subprocess
    regional = tmp_path / "regional.tif"
    subprocess.run(["gdal_translate", "-q", "-projwin", "5", "52", "15", "45",
                    f"{ROOT}/data/shadedrelief-5400.tif", regional], check=True, timeout=120)
    config = tmp_path / "regional.yaml"
    config.write_text(f"""
layers:
  - name: regional
    source: {{ path: {regional} }}
    grids: [WebMercatorQuad, WorldCRS84Quad]
    max_zoom: 8
""")
    with serving(tmp_path_factory, "--config", str(config)) as server:
        url = f"OGCAPI:{server.url}/ogcapi/collections/regional"
        ds = gdal.OpenEx(url, open_options=["API=MAP"])
        gt = ds.GetGeoTransform()
        assert (gt[0], gt[3]) == (pytest.approx(5), pytest.approx(52)), gt
        assert gt[1] == pytest.approx(-gt[5]), gt
        picture = ds.ReadAsArray(0, 0, ds.RasterXSize, ds.RasterYSize, buf_xsize=100, buf_ysize=70)
        status, _, png = get(server, "/wms?SERVICE=WMS&VERSION=1.3.0&REQUEST=GetMap&LAYERS=regional&STYLES="
                                     "&CRS=CRS:84&BBOX=5,45,15,52&WIDTH=100&HEIGHT=70&FORMAT=image/png")
        assert status == 200
        wms = decode(png)[:3].astype(float)
        assert picture[:3].std() > 10, "a picture, not a blank"
        assert np.abs(picture[:3].astype(float) - wms).mean() < 8
        tiles = gdal.OpenEx(url, open_options=["API=TILES"]).GetGeoTransform()
        square = tiles[1] == pytest.approx(-tiles[5], rel=0.01)
        if gdal.VersionInfo().startswith("306"):
            assert not square, f"GDAL 3.6 read the tiles right ({tiles}): the book's warning is out of date"
        else:
            assert square, f"GDAL {gdal.VersionInfo()} still misreads the tiles of a regional layer: {tiles}"


def test_the_api_definition_is_valid_openapi_of_what_is_served(server, schemas):
    import jsonschema
    path = schemas / "openapi/3.0/schema.json"
    assert path.is_file(), "scripts/ogc-schemas did not fetch the OpenAPI 3.0 schema"
    landing = doc(server, "/ogcapi")
    desc = next(l for l in landing["links"] if l["rel"] == "service-desc")
    status, headers, body = get(server, local(desc["href"]))
    assert status == 200 and headers["Content-Type"].startswith("application/vnd.oai.openapi+json"), headers
    api = json.loads(body)
    jsonschema.Draft4Validator(json.loads(path.read_text())).validate(api)
    assert api["servers"] == [{"url": "http://maps.example.test/base/ogcapi"}]
    # Every collection and tile matrix set served is in it, and every path
    # it names (parameters filled in) answers.
    params = {p["name"]: p["schema"].get("enum") for item in api["paths"].values()
              for p in item["get"].get("parameters", []) if p["in"] == "path"}
    assert set(params["collectionId"]) == {"relief", "countries", "series"}
    assert {"WebMercatorQuad", "WorldCRS84Quad"} <= set(params["tileMatrixSetId"])
    filled = {"collectionId": "relief", "tileMatrixSetId": "WebMercatorQuad", "tileMatrix": "1",
              "tileRow": "0", "tileCol": "1"}
    for template in api["paths"]:
        path = "/ogcapi" + template.rstrip("/")
        for k, v in filled.items():
            path = path.replace("{" + k + "}", v)
        if "/collections/relief/tiles" in path:
            path = path.replace("relief", "countries")
        status, _, body = get(server, path)
        assert status == 200, (path, status, body[:200])


OL_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><link rel="stylesheet" href="ol.css"><script src="ol.js"></script></head>
<body style="margin:0"><div id="map" style="width:512px;height:512px"></div><script>
const base = "BASE/ogcapi";
window.counts = { map: 0, vector: 0, image: 0, errors: [] };
function count(source, key, start, end, error) {
  source.on(end, () => window.counts[key]++);
  source.on(error, (e) => window.counts.errors.push(key));
}
const tiles = new ol.source.OGCMapTile({
  url: base + "/collections/relief/map/tiles/WebMercatorQuad", crossOrigin: "anonymous" });
count(tiles, "map", "tileloadstart", "tileloadend", "tileloaderror");
const vector = new ol.source.OGCVectorTile({
  url: base + "/collections/countries/tiles/WebMercatorQuad", format: new ol.format.MVT() });
count(vector, "vector", "tileloadstart", "tileloadend", "tileloaderror");
const image = new ol.source.OGCMap({ url: base + "/collections/relief/map", crossOrigin: "anonymous" });
count(image, "image", "imageloadstart", "imageloadend", "imageloaderror");
window.layers = {
  tiles: new ol.layer.Tile({ source: tiles }),
  vector: new ol.layer.VectorTile({ source: vector,
    style: new ol.style.Style({ fill: new ol.style.Fill({ color: "#ff00ff" }) }) }),
  image: new ol.layer.Image({ source: image, visible: false }),
};
window.map = new ol.Map({ target: "map", pixelRatio: 1,
  layers: [window.layers.tiles, window.layers.image, window.layers.vector],
  view: new ol.View({ center: [0, 0], zoom: 1 }) });
window.pixel = (x, y) => Array.from(
  document.querySelector("#map canvas").getContext("2d").getImageData(x, y, 1, 1).data);
</script></body></html>
"""


@pytest.fixture
def page_server(tmp_path, direct):
    """The page above (and the vendored OpenLayers) on an origin of its own."""
    import functools
    import http.server
    import shutil
    import threading
    root = tmp_path / "site"
    root.mkdir()
    for name in ("ol.js", "ol.css"):
        shutil.copy(Path(__file__).parent / "vendor" / "ol" / name, root / name)
    (root / "index.html").write_text(OL_PAGE.replace("BASE", direct.url))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/index.html"
    httpd.shutdown()


def test_openlayers_draws_the_ogc_tiles_vector_tiles_and_map(page_server, browser):
    import time
    browser.get(page_server)

    def wait_for(check, what):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if browser.execute_script(f"return {check}"):
                return
            time.sleep(0.2)
        raise AssertionError(f"{what}: {browser.execute_script('return window.counts')}")

    wait_for("window.counts.map >= 4 && window.counts.vector >= 4", "map and vector tiles loaded")
    counts = browser.execute_script("return window.counts")
    assert counts["errors"] == [], counts
    # Rendered: the relief under the magenta countries (Africa at the map's middle right).
    # OpenLayers fades new tiles in (250 ms): wait until both are opaque.
    wait_for("(window.map.renderSync(), window.pixel(300, 250)[3] === 255 && window.pixel(221, 285)[3] === 255)",
             "tiles faded in")
    africa = browser.execute_script("return window.pixel(300, 250)")
    assert africa[:3] == [255, 0, 255], africa
    ocean = browser.execute_script("return window.pixel(221, 285)")
    assert ocean[3] == 255 and ocean[:3] != [255, 0, 255], ocean
    # The map source: an OGC API map of the view.
    browser.execute_script("window.layers.tiles.setVisible(false); window.layers.vector.setVisible(false);"
                           "window.layers.image.setVisible(true)")
    wait_for("window.counts.image >= 1", "the map loaded")
    assert browser.execute_script("return window.counts.errors") == []
    wait_for("(window.map.renderSync(), window.pixel(221, 285)[3] === 255)", "the map drawn")
    drawn = browser.execute_script("return window.pixel(221, 285)")
    assert drawn[3] == 255 and max(abs(a - b) for a, b in zip(drawn[:3], ocean[:3])) <= 12, (drawn, ocean)


def test_dataset_tiles_composite_the_collections_as_wms_does(server):
    sets = doc(server, "/ogcapi/map/tiles")["tilesets"]
    assert {s["crs"] for s in sets} >= {"http://www.opengis.net/def/crs/EPSG/0/3857"}
    tileset = doc(server, "/ogcapi/map/tiles/WebMercatorQuad")
    assert tileset["dataType"] == "map" and tileset["tileMatrixSetLimits"][2]["maxTileCol"] == 3
    status, headers, tile = get(server, "/ogcapi/map/tiles/WebMercatorQuad/2/1/2?collections=relief,countries&f=png")
    assert status == 200 and headers["Content-Type"] == "image/png", tile[:300]
    half = 20037508.342789244
    size = 2 * half / 4
    bbox = f"{-half + 2 * size},{half - 2 * size},{-half + 3 * size},{half - size}"
    status, _, wms = get(server, "/wms?SERVICE=WMS&VERSION=1.3.0&REQUEST=GetMap&LAYERS=relief,countries&STYLES=,"
                                 f"&CRS=EPSG:3857&BBOX={bbox}&WIDTH=256&HEIGHT=256&FORMAT=image/png&TRANSPARENT=TRUE")
    assert np.abs(decode(tile).astype(float) - decode(wms).astype(float)).mean() < 1
    status, headers, body = get(server, "/ogcapi/map/tiles/WebMercatorQuad/2/9/0?f=png")
    assert status == 404 and headers["Content-Type"] == "application/problem+json"
    status, headers, body = get(server, "/ogcapi/map/tiles/NoSuchGrid/0/0/0")
    assert status == 404
