//! The crate's error: the kinds of failure every backend shares, and each
//! backend's own error gathered under one variant.

mod gdal;
#[cfg(feature = "vector")]
mod vector;

pub use gdal::GdalError;
#[cfg(feature = "vector")]
pub use vector::VectorError;

/// The error beneath a [`SourceError`].
pub type Cause = Box<dyn std::error::Error + Send + Sync>;

/// Errors from opening or reading sources: the kinds every backend shares
/// (opening, policy, reading, CRSs, cancelling, a window too large, a
/// remote service that failed, be it an upstream map service or a
/// database), and each backend's own errors (`GdalError`, `VectorError`).
/// New kinds may be added: match with a wildcard arm.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SourceError {
    /// The dataset could not be opened.
    #[error("cannot open source {path}")]
    Open {
        /// Path or URL as configured.
        path: String,
        /// GDAL's error, or what the dataset lacks.
        source: Cause,
    },
    /// The location or driver is refused by policy.
    #[error("source {path} is not allowed: {reason}")]
    NotAllowed {
        /// Path or URL as configured.
        path: String,
        /// Why, and which setting would allow it.
        reason: String,
    },
    /// A read or warp failed.
    #[error("reading {path} failed")]
    Read {
        /// Path or URL as configured.
        path: String,
        /// GDAL's error, or what went wrong.
        source: Cause,
    },
    /// The CRS is unknown to GDAL/PROJ, or not written as one.
    #[error("unknown CRS {crs:?}")]
    InvalidCrs {
        /// The CRS as given.
        crs: String,
        /// Why it was refused (PROJ's error, or what is wrong with the text).
        source: Cause,
    },
    /// Coordinates could not be transformed between two CRSs.
    #[error("cannot transform coordinates from {from} to {to}")]
    Transform {
        /// Source CRS.
        from: String,
        /// Target CRS.
        to: String,
        /// PROJ's error, or what is wrong with the result.
        source: Cause,
    },
    /// The read was cancelled through [`WindowRequest::cancel`].
    #[error("the read was cancelled")]
    Cancelled,
    /// An upstream service failed, or answered with something that is not
    /// the image asked for (an exception, a damaged or wrong-sized image).
    #[error("the upstream {url} failed: {message}")]
    Upstream {
        /// The request, without its query.
        url: String,
        /// What went wrong, with the upstream's own message.
        message: String,
    },
    /// An upstream failed too often lately and is not asked for a while.
    #[error("the upstream {url} is unavailable: {message}")]
    UpstreamUnavailable {
        /// The request, without its query.
        url: String,
        /// Why.
        message: String,
        /// Seconds until it is asked again.
        retry_after_secs: u64,
    },
    /// The request is too large to allocate.
    #[error("window of {width}x{height} pixels is too large")]
    TooLarge {
        /// Width asked for.
        width: u32,
        /// Height asked for.
        height: u32,
    },
    /// The GDAL backend's own failure (GDAL files and mosaics).
    #[error(transparent)]
    Gdal(#[from] GdalError),
    /// The vector backend's own failure.
    #[cfg(feature = "vector")]
    #[error(transparent)]
    Vector(#[from] VectorError),
}

impl SourceError {
    /// Whether the request asks more of the source than its limits allow
    /// (too many source pixels or features): the caller should ask for
    /// less, so it is the request's fault, not the server's.
    pub fn asks_too_much(&self) -> bool {
        match self {
            SourceError::Gdal(GdalError::TooManySourcePixels { .. }) => true,
            #[cfg(feature = "vector")]
            SourceError::Vector(VectorError::TooManyFeatures { .. }) => true,
            _ => false,
        }
    }
}

/// The start of an answer (an upstream's, a tile's bytes) for the log: at most
/// [`EXCERPT_CHARS`] characters, control characters and quotes escaped, so
/// one line stays one line whatever the upstream sent. Never shown to
/// clients.
pub fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(EXCERPT_CHARS * 4)]);
    let text: String = text.trim().chars().take(EXCERPT_CHARS).collect();
    format!("{text:?}")
}

/// Characters of an upstream answer kept in a log line.
pub const EXCERPT_CHARS: usize = 120;
