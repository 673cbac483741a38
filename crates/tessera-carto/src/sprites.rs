//! MapLibre sprites: a folder of SVG icons made into a sprite sheet (one
//! PNG and its JSON index) at 1x and 2x, plain or as signed distance
//! fields (SDF icons, recoloured by the style's `icon-color`), with
//! `spreet` (resvg renders, rectangles packed, the PNG optimised).
//!
//! Icons are read on their own terms only: no file or network is reached
//! from an SVG (an `<image>` that is not a `data:` URL is left out), text
//! in an SVG is set in the bundled font, and a file is refused past
//! [`SpriteLimits`] (its bytes, its XML nodes, its size). A file that
//! cannot be an icon is named in the sheet's warnings and left out.
//! Sheets are made when first asked and made again when the folder's
//! SVG files change (looked at most every [`RECHECK`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use spreet::resvg::usvg;
use spreet::{Sprite, Spritesheet};

/// How often a folder is looked at again for changed icons.
pub const RECHECK: Duration = Duration::from_secs(2);

/// What one icon may cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpriteLimits {
    /// Largest SVG file read, in bytes.
    pub max_bytes: u64,
    /// Most XML nodes in one SVG.
    pub max_nodes: u32,
    /// Largest icon side, in CSS pixels (at 1x).
    pub max_side: u32,
    /// Most icons in one folder.
    pub max_icons: usize,
}

impl Default for SpriteLimits {
    fn default() -> Self {
        SpriteLimits {
            max_bytes: 1 << 20,
            max_nodes: 20_000,
            max_side: 512,
            max_icons: 5_000,
        }
    }
}

/// One variant of a sheet: pixel ratio and whether it is an SDF.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Variant {
    /// 1 or 2.
    pub ratio: u8,
    /// Icons as signed distance fields.
    pub sdf: bool,
}

/// A sheet made: its PNG, its index (JSON), and what was left out.
#[derive(Debug, Clone)]
pub struct Sheet {
    /// The sprite image.
    pub png: Arc<[u8]>,
    /// The index: each icon's name, place, size and pixel ratio.
    pub index: Arc<[u8]>,
    /// Each file left out, named, with why.
    pub warnings: Vec<String>,
}

/// Why a sheet could not be made.
#[derive(Debug, thiserror::Error)]
pub enum SpriteError {
    /// No sprite set of that name.
    #[error("unknown sprite set {name:?} (sprites: {known})")]
    Unknown {
        /// The name asked for.
        name: String,
        /// The names configured, comma-separated.
        known: String,
    },
    /// The folder could not be read, or held no icon.
    #[error("sprite set {name:?}: {why}")]
    Unreadable {
        /// The set.
        name: String,
        /// What went wrong.
        why: String,
    },
}

/// A folder's SVG files as last seen: each name, size and time.
type Signature = Vec<(String, u64, Option<SystemTime>)>;

/// One configured set and the sheets made of it.
#[derive(Debug)]
struct Set {
    dir: PathBuf,
    state: Mutex<SetState>,
}

#[derive(Debug, Default)]
struct SetState {
    checked: Option<Instant>,
    signature: Signature,
    sheets: BTreeMap<Variant, Sheet>,
}

/// Every configured sprite set, by name.
#[derive(Debug)]
pub struct Sprites {
    sets: BTreeMap<String, Set>,
    limits: SpriteLimits,
}

impl Sprites {
    /// The sets `dirs` names (name → folder of SVG files).
    pub fn new(dirs: &BTreeMap<String, PathBuf>, limits: SpriteLimits) -> Sprites {
        Sprites {
            sets: dirs
                .iter()
                .map(|(name, dir)| {
                    (
                        name.clone(),
                        Set {
                            dir: dir.clone(),
                            state: Mutex::default(),
                        },
                    )
                })
                .collect(),
            limits,
        }
    }

    /// The names of the sets.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.sets.keys().map(String::as_str)
    }

    /// Sheet `variant` of set `name`: kept, or made now when the folder
    /// changed since (blocking: renders every icon).
    pub fn sheet(&self, name: &str, variant: Variant) -> Result<Sheet, SpriteError> {
        let set = self.sets.get(name).ok_or_else(|| SpriteError::Unknown {
            name: name.chars().take(64).collect(),
            known: self.names().collect::<Vec<_>>().join(", "),
        })?;
        let unreadable = |why: String| SpriteError::Unreadable {
            name: name.to_string(),
            why,
        };
        let mut state = set.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.checked.is_none_or(|t| t.elapsed() >= RECHECK) {
            let signature = signature(&set.dir).map_err(unreadable)?;
            if signature != state.signature {
                state.sheets.clear();
                state.signature = signature;
            }
            state.checked = Some(Instant::now());
        }
        if let Some(sheet) = state.sheets.get(&variant) {
            return Ok(sheet.clone());
        }
        let sheet = make_sheet(&set.dir, variant, self.limits).map_err(unreadable)?;
        state.sheets.insert(variant, sheet.clone());
        Ok(sheet)
    }
}

/// The SVG files of `dir`, sorted: name, size and time.
fn signature(dir: &Path) -> Result<Signature, String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let mut files: Signature = entries
        .filter_map(Result::ok)
        .filter(|e| is_svg(&e.path()))
        .filter_map(|e| {
            let meta = e.metadata().ok()?;
            Some((
                e.file_name().to_string_lossy().into_owned(),
                meta.len(),
                meta.modified().ok(),
            ))
        })
        .collect();
    files.sort();
    Ok(files)
}

fn is_svg(path: &Path) -> bool {
    path.is_file()
        && path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e.eq_ignore_ascii_case("svg"))
}

/// Every icon of `dir` in one sheet of `variant`.
fn make_sheet(dir: &Path, variant: Variant, limits: SpriteLimits) -> Result<Sheet, String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| is_svg(p))
        .collect();
    paths.sort();
    let mut warnings = Vec::new();
    if paths.len() > limits.max_icons {
        warnings.push(format!(
            "{} holds {} icons; the first {} are used",
            dir.display(),
            paths.len(),
            limits.max_icons
        ));
        paths.truncate(limits.max_icons);
    }
    let mut sprites = BTreeMap::new();
    for path in &paths {
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let made = load_svg(path, limits).and_then(|tree| {
            let sprite = if variant.sdf {
                Sprite::new_sdf(tree, variant.ratio)
            } else {
                Sprite::new(tree, variant.ratio)
            };
            sprite.ok_or_else(|| "it has no size to draw".to_string())
        });
        match made {
            Ok(sprite) => {
                sprites.insert(name, sprite);
            }
            Err(why) => warnings.push(format!("{}: {why}; left out", path.display())),
        }
    }
    if sprites.is_empty() {
        return Err(format!(
            "no icon in {} ({})",
            dir.display(),
            if warnings.is_empty() {
                "no .svg file".to_string()
            } else {
                warnings.join("; ")
            }
        ));
    }
    let mut builder = Spritesheet::build().sprites(sprites);
    if variant.sdf {
        builder = builder.make_sdf();
    }
    let sheet = builder
        .generate()
        .ok_or_else(|| "the icons could not be packed into one sheet".to_string())?;
    let png = sheet.encode_png().map_err(|e| e.to_string())?;
    let index = serde_json::to_vec(sheet.get_index()).map_err(|e| e.to_string())?;
    Ok(Sheet {
        png: Arc::from(png),
        index: Arc::from(index),
        warnings,
    })
}

/// The SVG at `path` parsed as an icon: within `limits`, reaching no file
/// or network, text in the bundled font.
pub fn load_svg(path: &Path, limits: SpriteLimits) -> Result<usvg::Tree, String> {
    let size = std::fs::metadata(path).map_err(|e| e.to_string())?.len();
    if size > limits.max_bytes {
        return Err(format!(
            "{size} bytes, more than the {} allowed",
            limits.max_bytes
        ));
    }
    let data = std::fs::read(path).map_err(|e| e.to_string())?;
    let text =
        std::str::from_utf8(&data).map_err(|_| "not UTF-8 text (SVGZ is not read)".to_string())?;
    // No DTD: no entities, so no entity reaches a file or expands.
    let parse = usvg::roxmltree::ParsingOptions {
        allow_dtd: false,
        nodes_limit: limits.max_nodes,
        ..usvg::roxmltree::ParsingOptions::default()
    };
    let doc = usvg::roxmltree::Document::parse_with_options(text, parse)
        .map_err(|e| format!("not an SVG document: {e}"))?;
    let options = usvg::Options {
        resources_dir: None,
        fontdb: fonts(),
        image_href_resolver: usvg::ImageHrefResolver {
            resolve_data: usvg::ImageHrefResolver::default_data_resolver(),
            // Nothing outside the file: no path, no URL.
            resolve_string: Box::new(|_, _| None),
        },
        ..usvg::Options::default()
    };
    let tree =
        usvg::Tree::from_xmltree(&doc, &options).map_err(|e| format!("not an SVG icon: {e}"))?;
    let (w, h) = (tree.size().width(), tree.size().height());
    if w > limits.max_side as f32 || h > limits.max_side as f32 {
        return Err(format!(
            "{w}x{h} pixels, larger than the {} allowed per side",
            limits.max_side
        ));
    }
    Ok(tree)
}

/// The fonts text in icons is set in: the bundled one alone.
fn fonts() -> Arc<usvg::fontdb::Database> {
    static FONTS: std::sync::OnceLock<Arc<usvg::fontdb::Database>> = std::sync::OnceLock::new();
    FONTS
        .get_or_init(|| {
            let mut db = usvg::fontdb::Database::new();
            db.load_font_data(crate::text::BUNDLED_FONT.to_vec());
            db.set_sans_serif_family("Noto Sans");
            Arc::new(db)
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(files: &[(&str, &str)]) -> (tempfile::TempDir, Sprites) {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        let sets = BTreeMap::from([("icons".to_string(), dir.path().to_path_buf())]);
        (dir, Sprites::new(&sets, SpriteLimits::default()))
    }

    const SQUARE: &str = r##"<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16"><rect width="16" height="16" fill="#c00"/></svg>"##;

    #[test]
    fn a_folder_makes_a_sheet_and_its_index_at_two_ratios() {
        let (_dir, sprites) = set(&[("square.svg", SQUARE), ("notes.txt", "x")]);
        let one = sprites
            .sheet(
                "icons",
                Variant {
                    ratio: 1,
                    sdf: false,
                },
            )
            .unwrap();
        let index: serde_json::Value = serde_json::from_slice(&one.index).unwrap();
        assert_eq!(index["square"]["width"], 16);
        assert_eq!(index["square"]["pixelRatio"], 1);
        assert!(one.png.starts_with(b"\x89PNG"));
        let two = sprites
            .sheet(
                "icons",
                Variant {
                    ratio: 2,
                    sdf: false,
                },
            )
            .unwrap();
        let index: serde_json::Value = serde_json::from_slice(&two.index).unwrap();
        assert_eq!(index["square"]["width"], 32);
        let sdf = sprites
            .sheet(
                "icons",
                Variant {
                    ratio: 1,
                    sdf: true,
                },
            )
            .unwrap();
        let index: serde_json::Value = serde_json::from_slice(&sdf.index).unwrap();
        assert_eq!(index["square"]["sdf"], true);
    }

    #[test]
    fn broken_and_hostile_icons_are_named_and_left_out() {
        let deep = format!(
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="8" height="8">{}</svg>"#,
            "<g>".repeat(30_000) + &"</g>".repeat(30_000)
        );
        let (_dir, sprites) = set(&[
            ("square.svg", SQUARE),
            ("broken.svg", "<svg"),
            ("deep.svg", &deep),
            (
                "huge.svg",
                r#"<svg xmlns="http://www.w3.org/2000/svg" width="5000" height="10"/>"#,
            ),
        ]);
        let sheet = sprites
            .sheet(
                "icons",
                Variant {
                    ratio: 1,
                    sdf: false,
                },
            )
            .unwrap();
        let index: serde_json::Value = serde_json::from_slice(&sheet.index).unwrap();
        assert_eq!(index.as_object().unwrap().len(), 1, "{index}");
        let warnings = sheet.warnings.join("\n");
        for name in ["broken.svg", "deep.svg", "huge.svg"] {
            assert!(warnings.contains(name), "{warnings}");
        }
    }

    #[test]
    fn unknown_sets_are_named_with_those_known() {
        let (_dir, sprites) = set(&[("square.svg", SQUARE)]);
        let err = sprites
            .sheet(
                "maki",
                Variant {
                    ratio: 1,
                    sdf: false,
                },
            )
            .unwrap_err();
        assert!(err.to_string().contains("\"maki\"") && err.to_string().contains("icons"));
    }
}
