//! Tile matrix sets, validated tile coordinates, bounding-box math and the
//! tile vocabulary every other crate shares ([`TileFormat`], [`mercator`]).
//!
//! This crate owns the geometry of tiling and the names of tile formats,
//! and nothing else: it knows no pixels, no HTTP and no storage. Every tile coordinate that reaches a
//! renderer or a store is a [`TileCoord`], which can only be built through
//! [`TileMatrixSet::tile`] or [`TileMatrixSet::parse_tile`], so an `x >= 2^z`,
//! a zoom beyond the grid or a negative or fractional number never gets past
//! the request parser.

mod bbox;
mod coverage;
mod curve;
mod format;
pub mod mercator;
mod metadata;
mod tms;

pub use bbox::BBox;
pub use coverage::Polygon;
pub use curve::{Curve, order_for};
pub use format::{EMPTY_MVT, ElevationEncoding, TileFormat};
pub use metadata::TileMetadata;
pub use tms::{
    GridSpec, TileCoord, TileMatrix, TileMatrixSet, TileRange, WEB_MERCATOR_QUAD, WORLD_CRS84_QUAD,
};

/// Metres per degree on the WGS84 equator, as used by the OGC well-known
/// scale sets (2 * pi * 6378137 / 360).
pub const METERS_PER_DEGREE: f64 = 111_319.490_793_273_57;

/// The standardized rendering pixel size of OGC WMTS and WMS, in metres.
pub const OGC_PIXEL_SIZE_M: f64 = 0.000_28;

/// Errors from building grids and validating tile coordinates.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum GridError {
    /// A coordinate given as text is not a non-negative integer in range.
    #[error("{axis} must be a non-negative integer, got {value:?}")]
    NotAnInteger {
        /// Which coordinate: "z", "x" or "y" (or "TileRow", ...).
        axis: &'static str,
        /// The offending text, truncated to 32 characters.
        value: String,
    },
    /// The zoom level does not exist in this grid.
    #[error("zoom {z} is outside grid {grid}, whose zoom levels are 0 to {max}")]
    ZoomOutOfRange {
        /// Grid identifier.
        grid: String,
        /// Requested zoom.
        z: u32,
        /// Highest zoom of the grid.
        max: u32,
    },
    /// Column or row lies outside the matrix at this zoom.
    #[error("tile {x}/{y} is outside matrix {z} of grid {grid} ({width}x{height} tiles)")]
    TileOutOfRange {
        /// Grid identifier.
        grid: String,
        /// Zoom.
        z: u32,
        /// Column.
        x: u64,
        /// Row.
        y: u64,
        /// Matrix width in tiles.
        width: u32,
        /// Matrix height in tiles.
        height: u32,
    },
    /// A bounding box is empty, inverted or not finite.
    #[error("invalid bounding box: {0}")]
    InvalidBBox(String),
    /// A grid definition is inconsistent.
    #[error("invalid grid {grid}: {reason}")]
    InvalidGrid {
        /// Grid identifier.
        grid: String,
        /// What is wrong and what to change.
        reason: String,
    },
}
