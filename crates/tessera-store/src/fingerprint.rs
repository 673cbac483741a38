//! Recording which fingerprint a layer key's tiles were made from, as a
//! small file that is created once and never rewritten
//! ([`crate::TileStore::claim_fingerprint`] for the stores on a file system).

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// The directory, under a store's root, that holds one file per layer key.
pub(crate) const FINGERPRINT_DIR: &str = ".fingerprints";

/// Records `fingerprint` in `dir/name` unless that file exists, and returns
/// what the file holds.
///
/// The content is written to a temporary file, synced, and hard-linked to
/// its name: the link fails when the name exists, so of two processes
/// claiming at once exactly one wins, and a reader never sees a partial
/// file.
pub(crate) fn claim_in_dir(dir: &Path, name: &str, fingerprint: &str) -> io::Result<String> {
    let path = dir.join(name);
    if let Some(recorded) = read_recorded(&path)? {
        return Ok(recorded);
    }
    fs::create_dir_all(dir)?;
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let tmp = dir.join(format!(".{name}.{}-{nanos}.tmp", std::process::id()));
    let linked = (|| {
        let mut f = File::create(&tmp)?;
        f.write_all(fingerprint.as_bytes())?;
        f.sync_all()?;
        fs::hard_link(&tmp, &path)
    })();
    let _ = fs::remove_file(&tmp);
    match linked {
        Ok(()) => {
            File::open(dir)?.sync_all()?;
            Ok(fingerprint.to_string())
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => read_recorded(&path)?
            .ok_or_else(|| io::Error::other(format!("{} is empty", path.display()))),
        Err(e) => Err(e),
    }
}

/// What `path` records, `None` when it does not exist.
pub(crate) fn read_recorded(path: &Path) -> io::Result<Option<String>> {
    match fs::read_to_string(path) {
        Ok(s) if !s.trim().is_empty() => Ok(Some(s.trim().to_string())),
        Ok(_) => Ok(None),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_claim_is_recorded_and_later_ones_get_it_back() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join(FINGERPRINT_DIR);
        assert_eq!(claim_in_dir(&d, "relief", "aaaa").unwrap(), "aaaa");
        assert_eq!(claim_in_dir(&d, "relief", "bbbb").unwrap(), "aaaa");
        assert_eq!(claim_in_dir(&d, "other", "bbbb").unwrap(), "bbbb");
        let leftovers: Vec<_> = fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    #[test]
    fn concurrent_claims_agree_on_one_fingerprint() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_path_buf();
        let answers: Vec<String> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|i| {
                    let d = d.clone();
                    s.spawn(move || claim_in_dir(&d, "layer", &format!("fp{i}")).unwrap())
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(answers.iter().all(|a| a == &answers[0]), "{answers:?}");
        assert_eq!(
            read_recorded(&d.join("layer")).unwrap().as_ref(),
            Some(&answers[0])
        );
    }
}
