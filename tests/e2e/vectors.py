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


class MapLibreView:
    """The Web Mercator window MapLibre GL JS shows centred on (`lon`,
    `lat`) at `zoom` in a `width` x `height` canvas (its zoom z is 512 * 2^z
    pixels around), to ask tessera for the same picture."""

    def __init__(self, lon, lat, zoom, width, height):
        import math
        self.width, self.height = width, height
        self.res = 2 * HALF / (512 * 2 ** zoom)
        cx = lon * HALF / 180
        cy = math.log(math.tan(math.pi / 4 + math.radians(lat) / 2)) * HALF / math.pi
        self.bbox = [cx - width / 2 * self.res, cy - height / 2 * self.res,
                     cx + width / 2 * self.res, cy + height / 2 * self.res]

    def getmap(self, layers, **extra):
        """The WMS GetMap path of the window."""
        import urllib.parse
        query = {"SERVICE": "WMS", "VERSION": "1.3.0", "REQUEST": "GetMap", "LAYERS": layers, "STYLES": "",
                 "CRS": "EPSG:3857", "BBOX": ",".join(map(str, self.bbox)), "WIDTH": self.width,
                 "HEIGHT": self.height, "FORMAT": "image/png", **extra}
        return "/wms?" + urllib.parse.urlencode(query)

    def pixel(self, lon, lat):
        """The (row, column) of a place in the window."""
        import math
        x = (lon * HALF / 180 - self.bbox[0]) / self.res
        y = (self.bbox[3] - math.log(math.tan(math.pi / 4 + math.radians(lat) / 2)) * HALF / math.pi) / self.res
        return int(y), int(x)


def side_by_side(ours, theirs, name):
    """Two (3, rows, cols) pictures kept side by side in var/test-output;
    the file's path."""
    import numpy as np
    from PIL import Image
    out = ROOT / "var" / "test-output"
    out.mkdir(parents=True, exist_ok=True)
    height = ours.shape[1]
    side = np.concatenate([ours, np.full((3, height, 10), 255), theirs], axis=2).astype(np.uint8)
    Image.fromarray(np.moveaxis(side, 0, -1)).save(out / name)
    return out / name
