//! Helpers shared by the tests and benchmarks that talk to the object-store
//! servers `scripts/minio`, `scripts/azurite` and `scripts/fake-gcs` start.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

/// The variable `name` that `scripts/<script> start` writes to
/// `var/<script>/env`; a missing one fails loudly.
pub fn env(name: &str, script: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: start the server with scripts/{script} start and source var/{script}/env")
    })
}

/// A fresh name per call, so runs sharing a bucket never meet.
pub fn unique(label: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos();
    format!("{label}-{}-{nanos}", std::process::id())
}

/// Client options for the MinIO test server.
pub fn minio_options() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("endpoint".into(), env("TESSERA_TEST_S3_ENDPOINT", "minio")),
        (
            "access_key_id".into(),
            env("TESSERA_TEST_S3_ACCESS_KEY", "minio"),
        ),
        (
            "secret_access_key".into(),
            env("TESSERA_TEST_S3_SECRET_KEY", "minio"),
        ),
        ("region".into(), "us-east-1".into()),
        ("allow_http".into(), "true".into()),
    ])
}

/// `len` incompressible bytes (xorshift), the same for the same seed.
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
