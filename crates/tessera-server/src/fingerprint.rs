//! What a layer's pixels are made from, as one short fingerprint, and the
//! store key that keeps tiles of different fingerprints apart.
//!
//! The fingerprint covers the source (its path or URL, the resampling, and
//! for a local file its size and modification time), the style, the
//! encoder settings, the definition of every grid the layer is tiled in,
//! and [`RENDER_EPOCH`]. Each store records, per layer key, the fingerprint
//! its tiles were made from ([`TileStore::claim_fingerprint`]); a layer
//! whose fingerprint differs from the recorded one keeps its tiles under
//! `<key>@<fingerprint>` instead, so a changed layer never serves tiles of
//! the old one, and nodes sharing a store agree on which tiles are whose.

use std::fmt::Write as _;
use std::time::UNIX_EPOCH;

use tessera_grid::TileMatrixSet;
use tessera_image::EncodeOptions;
use tessera_store::{StoreError, TileStore};

use crate::config::LayerConfig;

/// Raised when tessera renders the same configuration into other pixels
/// than before, so that tiles cached by older versions are rendered again.
pub const RENDER_EPOCH: u32 = 1;

/// The fingerprint of `layer`'s pixels: 16 hex digits.
///
/// `grids` are the tile matrix sets of the layer's grids (in its order).
pub fn of_layer(layer: &LayerConfig, encoding: &EncodeOptions, grids: &[&TileMatrixSet]) -> String {
    let mut parts = String::new();
    let _ = writeln!(parts, "epoch {RENDER_EPOCH}");
    let _ = writeln!(parts, "source {}", layer.source.identity());
    if let Some((len, modified)) = layer.source.local_file().and_then(file_stamp) {
        let _ = writeln!(parts, "file {len} {modified}");
    }
    match &layer.style {
        crate::config::LayerStyle::Raster(s) => {
            let _ = writeln!(parts, "style {s:?}");
        }
        // The document itself is in the source's identity.
        crate::config::LayerStyle::MapLibre(m) => {
            let _ = writeln!(parts, "style maplibre {:?}", m.source);
        }
    }
    let _ = writeln!(parts, "encoding {encoding:?}");
    for grid in grids {
        let _ = writeln!(parts, "grid {grid:?}");
    }
    let hash = tessera_store::content_hash(parts.as_bytes());
    format!("{:016x}", (hash >> 64) as u64)
}

/// The size of the file at `path` and its modification time in
/// nanoseconds since the epoch (0 when unknown); `None` when it cannot be
/// read.
pub fn file_stamp(path: &str) -> Option<(u64, u128)> {
    let meta = std::fs::metadata(path).ok()?;
    let modified = meta
        .modified()
        .ok()
        .and_then(|m| m.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    Some((meta.len(), modified))
}

/// `fingerprint` also covering the size and modification time of `files`
/// (a dimension value's pieces: a piece replaced or added changes the
/// fingerprint of that value only).
pub fn with_files(fingerprint: &str, files: &[String]) -> String {
    let mut parts = format!("{fingerprint}\n");
    for path in files {
        let _ = write!(parts, "file {path}");
        if let Some((len, modified)) = file_stamp(path) {
            let _ = write!(parts, " {len} {modified}");
        }
        parts.push('\n');
    }
    let hash = tessera_store::content_hash(parts.as_bytes());
    format!("{:016x}", (hash >> 64) as u64)
}

/// `fingerprint` also covering `version`, what a remote source says of
/// its own version (an archive's `ETag`): a replaced archive changes it.
pub fn with_version(fingerprint: &str, version: &str) -> String {
    let hash =
        tessera_store::content_hash(format!("{fingerprint}\nversion {version}\n").as_bytes());
    format!("{:016x}", (hash >> 64) as u64)
}

/// The key `layer`'s tiles are kept under in `store` (its
/// `Layer::cache_key`): `base` when the
/// store records `fingerprint` for it (or recorded nothing yet, and now
/// does), else `<base>@<fingerprint>`.
pub fn cache_key(
    store: &dyn TileStore,
    base: &str,
    fingerprint: &str,
) -> Result<String, StoreError> {
    if store.claim_fingerprint(base, fingerprint)? == fingerprint {
        return Ok(base.to_string());
    }
    let key = format!("{base}@{fingerprint}");
    let recorded = store.claim_fingerprint(&key, fingerprint)?;
    if recorded != fingerprint {
        return Err(StoreError::Invalid {
            store: store.name().to_string(),
            message: format!("layer key {key:?} records fingerprint {recorded}"),
        });
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tessera_store::MemoryStore;

    #[test]
    fn a_layer_keeps_its_key_until_its_fingerprint_changes() {
        let store: Arc<dyn TileStore> = Arc::new(MemoryStore::new(1 << 20, None));
        assert_eq!(
            cache_key(store.as_ref(), "relief", "aaaa").unwrap(),
            "relief"
        );
        assert_eq!(
            cache_key(store.as_ref(), "relief", "aaaa").unwrap(),
            "relief"
        );
        assert_eq!(
            cache_key(store.as_ref(), "relief", "bbbb").unwrap(),
            "relief@bbbb"
        );
        // Changed back: the first tiles are right again.
        assert_eq!(
            cache_key(store.as_ref(), "relief", "aaaa").unwrap(),
            "relief"
        );
    }
}
