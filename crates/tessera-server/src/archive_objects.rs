//! Tile archives in object stores (`s3://bucket/key.pmtiles`, `gs://`,
//! `az://`): their byte ranges read with the object store clients tessera
//! writes its stores with (the same `AWS_*`/`GOOGLE_*`/`AZURE_*`
//! environment and options, timeouts and retries), on a small runtime of
//! their own so that any thread may wait for them.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock, PoisonError, RwLock};

use futures::future::BoxFuture;
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt as _};
use tessera_source::archive::{ArchiveBytes, Ranged};

/// The runtime object reads run on (one thread, started on first use).
fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("tessera-archives")
            .enable_all()
            .build()
            .expect("the archive I/O runtime starts")
    })
}

/// Runs `future` on the archive runtime; the returned future may be
/// awaited on any executor.
fn on_runtime<T: Send + 'static>(
    future: impl std::future::Future<Output = T> + Send + 'static,
) -> impl std::future::Future<Output = Option<T>> + Send + 'static {
    let (tx, rx) = tokio::sync::oneshot::channel();
    runtime().spawn(async move {
        let _ = tx.send(future.await);
    });
    async move { rx.await.ok() }
}

/// An archive object, read by ranges.
#[derive(Debug)]
pub struct ObjectBytes {
    url: String,
    store: Arc<dyn ObjectStore>,
    path: Path,
    /// Size and `ETag` as last seen (refreshed when the `ETag` changes).
    seen: RwLock<(u64, Option<String>)>,
}

impl ObjectBytes {
    /// Opens the object `url` names (`s3://bucket/key`, ...) with `options`
    /// over the environment, and reads its size.
    pub fn open(url: &str, options: &BTreeMap<String, String>) -> Result<ObjectBytes, String> {
        let location = tessera_store::object::open_url(url, options).map_err(|e| e.to_string())?;
        if location.prefix.as_ref().is_empty() {
            return Err(format!("{url} names no object: give its key"));
        }
        let (store, path) = (location.store.clone(), location.prefix.clone());
        let head = futures::executor::block_on(on_runtime(async move { store.head(&path).await }))
            .ok_or("the archive runtime stopped")?
            .map_err(|e| format!("{url}: {e}"))?;
        Ok(ObjectBytes {
            url: url.to_string(),
            store: location.store,
            path: location.prefix,
            seen: RwLock::new((head.size, head.e_tag)),
        })
    }
}

impl ArchiveBytes for ObjectBytes {
    fn read(&self, offset: u64, len: u64) -> BoxFuture<'_, Result<Ranged, String>> {
        let (size, _) = self
            .seen
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let (store, path, url) = (self.store.clone(), self.path.clone(), self.url.clone());
        Box::pin(async move {
            // Past the end of the object as last seen: no bytes, and the
            // version from a HEAD (the object may have been replaced).
            let end = offset.saturating_add(len).min(size);
            let answer = on_runtime(async move {
                if end <= offset {
                    return store
                        .head(&path)
                        .await
                        .map(|m| (bytes::Bytes::new(), m.e_tag, m.size));
                }
                let options = GetOptions {
                    range: Some(GetRange::Bounded(offset..end)),
                    ..GetOptions::default()
                };
                let got = store.get_opts(&path, options).await?;
                let (tag, total) = (got.meta.e_tag.clone(), got.meta.size);
                Ok((got.bytes().await?, tag, total))
            })
            .await
            .ok_or_else(|| "the archive runtime stopped".to_string())?;
            let (bytes, version, total) = answer.map_err(|e| format!("{url}: {e}"))?;
            let mut seen = self.seen.write().unwrap_or_else(PoisonError::into_inner);
            if seen.1 != version {
                *seen = (total, version.clone());
            }
            Ok(Ranged { bytes, version })
        })
    }

    fn name(&self) -> String {
        self.url.clone()
    }
}
