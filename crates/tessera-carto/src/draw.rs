//! Drawing features into a window with `tiny-skia` (anti-aliased, even-odd
//! fill so holes stay holes), and the window back as a [`Raster`] of three
//! colour bands whose validity is the drawn alpha.

use tessera_image::{BandData, Raster};
use tiny_skia::{
    FillRule, LineCap, LineJoin, Paint, PathBuilder, Pixmap, Rect, Stroke, StrokeDash, Transform,
};

use crate::style::{Color, Rule, Shape};

/// A geometry in output pixel coordinates (x right, y down).
#[derive(Debug, Clone, PartialEq)]
pub enum Shapes {
    /// Points (markers).
    Points(Vec<(f32, f32)>),
    /// Lines.
    Lines(Vec<Vec<(f32, f32)>>),
    /// Polygons: each a list of rings (outer first, then holes).
    Polygons(Vec<Vec<Vec<(f32, f32)>>>),
}

/// A canvas of `width` x `height` transparent pixels.
pub struct Canvas {
    pixmap: Pixmap,
    /// Where drawing reaches, when limited ([`Canvas::clip_to`]).
    clip: Option<tiny_skia::Mask>,
}

impl Canvas {
    /// A transparent canvas; `None` for a zero or too large size.
    pub fn new(width: u32, height: u32) -> Option<Canvas> {
        Pixmap::new(width, height).map(|pixmap| Canvas { pixmap, clip: None })
    }

    /// Limits what is drawn next to the rectangle `(x, y, width, height)`
    /// in pixels (a vector tile's own area, so that its buffer drawn again
    /// by the next tile leaves no seam); `None` lifts the limit.
    pub fn clip_to(&mut self, rect: Option<(f32, f32, f32, f32)>) {
        self.clip = rect.and_then(|(x, y, w, h)| {
            let mut mask = tiny_skia::Mask::new(self.pixmap.width(), self.pixmap.height())?;
            let path = PathBuilder::from_rect(Rect::from_xywh(x, y, w, h)?);
            mask.fill_path(&path, FillRule::Winding, false, Transform::identity());
            Some(mask)
        });
    }

    /// Places `labels` without overlaps, off the outer `margin` pixels,
    /// and draws them over what is drawn ([`crate::label::place_and_draw`]).
    pub fn place_labels(
        &mut self,
        labels: Vec<crate::label::Candidate<'_>>,
        margin: f32,
    ) -> Vec<crate::label::Placed> {
        crate::label::place_and_draw(&mut self.pixmap, labels, margin)
    }

    /// Paints the whole canvas in `color` at `opacity` over what is drawn
    /// (a style's background).
    pub fn fill_all(&mut self, color: Color, opacity: f32) {
        let rect = Rect::from_xywh(
            0.0,
            0.0,
            self.pixmap.width() as f32,
            self.pixmap.height() as f32,
        );
        if let Some(rect) = rect {
            self.pixmap.fill_rect(
                rect,
                &paint(color, opacity),
                Transform::identity(),
                self.clip.as_ref(),
            );
        }
    }

    /// Draws `shapes` with `rule`'s symbols.
    pub fn draw(&mut self, shapes: &Shapes, rule: &Rule) {
        match shapes {
            Shapes::Points(points) => self.markers(points, rule),
            Shapes::Lines(lines) => {
                let mut pb = PathBuilder::new();
                for line in lines {
                    trace(&mut pb, line, false);
                }
                if let Some(path) = pb.finish() {
                    self.stroke_path(&path, rule);
                }
            }
            Shapes::Polygons(polygons) => {
                let mut pb = PathBuilder::new();
                for rings in polygons {
                    for ring in rings {
                        trace(&mut pb, ring, true);
                    }
                }
                if let Some(path) = pb.finish() {
                    if let Some(fill) = rule.fill {
                        let paint = paint(fill, rule.fill_opacity);
                        self.pixmap.fill_path(
                            &path,
                            &paint,
                            FillRule::EvenOdd,
                            Transform::identity(),
                            self.clip.as_ref(),
                        );
                    }
                    self.stroke_path(&path, rule);
                }
            }
        }
    }

    fn stroke_path(&mut self, path: &tiny_skia::Path, rule: &Rule) {
        let Some(color) = rule.stroke else {
            return;
        };
        let stroke = Stroke {
            width: rule.stroke_width,
            line_cap: LineCap::Round,
            line_join: LineJoin::Round,
            dash: rule
                .dash
                .as_ref()
                .and_then(|d| StrokeDash::new(d.clone(), 0.0)),
            ..Stroke::default()
        };
        self.pixmap.stroke_path(
            path,
            &paint(color, rule.stroke_opacity),
            &stroke,
            Transform::identity(),
            self.clip.as_ref(),
        );
    }

    fn markers(&mut self, points: &[(f32, f32)], rule: &Rule) {
        let marker = rule.marker.clone().unwrap_or(crate::style::Marker {
            shape: Shape::Circle,
            size: 6.0,
        });
        let half = marker.size / 2.0;
        let mut pb = PathBuilder::new();
        for &(x, y) in points {
            match marker.shape {
                Shape::Circle => pb.push_circle(x, y, half),
                Shape::Square => {
                    if let Some(r) = Rect::from_xywh(x - half, y - half, marker.size, marker.size) {
                        pb.push_rect(r);
                    }
                }
            }
        }
        let Some(path) = pb.finish() else {
            return;
        };
        if let Some(fill) = rule.fill {
            self.pixmap.fill_path(
                &path,
                &paint(fill, rule.fill_opacity),
                FillRule::Winding,
                Transform::identity(),
                self.clip.as_ref(),
            );
        }
        self.stroke_path(&path, rule);
    }

    /// The drawing as red, green and blue bands (not premultiplied) with
    /// the alpha as validity.
    pub fn into_raster(self) -> Raster {
        let (w, h) = (self.pixmap.width(), self.pixmap.height());
        let n = w as usize * h as usize;
        let (mut r, mut g, mut b, mut valid) =
            (vec![0u8; n], vec![0u8; n], vec![0u8; n], vec![0u8; n]);
        for (i, px) in self.pixmap.pixels().iter().enumerate() {
            // Opaque pixels (most of a map) are their own demultiplied
            // colour, and clear ones stay zero: only the edges divide.
            match px.alpha() {
                0 => {}
                255 => {
                    r[i] = px.red();
                    g[i] = px.green();
                    b[i] = px.blue();
                    valid[i] = 255;
                }
                _ => {
                    let c = px.demultiply();
                    r[i] = c.red();
                    g[i] = c.green();
                    b[i] = c.blue();
                    valid[i] = c.alpha();
                }
            }
        }
        Raster {
            width: w,
            height: h,
            bands: vec![BandData::U8(r), BandData::U8(g), BandData::U8(b)],
            valid,
        }
    }
}

/// What kind of geometry a legend symbol stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SymbolKind {
    /// Points: a marker.
    Point,
    /// Lines: a zigzag line.
    Line,
    /// Polygons, or a type not known: a square.
    Area,
}

/// A legend symbol of `size` x `size` pixels: what `rule` draws for a
/// feature of the `kind` given.
pub fn symbol(rule: &Rule, kind: SymbolKind, size: u32) -> Option<Raster> {
    let mut canvas = Canvas::new(size, size)?;
    let s = size as f32;
    let inset = (rule.stroke_width / 2.0).max(1.0).min(s / 4.0);
    let shapes = match kind {
        SymbolKind::Point => Shapes::Points(vec![(s / 2.0, s / 2.0)]),
        SymbolKind::Line => Shapes::Lines(vec![vec![
            (inset, s - inset),
            (s * 0.4, s * 0.3),
            (s * 0.6, s * 0.7),
            (s - inset, inset),
        ]]),
        SymbolKind::Area => Shapes::Polygons(vec![vec![vec![
            (inset, inset),
            (s - inset, inset),
            (s - inset, s - inset),
            (inset, s - inset),
        ]]]),
    };
    canvas.draw(&shapes, rule);
    Some(canvas.into_raster())
}

fn paint(color: Color, opacity: f32) -> Paint<'static> {
    let [r, g, b, a] = color.rgba;
    let alpha = (f32::from(a) * opacity).round().clamp(0.0, 255.0) as u8;
    let mut paint = Paint::default();
    paint.set_color_rgba8(r, g, b, alpha);
    paint.anti_alias = true;
    paint
}

fn trace(pb: &mut PathBuilder, points: &[(f32, f32)], close: bool) {
    let mut iter = points.iter();
    let Some(&(x, y)) = iter.next() else {
        return;
    };
    pb.move_to(x, y);
    for &(x, y) in iter {
        pb.line_to(x, y);
    }
    if close {
        pb.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(json: &str) -> Rule {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn a_filled_square_with_a_hole_leaves_the_hole_transparent() {
        let mut canvas = Canvas::new(20, 20).unwrap();
        let outer = vec![(2.0, 2.0), (18.0, 2.0), (18.0, 18.0), (2.0, 18.0)];
        let hole = vec![(8.0, 8.0), (12.0, 8.0), (12.0, 12.0), (8.0, 12.0)];
        canvas.draw(
            &Shapes::Polygons(vec![vec![outer, hole]]),
            &rule(r##"{"fill": "#ff0000"}"##),
        );
        let r = canvas.into_raster();
        let at = |x: usize, y: usize| y * 20 + x;
        assert_eq!(r.valid[at(4, 4)], 255);
        assert_eq!(r.valid[at(10, 10)], 0);
        assert_eq!(r.valid[at(0, 0)], 0);
        let BandData::U8(red) = &r.bands[0] else {
            panic!("bytes")
        };
        assert_eq!(red[at(4, 4)], 255);
    }

    #[test]
    fn legend_symbols_follow_the_geometry_type() {
        let fill = rule(r##"{"fill": "#ff0000", "stroke": "#000000"}"##);
        let square = symbol(&fill, SymbolKind::Area, 16).unwrap();
        assert_eq!(square.valid[8 * 16 + 8], 255, "a polygon fills the middle");
        let marker = symbol(&fill, SymbolKind::Point, 16).unwrap();
        assert_eq!(marker.valid[8 * 16 + 8], 255);
        assert_eq!(marker.valid[16 + 1], 0, "a marker leaves the corners empty");
        let line = symbol(
            &rule(r##"{"stroke": "#0000ff", "stroke_width": 2}"##),
            SymbolKind::Line,
            16,
        )
        .unwrap();
        assert!(line.valid.iter().any(|&a| a > 0));
        assert_eq!(
            line.valid[15 * 16 + 15],
            0,
            "a line leaves the corners it does not reach"
        );
    }

    #[test]
    fn lines_and_markers_draw_with_their_widths_and_opacity() {
        let mut canvas = Canvas::new(20, 20).unwrap();
        canvas.draw(
            &Shapes::Lines(vec![vec![(0.0, 10.0), (20.0, 10.0)]]),
            &rule(r##"{"stroke": "#0000ff", "stroke_width": 4, "stroke_opacity": 0.5}"##),
        );
        canvas.draw(
            &Shapes::Points(vec![(5.0, 3.0)]),
            &rule(r##"{"fill": "#00ff00", "marker": {"shape": "square", "size": 4}}"##),
        );
        let r = canvas.into_raster();
        assert!(
            (120..=135).contains(&r.valid[10 * 20 + 10]),
            "{}",
            r.valid[10 * 20 + 10]
        );
        assert_eq!(r.valid[3 * 20 + 5], 255);
        assert_eq!(r.valid[17 * 20 + 10], 0);
    }
}
