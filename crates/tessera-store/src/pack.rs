//! The pack format: the tiles of one curve-index block in one Avro object
//! container file, the schema embedded, payloads stored as they are (no
//! codec: PNG, JPEG and WebP are already compressed), and in the header's
//! metadata an index (`tessera.index`) of where each tile's bytes lie, so a
//! reader finds one tile without decoding the others, or fetches only the
//! header and that tile's byte range. See `docs/pack-format.md`.

use apache_avro::Reader;
use apache_avro::types::Value;
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

/// The header metadata key of the tile index.
pub const INDEX_KEY: &str = "tessera.index";
/// The index layout written (its first byte).
const INDEX_VERSION: u8 = 1;
/// Bytes of one index entry: z u8, x u32, y u32, offset u32, length u32,
/// created i64, little-endian.
const ENTRY_LEN: usize = 25;

/// Appends `n` as an Avro `long` (zig-zag, then base-128 varint).
fn put_long(out: &mut Vec<u8>, n: i64) {
    let mut z = ((n << 1) ^ (n >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// Appends Avro `bytes` (or `string`): the length, then the bytes.
fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_long(out, b.len() as i64);
    out.extend_from_slice(b);
}

/// Reads an Avro `long` at `*at`; `None` when the bytes end first.
fn get_long(b: &[u8], at: &mut usize) -> Option<i64> {
    let mut z: u64 = 0;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*at)?;
        *at += 1;
        z |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(((z >> 1) as i64) ^ -((z & 1) as i64));
        }
    }
    None
}

/// Lower-case hex digits of `bytes` (metadata values must be text: some
/// Avro readers, fastavro among them, decode them as UTF-8).
fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// The bytes of hex digits; `None` when they are not.
fn from_hex(hex: &[u8]) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    hex.chunks_exact(2)
        .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
        .collect()
}

/// Encodes tiles as an Avro object container file: the header (schema,
/// `avro.codec` null, the tile index), then one block per tile.
pub fn write_pack(tiles: &[PackedTile]) -> Result<Vec<u8>, PackError> {
    let data_bytes: usize = tiles.iter().map(|t| t.data.len() + 96).sum();
    let mut body = Vec::with_capacity(data_bytes);
    let mut index = Vec::with_capacity(1 + ENTRY_LEN * tiles.len());
    index.push(INDEX_VERSION);
    // The sync marker only has to be unlikely inside the data; derive it
    // from the tiles so that equal packs are equal bytes.
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    for t in tiles {
        hasher.update(t.etag.as_bytes());
    }
    let sync = hasher.digest128().to_le_bytes();
    let mut datum = Vec::new();
    for t in tiles {
        datum.clear();
        put_long(&mut datum, i64::from(t.z));
        put_long(&mut datum, i64::from(t.x));
        put_long(&mut datum, i64::from(t.y));
        put_bytes(&mut datum, t.media_type.as_bytes());
        put_long(&mut datum, t.data.len() as i64);
        let data_at = datum.len();
        datum.extend_from_slice(&t.data);
        put_long(&mut datum, t.created_ms);
        put_bytes(&mut datum, t.etag.as_bytes());
        // A block: record count, byte size, the record, the sync marker.
        put_long(&mut body, 1);
        put_long(&mut body, datum.len() as i64);
        let offset = u32::try_from(body.len() + data_at)
            .map_err(|_| PackError::Shape("a pack must stay under 4 GiB".into()))?;
        let len = u32::try_from(t.data.len())
            .map_err(|_| PackError::Shape("a tile must stay under 4 GiB".into()))?;
        body.extend_from_slice(&datum);
        body.extend_from_slice(&sync);
        index.push(t.z);
        index.extend_from_slice(&t.x.to_le_bytes());
        index.extend_from_slice(&t.y.to_le_bytes());
        index.extend_from_slice(&offset.to_le_bytes());
        index.extend_from_slice(&len.to_le_bytes());
        index.extend_from_slice(&t.created_ms.to_le_bytes());
    }
    let mut out = Vec::with_capacity(body.len() + index.len() + SCHEMA.len() + 64);
    out.extend_from_slice(b"Obj\x01");
    put_long(&mut out, 3);
    put_bytes(&mut out, b"avro.schema");
    put_bytes(&mut out, SCHEMA.as_bytes());
    put_bytes(&mut out, b"avro.codec");
    put_bytes(&mut out, b"null");
    put_bytes(&mut out, INDEX_KEY.as_bytes());
    put_bytes(&mut out, to_hex(&index).as_bytes());
    put_long(&mut out, 0);
    out.extend_from_slice(&sync);
    out.extend_from_slice(&body);
    Ok(out)
}

/// Where one tile's bytes lie in a pack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    /// Zoom.
    pub z: u8,
    /// Column.
    pub x: u32,
    /// Row from the top.
    pub y: u32,
    /// Offset of the tile's bytes in the pack object.
    pub offset: u64,
    /// Length of the tile's bytes.
    pub len: u32,
    /// When it was written, milliseconds since the Unix epoch.
    pub created_ms: i64,
}

/// A pack's tile index, read from its header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackIndex {
    /// Entries ordered by zoom, row and column.
    entries: Vec<IndexEntry>,
}

/// What the start of a pack says about its index.
#[derive(Debug, PartialEq, Eq)]
pub enum HeaderRead {
    /// The header is whole and holds an index.
    Index(PackIndex),
    /// The header is whole and holds no index (written by another Avro
    /// writer or an older tessera): decode the pack to find a tile.
    NoIndex,
    /// The header does not end within the bytes given: at least this many
    /// bytes from the start are needed.
    NeedAtLeast(usize),
}

impl PackIndex {
    /// Reads the header at the start of `bytes` (the whole pack or a
    /// prefix of it).
    pub fn read(bytes: &[u8]) -> Result<HeaderRead, PackError> {
        let short = |need: usize| Ok(HeaderRead::NeedAtLeast(need.max(bytes.len() + 1)));
        let bad = |what: &str| Err(PackError::Shape(format!("pack header: {what}")));
        if bytes.len() < 4 {
            return short(4);
        }
        if &bytes[..4] != b"Obj\x01" {
            return bad("not an Avro object container");
        }
        let mut at = 4;
        let mut index = None;
        loop {
            let Some(count) = get_long(bytes, &mut at) else {
                return short(at + 10);
            };
            if count == 0 {
                break;
            }
            if count < 0 && get_long(bytes, &mut at).is_none() {
                // A negative count is followed by the block's byte size.
                return short(at + 10);
            }
            for _ in 0..count.unsigned_abs() {
                let mut strings = [&[][..]; 2];
                for s in &mut strings {
                    let Some(len) = get_long(bytes, &mut at) else {
                        return short(at + 10);
                    };
                    let Ok(len) = usize::try_from(len) else {
                        return bad("negative length");
                    };
                    let Some(b) = bytes.get(at..at + len) else {
                        return short(at + len);
                    };
                    *s = b;
                    at += len;
                }
                if strings[0] == INDEX_KEY.as_bytes() {
                    index = Some(strings[1]);
                }
            }
        }
        let header_end = at + 16;
        if bytes.len() < header_end {
            return short(header_end);
        }
        let Some(raw) = index.and_then(from_hex) else {
            return Ok(HeaderRead::NoIndex);
        };
        if raw.first() != Some(&INDEX_VERSION) || !(raw.len() - 1).is_multiple_of(ENTRY_LEN) {
            // A later index layout: this reader decodes the pack instead.
            return Ok(HeaderRead::NoIndex);
        }
        let u32_at = |e: &[u8], i: usize| u32::from_le_bytes([e[i], e[i + 1], e[i + 2], e[i + 3]]);
        let mut entries: Vec<IndexEntry> = raw[1..]
            .chunks_exact(ENTRY_LEN)
            .map(|e| IndexEntry {
                z: e[0],
                x: u32_at(e, 1),
                y: u32_at(e, 5),
                offset: header_end as u64 + u64::from(u32_at(e, 9)),
                len: u32_at(e, 13),
                created_ms: i64::from_le_bytes(e[17..25].try_into().expect("8 bytes")),
            })
            .collect();
        entries.sort_by_key(|e| (e.z, e.y, e.x));
        Ok(HeaderRead::Index(PackIndex { entries }))
    }

    /// The entry of tile `z/x/y`, if the pack holds it.
    pub fn find(&self, z: u8, x: u32, y: u32) -> Option<&IndexEntry> {
        self.entries
            .binary_search_by_key(&(z, y, x), |e| (e.z, e.y, e.x))
            .ok()
            .map(|i| &self.entries[i])
    }

    /// Bytes this index takes in memory.
    pub fn heap_bytes(&self) -> usize {
        self.entries.len() * std::mem::size_of::<IndexEntry>()
    }

    /// The tile `z/x/y` cut out of the whole pack `bytes` (no copy), with
    /// its creation time; `None` when the pack does not hold it.
    pub fn slice(
        &self,
        bytes: &Bytes,
        z: u8,
        x: u32,
        y: u32,
    ) -> Result<Option<(Bytes, i64)>, PackError> {
        let Some(e) = self.find(z, x, y) else {
            return Ok(None);
        };
        let start = usize::try_from(e.offset).unwrap_or(usize::MAX);
        let end = start.saturating_add(e.len as usize);
        if end > bytes.len() {
            return Err(PackError::Shape(
                "index points past the end of the pack".into(),
            ));
        }
        Ok(Some((bytes.slice(start..end), e.created_ms)))
    }
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
    fn the_header_index_finds_every_tile_from_a_prefix_of_the_pack() {
        let tiles: Vec<PackedTile> = (0..64u32)
            .map(|i| {
                PackedTile::new(
                    7,
                    8 + i % 8,
                    i / 8,
                    "image/png",
                    Bytes::from(vec![i as u8; 300 + i as usize]),
                )
            })
            .collect();
        let bytes = Bytes::from(write_pack(&tiles).unwrap());
        // Every prefix shorter than the header asks for more; the header
        // alone is enough.
        let HeaderRead::Index(index) = PackIndex::read(&bytes).unwrap() else {
            panic!("no index")
        };
        let header_end =
            usize::try_from(index.entries.iter().map(|e| e.offset).min().unwrap()).unwrap();
        for cut in [0, 3, 10, 100, 1000] {
            match PackIndex::read(&bytes[..cut.min(header_end)]).unwrap() {
                HeaderRead::NeedAtLeast(n) => assert!(n > cut.min(header_end)),
                other => panic!("cut at {cut}: {other:?}"),
            }
        }
        let mut prefix_end = header_end;
        while !matches!(
            PackIndex::read(&bytes[..prefix_end]).unwrap(),
            HeaderRead::Index(_)
        ) {
            prefix_end += 1;
        }
        assert!(
            prefix_end < 4096,
            "the header of 64 tiles is small: {prefix_end}"
        );
        for t in &tiles {
            let (data, created) = index.slice(&bytes, t.z, t.x, t.y).unwrap().unwrap();
            assert_eq!(data, t.data);
            assert_eq!(created, t.created_ms);
        }
        assert_eq!(index.slice(&bytes, 7, 0, 0).unwrap(), None);
        // And any Avro reader still reads the records.
        assert_eq!(read_pack(&bytes).unwrap(), tiles);
    }

    #[test]
    fn a_pack_from_another_avro_writer_has_no_index_and_is_decoded() {
        use apache_avro::types::Record;
        use apache_avro::{Codec, Schema, Writer};
        let schema = Schema::parse_str(SCHEMA).unwrap();
        let mut writer = Writer::with_codec(&schema, Vec::new(), Codec::Null).unwrap();
        let t = PackedTile::new(3, 1, 2, "image/png", Bytes::from_static(b"png"));
        let mut r = Record::new(writer.schema()).unwrap();
        r.put("z", i32::from(t.z));
        r.put("x", i64::from(t.x));
        r.put("y", i64::from(t.y));
        r.put("media_type", t.media_type.as_str());
        r.put("data", Value::Bytes(t.data.to_vec()));
        r.put("created", Value::TimestampMillis(t.created_ms));
        r.put("etag", t.etag.as_str());
        writer.append_value(r).unwrap();
        let bytes = writer.into_inner().unwrap();
        assert_eq!(PackIndex::read(&bytes).unwrap(), HeaderRead::NoIndex);
        assert_eq!(read_pack(&bytes).unwrap(), vec![t]);
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
