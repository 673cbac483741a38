//! Truncation of a plan's tiles, shared by `tessera truncate` and
//! `POST /admin/truncate`: the store deletes what it holds in the area
//! (object stores by computed keys), then the layer's generation object is
//! rewritten so that every node sharing the store drops what it holds of
//! the layer (`crate::cluster`).
//!
//! The admin API runs each truncation as a job ([`start_or_join`]): one
//! per distinct area at a time in the process (a second identical request
//! joins the running one), its progress readable ([`running`]), stopped
//! by [`cancel`] or when the last request waiting for it leaves.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tessera_store::{StoreError, TileArea, TileStore, TruncateProgress, TruncateReport};

use crate::plan::TilePlan;

/// Longest wait for the generation object to be written.
const GENERATION_TIMEOUT: Duration = Duration::from_secs(30);

/// What a truncation did.
#[derive(Debug, Clone)]
pub struct Truncated {
    /// What the store removed.
    pub report: TruncateReport,
    /// Whether other nodes were told (the store can be shared); the error
    /// when telling them failed (the tiles are deleted either way).
    pub announced: Result<bool, String>,
}

/// Why a truncation failed.
#[derive(Debug, thiserror::Error)]
pub enum TruncateError {
    /// The layer has no cache.
    #[error("layer {0:?} has no cache")]
    NotCached(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The blocking task failed.
    #[error("the truncation task failed")]
    Task(#[source] tokio::task::JoinError),
    /// The layer's tiles are keyed by its source's state and the store
    /// cannot list the keys they are under.
    #[error(
        "layer key {layer:?} keys its tiles by its source's state and the {store} store cannot list them"
    )]
    CannotList {
        /// The store's kind.
        store: String,
        /// The layer key.
        layer: String,
    },
    /// The job ended without telling how.
    #[error("the truncation job ended without an outcome")]
    Lost,
}

/// Removes `plan`'s tiles from its layer's store, then announces a new
/// generation of the layer to the nodes sharing the store, as `node`.
pub async fn truncate(plan: &TilePlan, node: &str) -> Result<Truncated, TruncateError> {
    truncate_counted(plan, node, Arc::default()).await
}

/// [`truncate`], counting in `progress` and stopping when its `cancel` is
/// raised ([`StoreError::Cancelled`]; nothing is announced then).
pub async fn truncate_counted(
    plan: &TilePlan,
    node: &str,
    progress: Arc<TruncateProgress>,
) -> Result<Truncated, TruncateError> {
    let cache = plan
        .layer
        .cache
        .as_ref()
        .ok_or_else(|| TruncateError::NotCached(plan.layer.name.clone()))?;
    let mut area = plan.tile_area();
    area.progress = progress;
    let store = cache.store.clone();
    let states = crate::tile_cache::state::keyed_by_state(&plan.layer);
    let report = tokio::task::spawn_blocking(move || truncate_area(store.as_ref(), area, states))
        .await
        .map_err(TruncateError::Task)??;
    let announced = match &cache.coordinator {
        Some(c) => {
            let key = crate::cluster::generation_key(&plan.layer.cache_key);
            crate::cluster::bump_generation(c, key, node, GENERATION_TIMEOUT)
                .await
                .map(|()| true)
        }
        None => Ok(false),
    };
    Ok(Truncated { report, announced })
}

/// Removes `area`'s tiles from `store`; with `states`, also under every
/// key the layer's tiles were stored under at a state of its source
/// (`layer~items=...`, [`crate::tile_cache::state`]), past states included:
/// they are found by one listing of the store's layer keys.
fn truncate_area(
    store: &dyn TileStore,
    area: TileArea,
    states: bool,
) -> Result<TruncateReport, TruncateError> {
    let mut report = store.truncate(&area)?;
    if !states {
        return Ok(report);
    }
    let prefix = crate::tile_cache::state::state_prefix(&area.layer);
    let Some(keys) = store.layer_keys(&prefix, &area.grid, area.format)? else {
        return Err(TruncateError::CannotList {
            store: store.name().to_string(),
            layer: area.layer,
        });
    };
    for key in keys {
        let one = store.truncate(&TileArea {
            layer: key,
            ..area.clone()
        })?;
        report.objects_deleted += one.objects_deleted;
        report.objects_rewritten += one.objects_rewritten;
    }
    Ok(report)
}

/// How a truncation job ended: what it removed, or why it failed.
pub type Outcome = Result<Truncated, Arc<TruncateError>>;

/// A truncation running in this process.
#[derive(Debug)]
struct Job {
    /// What it truncates (layer key, grid, format, ranges).
    area: String,
    /// The layer's name, as asked.
    layer: String,
    progress: Arc<TruncateProgress>,
    outcome: tokio::sync::watch::Sender<Option<Outcome>>,
    waiters: AtomicUsize,
    started: Instant,
}

/// Jobs by area: process-wide, so that a reload of the configuration
/// neither forgets nor doubles one.
static JOBS: LazyLock<Mutex<HashMap<String, Arc<Job>>>> = LazyLock::new(Mutex::default);

fn jobs() -> std::sync::MutexGuard<'static, HashMap<String, Arc<Job>>> {
    JOBS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A request waiting for a truncation job. Dropping the last one of a job
/// that has not finished cancels it: no truncation runs on for nobody.
#[derive(Debug)]
pub struct Waiting {
    job: Arc<Job>,
    joined: bool,
}

impl Waiting {
    /// Whether it joined a job started by an earlier identical request.
    pub fn joined(&self) -> bool {
        self.joined
    }

    /// Waits for the job's outcome.
    pub async fn outcome(&self) -> Outcome {
        let mut rx = self.job.outcome.subscribe();
        // The sender lives in the job this request holds: it cannot go.
        match rx.wait_for(Option::is_some).await {
            Ok(done) => done.clone().unwrap_or(Err(Arc::new(TruncateError::Lost))),
            Err(_) => Err(Arc::new(TruncateError::Lost)),
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        // Under the table's lock: a request joining now either comes first
        // (and keeps the job alive) or finds it cancelled and starts anew.
        let _table = jobs();
        if self.job.waiters.fetch_sub(1, Ordering::AcqRel) == 1
            && self.job.outcome.borrow().is_none()
        {
            self.job.progress.cancel.store(true, Ordering::Relaxed);
        }
    }
}

/// The area a plan truncates, as a job's key.
fn area_key(plan: &TilePlan) -> String {
    let area = plan.tile_area();
    let ranges: Vec<String> = area
        .ranges
        .iter()
        .map(|r| {
            let t = r.range;
            format!("{}/{}-{}/{}-{}", t.z, t.min_x, t.max_x, t.min_y, t.max_y)
        })
        .collect();
    format!(
        "{}/{}/{}:{}",
        area.layer,
        area.grid,
        area.format.extension(),
        ranges.join(",")
    )
}

/// Starts truncating `plan` as a job, or joins the running job of the same
/// area.
pub fn start_or_join(plan: TilePlan, node: String) -> Waiting {
    let key = area_key(&plan);
    let mut table = jobs();
    if let Some(job) = table.get(&key)
        && !job.progress.cancel.load(Ordering::Relaxed)
    {
        job.waiters.fetch_add(1, Ordering::AcqRel);
        return Waiting {
            job: job.clone(),
            joined: true,
        };
    }
    let job = Arc::new(Job {
        area: key.clone(),
        layer: plan.layer.name.clone(),
        progress: Arc::default(),
        outcome: tokio::sync::watch::channel(None).0,
        waiters: AtomicUsize::new(1),
        started: Instant::now(),
    });
    table.insert(key.clone(), job.clone());
    let running = job.clone();
    tokio::spawn(async move {
        let outcome = truncate_counted(&plan, &node, running.progress.clone())
            .await
            .map_err(Arc::new);
        running.outcome.send_replace(Some(outcome));
        let mut table = jobs();
        if table.get(&key).is_some_and(|j| Arc::ptr_eq(j, &running)) {
            table.remove(&key);
        }
    });
    Waiting { job, joined: false }
}

/// A running job as `GET /admin/truncate` shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct JobStatus {
    /// The layer.
    pub layer: String,
    /// The area (layer key, grid, format, ranges).
    pub area: String,
    /// Objects removed so far.
    pub removed: u64,
    /// Seconds since it started.
    pub seconds: f64,
    /// Requests waiting for it.
    pub waiting: usize,
    /// Whether it was asked to stop.
    pub cancelled: bool,
}

/// The truncations running now.
pub fn running() -> Vec<JobStatus> {
    let mut all: Vec<JobStatus> = jobs()
        .values()
        .map(|j| JobStatus {
            layer: j.layer.clone(),
            area: j.area.clone(),
            removed: j.progress.done(),
            seconds: j.started.elapsed().as_secs_f64(),
            waiting: j.waiters.load(Ordering::Acquire),
            cancelled: j.progress.cancel.load(Ordering::Relaxed),
        })
        .collect();
    all.sort_by(|a, b| a.area.cmp(&b.area));
    all
}

/// Asks every running truncation of `layer` to stop; how many were asked.
pub fn cancel(layer: &str) -> usize {
    let table = jobs();
    let mut n = 0;
    for job in table.values().filter(|j| j.layer == layer) {
        job.progress.cancel.store(true, Ordering::Relaxed);
        n += 1;
    }
    n
}
