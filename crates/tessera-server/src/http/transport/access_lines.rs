//! Access-log lines gathered in batches for one writer thread.
//!
//! A request appends its line to a shared buffer (one short lock, no
//! allocation once the buffer has grown) and goes on. The writer thread
//! sleeps until a line arrives, lets lines gather for up to
//! [`FLUSH_EVERY`] (less once [`BATCH_BYTES`] are waiting), then takes the
//! whole buffer and writes it in one call: at most 20 writes a second
//! plus one per 64 KiB of lines (about 150 a second at 50,000 requests a
//! second), not one per line. Past `limit` lines waiting, lines are dropped and counted; a
//! request never waits for the writer.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Where the writer thread puts each batch of whole lines.
pub type WriteBatch = Box<dyn FnMut(&[u8]) + Send>;

/// How long a line may wait before it is written.
pub const FLUSH_EVERY: Duration = Duration::from_millis(50);

/// Bytes waiting that make the writer write without waiting out
/// [`FLUSH_EVERY`].
pub const BATCH_BYTES: usize = 64 * 1024;

#[derive(Default)]
struct State {
    buf: Vec<u8>,
    lines: usize,
    /// The writer was told the buffer reached `BATCH_BYTES`.
    told_full: bool,
    closing: bool,
}

struct Inner {
    state: Mutex<State>,
    wake: Condvar,
    limit: usize,
    dropped: AtomicU64,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The request side: appends lines.
#[derive(Clone)]
pub struct Lines(Arc<Inner>);

impl Lines {
    /// Queues one line (newline included) unless `limit` lines already
    /// wait; then it is dropped and counted. Never waits for the writer.
    pub fn push(&self, line: &[u8]) {
        let mut state = self.0.lock();
        if state.lines >= self.0.limit {
            drop(state);
            self.0.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let first = state.buf.is_empty();
        state.buf.extend_from_slice(line);
        state.lines += 1;
        let full = !state.told_full && state.buf.len() >= BATCH_BYTES;
        state.told_full |= full;
        drop(state);
        if first || full {
            self.0.wake.notify_one();
        }
    }

    /// Lines dropped because `limit` lines were waiting.
    pub fn dropped(&self) -> u64 {
        self.0.dropped.load(Ordering::Relaxed)
    }
}

/// The writer thread; dropping it writes what waits and stops it.
pub struct Writer {
    inner: Arc<Inner>,
    thread: Option<JoinHandle<()>>,
}

impl Writer {
    /// Starts the writer thread, which hands each batch (whole lines) to
    /// `write`; at most `limit` lines wait for it.
    pub fn start(limit: usize, mut write: WriteBatch) -> std::io::Result<(Lines, Writer)> {
        let inner = Arc::new(Inner {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            limit,
            dropped: AtomicU64::new(0),
        });
        let shared = inner.clone();
        let thread = std::thread::Builder::new()
            .name("tessera-access-log".into())
            .spawn(move || {
                let mut batch = Vec::new();
                while take_batch(&shared, &mut batch) {
                    write(&batch);
                    batch.clear();
                }
            })?;
        Ok((
            Lines(inner.clone()),
            Writer {
                inner,
                thread: Some(thread),
            },
        ))
    }
}

/// Waits for lines, lets them gather, and swaps them into `batch`; false
/// once closing with nothing left.
fn take_batch(inner: &Inner, batch: &mut Vec<u8>) -> bool {
    let wait = |state| {
        inner
            .wake
            .wait(state)
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    };
    let mut state = inner.lock();
    while state.buf.is_empty() {
        if state.closing {
            return false;
        }
        state = wait(state);
    }
    let deadline = Instant::now() + FLUSH_EVERY;
    while state.buf.len() < BATCH_BYTES && !state.closing {
        let Some(left) = deadline.checked_duration_since(Instant::now()) else {
            break;
        };
        state = inner
            .wake
            .wait_timeout(state, left)
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .0;
    }
    std::mem::swap(&mut state.buf, batch);
    state.lines = 0;
    state.told_full = false;
    true
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.inner.lock().closing = true;
        self.inner.wake.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Written = Arc<Mutex<Vec<Vec<u8>>>>;

    fn collecting(limit: usize) -> (Lines, Writer, Written) {
        let written: Written = Arc::default();
        let sink = written.clone();
        let (lines, writer) = Writer::start(
            limit,
            Box::new(move |b| sink.lock().unwrap().push(b.to_vec())),
        )
        .unwrap();
        (lines, writer, written)
    }

    fn text(written: &Written) -> String {
        String::from_utf8(written.lock().unwrap().concat()).unwrap()
    }

    #[test]
    fn lines_from_many_threads_are_written_whole_and_once_in_few_writes() {
        let (lines, writer, written) = collecting(1_000_000);
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let lines = lines.clone();
                std::thread::spawn(move || {
                    for n in 0..5000 {
                        lines.push(format!("thread {t} line {n}\n").as_bytes());
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // Written within the flush interval, without closing the writer.
        let deadline = Instant::now() + Duration::from_secs(10);
        while text(&written).lines().count() < 20_000 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let all = text(&written);
        let mut got: Vec<&str> = all.lines().collect();
        assert_eq!(got.len(), 20_000);
        got.sort_unstable();
        got.dedup();
        assert_eq!(got.len(), 20_000, "every line once");
        // Each thread's lines in its order.
        for t in 0..4 {
            let mine: Vec<usize> = all
                .lines()
                .filter_map(|l| l.strip_prefix(&format!("thread {t} line ")))
                .map(|n| n.parse().unwrap())
                .collect();
            assert!(mine.windows(2).all(|w| w[0] < w[1]));
        }
        let writes = written.lock().unwrap().len();
        assert!(writes < 2000, "{writes} writes for 20000 lines");
        drop(writer);
        assert_eq!(lines.dropped(), 0);
    }

    #[test]
    fn a_full_queue_drops_and_counts_and_never_waits() {
        // The writer is held inside its first write until released.
        let (release, held) = std::sync::mpsc::channel::<()>();
        let held = Mutex::new(held);
        let (lines, writer) = Writer::start(
            3,
            Box::new(move |_| {
                let _ = held.lock().unwrap().recv();
            }),
        )
        .unwrap();
        lines.push(b"first\n");
        // The writer takes "first" and blocks in write; three more wait.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !lines.0.lock().buf.is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        for n in 0..100 {
            lines.push(format!("line {n}\n").as_bytes());
        }
        assert_eq!(lines.dropped(), 97);
        release.send(()).unwrap();
        release.send(()).unwrap();
        drop(writer);
    }

    #[test]
    fn dropping_the_writer_writes_what_waits() {
        let (lines, writer, written) = collecting(100);
        lines.push(b"last words\n");
        drop(writer);
        assert_eq!(text(&written), "last words\n");
    }
}
