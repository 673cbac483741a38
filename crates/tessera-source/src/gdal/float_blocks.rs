//! Float32 blocks of a tiled TIFF decoded here rather than by libtiff, the
//! tile still resampled by GDAL.
//!
//! A DEM is most often a tiled TIFF of one Float32 band, DEFLATE or LZW,
//! with the floating-point predictor (`PREDICTOR=3`). libtiff (4.5, the
//! one Debian 12's GDAL uses) undoes that predictor a byte at a time
//! through memory, which is about as long as inflating the block; a cold
//! elevation tile spends most of its time there. Here a block is inflated
//! with libdeflate (LZW with `weezl`), its predictor undone with SIMD
//! prefix sums, and kept decoded in one cache shared by every thread and
//! source (GDAL's block cache is per dataset handle), bounded by
//! `gdal.decoded_blocks_mb`.
//!
//! What a read returns is GDAL's: the level GDAL's resampled `RasterIO`
//! would choose (its rule, [`level_for`]) is found here, the part of it the
//! resampling kernel reaches is gathered from the blocks, and the same
//! [`AlignedGrid`] read runs on it, its `RasterIO` calls done by
//! [`Plane`] with GDAL's arithmetic (or, for the reads it does not
//! reproduce, by GDAL on an in-memory dataset over the part), so
//! resampling, nodata and validity are the GDAL path's to float rounding.
//! Anything else (other types, several bands, other codecs, a part too
//! large to hold) keeps the GDAL path.

use std::cell::RefCell;
use std::ffi::{CString, c_int};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, OnceLock, PoisonError};

use rayon::iter::{IntoParallelRefIterator, ParallelIterator};

use gdal::Dataset;
use tessera_image::Raster;

use super::aligned::{AlignedGrid, Window};
use super::cog::Blocks;
use super::plane::Plane;
use super::tiff::Directory;
use crate::warp::Resampling;
use crate::{SourceInfo, WindowRequest};

/// TIFF compression codes decoded here.
const NONE: u64 = 1;
const LZW: u64 = 5;
const DEFLATE: u64 = 8;
const DEFLATE_OLD: u64 = 32946;
/// Largest block decoded here, in pixels (4096 x 4096).
const MOST_BLOCK_PIXELS: u64 = 4096 * 4096;
/// Largest part of a level put in memory for one read, in pixels; a read
/// reaching further (a source without overviews seen whole) keeps GDAL's
/// path.
const MOST_PART_PIXELS: usize = 4096 * 4096;
/// GDAL (3.6) reads an overview when it is at most this much coarser than
/// the request (`GDALBandGetBestOverviewLevel2`).
const OVERVIEW_SLACK: f64 = 1.2;

/// Decoded blocks by (source, level, block), least recently used first
/// out.
static DECODED: LazyLock<Mutex<Decoded>> = LazyLock::new(|| {
    Mutex::new(Decoded {
        blocks: lru::LruCache::unbounded(),
        bytes: 0,
    })
});
/// Numbers that tell sources apart in the cache.
static NEXT_ID: AtomicUsize = AtomicUsize::new(1);
/// The threads blocks are decoded on when a read needs several, made at
/// the first such read; `None` for one thread.
static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
/// Part buffers larger than this (values) are not kept for the next read.
const KEPT_PART: usize = 1 << 22;

thread_local! {
    /// The inflated bytes of the block being decoded.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// The part of a level one read resamples.
    static PART: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// The pool of `gdal.threads` threads (0: one per core) a read's blocks
/// are decoded on; `None` when that is one thread.
fn pool() -> Option<&'static rayon::ThreadPool> {
    POOL.get_or_init(|| {
        let threads = match crate::settings::decoding().1 {
            0 => std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
            n => n,
        };
        if threads < 2 {
            return None;
        }
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("tessera-decode-{i}"))
            .build()
            .inspect_err(|e| tracing::warn!(error = %e, "no threads to decode blocks on; decoding on the reading thread"))
            .ok()
    })
    .as_ref()
}

type Key = (usize, usize, usize);

struct Decoded {
    blocks: lru::LruCache<Key, Arc<[f32]>>,
    bytes: usize,
}

impl Decoded {
    fn insert(&mut self, key: Key, block: Arc<[f32]>) {
        // `gdal.decoded_blocks_mb`; blocks past it are dropped here.
        let budget = crate::settings::decoding().0;
        let size = block.len() * 4;
        if size > budget {
            return;
        }
        if let Some(old) = self.blocks.put(key, block) {
            self.bytes -= old.len() * 4;
        }
        self.bytes += size;
        while self.bytes > budget {
            match self.blocks.pop_lru() {
                Some((_, gone)) => self.bytes -= gone.len() * 4,
                None => break,
            }
        }
    }
}

/// One level of the file as this module reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Level {
    width: usize,
    height: usize,
    block_width: usize,
    block_height: usize,
    across: usize,
    compression: u64,
    predictor: u64,
    little_endian: bool,
}

/// A part of a level: `width` x `height` pixels from column `x`, row `y`.
#[derive(Debug, Clone, Copy)]
struct Part {
    level: usize,
    x: usize,
    y: usize,
    width: usize,
    height: usize,
}

/// What one read asks, and how it is resampled.
struct Ask<'a, 'r> {
    grid: &'a AlignedGrid,
    req: &'a WindowRequest<'r>,
    info: &'a SourceInfo,
    resampling: Resampling,
}

/// The levels of a TIFF whose blocks are decoded here.
#[derive(Debug)]
pub(crate) struct FloatLevels {
    /// This source's number in the shared cache.
    id: usize,
    levels: Vec<Level>,
    /// The levels' sizes, for [`level_for`].
    sizes: Vec<(usize, usize)>,
    /// What a block never written (sparse) reads as: the nodata value,
    /// else 0, as GDAL reads it.
    empty: f32,
}

impl FloatLevels {
    /// The levels of `blocks` when every one can be decoded here (one
    /// Float32 sample, tiled, uncompressed, DEFLATE or LZW, any
    /// predictor), read as `grid` reads the raster; else why not.
    pub(crate) fn of(blocks: &Blocks, grid: &AlignedGrid) -> Result<FloatLevels, String> {
        if grid.bands() != 1 || grid.has_alpha() {
            return Err("not one band".into());
        }
        let mut levels = Vec::with_capacity(blocks.level_count());
        for i in 0..blocks.level_count() {
            let d = blocks.level(i).ok_or("a level that is not a tiled image")?;
            levels.push(Level::of(d)?);
        }
        if levels.is_empty() {
            return Err("no levels".into());
        }
        // GDAL writes the nodata value as the buffer's type holds it.
        #[allow(clippy::cast_possible_truncation, reason = "an f32 band's value")]
        let empty = grid.nodata().map_or(0.0, |v| v as f32);
        Ok(FloatLevels {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            sizes: levels.iter().map(|l| (l.width, l.height)).collect(),
            levels,
            empty,
        })
    }

    /// Reads `req` as [`AlignedGrid::read`] reads it from the file, from
    /// blocks decoded here; `None` when the read is better left to GDAL
    /// (it misses the raster, or reaches too much of a level).
    pub(crate) fn read(
        &self,
        blocks: &Blocks,
        grid: &AlignedGrid,
        req: &WindowRequest<'_>,
        info: &SourceInfo,
        resampling: Resampling,
    ) -> Option<Result<Raster, String>> {
        let window = grid.source_window(req)?;
        let index = level_for(&self.sizes, &window.window);
        let level = &self.levels[index];
        let full = &self.levels[0];
        // GDAL scales the window by the ratio of the levels' sizes.
        let rx = full.width as f64 / level.width as f64;
        let ry = full.height as f64 / level.height as f64;
        let (x0, x1) = (window.x0 / rx, window.x1 / rx);
        let (y0, y1) = (window.y0 / ry, window.y1 / ry);
        // Level pixels the kernel reaches, scaled when shrinking.
        let radius = kernel_radius(resampling);
        let reach_x = radius * ((x1 - x0) / window.place.bx as f64).max(1.0) + 2.0;
        let reach_y = radius * ((y1 - y0) / window.place.by as f64).max(1.0) + 2.0;
        let clamp = |v: f64, size: usize| v.clamp(0.0, size as f64) as usize;
        let (px0, px1) = (
            clamp((x0 - reach_x).floor(), level.width),
            clamp((x1 + reach_x).ceil(), level.width),
        );
        let (py0, py1) = (
            clamp((y0 - reach_y).floor(), level.height),
            clamp((y1 + reach_y).ceil(), level.height),
        );
        let (pw, ph) = (px1 - px0, py1 - py0);
        if pw == 0 || ph == 0 || pw * ph > MOST_PART_PIXELS {
            return None;
        }
        let part = Part {
            level: index,
            x: px0,
            y: py0,
            width: pw,
            height: ph,
        };
        let ask = Ask {
            grid,
            req,
            info,
            resampling,
        };
        Some(self.read_part(blocks, part, &ask))
    }

    /// Reads `ask` from `part` put in memory.
    fn read_part(&self, blocks: &Blocks, part: Part, ask: &Ask<'_, '_>) -> Result<Raster, String> {
        let level = &self.levels[part.level];
        let (bw, bh) = (level.block_width, level.block_height);
        let (px, py, pw, ph) = (part.x, part.y, part.width, part.height);
        let (rows, cols) = (
            py / bh..(py + ph).div_ceil(bh),
            px / bw..(px + pw).div_ceil(bw),
        );
        let indices: Vec<usize> = rows
            .flat_map(|row| cols.clone().map(move |col| row * level.across + col))
            .collect();
        let decoded = self.blocks(blocks, part.level, &indices)?;
        let across = cols.len();
        PART.with(|kept| {
            let mut pixels = kept.borrow_mut();
            pixels.clear();
            pixels.reserve(pw * ph);
            // Row after row of the part, each from the blocks it crosses.
            for y in py..py + ph {
                let row = y / bh - py / bh;
                let in_block = y % bh;
                for (i, col) in cols.clone().enumerate() {
                    let block = &decoded[row * across + i];
                    let bx0 = col * bw;
                    let (x_from, x_to) = (bx0.max(px), (bx0 + bw).min(px + pw));
                    let src = in_block * bw + (x_from - bx0);
                    pixels.extend_from_slice(&block[src..src + (x_to - x_from)]);
                }
            }
            let read = self.resample(&mut pixels, part, ask);
            if pixels.capacity() > KEPT_PART {
                *pixels = Vec::new();
            }
            read
        })
    }

    /// Reads `ask` from `pixels`, those of `part`: in place ([`Plane`]),
    /// else through GDAL on an in-memory dataset over them.
    fn resample(
        &self,
        pixels: &mut [f32],
        part: Part,
        ask: &Ask<'_, '_>,
    ) -> Result<Raster, String> {
        let level = &self.levels[part.level];
        let (px, py, pw, ph) = (part.x, part.y, part.width, part.height);
        let grid = ask.grid;
        let full = &self.levels[0];
        let gt = grid.geo_transform();
        let (sx, sy) = (
            gt[1] * full.width as f64 / level.width as f64,
            gt[5] * full.height as f64 / level.height as f64,
        );
        let part_gt = [
            gt[0] + px as f64 * sx,
            sx,
            0.0,
            gt[3] + py as f64 * sy,
            0.0,
            sy,
        ];
        let part_grid = grid.with_pixels(part_gt, pw, ph);
        let plane = Plane {
            values: pixels,
            width: pw,
            height: ph,
            nodata: grid.nodata(),
        };
        if let Some(raster) = part_grid.read_from(&plane, ask.req, ask.info, ask.resampling)? {
            return Ok(raster);
        }
        let ds = MemView::new(pixels, pw, ph, part_gt, grid.nodata())?;
        part_grid.read(ds.dataset(), ask.req, ask.info, ask.resampling)
    }

    /// Blocks `indices` of level `level`, decoded: from the cache where
    /// they are, the others decoded (on several threads when there are
    /// several) and put in it.
    fn blocks(
        &self,
        blocks: &Blocks,
        level: usize,
        indices: &[usize],
    ) -> Result<Vec<Arc<[f32]>>, String> {
        let mut found: Vec<Option<Arc<[f32]>>> = {
            let mut cache = DECODED.lock().unwrap_or_else(PoisonError::into_inner);
            indices
                .iter()
                .map(|&i| cache.blocks.get(&(self.id, level, i)).map(Arc::clone))
                .collect()
        };
        let missing: Vec<usize> = indices
            .iter()
            .zip(&found)
            .filter(|(_, f)| f.is_none())
            .map(|(&i, _)| i)
            .collect();
        let decode = |&i: &usize| self.decode_block(blocks, level, i);
        let decoded: Vec<Arc<[f32]>> = match pool() {
            Some(pool) if missing.len() > 1 => pool.install(|| {
                missing
                    .par_iter()
                    .map(decode)
                    .collect::<Result<Vec<_>, String>>()
            })?,
            _ => missing.iter().map(decode).collect::<Result<_, _>>()?,
        };
        let mut cache = DECODED.lock().unwrap_or_else(PoisonError::into_inner);
        let mut fresh = missing.iter().zip(decoded);
        for slot in &mut found {
            if slot.is_none()
                && let Some((&i, block)) = fresh.next()
            {
                cache.insert((self.id, level, i), Arc::clone(&block));
                *slot = Some(block);
            }
        }
        drop(cache);
        found
            .into_iter()
            .map(|b| b.ok_or_else(|| "a block went missing".to_string()))
            .collect()
    }

    /// Block `index` of level `level`, read and decoded.
    fn decode_block(
        &self,
        blocks: &Blocks,
        level: usize,
        index: usize,
    ) -> Result<Arc<[f32]>, String> {
        let d = blocks
            .level(level)
            .ok_or_else(|| format!("level {level} is gone"))?;
        let l = &self.levels[level];
        let pixels = l.block_width * l.block_height;
        let (offset, len) = (
            d.offsets.get(index).copied().unwrap_or(0),
            d.counts.get(index).copied().unwrap_or(0),
        );
        if offset == 0 || len == 0 {
            return Ok(vec![self.empty; pixels].into());
        }
        let len = usize::try_from(len).map_err(|_| "a block of more bytes than memory")?;
        let raw = blocks.read_block(offset, len)?;
        l.decode(&raw)
            .map_err(|e| format!("block {index} of level {level}: {e}"))
    }
}

impl Level {
    fn of(d: &Directory) -> Result<Level, String> {
        let (bw, bh) = d.block.ok_or("not tiled")?;
        if d.samples != 1 || d.bits != 32 || d.sample_format != 3 {
            return Err("not one Float32 sample".into());
        }
        if !matches!(d.compression, NONE | LZW | DEFLATE | DEFLATE_OLD) {
            return Err(format!("compression {}", d.compression));
        }
        // Big-endian files with the floating-point predictor: libtiff 4.5
        // reads what GDAL 3.6 writes as nonsense; GDAL keeps them, so
        // they read as GDAL reads them.
        if !matches!(d.predictor, 1..=3) || (d.predictor == 3 && !d.little_endian) {
            return Err(format!("predictor {}", d.predictor));
        }
        if bw == 0 || bh == 0 || bw.saturating_mul(bh) > MOST_BLOCK_PIXELS {
            return Err(format!("blocks of {bw} x {bh} pixels"));
        }
        let blocks = d.blocks_across() * d.height.div_ceil(bh);
        if d.offsets.len() as u64 != blocks || d.counts.len() as u64 != blocks {
            return Err("block tables of another length than the blocks".into());
        }
        let size = |v: u64| usize::try_from(v).map_err(|_| "a level larger than memory");
        Ok(Level {
            width: size(d.width)?,
            height: size(d.height)?,
            block_width: size(bw)?,
            block_height: size(bh)?,
            across: size(d.blocks_across())?,
            compression: d.compression,
            predictor: d.predictor,
            little_endian: d.little_endian,
        })
    }

    /// The pixels of a block stored as `raw`.
    fn decode(&self, raw: &[u8]) -> Result<Arc<[f32]>, String> {
        SCRATCH.with(|scratch| {
            let mut bytes = scratch.borrow_mut();
            let pixels = self.block_width * self.block_height;
            // Every byte is written below (or the block refused): no need
            // to clear what the last block left.
            bytes.resize(pixels * 4, 0);
            let result = self.decode_into(raw, &mut bytes);
            if bytes.capacity() > KEPT_PART {
                *bytes = Vec::new();
            }
            result
        })
    }

    fn decode_into(&self, raw: &[u8], bytes: &mut [u8]) -> Result<Arc<[f32]>, String> {
        let pixels = self.block_width * self.block_height;
        let got = match self.compression {
            NONE => {
                let n = raw.len().min(bytes.len());
                bytes[..n].copy_from_slice(&raw[..n]);
                n
            }
            DEFLATE | DEFLATE_OLD => inflate(raw, bytes)?,
            _ => unlzw(raw, bytes)?,
        };
        if got != bytes.len() {
            return Err(format!("{got} bytes where the block has {}", bytes.len()));
        }
        // Decoded straight into the allocation the cache shares.
        let mut shared = zeroed(pixels);
        let out = Arc::get_mut(&mut shared).ok_or("a block shared before it was decoded")?;
        let row_bytes = self.block_width * 4;
        for (row, values) in bytes
            .chunks_exact_mut(row_bytes)
            .zip(out.chunks_exact_mut(self.block_width))
        {
            match self.predictor {
                3 => undo_float_predictor(row, values),
                2 => {
                    let mut acc = 0u32;
                    for (v, b) in values.iter_mut().zip(row.chunks_exact(4)) {
                        acc = acc.wrapping_add(self.word(b));
                        *v = f32::from_bits(acc);
                    }
                }
                _ => {
                    for (v, b) in values.iter_mut().zip(row.chunks_exact(4)) {
                        *v = f32::from_bits(self.word(b));
                    }
                }
            }
        }
        Ok(shared)
    }

    /// Four bytes of the file as a number.
    fn word(&self, b: &[u8]) -> u32 {
        let b = [b[0], b[1], b[2], b[3]];
        if self.little_endian {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        }
    }
}

/// `n` zeros in one allocation, to be written before it is shared.
fn zeroed(n: usize) -> Arc<[f32]> {
    // SAFETY: all-zero bits are the float 0.0, a valid f32.
    unsafe { Arc::<[f32]>::new_zeroed_slice(n).assume_init() }
}

/// Inflates the zlib stream `raw` into `out`; the bytes written.
fn inflate(raw: &[u8], out: &mut [u8]) -> Result<usize, String> {
    thread_local! {
        static INFLATER: std::cell::RefCell<libdeflater::Decompressor> =
            std::cell::RefCell::new(libdeflater::Decompressor::new());
    }
    INFLATER.with(|d| {
        d.borrow_mut()
            .zlib_decompress(raw, out)
            .map_err(|e| format!("DEFLATE: {e}"))
    })
}

/// Decodes TIFF's LZW stream `raw` into `out`; the bytes written.
fn unlzw(raw: &[u8], out: &mut [u8]) -> Result<usize, String> {
    let mut lzw = weezl::decode::Decoder::with_tiff_size_switch(weezl::BitOrder::Msb, 8);
    let (mut read, mut written) = (0, 0);
    while written < out.len() {
        let step = lzw.decode_bytes(&raw[read..], &mut out[written..]);
        read += step.consumed_in;
        written += step.consumed_out;
        match step.status.map_err(|e| format!("LZW: {e}"))? {
            weezl::LzwStatus::Ok if step.consumed_in + step.consumed_out > 0 => {}
            _ => break,
        }
    }
    Ok(written)
}

/// Undoes TIFF's floating-point predictor on one row of a block: the
/// bytes were differenced one after the other, after the row's values were
/// cut into planes of their bytes, most significant plane first.
/// `values` gets the row's values.
fn undo_float_predictor(row: &mut [u8], values: &mut [f32]) {
    prefix_sums(row);
    let w = values.len();
    let (p0, rest) = row.split_at(w);
    let (p1, rest) = rest.split_at(w);
    let (p2, p3) = rest.split_at(w);
    for (j, v) in values.iter_mut().enumerate() {
        *v = f32::from_bits(u32::from_be_bytes([p0[j], p1[j], p2[j], p3[j]]));
    }
}

/// Replaces each byte with the sum (mod 256) of it and those before it.
fn prefix_sums(bytes: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    let bytes = prefix_sums_sse2(bytes);
    let mut acc = 0u8;
    for b in bytes {
        acc = acc.wrapping_add(*b);
        *b = acc;
    }
}

/// [`prefix_sums`] of the whole 16-byte runs of `bytes`, sixteen at a
/// time; the rest of `bytes` to finish, its first byte already holding
/// the sum so far.
#[cfg(target_arch = "x86_64")]
fn prefix_sums_sse2(bytes: &mut [u8]) -> &mut [u8] {
    use std::arch::x86_64::{
        __m128i, _mm_add_epi8, _mm_extract_epi16, _mm_loadu_si128, _mm_set1_epi8,
        _mm_setzero_si128, _mm_slli_si128, _mm_storeu_si128,
    };
    let whole = bytes.len() / 16 * 16;
    let (runs, rest) = bytes.split_at_mut(whole);
    let mut last = 0u8;
    // SAFETY: SSE2 is part of every x86_64 target; each load and store
    // is of 16 bytes inside `runs` (chunks of exactly 16), unaligned
    // access allowed by these intrinsics.
    #[allow(
        clippy::cast_ptr_alignment,
        reason = "_mm_loadu_si128 and _mm_storeu_si128 take unaligned pointers"
    )]
    unsafe {
        let mut carry = _mm_setzero_si128();
        for run in runs.chunks_exact_mut(16) {
            let mut x = _mm_loadu_si128(run.as_ptr().cast::<__m128i>());
            x = _mm_add_epi8(x, _mm_slli_si128::<1>(x));
            x = _mm_add_epi8(x, _mm_slli_si128::<2>(x));
            x = _mm_add_epi8(x, _mm_slli_si128::<4>(x));
            x = _mm_add_epi8(x, _mm_slli_si128::<8>(x));
            x = _mm_add_epi8(x, carry);
            _mm_storeu_si128(run.as_mut_ptr().cast::<__m128i>(), x);
            // The run's last byte, carried into every byte of the next.
            #[allow(
                clippy::cast_possible_truncation,
                reason = "the high byte of a 16-bit lane"
            )]
            {
                last = (_mm_extract_epi16::<7>(x) >> 8) as u8;
            }
            carry = _mm_set1_epi8(last.cast_signed());
        }
    }
    if let Some(first) = rest.first_mut() {
        *first = first.wrapping_add(last);
    }
    rest
}

/// The level GDAL's resampled `RasterIO` reads `window` from, of levels
/// of `sizes` (width, height; the full resolution first): the coarsest
/// overview at most [`OVERVIEW_SLACK`] times coarser than the request, on
/// the least reduced axis, when the request shrinks the window on both
/// axes; else the full resolution (0).
pub(super) fn level_for(sizes: &[(usize, usize)], w: &Window) -> usize {
    if !(w.buf_width < w.width && w.buf_height < w.height) {
        return 0;
    }
    let (x, y) = (f64::from(w.width), f64::from(w.height));
    let (bx, by) = (f64::from(w.buf_width), f64::from(w.buf_height));
    let desired = if x / bx < y / by || w.buf_height == 1 {
        x / bx
    } else {
        y / by
    };
    let (full_width, full_height) = sizes[0];
    let (mut best, mut best_resolution) = (0, 0.0);
    for (i, &(width, height)) in sizes.iter().enumerate().skip(1) {
        if width > full_width || height > full_height {
            continue;
        }
        let rx = full_width as f64 / width as f64;
        let ry = full_height as f64 / height as f64;
        let resolution = if rx < ry { rx } else { ry };
        if resolution >= desired * OVERVIEW_SLACK || resolution <= best_resolution {
            continue;
        }
        best = i;
        best_resolution = resolution;
    }
    best
}

/// How far the resampling's kernel reaches, in source pixels at scale 1.
fn kernel_radius(resampling: Resampling) -> f64 {
    match resampling {
        Resampling::Nearest | Resampling::Bilinear | Resampling::Average | Resampling::Mode => 1.0,
        Resampling::Cubic | Resampling::Cubicspline => 2.0,
        Resampling::Lanczos => 3.0,
    }
}

/// An in-memory GDAL dataset over a buffer of `f32` it borrows.
struct MemView<'a> {
    ds: Dataset,
    _pixels: std::marker::PhantomData<&'a mut [f32]>,
}

impl<'a> MemView<'a> {
    fn new(
        pixels: &'a mut [f32],
        width: usize,
        height: usize,
        gt: [f64; 6],
        nodata: Option<f64>,
    ) -> Result<MemView<'a>, String> {
        if pixels.len() != width * height {
            return Err(format!(
                "{} values for {width} x {height} pixels",
                pixels.len()
            ));
        }
        let (w, h) = (
            c_int::try_from(width).map_err(|_| "a part too wide")?,
            c_int::try_from(height).map_err(|_| "a part too tall")?,
        );
        let options = [
            CString::new(format!("DATAPOINTER={:p}", pixels.as_mut_ptr())),
            CString::new("PIXELOFFSET=4"),
            CString::new(format!("LINEOFFSET={}", width * 4)),
        ]
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
        let mut list: Vec<*mut std::ffi::c_char> =
            options.iter().map(|o| o.as_ptr().cast_mut()).collect();
        list.push(std::ptr::null_mut());
        // SAFETY: the MEM driver is registered with every driver; the
        // dataset is created without bands, then given one over `pixels`
        // (`width * height` f32s, checked above), which outlive it: the
        // view borrows them for its lifetime and closes the dataset on
        // drop. The option strings outlive the call.
        unsafe {
            let driver = gdal_sys::GDALGetDriverByName(c"MEM".as_ptr());
            if driver.is_null() {
                return Err("GDAL's MEM driver is missing".into());
            }
            let ds = gdal_sys::GDALCreate(
                driver,
                c"".as_ptr(),
                w,
                h,
                0,
                gdal_sys::GDALDataType::GDT_Float32,
                std::ptr::null_mut(),
            );
            if ds.is_null() {
                return Err("cannot create an in-memory dataset".into());
            }
            let ds = Dataset::from_c_dataset(ds);
            let added = gdal_sys::GDALAddBand(
                ds.c_dataset(),
                gdal_sys::GDALDataType::GDT_Float32,
                list.as_mut_ptr(),
            );
            if added != gdal_sys::CPLErr::CE_None {
                return Err("cannot add a band over memory".into());
            }
            let mut view = MemView {
                ds,
                _pixels: std::marker::PhantomData,
            };
            view.ds.set_geo_transform(&gt).map_err(|e| e.to_string())?;
            if let Some(v) = nodata {
                view.ds
                    .rasterband(1)
                    .and_then(|mut b| b.set_no_data_value(Some(v)))
                    .map_err(|e| e.to_string())?;
            }
            Ok(view)
        }
    }

    fn dataset(&self) -> &Dataset {
        &self.ds
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The predictor undone one byte at a time, as the TIFF note says.
    fn reference(row: &[u8], w: usize) -> Vec<f32> {
        let mut r = row.to_vec();
        for i in 1..r.len() {
            r[i] = r[i].wrapping_add(r[i - 1]);
        }
        (0..w)
            .map(|j| {
                f32::from_bits(u32::from_be_bytes([
                    r[j],
                    r[w + j],
                    r[2 * w + j],
                    r[3 * w + j],
                ]))
            })
            .collect()
    }

    #[test]
    fn the_float_predictor_is_undone_as_one_byte_at_a_time() {
        let mut seed = 0x2545_f491_u32;
        for w in [1usize, 3, 4, 5, 16, 17, 255, 256, 511, 512] {
            let row: Vec<u8> = (0..w * 4)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 17;
                    seed ^= seed << 5;
                    seed as u8
                })
                .collect();
            let want = reference(&row, w);
            let mut got = vec![0f32; w];
            let mut bytes = row.clone();
            undo_float_predictor(&mut bytes, &mut got);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "width {w}");
        }
    }

    #[test]
    fn the_level_is_gdals_choice() {
        let levels = [(8192, 8192), (4096, 4096), (2048, 2048), (1024, 1024)];
        let window = |size: c_int, buf: c_int| Window {
            x: 0,
            y: 0,
            width: size,
            height: size,
            buf_width: buf,
            buf_height: buf,
        };
        // No shrinking: the full resolution; shrinking by 2 reads the
        // first overview, by 1.7 too (2 < 1.7 * 1.2), by 1.6 not.
        assert_eq!(level_for(&levels, &window(256, 256)), 0);
        assert_eq!(level_for(&levels, &window(512, 256)), 1);
        assert_eq!(level_for(&levels, &window(435, 256)), 1);
        assert_eq!(level_for(&levels, &window(409, 256)), 0);
        // Past the coarsest overview: the coarsest.
        assert_eq!(level_for(&levels, &window(8192, 256)), 3);
    }
}
