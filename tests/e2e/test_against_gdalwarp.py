"""Rendered tiles match GDAL's own gdalwarp output of the same window."""
import math
import subprocess

import numpy as np
import pytest

from imaging import decode, read

HALF = 20037508.342789244


def mercator_bbox(z, x, y):
    span = 2 * HALF / 2**z
    return (-HALF + x * span, HALF - (y + 1) * span, -HALF + (x + 1) * span, HALF - y * span)


def gdalwarp(src, bbox, srs, dst):
    subprocess.run(
        ["gdalwarp", "-q", "-overwrite", "-t_srs", srs, "-te", *map(str, bbox), "-ts", "256", "256",
         "-r", "bilinear", "-dstalpha", "-ovr", "AUTO", str(src), str(dst)],
        check=True, timeout=120,
    )
    return read(dst)


def compare(tile, reference, scale=None):
    ref_rgb = reference[:3].astype(float)
    if scale is not None:
        lo, hi = scale
        ref_rgb = np.clip(np.round((ref_rgb - lo) * 255.0 / (hi - lo)), 0, 255)
    mask = reference[-1] == 255
    if tile.shape[0] == 4:
        mask &= tile[3] == 255
    assert mask.mean() > 0.2, "too few valid pixels to compare"
    diff = np.abs(tile[:3].astype(float) - ref_rgb)[:, mask]
    assert diff.mean() < 2.0, f"mean difference {diff.mean():.2f}"
    assert np.percentile(diff, 99) < 12, f"99th percentile difference {np.percentile(diff, 99):.1f}"


@pytest.mark.parametrize("z,x,y", [(1, 1, 0), (3, 4, 2), (5, 16, 11)])
def test_relief_tiles_match_gdalwarp_in_web_mercator(tessera, demo_data, tmp_path, z, x, y):
    _, _, png = tessera.get(f"/tiles/relief/WebMercatorQuad/{z}/{x}/{y}.png")
    reference = gdalwarp(demo_data / "shadedrelief-5400.tif", mercator_bbox(z, x, y), "EPSG:3857", tmp_path / "ref.tif")
    compare(decode(png), reference)


def test_relief_tile_matches_gdalwarp_in_crs84(tessera, demo_data, tmp_path):
    # WorldCRS84Quad zoom 2, column 5, row 1: lon 45..90, lat 0..45.
    _, _, png = tessera.get("/tiles/relief/WorldCRS84Quad/2/5/1.png")
    reference = gdalwarp(demo_data / "shadedrelief-5400.tif", (45, 0, 90, 45), "EPSG:4326", tmp_path / "ref.tif")
    compare(decode(png), reference)


def test_landsat_wms_map_matches_gdalwarp_after_the_same_stretch(tessera, demo_data, tmp_path):
    bbox = (288000, 9110000, 298000, 9120000)
    _, _, png = tessera.get(
        "/wms?SERVICE=WMS&REQUEST=GetMap&VERSION=1.1.1&LAYERS=landsat&STYLES=&SRS=EPSG:31985"
        f"&BBOX={','.join(map(str, bbox))}&WIDTH=256&HEIGHT=256&FORMAT=image/png&TRANSPARENT=TRUE")
    reference = gdalwarp(demo_data / "L7_ETMs.tif", bbox, "EPSG:31985", tmp_path / "ref.tif")
    # The layer shows bands 3, 2, 1 stretched from [20, 140].
    reference = np.concatenate([reference[[2, 1, 0]], reference[-1:]])
    compare(decode(png), reference, scale=(20, 140))
