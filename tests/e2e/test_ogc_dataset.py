"""The OGC's own WMS test dataset (tests/data/ogc-wms, the layers the WMS
1.1.1 and 1.3.0 test suites query), converted with ogr2ogr and served as
vector layers: the basic and queryable profiles' checks, point by point.
The dataset spans a few hundred metres around (0, 0), holds a layer of one
point (Bridges) and a lake with an island (a hole)."""
import json
import pathlib
import subprocess
import urllib.error
import urllib.request

import numpy as np
import pytest
from lxml import etree

from conftest import ROOT, serving
from imaging import decode

LAYERS = ["Autos", "BasicPolygons", "Bridges", "Forests", "Lakes", "NamedPlaces", "RoadSegments", "Streams"]
WMS111 = "{http://www.opengis.net/wms}"


@pytest.fixture(scope="module")
def cite(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ogc-dataset")
    gpkg = folder / "cite.gpkg"
    for name in LAYERS:
        # The dataset's `fid` is text: the GeoPackage's own key gets another name.
        subprocess.run(["ogr2ogr", "-f", "GPKG", *(["-update"] if gpkg.exists() else []), "-nln", name,
                        "-lco", "FID=gpkg_fid", str(gpkg), str(ROOT / "tests/data/ogc-wms" / f"{name}.mif")],
                       check=True, timeout=120, capture_output=True)
    layers = "".join(f"""
  - name: {name}
    title: {name}
    source: {{ type: vector, path: "{gpkg}", layer: {name},
              style: [{{ fill: "#3366cc", stroke: "#000000", stroke_width: 2 }}] }}
    grids: [WebMercatorQuad, WorldCRS84Quad]
    cache: {{ store: mem }}
""" for name in LAYERS)
    config = folder / "tessera.yaml"
    config.write_text(f"stores: {{ mem: {{ type: memory }} }}\nlayers:{layers}")
    with serving(tmp_path_factory, "--config", str(config)) as server:
        yield server


def get(server, query):
    try:
        with urllib.request.urlopen(f"{server.url}/wms?{query}", timeout=60) as r:
            return r.status, r.headers["Content-Type"], r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read()


def test_every_layer_is_listed_in_epsg_4326_and_subsettable_as_png(cite):
    status, _, body = get(cite, "SERVICE=WMS&REQUEST=GetCapabilities&VERSION=1.1.1")
    assert status == 200
    doc = etree.fromstring(body)
    formats = [f.text for f in doc.findall("Capability/Request/GetMap/Format")]
    assert "image/png" in formats
    listed = {l.findtext("Name"): l for l in doc.iter("Layer") if l.findtext("Name")}
    assert set(LAYERS) <= set(listed)
    for name in LAYERS:
        layer = listed[name]
        srs = [s.text for s in layer.iter("SRS")] + [s.text for s in doc.find("Capability/Layer").findall("SRS")]
        assert "EPSG:4326" in srs, name
        box = layer.find("LatLonBoundingBox")
        minx, miny, maxx, maxy = (float(box.get(k)) for k in ("minx", "miny", "maxx", "maxy"))
        assert minx <= maxx and miny <= maxy, name
        # The whole extent (widened a little: Bridges is one point), then
        # its lower-left quarter: a PNG of the asked size each time.
        pad = max(maxx - minx, maxy - miny, 1e-4) * 0.1
        whole = (minx - pad, miny - pad, maxx + pad, maxy + pad)
        quarter = (whole[0], whole[1], (whole[0] + whole[2]) / 2, (whole[1] + whole[3]) / 2)
        for bbox in (whole, quarter):
            status, ctype, png = get(cite, "SERVICE=WMS&REQUEST=GetMap&VERSION=1.1.1&SRS=EPSG:4326&STYLES="
                                           f"&LAYERS={name}&BBOX={','.join(map(str, bbox))}&WIDTH=120&HEIGHT=100"
                                           "&FORMAT=image/png&TRANSPARENT=TRUE")
            assert (status, ctype) == (200, "image/png"), (name, png[:300])
            assert decode(png).shape[1:] == (100, 120)
        status, _, png = get(cite, "SERVICE=WMS&REQUEST=GetMap&VERSION=1.1.1&SRS=EPSG:4326&STYLES="
                                   f"&LAYERS={name}&BBOX={','.join(map(str, whole))}&WIDTH=120&HEIGHT=100"
                                   "&FORMAT=image/png&TRANSPARENT=TRUE")
        assert (decode(png)[3] > 0).sum() > 0, f"{name}: nothing drawn over its own extent"


def test_feature_info_in_gml_finds_the_lake_and_not_in_its_island(cite):
    # A 1.1.1 map of 200 x 200 pixels over (0, -0.002)..(0.004, 0.002):
    # 0.00002 degrees per pixel.
    common = ("SERVICE=WMS&REQUEST=GetFeatureInfo&VERSION=1.1.1&SRS=EPSG:4326&STYLES=&LAYERS=Lakes"
              "&QUERY_LAYERS=Lakes&BBOX=0,-0.002,0.004,0.002&WIDTH=200&HEIGHT=200"
              "&INFO_FORMAT=application/vnd.ogc.gml")

    def pixel(lon, lat):
        return f"&X={int(lon / 0.00002)}&Y={int((0.002 - lat) / 0.00002)}"

    # Blue Lake, west of its island.
    status, ctype, body = get(cite, common + pixel(0.0012, -0.0012))
    assert (status, ctype) == (200, "application/vnd.ogc.gml"), body
    doc = etree.fromstring(body)
    assert [e.text for e in doc.iter("name")] == ["Blue Lake"]
    assert [e.text for e in doc.iter("fid")] == ["101"]
    # Goose Island, the hole in the lake: nothing.
    status, _, body = get(cite, common + pixel(0.0021, -0.00085))
    assert status == 200
    assert list(etree.fromstring(body).iter("name")) == []


def test_gml_feature_info_validates_against_the_schema_it_names(cite, tmp_path):
    """The WMS queryable suites validate GML feature info: each answer
    names its schema (`xsi:noNamespaceSchemaLocation`), served by tessera
    and importing GML 3.1.1 (read here from the OGC schemas fetched by
    scripts/ogc-schemas, as a validator offline would from a catalogue)."""
    import os
    root = os.environ.get("TESSERA_OGC_SCHEMAS")
    gml = pathlib.Path(root or "", "gml/3.1.1/base/gml.xsd")
    if not gml.is_file():
        pytest.fail("TESSERA_OGC_SCHEMAS does not hold GML 3.1.1; run the tests through scripts/test", pytrace=False)
    query = ("SERVICE=WMS&REQUEST=GetFeatureInfo&VERSION=1.1.1&SRS=EPSG:4326&STYLES=&LAYERS=Lakes,Bridges"
             "&QUERY_LAYERS=Lakes,Bridges&BBOX=0,-0.002,0.004,0.002&WIDTH=200&HEIGHT=200"
             "&INFO_FORMAT=application/vnd.ogc.gml&FEATURE_COUNT=5&X=60&Y=160")
    status, _, body = get(cite, query)
    assert status == 200, body
    doc = etree.fromstring(body)
    location = doc.get("{http://www.w3.org/2001/XMLSchema-instance}noNamespaceSchemaLocation")
    # Layers with features hit are written (the bridge is elsewhere).
    assert location == cite.url + "/wms/schema/feature_info.xsd?LAYERS=Lakes", location
    assert [e.tag for e in doc] == ["Lakes_layer"]
    assert [e.text for e in doc.iter("name")] == ["Blue Lake"], body
    with urllib.request.urlopen(location, timeout=60) as r:
        assert r.headers["Content-Type"].startswith("text/xml")
        xsd_text = r.read().decode()
    # The GML import, read from the local copy of the OGC schemas.
    local = xsd_text.replace("http://schemas.opengis.net/gml/3.1.1/base/gml.xsd", gml.as_uri())
    assert local != xsd_text
    xsd = etree.XMLSchema(etree.fromstring(local.encode(), base_url=str(tmp_path / "fi.xsd")))
    assert xsd.validate(doc), xsd.error_log
    # A layer the schema does not name fails: the schema says something.
    wrong = etree.fromstring(body.replace(b"Lakes_layer", b"Ponds_layer"))
    assert not xsd.validate(wrong)


def test_feature_info_in_1_3_0_json_and_the_single_point_layer(cite):
    # 1.3.0, EPSG:4326 with latitude first: the bridge at (0.0002 E, 0.0007 N).
    query = ("SERVICE=WMS&REQUEST=GetFeatureInfo&VERSION=1.3.0&CRS=EPSG:4326&STYLES=&LAYERS=Bridges"
             "&QUERY_LAYERS=Bridges&BBOX=0,-0.0008,0.0014,0.0012&WIDTH=100&HEIGHT=70&I=50&J=35"
             "&INFO_FORMAT=application/json")
    status, ctype, body = get(cite, query)
    assert (status, ctype) == (200, "application/json"), body
    props = json.loads(body)["features"][0]["properties"]
    assert props["name"] == "Cam Bridge" and props["fid"] == "110"
    # Its map is a dot where the bridge is.
    status, _, png = get(cite, query.replace("GetFeatureInfo", "GetMap").replace(
        "&INFO_FORMAT=application/json", "&FORMAT=image/png&TRANSPARENT=TRUE"))
    alpha = decode(png)[3]
    rows, cols = np.nonzero(alpha)
    assert abs(rows.mean() - 35) < 4 and abs(cols.mean() - 50) < 4, (rows.mean(), cols.mean())
