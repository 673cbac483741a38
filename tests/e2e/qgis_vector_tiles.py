"""Loads an XYZ vector tile layer in QGIS (headless) and renders it, and
opens one of its tiles as a vector layer of QGIS's OGR provider; prints
JSON: `valid`, `drawn` (the share of pixels drawn), and the tile layer's `fields` and `features`.

usage: qgis_vector_tiles.py URL_TEMPLATE ZMIN ZMAX TILE_FILE WEST SOUTH EAST NORTH
"""
import json
import sys

from qgis_common import render, start

from qgis.core import QgsVectorLayer, QgsVectorTileLayer  # noqa: E402


def main():
    url, zmin, zmax, tile_file = sys.argv[1:5]
    extent = [float(v) for v in sys.argv[5:9]]
    app = start()
    layer = QgsVectorTileLayer(f"type=xyz&url={url}&zmin={zmin}&zmax={zmax}", "tiles")
    out = {"valid": layer.isValid()}
    tile = QgsVectorLayer(f"{tile_file}|layername=contours", "tile", "ogr")
    out["tile_valid"] = tile.isValid()
    out["fields"] = [f.name() for f in tile.fields()]
    out["features"] = tile.featureCount()
    if layer.isValid():
        image = render(layer, "EPSG:3857", extent, (256, 256))
        drawn = 0
        for j in range(0, 256, 2):
            for i in range(0, 256, 2):
                c = image.pixelColor(i, j)
                if c.alpha() > 0 and (c.red(), c.green(), c.blue()) != (255, 255, 255):
                    drawn += 1
        out["drawn"] = drawn / (128 * 128)
    print(json.dumps(out), flush=True)
    # The layers go before QGIS does (else its exit crashes).
    del layer, tile
    app.exitQgis()


main()
