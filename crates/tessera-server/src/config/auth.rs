//! The `auth:` section: who may read which layers (API keys stored as
//! SHA-256 hashes, JWTs checked against a JWKS or a shared secret, layers
//! anyone may read), and at what rate. Without it every layer is public.
//! The admin API keeps its own token (`admin.token`).

use serde::Deserialize;

/// The `auth:` section.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// API keys.
    #[serde(default)]
    pub keys: Vec<KeyConfig>,
    /// JSON Web Tokens.
    #[serde(default)]
    pub jwt: Option<JwtConfig>,
    /// Layers (names or globs: `*` any run of characters, `?` one) anyone
    /// may read, without credentials.
    #[serde(default)]
    pub public: Vec<String>,
    /// Whether a `key` or `token` query parameter is taken as a credential
    /// (default true), for WMS and WMTS clients that cannot set headers.
    /// Taken ones are kept out of access logs and cache keys, and the
    /// capabilities' URLs carry them.
    #[serde(default = "yes")]
    pub query_parameters: bool,
    /// How many callers (API key ids, JWT subjects) the metrics name, the
    /// first seen; the others are counted as `other` (default 50).
    #[serde(default = "default_metric_callers")]
    pub metric_callers: usize,
}

fn yes() -> bool {
    true
}

fn default_metric_callers() -> usize {
    50
}

/// What a credential allows: reading tiles (XYZ, TMS, WMTS, OGC API
/// tiles, TileJSON), maps (WMS `GetMap`, OGC API maps, legends), feature
/// info (WMS `GetFeatureInfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Grant {
    /// Tiles of every protocol, and TileJSON.
    Tiles,
    /// Maps of any size, and legends.
    Maps,
    /// Values under a pixel (WMS `GetFeatureInfo`).
    FeatureInfo,
}

/// Every grant: what a credential allows unless it says less.
pub fn all_grants() -> Vec<Grant> {
    vec![Grant::Tiles, Grant::Maps, Grant::FeatureInfo]
}

/// One API key.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct KeyConfig {
    /// The key's name, shown in logs and metrics (never the key).
    pub id: String,
    /// The SHA-256 of the key, 64 hex digits (`tessera hash-key` prints it).
    pub sha256: String,
    /// Layers (names or globs) the key may read.
    pub layers: Vec<String>,
    /// What the key may do with them (default all).
    #[serde(default = "all_grants")]
    pub grants: Vec<Grant>,
    /// The key's rate limit (default none).
    #[serde(default)]
    pub rate: Option<RateConfig>,
}

/// A token bucket: `per_second` requests on average, `burst` at once;
/// cache misses (tiles rendered or fetched for the caller) may have a
/// bucket of their own, counted apart from the requests: past it the
/// caller is served what is cached and refused (429) what would be
/// rendered.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RateConfig {
    /// Requests per second, on average.
    pub per_second: f64,
    /// Requests at once (default: one second's worth, at least 1).
    #[serde(default)]
    pub burst: Option<u32>,
    /// Tile cache misses per second (default: no bucket of their own).
    #[serde(default)]
    pub misses_per_second: Option<f64>,
    /// Misses at once (default: one second's worth, at least 1).
    #[serde(default)]
    pub miss_burst: Option<u32>,
}

/// JSON Web Tokens: `Authorization: Bearer <jwt>` (or `?token=`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct JwtConfig {
    /// The public keys (a JWKS document): a file, or an `https://` URL
    /// read again every `refresh_secs` (a failed read keeps the last good
    /// keys). RS256, ES256 and EdDSA tokens are checked against them.
    #[serde(default)]
    pub jwks: Option<String>,
    /// A shared secret for HS256 tokens (use `${ENV}`); at least 32 bytes.
    #[serde(default)]
    pub secret: Option<String>,
    /// The `iss` tokens must carry.
    pub issuer: String,
    /// The `aud` tokens must carry (one of theirs).
    pub audience: String,
    /// The claim listing the layers (names or globs) a token may read
    /// (default `layers`).
    #[serde(default = "default_layers_claim")]
    pub layers_claim: String,
    /// The claim listing what a token may do (`tiles`, `maps`,
    /// `feature_info`); without it, everything (default `grants`).
    #[serde(default = "default_grants_claim")]
    pub grants_claim: String,
    /// Seconds of clock difference allowed on `exp` and `nbf` (default 30).
    #[serde(default = "default_leeway")]
    pub leeway_secs: u64,
    /// Seconds between reads of a JWKS URL (default 600).
    #[serde(default = "default_refresh")]
    pub refresh_secs: f64,
    /// The rate limit of each token subject (`sub`) (default none).
    #[serde(default)]
    pub rate: Option<RateConfig>,
}

fn default_layers_claim() -> String {
    "layers".into()
}

fn default_grants_claim() -> String {
    "grants".into()
}

fn default_leeway() -> u64 {
    30
}

fn default_refresh() -> f64 {
    600.0
}

impl AuthConfig {
    /// Checks what the types cannot: hashes are SHA-256 in hex, ids are
    /// unique and printable, rates are positive, a JWT section has keys.
    pub fn check(&self) -> Result<(), String> {
        let mut ids = std::collections::HashSet::new();
        let mut hashes = std::collections::HashSet::new();
        for key in &self.keys {
            if key.id.is_empty()
                || !key
                    .id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '@'))
            {
                return Err(format!(
                    "auth.keys: id {:?} must be letters, digits, '-', '_', '.' or '@'",
                    key.id
                ));
            }
            if !ids.insert(key.id.as_str()) {
                return Err(format!("auth.keys: id {:?} is used twice", key.id));
            }
            if key.sha256.len() != 64 || !key.sha256.chars().all(|c| c.is_ascii_hexdigit()) {
                return Err(format!(
                    "auth.keys {:?}: sha256 must be the 64 hex digits of the key's SHA-256 \
                     (`tessera hash-key` prints them), not the key",
                    key.id
                ));
            }
            if !hashes.insert(key.sha256.to_ascii_lowercase()) {
                return Err(format!(
                    "auth.keys {:?}: the same key hash is listed twice",
                    key.id
                ));
            }
            if key.grants.is_empty() {
                return Err(format!("auth.keys {:?}: grants is empty", key.id));
            }
            if let Some(rate) = &key.rate {
                rate.check()
                    .map_err(|e| format!("auth.keys {:?}: rate: {e}", key.id))?;
            }
        }
        if let Some(jwt) = &self.jwt {
            if jwt.jwks.is_none() && jwt.secret.is_none() {
                return Err("auth.jwt: give `jwks` (a file or an https URL) or `secret`".into());
            }
            if jwt.secret.as_ref().is_some_and(|s| s.len() < 32) {
                return Err("auth.jwt.secret must be at least 32 bytes".into());
            }
            if let Some(url) = jwt.jwks.as_deref().filter(|j| j.contains("://"))
                && !url.starts_with("https://")
                && !url.starts_with("http://127.0.0.1")
                && !url.starts_with("http://localhost")
            {
                return Err(format!(
                    "auth.jwt.jwks {url:?}: keys are read over https (or from a local file)"
                ));
            }
            if jwt.issuer.is_empty() || jwt.audience.is_empty() {
                return Err("auth.jwt: issuer and audience may not be empty".into());
            }
            if !(jwt.refresh_secs.is_finite() && jwt.refresh_secs >= 1.0) {
                return Err("auth.jwt.refresh_secs must be at least 1".into());
            }
            if let Some(rate) = &jwt.rate {
                rate.check().map_err(|e| format!("auth.jwt.rate: {e}"))?;
            }
        }
        if self.metric_callers == 0 {
            return Err("auth.metric_callers must be at least 1".into());
        }
        Ok(())
    }
}

impl RateConfig {
    fn check(&self) -> Result<(), String> {
        let positive = |v: f64| v.is_finite() && v > 0.0;
        if !positive(self.per_second) || self.misses_per_second.is_some_and(|m| !positive(m)) {
            return Err("per_second and misses_per_second must be above 0".into());
        }
        if self.burst == Some(0) || self.miss_burst == Some(0) {
            return Err("burst and miss_burst must be at least 1".into());
        }
        if self.miss_burst.is_some() && self.misses_per_second.is_none() {
            return Err("miss_burst needs misses_per_second".into());
        }
        Ok(())
    }
}
