//! Reading the local files a configuration or a catalog names (STAC
//! documents, JWKS files, style documents): regular files only, never more
//! than a cap.
//!
//! A path may name anything: `/dev/zero` or `/dev/urandom` (endless, and
//! their metadata says 0 bytes), a FIFO (opening it for reading blocks
//! until a writer comes, forever), a directory. The file is opened without
//! blocking, refused unless the opened handle is a regular file, and read
//! through a cap counted while reading, not taken from the metadata.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Reads the regular file at `path`, refusing anything else (devices,
/// FIFOs, sockets, directories) and any file longer than `cap` bytes. The
/// error says which file and why, for a configuration message.
pub fn read_regular_file(path: &Path, cap: u64) -> Result<Vec<u8>, String> {
    let shown = path.display();
    // O_NONBLOCK: opening a FIFO does not wait for a writer (regular
    // files ignore the flag).
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    let metadata = file
        .metadata()
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    if !metadata.is_file() {
        return Err(format!(
            "{shown} is not a regular file ({}); only regular files are read",
            kind_of(&metadata)
        ));
    }
    let mut bytes = Vec::new();
    file.take(cap.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    if bytes.len() as u64 > cap {
        return Err(format!("{shown} is larger than {cap} bytes"));
    }
    Ok(bytes)
}

/// [`read_regular_file`] as UTF-8 text.
pub fn read_regular_text(path: &Path, cap: u64) -> Result<String, String> {
    let bytes = read_regular_file(path, cap)?;
    String::from_utf8(bytes).map_err(|_| format!("{} is not UTF-8 text", path.display()))
}

fn kind_of(metadata: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let kind = metadata.file_type();
    if kind.is_dir() {
        "a directory"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_fifos_and_directories_are_refused_without_reading_or_waiting() {
        for (path, kind) in [
            ("/dev/zero", "a device"),
            ("/dev/urandom", "a device"),
            ("/tmp", "a directory"),
        ] {
            let err = read_regular_file(Path::new(path), 1 << 20).unwrap_err();
            assert!(err.contains(kind) && err.contains(path), "{err}");
        }
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(status.success());
        let err = read_regular_file(&fifo, 1 << 20).unwrap_err();
        assert!(err.contains("a FIFO"), "{err}");
    }

    #[test]
    fn a_file_is_read_up_to_its_cap() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.json");
        std::fs::write(&path, b"0123456789").unwrap();
        assert_eq!(read_regular_file(&path, 10).unwrap(), b"0123456789");
        let err = read_regular_file(&path, 9).unwrap_err();
        assert!(err.contains("larger than 9 bytes"), "{err}");
        assert_eq!(read_regular_text(&path, 10).unwrap(), "0123456789");
    }
}
