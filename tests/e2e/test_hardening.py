"""Hostile and unlucky input against the real binary: each case here was
once a 5xx, a hang or a panic."""
import urllib.error
import urllib.request


def get(server, path):
    try:
        with urllib.request.urlopen(server.url + path, timeout=60) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


def test_a_vertical_crs_in_getmap_is_a_400_with_the_protocols_exception(tessera):
    base = "/wms?SERVICE=WMS&REQUEST=GetMap&LAYERS=relief&STYLES=&FORMAT=image/png&WIDTH=64&HEIGHT=64"
    status, body = get(tessera, f"{base}&VERSION=1.3.0&CRS=EPSG:5773&BBOX=0,0,10,10")
    assert status == 400 and 'code="InvalidCRS"' in body, body
    status, body = get(tessera, f"{base}&VERSION=1.1.1&SRS=EPSG:5773&BBOX=0,0,10,10")
    assert status == 400 and 'code="InvalidSRS"' in body, body
