//! The behaviour every [`TileStore`] must show, as one suite that each
//! backend's tests call with a fresh, empty store.
//!
//! Each check uses its own layer name, so the checks do not see each
//! other's tiles. A failure panics with the name of the broken rule.

use std::collections::HashSet;
use std::sync::Arc;

use bytes::Bytes;
use tessera_grid::{TileFormat, TileMatrixSet};

use tessera_grid::TileRange;

use crate::{AreaRange, Durability, StoreError, TileArea, TileKey, TileStore};

/// Runs every check against `store`, which must start empty.
pub fn run_all(store: &Arc<dyn TileStore>) {
    missing_is_none(store.as_ref());
    put_then_get(store.as_ref());
    overwrite_keeps_last(store.as_ref());
    keys_are_distinct(store.as_ref());
    put_many_is_put_each(store.as_ref());
    delete_removes(store.as_ref());
    truncate_removes_the_area_only(store.as_ref());
    layer_keys_name_the_held_keys(store.as_ref());
    all_exist_agrees_with_exists(store.as_ref());
    get_many_agrees_with_get(store.as_ref());
    empty_tile_refused(store.as_ref());
    large_tile(store.as_ref());
    concurrent_writers(store);
    readers_never_see_torn_tiles(store);
    stored_times(store.as_ref());
    fingerprints_are_claimed_once(store);
}

/// A key for tile (z, x, y) of `layer` in WebMercatorQuad.
pub fn key(layer: &str, z: u32, x: u64, y: u64, format: TileFormat) -> TileKey {
    key_in(layer, "WebMercatorQuad", z, x, y, format)
}

fn key_in(layer: &str, grid: &str, z: u32, x: u64, y: u64, format: TileFormat) -> TileKey {
    let tms = TileMatrixSet::web_mercator_quad();
    let coord = tms
        .tile(z, x, y)
        .expect("test coordinates are inside the grid");
    TileKey {
        layer: layer.into(),
        grid: grid.into(),
        coord,
        matrix_height: 1 << z,
        matrix_width: 1 << z,
        format,
    }
}

/// A recognisable payload of `len` bytes.
pub fn payload(seed: u8, len: usize) -> Bytes {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect::<Vec<u8>>()
        .into()
}

fn missing_is_none(store: &dyn TileStore) {
    let k = key("c-missing", 3, 1, 2, TileFormat::Png);
    assert_eq!(
        store.get(&k).expect("get"),
        None,
        "missing tile must be None"
    );
    assert!(
        !store.exists(&k).expect("exists"),
        "missing tile must not exist"
    );
    assert!(
        !matches!(store.peek_or_absent(&k), crate::Peek::Held(_)),
        "a missing tile is not held"
    );
}

fn put_then_get(store: &dyn TileStore) {
    for (i, durability) in [Durability::Buffered, Durability::Synced]
        .into_iter()
        .enumerate()
    {
        let k = key("c-put", 4, i as u64, 3, TileFormat::Png);
        let data = payload(i as u8, 1000);
        store.put(&k, data.clone(), durability).expect("put");
        assert_eq!(
            store.get(&k).expect("get"),
            Some(data),
            "get returns the put bytes"
        );
        assert!(store.exists(&k).expect("exists"), "put tile exists");
        // What a store answers without blocking is what it stores.
        match store.peek_or_absent(&k) {
            crate::Peek::Absent => panic!("a stored tile is never absent"),
            crate::Peek::Held(held) => assert_eq!(
                Some(held),
                store.peek(&k),
                "peek_or_absent holds what peek does"
            ),
            crate::Peek::Unknown => {}
        }
        if let Some(held) = store.peek(&k) {
            let stored = store.get_stored(&k).expect("get_stored").expect("stored");
            assert_eq!(held.bytes, stored.bytes, "peek returns the put bytes");
            assert_eq!(
                held.hash,
                crate::content_hash(&stored.bytes),
                "peek's hash is the bytes'"
            );
            assert_eq!(
                held.stored_at, stored.stored_at,
                "peek's time is get_stored's"
            );
        }
    }
}

fn overwrite_keeps_last(store: &dyn TileStore) {
    let k = key("c-overwrite", 5, 7, 9, TileFormat::Png);
    store
        .put(&k, payload(1, 500), Durability::Buffered)
        .expect("put");
    store
        .put(&k, payload(2, 300), Durability::Synced)
        .expect("put");
    assert_eq!(
        store.get(&k).expect("get"),
        Some(payload(2, 300)),
        "last put wins"
    );
}

fn keys_are_distinct(store: &dyn TileStore) {
    let keys = [
        key("c-distinct", 6, 10, 20, TileFormat::Png),
        key("c-distinct-b", 6, 10, 20, TileFormat::Png),
        key_in("c-distinct", "OtherGrid", 6, 10, 20, TileFormat::Png),
        key("c-distinct", 7, 10, 20, TileFormat::Png),
        key("c-distinct", 6, 11, 20, TileFormat::Png),
        key("c-distinct", 6, 10, 21, TileFormat::Png),
        key("c-distinct", 6, 10, 20, TileFormat::Jpeg),
        // Row 20 from the top and row 20 from the bottom are different tiles.
        key("c-distinct", 6, 10, 43, TileFormat::Png),
    ];
    for (i, k) in keys.iter().enumerate() {
        store
            .put(k, payload(i as u8, 64 + i), Durability::Buffered)
            .expect("put");
    }
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(
            store.get(k).expect("get"),
            Some(payload(i as u8, 64 + i)),
            "key {k} must not share storage with another key"
        );
    }
}

fn put_many_is_put_each(store: &dyn TileStore) {
    let tiles: Vec<_> = (0..4u64)
        .flat_map(|y| (0..4u64).map(move |x| (x, y)))
        .map(|(x, y)| {
            (
                key("c-many", 8, 100 + x, 60 + y, TileFormat::Png),
                payload((x * 4 + y) as u8, 200),
            )
        })
        .collect();
    store
        .put_many(tiles.clone(), Durability::Synced)
        .expect("put_many");
    for (k, data) in tiles {
        assert_eq!(
            store.get(&k).expect("get"),
            Some(data),
            "put_many stores {k}"
        );
    }
}

fn delete_removes(store: &dyn TileStore) {
    let k = key("c-delete", 2, 1, 1, TileFormat::Webp);
    store
        .put(&k, payload(9, 77), Durability::Buffered)
        .expect("put");
    store.delete(&k).expect("delete");
    assert_eq!(store.peek(&k), None, "a deleted tile is not in memory");
    assert!(
        !matches!(store.peek_or_absent(&k), crate::Peek::Held(_)),
        "a deleted tile is not held"
    );
    assert_eq!(store.get(&k).expect("get"), None, "deleted tile is gone");
    assert!(
        !store.exists(&k).expect("exists"),
        "deleted tile does not exist"
    );
    store.delete(&k).expect("deleting a missing tile succeeds");
}

fn layer_keys_name_the_held_keys(store: &dyn TileStore) {
    let held = [
        "c-keys~items=00aa",
        "c-keys~items=00bb",
        "c-keys~time=1~items=0c",
    ];
    let others = ["c-keys", "c-keysx~items=00dd", "c-other~items=00aa"];
    for (i, layer) in held.iter().chain(&others).enumerate() {
        store
            .put(
                &key(layer, 3, i as u64, 2, TileFormat::Png),
                payload(i as u8, 20),
                Durability::Buffered,
            )
            .expect("put");
    }
    let Some(keys) = store
        .layer_keys("c-keys~items=", "WebMercatorQuad", TileFormat::Png)
        .expect("layer_keys")
    else {
        panic!("layer_keys: {} cannot list its layer keys", store.name());
    };
    assert_eq!(
        keys,
        ["c-keys~items=00aa", "c-keys~items=00bb"],
        "layer_keys names the keys under the prefix, sorted, once each"
    );
    let none = store
        .layer_keys("c-none~items=", "WebMercatorQuad", TileFormat::Png)
        .expect("layer_keys");
    assert_eq!(
        none,
        Some(vec![]),
        "layer_keys of an unknown prefix is empty"
    );
}

fn truncate_removes_the_area_only(store: &dyn TileStore) {
    // A 12 x 12 block of zoom 5 and the whole of zoom 1 and 2, then cut a
    // 5 x 7 window out of zoom 5 (not aligned to any pack or metatile), two
    // one-row spans (as a polygon gives) and all of zoom 1.
    let layer = "c-truncate";
    let mut tiles = Vec::new();
    for y in 3..15 {
        for x in 6..18 {
            tiles.push((
                key(layer, 5, x, y, TileFormat::Png),
                payload((x + y) as u8, 40),
            ));
        }
    }
    for z in 1..=2u32 {
        for y in 0..(1u64 << z) {
            for x in 0..(1u64 << z) {
                tiles.push((key(layer, z, x, y, TileFormat::Png), payload(z as u8, 30)));
            }
        }
    }
    store
        .put_many(tiles.clone(), Durability::Buffered)
        .expect("put_many");
    let range = |z: u8, min_x, min_y, max_x, max_y| {
        let n = 1u32 << z;
        AreaRange {
            range: TileRange {
                z,
                min_x,
                min_y,
                max_x,
                max_y,
            },
            matrix_width: n,
            matrix_height: n,
        }
    };
    let area = TileArea {
        progress: std::sync::Arc::default(),
        layer: layer.into(),
        grid: "WebMercatorQuad".into(),
        format: TileFormat::Png,
        ranges: vec![
            range(5, 7, 4, 11, 10),
            range(5, 13, 12, 16, 12),
            range(5, 2, 13, 30, 13),
            range(1, 0, 0, 1, 1),
        ],
    };
    store.truncate(&area).expect("truncate");
    for (k, data) in &tiles {
        let got = store.get(k).expect("get");
        if area.contains(k) {
            assert_eq!(got, None, "truncate removes {k}");
        } else {
            assert_eq!(
                got.as_ref(),
                Some(data),
                "truncate keeps {k} outside the area"
            );
        }
    }
    // Another format of the same layer is untouched by the area.
    let other = key(layer, 5, 8, 5, TileFormat::Jpeg);
    store
        .put(&other, payload(1, 10), Durability::Buffered)
        .expect("put");
    store.truncate(&area).expect("truncating again succeeds");
    assert!(store.exists(&other).expect("exists"), "other formats stay");
}

fn all_exist_agrees_with_exists(store: &dyn TileStore) {
    let keys: Vec<TileKey> = (0..16)
        .map(|i| key("c-all-exist", 6, 8 + i % 4, 4 + i / 4, TileFormat::Png))
        .collect();
    assert!(
        store.all_exist(&[]).expect("all_exist"),
        "no keys: all exist"
    );
    assert!(
        !store.all_exist(&keys).expect("all_exist"),
        "none stored yet"
    );
    let tiles = keys.iter().map(|k| (k.clone(), payload(4, 20))).collect();
    store
        .put_many(tiles, Durability::Buffered)
        .expect("put_many");
    assert!(store.all_exist(&keys).expect("all_exist"), "all stored");
    store.delete(&keys[9]).expect("delete");
    assert!(
        !store.all_exist(&keys).expect("all_exist"),
        "one deleted: not all exist"
    );
}

fn get_many_agrees_with_get(store: &dyn TileStore) {
    // Two blocks of tiles (several groups on stores that group them), a
    // missing one in between, and a key asked twice.
    let mut keys: Vec<TileKey> = (0..8)
        .map(|i| key("c-get-many", 7, 16 + i % 4, 8 + i / 4 * 9, TileFormat::Png))
        .collect();
    let tiles = keys
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 5)
        .map(|(i, k)| (k.clone(), payload(40 + i as u8, 30)))
        .collect();
    store
        .put_many(tiles, Durability::Buffered)
        .expect("put_many");
    keys.push(keys[2].clone());
    let many = store.get_many(&keys).expect("get_many");
    assert_eq!(many.len(), keys.len());
    for (k, got) in keys.iter().zip(many) {
        let one = store.get(k).expect("get");
        assert_eq!(got.map(|t| t.bytes), one, "get_many and get differ for {k}");
    }
    assert!(store.get_many(&[]).expect("get_many").is_empty());
}

fn empty_tile_refused(store: &dyn TileStore) {
    let k = key("c-empty", 1, 0, 0, TileFormat::Png);
    match store.put(&k, Bytes::new(), Durability::Buffered) {
        Err(StoreError::Invalid { .. }) => {}
        other => panic!("an empty tile must be refused as Invalid, got {other:?}"),
    }
    assert_eq!(
        store.get(&k).expect("get"),
        None,
        "nothing stored for an empty put"
    );
}

fn large_tile(store: &dyn TileStore) {
    let k = key("c-large", 10, 500, 400, TileFormat::Png);
    let data = payload(3, 4 << 20);
    store
        .put(&k, data.clone(), Durability::Buffered)
        .expect("put");
    assert_eq!(
        store.get(&k).expect("get"),
        Some(data),
        "a 4 MiB tile round-trips"
    );
}

fn concurrent_writers(store: &Arc<dyn TileStore>) {
    let threads: Vec<_> = (0..8u8)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                for i in 0..40u64 {
                    let own = key("c-concurrent", 9, u64::from(t), i, TileFormat::Png);
                    store
                        .put(&own, payload(t, 100 + i as usize), Durability::Buffered)
                        .expect("put");
                    let shared = key("c-concurrent", 9, 100, i % 4, TileFormat::Png);
                    store
                        .put(&shared, payload(t, 2000), Durability::Buffered)
                        .expect("put");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("writer thread");
    }
    for t in 0..8u8 {
        for i in 0..40u64 {
            let own = key("c-concurrent", 9, u64::from(t), i, TileFormat::Png);
            assert_eq!(
                store.get(&own).expect("get"),
                Some(payload(t, 100 + i as usize)),
                "{own}"
            );
        }
    }
    let candidates: HashSet<Bytes> = (0..8u8).map(|t| payload(t, 2000)).collect();
    for i in 0..4u64 {
        let shared = key("c-concurrent", 9, 100, i, TileFormat::Png);
        let got = store
            .get(&shared)
            .expect("get")
            .expect("shared tile stored");
        assert!(
            candidates.contains(&got),
            "a contended tile holds one whole written value"
        );
    }
}

fn readers_never_see_torn_tiles(store: &Arc<dyn TileStore>) {
    let k = key("c-torn", 12, 1000, 1000, TileFormat::Png);
    let values: Vec<Bytes> = (0..4u8).map(|s| payload(s, 64 * 1024)).collect();
    let writer = {
        let (store, k, values) = (store.clone(), k.clone(), values.clone());
        std::thread::spawn(move || {
            for i in 0..200 {
                store
                    .put(&k, values[i % values.len()].clone(), Durability::Buffered)
                    .expect("put");
            }
        })
    };
    let mut reads = 0;
    while !writer.is_finished() || reads == 0 {
        if let Some(got) = store.get(&k).expect("get") {
            assert!(values.contains(&got), "a reader saw a torn or mixed tile");
        }
        reads += 1;
    }
    writer.join().expect("writer thread");
}

fn stored_times(store: &dyn TileStore) {
    // File times may be coarser than the clock and lag it a little.
    let slack = std::time::Duration::from_secs(2);
    let k = key("c-stamp", 5, 3, 4, TileFormat::Png);
    let before = std::time::SystemTime::now();
    store
        .put(&k, payload(9, 300), Durability::Buffered)
        .expect("put");
    let after = std::time::SystemTime::now();
    let got = store
        .get_stored(&k)
        .expect("get_stored")
        .expect("get_stored must find a stored tile");
    assert_eq!(
        Some(got.bytes),
        store.get(&k).expect("get"),
        "get_stored must agree with get"
    );
    let at = got
        .stored_at
        .expect("a tile this store wrote must have its store time");
    assert!(
        at + slack >= before && at <= after + slack,
        "store time {at:?} must lie between {before:?} and {after:?}"
    );
    assert_eq!(
        store
            .get_stored(&key("c-stamp", 5, 3, 5, TileFormat::Png))
            .expect("get_stored"),
        None,
        "get_stored of a missing tile must be None"
    );
}

fn fingerprints_are_claimed_once(store: &Arc<dyn TileStore>) {
    assert_eq!(
        store.claim_fingerprint("c-fp", "aaaa").expect("claim"),
        "aaaa",
        "the first claim must be recorded"
    );
    assert_eq!(
        store.claim_fingerprint("c-fp", "bbbb").expect("claim"),
        "aaaa",
        "a later claim must get the recorded fingerprint back"
    );
    assert_eq!(
        store
            .claim_fingerprint("c-fp-other", "bbbb")
            .expect("claim"),
        "bbbb",
        "layer keys must have their own fingerprints"
    );
    let answers: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..6)
            .map(|i| {
                let store = store.clone();
                s.spawn(move || {
                    store
                        .claim_fingerprint("c-fp-race", &format!("fp{i}"))
                        .expect("claim")
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("claim thread"))
            .collect()
    });
    assert!(
        answers.iter().all(|a| a == &answers[0]),
        "concurrent claims must agree on one fingerprint: {answers:?}"
    );
}
