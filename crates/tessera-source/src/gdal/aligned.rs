//! Reads of a north-up raster into a window of its own CRS through GDAL's
//! resampled `RasterIO`, instead of the general warper.
//!
//! When the request is in the source's CRS, every output pixel maps to the
//! source by a scale and an offset: GDAL's `RasterIO` with a resampling
//! algorithm and a floating-point source window does that (choosing an
//! overview as the warper's `-ovr AUTO` does) at a fraction of the warp
//! kernel's cost, which computes a transformation and a resampling kernel
//! per pixel. This is how MapServer and rio-tiler read rasters that need no
//! reprojection.
//!
//! Sources read this way have data bands with either an all-valid mask or
//! an alpha band, or are one band of numbers (not bytes) with a nodata
//! value (a DEM); the rest keep the warper, which honours every kind of
//! mask. An alpha band is read with the same resampling into the
//! validity; GDAL's resampled `RasterIO` weighs the data bands by it
//! (their mask), as the warper's `-srcalpha` does, so transparent pixels
//! do not darken the edges. A nodata value is honoured the same way:
//! resampling weighs only valid pixels and writes the nodata value where
//! none contributes, which is read back as invalid (a value between
//! valid bytes could round to a byte nodata value, so byte bands with
//! nodata keep the warper). Output pixels whose centres fall outside the
//! raster are left invalid (alpha 0), as the warper leaves them.

use std::ffi::c_int;

use gdal::Dataset;
use tessera_image::{BandData, Raster};

use crate::warp::{Resampling, empty_raster};
use crate::{Crs, SourceInfo, WindowRequest};

/// Whether coordinates in `a` are coordinates in `b` (x/y order): the same
/// authority code, or WGS 84 longitude/latitude under either of its names.
pub(crate) fn same_axes(a: &Crs, b: &Crs) -> bool {
    const LONLAT: [&str; 2] = ["EPSG:4326", "OGC:CRS84"];
    (a.id.contains(':') && a.id == b.id)
        || (LONLAT.contains(&a.id.as_str()) && LONLAT.contains(&b.id.as_str()))
}

/// The pixel grid of a source that can be read with `RasterIO`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct AlignedGrid {
    /// The source's geotransform (north up: no rotation, rows downwards).
    gt: [f64; 6],
    width: f64,
    height: f64,
    bands: usize,
    /// The alpha band's number, read into the validity.
    alpha: Option<c_int>,
    /// The nodata value of the one data band: pixels read as it (or as
    /// NaN, when it is NaN) are invalid.
    nodata: Option<f64>,
}

impl AlignedGrid {
    /// The source's geotransform.
    pub(crate) fn geo_transform(&self) -> [f64; 6] {
        self.gt
    }

    /// The data bands read (alpha aside).
    pub(crate) fn bands(&self) -> usize {
        self.bands
    }

    /// Whether an alpha band follows the data bands.
    pub(crate) fn has_alpha(&self) -> bool {
        self.alpha.is_some()
    }

    /// The grid of `ds` when it can be read this way: a north-up
    /// geotransform, and data bands `1..=bands` without nodata whose mask
    /// is all valid, or (with `has_alpha`) the alpha band `bands + 1`, or
    /// one band of numbers (`is_byte` false) whose mask is its nodata value.
    pub(crate) fn of(
        ds: &Dataset,
        bands: usize,
        has_alpha: bool,
        is_byte: bool,
    ) -> Option<AlignedGrid> {
        let gt = ds.geo_transform().ok()?;
        if !(gt[1] > 0.0 && gt[5] < 0.0 && gt[2] == 0.0 && gt[4] == 0.0) {
            return None;
        }
        let mut nodata = None;
        for b in 1..=bands {
            let band = ds.rasterband(b).ok()?;
            let flags = band.mask_flags().ok()?;
            let masked_by_alpha = has_alpha && flags.is_alpha() && flags.is_per_dataset();
            match band.no_data_value() {
                None if flags.is_all_valid() || masked_by_alpha => {}
                // A value past f32's range (1e300 in a Float64 band) would
                // be written clamped and never compare equal: the warper.
                #[allow(clippy::cast_possible_truncation, reason = "checked for its range")]
                Some(v)
                    if bands == 1
                        && !has_alpha
                        && !is_byte
                        && flags.is_nodata()
                        && (!v.is_finite() || (v as f32).is_finite()) =>
                {
                    nodata = Some(v);
                }
                _ => return None,
            }
        }
        let alpha = if has_alpha {
            Some(c_int::try_from(bands + 1).ok()?)
        } else {
            None
        };
        let (w, h) = ds.raster_size();
        Some(AlignedGrid {
            gt,
            width: w as f64,
            height: h as f64,
            bands,
            alpha,
            nodata,
        })
    }

    /// The nodata value of the one data band, when it has one.
    pub(crate) fn nodata(&self) -> Option<f64> {
        self.nodata
    }

    /// The same kind of grid over another raster of the same bands:
    /// `width` x `height` pixels placed by `gt` (a part of one of this
    /// raster's levels held in memory, say).
    pub(crate) fn with_pixels(&self, gt: [f64; 6], width: usize, height: usize) -> AlignedGrid {
        AlignedGrid {
            gt,
            width: width as f64,
            height: height as f64,
            ..*self
        }
    }

    /// Where `req` (in the source's own CRS) falls on the raster: `None`
    /// when no output pixel's centre does.
    pub(crate) fn source_window(&self, req: &WindowRequest<'_>) -> Option<SourceWindow> {
        let w = req.width as usize;
        let h = req.height as usize;
        let gt = &self.gt;
        // The request in source pixels (fractional), and source pixels per
        // output pixel.
        let sx0 = (req.bbox.min_x - gt[0]) / gt[1];
        let sy0 = (req.bbox.max_y - gt[3]) / gt[5];
        let kx = req.bbox.width() / gt[1] / w as f64;
        let ky = req.bbox.height() / -gt[5] / h as f64;
        // Output pixels whose centres fall on the raster.
        let first = |s0: f64, k: f64| (-s0 / k - 0.5).ceil().max(0.0);
        let end = |s0: f64, k: f64, size: f64, n: usize| {
            ((size - s0) / k - 0.5).ceil().clamp(0.0, n as f64)
        };
        let (ix0, ix1) = (first(sx0, kx), end(sx0, kx, self.width, w));
        let (iy0, iy1) = (first(sy0, ky), end(sy0, ky, self.height, h));
        if ix0 >= ix1 || iy0 >= iy1 {
            return None;
        }
        // The source window of those pixels, kept on the raster.
        // Tile grids often fall on the source's pixels (a pyramid cut from
        // it, or its overviews): a window on whole pixels then needs no
        // resampling, and GDAL copies blocks instead.
        let snap = |v: f64| {
            if (v - v.round()).abs() < 1e-6 {
                v.round()
            } else {
                v
            }
        };
        let fx0 = snap(sx0 + ix0 * kx).clamp(0.0, self.width);
        let fx1 = snap(sx0 + ix1 * kx).clamp(0.0, self.width);
        let fy0 = snap(sy0 + iy0 * ky).clamp(0.0, self.height);
        let fy1 = snap(sy0 + iy1 * ky).clamp(0.0, self.height);
        let (nx0, ny0) = (fx0.floor(), fy0.floor());
        let (nx1, ny1) = (fx1.ceil().max(nx0 + 1.0), fy1.ceil().max(ny0 + 1.0));
        let (bx, by) = ((ix1 - ix0) as usize, (iy1 - iy0) as usize);
        Some(SourceWindow {
            x0: fx0,
            x1: fx1,
            y0: fy0,
            y1: fy1,
            window: Window {
                x: nx0 as c_int,
                y: ny0 as c_int,
                width: (nx1.min(self.width) - nx0) as c_int,
                height: (ny1.min(self.height) - ny0) as c_int,
                buf_width: bx as c_int,
                buf_height: by as c_int,
            },
            place: Place {
                bx,
                by,
                w,
                x0: ix0 as usize,
                y0: iy0 as usize,
            },
        })
    }

    /// Reads `req` (in the source's own CRS) from `ds`, resampled with
    /// `resampling`: byte bands as bytes, others as `f32`, as `info` says.
    pub(crate) fn read(
        &self,
        ds: &Dataset,
        req: &WindowRequest<'_>,
        info: &SourceInfo,
        resampling: Resampling,
    ) -> Result<Raster, String> {
        self.read_from(ds, req, info, resampling)?
            .ok_or_else(|| "GDAL declined a read".to_string())
    }

    /// Reads `req` as [`AlignedGrid::read`] does, from `pixels`; `None`
    /// when `pixels` cannot do one of the reads that takes.
    pub(crate) fn read_from<P: Pixels>(
        &self,
        pixels: &P,
        req: &WindowRequest<'_>,
        info: &SourceInfo,
        resampling: Resampling,
    ) -> Result<Option<Raster>, String> {
        let mut raster = empty_raster(info, req.width, req.height);
        let Some(SourceWindow {
            x0: fx0,
            x1: fx1,
            y0: fy0,
            y1: fy1,
            window,
            place,
        }) = self.source_window(req)
        else {
            return Ok(Some(raster));
        };
        let whole = [fx0, fx1, fy0, fy1].iter().all(|v| v.fract() == 0.0);
        let mut extra = gdal_sys::GDALRasterIOExtraArg {
            nVersion: 1,
            eResampleAlg: rio_resampling(resampling),
            pfnProgress: None,
            pProgressData: std::ptr::null_mut(),
            bFloatingPointWindowValidity: c_int::from(!whole),
            dfXOff: fx0,
            dfYOff: fy0,
            dfXSize: (fx1 - fx0).max(f64::MIN_POSITIVE),
            dfYSize: (fy1 - fy0).max(f64::MIN_POSITIVE),
        };
        let mut band_map: Vec<c_int> = (1..=self.bands as c_int).collect();
        let (bx, by) = (place.bx, place.by);
        let (ix0, iy0, w) = (place.x0, place.y0, place.w);
        let done = if info.is_byte {
            read_into::<u8, P>(
                pixels,
                &window,
                &mut band_map,
                &mut extra,
                &mut raster,
                &place,
            )?
        } else {
            read_into::<f32, P>(
                pixels,
                &window,
                &mut band_map,
                &mut extra,
                &mut raster,
                &place,
            )?
        };
        if !done {
            return Ok(None);
        }
        match (self.alpha, self.nodata) {
            (Some(alpha), _) => {
                let mut buf = vec![0u8; bx * by];
                if !pixels.read(&window, &mut buf, &mut [alpha], &mut extra)? {
                    return Ok(None);
                }
                for (row, src) in buf.chunks_exact(bx).enumerate() {
                    let start = (iy0 + row) * w + ix0;
                    raster.valid[start..start + bx].copy_from_slice(src);
                }
            }
            (None, Some(nodata)) => {
                // The warper keeps an output pixel when the source pixel
                // under its centre is valid (then resamples from the valid
                // ones around it): that pixel is what a nearest-neighbour
                // read of the same window finds.
                // (A nearest-neighbour read is that read already.)
                // Nor is it needed where no source pixel of the window
                // holds nodata: no centre can then.
                #[allow(clippy::cast_possible_truncation, reason = "the f32 band's value")]
                let nearest = if resampling == Resampling::Nearest
                    || pixels.free_of(&window, nodata as f32)
                {
                    None
                } else {
                    let mut centres = vec![0f32; bx * by];
                    let mut at_centres = gdal_sys::GDALRasterIOExtraArg {
                        eResampleAlg: gdal_sys::GDALRIOResampleAlg::GRIORA_NearestNeighbour,
                        ..extra
                    };
                    if !pixels.read(&window, &mut centres, &mut [1], &mut at_centres)? {
                        return Ok(None);
                    }
                    Some(centres)
                };
                mark_nodata(&mut raster, nodata, &place, nearest.as_deref());
            }
            (None, None) => {
                for row in 0..by {
                    let start = (iy0 + row) * w + ix0;
                    raster.valid[start..start + bx].fill(255);
                }
            }
        }
        Ok(Some(raster))
    }
}

/// What an aligned read reads from: a GDAL dataset, or one Float32 band
/// in memory (`plane::Plane`).
pub(crate) trait Pixels {
    /// Fills `buf` (band after band, `window.buf_width` x
    /// `window.buf_height` each) with bands `band_map` of `window`, as
    /// GDAL's `RasterIO` with `extra` does; `false` when this source
    /// cannot do that read.
    fn read<T: Sample>(
        &self,
        window: &Window,
        buf: &mut [T],
        band_map: &mut [c_int],
        extra: &mut gdal_sys::GDALRasterIOExtraArg,
    ) -> Result<bool, String>;

    /// Whether no pixel of band 1 in `window` holds `nodata` (equal to
    /// it as `mark_nodata` compares, or any NaN when `nodata` is NaN);
    /// `false` when this source cannot tell without a read of its own.
    fn free_of(&self, _window: &Window, _nodata: f32) -> bool {
        false
    }
}

impl Pixels for Dataset {
    fn read<T: Sample>(
        &self,
        window: &Window,
        buf: &mut [T],
        band_map: &mut [c_int],
        extra: &mut gdal_sys::GDALRasterIOExtraArg,
    ) -> Result<bool, String> {
        raster_io(self, window, buf, band_map, extra).map(|()| true)
    }
}

/// Marks the pixels of `place` valid where neither the resampled band nor
/// `nearest` (the same window read nearest-neighbour: the source pixel
/// under each output pixel's centre; `None` when the band was read so)
/// holds `nodata` (NaN when `nodata` is NaN); invalid pixels are set to 0,
/// as the warper leaves them.
fn mark_nodata(raster: &mut Raster, nodata: f64, place: &Place, nearest: Option<&[f32]>) {
    let Some(BandData::F32(values)) = raster.bands.first_mut() else {
        return;
    };
    // GDAL writes the nodata value as the buffer's type holds it.
    #[allow(clippy::cast_possible_truncation, reason = "the f32 buffer's value")]
    let nodata = nodata as f32;
    // GDAL writes exactly this value where no valid pixel contributes.
    #[allow(
        clippy::float_cmp,
        reason = "the value GDAL wrote, compared bit for bit"
    )]
    let is_nodata = |v: f32| v == nodata || (nodata.is_nan() && v.is_nan());
    for row in 0..place.by {
        let start = (place.y0 + row) * place.w + place.x0;
        let span = start..start + place.bx;
        let centres = nearest.map(|n| &n[row * place.bx..(row + 1) * place.bx]);
        let pixels = values[span.clone()].iter_mut().zip(&mut raster.valid[span]);
        for (i, (v, valid)) in pixels.enumerate() {
            if is_nodata(*v) || centres.is_some_and(|c| is_nodata(c[i])) {
                *v = 0.0;
                *valid = 0;
            } else {
                *valid = 255;
            }
        }
    }
}

/// Where a request falls on a raster ([`AlignedGrid::source_window`]).
pub(crate) struct SourceWindow {
    /// The source window in the raster's pixels (fractional): columns
    /// `x0..x1`, rows `y0..y1`.
    pub x0: f64,
    pub x1: f64,
    pub y0: f64,
    pub y1: f64,
    /// The whole pixels covering it, and the output pixels read from it.
    pub window: Window,
    /// Where those output pixels go in the request.
    pub place: Place,
}

/// A `RasterIO` call's integer source window and buffer size.
pub(crate) struct Window {
    pub x: c_int,
    pub y: c_int,
    pub width: c_int,
    pub height: c_int,
    pub buf_width: c_int,
    pub buf_height: c_int,
}

/// Element types `RasterIO` fills here, and the band data holding them.
pub(crate) trait Sample: Copy + Default {
    /// GDAL's name of the type.
    const GDAL: gdal_sys::GDALDataType::Type;
    /// The samples of `band` when it holds this type.
    fn samples(band: &mut BandData) -> Option<&mut Vec<Self>>;
    /// `buf` as floats, when this type is `f32`.
    fn as_f32(buf: &mut [Self]) -> Option<&mut [f32]>;
    /// `buf` as bytes, when this type is `u8`.
    fn as_u8(buf: &mut [Self]) -> Option<&mut [u8]>;
    /// Runs `f` on `n` samples of this thread's scratch buffer, which
    /// hold what the last user left (a read overwrites them all): a tile
    /// read costs no allocation and no zeroing of its buffer.
    fn scratch<R>(n: usize, f: impl FnOnce(&mut [Self]) -> R) -> R;
}

/// Scratch buffers larger than this (samples) are not kept for the next
/// read.
const KEPT_SCRATCH: usize = 1 << 22;

/// `f` on `n` samples of `cell`'s buffer, grown as needed and given up
/// when past [`KEPT_SCRATCH`].
fn with_scratch<T: Copy + Default, R>(
    cell: &'static std::thread::LocalKey<std::cell::RefCell<Vec<T>>>,
    n: usize,
    f: impl FnOnce(&mut [T]) -> R,
) -> R {
    cell.with(|kept| match kept.try_borrow_mut() {
        Ok(mut buf) => {
            if buf.len() < n {
                buf.resize(n, T::default());
            }
            let out = f(&mut buf[..n]);
            if buf.len() > KEPT_SCRATCH {
                *buf = Vec::new();
            }
            out
        }
        // Already in use on this thread (a read inside a read): a fresh one.
        Err(_) => f(&mut vec![T::default(); n]),
    })
}

thread_local! {
    static SCRATCH_U8: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    static SCRATCH_F32: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Sample for u8 {
    const GDAL: gdal_sys::GDALDataType::Type = gdal_sys::GDALDataType::GDT_Byte;
    fn samples(band: &mut BandData) -> Option<&mut Vec<u8>> {
        match band {
            BandData::U8(v) => Some(v),
            BandData::F32(_) => None,
        }
    }
    fn as_f32(_: &mut [u8]) -> Option<&mut [f32]> {
        None
    }
    fn as_u8(buf: &mut [u8]) -> Option<&mut [u8]> {
        Some(buf)
    }
    fn scratch<R>(n: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
        with_scratch(&SCRATCH_U8, n, f)
    }
}

impl Sample for f32 {
    const GDAL: gdal_sys::GDALDataType::Type = gdal_sys::GDALDataType::GDT_Float32;
    fn samples(band: &mut BandData) -> Option<&mut Vec<f32>> {
        match band {
            BandData::F32(v) => Some(v),
            BandData::U8(_) => None,
        }
    }
    fn as_u8(_: &mut [f32]) -> Option<&mut [u8]> {
        None
    }
    fn scratch<R>(n: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
        with_scratch(&SCRATCH_F32, n, f)
    }
    fn as_f32(buf: &mut [f32]) -> Option<&mut [f32]> {
        Some(buf)
    }
}

/// Where a read block goes in the output: `bx` x `by` pixels at column
/// `x0`, row `y0` of rows `w` wide.
pub(crate) struct Place {
    pub bx: usize,
    pub by: usize,
    pub w: usize,
    pub x0: usize,
    pub y0: usize,
}

/// Reads every band of `window` as `T` and copies it into `raster` at
/// `place`; `false` when `pixels` cannot do that read.
fn read_into<T: Sample, P: Pixels>(
    pixels: &P,
    window: &Window,
    band_map: &mut [c_int],
    extra: &mut gdal_sys::GDALRasterIOExtraArg,
    raster: &mut Raster,
    place: &Place,
) -> Result<bool, String> {
    let block = place.bx * place.by;
    T::scratch(block * band_map.len(), |buf| {
        if !pixels.read(window, buf, band_map, extra)? {
            return Ok(false);
        }
        for (band, data) in raster.bands.iter_mut().zip(buf.chunks_exact(block)) {
            if let Some(out) = T::samples(band) {
                for (row, src) in data.chunks_exact(place.bx).enumerate() {
                    let start = (place.y0 + row) * place.w + place.x0;
                    out[start..start + place.bx].copy_from_slice(src);
                }
            }
        }
        Ok(true)
    })
}

fn raster_io<T: Sample>(
    ds: &Dataset,
    window: &Window,
    buf: &mut [T],
    band_map: &mut [c_int],
    extra: &mut gdal_sys::GDALRasterIOExtraArg,
) -> Result<(), String> {
    let size = std::mem::size_of::<T>() as i64;
    let line = i64::from(window.buf_width) * size;
    let band_space = line * i64::from(window.buf_height);
    assert!(buf.len() as i64 * size >= band_space * band_map.len() as i64);
    // SAFETY: `buf` holds `buf_width * buf_height * bands` elements of the
    // type named by `T::GDAL`, laid out band after band with the spacings
    // given; the window lies on the raster (checked by the caller's
    // clamping, and by GDAL, which fails the call otherwise); the dataset
    // handle is used by this thread only.
    let err = unsafe {
        gdal_sys::CPLErrorReset();
        gdal_sys::GDALDatasetRasterIOEx(
            ds.c_dataset(),
            gdal_sys::GDALRWFlag::GF_Read,
            window.x,
            window.y,
            window.width,
            window.height,
            buf.as_mut_ptr().cast(),
            window.buf_width,
            window.buf_height,
            T::GDAL,
            band_map.len() as c_int,
            band_map.as_mut_ptr(),
            size,
            line,
            band_space,
            std::ptr::from_mut(extra),
        )
    };
    if err == gdal_sys::CPLErr::CE_None {
        Ok(())
    } else {
        // SAFETY: CPLGetLastErrorMsg returns a valid thread-local C string.
        let msg = unsafe { std::ffi::CStr::from_ptr(gdal_sys::CPLGetLastErrorMsg()) };
        Err(format!("read failed: {}", msg.to_string_lossy()))
    }
}

fn rio_resampling(r: Resampling) -> gdal_sys::GDALRIOResampleAlg::Type {
    use gdal_sys::GDALRIOResampleAlg as A;
    match r {
        Resampling::Nearest => A::GRIORA_NearestNeighbour,
        Resampling::Bilinear => A::GRIORA_Bilinear,
        Resampling::Cubic => A::GRIORA_Cubic,
        Resampling::Cubicspline => A::GRIORA_CubicSpline,
        Resampling::Lanczos => A::GRIORA_Lanczos,
        Resampling::Average => A::GRIORA_Average,
        Resampling::Mode => A::GRIORA_Mode,
    }
}
