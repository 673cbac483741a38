//! The OGC API `subset` parameter (Common Part 2, Maps): comma-separated
//! `axis(value)` slices and `axis(low:high)` trims, a value in double
//! quotes when it holds a colon (`time("2024-01-01T00:00:00Z")`), `*` for
//! an open side. Spatial axes (`Lat`, `Lon`, `E`, `N`, `x`, `y`) cut the
//! map's area; any other axis names a dimension.

/// What a subset takes along one axis.
#[derive(Debug, Clone, PartialEq)]
pub enum Extent {
    /// One value (`axis(v)`).
    Slice(String),
    /// From `low` to `high`, either side open when `None` (`axis(low:*)`).
    Trim(Option<String>, Option<String>),
}

/// The subset of one axis.
#[derive(Debug, Clone, PartialEq)]
pub struct AxisSubset {
    /// The axis name, lower case.
    pub axis: String,
    /// What it takes.
    pub extent: Extent,
}

/// Which way a spatial axis runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Longitude, easting, x.
    X,
    /// Latitude, northing, y.
    Y,
}

/// The direction of a spatial axis name (lower case); `None` for a
/// dimension's.
pub fn spatial(axis: &str) -> Option<Direction> {
    match axis {
        "lon" | "long" | "longitude" | "e" | "easting" | "x" => Some(Direction::X),
        "lat" | "latitude" | "n" | "northing" | "y" => Some(Direction::Y),
        _ => None,
    }
}

/// The subsets of every `subset` value among `values`, in order; an error
/// says which part is not `axis(value)` or `axis(low:high)`.
pub fn parse<'a>(values: impl IntoIterator<Item = &'a str>) -> Result<Vec<AxisSubset>, String> {
    let mut out = Vec::new();
    for text in values {
        for part in split_parts(text) {
            let part = part.trim();
            let malformed = || format!("subset {part:?}: axis(value) or axis(low:high)");
            let (axis, rest) = part.split_once('(').ok_or_else(malformed)?;
            let inner = rest.strip_suffix(')').ok_or_else(malformed)?;
            let axis = axis.trim().to_ascii_lowercase();
            if axis.is_empty() {
                return Err(malformed());
            }
            let extent = extent(inner).ok_or_else(malformed)?;
            out.push(AxisSubset { axis, extent });
        }
    }
    Ok(out)
}

/// The parts of a `subset` value: split at commas outside parentheses and
/// quotes.
fn split_parts(text: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut quoted, mut start) = (Vec::new(), 0i32, false, 0);
    for (i, c) in text.char_indices() {
        match c {
            '"' => quoted = !quoted,
            '(' if !quoted => depth += 1,
            ')' if !quoted => depth -= 1,
            ',' if !quoted && depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts.into_iter().filter(|p| !p.trim().is_empty()).collect()
}

/// A slice or trim from what lies between the parentheses.
fn extent(inner: &str) -> Option<Extent> {
    let inner = inner.trim();
    // Split at the colon outside quotes; an unquoted time (`T12:00`) is a
    // slice, its colons its own.
    let mut quoted = false;
    let mut colon = None;
    for (i, c) in inner.char_indices() {
        match c {
            '"' => quoted = !quoted,
            ':' if !quoted => {
                if colon.is_some() {
                    colon = None;
                    break;
                }
                colon = Some(i);
            }
            _ => {}
        }
    }
    let value = |t: &str| -> Option<String> {
        let t = t.trim();
        let t = match t.strip_prefix('"') {
            Some(rest) => rest.strip_suffix('"')?,
            None => t,
        };
        (!t.is_empty()).then(|| t.to_string())
    };
    let looks_like_time = |t: &str| t.contains('T') && t.bytes().any(|b| b.is_ascii_digit());
    match colon {
        Some(i) if inner.contains('"') || !looks_like_time(inner) => {
            let side = |t: &str| -> Option<Option<String>> {
                if t.trim() == "*" {
                    Some(None)
                } else {
                    value(t).map(Some)
                }
            };
            Some(Extent::Trim(side(&inner[..i])?, side(&inner[i + 1..])?))
        }
        _ => value(inner).map(Extent::Slice),
    }
}

/// Writes `datetime` (OGC API's `time`) and the `subset` of every axis
/// that is not spatial as the dimension parameters a tile address reads
/// (a trim as `low/high`, `..` for an open side); an error names a
/// malformed `subset`.
pub(super) fn dimension_params(params: &mut Vec<(String, String)>) -> Result<(), String> {
    let subsets = parse(
        params
            .iter()
            .filter(|(k, _)| k == "subset")
            .map(|(_, v)| v.as_str()),
    )?;
    let mut extra = Vec::new();
    if let Some((_, v)) = params.iter().find(|(k, _)| k == "datetime")
        && !params.iter().any(|(n, _)| n == "time")
    {
        extra.push(("time".to_string(), v.clone()));
    }
    for s in subsets {
        if spatial(&s.axis).is_some() {
            continue;
        }
        let value = match s.extent {
            Extent::Slice(v) => v,
            Extent::Trim(low, high) => format!(
                "{}/{}",
                low.as_deref().unwrap_or(".."),
                high.as_deref().unwrap_or("..")
            ),
        };
        extra.push((s.axis, value));
    }
    params.extend(extra);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str) -> AxisSubset {
        let mut all = parse([text]).unwrap();
        assert_eq!(all.len(), 1, "{text}");
        all.remove(0)
    }

    #[test]
    fn slices_and_trims_with_quotes_and_open_sides() {
        assert_eq!(
            one("Lat(10:20)").extent,
            Extent::Trim(Some("10".into()), Some("20".into()))
        );
        assert_eq!(one("lon(*:5)").extent, Extent::Trim(None, Some("5".into())));
        assert_eq!(one("elevation(500)").extent, Extent::Slice("500".into()));
        assert_eq!(
            one("time(\"2024-01-01T00:00:00Z\":\"2024-02-01T00:00:00Z\")").extent,
            Extent::Trim(
                Some("2024-01-01T00:00:00Z".into()),
                Some("2024-02-01T00:00:00Z".into())
            )
        );
        assert_eq!(
            one("time(2024-01-01T12:00:00Z)").extent,
            Extent::Slice("2024-01-01T12:00:00Z".into())
        );
        assert_eq!(one("scenario(\"low\")").extent, Extent::Slice("low".into()));
        let all = parse(["Lat(1:2),Lon(3:4)", "time(\"2024-01-01\")"]).unwrap();
        assert_eq!(
            all.iter().map(|s| s.axis.as_str()).collect::<Vec<_>>(),
            ["lat", "lon", "time"]
        );
        assert_eq!(spatial("lat"), Some(Direction::Y));
        assert_eq!(spatial("e"), Some(Direction::X));
        assert_eq!(spatial("time"), None);
    }

    #[test]
    fn malformed_subsets_are_refused() {
        for bad in ["Lat", "Lat(1:2", "(5)", "Lat()", "Lat(\"1:2)"] {
            assert!(parse([bad]).is_err(), "{bad}");
        }
    }
}
