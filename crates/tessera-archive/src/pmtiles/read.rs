//! PMTiles v3 archives, read with the `pmtiles` crate over any
//! [`ArchiveBytes`]: the header and root directory once, leaf directories
//! through a cache bounded in bytes that fetches each once (concurrent
//! misses wait for one read), then one range read per tile. An archive
//! replaced in place (its version changed) is opened again.

use std::io;
use std::sync::{Arc, PoisonError, RwLock};

use bytes::Bytes;
use pmtiles::{AsyncBackend, AsyncPmTilesReader, BackendResponse, MokaCache, PmtError, PmtResult};
use tessera_grid::{TileCoord, TileFormat};

use crate::bytes::{ArchiveBytes, version_of};
use crate::{ArchiveError, MAX_METADATA_BYTES, TileArchive, TileMetadata, packed_once};

/// The longest read the reader may ask in one piece (a tile or a leaf
/// directory): a corrupt directory naming gigabytes is refused, not
/// allocated.
const MAX_READ_BYTES: usize = crate::MAX_TILE_BYTES;

/// Most bytes a directory (the root or a leaf) may unpack to: 8 MiB is 2M
/// entries at least, some twenty times a planet archive's largest leaf.
/// The crate unpacks directories itself, without a bound; each one is
/// unpacked here first, counting, and refused past this.
pub const MAX_DIRECTORY_BYTES: u64 = 8 << 20;

/// Where the sections whose bytes the crate unpacks lie (from the header),
/// and whether they are gzip-packed.
#[derive(Debug, Clone, Copy)]
struct Sections {
    root: (u64, u64),
    metadata: (u64, u64),
    leaves: (u64, u64),
    gzip: bool,
}

impl Sections {
    /// The sections of a PMTiles v3 header (its first 127 bytes); `None`
    /// when `bytes` is no such header (the crate says what is wrong).
    fn of(bytes: &[u8]) -> Option<Sections> {
        if bytes.len() < 127 || &bytes[..8] != b"PMTiles\x03" {
            return None;
        }
        let u64_at =
            |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or_default());
        Some(Sections {
            root: (u64_at(8), u64_at(16)),
            metadata: (u64_at(24), u64_at(32)),
            leaves: (u64_at(40), u64_at(48)),
            // Internal compression 2 is gzip (1 none; brotli and zstd are
            // refused by the crate as built).
            gzip: bytes[97] == 2,
        })
    }

    /// The cap of what the read of `length` bytes at `offset` unpacks to,
    /// when the crate will unpack it (a directory or the metadata).
    fn cap_of(&self, offset: u64) -> Option<u64> {
        let within =
            |(start, len): (u64, u64)| offset >= start && offset < start.saturating_add(len);
        if !self.gzip {
            None
        } else if offset == self.metadata.0 && self.metadata.1 > 0 {
            Some(MAX_METADATA_BYTES)
        } else if within(self.leaves) || offset == self.root.0 {
            Some(MAX_DIRECTORY_BYTES)
        } else {
            None
        }
    }
}

/// The `pmtiles` crate's view of an archive's bytes: every read a
/// directory or the metadata is checked to unpack within its cap before
/// the crate gets it.
struct Backend {
    bytes: Arc<dyn ArchiveBytes>,
    sections: std::sync::OnceLock<Sections>,
}

impl Backend {
    fn new(bytes: Arc<dyn ArchiveBytes>) -> Backend {
        Backend {
            bytes,
            sections: std::sync::OnceLock::new(),
        }
    }

    /// Refuses `bytes`, read at `offset`, when they are a packed section
    /// that unpacks past its cap.
    fn check_unpacked(&self, offset: u64, bytes: &[u8]) -> PmtResult<()> {
        let refuse = |what: String| Err(PmtError::Reading(io::Error::other(what)));
        if offset == 0 {
            let Some(sections) = Sections::of(bytes) else {
                return Ok(());
            };
            let _ = self.sections.set(sections);
            // The root directory comes within the first read.
            let (start, len) = sections.root;
            let root = usize::try_from(start)
                .ok()
                .zip(usize::try_from(start.saturating_add(len)).ok())
                .and_then(|(a, b)| bytes.get(a..b));
            if let (true, Some(root)) = (sections.gzip, root)
                && let Err(e) = tessera_image::inflate::gunzipped_len(root, MAX_DIRECTORY_BYTES)
            {
                return refuse(format!("the root directory: {e}"));
            }
            return Ok(());
        }
        let Some(cap) = self.sections.get().and_then(|s| s.cap_of(offset)) else {
            return Ok(());
        };
        match tessera_image::inflate::gunzipped_len(bytes, cap) {
            Ok(_) => Ok(()),
            Err(e) => refuse(format!("the section at byte {offset}: {e}")),
        }
    }
}

impl AsyncBackend for Backend {
    async fn read(&self, offset: u64, length: usize) -> PmtResult<BackendResponse> {
        if length > MAX_READ_BYTES {
            return Err(PmtError::Reading(io::Error::other(format!(
                "a read of {length} bytes at {offset}, more than {MAX_READ_BYTES} (a corrupt directory?)"
            ))));
        }
        let ranged = self
            .bytes
            .read(offset, length as u64)
            .await
            .map_err(|m| PmtError::Reading(io::Error::other(m)))?;
        self.check_unpacked(offset, &ranged.bytes)?;
        Ok(match ranged.version {
            Some(v) => BackendResponse::new_with_version(ranged.bytes, v),
            None => BackendResponse::new(ranged.bytes),
        })
    }
}

type Reader = AsyncPmTilesReader<Backend, MokaCache>;

/// A PMTiles archive.
pub struct Pmtiles {
    bytes: Arc<dyn ArchiveBytes>,
    cache_bytes: u64,
    reader: RwLock<Arc<Reader>>,
    metadata: TileMetadata,
}

impl std::fmt::Debug for Pmtiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pmtiles")
            .field("archive", &self.bytes.name())
            .field("metadata", &self.metadata)
            .finish_non_exhaustive()
    }
}

/// What went wrong, in words a user can act on.
fn explain(e: &PmtError) -> String {
    match e {
        PmtError::InvalidMagicNumber => "not a PMTiles archive (wrong magic number)".into(),
        PmtError::UnsupportedPmTilesVersion => {
            "a PMTiles version other than 3 (convert it with `pmtiles convert`)".into()
        }
        PmtError::InvalidHeader => "a corrupt PMTiles header (truncated, or sections out of range)".into(),
        PmtError::InvalidEntry => {
            "a corrupt PMTiles directory (an entry past its section, or leaf directories nested too deep)".into()
        }
        PmtError::UnexpectedNumberOfBytesReturned(want, got) => {
            format!("the archive is truncated: {want} bytes asked, {got} read")
        }
        other => other.to_string(),
    }
}

impl Pmtiles {
    /// Reads the header, root directory and metadata of the archive in
    /// `bytes`.
    pub fn open(bytes: Arc<dyn ArchiveBytes>, cache_bytes: u64) -> Result<Pmtiles, String> {
        let name = bytes.name();
        // The reader checks the magic, not the version byte after it.
        let start = futures::executor::block_on(bytes.read(0, 8))?;
        if let [b'P', b'M', b'T', b'i', b'l', b'e', b's', version] = start.bytes[..]
            && version != 3
        {
            return Err(format!(
                "{name}: PMTiles version {version}; version 3 is read (convert it with `pmtiles convert`)"
            ));
        }
        let reader = Self::reader(&bytes, cache_bytes).map_err(|e| format!("{name}: {e}"))?;
        // The tile type is refused before the metadata is read.
        let header = reader.get_header();
        super::format_of(header.tile_type, header.tile_compression)
            .map_err(|e| format!("{name}: {e}"))?;
        let text = futures::executor::block_on(reader.get_metadata())
            .map_err(|e| format!("{name}: its metadata: {}", explain(&e)))?;
        let metadata = super::read_metadata(
            reader.get_header(),
            &text,
            version_of(bytes.as_ref()).ok().flatten(),
        )
        .map_err(|e| format!("{name}: {e}"))?;
        Ok(Pmtiles {
            bytes,
            cache_bytes,
            reader: RwLock::new(Arc::new(reader)),
            metadata,
        })
    }

    fn reader(bytes: &Arc<dyn ArchiveBytes>, cache_bytes: u64) -> Result<Reader, String> {
        futures::executor::block_on(Reader::try_from_cached_source(
            Backend::new(bytes.clone()),
            MokaCache::with_max_bytes(cache_bytes),
        ))
        .map_err(|e| explain(&e))
    }

    fn current(&self) -> Arc<Reader> {
        self.reader
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The tiles at `coords` by one reader.
    fn read_all(reader: &Reader, coords: &[TileCoord]) -> Result<Vec<Option<Bytes>>, PmtError> {
        futures::executor::block_on(futures::future::try_join_all(coords.iter().map(
            |c| async move {
                let coord = pmtiles::TileCoord::new(c.z(), c.x(), c.y())?;
                reader.get_tile(coord).await
            },
        )))
    }
}

impl TileArchive for Pmtiles {
    fn tiles(&self, coords: &[TileCoord]) -> Result<Vec<Option<Bytes>>, ArchiveError> {
        let failed = |message: String| ArchiveError {
            archive: self.bytes.name(),
            message,
        };
        let reader = self.current();
        let found = match Self::read_all(&reader, coords) {
            Err(PmtError::SourceModified) => {
                // Replaced in place: read it again, once.
                let fresh = Arc::new(
                    Self::reader(&self.bytes, self.cache_bytes)
                        .map_err(|e| failed(format!("replaced, and now {e}")))?,
                );
                *self.reader.write().unwrap_or_else(PoisonError::into_inner) = fresh.clone();
                tracing::info!(archive = %self.bytes.name(), "the archive was replaced; reading the new one");
                Self::read_all(&fresh, coords)
            }
            other => other,
        }
        .map_err(|e| failed(explain(&e)))?;
        if self.metadata.format != TileFormat::Mvt {
            return Ok(found);
        }
        found
            .into_iter()
            .map(|t| {
                t.map(|t| packed_once(t, flate2::Compression::fast()))
                    .transpose()
            })
            .collect::<Result<_, _>>()
            .map_err(|e| failed(format!("cannot compress a vector tile: {e}")))
    }

    fn version_now(&self) -> Result<Option<String>, String> {
        version_of(self.bytes.as_ref())
    }

    fn is_local(&self) -> bool {
        self.bytes.is_local()
    }

    fn describe(&self, coord: TileCoord) -> String {
        format!(
            "{} tile {}/{}/{}",
            self.bytes.name(),
            coord.z(),
            coord.x(),
            coord.y()
        )
    }

    fn metadata(&self) -> &TileMetadata {
        &self.metadata
    }
}
