"""Loads a WMS layer in QGIS (headless, Debian's python3-qgis) from a URL
that carries an API key in its query (`.../wms?key=...`), as a user pastes
it into QGIS's WMS dialog, and renders it; prints JSON: whether the layer
is valid and the share of the rendering that is drawn (not transparent).

    python3 qgis_wms_key.py WMS_URL_WITH_KEY LAYER
"""
import json
import sys

import qgis_common


def main(url, layer_name):
    app = qgis_common.start()
    uri = f"crs=EPSG:4326&format=image/png&layers={layer_name}&styles=&url={url}"
    layer, out = qgis_common.load(uri, layer_name)
    out["drawn"] = 0.0
    if layer.isValid():
        image = qgis_common.render(layer, "EPSG:4326", (-170, -70, 170, 70), (64, 32))
        colors = qgis_common.samples(image, 4)
        out["drawn"] = sum(1 for c in colors if c.alpha() > 0) / len(colors)
    print(json.dumps(out))
    app.exitQgis()


if __name__ == "__main__":
    main(*sys.argv[1:])
