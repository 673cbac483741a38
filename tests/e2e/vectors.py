"""What the vector tests share: the demo data, the PostGIS test server's
settings, Web Mercator tile bounds and a configuration with a vector layer
next to the relief raster."""
import os
import subprocess

import pytest

from conftest import ROOT

HALF = 20037508.342789244
SHAPEFILE = ROOT / "var" / "demo" / "countries" / "ne_50m_admin_0_countries.shp"
PLACES = ROOT / "var" / "demo" / "places" / "naturalearth_cities.shp"


def countries_and_places(path):
    """The demo countries and cities as the layers `countries` and `places`
    of one GeoPackage at `path` (a source's labels are placed together)."""
    from osgeo import gdal
    gdal.VectorTranslate(str(path), str(SHAPEFILE), layerName="countries", format="GPKG")
    gdal.VectorTranslate(str(path), str(PLACES), layerName="places", accessMode="append", format="GPKG")
    return path


def env(name):
    """A setting of scripts/postgis; a failure (never a skip) when unset."""
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: start PostGIS with scripts/postgis start (scripts/test does)",
                    pytrace=False)
    return value


def tile_bounds(z, x, y):
    """A WebMercatorQuad tile's (west, south, east, north) in metres."""
    size = 2 * HALF / 2 ** z
    return -HALF + x * size, HALF - (y + 1) * size, -HALF + (x + 1) * size, HALF - y * size


def vector_config(tmp_path, name, source, extra="", formats="", metatile=(2, 2)):
    """A config with the vector layer `name` (cached in a file store with
    `metatile`) and `relief` (in memory), plus `extra` layers; its path."""
    path = tmp_path / "tessera.yaml"
    formats_line = f"\n    formats: {formats}" if formats else ""
    path.write_text(f"""
stores: {{ mem: {{ type: memory }}, disk: {{ type: file, path: {tmp_path / 'tiles'} }} }}
layers:
  - name: {name}
    source: {source}{formats_line}
    grids: [WebMercatorQuad]
    cache: {{ store: disk, metatile: [{metatile[0]}, {metatile[1]}] }}
  - name: relief
    source: {{ path: {ROOT}/data/shadedrelief-5400.tif }}
    grids: [WebMercatorQuad]
    cache: {{ store: mem }}
{extra}
""")
    return path


def pg_ctl(action):
    """Stops (immediately) or starts the PostGIS test cluster."""
    runner = ["runuser", "-u", "postgres", "--"] if os.getuid() == 0 else []
    # A started server writes to its log file, not to our pipes.
    extra = ["-m", "immediate"] if action == "stop" else ["-l", f"{env('TESSERA_TEST_PG_DATA')}/server.log"]
    subprocess.run([*runner, f"{env('TESSERA_TEST_PG_BIN')}/pg_ctl", "-D", env("TESSERA_TEST_PG_DATA"), "-w",
                    *extra, action], check=True, capture_output=True, timeout=120)
