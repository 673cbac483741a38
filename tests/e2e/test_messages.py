"""What a user reads when they mistype, through the real binary: an unknown
layer, grid, format, TileMatrix or collection answers with the closest name
and the names offered, in the error format of the protocol asked (a plain
404, an OWS exception, a WMS service exception, an RFC 7807 problem), and
never names a layer the caller may not read; a zoom out of range reads as
words, not Rust; an unknown config key gets a "did you mean"; the command
line takes the config positionally and with -c alike and says how to write
an address; `serve FILE` offers zooms from the file's own pixels; and two
files that would get one name are named by extension, or refused."""
import hashlib
import json
import os
import shutil
import subprocess

import pytest

from conftest import ROOT, http_get as get, serving

RELIEF = ROOT / "data" / "shadedrelief-5400.tif"
KEY = "messages-test-key-0123456789"


def tessera(*args, cwd=None):
    return subprocess.run([os.environ["TESSERA_BIN"], *map(str, args)], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("messages")
    config = d / "tessera.yaml"
    config.write_text(f"""
auth:
  keys:
    - {{ id: reader, sha256: {hashlib.sha256(KEY.encode()).hexdigest()}, layers: [relief] }}
  public: [dem_utm32, relief]
layers:
  - name: relief
    source: {{ path: {RELIEF} }}
    grids: [WebMercatorQuad, WorldCRS84Quad]
    formats: [png, jpg]
    max_zoom: 6
  - name: dem_utm32
    source: {{ path: {RELIEF} }}
    max_zoom: 6
  - name: secret_dem
    source: {{ path: {RELIEF} }}
    max_zoom: 6
""")
    with serving(tmp_path_factory, "--config", config) as s:
        yield s


def text_of(server, path):
    status, headers, body = get(server, path)
    return status, headers, body.decode().rstrip("\n")


def test_an_unknown_layer_in_every_protocol_names_the_closest_and_lists_the_rest(server):
    hint = '"dem_utm"; did you mean "dem_utm32"? (layers: relief, dem_utm32)'
    status, _, body = text_of(server, "/tiles/dem_utm/WebMercatorQuad/0/0/0.png")
    assert status == 404 and body == f"unknown layer {hint}", body
    status, _, body = text_of(server, "/tiles/dem_utm/WebMercatorQuad/tilejson.json")
    assert status == 404 and hint in body, body
    status, headers, body = text_of(
        server, "/wmts?SERVICE=WMTS&REQUEST=GetTile&VERSION=1.0.0&LAYER=dem_utm&STYLE=default"
                "&TILEMATRIXSET=WebMercatorQuad&TILEMATRIX=0&TILEROW=0&TILECOL=0&FORMAT=image/png")
    assert status == 400 and "ExceptionReport" in body and 'locator="LAYER"' in body, body
    assert "did you mean &quot;dem_utm32&quot;?" in body, body
    status, _, body = text_of(
        server, "/wms?SERVICE=WMS&REQUEST=GetMap&VERSION=1.3.0&LAYERS=dem_utm&STYLES=&CRS=CRS:84"
                "&BBOX=-180,-90,180,90&WIDTH=10&HEIGHT=10&FORMAT=image/png")
    assert "ServiceExceptionReport" in body and 'code="LayerNotDefined"' in body, body
    assert "did you mean &quot;dem_utm32&quot;?" in body, body
    status, headers, body = text_of(server, "/ogcapi/collections/dem_utm")
    assert status == 404 and headers["Content-Type"].startswith("application/problem+json"), body
    assert "did you mean \"dem_utm32\"?" in json.loads(body)["detail"], body
    status, _, body = text_of(server, "/preview/dem_utm")
    assert status == 404 and hint in body, body


def test_a_hint_never_names_a_layer_the_caller_may_not_read(server):
    # "secret" is closest to "secret_dem", which only a key may read: an
    # anonymous caller is told of the public layers only.
    status, headers, body = text_of(server, "/tiles/secret/WebMercatorQuad/0/0/0.png")
    assert status == 404 and "secret_dem" not in body and "(layers: relief, dem_utm32)" in body, body
    assert "private" in headers.get("Cache-Control", ""), headers
    status, _, body = text_of(server, "/ogcapi/collections/secret")
    assert status == 404 and "secret_dem" not in body, body


def test_an_unknown_grid_format_matrix_or_zoom_is_answered_in_words(server):
    status, _, body = text_of(server, "/tiles/relief/WebMercatorQaud/1/0/0.png")
    assert status == 404, body
    assert body == ('grid "WebMercatorQaud" is not offered for this layer; did you mean "WebMercatorQuad"? '
                    '(grids: WebMercatorQuad, WorldCRS84Quad)'), body
    status, _, body = text_of(server, "/tiles/relief/WebMercatorQuad/1/0/0.webp")
    assert status == 404 and body == 'format "webp" is not offered for this layer (formats: png, jpg)', body
    status, _, body = text_of(
        server, "/wmts?SERVICE=WMTS&REQUEST=GetTile&VERSION=1.0.0&LAYER=relief&STYLE=default"
                "&TILEMATRIXSET=WebMercatorQuad&TILEMATRIX=0&TILEROW=0&TILECOL=0&FORMAT=image/webp")
    assert status == 400 and 'locator="FORMAT"' in body and "(formats: image/png, image/jpeg)" in body, body
    status, _, body = text_of(server, "/tiles/relief/WebMercatorQuad/9/0/0.png")
    assert status == 404 and body == "zoom 9 is outside this layer's zoom levels, 0 to 6", body
    status, _, body = text_of(server, "/tiles/relief/WebMercatorQuad/30/0/0.png")
    assert status == 404 and "0 to 24" in body and "..=" not in body, body
    # The set of the layer's own zooms (the grid's whole set draws every level).
    status, _, body = text_of(
        server, "/wmts?SERVICE=WMTS&REQUEST=GetTile&VERSION=1.0.0&LAYER=relief&STYLE=default"
                "&TILEMATRIXSET=WebMercatorQuad:0-6&TILEMATRIX=9&TILEROW=0&TILECOL=0&FORMAT=image/png")
    assert status == 400 and "zoom levels, 0 to 6" in body and "..=" not in body, body


def test_an_unknown_config_key_gets_a_did_you_mean(tmp_path):
    config = tmp_path / "typo.yaml"
    config.write_text(f"layers:\n  - name: a\n    source: {{ path: {RELIEF} }}\n    cahce: {{ store: none }}\n")
    r = tessera("check", config)
    assert r.returncode != 0
    assert "unknown field `cahce`" in r.stderr and "did you mean `cache`?" in r.stderr, r.stderr


def test_a_batch_command_names_the_closest_layer(tmp_path):
    config = tmp_path / "seed.yaml"
    config.write_text(f"stores: {{ disk: {{ type: file, path: {tmp_path / 'cache'} }} }}\n"
                      f"layers:\n  - name: dem_utm32\n    source: {{ path: {RELIEF} }}\n"
                      f"    cache: {{ store: disk }}\n")
    r = tessera("seed", config, "--layer", "dem_utm", "--zoom", "0")
    assert r.returncode != 0 and 'did you mean "dem_utm32"?' in r.stderr, r.stderr
    r = tessera("seed", config, "--layer", "dem_utm32", "--zoom", "x")
    assert r.returncode != 0 and "is not a zoom level (a whole number, 0 to 255)" in r.stderr, r.stderr


def test_every_command_takes_the_config_positionally_and_with_c(tmp_path):
    config = tmp_path / "seed.yaml"
    config.write_text(f"stores: {{ disk: {{ type: file, path: {tmp_path / 'cache'} }} }}\n"
                      f"layers:\n  - name: relief\n    source: {{ path: {RELIEF} }}\n"
                      f"    max_zoom: 1\n    cache: {{ store: disk }}\n")
    for way in ([config], ["-c", config], ["--config", config]):
        r = tessera("check", *way)
        assert r.returncode == 0 and "ok: 1 layer(s)" in r.stdout, (way, r.stderr)
        r = tessera("seed", *way, "--layer", "relief", "--zoom", "0")
        assert r.returncode == 0, (way, r.stderr)
        r = tessera("export", *way, "--layer", "relief", "--zoom", "0", "--format", "mbtiles",
                    "--to", tmp_path / f"out-{len(way)}-{way[0]}.mbtiles".replace("/", "_"))
        assert r.returncode == 0, (way, r.stderr)
        r = tessera("truncate", *way, "--layer", "relief", "--zoom", "0")
        assert r.returncode == 0, (way, r.stderr)
    r = tessera("check")
    assert r.returncode != 0 and "give it as the first argument or with -c FILE" in r.stderr, r.stderr


def test_serve_reads_one_yaml_file_as_its_config_and_its_help_names_every_kind_of_file(tmp_path, tmp_path_factory):
    config = tmp_path / "mine.yaml"
    config.write_text(f"layers:\n  - name: only_here\n    source: {{ path: {RELIEF} }}\n")
    with serving(tmp_path_factory, config) as server:
        status, _, _ = get(server, "/tiles/only_here/WebMercatorQuad/tilejson.json")
        assert status == 200
    help_text = tessera("serve", "--help").stdout
    assert "Raster files" not in help_text
    for kind in ("PMTiles", "vector files", "postgresql://", ".yaml"):
        assert kind in help_text, help_text


def test_listen_without_a_port_says_how_to_write_an_address():
    r = tessera("serve", "--listen", "localhost")
    assert r.returncode != 0
    assert "write HOST:PORT" in r.stderr and "invalid socket address" not in r.stderr, r.stderr


def test_serve_file_offers_zooms_from_the_files_own_pixels(tmp_path, tmp_path_factory):
    # A 250 m DEM at 49° N: its pixels are 380 Web Mercator metres, as
    # fine as zoom 9's (306 m) nearly, so the layer offers zooms to 11
    # (as gdal2tiles and TiTiler compute it, plus two), not 24.
    dem = tmp_path / "dem250.tif"
    subprocess.run(["gdalwarp", "-q", "-t_srs", "EPSG:32632", "-tr", "250", "250", "-te", "280000", "5400000",
                    "330000", "5450000", RELIEF, dem], check=True, timeout=120)
    with serving(tmp_path_factory, dem) as server:
        _, _, body = get(server, "/tiles/dem250/WebMercatorQuad/tilejson.json")
        assert json.loads(body)["maxzoom"] == 11, body
        status, _, _ = get(server, "/tiles/dem250/WebMercatorQuad/12/0/0.png")
        assert status == 404
        _, _, caps = get(server, "/wmts?SERVICE=WMTS&REQUEST=GetCapabilities")
        # The layer's own set (beside the grid's whole one): zooms 0 to 11.
        assert "<TileMatrixSet>WebMercatorQuad:0-11</TileMatrixSet>" in caps.decode()
        _, _, doc = get(server, "/ogcapi/collections/dem250/map/tiles/WebMercatorQuad?f=json")
        zooms = [int(l["tileMatrix"]) for l in json.loads(doc)["tileMatrixSetLimits"]]
        assert max(zooms) == 11, zooms


def test_two_archives_of_one_name_are_named_by_extension_and_two_files_of_one_name_refused(
        tmp_path, tmp_path_factory):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    shutil.copy(RELIEF, a / "world.tif")
    shutil.copy(RELIEF, b / "world.tif")
    r = tessera("serve", a / "world.tif", b / "world.tif", "--listen", "127.0.0.1:0")
    assert r.returncode != 0
    assert f"{a / 'world.tif'} and {b / 'world.tif'} would both be served as layer \"world-tif\"" in r.stderr, r.stderr
    subprocess.run(["gdal_translate", "-q", "-of", "MBTiles", "-outsize", "512", "256", RELIEF,
                    tmp_path / "world.mbtiles"], check=True, timeout=120)
    with serving(tmp_path_factory, a / "world.tif", tmp_path / "world.mbtiles") as server:
        _, _, index = get(server, "/ogcapi/collections?f=json")
        ids = sorted(c["id"] for c in json.loads(index)["collections"])
        assert ids == ["world-mbtiles", "world-tif"], ids


@pytest.fixture
def series_and_countries(tmp_path):
    gpkg = os.environ.get("TESSERA_TEST_GPKG")
    if not gpkg:
        pytest.fail("TESSERA_TEST_GPKG is not set: start scripts/postgis (scripts/test does)", pytrace=False)
    series = tmp_path / "series"
    series.mkdir()
    for day in ("2024-01-01", "2024-02-01", "2024-03-01", "2024-04-01"):
        subprocess.run(["gdal_translate", "-q", "-outsize", "64", "32", RELIEF, series / f"day_{day}.tif"],
                       check=True, timeout=120)
    config = tmp_path / "tessera.yaml"
    config.write_text(f"""
stores: {{ disk: {{ type: file, path: {tmp_path / 'cache'} }} }}
layers:
  - name: series
    source: {{ type: mosaic, dir: {series} }}
    max_zoom: 4
    cache: {{ store: disk }}
    dimensions:
      time: {{ from_path: 'day_(\\d{{4}}-\\d{{2}}-\\d{{2}})' }}
  - name: countries
    source: {{ type: vector, path: "{gpkg}", fields: [NAME], style: [{{ fill: "#336699" }}] }}
    formats: [mvt, png]
    max_zoom: 5
    cache: {{ store: disk }}
""")
    return config


def test_check_shows_dimension_values_and_the_fields_tiles_carry(series_and_countries):
    r = tessera("check", series_and_countries)
    assert r.returncode == 0, r.stderr
    assert ("dimension time: 4 value(s): 2024-01-01T00:00:00Z, 2024-02-01T00:00:00Z, 2024-03-01T00:00:00Z, "
            "2024-04-01T00:00:00Z; default 2024-04-01T00:00:00Z") in r.stdout, r.stdout
    assert "at the default value(s):\n    1 piece over" in r.stdout, r.stdout
    assert "served fields: NAME (String)" in r.stdout, r.stdout
    # Not every column of the table (the GeoPackage has dozens).
    assert "POP_EST" not in r.stdout and "CONTINENT" not in r.stdout, r.stdout


def test_a_vector_seed_says_blocks_and_why_its_total_differs_from_the_exports(series_and_countries, tmp_path):
    area = ["--layer", "countries", "--zoom", "0..3", "--format", "mvt", "--bbox", "0,0,20,20"]
    r = tessera("seed", series_and_countries, *area)
    assert r.returncode == 0, r.stderr
    assert "metatiles" not in r.stderr + r.stdout, r.stderr + r.stdout
    assert ("37 tiles in 4 blocks of 4x4" in r.stderr
            and "4 tiles in the area, rounded out to whole blocks (an export of the area writes those 4)"
            in r.stderr), r.stderr
    assert "seed complete: 37/37 tiles in 4/4 blocks (4 cut" in r.stdout, r.stdout
    r = tessera("export", series_and_countries, "--layer", "countries", "--zoom", "0..3", "--tile-format", "mvt",
                "--bbox", "0,0,20,20", "--format", "mbtiles", "--to", tmp_path / "countries.mbtiles")
    assert r.returncode == 0, r.stderr
    assert "up to 4 tiles, those of the area" in r.stderr and "export complete: 4 tiles" in r.stdout, r.stderr
