"""Conformance to the WMS 1.1.1/1.3.0 and WMTS 1.0.0 standards, point by
point, and every capabilities and exception document tessera writes
validated against the official OGC schemas (scripts/ogc-schemas fetches
them from Maven Central)."""
import os
import pathlib
import re

import pytest
from lxml import etree

from conftest import fetch

WMS_MAP = ("/wms?SERVICE=WMS&REQUEST=GetMap&LAYERS=relief&STYLES=&CRS=EPSG:3857"
           "&BBOX=0,0,1000000,1000000&WIDTH=16&HEIGHT=16&FORMAT=image/png")
WMTS_TILE = ("/wmts?SERVICE=WMTS&REQUEST=GetTile&VERSION=1.0.0&LAYER={layer}&STYLE=default"
             "&TILEMATRIXSET=WebMercatorQuad&TILEMATRIX={z}&TILEROW={row}&TILECOL={col}&FORMAT=image/png")
OWS = "{http://www.opengis.net/ows/1.1}"


@pytest.fixture(scope="module")
def schemas():
    root = os.environ.get("TESSERA_OGC_SCHEMAS")
    if not root or not pathlib.Path(root, "wmts/1.0.0/wmtsGetCapabilities_response.xsd").is_file():
        pytest.fail("TESSERA_OGC_SCHEMAS does not name the OGC schemas; run the tests through scripts/test",
                    pytrace=False)
    return pathlib.Path(root)


def schema(schemas, relative):
    path = schemas / relative
    if relative.startswith("wmts/"):
        # A known defect of the WMTS 1.0.0 schema (reported to the OGC, see
        # GeoWebCache issues 250 and 411): Min/MaxTileRow/Col are typed
        # positiveInteger while the standard (07-057r7, p. 24) counts them
        # "from 0 to maxTileRow"; validate with nonNegativeInteger.
        text = (schemas / "wmts/1.0.0/wmtsGetCapabilities_response.xsd").read_text()
        fixed = re.sub(r'(name="(?:Min|Max)Tile(?:Row|Col)" type=")positiveInteger', r"\1nonNegativeInteger", text)
        assert fixed != text, "the erratum is no longer in the schema: drop this patch"
        patched = schemas / "wmts/1.0.0/wmtsGetCapabilities_response.nonneg.xsd"
        patched.write_text(fixed)
        path = patched
    return etree.XMLSchema(etree.parse(str(path)))


def dtd(schemas, relative):
    """A WMS 1.1.1 DTD (scripts/ogc-schemas puts them under wms/1.1.1/)."""
    path = schemas / relative
    if not path.is_file():
        pytest.fail(f"{path} is missing; run scripts/ogc-schemas", pytrace=False)
    return etree.DTD(str(path))


def assert_valid_dtd(validator, body):
    """`body` is valid by `validator`, read without fetching its DOCTYPE's URL."""
    parser = etree.XMLParser(load_dtd=False, no_network=True, resolve_entities=False)
    doc = etree.fromstring(body, parser)
    if not validator.validate(doc):
        raise AssertionError("\n".join(f"line {e.line}: {e.message}"
                                        for e in list(validator.error_log)[:10]))
    return doc


def assert_valid(xsd, body):
    doc = etree.fromstring(body)
    if not xsd.validate(doc):
        raise AssertionError("\n".join(f"line {e.line}: {e.message}" for e in list(xsd.error_log)[:10]))
    return doc


def test_capabilities_and_exceptions_validate_against_the_official_schemas(tessera, schemas):
    status, body = fetch(tessera, "/wms?SERVICE=WMS&REQUEST=GetCapabilities&VERSION=1.3.0")
    assert status == 200
    assert_valid(schema(schemas, "wms/1.3.0/capabilities_1_3_0.xsd"), body)
    wmts = schema(schemas, "wmts/1.0.0/wmtsGetCapabilities_response.xsd")
    for path in ("/wmts?SERVICE=WMTS&REQUEST=GetCapabilities", "/wmts/1.0.0/WMTSCapabilities.xml"):
        status, body = fetch(tessera, path)
        assert status == 200
        assert_valid(wmts, body)
    status, body = fetch(tessera, "/wms?SERVICE=WMS&REQUEST=GetMap&VERSION=1.3.0")
    assert status == 400
    assert_valid(schema(schemas, "wms/1.3.0/exceptions_1_3_0.xsd"), body)
    ows = schema(schemas, "ows/1.1.0/owsExceptionReport.xsd")
    for path in ("/wmts?SERVICE=WMTS&REQUEST=Nope", "/wmts?SERVICE=WMTS&REQUEST=GetTile&VERSION=1.0.0",
                 WMTS_TILE.format(layer="nope", z=0, row=0, col=0)):
        status, body = fetch(tessera, path)
        assert status in (400, 404)
        assert_valid(ows, body)


def test_wms_getmap_needs_a_version_and_wmtver_is_a_synonym(tessera):
    status, body = fetch(tessera, WMS_MAP)
    assert status == 400 and b'code="MissingParameterValue"' in body and b'locator="VERSION"' in body, body
    status, body = fetch(tessera, WMS_MAP + "&VERSION=1.3.0")
    assert status == 200
    status, body = fetch(tessera, "/wms?SERVICE=WMS&REQUEST=GetCapabilities&WMTVER=1.1.1")
    assert status == 200 and b'<WMT_MS_Capabilities version="1.1.1">' in body
    status, body = fetch(tessera, WMS_MAP.replace("CRS=", "SRS=") + "&WMTVER=1.1.1")
    assert status == 200 and body[:4] == b"\x89PNG"


def test_wms_111_documents_follow_the_111_dtds(tessera, schemas):
    status, body = fetch(tessera, "/wms?SERVICE=WMS&REQUEST=GetCapabilities&VERSION=1.1.1")
    assert b'<!DOCTYPE WMT_MS_Capabilities SYSTEM "http://schemas.opengis.net/wms/1.1.1/WMS_MS_Capabilities.dtd">' in body
    assert_valid_dtd(dtd(schemas, "wms/1.1.1/WMS_MS_Capabilities.dtd"), body)
    status, body = fetch(tessera, "/wms?SERVICE=WMS&REQUEST=GetMap&VERSION=1.1.1")
    assert status == 400
    assert b'<!DOCTYPE ServiceExceptionReport SYSTEM "http://schemas.opengis.net/wms/1.1.1/WMS_exception_1_1_1.dtd">' in body
    assert_valid_dtd(dtd(schemas, "wms/1.1.1/WMS_exception_1_1_1.dtd"), body)
    # The 1.1.1 exception DTD has `code` and no `locator`.
    assert b'code="MissingParameterValue"' in body and b"locator=" not in body, body


def test_every_url_the_wmts_capabilities_list_answers_kvp(tessera):
    # Clients (and the official WMTS suite) send KVP to any ows:Get of an
    # operation, the RESTful base URL included.
    _, body = fetch(tessera, "/wmts?SERVICE=WMTS&REQUEST=GetCapabilities")
    doc = etree.fromstring(body)
    hrefs = {g.get("{http://www.w3.org/1999/xlink}href") for g in doc.findall(f".//{OWS}Get")}
    assert len(hrefs) == 2, hrefs
    paths = [h.removeprefix(tessera.url) for h in hrefs] + ["/wmts/1.0.0/WMTSCapabilities.xml?"]
    tile = WMTS_TILE.format(layer="relief", z=2, row=1, col=1).removeprefix("/wmts?")
    for path in paths:
        sep = "&" if "?" in path else "?"
        status, answer = fetch(tessera, f"{path}{sep}SERVICE=WMTS&REQUEST=GetCapabilities")
        assert status == 200 and b"<Capabilities" in answer, path
        status, answer = fetch(tessera, f"{path}{sep}{tile}")
        assert status == 200 and answer[:4] == b"\x89PNG", path
        status, answer = fetch(tessera, f"{path}{sep}SERVICE=WMTS&REQUEST=GetTile&VERSION=1.0.0")
        assert status == 400 and b'exceptionCode="MissingParameterValue"' in answer, path
    # Without a REQUEST the capabilities file is the capabilities.
    status, answer = fetch(tessera, "/wmts/1.0.0/WMTSCapabilities.xml")
    assert status == 200 and b"<Capabilities" in answer


def test_wmts_missing_parameters_unknown_requests_and_versions(tessera):
    def exception(path):
        status, body = fetch(tessera, path)
        doc = etree.fromstring(body)
        e = doc.find(f"{OWS}Exception")
        return status, e.get("exceptionCode"), e.get("locator")

    assert exception("/wmts?REQUEST=GetCapabilities") == (400, "MissingParameterValue", "SERVICE")
    no_style = WMTS_TILE.format(layer="relief", z=2, row=1, col=1).replace("&STYLE=default", "")
    assert exception(no_style) == (400, "MissingParameterValue", "STYLE")
    assert exception("/wmts?SERVICE=WMTS&REQUEST=GetFeatureInfo")[:2] == (400, "OperationNotSupported")
    # A name WMTS does not define is a bad value (what the official suite expects).
    assert exception("/wmts?SERVICE=WMTS&REQUEST=GetBOGUS") == (400, "InvalidParameterValue", "REQUEST")
    # No locator: OWS 1.1 table 28 gives VersionNegotiationFailed none (the suite checks).
    assert exception("/wmts?SERVICE=WMTS&REQUEST=GetCapabilities&AcceptVersions=2.0.0,1.1.0") == (
        400, "VersionNegotiationFailed", None)
    # An empty Sections names nothing: a missing value.
    assert exception("/wmts?SERVICE=WMTS&REQUEST=GetCapabilities&Sections=") == (
        400, "MissingParameterValue", "Sections")
    status, body = fetch(tessera, "/wmts?SERVICE=WMTS&REQUEST=GetCapabilities&AcceptVersions=2.0.0,1.0.0")
    assert status == 200


def test_wmts_sections_service_provider_and_the_google_maps_scale_set(tessera, schemas):
    status, body = fetch(tessera, "/wmts?SERVICE=WMTS&REQUEST=GetCapabilities&Sections=ServiceProvider,Contents")
    assert status == 200
    doc = assert_valid(schema(schemas, "wmts/1.0.0/wmtsGetCapabilities_response.xsd"), body)
    assert doc.find(f"{OWS}ServiceProvider/{OWS}ProviderName") is not None
    assert doc.find(f"{OWS}ServiceIdentification") is None and doc.find(f"{OWS}OperationsMetadata") is None
    assert doc.find("{http://www.opengis.net/wmts/1.0}Contents") is not None
    # ServiceMetadataURL only with All or no Sections (the suite counts it as a section).
    assert doc.find("{http://www.opengis.net/wmts/1.0}ServiceMetadataURL") is None
    for whole in ("", "&Sections=All"):
        _, body = fetch(tessera, f"/wmts?SERVICE=WMTS&REQUEST=GetCapabilities{whole}")
        assert etree.fromstring(body).find("{http://www.opengis.net/wmts/1.0}ServiceMetadataURL") is not None
    status, _ = fetch(tessera, "/wmts?SERVICE=WMTS&REQUEST=GetCapabilities&Sections=Everything")
    assert status == 400
    # Section names in any case.
    status, body = fetch(tessera, "/wmts?SERVICE=WMTS&REQUEST=GetCapabilities&Sections=all")
    assert status == 200 and etree.fromstring(body).find(f"{OWS}ServiceIdentification") is not None
    status, body = fetch(tessera, "/wmts?SERVICE=WMTS&REQUEST=GetCapabilities&Sections=contents")
    assert status == 200 and etree.fromstring(body).find(f"{OWS}ServiceIdentification") is None
    _, body = fetch(tessera, "/wmts?SERVICE=WMTS&REQUEST=GetCapabilities")
    doc = etree.fromstring(body)
    wmts = "{http://www.opengis.net/wmts/1.0}"
    merc = [s for s in doc.iter(f"{wmts}TileMatrixSet")
            if s.findtext(f"{OWS}Identifier", "").startswith("WebMercatorQuad")][0]
    # The CRS exactly as annex E.4 of WMTS 1.0.0 writes it for this scale set.
    assert merc.findtext(f"{OWS}SupportedCRS") == "urn:ogc:def:crs:EPSG:6.18:3:3857"
    assert merc.findtext(f"{wmts}WellKnownScaleSet") == "urn:ogc:def:wkss:OGC:1.0:GoogleMapsCompatible"
    # WorldCRS84Quad starts one level below WMTS 1.0's GoogleCRS84Quad (annex
    # E.3, 559082264 at level 0): its sets declare no well-known scale set.
    crs84 = [s for s in doc.iter(f"{wmts}TileMatrixSet")
             if s.findtext(f"{OWS}Identifier", "").startswith("WorldCRS84Quad")]
    assert crs84 and all(s.find(f"{wmts}WellKnownScaleSet") is None for s in crs84)
    # GoogleMapsCompatible (WMTS 1.0.0, annex E.4): 559082264.0287178 halved per level.
    for m in merc.iter(f"{wmts}TileMatrix"):
        z = int(m.findtext(f"{OWS}Identifier"))
        expected = 559082264.0287178 / 2 ** z
        assert abs(float(m.findtext(f"{wmts}ScaleDenominator")) - expected) < expected * 1e-9, z


def test_wmts_layers_link_only_the_tile_matrices_they_serve(tessera):
    # One TileMatrixLimits per TileMatrix of the linked set (07-057r7,
    # table 8): a layer serving fewer zooms than its grid links a set of
    # those zooms, whose tiles are the grid's.
    wmts = "{http://www.opengis.net/wmts/1.0}"
    _, body = fetch(tessera, "/wmts?SERVICE=WMTS&REQUEST=GetCapabilities")
    doc = etree.fromstring(body)
    sets = {s.findtext(f"{OWS}Identifier"): [m.findtext(f"{OWS}Identifier") for m in s.iter(f"{wmts}TileMatrix")]
            for s in doc.find(f"{wmts}Contents").findall(f"{wmts}TileMatrixSet")}
    links = {}
    for layer in doc.iter(f"{wmts}Layer"):
        for link in layer.findall(f"{wmts}TileMatrixSetLink"):
            set_id = link.findtext(f"{wmts}TileMatrixSet")
            limited = [m.findtext(f"{wmts}TileMatrix") for m in link.iter(f"{wmts}TileMatrixLimits")]
            assert limited == sets[set_id], (layer.findtext(f"{OWS}Identifier"), set_id)
            links[(layer.findtext(f"{OWS}Identifier"), set_id.split(":")[0])] = set_id
    assert links[("elevation", "WebMercatorQuad")] == "WebMercatorQuad:0-14"
    assert sets["WebMercatorQuad:0-14"] == [str(z) for z in range(15)]
    # Luxembourg at zoom 5, by the set's identifier and by the grid's.
    for set_id in ["WebMercatorQuad:0-14", "WebMercatorQuad"]:
        tile = WMTS_TILE.format(layer="elevation", z=5, row=10, col=16).replace("=WebMercatorQuad&", f"={set_id}&")
        status, body = fetch(tessera, tile)
        assert status == 200 and body[:4] == b"\x89PNG", (set_id, body[:200])
        status, body = fetch(tessera, f"/wmts/1.0.0/elevation/default/{set_id}/5/10/16.png")
        assert status == 200 and body[:4] == b"\x89PNG", (set_id, body[:200])


def test_wmts_tiles_outside_the_layers_limits_are_tile_out_of_range(tessera):
    # The Luxembourg DEM covers one tile at zoom 5; (0, 0) is far from it.
    status, body = fetch(tessera, WMTS_TILE.format(layer="elevation", z=5, row=0, col=0))
    assert status == 400 and b'exceptionCode="TileOutOfRange"' in body, body
    # The locator names the parameter out of range.
    status, body = fetch(tessera, WMTS_TILE.format(layer="elevation", z=5, row=10, col=0))
    assert status == 400 and b'locator="TILECOL"' in body, body
    status, body = fetch(tessera, WMTS_TILE.format(layer="elevation", z=5, row=0, col=16))
    assert status == 400 and b'locator="TILEROW"' in body, body
    status, body = fetch(tessera, "/wmts/1.0.0/elevation/default/WebMercatorQuad/5/0/0.png")
    assert status == 400 and b"TileOutOfRange" in body
    # Luxembourg (6.1E, 49.6N) at zoom 5 is column 16, row 10.
    status, body = fetch(tessera, WMTS_TILE.format(layer="elevation", z=5, row=10, col=16))
    assert status == 200


def test_service_metadata_from_the_config_is_in_every_capabilities_document(tmp_path_factory, schemas):
    from conftest import ROOT, serving
    config = tmp_path_factory.mktemp("service") / "tessera.yaml"
    config.write_text(f"""
server: {{ title: Relief & Co }}
service:
  abstract: Shaded relief <for> everyone
  keywords: [relief, "Natural Earth"]
  fees: none
  access_constraints: public domain
  contact: {{ person: Ada Lovelace, organization: Tessera Maps, position: cartographer,
             email: maps@example.org, phone: "+1 555 0100", site: "https://maps.example.org/" }}
layers:
  - name: relief
    source: {{ path: {ROOT}/data/shadedrelief-5400.tif }}
    description: Natural Earth shaded relief
    keywords: [hillshade, "raster & relief"]
    metadata_url: {{ url: "https://maps.example.org/relief.xml" }}
""")
    with serving(tmp_path_factory, "--config", str(config)) as server:
        _, body = fetch(server, "/wms?SERVICE=WMS&REQUEST=GetCapabilities&VERSION=1.3.0")
        doc = assert_valid(schema(schemas, "wms/1.3.0/capabilities_1_3_0.xsd"), body)
        wms = "{http://www.opengis.net/wms}"
        service = doc.find(f"{wms}Service")
        assert service.findtext(f"{wms}Abstract") == "Shaded relief <for> everyone"
        assert [k.text for k in service.iter(f"{wms}Keyword")] == ["relief", "Natural Earth"]
        contact = service.find(f"{wms}ContactInformation")
        assert contact.findtext(f"{wms}ContactPersonPrimary/{wms}ContactOrganization") == "Tessera Maps"
        assert contact.findtext(f"{wms}ContactElectronicMailAddress") == "maps@example.org"
        assert service.findtext(f"{wms}Fees") == "none"
        assert service.findtext(f"{wms}AccessConstraints") == "public domain"
        url = doc.find(f".//{wms}Layer/{wms}MetadataURL")
        assert url.get("type") == "ISO19115:2003" and url.findtext(f"{wms}Format") == "text/xml"
        relief = doc.find(f".//{wms}Layer/{wms}Layer")
        assert relief.findtext(f"{wms}Name") == "relief"
        assert [k.text for k in relief.iter(f"{wms}Keyword")] == ["hillshade", "raster & relief"]
        _, body = fetch(server, "/wms?SERVICE=WMS&REQUEST=GetCapabilities&VERSION=1.1.1")
        assert b"<Keyword>Natural Earth</Keyword>" in body and b"<ContactPerson>Ada Lovelace</ContactPerson>" in body
        # 1.1.1 names ISO 19115 `TC211` (its DTD allows TC211 and FGDC only).
        assert b'<MetadataURL type="TC211">' in body
        assert b"<Keyword>raster &amp; relief</Keyword>" in body
        assert_valid_dtd(dtd(schemas, "wms/1.1.1/WMS_MS_Capabilities.dtd"), body)
        _, body = fetch(server, "/wmts?SERVICE=WMTS&REQUEST=GetCapabilities")
        doc = assert_valid(schema(schemas, "wmts/1.0.0/wmtsGetCapabilities_response.xsd"), body)
        assert doc.findtext(f"{OWS}ServiceIdentification/{OWS}Abstract") == "Shaded relief <for> everyone"
        assert doc.findtext(f"{OWS}ServiceIdentification/{OWS}AccessConstraints") == "public domain"
        layer = doc.find("{http://www.opengis.net/wmts/1.0}Contents/{http://www.opengis.net/wmts/1.0}Layer")
        assert layer.findtext(f"{OWS}Abstract") == "Natural Earth shaded relief"
        assert [k.text for k in layer.iter(f"{OWS}Keyword")] == ["hillshade", "raster & relief"]
        provider = doc.find(f"{OWS}ServiceProvider")
        assert provider.findtext(f"{OWS}ProviderName") == "Tessera Maps"
        assert provider.findtext(f"{OWS}ServiceContact/{OWS}IndividualName") == "Ada Lovelace"
        assert provider.findtext(f".//{OWS}ElectronicMailAddress") == "maps@example.org"


def test_wms_details_the_official_suites_check(tessera):
    import http.client
    import urllib.parse
    wms = "{http://www.opengis.net/wms}"
    _, body = fetch(tessera, "/wms?SERVICE=WMS&REQUEST=GetCapabilities&VERSION=1.3.0")
    doc = etree.fromstring(body)
    # The mixed JPEG/PNG format is for tiles: a map is one media type.
    formats = [f.text for f in doc.findall(f"{wms}Capability/{wms}Request/{wms}GetMap/{wms}Format")]
    assert "image/png" in formats and "image/vnd.jpeg-png" not in formats
    status, body = fetch(tessera, WMS_MAP.replace("image/png", "image/vnd.jpeg-png") + "&VERSION=1.3.0")
    assert status == 400 and b'code="InvalidFormat"' in body, body
    info = [f.text for f in doc.findall(f"{wms}Capability/{wms}Request/{wms}GetFeatureInfo/{wms}Format")]
    assert "application/vnd.ogc.gml" in info
    # Service keywords and contact (a telephone: the WMS 1.3 suite knows
    # contact information by address or telephone); each demo layer with
    # an abstract, keywords and a DataURL: web pages are no MetadataURL of
    # type ISO19115:2003, which names a metadata record.
    assert doc.findall(f"{wms}Service/{wms}KeywordList/{wms}Keyword")
    assert doc.findtext(f"{wms}Service/{wms}ContactInformation/{wms}ContactElectronicMailAddress")
    assert doc.findtext(f"{wms}Service/{wms}ContactInformation/{wms}ContactVoiceTelephone")
    layers = doc.findall(f".//{wms}Layer[{wms}Name]")
    assert {l.findtext(f"{wms}Name") for l in layers} >= {"relief", "elevation", "landsat"}
    for layer in layers:
        name = layer.findtext(f"{wms}Name")
        assert layer.findtext(f"{wms}Abstract"), name
        assert layer.findall(f"{wms}KeywordList/{wms}Keyword"), name
        assert layer.find(f"{wms}MetadataURL") is None, name
        assert layer.findtext(f"{wms}DataURL/{wms}Format") == "text/html", name
        assert layer.find(f"{wms}DataURL/{wms}OnlineResource") is not None, name
        # The legend's URL asks for VERSION and answers a PNG.
        legend = layer.find(f"{wms}Style/{wms}LegendURL/{wms}OnlineResource")
        if legend is not None:
            href = legend.get("{http://www.w3.org/1999/xlink}href")
            assert "&VERSION=1.3.0&" in href and "SION=1.3.0" not in href.replace("VERSION", ""), href
            status, png = fetch(tessera, href.removeprefix(tessera.url))
            assert status == 200 and png[:4] == b"\x89PNG", (name, png[:200])
    # Header names in title case on the wire, the cached tile's short way
    # included (the WMS 1.1.1 suite compares `Content-Type` as text).
    host = urllib.parse.urlsplit(tessera.url)
    for path in [WMS_MAP + "&VERSION=1.3.0", "/tiles/relief/WebMercatorQuad/1/0/0.png",
                 "/tiles/relief/WebMercatorQuad/1/0/0.png"]:
        conn = http.client.HTTPConnection(host.hostname, host.port, timeout=60)
        conn.request("GET", path)
        response = conn.getresponse()
        names = [name for name, _ in response.getheaders()]
        response.read()
        conn.close()
        assert response.status == 200
        assert "Content-Type" in names and "content-type" not in names, names
