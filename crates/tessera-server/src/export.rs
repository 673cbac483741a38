//! Exports: a layer's cached tiles written into one PMTiles or MBTiles
//! file, then moved into place (a local path) or streamed to object
//! storage through the multipart writer ([`tessera_store::upload`]).
//!
//! The archive is built in a temporary file (PMTiles needs to seek back to
//! its header): next to a local destination, so the finished file is
//! renamed into place and a reader never sees half an archive; in the
//! temporary directory for an object destination, whose object appears
//! only when the upload completes. Tiles are read in archive order
//! ([`archive_order`]), a bounded batch at a time, by a few threads.
//! Rendering what the cache lacks is the caller's step before (a seed of
//! the same plan).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use object_store::ObjectStore;
use tessera_archive::{ArchiveFormat, ArchiveWriter, TileMetadata, WriteError, archive_order};
use tessera_grid::mercator;
use tessera_grid::{BBox, TileCoord};
use tessera_store::object::open_url;
use tessera_store::upload::{Upload, UploadOptions, verify};
use tessera_store::{StoreError, TileKey, TileStore};
use tokio::io::AsyncReadExt;

use crate::model::tile_key;
use crate::plan::TilePlan;

/// Tiles read per round (spread over the reading threads) before they are
/// written to the archive: bounds the tiles held in memory.
const READ_BATCH: usize = 256;

/// Bytes read from the finished archive per chunk handed to the upload.
const UPLOAD_CHUNK: usize = 1 << 20;

/// Where an export goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// A local file.
    File(PathBuf),
    /// An object: `s3://bucket/key`, `gs://bucket/key` or
    /// `az://container/key`.
    Object(String),
}

impl Destination {
    /// A URL with scheme `s3`, `gs` or `az` (or `azure`) names an object,
    /// `file://` and anything that is not a URL a local path.
    pub fn parse(text: &str) -> Result<Destination, ExportError> {
        let bad = |m: String| ExportError::Destination(m);
        let Ok(url) = url::Url::parse(text) else {
            return Ok(Destination::File(PathBuf::from(text)));
        };
        match url.scheme() {
            "file" => url
                .to_file_path()
                .map(Destination::File)
                .map_err(|()| bad(format!("{text:?} is not an absolute file URL"))),
            "s3" | "gs" | "az" | "azure" => {
                if url.path().trim_matches('/').is_empty() || url.path().ends_with('/') {
                    return Err(bad(format!(
                        "{text:?} names no object: give the key, for example s3://bucket/exports/world.pmtiles"
                    )));
                }
                Ok(Destination::Object(text.to_string()))
            }
            other => Err(bad(format!(
                "unsupported scheme {other:?} in {text:?} (use a path, file://, s3://, gs:// or az://)"
            ))),
        }
    }
}

/// How an export is written.
#[derive(Debug, Clone)]
pub struct ExportOptions {
    /// PMTiles or MBTiles.
    pub format: ArchiveFormat,
    /// Threads reading tiles from the store.
    pub read_threads: usize,
    /// Object store client options (as `stores:` of type object take).
    pub store_options: BTreeMap<String, String>,
    /// Part size and parts in flight of an upload.
    pub upload: UploadOptions,
    /// Read an uploaded object back and compare its CRC32C.
    pub verify: bool,
    /// Where an archive bound for object storage is built (default: the
    /// system's temporary directory).
    pub temp_dir: Option<PathBuf>,
}

/// What an export wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exported {
    /// Tiles in the archive.
    pub tiles: u64,
    /// Planned tiles the cache did not hold (left out).
    pub missing: u64,
    /// Size of the archive.
    pub bytes: u64,
    /// Where it is.
    pub location: String,
    /// Parts of the upload (0 for a file or a single PUT).
    pub parts: usize,
    /// CRC32C of the uploaded bytes (objects only).
    pub crc32c: Option<u32>,
}

/// Why an export failed.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The plan cannot be exported to the format.
    #[error("{0}")]
    Unsupported(String),
    /// The destination is not usable.
    #[error("destination: {0}")]
    Destination(String),
    /// Reading a tile failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Writing the archive failed.
    #[error(transparent)]
    Archive(#[from] WriteError),
    /// The cache holds none of the planned tiles.
    #[error(
        "the cache holds none of the {0} planned tiles: seed them first or pass --render-missing"
    )]
    Empty(u64),
    /// A local file operation failed.
    #[error("{op} {path} failed")]
    Io {
        /// What was done.
        op: &'static str,
        /// The file.
        path: String,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The task writing the archive panicked or was cancelled.
    #[error("the archive writer stopped")]
    Task(#[source] tokio::task::JoinError),
    /// The upload failed (and was aborted).
    #[error("uploading {location} failed")]
    Upload {
        /// The object URL.
        location: String,
        /// The client's error.
        source: object_store::Error,
    },
}

fn io_err(op: &'static str, path: &Path, source: std::io::Error) -> ExportError {
    ExportError::Io {
        op,
        path: path.display().to_string(),
        source,
    }
}

/// Writes the plan's cached tiles into an archive at `destination`.
/// `progress` is called with the tiles handled so far after every batch.
pub async fn export(
    plan: &TilePlan,
    destination: &Destination,
    options: &ExportOptions,
    progress: impl FnMut(u64) + Send + 'static,
) -> Result<Exported, ExportError> {
    check(plan, options.format)?;
    let info = archive_info(plan);
    let store = plan
        .layer
        .cache
        .as_ref()
        .map(|c| c.store.clone())
        .ok_or_else(|| {
            ExportError::Unsupported(format!(
                "layer {:?} has no cache to export from",
                plan.layer.name
            ))
        })?;
    match destination {
        Destination::File(path) => {
            let dir = match path.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => PathBuf::from("."),
            };
            let spool = tempfile::Builder::new()
                .prefix(".tessera-export-")
                .suffix(".tmp")
                .tempfile_in(&dir)
                .map_err(|e| io_err("creating a temporary file in", &dir, e))?;
            let Written {
                tiles,
                missing,
                bytes,
            } = write_in_background(plan, store, &info, options, spool.path(), progress).await?;
            // Readable like any file the user writes (temporary files are
            // created private).
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(spool.path(), std::fs::Permissions::from_mode(0o644))
                    .map_err(|e| io_err("setting permissions of", spool.path(), e))?;
            }
            spool
                .persist(path)
                .map_err(|e| io_err("renaming the archive to", path, e.error))?;
            sync_dir(&dir).map_err(|e| io_err("syncing", &dir, e))?;
            Ok(Exported {
                tiles,
                missing,
                bytes,
                location: path.display().to_string(),
                parts: 0,
                crc32c: None,
            })
        }
        Destination::Object(url) => {
            let location = open_url(url, &options.store_options)
                .map_err(|e| ExportError::Destination(e.to_string()))?;
            options
                .upload
                .validate()
                .map_err(ExportError::Destination)?;
            let spool = match &options.temp_dir {
                Some(dir) => tempfile::NamedTempFile::new_in(dir),
                None => tempfile::NamedTempFile::new(),
            }
            .map_err(|e| {
                io_err(
                    "creating a temporary file in",
                    options.temp_dir.as_deref().unwrap_or(&std::env::temp_dir()),
                    e,
                )
            })?;
            let Written {
                tiles,
                missing,
                bytes,
            } = write_in_background(plan, store, &info, options, spool.path(), progress).await?;
            let upload_err = |source| ExportError::Upload {
                location: url.clone(),
                source,
            };
            let sent = upload_file(spool.path(), &location.store, &location.prefix, options)
                .await
                .map_err(|e| match e {
                    Sent::Read(e) => io_err("reading", spool.path(), e),
                    Sent::Store(e) => upload_err(e),
                })?;
            if options.verify {
                verify(&location.store, &location.prefix, &sent)
                    .await
                    .map_err(upload_err)?;
            }
            debug_assert_eq!(sent.bytes, bytes);
            Ok(Exported {
                tiles,
                missing,
                bytes,
                location: url.clone(),
                parts: sent.parts,
                crc32c: Some(sent.crc32c),
            })
        }
    }
}

/// Checks the plan's grid addresses tiles as the archive formats do.
fn check(plan: &TilePlan, format: ArchiveFormat) -> Result<(), ExportError> {
    if plan.grid.tms.is_xyz() {
        Ok(())
    } else {
        Err(ExportError::Unsupported(format!(
            "{} holds Web Mercator z/x/y tiles; grid {:?} is not one (export from a WebMercatorQuad grid)",
            format.extension(),
            plan.grid.tms.id
        )))
    }
}

/// Name, bounds, zooms and centre of the archive: the planned tiles' area
/// within the layer's extent.
fn archive_info(plan: &TilePlan) -> TileMetadata {
    let tms = &plan.grid.tms;
    let min_zoom = plan.ranges.iter().map(|r| r.z).min().unwrap_or(0);
    let max_zoom = plan.ranges.iter().map(|r| r.z).max().unwrap_or(0);
    let area = plan
        .ranges
        .iter()
        .filter(|r| r.z == max_zoom)
        .map(|r| tms.tile_range_bbox(r))
        .reduce(|a, b| a.union(&b));
    let layer = plan.layer.source.info().lonlat_bounds;
    let [mut w, mut s, mut e, mut n] = [
        layer.min_x.max(-180.0),
        layer.min_y.max(-mercator::MAX_LATITUDE),
        layer.max_x.min(180.0),
        layer.max_y.min(mercator::MAX_LATITUDE),
    ];
    if let Some(a) = area {
        let (aw, as_) = mercator::to_lonlat(a.min_x, a.min_y);
        let (ae, an) = mercator::to_lonlat(a.max_x, a.max_y);
        if aw < e && ae > w && as_ < n && an > s {
            (w, s, e, n) = (w.max(aw), s.max(as_), e.min(ae), n.min(an));
        }
    }
    let zoom = plan.layer.center_zoom(&plan.grid).clamp(min_zoom, max_zoom);
    TileMetadata {
        name: Some(plan.layer.name.clone()),
        description: Some(
            plan.layer
                .description
                .clone()
                .unwrap_or_else(|| plan.layer.title.clone()),
        ),
        attribution: plan.layer.attribution.clone(),
        format: plan.format,
        bounds: Some(BBox {
            min_x: w,
            min_y: s,
            max_x: e,
            max_y: n,
        }),
        center: Some((f64::midpoint(w, e), f64::midpoint(s, n), zoom)),
        min_zoom,
        max_zoom,
        vector_layers: plan
            .format
            .is_vector()
            .then(|| plan.layer.vector_layers(min_zoom, max_zoom)),
        version: None,
    }
}

async fn write_in_background(
    plan: &TilePlan,
    store: Arc<dyn TileStore>,
    info: &TileMetadata,
    options: &ExportOptions,
    path: &Path,
    progress: impl FnMut(u64) + Send + 'static,
) -> Result<Written, ExportError> {
    let (plan, info, path) = (plan.clone(), info.clone(), path.to_path_buf());
    let (format, threads) = (options.format, options.read_threads.max(1));
    tokio::task::spawn_blocking(move || {
        write_archive(&plan, &*store, &info, format, threads, &path, progress)
    })
    .await
    .map_err(ExportError::Task)?
}

/// What writing an archive did.
#[derive(Debug, Clone, Copy)]
struct Written {
    /// Tiles written.
    tiles: u64,
    /// Planned tiles the store lacked.
    missing: u64,
    /// The archive's size in bytes.
    bytes: u64,
}

/// Reads the planned tiles from `store` in archive order and writes them.
fn write_archive(
    plan: &TilePlan,
    store: &dyn TileStore,
    info: &TileMetadata,
    format: ArchiveFormat,
    threads: usize,
    path: &Path,
    mut progress: impl FnMut(u64),
) -> Result<Written, ExportError> {
    let key = |coord: TileCoord| tile_key(&plan.layer, &plan.grid, plan.format, coord);
    let mut writer = ArchiveWriter::create(format, path, info)?;
    let (mut handled, mut missing) = (0u64, 0u64);
    for block in archive_order(&plan.ranges) {
        for batch in block.chunks(READ_BATCH) {
            let keys: Vec<TileKey> = batch.iter().map(|c| key(*c)).collect();
            let tiles = read_parallel(store, &keys, threads)?;
            for (coord, tile) in batch.iter().zip(tiles) {
                match tile {
                    Some(data) => writer.add(*coord, &data)?,
                    None => missing += 1,
                }
            }
            handled += batch.len() as u64;
            progress(handled);
        }
    }
    if writer.tiles() == 0 {
        return Err(ExportError::Empty(handled));
    }
    let tiles = writer.tiles();
    let bytes = writer.finish()?;
    Ok(Written {
        tiles,
        missing,
        bytes,
    })
}

/// Gets `keys` on up to `threads` threads; results in the keys' order.
fn read_parallel(
    store: &dyn TileStore,
    keys: &[TileKey],
    threads: usize,
) -> Result<Vec<Option<Bytes>>, StoreError> {
    if threads <= 1 || keys.len() <= 1 {
        return keys.iter().map(|k| store.get(k)).collect();
    }
    let per = keys.len().div_ceil(threads);
    std::thread::scope(|s| {
        let parts: Vec<_> = keys
            .chunks(per)
            .map(|chunk| {
                s.spawn(move || {
                    chunk
                        .iter()
                        .map(|k| store.get(k))
                        .collect::<Result<Vec<_>, _>>()
                })
            })
            .collect();
        let mut out = Vec::with_capacity(keys.len());
        for part in parts {
            out.extend(part.join().map_err(|_| StoreError::Invalid {
                store: store.name().to_string(),
                message: "a tile reader panicked".into(),
            })??);
        }
        Ok(out)
    })
}

enum Sent {
    Read(std::io::Error),
    Store(object_store::Error),
}

/// Streams the file at `path` into an [`Upload`]; aborts it on any error.
async fn upload_file(
    path: &Path,
    store: &Arc<dyn ObjectStore>,
    object: &object_store::path::Path,
    options: &ExportOptions,
) -> Result<tessera_store::upload::Uploaded, Sent> {
    let mut file = tokio::fs::File::open(path).await.map_err(Sent::Read)?;
    let mut up = Upload::new(store.clone(), object.clone(), options.upload);
    let mut chunk = Vec::with_capacity(UPLOAD_CHUNK);
    loop {
        chunk.clear();
        let read = (&mut file)
            .take(UPLOAD_CHUNK as u64)
            .read_to_end(&mut chunk)
            .await;
        match read {
            Ok(0) => break,
            Ok(_) => up.write(&chunk).await.map_err(Sent::Store)?,
            Err(e) => {
                up.abort().await;
                return Err(Sent::Read(e));
            }
        }
    }
    up.finish().await.map_err(Sent::Store)
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn destinations() {
        assert_eq!(
            Destination::parse("out/world.pmtiles").unwrap(),
            Destination::File("out/world.pmtiles".into())
        );
        assert_eq!(
            Destination::parse("/tmp/w.mbtiles").unwrap(),
            Destination::File("/tmp/w.mbtiles".into())
        );
        assert_eq!(
            Destination::parse("file:///tmp/w.pmtiles").unwrap(),
            Destination::File("/tmp/w.pmtiles".into())
        );
        assert_eq!(
            Destination::parse("s3://b/exports/w.pmtiles").unwrap(),
            Destination::Object("s3://b/exports/w.pmtiles".into())
        );
        for bad in ["s3://b", "s3://b/dir/", "ftp://h/x.pmtiles"] {
            assert!(
                matches!(Destination::parse(bad), Err(ExportError::Destination(_))),
                "{bad}"
            );
        }
    }
}
