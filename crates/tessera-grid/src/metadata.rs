//! What a tile pyramid says about itself: its format, zooms, extent,
//! centre, words and vector layers.

use crate::{BBox, TileFormat};

/// What a tile pyramid says about itself, in TileJSON's vocabulary: read
/// from a tile archive (for capabilities and TileJSON), or written into
/// one (an export).
#[derive(Debug, Clone, PartialEq)]
pub struct TileMetadata {
    /// The format of its tiles.
    pub format: TileFormat,
    /// Its lowest zoom.
    pub min_zoom: u8,
    /// Its highest zoom.
    pub max_zoom: u8,
    /// Its extent in longitude/latitude, when it says (written: the
    /// world's when none).
    pub bounds: Option<BBox>,
    /// Longitude, latitude and zoom of its centre, when it says (written:
    /// the bounds' middle at the lowest zoom when none).
    pub center: Option<(f64, f64, u8)>,
    /// Its name.
    pub name: Option<String>,
    /// Its description.
    pub description: Option<String>,
    /// Its attribution (HTML, as TileJSON carries it).
    pub attribution: Option<String>,
    /// Its vector layers (TileJSON's `vector_layers`: id, fields, zooms of
    /// each data layer), for vector tiles: MBTiles 1.3 requires them in its
    /// `json` row, and readers (MapLibre styles, TileJSON) look for them.
    pub vector_layers: Option<serde_json::Value>,
    /// The version it was opened at (an `ETag`, a file's size and time);
    /// not written.
    pub version: Option<String>,
}

impl TileMetadata {
    /// West, south, east, north: the bounds, or the world's (as Web
    /// Mercator holds it).
    pub fn bounds_or_world(&self) -> [f64; 4] {
        self.bounds
            .map_or([-180.0, -85.051_129, 180.0, 85.051_129], |b| {
                [b.min_x, b.min_y, b.max_x, b.max_y]
            })
    }

    /// The centre, or the bounds' middle at the lowest zoom.
    pub fn center_or_middle(&self) -> (f64, f64, u8) {
        self.center.unwrap_or_else(|| {
            let [w, s, e, n] = self.bounds_or_world();
            (f64::midpoint(w, e), f64::midpoint(s, n), self.min_zoom)
        })
    }

    /// `overlay` for vector tiles, `baselayer` for images: the `type`
    /// both formats' metadata carry.
    pub fn layer_type(&self) -> &'static str {
        if self.format.is_vector() {
            "overlay"
        } else {
            "baselayer"
        }
    }
}
