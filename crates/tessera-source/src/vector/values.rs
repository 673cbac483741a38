//! A vector layer at a dimension value: the features whose field lies in a
//! range (one value: a range from it to itself), filtered by the database
//! for PostGIS (a condition added to `where`, so that tiles it cuts are
//! filtered too) and here for files; and the distinct values of a field.

use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use gdal::vector::{FieldValue, LayerAccess};

pub use crate::ValueKind;

/// The features a layer at a dimension value draws: those whose `field`
/// lies from `from` to `to`, both included (canonical values: ISO 8601
/// times in UTC, numbers, words).
#[derive(Debug, Clone, PartialEq)]
pub struct ValueFilter {
    /// The field compared.
    pub field: String,
    /// How it is compared.
    pub kind: ValueKind,
    /// The lowest value admitted.
    pub from: String,
    /// The highest value admitted.
    pub to: String,
}

/// A [`ValueFilter`] ready to test features with.
#[derive(Debug, Clone)]
pub(super) enum Admit {
    Time(DateTime<Utc>, DateTime<Utc>),
    Number(f64, f64),
    Text(String, String),
}

impl ValueFilter {
    /// The filter ready to test features; an error when a bound is not of
    /// its kind.
    pub(super) fn admit(&self) -> Result<Admit, String> {
        let bad = |v: &str| format!("{v:?} is not a {:?} value", self.kind);
        Ok(match self.kind {
            ValueKind::Time => Admit::Time(
                parse_time(&self.from).ok_or_else(|| bad(&self.from))?,
                parse_time(&self.to).ok_or_else(|| bad(&self.to))?,
            ),
            ValueKind::Number => Admit::Number(
                self.from.parse().map_err(|_| bad(&self.from))?,
                self.to.parse().map_err(|_| bad(&self.to))?,
            ),
            ValueKind::Text => Admit::Text(self.from.clone(), self.to.clone()),
        })
    }

    /// The condition in PostgreSQL's SQL (the field quoted, text bounds
    /// as literals with quotes doubled).
    pub(super) fn sql(&self) -> String {
        let field = format!("\"{}\"", self.field.replace('"', "\"\""));
        let literal = |v: &str| match self.kind {
            ValueKind::Number => v.to_string(),
            ValueKind::Time | ValueKind::Text => format!("'{}'", v.replace('\'', "''")),
        };
        if self.from == self.to {
            format!("{field} = {}", literal(&self.from))
        } else {
            format!(
                "{field} >= {} AND {field} <= {}",
                literal(&self.from),
                literal(&self.to)
            )
        }
    }
}

impl Admit {
    /// Whether a feature with `value` is drawn (a feature without one is not).
    pub(super) fn admits(&self, value: Option<&FieldValue>) -> bool {
        let Some(value) = value else {
            return false;
        };
        match self {
            Admit::Time(from, to) => time_of(value).is_some_and(|t| *from <= t && t <= *to),
            Admit::Number(from, to) => number_of(value).is_some_and(|n| *from <= n && n <= *to),
            Admit::Text(from, to) => text_of(value)
                .is_some_and(|t| from.as_str() <= t.as_str() && t.as_str() <= to.as_str()),
        }
    }
}

fn time_of(value: &FieldValue) -> Option<DateTime<Utc>> {
    match value {
        FieldValue::DateTimeValue(t) => Some(t.with_timezone(&Utc)),
        FieldValue::DateValue(d) => d.and_hms_opt(0, 0, 0).map(|t| t.and_utc()),
        FieldValue::StringValue(s) => parse_time(s),
        _ => None,
    }
}

fn number_of(value: &FieldValue) -> Option<f64> {
    match value {
        FieldValue::IntegerValue(n) => Some(f64::from(*n)),
        FieldValue::Integer64Value(n) => Some(*n as f64),
        FieldValue::RealValue(n) => Some(*n),
        FieldValue::StringValue(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// A field value as text: times in ISO 8601 (UTC), dates as `YYYY-MM-DD`,
/// numbers written out; `None` for lists and binary values.
pub(super) fn text_of(value: &FieldValue) -> Option<String> {
    Some(match value {
        FieldValue::StringValue(s) => s.clone(),
        FieldValue::DateTimeValue(t) => t.with_timezone(&Utc).to_rfc3339(),
        FieldValue::DateValue(d) => d.to_string(),
        FieldValue::IntegerValue(n) => n.to_string(),
        FieldValue::Integer64Value(n) => n.to_string(),
        FieldValue::RealValue(n) => n.to_string(),
        _ => return None,
    })
}

/// An ISO 8601 time as fields hold it: RFC 3339, a date and time without
/// an offset (UTC), with `T` or a space, or a date.
fn parse_time(text: &str) -> Option<DateTime<Utc>> {
    let text = text.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Some(t.with_timezone(&Utc));
    }
    let naive = text.strip_suffix('Z').unwrap_or(text);
    for format in [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y/%m/%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M",
    ] {
        if let Ok(t) = NaiveDateTime::parse_from_str(naive, format) {
            return Some(t.and_utc());
        }
    }
    ["%Y-%m-%d", "%Y/%m/%d"].iter().find_map(|f| {
        NaiveDate::parse_from_str(naive, f)
            .ok()
            .and_then(|d| d.and_hms_opt(0, 0, 0))
            .map(|t| t.and_utc())
    })
}

/// The distinct values of `field` in the layer `layer` of `ds`, as text
/// ([`text_of`]), at most `most`: more is an error.
pub(super) fn distinct(
    ds: &gdal::Dataset,
    layer: &str,
    field: &str,
    most: usize,
) -> Result<Vec<String>, String> {
    let mut layer = ds
        .layer_by_name(layer)
        .map_err(|e| format!("layer {layer:?}: {e}"))?;
    let index = layer
        .defn()
        .field_index(field)
        .map_err(|_| format!("layer {:?} has no field {field:?}", layer.name()))?;
    let mut seen = std::collections::BTreeSet::new();
    for feature in layer.features() {
        if let Some(text) = feature
            .field(index)
            .ok()
            .flatten()
            .as_ref()
            .and_then(text_of)
        {
            seen.insert(text);
            if seen.len() > most {
                return Err(format!(
                    "field {field:?} has more than {most} distinct values"
                ));
            }
        }
    }
    Ok(seen.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(kind: ValueKind, from: &str, to: &str) -> ValueFilter {
        ValueFilter {
            field: "when".into(),
            kind,
            from: from.into(),
            to: to.into(),
        }
    }

    #[test]
    fn times_of_every_field_type_are_compared_as_times() {
        let day = filter(
            ValueKind::Time,
            "2024-01-01T00:00:00Z",
            "2024-01-01T00:00:00Z",
        )
        .admit()
        .unwrap();
        let date = NaiveDate::from_ymd_opt(2024, 1, 1).unwrap();
        assert!(day.admits(Some(&FieldValue::DateValue(date))));
        assert!(day.admits(Some(&FieldValue::StringValue("2024-01-01 00:00:00".into()))));
        assert!(day.admits(Some(&FieldValue::StringValue(
            "2024-01-01T00:00:00.000Z".into()
        ))));
        assert!(!day.admits(Some(&FieldValue::StringValue("2024-01-02".into()))));
        assert!(!day.admits(None));
        let january = filter(
            ValueKind::Time,
            "2024-01-01T00:00:00Z",
            "2024-01-31T00:00:00Z",
        )
        .admit()
        .unwrap();
        let mid = DateTime::parse_from_rfc3339("2024-01-15T12:00:00+02:00").unwrap();
        assert!(january.admits(Some(&FieldValue::DateTimeValue(mid))));
        assert!(!january.admits(Some(&FieldValue::StringValue("2024-02-01".into()))));
    }

    #[test]
    fn numbers_and_words_and_sql() {
        let n = filter(ValueKind::Number, "500", "850").admit().unwrap();
        assert!(n.admits(Some(&FieldValue::IntegerValue(700))));
        assert!(!n.admits(Some(&FieldValue::RealValue(900.0))));
        assert_eq!(
            filter(ValueKind::Number, "500", "850").sql(),
            "\"when\" >= 500 AND \"when\" <= 850"
        );
        assert_eq!(
            filter(ValueKind::Text, "o'k", "o'k").sql(),
            "\"when\" = 'o''k'"
        );
        assert!(filter(ValueKind::Time, "soon", "later").admit().is_err());
    }
}
