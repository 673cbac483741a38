//! Warping shared by the backends: rasters and RGBA images moved into
//! in-memory GDAL datasets and warped into a window with `GDALWarp` (the
//! GDAL source's own reads, the mosaic's overviews, an upstream's images
//! in another CRS), and the empty window every backend answers outside
//! its data.

use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicBool, Ordering};

use gdal::raster::{Buffer, ColorInterpretation};
use gdal::{Dataset, DriverManager};
use serde::Deserialize;
use tessera_grid::BBox;
use tessera_image::{BandData, Raster};

use crate::{Cause, Crs, SourceInfo, WindowRequest};

/// Resampling used when warping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Resampling {
    /// Nearest neighbour (categorical data).
    Nearest,
    /// Bilinear (the default).
    #[default]
    Bilinear,
    /// Cubic convolution.
    Cubic,
    /// Cubic B-spline.
    Cubicspline,
    /// Lanczos windowed sinc.
    Lanczos,
    /// Average of contributing pixels.
    Average,
    /// Most frequent value.
    Mode,
}

impl Resampling {
    /// GDAL's name of the method (`gdalwarp -r`).
    pub(crate) fn gdal_name(self) -> &'static str {
        match self {
            Resampling::Nearest => "near",
            Resampling::Bilinear => "bilinear",
            Resampling::Cubic => "cubic",
            Resampling::Cubicspline => "cubicspline",
            Resampling::Lanczos => "lanczos",
            Resampling::Average => "average",
            Resampling::Mode => "mode",
        }
    }
}

/// The geotransform of `width` x `height` pixels covering `bbox`, north up.
pub(crate) fn geo_transform(bbox: &BBox, width: usize, height: usize) -> [f64; 6] {
    [
        bbox.min_x,
        bbox.width() / width as f64,
        0.0,
        bbox.max_y,
        0.0,
        -bbox.height() / height as f64,
    ]
}

/// Warps an RGBA image covering `bbox` in `crs` into the window `req`
/// asks for (alpha is carried as the validity), with `resampling`.
#[cfg(any(feature = "upstream", feature = "archive"))]
pub(crate) fn warp_rgba(
    image: &tessera_image::RgbaImage,
    bbox: &BBox,
    crs: &Crs,
    req: &WindowRequest<'_>,
    resampling: Resampling,
) -> Result<Raster, Cause> {
    warp_raster(Raster::from_rgba(image), bbox, crs, req, resampling)
}

/// Warps a raster covering `bbox` in `crs` into the window `req` asks for,
/// with `resampling`; its validity is carried as an alpha band (0-255, for
/// float bands too). The raster is moved into an in-memory dataset;
/// nothing touches the disk.
pub(crate) fn warp_raster(
    raster: Raster,
    bbox: &BBox,
    crs: &Crs,
    req: &WindowRequest<'_>,
    resampling: Resampling,
) -> Result<Raster, Cause> {
    let is_byte = raster.bands.iter().all(|b| matches!(b, BandData::U8(_)));
    let count = raster.bands.len();
    let (sw, sh) = (raster.width as usize, raster.height as usize);
    let src = mem_dataset(is_byte, (sw, sh), count + 1, bbox, crs)?;
    // GDAL converts the samples to the dataset's type as it writes them.
    for (i, data) in raster.bands.into_iter().enumerate() {
        let mut band = src.rasterband(i + 1)?;
        match data {
            BandData::U8(v) => band.write((0, 0), (sw, sh), &mut Buffer::new((sw, sh), v))?,
            BandData::F32(v) => band.write((0, 0), (sw, sh), &mut Buffer::new((sw, sh), v))?,
        }
    }
    src.rasterband(count + 1)?
        .write((0, 0), (sw, sh), &mut Buffer::new((sw, sh), raster.valid))?;
    let size = (req.width as usize, req.height as usize);
    let dst = mem_dataset(is_byte, size, count + 1, &req.bbox, req.crs)?;
    let args = [
        "-r",
        resampling.gdal_name(),
        "-srcalpha",
        "-dstalpha",
        "-et",
        "0.125",
        "-wo",
        "INIT_DEST=0",
    ];
    run_gdal_warp(&src, &dst, &args, req.cancel).map_err(|e| match e {
        WarpError::Cancelled => Cause::from("cancelled"),
        WarpError::Failed(m) => Cause::from(m),
    })?;
    Ok(read_mem(&dst, count, is_byte)?)
}

/// An in-memory dataset of `bands` bands (bytes, or `f32`) of `size`
/// pixels covering `bbox` in `crs`, its last band the alpha band.
pub(crate) fn mem_dataset(
    is_byte: bool,
    size: (usize, usize),
    bands: usize,
    bbox: &BBox,
    crs: &Crs,
) -> Result<Dataset, gdal::errors::GdalError> {
    let mem = DriverManager::get_driver_by_name("MEM")?;
    let (w, h) = size;
    let mut ds = if is_byte {
        mem.create_with_band_type::<u8, _>("", w, h, bands)?
    } else {
        mem.create_with_band_type::<f32, _>("", w, h, bands)?
    };
    ds.set_geo_transform(&geo_transform(bbox, w, h))?;
    ds.set_projection(&crs.wkt)?;
    ds.rasterband(bands)?
        .set_color_interpretation(ColorInterpretation::AlphaBand)?;
    Ok(ds)
}

/// The `count` data bands of a warp's in-memory output (as bytes, or as
/// `f32`) and its alpha band after them as the validity.
pub(crate) fn read_mem(
    dst: &Dataset,
    count: usize,
    is_byte: bool,
) -> Result<Raster, gdal::errors::GdalError> {
    let (w, h) = dst.raster_size();
    let mut bands = Vec::with_capacity(count);
    for i in 1..=count {
        let band = dst.rasterband(i)?;
        bands.push(if is_byte {
            let mut v = vec![0u8; w * h];
            band.read_into_slice((0, 0), (w, h), (w, h), &mut v, None)?;
            BandData::U8(v)
        } else {
            let mut v = vec![0f32; w * h];
            band.read_into_slice((0, 0), (w, h), (w, h), &mut v, None)?;
            BandData::F32(v)
        });
    }
    // Read as bytes whatever the band's type: GDAL converts.
    let mut valid = vec![0u8; w * h];
    dst.rasterband(count + 1)?
        .read_into_slice((0, 0), (w, h), (w, h), &mut valid, None)?;
    Ok(Raster {
        width: w as u32,
        height: h as u32,
        bands,
        valid,
    })
}

/// A window of `width` x `height` pixels of `info`'s bands, every pixel
/// invalid.
pub(crate) fn empty_raster(info: &SourceInfo, width: u32, height: u32) -> Raster {
    let n = width as usize * height as usize;
    Raster {
        width,
        height,
        bands: (0..info.band_count)
            .map(|_| {
                if info.is_byte {
                    BandData::U8(vec![0; n])
                } else {
                    BandData::F32(vec![0.0; n])
                }
            })
            .collect(),
        valid: vec![0; n],
    }
}

/// Why `GDALWarp` did not finish.
pub(crate) enum WarpError {
    /// The cancel flag was raised.
    Cancelled,
    /// GDAL's message.
    Failed(String),
}

/// GDAL's progress callback: returning 0 makes the warp stop (checked
/// between chunks).
unsafe extern "C" fn warp_progress(
    _complete: f64,
    _message: *const std::ffi::c_char,
    data: *mut std::ffi::c_void,
) -> std::ffi::c_int {
    // SAFETY: `data` is the `&AtomicBool` run_gdal_warp passed, alive for
    // the whole GDALWarp call.
    let cancel = unsafe { &*data.cast::<AtomicBool>() };
    std::ffi::c_int::from(!cancel.load(Ordering::Acquire))
}

/// Runs `GDALWarp` from `src` into the existing `dst` with command-line
/// style options, stopping between chunks when `cancel` is raised.
pub(crate) fn run_gdal_warp(
    src: &Dataset,
    dst: &Dataset,
    args: &[&str],
    cancel: Option<&AtomicBool>,
) -> Result<(), WarpError> {
    if cancel.is_some_and(|c| c.load(Ordering::Acquire)) {
        return Err(WarpError::Cancelled);
    }
    // One thread per warp, whatever `GDAL_NUM_THREADS` says (the warper
    // takes it as its default): renders run in parallel already, and a
    // warp's threads would be set up per call.
    let threads = ["-wo", "NUM_THREADS=1"];
    let c_args: Vec<CString> = args
        .iter()
        .chain(
            threads
                .iter()
                .filter(|_| !args.iter().any(|a| a.starts_with("NUM_THREADS="))),
        )
        .map(|a| CString::new(*a).map_err(|e| WarpError::Failed(e.to_string())))
        .collect::<Result<_, _>>()?;
    let mut argv: Vec<*mut std::ffi::c_char> =
        c_args.iter().map(|a| a.as_ptr().cast_mut()).collect();
    argv.push(std::ptr::null_mut());
    // SAFETY: argv is a NULL-terminated array of valid C strings that
    // outlive the call; GDAL copies what it keeps.
    let options =
        unsafe { gdal_sys::GDALWarpAppOptionsNew(argv.as_mut_ptr(), std::ptr::null_mut()) };
    if options.is_null() {
        return Err(WarpError::Failed(format!("invalid warp options {args:?}")));
    }
    if let Some(flag) = cancel {
        // SAFETY: options is valid; the flag outlives the GDALWarp call
        // below, the only one that calls the callback.
        unsafe {
            gdal_sys::GDALWarpAppOptionsSetProgress(
                options,
                Some(warp_progress),
                std::ptr::from_ref(flag).cast_mut().cast(),
            );
        }
    }
    let mut src_handle = src.c_dataset();
    let mut usage_error = 0;
    // SAFETY: both datasets are valid open handles owned by the caller and
    // used by this thread only; options is valid until freed below.
    let result = unsafe {
        gdal_sys::CPLErrorReset();
        let r = gdal_sys::GDALWarp(
            std::ptr::null(),
            dst.c_dataset(),
            1,
            &raw mut src_handle,
            options,
            &raw mut usage_error,
        );
        gdal_sys::GDALWarpAppOptionsFree(options);
        r
    };
    if result.is_null() {
        if cancel.is_some_and(|c| c.load(Ordering::Acquire)) {
            return Err(WarpError::Cancelled);
        }
        // SAFETY: CPLGetLastErrorMsg returns a valid (possibly empty)
        // thread-local C string.
        let msg = unsafe { CStr::from_ptr(gdal_sys::CPLGetLastErrorMsg()) };
        return Err(WarpError::Failed(format!(
            "warp failed: {}",
            msg.to_string_lossy()
        )));
    }
    // SAFETY: the dataset GDALWarp returned is `dst`, still owned by the
    // caller; nothing to close.
    Ok(())
}
