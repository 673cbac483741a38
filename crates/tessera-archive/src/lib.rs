//! Tile archives, one module per format, used by the sources that read
//! them and the export that writes them, so that both halves agree on
//! every byte: [`pmtiles`] (PMTiles v3) and [`mbtiles`] (MBTiles 1.3) each
//! own their layout, their metadata (name, bounds, centre, zooms, tile
//! type, `vector_layers`), how tiles are compressed (vector tiles
//! gzip-packed exactly once), their reader and their writer. What both
//! formats share is here: the metadata ([`TileMetadata`], tessera-grid's
//! vocabulary), the reader's contract ([`TileArchive`]), the writer
//! ([`ArchiveWriter`]) and byte ranges wherever an archive lies
//! ([`bytes`]).

pub mod bytes;
pub mod mbtiles;
pub mod pmtiles;
mod write;

use std::fmt::Debug;
use std::io::Write as _;

use ::bytes::Bytes;
pub use tessera_grid::TileMetadata;
use tessera_grid::{TileCoord, TileFormat};

pub use write::{ArchiveWriter, WriteError, archive_order};

/// Most bytes of one tile read from an archive (a PMTiles range, an
/// MBTiles blob): a longer one is refused before it is read.
pub const MAX_TILE_BYTES: usize = 64 << 20;

/// Most bytes of archive metadata read (an MBTiles value, a PMTiles
/// metadata section once unpacked): a planet's is some kilobytes.
pub const MAX_METADATA_BYTES: u64 = 16 << 20;

/// An archive format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArchiveFormat {
    /// PMTiles v3 (one file, read with HTTP range requests).
    Pmtiles,
    /// MBTiles 1.3 (SQLite).
    Mbtiles,
}

impl ArchiveFormat {
    /// `pmtiles` or `mbtiles` (any case).
    pub fn parse(text: &str) -> Option<ArchiveFormat> {
        match text.to_ascii_lowercase().as_str() {
            "pmtiles" => Some(ArchiveFormat::Pmtiles),
            "mbtiles" => Some(ArchiveFormat::Mbtiles),
            _ => None,
        }
    }

    /// The format's name (`pmtiles`, `mbtiles`), as written in a source's
    /// `type` and as the file extension, without the dot.
    pub fn name(self) -> &'static str {
        match self {
            ArchiveFormat::Pmtiles => "pmtiles",
            ArchiveFormat::Mbtiles => "mbtiles",
        }
    }

    /// The file extension, without the dot.
    pub fn extension(self) -> &'static str {
        self.name()
    }

    /// The format a file name's extension says (`.pmtiles`, `.mbtiles`,
    /// any case; a URL's query and fragment aside).
    pub fn of_path(path: &str) -> Option<ArchiveFormat> {
        let name = path.split(['?', '#']).next().unwrap_or_default();
        let lower = name.to_ascii_lowercase();
        if lower.ends_with(".pmtiles") {
            Some(ArchiveFormat::Pmtiles)
        } else if lower.ends_with(".mbtiles") {
            Some(ArchiveFormat::Mbtiles)
        } else {
            None
        }
    }
}

/// A reader's failure to read an archive's tiles: the archive (path or
/// URL, no secrets) and what went wrong.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{archive}: {message}")]
pub struct ArchiveError {
    /// The archive, as configured.
    pub archive: String,
    /// What went wrong.
    pub message: String,
}

/// An archive's tiles, by coordinates of its grid (rows from the top).
pub trait TileArchive: Send + Sync + Debug {
    /// The tiles at `coords`: their bytes as stored (vector tiles
    /// gzip-compressed), `None` where the archive has none.
    fn tiles(&self, coords: &[TileCoord]) -> Result<Vec<Option<Bytes>>, ArchiveError>;

    /// The archive and the tile, for messages.
    fn describe(&self, coord: TileCoord) -> String;

    /// What the archive says about itself, as opened.
    fn metadata(&self) -> &TileMetadata;

    /// The archive's version now, looked up again (a local file's `stat`,
    /// a remote archive's one-byte range read or `HEAD`): a version other
    /// than the metadata's says the archive was replaced since it was
    /// opened.
    fn version_now(&self) -> Result<Option<String>, String>;

    /// Whether its tiles are read from a local file (no network) by reads
    /// that honour [`bytes::without_waiting`]: then they may be tried on
    /// the caller's thread.
    fn is_local(&self) -> bool;
}

/// `text` quoted for a message, cut to its first 80 characters (with its
/// length) when longer: a broken value is named, not repeated.
fn quoted(text: &str) -> String {
    const SHOWN: usize = 80;
    match text.char_indices().nth(SHOWN) {
        None => format!("{text:?}"),
        Some((end, _)) => format!("{:?}... ({} bytes)", &text[..end], text.len()),
    }
}

/// `data` gzip-packed at `level` unless it already is: how both formats
/// hold vector tiles, and how tessera keeps them (packed once, never
/// twice).
pub fn packed_once(data: Bytes, level: flate2::Compression) -> std::io::Result<Bytes> {
    if data.starts_with(&[0x1f, 0x8b]) {
        return Ok(data);
    }
    let mut encoder = flate2::write::GzEncoder::new(Vec::with_capacity(data.len() / 2 + 64), level);
    encoder.write_all(&data)?;
    encoder.finish().map(Bytes::from)
}

/// The tile format of an archive's tile type name (`png`, `jpg`, `pbf`,
/// a media type...).
pub fn format_named(name: &str) -> Option<TileFormat> {
    match name.trim().to_ascii_lowercase().as_str() {
        "pbf" | "mvt" | "application/x-protobuf" | "application/vnd.mapbox-vector-tile" => {
            Some(TileFormat::Mvt)
        }
        "png" | "image/png" => Some(TileFormat::Png),
        "jpg" | "jpeg" | "image/jpeg" => Some(TileFormat::Jpeg),
        "webp" | "image/webp" => Some(TileFormat::Webp),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_come_from_the_path_and_tile_type_names() {
        assert_eq!(
            ArchiveFormat::of_path("/a/b.PMTiles"),
            Some(ArchiveFormat::Pmtiles)
        );
        assert_eq!(
            ArchiveFormat::of_path("https://h/x.mbtiles?sig=1"),
            Some(ArchiveFormat::Mbtiles)
        );
        assert_eq!(ArchiveFormat::of_path("x.tif"), None);
        assert_eq!(format_named("pbf"), Some(TileFormat::Mvt));
        assert_eq!(format_named("jpg"), Some(TileFormat::Jpeg));
        assert_eq!(format_named("tiff"), None);
    }

    #[test]
    fn vector_tiles_are_kept_gzipped_once() {
        let raw = Bytes::from_static(b"\x1a\x05hello");
        let packed = packed_once(raw.clone(), flate2::Compression::fast()).unwrap();
        assert!(packed.starts_with(&[0x1f, 0x8b]));
        assert_eq!(
            packed_once(packed.clone(), flate2::Compression::fast()).unwrap(),
            packed
        );
    }
}
