//! The lease protocol of nodes sharing a store (`cluster.leases`): before
//! rendering a metatile, the holder of its local lock asks for its lease;
//! a node that loses waits for the winner's tiles instead of rendering.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tessera_store::cluster::Acquired;
use tessera_store::{HeldTile, StoreError, TileKey};

use super::{TileCache, TileError, TileRequest, run_blocking};
use crate::cluster::{LeaseHolder, jittered};
use crate::metatile::Metatile;
use crate::metrics::LeaseOutcome;
use crate::model::LayerCache;

/// What asking for a metatile's lease led to.
pub(super) enum Leased {
    /// This node holds the lease: render.
    Render(Option<Arc<LeaseHolder>>),
    /// Another node stored the tile meanwhile.
    Stored(HeldTile),
}

/// With leases on (`cluster.leases`), asks for the metatile's lease
/// (the caller holds the local metatile lock, so a node asks once per
/// metatile at a time). Won or taken over: re-reads the tile from the
/// store itself (another node may have stored it since the last read)
/// and renders unless it is there. Held by another node: waits, with
/// back-off and jitter, for `key` to appear in the store, asking again
/// now and then (the holder may have died or given up), at most
/// `cluster.lease_wait_secs`. With `key` `None` (a forced seed, which
/// renders whatever is stored) the store is not read: it waits for the
/// lease itself.
pub(super) async fn lease(
    tile_cache: &TileCache,
    req: &TileRequest,
    cache: &LayerCache,
    meta: &Metatile,
    key: Option<&TileKey>,
) -> Result<Leased, TileError> {
    let Some(leases) = &cache.leases else {
        return Ok(Leased::Render(None));
    };
    let path = leases.coordinator.lease_path(
        &req.layer.cache_key,
        &req.grid.tms.id,
        req.format,
        &meta.range,
    );
    let start = Instant::now();
    let mut delay = Duration::from_millis(20);
    let mut lost = false;
    loop {
        let left = leases.wait.saturating_sub(start.elapsed());
        let asked = tokio::time::timeout(
            left.max(Duration::from_millis(1)),
            leases.coordinator.acquire(&path, &leases.node, leases.ttl),
        )
        .await;
        let held = match asked {
            Err(_) => {
                tile_cache.metrics.lease_requested(LeaseOutcome::Error);
                return Err(TileError::Lease(StoreError::Io {
                    store: cache.store_name.clone(),
                    op: "lease",
                    key: path,
                    source: format!("no answer within {:?}", leases.wait).into(),
                }));
            }
            Ok(Err(e)) => {
                tile_cache.metrics.lease_requested(LeaseOutcome::Error);
                return Err(TileError::Lease(e));
            }
            Ok(Ok(Acquired::Won(h))) => {
                tile_cache.metrics.lease_requested(LeaseOutcome::Won);
                h
            }
            Ok(Ok(Acquired::TakenOver(h))) => {
                tile_cache.metrics.lease_requested(LeaseOutcome::TakenOver);
                tracing::info!(lease = %h.key(), "took over an expired lease");
                h
            }
            Ok(Ok(Acquired::Held(info))) => {
                if !lost {
                    tile_cache.metrics.lease_requested(LeaseOutcome::Lost);
                    lost = true;
                }
                let mut polls = 0u32;
                loop {
                    if start.elapsed() >= leases.wait {
                        return Err(TileError::LeaseWait {
                            holder: info.node,
                            after: leases.wait,
                        });
                    }
                    let left = leases.wait.saturating_sub(start.elapsed());
                    tokio::time::sleep(jittered(delay).min(left)).await;
                    delay = (delay * 2).min(Duration::from_millis(500));
                    if let Some(key) = key
                        && let Some(held) = read_through(tile_cache, cache, key).await
                    {
                        tile_cache.metrics.lease_waited(start);
                        return Ok(Leased::Stored(held));
                    }
                    polls += 1;
                    if key.is_none()
                        || polls.is_multiple_of(4)
                        || info.expired_for(SystemTime::now(), leases.ttl)
                    {
                        break;
                    }
                }
                continue;
            }
        };
        let holder = LeaseHolder::start(leases, held);
        if lost {
            tile_cache.metrics.lease_waited(start);
        }
        if let Some(key) = key
            && let Some(held) = read_through(tile_cache, cache, key).await
        {
            return Ok(Leased::Stored(held));
        }
        return Ok(Leased::Render(Some(holder)));
    }
}

/// Reads a fresh `key` from the store itself, past this process's copies.
pub(super) async fn read_through(
    tile_cache: &TileCache,
    cache: &LayerCache,
    key: &TileKey,
) -> Option<HeldTile> {
    let (store, k) = (cache.store.clone(), key.clone());
    run_blocking(move || store.forget(&k)).await.ok()?;
    super::lookup::lookup(tile_cache, &cache.store, key)
        .await
        .filter(|held| cache.freshness.is_fresh(held.stored_at, SystemTime::now()))
}
