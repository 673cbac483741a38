"""Terrain: elevation tiles (Terrarium, Terrain-RGB) decoded against
gdalwarp's bilinear elevations of the same tile, read by MapLibre GL JS as
3D terrain, exported to archives the reference tools read, and the bad
DEMs and configurations refused or drawn as documented.
"""
import json
import math
import sqlite3
import subprocess
from pathlib import Path
import time

import numpy as np
import pytest

from conftest import http_get, serving
from imaging import decode, read

HALF = 20037508.342789244
# What one step of each encoding is worth in metres.
STEP = {"terrarium": 1 / 256, "terrain-rgb": 0.1}
FORMATS = ["terrarium.png", "terrarium.webp", "terrain-rgb.png", "terrain-rgb.webp"]


def decode_elevations(data, encoding):
    """The elevations, in metres, of a tile's red, green and blue."""
    rgb = decode(data)[:3].astype(np.float64)
    r, g, b = rgb
    if encoding == "terrarium":
        return r * 256 + g + b / 256 - 32768
    return -10000 + (r * 65536 + g * 256 + b) * 0.1


def mercator_bbox(z, x, y):
    span = 2 * HALF / 2**z
    return (-HALF + x * span, HALF - (y + 1) * span, -HALF + (x + 1) * span, HALF - y * span)


def tile_of(lon, lat, z):
    n = 2**z
    x = int((lon + 180) / 360 * n)
    y = int((1 - math.asinh(math.tan(math.radians(lat))) / math.pi) / 2 * n)
    return x, y


def warped_elevations(src, z, x, y, dst, size=256):
    """gdalwarp's bilinear elevations of tile (z, x, y), NaN where the DEM
    has none."""
    subprocess.run(
        ["gdalwarp", "-q", "-overwrite", "-t_srs", "EPSG:3857", "-te", *map(str, mercator_bbox(z, x, y)),
         "-ts", str(size), str(size), "-r", "bilinear", "-ot", "Float32", "-dstnodata", "nan",
         str(src), str(dst)],
        check=True, timeout=120,
    )
    return read(dst).astype(np.float64)


def make_dem(path, values, origin=(5.9, 49.9), pixel=0.01, nodata=-9999):
    """A GeoTIFF DEM in EPSG:4326 of `values` (rows north to south)."""
    asc = path.with_suffix(".asc")
    rows, cols = values.shape
    lines = [f"ncols {cols}", f"nrows {rows}", f"xllcorner {origin[0]}",
             f"yllcorner {origin[1] - rows * pixel}", f"cellsize {pixel}", f"NODATA_value {nodata}"]
    lines += [" ".join(repr(float(v)) for v in row) for row in values]
    asc.write_text("\n".join(lines) + "\n")
    subprocess.run(["gdal_translate", "-q", "-a_srs", "EPSG:4326", "-ot", "Float32", str(asc), str(path)],
                   check=True, timeout=60)
    return path


@pytest.fixture(scope="module")
def dems(tmp_path_factory):
    """A generated DEM with elevations below sea level and a hole of
    nodata (the demo's DEM of Luxembourg is the other)."""
    folder = tmp_path_factory.mktemp("dems")
    rows, cols = 60, 80
    yy, xx = np.mgrid[0:rows, 0:cols]
    values = -120.0 + 90.0 * np.sin(xx / 9.0) * np.cos(yy / 7.0) + 1.7 * xx
    values[20:30, 30:45] = -9999
    low = make_dem(folder / "low.tif", values)
    # The same DEM as most DEM COGs are: Web Mercator, Float32, DEFLATE
    # with the floating-point predictor, tiled, with overviews (its blocks
    # are decoded by tessera, not libtiff).
    warped = folder / "warped.tif"
    subprocess.run(["gdalwarp", "-q", "-t_srs", "EPSG:3857", "-tr", "40", "40", "-r", "cubic",
                    "-dstnodata", "-9999", str(low), str(warped)], check=True, timeout=120)
    mercator = folder / "mercator.tif"
    subprocess.run(["gdal_translate", "-q", "-of", "COG", "-co", "COMPRESS=DEFLATE", "-co", "PREDICTOR=YES",
                    "-co", "BLOCKSIZE=256", str(warped), str(mercator)], check=True, timeout=120)
    return {"low": low, "mercator": mercator}


CONFIG = """
layers:
  - name: elevation
    source: {{ path: {elev} }}
    style: {{ type: hillshade }}
    formats: [png, terrarium.png, terrarium.webp, terrain-rgb.png, terrain-rgb.webp]
    cache: {{ store: none }}
  - name: low
    source: {{ path: {low} }}
    formats: [terrarium.png, terrarium.webp, terrain-rgb.png, terrain-rgb.webp]
    cache: {{ store: none }}
  - name: mercator
    source: {{ path: {mercator} }}
    formats: [terrarium.png, terrarium.webp, terrain-rgb.png, terrain-rgb.webp]
    cache: {{ store: none }}
  - name: cached
    source: {{ path: {elev} }}
    formats: [terrain-rgb.png, terrarium.webp]
    cache: {{ store: files }}
stores:
  files: {{ type: file, path: {store} }}
"""


@pytest.fixture(scope="module")
def terrain(tmp_path_factory, demo_data, dems):
    folder = tmp_path_factory.mktemp("terrain")
    config = folder / "tessera.yaml"
    config.write_text(CONFIG.format(elev=demo_data / "elev.tif", low=dems["low"], mercator=dems["mercator"],
                                  store=folder / "store"))
    with serving(tmp_path_factory, "--config", str(config)) as server:
        yield server


def sample(lon0, lat0, lon1, lat1, z):
    """The tiles at a DEM's centre and two of its corners at zoom `z`."""
    corners = [(lon0 + 0.02, lat1 - 0.02), (f_mid(lon0, lon1), f_mid(lat0, lat1)), (lon1 - 0.02, lat0 + 0.02)]
    return sorted({tile_of(lon, lat, z) for lon, lat in corners})


def f_mid(a, b):
    return (a + b) / 2


DEM_EXTENTS = {"elevation": (5.7417, 49.4417, 6.5333, 50.1917), "low": (5.9, 49.3, 6.7, 49.9)}


@pytest.mark.parametrize("layer", ["elevation", "low"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_decoded_tiles_are_gdalwarps_bilinear_elevations_within_one_step(terrain, demo_data, dems, tmp_path,
                                                                         layer, fmt):
    encoding = fmt.split(".")[0]
    src = demo_data / "elev.tif" if layer == "elevation" else dems["low"]
    compared = 0
    for z in range(8, 13):
        for x, y in sample(*DEM_EXTENTS[layer], z):
            status, ctype, body = terrain.get(f"/tiles/{layer}/WebMercatorQuad/{z}/{x}/{y}.{fmt}")
            assert status == 200 and ctype == ("image/png" if fmt.endswith("png") else "image/webp")
            pixels = decode(body)
            assert pixels.shape[0] == 3, f"{fmt}: elevation tiles are opaque RGB, got {pixels.shape[0]} bands"
            got = decode_elevations(body, encoding)
            want = warped_elevations(src, z, x, y, tmp_path / "ref.tif")
            valid = ~np.isnan(want)
            # Without data the tile is sea level, as the book says.
            assert np.all(np.abs(got[~valid]) <= STEP[encoding] / 2 + 1e-9), f"{fmt} z{z}: nodata is not 0 m"
            if valid.sum() == 0:
                continue
            diff = np.abs(got[valid] - want[valid])
            p99 = np.percentile(diff, 99)
            assert p99 <= STEP[encoding], f"{layer} {fmt} z{z}/{x}/{y}: p99 {p99:.4f} m > one step"
            compared += int(valid.sum())
    assert compared > 100_000, f"only {compared} pixels compared"


def gdal_rasterio_elevations(src, z, x, y, size=256):
    """GDAL's own bilinear read of tile (z, x, y) from `src`, a DEM in Web
    Mercator (its floating-point window, the overview GDAL picks, libtiff
    decoding the blocks): NaN where the pixel under an output pixel's
    centre is nodata."""
    from osgeo import gdal
    ds = gdal.Open(str(src))
    band, gt = ds.GetRasterBand(1), ds.GetGeoTransform()
    west, south, east, north = mercator_bbox(z, x, y)
    window = ((west - gt[0]) / gt[1], (north - gt[3]) / gt[5], (east - west) / gt[1], (north - south) / -gt[5])

    def read_as(alg):
        raw = band.ReadRaster(*window, buf_xsize=size, buf_ysize=size, buf_type=gdal.GDT_Float32, resample_alg=alg)
        return np.frombuffer(raw, dtype=np.float32).reshape(size, size).astype(np.float64)
    values, centres = read_as(gdal.GRIORA_Bilinear), read_as(gdal.GRIORA_NearestNeighbour)
    nodata = band.GetNoDataValue()
    values[(values == nodata) | (centres == nodata)] = np.nan
    return values


def inner_tiles(src, z):
    """The tiles of zoom `z` wholly inside the raster `src`."""
    from osgeo import gdal
    ds = gdal.Open(str(src))
    gt = ds.GetGeoTransform()
    x0, y1 = gt[0], gt[3]
    x1, y0 = x0 + gt[1] * ds.RasterXSize, y1 + gt[5] * ds.RasterYSize
    span = 2 * HALF / 2**z
    cols = range(math.ceil((x0 + HALF) / span), math.floor((x1 + HALF) / span))
    rows = range(math.ceil((HALF - y1) / span), math.floor((HALF - y0) / span))
    return [(x, y) for x in cols for y in rows]


@pytest.mark.parametrize("fmt", ["terrarium.png", "terrain-rgb.webp"])
def test_a_float32_cogs_tiles_are_gdals_own_reads_within_half_a_step(terrain, dems, fmt):
    """The Web Mercator Float32 COG (DEFLATE, floating-point predictor,
    overviews) is decoded by tessera, not libtiff: its tiles are GDAL's
    own resampled reads of the same windows, every pixel, within half an
    encoding step (rounding) and float noise, and valid where GDAL's
    are."""
    opened = [line for line in terrain.log_text().splitlines() if str(dems["mercator"]) in line]
    assert any("its Float32 blocks are decoded by tessera" in line for line in opened), opened
    encoding = fmt.split(".")[0]
    compared = 0
    for z in range(10, 14):
        tiles = inner_tiles(dems["mercator"], z)
        assert tiles, f"no tile of z{z} inside the DEM"
        for x, y in tiles[:: max(1, len(tiles) // 6)]:
            status, _, body = terrain.get(f"/tiles/mercator/WebMercatorQuad/{z}/{x}/{y}.{fmt}")
            assert status == 200
            got = decode_elevations(body, encoding)
            want = gdal_rasterio_elevations(dems["mercator"], z, x, y)
            valid = ~np.isnan(want)
            assert np.all(np.abs(got[~valid]) <= STEP[encoding] / 2 + 1e-9), f"z{z}/{x}/{y}: nodata is not 0 m"
            if not valid.any():
                continue
            worst = np.max(np.abs(got[valid] - want[valid]))
            assert worst <= STEP[encoding] / 2 + 1e-3, f"z{z}/{x}/{y}: {worst:.4f} m from GDAL's read"
            compared += int(valid.sum())
    assert compared > 200_000, f"only {compared} pixels compared"


def test_negative_elevations_survive_both_encodings(terrain, dems, tmp_path):
    z, (x, y) = 10, tile_of(6.2, 49.6, 10)
    want = warped_elevations(dems["low"], z, x, y, tmp_path / "ref.tif")
    assert np.nanmin(want) < -100, "the fixture DEM lost its negative elevations"
    for fmt in ("terrarium.png", "terrain-rgb.png"):
        _, _, body = terrain.get(f"/tiles/low/WebMercatorQuad/{z}/{x}/{y}.{fmt}")
        got = decode_elevations(body, fmt.split(".")[0])
        assert got.min() < -100, f"{fmt}: negative elevations clamped ({got.min():.1f})"


def test_hidpi_elevation_tiles_are_512_pixels(terrain):
    x, y = tile_of(6.1, 49.8, 10)
    for fmt in ("terrarium.png", "terrain-rgb.webp"):
        _, _, body = terrain.get(f"/tiles/elevation/WebMercatorQuad/10/{x}/{y}@2x.{fmt}")
        assert decode(body).shape == (3, 512, 512), fmt


def test_tilejson_names_the_encoding_and_the_style_is_3d(terrain):
    for fmt, encoding in (("terrarium.png", "terrarium"), ("terrain-rgb.webp", "mapbox")):
        _, _, body = terrain.get(f"/tiles/elevation/WebMercatorQuad/tilejson.json?format={fmt}")
        doc = json.loads(body)
        assert doc["encoding"] == encoding and doc["tiles"][0].endswith("." + fmt), doc
    _, _, body = terrain.get("/styles/elevation.json?format=terrain-rgb.png")
    style = json.loads(body)
    dem = style["sources"][style["terrain"]["source"]]
    assert dem["type"] == "raster-dem" and dem["encoding"] == "mapbox"
    assert any(layer["type"] == "hillshade" for layer in style["layers"])
    assert any(layer["type"] == "raster" for layer in style["layers"]), "the layer's pictures under the hillshade"
    status, _, body = http_get(terrain, "/styles/elevation.json?format=png")
    assert status == 400 and b"terrarium.png" in body


def test_elevation_formats_are_not_maps(terrain):
    status, _, body = http_get(terrain, "/wms?SERVICE=WMS&VERSION=1.3.0&REQUEST=GetMap&LAYERS=elevation&STYLES="
                                        "&CRS=EPSG:4326&BBOX=49.5,5.8,50,6.4&WIDTH=64&HEIGHT=64"
                                        "&FORMAT=image/png;encoding=terrarium")
    assert status == 400 and b"FORMAT" in body


def test_cached_elevation_tiles_are_the_same_bytes_from_the_store(terrain):
    x, y = tile_of(6.1, 49.8, 9)
    path = f"/tiles/cached/WebMercatorQuad/9/{x}/{y}.terrain-rgb.png"
    status, _, first = http_get(terrain, path)
    assert status == 200
    # The save runs after the answer: wait for it, with a deadline.
    deadline = time.monotonic() + 30
    while True:
        status, headers, again = http_get(terrain, path)
        if headers["X-Cache"] == "HIT" or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert headers["X-Cache"] == "HIT" and again == first


def bilinear(src, lon, lat):
    """The DEM's elevation at (lon, lat), bilinear between the centres of
    its four nearest pixels (what `gdallocationinfo -r bilinear` gives
    from GDAL 3.10)."""
    from osgeo import gdal
    ds = gdal.Open(str(src))
    gt = ds.GetGeoTransform()
    values = ds.GetRasterBand(1).ReadAsArray().astype(np.float64)
    col = (lon - gt[0]) / gt[1] - 0.5
    row = (lat - gt[3]) / gt[5] - 0.5
    c0, r0 = int(math.floor(col)), int(math.floor(row))
    fc, fr = col - c0, row - r0
    v = values[r0:r0 + 2, c0:c0 + 2]
    w = np.array([[(1 - fc) * (1 - fr), fc * (1 - fr)], [(1 - fc) * fr, fc * fr]])
    # Pixels without data left out, the others' weights renormalised (as
    # the book says tessera does; all four valid, plain bilinear).
    nodata = ds.GetRasterBand(1).GetNoDataValue()
    known = v != nodata if nodata is not None else np.ones_like(v, dtype=bool)
    if not known.any():
        return None
    return float((v * w)[known].sum() / w[known].sum())


# Three points of the demo DEM: a valley, a plateau and a slope.
POINTS = [(6.13, 49.61), (5.95, 49.95), (6.36, 49.78)]


@pytest.mark.parametrize("fmt", ["terrarium.png", "terrain-rgb.webp"])
def test_maplibre_terrain_elevations_are_the_dems(terrain, demo_data, browser, fmt):
    from selenium.webdriver.support.ui import WebDriverWait
    browser.get(f"{terrain.url}/preview/elevation?format={fmt}")
    idle = "return document.body.dataset.idle === '1'"
    WebDriverWait(browser, 120).until(lambda d: d.execute_script(idle))
    assert browser.execute_script("return tesseraMap.getTerrain().source") == "elevation-terrain"
    # MapLibre 4 interpolates between a DEM tile's pixels as if each were
    # at its corner, not its centre: half a pixel off, about 1.2 m on the
    # demo's slopes at zoom 12 (50 m pixels) and 0.1 m at zoom 15.
    for lon, lat in POINTS:
        browser.execute_script(
            f"document.body.dataset.idle = '0'; tesseraMap.jumpTo({{center: [{lon}, {lat}], zoom: 15, pitch: 0}});"
            "tesseraMap.once('idle', () => { document.body.dataset.idle = '1'; });")
        WebDriverWait(browser, 120).until(lambda d: d.execute_script(idle))
        # MapLibre 4 answers relative to the camera's centre elevation
        # (`transform.elevation`): added back, the DEM's.
        got = browser.execute_script(
            f"const h = tesseraMap.queryTerrainElevation([{lon}, {lat}]);"
            "return h === null ? null : h + tesseraMap.transform.elevation;")
        want = bilinear(demo_data / "elev.tif", lon, lat)
        assert got is not None and abs(got - want) < 1.0, f"{fmt} at {lon}, {lat}: MapLibre {got}, DEM {want:.2f}"
    assert browser.find_element("id", "status").text == ""
    # The exaggeration slider scales the terrain MapLibre draws.
    browser.execute_script("const s = document.getElementById('exaggeration'); s.value = '2.5';"
                           "s.dispatchEvent(new Event('input'));")
    assert browser.execute_script("return tesseraMap.getTerrain().exaggeration") == 2.5


# Contour lines: tessera's vector tiles against gdal_contour of the same
# pixels, across tile edges, and in QGIS.

EXTENT = 4096  # MVT units per tile side
CONTOURS = """
layers:
  - name: contours
    source:
      type: contours
      dem: {{ path: {elev} }}
      interval: 10
      major: 50
      smoothing: {smoothing}
      style:
        - {{ stroke: "#8a5a2b", stroke_width: 0.6 }}
        - filter: {{ field: level, eq: 1 }}
          stroke: "#8a5a2b"
          stroke_width: 1.4
          label: {{ text: "{{ele}} m", size: 11 }}
    formats: [mvt, mlt, png]
    cache: {{ store: none }}
  - name: banded
    source:
      type: contours
      dem: {{ path: {elev} }}
      zooms: {{ 9: 50, 12: 20 }}
      units: feet
    formats: [mvt]
    cache: {{ store: none }}
"""


@pytest.fixture(scope="module", params=[0, 1], ids=["traced", "smoothed"])
def contours(request, tmp_path_factory, demo_data):
    folder = tmp_path_factory.mktemp("contours")
    config = folder / "tessera.yaml"
    config.write_text(CONTOURS.format(elev=demo_data / "elev.tif", smoothing=request.param))
    with serving(tmp_path_factory, "--config", str(config)) as server:
        yield server


def mvt_lines(server, layer, z, x, y):
    """{ele: [lines in tile units, y down]} of a vector tile, decoded by
    mapbox-vector-tile (not tessera's code)."""
    import gzip

    import mapbox_vector_tile
    status, _, body = http_get(server, f"/tiles/{layer}/WebMercatorQuad/{z}/{x}/{y}.mvt")
    if status == 204:
        return {}
    assert status == 200, body[:300]
    if body[:2] == b"\x1f\x8b":
        body = gzip.decompress(body)
    tile = mapbox_vector_tile.decode(body, default_options={"y_coord_down": True})
    out = {}
    for feature in tile.get("contours", {"features": []})["features"]:
        geometry = feature["geometry"]
        parts = geometry["coordinates"] if geometry["type"] == "MultiLineString" else [geometry["coordinates"]]
        out.setdefault(feature["properties"]["ele"], []).extend(parts)
    return out


def gdal_contour_lines(src, z, x, y, tmp_path, interval, margin=8):
    """gdal_contour's lines at `interval` over gdalwarp's bilinear
    elevations of tile (z, x, y) and `margin` pixels around it: {ele:
    [lines in tile units]}."""
    from osgeo import ogr
    west, south, east, north = mercator_bbox(z, x, y)
    span = (east - west) / 256
    dem = tmp_path / "window.tif"
    subprocess.run(
        ["gdalwarp", "-q", "-overwrite", "-t_srs", "EPSG:3857",
         "-te", str(west - margin * span), str(south - margin * span), str(east + margin * span),
         str(north + margin * span), "-ts", str(256 + 2 * margin), str(256 + 2 * margin),
         "-r", "bilinear", "-ot", "Float32", str(src), str(dem)], check=True, timeout=120)
    lines = tmp_path / "lines.gpkg"
    lines.unlink(missing_ok=True)
    subprocess.run(["gdal_contour", "-q", "-a", "ele", "-i", str(interval), str(dem), str(lines)],
                   check=True, timeout=120)
    out = {}
    ds = ogr.Open(str(lines))
    for feature in ds.GetLayer(0):
        g = feature.GetGeometryRef()
        parts = [g.GetGeometryRef(i) for i in range(g.GetGeometryCount())] if g.GetGeometryCount() else [g]
        for part in parts:
            pts = [((px - west) / (east - west) * EXTENT, (north - py) / (north - south) * EXTENT)
                   for px, py, *_ in part.GetPoints()]
            out.setdefault(round(feature.GetField("ele"), 6), []).append(pts)
    return out


def hausdorff_inside(a, b, box):
    """The Hausdorff distance between line sets `a` and `b` (tile units)
    over `box`: the farthest any point of either inside `box` lies from
    the other set (whole: a line leaving the box is not cut short)."""
    import numpy as np
    import shapely
    from shapely.geometry import MultiLineString
    def kept(lines, least=0.0):
        # Loops under two pixels across may vanish in the tiles' half-pixel
        # simplification: neither side needs to match them.
        out = []
        for line in lines:
            xs, ys = [p[0] for p in line], [p[1] for p in line]
            if len(line) > 1 and max(max(xs) - min(xs), max(ys) - min(ys)) >= least:
                out.append(line)
        return MultiLineString(out)
    small = 2 * EXTENT / 256

    def farthest(g, other):
        points = shapely.get_coordinates(shapely.segmentize(g, 1.0))
        x0, y0, x1, y1 = box
        inside = points[(points[:, 0] >= x0) & (points[:, 0] <= x1) & (points[:, 1] >= y0) & (points[:, 1] <= y1)]
        if len(inside) == 0:
            return 0.0
        return float(np.max(shapely.distance(shapely.points(inside), other)))
    return max(farthest(kept(a, small), kept(b)), farthest(kept(b, small), kept(a)))


@pytest.mark.parametrize("z", [10, 12])
def test_contour_tiles_are_gdal_contours_lines_within_a_pixel(contours, demo_data, tmp_path, z):
    pixel = EXTENT / 256
    # Away from the edges, where gdal_contour's lines stop and tessera's
    # are clipped: two pixels in.
    inner = (2 * pixel, 2 * pixel, EXTENT - 2 * pixel, EXTENT - 2 * pixel)
    compared = 0
    for x, y in sample(*DEM_EXTENTS["elevation"], z):
        ours = mvt_lines(contours, "contours", z, x, y)
        reference = gdal_contour_lines(demo_data / "elev.tif", z, x, y, tmp_path, 10)
        from shapely.geometry import MultiLineString, box as make_box
        present = {ele for ele, lines in reference.items()
                   if not MultiLineString(lines).intersection(make_box(*inner)).is_empty}
        drawn = {ele for ele, lines in ours.items()
                 if not MultiLineString(lines).intersection(make_box(*inner)).is_empty}
        assert present == drawn, f"z{z}/{x}/{y}: levels differ: {sorted(present ^ drawn)}"
        for ele in present:
            d = hausdorff_inside(ours[ele], reference[ele], inner)
            assert d < pixel, f"z{z}/{x}/{y} level {ele}: Hausdorff {d / pixel:.2f} px"
            compared += 1
    assert compared >= 10, f"only {compared} levels compared"


def edge_crossings(lines, edge, axis):
    """Where `lines` cross the line `axis` = `edge` (tile units): the other
    coordinate of each crossing, sorted."""
    out = []
    for line in lines:
        for p, q in zip(line, line[1:]):
            a, b = p[axis] - edge, q[axis] - edge
            if a == 0 and b == 0:
                continue
            if (a <= 0 < b) or (b <= 0 < a):
                t = a / (a - b)
                out.append(p[1 - axis] + t * (q[1 - axis] - p[1 - axis]))
    return sorted(out)


def test_contour_lines_continue_across_tile_edges(contours):
    z = 12
    x, y = tile_of(6.13, 49.75, z)
    here = mvt_lines(contours, "contours", z, x, y)
    east = mvt_lines(contours, "contours", z, x + 1, y)
    south = mvt_lines(contours, "contours", z, x, y + 1)
    checked = 0
    for other, axis, edge_here, edge_there in ((east, 0, EXTENT, 0), (south, 1, EXTENT, 0)):
        for ele in set(here) | set(other):
            a = edge_crossings(here.get(ele, []), edge_here, axis)
            b = edge_crossings(other.get(ele, []), edge_there, axis)
            assert len(a) == len(b), f"level {ele}: {len(a)} lines leave the tile, {len(b)} enter the next"
            for p, q in zip(a, b):
                assert abs(p - q) <= 1e-6 * EXTENT, f"level {ele}: crossings at {p} and {q}"
            checked += len(a)
    assert checked >= 10, f"only {checked} crossings compared"


def test_contour_zoom_ranges_units_and_attributes(contours):
    x, y = tile_of(6.13, 49.75, 8)
    status, _, _ = http_get(contours, f"/tiles/banded/WebMercatorQuad/8/{x}/{y}.mvt")
    assert status == 204, "below the lowest zoom of `zooms`: no lines"
    x, y = tile_of(6.13, 49.75, 10)
    tens = mvt_lines(contours, "banded", 10, x, y)
    assert tens and all(ele % 50 == 0 for ele in tens), sorted(tens)
    # In feet: the demo's 141-547 m are 463-1795 ft, levels no metre
    # elevation of it reaches.
    assert 560 < max(tens) <= 1795 and min(tens) >= 450, sorted(tens)
    x, y = tile_of(6.13, 49.75, 12)
    twenties = mvt_lines(contours, "banded", 12, x, y)
    assert any(ele % 50 for ele in twenties) and all(ele % 20 == 0 for ele in twenties)
    _, _, body = contours.get("/tiles/contours/WebMercatorQuad/tilejson.json?format=mvt")
    layers = json.loads(body)["vector_layers"]
    assert layers[0]["id"] == "contours" and set(layers[0]["fields"]) == {"ele", "level"}
    status, headers, body = http_get(contours, f"/tiles/contours/WebMercatorQuad/12/{x}/{y}.mlt")
    assert status == 200 and headers["Content-Type"] == "application/vnd.maplibre-tile" and len(body) > 100


def test_contour_pngs_draw_lines_and_labels(contours):
    x, y = tile_of(6.13, 49.75, 12)
    _, ctype, body = contours.get(f"/tiles/contours/WebMercatorQuad/12/{x}/{y}.png")
    pixels = decode(body)
    drawn = pixels[3] > 0
    assert 0.01 < drawn.mean() < 0.5, f"{drawn.mean():.3f} of the tile drawn"


def test_qgis_reads_the_contour_tiles(contours, tmp_path):
    import gzip
    import os
    import sys
    z = 12
    x, y = tile_of(6.13, 49.75, z)
    status, _, body = http_get(contours, f"/tiles/contours/WebMercatorQuad/{z}/{x}/{y}.mvt")
    assert status == 200
    tile = tmp_path / "tile.mvt"
    tile.write_bytes(gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body)
    west, south, east, north = mercator_bbox(z, x, y)
    url = f"{contours.url}/tiles/contours/WebMercatorQuad/{{z}}/{{x}}/{{y}}.mvt"
    run = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("qgis_vector_tiles.py")), url, "9", "14",
         str(tile), str(west), str(south), str(east), str(north)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert run.returncode == 0, run.stderr[-2000:]
    found = json.loads(run.stdout.strip().splitlines()[-1])
    assert found["valid"] and found["drawn"] > 0.005, found
    assert found["tile_valid"] and {"ele", "level"} <= set(found["fields"]) and found["features"] > 5, found


# Elevation at a point and along a line.

def test_elevation_at_points_is_the_dems_bilinear(terrain, demo_data):
    # Three inside, two next to the DEM's nodata (outside Luxembourg).
    assert bilinear(demo_data / "elev.tif", 6.3046, 49.8569) is not None
    for lon, lat in POINTS + [(6.3046, 49.8569), (6.4046, 49.7069)]:
        _, _, body = terrain.get(f"/elevation/elevation?lon={lon}&lat={lat}")
        got = json.loads(body)["elevation"]
        want = bilinear(demo_data / "elev.tif", lon, lat)
        assert abs(got - want) < 1e-3, f"{lon}, {lat}: {got} != {want}"
    # Outside the DEM, and in its hole of nodata: null.
    _, _, body = terrain.get("/elevation/elevation?lon=0&lat=0")
    assert json.loads(body)["elevation"] is None
    _, _, body = terrain.get("/elevation/low?lon=6.27&lat=49.65")
    assert json.loads(body)["elevation"] is None


def post_json(server, path, doc):
    import urllib.error
    import urllib.request
    request = urllib.request.Request(server.url + path, data=json.dumps(doc).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_profiles_sample_the_line_evenly(terrain, demo_data):
    line = {"type": "LineString", "coordinates": [[5.9, 49.6], [6.2, 49.7], [6.4, 50.0]]}
    status, doc = post_json(terrain, "/elevation/elevation?samples=50", line)
    assert status == 200, doc
    samples = doc["samples"]
    assert len(samples) == 50 and samples[0]["distance"] == 0
    assert (samples[0]["lon"], samples[-1]["lat"]) == (5.9, 50.0)
    steps = np.diff([s["distance"] for s in samples])
    assert np.allclose(steps, steps[0], rtol=1e-6) and 40_000 < samples[-1]["distance"] < 70_000
    compared = 0
    for s in samples[::3]:
        want = bilinear(demo_data / "elev.tif", s["lon"], s["lat"])
        if want is None:
            assert s["elevation"] is None, s
            continue
        assert abs(s["elevation"] - want) < 1e-3, (s, want)
        compared += 1
    assert compared >= 10


def test_elevation_bad_input_is_refused_with_the_limit_named(terrain):
    status, _, body = http_get(terrain, "/elevation/elevation?lon=200&lat=10")
    assert status == 400 and b"longitude" in body
    status, _, body = http_get(terrain, "/elevation/elevation")
    assert status == 400 and b"lon=" in body
    line = {"type": "LineString", "coordinates": [[5.9, 49.6], [6.2, 49.7]]}
    status, body = post_json(terrain, "/elevation/elevation?samples=1000000", line)
    assert status == 400 and "profile_max_samples" in body
    many = {"type": "LineString", "coordinates": [[6.0 + i * 1e-6, 49.6] for i in range(20_000)]}
    status, body = post_json(terrain, "/elevation/elevation", many)
    assert status == 400 and "profile_max_vertices" in body
    # A body of a million vertices is refused by its length, unread.
    import socket
    host, port = terrain.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as conn:
        conn.sendall(b"POST /elevation/elevation HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 25000000\r\n\r\n" + b'{"type": "LineString", "coordinates": [')
        answer = conn.recv(65536).decode(errors="replace")
    assert answer.startswith("HTTP/1.1 413") and "profile_max_vertices" in answer, answer[:300]
    status, body = post_json(terrain, "/elevation/elevation", {"type": "Point", "coordinates": [6, 49]})
    assert status == 400 and "LineString" in body


# Bad DEMs and bad configurations.

def check(config_text, tmp_path):
    import os
    config = tmp_path / "check.yaml"
    config.write_text(config_text)
    return subprocess.run([os.environ["TESSERA_BIN"], "check", str(config)], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("layer, says", [
    ("{ name: rgb, source: { path: RGB }, formats: [png, terrarium.png] }",
     "format terrarium.png encodes one band of elevations; the source has 6 bands"),
    ("{ name: near, source: { path: DEM, resampling: nearest }, formats: [terrain-rgb.png] }",
     "interpolates elevations before encoding them: choose resampling bilinear"),
    ("{ name: zero, source: { type: contours, dem: { path: DEM }, interval: 0 }, formats: [mvt] }",
     "interval must be a number above 0, not 0"),
    ("{ name: minus, source: { type: contours, dem: { path: DEM }, zooms: { 10: -5 } }, formats: [mvt] }",
     "the interval of zoom 10 must be a number above 0, not -5"),
    ("{ name: bands, source: { type: contours, dem: { path: RGB } }, formats: [mvt] }",
     "has 6 bands; pick its elevations with `dem: { bands: [n] }`"),
    ("{ name: style, source: { type: contours, dem: { path: DEM }, style: [{ filter: { field: height, eq: 1 }, "
     "stroke: \"#ff0000\" }] }, formats: [mvt, png] }",
     'the style reads "height"; contour lines have `ele` and `level`'),
])
def test_terrain_configuration_errors_are_named(tmp_path, demo_data, layer, says):
    text = "layers:\n  - " + layer.replace("RGB", str(demo_data / "L7_ETMs.tif")).replace(
        "DEM", str(demo_data / "elev.tif")) + "\n"
    r = check(text, tmp_path)
    assert r.returncode != 0 and says in r.stderr, r.stderr


@pytest.fixture(scope="module")
def bad_dems(tmp_path_factory):
    """DEMs a server meets in the wild: fill values of 1e38, NaN without a
    nodata value, and nothing but nodata."""
    folder = tmp_path_factory.mktemp("bad")
    huge = np.full((40, 40), 1e38)
    huge[:, :20] = 300.0
    nan = np.full((40, 40), 200.0) + np.arange(40)[None, :] * 3.0
    nan[10:30, 10:30] = np.nan
    empty = np.full((40, 40), -9999.0)
    return {name: make_dem(folder / f"{name}.tif", values, origin=(6.0, 49.8), pixel=0.005)
            for name, values in (("huge", huge), ("nan", nan), ("empty", empty))}


def test_bad_dems_draw_what_they_hold_and_nothing_else(tmp_path_factory, bad_dems):
    folder = tmp_path_factory.mktemp("badserve")
    layers = "".join(
        f"""
  - name: {name}
    source: {{ path: {path} }}
    formats: [terrarium.png, terrain-rgb.png]
    cache: {{ store: none }}
  - name: {name}-lines
    source: {{ type: contours, dem: {{ path: {path} }}, interval: 5, max_levels: 50 }}
    formats: [mvt]
    cache: {{ store: none }}
""" for name, path in bad_dems.items())
    config = folder / "tessera.yaml"
    config.write_text("layers:" + layers)
    z = 12
    x, y = tile_of(6.1, 49.75, z)
    with serving(tmp_path_factory, "--config", str(config)) as server:
        # 1e38: clamped to each encoding's top, never wrapped round to a
        # low or negative elevation.
        _, _, body = server.get(f"/tiles/huge/WebMercatorQuad/{z}/{x}/{y}.terrain-rgb.png")
        ele = decode_elevations(body, "terrain-rgb")
        assert ele.max() > 1.6e6 and ele.min() > 250, (ele.min(), ele.max())
        _, _, body = server.get(f"/tiles/huge/WebMercatorQuad/{z}/{x}/{y}.terrarium.png")
        ele = decode_elevations(body, "terrarium")
        assert ele.max() > 32000 and ele.min() > 250, (ele.min(), ele.max())
        # Contours of the 300 m half only: the fill value is no data.
        lines = mvt_lines(server, "huge-lines", z, x, y)
        assert set(lines) <= {300}, sorted(lines)
        # NaN is no data: sea level in elevation tiles, no lines through it.
        _, _, body = server.get(f"/tiles/nan/WebMercatorQuad/{z}/{x}/{y}.terrarium.png")
        ele = decode_elevations(body, "terrarium")
        assert (np.abs(ele) < 0.01).mean() > 0.1 and ele.max() > 200
        lines = mvt_lines(server, "nan-lines", z, x, y)
        assert len(lines) > 3 and all(200 <= ele <= 320 for ele in lines), sorted(lines)
        # Nothing but nodata: sea level, and no contour tile at all.
        _, _, body = server.get(f"/tiles/empty/WebMercatorQuad/{z}/{x}/{y}.terrain-rgb.png")
        assert np.all(np.abs(decode_elevations(body, "terrain-rgb")) <= 0.05)
        status, _, _ = http_get(server, f"/tiles/empty-lines/WebMercatorQuad/{z}/{x}/{y}.mvt")
        assert status == 204


def test_a_cliff_of_many_levels_is_drawn_at_a_wider_interval(tmp_path_factory, tmp_path):
    # 0 to 9000 m across a few pixels at an interval of 1 m: 9000 levels,
    # drawn as at most max_levels (here 20).
    values = np.zeros((40, 40))
    values[:, 20:] = 9000.0
    cliff = make_dem(tmp_path / "cliff.tif", values, origin=(6.0, 49.8), pixel=0.005)
    config = tmp_path / "tessera.yaml"
    config.write_text(f"""
layers:
  - name: cliff
    source: {{ type: contours, dem: {{ path: {cliff} }}, interval: 1, max_levels: 20 }}
    formats: [mvt]
    cache: {{ store: none }}
""")
    x, y = tile_of(6.1, 49.75, 12)
    with serving(tmp_path_factory, "--config", str(config)) as server:
        lines = mvt_lines(server, "cliff", 12, x, y)
    assert 5 <= len(lines) <= 20, sorted(lines)
    step = sorted(lines)[1] - sorted(lines)[0]
    assert step >= 450 and all(ele % step == 0 for ele in lines), sorted(lines)


# Slope, aspect and multidirectional hillshade against gdaldem.

RELIEF = """
layers:
  - name: slope
    source: {{ path: {elev} }}
    style: {{ type: slope, ramp: [{{ value: 0, color: "#000000" }}, {{ value: 90, color: "#ffffff" }}] }}
    cache: {{ store: none }}
  - name: aspect
    source: {{ path: {elev} }}
    style: {{ type: aspect, ramp: [{{ value: 0, color: "#000000" }}, {{ value: 360, color: "#ffffff" }}] }}
    cache: {{ store: none }}
  - name: shade
    source: {{ path: {elev} }}
    style: {{ type: hillshade, multidirectional: true }}
    cache: {{ store: none }}
"""


@pytest.mark.parametrize("layer, gdaldem, full", [
    ("slope", ["slope"], 90.0),
    ("aspect", ["aspect"], 360.0),
    ("shade", ["hillshade", "-multidirectional"], None),
])
def test_relief_styles_are_gdaldems(tmp_path_factory, tmp_path, demo_data, layer, gdaldem, full):
    folder = tmp_path_factory.mktemp("relief")
    config = folder / "tessera.yaml"
    config.write_text(RELIEF.format(elev=demo_data / "elev.tif"))
    z = 12
    x, y = tile_of(6.13, 49.75, z)
    west, south, east, north = mercator_bbox(z, x, y)
    span = (east - west) / 256
    window = tmp_path / "window.tif"
    subprocess.run(["gdalwarp", "-q", "-overwrite", "-t_srs", "EPSG:3857", "-te", str(west - span),
                    str(south - span), str(east + span), str(north + span), "-ts", "258", "258",
                    "-r", "bilinear", "-ot", "Float32", str(demo_data / "elev.tif"), str(window)],
                   check=True, timeout=120)
    # The ground size of a Web Mercator metre at the tile's centre.
    lat = math.degrees(math.atan(math.sinh(((north + south) / 2) / 6378137.0)))
    out = tmp_path / "gdaldem.tif"
    subprocess.run(["gdaldem", *gdaldem, "-q", "-s", str(math.cos(math.radians(lat))), str(window),
                    str(out)], check=True, timeout=120)
    reference = read(out).astype(np.float64)[1:-1, 1:-1]
    with serving(tmp_path_factory, "--config", str(config)) as server:
        _, _, body = server.get(f"/tiles/{layer}/WebMercatorQuad/{z}/{x}/{y}.png")
    grey = decode(body)[0].astype(np.float64)
    if full is None:
        known = reference > 0
        diff = np.abs(grey - reference)[known]
    else:
        known = reference >= 0
        want = reference * 255 / full
        diff = np.abs(grey - want)[known]
        if layer == "aspect":
            diff = np.minimum(diff, 255 - diff)  # 359 degrees is next to 0
    assert known.mean() > 0.9
    assert np.percentile(diff, 99) <= 2.0, f"{layer}: p99 {np.percentile(diff, 99):.2f} grey levels"


def test_elevation_exports_say_their_encoding_to_pmtiles_and_sqlite3(tmp_path, demo_data):
    import os
    import sqlite3
    tool = os.environ.get("TESSERA_PMTILES_BIN")
    if not tool or not os.access(tool, os.X_OK):
        pytest.fail("TESSERA_PMTILES_BIN does not name go-pmtiles; scripts/test builds it", pytrace=False)
    config = tmp_path / "tessera.yaml"
    config.write_text(f"""
stores: {{ disk: {{ type: file, path: {tmp_path / 'cache'} }} }}
layers:
  - name: dem
    source: {{ path: {demo_data / 'elev.tif'} }}
    formats: [terrain-rgb.webp, terrarium.png]
    grids: [WebMercatorQuad]
    cache: {{ store: disk }}
""")
    binary = os.environ["TESSERA_BIN"]

    def run(*args):
        r = subprocess.run([binary, *map(str, args)], capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        return r.stdout
    run("seed", "--config", config, "--layer", "dem", "--format", "terrain-rgb.webp", "--zoom", "8..10")
    run("export", "--config", config, "--layer", "dem", "--format", "pmtiles", "--tile-format", "terrain-rgb.webp",
        "--zoom", "8..10", "--to", tmp_path / "dem.pmtiles")
    subprocess.run([tool, "verify", tmp_path / "dem.pmtiles"], check=True, capture_output=True, timeout=60)
    show = subprocess.run([tool, "show", tmp_path / "dem.pmtiles"], capture_output=True, text=True,
                          timeout=60).stdout
    assert "tile type: webp" in show, show
    meta = json.loads(subprocess.run([tool, "show", "--metadata", tmp_path / "dem.pmtiles"], capture_output=True,
                                     text=True, timeout=60).stdout)
    assert meta["encoding"] == "mapbox", meta
    x, y = tile_of(6.1, 49.8, 10)
    tile = subprocess.run([tool, "tile", tmp_path / "dem.pmtiles", "10", str(x), str(y)], capture_output=True,
                          timeout=60).stdout
    ele = decode_elevations(tile, "terrain-rgb")
    assert 140 < np.median(ele) < 560, np.median(ele)

    run("seed", "--config", config, "--layer", "dem", "--format", "terrarium.png", "--zoom", "8..9")
    run("export", "--config", config, "--layer", "dem", "--format", "mbtiles", "--tile-format", "terrarium.png",
        "--zoom", "8..9", "--to", tmp_path / "dem.mbtiles")
    db = sqlite3.connect(tmp_path / "dem.mbtiles")
    meta = dict(db.execute("SELECT name, value FROM metadata"))
    assert (meta["format"], meta["encoding"]) == ("png", "terrarium"), meta
    (count,) = db.execute("SELECT count(*) FROM tiles").fetchone()
    assert count >= 2


def test_contours_are_seeded_and_served_from_the_store(tmp_path, tmp_path_factory, demo_data):
    import os
    config = tmp_path / "tessera.yaml"
    config.write_text(f"""
stores: {{ disk: {{ type: file, path: {tmp_path / 'cache'} }} }}
layers:
  - name: contours
    source: {{ type: contours, dem: {{ path: {demo_data / 'elev.tif'} }}, interval: 20 }}
    formats: [mvt]
    grids: [WebMercatorQuad]
    cache: {{ store: disk }}
  - name: fresh
    source: {{ type: contours, dem: {{ path: {demo_data / 'elev.tif'} }}, interval: 20 }}
    formats: [mvt]
    grids: [WebMercatorQuad]
    cache: {{ store: none }}
""")
    r = subprocess.run([os.environ["TESSERA_BIN"], "seed", "--config", str(config), "--layer", "contours",
                        "--format", "mvt", "--zoom", "10..11"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    stored = list((tmp_path / "cache").rglob("*.mvt"))
    assert len(stored) >= 6, stored
    x, y = tile_of(6.13, 49.75, 11)
    with serving(tmp_path_factory, "--config", str(config)) as server:
        status, headers, body = http_get(server, f"/tiles/contours/WebMercatorQuad/11/{x}/{y}.mvt")
        assert status == 200 and headers["X-Cache"] == "HIT"
        assert mvt_lines(server, "contours", 11, x, y) == mvt_lines(server, "fresh", 11, x, y)
