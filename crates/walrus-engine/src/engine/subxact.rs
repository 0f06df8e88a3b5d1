//! Savepoints: subtransactions inside a transaction (PostgreSQL's subxacts).
//!
//! A savepoint opens a subtransaction. Its first write gets it an xid of its own (a
//! *subxid*, always above the top-level xid, which is assigned first), and every change
//! it makes is stamped with that xid. The subxid runs like the top-level xid: it is in
//! the running set (snapshots list it), it holds an xid lock that row-lock waiters sleep
//! on, and the transaction sees its rows as its own (`Viewer::own_xids`).
//!
//! - **RELEASE** closes the savepoint: its subxids stay live and now belong to the
//!   enclosing level (rolled back with it, committed with the transaction).
//! - **ROLLBACK TO** aborts every subxid assigned since the savepoint was set (its
//!   nested savepoints included): an abort record for each, clog bits set to aborted,
//!   then they leave the running set and their waiters wake. Relation files created
//!   since are unlinked (as PostgreSQL's subtransaction abort does); drops made since are
//!   forgotten (they happen only at commit). The savepoint stays, with a fresh
//!   subtransaction, as in PostgreSQL.
//! - **Commit** lists the live subxids in its commit record (`XACT_COMMIT_SUBXACTS`) and
//!   sets their clog bits with the top-level xid's, all before the transaction leaves the
//!   running set: a snapshot taken earlier lists every one of them as running, a later
//!   one finds them all committed. Redo marks them committed from the record.
//! - A crash: a subxid with no commit record naming it is aborted, like any xid left in
//!   progress (`TxnManager::status`).
//!
//! Cost: a savepoint that never writes costs no xid, no WAL and no shared state. One
//! that writes costs an xid and, when rolled back, one small abort record. There is no
//! fixed-size cache to overflow (PostgreSQL's 64 subxids per backend in the proc array):
//! a snapshot copies the running subxids, and the transaction's own-xid test is a
//! binary search.
//!
//! Table locks taken inside a savepoint are held until the transaction ends (PostgreSQL
//! releases the ones a rolled-back subtransaction took; holding them longer is only
//! more conservative). Sequence changes are not transactional at any level.

use walrus_base::Xid;

use super::Transaction;
use crate::error::Result;
use crate::txn::clog::XidStatus;
use crate::xlog;

/// One open savepoint: where its own xids, created files and dropped files begin in the
/// transaction's lists.
pub(crate) struct Subxact {
    /// Assigned at its first write (a savepoint that only reads needs none).
    pub(super) xid: Option<Xid>,
    own_from: usize,
    created_from: usize,
    dropped_from: usize,
}

impl Transaction {
    /// Opens a savepoint; returns its level (0 for the outermost), which
    /// [`Transaction::rollback_to_savepoint`] and [`Transaction::release_savepoint`]
    /// take.
    pub fn savepoint(&mut self) -> usize {
        let s = self.fresh_subxact();
        self.subxacts.push(s);
        self.subxacts.len() - 1
    }

    /// How many savepoints are open.
    pub fn savepoint_depth(&self) -> usize {
        self.subxacts.len()
    }

    fn fresh_subxact(&self) -> Subxact {
        Subxact {
            xid: None,
            // Slot 0 is the top-level xid's, even when it is assigned later (inside
            // this savepoint): a rollback to it never takes that one.
            own_from: self.own_xids.len().max(1),
            created_from: self.created.len(),
            dropped_from: self.dropped.len(),
        }
    }

    /// Assigns the innermost savepoint's subxid (at its first write).
    pub(super) fn assign_subxid(&mut self, top: Xid) -> Xid {
        let (xid, reservation) = self.inner.txn.assign_subxid(self.proc, top);
        if let Some(r) = reservation {
            self.inner.pool.wal.insert(&xlog::next_xid_record(r.0), &[]);
        }
        assert!(
            self.own_xids.last().is_some_and(|&last| last < xid),
            "subxid {xid} not above the transaction's xids"
        );
        self.own_xids.push(xid);
        self.subxacts
            .last_mut()
            .expect("assign_subxid inside a savepoint")
            .xid = Some(xid);
        xid
    }

    /// `ROLLBACK TO SAVEPOINT`: undoes everything done since savepoint `level` was set,
    /// closes the savepoints nested in it, and leaves it open with a fresh
    /// subtransaction.
    pub fn rollback_to_savepoint(&mut self, level: usize) -> Result<()> {
        assert!(level < self.subxacts.len(), "no savepoint at level {level}");
        let s = &self.subxacts[level];
        let aborted: Vec<Xid> = self
            .own_xids
            .drain(s.own_from.min(self.own_xids.len())..)
            .collect();
        let created: Vec<_> = self.created.drain(s.created_from..).collect();
        self.dropped.truncate(s.dropped_from);
        self.subxacts.truncate(level);
        let fresh = self.fresh_subxact();
        self.subxacts.push(fresh);
        // Its catalog changes are gone: the next read of the catalog rebuilds the view.
        self.own_catalog = None;
        let Some((&last, earlier)) = aborted.split_last() else {
            // Nothing written since the savepoint, so nothing created either: a file is
            // created only after the write that assigns the subxid.
            assert!(created.is_empty(), "files created without an xid");
            return Ok(());
        };
        let inner = self.inner.clone();
        {
            let _barrier = inner.txn.commit_barrier.read();
            let wal = &inner.pool.wal;
            for &x in earlier {
                wal.insert(&xlog::xact_record(x, false, &[]), &[]);
            }
            // The created files ride on the last record: redo unlinks them there.
            wal.insert(&xlog::xact_record(last, false, &created), &[]);
            for &x in &aborted {
                inner.txn.clog.set_status(x, XidStatus::Aborted);
            }
        }
        // Row locks the rolled-back subtransactions took go with them.
        let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.row_lock_keys)
            .into_iter()
            .partition(|(_, owner)| aborted.contains(owner));
        self.row_lock_keys = kept;
        inner.txn.row_locks.release(&gone);
        inner.txn.end_subxids(self.proc, &aborted);
        let mut unlinked = Ok(());
        for r in created {
            inner.pool.discard_relation(r);
            if let Err(e) = inner.pool.relfiles.unlink(r) {
                unlinked = unlinked.and(Err(e));
            }
            inner.rels.write().remove(&r);
        }
        unlinked
    }

    /// `RELEASE SAVEPOINT`: closes savepoint `level` and those nested in it, keeping
    /// their changes as the enclosing level's.
    pub fn release_savepoint(&mut self, level: usize) {
        assert!(level < self.subxacts.len(), "no savepoint at level {level}");
        self.subxacts.truncate(level);
    }
}
