//! The engine's own WAL records (rmgrs `Xlog`, `Xact`, `Storage`): checkpoints, xid
//! reservations, commit/abort, relation-file creation. Encoders and decoders live
//! together so the format is stated once.

use walrus_base::{Lsn, RelFileId, Xid};

use crate::wal::record::{DecodedRecord, Rmgr, WalRecord};

pub const XLOG_NEXT_XID: u8 = 1;
pub const XLOG_CHECKPOINT: u8 = 2;
pub const XACT_COMMIT: u8 = 1;
pub const XACT_ABORT: u8 = 2;
pub const STORAGE_CREATE: u8 = 1;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointInfo {
    pub redo: Lsn,
    pub next_xid: Xid,
    pub next_relfile: u32,
}

pub enum XlogRecord {
    NextXid(Xid),
    Checkpoint(CheckpointInfo),
}

pub fn next_xid_record(upto: u64) -> WalRecord {
    WalRecord::new(Rmgr::Xlog, XLOG_NEXT_XID, Xid::INVALID).with_main(upto.to_le_bytes().to_vec())
}

pub fn checkpoint_record(c: &CheckpointInfo) -> WalRecord {
    let mut m = Vec::with_capacity(20);
    m.extend_from_slice(&c.redo.0.to_le_bytes());
    m.extend_from_slice(&c.next_xid.0.to_le_bytes());
    m.extend_from_slice(&c.next_relfile.to_le_bytes());
    WalRecord::new(Rmgr::Xlog, XLOG_CHECKPOINT, Xid::INVALID).with_main(m)
}

pub fn decode_xlog(rec: &DecodedRecord) -> Option<XlogRecord> {
    let m = &rec.main;
    match rec.info {
        XLOG_NEXT_XID => Some(XlogRecord::NextXid(Xid(u64::from_le_bytes(
            m.get(0..8)?.try_into().ok()?,
        )))),
        XLOG_CHECKPOINT => Some(XlogRecord::Checkpoint(CheckpointInfo {
            redo: Lsn(u64::from_le_bytes(m.get(0..8)?.try_into().ok()?)),
            next_xid: Xid(u64::from_le_bytes(m.get(8..16)?.try_into().ok()?)),
            next_relfile: u32::from_le_bytes(m.get(16..20)?.try_into().ok()?),
        })),
        _ => None,
    }
}

/// Commit: relation files to unlink once the commit is durable (DROP, TRUNCATE).
/// Abort: relation files the transaction created, to unlink.
pub struct XactRecord {
    pub committed: bool,
    pub unlink: Vec<RelFileId>,
}

pub fn xact_record(xid: Xid, committed: bool, unlink: &[RelFileId]) -> WalRecord {
    let mut m = Vec::with_capacity(4 + unlink.len() * 4);
    m.extend_from_slice(&(unlink.len() as u32).to_le_bytes());
    for r in unlink {
        m.extend_from_slice(&r.0.to_le_bytes());
    }
    WalRecord::new(
        Rmgr::Xact,
        if committed { XACT_COMMIT } else { XACT_ABORT },
        xid,
    )
    .with_main(m)
}

pub fn decode_xact(rec: &DecodedRecord) -> Option<XactRecord> {
    let committed = match rec.info {
        XACT_COMMIT => true,
        XACT_ABORT => false,
        _ => return None,
    };
    let n = u32::from_le_bytes(rec.main.get(0..4)?.try_into().ok()?) as usize;
    let mut unlink = Vec::with_capacity(n.min(1024));
    for i in 0..n {
        let at = 4 + i * 4;
        unlink.push(RelFileId(u32::from_le_bytes(
            rec.main.get(at..at + 4)?.try_into().ok()?,
        )));
    }
    Some(XactRecord { committed, unlink })
}

pub fn storage_create_record(relfile: RelFileId, xid: Xid) -> WalRecord {
    WalRecord::new(Rmgr::Storage, STORAGE_CREATE, xid).with_main(relfile.0.to_le_bytes().to_vec())
}

pub fn decode_storage(rec: &DecodedRecord) -> Option<RelFileId> {
    (rec.info == STORAGE_CREATE).then_some(())?;
    Some(RelFileId(u32::from_le_bytes(
        rec.main.get(0..4)?.try_into().ok()?,
    )))
}
