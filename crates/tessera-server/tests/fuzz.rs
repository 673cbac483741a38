//! Property-based fuzzing of the request parsers (tile paths, KVP, GetMap,
//! WMTS REST and KVP) and of the config loader: whatever arrives, no panic,
//! no 500, and every 503 says when to come back.
//!
//! The cases are generated from the grammar of each input with mutations
//! (proptest), seeded by a corpus of inputs that once broke something. The
//! number of cases per property is bounded for CI; `TESSERA_FUZZ_CASES`
//! raises it for a longer run.

#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

use std::sync::OnceLock;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, TestRunner};
use tessera_server::{Config, Service, demo, http};
use tower::ServiceExt;

fn cases() -> u32 {
    std::env::var("TESSERA_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400)
}

fn app() -> Router {
    static APP: OnceLock<Router> = OnceLock::new();
    APP.get_or_init(|| {
        let mut config = demo::demo_config().unwrap();
        // Small renders keep the run short; the parsers see everything.
        config.limits.wms_max_width = 512;
        config.limits.wms_max_height = 512;
        http::router(http::AppState::new(Service::serving(config).unwrap()))
    })
    .clone()
}

/// Sends `uri` and checks the answer is not a server error (a 503 must say
/// when to retry). A URI that is not even a valid URI is skipped.
fn check(runtime: &tokio::runtime::Runtime, uri: &str) -> Result<(), TestCaseError> {
    let Ok(request) = Request::get(uri)
        .header(header::HOST, "tiles.example")
        .body(Body::empty())
    else {
        return Ok(());
    };
    let response = runtime.block_on(app().oneshot(request)).unwrap();
    let status = response.status();
    prop_assert!(
        !status.is_server_error()
            || (status == StatusCode::SERVICE_UNAVAILABLE
                && response.headers().contains_key(header::RETRY_AFTER)),
        "{uri} answered {status}"
    );
    Ok(())
}

/// Text a client might send in one URL component: numbers, names, and the
/// characters that break parsers.
fn component() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u64..70).prop_map(|n| n.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        Just("relief".to_string()),
        Just("elevation".to_string()),
        Just("WebMercatorQuad".to_string()),
        Just("WorldCRS84Quad".to_string()),
        Just(String::new()),
        "[a-zA-Z0-9_.%-]{0,12}",
        "(-?[0-9]{1,25}(\\.[0-9]{0,5})?(e-?[0-9]{1,3})?)",
        Just("%00".to_string()),
        Just("%2e%2e".to_string()),
        Just("NaN".to_string()),
        Just("inf".to_string()),
    ]
}

fn extension() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("png".to_string()),
        Just("jpg".to_string()),
        Just("webp".to_string()),
        Just("PNG".to_string()),
        "[a-z]{0,5}",
    ]
}

fn tile_path() -> impl Strategy<Value = String> {
    (
        prop_oneof![Just("tiles"), Just("tms/1.0.0")],
        component(),
        component(),
        component(),
        component(),
        component(),
        extension(),
    )
        .prop_map(|(kind, layer, grid, z, x, y, ext)| {
            format!("/{kind}/{layer}/{grid}/{z}/{x}/{y}.{ext}")
        })
}

fn wmts_rest_path() -> impl Strategy<Value = String> {
    (
        component(),
        prop_oneof![Just("default".to_string()), component()],
        component(),
        component(),
        component(),
        component(),
        extension(),
    )
        .prop_map(|(layer, style, set, matrix, row, col, ext)| {
            format!("/wmts/1.0.0/{layer}/{style}/{set}/{matrix}/{row}/{col}.{ext}")
        })
}

/// A KVP query with the parameters of WMS GetMap and WMTS GetTile, each
/// present or not, with plausible or hostile values.
fn kvp_query(service: &'static str) -> impl Strategy<Value = String> {
    let value = prop_oneof![
        component(),
        Just("EPSG:4326".to_string()),
        Just("EPSG:3857".to_string()),
        Just("EPSG:5773".to_string()),
        Just("CRS:84".to_string()),
        Just("image/png".to_string()),
        Just("image/jpeg; mode=8bit".to_string()),
        Just("-1e15,-1e15,1e15,1e15".to_string()),
        Just("-180,-90,180,90".to_string()),
        Just("5,45,7,50".to_string()),
        Just("1.1.1".to_string()),
        Just("1.3.0".to_string()),
        Just("TRUE".to_string()),
        Just("0xFF00FF".to_string()),
        (1u32..600).prop_map(|n| n.to_string()),
    ];
    const NAMES: [&str; 18] = [
        "REQUEST",
        "VERSION",
        "LAYERS",
        "STYLES",
        "CRS",
        "SRS",
        "BBOX",
        "WIDTH",
        "HEIGHT",
        "FORMAT",
        "TRANSPARENT",
        "BGCOLOR",
        "LAYER",
        "STYLE",
        "TILEMATRIXSET",
        "TILEMATRIX",
        "TILEROW",
        "TILECOL",
    ];
    let requests = prop_oneof![
        Just("GetMap".to_string()),
        Just("GetCapabilities".to_string()),
        Just("GetTile".to_string()),
        component(),
    ];
    (
        requests,
        proptest::collection::vec((proptest::sample::select(&NAMES[..]), value), 0..12),
    )
        .prop_map(move |(request, params)| {
            let mut query = format!("SERVICE={service}&REQUEST={request}");
            for (name, value) in params {
                query.push('&');
                query.push_str(name);
                query.push('=');
                query.extend(form_urlencoded::byte_serialize(value.as_bytes()));
            }
            query
        })
}

fn run(strategy: impl Strategy<Value = String>, corpus: &[&str]) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    for uri in corpus {
        check(&runtime, uri).unwrap();
    }
    let mut runner = TestRunner::new(RunnerConfig {
        cases: cases(),
        failure_persistence: None,
        ..RunnerConfig::default()
    });
    runner.run(&strategy, |uri| check(&runtime, &uri)).unwrap();
}

#[test]
fn tile_paths_never_get_a_server_error() {
    run(
        tile_path(),
        &[
            "/tiles/relief/WebMercatorQuad/0/0/0.png",
            "/tiles/relief/WebMercatorQuad/99999999999999999999/0/0.png",
            "/tms/1.0.0/relief/WebMercatorQuad/3/-1/2.png",
            "/tiles/relief/WebMercatorQuad/3/1/2",
        ],
    );
}

#[test]
fn wmts_requests_never_get_a_server_error() {
    run(
        prop_oneof![
            wmts_rest_path(),
            kvp_query("WMTS").prop_map(|q| format!("/wmts?{q}"))
        ],
        &[
            "/wmts/1.0.0/relief/default/WebMercatorQuad/2/2/1.png",
            "/wmts?SERVICE=WMTS&REQUEST=GetTile&TILEMATRIX=99",
        ],
    );
}

#[test]
fn wms_requests_never_get_a_server_error() {
    run(
        kvp_query("WMS").prop_map(|q| format!("/wms?{q}")),
        &[
            "/wms?SERVICE=WMS&REQUEST=GetMap&VERSION=1.3.0&LAYERS=relief&STYLES=&CRS=EPSG:5773&BBOX=0,0,1,1&WIDTH=8&HEIGHT=8&FORMAT=image/png",
            "/wms?SERVICE=WMS&REQUEST=GetMap&VERSION=1.3.0&LAYERS=relief&STYLES=&CRS=EPSG:3857&BBOX=-1e15,-1e15,1e15,1e15&WIDTH=64&HEIGHT=64&FORMAT=image/png",
            "/wms?SERVICE=WMS&REQUEST=GetMap&VERSION=1.1.1&LAYERS=relief&SRS=EPSG:4326&BBOX=1,1,1,1&WIDTH=1&HEIGHT=1&FORMAT=image/png",
        ],
    );
}

/// A valid config, mutated: characters inserted, removed or replaced at
/// random places.
fn mutated_config() -> impl Strategy<Value = String> {
    const BASE: &str = "server:\n  title: t\n  render_timeout_secs: 30\ncache: { lock_timeout_secs: 5 }\nstores:\n  disk: { type: file, path: /tmp/x, memory: 64MiB }\nlayers:\n  - name: a\n    source: { path: /nonexistent/x.tif }\n    cache: { store: disk, metatile: [4, 4] }\n    max_zoom: 8\n";
    proptest::collection::vec(
        (
            0..BASE.len(),
            prop_oneof![
                Just(String::new()),
                "[ -~]{1,4}",
                Just("${X}".to_string()),
                Just("$${".to_string()),
                Just("\n  ".to_string()),
                Just("1e400".to_string()),
                Just("-1".to_string()),
                Just("\u{0}".to_string()),
            ],
            0usize..3,
        ),
        1..4,
    )
    .prop_map(|edits| {
        let mut text = BASE.to_string();
        for (at, insert, remove) in edits {
            let at = at.min(text.len());
            let at = (0..=at)
                .rev()
                .find(|i| text.is_char_boundary(*i))
                .unwrap_or(0);
            let end = (at + remove).min(text.len());
            let end = (end..=text.len())
                .find(|i| text.is_char_boundary(*i))
                .unwrap_or(text.len());
            text.replace_range(at..end, &insert);
        }
        text
    })
}

#[test]
fn the_config_loader_never_panics() {
    let mut runner = TestRunner::new(RunnerConfig {
        cases: cases() * 4,
        failure_persistence: None,
        ..RunnerConfig::default()
    });
    runner
        .run(&mutated_config(), |text| {
            // Ok or a clear error; a panic fails the property.
            let _ = Config::from_yaml(&text, |name| (name == "X").then(|| "1".to_string()));
            Ok(())
        })
        .unwrap();
}
