//! An append-only journal with group commit.
//!
//! Records (bytes plus a [`RecordKind`]) are appended to pre-allocated
//! segment files by one writer thread. Producers hand a record, a
//! [`Persist`] mode and a completion to the writer through a bounded
//! channel; the writer drains everything queued, writes it in one go, issues
//! one `fdatasync` for the batch when any record asked for [`Persist::Synced`],
//! and then completes every caller. A failed `fdatasync` poisons the journal:
//! it is never retried (the kernel may already have marked the pages clean)
//! and every later append fails until the journal is reopened.
//!
//! [`Journal::open`] replays every whole record in order, cuts a torn tail
//! and refuses to open (with the segment and offset) when a record that was
//! followed by synced data is damaged. The format and the crash-safety
//! argument are in `docs/journal-format.md`. The journal knows nothing of
//! what the records mean.

mod format;
mod recovery;
mod segment;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, bounded};

pub use format::RecordKind;
pub use recovery::Recovery;

/// When an append is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persist {
    /// Once written to the operating system (survives the process, not a
    /// power failure).
    Buffered,
    /// Once `fdatasync` returned for the batch holding the record.
    Synced,
}

/// Where a record starts: segment id and byte offset in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    /// Segment id.
    pub segment: u64,
    /// Offset of the record's frame in the segment file.
    pub offset: u32,
}

/// A record as replayed at open.
#[derive(Debug)]
pub struct Record<'a> {
    /// Where it is.
    pub position: Position,
    /// Journal-wide sequence number (increasing by one per record).
    pub seq: u64,
    /// Kind.
    pub kind: RecordKind,
    /// Payload.
    pub payload: &'a [u8],
}

/// How full a segment is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentUsage {
    /// Segment id.
    pub id: u64,
    /// Bytes written (header and records).
    pub used_bytes: u64,
    /// Whether it is the segment being appended to.
    pub active: bool,
}

/// Settings; every limit has a default that suits a tile cache.
#[derive(Debug, Clone, Copy)]
pub struct JournalOptions {
    /// Size of each segment file (default 64 MiB, at least 64 KiB).
    pub segment_size: u64,
    /// Records that may wait for the writer (default 4096).
    pub queue_len: usize,
    /// Most bytes written per batch (default 8 MiB).
    pub max_batch_bytes: usize,
    /// When set, a batch holding a synced record waits up to this long for
    /// more records before its `fdatasync`, but only while another
    /// producer that appended within `max_latency` has no record in the
    /// batch yet (adaptive: a lone writer never waits), and never
    /// so long that its oldest record would be acknowledged after
    /// `max_latency` (the recent sync time is left for the sync). Default
    /// off: it pays when writers come back at once after each
    /// acknowledgement (a seed's threads), and costs when they come on a
    /// schedule of their own, since a batch then waits for writers not yet
    /// due (docs/benchmarks/durable-writes.md: eight such writers queue up
    /// at 70 % of the peak with a 0.5 ms window, where no window keeps up).
    pub sync_window: Option<Duration>,
    /// The latency the journal aims to acknowledge synced appends within,
    /// from the moment they are queued (default 5 ms). The writer never
    /// waits voluntarily past it (it bounds `sync_window`); a disk slower
    /// than it cannot be hidden, and acknowledgements later than it are
    /// counted ([`Journal::late_acks`]).
    pub max_latency: Duration,
    /// Whether the spare segment made ahead of need (see
    /// [`JournalOptions::spare_segment`]) is written through with zeros, so
    /// that syncs into it write data only, never extent metadata. Costs one
    /// segment's worth of writes per new segment, which compete with the
    /// writer's syncs (on the benchmark's disk they raised p99 from ~10 ms
    /// to ~120 ms). Default off.
    pub zero_segments: bool,
    /// Whether a background thread keeps one spare segment file ready, so a
    /// roll to a new segment renames a file instead of allocating one while
    /// writers wait. Default on.
    pub spare_segment: bool,
}

impl Default for JournalOptions {
    fn default() -> Self {
        Self {
            segment_size: 64 << 20,
            queue_len: 4096,
            max_batch_bytes: 8 << 20,
            sync_window: None,
            max_latency: Duration::from_millis(5),
            zero_segments: false,
            spare_segment: true,
        }
    }
}

impl JournalOptions {
    /// The largest payload a record may have.
    pub fn max_record_bytes(&self) -> usize {
        usize::try_from(segment::capacity(self.segment_size)).unwrap_or(usize::MAX)
            - format::FRAME_LEN
    }
}

/// Errors of the journal.
#[derive(Debug, Clone, thiserror::Error)]
pub enum JournalError {
    /// An I/O call failed.
    #[error("journal {op} failed")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The operating system's error (shared: journal errors are handed
        /// to every waiting producer).
        #[source]
        source: std::sync::Arc<std::io::Error>,
    },
    /// The options cannot make a journal.
    #[error("invalid journal options: {0}")]
    InvalidOptions(&'static str),
    /// Another process has the journal open.
    #[error("journal {0} is in use by another process")]
    InUse(std::path::PathBuf),
    /// No segment with this id exists (a position from another journal, or
    /// a segment already released).
    #[error("journal has no segment {0}")]
    NoSegment(u64),
    /// The active segment cannot be released.
    #[error("segment {0} is the active segment and cannot be released")]
    ActiveSegment(u64),
    /// An `fdatasync` failed earlier; nothing more is accepted until the
    /// journal is reopened.
    #[error("journal refuses writes after a failed fsync ({0}); reopen it")]
    Poisoned(String),
    /// A record followed by synced data is damaged.
    #[error("journal corrupt in segment {segment} at offset {offset}: {reason}")]
    Corrupt {
        /// Segment id.
        segment: u64,
        /// Offset in the segment file.
        offset: u32,
        /// What is wrong.
        reason: String,
    },
    /// The record is larger than a segment can hold.
    #[error("record of {size} bytes exceeds the limit of {limit}")]
    TooLarge {
        /// Payload size.
        size: usize,
        /// Largest payload.
        limit: usize,
    },
    /// The journal was closed.
    #[error("journal is closed")]
    Closed,
}

impl JournalError {
    fn io(op: &'static str, e: std::io::Error) -> JournalError {
        JournalError::Io {
            op,
            source: std::sync::Arc::new(e),
        }
    }
}

/// A completion a producer thread waits on; one per thread, reused.
#[derive(Debug, Default)]
struct Slot {
    result: Mutex<Option<Result<Position, JournalError>>>,
    ready: Condvar,
}

impl Slot {
    fn complete(&self, result: Result<Position, JournalError>) {
        let mut r = self
            .result
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *r = Some(result);
        self.ready.notify_one();
    }

    fn wait(&self) -> Result<Position, JournalError> {
        let mut r = self
            .result
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        loop {
            if let Some(result) = r.take() {
                return result;
            }
            r = self
                .ready
                .wait(r)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }
}

thread_local! {
    static SLOT: Arc<Slot> = Arc::new(Slot::default());
}

/// One record on its way to the writer. The payload buffer comes from a
/// pool and goes back to it once the writer copied it into the batch.
struct Request {
    /// `None`: a barrier that writes nothing and makes everything before it durable.
    kind: Option<RecordKind>,
    payload: Vec<u8>,
    persist: Persist,
    slot: Arc<Slot>,
    /// When the producer queued it: latency is counted from here.
    queued_at: std::time::Instant,
}

/// State shared by producers, readers and the writer.
#[derive(Debug)]
struct Shared {
    /// Held locked while the journal is open.
    _lock: std::fs::File,
    dir: PathBuf,
    options: JournalOptions,
    poisoned: AtomicBool,
    poison_reason: Mutex<String>,
    /// Read handles by segment id.
    files: RwLock<std::collections::BTreeMap<u64, Arc<std::fs::File>>>,
    /// Recycled payload buffers.
    pool_tx: Sender<Vec<u8>>,
    pool_rx: Receiver<Vec<u8>>,
    /// Records appended (acknowledged) since open.
    appended: AtomicU64,
    /// fdatasync calls since open.
    syncs: AtomicU64,
    /// Appends acknowledged later than `max_latency` after they were queued.
    late: AtomicU64,
    /// fdatasync calls that alone took longer than `max_latency`.
    slow_syncs: AtomicU64,
    /// Set only by fault-injection tests: the next fdatasync fails with EIO.
    fail_next_fsync: AtomicBool,
    /// Global position (`segment << 32 | offset`) up to which everything is synced.
    durable: AtomicU64,
    /// End offset of the records in each segment.
    ends: Mutex<std::collections::BTreeMap<u64, u32>>,
    /// The active segment's id.
    active: AtomicU64,
    /// Serializes segment creation (which takes from the free pool) with release.
    roll_lock: Mutex<()>,
    /// Set when the journal closes: the spare maker stops.
    closing: AtomicBool,
}

/// The journal: appends from any thread, reads by position.
#[derive(Debug)]
pub struct Journal {
    requests: Option<Sender<Request>>,
    shared: Arc<Shared>,
    writer: Option<JoinHandle<()>>,
    /// The thread keeping a spare segment ready, when there is one.
    spare: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("kind", &self.kind)
            .field("len", &self.payload.len())
            .finish_non_exhaustive()
    }
}

impl Journal {
    /// Opens (creating if needed) the journal in `dir`, replaying every
    /// record at or after `from` (all of them when `None`) through `replay`
    /// in order. A torn tail is cut; damage before synced data is an error.
    pub fn open(
        dir: impl AsRef<Path>,
        options: JournalOptions,
        from: Option<Position>,
        replay: impl FnMut(Record<'_>),
    ) -> Result<(Journal, Recovery), JournalError> {
        let dir = dir.as_ref().to_path_buf();
        if options.segment_size < 64 * 1024 || options.segment_size > u64::from(u32::MAX) {
            return Err(JournalError::InvalidOptions(
                "segment_size must be between 64 KiB and 4 GiB",
            ));
        }
        std::fs::create_dir_all(&dir).map_err(|e| JournalError::io("create directory", e))?;
        // One process at a time: a second writer would interleave records.
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join("LOCK"))
            .map_err(|e| JournalError::io("lock", e))?;
        // A process forked by this one (to run a program) holds a copy of
        // the lock until it calls exec, so a lock just released may still
        // look taken for a moment: wait a little before giving up.
        let mut attempts = 0;
        while lock.try_lock().is_err() {
            attempts += 1;
            if attempts == 20 {
                return Err(JournalError::InUse(dir));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let recovered = recovery::recover(&dir, &options, from, replay)?;
        let (pool_tx, pool_rx) = bounded(options.queue_len.max(1) * 2);
        let shared = Arc::new(Shared {
            _lock: lock,
            dir: dir.clone(),
            options,
            poisoned: AtomicBool::new(false),
            poison_reason: Mutex::new(String::new()),
            files: RwLock::new(recovered.files.clone()),
            pool_tx,
            pool_rx,
            appended: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            late: AtomicU64::new(0),
            slow_syncs: AtomicU64::new(0),
            fail_next_fsync: AtomicBool::new(false),
            durable: AtomicU64::new(0),
            ends: Mutex::new(recovered.ends.clone()),
            active: AtomicU64::new(0),
            roll_lock: Mutex::new(()),
            closing: AtomicBool::new(false),
        });
        let (requests, inbox) = bounded(options.queue_len.max(1));
        segment::remove_unfinished_spare(&dir).map_err(|e| JournalError::io("clean spare", e))?;
        let (spare_tx, spare) = if options.spare_segment {
            let (tx, rx) = bounded(1);
            let shared = shared.clone();
            let thread = std::thread::Builder::new()
                .name("tessera-journal-spare".into())
                .spawn(move || keep_a_spare(&shared, &rx))
                .map_err(|e| JournalError::io("start spare maker", e))?;
            // A spare is made at open, before the first roll needs it.
            let _ = tx.try_send(());
            (Some(tx), Some(thread))
        } else {
            (None, None)
        };
        let state = writer::WriterState::new(shared.clone(), &recovered, spare_tx)?;
        let writer = std::thread::Builder::new()
            .name("tessera-journal".into())
            .spawn(move || state.run(&inbox))
            .map_err(|e| JournalError::io("start writer", e))?;
        Ok((
            Journal {
                requests: Some(requests),
                shared,
                writer: Some(writer),
                spare,
            },
            recovered.report,
        ))
    }

    /// Appends a record and returns its position once it is acknowledged
    /// under `persist`. Blocks while the queue is full.
    pub fn append(
        &self,
        kind: RecordKind,
        payload: &[u8],
        persist: Persist,
    ) -> Result<Position, JournalError> {
        self.append_with(kind, payload.len(), persist, |buf| {
            buf.extend_from_slice(payload);
        })
    }

    /// Like [`Journal::append`], with the payload written by `fill` into a
    /// pooled buffer (so callers that assemble a record from parts copy it
    /// once). `len` is the payload size `fill` will write.
    pub fn append_with(
        &self,
        kind: RecordKind,
        len: usize,
        persist: Persist,
        fill: impl FnOnce(&mut Vec<u8>),
    ) -> Result<Position, JournalError> {
        let limit = self.shared.options.max_record_bytes();
        if len > limit {
            return Err(JournalError::TooLarge { size: len, limit });
        }
        self.check_poison()?;
        let requests = self.requests.as_ref().ok_or(JournalError::Closed)?;
        let mut payload = self.shared.pool_rx.try_recv().unwrap_or_default();
        payload.clear();
        payload.reserve(len);
        fill(&mut payload);
        if payload.len() > limit {
            return Err(JournalError::TooLarge {
                size: payload.len(),
                limit,
            });
        }
        let slot = SLOT.with(Arc::clone);
        requests
            .send(Request {
                kind: Some(kind),
                payload,
                persist,
                slot: slot.clone(),
                queued_at: std::time::Instant::now(),
            })
            .map_err(|_| JournalError::Closed)?;
        slot.wait()
    }

    /// Returns once every record appended before the call is on stable
    /// storage (one `fdatasync`, shared with any batch in progress).
    pub fn sync(&self) -> Result<(), JournalError> {
        self.check_poison()?;
        let requests = self.requests.as_ref().ok_or(JournalError::Closed)?;
        let slot = SLOT.with(Arc::clone);
        requests
            .send(Request {
                kind: None,
                payload: Vec::new(),
                persist: Persist::Synced,
                slot: slot.clone(),
                queued_at: std::time::Instant::now(),
            })
            .map_err(|_| JournalError::Closed)?;
        slot.wait().map(drop)
    }

    /// Segments holding records, oldest first, with the bytes written in
    /// each (header included); the last one is the active segment.
    pub fn segments(&self) -> Vec<SegmentUsage> {
        let ends = self
            .shared
            .ends
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let active = self.shared.active.load(Ordering::Acquire);
        ends.iter()
            .map(|(id, end)| SegmentUsage {
                id: *id,
                used_bytes: u64::from(*end),
                active: *id == active,
            })
            .collect()
    }

    /// Gives segment `id` back for reuse: its records are gone from the
    /// journal. The caller must first have made every record of it that is
    /// still needed durable elsewhere (re-appended, then [`Journal::sync`]).
    /// The active segment cannot be released.
    pub fn release(&self, id: u64) -> Result<(), JournalError> {
        if id == self.shared.active.load(Ordering::Acquire) {
            return Err(JournalError::ActiveSegment(id));
        }
        let _roll = self
            .shared
            .roll_lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        segment::retire(&self.shared.dir, id)
            .map_err(|e| JournalError::io("release segment", e))?;
        self.shared
            .files
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&id);
        self.shared
            .ends
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&id);
        Ok(())
    }

    /// Reads the payload of the record at `position` into `out` (cleared
    /// first); returns its kind. The checksum is verified.
    pub fn read(&self, position: Position, out: &mut Vec<u8>) -> Result<RecordKind, JournalError> {
        let file = self
            .shared
            .files
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&position.segment)
            .cloned()
            .ok_or(JournalError::NoSegment(position.segment))?;
        recovery::read_record(&file, position, out)
    }

    fn check_poison(&self) -> Result<(), JournalError> {
        if self.shared.poisoned.load(Ordering::Acquire) {
            let reason = self
                .shared
                .poison_reason
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone();
            return Err(JournalError::Poisoned(reason));
        }
        Ok(())
    }

    /// Makes this journal's next `fdatasync` fail with EIO (fault tests).
    #[cfg(feature = "fault-injection")]
    pub fn inject_fsync_failure(&self) {
        self.shared.fail_next_fsync.store(true, Ordering::SeqCst);
    }

    /// Whether a failed fsync has poisoned the journal.
    pub fn is_poisoned(&self) -> bool {
        self.shared.poisoned.load(Ordering::Acquire)
    }

    /// The position up to which every record is on stable storage: a
    /// checkpoint of state built from the records before it can be replayed
    /// from here.
    pub fn durable_position(&self) -> Position {
        let g = self.shared.durable.load(Ordering::Acquire);
        Position {
            segment: g >> 32,
            offset: g as u32,
        }
    }

    /// Records acknowledged and `fdatasync` calls made since open.
    pub fn stats(&self) -> (u64, u64) {
        (
            self.shared.appended.load(Ordering::Relaxed),
            self.shared.syncs.load(Ordering::Relaxed),
        )
    }

    /// Appends (and syncs) acknowledged later than
    /// [`JournalOptions::max_latency`] after they were queued, since open.
    pub fn late_acks(&self) -> u64 {
        self.shared.late.load(Ordering::Relaxed)
    }

    /// `fdatasync` calls that alone took longer than
    /// [`JournalOptions::max_latency`], since open: acknowledgements late
    /// because the disk itself was slower than the bound, whatever the
    /// batching did.
    pub fn slow_syncs(&self) -> u64 {
        self.shared.slow_syncs.load(Ordering::Relaxed)
    }

    /// The directory holding the segments.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// Stops the writer after the queued records; waits for it.
    pub fn close(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.requests.take();
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
        // The writer dropped the spare maker's channel; a spare being
        // zeroed is abandoned.
        self.shared.closing.store(true, Ordering::Relaxed);
        if let Some(s) = self.spare.take() {
            let _ = s.join();
        }
    }
}

/// The spare maker: after each wake (at open and after every roll) makes
/// a spare segment when none waits. A failure is logged; a roll without a
/// spare allocates its segment itself.
fn keep_a_spare(shared: &Shared, wake: &Receiver<()>) {
    while wake.recv().is_ok() {
        match segment::has_spare(&shared.dir) {
            Ok(true) => {}
            Ok(false) => {
                if let Err(e) = segment::prepare_spare(
                    &shared.dir,
                    shared.options.segment_size,
                    shared.options.zero_segments,
                    &shared.closing,
                ) && !shared.closing.load(Ordering::Relaxed)
                {
                    tracing::warn!(
                        "journal {}: cannot make a spare segment: {e}",
                        shared.dir.display()
                    );
                }
            }
            Err(e) => tracing::warn!("journal {}: {e}", shared.dir.display()),
        }
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        self.shutdown();
    }
}
