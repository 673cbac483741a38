//! Byte ranges of an archive, wherever it lies: a local file (read with
//! `pread`, reopened when the path names another file), an HTTP(S) URL
//! (range requests by the upstream client: timeouts, retries, the egress
//! guard), or an object (implemented by the server).

use std::fmt::Debug;
use std::os::unix::fs::{FileExt as _, MetadataExt as _};
use std::sync::{Arc, PoisonError, RwLock};

use bytes::Bytes;
use futures::future::BoxFuture;

use crate::upstream::client::{HttpSettings, NetworkPolicy, UpstreamClient, redacted};

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
    /// then takes as long as the page cache or the disk, and may be made
    /// on the caller's thread.
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
            open.file
                .read_exact_at(&mut buf, offset)
                .map_err(|e| format!("cannot read {} at {offset}: {e}", self.path))?;
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

/// An archive at an HTTP(S) URL, read by range requests.
#[derive(Debug)]
pub struct HttpBytes {
    url: reqwest::Url,
    client: Arc<UpstreamClient>,
}

impl HttpBytes {
    /// A reader of `url` (checked against the egress policy).
    pub fn open(
        url: &str,
        settings: HttpSettings,
        policy: NetworkPolicy,
    ) -> Result<HttpBytes, String> {
        let url = reqwest::Url::parse(url).map_err(|e| format!("not a URL: {e}"))?;
        let client = UpstreamClient::new(
            &url,
            settings,
            policy,
            &std::collections::BTreeMap::new(),
            None,
        )?;
        Ok(HttpBytes {
            url,
            client: Arc::new(client),
        })
    }
}

impl ArchiveBytes for HttpBytes {
    fn read(&self, offset: u64, len: u64) -> BoxFuture<'_, Result<Ranged, String>> {
        let asked = self.client.get_range(self.url.clone(), offset, len);
        let name = redacted(&self.url);
        Box::pin(async move {
            let fetched = asked.await.map_err(|e| format!("{name}: {e}"))?;
            if fetched.status != 206 {
                return Err(format!(
                    "{name} answered {} to a range request",
                    fetched.status
                ));
            }
            let mut bytes = fetched.body;
            let most = usize::try_from(len).unwrap_or(usize::MAX);
            if bytes.len() > most {
                bytes.truncate(most);
            }
            Ok(Ranged {
                bytes,
                version: fetched.etag,
            })
        })
    }

    fn name(&self) -> String {
        redacted(&self.url)
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
