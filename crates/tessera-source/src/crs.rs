//! Coordinate reference systems as GDAL/PROJ understand them.

use gdal::spatial_ref::{AxisMappingStrategy, CoordTransform, SpatialRef};
use tessera_grid::{BBox, METERS_PER_DEGREE};

use crate::{Cause, SourceError};

/// A CRS checked by PROJ: the identifier it was asked by, its WKT and the
/// facts the protocols need (geographic or not, EPSG axis order).
///
/// Plain data (`Send + Sync`): GDAL objects are rebuilt from the WKT where
/// they are needed, on the thread that needs them.
#[derive(Debug, Clone, PartialEq)]
pub struct Crs {
    /// The identifier as normalised (`EPSG:3857`, `OGC:CRS84`, ...).
    pub id: String,
    /// Well-known text.
    pub wkt: String,
    /// Whether units are degrees of longitude/latitude.
    pub geographic: bool,
    /// Whether the authority defines the first axis as latitude or northing
    /// (EPSG:4326 does; WMS 1.3.0 and WMTS follow it).
    pub authority_yx: bool,
    /// Metres per CRS unit (at the equator for geographic CRSs).
    pub meters_per_unit: f64,
    /// [`Crs::world_x_range`], found once when the CRS is described (a
    /// transformation from longitude/latitude per tile showed in cold
    /// tiles' profiles).
    world_x: Option<(f64, f64)>,
}

/// Most CRSs remembered by [`Crs::parse`] and [`Crs::from_wkt`].
const REMEMBERED: usize = 256;

/// CRSs already described, by the text they were made from: describing one
/// asks PROJ's database many questions (tens of milliseconds), and a mosaic
/// of a thousand files has only a few CRSs.
fn remembered() -> &'static std::sync::Mutex<std::collections::HashMap<String, Crs>> {
    static CACHE: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<String, Crs>>> =
        std::sync::OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// `make(text)`, remembered by `text` (errors are not remembered).
fn remember(
    text: &str,
    make: impl FnOnce() -> Result<Crs, SourceError>,
) -> Result<Crs, SourceError> {
    let cache = remembered();
    if let Some(crs) = cache
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(text)
    {
        return Ok(crs.clone());
    }
    let crs = make()?;
    let mut map = cache
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if map.len() >= REMEMBERED {
        map.clear();
    }
    map.insert(text.to_string(), crs.clone());
    Ok(crs)
}

impl Crs {
    /// Whether a box in `other` is the same box in this CRS (axis order
    /// aside, which the request takes care of): the same CRS, or WGS 84 as
    /// EPSG:4326 and as OGC:CRS84.
    pub fn same_coordinates(&self, other: &Crs) -> bool {
        let wgs84 = |c: &Crs| matches!(c.id.as_str(), "EPSG:4326" | "OGC:CRS84");
        self.id == other.id || (wgs84(self) && wgs84(other))
    }

    /// Parses an identifier such as `EPSG:4326`, `CRS:84`, `OGC:CRS84`,
    /// `urn:ogc:def:crs:EPSG::3857` or `EPSG:900913` (an alias of 3857).
    pub fn parse(text: &str) -> Result<Crs, SourceError> {
        remember(text, || Self::parse_now(text))
    }

    fn parse_now(text: &str) -> Result<Crs, SourceError> {
        let invalid = |source: Cause| SourceError::InvalidCrs {
            crs: text.chars().take(64).collect(),
            source,
        };
        let upper = text.trim().to_ascii_uppercase();
        let id = match upper.as_str() {
            "CRS:84"
            | "OGC:CRS84"
            | "URN:OGC:DEF:CRS:OGC:1.3:CRS84"
            | "URN:OGC:DEF:CRS:OGC::CRS84" => "OGC:CRS84".to_string(),
            "EPSG:900913" | "EPSG:102100" | "EPSG:102113" => "EPSG:3857".to_string(),
            _ => {
                if let Some(rest) = upper.strip_prefix("URN:OGC:DEF:CRS:EPSG:") {
                    // `urn:ogc:def:crs:EPSG::3857` or with a version, `EPSG:6.3:3857`.
                    let code = rest.rsplit(':').next().unwrap_or_default();
                    format!("EPSG:{code}")
                } else {
                    upper.clone()
                }
            }
        };
        let Some((auth, code)) = id.split_once(':') else {
            return Err(invalid(
                "expected AUTHORITY:CODE, for example EPSG:3857".into(),
            ));
        };
        if !matches!(auth, "EPSG" | "OGC" | "ESRI" | "IAU_2015")
            || code.is_empty()
            || code.len() > 16
            || !code.bytes().all(|b| b.is_ascii_alphanumeric())
        {
            return Err(invalid(
                "expected AUTHORITY:CODE, for example EPSG:3857".into(),
            ));
        }
        let srs = SpatialRef::from_definition(&id).map_err(|e| invalid(e.into()))?;
        // Maps are drawn on a plane: a vertical or geocentric CRS names no
        // x/y position (PROJ finds no operation to or from it).
        if !(srs.is_geographic() || srs.is_projected()) {
            return Err(invalid(
                format!("{id} is not a horizontal CRS (use a geographic or projected one)").into(),
            ));
        }
        let wkt = srs.to_wkt().map_err(|e| invalid(e.into()))?;
        let geographic = srs.is_geographic();
        let handle = srs.to_c_hsrs();
        // SAFETY: `handle` is a valid OGRSpatialReferenceH owned by `srs`,
        // which outlives both calls.
        let authority_yx = unsafe {
            gdal_sys::OSREPSGTreatsAsLatLong(handle) != 0
                || gdal_sys::OSREPSGTreatsAsNorthingEasting(handle) != 0
        };
        let meters_per_unit = if geographic {
            METERS_PER_DEGREE
        } else {
            srs.linear_units()
        };
        Ok(Crs {
            wkt,
            geographic,
            authority_yx: authority_yx && auth == "EPSG",
            meters_per_unit,
            id: id.clone(),
            world_x: None,
        }
        .with_world_x())
    }

    /// Describes a dataset's own CRS given as WKT; the identifier is
    /// `AUTHORITY:CODE` when PROJ can name it.
    pub fn from_wkt(wkt: &str) -> Result<Crs, SourceError> {
        remember(wkt, || Self::from_wkt_now(wkt))
    }

    fn from_wkt_now(wkt: &str) -> Result<Crs, SourceError> {
        let invalid = |source: Cause| SourceError::InvalidCrs {
            crs: wkt.chars().take(64).collect(),
            source,
        };
        let mut srs = SpatialRef::from_wkt(wkt).map_err(|e| invalid(e.into()))?;
        let _ = srs.auto_identify_epsg();
        let named = match (srs.auth_name(), srs.auth_code()) {
            (Some(auth), Ok(code)) => Crs::parse(&format!("{auth}:{code}")).ok(),
            _ => None,
        };
        if let Some(crs) = named {
            return Ok(crs);
        }
        let geographic = srs.is_geographic();
        Ok(Crs {
            id: srs.name().unwrap_or_else(|| "unnamed".into()),
            wkt: wkt.to_string(),
            geographic,
            authority_yx: false,
            meters_per_unit: if geographic {
                METERS_PER_DEGREE
            } else {
                srs.linear_units()
            },
            world_x: None,
        }
        .with_world_x())
    }

    /// A GDAL spatial reference in traditional GIS (x/y) axis order.
    pub fn spatial_ref(&self) -> Result<SpatialRef, SourceError> {
        let mut srs = SpatialRef::from_wkt(&self.wkt).map_err(|e| SourceError::InvalidCrs {
            crs: self.id.clone(),
            source: e.into(),
        })?;
        srs.set_axis_mapping_strategy(AxisMappingStrategy::TraditionalGisOrder);
        Ok(srs)
    }

    /// Transforms `bbox` from this CRS to `to`, densifying the edges so
    /// curved boundaries are covered, and widening to a pole the box
    /// contains (and to every longitude) when `to` is geographic. The edges go through a
    /// transformation kept per thread (GDAL's own bounds transformation
    /// sets one up, and its inverse, on every call); an edge that does not
    /// transform whole falls back to GDAL's.
    pub fn transform_bbox(&self, bbox: &BBox, to: &Crs) -> Result<BBox, SourceError> {
        if self.wkt == to.wkt {
            return Ok(*bbox);
        }
        let err = |e: &dyn std::fmt::Display| SourceError::Transform {
            from: self.id.clone(),
            to: to.id.clone(),
            source: e.to_string().into(),
        };
        const STEPS: usize = 20;
        let mut xs = Vec::with_capacity(4 * (STEPS + 1));
        let mut ys = Vec::with_capacity(4 * (STEPS + 1));
        for i in 0..=STEPS {
            let f = i as f64 / STEPS as f64;
            let (x, y) = (
                bbox.min_x + f * bbox.width(),
                bbox.min_y + f * bbox.height(),
            );
            xs.extend([x, x, bbox.min_x, bbox.max_x]);
            ys.extend([bbox.min_y, bbox.max_y, y, y]);
        }
        let mut zs = vec![0.0; xs.len()];
        let whole = self.with_transform(to, |t| {
            t.transform_coords(&mut xs, &mut ys, &mut zs).is_ok()
        })? && xs.iter().chain(&ys).all(|v| v.is_finite());
        if !whole {
            let [a, b, c, d] = self.with_transform(to, |t| {
                t.transform_bounds(&[bbox.min_x, bbox.min_y, bbox.max_x, bbox.max_y], 21)
                    .map_err(|e| err(&e))
            })??;
            return BBox::new(a, b, c, d).map_err(|e| err(&e));
        }
        if to.geographic {
            unwrap_longitudes(&mut xs);
        }
        let fold = |v: &[f64], f: fn(f64, f64) -> f64, start: f64| v.iter().copied().fold(start, f);
        let (mut min_x, mut max_x) = (
            fold(&xs, f64::min, f64::INFINITY),
            fold(&xs, f64::max, f64::NEG_INFINITY),
        );
        if to.geographic && max_x - min_x >= 360.0 {
            (min_x, max_x) = (-180.0, 180.0);
        }
        let (mut min_y, mut max_y) = (
            fold(&ys, f64::min, f64::INFINITY),
            fold(&ys, f64::max, f64::NEG_INFINITY),
        );
        // A pole inside a projected box (polar stereographic) is every
        // longitude; a lon/lat box that reaches a pole's latitude is still
        // the box it was.
        if to.geographic && !self.geographic {
            for pole in [90.0, -90.0] {
                let (mut px, mut py) = ([0.0], [pole]);
                let inside = to.transform_points(self, &mut px, &mut py).is_ok()
                    && px[0].is_finite()
                    && py[0].is_finite()
                    && (bbox.min_x..=bbox.max_x).contains(&px[0])
                    && (bbox.min_y..=bbox.max_y).contains(&py[0]);
                if inside {
                    // Around a pole, every longitude.
                    (min_y, max_y) = (min_y.min(pole), max_y.max(pole));
                    (min_x, max_x) = (-180.0, 180.0);
                }
            }
        }
        BBox::new(min_x, min_y, max_x, max_y).map_err(|e| err(&e))
    }
}

/// Makes the longitudes of a box's densified edges continuous, so a box
/// past the antimeridian (a Web Mercator window with its gutter at the
/// world's edge) spans a few degrees past ±180 instead of every longitude
/// between. `lons` holds, for each step along the edges, the bottom, top,
/// left and right points, as [`Crs::transform_bbox`] lays them out: each
/// horizontal edge is followed from its left end, and each vertical edge
/// from the bottom edge's end it starts at. The result is shifted by whole
/// turns so its middle lies within ±180.
fn unwrap_longitudes(lons: &mut [f64]) {
    let near = |v: f64, to: f64| v + 360.0 * ((to - v) / 360.0).round();
    let steps = lons.len() / 4;
    if steps == 0 {
        return;
    }
    let bottom_left = lons[0];
    for edge in [0, 1] {
        let mut previous = if edge == 0 {
            bottom_left
        } else {
            near(lons[1], bottom_left)
        };
        for i in 0..steps {
            let v = near(lons[4 * i + edge], previous);
            lons[4 * i + edge] = v;
            previous = v;
        }
    }
    let bottom_right = lons[4 * (steps - 1)];
    for (edge, start) in [(2, bottom_left), (3, bottom_right)] {
        let mut previous = start;
        for i in 0..steps {
            let v = near(lons[4 * i + edge], previous);
            lons[4 * i + edge] = v;
            previous = v;
        }
    }
    let (lo, hi) = lons
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
            (a.min(*v), b.max(*v))
        });
    let shift = 360.0 * (f64::midpoint(lo, hi) / 360.0).round();
    for v in lons.iter_mut() {
        *v -= shift;
    }
}

/// Most transformations one thread keeps (see [`Crs::with_transform`]).
const TRANSFORMS_PER_THREAD: usize = 32;

thread_local! {
    /// Transformations already set up on this thread, by source and target
    /// WKT: setting one up asks PROJ's database for the best operation
    /// (milliseconds), and the same few pairs come back for every window.
    /// GDAL's transformations are not thread-safe, hence one set per thread.
    static TRANSFORMS: std::cell::RefCell<std::collections::HashMap<(String, String), CoordTransform>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

impl Crs {
    /// Runs `f` with a transformation from this CRS to `to`, set up once
    /// per thread and pair.
    fn with_transform<T>(
        &self,
        to: &Crs,
        f: impl FnOnce(&CoordTransform) -> T,
    ) -> Result<T, SourceError> {
        TRANSFORMS.with(|cell| {
            let mut map = cell.borrow_mut();
            let key = (self.wkt.clone(), to.wkt.clone());
            if !map.contains_key(&key) {
                let t =
                    CoordTransform::new(&self.spatial_ref()?, &to.spatial_ref()?).map_err(|e| {
                        SourceError::Transform {
                            from: self.id.clone(),
                            to: to.id.clone(),
                            source: e.into(),
                        }
                    })?;
                if map.len() >= TRANSFORMS_PER_THREAD {
                    map.clear();
                }
                map.insert(key.clone(), t);
            }
            Ok(f(&map[&key]))
        })
    }

    /// The x range of the world in this CRS when its meridians are
    /// vertical lines (longitude -180..180 in a geographic CRS, -20037508..
    /// 20037508 in Web Mercator): past it, x wraps around the antimeridian.
    /// `None` for a CRS whose meridians converge (polar, conic, UTM).
    pub fn world_x_range(&self) -> Option<(f64, f64)> {
        self.world_x
    }

    /// This CRS with [`Crs::world_x_range`] found.
    fn with_world_x(mut self) -> Crs {
        self.world_x = self.find_world_x_range();
        self
    }

    fn find_world_x_range(&self) -> Option<(f64, f64)> {
        if self.geographic {
            return Some((-180.0, 180.0));
        }
        let lonlat = Crs::parse("OGC:CRS84").ok()?;
        let mut xs = [-180.0, 180.0, -180.0, 180.0];
        let mut ys = [0.0, 0.0, 60.0, 60.0];
        lonlat.transform_points(self, &mut xs, &mut ys).ok()?;
        let vertical = |a: f64, b: f64| (a - b).abs() <= 1e-6 * a.abs().max(1.0);
        (xs.iter().all(|x| x.is_finite())
            && xs[0] < xs[1]
            && vertical(xs[0], xs[2])
            && vertical(xs[1], xs[3]))
        .then_some((xs[0], xs[1]))
    }

    /// Transforms points in place from this CRS to `to` (x/y order).
    pub fn transform_points(
        &self,
        to: &Crs,
        xs: &mut [f64],
        ys: &mut [f64],
    ) -> Result<(), SourceError> {
        if self.wkt == to.wkt {
            return Ok(());
        }
        let err = |e: gdal::errors::GdalError| SourceError::Transform {
            from: self.id.clone(),
            to: to.id.clone(),
            source: e.into(),
        };
        let mut zs = vec![0.0; xs.len()];
        self.with_transform(to, |t| t.transform_coords(xs, ys, &mut zs).map_err(err))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vertical_and_geocentric_crss_are_refused() {
        for text in ["EPSG:5773", "EPSG:4978"] {
            let err = Crs::parse(text).unwrap_err();
            assert!(
                matches!(&err, SourceError::InvalidCrs { .. })
                    && std::error::Error::source(&err)
                        .is_some_and(|c| c.to_string().contains("not a horizontal CRS")),
                "{text}: {err}"
            );
        }
        assert!(Crs::parse("EPSG:3857").is_ok() && Crs::parse("EPSG:31985").is_ok());
    }

    #[test]
    fn transforms_points_to_web_mercator() {
        let ll = Crs::parse("OGC:CRS84").unwrap();
        let merc = Crs::parse("EPSG:3857").unwrap();
        let (mut xs, mut ys) = (vec![0.0, 10.0], vec![0.0, 0.0]);
        ll.transform_points(&merc, &mut xs, &mut ys).unwrap();
        assert!(
            (xs[1] - 1_113_194.9).abs() < 1.0 && ys[0].abs() < 1e-6,
            "{xs:?} {ys:?}"
        );
    }

    #[test]
    fn boxes_past_the_antimeridian_stay_a_few_degrees_past_it() {
        let ll = Crs::parse("OGC:CRS84").unwrap();
        let merc = Crs::parse("EPSG:3857").unwrap();
        const EDGE: f64 = 20_037_508.342_789_244;
        // A metatile at the world's west edge with a gutter past it, its
        // mirror at the east edge, and the whole world with a margin.
        for (bbox, west, east) in [
            ((-EDGE - 40_000.0, 0.0, -EDGE + 5e6, 5e6), -180.36, -135.08),
            ((EDGE - 5e6, -5e6, EDGE + 40_000.0, 0.0), 135.08, 180.36),
            (
                (-EDGE - 40_000.0, -1e6, EDGE + 40_000.0, 1e6),
                -180.0,
                180.0,
            ),
        ] {
            let b = BBox::new(bbox.0, bbox.1, bbox.2, bbox.3).unwrap();
            let got = merc.transform_bbox(&b, &ll).unwrap();
            assert!(
                (got.min_x - west).abs() < 0.01 && (got.max_x - east).abs() < 0.01,
                "{bbox:?} -> {got:?}"
            );
        }
    }

    #[test]
    fn knows_axis_order_of_common_crs() {
        let wgs84 = Crs::parse("EPSG:4326").unwrap();
        assert!(wgs84.geographic && wgs84.authority_yx);
        let crs84 = Crs::parse("CRS:84").unwrap();
        assert!(crs84.geographic && !crs84.authority_yx);
        assert_eq!(crs84.id, "OGC:CRS84");
        let merc = Crs::parse("epsg:900913").unwrap();
        assert_eq!(merc.id, "EPSG:3857");
        assert!(!merc.geographic && !merc.authority_yx);
        assert_eq!(
            Crs::parse("urn:ogc:def:crs:EPSG::3857").unwrap().id,
            "EPSG:3857"
        );
    }

    #[test]
    fn refuses_unknown_and_malformed_crs() {
        for bad in [
            "EPSG:999999",
            "EPSG:",
            "foo",
            "EPSG:../../etc",
            "+proj=longlat",
            "FILE:/etc/passwd",
        ] {
            assert!(
                matches!(Crs::parse(bad), Err(SourceError::InvalidCrs { .. })),
                "{bad} accepted"
            );
        }
    }

    #[test]
    fn transforms_a_box_to_web_mercator() {
        let ll = Crs::parse("EPSG:4326").unwrap();
        let merc = Crs::parse("EPSG:3857").unwrap();
        let b = ll
            .transform_bbox(&BBox::new(0.0, 0.0, 10.0, 10.0).unwrap(), &merc)
            .unwrap();
        assert!((b.max_x - 1_113_194.9).abs() < 1.0, "{b:?}");
    }

    #[test]
    fn a_box_around_a_pole_reaches_it_in_lon_lat() {
        let polar = Crs::parse("EPSG:3413").unwrap();
        let ll = Crs::parse("OGC:CRS84").unwrap();
        let b = polar
            .transform_bbox(&BBox::new(-1e6, -1e6, 1e6, 1e6).unwrap(), &ll)
            .unwrap();
        assert!((b.max_y - 90.0).abs() < 1e-9, "{b:?}");
        assert!(b.min_x < -179.0 && b.max_x > 179.0, "{b:?}");
        // A box beside the pole does not reach it.
        let b = polar
            .transform_bbox(&BBox::new(1e6, 1e6, 2e6, 2e6).unwrap(), &ll)
            .unwrap();
        assert!(b.max_y < 80.0, "{b:?}");
    }

    #[test]
    fn a_lon_lat_box_that_reaches_a_pole_keeps_its_longitudes_in_another_lon_lat_crs() {
        let crs84 = Crs::parse("OGC:CRS84").unwrap();
        let wgs84 = Crs::parse("EPSG:4326").unwrap();
        let b = crs84
            .transform_bbox(&BBox::new(-8.0, -90.0, 163.0, -81.0).unwrap(), &wgs84)
            .unwrap();
        assert!(
            (b.min_x + 8.0).abs() < 1e-9 && (b.max_x - 163.0).abs() < 1e-9,
            "{b:?}"
        );
        assert!(
            (b.min_y + 90.0).abs() < 1e-9 && (b.max_y + 81.0).abs() < 1e-9,
            "{b:?}"
        );
    }

    #[test]
    fn a_box_that_reaches_a_pole_is_answered_by_gdal_when_the_edges_fail() {
        let ll = Crs::parse("OGC:CRS84").unwrap();
        let merc = Crs::parse("EPSG:3857").unwrap();
        let b = ll
            .transform_bbox(&BBox::new(-10.0, 0.0, 10.0, 89.0).unwrap(), &merc)
            .unwrap();
        assert!((b.max_y - 30_240_971.958).abs() < 1.0, "{b:?}");
        // Web Mercator cannot hold the pole itself: the densified edges
        // fail, and the answer is GDAL's (a box or an error, never a panic
        // or a box with infinities).
        if let Ok(b) = ll.transform_bbox(&BBox::new(-10.0, 0.0, 10.0, 90.0).unwrap(), &merc) {
            assert!(b.min_y.abs() < 1.0 && b.max_y.is_finite(), "{b:?}");
        }
    }
}
