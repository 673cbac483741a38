"""Loads a WMTS layer in QGIS (headless, Debian's python3-qgis) as QGIS's
WMS/WMTS dialog writes it, naming the tile matrix set, and renders it over
an extent; prints JSON: whether the layer is valid (and why not), how many
sampled pixels are drawn and their mean colour; with PICTURE, the rendered
image is also saved there (PNG).

    python3 qgis_wmts.py CAPABILITIES_URL LAYER TILE_MATRIX_SET WEST SOUTH EAST NORTH [PICTURE]
"""
import json
import sys

import qgis_common


def main(url, layer_name, matrix_set, west, south, east, north, picture=None):
    app = qgis_common.start()
    uri = (f"crs=EPSG:3857&dpiMode=7&format=image/png&layers={layer_name}&styles=default"
           f"&tileMatrixSet={matrix_set}&url={url}")
    layer, out = qgis_common.load(uri, layer_name)
    if layer.isValid():
        image = qgis_common.render(layer, "EPSG:3857", map(float, (west, south, east, north)), (256, 256))
        if picture:
            image.save(picture, "PNG")
        colors = qgis_common.samples(image, 8)
        out["opaque"] = sum(1 for c in colors if c.alpha() > 0)
        out["mean"] = qgis_common.mean(colors)
    print(json.dumps(out))
    app.exitQgis()


if __name__ == "__main__":
    main(*sys.argv[1:])
