"""The manual (docs/book): it builds with mdBook (`scripts/docs`), every
link between its pages and from the README lands on a page and, for a
`#fragment`, on a heading there, every YAML block parses, the
configuration reference is the one the binary's schema makes, with a
description for every key (a key changed without its doc fails here), the
clients cookbook's commands and the tutorial run as written against real
servers and clients (curl, GDAL, OWSLib, QGIS). The README stays the short
entry page it is meant to be.
"""
import os
import re
import subprocess

import yaml

from conftest import ROOT

BOOK = ROOT / "docs" / "book" / "src"
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def headings(markdown):
    """The anchors mdBook gives the headings of a page."""
    anchors = set()
    fenced = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if fenced or not line.startswith("#"):
            continue
        title = line.lstrip("#").strip().lower()
        anchor = re.sub(r"[^\w\- ]", "", title).replace(" ", "-")
        anchors.add(anchor)
    return anchors


def prose(markdown):
    """The text outside fenced code blocks."""
    return re.sub(r"^```.*?^```", "", markdown, flags=re.S | re.M)


def test_the_book_builds_with_every_page_in_its_summary():
    out = subprocess.run([str(ROOT / "scripts" / "docs")], capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stderr
    built = ROOT / "target" / "book"
    summary = (BOOK / "SUMMARY.md").read_text()
    pages = sorted(p.name for p in BOOK.glob("*.md") if p.name != "SUMMARY.md")
    for page in pages:
        assert f"]({page})" in summary, f"{page} is not in SUMMARY.md"
        html = built / page.replace(".md", ".html")
        assert html.is_file(), f"{html} was not built"
    # Included pages are built with what they include.
    assert "The data path" in (built / "architecture.html").read_text()


def test_links_land_on_pages_and_headings():
    sources = list(BOOK.glob("*.md")) + [ROOT / "README.md"]
    broken = []
    for source in sources:
        for target in LINK.findall(prose(source.read_text())):
            if re.match(r"^[a-z]+:", target):
                continue
            path, _, fragment = target.partition("#")
            page = (source.parent / path).resolve() if path else source
            if not page.exists():
                broken.append(f"{source.name}: {target} (no such file)")
                continue
            if fragment and page.suffix == ".md" and fragment not in headings(page.read_text()):
                broken.append(f"{source.name}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


FRAGMENT = re.compile(r"<!-- fragment: ([\w-]+) -->\s*$")
# How a fragment is made a whole configuration: `top` is top-level sections
# (a layer is added), `layers` items of `layers:`, `source-layers` the
# `layers:` of a vector source.
WRAP = {
    "top": lambda block: block + "\nlayers:\n  - name: fragment\n    source: { path: fragment.tif }\n",
    "layers": lambda block: "layers:\n" + block,
    "source-layers": lambda block: (
        "layers:\n  - name: fragment\n    source:\n      type: vector\n      path: fragment.gpkg\n"
        + block),
}


def yaml_blocks():
    """(page, block number, marker or None, text) of every YAML block; the
    marker is an HTML comment on the line before the block
    (`<!-- fragment: top -->`), which the rendered page does not show."""
    found = []
    for page in sorted(BOOK.glob("*.md")):
        lines = page.read_text().splitlines(keepends=True)
        n = 0
        i = 0
        while i < len(lines):
            if lines[i].startswith("```yaml"):
                n += 1
                before = next((l for l in reversed(lines[:i]) if l.strip()), "")
                marker = FRAGMENT.match(before.strip())
                end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
                found.append((page.name, n, marker.group(1) if marker else None, "".join(lines[i + 1:end])))
                i = end
            i += 1
    return found


def test_every_yaml_block_passes_tessera_check(tmp_path):
    """Each YAML block of the book is a configuration `tessera check
    --no-open` accepts (keys, types, the names that refer to stores, grids
    and layers), a fragment once wrapped as its marker says; `${VAR}`s set."""
    bad = []
    blocks_seen = yaml_blocks()
    assert len(blocks_seen) > 20
    for page, n, marker, block in blocks_seen:
        if marker == "helm-values":
            continue  # checked by helm template in test_helm.py
        if marker is not None and marker not in WRAP:
            bad.append(f"{page} block {n}: unknown fragment marker {marker!r}")
            continue
        config = WRAP[marker](block) if marker else block
        try:
            yaml.safe_load(config)
        except yaml.YAMLError as e:
            bad.append(f"{page} block {n}: {e}")
            continue
        path = tmp_path / f"{page}-{n}.yaml"
        path.write_text(config)
        env = {**os.environ, **{v: "x" * 40 for v in re.findall(r"\$\{(\w+)\}", config)}}
        out = subprocess.run([os.environ["TESSERA_BIN"], "check", "--no-open", str(path)],
                             capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
        if out.returncode != 0:
            bad.append(f"{page} block {n} ({marker or 'whole'}): {out.stderr.strip()}")
    assert not bad, "\n".join(bad)


def test_the_readme_is_the_short_entry_page():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    for section in ("## Two commands", "## Quick starts", "next to its peers", "## The book"):
        assert section in readme, section


def test_the_reference_is_the_schema_s_with_every_key_described(tmp_path):
    schema = tmp_path / "schema.json"
    out = subprocess.run([os.environ["TESSERA_BIN"], "config-schema"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    schema.write_text(out.stdout)
    made = subprocess.run(
        ["python3", str(ROOT / "scripts" / "config-reference"), str(schema)],
        capture_output=True, text=True, timeout=60,
    )
    assert made.returncode == 0, made.stderr
    committed = (BOOK / "reference.md").read_text()
    assert made.stdout == committed, (
        "docs/book/src/reference.md is not the schema's: run "
        "`tessera config-schema > s.json && scripts/config-reference s.json > docs/book/src/reference.md`"
    )
    rows = [line for line in committed.splitlines() if line.startswith("| `")]
    assert len(rows) > 200
    undescribed = [row.split("|")[1].strip() for row in rows if row.rstrip().endswith("|  |")]
    assert undescribed == [], undescribed


def blocks(page, language):
    return re.findall(rf"^```{language}\n(.*?)^```", (BOOK / page).read_text(), re.S | re.M)


def test_the_cookbook_s_commands_and_python_run_against_the_demo(tessera, tmp_path):
    """The clients cookbook's shell commands (curl, GDAL) and its OWSLib
    script, run as written against a demo server (the lines that need a
    key, which the demo does not ask for, left out)."""
    url = tessera.url
    for block in blocks("clients.md", "sh"):
        for line in block.splitlines():
            if not line.strip() or line.lstrip().startswith("#") or "$KEY" in line:
                continue
            command = line.replace("http://127.0.0.1:8080", url)
            out = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True, timeout=300)
            assert out.returncode == 0, f"{command}\n{out.stdout}\n{out.stderr}"
    assert (tmp_path / "relief.tif").stat().st_size > 0
    assert (tmp_path / "map.png").read_bytes().startswith(b"\x89PNG")
    [script] = blocks("clients.md", "python")
    out = subprocess.run(
        [os.environ.get("TESSERA_PYTHON", str(ROOT / "var" / "venv" / "bin" / "python")), "-c",
         script.replace("http://127.0.0.1:8080", url)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "relief" in out.stdout
    assert (tmp_path / "tile.png").read_bytes().startswith(b"\x89PNG")


def test_the_qgis_tutorial_runs_as_written(tmp_path):
    """The tutorial's configuration and commands, in an empty folder (the
    `tessera` of the commands is the binary under test; the server on a
    free port), then its layer loaded in QGIS from the capabilities URL."""
    import shutil
    import time
    import urllib.request

    from conftest import free_port, qgis_wmts

    folder = tmp_path / "tutorial"
    folder.mkdir()
    shutil.copy(ROOT / "data" / "shadedrelief-5400.tif", folder / "shadedrelief.tif")
    [config] = blocks("tutorial-qgis.md", "yaml")
    (folder / "tessera.yaml").write_text(config)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "tessera").symlink_to(os.environ["TESSERA_BIN"])
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = None
    try:
        for block in blocks("tutorial-qgis.md", "sh"):
            for line in block.splitlines():
                if not line.strip() or line.lstrip().startswith("#"):
                    continue
                command = line.replace("127.0.0.1:8080", f"127.0.0.1:{port}")
                if command.rstrip().endswith("&"):
                    server = subprocess.Popen(["bash", "-c", command.rstrip().rstrip("&")], cwd=folder, env=env,
                                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    deadline = time.monotonic() + 60
                    while time.monotonic() < deadline:
                        try:
                            with urllib.request.urlopen(url + "/health", timeout=2):
                                break
                        except OSError:
                            time.sleep(0.2)
                    continue
                out = subprocess.run(["bash", "-c", command], cwd=folder, env=env, capture_output=True,
                                     text=True, timeout=600)
                assert out.returncode == 0, f"{command}\n{out.stdout}\n{out.stderr}"
                if "x-cache" in command:
                    assert "x-cache: hit" in out.stdout.lower(), out.stdout
        assert any((folder / "tiles").rglob("*.png")), "the seed stored no tile under ./tiles"
        found = qgis_wmts(f"{url}/wmts/1.0.0/WMTSCapabilities.xml", "relief", "WebMercatorQuad",
                          (-4000000, -4000000, 4000000, 4000000))
        assert found["valid"], found
        assert found["opaque"] > 50, found
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=20)
