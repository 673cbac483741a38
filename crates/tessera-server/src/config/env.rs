//! `${NAME}` substitution in configuration values.
//!
//! Substitution works on the parsed document, value by value, never on the
//! raw text: a variable cannot add keys or cut a value at a `#`, and a
//! `${X}` in a comment is never looked at. `${NAME:-default}` gives a
//! default; `$${` writes a literal `${` (URL templates such as
//! `{z}/{x}/{y}` with a literal `${z}` need it).
//!
//! A value that is exactly one `${NAME}` takes the type its text has, so
//! `max_concurrent_renders: ${RENDERS}` is a number: `true` and `false` are
//! booleans, plain decimals (`8`, `-3`, `2.5`; no leading zeros, no `_`, no
//! exponent) are numbers, and anything else stays text.

use serde_json::Value;

use super::error::ConfigError;

/// Replaces every `${...}` in the string values of `doc` (keys are left as
/// they are).
pub fn substitute(
    doc: &mut Value,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(), ConfigError> {
    match doc {
        Value::String(text) => {
            if let Some(replaced) = substitute_text(text, env)? {
                let whole = is_one_variable(text);
                *doc = if whole {
                    typed(replaced)
                } else {
                    Value::String(replaced)
                };
            }
            Ok(())
        }
        Value::Array(items) => items.iter_mut().try_for_each(|v| substitute(v, env)),
        Value::Object(map) => map.values_mut().try_for_each(|v| substitute(v, env)),
        Value::Null | Value::Bool(_) | Value::Number(_) => Ok(()),
    }
}

/// `text` with its variables replaced, or `None` when it holds no `$`
/// sequence to process.
fn substitute_text(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<String>, ConfigError> {
    if !text.contains("${") {
        return Ok(None);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        if rest[..start].ends_with('$') {
            // `$${` is a literal `${`.
            out.push_str(&rest[..start - 1]);
            out.push_str("${");
            rest = &rest[start + 2..];
            continue;
        }
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err(ConfigError::UnterminatedVariable {
                value: text.to_string(),
            });
        };
        let expr = &after[..end];
        let (name, default) = match expr.split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (expr, None),
        };
        match (env(name), default) {
            (Some(v), _) => out.push_str(&v),
            (None, Some(d)) => out.push_str(d),
            (None, None) => {
                return Err(ConfigError::MissingEnv {
                    name: name.to_string(),
                });
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(Some(out))
}

/// Whether `text` is exactly one `${...}` (with or without a default).
fn is_one_variable(text: &str) -> bool {
    text.strip_prefix("${")
        .and_then(|t| t.strip_suffix('}'))
        .is_some_and(|inner| !inner.contains('}') && !inner.contains("${"))
        && !text.starts_with("$${")
}

/// The value a whole-value substitution stands for.
fn typed(text: String) -> Value {
    match text.as_str() {
        "true" => return Value::Bool(true),
        "false" => return Value::Bool(false),
        _ => {}
    }
    let digits = text.strip_prefix('-').unwrap_or(&text);
    let (int, frac) = match digits.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (digits, None),
    };
    let plain = !int.is_empty()
        && int.bytes().all(|b| b.is_ascii_digit())
        && (int == "0" || !int.starts_with('0'))
        && frac.is_none_or(|f| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()));
    if plain {
        let number = if frac.is_some() {
            text.parse::<f64>()
                .ok()
                .and_then(serde_json::Number::from_f64)
        } else if text.starts_with('-') {
            text.parse::<i64>().ok().map(serde_json::Number::from)
        } else {
            text.parse::<u64>().ok().map(serde_json::Number::from)
        };
        if let Some(n) = number {
            return Value::Number(n);
        }
    }
    Value::String(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(doc: Value, vars: &[(&str, &str)]) -> Result<Value, ConfigError> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect();
        let mut doc = doc;
        substitute(&mut doc, &|name| {
            vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
        })?;
        Ok(doc)
    }

    #[test]
    fn variables_inside_values_are_replaced_and_defaults_used() {
        let doc = serde_json::json!({"a": "${D}/x.tif", "b": ["${NOPE:-/def}/y", "z"]});
        let out = run(doc, &[("D", "/data")]).unwrap();
        assert_eq!(
            out,
            serde_json::json!({"a": "/data/x.tif", "b": ["/def/y", "z"]})
        );
    }

    #[test]
    fn a_doubled_dollar_is_a_literal_and_never_looked_up() {
        let doc = serde_json::json!({"url": "http://h/$${z}/{x}/$${y}.png"});
        let out = run(doc, &[]).unwrap();
        assert_eq!(
            out,
            serde_json::json!({"url": "http://h/${z}/{x}/${y}.png"})
        );
        let doc = serde_json::json!({"v": "$${X}"});
        assert_eq!(
            run(doc, &[("X", "1")]).unwrap(),
            serde_json::json!({"v": "${X}"})
        );
    }

    #[test]
    fn whole_values_take_the_type_of_their_text_and_others_stay_text() {
        let doc = serde_json::json!({
            "n": "${N}", "f": "${F}", "neg": "${NEG}", "b": "${B}",
            "zero": "${Z}", "lead": "${LEAD}", "under": "${U}", "part": "x${N}",
            "spaced": "${SP}", "hash": "${H}", "line": "${NL}"
        });
        let out = run(
            doc,
            &[
                ("N", "8"),
                ("F", "2.5"),
                ("NEG", "-3"),
                ("B", "true"),
                ("Z", "0"),
                ("LEAD", "0123"),
                ("U", "1_234"),
                ("SP", "  a"),
                ("H", "abc #def"),
                ("NL", "a\n  max_upload_mb: 1"),
            ],
        )
        .unwrap();
        assert_eq!(
            out,
            serde_json::json!({
                "n": 8, "f": 2.5, "neg": -3, "b": true, "zero": 0, "lead": "0123",
                "under": "1_234", "part": "x8", "spaced": "  a", "hash": "abc #def",
                "line": "a\n  max_upload_mb: 1"
            })
        );
    }

    #[test]
    fn missing_and_unterminated_variables_are_named() {
        let err = run(serde_json::json!({"a": "${DATA}"}), &[]).unwrap_err();
        assert!(
            matches!(&err, ConfigError::MissingEnv { name } if name == "DATA"),
            "{err}"
        );
        let err = run(serde_json::json!({"a": "x${DATA"}), &[]).unwrap_err();
        assert!(
            matches!(err, ConfigError::UnterminatedVariable { .. }),
            "{err}"
        );
        // GDAL's tile placeholders are not variables: the message says how
        // to write them.
        let err = run(
            serde_json::json!({"url": "http://h/${z}/${x}/${y}.png"}),
            &[],
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("in a tile URL template write {z}"),
            "{err}"
        );
        let err = run(serde_json::json!({"a": "${DATA}"}), &[]).unwrap_err();
        assert!(!err.to_string().contains("tile URL"), "{err}");
    }
}
