//! Band math: an expression over a raster's bands (`(b4 - b3) / (b4 + b3)`),
//! parsed and compiled once into a program for a stack machine whose
//! values are columns of pixels, then run over a window a chunk of pixels
//! at a time: each operation is one loop over a chunk, not a tree walk per
//! pixel.
//!
//! The language: numbers, bands `b1`..`bN` (1-based, any case), `+ - * /`,
//! `^` (power, right-associative), unary `-`, comparisons `< <= > >= ==
//! !=` (1 or 0), `&` and `|` (and, or on non-zero), `!` (not), and the
//! functions `where(cond, a, b)`, `min(a, b, ...)`, `max(a, b, ...)`,
//! `abs`, `sqrt`, `log` (natural), `log10`, `exp`, `clamp(x, lo, hi)`.
//! A pixel whose bands are not valid, or whose result is not a finite
//! number (a division by zero, the square root of a negative), has no
//! value.

use crate::buffer::{BandData, Raster};

/// Pixels evaluated at once.
const CHUNK: usize = 2048;

/// Most operations in one expression (a guard against pathological input).
const MAX_OPS: usize = 512;

/// Deepest nesting of parentheses, calls and unary operators (the parser
/// recurses once per level).
const MAX_NESTING: usize = 64;

/// One step of a compiled expression.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    /// Pushes a band's values (0-based index into the raster's bands).
    Band(usize),
    /// Pushes a constant.
    Const(f32),
    /// Pops two, pushes the result.
    Binary(Binary),
    /// Pops one, pushes the result.
    Unary(Unary),
    /// Pops `else`, `then`, `cond`; pushes `then` where `cond` is not zero.
    Where,
    /// Pops `hi`, `lo`, `x`; pushes `x` clamped.
    Clamp,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Binary {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
    And,
    Or,
    Min,
    Max,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Unary {
    Neg,
    Not,
    Abs,
    Sqrt,
    Log,
    Log10,
    Exp,
}

/// A compiled expression.
#[derive(Debug, Clone, PartialEq)]
pub struct Expression {
    text: String,
    program: Vec<Op>,
    /// Most values on the stack at once.
    depth: usize,
    /// 1-based bands read, ascending.
    bands: Vec<usize>,
}

impl Expression {
    /// Parses and compiles `text`; the error says where it is wrong.
    pub fn parse(text: &str) -> Result<Expression, String> {
        let tokens = tokenize(text)?;
        let mut parser = Parser {
            tokens: &tokens,
            at: 0,
            program: Vec::new(),
            nesting: 0,
        };
        parser.or()?;
        if parser.at != tokens.len() {
            return Err(format!(
                "unexpected {} in {text:?}",
                describe(&tokens[parser.at])
            ));
        }
        let program = parser.program;
        if program.len() > MAX_OPS {
            return Err(format!("the expression has more than {MAX_OPS} operations"));
        }
        let mut depth = 0usize;
        let mut most = 0usize;
        for op in &program {
            depth = match op {
                Op::Band(_) | Op::Const(_) => depth + 1,
                Op::Binary(_) => depth - 1,
                Op::Unary(_) => depth,
                Op::Where | Op::Clamp => depth - 2,
            };
            most = most.max(depth);
        }
        let mut bands: Vec<usize> = program
            .iter()
            .filter_map(|op| match op {
                Op::Band(i) => Some(i + 1),
                _ => None,
            })
            .collect();
        bands.sort_unstable();
        bands.dedup();
        Ok(Expression {
            text: text.to_string(),
            program,
            depth: most,
            bands,
        })
    }

    /// The expression as written.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The 1-based bands the expression reads.
    pub fn bands(&self) -> &[usize] {
        &self.bands
    }

    /// The value of every pixel of `raster` (NaN where it has none: a pixel
    /// not valid, a band equal to `nodata`, a result not finite).
    pub fn evaluate(&self, raster: &Raster, nodata: Option<f64>) -> Result<Vec<f32>, String> {
        if let Some(missing) = self.bands.iter().find(|b| **b > raster.bands.len()) {
            return Err(format!(
                "band b{missing} is asked and the source has {}",
                raster.bands.len()
            ));
        }
        let n = raster.valid.len();
        let mut out = vec![f32::NAN; n];
        let mut stack: Vec<Vec<f32>> = (0..self.depth).map(|_| vec![0.0; CHUNK]).collect();
        let nodata = nodata.map(|v| v as f32);
        let mut start = 0;
        while start < n {
            let len = CHUNK.min(n - start);
            self.run(raster, start, len, &mut stack);
            let result = &stack[0][..len];
            for (i, (o, v)) in out[start..start + len].iter_mut().zip(result).enumerate() {
                let p = start + i;
                let bad = raster.valid[p] == 0
                    || !v.is_finite()
                    || self.bands.iter().any(|b| {
                        let x = raster.bands[b - 1].get(p);
                        x.is_nan() || nodata == Some(x)
                    });
                if !bad {
                    *o = *v;
                }
            }
            start += len;
        }
        Ok(out)
    }

    /// Runs the program over pixels `start..start + len`; the result is
    /// the first `len` values of `stack[0]`.
    // `==` and `!=` of the language compare values exactly, as numpy and
    // gdal_calc.py do (a class value, a nodata code).
    #[allow(clippy::float_cmp)]
    fn run(&self, raster: &Raster, start: usize, len: usize, stack: &mut [Vec<f32>]) {
        let mut top = 0usize;
        for op in &self.program {
            match *op {
                Op::Band(b) => {
                    let dst = &mut stack[top][..len];
                    match &raster.bands[b] {
                        BandData::U8(v) => {
                            for (d, s) in dst.iter_mut().zip(&v[start..start + len]) {
                                *d = f32::from(*s);
                            }
                        }
                        BandData::F32(v) => dst.copy_from_slice(&v[start..start + len]),
                    }
                    top += 1;
                }
                Op::Const(c) => {
                    stack[top][..len].fill(c);
                    top += 1;
                }
                Op::Unary(u) => {
                    let x = &mut stack[top - 1][..len];
                    let f: fn(f32) -> f32 = match u {
                        Unary::Neg => |a| -a,
                        Unary::Not => |a| f32::from(u8::from(a == 0.0)),
                        Unary::Abs => f32::abs,
                        Unary::Sqrt => f32::sqrt,
                        Unary::Log => f32::ln,
                        Unary::Log10 => f32::log10,
                        Unary::Exp => f32::exp,
                    };
                    for v in x.iter_mut() {
                        *v = f(*v);
                    }
                }
                Op::Binary(op) => {
                    let (lower, upper) = stack.split_at_mut(top - 1);
                    let a = &mut lower[top - 2][..len];
                    let b = &upper[0][..len];
                    let f: fn(f32, f32) -> f32 = match op {
                        Binary::Add => |x, y| x + y,
                        Binary::Sub => |x, y| x - y,
                        Binary::Mul => |x, y| x * y,
                        Binary::Div => |x, y| x / y,
                        Binary::Pow => f32::powf,
                        Binary::Lt => |x, y| f32::from(u8::from(x < y)),
                        Binary::Le => |x, y| f32::from(u8::from(x <= y)),
                        Binary::Gt => |x, y| f32::from(u8::from(x > y)),
                        Binary::Ge => |x, y| f32::from(u8::from(x >= y)),
                        Binary::Eq => |x, y| f32::from(u8::from(x == y)),
                        Binary::Ne => |x, y| f32::from(u8::from(x != y)),
                        Binary::And => |x, y| f32::from(u8::from(x != 0.0 && y != 0.0)),
                        Binary::Or => |x, y| f32::from(u8::from(x != 0.0 || y != 0.0)),
                        Binary::Min => f32::min,
                        Binary::Max => f32::max,
                    };
                    for (x, y) in a.iter_mut().zip(b) {
                        *x = f(*x, *y);
                    }
                    top -= 1;
                }
                Op::Where | Op::Clamp => {
                    let (lower, upper) = stack.split_at_mut(top - 2);
                    let first = &mut lower[top - 3][..len];
                    let (second, third) = upper.split_at_mut(1);
                    let (second, third) = (&second[0][..len], &third[0][..len]);
                    if *op == Op::Where {
                        for ((c, t), e) in first.iter_mut().zip(second).zip(third) {
                            *c = if *c != 0.0 && !c.is_nan() { *t } else { *e };
                        }
                    } else {
                        for ((x, lo), hi) in first.iter_mut().zip(second).zip(third) {
                            *x = x.max(*lo).min(*hi);
                        }
                    }
                    top -= 2;
                }
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Number(f32),
    Name(String),
    Symbol(&'static str),
}

fn describe(token: &Token) -> String {
    match token {
        Token::Number(n) => format!("number {n}"),
        Token::Name(n) => format!("name {n:?}"),
        Token::Symbol(s) => format!("{s:?}"),
    }
}

fn tokenize(text: &str) -> Result<Vec<Token>, String> {
    const SYMBOLS: [&str; 17] = [
        "<=", ">=", "==", "!=", "&&", "||", "+", "-", "*", "/", "^", "(", ")", ",", "<", ">", "!",
    ];
    let mut tokens = Vec::new();
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        let c = rest.chars().next().unwrap_or(' ');
        if c.is_ascii_digit() || c == '.' {
            let end = rest
                .char_indices()
                .find(|&(i, ch)| {
                    !(ch.is_ascii_digit()
                        || ch == '.'
                        || ch == 'e'
                        || ch == 'E'
                        || ((ch == '-' || ch == '+')
                            && i > 0
                            && matches!(rest.as_bytes()[i - 1], b'e' | b'E')))
                })
                .map_or(rest.len(), |(i, _)| i);
            let number = &rest[..end];
            tokens.push(Token::Number(
                number
                    .parse()
                    .map_err(|_| format!("{number:?} is not a number"))?,
            ));
            rest = &rest[end..];
        } else if c.is_ascii_alphabetic() || c == '_' {
            let end = rest
                .find(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_'))
                .unwrap_or(rest.len());
            tokens.push(Token::Name(rest[..end].to_ascii_lowercase()));
            rest = &rest[end..];
        } else if c == '&' || c == '|' {
            // `&` and `&&` alike.
            let doubled = rest[1..].starts_with(c);
            tokens.push(Token::Symbol(if c == '&' { "&&" } else { "||" }));
            rest = &rest[if doubled { 2 } else { 1 }..];
        } else if let Some(s) = SYMBOLS.iter().find(|s| rest.starts_with(**s)) {
            tokens.push(Token::Symbol(s));
            rest = &rest[s.len()..];
        } else {
            return Err(format!("unexpected {c:?} in {text:?}"));
        }
        rest = rest.trim_start();
    }
    if tokens.is_empty() {
        return Err("the expression is empty".into());
    }
    Ok(tokens)
}

/// A recursive-descent parser that emits the program as it goes.
struct Parser<'a> {
    tokens: &'a [Token],
    at: usize,
    program: Vec<Op>,
    /// Levels of recursion now.
    nesting: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn eat(&mut self, symbol: &str) -> bool {
        if matches!(self.peek(), Some(Token::Symbol(s)) if *s == symbol) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, symbol: &str) -> Result<(), String> {
        if self.eat(symbol) {
            Ok(())
        } else {
            Err(match self.peek() {
                Some(t) => format!("expected {symbol:?}, found {}", describe(t)),
                None => format!("expected {symbol:?} at the end"),
            })
        }
    }

    fn binary_level(
        &mut self,
        ops: &[(&str, Binary)],
        next: fn(&mut Self) -> Result<(), String>,
    ) -> Result<(), String> {
        next(self)?;
        'outer: loop {
            for (symbol, op) in ops {
                if self.eat(symbol) {
                    next(self)?;
                    self.program.push(Op::Binary(*op));
                    continue 'outer;
                }
            }
            return Ok(());
        }
    }

    fn or(&mut self) -> Result<(), String> {
        self.binary_level(&[("||", Binary::Or)], Self::and)
    }

    fn and(&mut self) -> Result<(), String> {
        self.binary_level(&[("&&", Binary::And)], Self::comparison)
    }

    fn comparison(&mut self) -> Result<(), String> {
        self.binary_level(
            &[
                ("<=", Binary::Le),
                (">=", Binary::Ge),
                ("==", Binary::Eq),
                ("!=", Binary::Ne),
                ("<", Binary::Lt),
                (">", Binary::Gt),
            ],
            Self::additive,
        )
    }

    fn additive(&mut self) -> Result<(), String> {
        self.binary_level(
            &[("+", Binary::Add), ("-", Binary::Sub)],
            Self::multiplicative,
        )
    }

    fn multiplicative(&mut self) -> Result<(), String> {
        self.binary_level(&[("*", Binary::Mul), ("/", Binary::Div)], Self::unary)
    }

    fn unary(&mut self) -> Result<(), String> {
        self.nesting += 1;
        if self.nesting > MAX_NESTING {
            return Err(format!(
                "the expression nests deeper than {MAX_NESTING} levels"
            ));
        }
        let parsed = self.unary_here();
        self.nesting -= 1;
        parsed
    }

    fn unary_here(&mut self) -> Result<(), String> {
        if self.eat("-") {
            self.unary()?;
            self.program.push(Op::Unary(Unary::Neg));
            return Ok(());
        }
        if self.eat("!") {
            self.unary()?;
            self.program.push(Op::Unary(Unary::Not));
            return Ok(());
        }
        self.eat("+");
        self.power()
    }

    fn power(&mut self) -> Result<(), String> {
        self.atom()?;
        if self.eat("^") {
            // Right-associative, and binds tighter than a unary minus on
            // its left: -2^2 is -4.
            self.unary()?;
            self.program.push(Op::Binary(Binary::Pow));
        }
        Ok(())
    }

    fn atom(&mut self) -> Result<(), String> {
        let token = self
            .peek()
            .cloned()
            .ok_or("the expression ends too early")?;
        self.at += 1;
        match token {
            Token::Number(n) => self.program.push(Op::Const(n)),
            Token::Symbol("(") => {
                self.or()?;
                self.expect(")")?;
            }
            Token::Name(name) => {
                if let Some(index) = name.strip_prefix('b').and_then(|n| n.parse::<usize>().ok()) {
                    if index == 0 {
                        return Err("bands count from b1".into());
                    }
                    self.program.push(Op::Band(index - 1));
                } else {
                    self.call(&name)?;
                }
            }
            Token::Symbol(s) => return Err(format!("unexpected {s:?}")),
        }
        Ok(())
    }

    fn call(&mut self, name: &str) -> Result<(), String> {
        self.expect("(")?;
        let mut args = 0;
        if !self.eat(")") {
            loop {
                self.or()?;
                args += 1;
                if self.eat(")") {
                    break;
                }
                self.expect(",")?;
            }
        }
        let arity = |want: usize| {
            if args == want {
                Ok(())
            } else {
                Err(format!("{name} takes {want} argument(s), not {args}"))
            }
        };
        match name {
            "where" => {
                arity(3)?;
                self.program.push(Op::Where);
            }
            "clamp" => {
                arity(3)?;
                self.program.push(Op::Clamp);
            }
            "min" | "max" => {
                if args < 2 {
                    return Err(format!("{name} takes two arguments or more"));
                }
                let op = if name == "min" {
                    Binary::Min
                } else {
                    Binary::Max
                };
                for _ in 1..args {
                    self.program.push(Op::Binary(op));
                }
            }
            "abs" | "sqrt" | "log" | "ln" | "log10" | "exp" => {
                arity(1)?;
                self.program.push(Op::Unary(match name {
                    "abs" => Unary::Abs,
                    "sqrt" => Unary::Sqrt,
                    "log10" => Unary::Log10,
                    "exp" => Unary::Exp,
                    _ => Unary::Log,
                }));
            }
            other => {
                return Err(format!(
                    "unknown name {other:?}: bands are b1, b2, ...; functions where, min, max, abs, sqrt, log, log10, exp, clamp"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
// The values compared are small integers and halves, exact in f32.
#[allow(clippy::float_cmp)]
mod tests {
    use super::*;

    fn eval(text: &str, bands: Vec<Vec<f32>>) -> Vec<f32> {
        Expression::parse(text)
            .unwrap()
            .evaluate(&Raster::row(bands), None)
            .unwrap()
    }

    #[test]
    fn ndvi_is_computed_per_pixel() {
        let out = eval(
            "(b4 - b3) / (b4 + b3)",
            vec![
                vec![0.0; 3],
                vec![0.0; 3],
                vec![10.0, 50.0, 0.0],
                vec![30.0, 50.0, 0.0],
            ],
        );
        assert!((out[0] - 0.5).abs() < 1e-6 && out[1] == 0.0);
        assert!(out[2].is_nan(), "0/0 has no value");
    }

    #[test]
    fn precedence_and_functions_follow_the_usual_rules() {
        let one = |t: &str| eval(t, vec![vec![2.0]])[0];
        assert_eq!(one("1 + 2 * 3"), 7.0);
        assert_eq!(one("-b1^2"), -4.0);
        assert_eq!(one("2^3^2"), 512.0);
        assert_eq!(one("where(b1 > 1, 10, 20)"), 10.0);
        assert_eq!(one("where(b1 > 1 & b1 < 2, 10, 20)"), 20.0);
        assert_eq!(one("min(b1, 5, -1)"), -1.0);
        assert_eq!(one("max(b1, 5)"), 5.0);
        assert_eq!(one("clamp(b1 * 10, 0, 15)"), 15.0);
        assert_eq!(one("abs(-b1) + sqrt(16) + log10(100)"), 8.0);
        assert!((one("exp(log(b1))") - 2.0).abs() < 1e-6);
        assert_eq!(one("!(b1 == 2) | b1 != 2"), 0.0);
        assert_eq!(one("1.5e1 + .5"), 15.5);
    }

    #[test]
    fn a_window_longer_than_a_chunk_is_evaluated_whole() {
        let n = CHUNK * 2 + 7;
        let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let out = eval("b1 * 2 + 1", vec![a]);
        assert!(
            out.iter()
                .enumerate()
                .all(|(i, v)| *v == i as f32 * 2.0 + 1.0)
        );
    }

    #[test]
    fn invalid_pixels_and_nodata_have_no_value() {
        let mut r = Raster::row(vec![vec![1.0, -9999.0, 3.0, f32::NAN]]);
        r.valid[2] = 0;
        let out = Expression::parse("b1 + 1")
            .unwrap()
            .evaluate(&r, Some(-9999.0))
            .unwrap();
        assert_eq!(out[0], 2.0);
        assert!(out[1].is_nan() && out[2].is_nan() && out[3].is_nan());
    }

    #[test]
    fn mistakes_are_named() {
        for (text, says) in [
            ("", "empty"),
            ("b1 +", "ends too early"),
            ("b0", "from b1"),
            ("foo(b1)", "unknown name"),
            ("where(b1, 2)", "3 argument"),
            ("(b1", "expected \")\""),
            ("b1 $ 2", "unexpected '$'"),
            ("b1 b2", "unexpected name"),
            (&"(".repeat(10_000), "deeper than"),
            (&"-".repeat(10_000), "deeper than"),
        ] {
            let e = Expression::parse(text).unwrap_err();
            assert!(e.contains(says), "{text:?}: {e}");
        }
        let e = Expression::parse("b5")
            .unwrap()
            .evaluate(&Raster::row(vec![vec![1.0]]), None)
            .unwrap_err();
        assert!(e.contains("b5"), "{e}");
    }

    #[test]
    fn the_bands_read_are_listed() {
        let e = Expression::parse("(B4 - b3) / (b4 + b3)").unwrap();
        assert_eq!(e.bands(), &[3, 4]);
    }
}
