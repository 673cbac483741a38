//! Writing a PMTiles archive with the `pmtiles` crate's stream writer:
//! the tile type, compression and metadata this module's parent decides,
//! and the header mended where the reference tool asks for it.

use std::fs::File;
use std::path::Path;

use pmtiles::{PmTilesStreamWriter, PmTilesWriter};
use tessera_grid::TileCoord;

use crate::TileMetadata;
use crate::write::{WriteError, failed};

/// A PMTiles archive being written.
pub(crate) type Writer = PmTilesStreamWriter<File>;

/// Header fields (byte offsets) [`set_leaf_offset`] reads and writes.
const LEAF_OFFSET: usize = 40;
const LEAF_LENGTH: usize = 48;
const DATA_OFFSET: usize = 56;
const DATA_LENGTH: usize = 64;

/// Starts an archive at `path` saying `meta` about itself.
pub(crate) fn create(path: &Path, meta: &TileMetadata) -> Result<Writer, WriteError> {
    let tile_type = super::tile_type(meta.format);
    let [w, s, e, n] = meta.bounds_or_world();
    let (lon, lat, zoom) = meta.center_or_middle();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .create(true)
        .open(path)
        .map_err(|e| failed("create", path, e))?;
    // The tiles are written as they come: vector tiles gzip-packed (the
    // crate's default for MVT would pack them a second time), images as
    // they are.
    PmTilesWriter::new(tile_type)
        .precompressed(super::tile_compression(tile_type))
        .metadata(super::metadata_json(meta))
        .min_zoom(meta.min_zoom)
        .max_zoom(meta.max_zoom)
        .bounds(w, s, e, n)
        .center(lon, lat)
        .center_zoom(zoom)
        .create(file)
        .map_err(|e| failed("create", path, e))
}

/// Adds tile `coord` (its bytes as the archive holds them).
pub(crate) fn add(
    writer: &mut Writer,
    coord: TileCoord,
    data: &[u8],
    path: &Path,
) -> Result<(), WriteError> {
    let c = pmtiles::TileCoord::new(coord.z(), coord.x(), coord.y())
        .map_err(|e| failed("add", path, e))?;
    writer.add_tile(c, data).map_err(|e| failed("add", path, e))
}

/// Completes the archive: the zooms of the tiles added (when any) and the
/// centre in the header, the directories written.
pub(crate) fn finish(
    mut writer: Writer,
    zooms: Option<(u8, u8)>,
    (lon, lat, zoom): (f64, f64, u8),
    path: &Path,
) -> Result<(), WriteError> {
    if let Some((lo, hi)) = zooms {
        writer.set_zoom_range(lo, hi);
        writer.set_center(lon, lat, zoom);
    }
    writer.finalize().map_err(|e| failed("finish", path, e))?;
    set_leaf_offset(path).map_err(|e| failed("finish", path, e))
}

/// An archive without leaf directories gets a leaf section offset of the
/// end of the tile data (where leaves would start) instead of 0: the
/// reference tool (`pmtiles verify` of go-pmtiles) refuses offset 0, and
/// with length 0 the offset points at nothing either way.
fn set_leaf_offset(path: &Path) -> std::io::Result<()> {
    use std::io::{Read, Seek, SeekFrom, Write};
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)?;
    let mut header = [0u8; 72];
    file.read_exact(&mut header)?;
    let field = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&header[at..at + 8]);
        u64::from_le_bytes(b)
    };
    if field(LEAF_OFFSET) == 0 && field(LEAF_LENGTH) == 0 {
        let end = field(DATA_OFFSET) + field(DATA_LENGTH);
        file.seek(SeekFrom::Start(LEAF_OFFSET as u64))?;
        file.write_all(&end.to_le_bytes())?;
    }
    Ok(())
}
