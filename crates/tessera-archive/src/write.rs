//! Single-file tile archives for exports: PMTiles v3 and MBTiles 1.3,
//! written tile by tile into a local file and synced when finished (each
//! format's writing in its own module: `pmtiles/write.rs`,
//! `mbtiles/write.rs`).
//!
//! Both formats hold Web Mercator tiles addressed `z/x/y` with `y` counted
//! from the top (XYZ); the MBTiles writer turns rows into TMS order itself.
//! Tiles should arrive in the order [`archive_order`] yields (ascending
//! PMTiles tile id), which makes the PMTiles archive clustered; any order
//! is accepted.

use std::fs::File;
use std::path::{Path, PathBuf};

use tessera_grid::{TileCoord, TileRange};

use crate::pmtiles::tile_id;
use crate::{ArchiveFormat, TileMetadata, mbtiles, packed_once, pmtiles};

/// Tiles gathered per batch of [`archive_order`]: blocks of 2^8 x 2^8.
const BLOCK_ORDER: u8 = 8;

/// Why an archive could not be written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// A file or SQLite operation failed.
    #[error("archive {path}: {op} failed")]
    Io {
        /// The archive's path.
        path: String,
        /// What was being done.
        op: &'static str,
        /// The failure underneath.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A tile that cannot be written.
    #[error("archive {path}: {message}")]
    Invalid {
        /// The archive's path.
        path: String,
        /// What is wrong with it.
        message: String,
    },
}

/// A [`WriteError::Io`] of `op` on `path`.
pub(crate) fn failed(
    op: &'static str,
    path: &Path,
    e: impl Into<Box<dyn std::error::Error + Send + Sync>>,
) -> WriteError {
    WriteError::Io {
        path: path.display().to_string(),
        op,
        source: e.into(),
    }
}

enum Inner {
    Pmtiles(Box<pmtiles::write::Writer>),
    Mbtiles(mbtiles::write::Writer),
}

/// An archive being written; [`ArchiveWriter::finish`] completes it.
/// Dropped unfinished, the file is left incomplete (callers write to a
/// temporary file).
pub struct ArchiveWriter {
    inner: Inner,
    path: PathBuf,
    tiles: u64,
    /// Lowest and highest zoom of the tiles added.
    zooms: Option<(u8, u8)>,
    /// The centre asked for (its zoom is kept within the tiles' zooms).
    center: (f64, f64, u8),
    /// Whether the tiles are vector tiles, written gzip-packed (as
    /// tessera keeps them, and as both formats hold them).
    vector: bool,
}

impl std::fmt::Debug for ArchiveWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArchiveWriter")
            .field("path", &self.path)
            .field("tiles", &self.tiles)
            .finish_non_exhaustive()
    }
}

impl ArchiveWriter {
    /// Starts an archive at `path`, which must not hold an archive already
    /// (an empty file, as a temporary file is created, is fine), saying
    /// `meta` about itself (its zooms and centre zoom mended at
    /// [`ArchiveWriter::finish`] to the tiles added).
    pub fn create(
        format: ArchiveFormat,
        path: &Path,
        meta: &TileMetadata,
    ) -> Result<ArchiveWriter, WriteError> {
        let inner = match format {
            ArchiveFormat::Pmtiles => Inner::Pmtiles(Box::new(pmtiles::write::create(path, meta)?)),
            ArchiveFormat::Mbtiles => Inner::Mbtiles(mbtiles::write::create(path, meta)?),
        };
        Ok(ArchiveWriter {
            inner,
            path: path.to_path_buf(),
            tiles: 0,
            zooms: None,
            center: meta.center_or_middle(),
            vector: meta.format.is_vector(),
        })
    }

    /// Adds tile `coord` (row counted from the top). Empty tiles are
    /// refused; a vector tile is stored gzip-packed (packed here when it
    /// came unpacked), never packed twice.
    pub fn add(&mut self, coord: TileCoord, data: &[u8]) -> Result<(), WriteError> {
        if data.is_empty() {
            return Err(WriteError::Invalid {
                path: self.path.display().to_string(),
                message: format!(
                    "refusing an empty tile {}/{}/{}",
                    coord.z(),
                    coord.x(),
                    coord.y()
                ),
            });
        }
        let packed;
        let data = if self.vector && !data.starts_with(&[0x1f, 0x8b]) {
            packed = packed_once(
                bytes::Bytes::copy_from_slice(data),
                flate2::Compression::default(),
            )
            .map_err(|e| failed("add", &self.path, e))?;
            &packed[..]
        } else {
            data
        };
        match &mut self.inner {
            Inner::Pmtiles(w) => pmtiles::write::add(w, coord, data, &self.path)?,
            Inner::Mbtiles(w) => w.add(coord, data, self.tiles, &self.path)?,
        }
        self.tiles += 1;
        let z = coord.z();
        self.zooms = Some(self.zooms.map_or((z, z), |(lo, hi)| (lo.min(z), hi.max(z))));
        Ok(())
    }

    /// Tiles added so far.
    pub fn tiles(&self) -> u64 {
        self.tiles
    }

    /// Completes the archive and syncs the file; returns its size in bytes.
    /// The zoom range recorded is that of the tiles added (when any), and
    /// the centre's zoom is kept within it.
    pub fn finish(self) -> Result<u64, WriteError> {
        let path = self.path;
        let (lon, lat, mut zoom) = self.center;
        if let Some((lo, hi)) = self.zooms {
            zoom = zoom.clamp(lo, hi);
        }
        let center = (lon, lat, zoom);
        match self.inner {
            Inner::Pmtiles(w) => pmtiles::write::finish(*w, self.zooms, center, &path)?,
            Inner::Mbtiles(w) => w.finish(self.zooms, center, self.tiles, &path)?,
        }
        let file = File::open(&path).map_err(|e| failed("sync", &path, e))?;
        file.sync_all().map_err(|e| failed("sync", &path, e))?;
        let len = file.metadata().map_err(|e| failed("sync", &path, e))?.len();
        Ok(len)
    }
}

/// Every tile of `ranges` (XYZ rows; overlaps are visited once) in
/// ascending PMTiles tile id, in batches of at most 2^8 x 2^8 tiles. Memory
/// stays bounded by one batch and the list of batches of one zoom: at zoom
/// z the tiles of an aligned 2^k block have consecutive ids, and the blocks
/// are visited in the order of their own ids at zoom z - k.
pub fn archive_order(ranges: &[TileRange]) -> impl Iterator<Item = Vec<TileCoord>> + '_ {
    let mut zooms: Vec<u8> = ranges.iter().map(|r| r.z).collect();
    zooms.sort_unstable();
    zooms.dedup();
    zooms.into_iter().flat_map(move |z| {
        let k = z.min(BLOCK_ORDER);
        let at_z: Vec<TileRange> = ranges.iter().filter(|r| r.z == z).copied().collect();
        let mut blocks: Vec<(u64, u32, u32)> = at_z
            .iter()
            .flat_map(|r| {
                (r.min_y >> k..=r.max_y >> k).flat_map(move |by| {
                    (r.min_x >> k..=r.max_x >> k).map(move |bx| (tile_id(z - k, bx, by), bx, by))
                })
            })
            .collect();
        blocks.sort_unstable();
        blocks.dedup();
        blocks.into_iter().map(move |(_, bx, by)| {
            let (x0, y0) = (bx << k, by << k);
            let (x1, y1) = (x0 + (1 << k) - 1, y0 + (1 << k) - 1);
            let mut tiles: Vec<(u64, u32, u32)> = Vec::new();
            for r in &at_z {
                for y in r.min_y.max(y0)..=r.max_y.min(y1) {
                    for x in r.min_x.max(x0)..=r.max_x.min(x1) {
                        tiles.push((tile_id(z, x, y), x, y));
                    }
                }
            }
            tiles.sort_unstable();
            tiles.dedup();
            tiles
                .into_iter()
                .map(|(_, x, y)| TileCoord::restored(z, x, y))
                .collect()
        })
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use tessera_grid::TileFormat;

    fn range(z: u8, min_x: u32, min_y: u32, max_x: u32, max_y: u32) -> TileRange {
        TileRange {
            z,
            min_x,
            min_y,
            max_x,
            max_y,
        }
    }

    #[test]
    fn order_is_ascending_tile_id_and_visits_each_tile_once() {
        let ranges = [
            range(0, 0, 0, 0, 0),
            range(3, 1, 2, 6, 5),
            range(3, 4, 4, 7, 7), // overlaps the one above
            range(10, 300, 200, 700, 420),
            range(10, 0, 1023, 2, 1023),
        ];
        let got: Vec<TileCoord> = archive_order(&ranges).flatten().collect();
        let ids: Vec<u64> = got.iter().map(|c| tile_id(c.z(), c.x(), c.y())).collect();
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "not strictly ascending"
        );
        let mut expected: Vec<u64> = ranges
            .iter()
            .flat_map(|r| {
                (r.min_y..=r.max_y)
                    .flat_map(move |y| (r.min_x..=r.max_x).map(move |x| tile_id(r.z, x, y)))
            })
            .collect();
        expected.sort_unstable();
        expected.dedup();
        assert_eq!(ids, expected);
        // Batches hold at most one block.
        assert!(archive_order(&ranges).all(|b| b.len() <= 1 << (2 * BLOCK_ORDER)));
    }

    fn info() -> TileMetadata {
        TileMetadata {
            name: Some("relief".into()),
            description: Some("Shaded relief".into()),
            attribution: None,
            format: TileFormat::Png,
            bounds: Some(tessera_grid::BBox::new(-10.0, -20.0, 30.0, 40.0).unwrap()),
            center: Some((10.0, 10.0, 4)),
            // Wider than the tiles added: the archive records theirs.
            min_zoom: 0,
            max_zoom: 5,
            vector_layers: None,
            version: None,
        }
    }

    #[test]
    fn mbtiles_rows_are_tms_and_metadata_is_complete() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.mbtiles");
        let mut w = ArchiveWriter::create(ArchiveFormat::Mbtiles, &path, &info()).unwrap();
        w.add(TileCoord::restored(1, 0, 0), b"a").unwrap();
        w.add(TileCoord::restored(2, 3, 1), b"b").unwrap();
        assert!(w.add(TileCoord::restored(2, 3, 2), b"").is_err());
        assert_eq!(w.tiles(), 2);
        let size = w.finish().unwrap();
        assert_eq!(size, std::fs::metadata(&path).unwrap().len());
        let conn = rusqlite::Connection::open(&path).unwrap();
        let tile = |z: u8, x: u32, row: u32| -> Option<Vec<u8>> {
            conn.query_row(
                "SELECT tile_data FROM tiles WHERE zoom_level=?1 AND tile_column=?2 AND tile_row=?3",
                rusqlite::params![z, x, row],
                |r| r.get(0),
            )
            .ok()
        };
        assert_eq!(tile(1, 0, 1), Some(b"a".to_vec()));
        assert_eq!(tile(2, 3, 2), Some(b"b".to_vec()));
        let meta = |name: &str| -> String {
            conn.query_row(
                "SELECT value FROM metadata WHERE name=?1",
                rusqlite::params![name],
                |r| r.get(0),
            )
            .unwrap()
        };
        assert_eq!(meta("format"), "png");
        assert_eq!(meta("bounds"), "-10,-20,30,40");
        assert_eq!(meta("minzoom"), "1");
        assert_eq!(meta("maxzoom"), "2");
        assert_eq!(
            meta("center"),
            "10,10,2",
            "centre zoom within the tiles' zooms"
        );
        let journal: String = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_ne!(journal, "wal", "an exported file must not need a WAL");
    }

    #[test]
    fn vector_tiles_are_stored_gzip_packed_once_in_both_formats() {
        use std::io::Read as _;
        let dir = tempfile::tempdir().unwrap();
        let info = TileMetadata {
            format: TileFormat::Mvt,
            ..info()
        };
        let raw = b"\x1a\x05layer".to_vec();
        let packed =
            crate::packed_once(raw.clone().into(), flate2::Compression::default()).unwrap();
        for format in [ArchiveFormat::Pmtiles, ArchiveFormat::Mbtiles] {
            let path = dir.path().join(format!("v.{}", format.extension()));
            let mut w = ArchiveWriter::create(format, &path, &info).unwrap();
            // One packed as tessera keeps them, one unpacked.
            w.add(TileCoord::restored(1, 0, 0), &packed).unwrap();
            w.add(TileCoord::restored(1, 1, 0), &raw).unwrap();
            w.finish().unwrap();
            let bytes = std::fs::read(&path).unwrap();
            let mut found = 0;
            // Every occurrence of the gzip magic in the file unpacks to
            // the tile itself, never to another gzip stream.
            for at in 0..bytes.len().saturating_sub(2) {
                if bytes[at..].starts_with(&[0x1f, 0x8b, 0x08]) {
                    let mut out = Vec::new();
                    if flate2::read::GzDecoder::new(&bytes[at..])
                        .read_to_end(&mut out)
                        .is_ok()
                        && out == raw
                    {
                        found += 1;
                    }
                }
            }
            assert!(found >= 1, "{format:?}: no tile that unpacks once");
            if format == ArchiveFormat::Pmtiles {
                assert_eq!(bytes[98], 2, "tile compression gzip");
                assert_eq!(bytes[99], 1, "tile type mvt");
            }
        }
    }

    #[test]
    fn pmtiles_header_and_layout() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.pmtiles");
        let mut w = ArchiveWriter::create(ArchiveFormat::Pmtiles, &path, &info()).unwrap();
        let ranges = [range(1, 0, 0, 1, 1), range(2, 0, 0, 3, 3)];
        for c in archive_order(&ranges).flatten() {
            // Two contents only: the writer stores each once.
            let data: &[u8] = if c.x() % 2 == 0 { b"even" } else { b"odd" };
            w.add(c, data).unwrap();
        }
        assert_eq!(w.tiles(), 20);
        w.finish().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[..7], b"PMTiles");
        assert_eq!(bytes[7], 3, "spec version");
        let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap());
        assert_eq!(u64_at(72), 20, "addressed tiles");
        assert_eq!(u64_at(88), 2, "tile contents");
        assert_eq!(bytes[96], 1, "clustered");
        assert_eq!(bytes[99], 2, "tile type png");
        assert_eq!((bytes[100], bytes[101]), (1, 2), "zooms");
        assert_eq!(bytes[118], 2, "centre zoom within the tiles' zooms");
        let data_end = u64_at(56) + u64_at(64);
        assert_eq!(
            u64_at(40),
            data_end,
            "leaf offset set though there are no leaves"
        );
        assert_eq!(u64_at(48), 0);
        assert_eq!(data_end, bytes.len() as u64);
    }
}
