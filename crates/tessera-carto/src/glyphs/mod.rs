//! MapLibre glyph ranges: `GET /fonts/{fontstack}/{start}-{end}.pbf`.
//!
//! A range is 256 code points of a fontstack (one font name, or several
//! separated by commas: the first font that has a code point gives its
//! glyph), each glyph a signed distance field ([`sdf`]) in the protocol
//! buffer MapLibre reads (`glyphs.proto`, [`pbf`]). Fonts come from
//! [`fonts::FontLibrary`]; ranges made are kept in memory ([`Glyphs`]).

pub mod fonts;
pub mod pbf;
pub mod sdf;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

pub use fonts::{BUNDLED, FontLibrary};

/// Code points per range.
pub const RANGE: u32 = 256;
/// The last code point a range may reach (MapLibre asks for the Basic
/// Multilingual Plane only).
pub const LAST: u32 = 0xFFFF;
/// Most fonts one fontstack may name.
pub const MOST_FONTS_PER_STACK: usize = 8;

/// Why glyphs could not be made.
#[derive(Debug, thiserror::Error)]
pub enum GlyphError {
    /// A font file could not be read.
    #[error("cannot read font {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// A font file is larger than allowed.
    #[error("font {} is {size} bytes, more than the {most} allowed (limits.max_font_bytes)", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        size: u64,
        /// The limit.
        most: u64,
    },
    /// A file is not a font tessera can read.
    #[error("{origin} is not a font tessera can read: {why}")]
    NotAFont {
        /// Where it came from.
        origin: String,
        /// What was wrong.
        why: String,
    },
    /// A fontstack names a font that is not loaded.
    #[error("unknown font {name:?} (fonts: {known})")]
    UnknownFont {
        /// The name asked for.
        name: String,
        /// The names offered, comma-separated.
        known: String,
    },
    /// A range that is not `start-end` with `start` a multiple of 256,
    /// `end` = `start + 255`, within the Basic Multilingual Plane; or a
    /// fontstack that is empty or names too many fonts.
    #[error("{0}")]
    BadRequest(String),
}

/// Ranges made, by fontstack name and first code point.
type Made = HashMap<(String, u32), Arc<[u8]>>;

/// The glyph ranges of a font library, each made once and kept.
#[derive(Debug)]
pub struct Glyphs {
    library: FontLibrary,
    made: Mutex<Made>,
    most_kept: usize,
}

impl Glyphs {
    /// Ranges of `library`, at most `most_kept` of them kept in memory
    /// (past that the oldest are made again when asked).
    pub fn new(library: FontLibrary, most_kept: usize) -> Glyphs {
        Glyphs {
            library,
            made: Mutex::new(HashMap::new()),
            most_kept,
        }
    }

    /// The fonts glyphs are made from.
    pub fn library(&self) -> &FontLibrary {
        &self.library
    }

    /// The fonts of `fontstack` (names separated by commas), each known.
    pub fn stack<'a>(&'a self, fontstack: &str) -> Result<Vec<&'a fonts::FontFace>, GlyphError> {
        let names: Vec<&str> = fontstack
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .collect();
        if names.is_empty() || names.len() > MOST_FONTS_PER_STACK {
            return Err(GlyphError::BadRequest(format!(
                "a fontstack names 1 to {MOST_FONTS_PER_STACK} fonts, separated by commas"
            )));
        }
        names
            .iter()
            .map(|name| {
                self.library
                    .get(name)
                    .ok_or_else(|| GlyphError::UnknownFont {
                        name: name.chars().take(64).collect(),
                        known: self.library.names().collect::<Vec<_>>().join(", "),
                    })
            })
            .collect()
    }

    /// The range `range` (`0-255`) of `fontstack` when it was made before
    /// (`None`: not yet); never blocks on making one.
    pub fn kept(&self, fontstack: &str, range: &str) -> Result<Option<Arc<[u8]>>, GlyphError> {
        let start = parse_range(range)?;
        let faces = self.stack(fontstack)?;
        Ok(self.lock().get(&(canonical(&faces), start)).cloned())
    }

    /// The range `range` (`0-255`) of `fontstack`, encoded: made now, or
    /// kept from before. Blocking when made (a few milliseconds of CPU).
    pub fn range(&self, fontstack: &str, range: &str) -> Result<Arc<[u8]>, GlyphError> {
        let start = parse_range(range)?;
        let faces = self.stack(fontstack)?;
        let key = (canonical(&faces), start);
        if let Some(kept) = self.lock().get(&key) {
            return Ok(kept.clone());
        }
        let mut glyphs = Vec::new();
        for code_point in start..start + RANGE {
            let Some(c) = char::from_u32(code_point) else {
                continue;
            };
            if let Some((face, id)) = faces.iter().find_map(|f| {
                let face = f.face();
                face.glyph_index(c).map(|id| (face, id))
            }) {
                glyphs.push(sdf::render(&face, id, code_point));
            }
        }
        let bytes: Arc<[u8]> = Arc::from(pbf::encode(&key.0, start, &glyphs));
        let mut made = self.lock();
        if made.len() >= self.most_kept {
            // Ranges are few and cheap to make again: forgetting all is
            // enough to bound the memory.
            made.clear();
        }
        made.insert(key, bytes.clone());
        Ok(bytes)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Made> {
        self.made.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A fontstack's name as its fonts' names joined by commas.
fn canonical(faces: &[&fonts::FontFace]) -> String {
    faces.iter().map(|f| f.name()).collect::<Vec<_>>().join(",")
}

/// The first code point of `range` (`start-end`, `.pbf` taken off by the
/// caller).
pub fn parse_range(range: &str) -> Result<u32, GlyphError> {
    let bad = || {
        GlyphError::BadRequest(format!(
            "range {:?} is not START-END with START a multiple of {RANGE}, END = START + {}, \
             up to U+{LAST:04X} (e.g. 0-255)",
            range.chars().take(32).collect::<String>(),
            RANGE - 1
        ))
    };
    let (start, end) = range.split_once('-').ok_or_else(bad)?;
    let digits = |s: &str| !s.is_empty() && s.len() <= 6 && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(start) || !digits(end) {
        return Err(bad());
    }
    let (start, end): (u32, u32) = (
        start.parse().map_err(|_| bad())?,
        end.parse().map_err(|_| bad())?,
    );
    if start % RANGE != 0 || end != start + RANGE - 1 || end > LAST {
        return Err(bad());
    }
    Ok(start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_256_code_points_within_the_bmp() {
        assert_eq!(parse_range("0-255").unwrap(), 0);
        assert_eq!(parse_range("65280-65535").unwrap(), 65280);
        for bad in [
            "65536-65791",
            "1-256",
            "0-256",
            "0-",
            "-255",
            "a-b",
            "0255",
            "00000000-255",
            "",
        ] {
            assert!(
                matches!(parse_range(bad), Err(GlyphError::BadRequest(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_range_of_the_bundled_font_has_its_latin_glyphs() {
        let glyphs = Glyphs::new(FontLibrary::bundled(), 16);
        assert!(
            glyphs.kept(BUNDLED, "0-255").unwrap().is_none(),
            "not made yet"
        );
        let bytes = glyphs.range(BUNDLED, "0-255").unwrap();
        assert!(Arc::ptr_eq(
            &bytes,
            &glyphs.kept(BUNDLED, "0-255").unwrap().unwrap()
        ));
        let decoded = pbf::decode(&bytes).unwrap();
        assert_eq!(decoded.name, BUNDLED);
        assert_eq!(decoded.range, "0-255");
        let a = decoded
            .glyphs
            .iter()
            .find(|g| g.id == u32::from('A'))
            .unwrap();
        assert!(a.width > 10 && a.height > 10 && a.advance > 10, "{a:?}");
        assert_eq!(a.bitmap.len() as u32, (a.width + 6) * (a.height + 6));
        // Inside the letter the field is past the edge (192 of 255).
        assert!(a.bitmap.iter().any(|&v| v > 192));
        let space = decoded.glyphs.iter().find(|g| g.id == 32).unwrap();
        assert_eq!((space.width, space.height), (0, 0));
        assert!(space.advance > 0);
        // Kept: the same bytes the second time.
        assert!(Arc::ptr_eq(
            &bytes,
            &glyphs.range(BUNDLED, "0-255").unwrap()
        ));
    }

    #[test]
    fn unknown_fonts_are_named_with_those_known() {
        let glyphs = Glyphs::new(FontLibrary::bundled(), 16);
        let err = glyphs
            .range("Comic Sans,Noto Sans Regular", "0-255")
            .unwrap_err();
        assert!(
            err.to_string().contains("\"Comic Sans\"") && err.to_string().contains(BUNDLED),
            "{err}"
        );
        assert!(matches!(
            glyphs.range("", "0-255"),
            Err(GlyphError::BadRequest(_))
        ));
    }
}
