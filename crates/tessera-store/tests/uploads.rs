//! Multipart uploads against MinIO (`scripts/minio`), directly and through
//! `scripts/lib/faulty-proxy.py`, which answers some part uploads with
//! 500/503, resets connections or stalls. An upload either completes with
//! the exact bytes or is aborted: never a partial object, never parts left
//! behind (checked with MinIO's listing of in-progress uploads).
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use common::minio_options;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use tessera_store::object::open_url;
use tessera_store::upload::{Upload, UploadOptions, checksum};

const MIB: usize = 1 << 20;

fn env(name: &str) -> String {
    common::env(name, "minio")
}

fn unique(label: &str) -> String {
    format!("uploads/{}", common::unique(label))
}

/// A client for the test bucket at `endpoint`, with short timeouts so
/// stalls turn into retries quickly.
fn store_at(endpoint: &str, max_retries: u32) -> Arc<dyn ObjectStore> {
    let mut options = minio_options();
    for (k, v) in [
        ("endpoint", endpoint),
        ("timeout", "3s"),
        ("retry_timeout_secs", "60"),
    ] {
        options.insert(k.into(), v.into());
    }
    options.insert("max_retries".into(), max_retries.to_string());
    open_url(&env("TESSERA_TEST_S3_URL"), &options)
        .unwrap()
        .store
}

fn data(len: usize, seed: u64) -> Vec<u8> {
    common::noise(len, seed)
}

/// Feeds `bytes` in 64 KiB chunks, as a request body arrives.
async fn upload(
    store: &Arc<dyn ObjectStore>,
    path: &Path,
    bytes: &[u8],
    options: UploadOptions,
) -> object_store::Result<tessera_store::upload::Uploaded> {
    let mut up = Upload::new(store.clone(), path.clone(), options);
    for chunk in bytes.chunks(64 * 1024) {
        up.write(chunk).await?;
    }
    up.finish().await
}

/// In-progress multipart uploads of `key`, as MinIO lists them (MinIO
/// lists by whole object name; `a_dropped_upload_is_aborted` shows the
/// listing sees an upload under way).
fn in_progress_uploads(key: &Path) -> usize {
    let prefix = key.as_ref();
    let bucket = env("TESSERA_TEST_S3_URL")
        .trim_start_matches("s3://")
        .to_string();
    let out = Command::new("curl")
        .args([
            "-fsS",
            "--aws-sigv4",
            "aws:amz:us-east-1:s3",
            "--user",
            &format!(
                "{}:{}",
                env("TESSERA_TEST_S3_ACCESS_KEY"),
                env("TESSERA_TEST_S3_SECRET_KEY")
            ),
            &format!(
                // Parameters sorted and encoded as SigV4 signs them.
                "{}/{bucket}?prefix={}&uploads=",
                env("TESSERA_TEST_S3_ENDPOINT"),
                prefix.replace('/', "%2F")
            ),
        ])
        .output()
        .expect("curl runs");
    assert!(
        out.status.success(),
        "listing uploads failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .matches("<Upload>")
        .count()
}

/// A faulty proxy in front of MinIO; killed on drop.
struct Proxy {
    child: Child,
    endpoint: String,
}

impl Proxy {
    fn start(plan: &[&str]) -> Proxy {
        let upstream = env("TESSERA_TEST_S3_ENDPOINT");
        let upstream_port = upstream.rsplit(':').next().unwrap().to_string();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let script = format!("{}/../../scripts/lib/faulty-proxy.py", manifest_dir());
        let mut child = Command::new("python3")
            .arg(script)
            .arg(port.to_string())
            .arg(upstream_port)
            .args(plan)
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs the faulty proxy");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready", "the faulty proxy started");
        Proxy {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn options(parts_in_flight: usize) -> UploadOptions {
    UploadOptions {
        part_size: 5 * MIB,
        parts_in_flight,
    }
}

#[test]
fn multipart_and_single_put_store_the_exact_bytes() {
    let rt = runtime();
    let store = store_at(&env("TESSERA_TEST_S3_ENDPOINT"), 3);
    for (len, parts_in_flight, parts) in [(23 * MIB + 77, 4, 5), (12 * MIB, 1, 3), (MIB, 2, 0)] {
        let path = Path::from(unique("exact"));
        let bytes = data(len, len as u64);
        let done = rt
            .block_on(upload(&store, &path, &bytes, options(parts_in_flight)))
            .unwrap();
        assert_eq!(done.bytes, len as u64);
        assert_eq!(done.parts, parts, "{len} B in 5 MiB parts");
        assert_eq!(done.crc32c, crc32c::crc32c(&bytes));
        let stored = rt
            .block_on(async { store.get(&path).await?.bytes().await })
            .unwrap();
        assert!(stored == bytes, "stored bytes equal the sent bytes");
        assert_eq!(
            rt.block_on(checksum(&store, &path)).unwrap(),
            (len as u64, done.crc32c)
        );
    }
}

#[test]
fn part_sizes_below_five_mib_are_refused() {
    let bad = UploadOptions {
        part_size: MIB,
        parts_in_flight: 2,
    };
    assert!(bad.validate().unwrap_err().contains("5 MiB"));
    assert!(
        UploadOptions {
            parts_in_flight: 0,
            ..UploadOptions::default()
        }
        .validate()
        .is_err()
    );
}

/// 500s, 503s, resets and a stall on part uploads are retried: the object
/// is complete and exact.
#[test]
fn failing_parts_are_retried_and_the_object_is_exact() {
    let rt = runtime();
    let proxy = Proxy::start(&[
        "--fail",
        "2",
        "--reset",
        "5",
        "--stall",
        "7",
        "--stall-secs",
        "8",
    ]);
    let store = store_at(&proxy.endpoint, 10);
    let prefix = unique("retried");
    let path = Path::from(format!("{prefix}/object"));
    let bytes = data(42 * MIB + 5, 7);
    let done = rt
        .block_on(upload(&store, &path, &bytes, options(4)))
        .unwrap();
    assert_eq!(done.parts, 9);
    let direct = store_at(&env("TESSERA_TEST_S3_ENDPOINT"), 3);
    let stored = rt
        .block_on(async { direct.get(&path).await?.bytes().await })
        .unwrap();
    assert!(stored == bytes, "stored bytes equal the sent bytes");
    assert_eq!(in_progress_uploads(&path), 0);
}

/// When parts keep failing, the upload fails, the object does not exist
/// and no parts are left on the server.
#[test]
fn an_upload_that_cannot_finish_is_aborted_without_leftovers() {
    let rt = runtime();
    let proxy = Proxy::start(&["--fail-all"]);
    let store = store_at(&proxy.endpoint, 2);
    let prefix = unique("aborted");
    let path = Path::from(format!("{prefix}/object"));
    let bytes = data(17 * MIB, 3);
    let e = rt
        .block_on(upload(&store, &path, &bytes, options(2)))
        .unwrap_err();
    assert!(!e.to_string().is_empty());
    let direct = store_at(&env("TESSERA_TEST_S3_ENDPOINT"), 3);
    let missing = rt.block_on(direct.head(&path)).unwrap_err();
    assert!(
        matches!(missing, object_store::Error::NotFound { .. }),
        "{missing}"
    );
    assert_eq!(in_progress_uploads(&path), 0, "no multipart upload left");
}

/// An upload dropped half way (the client went away) is aborted.
#[test]
fn a_dropped_upload_is_aborted() {
    let rt = runtime();
    let store = store_at(&env("TESSERA_TEST_S3_ENDPOINT"), 3);
    let prefix = unique("dropped");
    let path = Path::from(format!("{prefix}/object"));
    let bytes = data(16 * MIB, 5);
    rt.block_on(async {
        let mut up = Upload::new(store.clone(), path.clone(), options(2));
        for chunk in bytes.chunks(64 * 1024) {
            up.write(chunk).await.unwrap();
        }
        assert_eq!(in_progress_uploads(&path), 1, "the upload is under way");
        drop(up);
        for _ in 0..100 {
            if in_progress_uploads(&path) == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    assert_eq!(
        in_progress_uploads(&path),
        0,
        "the dropped upload was aborted"
    );
    assert!(rt.block_on(store.head(&path)).is_err(), "no object");
}

/// The package's directory, read when the test runs (cargo sets it), not
/// baked in at build time: a test binary built in another checkout that
/// shares the target directory must still find this checkout's files.
fn manifest_dir() -> String {
    std::env::var("CARGO_MANIFEST_DIR").expect("cargo test sets CARGO_MANIFEST_DIR")
}
