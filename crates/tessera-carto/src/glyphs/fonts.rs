//! The fonts glyphs are made from: the bundled Noto Sans Regular and the
//! font files the configuration names (TTF, OTF, TTC collections), each
//! face known by its family and style (`Noto Sans Regular`, as fontnik and
//! Martin name them).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ttf_parser::Face;

use super::GlyphError;

/// The bundled font's name.
pub const BUNDLED: &str = "Noto Sans Regular";

/// Most faces one collection file may bring.
const MOST_FACES_PER_FILE: u32 = 64;

/// One face of a font file.
#[derive(Clone)]
pub struct FontFace {
    /// The file's bytes (shared by a collection's faces).
    data: Arc<[u8]>,
    /// Its index in a collection (0 for a single font).
    index: u32,
    /// Family name (`Noto Sans`).
    pub family: String,
    /// Style name (`Regular`, `Bold Italic`).
    pub style: String,
    /// Where it came from (`bundled` or a path).
    pub origin: String,
    /// How many Unicode code points it has a glyph for.
    pub code_points: usize,
    /// The lowest and highest of them.
    pub range: (u32, u32),
}

impl std::fmt::Debug for FontFace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FontFace")
            .field("family", &self.family)
            .field("style", &self.style)
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

impl FontFace {
    /// The face, parsed (cheap: ttf-parser reads tables in place).
    pub fn face(&self) -> Face<'_> {
        // Parsed once when loaded: a parse that worked then works now.
        Face::parse(&self.data, self.index).expect("a loaded face parses")
    }

    /// Its name in a fontstack: family and style.
    pub fn name(&self) -> String {
        format!("{} {}", self.family, self.style)
    }
}

/// Every face glyphs may be made from, by name.
#[derive(Debug, Clone, Default)]
pub struct FontLibrary {
    faces: BTreeMap<String, FontFace>,
    /// Names in the order the faces were added (the bundled first).
    order: Vec<String>,
}

/// A file or folder given, and what to do with a file that is not a font.
struct Found {
    path: PathBuf,
    /// Named itself (refused when broken), or found in a folder (skipped
    /// with a warning).
    named: bool,
}

impl FontLibrary {
    /// The bundled font alone.
    pub fn bundled() -> FontLibrary {
        let mut library = FontLibrary::default();
        let data: Arc<[u8]> = Arc::from(crate::text::BUNDLED_FONT);
        library
            .add_file(&data, "bundled")
            .expect("the bundled font parses");
        library
    }

    /// The bundled font and the fonts at `paths` (files, or folders
    /// searched for `.ttf`, `.otf`, `.ttc`, `.otc` files, not descending),
    /// each file at most `most_bytes`. A named file that is not a font, or
    /// too large, is an error; one found in a folder is skipped with a
    /// warning (returned, to be logged). A face whose name is taken keeps
    /// the first.
    pub fn load(
        paths: &[PathBuf],
        most_bytes: u64,
    ) -> Result<(FontLibrary, Vec<String>), GlyphError> {
        let mut library = FontLibrary::bundled();
        let mut warnings = Vec::new();
        let mut files = Vec::new();
        for path in paths {
            if path.is_dir() {
                let entries = std::fs::read_dir(path).map_err(|source| GlyphError::Read {
                    path: path.clone(),
                    source,
                })?;
                let mut found: Vec<PathBuf> = entries
                    .filter_map(Result::ok)
                    .map(|e| e.path())
                    .filter(|p| is_font_file(p))
                    .collect();
                found.sort();
                files.extend(found.into_iter().map(|path| Found { path, named: false }));
            } else {
                files.push(Found {
                    path: path.clone(),
                    named: true,
                });
            }
        }
        for Found { path, named } in files {
            match read_font(&path, most_bytes)
                .and_then(|data| library.add_file(&data, &path.display().to_string()))
            {
                Ok(taken) => warnings.extend(taken),
                Err(e) if named => return Err(e),
                Err(e) => warnings.push(format!("{e}; left out")),
            }
        }
        Ok((library, warnings))
    }

    /// Adds every face of a font file's `data`; returns a warning for each
    /// face whose name was already taken.
    fn add_file(&mut self, data: &Arc<[u8]>, origin: &str) -> Result<Vec<String>, GlyphError> {
        let count = ttf_parser::fonts_in_collection(data).unwrap_or(1);
        if count > MOST_FACES_PER_FILE {
            return Err(GlyphError::NotAFont {
                origin: origin.to_string(),
                why: format!("a collection of {count} faces (at most {MOST_FACES_PER_FILE})"),
            });
        }
        let mut warnings = Vec::new();
        for index in 0..count {
            let face = Face::parse(data, index).map_err(|e| GlyphError::NotAFont {
                origin: origin.to_string(),
                why: e.to_string(),
            })?;
            let (family, style) = names(&face).ok_or_else(|| GlyphError::NotAFont {
                origin: origin.to_string(),
                why: "no family name".into(),
            })?;
            // Code points of every Unicode subtable, each counted once
            // (fonts carry the BMP in two formats, 4 and 12).
            let mut seen = vec![0u64; 0x11_0000 / 64];
            if let Some(cmap) = face.tables().cmap {
                for sub in cmap
                    .subtables
                    .into_iter()
                    .filter(ttf_parser::cmap::Subtable::is_unicode)
                {
                    sub.codepoints(|c| {
                        if let Some(word) = seen.get_mut(c as usize / 64) {
                            *word |= 1 << (c % 64);
                        }
                    });
                }
            }
            let code_points = seen.iter().map(|w| w.count_ones() as usize).sum::<usize>();
            let first = seen
                .iter()
                .position(|w| *w != 0)
                .map(|i| i as u32 * 64 + seen[i].trailing_zeros());
            let last = seen
                .iter()
                .rposition(|w| *w != 0)
                .map(|i| i as u32 * 64 + 63 - seen[i].leading_zeros());
            let range = first.zip(last).unwrap_or((0, 0));
            let font = FontFace {
                data: data.clone(),
                index,
                family,
                style,
                origin: origin.to_string(),
                code_points,
                range,
            };
            let name = font.name();
            if let Some(first) = self.faces.get(&name) {
                warnings.push(format!(
                    "font {name:?} of {origin} is also in {}; the first is kept",
                    first.origin
                ));
                continue;
            }
            self.order.push(name.clone());
            self.faces.insert(name, font);
        }
        Ok(warnings)
    }

    /// The face named `name`.
    pub fn get(&self, name: &str) -> Option<&FontFace> {
        self.faces.get(name)
    }

    /// Every face, by name.
    pub fn faces(&self) -> impl Iterator<Item = (&str, &FontFace)> {
        self.faces.iter().map(|(n, f)| (n.as_str(), f))
    }

    /// Every face's name, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.faces.keys().map(String::as_str)
    }

    /// The faces labels fall back across after the bundled font, in the
    /// order `fonts:` gave them (see [`crate::text::use_fonts`]).
    pub fn label_fonts(&self) -> Vec<crate::text::LabelFont> {
        self.order
            .iter()
            .skip(1)
            .filter_map(|name| self.faces.get(name))
            .filter_map(|f| crate::text::LabelFont::new(f.data.clone(), f.index))
            .collect()
    }
}

/// Whether `path` is named as a font file.
fn is_font_file(path: &Path) -> bool {
    path.is_file()
        && path.extension().and_then(|e| e.to_str()).is_some_and(|e| {
            matches!(
                e.to_ascii_lowercase().as_str(),
                "ttf" | "otf" | "ttc" | "otc"
            )
        })
}

/// The bytes of the font file at `path`, refused past `most_bytes` before
/// they are read.
fn read_font(path: &Path, most_bytes: u64) -> Result<Arc<[u8]>, GlyphError> {
    let read = |source| GlyphError::Read {
        path: path.to_path_buf(),
        source,
    };
    let size = std::fs::metadata(path).map_err(read)?.len();
    if size > most_bytes {
        return Err(GlyphError::TooLarge {
            path: path.to_path_buf(),
            size,
            most: most_bytes,
        });
    }
    Ok(Arc::from(std::fs::read(path).map_err(read)?))
}

/// A face's family and style names (the typographic ones when it has them).
fn names(face: &Face<'_>) -> Option<(String, String)> {
    let name = |ids: &[u16]| {
        ids.iter().find_map(|id| {
            face.names()
                .into_iter()
                .filter(|n| n.name_id == *id && n.is_unicode())
                .find_map(|n| n.to_string())
                .filter(|s| !s.trim().is_empty())
        })
    };
    use ttf_parser::name_id;
    let family = name(&[name_id::TYPOGRAPHIC_FAMILY, name_id::FAMILY])?;
    let style = name(&[name_id::TYPOGRAPHIC_SUBFAMILY, name_id::SUBFAMILY])
        .unwrap_or_else(|| "Regular".into());
    Some((family.trim().to_string(), style.trim().to_string()))
}
