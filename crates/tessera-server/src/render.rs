//! The render path: a window of a layer (or several, composited) read from
//! its source, styled and encoded, on render threads (one per render slot,
//! each taking the next waiting render as its last one ends) with a timeout
//! on each.
//!
//! Everything here takes an arbitrary bbox and pixel size: a tile, a
//! metatile with a gutter and a WMS GetMap are the same call.
//!
//! Work is bounded before and while it runs: a render waits for one of a
//! fixed number of slots (WMS maps may hold only their share of them, so
//! they cannot starve tiles), its reads are refused when they would touch
//! more source pixels than allowed, and a cancel flag stops it when its
//! timeout passes or its caller goes away.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use tessera_grid::TileFormat;
use tessera_grid::mercator;
use tessera_grid::{BBox, METERS_PER_DEGREE};
use tessera_image::{Color, EncodeOptions, PixelScale, RgbaImage, Style, encode};
use tessera_source::partial::Partial;
use tessera_source::{Crs, SourceError, TileRows, WindowRequest};
use tokio::sync::Semaphore;

use crate::metrics::Metrics;
use crate::model::Layer;

/// Why a render did not produce an image.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The render (or the wait for a render slot) took longer than allowed.
    #[error("render did not finish within {0:?}")]
    Timeout(Duration),
    /// The source failed.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// The style could not be applied.
    #[error("the style failed")]
    Style(#[from] tessera_image::StyleError),
    /// The encoder failed.
    #[error(transparent)]
    Encode(#[from] tessera_image::EncodeError),
    /// The blocking task that rendered panicked or was cancelled.
    #[error("the render task failed")]
    Task(#[source] tokio::task::JoinError),
    /// The render panicked (on a render thread, which lives on).
    #[error("the render panicked")]
    Panicked,
    /// The render was abandoned (its timeout passed or its client left)
    /// and stopped before the end.
    #[error("the render was cancelled")]
    Cancelled,
    /// The render slots were closed (the renderer is shutting down).
    #[error("the renderer is shut down")]
    Closed,
}

/// One image to produce.
#[derive(Debug, Clone)]
pub struct ImageRequest {
    /// Layers, bottom first.
    pub layers: Vec<Arc<Layer>>,
    /// Area, in `crs` x/y order.
    pub bbox: BBox,
    /// Target CRS.
    pub crs: Arc<Crs>,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// Output format.
    pub format: TileFormat,
    /// Whether the background is transparent (where the format allows).
    pub transparent: bool,
    /// Background color.
    pub background: Color,
    /// Whether a transparent PNG keeps its alpha channel where every
    /// pixel is opaque: maps do (clients and the OGC suites read their
    /// colour model); tiles drop it, as the tiles cut from metatiles do.
    pub keep_alpha: bool,
}

/// Who a render is for: render slots are shared between the two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Demand {
    /// A tile (or the metatile around it), from XYZ/TMS/WMTS or a seed.
    Tiles,
    /// A WMS GetMap: may hold at most its share of the slots.
    Map,
}

/// How much rendering may happen, and for how long.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RenderLimits {
    /// Renders at once (at least 1).
    pub max_concurrent: usize,
    /// Share of the slots WMS maps may hold at once (0 to 1; at least one
    /// slot). The rest is kept for tiles.
    pub map_share: f64,
    /// Longest a render may take, its wait for a slot included.
    pub timeout: Duration,
    /// Most source pixels one layer's read may touch.
    pub max_source_pixels: u64,
}

impl RenderLimits {
    /// Slots WMS maps may hold at once: `map_share` of all slots, at least
    /// one, at most all.
    pub fn map_slots(&self) -> usize {
        let slots = self.max_concurrent.max(1);
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss,
            reason = "a share in 0..=1 of a slot count up to 1024"
        )]
        let share = (slots as f64 * self.map_share.clamp(0.0, 1.0)).floor() as usize;
        share.clamp(1, slots)
    }
}

/// What a render may spend (checked before and during the work), and
/// where it reports how long each layer took.
#[derive(Debug, Clone, Copy)]
pub struct Budget<'a> {
    /// Raised when the render is no longer wanted.
    pub cancel: &'a AtomicBool,
    /// Most source pixels one layer's read may touch.
    pub max_source_pixels: u64,
    /// Receives each layer's render duration.
    pub metrics: &'a Metrics,
}

/// Runs renders on `max_concurrent` render threads, of which WMS maps hold
/// at most their share.
#[derive(Debug, Clone)]
pub struct Renderer {
    threads: Arc<RenderThreads>,
    map_permits: Arc<Semaphore>,
    limits: RenderLimits,
    encoding: EncodeOptions,
    metrics: Arc<Metrics>,
}

impl Renderer {
    /// A renderer bounded by `limits`, reporting render durations to
    /// `metrics`.
    pub fn new(limits: RenderLimits, encoding: EncodeOptions, metrics: Arc<Metrics>) -> Self {
        let limits = RenderLimits {
            max_concurrent: limits.max_concurrent.max(1),
            ..limits
        };
        Self {
            threads: Arc::new(RenderThreads::start(limits.max_concurrent)),
            map_permits: Arc::new(Semaphore::new(limits.map_slots())),
            limits,
            encoding,
            metrics,
        }
    }

    /// Renders and encodes `request` for `demand`. The timeout covers the
    /// wait for a slot and the render itself; a render that overruns keeps
    /// its slot until it really ends, so overload cannot pile up threads.
    pub async fn render(
        &self,
        request: ImageRequest,
        demand: Demand,
    ) -> Result<Bytes, RenderError> {
        let encoding = self.encoding;
        self.run(demand, move |budget| {
            render_blocking(&request, &encoding, budget)
        })
        .await
    }

    /// [`Renderer::render`], with the limit a source stopped at if it drew
    /// from part of its data (a tile rendered alone: `X-Tessera-Partial`).
    pub async fn render_partial(
        &self,
        request: ImageRequest,
        demand: Demand,
    ) -> Result<(Bytes, Option<Partial>), RenderError> {
        let encoding = self.encoding;
        self.run(demand, move |budget| {
            tessera_source::partial::take();
            let bytes = render_blocking(&request, &encoding, budget)?;
            Ok((bytes, tessera_source::partial::take()))
        })
        .await
    }

    /// Renders one layer's window (a metatile with its gutter, its rows
    /// falling into tiles as `rows` says) with `style` (the layer's, or an
    /// elevation format's: [`Layer::style_for`]) without encoding it, under
    /// the same slots and timeout as [`Renderer::render`]; with the limit
    /// its source stopped at, if it drew from part of its data.
    pub async fn render_image(
        &self,
        layer: Arc<Layer>,
        style: Arc<dyn Style>,
        bbox: BBox,
        crs: Arc<Crs>,
        (width, height): (u32, u32),
        rows: TileRows,
    ) -> Result<(RgbaImage, Option<Partial>), RenderError> {
        // The source may start fetching while this waits for a slot.
        prefetch_layer(&layer, &*style, &bbox, &crs, width, height);
        self.run(Demand::Tiles, move |budget| {
            let size = (width, height);
            tessera_source::partial::take();
            let image = render_layer(&layer, &*style, &bbox, &crs, size, Some(rows), budget)?;
            Ok((image, tessera_source::partial::take()))
        })
        .await
    }

    /// Runs `work` (a feature info or legend query) on a blocking thread
    /// under a map's render slot and timeout, like a WMS GetMap.
    pub async fn query<T: Send + 'static>(
        &self,
        work: impl FnOnce(Budget<'_>) -> Result<T, RenderError> + Send + 'static,
    ) -> Result<T, RenderError> {
        self.run(Demand::Map, work).await
    }

    /// How busy the render slots are.
    pub fn slots_in_use(&self) -> SlotUse {
        let map_slots = self.limits.map_slots();
        SlotUse {
            busy: self.threads.busy().min(self.limits.max_concurrent),
            slots: self.limits.max_concurrent,
            map_busy: map_slots - self.map_permits.available_permits(),
            map_slots,
        }
    }

    /// The limits the renderer was built with.
    pub fn limits(&self) -> &RenderLimits {
        &self.limits
    }

    /// The encoder settings renders use.
    pub fn encoding(&self) -> &EncodeOptions {
        &self.encoding
    }

    /// Runs `work` on a render thread (one per slot; a map first takes
    /// one of the maps' share of slots). `work` is handed a budget whose
    /// cancel flag is raised when the render is no longer wanted: its
    /// timeout passed, or the caller went away (this future was dropped).
    /// GDAL's warp and the steps after it check the flag, so an abandoned
    /// render stops within a chunk instead of running to the end, and one
    /// abandoned while it waited for a thread is never started.
    async fn run<T: Send + 'static>(
        &self,
        demand: Demand,
        work: impl FnOnce(Budget<'_>) -> Result<T, RenderError> + Send + 'static,
    ) -> Result<T, RenderError> {
        let cancel = CancelOnDrop(Arc::new(AtomicBool::new(false)));
        let flag = cancel.0.clone();
        let timeout = self.limits.timeout;
        let deadline = tokio::time::Instant::now() + timeout;
        let map_permit = match demand {
            Demand::Map => Some(
                tokio::time::timeout_at(deadline, self.map_permits.clone().acquire_owned())
                    .await
                    .map_err(|_| RenderError::Timeout(timeout))?
                    .map_err(|_| RenderError::Closed)?,
            ),
            Demand::Tiles => None,
        };
        let max_source_pixels = self.limits.max_source_pixels;
        let metrics = self.metrics.clone();
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.threads.submit(Box::new(move |slot: Running| {
            if flag.load(Ordering::Acquire) {
                return;
            }
            let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                work(Budget {
                    cancel: &flag,
                    max_source_pixels,
                    metrics: &metrics,
                })
            }));
            // The slots are free before the caller hears: one that asks
            // how busy they are next (the idle reader) sees it free.
            drop((slot, map_permit));
            let _ = tx.send(done.unwrap_or(Err(RenderError::Panicked)));
        }))?;
        match tokio::time::timeout_at(deadline, rx).await {
            Err(_) => Err(RenderError::Timeout(timeout)),
            // Dropped unrun: the threads stopped.
            Ok(Err(_)) => Err(RenderError::Closed),
            Ok(Ok(result)) => result,
        }
    }
}

/// A render waiting for a thread; handed its thread's [`Running`], which
/// it drops once its work is done.
type Job = Box<dyn FnOnce(Running) + Send>;

/// A render thread counted as running until this is dropped.
struct Running(Arc<(std::sync::Mutex<Waiting>, std::sync::Condvar)>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .running -= 1;
    }
}

/// The render slots: as many threads as slots, each taking the next
/// waiting render as soon as its last one ends. (A semaphore in front of
/// tokio's blocking pool left each slot idle between two renders for two
/// thread hand-offs: the freed permit woke the next request's task on a
/// runtime worker, which handed its render to a blocking thread.) The
/// threads run in the runtime's context, as blocking-pool threads do, and
/// stop once the last renderer sharing them is dropped, after the renders
/// already running.
#[derive(Debug)]
struct RenderThreads {
    shared: Arc<(std::sync::Mutex<Waiting>, std::sync::Condvar)>,
}

#[derive(Default)]
struct Waiting {
    jobs: std::collections::VecDeque<Job>,
    /// Renders running now.
    running: usize,
    closed: bool,
}

impl std::fmt::Debug for Waiting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiting")
            .field("jobs", &self.jobs.len())
            .field("running", &self.running)
            .field("closed", &self.closed)
            .finish()
    }
}

impl RenderThreads {
    /// Starts `slots` render threads (at least one).
    fn start(slots: usize) -> RenderThreads {
        let shared = Arc::new((
            std::sync::Mutex::new(Waiting::default()),
            std::sync::Condvar::new(),
        ));
        let runtime = tokio::runtime::Handle::try_current().ok();
        for i in 0..slots.max(1) {
            let (shared, runtime) = (shared.clone(), runtime.clone());
            let started = std::thread::Builder::new()
                .name(format!("tessera-render-{i}"))
                .spawn(move || {
                    let _context = runtime.as_ref().map(tokio::runtime::Handle::enter);
                    render_thread(&shared);
                });
            if let Err(e) = started {
                tracing::error!(error = %e, "a render thread could not start");
            }
        }
        RenderThreads { shared }
    }

    /// Queues `job` for the next free thread.
    fn submit(&self, job: Job) -> Result<(), RenderError> {
        let (lock, ready) = &*self.shared;
        let mut waiting = lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if waiting.closed {
            return Err(RenderError::Closed);
        }
        waiting.jobs.push_back(job);
        drop(waiting);
        ready.notify_one();
        Ok(())
    }

    /// Renders running or waiting for a thread.
    fn busy(&self) -> usize {
        let waiting = self
            .shared
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        waiting.running + waiting.jobs.len()
    }
}

impl Drop for RenderThreads {
    fn drop(&mut self) {
        let (lock, ready) = &*self.shared;
        let mut waiting = lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        waiting.closed = true;
        // Renders not started are dropped: their callers get `Closed`.
        waiting.jobs.clear();
        drop(waiting);
        ready.notify_all();
    }
}

/// One render thread: the next waiting render, until the threads close.
fn render_thread(shared: &Arc<(std::sync::Mutex<Waiting>, std::sync::Condvar)>) {
    let (lock, ready) = &**shared;
    let mut waiting = lock
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    loop {
        if let Some(job) = waiting.jobs.pop_front() {
            waiting.running += 1;
            drop(waiting);
            job(Running(shared.clone()));
            waiting = lock
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        } else if waiting.closed {
            return;
        } else {
            waiting = ready
                .wait(waiting)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }
}

/// How busy the render slots are (for `/ready` and metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotUse {
    /// Slots taken by any render.
    pub busy: usize,
    /// All slots.
    pub slots: usize,
    /// Slots taken by WMS maps.
    pub map_busy: usize,
    /// Slots WMS maps may take at most.
    pub map_slots: usize,
}

/// Raises the cancel flag when dropped: when the render finished, timed
/// out, or its caller's future was dropped.
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// `Err(Cancelled)` once `cancel` is raised.
fn check(cancel: &AtomicBool) -> Result<(), RenderError> {
    if cancel.load(Ordering::Acquire) {
        Err(RenderError::Cancelled)
    } else {
        Ok(())
    }
}

/// Renders one request on the current thread; stops with
/// [`RenderError::Cancelled`] once the budget's cancel flag is raised.
pub fn render_blocking(
    req: &ImageRequest,
    encoding: &EncodeOptions,
    budget: Budget<'_>,
) -> Result<Bytes, RenderError> {
    // With a transparent background the first layer is the canvas; otherwise
    // every layer is composited over the background color.
    let mut canvas = (!req.transparent || req.format == TileFormat::Jpeg).then(|| {
        let [r, g, b, _] = req.background.0;
        let mut c = RgbaImage::transparent(req.width, req.height);
        for px in c.as_raw_mut().chunks_exact_mut(4) {
            px.copy_from_slice(&[r, g, b, 255]);
        }
        c
    });
    for layer in &req.layers {
        let size = (req.width, req.height);
        let style = layer.style_for(req.format);
        let img = render_layer(layer, &*style, &req.bbox, &req.crs, size, None, budget)?;
        match canvas.as_mut() {
            Some(c) => c.composite_over(&img),
            None => canvas = Some(img),
        }
    }
    let canvas = canvas.unwrap_or_else(|| RgbaImage::transparent(req.width, req.height));
    check(budget.cancel)?;
    // A map's colour model is the request's (RGB, or RGBA when
    // transparent): clients and the OGC suites read it; palettes are for
    // tiles, rendered alone or cut from metatiles alike.
    let encoding = &EncodeOptions {
        png_palette: encoding.png_palette && !req.keep_alpha,
        ..*encoding
    };
    let bytes = if req.keep_alpha && req.transparent && req.format == TileFormat::Png {
        tessera_image::encode_png_with_alpha(canvas.view(), encoding)?
    } else {
        encode(canvas.view(), req.format, encoding, req.background)?
    };
    Ok(Bytes::from(bytes))
}

/// Reads one layer for a window of `width` x `height` pixels (its rows
/// falling into tiles as `rows` says, for a metatile), including the
/// margin `style` needs, and styles it, within `budget`; stops with
/// [`RenderError::Cancelled`] once its cancel flag is raised.
pub fn render_layer(
    layer: &Layer,
    style: &dyn Style,
    bbox: &BBox,
    crs: &Crs,
    (width, height): (u32, u32),
    rows: Option<TileRows>,
    budget: Budget<'_>,
) -> Result<RgbaImage, RenderError> {
    let cancel = budget.cancel;
    check(cancel)?;
    let start = std::time::Instant::now();
    let mut window = WindowRequest {
        max_source_pixels: Some(budget.max_source_pixels),
        ..source_window(style, bbox, crs, width, height, Some(cancel))
    };
    // The style's margin is more rows above the first tile.
    window.tile_rows = rows.map(|r| TileRows {
        first: r.first + style.margin(),
        ..r
    });
    let (res_x, res_y) = (
        bbox.width() / f64::from(width),
        bbox.height() / f64::from(height),
    );
    // An upstream's image under a style that keeps it: no split into bands
    // and back.
    if style.keeps_rgba()
        && let Some(image) = layer.source.read_image(&window)
    {
        let mut image = image?;
        check(cancel)?;
        image.clear_transparent();
        budget.metrics.layer_rendered(&layer.name, start.elapsed());
        return Ok(image);
    }
    let raster = layer.source.read(&window)?;
    check(cancel)?;
    let scale = pixel_scale(crs, bbox, res_x, res_y);
    let image = style.apply(&raster, scale)?;
    budget.metrics.layer_rendered(&layer.name, start.elapsed());
    Ok(image)
}

/// Tells `layer`'s source that the window [`render_layer`] reads for
/// these arguments will be read soon ([`tessera_source::Source::prefetch`]).
pub fn prefetch_layer(
    layer: &Layer,
    style: &dyn Style,
    bbox: &BBox,
    crs: &Crs,
    width: u32,
    height: u32,
) {
    let window = source_window(style, bbox, crs, width, height, None);
    layer.source.prefetch(&window);
}

/// What a layer's source is asked for to render `bbox` at `width` x
/// `height`: the window grown by `style`'s margin.
fn source_window<'a>(
    style: &dyn Style,
    bbox: &BBox,
    crs: &'a Crs,
    width: u32,
    height: u32,
    cancel: Option<&'a AtomicBool>,
) -> WindowRequest<'a> {
    let margin = style.margin();
    let res_x = bbox.width() / f64::from(width);
    let res_y = bbox.height() / f64::from(height);
    WindowRequest {
        bbox: bbox.buffered(f64::from(margin) * res_x, f64::from(margin) * res_y),
        crs,
        width: width + 2 * margin,
        height: height + 2 * margin,
        cancel,
        max_source_pixels: None,
        tile_rows: None,
    }
}

/// The ground size of a pixel at the centre of `bbox`.
fn pixel_scale(crs: &Crs, bbox: &BBox, res_x: f64, res_y: f64) -> PixelScale {
    let center_y = f64::midpoint(bbox.min_y, bbox.max_y);
    let (ground_x, ground_y) = if crs.geographic {
        let lat = center_y.clamp(-89.9, 89.9).to_radians();
        (
            res_x * METERS_PER_DEGREE * lat.cos(),
            res_y * METERS_PER_DEGREE,
        )
    } else if crs.id == mercator::CRS {
        // Web Mercator stretches distances by 1 / cos(latitude).
        let lat = (center_y / mercator::EARTH_RADIUS_M).sinh().atan();
        (res_x * lat.cos(), res_y * lat.cos())
    } else {
        (res_x * crs.meters_per_unit, res_y * crs.meters_per_unit)
    };
    PixelScale {
        res_x,
        res_y,
        ground_x,
        ground_y,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn renderer(slots: usize, timeout: Duration) -> Renderer {
        Renderer::new(
            RenderLimits {
                max_concurrent: slots,
                map_share: 0.5,
                timeout,
                max_source_pixels: u64::MAX,
            },
            EncodeOptions::default(),
            Arc::new(Metrics::new()),
        )
    }

    /// The most of 12 renders of `demand`, asked at once, that ran at
    /// the same time; each answers its own number.
    async fn most_at_once(r: &Renderer, demand: Demand) -> usize {
        let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let renders: Vec<_> = (0..12)
            .map(|i| {
                let (r, now, most) = (r.clone(), now.clone(), most.clone());
                tokio::spawn(async move {
                    r.run(demand, move |_| {
                        let running = now.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(running, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(20));
                        now.fetch_sub(1, Ordering::SeqCst);
                        Ok(i)
                    })
                    .await
                })
            })
            .collect();
        for (i, render) in renders.into_iter().enumerate() {
            assert_eq!(render.await.unwrap().unwrap(), i);
        }
        most.load(Ordering::SeqCst)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn renders_run_on_at_most_their_slots_threads_and_a_panic_is_an_error() {
        let r = renderer(2, Duration::from_mins(1));
        // Maps may hold one of the two slots: queries ran one at a time.
        assert_eq!(most_at_once(&r, Demand::Map).await, 1);
        // Tiles may hold both, never more.
        let most = most_at_once(&r, Demand::Tiles).await;
        assert!((1..=2).contains(&most), "{most} at once");
        let panicked = r
            .query(|_| -> Result<(), RenderError> { panic!("a bug") })
            .await;
        assert!(
            matches!(panicked, Err(RenderError::Panicked)),
            "{panicked:?}"
        );
        // The thread lives on: both slots still render.
        for _ in 0..4 {
            assert_eq!(r.query(|_| Ok(7)).await.unwrap(), 7);
        }
        // Every slot is free once its answer is sent.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while r.slots_in_use().busy > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "a slot was never freed"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_render_that_timed_out_waiting_for_a_thread_never_starts() {
        let r = renderer(1, Duration::from_millis(200));
        let (release, held) = (Arc::new(AtomicBool::new(false)), r.clone());
        let flag = release.clone();
        // Holds the only thread past the timeout (it stops when told).
        let hog = tokio::spawn(async move {
            held.run(Demand::Tiles, move |_| {
                while !flag.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Ok(())
            })
            .await
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        let started = Arc::new(AtomicBool::new(false));
        let s = started.clone();
        let waited = r
            .run(Demand::Tiles, move |_| {
                s.store(true, Ordering::SeqCst);
                Ok(())
            })
            .await;
        assert!(matches!(waited, Err(RenderError::Timeout(_))), "{waited:?}");
        assert!(matches!(hog.await.unwrap(), Err(RenderError::Timeout(_))));
        release.store(true, Ordering::SeqCst);
        // The thread is free again once the hog ends; the abandoned render
        // was skipped, not run.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while r.slots_in_use().busy > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the slot was never freed"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(!started.load(Ordering::SeqCst), "an abandoned render ran");
        assert_eq!(r.run(Demand::Tiles, |_| Ok(())).await.ok(), Some(()));
    }

    #[test]
    fn web_mercator_pixels_shrink_with_latitude() {
        let merc = Crs::parse("EPSG:3857").unwrap();
        let equator = BBox::new(-10.0, -10.0, 10.0, 10.0).unwrap();
        let s = pixel_scale(&merc, &equator, 10.0, 10.0);
        assert!((s.ground_x - 10.0).abs() < 1e-6);
        // y = 6446276 m is 50 degrees north: cos(50°) = 0.643
        let north = BBox::new(0.0, 6_446_270.0, 10.0, 6_446_282.0).unwrap();
        let s = pixel_scale(&merc, &north, 10.0, 10.0);
        assert!((s.ground_x - 6.428).abs() < 1e-2, "{s:?}");
    }
}
