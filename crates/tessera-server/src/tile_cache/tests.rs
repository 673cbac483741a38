//! The tile cache without the server: layers built directly from an
//! in-memory source and a memory store (no configuration, no router, no
//! `Service`), through the miss, seed and lease paths.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use object_store::memory::InMemory;
use object_store::path::Path;
use tessera_grid::{BBox, TileFormat, TileMatrixSet};
use tessera_image::{BandData, EncodeOptions, Raster, StyleSpec, build_style};
use tessera_source::{Crs, Source, SourceError, SourceInfo, WindowRequest};
use tessera_store::cluster::{Acquired, Coordinator, HeldLease};
use tessera_store::object::ObjectLocation;
use tessera_store::{Durability, MemoryStore, TileStore};
use tokio::sync::Semaphore;

use super::{
    CacheStatus, Locking, SeedStep, TileCache, TileCacheSettings, TileError, TileRequest,
    seed_metatile,
};
use crate::metatile::{Metatile, MetatileSpec};
use crate::metrics::Metrics;
use crate::model::{Freshness, Grid, Layer, LayerCache, Leases};
use crate::render::{RenderLimits, Renderer};

static WEB_MERCATOR: LazyLock<Crs> = LazyLock::new(|| Crs::parse("EPSG:3857").unwrap());

/// A source of a colour gradient over the whole world that counts its reads.
#[derive(Debug)]
struct Gradient {
    info: SourceInfo,
    reads: AtomicUsize,
}

impl Gradient {
    fn new() -> Gradient {
        let world = TileMatrixSet::web_mercator_quad().extent;
        Gradient {
            info: SourceInfo {
                band_count: 3,
                is_byte: true,
                native_crs: WEB_MERCATOR.clone(),
                native_bounds: world,
                lonlat_bounds: BBox::new(-180.0, -85.0, 180.0, 85.0).unwrap(),
                native_resolution: world.width() / 4096.0,
            },
            reads: AtomicUsize::new(0),
        }
    }
}

impl Source for Gradient {
    fn info(&self) -> &SourceInfo {
        &self.info
    }

    fn read(&self, request: &WindowRequest<'_>) -> Result<Raster, SourceError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        let (w, h) = (request.width as usize, request.height as usize);
        let world = &self.info.native_bounds;
        let mut bands = vec![vec![0u8; w * h], vec![0u8; w * h], vec![0u8; w * h]];
        for y in 0..h {
            for x in 0..w {
                let gx = request.bbox.min_x + (x as f64 + 0.5) / w as f64 * request.bbox.width();
                let gy = request.bbox.max_y - (y as f64 + 0.5) / h as f64 * request.bbox.height();
                let fx = ((gx - world.min_x) / world.width()).clamp(0.0, 1.0);
                let fy = ((gy - world.min_y) / world.height()).clamp(0.0, 1.0);
                bands[0][y * w + x] = (fx * 255.0) as u8;
                bands[1][y * w + x] = (fy * 255.0) as u8;
                bands[2][y * w + x] = 128;
            }
        }
        Ok(Raster {
            width: request.width,
            height: request.height,
            bands: bands.into_iter().map(BandData::U8).collect(),
            valid: vec![255; w * h],
        })
    }
}

/// The tile cache path of one node: its renderer, metrics and pool.
fn node(pool_threads: usize) -> TileCache {
    let metrics = Arc::new(Metrics::new());
    let renderer = Renderer::new(
        RenderLimits {
            max_concurrent: 2,
            map_share: 0.5,
            timeout: Duration::from_mins(1),
            max_source_pixels: u64::MAX,
        },
        EncodeOptions::default(),
        metrics.clone(),
    );
    TileCache::new(
        renderer,
        metrics,
        TileCacheSettings {
            lock_timeout: Duration::from_mins(1),
            metatile_threads: pool_threads,
            encode_queue_len: 64,
            idle_siblings: false,
        },
    )
}

fn grid() -> Arc<Grid> {
    Arc::new(Grid {
        tms: TileMatrixSet::web_mercator_quad(),
        crs: Arc::new(WEB_MERCATOR.clone()),
    })
}

/// A layer of `source` cached in `store` (none: not cached) in 2x2
/// metatiles, leased through `leases` when given.
fn layer(
    source: Arc<Gradient>,
    store: Option<Arc<dyn TileStore>>,
    leases: Option<Leases>,
) -> Arc<Layer> {
    let leases = leases.map(Arc::new);
    Arc::new(Layer {
        name: "gradient".into(),
        title: "gradient".into(),
        description: None,
        keywords: Vec::new(),
        attribution: None,
        source,
        style: build_style(&StyleSpec::default(), 3).unwrap().into(),
        ramp: None,
        grids: vec!["WebMercatorQuad".into()],
        min_zoom: 0,
        max_zoom: 10,
        formats: vec![TileFormat::Png],
        wms_crs: Vec::new(),
        extents: HashMap::new(),
        cache: store.map(|store| LayerCache {
            store_name: "memory".into(),
            store,
            metatile: MetatileSpec {
                cols: 2,
                rows: 2,
                gutter: 0,
            },
            durability: Durability::Buffered,
            freshness: Freshness::default(),
            coordinator: leases.as_ref().map(|l| l.coordinator.clone()),
            leases: leases.clone(),
        }),
        cache_key: "gradient".into(),
        fingerprint: "0".into(),
        kind: "memory",
        passthrough: false,
        max_age_secs: 0,
        dimensions: Vec::new(),
        at_values: HashMap::new(),
        ranges: None,
        style_name: "default".into(),
        other_styles: Vec::new(),
        last_used: None,
        maplibre: None,
        values: Vec::new(),
    })
}

fn memory_store() -> Arc<dyn TileStore> {
    Arc::new(MemoryStore::new(64 << 20, None))
}

fn request(layer: &Arc<Layer>, z: u8, x: u32, y: u32) -> TileRequest {
    TileRequest {
        layer: layer.clone(),
        grid: grid(),
        coord: TileMatrixSet::web_mercator_quad()
            .tile(u32::from(z), u64::from(x), u64::from(y))
            .unwrap(),
        format: TileFormat::Png,
    }
}

/// Waits until `store` holds every tile of `keys`, at most 30 s (pool saves
/// happen after the answer).
async fn until_stored(store: &Arc<dyn TileStore>, reqs: &[TileRequest]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let keys: Vec<_> = reqs.iter().map(|r| r.key_of(r.coord)).collect();
        if store.all_exist(&keys).unwrap() {
            return;
        }
        assert!(Instant::now() < deadline, "the siblings were never stored");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn metatile_of(layer: &Arc<Layer>) -> [TileRequest; 4] {
    [
        request(layer, 2, 0, 0),
        request(layer, 2, 1, 0),
        request(layer, 2, 0, 1),
        request(layer, 2, 1, 1),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_miss_renders_its_metatile_once_and_its_siblings_are_hits() {
    for threads in [0, 2] {
        let (source, store) = (Arc::new(Gradient::new()), memory_store());
        let layer = layer(source.clone(), Some(store.clone()), None);
        let cache = Arc::new(node(threads));
        let tiles = metatile_of(&layer);
        // Every tile of one metatile asked for at once, twice over.
        let mut asked = Vec::new();
        for req in tiles.iter().chain(tiles.iter()) {
            let (cache, req) = (cache.clone(), req.clone());
            asked.push(tokio::spawn(async move { cache.get(&req).await }));
        }
        let mut bytes = HashMap::new();
        for (i, a) in asked.into_iter().enumerate() {
            let tile = a.await.unwrap().unwrap();
            assert!(tile.bytes.starts_with(b"\x89PNG"));
            let first = bytes.entry(i % 4).or_insert_with(|| tile.bytes.clone());
            assert_eq!(*first, tile.bytes, "one tile, two answers");
        }
        assert_eq!(
            source.reads.load(Ordering::SeqCst),
            1,
            "pool threads {threads}"
        );
        assert_ne!(bytes[&0], bytes[&1], "siblings are different tiles");
        until_stored(&store, &tiles).await;
        for req in &tiles {
            let tile = cache.get(req).await.unwrap();
            assert_eq!(tile.status, CacheStatus::Hit);
            assert_eq!(
                tile.bytes,
                bytes[&(tiles.iter().position(|t| t.coord == req.coord).unwrap())]
            );
        }
        assert_eq!(source.reads.load(Ordering::SeqCst), 1);
        // A pool job drops its tile's lock just after storing the tile.
        let deadline = Instant::now() + Duration::from_secs(30);
        while cache.locks_in_use() != (0, 0) {
            assert!(
                Instant::now() < deadline,
                "locks held: {:?}",
                cache.locks_in_use()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seed_stores_a_metatile_and_skips_it_the_next_time() {
    let (source, store) = (Arc::new(Gradient::new()), memory_store());
    let layer = layer(source.clone(), Some(store.clone()), None);
    let cache = node(0);
    let grid = grid();
    let meta = Metatile::containing(
        &grid.tms,
        grid.tms.tile(3, 4, 4).unwrap(),
        layer.cache.as_ref().unwrap().metatile,
    );
    let slots = Semaphore::new(1);
    let seed = |force, locking| {
        seed_metatile(
            &cache,
            &layer,
            &grid,
            TileFormat::Png,
            meta,
            force,
            locking,
            &slots,
        )
    };
    let SeedStep::Rendered(unstored) = seed(false, Locking::Try).await.unwrap() else {
        panic!("an empty cache was not rendered");
    };
    // Under its locks until stored: a request waits rather than renders,
    // and a seed that may not wait finds it busy, holding nothing.
    assert_eq!(cache.locks_in_use().1, 4);
    assert!(matches!(
        seed(true, Locking::Try).await.unwrap(),
        SeedStep::Busy
    ));
    assert_eq!(cache.locks_in_use().1, 4);
    assert_eq!(unstored.store().await.unwrap(), 4);
    assert_eq!(cache.locks_in_use(), (0, 0));
    let reqs: Vec<TileRequest> = meta
        .tiles(&grid.tms)
        .map(|c| request(&layer, c.z(), c.x(), c.y()))
        .collect();
    until_stored(&store, &reqs).await;
    assert!(matches!(
        seed(false, Locking::Wait).await.unwrap(),
        SeedStep::Skipped
    ));
    assert_eq!(source.reads.load(Ordering::SeqCst), 1);
    // Forced: rendered again whatever is stored.
    let SeedStep::Rendered(again) = seed(true, Locking::Wait).await.unwrap() else {
        panic!("a forced seed skipped");
    };
    again.store().await.unwrap();
    assert_eq!(source.reads.load(Ordering::SeqCst), 2);
    // A layer without a cache cannot be seeded.
    let uncached = self::layer(source, None, None);
    let err = seed_metatile(
        &cache,
        &uncached,
        &grid,
        TileFormat::Png,
        meta,
        false,
        Locking::Wait,
        &slots,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, TileError::NotCached(_)), "{err}");
}

fn coordinator() -> Arc<Coordinator> {
    Arc::new(Coordinator::on_bucket(
        "shared",
        ObjectLocation {
            store: Arc::new(InMemory::new()),
            prefix: Path::from("tiles"),
            conditional_put: true,
        },
    ))
}

fn leases(coordinator: &Arc<Coordinator>, node: &str, wait: Duration) -> Leases {
    Leases {
        coordinator: coordinator.clone(),
        node: node.into(),
        ttl: Duration::from_secs(30),
        wait,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_leases_a_node_renders_once_and_releases_its_lease() {
    let (source, store, shared) = (Arc::new(Gradient::new()), memory_store(), coordinator());
    let layer = layer(
        source.clone(),
        Some(store.clone()),
        Some(leases(&shared, "a", Duration::from_secs(10))),
    );
    let cache = node(0);
    let req = request(&layer, 2, 0, 0);
    let tile = cache.get(&req).await.unwrap();
    assert_eq!(tile.status, CacheStatus::Miss);
    assert_eq!(source.reads.load(Ordering::SeqCst), 1);
    // The lease is deleted once every tile is stored: another node wins it.
    let meta = Metatile::containing(
        &req.grid.tms,
        req.coord,
        layer.cache.as_ref().unwrap().metatile,
    );
    let path = shared.lease_path("gradient", "WebMercatorQuad", TileFormat::Png, &meta.range);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match shared
            .acquire(&path, "b", Duration::from_secs(30))
            .await
            .unwrap()
        {
            Acquired::Won(held) => {
                shared.release(held).await.unwrap();
                break;
            }
            other => assert!(Instant::now() < deadline, "lease never released: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The lease of `req`'s metatile, taken by `node` in `shared` (as if that
/// node were rendering it).
async fn hold_lease(shared: &Coordinator, req: &TileRequest, node: &str) -> HeldLease {
    let spec = req.layer.cache.as_ref().unwrap().metatile;
    let meta = Metatile::containing(&req.grid.tms, req.coord, spec);
    let path = shared.lease_path("gradient", "WebMercatorQuad", TileFormat::Png, &meta.range);
    match shared
        .acquire(&path, node, Duration::from_secs(30))
        .await
        .unwrap()
    {
        Acquired::Won(held) => held,
        other => panic!("the lease was held: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_loses_the_lease_serves_the_winners_tiles_without_rendering() {
    let shared = coordinator();
    let store = memory_store();
    // Node a holds the lease of the metatile (as if it were rendering).
    let a_source = Arc::new(Gradient::new());
    let a = layer(
        a_source.clone(),
        Some(store.clone()),
        Some(leases(&shared, "a", Duration::from_secs(10))),
    );
    let req_a = request(&a, 2, 1, 1);
    let held = hold_lease(&shared, &req_a, "a").await;
    // Node b asks meanwhile; a stores the tile, then releases.
    let b_source = Arc::new(Gradient::new());
    let b = layer(
        b_source.clone(),
        Some(store.clone()),
        Some(leases(&shared, "b", Duration::from_secs(20))),
    );
    let b_cache = Arc::new(node(0));
    let asked = {
        let (b_cache, req) = (b_cache.clone(), request(&b, 2, 1, 1));
        tokio::spawn(async move { b_cache.get(&req).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let made = bytes::Bytes::from_static(b"\x89PNG made by node a");
    store
        .put(
            &req_a.key_of(req_a.coord),
            made.clone(),
            Durability::Buffered,
        )
        .unwrap();
    let tile = asked.await.unwrap().unwrap();
    shared.release(held).await.unwrap();
    assert_eq!(tile.bytes, made);
    assert_eq!(tile.status, CacheStatus::Hit);
    assert_eq!(b_source.reads.load(Ordering::SeqCst), 0, "node b rendered");

    // A lease held and never fulfilled: b gives up after its wait.
    let c = layer(
        Arc::new(Gradient::new()),
        Some(memory_store()),
        Some(leases(&shared, "c", Duration::from_millis(300))),
    );
    let req_c = request(&c, 2, 0, 0);
    let held = hold_lease(&shared, &req_c, "a").await;
    let err = node(0).get(&req_c).await.unwrap_err();
    assert!(
        matches!(err, TileError::LeaseWait { ref holder, .. } if holder == "a"),
        "{err}"
    );
    shared.release(held).await.unwrap();
}
