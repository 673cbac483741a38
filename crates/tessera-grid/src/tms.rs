//! Tile matrix sets (OGC TMS / WMTS) and the tile coordinates they validate.

use serde::Deserialize;

use crate::{BBox, GridError, METERS_PER_DEGREE, OGC_PIXEL_SIZE_M};

/// Identifier of the built-in spherical Mercator grid.
pub const WEB_MERCATOR_QUAD: &str = "WebMercatorQuad";
/// Identifier of the built-in plate carree grid (2x1 tiles at zoom 0).
pub const WORLD_CRS84_QUAD: &str = "WorldCRS84Quad";

use crate::mercator::HALF_EXTENT_M as WEB_MERCATOR_HALF;
/// Highest zoom in tile coordinates we ever accept; 2^30 columns still fit u32.
const MAX_LEVELS: usize = 31;

/// One zoom level of a [`TileMatrixSet`].
#[derive(Debug, Clone, PartialEq)]
pub struct TileMatrix {
    /// Identifier used by WMTS (`"0"`, `"1"`, ... for the built-in grids).
    pub id: String,
    /// Size of a pixel in CRS units.
    pub resolution: f64,
    /// OGC scale denominator (resolution x metres per unit / 0.28 mm).
    pub scale_denominator: f64,
    /// Number of tile columns.
    pub matrix_width: u32,
    /// Number of tile rows.
    pub matrix_height: u32,
}

/// A tile coordinate that was checked against the matrix set it belongs to.
///
/// Only [`TileMatrixSet::tile`] and [`TileMatrixSet::parse_tile`] build one,
/// so holding a `TileCoord` means `z`, `x` and `y` are inside that grid. Rows
/// count from the top (XYZ / WMTS order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TileCoord {
    z: u8,
    x: u32,
    y: u32,
}

impl TileCoord {
    /// Rebuilds a coordinate that a store wrote from a validated one. Not
    /// for input from the wire: it does not check the grid.
    pub fn restored(z: u8, x: u32, y: u32) -> TileCoord {
        TileCoord { z, x, y }
    }

    /// Zoom level (index into the matrix list).
    pub fn z(&self) -> u8 {
        self.z
    }
    /// Column, from the left.
    pub fn x(&self) -> u32 {
        self.x
    }
    /// Row, from the top.
    pub fn y(&self) -> u32 {
        self.y
    }
}

impl std::fmt::Display for TileCoord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.z, self.x, self.y)
    }
}

/// An inclusive rectangle of tiles at one zoom.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TileRange {
    /// Zoom level.
    pub z: u8,
    /// First column.
    pub min_x: u32,
    /// First row (from the top).
    pub min_y: u32,
    /// Last column, inclusive.
    pub max_x: u32,
    /// Last row, inclusive.
    pub max_y: u32,
}

impl TileRange {
    /// Number of tiles in the range.
    pub fn count(&self) -> u64 {
        u64::from(self.max_x - self.min_x + 1) * u64::from(self.max_y - self.min_y + 1)
    }
}

/// A custom tile matrix set as written in the configuration file.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GridSpec {
    /// Identifier used in URLs and WMTS (`[A-Za-z0-9_.-]+`).
    pub id: String,
    /// Human-readable title.
    #[serde(default)]
    pub title: Option<String>,
    /// CRS as GDAL understands it, for example `EPSG:2056`.
    pub crs: String,
    /// CRS URN for WMTS; derived from `EPSG:n` when absent.
    #[serde(default)]
    pub crs_urn: Option<String>,
    /// Extent covered by the grid: `[min_x, min_y, max_x, max_y]`.
    pub extent: [f64; 4],
    /// Top-left corner of every matrix; defaults to the extent's top-left.
    #[serde(default)]
    pub origin: Option<[f64; 2]>,
    /// Tile width in pixels (default 256).
    #[serde(default = "default_tile_size")]
    pub tile_width: u32,
    /// Tile height in pixels (default 256).
    #[serde(default = "default_tile_size")]
    pub tile_height: u32,
    /// Pixel sizes in CRS units, one per zoom, decreasing.
    #[serde(default)]
    pub resolutions: Option<Vec<f64>>,
    /// OGC scale denominators, one per zoom, decreasing (instead of `resolutions`).
    #[serde(default)]
    pub scale_denominators: Option<Vec<f64>>,
    /// Matrix sizes `[columns, rows]` per zoom; computed from the extent when absent.
    #[serde(default)]
    pub matrix_sizes: Option<Vec<[u32; 2]>>,
}

fn default_tile_size() -> u32 {
    256
}

/// A tile matrix set: a CRS, a top-left origin, a tile size and one
/// [`TileMatrix`] per zoom level.
#[derive(Debug, Clone, PartialEq)]
pub struct TileMatrixSet {
    /// Identifier used in URLs and WMTS.
    pub id: String,
    /// Human-readable title.
    pub title: String,
    /// CRS as GDAL understands it (`EPSG:3857`, `OGC:CRS84`, ...).
    pub crs: String,
    /// CRS URN for WMTS capabilities.
    pub crs_urn: String,
    /// OGC well-known scale set, if the grid is one.
    pub well_known_scale_set: Option<String>,
    /// Whether CRS units are degrees (used for scale denominators).
    pub meters_per_unit: f64,
    /// Area covered by the grid.
    pub extent: BBox,
    /// x of the top-left corner of every matrix.
    pub origin_x: f64,
    /// y of the top-left corner of every matrix.
    pub origin_y: f64,
    /// Tile width in pixels.
    pub tile_width: u32,
    /// Tile height in pixels.
    pub tile_height: u32,
    /// Zoom levels, index = z.
    pub matrices: Vec<TileMatrix>,
}

impl TileMatrixSet {
    /// The same tiles at `factor` times the pixels (HiDPI, `@2x`): every
    /// tile covers the same area with `factor` times the width and height,
    /// so resolutions and scale denominators are divided by `factor`. Its
    /// identifier is `{id}@{factor}x`; it belongs to no well-known scale set.
    #[must_use]
    pub fn scaled(&self, factor: u32) -> TileMatrixSet {
        let f = f64::from(factor);
        TileMatrixSet {
            id: format!("{}@{factor}x", self.id),
            title: format!("{} at {factor}x the pixels", self.title),
            well_known_scale_set: None,
            tile_width: self.tile_width * factor,
            tile_height: self.tile_height * factor,
            matrices: self
                .matrices
                .iter()
                .map(|m| TileMatrix {
                    resolution: m.resolution / f,
                    scale_denominator: m.scale_denominator / f,
                    ..m.clone()
                })
                .collect(),
            ..self.clone()
        }
    }

    /// The OGC WebMercatorQuad grid (EPSG:3857), zoom 0 to 24.
    pub fn web_mercator_quad() -> Self {
        let extent = BBox {
            min_x: -WEB_MERCATOR_HALF,
            min_y: -WEB_MERCATOR_HALF,
            max_x: WEB_MERCATOR_HALF,
            max_y: WEB_MERCATOR_HALF,
        };
        let res0 = 2.0 * WEB_MERCATOR_HALF / 256.0;
        let matrices = (0..=24u32)
            .map(|z| {
                let resolution = res0 / f64::from(1u32 << z);
                TileMatrix {
                    id: z.to_string(),
                    resolution,
                    scale_denominator: resolution / OGC_PIXEL_SIZE_M,
                    matrix_width: 1 << z,
                    matrix_height: 1 << z,
                }
            })
            .collect();
        Self {
            id: WEB_MERCATOR_QUAD.into(),
            title: "Google Maps Compatible for the World".into(),
            crs: crate::mercator::CRS.into(),
            crs_urn: "urn:ogc:def:crs:EPSG::3857".into(),
            well_known_scale_set: Some("urn:ogc:def:wkss:OGC:1.0:GoogleMapsCompatible".into()),
            meters_per_unit: 1.0,
            extent,
            origin_x: -WEB_MERCATOR_HALF,
            origin_y: WEB_MERCATOR_HALF,
            tile_width: 256,
            tile_height: 256,
            matrices,
        }
    }

    /// The OGC WorldCRS84Quad grid (longitude/latitude), zoom 0 (2x1 tiles) to 21.
    pub fn world_crs84_quad() -> Self {
        let res0 = 180.0 / 256.0;
        let matrices = (0..=21u32)
            .map(|z| {
                let resolution = res0 / f64::from(1u32 << z);
                TileMatrix {
                    id: z.to_string(),
                    resolution,
                    scale_denominator: resolution * METERS_PER_DEGREE / OGC_PIXEL_SIZE_M,
                    matrix_width: 2 << z,
                    matrix_height: 1 << z,
                }
            })
            .collect();
        Self {
            id: WORLD_CRS84_QUAD.into(),
            title: "CRS84 for the World".into(),
            crs: "OGC:CRS84".into(),
            crs_urn: "urn:ogc:def:crs:OGC:1.3:CRS84".into(),
            well_known_scale_set: Some("urn:ogc:def:wkss:OGC:1.0:GoogleCRS84Quad".into()),
            meters_per_unit: METERS_PER_DEGREE,
            extent: BBox {
                min_x: -180.0,
                min_y: -90.0,
                max_x: 180.0,
                max_y: 90.0,
            },
            origin_x: -180.0,
            origin_y: 90.0,
            tile_width: 256,
            tile_height: 256,
            matrices,
        }
    }

    /// Builds a custom grid from its configuration. `meters_per_unit` is 1 for
    /// projected CRSs in metres and [`METERS_PER_DEGREE`] for geographic ones.
    pub fn from_spec(spec: &GridSpec, meters_per_unit: f64) -> Result<Self, GridError> {
        let invalid = |reason: String| GridError::InvalidGrid {
            grid: spec.id.clone(),
            reason,
        };
        if spec.id.is_empty()
            || !spec
                .id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        {
            return Err(invalid(
                "id must be non-empty and use only letters, digits, '_', '-' and '.'".into(),
            ));
        }
        if !(1..=4096).contains(&spec.tile_width) || !(1..=4096).contains(&spec.tile_height) {
            return Err(invalid(
                "tile_width and tile_height must be 1..=4096".into(),
            ));
        }
        let [a, b, c, d] = spec.extent;
        let extent = BBox::new(a, b, c, d).map_err(|e| invalid(format!("extent: {e}")))?;
        let resolutions: Vec<f64> = match (&spec.resolutions, &spec.scale_denominators) {
            (Some(r), None) => r.clone(),
            (None, Some(s)) => s
                .iter()
                .map(|sd| sd * OGC_PIXEL_SIZE_M / meters_per_unit)
                .collect(),
            _ => {
                return Err(invalid(
                    "give exactly one of `resolutions` or `scale_denominators`".into(),
                ));
            }
        };
        if resolutions.is_empty() || resolutions.len() > MAX_LEVELS {
            return Err(invalid(format!("needs 1..={MAX_LEVELS} zoom levels")));
        }
        if resolutions.iter().any(|r| !r.is_finite() || *r <= 0.0) {
            return Err(invalid(
                "resolutions must be positive finite numbers".into(),
            ));
        }
        if resolutions.windows(2).any(|w| w[1] >= w[0]) {
            return Err(invalid(
                "resolutions must strictly decrease with zoom".into(),
            ));
        }
        let [origin_x, origin_y] = spec.origin.unwrap_or([extent.min_x, extent.max_y]);
        if let Some(sizes) = &spec.matrix_sizes
            && sizes.len() != resolutions.len()
        {
            return Err(invalid(
                "matrix_sizes must have one entry per zoom level".into(),
            ));
        }
        let mut matrices = Vec::with_capacity(resolutions.len());
        for (z, &resolution) in resolutions.iter().enumerate() {
            let (matrix_width, matrix_height) = match &spec.matrix_sizes {
                Some(sizes) => (sizes[z][0], sizes[z][1]),
                None => {
                    let span_x = resolution * f64::from(spec.tile_width);
                    let span_y = resolution * f64::from(spec.tile_height);
                    let w = ((extent.max_x - origin_x) / span_x - 1e-9).ceil();
                    let h = ((origin_y - extent.min_y) / span_y - 1e-9).ceil();
                    if !(1.0..=f64::from(u32::MAX)).contains(&w)
                        || !(1.0..=f64::from(u32::MAX)).contains(&h)
                    {
                        return Err(invalid(format!(
                            "zoom {z}: origin and extent give {w}x{h} tiles"
                        )));
                    }
                    (w as u32, h as u32)
                }
            };
            if matrix_width == 0 || matrix_height == 0 {
                return Err(invalid(format!(
                    "zoom {z}: matrix size must be at least 1x1"
                )));
            }
            matrices.push(TileMatrix {
                id: z.to_string(),
                resolution,
                scale_denominator: resolution * meters_per_unit / OGC_PIXEL_SIZE_M,
                matrix_width,
                matrix_height,
            });
        }
        let crs_urn = spec
            .crs_urn
            .clone()
            .unwrap_or_else(|| match spec.crs.split_once(':') {
                Some((auth, code)) => format!("urn:ogc:def:crs:{auth}::{code}"),
                None => spec.crs.clone(),
            });
        Ok(Self {
            id: spec.id.clone(),
            title: spec.title.clone().unwrap_or_else(|| spec.id.clone()),
            crs: spec.crs.clone(),
            crs_urn,
            well_known_scale_set: None,
            meters_per_unit,
            extent,
            origin_x,
            origin_y,
            tile_width: spec.tile_width,
            tile_height: spec.tile_height,
            matrices,
        })
    }

    /// Whether `z/x/y` in this grid names the same tile as in the XYZ
    /// scheme of web maps, PMTiles and MBTiles (Web Mercator, 2^z x 2^z
    /// tiles at zoom z, origin at the top-left of the world square); the
    /// tile size in pixels may differ.
    pub fn is_xyz(&self) -> bool {
        let close = |a: f64, b: f64| (a - b).abs() < 1e-6 * WEB_MERCATOR_HALF;
        self.crs == crate::mercator::CRS
            && close(self.origin_x, -WEB_MERCATOR_HALF)
            && close(self.origin_y, WEB_MERCATOR_HALF)
            && self
                .matrices
                .iter()
                .enumerate()
                .all(|(z, m)| z < 32 && m.matrix_width == 1 << z && m.matrix_height == 1 << z)
    }

    /// Highest zoom level.
    pub fn max_zoom(&self) -> u8 {
        (self.matrices.len() - 1) as u8
    }

    /// The matrix at zoom `z`, if it exists.
    pub fn matrix(&self, z: u8) -> Option<&TileMatrix> {
        self.matrices.get(usize::from(z))
    }

    /// Validates a numeric tile coordinate against this grid.
    pub fn tile(&self, z: u32, x: u64, y: u64) -> Result<TileCoord, GridError> {
        let matrix = usize::try_from(z)
            .ok()
            .and_then(|zi| self.matrices.get(zi))
            .ok_or_else(|| GridError::ZoomOutOfRange {
                grid: self.id.clone(),
                z,
                max: u32::from(self.max_zoom()),
            })?;
        if x >= u64::from(matrix.matrix_width) || y >= u64::from(matrix.matrix_height) {
            return Err(GridError::TileOutOfRange {
                grid: self.id.clone(),
                z,
                x,
                y,
                width: matrix.matrix_width,
                height: matrix.matrix_height,
            });
        }
        Ok(TileCoord {
            z: z as u8,
            x: x as u32,
            y: y as u32,
        })
    }

    /// Parses and validates a tile coordinate given as text, as it arrives in
    /// a URL. Only plain decimal digits are accepted: signs, fractions,
    /// exponents and numbers with more than ten digits are refused.
    pub fn parse_tile(&self, z: &str, x: &str, y: &str) -> Result<TileCoord, GridError> {
        let z = parse_index("z", z)?;
        let x = parse_index("x", x)?;
        let y = parse_index("y", y)?;
        let z = u32::try_from(z).map_err(|_| GridError::ZoomOutOfRange {
            grid: self.id.clone(),
            z: u32::MAX,
            max: u32::from(self.max_zoom()),
        })?;
        self.tile(z, x, y)
    }

    /// Converts a row counted from the bottom (TMS) to one counted from the
    /// top, or back. `None` when the row is outside the matrix.
    pub fn flip_row(&self, z: u8, row: u64) -> Option<u64> {
        let h = u64::from(self.matrix(z)?.matrix_height);
        (row < h).then(|| h - 1 - row)
    }

    /// The area covered by a tile, in the grid's CRS.
    pub fn tile_bbox(&self, tile: TileCoord) -> BBox {
        self.tile_range_bbox(&TileRange {
            z: tile.z,
            min_x: tile.x,
            min_y: tile.y,
            max_x: tile.x,
            max_y: tile.y,
        })
    }

    /// The area covered by a rectangle of tiles, in the grid's CRS.
    pub fn tile_range_bbox(&self, range: &TileRange) -> BBox {
        let m = &self.matrices[usize::from(range.z)];
        let span_x = m.resolution * f64::from(self.tile_width);
        let span_y = m.resolution * f64::from(self.tile_height);
        BBox {
            min_x: self.origin_x + f64::from(range.min_x) * span_x,
            max_x: self.origin_x + f64::from(range.max_x + 1) * span_x,
            max_y: self.origin_y - f64::from(range.min_y) * span_y,
            min_y: self.origin_y - f64::from(range.max_y + 1) * span_y,
        }
    }

    /// The tiles at zoom `z` that intersect `bbox`, clipped to the matrix;
    /// `None` when the box lies outside the grid or the zoom does not exist.
    pub fn tiles_in_bbox(&self, z: u8, bbox: &BBox) -> Option<TileRange> {
        let m = self.matrix(z)?;
        let span_x = m.resolution * f64::from(self.tile_width);
        let span_y = m.resolution * f64::from(self.tile_height);
        let eps = 1e-9;
        let col = |v: f64| ((v - self.origin_x) / span_x).floor();
        let row = |v: f64| ((self.origin_y - v) / span_y).floor();
        let min_x = col(bbox.min_x + eps * span_x).max(0.0);
        let max_x = col(bbox.max_x - eps * span_x).min(f64::from(m.matrix_width) - 1.0);
        let min_y = row(bbox.max_y - eps * span_y).max(0.0);
        let max_y = row(bbox.min_y + eps * span_y).min(f64::from(m.matrix_height) - 1.0);
        if min_x > max_x || min_y > max_y {
            return None;
        }
        Some(TileRange {
            z,
            min_x: min_x as u32,
            min_y: min_y as u32,
            max_x: max_x as u32,
            max_y: max_y as u32,
        })
    }

    /// The zoom whose resolution is closest to (not coarser than) `resolution`.
    pub fn zoom_for_resolution(&self, resolution: f64) -> u8 {
        self.matrices
            .iter()
            .position(|m| m.resolution <= resolution * 1.000_001)
            .unwrap_or(self.matrices.len() - 1) as u8
    }
}

fn parse_index(axis: &'static str, text: &str) -> Result<u64, GridError> {
    let bad = || GridError::NotAnInteger {
        axis,
        value: text.chars().take(32).collect(),
    };
    if text.is_empty() || text.len() > 10 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    text.parse::<u64>().map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn web_mercator_zoom0_covers_the_whole_extent() {
        let g = TileMatrixSet::web_mercator_quad();
        let t = g.tile(0, 0, 0).unwrap();
        let b = g.tile_bbox(t);
        assert!((b.min_x + WEB_MERCATOR_HALF).abs() < 1e-6);
        assert!((b.max_y - WEB_MERCATOR_HALF).abs() < 1e-6);
        assert!((g.matrices[0].scale_denominator - 559_082_264.028_717_2).abs() < 1e-3);
    }

    #[test]
    fn world_crs84_quad_has_two_tiles_at_zoom0() {
        let g = TileMatrixSet::world_crs84_quad();
        assert_eq!(g.matrices[0].matrix_width, 2);
        assert_eq!(g.matrices[0].matrix_height, 1);
        let east = g.tile_bbox(g.tile(0, 1, 0).unwrap());
        assert_eq!(east, BBox::new(0.0, -90.0, 180.0, 90.0).unwrap());
        assert!((g.matrices[0].scale_denominator - 279_541_132.014_358_6).abs() < 1e-2);
    }

    #[test]
    fn tile_coordinates_outside_the_matrix_are_refused() {
        let g = TileMatrixSet::web_mercator_quad();
        assert!(matches!(
            g.tile(3, 8, 0),
            Err(GridError::TileOutOfRange { x: 8, .. })
        ));
        assert!(matches!(
            g.tile(3, 0, 8),
            Err(GridError::TileOutOfRange { y: 8, .. })
        ));
        for z in [25, 31, 32, 63, 255, u32::MAX] {
            assert!(matches!(
                g.tile(z, 0, 0),
                Err(GridError::ZoomOutOfRange { .. })
            ));
        }
    }

    #[test]
    fn textual_coordinates_must_be_plain_digits() {
        let g = TileMatrixSet::web_mercator_quad();
        for bad in [
            "-1",
            "1.5",
            "1e3",
            "+1",
            "",
            " 1",
            "0x1",
            "99999999999",
            "１",
        ] {
            assert!(
                matches!(
                    g.parse_tile("1", bad, "0"),
                    Err(GridError::NotAnInteger { axis: "x", .. })
                ),
                "{bad:?} was accepted"
            );
        }
        assert!(matches!(
            g.parse_tile("4294967296", "0", "0"),
            Err(GridError::ZoomOutOfRange { .. })
        ));
        assert!(matches!(
            g.parse_tile("4294967295", "0", "0"),
            Err(GridError::ZoomOutOfRange { .. })
        ));
        assert_eq!(g.parse_tile("2", "3", "1").unwrap().to_string(), "2/3/1");
    }

    #[test]
    fn tms_rows_flip_within_the_matrix() {
        let g = TileMatrixSet::web_mercator_quad();
        assert_eq!(g.flip_row(2, 0), Some(3));
        assert_eq!(g.flip_row(2, 3), Some(0));
        assert_eq!(g.flip_row(2, 4), None);
    }

    #[test]
    fn tiles_in_bbox_clips_to_the_matrix() {
        let g = TileMatrixSet::world_crs84_quad();
        let r = g
            .tiles_in_bbox(1, &BBox::new(-200.0, 0.5, 10.0, 100.0).unwrap())
            .unwrap();
        assert_eq!((r.min_x, r.max_x, r.min_y, r.max_y), (0, 2, 0, 0));
        assert!(
            g.tiles_in_bbox(1, &BBox::new(200.0, 0.0, 210.0, 1.0).unwrap())
                .is_none()
        );
    }

    fn swiss_spec() -> GridSpec {
        GridSpec {
            id: "swiss".into(),
            title: None,
            crs: "EPSG:2056".into(),
            crs_urn: None,
            extent: [2_420_000.0, 1_030_000.0, 2_900_000.0, 1_350_000.0],
            origin: None,
            tile_width: 256,
            tile_height: 256,
            resolutions: Some(vec![4000.0, 2000.0, 1000.0]),
            scale_denominators: None,
            matrix_sizes: None,
        }
    }

    #[test]
    fn custom_grid_computes_matrix_limits_from_the_extent() {
        let g = TileMatrixSet::from_spec(&swiss_spec(), 1.0).unwrap();
        assert_eq!(g.crs_urn, "urn:ogc:def:crs:EPSG::2056");
        // 480 km / (4000 m * 256) = 0.47 -> 1 column
        assert_eq!(g.matrices[0].matrix_width, 1);
        // 480 km / (1000 m * 256) = 1.875 -> 2 columns
        assert_eq!(g.matrices[2].matrix_width, 2);
        assert_eq!(g.matrices[2].matrix_height, 2);
    }

    #[test]
    fn custom_grid_from_scale_denominators_matches_resolutions() {
        let mut spec = swiss_spec();
        spec.resolutions = None;
        spec.scale_denominators = Some(vec![4000.0 / OGC_PIXEL_SIZE_M, 2000.0 / OGC_PIXEL_SIZE_M]);
        let g = TileMatrixSet::from_spec(&spec, 1.0).unwrap();
        assert!((g.matrices[1].resolution - 2000.0).abs() < 1e-9);
    }

    #[test]
    fn custom_grid_rejects_inconsistent_definitions() {
        let mut spec = swiss_spec();
        spec.resolutions = Some(vec![1000.0, 2000.0]);
        assert!(matches!(
            TileMatrixSet::from_spec(&spec, 1.0),
            Err(GridError::InvalidGrid { .. })
        ));
        let mut spec = swiss_spec();
        spec.scale_denominators = Some(vec![1.0]);
        assert!(TileMatrixSet::from_spec(&spec, 1.0).is_err());
        let mut spec = swiss_spec();
        spec.id = "../x".into();
        assert!(TileMatrixSet::from_spec(&spec, 1.0).is_err());
    }

    #[test]
    fn only_web_mercator_quads_are_xyz() {
        assert!(TileMatrixSet::web_mercator_quad().is_xyz());
        assert!(!TileMatrixSet::world_crs84_quad().is_xyz());
        let swiss = TileMatrixSet::from_spec(&swiss_spec(), 1.0).unwrap();
        assert!(!swiss.is_xyz());
        // 512-pixel tiles over the same matrices still address XYZ tiles.
        let mut big = TileMatrixSet::web_mercator_quad();
        big.tile_width = 512;
        big.tile_height = 512;
        assert!(big.is_xyz());
        let mut shifted = TileMatrixSet::web_mercator_quad();
        shifted.origin_x += 1000.0;
        assert!(!shifted.is_xyz());
    }
}
