//! The bounded pools of handles a vector source reads with: GDAL datasets
//! (for PostGIS, each a connection), and native PostgreSQL connections
//! for vector tiles cut by the database.

use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::spec::redact;
use crate::SourceError;

/// Seconds a client is told to wait when the database cannot be reached
/// or every connection is busy.
const RETRY_AFTER_SECS: u64 = 5;

/// Opens a new handle.
type Opener<H> = Box<dyn Fn() -> Result<H, SourceError> + Send + Sync>;

/// Handles: idle ones to reuse, and how many are out.
pub(super) struct Pool<H> {
    idle: Mutex<(Vec<H>, usize)>,
    freed: Condvar,
    max: usize,
    wait: Duration,
    open: Opener<H>,
    shown: String,
    postgres: bool,
}

impl<H> std::fmt::Debug for Pool<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("max", &self.max)
            .field("wait", &self.wait)
            .field("source", &self.shown)
            .finish_non_exhaustive()
    }
}

/// Where a handle came from: a reused one may be a connection the
/// database has since closed.
enum Origin {
    Reused,
    Fresh,
}

impl<H> Pool<H> {
    /// A pool holding `first` (idle, if any), opening more with `open`
    /// while fewer than `max` are out; a caller waits up to `wait_ms` for
    /// one. `shown` names the source in messages; `postgres` says whether
    /// a failed open means the database is unavailable (503).
    pub(super) fn new(
        first: Option<H>,
        open: Opener<H>,
        shown: String,
        max: usize,
        wait_ms: u64,
        postgres: bool,
    ) -> Pool<H> {
        Pool {
            idle: Mutex::new((first.into_iter().collect(), 0)),
            freed: Condvar::new(),
            max,
            wait: Duration::from_millis(wait_ms),
            open,
            shown,
            postgres,
        }
    }

    /// Runs `read` with a handle and gives the handle back when the read
    /// succeeded (a failed read may have broken its connection: the handle
    /// is dropped). A read on a reused PostgreSQL connection that fails as
    /// the database's fault is tried once more on a new connection, so a
    /// restarted database costs no request.
    pub(super) fn with_handle<T>(
        &self,
        read: impl Fn(&mut H) -> Result<T, SourceError>,
    ) -> Result<T, SourceError> {
        let (mut handle, origin) = self.acquire(false)?;
        let result = read(&mut handle);
        let retry = matches!(origin, Origin::Reused)
            && self.postgres
            && matches!(result, Err(SourceError::Upstream { .. }));
        self.give_back(result.is_ok().then_some(handle));
        if !retry {
            return result;
        }
        let (mut handle, _) = self.acquire(true)?;
        let result = read(&mut handle);
        self.give_back(result.is_ok().then_some(handle));
        result
    }

    /// A database that cannot be reached is unavailable (503 with
    /// Retry-After), like a down upstream; a file keeps its open error.
    pub(super) fn unavailable(&self, e: SourceError) -> SourceError {
        if !self.postgres {
            return e;
        }
        let message = match &e {
            SourceError::Open { source, .. } => source.to_string(),
            other => other.to_string(),
        };
        SourceError::UpstreamUnavailable {
            url: self.shown.clone(),
            message,
            retry_after_secs: RETRY_AFTER_SECS,
        }
    }

    /// A handle from the pool (unless `fresh`), or a new one while fewer
    /// than `max` are out; waits up to the statement timeout for one to
    /// come back, then answers that the source is busy (503).
    fn acquire(&self, fresh: bool) -> Result<(H, Origin), SourceError> {
        let deadline = Instant::now() + self.wait;
        let mut guard = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if fresh {
                // Idle handles are as old as the one that failed.
                guard.0.clear();
            }
            if let Some(handle) = guard.0.pop() {
                guard.1 += 1;
                return Ok((handle, Origin::Reused));
            }
            if guard.1 < self.max {
                guard.1 += 1;
                drop(guard);
                return (self.open)()
                    .map(|handle| (handle, Origin::Fresh))
                    .map_err(|e| self.unavailable(e))
                    .inspect_err(|_| self.give_back(None));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(SourceError::UpstreamUnavailable {
                    url: self.shown.clone(),
                    message: format!(
                        "all {} connections stayed busy for {} ms (max_connections, \
                         statement_timeout_ms)",
                        self.max,
                        self.wait.as_millis()
                    ),
                    retry_after_secs: RETRY_AFTER_SECS,
                });
            }
            guard = self
                .freed
                .wait_timeout(guard, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Returns a handle (or only its place, after a failed read).
    fn give_back(&self, handle: Option<H>) {
        let mut guard = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        guard.1 = guard.1.saturating_sub(1);
        if let Some(handle) = handle {
            guard.0.push(handle);
        }
        drop(guard);
        self.freed.notify_one();
    }

    /// Fails with GDAL's last error on this thread, if a call since
    /// [`reset_gdal_error`] failed: the database's own words (a statement
    /// timeout, a lost connection) are the upstream's message.
    pub(super) fn check_gdal_error(&self, what: &str) -> Result<(), SourceError> {
        let Some(message) = gdal_failure() else {
            return Ok(());
        };
        let message = format!("{what}: {message}");
        Err(if self.postgres {
            SourceError::Upstream {
                url: self.shown.clone(),
                message,
            }
        } else {
            SourceError::Read {
                path: self.shown.clone(),
                source: message.into(),
            }
        })
    }
}

/// GDAL's last error on this thread (credentials redacted), if a call
/// since [`reset_gdal_error`] failed.
pub(super) fn gdal_failure() -> Option<String> {
    // SAFETY: reads this thread's GDAL error state; the message is copied
    // before any other GDAL call.
    let failed = unsafe { gdal_sys::CPLGetLastErrorType() } >= gdal_sys::CPLErr::CE_Failure;
    if !failed {
        return None;
    }
    // SAFETY: as above.
    let message = unsafe { std::ffi::CStr::from_ptr(gdal_sys::CPLGetLastErrorMsg()) }
        .to_string_lossy()
        .into_owned();
    Some(redact(&message))
}

/// Clears this thread's GDAL error state before calls whose failure only
/// it tells (iterating features, running SQL).
pub(super) fn reset_gdal_error() {
    // SAFETY: plain call on this thread's GDAL error state.
    unsafe { gdal_sys::CPLErrorReset() };
}
