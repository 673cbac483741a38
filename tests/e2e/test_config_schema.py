"""The configuration's JSON Schema, generated from the config types: `tessera
config-schema` prints what a server serves at /schema/config.json; the
reference validator (the `jsonschema` package, draft 2020-12) accepts the
demo, the example and the Debian package's configurations with it, and
refuses what `tessera check` refuses for the same reason (an unknown key, a
value of the wrong kind), so editors flag in place what the server would
refuse at start. Every key of a layer carries its description."""
import json
import os
import re
import subprocess

import jsonschema
import yaml

from conftest import ROOT, fetch


def binary():
    return os.environ["TESSERA_BIN"]


def schema():
    out = subprocess.run([binary(), "config-schema"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def config_of(text):
    """The YAML `text` as the schema sees it: `${NAME}` (substituted by
    tessera before parsing) left as it is where a string is written."""
    return yaml.safe_load(text)


def errors(validator, doc):
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(doc)]


def test_the_schema_printed_is_the_schema_served(tessera):
    status, body = fetch(tessera, "/schema/config.json")
    assert status == 200
    assert json.loads(body) == schema()


def test_the_shipped_configurations_are_valid():
    validator = jsonschema.Draft202012Validator(schema())
    demo = subprocess.run([binary(), "demo-config"], capture_output=True, text=True, timeout=60).stdout
    shipped = {
        "demo": demo,
        "examples/tessera.yaml": (ROOT / "examples" / "tessera.yaml").read_text(),
        "packaging/tessera.yaml": (ROOT / "packaging" / "tessera.yaml").read_text(),
    }
    for name, text in shipped.items():
        # Variables stand for values of any kind: a placeholder of the
        # schema's kind for the keys the shipped files use them in.
        doc = config_of(re.sub(r"\$\{[^}]*\}", "placeholder-0123456789abcdef", text))
        assert errors(validator, doc) == [], name


def test_what_check_refuses_the_schema_refuses(tmp_path):
    validator = jsonschema.Draft202012Validator(schema())
    relief = ROOT / "var" / "demo" / "shadedrelief-5400.tif"
    if not relief.exists():
        relief = ROOT / "data" / "shadedrelief-5400.tif"
    good = {"layers": [{"name": "relief", "source": {"path": str(relief)}}]}
    assert errors(validator, good) == []
    typo = {"layers": [{"name": "relief", "source": {"path": str(relief)}, "max_zom": 8}]}
    wrong_kind = {"layers": [{"name": "relief", "source": {"path": str(relief)}, "max_zoom": "eight"}]}
    unknown_source = {"layers": [{"name": "relief", "source": {"type": "gdal", "pth": str(relief)}}]}
    for name, doc in {"typo": typo, "wrong_kind": wrong_kind, "unknown_source_key": unknown_source}.items():
        assert errors(validator, doc), f"the schema takes the {name} config"
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(doc))
        out = subprocess.run([binary(), "check", str(path)], capture_output=True, text=True, timeout=120)
        assert out.returncode != 0, f"tessera check takes the {name} config"
    out = subprocess.run([binary(), "check", str(tmp_path / "typo.yaml")], capture_output=True, text=True, timeout=120)
    assert "max_zoom" in out.stderr, out.stderr


def test_layer_keys_say_what_they_are():
    doc = schema()
    layer = doc["$defs"]["LayerConfig"]
    assert layer.get("additionalProperties") is False
    undescribed = [k for k, v in layer["properties"].items() if not v.get("description")]
    assert undescribed == [], undescribed
    # Sources are told apart by `type`, each with its own keys.
    kinds = {
        kind
        for one in doc["$defs"]["SourceSpec"]["oneOf"]
        for kind in one["properties"]["type"]["enum"]
    }
    assert {"gdal", "wms", "xyz", "wmts", "mosaic", "vector", "postgis_auto", "pmtiles", "mbtiles"} <= kinds
