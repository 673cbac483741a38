//! The pack format: the tiles of one curve-index block in one Avro object
//! container file, the schema embedded, payloads stored as they are (no
//! codec: PNG, JPEG and WebP are already compressed). See
//! `docs/pack-format.md`.

use apache_avro::types::{Record, Value};
use apache_avro::{Codec, Reader, Schema, Writer};
use bytes::Bytes;

/// The Avro schema of one tile record.
pub const SCHEMA: &str = r#"{
  "type": "record",
  "name": "Tile",
  "namespace": "tessera.pack",
  "doc": "One map tile of a tessera pack",
  "fields": [
    {"name": "z", "type": "int", "doc": "zoom level"},
    {"name": "x", "type": "long", "doc": "column from the left"},
    {"name": "y", "type": "long", "doc": "row from the top"},
    {"name": "media_type", "type": "string", "doc": "image/png, image/jpeg or image/webp"},
    {"name": "data", "type": "bytes", "doc": "the encoded tile, byte for byte"},
    {"name": "created", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "etag", "type": "string", "doc": "32 hex digits of the XXH3-128 of data"}
  ]
}"#;

/// One tile in a pack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackedTile {
    /// Zoom.
    pub z: u8,
    /// Column.
    pub x: u32,
    /// Row from the top.
    pub y: u32,
    /// Media type of `data`.
    pub media_type: String,
    /// The encoded tile.
    pub data: Bytes,
    /// When it was written, milliseconds since the Unix epoch.
    pub created_ms: i64,
    /// Content hash (hex XXH3-128), as served in ETag.
    pub etag: String,
}

impl PackedTile {
    /// A tile stamped now, with its ETag computed.
    pub fn new(z: u8, x: u32, y: u32, media_type: &str, data: Bytes) -> PackedTile {
        let created_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        PackedTile {
            z,
            x,
            y,
            media_type: media_type.into(),
            etag: format!("{:032x}", crate::content_hash(&data)),
            data,
            created_ms,
        }
    }
}

/// Why bytes are not a pack, or a pack could not be written.
#[derive(Debug, thiserror::Error)]
pub enum PackError {
    /// The Avro reader or writer failed.
    #[error("not a valid tile pack")]
    Avro(#[source] Box<apache_avro::Error>),
    /// A record is not shaped as the schema says.
    #[error("not a valid tile pack: {0}")]
    Shape(String),
}

impl From<apache_avro::Error> for PackError {
    fn from(e: apache_avro::Error) -> PackError {
        PackError::Avro(Box::new(e))
    }
}

fn schema() -> Schema {
    Schema::parse_str(SCHEMA).expect("the built-in schema parses")
}

/// Encodes tiles as an Avro object container file.
pub fn write_pack(tiles: &[PackedTile]) -> Result<Vec<u8>, PackError> {
    let schema = schema();
    let mut writer =
        Writer::with_codec(&schema, Vec::new(), Codec::Null).map_err(PackError::from)?;
    for t in tiles {
        let mut r = Record::new(writer.schema()).expect("the schema is a record");
        r.put("z", i32::from(t.z));
        r.put("x", i64::from(t.x));
        r.put("y", i64::from(t.y));
        r.put("media_type", t.media_type.as_str());
        r.put("data", Value::Bytes(t.data.to_vec()));
        r.put("created", Value::TimestampMillis(t.created_ms));
        r.put("etag", t.etag.as_str());
        writer.append_value(r).map_err(PackError::from)?;
    }
    writer.into_inner().map_err(PackError::from)
}

/// Decodes a pack written by any Avro writer with a compatible schema.
pub fn read_pack(bytes: &[u8]) -> Result<Vec<PackedTile>, PackError> {
    let reader = Reader::new(bytes).map_err(PackError::from)?;
    let mut out = Vec::new();
    for value in reader {
        let Value::Record(fields) = value.map_err(PackError::from)? else {
            return Err(PackError::Shape("a record was expected".into()));
        };
        let mut t = PackedTile {
            z: 0,
            x: 0,
            y: 0,
            media_type: String::new(),
            data: Bytes::new(),
            created_ms: 0,
            etag: String::new(),
        };
        for (name, v) in fields {
            let bad = || PackError::Shape(format!("field {name} has an unexpected value"));
            match (name.as_str(), v) {
                ("z", Value::Int(z)) => t.z = u8::try_from(z).map_err(|_| bad())?,
                ("x", Value::Long(x)) => t.x = u32::try_from(x).map_err(|_| bad())?,
                ("y", Value::Long(y)) => t.y = u32::try_from(y).map_err(|_| bad())?,
                ("media_type", Value::String(s)) => t.media_type = s,
                ("data", Value::Bytes(b)) => t.data = Bytes::from(b),
                ("created", Value::TimestampMillis(ms) | Value::Long(ms)) => t.created_ms = ms,
                ("etag", Value::String(s)) => t.etag = s,
                _ => return Err(bad()),
            }
        }
        out.push(t);
    }
    Ok(out)
}

/// The tiles of `existing` with `new` written over them (same z/x/y is
/// replaced), ordered by zoom, row and column.
pub fn merge(existing: Vec<PackedTile>, new: Vec<PackedTile>) -> Vec<PackedTile> {
    let mut by_key: std::collections::BTreeMap<(u8, u32, u32), PackedTile> =
        existing.into_iter().map(|t| ((t.z, t.y, t.x), t)).collect();
    for t in new {
        by_key.insert((t.z, t.y, t.x), t);
    }
    by_key.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pack_round_trips_byte_for_byte_without_compression() {
        let png = Bytes::from(vec![
            0x89, b'P', b'N', b'G', 1, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0,
        ]);
        let tiles = vec![
            PackedTile::new(3, 1, 2, "image/png", png.clone()),
            PackedTile::new(3, 2, 2, "image/png", Bytes::from(vec![7u8; 10_000])),
        ];
        let bytes = write_pack(&tiles).unwrap();
        assert_eq!(read_pack(&bytes).unwrap(), tiles);
        // Stored, not compressed: the payload is in the file as it is.
        assert!(bytes.windows(10_000).any(|w| w == [7u8; 10_000]));
        assert!(bytes.starts_with(b"Obj\x01"));
    }

    #[test]
    fn merging_keeps_other_tiles_and_replaces_same_coordinates() {
        let a = PackedTile::new(4, 0, 0, "image/png", Bytes::from_static(b"a"));
        let b = PackedTile::new(4, 1, 0, "image/png", Bytes::from_static(b"b"));
        let b2 = PackedTile::new(4, 1, 0, "image/png", Bytes::from_static(b"B"));
        let merged = merge(vec![a.clone(), b], vec![b2.clone()]);
        assert_eq!(merged, vec![a, b2]);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(read_pack(b"not avro at all").is_err());
        let bytes = write_pack(&[PackedTile::new(
            1,
            0,
            0,
            "image/png",
            Bytes::from_static(b"x"),
        )])
        .unwrap();
        assert!(read_pack(&bytes[..bytes.len() / 2]).is_err());
    }
}
