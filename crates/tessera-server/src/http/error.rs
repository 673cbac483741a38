//! The one place where errors become HTTP responses: plain text for tile
//! URLs, OGC exception reports for WMS (per version) and WMTS.
//!
//! 4xx replies say precisely what was wrong (with the offending value
//! escaped) and are not logged as errors; 5xx replies are generic to the
//! client and detailed in the log.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::params::KvpError;
use super::xml::escape;
use crate::render::RenderError;
use crate::tile_cache::TileError;
use tessera_source::SourceError;

/// Which protocol's error format to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// `text/plain` (XYZ/TMS tiles, TileJSON, pages).
    Plain,
    /// WMS 1.1.1 `application/vnd.ogc.se_xml`.
    Wms111,
    /// WMS 1.3.0 `text/xml` in the `http://www.opengis.net/ogc` namespace.
    Wms130,
    /// WMTS 1.0.0 OWS 1.1 exception report.
    Wmts,
    /// OGC API: RFC 7807 problem details (`application/problem+json`).
    Problem,
}

/// The manual's pages errors name ([`ApiError::documented`]).
pub mod docs {
    /// Keys, tokens, grants and rates.
    pub const KEYS: &str = "security#keys-and-tokens";
    /// What one request may cost, and the waits that end in a 503.
    pub const LIMITS: &str = "security#limits";
    /// Nodes that share a store: leases.
    pub const CLUSTER: &str = "caches#several-nodes-on-one-bucket";
    /// Sources, upstream services among them.
    pub const UPSTREAMS: &str = "sources";
}

/// An error on its way to the client.
#[derive(Debug)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// OGC exception code (`LayerNotDefined`, `InvalidParameterValue`, ...).
    pub code: &'static str,
    /// Message for the client.
    pub message: String,
    /// The parameter at fault, where known.
    pub locator: Option<String>,
    /// Response format.
    pub protocol: Protocol,
    /// Seconds after which a retry may succeed (sets Retry-After).
    pub retry_after: Option<u32>,
    /// The manual's page (and heading) on what went wrong, as
    /// `security#limits` (`/book/security.html#limits`): the message ends
    /// with `(docs: security#limits)`.
    pub docs: Option<&'static str>,
}

impl ApiError {
    /// A 400 with an OGC code.
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// A 404 with an OGC code.
    pub fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, message)
    }

    /// An error with any status.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            locator: None,
            protocol: Protocol::Plain,
            retry_after: None,
            docs: None,
        }
    }

    /// Names the manual's page on this error (`page` or `page#heading`,
    /// which `tests/e2e/test_book.py` checks exist).
    #[must_use]
    pub fn documented(mut self, page: &'static str) -> Self {
        self.docs = Some(page);
        self
    }

    /// Sets the parameter at fault.
    #[must_use]
    pub fn at(mut self, locator: &str) -> Self {
        self.locator = Some(locator.to_string());
        self
    }

    /// Sets the response format.
    #[must_use]
    pub fn speaking(mut self, protocol: Protocol) -> Self {
        self.protocol = protocol;
        self
    }

    /// A 502 for a failed call to a storage service: generic to the
    /// client, detailed in the log.
    pub fn upstream(what: &str, detail: &(dyn std::error::Error + 'static)) -> Self {
        tracing::error!(error = detail, "{what} failed");
        Self::new(
            StatusCode::BAD_GATEWAY,
            "NoApplicableCode",
            format!("{what} failed; the server log has the details"),
        )
    }

    /// A 500: generic to the client, detailed in the log.
    pub fn internal(detail: &(dyn std::error::Error + 'static)) -> Self {
        tracing::error!(error = detail, "request failed");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "NoApplicableCode",
            "internal error while rendering; the server log has the details",
        )
    }
}

impl From<crate::auth::Refusal> for ApiError {
    fn from(refusal: crate::auth::Refusal) -> Self {
        use crate::auth::Refusal;
        match refusal {
            Refusal::Unauthenticated(why) => {
                ApiError::new(StatusCode::UNAUTHORIZED, "Unauthorized", why).documented(docs::KEYS)
            }
            Refusal::Forbidden(why) => {
                ApiError::new(StatusCode::FORBIDDEN, "Forbidden", why).documented(docs::KEYS)
            }
            Refusal::RateLimited(wait) => {
                let mut err = ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "TooManyRequests",
                    "past this credential's rate limit; try again later",
                )
                .documented(docs::KEYS);
                err.retry_after = Some(u32::try_from(wait.as_secs() + 1).unwrap_or(u32::MAX));
                err
            }
        }
    }
}

impl From<TileError> for ApiError {
    fn from(e: TileError) -> Self {
        match e {
            TileError::Render(e) => e.into(),
            TileError::LockTimeout { kind, after } => {
                tracing::warn!(kind, timeout = ?after, "lock wait timed out");
                let mut err = ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "NoApplicableCode",
                    format!(
                        "this tile is being rendered by another request and it did not finish within {}s; try again later",
                        after.as_secs_f64()
                    ),
                )
                .documented(docs::LIMITS);
                err.retry_after = Some(5);
                err
            }
            TileError::LeaseWait { holder, after } => {
                tracing::warn!(%holder, timeout = ?after, "waited for another node's metatile too long");
                let mut err = ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "NoApplicableCode",
                    format!(
                        "this tile is being rendered by another node and it did not finish within {}s; try again later",
                        after.as_secs_f64()
                    ),
                )
                .documented(docs::CLUSTER);
                err.retry_after = Some(5);
                err
            }
            TileError::Lease(e) => {
                tracing::warn!(
                    error = &e as &dyn std::error::Error,
                    "cannot ask for a metatile's lease"
                );
                let mut err = ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "NoApplicableCode",
                    "the cache's store cannot coordinate renders right now; try again later",
                )
                .documented(docs::CLUSTER);
                err.retry_after = Some(5);
                err
            }
            other => ApiError::internal(&other),
        }
    }
}

impl From<RenderError> for ApiError {
    fn from(e: RenderError) -> Self {
        match e {
            RenderError::Timeout(d) => {
                tracing::warn!(timeout = ?d, "render timed out");
                let mut err = ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "NoApplicableCode",
                    format!(
                        "the render did not finish within {}s; try again later",
                        d.as_secs_f64()
                    ),
                )
                .documented(docs::LIMITS);
                err.retry_after = Some(5);
                err
            }
            RenderError::Cancelled | RenderError::Source(SourceError::Cancelled) => {
                let mut err = ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "NoApplicableCode",
                    "the render was stopped before it finished; try again later",
                );
                err.retry_after = Some(5);
                err
            }
            RenderError::Source(SourceError::TooLarge { width, height }) => ApiError::bad_request(
                "InvalidParameterValue",
                format!("an image of {width}x{height} pixels is too large"),
            )
            .documented(docs::LIMITS),
            RenderError::Source(ref e) if e.asks_too_much() => {
                ApiError::bad_request("InvalidParameterValue", e.to_string())
                    .documented(docs::LIMITS)
            }
            // What an upstream said, and where it is (a URL, a database's
            // host, user and name), stays in the log: a client learns only
            // that the layer's upstream failed.
            RenderError::Source(e @ SourceError::Upstream { .. }) => {
                tracing::warn!(error = %e, "upstream request failed");
                ApiError::new(
                    StatusCode::BAD_GATEWAY,
                    "NoApplicableCode",
                    "the layer's upstream service failed; the server log has the details",
                )
                .documented(docs::UPSTREAMS)
            }
            RenderError::Source(
                ref e @ SourceError::UpstreamUnavailable {
                    retry_after_secs, ..
                },
            ) => {
                tracing::warn!(error = %e, "upstream unavailable");
                let mut err = ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "NoApplicableCode",
                    format!(
                        "the layer's upstream service is unavailable after repeated failures; \
                         try again in {retry_after_secs} s"
                    ),
                )
                .documented(docs::UPSTREAMS);
                err.retry_after = Some(u32::try_from(retry_after_secs).unwrap_or(u32::MAX));
                err
            }
            other => ApiError::internal(&other),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let text = match self.docs {
            Some(page) => format!("{} (docs: {page})", self.message),
            None => self.message.clone(),
        };
        let message = escape(&text);
        // The WMS 1.1.1 exception DTD gives ServiceException a `code` and
        // nothing else; 1.3.0 and OWS add `locator`.
        let locator = self
            .locator
            .as_deref()
            .filter(|_| self.protocol != Protocol::Wms111)
            .map(|l| format!(" locator=\"{}\"", escape(l)))
            .unwrap_or_default();
        let (content_type, body) = match self.protocol {
            Protocol::Plain => ("text/plain; charset=utf-8", format!("{text}\n")),
            Protocol::Wms111 | Protocol::Wms130 => {
                let (content_type, doctype, root) = if self.protocol == Protocol::Wms111 {
                    (
                        "application/vnd.ogc.se_xml; charset=utf-8",
                        "<!DOCTYPE ServiceExceptionReport SYSTEM \
                         \"http://schemas.opengis.net/wms/1.1.1/WMS_exception_1_1_1.dtd\">\n",
                        "version=\"1.1.1\"",
                    )
                } else {
                    (
                        "text/xml; charset=utf-8",
                        "",
                        "version=\"1.3.0\" xmlns=\"http://www.opengis.net/ogc\" \
                         xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" \
                         xsi:schemaLocation=\"http://www.opengis.net/ogc http://schemas.opengis.net/wms/1.3.0/exceptions_1_3_0.xsd\"",
                    )
                };
                (
                    content_type,
                    format!(
                        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n{doctype}\
                         <ServiceExceptionReport {root}>\n  \
                         <ServiceException code=\"{}\"{locator}>{message}</ServiceException>\n\
                         </ServiceExceptionReport>\n",
                        self.code
                    ),
                )
            }
            Protocol::Problem => (
                "application/problem+json",
                serde_json::json!({
                    "type": "about:blank",
                    "title": self.status.canonical_reason().unwrap_or("Error"),
                    "status": self.status.as_u16(),
                    "detail": text,
                    // The OGC exception code the other protocols send.
                    "code": self.code,
                })
                .to_string(),
            ),
            Protocol::Wmts => (
                "application/xml; charset=utf-8",
                format!(
                    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
                     <ows:ExceptionReport xmlns:ows=\"http://www.opengis.net/ows/1.1\" version=\"1.0.0\" xml:lang=\"en\">\n  \
                     <ows:Exception exceptionCode=\"{}\"{locator}>\n    \
                     <ows:ExceptionText>{message}</ows:ExceptionText>\n  </ows:Exception>\n\
                     </ows:ExceptionReport>\n",
                    self.code
                ),
            ),
        };
        let mut response = (self.status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        headers.insert(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        );
        if let Some(secs) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            headers.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"tessera\""),
            );
        }
        response
    }
}

impl ApiError {
    /// A dimension value refused: `InvalidDimensionValue` (400), or
    /// `MissingDimensionValue` when the layer has no value at all, located
    /// at the dimension's parameter.
    pub fn from_dimension(e: &crate::dimension::DimensionError) -> ApiError {
        use crate::dimension::DimensionError;
        if let DimensionError::Unavailable { .. } = e {
            let mut error = Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "NoApplicableCode",
                e.to_string(),
            );
            error.retry_after = Some(5);
            return error;
        }
        let (code, name) = match e {
            DimensionError::Empty { name } => ("MissingDimensionValue", name),
            DimensionError::Malformed { name, .. }
            | DimensionError::Unknown { name, .. }
            | DimensionError::NotOne { name, .. }
            | DimensionError::Unavailable { name, .. } => ("InvalidDimensionValue", name),
        };
        let at = match name.as_str() {
            "time" | "elevation" => name.to_ascii_uppercase(),
            other => format!("DIM_{}", other.to_ascii_uppercase()),
        };
        ApiError::bad_request(code, e.to_string())
            .at(&at)
            .documented("dimensions")
    }
}

impl From<KvpError> for ApiError {
    fn from(e: KvpError) -> Self {
        match e {
            KvpError::TooLong(n) => ApiError::bad_request(
                "InvalidParameterValue",
                format!("query string longer than {n} bytes"),
            )
            .documented(docs::LIMITS),
            KvpError::Conflict(name) => ApiError::bad_request(
                "InvalidParameterValue",
                format!("{name} is given twice with different values"),
            )
            .at(&name),
            KvpError::WrongService { given, expected } => ApiError::bad_request(
                "InvalidParameterValue",
                format!("SERVICE {given:?} is not {expected}"),
            )
            .at("SERVICE"),
            KvpError::Missing(name) => {
                ApiError::bad_request("MissingParameterValue", format!("{name} is required"))
                    .at(name)
            }
        }
    }
}
