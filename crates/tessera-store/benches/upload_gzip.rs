//! What compressing on the way would cost: a file streamed into MinIO
//! through the multipart writer (`Upload`, 16 MiB parts, 4 in flight) as it
//! is (what tessera does), and gzipped (level 6, flate2) before the writer,
//! for a file that compresses (an uncompressed GeoTIFF) and one that is
//! compressed already (the same raster, DEFLATE GeoTIFF). Each figure is the
//! median of `BENCH_RUNS` runs (default 3); objects are deleted after.
//!
//! `cargo bench -p tessera-store --bench upload_gzip -- FILE...` with the
//! variables of `scripts/minio` set; `scripts/bench-uploads` runs it and
//! adds the table to docs/benchmarks/uploads.md.

#[path = "../tests/common/mod.rs"]
mod common;

use std::io::{Read, Write};
use std::time::Instant;

use flate2::Compression;
use flate2::write::GzEncoder;
use object_store::ObjectStoreExt;
use object_store::path::Path;
use tessera_store::object::open_url;
use tessera_store::upload::{Upload, UploadOptions};

const CHUNK: usize = 1 << 20;

struct Run {
    secs: f64,
    cpu_secs: f64,
    stored: u64,
}

/// This process's user + system CPU seconds.
fn cpu_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .expect("stat format")
        .1
        .split_whitespace()
        .collect();
    let ticks: f64 =
        fields[11].parse::<f64>().expect("utime") + fields[12].parse::<f64>().expect("stime");
    ticks / 100.0
}

fn upload(rt: &tokio::runtime::Runtime, file: &std::path::Path, gzip: bool) -> Run {
    let location = open_url(
        &common::env("TESSERA_TEST_S3_URL", "minio"),
        &common::minio_options(),
    )
    .expect("MinIO");
    let path = Path::from(format!("bench-gzip/{}", common::unique("gz")));
    let store = location.store.clone();
    let (t0, c0) = (Instant::now(), cpu_secs());
    let stored = rt.block_on(async {
        let mut up = Upload::new(
            store.clone(),
            path.clone(),
            UploadOptions {
                part_size: 16 << 20,
                parts_in_flight: 4,
            },
        );
        let mut input = std::fs::File::open(file).expect("input");
        let mut gz = GzEncoder::new(Vec::with_capacity(2 * CHUNK), Compression::new(6));
        loop {
            let mut chunk = vec![0u8; CHUNK];
            let n = input.read(&mut chunk).expect("read");
            if n == 0 {
                break;
            }
            chunk.truncate(n);
            if gzip {
                gz.write_all(&chunk).expect("gzip");
                if gz.get_ref().len() >= CHUNK {
                    let out = std::mem::replace(gz.get_mut(), Vec::with_capacity(2 * CHUNK));
                    up.write(&out).await.expect("upload");
                }
            } else {
                up.write(&chunk).await.expect("upload");
            }
        }
        if gzip {
            let rest = gz.finish().expect("gzip");
            up.write(&rest).await.expect("upload");
        }
        up.finish().await.expect("upload").bytes
    });
    let run = Run {
        secs: t0.elapsed().as_secs_f64(),
        cpu_secs: cpu_secs() - c0,
        stored,
    };
    rt.block_on(store.delete(&path)).expect("delete");
    run
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let files: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    assert!(!files.is_empty(), "give the files to upload");
    let runs: usize = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    println!("| file | MiB | upload | MiB/s of the file | CPU s | stored MiB | time vs as-is |");
    println!("|---|---:|---|---:|---:|---:|---:|");
    for file in &files {
        let path = std::path::Path::new(file);
        let mib = std::fs::metadata(path).expect("file").len() as f64 / f64::from(1 << 20);
        let name = path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let mut plain_secs = None;
        for (label, gzip) in [("as is", false), ("gzip -6 on the way", true)] {
            let samples: Vec<Run> = (0..runs).map(|_| upload(&rt, path, gzip)).collect();
            let secs = median(samples.iter().map(|r| r.secs).collect());
            let cpu = median(samples.iter().map(|r| r.cpu_secs).collect());
            let stored = samples[0].stored as f64 / f64::from(1 << 20);
            let base = *plain_secs.get_or_insert(secs);
            println!(
                "| {name} | {mib:.0} | {label} | {:.0} | {cpu:.2} | {stored:.0} | {:.2} |",
                mib / secs,
                secs / base
            );
        }
    }
}
