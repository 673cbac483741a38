"""Decoding images with GDAL (no extra imaging library needed)."""
import uuid

import numpy as np
from osgeo import gdal

gdal.UseExceptions()


def pixels(ds) -> np.ndarray:
    """A dataset's pixels as (bands, rows, cols); a paletted image (a tile
    with at most 256 colours) expanded by GDAL to RGB, or to RGBA when
    its palette has transparency, as its RGB(A) PNG would decode."""
    table = ds.GetRasterBand(1).GetColorTable() if ds.RasterCount == 1 else None
    if table is None:
        return ds.ReadAsArray()
    alpha = any(table.GetColorEntry(i)[3] != 255 for i in range(table.GetCount()))
    expanded = gdal.Translate("", ds, format="MEM", rgbExpand="rgba" if alpha else "rgb")
    return expanded.ReadAsArray()


def decode(data: bytes) -> np.ndarray:
    """Decodes PNG/JPEG/WebP bytes into a (bands, rows, cols) array."""
    path = f"/vsimem/{uuid.uuid4().hex}"
    gdal.FileFromMemBuffer(path, data)
    try:
        return pixels(gdal.Open(path))
    finally:
        gdal.Unlink(path)


def read(path) -> np.ndarray:
    return pixels(gdal.Open(str(path)))
