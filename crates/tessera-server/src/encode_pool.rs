//! The bounded pool that encodes and saves the sibling tiles of a rendered
//! metatile while the requested tile is already on its way to the client.
//!
//! Both the threads and the queue are bounded. When the queue is full,
//! [`EncodePool::try_submit`] hands the job back and the caller runs it
//! itself (the caller-runs policy): saturation slows requests down, it never
//! grows a queue.

use std::panic::{AssertUnwindSafe, catch_unwind};

use crossbeam_channel::{Sender, TrySendError, bounded};
use prometheus_client::metrics::gauge::Gauge;

/// A unit of work: encode one tile and store it, releasing its lock.
pub type Job = Box<dyn FnOnce() + Send + 'static>;

/// A fixed set of worker threads fed by a bounded queue.
#[derive(Debug)]
pub struct EncodePool {
    sender: Option<Sender<Job>>,
    threads: usize,
    depth: Gauge,
}

impl EncodePool {
    /// Starts `threads` workers with a queue of `queue_len` jobs. With zero
    /// threads no worker starts and every job is handed back.
    pub fn new(threads: usize, queue_len: usize, depth: Gauge) -> EncodePool {
        if threads == 0 {
            return EncodePool {
                sender: None,
                threads,
                depth,
            };
        }
        let (sender, receiver) = bounded::<Job>(queue_len.max(1));
        for i in 0..threads {
            let receiver = receiver.clone();
            let depth = depth.clone();
            std::thread::Builder::new()
                .name(format!("tessera-encode-{i}"))
                .spawn(move || {
                    for job in receiver {
                        depth.dec();
                        // A panicking job must not take a worker with it; its
                        // guards were dropped while unwinding.
                        if catch_unwind(AssertUnwindSafe(job)).is_err() {
                            tracing::error!("a tile encode job panicked");
                        }
                    }
                })
                .expect("spawning an encode worker thread");
        }
        EncodePool {
            sender: Some(sender),
            threads,
            depth,
        }
    }

    /// Worker threads (0: everything runs inline on the request path).
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Queues `job`, or gives it back when there are no workers or the
    /// queue is full.
    pub fn try_submit(&self, job: Job) -> Result<(), Job> {
        let Some(sender) = &self.sender else {
            return Err(job);
        };
        self.depth.inc();
        match sender.try_send(job) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(job) | TrySendError::Disconnected(job)) => {
                self.depth.dec();
                Err(job)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_full_queue_hands_jobs_back() {
        let pool = EncodePool::new(1, 2, Gauge::default());
        let (release, gate) = crossbeam_channel::bounded::<()>(0);
        // Occupy the only worker, then fill the queue.
        assert!(
            pool.try_submit(Box::new(move || {
                let _ = gate.recv();
            }))
            .is_ok()
        );
        std::thread::sleep(Duration::from_millis(50));
        let ran = Arc::new(AtomicUsize::new(0));
        let mut handed_back = 0;
        for _ in 0..5 {
            let ran = ran.clone();
            if let Err(job) = pool.try_submit(Box::new(move || {
                ran.fetch_add(1, Ordering::SeqCst);
            })) {
                handed_back += 1;
                job();
            }
        }
        assert_eq!(handed_back, 3, "queue of 2: three of five come back");
        assert_eq!(pool.depth.get(), 2);
        release.send(()).unwrap();
        while ran.load(Ordering::SeqCst) < 5 {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(pool.depth.get(), 0);
    }

    #[test]
    fn zero_threads_means_inline() {
        let pool = EncodePool::new(0, 10, Gauge::default());
        assert!(pool.try_submit(Box::new(|| {})).is_err());
    }

    #[test]
    fn a_panicking_job_does_not_kill_the_worker() {
        let pool = EncodePool::new(1, 4, Gauge::default());
        assert!(pool.try_submit(Box::new(|| panic!("boom"))).is_ok());
        let (tx, rx) = crossbeam_channel::bounded(1);
        assert!(
            pool.try_submit(Box::new(move || tx.send(()).unwrap()))
                .is_ok()
        );
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
    }
}
