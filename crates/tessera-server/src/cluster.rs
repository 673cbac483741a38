//! Several nodes sharing a store: the leases that make one node render a
//! metatile while the others wait for its tiles, and the watch on each
//! layer's generation that drops what a node holds of tiles another node
//! truncated. The shared objects themselves are `tessera_store::cluster`'s.
//!
//! A lease is asked for only by the holder of the local metatile lock, so a
//! node sends at most one lease request per metatile at a time; the lease
//! is held (and renewed every third of its time to live) until every tile
//! of the metatile is stored, and deleted then.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tessera_store::cluster::{Coordinator, Generation, HeldLease};

use crate::metrics::{GenerationResult, Metrics};
use crate::model::{Layer, Leases};

/// A lease this node holds while it renders and stores a metatile.
///
/// Shared by the request that rendered and the jobs that store the
/// siblings: when the last clone is dropped (every tile stored, or the work
/// abandoned) the renewal stops and the lease object is deleted.
#[derive(Debug)]
pub struct LeaseHolder {
    coordinator: Arc<Coordinator>,
    held: Arc<Mutex<Option<HeldLease>>>,
    renewal: tokio::task::JoinHandle<()>,
    runtime: tokio::runtime::Handle,
}

impl LeaseHolder {
    /// Holds `held` and renews it every third of `leases.ttl`. Must be
    /// called on a Tokio runtime (the renewal and the final delete run on
    /// it).
    pub fn start(leases: &Leases, held: HeldLease) -> Arc<LeaseHolder> {
        let key = held.key().to_string();
        let held = Arc::new(Mutex::new(Some(held)));
        let (coordinator, ttl, slot) = (leases.coordinator.clone(), leases.ttl, held.clone());
        let renewal = tokio::spawn(async move {
            loop {
                tokio::time::sleep(ttl / 3).await;
                let Some(mut lease) = slot.lock().unwrap_or_else(PoisonError::into_inner).clone()
                else {
                    return;
                };
                match coordinator.renew(&mut lease, ttl).await {
                    Ok(true) => {
                        let mut s = slot.lock().unwrap_or_else(PoisonError::into_inner);
                        if s.is_some() {
                            *s = Some(lease);
                        }
                    }
                    Ok(false) => {
                        tracing::warn!(lease = %key, "the lease was taken over by another node before it could be renewed (a render longer than cluster.lease_ttl_secs?)");
                        slot.lock().unwrap_or_else(PoisonError::into_inner).take();
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(lease = %key, error = &e as &dyn std::error::Error, "renewing a lease failed; trying again");
                    }
                }
            }
        });
        Arc::new(LeaseHolder {
            coordinator: leases.coordinator.clone(),
            held,
            renewal,
            runtime: tokio::runtime::Handle::current(),
        })
    }
}

impl LeaseHolder {
    /// Deletes the lease now and waits for it (a batch command that may
    /// exit next); with other clones still alive, the last one deletes it
    /// when dropped.
    pub async fn release(self: Arc<Self>) {
        let Ok(holder) = Arc::try_unwrap(self) else {
            return;
        };
        holder.renewal.abort();
        let lease = holder
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(lease) = lease
            && let Err(e) = holder.coordinator.release(lease).await
        {
            tracing::warn!(
                error = &e as &dyn std::error::Error,
                "deleting a lease failed; it expires by itself"
            );
        }
    }
}

impl Drop for LeaseHolder {
    fn drop(&mut self) {
        self.renewal.abort();
        let Some(lease) = self
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        else {
            return;
        };
        let coordinator = self.coordinator.clone();
        // Dropped on an encode thread as often as on the runtime: the
        // delete runs on the runtime the lease was taken on.
        self.runtime.spawn(async move {
            if let Err(e) = coordinator.release(lease).await {
                tracing::warn!(
                    error = &e as &dyn std::error::Error,
                    "deleting a lease failed; it expires by itself"
                );
            }
        });
    }
}

/// Checks the generation object of every cached configured layer every
/// `interval` (one per layer: its named styles and dimension values
/// announce under the same key, [`generation_key`]), and drops what this
/// node holds of a layer whose generation changed, of every style and
/// value. Runs until the task is dropped; `layers` gives the layers served
/// now (they change on reload).
pub async fn watch_generations(
    layers: impl Fn() -> Vec<Arc<Layer>>,
    metrics: Arc<Metrics>,
    interval: Duration,
) {
    let mut seen: HashMap<(String, String), Option<String>> = HashMap::new();
    let mut first = true;
    loop {
        let mut targets = Vec::new();
        let mut watched = HashSet::new();
        // A named style may be cached in a store of its own.
        let styled = layers().into_iter().flat_map(|layer| {
            let others: Vec<Arc<Layer>> =
                layer.other_styles.iter().map(|(_, l)| l.clone()).collect();
            std::iter::once(layer).chain(others)
        });
        for layer in styled {
            if let Some(cache) = &layer.cache
                && let Some(coordinator) = &cache.coordinator
            {
                let key = generation_key(&layer.cache_key).to_string();
                if watched.insert((coordinator.name().to_string(), key.clone())) {
                    targets.push((coordinator.clone(), cache.store.clone(), key));
                }
            }
        }
        for (coordinator, store, key) in targets {
            let id = (coordinator.name().to_string(), key.clone());
            let known = seen.get(&id).cloned();
            match coordinator
                .check_generation(&key, known.clone().flatten().as_deref())
                .await
            {
                Ok(Generation::Unchanged) => {
                    seen.entry(id).or_insert(None);
                    metrics.generation_checked(GenerationResult::Unchanged);
                }
                Ok(Generation::Changed(etag)) => {
                    // The first sight of a layer only learns its generation:
                    // nothing was held under an older one.
                    if known.is_some() || !first {
                        let _ = tokio::task::spawn_blocking(move || store.forget_layer(&key)).await;
                        tracing::info!(layer = %id.1, store = %id.0, "the layer's tiles were truncated by another process: dropped the copies held here");
                    }
                    seen.insert(id, etag);
                    metrics.generation_checked(GenerationResult::Changed);
                }
                Err(e) => {
                    metrics.generation_checked(GenerationResult::Error);
                    tracing::warn!(
                        error = &e as &dyn std::error::Error,
                        "checking a layer's generation failed"
                    );
                }
            }
        }
        first = false;
        tokio::time::sleep(interval).await;
    }
}

/// The key whose generation announces a truncation of tiles under layer
/// key `cache_key`: the configured layer's (without its style, dimension
/// values or fingerprint), so a node watches one generation per layer
/// however many values it has, and drops every value's and style's copies
/// when it changes.
pub fn generation_key(cache_key: &str) -> &str {
    tessera_store::quota::root_of(cache_key)
}

/// Records a new generation of the layer key `layer` in `coordinator`, so
/// other nodes drop what they hold of it; waits at most `timeout`.
pub async fn bump_generation(
    coordinator: &Coordinator,
    layer: &str,
    node: &str,
    timeout: Duration,
) -> Result<(), String> {
    match tokio::time::timeout(timeout, coordinator.bump_generation(layer, node)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(tessera_source::error_chain(&e)),
        Err(_) => Err(format!(
            "no answer from store {:?} within {timeout:?}",
            coordinator.name()
        )),
    }
}

/// The jitter added to a wait, up to a quarter of it.
pub fn jittered(d: Duration) -> Duration {
    let quarter = d.as_millis() as u64 / 4;
    if quarter == 0 {
        return d;
    }
    d + Duration::from_millis(tessera_store::cluster::rand_u64() % quarter)
}
