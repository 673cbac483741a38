"""Glyph SDFs from a generator tessera does not share code with: TinySDF
(MapLibre's own, vendored) drawing a font file in headless Chromium, and
glyph-range PBFs made from its fields with the reference schema
(fixtures/glyphs.proto compiled by protoc), for a fixture folder MapLibre
can read instead of tessera's `/fonts/`."""
import importlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "crates" / "tessera-carto" / "assets" / "NotoSans-Regular.ttf"
FIXTURES = ROOT / "tests" / "e2e" / "fixtures"

# What MapLibre asks of a glyph server (and TinySDF of itself for local
# glyphs): 24 px, a 3 px buffer, radius 8, cutoff 0.25.
SIZE, BUFFER = 24, 3


def compile_schema(out):
    """The reference schema compiled by protoc (grpcio-tools, in a process
    of its own: its C++ library and QGIS's protobuf must not share one) into
    `out` (made if missing) and imported: the module `glyphs_pb2`."""
    out.mkdir(parents=True, exist_ok=True)
    run = subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{FIXTURES}", f"--python_out={out}",
                          str(FIXTURES / "glyphs.proto")], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    sys.path.insert(0, str(out))
    try:
        return importlib.import_module("glyphs_pb2")
    finally:
        sys.path.remove(str(out))


def tinysdf_fields(browser, page_server, chars, font=BUNDLED):
    """TinySDF's field and metrics of each of `chars` drawn from the font
    file `font` in Chromium, by code point: `data` (row-major bytes of
    `width` x `height`), `glyphWidth`, `glyphHeight`, `glyphLeft`,
    `glyphTop` (from the baseline) and `glyphAdvance`."""
    from selenium.webdriver.support.ui import WebDriverWait
    url, folder = page_server
    if not (folder / "tiny-sdf").exists():
        shutil.copytree(ROOT / "tests" / "e2e" / "vendor" / "tiny-sdf", folder / "tiny-sdf")
    shutil.copy(font, folder / "tinysdf-font.ttf")
    (folder / "tinysdf.html").write_text("""<!doctype html><html><head><meta charset="utf-8">
<style>@font-face { font-family: 'Sample'; src: url(tinysdf-font.ttf); }</style></head><body>
<script type="module">
import TinySDF from './tiny-sdf/index.js';
await document.fonts.load('%dpx Sample');
const sdf = new TinySDF({fontSize: %d, buffer: %d, radius: 8, cutoff: 0.25, fontFamily: 'Sample'});
window.fields = {};
for (const c of %s) {
  const g = sdf.draw(c);
  window.fields[c.codePointAt(0)] = {data: Array.from(g.data), width: g.width, height: g.height,
    glyphWidth: g.glyphWidth, glyphHeight: g.glyphHeight, glyphTop: g.glyphTop, glyphLeft: g.glyphLeft,
    glyphAdvance: g.glyphAdvance};
}
window.done = true;
</script></body></html>""" % (SIZE, SIZE, BUFFER, json.dumps(sorted(set(chars)))))
    browser.get(url + "/tinysdf.html")
    WebDriverWait(browser, 120).until(lambda d: d.execute_script("return window.done === true"))
    return {int(k): v for k, v in browser.execute_script("return window.fields").items()}


def ascender_px(font=BUNDLED):
    """The font's ascender at 24 px, from its `hhea` table (fontTools): a
    glyph range's `top` counts from it, as fontnik's do."""
    from fontTools.ttLib import TTFont
    face = TTFont(str(font), lazy=True)
    return round(face["hhea"].ascent * SIZE / face["head"].unitsPerEm)


def write_ranges(proto, fields, folder, fontstack, ascender):
    """Glyph-range PBFs of TinySDF's `fields` under `folder/fontstack/`, as
    a glyph server lays them out (`{start}-{end}.pbf`, 256 code points a
    range). The bitmap is the field's ink box plus the 3 px buffer, which is
    what TinySDF draws (its canvas has the buffer on each side)."""
    target = folder / fontstack
    target.mkdir(parents=True, exist_ok=True)
    ranges = {}
    for code, f in fields.items():
        ranges.setdefault(code // 256 * 256, []).append((code, f))
    for start, glyphs in ranges.items():
        message = proto.glyphs()
        stack = message.stacks.add()
        stack.name, stack.range = fontstack, f"{start}-{start + 255}"
        for code, f in sorted(glyphs):
            glyph = stack.glyphs.add()
            glyph.id = code
            glyph.width, glyph.height = f["glyphWidth"], f["glyphHeight"]
            glyph.left, glyph.top = f["glyphLeft"], f["glyphTop"] - ascender
            glyph.advance = round(f["glyphAdvance"])
            if f["glyphWidth"] and f["glyphHeight"]:
                assert (f["width"], f["height"]) == (f["glyphWidth"] + 2 * BUFFER, f["glyphHeight"] + 2 * BUFFER)
                glyph.bitmap = bytes(f["data"])
        (target / f"{start}-{start + 255}.pbf").write_bytes(message.SerializeToString())
    return target
