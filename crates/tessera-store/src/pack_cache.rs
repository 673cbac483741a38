//! [`DecodedPacks`]: packs already read, held in memory in the form a tile
//! is found in with one lookup, bounded in bytes, least recently used
//! evicted first; concurrent reads of one pack share one load. The
//! [`crate::PackStore`] owns it.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use lru::LruCache;
use object_store::UpdateVersion;

use crate::pack::{HeaderRead, PackError, PackIndex, PackedTile, read_pack};

/// A pack as held in memory.
#[derive(Debug)]
pub(crate) enum Held {
    /// The whole object with its index: a tile is a slice of the bytes.
    /// With the object's version when known (read or written by this
    /// store), a write can merge into it without reading it again.
    Whole {
        bytes: Bytes,
        index: PackIndex,
        version: Option<UpdateVersion>,
    },
    /// Only the header's index (the pack was read by range): a tile is one
    /// ranged read of the object, of the version (ETag) the index is from.
    IndexOnly(PackIndex, Option<String>),
    /// A pack without an index (another Avro writer, an older tessera):
    /// its tiles decoded.
    Decoded(Vec<PackedTile>),
}

/// One tile as a pack held in memory answers for it.
#[derive(Debug)]
pub(crate) enum Found {
    /// The tile's bytes and creation time (ms since the epoch).
    Tile(Bytes, i64),
    /// The pack does not hold the tile.
    Absent,
    /// The pack holds it at this byte range of the object version (ETag),
    /// not in memory; with its creation time.
    At(std::ops::Range<u64>, i64, Option<String>),
}

impl Held {
    /// The whole pack `bytes` made ready for lookups: sliced by its index
    /// when it has one, else decoded.
    pub fn from_bytes(bytes: Bytes, version: Option<UpdateVersion>) -> Result<Held, PackError> {
        match PackIndex::read(&bytes)? {
            HeaderRead::Index(index) => Ok(Held::Whole {
                bytes,
                index,
                version,
            }),
            HeaderRead::NoIndex => Ok(Held::Decoded(read_pack(&bytes)?)),
            HeaderRead::NeedAtLeast(_) => Err(PackError::Shape("pack header is cut short".into())),
        }
    }

    /// Tile `z/x/y`.
    pub fn find(&self, z: u8, x: u32, y: u32) -> Result<Found, PackError> {
        Ok(match self {
            Held::Whole { bytes, index, .. } => match index.slice(bytes, z, x, y)? {
                Some((tile, created)) => Found::Tile(tile, created),
                None => Found::Absent,
            },
            Held::IndexOnly(index, version) => match index.find(z, x, y) {
                Some(e) => Found::At(
                    e.offset..e.offset + u64::from(e.len),
                    e.created_ms,
                    version.clone(),
                ),
                None => Found::Absent,
            },
            Held::Decoded(tiles) => match tiles.iter().find(|t| t.z == z && t.x == x && t.y == y) {
                Some(t) => Found::Tile(t.data.clone(), t.created_ms),
                None => Found::Absent,
            },
        })
    }

    /// Bytes it takes in memory (payloads, index, a little overhead).
    fn weight(&self) -> usize {
        const OVERHEAD: usize = 128;
        OVERHEAD
            + match self {
                Held::Whole { bytes, index, .. } => bytes.len() + index.heap_bytes(),
                Held::IndexOnly(index, _) => index.heap_bytes(),
                Held::Decoded(tiles) => tiles
                    .iter()
                    .map(|t| t.data.len() + t.media_type.len() + t.etag.len() + 64)
                    .sum(),
            }
    }
}

/// Packs in memory by object key, at most `capacity` bytes.
#[derive(Debug)]
pub(crate) struct DecodedPacks {
    capacity: usize,
    state: Mutex<State>,
    /// Loads in flight by key (see [`DecodedPacks::get_or_load`]).
    loading: Mutex<HashMap<String, Arc<Loading>>>,
}

/// One load of a pack, shared by the reads that came while it ran.
#[derive(Debug)]
struct Loading {
    /// The key's generation when the load began: only reads that find the
    /// same generation share it (a read arriving after a write must not
    /// take a load begun before the write).
    generation: u64,
    outcome: Mutex<Option<Outcome>>,
    landed: Condvar,
}

#[derive(Debug, Clone)]
enum Outcome {
    /// The pack (`None`: there is no such object).
    Loaded(Option<Arc<Held>>),
    /// The load failed (or panicked): each waiting read loads for itself,
    /// so each gets its own error.
    Failed,
}

/// Ends a load when dropped, however the loader returns: the load leaves
/// the map, and the reads waiting for it get its outcome (`Failed` if none
/// was set).
struct Landing<'a> {
    packs: &'a DecodedPacks,
    key: &'a str,
    loading: Arc<Loading>,
    outcome: Outcome,
}

impl Drop for Landing<'_> {
    fn drop(&mut self) {
        {
            let mut loading = lock(&self.packs.loading);
            if loading
                .get(self.key)
                .is_some_and(|l| Arc::ptr_eq(l, &self.loading))
            {
                loading.remove(self.key);
            }
        }
        *lock(&self.loading.outcome) = Some(self.outcome.clone());
        self.loading.landed.notify_all();
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[derive(Debug)]
struct State {
    packs: LruCache<String, (Arc<Held>, usize)>,
    bytes: usize,
    /// Per stripe of keys, bumped by every invalidation of a key of the
    /// stripe, so a read that raced with a write does not put the pack it
    /// read before the write into memory (striped so that writes to other
    /// packs rarely turn a read's pack away).
    generations: [u64; STRIPES],
}

const STRIPES: usize = 64;

fn stripe(key: &str) -> usize {
    xxhash_rust::xxh3::xxh3_64(key.as_bytes()) as usize % STRIPES
}

impl DecodedPacks {
    /// An empty cache of at most `capacity` bytes (0: nothing is held).
    pub fn new(capacity: usize) -> DecodedPacks {
        DecodedPacks {
            capacity,
            state: Mutex::new(State {
                packs: LruCache::unbounded(),
                bytes: 0,
                generations: [0; STRIPES],
            }),
            loading: Mutex::new(HashMap::new()),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// The pack under `key`: held, or read by `load` (`Ok(None)`: no such
    /// object) and then held. Reads of one key that come while its load
    /// runs, at the same generation, wait for that load and share what it
    /// read instead of each fetching the pack again; if it fails, each
    /// loads for itself. A read arriving after an invalidation of its
    /// stripe does not share a load begun before it.
    pub fn get_or_load<E>(
        &self,
        key: &str,
        load: impl FnOnce() -> Result<Option<Held>, E>,
    ) -> Result<Option<Arc<Held>>, E> {
        if let Some(held) = self.get(key) {
            return Ok(Some(held));
        }
        let generation = self.generation(key);
        let (loading, leader) = {
            let mut loads = lock(&self.loading);
            match loads.get(key) {
                Some(l) if l.generation == generation => (Some(l.clone()), false),
                // A load of an older generation runs: this read loads alone.
                Some(_) => (None, false),
                None => {
                    let l = Arc::new(Loading {
                        generation,
                        outcome: Mutex::new(None),
                        landed: Condvar::new(),
                    });
                    loads.insert(key.to_string(), l.clone());
                    (Some(l), true)
                }
            }
        };
        let Some(loading) = loading else {
            return self.load_and_hold(key, generation, load);
        };
        if !leader {
            let mut outcome = lock(&loading.outcome);
            while outcome.is_none() {
                outcome = loading
                    .landed
                    .wait(outcome)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            if let Some(Outcome::Loaded(held)) = outcome.clone() {
                return Ok(held);
            }
            drop(outcome);
            return self.load_and_hold(key, generation, load);
        }
        let mut landing = Landing {
            packs: self,
            key,
            loading,
            outcome: Outcome::Failed,
        };
        let result = self.load_and_hold(key, generation, load);
        if let Ok(held) = &result {
            landing.outcome = Outcome::Loaded(held.clone());
        }
        result
    }

    /// Runs `load` and holds what it read (see [`DecodedPacks::insert`]).
    fn load_and_hold<E>(
        &self,
        key: &str,
        generation: u64,
        load: impl FnOnce() -> Result<Option<Held>, E>,
    ) -> Result<Option<Arc<Held>>, E> {
        let Some(held) = load()? else {
            return Ok(None);
        };
        let held = Arc::new(held);
        self.insert(key.to_string(), held.clone(), generation);
        Ok(Some(held))
    }

    /// The pack under `key`, marked recently used.
    pub fn get(&self, key: &str) -> Option<Arc<Held>> {
        self.state().packs.get(key).map(|(h, _)| h.clone())
    }

    /// The generation to hand back to [`DecodedPacks::insert`] for a read
    /// of `key` starting now.
    pub fn generation(&self, key: &str) -> u64 {
        self.state().generations[stripe(key)]
    }

    /// Holds `held` under `key` unless a key of its stripe was invalidated
    /// since `generation` was taken (the read may predate a write) or it
    /// alone exceeds the capacity; evicts the least recently used to make
    /// room.
    pub fn insert(&self, key: String, held: Arc<Held>, generation: u64) {
        let weight = held.weight();
        if weight > self.capacity {
            return;
        }
        let mut s = self.state();
        if s.generations[stripe(&key)] != generation {
            return;
        }
        if let Some((_, old)) = s.packs.put(key, (held, weight)) {
            s.bytes -= old;
        }
        s.bytes += weight;
        while s.bytes > self.capacity {
            match s.packs.pop_lru() {
                Some((_, (_, w))) => s.bytes -= w,
                None => break,
            }
        }
    }

    /// Forgets the pack under `key` (it was written or deleted).
    pub fn invalidate(&self, key: &str) {
        let mut s = self.state();
        s.generations[stripe(key)] += 1;
        if let Some((_, w)) = s.packs.pop(key) {
            s.bytes -= w;
        }
    }

    /// Forgets every pack.
    pub fn clear(&self) {
        let mut s = self.state();
        for g in &mut s.generations {
            *g += 1;
        }
        s.packs.clear();
        s.bytes = 0;
    }

    /// Bytes held.
    #[cfg(test)]
    pub fn resident_bytes(&self) -> usize {
        self.state().bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pack::write_pack;

    fn pack(n: u32, size: usize) -> Bytes {
        let tiles: Vec<PackedTile> = (0..n)
            .map(|i| {
                PackedTile::new(
                    5,
                    i % 4,
                    i / 4,
                    "image/png",
                    Bytes::from(vec![i as u8; size]),
                )
            })
            .collect();
        Bytes::from(write_pack(&tiles).unwrap())
    }

    #[test]
    fn a_held_pack_answers_tiles_as_slices_of_its_bytes() {
        let bytes = pack(16, 1000);
        let held = Held::from_bytes(bytes.clone(), None).unwrap();
        match held.find(5, 2, 3).unwrap() {
            Found::Tile(t, _) => {
                assert_eq!(t, vec![14u8; 1000]);
                // No copy: the tile lies inside the pack's buffer.
                let inside = bytes.as_ptr_range();
                assert!(inside.contains(&t.as_ptr()));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(held.find(5, 9, 9).unwrap(), Found::Absent));
        assert!(matches!(held.find(6, 2, 3).unwrap(), Found::Absent));
    }

    #[test]
    fn the_cache_stays_within_its_bytes_and_a_racing_read_is_not_kept() {
        let one = Arc::new(Held::from_bytes(pack(4, 10_000), None).unwrap());
        let weight = one.weight();
        let cache = DecodedPacks::new(weight * 3);
        for i in 0..10 {
            let g = cache.generation(&format!("p{i}"));
            cache.insert(format!("p{i}"), one.clone(), g);
            assert!(cache.resident_bytes() <= weight * 3);
        }
        assert!(cache.get("p9").is_some());
        assert!(cache.get("p0").is_none(), "least recently used went first");
        // A read that started before a write must not be kept.
        let g = cache.generation("p9");
        cache.invalidate("p9");
        cache.insert("p9".into(), one.clone(), g);
        assert!(cache.get("p9").is_none());
        // A write to a pack of another stripe does not turn a read away.
        let other = (1..1000)
            .map(|i| format!("q{i}"))
            .find(|k| stripe(k) != stripe("q0"))
            .unwrap();
        let g = cache.generation("q0");
        cache.invalidate(&other);
        cache.insert("q0".into(), one.clone(), g);
        assert!(cache.get("q0").is_some());
        // Larger than the whole cache: not held.
        let tiny = DecodedPacks::new(10);
        tiny.insert("p".into(), one, tiny.generation("p"));
        assert!(tiny.get("p").is_none());
    }

    /// A thread reading a pack, and what it read.
    type Reader = std::thread::JoinHandle<Result<Option<Arc<Held>>, String>>;

    /// Starts `readers` threads reading `key` through `cache`; each load
    /// (counted) waits until the returned sender is dropped, then reads a
    /// pack or, with `fail`, an error. Answers the sender, the count of
    /// loads begun and the threads.
    fn readers(
        cache: &Arc<DecodedPacks>,
        key: &'static str,
        readers: usize,
        fail: bool,
    ) -> (
        std::sync::mpsc::Sender<()>,
        Arc<std::sync::atomic::AtomicUsize>,
        Vec<Reader>,
    ) {
        let (open, gate) = std::sync::mpsc::channel::<()>();
        let gate = Arc::new(Mutex::new(gate));
        let loads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let threads = (0..readers)
            .map(|_| {
                let (cache, gate, loads) = (cache.clone(), gate.clone(), loads.clone());
                std::thread::spawn(move || {
                    cache.get_or_load(key, || {
                        loads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let _ = lock(&gate).recv();
                        if fail {
                            return Err("unreachable store".to_string());
                        }
                        Ok(Some(Held::from_bytes(pack(4, 100), None).unwrap()))
                    })
                })
            })
            .collect();
        (open, loads, threads)
    }

    /// Waits (with a deadline) until `loads` loads have begun.
    fn until_loads(loads: &std::sync::atomic::AtomicUsize, n: usize) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while loads.load(std::sync::atomic::Ordering::SeqCst) < n {
            assert!(
                std::time::Instant::now() < deadline,
                "{n} loads never began"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Waits (with a deadline) until `readers` reads of `key` are in its
    /// load: its loader and the reads waiting for it each hold the load,
    /// as does the map of loads.
    fn until_in_load(cache: &DecodedPacks, key: &str, readers: usize) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while lock(&cache.loading).get(key).map(Arc::strong_count) != Some(readers + 1) {
            assert!(
                std::time::Instant::now() < deadline,
                "{readers} reads never met"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    #[test]
    fn concurrent_reads_of_one_pack_share_one_load_even_when_nothing_is_held() {
        for capacity in [64 << 20, 0] {
            let cache = Arc::new(DecodedPacks::new(capacity));
            let (open, loads, threads) = readers(&cache, "p", 8, false);
            until_in_load(&cache, "p", 8);
            drop(open);
            let got: Vec<_> = threads
                .into_iter()
                .map(|t| t.join().unwrap().unwrap().unwrap())
                .collect();
            assert_eq!(loads.load(std::sync::atomic::Ordering::SeqCst), 1);
            assert!(
                got.iter().all(|h| Arc::ptr_eq(h, &got[0])),
                "one pack shared"
            );
            assert_eq!(cache.get("p").is_some(), capacity > 0);
        }
    }

    #[test]
    fn a_failed_load_leaves_each_waiting_read_to_load_for_itself() {
        let cache = Arc::new(DecodedPacks::new(64 << 20));
        let (open, loads, threads) = readers(&cache, "p", 4, true);
        until_in_load(&cache, "p", 4);
        drop(open);
        for t in threads {
            assert_eq!(t.join().unwrap().unwrap_err(), "unreachable store");
        }
        // The first load, then one by each of the three that waited for it.
        assert_eq!(loads.load(std::sync::atomic::Ordering::SeqCst), 4);
        // A loader that panics ends its load too: nobody waits for ever.
        let panicked = std::thread::spawn({
            let cache = cache.clone();
            move || cache.get_or_load::<String>("q", || panic!("loader panicked"))
        })
        .join();
        assert!(panicked.is_err());
        let again = cache.get_or_load::<String>("q", || Ok(None)).unwrap();
        assert!(again.is_none());
    }

    #[test]
    fn a_read_after_an_invalidation_does_not_share_a_load_begun_before_it() {
        let cache = Arc::new(DecodedPacks::new(64 << 20));
        let (open, loads, threads) = readers(&cache, "p", 1, false);
        until_loads(&loads, 1);
        // A write to the pack lands while the first load runs.
        cache.invalidate("p");
        let fresh = Arc::new(Held::from_bytes(pack(8, 100), None).unwrap());
        let late = cache
            .get_or_load::<String>("p", || {
                Ok(Some(Held::from_bytes(pack(8, 100), None).unwrap()))
            })
            .unwrap()
            .unwrap();
        assert_eq!(
            late.weight(),
            fresh.weight(),
            "the read after the write loaded for itself"
        );
        drop(open);
        let early = threads
            .into_iter()
            .next()
            .unwrap()
            .join()
            .unwrap()
            .unwrap()
            .unwrap();
        assert_ne!(early.weight(), late.weight());
        // The load begun before the write was not kept over the later one.
        assert_eq!(cache.get("p").unwrap().weight(), late.weight());
    }
}
