//! Metrics on the cache path, served at `/metrics` in the Prometheus
//! (OpenMetrics) text format.
//!
//! The names are a stable interface that users alert on:
//! `tessera_tile_requests_total{layer,result}` (result: hit, miss, error),
//! `tessera_metatile_renders_total{layer}`, `tessera_tile_encodes_total{layer}`,
//! `tessera_idle_tile_reads_total{layer}` (tiles of a metatile whose tile
//! was read alone, read in the background while renders were idle),
//! `tessera_store_op_seconds{store,op}`, `tessera_store_errors_total{store,op}`,
//! `tessera_lock_wait_seconds{kind}` (kind: metatile, tile),
//! `tessera_encode_queue_depth`, `tessera_store_degraded{store}`,
//! `tessera_http_request_seconds{kind,status}` (kind: tile, tilejson, wmts,
//! wms, admin, other; status: 2xx .. 5xx; its `_count` counts requests),
//! `tessera_render_seconds{layer}` (one layer's read and style, per
//! metatile, tile or WMS map), `tessera_lease_requests_total{outcome}` (won,
//! lost, taken_over, error), `tessera_lease_wait_seconds` (a node that lost
//! a lease, until the holder's tiles were there),
//! `tessera_generation_checks_total{result}` (unchanged, changed, error),
//! `tessera_tile_files_sent_total` (file-store hits sent by `sendfile`),
//! for stores with a quota `tessera_store_quota_bytes{store}`,
//! `tessera_store_used_bytes{store}`, `tessera_store_quota_tiles{store}`,
//! `tessera_store_evicted_tiles{store}` and
//! `tessera_store_evicted_bytes{store}` (since the store opened), for
//! journal stores `tessera_journal_acks{store}`,
//! `tessera_journal_syncs{store}`, `tessera_journal_late_acks{store}` and
//! `tessera_journal_slow_syncs{store}` (since the store opened: how its
//! `max_latency` held, [`tessera_store::SyncCounts`]), and
//! `tessera_build_info{version}`.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

pub mod stats;

use self::stats::{LastError, LayerStats, RenderTimes};
use tessera_store::{
    Durability, HeldTile, StoreError, StoredTile, TileArea, TileKey, TileStore, TruncateReport,
};

/// How a tile request ended.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum RequestResult {
    /// Served from the cache.
    Hit,
    /// Rendered.
    Miss,
    /// Failed.
    Error,
}

impl RequestResult {
    fn label(self) -> &'static str {
        match self {
            RequestResult::Hit => "hit",
            RequestResult::Miss => "miss",
            RequestResult::Error => "error",
        }
    }
}

/// The kind of endpoint a request went to, for the request metrics.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum EndpointKind {
    /// XYZ/TMS tiles.
    Tile,
    /// TileJSON documents.
    TileJson,
    /// WMTS (KVP, REST tiles and capabilities).
    Wmts,
    /// WMS (GetMap and GetCapabilities).
    Wms,
    /// The admin API.
    Admin,
    /// Everything else: health, readiness, metrics, the preview.
    Other,
}

impl EndpointKind {
    /// The kind of endpoint `path` names.
    pub fn of(path: &str) -> EndpointKind {
        if path.starts_with("/tiles/") || path.starts_with("/tms/") {
            if path.ends_with("/tilejson.json") {
                EndpointKind::TileJson
            } else {
                EndpointKind::Tile
            }
        } else if path == "/wmts" || path.starts_with("/wmts/") {
            EndpointKind::Wmts
        } else if path == "/wms" {
            EndpointKind::Wms
        } else if path.starts_with("/admin/") {
            EndpointKind::Admin
        } else {
            EndpointKind::Other
        }
    }

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            EndpointKind::Tile => "tile",
            EndpointKind::TileJson => "tilejson",
            EndpointKind::Wmts => "wmts",
            EndpointKind::Wms => "wms",
            EndpointKind::Admin => "admin",
            EndpointKind::Other => "other",
        }
    }
}

/// How a lease request ended.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum LeaseOutcome {
    /// Created: this node renders.
    Won,
    /// Held by another node: this one waits for its tiles.
    Lost,
    /// Expired and taken over: this node renders.
    TakenOver,
    /// The store failed.
    Error,
}

/// What a generation check found.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum GenerationResult {
    /// Nothing new.
    Unchanged,
    /// A new generation: the layer's held tiles were dropped.
    Changed,
    /// The store failed.
    Error,
}

/// Which lock a wait was for.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum LockKind {
    /// A metatile lock.
    Metatile,
    /// A tile lock.
    Tile,
}

impl LockKind {
    fn label(self) -> &'static str {
        match self {
            LockKind::Metatile => "metatile",
            LockKind::Tile => "tile",
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    layer: String,
    result: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LayerLabels {
    layer: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StoreLabels {
    store: String,
    op: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HttpLabels {
    kind: &'static str,
    status: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallerLabels {
    caller: String,
    outcome: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 50 µs .. about 52 s.
    Histogram::new(exponential_buckets(0.000_05, 2.0, 21))
}

/// How many log lines the process's log writer dropped so far.
pub type DroppedLogLines = std::sync::Arc<dyn Fn() -> u64 + Send + Sync>;

static DROPPED_LOG_LINES: std::sync::OnceLock<DroppedLogLines> = std::sync::OnceLock::new();

/// Tells the metrics how to count the log lines the process's log writer
/// dropped (`tessera_log_lines_dropped_total`); set once, at start.
pub fn count_dropped_log_lines(count: DroppedLogLines) {
    let _ = DROPPED_LOG_LINES.set(count);
}

/// Every metric the server exports.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    tile_requests: Family<RequestLabels, Counter>,
    metatile_renders: Family<LayerLabels, Counter>,
    idle_tile_reads: Family<LayerLabels, Counter>,
    tile_encodes: Family<LayerLabels, Counter>,
    files_sent: Counter,
    store_op_seconds: HistogramFamily<StoreLabels>,
    store_errors: Family<StoreLabels, Counter>,
    lock_wait_seconds: HistogramFamily<KindLabels>,
    encode_queue_depth: Gauge,
    store_degraded: Family<DegradedLabels, Gauge>,
    http_request_seconds: HistogramFamily<HttpLabels>,
    render_seconds: HistogramFamily<LayerLabels>,
    lease_requests: Family<OutcomeLabels, Counter>,
    lease_wait_seconds: Histogram,
    generation_checks: Family<ResultLabels, Counter>,
    caller_requests: Family<CallerLabels, Counter>,
    log_lines_dropped: Counter,
    /// Stores whose last write failed.
    degraded: std::sync::Mutex<std::collections::BTreeSet<String>>,
    quota: QuotaGauges,
    journal: JournalGauges,
    /// Render times and last errors by layer, for `/admin/stats`.
    layer_stats: LayerStats,
}

/// The gauges of stores with a quota.
#[derive(Debug, Default)]
struct QuotaGauges {
    max_bytes: Family<DegradedLabels, Gauge>,
    used_bytes: Family<DegradedLabels, Gauge>,
    tiles: Family<DegradedLabels, Gauge>,
    evicted_tiles: Family<DegradedLabels, Gauge>,
    evicted_bytes: Family<DegradedLabels, Gauge>,
}

/// A journal store's group commit, by store (see [`Metrics::observe_sync_counts`]).
#[derive(Debug, Default)]
struct JournalGauges {
    acks: Family<DegradedLabels, Gauge>,
    syncs: Family<DegradedLabels, Gauge>,
    late_acks: Family<DegradedLabels, Gauge>,
    slow_syncs: Family<DegradedLabels, Gauge>,
}

/// Sets each gauge of `gauges` for store `store` to its value.
fn set_store_gauges<const N: usize>(
    store: &str,
    gauges: [(&Family<DegradedLabels, Gauge>, u64); N],
) {
    let labels = DegradedLabels {
        store: store.to_string(),
    };
    for (family, value) in gauges {
        family
            .get_or_create(&labels)
            .set(i64::try_from(value).unwrap_or(i64::MAX));
    }
}

/// A layer's counts and times, as `/admin/stats` reports them.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LayerCounts {
    /// Tile requests answered from the store.
    pub hits: u64,
    /// Tile requests rendered.
    pub misses: u64,
    /// Tile requests that failed.
    pub errors: u64,
    /// `hits / (hits + misses)`; `None` before any.
    pub hit_ratio: Option<f64>,
    /// Metatiles rendered.
    pub metatile_renders: u64,
    /// Render times (every render of the layer: tiles, metatiles, maps).
    pub render_times: Option<RenderTimes>,
    /// The last error a tile request met.
    pub last_error: Option<LastError>,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

/// Labels of `tessera_store_degraded`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DegradedLabels {
    store: String,
}

/// A handle on one of the metrics (each is a shared handle: a clone
/// counts into the same values), as the registry takes it.
#[derive(Debug)]
struct Shared(Box<dyn prometheus_client::registry::Metric>);

impl Shared {
    fn of(metric: &(impl prometheus_client::registry::Metric + Clone)) -> Shared {
        Shared(Box::new(metric.clone()))
    }
}

impl prometheus_client::encoding::EncodeMetric for Shared {
    fn encode(
        &self,
        encoder: prometheus_client::encoding::MetricEncoder<'_>,
    ) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> prometheus_client::metrics::MetricType {
        self.0.metric_type()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// All metrics at zero, registered under the names and help of
    /// [`Metrics::described`].
    pub fn new() -> Metrics {
        let mut metrics = Metrics {
            registry: Registry::default(),
            tile_requests: Family::default(),
            metatile_renders: Family::default(),
            idle_tile_reads: Family::default(),
            tile_encodes: Family::default(),
            files_sent: Counter::default(),
            store_op_seconds: Family::new_with_constructor(latency_histogram),
            store_errors: Family::default(),
            lock_wait_seconds: Family::new_with_constructor(latency_histogram),
            encode_queue_depth: Gauge::default(),
            store_degraded: Family::default(),
            http_request_seconds: Family::new_with_constructor(latency_histogram),
            render_seconds: Family::new_with_constructor(latency_histogram),
            lease_requests: Family::default(),
            lease_wait_seconds: latency_histogram(),
            generation_checks: Family::default(),
            caller_requests: Family::default(),
            log_lines_dropped: Counter::default(),
            degraded: std::sync::Mutex::default(),
            quota: QuotaGauges::default(),
            journal: JournalGauges::default(),
            layer_stats: LayerStats::default(),
        };
        for (name, help, metric) in metrics.described() {
            metrics.registry.register(name, help, metric);
        }
        metrics.registry.register(
            "tessera_build",
            "The running build",
            prometheus_client::metrics::info::Info::new(vec![(
                "version".to_string(),
                env!("CARGO_PKG_VERSION").to_string(),
            )]),
        );
        metrics
    }

    /// Every metric's name and help, with a handle on it (metrics are
    /// shared handles), in the order `/metrics` lists them.
    fn described(&self) -> Vec<(&'static str, &'static str, Shared)> {
        let (quota, journal) = (&self.quota, &self.journal);
        vec![
            (
                "tessera_tile_requests",
                "Tile requests by layer and result (hit, miss, error)",
                Shared::of(&self.tile_requests),
            ),
            (
                "tessera_metatile_renders",
                "Metatiles rendered",
                Shared::of(&self.metatile_renders),
            ),
            (
                "tessera_idle_tile_reads",
                "Tiles of a metatile whose tile was read alone, read in the background while renders were idle",
                Shared::of(&self.idle_tile_reads),
            ),
            (
                "tessera_tile_files_sent",
                "Tile hits sent from their file by sendfile, without being read",
                Shared::of(&self.files_sent),
            ),
            (
                "tessera_tile_encodes",
                "Tiles encoded from rendered metatiles",
                Shared::of(&self.tile_encodes),
            ),
            (
                "tessera_store_op_seconds",
                "Duration of tile store operations",
                Shared::of(&self.store_op_seconds),
            ),
            (
                "tessera_store_errors",
                "Failed tile store operations",
                Shared::of(&self.store_errors),
            ),
            (
                "tessera_lock_wait_seconds",
                "Time spent waiting for metatile and tile locks",
                Shared::of(&self.lock_wait_seconds),
            ),
            (
                "tessera_encode_queue_depth",
                "Tile encode-and-save jobs waiting for the encode pool",
                Shared::of(&self.encode_queue_depth),
            ),
            (
                "tessera_store_degraded",
                "1 while the store's writes fail (tiles are served but not kept)",
                Shared::of(&self.store_degraded),
            ),
            (
                "tessera_http_request_seconds",
                "HTTP requests by endpoint kind and status class, until the response headers",
                Shared::of(&self.http_request_seconds),
            ),
            (
                "tessera_render_seconds",
                "Duration of one layer's read and style, per metatile, tile or WMS map",
                Shared::of(&self.render_seconds),
            ),
            (
                "tessera_lease_requests",
                "Lease requests before rendering a metatile, by outcome (won, lost, taken_over, error)",
                Shared::of(&self.lease_requests),
            ),
            (
                "tessera_lease_wait_seconds",
                "Time a node that lost a lease waited for the holder's tiles",
                Shared::of(&self.lease_wait_seconds),
            ),
            (
                "tessera_generation_checks",
                "Checks of layers' generation objects, by result (unchanged, changed, error)",
                Shared::of(&self.generation_checks),
            ),
            (
                "tessera_caller_requests",
                "Requests by caller (an API key's id, jwt:<subject>, anonymous, or other past auth.metric_callers) and outcome (hit, miss, other, unauthorized, forbidden, limited)",
                Shared::of(&self.caller_requests),
            ),
            (
                "tessera_log_lines_dropped",
                "Log lines (access log included) dropped because the log writer's queue was full",
                Shared::of(&self.log_lines_dropped),
            ),
            (
                "tessera_store_quota_bytes",
                "The quota (max_size) of stores that have one",
                Shared::of(&quota.max_bytes),
            ),
            (
                "tessera_store_used_bytes",
                "Bytes of tiles in stores with a quota, as their index counts them",
                Shared::of(&quota.used_bytes),
            ),
            (
                "tessera_store_quota_tiles",
                "Tiles in stores with a quota",
                Shared::of(&quota.tiles),
            ),
            (
                "tessera_store_evicted_tiles",
                "Tiles evicted by a store's quota since the store opened",
                Shared::of(&quota.evicted_tiles),
            ),
            (
                "tessera_store_evicted_bytes",
                "Bytes evicted by a store's quota since the store opened",
                Shared::of(&quota.evicted_bytes),
            ),
            (
                "tessera_journal_acks",
                "Writes a journal store acknowledged since it opened",
                Shared::of(&journal.acks),
            ),
            (
                "tessera_journal_syncs",
                "fdatasync calls of a journal store since it opened (one per batch of writes)",
                Shared::of(&journal.syncs),
            ),
            (
                "tessera_journal_late_acks",
                "Writes a journal store acknowledged later than its max_latency after they were queued",
                Shared::of(&journal.late_acks),
            ),
            (
                "tessera_journal_slow_syncs",
                "fdatasync calls of a journal store that alone took longer than its max_latency (the disk, not the batching)",
                Shared::of(&journal.slow_syncs),
            ),
        ]
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        if let Some(dropped) = DROPPED_LOG_LINES.get() {
            let (now, seen) = (dropped(), self.log_lines_dropped.get());
            if now > seen {
                self.log_lines_dropped.inc_by(now - seen);
            }
        }
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }

    /// Counts a finished tile request.
    pub fn tile_request(&self, layer: &str, result: RequestResult) {
        self.tile_requests
            .get_or_create(&RequestLabels {
                layer: layer.into(),
                result: result.label(),
            })
            .inc();
    }

    /// Records a finished HTTP request: which kind of endpoint, its status,
    /// and the time until its response headers.
    pub fn http_request(&self, kind: EndpointKind, status: u16, elapsed: std::time::Duration) {
        let status = match status / 100 {
            1 => "1xx",
            2 => "2xx",
            3 => "3xx",
            4 => "4xx",
            _ => "5xx",
        };
        self.http_request_seconds
            .get_or_create(&HttpLabels {
                kind: kind.label(),
                status,
            })
            .observe(elapsed.as_secs_f64());
    }

    /// Records one layer's render (read and style).
    pub fn layer_rendered(&self, layer: &str, elapsed: std::time::Duration) {
        self.render_seconds
            .get_or_create(&LayerLabels {
                layer: layer.into(),
            })
            .observe(elapsed.as_secs_f64());
        self.layer_stats.rendered(layer, elapsed);
    }

    /// Records the error a tile request of `layer` met (the last one is in
    /// `/admin/stats`).
    pub fn tile_failed(&self, layer: &str, message: String) {
        self.layer_stats.failed(layer, message);
    }

    /// Sets the quota gauges of store `store`.
    pub fn observe_quota(&self, store: &str, usage: &tessera_store::quota::QuotaUsage) {
        set_store_gauges(
            store,
            [
                (&self.quota.max_bytes, usage.max_bytes),
                (&self.quota.used_bytes, usage.used_bytes),
                (&self.quota.tiles, usage.tiles),
                (&self.quota.evicted_tiles, usage.evicted_tiles),
                (&self.quota.evicted_bytes, usage.evicted_bytes),
            ],
        );
    }

    /// Sets the journal gauges of store `store`.
    pub fn observe_sync_counts(&self, store: &str, counts: &tessera_store::SyncCounts) {
        set_store_gauges(
            store,
            [
                (&self.journal.acks, counts.acks),
                (&self.journal.syncs, counts.syncs),
                (&self.journal.late_acks, counts.late_acks),
                (&self.journal.slow_syncs, counts.slow_syncs),
            ],
        );
    }

    /// `layer`'s counts, hit ratio, render times and last error.
    pub fn layer_counts(&self, layer: &str) -> LayerCounts {
        let count = |result: &'static str| {
            self.tile_requests
                .get_or_create(&RequestLabels {
                    layer: layer.into(),
                    result,
                })
                .get()
        };
        let (hits, misses, errors) = (count("hit"), count("miss"), count("error"));
        let (render_times, last_error) = self.layer_stats.of(layer);
        LayerCounts {
            hits,
            misses,
            errors,
            hit_ratio: (hits + misses > 0).then(|| hits as f64 / (hits + misses) as f64),
            metatile_renders: self.metatile_renders(layer),
            render_times,
            last_error,
        }
    }

    /// Counts a metatile render.
    pub fn metatile_rendered(&self, layer: &str) {
        self.metatile_renders
            .get_or_create(&LayerLabels {
                layer: layer.into(),
            })
            .inc();
    }

    /// Counts a tile read in the background while renders were idle (see
    /// `tile_cache::idle`).
    pub fn idle_tile_read(&self, layer: &str) {
        self.idle_tile_reads
            .get_or_create(&LayerLabels {
                layer: layer.into(),
            })
            .inc();
    }

    /// Metatiles rendered for `layer` so far.
    pub fn metatile_renders(&self, layer: &str) -> u64 {
        self.metatile_renders
            .get_or_create(&LayerLabels {
                layer: layer.into(),
            })
            .get()
    }

    /// Counts `n` tile encodes.
    pub fn tiles_encoded(&self, layer: &str, n: u64) {
        self.tile_encodes
            .get_or_create(&LayerLabels {
                layer: layer.into(),
            })
            .inc_by(n);
    }

    /// Counts a tile hit sent from its file (see `http::transport::sendfile`).
    pub fn file_sent(&self) {
        self.files_sent.inc();
    }

    /// Records a lock wait.
    pub fn lock_waited(&self, kind: LockKind, since: Instant) {
        self.lock_wait_seconds
            .get_or_create(&KindLabels { kind: kind.label() })
            .observe(since.elapsed().as_secs_f64());
    }

    /// Counts a request by `caller` (a bounded name: see
    /// [`crate::auth::Caller::metric_name`]) with `outcome`: `hit`,
    /// `miss`, `other`, `unauthorized`, `forbidden` or `limited`.
    pub fn caller_request(&self, caller: &str, outcome: &'static str) {
        self.caller_requests
            .get_or_create(&CallerLabels {
                caller: caller.to_string(),
                outcome,
            })
            .inc();
    }

    /// Counts a lease request.
    pub fn lease_requested(&self, outcome: LeaseOutcome) {
        let outcome = match outcome {
            LeaseOutcome::Won => "won",
            LeaseOutcome::Lost => "lost",
            LeaseOutcome::TakenOver => "taken_over",
            LeaseOutcome::Error => "error",
        };
        self.lease_requests
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }

    /// Records how long a node that lost a lease waited.
    pub fn lease_waited(&self, since: Instant) {
        self.lease_wait_seconds
            .observe(since.elapsed().as_secs_f64());
    }

    /// Counts a generation check.
    pub fn generation_checked(&self, result: GenerationResult) {
        let result = match result {
            GenerationResult::Unchanged => "unchanged",
            GenerationResult::Changed => "changed",
            GenerationResult::Error => "error",
        };
        self.generation_checks
            .get_or_create(&ResultLabels { result })
            .inc();
    }

    /// The encode queue depth gauge.
    pub fn encode_queue_depth(&self) -> &Gauge {
        &self.encode_queue_depth
    }

    fn store_op<T>(
        &self,
        store: &str,
        op: &'static str,
        f: impl FnOnce() -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let start = Instant::now();
        let result = f();
        let labels = StoreLabels {
            store: store.into(),
            op,
        };
        self.store_op_seconds
            .get_or_create(&labels)
            .observe(start.elapsed().as_secs_f64());
        if result.is_err() {
            self.store_errors.get_or_create(&labels).inc();
        }
        if matches!(op, "put" | "put_many") {
            self.write_outcome(store, result.is_ok());
        }
        result
    }

    /// Marks `store` degraded while its writes fail, healthy again after a
    /// write succeeds.
    fn write_outcome(&self, store: &str, ok: bool) {
        let mut degraded = self
            .degraded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let changed = if ok {
            degraded.remove(store)
        } else {
            degraded.insert(store.to_string())
        };
        if changed {
            if ok {
                tracing::info!(store, "the store accepts writes again");
            } else {
                tracing::error!(
                    store,
                    "the store fails writes: tiles are served but not kept"
                );
            }
            self.store_degraded
                .get_or_create(&DegradedLabels {
                    store: store.to_string(),
                })
                .set(i64::from(!ok));
        }
    }

    /// Stores whose last write failed (`/ready` reports them).
    pub fn degraded_stores(&self) -> Vec<String> {
        self.degraded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .cloned()
            .collect()
    }
}

/// A store whose every operation is timed into `tessera_store_op_seconds`.
#[derive(Debug)]
pub struct TimedStore {
    inner: Arc<dyn TileStore>,
    metrics: Arc<Metrics>,
}

impl TimedStore {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn TileStore>, metrics: Arc<Metrics>) -> TimedStore {
        TimedStore { inner, metrics }
    }
}

impl TileStore for TimedStore {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn is_volatile(&self) -> bool {
        self.inner.is_volatile()
    }

    fn peek(&self, key: &TileKey) -> Option<HeldTile> {
        self.inner.peek(key)
    }

    fn peek_file(&self, key: &TileKey) -> Option<tessera_store::Peeked> {
        self.inner.peek_file(key)
    }

    fn peek_or_absent(&self, key: &TileKey) -> tessera_store::Peek {
        self.inner.peek_or_absent(key)
    }

    fn get(&self, key: &TileKey) -> Result<Option<Bytes>, StoreError> {
        self.metrics
            .store_op(self.name(), "get", || self.inner.get(key))
    }

    fn get_stored(&self, key: &TileKey) -> Result<Option<StoredTile>, StoreError> {
        self.metrics
            .store_op(self.name(), "get", || self.inner.get_stored(key))
    }

    fn get_many(&self, keys: &[TileKey]) -> Result<Vec<Option<StoredTile>>, StoreError> {
        self.metrics
            .store_op(self.name(), "get_many", || self.inner.get_many(keys))
    }

    fn claim_fingerprint(&self, layer: &str, fingerprint: &str) -> Result<String, StoreError> {
        self.metrics.store_op(self.name(), "claim", || {
            self.inner.claim_fingerprint(layer, fingerprint)
        })
    }

    fn forget(&self, key: &TileKey) {
        self.inner.forget(key);
    }

    fn prefers_batches(&self) -> bool {
        self.inner.prefers_batches()
    }

    fn write_group(&self, key: &TileKey) -> Option<String> {
        self.inner.write_group(key)
    }

    fn reclaim(&self) -> Result<(), StoreError> {
        self.metrics
            .store_op(self.name(), "reclaim", || self.inner.reclaim())
    }

    fn scan(
        &self,
        matrix: tessera_store::MatrixOf<'_>,
        f: &mut dyn FnMut(TileKey, u64),
    ) -> Result<bool, StoreError> {
        self.inner.scan(matrix, f)
    }

    fn count_by_zoom(&self) -> Result<Option<Vec<tessera_store::quota::ZoomUsage>>, StoreError> {
        self.inner.count_by_zoom()
    }

    fn sync_counts(&self) -> Option<tessera_store::SyncCounts> {
        self.inner.sync_counts()
    }

    fn forget_layer(&self, layer: &str) {
        self.inner.forget_layer(layer);
    }

    fn put(&self, key: &TileKey, data: Bytes, durability: Durability) -> Result<(), StoreError> {
        self.metrics
            .store_op(self.name(), "put", || self.inner.put(key, data, durability))
    }

    fn put_many(
        &self,
        tiles: Vec<(TileKey, Bytes)>,
        durability: Durability,
    ) -> Result<(), StoreError> {
        self.metrics.store_op(self.name(), "put_many", || {
            self.inner.put_many(tiles, durability)
        })
    }

    fn delete(&self, key: &TileKey) -> Result<(), StoreError> {
        self.metrics
            .store_op(self.name(), "delete", || self.inner.delete(key))
    }

    fn exists(&self, key: &TileKey) -> Result<bool, StoreError> {
        self.metrics
            .store_op(self.name(), "exists", || self.inner.exists(key))
    }

    fn all_exist(&self, keys: &[TileKey]) -> Result<bool, StoreError> {
        self.metrics
            .store_op(self.name(), "all_exist", || self.inner.all_exist(keys))
    }

    fn layer_keys(
        &self,
        prefix: &str,
        grid: &str,
        format: tessera_grid::TileFormat,
    ) -> Result<Option<Vec<String>>, StoreError> {
        self.metrics.store_op(self.name(), "layer_keys", || {
            self.inner.layer_keys(prefix, grid, format)
        })
    }

    fn truncate(&self, area: &TileArea) -> Result<TruncateReport, StoreError> {
        self.metrics
            .store_op(self.name(), "truncate", || self.inner.truncate(area))
    }
}
