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
