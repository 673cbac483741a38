"""A STAC search in pgSTAC as a layer (`type: stac`): the pgSTAC schema
installed by `pypgstac migrate` in the PostGIS test server, loaded with
overlapping scenes made here with GDAL; tiles against GDAL's own mosaic of
the items the search selects (gdalbuildvrt in the method's order, warped
to the tile) for `first`, and against GDAL's warp of each item for `mean`.
"""
import json
import math
import re
import os
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path

import numpy as np
import pytest

from conftest import http_get, serving
from imaging import decode, read
from vectors import env

HALF = 20037508.342789244
PIXEL = 0.0005  # degrees: every scene on one grid
SCENES = [  # id, west, north, cloud cover, day of June 2024
    ("s0", 6.000, 49.800, 30, 1), ("s1", 6.040, 49.780, 5, 3), ("s2", 6.080, 49.820, 50, 5),
    ("s3", 6.020, 49.750, 12, 7), ("s4", 6.100, 49.760, 20, 9), ("s5", 6.060, 49.740, 8, 11),
    ("s6", 5.980, 49.770, 40, 13), ("s7", 6.120, 49.800, 2, 15),
]
SIZE = 160  # pixels per scene side


def make_scene(path, index, west, north):
    from osgeo import gdal
    ds = gdal.GetDriverByName("GTiff").Create(str(path), SIZE, SIZE, 3, gdal.GDT_Byte, ["TILED=YES"])
    ds.SetGeoTransform((west, PIXEL, 0, north, 0, -PIXEL))
    ds.SetProjection('GEOGCS["WGS 84",DATUM["WGS_1984",SPHEROID["WGS 84",6378137,298.257223563]],'
                     'PRIMEM["Greenwich",0],UNIT["degree",0.0174532925199433],AUTHORITY["EPSG","4326"]]')
    yy, xx = np.mgrid[0:SIZE, 0:SIZE]
    for b in range(3):
        values = (index * 29 + b * 61 + (xx + 2 * yy) // 9) % 251
        ds.GetRasterBand(b + 1).WriteArray(values.astype(np.uint8))
    ds = None
    return path


def item(scene_id, path, west, north, cloud, day):
    east, south = west + SIZE * PIXEL, north - SIZE * PIXEL
    return {
        "type": "Feature", "stac_version": "1.0.0", "id": scene_id, "collection": "scenes",
        "geometry": {"type": "Polygon", "coordinates": [[[west, south], [east, south], [east, north],
                                                         [west, north], [west, south]]]},
        "bbox": [west, south, east, north],
        "properties": {"datetime": f"2024-06-{day:02d}T10:00:00Z", "eo:cloud_cover": cloud},
        "assets": {"visual": {"href": str(path), "type": "image/tiff; application=geotiff"}},
        "links": [],
    }


def sql(dsn, statement, *args):
    """Runs `statement` in `dsn` (pgSTAC's functions on the path); its
    rows, if it has any."""
    import psycopg
    with psycopg.connect(dsn, autocommit=True, options="-c search_path=pgstac,public") as conn:
        cursor = conn.execute(statement, args)
        return cursor.fetchall() if cursor.description else []


@pytest.fixture(scope="module")
def catalogue(tmp_path_factory):
    """A pgSTAC database of the scenes: its URL, the items and the folder."""
    server = env("TESSERA_TEST_PG_URL")
    name = f"stac_{uuid.uuid4().hex[:8]}"
    sql(server, f"CREATE DATABASE {name}")
    dsn = server.rsplit("/", 1)[0] + "/" + name
    migrate = subprocess.run([str(Path(sys.executable).with_name("pypgstac")), "migrate", "--dsn", dsn],
                             capture_output=True, text=True, timeout=300)
    assert migrate.returncode == 0, migrate.stderr
    folder = tmp_path_factory.mktemp("scenes")
    collection = {"type": "Collection", "stac_version": "1.0.0", "id": "scenes", "description": "test scenes",
                  "license": "proprietary", "links": [],
                  # As most catalogues do: pgSTAC then keeps items without
                  # what these hold (dehydrated), and tessera hydrates them.
                  "item_assets": {"visual": {"type": "image/tiff; application=geotiff", "roles": ["visual"]}},
                  "extent": {"spatial": {"bbox": [[5.9, 49.6, 6.3, 49.9]]},
                             "temporal": {"interval": [["2024-06-01T00:00:00Z", "2024-06-30T00:00:00Z"]]}}}
    sql(dsn, "SELECT create_collection(%s::jsonb)", json.dumps(collection))
    # Cloud cover is a number to pgSTAC once a queryable says so (else it
    # sorts as text: "12" before "5"), as a catalogue declares it.
    sql(dsn, "INSERT INTO queryables (name, definition, property_wrapper) "
             """VALUES ('eo:cloud_cover', '{"type": "number"}', 'to_float')""")
    items = []
    for index, (scene_id, west, north, cloud, day) in enumerate(SCENES):
        path = make_scene(folder / f"{scene_id}.tif", index, west, north)
        items.append(item(scene_id, path, west, north, cloud, day))
    sql(dsn, "SELECT create_items(%s::jsonb)", json.dumps(items))
    kept = sql(dsn, "SELECT content->'assets'->'visual' FROM items WHERE id = 's1'")[0][0]
    assert "type" not in kept and kept["href"] == items[1]["assets"]["visual"]["href"], kept
    yield dsn, items, folder
    sql(server, f"DROP DATABASE {name} WITH (FORCE)")


LAYERS = """
layers:
  - name: first
    source:
      type: stac
      pgstac: {dsn}
      search: {{ collections: [scenes], sortby: [{{ field: properties.eo:cloud_cover, direction: asc }}] }}
      asset: visual
      method: first
      resampling: nearest
    cache: {{ store: none }}
  - name: paged
    source:
      type: stac
      pgstac: {dsn}
      search: {{ collections: [scenes], sortby: [{{ field: properties.eo:cloud_cover, direction: asc }}] }}
      asset: visual
      resampling: nearest
      page: 1
    cache: {{ store: none }}
  - name: cached
    source:
      type: stac
      pgstac: {dsn}
      search: {{ collections: [scenes], sortby: [{{ field: properties.eo:cloud_cover, direction: asc }}] }}
      asset: visual
      resampling: nearest
  - name: limited
    source: {{ type: stac, pgstac: {dsn}, search: {{ collections: [scenes] }}, asset: visual, method: mean,
               max_items: 2, resampling: nearest }}
  - name: hurried
    source: {{ type: stac, pgstac: {dsn}, search: {{ collections: [scenes] }}, asset: visual, method: mean,
               max_seconds: 0.000000001, resampling: nearest }}
  - name: limited_uncached
    source: {{ type: stac, pgstac: {dsn}, search: {{ collections: [scenes] }}, asset: visual, method: mean,
               max_items: 2, resampling: nearest }}
    cache: {{ store: none }}
  - name: hurried_uncached
    source: {{ type: stac, pgstac: {dsn}, search: {{ collections: [scenes] }}, asset: visual, method: mean,
               max_seconds: 0.000000001, resampling: nearest }}
    cache: {{ store: none }}
  - name: daily
    source: {{ type: stac, pgstac: {dsn}, search: {{ collections: [scenes] }}, asset: visual, resampling: nearest }}
    dimensions: {{ time: {{ from_items: datetime, resolution: day }} }}
  - name: only_s1
    source: {{ type: stac, pgstac: {dsn}, search: {{ ids: [s1] }}, asset: visual, resampling: nearest }}
    cache: {{ store: none }}
  - name: mean
    source: {{ type: stac, pgstac: {dsn}, search: {{ collections: [scenes] }}, asset: visual, method: mean,
               resampling: nearest }}
    cache: {{ store: none }}
  - name: latest
    source: {{ type: stac, pgstac: {dsn}, search: {{ collections: [scenes] }}, asset: visual, method: latest,
               resampling: nearest }}
    cache: {{ store: none }}
"""


@pytest.fixture(scope="module")
def server(catalogue, tmp_path_factory):
    dsn, _, folder = catalogue
    config = folder / "tessera.yaml"
    config.write_text(LAYERS.format(dsn=dsn))
    with serving(tmp_path_factory, "--config", str(config)) as s:
        yield s


def tile_bounds(z, x, y):
    span = 2 * HALF / 2 ** z
    return -HALF + x * span, HALF - (y + 1) * span, -HALF + (x + 1) * span, HALF - y * span


def lonlat_bounds(z, x, y):
    west, south, east, north = tile_bounds(z, x, y)
    lon = lambda m: m / HALF * 180  # noqa: E731
    lat = lambda m: math.degrees(math.atan(math.sinh(m / 6378137.0)))  # noqa: E731
    return lon(west), lat(south), lon(east), lat(north)


def covering(items, z, x, y):
    w, s, e, n = lonlat_bounds(z, x, y)
    return [i for i in items if i["bbox"][0] < e and i["bbox"][2] > w and i["bbox"][1] < n and i["bbox"][3] > s]


def rgba(body):
    """A PNG tile as 4 bands: an opaque one is sent as RGB."""
    pixels = decode(body)
    if pixels.shape[0] == 3:
        pixels = np.concatenate([pixels, np.full((1, *pixels.shape[1:]), 255, pixels.dtype)])
    return pixels


def warp(sources, z, x, y, dst):
    subprocess.run(["gdalwarp", "-q", "-overwrite", "-t_srs", "EPSG:3857", "-te", *map(str, tile_bounds(z, x, y)),
                    "-ts", "256", "256", "-r", "near", "-dstalpha", *map(str, sources), str(dst)],
                   check=True, timeout=120)
    return read(dst)


def tile_of(lon, lat, z):
    n = 2 ** z
    return z, int((lon + 180) / 360 * n), int((1 - math.asinh(math.tan(math.radians(lat))) / math.pi) / 2 * n)


# Where four scenes overlap, and three.
TILES = [tile_of(6.05, 49.73, 12), tile_of(6.05, 49.73, 13), tile_of(6.11, 49.75, 13), tile_of(6.05, 49.73, 14)]


@pytest.mark.parametrize("z, x, y", TILES)
def test_first_is_gdals_mosaic_of_the_items_in_the_searchs_order(server, catalogue, tmp_path, z, x, y):
    _, items, _ = catalogue
    chosen = sorted(covering(items, z, x, y), key=lambda i: i["properties"]["eo:cloud_cover"])
    assert len(chosen) >= 2, f"tile {z}/{x}/{y} covers {len(chosen)} scenes"
    vrt = tmp_path / "mosaic.vrt"
    # gdalbuildvrt draws the last source on top: the search's first last.
    subprocess.run(["gdalbuildvrt", "-q", "-addalpha", str(vrt), *[i["assets"]["visual"]["href"] for i in reversed(chosen)]],
                   check=True, timeout=60)
    reference = warp([vrt], z, x, y, tmp_path / "ref.tif")
    _, _, body = server.get(f"/tiles/first/WebMercatorQuad/{z}/{x}/{y}.png")
    tile = rgba(body)
    # Asked of pgSTAC one item at a time (its `next` tokens): the same.
    assert server.get(f"/tiles/paged/WebMercatorQuad/{z}/{x}/{y}.png")[2] == body
    differ = (tile[3] > 0) != (reference[3] > 0)
    assert not differ.any(), f"coverage differs at {differ.sum()} pixels, rows {np.unique(np.nonzero(differ)[0])[:10]}, cols {np.unique(np.nonzero(differ)[1])[:10]}"
    covered = reference[3] > 0
    assert covered.mean() > 0.2
    assert np.array_equal(tile[:3][:, covered], reference[:3][:, covered])


@pytest.mark.parametrize("z, x, y", TILES[:2])
def test_mean_is_the_mean_of_gdals_warp_of_each_item(server, catalogue, tmp_path, z, x, y):
    _, items, _ = catalogue
    chosen = covering(items, z, x, y)
    total = np.zeros((3, 256, 256))
    count = np.zeros((256, 256))
    for n, i in enumerate(chosen):
        warped = warp([i["assets"]["visual"]["href"]], z, x, y, tmp_path / f"item{n}.tif")
        valid = warped[3] > 0
        total[:, valid] += warped[:3][:, valid]
        count[valid] += 1
    _, _, body = server.get(f"/tiles/mean/WebMercatorQuad/{z}/{x}/{y}.png")
    tile = rgba(body)
    covered = count > 0
    assert np.array_equal(tile[3] > 0, covered)
    want = total[:, covered] / count[covered]
    assert np.abs(tile[:3][:, covered] - want).max() <= 0.5 + 1e-6


def test_latest_draws_the_newest_scene_on_top(server, catalogue, tmp_path):
    _, items, _ = catalogue
    z, x, y = TILES[0]
    chosen = sorted(covering(items, z, x, y), key=lambda i: i["properties"]["datetime"], reverse=True)
    vrt = tmp_path / "latest.vrt"
    subprocess.run(["gdalbuildvrt", "-q", "-addalpha", str(vrt), *[i["assets"]["visual"]["href"] for i in reversed(chosen)]],
                   check=True, timeout=60)
    reference = warp([vrt], z, x, y, tmp_path / "ref.tif")
    tile = rgba(server.get(f"/tiles/latest/WebMercatorQuad/{z}/{x}/{y}.png")[2])
    covered = reference[3] > 0
    assert np.array_equal(tile[:3][:, covered], reference[:3][:, covered])


def test_a_new_scene_changes_the_tiles_it_covers_and_no_other(server, catalogue, tmp_path):
    dsn, items, folder = catalogue
    inside, outside = tile_of(6.05, 49.73, 14), tile_of(6.15, 49.79, 13)
    before = {t: server.get("/tiles/first/WebMercatorQuad/%d/%d/%d.png" % t)[2] for t in (inside, outside)}
    w, s, e, n = lonlat_bounds(*inside)
    west, north = round(w / PIXEL) * PIXEL, round(n / PIXEL) * PIXEL
    path = make_scene(folder / "clear.tif", 99, west, north)
    new = item("clear", path, west, north, 0, 20)
    sql(dsn, "SELECT create_item(%s::jsonb)", json.dumps(new))
    try:
        after = {t: server.get("/tiles/first/WebMercatorQuad/%d/%d/%d.png" % t)[2] for t in (inside, outside)}
        assert after[inside] != before[inside], "the new, clearest scene is not drawn"
        assert after[outside] == before[outside], "a tile the scene does not cover changed"
    finally:
        sql(dsn, "SELECT delete_item('clear')")


def test_cached_tiles_are_keyed_by_the_items_under_them(server, catalogue):
    """A new scene makes the metatile it covers a new key (rendered again,
    drawing it); every other cached tile is still a hit; deleting the scene
    brings the first key back. (Keys are per metatile, 4 x 4 tiles here:
    `outside` is in a metatile east of the new scene.)"""
    dsn, items, folder = catalogue
    inside, outside = tile_of(6.06, 49.74, 14), tile_of(6.19, 49.79, 14)

    def get(t):
        status, headers, body = http_get(server, "/tiles/cached/WebMercatorQuad/%d/%d/%d.png" % t)
        assert status == 200, body[:300]
        return headers["X-Cache"], body

    before = {t: get(t)[1] for t in (inside, outside)}
    assert {t: get(t) for t in (inside, outside)} == {t: ("HIT", before[t]) for t in (inside, outside)}
    w, s, e, n = lonlat_bounds(*inside)
    west, north = round(w / PIXEL) * PIXEL, round(n / PIXEL) * PIXEL
    path = make_scene(folder / "clearer.tif", 98, west, north)
    sql(dsn, "SELECT create_item(%s::jsonb)", json.dumps(item("clearer", path, west, north, 0, 21)))
    try:
        status, body = get(inside)
        assert status == "MISS" and body != before[inside], "the new, clearest scene is not drawn"
        assert body == server.get("/tiles/first/WebMercatorQuad/%d/%d/%d.png" % inside)[2]
        assert get(inside) == ("HIT", body)
        assert get(outside) == ("HIT", before[outside]), "a tile the scene does not cover was rendered again"
    finally:
        sql(dsn, "SELECT delete_item('clearer')")
    assert get(inside) == ("HIT", before[inside]), "the catalogue as it was is not its first key"


def test_truncating_a_layer_removes_its_tiles_at_every_state_of_the_catalogue(catalogue, tmp_path,
                                                                               tmp_path_factory):
    """Tiles cached at an earlier state of the catalogue (under another
    `~items=` key) go too: the catalogue back at that state renders anew,
    and the file store keeps no tile of the layer under any key."""
    dsn, items, folder = catalogue
    token = "stac-truncate-token-0123456789"
    cache = tmp_path / "cache"
    config = tmp_path / "tessera.yaml"
    config.write_text(f"""
stores:
  disk: {{ type: file, path: {cache} }}
admin: {{ token: {token} }}
layers:
  - name: scenes
    source: {{ type: stac, pgstac: {dsn}, search: {{ collections: [scenes] }}, asset: visual,
               resampling: nearest }}
    cache: {{ store: disk }}
""")
    inside = tile_of(6.065, 49.745, 14)

    def get():
        status, headers, body = http_get(server, "/tiles/scenes/WebMercatorQuad/%d/%d/%d.png" % inside)
        assert status == 200, body[:300]
        return headers["X-Cache"]

    def stored():
        return sorted(str(p.relative_to(cache)) for p in cache.glob("scenes*/**/*.png"))

    w, s, e, n = lonlat_bounds(*inside)
    west, north = round(w / PIXEL) * PIXEL, round(n / PIXEL) * PIXEL
    path = make_scene(folder / "passing.tif", 97, west, north)
    with serving(tmp_path_factory, "--config", str(config)) as server:
        assert get() == "MISS"
        sql(dsn, "SELECT create_item(%s::jsonb)", json.dumps(item("passing", path, west, north, 0, 22)))
        try:
            assert get() == "MISS", "a new scene did not make a new key"
        finally:
            sql(dsn, "SELECT delete_item('passing')")
        assert get() == "HIT", "the catalogue as it was is not its first key"
        keys = {p.split("/")[0] for p in stored()}
        assert len(keys) == 2 and all(k.startswith("scenes~items=") for k in keys), keys
        req = urllib.request.Request(f"{server.url}/admin/truncate?layer=scenes&zoom=0..16", method="POST",
                                     headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(req, timeout=120) as r:
            assert r.status == 200, r.read()
        assert stored() == [], "tiles of the layer are left in the store"
        assert get() == "MISS", "a tile of the current state survived the truncation"
        sql(dsn, "SELECT create_item(%s::jsonb)", json.dumps(item("passing", path, west, north, 0, 22)))
        try:
            assert get() == "MISS", "a tile of a past state survived the truncation"
        finally:
            sql(dsn, "SELECT delete_item('passing')")


def test_a_tile_past_a_limit_is_drawn_from_what_was_read_and_says_so(server):
    z, x, y = TILES[0]  # four scenes over it
    path = f"/WebMercatorQuad/{z}/{x}/{y}.png"
    # max_items: the same two items every time; stored like any tile.
    status, headers, limited = http_get(server, "/tiles/limited" + path)
    assert status == 200 and headers["X-Tessera-Partial"] == "max_items", dict(headers)
    assert limited != server.get("/tiles/mean" + path)[2]
    status, headers, again = http_get(server, "/tiles/limited" + path)
    assert headers["X-Cache"] == "HIT" and again == limited
    # max_seconds: what was read in time (here nothing), answered but not
    # stored, nor kept by shared caches.
    for _ in range(2):
        status, headers, hurried = http_get(server, "/tiles/hurried" + path)
        assert status == 200 and headers["X-Tessera-Partial"] == "max_seconds", dict(headers)
        assert headers["X-Cache"] == "MISS" and headers["Cache-Control"] == "no-store"
    assert rgba(hurried)[3].max() == 0
    # A layer without a cache says so too, on every tile it renders.
    status, headers, body = http_get(server, "/tiles/limited_uncached" + path)
    assert status == 200 and headers["X-Tessera-Partial"] == "max_items", dict(headers)
    assert body != server.get("/tiles/mean" + path)[2]  # two of the four items
    status, headers, _ = http_get(server, "/tiles/hurried_uncached" + path)
    assert status == 200 and headers["X-Tessera-Partial"] == "max_seconds", dict(headers)
    assert headers["Cache-Control"] == "no-store"
    # A tile within the limits says nothing.
    assert "X-Tessera-Partial" not in http_get(server, "/tiles/cached" + path)[1]
    assert "a window's items took longer than max_seconds" in server.log_text()


def test_time_from_items_gives_one_value_per_day_with_scenes(server):
    """`dimensions: { time: { from_items: datetime, resolution: day } }`:
    the days with scenes (June 1, 3, ..., 15), each the scenes of its day;
    the default the latest."""
    days = [f"2024-06-{day:02d}" for _, _, _, _, day in SCENES]
    capabilities = server.get("/wmts?SERVICE=WMTS&REQUEST=GetCapabilities")[2].decode()
    layer = capabilities[capabilities.index("<ows:Identifier>daily</ows:Identifier>"):]
    layer = layer[:layer.index("</Layer>")]
    listed = sorted(v[:10] for v in re.findall(r"<Value>([^<]+)</Value>", layer))
    assert listed == sorted(days), listed
    z, x, y = TILES[0]
    path = f"/WebMercatorQuad/{z}/{x}/{y}.png"
    # June 3 has scene s1 alone.
    at_day = server.get(f"/tiles/daily{path}?time=2024-06-03")[2]
    assert at_day == server.get(f"/tiles/only_s1{path}")[2]
    assert at_day != server.get(f"/tiles/daily{path}?time=2024-06-07")[2]
    status, _, body = http_get(server, f"/tiles/daily{path}?time=2024-06-04")
    assert status == 400 and b"2024-06-04" in body, body[:300]


def test_bad_stac_sources_are_named_at_start(catalogue, tmp_path):
    dsn, _, _ = catalogue
    cases = [
        (f"{{ type: stac, pgstac: {dsn}, search: {{ collections: [nothing] }}, asset: visual }}",
         "the search finds no item"),
        (f"{{ type: stac, pgstac: {dsn}, search: {{ collections: [scenes] }} }}",
         "give one `asset` (all its bands) or `assets` (one band each)"),
        (f"{{ type: stac, pgstac: {dsn.rsplit('/', 1)[0]}/postgres, asset: visual }}",
         "is pgSTAC installed (pypgstac migrate)?"),
        (f"{{ type: stac, pgstac: {dsn}, search: {{ collections: [scenes] }}, asset: thumbnail }}",
         'has no asset "thumbnail"'),
    ]
    for source, says in cases:
        config = tmp_path / "bad.yaml"
        config.write_text(f"layers:\n  - name: bad\n    source: {source}\n")
        r = subprocess.run([os.environ["TESSERA_BIN"], "check", str(config)], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode != 0 and says in r.stderr, (source, r.stderr)
        assert "secret" not in r.stderr


@pytest.mark.parametrize("href, says", [
    ("http://10.1.2.3/scene.tif", "10.1.2.3"),
    ("file:///etc/passwd", "file:// URLs are not read"),
])
def test_items_pointing_at_private_addresses_or_files_are_refused(server, catalogue, href, says):
    dsn, _, _ = catalogue
    z, x, y = TILES[0]
    w, s, e, n = lonlat_bounds(z, x, y)
    bad = item("bad", href, w, n, -1, 25)
    bad["bbox"] = [w, s, e, n]
    bad["geometry"]["coordinates"] = [[[w, s], [e, s], [e, n], [w, n], [w, s]]]
    sql(dsn, "SELECT create_item(%s::jsonb)", json.dumps(bad))
    try:
        status, _, body = http_get(server, f"/tiles/first/WebMercatorQuad/{z}/{x}/{y}.png")
        # Refused, named in the log (the answer does not show the server's
        # internals).
        assert status >= 500, (status, body[:400])
        assert says in server.log_text()
    finally:
        sql(dsn, "SELECT delete_item('bad')")


def test_items_read_over_http_and_from_s3_give_the_same_tiles(catalogue, s3, tmp_path_factory, monkeypatch):
    """The scenes again, in a second collection whose assets are on the
    range server (http://) and in MinIO (s3://, read as /vsis3/ with the
    endpoint and credentials of the config): the tiles of the local files."""
    from cogserver import start_cog_server
    from conftest import s3_bucket

    dsn, items, folder = catalogue
    bucket = s3_bucket(s3, "tessera-stac")
    web = start_cog_server(folder)
    try:
        remote = []
        for n, i in enumerate(items):
            name = Path(i["assets"]["visual"]["href"]).name
            if n % 2:
                bucket.upload_file(i["assets"]["visual"]["href"], "tessera-stac", f"scenes/{name}")
                href = f"s3://tessera-stac/scenes/{name}"
            else:
                href = f"{web.url}/{name}"
            remote.append({**i, "collection": "remote", "assets": {"visual": {**i["assets"]["visual"], "href": href}}})
        collection = {"type": "Collection", "stac_version": "1.0.0", "id": "remote", "description": "remote scenes",
                      "license": "proprietary", "links": [],
                      "extent": {"spatial": {"bbox": [[5.9, 49.6, 6.3, 49.9]]},
                                 "temporal": {"interval": [["2024-06-01T00:00:00Z", "2024-06-30T00:00:00Z"]]}}}
        sql(dsn, "SELECT create_collection(%s::jsonb)", json.dumps(collection))
        sql(dsn, "SELECT create_items(%s::jsonb)", json.dumps(remote))
        host = s3["endpoint"].removeprefix("http://")
        config = tmp_path_factory.mktemp("remote") / "tessera.yaml"
        by_cloud = "sortby: [{ field: properties.eo:cloud_cover, direction: asc }]"
        config.write_text(f"""
gdal:
  allowed_private_hosts: ["{web.authority}", "{host}"]
  config_options:
    AWS_S3_ENDPOINT: {host}
    AWS_HTTPS: "NO"
    AWS_VIRTUAL_HOSTING: "FALSE"
    AWS_ACCESS_KEY_ID: ${{TEST_KEY}}
    AWS_SECRET_ACCESS_KEY: ${{TEST_SECRET}}
layers:
  - name: remote
    source: {{ type: stac, pgstac: {dsn}, search: {{ collections: [remote], {by_cloud} }}, asset: visual,
               resampling: nearest }}
    cache: {{ store: none }}
  - name: local
    source: {{ type: stac, pgstac: {dsn}, search: {{ collections: [scenes], {by_cloud} }}, asset: visual,
               resampling: nearest }}
    cache: {{ store: none }}
""")
        monkeypatch.setenv("TEST_KEY", s3["key"])
        monkeypatch.setenv("TEST_SECRET", s3["secret"])
        with serving(tmp_path_factory, "--config", str(config)) as server:
            for z, x, y in TILES:
                local = server.get(f"/tiles/local/WebMercatorQuad/{z}/{x}/{y}.png")[2]
                assert server.get(f"/tiles/remote/WebMercatorQuad/{z}/{x}/{y}.png")[2] == local
        assert web.hits > 0
    finally:
        web.shutdown()
        sql(dsn, "DELETE FROM items WHERE collection = 'remote'")
        sql(dsn, "SELECT delete_collection('remote')")
