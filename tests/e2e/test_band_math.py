"""Band math (`style: { type: expression }`): NDVI of a 4-band GeoTIFF made
here equals `gdal_calc.py` of the same formula, pixel for pixel (as grey
over `rescale`, and under GetFeatureInfo); a named colour map equals
matplotlib's at the same values; nodata stays transparent; a bad
expression is refused at start saying where."""
import json
import os
import subprocess
import urllib.parse

import numpy as np
import pytest
from osgeo import gdal, osr

from conftest import serving
from imaging import decode

WIDTH, HEIGHT = 200, 100
BOUNDS = (0.0, 40.0, 10.0, 45.0)   # lon/lat
NODATA = -9999.0


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    """scene.tif (4 Float32 bands: red in band 3, near infrared in band 4,
    a nodata corner) and ndvi.tif, gdal_calc.py's NDVI of it."""
    d = tmp_path_factory.mktemp("band-math")
    rng = np.random.default_rng(3)
    y, x = np.mgrid[0:HEIGHT, 0:WIDTH]
    red = (50 + 40 * np.sin(x / 17.0) + rng.uniform(0, 20, (HEIGHT, WIDTH))).astype(np.float32)
    nir = (60 + 50 * np.cos(y / 11.0) + rng.uniform(0, 30, (HEIGHT, WIDTH))).astype(np.float32)
    red[:10, :10] = NODATA
    nir[:10, :10] = NODATA
    path = d / "scene.tif"
    ds = gdal.GetDriverByName("GTiff").Create(str(path), WIDTH, HEIGHT, 4, gdal.GDT_Float32)
    ds.SetGeoTransform((BOUNDS[0], (BOUNDS[2] - BOUNDS[0]) / WIDTH, 0, BOUNDS[3], 0, -(BOUNDS[3] - BOUNDS[1]) / HEIGHT))
    srs = osr.SpatialReference()
    srs.ImportFromEPSG(4326)
    ds.SetProjection(srs.ExportToWkt())
    for i, band in enumerate([red * 0.5, red * 0.7, red, nir], start=1):
        band[:10, :10] = NODATA
        b = ds.GetRasterBand(i)
        b.WriteArray(band)
        b.SetNoDataValue(NODATA)
    ds = None
    ndvi = d / "ndvi.tif"
    subprocess.run(["gdal_calc.py", "--quiet", "-A", str(path), "--A_band=3", "-B", str(path), "--B_band=4",
                    "--calc=(B - A) / (B + A)", "--type=Float32", f"--NoDataValue={NODATA}",
                    f"--outfile={ndvi}"], check=True, capture_output=True, timeout=120)
    return path, gdal.Open(str(ndvi)).ReadAsArray()


def config(tmp_path, scene_path, style):
    cfg = tmp_path / "band-math.yaml"
    cfg.write_text(f"""
layers:
  - name: ndvi
    source: {{ path: {scene_path}, resampling: nearest }}
    style: {style}
    grids: [WorldCRS84Quad]
""")
    return cfg


def get_map(server, layer="ndvi"):
    q = urllib.parse.urlencode({"SERVICE": "WMS", "VERSION": "1.1.1", "REQUEST": "GetMap", "LAYERS": layer,
                                "STYLES": "", "SRS": "EPSG:4326", "BBOX": ",".join(map(str, BOUNDS)),
                                "WIDTH": WIDTH, "HEIGHT": HEIGHT, "FORMAT": "image/png", "TRANSPARENT": "TRUE"})
    status, ctype, body = server.get(f"/wms?{q}")
    assert status == 200 and ctype == "image/png", body[:300]
    return decode(body)


def test_ndvi_equals_gdal_calc_pixel_for_pixel(scene, tmp_path, tmp_path_factory):
    path, expected = scene
    style = '{ type: expression, expression: "(b4 - b3) / (b4 + b3)", rescale: [-1, 1] }'
    with serving(tmp_path_factory, "--config", str(config(tmp_path, path, style))) as server:
        pixels = get_map(server)
        valid = expected != NODATA
        grey = np.round((expected.astype(np.float64) + 1) / 2 * 255)
        assert (pixels[3][valid] == 255).all() and (pixels[3][~valid] == 0).all(), "nodata is transparent"
        diff = np.abs(pixels[0].astype(np.float64) - grey)[valid]
        assert diff.max() <= 1, diff.max()
        assert (pixels[0] == pixels[1]).all() and (pixels[1] == pixels[2]).all(), "grey"
        # GetFeatureInfo answers the expression's value under the pixel.
        for i, j in [(50, 20), (150, 80), (3, 3)]:
            q = urllib.parse.urlencode({"SERVICE": "WMS", "VERSION": "1.1.1", "REQUEST": "GetFeatureInfo",
                                        "LAYERS": "ndvi", "QUERY_LAYERS": "ndvi", "STYLES": "", "SRS": "EPSG:4326",
                                        "BBOX": ",".join(map(str, BOUNDS)), "WIDTH": WIDTH, "HEIGHT": HEIGHT,
                                        "X": i, "Y": j, "INFO_FORMAT": "application/json"})
            features = json.loads(server.get(f"/wms?{q}")[2])["features"]
            if expected[j, i] == NODATA:
                assert features == [], features
            else:
                value = features[0]["properties"]["value"]
                assert abs(value - float(expected[j, i])) < 1e-5, (i, j, value, expected[j, i])


@pytest.mark.parametrize("name", ["viridis", "magma", "rdylgn", "greys_r"])
def test_a_named_colour_map_equals_matplotlibs(name, scene, tmp_path, tmp_path_factory):
    from matplotlib import colormaps
    path, expected = scene
    style = f'{{ type: expression, expression: "(b4 - b3) / (b4 + b3)", rescale: [-1, 1], colormap: {name} }}'
    with serving(tmp_path_factory, "--config", str(config(tmp_path, path, style))) as server:
        pixels = get_map(server)
        valid = expected != NODATA
        reference = colormaps[{"rdylgn": "RdYlGn", "greys_r": "Greys_r"}.get(name, name)](
            (expected.astype(np.float64) + 1) / 2)[..., :3] * 255
        diff = np.abs(np.moveaxis(pixels[:3], 0, -1).astype(np.float64) - reference)[valid]
        # Within rounding and one of 256 steps (at most a few levels).
        assert diff.max() <= 4, (name, diff.max())
        assert np.median(diff) <= 1, (name, np.median(diff))
        # Its legend shows the map.
        status, ctype, legend = server.get("/wms?SERVICE=WMS&VERSION=1.3.0&REQUEST=GetLegendGraphic&LAYER=ndvi"
                                           "&FORMAT=image/png")
        assert status == 200 and ctype == "image/png" and decode(legend).std() > 10


def test_a_bad_expression_is_refused_at_start(scene, tmp_path):
    path, _ = scene
    cfg = config(tmp_path, path, '{ type: expression, expression: "(b4 - b3) / (b4 + b9" }')
    result = subprocess.run([os.environ["TESSERA_BIN"], "check", str(cfg)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode != 0
    assert "expected \")\"" in result.stderr, result.stderr
    cfg = config(tmp_path, path, '{ type: expression, expression: "b7", rescale: [0, 1] }')
    result = subprocess.run([os.environ["TESSERA_BIN"], "check", str(cfg)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode != 0 and "band 7" in result.stderr, result.stderr
