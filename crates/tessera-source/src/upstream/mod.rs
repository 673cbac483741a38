//! Sources that ask other map services for their pixels: an upstream WMS
//! (one GetMap per metatile). Every request goes through one bounded
//! client per source ([`client::UpstreamClient`]).

pub mod client;
pub mod wms;
