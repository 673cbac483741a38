"""GDAL's own WMS and WMTS drivers read tessera's capabilities and maps."""
import re
import subprocess

import pytest
from osgeo import gdal

from conftest import require_tool
from imaging import read

gdal.UseExceptions()


@pytest.fixture(autouse=True)
def fresh_wms_cache(tmp_path, monkeypatch):
    """GDAL's WMS/WMTS drivers cache tiles on disk: give each test an empty
    cache of its own so every answer comes from the server, and none lands in
    the checkout."""
    monkeypatch.setenv("GDAL_DEFAULT_WMS_CACHE_PATH", str(tmp_path / "gdalwmscache"))


def run(*args):
    return subprocess.run(args, capture_output=True, text=True, check=True, timeout=300).stdout


def test_gdalinfo_lists_every_layer_of_the_wms_capabilities(tessera):
    require_tool("gdalinfo")
    out = run("gdalinfo", f"WMS:{tessera.url}/wms?SERVICE=WMS&VERSION=1.3.0&REQUEST=GetCapabilities")
    for layer in ("relief", "elevation", "landsat"):
        assert f"LAYERS={layer}" in out, out


def test_gdal_translate_through_the_wms_driver_gives_a_georeferenced_image(tessera, tmp_path):
    out = run("gdalinfo", f"WMS:{tessera.url}/wms?SERVICE=WMS&VERSION=1.1.1&REQUEST=GetCapabilities")
    name = next(m.group(1) for m in re.finditer(r"SUBDATASET_\d+_NAME=(\S+)", out) if "LAYERS=elevation" in m.group(1))
    dst = tmp_path / "wms.tif"
    run("gdal_translate", "-q", "-outsize", "200", "0", name, str(dst))
    ds = gdal.Open(str(dst))
    gt = ds.GetGeoTransform()
    # The layer's extent: the Luxembourg DEM, 5.7417..6.5333 E, 49.4417..50.1917 N.
    assert abs(gt[0] - 5.7417) < 0.01 and abs(gt[3] - 50.1917) < 0.01, gt
    right = gt[0] + gt[1] * ds.RasterXSize
    assert abs(right - 6.5333) < 0.01, gt
    pixels = read(dst)
    assert pixels.shape[0] >= 3
    assert pixels[:3].std() > 5, "the map is blank"


def test_gdalinfo_lists_layers_and_matrix_sets_of_the_wmts_capabilities(tessera):
    out = run("gdalinfo", f"WMTS:{tessera.url}/wmts/1.0.0/WMTSCapabilities.xml")
    assert "layer=landsat" in out and "tilematrixset=WorldCRS84Quad" in out, out


def test_gdal_translate_through_the_wmts_driver_gives_a_georeferenced_image(tessera, tmp_path):
    dst = tmp_path / "wmts.tif"
    src = f"WMTS:{tessera.url}/wmts/1.0.0/WMTSCapabilities.xml,layer=elevation,tilematrixset=WebMercatorQuad:0-14"
    run("gdal_translate", "-q", "-outsize", "256", "0", src, str(dst))
    ds = gdal.Open(str(dst))
    assert "3857" in ds.GetSpatialRef().ExportToWkt() or "Pseudo-Mercator" in ds.GetSpatialRef().ExportToWkt()
    gt = ds.GetGeoTransform()
    # Luxembourg in Web Mercator: x 639,000..727,000 m, y 6,350,000..6,480,000 m,
    # widened to whole tiles of the highest zoom by the matrix limits.
    assert 620_000 < gt[0] < 640_000, gt
    assert 6_470_000 < gt[3] < 6_490_000, gt
    pixels = read(dst)
    alpha = pixels[3] if pixels.shape[0] == 4 else None
    assert alpha is None or (alpha > 0).mean() > 0.3
    assert pixels[:3].std() > 5, "the map is blank"


def test_a_world_layer_reads_whole_through_the_wmts_driver(tessera, tmp_path):
    """A layer that covers the world to the poles (WGS84BoundingBox ±90°)
    names its extent in each matrix set's CRS too (ows:BoundingBox), so
    GDAL reads it in Web Mercator without a window chosen by hand: the
    image is the grid's square, not a strip reaching past the poles."""
    dst = tmp_path / "world.tif"
    src = f"WMTS:{tessera.url}/wmts/1.0.0/WMTSCapabilities.xml,layer=relief,tilematrixset=WebMercatorQuad"
    run("gdal_translate", "-q", "-outsize", "512", "0", src, str(dst))
    ds = gdal.Open(str(dst))
    gt = ds.GetGeoTransform()
    half = 20037508.34
    assert abs(gt[0] + half) < 1 and abs(gt[3] - half) < 1, gt
    assert abs(ds.RasterXSize - ds.RasterYSize) <= 1, (ds.RasterXSize, ds.RasterYSize)
    pixels = read(dst)
    assert pixels[:3].std() > 10, "the map is blank"
