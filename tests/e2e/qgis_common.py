"""What the QGIS scripts share (each runs in a process of its own, headless,
with Debian's python3-qgis): starting QGIS, loading a WMS/WMTS layer with
the reason when it is not valid, rendering it, and reading the rendering."""
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from qgis.core import (QgsApplication, QgsCoordinateReferenceSystem, QgsMapRendererSequentialJob,  # noqa: E402
                       QgsMapSettings, QgsNetworkAccessManager, QgsRasterLayer, QgsRectangle)
from qgis.PyQt.QtCore import QSize  # noqa: E402


def start():
    """QGIS, started; network requests wait longer than QGIS's 60 s
    default (a loaded machine)."""
    app = QgsApplication([], False)
    app.initQgis()
    QgsNetworkAccessManager.setTimeout(180_000)
    return app


def load(uri, name):
    """The WMS provider's layer for `uri`, and a report: `valid`, and why
    not (`error`, `provider_error`)."""
    layer = QgsRasterLayer(uri, name, "wms")
    out = {"valid": layer.isValid()}
    if not layer.isValid():
        out["error"] = layer.error().summary()
        provider = layer.dataProvider()
        if provider is not None:
            out["provider_error"] = provider.error().summary()
    return layer, out


def render(layer, crs, extent, size, temporal_range=None):
    """`layer` drawn in `crs` over `extent` (west, south, east, north) at
    `size` (width, height), at `temporal_range` when given."""
    settings = QgsMapSettings()
    settings.setLayers([layer])
    settings.setDestinationCrs(QgsCoordinateReferenceSystem(crs))
    settings.setExtent(QgsRectangle(*extent))
    settings.setOutputSize(QSize(*size))
    if temporal_range is not None:
        settings.setIsTemporal(True)
        settings.setTemporalRange(temporal_range)
    job = QgsMapRendererSequentialJob(settings)
    job.start()
    job.waitForFinished()
    return job.renderedImage()


def samples(image, step):
    """The colours of every `step`-th pixel across and down."""
    return [image.pixelColor(x, y) for x in range(0, image.width(), step) for y in range(0, image.height(), step)]


def mean(colors):
    """The mean red, green and blue of `colors` that are not transparent,
    or None when all are."""
    opaque = [c for c in colors if c.alpha() > 0]
    if not opaque:
        return None
    return [round(sum(getattr(c, k)() for c in opaque) / len(opaque)) for k in ("red", "green", "blue")]
