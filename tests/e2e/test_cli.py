"""The tessera command line: config checking and help text."""
import os
import subprocess

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


def test_help_lists_the_commands():
    r = tessera("--help")
    assert r.returncode == 0
    for word in ("serve", "check", "seed", "demo-config"):
        assert word in r.stdout
    assert "TESSERA_LISTEN" in tessera("serve", "--help").stdout
