//! [`DecodedPacks`]: packs already read, held in memory in the form a tile
//! is found in with one lookup, bounded in bytes, least recently used
//! evicted first. The [`crate::PackStore`] owns it.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

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
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
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
}
