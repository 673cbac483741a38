//! Where rendered tiles are kept.
//!
//! This crate defines the [`TileStore`] contract that every cache backend
//! (file, journal, MBTiles, object storage) implements, and the key and
//! durability types they share. Backends arrive with the caching work; the
//! server renders every request until one is configured.

use bytes::Bytes;
use tessera_grid::TileCoord;

/// Identifies one stored tile: layer, grid, coordinate and format extension.
///
/// Built only from validated parts: the layer and grid names come from the
/// configuration (checked to be `[A-Za-z0-9_.-]+`), the coordinate from the
/// grid, the extension from the encoder. Nothing from a request is used raw,
/// so a key can never name a path outside a store's root.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TileKey {
    /// Layer name.
    pub layer: String,
    /// Grid identifier.
    pub grid: String,
    /// Tile coordinate (rows from the top).
    pub coord: TileCoord,
    /// File extension of the encoded format (`png`, `jpg`, `webp`).
    pub extension: &'static str,
}

impl std::fmt::Display for TileKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/{}/{}.{}",
            self.layer, self.grid, self.coord, self.extension
        )
    }
}

/// How durable a write must be before it is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Handed to the operating system; may be lost on power failure.
    #[default]
    Buffered,
    /// On stable storage before the call returns.
    Synced,
}

/// Errors from tile stores.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// An I/O failure, with the key it concerned.
    #[error("store {store}: {op} {key} failed: {message}")]
    Io {
        /// Store name.
        store: String,
        /// Operation.
        op: &'static str,
        /// Key concerned, as `layer/grid/z/x/y.ext`.
        key: String,
        /// Detail.
        message: String,
    },
}

/// A cache of encoded tiles.
///
/// Contract for implementations:
/// - `get` returns exactly the bytes of the last acknowledged `put` for the
///   key, or `None`; never a partial tile.
/// - `put` with [`Durability::Synced`] returns only once the tile survives a
///   crash; with [`Durability::Buffered`] it may be lost, but never torn.
/// - `put_many` is equivalent to `put` of each tile (a backend may batch).
/// - `delete` of a missing key succeeds.
/// - All methods may be called concurrently from many threads.
pub trait TileStore: Send + Sync + std::fmt::Debug {
    /// A short name for logs and metrics (`file`, `mbtiles`, ...).
    fn name(&self) -> &str;

    /// Reads a tile.
    fn get(&self, key: &TileKey) -> Result<Option<Bytes>, StoreError>;

    /// Writes a tile.
    fn put(&self, key: &TileKey, data: Bytes, durability: Durability) -> Result<(), StoreError>;

    /// Writes several tiles (the tiles of one metatile).
    fn put_many(
        &self,
        tiles: Vec<(TileKey, Bytes)>,
        durability: Durability,
    ) -> Result<(), StoreError> {
        for (key, data) in tiles {
            self.put(&key, data, durability)?;
        }
        Ok(())
    }

    /// Removes a tile.
    fn delete(&self, key: &TileKey) -> Result<(), StoreError>;

    /// Whether a tile is stored.
    fn exists(&self, key: &TileKey) -> Result<bool, StoreError> {
        Ok(self.get(key)?.is_some())
    }
}
