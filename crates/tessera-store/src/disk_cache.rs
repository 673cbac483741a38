//! A local read-through cache of whole objects (packs) on disk, in front of
//! a slow store: bounded in bytes, least recently used evicted, kept across
//! restarts, one fetch per key at a time, and never serving a damaged file.
//!
//! Each entry is one file, `<hex of the key's hash>.obj`, holding a CRC32C
//! and the length before the bytes; a file whose check fails is deleted and
//! fetched again.

use std::collections::HashMap;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use lru::LruCache;

const SUFFIX: &str = "obj";
const HEADER: usize = 12;

/// A byte-bounded LRU of objects on local disk.
#[derive(Debug)]
pub struct DiskCache {
    dir: PathBuf,
    capacity_bytes: u64,
    state: Mutex<State>,
    inflight: Mutex<HashMap<String, Arc<Flight>>>,
    /// Bumped by every `invalidate` / `replace`: a fetch that started before
    /// a change is not kept, so an old object never lands after a new one.
    changes: AtomicU64,
}

#[derive(Debug)]
struct State {
    /// File name → size on disk, least recently used first.
    files: LruCache<String, u64>,
    bytes: u64,
}

#[derive(Debug, Default)]
struct Flight {
    done: Mutex<bool>,
    cv: Condvar,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl DiskCache {
    /// Opens the cache in `dir` (created if missing), taking in the files a
    /// previous run left, oldest first, and trimming to `capacity_bytes`.
    pub fn open(dir: impl Into<PathBuf>, capacity_bytes: u64) -> io::Result<DiskCache> {
        let dir = dir.into();
        fs::create_dir_all(&dir)?;
        let mut found = Vec::new();
        for e in fs::read_dir(&dir)? {
            let e = e?;
            let name = e.file_name().to_string_lossy().into_owned();
            let ext = e
                .path()
                .extension()
                .map(|x| x.to_string_lossy().into_owned());
            if ext.as_deref() == Some("tmp") {
                let _ = fs::remove_file(e.path());
            } else if ext.as_deref() == Some(SUFFIX) {
                let meta = e.metadata()?;
                found.push((meta.modified().ok(), name, meta.len()));
            }
        }
        found.sort();
        let mut state = State {
            files: LruCache::unbounded(),
            bytes: 0,
        };
        for (_, name, size) in found {
            state.bytes += size;
            state.files.put(name, size);
        }
        let cache = DiskCache {
            dir,
            capacity_bytes,
            state: Mutex::new(state),
            inflight: Mutex::new(HashMap::new()),
            changes: AtomicU64::new(0),
        };
        cache.trim(&mut lock(&cache.state));
        Ok(cache)
    }

    /// Bytes of the files held.
    pub fn resident_bytes(&self) -> u64 {
        lock(&self.state).bytes
    }

    /// The object under `key`: from disk when held and intact, otherwise
    /// from `fetch` (`Ok(None)`: the object does not exist; not cached).
    /// Concurrent calls for one key run `fetch` once: the others wait for
    /// it and then read what it stored.
    pub fn get_or_fetch<E>(
        &self,
        key: &str,
        fetch: impl FnOnce() -> Result<Option<Bytes>, E>,
    ) -> Result<Option<Bytes>, E> {
        let name = file_name(key);
        let mut fetch = Some(fetch);
        loop {
            if let Some(bytes) = self.read(&name) {
                return Ok(Some(bytes));
            }
            let (flight, leader) = {
                let mut inflight = lock(&self.inflight);
                match inflight.get(&name) {
                    Some(f) => (f.clone(), false),
                    None => {
                        let f = Arc::new(Flight::default());
                        inflight.insert(name.clone(), f.clone());
                        (f, true)
                    }
                }
            };
            if !leader {
                let mut done = lock(&flight.done);
                while !*done {
                    done = flight.cv.wait(done).unwrap_or_else(PoisonError::into_inner);
                }
                // The leader stored the object (or failed): look again.
                continue;
            }
            let changes = self.changes.load(Ordering::SeqCst);
            let result = (fetch.take().expect("the leader fetches once"))();
            if let Ok(Some(bytes)) = &result
                && self.changes.load(Ordering::SeqCst) == changes
                && let Err(e) = self.store(&name, bytes)
            {
                tracing::warn!(
                    key,
                    error = &e as &dyn std::error::Error,
                    "could not keep an object in the local cache"
                );
            }
            lock(&self.inflight).remove(&name);
            *lock(&flight.done) = true;
            flight.cv.notify_all();
            return result;
        }
    }

    /// Forgets `key` (after it changed in the store behind).
    pub fn invalidate(&self, key: &str) {
        self.changes.fetch_add(1, Ordering::SeqCst);
        let name = file_name(key);
        let mut state = lock(&self.state);
        if let Some(size) = state.files.pop(&name) {
            state.bytes -= size;
        }
        let _ = fs::remove_file(self.dir.join(&name));
    }

    /// Forgets every object.
    pub fn clear(&self) {
        self.changes.fetch_add(1, Ordering::SeqCst);
        let mut state = lock(&self.state);
        while let Some((name, size)) = state.files.pop_lru() {
            state.bytes -= size;
            let _ = fs::remove_file(self.dir.join(name));
        }
    }

    /// Keeps `bytes` as the object under `key` (after this process wrote
    /// them to the store behind), replacing what was held.
    pub fn replace(&self, key: &str, bytes: &[u8]) {
        self.changes.fetch_add(1, Ordering::SeqCst);
        if let Err(e) = self.store(&file_name(key), bytes) {
            tracing::warn!(
                key,
                error = &e as &dyn std::error::Error,
                "could not keep an object in the local cache"
            );
            self.invalidate(key);
        }
    }

    fn read(&self, name: &str) -> Option<Bytes> {
        lock(&self.state).files.get(name)?;
        let path = self.dir.join(name);
        match fs::read(&path).ok().and_then(verify) {
            Some(bytes) => Some(bytes),
            None => {
                tracing::warn!(file = %path.display(), "damaged local cache file; fetching again");
                let mut state = lock(&self.state);
                if let Some(size) = state.files.pop(name) {
                    state.bytes -= size;
                }
                let _ = fs::remove_file(&path);
                None
            }
        }
    }

    fn store(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        let size = (HEADER + bytes.len()) as u64;
        if size > self.capacity_bytes {
            return Ok(());
        }
        static TMP: AtomicU64 = AtomicU64::new(0);
        let n = TMP.fetch_add(1, Ordering::Relaxed);
        let tmp = self.dir.join(format!("{name}.{n}.tmp"));
        {
            let mut f = fs::File::create(&tmp)?;
            f.write_all(&crc32c::crc32c(bytes).to_le_bytes())?;
            f.write_all(&(bytes.len() as u64).to_le_bytes())?;
            f.write_all(bytes)?;
        }
        fs::rename(&tmp, self.dir.join(name))?;
        let mut state = lock(&self.state);
        if let Some(old) = state.files.put(name.to_string(), size) {
            state.bytes -= old;
        }
        state.bytes += size;
        self.trim(&mut state);
        Ok(())
    }

    fn trim(&self, state: &mut State) {
        while state.bytes > self.capacity_bytes {
            let Some((name, size)) = state.files.pop_lru() else {
                break;
            };
            state.bytes -= size;
            let _ = fs::remove_file(self.dir.join(name));
        }
    }

    /// The directory of the cache.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

fn file_name(key: &str) -> String {
    format!("{:032x}.{SUFFIX}", crate::content_hash(key.as_bytes()))
}

fn verify(buf: Vec<u8>) -> Option<Bytes> {
    let crc = u32::from_le_bytes(buf.get(0..4)?.try_into().ok()?);
    let len = usize::try_from(u64::from_le_bytes(buf.get(4..12)?.try_into().ok()?)).ok()?;
    let body = buf.get(HEADER..)?;
    (body.len() == len && crc32c::crc32c(body) == crc).then(|| Bytes::from(buf).slice(HEADER..))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn obj(seed: u8, len: usize) -> Bytes {
        (0..len)
            .map(|i| (i as u8).wrapping_add(seed))
            .collect::<Vec<u8>>()
            .into()
    }

    #[test]
    fn one_fetch_per_key_however_many_ask_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Arc::new(DiskCache::open(dir.path(), 1 << 20).unwrap());
        let fetches = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..16)
            .map(|_| {
                let (cache, fetches) = (cache.clone(), fetches.clone());
                std::thread::spawn(move || {
                    cache
                        .get_or_fetch("layer/grid/12/0042", || {
                            fetches.fetch_add(1, Ordering::SeqCst);
                            std::thread::sleep(std::time::Duration::from_millis(100));
                            Ok::<_, ()>(Some(obj(1, 5000)))
                        })
                        .unwrap()
                })
            })
            .collect();
        for t in threads {
            assert_eq!(t.join().unwrap(), Some(obj(1, 5000)));
        }
        assert_eq!(fetches.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn bounded_in_bytes_least_recent_out_and_kept_across_restarts() {
        let dir = tempfile::tempdir().unwrap();
        {
            let cache = DiskCache::open(dir.path(), 50_000).unwrap();
            for i in 0..10u8 {
                cache
                    .get_or_fetch(&format!("k{i}"), || Ok::<_, ()>(Some(obj(i, 9_000))))
                    .unwrap();
                // k0 is read after every write: it stays.
                cache
                    .get_or_fetch("k0", || -> Result<_, ()> { panic!("k0 must be cached") })
                    .unwrap();
                assert!(cache.resident_bytes() <= 50_000);
            }
        }
        let cache = DiskCache::open(dir.path(), 50_000).unwrap();
        let hit = cache
            .get_or_fetch("k9", || -> Result<_, ()> {
                panic!("k9 survives the restart")
            })
            .unwrap();
        assert_eq!(hit, Some(obj(9, 9_000)));
        let refetched = AtomicUsize::new(0);
        cache
            .get_or_fetch("k1", || {
                refetched.fetch_add(1, Ordering::SeqCst);
                Ok::<_, ()>(Some(obj(1, 9_000)))
            })
            .unwrap();
        assert_eq!(refetched.load(Ordering::SeqCst), 1, "k1 was evicted");
    }

    #[test]
    fn a_damaged_file_is_fetched_again_never_served() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::open(dir.path(), 1 << 20).unwrap();
        cache
            .get_or_fetch("pack", || Ok::<_, ()>(Some(obj(3, 2000))))
            .unwrap();
        let file = fs::read_dir(dir.path())
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let mut bytes = fs::read(&file).unwrap();
        bytes[500] ^= 0xFF;
        fs::write(&file, bytes).unwrap();
        let refetched = AtomicUsize::new(0);
        let again = cache
            .get_or_fetch("pack", || {
                refetched.fetch_add(1, Ordering::SeqCst);
                Ok::<_, ()>(Some(obj(3, 2000)))
            })
            .unwrap();
        assert_eq!(again, Some(obj(3, 2000)));
        assert_eq!(
            refetched.load(Ordering::SeqCst),
            1,
            "the damaged copy was not served"
        );
        cache.invalidate("pack");
        assert_eq!(cache.resident_bytes(), 0);
        // A missing object is not cached.
        assert_eq!(
            cache.get_or_fetch("absent", || Ok::<_, ()>(None)).unwrap(),
            None
        );
        let err = cache.get_or_fetch("failing", || Err::<Option<Bytes>, _>("boom"));
        assert_eq!(err, Err("boom"));
    }
}
