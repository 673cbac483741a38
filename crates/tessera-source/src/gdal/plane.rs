//! GDAL's `RasterIO` of one Float32 band held in memory, computed here.
//!
//! A part of a DEM's level decoded by [`super::float_blocks`], wrapped in
//! a MEM dataset and read with GDAL's resampled `RasterIO`, is copied by
//! GDAL into a chunk, read a second time to make the nodata mask,
//! convolved, and copied out. [`Plane`] does the same reads on the
//! values where they lie, with GDAL 3.6's
//! arithmetic (`GDALRasterBand::IRasterIO` for nearest neighbour,
//! `RasterIOResampled` and `GDALResampleChunk32R_ConvolutionT` for
//! bilinear and cubic), so results equal the MEM path to float rounding.
//! Reads it does not reproduce (other resamplings, a request GDAL would
//! cut into several chunks) say so, and the caller keeps the MEM path.

use std::ffi::c_int;

use super::aligned::{Pixels, Sample, Window};

/// GDAL (3.6) resamples a request in one chunk when the source pixels it
/// reads are at most this many; larger requests are not reproduced here.
const MOST_CHUNK_PIXELS: i64 = 1024 * 1024;

/// One Float32 band in memory: `width` x `height` values, row after row.
pub(crate) struct Plane<'a> {
    pub values: &'a [f32],
    pub width: usize,
    pub height: usize,
    /// The band's nodata value (NaN when that is NaN).
    pub nodata: Option<f64>,
}

/// A separable resampling kernel GDAL's convolution uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kernel {
    Bilinear,
    Cubic,
}

impl Kernel {
    /// Source pixels either side of the centre, unscaled.
    fn radius(self) -> i32 {
        match self {
            Kernel::Bilinear => 1,
            Kernel::Cubic => 2,
        }
    }

    /// Whether weights can be negative (cubic): GDAL then asks for half
    /// the source pixels valid in a row.
    fn negative(self) -> bool {
        self == Kernel::Cubic
    }

    /// The weight at `x` source pixels (scaled) from the centre.
    fn weight(self, x: f64) -> f64 {
        let a = x.abs();
        match self {
            Kernel::Bilinear if a <= 1.0 => 1.0 - a,
            Kernel::Cubic if a <= 1.0 => x * x * (1.5 * a - 2.5) + 1.0,
            Kernel::Cubic if a <= 2.0 => x * x * (-0.5 * a + 2.5) - 4.0 * a + 2.0,
            _ => 0.0,
        }
    }
}

/// The weights of every output pixel along one axis: output pixel `i`
/// takes source pixels `starts[i]..starts[i] + counts[i]` (from the
/// chunk's first) with `weights[i * stride..]`.
struct Axis {
    starts: Vec<usize>,
    counts: Vec<usize>,
    stride: usize,
    weights: Vec<f64>,
}

impl Axis {
    /// Output pixel `i`'s first source pixel and weights.
    fn taps(&self, i: usize) -> (usize, &[f64]) {
        let from = i * self.stride;
        (self.starts[i], &self.weights[from..from + self.counts[i]])
    }
}

/// The weights of every output pixel `dst_from..dst_to` along one axis,
/// as GDAL computes them: `ratio` source pixels per output pixel, `delta`
/// the source offset, source pixels clipped to `chunk_from..chunk_to`.
/// With `normalise`, weights are divided by their sum (GDAL does so when
/// there is no mask).
fn axis(
    kernel: Kernel,
    ratio: f64,
    delta: f64,
    (dst_from, dst_to): (i64, i64),
    (chunk_from, chunk_to): (i64, i64),
    normalise: bool,
) -> Axis {
    let scale = 1.0 / ratio;
    let scale_weight = if scale >= 1.0 { 1.0 } else { scale };
    let radius = f64::from(kernel.radius()) / scale_weight;
    let stride = (2.0 * radius + 2.0) as usize;
    let n = usize::try_from(dst_to - dst_from).unwrap_or(0);
    let mut out = Axis {
        starts: Vec::with_capacity(n),
        counts: Vec::with_capacity(n),
        stride,
        weights: vec![0.0; n * stride],
    };
    for (i, dst) in (dst_from..dst_to).enumerate() {
        let centre = (dst as f64 + 0.5) * ratio + delta;
        let start = ((centre - radius + 0.5).floor() as i64).clamp(chunk_from, chunk_to);
        // C's conversion: towards zero; never before `start`, so a
        // pixel past the chunk has no taps rather than a bad range.
        let stop = ((centre + radius + 0.5) as i64).min(chunk_to).max(start);
        let count = usize::try_from(stop - start).unwrap_or(0).min(stride);
        let weights = &mut out.weights[i * stride..i * stride + count];
        let mut sum = 0.0;
        let mut x = scale_weight * (start as f64 - centre + 0.5);
        // GDAL sums four weights at a time, then the rest.
        let mut group = 0.0;
        for (k, w) in weights.iter_mut().enumerate() {
            *w = kernel.weight(x);
            x += scale_weight;
            group += *w;
            if k % 4 == 3 || count - k <= count % 4 {
                sum += group;
                group = 0.0;
            }
        }
        sum += group;
        if normalise && sum != 0.0 {
            let inv = 1.0 / sum;
            for w in weights.iter_mut() {
                *w *= inv;
            }
        }
        out.starts.push((start - chunk_from) as usize);
        out.counts.push(count);
    }
    out
}

impl Plane<'_> {
    /// Fills `buf` (`window.buf_width` x `window.buf_height` values) as
    /// GDAL 3.6's `RasterIO` of `window` with `extra` fills it from a MEM
    /// band holding these values; `false`, with `buf` left as it may be,
    /// when that read is not reproduced here.
    pub(crate) fn raster_io(
        &self,
        window: &Window,
        extra: &gdal_sys::GDALRasterIOExtraArg,
        buf: &mut [f32],
    ) -> bool {
        use gdal_sys::GDALRIOResampleAlg as A;
        let (bw, bh) = (as_len(window.buf_width), as_len(window.buf_height));
        let (x, y) = (as_len(window.x), as_len(window.y));
        let (w, h) = (as_len(window.width), as_len(window.height));
        if bw == 0
            || bh == 0
            || self.width == 0
            || self.height == 0
            || buf.len() < bw * bh
            || x + w > self.width
            || y + h > self.height
            || self.values.len() < self.width * self.height
        {
            return false;
        }
        // Same sizes: the MEM band copies the whole-pixel window.
        if w == bw && h == bh {
            for (row, out) in buf.chunks_exact_mut(bw).take(bh).enumerate() {
                let from = (y + row) * self.width + x;
                out.copy_from_slice(&self.values[from..from + bw]);
            }
            return true;
        }
        let float = if extra.bFloatingPointWindowValidity != 0 {
            [extra.dfXOff, extra.dfYOff, extra.dfXSize, extra.dfYSize]
        } else {
            [x as f64, y as f64, w as f64, h as f64]
        };
        match extra.eResampleAlg {
            A::GRIORA_NearestNeighbour => {
                self.nearest(float, bw, bh, buf);
                true
            }
            A::GRIORA_Bilinear => self.convolve(Kernel::Bilinear, window, float, buf),
            A::GRIORA_Cubic => self.convolve(Kernel::Cubic, window, float, buf),
            _ => false,
        }
    }

    /// `GDALRasterBand::IRasterIO`'s nearest-neighbour stepping.
    fn nearest(&self, [x0, y0, w, h]: [f64; 4], bw: usize, bh: usize, buf: &mut [f32]) {
        const EPS: f64 = 1e-10;
        let (inc_x, inc_y) = (w / bw as f64, h / bh as f64);
        let start_x = 0.5 * inc_x + x0 + EPS;
        let (last_x, last_y) = ((self.width - 1) as f64, (self.height - 1) as f64);
        for (row, out) in buf.chunks_exact_mut(bw).take(bh).enumerate() {
            let sy = (row as f64 + 0.5) * inc_y + y0 + EPS;
            let from = sy.max(0.0).min(last_y) as usize * self.width;
            let line = &self.values[from..from + self.width];
            let mut sx = start_x;
            for v in out {
                *v = line[sx.max(0.0).min(last_x) as usize];
                sx += inc_x;
            }
        }
    }

    /// `RasterIOResampled`'s convolution when the request is one chunk.
    fn convolve(&self, kernel: Kernel, window: &Window, float: [f64; 4], buf: &mut [f32]) -> bool {
        let (bw, bh) = (i64::from(window.buf_width), i64::from(window.buf_height));
        let (nx, ny) = (i64::from(window.x), i64::from(window.y));
        let (raster_w, raster_h) = (self.width as i64, self.height as i64);
        let [mut dx, mut dy, dw, dh] = float;
        let (ratio_x, ratio_y) = (dw / bw as f64, dh / bh as f64);
        // A window starting on a whole output pixel of the virtual
        // output raster is read as a part of it (GDAL's "virtual" offset).
        let virtual_offset = |off: &mut f64, n: i64, ratio: f64| {
            let dest = *off / ratio;
            let nearest = (dest + 0.5) as i64;
            if (dest - nearest as f64).abs() < 1e-8 {
                *off = n as f64;
                Some(nearest)
            } else {
                None
            }
        };
        let vx = virtual_offset(&mut dx, nx, ratio_x);
        let vy = virtual_offset(&mut dy, ny, ratio_y);
        // One chunk, as GDAL's chunking loop finds at its first step.
        let full_x = (3 + (bw as f64 * ratio_x) as i64).min(raster_w);
        let full_y = (3 + (bh as f64 * ratio_y) as i64).min(raster_h);
        if full_x * full_y > MOST_CHUNK_PIXELS {
            return false;
        }
        let radius = i64::from(kernel.radius());
        let factor = |ratio: f64| ((0.5 + ratio) as i64).max(1);
        // The source rows and columns read: the chunk and the kernel's
        // reach around it, on the raster.
        let queried = |n: i64, b: i64, ratio: f64, size: i64| {
            let off2 = (n + 1 + (b as f64 * ratio).ceil() as i64).min(size);
            let reach = radius * factor(ratio);
            let mut from = n - reach;
            let mut len = off2 - n + 2 * reach;
            if from < 0 {
                len += from;
                from = 0;
            }
            len = len.min(size - from);
            (from, len)
        };
        let (qx, qw) = queried(nx, bw, ratio_x, raster_w);
        let (qy, qh) = queried(ny, bh, ratio_y, raster_h);
        if qw <= 0 || qh <= 0 {
            return false;
        }
        let (qx_u, qy_u, qw_u, qh_u) = (qx as usize, qy as usize, qw as usize, qh as usize);
        let chunk = |row: usize| {
            let from = (qy_u + row) * self.width + qx_u;
            &self.values[from..from + qw_u]
        };
        #[allow(clippy::cast_possible_truncation, reason = "GDAL keeps it as a float")]
        let nodata = self.nodata.map(|v| v as f32);
        // The nodata mask (GDAL's, 0 or 255), or none when every pixel
        // of the chunk is valid.
        let mut mask = None;
        if let Some(nd) = nodata {
            let valid = |v: f32| {
                if nd.is_nan() {
                    !v.is_nan()
                } else {
                    !are_real_equal(v, nd)
                }
            };
            let (mut any_valid, mut any_invalid) = (false, false);
            for row in 0..qh_u {
                for &v in chunk(row) {
                    if valid(v) {
                        any_valid = true;
                    } else {
                        any_invalid = true;
                    }
                }
            }
            if !any_valid {
                buf[..(bw * bh) as usize].fill(nd);
                return true;
            }
            if any_invalid {
                let mut m = Vec::with_capacity(qw_u * qh_u);
                for row in 0..qh_u {
                    m.extend(chunk(row).iter().map(|&v| if valid(v) { 255u8 } else { 0 }));
                }
                mask = Some(m);
            }
        }
        // Each axis's weights, in coordinates relative to the window's
        // whole-pixel origin, or to the raster's with a virtual offset.
        let normalise = mask.is_none();
        let along = |virtual_dst: Option<i64>,
                     n: i64,
                     off: f64,
                     ratio: f64,
                     (q, len): (i64, i64),
                     b: i64| {
            let (origin, delta, dst) = match virtual_dst {
                Some(v) => (0, 0.0, v),
                None => (n, off - n as f64, 0),
            };
            let from = q - origin;
            axis(
                kernel,
                ratio,
                delta,
                (dst, dst + b),
                (from, from + len),
                normalise,
            )
        };
        let across = along(vx, nx, dx, ratio_x, (qx, qw), bw);
        let down = along(vy, ny, dy, ratio_y, (qy, qh), bh);
        let bw_u = bw as usize;
        // First pass: each chunk row filtered across, row after row
        // (pushed, not zeroed first: every value is written once).
        let mut filtered = Vec::with_capacity(qh_u * bw_u);
        let mut filtered_valid = vec![0u8; if mask.is_some() { qh_u * bw_u } else { 0 }];
        for row in 0..qh_u {
            let values = chunk(row);
            for col in 0..bw_u {
                let (at, weights) = across.taps(col);
                let src = &values[at..at + weights.len()];
                let Some(m) = &mask else {
                    let mut value = 0.0;
                    for (&v, &w) in src.iter().zip(weights) {
                        value += f64::from(v) * w;
                    }
                    filtered.push(value);
                    continue;
                };
                let valid = &m[row * qw_u + at..row * qw_u + at + weights.len()];
                if kernel.negative() && longest_run(valid) < weights.len() / 2 {
                    filtered.push(0.0);
                    continue;
                }
                let (mut value, mut sum) = (0.0, 0.0);
                for ((&v, &w), &ok) in src.iter().zip(weights).zip(valid) {
                    let w = w * f64::from(ok);
                    value += f64::from(v) * w;
                    sum += w;
                }
                if sum > 0.0 {
                    filtered.push(value / sum);
                    filtered_valid[row * bw_u + col] = 1;
                } else {
                    filtered.push(0.0);
                }
            }
        }
        // Second pass: down the filtered rows.
        let replace = |v: f32| replace_if_nodata(v, nodata);
        let mut sums = vec![0f64; bw_u];
        for (line, out) in buf.chunks_exact_mut(bw_u).take(bh as usize).enumerate() {
            let (first, weights) = down.taps(line);
            if mask.is_none() {
                // Row by row, each output pixel's terms in GDAL's order.
                sums.fill(0.0);
                for (k, &w) in weights.iter().enumerate() {
                    let src = &filtered[(first + k) * bw_u..(first + k + 1) * bw_u];
                    for (acc, &v) in sums.iter_mut().zip(src) {
                        *acc += v * w;
                    }
                }
                for (o, &v) in out.iter_mut().zip(&sums) {
                    *o = replace(v as f32);
                }
                continue;
            }
            for (col, o) in out.iter_mut().enumerate() {
                let (mut value, mut sum) = (0.0, 0.0);
                let (mut run, mut longest) = (0, 0);
                for (k, &w) in weights.iter().enumerate() {
                    let i = (first + k) * bw_u + col;
                    let ok = filtered_valid[i];
                    run = if ok == 0 { 0 } else { run + 1 };
                    longest = longest.max(run);
                    let w = w * f64::from(ok);
                    value += filtered[i] * w;
                    sum += w;
                }
                *o = if kernel.negative() && longest < weights.len() / 2 {
                    nodata.unwrap_or(0.0)
                } else if sum > 0.0 {
                    replace((value / sum) as f32)
                } else {
                    nodata.unwrap_or(0.0)
                };
            }
        }
        true
    }
}

impl Pixels for Plane<'_> {
    fn read<T: Sample>(
        &self,
        window: &Window,
        buf: &mut [T],
        band_map: &mut [c_int],
        extra: &mut gdal_sys::GDALRasterIOExtraArg,
    ) -> Result<bool, String> {
        Ok(match T::as_f32(buf) {
            Some(values) if band_map == [1] => self.raster_io(window, extra, values),
            _ => false,
        })
    }

    fn free_of(&self, window: &Window, nodata: f32) -> bool {
        let (x0, y0) = (as_len(window.x), as_len(window.y));
        let x1 = (x0 + as_len(window.width)).min(self.width);
        let y1 = (y0 + as_len(window.height)).min(self.height);
        if x0 >= x1 || y0 >= y1 {
            return true;
        }
        // Whole rows at a time, no early exit: the comparisons vectorise.
        #[allow(
            clippy::float_cmp,
            clippy::needless_bitwise_bool,
            reason = "the value GDAL would copy, bit for bit; `|`, not `||`, so the loop has no branch"
        )]
        let held = |row: &[f32]| {
            if nodata.is_nan() {
                row.iter().fold(false, |any, v| any | v.is_nan())
            } else {
                row.iter().fold(false, |any, &v| any | (v == nodata))
            }
        };
        !(y0..y1).any(|y| held(&self.values[y * self.width + x0..y * self.width + x1]))
    }
}

/// A `c_int` size or offset GDAL was given, as an index (negative: 0).
fn as_len(v: c_int) -> usize {
    usize::try_from(v).unwrap_or(0)
}

/// The longest run of valid (non-zero) entries.
fn longest_run(valid: &[u8]) -> usize {
    let (mut run, mut best) = (0, 0);
    for &v in valid {
        if v == 0 {
            run = 0;
        } else {
            run += 1;
            best = best.max(run);
        }
    }
    best
}

/// GDAL's `ARE_REAL_EQUAL` for floats: equal, or within two units of
/// float precision of their sum.
fn are_real_equal(a: f32, b: f32) -> bool {
    #[allow(clippy::float_cmp, reason = "GDAL's comparison, exact first")]
    let same = a == b;
    same || (a - b).abs() < f32::EPSILON * (a + b).abs() * 2.0
}

/// A resampled value as GDAL writes it into a band with `nodata`: clamped
/// to finite floats, and moved off the nodata value when it lands on it.
fn replace_if_nodata(v: f32, nodata: Option<f32>) -> f32 {
    let Some(nd) = nodata else {
        return v;
    };
    // NaN stays NaN.
    let clamped = v.clamp(-f32::MAX, f32::MAX);
    #[allow(clippy::float_cmp, reason = "GDAL's test, bit for bit")]
    if clamped == nd {
        if nd == 0.0 {
            return f32::MIN_POSITIVE;
        }
        #[allow(clippy::cast_possible_truncation, reason = "GDAL's float")]
        return (f64::from(nd) + 1e-7 * f64::from(nd)) as f32;
    }
    clamped
}

#[cfg(test)]
mod tests {
    use super::*;
    use gdal::DriverManager;
    use gdal::raster::Buffer;

    const W: usize = 300;
    const H: usize = 280;

    /// A smooth surface with holes of `nodata` where it has one.
    fn values(nodata: Option<f32>) -> Vec<f32> {
        let mut seed = 0x9e37_79b9_u32;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            seed
        };
        let mut v: Vec<f32> = (0..W * H)
            .map(|i| {
                let (x, y) = ((i % W) as f32, (i / W) as f32);
                1000.0 + 300.0 * (x / 17.0).sin() * (y / 23.0).cos() + (next() % 100) as f32
            })
            .collect();
        if let Some(nd) = nodata {
            // Holes of every size, and a band of nothing at the bottom.
            for _ in 0..40 {
                let (x, y, s) = (
                    next() as usize % W,
                    next() as usize % H,
                    next() as usize % 9,
                );
                for yy in y..(y + s + 1).min(H) {
                    for xx in x..(x + s + 1).min(W) {
                        v[yy * W + xx] = nd;
                    }
                }
            }
            v[(H - 30) * W..].fill(nd);
        }
        v
    }

    fn mem(values: &[f32], nodata: Option<f32>) -> gdal::Dataset {
        let driver = DriverManager::get_driver_by_name("MEM").expect("MEM driver");
        let ds = driver
            .create_with_band_type::<f32, _>("", W, H, 1)
            .expect("MEM dataset");
        let mut band = ds.rasterband(1).expect("band");
        let mut buf = Buffer::new((W, H), values.to_vec());
        band.write((0, 0), (W, H), &mut buf).expect("write");
        if let Some(nd) = nodata {
            band.set_no_data_value(Some(f64::from(nd))).expect("nodata");
        }
        ds
    }

    fn extra(
        alg: gdal_sys::GDALRIOResampleAlg::Type,
        w: [f64; 4],
    ) -> gdal_sys::GDALRasterIOExtraArg {
        let whole = w.iter().all(|v| v.fract() == 0.0);
        gdal_sys::GDALRasterIOExtraArg {
            nVersion: 1,
            eResampleAlg: alg,
            pfnProgress: None,
            pProgressData: std::ptr::null_mut(),
            bFloatingPointWindowValidity: c_int::from(!whole),
            dfXOff: w[0],
            dfYOff: w[1],
            dfXSize: w[2],
            dfYSize: w[3],
        }
    }

    fn window(w: [f64; 4], bw: c_int, bh: c_int) -> Window {
        let (x0, y0) = (w[0].floor(), w[1].floor());
        Window {
            x: x0 as c_int,
            y: y0 as c_int,
            width: ((w[0] + w[2]).ceil().min(W as f64) - x0).max(1.0) as c_int,
            height: ((w[1] + w[3]).ceil().min(H as f64) - y0).max(1.0) as c_int,
            buf_width: bw,
            buf_height: bh,
        }
    }

    #[test]
    fn reads_are_gdals_own_on_a_mem_band() {
        use gdal_sys::GDALRIOResampleAlg as A;
        // Windows: whole and fractional, enlarged and shrunk (up to the
        // 3.5 a coarsest overview leaves), at edges and over nothing.
        let windows: [([f64; 4], c_int, c_int); 9] = [
            ([10.0, 12.0, 256.0, 256.0], 256, 256),
            ([0.0, 0.0, 128.0, 128.0], 256, 256),
            ([3.25, 7.75, 200.5, 180.25], 256, 256),
            ([0.0, 0.0, 300.0, 280.0], 100, 77),
            ([40.6, 31.1, 97.3, 97.3], 256, 256),
            ([150.0, 200.0, 150.0, 80.0], 64, 40),
            ([1.5, 2.5, 290.0, 270.0], 83, 83),
            ([0.0, 255.0, 60.0, 25.0], 128, 53),
            ([100.125, 0.0, 199.875, 279.5], 512, 512),
        ];
        let nodatas = [None, Some(-9999.0), Some(0.0), Some(f32::NAN)];
        let mut compared = 0;
        for nodata in nodatas {
            let v = values(nodata);
            let ds = mem(&v, nodata);
            let plane = Plane {
                values: &v,
                width: W,
                height: H,
                nodata: nodata.map(f64::from),
            };
            for (w, bw, bh) in windows {
                for alg in [
                    A::GRIORA_NearestNeighbour,
                    A::GRIORA_Bilinear,
                    A::GRIORA_Cubic,
                ] {
                    let win = window(w, bw, bh);
                    let n = (bw * bh) as usize;
                    let (mut want, mut got) = (vec![0f32; n], vec![0f32; n]);
                    let mut e = extra(alg, w);
                    assert!(
                        ds.read(&win, &mut want, &mut [1], &mut e)
                            .expect("GDAL read")
                    );
                    assert!(
                        plane.raster_io(&win, &e, &mut got),
                        "{w:?} {bw}x{bh} {alg} not reproduced"
                    );
                    for (i, (a, b)) in want.iter().zip(&got).enumerate() {
                        let same = (a.is_nan() && b.is_nan()) || (a - b).abs() <= 1e-3;
                        assert!(
                            same,
                            "nodata {nodata:?}, {w:?} {bw}x{bh} alg {alg}, pixel {i}: GDAL {a}, here {b}"
                        );
                    }
                    compared += 1;
                }
            }
        }
        assert_eq!(compared, 4 * 9 * 3);
    }

    #[test]
    fn a_window_is_free_of_nodata_exactly_when_its_pixels_hold_none() {
        for nodata in [-9999.0, 0.0, f32::NAN] {
            let v = values(Some(nodata));
            let plane = Plane {
                values: &v,
                width: W,
                height: H,
                nodata: Some(f64::from(nodata)),
            };
            let is_nodata =
                |x: f32| x.to_bits() == nodata.to_bits() || (nodata.is_nan() && x.is_nan());
            let (mut free, mut held) = (0, 0);
            for (x, y, w, h) in [
                (0, 0, W, H),
                (0, H - 30, W, 30),
                (5, 5, 3, 3),
                (250, 0, 100, 20),
            ]
            .into_iter()
            .chain((0..60).map(|i| ((i * 37) % 280, (i * 53) % 240, 2 + i % 19, 2 + i % 23)))
            {
                let win = Window {
                    x: x as c_int,
                    y: y as c_int,
                    width: w as c_int,
                    height: h as c_int,
                    buf_width: 1,
                    buf_height: 1,
                };
                let (x1, y1) = ((x + w).min(W), (y + h).min(H));
                let holds =
                    (y..y1).any(|yy| v[yy * W + x..yy * W + x1].iter().any(|&p| is_nodata(p)));
                assert_eq!(
                    plane.free_of(&win, nodata),
                    !holds,
                    "{nodata} at {x},{y} {w}x{h}"
                );
                if holds { held += 1 } else { free += 1 }
            }
            // Both answers were asked for.
            assert!(free > 5 && held > 5, "{nodata}: {free} free, {held} held");
        }
    }

    #[test]
    fn a_read_gdal_cuts_in_chunks_is_left_to_it() {
        // 1100 x 1100 source pixels for one tile: more than GDAL reads in
        // one chunk.
        let v = vec![1.0f32; 1100 * 1100];
        let plane = Plane {
            values: &v,
            width: 1100,
            height: 1100,
            nodata: None,
        };
        let win = Window {
            x: 0,
            y: 0,
            width: 1100,
            height: 1100,
            buf_width: 256,
            buf_height: 256,
        };
        let w = [0.0, 0.0, 1100.0, 1100.0];
        let mut buf = vec![0f32; 256 * 256];
        let e = extra(gdal_sys::GDALRIOResampleAlg::GRIORA_Bilinear, w);
        assert!(!plane.raster_io(&win, &e, &mut buf));
        // A resampling not reproduced.
        let e = extra(gdal_sys::GDALRIOResampleAlg::GRIORA_Lanczos, w);
        assert!(!plane.raster_io(
            &Window {
                width: 300,
                height: 300,
                ..win
            },
            &e,
            &mut buf
        ));
        // The same window in fewer pixels is one chunk.
        let e = extra(gdal_sys::GDALRIOResampleAlg::GRIORA_Bilinear, w);
        assert!(plane.raster_io(
            &Window {
                width: 900,
                height: 900,
                ..win
            },
            &e,
            &mut buf
        ));
    }
}
