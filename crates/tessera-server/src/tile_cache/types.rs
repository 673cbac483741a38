//! The tile cache's vocabulary: a tile request, a tile and where it came
//! from, and why a tile could not be produced.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use tessera_grid::{TileCoord, TileFormat};
use tessera_store::{HeldTile, StoreError, TileKey, content_hash};

use crate::model::{Grid, Layer, tile_key};
use crate::render::RenderError;

/// A validated request for one tile of one layer.
#[derive(Debug, Clone)]
pub struct TileRequest {
    /// The layer.
    pub layer: Arc<Layer>,
    /// The grid.
    pub grid: Arc<Grid>,
    /// The tile.
    pub coord: TileCoord,
    /// The format.
    pub format: TileFormat,
}

impl TileRequest {
    /// The key tile `coord` of the request's layer, grid and format is
    /// stored and locked under ([`tile_key`]).
    pub fn key_of(&self, coord: TileCoord) -> TileKey {
        tile_key(&self.layer, &self.grid, self.format, coord)
    }
}

/// Whether a tile came from the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheStatus {
    /// Read from the store.
    Hit,
    /// Rendered for this request.
    Miss,
}

/// An encoded tile and where it came from.
#[derive(Debug, Clone)]
pub struct Tile {
    /// Encoded bytes.
    pub bytes: Bytes,
    /// [`tessera_store::content_hash`] of the bytes (the ETag).
    pub hash: u128,
    /// Hit or miss.
    pub status: CacheStatus,
    /// When the tile was stored (a miss: now; `None`: the store does not
    /// know). Sent as `Last-Modified`.
    pub stored_at: Option<SystemTime>,
    /// The limit its source stopped at when it was drawn from part of its
    /// data (a render's answer only; sent as `X-Tessera-Partial`).
    pub partial: Option<tessera_source::partial::Partial>,
}

impl Tile {
    /// A hit on the tile `held`.
    pub fn hit(held: HeldTile) -> Tile {
        Tile {
            bytes: held.bytes,
            hash: held.hash,
            status: CacheStatus::Hit,
            stored_at: held.stored_at,
            partial: None,
        }
    }
}

/// Why a tile could not be produced.
#[derive(Debug, thiserror::Error)]
pub enum TileError {
    /// The render failed or timed out.
    #[error(transparent)]
    Render(#[from] RenderError),
    /// A lock wait timed out.
    #[error("waited {after:?} for the {kind} lock of this tile")]
    LockTimeout {
        /// `metatile` or `tile`.
        kind: &'static str,
        /// The configured timeout.
        after: Duration,
    },
    /// The store failed (seeding only: serving renders when a read fails
    /// and answers with the tile when a write fails).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A seeding task panicked or was cancelled.
    #[error("a seeding task failed")]
    Task(#[source] tokio::task::JoinError),
    /// Another node holds the metatile's lease and its tiles did not
    /// appear within `cluster.lease_wait_secs`.
    #[error(
        "another node ({holder}) is rendering this metatile and its tiles did not appear within {after:?}"
    )]
    LeaseWait {
        /// The node holding the lease.
        holder: String,
        /// The configured wait.
        after: Duration,
    },
    /// The lease could not be asked for (the store failed or did not
    /// answer in time); nothing was rendered.
    #[error("cannot ask for the metatile's lease")]
    Lease(#[source] StoreError),
    /// The layer has no cache to seed into.
    #[error("layer {0:?} has no cache store (its `cache.store` is `none`)")]
    NotCached(String),
}

/// A tile rendered for this request, stored now.
pub(super) fn miss(bytes: Bytes) -> Tile {
    Tile {
        hash: content_hash(&bytes),
        bytes,
        status: CacheStatus::Miss,
        stored_at: Some(SystemTime::now()),
        partial: None,
    }
}
