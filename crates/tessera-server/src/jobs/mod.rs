//! Jobs the admin API runs (`/admin/jobs`): seed, reseed and truncate over
//! a plan, each with an id, progress that can be read (tiles done and
//! planned, rate, ETA, errors), cancellation, and a record on disk
//! ([`record`]) from which a job that was running when the process died
//! goes on after a restart ([`Jobs::resume`]), skipping the metatiles it
//! had stored.

pub mod record;
pub mod spec;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tessera_store::TruncateProgress;

use crate::plan::TilePlan;
use crate::registry::Registry;
use crate::seeding::{self, SeedEnd, SeedOptions};
use crate::tile_cache::TileCache;
pub use record::JobState;
use record::{DoneWriter, RecordPath, Recorded};
pub use spec::{JobKind, JobSpec};

/// The jobs of this process, and the directory their records are kept in.
#[derive(Debug)]
pub struct Jobs {
    dir: PathBuf,
    by_id: Mutex<BTreeMap<String, Arc<Job>>>,
    /// Default metatiles at once for a job that does not say.
    threads: usize,
    next: AtomicU64,
}

/// One job.
#[derive(Debug)]
struct Job {
    id: String,
    spec: JobSpec,
    created: u64,
    record: RecordPath,
    cancel: AtomicBool,
    /// Set when the job was resumed after a restart.
    resumed: bool,
    tiles_planned: AtomicU64,
    /// Tiles done, counting those done before a restart.
    tiles_done: AtomicU64,
    tiles_written: AtomicU64,
    objects_removed: AtomicU64,
    status: Mutex<Status>,
}

#[derive(Debug)]
struct Status {
    state: JobState,
    errors: Vec<String>,
    started: Instant,
    /// Tiles done when this process started it (for the rate).
    done_at_start: u64,
    finished: Option<Instant>,
}

/// Why a job was not started.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StartError {
    /// The spec does not plan (unknown layer, bad zoom, ...).
    #[error("{0}")]
    Refused(String),
    /// The job could not be recorded.
    #[error("{0}")]
    Record(String),
}

/// How a job stands, as `GET /admin/jobs/{id}` answers.
#[derive(Debug, Clone, Serialize)]
pub struct JobReport {
    /// Its id.
    pub id: String,
    /// What it does.
    pub kind: JobKind,
    /// Its layer.
    pub layer: String,
    /// How it stands.
    pub state: JobState,
    /// Tiles planned (`null` while they are being counted).
    pub tiles_planned: Option<u64>,
    /// Tiles done (rendered, found stored, or removed), including those
    /// done before a restart.
    pub tiles_done: u64,
    /// Tiles written by this process.
    pub tiles_written: u64,
    /// Objects a truncation removed so far.
    pub objects_removed: u64,
    /// Tiles done per second since this process started the job.
    pub tiles_per_second: f64,
    /// Seconds left at that rate (`null` when unknown or finished).
    pub eta_seconds: Option<f64>,
    /// Why it failed.
    pub errors: Vec<String>,
    /// When it was created, in seconds since the Unix epoch.
    pub created: u64,
    /// Whether it was resumed after a restart.
    pub resumed: bool,
    /// What was asked.
    pub spec: JobSpec,
}

impl Jobs {
    /// The jobs whose records are in `dir` (created when the first job
    /// starts); jobs that ended are listed, those that were running are not
    /// started until [`Jobs::resume`]. `threads` is the default concurrency
    /// of a job.
    pub fn open(dir: &Path, threads: usize) -> std::io::Result<Jobs> {
        let jobs = Jobs {
            dir: dir.to_path_buf(),
            by_id: Mutex::new(BTreeMap::new()),
            threads: threads.max(1),
            next: AtomicU64::new(0),
        };
        if !dir.exists() {
            return Ok(jobs);
        }
        for (id, recorded) in RecordPath::read_all(dir)? {
            if recorded.state != JobState::Running {
                let job = jobs.job(&id, recorded.spec, recorded.created, false);
                {
                    let mut status = job.lock();
                    status.state = recorded.state;
                    status.errors.extend(recorded.error);
                    status.finished = Some(Instant::now());
                }
                jobs.lock().insert(id, job);
            }
        }
        Ok(jobs)
    }

    /// Where the records are kept.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Starts a job: checks `spec` against `registry` (the refusal is the
    /// error), records it, and runs it on the current runtime with `tiles`.
    /// `node` is this node's name (truncations tell the nodes sharing the
    /// store).
    pub fn start(
        self: &Arc<Self>,
        spec: JobSpec,
        registry: &Registry,
        tiles: &Arc<TileCache>,
        node: &str,
    ) -> Result<JobReport, StartError> {
        let plans = spec.plans(registry).map_err(StartError::Refused)?;
        let created = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let id = self.new_id();
        let job = self.job(&id, spec, created, false);
        std::fs::create_dir_all(&self.dir)
            .and_then(|()| job.record.write(&job.recorded(JobState::Running, None)))
            .map_err(|e| {
                StartError::Record(format!(
                    "cannot record the job in {}: {e}",
                    self.dir.display()
                ))
            })?;
        self.lock().insert(id, job.clone());
        self.spawn(job.clone(), plans, HashMap::new(), tiles, node);
        Ok(job.report())
    }

    /// Starts again every recorded job that was running when the process
    /// stopped, skipping the metatiles it recorded done. A job whose spec
    /// no longer plans (its layer gone) is marked failed. Answers the ids
    /// resumed.
    pub fn resume(
        self: &Arc<Self>,
        registry: &Registry,
        tiles: &Arc<TileCache>,
        node: &str,
    ) -> Vec<String> {
        if !self.dir.exists() {
            return Vec::new();
        }
        let records = match RecordPath::read_all(&self.dir) {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(dir = %self.dir.display(), error = %e, "cannot read the job records");
                return Vec::new();
            }
        };
        let mut resumed = Vec::new();
        for (id, recorded) in records {
            if recorded.state != JobState::Running || self.lock().contains_key(&id) {
                continue;
            }
            let job = self.job(&id, recorded.spec, recorded.created, true);
            self.lock().insert(id.clone(), job.clone());
            let plans = match job.spec.plans(registry) {
                Ok(p) => p,
                Err(e) => {
                    job.finish(JobState::Failed, Some(format!("cannot resume: {e}")));
                    continue;
                }
            };
            let done = match job.record.done() {
                Ok(d) => d,
                Err(e) => {
                    job.finish(
                        JobState::Failed,
                        Some(format!("cannot read what was done: {e}")),
                    );
                    continue;
                }
            };
            tracing::info!(job = %id, "resuming a job");
            self.spawn(job, plans, done, tiles, node);
            resumed.push(id);
        }
        resumed
    }

    /// How job `id` stands.
    pub fn report(&self, id: &str) -> Option<JobReport> {
        self.lock().get(id).map(|j| j.report())
    }

    /// Every job, oldest first.
    pub fn list(&self) -> Vec<JobReport> {
        let mut all: Vec<JobReport> = self.lock().values().map(|j| j.report()).collect();
        all.sort_by(|a, b| a.created.cmp(&b.created).then(a.id.cmp(&b.id)));
        all
    }

    /// Asks job `id` to stop: no new metatile is started, those in flight
    /// finish. Answers how it stands, `None` for an unknown id.
    pub fn cancel(&self, id: &str) -> Option<JobReport> {
        let job = self.lock().get(id).cloned()?;
        job.cancel.store(true, Ordering::SeqCst);
        Some(job.report())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<Job>>> {
        self.by_id.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn new_id(&self) -> String {
        let millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        format!("{millis:x}-{n}")
    }

    fn job(&self, id: &str, spec: JobSpec, created: u64, resumed: bool) -> Arc<Job> {
        Arc::new(Job {
            id: id.to_string(),
            spec,
            created,
            record: RecordPath::new(&self.dir, id),
            cancel: AtomicBool::new(false),
            resumed,
            tiles_planned: AtomicU64::new(u64::MAX),
            tiles_done: AtomicU64::new(0),
            tiles_written: AtomicU64::new(0),
            objects_removed: AtomicU64::new(0),
            status: Mutex::new(Status {
                state: JobState::Running,
                errors: Vec::new(),
                started: Instant::now(),
                done_at_start: 0,
                finished: None,
            }),
        })
    }

    fn spawn(
        &self,
        job: Arc<Job>,
        plans: Vec<TilePlan>,
        done: HashMap<u32, HashSet<u64>>,
        tiles: &Arc<TileCache>,
        node: &str,
    ) {
        let (tiles, node, threads) = (tiles.clone(), node.to_string(), self.threads);
        let running = job.clone();
        let work =
            tokio::spawn(async move { run(&running, plans, done, &tiles, &node, threads).await });
        tokio::spawn(async move {
            // A job that panics ends `failed` with the reason, never
            // `running` for ever (resumed, to panic again, at the next
            // start).
            let (state, error) = match work.await {
                Ok(ended) => ended,
                Err(e) => {
                    let reason = panic_reason(e);
                    tracing::error!(job = %job.id, reason, "a job stopped on an internal error");
                    (
                        JobState::Failed,
                        Some(format!("stopped on an internal error: {reason}")),
                    )
                }
            };
            job.finish(state, error);
        });
    }
}

impl Job {
    fn lock(&self) -> std::sync::MutexGuard<'_, Status> {
        self.status.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn recorded(&self, state: JobState, error: Option<String>) -> Recorded {
        Recorded {
            spec: self.spec.clone(),
            state,
            created: self.created,
            error,
        }
    }

    /// Ends the job as `state` and records it.
    fn finish(&self, state: JobState, error: Option<String>) {
        {
            let mut status = self.lock();
            status.state = state;
            status.errors.extend(error.clone());
            status.finished = Some(Instant::now());
        }
        if let Err(e) = self.record.write(&self.recorded(state, error)) {
            tracing::error!(job = %self.id, error = %e, "cannot record how the job ended");
        }
        tracing::info!(job = %self.id, state = ?state, "job ended");
    }

    fn report(&self) -> JobReport {
        let status = self.lock();
        let planned = self.tiles_planned.load(Ordering::SeqCst);
        let tiles_planned = (planned != u64::MAX).then_some(planned);
        let done = self.tiles_done.load(Ordering::SeqCst);
        let elapsed = status
            .finished
            .unwrap_or_else(Instant::now)
            .duration_since(status.started)
            .as_secs_f64();
        let here = done.saturating_sub(status.done_at_start);
        let rate = if elapsed > 0.0 {
            here as f64 / elapsed
        } else {
            0.0
        };
        let eta_seconds = match (status.state, tiles_planned) {
            (JobState::Running, Some(p)) if rate > 0.0 => {
                Some(p.saturating_sub(done) as f64 / rate)
            }
            _ => None,
        };
        JobReport {
            id: self.id.clone(),
            kind: self.spec.kind,
            layer: self.spec.layer.clone(),
            state: status.state,
            tiles_planned,
            tiles_done: done,
            tiles_written: self.tiles_written.load(Ordering::SeqCst),
            objects_removed: self.objects_removed.load(Ordering::SeqCst),
            tiles_per_second: rate,
            eta_seconds,
            errors: status.errors.clone(),
            created: self.created,
            resumed: self.resumed,
            spec: self.spec.clone(),
        }
    }
}

/// What a task that did not finish says: its panic's message, or that it
/// was cancelled.
fn panic_reason(e: tokio::task::JoinError) -> String {
    if !e.is_panic() {
        return "its task was cancelled".into();
    }
    let payload = e.into_panic();
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

/// Runs a job's plans one after the other; answers how it ended.
async fn run(
    job: &Arc<Job>,
    plans: Vec<TilePlan>,
    mut done: HashMap<u32, HashSet<u64>>,
    tiles: &Arc<TileCache>,
    node: &str,
    threads: usize,
) -> (JobState, Option<String>) {
    // Counting a plan may walk its metatiles: off the runtime, and
    // stopped by a cancel.
    let sized: Vec<TilePlan> = plans.clone();
    let counting = job.clone();
    let sizes = match tokio::task::spawn_blocking(move || {
        sized
            .iter()
            .map(|plan| plan.size_unless(&counting.cancel))
            .collect::<Option<Vec<_>>>()
    })
    .await
    {
        Ok(Some(s)) => s,
        Ok(None) => return (JobState::Cancelled, None),
        Err(e) => return (JobState::Failed, Some(format!("cannot plan the job: {e}"))),
    };
    job.tiles_planned
        .store(sizes.iter().map(|s| s.tiles).sum(), Ordering::SeqCst);
    // Seeds record the metatiles they finish; a truncation starts over.
    let writer = match job.spec.kind {
        JobKind::Truncate => None,
        JobKind::Seed | JobKind::Reseed => match job.record.done_writer() {
            Ok(w) => Some(w),
            Err(e) => {
                return (
                    JobState::Failed,
                    Some(format!("cannot record done metatiles: {e}")),
                );
            }
        },
    };
    let mut base = 0u64;
    let mut outcome = (JobState::Done, None);
    for (index, plan) in plans.iter().enumerate() {
        if job.cancel.load(Ordering::SeqCst) {
            outcome = (JobState::Cancelled, None);
            break;
        }
        let index = u32::try_from(index).unwrap_or(u32::MAX);
        let ended = match &writer {
            Some(writer) => {
                let skip = done.remove(&index).unwrap_or_default();
                seed_plan(job, plan, skip, tiles, threads, writer, index, base).await
            }
            None => truncate_plan(job, plan, node).await,
        };
        match ended {
            Ok(()) => {}
            Err(end) => {
                outcome = end;
                break;
            }
        }
        base += sizes[index as usize].tiles;
        job.tiles_done.store(base, Ordering::SeqCst);
    }
    if let Some(writer) = writer {
        writer.finish();
    }
    outcome
}

/// Seeds one plan of a job; `Err` with how the job ends when it stops.
async fn seed_plan(
    job: &Arc<Job>,
    plan: &TilePlan,
    skip: HashSet<u64>,
    tiles: &Arc<TileCache>,
    threads: usize,
    writer: &DoneWriter,
    index: u32,
    base: u64,
) -> Result<(), (JobState, Option<String>)> {
    let options = SeedOptions {
        concurrency: job.spec.threads.unwrap_or(threads),
        force: job.spec.kind == JobKind::Reseed,
        rate: job.spec.rate,
        skip,
    };
    let written_before = job.tiles_written.load(Ordering::SeqCst);
    let skipped_before = job.lock().done_at_start;
    let end = seeding::run(tiles, plan, &options, &job.cancel, |stats, places| {
        // Metatiles skipped from the record were done before this
        // process started the job: they do not make its rate.
        job.lock().done_at_start = skipped_before + stats.tiles_skipped;
        job.tiles_done
            .store(base + stats.tiles_done, Ordering::SeqCst);
        job.tiles_written
            .store(written_before + stats.tiles_written, Ordering::SeqCst);
        writer.record(index, places);
    })
    .await;
    match end {
        SeedEnd::Complete(_) => Ok(()),
        SeedEnd::Cancelled(_) => Err((JobState::Cancelled, None)),
        SeedEnd::Failed(_, e) => Err((
            JobState::Failed,
            Some(format!(
                "{}: {}",
                plan.layer.label(),
                tessera_source::error_chain(&e)
            )),
        )),
    }
}

/// Truncates one plan of a job; `Err` with how the job ends when it stops.
async fn truncate_plan(
    job: &Arc<Job>,
    plan: &TilePlan,
    node: &str,
) -> Result<(), (JobState, Option<String>)> {
    let progress = Arc::new(TruncateProgress::default());
    let watched = progress.clone();
    let watcher_job = job.clone();
    let watcher = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            watcher_job
                .objects_removed
                .store(watched.done(), Ordering::SeqCst);
            if watcher_job.cancel.load(Ordering::SeqCst) {
                watched.cancel.store(true, Ordering::SeqCst);
            }
        }
    });
    let ended = crate::truncate::truncate_counted(plan, node, progress.clone()).await;
    watcher.abort();
    job.objects_removed.store(progress.done(), Ordering::SeqCst);
    match ended {
        Ok(_) => Ok(()),
        Err(crate::truncate::TruncateError::Store(tessera_store::StoreError::Cancelled {
            ..
        })) => Err((JobState::Cancelled, None)),
        Err(e) => Err((
            JobState::Failed,
            Some(format!(
                "{}: {}",
                plan.layer.label(),
                tessera_source::error_chain(&e)
            )),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::panic_reason;

    #[tokio::test]
    async fn a_panicking_task_is_told_by_its_message() {
        let failed = tokio::spawn(async { panic!("semaphore permits exceeded") })
            .await
            .unwrap_err();
        assert_eq!(panic_reason(failed), "semaphore permits exceeded");
        let number = 7;
        let failed = tokio::spawn(async move { panic!("{number} threads") })
            .await
            .unwrap_err();
        assert_eq!(panic_reason(failed), "7 threads");
        let aborted = tokio::spawn(std::future::pending::<()>());
        aborted.abort();
        assert_eq!(
            panic_reason(aborted.await.unwrap_err()),
            "its task was cancelled"
        );
    }
}
