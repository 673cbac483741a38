//! The pack store on real object stores: MinIO (S3), Azurite (Azure) and
//! fake-gcs-server (GCS), started by `scripts/minio`, `scripts/azurite` and
//! `scripts/fake-gcs` (which `scripts/test` runs), and the local file
//! system. A missing server fails these tests: nothing is skipped.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::{env, minio_options, unique};

use tessera_grid::{Curve, TileFormat, TileRange};
use tessera_store::conformance::{key, payload, run_all};
use tessera_store::object::open_url;
use tessera_store::{AreaRange, Durability, PackOptions, PackStore, TileArea, TileStore};

/// The URL and options of a backend, under a fresh prefix.
fn backend(kind: &str, label: &str) -> (String, BTreeMap<String, String>) {
    let prefix = unique(label);
    match kind {
        "s3" => (
            format!("{}/{prefix}", env("TESSERA_TEST_S3_URL", "minio")),
            minio_options(),
        ),
        "azure" => {
            env("AZURITE_BLOB_STORAGE_URL", "azurite");
            (
                format!("{}/{prefix}", env("TESSERA_TEST_AZURE_URL", "azurite")),
                BTreeMap::from([("use_emulator".into(), "true".into())]),
            )
        }
        "gcs" => (
            format!("{}/{prefix}", env("TESSERA_TEST_GCS_URL", "fake-gcs")),
            BTreeMap::from([(
                "service_account_key".into(),
                env("TESSERA_TEST_GCS_KEY", "fake-gcs"),
            )]),
        ),
        "file" => {
            // Cargo's scratch directory for integration tests, not /tmp:
            // these directories outlive the test run.
            let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(prefix);
            (format!("file://{}", dir.display()), BTreeMap::new())
        }
        other => panic!("unknown backend {other}"),
    }
}

fn pack_store(kind: &str, label: &str, options: &PackOptions) -> PackStore {
    let (url, opts) = backend(kind, label);
    PackStore::new(open_url(&url, &opts).unwrap(), options).unwrap()
}

fn conformance(kind: &str) {
    // 64: read by range (header, then the tile) without a local cache.
    for pack_tiles in [1, 16, 64] {
        let options = PackOptions {
            pack_tiles,
            range_reads_above: Some(16),
            ..PackOptions::default()
        };
        let store: Arc<dyn TileStore> = Arc::new(pack_store(
            kind,
            &format!("conformance-{pack_tiles}"),
            &options,
        ));
        run_all(&store);
    }
}

#[test]
fn conformance_on_minio() {
    conformance("s3");
}

#[test]
fn conformance_on_azurite() {
    conformance("azure");
}

#[test]
fn conformance_on_fake_gcs() {
    conformance("gcs");
}

#[test]
fn conformance_on_local_files() {
    conformance("file");
}

#[test]
fn conformance_with_a_local_cache_and_z_order() {
    let dir = tempfile::tempdir().unwrap();
    let options = PackOptions {
        pack_tiles: 64,
        curve: Curve::Zorder,
        cache: Some((dir.path().to_path_buf(), 1 << 20)),
        ..PackOptions::default()
    };
    let store: Arc<dyn TileStore> = Arc::new(pack_store("s3", "cached", &options));
    run_all(&store);
}

/// Keys are prefix/layer/grid/zoom/padded index, in curve order.
#[test]
fn pack_keys_are_computed_and_sort_in_curve_order() {
    let (url, opts) = backend("file", "keys");
    let store = PackStore::new(
        open_url(&url, &opts).unwrap(),
        &PackOptions {
            pack_tiles: 4,
            ..PackOptions::default()
        },
    )
    .unwrap();
    // Zoom 10: 1024 x 1024 tiles, 512 x 512 packs, 262,144 pack indexes.
    assert_eq!(
        store.pack_key(&key("roads", 10, 0, 0, TileFormat::Png)),
        "roads/WebMercatorQuad/10/000000.png.avro"
    );
    // The four tiles of one 2 x 2 block share a pack.
    let k = store.pack_key(&key("roads", 10, 600, 300, TileFormat::Png));
    for (x, y) in [(601, 300), (600, 301), (601, 301)] {
        assert_eq!(store.pack_key(&key("roads", 10, x, y, TileFormat::Png)), k);
    }
    // Walking the packs along the Hilbert curve gives sorted keys.
    let keys: Vec<String> = (0..64u64)
        .map(|d| {
            let (bx, by) = Curve::Hilbert.coords(9, d);
            store.pack_key(&key(
                "roads",
                10,
                u64::from(bx) * 2,
                u64::from(by) * 2,
                TileFormat::Png,
            ))
        })
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);
    assert_eq!(
        keys.iter().collect::<std::collections::HashSet<_>>().len(),
        64
    );
}

/// Reads never list, and a missing pack is one GET answered 404.
#[test]
fn reads_never_list() {
    // Without packs held in memory: one GET per read.
    let options = PackOptions {
        decoded_bytes: 0,
        ..PackOptions::default()
    };
    let (url, opts) = backend("s3", "no-list");
    let writer = PackStore::new(open_url(&url, &opts).unwrap(), &options).unwrap();
    let mut tiles = Vec::new();
    for y in 0..8 {
        for x in 0..8 {
            tiles.push((
                key("l", 6, x, y, TileFormat::Png),
                payload((x * y) as u8, 500),
            ));
        }
    }
    writer.put_many(tiles.clone(), Durability::Synced).unwrap();
    let w = writer.requests();
    assert_eq!(w.list, 0, "writes do not list: {w:?}");
    // 64 tiles, 4 whole packs of 16: four PUTs, nothing read first.
    assert_eq!((w.put, w.get), (4, 0), "{w:?}");

    let reader = PackStore::new(open_url(&url, &opts).unwrap(), &options).unwrap();
    for (k, data) in &tiles {
        assert_eq!(reader.get(k).unwrap().as_ref(), Some(data));
    }
    for (x, y) in [(40, 40), (63, 0), (9, 9)] {
        assert_eq!(
            reader.get(&key("l", 6, x, y, TileFormat::Png)).unwrap(),
            None
        );
    }
    let keys: Vec<_> = tiles.iter().map(|(k, _)| k.clone()).collect();
    let before = reader.requests();
    assert!(reader.all_exist(&keys).unwrap());
    assert_eq!(
        reader.requests().since(&before).get,
        4,
        "one GET per pack to check 64 tiles"
    );
    let r = reader.requests();
    assert_eq!(r.list, 0, "reads do not list: {r:?}");
    assert_eq!(r.head, 0, "reads do not HEAD: {r:?}");
    assert_eq!(
        r.get,
        64 + 3 + 4,
        "one GET per read without a local cache: {r:?}"
    );
    assert_eq!(r.total(), r.get);
}

/// Packs read are held in memory: each is fetched once, however many of
/// its tiles are read or checked, until it is written again.
#[test]
fn packs_held_in_memory_are_fetched_once_and_dropped_when_written() {
    let options = PackOptions::default();
    let (url, opts) = backend("s3", "held");
    let writer = PackStore::new(open_url(&url, &opts).unwrap(), &options).unwrap();
    let tiles: Vec<_> = (0..64u64)
        .map(|i| {
            (
                key("l", 6, i % 8, i / 8, TileFormat::Png),
                payload(i as u8, 700),
            )
        })
        .collect();
    writer.put_many(tiles.clone(), Durability::Synced).unwrap();
    let reader = PackStore::new(open_url(&url, &opts).unwrap(), &options).unwrap();
    for _ in 0..3 {
        for (k, data) in &tiles {
            assert_eq!(reader.get(k).unwrap().as_ref(), Some(data));
        }
    }
    let keys: Vec<_> = tiles.iter().map(|(k, _)| k.clone()).collect();
    assert!(reader.all_exist(&keys).unwrap());
    assert_eq!(reader.requests().get, 4, "four packs of 16, one GET each");
    // A write through this store drops its held copy: the next read sees it.
    reader
        .put(&tiles[3].0, payload(99, 500), Durability::Synced)
        .unwrap();
    assert_eq!(reader.get(&tiles[3].0).unwrap(), Some(payload(99, 500)));
    assert_eq!(reader.get(&tiles[4].0).unwrap().as_ref(), Some(&tiles[4].1));
    // A write by another process is seen once the copy is forgotten (as
    // the cluster's lease and generation checks do).
    writer
        .put(&tiles[5].0, payload(77, 500), Durability::Synced)
        .unwrap();
    reader.forget(&tiles[5].0);
    assert_eq!(reader.get(&tiles[5].0).unwrap(), Some(payload(77, 500)));
}

/// Reads of one pack that arrive together (a screen of tiles) make one GET
/// between them, each answered with its own tile.
#[test]
fn concurrent_reads_of_one_pack_make_one_get() {
    let options = PackOptions {
        pack_tiles: 64,
        ..PackOptions::default()
    };
    let (url, opts) = backend("s3", "together");
    let writer = PackStore::new(open_url(&url, &opts).unwrap(), &options).unwrap();
    let tiles: Vec<_> = (0..64u64)
        .map(|i| {
            (
                key("l", 6, i % 8, i / 8, TileFormat::Png),
                payload(i as u8, 20_000),
            )
        })
        .collect();
    writer.put_many(tiles.clone(), Durability::Synced).unwrap();
    let reader = Arc::new(PackStore::new(open_url(&url, &opts).unwrap(), &options).unwrap());
    let start = Arc::new(std::sync::Barrier::new(16));
    let threads: Vec<_> = tiles
        .iter()
        .step_by(4)
        .cloned()
        .map(|(k, data)| {
            let (reader, start) = (reader.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                assert_eq!(reader.get(&k).unwrap(), Some(data));
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(reader.requests().get, 1, "sixteen reads, one pack, one GET");
}

/// Packs of 64 read without a local cache fetch their header once, then
/// each tile by range: never the whole object.
#[test]
fn large_packs_are_read_by_range_through_their_header_index() {
    let options = PackOptions {
        pack_tiles: 64,
        range_reads_above: Some(16),
        ..PackOptions::default()
    };
    let (url, opts) = backend("s3", "ranges");
    let writer = PackStore::new(open_url(&url, &opts).unwrap(), &options).unwrap();
    let tiles: Vec<_> = (0..64u64)
        .map(|i| {
            (
                key("l", 6, 8 + i % 8, i / 8, TileFormat::Png),
                payload(i as u8, 20_000 + i as usize),
            )
        })
        .collect();
    writer.put_many(tiles.clone(), Durability::Synced).unwrap();
    let reader = PackStore::new(open_url(&url, &opts).unwrap(), &options).unwrap();
    for (k, data) in tiles.iter().take(10) {
        assert_eq!(reader.get(k).unwrap().as_ref(), Some(data));
    }
    // One header read, then one ranged read per tile.
    assert_eq!(reader.requests().get, 1 + 10);
    assert_eq!(
        reader.get(&key("l", 6, 7, 0, TileFormat::Png)).unwrap(),
        None
    );
    let keys: Vec<_> = tiles.iter().map(|(k, _)| k.clone()).collect();
    let before = reader.requests();
    assert!(reader.all_exist(&keys).unwrap());
    assert_eq!(reader.requests().since(&before).get, 0, "the index answers");
    // A pack rewritten by another process after its header was read: the
    // stale range is noticed and the pack read again.
    // Same sizes, other bytes: only the version tells them apart.
    let rewritten: Vec<_> = tiles
        .iter()
        .enumerate()
        .map(|(i, (k, _))| (k.clone(), payload(200 - i as u8, 20_000 + i)))
        .collect();
    writer
        .put_many(rewritten.clone(), Durability::Synced)
        .unwrap();
    assert_eq!(
        reader.get(&tiles[40].0).unwrap(),
        Some(rewritten[40].1.clone())
    );
    assert_eq!(
        reader.get(&tiles[41].0).unwrap(),
        Some(rewritten[41].1.clone())
    );
}

/// With the local cache, a pack is fetched once, also after a restart, and
/// a damaged cached file is fetched again, never served.
#[test]
fn local_cache_fetches_each_pack_once() {
    let dir = tempfile::tempdir().unwrap();
    let options = PackOptions {
        cache: Some((dir.path().to_path_buf(), 64 << 20)),
        ..PackOptions::default()
    };
    let (url, opts) = backend("s3", "disk-cache");
    let writer = PackStore::new(open_url(&url, &opts).unwrap(), &PackOptions::default()).unwrap();
    let tiles: Vec<_> = (0..16)
        .map(|i| {
            (
                key("l", 4, i % 4, i / 4, TileFormat::Png),
                payload(i as u8, 2000),
            )
        })
        .collect();
    writer.put_many(tiles.clone(), Durability::Synced).unwrap();

    let reader = PackStore::new(open_url(&url, &opts).unwrap(), &options).unwrap();
    for _ in 0..3 {
        for (k, data) in &tiles {
            assert_eq!(reader.get(k).unwrap().as_ref(), Some(data));
        }
    }
    assert_eq!(reader.requests().get, 1, "one pack, one GET");
    drop(reader);

    let restarted = PackStore::new(open_url(&url, &opts).unwrap(), &options).unwrap();
    assert_eq!(
        restarted.get(&tiles[5].0).unwrap().as_ref(),
        Some(&tiles[5].1)
    );
    assert_eq!(restarted.requests().get, 0, "the cache survives a restart");
    drop(restarted);

    // Damage every cached file: the next read fetches again.
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let path = e.unwrap().path();
        let mut bytes = std::fs::read(&path).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x55;
        std::fs::write(&path, bytes).unwrap();
    }
    let again = PackStore::new(open_url(&url, &opts).unwrap(), &options).unwrap();
    assert_eq!(again.get(&tiles[7].0).unwrap().as_ref(), Some(&tiles[7].1));
    assert_eq!(again.requests().get, 1, "a damaged file is fetched again");
}

/// Two stores (as two processes) write different tiles of the same packs at
/// once; conditional writes keep every tile.
fn concurrent_merges(kind: &str) {
    let (url, opts) = backend(kind, "merge");
    let options = PackOptions {
        pack_tiles: 64,
        ..PackOptions::default()
    };
    let stores: Vec<Arc<PackStore>> = (0..2)
        .map(|_| Arc::new(PackStore::new(open_url(&url, &opts).unwrap(), &options).unwrap()))
        .collect();
    // One 8 x 8 pack at zoom 5; 4 threads per store, each its own tiles.
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let store = stores[(t % 2) as usize].clone();
            std::thread::spawn(move || {
                for i in 0..8u64 {
                    let n = t * 8 + i;
                    store
                        .put(
                            &key("m", 5, n % 8, n / 8, TileFormat::Png),
                            payload(n as u8, 300),
                            Durability::Synced,
                        )
                        .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let check = PackStore::new(open_url(&url, &opts).unwrap(), &options).unwrap();
    for n in 0..64u64 {
        assert_eq!(
            check
                .get(&key("m", 5, n % 8, n / 8, TileFormat::Png))
                .unwrap(),
            Some(payload(n as u8, 300)),
            "tile {n} survived the concurrent merges"
        );
    }
}

#[test]
fn concurrent_merges_on_minio() {
    concurrent_merges("s3");
}

#[test]
fn concurrent_merges_on_azurite() {
    concurrent_merges("azure");
}

#[test]
fn concurrent_merges_on_fake_gcs() {
    concurrent_merges("gcs");
}

/// Truncating deletes computed keys in batches and never lists.
#[test]
fn truncate_deletes_computed_keys_without_listing() {
    let options = PackOptions {
        pack_tiles: 16,
        delete_batch: 10,
        ..PackOptions::default()
    };
    let store = pack_store("s3", "truncate", &options);
    // Zoom 7, a 32 x 32 block: 64 packs.
    let mut tiles = Vec::new();
    for y in 32..64 {
        for x in 64..96 {
            tiles.push((key("t", 7, x, y, TileFormat::Png), payload(x as u8, 64)));
        }
    }
    store.put_many(tiles.clone(), Durability::Synced).unwrap();
    let before = store.requests();
    // Columns 66..=93, rows 34..=59: 6 x 6 whole packs, 20 on the border.
    let area = TileArea {
        progress: std::sync::Arc::default(),
        layer: "t".into(),
        grid: "WebMercatorQuad".into(),
        format: TileFormat::Png,
        ranges: vec![AreaRange {
            range: TileRange {
                z: 7,
                min_x: 66,
                min_y: 34,
                max_x: 93,
                max_y: 59,
            },
            matrix_width: 128,
            matrix_height: 128,
        }],
    };
    let report = store.truncate(&area).unwrap();
    let used = store.requests().since(&before);
    assert_eq!(used.list, 0, "{used:?}");
    assert_eq!(report.objects_deleted, 36, "{report:?}");
    // Border packs: 8 x 7 touched in all, minus 36 whole ones.
    assert_eq!(report.objects_rewritten, 8 * 7 - 36, "{report:?}");
    assert_eq!(used.delete, 36);
    // This store wrote the border packs, so it rewrites them on the
    // version it holds: no read first.
    assert_eq!((used.get, used.put), (0, 20), "{used:?}");
    for (k, data) in &tiles {
        let got = store.get(k).unwrap();
        if area.contains(k) {
            assert_eq!(got, None, "{k}");
        } else {
            assert_eq!(got.as_ref(), Some(data), "{k}");
        }
    }
}

#[test]
fn pack_size_must_be_a_power_of_four() {
    for bad in [0, 2, 8, 32] {
        let (url, opts) = backend("file", "bad-size");
        let e = PackStore::new(
            open_url(&url, &opts).unwrap(),
            &PackOptions {
                pack_tiles: bad,
                ..PackOptions::default()
            },
        )
        .unwrap_err();
        assert!(e.to_string().contains("power of four"), "{e}");
    }
}

/// The multipart writer on Azure (block blobs on Azurite) and local files:
/// 12 MiB in 5 MiB parts arrive exactly. (fake-gcs-server has no XML
/// multipart API, so GCS multipart uploads are not tested here.)
#[test]
fn multipart_uploads_are_exact_on_azurite_and_files() {
    use tessera_store::upload::{Upload, UploadOptions, checksum};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for kind in ["azure", "file"] {
        let (url, opts) = backend(kind, "upload");
        let location = open_url(&url, &opts).unwrap();
        let path = location.prefix.clone().join("big.bin");
        let data = common::noise(12 << 20, 7);
        let done = rt.block_on(async {
            let mut up = Upload::new(
                location.store.clone(),
                path.clone(),
                UploadOptions {
                    part_size: 5 << 20,
                    parts_in_flight: 2,
                },
            );
            for chunk in data.chunks(64 << 10) {
                up.write(chunk).await.unwrap();
            }
            up.finish().await.unwrap()
        });
        assert_eq!(done.parts, 3, "{kind}");
        assert_eq!(done.crc32c, crc32c::crc32c(&data), "{kind}");
        let stored = rt.block_on(checksum(&location.store, &path)).unwrap();
        assert_eq!(stored, (data.len() as u64, done.crc32c), "{kind}");
    }
}

fn tile_store(kind: &str, label: &str) -> tessera_store::TileObjectStore {
    let (url, opts) = backend(kind, label);
    tessera_store::TileObjectStore::new(open_url(&url, &opts).unwrap(), "public, max-age=600", 2)
        .unwrap()
}

#[test]
fn xyz_layout_conformance_on_every_server() {
    for kind in ["s3", "azure", "gcs", "file"] {
        let store: Arc<dyn TileStore> = Arc::new(tile_store(kind, "xyz"));
        run_all(&store);
    }
}

#[test]
fn xyz_tiles_are_plain_objects_with_their_http_headers_on_minio() {
    use object_store::{GetOptions, ObjectStore};
    let (url, opts) = backend("s3", "xyz-headers");
    let store = tessera_store::TileObjectStore::new(
        open_url(&url, &opts).unwrap(),
        "public, max-age=600",
        2,
    )
    .unwrap();
    let png = key("xyz", 3, 5, 2, TileFormat::Png);
    let mut mvt = key("xyz", 3, 5, 2, TileFormat::Png);
    mvt.format = TileFormat::Mvt;
    store
        .put_many(
            vec![
                (png.clone(), payload(1, 300)),
                (mvt.clone(), payload(2, 300)),
            ],
            Durability::Buffered,
        )
        .unwrap();
    let path = store.tile_key(&png);
    assert!(
        path.ends_with(&format!("/{}/{}/3/5/2.png", png.layer, png.grid)),
        "{path}"
    );
    let raw = open_url(&url, &opts).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let head = |p: String| {
        let store = raw.store.clone();
        rt.block_on(async move {
            store
                .get_opts(
                    &object_store::path::Path::from(p),
                    GetOptions {
                        head: true,
                        ..GetOptions::default()
                    },
                )
                .await
                .unwrap()
                .attributes
        })
    };
    let attrs = head(path);
    let get = |a: &object_store::Attributes, k: object_store::Attribute| {
        a.get(&k).map(|v| v.as_ref().to_string())
    };
    assert_eq!(
        get(&attrs, object_store::Attribute::ContentType).as_deref(),
        Some("image/png")
    );
    assert_eq!(
        get(&attrs, object_store::Attribute::CacheControl).as_deref(),
        Some("public, max-age=600")
    );
    let attrs = head(store.tile_key(&mvt));
    assert_eq!(
        get(&attrs, object_store::Attribute::ContentEncoding).as_deref(),
        Some("gzip")
    );
    assert_eq!(
        get(&attrs, object_store::Attribute::ContentType).as_deref(),
        Some("application/vnd.mapbox-vector-tile")
    );
    // Stored time: the object's Last-Modified.
    let stored = store.get_stored(&png).unwrap().unwrap();
    let age = std::time::SystemTime::now()
        .duration_since(stored.stored_at.unwrap())
        .unwrap_or_default();
    assert!(age < std::time::Duration::from_mins(5), "{age:?}");
}

/// Leases and generations on one server: of 8 nodes asking at once exactly
/// one wins; an expired lease is taken over by exactly one of 8; the dead
/// holder cannot renew it; a released lease is free; a bumped generation is
/// seen once.
fn leases(kind: &str) {
    use std::time::Duration;
    use tessera_store::cluster::{Acquired, Coordinator, Generation};
    let (url, opts) = backend(kind, "leases");
    let c = Arc::new(Coordinator::on_bucket(kind, open_url(&url, &opts).unwrap()));
    assert!(c.supports_leases());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let range = TileRange {
            z: 5,
            min_x: 8,
            min_y: 4,
            max_x: 11,
            max_y: 7,
        };
        let key = c.lease_path("relief", "WebMercatorQuad", TileFormat::Png, &range);
        let ask = |node: String, ttl: Duration| {
            let (c, key) = (c.clone(), key.clone());
            async move { c.acquire(&key, &node, ttl).await.unwrap() }
        };
        let first =
            futures::future::join_all((0..8).map(|i| ask(format!("n{i}"), Duration::from_mins(1))))
                .await;
        let winners: Vec<_> = first
            .iter()
            .filter_map(|o| match o {
                Acquired::Won(h) => Some(h.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(winners.len(), 1, "{kind}: {first:?}");
        c.release(winners[0].clone()).await.unwrap();
        assert!(c.lease(&key).await.unwrap().is_none(), "{kind}: released");

        let Acquired::Won(mut dead) = ask("dead".into(), Duration::ZERO).await else {
            panic!("{kind}: a free lease is won");
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        let second =
            futures::future::join_all((0..8).map(|i| ask(format!("m{i}"), Duration::from_mins(1))))
                .await;
        let taken = second
            .iter()
            .filter(|o| matches!(o, Acquired::TakenOver(_)))
            .count();
        assert_eq!(taken, 1, "{kind}: {second:?}");
        assert!(
            !c.renew(&mut dead, Duration::from_mins(1)).await.unwrap(),
            "{kind}: the dead holder cannot renew"
        );

        let layer = unique("layer");
        assert_eq!(
            c.check_generation(&layer, None).await.unwrap(),
            Generation::Unchanged
        );
        c.bump_generation(&layer, "a").await.unwrap();
        let Generation::Changed(Some(etag)) = c.check_generation(&layer, None).await.unwrap()
        else {
            panic!("{kind}: a bumped generation is seen");
        };
        assert_eq!(
            c.check_generation(&layer, Some(&etag)).await.unwrap(),
            Generation::Unchanged,
            "{kind}"
        );
        c.bump_generation(&layer, "b").await.unwrap();
        assert!(
            matches!(
                c.check_generation(&layer, Some(&etag)).await.unwrap(),
                Generation::Changed(Some(_))
            ),
            "{kind}"
        );
    });
}

#[test]
fn leases_on_minio() {
    leases("s3");
}

#[test]
fn leases_on_azurite() {
    leases("azure");
}

#[test]
fn leases_on_fake_gcs() {
    leases("gcs");
}

#[test]
fn a_local_directory_cannot_hold_leases() {
    let (url, opts) = backend("file", "no-leases");
    let c = tessera_store::cluster::Coordinator::on_bucket("file", open_url(&url, &opts).unwrap());
    assert!(!c.supports_leases());
}
