//! Object stores opened from a URL (`s3://`, `gs://`, `az://`, `file://`)
//! through the `object_store` crate, and [`CountingStore`], a wrapper that
//! counts the requests sent by kind so tests and metrics can tell that reads
//! never LIST.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RetryConfig,
};

/// Client options applied unless the configuration sets them: every request
/// has a deadline.
const DEFAULT_CLIENT_OPTIONS: [(&str, &str); 2] = [("timeout", "30s"), ("connect_timeout", "5s")];

/// An object store and the path prefix inside it that a URL names.
#[derive(Debug, Clone)]
pub struct ObjectLocation {
    /// The store (bucket, container or directory).
    pub store: Arc<dyn ObjectStore>,
    /// The prefix inside it (may be empty).
    pub prefix: Path,
    /// Whether the store honours conditional writes (`PutMode::Update`);
    /// the local file system does not.
    pub conditional_put: bool,
}

/// Opens the object store a URL names:
/// - `s3://bucket/prefix`: credentials, region and endpoint from the
///   `AWS_*` environment variables, then `options` (keys as in
///   `object_store`'s `AmazonS3ConfigKey`, for example `endpoint`,
///   `access_key_id`, `secret_access_key`, `region`, `allow_http`);
/// - `gs://bucket/prefix`: `GOOGLE_*` variables, then options
///   (`service_account_key`, ...);
/// - `az://container/prefix`: `AZURE_*` variables, then options
///   (`account_name`, `access_key`, `use_emulator`, ...);
/// - `file:///absolute/dir`: a directory (created if missing).
///
/// Every client gets a 30 s request timeout and a 5 s connect timeout unless
/// `options` sets `timeout` / `connect_timeout`. Idempotent requests (GET,
/// part uploads, ...) are retried with exponential back-off on 5xx answers
/// and connection errors: `max_retries` (default 10) times within
/// `retry_timeout_secs` (default 180).
pub fn open_url(
    url: &str,
    options: &BTreeMap<String, String>,
) -> Result<ObjectLocation, object_store::Error> {
    let bad = |m: String| object_store::Error::Generic {
        store: "url",
        source: m.into(),
    };
    let parsed = url::Url::parse(url).map_err(|e| bad(format!("{url:?} is not a URL: {e}")))?;
    let mut retry = RetryConfig::default();
    let mut given = Vec::new();
    for (k, v) in options {
        let number = || {
            v.parse::<u64>()
                .map_err(|_| bad(format!("option {k:?}: {v:?} is not a whole number")))
        };
        match k.as_str() {
            "max_retries" => retry.max_retries = number()? as usize,
            "retry_timeout_secs" => retry.retry_timeout = Duration::from_secs(number()?),
            _ => given.push((k.clone(), v.clone())),
        }
    }
    let mut options = given;
    for (k, v) in DEFAULT_CLIENT_OPTIONS {
        if !options.iter().any(|(o, _)| o == k) {
            options.push((k.into(), v.into()));
        }
    }
    let key_err = |k: &str, e: object_store::Error| bad(format!("option {k:?}: {e}"));
    let prefix = Path::from_url_path(parsed.path())?;
    let (store, prefix, conditional_put): (Arc<dyn ObjectStore>, Path, bool) = match parsed.scheme()
    {
        "s3" | "s3a" => {
            let mut b = AmazonS3Builder::from_env()
                .with_url(url)
                .with_retry(retry.clone());
            for (k, v) in &options {
                let key: AmazonS3ConfigKey = k.parse().map_err(|e| key_err(k, e))?;
                b = b.with_config(key, v);
            }
            (Arc::new(b.build()?), prefix, true)
        }
        "gs" => {
            let mut b = GoogleCloudStorageBuilder::from_env()
                .with_url(url)
                .with_retry(retry.clone());
            for (k, v) in &options {
                let key: GoogleConfigKey = k.parse().map_err(|e| key_err(k, e))?;
                b = b.with_config(key, v);
            }
            (Arc::new(b.build()?), prefix, true)
        }
        "az" | "azure" | "abfs" | "abfss" => {
            let mut b = MicrosoftAzureBuilder::from_env()
                .with_url(url)
                .with_retry(retry.clone());
            for (k, v) in &options {
                let key: AzureConfigKey = k.parse().map_err(|e| key_err(k, e))?;
                b = b.with_config(key, v);
            }
            (Arc::new(b.build()?), prefix, true)
        }
        "file" => {
            let dir = parsed
                .to_file_path()
                .map_err(|()| bad(format!("{url:?} is not an absolute file URL")))?;
            std::fs::create_dir_all(&dir)
                .map_err(|e| bad(format!("cannot create {}: {e}", dir.display())))?;
            (
                Arc::new(LocalFileSystem::new_with_prefix(&dir)?),
                Path::default(),
                false,
            )
        }
        other => {
            return Err(bad(format!(
                "unsupported scheme {other:?} in {url:?} (use s3://, gs://, az:// or file://)"
            )));
        }
    };
    Ok(ObjectLocation {
        store,
        prefix,
        conditional_put,
    })
}

/// Requests sent to an object store, by kind.
#[derive(Debug, Default)]
pub struct RequestCounts {
    get: AtomicU64,
    head: AtomicU64,
    put: AtomicU64,
    delete: AtomicU64,
    list: AtomicU64,
    multipart: AtomicU64,
    copy: AtomicU64,
}

/// A copy of [`RequestCounts`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestSnapshot {
    /// GET requests (whole objects or ranges).
    pub get: u64,
    /// HEAD requests.
    pub head: u64,
    /// PUT requests of whole objects.
    pub put: u64,
    /// Objects deleted (a batch delete counts each key).
    pub delete: u64,
    /// LIST requests (listing calls).
    pub list: u64,
    /// Multipart uploads started.
    pub multipart: u64,
    /// Copies.
    pub copy: u64,
}

impl RequestSnapshot {
    /// All requests.
    pub fn total(&self) -> u64 {
        self.get + self.head + self.put + self.delete + self.list + self.multipart + self.copy
    }

    /// The requests sent between `earlier` and `self`.
    #[must_use]
    pub fn since(&self, earlier: &RequestSnapshot) -> RequestSnapshot {
        RequestSnapshot {
            get: self.get - earlier.get,
            head: self.head - earlier.head,
            put: self.put - earlier.put,
            delete: self.delete - earlier.delete,
            list: self.list - earlier.list,
            multipart: self.multipart - earlier.multipart,
            copy: self.copy - earlier.copy,
        }
    }
}

impl RequestCounts {
    /// The counts now.
    pub fn snapshot(&self) -> RequestSnapshot {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        RequestSnapshot {
            get: r(&self.get),
            head: r(&self.head),
            put: r(&self.put),
            delete: r(&self.delete),
            list: r(&self.list),
            multipart: r(&self.multipart),
            copy: r(&self.copy),
        }
    }
}

fn bump(a: &AtomicU64) {
    a.fetch_add(1, Ordering::Relaxed);
}

/// An [`ObjectStore`] that forwards every call and counts it in
/// [`RequestCounts`].
#[derive(Debug)]
pub struct CountingStore {
    inner: Arc<dyn ObjectStore>,
    counts: Arc<RequestCounts>,
}

impl CountingStore {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn ObjectStore>) -> CountingStore {
        CountingStore {
            inner,
            counts: Arc::default(),
        }
    }

    /// The counters (shared, live).
    pub fn counts(&self) -> Arc<RequestCounts> {
        self.counts.clone()
    }
}

impl fmt::Display for CountingStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Counting({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for CountingStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        bump(&self.counts.put);
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        bump(&self.counts.multipart);
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        bump(if options.head {
            &self.counts.head
        } else {
            &self.counts.get
        });
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        bump(&self.counts.get);
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let counts = self.counts.clone();
        let counted = locations
            .inspect(move |p| {
                if p.is_ok() {
                    bump(&counts.delete);
                }
            })
            .boxed();
        self.inner.delete_stream(counted)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        bump(&self.counts.list);
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        bump(&self.counts.list);
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        bump(&self.counts.list);
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        bump(&self.counts.copy);
        self.inner.copy_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_pick_the_backend_and_bad_ones_are_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("file://{}/tiles", dir.path().display());
        let loc = open_url(&url, &BTreeMap::new()).expect("file url");
        assert!(!loc.conditional_put);
        assert!(dir.path().join("tiles").is_dir());
        let s3 = open_url(
            "s3://bucket/some/prefix",
            &BTreeMap::from([
                ("endpoint".into(), "http://127.0.0.1:9".into()),
                ("region".into(), "us-east-1".into()),
                ("allow_http".into(), "true".into()),
            ]),
        )
        .expect("s3 url");
        assert_eq!(s3.prefix.as_ref(), "some/prefix");
        assert!(s3.conditional_put);
        let e = open_url("ftp://x/y", &BTreeMap::new()).expect_err("ftp");
        assert!(e.to_string().contains("unsupported scheme"), "{e}");
        let e = open_url(
            "s3://b/p",
            &BTreeMap::from([("colour".into(), "red".into())]),
        )
        .expect_err("unknown option");
        assert!(e.to_string().contains("colour"), "{e}");
        assert!(open_url("not a url", &BTreeMap::new()).is_err());
    }
}
