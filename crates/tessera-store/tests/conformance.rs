//! Every local backend passes the shared conformance suite.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use tessera_store::conformance::{key, payload, run_all};
use tessera_store::{Durability, FileLayout, FileStore, MemoryStore, TileStore};

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
    let k = key("relief", 3, 2, 1, "png");
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
    let k = key("relief", 2, 1, 1, "png");
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
                &key("m", 5, i, 0, "png"),
                payload(i as u8, 1000),
                Durability::Buffered,
            )
            .unwrap();
        // Keep tile 0 recently used: it must survive eviction.
        assert!(store.get(&key("m", 5, 0, 0, "png")).unwrap().is_some());
        assert!(store.resident_bytes() <= 10_000);
    }
    assert_eq!(store.resident_tiles(), 10);
    assert!(
        store.get(&key("m", 5, 1, 0, "png")).unwrap().is_none(),
        "oldest evicted"
    );
    assert!(
        store.get(&key("m", 5, 19, 0, "png")).unwrap().is_some(),
        "newest kept"
    );
    // A tile larger than the whole budget is not kept at all.
    store
        .put(
            &key("m", 5, 30, 0, "png"),
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
    let k = key("m", 4, 3, 3, "png");
    file.put(&k, payload(5, 100), Durability::Buffered).unwrap();
    let mem = MemoryStore::new(1 << 20, Some(file.clone()));
    assert_eq!(mem.get(&k).unwrap(), Some(payload(5, 100)));
    assert_eq!(mem.resident_tiles(), 1);
    mem.delete(&k).unwrap();
    assert_eq!(mem.get(&k).unwrap(), None);
    assert_eq!(file.get(&k).unwrap(), None);
}
