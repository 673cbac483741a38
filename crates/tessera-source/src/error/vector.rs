//! Failures only the vector backend has, kept beside the crate's error
//! that carries them.

/// The vector backend's own errors, carried by
/// [`SourceError::Vector`](crate::SourceError::Vector).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VectorError {
    /// A vector window holds more features than the source's
    /// `max_features`: the request asks too much (a smaller area, a higher
    /// zoom, a narrower `where`).
    #[error(
        "more than {limit} features of {layer} in the window (max_features); ask for a smaller \
         area or a higher zoom"
    )]
    TooManyFeatures {
        /// The data layer.
        layer: String,
        /// The limit.
        limit: u64,
    },
}
