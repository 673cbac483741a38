"""Loads a WMS-T layer in QGIS (headless, Debian's python3-qgis) as QGIS's
own WMS dialog does for a layer with a time dimension, and renders it at
each time asked; prints JSON: whether QGIS sees it as temporal, the range
it finds, and the mean colour of each rendering.

    python3 qgis_wms_t.py WMS_URL LAYER TIME_EXTENT TIME [TIME...]
"""
import json
import sys

import qgis_common
from qgis.core import QgsDateTimeRange
from qgis.PyQt.QtCore import QDateTime, Qt


def main(url, layer_name, extent, *times):
    app = qgis_common.start()
    # What QgsWMSSourceSelect writes for a layer with a time dimension.
    uri = (f"crs=EPSG:4326&format=image/png&layers={layer_name}&styles=&url={url}"
           f"&type=wmst&timeDimensionExtent={extent}&allowTemporalUpdates=true&temporalSource=provider")
    layer, out = qgis_common.load(uri, layer_name)
    caps = layer.dataProvider().temporalCapabilities() if layer.isValid() else None
    out["temporal"] = bool(caps and caps.hasTemporalCapabilities())
    if caps:
        r = caps.availableTemporalRange()
        out["range"] = [r.begin().toString(Qt.ISODate), r.end().toString(Qt.ISODate)]
        out["renders"] = {}
        for t in times:
            when = QDateTime.fromString(t, Qt.ISODate)
            image = qgis_common.render(layer, "EPSG:4326", (-170, -70, 170, 70), (64, 32),
                                       temporal_range=QgsDateTimeRange(when, when))
            out["renders"][t] = qgis_common.mean(qgis_common.samples(image, 4))
    print(json.dumps(out))
    app.exitQgis()


if __name__ == "__main__":
    main(*sys.argv[1:])
