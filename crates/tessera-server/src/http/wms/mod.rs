//! WMS 1.1.1 and 1.3.0: the `/wms` endpoint. GetMap is parsed in
//! [`get_map`], capabilities are written from templates in
//! [`capabilities`]; GetFeatureInfo is answered in `feature_info`,
//! GetLegendGraphic in `legend`.

mod capabilities;
mod feature_info;
pub mod get_map;
pub(crate) mod legend;

use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::Response;

use super::error::{ApiError, Protocol};
use super::params::Kvp;
use super::reply::{base_url, image_response};
use super::state::Maps;
use super::transport::access::ServedLayers;
use crate::auth::Caller;
use crate::config::auth::Grant;
use crate::render::Demand;
use get_map::GetMap;

/// WMS versions spoken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// 1.1.1: x/y axis order, `SRS`.
    V111,
    /// 1.3.0: the CRS's axis order, `CRS`.
    V130,
}

impl Version {
    fn protocol(self) -> Protocol {
        match self {
            Version::V111 => Protocol::Wms111,
            Version::V130 => Protocol::Wms130,
        }
    }

    /// Version negotiation: anything below 1.3.0 gets 1.1.1.
    fn negotiate(text: Option<&str>) -> Version {
        match text {
            Some(v) if version_lt(v, "1.3.0") => Version::V111,
            _ => Version::V130,
        }
    }
}

fn version_lt(a: &str, b: &str) -> bool {
    let parse = |s: &str| {
        s.split('.')
            .map(|p| p.parse::<u32>().unwrap_or(0))
            .collect::<Vec<_>>()
    };
    parse(a) < parse(b)
}

/// Layers a feature info schema names at most.
const SCHEMA_MAX_LAYERS: usize = 64;

/// `GET /wms/schema/feature_info.xsd?LAYERS=a,b`: the XML Schema GML
/// feature info answers about those layers name in
/// `xsi:noNamespaceSchemaLocation` (built from the names alone: it says
/// nothing about a layer the caller may not read).
pub async fn feature_info_schema(RawQuery(query): RawQuery) -> Response {
    let layers: Vec<String> = form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .filter(|(k, _)| k.eq_ignore_ascii_case("layers"))
        .flat_map(|(_, v)| {
            v.split(',')
                .map(|n| n.chars().take(256).collect::<String>())
                .collect::<Vec<_>>()
        })
        .filter(|n| !n.is_empty())
        .take(SCHEMA_MAX_LAYERS)
        .collect();
    let names: Vec<&str> = layers.iter().map(String::as_str).collect();
    let mut response =
        axum::response::IntoResponse::into_response(feature_info::schema_document(&names));
    response.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("text/xml; charset=utf-8"),
    );
    response
}

/// `GET /wms?SERVICE=WMS&REQUEST=...`.
pub async fn kvp(
    State(state): State<Maps>,
    caller: Caller,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let query = query.unwrap_or_default();
    let kvp = Kvp::parse(&query, state.config.limits.max_query_bytes)
        .map_err(|e| ApiError::from(e).speaking(Protocol::Wms130))?;
    // WMTVER is the name WMS 1.0 used and 1.1.1 still accepts.
    let version_text = kvp.get("version").or_else(|| kvp.get("wmtver"));
    let version = Version::negotiate(version_text);
    let err = |e: ApiError| e.speaking(version.protocol());
    let request = kvp.service_request("WMS").map_err(|e| err(e.into()))?;
    let request = request.to_ascii_lowercase();
    // Every layer the request names and the service has, asked before
    // anything is read: maps and legends need `maps`, feature info
    // `feature_info`.
    let (grant, params): (Grant, &[&str]) = match request.as_str() {
        "getmap" | "map" => (Grant::Maps, &["layers"]),
        "getfeatureinfo" | "feature_info" => (Grant::FeatureInfo, &["layers", "query_layers"]),
        "getlegendgraphic" => (Grant::Maps, &["layer"]),
        _ => (Grant::Maps, &[]),
    };
    for name in params
        .iter()
        .filter_map(|p| kvp.get(p))
        .flat_map(|v| v.split(','))
        .filter(|n| state.registry.layer(n).is_some())
    {
        caller
            .may(name, grant)
            .map_err(|r| err(ApiError::from(r)))?;
    }
    match request.as_str() {
        "getcapabilities" | "capabilities" => {
            capabilities::response(&state.catalog(), &headers, version, &caller).map_err(err)
        }
        "getmap" | "map" => {
            // Version negotiation is for GetCapabilities only: a GetMap
            // names its version (WMS 1.3.0, 6.9.2; 1.1.1, 7.2.3.1).
            if version_text.is_none() {
                return Err(err(ApiError::bad_request(
                    "MissingParameterValue",
                    "VERSION is required in a GetMap (1.1.1 or 1.3.0)",
                )
                .at("VERSION")));
            }
            if let Some(v) = version_text
                && v != "1.1.1"
                && v != "1.3.0"
            {
                return Err(err(ApiError::bad_request(
                    "InvalidParameterValue",
                    format!("VERSION {v:?} is not supported; use 1.1.1 or 1.3.0"),
                )
                .at("VERSION")));
            }
            let map =
                GetMap::from_kvp(&kvp, version, &state.registry, &state.config.limits, &|n| {
                    caller.sees(n)
                })
                .map_err(err)?;
            let format = map.image.format;
            let names: Vec<&str> = map.image.layers.iter().map(|l| l.name.as_str()).collect();
            let served = ServedLayers::Named(names.join(",").into());
            caller
                .admit_render(u64::from(map.image.width) * u64::from(map.image.height))
                .map_err(|r| err(ApiError::from(r)))?;
            let bytes = state
                .renderer
                .render(map.image, Demand::Map)
                .await
                .map_err(|e| err(e.into()))?;
            let mut response = image_response(format, bytes);
            response.extensions_mut().insert(served);
            Ok(response)
        }
        "getfeatureinfo" | "feature_info" => {
            if version_text.is_none() {
                return Err(err(ApiError::bad_request(
                    "MissingParameterValue",
                    "VERSION is required in a GetFeatureInfo (1.1.1 or 1.3.0)",
                )
                .at("VERSION")));
            }
            feature_info::respond(
                &kvp,
                version,
                &state.registry,
                &state.config.limits,
                &state.renderer,
                &|n| caller.sees(n),
                &format!(
                    "{}/wms/schema/feature_info.xsd",
                    base_url(&state.config, &headers)
                ),
            )
            .await
            .map_err(err)
        }
        "getlegendgraphic" => {
            legend::respond(&kvp, &state.registry, &|n| caller.sees(n)).map_err(err)
        }
        other => Err(err(ApiError::bad_request(
            "OperationNotSupported",
            format!(
                "REQUEST {other:?} is not supported; use GetCapabilities, GetMap, \
                 GetFeatureInfo or GetLegendGraphic"
            ),
        )
        .at("REQUEST"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_below_1_3_0_negotiate_to_1_1_1() {
        assert_eq!(Version::negotiate(Some("1.1.1")), Version::V111);
        assert_eq!(Version::negotiate(Some("1.1.0")), Version::V111);
        assert_eq!(Version::negotiate(Some("1.3.0")), Version::V130);
        assert_eq!(Version::negotiate(Some("2.0")), Version::V130);
        assert_eq!(Version::negotiate(None), Version::V130);
    }
}
