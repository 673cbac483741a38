//! Tiles as files in a `layer/grid/z/x/y.ext` tree that other tools (nginx,
//! GDAL, mbutil, QGIS) read directly.
//!
//! A tile is written whole before it has its name, so a reader sees the old
//! tile, the new tile or nothing, never part of one. Where the file system
//! allows (Linux `O_TMPFILE`: ext4, XFS, btrfs, tmpfs), a new tile is an
//! unnamed file in its own directory, linked to its name when written: the
//! writers share no directory, and a crash leaves nothing behind. Otherwise,
//! and to replace a tile, the file is staged in this process's own staging
//! directory and renamed into place. Staging directories of processes that
//! died are swept when a store opens: each live process holds a lock on its
//! directory's lock file.

use std::collections::BTreeSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::num::NonZeroUsize;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use serde::Deserialize;

use crate::fingerprint::{FINGERPRINT_DIR, claim_in_dir};
use crate::open_files::{DEFAULT_OPEN_FILES, DEFAULT_OPEN_FILES_VALID, OpenFile, OpenFiles};
use tessera_grid::TileCoord;

use crate::{
    AreaRange, Durability, HeldFile, HeldTile, Peek, Peeked, StoreError, StoredTile, TileArea,
    TileKey, TileStore, TruncateReport, check_not_empty, content_hash,
};

const STAGING_DIR: &str = ".staging";

/// The most tiles of one batch written as unnamed files (each holds a
/// descriptor until the batch is published); the rest are staged by name.
const MAX_UNNAMED_IN_BATCH: usize = 256;

/// A tile written whole, not yet under its name.
#[derive(Debug)]
enum Staged {
    /// An unnamed file in the tile's directory.
    Unnamed(File),
    /// A file in the staging directory.
    Named(PathBuf),
}

impl Staged {
    /// Drops the file unpublished.
    fn discard(self) {
        if let Staged::Named(path) = self {
            let _ = fs::remove_file(path);
        }
    }
}

/// Content hashes of files kept by default (80 bytes each: 5 MiB).
pub const DEFAULT_HASH_CACHE: usize = 65_536;

/// Row order of the directory tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FileLayout {
    /// `z/x/y` with rows from the top (OSM, XYZ, what Leaflet and nginx users expect).
    #[default]
    Xyz,
    /// `z/x/y` with rows from the bottom (TMS, as gdal2tiles writes).
    Tms,
}

/// A tile store on the local file system.
#[derive(Debug)]
pub struct FileStore {
    root: PathBuf,
    /// `root`, open: hits open their tile relative to it (a shorter path
    /// walk than from `/`). A root directory removed while the store is
    /// open leaves hits to the path-based reads; one renamed away would
    /// still be read by hits until a restart (a reload keeps a store whose
    /// settings did not change).
    root_dir: File,
    layout: FileLayout,
    staging: PathBuf,
    next_staging: AtomicU64,
    /// New tiles are written as unnamed files in their own directory
    /// (probed when the store opens).
    unnamed: bool,
    /// Held (locked) for as long as the store is open, so that no other
    /// process sweeps our staging directory.
    _staging_lock: File,
    /// Content hashes of files read lately; `None`: every hit is read.
    hashes: Option<KnownHashes>,
    /// Open files of tiles hit lately; `None`: every hit opens its file.
    open_files: Option<OpenFiles>,
}

/// What changes whenever a file's content does: a tile replaced by a
/// rename is another inode; one written in place (by another tool) has a
/// new change time (on kernels before 6.13, a rewrite of the same length
/// within one clock tick of the last change can keep it). Hard links of one
/// file share it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct FileId {
    dev: u64,
    ino: u64,
    pub(crate) len: u64,
    ctime: (i64, i64),
    mtime: (i64, i64),
}

/// A file's identity and content hash, or nothing.
type Slot = Option<(FileId, u128)>;

/// Content hashes by [`FileId`] in a table where each id has one slot (a
/// newer id in the same slot replaces the older): a lookup is one memory
/// access and a hit changes nothing.
#[derive(Debug)]
struct KnownHashes {
    slots: Mutex<Box<[Slot]>>,
    mask: usize,
}

impl KnownHashes {
    /// A table of `entries` slots, rounded up to a power of two.
    fn new(entries: usize) -> KnownHashes {
        let len = entries.max(1).next_power_of_two();
        KnownHashes {
            slots: Mutex::new(vec![None; len].into_boxed_slice()),
            mask: len - 1,
        }
    }

    fn slot(&self, id: &FileId) -> usize {
        let mixed = (id.ino ^ id.dev.rotate_left(32) ^ id.ctime.1 as u64)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (mixed >> 32) as usize & self.mask
    }

    fn get(&self, id: &FileId) -> Option<u128> {
        let slot = self.slot(id);
        let slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        match &slots[slot] {
            Some((held, hash)) if held == id => Some(*hash),
            _ => None,
        }
    }

    fn put(&self, id: FileId, hash: u128) {
        let slot = self.slot(&id);
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)[slot] = Some((id, hash));
    }
}

impl FileId {
    pub(crate) fn of(meta: &fs::Metadata) -> FileId {
        FileId {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            ctime: (meta.ctime(), meta.ctime_nsec()),
            mtime: (meta.mtime(), meta.mtime_nsec()),
        }
    }
}

impl FileStore {
    /// Opens (creating if needed) a store rooted at `root`, and sweeps the
    /// staging files that processes which died left behind.
    pub fn open(root: impl Into<PathBuf>, layout: FileLayout) -> Result<FileStore, StoreError> {
        let root = root.into();
        let io_err = |op: &'static str, path: &Path, e: io::Error| StoreError::Io {
            store: "file".into(),
            op,
            key: path.display().to_string(),
            source: Box::new(e),
        };
        let staging_root = root.join(STAGING_DIR);
        fs::create_dir_all(&staging_root).map_err(|e| io_err("create", &staging_root, e))?;
        sweep_staging(&staging_root).map_err(|e| io_err("sweep", &staging_root, e))?;
        let (staging, lock) =
            claim_staging_dir(&staging_root).map_err(|e| io_err("create", &staging_root, e))?;
        let root_dir = File::open(&root).map_err(|e| io_err("open", &root, e))?;
        let unnamed = unnamed::supported(&staging);
        Ok(FileStore {
            root,
            root_dir,
            layout,
            staging,
            next_staging: AtomicU64::new(0),
            unnamed,
            _staging_lock: lock,
            hashes: Some(KnownHashes::new(DEFAULT_HASH_CACHE)),
            open_files: NonZeroUsize::new(DEFAULT_OPEN_FILES)
                .map(|n| OpenFiles::new(n, DEFAULT_OPEN_FILES_VALID)),
        })
    }

    /// Keeps the content hashes of at most `entries` files read lately (the
    /// default is [`DEFAULT_HASH_CACHE`]), so that [`TileStore::peek_file`]
    /// can answer with the open file when it is unchanged; 0 keeps none and
    /// `peek_file` then always reads.
    #[must_use]
    pub fn with_hash_cache(mut self, entries: usize) -> FileStore {
        self.hashes = (entries > 0).then(|| KnownHashes::new(entries));
        self
    }

    /// Keeps the open files of at most `entries` tiles hit lately (the
    /// default is [`DEFAULT_OPEN_FILES`]), each used for `valid` after it
    /// was opened (see [`crate::open_files`]), so that a hit answered with
    /// its file ([`TileStore::peek_file`]) neither opens nor closes it;
    /// 0 keeps none.
    #[must_use]
    pub fn with_open_files(mut self, entries: usize, valid: Duration) -> FileStore {
        self.open_files = NonZeroUsize::new(entries).map(|n| OpenFiles::new(n, valid));
        self
    }

    /// Writes every tile through the staging directory and a rename, as on
    /// a file system without unnamed files (the comparison case of the
    /// tests and benchmarks).
    #[must_use]
    pub fn staged_by_name(mut self) -> FileStore {
        self.unnamed = false;
        self
    }

    /// Whether new tiles are written as unnamed files in their directory
    /// (the kernel and file system allow `O_TMPFILE`, and it was not turned
    /// off with [`FileStore::staged_by_name`]).
    pub fn writes_unnamed(&self) -> bool {
        self.unnamed
    }

    fn known_hash(&self, id: &FileId) -> Option<u128> {
        self.hashes.as_ref()?.get(id)
    }

    fn remember_hash(&self, id: FileId, hash: u128) {
        if let Some(hashes) = &self.hashes {
            hashes.put(id, hash);
        }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The file name's row of `key` in this store's layout.
    fn row_of(&self, key: &TileKey) -> u32 {
        match self.layout {
            FileLayout::Xyz => key.coord.y(),
            FileLayout::Tms => key.tms_row(),
        }
    }

    /// Where `key` lives (the file may not exist).
    pub fn path_of(&self, key: &TileKey) -> PathBuf {
        let row = self.row_of(key);
        let mut p = self.root.join(&key.layer);
        p.push(&key.grid);
        p.push(key.coord.z().to_string());
        p.push(key.coord.x().to_string());
        p.push(format!("{row}.{}", key.format.extension()));
        p
    }

    /// Opens the tile of `key` for reading: relative to the root directory
    /// (`openat`) where the system has it, else by its whole path.
    fn open_tile(&self, key: &TileKey) -> io::Result<File> {
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::{AsRawFd, FromRawFd};
            let row = self.row_of(key);
            let mut buf = [0u8; 512];
            let mut cursor = io::Cursor::new(&mut buf[..]);
            let (z, x, ext) = (key.coord.z(), key.coord.x(), key.format.extension());
            // A name too long for the buffer or with a NUL in it takes the
            // whole path.
            if write!(cursor, "{}/{}/{z}/{x}/{row}.{ext}\0", key.layer, key.grid).is_ok() {
                let len = usize::try_from(cursor.position()).unwrap_or(usize::MAX);
                if let Ok(relative) = std::ffi::CStr::from_bytes_with_nul(&buf[..len]) {
                    // SAFETY: `relative` is a NUL-terminated string and the
                    // directory descriptor is open for the call.
                    let fd = unsafe {
                        libc::openat(
                            self.root_dir.as_raw_fd(),
                            relative.as_ptr(),
                            libc::O_RDONLY | libc::O_CLOEXEC,
                        )
                    };
                    if fd < 0 {
                        return Err(io::Error::last_os_error());
                    }
                    // SAFETY: `fd` was just opened and is owned by nothing else.
                    return Ok(unsafe { File::from_raw_fd(fd) });
                }
            }
        }
        File::open(self.path_of(key))
    }

    /// [`TileStore::peek_file`], or [`TileStore::peek`] when `file` is
    /// false (bytes only).
    fn peek_open(&self, key: &TileKey, file: bool) -> Option<Peeked> {
        self.peek_or_missing(key, file).ok().flatten()
    }

    /// [`Self::peek_open`], and `Err(Missing)` when the tile's file is
    /// not there (opening it found no such file).
    fn peek_or_missing(&self, key: &TileKey, file: bool) -> Result<Option<Peeked>, Missing> {
        let held = if file { self.open_files.as_ref() } else { None };
        if let Some(open) = held.and_then(|files| files.get(key))
            && page_cached::resident(&open.file, open.id.len)
        {
            return Ok(Some(Peeked::File(HeldFile {
                file: open.file,
                len: open.id.len,
                hash: open.hash,
                stored_at: open.stored_at,
            })));
        }
        match self.open_tile(key) {
            Ok(f) => Ok(self.peek_opened(key, f, file)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(Missing),
            Err(_) => Ok(None),
        }
    }

    /// What [`Self::peek_open`] answers for the tile's file `f`, opened.
    fn peek_opened(&self, key: &TileKey, mut f: File, file: bool) -> Option<Peeked> {
        let held = if file { self.open_files.as_ref() } else { None };
        let meta = f.metadata().ok()?;
        let id = FileId::of(&meta);
        let stored_at = meta.modified().ok();
        if file
            && let Some(hash) = self.known_hash(&id)
            && page_cached::resident(&f, id.len)
        {
            let f = Arc::new(f);
            if let Some(files) = held
                && let Some(open) = OpenFile::new(f.clone(), &meta, id, hash, stored_at)
            {
                files.put(key, open);
            }
            return Some(Peeked::File(HeldFile {
                file: f,
                len: id.len,
                hash,
                stored_at,
            }));
        }
        let data = page_cached::read(&mut f, id.len)?;
        let hash = content_hash(&data);
        self.remember_hash(id, hash);
        Some(Peeked::Held(HeldTile {
            hash,
            bytes: Bytes::from(data),
            stored_at,
        }))
    }

    fn err(&self, op: &'static str, key: &dyn std::fmt::Display, e: io::Error) -> StoreError {
        StoreError::Io {
            store: self.name().into(),
            op,
            key: key.to_string(),
            source: Box::new(e),
        }
    }

    /// Writes `data` whole into a file without its name, synced when asked:
    /// an unnamed file in `dir` (the tile's directory) when `unnamed`, else
    /// a new file in the staging directory.
    fn stage(
        &self,
        data: &[u8],
        durability: Durability,
        dir: &Path,
        unnamed: bool,
    ) -> io::Result<Staged> {
        let write = |mut f: File| {
            f.write_all(data)?;
            if durability == Durability::Synced {
                f.sync_data()?;
            }
            Ok::<_, io::Error>(f)
        };
        if unnamed {
            return write(unnamed::create(dir)?).map(Staged::Unnamed);
        }
        let path = self.staging_path();
        match File::create(&path).and_then(write) {
            Ok(_) => Ok(Staged::Named(path)),
            Err(e) => {
                let _ = fs::remove_file(&path);
                Err(e)
            }
        }
    }

    /// A new name in the staging directory.
    fn staging_path(&self) -> PathBuf {
        let n = self.next_staging.fetch_add(1, Ordering::Relaxed);
        self.staging.join(format!("{n}.tmp"))
    }

    /// Gives a staged file the name `target`, replacing any file there.
    fn publish(&self, staged: Staged, target: &Path) -> io::Result<()> {
        let tmp = match staged {
            Staged::Named(tmp) => tmp,
            Staged::Unnamed(file) => match unnamed::link(&file, target) {
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    // A link never replaces a name: a staging name, renamed.
                    let tmp = self.staging_path();
                    unnamed::link(&file, &tmp)?;
                    tmp
                }
                linked => return linked,
            },
        };
        fs::rename(&tmp, target).inspect_err(|_| {
            let _ = fs::remove_file(&tmp);
        })
    }

    /// Creates the tile's directory; returns the directories whose entries
    /// changed and must be synced for a durable write.
    fn ensure_parent(&self, target: &Path, dirty: &mut BTreeSet<PathBuf>) -> io::Result<()> {
        let parent = target.parent().unwrap_or(&self.root);
        if !parent.is_dir() {
            fs::create_dir_all(parent)?;
            // New directories are entries of their parents: sync the chain.
            let mut p = parent;
            while let Some(up) = p.parent() {
                dirty.insert(up.to_path_buf());
                if up == self.root {
                    break;
                }
                p = up;
            }
        }
        dirty.insert(parent.to_path_buf());
        Ok(())
    }

    /// Stages, publishes and (for synced writes) syncs a batch of tiles.
    fn write_batch(
        &self,
        tiles: &[(TileKey, Bytes)],
        durability: Durability,
    ) -> Result<(), StoreError> {
        for (key, data) in tiles {
            check_not_empty(self.name(), key, data)?;
        }
        let mut dirty = BTreeSet::new();
        let mut staged = Vec::with_capacity(tiles.len());
        let mut failure = None;
        // Where the file system can be synced whole, a batch is made durable
        // with two `syncfs` calls instead of a sync per file and directory:
        // one before the renames (every staged file's data is on disk before
        // its name is, so a power failure never leaves a tile whose name is
        // there and whose data is not), one after (the renames and new
        // directories).
        let whole_fs = durability == Durability::Synced && SYNCFS;
        let per_file = if whole_fs {
            Durability::Buffered
        } else {
            durability
        };
        for (i, (key, data)) in tiles.iter().enumerate() {
            let target = self.path_of(key);
            let dir = target.parent().unwrap_or(&self.root);
            // An unnamed file holds a descriptor until it is published.
            let unnamed = self.unnamed && i < MAX_UNNAMED_IN_BATCH;
            match self
                .ensure_parent(&target, &mut dirty)
                .and_then(|()| self.stage(data, per_file, dir, unnamed))
            {
                Ok(tmp) => staged.push((key, tmp, target)),
                Err(e) => {
                    failure = Some(self.err("put", key, e));
                    break;
                }
            }
        }
        if whole_fs
            && failure.is_none()
            && let Err(e) = sync_file_system(&self.root)
        {
            failure = Some(self.err("sync", &self.root.display(), e));
        }
        for (key, tmp, target) in staged {
            if failure.is_some() {
                tmp.discard();
                continue;
            }
            if let Err(e) = self.publish(tmp, &target) {
                failure = Some(self.err("put", key, e));
            }
        }
        if let Some(e) = failure {
            return Err(e);
        }
        if whole_fs {
            sync_file_system(&self.root).map_err(|e| self.err("sync", &self.root.display(), e))?;
        } else if durability == Durability::Synced {
            for dir in dirty {
                sync_dir(&dir).map_err(|e| self.err("sync", &dir.display(), e))?;
            }
        }
        Ok(())
    }
}

/// The subdirectories of `dir` with their names, the store's own (whose
/// names start with a dot) left out.
fn subdirs(dir: &Path) -> io::Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with('.') && e.file_type()?.is_dir() {
            out.push((name, e.path()));
        }
    }
    Ok(out)
}

/// A tile's file found not to exist ([`FileStore::peek_or_missing`]).
struct Missing;

impl TileStore for FileStore {
    /// A walk of `root/layer/grid/z/x/row.ext`.
    fn scan(
        &self,
        matrix: crate::MatrixOf<'_>,
        f: &mut dyn FnMut(TileKey, u64),
    ) -> Result<bool, StoreError> {
        let fail = |e: &io::Error| StoreError::Io {
            store: "file".into(),
            op: "scan",
            key: self.root.display().to_string(),
            source: e.to_string().into(),
        };
        let mut walk = || -> io::Result<()> {
            for (layer, layer_dir) in subdirs(&self.root)? {
                for (grid, grid_dir) in subdirs(&layer_dir)? {
                    for (z, z_dir) in subdirs(&grid_dir)? {
                        let Ok(z) = z.parse::<u8>() else { continue };
                        let Some((width, height)) = matrix(&grid, z) else {
                            continue;
                        };
                        for (x, x_dir) in subdirs(&z_dir)? {
                            let Ok(x) = x.parse::<u32>() else { continue };
                            for e in std::fs::read_dir(&x_dir)? {
                                let e = e?;
                                let name = e.file_name().to_string_lossy().into_owned();
                                let Some((row, ext)) = name.split_once('.') else {
                                    continue;
                                };
                                let (Ok(row), Some(format)) = (
                                    row.parse::<u32>(),
                                    tessera_grid::TileFormat::from_extension(ext),
                                ) else {
                                    continue;
                                };
                                let y = match self.layout {
                                    FileLayout::Xyz => row,
                                    FileLayout::Tms => match height.checked_sub(1 + row) {
                                        Some(y) => y,
                                        None => continue,
                                    },
                                };
                                let meta = e.metadata()?;
                                if !meta.is_file() {
                                    continue;
                                }
                                let key = TileKey {
                                    layer: layer.clone(),
                                    grid: grid.clone(),
                                    coord: tessera_grid::TileCoord::restored(z, x, y),
                                    matrix_height: height,
                                    matrix_width: width,
                                    format,
                                };
                                f(key, meta.len());
                            }
                        }
                    }
                }
            }
            Ok(())
        };
        walk().map_err(|e| fail(&e))?;
        Ok(true)
    }

    /// The root's layer directories named with `prefix` that have a
    /// directory for `grid` (any format: the format is in the file names).
    fn layer_keys(
        &self,
        prefix: &str,
        grid: &str,
        _format: tessera_grid::TileFormat,
    ) -> Result<Option<Vec<String>>, StoreError> {
        let mut keys: Vec<String> = subdirs(&self.root)
            .map_err(|e| StoreError::Io {
                store: "file".into(),
                op: "list",
                key: self.root.display().to_string(),
                source: e.to_string().into(),
            })?
            .into_iter()
            .filter(|(name, dir)| name.starts_with(prefix) && dir.join(grid).is_dir())
            .map(|(name, _)| name)
            .collect();
        keys.sort();
        Ok(Some(keys))
    }

    /// A walk of `root/layer/grid/z/x/`, summing the files' sizes (the
    /// store's own directories, whose names start with a dot, left out).
    fn count_by_zoom(&self) -> Result<Option<Vec<crate::quota::ZoomUsage>>, StoreError> {
        let fail = |e: &io::Error| StoreError::Io {
            store: "file".into(),
            op: "count",
            key: self.root.display().to_string(),
            source: e.to_string().into(),
        };
        let mut counts: std::collections::BTreeMap<(String, u8), (u64, u64)> =
            std::collections::BTreeMap::new();
        let mut walk = || -> io::Result<()> {
            for (layer, layer_dir) in subdirs(&self.root)? {
                for (_, grid_dir) in subdirs(&layer_dir)? {
                    for (z, z_dir) in subdirs(&grid_dir)? {
                        let Ok(z) = z.parse::<u8>() else { continue };
                        let c = counts.entry((layer.clone(), z)).or_default();
                        for (_, x_dir) in subdirs(&z_dir)? {
                            for f in std::fs::read_dir(&x_dir)? {
                                let f = f?;
                                let meta = f.metadata()?;
                                if meta.is_file() {
                                    c.0 += 1;
                                    c.1 += meta.len();
                                }
                            }
                        }
                    }
                }
            }
            Ok(())
        };
        walk().map_err(|e| fail(&e))?;
        counts.retain(|_, c| c.0 > 0);
        Ok(Some(crate::quota::zoom_usage(counts)))
    }

    #[allow(clippy::unnecessary_literal_bound)] // the trait allows owned names
    fn name(&self) -> &str {
        "file"
    }

    fn get(&self, key: &TileKey) -> Result<Option<Bytes>, StoreError> {
        match fs::read(self.path_of(key)) {
            // A zero-length file is what a power failure can leave of a
            // buffered write on some file systems: it is not a tile.
            Ok(data) if data.is_empty() => Ok(None),
            Ok(data) => Ok(Some(Bytes::from(data))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.err("get", key, e)),
        }
    }

    /// Reads the tile only if the kernel holds all of it in the page cache
    /// (`preadv2` with `RWF_NOWAIT`, Linux): a hit on a warm file is then
    /// served on the caller's thread instead of a blocking thread. Any
    /// read that would wait for the disk, a missing or empty file, or
    /// another system answers `None` and the caller reads with `get`.
    fn peek(&self, key: &TileKey) -> Option<HeldTile> {
        match self.peek_open(key, false)? {
            Peeked::Held(held) => Some(held),
            Peeked::File(_) => None,
        }
    }

    /// The open file when its content hash is known (it was read lately
    /// and has not changed since) and all of it is in the page cache; else
    /// its bytes as [`TileStore::peek`] reads them.
    fn peek_file(&self, key: &TileKey) -> Option<Peeked> {
        self.peek_open(key, true)
    }

    /// `Absent` when the tile's file is not there: a tile is renamed into
    /// place whole before its `put` returns, so a missing file is a tile
    /// not stored (the same open `get` would make).
    fn peek_or_absent(&self, key: &TileKey) -> Peek {
        match self.peek_or_missing(key, false) {
            Ok(Some(Peeked::Held(held))) => Peek::Held(held),
            Ok(_) => Peek::Unknown,
            Err(Missing) => Peek::Absent,
        }
    }

    /// The file's modification time is when the tile was stored (a tile is
    /// renamed into place whole, never written in place).
    fn get_stored(&self, key: &TileKey) -> Result<Option<StoredTile>, StoreError> {
        let read = || -> io::Result<(Vec<u8>, std::time::SystemTime)> {
            let mut f = File::open(self.path_of(key))?;
            let stored_at = f.metadata()?.modified()?;
            let mut data = Vec::new();
            io::Read::read_to_end(&mut f, &mut data)?;
            Ok((data, stored_at))
        };
        match read() {
            Ok((data, _)) if data.is_empty() => Ok(None),
            Ok((data, stored_at)) => Ok(Some(StoredTile {
                bytes: Bytes::from(data),
                stored_at: Some(stored_at),
            })),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.err("get", key, e)),
        }
    }

    /// Kept in `root/.fingerprints/<layer>`.
    fn claim_fingerprint(&self, layer: &str, fingerprint: &str) -> Result<String, StoreError> {
        let dir = self.root.join(FINGERPRINT_DIR);
        claim_in_dir(&dir, layer, fingerprint)
            .map_err(|e| self.err("claim", &dir.join(layer).display(), e))
    }

    fn put(&self, key: &TileKey, data: Bytes, durability: Durability) -> Result<(), StoreError> {
        self.write_batch(&[(key.clone(), data)], durability)
    }

    fn put_many(
        &self,
        tiles: Vec<(TileKey, Bytes)>,
        durability: Durability,
    ) -> Result<(), StoreError> {
        self.write_batch(&tiles, durability)
    }

    fn delete(&self, key: &TileKey) -> Result<(), StoreError> {
        match fs::remove_file(self.path_of(key)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(self.err("delete", key, e)),
        }
    }

    /// Removes the area's tiles that are on disk: the `x` directories of
    /// each zoom that fall in a range are listed and their files in range
    /// removed (what the store holds, however large the range); a range of
    /// a few tiles is deleted by computed path instead. Empty `x`
    /// directories are removed with their last tile.
    fn truncate(&self, area: &TileArea) -> Result<TruncateReport, StoreError> {
        let mut report = TruncateReport::default();
        let ext = format!(".{}", area.format.extension());
        let io_err = |e: io::Error, at: &Path| self.err("truncate", &at.display(), e);
        for AreaRange {
            range,
            matrix_width,
            matrix_height,
        } in &area.ranges
        {
            area.progress.check(self.name())?;
            if range.count() <= COMPUTED_TRUNCATE_TILES {
                for y in range.min_y..=range.max_y {
                    for x in range.min_x..=range.max_x {
                        let key = TileKey {
                            layer: area.layer.clone(),
                            grid: area.grid.clone(),
                            coord: TileCoord::restored(range.z, x, y),
                            matrix_height: *matrix_height,
                            matrix_width: *matrix_width,
                            format: area.format,
                        };
                        let path = self.path_of(&key);
                        if removed(&path).map_err(|e| io_err(e, &path))? {
                            report.objects_deleted += 1;
                            area.progress.add(1);
                        }
                    }
                }
                continue;
            }
            let zoom_dir = self
                .root
                .join(&area.layer)
                .join(&area.grid)
                .join(range.z.to_string());
            let columns = match fs::read_dir(&zoom_dir) {
                Ok(c) => c,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_err(e, &zoom_dir)),
            };
            for column in columns {
                let column = column.map_err(|e| io_err(e, &zoom_dir))?;
                let Some(x) = column
                    .file_name()
                    .to_str()
                    .and_then(|n| n.parse::<u32>().ok())
                else {
                    continue;
                };
                if !(range.min_x..=range.max_x).contains(&x) {
                    continue;
                }
                area.progress.check(self.name())?;
                let dir = column.path();
                let files = match fs::read_dir(&dir) {
                    Ok(f) => f,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(io_err(e, &dir)),
                };
                for file in files {
                    let file = file.map_err(|e| io_err(e, &dir))?;
                    let name = file.file_name();
                    let Some(row) = name
                        .to_str()
                        .and_then(|n| n.strip_suffix(ext.as_str()))
                        .and_then(|r| r.parse::<u32>().ok())
                    else {
                        continue;
                    };
                    let y = match self.layout {
                        FileLayout::Xyz => row,
                        FileLayout::Tms => match matrix_height.checked_sub(row + 1) {
                            Some(y) => y,
                            None => continue,
                        },
                    };
                    if !(range.min_y..=range.max_y).contains(&y) {
                        continue;
                    }
                    let path = file.path();
                    if removed(&path).map_err(|e| io_err(e, &path))? {
                        report.objects_deleted += 1;
                        area.progress.add(1);
                    }
                }
                // Only an empty directory goes (other formats' tiles stay).
                let _ = fs::remove_dir(&dir);
            }
        }
        Ok(report)
    }

    fn exists(&self, key: &TileKey) -> Result<bool, StoreError> {
        match fs::metadata(self.path_of(key)) {
            Ok(m) => Ok(m.len() > 0),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(self.err("exists", key, e)),
        }
    }
}

/// Removes the file at `path`: `true` when there was one.
fn removed(path: &Path) -> io::Result<bool> {
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// A truncated range of at most this many tiles is deleted by computed
/// path; a larger one by listing what is stored in its columns.
const COMPUTED_TRUNCATE_TILES: u64 = 4096;

/// Whether [`sync_file_system`] syncs the whole file system (Linux).
const SYNCFS: bool = cfg!(target_os = "linux");

/// Writes every dirty file and directory of the file system holding `dir`
/// to stable storage (`syncfs`).
#[cfg(target_os = "linux")]
fn sync_file_system(dir: &Path) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let f = File::open(dir)?;
    // SAFETY: the descriptor is open for the duration of the call.
    if unsafe { libc::syncfs(f.as_raw_fd()) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
fn sync_file_system(_dir: &Path) -> io::Result<()> {
    unreachable!("SYNCFS is false here")
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Removes the staging directories whose owner is gone (its lock is free).
fn sweep_staging(staging_root: &Path) -> io::Result<()> {
    for entry in fs::read_dir(staging_root)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "lock") {
            let Ok(lock) = OpenOptions::new().write(true).open(&path) else {
                continue;
            };
            if lock.try_lock().is_ok() {
                let dir = path.with_extension("");
                match fs::remove_dir_all(&dir) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                }
                fs::remove_file(&path)?;
            }
        } else if path.is_dir() && !path.with_extension("lock").exists() {
            // A directory is created only after its lock file is locked, so
            // one without a lock file belonged to a process that was swept.
            fs::remove_dir_all(&path)?;
        }
    }
    Ok(())
}

/// Creates and locks this process's staging directory.
fn claim_staging_dir(staging_root: &Path) -> io::Result<(PathBuf, File)> {
    let pid = std::process::id();
    for attempt in 0..100 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let id = format!("{pid}-{nanos}-{attempt}");
        let lock_path = staging_root.join(format!("{id}.lock"));
        let lock = match OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&lock_path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        };
        lock.lock()?;
        // Between create and lock another process's sweep may have taken and
        // removed the file: only a lock on the file still at the path counts.
        match fs::metadata(&lock_path) {
            Ok(m) if m.ino() == lock.metadata()?.ino() => {}
            _ => continue,
        }
        let dir = staging_root.join(&id);
        fs::create_dir(&dir)?;
        return Ok((dir, lock));
    }
    Err(io::Error::other("could not claim a staging directory"))
}

impl Drop for FileStore {
    fn drop(&mut self) {
        // Leftovers of failed writes are removed; the lock file goes last.
        let _ = fs::remove_dir_all(&self.staging);
        let _ = fs::remove_file(self.staging.with_extension("lock"));
    }
}

/// Files created without a name (`O_TMPFILE`) and linked to one when
/// written whole (Linux).
mod unnamed {
    use std::fs::File;
    use std::io;
    use std::path::Path;

    /// Whether unnamed files can be created in `dir` and linked to a name
    /// there (the kernel and the file system both allow it; `/proc` is
    /// mounted). Leaves nothing in `dir`.
    pub fn supported(dir: &Path) -> bool {
        let Ok(file) = create(dir) else {
            return false;
        };
        let probe = dir.join("unnamed.probe");
        let linked = link(&file, &probe).is_ok();
        let _ = std::fs::remove_file(&probe);
        linked
    }

    /// A new file without a name in directory `dir`, open for writing; it
    /// vanishes when closed unless [`link`]ed first.
    #[cfg(target_os = "linux")]
    pub fn create(dir: &Path) -> io::Result<File> {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .mode(0o666)
            .custom_flags(libc::O_TMPFILE)
            .open(dir)
    }

    #[cfg(not(target_os = "linux"))]
    pub fn create(_dir: &Path) -> io::Result<File> {
        Err(io::ErrorKind::Unsupported.into())
    }

    /// Names `file` `path` (in the directory it was created in); fails
    /// with `AlreadyExists` when the name is taken.
    #[cfg(target_os = "linux")]
    pub fn link(file: &File, path: &Path) -> io::Result<()> {
        use std::ffi::CString;
        use std::os::fd::AsRawFd;
        use std::os::unix::ffi::OsStrExt;
        let from = CString::new(format!("/proc/self/fd/{}", file.as_raw_fd()))?;
        let to = CString::new(path.as_os_str().as_bytes())?;
        // SAFETY: both strings are NUL-terminated and outlive the call; the
        // descriptor named by `from` is open for its duration.
        let done = unsafe {
            libc::linkat(
                libc::AT_FDCWD,
                from.as_ptr(),
                libc::AT_FDCWD,
                to.as_ptr(),
                libc::AT_SYMLINK_FOLLOW,
            )
        };
        if done == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    #[cfg(not(target_os = "linux"))]
    pub fn link(_file: &File, _path: &Path) -> io::Result<()> {
        Err(io::ErrorKind::Unsupported.into())
    }
}

/// Reads that never wait for the disk.
mod page_cached {
    use std::fs::File;
    use std::io;

    /// Largest file read this way; bigger ones go through a blocking read.
    const MAX_BYTES: u64 = 4 << 20;

    /// The whole of `f` (`len` bytes by its metadata) when every page of it
    /// is in the page cache, else `None`. Empty files are `None` (not a
    /// tile); a file that grew or shrank since `len` was read is `None`.
    #[cfg(target_os = "linux")]
    pub fn read(f: &mut File, len: u64) -> Option<Vec<u8>> {
        use std::os::fd::AsRawFd;
        if len == 0 || len > MAX_BYTES {
            return None;
        }
        let len = usize::try_from(len).ok()?;
        // One byte more than the file, to see its end in the same call;
        // not zeroed first, the kernel writes it.
        let mut data = Vec::<u8>::with_capacity(len + 1);
        let iov = libc::iovec {
            iov_base: data.as_mut_ptr().cast(),
            iov_len: len + 1,
        };
        // SAFETY: `iov` points at `data`'s allocation, which is live and at
        // least `len + 1` bytes long for the whole call; the descriptor is
        // `f`'s, open and owned.
        let n = unsafe { libc::preadv2(f.as_raw_fd(), &raw const iov, 1, 0, libc::RWF_NOWAIT) };
        // Fewer bytes than the file (part of it not cached), more (it
        // grew), or an error such as EAGAIN: let the blocking read decide.
        if usize::try_from(n).ok()? != len {
            return None;
        }
        // SAFETY: the kernel wrote exactly `len` bytes from the start.
        unsafe { data.set_len(len) };
        Some(data)
    }

    /// Whether every page of `f`'s first `len` bytes is in the page cache
    /// (`cachestat`, Linux 6.5 and later; `false` where it is missing or
    /// refused).
    #[cfg(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    ))]
    pub fn resident(f: &File, len: u64) -> bool {
        use std::os::fd::AsRawFd;
        use std::sync::atomic::{AtomicBool, Ordering};
        /// The system call's number (the same on every architecture since 6.5).
        const SYS_CACHESTAT: libc::c_long = 451;
        #[repr(C)]
        struct Range {
            off: u64,
            len: u64,
        }
        /// The kernel's `struct cachestat`.
        #[repr(C)]
        #[derive(Default)]
        #[allow(clippy::struct_field_names)] // the kernel's names
        struct Stat {
            nr_cache: u64,
            nr_dirty: u64,
            nr_writeback: u64,
            nr_evicted: u64,
            nr_recently_evicted: u64,
        }
        static MISSING: AtomicBool = AtomicBool::new(false);
        if len == 0 || len > MAX_BYTES || MISSING.load(Ordering::Relaxed) {
            return false;
        }
        let range = Range { off: 0, len };
        let mut stat = Stat::default();
        // SAFETY: both pointers are to live values of the layouts the call
        // takes; the descriptor is `f`'s, open and owned.
        let r = unsafe {
            libc::syscall(
                SYS_CACHESTAT,
                f.as_raw_fd(),
                &raw const range,
                &raw mut stat,
                0,
            )
        };
        if r != 0 {
            // Missing (before 6.5), or refused by a container's seccomp
            // filter: not asked again.
            if matches!(
                io::Error::last_os_error().raw_os_error(),
                Some(libc::ENOSYS | libc::EPERM)
            ) {
                MISSING.store(true, Ordering::Relaxed);
            }
            return false;
        }
        let page = page_size();
        stat.nr_cache >= len.div_ceil(page)
    }

    #[cfg(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    ))]
    fn page_size() -> u64 {
        // SAFETY: sysconf has no preconditions.
        let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        u64::try_from(size).unwrap_or(4096)
    }

    /// Elsewhere residency is not known: always `false` (the bytes are read).
    #[cfg(not(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    )))]
    pub fn resident(_f: &File, _len: u64) -> bool {
        false
    }

    /// Other systems have no non-blocking file read: always `None`.
    #[cfg(not(target_os = "linux"))]
    pub fn read(_f: &mut File, _len: u64) -> Option<Vec<u8>> {
        None
    }
}
