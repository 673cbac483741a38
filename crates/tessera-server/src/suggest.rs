//! Hints for a name that matched nothing: the closest name offered ("did
//! you mean") and the first few names offered, so that a typo in a URL, a
//! job or a command line is mended without reading the capabilities.

use std::fmt;

/// Names listed after a name that matched nothing; past them, a count.
pub const LISTED: usize = 20;

/// Names an unknown one is compared with, at most (the closest is looked
/// for among the first of them).
pub const MOST_COMPARED: usize = 2000;

/// A name that matched nothing, with what was offered instead.
///
/// Displays as the name asked (quoted) followed by the hint, e.g.
/// `"dem_utm"; did you mean "dem_utm32"? (layers: relief, dem_utm32)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unknown {
    /// The name asked for, at most 64 characters of it.
    pub asked: String,
    /// The offered name closest to it, if one is close enough.
    pub closest: Option<String>,
    /// What the names are ("layers", "grids", "formats").
    kind: &'static str,
    /// The first [`LISTED`] names offered.
    listed: Vec<String>,
    /// How many names were offered in all.
    offered: usize,
}

impl Unknown {
    /// `asked` looked up among `offered` names of `kind` (a plural noun).
    pub fn among<'a>(
        asked: &str,
        kind: &'static str,
        offered: impl IntoIterator<Item = &'a str>,
    ) -> Unknown {
        let asked: String = asked.chars().take(64).collect();
        let mut listed = Vec::new();
        let mut count = 0;
        let mut best: Option<(usize, &str)> = None;
        for name in offered {
            count += 1;
            if listed.len() < LISTED {
                listed.push(name.to_string());
            }
            // Edit distances cost the product of the lengths: past the
            // first [`MOST_COMPARED`] names, and for names whose lengths
            // alone rule them out, none is computed (an unknown name on a
            // server of many thousand layers stays cheap to answer).
            if count > MOST_COMPARED {
                continue;
            }
            let bound = close_enough(&asked, name);
            if asked.chars().count().abs_diff(name.chars().count()) > bound {
                continue;
            }
            let distance = distance(&asked, name);
            if distance <= bound && best.is_none_or(|(d, _)| distance < d) {
                best = Some((distance, name));
            }
        }
        Unknown {
            closest: best.map(|(_, name)| name.to_string()),
            asked,
            kind,
            listed,
            offered: count,
        }
    }

    /// The hint alone, to follow a sentence: `; did you mean "x"?
    /// (layers: a, b)`, or ` (layers: a, b)` when nothing is close.
    pub fn hint(&self) -> String {
        let closest = self
            .closest
            .as_ref()
            .map_or(String::new(), |c| format!("; did you mean {c:?}?"));
        if self.offered == 0 {
            return format!("{closest} (no {} are offered)", self.kind);
        }
        let more = if self.offered > self.listed.len() {
            format!(" and {} more", self.offered - self.listed.len())
        } else {
            String::new()
        };
        format!(
            "{closest} ({}: {}{more})",
            self.kind,
            self.listed.join(", ")
        )
    }
}

impl fmt::Display for Unknown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}{}", self.asked, self.hint())
    }
}

/// A serde message about an unknown field or variant (`unknown field
/// `cahce`, expected one of `name`, `cache``) with the closest expected
/// name added (`; did you mean `cache`?`); other messages unchanged.
pub fn serde_message(message: &str) -> String {
    let Some(rest) = message
        .strip_prefix("unknown field `")
        .or_else(|| message.strip_prefix("unknown variant `"))
    else {
        return message.to_string();
    };
    let Some((asked, expected)) = rest.split_once('`') else {
        return message.to_string();
    };
    // The names serde lists are the ones between backticks.
    let names = expected.split('`').skip(1).step_by(2);
    match Unknown::among(asked, "names", names).closest {
        Some(name) => format!("{message}; did you mean `{name}`?"),
        None => message.to_string(),
    }
}

/// Edits between two names, letters compared without case.
fn distance(a: &str, b: &str) -> usize {
    strsim::damerau_levenshtein(&a.to_lowercase(), &b.to_lowercase())
}

/// The most edits at which `offered` still reads as a typo of `asked`:
/// a third of the longer name, at least one; a name that one contains
/// whole (`dem_utm` in `dem_utm32`) is close too.
fn close_enough(asked: &str, offered: &str) -> usize {
    let (a, o) = (asked.to_lowercase(), offered.to_lowercase());
    if a.len() >= 3 && o.len() >= 3 && (o.contains(&a) || a.contains(&o)) {
        return usize::MAX;
    }
    (a.chars().count().max(o.chars().count()) / 3).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_closest_name_is_suggested_and_the_offered_ones_listed() {
        let u = Unknown::among("dem_utm", "layers", ["relief", "dem_utm32", "landsat"]);
        assert_eq!(u.closest.as_deref(), Some("dem_utm32"));
        assert_eq!(
            u.to_string(),
            r#""dem_utm"; did you mean "dem_utm32"? (layers: relief, dem_utm32, landsat)"#
        );
        let typo = Unknown::among("releif", "layers", ["relief", "landsat"]);
        assert_eq!(typo.closest.as_deref(), Some("relief"));
        let case = Unknown::among("Relief", "layers", ["relief"]);
        assert_eq!(case.closest.as_deref(), Some("relief"));
    }

    #[test]
    fn nothing_close_lists_only_and_long_lists_are_cut() {
        let u = Unknown::among("zzz", "formats", ["png", "jpg"]);
        assert_eq!(u.closest, None);
        assert_eq!(u.hint(), " (formats: png, jpg)");
        let names: Vec<String> = (0..25).map(|i| format!("layer{i}")).collect();
        let long = Unknown::among("x", "layers", names.iter().map(String::as_str));
        assert!(
            long.hint().ends_with("layer19 and 5 more)"),
            "{}",
            long.hint()
        );
        let none = Unknown::among("x", "grids", []);
        assert_eq!(none.hint(), " (no grids are offered)");
    }

    #[test]
    fn serde_messages_get_the_closest_expected_name() {
        assert_eq!(
            serde_message("unknown field `cahce`, expected one of `name`, `cache`, `style`"),
            "unknown field `cahce`, expected one of `name`, `cache`, `style`; did you mean `cache`?"
        );
        assert_eq!(
            serde_message("unknown variant `gdl`, expected `gdal` or `wms`"),
            "unknown variant `gdl`, expected `gdal` or `wms`; did you mean `gdal`?"
        );
        let far = "unknown field `zzzzzz`, expected `name`";
        assert_eq!(serde_message(far), far);
        assert_eq!(
            serde_message("missing field `name`"),
            "missing field `name`"
        );
    }

    #[test]
    fn only_the_first_names_are_compared_and_counted_all() {
        let mut names: Vec<String> = (0..MOST_COMPARED).map(|i| format!("other{i}")).collect();
        names.push("relief".into());
        let u = Unknown::among("releif", "layers", names.iter().map(String::as_str));
        assert_eq!(u.closest, None);
        assert!(
            u.hint()
                .ends_with(&format!("and {} more)", MOST_COMPARED + 1 - LISTED)),
            "{}",
            u.hint()
        );
    }

    #[test]
    fn a_long_asked_name_is_cut() {
        let u = Unknown::among(&"a".repeat(1000), "layers", ["b"]);
        assert_eq!(u.asked.len(), 64);
    }
}
