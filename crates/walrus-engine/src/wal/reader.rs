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
    buf: Vec<u8>,
}

impl<'a> WalReader<'a> {
    pub fn new(segs: &'a Segments, start: Lsn) -> WalReader<'a> {
        WalReader {
            segs,
            pos: start,
            last: None,
            end: EndReason::NotYet,
            buf: Vec::new(),
        }
    }

    /// Position of the next record to read (after the end: the end of valid WAL).
    pub fn position(&self) -> Lsn {
        self.pos
    }
    pub fn last_record_start(&self) -> Option<Lsn> {
        self.last
    }

    pub fn next_record(&mut self) -> Result<Option<DecodedRecord>> {
        if self.end != EndReason::NotYet {
            return Ok(None);
        }
        let mut hdr = [0u8; HEADER_SIZE];
        let n = self.segs.read(self.pos, &mut hdr)?;
        if n < HEADER_SIZE {
            self.end = EndReason::MissingSegment(self.segs.segno(self.pos.add(n as u64)));
            return Ok(None);
        }
        let Some(len) = record::header_len(&hdr) else {
            self.end = EndReason::NoRecord;
            return Ok(None);
        };
        self.buf.resize(len, 0);
        let n = self.segs.read(self.pos, &mut self.buf)?;
        if n < len {
            self.end = EndReason::MissingSegment(self.segs.segno(self.pos.add(n as u64)));
            return Ok(None);
        }
        match record::decode(&self.buf, self.pos) {
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
}
