"""OWSLib, the usual Python OGC client, parses both capabilities documents
and fetches a map and a tile."""
from owslib.wms import WebMapService
from owslib.wmts import WebMapTileService

from imaging import decode

LAYERS = {"relief", "elevation", "landsat"}


def test_owslib_reads_wms_1_3_0_capabilities_and_gets_a_map(tessera):
    wms = WebMapService(f"{tessera.url}/wms", version="1.3.0")
    assert LAYERS <= set(wms.contents)
    assert "EPSG:3857" in wms["relief"].crsOptions
    img = wms.getmap(layers=["relief"], styles=[""], srs="EPSG:3857",
                     bbox=(-20037508, -10000000, 20037508, 10000000), size=(400, 200), format="image/png")
    data = img.read()
    assert data.startswith(b"\x89PNG")
    pixels = decode(data)
    assert pixels.shape[1:] == (200, 400)
    assert pixels.std() > 10


def test_owslib_reads_wms_1_1_1_capabilities_and_gets_a_map(tessera):
    wms = WebMapService(f"{tessera.url}/wms", version="1.1.1")
    assert LAYERS <= set(wms.contents)
    bbox = wms["elevation"].boundingBoxWGS84
    assert abs(bbox[0] - 5.74) < 0.01
    img = wms.getmap(layers=["elevation"], styles=[""], srs="EPSG:4326", bbox=bbox,
                     size=(190, 180), format="image/jpeg")
    pixels = decode(img.read())
    assert pixels.shape == (3, 180, 190)


def test_owslib_reads_wmts_capabilities_and_gets_a_tile(tessera):
    wmts = WebMapTileService(f"{tessera.url}/wmts/1.0.0/WMTSCapabilities.xml")
    assert LAYERS <= set(wmts.contents)
    # relief serves zooms 0-8: it links sets of those zooms only.
    links = set(wmts.contents["relief"].tilematrixsetlinks)
    assert links == {"WebMercatorQuad:0-8", "WorldCRS84Quad:0-8"}, links
    assert len(wmts.tilematrixsets["WebMercatorQuad:0-8"].tilematrix) == 9
    tile = wmts.gettile(layer="relief", tilematrixset="WorldCRS84Quad:0-8", tilematrix="1",
                        row=0, column=1, format="image/png")
    pixels = decode(tile.read())
    assert pixels.shape[1:] == (256, 256)
    _, _, direct = tessera.get("/tiles/relief/WorldCRS84Quad/1/1/0.png")
    assert (decode(direct) == pixels).all()
