//! Every local backend passes the shared conformance suite.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use tessera_grid::TileFormat;
use tessera_store::conformance::{key, payload, run_all};
use tessera_store::{
    Durability, FileLayout, FileStore, HeldFile, HeldTile, JournalOptions, JournalStore,
    MbtilesOptions, MbtilesStore, MemoryStore, Peek, Peeked, TileStore,
};

#[test]
fn file_store_xyz() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn TileStore> = Arc::new(FileStore::open(dir.path(), FileLayout::Xyz).unwrap());
    run_all(&store);
}

#[test]
fn file_store_tms() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn TileStore> = Arc::new(FileStore::open(dir.path(), FileLayout::Tms).unwrap());
    run_all(&store);
}

#[test]
fn file_store_staged_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path(), FileLayout::Xyz)
        .unwrap()
        .staged_by_name();
    assert!(!store.writes_unnamed());
    let store: Arc<dyn TileStore> = Arc::new(store);
    run_all(&store);
}

/// The entries of the store's staging directories (leftovers of writes).
fn staged_files(root: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(root.join(".staging")).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        }
    }
    found
}

#[test]
fn new_tiles_are_linked_from_unnamed_files_and_replacements_renamed_into_place() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path(), FileLayout::Xyz).unwrap();
    // Every Linux file system tessera is deployed on (ext4, XFS, btrfs,
    // tmpfs) has O_TMPFILE; the tests' temporary directory is one of them.
    assert!(
        store.writes_unnamed(),
        "unnamed files are not supported under {}",
        dir.path().display()
    );
    let k = key("t", 3, 1, 2, TileFormat::Png);
    store.put(&k, payload(1, 100), Durability::Synced).unwrap();
    let path = store.path_of(&k);
    assert_eq!(std::fs::read(&path).unwrap(), payload(1, 100).to_vec());
    let first = std::fs::metadata(&path).unwrap().ino();
    assert!(staged_files(dir.path()).is_empty());

    // The name is taken: the new file replaces it whole, by rename.
    let replacement = bytes::Bytes::from_static(b"a replacement tile");
    store
        .put(&k, replacement.clone(), Durability::Buffered)
        .unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), replacement.to_vec());
    assert_ne!(std::fs::metadata(&path).unwrap().ino(), first);
    assert!(staged_files(dir.path()).is_empty());

    // A batch larger than the unnamed files one batch may hold open: the
    // rest go through the staging directory; all of it lands.
    let tiles: Vec<_> = (0..300u64)
        .map(|i| (key("t", 9, i, i % 7, TileFormat::Png), payload(i as u8, 64)))
        .collect();
    store.put_many(tiles.clone(), Durability::Synced).unwrap();
    for (k, data) in &tiles {
        assert_eq!(store.get(k).unwrap().unwrap(), *data, "{k}");
    }
    assert!(staged_files(dir.path()).is_empty());
    // Nothing but the tile in its directory.
    let one = store.path_of(&tiles[5].0);
    let mut names: Vec<String> = std::fs::read_dir(one.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["5.png"]);
}

#[test]
fn journal_store() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn TileStore> =
        Arc::new(JournalStore::open(dir.path(), JournalOptions::default()).unwrap());
    run_all(&store);
}

#[test]
fn journal_store_keeps_tiles_and_deletes_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let options = JournalOptions {
        segment_size: 256 * 1024,
        ..JournalOptions::default()
    };
    {
        let store = JournalStore::open(dir.path(), options).unwrap();
        let tiles: Vec<_> = (0..100u64)
            .map(|i| (key("j", 9, i, 7, TileFormat::Png), payload(i as u8, 5000)))
            .collect();
        store.put_many(tiles, Durability::Synced).unwrap();
        store
            .put(
                &key("j", 9, 3, 7, TileFormat::Png),
                payload(200, 10),
                Durability::Synced,
            )
            .unwrap();
        store.delete(&key("j", 9, 4, 7, TileFormat::Png)).unwrap();
    }
    // The close wrote a checkpoint: a reopen replays only what follows it.
    assert!(dir.path().join("index.ckpt").is_file());
    let store = JournalStore::open(dir.path(), options).unwrap();
    assert_eq!(store.len(), 99);
    store
        .put(
            &key("j", 9, 5, 7, TileFormat::Png),
            payload(201, 10),
            Durability::Buffered,
        )
        .unwrap();
    store.checkpoint().unwrap();
    store.delete(&key("j", 9, 6, 7, TileFormat::Png)).unwrap();
    // The files as a crash would leave them (no closing checkpoint): the
    // records after the last checkpoint are replayed on top of it.
    let crashed = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), crashed.path().join(e.file_name())).unwrap();
    }
    drop(store);
    let store = JournalStore::open(crashed.path(), options).unwrap();
    assert_eq!(store.len(), 98);
    assert_eq!(
        store.get(&key("j", 9, 5, 7, TileFormat::Png)).unwrap(),
        Some(payload(201, 10))
    );
    assert_eq!(
        store.get(&key("j", 9, 6, 7, TileFormat::Png)).unwrap(),
        None
    );
    assert_eq!(
        store.get(&key("j", 9, 3, 7, TileFormat::Png)).unwrap(),
        Some(payload(200, 10))
    );
    assert_eq!(
        store.get(&key("j", 9, 4, 7, TileFormat::Png)).unwrap(),
        None
    );
    assert_eq!(
        store.get(&key("j", 9, 99, 7, TileFormat::Png)).unwrap(),
        Some(payload(99, 5000))
    );
}

/// A checkpoint reads the index one shard at a time while writes go on: a
/// crash after it loses nothing, whichever of the writes made meanwhile it
/// holds (their records are replayed on top of it).
#[test]
fn a_checkpoint_taken_while_writes_go_on_reopens_whole() {
    let dir = tempfile::tempdir().unwrap();
    let options = JournalOptions {
        segment_size: 256 * 1024,
        ..JournalOptions::default()
    };
    let value =
        |w: u64, i: u64, round: u64| payload((w * 31 + i * 7 + round) as u8, 200 + i as usize);
    let store = Arc::new(JournalStore::open(dir.path(), options).unwrap());
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let writers: Vec<_> = (0..4u64)
        .map(|w| {
            let (store, done) = (store.clone(), done.clone());
            std::thread::spawn(move || {
                for round in 0..6u64 {
                    for i in 0..50u64 {
                        let key = key("k", 10, w * 100 + i, 3, TileFormat::Png);
                        if round == 5 && i % 5 == 0 {
                            store.delete(&key).unwrap();
                        } else {
                            store
                                .put(&key, value(w, i, round), Durability::Synced)
                                .unwrap();
                        }
                    }
                }
                done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            })
        })
        .collect();
    let mut checkpoints = 0;
    while done.load(std::sync::atomic::Ordering::SeqCst) < 4 {
        store.checkpoint().unwrap();
        checkpoints += 1;
    }
    for w in writers {
        w.join().unwrap();
    }
    assert!(checkpoints > 1, "checkpoints were taken while writing");
    // The files as a crash would leave them: no checkpoint after the writes.
    let crashed = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), crashed.path().join(e.file_name())).unwrap();
        }
    }
    drop(store);
    let store = JournalStore::open(crashed.path(), options).unwrap();
    assert_eq!(store.len(), 4 * 40);
    for w in 0..4u64 {
        for i in 0..50u64 {
            let got = store
                .get(&key("k", 10, w * 100 + i, 3, TileFormat::Png))
                .unwrap();
            let want = (i % 5 != 0).then(|| value(w, i, 5));
            assert_eq!(got, want, "writer {w} tile {i}");
        }
    }
}

#[test]
fn journal_compaction_reclaims_dead_segments_while_writes_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let options = JournalOptions {
        segment_size: 64 * 1024,
        ..JournalOptions::default()
    };
    let latest = |i: u64, round: u64| payload((i * 7 + round) as u8, 1500 + (i % 7) as usize);
    {
        let store = Arc::new(JournalStore::open_with(dir.path(), options, 0.0).unwrap());
        for round in 0..4 {
            for i in 0..120u64 {
                store
                    .put(
                        &key("c", 10, i, 1, TileFormat::Png),
                        latest(i, round),
                        Durability::Buffered,
                    )
                    .unwrap();
            }
        }
        for i in 0..10u64 {
            store.delete(&key("c", 10, i, 1, TileFormat::Png)).unwrap();
        }
        let before = store.segment_count();
        // A writer keeps going on other keys while compaction runs.
        let writer = {
            let store = store.clone();
            std::thread::spawn(move || {
                for i in 0..300u64 {
                    store
                        .put(
                            &key("w", 10, i, 2, TileFormat::Png),
                            payload(i as u8, 900),
                            Durability::Buffered,
                        )
                        .unwrap();
                }
            })
        };
        let stats = store.compact(0.5).unwrap();
        writer.join().unwrap();
        assert!(stats.segments_released > 0, "{stats:?}");
        assert!(stats.bytes_reclaimed > 0);
        assert!(
            store.segment_count() < before + 6,
            "dead segments were given back"
        );
        for i in 10..120u64 {
            assert_eq!(
                store.get(&key("c", 10, i, 1, TileFormat::Png)).unwrap(),
                Some(latest(i, 3)),
                "tile {i}"
            );
        }
        for i in 0..10u64 {
            assert_eq!(
                store.get(&key("c", 10, i, 1, TileFormat::Png)).unwrap(),
                None,
                "deleted {i}"
            );
        }
    }
    let check = |store: &JournalStore| {
        for i in 10..120u64 {
            assert_eq!(
                store.get(&key("c", 10, i, 1, TileFormat::Png)).unwrap(),
                Some(latest(i, 3)),
                "tile {i}"
            );
        }
        for i in 0..10u64 {
            assert!(
                store
                    .get(&key("c", 10, i, 1, TileFormat::Png))
                    .unwrap()
                    .is_none(),
                "deleted {i} stays deleted"
            );
        }
        for i in 0..300u64 {
            assert_eq!(
                store.get(&key("w", 10, i, 2, TileFormat::Png)).unwrap(),
                Some(payload(i as u8, 900))
            );
        }
    };
    // With the checkpoint written at close, and with a full replay.
    check(&JournalStore::open(dir.path(), options).unwrap());
    std::fs::remove_file(dir.path().join("index.ckpt")).unwrap();
    check(&JournalStore::open(dir.path(), options).unwrap());
    // Released segments were recycled or wait in the free pool.
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().any(|n| n.starts_with("free-")) || names.len() > 2,
        "{names:?}"
    );
}

#[test]
fn mbtiles_store() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn TileStore> =
        Arc::new(MbtilesStore::open(dir.path(), MbtilesOptions::default()).unwrap());
    run_all(&store);
}

#[test]
fn mbtiles_files_follow_the_spec_and_tms_rows() {
    let dir = tempfile::tempdir().unwrap();
    let store = MbtilesStore::open(dir.path(), MbtilesOptions::default()).unwrap();
    let k = key("relief", 3, 2, 1, TileFormat::Png);
    store.put(&k, payload(1, 10), Durability::Synced).unwrap();
    let conn = rusqlite::Connection::open(store.path_of(&k)).unwrap();
    let row: (i64, i64, i64, Vec<u8>) = conn
        .query_row(
            "SELECT zoom_level, tile_column, tile_row, tile_data FROM tiles",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .unwrap();
    // Row 1 from the top of an 8-row matrix is row 6 from the bottom.
    assert_eq!(row, (3, 2, 6, payload(1, 10).to_vec()));
    let format: String = conn
        .query_row(
            "SELECT value FROM metadata WHERE name = 'format'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(format, "png");
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
}

#[test]
fn many_concurrent_mbtiles_writers_never_lose_a_tile_or_see_a_locked_database() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(MbtilesStore::open(dir.path(), MbtilesOptions::default()).unwrap());
    let threads: Vec<_> = (0..16u64)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                for i in 0..50u64 {
                    let tiles = (0..4u64)
                        .map(|j| {
                            (
                                key("m", 12, t * 200 + i * 4 + j, 5, TileFormat::Png),
                                payload(j as u8, 3000),
                            )
                        })
                        .collect();
                    store.put_many(tiles, Durability::Buffered).unwrap();
                    assert!(
                        store
                            .get(&key("m", 12, t * 200 + i * 4, 5, TileFormat::Png))
                            .unwrap()
                            .is_some()
                    );
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // A second store (as another process would) sees every tile.
    let other = MbtilesStore::open(dir.path(), MbtilesOptions::default()).unwrap();
    for t in 0..16u64 {
        for i in 0..200u64 {
            assert!(
                other
                    .exists(&key("m", 12, t * 200 + i, 5, TileFormat::Png))
                    .unwrap(),
                "tile {t}/{i}"
            );
        }
    }
}

#[test]
fn memory_store_alone() {
    let store: Arc<dyn TileStore> = Arc::new(MemoryStore::new(64 << 20, None));
    run_all(&store);
}

#[test]
fn memory_store_in_front_of_file_store() {
    let dir = tempfile::tempdir().unwrap();
    let file: Arc<dyn TileStore> = Arc::new(FileStore::open(dir.path(), FileLayout::Xyz).unwrap());
    let store: Arc<dyn TileStore> = Arc::new(MemoryStore::new(1 << 20, Some(file)));
    run_all(&store);
}

#[test]
fn file_layouts_are_what_other_tools_read() {
    let dir = tempfile::tempdir().unwrap();
    let xyz = FileStore::open(dir.path().join("xyz"), FileLayout::Xyz).unwrap();
    let tms = FileStore::open(dir.path().join("tms"), FileLayout::Tms).unwrap();
    let k = key("relief", 3, 2, 1, TileFormat::Png);
    xyz.put(&k, payload(1, 10), Durability::Buffered).unwrap();
    tms.put(&k, payload(1, 10), Durability::Buffered).unwrap();
    assert!(
        dir.path()
            .join("xyz/relief/WebMercatorQuad/3/2/1.png")
            .is_file()
    );
    // Row 1 from the top of an 8-row matrix is row 6 from the bottom.
    assert!(
        dir.path()
            .join("tms/relief/WebMercatorQuad/3/2/6.png")
            .is_file()
    );
}

#[test]
fn staging_left_by_a_dead_process_is_swept_and_a_live_one_kept() {
    let dir = tempfile::tempdir().unwrap();
    let staging = dir.path().join(".staging");
    std::fs::create_dir_all(staging.join("999-1-0")).unwrap();
    std::fs::write(staging.join("999-1-0.lock"), b"").unwrap();
    std::fs::write(staging.join("999-1-0/7.tmp"), b"half a tile").unwrap();
    std::fs::create_dir_all(staging.join("orphan")).unwrap();

    let live = FileStore::open(dir.path(), FileLayout::Xyz).unwrap();
    let entries = || {
        let mut names: Vec<String> = std::fs::read_dir(&staging)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let after_first = entries();
    assert_eq!(
        after_first.len(),
        2,
        "only the live store's dir and lock remain: {after_first:?}"
    );
    assert!(
        !after_first
            .iter()
            .any(|n| n.starts_with("999-") || n == "orphan")
    );

    // A second store on the same root must not sweep the live one's staging.
    let second = FileStore::open(dir.path(), FileLayout::Xyz).unwrap();
    assert_eq!(entries().len(), 4);
    drop(second);
    assert_eq!(entries(), after_first);
    drop(live);
    assert!(entries().is_empty());
}

#[test]
fn a_zero_length_file_is_not_a_tile() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path(), FileLayout::Xyz).unwrap();
    let k = key("relief", 2, 1, 1, TileFormat::Png);
    let path = store.path_of(&k);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, b"").unwrap();
    assert_eq!(store.get(&k).unwrap(), None);
    assert!(!store.exists(&k).unwrap());
}

#[test]
fn memory_store_stays_within_its_byte_budget_and_evicts_least_recent() {
    let store = MemoryStore::new(10_000, None);
    for i in 0..20u64 {
        store
            .put(
                &key("m", 5, i, 0, TileFormat::Png),
                payload(i as u8, 1000),
                Durability::Buffered,
            )
            .unwrap();
        // Keep tile 0 recently used: it must survive eviction.
        assert!(
            store
                .get(&key("m", 5, 0, 0, TileFormat::Png))
                .unwrap()
                .is_some()
        );
        assert!(store.resident_bytes() <= 10_000);
    }
    assert_eq!(store.resident_tiles(), 10);
    assert!(
        store
            .get(&key("m", 5, 1, 0, TileFormat::Png))
            .unwrap()
            .is_none(),
        "oldest evicted"
    );
    assert!(
        store
            .get(&key("m", 5, 19, 0, TileFormat::Png))
            .unwrap()
            .is_some(),
        "newest kept"
    );
    // A tile larger than the whole budget is not kept at all.
    store
        .put(
            &key("m", 5, 30, 0, TileFormat::Png),
            payload(1, 20_000),
            Durability::Buffered,
        )
        .unwrap();
    assert!(store.resident_bytes() <= 10_000);
}

#[test]
fn memory_store_reads_through_and_forgets_deleted_tiles() {
    let dir = tempfile::tempdir().unwrap();
    let file: Arc<dyn TileStore> = Arc::new(FileStore::open(dir.path(), FileLayout::Xyz).unwrap());
    let k = key("m", 4, 3, 3, TileFormat::Png);
    file.put(&k, payload(5, 100), Durability::Buffered).unwrap();
    let mem = MemoryStore::new(1 << 20, Some(file.clone()));
    assert_eq!(mem.get(&k).unwrap(), Some(payload(5, 100)));
    assert_eq!(mem.resident_tiles(), 1);
    mem.delete(&k).unwrap();
    assert_eq!(mem.get(&k).unwrap(), None);
    assert_eq!(file.get(&k).unwrap(), None);
}

#[test]
fn a_file_in_the_page_cache_is_read_without_blocking_and_a_missing_or_empty_one_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path(), FileLayout::Xyz).unwrap();
    let k = key("relief", 2, 1, 1, TileFormat::Png);
    assert_eq!(store.peek(&k), None, "missing");
    // Just written, so every page of it is cached.
    store
        .put(&k, payload(3, 70_000), Durability::Buffered)
        .unwrap();
    let held = store.peek(&k).expect("a cached file is answered");
    assert_eq!(held.bytes, payload(3, 70_000));
    assert_eq!(held.hash, tessera_store::content_hash(&held.bytes));
    assert_eq!(
        held.stored_at,
        store.get_stored(&k).unwrap().unwrap().stored_at
    );
    std::fs::write(store.path_of(&k), b"").unwrap();
    assert_eq!(store.peek(&k), None, "an empty file is not a tile");
}

#[test]
fn a_missing_file_is_known_absent_without_blocking_and_a_stored_one_never_is() {
    let dir = tempfile::tempdir().unwrap();
    let file: Arc<dyn TileStore> = Arc::new(FileStore::open(dir.path(), FileLayout::Xyz).unwrap());
    let front = MemoryStore::new(1 << 20, Some(file.clone()));
    let alone = MemoryStore::new(1 << 20, None);
    let k = key("relief", 3, 2, 5, TileFormat::Png);
    // No directory of the layer yet, then the directories but not the file.
    assert_eq!(file.peek_or_absent(&k), Peek::Absent);
    file.put(
        &key("relief", 3, 2, 4, TileFormat::Png),
        payload(1, 100),
        Durability::Buffered,
    )
    .unwrap();
    for store in [file.as_ref(), &front as &dyn TileStore, &alone] {
        assert_eq!(store.peek_or_absent(&k), Peek::Absent, "{}", store.name());
    }
    for store in [&front as &dyn TileStore, &alone] {
        store
            .put(&k, payload(2, 100), Durability::Buffered)
            .unwrap();
        assert!(
            matches!(store.peek_or_absent(&k), Peek::Held(ref h) if h.bytes == payload(2, 100)),
            "{}",
            store.name()
        );
        store.delete(&k).unwrap();
        assert_eq!(store.peek_or_absent(&k), Peek::Absent, "{}", store.name());
    }
    // A file that cannot be opened for another reason is not absent.
    let blocked = dir.path().join("relief/WebMercatorQuad/3/2/5.png");
    std::fs::create_dir_all(blocked.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink("5.png", &blocked).unwrap();
    assert_eq!(file.peek_or_absent(&k), Peek::Unknown, "a link to itself");
}

/// The hash the file answer carries, or a panic when the answer is bytes.
fn peeked_file(peeked: Option<Peeked>) -> HeldFile {
    match peeked {
        Some(Peeked::File(f)) => f,
        other => panic!("expected the open file, got {other:?}"),
    }
}

fn peeked_bytes(peeked: Option<Peeked>) -> HeldTile {
    match peeked {
        Some(Peeked::Held(held)) => held,
        other => panic!("expected the bytes, got {other:?}"),
    }
}

#[test]
fn a_file_read_once_is_answered_as_the_open_file_until_it_changes() {
    use std::io::Read;
    let dir = tempfile::tempdir().unwrap();
    for layout in [FileLayout::Xyz, FileLayout::Tms] {
        let store = FileStore::open(dir.path().join(format!("{layout:?}")), layout).unwrap();
        let k = key("relief", 3, 5, 2, TileFormat::Png);
        assert!(store.peek_file(&k).is_none(), "missing");
        store
            .put(&k, payload(3, 70_000), Durability::Buffered)
            .unwrap();
        // First sight: read and hashed.
        let first = peeked_bytes(store.peek_file(&k));
        assert_eq!(first.bytes, payload(3, 70_000));
        // Then the file itself, with the same hash and time.
        let held = peeked_file(store.peek_file(&k));
        assert_eq!((held.hash, held.len), (first.hash, 70_000));
        assert_eq!(held.stored_at, first.stored_at);
        // The next hit is given the same open file (kept for hits).
        let again = peeked_file(store.peek_file(&k));
        assert!(std::sync::Arc::ptr_eq(&held.file, &again.file));
        let mut sent = Vec::new();
        (&*held.file).read_to_end(&mut sent).unwrap();
        assert_eq!(
            sent,
            payload(3, 70_000),
            "{layout:?}: the file opened is the tile's"
        );

        // Replaced by a rename (a new tile): read again, new hash.
        store
            .put(&k, payload(4, 70_000), Durability::Buffered)
            .unwrap();
        let replaced = peeked_bytes(store.peek_file(&k));
        assert_eq!(replaced.bytes, payload(4, 70_000));
        assert_eq!(peeked_file(store.peek_file(&k)).hash, replaced.hash);

        // Rewritten in place by another tool, same length: read again (a
        // clock tick later; kernels before 6.13 stamp changes within one
        // tick alike).
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(store.path_of(&k), payload(5, 70_000)).unwrap();
        let rewritten = peeked_bytes(store.peek_file(&k));
        assert_eq!(rewritten.bytes, payload(5, 70_000));
        assert_ne!(rewritten.hash, replaced.hash);
        assert_eq!(peeked_file(store.peek_file(&k)).hash, rewritten.hash);
    }
}

#[test]
fn without_open_files_every_file_hit_opens_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path(), FileLayout::Xyz)
        .unwrap()
        .with_open_files(0, std::time::Duration::from_mins(1));
    let k = key("relief", 2, 1, 1, TileFormat::Png);
    store
        .put(&k, payload(3, 5000), Durability::Buffered)
        .unwrap();
    peeked_bytes(store.peek_file(&k));
    let (a, b) = (
        peeked_file(store.peek_file(&k)),
        peeked_file(store.peek_file(&k)),
    );
    assert!(!std::sync::Arc::ptr_eq(&a.file, &b.file));
    // A file deleted is gone at once, held or not.
    let held = FileStore::open(dir.path().join("held"), FileLayout::Xyz).unwrap();
    held.put(&k, payload(3, 5000), Durability::Buffered)
        .unwrap();
    peeked_bytes(held.peek_file(&k));
    peeked_file(held.peek_file(&k));
    held.delete(&k).unwrap();
    assert!(held.peek_file(&k).is_none(), "a deleted tile is no hit");
}

#[test]
fn without_a_hash_cache_every_file_hit_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open(dir.path(), FileLayout::Xyz)
        .unwrap()
        .with_hash_cache(0);
    let k = key("relief", 2, 1, 1, TileFormat::Png);
    store
        .put(&k, payload(3, 5000), Durability::Buffered)
        .unwrap();
    for _ in 0..3 {
        assert_eq!(peeked_bytes(store.peek_file(&k)).bytes, payload(3, 5000));
    }
}

#[test]
fn memory_store_answers_peek_from_its_inner_store_and_keeps_the_tile() {
    let dir = tempfile::tempdir().unwrap();
    let file = Arc::new(FileStore::open(dir.path(), FileLayout::Xyz).unwrap());
    let k = key("m", 5, 3, 3, TileFormat::Png);
    file.put(&k, payload(7, 5000), Durability::Buffered)
        .unwrap();
    let path = file.path_of(&k);
    let mem = MemoryStore::new(1 << 20, Some(file as Arc<dyn TileStore>));
    assert_eq!(mem.resident_tiles(), 0);
    assert_eq!(mem.peek(&k).unwrap().bytes, payload(7, 5000));
    assert_eq!(mem.resident_tiles(), 1, "kept in memory");
    std::fs::remove_file(path).unwrap();
    assert_eq!(
        mem.peek(&k).unwrap().bytes,
        payload(7, 5000),
        "now from memory"
    );
}

/// Writers that open one new MBTiles file at once (several seeds of one
/// layer, each its own store) all set it up and write: the schema is set
/// up by one at a time.
#[test]
fn stores_opening_one_new_mbtiles_file_at_once_all_write() {
    let writers = 8u64;
    for _ in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        let start = std::sync::Barrier::new(writers as usize);
        std::thread::scope(|scope| {
            for i in 0..writers {
                let (path, start) = (dir.path(), &start);
                scope.spawn(move || {
                    let store = MbtilesStore::open(path, MbtilesOptions::default()).unwrap();
                    let k = key("race", 4, i, 3, TileFormat::Png);
                    start.wait();
                    store
                        .put(&k, payload(i as u8, 300), Durability::Synced)
                        .unwrap();
                });
            }
        });
        let store = MbtilesStore::open(dir.path(), MbtilesOptions::default()).unwrap();
        for i in 0..writers {
            let k = key("race", 4, i, 3, TileFormat::Png);
            assert_eq!(
                store.get(&k).unwrap().unwrap(),
                payload(i as u8, 300),
                "{k}"
            );
        }
    }
}
