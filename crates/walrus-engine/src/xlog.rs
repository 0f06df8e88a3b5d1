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

/// A record kind's name for tools (`walrus waldump`), e.g. `Heap/UPDATE_SAME_PAGE`.
pub fn kind_name(rmgr: Rmgr, info: u8) -> &'static str {
    use crate::access::{btree, heap};
    match (rmgr, info) {
        (Rmgr::Xlog, XLOG_NEXT_XID) => "Xlog/NEXT_XID",
        (Rmgr::Xlog, XLOG_CHECKPOINT) => "Xlog/CHECKPOINT",
        (Rmgr::Xact, XACT_COMMIT) => "Xact/COMMIT",
        (Rmgr::Xact, XACT_ABORT) => "Xact/ABORT",
        (Rmgr::Storage, STORAGE_CREATE) => "Storage/CREATE",
        (Rmgr::Heap, heap::INFO_INSERT) => "Heap/INSERT",
        (Rmgr::Heap, heap::INFO_UPDATE_SAME_PAGE) => "Heap/UPDATE_SAME_PAGE",
        (Rmgr::Heap, heap::INFO_UPDATE_TWO_PAGES) => "Heap/UPDATE_TWO_PAGES",
        (Rmgr::Heap, heap::INFO_DELETE) => "Heap/DELETE",
        (Rmgr::Heap, heap::INFO_PRUNE) => "Heap/PRUNE",
        (Rmgr::Heap, heap::INFO_VACUUM) => "Heap/VACUUM",
        (Rmgr::Heap, heap::INFO_FREEZE) => "Heap/FREEZE",
        (Rmgr::Heap, heap::INFO_MULTI_INSERT) => "Heap/MULTI_INSERT",
        (Rmgr::Btree, btree::INFO_INSERT) => "Btree/INSERT",
        (Rmgr::Btree, btree::INFO_SPLIT) => "Btree/SPLIT",
        (Rmgr::Btree, btree::INFO_NEW_ROOT) => "Btree/NEW_ROOT",
        (Rmgr::Btree, btree::INFO_DELETE) => "Btree/DELETE",
        (Rmgr::Btree, btree::INFO_PAGE_IMAGE) => "Btree/PAGE_IMAGE",
        (Rmgr::Sequence, crate::access::sequence::INFO_SET) => "Sequence/SET",
        _ => "unknown",
    }
}

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
/// Abort: relation files the transaction created, to unlink. Logged as the bare list of
/// relfile ids (no count: the record's main-data length gives it), so the usual commit,
/// which unlinks nothing, is a bare 40-byte header.
pub struct XactRecord {
    pub committed: bool,
    pub unlink: Vec<RelFileId>,
}

pub fn xact_record(xid: Xid, committed: bool, unlink: &[RelFileId]) -> WalRecord {
    let mut m = Vec::with_capacity(unlink.len() * 4);
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
    if !rec.main.len().is_multiple_of(4) {
        return None;
    }
    let unlink = rec
        .main
        .chunks_exact(4)
        .map(|c| RelFileId(u32::from_le_bytes([c[0], c[1], c[2], c[3]])))
        .collect();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::record::{decode, encode, finish};

    /// The record's bytes as the log holds them (decode borrows from them).
    fn encoded(rec: &WalRecord) -> Vec<u8> {
        let mut buf = Vec::new();
        encode(rec, &vec![None; rec.blocks.len()], &mut buf);
        finish(&mut buf, Lsn(4096), Lsn(0));
        buf
    }

    #[test]
    fn a_plain_commit_is_a_bare_header_and_unlink_lists_roundtrip() {
        let plain_bytes = encoded(&xact_record(Xid(7), true, &[]));
        let plain = decode(&plain_bytes, Lsn(4096)).unwrap();
        assert_eq!(plain.total_len, crate::wal::record::HEADER_SIZE);
        let x = decode_xact(&plain).unwrap();
        assert!(x.committed && x.unlink.is_empty());
        let drop_bytes = encoded(&xact_record(Xid(8), false, &[RelFileId(40), RelFileId(41)]));
        let drop = decode(&drop_bytes, Lsn(4096)).unwrap();
        let x = decode_xact(&drop).unwrap();
        assert!(!x.committed);
        assert_eq!(x.unlink, vec![RelFileId(40), RelFileId(41)]);
        let mut bad = drop.clone();
        bad.main = &bad.main[..bad.main.len() - 1];
        assert!(
            decode_xact(&bad).is_none(),
            "a ragged unlink list is not decodable"
        );
    }
}
