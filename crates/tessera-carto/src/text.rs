//! Text for labels: the bundled font (Noto Sans Regular, SIL Open Font
//! License 1.1, `assets/OFL.txt`), laid out glyph by glyph along a
//! baseline and turned into `tiny-skia` paths that are filled (the text)
//! and stroked (its halo).
//!
//! Layout is by each glyph's advance, without shaping: Latin, Greek and
//! Cyrillic names come out as they should; a character the font lacks is
//! drawn as the font's missing-glyph box.

use std::sync::OnceLock;

use tiny_skia::{Path, PathBuilder, Transform};
use ttf_parser::{Face, GlyphId, OutlineBuilder};

/// The bundled font's bytes.
pub static BUNDLED_FONT: &[u8] = include_bytes!("../assets/NotoSans-Regular.ttf");

/// The bundled font, parsed once.
fn face() -> &'static Face<'static> {
    static FACE: OnceLock<Face<'static>> = OnceLock::new();
    FACE.get_or_init(|| Face::parse(BUNDLED_FONT, 0).expect("the bundled font parses"))
}

/// A line of text laid out at a size: each glyph with its offset along the
/// baseline, in pixels.
#[derive(Debug, Clone)]
pub struct Line {
    glyphs: Vec<(GlyphId, f32, f32)>,
    /// Length along the baseline, in pixels.
    pub width: f32,
    /// Height above the baseline of capital letters, in pixels.
    pub ascent: f32,
    /// Depth below the baseline of the deepest descender (positive), in
    /// pixels.
    pub descent: f32,
    scale: f32,
}

impl Line {
    /// `text` laid out at `size` pixels per em.
    pub fn new(text: &str, size: f32) -> Line {
        let face = face();
        let scale = size / f32::from(face.units_per_em());
        let mut glyphs = Vec::with_capacity(text.len());
        let mut x = 0.0;
        for c in text.chars().filter(|c| !c.is_control()) {
            let id = face.glyph_index(c).unwrap_or(GlyphId(0));
            let advance = f32::from(face.glyph_hor_advance(id).unwrap_or(0)) * scale;
            glyphs.push((id, x, advance));
            x += advance;
        }
        Line {
            glyphs,
            width: x,
            ascent: f32::from(face.capital_height().unwrap_or(face.ascender())) * scale,
            descent: -f32::from(face.descender()) * scale,
            scale,
        }
    }

    /// Its glyphs: the offset of each along the baseline and its advance.
    pub fn advances(&self) -> impl Iterator<Item = (f32, f32)> + '_ {
        self.glyphs.iter().map(|(_, x, a)| (*x, *a))
    }

    /// The outline of the whole line with its baseline's left end at the
    /// origin, then moved by `at`.
    pub fn path(&self, at: Transform) -> Option<Path> {
        let mut pb = PathBuilder::new();
        for (id, x, _) in &self.glyphs {
            self.trace(
                &mut pb,
                *id,
                Transform::from_translate(*x, 0.0).post_concat(at),
            );
        }
        pb.finish()
    }

    /// The outline of glyph `index` alone, its baseline's left end at the
    /// origin, then moved by `at` (text along a line: a glyph at a time).
    pub fn glyph_path(&self, index: usize, at: Transform) -> Option<Path> {
        let mut pb = PathBuilder::new();
        self.trace(&mut pb, self.glyphs[index].0, at);
        pb.finish()
    }

    fn trace(&self, pb: &mut PathBuilder, id: GlyphId, at: Transform) {
        // Font units are y-up; pixels are y-down.
        let mut out = Outline::new(
            pb,
            Transform::from_scale(self.scale, -self.scale).post_concat(at),
        );
        face().outline_glyph(id, &mut out);
    }
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
