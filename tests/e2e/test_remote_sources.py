"""A COG read over HTTP through GDAL's /vsicurl/, and the policy that
refuses private-network URLs unless the config allows them."""
import os
import subprocess

import pytest

from cogserver import start_cog_server
from conftest import assert_same_tile, serving

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def cog_server():
    server = start_cog_server()
    yield server.url
    server.shutdown()


@pytest.fixture
def redirecting_pair():
    """Two COG servers; the front one redirects /to/NAME to the back one."""
    front, back = start_cog_server(), start_cog_server()
    front.redirect_to = back.url
    yield front, back
    front.shutdown()
    back.shutdown()


def write_config(path, url, allow_private):
    path.write_text(f"""
gdal:
  allow_private_network: {str(allow_private).lower()}
layers:
  - name: remote
    source: {{ path: "{url}/shadedrelief-5400.tif" }}
    max_zoom: 8
  - name: local
    source: {{ path: "{ROOT}/data/shadedrelief-5400.tif" }}
    max_zoom: 8
""")


def test_a_cog_over_http_renders_the_same_tile_as_the_local_file(cog_server, tmp_path_factory):
    config = tmp_path_factory.mktemp("remote") / "tessera.yaml"
    write_config(config, cog_server, allow_private=True)
    with serving(tmp_path_factory, "--config", str(config)) as server:
        assert_same_tile(server, "/tiles/remote/WebMercatorQuad/4/8/5.png", "/tiles/local/WebMercatorQuad/4/8/5.png")


def test_a_private_network_url_is_refused_unless_allowed(cog_server, tmp_path):
    config = tmp_path / "tessera.yaml"
    write_config(config, cog_server, allow_private=False)
    r = subprocess.run([os.environ["TESSERA_BIN"], "check", str(config)], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "loopback, link-local or private address" in r.stderr, r.stderr
    assert "allow_private_network" in r.stderr


def redirect_config(path, front, allowed):
    allowed_yaml = ", ".join(f'"{a}"' for a in allowed)
    path.write_text(f"""
gdal:
  allowed_private_hosts: [{allowed_yaml}]
layers:
  - name: remote
    source: {{ path: "{front.url}/to/shadedrelief-5400.tif" }}
    max_zoom: 8
  - name: local
    source: {{ path: "{ROOT}/data/shadedrelief-5400.tif" }}
    max_zoom: 8
""")


def test_a_redirect_to_a_private_host_is_refused_although_gdal_follows_redirects(redirecting_pair, tmp_path):
    front, back = redirecting_pair
    config = tmp_path / "tessera.yaml"
    redirect_config(config, front, [front.authority])
    r = subprocess.run([os.environ["TESSERA_BIN"], "check", str(config)], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0, r.stdout
    assert "cannot open source" in r.stderr, r.stderr
    assert front.hits >= 1, "the listed host is reached"
    assert back.hits == 0, f"the redirect target was reached {back.hits} times"


def test_listed_private_hosts_are_reached_through_the_guard_redirects_included(redirecting_pair, tmp_path_factory):
    front, back = redirecting_pair
    config = tmp_path_factory.mktemp("redirect") / "tessera.yaml"
    redirect_config(config, front, [front.authority, back.authority])
    with serving(tmp_path_factory, "--config", str(config)) as server:
        assert_same_tile(server, "/tiles/remote/WebMercatorQuad/4/8/5.png", "/tiles/local/WebMercatorQuad/4/8/5.png")
    assert back.hits >= 2, "range reads went to the redirect target"
