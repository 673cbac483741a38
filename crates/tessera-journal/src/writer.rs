//! The writer thread: drains the queue, writes a batch at once, one
//! `fdatasync` per batch that needs it, then completes every caller.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};

use crate::format::{FRAME_LEN, Frame, HEADER_LEN, encode, global};
use crate::recovery::Recovered;
use crate::segment;
use crate::{JournalError, Persist, Position, Request, Shared, Slot};

fn fdatasync(file: &File, shared: &Shared) -> std::io::Result<()> {
    if shared.fail_next_fsync.swap(false, Ordering::SeqCst) {
        return Err(std::io::Error::from_raw_os_error(libc::EIO));
    }
    file.sync_data()
}

pub(crate) struct WriterState {
    shared: Arc<Shared>,
    active: Arc<File>,
    active_id: u64,
    /// Where the next batch is written.
    offset: u32,
    next_seq: u64,
    /// Global position up to which everything is synced.
    durable: u64,
    max_id: u64,
    // Reused every batch: in steady state the writer allocates nothing.
    requests: Vec<Request>,
    batch: Vec<u8>,
    /// Completions of the batch: slot, position, when it was queued.
    done: Vec<(Arc<Slot>, Position, Instant)>,
    /// Recent time to write and sync a batch (moving average): the window
    /// leaves this much of `max_latency` for the sync.
    expected_sync: Duration,
    /// Wakes the spare maker after a roll took the spare.
    spare: Option<Sender<()>>,
    /// Who has been appending lately: the window stops waiting once each
    /// of them has a record in the batch.
    producers: Producers,
}

/// Producers (the address of each one's completion slot) with when each
/// last queued a record and the last batch it had one in.
#[derive(Default)]
struct Producers {
    seen: Vec<(usize, Instant, u64)>,
    /// Numbers the batches.
    batch: u64,
    /// Distinct producers with a record in the batch being gathered.
    in_batch: usize,
}

impl Producers {
    /// Starts gathering a batch: forgets producers quiet for `horizon`.
    fn begin(&mut self, horizon: Duration) {
        let now = Instant::now();
        self.seen
            .retain(|(_, at, _)| now.saturating_duration_since(*at) <= horizon);
        self.batch += 1;
        self.in_batch = 0;
    }

    /// Counts a record of the batch being gathered.
    fn note(&mut self, request: &Request) {
        let id = Arc::as_ptr(&request.slot) as usize;
        let batch = self.batch;
        match self.seen.iter_mut().find(|(p, _, _)| *p == id) {
            Some((_, at, last)) => {
                *at = request.queued_at;
                if *last != batch {
                    *last = batch;
                    self.in_batch += 1;
                }
            }
            None => {
                self.seen.push((id, request.queued_at, batch));
                self.in_batch += 1;
            }
        }
    }

    /// Whether a producer active lately has no record in the batch yet.
    fn someone_missing(&self) -> bool {
        self.in_batch < self.seen.len()
    }
}

impl WriterState {
    pub fn new(
        shared: Arc<Shared>,
        recovered: &Recovered,
        spare: Option<Sender<()>>,
    ) -> Result<WriterState, JournalError> {
        let (active_id, offset, active) = match recovered.active {
            Some((id, offset)) if recovered.files.contains_key(&id) => {
                (id, offset, recovered.files[&id].clone())
            }
            _ => {
                let id = recovered.max_id + 1;
                let file = segment::create(&shared.dir, id, shared.options.segment_size)
                    .map_err(|e| JournalError::io("create segment", e))?;
                let file = Arc::new(file);
                shared
                    .files
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .insert(id, file.clone());
                (id, HEADER_LEN, file)
            }
        };
        shared
            .durable
            .store(global(active_id, offset), Ordering::Release);
        shared.active.store(active_id, Ordering::Release);
        shared
            .ends
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(active_id, offset);
        Ok(WriterState {
            max_id: recovered.max_id.max(active_id),
            durable: global(active_id, offset),
            active,
            active_id,
            offset,
            next_seq: recovered.next_seq,
            requests: Vec::with_capacity(shared.options.queue_len.max(1)),
            batch: Vec::with_capacity(shared.options.max_batch_bytes),
            done: Vec::with_capacity(shared.options.queue_len.max(1)),
            expected_sync: Duration::ZERO,
            spare,
            producers: Producers::default(),
            shared,
        })
    }

    pub fn run(mut self, inbox: &Receiver<Request>) {
        while let Ok(first) = inbox.recv() {
            let mut bytes = first.payload.len();
            let mut synced = first.persist == Persist::Synced;
            // Producers are only tracked for the window.
            let window = self.shared.options.sync_window.is_some();
            if window {
                self.producers.begin(self.shared.options.max_latency);
                self.producers.note(&first);
            }
            self.requests.push(first);
            while bytes < self.shared.options.max_batch_bytes {
                match inbox.try_recv() {
                    Ok(r) => {
                        bytes += r.payload.len();
                        synced |= r.persist == Persist::Synced;
                        if window {
                            self.producers.note(&r);
                        }
                        self.requests.push(r);
                    }
                    Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
                }
            }
            if let Some(window) = self.shared.options.sync_window
                && synced
            {
                // Never wait so long that the oldest record, with the sync
                // still to come, would be acknowledged after max_latency.
                let deadline = (Instant::now() + window).min(
                    self.requests[0].queued_at
                        + self
                            .shared
                            .options
                            .max_latency
                            .saturating_sub(self.expected_sync),
                );
                // Everyone appending lately is in the batch (writers in
                // lockstep, or a lone writer): nobody is coming, so the
                // window ends. (Waiting only after a batch of several
                // records would let one batch of one, from a writer late
                // on a busy machine, end the waiting for good.)
                while bytes < self.shared.options.max_batch_bytes
                    && self.producers.someone_missing()
                {
                    match inbox.recv_deadline(deadline) {
                        Ok(r) => {
                            bytes += r.payload.len();
                            self.producers.note(&r);
                            self.requests.push(r);
                        }
                        Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
                    }
                }
            }
            let started = Instant::now();
            self.commit();
            if synced {
                // A moving average over about eight batches.
                self.expected_sync = (self.expected_sync * 7 + started.elapsed()) / 8;
            }
        }
    }

    /// Writes the queued requests as one batch (two when the segment fills)
    /// and completes them: the ones written before a failure (made durable
    /// when the segment filled) succeed, the others get the error.
    fn commit(&mut self) {
        let (committed, failure) = match self.write_batch() {
            Ok(()) => (self.done.len(), None),
            Err((committed, e)) => (committed, Some(e)),
        };
        self.shared
            .appended
            .fetch_add(committed as u64, Ordering::Relaxed);
        // Counted before any caller is completed, so a caller reading the
        // count after its append returned sees its own record in it.
        let now = Instant::now();
        let max_latency = self.shared.options.max_latency;
        let late = self
            .done
            .iter()
            .filter(|(_, _, queued_at)| now.duration_since(*queued_at) > max_latency)
            .count();
        self.shared.late.fetch_add(late as u64, Ordering::Relaxed);
        for (i, (slot, position, _)) in self.done.drain(..).enumerate() {
            match &failure {
                Some(e) if i >= committed => slot.complete(Err(e.clone())),
                _ => slot.complete(Ok(position)),
            }
        }
    }

    /// Writes the batch. On failure, returns how many of `done` (from the
    /// front) are nevertheless written and synced, and the error.
    ///
    /// The invariant recovery relies on: sequence numbers on disk only grow.
    /// So when the segment fills in the middle of a batch, the part before
    /// is written and synced and counts as committed whatever happens next;
    /// only the part after it is retried with the same sequence numbers.
    fn write_batch(&mut self) -> Result<(), (usize, JournalError)> {
        self.batch.clear();
        self.done.clear();
        let poisoned = self.shared.poisoned.load(Ordering::Acquire);
        let mut need_sync = false;
        let mut failure = None;
        let mut batch_start = self.offset;
        // The first sequence number not yet durable, and how many of `done`
        // are: a failure rewinds to here, never further.
        let mut first_seq = self.next_seq;
        let mut committed = 0;
        let size = self.shared.options.segment_size;
        let requests = std::mem::take(&mut self.requests);
        let mut requests = requests;
        for r in requests.drain(..) {
            let Some(kind) = r.kind else {
                // A barrier: nothing to write, only the sync it asks for.
                need_sync = true;
                self.done.push((
                    r.slot,
                    Position {
                        segment: self.active_id,
                        offset: batch_start + self.batch.len() as u32,
                    },
                    r.queued_at,
                ));
                continue;
            };
            let frame_len = (FRAME_LEN + r.payload.len()) as u64;
            if failure.is_none()
                && !poisoned
                && u64::from(batch_start) + self.batch.len() as u64 + frame_len > size
            {
                // The segment is full: write what we have, make it durable,
                // move on to a new segment.
                match self.flush(batch_start, true) {
                    Ok(()) => {
                        committed = self.done.len();
                        first_seq = self.next_seq;
                        if let Err(e) = self.roll() {
                            failure = Some(e);
                        }
                    }
                    Err(e) => failure = Some(e),
                }
                batch_start = self.offset;
            }
            if failure.is_none() && !poisoned {
                let position = Position {
                    segment: self.active_id,
                    offset: batch_start + self.batch.len() as u32,
                };
                let frame = Frame {
                    segment: self.active_id,
                    seq: self.next_seq,
                    durable: self.durable,
                    kind,
                };
                encode(&mut self.batch, &frame, &r.payload);
                self.next_seq += 1;
                need_sync |= r.persist == Persist::Synced;
                self.done.push((r.slot, position, r.queued_at));
            } else {
                self.done.push((
                    r.slot,
                    Position {
                        segment: 0,
                        offset: 0,
                    },
                    r.queued_at,
                ));
            }
            let _ = self.shared.pool_tx.try_send(r.payload);
        }
        self.requests = requests;
        if poisoned {
            return Err((0, self.poison_error()));
        }
        if let Some(e) = failure {
            self.next_seq = first_seq;
            return Err((committed, e));
        }
        self.flush(batch_start, need_sync).map_err(|e| {
            // Nothing of this part counts: the next batch overwrites it.
            self.offset = batch_start;
            self.next_seq = first_seq;
            (committed, e)
        })
    }

    /// Writes the batch buffer at `start` and syncs when asked.
    fn flush(&mut self, start: u32, sync: bool) -> Result<(), JournalError> {
        if !self.batch.is_empty() {
            self.active
                .write_all_at(&self.batch, u64::from(start))
                .map_err(|e| JournalError::io("write", e))?;
            self.offset = start + self.batch.len() as u32;
            self.batch.clear();
            self.shared
                .ends
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(self.active_id, self.offset);
        }
        if sync {
            let began = Instant::now();
            if let Err(e) = fdatasync(&self.active, &self.shared) {
                let reason = format!("fdatasync of segment {}: {e}", self.active_id);
                tracing::error!("{reason}; the journal refuses writes until reopened");
                *self
                    .shared
                    .poison_reason
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = reason;
                self.shared.poisoned.store(true, Ordering::Release);
                return Err(self.poison_error());
            }
            self.shared.syncs.fetch_add(1, Ordering::Relaxed);
            if began.elapsed() > self.shared.options.max_latency {
                self.shared.slow_syncs.fetch_add(1, Ordering::Relaxed);
            }
            self.durable = global(self.active_id, self.offset);
            self.shared.durable.store(self.durable, Ordering::Release);
        }
        Ok(())
    }

    fn roll(&mut self) -> Result<(), JournalError> {
        let id = self.max_id + 1;
        let file = {
            let _roll = self
                .shared
                .roll_lock
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            segment::create(&self.shared.dir, id, self.shared.options.segment_size)
                .map_err(|e| JournalError::io("create segment", e))?
        };
        let file = Arc::new(file);
        self.shared
            .files
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(id, file.clone());
        self.max_id = id;
        self.active = file;
        self.active_id = id;
        self.shared.active.store(id, Ordering::Release);
        self.shared
            .ends
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(id, HEADER_LEN);
        self.offset = HEADER_LEN;
        self.durable = global(id, HEADER_LEN);
        self.shared.durable.store(self.durable, Ordering::Release);
        if let Some(spare) = &self.spare {
            let _ = spare.try_send(());
        }
        Ok(())
    }

    fn poison_error(&self) -> JournalError {
        JournalError::Poisoned(
            self.shared
                .poison_reason
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone(),
        )
    }
}
