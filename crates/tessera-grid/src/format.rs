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
    /// Elevations as Mapzen's Terrarium RGB (`(R * 256 + G + B / 256) -
    /// 32768` metres) in a lossless PNG: `.terrarium.png`, served as
    /// `image/png`, read by MapLibre as a `raster-dem` source with
    /// `encoding: terrarium`.
    #[serde(rename = "terrarium.png")]
    TerrariumPng,
    /// Terrarium elevations in a lossless WebP: `.terrarium.webp`.
    #[serde(rename = "terrarium.webp")]
    TerrariumWebp,
    /// Elevations as Mapbox's Terrain-RGB (`-10000 + (R * 65536 + G * 256 +
    /// B) * 0.1` metres) in a lossless PNG: `.terrain-rgb.png`, MapLibre's
    /// `raster-dem` `encoding: mapbox`.
    #[serde(rename = "terrain-rgb.png")]
    TerrainRgbPng,
    /// Terrain-RGB elevations in a lossless WebP: `.terrain-rgb.webp`.
    #[serde(rename = "terrain-rgb.webp")]
    TerrainRgbWebp,
}

/// How a tile's red, green and blue hold an elevation in metres (the two
/// encodings MapLibre's `raster-dem` sources read).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElevationEncoding {
    /// Mapzen's Terrarium: `(R * 256 + G + B / 256) - 32768`; steps of
    /// 1/256 m from -32768 m to 32767.996 m.
    Terrarium,
    /// Mapbox's Terrain-RGB: `-10000 + (R * 65536 + G * 256 + B) * 0.1`;
    /// steps of 0.1 m from -10000 m to 1667721.5 m.
    TerrainRgb,
}

impl ElevationEncoding {
    /// The name MapLibre's `raster-dem` sources and TileJSON's `encoding`
    /// give it: `terrarium` or `mapbox`.
    pub fn maplibre_name(self) -> &'static str {
        match self {
            ElevationEncoding::Terrarium => "terrarium",
            ElevationEncoding::TerrainRgb => "mapbox",
        }
    }

    /// One step of the encoding in metres: what an elevation may be off by
    /// once encoded (half of it, rounded to the nearest step).
    pub fn step(self) -> f64 {
        match self {
            ElevationEncoding::Terrarium => 1.0 / 256.0,
            ElevationEncoding::TerrainRgb => 0.1,
        }
    }

    /// The 24-bit code of `metres` (rounded to the nearest step, clamped to
    /// the encoding's range), as red, green and blue; NaN is sea level.
    pub fn encode(self, metres: f32) -> [u8; 3] {
        let metres = if metres.is_nan() {
            0.0
        } else {
            f64::from(metres)
        };
        let code = match self {
            ElevationEncoding::Terrarium => (metres + 32768.0) * 256.0,
            ElevationEncoding::TerrainRgb => (metres + 10000.0) * 10.0,
        };
        let code = code.round().clamp(0.0, f64::from(0xff_ffff_u32)) as u32;
        [(code >> 16) as u8, (code >> 8) as u8, code as u8]
    }

    /// The elevation in metres red, green and blue encode.
    pub fn decode(self, [r, g, b]: [u8; 3]) -> f64 {
        let code = f64::from(u32::from(r) << 16 | u32::from(g) << 8 | u32::from(b));
        match self {
            ElevationEncoding::Terrarium => code / 256.0 - 32768.0,
            ElevationEncoding::TerrainRgb => code * 0.1 - 10000.0,
        }
    }
}

impl TileFormat {
    /// All formats: the image formats, then vector tiles.
    pub const ALL: [TileFormat; 11] = [
        TileFormat::Png,
        TileFormat::Png8,
        TileFormat::Jpeg,
        TileFormat::Webp,
        TileFormat::Mixed,
        TileFormat::Mvt,
        TileFormat::Mlt,
        TileFormat::TerrariumPng,
        TileFormat::TerrariumWebp,
        TileFormat::TerrainRgbPng,
        TileFormat::TerrainRgbWebp,
    ];

    /// The elevation formats: Terrarium and Terrain-RGB, each in PNG and
    /// in lossless WebP.
    pub const ELEVATIONS: [TileFormat; 4] = [
        TileFormat::TerrariumPng,
        TileFormat::TerrariumWebp,
        TileFormat::TerrainRgbPng,
        TileFormat::TerrainRgbWebp,
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

    /// How the format's pixels hold elevations, for the elevation formats
    /// (their pixels are data, not a picture: made from a single-band
    /// layer's values, never styled, never lossy).
    pub fn elevation(self) -> Option<ElevationEncoding> {
        match self {
            TileFormat::TerrariumPng | TileFormat::TerrariumWebp => {
                Some(ElevationEncoding::Terrarium)
            }
            TileFormat::TerrainRgbPng | TileFormat::TerrainRgbWebp => {
                Some(ElevationEncoding::TerrainRgb)
            }
            _ => None,
        }
    }

    /// Whether the format is a picture: an image format that is not an
    /// elevation format (what maps, previews and capabilities show).
    pub fn is_picture(self) -> bool {
        !self.is_vector() && self.elevation().is_none()
    }

    /// The image format the bytes are in: PNG or WebP for the elevation
    /// formats, the format itself otherwise.
    #[must_use]
    pub fn container(self) -> TileFormat {
        match self {
            TileFormat::TerrariumPng | TileFormat::TerrainRgbPng => TileFormat::Png,
            TileFormat::TerrariumWebp | TileFormat::TerrainRgbWebp => TileFormat::Webp,
            other => other,
        }
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
            other => other.container().content_type(),
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
    /// the media type, but `image/png8` for paletted PNG and the media type
    /// with an `encoding` parameter for the elevation formats
    /// (`image/png; encoding=terrarium`).
    pub fn format_name(self) -> &'static str {
        match self {
            TileFormat::Png8 => "image/png8",
            TileFormat::TerrariumPng => "image/png; encoding=terrarium",
            TileFormat::TerrariumWebp => "image/webp; encoding=terrarium",
            TileFormat::TerrainRgbPng => "image/png; encoding=terrain-rgb",
            TileFormat::TerrainRgbWebp => "image/webp; encoding=terrain-rgb",
            other => other.content_type(),
        }
    }

    /// File extension used in tile URLs, file stores, journal keys, pack
    /// keys and as the MBTiles `format` value (`png`, `png8`, `jpg`, `webp`;
    /// the elevation formats' have a dot: `terrarium.png`).
    pub fn extension(self) -> &'static str {
        match self {
            TileFormat::TerrariumPng => "terrarium.png",
            TileFormat::TerrariumWebp => "terrarium.webp",
            TileFormat::TerrainRgbPng => "terrain-rgb.png",
            TileFormat::TerrainRgbWebp => "terrain-rgb.webp",
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
            elevation if elevation.elevation().is_some() => elevation.container().archive_name(),
            TileFormat::Mvt => "pbf",
            other => other.extension(),
        }
    }

    /// Parses a URL extension (`png`, `jpg`, `jpeg`, `webp`, `mvt`, `pbf`,
    /// `mlt`, `terrarium.png`, `terrain-rgb.webp`, ...),
    /// case-insensitively. A file name's extension starts at its first dot.
    pub fn from_extension(ext: &str) -> Option<TileFormat> {
        match ext.to_ascii_lowercase().as_str() {
            "terrarium.png" => Some(TileFormat::TerrariumPng),
            "terrarium.webp" => Some(TileFormat::TerrariumWebp),
            "terrain-rgb.png" | "terrainrgb.png" => Some(TileFormat::TerrainRgbPng),
            "terrain-rgb.webp" | "terrainrgb.webp" => Some(TileFormat::TerrainRgbWebp),
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

    /// Splits a name ending in a format's extension (`a.b.png`,
    /// `a.b.terrarium.png`) into what comes before the extension's dot and
    /// the format; the longest extension that parses wins.
    pub fn split_extension(name: &str) -> Option<(&str, TileFormat)> {
        let (rest, last) = name.rsplit_once('.')?;
        if let Some((stem, middle)) = rest.rsplit_once('.')
            && let Some(format) = TileFormat::from_extension(&format!("{middle}.{last}"))
        {
            return Some((stem, format));
        }
        Some((rest, TileFormat::from_extension(last)?))
    }

    /// Parses a media type as given in WMS/WMTS `FORMAT`: `image/png8` and
    /// `image/png; mode=8bit` are paletted PNG; other parameters are
    /// ignored.
    pub fn from_mime(mime: &str) -> Option<TileFormat> {
        let mut parts = mime.split(';');
        let base = parts.next().unwrap_or_default().trim();
        let params: Vec<String> = parts
            .map(|p| p.trim().replace(' ', "").to_ascii_lowercase())
            .collect();
        let eight_bit = params.iter().any(|p| p == "mode=8bit");
        let encoding = params.iter().find_map(|p| p.strip_prefix("encoding="));
        let container = base.rsplit('/').next().unwrap_or_default();
        if let Some(encoding) = encoding
            && let Some(format) = TileFormat::from_extension(&format!("{encoding}.{container}"))
            && format.elevation().is_some()
        {
            return Some(format);
        }
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
        assert_eq!(
            TileFormat::split_extension("dem.WebMercatorQuad.terrarium.png"),
            Some(("dem.WebMercatorQuad", TileFormat::TerrariumPng))
        );
        assert_eq!(
            TileFormat::split_extension("a.b.png"),
            Some(("a.b", TileFormat::Png))
        );
        assert_eq!(TileFormat::split_extension("a.gif"), None);
        assert_eq!(
            TileFormat::from_mime("image/webp;encoding=terrain-rgb"),
            Some(TileFormat::TerrainRgbWebp)
        );
    }

    #[test]
    fn elevations_round_trip_within_half_a_step_and_clamp() {
        for encoding in [ElevationEncoding::Terrarium, ElevationEncoding::TerrainRgb] {
            for metres in [-432.17f32, 0.0, 0.04, 1234.567, 8848.86] {
                let back = encoding.decode(encoding.encode(metres));
                assert!((back - f64::from(metres)).abs() <= encoding.step() / 2.0 + 1e-6);
            }
            assert!(encoding.decode(encoding.encode(f32::NAN)).abs() < 1e-9);
            assert_eq!(encoding.encode(f32::INFINITY), [255, 255, 255]);
            assert_eq!(encoding.encode(-1e38), [0, 0, 0]);
        }
        // Mapzen's and Mapbox's own examples: 0 m.
        assert_eq!(ElevationEncoding::Terrarium.encode(0.0), [128, 0, 0]);
        assert_eq!(ElevationEncoding::TerrainRgb.encode(0.0), [1, 134, 160]);
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
