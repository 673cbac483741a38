//! Access control on reads: who the caller is (an API key, a JWT, or no
//! one), which layers it may read and what it may do with them, and its
//! rate. Built from the `auth:` section ([`crate::config::auth`]); without
//! one every layer is public and every caller anonymous.
//!
//! Credentials come from `Authorization: Bearer` (a JWT, or an API key),
//! `X-API-Key`, or the `key`/`token` query parameters. A credential that is
//! given but not valid is a 401 whatever the layer; a layer neither public
//! nor granted is a 401 for an anonymous caller and a 403 for a known one.
//! API keys are compared by their SHA-256 in constant time. The HTTP side
//! (`http::guard`) asks before any cache lookup, so that a cached tile is
//! served only to callers that may see it.

pub mod jwt;
pub mod rate;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use aws_lc_rs::constant_time::verify_slices_are_equal;
use aws_lc_rs::digest;
use axum::http::HeaderMap;

use crate::config::auth::{AuthConfig, Grant, MetricsAccess};
use rate::Bucket;

/// The pixels of one tile: what a render costs per miss of the budget.
const TILE_PIXELS: u64 = 256 * 256;

/// Most JWT subjects whose rate buckets are kept; past it, the idlest half
/// is dropped.
const MAX_SUBJECT_BUCKETS: usize = 10_000;

/// The hex SHA-256 of an API key, as `auth.keys[].sha256` holds it.
pub fn hash_key(key: &str) -> String {
    use std::fmt::Write as _;
    digest::digest(&digest::SHA256, key.as_bytes())
        .as_ref()
        .iter()
        .fold(String::with_capacity(64), |mut hex, b| {
            let _ = write!(hex, "{b:02x}");
            hex
        })
}

/// Whether `name` matches one of `patterns` (names, or globs with `*` and
/// `?`).
fn matches_any(patterns: &[String], name: &str) -> bool {
    patterns
        .iter()
        .any(|p| p == name || tessera_source::wildcard(p, name))
}

/// A caller's buckets: its requests', and its cache misses' when they are
/// limited apart.
type Buckets = (Bucket, Option<Bucket>);

/// Someone known: an API key's holder or a token's subject.
#[derive(Debug)]
pub struct Grantee {
    /// The key id, or `jwt:<sub>`: in logs and metrics, never a secret.
    pub id: String,
    layers: Vec<String>,
    grants: Vec<Grant>,
    /// Its requests' bucket, and its cache misses' (both shared by its
    /// requests).
    bucket: Option<Arc<Buckets>>,
}

/// One API key, by its hash.
#[derive(Debug)]
struct ApiKey {
    hash: [u8; 32],
    grantee: Arc<Grantee>,
}

/// The access rules of a configuration.
#[derive(Debug)]
pub struct Access {
    keys: Vec<ApiKey>,
    jwt: Option<jwt::Verifier>,
    jwt_rate: Option<crate::config::auth::RateConfig>,
    subjects: Mutex<HashMap<String, Arc<Buckets>>>,
    public: Vec<String>,
    query_parameters: bool,
    /// Caller ids the metrics name (the first seen), the others `other`.
    named: Mutex<std::collections::HashSet<String>>,
    metric_callers: usize,
    metrics: MetricsAccess,
    /// Each client address's budget of credentials that are not valid.
    failures: Mutex<HashMap<std::net::IpAddr, Arc<Bucket>>>,
    failed_credentials: crate::config::auth::RateConfig,
}

/// Why a request is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No credential, or one that is not valid (401).
    Unauthenticated(String),
    /// A known caller without the grant (403).
    Forbidden(String),
    /// Past the caller's rate (429), with when to try again.
    RateLimited(Duration),
}

/// The caller of one request, as [`Access::identify`] found it.
#[derive(Debug, Clone, Default)]
pub struct Caller {
    /// The rules, when access is controlled.
    access: Option<Arc<Access>>,
    /// Who, when known.
    pub grantee: Option<Arc<Grantee>>,
    /// The query parameter the credential came in (`key=...`), to carry
    /// on in the links of documents served to this caller.
    pub query_credential: Option<(&'static str, String)>,
    /// Set once anything was asked about a protected layer for this
    /// request: the answer depends on who asks (see
    /// [`Caller::answer_depends_on_caller`]). Shared by the clones of one
    /// request's caller.
    consulted: Arc<std::sync::atomic::AtomicBool>,
}

impl Access {
    /// The rules of `config`; an error says what is wrong (a JWKS file that
    /// cannot be read).
    pub fn new(config: &AuthConfig) -> Result<Access, String> {
        config.check()?;
        let keys = config
            .keys
            .iter()
            .map(|k| {
                let mut hash = [0u8; 32];
                for (i, byte) in hash.iter_mut().enumerate() {
                    *byte = u8::from_str_radix(&k.sha256[2 * i..2 * i + 2], 16)
                        .map_err(|e| format!("auth.keys {:?}: sha256: {e}", k.id))?;
                }
                Ok(ApiKey {
                    hash,
                    grantee: Arc::new(Grantee {
                        id: k.id.clone(),
                        layers: k.layers.clone(),
                        grants: k.grants.clone(),
                        bucket: k.rate.as_ref().map(buckets),
                    }),
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Access {
            keys,
            jwt: config.jwt.as_ref().map(jwt::Verifier::new).transpose()?,
            jwt_rate: config.jwt.as_ref().and_then(|j| j.rate),
            subjects: Mutex::new(HashMap::new()),
            public: config.public.clone(),
            query_parameters: config.query_parameters,
            named: Mutex::new(std::collections::HashSet::new()),
            metric_callers: config.metric_callers,
            metrics: config.metrics,
            failures: Mutex::new(HashMap::new()),
            failed_credentials: config.failed_credentials_rate(),
        })
    }

    /// The JWT verifier, when tokens are accepted.
    pub fn verifier(&self) -> Option<&jwt::Verifier> {
        self.jwt.as_ref()
    }

    /// Whether anyone may read `layer`.
    pub fn is_public(&self, layer: &str) -> bool {
        matches_any(&self.public, layer)
    }

    /// Whether a request with `headers` and `query` presents a credential
    /// (valid or not).
    pub fn has_credential(&self, headers: &HeaderMap, query: Option<&str>) -> bool {
        headers.contains_key("x-api-key")
            || headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.trim_start().to_ascii_lowercase().starts_with("bearer "))
            || self.query_parameters && query.and_then(credential_parameter).is_some()
    }

    /// The caller of a request with `headers` and `query`: anonymous
    /// without a credential; a 401 for a credential that is not valid.
    pub fn identify(
        self: &Arc<Self>,
        headers: &HeaderMap,
        query: Option<&str>,
    ) -> Result<Caller, Refusal> {
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
        };
        let mut query_credential = None;
        let (credential, is_bearer) = if let Some(bearer) = header("authorization").and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        }) {
            (Some(bearer.trim().to_string()), true)
        } else if let Some(key) = header("x-api-key") {
            (Some(key.to_string()), false)
        } else if self.query_parameters
            && let Some((name, value)) = query.and_then(credential_parameter)
        {
            query_credential = Some((name, value.clone()));
            (Some(value), name == "token")
        } else {
            (None, false)
        };
        let Some(credential) = credential else {
            return Ok(Caller {
                access: Some(self.clone()),
                grantee: None,
                query_credential: None,
                consulted: Arc::default(),
            });
        };
        let grantee = if is_bearer && credential.split('.').count() == 3 {
            self.token_grantee(&credential)?
        } else {
            self.key_grantee(&credential)?
        };
        Ok(Caller {
            access: Some(self.clone()),
            grantee: Some(grantee),
            query_credential,
            consulted: Arc::default(),
        })
    }

    /// The holder of API key `key`, comparing its hash with every key's in
    /// constant time.
    fn key_grantee(&self, key: &str) -> Result<Arc<Grantee>, Refusal> {
        let given = digest::digest(&digest::SHA256, key.as_bytes());
        let mut found = None;
        for k in &self.keys {
            if verify_slices_are_equal(given.as_ref(), &k.hash).is_ok() {
                found = Some(k.grantee.clone());
            }
        }
        found.ok_or_else(|| Refusal::Unauthenticated("the API key is not known".into()))
    }

    /// The subject of JWT `token`, when it is valid.
    fn token_grantee(&self, token: &str) -> Result<Arc<Grantee>, Refusal> {
        let verifier = self.jwt.as_ref().ok_or_else(|| {
            Refusal::Unauthenticated("tokens are not accepted here (no auth.jwt)".into())
        })?;
        let claims = verifier.verify(token).map_err(|why| {
            tracing::debug!(why, "a token was refused");
            Refusal::Unauthenticated(format!("the token is not valid: {why}"))
        })?;
        let bucket = self.jwt_rate.as_ref().map(|rate| {
            let mut subjects = self.subjects.lock().unwrap_or_else(PoisonError::into_inner);
            if subjects.len() >= MAX_SUBJECT_BUCKETS && !subjects.contains_key(&claims.subject) {
                // Buckets held elsewhere are in use; the others are full
                // again soon enough to start over.
                subjects.retain(|_, b| Arc::strong_count(b) > 1);
            }
            subjects
                .entry(claims.subject.clone())
                .or_insert_with(|| buckets(rate))
                .clone()
        });
        Ok(Arc::new(Grantee {
            id: format!("jwt:{}", claims.subject),
            layers: claims.layers,
            grants: claims.grants,
            bucket,
        }))
    }

    /// Whether `address` may present a credential now: `Err` with the
    /// wait while it is past its budget of credentials that were not
    /// valid ([`Access::count_failure`]).
    pub fn admit_address(&self, address: std::net::IpAddr) -> Result<(), Duration> {
        let bucket = self
            .failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&address)
            .cloned();
        bucket.map_or(Ok(()), |b| b.check())
    }

    /// Counts a credential that was not valid against `address`'s budget.
    pub fn count_failure(&self, address: std::net::IpAddr) {
        let bucket = {
            let mut failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
            if failures.len() >= MAX_SUBJECT_BUCKETS && !failures.contains_key(&address) {
                // Addresses not failing now are full again soon enough.
                failures.retain(|_, b| b.check().is_err());
            }
            failures
                .entry(address)
                .or_insert_with(|| Arc::new(Bucket::new(&self.failed_credentials)))
                .clone()
        };
        // Refused from now on while empty (`admit_address`): nothing
        // more is counted until it refills.
        let _ = bucket.take();
    }

    /// The name the metrics give `id`: itself for the first
    /// `metric_callers` ids seen, `other` after.
    pub fn metric_name<'a>(&self, id: &'a str) -> &'a str {
        let mut named = self.named.lock().unwrap_or_else(PoisonError::into_inner);
        if named.contains(id) {
            return id;
        }
        if named.len() < self.metric_callers {
            named.insert(id.to_string());
            return id;
        }
        "other"
    }
}

/// The buckets of `rate`: requests, and misses when it limits them.
fn buckets(rate: &crate::config::auth::RateConfig) -> Arc<Buckets> {
    Arc::new((Bucket::new(rate), Bucket::misses(rate)))
}

/// The first `key` or `token` parameter of `query`.
fn credential_parameter(query: &str) -> Option<(&'static str, String)> {
    query.split('&').find_map(|pair| {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let name = credential_name(name)?;
        let value: String = url::form_urlencoded::parse(format!("v={value}").as_bytes())
            .next()
            .map(|(_, v)| v.into_owned())
            .unwrap_or_default();
        Some((name, value))
    })
}

/// `key` or `token` when `raw` (a query parameter's name as it stands in
/// the URL, percent-encoded or not, in any case) names a credential. The
/// one test of what a credential parameter is: the caller is identified
/// and the access log redacts by it, so that a name like `%6bey` is either
/// both read and hidden, or neither.
pub fn credential_name(raw: &str) -> Option<&'static str> {
    let decoded: String = url::form_urlencoded::parse(raw.as_bytes())
        .next()
        .map(|(name, _)| name.into_owned())
        .unwrap_or_default();
    if decoded.eq_ignore_ascii_case("key") {
        Some("key")
    } else if decoded.eq_ignore_ascii_case("token") {
        Some("token")
    } else {
        None
    }
}

impl Caller {
    /// A caller where access is not controlled: may read everything.
    pub fn open() -> Caller {
        Caller::default()
    }

    /// Whether access is controlled at all.
    pub fn controlled(&self) -> bool {
        self.access.is_some()
    }

    /// Whether the caller may do `grant` with `layer`: `Ok` or why not.
    pub fn may(&self, layer: &str, grant: Grant) -> Result<(), Refusal> {
        let Some(access) = &self.access else {
            return Ok(());
        };
        if access.is_public(layer) {
            return Ok(());
        }
        self.consulted
            .store(true, std::sync::atomic::Ordering::Relaxed);
        match &self.grantee {
            None => Err(Refusal::Unauthenticated(format!(
                "layer {layer:?} needs a credential: an API key (X-API-Key, or ?key=) or a token (Authorization: Bearer)"
            ))),
            Some(g) if matches_any(&g.layers, layer) && g.grants.contains(&grant) => Ok(()),
            Some(g) => Err(Refusal::Forbidden(format!(
                "{} may not read {layer:?}{}",
                g.id,
                if matches_any(&g.layers, layer) {
                    format!(" as {grant:?}")
                } else {
                    String::new()
                }
            ))),
        }
    }

    /// Whether documents list `layer` to this caller: it may read it in
    /// some way.
    pub fn sees(&self, layer: &str) -> bool {
        [Grant::Tiles, Grant::Maps, Grant::FeatureInfo]
            .iter()
            .any(|g| self.may(layer, *g).is_ok())
    }

    /// Whether `layer` is protected (not public where access is
    /// controlled): its answers are `Cache-Control: private`.
    pub fn protects(&self, layer: &str) -> bool {
        let protected = self.access.as_ref().is_some_and(|a| !a.is_public(layer));
        if protected {
            self.consulted
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        protected
    }

    /// Whether the answer to this request depends on who asks: something
    /// was asked about a protected layer while making it (a grant
    /// checked, a layer listed or left out of a document). Such an answer
    /// is never kept by a shared cache ([`crate::http::guard`] marks it
    /// `private` and `Vary: Authorization, X-API-Key`), whether it was
    /// served, refused or filtered.
    pub fn answer_depends_on_caller(&self) -> bool {
        self.consulted.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether the caller may read `/metrics`: always where access is not
    /// controlled or `auth.metrics` is `open`; else only with the
    /// `metrics` grant.
    pub fn may_read_metrics(&self) -> Result<(), Refusal> {
        let Some(access) = &self.access else {
            return Ok(());
        };
        if access.metrics == MetricsAccess::Open {
            return Ok(());
        }
        match &self.grantee {
            None => Err(Refusal::Unauthenticated(
                "/metrics needs a credential with the `metrics` grant".into(),
            )),
            Some(g) if g.grants.contains(&Grant::Metrics) => Ok(()),
            Some(g) => Err(Refusal::Forbidden(format!(
                "{} may not read /metrics (no `metrics` grant)",
                g.id
            ))),
        }
    }

    /// Takes a request from the caller's rate; 429 when it is past it.
    pub fn admit(&self) -> Result<(), Refusal> {
        match self.grantee.as_ref().and_then(|g| g.bucket.as_ref()) {
            Some(buckets) => buckets.0.take().map_err(Refusal::RateLimited),
            None => Ok(()),
        }
    }

    /// Whether the caller's cache misses are limited apart from its
    /// requests ([`Caller::admit_miss`] before rendering for it).
    pub fn limits_misses(&self) -> bool {
        self.grantee
            .as_ref()
            .and_then(|g| g.bucket.as_ref())
            .is_some_and(|b| b.1.is_some())
    }

    /// Takes a cache miss from the caller's miss budget; 429 when it is
    /// past it (what is cached is still served to it).
    pub fn admit_miss(&self) -> Result<(), Refusal> {
        match self
            .grantee
            .as_ref()
            .and_then(|g| g.bucket.as_ref())
            .and_then(|b| b.1.as_ref())
        {
            Some(misses) => misses.take().map_err(Refusal::RateLimited),
            None => Ok(()),
        }
    }

    /// Takes a render of `pixels` pixels that no cache answers (a WMS
    /// GetMap, an OGC API map or dataset tile) from the caller's miss
    /// budget: one miss per tile's worth of pixels (256 x 256), rounded
    /// up; 429 when the budget is spent. A render heavier than what is
    /// left is served once the budget holds a miss, and paid for by the
    /// waits after it.
    pub fn admit_render(&self, pixels: u64) -> Result<(), Refusal> {
        let Some(misses) = self
            .grantee
            .as_ref()
            .and_then(|g| g.bucket.as_ref())
            .and_then(|b| b.1.as_ref())
        else {
            return Ok(());
        };
        let tiles = pixels.div_ceil(TILE_PIXELS) as f64;
        misses.take_weighted(tiles).map_err(Refusal::RateLimited)
    }

    /// The caller's id for logs (`-` when anonymous).
    pub fn id(&self) -> &str {
        self.grantee.as_ref().map_or("-", |g| g.id.as_str())
    }

    /// The caller's name in the metrics: `anonymous`, its id, or `other`.
    pub fn metric_name(&self) -> &str {
        match (&self.access, &self.grantee) {
            (Some(access), Some(g)) => access.metric_name(&g.id),
            _ => "anonymous",
        }
    }

    /// `name=value` of the query credential, form-encoded, to append to
    /// links; empty when the credential did not come in the query.
    pub fn link_query(&self) -> String {
        self.query_credential
            .as_ref()
            .map(|(name, value)| {
                url::form_urlencoded::Serializer::new(String::new())
                    .append_pair(name, value)
                    .finish()
            })
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::auth::KeyConfig;

    fn access() -> Arc<Access> {
        let config = AuthConfig {
            keys: vec![KeyConfig {
                id: "partner-a".into(),
                sha256: hash_key("secret-a"),
                layers: vec!["relief".into(), "elev*".into()],
                grants: vec![Grant::Tiles],
                rate: None,
            }],
            public: vec!["landsat".into()],
            query_parameters: true,
            metric_callers: 1,
            jwt: None,
            metrics: MetricsAccess::Open,
            failed_credentials: None,
        };
        Arc::new(Access::new(&config).unwrap())
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn keys_grant_their_layers_and_grants_only() {
        let a = access();
        let caller = a
            .identify(&headers(&[("x-api-key", "secret-a")]), None)
            .unwrap();
        assert_eq!(caller.id(), "partner-a");
        assert!(caller.may("relief", Grant::Tiles).is_ok());
        assert!(caller.may("elevation", Grant::Tiles).is_ok());
        assert!(caller.may("landsat", Grant::Maps).is_ok(), "public");
        assert!(matches!(
            caller.may("relief", Grant::Maps),
            Err(Refusal::Forbidden(_))
        ));
        assert!(matches!(
            caller.may("secret", Grant::Tiles),
            Err(Refusal::Forbidden(_))
        ));
        let anonymous = a.identify(&HeaderMap::new(), None).unwrap();
        assert!(matches!(
            anonymous.may("relief", Grant::Tiles),
            Err(Refusal::Unauthenticated(_))
        ));
        assert!(anonymous.may("landsat", Grant::Tiles).is_ok());
        assert!(anonymous.sees("landsat") && !anonymous.sees("relief"));
    }

    #[test]
    fn credentials_come_from_headers_or_the_query() {
        let a = access();
        let bearer = a
            .identify(&headers(&[("authorization", "Bearer secret-a")]), None)
            .unwrap();
        assert_eq!(bearer.id(), "partner-a");
        let query = a
            .identify(&HeaderMap::new(), Some("SERVICE=WMS&key=secret-a"))
            .unwrap();
        assert_eq!(query.id(), "partner-a");
        assert_eq!(query.link_query(), "key=secret-a");
        for encoded in ["%6bey=secret-a", "k%65y=secret-a", "%4B%45%59=secret-a"] {
            let caller = a.identify(&HeaderMap::new(), Some(encoded)).unwrap();
            assert_eq!(caller.id(), "partner-a", "{encoded}");
        }
        assert_eq!(credential_name("t%6fken"), Some("token"));
        assert_eq!(credential_name("keys"), None);
        assert!(matches!(
            a.identify(&headers(&[("x-api-key", "secret-b")]), None),
            Err(Refusal::Unauthenticated(_))
        ));
        // A token where no JWT is configured.
        assert!(matches!(
            a.identify(&headers(&[("authorization", "Bearer a.b.c")]), None),
            Err(Refusal::Unauthenticated(_))
        ));
    }

    #[test]
    fn without_access_control_everything_is_open() {
        let open = Caller::open();
        assert!(open.may("anything", Grant::FeatureInfo).is_ok());
        assert!(!open.protects("anything") && !open.controlled());
    }

    #[test]
    fn metrics_name_the_first_callers_only() {
        let a = access();
        assert_eq!(a.metric_name("partner-a"), "partner-a");
        assert_eq!(a.metric_name("jwt:someone"), "other");
        assert_eq!(a.metric_name("partner-a"), "partner-a");
    }

    #[test]
    fn the_hash_is_sha256_in_hex() {
        assert_eq!(
            hash_key("password"),
            "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8"
        );
    }
}
