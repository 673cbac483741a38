//! Sources that ask other map services for their pixels: an upstream WMS
//! (one GetMap per metatile) and upstream tile services (XYZ/TMS templates
//! and WMTS layers: the covering tiles fetched at once and stitched, or
//! passed through). Every request goes through one bounded client per
//! source ([`client::UpstreamClient`]).

mod answer;
pub mod client;
pub mod spec;
pub mod tiles;
pub mod wms;
mod wmts_caps;
pub(crate) mod xml;

pub use spec::BasicAuth;
