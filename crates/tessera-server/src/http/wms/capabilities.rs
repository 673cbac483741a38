//! WMS GetCapabilities, 1.3.0 and 1.1.1, written from the templates
//! `templates/wms_1_3_0.xml` and `templates/wms_1_1_1.xml`.

use axum::http::HeaderMap;
use axum::response::Response;
use serde::Serialize;
use tessera_grid::{BBox, TileFormat, WEB_MERCATOR_QUAD};

use super::Version;
use super::legend::ListedStyle;
use crate::auth::Caller;
use crate::config::auth::Grant;
use crate::config::{DataUrl, MetadataUrl, ServiceMetadata};
use crate::http::error::ApiError;
use crate::http::reply::base_url;
use crate::http::state::Catalog;
use crate::http::templates::{self, Extent};
use crate::model::Layer;

/// What both versions' templates show.
#[derive(Debug, Serialize)]
struct Capabilities {
    title: String,
    service: ServiceMetadata,
    base: String,
    /// The caller's query credential and `&` (`key=...&`), or empty: the
    /// links carry it.
    cred: String,
    max_layers: usize,
    max_width: u32,
    max_height: u32,
    formats: Vec<&'static str>,
    info_formats: &'static [&'static str],
    crs_list: Vec<String>,
    world: Extent,
    layers: Vec<WmsLayer>,
}

#[derive(Debug, Serialize)]
struct WmsLayer {
    name: String,
    title: String,
    #[serde(rename = "abstract")]
    description: Option<String>,
    keywords: Vec<String>,
    lonlat: Extent,
    mercator: Option<Extent>,
    metadata_url: Option<MetadataUrl>,
    data_url: Option<DataUrl>,
    styles: Vec<ListedStyle>,
    dimensions: Vec<WmsDimension>,
}

/// A layer's dimension as capabilities list it.
#[derive(Debug, Serialize)]
pub(crate) struct WmsDimension {
    name: String,
    units: &'static str,
    default: Option<String>,
    /// `1` when a missing value snaps to the nearest, else `0`.
    nearest: u8,
    /// The values, comma-separated.
    values: String,
}

impl WmsDimension {
    /// The dimensions of `layer`.
    pub(crate) fn of(layer: &Layer) -> Vec<WmsDimension> {
        layer
            .dimensions
            .iter()
            .map(|d| WmsDimension {
                name: d.name.clone(),
                units: d.kind.units(),
                default: d.default_value().ok(),
                nearest: u8::from(d.nearest),
                values: d.listed().join(","),
            })
            .collect()
    }
}

/// The capabilities document of `version`.
pub fn response(
    state: &Catalog,
    headers: &HeaderMap,
    version: Version,
    caller: &Caller,
) -> Result<Response, ApiError> {
    let limits = &state.config.limits;
    let mut crs_list: Vec<String> = match version {
        Version::V130 => vec!["CRS:84".into(), "EPSG:4326".into(), "EPSG:3857".into()],
        Version::V111 => vec!["EPSG:4326".into(), "EPSG:3857".into()],
    };
    // The layers the caller may read maps of, and no other.
    let layers: Vec<_> = state
        .registry
        .layers()
        .into_iter()
        .filter(|l| caller.may(&l.name, Grant::Maps).is_ok())
        .collect();
    for layer in &layers {
        let native = &layer.source.info().native_crs.id;
        for c in layer.wms_crs.iter().chain(std::iter::once(native)) {
            if c.starts_with("EPSG:") && !crs_list.contains(c) {
                crs_list.push(c.clone());
            }
        }
    }
    // A layer's configuration, for what only it says (its URLs).
    let configured = |layer: &Layer| state.config.layers.iter().find(|l| l.name == layer.name);
    let doc = Capabilities {
        title: state.config.server.title.clone(),
        service: state.config.service.clone(),
        base: base_url(&state.config, headers),
        cred: match caller.link_query() {
            q if q.is_empty() => q,
            q => format!("{q}&"),
        },
        max_layers: limits.wms_max_layers,
        max_width: limits.wms_max_width,
        max_height: limits.wms_max_height,
        formats: TileFormat::IMAGES
            .iter()
            .filter(|f| **f != TileFormat::Mixed)
            .map(|f| f.format_name())
            .collect(),
        info_formats: super::feature_info::formats(),
        crs_list,
        world: Extent::from(&BBox {
            min_x: -180.0,
            min_y: -90.0,
            max_x: 180.0,
            max_y: 90.0,
        }),
        layers: layers
            .iter()
            .map(|layer| WmsLayer {
                name: layer.name.clone(),
                title: layer.title.clone(),
                description: layer.description.clone(),
                keywords: layer.keywords.clone(),
                lonlat: Extent::lonlat(&layer.source.info().lonlat_bounds),
                mercator: layer
                    .extents
                    .get(WEB_MERCATOR_QUAD)
                    .copied()
                    .flatten()
                    .map(|b| Extent::from(&b)),
                metadata_url: configured(layer)
                    .and_then(|l| l.metadata_url.clone())
                    .and_then(|m| metadata_url_in(version, m)),
                data_url: configured(layer).and_then(|l| l.data_url.clone()),
                styles: ListedStyle::of(layer),
                dimensions: WmsDimension::of(layer),
            })
            .collect(),
    };
    let (template, content_type) = match version {
        Version::V130 => (templates::WMS_1_3_0, "text/xml; charset=utf-8"),
        Version::V111 => (
            templates::WMS_1_1_1,
            "application/vnd.ogc.wms_xml; charset=utf-8",
        ),
    };
    templates::xml_response(template, &doc, content_type)
}

/// A layer's `MetadataURL` as `version` allows it: 1.3.0 takes any type;
/// 1.1.1 knows only `TC211` (ISO 19115, as `ISO19115:2003`, `ISO19139` or
/// `TC211`) and `FGDC` (as `FGDC` or `FGDC:1998`), and leaves others out.
fn metadata_url_in(version: Version, url: MetadataUrl) -> Option<MetadataUrl> {
    match version {
        Version::V130 => Some(url),
        Version::V111 => {
            let kind = url.kind.to_ascii_uppercase();
            let named = if kind.starts_with("ISO19115") || kind == "ISO19139" || kind == "TC211" {
                "TC211"
            } else if kind.starts_with("FGDC") {
                "FGDC"
            } else {
                return None;
            };
            Some(MetadataUrl {
                kind: named.into(),
                ..url
            })
        }
    }
}
