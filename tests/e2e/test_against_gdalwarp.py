"""Rendered tiles match GDAL's own gdalwarp output of the same tile warped alone.

Tiles are cut from 4x4 metatiles rendered with an 8-pixel gutter (the demo's
defaults), but the reference is the tile alone: a tile must be as sharp as
when it is warped by itself, whatever metatile it was cut from (at low zooms
every metatile's gutter crosses the antimeridian, where GDAL's own choice of
overview goes wrong).
"""
import subprocess

import numpy as np
import pytest

from imaging import decode, read

HALF = 20037508.342789244


def gdalwarp(src, bbox, srs, dst, size=(256, 256)):
    subprocess.run(
        ["gdalwarp", "-q", "-overwrite", "-t_srs", srs, "-te", *map(str, bbox), "-ts", *map(str, size),
         "-r", "bilinear", "-dstalpha", "-ovr", "AUTO", str(src), str(dst)],
        check=True, timeout=120,
    )
    return read(dst)


def tile_reference(src, dst, srs, origin, span, x, y):
    """gdalwarp of tile (x, y) alone. `origin` is the grid's top-left
    corner, `span` a tile's size in CRS units at this zoom."""
    bbox = (origin[0] + x * span, origin[1] - (y + 1) * span, origin[0] + (x + 1) * span, origin[1] - y * span)
    return gdalwarp(src, bbox, srs, dst)


def sample_tiles(columns, rows):
    """Tiles at both antimeridian edges, near the pole and near the equator."""
    tiles = {(0, 0), (columns - 1, rows // 2), (columns // 2, max(rows // 2 - 1, 0)), (columns - 1, rows - 1)}
    return sorted(tiles)


def compare(tile, reference, what="", scale=None, mean=0.5, p99=3):
    ref_rgb = reference[:3].astype(float)
    if scale is not None:
        lo, hi = scale
        ref_rgb = np.clip(np.round((ref_rgb - lo) * 255.0 / (hi - lo)), 0, 255)
    mask = reference[-1] == 255
    if tile.shape[0] == 4:
        mask &= tile[3] == 255
    assert mask.mean() > 0.2, f"{what}: too few valid pixels to compare"
    diff = np.abs(tile[:3].astype(float) - ref_rgb)[:, mask]
    assert diff.mean() < mean, f"{what}: mean difference {diff.mean():.2f}"
    assert np.percentile(diff, 99) < p99, f"{what}: 99th percentile difference {np.percentile(diff, 99):.1f}"


@pytest.mark.parametrize("z", range(0, 9))
def test_relief_tiles_match_the_tile_warped_alone_in_web_mercator(tessera, demo_data, tmp_path, z):
    for x, y in sample_tiles(2**z, 2**z):
        _, _, png = tessera.get(f"/tiles/relief/WebMercatorQuad/{z}/{x}/{y}.png")
        reference = tile_reference(demo_data / "shadedrelief-5400.tif", tmp_path / "ref.tif", "EPSG:3857",
                                   (-HALF, HALF), 2 * HALF / 2**z, x, y)
        compare(decode(png), reference, f"WebMercatorQuad/{z}/{x}/{y}")


@pytest.mark.parametrize("z", range(0, 9))
def test_relief_tiles_match_the_tile_warped_alone_in_crs84(tessera, demo_data, tmp_path, z):
    # WorldCRS84Quad: 2 x 1 tiles of 180 degrees at zoom 0.
    for x, y in sample_tiles(2 ** (z + 1), 2**z):
        _, _, png = tessera.get(f"/tiles/relief/WorldCRS84Quad/{z}/{x}/{y}.png")
        reference = tile_reference(demo_data / "shadedrelief-5400.tif", tmp_path / "ref.tif", "EPSG:4326",
                                   (-180, 90), 180 / 2**z, x, y)
        compare(decode(png), reference, f"WorldCRS84Quad/{z}/{x}/{y}")


def test_landsat_wms_map_matches_gdalwarp_after_the_same_stretch(tessera, demo_data, tmp_path):
    bbox = (288000, 9110000, 298000, 9120000)
    _, _, png = tessera.get(
        "/wms?SERVICE=WMS&REQUEST=GetMap&VERSION=1.1.1&LAYERS=landsat&STYLES=&SRS=EPSG:31985"
        f"&BBOX={','.join(map(str, bbox))}&WIDTH=256&HEIGHT=256&FORMAT=image/png&TRANSPARENT=TRUE")
    reference = gdalwarp(demo_data / "L7_ETMs.tif", bbox, "EPSG:31985", tmp_path / "ref.tif")
    # The layer shows bands 3, 2, 1 stretched from [20, 140] (rounded once
    # more than the reference: a looser bound).
    reference = np.concatenate([reference[[2, 1, 0]], reference[-1:]])
    compare(decode(png), reference, "landsat", scale=(20, 140), mean=2.0, p99=12)
