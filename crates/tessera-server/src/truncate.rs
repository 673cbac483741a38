//! Truncation of a plan's tiles, shared by `tessera truncate` and
//! `POST /admin/truncate`: the store deletes by computed keys, then the
//! layer's generation object is rewritten so that every node sharing the
//! store drops what it holds of the layer (`crate::cluster`).

use std::time::Duration;

use tessera_store::{StoreError, TruncateReport};

use crate::plan::TilePlan;

/// Longest wait for the generation object to be written.
const GENERATION_TIMEOUT: Duration = Duration::from_secs(30);

/// What a truncation did.
#[derive(Debug, Clone)]
pub struct Truncated {
    /// What the store removed.
    pub report: TruncateReport,
    /// Whether other nodes were told (the store can be shared); the error
    /// when telling them failed (the tiles are deleted either way).
    pub announced: Result<bool, String>,
}

/// Why a truncation failed.
#[derive(Debug, thiserror::Error)]
pub enum TruncateError {
    /// The layer has no cache.
    #[error("layer {0:?} has no cache")]
    NotCached(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The blocking task failed.
    #[error("the truncation task failed")]
    Task(#[source] tokio::task::JoinError),
}

/// Removes `plan`'s tiles from its layer's store, then announces a new
/// generation of the layer to the nodes sharing the store, as `node`.
pub async fn truncate(plan: &TilePlan, node: &str) -> Result<Truncated, TruncateError> {
    let cache = plan
        .layer
        .cache
        .as_ref()
        .ok_or_else(|| TruncateError::NotCached(plan.layer.name.clone()))?;
    let (store, area) = (cache.store.clone(), plan.tile_area());
    let report = tokio::task::spawn_blocking(move || store.truncate(&area))
        .await
        .map_err(TruncateError::Task)??;
    let announced = match &cache.coordinator {
        Some(c) => {
            crate::cluster::bump_generation(c, &plan.layer.cache_key, node, GENERATION_TIMEOUT)
                .await
                .map(|()| true)
        }
        None => Ok(false),
    };
    Ok(Truncated { report, announced })
}
