//! The part of the MapLibre style expression language tessera evaluates:
//! `get`, `has`, `!has`, `==`, `!=`, `<`, `<=`, `>`, `>=`, `!`, `all`,
//! `any`, `in`, `!in`, `match`, `case`, `coalesce`, `literal`, `zoom`,
//! `geometry-type`, `to-string`, `to-number`, `concat`, `upcase`,
//! `downcase`, `interpolate` (linear, exponential), `step`; the legacy
//! filters (`["==", "field", value]`, `$type`) and zoom functions
//! (`{"stops": [[z, v], ...], "base": b}`).
//!
//! An expression is evaluated for one feature at one zoom; a value of the
//! wrong kind is null, as MapLibre treats it in filters.

use serde_json::Value as Json;

use crate::style::Attribute;

/// A value an expression gives.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    /// Nothing.
    Null,
    /// True or false.
    Bool(bool),
    /// A number.
    Num(f64),
    /// Text (a colour is text until it is read as one).
    Str(String),
    /// A colour, RGBA in 0..1 (interpolated colours).
    Color([f32; 4]),
    /// A literal array.
    Array(Vec<Json>),
}

impl Val {
    /// Whether the value counts as true (a filter's result).
    pub fn truthy(&self) -> bool {
        matches!(self, Val::Bool(true))
    }

    /// The value as a number.
    pub fn num(&self) -> Option<f64> {
        match self {
            Val::Num(n) => Some(*n),
            _ => None,
        }
    }

    /// The value as a colour (text parsed as CSS).
    pub fn color(&self) -> Option<[f32; 4]> {
        match self {
            Val::Color(c) => Some(*c),
            Val::Str(s) => parse_color(s),
            _ => None,
        }
    }

    /// The value as text (numbers as MapLibre writes them).
    pub fn text(&self) -> Option<String> {
        match self {
            Val::Str(s) => Some(s.clone()),
            Val::Num(n) if n.fract() == 0.0 && n.abs() < 1e15 => Some(format!("{n:.0}")),
            Val::Num(n) => Some(n.to_string()),
            Val::Bool(b) => Some(b.to_string()),
            _ => None,
        }
    }
}

/// A CSS colour as RGBA in 0..1.
pub fn parse_color(text: &str) -> Option<[f32; 4]> {
    let c = csscolorparser::parse(text).ok()?;
    Some([c.r, c.g, c.b, c.a])
}

/// What an expression reads: the zoom, the feature's attributes and its
/// geometry type (`Point`, `LineString`, `Polygon`).
pub struct Context<'a> {
    /// The map's zoom (MapLibre's: 512-pixel tiles).
    pub zoom: f64,
    /// A feature's attribute by name.
    pub get: &'a dyn Fn(&str) -> Option<Attribute>,
    /// The feature's geometry type.
    pub geometry: &'a str,
}

/// The operators evaluated (for the list of what is not, at start).
pub const OPERATORS: &[&str] = &[
    "get",
    "has",
    "!has",
    "==",
    "!=",
    "<",
    "<=",
    ">",
    ">=",
    "!",
    "all",
    "any",
    "none",
    "in",
    "!in",
    "match",
    "case",
    "coalesce",
    "literal",
    "zoom",
    "geometry-type",
    "to-string",
    "to-number",
    "concat",
    "upcase",
    "downcase",
    "interpolate",
    "step",
];

/// The operators `expr` uses that are not evaluated, and the fields it
/// reads, added to `unknown` and `fields`.
pub fn scan(expr: &Json, unknown: &mut Vec<String>, fields: &mut Vec<String>) {
    match expr {
        Json::Object(o) => {
            if let Some(p) = o.get("property").and_then(Json::as_str) {
                unknown.push(format!("property function on {p:?}"));
            }
        }
        Json::Array(items) => {
            let Some(op) = items.first().and_then(Json::as_str) else {
                return;
            };
            if op == "literal" {
                return;
            }
            if !OPERATORS.contains(&op) {
                unknown.push(op.to_string());
            }
            match (op, items.get(1)) {
                ("get" | "has" | "!has", Some(Json::String(f))) => fields.push(f.clone()),
                ("==" | "!=" | "<" | "<=" | ">" | ">=" | "in" | "!in", Some(Json::String(f)))
                    if f != "$type" =>
                {
                    fields.push(f.clone());
                }
                _ => {}
            }
            match op {
                // ["match", input, label, output, ..., default]: labels are values.
                "match" => {
                    for (i, item) in items.iter().enumerate().skip(1) {
                        if i == 1 || i % 2 == 1 || i == items.len() - 1 {
                            scan(item, unknown, fields);
                        }
                    }
                }
                // ["interpolate", ["linear"], input, ...]: the kind is not an expression.
                "interpolate" => {
                    for item in items.iter().skip(2) {
                        scan(item, unknown, fields);
                    }
                }
                _ => {
                    for item in &items[1..] {
                        scan(item, unknown, fields);
                    }
                }
            }
        }
        _ => {}
    }
}

/// Evaluates `expr` in `ctx`.
pub fn eval(expr: &Json, ctx: &Context<'_>) -> Val {
    match expr {
        Json::Bool(b) => Val::Bool(*b),
        Json::Number(n) => n.as_f64().map_or(Val::Null, Val::Num),
        Json::String(s) => Val::Str(s.clone()),
        Json::Object(o) if o.contains_key("stops") => zoom_function(o, ctx),
        Json::Object(_) | Json::Null => Val::Null,
        Json::Array(items) => match items.first().and_then(Json::as_str) {
            Some(op) => operator(op, &items[1..], ctx),
            None => Val::Array(items.clone()),
        },
    }
}

fn attribute(a: Option<Attribute>) -> Val {
    match a {
        Some(Attribute::Number(n)) => Val::Num(n),
        Some(Attribute::Text(t)) => Val::Str(t),
        Some(Attribute::Null) | None => Val::Null,
    }
}

/// An operand of a comparison: a plain string in the first place is a
/// field (the legacy filter form), `$type` the geometry type.
fn operand(arg: &Json, first: bool, ctx: &Context<'_>) -> Val {
    match arg {
        Json::String(s) if first && s == "$type" => Val::Str(ctx.geometry.to_string()),
        Json::String(s) if first => attribute((ctx.get)(s)),
        other => eval(other, ctx),
    }
}

fn compare(a: &Val, b: &Val) -> Option<std::cmp::Ordering> {
    match (a, b) {
        (Val::Num(x), Val::Num(y)) => x.partial_cmp(y),
        (Val::Str(x), Val::Str(y)) => Some(x.cmp(y)),
        (Val::Bool(x), Val::Bool(y)) => Some(x.cmp(y)),
        _ => None,
    }
}

#[allow(
    clippy::too_many_lines,
    reason = "one arm per operator reads best as one table"
)]
fn operator(op: &str, args: &[Json], ctx: &Context<'_>) -> Val {
    use std::cmp::Ordering::{Equal, Greater, Less};
    let arg = |i: usize| args.get(i).map_or(Val::Null, |a| eval(a, ctx));
    match op {
        "literal" => args.first().map_or(Val::Null, |a| match a {
            Json::Array(items) => Val::Array(items.clone()),
            other => eval(other, ctx),
        }),
        "zoom" => Val::Num(ctx.zoom),
        "geometry-type" => Val::Str(ctx.geometry.to_string()),
        "get" => match args.first() {
            Some(Json::String(f)) => attribute((ctx.get)(f)),
            _ => Val::Null,
        },
        "has" | "!has" => {
            let has = matches!(args.first(), Some(Json::String(f))
                if !matches!((ctx.get)(f), None | Some(Attribute::Null)));
            Val::Bool(has == (op == "has"))
        }
        "==" | "!=" => {
            let equal = operand(args.first().unwrap_or(&Json::Null), true, ctx)
                == operand(args.get(1).unwrap_or(&Json::Null), false, ctx);
            Val::Bool(equal == (op == "=="))
        }
        "<" | "<=" | ">" | ">=" => {
            let a = operand(args.first().unwrap_or(&Json::Null), true, ctx);
            let b = operand(args.get(1).unwrap_or(&Json::Null), false, ctx);
            Val::Bool(matches!(
                (compare(&a, &b), op),
                (Some(Less), "<" | "<=") | (Some(Greater), ">" | ">=") | (Some(Equal), "<=" | ">=")
            ))
        }
        "!" => Val::Bool(!arg(0).truthy()),
        "all" => Val::Bool(args.iter().all(|a| eval(a, ctx).truthy())),
        "any" => Val::Bool(args.iter().any(|a| eval(a, ctx).truthy())),
        "none" => Val::Bool(!args.iter().any(|a| eval(a, ctx).truthy())),
        "in" | "!in" => {
            let found = match args {
                // Legacy: ["in", "field", v1, v2, ...].
                [Json::String(_), rest @ ..] if rest.len() != 1 || !rest[0].is_array() => {
                    let value = operand(&args[0], true, ctx);
                    rest.iter().any(|v| eval(v, ctx) == value)
                }
                [needle, haystack] => {
                    let needle = eval(needle, ctx);
                    match eval(haystack, ctx) {
                        Val::Array(items) => items.iter().any(|v| eval(v, ctx) == needle),
                        Val::Str(s) => needle.text().is_some_and(|n| s.contains(&n)),
                        _ => false,
                    }
                }
                _ => false,
            };
            Val::Bool(found == (op == "in"))
        }
        "match" => {
            let input = arg(0);
            let mut i = 1;
            while i + 1 < args.len() {
                let labels = match &args[i] {
                    Json::Array(items) => items.iter().map(|v| eval(v, ctx)).collect(),
                    one => vec![eval(one, ctx)],
                };
                if labels.contains(&input) {
                    return eval(&args[i + 1], ctx);
                }
                i += 2;
            }
            args.last()
                .filter(|_| args.len().is_multiple_of(2))
                .map_or(Val::Null, |d| eval(d, ctx))
        }
        "case" => {
            let mut i = 0;
            while i + 1 < args.len() {
                if eval(&args[i], ctx).truthy() {
                    return eval(&args[i + 1], ctx);
                }
                i += 2;
            }
            args.last()
                .filter(|_| args.len() % 2 == 1)
                .map_or(Val::Null, |d| eval(d, ctx))
        }
        "coalesce" => args
            .iter()
            .map(|a| eval(a, ctx))
            .find(|v| *v != Val::Null)
            .unwrap_or(Val::Null),
        "to-string" => arg(0).text().map_or(Val::Str(String::new()), Val::Str),
        "to-number" => match arg(0) {
            Val::Num(n) => Val::Num(n),
            Val::Str(s) => s.trim().parse().map_or(Val::Null, Val::Num),
            Val::Bool(b) => Val::Num(f64::from(u8::from(b))),
            _ => Val::Null,
        },
        "concat" => Val::Str(
            args.iter()
                .filter_map(|a| eval(a, ctx).text())
                .collect::<String>(),
        ),
        "upcase" => arg(0)
            .text()
            .map_or(Val::Null, |t| Val::Str(t.to_uppercase())),
        "downcase" => arg(0)
            .text()
            .map_or(Val::Null, |t| Val::Str(t.to_lowercase())),
        "interpolate" => interpolate(args, ctx),
        "step" => {
            let Some(input) = arg(0).num() else {
                return Val::Null;
            };
            let mut out = arg(1);
            let mut i = 2;
            while i + 1 < args.len() {
                match eval(&args[i], ctx).num() {
                    Some(stop) if input >= stop => out = eval(&args[i + 1], ctx),
                    _ => break,
                }
                i += 2;
            }
            out
        }
        _ => Val::Null,
    }
}

/// `["interpolate", ["linear"] | ["exponential", base], input, z0, v0, ...]`.
fn interpolate(args: &[Json], ctx: &Context<'_>) -> Val {
    let base = match args.first() {
        Some(Json::Array(kind)) if kind.first().and_then(Json::as_str) == Some("exponential") => {
            kind.get(1).and_then(Json::as_f64).unwrap_or(1.0)
        }
        _ => 1.0,
    };
    let Some(input) = args.get(1).map(|a| eval(a, ctx)).and_then(|v| v.num()) else {
        return Val::Null;
    };
    let stops: Vec<(f64, &Json)> = args[2..]
        .chunks(2)
        .filter_map(|c| Some((eval(c.first()?, ctx).num()?, c.get(1)?)))
        .collect();
    between(&stops, input, base, ctx)
}

/// A legacy zoom function: `{"stops": [[zoom, value], ...], "base": b}`.
fn zoom_function(o: &serde_json::Map<String, Json>, ctx: &Context<'_>) -> Val {
    if o.contains_key("property") {
        return Val::Null;
    }
    let base = o.get("base").and_then(Json::as_f64).unwrap_or(1.0);
    let stops: Vec<(f64, &Json)> = o
        .get("stops")
        .and_then(Json::as_array)
        .map(|s| {
            s.iter()
                .filter_map(|p| Some((p.get(0)?.as_f64()?, p.get(1)?)))
                .collect()
        })
        .unwrap_or_default();
    if o.get("type").and_then(Json::as_str) == Some("interval") {
        let mut out = stops.first().map_or(Val::Null, |(_, v)| eval(v, ctx));
        for (z, v) in &stops {
            if ctx.zoom >= *z {
                out = eval(v, ctx);
            }
        }
        return out;
    }
    between(&stops, ctx.zoom, base, ctx)
}

/// The value between the stops around `input` (numbers and colours), the
/// ends' beyond them.
fn between(stops: &[(f64, &Json)], input: f64, base: f64, ctx: &Context<'_>) -> Val {
    let Some(&(first_at, first)) = stops.first() else {
        return Val::Null;
    };
    if input <= first_at {
        return eval(first, ctx);
    }
    for pair in stops.windows(2) {
        let ((z0, v0), (z1, v1)) = (pair[0], pair[1]);
        if input <= z1 {
            let span = z1 - z0;
            let t = if span <= 0.0 {
                1.0
            } else if (base - 1.0).abs() < 1e-9 {
                (input - z0) / span
            } else {
                (base.powf(input - z0) - 1.0) / (base.powf(span) - 1.0)
            };
            let (a, b) = (eval(v0, ctx), eval(v1, ctx));
            return match (a.num(), b.num(), a.color(), b.color()) {
                (Some(x), Some(y), _, _) => Val::Num(x + t * (y - x)),
                (_, _, Some(x), Some(y)) => {
                    let t = t as f32;
                    Val::Color(std::array::from_fn(|i| x[i] + t * (y[i] - x[i])))
                }
                _ => a,
            };
        }
    }
    stops.last().map_or(Val::Null, |(_, v)| eval(v, ctx))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn with<T>(zoom: f64, attrs: &[(&str, Attribute)], f: impl FnOnce(&Context<'_>) -> T) -> T {
        let attrs: Vec<(String, Attribute)> = attrs
            .iter()
            .map(|(k, v)| ((*k).to_string(), v.clone()))
            .collect();
        let get = move |name: &str| {
            attrs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        };
        f(&Context {
            zoom,
            get: &get,
            geometry: "Polygon",
        })
    }

    #[test]
    fn filters_in_both_forms() {
        let attrs = [
            ("continent", Attribute::Text("Europe".into())),
            ("pop", Attribute::Number(5e6)),
        ];
        with(3.0, &attrs, |c| {
            for (filter, want) in [
                (json!(["==", "continent", "Europe"]), true),
                (json!(["==", ["get", "continent"], "Asia"]), false),
                (
                    json!(["all", [">", "pop", 1e6], ["<", ["get", "pop"], 1e7]]),
                    true,
                ),
                (json!(["any", ["has", "nope"], ["!has", "pop"]]), false),
                (json!(["in", "continent", "Asia", "Europe"]), true),
                (
                    json!(["in", ["get", "continent"], ["literal", ["Asia", "Africa"]]]),
                    false,
                ),
                (json!(["!in", "continent", "Asia"]), true),
                (json!(["==", "$type", "Polygon"]), true),
                (json!(["==", ["geometry-type"], "Point"]), false),
                (
                    json!([
                        "match",
                        ["get", "continent"],
                        ["Europe", "Asia"],
                        true,
                        false
                    ]),
                    true,
                ),
                (json!(["case", ["<", ["get", "pop"], 1], false, true]), true),
            ] {
                assert_eq!(eval(&filter, c).truthy(), want, "{filter}");
            }
        });
    }

    #[test]
    fn zoom_functions_interpolate_and_step() {
        let width = json!(["interpolate", ["linear"], ["zoom"], 2, 1, 6, 5]);
        assert_eq!(with(4.0, &[], |c| eval(&width, c)), Val::Num(3.0));
        assert_eq!(with(0.0, &[], |c| eval(&width, c)), Val::Num(1.0));
        assert_eq!(with(9.0, &[], |c| eval(&width, c)), Val::Num(5.0));
        let exp = json!(["interpolate", ["exponential", 2], ["zoom"], 0, 0, 2, 3]);
        assert_eq!(with(1.0, &[], |c| eval(&exp, c)), Val::Num(1.0));
        let step = json!(["step", ["zoom"], "a", 3, "b", 5, "c"]);
        assert_eq!(with(4.0, &[], |c| eval(&step, c)), Val::Str("b".into()));
        let legacy = json!({"stops": [[0, 1], [10, 11]]});
        assert_eq!(with(5.0, &[], |c| eval(&legacy, c)), Val::Num(6.0));
        let colour = json!([
            "interpolate",
            ["linear"],
            ["zoom"],
            0,
            "#000000",
            2,
            "#ffffff"
        ]);
        let c = with(1.0, &[], |c| eval(&colour, c)).color().unwrap();
        assert!(
            (c[0] - 0.5).abs() < 1e-6 && (c[3] - 1.0).abs() < 1e-6,
            "{c:?}"
        );
    }

    #[test]
    fn unknown_operators_and_read_fields_are_found() {
        let (mut unknown, mut fields) = (Vec::new(), Vec::new());
        scan(
            &json!([
                "all",
                ["==", "kind", "x"],
                ["within", {}],
                [">", ["get", "pop"], 3]
            ]),
            &mut unknown,
            &mut fields,
        );
        scan(
            &json!([
                "match",
                ["get", "name"],
                ["France", "Spain"],
                "#c00",
                "#00c"
            ]),
            &mut unknown,
            &mut fields,
        );
        scan(
            &json!(["interpolate", ["exponential", 1.5], ["zoom"], 1, 0.5, 8, 3]),
            &mut unknown,
            &mut fields,
        );
        assert_eq!(unknown, ["within"]);
        assert_eq!(fields, ["kind", "pop", "name"]);
    }
}
