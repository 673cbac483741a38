"""Layers with a time (or any) dimension: a mosaic of GeoTIFFs per date
made here with GDAL, each date a different colour, served per value over
XYZ (`?time=`) and WMS (`TIME=`), listed in the capabilities (read with
OWSLib), cached per value (one render per metatile per value), the default
when no value is given, `InvalidDimensionValue` for a value the layer
lacks, the nearest with `nearest: true`; and a dimension whose listed
values each have their own file."""
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
from osgeo import gdal, osr
from owslib.wms import WebMapService

from conftest import fetch, serving
from imaging import decode
from test_ogc_conformance import assert_valid, assert_valid_dtd, dtd, schema, schemas  # noqa: F401 (a fixture)

gdal.UseExceptions()

# Each date's colour (R, G, B).
DATES = {
    "2024-01-01": (200, 30, 30),
    "2024-02-01": (30, 200, 30),
    "2024-03-01": (30, 30, 200),
}
SCENARIOS = {"low": (240, 240, 0), "high": (0, 240, 240)}


def solid(path, color, west, east):
    """A GeoTIFF in EPSG:4326 from `west` to `east` (south 80S to 80N) of
    one colour."""
    ds = gdal.GetDriverByName("GTiff").Create(str(path), 64, 64, 3, gdal.GDT_Byte)
    ds.SetGeoTransform([west, (east - west) / 64, 0, 80, 0, -160 / 64])
    srs = osr.SpatialReference()
    srs.ImportFromEPSG(4326)
    ds.SetProjection(srs.ExportToWkt())
    for band, value in enumerate(color, start=1):
        ds.GetRasterBand(band).WriteArray(np.full((64, 64), value, dtype=np.uint8))
    ds.FlushCache()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = tmp_path_factory.mktemp("dimension-data")
    series = data / "series"
    series.mkdir()
    for date, color in DATES.items():
        # Two pieces per date: the western and the eastern half.
        solid(series / f"day_{date}_west.tif", color, -180, 0)
        solid(series / f"day_{date}_east.tif", color, 0, 180)
    (series / "README.txt").write_text("not a piece")
    for name, color in SCENARIOS.items():
        solid(data / f"{name}.tif", color, -180, 180)
    config = data / "tessera.yaml"
    config.write_text(f"""
stores: {{ mem: {{ type: memory }} }}
layers:
  - name: series
    source: {{ type: mosaic, dir: {series}, glob: '*.tif' }}
    grids: [WebMercatorQuad]
    cache: {{ store: mem, metatile: [2, 2] }}
    dimensions:
      time:
        from_path: 'day_(\\d{{4}}-\\d{{2}}-\\d{{2}})_'
  - name: series_near
    source: {{ type: mosaic, dir: {series}, glob: '*.tif' }}
    grids: [WebMercatorQuad]
    cache: {{ store: mem }}
    dimensions:
      time:
        from_path: 'day_(\\d{{4}}-\\d{{2}}-\\d{{2}})_'
        default: earliest
        nearest: true
  - name: scenario
    source: {{ path: {data}/low.tif }}
    grids: [WebMercatorQuad]
    cache: {{ store: mem }}
    dimensions:
      scenario:
        values:
          - {{ value: low, path: low.tif }}
          - {{ value: high, path: high.tif }}
        default: low
  - name: plain
    source: {{ path: {data}/high.tif }}
    grids: [WebMercatorQuad]
    cache: {{ store: mem }}
""")
    with serving(tmp_path_factory, "--config", str(config)) as s:
        yield s


def color_of(body):
    """The mean RGB of an image's opaque pixels."""
    img = decode(body)
    opaque = img[3] > 0 if img.shape[0] == 4 else np.ones(img.shape[1:], bool)
    assert opaque.any(), "the image is empty"
    return tuple(int(round(img[b][opaque].mean())) for b in range(3))


def assert_color(body, want):
    got = color_of(body)
    assert max(abs(g - w) for g, w in zip(got, want)) <= 2, f"{got} != {want}"


def renders(server, layer):
    _, text = fetch(server, "/metrics")
    m = re.search(rf'tessera_metatile_renders_total{{layer="{layer}"}} (\d+)', text.decode())
    return int(m.group(1)) if m else 0


def test_xyz_tiles_are_the_picture_of_the_time_asked(server):
    for date, color in DATES.items():
        status, body = fetch(server, f"/tiles/series/WebMercatorQuad/2/1/1.png?time={date}")
        assert status == 200, body
        assert_color(body, color)
    # Other spellings of one instant are the same value.
    status, body = fetch(server, "/tiles/series/WebMercatorQuad/2/1/1.png?time=2024-02-01T00:00:00Z")
    assert status == 200
    assert_color(body, DATES["2024-02-01"])
    # No value: the default (the latest).
    status, body = fetch(server, "/tiles/series/WebMercatorQuad/2/2/1.png")
    assert status == 200
    assert_color(body, DATES["2024-03-01"])


def test_a_value_the_layer_lacks_is_refused_and_nearest_snaps(server):
    status, body = fetch(server, "/tiles/series/WebMercatorQuad/2/1/1.png?time=2024-01-15")
    assert status == 400, body
    assert b"InvalidDimensionValue" in body or b"no time" in body, body
    status, body = fetch(server, "/tiles/series/WebMercatorQuad/2/1/1.png?time=2024-01-01/2024-02-01")
    assert status == 400, body
    status, body = fetch(server, "/tiles/series/WebMercatorQuad/2/1/1.png?time=yesterday")
    assert status == 400, body
    # nearest: 2024-01-20 is nearer to February than to January.
    status, body = fetch(server, "/tiles/series_near/WebMercatorQuad/2/1/1.png?time=2024-01-20")
    assert status == 200, body
    assert_color(body, DATES["2024-02-01"])
    # default: earliest.
    status, body = fetch(server, "/tiles/series_near/WebMercatorQuad/2/1/2.png")
    assert status == 200, body
    assert_color(body, DATES["2024-01-01"])


def test_each_value_is_cached_apart_and_rendered_once_per_metatile(server):
    before = renders(server, "series")
    tile = "/tiles/series/WebMercatorQuad/3/4/3.png"
    for date in ["2024-01-01", "2024-03-01"]:
        with urllib.request.urlopen(f"{server.url}{tile}?time={date}", timeout=60) as r:
            assert r.headers["X-Cache"] == "MISS"
            assert_color(r.read(), DATES[date])
    # A sibling in the same 2x2 metatile at each value: a hit, no render.
    for date in ["2024-01-01", "2024-03-01"]:
        for _ in range(50):
            with urllib.request.urlopen(f"{server.url}/tiles/series/WebMercatorQuad/3/5/3.png?time={date}",
                                        timeout=60) as r:
                body, cache = r.read(), r.headers["X-Cache"]
            if cache == "HIT":
                break
        assert cache == "HIT", date
        assert_color(body, DATES[date])
    assert renders(server, "series") - before == 2


def test_wms_getmap_takes_time_and_capabilities_list_the_values(server):
    base = "/wms?SERVICE=WMS&VERSION=1.3.0&REQUEST=GetMap&LAYERS=series&STYLES=&CRS=EPSG:3857" \
           "&BBOX=-10000000,-5000000,10000000,5000000&WIDTH=64&HEIGHT=32&FORMAT=image/png"
    for date, color in DATES.items():
        status, body = fetch(server, f"{base}&TIME={date}")
        assert status == 200, body
        assert_color(body, color)
    status, body = fetch(server, base)
    assert_color(body, DATES["2024-03-01"])
    status, body = fetch(server, f"{base}&TIME=1999-01-01")
    assert b"InvalidDimensionValue" in body, body
    # Listed values as OWSLib reads them.
    wms = WebMapService(f"{server.url}/wms", version="1.3.0", timeout=60)
    dims = wms["series"].dimensions
    assert dims["time"]["units"] == "ISO8601"
    assert dims["time"]["default"] == "2024-03-01T00:00:00Z"
    assert dims["time"]["values"] == [f"{d}T00:00:00Z" for d in DATES]
    wms111 = WebMapService(f"{server.url}/wms", version="1.1.1", timeout=60)
    assert wms111["series"].timepositions == [f"{d}T00:00:00Z" for d in DATES]
    assert wms111["series"].defaulttimeposition == "2024-03-01T00:00:00Z"


def test_listed_values_each_read_their_own_file(server):
    for name, color in SCENARIOS.items():
        status, body = fetch(server, f"/tiles/scenario/WebMercatorQuad/1/0/0.png?scenario={name}")
        assert status == 200, body
        assert_color(body, color)
        status, body = fetch(
            server,
            "/wms?SERVICE=WMS&VERSION=1.3.0&REQUEST=GetMap&LAYERS=scenario&STYLES=&CRS=EPSG:3857"
            f"&BBOX=-10000000,-5000000,10000000,5000000&WIDTH=16&HEIGHT=16&FORMAT=image/png&DIM_SCENARIO={name}")
        assert status == 200, body
        assert_color(body, color)
    status, body = fetch(server, "/tiles/scenario/WebMercatorQuad/1/0/0.png")
    assert_color(body, SCENARIOS["low"])
    status, body = fetch(server, "/tiles/scenario/WebMercatorQuad/1/0/0.png?scenario=medium")
    assert status == 400, body


def test_capabilities_with_dimensions_validate_against_the_official_schemas(server, schemas):
    root = schemas
    status, body = fetch(server, "/wms?SERVICE=WMS&REQUEST=GetCapabilities&VERSION=1.3.0")
    assert status == 200
    doc = assert_valid(schema(root, "wms/1.3.0/capabilities_1_3_0.xsd"), body)
    ns = {"w": "http://www.opengis.net/wms"}
    dim = doc.find(".//w:Layer[w:Name='series']/w:Dimension", ns)
    assert dim.get("name") == "time" and dim.get("nearestValue") == "0"
    status, body = fetch(server, "/wms?SERVICE=WMS&REQUEST=GetCapabilities&VERSION=1.1.1")
    assert status == 200
    assert_valid_dtd(dtd(root, "wms/1.1.1/WMS_MS_Capabilities.dtd"), body)


def test_wmts_lists_the_dimension_and_takes_it_in_kvp_and_rest(server, schemas):
    status, body = fetch(server, "/wmts?SERVICE=WMTS&REQUEST=GetCapabilities&VERSION=1.0.0")
    assert status == 200
    doc = assert_valid(schema(schemas, "wmts/1.0.0/wmtsGetCapabilities_response.xsd"), body)
    ns = {"w": "http://www.opengis.net/wmts/1.0", "ows": "http://www.opengis.net/ows/1.1"}
    layer = next(l for l in doc.iterfind(".//w:Contents/w:Layer", ns)
                 if l.findtext("ows:Identifier", namespaces=ns) == "series")
    dim = layer.find("w:Dimension", ns)
    assert dim.findtext("ows:Identifier", namespaces=ns) == "Time"
    assert dim.findtext("w:Default", namespaces=ns) == "2024-03-01T00:00:00Z"
    assert [v.text for v in dim.iterfind("w:Value", ns)] == [f"{d}T00:00:00Z" for d in DATES]
    template = layer.find("w:ResourceURL", ns).get("template")
    assert "/{Style}/{Time}/{TileMatrixSet}/" in template, template
    for date, color in DATES.items():
        status, body = fetch(server, "/wmts?SERVICE=WMTS&REQUEST=GetTile&VERSION=1.0.0&LAYER=series&STYLE=default"
                                     f"&TILEMATRIXSET=WebMercatorQuad&TILEMATRIX=2&TILEROW=1&TILECOL=1"
                                     f"&FORMAT=image/png&Time={date}")
        assert status == 200, body
        assert_color(body, color)
        url = (template.replace("{Style}", "default").replace("{Time}", date)
               .replace("{TileMatrixSet}", "WebMercatorQuad").replace("{TileMatrix}", "2")
               .replace("{TileRow}", "1").replace("{TileCol}", "2"))
        with urllib.request.urlopen(url, timeout=60) as r:
            assert_color(r.read(), color)
    status, body = fetch(server, "/wmts/1.0.0/series/default/1999-01-01/WebMercatorQuad/2/1/1.png")
    assert status == 400 and b"InvalidDimensionValue" in body, body
    # A layer without a dimension has no such path, and ignores ?time=.
    status, body = fetch(server, "/wmts/1.0.0/plain/default/x/WebMercatorQuad/1/0/0.png")
    assert status == 400, body
    status, body = fetch(server, "/wmts/1.0.0/plain/default/WebMercatorQuad/1/0/0.png?time=2024-01-01")
    assert status == 200, body
    assert_color(body, SCENARIOS["high"])


def test_seed_and_truncate_per_value(tmp_path, tmp_path_factory):
    """Seeding two values stores both (served as hits, no render); a
    truncate of one leaves the other's tiles; each value's tiles lie under
    the layer key at that value."""
    series = tmp_path / "series"
    series.mkdir()
    for date, color in DATES.items():
        solid(series / f"day_{date}.tif", color, -180, 180)
    cache = tmp_path / "cache"
    config = tmp_path / "tessera.yaml"
    config.write_text(f"""
stores: {{ disk: {{ type: file, path: {cache}, memory_mb: 0 }} }}
layers:
  - name: series
    source: {{ type: mosaic, dir: {series}, glob: '*.tif' }}
    grids: [WebMercatorQuad]
    cache: {{ store: disk, metatile: [2, 2] }}
    dimensions:
      time: {{ from_path: 'day_(.*)\\.tif' }}
""")

    def cli(*args):
        r = subprocess.run([os.environ["TESSERA_BIN"], *args, "--config", str(config), "--layer", "series",
                            "--zoom", "0..2"], capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        return r

    seeded = cli("seed", "--dimension", "time=2024-01-01,2024-02-01")
    assert "series at time=2024-01-01T00:00:00Z" in seeded.stderr, seeded.stderr
    assert "series at time=2024-02-01T00:00:00Z" in seeded.stderr, seeded.stderr
    assert sorted(p.name for p in cache.iterdir() if not p.name.startswith(".")) == [
        "series~time=2024-01-01T000000Z", "series~time=2024-02-01T000000Z"]

    def status(server, date):
        with urllib.request.urlopen(f"{server.url}/tiles/series/WebMercatorQuad/2/1/2.png?time={date}",
                                    timeout=60) as r:
            return r.headers["X-Cache"], r.read()

    with serving(tmp_path_factory, "--config", str(config)) as server:
        for date in ["2024-01-01", "2024-02-01"]:
            cached, body = status(server, date)
            assert cached == "HIT", date
            assert_color(body, DATES[date])
        assert renders(server, "series") == 0
    cli("truncate", "--dimension", "time=2024-01-01/2024-01-31")
    with serving(tmp_path_factory, "--config", str(config)) as server:
        assert status(server, "2024-01-01")[0] == "MISS"
        assert status(server, "2024-02-01")[0] == "HIT"
    bad = subprocess.run([os.environ["TESSERA_BIN"], "seed", "--config", str(config), "--layer", "series",
                          "--zoom", "0", "--dimension", "time=1999-01-01"], capture_output=True, text=True,
                         timeout=600)
    assert bad.returncode != 0 and "1999-01-01" in bad.stderr, bad.stderr
    # The admin API truncates per value too.
    token = "dimension-test-token-0123456789"
    config.write_text(config.read_text() + f"""
admin: {{ token: {token}, sources_url: 's3://unused/sources', sources_file: {tmp_path}/sources.json }}
""")
    with serving(tmp_path_factory, "--config", str(config)) as server:
        assert status(server, "2024-02-01")[0] == "HIT"
        req = urllib.request.Request(f"{server.url}/admin/truncate?layer=series&zoom=0..2&dimension=time=2024-02-01",
                                     method="POST", headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(req, timeout=120) as r:
            text = r.read().decode()
        assert "truncated series at time=2024-02-01T00:00:00Z" in text, text
        assert status(server, "2024-02-01")[0] == "MISS"
        req = urllib.request.Request(f"{server.url}/admin/truncate?layer=series&zoom=0&dimension=time=1999-01-01",
                                     method="POST", headers={"Authorization": f"Bearer {token}"})
        try:
            urllib.request.urlopen(req, timeout=60)
            raise AssertionError("an unknown value was truncated")
        except urllib.error.HTTPError as e:
            assert e.code == 400
        # A seed job over the admin API at one value stores that value's
        # tiles only, under its key.
        job = {"kind": "seed", "layer": "series", "zoom": "0..2", "dimensions": ["time=2024-02-01"]}
        req = urllib.request.Request(f"{server.url}/admin/jobs", data=json.dumps(job).encode(), method="POST",
                                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            assert r.status == 201
            job_id = json.loads(r.read())["id"]
        deadline = time.monotonic() + 300
        while True:
            req = urllib.request.Request(f"{server.url}/admin/jobs/{job_id}",
                                         headers={"Authorization": f"Bearer {token}"})
            with urllib.request.urlopen(req, timeout=60) as r:
                report = json.loads(r.read())
            if report["state"] != "running" or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert report["state"] == "done", report
        assert report["tiles_planned"] == 21 and report["tiles_done"] == 21, report
        cached, body = status(server, "2024-02-01")
        assert cached == "HIT"
        assert_color(body, DATES["2024-02-01"])
        value_dir = cache / "series~time=2024-02-01T000000Z"
        assert len(list(value_dir.rglob("*.png"))) == 21, sorted(value_dir.rglob("*.png"))


def test_tilejson_lists_the_values_and_its_tiles_carry_the_value_asked(server):
    import json
    status, body = fetch(server, "/tiles/series/WebMercatorQuad/tilejson.json?time=2024-01-01")
    assert status == 200, body
    doc = json.loads(body)
    assert doc["dimensions"]["time"]["values"] == [f"{d}T00:00:00Z" for d in DATES]
    assert doc["dimensions"]["time"]["default"] == "2024-03-01T00:00:00Z"
    url = doc["tiles"][0]
    assert url.endswith("?time=2024-01-01T00%3A00%3A00Z"), url
    with urllib.request.urlopen(url.replace("{z}", "2").replace("{x}", "1").replace("{y}", "1"), timeout=60) as r:
        assert_color(r.read(), DATES["2024-01-01"])
    doc = json.loads(fetch(server, "/tiles/series/WebMercatorQuad/tilejson.json")[1])
    assert doc["tiles"][0].endswith("?time=2024-03-01T00%3A00%3A00Z")
    status, body = fetch(server, "/tiles/series/WebMercatorQuad/tilejson.json?time=1999-01-01")
    assert status == 400, body
    # A layer without dimensions: no dimensions, plain tile URLs.
    doc = json.loads(fetch(server, "/tiles/plain/WebMercatorQuad/tilejson.json")[1])
    assert "dimensions" not in doc and doc["tiles"][0].endswith(".png")


def test_gdal_wms_and_wmts_drivers_get_the_picture_of_the_time_asked(server, tmp_path, monkeypatch):
    """GDAL's WMS driver with TIME= in its URL gets each date's picture;
    its WMTS driver (GDAL 3.6 fills the template's {Time} with the
    dimension's Default) gets the default's."""
    monkeypatch.setenv("GDAL_DEFAULT_WMS_CACHE_PATH", str(tmp_path / "gdalwmscache"))

    def mean_color(path):
        pixels = gdal.Open(str(path)).ReadAsArray()
        opaque = pixels[3] > 0 if pixels.shape[0] == 4 else np.ones(pixels.shape[1:], bool)
        assert opaque.mean() > 0.5, "the image is mostly empty"
        return tuple(int(round(pixels[b][opaque].mean())) for b in range(3))

    for date, color in DATES.items():
        src = (f"WMS:{server.url}/wms?SERVICE=WMS&VERSION=1.3.0&REQUEST=GetMap&LAYERS=series&CRS=EPSG:4326"
               f"&BBOX=-60,-120,60,120&TIME={date}")
        dst = tmp_path / f"wms-{date}.tif"
        gdal.Translate(str(dst), src, width=128, height=64)
        mean = mean_color(dst)
        assert max(abs(m - c) for m, c in zip(mean, color)) <= 3, (date, mean)
    dst = tmp_path / "wmts.tif"
    gdal.Translate(str(dst), f"WMTS:{server.url}/wmts/1.0.0/WMTSCapabilities.xml,layer=series,"
                             "tilematrixset=WebMercatorQuad", width=64, height=64,
                   projWin=[-10_000_000, 10_000_000, 10_000_000, -10_000_000])
    mean = mean_color(dst)
    assert max(abs(m - c) for m, c in zip(mean, DATES["2024-03-01"])) <= 3, mean


def test_new_values_are_served_without_a_restart(tmp_path, tmp_path_factory):
    """With refresh_secs, a new date's file in the mosaic's directory is a
    new value in the capabilities and its tiles are served."""
    series = tmp_path / "series"
    series.mkdir()
    solid(series / "day_2024-01-01.tif", DATES["2024-01-01"], -180, 180)
    config = tmp_path / "tessera.yaml"
    config.write_text(f"""
stores: {{ mem: {{ type: memory }} }}
layers:
  - name: series
    source: {{ type: mosaic, dir: {series}, glob: '*.tif' }}
    grids: [WebMercatorQuad]
    cache: {{ store: mem }}
    dimensions:
      time: {{ from_path: 'day_(.*)\\.tif', refresh_secs: 1 }}
""")
    with serving(tmp_path_factory, "--config", str(config)) as server:
        status, body = fetch(server, "/tiles/series/WebMercatorQuad/1/0/0.png?time=2024-02-01")
        assert status == 400, body
        solid(series / "day_2024-02-01.tif", DATES["2024-02-01"], -180, 180)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            status, body = fetch(server, "/tiles/series/WebMercatorQuad/1/0/0.png?time=2024-02-01")
            if status == 200:
                break
            time.sleep(0.5)
        assert status == 200, body
        assert_color(body, DATES["2024-02-01"])
        # The new value is the default now (latest), and listed.
        assert_color(fetch(server, "/tiles/series/WebMercatorQuad/1/1/0.png")[1], DATES["2024-02-01"])
        _, caps = fetch(server, "/wms?SERVICE=WMS&REQUEST=GetCapabilities&VERSION=1.3.0")
        assert b"2024-01-01T00:00:00Z,2024-02-01T00:00:00Z" in caps


def test_the_preview_page_has_a_list_of_values_that_changes_the_tiles(server, browser):
    """In headless Chromium: the preview shows the default value's picture;
    choosing another value in the list shows that value's."""
    from selenium.webdriver.support.ui import Select, WebDriverWait

    def centre_color():
        """The colour in the middle of the map once every tile has loaded."""
        WebDriverWait(browser, 60).until(lambda d: d.execute_script(
            "const t = document.querySelectorAll('img.tile');"
            "return t.length > 0 && [...t].every(i => i.complete && i.dataset.loaded === '1');"))
        rgb = decode(browser.find_element("id", "map").screenshot_as_png)[:3].astype(int)
        h, w = rgb.shape[1:]
        return tuple(int(rgb[b][h // 2 - 20:h // 2 + 20, w // 2 - 20:w // 2 + 20].mean()) for b in range(3))

    browser.get(f"{server.url}/preview/series")
    assert max(abs(m - c) for m, c in zip(centre_color(), DATES["2024-03-01"])) <= 3
    select = Select(browser.find_element("id", "dimension-time"))
    assert [o.get_attribute("value") for o in select.options] == [f"{d}T00:00:00Z" for d in DATES]
    select.select_by_value("2024-01-01T00:00:00Z")
    WebDriverWait(browser, 30).until(lambda d: d.execute_script(
        "return [...document.querySelectorAll('img.tile')].every(i => i.src.includes('time=2024-01-01'));"))
    assert max(abs(m - c) for m, c in zip(centre_color(), DATES["2024-01-01"])) <= 3


def test_qgis_loads_the_wms_t_layer_as_temporal_and_renders_each_time(server):
    """QGIS (Debian's python3-qgis, headless) given the layer as its WMS
    dialog adds a layer with a time dimension: a temporal layer over the
    values' range, each time rendered from tessera's picture of it."""
    try:
        import qgis  # noqa: F401
    except ImportError:
        pytest.fail("python3-qgis is not installed; run scripts/install-deps", pytrace=False)
    wms = WebMapService(f"{server.url}/wms", version="1.3.0", timeout=60)
    extent = ",".join(wms["series"].dimensions["time"]["values"])
    times = [f"{d}T00:00:00Z" for d in DATES]
    run = subprocess.run(
        [sys.executable, os.path.join(os.path.dirname(__file__), "qgis_wms_t.py"),
         f"{server.url}/wms", "series", extent, *times],
        capture_output=True, text=True, timeout=300, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert run.returncode == 0, run.stderr[-2000:]
    found = json.loads(run.stdout.strip().splitlines()[-1])
    assert found["valid"] and found["temporal"], found
    assert found["range"] == [times[0], times[-1]], found
    for t, (date, color) in zip(times, DATES.items()):
        got = found["renders"][t]
        assert got and max(abs(g - w) for g, w in zip(got, color)) <= 3, (date, got, color)
