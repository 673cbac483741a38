//! Labels: the `label:` of a style rule (text from a template of fields,
//! size, colour, halo, priority, zooms), where each feature's label would
//! go (a point's own position; a polygon's pole of inaccessibility, the
//! centre of the largest circle inside it; along a line, glyph by glyph),
//! and the placement of a window's labels without overlaps, the highest
//! priority first.
//!
//! A window is placed whole before it is drawn: a metatile's labels are
//! placed once for all its tiles, so a label crossing a tile edge is drawn
//! whole on both tiles. A label that would cross the window's margin (a
//! metatile's gutter) is left out: the neighbouring metatile cannot know
//! of it, and half a label is worse than none.

use geos::Geom;
use serde::{Deserialize, Serialize};
use tiny_skia::{FillRule, LineCap, LineJoin, Paint, Pixmap, Stroke, Transform};

use crate::style::{Attribute, Color};
use crate::text::Line;

/// `label:` of a rule.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Label {
    /// The text: fields in braces, `"{name}"` or `"{name} ({pop_est})"`;
    /// a feature whose fields are all null gets no label.
    pub text: String,
    /// Size in pixels per em (default 12).
    #[serde(default = "default_size")]
    pub size: f32,
    /// Text colour (default black).
    #[serde(default = "black")]
    pub color: Color,
    /// An outline around the glyphs that keeps them readable over any
    /// background (default: none).
    #[serde(default)]
    pub halo: Option<Halo>,
    /// A numeric field, or a number for every feature the rule labels:
    /// higher values are placed first (default: in the order read, after
    /// every label with a priority).
    #[serde(default)]
    pub priority: Option<Priority>,
    /// The lowest zoom (fractional, Web Mercator levels) it is drawn at.
    #[serde(default)]
    pub min_zoom: Option<f64>,
    /// Least free space around a label, in pixels (default 2).
    #[serde(default = "default_padding")]
    pub padding: f32,
    /// How far a point's label is moved from the point, `[right, down]`
    /// in pixels (default `[0, 0]`: centred on it, as MapServer's `POSITION
    /// cc`).
    #[serde(default)]
    pub offset: [f32; 2],
    /// The widest line of a point's or a polygon's label, in ems (as
    /// MapLibre's `text-max-width`): longer text is broken where Unicode
    /// allows a line break (between words; a word longer than this stays
    /// whole), the lines centred, 1.2 ems apart (default: one line).
    #[serde(default)]
    pub max_width: Option<f32>,
}

/// The most characters a label shows: a longer text is cut, ending with
/// `…` (a label is a name, not a document; a text of megabytes must not
/// cost seconds to lay out).
pub const MOST_LABEL_CHARS: usize = 256;

/// Line height of a label broken into lines, in ems.
const LINE_HEIGHT: f32 = 1.2;

/// A label's priority.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum Priority {
    /// The same for every feature.
    Value(f64),
    /// A numeric field's value.
    Field(String),
}

/// A label's halo.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Halo {
    /// Its colour (default white).
    #[serde(default = "white")]
    pub color: Color,
    /// Its width in pixels around each glyph (default 1.5).
    #[serde(default = "default_halo")]
    pub width: f32,
}

fn default_size() -> f32 {
    12.0
}

fn default_padding() -> f32 {
    2.0
}

fn default_halo() -> f32 {
    1.5
}

fn black() -> Color {
    Color {
        rgba: [0, 0, 0, 255],
    }
}

fn white() -> Color {
    Color {
        rgba: [255, 255, 255, 255],
    }
}

impl Label {
    /// Checks sizes and the template.
    pub fn check(&self) -> Result<(), String> {
        if !(self.size >= 4.0 && self.size <= 128.0) {
            return Err(format!(
                "label size must be in [4, 128] pixels, not {}",
                self.size
            ));
        }
        if !(0.0..=64.0).contains(&self.padding) {
            return Err(format!(
                "label padding must be in [0, 64] pixels, not {}",
                self.padding
            ));
        }
        if let Some(h) = &self.halo
            && !(h.width > 0.0 && h.width <= 16.0)
        {
            return Err(format!(
                "label halo width must be in (0, 16] pixels, not {}",
                h.width
            ));
        }
        if !self.offset.iter().all(|o| (-256.0..=256.0).contains(o)) {
            return Err(format!(
                "label offset must be within 256 pixels, not {:?}",
                self.offset
            ));
        }
        let fields = self.fields();
        if fields.is_empty() {
            return Err(format!(
                "label text {:?} names no field: write fields in braces, \"{{name}}\"",
                self.text
            ));
        }
        Ok(())
    }

    /// The fields its text and priority read.
    pub fn fields(&self) -> Vec<String> {
        let mut fields: Vec<String> = template_parts(&self.text)
            .into_iter()
            .filter_map(|p| match p {
                Part::Field(f) => Some(f.to_string()),
                Part::Text(_) => None,
            })
            .collect();
        if let Some(Priority::Field(f)) = &self.priority {
            fields.push(f.clone());
        }
        fields
    }

    /// Whether it is drawn at `zoom`.
    pub fn draws_at(&self, zoom: f64) -> bool {
        self.min_zoom.is_none_or(|z| zoom >= z)
    }

    /// Its text for a feature: `value` gives a field's value by name.
    /// `None` when every field named is null (or the text is blank).
    pub fn text_of<'a>(&self, value: impl Fn(&str) -> Option<&'a Attribute>) -> Option<String> {
        let mut out = String::new();
        let mut any = false;
        for part in template_parts(&self.text) {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Field(f) => match value(f) {
                    Some(Attribute::Text(t)) => {
                        any |= !t.trim().is_empty();
                        out.push_str(t);
                    }
                    Some(Attribute::Number(n)) => {
                        any = true;
                        out.push_str(&number_text(*n));
                    }
                    Some(Attribute::Null) | None => {}
                },
            }
        }
        let out = out.trim();
        let out = match out.char_indices().nth(MOST_LABEL_CHARS) {
            Some((cut, _)) => format!("{}…", &out[..cut]),
            None => out.to_string(),
        };
        (any && !out.is_empty()).then_some(out)
    }
}

/// A number as a label shows it: integers without a fraction.
fn number_text(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{n:.0}")
    } else {
        n.to_string()
    }
}

enum Part<'a> {
    Text(&'a str),
    Field(&'a str),
}

/// A template cut into text and `{field}`s (an unclosed brace is text).
fn template_parts(template: &str) -> Vec<Part<'_>> {
    let mut parts = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            break;
        };
        if open > 0 {
            parts.push(Part::Text(&rest[..open]));
        }
        let name = rest[open + 1..open + close].trim();
        if name.is_empty() {
            parts.push(Part::Text(&rest[open..=open + close]));
        } else {
            parts.push(Part::Field(name));
        }
        rest = &rest[open + close + 1..];
    }
    if !rest.is_empty() {
        parts.push(Part::Text(rest));
    }
    parts
}

/// Where a feature's label would go, in window pixels.
#[derive(Debug, Clone)]
pub enum Anchor {
    /// Centred on a point.
    Point(f32, f32),
    /// Along a line, centred on its middle.
    Line(Vec<(f32, f32)>),
}

/// A label that may be placed.
#[derive(Debug, Clone)]
pub struct Candidate<'a> {
    /// Its style (a rule's, or one made for the feature by a MapLibre
    /// symbol layer).
    pub style: std::borrow::Cow<'a, Label>,
    /// Its text.
    pub text: String,
    /// Its priority (higher first).
    pub priority: f64,
    /// Where it would go.
    pub anchor: Anchor,
}

/// The anchor of a polygon's label: its pole of inaccessibility (GEOS's
/// maximum inscribed circle, to a pixel or to 1/200 of the polygon's
/// size, whichever is coarser: the same for the polygon wherever it is
/// drawn), when the circle is at least `min_radius` pixels across (a
/// country too small at this scale for its name gets none). `None` also
/// when the polygon's box misses `within` (left, top, right, bottom): its
/// label could not lie there.
pub fn polygon_anchor(
    polygons: &[Vec<Vec<(f32, f32)>>],
    min_radius: f32,
    within: [f32; 4],
) -> Option<Anchor> {
    let mut bounds = [f32::MAX, f32::MAX, f32::MIN, f32::MIN];
    for &(x, y) in polygons.iter().filter_map(|rings| rings.first()).flatten() {
        bounds = [
            bounds[0].min(x),
            bounds[1].min(y),
            bounds[2].max(x),
            bounds[3].max(y),
        ];
    }
    if !overlaps(&bounds, &within) {
        return None;
    }
    let size = f64::from((bounds[2] - bounds[0]).max(bounds[3] - bounds[1]));
    let wide: Vec<Vec<Vec<(f64, f64)>>> = polygons
        .iter()
        .map(|rings| {
            rings
                .iter()
                .map(|r| {
                    r.iter()
                        .map(|&(x, y)| (f64::from(x), f64::from(y)))
                        .collect()
                })
                .collect()
        })
        .collect();
    let shape = crate::geometry::build_polygons(&wide, 0.0).ok()?;
    if shape.is_empty().ok()? {
        return None;
    }
    let circle = shape
        .maximum_inscribed_circle((size / 200.0).max(1.0))
        .ok()?;
    let radius = circle.length().ok()?;
    let seq = circle.get_coord_seq().ok()?;
    let (x, y) = (seq.get_x(0).ok()?, seq.get_y(0).ok()?);
    (radius >= f64::from(min_radius)).then_some(Anchor::Point(x as f32, y as f32))
}

/// A box in window pixels: left, top, right, bottom.
type Box2 = [f32; 4];

fn overlaps(a: &Box2, b: &Box2) -> bool {
    a[0] < b[2] && b[0] < a[2] && a[1] < b[3] && b[1] < a[3]
}

/// One placed label: its text and the box it takes (padding included),
/// what the placements' debug output reports.
#[derive(Debug, Clone, PartialEq)]
pub struct Placed {
    /// The text.
    pub text: String,
    /// The boxes its glyphs take (one for a straight label, one per glyph
    /// along a line), in window pixels.
    pub boxes: Vec<Box2>,
}

/// How a label is drawn once placed.
enum Drawing {
    /// Each whole line at its transform.
    Straight(Vec<Transform>),
    /// A glyph at a time, each at its own transform.
    Glyphs(Vec<Transform>),
}

/// Places `candidates` in a window of `width` x `height` pixels whose
/// outer `margin` pixels are not the window's own (a metatile's gutter):
/// the highest priority first, each where it overlaps no label placed
/// before (padding included) and lies wholly inside the margin; then draws
/// them into `pixmap`. Returns what was placed.
pub fn place_and_draw(
    pixmap: &mut Pixmap,
    mut candidates: Vec<Candidate<'_>>,
    margin: f32,
) -> Vec<Placed> {
    // Stable: equal priorities keep the order read.
    candidates.sort_by(|a, b| b.priority.total_cmp(&a.priority));
    #[allow(
        clippy::cast_precision_loss,
        reason = "window sizes are far below 2^24"
    )]
    let inside = [
        margin,
        margin,
        pixmap.width() as f32 - margin,
        pixmap.height() as f32 - margin,
    ];
    let mut taken: Vec<Box2> = Vec::new();
    let mut placed = Vec::new();
    for c in candidates {
        let lines = match (&c.anchor, c.style.max_width) {
            (Anchor::Point(..), Some(ems)) => broken(&c.text, c.style.size, ems * c.style.size),
            _ => vec![Line::new(&c.text, c.style.size)],
        };
        if lines.iter().all(|l| l.width <= 0.0) {
            continue;
        }
        let halo = c.style.halo.as_ref().map_or(0.0, |h| h.width);
        let anchor = match c.anchor {
            Anchor::Point(x, y) => Anchor::Point(x + c.style.offset[0], y + c.style.offset[1]),
            line @ Anchor::Line(_) => line,
        };
        let Some((boxes, drawing)) = layout(&lines, &anchor, halo) else {
            continue;
        };
        let fits = boxes.iter().all(|b| {
            b[0] >= inside[0] && b[1] >= inside[1] && b[2] <= inside[2] && b[3] <= inside[3]
        });
        let pad = c.style.padding;
        let padded: Vec<Box2> = boxes
            .iter()
            .map(|b| [b[0] - pad, b[1] - pad, b[2] + pad, b[3] + pad])
            .collect();
        if !fits || padded.iter().any(|b| taken.iter().any(|t| overlaps(b, t))) {
            continue;
        }
        draw(pixmap, &lines, &drawing, &c.style);
        taken.extend(padded);
        placed.push(Placed {
            text: c.text,
            boxes,
        });
    }
    placed
}

/// The boxes a label of `lines` takes at `anchor` and how it is drawn
/// there; `None` where it does not fit (a line shorter than the text, or
/// bending too much under it). Along a line, a label is one line.
fn layout(lines: &[Line], anchor: &Anchor, halo: f32) -> Option<(Vec<Box2>, Drawing)> {
    let first = lines.first()?;
    match anchor {
        Anchor::Point(x, y) => {
            // Centred: the middle of the block of lines on the point, each
            // line centred; one line has its capitals' middle there.
            let step = first.size() * LINE_HEIGHT;
            let height = first.ascent + step * (lines.len() - 1) as f32;
            let top_baseline = y - height / 2.0 + first.ascent;
            let widest = lines.iter().map(|l| l.width).fold(0.0, f32::max);
            let b = [
                x - widest / 2.0 - halo,
                top_baseline - first.ascent - halo,
                x + widest / 2.0 + halo,
                top_baseline + step * (lines.len() - 1) as f32 + first.descent + halo,
            ];
            let transforms = lines
                .iter()
                .enumerate()
                .map(|(i, l)| {
                    Transform::from_translate(x - l.width / 2.0, top_baseline + step * i as f32)
                })
                .collect();
            Some((vec![b], Drawing::Straight(transforms)))
        }
        Anchor::Line(points) => along(first, points, first.ascent + halo, first.descent + halo),
    }
}

/// `text` at `size` in lines at most `widest` pixels wide, broken where
/// Unicode allows (a mandatory break always), greedily.
fn broken(text: &str, size: f32, widest: f32) -> Vec<Line> {
    let mut lines = Vec::new();
    let mut start = 0;
    let mut last_fit: Option<usize> = None;
    for (at, opportunity) in unicode_linebreak::linebreaks(text) {
        let candidate = text[start..at].trim_end();
        let fits = Line::new(candidate, size).width <= widest;
        if !fits && let Some(end) = last_fit {
            lines.push(Line::new(text[start..end].trim_end(), size));
            start = end;
        }
        last_fit = Some(at);
        if opportunity == unicode_linebreak::BreakOpportunity::Mandatory && at < text.len() {
            lines.push(Line::new(text[start..at].trim_end(), size));
            start = at;
            last_fit = None;
        }
    }
    if start < text.len() {
        lines.push(Line::new(text[start..].trim_end(), size));
    }
    lines.retain(|l| l.width > 0.0);
    lines
}

/// Glyph by glyph along the middle of `points`, reading left to right.
fn along(line: &Line, points: &[(f32, f32)], up: f32, down: f32) -> Option<(Vec<Box2>, Drawing)> {
    let mut pts: Vec<(f32, f32)> = points.to_vec();
    if pts.len() < 2 {
        return None;
    }
    if pts[pts.len() - 1].0 < pts[0].0 {
        pts.reverse();
    }
    let lengths: Vec<f32> = pts
        .windows(2)
        .map(|w| (w[1].0 - w[0].0).hypot(w[1].1 - w[0].1))
        .collect();
    let total: f32 = lengths.iter().sum();
    if total < line.width + 2.0 * up {
        return None;
    }
    let start = (total - line.width) / 2.0;
    let mut boxes = Vec::new();
    let mut transforms = Vec::new();
    let mut previous: Option<f32> = None;
    for (offset, advance) in line.advances() {
        let middle = start + offset + advance / 2.0;
        let (x, y, angle) = at_distance(&pts, &lengths, middle)?;
        if let Some(p) = previous {
            let mut turn = (angle - p).abs();
            if turn > std::f32::consts::PI {
                turn = 2.0 * std::f32::consts::PI - turn;
            }
            if turn > std::f32::consts::FRAC_PI_4 {
                return None;
            }
        }
        previous = Some(angle);
        let (sin, cos) = angle.sin_cos();
        // The glyph's baseline starts half an advance back along the line,
        // and sits so the capitals' middle is on the line.
        let t = Transform::from_translate(-advance / 2.0, line.ascent / 2.0)
            .post_rotate(angle.to_degrees())
            .post_translate(x, y);
        transforms.push(t);
        // The rotated glyph box's bounds.
        let corners = [
            (-advance / 2.0, -up),
            (advance / 2.0, -up),
            (-advance / 2.0, down),
            (advance / 2.0, down),
        ]
        .map(|(u, v)| (x + u * cos - v * sin, y + u * sin + v * cos));
        let xs = corners.map(|c| c.0);
        let ys = corners.map(|c| c.1);
        boxes.push([
            xs.iter().copied().fold(f32::MAX, f32::min),
            ys.iter().copied().fold(f32::MAX, f32::min),
            xs.iter().copied().fold(f32::MIN, f32::max),
            ys.iter().copied().fold(f32::MIN, f32::max),
        ]);
    }
    Some((boxes, Drawing::Glyphs(transforms)))
}

/// The point `distance` along the line and the direction there (radians).
fn at_distance(pts: &[(f32, f32)], lengths: &[f32], distance: f32) -> Option<(f32, f32, f32)> {
    let mut left = distance;
    for (i, len) in lengths.iter().enumerate() {
        if left <= *len || i == lengths.len() - 1 {
            if *len <= 0.0 {
                continue;
            }
            let t = (left / len).clamp(0.0, 1.0);
            let (a, b) = (pts[i], pts[i + 1]);
            let angle = (b.1 - a.1).atan2(b.0 - a.0);
            return Some((a.0 + t * (b.0 - a.0), a.1 + t * (b.1 - a.1), angle));
        }
        left -= len;
    }
    None
}

/// Draws a placed label: its halo, then its glyphs.
fn draw(pixmap: &mut Pixmap, lines: &[Line], drawing: &Drawing, style: &Label) {
    let paths: Vec<tiny_skia::Path> = match drawing {
        Drawing::Straight(ts) => lines
            .iter()
            .zip(ts)
            .filter_map(|(line, t)| line.path(*t))
            .collect(),
        Drawing::Glyphs(ts) => ts
            .iter()
            .enumerate()
            .filter_map(|(i, t)| lines[0].glyph_path(i, *t))
            .collect(),
    };
    if let Some(h) = &style.halo {
        let paint = paint(h.color);
        let stroke = Stroke {
            width: 2.0 * h.width,
            line_cap: LineCap::Round,
            line_join: LineJoin::Round,
            ..Stroke::default()
        };
        for p in &paths {
            pixmap.stroke_path(p, &paint, &stroke, Transform::identity(), None);
        }
    }
    let paint = paint(style.color);
    for p in &paths {
        pixmap.fill_path(p, &paint, FillRule::Winding, Transform::identity(), None);
    }
}

fn paint(color: Color) -> Paint<'static> {
    let [r, g, b, a] = color.rgba;
    let mut paint = Paint::default();
    paint.set_color_rgba8(r, g, b, a);
    paint.anti_alias = true;
    paint
}

#[cfg(test)]
mod tests {
    use super::*;

    fn label(json: &str) -> Label {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn templates_fill_fields_and_skip_features_without_values() {
        let l = label(r#"{"text": "{name} ({pop})"}"#);
        l.check().unwrap();
        assert_eq!(l.fields(), ["name", "pop"]);
        let name = Attribute::Text("Paris".into());
        let pop = Attribute::Number(2_161_000.0);
        let text = l.text_of(|f| match f {
            "name" => Some(&name),
            "pop" => Some(&pop),
            _ => None,
        });
        assert_eq!(text.as_deref(), Some("Paris (2161000)"));
        assert_eq!(l.text_of(|_| Some(&Attribute::Null)), None);
        let e = label(r#"{"text": "no field"}"#).check().unwrap_err();
        assert!(e.contains("names no field"), "{e}");
    }

    #[test]
    fn higher_priorities_win_and_no_two_labels_overlap() {
        let style = label(r#"{"text": "{n}", "size": 14}"#);
        let mut pixmap = Pixmap::new(200, 100).unwrap();
        let candidates = vec![
            Candidate {
                style: std::borrow::Cow::Borrowed(&style),
                text: "Low".into(),
                priority: 1.0,
                anchor: Anchor::Point(100.0, 50.0),
            },
            Candidate {
                style: std::borrow::Cow::Borrowed(&style),
                text: "High".into(),
                priority: 9.0,
                anchor: Anchor::Point(104.0, 52.0),
            },
            Candidate {
                style: std::borrow::Cow::Borrowed(&style),
                text: "Apart".into(),
                priority: 0.0,
                anchor: Anchor::Point(40.0, 20.0),
            },
            // Past the margin: left out.
            Candidate {
                style: std::borrow::Cow::Borrowed(&style),
                text: "Edge".into(),
                priority: 5.0,
                anchor: Anchor::Point(195.0, 50.0),
            },
        ];
        let placed = place_and_draw(&mut pixmap, candidates, 8.0);
        let texts: Vec<&str> = placed.iter().map(|p| p.text.as_str()).collect();
        assert_eq!(texts, ["High", "Apart"]);
        for (i, a) in placed.iter().enumerate() {
            for b in &placed[i + 1..] {
                assert!(
                    a.boxes
                        .iter()
                        .all(|x| b.boxes.iter().all(|y| !overlaps(x, y)))
                );
            }
        }
        // Drawn: dark pixels inside the first box, none far outside both.
        let b = placed[0].boxes[0];
        let ink = |x0: f32, y0: f32, x1: f32, y1: f32| {
            let mut n = 0;
            for y in y0 as u32..y1 as u32 {
                for x in x0 as u32..x1 as u32 {
                    n += u32::from(pixmap.pixel(x, y).unwrap().alpha() > 0);
                }
            }
            n
        };
        assert!(ink(b[0], b[1], b[2], b[3]) > 20);
        assert_eq!(ink(150.0, 70.0, 200.0, 100.0), 0);
    }

    #[test]
    fn text_follows_a_line_long_enough_and_not_too_bent() {
        let style = label(r#"{"text": "{n}", "size": 12}"#);
        let long = Anchor::Line(vec![(10.0, 50.0), (190.0, 50.0)]);
        let short = Anchor::Line(vec![(90.0, 50.0), (110.0, 50.0)]);
        let zigzag = Anchor::Line(vec![(50.0, 50.0), (100.0, 10.0), (150.0, 50.0)]);
        let mut pixmap = Pixmap::new(200, 100).unwrap();
        let candidates = ["long", "short", "zigzag"]
            .into_iter()
            .zip([long, short, zigzag])
            .map(|(t, a)| Candidate {
                style: std::borrow::Cow::Borrowed(&style),
                text: format!("River {t}"),
                priority: 0.0,
                anchor: a,
            });
        let placed = place_and_draw(&mut pixmap, candidates.collect(), 0.0);
        assert_eq!(placed.len(), 1, "{placed:?}");
        assert_eq!(placed[0].boxes.len(), "River long".chars().count());
        // Right to left lines read left to right too.
        let backwards = Anchor::Line(vec![(190.0, 80.0), (10.0, 80.0)]);
        let (boxes, _) = layout(&[Line::new("ab", 12.0)], &backwards, 0.0).unwrap();
        assert!(boxes[0][0] < boxes[1][0]);
    }

    #[test]
    fn a_long_point_label_breaks_into_centred_lines_within_its_width() {
        let lines = broken("Cité Internationale Universitaire de Paris", 12.0, 100.0);
        assert!(lines.len() >= 3, "{}", lines.len());
        assert!(
            lines.iter().all(|l| l.width <= 100.0),
            "each line within the width"
        );
        // A word longer than the width stays whole, on its own line.
        let lines = broken("Llanfairpwllgwyngyll station", 12.0, 40.0);
        assert_eq!(lines.len(), 2);
        assert!(lines[0].width > 40.0);
        let style = label(r#"{"text": "{n}", "size": 12, "max_width": 8.5}"#);
        let mut pixmap = Pixmap::new(300, 200).unwrap();
        let placed = place_and_draw(
            &mut pixmap,
            vec![Candidate {
                style: std::borrow::Cow::Borrowed(&style),
                text: "Cité Internationale Universitaire de Paris".into(),
                priority: 0.0,
                anchor: Anchor::Point(150.0, 100.0),
            }],
            0.0,
        );
        let b = placed[0].boxes[0];
        assert!(
            b[3] - b[1] > 2.0 * 12.0 * LINE_HEIGHT,
            "three lines or more: {b:?}"
        );
        assert!(
            b[2] - b[0] <= 8.5 * 12.0 + 1.0,
            "no wider than 8.5 ems: {b:?}"
        );
        // Centred across; down, the block from the first line's capitals to
        // the last baseline is centred, the descenders hang below it.
        let descent = Line::new("p", 12.0).descent;
        assert!(
            (b[0] + b[2] - 300.0).abs() < 1.0 && (b[1] + b[3] - descent - 200.0).abs() < 1.0,
            "centred: {b:?}"
        );
    }

    #[test]
    fn a_label_text_is_cut_past_its_most_characters() {
        let style = label(r#"{"text": "{n}"}"#);
        let huge = Attribute::Text("x".repeat(10 << 20));
        let text = style.text_of(|_| Some(&huge)).unwrap();
        assert_eq!(text.chars().count(), MOST_LABEL_CHARS + 1);
        assert!(text.ends_with('…'));
    }
}
