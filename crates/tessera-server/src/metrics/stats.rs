//! Per-layer statistics for `/admin/stats`: render time percentiles (an
//! HDR histogram per layer, in microseconds) and the last error a tile
//! request of the layer met. Counts (hits, misses, renders) are the
//! Prometheus counters', read back by [`super::Metrics`].

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;
use serde::Serialize;

/// Render times and last errors by layer.
#[derive(Debug, Default)]
pub struct LayerStats {
    layers: Mutex<HashMap<String, Entry>>,
}

#[derive(Debug)]
struct Entry {
    render_micros: Histogram<u64>,
    last_error: Option<LastError>,
}

impl Default for Entry {
    fn default() -> Self {
        Entry {
            // 1 µs to an hour, 2 significant digits: a few kB per layer.
            render_micros: Histogram::new_with_bounds(1, 3_600_000_000, 2)
                .expect("valid histogram bounds"),
            last_error: None,
        }
    }
}

/// The last error a layer's tile request met.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LastError {
    /// When, in seconds since the Unix epoch.
    pub at: u64,
    /// What it said.
    pub message: String,
}

/// Render time percentiles of a layer, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RenderTimes {
    /// Renders measured.
    pub count: u64,
    /// Median.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Longest.
    pub max_ms: f64,
}

impl LayerStats {
    fn with<T>(&self, layer: &str, f: impl FnOnce(&mut Entry) -> T) -> T {
        let mut layers = self.layers.lock().unwrap_or_else(PoisonError::into_inner);
        f(layers.entry(layer.to_string()).or_default())
    }

    /// Records one render of `layer`.
    pub fn rendered(&self, layer: &str, elapsed: Duration) {
        let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        self.with(layer, |e| e.render_micros.saturating_record(micros.max(1)));
    }

    /// Records an error a tile request of `layer` met.
    pub fn failed(&self, layer: &str, message: String) {
        let at = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.with(layer, |e| e.last_error = Some(LastError { at, message }));
    }

    /// `layer`'s render times (`None` before its first render) and last
    /// error.
    pub fn of(&self, layer: &str) -> (Option<RenderTimes>, Option<LastError>) {
        let layers = self.layers.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(e) = layers.get(layer) else {
            return (None, None);
        };
        let h = &e.render_micros;
        let ms = |micros: u64| micros as f64 / 1000.0;
        let times = (!h.is_empty()).then(|| RenderTimes {
            count: h.len(),
            p50_ms: ms(h.value_at_quantile(0.5)),
            p90_ms: ms(h.value_at_quantile(0.9)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            max_ms: ms(h.max()),
        });
        (times, e.last_error.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_the_last_error_are_kept_per_layer() {
        let stats = LayerStats::default();
        assert_eq!(stats.of("a"), (None, None));
        for ms in 1..=100u64 {
            stats.rendered("a", Duration::from_millis(ms));
        }
        stats.failed("a", "first".into());
        stats.failed("a", "second".into());
        let (times, error) = stats.of("a");
        let times = times.unwrap();
        assert_eq!(times.count, 100);
        assert!((49.0..=51.0).contains(&times.p50_ms), "{times:?}");
        assert!((98.0..=100.5).contains(&times.p99_ms), "{times:?}");
        assert_eq!(error.unwrap().message, "second");
        assert_eq!(stats.of("b"), (None, None));
    }
}
