//! How upstream tile services are configured: `source: { type: xyz }` and
//! `source: { type: wmts }`, read by the tile reader (`tiles.rs`) and the
//! capabilities parser (`wmts_caps.rs`), and the credentials every
//! upstream may send ([`BasicAuth`]).

use std::collections::BTreeMap;

use serde::Deserialize;
use tessera_grid::{GridSpec, TileFormat};

use crate::{HttpSettings, Resampling};

/// `source: { type: xyz, ... }`.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct XyzSourceSpec {
    /// URL template with `{z}`, `{x}` and `{y}` (rows from the top) or
    /// `{-y}` (rows from the bottom, TMS).
    pub url: String,
    /// The upstream's tile grid (default: WebMercatorQuad, 256-pixel tiles).
    #[serde(default)]
    pub grid: Option<GridSpec>,
    /// Lowest zoom the upstream has (default 0).
    #[serde(default)]
    pub min_zoom: u8,
    /// Highest zoom the upstream has (default 19).
    #[serde(default = "default_max_zoom")]
    pub max_zoom: u8,
    /// The upstream's tile format, for passing tiles through (default:
    /// from the template's extension, else PNG).
    #[serde(default)]
    pub format: Option<TileFormat>,
    /// Area the upstream covers, in longitude/latitude `[west, south, east,
    /// north]` (default: the grid's).
    #[serde(default)]
    pub bounds: Option<[f64; 4]>,
    /// HTTP headers for every request.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// HTTP basic auth for every request.
    #[serde(default)]
    pub basic_auth: Option<BasicAuth>,
    /// Resampling when the window is not the upstream's pixel grid.
    #[serde(default)]
    pub resampling: Resampling,
    /// Timeouts, concurrency, retries and the circuit.
    #[serde(default)]
    pub http: HttpSettings,
}

fn default_max_zoom() -> u8 {
    19
}

/// `source: { type: wmts, ... }`.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WmtsSourceSpec {
    /// The capabilities document (`.../WMTSCapabilities.xml`, or the KVP
    /// endpoint, to which `SERVICE=WMTS&REQUEST=GetCapabilities` is added).
    pub url: String,
    /// The layer's identifier.
    pub layer: String,
    /// Its style (default: the default style).
    #[serde(default)]
    pub style: Option<String>,
    /// The tile matrix set (default: the first the layer links).
    #[serde(default)]
    pub matrix_set: Option<String>,
    /// The format (default: `image/png` if offered, else the first).
    #[serde(default)]
    pub format: Option<String>,
    /// HTTP headers for every request.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// HTTP basic auth for every request.
    #[serde(default)]
    pub basic_auth: Option<BasicAuth>,
    /// Resampling when the window is not the upstream's pixel grid.
    #[serde(default)]
    pub resampling: Resampling,
    /// Timeouts, concurrency, retries and the circuit.
    #[serde(default)]
    pub http: HttpSettings,
}

/// User name and password sent with every request (HTTP basic auth).
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BasicAuth {
    /// User name.
    pub user: String,
    /// Password (use `${ENV}`).
    pub password: String,
}
