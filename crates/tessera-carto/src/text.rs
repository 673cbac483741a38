//! Text for labels: shaped with rustybuzz (the Rust port of HarfBuzz) in
//! the fonts labels use, laid out along a baseline and turned into
//! `tiny-skia` paths that are filled (the text) and stroked (its halo).
//!
//! The text is split into runs of one direction (the Unicode bidirectional
//! algorithm, `unicode-bidi`: Arabic and Hebrew right to left, numbers and
//! Latin within them left to right, in visual order), each run into pieces
//! of one font (the first of the fonts that has a character: the bundled
//! Noto Sans, then the configured `fonts:` in their order, see
//! [`use_fonts`]), and each piece shaped for its script: ligatures, Arabic
//! joining, Indic reordering and marks, kerning. A character no font has
//! is drawn as the first font's missing-glyph box.

use std::sync::{Arc, OnceLock, RwLock};

use tiny_skia::{Path, PathBuilder, Transform};
use ttf_parser::{Face, GlyphId, OutlineBuilder};

/// The bundled font's bytes: Noto Sans Regular (SIL Open Font License 1.1,
/// `assets/OFL.txt`).
pub static BUNDLED_FONT: &[u8] = include_bytes!("../assets/NotoSans-Regular.ttf");

/// A font labels may be set in: a file's bytes and a face of it.
#[derive(Clone)]
pub struct LabelFont {
    data: Arc<[u8]>,
    index: u32,
}

impl std::fmt::Debug for LabelFont {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LabelFont")
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

impl LabelFont {
    /// Face `index` of a font file's `data`, when it parses.
    pub fn new(data: Arc<[u8]>, index: u32) -> Option<LabelFont> {
        Face::parse(&data, index).ok()?;
        Some(LabelFont { data, index })
    }

    fn face(&self) -> Face<'_> {
        Face::parse(&self.data, self.index).expect("a label font parsed when it was added")
    }
}

/// The fonts labels fall back across, the bundled font first.
fn fonts() -> Arc<Vec<LabelFont>> {
    let slot = slot();
    slot.read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

fn slot() -> &'static RwLock<Arc<Vec<LabelFont>>> {
    static FONTS: OnceLock<RwLock<Arc<Vec<LabelFont>>>> = OnceLock::new();
    FONTS.get_or_init(|| {
        let bundled = LabelFont::new(Arc::from(BUNDLED_FONT), 0).expect("the bundled font parses");
        RwLock::new(Arc::new(vec![bundled]))
    })
}

/// Labels fall back, after the bundled font, across `fallback` in order
/// (the configured `fonts:`), from the next label laid out on.
pub fn use_fonts(fallback: Vec<LabelFont>) {
    let mut all = vec![fonts()[0].clone()];
    all.extend(fallback);
    *slot()
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(all);
}

/// One shaped glyph: its font (in the fallback list), id, pen position
/// along the baseline and offset from it, and advance, in pixels.
#[derive(Debug, Clone, Copy)]
struct Placed {
    font: usize,
    id: GlyphId,
    x: f32,
    dy: f32,
    advance: f32,
}

/// A line of text shaped at a size: each glyph with its place along the
/// baseline, in pixels, in visual order (left to right).
#[derive(Debug, Clone)]
pub struct Line {
    glyphs: Vec<Placed>,
    fonts: Arc<Vec<LabelFont>>,
    /// Length along the baseline, in pixels.
    pub width: f32,
    /// Height above the baseline of capital letters, in pixels.
    pub ascent: f32,
    /// Depth below the baseline of the deepest descender (positive), in
    /// pixels.
    pub descent: f32,
    size: f32,
}

impl Line {
    /// `text` shaped at `size` pixels per em (control characters left out).
    pub fn new(text: &str, size: f32) -> Line {
        let fonts = fonts();
        let text: String = text.chars().filter(|c| !c.is_control()).collect();
        let mut glyphs = Vec::with_capacity(text.len());
        let mut x = 0.0;
        if !text.is_empty() {
            let bidi = unicode_bidi::BidiInfo::new(&text, None);
            for paragraph in &bidi.paragraphs {
                let (levels, runs) = bidi.visual_runs(paragraph, paragraph.range.clone());
                for run in runs {
                    let rtl = levels[run.start].is_rtl();
                    let mut pieces = by_font(&text[run.clone()], &fonts);
                    if rtl {
                        // A right-to-left run's pieces read from the right.
                        pieces.reverse();
                    }
                    for (font, piece) in pieces {
                        x = shape(&fonts, font, piece, rtl, size, x, &mut glyphs);
                    }
                }
            }
        }
        let first = fonts[0].face();
        let scale = size / f32::from(first.units_per_em());
        Line {
            glyphs,
            width: x,
            ascent: f32::from(first.capital_height().unwrap_or(first.ascender())) * scale,
            descent: -f32::from(first.descender()) * scale,
            size,
            fonts,
        }
    }

    /// Its size in pixels per em.
    pub fn size(&self) -> f32 {
        self.size
    }

    /// Its glyphs: the offset of each along the baseline and its advance.
    pub fn advances(&self) -> impl Iterator<Item = (f32, f32)> + '_ {
        self.glyphs.iter().map(|g| (g.x, g.advance))
    }

    /// The outline of the whole line with its baseline's left end at the
    /// origin, then moved by `at`.
    pub fn path(&self, at: Transform) -> Option<Path> {
        let mut pb = PathBuilder::new();
        let faces: Vec<Face<'_>> = self.fonts.iter().map(LabelFont::face).collect();
        for g in &self.glyphs {
            self.trace(
                &mut pb,
                &faces[g.font],
                g,
                Transform::from_translate(g.x, g.dy).post_concat(at),
            );
        }
        pb.finish()
    }

    /// The outline of glyph `index` alone, its baseline's left end at the
    /// origin, then moved by `at` (text along a line: a glyph at a time).
    pub fn glyph_path(&self, index: usize, at: Transform) -> Option<Path> {
        let mut pb = PathBuilder::new();
        let g = &self.glyphs[index];
        let face = self.fonts[g.font].face();
        self.trace(
            &mut pb,
            &face,
            g,
            Transform::from_translate(0.0, g.dy).post_concat(at),
        );
        pb.finish()
    }

    fn trace(&self, pb: &mut PathBuilder, face: &Face<'_>, g: &Placed, at: Transform) {
        let scale = self.size / f32::from(face.units_per_em());
        // Font units are y-up; pixels are y-down.
        let mut out = Outline::new(pb, Transform::from_scale(scale, -scale).post_concat(at));
        face.outline_glyph(g.id, &mut out);
    }
}

/// `text` cut into pieces each set in one font: the first that has the
/// character; marks and joiners stay with the character before them.
fn by_font<'a>(text: &'a str, fonts: &[LabelFont]) -> Vec<(usize, &'a str)> {
    let faces: Vec<Face<'_>> = fonts.iter().map(LabelFont::face).collect();
    let mut pieces: Vec<(usize, &str)> = Vec::new();
    let mut start = 0;
    let mut current: Option<usize> = None;
    for (i, c) in text.char_indices() {
        let joins = matches!(c, '\u{200c}' | '\u{200d}' | '\u{fe00}'..='\u{fe0f}')
            || unicode_properties::UnicodeGeneralCategory::general_category_group(c)
                == unicode_properties::GeneralCategoryGroup::Mark;
        let font = if joins && current.is_some() {
            current
        } else {
            Some(
                faces
                    .iter()
                    .position(|f| f.glyph_index(c).is_some())
                    .unwrap_or(0),
            )
        };
        if font != current {
            if let Some(f) = current {
                pieces.push((f, &text[start..i]));
            }
            start = i;
            current = font;
        }
    }
    if let Some(f) = current {
        pieces.push((f, &text[start..]));
    }
    pieces
}

/// `piece` shaped in font `font` from pen position `x`, its glyphs pushed
/// onto `out` in visual order; the pen position after it.
fn shape(
    fonts: &[LabelFont],
    font: usize,
    piece: &str,
    rtl: bool,
    size: f32,
    mut x: f32,
    out: &mut Vec<Placed>,
) -> f32 {
    let Some(face) = rustybuzz::Face::from_slice(&fonts[font].data, fonts[font].index) else {
        return x;
    };
    let scale = size / f32::from(face.units_per_em() as u16);
    let mut buffer = rustybuzz::UnicodeBuffer::new();
    buffer.push_str(piece);
    buffer.guess_segment_properties();
    buffer.set_direction(if rtl {
        rustybuzz::Direction::RightToLeft
    } else {
        rustybuzz::Direction::LeftToRight
    });
    let shaped = rustybuzz::shape(&face, &[], buffer);
    for (info, pos) in shaped.glyph_infos().iter().zip(shaped.glyph_positions()) {
        let advance = pos.x_advance as f32 * scale;
        out.push(Placed {
            font,
            id: GlyphId(u16::try_from(info.glyph_id).unwrap_or(0)),
            x: x + pos.x_offset as f32 * scale,
            dy: -(pos.y_offset as f32) * scale,
            advance,
        });
        x += advance;
    }
    x
}

/// Writes a glyph's outline into a path builder, through a transform.
pub(crate) struct Outline<'a> {
    pb: &'a mut PathBuilder,
    at: Transform,
}

impl<'a> Outline<'a> {
    /// Writes into `pb` through `at`.
    pub(crate) fn new(pb: &'a mut PathBuilder, at: Transform) -> Outline<'a> {
        Outline { pb, at }
    }

    fn map(&self, x: f32, y: f32) -> (f32, f32) {
        let mut p = [tiny_skia::Point::from_xy(x, y)];
        self.at.map_points(&mut p);
        (p[0].x, p[0].y)
    }
}

impl OutlineBuilder for Outline<'_> {
    fn move_to(&mut self, x: f32, y: f32) {
        let (x, y) = self.map(x, y);
        self.pb.move_to(x, y);
    }

    fn line_to(&mut self, x: f32, y: f32) {
        let (x, y) = self.map(x, y);
        self.pb.line_to(x, y);
    }

    fn quad_to(&mut self, x1: f32, y1: f32, x: f32, y: f32) {
        let (x1, y1) = self.map(x1, y1);
        let (x, y) = self.map(x, y);
        self.pb.quad_to(x1, y1, x, y);
    }

    fn curve_to(&mut self, x1: f32, y1: f32, x2: f32, y2: f32, x: f32, y: f32) {
        let (x1, y1) = self.map(x1, y1);
        let (x2, y2) = self.map(x2, y2);
        let (x, y) = self.map(x, y);
        self.pb.cubic_to(x1, y1, x2, y2, x, y);
    }

    fn close(&mut self) {
        self.pb.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_as_wide_as_its_advances_and_scales_with_its_size() {
        let small = Line::new("Paris", 10.0);
        let large = Line::new("Paris", 20.0);
        assert!(small.width > 15.0 && small.width < 40.0, "{}", small.width);
        assert!((large.width - 2.0 * small.width).abs() < 1e-3);
        assert!(small.ascent > 5.0 && small.descent > 0.0);
        let path = small.path(Transform::from_translate(5.0, 20.0)).unwrap();
        let b = path.bounds();
        // Drawn right of x = 5 and above the baseline at y = 20 (but the
        // descender of nothing here).
        assert!(
            b.left() >= 5.0 && b.right() <= 5.0 + small.width + 1.0,
            "{b:?}"
        );
        assert!(b.bottom() <= 20.5 && b.top() >= 20.0 - 10.0, "{b:?}");
    }

    #[test]
    fn missing_characters_and_controls_do_not_break_layout() {
        let line = Line::new("a\u{7}\u{10FFFF}b", 12.0);
        assert_eq!(line.advances().count(), 3);
        assert!(Line::new("", 12.0).path(Transform::identity()).is_none());
    }
}
