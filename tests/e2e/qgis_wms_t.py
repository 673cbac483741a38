"""Loads a WMS-T layer in QGIS (headless, Debian's python3-qgis) as QGIS's
own WMS dialog does for a layer with a time dimension, and renders it at
each time asked; prints JSON: whether QGIS sees it as temporal, the range
it finds, and the mean colour of each rendering.

    python3 qgis_wms_t.py WMS_URL LAYER TIME_EXTENT TIME [TIME...]
"""
import json
import os
import sys

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from qgis.core import (QgsApplication, QgsDateTimeRange, QgsMapRendererSequentialJob,  # noqa: E402
                       QgsMapSettings, QgsNetworkAccessManager, QgsRasterLayer, QgsRectangle,
                       QgsCoordinateReferenceSystem)
from qgis.PyQt.QtCore import QDateTime, QSize, Qt  # noqa: E402


def main(url, layer_name, extent, *times):
    app = QgsApplication([], False)
    app.initQgis()
    # What QgsWMSSourceSelect writes for a layer with a time dimension.
    uri = (f"crs=EPSG:4326&format=image/png&layers={layer_name}&styles=&url={url}"
           f"&type=wmst&timeDimensionExtent={extent}&allowTemporalUpdates=true&temporalSource=provider")
    # Explicit, and longer than QGIS's 60 s default: a loaded machine.
    QgsNetworkAccessManager.setTimeout(180_000)
    layer = QgsRasterLayer(uri, layer_name, "wms")
    out = {"valid": layer.isValid()}
    if not layer.isValid():
        # Why, for the test's message.
        out["error"] = layer.error().summary()
        provider = layer.dataProvider()
        if provider is not None:
            out["provider_error"] = provider.error().summary()
    caps = layer.dataProvider().temporalCapabilities() if layer.isValid() else None
    out["temporal"] = bool(caps and caps.hasTemporalCapabilities())
    if caps:
        r = caps.availableTemporalRange()
        out["range"] = [r.begin().toString(Qt.ISODate), r.end().toString(Qt.ISODate)]
        out["renders"] = {}
        for t in times:
            when = QDateTime.fromString(t, Qt.ISODate)
            settings = QgsMapSettings()
            settings.setLayers([layer])
            settings.setDestinationCrs(QgsCoordinateReferenceSystem("EPSG:4326"))
            settings.setExtent(QgsRectangle(-170, -70, 170, 70))
            settings.setOutputSize(QSize(64, 32))
            settings.setIsTemporal(True)
            settings.setTemporalRange(QgsDateTimeRange(when, when))
            job = QgsMapRendererSequentialJob(settings)
            job.start()
            job.waitForFinished()
            image = job.renderedImage()
            colors = [image.pixelColor(x, y) for x in range(0, 64, 4) for y in range(0, 32, 4)]
            colors = [c for c in colors if c.alpha() > 0]
            out["renders"][t] = [round(sum(getattr(c, k)() for c in colors) / max(1, len(colors)))
                                 for k in ("red", "green", "blue")] if colors else None
    print(json.dumps(out))
    app.exitQgis()


if __name__ == "__main__":
    main(*sys.argv[1:])
