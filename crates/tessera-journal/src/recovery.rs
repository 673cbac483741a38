//! Opening a journal: scan every segment, replay whole records in order,
//! cut a torn tail, report damage that synced data follows.

use std::collections::BTreeMap;
use std::fs::File;
use std::sync::Arc;

use crate::format::{FRAME_LEN, HEADER_LEN, Invalid, decode, global, parse_header};
use crate::segment;
use crate::{JournalError, JournalOptions, Position, Record, RecordKind};

/// What opening found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Records replayed (at or after the requested start).
    pub replayed: u64,
    /// Whole records found in total.
    pub records: u64,
    /// Segment files in use.
    pub segments: usize,
    /// Where a torn tail was cut, if one was.
    pub cut_at: Option<Position>,
}

/// Recovery's result for the writer.
#[derive(Debug)]
pub(crate) struct Recovered {
    pub files: BTreeMap<u64, Arc<File>>,
    pub report: Recovery,
    /// Segment to continue in and the offset to write at.
    pub active: Option<(u64, u32)>,
    /// Highest segment id ever used (new segments get larger ids).
    pub max_id: u64,
    pub next_seq: u64,
    /// End of the records in each kept segment (segments skipped by a
    /// checkpoint count as full).
    pub ends: BTreeMap<u64, u32>,
}

struct Scan {
    report: Recovery,
    expect_seq: Option<u64>,
    /// First bad position, once one was met.
    bad: Option<(Position, String)>,
    /// Highest durable mark of any whole record after the bad position.
    durable_after_bad: u64,
    /// Where the records of a segment stopped at bytes that are no record,
    /// until the next segment says whether that was damage or the end of
    /// its records (see [`resolve_suspect`]).
    suspect: Option<Suspect>,
    end: Option<(u64, u32)>,
    /// End of the records in each segment scanned.
    ends: BTreeMap<u64, u32>,
}

pub(crate) fn recover(
    dir: &std::path::Path,
    options: &JournalOptions,
    from: Option<Position>,
    mut replay: impl FnMut(Record<'_>),
) -> Result<Recovered, JournalError> {
    let ids = segment::list(dir).map_err(|e| JournalError::io("list segments", e))?;
    let mut files = BTreeMap::new();
    let mut scan = Scan {
        report: Recovery::default(),
        expect_seq: None,
        bad: None,
        durable_after_bad: 0,
        suspect: None,
        end: None,
        ends: BTreeMap::new(),
    };
    let mut buf = Vec::new();
    for (i, &id) in ids.iter().enumerate() {
        let file = segment::open(dir, id).map_err(|e| JournalError::io("open segment", e))?;
        let len = file
            .metadata()
            .map_err(|e| JournalError::io("stat segment", e))?
            .len()
            .min(options.segment_size);
        let skipped = from.is_some_and(|f| id < f.segment);
        buf.resize(
            if skipped {
                HEADER_LEN as usize
            } else {
                len as usize
            },
            0,
        );
        let n = segment::read_upto(&file, &mut buf, 0)
            .map_err(|e| JournalError::io("read segment", e))?;
        buf.truncate(n);
        match parse_header(&buf) {
            Ok(h) if h == id => {}
            // The newest segment may be a recycled file whose creation did
            // not finish: it still names the segment it was, and holds no
            // record of this one. Back to the free pool with it.
            Ok(h) if i + 1 == ids.len() && scan.bad.is_none() && h < id => {
                drop(file);
                segment::retire(dir, id).map_err(|e| JournalError::io("retire segment", e))?;
                break;
            }
            Ok(h) => {
                return Err(JournalError::Corrupt {
                    segment: id,
                    offset: 0,
                    reason: format!("header names segment {h}"),
                });
            }
            // The newest segment may have died while being created: it
            // holds nothing yet.
            Err(_) if i + 1 == ids.len() && scan.bad.is_none() => {
                drop(file);
                std::fs::remove_file(segment::path(dir, id))
                    .map_err(|e| JournalError::io("remove segment", e))?;
                break;
            }
            Err(reason) => {
                confirm_suspect(&mut scan);
                if scan.bad.is_none() {
                    scan.bad = Some((
                        Position {
                            segment: id,
                            offset: 0,
                        },
                        reason,
                    ));
                }
                continue;
            }
        }
        // A checkpoint at `from` covers the segments before it: they are
        // not read again.
        if from.is_none_or(|f| id >= f.segment) {
            scan_segment(&mut scan, id, &buf, from, &mut replay);
        }
        files.insert(id, Arc::new(file));
    }
    // Bytes after the records of the last segment are a torn tail.
    confirm_suspect(&mut scan);
    if let Some((pos, reason)) = &scan.bad
        && scan.durable_after_bad > global(pos.segment, pos.offset)
    {
        return Err(JournalError::Corrupt {
            segment: pos.segment,
            offset: pos.offset,
            reason: format!("{reason}, and synced records follow it"),
        });
    }
    let max_id = ids.last().copied().unwrap_or(0);
    let mut active = scan.end;
    if let Some((pos, _)) = scan.bad {
        scan.report.cut_at = Some(pos);
        cut_tail(dir, options, &mut files, pos)?;
        active = Some((pos.segment, pos.offset.max(HEADER_LEN)));
    }
    if let Some((id, _)) = active {
        // Everything kept is made durable now, so that the durable marks
        // written from here on are true.
        if let Some(f) = files.get(&id) {
            f.sync_all()
                .map_err(|e| JournalError::io("sync segment", e))?;
        }
    }
    scan.report.segments = files.len();
    let mut ends = BTreeMap::new();
    for id in files.keys() {
        let end = scan
            .ends
            .get(id)
            .copied()
            .unwrap_or(options.segment_size as u32);
        let end = match scan.report.cut_at {
            Some(cut) if cut.segment == *id => cut.offset.max(HEADER_LEN),
            _ => end,
        };
        ends.insert(*id, end.max(HEADER_LEN));
    }
    Ok(Recovered {
        ends,
        files,
        report: scan.report,
        active,
        max_id,
        next_seq: scan.expect_seq.unwrap_or(1),
    })
}

fn scan_segment(
    scan: &mut Scan,
    id: u64,
    buf: &[u8],
    from: Option<Position>,
    replay: &mut impl FnMut(Record<'_>),
) {
    let mut off = HEADER_LEN as usize;
    resolve_suspect(scan, id, buf);
    if scan.bad.is_some() {
        look_past_damage(scan, id, buf, off);
        return;
    }
    loop {
        let position = Position {
            segment: id,
            offset: off as u32,
        };
        match decode(buf.get(off..).unwrap_or(&[]), id) {
            Ok((frame, range)) if scan.expect_seq.is_none_or(|s| s == frame.seq) => {
                scan.expect_seq = Some(frame.seq + 1);
                scan.report.records += 1;
                if from.is_none_or(|f| position >= f) {
                    let kind: RecordKind = frame.kind;
                    replay(Record {
                        position,
                        seq: frame.seq,
                        kind,
                        payload: &buf[off + range.start..off + range.end],
                    });
                    scan.report.replayed += 1;
                }
                off += range.end;
                scan.end = Some((id, off as u32));
                scan.ends.insert(id, off as u32);
            }
            Ok(_) => {
                scan.bad = Some((position, "sequence number out of order".into()));
                look_past_damage(scan, id, buf, off + 1);
                return;
            }
            Err(Invalid::Empty | Invalid::Stale) => {
                scan.end = Some((id, off as u32));
                scan.ends.insert(id, off as u32);
                return;
            }
            Err(Invalid::Bad) => {
                scan.suspect = Some(Suspect {
                    position,
                    durable_after: Scan::durable_marks_after(id, buf, off + 1),
                });
                scan.end = Some((id, off as u32));
                scan.ends.insert(id, off as u32);
                return;
            }
        }
    }
}

/// Bytes that are no record where a segment's records stop.
struct Suspect {
    position: Position,
    /// Highest durable mark of whole records of that segment after them.
    durable_after: u64,
}

/// Decides what the bytes after the previous segment's last record were.
///
/// A recycled segment keeps the records of its former life after the new
/// ones, and they need not start where the new ones end: the bytes there can
/// look like a damaged record. Sequence numbers run on across segments, so
/// when this segment's first record is the very next one, nothing was lost:
/// those bytes were the old life's. Otherwise they were damage (or a torn
/// tail, when nothing durable follows).
fn resolve_suspect(scan: &mut Scan, id: u64, buf: &[u8]) {
    let Some(suspect) = &scan.suspect else {
        return;
    };
    let continues = match decode(buf.get(HEADER_LEN as usize..).unwrap_or(&[]), id) {
        Ok((frame, _)) => scan.expect_seq == Some(frame.seq),
        Err(_) => false,
    };
    if continues && suspect.durable_after == 0 {
        scan.suspect = None;
    } else {
        confirm_suspect(scan);
    }
}

/// Takes a pending [`Suspect`] as the first damage.
fn confirm_suspect(scan: &mut Scan) {
    if let Some(s) = scan.suspect.take()
        && scan.bad.is_none()
    {
        scan.bad = Some((s.position, "record checksum mismatch".into()));
        scan.durable_after_bad = scan.durable_after_bad.max(s.durable_after);
    }
}

/// After damage, looks for any whole record further on and remembers the
/// highest durable mark among them.
fn look_past_damage(scan: &mut Scan, id: u64, buf: &[u8], start: usize) {
    scan.durable_after_bad = scan
        .durable_after_bad
        .max(Scan::durable_marks_after(id, buf, start));
}

impl Scan {
    /// The highest durable mark of the whole records of segment `id` found
    /// in `buf` from `start` on (0 when there are none).
    fn durable_marks_after(id: u64, buf: &[u8], start: usize) -> u64 {
        let tag = id.to_le_bytes();
        let mut highest = 0;
        let mut off = start;
        while off + FRAME_LEN <= buf.len() {
            if buf[off + 8..off + 16] == tag
                && let Ok((frame, range)) = decode(&buf[off..], id)
            {
                highest = highest.max(frame.durable);
                off += range.end;
                continue;
            }
            off += 1;
        }
        highest
    }
}

/// Drops what follows a torn tail: later segments are removed, the rest of
/// the cut segment is zeroed and its full size reserved again.
fn cut_tail(
    dir: &std::path::Path,
    options: &JournalOptions,
    files: &mut BTreeMap<u64, Arc<File>>,
    at: Position,
) -> Result<(), JournalError> {
    let later: Vec<u64> = files.range(at.segment + 1..).map(|(id, _)| *id).collect();
    for id in later {
        files.remove(&id);
        std::fs::remove_file(segment::path(dir, id))
            .map_err(|e| JournalError::io("remove segment", e))?;
    }
    if at.offset < HEADER_LEN {
        // The cut segment's header itself is bad: start it afresh.
        files.remove(&at.segment);
        std::fs::remove_file(segment::path(dir, at.segment))
            .map_err(|e| JournalError::io("remove segment", e))?;
        return Ok(());
    }
    if let Some(file) = files.get(&at.segment) {
        use std::os::unix::fs::FileExt;
        let zeros = vec![0u8; 1 << 20];
        let mut off = u64::from(at.offset);
        let end = file
            .metadata()
            .map_err(|e| JournalError::io("stat segment", e))?
            .len();
        while off < end {
            let n = (end - off).min(zeros.len() as u64) as usize;
            file.write_all_at(&zeros[..n], off)
                .map_err(|e| JournalError::io("zero torn tail", e))?;
            off += n as u64;
        }
        segment::preallocate(file, options.segment_size)
            .map_err(|e| JournalError::io("reserve segment", e))?;
        file.sync_all()
            .map_err(|e| JournalError::io("sync segment", e))?;
    }
    segment::sync_dir(dir).map_err(|e| JournalError::io("sync directory", e))
}

/// Reads and verifies one record.
pub(crate) fn read_record(
    file: &File,
    at: Position,
    out: &mut Vec<u8>,
) -> Result<RecordKind, JournalError> {
    let corrupt = |reason: &str| JournalError::Corrupt {
        segment: at.segment,
        offset: at.offset,
        reason: reason.into(),
    };
    let mut head = [0u8; FRAME_LEN];
    let n = segment::read_upto(file, &mut head, u64::from(at.offset))
        .map_err(|e| JournalError::io("read", e))?;
    if n < FRAME_LEN {
        return Err(corrupt("record header past the end of the segment"));
    }
    let len = u32::from_le_bytes(head[0..4].try_into().expect("4 bytes")) as usize;
    out.clear();
    out.resize(FRAME_LEN + len, 0);
    let n = segment::read_upto(file, out, u64::from(at.offset))
        .map_err(|e| JournalError::io("read", e))?;
    if n < out.len() {
        return Err(corrupt("record past the end of the segment"));
    }
    let (frame, range) =
        decode(out, at.segment).map_err(|_| corrupt("record checksum mismatch"))?;
    out.copy_within(range.clone(), 0);
    out.truncate(range.len());
    Ok(frame.kind)
}
