//! A table of named locks: one lock per key, created when first wanted and
//! removed when the last holder or waiter is gone.
//!
//! There is no striping: two keys never share a lock, so taking the lock of a
//! metatile and then the locks of its tiles can never wait on an unrelated
//! key (the nesting-plus-striping deadlock of GeoWebCache issue 1226).
//! Guards are owned values that can be moved into another task, so the task
//! that saves a tile releases its lock when the tile is stored, and no latch
//! has to be counted down by hand. Every wait has a timeout.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::OwnedMutexGuard;

type Table<K> = Arc<Mutex<HashMap<K, Entry>>>;

#[derive(Debug)]
struct Entry {
    lock: Arc<tokio::sync::Mutex<()>>,
    /// Holders plus waiters.
    refs: usize,
}

/// Locks by key, fair (first come, first served) per key.
#[derive(Debug)]
pub struct KeyedLocks<K> {
    table: Table<K>,
}

/// The wait for a lock took longer than allowed.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("lock wait exceeded {0:?}")]
pub struct LockTimeout(pub Duration);

/// A held lock. Dropping it releases the lock, and removes the table entry
/// when nobody else holds or awaits it.
#[derive(Debug)]
pub struct KeyGuard<K: Eq + Hash> {
    // Field order matters: the lock is released before the reference goes.
    _held: OwnedMutexGuard<()>,
    _reference: Reference<K>,
}

/// One counted interest in a table entry; created before waiting so that a
/// wait that times out or is cancelled still gives its count back.
#[derive(Debug)]
struct Reference<K: Eq + Hash> {
    table: Table<K>,
    key: Option<K>,
}

impl<K: Eq + Hash> Drop for Reference<K> {
    fn drop(&mut self) {
        let Some(key) = self.key.take() else { return };
        let mut table = lock_table(&self.table);
        if let Some(entry) = table.get_mut(&key) {
            entry.refs -= 1;
            if entry.refs == 0 {
                table.remove(&key);
            }
        }
    }
}

fn lock_table<K>(table: &Mutex<HashMap<K, Entry>>) -> MutexGuard<'_, HashMap<K, Entry>> {
    // No code path panics while holding the table mutex (only map operations
    // run under it), but stay usable if one ever does.
    table.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Another handle on the same table: a lock taken through one is held
/// for the other.
impl<K> Clone for KeyedLocks<K> {
    fn clone(&self) -> Self {
        KeyedLocks {
            table: self.table.clone(),
        }
    }
}

impl<K: Eq + Hash + Clone> Default for KeyedLocks<K> {
    fn default() -> Self {
        Self {
            table: Arc::default(),
        }
    }
}

impl<K: Eq + Hash + Clone> KeyedLocks<K> {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the lock of `key`, waiting at most `timeout`.
    pub async fn lock(&self, key: K, timeout: Duration) -> Result<KeyGuard<K>, LockTimeout> {
        let (lock, reference) = self.enter(key);
        match tokio::time::timeout(timeout, lock.lock_owned()).await {
            Ok(held) => Ok(KeyGuard {
                _held: held,
                _reference: reference,
            }),
            Err(_) => Err(LockTimeout(timeout)),
        }
    }

    /// Takes the lock of `key` if nobody holds it, without waiting; `None`
    /// when it is held (or awaited by someone ahead).
    pub fn try_lock(&self, key: K) -> Option<KeyGuard<K>> {
        let (lock, reference) = self.enter(key);
        let held = lock.try_lock_owned().ok()?;
        Some(KeyGuard {
            _held: held,
            _reference: reference,
        })
    }

    /// The lock of `key` and a counted interest in its entry.
    fn enter(&self, key: K) -> (Arc<tokio::sync::Mutex<()>>, Reference<K>) {
        let mut table = lock_table(&self.table);
        let entry = table.entry(key.clone()).or_insert_with(|| Entry {
            lock: Arc::new(tokio::sync::Mutex::new(())),
            refs: 0,
        });
        entry.refs += 1;
        let reference = Reference {
            table: self.table.clone(),
            key: Some(key),
        };
        (entry.lock.clone(), reference)
    }

    /// Keys currently held or awaited.
    pub fn len(&self) -> usize {
        lock_table(&self.table).len()
    }

    /// Whether no key is held or awaited.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Duration = Duration::from_secs(10);

    #[tokio::test]
    async fn try_lock_takes_a_free_key_and_leaves_a_held_one() {
        let locks = KeyedLocks::new();
        let a = locks.try_lock("a").expect("a is free");
        assert!(locks.try_lock("a").is_none());
        assert_eq!(locks.len(), 1, "a failed try leaves no entry behind");
        let b = locks.try_lock("b").expect("b is free");
        drop(a);
        assert!(locks.try_lock("a").is_some());
        drop(b);
        assert!(locks.is_empty());
    }

    #[tokio::test]
    async fn entries_live_only_while_held_or_awaited() {
        let locks = KeyedLocks::new();
        let a = locks.lock("a", LONG).await.unwrap();
        let b = locks.lock("b", LONG).await.unwrap();
        assert_eq!(locks.len(), 2);
        drop(a);
        assert_eq!(locks.len(), 1);
        drop(b);
        assert!(locks.is_empty());
    }

    #[tokio::test]
    async fn a_timed_out_wait_gives_its_entry_back() {
        let locks = KeyedLocks::new();
        let held = locks.lock(1, LONG).await.unwrap();
        let err = locks.lock(1, Duration::from_millis(20)).await.unwrap_err();
        assert_eq!(err.0, Duration::from_millis(20));
        assert_eq!(locks.len(), 1);
        drop(held);
        assert!(locks.is_empty());
    }

    #[tokio::test]
    async fn a_cancelled_wait_gives_its_entry_back() {
        let locks = Arc::new(KeyedLocks::new());
        let held = locks.lock(1, LONG).await.unwrap();
        let waiter = {
            let locks = locks.clone();
            tokio::spawn(async move { locks.lock(1, LONG).await.map(drop) })
        };
        tokio::task::yield_now().await;
        waiter.abort();
        assert!(waiter.await.unwrap_err().is_cancelled());
        drop(held);
        assert!(locks.is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_guard_moved_to_another_task_releases_there() {
        let locks = Arc::new(KeyedLocks::new());
        let guard = locks.lock("tile", LONG).await.unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let holder = std::thread::spawn(move || {
            let _guard = guard;
            rx.blocking_recv().unwrap();
        });
        let blocked = locks.lock("tile", Duration::from_millis(30)).await;
        assert!(blocked.is_err(), "the moved guard still holds the lock");
        tx.send(()).unwrap();
        let again = locks.lock("tile", LONG).await.unwrap();
        drop(again);
        // The holder's guard may wake this task before its drop has
        // finished: the entry is gone once every holder has returned.
        holder.join().unwrap();
        assert!(locks.is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn many_tasks_serialize_on_one_key() {
        let locks = Arc::new(KeyedLocks::new());
        let inside = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let tasks: Vec<_> = (0..200)
            .map(|i| {
                let (locks, inside) = (locks.clone(), inside.clone());
                tokio::spawn(async move {
                    let _g = locks.lock(i % 3, LONG).await.unwrap();
                    let n = inside.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    assert!(n < 3, "at most one holder per key");
                    tokio::task::yield_now().await;
                    inside.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        assert!(locks.is_empty());
    }
}
