//! An upstream WMS as a source: one GetMap per read (a whole metatile with
//! its gutter), in the grid's CRS when the upstream offers it, else in one
//! it offers and warped by GDAL.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;
use tessera_grid::BBox;
use tessera_image::{Raster, RgbaImage, decode};

use super::answer::{fetch_error, refuse_non_image};
use super::client::{HttpSettings, NetworkPolicy, Prefetched, UpstreamClient, redacted};
use super::spec::BasicAuth;
use super::xml::{self, exception_text};
use crate::warp::warp_rgba;
use crate::{
    AskedValue, Crs, Found, Listed, Resampling, Source, SourceError, SourceInfo, WindowRequest,
};

/// WMS versions an upstream is asked in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, schemars::JsonSchema)]
pub enum WmsVersion {
    /// 1.1.1: `SRS`, x/y axis order always.
    #[serde(rename = "1.1.1")]
    V111,
    /// 1.3.0: `CRS`, the CRS's own axis order (latitude first for EPSG:4326).
    #[default]
    #[serde(rename = "1.3.0")]
    V130,
}

impl WmsVersion {
    fn as_str(self) -> &'static str {
        match self {
            WmsVersion::V111 => "1.1.1",
            WmsVersion::V130 => "1.3.0",
        }
    }
}

/// `source: { type: wms, ... }`.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WmsSourceSpec {
    /// The GetMap endpoint (`http://host/cgi-bin/mapserv?map=...`); query
    /// parameters in it are kept.
    pub url: String,
    /// Upstream layers, drawn in this order.
    pub layers: Vec<String>,
    /// Their styles (default: the default style of each).
    #[serde(default)]
    pub styles: Vec<String>,
    /// WMS version (default 1.3.0).
    #[serde(default)]
    pub version: WmsVersion,
    /// Image format asked for (default `image/png`).
    #[serde(default = "default_format")]
    pub format: String,
    /// Ask for a transparent background (default true).
    #[serde(default = "yes")]
    pub transparent: bool,
    /// More query parameters for every GetMap (vendor parameters, `TIME`).
    #[serde(default)]
    pub params: BTreeMap<String, String>,
    /// HTTP headers for every request.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// HTTP basic auth for every request.
    #[serde(default)]
    pub basic_auth: Option<BasicAuth>,
    /// CRSs to ask in (default: those the capabilities list).
    #[serde(default)]
    pub crs: Vec<String>,
    /// Resampling when warping into a CRS the upstream does not offer.
    #[serde(default)]
    pub resampling: Resampling,
    /// Timeouts, concurrency, retries and the circuit.
    #[serde(default)]
    pub http: HttpSettings,
}

fn default_format() -> String {
    "image/png".into()
}

fn yes() -> bool {
    true
}

/// An upstream WMS, checked at open through its capabilities.
#[derive(Debug)]
pub struct WmsSource {
    spec: WmsSourceSpec,
    url: reqwest::Url,
    client: Arc<UpstreamClient>,
    /// CRSs to ask in, as the upstream spells them and parsed, in
    /// preference order.
    offered: Vec<(String, Crs)>,
    info: SourceInfo,
    /// GetMaps started ahead of their reads ([`Source::prefetch`]), at
    /// most `2 * max_concurrent`.
    prefetched: Prefetched,
    /// The dimensions the first asked layer declares (lower-case name, its
    /// values as written: a list or `start/end/period`).
    dimensions: Vec<(String, String)>,
}

/// What the capabilities say about the asked layers.
#[derive(Debug, Default)]
struct Capabilities {
    crs: Vec<String>,
    lonlat: Option<BBox>,
    dimensions: Vec<(String, String)>,
}

impl WmsSource {
    /// Reads the upstream's capabilities (within the HTTP timeouts) and
    /// checks that the layers exist; the source's extent is theirs and its
    /// CRSs are those they offer.
    pub fn open(spec: &WmsSourceSpec, policy: NetworkPolicy) -> Result<WmsSource, SourceError> {
        let open_err = |message: String| SourceError::Open {
            path: spec.url.clone(),
            source: message.into(),
        };
        if spec.layers.is_empty() {
            return Err(open_err("`layers` names no upstream layer".into()));
        }
        if !spec.styles.is_empty() && spec.styles.len() != spec.layers.len() {
            return Err(open_err(format!(
                "`styles` has {} entries for {} layers (give one per layer, or none)",
                spec.styles.len(),
                spec.layers.len()
            )));
        }
        let url =
            reqwest::Url::parse(&spec.url).map_err(|e| open_err(format!("not a URL: {e}")))?;
        let auth = spec.basic_auth.as_ref();
        let client = UpstreamClient::shared(&url, &spec.http, policy, &spec.headers, auth)
            .map_err(open_err)?;
        let caps_url = with_params(
            &url,
            &[
                ("SERVICE", "WMS"),
                ("REQUEST", "GetCapabilities"),
                ("VERSION", spec.version.as_str()),
            ],
        );
        let fetched = client
            .get(&caps_url, None)
            .map_err(|e| open_err(format!("its capabilities could not be read: {e}")))?;
        if fetched.status != 200 {
            return Err(open_err(format!(
                "its capabilities ({}) answered {}",
                redacted(&caps_url),
                fetched.status
            )));
        }
        let text = String::from_utf8_lossy(&fetched.body);
        let caps = parse_capabilities(&text, &spec.layers).map_err(open_err)?;
        let names: Vec<String> = if spec.crs.is_empty() {
            caps.crs.clone()
        } else {
            spec.crs.clone()
        };
        // Ask in projected/geographic EPSG codes GDAL knows; skip the rest.
        // Only the first few and the common web CRSs are parsed: a list of
        // 100,000 codes once took a minute of CPU here.
        let offered: Vec<(String, Crs)> = names
            .iter()
            .enumerate()
            .filter(|(i, c)| {
                *i < MOST_OFFERED_PARSED || COMMON_CRS.iter().any(|k| k.eq_ignore_ascii_case(c))
            })
            .take(MOST_OFFERED_PARSED + COMMON_CRS.len())
            .filter_map(|(_, c)| Crs::parse(c).ok().map(|parsed| (c.clone(), parsed)))
            .collect();
        let Some((_, first)) = offered.first().cloned() else {
            return Err(open_err(format!(
                "the upstream offers no CRS tessera can use for {} (it lists: {})",
                spec.layers.join(","),
                if names.is_empty() {
                    "none".into()
                } else {
                    let listed: Vec<&str> = names.iter().take(20).map(String::as_str).collect();
                    let more = names.len().saturating_sub(listed.len());
                    if more > 0 {
                        format!("{} and {more} more", listed.join(", "))
                    } else {
                        listed.join(", ")
                    }
                }
            )));
        };
        let lonlat = caps.lonlat.unwrap_or(BBox {
            min_x: -180.0,
            min_y: -90.0,
            max_x: 180.0,
            max_y: 90.0,
        });
        let wgs84 = Crs::parse("EPSG:4326")?;
        let native_bounds = wgs84.transform_bbox(&lonlat, &first).unwrap_or(lonlat);
        let info = SourceInfo {
            band_count: 3,
            is_byte: true,
            native_crs: first,
            native_resolution: native_bounds.width() / 4096.0,
            native_bounds,
            lonlat_bounds: lonlat,
        };
        Ok(WmsSource {
            spec: spec.clone(),
            url,
            prefetched: Prefetched::new(2 * client.settings().max_concurrent),
            client,
            offered,
            info,
            dimensions: caps.dimensions,
        })
    }

    /// The values the upstream lists for its dimension `name` (any case),
    /// as written in its capabilities (`<Dimension>` in 1.3.0, `<Extent>`
    /// in 1.1.1, inherited from parent layers): a comma-separated list or
    /// `start/end/period`. `None` when its first asked layer has none.
    pub fn dimension_values(&self, name: &str) -> Option<&str> {
        self.dimensions
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The same upstream asked with `params` added to every GetMap
    /// (`TIME=2024-01-01`): the source of a layer at one dimension value.
    /// It shares this source's client (its connections and concurrency
    /// bound) and capabilities; its spec names the parameters, so its
    /// identity differs.
    #[must_use]
    pub fn with_params(&self, params: &[(String, String)]) -> WmsSource {
        let mut spec = self.spec.clone();
        for (k, v) in params {
            spec.params.insert(k.clone(), v.clone());
        }
        WmsSource {
            spec,
            url: self.url.clone(),
            client: self.client.clone(),
            offered: self.offered.clone(),
            info: self.info.clone(),
            prefetched: Prefetched::new(2 * self.client.settings().max_concurrent),
            dimensions: self.dimensions.clone(),
        }
    }

    /// The spec this source asks with.
    pub fn spec(&self) -> &WmsSourceSpec {
        &self.spec
    }

    /// The GetMap parameters of dimension `values`: `TIME`, `ELEVATION`,
    /// or `DIM_<NAME>` (WMS 1.3.0, annex C), each with its value as
    /// spelled.
    pub fn params_of(values: &[AskedValue]) -> Vec<(String, String)> {
        values
            .iter()
            .map(|v| {
                let name = match v.name.as_str() {
                    "time" | "elevation" => v.name.to_ascii_uppercase(),
                    other => format!("DIM_{}", other.to_ascii_uppercase()),
                };
                (name, v.spelled.clone())
            })
            .collect()
    }

    /// The GetMap URL for `bbox` in `crs` (named `crs_name` upstream) at
    /// `width` x `height`.
    fn get_map_url(
        &self,
        bbox: &BBox,
        (crs_name, crs): (&str, &Crs),
        width: u32,
        height: u32,
    ) -> reqwest::Url {
        let version = self.spec.version;
        // 1.3.0 follows the CRS's axis order (latitude first for EPSG:4326).
        let b = if version == WmsVersion::V130 && crs.authority_yx {
            [bbox.min_y, bbox.min_x, bbox.max_y, bbox.max_x]
        } else {
            [bbox.min_x, bbox.min_y, bbox.max_x, bbox.max_y]
        };
        let bbox_text = b.map(|v| format!("{v}")).join(",");
        let (w, h) = (width.to_string(), height.to_string());
        let layers = self.spec.layers.join(",");
        let styles = if self.spec.styles.is_empty() {
            ",".repeat(self.spec.layers.len() - 1)
        } else {
            self.spec.styles.join(",")
        };
        let crs_key = match version {
            WmsVersion::V111 => "SRS",
            WmsVersion::V130 => "CRS",
        };
        let mut params: Vec<(&str, &str)> = vec![
            ("SERVICE", "WMS"),
            ("REQUEST", "GetMap"),
            ("VERSION", version.as_str()),
            ("LAYERS", &layers),
            ("STYLES", &styles),
            (crs_key, crs_name),
            ("BBOX", &bbox_text),
            ("WIDTH", &w),
            ("HEIGHT", &h),
            ("FORMAT", &self.spec.format),
            (
                "TRANSPARENT",
                if self.spec.transparent {
                    "TRUE"
                } else {
                    "FALSE"
                },
            ),
        ];
        for (k, v) in &self.spec.params {
            params.push((k, v));
        }
        with_params(&self.url, &params)
    }

    /// One GetMap (`url`, of `width` x `height` pixels), checked and
    /// decoded; taken from the prefetched ones when it was started ahead.
    fn fetch_image(
        &self,
        url: &reqwest::Url,
        width: u32,
        height: u32,
        cancel: Option<&std::sync::atomic::AtomicBool>,
    ) -> Result<RgbaImage, SourceError> {
        let fetched = match self.prefetched.take(url) {
            Some(ahead) => ahead.wait(cancel),
            None => self.client.get(url, cancel),
        }
        .map_err(|e| fetch_error(url, e))?;
        refuse_non_image(url, &fetched, "an image")?;
        decode(&fetched.body, width, height).map_err(|e| SourceError::Upstream {
            url: redacted(url),
            message: e.to_string(),
        })
    }

    /// The GetMap for `request` when it is asked in the request's own CRS
    /// (the reads that [`Source::read_image`] answers).
    fn direct_url(&self, request: &WindowRequest<'_>) -> Option<reqwest::Url> {
        let (name, same) = self
            .offered
            .iter()
            .find(|(_, c)| c.same_coordinates(request.crs))?;
        Some(self.get_map_url(&request.bbox, (name, same), request.width, request.height))
    }
}

impl Source for WmsSource {
    fn info(&self) -> &SourceInfo {
        &self.info
    }

    /// The extent its capabilities write for the dimension.
    fn listed_values(&self, name: &str, _field: Option<&str>, _most: usize) -> Found<Listed> {
        self.dimension_values(name)
            .map(|text| Ok(Listed::Extent(text.to_string())))
    }

    fn takes_value(&self, _name: &str) -> bool {
        true
    }

    /// The same upstream asked with the values in every GetMap
    /// ([`WmsSource::params_of`]).
    fn at_values(&self, values: &[AskedValue]) -> Found<std::sync::Arc<dyn Source>> {
        Some(Ok(std::sync::Arc::new(
            self.with_params(&WmsSource::params_of(values)),
        )))
    }

    /// Starts the GetMap of a window asked in the upstream's own CRS, so
    /// that its read (after waiting for a render slot) finds it answered;
    /// the same URL is asked once. Warped windows are not fetched ahead.
    fn prefetch(&self, request: &WindowRequest<'_>) {
        if let Some(url) = self.direct_url(request) {
            self.prefetched.start(&self.client, url);
        }
    }

    fn read_image(&self, request: &WindowRequest<'_>) -> Option<Result<RgbaImage, SourceError>> {
        let url = self.direct_url(request)?;
        Some(self.fetch_image(&url, request.width, request.height, request.cancel))
    }

    fn read(&self, request: &WindowRequest<'_>) -> Result<Raster, SourceError> {
        if let Some(image) = self.read_image(request) {
            return Ok(Raster::from_rgba(&image?));
        }
        // Ask in the preferred CRS for the part of the window over the
        // source's extent, at about the same resolution, and warp.
        let (upstream_name, upstream_crs) = &self.offered[0];
        let read_err = |e: SourceError| SourceError::Read {
            path: self.spec.url.clone(),
            source: Box::new(e),
        };
        let Some(part) = self
            .extent_in(request.crs)
            .and_then(|extent| request.bbox.intersection(&extent))
        else {
            return Ok(crate::warp::empty_raster(
                &self.info,
                request.width,
                request.height,
            ));
        };
        let bbox = request
            .crs
            .transform_bbox(&part, upstream_crs)
            .map_err(read_err)?;
        let part_pixels = f64::from(request.width) * f64::from(request.height) * part.width()
            / request.bbox.width()
            * part.height()
            / request.bbox.height();
        let scale = (part_pixels / (bbox.width() * bbox.height())).sqrt();
        let width = ((bbox.width() * scale).round() as u32).clamp(1, 8192);
        let height = ((bbox.height() * scale).round() as u32).clamp(1, 8192);
        let url = self.get_map_url(&bbox, (upstream_name, upstream_crs), width, height);
        let image = self.fetch_image(&url, width, height, request.cancel)?;
        warp_rgba(&image, &bbox, upstream_crs, request, self.spec.resampling).map_err(|source| {
            SourceError::Read {
                path: self.spec.url.clone(),
                source,
            }
        })
    }
}

impl WmsSource {
    /// The source's extent in `crs` (latitudes cut at 85.06 degrees when
    /// the poles do not transform, as in Web Mercator); `None` when it
    /// cannot be transformed at all.
    fn extent_in(&self, crs: &Crs) -> Option<BBox> {
        let wgs84 = Crs::parse("OGC:CRS84").ok()?;
        let lonlat = self.info.lonlat_bounds;
        wgs84.transform_bbox(&lonlat, crs).ok().or_else(|| {
            let cut = BBox {
                min_y: lonlat.min_y.max(-85.06),
                max_y: lonlat.max_y.min(85.06),
                ..lonlat
            };
            wgs84.transform_bbox(&cut, crs).ok()
        })
    }
}

/// `url` with `params` added to its query (replacing any of the same name,
/// case-insensitively, as WMS parameter names are).
fn with_params(url: &reqwest::Url, params: &[(&str, &str)]) -> reqwest::Url {
    let mut out = url.clone();
    let kept: Vec<(String, String)> = url
        .query_pairs()
        .filter(|(k, _)| !params.iter().any(|(p, _)| p.eq_ignore_ascii_case(k)))
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    {
        let mut q = out.query_pairs_mut();
        q.clear();
        for (k, v) in &kept {
            q.append_pair(k, v);
        }
        for (k, v) in params {
            q.append_pair(k, v);
        }
    }
    out
}

/// Offered CRSs parsed at most, in the upstream's order (besides
/// [`COMMON_CRS`] wherever they are listed).
const MOST_OFFERED_PARSED: usize = 16;

/// The CRSs tiles are most often asked in, parsed wherever the upstream
/// lists them.
const COMMON_CRS: &[&str] = &["EPSG:3857", "EPSG:900913", "EPSG:4326", "CRS:84"];

/// The CRSs offered for all of `layers` (inherited from parent layers, as
/// WMS says) and the union of their geographic extents.
fn parse_capabilities(text: &str, layers: &[String]) -> Result<Capabilities, String> {
    let doc = xml::parse(text).map_err(|e| format!("its capabilities are {e}"))?;
    let root = doc.root_element();
    if root.tag_name().name() == "ServiceExceptionReport" {
        return Err(format!(
            "its capabilities are an exception: {}",
            exception_text(text.as_bytes())
        ));
    }
    let mut caps = Capabilities::default();
    let mut first = true;
    for wanted in layers {
        let Some(layer) = doc.descendants().find(|n| {
            n.tag_name().name() == "Layer"
                && n.children().any(|c| {
                    c.tag_name().name() == "Name" && c.text().map(str::trim) == Some(wanted)
                })
        }) else {
            let known: Vec<&str> = doc
                .descendants()
                .filter(|n| n.tag_name().name() == "Layer")
                .filter_map(|n| n.children().find(|c| c.tag_name().name() == "Name"))
                .filter_map(|n| n.text())
                .collect();
            return Err(format!(
                "it has no layer {wanted:?} (it has: {})",
                known.join(", ")
            ));
        };
        let mut crs: Vec<String> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let mut extent: Option<BBox> = None;
        for node in layer.ancestors().filter(|n| n.tag_name().name() == "Layer") {
            for c in node.children() {
                match c.tag_name().name() {
                    // 1.3.0 writes the values in <Dimension>, 1.1.1 in <Extent>;
                    // a child layer's own declaration wins over its parents'.
                    "Dimension" | "Extent" if first => {
                        let text = c.text().unwrap_or_default().trim();
                        if let Some(name) = c.attribute("name")
                            && !text.is_empty()
                            && !caps
                                .dimensions
                                .iter()
                                .any(|(n, _)| n.eq_ignore_ascii_case(name))
                        {
                            caps.dimensions
                                .push((name.to_ascii_lowercase(), text.to_string()));
                        }
                    }
                    "CRS" | "SRS" => {
                        for t in c.text().unwrap_or_default().split_whitespace() {
                            if seen.insert(t.to_ascii_uppercase()) {
                                crs.push(t.to_string());
                            }
                        }
                    }
                    "EX_GeographicBoundingBox" if extent.is_none() => {
                        let v = |name: &str| {
                            c.children()
                                .find(|n| n.tag_name().name() == name)
                                .and_then(|n| n.text())
                                .and_then(|t| t.trim().parse::<f64>().ok())
                        };
                        if let (Some(w), Some(e), Some(s), Some(n)) = (
                            v("westBoundLongitude"),
                            v("eastBoundLongitude"),
                            v("southBoundLatitude"),
                            v("northBoundLatitude"),
                        ) {
                            extent = bbox(w, s, e, n);
                        }
                    }
                    "LatLonBoundingBox" if extent.is_none() => {
                        let v = |name: &str| c.attribute(name).and_then(|t| t.parse::<f64>().ok());
                        if let (Some(w), Some(s), Some(e), Some(n)) =
                            (v("minx"), v("miny"), v("maxx"), v("maxy"))
                        {
                            extent = bbox(w, s, e, n);
                        }
                    }
                    _ => {}
                }
            }
        }
        if first {
            caps.crs = crs;
            first = false;
        } else {
            caps.crs.retain(|c| seen.contains(&c.to_ascii_uppercase()));
        }
        caps.lonlat = match (caps.lonlat, extent) {
            (Some(a), Some(b)) => Some(a.union(&b)),
            (a, b) => a.or(b),
        };
    }
    Ok(caps)
}

fn bbox(w: f64, s: f64, e: f64, n: f64) -> Option<BBox> {
    (w.is_finite() && s.is_finite() && e.is_finite() && n.is_finite() && w < e && s < n).then_some(
        BBox {
            min_x: w,
            min_y: s,
            max_x: e,
            max_y: n,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dimensions_are_asked_as_time_elevation_or_dim_parameters() {
        let asked =
            |name: &str| crate::AskedValue::one(name, crate::ValueKind::Text, None, "x", "X 1");
        assert_eq!(
            WmsSource::params_of(&[asked("time"), asked("elevation"), asked("run_time")]),
            [
                ("TIME".to_string(), "X 1".to_string()),
                ("ELEVATION".to_string(), "X 1".to_string()),
                ("DIM_RUN_TIME".to_string(), "X 1".to_string())
            ]
        );
    }
    use crate::upstream::xml::is_xml;

    const CAPS_130: &str = r#"<?xml version="1.0"?>
<WMS_Capabilities version="1.3.0" xmlns="http://www.opengis.net/wms">
 <Capability><Layer><Title>root</Title><CRS>EPSG:4326</CRS><CRS>EPSG:3857</CRS>
  <Layer><Name>relief</Name><Title>r</Title><CRS>EPSG:32631</CRS>
   <EX_GeographicBoundingBox><westBoundLongitude>-10</westBoundLongitude><eastBoundLongitude>20</eastBoundLongitude>
   <southBoundLatitude>30</southBoundLatitude><northBoundLatitude>60</northBoundLatitude></EX_GeographicBoundingBox></Layer>
  <Layer><Name>countries</Name><Title>c</Title></Layer>
 </Layer></Capability></WMS_Capabilities>"#;

    #[test]
    fn capabilities_give_the_first_layers_dimensions_its_own_before_inherited() {
        let caps = parse_capabilities(
            r#"<WMS_Capabilities version="1.3.0"><Capability><Layer><CRS>EPSG:4326</CRS>
              <Dimension name="elevation" units="m">0,100</Dimension>
              <Dimension name="time" units="ISO8601">2020-01-01</Dimension>
              <Layer><Name>a</Name><Dimension name="TIME" units="ISO8601">2024-01-01/2024-03-01/P1M</Dimension></Layer>
              <Layer><Name>b</Name><Extent name="run">r1,r2</Extent></Layer>
              </Layer></Capability></WMS_Capabilities>"#,
            &["a".into(), "b".into()],
        )
        .unwrap();
        assert_eq!(
            caps.dimensions,
            [
                ("time".to_string(), "2024-01-01/2024-03-01/P1M".to_string()),
                ("elevation".to_string(), "0,100".to_string()),
            ]
        );
    }

    #[test]
    fn capabilities_give_inherited_crss_and_extents_and_name_missing_layers() {
        let caps = parse_capabilities(CAPS_130, &["relief".into()]).unwrap();
        assert_eq!(caps.crs, ["EPSG:32631", "EPSG:4326", "EPSG:3857"]);
        let e = caps.lonlat.unwrap();
        assert_eq!(
            (e.min_x, e.min_y, e.max_x, e.max_y),
            (-10.0, 30.0, 20.0, 60.0)
        );
        // Two layers: only the CRSs both have.
        let both = parse_capabilities(CAPS_130, &["relief".into(), "countries".into()]).unwrap();
        assert_eq!(both.crs, ["EPSG:4326", "EPSG:3857"]);
        let e = parse_capabilities(CAPS_130, &["nope".into()]).unwrap_err();
        assert!(
            e.contains("no layer \"nope\"") && e.contains("relief, countries"),
            "{e}"
        );
        let e = parse_capabilities(
            "<ServiceExceptionReport><ServiceException code=\"X\">boom</ServiceException></ServiceExceptionReport>",
            &["relief".into()],
        )
        .unwrap_err();
        assert!(e.contains("X: boom"), "{e}");
    }

    #[test]
    fn query_parameters_replace_those_of_the_url_by_name() {
        let url = reqwest::Url::parse("http://h/mapserv?map=/x.map&version=1.1.1").unwrap();
        let out = with_params(&url, &[("VERSION", "1.3.0"), ("REQUEST", "GetMap")]);
        assert_eq!(
            out.query(),
            Some("map=%2Fx.map&VERSION=1.3.0&REQUEST=GetMap")
        );
    }

    #[test]
    fn exception_documents_are_recognised_and_summarised() {
        let body = br#"<?xml version='1.0'?><ServiceExceptionReport version="1.3.0" xmlns="http://www.opengis.net/ogc"><ServiceException code="LayerNotDefined">no such layer</ServiceException></ServiceExceptionReport>"#;
        assert!(is_xml("text/xml", body));
        assert!(
            is_xml("image/png", body),
            "an XML body is not an image whatever it says"
        );
        assert_eq!(exception_text(body), "\"LayerNotDefined: no such layer\"");
        assert!(!is_xml("image/png", b"\x89PNG"));
    }
}
