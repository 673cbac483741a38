"""The manual (docs/book): it builds with mdBook (`scripts/docs`), every
link between its pages and from the README lands on a page and, for a
`#fragment`, on a heading there, and every YAML block parses. The README
stays the short entry page it is meant to be.

What is left for the book (the configuration reference generated from the
schema, each YAML block passing `tessera check`, the tutorials' commands
run) is listed in the issue that asks for it.
"""
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


def test_every_yaml_block_parses():
    bad = []
    for page in BOOK.glob("*.md"):
        for n, block in enumerate(re.findall(r"^```yaml\n(.*?)^```", page.read_text(), re.S | re.M)):
            try:
                yaml.safe_load(re.sub(r"\$\{[^}]*\}", "x", block))
            except yaml.YAMLError as e:
                bad.append(f"{page.name} block {n + 1}: {e}")
    assert not bad, "\n".join(bad)


def test_the_readme_is_the_short_entry_page():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    for section in ("## Two commands", "## Quick starts", "next to its peers", "## The book"):
        assert section in readme, section
