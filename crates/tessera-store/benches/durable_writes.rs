//! Durable tile writes: the journal store (group commit, window off and on),
//! the file store with an fsync per tile and MBTiles with synchronous=FULL,
//! with 1, 8 and 64 concurrent writers, in one run; then reads/s per store
//! and allocations per record.
//!
//! Run: `scripts/bench-durable-writes` (writes docs/benchmarks/durable-writes.md).
//! Each writer thread first runs closed-loop (throughput, counted after a
//! warm-up so it is the rate the disk sustains), then open-loop at
//! 70 % of that throughput with latency measured from each write's intended
//! start time, so queueing delay is counted (no coordinated omission).

#[path = "../tests/common/mod.rs"]
mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use tessera_grid::{TileFormat, TileMatrixSet};
use tessera_journal::{Journal, JournalOptions, Persist, RecordKind};
use tessera_store::{
    Durability, FileLayout, FileStore, JournalStore, MbtilesOptions, MbtilesStore, SyncCounts,
    Synchronous, TileKey, TileStore,
};

struct Counting;
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator, only counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const TILE_BYTES: usize = 20_000;

fn tile(seed: u64) -> Bytes {
    common::noise(TILE_BYTES, seed).into()
}

fn key(tms: &TileMatrixSet, writer: u64, n: u64) -> TileKey {
    // Zoom 18 has room for every writer's own column of tiles.
    let coord = tms
        .tile(18, writer * 1024 + n / 4096, n % 4096)
        .expect("inside the grid");
    TileKey {
        layer: "bench".into(),
        grid: tms.id.clone(),
        coord,
        matrix_height: 1 << 18,
        matrix_width: 1 << 18,
        format: TileFormat::Png,
    }
}

struct Cell {
    store: String,
    writers: u64,
    writes_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    p999_ms: f64,
    /// The disk's own p99 for one batch of `writers` records, measured
    /// just before the cell.
    disk_p99_ms: f64,
    /// The disk alone offered the same bytes/s (see [`device_open_loop_ms`]).
    disk_open_p99_ms: f64,
    /// The latency run's `fdatasync` calls (see [`syncs_between`]).
    syncs: String,
}

/// The journal variants' options by name; `None` for the other stores.
fn journal_options(name: &str) -> Option<JournalOptions> {
    let defaults = JournalOptions::default();
    match name {
        "journal" => Some(defaults),
        "journal (no spare segment)" => Some(JournalOptions {
            spare_segment: false,
            zero_segments: false,
            ..defaults
        }),
        "journal (spare zeroed)" => Some(JournalOptions {
            zero_segments: true,
            ..defaults
        }),
        // BENCH_WINDOW_US: the window's length (default 500 us).
        "journal+window" => Some(JournalOptions {
            sync_window: Some(Duration::from_micros(
                std::env::var("BENCH_WINDOW_US")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(500),
            )),
            ..defaults
        }),
        _ => None,
    }
}

/// A store by name.
fn make_store(name: &str, dir: &std::path::Path) -> Arc<dyn TileStore> {
    if let Some(options) = journal_options(name) {
        return Arc::new(JournalStore::open(dir, options).expect("journal"));
    }
    match name {
        "file (fsync per tile)" => Arc::new(FileStore::open(dir, FileLayout::Xyz).expect("file")),
        "mbtiles (synchronous=FULL)" => Arc::new(
            MbtilesStore::open(
                dir,
                MbtilesOptions {
                    synchronous: Synchronous::Full,
                    ..MbtilesOptions::default()
                },
            )
            .expect("mbtiles"),
        ),
        other => panic!("unknown store {other}"),
    }
}

/// `fdatasync` calls a journal made between two of its
/// [`TileStore::sync_counts`], as "calls (slower than max_latency alone)";
/// empty for other stores.
fn syncs_between(before: Option<SyncCounts>, after: Option<SyncCounts>) -> String {
    match (before, after) {
        (Some(b), Some(a)) => format!("{} ({})", a.syncs - b.syncs, a.slow_syncs - b.slow_syncs),
        _ => String::new(),
    }
}

/// Closed loop: writes as fast as `writers` threads can for `warmup`
/// seconds, then counts the writes of the next `secs`; returns writes/s.
///
/// The warm-up makes this the rate the disk sustains: a virtual disk takes
/// the first gigabytes of a burst several times faster than it writes them
/// out, and a rate measured in the burst is one the latency run after it
/// could not be offered 70 % of.
fn closed_loop(
    store: &Arc<dyn TileStore>,
    writers: u64,
    warmup: f64,
    secs: f64,
    payloads: &[Bytes],
) -> f64 {
    let tms = TileMatrixSet::web_mercator_quad();
    let barrier = Arc::new(Barrier::new(writers as usize + 1));
    let written = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let threads: Vec<_> = (0..writers)
        .map(|w| {
            let (store, barrier, written, stop, payloads, tms) = (
                store.clone(),
                barrier.clone(),
                written.clone(),
                stop.clone(),
                payloads.to_vec(),
                tms.clone(),
            );
            std::thread::spawn(move || {
                barrier.wait();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let data = payloads[(n % payloads.len() as u64) as usize].clone();
                    store
                        .put(&key(&tms, w, n), data, Durability::Synced)
                        .expect("put");
                    written.fetch_add(1, Ordering::Relaxed);
                    n += 1;
                }
            })
        })
        .collect();
    barrier.wait();
    std::thread::sleep(Duration::from_secs_f64(warmup));
    let (from, start) = (written.load(Ordering::Relaxed), Instant::now());
    std::thread::sleep(Duration::from_secs_f64(secs));
    let (to, elapsed) = (written.load(Ordering::Relaxed), start.elapsed());
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("writer");
    }
    (to - from) as f64 / elapsed.as_secs_f64()
}

/// Open loop at `rate` writes/s in total for `secs`; latency from the
/// intended start of each write.
fn open_loop(
    store: &Arc<dyn TileStore>,
    writers: u64,
    rate: f64,
    secs: f64,
    payloads: &[Bytes],
) -> Histogram<u64> {
    let tms = TileMatrixSet::web_mercator_quad();
    let interval = Duration::from_secs_f64(writers as f64 / rate);
    let per_writer = (secs / interval.as_secs_f64()).max(1.0) as u64;
    let start = Instant::now() + Duration::from_millis(50);
    let threads: Vec<_> = (0..writers)
        .map(|w| {
            let (store, payloads, tms) = (store.clone(), payloads.to_vec(), tms.clone());
            std::thread::spawn(move || {
                let mut h = Histogram::<u64>::new(3).expect("histogram");
                // Writers are spread over the interval.
                let offset = interval.mul_f64(w as f64 / writers as f64);
                for n in 0..per_writer {
                    let intended = start + offset + interval * n as u32;
                    if let Some(wait) = intended.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                    let data = payloads[(n % payloads.len() as u64) as usize].clone();
                    store
                        .put(&key(&tms, w, 1_000_000 + n), data, Durability::Synced)
                        .expect("put");
                    h.record(intended.elapsed().as_micros() as u64)
                        .expect("record");
                }
                h
            })
        })
        .collect();
    let mut total = Histogram::<u64>::new(3).expect("histogram");
    for t in threads {
        total.add(t.join().expect("writer")).expect("merge");
    }
    total
}

fn reads_per_s(store: &Arc<dyn TileStore>, threads: u64, secs: f64) -> f64 {
    let tms = TileMatrixSet::web_mercator_quad();
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let start = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|w| {
            let (store, tms) = (store.clone(), tms.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while Instant::now() < end {
                    let got = store.get(&key(&tms, w % 8, n % 200)).expect("get");
                    assert!(got.is_some(), "reads hit written tiles");
                    n += 1;
                }
                n
            })
        })
        .collect();
    let total: u64 = workers.into_iter().map(|t| t.join().expect("reader")).sum();
    total as f64 / start.elapsed().as_secs_f64()
}

/// The disk's own cost of a durable write of `bytes`: one thread writing
/// that many bytes with `pwrite` into an allocated file and calling
/// `fdatasync`, back to back for `secs`. Returns (p50, p99) in ms: the floor
/// under any store's latency for a batch of that size.
fn device_sync_ms(bytes: usize, secs: f64) -> (f64, f64) {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = std::fs::File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(dir.path().join("floor"))
        .expect("file");
    let size = 256u64 << 20;
    file.set_len(size).expect("size");
    let data = common::noise(bytes, 7);
    let mut h = Histogram::<u64>::new(3).expect("histogram");
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut at = 0u64;
    while Instant::now() < end {
        if at + bytes as u64 > size {
            at = 0;
        }
        let t = Instant::now();
        file.write_all_at(&data, at).expect("write");
        file.sync_data().expect("fdatasync");
        h.record(t.elapsed().as_micros() as u64).expect("record");
        at += bytes as u64;
    }
    let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    (ms(0.5), ms(0.99))
}

/// The disk alone under the latency run's load, measured right after it:
/// one thread writes `batch` bytes with `pwrite` + `fdatasync` into fresh
/// blocks on a fixed schedule of `bytes_per_s` for `secs`. Returns the p99
/// in ms from each write's intended start: what a store writing those
/// bytes in batches of that size cannot beat while the disk is in the
/// state the store just left it in.
fn device_open_loop_ms(batch: usize, bytes_per_s: f64, secs: f64) -> f64 {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = std::fs::File::options()
        .write(true)
        .create_new(true)
        .open(dir.path().join("open"))
        .expect("file");
    let data = common::noise(batch, 13);
    let interval = Duration::from_secs_f64(batch as f64 / bytes_per_s);
    let count = (secs / interval.as_secs_f64()).max(1.0) as u32;
    let mut h = Histogram::<u64>::new(3).expect("histogram");
    let start = Instant::now() + Duration::from_millis(50);
    for n in 0..count {
        let intended = start + interval * n;
        if let Some(wait) = intended.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        file.write_all_at(&data, u64::from(n) * batch as u64)
            .expect("write");
        file.sync_data().expect("fdatasync");
        h.record(intended.elapsed().as_micros() as u64)
            .expect("record");
    }
    h.value_at_quantile(0.99) as f64 / 1000.0
}

/// The disk's sustained bandwidth in MB/s: back-to-back `pwrite` +
/// `fdatasync` of `bytes` into a fresh file, counted after `warmup` seconds
/// (see [`closed_loop`]) for `secs`. No store writes faster for long.
fn device_sustained_mb_s(bytes: usize, warmup: f64, secs: f64) -> f64 {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = std::fs::File::options()
        .write(true)
        .create_new(true)
        .open(dir.path().join("sustained"))
        .expect("file");
    // Fresh blocks (sparse, wrapping at 8 GiB): rewriting a few would let
    // a disk cache absorb them.
    let size = 8u64 << 30;
    let data = common::noise(bytes, 11);
    let start = Instant::now();
    let count_from = start + Duration::from_secs_f64(warmup);
    let end = count_from + Duration::from_secs_f64(secs);
    let (mut at, mut counted) = (0u64, 0u64);
    while Instant::now() < end {
        if at + bytes as u64 > size {
            at = 0;
        }
        file.write_all_at(&data, at).expect("write");
        file.sync_data().expect("fdatasync");
        if Instant::now() > count_from {
            counted += bytes as u64;
        }
        at += bytes as u64;
    }
    counted as f64 / secs / 1e6
}

fn allocations_per_record() -> (f64, f64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (journal, _) =
        Journal::open(dir.path(), JournalOptions::default(), None, |_| {}).expect("journal");
    let payload = tile(1);
    for _ in 0..1000 {
        journal
            .append(RecordKind::Add, &payload, Persist::Buffered)
            .expect("append");
    }
    let n = 10_000u64;
    let before = ALLOCATIONS.load(Ordering::SeqCst);
    for _ in 0..n {
        journal
            .append(RecordKind::Add, &payload, Persist::Buffered)
            .expect("append");
    }
    let raw = (ALLOCATIONS.load(Ordering::SeqCst) - before) as f64 / n as f64;
    drop(journal);
    let dir = tempfile::tempdir().expect("tempdir");
    let store = JournalStore::open(dir.path(), JournalOptions::default()).expect("store");
    let tms = TileMatrixSet::web_mercator_quad();
    for i in 0..1000 {
        store
            .put(&key(&tms, 0, i), payload.clone(), Durability::Buffered)
            .expect("put");
    }
    let before = ALLOCATIONS.load(Ordering::SeqCst);
    for i in 0..n {
        store
            .put(
                &key(&tms, 0, i % 1000),
                payload.clone(),
                Durability::Buffered,
            )
            .expect("put");
    }
    let per_put = (ALLOCATIONS.load(Ordering::SeqCst) - before) as f64 / n as f64;
    (raw, per_put)
}

fn main() {
    let secs: f64 = std::env::var("BENCH_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3.0);
    // Seconds each closed loop writes before it is counted (see closed_loop).
    let warmup: f64 = std::env::var("BENCH_WARMUP")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10.0);
    let payloads: Vec<Bytes> = (0..16).map(tile).collect();
    let stores = [
        "journal (no spare segment)",
        "journal",
        "journal+window",
        "file (fsync per tile)",
        "mbtiles (synchronous=FULL)",
        // Last: its zeroing leaves the disk busy for a while.
        "journal (spare zeroed)",
    ];
    // BENCH_STORES: a comma-separated subset of the stores (names as in the table).
    let only: Option<Vec<String>> = std::env::var("BENCH_STORES")
        .ok()
        .map(|v| v.split(',').map(|s| s.trim().to_string()).collect());
    // BENCH_FIXED=writers:rate,...: only latency at these fixed offered
    // loads, each on a fresh store, one line per load (for comparing two
    // builds at the same load, which a rate taken from a noisy disk's peak
    // would not give).
    // BENCH_PREFILL: seconds of closed-loop writes into each fixed load's
    // store before its latency is measured (as the full run does).
    let prefill: f64 = std::env::var("BENCH_PREFILL")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    if let Ok(loads) = std::env::var("BENCH_FIXED") {
        for name in stores
            .into_iter()
            .filter(|n| only.as_ref().is_none_or(|o| o.iter().any(|x| x == n)))
        {
            for load in loads.split(',') {
                let (writers, rate) = load
                    .split_once(':')
                    .and_then(|(w, r)| Some((w.trim().parse().ok()?, r.trim().parse().ok()?)))
                    .expect("BENCH_FIXED is writers:rate,...");
                let dir = tempfile::tempdir().expect("tempdir");
                let store = make_store(name, dir.path());
                if prefill > 0.0 {
                    closed_loop(&store, writers, prefill, 0.0, &payloads);
                }
                let before = store.sync_counts();
                let h = open_loop(&store, writers, rate, secs, &payloads);
                let syncs = syncs_between(before, store.sync_counts());
                let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
                println!(
                    "| {name} | {writers} | {rate:.0} | {:.2} | {:.2} | {:.2} | {syncs} |",
                    ms(0.5),
                    ms(0.99),
                    ms(0.999)
                );
            }
        }
        return;
    }
    let mut cells = Vec::new();
    let mut reads = Vec::new();
    for name in stores
        .into_iter()
        .filter(|n| only.as_ref().is_none_or(|o| o.iter().any(|x| x == n)))
    {
        for writers in [1u64, 8, 64] {
            // Let the previous cell's writes settle before measuring.
            let _ = std::process::Command::new("sync").status();
            std::thread::sleep(Duration::from_secs(1));
            let (_, disk_p99_ms) = device_sync_ms(TILE_BYTES * writers as usize, secs / 3.0);
            let dir = tempfile::tempdir().expect("tempdir");
            let store = make_store(name, dir.path());
            let rate = closed_loop(&store, writers, warmup, secs, &payloads);
            let before = store.sync_counts();
            let h = open_loop(&store, writers, rate * 0.7, secs, &payloads);
            let syncs = syncs_between(before, store.sync_counts());
            let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
            let disk_open_p99_ms = device_open_loop_ms(
                TILE_BYTES * writers as usize,
                rate * 0.7 * TILE_BYTES as f64,
                secs,
            );
            eprintln!(
                "{name:28} writers={writers:3} {rate:9.0} writes/s  p50 {:.2} ms p99 {:.2} ms p99.9 {:.2} ms",
                ms(0.5),
                ms(0.99),
                ms(0.999)
            );
            cells.push(Cell {
                store: name.into(),
                writers,
                writes_per_s: rate,
                p50_ms: ms(0.5),
                p99_ms: ms(0.99),
                p999_ms: ms(0.999),
                disk_p99_ms,
                disk_open_p99_ms,
                syncs,
            });
            if writers == 8 {
                reads.push((name, reads_per_s(&store, 8, secs)));
            }
        }
    }
    let (raw, per_put) = allocations_per_record();
    let floors: Vec<(usize, (f64, f64))> = [20_000usize, 160_000, 1_280_000]
        .into_iter()
        .map(|b| (b, device_sync_ms(b, secs)))
        .collect();
    let sustained = device_sustained_mb_s(1_280_000, warmup, secs);

    println!("# Durable tile writes: journal (group commit) vs file (fsync per tile) vs MBTiles\n");
    println!(
        "Command: `scripts/bench-durable-writes` (`crates/tessera-store/benches/durable_writes.rs`), {secs} s per measurement.\n"
    );
    println!(
        "Every write is a 20 kB incompressible tile with `Durability::Synced` (acknowledged only once on disk)."
    );
    println!(
        "Throughput: each writer thread writes as fast as it can for {warmup} s, then the writes of the next"
    );
    println!(
        "{secs} s are counted (the rate the disk sustains, not the burst its cache takes first). Latency: then each writer writes at 70 % of"
    );
    println!(
        "that throughput on a fixed schedule, and latency is measured from the intended start of each write"
    );
    println!(
        "(HdrHistogram), so time spent queueing counts. `journal`: the defaults (a spare segment kept ready"
    );
    println!(
        "by a background thread, `max_latency` 5 ms, no window); `journal (no spare segment)`: each roll"
    );
    println!(
        "allocates its segment while writers wait (the journal before spares); `journal (spare zeroed)`:"
    );
    println!(
        "the spare also written through with zeros; `journal+window`: adaptive sync window of 0.5 ms."
    );
    println!(
        "The two `disk p99` columns are the disk alone: one batch of `writers` records written and synced back to"
    );
    println!(
        "back just before the cell, and the same bytes/s as the latency run offered, in batches of `writers`"
    );
    println!(
        "records on a fixed schedule, just after it (p99 from the intended start, as for the store). The last column"
    );
    println!(
        "counts the journal's own `fdatasync` calls during the latency run, and how many of them alone took longer"
    );
    println!("than `max_latency` (5 ms): there the disk, not the batching, made writes late.\n");
    println!(
        "| store | writers | durable writes/s | p50 ms | p99 ms | p99.9 ms | disk p99 ms, one batch of `writers` records | disk p99 ms, same bytes/s | syncs (over max_latency) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for c in &cells {
        println!(
            "| {} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} |",
            c.store,
            c.writers,
            c.writes_per_s,
            c.p50_ms,
            c.p99_ms,
            c.p999_ms,
            c.disk_p99_ms,
            c.disk_open_p99_ms,
            c.syncs
        );
    }
    println!("\n## Reads (8 threads, tiles just written, page cache warm)\n");
    println!("| store | reads/s |");
    println!("|---|---:|");
    for (name, r) in &reads {
        println!("| {name} | {r:.0} |");
    }
    println!("\n## The disk's floor: one `pwrite` + `fdatasync` of a batch, back to back\n");
    println!("| batch bytes | records of 20 kB | p50 ms | p99 ms |");
    println!("|---:|---:|---:|---:|");
    for (bytes, (p50, p99)) in &floors {
        println!("| {bytes} | {} | {p50:.2} | {p99:.2} |", bytes / TILE_BYTES);
    }
    println!(
        "\nSustained, 1.28 MB batches back to back after {warmup} s: {sustained:.0} MB/s ({:.0} records of 20 kB/s).",
        sustained * 1e6 / TILE_BYTES as f64
    );
    println!("\n## Allocations per record (counting global allocator, steady state)\n");
    println!("| path | allocations per record |");
    println!("|---|---:|");
    println!("| `Journal::append` (producer and writer thread) | {raw:.3} |");
    println!("| `JournalStore::put` (adds the key encoding and the index entry) | {per_put:.3} |");
}
