//! Colors and color ramps with linear interpolation between stops.

use serde::{Deserialize, Deserializer};

/// An 8-bit RGBA color, written `#rrggbb` or `#rrggbbaa` in configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Color(pub [u8; 4]);

impl Color {
    /// Parses `#rrggbb`, `#rrggbbaa`, `rrggbb` or `0xrrggbb` (WMS BGCOLOR).
    pub fn parse(text: &str) -> Option<Color> {
        let hex = text
            .strip_prefix('#')
            .or_else(|| text.strip_prefix("0x"))
            .or_else(|| text.strip_prefix("0X"))
            .unwrap_or(text);
        if !(hex.len() == 6 || hex.len() == 8) || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let byte = |i: usize| u8::from_str_radix(&hex[i..i + 2], 16).ok();
        let a = if hex.len() == 8 { byte(6)? } else { 255 };
        Some(Color([byte(0)?, byte(2)?, byte(4)?, a]))
    }
}

impl<'de> Deserialize<'de> for Color {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Color::parse(&s).ok_or_else(|| {
            serde::de::Error::custom(format!("invalid color {s:?}: use #rrggbb or #rrggbbaa"))
        })
    }
}

impl schemars::JsonSchema for Color {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Color".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": "^#([0-9a-fA-F]{6}|[0-9a-fA-F]{8})$",
            "description": "A colour: #rrggbb or #rrggbbaa."
        })
    }
}

/// One stop of a color ramp.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RampStop {
    /// Data value at which the color applies exactly.
    pub value: f64,
    /// Color at this value.
    pub color: Color,
}

/// A piecewise-linear color ramp. Values below the first stop take its color,
/// values above the last take the last color.
#[derive(Debug, Clone, PartialEq)]
pub struct ColorRamp {
    stops: Vec<RampStop>,
}

impl ColorRamp {
    /// Builds a ramp; stops must be non-empty, finite and strictly increasing.
    pub fn new(stops: Vec<RampStop>) -> Result<Self, String> {
        if stops.is_empty() {
            return Err("a color ramp needs at least one stop".into());
        }
        if stops.iter().any(|s| !s.value.is_finite()) {
            return Err("ramp stop values must be finite".into());
        }
        if stops.windows(2).any(|w| w[1].value <= w[0].value) {
            return Err("ramp stop values must strictly increase".into());
        }
        Ok(Self { stops })
    }

    /// The stops, by increasing value.
    pub fn stops(&self) -> &[RampStop] {
        &self.stops
    }

    /// The color at `value` (interpolated between stops, clamped to the
    /// first and last).
    pub fn color_at(&self, value: f64) -> [u8; 4] {
        let first = &self.stops[0];
        if value <= first.value {
            return first.color.0;
        }
        for pair in self.stops.windows(2) {
            let (lo, hi) = (&pair[0], &pair[1]);
            if value <= hi.value {
                let t = (value - lo.value) / (hi.value - lo.value);
                let mut out = [0u8; 4];
                for (c, o) in out.iter_mut().enumerate() {
                    let a = f64::from(lo.color.0[c]);
                    let b = f64::from(hi.color.0[c]);
                    *o = (a + (b - a) * t).round() as u8;
                }
                return out;
            }
        }
        self.stops[self.stops.len() - 1].color.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hex_colors_in_the_usual_spellings() {
        assert_eq!(Color::parse("#ff8000"), Some(Color([255, 128, 0, 255])));
        assert_eq!(Color::parse("0xFF800080"), Some(Color([255, 128, 0, 128])));
        assert_eq!(Color::parse("ff8000"), Some(Color([255, 128, 0, 255])));
        assert_eq!(Color::parse("#ff80"), None);
        assert_eq!(Color::parse("#gg8000"), None);
    }

    #[test]
    fn ramp_interpolates_and_clamps() {
        let ramp = ColorRamp::new(vec![
            RampStop {
                value: 0.0,
                color: Color([0, 0, 0, 255]),
            },
            RampStop {
                value: 100.0,
                color: Color([200, 100, 0, 255]),
            },
        ])
        .unwrap();
        assert_eq!(ramp.color_at(-5.0), [0, 0, 0, 255]);
        assert_eq!(ramp.color_at(50.0), [100, 50, 0, 255]);
        assert_eq!(ramp.color_at(1e9), [200, 100, 0, 255]);
    }

    #[test]
    fn ramp_rejects_unsorted_stops() {
        let s = |v| RampStop {
            value: v,
            color: Color([0, 0, 0, 255]),
        };
        assert!(ColorRamp::new(vec![s(1.0), s(0.0)]).is_err());
        assert!(ColorRamp::new(vec![]).is_err());
        assert!(ColorRamp::new(vec![s(f64::NAN)]).is_err());
    }
}
