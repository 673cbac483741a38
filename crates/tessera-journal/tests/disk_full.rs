//! A disk that fills under concurrent writers (the segment being written
//! fills, the next one cannot be created, writes fail with ENOSPC) never
//! leaves a journal that recovery refuses, and no acknowledged record is
//! lost. Runs on a small tmpfs, mounted for the test (root is needed, as in
//! CI; a test that cannot mount it fails).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use tessera_journal::{Journal, JournalOptions, Persist, RecordKind};

const WRITERS: usize = 4;
const ROUNDS: usize = 12;

/// A tmpfs of `kib` KiB mounted on a temporary directory while alive.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(kib: u64) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={kib}k"), "tmpfs"])
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(
            status.success(),
            "cannot mount a tmpfs on {} (this test needs root): {status}",
            dir.path().display()
        );
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

fn options() -> JournalOptions {
    JournalOptions {
        segment_size: 64 * 1024,
        ..JournalOptions::default()
    }
}

/// Writer `t`'s record `n`: its identity and a body of a size that varies.
fn record(t: usize, n: u64) -> Vec<u8> {
    let len = 900 + (n as usize * 7919 + t * 131) % 2500;
    let mut p = vec![t as u8];
    p.extend_from_slice(&n.to_le_bytes());
    p.extend((0..len).map(|i| (i as u64 * 31 + n) as u8));
    p
}

/// Every writer appends synced records until its first error; returns the
/// records each had acknowledged.
fn fill(journal: &Arc<Journal>) -> Vec<Vec<u64>> {
    let writers: Vec<_> = (0..WRITERS)
        .map(|t| {
            let journal = journal.clone();
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                for n in 0.. {
                    match journal.append(RecordKind::Add, &record(t, n), Persist::Synced) {
                        Ok(_) => acked.push(n),
                        Err(_) => break,
                    }
                }
                acked
            })
        })
        .collect();
    writers.into_iter().map(|w| w.join().unwrap()).collect()
}

#[test]
fn a_disk_filled_by_concurrent_writers_leaves_a_journal_that_opens_with_every_acknowledged_record()
{
    for round in 0..ROUNDS {
        let fs = Tmpfs::mount(300);
        let (journal, _) = Journal::open(fs.path(), options(), None, |_| {}).unwrap();
        let journal = Arc::new(journal);
        let acked = fill(&journal);
        assert!(
            acked.iter().map(Vec::len).sum::<usize>() > 0,
            "round {round}: something was written before the disk filled"
        );
        Arc::try_unwrap(journal).unwrap().close();
        // Reopened twice: recovery accepts what the failures left, and its
        // own repairs are stable.
        for reopen in 0..2 {
            let mut seen = vec![Vec::new(); WRITERS];
            let opened = Journal::open(fs.path(), options(), None, |r| {
                let t = r.payload[0] as usize;
                let n = u64::from_le_bytes(r.payload[1..9].try_into().unwrap());
                assert_eq!(r.payload, record(t, n).as_slice(), "record intact");
                seen[t].push(n);
            });
            let (journal, _) = opened.unwrap_or_else(|e| {
                panic!("round {round}, reopen {reopen}: recovery refused the journal: {e}")
            });
            journal.close();
            for t in 0..WRITERS {
                for n in &acked[t] {
                    assert!(
                        seen[t].contains(n),
                        "round {round}: acknowledged record {t}/{n} lost"
                    );
                }
            }
        }
    }
}
