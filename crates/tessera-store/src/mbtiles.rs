//! Tiles in MBTiles 1.3 files (SQLite: `metadata` and `tiles`, TMS rows),
//! one file per layer, grid and format: `<dir>/<layer>.<grid>.<ext>.mbtiles`.
//!
//! Each file has one writer connection behind a mutex (so concurrent writers
//! in this process queue instead of meeting "database is locked") and a few
//! reader connections; the database runs in WAL mode so readers never wait
//! for the writer. Another process writing the same file is waited for up to
//! the busy timeout. A metatile is written in one transaction.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use rusqlite::{
    Connection, OpenFlags, OptionalExtension, Transaction, TransactionBehavior, params,
};
use serde::Deserialize;

use tessera_grid::{TileCoord, TileFormat};

use tessera_archive::mbtiles;

use crate::fingerprint::{FINGERPRINT_DIR, claim_in_dir, read_recorded};
use crate::{
    Durability, StoreError, StoredTile, TileArea, TileKey, TileStore, TruncateReport,
    check_not_empty,
};

/// SQLite's `synchronous` setting for the writer connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Synchronous {
    /// No syncs: fastest, the database may be lost on power failure.
    Off,
    /// WAL default: durable up to the last checkpoint on power failure,
    /// never corrupt.
    #[default]
    Normal,
    /// Every commit synced.
    Full,
}

impl Synchronous {
    fn pragma(self) -> &'static str {
        match self {
            Synchronous::Off => "OFF",
            Synchronous::Normal => "NORMAL",
            Synchronous::Full => "FULL",
        }
    }
}

/// Settings of an MBTiles store.
#[derive(Debug, Clone, Copy)]
pub struct MbtilesOptions {
    /// `synchronous` for writes that are not asked to be synced.
    pub synchronous: Synchronous,
    /// How long to wait for another process holding the write lock.
    pub busy_timeout: Duration,
    /// Reader connections kept per file.
    pub readers: usize,
}

impl Default for MbtilesOptions {
    fn default() -> Self {
        Self {
            synchronous: Synchronous::Normal,
            busy_timeout: Duration::from_mins(1),
            readers: 4,
        }
    }
}

#[derive(Debug)]
struct Db {
    /// `None` when the file cannot be written (a read-only file system):
    /// the stored tiles are served, writes are refused.
    writer: Option<Mutex<Connection>>,
    readers: Mutex<Vec<Connection>>,
    path: PathBuf,
    /// Whether its `tiles` table has the `tessera_stored_at` column (files
    /// this store wrote; not files made by other tools and opened
    /// read-only).
    stamped: bool,
}

/// Layer, grid and extension: what one file holds.
type FileId = (String, String, TileFormat);

/// A tile store of MBTiles files.
#[derive(Debug)]
pub struct MbtilesStore {
    dir: PathBuf,
    options: MbtilesOptions,
    files: Mutex<HashMap<FileId, Arc<Db>>>,
}

fn sql_err(op: &'static str, key: &dyn std::fmt::Display, e: &rusqlite::Error) -> StoreError {
    StoreError::Io {
        store: "mbtiles".into(),
        op,
        key: key.to_string(),
        source: e.to_string().into(),
    }
}

impl MbtilesStore {
    /// A store writing its files under `dir` (created if missing).
    pub fn open(
        dir: impl Into<PathBuf>,
        options: MbtilesOptions,
    ) -> Result<MbtilesStore, StoreError> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(|e| StoreError::Io {
            store: "mbtiles".into(),
            op: "create",
            key: dir.display().to_string(),
            source: Box::new(e),
        })?;
        Ok(MbtilesStore {
            dir,
            options,
            files: Mutex::new(HashMap::new()),
        })
    }

    /// The files in the directory: path, layer key, grid and format, from
    /// their names (`layer.grid.ext.mbtiles`: the layer may hold dots, not
    /// the grid or the extension).
    fn files_here(&self) -> Result<Vec<(PathBuf, String, String, TileFormat)>, StoreError> {
        let entries = std::fs::read_dir(&self.dir).map_err(|e| StoreError::Io {
            store: "mbtiles".into(),
            op: "list",
            key: self.dir.display().to_string(),
            source: e.to_string().into(),
        })?;
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some((rest, format)) = name
                .strip_suffix(".mbtiles")
                .and_then(TileFormat::split_extension)
            else {
                continue;
            };
            let Some((layer, grid)) = rest.rsplit_once('.') else {
                continue;
            };
            out.push((entry.path(), layer.to_string(), grid.to_string(), format));
        }
        Ok(out)
    }

    /// The file holding `key`'s layer, grid and format.
    pub fn path_of(&self, key: &TileKey) -> PathBuf {
        self.dir.join(format!(
            "{}.{}.{}.mbtiles",
            key.layer,
            key.grid,
            key.format.extension()
        ))
    }

    fn db(&self, key: &TileKey) -> Result<Arc<Db>, StoreError> {
        let id = (key.layer.clone(), key.grid.clone(), key.format);
        let mut files = self.files.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(db) = files.get(&id) {
            return Ok(db.clone());
        }
        let path = self.path_of(key);
        let writer = match open_writer_waiting(&path, key, &self.options) {
            Ok(writer) => Some(Mutex::new(writer)),
            // An existing file that cannot be written (a read-only file
            // system, no permission) still serves what it holds. A file
            // another process holds locked is not read-only: that error
            // is returned (after waiting up to the busy timeout).
            Err(e)
                if cannot_write(&e)
                    && path.is_file()
                    && open_reader(&path, &self.options).is_ok() =>
            {
                tracing::warn!(
                    file = %path.display(),
                    error = &e as &dyn std::error::Error,
                    "the MBTiles file cannot be written: serving its tiles read-only"
                );
                None
            }
            Err(e) => return Err(sql_err("open", &path.display(), &e)),
        };
        let stamped = match &writer {
            Some(w) => has_stamps(&w.lock().unwrap_or_else(PoisonError::into_inner)),
            None => open_reader(&path, &self.options).is_ok_and(|c| has_stamps(&c)),
        };
        let db = Arc::new(Db {
            writer,
            readers: Mutex::new(Vec::new()),
            path,
            stamped,
        });
        files.insert(id, db.clone());
        Ok(db)
    }

    fn with_reader<T>(
        &self,
        key: &TileKey,
        f: impl FnOnce(&Connection, &Db) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        let db = self.db(key)?;
        let conn = db
            .readers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let conn = match conn {
            Some(c) => c,
            None => open_reader(&db.path, &self.options)
                .map_err(|e| sql_err("open", &db.path.display(), &e))?,
        };
        let result = f(&conn, &db).map_err(|e| sql_err("get", key, &e));
        let mut readers = db.readers.lock().unwrap_or_else(PoisonError::into_inner);
        if readers.len() < self.options.readers {
            readers.push(conn);
        }
        result
    }

    fn write(&self, tiles: &[(TileKey, Bytes)], durability: Durability) -> Result<(), StoreError> {
        for (key, data) in tiles {
            check_not_empty("mbtiles", key, data)?;
        }
        // Tiles of one call normally share a file; group them anyway.
        let mut by_file: HashMap<PathBuf, Vec<&(TileKey, Bytes)>> = HashMap::new();
        for t in tiles {
            by_file.entry(self.path_of(&t.0)).or_default().push(t);
        }
        for group in by_file.values() {
            let db = self.db(&group[0].0)?;
            let Some(writer) = &db.writer else {
                return Err(StoreError::Invalid {
                    store: "mbtiles".into(),
                    message: format!("{} is read-only: the tile is not stored", db.path.display()),
                });
            };
            let mut conn = writer.lock().unwrap_or_else(PoisonError::into_inner);
            let synced =
                durability == Durability::Synced && self.options.synchronous != Synchronous::Full;
            if synced {
                conn.pragma_update(None, "synchronous", "FULL")
                    .map_err(|e| sql_err("put", &group[0].0, &e))?;
            }
            let stored_at = i64::try_from(
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis()),
            )
            .unwrap_or(i64::MAX);
            let result = (|| {
                let tx = conn.transaction()?;
                {
                    let mut stmt = if db.stamped {
                        tx.prepare_cached(
                            "INSERT OR REPLACE INTO tiles (zoom_level, tile_column, tile_row, tile_data, tessera_stored_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                        )?
                    } else {
                        tx.prepare_cached(
                            "INSERT OR REPLACE INTO tiles (zoom_level, tile_column, tile_row, tile_data) VALUES (?1, ?2, ?3, ?4)",
                        )?
                    };
                    for (key, data) in group {
                        let (z, x, row, data) =
                            (key.coord.z(), key.coord.x(), key.tms_row(), data.as_ref());
                        if db.stamped {
                            stmt.execute(params![z, x, row, data, stored_at])?;
                        } else {
                            stmt.execute(params![z, x, row, data])?;
                        }
                    }
                }
                tx.commit()
            })();
            if synced {
                let _ = conn.pragma_update(None, "synchronous", self.options.synchronous.pragma());
            }
            result.map_err(|e| sql_err("put", &group[0].0, &e))?;
        }
        Ok(())
    }
}

/// Whether `e` says the file cannot be written at all (read-only file
/// system or file, no permission), rather than that it is busy.
fn cannot_write(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(
            rusqlite::ErrorCode::ReadOnly
                | rusqlite::ErrorCode::CannotOpen
                | rusqlite::ErrorCode::PermissionDenied
        )
    )
}

/// [`open_writer`], tried again while another connection holds the file
/// locked (SQLite answers a journal-mode change or the schema's first
/// write `SQLITE_BUSY` at once where waiting could deadlock), for up to
/// the busy timeout.
fn open_writer_waiting(
    path: &Path,
    key: &TileKey,
    options: &MbtilesOptions,
) -> rusqlite::Result<Connection> {
    let deadline = std::time::Instant::now() + options.busy_timeout;
    let mut pause = std::time::Duration::from_millis(5);
    loop {
        match open_writer(path, key, options) {
            Err(e)
                if matches!(
                    e.sqlite_error_code(),
                    Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
                ) && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(pause);
                pause = (pause * 2).min(std::time::Duration::from_millis(200));
            }
            other => return other,
        }
    }
}

/// Whether the `tiles` table (not a view) has the column of store times.
fn has_stamps(conn: &Connection) -> bool {
    conn.query_row(
        "SELECT count(*) FROM pragma_table_info('tiles') WHERE name = 'tessera_stored_at'",
        [],
        |row| row.get::<_, i64>(0),
    )
    .is_ok_and(|n| n > 0)
}

fn open_writer(
    path: &Path,
    key: &TileKey,
    options: &MbtilesOptions,
) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(options.busy_timeout)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", options.synchronous.pragma())?;
    // One writer at a time sets the schema up: two processes opening a new
    // file would otherwise both find the stamp column missing and both add
    // it (the second failing on a duplicate column).
    let setup = Transaction::new_unchecked(&conn, TransactionBehavior::Immediate)?;
    setup.execute_batch(mbtiles::SCHEMA)?;
    // When each tile was stored, for expiry and Last-Modified. MBTiles
    // readers ignore columns they do not know; a `tiles` view (a file made
    // by another tool) cannot take one and is left as it is.
    let is_table = setup.query_row(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'tiles'",
        [],
        |row| row.get::<_, i64>(0),
    )? > 0;
    if is_table && !has_stamps(&setup) {
        setup.execute_batch("ALTER TABLE tiles ADD COLUMN tessera_stored_at INTEGER")?;
    }
    for (name, value) in [
        ("name", key.layer.as_str()),
        ("format", key.format.archive_name()),
        ("type", "baselayer"),
        ("version", mbtiles::VERSION),
        ("description", key.grid.as_str()),
    ] {
        setup.execute(
            "INSERT OR IGNORE INTO metadata (name, value) VALUES (?1, ?2)",
            params![name, value],
        )?;
    }
    setup.commit()?;
    Ok(conn)
}

fn open_reader(path: &Path, options: &MbtilesOptions) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(options.busy_timeout)?;
    // A WAL database is read through its shared-memory file, which a
    // read-only file system cannot hold: read it as immutable there.
    match conn.query_row("SELECT count(*) FROM sqlite_master", [], |_| Ok(())) {
        Ok(()) => Ok(conn),
        Err(_) => {
            let uri = format!("file:{}?immutable=1", path.display());
            let conn = Connection::open_with_flags(
                uri,
                OpenFlags::SQLITE_OPEN_READ_ONLY
                    | OpenFlags::SQLITE_OPEN_NO_MUTEX
                    | OpenFlags::SQLITE_OPEN_URI,
            )?;
            conn.query_row("SELECT count(*) FROM sqlite_master", [], |_| Ok(()))?;
            Ok(conn)
        }
    }
}

impl TileStore for MbtilesStore {
    /// Every row of every file (`layer.grid.ext.mbtiles`), read-only; rows
    /// flipped back with the grid's matrix height.
    fn scan(
        &self,
        matrix: crate::MatrixOf<'_>,
        f: &mut dyn FnMut(TileKey, u64),
    ) -> Result<bool, StoreError> {
        for (path, layer, grid, format) in self.files_here()? {
            let conn = rusqlite::Connection::open_with_flags(
                &path,
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
            )
            .map_err(|e| sql_err("scan", &path.display(), &e))?;
            let mut q = conn
                .prepare("SELECT zoom_level, tile_column, tile_row, length(tile_data) FROM tiles")
                .map_err(|e| sql_err("scan", &path.display(), &e))?;
            let rows = q
                .query_map([], |r| {
                    Ok((
                        r.get::<_, u8>(0)?,
                        r.get::<_, u32>(1)?,
                        r.get::<_, u32>(2)?,
                        r.get::<_, i64>(3)?,
                    ))
                })
                .map_err(|e| sql_err("scan", &path.display(), &e))?;
            for row in rows {
                let (z, x, tms_row, len) = row.map_err(|e| sql_err("scan", &path.display(), &e))?;
                let Some((width, height)) = matrix(&grid, z) else {
                    continue;
                };
                let Some(y) = height.checked_sub(1 + tms_row) else {
                    continue;
                };
                f(
                    TileKey {
                        layer: layer.clone(),
                        grid: grid.clone(),
                        coord: tessera_grid::TileCoord::restored(z, x, y),
                        matrix_height: height,
                        matrix_width: width,
                        format,
                    },
                    u64::try_from(len).unwrap_or(0),
                );
            }
        }
        Ok(true)
    }

    /// One query per file (`layer.grid.ext.mbtiles`), read-only.
    /// The directory's files of `grid` and `format` whose layer starts
    /// with `prefix`.
    fn layer_keys(
        &self,
        prefix: &str,
        grid: &str,
        format: TileFormat,
    ) -> Result<Option<Vec<String>>, StoreError> {
        let mut keys: Vec<String> = self
            .files_here()?
            .into_iter()
            .filter(|(_, layer, g, f)| layer.starts_with(prefix) && g == grid && *f == format)
            .map(|(_, layer, _, _)| layer)
            .collect();
        keys.sort();
        keys.dedup();
        Ok(Some(keys))
    }

    fn count_by_zoom(&self) -> Result<Option<Vec<crate::quota::ZoomUsage>>, StoreError> {
        let mut counts: std::collections::BTreeMap<(String, u8), (u64, u64)> =
            std::collections::BTreeMap::new();
        for (path, layer, _, _) in self.files_here()? {
            let conn = rusqlite::Connection::open_with_flags(
                &path,
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
            )
            .map_err(|e| sql_err("count", &path.display(), &e))?;
            let mut q = conn
                .prepare(
                    "SELECT zoom_level, count(*), coalesce(sum(length(tile_data)), 0) FROM tiles GROUP BY zoom_level",
                )
                .map_err(|e| sql_err("count", &path.display(), &e))?;
            let rows = q
                .query_map([], |r| {
                    Ok((r.get::<_, u8>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
                })
                .map_err(|e| sql_err("count", &path.display(), &e))?;
            for row in rows {
                let (z, n, bytes) = row.map_err(|e| sql_err("count", &path.display(), &e))?;
                let c = counts.entry((layer.clone(), z)).or_default();
                c.0 += u64::try_from(n).unwrap_or(0);
                c.1 += u64::try_from(bytes).unwrap_or(0);
            }
        }
        Ok(Some(crate::quota::zoom_usage(counts)))
    }

    #[allow(clippy::unnecessary_literal_bound)] // the trait allows owned names
    fn name(&self) -> &str {
        "mbtiles"
    }

    fn get(&self, key: &TileKey) -> Result<Option<Bytes>, StoreError> {
        Ok(self.get_stored(key)?.map(|t| t.bytes))
    }

    /// The time is the `tessera_stored_at` column (milliseconds since
    /// 1970) of files this store wrote; `None` for files without it.
    fn get_stored(&self, key: &TileKey) -> Result<Option<StoredTile>, StoreError> {
        let at = params![key.coord.z(), key.coord.x(), key.tms_row()];
        self.with_reader(key, |conn, db| {
            if db.stamped {
                conn.prepare_cached(
                    "SELECT tile_data, tessera_stored_at FROM tiles WHERE zoom_level = ?1 AND tile_column = ?2 AND tile_row = ?3",
                )?
                .query_row(at, |row| {
                    Ok((row.get::<_, Vec<u8>>(0)?, row.get::<_, Option<i64>>(1)?))
                })
                .optional()
            } else {
                conn.prepare_cached(
                    "SELECT tile_data FROM tiles WHERE zoom_level = ?1 AND tile_column = ?2 AND tile_row = ?3",
                )?
                .query_row(at, |row| Ok((row.get::<_, Vec<u8>>(0)?, None)))
                .optional()
            }
        })
        .map(|found| {
            found
                .filter(|(d, _)| !d.is_empty())
                .map(|(d, ms)| StoredTile {
                    bytes: Bytes::from(d),
                    stored_at: ms.and_then(|ms| {
                        Some(UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).ok()?))
                    }),
                })
        })
    }

    /// Kept in `<dir>/.fingerprints/<layer>`. A directory that cannot be
    /// written (files served read-only) records nothing: the recorded
    /// fingerprint, or the given one, is returned.
    fn claim_fingerprint(&self, layer: &str, fingerprint: &str) -> Result<String, StoreError> {
        let dir = self.dir.join(FINGERPRINT_DIR);
        match claim_in_dir(&dir, layer, fingerprint) {
            Ok(recorded) => Ok(recorded),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ReadOnlyFilesystem | std::io::ErrorKind::PermissionDenied
                ) =>
            {
                Ok(read_recorded(&dir.join(layer))
                    .ok()
                    .flatten()
                    .unwrap_or_else(|| fingerprint.to_string()))
            }
            Err(e) => Err(StoreError::Io {
                store: "mbtiles".into(),
                op: "claim",
                key: dir.join(layer).display().to_string(),
                source: Box::new(e),
            }),
        }
    }

    fn put(&self, key: &TileKey, data: Bytes, durability: Durability) -> Result<(), StoreError> {
        self.write(&[(key.clone(), data)], durability)
    }

    fn put_many(
        &self,
        tiles: Vec<(TileKey, Bytes)>,
        durability: Durability,
    ) -> Result<(), StoreError> {
        self.write(&tiles, durability)
    }

    /// One `DELETE` per range (rows are flipped to TMS): what the file
    /// holds is removed, whatever the range could hold.
    fn truncate(&self, area: &TileArea) -> Result<TruncateReport, StoreError> {
        let mut report = TruncateReport::default();
        for r in &area.ranges {
            area.progress.check(self.name())?;
            let range = r.range;
            let key = TileKey {
                layer: area.layer.clone(),
                grid: area.grid.clone(),
                coord: TileCoord::restored(range.z, range.min_x, range.min_y),
                matrix_width: r.matrix_width,
                matrix_height: r.matrix_height,
                format: area.format,
            };
            if !self.path_of(&key).exists() {
                continue;
            }
            let db = self.db(&key)?;
            let Some(writer) = &db.writer else {
                return Err(StoreError::Invalid {
                    store: "mbtiles".into(),
                    message: format!("{} is read-only: nothing can be deleted", db.path.display()),
                });
            };
            // TMS rows count from the bottom: the range's last row is the
            // lowest TMS row.
            let tms = |y: u32| r.matrix_height.saturating_sub(y + 1);
            let conn = writer.lock().unwrap_or_else(PoisonError::into_inner);
            let removed = conn
                .execute(
                    "DELETE FROM tiles WHERE zoom_level = ?1 AND tile_column BETWEEN ?2 AND ?3 \
                     AND tile_row BETWEEN ?4 AND ?5",
                    params![
                        range.z,
                        range.min_x,
                        range.max_x,
                        tms(range.max_y),
                        tms(range.min_y)
                    ],
                )
                .map_err(|e| sql_err("truncate", &key, &e))?;
            report.objects_deleted += removed as u64;
            area.progress.add(removed as u64);
        }
        Ok(report)
    }

    fn delete(&self, key: &TileKey) -> Result<(), StoreError> {
        let db = self.db(key)?;
        let Some(writer) = &db.writer else {
            return Err(StoreError::Invalid {
                store: "mbtiles".into(),
                message: format!("{} is read-only: nothing can be deleted", db.path.display()),
            });
        };
        let conn = writer.lock().unwrap_or_else(PoisonError::into_inner);
        conn.execute(
            "DELETE FROM tiles WHERE zoom_level = ?1 AND tile_column = ?2 AND tile_row = ?3",
            params![key.coord.z(), key.coord.x(), key.tms_row()],
        )
        .map(drop)
        .map_err(|e| sql_err("delete", key, &e))
    }
}
