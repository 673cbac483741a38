//! Axis-aligned bounding boxes in a grid's CRS (x = easting/longitude).

use crate::GridError;

/// An axis-aligned box with finite coordinates and positive area.
///
/// Coordinates are always in x/y (easting/northing, longitude/latitude)
/// order; protocol-specific axis order is resolved by the parser that builds
/// the box.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BBox {
    /// Minimum x.
    pub min_x: f64,
    /// Minimum y.
    pub min_y: f64,
    /// Maximum x.
    pub max_x: f64,
    /// Maximum y.
    pub max_y: f64,
}

impl BBox {
    /// Builds a box, rejecting NaN, infinities, inverted and zero-area boxes.
    pub fn new(min_x: f64, min_y: f64, max_x: f64, max_y: f64) -> Result<Self, GridError> {
        let all = [min_x, min_y, max_x, max_y];
        if all.iter().any(|v| !v.is_finite()) {
            return Err(GridError::InvalidBBox(format!(
                "coordinates must be finite numbers, got {all:?}"
            )));
        }
        if min_x >= max_x || min_y >= max_y {
            return Err(GridError::InvalidBBox(format!(
                "minimum must be below maximum on both axes, got {all:?}"
            )));
        }
        Ok(Self {
            min_x,
            min_y,
            max_x,
            max_y,
        })
    }

    /// Width along x.
    pub fn width(&self) -> f64 {
        self.max_x - self.min_x
    }

    /// Height along y.
    pub fn height(&self) -> f64 {
        self.max_y - self.min_y
    }

    /// Whether the two boxes overlap with positive area.
    pub fn intersects(&self, other: &BBox) -> bool {
        self.min_x < other.max_x
            && other.min_x < self.max_x
            && self.min_y < other.max_y
            && other.min_y < self.max_y
    }

    /// The overlap of two boxes, if it has positive area.
    pub fn intersection(&self, other: &BBox) -> Option<BBox> {
        BBox::new(
            self.min_x.max(other.min_x),
            self.min_y.max(other.min_y),
            self.max_x.min(other.max_x),
            self.max_y.min(other.max_y),
        )
        .ok()
    }

    /// The smallest box holding both.
    #[must_use]
    pub fn union(&self, other: &BBox) -> BBox {
        BBox {
            min_x: self.min_x.min(other.min_x),
            min_y: self.min_y.min(other.min_y),
            max_x: self.max_x.max(other.max_x),
            max_y: self.max_y.max(other.max_y),
        }
    }

    /// The box grown by `dx` on the left and right and `dy` on top and bottom.
    #[must_use]
    pub fn buffered(&self, dx: f64, dy: f64) -> BBox {
        BBox {
            min_x: self.min_x - dx,
            min_y: self.min_y - dy,
            max_x: self.max_x + dx,
            max_y: self.max_y + dy,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_nan_infinite_inverted_and_empty_boxes() {
        assert!(BBox::new(f64::NAN, 0.0, 1.0, 1.0).is_err());
        assert!(BBox::new(0.0, 0.0, f64::INFINITY, 1.0).is_err());
        assert!(BBox::new(1.0, 0.0, 0.0, 1.0).is_err());
        assert!(BBox::new(0.0, 0.0, 0.0, 1.0).is_err());
        assert!(BBox::new(0.0, 0.0, 1.0, 1.0).is_ok());
    }

    #[test]
    fn intersection_of_disjoint_boxes_is_none() {
        let a = BBox::new(0.0, 0.0, 1.0, 1.0).unwrap();
        let b = BBox::new(2.0, 2.0, 3.0, 3.0).unwrap();
        assert!(!a.intersects(&b));
        assert_eq!(a.intersection(&b), None);
        let c = BBox::new(0.5, 0.5, 3.0, 3.0).unwrap();
        assert_eq!(
            a.intersection(&c),
            Some(BBox::new(0.5, 0.5, 1.0, 1.0).unwrap())
        );
    }
}
