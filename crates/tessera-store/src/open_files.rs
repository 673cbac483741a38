//! The open files of hot tiles, kept between hits, as nginx's
//! `open_file_cache` keeps them: a hit on a tile whose file is held here is
//! answered without opening it (`openat`, whose path walk is the costliest
//! call of a hit), without `statx` and without `close`.
//!
//! A held file is checked on every hit with `fstat` of its descriptor (no
//! path walk): a tile replaced (every store writes a new file and renames
//! it into place) or deleted leaves the held inode with no link, and one
//! rewritten in place has a new size or change time; either way the hit
//! opens the path again. What `fstat` cannot see, a directory above the
//! tile moved away by hand, is seen when the entry expires (`valid`).
//! Files with more than one link are not held (replacing one of their
//! names leaves the inode linked).

use std::fs::File;
use std::num::NonZeroUsize;
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use crate::TileKey;
use crate::file::FileId;

/// Most files held by default (one descriptor each).
pub const DEFAULT_OPEN_FILES: usize = 1024;
/// How long a held file is used before its path is opened again, by
/// default.
pub const DEFAULT_OPEN_FILES_VALID: Duration = Duration::from_secs(10);
/// Most files a store may be told to hold.
pub const MAX_OPEN_FILES: usize = 1 << 16;

/// A tile's open file, as it was when opened.
#[derive(Debug, Clone)]
pub(crate) struct OpenFile {
    pub file: Arc<File>,
    /// Its identity when opened: a hit's `fstat` must find the same.
    pub id: FileId,
    pub hash: u128,
    pub stored_at: Option<SystemTime>,
    opened: Instant,
}

impl OpenFile {
    /// `file`, whose metadata when opened is `meta` (`id` its identity),
    /// or `None` when it has other names (or none).
    pub fn new(
        file: Arc<File>,
        meta: &std::fs::Metadata,
        id: FileId,
        hash: u128,
        stored_at: Option<SystemTime>,
    ) -> Option<OpenFile> {
        (meta.nlink() == 1).then(|| OpenFile {
            file,
            id,
            hash,
            stored_at,
            opened: Instant::now(),
        })
    }

    /// Whether the file is still the tile's: one link and the same
    /// identity (inode, size, change and modification times).
    fn unchanged(&self) -> bool {
        self.file
            .metadata()
            .is_ok_and(|m| m.nlink() == 1 && FileId::of(&m) == self.id)
    }
}

/// Tiles' open files, the most recently hit kept.
#[derive(Debug)]
pub(crate) struct OpenFiles {
    held: Mutex<lru::LruCache<TileKey, OpenFile>>,
    valid: Duration,
}

impl OpenFiles {
    /// Holds at most `entries` files, each used for `valid` after it was
    /// opened.
    pub fn new(entries: NonZeroUsize, valid: Duration) -> OpenFiles {
        OpenFiles {
            held: Mutex::new(lru::LruCache::new(entries)),
            valid,
        }
    }

    /// The held file of `key` when it is still the tile's and not
    /// expired; a changed or expired one is let go.
    pub fn get(&self, key: &TileKey) -> Option<OpenFile> {
        let found = {
            let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
            let found = held.get(key)?.clone();
            if found.opened.elapsed() >= self.valid {
                held.pop(key);
                return None;
            }
            found
        };
        if found.unchanged() {
            return Some(found);
        }
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if held
            .peek(key)
            .is_some_and(|h| Arc::ptr_eq(&h.file, &found.file))
        {
            held.pop(key);
        }
        None
    }

    /// Holds `file` as `key`'s.
    pub fn put(&self, key: &TileKey, file: OpenFile) {
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .put(key.clone(), file);
    }

    /// How many files are held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_grid::{TileCoord, TileFormat};

    fn key(x: u32) -> TileKey {
        TileKey {
            layer: "l".into(),
            grid: "g".into(),
            coord: TileCoord::restored(3, x, 1),
            matrix_height: 8,
            matrix_width: 8,
            format: TileFormat::Png,
        }
    }

    fn opened(path: &std::path::Path) -> OpenFile {
        let file = File::open(path).unwrap();
        let meta = file.metadata().unwrap();
        OpenFile::new(Arc::new(file), &meta, FileId::of(&meta), 7, None).unwrap()
    }

    #[test]
    fn a_held_file_is_given_until_its_tile_is_replaced_deleted_or_rewritten() {
        let dir = tempfile::tempdir().unwrap();
        let files = OpenFiles::new(NonZeroUsize::new(8).unwrap(), Duration::from_mins(1));
        let path = dir.path().join("t.png");
        std::fs::write(&path, b"one").unwrap();
        files.put(&key(0), opened(&path));
        assert_eq!(files.get(&key(0)).unwrap().id.len, 3);
        // Replaced by a rename, as stores write: the held inode has no name.
        let tmp = dir.path().join("t.tmp");
        std::fs::write(&tmp, b"two!").unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        assert!(files.get(&key(0)).is_none());
        assert_eq!(files.len(), 0, "a changed file is let go");
        // Deleted.
        files.put(&key(0), opened(&path));
        std::fs::remove_file(&path).unwrap();
        assert!(files.get(&key(0)).is_none());
        // Rewritten in place, another size.
        std::fs::write(&path, b"three").unwrap();
        files.put(&key(0), opened(&path));
        std::fs::write(&path, b"three, longer").unwrap();
        assert!(files.get(&key(0)).is_none());
    }

    #[test]
    fn files_with_other_names_are_not_held_and_entries_expire() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.png");
        std::fs::write(&path, b"one").unwrap();
        std::fs::hard_link(&path, dir.path().join("u.png")).unwrap();
        let file = File::open(&path).unwrap();
        let meta = file.metadata().unwrap();
        let id = FileId::of(&meta);
        assert!(OpenFile::new(Arc::new(file), &meta, id, 7, None).is_none());

        let files = OpenFiles::new(NonZeroUsize::new(8).unwrap(), Duration::ZERO);
        let other = dir.path().join("v.png");
        std::fs::write(&other, b"v").unwrap();
        files.put(&key(1), opened(&other));
        assert!(files.get(&key(1)).is_none(), "expired at once");
    }

    #[test]
    fn at_most_the_given_number_of_files_are_held() {
        let dir = tempfile::tempdir().unwrap();
        let files = OpenFiles::new(NonZeroUsize::new(2).unwrap(), Duration::from_mins(1));
        for x in 0..5 {
            let path = dir.path().join(format!("{x}.png"));
            std::fs::write(&path, b"x").unwrap();
            files.put(&key(x), opened(&path));
        }
        assert_eq!(files.len(), 2);
        assert!(files.get(&key(4)).is_some() && files.get(&key(0)).is_none());
    }
}
