//! Sequential WAL reader for recovery and tools. It stops cleanly at the true end of WAL:
//! the first place where no complete record with a matching CRC, self-LSN and prev-link
//! can be read. Stopping is never an error; a missing segment *before* a position the
//! caller requires (the checkpoint record) is detected by the caller.

use walrus_base::Lsn;

use super::record::{self, DecodedRecord, HEADER_SIZE};
use super::segment::Segments;
use crate::error::Result;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EndReason {
    NotYet,
    /// Zeros or a length outside the valid range: a clean end.
    NoRecord,
    /// A record whose CRC, self-LSN or prev-link does not match.
    Invalid(String),
    MissingSegment(u64),
}

pub struct WalReader<'a> {
    segs: &'a Segments,
    pos: Lsn,
    /// Start of the last record returned (to check the next record's prev-link).
    last: Option<Lsn>,
    pub end: EndReason,
    /// Read-ahead window: the WAL bytes at `[window_start, window_start + window.len())`.
    /// Replay reads records in order, so one large read serves hundreds of records
    /// (a pread per header and per body was the cost of recovery: two system calls for
    /// every ~200-byte record).
    window: Vec<u8>,
    window_start: Lsn,
}

/// Bytes read ahead at a time.
const READ_AHEAD: usize = 1 << 20;

impl<'a> WalReader<'a> {
    pub fn new(segs: &'a Segments, start: Lsn) -> WalReader<'a> {
        WalReader {
            segs,
            pos: start,
            last: None,
            end: EndReason::NotYet,
            window: Vec::new(),
            window_start: start,
        }
    }

    /// Position of the next record to read (after the end: the end of valid WAL).
    pub fn position(&self) -> Lsn {
        self.pos
    }
    pub fn last_record_start(&self) -> Option<Lsn> {
        self.last
    }

    /// The next record, borrowing its payload from the reader's window (valid until the
    /// next call).
    pub fn next_record(&mut self) -> Result<Option<DecodedRecord<'_>>> {
        if self.end != EndReason::NotYet {
            return Ok(None);
        }
        let pos = self.pos;
        let Some(off) = self.window_offset(pos, HEADER_SIZE)? else {
            self.end = EndReason::MissingSegment(self.first_missing_segment());
            return Ok(None);
        };
        let Some(len) = record::header_len(&self.window[off..off + HEADER_SIZE]) else {
            self.end = EndReason::NoRecord;
            return Ok(None);
        };
        let Some(off) = self.window_offset(pos, len)? else {
            self.end = EndReason::MissingSegment(self.first_missing_segment());
            return Ok(None);
        };
        match record::decode(&self.window[off..off + len], pos) {
            Ok(rec) => {
                if let Some(last) = self.last {
                    if rec.prev != last {
                        self.end = EndReason::Invalid(format!(
                            "record at {} links to {}, previous record is at {last}",
                            rec.lsn, rec.prev
                        ));
                        return Ok(None);
                    }
                }
                self.last = Some(rec.lsn);
                self.pos = self.pos.add(record::padded_len(len));
                Ok(Some(rec))
            }
            Err(why) => {
                self.end = EndReason::Invalid(why);
                Ok(None)
            }
        }
    }

    /// Where `len` bytes of WAL at `at` start in the window, refilling the window from
    /// `at` when it does not hold them. `None`: a segment is missing before `len` bytes
    /// could be read.
    fn window_offset(&mut self, at: Lsn, len: usize) -> Result<Option<usize>> {
        let start = self.window_start.0;
        let held = at.0 >= start && at.0 + len as u64 <= start + self.window.len() as u64;
        if !held {
            self.window.resize(len.max(READ_AHEAD), 0);
            let n = self.segs.read(at, &mut self.window)?;
            self.window.truncate(n);
            self.window_start = at;
            if n < len {
                return Ok(None);
            }
        }
        Ok(Some((at.0 - self.window_start.0) as usize))
    }

    /// After `window_offset` returned `None`: the window ends where the missing segment
    /// starts.
    fn first_missing_segment(&self) -> u64 {
        self.segs
            .segno(self.window_start.add(self.window.len() as u64))
    }
}
