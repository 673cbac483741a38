//! The service in its two modes: serving opens everything, batch opens only
//! the layer a command names (and its store), so a broken layer elsewhere
//! in the configuration does not stop it.

#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

use tessera_server::config::LayerConfig;
use tessera_server::plan::{PlanArea, TilePlan};
use tessera_server::{Config, ConfigError, Mode, Service, demo};
use tessera_store::StoreSpec;

/// The demo with every layer cached in a file store `disk`, plus a layer
/// whose source does not exist, cached in a store `other`.
fn config_with_a_broken_layer(dir: &std::path::Path) -> Config {
    let mut config = demo::demo_config().unwrap();
    for (name, sub) in [("disk", "disk"), ("other", "other")] {
        let spec: StoreSpec =
            serde_json::from_value(serde_json::json!({"type": "file", "path": dir.join(sub)}))
                .unwrap();
        config.stores.insert(name.into(), spec);
    }
    for layer in &mut config.layers {
        layer.cache.store = "disk".into();
    }
    let mut broken: LayerConfig = serde_json::from_value(serde_json::json!({
        "name": "broken",
        "source": { "path": "/nonexistent/broken.tif" },
        "cache": { "store": "other" },
    }))
    .unwrap();
    broken.title = Some("a layer whose file is gone".into());
    config.layers.push(broken);
    config
}

/// The plan of relief at zoom 0..1 over its whole extent.
fn relief_plan(service: &Service) -> Result<TilePlan, tessera_server::plan::PlanError> {
    TilePlan::new(
        &service.registry,
        "relief",
        "WebMercatorQuad",
        None,
        0..=1,
        &PlanArea::Extent,
    )
}

#[test]
fn serving_refuses_a_config_with_a_broken_layer_and_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let err = Service::serving(config_with_a_broken_layer(dir.path())).unwrap_err();
    assert!(
        matches!(&err, ConfigError::Source { layer, .. } if layer == "broken"),
        "{err:?}"
    );
}

#[test]
fn batch_mode_opens_only_the_named_layer_and_its_store() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::batch(config_with_a_broken_layer(dir.path()), "relief").unwrap();
    assert_eq!(service.mode, Mode::Batch);
    let names: Vec<String> = service
        .registry
        .layers()
        .iter()
        .map(|l| l.name.clone())
        .collect();
    assert_eq!(names, ["relief"]);
    assert_eq!(service.registry.store_names().collect::<Vec<_>>(), ["disk"]);
    assert!(
        !dir.path().join("other").exists(),
        "the other store is never opened"
    );
    assert!(service.uploads.is_none());
    assert_eq!(relief_plan(&service).unwrap().size().tiles, 5);
    // An unknown layer opens nothing (and the command then says so).
    let other = tempfile::tempdir().unwrap();
    let unknown = Service::batch(config_with_a_broken_layer(other.path()), "typo").unwrap();
    assert!(unknown.registry.layers().is_empty());
    assert_eq!(unknown.registry.store_names().count(), 0);
    assert!(!other.path().join("disk").exists());
    // The broken layer alone still fails, naming its source.
    let err = Service::batch(config_with_a_broken_layer(dir.path()), "broken").unwrap_err();
    assert!(matches!(err, ConfigError::Source { .. }), "{err:?}");
}

#[test]
fn a_plan_refuses_a_store_that_forgets_its_tiles() {
    let config = demo::demo_config().unwrap();
    let service = Service::batch(config, "relief").unwrap();
    let err = relief_plan(&service).unwrap_err();
    assert!(err.to_string().contains("in-memory store"), "{err}");
}

#[test]
fn shards_of_a_plan_are_disjoint_contiguous_runs_whose_union_is_the_plan() {
    use std::collections::HashSet;
    use tessera_server::plan::Shard;
    let dir = tempfile::tempdir().unwrap();
    let service = Service::batch(config_with_a_broken_layer(dir.path()), "relief").unwrap();
    let plan = TilePlan::new(
        &service.registry,
        "relief",
        "WebMercatorQuad",
        None,
        0..=6,
        &PlanArea::Extent,
    )
    .unwrap();
    let whole: HashSet<_> = plan.metatiles().map(|m| m.range).collect();
    for count in [1, 2, 3, 4, 7] {
        let mut union = HashSet::new();
        let mut sizes = Vec::new();
        for index in 0..count {
            let part: Vec<_> = plan
                .clone()
                .sharded(Shard { index, count })
                .metatiles()
                .map(|m| m.range)
                .collect();
            sizes.push(part.len());
            for r in part {
                assert!(union.insert(r), "{r:?} is in two of {count} shards");
            }
        }
        assert_eq!(union, whole, "{count} shards");
        let (min, max) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
        assert!(max - min <= 1, "balanced: {sizes:?}");
    }
    // A shard is a run along the curve: at the deepest zoom its metatiles
    // touch each other (each one shares an edge with another of the run).
    let part: Vec<_> = plan
        .clone()
        .sharded(Shard { index: 3, count: 4 })
        .metatiles()
        .filter(|m| m.range.z == 6)
        .map(|m| m.range)
        .collect();
    for pair in part.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        let dx = i64::from(a.min_x).abs_diff(i64::from(b.min_x));
        let dy = i64::from(a.min_y).abs_diff(i64::from(b.min_y));
        assert!(
            (dx == 0) != (dy == 0) && dx.max(dy) <= 4,
            "consecutive metatiles are neighbours: {a:?} {b:?}"
        );
    }
}

#[test]
fn shard_arguments_are_checked_and_auto_reads_the_schedulers_index() {
    use tessera_server::plan::Shard;
    let none = |_: &str| None;
    assert_eq!(
        Shard::parse("2/4", none).unwrap(),
        Shard { index: 2, count: 4 }
    );
    let k8s = |v: &str| (v == "JOB_COMPLETION_INDEX").then(|| "3".to_string());
    assert_eq!(
        Shard::parse("auto/4", k8s).unwrap(),
        Shard { index: 3, count: 4 }
    );
    let slurm = |v: &str| (v == "SLURM_ARRAY_TASK_ID").then(|| "1".to_string());
    assert_eq!(
        Shard::parse("auto/2", slurm).unwrap(),
        Shard { index: 1, count: 2 }
    );
    for (bad, needle) in [
        ("4/4", "from 0 to 3"),
        ("1", "I/N"),
        ("0/0", "at least 1"),
        ("x/2", "not a whole number"),
        ("auto/2", "JOB_COMPLETION_INDEX"),
    ] {
        let e = Shard::parse(bad, none).unwrap_err();
        assert!(e.contains(needle), "{bad}: {e}");
    }
    let e = Shard::parse("auto/2", |_| Some("5".into())).unwrap_err();
    assert!(e.contains("JOB_COMPLETION_INDEX"), "{e}");
}

/// A plan's size counted from its ranges is the size of its walk, and a
/// polygon's plan (one-row spans sharing metatiles) lists each metatile
/// once, without remembering them.
#[test]
fn plan_sizes_counted_from_ranges_match_the_walk_and_metatiles_come_once() {
    use std::collections::HashSet;
    use std::sync::atomic::AtomicBool;
    use tessera_server::plan::{PlanSize, polygons_from_geojson};
    let dir = tempfile::tempdir().unwrap();
    let service = Service::batch(config_with_a_broken_layer(dir.path()), "relief").unwrap();
    let ring =
        r#"{"type":"Polygon","coordinates":[[[-10,35],[30,35],[30,60],[5,70],[-10,60],[-10,35]]]}"#;
    let areas = [
        PlanArea::Extent,
        PlanArea::BBox(
            tessera_grid::BBox::new(-20.0, 30.0, 40.0, 70.0).unwrap(),
            "EPSG:4326".into(),
        ),
        PlanArea::Polygons(polygons_from_geojson(ring).unwrap()),
    ];
    for area in &areas {
        let plan = TilePlan::new(
            &service.registry,
            "relief",
            "WebMercatorQuad",
            None,
            0..=7,
            area,
        )
        .unwrap();
        let walked: Vec<_> = plan.metatiles().collect();
        let unique: HashSet<_> = walked.iter().map(|m| m.range).collect();
        assert_eq!(unique.len(), walked.len(), "a metatile twice in {area:?}");
        let expected = PlanSize {
            metatiles: walked.len() as u64,
            tiles: walked.iter().map(|m| u64::from(m.cols() * m.rows())).sum(),
        };
        assert_eq!(plan.size(), expected, "{area:?}");
        // Cancelled before it starts: a walk stops, a count from the
        // ranges is done at once either way.
        let cancel = AtomicBool::new(true);
        if let Some(size) = plan.size_unless(&cancel) {
            assert_eq!(size, expected);
        }
    }
}
