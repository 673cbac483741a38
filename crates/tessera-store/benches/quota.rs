//! Disk quotas: what recording hits costs a store's hit path, and how fast
//! a quota evicts from a store of a million tiles.
//!
//! Run: `cargo bench -p tessera-store --bench quota` (release build; prints
//! a markdown table, committed as docs/benchmarks/quota.md).
//!
//! Hits: `THREADS` threads read random tiles of 10,000 for `HIT_SECONDS`,
//! from the store alone and from the same store behind a `QuotaStore`
//! (default sampling, one hit in four recorded), alternating, `RUNS` runs
//! each; the table gives the medians and their ratio. Stores: the memory
//! LRU (the cheapest hit there is, so the strictest ratio) and the file
//! store (`peek_file`, the server's short way for file hits).
//!
//! Eviction: a quota index of 1,000,000 tiles (written in batches of 1,000
//! through `put_many` over a memory store), then the quota lowered to half
//! at open: the tiles evicted per second, index and store deletes included.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tessera_grid::{TileCoord, TileFormat};
use tessera_store::{
    Durability, Eviction, FileLayout, FileStore, MemoryStore, QuotaOptions, QuotaStore, TileKey,
    TileStore,
};

const TILES: u32 = 10_000;
const THREADS: usize = 2;
const HIT_SECONDS: f64 = 2.0;
const RUNS: usize = 5;
const EVICT_TILES: u32 = 1_000_000;

fn key(i: u32) -> TileKey {
    TileKey {
        layer: "bench".into(),
        grid: "WebMercatorQuad".into(),
        coord: TileCoord::restored(14, i % 4096, i / 4096),
        matrix_height: 1 << 14,
        matrix_width: 1 << 14,
        format: TileFormat::Png,
    }
}

/// Hits per second of `THREADS` threads reading random tiles.
fn hits_per_second(store: &Arc<dyn TileStore>, file_path: bool) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (store, stop, count) = (store.clone(), stop.clone(), count.clone());
            std::thread::spawn(move || {
                let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ (t as u64 + 1);
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..256 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let k = key((x % u64::from(TILES)) as u32);
                        let found = if file_path {
                            store.peek_file(&k).is_some() || store.get(&k).expect("read").is_some()
                        } else {
                            store.peek(&k).is_some() || store.get(&k).expect("read").is_some()
                        };
                        assert!(found);
                        n += 1;
                    }
                }
                count.fetch_add(n, Ordering::Relaxed);
            })
        })
        .collect();
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(HIT_SECONDS));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("reader");
    }
    count.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn fill(store: &dyn TileStore, n: u32, bytes: usize) {
    let data = Bytes::from(vec![7u8; bytes]);
    let mut batch = Vec::with_capacity(1000);
    for i in 0..n {
        batch.push((key(i), data.clone()));
        if batch.len() == 1000 {
            store
                .put_many(std::mem::take(&mut batch), Durability::Buffered)
                .expect("benchmark step");
        }
    }
    if !batch.is_empty() {
        store
            .put_many(batch, Durability::Buffered)
            .expect("benchmark step");
    }
}

/// (hits/s alone, hits/s with the quota) medians.
fn compare(
    name: &str,
    plain: &Arc<dyn TileStore>,
    quota: &Arc<dyn TileStore>,
    file: bool,
) -> (f64, f64) {
    let (mut off, mut on) = (Vec::new(), Vec::new());
    for run in 0..RUNS {
        // Alternate which goes first.
        if run % 2 == 0 {
            off.push(hits_per_second(plain, file));
            on.push(hits_per_second(quota, file));
        } else {
            on.push(hits_per_second(quota, file));
            off.push(hits_per_second(plain, file));
        }
    }
    let (off, on) = (median(off), median(on));
    eprintln!(
        "{name}: {off:.0} hits/s alone, {on:.0} with the quota ({:.3}x)",
        on / off
    );
    (off, on)
}

fn main() {
    let dir = tempfile::tempdir().expect("benchmark step");
    let mut rows = Vec::new();

    // The memory LRU.
    let memory = Arc::new(MemoryStore::new(1 << 30, None));
    fill(memory.as_ref(), TILES, 20_000);
    let plain: Arc<dyn TileStore> = memory.clone();
    let quota: Arc<dyn TileStore> = Arc::new(
        QuotaStore::open(
            memory.clone(),
            QuotaOptions::new(u64::MAX, Eviction::Lru, dir.path().join("memory.sqlite")),
        )
        .expect("benchmark step"),
    );
    rows.push(("memory LRU", compare("memory", &plain, &quota, false)));

    // The file store, hits by `peek_file` (pages in the page cache).
    let files = Arc::new(
        FileStore::open(dir.path().join("files"), FileLayout::Xyz).expect("benchmark step"),
    );
    fill(files.as_ref(), TILES, 20_000);
    let plain: Arc<dyn TileStore> = files.clone();
    let quota: Arc<dyn TileStore> = Arc::new(
        QuotaStore::open(
            files.clone(),
            QuotaOptions::new(u64::MAX, Eviction::Lru, dir.path().join("files.sqlite")),
        )
        .expect("benchmark step"),
    );
    // Warm the page cache and the hash cache.
    hits_per_second(&plain, true);
    rows.push((
        "file store (peek_file)",
        compare("file", &plain, &quota, true),
    ));

    // Eviction from a million tiles.
    let index = dir.path().join("million.sqlite");
    let inner = Arc::new(MemoryStore::new(1 << 31, None));
    let start = Instant::now();
    {
        let q = QuotaStore::open(
            inner.clone(),
            QuotaOptions::new(u64::MAX, Eviction::Lru, index.clone()),
        )
        .expect("benchmark step");
        fill(&q, EVICT_TILES, 100);
        assert_eq!(q.usage().tiles, u64::from(EVICT_TILES));
    }
    let filled = start.elapsed().as_secs_f64();
    let half = u64::from(EVICT_TILES) * 100 / 2;
    let start = Instant::now();
    let q = QuotaStore::open(inner.clone(), QuotaOptions::new(half, Eviction::Lru, index))
        .expect("benchmark step");
    let evicting = start.elapsed().as_secs_f64();
    let usage = q.usage();
    assert!(usage.used_bytes <= half);
    let evicted_per_second = usage.evicted_tiles as f64 / evicting;
    eprintln!(
        "filled {EVICT_TILES} tiles in {filled:.1} s; evicted {} in {evicting:.1} s ({evicted_per_second:.0} tiles/s)",
        usage.evicted_tiles
    );

    println!("# Disk quotas: hit cost and eviction throughput\n");
    println!(
        "Command: `cargo bench -p tessera-store --bench quota` (release build, `crates/tessera-store/benches/quota.rs`).\n"
    );
    println!(
        "Hits: {THREADS} threads reading random tiles of {TILES} (20 kB) for {HIT_SECONDS} s, the store alone and behind a quota (one hit in four recorded), alternating, median of {RUNS} runs each.\n"
    );
    println!("| store | hits/s alone | hits/s with the quota | ratio |");
    println!("|---|---:|---:|---:|");
    for (name, (off, on)) in &rows {
        println!("| {name} | {off:.0} | {on:.0} | {:.3} |", on / off);
    }
    println!(
        "\nEviction: a quota index of {EVICT_TILES} tiles of 100 B over a memory store (filled through `put_many` in batches of 1,000 in {filled:.1} s), reopened with half the quota: **{} tiles evicted in {evicting:.1} s, {evicted_per_second:.0} tiles/s** (index reads and row deletes, and the store's deletes).",
        usage.evicted_tiles
    );
}
