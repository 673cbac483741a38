//! The encodings a tile is stored and served in. Every name a format has on
//! the wire or on disk (URL extension, media type, MBTiles `format`, leading
//! magic bytes) is defined here and nowhere else: encoders, every store and
//! every protocol edge use this one type.

use serde::Deserialize;

/// The stored form of a vector tile with no features: the gzip
/// compression of nothing (an empty protobuf message is a tile with no
/// layers). Stores keep it like any tile; the HTTP edge answers 204.
pub const EMPTY_MVT: &[u8] = &[
    0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0xff, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00,
];

/// A tile's encoding.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum TileFormat {
    /// PNG, RGB or RGBA.
    Png,
    /// PNG with a palette of at most 256 colours (transparency kept), a
    /// quarter of the bytes of RGBA for maps with few colours. Served as
    /// `image/png`; named `image/png8` in capabilities, and asked for as
    /// `image/png8` or `image/png; mode=8bit`; URLs and stores use `.png8`.
    Png8,
    /// JPEG (no transparency; composited over the background color).
    /// Configs may write it `jpg`, as URLs do.
    #[serde(alias = "jpg")]
    Jpeg,
    /// Lossy WebP with alpha.
    Webp,
    /// JPEG where the tile is opaque, PNG where it is not (as
    /// GeoWebCache's `image/vnd.jpeg-png` and MapProxy's `mixed`): small
    /// tiles inside the data, transparent ones at its edge. Each response
    /// carries the media type of its bytes; URLs and stores use
    /// `.jpeg-png`.
    Mixed,
    /// Mapbox Vector Tile (`application/vnd.mapbox-vector-tile`): features,
    /// not pixels; only vector sources make it. URLs take `.mvt` or `.pbf`;
    /// stores use `.mvt`. Tiles are kept gzip-compressed (as MBTiles and
    /// PMTiles hold them) and sent with `Content-Encoding: gzip` to clients
    /// that accept it; a tile with no features is [`EMPTY_MVT`] in stores
    /// and 204 No Content on the wire.
    Mvt,
    /// MapLibre Tile (`application/vnd.maplibre-tile`): the same features
    /// as [`TileFormat::Mvt`] in MapLibre's column-oriented encoding, made
    /// from the layer's MVT. URLs and stores use `.mlt`. Kept and sent
    /// gzip-compressed as MVT is; a tile with no features is
    /// [`EMPTY_MVT`] in stores (the gzip compression of nothing is an MLT
    /// tile without layers too) and 204 No Content on the wire.
    Mlt,
}

impl TileFormat {
    /// All formats: the image formats, then vector tiles.
    pub const ALL: [TileFormat; 7] = [
        TileFormat::Png,
        TileFormat::Png8,
        TileFormat::Jpeg,
        TileFormat::Webp,
        TileFormat::Mixed,
        TileFormat::Mvt,
        TileFormat::Mlt,
    ];

    /// The vector tile formats: Mapbox Vector Tiles, then MapLibre Tiles.
    pub const VECTORS: [TileFormat; 2] = [TileFormat::Mvt, TileFormat::Mlt];

    /// The image formats, in the order capabilities documents list them
    /// (what a WMS GetMap can answer in).
    pub const IMAGES: [TileFormat; 5] = [
        TileFormat::Png,
        TileFormat::Png8,
        TileFormat::Jpeg,
        TileFormat::Webp,
        TileFormat::Mixed,
    ];

    /// Whether the format holds features rather than pixels.
    pub fn is_vector(self) -> bool {
        matches!(self, TileFormat::Mvt | TileFormat::Mlt)
    }

    /// Media type of the bytes (`image/png`, ...): the `Content-Type` of a
    /// response. For [`TileFormat::Mixed`] it depends on the bytes (see
    /// [`TileFormat::content_type_of`]); this is the format's own name.
    pub fn content_type(self) -> &'static str {
        match self {
            TileFormat::Png | TileFormat::Png8 => "image/png",
            TileFormat::Mixed => "image/vnd.jpeg-png",
            TileFormat::Jpeg => "image/jpeg",
            TileFormat::Webp => "image/webp",
            TileFormat::Mvt => "application/vnd.mapbox-vector-tile",
            TileFormat::Mlt => "application/vnd.maplibre-tile",
        }
    }

    /// The media type of `bytes` encoded in this format: the format's own,
    /// or for [`TileFormat::Mixed`] that of the encoding the bytes use.
    pub fn content_type_of(self, bytes: &[u8]) -> &'static str {
        match self {
            TileFormat::Mixed => {
                TileFormat::sniff(bytes).map_or("image/png", TileFormat::content_type)
            }
            other => other.content_type(),
        }
    }

    /// The format's name in capabilities documents and `FORMAT` parameters:
    /// the media type, but `image/png8` for paletted PNG.
    pub fn format_name(self) -> &'static str {
        match self {
            TileFormat::Png8 => "image/png8",
            other => other.content_type(),
        }
    }

    /// File extension used in tile URLs, file stores, journal keys, pack
    /// keys and as the MBTiles `format` value (`png`, `png8`, `jpg`, `webp`).
    pub fn extension(self) -> &'static str {
        match self {
            TileFormat::Png => "png",
            TileFormat::Png8 => "png8",
            TileFormat::Mixed => "jpeg-png",
            TileFormat::Jpeg => "jpg",
            TileFormat::Webp => "webp",
            TileFormat::Mvt => "mvt",
            TileFormat::Mlt => "mlt",
        }
    }

    /// The name archive formats use for the bytes (MBTiles and PMTiles
    /// `format` metadata): `png` for both PNG flavours, `jpg`, `webp`,
    /// `pbf` for Mapbox Vector Tiles, `mlt` for MapLibre Tiles.
    pub fn archive_name(self) -> &'static str {
        match self {
            TileFormat::Png8 | TileFormat::Mixed => TileFormat::Png.extension(),
            TileFormat::Mvt => "pbf",
            other => other.extension(),
        }
    }

    /// Parses a URL extension (`png`, `jpg`, `jpeg`, `webp`, `mvt`, `pbf`,
    /// `mlt`), case-insensitively.
    pub fn from_extension(ext: &str) -> Option<TileFormat> {
        match ext.to_ascii_lowercase().as_str() {
            "png" => Some(TileFormat::Png),
            "png8" => Some(TileFormat::Png8),
            "jpeg-png" | "mixed" => Some(TileFormat::Mixed),
            "jpg" | "jpeg" => Some(TileFormat::Jpeg),
            "webp" => Some(TileFormat::Webp),
            "mvt" | "pbf" => Some(TileFormat::Mvt),
            "mlt" => Some(TileFormat::Mlt),
            _ => None,
        }
    }

    /// Parses a media type as given in WMS/WMTS `FORMAT`: `image/png8` and
    /// `image/png; mode=8bit` are paletted PNG; other parameters are
    /// ignored.
    pub fn from_mime(mime: &str) -> Option<TileFormat> {
        let mut parts = mime.split(';');
        let base = parts.next().unwrap_or_default().trim();
        let eight_bit = parts.any(|p| p.trim().replace(' ', "").eq_ignore_ascii_case("mode=8bit"));
        match base.to_ascii_lowercase().as_str() {
            "image/png" | "png" if eight_bit => Some(TileFormat::Png8),
            "image/png8" | "png8" => Some(TileFormat::Png8),
            "image/vnd.jpeg-png" | "mixed" => Some(TileFormat::Mixed),
            "image/png" | "png" => Some(TileFormat::Png),
            "image/jpeg" | "image/jpg" | "jpeg" | "jpg" => Some(TileFormat::Jpeg),
            "image/webp" | "webp" => Some(TileFormat::Webp),
            "application/vnd.mapbox-vector-tile" | "application/x-protobuf" | "mvt" | "pbf" => {
                Some(TileFormat::Mvt)
            }
            "application/vnd.maplibre-tile" | "mlt" => Some(TileFormat::Mlt),
            _ => None,
        }
    }

    /// The format whose signature `bytes` start with (PNG's 8-byte
    /// signature, JPEG's SOI marker, a RIFF container of WebP), if any.
    pub fn sniff(bytes: &[u8]) -> Option<TileFormat> {
        if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
            Some(TileFormat::Png)
        } else if bytes.starts_with(b"\xff\xd8\xff") {
            Some(TileFormat::Jpeg)
        } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
            Some(TileFormat::Webp)
        } else {
            None
        }
    }
}

impl std::fmt::Display for TileFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.extension())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extension_and_content_type_agree_for_every_format() {
        for f in TileFormat::ALL {
            assert_eq!(TileFormat::from_extension(f.extension()), Some(f));
            assert_eq!(TileFormat::from_mime(f.format_name()), Some(f));
        }
        assert_eq!(
            TileFormat::from_mime("image/png; mode=8bit"),
            Some(TileFormat::Png8)
        );
        assert_eq!(
            TileFormat::from_mime("image/png; charset=x"),
            Some(TileFormat::Png)
        );
        assert_eq!(TileFormat::from_extension("gif"), None);
    }

    #[test]
    fn signatures_name_their_format() {
        assert_eq!(
            TileFormat::sniff(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"),
            Some(TileFormat::Png)
        );
        assert_eq!(
            TileFormat::sniff(b"\xff\xd8\xff\xe0"),
            Some(TileFormat::Jpeg)
        );
        assert_eq!(
            TileFormat::sniff(b"RIFF\x10\0\0\0WEBPVP8 "),
            Some(TileFormat::Webp)
        );
        assert_eq!(TileFormat::sniff(b"GIF89a"), None);
        assert_eq!(TileFormat::sniff(b""), None);
    }
}
