//! [`Upload`]: one large object written to an object store as it arrives,
//! as a multipart upload with a bounded number of parts in flight (memory
//! bound: `parts_in_flight` x `part_size`, the part being filled included:
//! a new part starts filling only when one of them is free), or as a single
//! PUT when it turns out smaller than one part. The bytes given are copied
//! into part buffers of exactly `part_size`, reused from part to part: the
//! caller's buffers (a request's frames, which would keep whole receive
//! buffers alive) are free as soon as `write` returns, and no part is
//! faulted into memory afresh. Bytes are sent as they are given: nothing
//! is compressed. Part uploads are idempotent and the client retries them with
//! back-off (`object::open_url` options `max_retries`,
//! `retry_timeout_secs`); on a final failure, on [`Upload::abort`] or when
//! an unfinished upload is dropped (a client that went away), the multipart
//! upload is aborted, so no object and no orphaned parts are left.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use object_store::path::Path;
use object_store::{MultipartUpload, ObjectStore, ObjectStoreExt, PutPayload};

/// The smallest part S3 accepts (except the last).
pub const MIN_PART_SIZE: usize = 5 << 20;

/// How an [`Upload`] sends its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UploadOptions {
    /// Bytes per part (at least [`MIN_PART_SIZE`]; every part but the last
    /// is exactly this size).
    pub part_size: usize,
    /// Parts uploading at once (at least 1).
    pub parts_in_flight: usize,
}

impl Default for UploadOptions {
    fn default() -> UploadOptions {
        UploadOptions {
            part_size: 16 << 20,
            parts_in_flight: 4,
        }
    }
}

impl UploadOptions {
    /// Checks the limits, with a message naming the bad value.
    pub fn validate(&self) -> Result<(), String> {
        if self.part_size < MIN_PART_SIZE {
            return Err(format!(
                "part size {} B is below the 5 MiB object stores require",
                self.part_size
            ));
        }
        if self.parts_in_flight == 0 {
            return Err("parts in flight must be at least 1".into());
        }
        Ok(())
    }
}

/// What an upload stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uploaded {
    /// Bytes stored.
    pub bytes: u64,
    /// CRC32C of the bytes, computed as they passed.
    pub crc32c: u32,
    /// Parts sent (0 for a single PUT).
    pub parts: usize,
}

/// An object being written; see the module documentation.
pub struct Upload {
    store: Arc<dyn ObjectStore>,
    path: Path,
    options: UploadOptions,
    /// The part being filled (empty and without a buffer between parts).
    filling: BytesMut,
    /// Buffers of parts whose upload ended, for the next parts.
    spare: Vec<BytesMut>,
    /// Part buffers allocated so far.
    allocated: usize,
    multipart: Option<Box<dyn MultipartUpload>>,
    /// Parts uploading, each answering with its buffer.
    inflight: FuturesUnordered<BoxFuture<'static, (object_store::Result<()>, Bytes)>>,
    parts: usize,
    bytes: u64,
    crc32c: u32,
    /// Whether the upload ended (completed or aborted): only an unfinished
    /// multipart upload is aborted on drop.
    ended: bool,
}

impl std::fmt::Debug for Upload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upload")
            .field("path", &self.path)
            .field("parts", &self.parts)
            .field("bytes", &self.bytes)
            .finish_non_exhaustive()
    }
}

impl Upload {
    /// Starts writing `path`. Nothing is sent before the first part is full.
    pub fn new(store: Arc<dyn ObjectStore>, path: Path, options: UploadOptions) -> Upload {
        Upload {
            store,
            path,
            options,
            filling: BytesMut::new(),
            spare: Vec::new(),
            allocated: 0,
            multipart: None,
            inflight: FuturesUnordered::new(),
            parts: 0,
            bytes: 0,
            crc32c: 0,
            ended: false,
        }
    }

    /// Bytes accepted so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Adds `chunk` (copied into the part being filled). Waits while
    /// `parts_in_flight` parts are held. On error the upload is aborted.
    pub async fn write(&mut self, chunk: &[u8]) -> object_store::Result<()> {
        let result = self.fill(chunk).await;
        if result.is_err() {
            self.abort().await;
        }
        result
    }

    async fn fill(&mut self, mut chunk: &[u8]) -> object_store::Result<()> {
        let size = self.options.part_size;
        while !chunk.is_empty() {
            if self.filling.capacity() == 0 {
                // A new part waits for a free one: the parts uploading and
                // the one filling are `parts_in_flight` at most (the body is
                // not read meanwhile).
                self.wait_for_slot(self.options.parts_in_flight.max(1))
                    .await?;
                self.filling = match self.spare.pop() {
                    Some(buffer) => buffer,
                    None => {
                        self.allocated += 1;
                        BytesMut::with_capacity(size)
                    }
                };
            }
            let n = (size - self.filling.len()).min(chunk.len());
            let (now, rest) = chunk.split_at(n);
            self.crc32c = crc32c::crc32c_append(self.crc32c, now);
            self.bytes += n as u64;
            self.filling.extend_from_slice(now);
            chunk = rest;
            if self.filling.len() >= size {
                self.send_part().await?;
            }
        }
        Ok(())
    }

    async fn send_part(&mut self) -> object_store::Result<()> {
        if self.multipart.is_none() {
            self.multipart = Some(self.store.put_multipart(&self.path).await?);
        }
        let part = std::mem::take(&mut self.filling).freeze();
        let mp = self.multipart.as_mut().expect("started above");
        let sending = mp.put_part(PutPayload::from(part.clone()));
        self.inflight
            .push(Box::pin(async move { (sending.await, part) }));
        self.parts += 1;
        Ok(())
    }

    /// Waits until fewer than `most` parts are uploading, keeping the
    /// buffers of those done for the next parts.
    async fn wait_for_slot(&mut self, most: usize) -> object_store::Result<()> {
        while self.inflight.len() >= most {
            if let Some((done, part)) = self.inflight.next().await {
                done?;
                self.keep(part);
            }
        }
        Ok(())
    }

    /// Keeps a sent part's buffer for a next part when nothing else holds
    /// it any more.
    fn keep(&mut self, part: Bytes) {
        if let Ok(mut buffer) = part.try_into_mut() {
            buffer.clear();
            if buffer.capacity() >= self.options.part_size
                && self.spare.len() < self.options.parts_in_flight
            {
                self.spare.push(buffer);
            }
        }
    }

    /// Part buffers allocated so far: `parts_in_flight` at most when the
    /// store lets go of the parts it sent.
    pub fn part_buffers(&self) -> usize {
        self.allocated
    }

    /// The parts held: those uploading and the one being filled (the
    /// memory bound is `parts_in_flight` of them).
    pub fn held_parts(&self) -> usize {
        self.inflight.len() + usize::from(!self.filling.is_empty())
    }

    /// Sends what is left and completes the object. On error the upload is
    /// aborted.
    pub async fn finish(mut self) -> object_store::Result<Uploaded> {
        let result = self.complete().await;
        if result.is_err() {
            self.abort().await;
        }
        result
    }

    async fn complete(&mut self) -> object_store::Result<Uploaded> {
        if self.multipart.is_none() {
            // Smaller than one part: a single PUT.
            let payload = PutPayload::from(std::mem::take(&mut self.filling).freeze());
            self.store.put(&self.path, payload).await?;
        } else {
            if !self.filling.is_empty() {
                self.send_part().await?;
            }
            while let Some((done, _)) = self.inflight.next().await {
                done?;
            }
            self.multipart
                .as_mut()
                .expect("a multipart upload")
                .complete()
                .await?;
        }
        self.ended = true;
        Ok(Uploaded {
            bytes: self.bytes,
            crc32c: self.crc32c,
            parts: self.parts,
        })
    }

    /// Gives up: stops the parts in flight and aborts the multipart upload
    /// (failures to abort are logged).
    pub async fn abort(&mut self) {
        self.ended = true;
        self.inflight.clear();
        if let Some(mut mp) = self.multipart.take()
            && let Err(e) = mp.abort().await
        {
            tracing::warn!(path = %self.path, error = &e as &dyn std::error::Error, "could not abort a multipart upload");
        }
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        self.inflight.clear();
        let Some(mut mp) = self.multipart.take() else {
            return;
        };
        let path = self.path.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move {
                    if let Err(e) = mp.abort().await {
                        tracing::warn!(%path, error = &e as &dyn std::error::Error, "could not abort a dropped multipart upload");
                    }
                });
            }
            Err(_) => {
                tracing::warn!(%path, "a multipart upload was dropped outside a runtime and not aborted");
            }
        }
    }
}

/// Streams `path` back and returns its length and CRC32C (to check an
/// upload against what the store holds).
pub async fn checksum(
    store: &Arc<dyn ObjectStore>,
    path: &Path,
) -> object_store::Result<(u64, u32)> {
    let mut stream = store.get(path).await?.into_stream();
    let (mut bytes, mut crc) = (0u64, 0u32);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        bytes += chunk.len() as u64;
        crc = crc32c::crc32c_append(crc, &chunk);
    }
    Ok((bytes, crc))
}

/// Reads `path` back and checks it holds what `sent` describes (length and
/// CRC32C); an object that does not is deleted and reported as an error.
pub async fn verify(
    store: &Arc<dyn ObjectStore>,
    path: &Path,
    sent: &Uploaded,
) -> object_store::Result<()> {
    let stored = checksum(store, path).await?;
    if stored == (sent.bytes, sent.crc32c) {
        return Ok(());
    }
    if let Err(e) = store.delete(path).await {
        tracing::warn!(%path, error = &e as &dyn std::error::Error, "could not delete an object that failed verification");
    }
    Err(object_store::Error::Generic {
        store: "verify",
        source: format!(
            "{path}: stored {} B with CRC32C {:08x}, sent {} B with {:08x}; the object was deleted",
            stored.0, stored.1, sent.bytes, sent.crc32c
        )
        .into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;
    use object_store::throttle::{ThrottleConfig, ThrottledStore};

    #[tokio::test]
    async fn the_part_filling_counts_among_the_parts_in_flight() {
        // Parts take 50 ms each: the bound is reached.
        let slow = ThrottledStore::new(
            InMemory::new(),
            ThrottleConfig {
                wait_put_per_call: std::time::Duration::from_millis(50),
                ..ThrottleConfig::default()
            },
        );
        let store: Arc<dyn ObjectStore> = Arc::new(slow);
        let options = UploadOptions {
            part_size: MIN_PART_SIZE,
            parts_in_flight: 3,
        };
        let path = Path::from("held/parts");
        let mut up = Upload::new(store.clone(), path.clone(), options);
        let chunk = Bytes::from(vec![7u8; 256 << 10]);
        let mut most = 0;
        for _ in 0..(8 * MIN_PART_SIZE / chunk.len()) {
            up.write(&chunk).await.unwrap();
            most = most.max(up.held_parts());
        }
        assert_eq!(
            most, 3,
            "three parts held at most, the filling one included"
        );
        let done = up.finish().await.unwrap();
        assert_eq!(done.parts, 8);
        let stored = store.get(&path).await.unwrap().bytes().await.unwrap();
        assert_eq!(stored.len(), 8 * MIN_PART_SIZE);
    }

    #[tokio::test]
    async fn parts_are_exact_and_their_buffers_reused() {
        // A local file system store writes each part and lets go of it:
        // nine parts go through two buffers.
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn ObjectStore> =
            Arc::new(object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap());
        let options = UploadOptions {
            part_size: MIN_PART_SIZE,
            parts_in_flight: 2,
        };
        let path = Path::from("reused/parts");
        let mut up = Upload::new(store.clone(), path.clone(), options);
        // Chunks that straddle part boundaries, with a short last part.
        let data: Vec<u8> = (0..(8 * MIN_PART_SIZE + 12_345))
            .map(|i| (i % 251) as u8)
            .collect();
        for chunk in data.chunks(100_003) {
            up.write(chunk).await.unwrap();
            assert!(up.held_parts() <= 2);
        }
        assert_eq!(up.part_buffers(), 2);
        let done = up.finish().await.unwrap();
        assert_eq!(done.parts, 9);
        assert_eq!(done.crc32c, crc32c::crc32c(&data));
        let stored = store.get(&path).await.unwrap().bytes().await.unwrap();
        assert!(stored == data, "the object is the bytes written");
    }
}
