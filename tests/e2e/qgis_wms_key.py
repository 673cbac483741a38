"""Loads a WMS layer in QGIS (headless, Debian's python3-qgis) from a URL
that carries an API key in its query (`.../wms?key=...`), as a user pastes
it into QGIS's WMS dialog, and renders it; prints JSON: whether the layer
is valid and the share of the rendering that is drawn (not transparent).

    python3 qgis_wms_key.py WMS_URL_WITH_KEY LAYER
"""
import json
import os
import sys

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from qgis.core import (QgsApplication, QgsCoordinateReferenceSystem, QgsMapRendererSequentialJob,  # noqa: E402
                       QgsMapSettings, QgsRasterLayer, QgsRectangle)
from qgis.PyQt.QtCore import QSize  # noqa: E402


def main(url, layer_name):
    app = QgsApplication([], False)
    app.initQgis()
    uri = f"crs=EPSG:4326&format=image/png&layers={layer_name}&styles=&url={url}"
    layer = QgsRasterLayer(uri, layer_name, "wms")
    out = {"valid": layer.isValid(), "drawn": 0.0}
    if layer.isValid():
        settings = QgsMapSettings()
        settings.setLayers([layer])
        settings.setDestinationCrs(QgsCoordinateReferenceSystem("EPSG:4326"))
        settings.setExtent(QgsRectangle(-170, -70, 170, 70))
        settings.setOutputSize(QSize(64, 32))
        job = QgsMapRendererSequentialJob(settings)
        job.start()
        job.waitForFinished()
        image = job.renderedImage()
        colors = [image.pixelColor(x, y) for x in range(0, 64, 4) for y in range(0, 32, 4)]
        out["drawn"] = sum(1 for c in colors if c.alpha() > 0) / len(colors)
    print(json.dumps(out))
    app.exitQgis()


if __name__ == "__main__":
    main(*sys.argv[1:])
