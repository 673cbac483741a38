//! The `server.cors` setting: which web pages on other origins may read
//! tiles, maps and documents.
//!
//! Written as `cors: false` (off), `cors: true` (the defaults), or a map:
//! `cors: { origins: ["https://maps.example"], max_age_secs: 600, admin: false }`.

use std::fmt;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

/// Cross-origin access (CORS) for the read endpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorsSettings {
    /// Whether CORS headers are sent at all (default true).
    pub enabled: bool,
    /// Origins allowed to read (`scheme://host[:port]`), or `*` for every
    /// origin (the default).
    pub origins: Vec<String>,
    /// How long browsers may cache a preflight answer, in seconds (default
    /// 86400).
    pub max_age_secs: u64,
    /// Whether the admin endpoints answer cross-origin requests too
    /// (default false: never, whatever `origins` says).
    pub admin: bool,
}

impl Default for CorsSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            origins: vec!["*".into()],
            max_age_secs: 86_400,
            admin: false,
        }
    }
}

impl CorsSettings {
    /// Whether every origin may read.
    pub fn any_origin(&self) -> bool {
        self.origins.iter().any(|o| o == "*")
    }

    /// Checks each origin is `*` or `scheme://host[:port]` with nothing
    /// after it, the form browsers send.
    pub fn check(&self) -> Result<(), String> {
        if self.enabled && self.origins.is_empty() {
            return Err(
                "server.cors.origins is empty: list origins, or write `cors: false`".into(),
            );
        }
        for origin in &self.origins {
            if origin == "*" {
                continue;
            }
            let valid = origin.split_once("://").is_some_and(|(scheme, rest)| {
                matches!(scheme, "http" | "https")
                    && !rest.is_empty()
                    && !rest.contains(['/', '?', '#', ' ', '*'])
            });
            if !valid {
                return Err(format!(
                    "server.cors.origins: {origin:?} is not an origin; write it as a browser sends it, \
                     `https://maps.example` or `http://localhost:3000` (no path), or `*`"
                ));
            }
        }
        Ok(())
    }
}

/// The map form, every key optional.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct CorsMap {
    /// Whether CORS headers are sent at all (default true).
    #[serde(default = "enabled")]
    enabled: bool,
    /// Origins allowed to read (`scheme://host[:port]`), or `*` for every
    /// origin (the default).
    #[serde(default = "any_origin")]
    origins: Vec<String>,
    /// How long browsers may cache a preflight answer, in seconds
    /// (default 86400).
    #[serde(default = "max_age")]
    max_age_secs: u64,
    /// Whether the admin endpoints answer cross-origin requests too
    /// (default false).
    #[serde(default)]
    admin: bool,
}

fn enabled() -> bool {
    true
}

fn any_origin() -> Vec<String> {
    CorsSettings::default().origins
}

fn max_age() -> u64 {
    CorsSettings::default().max_age_secs
}

impl schemars::JsonSchema for CorsSettings {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "CorsSettings".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let map = generator.subschema_for::<CorsMap>();
        schemars::json_schema!({
            "description": "Cross-origin access (CORS) for the read endpoints: true, false, or a mapping.",
            "anyOf": [
                { "type": "boolean" },
                { "enum": ["on", "off", "true", "false"] },
                map
            ]
        })
    }
}

impl<'de> Deserialize<'de> for CorsSettings {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct CorsVisitor;

        impl<'de> Visitor<'de> for CorsVisitor {
            type Value = CorsSettings;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("true, false, or a map with origins, max_age_secs and admin")
            }

            fn visit_bool<E: de::Error>(self, on: bool) -> Result<CorsSettings, E> {
                Ok(CorsSettings {
                    enabled: on,
                    ..CorsSettings::default()
                })
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<CorsSettings, E> {
                match v {
                    "off" | "false" => self.visit_bool(false),
                    "on" | "true" => self.visit_bool(true),
                    other => Err(E::invalid_value(de::Unexpected::Str(other), &self)),
                }
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<CorsSettings, A::Error> {
                let m = CorsMap::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(CorsSettings {
                    enabled: m.enabled,
                    origins: m.origins,
                    max_age_secs: m.max_age_secs,
                    admin: m.admin,
                })
            }
        }

        deserializer.deserialize_any(CorsVisitor)
    }
}
