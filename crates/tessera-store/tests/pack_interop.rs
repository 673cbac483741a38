//! Packs are plain Avro: Python's fastavro (from the test venv that
//! scripts/install-deps builds) reads one written by tessera and gets the
//! same tiles, byte for byte.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::path::PathBuf;
use std::process::Command;

use bytes::Bytes;
use tessera_store::pack::{PackedTile, write_pack};

const READER: &str = r#"
import json, sys
from fastavro import reader
with open(sys.argv[1], "rb") as f:
    r = reader(f)
    schema = r.writer_schema
    tiles = [
        {"z": t["z"], "x": t["x"], "y": t["y"], "media_type": t["media_type"],
         "data": t["data"].hex(), "created": int(t["created"].timestamp() * 1000), "etag": t["etag"]}
        for t in r
    ]
print(json.dumps({"codec": r.codec, "schema_name": schema["name"], "tiles": tiles,
                  "metadata": sorted(r.metadata)}))
"#;

#[test]
fn fastavro_reads_a_pack_written_by_tessera_byte_for_byte() {
    let python = PathBuf::from(manifest_dir()).join("../../var/venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/install-deps (it builds the test venv with fastavro)",
        python.display()
    );
    let tiles: Vec<PackedTile> = (0..16u32)
        .map(|i| {
            let data: Vec<u8> = (0..(500 + i * 37)).map(|b| (b * 7 + i) as u8).collect();
            PackedTile::new(
                12,
                2000 + i % 4,
                1000 + i / 4,
                "image/png",
                Bytes::from(data),
            )
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pack.avro");
    std::fs::write(&path, write_pack(&tiles).unwrap()).unwrap();

    let out = Command::new(&python)
        .arg("-c")
        .arg(READER)
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["codec"], "null", "payloads are not compressed again");
    assert_eq!(v["schema_name"], "tessera.pack.Tile");
    assert!(
        v["metadata"]
            .as_array()
            .unwrap()
            .iter()
            .any(|k| k == "tessera.index"),
        "the tile index is header metadata: {}",
        v["metadata"]
    );
    let read = v["tiles"].as_array().unwrap();
    assert_eq!(read.len(), tiles.len());
    for (t, r) in tiles.iter().zip(read) {
        let hex = t.data.iter().fold(String::new(), |mut s, b| {
            use std::fmt::Write;
            let _ = write!(s, "{b:02x}");
            s
        });
        assert_eq!(r["data"], hex.as_str(), "tile {}/{}/{}", t.z, t.x, t.y);
        assert_eq!(r["z"], i64::from(t.z));
        assert_eq!(r["x"], i64::from(t.x));
        assert_eq!(r["y"], i64::from(t.y));
        assert_eq!(r["media_type"], "image/png");
        assert_eq!(r["etag"], t.etag.as_str());
        assert_eq!(r["created"], t.created_ms);
    }
}

/// The package's directory, read when the test runs (cargo sets it), not
/// baked in at build time: a test binary built in another checkout that
/// shares the target directory must still find this checkout's files.
fn manifest_dir() -> String {
    std::env::var("CARGO_MANIFEST_DIR").expect("cargo test sets CARGO_MANIFEST_DIR")
}
