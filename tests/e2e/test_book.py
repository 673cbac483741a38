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
from pathlib import Path

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


FILE = re.compile(r"<!-- file: ([\w.-]+) -->\s*$")
PORT = re.compile(r"127\.0\.0\.1:(\d+)")


def tutorial_files(page):
    """{name: text} of the blocks of `page` marked `<!-- file: NAME -->`
    on the line before (the files the tutorial has the reader write)."""
    files = {}
    lines = (BOOK / page).read_text().splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.startswith("```") and len(line.strip()) > 3:
            before = next((l for l in reversed(lines[:i]) if l.strip()), "")
            marked = FILE.match(before.strip())
            if marked:
                end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
                files[marked.group(1)] = "".join(lines[i + 1:end])
    return files


class Tutorial:
    """A tutorial run as written in an empty folder: its marked files
    written there, its shell lines run one by one (continuations joined,
    `#` comments skipped) with `tessera` the binary under test, each port
    of 127.0.0.1 it names moved to a free one (`url(8080)` is where that
    went), a line ending in `&` started in the background and waited for
    until its port answers; background processes stopped at the end."""

    def __init__(self, page, folder, env=None):
        from conftest import free_port
        self.page, self.folder = page, folder
        folder.mkdir(parents=True, exist_ok=True)
        text = (BOOK / page).read_text()
        self.ports = {p: free_port() for p in sorted(set(PORT.findall(text)))}
        bin_dir = folder.parent / f"{folder.name}-bin"
        bin_dir.mkdir(exist_ok=True)
        (bin_dir / "tessera").symlink_to(os.environ["TESSERA_BIN"])
        self.env = {**os.environ, **(env or {}), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
        self.background = []
        self.outputs = {}

    def url(self, port):
        return f"http://127.0.0.1:{self.ports[str(port)]}"

    def local(self, text):
        return PORT.sub(lambda m: f"127.0.0.1:{self.ports[m.group(1)]}", text)

    def local_command(self, line):
        """`line` with its ports moved, also a port given alone (`python3
        -m http.server 8000`)."""
        line = self.local(line)
        return re.sub(r"(?<=\s)(\d{4,5})(?=\s|$)", lambda m: str(self.ports.get(m.group(1), m.group(1))), line)

    def write_files(self):
        for name, text in tutorial_files(self.page).items():
            (self.folder / name).write_text(self.local(text))

    def commands(self):
        for block in blocks(self.page, "sh"):
            joined = re.sub(r"\\\n\s*", " ", block)
            for line in joined.splitlines():
                if line.strip() and not line.lstrip().startswith("#"):
                    yield line

    def run(self):
        import time
        self.write_files()
        for line in self.commands():
            command = self.local_command(line)
            if command.rstrip().endswith("&"):
                self.background.append(subprocess.Popen(
                    ["bash", "-c", "exec " + command.rstrip().rstrip("&")], cwd=self.folder, env=self.env,
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                port = next(p for p in self.ports.values() if str(p) in command)
                deadline = time.monotonic() + 60
                while not port_open(port):
                    assert self.background[-1].poll() is None, f"{command} exited"
                    assert time.monotonic() < deadline, f"{command}: port {port} never answered"
                    time.sleep(0.2)
                continue
            out = subprocess.run(["bash", "-c", command], cwd=self.folder, env=self.env,
                                 capture_output=True, text=True, timeout=600)
            assert out.returncode == 0, f"{command}\n{out.stdout}\n{out.stderr}"
            self.outputs[line] = out.stdout
        return self

    def output(self, containing):
        """The output of the one command containing `containing`."""
        [found] = [out for line, out in self.outputs.items() if containing in line]
        return found

    def stop(self):
        for process in self.background:
            process.terminate()
        for process in self.background:
            process.wait(timeout=20)


def port_open(port):
    import socket
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def screenshot_dir():
    path = ROOT / "target" / "book-screenshots"
    path.mkdir(parents=True, exist_ok=True)
    return path


def test_the_qgis_tutorial_runs_as_written(tmp_path):
    """The tutorial's configuration and commands, in an empty folder, then
    its layer loaded in QGIS (headless) from the capabilities URL, and the
    picture QGIS drew kept."""
    import shutil

    from conftest import qgis_wmts

    folder = tmp_path / "tutorial"
    folder.mkdir()
    shutil.copy(ROOT / "data" / "shadedrelief-5400.tif", folder / "shadedrelief.tif")
    tutorial = Tutorial("tutorial-qgis.md", folder)
    try:
        tutorial.run()
        assert "x-cache: hit" in tutorial.output("x-cache").lower()
        assert any((folder / "tiles").rglob("*.png")), "the seed stored no tile under ./tiles"
        found = qgis_wmts(f"{tutorial.url(8080)}/wmts/1.0.0/WMTSCapabilities.xml", "relief", "WebMercatorQuad",
                          (-4000000, -4000000, 4000000, 4000000), picture=screenshot_dir() / "qgis.png")
        assert found["valid"], found
        assert found["opaque"] > 50, found
    finally:
        tutorial.stop()


def test_the_maplibre_tutorial_runs_as_written_and_draws_the_map(tmp_path, browser):
    """The tutorial's data step, files and commands in an empty folder, then
    its page in headless Chromium: MapLibre draws the countries in the
    style's colours and the cities as circles (its picture kept)."""
    import shutil

    import numpy as np
    from selenium.webdriver.support.ui import WebDriverWait

    from imaging import decode

    demo = Path(os.environ["TESSERA_DATA_DIR"])
    folder = tmp_path / "tutorial"
    folder.mkdir()
    for part in ("countries", "places"):
        for f in (demo / part).glob("*"):
            shutil.copy(f, folder / f.name)
    tutorial = Tutorial("tutorial-maplibre.md", folder)
    try:
        tutorial.run()
        assert "/tiles/world/WebMercatorQuad/{z}/{x}/{y}.mvt" in tutorial.output("styles/world.json")
        assert tutorial.output("2/2/1.mvt").startswith("200 application/vnd.mapbox-vector-tile")
        browser.get(tutorial.url(8000) + "/")
        WebDriverWait(browser, 120).until(lambda d: d.execute_script(
            "return typeof map !== 'undefined' && map.loaded() && map.areTilesLoaded()"))
        picture = browser.find_element("id", "map").screenshot_as_png
        (screenshot_dir() / "maplibre.png").write_bytes(picture)
        rgb = decode(picture)[:3].astype(int)

        def share(colour):
            return (np.abs(rgb - np.array(colour)[:, None, None]).max(axis=0) <= 12).mean()

        assert share((0xcf, 0xe2, 0xf0)) > 0.1, "the sea (background)"
        assert share((0xe8, 0xc9, 0xa0)) > 0.05, "Europe's fill"
        assert share((0xe8, 0xe4, 0xd8)) > 0.05, "the other continents' fill"
        assert share((0xb0, 0x30, 0x30)) > 0.0005, "cities as circles"
        assert any((folder / "tiles").rglob("*.mvt")), "vector tiles cached under ./tiles"
    finally:
        tutorial.stop()


def test_the_time_series_tutorial_runs_as_written(tmp_path):
    """The series made, checked, seeded per day and served; the days' tiles
    differ (more water later), the capabilities list the days, and the day
    added while the server runs is served."""
    import shutil

    import numpy as np

    from imaging import decode

    folder = tmp_path / "tutorial"
    folder.mkdir()
    shutil.copy(ROOT / "data" / "elev.tif", folder / "elev.tif")
    tutorial = Tutorial("tutorial-time.md", folder)
    try:
        tutorial.run()
        checked = tutorial.output("tessera check")
        assert "3 value(s): 2026-03-01T00:00:00Z, 2026-03-02T00:00:00Z, 2026-03-03T00:00:00Z" in checked, checked
        assert "<Value>2026-03-03T00:00:00Z</Value>" in tutorial.output("WMTSCapabilities"), \
            tutorial.output("WMTSCapabilities")
        water = {}
        for name in ("first", "third", "fourth", "map"):
            pixels = decode((folder / f"{name}.png").read_bytes())
            water[name] = (pixels[3] > 0).mean()
        assert 0 < water["first"] < water["third"] < water["fourth"], water
        assert water["map"] > 0, water
        stored = {p.name for p in (folder / "tiles").iterdir()}
        assert {"flood~time=2026-03-01T000000Z", "flood~time=2026-03-03T000000Z"} <= stored, stored
    finally:
        tutorial.stop()


def test_the_stac_tutorial_runs_as_written(tmp_path):
    """The scenes cut, listed and served by day: on the first day both
    scenes cover the tile, on the second only the western one (its west
    half drawn, its east transparent); TileJSON lists both times."""
    import shutil

    import numpy as np

    from imaging import decode

    folder = tmp_path / "tutorial"
    folder.mkdir()
    shutil.copy(ROOT / "data" / "L7_ETMs.tif", folder / "L7_ETMs.tif")
    tutorial = Tutorial("tutorial-stac.md", folder)
    try:
        tutorial.run()
        assert "2 value(s): 2026-06-03T12:40:00Z, 2026-06-19T12:40:00Z" in tutorial.output("tessera check")
        assert "2026-06-19T12:40:00Z" in tutorial.output("tilejson.json")
        first = decode((folder / "june-3.png").read_bytes())
        second = decode((folder / "june-19.png").read_bytes())
        assert first.shape[0] == 3 or (first[3] == 255).mean() > 0.99, "both scenes cover the tile (opaque)"
        half = first.shape[2] // 2
        assert (second[3, :, :half // 2] == 255).mean() > 0.99, "the western scene drawn"
        assert (second[3, :, -half // 2:] == 0).mean() > 0.99, "no eastern scene on the 19th"
        same = abs(first[:3, :, :half // 2].astype(int) - second[:3, :, :half // 2])
        # One scene read alone or beside another: resampled alike, within a few levels.
        assert np.median(same) <= 1 and same.max() <= 8, "the same western pixels on both days"
    finally:
        tutorial.stop()


def test_the_cluster_tutorial_runs_as_written_on_minio(s3, tmp_path):
    """Two nodes on one MinIO bucket: the first renders the metatile, the
    second serves its neighbour from the bucket without rendering; the two
    seed shards fill the bucket, and a seeded tile is a hit."""
    import shutil
    import urllib.request

    from conftest import s3_bucket

    bucket = s3_bucket(s3, "tiles")
    for page in bucket.get_paginator("list_objects_v2").paginate(Bucket="tiles", Prefix="tessera/"):
        for o in page.get("Contents", []):
            bucket.delete_object(Bucket="tiles", Key=o["Key"])
    folder = tmp_path / "tutorial"
    folder.mkdir()
    shutil.copy(ROOT / "data" / "shadedrelief-5400.tif", folder / "shadedrelief.tif")
    tutorial = Tutorial("tutorial-cluster.md", folder, env={
        "S3_ENDPOINT": s3["endpoint"], "AWS_ACCESS_KEY_ID": s3["key"], "AWS_SECRET_ACCESS_KEY": s3["secret"]})
    try:
        tutorial.run()
        assert "x-cache: miss" in tutorial.output("5/16/10.png").lower()
        assert "x-cache: hit" in tutorial.output("5/17/10.png").lower()
        assert "x-cache: hit" in tutorial.output("seeded.png").lower()

        def renders(port):
            with urllib.request.urlopen(f"{tutorial.url(port)}/metrics", timeout=10) as r:
                text = r.read().decode()
            return sum(float(line.split()[-1]) for line in text.splitlines()
                       if line.startswith('tessera_metatile_renders_total{layer="relief"'))

        assert renders(8081) == 1 and renders(8082) == 0
        keys = [o["Key"] for page in bucket.get_paginator("list_objects_v2").paginate(Bucket="tiles", Prefix="tessera/")
                for o in page.get("Contents", [])]
        assert any("/4/" in k and k.endswith(".avro") for k in keys), keys[:20]
    finally:
        tutorial.stop()


def test_the_access_keys_tutorial_runs_as_written(tmp_path):
    """The key hashed to the configuration's hash, each caller's status as
    the tutorial says, the capabilities filtered, and QGIS reading the
    partner's layer through the URL with the key (and not without)."""
    import shutil

    from conftest import qgis_wmts

    folder = tmp_path / "tutorial"
    folder.mkdir()
    shutil.copy(ROOT / "data" / "shadedrelief-5400.tif", folder / "shadedrelief.tif")
    shutil.copy(ROOT / "data" / "elev.tif", folder / "elev.tif")
    tutorial = Tutorial("tutorial-keys.md", folder)
    try:
        tutorial.run()
        assert len(tutorial.output("openssl rand").strip()) == 48
        assert tutorial.output("hash-key").strip() in tutorial_files("tutorial-keys.md")["tessera.yaml"]
        statuses = [out.strip() for line, out in tutorial.outputs.items() if "%{http_code}" in line]
        assert statuses == ["200", "401", "200", "403"], statuses
        counts = [out.strip() for line, out in tutorial.outputs.items() if "grep -c" in line]
        assert counts == ["0", "1"], counts
        key = "c2f1e7a94b3d08e6f5a2c9d17b4e6a03f8d2c5b1e9a7f046"
        capabilities = f"{tutorial.url(8080)}/wmts/1.0.0/WMTSCapabilities.xml"
        found = qgis_wmts(f"{capabilities}?key={key}", "relief", "WebMercatorQuad",
                          (-4000000, -4000000, 4000000, 4000000))
        assert found["valid"] and found["opaque"] > 50, found
        assert not qgis_wmts(capabilities, "relief", "WebMercatorQuad", (-4000000, -4000000, 4000000, 4000000))["valid"]
    finally:
        tutorial.stop()


def built_book():
    """The book, built (once per run; scripts/docs is quick once mdBook is in)."""
    out = subprocess.run([str(ROOT / "scripts" / "docs")], capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stderr
    return Path(out.stdout.strip())


def anchors_of(html):
    return set(re.findall(r'id="([^"]+)"', html))


def test_the_pages_link_into_the_book_served_at_book(tmp_path, tmp_path_factory):
    """`--book DIR` serves the built book at /book/; the index, preview,
    OGC API and admin pages link into it, and every such link lands on a
    page of it and, for a #fragment, on a heading there."""
    import urllib.error
    import urllib.request

    from conftest import serving

    book = built_book()
    config = tmp_path / "admin.yaml"
    config.write_text(f"admin: {{ token: {'t' * 32} }}\n"
                      f"layers:\n  - name: relief\n    source: {{ path: {ROOT}/data/shadedrelief-5400.tif }}\n")
    with serving(tmp_path_factory, "--config", config, "--book", str(book)) as server:
        def get(path):
            with urllib.request.urlopen(server.url + path, timeout=30) as r:
                return r.status, r.headers["Content-Type"], r.read().decode()

        links = []
        for page in ("/", "/preview/relief", "/ogcapi?f=html", "/admin"):
            status, _, html = get(page)
            found = re.findall(r'href="(/book/[^"]*)"', html)
            assert found, f"{page} links nowhere into the book"
            links += found
        for link in set(links):
            path, _, fragment = link.partition("#")
            status, content_type, html = get(path)
            assert status == 200 and content_type.startswith("text/html"), link
            if fragment:
                assert fragment in anchors_of(html), f"{link}: no such heading"
        status, content_type, _ = get("/book/css/general.css")
        assert status == 200 and content_type.startswith("text/css")
        for bad in ("/book/../README.md", "/book/%2e%2e/%2e%2e/etc/passwd", "/book/nope.html"):
            try:
                urllib.request.urlopen(server.url + bad, timeout=10)
                raise AssertionError(f"{bad} was served")
            except urllib.error.HTTPError as e:
                assert e.code in (400, 404), (bad, e.code)
    with serving(tmp_path_factory, "--config", config, "--book", str(tmp_path / "none")) as server:
        try:
            urllib.request.urlopen(server.url + "/book/", timeout=10)
            raise AssertionError("a missing book was served")
        except urllib.error.HTTPError as e:
            assert e.code == 404
            assert "scripts/docs" in e.read().decode()


def test_every_page_an_error_names_is_in_the_book():
    """The `docs: page#heading` an error message ends with (the HTTP
    errors' `documented(...)`, the command line's config errors) names a
    page of the book and a heading on it."""
    named = set()
    for source in (ROOT / "crates").rglob("*.rs"):
        text = source.read_text()
        named |= set(re.findall(r'documented\("([^"]+)"\)', text))
        named |= set(re.findall(r'const [A-Z_]+: &str = "([a-z-]+(?:#[a-z0-9-]+)?)";\s*$', text, re.M)
                     if "fn documented" in text else [])
        named |= set(re.findall(r'docs: ([a-z-]+(?:#[a-z0-9-]+)?)', text))
    assert {"security#keys-and-tokens", "security#limits", "dimensions", "reference"} <= named, named
    bad = []
    for name in sorted(named):
        page, _, heading = name.partition("#")
        path = BOOK / f"{page}.md"
        if not path.exists():
            bad.append(f"{name}: no page {page}.md")
        elif heading and heading not in headings(path.read_text()):
            bad.append(f"{name}: no heading {heading} on {page}.md")
    assert not bad, "\n".join(bad)


def test_errors_name_their_page_in_every_protocol(tmp_path, tmp_path_factory):
    """A refused credential, a limit passed and an unknown dimension value
    end with the page of the book on them, in plain text, OGC XML and
    problem JSON alike."""
    import urllib.error
    import urllib.request

    from conftest import serving

    config = tmp_path / "keys.yaml"
    config.write_text(f"auth: {{ keys: [{{ id: a, sha256: {'a' * 64}, layers: ['*'] }}] }}\n"
                      f"limits: {{ wms_max_width: 512 }}\n"
                      f"layers:\n  - name: relief\n    source: {{ path: {ROOT}/data/shadedrelief-5400.tif }}\n")
    asked = {
        "/tiles/relief/WebMercatorQuad/0/0/0.png": "(docs: security#keys-and-tokens)",
        "/wms?SERVICE=WMS&VERSION=1.3.0&REQUEST=GetMap&LAYERS=relief&STYLES=&CRS=EPSG:4326"
        "&BBOX=-90,-180,90,180&WIDTH=256&HEIGHT=256&FORMAT=image/png&key=nope": "(docs: security#keys-and-tokens)",
        "/ogcapi/collections/relief/map?f=png&key=nope": "(docs: security#keys-and-tokens)",
    }
    with serving(tmp_path_factory, "--config", config) as server:
        for path, hint in asked.items():
            try:
                urllib.request.urlopen(server.url + path, timeout=30)
                raise AssertionError(f"{path} was served")
            except urllib.error.HTTPError as e:
                assert hint in e.read().decode(), path
    config.write_text(f"limits: {{ wms_max_width: 512 }}\n"
                      f"layers:\n  - name: relief\n    source: {{ path: {ROOT}/data/shadedrelief-5400.tif }}\n")
    with serving(tmp_path_factory, "--config", config) as server:
        try:
            urllib.request.urlopen(server.url + "/wms?SERVICE=WMS&VERSION=1.3.0&REQUEST=GetMap&LAYERS=relief"
                                   "&STYLES=&CRS=EPSG:4326&BBOX=-90,-180,90,180&WIDTH=4000&HEIGHT=256"
                                   "&FORMAT=image/png", timeout=30)
            raise AssertionError("a map past the limit was drawn")
        except urllib.error.HTTPError as e:
            body = e.read().decode()
            assert e.code == 400 and "(docs: security#limits)" in body, body


def test_the_readme_s_picture_is_a_screenshot_in_the_book():
    """The README's one picture is a PNG kept in the book's images."""
    readme = (ROOT / "README.md").read_text()
    [picture] = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", readme)
    path = ROOT / picture
    assert path.is_file() and path.parent == BOOK / "images", picture
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG") and 20_000 < len(data) < 1_000_000, len(data)


def test_every_tessera_command_in_the_book_uses_options_it_has():
    """Each `tessera SUBCOMMAND ... --option` in the shell blocks of the book
    and the README names a subcommand and options its `--help` lists."""
    texts = [p.read_text() for p in BOOK.glob("*.md")] + [(ROOT / "README.md").read_text()]
    helps = {}
    bad = []
    for text in texts:
        for block in re.findall(r"^```sh\n(.*?)^```", text, re.S | re.M):
            for line in re.sub(r"\\\n\s*", " ", block).splitlines():
                line = re.sub(r"(^|\s)#.*$", "", line)
                for command in re.findall(r"(?:^|[|;&]\s*|\s)tessera\s+([a-z-]+)([^|;&]*)", line):
                    sub, rest = command
                    if sub not in helps:
                        out = subprocess.run([os.environ["TESSERA_BIN"], sub, "--help"],
                                             capture_output=True, text=True, timeout=30)
                        helps[sub] = out.stdout if out.returncode == 0 else None
                    if helps[sub] is None:
                        bad.append(f"{line.strip()}: no subcommand {sub}")
                        continue
                    for option in re.findall(r"(?<!\S)(--[a-z][a-z-]*)", rest):
                        if not re.search(rf"{option}(?![\w-])", helps[sub]):
                            bad.append(f"{line.strip()}: {sub} has no {option}")
    assert len(helps) >= 5, helps.keys()
    assert not bad, "\n".join(bad)
