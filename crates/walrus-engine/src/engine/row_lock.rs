//! `SELECT ... FOR UPDATE | NO KEY UPDATE | SHARE | KEY SHARE` on one row version, with
//! PostgreSQL's wait policies (wait, `NOWAIT`, `SKIP LOCKED`). The locks themselves
//! are `txn::row_locks`; this is the transaction's side: registering as the table's
//! writer (DDL waits), the xid the lock is taken under, waiting, and READ COMMITTED's
//! move to the newest version of a row changed since the snapshot.

use walrus_base::Tid;

use super::{RowChange, Transaction};
use crate::access::heap::{Heap, LockOutcome, Modify};
use crate::catalog::TableDef;
use crate::error::{Error, Result};
pub use crate::txn::row_locks::RowLockMode;

/// What to do when the row is locked or being changed by another transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockWaitPolicy {
    /// Wait for it (bounded by `lock_timeout`; deadlocks detected).
    Wait,
    /// Fail at once (55P03).
    NoWait,
    /// Leave the row out.
    SkipLocked,
}

/// How a row lock went.
#[derive(Debug, PartialEq)]
pub enum RowLocked {
    /// Locked (or already held by this transaction) at this version.
    Locked(Tid),
    /// READ COMMITTED: the row was changed by a transaction that committed since the
    /// snapshot; this is its newest version, not yet locked. The caller re-checks its
    /// condition on it and locks it there if it still holds.
    Changed(Tid, Vec<crate::access::datum::Datum>),
    /// Deleted (or changed by this very statement).
    Gone,
    /// `SKIP LOCKED`: someone else holds it.
    Skipped,
}

impl Transaction {
    /// Locks the row version at `tid` of `def`'s table in `mode`; the lock is held
    /// until this transaction ends (or the savepoint it was taken in is rolled back).
    pub fn lock_row(
        &mut self,
        def: &TableDef,
        tid: Tid,
        mode: RowLockMode,
        policy: LockWaitPolicy,
    ) -> Result<RowLocked> {
        self.check_interrupt()?;
        let fresh = self.lock_for_write(def)?;
        let def = fresh.as_deref().unwrap_or(def);
        let owner = self.mark_write();
        let inner = self.inner.clone();
        let rel = inner.rel(def.relfile, def.fillfactor);
        let heap = Heap::new(&inner.pool, &inner.txn, &rel);
        loop {
            self.check_interrupt()?;
            let m = match heap.lock_tuple(tid, owner, mode)? {
                LockOutcome::Locked { at, added } => {
                    if added {
                        self.row_lock_keys.push(((def.relfile, at), owner));
                    }
                    return Ok(RowLocked::Locked(at));
                }
                LockOutcome::Not(m) => m,
            };
            if let Modify::WouldBlock(_) = m {
                match policy {
                    LockWaitPolicy::Wait => {}
                    LockWaitPolicy::NoWait => {
                        return Err(Error::RowLockNotAvailable(def.name.clone()))
                    }
                    LockWaitPolicy::SkipLocked => return Ok(RowLocked::Skipped),
                }
            }
            match self.resolve_conflict(&heap, def, m)? {
                None => continue,
                Some(RowChange::Changed(t, values)) => return Ok(RowLocked::Changed(t, values)),
                Some(RowChange::Gone | RowChange::SelfModified) => return Ok(RowLocked::Gone),
                Some(RowChange::Done(_)) => unreachable!("resolve_conflict never reports Done"),
            }
        }
    }

    /// Row locks this transaction holds (tests and views).
    pub fn row_locks_held(&self) -> usize {
        self.row_lock_keys.len()
    }
}

impl Transaction {
    /// Whether the row version at `tid` of `def`'s table is still a live row for this
    /// transaction: created by a transaction that committed or by this one (not by a
    /// savepoint since rolled back), and neither deleted nor replaced by a committed
    /// transaction or by this one. A deferred foreign-key check skips the versions that
    /// are gone by the time it runs, as PostgreSQL's does.
    pub fn version_is_live(&mut self, def: &TableDef, tid: Tid) -> Result<bool> {
        use crate::access::heap::tuple::{XMAX_INVALID, XMIN_INVALID};
        use crate::txn::clog::XidStatus;
        self.lock_for_read(def)?;
        let inner = self.inner.clone();
        let rel = inner.rel(def.relfile, def.fillfactor);
        let heap = Heap::new(&inner.pool, &inner.txn, &rel);
        let Some((h, _)) = heap.read_version(tid)? else {
            return Ok(false);
        };
        let own = |x| self.own_xids.binary_search(&x).is_ok();
        let xmin_live = !h.has(XMIN_INVALID)
            && (own(h.xmin) || inner.txn.try_status(h.xmin)? == XidStatus::Committed);
        if !xmin_live {
            return Ok(false);
        }
        if !h.xmax.is_valid() || h.has(XMAX_INVALID) {
            return Ok(true);
        }
        if own(h.xmax) {
            return Ok(false);
        }
        Ok(inner.txn.try_status(h.xmax)? != XidStatus::Committed)
    }
}
