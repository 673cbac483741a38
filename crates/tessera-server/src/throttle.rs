//! Rate limiting for log lines that a failing disk or a flood would
//! otherwise repeat for every request.

use std::time::{Duration, Instant};

/// Lets a warning through at most once per period and counts the ones it
/// held back, so a failing disk does not flood the log.
#[derive(Debug)]
pub struct Throttle {
    every: Duration,
    state: std::sync::Mutex<(Option<Instant>, u64)>,
}

impl Throttle {
    /// At most one warning per `every`.
    pub fn new(every: Duration) -> Throttle {
        Throttle {
            every,
            state: std::sync::Mutex::new((None, 0)),
        }
    }

    /// `Some(held back since the last one)` when a warning may be logged now.
    pub fn allow(&self) -> Option<u64> {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (last, held) = &mut *state;
        if last.is_some_and(|t| t.elapsed() < self.every) {
            *held += 1;
            return None;
        }
        *last = Some(Instant::now());
        Some(std::mem::take(held))
    }
}
