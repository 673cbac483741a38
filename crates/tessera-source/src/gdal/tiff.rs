//! The directories of a tiled TIFF (classic or BigTIFF, either byte order)
//! read by range: each image's size, block size, compression and the
//! offsets and byte counts of its blocks. Only what is needed to find a
//! block and pass it on; pixels are GDAL's business.

use std::borrow::Cow;

/// Bytes read at first: a cloud-optimised GeoTIFF keeps its directories
/// and block tables at the start of the file, within this for most.
pub(crate) const HEAD_BYTES: usize = 64 * 1024;
/// Directories followed at most (levels and masks).
const MOST_DIRECTORIES: usize = 64;
/// Entries of one directory read at most.
const MOST_ENTRIES: u64 = 4096;
/// Values of one entry read at most (a block table of 16 M blocks).
const MOST_VALUES: u64 = 1 << 24;

/// Reads `len` bytes at `offset` (fewer only at the end of the file).
pub(crate) type ReadAt<'a> = &'a dyn Fn(u64, usize) -> Result<Vec<u8>, String>;

/// One image of the file: full resolution, an overview or a mask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Directory {
    /// `NewSubfileType`: bit 0 a reduced-resolution image, bit 2 a mask.
    pub subfile: u64,
    pub width: u64,
    pub height: u64,
    /// Block width and height; `None` for a striped image.
    pub block: Option<(u64, u64)>,
    pub compression: u64,
    pub photometric: u64,
    pub samples: u64,
    pub bits: u64,
    /// `PlanarConfiguration`: 1 interleaved, 2 a plane per band.
    pub planar: u64,
    /// `Predictor`: 1 none, 2 horizontal differences, 3 floating point.
    pub predictor: u64,
    /// `SampleFormat`: 1 unsigned integers, 2 signed, 3 IEEE floats.
    pub sample_format: u64,
    /// Whether the file's numbers are little-endian.
    pub little_endian: bool,
    pub offsets: Vec<u64>,
    pub counts: Vec<u64>,
    /// `JPEGTables`: the quantisation and Huffman tables every block of a
    /// JPEG-compressed image leaves out.
    pub jpeg_tables: Option<Vec<u8>>,
}

impl Directory {
    /// Whether this image is a mask (not pixels).
    pub(crate) fn is_mask(&self) -> bool {
        self.subfile & 4 != 0
    }

    /// Blocks per row.
    pub(crate) fn blocks_across(&self) -> u64 {
        self.block
            .map_or(0, |(bw, _)| self.width.div_ceil(bw.max(1)))
    }
}

/// The file's directories in file order.
pub(crate) fn directories(read: ReadAt<'_>) -> Result<Vec<Directory>, String> {
    let head = read(0, HEAD_BYTES)?;
    let file = File::new(head, read)?;
    let mut next = file.first_directory()?;
    let mut found = Vec::new();
    while next != 0 {
        if found.len() == MOST_DIRECTORIES {
            return Err(format!("more than {MOST_DIRECTORIES} images"));
        }
        let (dir, after) = file.directory(next)?;
        found.push(dir);
        next = after;
    }
    Ok(found)
}

struct File<'a> {
    head: Vec<u8>,
    read: ReadAt<'a>,
    little: bool,
    big: bool,
}

impl<'a> File<'a> {
    fn new(head: Vec<u8>, read: ReadAt<'a>) -> Result<Self, String> {
        let (little, big) = match head.get(..4) {
            Some(b"II*\0") => (true, false),
            Some(b"MM\0*") => (false, false),
            Some(b"II+\0") => (true, true),
            Some(b"MM\0+") => (false, true),
            _ => return Err("not a TIFF file".into()),
        };
        Ok(File {
            head,
            read,
            little,
            big,
        })
    }

    fn bytes(&self, offset: u64, len: usize) -> Result<Cow<'_, [u8]>, String> {
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        if let Some(end) = start.checked_add(len)
            && let Some(b) = self.head.get(start..end)
        {
            return Ok(Cow::Borrowed(b));
        }
        let b = (self.read)(offset, len)?;
        if b.len() < len {
            return Err(format!("the file ends before byte {}", offset + len as u64));
        }
        Ok(Cow::Owned(b))
    }

    fn uint(&self, b: &[u8]) -> u64 {
        let mut v = 0u64;
        if self.little {
            for (i, byte) in b.iter().enumerate() {
                v |= u64::from(*byte) << (8 * i);
            }
        } else {
            for byte in b {
                v = (v << 8) | u64::from(*byte);
            }
        }
        v
    }

    fn first_directory(&self) -> Result<u64, String> {
        if self.big {
            Ok(self.uint(&self.bytes(8, 8)?))
        } else {
            Ok(self.uint(&self.bytes(4, 4)?))
        }
    }

    /// The directory at `offset` and the offset of the next (0: none).
    fn directory(&self, offset: u64) -> Result<(Directory, u64), String> {
        let (count_len, entry_len, next_len) = if self.big { (8, 20, 8) } else { (2, 12, 4) };
        let count = self.uint(&self.bytes(offset, count_len)?);
        if count > MOST_ENTRIES {
            return Err(format!("a directory of {count} entries"));
        }
        let table_len = count as usize * entry_len;
        let table = self.bytes(offset + count_len as u64, table_len + next_len)?;
        let mut dir = Directory {
            subfile: 0,
            width: 0,
            height: 0,
            block: None,
            compression: 1,
            photometric: 0,
            samples: 1,
            bits: 1,
            planar: 1,
            predictor: 1,
            sample_format: 1,
            little_endian: self.little,
            offsets: Vec::new(),
            counts: Vec::new(),
            jpeg_tables: None,
        };
        let (mut bw, mut bh) = (0, 0);
        for entry in table[..table_len].chunks_exact(entry_len) {
            let tag = self.uint(&entry[0..2]);
            let kind = self.uint(&entry[2..4]);
            let (n, field) = if self.big {
                (self.uint(&entry[4..12]), &entry[12..20])
            } else {
                (self.uint(&entry[4..8]), &entry[8..12])
            };
            // Whether values sit in the entry or elsewhere depends on
            // all of them (BitsPerSample has one per sample).
            let first = || -> Result<u64, String> {
                Ok(self.values(kind, n, field)?.first().copied().unwrap_or(0))
            };
            match tag {
                254 => dir.subfile = first()?,
                256 => dir.width = first()?,
                257 => dir.height = first()?,
                258 => dir.bits = first()?,
                259 => dir.compression = first()?,
                262 => dir.photometric = first()?,
                277 => dir.samples = first()?,
                284 => dir.planar = first()?,
                317 => dir.predictor = first()?,
                339 => dir.sample_format = first()?,
                322 => bw = first()?,
                323 => bh = first()?,
                324 => dir.offsets = self.values(kind, n, field)?,
                325 => dir.counts = self.values(kind, n, field)?,
                347 => dir.jpeg_tables = Some(self.raw(n, field)?),
                _ => {}
            }
        }
        if bw > 0 && bh > 0 {
            dir.block = Some((bw, bh));
        }
        let next = self.uint(&table[table_len..]);
        Ok((dir, next))
    }

    /// The values of an entry of integer type `kind`.
    fn values(&self, kind: u64, n: u64, field: &[u8]) -> Result<Vec<u64>, String> {
        let size = match kind {
            1 | 7 => 1,
            3 => 2,
            4 | 13 => 4,
            16 | 18 => 8,
            other => return Err(format!("a field of type {other} where integers belong")),
        };
        if n > MOST_VALUES {
            return Err(format!("a field of {n} values"));
        }
        let len = n as usize * size;
        let bytes = if len <= field.len() {
            Cow::Borrowed(&field[..len])
        } else {
            self.bytes(self.uint(field), len)?
        };
        Ok(bytes.chunks_exact(size).map(|b| self.uint(b)).collect())
    }

    /// The bytes of an entry of `n` one-byte values.
    fn raw(&self, n: u64, field: &[u8]) -> Result<Vec<u8>, String> {
        if n > MOST_VALUES {
            return Err(format!("a field of {n} bytes"));
        }
        let len = n as usize;
        if len <= field.len() {
            return Ok(field[..len].to_vec());
        }
        Ok(self.bytes(self.uint(field), len)?.into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A classic little-endian TIFF of one 2x1-block image whose tables
    /// lie past `head` bytes (read by a second range).
    fn tiff(gap: usize) -> Vec<u8> {
        let mut f = b"II*\0".to_vec();
        f.extend_from_slice(&8u32.to_le_bytes());
        let entries: [(u16, u16, u32, u32); 6] = [
            (256, 3, 1, 512),
            (257, 3, 1, 256),
            (259, 3, 1, 7),
            (322, 3, 1, 256),
            (323, 3, 1, 256),
            (324, 4, 2, 0), // offset patched below
        ];
        let table_at = 8 + 2 + entries.len() * 12 + 4 + gap;
        f.extend_from_slice(&(entries.len() as u16).to_le_bytes());
        for (tag, kind, n, v) in entries {
            f.extend_from_slice(&tag.to_le_bytes());
            f.extend_from_slice(&kind.to_le_bytes());
            f.extend_from_slice(&n.to_le_bytes());
            let v = if tag == 324 {
                table_at as u32
            } else {
                u32::from(v as u16)
            };
            f.extend_from_slice(&v.to_le_bytes());
        }
        f.extend_from_slice(&0u32.to_le_bytes());
        f.resize(table_at, 0);
        f.extend_from_slice(&1000u32.to_le_bytes());
        f.extend_from_slice(&2000u32.to_le_bytes());
        f
    }

    fn reader(file: &[u8]) -> impl Fn(u64, usize) -> Result<Vec<u8>, String> + '_ {
        |offset, len| {
            let start = (offset as usize).min(file.len());
            Ok(file[start..(start + len).min(file.len())].to_vec())
        }
    }

    #[test]
    fn reads_a_directory_and_its_block_table() {
        for gap in [0, HEAD_BYTES] {
            let file = tiff(gap);
            let dirs = directories(&reader(&file)).unwrap();
            assert_eq!(dirs.len(), 1);
            let d = &dirs[0];
            assert_eq!((d.width, d.height, d.block), (512, 256, Some((256, 256))));
            assert_eq!(d.compression, 7);
            assert_eq!(d.offsets, vec![1000, 2000], "gap {gap}");
            assert_eq!(d.blocks_across(), 2);
        }
    }

    #[test]
    fn refuses_what_is_not_a_tiff_and_truncated_tables() {
        assert!(directories(&reader(b"\x89PNG\r\n\x1a\n")).is_err());
        let mut file = tiff(HEAD_BYTES);
        file.truncate(file.len() - 2);
        let e = directories(&reader(&file)).unwrap_err();
        assert!(e.contains("ends before"), "{e}");
    }

    #[test]
    fn a_directory_loop_ends() {
        let mut file = tiff(0);
        // The next-directory offset points back at the first.
        let at = 8 + 2 + 6 * 12;
        file[at..at + 4].copy_from_slice(&8u32.to_le_bytes());
        let e = directories(&reader(&file)).unwrap_err();
        assert!(e.contains("more than"), "{e}");
    }
}
