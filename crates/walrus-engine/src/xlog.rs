//! The engine's own WAL records (rmgrs `Xlog`, `Xact`, `Storage`): checkpoints, xid
//! reservations, commit/abort, relation-file creation. Encoders and decoders live
//! together so the format is stated once.

use walrus_base::{Lsn, RelFileId, Xid};

use crate::wal::record::{DecodedRecord, Rmgr, WalRecord};

pub const XLOG_NEXT_XID: u8 = 1;
pub const XLOG_CHECKPOINT: u8 = 2;
pub const XACT_COMMIT: u8 = 1;
pub const XACT_ABORT: u8 = 2;
/// A commit whose transaction had subtransactions (savepoints) that wrote: their xids
/// come first in the record, so redo marks them committed with their transaction.
pub const XACT_COMMIT_SUBXACTS: u8 = 3;
/// Subxids of a commit that follows, when one record cannot hold them all.
pub const XACT_SUBXIDS: u8 = 4;
pub const STORAGE_CREATE: u8 = 1;

/// A record kind's name for tools (`walrus waldump`), e.g. `Heap/UPDATE_SAME_PAGE`.
pub fn kind_name(rmgr: Rmgr, info: u8) -> &'static str {
    use crate::access::{btree, heap};
    match (rmgr, info) {
        (Rmgr::Xlog, XLOG_NEXT_XID) => "Xlog/NEXT_XID",
        (Rmgr::Xlog, XLOG_CHECKPOINT) => "Xlog/CHECKPOINT",
        (Rmgr::Xact, XACT_COMMIT) => "Xact/COMMIT",
        (Rmgr::Xact, XACT_ABORT) => "Xact/ABORT",
        (Rmgr::Xact, XACT_COMMIT_SUBXACTS) => "Xact/COMMIT_SUBXACTS",
        (Rmgr::Xact, XACT_SUBXIDS) => "Xact/SUBXIDS",
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
/// which unlinks nothing, is a bare 40-byte header. A commit whose transaction had
/// subtransactions that wrote lists their xids first (`XACT_COMMIT_SUBXACTS`); more
/// than one record holds are carried by `XACT_SUBXIDS` records just before it.
pub struct XactRecord {
    pub kind: XactKind,
    pub unlink: Vec<RelFileId>,
    /// Subtransaction xids committed with this record's xid (`Commit`), or carried
    /// ahead of its commit record (`SubxidsAhead`).
    pub subxids: Vec<Xid>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XactKind {
    Commit,
    Abort,
    /// Part of the subxid list of the commit record that follows for the same xid.
    SubxidsAhead,
}

/// Subxids one record carries: a record stays well under `WAL_RECORD_BYTES_MAX`.
const SUBXIDS_PER_RECORD: usize = 2048;

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

/// The records of `xid`'s commit, in order: its subtransactions' xids beyond what one
/// record carries go ahead in `XACT_SUBXIDS` records, then the commit record itself.
/// The caller inserts them all under the shared commit barrier, so a checkpoint's redo
/// point never falls between them (redo would miss the xids ahead of it), and a crash
/// before the last one leaves the transaction uncommitted (the ones ahead mean nothing
/// without it).
pub fn commit_records(xid: Xid, subxids: &[Xid], unlink: &[RelFileId]) -> Vec<WalRecord> {
    if subxids.is_empty() {
        return vec![xact_record(xid, true, unlink)];
    }
    let chunks: Vec<&[Xid]> = subxids.chunks(SUBXIDS_PER_RECORD).collect();
    let (last, ahead) = chunks.split_last().expect("not empty");
    let xid_list = |m: &mut Vec<u8>, list: &[Xid]| {
        for x in list {
            m.extend_from_slice(&x.0.to_le_bytes());
        }
    };
    let mut out = Vec::with_capacity(chunks.len());
    for list in ahead {
        let mut m = Vec::with_capacity(list.len() * 8);
        xid_list(&mut m, list);
        out.push(WalRecord::new(Rmgr::Xact, XACT_SUBXIDS, xid).with_main(m));
    }
    let mut m = Vec::with_capacity(4 + last.len() * 8 + unlink.len() * 4);
    let n = u32::try_from(last.len()).expect("a chunk's length fits");
    m.extend_from_slice(&n.to_le_bytes());
    xid_list(&mut m, last);
    for r in unlink {
        m.extend_from_slice(&r.0.to_le_bytes());
    }
    out.push(WalRecord::new(Rmgr::Xact, XACT_COMMIT_SUBXACTS, xid).with_main(m));
    out
}

pub fn decode_xact(rec: &DecodedRecord) -> Option<XactRecord> {
    let xids = |bytes: &[u8]| -> Vec<Xid> {
        bytes
            .chunks_exact(8)
            .map(|c| Xid(u64::from_le_bytes(c.try_into().expect("8 bytes"))))
            .collect()
    };
    let mut rest = rec.main;
    let mut subxids = Vec::new();
    let kind = match rec.info {
        XACT_COMMIT => XactKind::Commit,
        XACT_ABORT => XactKind::Abort,
        XACT_COMMIT_SUBXACTS => {
            let n = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
            let end = 4 + n.checked_mul(8)?;
            subxids = xids(rest.get(4..end)?);
            rest = &rest[end..];
            XactKind::Commit
        }
        XACT_SUBXIDS => {
            if !rest.len().is_multiple_of(8) {
                return None;
            }
            return Some(XactRecord {
                kind: XactKind::SubxidsAhead,
                unlink: Vec::new(),
                subxids: xids(rest),
            });
        }
        _ => return None,
    };
    if !rest.len().is_multiple_of(4) {
        return None;
    }
    let unlink = rest
        .chunks_exact(4)
        .map(|c| RelFileId(u32::from_le_bytes([c[0], c[1], c[2], c[3]])))
        .collect();
    Some(XactRecord {
        kind,
        unlink,
        subxids,
    })
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
        assert!(x.kind == XactKind::Commit && x.unlink.is_empty());
        let drop_bytes = encoded(&xact_record(Xid(8), false, &[RelFileId(40), RelFileId(41)]));
        let drop = decode(&drop_bytes, Lsn(4096)).unwrap();
        let x = decode_xact(&drop).unwrap();
        assert_eq!(x.kind, XactKind::Abort);
        assert_eq!(x.unlink, vec![RelFileId(40), RelFileId(41)]);
        let mut bad = drop.clone();
        bad.main = &bad.main[..bad.main.len() - 1];
        assert!(
            decode_xact(&bad).is_none(),
            "a ragged unlink list is not decodable"
        );
    }

    /// A commit with more subxids than one record carries: records ahead of it carry
    /// the rest, each within the record size limit, and together they list every one.
    #[test]
    fn a_commit_with_many_subxids_spans_records_that_list_them_all() {
        let subxids: Vec<Xid> = (100..100 + 5_000).map(Xid).collect();
        let records = commit_records(Xid(99), &subxids, &[RelFileId(5)]);
        assert_eq!(records.len(), 3);
        let mut listed = Vec::new();
        for (i, rec) in records.iter().enumerate() {
            let bytes = encoded(rec);
            let d = decode(&bytes, Lsn(4096)).unwrap();
            assert_eq!(d.xid, Xid(99));
            let x = decode_xact(&d).unwrap();
            let last = i == records.len() - 1;
            assert_eq!(x.kind == XactKind::Commit, last);
            assert_eq!(x.unlink.is_empty(), !last);
            listed.extend(x.subxids);
        }
        assert_eq!(listed, subxids);
        let none = commit_records(Xid(99), &[], &[]);
        assert_eq!(none.len(), 1);
        assert_eq!(none[0].info, XACT_COMMIT, "no subxids: the plain format");
    }
}
