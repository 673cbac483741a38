//! The encodings a tile is stored and served in. Every name a format has on
//! the wire or on disk (URL extension, media type, MBTiles `format`, leading
//! magic bytes) is defined here and nowhere else: encoders, every store and
//! every protocol edge use this one type.

use serde::Deserialize;

/// A tile's encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TileFormat {
    /// PNG, RGB or RGBA.
    Png,
    /// JPEG (no transparency; composited over the background color).
    Jpeg,
    /// Lossy WebP with alpha.
    Webp,
}

impl TileFormat {
    /// All formats, in the order capabilities documents list them.
    pub const ALL: [TileFormat; 3] = [TileFormat::Png, TileFormat::Jpeg, TileFormat::Webp];

    /// Media type (`image/png`, ...).
    pub fn content_type(self) -> &'static str {
        match self {
            TileFormat::Png => "image/png",
            TileFormat::Jpeg => "image/jpeg",
            TileFormat::Webp => "image/webp",
        }
    }

    /// File extension used in tile URLs, file stores, journal keys, pack
    /// keys and as the MBTiles `format` value (`png`, `jpg`, `webp`).
    pub fn extension(self) -> &'static str {
        match self {
            TileFormat::Png => "png",
            TileFormat::Jpeg => "jpg",
            TileFormat::Webp => "webp",
        }
    }

    /// Parses a URL extension (`png`, `jpg`, `jpeg`, `webp`), case-insensitively.
    pub fn from_extension(ext: &str) -> Option<TileFormat> {
        match ext.to_ascii_lowercase().as_str() {
            "png" => Some(TileFormat::Png),
            "jpg" | "jpeg" => Some(TileFormat::Jpeg),
            "webp" => Some(TileFormat::Webp),
            _ => None,
        }
    }

    /// Parses a media type as given in WMS/WMTS `FORMAT` (parameters such as
    /// `; mode=8bit` are ignored).
    pub fn from_mime(mime: &str) -> Option<TileFormat> {
        let base = mime.split(';').next().unwrap_or_default().trim();
        match base.to_ascii_lowercase().as_str() {
            "image/png" | "png" => Some(TileFormat::Png),
            "image/jpeg" | "image/jpg" | "jpeg" | "jpg" => Some(TileFormat::Jpeg),
            "image/webp" | "webp" => Some(TileFormat::Webp),
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
            assert_eq!(TileFormat::from_mime(f.content_type()), Some(f));
        }
        assert_eq!(
            TileFormat::from_mime("image/png; mode=8bit"),
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
