//! Bytes allocated per MiB of request body on tessera's body-read path (an
//! axum/hyper server whose handler pulls frames with
//! `tessera_server::http::transport::body::BodyReader` into a sink, as the upload
//! endpoint does before handing them to the multipart writer), against a
//! baseline that reads the same bytes from a TCP socket into a sink through
//! one fixed buffer. A counting global allocator measures every allocation
//! in the process while the body passes; the client (a thread writing from
//! fixed buffers) allocates nothing in that window.
//!
//! `cargo bench -p tessera-server --bench body_read [-- MIB RUNS]`
//! (defaults 256 MiB, 5 runs; medians). Prints a markdown table.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::routing::put;
use tessera_server::http::transport::body::BodyReader;
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

struct Counting;

static BYTES: AtomicU64 = AtomicU64::new(0);
static COUNT: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator and only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        COUNT.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        BYTES.fetch_add(new_size as u64, Ordering::Relaxed);
        COUNT.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const CHUNK: usize = 64 << 10;

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// Raw bytes on a socket, read into one buffer.
    Socket,
    /// HTTP PUT with Content-Length through BodyReader.
    Length,
    /// HTTP PUT, chunked transfer encoding, through BodyReader.
    Chunked,
}

struct Sample {
    bytes: u64,
    count: u64,
    secs: f64,
}

/// Sends `total` bytes to `port` in `mode` from fixed buffers; returns when
/// the server has answered (or closed).
fn client(port: u16, mode: Mode, total: usize, start: &Barrier) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let payload = vec![0x5au8; CHUNK];
    let head = match mode {
        Mode::Socket => String::new(),
        Mode::Length => format!(
            "PUT /sink HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {total}\r\nConnection: close\r\n\r\n"
        ),
        Mode::Chunked => "PUT /sink HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n".to_string(),
    };
    let chunk_head = format!("{CHUNK:x}\r\n");
    let mut answer = [0u8; 4096];
    start.wait();
    s.write_all(head.as_bytes()).expect("write");
    let mut left = total;
    while left > 0 {
        let n = left.min(CHUNK);
        if mode == Mode::Chunked {
            assert_eq!(n, CHUNK, "the total is a whole number of chunks");
            s.write_all(chunk_head.as_bytes()).expect("write");
        }
        s.write_all(&payload[..n]).expect("write");
        if mode == Mode::Chunked {
            s.write_all(b"\r\n").expect("write");
        }
        left -= n;
    }
    match mode {
        Mode::Chunked => s.write_all(b"0\r\n\r\n").expect("write"),
        Mode::Socket => s.shutdown(std::net::Shutdown::Write).expect("shutdown"),
        Mode::Length => {}
    }
    while s.read(&mut answer).is_ok_and(|n| n > 0) {}
}

async fn sink(body: Body) -> String {
    let mut reader = BodyReader::new(body, u64::MAX, Duration::from_secs(30));
    let mut n = 0usize;
    while let Some(frame) = reader.next().await.expect("body") {
        n += frame.len();
    }
    n.to_string()
}

fn run(rt: &tokio::runtime::Runtime, mode: Mode, total: usize) -> Sample {
    let listener = rt.block_on(TcpListener::bind("127.0.0.1:0")).expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let server = if mode == Mode::Socket {
        rt.spawn(async move {
            let (mut sock, _) = listener.accept().await.expect("accept");
            let mut buf = vec![0u8; CHUNK];
            let mut n = 0usize;
            loop {
                let got = sock.read(&mut buf).await.expect("read");
                if got == 0 {
                    break;
                }
                n += got;
            }
            assert_eq!(n, total);
        })
    } else {
        let app = axum::Router::new().route("/sink", put(sink));
        rt.spawn(async move {
            let _ = axum::serve(listener, app).await;
        })
    };
    let start = Arc::new(Barrier::new(2));
    let go = start.clone();
    let thread = std::thread::spawn(move || client(port, mode, total, &go));
    let (b0, c0) = (BYTES.load(Ordering::SeqCst), COUNT.load(Ordering::SeqCst));
    let t0 = Instant::now();
    start.wait();
    thread.join().expect("client");
    let secs = t0.elapsed().as_secs_f64();
    let sample = Sample {
        bytes: BYTES.load(Ordering::SeqCst) - b0,
        count: COUNT.load(Ordering::SeqCst) - c0,
        secs,
    };
    if mode == Mode::Socket {
        rt.block_on(server).expect("server");
    } else {
        server.abort();
    }
    sample
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let mib: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(256);
    let runs: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(5);
    let total = mib << 20;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    println!("{mib} MiB per run, median of {runs} runs\n");
    println!(
        "| path | bytes allocated per MiB | allocations per MiB | ratio to the socket baseline (bytes) | MiB/s |"
    );
    println!("|---|---:|---:|---:|---:|");
    let mut baseline = None;
    for (name, mode) in [
        ("socket -> sink (baseline)", Mode::Socket),
        ("HTTP Content-Length -> BodyReader -> sink", Mode::Length),
        ("HTTP chunked -> BodyReader -> sink", Mode::Chunked),
    ] {
        let samples: Vec<Sample> = (0..runs).map(|_| run(&rt, mode, total)).collect();
        let per = mib as f64;
        let bytes = median(samples.iter().map(|s| s.bytes as f64 / per).collect());
        let count = median(samples.iter().map(|s| s.count as f64 / per).collect());
        let rate = median(samples.iter().map(|s| per / s.secs).collect());
        let base = *baseline.get_or_insert(bytes.max(1.0));
        println!(
            "| {name} | {bytes:.0} | {count:.1} | {:.0} | {rate:.0} |",
            bytes / base
        );
    }
}
