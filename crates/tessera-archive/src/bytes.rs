//! Byte ranges of an archive, wherever it lies: a local file (read with
//! `pread`, reopened when the path names another file), an HTTP(S) URL
//! (`http_bytes.rs`), or an object (implemented by the server).

use std::fmt::Debug;
use std::os::unix::fs::{FileExt as _, MetadataExt as _};
use std::sync::{Arc, PoisonError, RwLock};

use bytes::Bytes;
use futures::future::BoxFuture;

thread_local! {
    /// Whether local reads on this thread may only take what the page
    /// cache holds ([`without_waiting`]).
    static NO_WAIT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Whether a local read on this thread found a page not in the cache
    /// since [`without_waiting`] began.
    static WOULD_WAIT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// What a local read that would have waited for the disk fails with,
/// inside [`without_waiting`].
pub const WOULD_WAIT_MESSAGE: &str = "a local read would wait for the disk";

/// Runs `read` (reads of local archives) on this thread, answering only
/// from the page cache: `None` when any local read it made would have
/// waited for the disk (its result is dropped: run it again where waiting
/// is fine, a blocking thread), its result otherwise. A connection thread
/// thus serves warm archive tiles itself and is never held by a cold disk.
pub fn without_waiting<T>(read: impl FnOnce() -> T) -> Option<T> {
    struct Restore;
    impl Drop for Restore {
        fn drop(&mut self) {
            NO_WAIT.set(false);
        }
    }
    NO_WAIT.set(true);
    WOULD_WAIT.set(false);
    let restore = Restore;
    let out = read();
    drop(restore);
    (!WOULD_WAIT.replace(false)).then_some(out)
}

/// Reads `buf.len()` bytes of `file` at `offset` from the page cache only
/// (`preadv2` with `RWF_NOWAIT`); `false` when some of them are not there.
fn read_cached(file: &std::fs::File, buf: &mut [u8], offset: u64) -> bool {
    use std::os::fd::AsRawFd as _;
    let mut done = 0usize;
    while done < buf.len() {
        let rest = &mut buf[done..];
        let iov = libc::iovec {
            iov_base: rest.as_mut_ptr().cast(),
            iov_len: rest.len(),
        };
        let Ok(at) = libc::off_t::try_from(offset + done as u64) else {
            return false;
        };
        // SAFETY: `iov` points at `rest`, live and `rest.len()` bytes long
        // for the whole call; the descriptor is `file`'s, open and owned.
        let n = unsafe { libc::preadv2(file.as_raw_fd(), &raw const iov, 1, at, libc::RWF_NOWAIT) };
        match usize::try_from(n) {
            Ok(n) if n > 0 => done += n,
            // 0 (the end, or nothing cached) or an error (EAGAIN).
            _ => return false,
        }
    }
    true
}

/// Bytes read from an archive, and the version of the archive they came
/// from (an `ETag`, or a local file's identity, size and time): a version
/// that changes says the archive was replaced.
#[derive(Debug, Clone)]
pub struct Ranged {
    /// The bytes: as many as asked, fewer at the end of the archive.
    pub bytes: Bytes,
    /// The archive's version, when known.
    pub version: Option<String>,
}

/// An archive's bytes by range.
pub trait ArchiveBytes: Send + Sync + Debug {
    /// `len` bytes from `offset` (fewer past the end); the future may be
    /// awaited on any executor. An error is a message naming the archive.
    fn read(&self, offset: u64, len: u64) -> BoxFuture<'_, Result<Ranged, String>>;

    /// The archive's path or URL (without secrets), for messages.
    fn name(&self) -> String;

    /// Whether the bytes are read from a local file (no network): a read
    /// then takes as long as the page cache or the disk, and may be tried
    /// on the caller's thread inside [`without_waiting`].
    fn is_local(&self) -> bool {
        false
    }
}

/// The version of the archive in `bytes` now (from an empty read).
pub fn version_of(bytes: &dyn ArchiveBytes) -> Result<Option<String>, String> {
    futures::executor::block_on(bytes.read(0, 0)).map(|r| r.version)
}

/// A local file, read with `pread`. The path is looked at on every read
/// (one `stat`): when it names another file than the one open (replaced by
/// a rename) or the file changed size or time, it is opened again and the
/// version changes.
#[derive(Debug)]
pub struct LocalBytes {
    path: String,
    open: RwLock<Arc<Open>>,
}

/// A file's identity, size and modification time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: i64,
    mtime_nsec: i64,
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Stamp {
        Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime: meta.mtime(),
            mtime_nsec: meta.mtime_nsec(),
        }
    }
}

/// The file open now, its stamp, and the version reads report.
#[derive(Debug)]
struct Open {
    file: std::fs::File,
    stamp: Stamp,
    version: String,
}

impl Open {
    fn at(path: &str) -> Result<Open, String> {
        let file = std::fs::File::open(path).map_err(|e| format!("cannot open {path}: {e}"))?;
        let meta = file
            .metadata()
            .map_err(|e| format!("cannot read {path}: {e}"))?;
        if !meta.is_file() {
            return Err(format!("{path} is not a file"));
        }
        let stamp = Stamp::of(&meta);
        let version = format!(
            "{}:{}:{}:{}.{}",
            stamp.dev, stamp.ino, stamp.len, stamp.mtime, stamp.mtime_nsec
        );
        Ok(Open {
            file,
            stamp,
            version,
        })
    }
}

impl LocalBytes {
    /// Opens `path`.
    pub fn open(path: &str) -> Result<LocalBytes, String> {
        Ok(LocalBytes {
            path: path.to_string(),
            open: RwLock::new(Arc::new(Open::at(path)?)),
        })
    }

    /// The file open now, opened again when the path names a changed one.
    fn current(&self) -> Result<Arc<Open>, String> {
        let now = std::fs::metadata(&self.path)
            .map(|m| Stamp::of(&m))
            .map_err(|e| format!("cannot read {}: {e}", self.path))?;
        let open = self
            .open
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if open.stamp == now {
            return Ok(open);
        }
        let fresh = Arc::new(Open::at(&self.path)?);
        *self.open.write().unwrap_or_else(PoisonError::into_inner) = fresh.clone();
        Ok(fresh)
    }
}

impl ArchiveBytes for LocalBytes {
    fn read(&self, offset: u64, len: u64) -> BoxFuture<'_, Result<Ranged, String>> {
        let result = (|| {
            let open = self.current()?;
            let want = len.min(open.stamp.len.saturating_sub(offset));
            let mut buf = vec![0u8; usize::try_from(want).map_err(|_| "range too large")?];
            if NO_WAIT.get() {
                if !read_cached(&open.file, &mut buf, offset) {
                    WOULD_WAIT.set(true);
                    return Err(format!("{}: {WOULD_WAIT_MESSAGE}", self.path));
                }
            } else {
                open.file
                    .read_exact_at(&mut buf, offset)
                    .map_err(|e| format!("cannot read {} at {offset}: {e}", self.path))?;
            }
            Ok(Ranged {
                bytes: Bytes::from(buf),
                version: Some(open.version.clone()),
            })
        })();
        Box::pin(std::future::ready(result))
    }

    fn name(&self) -> String {
        self.path.clone()
    }

    fn is_local(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_file_is_read_by_range_and_noticed_when_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.bin");
        std::fs::write(&path, b"0123456789").unwrap();
        let bytes = LocalBytes::open(path.to_str().unwrap()).unwrap();
        let read = |o, l| futures::executor::block_on(bytes.read(o, l)).unwrap();
        let first = read(2, 3);
        assert_eq!(&first.bytes[..], b"234");
        assert_eq!(&read(8, 10).bytes[..], b"89", "cut at the end");
        assert!(read(20, 5).bytes.is_empty());
        let replacement = dir.path().join("b.bin");
        std::fs::write(&replacement, b"abcdefghijk").unwrap();
        std::fs::rename(&replacement, &path).unwrap();
        let after = read(2, 3);
        assert_eq!(&after.bytes[..], b"cde");
        assert_ne!(after.version, first.version);
    }
}
