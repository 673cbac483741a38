//! One glyph as MapLibre draws text: its outline rasterised at 24 pixels
//! per em, bordered by 3 pixels, turned into a signed distance field of
//! radius 8 with the edge at 0.75 of the byte range (cutoff 0.25), as
//! fontnik and TinySDF make them; with the metrics MapLibre places it by.

use tiny_skia::{FillRule, Paint, Path, PathBuilder, Pixmap, Transform};
use ttf_parser::{Face, GlyphId};

use crate::text::Outline;

/// Pixels per em glyphs are drawn at.
pub const SIZE: u32 = 24;
/// Border around each glyph's bitmap, in pixels.
pub const BUFFER: usize = 3;
/// Distance the field reaches, in pixels.
pub const RADIUS: usize = 8;
/// Share of the byte range inside the edge.
pub const CUTOFF: f64 = 0.25;

/// A glyph's field and metrics (`glyphs.proto`'s `glyph`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SdfGlyph {
    /// Its Unicode code point.
    pub id: u32,
    /// The field, `(width + 6) x (height + 6)` bytes, rows from the top.
    pub bitmap: Vec<u8>,
    /// Width of the glyph's ink, without the border.
    pub width: u32,
    /// Height of the glyph's ink, without the border.
    pub height: u32,
    /// From the pen to the ink's left edge.
    pub left: i32,
    /// From the ascender line to the ink's top edge (negative below it).
    pub top: i32,
    /// How far the pen moves.
    pub advance: u32,
}

/// Glyph `glyph` of `face` as the field of code point `id`.
pub fn render(face: &Face<'_>, glyph: GlyphId, id: u32) -> SdfGlyph {
    let upem = f64::from(face.units_per_em().max(1));
    let scale = f64::from(SIZE) / upem;
    // As FreeType measures at a size: the advance rounded to 1/64 pixel,
    // then whole pixels; the ascender rounded up.
    let advance_units = f64::from(face.glyph_hor_advance(glyph).unwrap_or(0));
    let advance_64 = (advance_units * scale * 64.0).round() as i64;
    let advance = u32::try_from(advance_64 >> 6).unwrap_or(0);
    let ascender = (f64::from(face.ascender()) * scale).ceil() as i32;
    let empty = SdfGlyph {
        id,
        bitmap: vec![0; (2 * BUFFER) * (2 * BUFFER)],
        width: 0,
        height: 0,
        left: 0,
        top: -ascender,
        advance,
    };
    // The outline in pixels, y down, the pen at the origin; its ink box
    // from the curves themselves (a glyph's stored box also holds control
    // points, a pixel or two beyond the ink).
    let mut pb = PathBuilder::new();
    let at = Transform::from_scale(scale as f32, -scale as f32);
    if face
        .outline_glyph(glyph, &mut Outline::new(&mut pb, at))
        .is_none()
    {
        return empty;
    }
    let Some(path) = pb.finish() else {
        return empty;
    };
    let Some(ink) = path.compute_tight_bounds() else {
        return empty;
    };
    let x0 = ink.left().floor() as i32;
    let x1 = ink.right().ceil() as i32;
    let top = ink.top().floor() as i32;
    let bottom = ink.bottom().ceil() as i32;
    let (width, height) = ((x1 - x0).max(0) as u32, (bottom - top).max(0) as u32);
    // A glyph larger than a few em is not text: drawn empty.
    if width == 0 || height == 0 || width > 8 * SIZE || height > 8 * SIZE {
        return empty;
    }
    let Some(alpha) = rasterise(&path, x0, top, width, height) else {
        return empty;
    };
    let field = sdf_glyph_renderer::BitmapGlyph::from_unbuffered(
        &alpha,
        width as usize,
        height as usize,
        BUFFER,
    )
    .map(|g| g.render_sdf(RADIUS))
    .and_then(|sdf| sdf_glyph_renderer::clamp_to_u8(&sdf, CUTOFF));
    let Ok(bitmap) = field else {
        return empty;
    };
    SdfGlyph {
        id,
        bitmap,
        width,
        height,
        left: x0,
        // From the ascender line up to the ink's top (y up).
        top: -top - ascender,
        advance,
    }
}

/// The coverage of `path` (pixels, y down), `width x height` bytes from
/// (`x0`, `top`).
fn rasterise(path: &Path, x0: i32, top: i32, width: u32, height: u32) -> Option<Vec<u8>> {
    let mut pixmap = Pixmap::new(width, height)?;
    let mut paint = Paint::default();
    paint.set_color_rgba8(0, 0, 0, 255);
    paint.anti_alias = true;
    pixmap.fill_path(
        path,
        &paint,
        FillRule::Winding,
        Transform::from_translate(-x0 as f32, -top as f32),
        None,
    );
    Some(pixmap.pixels().iter().map(|p| p.alpha()).collect())
}
