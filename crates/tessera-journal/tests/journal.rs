//! The journal's contract: order, group commit, recovery from torn tails,
//! corruption reports, poisoning, disk full and kill -9.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

use tessera_journal::{Journal, JournalError, JournalOptions, Persist, Position, RecordKind};

fn small() -> JournalOptions {
    JournalOptions {
        segment_size: 64 * 1024,
        ..JournalOptions::default()
    }
}

fn payload(n: u64) -> Vec<u8> {
    let len = 10 + (n * 7919 % 300) as usize;
    (0..len).map(|i| (n as usize * 31 + i) as u8).collect()
}

/// Every record replayed from `dir`, in order.
fn replay_all(
    dir: &Path,
    options: JournalOptions,
) -> Result<Vec<(Position, RecordKind, Vec<u8>)>, JournalError> {
    let mut out = Vec::new();
    let (j, _) = Journal::open(dir, options, None, |r| {
        out.push((r.position, r.kind, r.payload.to_vec()));
    })?;
    j.close();
    Ok(out)
}

/// `threads` threads each append `each` synced records (payload
/// `t * 1000 + n`) to `j`, and are waited for.
fn append_from_threads(j: &Arc<Journal>, threads: u64, each: u64) {
    let threads: Vec<_> = (0..threads)
        .map(|t| {
            let j = j.clone();
            std::thread::spawn(move || {
                for n in 0..each {
                    j.append(RecordKind::Add, &payload(t * 1000 + n), Persist::Synced)
                        .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn records_come_back_in_order_across_segments_and_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let (j, rec) = Journal::open(dir.path(), small(), None, |_| {}).unwrap();
    assert_eq!(rec.records, 0);
    let mut positions = Vec::new();
    for n in 0..600 {
        let kind = [RecordKind::Add, RecordKind::Update, RecordKind::Delete][n as usize % 3];
        let persist = if n % 2 == 0 {
            Persist::Synced
        } else {
            Persist::Buffered
        };
        positions.push(j.append(kind, &payload(n), persist).unwrap());
    }
    let mut buf = Vec::new();
    for (n, p) in positions.iter().enumerate() {
        j.read(*p, &mut buf).unwrap();
        assert_eq!(buf, payload(n as u64));
    }
    j.close();
    let got = replay_all(dir.path(), small()).unwrap();
    assert_eq!(got.len(), 600);
    assert!(
        positions.last().unwrap().segment > 1,
        "the test spans several segments"
    );
    for (n, (p, kind, data)) in got.iter().enumerate() {
        assert_eq!(*p, positions[n]);
        assert_eq!(
            *kind,
            [RecordKind::Add, RecordKind::Update, RecordKind::Delete][n % 3]
        );
        assert_eq!(*data, payload(n as u64));
    }
    // Appending after a reopen continues the sequence.
    let (j, _) = Journal::open(dir.path(), small(), None, |_| {}).unwrap();
    j.append(RecordKind::Add, b"after", Persist::Synced)
        .unwrap();
    j.close();
    let got = replay_all(dir.path(), small()).unwrap();
    assert_eq!(got.len(), 601);
    assert_eq!(got[600].2, b"after");
}

#[test]
fn replay_can_start_at_a_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let (j, _) = Journal::open(dir.path(), small(), None, |_| {}).unwrap();
    let positions: Vec<_> = (0..500)
        .map(|n| {
            j.append(RecordKind::Add, &payload(n), Persist::Buffered)
                .unwrap()
        })
        .collect();
    j.close();
    let from = positions[400];
    let mut seen = Vec::new();
    let (_j, rec) =
        Journal::open(dir.path(), small(), Some(from), |r| seen.push(r.position)).unwrap();
    assert_eq!(seen, positions[400..].to_vec());
    assert_eq!(rec.replayed, 100);
    assert!(
        rec.records < 500,
        "segments before the checkpoint were not read"
    );
}

#[test]
fn concurrent_synced_appends_share_fsyncs() {
    let dir = tempfile::tempdir().unwrap();
    let (j, _) = Journal::open(dir.path(), JournalOptions::default(), None, |_| {}).unwrap();
    let j = Arc::new(j);
    append_from_threads(&j, 16, 100);
    let (appended, syncs) = j.stats();
    assert_eq!(appended, 1600);
    assert!(
        syncs < appended,
        "group commit: {syncs} fsyncs for {appended} synced records"
    );
    drop(j);
    assert_eq!(
        replay_all(dir.path(), JournalOptions::default())
            .unwrap()
            .len(),
        1600
    );
}

#[test]
fn the_adaptive_window_keeps_every_record_and_its_latency_bound() {
    let dir = tempfile::tempdir().unwrap();
    let options = JournalOptions {
        sync_window: Some(std::time::Duration::from_millis(2)),
        ..JournalOptions::default()
    };
    let (j, _) = Journal::open(dir.path(), options, None, |_| {}).unwrap();
    let j = Arc::new(j);
    append_from_threads(&j, 8, 50);
    assert_eq!(j.stats().0, 400);
    drop(j);
    assert_eq!(replay_all(dir.path(), options).unwrap().len(), 400);
}

#[test]
fn max_latency_cuts_a_long_window_short_and_late_acks_and_slow_syncs_are_counted() {
    // A window of a minute would hold every batch of concurrent writers for
    // a minute; max_latency lets none wait past 20 ms plus the sync.
    let dir = tempfile::tempdir().unwrap();
    let options = JournalOptions {
        sync_window: Some(std::time::Duration::from_mins(1)),
        max_latency: std::time::Duration::from_millis(20),
        ..JournalOptions::default()
    };
    let (j, _) = Journal::open(dir.path(), options, None, |_| {}).unwrap();
    let j = Arc::new(j);
    let started = std::time::Instant::now();
    append_from_threads(&j, 4, 20);
    assert!(
        started.elapsed() < std::time::Duration::from_mins(1),
        "no batch waited out the window"
    );
    assert_eq!(j.stats().0, 80);
    drop(j);

    // With a bound of zero every acknowledgement is late, and counted.
    let dir = tempfile::tempdir().unwrap();
    let options = JournalOptions {
        max_latency: std::time::Duration::ZERO,
        ..JournalOptions::default()
    };
    let (j, _) = Journal::open(dir.path(), options, None, |_| {}).unwrap();
    for n in 0..10 {
        j.append(RecordKind::Add, &payload(n), Persist::Synced)
            .unwrap();
    }
    j.sync().unwrap();
    assert_eq!(j.late_acks(), 11);
    // Every sync took longer than zero by itself: the disk is counted too.
    let syncs = j.stats().1;
    assert!(syncs >= 1);
    assert_eq!(j.slow_syncs(), syncs);
    let relaxed = JournalOptions {
        max_latency: std::time::Duration::from_hours(1),
        ..JournalOptions::default()
    };
    drop(j);
    let (j, _) = Journal::open(dir.path(), relaxed, None, |_| {}).unwrap();
    j.append(RecordKind::Add, &payload(99), Persist::Synced)
        .unwrap();
    assert_eq!(j.late_acks(), 0);
    assert_eq!(j.slow_syncs(), 0);
}

/// Writers in lockstep (each waits for its record, then appends the next)
/// all have a record in every batch: the window ends as soon as the last
/// of them is in, instead of running to its bound each time.
#[test]
fn the_window_ends_once_every_recent_writer_is_in_the_batch() {
    let dir = tempfile::tempdir().unwrap();
    let options = JournalOptions {
        sync_window: Some(std::time::Duration::from_hours(1)),
        max_latency: std::time::Duration::from_secs(10),
        ..JournalOptions::default()
    };
    let (j, _) = Journal::open(dir.path(), options, None, |_| {}).unwrap();
    let j = Arc::new(j);
    let started = std::time::Instant::now();
    append_from_threads(&j, 4, 30);
    // Waiting out the bound (10 s) in each of the 30 rounds would take 5
    // minutes.
    assert!(
        started.elapsed() < std::time::Duration::from_secs(100),
        "{:?}",
        started.elapsed()
    );
    let (appended, syncs) = j.stats();
    assert_eq!(appended, 120);
    assert!(syncs < 60, "{syncs} syncs: batches gathered the writers");
    drop(j);
    assert_eq!(replay_all(dir.path(), options).unwrap().len(), 120);
}

#[test]
fn a_spare_segment_is_kept_ready_and_a_half_made_one_is_removed_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let names = |dir: &Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let wait_for_spare = |dir: &Path| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !names(dir).iter().any(|n| n.starts_with("spare-")) {
            assert!(
                std::time::Instant::now() < deadline,
                "no spare made: {:?}",
                names(dir)
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    };
    let (j, _) = Journal::open(dir.path(), small(), None, |_| {}).unwrap();
    wait_for_spare(dir.path());
    let spare = names(dir.path())
        .into_iter()
        .find(|n| n.starts_with("spare-"))
        .unwrap();
    // Enough to roll: the roll takes the spare, and a new one is made.
    let first = j
        .append(RecordKind::Add, &payload(0), Persist::Synced)
        .unwrap();
    let mut last = first;
    for n in 1..400 {
        last = j
            .append(RecordKind::Add, &payload(n), Persist::Synced)
            .unwrap();
    }
    assert!(last.segment > first.segment);
    wait_for_spare(dir.path());
    assert!(!names(dir.path()).contains(&spare), "the spare was used");
    j.close();
    // A crash while a spare was being made leaves spare.tmp: removed.
    std::fs::write(dir.path().join("spare.tmp"), b"half").unwrap();
    assert_eq!(replay_all(dir.path(), small()).unwrap().len(), 400);
    assert!(!names(dir.path()).contains(&"spare.tmp".to_string()));
    assert_eq!(
        names(dir.path())
            .iter()
            .filter(|n| n.starts_with("spare-"))
            .count(),
        1,
        "one spare waits: {:?}",
        names(dir.path())
    );
}

fn segment_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "log")
                && p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("seg-"))
        })
        .collect();
    v.sort();
    v
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

#[test]
fn a_journal_cut_at_every_byte_of_its_last_records_keeps_the_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let (j, _) = Journal::open(dir.path(), small(), None, |_| {}).unwrap();
    let positions: Vec<_> = (0..40)
        .map(|n| {
            j.append(RecordKind::Add, &payload(n), Persist::Synced)
                .unwrap()
        })
        .collect();
    j.close();
    let seg = segment_files(dir.path()).pop().unwrap();
    let bytes = std::fs::read(&seg).unwrap();
    let end = positions[39].offset as usize + 33 + payload(39).len();
    let from = positions[36].offset as usize;
    for cut in from..=end {
        let work = tempfile::tempdir().unwrap();
        copy_dir(dir.path(), work.path());
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(work.path().join(seg.file_name().unwrap()))
            .unwrap();
        f.set_len(cut as u64).unwrap();
        drop(f);
        let got = replay_all(work.path(), small()).unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        let whole = positions
            .iter()
            .enumerate()
            .filter(|(n, p)| p.offset as usize + 33 + payload(*n as u64).len() <= cut)
            .count();
        assert_eq!(got.len(), whole, "cut at {cut}");
        for (n, (_, _, data)) in got.iter().enumerate() {
            assert_eq!(*data, payload(n as u64));
        }
        // And the journal accepts appends after the cut.
        let (j, _) = Journal::open(work.path(), small(), None, |_| {}).unwrap();
        j.append(RecordKind::Add, b"next", Persist::Synced).unwrap();
        j.close();
        assert_eq!(
            replay_all(work.path(), small()).unwrap().len(),
            whole + 1,
            "cut at {cut}"
        );
    }
    assert_eq!(bytes.len() as u64, small().segment_size);
}

#[test]
fn garbage_after_the_last_record_is_cut_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let (j, _) = Journal::open(dir.path(), small(), None, |_| {}).unwrap();
    let positions: Vec<_> = (0..10)
        .map(|n| {
            j.append(RecordKind::Add, &payload(n), Persist::Synced)
                .unwrap()
        })
        .collect();
    let last = positions[9];
    j.close();
    let seg = segment_files(dir.path()).pop().unwrap();
    let garbage_at = u64::from(last.offset) + 33 + payload(9).len() as u64;
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
        f.write_all_at(&[0xA5; 700], garbage_at).unwrap();
    }
    let (j, rec) = Journal::open(dir.path(), small(), None, |_| {}).unwrap();
    assert_eq!(rec.records, 10);
    assert_eq!(
        rec.cut_at,
        Some(Position {
            segment: last.segment,
            offset: garbage_at as u32
        })
    );
    j.close();
    assert_eq!(replay_all(dir.path(), small()).unwrap().len(), 10);
}

#[test]
fn a_flipped_bit_in_the_middle_is_reported_with_segment_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let (j, _) = Journal::open(dir.path(), small(), None, |_| {}).unwrap();
    let positions: Vec<_> = (0..50)
        .map(|n| {
            j.append(RecordKind::Add, &payload(n), Persist::Synced)
                .unwrap()
        })
        .collect();
    j.close();
    let victim = positions[20];
    let seg = dir.path().join(format!("seg-{:016x}.log", victim.segment));
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[victim.offset as usize + 40] ^= 0x10;
    std::fs::write(&seg, &bytes).unwrap();
    match Journal::open(dir.path(), small(), None, |_| {}) {
        Err(JournalError::Corrupt {
            segment, offset, ..
        }) => {
            assert_eq!((segment, offset), (victim.segment, victim.offset));
        }
        other => panic!("expected a corruption report, got {other:?}"),
    }
}

#[test]
fn a_failed_fsync_poisons_the_journal_until_reopened() {
    let dir = tempfile::tempdir().unwrap();
    let (j, _) = Journal::open(dir.path(), small(), None, |_| {}).unwrap();
    j.append(RecordKind::Add, b"kept", Persist::Synced).unwrap();
    j.inject_fsync_failure();
    assert!(matches!(
        j.append(RecordKind::Add, b"lost", Persist::Synced),
        Err(JournalError::Poisoned(_))
    ));
    assert!(j.is_poisoned());
    assert!(matches!(
        j.append(RecordKind::Add, b"refused", Persist::Buffered),
        Err(JournalError::Poisoned(_))
    ));
    j.close();
    let (j, _) = Journal::open(dir.path(), small(), None, |_| {}).unwrap();
    assert!(!j.is_poisoned());
    j.append(RecordKind::Add, b"again", Persist::Synced)
        .unwrap();
    j.close();
    let got: Vec<_> = replay_all(dir.path(), small())
        .unwrap()
        .into_iter()
        .map(|r| r.2)
        .collect();
    assert_eq!(got[0], b"kept");
    assert_eq!(got.last().unwrap(), b"again");
    assert!(!got.iter().any(|g| g == b"refused"));
}

#[test]
fn a_second_process_cannot_open_a_journal_in_use() {
    let dir = tempfile::tempdir().unwrap();
    let (j, _) = Journal::open(dir.path(), small(), None, |_| {}).unwrap();
    // flock locks belong to the open file description, so a second open in
    // this process is refused just as another process would be.
    match Journal::open(dir.path(), small(), None, |_| {}) {
        Err(e @ JournalError::InUse(_)) => assert!(e.to_string().contains("in use")),
        other => panic!("expected a lock error, got {other:?}"),
    }
    j.close();
    Journal::open(dir.path(), small(), None, |_| {})
        .unwrap()
        .0
        .close();
}

#[test]
fn a_record_larger_than_a_segment_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (j, _) = Journal::open(dir.path(), small(), None, |_| {}).unwrap();
    let big = vec![1u8; 70 * 1024];
    assert!(matches!(
        j.append(RecordKind::Add, &big, Persist::Buffered),
        Err(JournalError::TooLarge { .. })
    ));
}

/// The child half of the crash and disk-full tests: appends synced records
/// from four threads and prints `thread seq` for each acknowledged one.
#[test]
fn child_appender() {
    let Ok(dir) = std::env::var("TESSERA_JOURNAL_CHILD_DIR") else {
        return;
    };
    // SIGXFSZ would kill us when the file size limit is reached; the write
    // must fail with EFBIG instead.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
    let mut last = [0u64; 4];
    let open = Journal::open(&dir, small(), None, |r| {
        let t = r.payload[0] as usize;
        let n = u64::from_le_bytes(r.payload[1..9].try_into().unwrap());
        last[t] = last[t].max(n);
    });
    let (j, _) = match open {
        Ok(x) => x,
        Err(e) => {
            println!("open-error {e}");
            return;
        }
    };
    if let Some(limit) = std::env::var("TESSERA_JOURNAL_CHILD_FSIZE")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        // What `ulimit -f` sets: writes past `limit` bytes of any file fail.
        let rl = libc::rlimit {
            rlim_cur: limit,
            rlim_max: limit,
        };
        assert_eq!(
            unsafe { libc::setrlimit(libc::RLIMIT_FSIZE, &raw const rl) },
            0
        );
    }
    let j = Arc::new(j);
    let threads: Vec<_> = (0..4u8)
        .map(|t| {
            let (j, start) = (j.clone(), last[t as usize] + 1);
            std::thread::spawn(move || {
                use std::io::Write;
                for n in start.. {
                    let mut p = vec![t];
                    p.extend_from_slice(&n.to_le_bytes());
                    p.extend_from_slice(&payload(n));
                    match j.append(RecordKind::Add, &p, Persist::Synced) {
                        Ok(_) => {
                            let mut out = std::io::stdout().lock();
                            writeln!(out, "{t} {n}").unwrap();
                            out.flush().unwrap();
                        }
                        Err(e) => {
                            // The error and its causes, as a log line would carry them.
                            let mut text = e.to_string();
                            let mut cause = std::error::Error::source(&e);
                            while let Some(c) = cause {
                                text = format!("{text}: {c}");
                                cause = c.source();
                            }
                            println!("append-error {text}");
                            return;
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

fn spawn_child(dir: &Path, file_size_limit: Option<u64>) -> std::process::Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    if let Some(limit) = file_size_limit {
        cmd.env("TESSERA_JOURNAL_CHILD_FSIZE", limit.to_string());
    }
    cmd.args([
        "--exact",
        "child_appender",
        "--nocapture",
        "--test-threads",
        "1",
    ])
    .env("TESSERA_JOURNAL_CHILD_DIR", dir)
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap()
}

/// `thread seq` as the child prints an acknowledgement; `None` for other output.
fn parse_ack(line: &str) -> Option<(usize, u64)> {
    let (t, n) = line.split_once(' ')?;
    Some((t.parse().ok()?, n.parse().ok()?))
}

/// Acknowledged `(thread, seq)` pairs in the journal, checking per-thread order.
fn acknowledged_in(dir: &Path) -> Vec<Vec<u64>> {
    let mut seen = vec![Vec::new(); 4];
    for (_, _, p) in replay_all(dir, small()).unwrap() {
        let n = u64::from_le_bytes(p[1..9].try_into().unwrap());
        assert_eq!(&p[9..], payload(n).as_slice(), "record payload intact");
        seen[p[0] as usize].push(n);
    }
    seen
}

#[test]
fn kill_9_during_appends_never_loses_an_acknowledged_record() {
    let cycles: usize = std::env::var("TESSERA_JOURNAL_KILL_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let dir = tempfile::tempdir().unwrap();
    let mut acked = [0u64; 4];
    let mut rng = 0x1234_5678_9ABC_DEF1_u64;
    for cycle in 0..cycles {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let wait_for = 1 + rng % 40;
        let mut child = spawn_child(dir.path(), None);
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut got = 0;
        while got < wait_for {
            let line = lines
                .next()
                .unwrap_or_else(|| panic!("cycle {cycle}: child ended early"))
                .unwrap();
            assert!(
                !line.contains("-error"),
                "cycle {cycle}: child said {line:?}"
            );
            if let Some((t, n)) = parse_ack(&line) {
                acked[t] = acked[t].max(n);
                got += 1;
            }
        }
        child.kill().unwrap();
        // Lines already printed before the kill are acknowledgements too.
        for (t, n) in lines.map_while(Result::ok).filter_map(|l| parse_ack(&l)) {
            acked[t] = acked[t].max(n);
        }
        child.wait().unwrap();
        let seen = acknowledged_in(dir.path());
        for t in 0..4 {
            let s = &seen[t];
            assert!(
                s.windows(2).all(|w| w[1] == w[0] + 1),
                "cycle {cycle}: thread {t} records in order without gaps"
            );
            let max = s.last().copied().unwrap_or(0);
            assert!(
                max >= acked[t],
                "cycle {cycle}: thread {t} acknowledged {} but the journal holds up to {max}",
                acked[t]
            );
        }
    }
}

#[test]
fn disk_full_is_a_clear_error_with_no_partial_record_and_a_clean_reopen() {
    let dir = tempfile::tempdir().unwrap();
    // Writes past 40 KiB of a file fail (EFBIG, SIGXFSZ ignored), in the
    // middle of the first 64 KiB segment: the disk is "full" there.
    let mut child = spawn_child(dir.path(), Some(40 * 1024));
    let out = BufReader::new(child.stdout.take().unwrap());
    let mut acked = [0u64; 4];
    let mut errors = Vec::new();
    for line in out.lines().map_while(Result::ok) {
        if let Some(e) = line.strip_prefix("append-error ") {
            errors.push(e.to_string());
        } else if let Some((t, n)) = parse_ack(&line) {
            acked[t] = acked[t].max(n);
        }
    }
    let status = child.wait().unwrap();
    assert!(
        status.success(),
        "the child ended by itself, not by a signal"
    );
    assert_eq!(errors.len(), 4, "every writer got the error: {errors:?}");
    assert!(
        errors
            .iter()
            .all(|e| e.contains("write failed") && e.contains("too large")),
        "{errors:?}"
    );
    // Reopened without the limit: every acknowledged record is there and
    // whole (a partial one past the limit is cut), and appends work again.
    let seen = acknowledged_in(dir.path());
    for t in 0..4 {
        assert!(acked[t] > 0, "thread {t} wrote before the disk filled");
        assert!(seen[t].last().copied().unwrap_or(0) >= acked[t]);
    }
    let (j, _) = Journal::open(dir.path(), small(), None, |_| {}).unwrap();
    let n = seen[0].last().copied().unwrap_or(0) + 1;
    let mut p = vec![0u8];
    p.extend_from_slice(&n.to_le_bytes());
    p.extend_from_slice(&payload(n));
    j.append(RecordKind::Add, &p, Persist::Synced).unwrap();
    j.close();
    assert_eq!(acknowledged_in(dir.path())[0].last(), Some(&n));
}

#[test]
fn released_segments_are_recycled_and_their_old_records_never_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let (j, _) = Journal::open(dir.path(), small(), None, |_| {}).unwrap();
    let first: Vec<_> = (0..400)
        .map(|n| {
            j.append(RecordKind::Add, &payload(n), Persist::Buffered)
                .unwrap()
        })
        .collect();
    let segments = j.segments();
    assert!(segments.len() >= 2, "{segments:?}");
    assert!(segments.last().unwrap().active);
    assert!(
        j.release(segments.last().unwrap().id).is_err(),
        "the active segment is kept"
    );
    j.sync().unwrap();
    j.release(first[0].segment).unwrap();
    assert!(dir.path().read_dir().unwrap().any(|e| {
        e.unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with("free-")
    }));
    // Enough appends to roll: the free file is reused.
    for n in 1000..1400 {
        j.append(RecordKind::Add, &payload(n), Persist::Buffered)
            .unwrap();
    }
    j.sync().unwrap();
    assert!(!dir.path().read_dir().unwrap().any(|e| {
        e.unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with("free-")
    }));
    j.close();
    let got = replay_all(dir.path(), small()).unwrap();
    let kept = first
        .iter()
        .filter(|p| p.segment != first[0].segment)
        .count();
    assert_eq!(got.len(), kept + 400);
    assert!(got.iter().all(|(p, _, _)| p.segment != first[0].segment));
}

#[test]
fn a_recycled_segment_whose_old_records_do_not_line_up_with_the_new_ones_reopens_whole() {
    let dir = tempfile::tempdir().unwrap();
    let (j, _) = Journal::open(dir.path(), small(), None, |_| {}).unwrap();
    // Fill segment 1 and start 2 with small records of one size, so that
    // hardly any zeros are left at the end of segment 1.
    let mut n = 0u64;
    while j.segments().len() < 2 {
        j.append(RecordKind::Add, &[1u8; 100], Persist::Buffered)
            .unwrap();
        n += 1;
    }
    assert!(n > 400);
    j.sync().unwrap();
    j.release(1).unwrap();
    // The next segments reuse segment 1's file; larger records of other
    // sizes end where an old record is half way through.
    let mut written = Vec::new();
    let mut i = 0u64;
    while j.segments().iter().map(|s| s.id).max().unwrap() < 4 {
        let p = vec![i as u8; 900 + (i as usize * 37) % 400];
        j.append(RecordKind::Update, &p, Persist::Synced).unwrap();
        written.push(p);
        i += 1;
    }
    j.close();
    let got = replay_all(dir.path(), small()).unwrap();
    let updates: Vec<Vec<u8>> = got
        .into_iter()
        .filter(|(_, kind, _)| *kind == RecordKind::Update)
        .map(|(_, _, data)| data)
        .collect();
    assert_eq!(updates, written);
}

#[test]
fn damage_to_the_last_record_of_a_full_segment_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let (j, _) = Journal::open(dir.path(), small(), None, |_| {}).unwrap();
    let positions: Vec<_> = (0..600)
        .map(|n| {
            j.append(RecordKind::Add, &payload(n), Persist::Synced)
                .unwrap()
        })
        .collect();
    j.close();
    let last_of_first = positions
        .iter()
        .filter(|p| p.segment == positions[0].segment)
        .max()
        .copied()
        .unwrap();
    let seg = dir
        .path()
        .join(format!("seg-{:016x}.log", last_of_first.segment));
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[last_of_first.offset as usize + 40] ^= 0x10;
    std::fs::write(&seg, &bytes).unwrap();
    match Journal::open(dir.path(), small(), None, |_| {}) {
        Err(JournalError::Corrupt {
            segment, offset, ..
        }) => assert_eq!(
            (segment, offset),
            (last_of_first.segment, last_of_first.offset)
        ),
        other => panic!("expected a corruption report, got {other:?}"),
    }
}
