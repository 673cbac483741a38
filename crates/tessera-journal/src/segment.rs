//! Segment files: `seg-<id>.log`, pre-allocated to a fixed size, starting
//! with a header.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::format::{HEADER_LEN, header};

/// The file name of segment `id`.
pub fn file_name(id: u64) -> String {
    format!("seg-{id:016x}.log")
}

/// The segment id a file name names, if it is a segment.
pub fn parse_name(name: &str) -> Option<u64> {
    let hex = name.strip_prefix("seg-")?.strip_suffix(".log")?;
    (hex.len() == 16).then(|| u64::from_str_radix(hex, 16).ok())?
}

/// Segment ids found in `dir`, in order.
pub fn list(dir: &Path) -> io::Result<Vec<u64>> {
    let mut ids: Vec<u64> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .filter_map(|e| parse_name(&e.file_name().to_string_lossy()))
        .collect();
    ids.sort_unstable();
    Ok(ids)
}

/// Reserves `len` bytes of disk for `file`, so that writes inside the
/// segment can never fail for lack of space.
pub fn preallocate(file: &File, len: u64) -> io::Result<()> {
    let len = libc::off_t::try_from(len).map_err(|_| io::Error::other("segment size too large"))?;
    // SAFETY: a valid open descriptor and a non-negative range.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) };
    match rc {
        0 => Ok(()),
        // File systems without fallocate: fall back to a sparse length.
        libc::EOPNOTSUPP | libc::EINVAL => file.set_len(len as u64),
        e => Err(io::Error::from_raw_os_error(e)),
    }
}

/// Released segments kept for reuse; more are deleted, so that a journal
/// whose tiles were deleted (a quota's evictions) shrinks once compacted.
pub const MAX_FREE: usize = 2;

/// Moves a segment to the free pool (`free-<id>.log`), to be reused by
/// [`create`] instead of allocating a new file; with [`MAX_FREE`] there
/// already, deletes it instead.
pub fn retire(dir: &Path, id: u64) -> io::Result<()> {
    let mut free = 0;
    for e in std::fs::read_dir(dir)? {
        let name = e?.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("free-") && name.ends_with(".log") {
            free += 1;
        }
    }
    if free >= MAX_FREE {
        std::fs::remove_file(dir.join(file_name(id)))?;
    } else {
        std::fs::rename(
            dir.join(file_name(id)),
            dir.join(format!("free-{id:016x}.log")),
        )?;
    }
    sync_dir(dir)
}

/// A file ready to become a segment: a released one from the free pool
/// first, else a spare made ahead by [`prepare_spare`].
fn take_free(dir: &Path) -> io::Result<Option<PathBuf>> {
    let mut spare = None;
    for e in std::fs::read_dir(dir)? {
        let name = e?.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("free-") && name.ends_with(".log") {
            return Ok(Some(dir.join(name.as_ref())));
        }
        if name.starts_with("spare-") && name.ends_with(".log") {
            spare = Some(dir.join(name.as_ref()));
        }
    }
    Ok(spare)
}

/// Whether a file ready to become a segment waits in `dir`: a spare
/// (`spare-*.log`) or a released segment (`free-*.log`).
pub fn has_spare(dir: &Path) -> io::Result<bool> {
    Ok(take_free(dir)?.is_some())
}

/// Makes a spare segment file ahead of need, so that a segment roll only
/// renames it and writes a header: reserved with `fallocate`, and when
/// `zero` is set also written through with zeros (ext4 then has no
/// unwritten extents to convert, so a later `fdatasync` writes data only).
/// Built under a temporary name and renamed into place once synced, so a
/// crash never leaves half a spare; `stop` abandons it between chunks.
pub fn prepare_spare(
    dir: &Path,
    size: u64,
    zero: bool,
    stop: &std::sync::atomic::AtomicBool,
) -> io::Result<()> {
    let tmp = dir.join(SPARE_TMP);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)?;
    let result = (|| {
        preallocate(&file, size)?;
        if zero {
            let chunk = vec![0u8; 1 << 20];
            let mut at = 0;
            while at < size {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    return Err(io::Error::other("journal closing"));
                }
                let n = (size - at).min(chunk.len() as u64) as usize;
                file.write_all_at(&chunk[..n], at)?;
                at += n as u64;
            }
        }
        file.sync_all()?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        std::fs::rename(&tmp, dir.join(format!("spare-{nanos:032x}.log")))?;
        sync_dir(dir)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Removes a spare left half made by a crash.
pub fn remove_unfinished_spare(dir: &Path) -> io::Result<()> {
    match std::fs::remove_file(dir.join(SPARE_TMP)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

const SPARE_TMP: &str = "spare.tmp";

/// Creates segment `id` in `dir`: a recycled file from the free pool or a
/// spare when there is one (a recycled file's old records carry another
/// segment id and are never read as records), else a new pre-allocated
/// file; header written and synced, directory synced.
pub fn create(dir: &Path, id: u64, size: u64) -> io::Result<File> {
    let path = dir.join(file_name(id));
    if let Some(free) = take_free(dir)? {
        std::fs::rename(&free, &path)?;
        let result = (|| {
            let file = OpenOptions::new().read(true).write(true).open(&path)?;
            preallocate(&file, size)?;
            file.write_all_at(&header(id), 0)?;
            // The first frame slot must not look like a record of this id.
            file.write_all_at(&[0u8; crate::format::FRAME_LEN], u64::from(HEADER_LEN))?;
            file.sync_all()?;
            sync_dir(dir)?;
            Ok(file)
        })();
        if result.is_err() {
            // Back to the pool: a segment file whose header names another
            // segment must not be left where recovery reads segments.
            if std::fs::rename(&path, &free).is_err() {
                let _ = std::fs::remove_file(&path);
            }
        }
        return result;
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)?;
    let result = (|| {
        preallocate(&file, size)?;
        file.write_all_at(&header(id), 0)?;
        file.sync_all()?;
        sync_dir(dir)
    })();
    if let Err(e) = result {
        drop(file);
        let _ = std::fs::remove_file(&path);
        return Err(e);
    }
    Ok(file)
}

/// Opens an existing segment for reading and writing.
pub fn open(dir: &Path, id: u64) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(dir.join(file_name(id)))
}

/// Path of segment `id`.
pub fn path(dir: &Path, id: u64) -> PathBuf {
    dir.join(file_name(id))
}

/// Syncs a directory's entries.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Reads as much of `[offset, offset + buf.len())` as the file holds;
/// returns the bytes read (short at the end of the file).
pub fn read_upto(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Bytes of a segment available for records.
pub fn capacity(size: u64) -> u64 {
    size - u64::from(HEADER_LEN)
}
