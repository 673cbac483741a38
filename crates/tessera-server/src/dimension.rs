//! Dimensions of a layer (time, elevation, or any named one): the values a
//! layer has, how a value a client writes becomes the one canonical
//! spelling every key is built from, and which value a request gets (the
//! default, the one asked for, or the nearest).
//!
//! A leaf: nothing of the server is imported. Canonical values are what
//! capabilities list and what tile keys hold (in [`key_form`]), so
//! `2024-01-01`, `2024-01-01T00:00Z` and `2024-01-01T00:00:00+00:00` are one
//! cache entry.

use std::collections::HashMap;

use chrono::{DateTime, NaiveDate, NaiveDateTime, SecondsFormat, Utc};

/// The longest value a client may write, in bytes.
pub const MAX_VALUE_LEN: usize = 64;

/// How a dimension's values are read and ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// ISO 8601 instants, kept in UTC (`time`, `reference_time`).
    Time,
    /// Numbers (`elevation`), kept in the shortest spelling that reads back
    /// as the same number.
    Number,
    /// Any other word (`scenario`): letters, digits, `_`, `-`, `.`.
    Text,
}

impl Kind {
    /// The kind a dimension of `name` has unless configured: `time` and
    /// names ending in `_time` are times, `elevation` is a number.
    pub fn for_name(name: &str) -> Kind {
        if name == "time" || name.ends_with("_time") {
            Kind::Time
        } else if name == "elevation" {
            Kind::Number
        } else {
            Kind::Text
        }
    }

    /// The units capabilities name (`ISO8601`, `EPSG:5030`, or none).
    pub fn units(self) -> &'static str {
        match self {
            Kind::Time => "ISO8601",
            Kind::Number => "EPSG:5030",
            Kind::Text => "",
        }
    }
}

/// Which value a request without one gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DefaultValue {
    /// The greatest value (the latest time).
    Latest,
    /// The smallest value.
    Earliest,
    /// This value (canonical).
    Value(String),
}

/// Why a dimension value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DimensionError {
    /// The text is not a value of the dimension's kind.
    #[error("{name} {value:?} is not {what}")]
    Malformed {
        /// The dimension.
        name: String,
        /// The text, cut to [`MAX_VALUE_LEN`].
        value: String,
        /// What a value looks like.
        what: &'static str,
    },
    /// The value is well formed but the layer has no data for it.
    #[error("layer has no {name} {value:?}; its values are listed in the capabilities")]
    Unknown {
        /// The dimension.
        name: String,
        /// The canonical value.
        value: String,
    },
    /// Several values (a list or a range) where one is taken.
    #[error("{name} takes one value here, not {value:?}")]
    NotOne {
        /// The dimension.
        name: String,
        /// The text.
        value: String,
    },
    /// The layer at the value could not be opened (its file went away, its
    /// database is down): the server log says why.
    #[error("the layer at {name} {value:?} cannot be opened now; the server log has the details")]
    Unavailable {
        /// The dimension.
        name: String,
        /// The canonical value.
        value: String,
    },
    /// The dimension has no value at all (an empty directory).
    #[error("layer has no {name} value yet")]
    Empty {
        /// The dimension.
        name: String,
    },
}

/// A dimension of a layer and the values it has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dimension {
    /// Its name, lower case (`time`, `elevation`, `scenario`).
    pub name: String,
    /// How its values are read and ordered.
    pub kind: Kind,
    /// Its values, canonical, in order (times and numbers ascending).
    pub values: Vec<String>,
    /// The value of a request that names none.
    pub default: DefaultValue,
    /// Whether a value the layer lacks snaps to the nearest it has.
    pub nearest: bool,
    /// Most values a capabilities document lists (see [`Dimension::listed`]).
    pub max_listed: usize,
    /// The spellings requests most often use for each value (the value
    /// itself; a time's date alone at midnight, without seconds): found
    /// without parsing. Filled by [`Dimension::index_spellings`].
    pub spellings: HashMap<String, usize>,
}

impl Dimension {
    /// The canonical value a request gets: the default when `asked` is
    /// `None` or empty, else `asked` made canonical and found among the
    /// values (or the nearest, with `nearest`).
    pub fn resolve(&self, asked: Option<&str>) -> Result<String, DimensionError> {
        let asked = asked.map(str::trim).filter(|a| !a.is_empty());
        let Some(text) = asked else {
            return self.default_value();
        };
        if let Some(&i) = self.spellings.get(text) {
            return Ok(self.values[i].clone());
        }
        if text.contains(',') || text.contains('/') {
            return Err(DimensionError::NotOne {
                name: self.name.clone(),
                value: cut(text),
            });
        }
        if text.eq_ignore_ascii_case("current") || text.eq_ignore_ascii_case("default") {
            return self.default_value();
        }
        let value = canonical(self.kind, &self.name, text)?;
        if self
            .values
            .binary_search_by(|v| self.order(v, &value))
            .is_ok()
        {
            return Ok(value);
        }
        if self.nearest
            && let Some(near) = self.nearest_to(&value)
        {
            return Ok(near);
        }
        Err(DimensionError::Unknown {
            name: self.name.clone(),
            value,
        })
    }

    /// The greatest value within the interval `text` names (`low/high`,
    /// where `..`, `*` or nothing leaves a side open, as OGC API
    /// `datetime` writes it): `None` when `text` is no interval, `Unknown`
    /// when no value lies within it.
    pub fn greatest_within(&self, text: &str) -> Option<Result<String, DimensionError>> {
        let text = text.trim();
        let (low, high) = text.split_once('/')?;
        if high.contains('/') {
            return Some(Err(DimensionError::NotOne {
                name: self.name.clone(),
                value: cut(text),
            }));
        }
        let bound = |t: &str| {
            let t = t.trim();
            if t.is_empty() || t == ".." || t == "*" {
                Ok(None)
            } else {
                canonical(self.kind, &self.name, t).map(Some)
            }
        };
        Some((|| {
            let (low, high) = (bound(low)?, bound(high)?);
            self.values
                .iter()
                .rev()
                .find(|v| {
                    low.as_ref().is_none_or(|l| self.order(v, l).is_ge())
                        && high.as_ref().is_none_or(|h| self.order(v, h).is_le())
                })
                .cloned()
                .ok_or_else(|| DimensionError::Unknown {
                    name: self.name.clone(),
                    value: cut(text),
                })
        })())
    }

    /// The range `text` names (`start/end`, each made canonical, in
    /// order); `None` when it is not a range.
    pub fn range(&self, text: &str) -> Option<Result<(String, String), DimensionError>> {
        let (from, to) = text.trim().split_once('/')?;
        if to.contains('/') {
            // start/end/period: a list of values, not one range.
            return Some(Err(DimensionError::NotOne {
                name: self.name.clone(),
                value: cut(text),
            }));
        }
        let bound = |t: &str| canonical(self.kind, &self.name, t);
        Some((|| {
            let (from, to) = (bound(from)?, bound(to)?);
            if self.order(&from, &to).is_gt() {
                return Err(DimensionError::Malformed {
                    name: self.name.clone(),
                    value: cut(text),
                    what: "a range from the lower to the higher value",
                });
            }
            Ok((from, to))
        })())
    }

    /// The default value, canonical.
    pub fn default_value(&self) -> Result<String, DimensionError> {
        let empty = || DimensionError::Empty {
            name: self.name.clone(),
        };
        match &self.default {
            DefaultValue::Latest => self.values.last().cloned().ok_or_else(empty),
            DefaultValue::Earliest => self.values.first().cloned().ok_or_else(empty),
            DefaultValue::Value(v) => Ok(v.clone()),
        }
    }

    /// The values as capabilities list them: every value while they are
    /// at most `max_listed`; beyond, values evenly spaced as one
    /// `start/end/period` (ISO 8601 period for times, a step for numbers),
    /// else the latest `max_listed`.
    pub fn listed(&self) -> Vec<String> {
        if self.values.len() <= self.max_listed.max(1) {
            return self.values.clone();
        }
        if let Some(interval) = self.interval() {
            return vec![interval];
        }
        self.values[self.values.len() - self.max_listed.max(1)..].to_vec()
    }

    /// `start/end/period` when the values are evenly spaced.
    fn interval(&self) -> Option<String> {
        let (first, last) = (self.values.first()?, self.values.last()?);
        match self.kind {
            Kind::Time => {
                let times: Vec<DateTime<Utc>> = self
                    .values
                    .iter()
                    .map(|v| parse_time(v))
                    .collect::<Option<_>>()?;
                let step = (times[1] - times[0]).num_seconds();
                let even = step > 0
                    && times
                        .windows(2)
                        .all(|w| (w[1] - w[0]).num_milliseconds() == step * 1000);
                even.then(|| format!("{first}/{last}/{}", iso_period(step)))
            }
            Kind::Number => {
                let numbers: Vec<f64> = self
                    .values
                    .iter()
                    .map(|v| v.parse().ok())
                    .collect::<Option<_>>()?;
                let step = numbers[1] - numbers[0];
                let even = step > 0.0
                    && numbers
                        .windows(2)
                        .all(|w| ((w[1] - w[0]) - step).abs() <= step * 1e-9);
                even.then(|| format!("{first}/{last}/{step}"))
            }
            Kind::Text => None,
        }
    }

    /// Indexes the common spellings of every value (after the values are
    /// sorted), so that requests naming them skip parsing.
    pub fn index_spellings(&mut self) {
        let mut spellings = HashMap::with_capacity(self.values.len() * 3);
        for (i, v) in self.values.iter().enumerate() {
            spellings.insert(v.clone(), i);
            if self.kind == Kind::Time
                && let Some(no_seconds) = v.strip_suffix(":00Z")
            {
                spellings.insert(format!("{no_seconds}Z"), i);
                if let Some(date) = v.strip_suffix("T00:00:00Z") {
                    spellings.insert(date.to_string(), i);
                }
            }
        }
        self.spellings = spellings;
    }

    /// Sorts `values` (canonical) in the dimension's order, without
    /// repeats.
    pub fn sort(&self, values: &mut Vec<String>) {
        values.sort_by(|a, b| self.order(a, b));
        values.dedup();
    }

    /// The order of two canonical values of the dimension.
    pub fn order(&self, a: &str, b: &str) -> std::cmp::Ordering {
        match self.kind {
            // Canonical times are in one spelling: text order is time order.
            Kind::Time | Kind::Text => a.cmp(b),
            Kind::Number => {
                let n = |s: &str| s.parse::<f64>().unwrap_or(f64::NAN);
                n(a).total_cmp(&n(b))
            }
        }
    }

    fn nearest_to(&self, value: &str) -> Option<String> {
        let distance: Box<dyn Fn(&str) -> f64> = match self.kind {
            Kind::Time => {
                let at = parse_time(value)?;
                Box::new(move |v| {
                    parse_time(v).map_or(f64::INFINITY, |t| {
                        (t - at).num_milliseconds().unsigned_abs() as f64
                    })
                })
            }
            Kind::Number => {
                let at: f64 = value.parse().ok()?;
                Box::new(move |v| v.parse::<f64>().map_or(f64::INFINITY, |n| (n - at).abs()))
            }
            Kind::Text => return None,
        };
        self.values
            .iter()
            .min_by(|a, b| distance(a).total_cmp(&distance(b)))
            .cloned()
    }
}

/// `seconds` as an ISO 8601 period (`P1D`, `PT6H`, `PT90S`).
fn iso_period(seconds: i64) -> String {
    if seconds % 86_400 == 0 {
        format!("P{}D", seconds / 86_400)
    } else if seconds % 3600 == 0 {
        format!("PT{}H", seconds / 3600)
    } else if seconds % 60 == 0 {
        format!("PT{}M", seconds / 60)
    } else {
        format!("PT{seconds}S")
    }
}

/// `text` as the canonical value of a dimension of `kind` named `name`.
pub fn canonical(kind: Kind, name: &str, text: &str) -> Result<String, DimensionError> {
    let malformed = |what| DimensionError::Malformed {
        name: name.to_string(),
        value: cut(text),
        what,
    };
    let text = text.trim();
    if text.is_empty() || text.len() > MAX_VALUE_LEN {
        return Err(malformed("a value of at most 64 characters"));
    }
    match kind {
        Kind::Time => parse_time(text)
            .map(|t| t.to_rfc3339_opts(SecondsFormat::AutoSi, true))
            .ok_or_else(|| malformed("an ISO 8601 time (2024-01-01 or 2024-01-01T12:00:00Z)")),
        Kind::Number => match text.parse::<f64>() {
            // `{}` of an f64 is the shortest spelling that reads back the
            // same; -0 is 0.
            Ok(n) if n.is_finite() => Ok(format!("{}", n + 0.0)),
            _ => Err(malformed("a number")),
        },
        Kind::Text => {
            if text
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
            {
                Ok(text.to_string())
            } else {
                Err(malformed("a word of letters, digits, '_', '-' and '.'"))
            }
        }
    }
}

/// Steps `at` (an index into each of lists `lens` long) to the next
/// combination, the first index fastest; `false` once every combination
/// was stepped through (`at` is then back at the first).
pub fn next_combination(at: &mut [usize], lens: &[usize]) -> bool {
    for (i, len) in at.iter_mut().zip(lens) {
        *i += 1;
        if *i < *len {
            return true;
        }
        *i = 0;
    }
    false
}

/// Values one `start/end/period` may stand for at most when expanded.
pub const MAX_EXPANDED: usize = 100_000;

/// The values an OGC extent stands for, as another service's capabilities
/// write them: items separated by commas, each a value or
/// `start/end/period` (an ISO 8601 duration for times, a step for
/// numbers), expanded. Each is (canonical value, the spelling as written,
/// or the canonical one for an expanded value). At most [`MAX_EXPANDED`].
pub fn expand_extent(kind: Kind, name: &str, text: &str) -> Result<Vec<(String, String)>, String> {
    let mut values = Vec::new();
    for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let parts: Vec<&str> = item.split('/').collect();
        match parts[..] {
            [one] => values.push((
                canonical(kind, name, one).map_err(|e| e.to_string())?,
                one.to_string(),
            )),
            [start, end, period] => {
                for value in expand_range(kind, name, start, end, period)? {
                    values.push((value.clone(), value));
                    if values.len() > MAX_EXPANDED {
                        return Err(format!(
                            "{name}: {item:?} stands for more than {MAX_EXPANDED} values"
                        ));
                    }
                }
            }
            _ => {
                return Err(format!(
                    "{name}: {item:?} is neither a value nor start/end/period"
                ));
            }
        }
    }
    if values.is_empty() {
        return Err(format!("{name}: no value in {text:?}"));
    }
    Ok(values)
}

/// The canonical values from `start` to `end` (both included) every
/// `period`.
fn expand_range(
    kind: Kind,
    name: &str,
    start: &str,
    end: &str,
    period: &str,
) -> Result<Vec<String>, String> {
    let bad = |what: &str| format!("{name}: {start}/{end}/{period}: {what}");
    match kind {
        Kind::Time => {
            let (from, to) = (
                parse_time(start.trim()).ok_or_else(|| bad("the start is not a time"))?,
                parse_time(end.trim()).ok_or_else(|| bad("the end is not a time"))?,
            );
            let (months, seconds) = iso_duration(period.trim())
                .ok_or_else(|| bad("the period is not an ISO 8601 duration"))?;
            if months == 0 && seconds <= 0 {
                return Err(bad("the period is empty"));
            }
            let mut out = Vec::new();
            let mut step = 0u32;
            loop {
                let t = from
                    .checked_add_months(chrono::Months::new(months * step))
                    .and_then(|t| {
                        t.checked_add_signed(chrono::TimeDelta::try_seconds(
                            seconds * i64::from(step),
                        )?)
                    })
                    .ok_or_else(|| bad("out of range"))?;
                if t > to {
                    return Ok(out);
                }
                out.push(t.to_rfc3339_opts(SecondsFormat::AutoSi, true));
                if out.len() > MAX_EXPANDED {
                    return Err(bad(&format!("more than {MAX_EXPANDED} values")));
                }
                step += 1;
            }
        }
        Kind::Number => {
            let number = |t: &str, what: &str| {
                t.trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|n| n.is_finite())
                    .ok_or_else(|| bad(what))
            };
            let (from, to, by) = (
                number(start, "the start is not a number")?,
                number(end, "the end is not a number")?,
                number(period, "the step is not a number")?,
            );
            if by <= 0.0 {
                return Err(bad("the step is not positive"));
            }
            let count = ((to - from) / by + 1e-9).floor();
            if count < 0.0 || count >= MAX_EXPANDED as f64 {
                return Err(bad(&format!("not between 1 and {MAX_EXPANDED} values")));
            }
            let count = count as u32;
            (0..=count)
                .map(|i| {
                    canonical(kind, name, &format!("{}", from + by * f64::from(i)))
                        .map_err(|e| e.to_string())
                })
                .collect()
        }
        Kind::Text => Err(bad("words have no ranges")),
    }
}

/// An ISO 8601 duration (`P1D`, `PT6H`, `P1M`, `P1Y2M3DT4H5M6S`, `P2W`)
/// as (months, seconds).
fn iso_duration(text: &str) -> Option<(u32, i64)> {
    let rest = text.strip_prefix('P')?;
    let (date, time) = rest.split_once('T').unwrap_or((rest, ""));
    let (mut months, mut seconds) = (0u32, 0i64);
    let mut number = String::new();
    for c in date.chars() {
        if c.is_ascii_digit() {
            number.push(c);
            continue;
        }
        let n: u32 = number.parse().ok()?;
        number.clear();
        match c {
            'Y' => months = months.checked_add(n.checked_mul(12)?)?,
            'M' => months = months.checked_add(n)?,
            'W' => seconds += i64::from(n) * 7 * 86_400,
            'D' => seconds += i64::from(n) * 86_400,
            _ => return None,
        }
    }
    if !number.is_empty() {
        return None;
    }
    for c in time.chars() {
        if c.is_ascii_digit() {
            number.push(c);
            continue;
        }
        let n: i64 = number.parse().ok()?;
        number.clear();
        match c {
            'H' => seconds += n * 3600,
            'M' => seconds += n * 60,
            'S' => seconds += n,
            _ => return None,
        }
    }
    (number.is_empty() && rest != "T" && !rest.is_empty()).then_some((months, seconds))
}

/// The canonical time `offset` `units` after a reference, as CF and netCDF
/// write a time axis (`days since 2024-01-01`, `hours since 1970-01-01
/// 00:00:00`); `None` when the units are not of that form.
pub fn time_from_offset(offset: f64, units: &str) -> Option<String> {
    let (unit, reference) = units.trim().split_once(" since ")?;
    let seconds_per_unit = match unit.trim().to_ascii_lowercase().as_str() {
        "seconds" | "second" | "secs" | "sec" | "s" => 1.0,
        "minutes" | "minute" | "mins" | "min" => 60.0,
        "hours" | "hour" | "hrs" | "hr" | "h" => 3600.0,
        "days" | "day" | "d" => 86_400.0,
        _ => return None,
    };
    // `2024-01-01 00:00:00` and `2024-01-01 00:00:00 UTC` as ISO 8601.
    let reference = reference
        .trim()
        .trim_end_matches(" UTC")
        .replacen(' ', "T", 1);
    let start = parse_time(&reference)?;
    let millis = (offset * seconds_per_unit * 1000.0).round();
    if !millis.is_finite() || millis.abs() > 1e17 {
        return None;
    }
    let t = start.checked_add_signed(chrono::TimeDelta::try_milliseconds(millis as i64)?)?;
    Some(t.to_rfc3339_opts(SecondsFormat::AutoSi, true))
}

/// An ISO 8601 time: a date (`2024-01-01`), or a date and time with or
/// without seconds, fractions and an offset (none: UTC).
fn parse_time(text: &str) -> Option<DateTime<Utc>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Some(t.with_timezone(&Utc));
    }
    for format in ["%Y-%m-%dT%H:%M%#z", "%Y-%m-%dT%H:%M%:z"] {
        if let Ok(t) = DateTime::parse_from_str(text, format) {
            return Some(t.with_timezone(&Utc));
        }
    }
    let naive = text.strip_suffix('Z').unwrap_or(text);
    for format in ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%dT%H:%M"] {
        if let Ok(t) = NaiveDateTime::parse_from_str(naive, format) {
            return Some(t.and_utc());
        }
    }
    NaiveDate::parse_from_str(naive, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|t| t.and_utc())
}

/// The form of a canonical value inside a tile key (a store's path or
/// object name): `:` dropped from times (`2024-01-01T000000Z`, still ISO
/// 8601), everything else as it is.
pub fn key_form(value: &str) -> String {
    value.replace(':', "")
}

/// The layer key of `base` at `values` (name, canonical value), each
/// appended as `~name=value`; `base` itself without values, so a layer
/// without dimensions keeps its keys.
pub fn layer_key(base: &str, values: &[(String, String)]) -> String {
    let mut key = base.to_string();
    for (name, value) in values {
        key.push('~');
        key.push_str(name);
        key.push('=');
        key.push_str(&key_form(value));
    }
    key
}

fn cut(text: &str) -> String {
    text.chars().take(MAX_VALUE_LEN).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn time(values: &[&str], nearest: bool) -> Dimension {
        let mut d = Dimension {
            name: "time".into(),
            kind: Kind::Time,
            values: values
                .iter()
                .map(|v| canonical(Kind::Time, "time", v).unwrap())
                .collect(),
            default: DefaultValue::Latest,
            nearest,
            max_listed: 1000,
            spellings: HashMap::new(),
        };
        let mut values = d.values.clone();
        d.sort(&mut values);
        d.values = values;
        d.index_spellings();
        d
    }

    #[test]
    fn combinations_are_stepped_through_once_each() {
        let lens = [2, 3];
        let mut at = [0, 0];
        let mut seen = vec![at];
        while next_combination(&mut at, &lens) {
            seen.push(at);
        }
        assert_eq!(seen, [[0, 0], [1, 0], [0, 1], [1, 1], [0, 2], [1, 2]]);
        assert_eq!(at, [0, 0]);
        assert!(!next_combination(&mut [], &[]));
    }

    #[test]
    fn extents_of_other_services_are_expanded() {
        let v = expand_extent(Kind::Time, "time", "2024-01-01, 2024-02-01T00:00Z").unwrap();
        assert_eq!(
            v,
            vec![
                ("2024-01-01T00:00:00Z".to_string(), "2024-01-01".to_string()),
                (
                    "2024-02-01T00:00:00Z".to_string(),
                    "2024-02-01T00:00Z".to_string()
                ),
            ]
        );
        let v = expand_extent(Kind::Time, "time", "2024-01-01/2024-01-02/PT12H").unwrap();
        let got: Vec<&str> = v.iter().map(|(c, _)| c.as_str()).collect();
        assert_eq!(
            got,
            [
                "2024-01-01T00:00:00Z",
                "2024-01-01T12:00:00Z",
                "2024-01-02T00:00:00Z"
            ]
        );
        // Months from the start (clamped to each month's last day).
        let v = expand_extent(Kind::Time, "time", "2024-01-31/2024-04-30/P1M").unwrap();
        let got: Vec<&str> = v.iter().map(|(c, _)| &c[..10]).collect();
        assert_eq!(
            got,
            ["2024-01-31", "2024-02-29", "2024-03-31", "2024-04-30"]
        );
        let v = expand_extent(Kind::Number, "elevation", "0/1000/250,5000").unwrap();
        let got: Vec<&str> = v.iter().map(|(c, _)| c.as_str()).collect();
        assert_eq!(got, ["0", "250", "500", "750", "1000", "5000"]);
        assert!(expand_extent(Kind::Time, "time", "2024-01-01/2024-01-02/P0D").is_err());
        assert!(
            expand_extent(Kind::Time, "time", "2000-01-01/2100-01-01/PT1S")
                .unwrap_err()
                .contains("more than")
        );
        assert!(expand_extent(Kind::Time, "time", "2024-01-01/2024-01-02").is_err());
        assert!(expand_extent(Kind::Number, "elevation", "0/10/-1").is_err());
        assert!(expand_extent(Kind::Time, "time", " , ").is_err());
    }

    #[test]
    fn offsets_from_a_reference_are_times() {
        assert_eq!(
            time_from_offset(31.0, "days since 2024-01-01").as_deref(),
            Some("2024-02-01T00:00:00Z")
        );
        assert_eq!(
            time_from_offset(6.0, "hours since 2024-01-01 00:00:00").as_deref(),
            Some("2024-01-01T06:00:00Z")
        );
        assert_eq!(
            time_from_offset(1_704_067_200.0, "seconds since 1970-01-01T00:00:00Z").as_deref(),
            Some("2024-01-01T00:00:00Z")
        );
        assert_eq!(time_from_offset(1.0, "fortnights since 2024-01-01"), None);
        assert_eq!(time_from_offset(1.0, "days"), None);
        assert_eq!(time_from_offset(f64::NAN, "days since 2024-01-01"), None);
    }

    #[test]
    fn one_instant_has_one_spelling() {
        let spellings = [
            "2024-01-01",
            "2024-01-01T00:00:00Z",
            "2024-01-01T00:00Z",
            "2024-01-01T00:00:00+00:00",
            "2024-01-01T01:00:00+01:00",
            "2024-01-01T00:00:00.000Z",
            "2024-01-01T00:00:00",
        ];
        for s in spellings {
            assert_eq!(
                canonical(Kind::Time, "time", s).unwrap(),
                "2024-01-01T00:00:00Z",
                "{s}"
            );
        }
        assert_eq!(
            canonical(Kind::Time, "time", "2024-06-30T12:30:00.5Z").unwrap(),
            "2024-06-30T12:30:00.500Z"
        );
        for bad in ["2024-13-01", "yesterday", "2024-01-01T25:00Z", "", "1/2"] {
            assert!(canonical(Kind::Time, "time", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn numbers_and_words_have_one_spelling() {
        for (s, want) in [
            ("10", "10"),
            ("10.0", "10"),
            ("1e2", "100"),
            ("-0", "0"),
            ("0.50", "0.5"),
        ] {
            assert_eq!(
                canonical(Kind::Number, "elevation", s).unwrap(),
                want,
                "{s}"
            );
        }
        assert!(canonical(Kind::Number, "elevation", "NaN").is_err());
        assert!(canonical(Kind::Number, "elevation", "ten").is_err());
        assert_eq!(
            canonical(Kind::Text, "scenario", "rcp4.5").unwrap(),
            "rcp4.5"
        );
        assert!(canonical(Kind::Text, "scenario", "../etc").is_err());
        assert!(canonical(Kind::Text, "scenario", &"a".repeat(65)).is_err());
    }

    #[test]
    fn a_request_gets_the_default_its_value_or_the_nearest() {
        let d = time(&["2024-03-01", "2024-01-01", "2024-02-01"], false);
        assert_eq!(d.values[0], "2024-01-01T00:00:00Z");
        assert_eq!(d.resolve(None).unwrap(), "2024-03-01T00:00:00Z");
        assert_eq!(d.resolve(Some("")).unwrap(), "2024-03-01T00:00:00Z");
        assert_eq!(d.resolve(Some("current")).unwrap(), "2024-03-01T00:00:00Z");
        assert_eq!(
            d.resolve(Some("2024-02-01T00:00Z")).unwrap(),
            "2024-02-01T00:00:00Z"
        );
        assert!(matches!(
            d.resolve(Some("2024-02-03")),
            Err(DimensionError::Unknown { .. })
        ));
        assert!(matches!(
            d.resolve(Some("2024-01-01/2024-02-01")),
            Err(DimensionError::NotOne { .. })
        ));
        assert!(matches!(
            d.resolve(Some("2024-01-01,2024-02-01")),
            Err(DimensionError::NotOne { .. })
        ));
        let near = time(&["2024-01-01", "2024-02-01"], true);
        assert_eq!(
            near.resolve(Some("2024-01-20")).unwrap(),
            "2024-02-01T00:00:00Z"
        );
        assert_eq!(
            near.resolve(Some("2023-06-01")).unwrap(),
            "2024-01-01T00:00:00Z"
        );
        let earliest = Dimension {
            default: DefaultValue::Earliest,
            ..near.clone()
        };
        assert_eq!(earliest.resolve(None).unwrap(), "2024-01-01T00:00:00Z");
        let empty = Dimension {
            values: Vec::new(),
            ..near
        };
        assert!(matches!(
            empty.resolve(None),
            Err(DimensionError::Empty { .. })
        ));
    }

    #[test]
    fn an_interval_takes_the_greatest_value_within_it() {
        let d = time(
            &[
                "2024-01-01T00:00:00Z",
                "2024-02-01T00:00:00Z",
                "2024-03-01T00:00:00Z",
            ],
            false,
        );
        let within = |t: &str| d.greatest_within(t).map(|r| r.map_err(|_| ()));
        assert_eq!(within("2024-01-01"), None, "one value is no interval");
        assert_eq!(
            within("2024-01-01/2024-02-15"),
            Some(Ok("2024-02-01T00:00:00Z".into()))
        );
        assert_eq!(
            within("../2024-01-31"),
            Some(Ok("2024-01-01T00:00:00Z".into()))
        );
        assert_eq!(
            within("2024-01-15/.."),
            Some(Ok("2024-03-01T00:00:00Z".into()))
        );
        assert_eq!(within("2023-01-01/2023-12-31"), Some(Err(())));
        assert_eq!(within("2024-01-01/2024-02-01/P1M"), Some(Err(())));
    }

    #[test]
    fn common_spellings_are_found_without_parsing_and_mean_the_same() {
        let d = time(&["2024-01-01", "2024-02-01T06:30:00Z"], false);
        for (asked, want) in [
            ("2024-01-01", "2024-01-01T00:00:00Z"),
            ("2024-01-01T00:00Z", "2024-01-01T00:00:00Z"),
            ("2024-01-01T00:00:00Z", "2024-01-01T00:00:00Z"),
            ("2024-02-01T06:30Z", "2024-02-01T06:30:00Z"),
        ] {
            assert!(d.spellings.contains_key(asked), "{asked}");
            assert_eq!(d.resolve(Some(asked)).unwrap(), want);
        }
        // Other spellings are parsed, to the same values.
        assert_eq!(
            d.resolve(Some("2024-02-01T07:30:00+01:00")).unwrap(),
            "2024-02-01T06:30:00Z"
        );
        assert!(!d.spellings.contains_key("2024-02-01"));
    }

    #[test]
    fn long_lists_are_summarised_in_capabilities() {
        let hours: Vec<String> = (0..48)
            .map(|h| format!("2024-01-{:02}T{:02}:00:00Z", 1 + h / 24, h % 24))
            .collect();
        let refs: Vec<&str> = hours.iter().map(String::as_str).collect();
        let mut d = time(&refs, false);
        assert_eq!(d.listed().len(), 48);
        d.max_listed = 10;
        assert_eq!(
            d.listed(),
            ["2024-01-01T00:00:00Z/2024-01-02T23:00:00Z/PT1H"]
        );
        // Uneven (months): the latest ones.
        let mut months = time(
            &["2024-01-01", "2024-02-01", "2024-03-01", "2024-05-01"],
            false,
        );
        months.max_listed = 2;
        assert_eq!(
            months.listed(),
            ["2024-03-01T00:00:00Z", "2024-05-01T00:00:00Z"]
        );
        let levels = Dimension {
            name: "elevation".into(),
            kind: Kind::Number,
            values: vec!["0".into(), "250".into(), "500".into(), "750".into()],
            default: DefaultValue::Earliest,
            nearest: false,
            max_listed: 2,
            spellings: HashMap::new(),
        };
        assert_eq!(levels.listed(), ["0/750/250"]);
    }

    #[test]
    fn keys_without_values_are_the_base_key() {
        assert_eq!(layer_key("ndvi", &[]), "ndvi");
        assert_eq!(
            layer_key(
                "ndvi",
                &[
                    ("time".into(), "2024-01-01T00:00:00Z".into()),
                    ("elevation".into(), "10".into())
                ]
            ),
            "ndvi~time=2024-01-01T000000Z~elevation=10"
        );
    }
}
