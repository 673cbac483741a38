//! Writing an MBTiles archive: a fresh SQLite file (no journal: it is
//! renamed or uploaded only once finished) with the schema and metadata
//! rows of this module's parent, tiles inserted in batches of one
//! transaction, and the zooms and centre mended at the end.

use std::path::Path;

use rusqlite::{Connection, params};
use tessera_grid::TileCoord;

use crate::TileMetadata;
use crate::write::{WriteError, failed};

/// Rows inserted per transaction.
const BATCH: u64 = 10_000;

/// An MBTiles archive being written.
pub(crate) struct Writer {
    conn: Connection,
}

/// Starts an archive at `path` saying `meta` about itself.
pub(crate) fn create(path: &Path, meta: &TileMetadata) -> Result<Writer, WriteError> {
    let setup = || -> rusqlite::Result<Connection> {
        let conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "OFF")?;
        conn.pragma_update(None, "synchronous", "OFF")?;
        conn.execute_batch(super::SCHEMA)?;
        for (name, value) in super::metadata_rows(meta) {
            conn.execute(
                "INSERT OR REPLACE INTO metadata (name, value) VALUES (?1, ?2)",
                params![name, value],
            )?;
        }
        Ok(conn)
    };
    setup()
        .map(|conn| Writer { conn })
        .map_err(|e| failed("create", path, e))
}

impl Writer {
    /// Adds tile `coord` (its bytes as the archive holds them), the
    /// `written`th: a transaction is committed every [`BATCH`] tiles.
    pub(crate) fn add(
        &mut self,
        coord: TileCoord,
        data: &[u8],
        written: u64,
        path: &Path,
    ) -> Result<(), WriteError> {
        let conn = &self.conn;
        let result = (|| {
            if written.is_multiple_of(BATCH) {
                if written > 0 {
                    conn.execute_batch("COMMIT")?;
                }
                conn.execute_batch("BEGIN")?;
            }
            conn.prepare_cached(
                "INSERT OR REPLACE INTO tiles (zoom_level, tile_column, tile_row, tile_data) VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![
                coord.z(),
                coord.x(),
                super::flipped_row(coord.z(), coord.y()),
                data
            ])
        })();
        result.map(drop).map_err(|e| failed("add", path, e))
    }

    /// Completes the archive of `written` tiles: the zooms of the tiles
    /// added (when any) and the centre in the metadata, statistics for the
    /// query planner, the file closed.
    pub(crate) fn finish(
        self,
        zooms: Option<(u8, u8)>,
        (lon, lat, zoom): (f64, f64, u8),
        written: u64,
        path: &Path,
    ) -> Result<(), WriteError> {
        let conn = self.conn;
        let result = (|| {
            if written > 0 {
                conn.execute_batch("COMMIT")?;
            }
            if let Some((lo, hi)) = zooms {
                let set = "UPDATE metadata SET value = ?1 WHERE name = ?2";
                conn.execute(set, params![lo.to_string(), "minzoom"])?;
                conn.execute(set, params![hi.to_string(), "maxzoom"])?;
                conn.execute(set, params![format!("{lon},{lat},{zoom}"), "center"])?;
            }
            conn.execute_batch("ANALYZE")
        })();
        result.map_err(|e| failed("finish", path, e))?;
        conn.close().map_err(|(_, e)| failed("finish", path, e))
    }
}
