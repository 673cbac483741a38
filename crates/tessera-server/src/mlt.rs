//! MapLibre Tiles (MLT) made from a layer's Mapbox Vector Tiles: the same
//! layers and features, in MapLibre's column-oriented encoding, by the
//! `mlt-core` encoder (which picks each column's encoding for the fewest
//! bytes). Both kinds are kept gzip-compressed, as stores hold vector
//! tiles.

use std::io::{Read, Write};

use bytes::Bytes;
use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use mlt_core::encoder::EncoderConfig;
use tessera_grid::EMPTY_MVT;

/// Why a vector tile could not be made a MapLibre Tile.
#[derive(Debug, thiserror::Error)]
pub enum MltError {
    /// The MVT is not gzip or not a valid vector tile.
    #[error("the vector tile cannot be read: {0}")]
    Unreadable(String),
    /// The encoder refused a layer (an empty layer name, a geometry MLT
    /// cannot hold).
    #[error("layer {layer:?} cannot be encoded as MLT: {reason}")]
    Encode {
        /// The MVT layer's name.
        layer: String,
        /// The encoder's words.
        reason: String,
    },
}

/// The MapLibre Tile of `mvt` (a gzip-compressed Mapbox Vector Tile, as
/// sources make them), gzip-compressed: each MVT layer becomes one MLT
/// layer record, in the same order. A tile with no layers stays
/// [`EMPTY_MVT`] (the compression of nothing: an MLT tile without layers
/// too).
pub fn from_mvt(mvt: &[u8]) -> Result<Bytes, MltError> {
    if mvt == EMPTY_MVT || mvt.is_empty() {
        return Ok(Bytes::from_static(EMPTY_MVT));
    }
    let raw = if mvt.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::with_capacity(mvt.len() * 4);
        GzDecoder::new(mvt)
            .read_to_end(&mut out)
            .map_err(|e| MltError::Unreadable(format!("gzip: {e}")))?;
        out
    } else {
        mvt.to_vec()
    };
    let encoded = encode(&raw)?;
    if encoded.is_empty() {
        return Ok(Bytes::from_static(EMPTY_MVT));
    }
    let mut gz = GzEncoder::new(Vec::with_capacity(encoded.len()), Compression::fast());
    gz.write_all(&encoded)
        .and_then(|()| gz.finish())
        .map(Bytes::from)
        .map_err(|e| MltError::Unreadable(format!("gzip: {e}")))
}

/// The MLT bytes of an uncompressed MVT: the layer records one after the
/// other (an MLT tile is a sequence of records).
pub fn encode(raw_mvt: &[u8]) -> Result<Vec<u8>, MltError> {
    let layers = mlt_core::mvt::mvt_to_tile_layers(raw_mvt)
        .map_err(|e| MltError::Unreadable(e.to_string()))?;
    let mut out = Vec::with_capacity(raw_mvt.len());
    for layer in layers {
        let name = layer.name().to_string();
        let record = layer
            .encode(EncoderConfig::default())
            .map_err(|e| MltError::Encode {
                layer: name,
                reason: e.to_string(),
            })?;
        out.extend_from_slice(&record);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tile_without_features_stays_empty() {
        assert_eq!(from_mvt(EMPTY_MVT).unwrap().as_ref(), EMPTY_MVT);
        assert_eq!(from_mvt(b"").unwrap().as_ref(), EMPTY_MVT);
    }

    #[test]
    fn broken_tiles_are_refused_with_a_reason() {
        let e = from_mvt(&[0x1f, 0x8b, 1, 2, 3]).unwrap_err();
        assert!(e.to_string().contains("gzip"), "{e}");
        let e = from_mvt(&[0x1a, 100, 0x78]).unwrap_err();
        assert!(e.to_string().contains("cannot be read"), "{e}");
    }
}
