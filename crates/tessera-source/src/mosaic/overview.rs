//! Overviews of a mosaic: the whole mosaic read once per request CRS at a
//! coarse resolution, so that windows at least as coarse are read from it
//! instead of from every piece they touch (as GDAL reads a single file's
//! overviews instead of its full-resolution pixels).
//!
//! At low zooms a window touches most pieces of a large mosaic: without an
//! overview every such window opens and reads all of them. The overview is
//! read in the request's CRS, so pieces already in that CRS are read with
//! `RasterIO` and the overview's reads need no reprojection.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use tessera_grid::BBox;
use tessera_image::{BandData, Raster};

use crate::warp::{Resampling, empty_raster, warp_raster};
use crate::{Crs, SourceError, SourceInfo, WindowRequest};

/// Most CRSs with an overview at once; windows in further CRSs read the
/// pieces.
const MAX_CRSS: usize = 4;

/// Latitude limit of Web Mercator, to which the extent is cut for a
/// projected CRS.
const MERCATOR_LATITUDE: f64 = 85.051_128_779_806_59;

/// Pixels of margin around a window's part of the overview, for the
/// resampling kernel.
const MARGIN: f64 = 3.0;

/// A mosaic's overviews, one per request CRS, each read at its first use.
#[derive(Debug)]
pub(crate) struct Overviews {
    /// Longest side of each overview, in pixels.
    side: u32,
    /// The mosaic's extent in longitude/latitude.
    lonlat: BBox,
    /// Overviews by CRS (WKT): being read, or read as levels of halving
    /// resolution.
    by_crs: Mutex<HashMap<String, Slot>>,
    /// Signalled when a slot of `by_crs` is read or given up.
    changed: Condvar,
    /// The overview's grid in each CRS asked for so far (`None`: the
    /// extent does not transform there), so reads do not transform the
    /// extent again.
    grids: Mutex<HashMap<String, Option<Grid>>>,
}

/// An overview in one CRS.
#[derive(Debug)]
enum Slot {
    /// One window is reading it from the pieces; the others wait for it
    /// (reading the pieces too would do the same work again on the same
    /// cores, and slow the overview's read).
    Reading,
    /// Its levels, finest first.
    Read(Arc<Vec<Level>>),
}

/// The `Reading` slot of an overview being read: removed when dropped
/// before the read is done, so a later window reads it again.
struct Reading<'a> {
    overviews: &'a Overviews,
    key: &'a str,
    done: bool,
}

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.overviews
                .by_crs
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(self.key);
            self.overviews.changed.notify_all();
        }
    }
}

/// How often a window waiting for an overview looks at its cancel flag.
const WAIT_TICK: Duration = Duration::from_millis(50);

/// One level of an overview: its pixels and their grid.
#[derive(Debug)]
struct Level {
    raster: Raster,
    grid: Grid,
}

/// Levels are halved down to this longer side.
const SMALLEST_LEVEL: u32 = 256;

/// An overview's pixel grid in one CRS.
#[derive(Debug, Clone, Copy)]
struct Grid {
    bbox: BBox,
    width: u32,
    height: u32,
    res_x: f64,
    res_y: f64,
}

impl Grid {
    /// The grid whose longer side is `side` pixels over `bbox`.
    fn fit(bbox: BBox, side: u32) -> Option<Grid> {
        let (w, h) = (bbox.width(), bbox.height());
        if side == 0 || !(w > 0.0 && h > 0.0) {
            return None;
        }
        let long = f64::from(side);
        let (width, height) = if w >= h {
            (long, (long * h / w).round().max(1.0))
        } else {
            ((long * w / h).round().max(1.0), long)
        };
        Some(Grid {
            bbox,
            width: width as u32,
            height: height as u32,
            res_x: w / width,
            res_y: h / height,
        })
    }

    /// Whether `request`'s pixels are at least as large as the grid's (by
    /// area).
    fn serves(&self, request: &WindowRequest<'_>) -> bool {
        const SLACK: f64 = 0.999;
        let wanted = request.bbox.width() / f64::from(request.width) * request.bbox.height()
            / f64::from(request.height);
        wanted >= self.res_x * self.res_y * SLACK
    }

    /// The grid of half the resolution over the same origin (one more
    /// pixel's width past the end when the size is odd).
    fn halved(&self) -> Grid {
        let (width, height) = (self.width.div_ceil(2), self.height.div_ceil(2));
        let (res_x, res_y) = (self.res_x * 2.0, self.res_y * 2.0);
        Grid {
            bbox: BBox {
                min_x: self.bbox.min_x,
                max_y: self.bbox.max_y,
                max_x: self.bbox.min_x + f64::from(width) * res_x,
                min_y: self.bbox.max_y - f64::from(height) * res_y,
            },
            width,
            height,
            res_x,
            res_y,
        }
    }
}

impl Overviews {
    /// Overviews whose longer side is `side` pixels over the mosaic's
    /// `lonlat` extent; `None` when `side` is 0.
    pub(crate) fn new(side: u32, lonlat: BBox) -> Option<Overviews> {
        (side > 0).then(|| Overviews {
            side,
            lonlat,
            by_crs: Mutex::new(HashMap::new()),
            changed: Condvar::new(),
            grids: Mutex::new(HashMap::new()),
        })
    }

    /// The grid of the overview in `crs`: the mosaic's extent there (cut
    /// to Web Mercator's latitudes for a projected `crs`, which cannot hold
    /// the poles).
    fn grid(&self, crs: &Crs) -> Option<Grid> {
        const MOST_KEPT: usize = 64;
        let mut grids = self.grids.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(grid) = grids.get(&crs.wkt) {
            return *grid;
        }
        let grid = self.fit(crs);
        if grids.len() < MOST_KEPT {
            grids.insert(crs.wkt.clone(), grid);
        }
        grid
    }

    /// [`Overviews::grid`], computed.
    fn fit(&self, crs: &Crs) -> Option<Grid> {
        let wgs84 = Crs::parse("OGC:CRS84").ok()?;
        let extent = if crs.geographic {
            self.lonlat
        } else {
            BBox::new(
                self.lonlat.min_x,
                self.lonlat.min_y.max(-MERCATOR_LATITUDE),
                self.lonlat.max_x,
                self.lonlat.max_y.min(MERCATOR_LATITUDE),
            )
            .ok()?
        };
        let bbox = wgs84.transform_bbox(&extent, crs).ok()?;
        let finite = [bbox.min_x, bbox.min_y, bbox.max_x, bbox.max_y]
            .iter()
            .all(|v| v.is_finite());
        finite.then(|| Grid::fit(bbox, self.side)).flatten()
    }

    /// `request` read from the overview in its CRS when its pixels are at
    /// least as coarse as the overview's; `None` when they are finer: read
    /// the pieces. The first such request reads the overview with
    /// `read_pieces` (without the request's cancel flag: it is read whole,
    /// once, even if that request gives up) while concurrent ones wait for
    /// it, each until its own cancel flag is set
    /// ([`SourceError::Cancelled`]); a failed read is not kept, its error
    /// is the reader's, and a waiter then reads it again. At most
    /// [`MAX_CRSS`] CRSs get an overview (`None` for the others).
    pub(crate) fn read(
        &self,
        request: &WindowRequest<'_>,
        info: &SourceInfo,
        resampling: Resampling,
        read_pieces: impl Fn(&WindowRequest<'_>) -> Result<Raster, SourceError> + Sync,
    ) -> Result<Option<Raster>, SourceError> {
        let Some(grid) = self.grid(request.crs).filter(|g| g.serves(request)) else {
            return Ok(None);
        };
        let key = &request.crs.wkt;
        let ready = {
            let mut by_crs = self.by_crs.lock().unwrap_or_else(PoisonError::into_inner);
            loop {
                match by_crs.get(key) {
                    Some(Slot::Read(levels)) => break Some(levels.clone()),
                    Some(Slot::Reading) => {
                        if request
                            .cancel
                            .is_some_and(|c| c.load(std::sync::atomic::Ordering::Acquire))
                        {
                            return Err(SourceError::Cancelled);
                        }
                        by_crs = self
                            .changed
                            .wait_timeout(by_crs, WAIT_TICK)
                            .unwrap_or_else(PoisonError::into_inner)
                            .0;
                    }
                    None if by_crs.len() >= MAX_CRSS => return Ok(None),
                    None => {
                        by_crs.insert(key.clone(), Slot::Reading);
                        break None;
                    }
                }
            }
        };
        let levels = match ready {
            Some(levels) => levels,
            None => {
                // Until the overview is in, the slot is taken back on any
                // way out (an error, or a panic in a piece's read).
                let mut reading = Reading {
                    overviews: self,
                    key,
                    done: false,
                };
                let started = std::time::Instant::now();
                let whole = WindowRequest {
                    cancel: None,
                    ..*request
                };
                let levels = Arc::new(pyramid(read_strips(&grid, &whole, read_pieces)?, grid));
                tracing::info!(
                    crs = %request.crs.id,
                    width = grid.width,
                    height = grid.height,
                    seconds = started.elapsed().as_secs_f64(),
                    "mosaic overview read"
                );
                self.by_crs
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(key.clone(), Slot::Read(levels.clone()));
                reading.done = true;
                self.changed.notify_all();
                levels
            }
        };
        // The coarsest level still at least as fine as the request, as GDAL
        // picks a file's overview: it is resampled by less than 2.
        let level = levels
            .iter()
            .take_while(|l| l.grid.serves(request))
            .last()
            .unwrap_or(&levels[0]);
        read_window(&level.raster, &level.grid, request, info, resampling).map(Some)
    }
}

/// Reads the whole of `grid` with `read_pieces`, in horizontal strips, one
/// per core, at once (the caller's thread reads the first).
fn read_strips(
    grid: &Grid,
    request: &WindowRequest<'_>,
    read_pieces: impl Fn(&WindowRequest<'_>) -> Result<Raster, SourceError> + Sync,
) -> Result<Raster, SourceError> {
    let threads = std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .clamp(1, grid.height as usize) as u32;
    let rows = grid.height.div_ceil(threads);
    let read = |r0: u32| {
        let r1 = (r0 + rows).min(grid.height);
        read_pieces(&WindowRequest {
            bbox: BBox {
                min_x: grid.bbox.min_x,
                max_x: grid.bbox.max_x,
                max_y: grid.bbox.max_y - f64::from(r0) * grid.res_y,
                min_y: grid.bbox.max_y - f64::from(r1) * grid.res_y,
            },
            crs: request.crs,
            width: grid.width,
            height: r1 - r0,
            cancel: request.cancel,
            max_source_pixels: request.max_source_pixels,
            tile_rows: None,
        })
    };
    let starts: Vec<u32> = (0..grid.height).step_by(rows as usize).collect();
    let parts: Vec<Result<Raster, SourceError>> = std::thread::scope(|scope| {
        let others: Vec<_> = starts[1..]
            .iter()
            .map(|&r0| scope.spawn(move || read(r0)))
            .collect();
        // The first strip on this thread, whose GDAL and PROJ state is warm.
        let mut parts = vec![read(starts[0])];
        parts.extend(
            others
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))),
        );
        parts
    });
    let mut parts = parts.into_iter();
    let mut whole = parts.next().expect("one strip at least")?;
    for part in parts {
        let part = part?;
        whole.height += part.height;
        for (band, more) in whole.bands.iter_mut().zip(part.bands) {
            match (band, more) {
                (BandData::U8(v), BandData::U8(m)) => v.extend(m),
                (BandData::F32(v), BandData::F32(m)) => v.extend(m),
                _ => unreachable!("strips of one mosaic share their band types"),
            }
        }
        whole.valid.extend(part.valid);
    }
    Ok(whole)
}

/// `first` and the levels below it, each half the resolution of the one
/// above, down to [`SMALLEST_LEVEL`] pixels on the longer side.
fn pyramid(first: Raster, grid: Grid) -> Vec<Level> {
    let mut levels = vec![Level {
        raster: first,
        grid,
    }];
    loop {
        let last = levels.last().expect("one level at least");
        if last.grid.width.max(last.grid.height) <= SMALLEST_LEVEL {
            return levels;
        }
        let next = Level {
            raster: halve(&last.raster),
            grid: last.grid.halved(),
        };
        levels.push(next);
    }
}

/// Each 2x2 block of `raster` averaged into one pixel, weighted by the
/// validity (pixels past the edge count as invalid): the colour of the
/// valid pixels, and a validity of their mean.
fn halve(raster: &Raster) -> Raster {
    let (w, h) = (raster.width as usize, raster.height as usize);
    let (hw, hh) = (w.div_ceil(2), h.div_ceil(2));
    let mut valid = vec![0u8; hw * hh];
    let mut sums = vec![vec![0f32; hw * hh]; raster.bands.len()];
    for y in 0..hh {
        for x in 0..hw {
            let mut weight = 0u32;
            for (sy, sx) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
                let (px, py) = (2 * x + sx, 2 * y + sy);
                if px >= w || py >= h {
                    continue;
                }
                let i = py * w + px;
                let a = u32::from(raster.valid[i]);
                if a == 0 {
                    continue;
                }
                weight += a;
                for (sum, band) in sums.iter_mut().zip(&raster.bands) {
                    sum[y * hw + x] += band.get(i) * a as f32;
                }
            }
            let o = y * hw + x;
            valid[o] = ((weight + 2) / 4) as u8;
            if weight > 0 {
                for sum in &mut sums {
                    sum[o] /= weight as f32;
                }
            }
        }
    }
    let bands = sums
        .into_iter()
        .zip(&raster.bands)
        .map(|(sum, band)| match band {
            BandData::U8(_) => BandData::U8(
                sum.iter()
                    .map(|v| v.round().clamp(0.0, 255.0) as u8)
                    .collect(),
            ),
            BandData::F32(_) => BandData::F32(sum),
        })
        .collect();
    Raster {
        width: hw as u32,
        height: hh as u32,
        bands,
        valid,
    }
}

/// Reads `request` from `overview` (on `grid`, in the request's CRS): the
/// overview's pixels under the window, with a margin, resampled into it.
fn read_window(
    overview: &Raster,
    grid: &Grid,
    request: &WindowRequest<'_>,
    info: &SourceInfo,
    resampling: Resampling,
) -> Result<Raster, SourceError> {
    let (g, b) = (&grid.bbox, &request.bbox);
    let col = |x: f64| (x - g.min_x) / grid.res_x;
    let row = |y: f64| (g.max_y - y) / grid.res_y;
    let x0 = (col(b.min_x) - MARGIN).floor().max(0.0);
    let x1 = (col(b.max_x) + MARGIN).ceil().min(f64::from(grid.width));
    let y0 = (row(b.max_y) - MARGIN).floor().max(0.0);
    let y1 = (row(b.min_y) + MARGIN).ceil().min(f64::from(grid.height));
    if x1 <= x0 || y1 <= y0 {
        return Ok(empty_raster(info, request.width, request.height));
    }
    let part = crop(
        overview,
        x0 as usize,
        y0 as usize,
        (x1 - x0) as usize,
        (y1 - y0) as usize,
    );
    let bbox = BBox {
        min_x: g.min_x + x0 * grid.res_x,
        max_x: g.min_x + x1 * grid.res_x,
        max_y: g.max_y - y0 * grid.res_y,
        min_y: g.max_y - y1 * grid.res_y,
    };
    warp_raster(part, &bbox, request.crs, request, resampling).map_err(|source| {
        match request.cancel {
            Some(c) if c.load(std::sync::atomic::Ordering::Acquire) => SourceError::Cancelled,
            _ => SourceError::Read {
                path: "mosaic overview".into(),
                source,
            },
        }
    })
}

/// The `width` x `height` pixels of `raster` from column `x0`, row `y0`.
fn crop(raster: &Raster, x0: usize, y0: usize, width: usize, height: usize) -> Raster {
    fn rows<T: Copy>(src: &[T], stride: usize, at: (usize, usize), w: usize, h: usize) -> Vec<T> {
        let mut out = Vec::with_capacity(w * h);
        for r in at.1..at.1 + h {
            out.extend_from_slice(&src[r * stride + at.0..r * stride + at.0 + w]);
        }
        out
    }
    let stride = raster.width as usize;
    let at = (x0, y0);
    Raster {
        width: width as u32,
        height: height as u32,
        bands: raster
            .bands
            .iter()
            .map(|b| match b {
                BandData::U8(v) => BandData::U8(rows(v, stride, at, width, height)),
                BandData::F32(v) => BandData::F32(rows(v, stride, at, width, height)),
            })
            .collect(),
        valid: rows(&raster.valid, stride, at, width, height),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grids_keep_the_extents_shape_and_serve_windows_as_coarse_as_them() {
        let g = Grid::fit(BBox::new(-180.0, -90.0, 180.0, 90.0).unwrap(), 4096).unwrap();
        assert_eq!((g.width, g.height), (4096, 2048));
        let crs = Crs::parse("OGC:CRS84").unwrap();
        let window = |w: f64, px: u32| WindowRequest {
            bbox: BBox::new(0.0, 0.0, w, w).unwrap(),
            crs: &crs,
            width: px,
            height: px,
            cancel: None,
            max_source_pixels: None,
            tile_rows: None,
        };
        assert!(g.serves(&window(360.0 / 4096.0 * 256.0, 256)));
        assert!(g.serves(&window(90.0, 256)));
        assert!(!g.serves(&window(360.0 / 8192.0 * 256.0, 256)));
        assert!(Grid::fit(BBox::new(0.0, 0.0, 1.0, 1.0).unwrap(), 0).is_none());
    }

    #[test]
    fn a_world_extent_in_web_mercator_is_cut_at_its_latitudes() {
        let o = Overviews::new(1024, BBox::new(-180.0, -90.0, 180.0, 90.0).unwrap()).unwrap();
        let g = o.grid(&Crs::parse("EPSG:3857").unwrap()).unwrap();
        let edge = 20_037_508.342_789_244;
        for (got, want) in [
            (g.bbox.min_x, -edge),
            (g.bbox.max_x, edge),
            (g.bbox.min_y, -edge),
            (g.bbox.max_y, edge),
        ] {
            assert!((got - want).abs() < 1.0, "{:?}", g.bbox);
        }
        assert_eq!((g.width, g.height), (1024, 1024));
    }

    #[test]
    fn halving_averages_valid_pixels_and_counts_the_edge_as_invalid() {
        // 3x2: a transparent pixel, then odd width.
        let r = Raster {
            width: 3,
            height: 2,
            bands: vec![BandData::U8(vec![0, 100, 7, 50, 200, 9])],
            valid: vec![0, 255, 255, 255, 255, 255],
        };
        let h = halve(&r);
        assert_eq!((h.width, h.height), (2, 1));
        // (100 + 50 + 200) / 3 over three valid pixels of four; the last
        // column has two pixels of its four.
        assert!(
            matches!(&h.bands[0], BandData::U8(v) if v == &[117, 8]),
            "{:?}",
            h.bands
        );
        assert_eq!(h.valid, vec![191, 128]);
        let g = Grid::fit(BBox::new(0.0, 0.0, 3.0, 2.0).unwrap(), 3).unwrap();
        let half = g.halved();
        assert_eq!((half.width, half.height, half.res_x), (2, 1, 2.0));
        assert_eq!((half.bbox.max_x, half.bbox.min_y), (4.0, 0.0));
        let empty = Raster {
            width: 1000,
            height: 600,
            bands: vec![BandData::U8(vec![0; 600_000])],
            valid: vec![0; 600_000],
        };
        let grid = Grid::fit(BBox::new(0.0, 0.0, 10.0, 6.0).unwrap(), 1000).unwrap();
        let levels = pyramid(empty, grid);
        assert_eq!(
            levels.iter().map(|l| l.grid.width).collect::<Vec<_>>(),
            vec![1000, 500, 250]
        );
    }

    /// A lon/lat source over the world, for windows read from overviews.
    fn world_info() -> SourceInfo {
        let world = BBox::new(-180.0, -90.0, 180.0, 90.0).unwrap();
        SourceInfo {
            band_count: 1,
            is_byte: true,
            native_crs: Crs::parse("OGC:CRS84").unwrap(),
            native_bounds: world,
            lonlat_bounds: world,
            native_resolution: 1.0,
        }
    }

    /// Every pixel 200 and valid, after `pause`.
    fn slow_pieces(
        calls: &std::sync::atomic::AtomicUsize,
        pause: Duration,
        fail_first: bool,
    ) -> impl Fn(&WindowRequest<'_>) -> Result<Raster, SourceError> + Sync + '_ {
        move |w| {
            let call = calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            std::thread::sleep(pause);
            if fail_first && call == 0 {
                return Err(SourceError::Cancelled);
            }
            let n = w.width as usize * w.height as usize;
            Ok(Raster {
                width: w.width,
                height: w.height,
                bands: vec![BandData::U8(vec![200; n])],
                valid: vec![255; n],
            })
        }
    }

    #[test]
    fn windows_wait_for_the_overview_being_read_instead_of_reading_the_pieces() {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        let info = world_info();
        let crs = Crs::parse("OGC:CRS84").unwrap();
        let o = Overviews::new(64, info.lonlat_bounds).unwrap();
        let window = |cancel| WindowRequest {
            bbox: BBox::new(-180.0, -90.0, 0.0, 90.0).unwrap(),
            crs: &crs,
            width: 16,
            height: 16,
            cancel,
            max_source_pixels: None,
            tile_rows: None,
        };
        let strips = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);

        // Three windows at once: one reads the overview (in strips), the
        // others wait for it; the pieces are read once.
        let calls = AtomicUsize::new(0);
        let pieces = slow_pieces(&calls, Duration::from_millis(300), false);
        let read = || {
            o.read(&window(None), &info, Resampling::Nearest, &pieces)
                .unwrap()
                .expect("read from the overview")
        };
        let rasters: Vec<Raster> = std::thread::scope(|scope| {
            let all: Vec<_> = (0..3).map(|_| scope.spawn(read)).collect();
            all.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(calls.load(Ordering::SeqCst), strips.min(32));
        for r in &rasters {
            assert!(matches!(&r.bands[0], BandData::U8(v) if v.iter().all(|&p| p == 200)));
            assert_eq!(r, &rasters[0]);
        }

        // A waiting window whose cancel flag is raised gives up.
        let o = Overviews::new(64, info.lonlat_bounds).unwrap();
        let calls = AtomicUsize::new(0);
        let pieces = slow_pieces(&calls, Duration::from_millis(500), false);
        let cancel = AtomicBool::new(true);
        std::thread::scope(|scope| {
            let reader = scope.spawn(|| o.read(&window(None), &info, Resampling::Nearest, &pieces));
            while calls.load(Ordering::SeqCst) == 0 {
                std::thread::sleep(Duration::from_millis(5));
            }
            let waited = o.read(&window(Some(&cancel)), &info, Resampling::Nearest, &pieces);
            assert!(matches!(waited, Err(SourceError::Cancelled)), "{waited:?}");
            assert!(reader.join().unwrap().unwrap().is_some());
        });

        // A failed read is the reader's error; a waiter then reads it.
        let o = Overviews::new(64, info.lonlat_bounds).unwrap();
        let calls = AtomicUsize::new(0);
        let pieces = slow_pieces(&calls, Duration::from_millis(300), true);
        std::thread::scope(|scope| {
            let reader = scope.spawn(|| o.read(&window(None), &info, Resampling::Nearest, &pieces));
            while calls.load(Ordering::SeqCst) == 0 {
                std::thread::sleep(Duration::from_millis(5));
            }
            let waited = o.read(&window(None), &info, Resampling::Nearest, &pieces);
            assert!(reader.join().unwrap().is_err());
            assert!(waited.unwrap().is_some());
        });
    }

    #[test]
    fn crops_take_the_rows_and_columns_asked_for() {
        let r = Raster {
            width: 4,
            height: 3,
            bands: vec![BandData::U8((0..12).collect())],
            valid: (100..112).collect(),
        };
        let c = crop(&r, 1, 1, 2, 2);
        assert_eq!((c.width, c.height), (2, 2));
        assert!(matches!(&c.bands[0], BandData::U8(v) if v == &[5, 6, 9, 10]));
        assert_eq!(c.valid, vec![105, 106, 109, 110]);
    }
}
