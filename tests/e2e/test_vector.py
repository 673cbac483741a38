"""Vector layers: the demo countries from PostGIS (scripts/postgis), from a
GeoPackage and from the Shapefile, drawn with a style. Tiles match
gdal_rasterize of the same features; rules by attribute pick colours; a WMS
GetMap composites the relief and the countries; bad sources are named; a
database that stops mid-seed gives errors and nothing cached, and tiles
come back when it is up again; a statement timeout is an error."""
import os
import subprocess
import time

import numpy as np
import pytest
from osgeo import gdal

from conftest import ROOT, fetch, serving
from imaging import decode
from vectors import HALF, SHAPEFILE, env, pg_ctl, tile_bounds, vector_config

gdal.UseExceptions()


def rgba(body):
    """A PNG as rows x columns x RGBA (opaque images get an alpha of 255)."""
    bands = decode(body)
    if bands.shape[0] == 3:
        bands = np.concatenate([bands, np.full((1, *bands.shape[1:]), 255, dtype=bands.dtype)])
    return bands.transpose(1, 2, 0)


STYLE = '[{ fill: "#336699", stroke: "#000000", stroke_width: 0.01, stroke_opacity: 0 }]'
RULES = ('[{ fill: "#00ff00" },'
         ' { filter: { field: CONTINENT, eq: Europe }, fill: "#ff0000" },'
         ' { filter: { field: POP_EST, min: 100000000 }, fill: "#0000ff", min_zoom: 3 }]')


def config(tmp_path, source, extra=""):
    return vector_config(tmp_path, "countries", source, extra)


MERCATOR_COUNTRIES = "/vsimem/countries-3857.gpkg"


def rasterized(z, x, y):
    """gdal_rasterize of every country (reprojected by ogr2ogr's library
    call, clipped to Web Mercator's latitudes) into the tile's 256 x 256
    pixels: the reference coverage (1 inside a country)."""
    if gdal.VSIStatL(MERCATOR_COUNTRIES) is None:
        gdal.VectorTranslate(MERCATOR_COUNTRIES, str(SHAPEFILE),
                             options="-f GPKG -t_srs EPSG:3857 -clipsrc -180 -85.05 180 85.05")
    west, south, east, north = tile_bounds(z, x, y)
    ds = gdal.Rasterize("/vsimem/ref.tif", MERCATOR_COUNTRIES, format="GTiff", outputBounds=[west, south, east, north],
                        width=256, height=256, outputSRS="EPSG:3857", burnValues=[1], outputType=gdal.GDT_Byte,
                        allTouched=False)
    coverage = ds.GetRasterBand(1).ReadAsArray()
    ds = None
    gdal.Unlink("/vsimem/ref.tif")
    return coverage


@pytest.fixture(scope="module")
def sources():
    return {
        "postgis": f'{{ type: vector, path: "{env("TESSERA_TEST_PG")}", layer: countries, style: {STYLE} }}',
        "url": f'{{ type: vector, path: "{env("TESSERA_TEST_PG_URL")}", layer: countries, style: {STYLE} }}',
        "gpkg": f'{{ type: vector, path: "{env("TESSERA_TEST_GPKG")}", style: {STYLE} }}',
        "shapefile": f'{{ type: vector, path: "{SHAPEFILE}", style: {STYLE} }}',
    }


@pytest.mark.parametrize("kind", ["postgis", "url", "gpkg", "shapefile"])
def test_tiles_cover_what_gdal_rasterize_covers(kind, sources, tmp_path, tmp_path_factory):
    with serving(tmp_path_factory, "--config", str(config(tmp_path, sources[kind]))) as server:
        for z, x, y in [(1, 1, 0), (3, 4, 2), (4, 8, 5)]:
            status, body = fetch(server, f"/tiles/countries/WebMercatorQuad/{z}/{x}/{y}.png")
            assert status == 200, body[:300]
            img = rgba(body)
            drawn = img[:, :, 3] > 127
            reference = rasterized(z, x, y).astype(bool)
            # Anti-aliased edges and pixel-centre rules differ only along
            # borders: a few percent of the pixels at most.
            differ = np.mean(drawn != reference)
            assert differ < 0.03, (kind, z, x, y, differ)
            assert reference.mean() > 0.05, "the tile holds land"
            inside = (img[:, :, 3] == 255) & reference
            assert np.all(np.abs(img[inside][:, :3].astype(int) - [0x33, 0x66, 0x99]).max(axis=1) <= 2)


def lonlat_pixel(z, x, y, lon, lat):
    import math
    mx = lon / 180 * HALF
    my = math.log(math.tan(math.pi / 4 + math.radians(lat) / 2)) / math.pi * HALF
    west, south, east, north = tile_bounds(z, x, y)
    return int((north - my) / (north - south) * 256), int((mx - west) / (east - west) * 256)


def test_rules_by_attribute_and_zoom_pick_the_colours(tmp_path, tmp_path_factory):
    source = f'{{ type: vector, path: "{env("TESSERA_TEST_PG")}", layer: countries, style: {RULES} }}'
    cfg = config(tmp_path, source.replace("CONTINENT", "continent").replace("POP_EST", "pop_est"))
    with serving(tmp_path_factory, "--config", str(cfg)) as server:
        def colour(z, x, y, lon, lat):
            status, body = fetch(server, f"/tiles/countries/WebMercatorQuad/{z}/{x}/{y}.png")
            assert status == 200, body[:300]
            row, col = lonlat_pixel(z, x, y, lon, lat)
            return tuple(int(v) for v in rgba(body)[row, col])
        # France is in Europe (red over green); Brazil is not (green) at
        # zoom 2, and blue (population over 100 million) from zoom 3.
        assert colour(2, 2, 1, 2.5, 46.5) == (255, 0, 0, 255)
        assert colour(2, 1, 2, -50, -10) == (0, 255, 0, 255)
        assert colour(3, 2, 4, -50, -10) == (0, 0, 255, 255)
        # The ocean is transparent.
        assert colour(2, 1, 1, -40, 35)[3] == 0


def test_a_wms_getmap_composites_raster_and_vector_layers(sources, tmp_path, tmp_path_factory):
    with serving(tmp_path_factory, "--config", str(config(tmp_path, sources["gpkg"]))) as server:
        base = ("/wms?SERVICE=WMS&VERSION=1.3.0&REQUEST=GetMap&CRS=EPSG:4326&BBOX=30,-20,60,40"
                "&WIDTH=400&HEIGHT=200&FORMAT=image/png&STYLES=&TRANSPARENT=TRUE")
        status, both = fetch(server, base + "&LAYERS=relief,countries")
        assert status == 200, both[:300]
        _, relief = fetch(server, base + "&LAYERS=relief")
        _, countries = fetch(server, base + "&LAYERS=countries")
        both, relief, countries = rgba(both), rgba(relief), rgba(countries)
        land = countries[:, :, 3] == 255
        sea = countries[:, :, 3] == 0
        assert land.mean() > 0.3 and sea.mean() > 0.1
        # Countries drawn over the relief where there is land, the relief
        # alone at sea.
        assert np.all(both[land][:, :3] == countries[land][:, :3])
        assert np.all(both[sea] == relief[sea])


def check(config_path):
    return subprocess.run([os.environ["TESSERA_BIN"], "check", str(config_path)], capture_output=True, text=True,
                          timeout=120)


def test_bad_vector_sources_are_named(tmp_path):
    pg = env("TESSERA_TEST_PG")
    cases = [
        (f'{{ type: vector, path: "{pg}", layer: nosuchtable, style: {STYLE} }}', ["nosuchtable", "countries"]),
        (f'{{ type: vector, path: "{pg}", layer: countries, fields: [nosuchfield], style: {STYLE} }}',
         ["nosuchfield", "name"]),
        ('{ type: vector, path: "PG:host=127.0.0.1 port=1 user=postgres password=hunter2", style: ' + STYLE + ' }',
         ["password=***"]),
        (f'{{ type: vector, path: "{SHAPEFILE}", style: [{{ stroke_width: 2 }}] }}', ["draws nothing"]),
        (f'{{ path: "{SHAPEFILE}" }}', ["vector data", "type gdal reads rasters"]),
    ]
    for source, words in cases:
        r = check(config(tmp_path, source))
        assert r.returncode != 0, (source, r.stdout)
        for w in words:
            assert w in r.stderr, (w, r.stderr)
        assert "hunter2" not in r.stderr + r.stdout


def test_check_reports_the_features(sources, tmp_path):
    r = check(config(tmp_path, sources["postgis"]))
    assert r.returncode == 0, r.stderr
    assert "countries" in r.stdout and "features" in r.stdout and "EPSG:4326" in r.stdout, r.stdout


def test_a_database_that_goes_away_gives_errors_and_nothing_cached_then_recovers(sources, tmp_path,
                                                                                 tmp_path_factory):
    with serving(tmp_path_factory, "--config", str(config(tmp_path, sources["postgis"]))) as server:
        assert fetch(server, "/tiles/countries/WebMercatorQuad/2/2/1.png")[0] == 200
        pg_ctl("stop")
        try:
            status, body = fetch(server, "/tiles/countries/WebMercatorQuad/2/1/1.png")
            assert status in (502, 503), (status, body[:300])
            # Where the database is and who tessera is there stays in the log.
            assert b"127.0.0.1" not in body and b"postgres" not in body.lower(), body[:300]
            assert b"upstream service" in body, body[:300]
        finally:
            pg_ctl("start")
        # Nothing was cached for the failed tile: it renders now.
        deadline = time.monotonic() + 30
        while True:
            status, body = fetch(server, "/tiles/countries/WebMercatorQuad/2/1/1.png")
            if status == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert status == 200, body[:300]
        assert rgba(body)[:, :, 3].max() == 255


def test_a_statement_timeout_is_an_error_not_a_hang(tmp_path, tmp_path_factory):
    # pg_sleep in the filter runs per row: far longer than the timeout.
    source = (f'{{ type: vector, path: "{env("TESSERA_TEST_PG")}", layer: countries, '
              f'where: "pg_sleep(0.05) IS NOT NULL", statement_timeout_ms: 500, style: {STYLE} }}')
    with serving(tmp_path_factory, "--config", str(config(tmp_path, source))) as server:
        start = time.monotonic()
        status, body = fetch(server, "/tiles/countries/WebMercatorQuad/0/0/0.png")
        assert status in (502, 503), (status, body[:300])
        assert time.monotonic() - start < 60
        log = server.log_text()
        assert "statement timeout" in log or "canceling statement" in log, log[-2000:]
        assert b"statement" not in body, body[:500]


def test_a_statement_timeout_too_small_to_list_the_tables_says_so_at_start(tmp_path):
    # Once "it has no layer "countries"; its layers: none".
    source = (f'{{ type: vector, path: "{env("TESSERA_TEST_PG")}", layer: countries, '
              f'statement_timeout_ms: 1, style: {STYLE} }}')
    r = check(config(tmp_path, source))
    assert r.returncode != 0
    assert "its layers: none" not in r.stderr, r.stderr
    assert "statement timeout" in r.stderr or "canceling statement" in r.stderr, r.stderr[-2000:]


def test_an_extent_query_past_the_statement_timeout_says_it_timed_out_not_empty(tmp_path):
    from test_postgis_auto import psql
    url = env("TESSERA_TEST_PG_URL")
    # Every row of the view sleeps: the extent, a scan of all of them, runs
    # past the timeout; listing the tables does not.
    psql(url, "CREATE OR REPLACE VIEW slow_extent AS SELECT c.* FROM countries c WHERE pg_sleep(0.02) IS NOT NULL")
    try:
        source = (f'{{ type: vector, path: "{env("TESSERA_TEST_PG")}", layer: slow_extent, '
                  f'statement_timeout_ms: 1000, style: {STYLE} }}')
        r = check(config(tmp_path, source))
        assert r.returncode != 0
        assert "the query of its extent timed out" in r.stderr and "statement_timeout_ms" in r.stderr, r.stderr
        assert "is it empty" not in r.stderr, r.stderr
    finally:
        psql(url, "DROP VIEW slow_extent")
