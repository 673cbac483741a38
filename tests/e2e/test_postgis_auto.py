"""PostGIS tables found by themselves: `tessera serve postgres://...`
publishes every table and view with a geometry column (in any schema) as a
layer named `schema.table`, and nothing else; `--watch` serves a table
created later and drops one removed; a config's `postgis_auto` source
narrows the schemas and leaves tables out."""
import json
import os
import re
import subprocess
import time
import uuid

import mapbox_vector_tile
import pytest

from conftest import fetch, serving

SPATIAL = {"public.roads", "other.lakes", "public.named_roads"}


def psql(url, *statements):
    r = subprocess.run(["psql", "-q", "-v", "ON_ERROR_STOP=1", url, *[a for s in statements for a in ("-c", s)]],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


@pytest.fixture(scope="module")
def database():
    """A database of three tables (one in another schema, one without a
    geometry) and a view; its URL."""
    base = os.environ.get("TESSERA_TEST_PG_URL")
    if not base:
        pytest.fail("TESSERA_TEST_PG_URL is not set: start PostGIS with scripts/postgis start", pytrace=False)
    name = f"auto_{uuid.uuid4().hex[:8]}"
    psql(base, f"CREATE DATABASE {name}")
    url = base.rsplit("/", 1)[0] + "/" + name
    psql(url,
         "CREATE EXTENSION postgis",
         "CREATE TABLE roads (id serial PRIMARY KEY, name text, lanes int, geom geometry(LineString, 4326))",
         "INSERT INTO roads (name, lanes, geom) VALUES ('ring', 2, 'SRID=4326;LINESTRING(0 0, 10 10)')",
         "CREATE SCHEMA other",
         "CREATE TABLE other.lakes (id serial PRIMARY KEY, name text, geom geometry(Polygon, 4326))",
         "INSERT INTO other.lakes (name, geom) VALUES ('pond', 'SRID=4326;POLYGON((0 0, 5 0, 5 5, 0 5, 0 0))')",
         "CREATE VIEW named_roads AS SELECT id, name, geom FROM roads WHERE name IS NOT NULL",
         "CREATE TABLE notes (id serial PRIMARY KEY, body text)")
    yield url
    psql(base, f"DROP DATABASE {name} WITH (FORCE)")


def wms_layers(server):
    status, body = fetch(server, "/wms?SERVICE=WMS&VERSION=1.3.0&REQUEST=GetCapabilities")
    assert status == 200
    return set(re.findall(r"<Layer[^>]*>\s*<Name>([^<]+)</Name>", body.decode())) - {"tessera"}


def test_a_database_url_serves_exactly_its_spatial_tables(database, tmp_path_factory):
    with serving(tmp_path_factory, database) as server:
        assert wms_layers(server) == SPATIAL
        for layer in SPATIAL:
            status, body = fetch(server, f"/tiles/{layer}/WebMercatorQuad/tilejson.json")
            assert status == 200, (layer, body[:200])
            doc = json.loads(body)
            assert [l["id"] for l in doc["vector_layers"]] == [layer]
        status, _ = fetch(server, "/tiles/public.notes/WebMercatorQuad/tilejson.json")
        assert status == 404
        # The tables' columns travel with the features (the key is the id).
        status, mvt = fetch(server, "/tiles/public.roads/WebMercatorQuad/1/1/0.mvt")
        assert status == 200
        tile = mapbox_vector_tile.decode(mvt)
        [feature] = tile["public.roads"]["features"]
        assert feature["properties"] == {"name": "ring", "lanes": 2}
        # And a map, drawn with the default style.
        status, png = fetch(server, "/tiles/other.lakes/WebMercatorQuad/3/4/3.png")
        assert status == 200 and png[:4] == b"\x89PNG"


def test_watch_serves_new_tables_and_drops_removed_ones(database, tmp_path_factory):
    with serving(tmp_path_factory, database, "--watch") as server:
        assert wms_layers(server) == SPATIAL
        psql(database, "CREATE TABLE rivers (id serial PRIMARY KEY, geom geometry(LineString, 4326))",
             "INSERT INTO rivers (geom) VALUES ('SRID=4326;LINESTRING(1 1, 2 2)')")
        deadline = time.monotonic() + 60
        while wms_layers(server) != SPATIAL | {"public.rivers"}:
            assert time.monotonic() < deadline, f"the new table was not served: {wms_layers(server)}"
            time.sleep(0.5)
        psql(database, "DROP TABLE rivers")
        deadline = time.monotonic() + 60
        while wms_layers(server) != SPATIAL:
            assert time.monotonic() < deadline, f"the dropped table is still served: {wms_layers(server)}"
            time.sleep(0.5)


def test_a_config_narrows_the_schemas_and_leaves_tables_out(database, tmp_path, tmp_path_factory):
    cfg = tmp_path / "auto.yaml"
    cfg.write_text(f"""
layers:
  - name: found
    source: {{ type: postgis_auto, path: "{database}", schemas: [public], exclude: ["public.named_*"] }}
    formats: [mvt]
    grids: [WebMercatorQuad]
""")
    with serving(tmp_path_factory, "--config", cfg) as server:
        assert wms_layers(server) == {"public.roads"}
    bad = tmp_path / "bad.yaml"
    bad.write_text("""
layers:
  - name: found
    source: { type: postgis_auto, path: "postgres://nobody@127.0.0.1:1/none" }
    formats: [mvt]
""")
    r = subprocess.run([os.environ["TESSERA_BIN"], "check", bad], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "cannot connect" in r.stderr, r.stderr
