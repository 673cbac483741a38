//! MBTiles archives (SQLite): a `tiles` table or view (rows from the
//! bottom, as TMS counts them) and a `metadata` table of names and values.
//! A local file is read in place by a few read-only connections, opened
//! again when the path names a changed file; an archive elsewhere (HTTP,
//! an object store) is first copied to a local file, by chunks.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use rusqlite::{Connection, OpenFlags, OptionalExtension as _};
use tessera_grid::{TileCoord, TileFormat};

use crate::bytes::{ArchiveBytes, Ranged, version_of};
use crate::{ArchiveError, MAX_TILE_BYTES, TileArchive, TileMetadata, packed_once};

/// Connections kept open for reads (more are opened while busy).
const KEPT_CONNECTIONS: usize = 8;

/// Bytes copied per range read when an archive is copied to a local file.
const COPY_CHUNK: u64 = 8 << 20;

/// A file's size and modification time.
type Stamp = Option<(u64, std::time::SystemTime)>;

/// An MBTiles archive.
#[derive(Debug)]
pub struct Mbtiles {
    /// The local file read.
    file: PathBuf,
    /// The path or URL the configuration names, for messages.
    name: String,
    /// The archive elsewhere that `file` is a copy of.
    remote: Option<Arc<dyn ArchiveBytes>>,
    /// Idle connections, and the file's stamp they were opened on.
    idle: Mutex<(Vec<Connection>, Stamp)>,
    metadata: TileMetadata,
}

fn stamp(path: &Path) -> Stamp {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.len(), meta.modified().ok()?))
}

/// A file's stamp as a version.
fn stamp_text(path: &Path) -> Option<String> {
    stamp(path).map(|(len, t)| format!("{len}:{t:?}"))
}

fn connect(path: &Path) -> Result<Connection, rusqlite::Error> {
    Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
}

impl Mbtiles {
    /// Opens `file` (read as `name` says; a copy of `remote` when given,
    /// with the version the copy was made at) and reads its metadata.
    pub fn open(
        file: &Path,
        name: &str,
        remote: Option<(Arc<dyn ArchiveBytes>, Option<String>)>,
    ) -> Result<Mbtiles, String> {
        let fail = |what: String| format!("{name}: {what}");
        if !file.is_file() {
            return Err(fail("no such file".into()));
        }
        let conn = connect(file).map_err(|e| fail(format!("cannot open it: {e}")))?;
        let version = match &remote {
            Some((_, copied)) => copied.clone(),
            None => stamp_text(file),
        };
        let metadata = super::read_metadata(&conn, version).map_err(fail)?;
        Ok(Mbtiles {
            file: file.to_path_buf(),
            name: name.to_string(),
            remote: remote.map(|(bytes, _)| bytes),
            idle: Mutex::new((vec![conn], stamp(file))),
            metadata,
        })
    }

    /// An idle connection to the file as it is now (all dropped when it
    /// changed), or a new one.
    fn connection(&self) -> Result<Connection, rusqlite::Error> {
        let now = stamp(&self.file);
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.1 != now {
            if idle.1.is_some() {
                tracing::info!(archive = %self.name, "the archive changed; reading it again");
            }
            idle.0.clear();
            idle.1 = now;
        }
        match idle.0.pop() {
            Some(c) => Ok(c),
            None => {
                drop(idle);
                connect(&self.file)
            }
        }
    }

    fn give_back(&self, conn: Connection) {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.0.len() < KEPT_CONNECTIONS {
            idle.0.push(conn);
        }
    }
}

impl TileArchive for Mbtiles {
    fn tiles(&self, coords: &[TileCoord]) -> Result<Vec<Option<Bytes>>, ArchiveError> {
        let failed = |message: String| ArchiveError {
            archive: self.name.clone(),
            message,
        };
        let conn = self
            .connection()
            .map_err(|e| failed(format!("cannot open it: {e}")))?;
        let found = (|| {
            // A blob past the cap is not read: its length comes alone.
            let mut stmt = conn.prepare_cached(
                "SELECT length(tile_data), CASE WHEN length(tile_data) <= ?4 THEN tile_data END \
                 FROM tiles WHERE zoom_level = ?1 AND tile_column = ?2 AND tile_row = ?3",
            )?;
            coords
                .iter()
                .map(|c| {
                    let row = super::flipped_row(c.z(), c.y());
                    stmt.query_row((c.z(), c.x(), row, MAX_TILE_BYTES as i64), |r| {
                        Ok((r.get::<_, Option<i64>>(0)?, r.get::<_, Option<Vec<u8>>>(1)?))
                    })
                    .optional()
                })
                .collect::<Result<Vec<_>, _>>()
        })();
        let found = match found {
            Ok(f) => {
                self.give_back(conn);
                f
            }
            Err(e) => return Err(failed(format!("cannot read its tiles: {e}"))),
        };
        found
            .into_iter()
            .map(|t| {
                let t = match t {
                    None | Some((None, _)) => None,
                    Some((Some(len), None)) if len > 0 => {
                        return Err(failed(format!(
                            "a tile of {len} bytes, more than {MAX_TILE_BYTES}"
                        )));
                    }
                    Some((_, b)) => Some(b.unwrap_or_default()),
                };
                t.map(|b| {
                    let b = Bytes::from(b);
                    if self.metadata.format == TileFormat::Mvt {
                        packed_once(b, flate2::Compression::fast())
                            .map_err(|e| failed(format!("cannot compress a vector tile: {e}")))
                    } else {
                        Ok(b)
                    }
                })
                .transpose()
            })
            .collect()
    }

    fn describe(&self, coord: TileCoord) -> String {
        format!(
            "{} tile {}/{}/{}",
            self.name,
            coord.z(),
            coord.x(),
            coord.y()
        )
    }

    fn metadata(&self) -> &TileMetadata {
        &self.metadata
    }

    fn version_now(&self) -> Result<Option<String>, String> {
        match &self.remote {
            Some(r) => version_of(r.as_ref()),
            None => Ok(stamp_text(&self.file)),
        }
    }

    fn is_local(&self) -> bool {
        // SQLite's reads cannot be told to take only what the page cache
        // holds, and a query (a `tiles` view) may take any time: never on
        // the caller's thread.
        false
    }
}

/// Copies the archive in `bytes` to a local file under `dir` (default the
/// system's temporary directory), named after the archive and its version
/// (so a copy of the same version is reused), by chunks of
/// [`COPY_CHUNK`] bytes, refusing an archive longer than `max_bytes`;
/// returns its path and the version it copied.
///
/// Nothing is left behind but the one copy: a copy that fails (or passes
/// the cap) is removed, and once a new version is copied the copies of
/// the archive's earlier versions are removed (a reader still holding one
/// open keeps it until it closes it).
pub fn download(
    bytes: &dyn ArchiveBytes,
    dir: Option<&str>,
    max_bytes: u64,
) -> Result<(PathBuf, Option<String>), String> {
    let name = bytes.name();
    let dir = dir.map_or_else(
        || std::env::temp_dir().join("tessera-archives"),
        PathBuf::from,
    );
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let first = futures::executor::block_on(bytes.read(0, COPY_CHUNK))?;
    let version = first.version.clone().unwrap_or_default();
    let archive = format!("{:08x}-", crc32fast::hash(name.as_bytes()));
    let stem = format!("{archive}{:08x}", crc32fast::hash(version.as_bytes()));
    let target = dir.join(format!("{stem}.mbtiles"));
    if target.is_file() && !version.is_empty() {
        return Ok((target, first_version(&version)));
    }
    let partial = dir.join(format!("{stem}.mbtiles.part"));
    let copied = copy_chunks(bytes, first, &partial, max_bytes).and_then(|len| {
        std::fs::rename(&partial, &target)
            .map_err(|e| format!("cannot rename {}: {e}", partial.display()))?;
        Ok(len)
    });
    let len = match copied {
        Ok(len) => len,
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            return Err(e);
        }
    };
    tracing::info!(archive = %name, copy = %target.display(), bytes = len, "copied the archive to read it");
    remove_other_copies(&dir, &archive, &target);
    Ok((target, first_version(&version)))
}

/// Writes the archive in `bytes`, from its `first` chunk on, to `partial`
/// and syncs it; its length, or why not (it changed while copied, it is
/// longer than `max_bytes`, a read or a write failed).
fn copy_chunks(
    bytes: &dyn ArchiveBytes,
    first: Ranged,
    partial: &Path,
    max_bytes: u64,
) -> Result<u64, String> {
    use std::io::Write as _;
    let name = bytes.name();
    let version = first.version.clone();
    let mut out = std::fs::File::create(partial)
        .map_err(|e| format!("cannot create {}: {e}", partial.display()))?;
    let mut offset = 0u64;
    let mut chunk = first;
    loop {
        if chunk.version != version {
            return Err(format!("{name} changed while it was copied; try again"));
        }
        offset += chunk.bytes.len() as u64;
        if offset > max_bytes {
            return Err(format!(
                "{name} is longer than max_copy_bytes ({max_bytes} bytes); raise it to copy it"
            ));
        }
        out.write_all(&chunk.bytes)
            .map_err(|e| format!("cannot write {}: {e}", partial.display()))?;
        if (chunk.bytes.len() as u64) < COPY_CHUNK {
            break;
        }
        chunk = futures::executor::block_on(bytes.read(offset, COPY_CHUNK))?;
    }
    out.sync_all()
        .map_err(|e| format!("cannot write {}: {e}", partial.display()))?;
    Ok(offset)
}

/// Removes the copies of the archive whose copies are named `archive*`
/// under `dir`, but `keep`.
fn remove_other_copies(dir: &Path, archive: &str, keep: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let file_name = entry.file_name();
        let file_name = file_name.to_string_lossy();
        if path != keep && file_name.starts_with(archive) && file_name.ends_with(".mbtiles") {
            let removed = std::fs::remove_file(&path);
            if let Err(e) = &removed {
                tracing::warn!(copy = %path.display(), error = %e, "cannot remove the copy of an earlier version");
            } else {
                tracing::info!(copy = %path.display(), "removed the copy of an earlier version");
            }
        }
    }
}

/// The version a chunk must carry: the first chunk's (none when it had
/// none).
fn first_version(version: &str) -> Option<String> {
    (!version.is_empty()).then(|| version.to_string())
}
