//! Web Mercator (EPSG:3857) constants and the spherical formulas that need
//! no PROJ: one place for the numbers that every module converting to or
//! from Web Mercator uses.

/// The CRS identifier of Web Mercator.
pub const CRS: &str = "EPSG:3857";

/// The sphere radius of Web Mercator, in metres (the WGS84 semi-major axis).
pub const EARTH_RADIUS_M: f64 = 6_378_137.0;

/// Half the width of the Web Mercator square, in metres (pi x radius): x
/// and y run from minus this to plus this.
pub const HALF_EXTENT_M: f64 = 20_037_508.342_789_244;

/// The latitude at which the Web Mercator square ends, in degrees
/// (atan(sinh(pi))): latitudes beyond it cannot be shown.
pub const MAX_LATITUDE: f64 = 85.051_128_78;

/// Clamps a latitude to what Web Mercator can show.
pub fn clamp_latitude(lat: f64) -> f64 {
    lat.clamp(-MAX_LATITUDE, MAX_LATITUDE)
}

/// Longitude and latitude (degrees) of a Web Mercator point.
pub fn to_lonlat(x: f64, y: f64) -> (f64, f64) {
    let lon = (x / EARTH_RADIUS_M).to_degrees();
    let lat = (y / EARTH_RADIUS_M).sinh().atan().to_degrees();
    (lon, lat)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_corner_of_the_square_is_the_corner_of_the_world() {
        let (lon, lat) = to_lonlat(HALF_EXTENT_M, HALF_EXTENT_M);
        assert!((lon - 180.0).abs() < 1e-9);
        assert!((lat - MAX_LATITUDE).abs() < 1e-6);
        assert!((HALF_EXTENT_M - std::f64::consts::PI * EARTH_RADIUS_M).abs() < 1e-6);
        let (lon, lat) = to_lonlat(0.0, 0.0);
        assert!(lon.abs() < 1e-12 && lat.abs() < 1e-12);
        assert!((clamp_latitude(89.0) - MAX_LATITUDE).abs() < f64::EPSILON);
    }
}
