//! The `auth:` section: who may read which layers (API keys stored as
//! SHA-256 hashes, JWTs checked against a JWKS or a shared secret, layers
//! anyone may read), and at what rate. Without it every layer is public.
//! The admin API keeps its own token (`admin.token`).

use serde::Deserialize;

/// The `auth:` section.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, schemars::JsonSchema)]
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
    /// Who may read `/metrics`, which names every layer and caller:
    /// `open` (anyone, the default: a scraper on an internal network) or
    /// `granted` (callers whose key or token has the `metrics` grant).
    #[serde(default)]
    pub metrics: MetricsAccess,
    /// How fast one client address may present credentials that are not
    /// valid (default 1 a second, a burst of 20): past it, every request
    /// of that address carrying a credential is a 429 until its budget is
    /// back, so that keys cannot be guessed at speed. Behind a proxy the
    /// address is the proxy's.
    #[serde(default)]
    pub failed_credentials: Option<RateConfig>,
}

/// Who may read `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MetricsAccess {
    /// Anyone.
    #[default]
    Open,
    /// Callers granted `metrics`.
    Granted,
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Grant {
    /// Tiles of every protocol, and TileJSON.
    Tiles,
    /// Maps of any size, and legends.
    Maps,
    /// Values under a pixel (WMS `GetFeatureInfo`).
    FeatureInfo,
    /// `/metrics`, where `auth.metrics` is `granted`; given only by name
    /// (never by a token without a grants claim).
    Metrics,
}

/// Every grant: what a credential allows unless it says less.
pub fn all_grants() -> Vec<Grant> {
    vec![Grant::Tiles, Grant::Maps, Grant::FeatureInfo]
}

/// One API key.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
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
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, schemars::JsonSchema)]
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
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
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
    /// The budget of credentials that are not valid, per client address.
    pub fn failed_credentials_rate(&self) -> RateConfig {
        self.failed_credentials.unwrap_or(RateConfig {
            per_second: 1.0,
            burst: Some(20),
            misses_per_second: None,
            miss_burst: None,
        })
    }

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
            if let Some(url) = jwt.jwks.as_deref().filter(|j| j.contains("://")) {
                check_jwks_url(url)?;
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
        self.failed_credentials_rate()
            .check()
            .map_err(|e| format!("auth.failed_credentials: {e}"))?;
        Ok(())
    }
}

/// A JWKS URL keys may be read from: `https://` anywhere, or `http://` to
/// this machine only (a loopback address, or the host `localhost`
/// exactly), never with user information. Parsed, not compared as a
/// string: `http://127.0.0.1.example.test/` and `http://localhost@host/`
/// name other machines.
fn check_jwks_url(text: &str) -> Result<(), String> {
    let refused = |why: &str| Err(format!("auth.jwt.jwks {text:?}: {why}"));
    let Ok(url) = url::Url::parse(text) else {
        return refused("not a URL");
    };
    if !url.username().is_empty() || url.password().is_some() {
        return refused("a URL with user information is not accepted");
    }
    match url.scheme() {
        "https" if url.host().is_some() => Ok(()),
        "http" => match url.host() {
            Some(url::Host::Domain(host)) if host.eq_ignore_ascii_case("localhost") => Ok(()),
            Some(url::Host::Ipv4(ip)) if ip.is_loopback() => Ok(()),
            Some(url::Host::Ipv6(ip)) if ip.is_loopback() => Ok(()),
            _ => refused(
                "keys are read over https; http only from this machine (127.0.0.1, [::1] or localhost)",
            ),
        },
        _ => refused("keys are read over https (or from a local file)"),
    }
}

/// Slowest rate a bucket may be given: one a day.
const MIN_RATE: f64 = 1.0 / 86_400.0;

/// Fastest rate a bucket may be given.
const MAX_RATE: f64 = 1e6;

impl RateConfig {
    fn check(&self) -> Result<(), String> {
        // From one a day to a million a second: outside it, a typo.
        let in_range = |v: f64| (MIN_RATE..=MAX_RATE).contains(&v);
        if !in_range(self.per_second) || self.misses_per_second.is_some_and(|m| !in_range(m)) {
            return Err(format!(
                "per_second and misses_per_second must be between one a day ({MIN_RATE:.1e}) and {MAX_RATE:e}"
            ));
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

#[cfg(test)]
mod tests {
    use super::check_jwks_url;

    #[test]
    fn a_jwks_url_is_https_or_this_machine_by_its_parsed_host() {
        for good in [
            "https://id.example.test/.well-known/jwks.json",
            "http://127.0.0.1:8080/jwks",
            "http://127.9.9.9/jwks",
            "http://localhost/jwks",
            "http://LOCALHOST:9/jwks",
            "http://[::1]:9/jwks",
        ] {
            assert_eq!(check_jwks_url(good), Ok(()), "{good}");
        }
        for bad in [
            "http://127.0.0.1.nip.io/",
            "http://localhost.attacker.test/",
            "http://127.0.0.1@attacker.test/",
            "http://localhost:80@attacker.test/",
            "https://user:pw@id.example.test/",
            "http://id.example.test/",
            "ftp://localhost/jwks",
            "http://10.0.0.1/jwks",
        ] {
            let err = check_jwks_url(bad).expect_err(bad);
            assert!(err.contains(bad), "{err}");
        }
    }
}
