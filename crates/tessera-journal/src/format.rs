//! The bytes on disk: segment headers and record frames (see
//! `docs/journal-format.md`).

/// First bytes of every segment file.
pub const MAGIC: [u8; 8] = *b"TSRJRNL\0";
/// Version of the format written.
pub const VERSION: u32 = 1;
/// Segment header: magic, version, segment id, header CRC32C, zero padding.
pub const HEADER_LEN: u32 = 32;
/// Record frame header: length, CRC32C, segment id, sequence, durable mark, kind.
pub const FRAME_LEN: usize = 4 + 4 + 8 + 8 + 8 + 1;

/// What a record means to the layer above.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum RecordKind {
    /// A new value.
    Add = 1,
    /// A value replacing an earlier one.
    Update = 2,
    /// A removal.
    Delete = 3,
}

impl RecordKind {
    fn from_u8(b: u8) -> Option<RecordKind> {
        match b {
            1 => Some(RecordKind::Add),
            2 => Some(RecordKind::Update),
            3 => Some(RecordKind::Delete),
            _ => None,
        }
    }
}

/// Encodes a segment header.
pub fn header(segment: u64) -> [u8; HEADER_LEN as usize] {
    let mut h = [0u8; HEADER_LEN as usize];
    h[0..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h[12..20].copy_from_slice(&segment.to_le_bytes());
    let crc = crc32c::crc32c(&h[0..20]);
    h[20..24].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Checks a segment header; returns the segment id it names.
pub fn parse_header(h: &[u8]) -> Result<u64, String> {
    if h.len() < HEADER_LEN as usize {
        return Err("short header".into());
    }
    if h[0..8] != MAGIC {
        return Err("bad magic".into());
    }
    let crc = u32::from_le_bytes(h[20..24].try_into().expect("4 bytes"));
    if crc32c::crc32c(&h[0..20]) != crc {
        return Err("header checksum mismatch".into());
    }
    let version = u32::from_le_bytes(h[8..12].try_into().expect("4 bytes"));
    if version != VERSION {
        return Err(format!(
            "format version {version}, this build reads {VERSION}"
        ));
    }
    Ok(u64::from_le_bytes(h[12..20].try_into().expect("8 bytes")))
}

/// The fixed part of a record, as written before its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    /// Segment the record was written to (stale bytes of a recycled
    /// segment carry an older id and are never taken for records).
    pub segment: u64,
    /// Journal-wide sequence number, increasing by one per record.
    pub seq: u64,
    /// Global position up to which the journal was known to be synced when
    /// this record was written: a bad record before it is corruption, not a
    /// torn tail.
    pub durable: u64,
    /// Kind.
    pub kind: RecordKind,
}

/// Appends a framed record to `out`.
pub fn encode(out: &mut Vec<u8>, frame: &Frame, payload: &[u8]) {
    let start = out.len();
    let len = u32::try_from(payload.len()).expect("record size is checked before encoding");
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&frame.segment.to_le_bytes());
    out.extend_from_slice(&frame.seq.to_le_bytes());
    out.extend_from_slice(&frame.durable.to_le_bytes());
    out.push(frame.kind as u8);
    out.extend_from_slice(payload);
    let crc = checksum(&out[start..]);
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// CRC32C of a frame with its CRC field skipped.
fn checksum(frame: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&frame[0..4]);
    crc32c::crc32c_append(crc, &frame[8..])
}

/// Why bytes at an offset are not a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invalid {
    /// Zeros: never-written (pre-allocated) space.
    Empty,
    /// A whole record of another segment: what a recycled segment holds
    /// past its new records. The end of this segment's records.
    Stale,
    /// Anything else: torn, stale or corrupt bytes.
    Bad,
}

/// Decodes the record starting at `buf[0]` if it is whole and its checksum
/// holds for `segment`; returns the frame, the payload range and the total
/// frame length.
pub fn decode(buf: &[u8], segment: u64) -> Result<(Frame, std::ops::Range<usize>), Invalid> {
    if buf.len() < FRAME_LEN {
        return Err(if buf.iter().all(|b| *b == 0) {
            Invalid::Empty
        } else {
            Invalid::Bad
        });
    }
    let len = u32::from_le_bytes(buf[0..4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(buf[4..8].try_into().expect("4 bytes"));
    if len == 0 && crc == 0 && buf[..FRAME_LEN].iter().all(|b| *b == 0) {
        return Err(Invalid::Empty);
    }
    let seg = u64::from_le_bytes(buf[8..16].try_into().expect("8 bytes"));
    if FRAME_LEN + len > buf.len() {
        return Err(Invalid::Bad);
    }
    let whole = &buf[..FRAME_LEN + len];
    if checksum(whole) != crc {
        return Err(Invalid::Bad);
    }
    if seg != segment {
        return Err(if seg < segment {
            Invalid::Stale
        } else {
            Invalid::Bad
        });
    }
    let kind = RecordKind::from_u8(buf[32]).ok_or(Invalid::Bad)?;
    Ok((
        Frame {
            segment: seg,
            seq: u64::from_le_bytes(buf[16..24].try_into().expect("8 bytes")),
            durable: u64::from_le_bytes(buf[24..32].try_into().expect("8 bytes")),
            kind,
        },
        FRAME_LEN..FRAME_LEN + len,
    ))
}

/// A position as one ordered number: segment id in the high 32 bits.
pub fn global(segment: u64, offset: u32) -> u64 {
    (segment << 32) | u64::from(offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_round_trips_and_any_flipped_bit_is_caught() {
        let frame = Frame {
            segment: 7,
            seq: 42,
            durable: global(7, 100),
            kind: RecordKind::Update,
        };
        let mut buf = Vec::new();
        encode(&mut buf, &frame, b"hello tiles");
        let (f, range) = decode(&buf, 7).unwrap();
        assert_eq!(f, frame);
        assert_eq!(&buf[range], b"hello tiles");
        assert_eq!(
            decode(&buf, 8),
            Err(Invalid::Stale),
            "an older segment's record"
        );
        assert_eq!(
            decode(&buf, 6),
            Err(Invalid::Bad),
            "a newer segment's record"
        );
        for bit in 0..buf.len() * 8 {
            let mut bad = buf.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(decode(&bad, 7).is_err(), "bit {bit} flipped went unnoticed");
        }
        for cut in 0..buf.len() {
            assert!(decode(&buf[..cut], 7).is_err(), "cut at {cut}");
        }
        assert_eq!(decode(&[0; 64], 7), Err(Invalid::Empty));
    }

    #[test]
    fn headers_check_magic_version_and_checksum() {
        let h = header(3);
        assert_eq!(parse_header(&h), Ok(3));
        let mut bad = h;
        bad[13] ^= 1;
        assert!(parse_header(&bad).is_err());
        assert!(parse_header(&[0; 32]).is_err());
    }
}
