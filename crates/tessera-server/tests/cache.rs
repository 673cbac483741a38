//! The cached tile path against the real GDAL render of the demo relief:
//! one render per metatile under any concurrency, no deadlock under a
//! saturated pool, timeouts instead of hangs, and the HTTP cache headers.

#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::http::{Request, StatusCode, header};
use tessera_image::Raster;
use tessera_server::config::LayerCacheConfig;
use tessera_server::http::AppState;
use tessera_server::{Config, LayerSelection, Mode, Service, demo, http};
use tessera_source::{Source, SourceError, SourceInfo, WindowRequest};
use tessera_store::{FileLayout, StoreSpec};
use tower::ServiceExt;

/// Wraps the real source: counts reads, can slow them down or hold them
/// until released.
#[derive(Debug)]
struct Probe {
    inner: Arc<dyn Source>,
    reads: AtomicUsize,
    delay: Duration,
    gate: Arc<(Mutex<bool>, Condvar)>,
}

impl Probe {
    fn open_gate(&self) {
        *self.gate.0.lock().unwrap() = true;
        self.gate.1.notify_all();
    }
}

/// Opens the probe's gate when dropped, so that a failing test ends
/// (the runtime waits for blocked reads) instead of hanging.
struct OpenOnDrop(Arc<Probe>);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.open_gate();
    }
}

impl Source for Probe {
    fn info(&self) -> &SourceInfo {
        self.inner.info()
    }

    fn read(&self, request: &WindowRequest<'_>) -> Result<Raster, SourceError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(self.delay);
        let (open, cv) = &*self.gate;
        let mut open = open.lock().unwrap();
        while !*open {
            open = cv.wait(open).unwrap();
        }
        drop(open);
        self.inner.read(request)
    }
}

struct Setup {
    app: Router,
    state: AppState,
    probe: Arc<Probe>,
    dir: tempfile::TempDir,
}

impl Drop for Setup {
    /// Waits (at most a minute) for the pool to save the last metatile's
    /// siblings, which hold their tile locks until stored, so that none is
    /// written after the store's directory is removed.
    fn drop(&mut self) {
        let deadline = Instant::now() + Duration::from_mins(1);
        while self.state.service().tiles.locks_in_use() != (0, 0) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// The demo relief layer cached in a file store (no memory LRU, so every
/// hit really reads the disk), with `edit` applied to the configuration.
fn setup(delay: Duration, gate_open: bool, edit: impl FnOnce(&mut Config)) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let mut config = demo::demo_config().unwrap();
    config.stores.insert(
        "disk".into(),
        spec(serde_json::json!({"type": "file", "path": dir.path(), "layout": "xyz", "memory": 0})),
    );
    for layer in &mut config.layers {
        layer.cache = LayerCacheConfig {
            store: "disk".into(),
            max_age_secs: 600,
            ..LayerCacheConfig::default()
        };
    }
    edit(&mut config);
    let probe_slot: Arc<Mutex<Option<Arc<Probe>>>> = Arc::default();
    let slot = probe_slot.clone();
    let wrap = move |name: &str, inner: Arc<dyn Source>| -> Arc<dyn Source> {
        if name != "relief" {
            return inner;
        }
        let probe = Arc::new(Probe {
            inner,
            reads: AtomicUsize::new(0),
            delay,
            gate: Arc::new((Mutex::new(gate_open), Condvar::new())),
        });
        *slot.lock().unwrap() = Some(probe.clone());
        probe
    };
    let service = Service::open(
        config,
        Mode::Serving,
        LayerSelection::All,
        &(Arc::new(wrap) as Arc<tessera_server::assemble::WrapSource>),
    )
    .unwrap();
    let state = AppState::new(service);
    let probe = probe_slot.lock().unwrap().take().unwrap();
    Setup {
        app: http::router(state.clone()),
        state,
        probe,
        dir,
    }
}

fn spec(json: serde_json::Value) -> StoreSpec {
    serde_json::from_value(json).unwrap()
}

/// The first body answered for each tile `(x, y)`.
type TileBodies = HashMap<(u32, u32), Vec<u8>>;

struct Reply {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: Vec<u8>,
}

async fn fetch(app: &Router, uri: &str, if_none_match: Option<&str>) -> Reply {
    let mut req = Request::get(uri);
    if let Some(tag) = if_none_match {
        req = req.header(header::IF_NONE_MATCH, tag);
    }
    let response = app
        .clone()
        .oneshot(req.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let body = to_bytes(response.into_body(), 16 << 20)
        .await
        .unwrap()
        .to_vec();
    Reply {
        status,
        headers,
        body,
    }
}

fn header_of<'a>(r: &'a Reply, name: &str) -> &'a str {
    r.headers.get(name).map_or("", |v| v.to_str().unwrap())
}

fn png_size(bytes: &[u8]) -> (u32, u32) {
    let reader = png::Decoder::new(std::io::Cursor::new(bytes))
        .read_info()
        .unwrap();
    (reader.info().width, reader.info().height)
}

/// Waits until every background save has released its lock.
async fn locks_drain(state: &AppState) -> (usize, usize) {
    let deadline = Instant::now() + Duration::from_mins(1);
    loop {
        let held = state.service().tiles.locks_in_use();
        if held == (0, 0) || Instant::now() > deadline {
            return held;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_concurrent_requests_for_one_metatile_render_it_once() {
    let s = setup(Duration::from_millis(300), true, |_| {});
    let tiles: Vec<(u32, u32)> = (4..8).flat_map(|y| (4..8).map(move |x| (x, y))).collect();
    let tasks: Vec<_> = (0..1000)
        .map(|i| {
            let app = s.app.clone();
            let (x, y) = tiles[i % tiles.len()];
            tokio::spawn(async move {
                let uri = format!("/tiles/relief/WebMercatorQuad/4/{x}/{y}.png");
                ((x, y), fetch(&app, &uri, None).await)
            })
        })
        .collect();
    let mut by_tile: HashMap<(u32, u32), Vec<Reply>> = HashMap::new();
    for t in tasks {
        let (tile, reply) = t.await.unwrap();
        by_tile.entry(tile).or_default().push(reply);
    }

    assert_eq!(
        s.state.service().metrics.metatile_renders("relief"),
        1,
        "exactly one render"
    );
    assert_eq!(
        s.probe.reads.load(Ordering::SeqCst),
        1,
        "exactly one source read"
    );
    let mut misses = 0;
    for ((x, y), replies) in &by_tile {
        let stored = std::fs::read(
            s.dir
                .path()
                .join(format!("relief/WebMercatorQuad/4/{x}/{y}.png")),
        )
        .unwrap();
        for r in replies {
            assert_eq!(r.status, StatusCode::OK);
            assert_eq!(png_size(&r.body), (256, 256));
            assert_eq!(r.body, stored, "every response is the stored tile {x}/{y}");
            if header_of(r, "x-cache") == "MISS" {
                misses += 1;
            }
        }
    }
    assert_eq!(misses, 1, "only the request that rendered is a miss");
    assert_eq!(locks_drain(&s.state).await, (0, 0), "lock table empty");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn random_load_on_a_saturated_pool_never_deadlocks_or_renders_twice() {
    let secs: u64 = std::env::var("TESSERA_STRESS_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    // One encode thread with a one-job queue: the pool is saturated by the
    // first metatile and the request path does most sibling saves itself.
    // The timeouts only catch hangs: on a busy machine a render may still
    // pass one, and its client then gets 503 with Retry-After.
    let s = setup(Duration::ZERO, true, |c| {
        c.cache.metatile_threads = 1;
        c.cache.encode_queue_len = 1;
        c.server.render_timeout_secs = 300.0;
        c.cache.lock_timeout_secs = 300.0;
    });
    let clients = 300;
    let deadline = Instant::now() + Duration::from_secs(secs);
    let touched = Arc::new(Mutex::new(HashSet::new()));
    let requests = Arc::new(AtomicUsize::new(0));
    let unavailable = Arc::new(AtomicUsize::new(0));
    let bodies: Arc<Mutex<TileBodies>> = Arc::default();
    let tasks: Vec<_> = (0..clients)
        .map(|c: u64| {
            let (app, touched, requests) = (s.app.clone(), touched.clone(), requests.clone());
            let (unavailable, bodies) = (unavailable.clone(), bodies.clone());
            tokio::spawn(async move {
                let mut rng =
                    0x9E37_79B9_7F4A_7C15_u64 ^ (c + 1).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                while Instant::now() < deadline {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    // 10 x 10 metatiles of 4 x 4 tiles at zoom 6.
                    let x = 16 + (rng % 40) as u32;
                    let y = 8 + ((rng >> 20) % 40) as u32;
                    touched.lock().unwrap().insert((x / 4, y / 4));
                    let r = fetch(
                        &app,
                        &format!("/tiles/relief/WebMercatorQuad/6/{x}/{y}.png"),
                        None,
                    )
                    .await;
                    match r.status {
                        StatusCode::OK => {
                            // Every answer for a tile is the same bytes.
                            let mut bodies = bodies.lock().unwrap();
                            let first = bodies.entry((x, y)).or_insert_with(|| r.body.clone());
                            assert!(*first == r.body, "tile 6/{x}/{y} changed");
                        }
                        StatusCode::SERVICE_UNAVAILABLE => {
                            assert!(
                                r.headers.contains_key(header::RETRY_AFTER),
                                "503 without Retry-After"
                            );
                            unavailable.fetch_add(1, Ordering::Relaxed);
                        }
                        other => panic!(
                            "tile 6/{x}/{y}: {other} {:?}",
                            String::from_utf8_lossy(&r.body)
                        ),
                    }
                    requests.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let touched = touched.lock().unwrap().len() as u64;
    assert!(
        touched > 50,
        "the load spread over the metatiles ({touched})"
    );
    // Each metatile is rendered once; only a render that passed its timeout
    // (its client got 503, nothing was stored) may be done again.
    let renders = s.state.service().metrics.metatile_renders("relief");
    let unavailable = unavailable.load(Ordering::Relaxed) as u64;
    assert!(
        (touched..=touched + unavailable).contains(&renders),
        "{renders} renders for {touched} metatiles touched and {unavailable} timed-out answers"
    );
    assert_eq!(locks_drain(&s.state).await, (0, 0), "lock table empty");
    assert!(requests.load(Ordering::Relaxed) >= clients as usize);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_render_that_never_finishes_times_out_every_waiter_and_frees_the_locks() {
    let s = setup(Duration::ZERO, false, |c| {
        c.server.render_timeout_secs = 1.0;
        c.cache.lock_timeout_secs = 2.0;
    });
    let _open = OpenOnDrop(s.probe.clone());
    let tasks: Vec<_> = (0..40)
        .map(|i| {
            let app = s.app.clone();
            let (x, y) = (8 + i % 4, 8 + (i / 4) % 4);
            tokio::spawn(async move {
                fetch(
                    &app,
                    &format!("/tiles/relief/WebMercatorQuad/5/{x}/{y}.png"),
                    None,
                )
                .await
            })
        })
        .collect();
    for t in tasks {
        let r = t.await.unwrap();
        assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            !header_of(&r, "retry-after").is_empty(),
            "503 says when to retry"
        );
    }
    assert_eq!(
        s.state.service().tiles.locks_in_use(),
        (0, 0),
        "lock table empty"
    );
    let text = s.state.service().metrics.render();
    assert!(
        text.contains("tessera_tile_requests_total{layer=\"relief\",result=\"error\"} 40"),
        "{text}"
    );
    s.probe.open_gate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etag_304_cache_control_and_cache_status_headers() {
    let s = setup(Duration::ZERO, true, |_| {});
    let uri = "/tiles/relief/WebMercatorQuad/2/1/1.png";
    let first = fetch(&s.app, uri, None).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(header_of(&first, "x-cache"), "MISS");
    assert_eq!(header_of(&first, "cache-control"), "public, max-age=600");
    let etag = header_of(&first, "etag").to_string();
    assert!(
        etag.starts_with('"') && etag.len() > 10,
        "strong ETag: {etag}"
    );
    locks_drain(&s.state).await;

    let second = fetch(&s.app, uri, None).await;
    assert_eq!(header_of(&second, "x-cache"), "HIT");
    assert_eq!(header_of(&second, "etag"), etag, "same bytes, same ETag");
    assert_eq!(second.body, first.body);

    let not_modified = fetch(&s.app, uri, Some(&format!("\"other\", {etag}"))).await;
    assert_eq!(not_modified.status, StatusCode::NOT_MODIFIED);
    assert!(not_modified.body.is_empty());
    assert_eq!(header_of(&not_modified, "etag"), etag);
    let changed = fetch(&s.app, uri, Some("\"stale\"")).await;
    assert_eq!(changed.status, StatusCode::OK);

    // The sibling was saved by the pool: a hit with its own ETag.
    let sibling = fetch(&s.app, "/tiles/relief/WebMercatorQuad/2/0/1.png", None).await;
    assert_eq!(header_of(&sibling, "x-cache"), "HIT");
    assert_ne!(header_of(&sibling, "etag"), etag);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_store_type_caches_metatiles_and_serves_hits() {
    for kind in ["journal", "mbtiles", "memory"] {
        let store_dir = tempfile::tempdir().unwrap();
        let path = store_dir.path().display().to_string();
        let s = setup(Duration::ZERO, true, |c| {
            let store = match kind {
                "journal" => spec(serde_json::json!({
                    "type": "journal", "path": path, "segment": "8MiB", "memory": 0
                })),
                "mbtiles" => spec(serde_json::json!({
                    "type": "mbtiles", "path": path, "synchronous": "normal", "memory": 0
                })),
                _ => spec(serde_json::json!({"type": "memory", "memory": "16MiB"})),
            };
            c.stores.insert("disk".into(), store);
        });
        let first = fetch(&s.app, "/tiles/relief/WebMercatorQuad/4/9/5.png", None).await;
        assert_eq!(first.status, StatusCode::OK, "{kind}");
        assert_eq!(header_of(&first, "x-cache"), "MISS", "{kind}");
        assert_eq!(locks_drain(&s.state).await, (0, 0));
        let again = fetch(&s.app, "/tiles/relief/WebMercatorQuad/4/9/5.png", None).await;
        assert_eq!(header_of(&again, "x-cache"), "HIT", "{kind}");
        assert_eq!(again.body, first.body, "{kind}");
        let sibling = fetch(&s.app, "/tiles/relief/WebMercatorQuad/4/10/6.png", None).await;
        assert_eq!(
            header_of(&sibling, "x-cache"),
            "HIT",
            "{kind}: the sibling was stored"
        );
        assert_eq!(
            s.state.service().metrics.metatile_renders("relief"),
            1,
            "{kind}"
        );
        let text = s.state.service().metrics.render();
        // A memory-only store tells a miss without a `get`: its timed
        // operations are the saves.
        let op = if kind == "memory" { "put" } else { "get" };
        assert!(
            text.contains(&format!("store=\"{kind}\",op=\"{op}\"")),
            "{kind}: {text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_served_with_their_stable_names() {
    let s = setup(Duration::ZERO, true, |_| {});
    fetch(&s.app, "/tiles/relief/WebMercatorQuad/3/1/1.png", None).await;
    locks_drain(&s.state).await;
    fetch(&s.app, "/tiles/relief/WebMercatorQuad/3/1/2.png", None).await;
    fetch(&s.app, "/tiles/relief/WebMercatorQuad/9/1/2.png", None).await;
    let r = fetch(&s.app, "/metrics", None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(header_of(&r, "content-type").starts_with("application/openmetrics-text"));
    let text = String::from_utf8(r.body).unwrap();
    for needle in [
        "tessera_tile_requests_total{layer=\"relief\",result=\"miss\"} 1",
        "tessera_tile_requests_total{layer=\"relief\",result=\"hit\"} 1",
        "tessera_metatile_renders_total{layer=\"relief\"} 1",
        "tessera_tile_encodes_total{layer=\"relief\"} 16",
        // Misses of a file store are told by opening the file inline (no
        // `get`); its saves are timed.
        "tessera_store_op_seconds_count{store=\"file\",op=\"put\"}",
        "tessera_store_op_seconds_bucket{",
        "tessera_lock_wait_seconds_count{kind=\"metatile\"}",
        "tessera_lock_wait_seconds_count{kind=\"tile\"}",
        "tessera_encode_queue_depth 0",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_pool_every_tile_is_stored_before_the_response() {
    let s = setup(Duration::ZERO, true, |c| c.cache.metatile_threads = 0);
    let r = fetch(&s.app, "/tiles/relief/WebMercatorQuad/3/5/2.png", None).await;
    assert_eq!(r.status, StatusCode::OK);
    // No wait: the response came after the whole metatile was stored.
    assert_eq!(s.state.service().tiles.locks_in_use(), (0, 0));
    for y in 0..4 {
        for x in 4..8 {
            let p = s
                .dir
                .path()
                .join(format!("relief/WebMercatorQuad/3/{x}/{y}.png"));
            assert!(p.is_file(), "{} stored", p.display());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiles_cut_from_a_metatile_match_tiles_rendered_alone() {
    let cached = setup(Duration::ZERO, true, |_| {});
    let direct = setup(Duration::ZERO, true, |c| {
        for l in &mut c.layers {
            l.cache.store = "none".into();
        }
    });
    for uri in [
        "/tiles/relief/WebMercatorQuad/5/17/11.png",
        "/tiles/relief/WebMercatorQuad/5/18/12.png",
        "/tiles/relief/WorldCRS84Quad/4/20/5.png",
    ] {
        let a = fetch(&cached.app, uri, None).await;
        let b = fetch(&direct.app, uri, None).await;
        assert_eq!(header_of(&b, "x-cache"), "MISS");
        let decode = |bytes: &[u8]| {
            let mut reader = png::Decoder::new(std::io::Cursor::new(bytes.to_vec()))
                .read_info()
                .unwrap();
            let mut buf = vec![0; reader.output_buffer_size().unwrap()];
            reader.next_frame(&mut buf).unwrap();
            buf
        };
        let (pa, pb) = (decode(&a.body), decode(&b.body));
        assert_eq!(pa.len(), pb.len());
        let diff: u64 = pa
            .iter()
            .zip(&pb)
            .map(|(x, y)| u64::from(x.abs_diff(*y)))
            .sum();
        let mean = diff as f64 / pa.len() as f64;
        assert!(
            mean < 2.0,
            "{uri}: metatile cut differs from a lone render by {mean:.2} on average"
        );
    }
}

#[test]
fn the_timed_store_wrapper_passes_the_store_conformance_suite() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = Arc::new(tessera_server::metrics::Metrics::new());
    let file: Arc<dyn tessera_store::TileStore> =
        Arc::new(tessera_store::FileStore::open(dir.path(), FileLayout::Tms).unwrap());
    let timed: Arc<dyn tessera_store::TileStore> = Arc::new(
        tessera_server::metrics::TimedStore::new(file, metrics.clone()),
    );
    tessera_store::conformance::run_all(&timed);
    assert!(
        metrics
            .render()
            .contains("tessera_store_errors_total{store=\"file\",op=\"put\"} 1"),
        "the refused empty tile is counted as a store error"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn wms_maps_hold_only_their_share_of_render_slots_and_tiles_still_render() {
    // Two slots, maps may hold one: four GetMaps stuck in the relief source
    // leave the other slot to tiles.
    let s = setup(Duration::ZERO, false, |c| {
        c.server.max_concurrent_renders = 2;
        c.server.wms_render_share = 0.5;
        c.server.render_timeout_secs = 120.0;
    });
    let _open = OpenOnDrop(s.probe.clone());
    let maps: Vec<_> = (0..4)
        .map(|_| {
            let app = s.app.clone();
            tokio::spawn(async move {
                fetch(
                    &app,
                    "/wms?SERVICE=WMS&VERSION=1.3.0&REQUEST=GetMap&LAYERS=relief&STYLES=&CRS=EPSG:3857\
                     &BBOX=-2000000,-2000000,2000000,2000000&WIDTH=256&HEIGHT=256&FORMAT=image/png",
                    None,
                )
                .await
            })
        })
        .collect();
    // Wait until a map holds its slot (the gate keeps it there).
    let deadline = Instant::now() + Duration::from_mins(1);
    while s.probe.reads.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "no map reached the source");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let ready = fetch(&s.app, "/ready", None).await;
    let text = String::from_utf8(ready.body).unwrap();
    assert!(
        text.contains("renders: 1 of 2 slots busy\n")
            && text.contains("wms maps: 1 of 1 slots busy (saturated)"),
        "{text}"
    );
    // Tiles of other layers render meanwhile, one after another.
    for (x, y) in [(1, 1), (2, 1), (1, 2)] {
        let r = fetch(
            &s.app,
            &format!("/tiles/elevation/WebMercatorQuad/2/{x}/{y}.png"),
            None,
        )
        .await;
        assert_eq!(
            r.status,
            StatusCode::OK,
            "{}",
            String::from_utf8_lossy(&r.body)
        );
    }
    assert_eq!(
        s.probe.reads.load(Ordering::SeqCst),
        1,
        "the other maps wait"
    );
    s.probe.open_gate();
    for m in maps {
        let r = m.await.unwrap();
        assert_eq!(
            r.status,
            StatusCode::OK,
            "{}",
            String::from_utf8_lossy(&r.body)
        );
    }
    assert_eq!(s.probe.reads.load(Ordering::SeqCst), 4);
}

/// The sample's value in /metrics text (0 when absent).
fn sample(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

/// A hit taken the short way (`App::try_fast`) answers what the router
/// answers: status, every header, body, a 304 for its ETag, and the same
/// request metrics; misses, HEAD, escaped paths, vector tiles and CORS by
/// origin list are left to the router.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tile_hits_the_short_way_answer_as_the_router_does() {
    let s = setup(Duration::ZERO, true, |_| {});
    let app = http::App::new(s.state.clone());
    let uri = "/tiles/relief/WebMercatorQuad/3/4/2.png";
    let get = |uri: &str| Request::get(uri).body(Body::empty()).unwrap();
    assert!(
        app.try_fast(&get(uri)).is_none(),
        "a miss goes to the router"
    );
    let miss = fetch(&s.app, uri, None).await;
    assert_eq!(header_of(&miss, "x-cache"), "MISS");
    locks_drain(&s.state).await;

    let routed = fetch(&s.app, uri, None).await;
    let before = s.state.service().metrics.render();
    let fast = app
        .try_fast(&get(uri))
        .expect("a hit in the page cache is taken the short way");
    let after = s.state.service().metrics.render();
    assert_eq!(fast.status(), routed.status);
    let sorted = |h: &axum::http::HeaderMap| {
        let mut all: Vec<(String, String)> = h
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_string()))
            .collect();
        all.sort();
        all
    };
    assert_eq!(
        sorted(fast.headers()),
        sorted(&routed.headers),
        "the same headers"
    );
    assert_eq!(header_of(&routed, "x-cache"), "HIT");
    assert_eq!(header_of(&routed, "access-control-allow-origin"), "*");
    let body = to_bytes(fast.into_body(), 16 << 20).await.unwrap();
    assert_eq!(body.as_ref(), routed.body.as_slice());
    for name in [
        r#"tessera_http_request_seconds_count{kind="tile",status="2xx"}"#,
        r#"tessera_tile_requests_total{layer="relief",result="hit"}"#,
    ] {
        assert!(
            (sample(&after, name) - sample(&before, name) - 1.0).abs() < 1e-9,
            "{name}"
        );
    }

    let etag = header_of(&routed, "etag").to_string();
    let conditional = Request::get(uri)
        .header(header::IF_NONE_MATCH, &etag)
        .body(Body::empty())
        .unwrap();
    let not_modified = app.try_fast(&conditional).unwrap();
    assert_eq!(not_modified.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(not_modified.headers()[header::ETAG], etag.as_str());

    // The same tile as an OGC API tile: the short way too, the same answer.
    let ogc = "/ogcapi/collections/relief/map/tiles/WebMercatorQuad/3/2/4?f=png";
    let routed_ogc = fetch(&s.app, ogc, None).await;
    let fast_ogc = app
        .try_fast(&get(ogc))
        .expect("an OGC API tile hit naming its format is taken the short way");
    assert_eq!(sorted(fast_ogc.headers()), sorted(&routed_ogc.headers));
    assert_eq!(header_of(&routed_ogc, "vary"), "accept");
    assert_eq!(header_of(&routed_ogc, "etag"), etag.as_str());
    let body = to_bytes(fast_ogc.into_body(), 16 << 20).await.unwrap();
    assert_eq!(body.as_ref(), routed.body.as_slice());
    // Without `f` (Accept decides), the router answers.
    assert!(
        app.try_fast(&get(
            "/ogcapi/collections/relief/map/tiles/WebMercatorQuad/3/2/4"
        ))
        .is_none()
    );

    let head = Request::head(uri).body(Body::empty()).unwrap();
    assert!(app.try_fast(&head).is_none());
    assert!(
        app.try_fast(&get("/tiles/relief/WebMercatorQuad/3/4/%32.png"))
            .is_none()
    );
    assert!(
        app.try_fast(&get("/tiles/relief/WebMercatorQuad/3/4/2.png/x"))
            .is_none()
    );
    assert!(
        app.try_fast(&get("/tiles/nope/WebMercatorQuad/3/4/2.png"))
            .is_none()
    );
    // Through App::call, everything still answers.
    let answered = app
        .call(get("/tiles/relief/WebMercatorQuad/3/4/%32.png"))
        .await
        .unwrap();
    assert_eq!(answered.status(), StatusCode::OK);
    assert_eq!(answered.headers()["x-cache"], "HIT");

    // CORS by a list of origins depends on the request: the router answers.
    let listed = setup(Duration::ZERO, true, |c| {
        c.server.cors.origins = vec!["https://maps.example".into()];
    });
    let listed_app = http::App::new(listed.state.clone());
    fetch(&listed.app, uri, None).await;
    locks_drain(&listed.state).await;
    let from_origin = Request::get(uri)
        .header(header::ORIGIN, "https://maps.example")
        .body(Body::empty())
        .unwrap();
    assert!(listed_app.try_fast(&from_origin).is_none());
    let answered = listed_app.call(from_origin).await.unwrap();
    assert_eq!(answered.headers()["x-cache"], "HIT");
    assert_eq!(
        answered.headers()[header::ACCESS_CONTROL_ALLOW_ORIGIN],
        "https://maps.example"
    );
    drop(s);
}

/// The tile files under `root` (the store's staging directory aside).
fn stored_tiles(root: &std::path::Path) -> u64 {
    let mut count = 0;
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            if path.file_name().is_some_and(|n| n == ".staging") {
                continue;
            }
            if entry.file_type().unwrap().is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "png") {
                count += 1;
            }
        }
    }
    count
}

/// Seeding stores one metatile while it renders the next: every metatile
/// is still rendered once, counted only once its tiles are in the store,
/// and no lock outlives the seed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seed_counts_a_metatile_only_once_its_tiles_are_stored() {
    use std::sync::atomic::AtomicBool;
    use tessera_server::plan::{PlanArea, TilePlan};
    use tessera_server::seeding::{self, SeedEnd, SeedOptions};

    let s = setup(Duration::from_millis(5), true, |_| {});
    let plan = TilePlan::new(
        &s.state.service().registry,
        "relief",
        "WebMercatorQuad",
        None,
        0..=4,
        &PlanArea::Extent,
    )
    .unwrap();
    let metatiles = plan.metatiles().count() as u64;
    let root = s.dir.path().to_path_buf();
    let cancel = AtomicBool::new(false);
    let mut reports = 0;
    let end = seeding::run(
        &s.state.service().tiles,
        &plan,
        &SeedOptions::with_concurrency(2),
        &cancel,
        |stats, _| {
            reports += 1;
            let on_disk = stored_tiles(&root);
            assert!(
                on_disk >= stats.tiles_written,
                "{} tiles counted written, {on_disk} in the store",
                stats.tiles_written
            );
        },
    )
    .await;
    let SeedEnd::Complete(stats) = end else {
        panic!("the seed did not complete: {end:?}");
    };
    assert_eq!(reports, metatiles);
    assert_eq!(stats.metatiles_done, metatiles);
    assert_eq!(stats.metatiles_rendered, metatiles);
    assert_eq!(s.probe.reads.load(Ordering::SeqCst) as u64, metatiles);
    assert_eq!(stored_tiles(&root), stats.tiles_written);
    assert_eq!(stats.tiles_written, stats.tiles_done);
    assert_eq!(s.state.service().tiles.locks_in_use(), (0, 0));

    // Run again: every metatile is stored, none is rendered.
    let again = seeding::run(
        &s.state.service().tiles,
        &plan,
        &SeedOptions::with_concurrency(2),
        &cancel,
        |_, _| {},
    )
    .await;
    let SeedEnd::Complete(again) = again else {
        panic!("the second seed did not complete: {again:?}");
    };
    assert_eq!(
        (again.metatiles_done, again.metatiles_rendered),
        (metatiles, 0)
    );
    assert_eq!(s.probe.reads.load(Ordering::SeqCst) as u64, metatiles);
}

/// The demo relief cached in 64-tile packs on a `file://` object store.
fn setup_packs(delay: Duration, packs: &std::path::Path) -> Setup {
    let url = format!("file://{}", packs.display());
    setup(delay, true, |c| {
        c.stores.insert(
            "disk".into(),
            spec(serde_json::json!({"type": "object", "url": url, "pack_tiles": 64, "memory": 0})),
        );
    })
}

/// `put_many` calls the stores have answered so far.
fn puts_of_many(s: &Setup) -> u64 {
    let text = s.state.service().metrics.render();
    text.lines()
        .filter(|l| {
            l.starts_with("tessera_store_op_seconds_count{") && l.contains("op=\"put_many\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// The relief's plan at zooms 0 to 5 (16 packs of 64 tiles at zoom 5).
fn relief_plan(s: &Setup) -> tessera_server::plan::TilePlan {
    use tessera_server::plan::{PlanArea, TilePlan};
    TilePlan::new(
        &s.state.service().registry,
        "relief",
        "WebMercatorQuad",
        None,
        0..=5,
        &PlanArea::Extent,
    )
    .unwrap()
}

/// A seed into packs hands the store each pack's metatiles together: one
/// write per pack, not one per metatile (each growing the pack again),
/// every metatile rendered once and every tile readable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seed_into_packs_writes_each_pack_once() {
    use std::sync::atomic::AtomicBool;
    use tessera_server::seeding::{self, SeedEnd, SeedOptions};

    let packs = tempfile::tempdir().unwrap();
    let s = setup_packs(Duration::ZERO, packs.path());
    let plan = relief_plan(&s);
    let tiles = &s.state.service().tiles;
    let metatiles: Vec<_> = plan.metatiles().collect();
    let groups: HashSet<String> = metatiles
        .iter()
        .map(|m| {
            tiles
                .write_group(&plan.layer, &plan.grid, plan.format, m)
                .expect("packs of 64 tiles group metatiles")
        })
        .collect();
    assert!(
        groups.len() * 2 < metatiles.len(),
        "{} packs for {} metatiles",
        groups.len(),
        metatiles.len()
    );
    let cancel = AtomicBool::new(false);
    let end = seeding::run(
        tiles,
        &plan,
        &SeedOptions::with_concurrency(2),
        &cancel,
        |_, _| {},
    )
    .await;
    let SeedEnd::Complete(stats) = end else {
        panic!("the seed did not complete: {end:?}");
    };
    assert_eq!(stats.metatiles_rendered, metatiles.len() as u64);
    assert_eq!(stats.tiles_written, stats.tiles_done);
    assert_eq!(
        s.probe.reads.load(Ordering::SeqCst),
        metatiles.len(),
        "one render per metatile"
    );
    assert_eq!(puts_of_many(&s), groups.len() as u64, "one write per pack");
    assert_eq!(tiles.locks_in_use(), (0, 0));
    for uri in [
        "/tiles/relief/WebMercatorQuad/5/0/0.png",
        "/tiles/relief/WebMercatorQuad/5/13/9.png",
        "/tiles/relief/WebMercatorQuad/4/15/15.png",
    ] {
        let hit = fetch(&s.app, uri, None).await;
        assert_eq!(hit.status, StatusCode::OK, "{uri}");
        assert_eq!(header_of(&hit, "x-cache"), "HIT", "{uri}");
    }
}

/// Two seeds walking the same packs in different orders, with requests
/// for their tiles meanwhile, never deadlock (each gathers a pack's
/// metatiles under their locks, and a busy lock makes it store what it
/// holds before it waits) and never render a metatile twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeds_gathering_the_same_packs_never_deadlock_or_render_twice() {
    use std::sync::atomic::AtomicBool;
    use tessera_server::plan::Shard;
    use tessera_server::seeding::{self, SeedEnd, SeedOptions};

    let packs = tempfile::tempdir().unwrap();
    let s = setup_packs(Duration::from_millis(3), packs.path());
    let plan = relief_plan(&s);
    // One plan walks blocks of the plan's curve, the other one curve over
    // each whole zoom: the same packs, met in another order.
    let other = plan.clone().sharded(Shard { index: 0, count: 1 });
    let metatiles = plan.metatiles().count();
    let tiles = s.state.service().tiles.clone();
    let cancel = Arc::new(AtomicBool::new(false));
    let run = |plan: tessera_server::plan::TilePlan, threads| {
        let (tiles, cancel) = (tiles.clone(), cancel.clone());
        tokio::spawn(async move {
            let options = SeedOptions::with_concurrency(threads);
            seeding::run(&tiles, &plan, &options, &cancel, |_, _| {}).await
        })
    };
    let (a, b) = (run(plan, 2), run(other, 3));
    let app = s.app.clone();
    let requests = tokio::spawn(async move {
        for i in 0..64u32 {
            let uri = format!(
                "/tiles/relief/WebMercatorQuad/5/{}/{}.png",
                (i * 7) % 32,
                (i * 5) % 32
            );
            let r = fetch(&app, &uri, None).await;
            assert_eq!(r.status, StatusCode::OK, "{uri}");
        }
    });
    let within = Duration::from_mins(5);
    for (name, seed) in [("first", a), ("second", b)] {
        let end = tokio::time::timeout(within, seed)
            .await
            .unwrap_or_else(|_| panic!("the {name} seed did not end within {within:?}: a deadlock"))
            .unwrap();
        assert!(matches!(end, SeedEnd::Complete(_)), "{name}: {end:?}");
    }
    tokio::time::timeout(within, requests)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        s.probe.reads.load(Ordering::SeqCst),
        metatiles,
        "every metatile rendered once"
    );
    assert_eq!(locks_drain(&s.state).await, (0, 0));
}

/// A runtime of its own standing for the main runtime a connection thread
/// hands requests to.
fn handler_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

/// What a connection thread hands to the main runtime (`App::call_with`
/// with a runtime) is answered as the router answers it inline: a
/// document, a miss rendered there, then the hit the short way takes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_handed_to_another_runtime_answer_as_the_router_does() {
    let s = setup(Duration::ZERO, true, |_| {});
    let app = http::App::new(s.state.clone());
    let handlers = handler_runtime();
    let call = |uri: &str| {
        app.call_with(
            Request::get(uri).body(Body::empty()).unwrap(),
            None,
            Some(handlers.handle()),
        )
    };
    let capabilities = "/wmts?SERVICE=WMTS&REQUEST=GetCapabilities";
    let handed = call(capabilities).await.unwrap();
    let inline = fetch(&s.app, capabilities, None).await;
    assert_eq!(handed.status(), StatusCode::OK);
    let body = to_bytes(handed.into_body(), 16 << 20).await.unwrap();
    assert_eq!(body.as_ref(), inline.body.as_slice());

    let tile = "/tiles/relief/WebMercatorQuad/2/1/1.png";
    let miss = call(tile).await.unwrap();
    assert_eq!(miss.status(), StatusCode::OK);
    assert_eq!(miss.headers()["x-cache"], "MISS");
    let rendered = to_bytes(miss.into_body(), 16 << 20).await.unwrap();
    locks_drain(&s.state).await;
    let hit = call(tile).await.unwrap();
    assert_eq!(hit.headers()["x-cache"], "HIT");
    let kept = to_bytes(hit.into_body(), 16 << 20).await.unwrap();
    assert_eq!(kept, rendered);
    assert_eq!(s.probe.reads.load(Ordering::SeqCst), 1, "one render");
    handlers.shutdown_background();
}

/// A request handed to another runtime is aborted there when the
/// connection drops its future, as a handler running on the connection's
/// own runtime would be dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_request_is_aborted_when_its_connection_drops_it() {
    let s = setup(Duration::ZERO, false, |_| {});
    let _open = OpenOnDrop(s.probe.clone());
    let app = http::App::new(s.state.clone());
    let handlers = handler_runtime();
    let request = Request::get("/tiles/relief/WebMercatorQuad/2/1/1.png")
        .body(Body::empty())
        .unwrap();
    let pending = app.call_with(request, None, Some(handlers.handle()));
    // The render waits at the closed gate: the request's task stays alive.
    let waited = tokio::time::timeout(Duration::from_millis(300), pending).await;
    assert!(waited.is_err(), "the render is held by the gate");
    // The timeout dropped the future: its task ends without the render.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while handlers.metrics().num_alive_tasks() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the handed request's task is still alive 10 s after it was dropped"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    handlers.shutdown_background();
}
