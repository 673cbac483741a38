//! JSON Web Tokens: a token's signature checked with the configured HS256
//! secret or a public key of the JWKS (RS256, ES256, EdDSA), then its
//! `iss`, `aud`, `exp` and `nbf`; its grants read from its claims.
//!
//! Refused whatever they carry: `alg: none` (not an algorithm here), any
//! algorithm but the four, an HS256 token when no secret is configured (a
//! public key is never used as an HMAC secret: the JWKS's symmetric keys
//! are dropped), an asymmetric token whose key (by `kid`, or the one key of
//! its type) is not in the JWKS or is of another family, a header naming
//! critical extensions (`crit`: none is implemented, RFC 7515 4.1.11).

use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};

use crate::config::auth::{Grant, JwtConfig};

/// Longest JWKS read from a URL; a longer one is refused as it streams
/// in, not after it was read.
const MAX_JWKS_BYTES: usize = 1 << 20;

/// A key of the JWKS: its id, the algorithm it verifies, the key.
struct PublicKey {
    kid: Option<String>,
    algorithm: Algorithm,
    key: DecodingKey,
}

/// Checks tokens against the configuration's secret and JWKS.
pub struct Verifier {
    config: JwtConfig,
    secret: Option<DecodingKey>,
    /// The last good JWKS (empty until one was read).
    keys: RwLock<Arc<Vec<PublicKey>>>,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier")
            .field("issuer", &self.config.issuer)
            .field("jwks", &self.config.jwks)
            .field("keys", &self.keys().len())
            .finish_non_exhaustive()
    }
}

/// What a valid token grants.
#[derive(Debug, Clone)]
pub struct Claims {
    /// `sub`, or `-` when the token has none.
    pub subject: String,
    /// The layers (names or globs) of the layers claim.
    pub layers: Vec<String>,
    /// The grants claim; every grant without one.
    pub grants: Vec<Grant>,
}

impl Verifier {
    /// A verifier for `config`; a JWKS file is read now (an error when it
    /// cannot be), a JWKS URL by [`Verifier::refresh`].
    pub fn new(config: &JwtConfig) -> Result<Verifier, String> {
        let verifier = Verifier {
            config: config.clone(),
            secret: config
                .secret
                .as_ref()
                .map(|s| DecodingKey::from_secret(s.as_bytes())),
            keys: RwLock::new(Arc::new(Vec::new())),
        };
        if let Some(path) = config.jwks.as_deref().filter(|j| !j.contains("://")) {
            let text = tessera_source::local_file::read_regular_text(
                std::path::Path::new(path),
                MAX_JWKS_BYTES as u64,
            )
            .map_err(|e| format!("auth.jwt.jwks: {e}"))?;
            verifier.install(&text)?;
        }
        Ok(verifier)
    }

    /// The JWKS URL read by [`Verifier::refresh`], if the keys come from one.
    pub fn jwks_url(&self) -> Option<&str> {
        self.config.jwks.as_deref().filter(|j| j.contains("://"))
    }

    /// Seconds between reads of the JWKS URL.
    pub fn refresh_every(&self) -> Duration {
        Duration::from_secs_f64(self.config.refresh_secs)
    }

    /// Takes over the keys of `other` (a verifier of the same JWKS before
    /// a reload), so that a reload does not wait for the next read.
    pub fn keep_keys_of(&self, other: &Verifier) {
        if self.config.jwks == other.config.jwks {
            let keys = other.keys();
            *self.keys.write().unwrap_or_else(PoisonError::into_inner) = keys;
        }
    }

    fn keys(&self) -> Arc<Vec<PublicKey>> {
        self.keys
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Reads the JWKS URL again; on failure the last good keys stay (and
    /// the error says why).
    pub async fn refresh(&self) -> Result<usize, String> {
        let Some(url) = self.jwks_url() else {
            return Ok(self.keys().len());
        };
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| e.to_string())?;
        let response = client
            .get(url)
            .send()
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        if !response.status().is_success() {
            return Err(format!("{url} answered {}", response.status()));
        }
        use tessera_source::upstream::client::{CappedReadError, read_capped};
        let body = read_capped(response, MAX_JWKS_BYTES)
            .await
            .map_err(|e| match e {
                CappedReadError::TooLarge => format!("{url}: a JWKS of more than 1 MiB"),
                CappedReadError::Transport(e) => format!("{url}: {e}"),
            })?;
        let text = String::from_utf8(body).map_err(|_| format!("{url}: a JWKS not in UTF-8"))?;
        self.install(&text)
    }

    /// Parses a JWKS and makes its usable keys the current ones; a JWKS
    /// without any is refused (the old keys stay).
    fn install(&self, text: &str) -> Result<usize, String> {
        let set: JwkSet =
            serde_json::from_str(text).map_err(|e| format!("the JWKS is not one: {e}"))?;
        let keys: Vec<PublicKey> = set
            .keys
            .iter()
            .filter_map(|jwk| {
                let algorithm = match &jwk.algorithm {
                    AlgorithmParameters::RSA(_) => Algorithm::RS256,
                    AlgorithmParameters::EllipticCurve(_) => Algorithm::ES256,
                    AlgorithmParameters::OctetKeyPair(_) => Algorithm::EdDSA,
                    // A symmetric key is never taken from a JWKS.
                    _ => return None,
                };
                Some(PublicKey {
                    kid: jwk.common.key_id.clone(),
                    algorithm,
                    key: DecodingKey::from_jwk(jwk).ok()?,
                })
            })
            .collect();
        if keys.is_empty() {
            return Err("the JWKS holds no RSA, EC (P-256) or Ed25519 key".into());
        }
        let n = keys.len();
        *self.keys.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(keys);
        Ok(n)
    }

    /// The claims of `token` when it is valid; else why not (for the log).
    pub fn verify(&self, token: &str) -> Result<Claims, String> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| format!("its header: {e}"))?;
        // RFC 7515, 4.1.11: extensions named critical that the recipient
        // does not understand make the token invalid; none is understood
        // here.
        if let Some(crit) = &header.crit {
            return Err(format!(
                "its header names critical extensions this server does not implement: {:?}",
                crit.iter().take(4).collect::<Vec<_>>()
            ));
        }
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&self.config.issuer]);
        validation.set_audience(&[&self.config.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.leeway = self.config.leeway_secs;
        validation.validate_nbf = true;
        let data = match header.alg {
            Algorithm::HS256 => {
                let secret = self
                    .secret
                    .as_ref()
                    .ok_or("an HS256 token, and no secret is configured")?;
                jsonwebtoken::decode::<serde_json::Value>(token, secret, &validation)
            }
            alg @ (Algorithm::RS256 | Algorithm::ES256 | Algorithm::EdDSA) => {
                let keys = self.keys();
                let same_family: Vec<&PublicKey> =
                    keys.iter().filter(|k| k.algorithm == alg).collect();
                let key = match &header.kid {
                    Some(kid) => same_family
                        .iter()
                        .find(|k| k.kid.as_deref() == Some(kid.as_str())),
                    None if same_family.len() == 1 => same_family.first(),
                    None => None,
                }
                .ok_or_else(|| format!("no {alg:?} key of the JWKS matches its kid"))?;
                jsonwebtoken::decode::<serde_json::Value>(token, &key.key, &validation)
            }
            other => return Err(format!("algorithm {other:?} is not accepted")),
        }
        .map_err(|e| e.to_string())?;
        let strings = |name: &str| -> Option<Vec<String>> {
            match data.claims.get(name)? {
                serde_json::Value::Array(items) => Some(
                    items
                        .iter()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect(),
                ),
                serde_json::Value::String(s) => {
                    Some(s.split_whitespace().map(str::to_string).collect())
                }
                _ => None,
            }
        };
        let grants = match strings(&self.config.grants_claim) {
            None => crate::config::auth::all_grants(),
            Some(names) => names
                .iter()
                .filter_map(|n| serde_json::from_value(serde_json::Value::String(n.clone())).ok())
                .collect(),
        };
        Ok(Claims {
            subject: data
                .claims
                .get("sub")
                .and_then(|s| s.as_str())
                .unwrap_or("-")
                .chars()
                .take(64)
                .collect(),
            layers: strings(&self.config.layers_claim).unwrap_or_default(),
            grants,
        })
    }
}
