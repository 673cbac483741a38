"""Decoding images with GDAL (no extra imaging library needed)."""
import uuid

import numpy as np
from osgeo import gdal

gdal.UseExceptions()


def decode(data: bytes) -> np.ndarray:
    """Decodes PNG/JPEG/WebP bytes into a (bands, rows, cols) array."""
    path = f"/vsimem/{uuid.uuid4().hex}"
    gdal.FileFromMemBuffer(path, data)
    try:
        ds = gdal.Open(path)
        return ds.ReadAsArray()
    finally:
        gdal.Unlink(path)


def read(path) -> np.ndarray:
    return gdal.Open(str(path)).ReadAsArray()
