//! Dimension values a source finds itself or is asked at: the values it
//! lists for a dimension (a WMS's or WMTS's capabilities, a vector field's
//! distinct values), and the source at chosen values (an upstream asked
//! with them, a vector source's features filtered by them), through
//! [`crate::Source::listed_values`] and [`crate::Source::at_values`].
//! Sources whose values come from their configuration (files, bands,
//! mosaic pieces) list none and take none: the server derives their specs.

/// A source's answer about dimension values: `None` when it has none to
/// give (its values come from its configuration), else what it found or
/// why it failed.
pub type Found<T> = Option<Result<T, crate::SourceError>>;

/// How a dimension's values are compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    /// ISO 8601 times (a date or a date-time field, or text in ISO 8601).
    Time,
    /// Numbers.
    Number,
    /// Text, compared as it is.
    Text,
}

/// What a source lists for a dimension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listed {
    /// Each value, as the source spells it.
    Values(Vec<String>),
    /// A WMS extent as the capabilities write it (values, and
    /// `start/end/period` intervals, separated by commas), for the caller
    /// to expand.
    Extent(String),
}

/// A dimension's value asked of a source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AskedValue {
    /// The dimension's name (`time`, `elevation`, ...).
    pub name: String,
    /// How its values compare.
    pub kind: ValueKind,
    /// The field holding its values, in a source of features
    /// (`from_field`).
    pub field: Option<String>,
    /// The value as the source spells it (as its capabilities list it, or
    /// as configured): what an upstream is asked with.
    pub spelled: String,
    /// The lowest canonical value asked (ISO 8601 UTC, a number, a word).
    pub from: String,
    /// The highest canonical value asked: `from` for one value, past it
    /// for a range (a vector source's `start/end`).
    pub to: String,
}

impl AskedValue {
    /// One value of dimension `name`: `canonical`, spelled `spelled` where
    /// it is asked.
    pub fn one(
        name: &str,
        kind: ValueKind,
        field: Option<&str>,
        canonical: &str,
        spelled: &str,
    ) -> AskedValue {
        AskedValue {
            name: name.to_string(),
            kind,
            field: field.map(str::to_string),
            spelled: spelled.to_string(),
            from: canonical.to_string(),
            to: canonical.to_string(),
        }
    }
}
