//! What an OGC API map shows, from its parameters: the area (`bbox` in
//! `bbox-crs`, a spatial `subset` in `subset-crs`, or `center` in
//! `center-crs`; else the layers' extent), the CRS of the image (`crs`),
//! its size (`width`/`height`, or from `scale-denominator` at
//! `mm-per-pixel`), and its background (`bgcolor`, `transparent`). CRSs
//! default to CRS84 and take their own axis order (latitude first for
//! EPSG:4326).

use std::sync::Arc;

use tessera_grid::BBox;
use tessera_image::Color;
use tessera_source::Crs;

use super::problem;
use super::subset::{AxisSubset, Direction, Extent, spatial};
use crate::config::Limits;
use crate::http::error::ApiError;

/// The default width of a map that names no size (and height, around a
/// center).
pub const DEFAULT_WIDTH: u32 = 1024;

/// The display resolution a scale denominator assumes unless
/// `mm-per-pixel` says otherwise (the OGC's 0.28 mm).
const DEFAULT_MM_PER_PIXEL: f64 = 0.28;

/// CRS84, the CRS of a `bbox`, `center` or `subset` that names none.
const CRS84_URI: &str = "http://www.opengis.net/def/crs/OGC/1.3/CRS84";

/// A 400 problem (RFC 7807) for an invalid parameter.
pub fn bad(message: String) -> ApiError {
    problem(ApiError::bad_request("InvalidParameterValue", message))
}

/// The area, CRS and size of a map.
#[derive(Debug, Clone)]
pub struct View {
    /// The CRS of the image.
    pub crs: Arc<Crs>,
    /// The area drawn, in `crs` (x/y order).
    pub bbox: BBox,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
}

/// What the map's parameters are read against.
pub struct Scene<'a> {
    /// The request's parameters.
    pub params: &'a [(String, String)],
    /// Every `subset` of the request (spatial axes are read here).
    pub subsets: &'a [AxisSubset],
    /// A CRS by URI or `EPSG:n`.
    pub crs_of: &'a dyn Fn(&str) -> Result<Arc<Crs>, String>,
    /// The layers' extent in CRS84.
    pub extent: BBox,
    /// The first layer's native pixel size in metres, if known (the scale
    /// of a map around a `center` without `scale-denominator`).
    pub native_metres_per_pixel: Option<f64>,
    /// The WMS size limits a map is held to.
    pub limits: &'a Limits,
    /// The map's CRS when `crs` names none: a collection's storage CRS,
    /// CRS84 for maps of several collections.
    pub default_crs: &'a str,
    /// A collection's extent in its storage CRS (x/y): the area of a map
    /// in that CRS that names none (the `storageCrsBbox`, not the CRS84
    /// extent carried over).
    pub storage_extent: Option<(&'a str, BBox)>,
}

/// The first value of `name` among `params`.
pub fn param<'a>(params: &'a [(String, String)], name: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

impl<'a> Scene<'a> {
    fn get(&self, name: &str) -> Option<&'a str> {
        param(self.params, name)
    }

    fn crs(&self, param: &str) -> Result<Arc<Crs>, ApiError> {
        let fallback = if param == "crs" {
            self.default_crs
        } else {
            CRS84_URI
        };
        let text = self.get(param).unwrap_or(fallback);
        (self.crs_of)(&crs_name(text)).map_err(|e| bad(format!("{param} {text:?}: {e}")))
    }

    fn positive(&self, param: &str) -> Result<Option<f64>, ApiError> {
        self.get(param)
            .map(|t| {
                t.trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|v| v.is_finite() && *v > 0.0)
                    .ok_or_else(|| bad(format!("{param}={t:?}: a positive number")))
            })
            .transpose()
    }

    fn pixels(&self, param: &str) -> Result<Option<u32>, ApiError> {
        self.get(param)
            .map(|t| {
                t.trim()
                    .parse::<u32>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| bad(format!("{param}={t:?}: a positive integer")))
            })
            .transpose()
    }

    /// The map's view.
    pub fn view(&self) -> Result<View, ApiError> {
        let crs = self.crs("crs")?;
        let width = self.pixels("width")?;
        let height = self.pixels("height")?;
        let mm_per_pixel = self
            .positive("mm-per-pixel")?
            .unwrap_or(DEFAULT_MM_PER_PIXEL);
        // CRS units per pixel at the asked scale.
        let scaled = self
            .positive("scale-denominator")?
            .map(|s| s * mm_per_pixel / 1000.0 / crs.meters_per_unit);
        let spatial_subsets: Vec<&AxisSubset> = self
            .subsets
            .iter()
            .filter(|s| spatial(&s.axis).is_some())
            .collect();
        let area = match (self.get("bbox"), spatial_subsets.is_empty()) {
            (Some(_), false) => {
                return Err(bad("bbox and a spatial subset: give one of them".into()));
            }
            (Some(text), true) => {
                let bbox_crs = self.crs("bbox-crs")?;
                Some(into(
                    &parse_bbox(text, &bbox_crs)?,
                    &bbox_crs,
                    &crs,
                    "bbox",
                )?)
            }
            (None, false) => {
                let subset_crs = self.crs("subset-crs")?;
                let full = self.extent_in(&subset_crs)?;
                let cut = subset_area(&spatial_subsets, &full)?;
                Some(into(&cut, &subset_crs, &crs, "subset")?)
            }
            (None, true) => None,
        };
        let (bbox, width, height) = match self.get("center") {
            Some(_) if area.is_some() => {
                return Err(bad(
                    "center with bbox or a spatial subset: give one of them".into(),
                ));
            }
            Some(text) => {
                let center_crs = self.crs("center-crs")?;
                let (x, y) = Self::center(text, &center_crs, &crs)?;
                let res = scaled
                    .or_else(|| {
                        self.native_metres_per_pixel
                            .map(|m| m / crs.meters_per_unit)
                    })
                    .ok_or_else(|| {
                        bad(
                            "center needs scale-denominator (the layers' native scale is unknown)"
                                .into(),
                        )
                    })?;
                let (w, h) = match (width, height) {
                    (Some(w), Some(h)) => (w, h),
                    (Some(n), None) | (None, Some(n)) => (n, n),
                    (None, None) => (DEFAULT_WIDTH, DEFAULT_WIDTH),
                };
                let (half_w, half_h) = (f64::from(w) * res / 2.0, f64::from(h) * res / 2.0);
                let bbox = BBox::new(x - half_w, y - half_h, x + half_w, y + half_h)
                    .map_err(|e| bad(format!("center {text:?}: {e}")))?;
                (bbox, w, h)
            }
            None => {
                let bbox = match area {
                    Some(b) => b,
                    None => match self.storage_extent {
                        Some((id, native)) if id == crs.id => native,
                        _ => {
                            let lonlat = self.crs_lonlat()?;
                            into(&self.extent, &lonlat, &crs, "the layers' extent")?
                        }
                    },
                };
                let (w, h) = match scaled {
                    Some(_) if width.is_some() || height.is_some() => {
                        return Err(bad(
                            "width or height with scale-denominator cut the map around a center; \
                             with a bbox or subset, give the scale or the size"
                                .into(),
                        ));
                    }
                    Some(res) => (count(bbox.width() / res), count(bbox.height() / res)),
                    None => size(width, height, &bbox, self.limits),
                };
                (bbox, w, h)
            }
        };
        within_limits((bbox, width, height), self.limits).map(|(bbox, width, height)| View {
            crs,
            bbox,
            width,
            height,
        })
    }

    fn crs_lonlat(&self) -> Result<Arc<Crs>, ApiError> {
        (self.crs_of)("OGC:CRS84").map_err(|e| {
            problem(ApiError::new(
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                "NoApplicableCode",
                e,
            ))
        })
    }

    fn extent_in(&self, crs: &Arc<Crs>) -> Result<BBox, ApiError> {
        let lonlat = self.crs_lonlat()?;
        into(&self.extent, &lonlat, crs, "the layers' extent")
    }

    /// `center=a,b` in `from`'s axis order, as x/y in `to`.
    fn center(text: &str, from: &Crs, to: &Crs) -> Result<(f64, f64), ApiError> {
        let v = numbers(text)
            .filter(|v| v.len() == 2)
            .ok_or_else(|| bad(format!("center={text:?}: two numbers")))?;
        let (mut xs, mut ys) = if from.authority_yx {
            ([v[1]], [v[0]])
        } else {
            ([v[0]], [v[1]])
        };
        from.transform_points(to, &mut xs, &mut ys)
            .map_err(|e| bad(format!("center {text:?} cannot be taken into crs: {e}")))?;
        Ok((xs[0], ys[0]))
    }
}

/// `bbox` from `from` into `to`.
fn into(bbox: &BBox, from: &Crs, to: &Crs, what: &str) -> Result<BBox, ApiError> {
    if from.id == to.id {
        return Ok(*bbox);
    }
    from.transform_bbox(bbox, to)
        .map_err(|e| bad(format!("{what} cannot be taken into crs: {e}")))
}

/// The area spatial subsets cut from `full` (x/y in the subset CRS): an
/// axis not named, or a side written `*`, keeps the full extent.
fn subset_area(subsets: &[&AxisSubset], full: &BBox) -> Result<BBox, ApiError> {
    let (mut min_x, mut min_y, mut max_x, mut max_y) =
        (full.min_x, full.min_y, full.max_x, full.max_y);
    for s in subsets {
        let (low, high) = match &s.extent {
            Extent::Slice(v) => {
                return Err(bad(format!(
                    "subset {}({v}): a map cannot be sliced along a spatial axis; give low:high",
                    s.axis
                )));
            }
            Extent::Trim(low, high) => (low, high),
        };
        let number = |t: &Option<String>| -> Result<Option<f64>, ApiError> {
            t.as_deref()
                .map(|t| {
                    t.parse::<f64>()
                        .ok()
                        .filter(|v| v.is_finite())
                        .ok_or_else(|| bad(format!("subset {}: {t:?} is not a number", s.axis)))
                })
                .transpose()
        };
        let (low, high) = (number(low)?, number(high)?);
        let (min, max) = match spatial(&s.axis) {
            Some(Direction::X) => (&mut min_x, &mut max_x),
            _ => (&mut min_y, &mut max_y),
        };
        if let Some(l) = low {
            *min = l;
        }
        if let Some(h) = high {
            *max = h;
        }
    }
    BBox::new(min_x, min_y, max_x, max_y).map_err(|e| bad(format!("subset: {e}")))
}

/// A CRS as a URI or `EPSG:n` in the form the registry parses.
pub fn crs_name(text: &str) -> String {
    let t = text.trim().trim_start_matches('[').trim_end_matches(']');
    if let Some(code) = t.strip_prefix("http://www.opengis.net/def/crs/EPSG/0/") {
        return format!("EPSG:{code}");
    }
    match t {
        CRS84_URI | "CRS84" | "CRS:84" => "OGC:CRS84".into(),
        other => other.to_string(),
    }
}

fn numbers(text: &str) -> Option<Vec<f64>> {
    text.split(',')
        .map(|p| p.trim().parse::<f64>().ok().filter(|v| v.is_finite()))
        .collect()
}

/// `bbox=a,b,c,d` in `crs`'s axis order (latitude first for EPSG:4326),
/// as an x/y box.
fn parse_bbox(text: &str, crs: &Crs) -> Result<BBox, ApiError> {
    let Some([a, b, c, d]) = numbers(text).and_then(|v| <[f64; 4]>::try_from(v).ok()) else {
        return Err(bad(format!("bbox={text:?}: four numbers")));
    };
    let (min_x, min_y, max_x, max_y) = if crs.authority_yx {
        (b, a, d, c)
    } else {
        (a, b, c, d)
    };
    BBox::new(min_x, min_y, max_x, max_y).map_err(|e| bad(format!("bbox={text:?}: {e}")))
}

/// A pixel count from a length in pixels (at least one).
fn count(pixels: f64) -> u32 {
    pixels.round().clamp(1.0, f64::from(u32::MAX)) as u32
}

/// The image size: both given, one with the other from the bbox's aspect
/// (square pixels), or neither (`DEFAULT_WIDTH` wide, shrunk keeping the
/// aspect to fit the `limits`: a tall layer's default map is drawn, not
/// refused).
fn size(width: Option<u32>, height: Option<u32>, bbox: &BBox, limits: &Limits) -> (u32, u32) {
    let aspect = bbox.height() / bbox.width();
    match (width, height) {
        (Some(w), Some(h)) => (w, h),
        (Some(w), None) => (w, count(f64::from(w) * aspect)),
        (None, Some(h)) => (count(f64::from(h) / aspect), h),
        (None, None) => {
            let (w, h) = (f64::from(DEFAULT_WIDTH), f64::from(DEFAULT_WIDTH) * aspect);
            let pixels = limits.wms_max_pixels as f64;
            let shrink = [
                f64::from(limits.wms_max_width) / w,
                f64::from(limits.wms_max_height) / h,
                (pixels / (w * h)).sqrt(),
                1.0,
            ]
            .into_iter()
            .fold(f64::INFINITY, f64::min);
            // Rounding down keeps the shrunk size within the limits.
            let fit = |v: f64| count((v * shrink).floor().max(1.0));
            if shrink < 1.0 {
                (fit(w), fit(h))
            } else {
                (count(w), count(h))
            }
        }
    }
}

fn within_limits(
    (bbox, w, h): (BBox, u32, u32),
    limits: &Limits,
) -> Result<(BBox, u32, u32), ApiError> {
    if w > limits.wms_max_width
        || h > limits.wms_max_height
        || u64::from(w) * u64::from(h) > limits.wms_max_pixels
    {
        return Err(bad(format!(
            "a {w} x {h} map is beyond the limits ({} x {}, {} pixels)",
            limits.wms_max_width, limits.wms_max_height, limits.wms_max_pixels
        )));
    }
    Ok((bbox, w, h))
}

/// The map's background.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Background {
    /// Its colour (white unless `bgcolor` names one).
    pub color: Color,
    /// Whether the image is transparent where nothing is drawn: `true`
    /// without a `bgcolor`, `false` with one, unless `transparent` says.
    pub transparent: bool,
}

/// `bgcolor` (a web colour name, `0xRRGGBB`, `0xAARRGGBB` or `#RRGGBB`) and
/// `transparent`.
pub fn background(params: &[(String, String)]) -> Result<Background, ApiError> {
    let get = |name: &str| param(params, name);
    let color = match get("bgcolor") {
        None => None,
        Some(t) => Some(parse_color(t).ok_or_else(|| {
            bad(format!(
                "bgcolor={t:?}: a web colour name, 0xRRGGBB or 0xAARRGGBB"
            ))
        })?),
    };
    let transparent = match get("transparent") {
        None => color.is_none(),
        Some(t) if t.eq_ignore_ascii_case("true") => true,
        Some(t) if t.eq_ignore_ascii_case("false") => false,
        Some(t) => return Err(bad(format!("transparent={t:?}: true or false"))),
    };
    Ok(Background {
        color: color.unwrap_or(Color([255, 255, 255, 255])),
        transparent,
    })
}

/// A Maps colour: `0x` with alpha first (`0xAARRGGBB`) or none, `#RRGGBB`
/// (`#RRGGBBAA`, as CSS), or a CSS colour name.
fn parse_color(text: &str) -> Option<Color> {
    let text = text.trim();
    if let Some(hex) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        let c = Color::parse(hex)?;
        return Some(if hex.len() == 8 {
            // Read as RRGGBBAA: rotate to ARGB's order.
            let Color([a, r, g, b]) = c;
            Color([r, g, b, a])
        } else {
            c
        });
    }
    if text.starts_with('#') {
        return Color::parse(text);
    }
    let named = csscolorparser::parse(text).ok()?;
    Some(Color(named.to_rgba8()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_are_maps_colours() {
        assert_eq!(parse_color("0xFF0000"), Some(Color([255, 0, 0, 255])));
        assert_eq!(parse_color("0x80FF0000"), Some(Color([255, 0, 0, 128])));
        assert_eq!(parse_color("#00ff00"), Some(Color([0, 255, 0, 255])));
        assert_eq!(parse_color("navy"), Some(Color([0, 0, 128, 255])));
        assert_eq!(parse_color("nocolour"), None);
        assert_eq!(
            background(&[("bgcolor".into(), "red".into())]).unwrap(),
            Background {
                color: Color([255, 0, 0, 255]),
                transparent: false
            }
        );
        assert!(background(&[]).unwrap().transparent);
    }

    #[test]
    fn crs_uris_bboxes_and_subsets() {
        assert_eq!(
            crs_name("http://www.opengis.net/def/crs/EPSG/0/3857"),
            "EPSG:3857"
        );
        assert_eq!(
            crs_name("[http://www.opengis.net/def/crs/OGC/1.3/CRS84]"),
            "OGC:CRS84"
        );
        let lat_first = Crs::parse("EPSG:4326").unwrap();
        let b = parse_bbox("10,20,30,40", &lat_first).unwrap();
        assert_eq!(
            (b.min_x, b.min_y, b.max_x, b.max_y),
            (20.0, 10.0, 40.0, 30.0)
        );
        assert!(parse_bbox("1,2,3", &lat_first).is_err());
        let full = BBox::new(-180.0, -90.0, 180.0, 90.0).unwrap();
        let subsets = super::super::subset::parse(["Lat(10:20),Lon(*:30)"]).unwrap();
        let refs: Vec<&AxisSubset> = subsets.iter().collect();
        let cut = subset_area(&refs, &full).unwrap();
        assert_eq!(
            (cut.min_x, cut.min_y, cut.max_x, cut.max_y),
            (-180.0, 10.0, 30.0, 20.0)
        );
        let sliced = super::super::subset::parse(["Lat(10)"]).unwrap();
        assert!(subset_area(&[&sliced[0]], &full).is_err());
    }

    #[test]
    fn sizes_follow_the_bbox_aspect() {
        let bbox = BBox::new(-180.0, -90.0, 180.0, 90.0).unwrap();
        let limits = Limits::default();
        assert_eq!(size(Some(400), None, &bbox, &limits), (400, 200));
        assert_eq!(size(None, Some(100), &bbox, &limits), (200, 100));
        assert_eq!(size(None, None, &bbox, &limits), (1024, 512));
        // A layer eight times as tall as wide: the default shrinks to the
        // limits, keeping the aspect.
        let tall = BBox::new(0.0, 0.0, 0.0006, 0.0048).unwrap();
        let (w, h) = size(None, None, &tall, &limits);
        assert!(
            h <= limits.wms_max_height && w <= limits.wms_max_width,
            "{w} x {h}"
        );
        assert!(within_limits((tall, w, h), &limits).is_ok());
        assert!(
            (f64::from(h) / f64::from(w) - 8.0).abs() < 0.05,
            "{w} x {h}"
        );
        assert!(within_limits((bbox, 100_000, 100_000), &limits).is_err());
    }
}
