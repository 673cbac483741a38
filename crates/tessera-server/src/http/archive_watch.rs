//! Archives replaced while served: every few seconds (the shortest
//! `check_secs` of the archive sources), each layer whose source is a tile
//! archive is asked for the archive's version now; one that differs from
//! the version it was opened at reloads the configuration. The reload
//! opens the new archive and gives the layer a new fingerprint, so that
//! tiles cached from the old archive are never served again (its reads
//! already notice the new archive on their own; its cached tiles and its
//! metadata need the reload).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tessera_source::SourceSpec;

use super::live::Live;
use crate::model::Layer;

/// Looks at the archives of the service served by `live` until the
/// process ends; reloads when one was replaced. A reload that fails (the
/// new archive is corrupt) keeps the old layers serving and is not tried
/// again for the same version.
pub async fn watch_archives(live: Arc<Live>) {
    // Versions whose reload failed, by layer: logged once.
    let mut refused: HashMap<String, Option<String>> = HashMap::new();
    loop {
        let service = live.current();
        let Some(secs) = check_interval(&service.config) else {
            drop(service);
            // Asked again after a while: a reload may add an archive.
            tokio::time::sleep(Duration::from_secs(30)).await;
            continue;
        };
        drop(service);
        tokio::time::sleep(Duration::from_secs_f64(secs)).await;
        let layers = live.current().registry.layers();
        let Ok(replaced) = tokio::task::spawn_blocking(move || replaced(&layers)).await else {
            continue;
        };
        let fresh: Vec<(String, Option<String>)> = replaced
            .into_iter()
            .filter(|(layer, version)| refused.get(layer) != Some(version))
            .collect();
        if fresh.is_empty() {
            continue;
        }
        for (layer, version) in &fresh {
            tracing::info!(layer, version = ?version, "the layer's archive was replaced: reloading the configuration");
        }
        let reloading = live.clone();
        match tokio::task::spawn_blocking(move || reloading.reload(false)).await {
            Ok(Ok(_)) => refused.clear(),
            Ok(Err(e)) => {
                tracing::error!(
                    error = &e as &dyn std::error::Error,
                    "reloading for a replaced archive failed; the old layers keep serving"
                );
                refused.extend(fresh);
            }
            Err(e) => tracing::error!(
                error = &e as &dyn std::error::Error,
                "the reload for a replaced archive failed"
            ),
        }
    }
}

/// The shortest `check_secs` of the configuration's archive sources;
/// `None` when it has none.
fn check_interval(config: &crate::config::Config) -> Option<f64> {
    config
        .layers
        .iter()
        .filter_map(|l| match &l.source {
            SourceSpec::Archive(_, spec) => Some(spec.check_secs),
            _ => None,
        })
        .reduce(f64::min)
}

/// The layers among `layers` whose archive's version now differs from the
/// one it was opened at, with the version now. An archive that cannot be
/// looked at now is not taken as replaced (its reads fail on their own).
fn replaced(layers: &[Arc<Layer>]) -> Vec<(String, Option<String>)> {
    layers
        .iter()
        .filter_map(|layer| {
            let opened = layer.source.tile_metadata()?.version.clone();
            match layer.source.version_now()? {
                Ok(now) if now != opened => Some((layer.name.clone(), now)),
                Ok(_) => None,
                Err(e) => {
                    tracing::debug!(
                        layer = %layer.name,
                        error = &e as &dyn std::error::Error,
                        "cannot look at the layer's archive"
                    );
                    None
                }
            }
        })
        .collect()
}
