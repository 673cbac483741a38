"""The tessera command line: config checking and help text."""
import os
import subprocess

import pytest

from conftest import ROOT


def tessera(*args, **env):
    return subprocess.run([os.environ["TESSERA_BIN"], *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


def test_the_example_config_with_full_resolution_data_checks_out():
    data = os.environ.get("TESSERA_DATA_DIR", str(ROOT / "var/demo"))
    r = tessera("check", str(ROOT / "examples/tessera.yaml"), TESSERA_DATA_DIR=data)
    assert r.returncode == 0, r.stderr
    assert "ok: 2 layer(s)" in r.stdout


def test_an_unknown_config_key_is_named_and_stops_start_up(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("layers:\n  - name: a\n    source: { path: /x.tif }\n    max_zom: 3\n")
    r = tessera("serve", "--config", str(config), "--listen", "127.0.0.1:0")
    assert r.returncode != 0
    assert "max_zom" in r.stderr


def test_a_missing_source_file_names_the_layer(tmp_path):
    config = tmp_path / "missing.yaml"
    config.write_text("layers:\n  - name: lost\n    source: { path: /nonexistent/x.tif }\n")
    r = tessera("check", str(config))
    assert r.returncode != 0
    assert 'layer "lost"' in r.stderr and "/nonexistent/x.tif" in r.stderr


@pytest.mark.parametrize("name", ["nope.tif", "nope.pmtiles", "nope.mbtiles"])
def test_a_missing_file_on_the_command_line_is_said_first_in_the_systems_words(tmp_path, name):
    relief = ROOT / "data" / "shadedrelief-5400.tif"
    missing = f"../data/{name}"
    r = subprocess.run([os.environ["TESSERA_BIN"], "serve", str(relief), missing, "--listen", "127.0.0.1:0"],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode != 0
    first = r.stderr.strip().splitlines()[0]
    assert first == f"error: cannot open {missing}: No such file or directory (os error 2)", r.stderr
    assert "invalid config" not in r.stderr and "Error msg" not in r.stderr, r.stderr


def test_help_lists_the_commands():
    r = tessera("--help")
    assert r.returncode == 0
    for word in ("serve", "check", "seed", "demo-config"):
        assert word in r.stdout
    assert "TESSERA_LISTEN" in tessera("serve", "--help").stdout


def test_a_missing_source_files_cause_chain_reaches_stderr_exactly_once(tmp_path):
    config = tmp_path / "missing.yaml"
    config.write_text("layers:\n  - name: lost\n    source: { path: /nonexistent/x.tif }\n")
    r = tessera("check", str(config))
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert lines[0] == 'error: layer "lost": its source cannot be opened', r.stderr
    assert lines[1] == "  caused by: cannot open source /nonexistent/x.tif", r.stderr
    # GDAL's own message is the root cause, printed once (GDAL does not
    # print it to stderr itself as well).
    assert r.stderr.count("No such file or directory") == 1, r.stderr
    assert lines[-1].startswith("  caused by: ") and "No such file or directory" in lines[-1], r.stderr


def good_and_broken_config(tmp_path):
    """relief cached in a file store, and a second layer whose source does not exist."""
    cache = tmp_path / "cache"
    config = tmp_path / "two.yaml"
    config.write_text(f"""
stores:
  disk: {{ type: file, path: {cache}, memory: 0 }}
layers:
  - name: relief
    source: {{ path: {ROOT}/data/shadedrelief-5400.tif }}
    grids: [WebMercatorQuad]
    max_zoom: 6
    cache: {{ store: disk }}
  - name: broken
    source: {{ path: /nonexistent/broken.tif }}
    cache: {{ store: disk }}
""")
    return config, cache


def test_batch_commands_for_a_good_layer_ignore_a_broken_layer_of_the_config(tmp_path):
    config, cache = good_and_broken_config(tmp_path)
    assert tessera("check", str(config)).returncode == 1
    area = ["--config", str(config), "--layer", "relief", "--zoom", "0..1"]
    seeded = tessera("seed", *area)
    assert seeded.returncode == 0, seeded.stderr
    assert "seed complete: 5/5 tiles" in seeded.stdout, seeded.stdout
    assert len(list((cache / "relief" / "WebMercatorQuad").rglob("*.png"))) == 5
    archive = tmp_path / "relief.pmtiles"
    exported = tessera("export", *area, "--format", "pmtiles", "--to", str(archive))
    assert exported.returncode == 0, exported.stderr
    assert archive.stat().st_size > 0
    truncated = tessera("truncate", *area)
    assert truncated.returncode == 0, truncated.stderr
    assert list((cache / "relief" / "WebMercatorQuad").rglob("*.png")) == []
    # The broken layer itself still fails, naming its source.
    r = tessera("seed", "--config", str(config), "--layer", "broken", "--zoom", "0")
    assert r.returncode == 1 and "/nonexistent/broken.tif" in r.stderr, r.stderr


def test_relative_paths_are_read_from_the_config_files_directory_whatever_the_working_directory(tmp_path):
    site = tmp_path / "site"
    (site / "data").mkdir(parents=True)
    (site / "data" / "relief.tif").symlink_to(ROOT / "data" / "shadedrelief-5400.tif")
    config = site / "tessera.yaml"
    config.write_text("""
stores:
  disk: { type: file, path: cache/tiles, memory: 0 }
layers:
  - name: relief
    source: { path: data/relief.tif }
    grids: [WebMercatorQuad]
    cache: { store: disk }
""")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = subprocess.run([os.environ["TESSERA_BIN"], "seed", "--config", str(config), "--layer", "relief",
                        "--zoom", "0"], capture_output=True, text=True, timeout=120, cwd=elsewhere)
    assert r.returncode == 0, r.stderr
    assert (site / "cache" / "tiles" / "relief" / "WebMercatorQuad" / "0" / "0" / "0.png").is_file()
    assert not (elsewhere / "cache").exists()


@pytest.mark.parametrize("setting", [
    "server: { render_timeout_secs: 1e19 }",
    "cache: { lock_timeout_secs: 1e20 }",
    "server: { max_concurrent_renders: 4000000000000000000 }",
    "cache: { metatile_threads: 100000000 }",
    "encoding: { webp_quality: 999 }",
])
def test_a_limit_out_of_range_stops_start_up_with_its_range(tmp_path, setting):
    config = tmp_path / "limits.yaml"
    config.write_text(f"{setting}\nlayers:\n  - name: a\n    source: {{ path: {ROOT}/data/elev.tif }}\n")
    r = tessera("serve", "--config", str(config), "--listen", "127.0.0.1:0")
    assert r.returncode == 1, r.stderr
    name = setting.split(":")[0] + "." + setting.split("{ ")[1].split(":")[0]
    assert f"{name} is" in r.stderr and "must be from" in r.stderr, r.stderr
    assert "panicked" not in r.stderr


def test_a_fifo_as_a_source_is_refused_at_once(tmp_path):
    fifo = tmp_path / "stuck.tif"
    os.mkfifo(fifo)
    config = tmp_path / "fifo.yaml"
    config.write_text(f"layers:\n  - name: stuck\n    source: {{ path: {fifo} }}\n")
    r = subprocess.run([os.environ["TESSERA_BIN"], "check", str(config)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 1, r.stderr
    assert "FIFO" in r.stderr and 'layer "stuck"' in r.stderr, r.stderr


@pytest.mark.parametrize("path", [
    "GTIFF_DIR:1:/vsicurl/http://127.0.0.1:9/x.tif",
    "GTIFF_RAW:/vsicurl/http://127.0.0.1:9/x.tif",
    "GPKG:/vsicurl/http://127.0.0.1:9/x.gpkg:tiles",
    'NETCDF:\\"http://127.0.0.1:9/x.nc\\":v',
])
def test_a_private_address_wrapped_in_a_connection_string_is_refused(tmp_path, path):
    config = tmp_path / "wrapped.yaml"
    config.write_text(f'layers:\n  - name: sneaky\n    source: {{ path: "{path}" }}\n')
    r = tessera("check", str(config))
    assert r.returncode == 1, r.stderr
    assert "not allowed" in r.stderr and "127.0.0.1" in r.stderr and "private" in r.stderr, r.stderr


def test_check_refuses_a_listen_value_that_is_not_an_address(tmp_path):
    config = tmp_path / "listen.yaml"
    config.write_text(f"server: {{ listen: 'not an address' }}\n"
                      f"layers:\n  - name: a\n    source: {{ path: {ROOT}/data/elev.tif }}\n")
    r = tessera("check", str(config))
    assert r.returncode != 0
    assert "server.listen" in r.stderr and "not an address" in r.stderr, r.stderr


def test_check_no_open_validates_names_without_opening_sources(tmp_path):
    """`check --no-open` accepts a configuration whose files are elsewhere,
    and still refuses names that refer to nothing, with the closest one."""
    config = tmp_path / "elsewhere.yaml"
    config.write_text("layers:\n  - name: a\n    source: { path: /nowhere/a.tif }\n    grids: [WebMercatorQuad]\n")
    r = tessera("check", "--no-open", str(config))
    assert r.returncode == 0, r.stderr
    assert "ok: 1 layer(s), sources not opened" in r.stdout
    assert tessera("check", str(config)).returncode != 0, "opened, the source is missing"
    config.write_text("layers:\n  - name: a\n    source: { path: /nowhere/a.tif }\n    grids: [WebMercatorQuadd]\n")
    r = tessera("check", "--no-open", str(config))
    assert r.returncode == 1
    assert 'unknown grid "WebMercatorQuadd"; did you mean "WebMercatorQuad"?' in r.stderr, r.stderr
