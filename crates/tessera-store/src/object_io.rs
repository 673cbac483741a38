//! [`ObjectIo`]: the blocking face of an async object store client that
//! the stores on object storage share ([`crate::PackStore`],
//! [`crate::TileObjectStore`]): its own small runtime, request counts, and
//! the few calls they make (whole-object and ranged GET, conditional PUT, batch
//! DELETE, the create-only fingerprint record).

use std::future::Future;
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{
    Attributes, GetOptions, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload,
    UpdateVersion,
};

use crate::object::{CountingStore, ObjectLocation, RequestCounts, RequestSnapshot};
use crate::{StoreError, TruncateProgress};

/// An object read whole: its bytes, version and modification time.
#[derive(Debug, Clone)]
pub(crate) struct Fetched {
    pub bytes: Bytes,
    pub version: UpdateVersion,
    pub modified: SystemTime,
}

/// What a ranged read found.
#[derive(Debug)]
pub(crate) enum RangeRead {
    /// The bytes, and the object's ETag when the store gives one.
    Bytes(Bytes, Option<String>),
    /// No such object.
    Missing,
    /// The object is no longer the version asked for.
    Changed,
}

/// An object store client driven from blocking threads.
#[derive(Debug)]
pub(crate) struct ObjectIo {
    store: Arc<dyn ObjectStore>,
    counts: Arc<RequestCounts>,
    /// The prefix every key is under.
    pub prefix: Path,
    /// Whether the store honours conditional overwrites.
    pub conditional_put: bool,
    runtime: Option<tokio::runtime::Runtime>,
}

impl ObjectIo {
    /// A client over `location` with `threads` I/O threads.
    pub fn new(location: ObjectLocation, threads: usize) -> Result<ObjectIo, StoreError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name("tessera-object-io")
            .enable_all()
            .build()
            .map_err(|e| StoreError::Invalid {
                store: "object".into(),
                message: format!("cannot start the I/O runtime: {e}"),
            })?;
        let counting = CountingStore::new(location.store);
        Ok(ObjectIo {
            counts: counting.counts(),
            store: Arc::new(counting),
            prefix: location.prefix,
            conditional_put: location.conditional_put,
            runtime: Some(runtime),
        })
    }

    /// Requests sent so far, by kind.
    pub fn requests(&self) -> RequestSnapshot {
        self.counts.snapshot()
    }

    /// Runs `f` on the client's runtime and waits for it (callers are
    /// blocking threads, as the `TileStore` contract says).
    pub fn run<T: Send + 'static>(&self, f: impl Future<Output = T> + Send + 'static) -> T {
        let rt = self.runtime.as_ref().expect("the runtime lives until drop");
        futures::executor::block_on(rt.spawn(f))
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
    }

    /// A [`StoreError::Io`] of the object store.
    pub fn io(op: &'static str, key: &str, e: impl Into<crate::Cause>) -> StoreError {
        StoreError::Io {
            store: "object".into(),
            op,
            key: key.to_string(),
            source: e.into(),
        }
    }

    /// The object at `path`, `None` when it does not exist.
    pub fn fetch(&self, path: &Path) -> Result<Option<Fetched>, StoreError> {
        let store = self.store.clone();
        let p = path.clone();
        let got = self.run(async move {
            match store.get(&p).await {
                Ok(r) => {
                    let version = UpdateVersion {
                        e_tag: r.meta.e_tag.clone(),
                        version: r.meta.version.clone(),
                    };
                    let modified = SystemTime::from(r.meta.last_modified);
                    r.bytes().await.map(|bytes| {
                        Some(Fetched {
                            bytes,
                            version,
                            modified,
                        })
                    })
                }
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        });
        got.map_err(|e| Self::io("get", path.as_ref(), e))
    }

    /// Bytes `range` of the object at `path` (fewer when the object ends
    /// first) with the object's ETag; when `if_match` is given, only from
    /// that version of the object.
    pub fn fetch_range(
        &self,
        path: &Path,
        range: std::ops::Range<u64>,
        if_match: Option<String>,
    ) -> Result<RangeRead, StoreError> {
        let store = self.store.clone();
        let p = path.clone();
        let got = self.run(async move {
            let options = GetOptions {
                range: Some(range.into()),
                if_match,
                ..GetOptions::default()
            };
            match store.get_opts(&p, options).await {
                Ok(r) => {
                    let e_tag = r.meta.e_tag.clone();
                    r.bytes().await.map(|b| RangeRead::Bytes(b, e_tag))
                }
                Err(object_store::Error::NotFound { .. }) => Ok(RangeRead::Missing),
                Err(object_store::Error::Precondition { .. }) => Ok(RangeRead::Changed),
                Err(e) => Err(e),
            }
        });
        got.map_err(|e| Self::io("get", path.as_ref(), e))
    }

    /// Writes `body` under `path` with `mode` and `attributes`;
    /// `Ok(false)` when the condition failed (someone else wrote first).
    pub fn put(
        &self,
        path: &Path,
        body: PutPayload,
        mode: PutMode,
        attributes: Attributes,
    ) -> Result<bool, StoreError> {
        Ok(self.put_versioned(path, body, mode, attributes)?.is_some())
    }

    /// [`ObjectIo::put`] returning the version written (`None`: the
    /// condition failed).
    pub fn put_versioned(
        &self,
        path: &Path,
        body: PutPayload,
        mode: PutMode,
        attributes: Attributes,
    ) -> Result<Option<UpdateVersion>, StoreError> {
        let store = self.store.clone();
        let p = path.clone();
        let result = self.run(async move {
            let opts = PutOptions {
                mode,
                attributes,
                ..PutOptions::default()
            };
            store.put_opts(&p, body, opts).await
        });
        match result {
            Ok(r) => Ok(Some(UpdateVersion {
                e_tag: r.e_tag,
                version: r.version,
            })),
            Err(
                object_store::Error::Precondition { .. }
                | object_store::Error::AlreadyExists { .. },
            ) => Ok(None),
            Err(e) => Err(Self::io("put", path.as_ref(), e)),
        }
    }

    /// Writes every object (unconditionally), `in_flight` at once; the
    /// first failure is returned once all have ended.
    pub fn put_all(
        &self,
        objects: Vec<(Path, PutPayload, Attributes)>,
        in_flight: usize,
    ) -> Result<(), StoreError> {
        let store = self.store.clone();
        let results: Vec<(Path, object_store::Result<_>)> = self.run(async move {
            futures::stream::iter(objects.into_iter().map(|(path, body, attributes)| {
                let store = store.clone();
                async move {
                    let opts = PutOptions {
                        attributes,
                        ..PutOptions::default()
                    };
                    let r = store.put_opts(&path, body, opts).await;
                    (path, r)
                }
            }))
            .buffer_unordered(in_flight.max(1))
            .collect()
            .await
        });
        for (path, r) in results {
            r.map_err(|e| Self::io("put", path.as_ref(), e))?;
        }
        Ok(())
    }

    /// `prefix/layer/grid/z`: where a zoom's objects are, in both layouts.
    pub fn zoom_prefix(&self, layer: &str, grid: &str, z: u8) -> Path {
        self.prefix
            .clone()
            .join(layer)
            .join(grid)
            .join(z.to_string().as_str())
    }

    /// The names (decoded) of the "directories" right under the store's
    /// prefix that start with `start` (layer keys), sorted: one listing with a
    /// delimiter (a page per thousand names), never a walk of the objects.
    pub fn layer_dirs(&self, start: &str) -> Result<Vec<String>, StoreError> {
        let store = self.store.clone();
        let under = self.prefix.clone();
        let listed = self
            .run(async move { store.list_with_delimiter(Some(&under)).await })
            .map_err(|e| Self::io("list", self.prefix.as_ref(), e))?;
        // Names come as stored: with the characters object keys avoid
        // (`~` among them) percent-encoded.
        let mut names: Vec<String> = listed
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename())
            .filter_map(|name| {
                percent_encoding::percent_decode_str(name)
                    .decode_utf8()
                    .ok()
            })
            .filter(|name| name.starts_with(start))
            .map(std::borrow::Cow::into_owned)
            .collect();
        names.sort();
        Ok(names)
    }

    /// Lists the keys under `prefix` in key order, handing each page of at
    /// most `page_len` keys to `each`; stops at the end, at an error, or
    /// when `progress` is cancelled (as `store`).
    pub fn for_each_page(
        &self,
        prefix: &Path,
        page_len: usize,
        progress: &TruncateProgress,
        store: &str,
        mut each: impl FnMut(Vec<Path>) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let mut offset: Option<Path> = None;
        loop {
            progress.check(store)?;
            let page = self.list_after(prefix, offset.as_ref(), page_len)?;
            let Some(last) = page.last().cloned() else {
                return Ok(());
            };
            each(page)?;
            offset = Some(last);
        }
    }

    /// Up to `most` keys under `prefix` that sort after `offset` (from the
    /// first when `None`), in key order: one page of a listing.
    fn list_after(
        &self,
        prefix: &Path,
        offset: Option<&Path>,
        most: usize,
    ) -> Result<Vec<Path>, StoreError> {
        let store = self.store.clone();
        let (under, after) = (prefix.clone(), offset.cloned());
        self.run(async move {
            let listing = match &after {
                Some(o) => store.list_with_offset(Some(&under), o),
                None => store.list(Some(&under)),
            };
            listing
                .take(most)
                .map_ok(|meta| meta.location)
                .try_collect::<Vec<Path>>()
                .await
        })
        .map_err(|e| Self::io("list", prefix.as_ref(), e))
    }

    /// Deletes objects in batches of `batch`; missing ones count as
    /// deleted.
    pub fn delete(&self, paths: &[Path], batch: usize) -> Result<u64, StoreError> {
        let mut deleted = 0;
        for chunk in paths.chunks(batch.max(1)) {
            let store = self.store.clone();
            let chunk = chunk.to_vec();
            let n = chunk.len() as u64;
            let first = chunk.first().map(ToString::to_string).unwrap_or_default();
            self.run(async move {
                let stream = futures::stream::iter(chunk.into_iter().map(Ok)).boxed();
                store
                    .delete_stream(stream)
                    .map(|r| match r {
                        Err(object_store::Error::NotFound { .. }) => Ok(()),
                        other => other.map(|_| ()),
                    })
                    .try_collect::<Vec<()>>()
                    .await
            })
            .map_err(|e| Self::io("delete", &first, e))?;
            deleted += n;
        }
        Ok(deleted)
    }

    /// The fingerprint recorded in `<prefix>/<layer>/fingerprint`, created
    /// with a create-only PUT (which every backend honours, the local file
    /// system too) so that nodes sharing the bucket agree on the first
    /// claim.
    pub fn claim_fingerprint(&self, layer: &str, fingerprint: &str) -> Result<String, StoreError> {
        let path = self.prefix.clone().join(layer).join("fingerprint");
        for _ in 0..3 {
            if let Some(f) = self.fetch(&path)? {
                let recorded = String::from_utf8_lossy(&f.bytes).trim().to_string();
                if !recorded.is_empty() {
                    return Ok(recorded);
                }
            }
            let body = PutPayload::from(fingerprint.as_bytes().to_vec());
            if self.put(&path, body, PutMode::Create, Attributes::new())? {
                return Ok(fingerprint.to_string());
            }
        }
        Err(Self::io(
            "claim",
            path.as_ref(),
            "the fingerprint object was created by another writer but cannot be read",
        ))
    }
}

impl Drop for ObjectIo {
    fn drop(&mut self) {
        // Dropping a runtime blocks, which is refused inside async code.
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}
