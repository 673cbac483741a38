"""A headless Chromium (driven through Debian's chromedriver) loads the
preview page and shows map tiles."""
import json
import os
import re
import subprocess

import numpy as np
import pytest
from selenium.webdriver.support.ui import WebDriverWait

from conftest import ROOT, http_get, serving
from imaging import decode

BACKGROUND = np.array([0x20, 0x20, 0x24])  # the viewer's background


def map_area(browser, url):
    """Loads `url`, waits until every visible tile has loaded, and returns the map's pixels."""
    browser.get(url)
    WebDriverWait(browser, 60).until(lambda d: d.execute_script(
        "const t = document.querySelectorAll('img.tile');"
        "return t.length > 0 && [...t].every(i => i.complete && i.dataset.loaded === '1');"))
    element = browser.find_element("id", "map")
    pixels = decode(element.screenshot_as_png)
    return pixels[:3].astype(int)


def test_the_preview_page_shows_map_tiles_not_a_blank_page(tessera, browser):
    rgb = map_area(browser, f"{tessera.url}/preview/relief")
    # Kept for a look (the README's picture is a copy of one).
    shots = ROOT / "target" / "book-screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(shots / "preview.png"))
    differs = np.abs(rgb - BACKGROUND[:, None, None]).sum(axis=0) > 30
    # The layer is fitted to the view and centred: the middle is all map.
    h, w = differs.shape
    centre = differs[h // 2 - 100:h // 2 + 100, w // 2 - 100:w // 2 + 100]
    assert centre.mean() > 0.95, f"only {centre.mean():.0%} of the centre shows tiles"
    assert differs.mean() > 0.15, f"only {differs.mean():.0%} of the map area shows tiles"
    assert rgb.reshape(3, -1).std(axis=1).min() > 10, "the map area is a flat color"


def test_the_preview_page_of_a_small_layer_fits_its_extent(tessera, browser):
    rgb = map_area(browser, f"{tessera.url}/preview/elevation")
    differs = np.abs(rgb - BACKGROUND[:, None, None]).sum(axis=0) > 30
    # Luxembourg is in the middle of the view, with background around it.
    h, w = differs.shape
    assert differs[h // 2 - 20:h // 2 + 20, w // 2 - 20:w // 2 + 20].mean() > 0.95
    assert 0.05 < differs.mean() < 0.95, f"{differs.mean():.0%}"


def test_the_preview_zooms_in_on_a_button_press(tessera, browser):
    map_area(browser, f"{tessera.url}/preview/landsat")
    before = browser.find_element("id", "status").text
    browser.find_element("id", "zoom-in").click()
    WebDriverWait(browser, 30).until(lambda d: d.find_element("id", "status").text != before)
    assert "zoom" in browser.find_element("id", "status").text
    rgb = map_area(browser, browser.current_url)
    assert rgb.std() > 5


def test_the_preview_shows_its_centre_in_lon_lat_under_a_toolbar_without_a_gap(tessera, browser):
    map_area(browser, f"{tessera.url}/preview/elevation")
    status = browser.find_element("id", "status").text
    # Luxembourg: about 49.8° N, 6.1° E (not Web Mercator metres).
    m = re.search(r"centre (\d+\.\d+)°N (\d+\.\d+)°E", status)
    assert m and abs(float(m.group(1)) - 49.8) < 0.5 and abs(float(m.group(2)) - 6.1) < 0.5, status
    header, top = browser.execute_script(
        "return [document.querySelector('header').getBoundingClientRect().bottom,"
        " document.getElementById('map').getBoundingClientRect().top]")
    assert header == top, (header, top)


def test_the_index_links_the_ogc_api_and_the_admin_page_when_it_is_on(tessera, tmp_path, tmp_path_factory):
    _, _, index = http_get(tessera, "/")
    assert b'href="/ogcapi"' in index and b'href="/admin"' not in index
    config = tmp_path / "admin.yaml"
    config.write_text(f"admin: {{ token: {'t' * 32} }}\n"
                      f"layers:\n  - name: relief\n    source: {{ path: {ROOT}/data/shadedrelief-5400.tif }}\n")
    with serving(tmp_path_factory, "--config", config) as server:
        _, _, index = http_get(server, "/")
        assert b'href="/ogcapi"' in index and b'href="/admin"' in index


def test_an_ogc_api_collection_page_shows_the_map_and_links_the_preview(tessera, browser):
    _, _, doc = http_get(tessera, "/ogcapi/collections/relief?f=json")
    preview = [l for l in json.loads(doc)["links"] if l["rel"] == "preview"]
    assert [(l["href"].split("://", 1)[1].split("/", 1)[1], l["type"]) for l in preview] == \
        [("preview/relief", "text/html")], preview
    browser.get(f"{tessera.url}/ogcapi/collections/relief?f=html")
    frame = browser.find_element("tag name", "iframe")
    assert frame.get_attribute("src").endswith("/preview/relief")
    browser.switch_to.frame(frame)
    WebDriverWait(browser, 60).until(lambda d: d.execute_script(
        "const t = document.querySelectorAll('img.tile');"
        "return t.length > 0 && [...t].every(i => i.complete && i.dataset.loaded === '1');"))
    browser.switch_to.default_content()


@pytest.fixture
def regional_vectors(tmp_path):
    gpkg = os.environ.get("TESSERA_TEST_GPKG")
    if not gpkg:
        pytest.fail("TESSERA_TEST_GPKG is not set: start scripts/postgis (scripts/test does)", pytrace=False)
    out = tmp_path / "europe.gpkg"
    subprocess.run(["ogr2ogr", "-f", "GPKG", out, gpkg, "-clipsrc", "0", "40", "20", "55", "-nln", "europe"],
                   check=True, timeout=120)
    return out


def test_the_vector_preview_fits_the_layer_once_and_offers_the_servers_own_drawing(
        regional_vectors, tmp_path_factory, browser):
    with serving(tmp_path_factory, os.environ["TESSERA_TEST_GPKG"]) as server:
        # A world layer fills the width once: no copies of the world beside it.
        browser.get(f"{server.url}/preview/countries")
        WebDriverWait(browser, 60).until(lambda d: d.execute_script("return document.body.dataset.idle === '1'"))
        west, east = browser.execute_script(
            "const b = window.tesseraMap.getBounds(); return [b.getWest(), b.getEast()];")
        assert -181 < west < -170 and 170 < east < 181, (west, east)
    with serving(tmp_path_factory, regional_vectors) as server:
        browser.get(f"{server.url}/preview/europe")
        WebDriverWait(browser, 60).until(lambda d: d.execute_script("return document.body.dataset.idle === '1'"))
        bounds, header, top = browser.execute_script(
            "const m = window.tesseraMap, b = m.getBounds();"
            "return [[b.getWest(), b.getSouth(), b.getEast(), b.getNorth()],"
            " document.querySelector('header').getBoundingClientRect().bottom,"
            " document.getElementById('map').getBoundingClientRect().top];")
        west, south, east, north = bounds
        # The view holds the layer (0..20 E, 40..55 N) and not much more.
        assert west <= 0 and south <= 40 and east >= 20 and north >= 55, bounds
        assert east - west < 60, bounds
        assert header == top
        assert "centre" in browser.find_element("id", "position").text
        link = browser.find_element("link text", "as the server draws it (its style and labels)")
        assert link.get_attribute("href").endswith("/preview/europe?format=png")
        link.click()
        WebDriverWait(browser, 60).until(lambda d: d.execute_script(
            "const t = document.querySelectorAll('img.tile');"
            "return t.length > 0 && [...t].every(i => i.complete && i.dataset.loaded === '1');"))
        assert browser.find_element("link text", "vector tiles (MapLibre)")
