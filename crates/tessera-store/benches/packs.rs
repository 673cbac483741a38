//! Packs on a real S3 server (MinIO, from `scripts/minio`): for packs of 1,
//! 4, 16 and 64 tiles, seeding tiles/s and the requests sent; then tile read
//! latency for a viewer pattern (a screen of 6 x 4 neighbouring tiles, then
//! a pan of two columns, which asks for the 8 new tiles only, as a browser
//! with its own cache does) without a local cache, with a cold local cache
//! and with a warm one.
//!
//! Run: `scripts/bench-packs` (writes docs/benchmarks/packs.md). Seeding is
//! 4 threads each writing whole 4 x 4 metatiles of 20 kB incompressible
//! tiles into a 64 x 64 block of zoom 10; each figure is the median of
//! `BENCH_RUNS` runs (default 3), each on a fresh prefix. Reads use 6
//! threads per screen, as a browser's 6 connections do.

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use bytes::Bytes;
use hdrhistogram::Histogram;
use tessera_grid::{TileFormat, TileMatrixSet};
use tessera_store::object::{RequestSnapshot, open_url};
use tessera_store::{Durability, PackOptions, PackStore, TileKey, TileStore};

const TILE_BYTES: usize = 20_000;
const ZOOM: u32 = 10;
const ORIGIN: (u32, u32) = (512, 320);
const SIDE: u32 = 64;
const SEED_THREADS: u64 = 4;
const VIEWS: usize = 40;
const SCREEN: (u32, u32) = (6, 4);
const PAN: u32 = 2;
const READERS: usize = 6;

fn env(name: &str) -> String {
    common::env(name, "minio")
}

fn tile(seed: u64) -> Bytes {
    common::noise(TILE_BYTES, seed).into()
}

fn key(tms: &TileMatrixSet, x: u32, y: u32) -> TileKey {
    TileKey {
        layer: "bench".into(),
        grid: tms.id.clone(),
        coord: tms
            .tile(ZOOM, u64::from(x), u64::from(y))
            .expect("inside the grid"),
        matrix_height: 1 << ZOOM,
        matrix_width: 1 << ZOOM,
        format: TileFormat::Png,
    }
}

/// How a reader holds packs between reads.
#[derive(Clone, Copy)]
enum Memory {
    /// The defaults: packs read whole and held in memory.
    Held,
    /// Nothing held between reads, packs always read whole: each read
    /// fetches (or reads from the local cache) its whole pack.
    Nothing,
    /// Packs held, and read by range without a local cache.
    Ranges,
}

fn open(prefix: &str, pack_tiles: u32, cache: Option<&std::path::Path>) -> PackStore {
    open_with(prefix, pack_tiles, cache, Memory::Held)
}

fn open_with(
    prefix: &str,
    pack_tiles: u32,
    cache: Option<&std::path::Path>,
    memory: Memory,
) -> PackStore {
    let (decoded_bytes, range_reads_above) = match memory {
        Memory::Held => (PackOptions::default().decoded_bytes, None),
        Memory::Nothing => (0, None),
        Memory::Ranges => (PackOptions::default().decoded_bytes, Some(1)),
    };
    let options = common::minio_options();
    let url = format!("{}/{prefix}", env("TESSERA_TEST_S3_URL"));
    let location = open_url(&url, &options).expect("MinIO URL");
    PackStore::new(
        location,
        &PackOptions {
            pack_tiles,
            cache: cache.map(|d| (d.to_path_buf(), 1 << 30)),
            io_threads: 4,
            decoded_bytes,
            range_reads_above,
            ..PackOptions::default()
        },
    )
    .expect("pack store")
}

fn fresh_prefix(label: &str) -> String {
    common::unique(&format!("bench-{label}"))
}

/// Seeds the block in writes of `group` x `group` metatiles (1: metatile
/// by metatile; 2: a 64-tile pack's four metatiles together, as
/// `tessera seed` hands them to a store that writes packs); returns tiles/s.
fn seed(
    store: &Arc<PackStore>,
    tms: &Arc<TileMatrixSet>,
    payloads: &Arc<Vec<Bytes>>,
    group: u32,
) -> f64 {
    let side = 4 * group;
    let writes = u64::from((SIDE / side) * (SIDE / side));
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let threads: Vec<_> = (0..SEED_THREADS)
        .map(|_| {
            let (store, tms, payloads, next) =
                (store.clone(), tms.clone(), payloads.clone(), next.clone());
            std::thread::spawn(move || {
                loop {
                    let m = next.fetch_add(1, Ordering::Relaxed);
                    if m >= writes {
                        break;
                    }
                    let (mx, my) = (
                        (m % u64::from(SIDE / side)) as u32,
                        (m / u64::from(SIDE / side)) as u32,
                    );
                    let tiles = (0..side * side)
                        .map(|i| {
                            let (x, y) = (
                                ORIGIN.0 + mx * side + i % side,
                                ORIGIN.1 + my * side + i / side,
                            );
                            (
                                key(&tms, x, y),
                                payloads[(x * 7 + y) as usize % payloads.len()].clone(),
                            )
                        })
                        .collect();
                    store
                        .put_many(tiles, Durability::Synced)
                        .expect("seed write");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("seed thread");
    }
    f64::from(SIDE * SIDE) / start.elapsed().as_secs_f64()
}

/// The tiles a viewer asks for: each view a screen, then the new columns
/// after a pan to the right.
fn views() -> Vec<Vec<(u32, u32)>> {
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut rand = |n: u32| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % u64::from(n)) as u32
    };
    let mut out = Vec::new();
    for _ in 0..VIEWS {
        let (x0, y0) = (
            ORIGIN.0 + rand(SIDE - SCREEN.0 - PAN),
            ORIGIN.1 + rand(SIDE - SCREEN.1),
        );
        let screen: Vec<_> = (0..SCREEN.1)
            .flat_map(|dy| (0..SCREEN.0).map(move |dx| (x0 + dx, y0 + dy)))
            .collect();
        let pan: Vec<_> = (0..SCREEN.1)
            .flat_map(|dy| (0..PAN).map(move |dx| (x0 + SCREEN.0 + dx, y0 + dy)))
            .collect();
        out.push(screen);
        out.push(pan);
    }
    out
}

/// Reads every view's tiles, `READERS` at a time; per-tile latency in µs.
fn read_views(
    store: &Arc<PackStore>,
    tms: &Arc<TileMatrixSet>,
    views: &[Vec<(u32, u32)>],
) -> Histogram<u64> {
    let mut h = Histogram::<u64>::new(3).expect("histogram");
    for view in views {
        let chunks: Vec<Vec<(u32, u32)>> = (0..READERS)
            .map(|r| view.iter().copied().skip(r).step_by(READERS).collect())
            .collect();
        let threads: Vec<_> = chunks
            .into_iter()
            .map(|tiles| {
                let (store, tms) = (store.clone(), tms.clone());
                std::thread::spawn(move || {
                    tiles
                        .into_iter()
                        .map(|(x, y)| {
                            let t = Instant::now();
                            let got = store.get(&key(&tms, x, y)).expect("read");
                            assert!(got.is_some(), "seeded tile {x},{y} missing");
                            t.elapsed().as_micros() as u64
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for t in threads {
            for us in t.join().expect("reader") {
                h.record(us.max(1)).expect("record");
            }
        }
    }
    h
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

struct ReadRow {
    mode: &'static str,
    p50_ms: f64,
    p99_ms: f64,
    mean_ms: f64,
    gets: u64,
    tiles: u64,
}

fn main() {
    let runs: usize = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let tms = Arc::new(TileMatrixSet::web_mercator_quad());
    let payloads = Arc::new((0..64).map(tile).collect::<Vec<_>>());
    let views = views();
    let mut seed_rows = Vec::new();
    let mut read_rows: Vec<(u32, Vec<ReadRow>)> = Vec::new();
    let mut first_rows: Vec<(u32, (f64, f64))> = Vec::new();
    let seed_runs = |pack_tiles: u32, group: u32| {
        let mut rates = Vec::new();
        let mut requests = RequestSnapshot::default();
        let mut prefix = String::new();
        for _ in 0..runs {
            prefix = fresh_prefix(&format!("p{pack_tiles}"));
            let store = Arc::new(open(&prefix, pack_tiles, None));
            rates.push(seed(&store, &tms, &payloads, group));
            requests = store.requests();
        }
        let rate = median(rates);
        eprintln!(
            "pack {pack_tiles:2}, {group}x{group} metatiles a write: seeding {rate:7.0} tiles/s, requests {requests:?}"
        );
        (prefix, rate, requests)
    };
    for pack_tiles in [1u32, 4, 16, 64] {
        let (prefix, rate, requests) = seed_runs(pack_tiles, 1);
        seed_rows.push((format!("{pack_tiles}"), rate, requests));
        if pack_tiles == 64 {
            let (_, rate, requests) = seed_runs(pack_tiles, 2);
            seed_rows.push((
                "64, a pack's 4 metatiles in one write (as `tessera seed` writes)".into(),
                rate,
                requests,
            ));
        }

        // Reads on the last seeded prefix.
        let mut rows = Vec::new();
        let mut row = |mode: &'static str, store: &Arc<PackStore>| {
            let before = store.requests();
            let h = read_views(store, &tms, &views);
            rows.push(ReadRow {
                mode,
                p50_ms: h.value_at_quantile(0.5) as f64 / 1000.0,
                p99_ms: h.value_at_quantile(0.99) as f64 / 1000.0,
                mean_ms: h.mean() / 1000.0,
                gets: store.requests().since(&before).get,
                tiles: h.len(),
            });
        };
        let whole = Arc::new(open_with(&prefix, pack_tiles, None, Memory::Nothing));
        row("no local cache, nothing held", &whole);
        let direct = Arc::new(open(&prefix, pack_tiles, None));
        row("no local cache, cold", &direct);
        row("no local cache, warm", &direct);
        if pack_tiles > 1 {
            let ranged = Arc::new(open_with(&prefix, pack_tiles, None, Memory::Ranges));
            row("no local cache, by range, cold", &ranged);
            row("no local cache, by range, warm", &ranged);
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let on_disk = Arc::new(open_with(
            &prefix,
            pack_tiles,
            Some(dir.path()),
            Memory::Nothing,
        ));
        row("local cache, cold, nothing held", &on_disk);
        row("local cache, warm, nothing held", &on_disk);
        drop(on_disk);
        let dir = tempfile::tempdir().expect("tempdir");
        let cached = Arc::new(open(&prefix, pack_tiles, Some(dir.path())));
        row("local cache, cold", &cached);
        row("local cache, warm", &cached);
        let cold_warm = first_reads(&prefix, pack_tiles, &tms);
        eprintln!(
            "pack {pack_tiles:2}: first read of a pack {:.3} ms, a read of a held pack {:.4} ms",
            cold_warm.0, cold_warm.1
        );
        first_rows.push((pack_tiles, cold_warm));
        for r in &rows {
            eprintln!(
                "pack {pack_tiles:2}: {:18} p50 {:.2} ms p99 {:.2} ms mean {:.2} ms, {} GETs for {} tiles",
                r.mode, r.p50_ms, r.p99_ms, r.mean_ms, r.gets, r.tiles
            );
        }
        read_rows.push((pack_tiles, rows));
    }

    let tiles = u64::from(SIDE * SIDE);
    println!("# Packs on MinIO: seeding and viewer reads by pack size\n");
    println!(
        "Command: `scripts/bench-packs` (criterion-free harness `crates/tessera-store/benches/packs.rs`, release build).\n"
    );
    println!(
        "MinIO on 127.0.0.1 of the same 2-core machine, one drive. Seeding: {tiles} tiles of {TILE_BYTES} B (zoom {ZOOM}, a {SIDE} x {SIDE} block), {SEED_THREADS} threads each writing whole 4 x 4 metatiles with `put_many` (or, where the row says so, the four metatiles of a pack in one `put_many`); median of {runs} runs, requests counted by the store. Reads: {VIEWS} views of a {} x {} screen followed by a pan of {PAN} columns (only the new tiles asked), {READERS} tiles at a time; latency per tile.\n",
        SCREEN.0, SCREEN.1
    );
    println!("## Seeding\n");
    println!("| tiles per pack | tiles/s | ratio to 1 | PUT | GET | LIST | requests per tile |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let base = seed_rows[0].1;
    for (p, rate, r) in &seed_rows {
        println!(
            "| {p} | {rate:.0} | {:.2} | {} | {} | {} | {:.3} |",
            rate / base,
            r.put,
            r.get,
            r.list,
            r.total() as f64 / tiles as f64
        );
    }
    println!("\n## Viewer reads (per tile)\n");
    println!("| tiles per pack | reader | p50 ms | p99 ms | mean ms | GETs | tiles read |");
    println!("|---:|---|---:|---:|---:|---:|---:|");
    for (p, rows) in &read_rows {
        for r in rows {
            println!(
                "| {p} | {} | {:.2} | {:.2} | {:.2} | {} | {} |",
                r.mode, r.p50_ms, r.p99_ms, r.mean_ms, r.gets, r.tiles
            );
        }
    }
    println!("\n## A pack's first read against a read of a pack held in memory\n");
    println!(
        "One tile from each of {FIRST_READS} packs never read by this store (local cache on, so the pack is fetched whole), then the same tiles again; median per read.\n"
    );
    println!("| tiles per pack | first read ms | held ms | ratio |");
    println!("|---:|---:|---:|---:|");
    for (p, (cold, warm)) in &first_rows {
        println!("| {p} | {cold:.3} | {warm:.4} | {:.0} |", cold / warm);
    }
    println!("{NOTES}");
}

/// Packs whose first read is timed.
const FIRST_READS: u32 = 16;

/// Median ms of a tile's read from a pack this store never read (fetched
/// whole into a fresh local cache), then of the same read again (held).
fn first_reads(prefix: &str, pack_tiles: u32, tms: &TileMatrixSet) -> (f64, f64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(prefix, pack_tiles, Some(dir.path()));
    let side = (pack_tiles as f64).sqrt() as u32;
    let tiles: Vec<(u32, u32)> = (0..FIRST_READS)
        .map(|i| {
            let packs_per_row = SIDE / side;
            (
                ORIGIN.0 + (i % packs_per_row) * side + side / 2,
                ORIGIN.1 + (i / packs_per_row) * side + side / 2,
            )
        })
        .collect();
    let time = || {
        let mut v: Vec<f64> = tiles
            .iter()
            .map(|&(x, y)| {
                let t = Instant::now();
                assert!(store.get(&key(tms, x, y)).expect("read").is_some());
                t.elapsed().as_secs_f64() * 1000.0
            })
            .collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let cold = time();
    let warm = time();
    (cold, warm)
}

const NOTES: &str = "
## Reading the tables

- A pack of 16 is exactly one 4 x 4 metatile: each metatile is one PUT with
  nothing to read first. A pack of 64 holds four metatiles, so each write
  merges into what is there (GET, then a conditional PUT): fewer objects,
  more requests than 16, and writers of one pack take turns.
- *Nothing held*: every read fetches its whole pack (or reads it from the
  local cache) and finds the tile by the pack's header index; latency grows
  with the pack. By default packs read are held in memory (64 MiB): a tile of
  a held pack is a slice of its bytes, and a screen and its pan cost one GET
  per pack touched. *By range* (`range_reads_above`, off by default): the
  header (the tile index) once, then each tile's bytes, so a pack is never
  fetched whole to serve a few of its tiles; on MinIO over loopback a GET
  costs about the same at 20 kB as at 320 kB, so one GET per tile loses to
  one GET per pack held (mean per tile 3-5 ms against 1-1.5 ms). It is for
  stores where bytes, not requests, are what costs.
- Seeding 64-tile packs metatile by metatile (the row `64`): each 4 x 4
  metatile is a quarter of a pack, so a pack is written four times, growing
  (16, 32, 48, 64 tiles: 2.5 tiles uploaded per tile stored, against 1 for
  packs of 16) and merged each time (the store merges into the pack it holds
  from its own last write, a conditional PUT on that version with no GET
  first). `tessera seed` does not write that way: it walks a plan in blocks
  along the Hilbert curve, so a pack's metatiles come one after the other,
  gathers them under their locks and hands them to the store in one
  `put_many` (`seed::run`), which is the last seeding row: one GET (no pack
  yet) and one PUT per 64 tiles.";
