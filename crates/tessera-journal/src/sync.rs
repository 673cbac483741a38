//! Syncs beside the writer: once a batch is written, the writer hands its
//! `fdatasync` to a free sync thread and goes on to write the next batch,
//! so up to `sync_threads` syncs are in flight and a record never waits for
//! a sync that began before it was written. A batch's callers are answered
//! when any sync begun after the batch was written returns: that sync
//! covers every byte written before it, so a later batch's sync that
//! returns first answers the earlier batches too.
//!
//! Each sync thread syncs through its own file descriptor, opened when the
//! segment became active and before any record was written to it. Linux
//! reports a writeback error once to each open file description; two syncs
//! through one descriptor could share one report, and the one that missed
//! it would acknowledge lost data.

use std::collections::VecDeque;
use std::fs::File;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender, bounded};

use crate::{JournalError, Position, Shared, Slot, segment};

/// Callers of a batch: slot, position, when the record was queued.
pub(crate) type Done = Vec<(Arc<Slot>, Position, Instant)>;

/// One descriptor of a segment per sync thread.
#[derive(Debug)]
pub(crate) struct SyncFiles(Vec<File>);

impl SyncFiles {
    /// Opens segment `id` once per sync thread. Call before any record is
    /// written to it.
    pub fn open(dir: &Path, id: u64, threads: usize) -> std::io::Result<Arc<SyncFiles>> {
        (0..threads)
            .map(|_| segment::open(dir, id))
            .collect::<std::io::Result<Vec<File>>>()
            .map(|files| Arc::new(SyncFiles(files)))
    }
}

/// A written batch whose callers wait for a sync.
struct Waiting {
    batch: u64,
    done: Done,
}

#[derive(Default)]
struct State {
    /// Batches written and not yet answered, oldest first.
    waiting: VecDeque<Waiting>,
    /// Emptied caller lists, reused (the writer allocates nothing per batch).
    spare: Vec<Done>,
}

struct Inner {
    state: Mutex<State>,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// One sync to run: make everything up to `end` (a global position)
/// durable, then answer every batch up to `batch`.
struct Job {
    batch: u64,
    end: u64,
    files: Arc<SyncFiles>,
}

/// The sync threads of one journal.
pub(crate) struct SyncPool {
    inner: Arc<Inner>,
    jobs: Option<Sender<Job>>,
    threads: Vec<JoinHandle<()>>,
}

impl SyncPool {
    /// Starts `threads` sync threads.
    pub fn start(shared: &Arc<Shared>, threads: usize) -> std::io::Result<SyncPool> {
        let inner = Arc::new(Inner {
            state: Mutex::new(State::default()),
        });
        // A rendezvous: handing over a sync waits for a free thread, and
        // meanwhile records gather for the next batch.
        let (jobs, inbox) = bounded::<Job>(0);
        let threads = (0..threads)
            .map(|k| {
                let (shared, inner, inbox) = (shared.clone(), inner.clone(), inbox.clone());
                std::thread::Builder::new()
                    .name(format!("tessera-journal-sync-{k}"))
                    .spawn(move || run(k, &shared, &inner, &inbox))
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(SyncPool {
            inner,
            jobs: Some(jobs),
            threads,
        })
    }

    /// Queues batch `batch`'s callers (taken from `done`, which is left
    /// empty) and hands its sync, up to the global position `end`, to the
    /// next free sync thread, waiting for one.
    pub fn submit(&self, batch: u64, end: u64, files: &Arc<SyncFiles>, done: &mut Done) {
        {
            let mut state = self.inner.lock();
            let spare = state.spare.pop().unwrap_or_default();
            let callers = std::mem::replace(done, spare);
            state.waiting.push_back(Waiting {
                batch,
                done: callers,
            });
        }
        let job = Job {
            batch,
            end,
            files: files.clone(),
        };
        if let Some(jobs) = &self.jobs
            && jobs.send(job).is_ok()
        {
            return;
        }
        // No sync thread is left (they only stop with the pool): answer
        // rather than leave callers waiting.
        answer_all(&mut self.inner.lock(), &Err(JournalError::Closed));
    }

    /// Lets the syncs in flight finish, answering their callers, and stops
    /// the threads.
    pub fn stop(mut self) {
        self.jobs.take();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// A sync thread: runs one job at a time through its own descriptor.
fn run(k: usize, shared: &Shared, inner: &Inner, inbox: &Receiver<Job>) {
    while let Ok(job) = inbox.recv() {
        let started = Instant::now();
        let result = if shared.poisoned.load(Ordering::Acquire) {
            Err(shared.poison_error())
        } else {
            match shared.fdatasync(&job.files.0[k]) {
                Ok(()) => {
                    shared.synced(job.end, started.elapsed());
                    Ok(())
                }
                Err(e) => Err(shared.poison(&format!("fdatasync ({e})"))),
            }
        };
        let mut state = inner.lock();
        match result {
            Ok(()) => {
                while state.waiting.front().is_some_and(|w| w.batch <= job.batch) {
                    if let Some(mut w) = state.waiting.pop_front() {
                        shared.answer(&mut w.done, None);
                        state.spare.push(w.done);
                    }
                }
            }
            // What is written and not yet answered may be lost: every
            // waiting batch fails, later ones included.
            Err(e) => answer_all(&mut state, &Err(e)),
        }
    }
}

fn answer_all(state: &mut State, result: &Result<(), JournalError>) {
    while let Some(mut w) = state.waiting.pop_front() {
        for (slot, position, _) in w.done.drain(..) {
            slot.complete(result.clone().map(|()| position));
        }
        state.spare.push(w.done);
    }
}
