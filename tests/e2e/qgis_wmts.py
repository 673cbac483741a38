"""Loads a WMTS layer in QGIS (headless, Debian's python3-qgis) as QGIS's
WMS/WMTS dialog writes it, naming the tile matrix set, and renders it over
an extent; prints JSON: whether the layer is valid (and why not) and the
mean colour of the rendering's opaque pixels.

    python3 qgis_wmts.py CAPABILITIES_URL LAYER TILE_MATRIX_SET WEST SOUTH EAST NORTH
"""
import json
import os
import sys

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from qgis.core import (QgsApplication, QgsCoordinateReferenceSystem, QgsMapRendererSequentialJob,  # noqa: E402
                       QgsMapSettings, QgsNetworkAccessManager, QgsRasterLayer, QgsRectangle)
from qgis.PyQt.QtCore import QSize  # noqa: E402


def main(url, layer_name, matrix_set, *extent):
    app = QgsApplication([], False)
    app.initQgis()
    uri = (f"crs=EPSG:3857&dpiMode=7&format=image/png&layers={layer_name}&styles=default"
           f"&tileMatrixSet={matrix_set}&url={url}")
    QgsNetworkAccessManager.setTimeout(180_000)
    layer = QgsRasterLayer(uri, layer_name, "wms")
    out = {"valid": layer.isValid()}
    if not layer.isValid():
        out["error"] = layer.error().summary()
        provider = layer.dataProvider()
        if provider is not None:
            out["provider_error"] = provider.error().summary()
    else:
        settings = QgsMapSettings()
        settings.setLayers([layer])
        settings.setDestinationCrs(QgsCoordinateReferenceSystem("EPSG:3857"))
        settings.setExtent(QgsRectangle(*map(float, extent)))
        settings.setOutputSize(QSize(256, 256))
        job = QgsMapRendererSequentialJob(settings)
        job.start()
        job.waitForFinished()
        image = job.renderedImage()
        colors = [image.pixelColor(x, y) for x in range(0, 256, 8) for y in range(0, 256, 8)]
        colors = [c for c in colors if c.alpha() > 0]
        out["opaque"] = len(colors)
        out["mean"] = [round(sum(getattr(c, k)() for c in colors) / max(1, len(colors)))
                       for k in ("red", "green", "blue")]
    print(json.dumps(out))
    app.exitQgis()


if __name__ == "__main__":
    main(*sys.argv[1:])
