//! Archives replaced while served: every few seconds (the shortest
//! `check_secs` of the archive sources), each layer whose source is a tile
//! archive is asked for the archive's version now; one that differs from
//! the version it was opened at, and that has held for the archive's
//! `settle_secs` (an ETag that changes at every look is no new version),
//! reloads the configuration. The reload
//! opens the new archive and gives the layer a new fingerprint, so that
//! tiles cached from the old archive are never served again (its reads
//! already notice the new archive on their own; its cached tiles and its
//! metadata need the reload).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tessera_source::SourceSpec;

use super::live::Live;
use crate::http::Reload as _;
use crate::model::Layer;

/// Looks at the archives of the service served by `live` until the
/// process ends; reloads when one was replaced. A reload that fails (the
/// new archive is corrupt) keeps the old layers serving and is not tried
/// again for the same version.
pub async fn watch_archives(live: Arc<Live>) {
    // Versions whose reload failed, by layer: logged once.
    let mut refused: HashMap<String, Option<String>> = HashMap::new();
    // New versions not yet held for their `settle_secs`, by layer.
    let mut pending = Pending::default();
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
        let settle = settle_times(&live.current().config);
        let replaced = pending.settled(replaced, &settle, Instant::now());
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

/// The `settle_secs` of each layer whose source is an archive.
fn settle_times(config: &crate::config::Config) -> HashMap<String, Duration> {
    config
        .layers
        .iter()
        .filter_map(|l| match &l.source {
            SourceSpec::Archive(_, spec) => Some((
                l.name.clone(),
                Duration::try_from_secs_f64(spec.settle_secs).unwrap_or(Duration::MAX),
            )),
            _ => None,
        })
        .collect()
}

/// New archive versions waiting to hold: each layer's version as first
/// seen, and when.
#[derive(Debug, Default)]
struct Pending(HashMap<String, (Option<String>, Instant)>);

impl Pending {
    /// Of `replaced` (layers whose archive's version now differs from the
    /// one served), those whose version now is the one seen at least
    /// `settle` (the layer's) before `now`; a version seen for the first
    /// time starts waiting, a layer no longer replaced stops.
    fn settled(
        &mut self,
        replaced: Vec<(String, Option<String>)>,
        settle: &HashMap<String, Duration>,
        now: Instant,
    ) -> Vec<(String, Option<String>)> {
        self.0
            .retain(|layer, _| replaced.iter().any(|(l, _)| l == layer));
        replaced
            .into_iter()
            .filter(|(layer, version)| {
                let wait = settle.get(layer).copied().unwrap_or(Duration::ZERO);
                match self.0.get(layer) {
                    Some((seen, since)) if seen == version => {
                        now.saturating_duration_since(*since) >= wait
                    }
                    _ => {
                        self.0.insert(layer.clone(), (version.clone(), now));
                        wait.is_zero()
                    }
                }
            })
            .collect()
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_reloads_once_it_held_and_one_that_keeps_changing_never() {
        let settle = HashMap::from([("a".to_string(), Duration::from_secs(10))]);
        let mut pending = Pending::default();
        let t0 = Instant::now();
        let seen = |v: &str| vec![("a".to_string(), Some(v.to_string()))];
        let at = |s: u64| t0 + Duration::from_secs(s);
        // Changing at every look: never held.
        for (i, s) in [0, 4, 8, 12, 16, 20].iter().enumerate() {
            assert!(
                pending
                    .settled(seen(&format!("v{i}")), &settle, at(*s))
                    .is_empty()
            );
        }
        // Held from 24 s: taken at 34 s, not before.
        assert!(pending.settled(seen("w"), &settle, at(24)).is_empty());
        assert!(pending.settled(seen("w"), &settle, at(30)).is_empty());
        assert_eq!(pending.settled(seen("w"), &settle, at(34)), seen("w"));
        // Back to the version served: nothing waits any more.
        assert!(pending.settled(Vec::new(), &settle, at(40)).is_empty());
        assert!(pending.0.is_empty());
        // No settle time: at once.
        assert_eq!(
            pending.settled(seen("x"), &HashMap::new(), at(50)),
            seen("x")
        );
    }
}
