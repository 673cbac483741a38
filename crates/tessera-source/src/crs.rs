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
        })
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
        })
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
    /// curved boundaries are covered.
    pub fn transform_bbox(&self, bbox: &BBox, to: &Crs) -> Result<BBox, SourceError> {
        if self.wkt == to.wkt {
            return Ok(*bbox);
        }
        let err = |e: gdal::errors::GdalError| SourceError::Transform {
            from: self.id.clone(),
            to: to.id.clone(),
            source: e.into(),
        };
        let t = CoordTransform::new(&self.spatial_ref()?, &to.spatial_ref()?).map_err(err)?;
        let [a, b, c, d] = t
            .transform_bounds(&[bbox.min_x, bbox.min_y, bbox.max_x, bbox.max_y], 21)
            .map_err(err)?;
        BBox::new(a, b, c, d).map_err(|e| SourceError::Transform {
            from: self.id.clone(),
            to: to.id.clone(),
            source: e.into(),
        })
    }
}

impl Crs {
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
        let t = CoordTransform::new(&self.spatial_ref()?, &to.spatial_ref()?).map_err(err)?;
        let mut zs = vec![0.0; xs.len()];
        t.transform_coords(xs, ys, &mut zs).map_err(err)
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
}
