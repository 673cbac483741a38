"""Where dimension values come from, beyond a directory's file names: the
bands of a netCDF file with a time and a level axis (written here with
GDAL), a STAC ItemCollection of local GeoTIFFs and a GeoPackage index
(`from_field`); a layer with two dimensions (time and elevation from the
pieces' paths) over XYZ, WMS and WMTS; seeding several values of two
dimensions; an export with one archive per value."""
import gzip
import json
import os
import re
import sqlite3
import subprocess
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
from osgeo import gdal, ogr, osr
from owslib.wms import WebMapService

from conftest import fetch, serving
from imaging import decode
from test_dimensions import DATES, assert_color, solid
from test_upstream_wms import host_port
from test_ogc_conformance import assert_valid, schema, schemas  # noqa: F401 (a fixture)

gdal.UseExceptions()

TIMES = [0, 6]  # hours since 2024-01-01
LEVELS = [850, 500, 250]
HEIGHTS = {"0": 10, "500": 90}  # elevation -> added to each date's colour


def grey_of(body):
    img = decode(body)
    opaque = img[3] > 0 if img.shape[0] == 4 else np.ones(img.shape[1:], bool)
    assert opaque.any(), "the image is empty"
    return int(round(img[0][opaque].mean()))


def write_netcdf(path):
    """A netCDF file of 6 byte bands, one per (time, level), each band a
    different constant; returns {(time ISO, level): constant} as GDAL
    reads the bands' metadata back."""
    n = len(TIMES) * len(LEVELS)
    mem = gdal.GetDriverByName("MEM").Create("", 36, 18, n, gdal.GDT_Byte)
    mem.SetGeoTransform([-180, 10, 0, 90, 0, -10])
    srs = osr.SpatialReference()
    srs.ImportFromEPSG(4326)
    mem.SetProjection(srs.ExportToWkt())
    mem.SetMetadata({
        "NETCDF_DIM_EXTRA": "{time,level}",
        "NETCDF_DIM_time_DEF": f"{{{len(TIMES)},6}}",
        "NETCDF_DIM_time_VALUES": "{" + ",".join(map(str, TIMES)) + "}",
        "NETCDF_DIM_level_DEF": f"{{{len(LEVELS)},6}}",
        "NETCDF_DIM_level_VALUES": "{" + ",".join(map(str, LEVELS)) + "}",
        "time#units": "hours since 2024-01-01 00:00:00",
        "time#standard_name": "time",
        "level#units": "hPa",
    })
    b = 1
    for t in TIMES:
        for lv in LEVELS:
            band = mem.GetRasterBand(b)
            band.WriteArray(np.full((18, 36), 20 * b, dtype=np.uint8))
            band.SetMetadata({"NETCDF_DIM_time": str(t), "NETCDF_DIM_level": str(lv)})
            b += 1
    gdal.Translate(str(path), mem, format="netCDF")
    ds = gdal.Open(str(path))
    found = {}
    for i in range(1, ds.RasterCount + 1):
        band = ds.GetRasterBand(i)
        hours = int(band.GetMetadataItem("NETCDF_DIM_time"))
        found[(f"2024-01-01T{hours:02d}:00:00Z", band.GetMetadataItem("NETCDF_DIM_level"))] = \
            int(band.ReadAsArray().mean())
    assert len(set(found.values())) == n, found
    return found


def write_stac(path, pieces):
    """An ItemCollection of `pieces` ((file name, date)), hrefs relative."""
    items = []
    for i, (name, date) in enumerate(pieces):
        west = -180 if "west" in name else 0
        items.append({
            "type": "Feature", "stac_version": "1.0.0", "id": f"item-{i}",
            "geometry": None, "bbox": [west, -80, west + 180, 80],
            "properties": {"datetime": f"{date}T00:00:00Z"},
            "assets": {
                "thumbnail": {"href": "nothing.png", "type": "image/png"},
                "visual": {"href": name, "type": "image/tiff; application=geotiff"},
            },
            "links": [],
        })
    path.write_text(json.dumps({"type": "FeatureCollection", "features": items}))


def write_index(path, pieces):
    """A GeoPackage index (as gdaltindex writes it, plus a date field)."""
    ds = ogr.GetDriverByName("GPKG").CreateDataSource(str(path))
    srs = osr.SpatialReference()
    srs.ImportFromEPSG(4326)
    layer = ds.CreateLayer("index", srs, ogr.wkbPolygon)
    layer.CreateField(ogr.FieldDefn("location", ogr.OFTString))
    layer.CreateField(ogr.FieldDefn("acquired", ogr.OFTDate))
    for name, date in pieces:
        west = -180 if "west" in name else 0
        f = ogr.Feature(layer.GetLayerDefn())
        f.SetField("location", name)
        y, m, d = map(int, date.split("-"))
        f.SetField("acquired", y, m, d, 0, 0, 0, 0)
        f.SetGeometry(ogr.CreateGeometryFromWkt(
            f"POLYGON(({west} -80,{west + 180} -80,{west + 180} 80,{west} 80,{west} -80))"))
        layer.CreateFeature(f)
    ds = None


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("dimension-sources")
    bands = write_netcdf(root / "forecast.nc")
    pieces = []
    for date, color in DATES.items():
        for half, west in (("west", -180), ("east", 0)):
            name = f"scene_{date}_{half}.tif"
            solid(root / name, color, west, west + 180)
            pieces.append((name, date))
            for height, add in HEIGHTS.items():
                solid(root / f"h_{date}_{height}m_{half}.tif", tuple(min(255, c + add) for c in color),
                      west, west + 180)
    write_stac(root / "items.json", pieces)
    write_index(root / "index.gpkg", pieces)
    config = root / "tessera.yaml"
    config.write_text(f"""
stores:
  mem: {{ type: memory }}
  disk: {{ type: file, path: {root}/cache }}
layers:
  - name: forecast
    source: {{ path: {root}/forecast.nc, resampling: nearest }}
    grids: [WebMercatorQuad]
    cache: {{ store: disk }}
    dimensions:
      time: {{ from_bands: NETCDF_DIM_time, default: earliest }}
      level: {{ from_bands: NETCDF_DIM_level, kind: number, default: "850" }}
  - name: stac
    source: {{ type: mosaic, stac: {root}/items.json, asset: visual }}
    grids: [WebMercatorQuad]
    cache: {{ store: mem }}
    dimensions:
      time: {{ from_field: datetime }}
  - name: indexed
    source: {{ type: mosaic, index: {root}/index.gpkg }}
    grids: [WebMercatorQuad]
    cache: {{ store: mem }}
    dimensions:
      time: {{ from_field: acquired }}
  - name: heights
    source: {{ type: mosaic, dir: {root}, glob: 'h_*.tif' }}
    grids: [WebMercatorQuad]
    cache: {{ store: disk, metatile: [2, 2] }}
    dimensions:
      time: {{ from_path: 'h_(\\d{{4}}-\\d{{2}}-\\d{{2}})_' }}
      elevation: {{ from_path: '_(\\d+)m_', default: "0" }}
""")
    return root, config, bands


@pytest.fixture(scope="module")
def server(tmp_path_factory, data):
    _, config, _ = data
    with serving(tmp_path_factory, "--config", str(config)) as s:
        yield s


def test_netcdf_bands_are_served_per_time_and_level(server, data):
    _, _, bands = data
    for (when, level), grey in bands.items():
        status, body = fetch(server, f"/tiles/forecast/WebMercatorQuad/1/0/0.png?time={when}&dim_level={level}")
        assert status == 200, body
        assert abs(grey_of(body) - grey) <= 1, (when, level, grey)
    # The defaults: the earliest time, level 850.
    status, body = fetch(server, "/tiles/forecast/WebMercatorQuad/1/1/0.png")
    assert abs(grey_of(body) - bands[("2024-01-01T00:00:00Z", "850")]) <= 1
    # A time the file lacks, a level it lacks.
    status, body = fetch(server, "/tiles/forecast/WebMercatorQuad/1/1/0.png?time=2024-01-01T03:00:00Z")
    assert status == 400 and b"time" in body, body
    status, body = fetch(server, "/tiles/forecast/WebMercatorQuad/1/1/0.png?dim_level=700")
    assert status == 400, body
    # WMS lists both dimensions; GetMap takes TIME and DIM_LEVEL.
    wms = WebMapService(f"{server.url}/wms", version="1.3.0", timeout=60)
    dims = wms["forecast"].dimensions
    assert dims["time"]["values"] == ["2024-01-01T00:00:00Z", "2024-01-01T06:00:00Z"]
    assert dims["level"]["values"] == ["250", "500", "850"]
    status, body = fetch(server, "/wms?SERVICE=WMS&VERSION=1.3.0&REQUEST=GetMap&LAYERS=forecast&STYLES="
                                 "&CRS=EPSG:4326&BBOX=-80,-170,80,170&WIDTH=32&HEIGHT=16&FORMAT=image/png"
                                 "&TIME=2024-01-01T06:00Z&DIM_LEVEL=500")
    assert status == 200, body
    assert abs(grey_of(body) - bands[("2024-01-01T06:00:00Z", "500")]) <= 1


def test_each_band_group_is_a_layer_key_of_its_own(server, data):
    root, _, _ = data
    fetch(server, "/tiles/forecast/WebMercatorQuad/2/1/1.png?time=2024-01-01T06:00:00Z&dim_level=250")
    keys = sorted(p for p in os.listdir(root / "cache") if p.startswith("forecast"))
    assert "forecast~level=250~time=2024-01-01T060000Z" in keys, keys


def test_a_stac_item_collection_and_a_geopackage_index_are_time_mosaics(server):
    for layer in ("stac", "indexed"):
        for date, color in DATES.items():
            for x in (0, 1):  # the western and the eastern pieces
                status, body = fetch(server, f"/tiles/{layer}/WebMercatorQuad/1/{x}/0.png?time={date}")
                assert status == 200, (layer, body)
                assert_color(body, color)
        status, body = fetch(server, f"/tiles/{layer}/WebMercatorQuad/1/0/0.png")
        assert_color(body, DATES["2024-03-01"])
        status, body = fetch(server, f"/tiles/{layer}/WebMercatorQuad/1/0/0.png?time=2023-01-01")
        assert status == 400, body


def test_two_dimensions_over_xyz_wms_and_wmts(server, schemas):
    for date, color in DATES.items():
        for height, add in HEIGHTS.items():
            want = tuple(min(255, c + add) for c in color)
            status, body = fetch(server, f"/tiles/heights/WebMercatorQuad/1/0/0.png?time={date}&elevation={height}")
            assert status == 200, body
            assert_color(body, want)
            status, body = fetch(server, "/wms?SERVICE=WMS&VERSION=1.3.0&REQUEST=GetMap&LAYERS=heights&STYLES="
                                         "&CRS=EPSG:3857&BBOX=-10000000,-5000000,10000000,5000000&WIDTH=32"
                                         f"&HEIGHT=16&FORMAT=image/png&TIME={date}&ELEVATION={height}")
            assert status == 200, body
            assert_color(body, want)
    # Defaults: the latest time, elevation 0.
    status, body = fetch(server, "/tiles/heights/WebMercatorQuad/1/0/0.png")
    assert_color(body, tuple(c + 10 for c in DATES["2024-03-01"]))
    # WMTS: the first dimension in the path, the others in the query.
    status, body = fetch(server, "/wmts?SERVICE=WMTS&REQUEST=GetCapabilities&VERSION=1.0.0")
    doc = assert_valid(schema(schemas, "wmts/1.0.0/wmtsGetCapabilities_response.xsd"), body)
    ns = {"w": "http://www.opengis.net/wmts/1.0", "ows": "http://www.opengis.net/ows/1.1"}
    layer = next(l for l in doc.iterfind(".//w:Contents/w:Layer", ns)
                 if l.findtext("ows:Identifier", namespaces=ns) == "heights")
    ids = [d.findtext("ows:Identifier", namespaces=ns) for d in layer.iterfind("w:Dimension", ns)]
    assert ids == ["Elevation", "Time"], ids
    template = layer.find("w:ResourceURL", ns).get("template")
    assert template.endswith(".png?time={Time}") and "/{Style}/{Elevation}/{TileMatrixSet}/" in template, template
    url = (template.replace("{Style}", "default").replace("{Elevation}", "500").replace("{Time}", "2024-02-01")
           .replace("{TileMatrixSet}", "WebMercatorQuad").replace("{TileMatrix}", "1")
           .replace("{TileRow}", "0").replace("{TileCol}", "1"))
    with urllib.request.urlopen(url, timeout=60) as r:
        assert_color(r.read(), tuple(min(255, c + 90) for c in DATES["2024-02-01"]))


def test_seed_two_dimensions_then_export_one_archive_per_value(tmp_path, data):
    root, served, _ = data
    # A cache of its own (the served layers' cache already holds values).
    config = tmp_path / "tessera.yaml"
    config.write_text(served.read_text().replace(f"{root}/cache", f"{tmp_path}/cache"))
    binary = os.environ["TESSERA_BIN"]
    run = subprocess.run(
        [binary, "seed", "--config", str(config), "--layer", "heights", "--zoom", "0..1",
         "--dimension", "time=2024-01-01,2024-02-01", "--dimension", "elevation=all"],
        capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    seeded = sorted(p for p in os.listdir(tmp_path / "cache") if p.startswith("heights~"))
    assert seeded == sorted(f"heights~elevation={h}~time={d}T000000Z"
                            for d in ("2024-01-01", "2024-02-01") for h in ("0", "500")), seeded
    # One archive per time value at elevation 500; without {time} in --to, refused.
    run = subprocess.run(
        [binary, "export", "--config", str(config), "--layer", "heights", "--zoom", "0..1",
         "--dimension", "time=all", "--dimension", "elevation=500", "--format", "mbtiles",
         "--render-missing", "--to", str(tmp_path / "heights-500.mbtiles")],
        capture_output=True, text=True, timeout=600)
    assert run.returncode != 0 and "{time}" in run.stderr, run.stderr
    run = subprocess.run(
        [binary, "export", "--config", str(config), "--layer", "heights", "--zoom", "0..1",
         "--dimension", "time=all", "--dimension", "elevation=500", "--format", "mbtiles",
         "--render-missing", "--to", str(tmp_path / "heights-{time}-500.mbtiles")],
        capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    for date, color in DATES.items():
        archive = tmp_path / f"heights-{date}T000000Z-500.mbtiles"
        with sqlite3.connect(archive) as db:
            (count,) = db.execute("SELECT count(*) FROM tiles").fetchone()
            (tile,) = db.execute("SELECT tile_data FROM tiles WHERE zoom_level = 1 LIMIT 1").fetchone()
        assert count == 5, (archive, count)
        assert_color(tile, tuple(min(255, c + 90) for c in color))


def test_an_upstream_wms_t_is_asked_for_each_time(tmp_path, tmp_path_factory):
    """MapServer's WMS-T layer `series` (scripts/mapserver): its times read
    from its capabilities (1.3.0 <Dimension>, 1.1.1 <Extent>) or listed,
    each value passed on as TIME= and cached apart."""
    url = os.environ.get("TESSERA_TEST_WMS_URL")
    if not url:
        pytest.fail("TESSERA_TEST_WMS_URL is not set: start MapServer with scripts/mapserver start",
                    pytrace=False)
    access_log = os.environ["TESSERA_TEST_WMS_ACCESS_LOG"]
    config = tmp_path / "tessera.yaml"
    config.write_text(f"""
gdal: {{ allowed_private_hosts: ["{host_port(url)}"] }}
stores: {{ mem: {{ type: memory }} }}
layers:
  - name: wmst
    source: {{ type: wms, url: "{url}", layers: [series] }}
    grids: [WebMercatorQuad]
    cache: {{ store: mem, metatile: [2, 2] }}
    dimensions:
      time: {{}}
  - name: wmst111
    source: {{ type: wms, url: "{url}", layers: [series], version: "1.1.1" }}
    grids: [WebMercatorQuad]
    cache: {{ store: mem }}
    dimensions:
      time: {{ default: earliest }}
  - name: listed
    source: {{ type: wms, url: "{url}", layers: [series] }}
    grids: [WebMercatorQuad]
    cache: {{ store: mem }}
    dimensions:
      time:
        values: [{{ value: "2024-02-01" }}]
""")
    with serving(tmp_path_factory, "--config", str(config)) as server:
        for date, color in DATES.items():
            status, body = fetch(server, f"/tiles/wmst/WebMercatorQuad/2/1/1.png?time={date}")
            assert status == 200, body
            assert_color(body, color)
            status, body = fetch(server, f"/tiles/wmst111/WebMercatorQuad/2/1/1.png?time={date}T00:00Z")
            assert status == 200, body
            assert_color(body, color)
        status, body = fetch(server, "/tiles/wmst/WebMercatorQuad/2/2/1.png")
        assert_color(body, DATES["2024-03-01"])
        status, body = fetch(server, "/tiles/wmst111/WebMercatorQuad/2/2/1.png")
        assert_color(body, DATES["2024-01-01"])
        # Each value asked upstream as its capabilities spell it (the web
        # server writes its access log after it answered: read until then).
        deadline = time.monotonic() + 30
        while True:
            with open(access_log) as f:
                asked = f.read()
            missing = [d for d in DATES if not re.search(rf"TIME={d}[& \"]", asked)]
            if not missing:
                break
            assert time.monotonic() < deadline, f"never asked upstream: {missing}"
            time.sleep(0.2)
        # Listed values only; others are refused.
        status, body = fetch(server, "/tiles/listed/WebMercatorQuad/1/0/0.png")
        assert_color(body, DATES["2024-02-01"])
        status, body = fetch(server, "/tiles/listed/WebMercatorQuad/1/0/0.png?time=2024-01-01")
        assert status == 400, body
        # tessera's own capabilities list the upstream's values.
        wms = WebMapService(f"{server.url}/wms", version="1.3.0", timeout=60)
        assert wms["wmst"].dimensions["time"]["values"] == [f"{d}T00:00:00Z" for d in DATES]
        # A second request for a value rendered already is a hit.
        with urllib.request.urlopen(f"{server.url}/tiles/wmst/WebMercatorQuad/2/1/1.png?time=2024-02-01",
                                    timeout=60) as r:
            assert r.headers["X-Cache"] == "HIT"


# Three areas (west, middle, east thirds of the world), each seen on a date.
FIRES = [("west", -180, -60, "2024-01-01"), ("middle", -60, 60, "2024-01-15"), ("east", 60, 180, "2024-02-01")]


def painted(body):
    """Which thirds of a 3-column-wide world image are painted."""
    img = decode(body)
    alpha = img[3] if img.shape[0] == 4 else np.full(img.shape[1:], 255)
    width = alpha.shape[1]
    return [bool(alpha[:, i * width // 3 + 2:(i + 1) * width // 3 - 2].max() > 0) for i in range(3)]


@pytest.fixture(scope="module")
def fires(tmp_path_factory):
    """A GeoPackage of the three areas with a date-time field, and the same
    table copied into PostGIS (ogr2ogr), its field a timestamptz."""
    root = tmp_path_factory.mktemp("fires")
    gpkg = root / "fires.gpkg"
    ds = ogr.GetDriverByName("GPKG").CreateDataSource(str(gpkg))
    srs = osr.SpatialReference()
    srs.ImportFromEPSG(4326)
    layer = ds.CreateLayer("fires", srs, ogr.wkbPolygon)
    layer.CreateField(ogr.FieldDefn("name", ogr.OFTString))
    layer.CreateField(ogr.FieldDefn("seen", ogr.OFTDateTime))
    for name, west, east, date in FIRES:
        f = ogr.Feature(layer.GetLayerDefn())
        f.SetField("name", name)
        y, m, d = map(int, date.split("-"))
        f.SetField("seen", y, m, d, 0, 0, 0, 100)  # 100: UTC
        f.SetGeometry(ogr.CreateGeometryFromWkt(
            f"POLYGON(({west} -60,{east} -60,{east} 60,{west} 60,{west} -60))"))
        layer.CreateFeature(f)
    ds = None
    pg = os.environ.get("TESSERA_TEST_PG")
    if not pg:
        pytest.fail("TESSERA_TEST_PG is not set: start PostGIS with scripts/postgis start", pytrace=False)
    table = f"fires_{os.getpid()}"
    subprocess.run(["ogr2ogr", "-f", "PostgreSQL", pg, str(gpkg), "-nln", table, "-overwrite"],
                   check=True, timeout=120)
    return gpkg, pg, table


@pytest.mark.parametrize("backend", ["gpkg", "postgis"])
def test_a_vector_layer_draws_the_features_of_the_time_asked_or_a_range(backend, fires, tmp_path,
                                                                         tmp_path_factory):
    gpkg, pg, table = fires
    source = (f'{{ type: vector, path: "{gpkg}", layer: fires' if backend == "gpkg"
              else f'{{ type: vector, path: "{pg}", layer: {table}')
    config = tmp_path / "tessera.yaml"
    config.write_text(f"""
stores: {{ mem: {{ type: memory }} }}
layers:
  - name: fires
    source: {source}, fields: [name], style: [{{ fill: "#ff0000" }}] }}
    grids: [WorldCRS84Quad]
    formats: [png, mvt]
    cache: {{ store: mem }}
    dimensions:
      time: {{ from_field: seen }}
""")
    wms = ("/wms?SERVICE=WMS&VERSION=1.3.0&REQUEST=GetMap&LAYERS=fires&STYLES=&CRS=CRS:84"
           "&BBOX=-180,-90,180,90&WIDTH=90&HEIGHT=45&FORMAT=image/png&TRANSPARENT=TRUE")
    with serving(tmp_path_factory, "--config", str(config)) as server:
        caps = WebMapService(f"{server.url}/wms", version="1.3.0", timeout=60)
        assert caps["fires"].dimensions["time"]["values"] == [f"{d}T00:00:00Z" for *_, d in FIRES]
        for i, (*_, date) in enumerate(FIRES):
            status, body = fetch(server, f"{wms}&TIME={date}")
            assert status == 200, body
            assert painted(body) == [j == i for j in range(3)], date
        # The default: the latest.
        status, body = fetch(server, wms)
        assert painted(body) == [False, False, True]
        # A range: every feature seen within it, drawn (not cached).
        status, body = fetch(server, f"{wms}&TIME=2024-01-01/2024-01-20")
        assert status == 200, body
        assert painted(body) == [True, True, False]
        status, body = fetch(server, f"{wms}&TIME=2024-02-01/2024-01-01")
        assert status == 400 and b"InvalidDimensionValue" in body, body
        # Tiles: the image and the vector tile at a value.
        status, body = fetch(server, "/tiles/fires/WorldCRS84Quad/0/0/0.png?time=2024-01-01T00:00:00Z")
        assert status == 200 and painted(body)[0], body[:200]
        status, body = fetch(server, "/tiles/fires/WorldCRS84Quad/0/1/0.mvt?time=2024-02-01")
        assert status == 200, body
        raw = gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body
        assert b"east" in raw and b"west" not in raw and b"middle" not in raw
        status, body = fetch(server, "/tiles/fires/WorldCRS84Quad/0/1/0.mvt?time=2024-01-15/2024-02-01")
        raw = gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body
        assert status == 200 and b"east" in raw and b"middle" in raw and b"west" not in raw


def test_upstream_wmts_and_xyz_take_the_value_in_their_tile_urls(server, tmp_path, tmp_path_factory):
    """Another tessera in front of this one: its WMTS layer `stac` (times
    read from the WMTS capabilities, `{Time}` in the REST template) and
    its XYZ tiles (`?time={time}` in the template, values listed)."""
    config = tmp_path / "tessera.yaml"
    config.write_text(f"""
gdal: {{ allowed_private_hosts: ["{host_port(server.url)}"] }}
stores: {{ mem: {{ type: memory }} }}
layers:
  - name: wmtst
    source: {{ type: wmts, url: "{server.url}/wmts/1.0.0/WMTSCapabilities.xml", layer: stac }}
    grids: [WebMercatorQuad]
    cache: {{ store: mem }}
    dimensions:
      time: {{ default: earliest }}
  - name: xyzt
    source: {{ type: xyz, url: "{server.url}/tiles/stac/WebMercatorQuad/{{z}}/{{x}}/{{y}}.png?time={{time}}" }}
    grids: [WebMercatorQuad]
    cache: {{ store: mem }}
    dimensions:
      time:
        values: [{{ value: "2024-01-01" }}, {{ value: "2024-03-01T00:00:00Z" }}]
""")
    with serving(tmp_path_factory, "--config", str(config)) as front:
        for date, color in DATES.items():
            status, body = fetch(front, f"/tiles/wmtst/WebMercatorQuad/2/1/1.png?time={date}")
            assert status == 200, body
            assert_color(body, color)
        status, body = fetch(front, "/tiles/wmtst/WebMercatorQuad/2/2/1.png")
        assert_color(body, DATES["2024-01-01"])
        for date in ("2024-01-01", "2024-03-01"):
            status, body = fetch(front, f"/tiles/xyzt/WebMercatorQuad/2/1/1.png?time={date}")
            assert status == 200, body
            assert_color(body, DATES[date])
        status, body = fetch(front, "/tiles/xyzt/WebMercatorQuad/2/1/1.png?time=2024-02-01")
        assert status == 400, body


def test_a_value_is_opened_when_first_asked_and_again_after_a_failure(tmp_path, tmp_path_factory):
    """Only the default value is opened at start: a value whose file is
    gone when first asked is a 503 with Retry-After (the server keeps
    serving the others), and is served once the file is back."""
    for name, color in (("low", (240, 240, 0)), ("high", (0, 240, 240)), ("mid", (120, 120, 120))):
        solid(tmp_path / f"{name}.tif", color, -180, 180)
    config = tmp_path / "tessera.yaml"
    config.write_text("""
stores: { mem: { type: memory } }
layers:
  - name: scenario
    source: { path: low.tif }
    grids: [WebMercatorQuad]
    cache: { store: mem }
    dimensions:
      scenario:
        values:
          - { value: low, path: low.tif }
          - { value: high, path: high.tif }
          - { value: mid, path: mid.tif }
        default: low
""")
    (tmp_path / "high.tif").rename(tmp_path / "away.tif")
    with serving(tmp_path_factory, "--config", str(config)) as server:
        status, body = fetch(server, "/tiles/scenario/WebMercatorQuad/1/0/0.png?scenario=mid")
        assert status == 200, body
        assert_color(body, (120, 120, 120))
        try:
            urllib.request.urlopen(f"{server.url}/tiles/scenario/WebMercatorQuad/1/0/0.png?scenario=high",
                                   timeout=60)
            pytest.fail("a value whose file is gone was served")
        except urllib.error.HTTPError as e:
            assert e.code == 503 and e.headers["Retry-After"], (e.code, e.read())
        assert "high.tif" in server.log_text()
        (tmp_path / "away.tif").rename(tmp_path / "high.tif")
        status, body = fetch(server, "/tiles/scenario/WebMercatorQuad/1/0/0.png?scenario=high")
        assert status == 200, body
        assert_color(body, (0, 240, 240))
