//! Failures only the GDAL backend (files and mosaics) has, kept beside
//! the crate's error that carries them.

/// The GDAL backend's own errors, carried by
/// [`SourceError::Gdal`](crate::SourceError::Gdal).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GdalError {
    /// The read would touch more source pixels than allowed (a large area
    /// at a fine scale of a source without overviews).
    #[error(
        "the request would read about {estimated} pixels of {path}, more than the limit of {limit} \
         (limits.max_source_pixels); ask for a smaller area or a coarser scale, or add overviews \
         to the source (gdaladdo)"
    )]
    TooManySourcePixels {
        /// Path or URL as configured.
        path: String,
        /// Estimated source pixels the read would touch.
        estimated: u64,
        /// The limit.
        limit: u64,
    },
}
