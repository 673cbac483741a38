//! Bounded decompression: every gzip stream tessera unpacks (vector tiles
//! for clients without gzip, archive directories and metadata, tiles
//! checked before they are cached) goes through [`gunzip_capped`], which
//! stops as soon as the output passes its cap. A few kilobytes of gzip can
//! declare gigabytes; what it unpacks to is counted while unpacking, never
//! trusted from a header.

use std::io::Read as _;

/// Why a gzip stream was not unpacked.
#[derive(Debug, thiserror::Error)]
pub enum InflateError {
    /// It unpacks to more than the cap.
    #[error("it unpacks to more than {cap} bytes")]
    TooLarge {
        /// The cap it passed.
        cap: u64,
    },
    /// The stream is damaged (or cut short).
    #[error("the gzip stream is damaged: {0}")]
    Damaged(#[from] std::io::Error),
}

/// The gzip stream `packed` unpacked, or [`InflateError::TooLarge`] as
/// soon as it passes `cap` bytes (at most `cap + 1` bytes are ever held).
pub fn gunzip_capped(packed: &[u8], cap: u64) -> Result<Vec<u8>, InflateError> {
    let guess = packed.len().saturating_mul(3);
    let mut out = Vec::with_capacity(guess.min(usize::try_from(cap).unwrap_or(usize::MAX)));
    flate2::read::GzDecoder::new(packed)
        .take(cap.saturating_add(1))
        .read_to_end(&mut out)?;
    if out.len() as u64 > cap {
        return Err(InflateError::TooLarge { cap });
    }
    Ok(out)
}

/// How many bytes the gzip stream `packed` unpacks to, counted without
/// keeping them, or [`InflateError::TooLarge`] as soon as it passes `cap`:
/// a check of input handed on packed (to a crate that unpacks it itself).
pub fn gunzipped_len(packed: &[u8], cap: u64) -> Result<u64, InflateError> {
    let mut counted = flate2::read::GzDecoder::new(packed).take(cap.saturating_add(1));
    let n = std::io::copy(&mut counted, &mut std::io::sink())?;
    if n > cap {
        return Err(InflateError::TooLarge { cap });
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(bytes).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn a_bomb_stops_at_its_cap_and_a_stream_within_it_unpacks() {
        let bomb = gzip(&vec![0u8; 64 << 20]);
        assert!(bomb.len() < 100 << 10);
        assert!(matches!(
            gunzip_capped(&bomb, 1 << 20),
            Err(InflateError::TooLarge { cap }) if cap == 1 << 20
        ));
        assert!(matches!(
            gunzipped_len(&bomb, 1 << 20),
            Err(InflateError::TooLarge { .. })
        ));
        let small = gzip(b"hello");
        assert_eq!(gunzip_capped(&small, 5).unwrap(), b"hello");
        assert_eq!(gunzipped_len(&small, 5).unwrap(), 5);
        assert!(matches!(
            gunzip_capped(&small[..small.len() - 4], 5),
            Err(InflateError::Damaged(_))
        ));
    }
}
