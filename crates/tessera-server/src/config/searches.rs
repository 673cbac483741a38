//! The `searches:` section: STAC searches registered at run time.

use serde::Deserialize;

/// `searches:`: searches registered at run time (`POST /searches`), each
/// served as layer `search:{id}` like the configured `type: stac` layer
/// `layer` (its catalogue, assets, method, limits, style, cache, grids and
/// formats), with the registered search in place of its own.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchesConfig {
    /// The configured `type: stac` layer a registered search is served
    /// like.
    pub layer: String,
    /// Most searches registered at a time (default 100): past it, a new
    /// one is refused (429) until one expires.
    #[serde(default = "default_max_searches")]
    pub max_searches: usize,
    /// A search not used (registered again, or a tile asked) for this many
    /// seconds is forgotten (default 7 days); its id then answers 404.
    #[serde(default = "default_expire_after_secs")]
    pub expire_after_secs: u64,
    /// Largest search body, in bytes (default 64 KiB).
    #[serde(default = "default_max_body_bytes")]
    pub max_body_bytes: usize,
    /// Whether anyone may register a search. By default it takes the admin
    /// token, or, with `auth:`, a credential granted `tiles` on `search:*`.
    #[serde(default)]
    pub public: bool,
}

fn default_max_searches() -> usize {
    100
}

fn default_expire_after_secs() -> u64 {
    7 * 24 * 3600
}

fn default_max_body_bytes() -> usize {
    64 * 1024
}
