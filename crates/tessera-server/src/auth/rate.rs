//! Token buckets: a caller's requests per second, with a burst.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::config::auth::RateConfig;

/// The longest wait a refusal names (a day): `Retry-After` stays a number
/// clients can act on.
const MAX_WAIT: Duration = Duration::from_hours(24);

/// A token bucket: refilled at `per_second`, holding at most `burst`.
#[derive(Debug)]
pub struct Bucket {
    per_second: f64,
    burst: f64,
    /// Tokens left, as of the instant.
    state: Mutex<(f64, Instant)>,
}

impl Bucket {
    /// A full bucket of requests for `rate`.
    pub fn new(rate: &RateConfig) -> Bucket {
        Bucket::of(rate.per_second, rate.burst)
    }

    /// A full bucket of cache misses for `rate`, when it has one.
    pub fn misses(rate: &RateConfig) -> Option<Bucket> {
        rate.misses_per_second
            .map(|per_second| Bucket::of(per_second, rate.miss_burst))
    }

    /// A full bucket refilled at `per_second`, holding `burst` (default a
    /// second's worth, at least 1).
    fn of(per_second: f64, burst: Option<u32>) -> Bucket {
        let burst = burst.map_or_else(|| per_second.ceil().max(1.0), f64::from);
        Bucket {
            per_second,
            burst,
            state: Mutex::new((burst, Instant::now())),
        }
    }

    /// Takes a token; when none is left, how long until one is.
    pub fn take(&self) -> Result<(), Duration> {
        self.take_at(Instant::now(), 1.0)
    }

    /// Takes `weight` tokens (a render of many tiles' pixels) once at
    /// least one is there, leaving the bucket in debt when it held fewer:
    /// the caller waits that much longer for the next. A weight above the
    /// burst is thus served once, then paid for, never refused for ever.
    pub fn take_weighted(&self, weight: f64) -> Result<(), Duration> {
        self.take_at(Instant::now(), weight.max(1.0))
    }

    /// Whether a token is there now (taking none); when none is, how long
    /// until one is.
    pub fn check(&self) -> Result<(), Duration> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let refilled = self.refilled(*state, Instant::now());
        if refilled >= 1.0 {
            Ok(())
        } else {
            Err(wait_for(refilled, self.per_second))
        }
    }

    fn take_at(&self, now: Instant, weight: f64) -> Result<(), Duration> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let refilled = self.refilled(*state, now);
        if refilled >= 1.0 {
            *state = (refilled - weight, now);
            Ok(())
        } else {
            *state = (refilled, now);
            Err(wait_for(refilled, self.per_second))
        }
    }

    /// The tokens of `(tokens, then)` refilled until `now`, at most the
    /// burst.
    fn refilled(&self, (tokens, then): (f64, Instant), now: Instant) -> f64 {
        (tokens + now.saturating_duration_since(then).as_secs_f64() * self.per_second)
            .min(self.burst)
    }
}

/// How long until `tokens` refilled at `per_second` reach one: whatever
/// the rate, a Duration (no panic on a rate past the checked range), at
/// most [`MAX_WAIT`].
fn wait_for(tokens: f64, per_second: f64) -> Duration {
    Duration::try_from_secs_f64((1.0 - tokens) / per_second)
        .unwrap_or(MAX_WAIT)
        .min(MAX_WAIT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_served_then_the_rate() {
        let bucket = Bucket::new(&RateConfig {
            per_second: 10.0,
            burst: Some(3),
            misses_per_second: None,
            miss_burst: None,
        });
        let start = Instant::now();
        for _ in 0..3 {
            assert!(bucket.take_at(start, 1.0).is_ok());
        }
        let wait = bucket.take_at(start, 1.0).unwrap_err();
        assert!((wait.as_secs_f64() - 0.1).abs() < 1e-9, "{wait:?}");
        // A tenth of a second later, one more token; never more than the
        // burst however long the bucket rests.
        assert!(
            bucket
                .take_at(start + Duration::from_millis(100), 1.0)
                .is_ok()
        );
        assert!(
            bucket
                .take_at(start + Duration::from_millis(100), 1.0)
                .is_err()
        );
        let later = start + Duration::from_mins(1);
        for _ in 0..3 {
            assert!(bucket.take_at(later, 1.0).is_ok());
        }
        assert!(bucket.take_at(later, 1.0).is_err());
    }

    #[test]
    fn a_rate_far_below_one_a_day_waits_a_day_without_panicking() {
        let bucket = Bucket::of(1e-300, Some(1));
        let start = Instant::now();
        assert!(bucket.take_at(start, 1.0).is_ok());
        assert_eq!(bucket.take_at(start, 1.0), Err(MAX_WAIT));
    }

    #[test]
    fn a_heavy_take_is_served_then_paid_for() {
        let bucket = Bucket::of(10.0, Some(10));
        let start = Instant::now();
        // 64 tiles' worth with 10 in the bucket: served, 54 owed.
        assert!(bucket.take_at(start, 64.0).is_ok());
        let wait = bucket.take_at(start, 1.0).unwrap_err();
        assert!((wait.as_secs_f64() - 5.5).abs() < 1e-9, "{wait:?}");
        assert!(
            bucket
                .take_at(start + Duration::from_millis(5500), 1.0)
                .is_ok()
        );
    }

    #[test]
    fn the_default_burst_is_a_seconds_worth() {
        let bucket = Bucket::new(&RateConfig {
            per_second: 2.5,
            burst: None,
            misses_per_second: None,
            miss_burst: None,
        });
        assert!((bucket.burst - 3.0).abs() < f64::EPSILON);
    }
}
