"""A headless Chromium (driven through Debian's chromedriver) loads the
preview page and shows map tiles."""
import numpy as np
from selenium.webdriver.support.ui import WebDriverWait

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
