//! What both upstream sources (WMS and tile services) share: how an
//! upstream's answer becomes pixels or an error.

use super::client::{FetchError, Fetched, redacted};
use super::xml::{exception_text, is_xml};
use crate::SourceError;
use crate::excerpt;

/// The source error an upstream request's failure means: 503 with
/// Retry-After while the circuit is open, 502 otherwise.
pub(crate) fn fetch_error(url: &reqwest::Url, e: FetchError) -> SourceError {
    match e {
        FetchError::Cancelled => SourceError::Cancelled,
        FetchError::CircuitOpen {
            retry_after_secs, ..
        } => SourceError::UpstreamUnavailable {
            url: redacted(url),
            message: e.to_string(),
            retry_after_secs,
        },
        other => SourceError::Upstream {
            url: redacted(url),
            message: other.to_string(),
        },
    }
}

/// Refuses an answer that is not the image asked for (`what`, for the
/// message): an exception document whatever its status, or a status other
/// than 200.
pub(crate) fn refuse_non_image(
    url: &reqwest::Url,
    fetched: &Fetched,
    what: &str,
) -> Result<(), SourceError> {
    let message = if is_xml(&fetched.content_type, &fetched.body) {
        format!(
            "it answered {} with an exception instead of {what}: {}",
            fetched.status,
            exception_text(&fetched.body)
        )
    } else if fetched.status != 200 {
        format!("it answered {}: {}", fetched.status, excerpt(&fetched.body))
    } else {
        return Ok(());
    };
    Err(SourceError::Upstream {
        url: redacted(url),
        message,
    })
}
