//! Cross-origin access (CORS): the headers that let a web map on another
//! origin fetch tiles and use them as WebGL textures, from `server.cors`.
//!
//! Read endpoints allow `GET`/`HEAD` from the configured origins (every
//! origin by default); the admin endpoints get no CORS headers unless
//! `cors.admin` is set. A preflight (`OPTIONS` with
//! `Access-Control-Request-Method`) is answered `204 No Content`.

use std::time::Duration;

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use tower_http::cors::{AllowHeaders, AllowOrigin, CorsLayer};

use crate::config::CorsSettings;

/// Response headers a page may read besides the safelisted ones.
const EXPOSED: [HeaderName; 4] = [
    header::ETAG,
    header::LAST_MODIFIED,
    header::CONTENT_LENGTH,
    HeaderName::from_static("x-cache"),
];

/// The layer for the read endpoints, or `None` when CORS is off.
pub fn read_layer(settings: &CorsSettings) -> Option<CorsLayer> {
    settings
        .enabled
        .then(|| layer(settings, &[Method::GET, Method::HEAD, Method::OPTIONS]))
}

/// The layer for the admin endpoints: `None` unless `cors.admin` is set.
pub fn admin_layer(settings: &CorsSettings) -> Option<CorsLayer> {
    (settings.enabled && settings.admin).then(|| {
        layer(
            settings,
            &[
                Method::GET,
                Method::HEAD,
                Method::OPTIONS,
                Method::PUT,
                Method::POST,
                Method::DELETE,
            ],
        )
    })
}

fn layer(settings: &CorsSettings, methods: &[Method]) -> CorsLayer {
    let base = CorsLayer::new()
        .allow_methods(methods.to_vec())
        .allow_headers(AllowHeaders::mirror_request())
        .expose_headers(EXPOSED)
        .max_age(Duration::from_secs(settings.max_age_secs));
    if settings.any_origin() {
        // The answer does not depend on the Origin: no Vary, so shared
        // caches keep one copy.
        base.allow_origin(AllowOrigin::any()).vary([])
    } else {
        // Origins were checked when the config was loaded.
        let origins: Vec<HeaderValue> = settings
            .origins
            .iter()
            .filter_map(|o| HeaderValue::from_str(o).ok())
            .collect();
        base.allow_origin(AllowOrigin::list(origins))
    }
}

/// The headers the read layer adds to a simple (non-preflight) read, when
/// they do not depend on the request: none when CORS is off, the
/// allowed and exposed headers when every origin may read. `None` when
/// they depend on the `Origin` (a list of origins): only the layer
/// answers those.
pub fn fixed_read_headers(settings: &CorsSettings) -> Option<Vec<(HeaderName, HeaderValue)>> {
    if !settings.enabled {
        return Some(Vec::new());
    }
    if !settings.any_origin() {
        return None;
    }
    let exposed = EXPOSED
        .iter()
        .map(HeaderName::as_str)
        .collect::<Vec<_>>()
        .join(",");
    Some(vec![
        (
            header::ACCESS_CONTROL_ALLOW_ORIGIN,
            HeaderValue::from_static("*"),
        ),
        (
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_str(&exposed).ok()?,
        ),
    ])
}

/// Turns the CORS layer's `200` answer to a preflight into `204 No
/// Content`, the status the Fetch standard's examples use and clients
/// expect of a body-less answer.
pub async fn preflight_no_content(request: Request, next: Next) -> Response {
    let preflight = request.method() == Method::OPTIONS
        && request
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    let mut response = next.run(request).await;
    if preflight && response.status() == StatusCode::OK {
        *response.status_mut() = StatusCode::NO_CONTENT;
    }
    response
}
