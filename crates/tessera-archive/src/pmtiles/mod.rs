//! PMTiles v3: one file of a header, directories, metadata (JSON) and tile
//! data, read by byte ranges. This module owns what the format says and
//! how tessera fills it in: the tile type of each tile format, how tiles
//! are compressed (vector tiles gzip-packed once; images as they are), the
//! metadata JSON (`name`, `format`, `type`, `description`, `attribution`,
//! `vector_layers`, `encoding` of elevation tiles), and the header fields the writer mends. [`read`]
//! reads archives, [`write`] writes them.

pub mod read;
pub(crate) mod write;

use pmtiles::{Compression, TileType};
use tessera_grid::{BBox, TileFormat};

use crate::TileMetadata;

/// The PMTiles tile type tiles of `format` are written as (PMTiles has one
/// tile type per archive: mixed formats are `Unknown`).
pub fn tile_type(format: TileFormat) -> TileType {
    match format {
        TileFormat::Jpeg => TileType::Jpeg,
        // Elevations are images to PMTiles; the metadata's `encoding`
        // says how to read them.
        TileFormat::Webp | TileFormat::TerrariumWebp | TileFormat::TerrainRgbWebp => TileType::Webp,
        TileFormat::Png
        | TileFormat::Png8
        | TileFormat::TerrariumPng
        | TileFormat::TerrainRgbPng => TileType::Png,
        TileFormat::Mixed => TileType::Unknown,
        TileFormat::Mvt => TileType::Mvt,
        TileFormat::Mlt => TileType::Mlt,
    }
}

/// How tiles of `tile_type` are held: vector tiles (MVT and MLT)
/// gzip-packed (as tessera keeps them), images as they are.
pub fn tile_compression(tile_type: TileType) -> Compression {
    if matches!(tile_type, TileType::Mvt | TileType::Mlt) {
        Compression::Gzip
    } else {
        Compression::None
    }
}

/// The tile format an archive of `tile_type` tiles compressed as
/// `compression` is served as, or why it is not served.
pub fn format_of(tile_type: TileType, compression: Compression) -> Result<TileFormat, String> {
    let format = match tile_type {
        TileType::Mvt => TileFormat::Mvt,
        TileType::Png => TileFormat::Png,
        TileType::Jpeg => TileFormat::Jpeg,
        TileType::Webp => TileFormat::Webp,
        other => {
            return Err(format!(
                "tiles of type {other:?} are not served (png, jpeg, webp and mvt are)"
            ));
        }
    };
    match (format, compression) {
        (_, Compression::None) | (TileFormat::Mvt, Compression::Gzip) => Ok(format),
        (_, other) => Err(format!(
            "{format:?} tiles compressed as {other:?} are not served (vector tiles may be gzip-compressed; images not at all)"
        )),
    }
}

/// The metadata JSON written into an archive.
pub fn metadata_json(meta: &TileMetadata) -> String {
    let mut json = serde_json::json!({
        "name": meta.name.clone().unwrap_or_default(),
        "format": meta.format.archive_name(),
        "type": meta.layer_type(),
    });
    if let Some(d) = &meta.description {
        json["description"] = d.clone().into();
    }
    if let Some(a) = &meta.attribution {
        json["attribution"] = a.clone().into();
    }
    if let Some(layers) = &meta.vector_layers {
        json["vector_layers"] = layers.clone();
    }
    if let Some(encoding) = meta.format.elevation() {
        json["encoding"] = encoding.maplibre_name().into();
    }
    json.to_string()
}

/// What an archive says about itself: its header's zooms, bounds and
/// centre and its metadata JSON's words (`text`, empty when it has none),
/// at `version`.
pub fn read_metadata(
    header: &pmtiles::Header,
    text: &str,
    version: Option<String>,
) -> Result<TileMetadata, String> {
    let format = format_of(header.tile_type, header.tile_compression)?;
    if header.min_zoom > header.max_zoom || header.max_zoom > 30 {
        return Err(format!(
            "zooms {}..{} in the header are not a zoom range",
            header.min_zoom, header.max_zoom
        ));
    }
    let bounds = BBox::new(
        header.min_longitude.max(-180.0),
        header.min_latitude.max(-90.0),
        header.max_longitude.min(180.0),
        header.max_latitude.min(90.0),
    )
    .ok();
    let json: serde_json::Value = if text.trim().is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::from_str(text).map_err(|e| format!("its metadata is not JSON: {e}"))?
    };
    let word = |k: &str| {
        json.get(k)
            .and_then(|v| v.as_str())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    };
    Ok(TileMetadata {
        format,
        min_zoom: header.min_zoom,
        max_zoom: header.max_zoom,
        bounds,
        center: Some((
            header.center_longitude,
            header.center_latitude,
            header.center_zoom,
        )),
        name: word("name"),
        description: word("description"),
        attribution: word("attribution"),
        vector_layers: json.get("vector_layers").cloned(),
        version,
    })
}

/// The PMTiles tile id of `z/x/y` (zoom by zoom, Hilbert order within a
/// zoom); `u64::MAX` when `x` or `y` is not below 2^z.
pub fn tile_id(z: u8, x: u32, y: u32) -> u64 {
    pmtiles::TileCoord::new(z, x, y).map_or(u64::MAX, |c| pmtiles::TileId::from(c).value())
}
