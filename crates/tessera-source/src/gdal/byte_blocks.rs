//! Reads of a byte raster at one of its levels' own scale, gathered from
//! blocks decoded once and shared by every thread.
//!
//! GDAL's block cache belongs to a dataset handle, and a source keeps one
//! handle per read in flight: two renders reading tiles of one block on
//! two handles decode it twice. A 512-pixel block of a COG in the tile
//! grid holds four 256-pixel tiles; with two handles taken in turn, most
//! blocks were decoded about twice, which doubled the read's share of a
//! cold tile. A read that is a level's own pixels (the window at the
//! level's scale exactly, on its pixel grid, as tiles of a COG in their
//! grid are read) is gathered here from that level's blocks instead: each
//! block decoded by GDAL on the reading thread's handle
//! (`GDALReadBlock`), kept in one cache shared by every thread and source
//! (bounded by `gdal.decoded_blocks_mb`, apart from the Float32 blocks of
//! [`super::float_blocks`]), and a block one thread is decoding is waited
//! for by the others, not decoded again. The pixels are GDAL's: its
//! decoded block, copied as its `RasterIO` copies a window that needs no
//! resampling, at the level its resampled `RasterIO` would choose.
//!
//! Anything else keeps GDAL's read: a read that resamples, one over more
//! than [`MOST_BLOCKS`] blocks (GDAL decodes those on several threads), a
//! raster with an alpha band or a nodata value, bands whose blocks differ.

use std::ffi::c_int;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, OnceLock, PoisonError};

use gdal::Dataset;
use gdal::raster::GdalDataType;

use super::aligned::{Pixels, Sample, Window};
use super::float_blocks::level_for;

/// Most blocks one read gathers here; a read over more is left to GDAL,
/// which decodes them on `gdal.threads` threads.
const MOST_BLOCKS: usize = 4;
/// Largest block kept, in bytes (all bands).
const MOST_BLOCK_BYTES: usize = 64 << 20;

/// A block: (source, level, block index).
type Key = (usize, usize, usize);
/// A block's bands one after the other, once decoded (or why not).
type Slot = OnceLock<Result<Arc<[u8]>, String>>;

/// Decoded blocks, least recently used first out.
static CACHE: LazyLock<Mutex<Cache>> = LazyLock::new(|| {
    Mutex::new(Cache {
        blocks: lru::LruCache::unbounded(),
        bytes: 0,
    })
});
/// Numbers that tell sources apart in the cache.
static NEXT_ID: AtomicUsize = AtomicUsize::new(1);

struct Cache {
    blocks: lru::LruCache<Key, (Arc<Slot>, usize)>,
    bytes: usize,
}

impl Cache {
    /// The slot of `key`, made (empty, for its caller to fill) when there
    /// is none; older blocks are dropped past the budget.
    fn slot(&mut self, key: Key, size: usize) -> Arc<Slot> {
        if let Some((slot, _)) = self.blocks.get(&key) {
            return Arc::clone(slot);
        }
        let slot = Arc::new(Slot::new());
        let budget = crate::settings::decoding().0;
        if size <= budget {
            self.blocks.put(key, (Arc::clone(&slot), size));
            self.bytes += size;
            while self.bytes > budget {
                match self.blocks.pop_lru() {
                    Some((_, (_, gone))) => self.bytes -= gone,
                    None => break,
                }
            }
        }
        slot
    }

    /// Forgets `key` when it still holds `slot` (a block that failed to
    /// decode is tried again by the next read).
    fn forget(&mut self, key: &Key, slot: &Arc<Slot>) {
        if self
            .blocks
            .peek(key)
            .is_some_and(|(held, _)| Arc::ptr_eq(held, slot))
            && let Some((_, size)) = self.blocks.pop(key)
        {
            self.bytes -= size;
        }
    }
}

/// One level of the raster as GDAL reads it: the full resolution, or
/// overview `index - 1`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Level {
    width: usize,
    height: usize,
    block_width: usize,
    block_height: usize,
}

impl Level {
    fn across(&self) -> usize {
        self.width.div_ceil(self.block_width)
    }
}

/// A byte raster's levels whose reads at their own scale are gathered from
/// shared blocks.
#[derive(Debug)]
pub(crate) struct ByteLevels {
    /// This source's number in the shared cache.
    id: usize,
    bands: usize,
    levels: Vec<Level>,
    /// The levels' sizes, for [`level_for`].
    sizes: Vec<(usize, usize)>,
    /// Blocks decoded so far (each once while it stays cached).
    decoded: AtomicU64,
    /// Reads gathered from the shared blocks so far.
    gathered: AtomicU64,
}

impl ByteLevels {
    /// The levels of `ds`'s first `bands` bands when each is bytes and
    /// every band has the same levels and blocks; else why not.
    pub(crate) fn of(ds: &Dataset, bands: usize) -> Result<ByteLevels, String> {
        let err = |e: gdal::errors::GdalError| e.to_string();
        let mut levels: Option<Vec<Level>> = None;
        for b in 1..=bands {
            let band = ds.rasterband(b).map_err(err)?;
            if band.band_type() != GdalDataType::UInt8 {
                return Err(format!("band {b} is not bytes"));
            }
            let count = band.overview_count().map_err(err)?;
            let mut these = vec![level_of(&band)];
            for i in 0..count {
                these.push(level_of(&band.overview(i as usize).map_err(err)?));
            }
            match &levels {
                Some(first) if *first != these => {
                    return Err(format!("band {b}'s levels or blocks differ"));
                }
                Some(_) => {}
                None => levels = Some(these),
            }
        }
        let levels = levels.ok_or("no bands")?;
        if levels
            .iter()
            .any(|l| l.block_width == 0 || l.block_height == 0 || l.width == 0 || l.height == 0)
        {
            return Err("a level without blocks".into());
        }
        Ok(ByteLevels {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            bands,
            sizes: levels.iter().map(|l| (l.width, l.height)).collect(),
            levels,
            decoded: AtomicU64::new(0),
            gathered: AtomicU64::new(0),
        })
    }

    /// Blocks of this source decoded so far, and reads gathered from
    /// the shared blocks.
    #[cfg(test)]
    pub(crate) fn counts(&self) -> (u64, u64) {
        (
            self.decoded.load(Ordering::Relaxed),
            self.gathered.load(Ordering::Relaxed),
        )
    }

    /// What reads through `ds` (this thread's handle) from the shared
    /// blocks.
    pub(crate) fn reader<'a>(&'a self, ds: &'a Dataset) -> Reader<'a> {
        Reader { levels: self, ds }
    }

    /// The level `window` is read from and its place there (column, row),
    /// when that is the level's own pixels: the window the buffer's size
    /// times the level's scale exactly, on its pixels, and over at most
    /// [`MOST_BLOCKS`] blocks.
    fn own_pixels(&self, window: &Window) -> Option<(usize, usize, usize)> {
        let index = level_for(&self.sizes, window);
        let (level, full) = (&self.levels[index], &self.levels[0]);
        let whole = |a: usize, b: usize| a.is_multiple_of(b).then_some(a / b);
        let (kx, ky) = (
            whole(full.width, level.width)?,
            whole(full.height, level.height)?,
        );
        let as_usize = |v: c_int| usize::try_from(v).ok();
        let (x, y) = (as_usize(window.x)?, as_usize(window.y)?);
        let (w, h) = (as_usize(window.width)?, as_usize(window.height)?);
        let (bw, bh) = (as_usize(window.buf_width)?, as_usize(window.buf_height)?);
        if w != bw * kx || h != bh * ky || !x.is_multiple_of(kx) || !y.is_multiple_of(ky) {
            return None;
        }
        let (lx, ly) = (x / kx, y / ky);
        if bw == 0 || bh == 0 || lx + bw > level.width || ly + bh > level.height {
            return None;
        }
        let blocks = ((lx + bw).div_ceil(level.block_width) - lx / level.block_width)
            * ((ly + bh).div_ceil(level.block_height) - ly / level.block_height);
        (blocks <= MOST_BLOCKS).then_some((index, lx, ly))
    }
}

fn level_of(band: &gdal::raster::RasterBand<'_>) -> Level {
    let (width, height) = band.size();
    let (block_width, block_height) = band.block_size();
    Level {
        width,
        height,
        block_width,
        block_height,
    }
}

/// Reads from the shared blocks, decoding the missing ones on one
/// thread's dataset handle.
pub(crate) struct Reader<'a> {
    levels: &'a ByteLevels,
    ds: &'a Dataset,
}

impl Reader<'_> {
    /// Block `index` of level `level`: from the cache, else decoded here
    /// (or by the thread already decoding it, waited for).
    fn block(&self, level: usize, index: usize) -> Result<Arc<[u8]>, String> {
        let l = &self.levels.levels[level];
        let size = l.block_width * l.block_height * self.levels.bands;
        if size > MOST_BLOCK_BYTES {
            return self.decode(level, index);
        }
        let key = (self.levels.id, level, index);
        let slot = CACHE
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .slot(key, size);
        let block = slot.get_or_init(|| self.decode(level, index)).clone();
        if block.is_err() {
            CACHE
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .forget(&key, &slot);
        }
        block
    }

    /// Reads block `index` of level `level` with GDAL, every band.
    fn decode(&self, level: usize, index: usize) -> Result<Arc<[u8]>, String> {
        let l = &self.levels.levels[level];
        let across = l.across();
        let (bx, by) = (index % across, index / across);
        let pixels = l.block_width * l.block_height;
        // A block inside the level is not zeroed: GDALReadBlock writes each
        // of its pixels. One reaching past the level's edge is, for the
        // pixels past it, which a driver need not write.
        let inside = (bx + 1) * l.block_width <= l.width && (by + 1) * l.block_height <= l.height;
        let size = pixels * self.levels.bands;
        let mut block = if inside {
            Arc::<[u8]>::new_uninit_slice(size)
        } else {
            Arc::<[u8]>::new_zeroed_slice(size)
        };
        let out = Arc::get_mut(&mut block).ok_or("a block shared before it was decoded")?;
        let (c_x, c_y) = (
            c_int::try_from(bx).map_err(|_| "a block column past C's int")?,
            c_int::try_from(by).map_err(|_| "a block row past C's int")?,
        );
        for (b, band_out) in out.chunks_exact_mut(pixels).enumerate() {
            let band = self
                .ds
                .rasterband(b + 1)
                .map_err(|e| format!("band {}: {e}", b + 1))?;
            let band = if level == 0 {
                band
            } else {
                band.overview(level - 1)
                    .map_err(|e| format!("overview {}: {e}", level - 1))?
            };
            // SAFETY: `band_out` holds one block of this band (its block
            // size, bytes, as `ByteLevels::of` checked); the band belongs
            // to this thread's dataset handle.
            let err = unsafe {
                gdal_sys::CPLErrorReset();
                gdal_sys::GDALReadBlock(band.c_rasterband(), c_x, c_y, band_out.as_mut_ptr().cast())
            };
            if err != gdal_sys::CPLErr::CE_None {
                return Err(format!(
                    "block {bx},{by} of level {level}, band {}: {}",
                    b + 1,
                    last_gdal_error()
                ));
            }
        }
        self.levels.decoded.fetch_add(1, Ordering::Relaxed);
        // SAFETY: each band's block was zeroed or, inside the level, written
        // whole by GDALReadBlock, which succeeded for each.
        Ok(unsafe { block.assume_init() })
    }
}

impl Pixels for Reader<'_> {
    fn read<T: Sample>(
        &self,
        window: &Window,
        buf: &mut [T],
        band_map: &mut [c_int],
        extra: &mut gdal_sys::GDALRasterIOExtraArg,
    ) -> Result<bool, String> {
        let Some(buf) = T::as_u8(buf) else {
            return Ok(false);
        };
        // A fractional window resamples, even at the level's scale.
        if extra.bFloatingPointWindowValidity != 0 {
            return Ok(false);
        }
        let Some((level, lx, ly)) = self.levels.own_pixels(window) else {
            return Ok(false);
        };
        let bands: Option<Vec<usize>> = band_map
            .iter()
            .map(|&b| {
                usize::try_from(b)
                    .ok()
                    .filter(|b| (1..=self.levels.bands).contains(b))
            })
            .collect();
        let Some(bands) = bands else {
            return Ok(false);
        };
        let l = &self.levels.levels[level];
        let (w, h) = (window.buf_width as usize, window.buf_height as usize);
        let (bw, bh) = (l.block_width, l.block_height);
        let (across, pixels) = (l.across(), bw * bh);
        for row in ly / bh..(ly + h).div_ceil(bh) {
            for col in lx / bw..(lx + w).div_ceil(bw) {
                let block = self.block(level, row * across + col)?;
                let (x0, x1) = ((col * bw).max(lx), ((col + 1) * bw).min(lx + w));
                let (y0, y1) = ((row * bh).max(ly), ((row + 1) * bh).min(ly + h));
                for (i, &b) in bands.iter().enumerate() {
                    let src = &block[(b - 1) * pixels..b * pixels];
                    let dst = &mut buf[i * w * h..(i + 1) * w * h];
                    for y in y0..y1 {
                        let from = (y - row * bh) * bw + (x0 - col * bw);
                        let to = (y - ly) * w + (x0 - lx);
                        dst[to..to + (x1 - x0)].copy_from_slice(&src[from..from + (x1 - x0)]);
                    }
                }
            }
        }
        self.levels.gathered.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }
}

fn last_gdal_error() -> String {
    // SAFETY: CPLGetLastErrorMsg returns a pointer to this thread's last
    // error message, valid until the next GDAL call on this thread.
    unsafe {
        let msg = gdal_sys::CPLGetLastErrorMsg();
        if msg.is_null() {
            String::from("GDAL gave no reason")
        } else {
            std::ffi::CStr::from_ptr(msg).to_string_lossy().into_owned()
        }
    }
}

#[cfg(test)]
mod tests {
    use gdal::DriverManager;
    use gdal::raster::Buffer;
    use tessera_grid::BBox;
    use tessera_image::Raster;

    use super::super::{GdalSettings, GdalSource, GdalSourceSpec};
    use crate::warp::Resampling;
    use crate::{Crs, WindowRequest};

    const GT: [f64; 6] = [100_000.0, 30.0, 0.0, 6_000_000.0, 0.0, -30.0];

    /// A read: its first full-resolution pixel, its span in them, and the
    /// pixels it asks.
    type Ask = ((f64, f64), (f64, f64), (u32, u32));

    /// A 1000 x 700 RGB byte raster in Web Mercator (gradients and
    /// noise), written by `driver` with `options`.
    fn write_rgb(path: &str, driver: &str, options: &[&str]) {
        let (w, h) = (1000usize, 700usize);
        let mem = DriverManager::get_driver_by_name("MEM").unwrap();
        let mut ds = mem.create_with_band_type::<u8, _>("", w, h, 3).unwrap();
        ds.set_geo_transform(&GT).unwrap();
        ds.set_projection(&Crs::parse("EPSG:3857").unwrap().wkt)
            .unwrap();
        let mut seed = 0x2545_f491_u32;
        for b in 1..=3 {
            let values: Vec<u8> = (0..w * h)
                .map(|i| {
                    seed ^= seed << 13;
                    seed ^= seed >> 17;
                    seed ^= seed << 5;
                    let (x, y) = (i % w, i / w);
                    ((x * b + y * (4 - b)) / 7 + (seed % 24) as usize) as u8
                })
                .collect();
            ds.rasterband(b)
                .unwrap()
                .write((0, 0), (w, h), &mut Buffer::new((w, h), values))
                .unwrap();
        }
        let mut list = gdal::cpl::CslStringList::new();
        for option in options {
            list.add_string(option).unwrap();
        }
        let out = DriverManager::get_driver_by_name(driver).unwrap();
        ds.create_copy(&out, path, &list).unwrap();
    }

    fn open(path: &str, shared: bool) -> GdalSource {
        GdalSource::open(
            &GdalSourceSpec {
                path: path.to_string(),
                resampling: Resampling::Bilinear,
                bands: Vec::new(),
            },
            &GdalSettings {
                shared_byte_blocks: shared,
                ..GdalSettings::default()
            },
        )
        .unwrap()
    }

    /// Full-resolution pixels (x, y) to (x + span_x, y + span_y) read into
    /// `out` pixels, as a tile of that bbox asks.
    fn read(s: &GdalSource, (x, y): (f64, f64), span: (f64, f64), out: (u32, u32)) -> Raster {
        let crs = Crs::parse("EPSG:3857").unwrap();
        let bbox = BBox::new(
            GT[0] + x * GT[1],
            GT[3] + (y + span.1) * GT[5],
            GT[0] + (x + span.0) * GT[1],
            GT[3] + y * GT[5],
        )
        .unwrap();
        let req = WindowRequest {
            bbox,
            crs: &crs,
            width: out.0,
            height: out.1,
            cancel: None,
            max_source_pixels: None,
            tile_rows: None,
        };
        let ds = s.acquire().unwrap();
        let raster = s.warp(&ds, &req).unwrap();
        s.release(ds);
        raster
    }

    /// Windows as tiles of the raster's own pixels ask them (levels 1, 2
    /// and 4 times coarser, inside one block and across block edges,
    /// hanging past the raster's edges) and windows that resample.
    fn windows() -> Vec<Ask> {
        let mut w = Vec::new();
        for k in [1.0, 2.0, 4.0] {
            for (x, y) in [(0.0, 0.0), (128.0, 64.0), (200.0, 300.0), (896.0, 640.0)] {
                w.push((
                    (x * k / 4.0, y * k / 4.0),
                    (256.0 * k, 256.0 * k),
                    (256, 256),
                ));
            }
            w.push(((k * 16.0, k * 8.0), (96.0 * k, 160.0 * k), (96, 160)));
        }
        // Resampled: shrunk by 1.5 and 3, enlarged, off the pixel grid.
        w.push(((10.0, 20.0), (384.0, 384.0), (256, 256)));
        w.push(((0.0, 0.0), (768.0, 768.0), (256, 256)));
        w.push(((40.0, 40.0), (128.0, 128.0), (256, 256)));
        w.push(((10.5, 3.25), (256.0, 256.0), (256, 256)));
        w
    }

    #[test]
    fn reads_at_a_levels_own_scale_come_from_shared_blocks_as_gdal_reads_them() {
        let dir = tempfile::tempdir().unwrap();
        let variants: [(&str, &[&str]); 4] = [
            ("COG", &["COMPRESS=JPEG", "QUALITY=80", "BLOCKSIZE=256"]),
            ("COG", &["COMPRESS=DEFLATE", "BLOCKSIZE=128"]),
            ("COG", &["COMPRESS=WEBP", "BLOCKSIZE=512"]),
            (
                "GTiff",
                &[
                    "TILED=YES",
                    "BLOCKXSIZE=512",
                    "BLOCKYSIZE=256",
                    "INTERLEAVE=BAND",
                ],
            ),
        ];
        for (i, (driver, options)) in variants.iter().enumerate() {
            let path = format!("{}/rgb{i}.tif", dir.path().display());
            write_rgb(&path, driver, options);
            let (here, gdal) = (open(&path, true), open(&path, false));
            let shared = here
                .shared_bytes
                .as_ref()
                .expect("a byte raster's blocks are shared");
            assert!(gdal.shared_bytes.is_none());
            for (n, (at, span, out)) in windows().into_iter().enumerate() {
                let (_, before) = shared.counts();
                let (a, b) = (read(&here, at, span, out), read(&gdal, at, span, out));
                let what = format!("{options:?} {at:?} {span:?} {out:?}");
                assert_eq!(a.valid, b.valid, "{what}: the same pixels valid");
                assert_eq!(a.bands, b.bands, "{what}: the same pixels");
                assert!(a.valid.contains(&255), "{what}: something read");
                let gathered = shared.counts().1 > before;
                let own = span.0 / f64::from(out.0);
                if at.0.fract() != 0.0 || ![1.0, 2.0, 4.0].contains(&own) {
                    assert!(!gathered, "{what}: a resampled read is GDAL's");
                }
                if n == 0 {
                    assert!(
                        gathered,
                        "{what}: a tile of the full resolution is gathered"
                    );
                }
            }
            assert!(shared.counts().0 > 0, "{options:?}: blocks decoded here");
        }
    }

    #[test]
    fn a_block_many_reads_need_at_once_is_decoded_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = format!("{}/rgb.tif", dir.path().display());
        write_rgb(&path, "COG", &["COMPRESS=JPEG", "BLOCKSIZE=512"]);
        let (here, gdal) = (open(&path, true), open(&path, false));
        // Every 256-pixel tile of the full resolution: 4 x 3 tiles in
        // 2 x 2 blocks, each block holding up to four tiles.
        let tiles: Vec<(f64, f64)> = (0..3)
            .flat_map(|y| (0..4).map(move |x| (f64::from(x) * 256.0, f64::from(y) * 256.0)))
            .collect();
        let want: Vec<Raster> = tiles
            .iter()
            .map(|&at| read(&gdal, at, (256.0, 256.0), (256, 256)))
            .collect();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for (at, want) in tiles.iter().zip(&want) {
                        let got = read(&here, *at, (256.0, 256.0), (256, 256));
                        assert_eq!(got.bands, want.bands, "{at:?}");
                        assert_eq!(got.valid, want.valid, "{at:?}");
                    }
                });
            }
        });
        let shared = here.shared_bytes.as_ref().unwrap();
        assert_eq!(
            shared.counts(),
            (4, 48),
            "each of the 4 blocks decoded once by 4 threads"
        );
    }

    #[test]
    fn rasters_with_alpha_or_nodata_keep_gdals_cache() {
        let dir = tempfile::tempdir().unwrap();
        let path = format!("{}/rgb.tif", dir.path().display());
        write_rgb(&path, "GTiff", &["TILED=YES"]);
        let alpha = format!("{}/rgba.tif", dir.path().display());
        let nodata = format!("{}/nodata.tif", dir.path().display());
        let ds = gdal::Dataset::open(&path).unwrap();
        let gtiff = DriverManager::get_driver_by_name("GTiff").unwrap();
        let mut list = gdal::cpl::CslStringList::new();
        list.add_string("TILED=YES").unwrap();
        list.add_string("ALPHA=YES").unwrap();
        let mem = DriverManager::get_driver_by_name("MEM").unwrap();
        let mut four = mem
            .create_with_band_type::<u8, _>("", 1000, 700, 4)
            .unwrap();
        four.set_geo_transform(&GT).unwrap();
        four.set_projection(&ds.projection()).unwrap();
        four.rasterband(4)
            .unwrap()
            .set_color_interpretation(gdal::raster::ColorInterpretation::AlphaBand)
            .unwrap();
        four.create_copy(&gtiff, &alpha, &list).unwrap();
        let copy = ds
            .create_copy(&gtiff, &nodata, &gdal::cpl::CslStringList::new())
            .unwrap();
        for b in 1..=3 {
            copy.rasterband(b)
                .unwrap()
                .set_no_data_value(Some(0.0))
                .unwrap();
        }
        drop(copy);
        assert!(open(&path, true).shared_bytes.is_some());
        assert!(open(&alpha, true).shared_bytes.is_none(), "alpha");
        assert!(open(&nodata, true).shared_bytes.is_none(), "nodata");
    }
}
