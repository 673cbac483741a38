//! Escaping for XML and HTML text and attributes.

use std::borrow::Cow;

/// Escapes `&`, `<`, `>`, `"` and `'`, and drops characters XML 1.0 cannot
/// carry (control characters other than tab, newline and carriage return).
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| {
        matches!(c, '&' | '<' | '>' | '"' | '\'')
            || (c.is_control() && !matches!(c, '\t' | '\n' | '\r'))
    }) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if c.is_control() && !matches!(c, '\t' | '\n' | '\r') => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_control_characters() {
        assert_eq!(escape("a<b>&\"'\0"), "a&lt;b&gt;&amp;&quot;&apos;\u{FFFD}");
        assert!(matches!(escape("plain"), Cow::Borrowed("plain")));
    }
}
