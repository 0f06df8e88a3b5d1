//! Heap tuple header and MVCC visibility (PostgreSQL's HeapTupleSatisfiesMVCC).
//!
//! ```text
//!  0         8         16     20     24          28         30         32
//!  +---------+---------+------+------+-----------+----------+----------+------+
//!  | xmin u64| xmax u64| cmin | cmax | ctid block| ctid off |infomask  | row  |
//!  +---------+---------+------+------+-----------+----------+----------+------+
//! ```
//! The row starts right after the 32 header bytes (no padding: values are read with
//! unaligned loads). Format version 4 dropped the 8 padding bytes versions 2 and 3 kept
//! there, which made a pgbench account row 148 bytes of page instead of 140 (55 rows a
//! page instead of 58).
//! Hint bits (`XMIN_COMMITTED`, …) cache clog answers. They are set only while the page
//! is exclusively latched for a change that is WAL-logged anyway, so a hint never dirties
//! a page on its own and every page write stays covered by the protection mode.

use walrus_base::{Tid, Xid};

use crate::error::{Error, Result};
use crate::txn::clog::XidStatus;
use crate::txn::{Snapshot, TxnManager};

pub const TUPLE_HEADER_SIZE: usize = 32;

pub const XMIN_COMMITTED: u16 = 0x0001;
pub const XMIN_INVALID: u16 = 0x0002;
pub const XMAX_COMMITTED: u16 = 0x0004;
pub const XMAX_INVALID: u16 = 0x0008;
/// This tuple was updated and its new version is on the same page (HOT chain).
pub const HOT_UPDATED: u16 = 0x0010;
/// Reachable only through a HOT chain: no index entry points at it.
pub const HEAP_ONLY: u16 = 0x0020;
/// `xmax` is an update (ctid points to the new version), not a delete.
pub const UPDATED: u16 = 0x0040;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TupleHeader {
    pub xmin: Xid,
    pub xmax: Xid,
    pub cmin: u32,
    pub cmax: u32,
    pub ctid: Tid,
    pub infomask: u16,
}

impl TupleHeader {
    pub fn new(xmin: Xid, cmin: u32, infomask: u16) -> TupleHeader {
        TupleHeader {
            xmin,
            xmax: Xid::INVALID,
            cmin,
            cmax: 0,
            ctid: Tid::INVALID,
            infomask: infomask | XMAX_INVALID,
        }
    }

    pub fn read(b: &[u8]) -> Option<TupleHeader> {
        if b.len() < TUPLE_HEADER_SIZE {
            return None;
        }
        let u64at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8"));
        let u32at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4"));
        Some(TupleHeader {
            xmin: Xid(u64at(0)),
            xmax: Xid(u64at(8)),
            cmin: u32at(16),
            cmax: u32at(20),
            ctid: Tid::new(u32at(24), u16::from_le_bytes([b[28], b[29]])),
            infomask: u16::from_le_bytes([b[30], b[31]]),
        })
    }

    pub fn write(&self, b: &mut [u8]) {
        b[0..8].copy_from_slice(&self.xmin.0.to_le_bytes());
        b[8..16].copy_from_slice(&self.xmax.0.to_le_bytes());
        b[16..20].copy_from_slice(&self.cmin.to_le_bytes());
        b[20..24].copy_from_slice(&self.cmax.to_le_bytes());
        b[24..28].copy_from_slice(&self.ctid.block.to_le_bytes());
        b[28..30].copy_from_slice(&self.ctid.offset.to_le_bytes());
        b[30..32].copy_from_slice(&self.infomask.to_le_bytes());
    }

    pub fn has(&self, flag: u16) -> bool {
        self.infomask & flag != 0
    }
}

/// Builds a complete tuple (header + row bytes).
pub fn build(h: &TupleHeader, row: &[u8]) -> Vec<u8> {
    let mut t = vec![0u8; TUPLE_HEADER_SIZE + row.len()];
    h.write(&mut t);
    t[TUPLE_HEADER_SIZE..].copy_from_slice(row);
    t
}

/// Who is looking: the snapshot, the looking transaction's own xids and its current
/// command id (its own changes from earlier commands are visible).
#[derive(Clone, Debug)]
pub struct Viewer<'a> {
    pub snapshot: &'a Snapshot,
    /// Its top-level xid and its subtransactions' xids not rolled back, ascending
    /// (empty before its first write). A rolled-back subtransaction's xid is aborted in
    /// the clog, so its rows are seen as any aborted transaction's.
    pub own_xids: &'a [Xid],
    pub cid: u32,
}

impl Viewer<'_> {
    /// Whether `xid` is one of the looking transaction's own live xids.
    pub fn is_own(&self, xid: Xid) -> bool {
        match self.own_xids {
            [] => false,
            [one] => *one == xid,
            many => many.binary_search(&xid).is_ok(),
        }
    }
}

/// Where visibility rules get the status of an xid a tuple has no hint bit for: the
/// clog through [`TxnManager`] (readers; a status the clog cannot give panics, which a
/// session reports as XX000), or the statuses of a page read before a change under its
/// exclusive latch (`heap::PageStatuses`: the failure comes before anything changes).
pub trait StatusSource {
    fn xid_status(&self, xid: Xid) -> XidStatus;
}

impl StatusSource for TxnManager {
    fn xid_status(&self, xid: Xid) -> XidStatus {
        self.status(xid)
    }
}

fn xid_committed(
    txn: &impl StatusSource,
    xid: Xid,
    hinted_committed: bool,
    hinted_invalid: bool,
) -> Option<bool> {
    if hinted_committed {
        return Some(true);
    }
    if hinted_invalid {
        return Some(false);
    }
    match txn.xid_status(xid) {
        XidStatus::Committed => Some(true),
        XidStatus::Aborted => Some(false),
        XidStatus::InProgress | XidStatus::SubCommitted => None,
    }
}

/// MVCC visibility of a tuple version to `v`.
pub fn visible(h: &TupleHeader, v: &Viewer<'_>, txn: &TxnManager) -> bool {
    if v.is_own(h.xmin) {
        if h.cmin >= v.cid {
            return false;
        }
    } else {
        match xid_committed(txn, h.xmin, h.has(XMIN_COMMITTED), h.has(XMIN_INVALID)) {
            Some(true) => {
                if v.snapshot.in_progress(h.xmin) {
                    return false;
                }
            }
            _ => return false,
        }
    }
    if !h.xmax.is_valid() || h.has(XMAX_INVALID) {
        return true;
    }
    if v.is_own(h.xmax) {
        return h.cmax >= v.cid;
    }
    match xid_committed(txn, h.xmax, h.has(XMAX_COMMITTED), false) {
        Some(true) => v.snapshot.in_progress(h.xmax),
        _ => true,
    }
}

/// Whether a tuple version is dead to every transaction that is or will be running
/// (`horizon` = TxnManager::global_xmin), so pruning may remove it.
pub fn dead_to_all(h: &TupleHeader, horizon: Xid, txn: &impl StatusSource) -> bool {
    match xid_committed(txn, h.xmin, h.has(XMIN_COMMITTED), h.has(XMIN_INVALID)) {
        Some(false) => return true,
        None => return false,
        Some(true) => {}
    }
    if !h.xmax.is_valid() || h.has(XMAX_INVALID) {
        return false;
    }
    matches!(
        xid_committed(txn, h.xmax, h.has(XMAX_COMMITTED), false),
        Some(true)
    ) && h.xmax < horizon
}

/// A writer's view of a tuple's xmin ([`TxnManager::status_for_write`]). A hint bit
/// answers for an xid below the prune horizon: hints are final, but one may be set as
/// soon as the clog shows the status, before the xid leaves the running set, and below
/// the horizon it has left it. That is also the only answer for an xid whose clog
/// segment was truncated (the truncation point is below the horizon). Without a hint
/// there the status is lost: an error for this operation (a freeze pass missed the
/// page), never a guess and never a panic, which a writer holding an exclusive latch
/// would turn into a process abort.
pub fn xmin_status_for_write(h: &TupleHeader, txn: &TxnManager) -> Result<XidStatus> {
    hinted_status_for_write(txn, h.xmin, h.has(XMIN_COMMITTED), h.has(XMIN_INVALID))
}

/// [`xmin_status_for_write`] for the tuple's xmax.
pub fn xmax_status_for_write(h: &TupleHeader, txn: &TxnManager) -> Result<XidStatus> {
    hinted_status_for_write(txn, h.xmax, h.has(XMAX_COMMITTED), h.has(XMAX_INVALID))
}

fn hinted_status_for_write(
    txn: &TxnManager,
    xid: Xid,
    hinted_committed: bool,
    hinted_invalid: bool,
) -> Result<XidStatus> {
    if xid < txn.prune_horizon() {
        if hinted_committed {
            return Ok(XidStatus::Committed);
        }
        if hinted_invalid {
            return Ok(XidStatus::Aborted);
        }
    }
    Ok(txn.status_for_write(xid)?)
}

/// The hint bits a freeze pass adds so that no reader needs the clog for an xid below
/// `cutoff` again (every such xid has finished: `cutoff` is at most the global xmin).
/// Zero when the tuple needs none. An xid below the cutoff that is not finished is a
/// broken invariant, reported as an error before the page changes.
pub fn freeze_bits(h: &TupleHeader, cutoff: Xid, txn: &impl StatusSource) -> Result<u16> {
    let mut add = 0;
    let final_bits = |xid: Xid, committed: u16, invalid: u16| match txn.xid_status(xid) {
        XidStatus::Committed => Ok(committed),
        XidStatus::Aborted => Ok(invalid),
        s => Err(Error::Internal(format!(
            "xid {xid} below the freeze cutoff {cutoff} is still {s:?}"
        ))),
    };
    if h.xmin < cutoff && h.infomask & (XMIN_COMMITTED | XMIN_INVALID) == 0 {
        add |= final_bits(h.xmin, XMIN_COMMITTED, XMIN_INVALID)?;
    }
    if h.xmax.is_valid() && h.xmax < cutoff && h.infomask & (XMAX_COMMITTED | XMAX_INVALID) == 0 {
        add |= final_bits(h.xmax, XMAX_COMMITTED, XMAX_INVALID)?;
    }
    Ok(add)
}

/// Sets hint bits from the clog; returns whether anything changed.
pub fn set_hints(h: &mut TupleHeader, txn: &impl StatusSource) -> bool {
    let before = h.infomask;
    if h.infomask & (XMIN_COMMITTED | XMIN_INVALID) == 0 {
        match txn.xid_status(h.xmin) {
            XidStatus::Committed => h.infomask |= XMIN_COMMITTED,
            XidStatus::Aborted => h.infomask |= XMIN_INVALID,
            _ => {}
        }
    }
    if h.xmax.is_valid() && h.infomask & (XMAX_COMMITTED | XMAX_INVALID) == 0 {
        match txn.xid_status(h.xmax) {
            XidStatus::Committed => h.infomask |= XMAX_COMMITTED,
            XidStatus::Aborted => h.infomask |= XMAX_INVALID,
            _ => {}
        }
    }
    h.infomask != before
}
