//! Access control at the edge of the read endpoints: every request's
//! caller identified from its credentials ([`crate::auth`]) before any
//! handler runs (a credential that is not valid is a 401, a caller past its
//! rate a 429), and handed to the handlers as a [`Caller`] extension; they
//! ask [`Caller::may`] for each layer before looking anything up. The
//! answer names the caller for the access log and counts it in the
//! metrics, hits apart from misses.

use std::sync::Arc;

use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use crate::auth::{Access, Caller, Refusal};
use crate::metrics::Metrics;

/// The guard's state: the access rules (none: everything open) and the
/// metrics it counts callers in.
#[derive(Debug, Clone)]
pub struct Guard {
    /// The rules of the `auth:` section.
    pub access: Option<Arc<Access>>,
    /// Where callers are counted.
    pub metrics: Arc<Metrics>,
}

/// The address of the client a request came from (set by the listener):
/// what credentials that are not valid are counted against.
#[derive(Debug, Clone, Copy)]
pub struct ClientAddr(pub std::net::IpAddr);

/// The caller's id, on a response: the access log writes it.
#[derive(Debug, Clone)]
pub struct CallerId(pub String);

/// Identifies the caller of `request`, refuses it when its credential is
/// not valid or it is past its rate, and passes it on to the handler.
pub async fn identify(State(guard): State<Guard>, mut request: Request, next: Next) -> Response {
    let Some(access) = &guard.access else {
        request.extensions_mut().insert(Caller::open());
        return next.run(request).await;
    };
    // An address past its budget of credentials that were not valid has
    // none checked until it is back.
    let address = request.extensions().get::<ClientAddr>().map(|a| a.0);
    if let Some(address) = address
        && let Err(wait) = access.admit_address(address)
        && access.has_credential(request.headers(), request.uri().query())
    {
        guard.metrics.caller_request("anonymous", "limited");
        return ApiError::from(Refusal::RateLimited(wait)).into_response();
    }
    let caller = match access.identify(request.headers(), request.uri().query()) {
        Ok(caller) => caller,
        Err(refusal) => {
            if let Some(address) = address {
                access.count_failure(address);
            }
            guard
                .metrics
                .caller_request("anonymous", outcome_of(&refusal));
            return ApiError::from(refusal).into_response();
        }
    };
    if let Err(refusal) = caller.admit() {
        guard
            .metrics
            .caller_request(caller.metric_name(), outcome_of(&refusal));
        let mut response = ApiError::from(refusal).into_response();
        response
            .extensions_mut()
            .insert(CallerId(caller.id().to_string()));
        return response;
    }
    request.extensions_mut().insert(caller.clone());
    let mut response = next.run(request).await;
    if caller.answer_depends_on_caller() {
        keep_from_shared_caches(response.headers_mut());
    }
    count(&guard.metrics, &caller, &response);
    response
        .extensions_mut()
        .insert(CallerId(caller.id().to_string()));
    response
}

/// Marks an answer that depends on its caller (a protected layer's data,
/// a refusal, a document filtered for the caller) so that no shared cache
/// (a CDN, nginx's `proxy_cache`) keeps it for another caller: a
/// `Cache-Control` it has turns `public` into `private` (a tile keeps its
/// `max-age` for the caller's own cache); an image without one becomes
/// `private` (the caller's browser may keep it), any other answer (a
/// document, a refusal) `private, no-store`; `Vary` gains
/// `Authorization, X-API-Key`. Idempotent.
pub fn keep_from_shared_caches(headers: &mut HeaderMap) {
    let image = headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"image/"));
    let control = match headers
        .get(header::CACHE_CONTROL)
        .and_then(|v| v.to_str().ok())
    {
        None if image => Some(HeaderValue::from_static("private")),
        None => Some(HeaderValue::from_static("private, no-store")),
        Some(v) if v.split(',').any(|d| d.trim() == "private") => None,
        Some(v) => {
            let directives: Vec<&str> = v
                .split(',')
                .map(str::trim)
                .filter(|d| !d.is_empty() && *d != "public")
                .collect();
            let value = if directives.is_empty() {
                "private".to_string()
            } else {
                format!("private, {}", directives.join(", "))
            };
            HeaderValue::from_str(&value).ok()
        }
    };
    if let Some(control) = control {
        headers.insert(header::CACHE_CONTROL, control);
    }
    crate::http::reply::vary_on(headers, "authorization", CALLER_HEADERS);
}

/// The request headers a caller-dependent answer varies on.
const CALLER_HEADERS: HeaderValue = HeaderValue::from_static("Authorization, X-API-Key");

/// Counts `response` under its caller: a tile hit or miss, a refusal by
/// the handler, or another answer.
pub fn count(metrics: &Metrics, caller: &Caller, response: &Response) {
    let outcome = match response.status().as_u16() {
        401 => "unauthorized",
        403 => "forbidden",
        429 => "limited",
        _ => match response
            .headers()
            .get("x-cache")
            .map(axum::http::HeaderValue::as_bytes)
        {
            Some(b"HIT") => "hit",
            Some(b"MISS") => "miss",
            _ => "other",
        },
    };
    metrics.caller_request(caller.metric_name(), outcome);
}

fn outcome_of(refusal: &Refusal) -> &'static str {
    match refusal {
        Refusal::Unauthenticated(_) => "unauthorized",
        Refusal::Forbidden(_) => "forbidden",
        Refusal::RateLimited(_) => "limited",
    }
}

/// The caller the guard identified. A handler asking for it on a route
/// the guard does not cover gets a 500, never an open caller: access
/// control fails closed.
impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        parts.extensions.get::<Caller>().cloned().ok_or_else(|| {
            tracing::error!(path = %parts.uri.path(), "a handler asked for the caller on a route the guard does not cover");
            ApiError::new(
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                "NoApplicableCode",
                "internal error; the server log has the details",
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marked(pairs: &[(header::HeaderName, &'static str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(name, HeaderValue::from_static(value));
        }
        keep_from_shared_caches(&mut headers);
        keep_from_shared_caches(&mut headers);
        headers
    }

    #[test]
    fn caller_dependent_answers_are_private_and_vary_on_the_credential() {
        let tile = marked(&[
            (header::CACHE_CONTROL, "public, max-age=3600"),
            (header::VARY, "accept-encoding"),
        ]);
        assert_eq!(tile[header::CACHE_CONTROL], "private, max-age=3600");
        let vary: Vec<_> = tile.get_all(header::VARY).iter().collect();
        assert_eq!(vary, ["accept-encoding", "Authorization, X-API-Key"]);
        let map = marked(&[(header::CONTENT_TYPE, "image/png")]);
        assert_eq!(map[header::CACHE_CONTROL], "private");
        let document = marked(&[(header::CONTENT_TYPE, "application/json")]);
        assert_eq!(document[header::CACHE_CONTROL], "private, no-store");
        assert_eq!(document.get_all(header::VARY).iter().count(), 1);
        let public_only = marked(&[(header::CACHE_CONTROL, "public")]);
        assert_eq!(public_only[header::CACHE_CONTROL], "private");
    }
}
