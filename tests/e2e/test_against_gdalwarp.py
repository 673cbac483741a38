"""Rendered tiles match GDAL's own gdalwarp output of the same window.

Tiles are cut from 4x4 metatiles rendered with an 8-pixel gutter (the demo's
defaults), so the reference is gdalwarp of the tile's metatile window,
cropped to the tile: GDAL picks one overview for the whole window, which at
low zooms in Web Mercator is not the one it picks for a lone tile.
"""
import subprocess

import numpy as np
import pytest

from imaging import decode, read

HALF = 20037508.342789244


META, GUTTER = 4, 8


def gdalwarp(src, bbox, srs, dst, size=(256, 256)):
    subprocess.run(
        ["gdalwarp", "-q", "-overwrite", "-t_srs", srs, "-te", *map(str, bbox), "-ts", *map(str, size),
         "-r", "bilinear", "-dstalpha", "-ovr", "AUTO", str(src), str(dst)],
        check=True, timeout=120,
    )
    return read(dst)


def metatile_reference(src, dst, srs, origin, span, matrix, z, x, y):
    """gdalwarp of the metatile holding tile (x, y), cropped to that tile.
    `origin` is the grid's top-left corner, `span` a tile's size in CRS
    units at this zoom, `matrix` the (columns, rows) at this zoom."""
    x0, y0 = x // META * META, y // META * META
    cols, rows = min(META, matrix[0] - x0), min(META, matrix[1] - y0)
    g = GUTTER * span / 256
    bbox = (origin[0] + x0 * span - g, origin[1] - (y0 + rows) * span - g,
            origin[0] + (x0 + cols) * span + g, origin[1] - y0 * span + g)
    window = gdalwarp(src, bbox, srs, dst, (cols * 256 + 2 * GUTTER, rows * 256 + 2 * GUTTER))
    top, left = GUTTER + (y - y0) * 256, GUTTER + (x - x0) * 256
    return window[:, top:top + 256, left:left + 256]


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
    reference = metatile_reference(demo_data / "shadedrelief-5400.tif", tmp_path / "ref.tif", "EPSG:3857",
                                   (-HALF, HALF), 2 * HALF / 2**z, (2**z, 2**z), z, x, y)
    compare(decode(png), reference)


def test_relief_tile_matches_gdalwarp_in_crs84(tessera, demo_data, tmp_path):
    # WorldCRS84Quad zoom 2, column 5, row 1: lon 45..90, lat 0..45.
    _, _, png = tessera.get("/tiles/relief/WorldCRS84Quad/2/5/1.png")
    reference = metatile_reference(demo_data / "shadedrelief-5400.tif", tmp_path / "ref.tif", "EPSG:4326",
                                   (-180, 90), 45, (8, 4), 2, 5, 1)
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
