"""OWSLib, the usual Python OGC client, parses both capabilities documents
and fetches a map and a tile."""
from owslib.wms import WebMapService
from owslib.wmts import WebMapTileService

from conftest import qgis_wmts
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
    # relief serves zooms 0-8: it links sets of those zooms, and each
    # grid's whole set (wmts.link_full_grid), every level of it drawn.
    links = set(wmts.contents["relief"].tilematrixsetlinks)
    assert links == {"WebMercatorQuad:0-8", "WorldCRS84Quad:0-8", "WebMercatorQuad", "WorldCRS84Quad"}, links
    assert len(wmts.tilematrixsets["WebMercatorQuad:0-8"].tilematrix) == 9
    tile = wmts.gettile(layer="relief", tilematrixset="WorldCRS84Quad:0-8", tilematrix="1",
                        row=0, column=1, format="image/png")
    pixels = decode(tile.read())
    assert pixels.shape[1:] == (256, 256)
    _, _, direct = tessera.get("/tiles/relief/WorldCRS84Quad/1/1/0.png")
    assert (decode(direct) == pixels).all()


def test_owslib_and_qgis_name_the_grids_whole_set_on_every_demo_layer(tessera):
    """Projects and tutorials name `tileMatrixSet=WebMercatorQuad`: every
    demo layer links it (beside the set of its own zooms), with one
    TileMatrixLimits per level, and a tile past the layer's own zooms is
    drawn, not refused."""
    wmts = WebMapTileService(f"{tessera.url}/wmts/1.0.0/WMTSCapabilities.xml")
    full = wmts.tilematrixsets["WebMercatorQuad"]
    for name in LAYERS:
        links = wmts.contents[name].tilematrixsetlinks
        assert "WebMercatorQuad" in links, (name, set(links))
        assert len(links["WebMercatorQuad"].tilematrixlimits) == len(full.tilematrix), name
    # elevation serves zooms 0-14 of its own; zoom 16 of the whole set is drawn.
    limits = wmts.contents["elevation"].tilematrixsetlinks["WebMercatorQuad"].tilematrixlimits["16"]
    tile = wmts.gettile(layer="elevation", tilematrixset="WebMercatorQuad", tilematrix="16",
                        row=(limits.mintilerow + limits.maxtilerow) // 2,
                        column=(limits.mintilecol + limits.maxtilecol) // 2, format="image/png")
    pixels = decode(tile.read())
    assert pixels.shape[1:] == (256, 256) and pixels[:3].std() > 0
    # Luxembourg, in Web Mercator metres, a few kilometres across: past zoom 14.
    found = qgis_wmts(f"{tessera.url}/wmts/1.0.0/WMTSCapabilities.xml", "elevation", "WebMercatorQuad",
                      (680000, 6400000, 682000, 6402000))
    assert found["valid"], found
    assert found["opaque"] > 500, found


def test_without_link_full_grid_a_layer_links_its_own_zooms_only(tmp_path, tmp_path_factory):
    from conftest import ROOT, fetch, serving
    config = tmp_path / "own.yaml"
    config.write_text(f"""
wmts: {{ link_full_grid: false }}
layers:
  - name: relief
    source: {{ path: {ROOT}/data/shadedrelief-5400.tif }}
    grids: [WebMercatorQuad]
    max_zoom: 4
""")
    with serving(tmp_path_factory, "--config", config) as server:
        wmts = WebMapTileService(f"{server.url}/wmts/1.0.0/WMTSCapabilities.xml")
        assert set(wmts.contents["relief"].tilematrixsetlinks) == {"WebMercatorQuad:0-4"}
        status, body = fetch(server, "/wmts?SERVICE=WMTS&REQUEST=GetTile&VERSION=1.0.0&LAYER=relief&STYLE=default"
                                     "&TILEMATRIXSET=WebMercatorQuad&TILEMATRIX=6&TILEROW=20&TILECOL=30"
                                     "&FORMAT=image/png")
        assert status == 400 and b"TileOutOfRange" in body, body
