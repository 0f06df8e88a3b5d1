//! Table-level locks: the three conflicts a table's rows, indexes and files need.
//!
//! walrus has no general relation lock manager. This table keeps, per table (relation
//! file), who may be changing it in ways that cannot overlap, with PostgreSQL's modes
//! in parentheses:
//! - **writers** (RowExclusive): transactions that inserted, updated or deleted rows of
//!   it, until they end. They do not conflict with each other, nor with vacuum.
//! - **DDL** (AccessExclusive / Share): a transaction whose CREATE INDEX, DROP TABLE or
//!   TRUNCATE changed the table's index set or files, until it ends. It waits for the
//!   other writers to end first, and writers that come later wait for it: otherwise a
//!   writer holding the old definition would add rows the new index never sees, or
//!   write into files being unlinked. A waiting DDL blocks new writers (no starvation).
//! - **vacuum** (ShareUpdateExclusive): one at a time, never with DDL (see
//!   `vacuum.rs`). DDL cancels an autovacuum and waits for a manual VACUUM.
//!
//! Waits for a transaction go through `TxnManager::wait_for`, the row-lock wait, so a
//! cycle of table and row waits is found by the same deadlock check, and a cancel
//! request ends the wait. Reads take no lock (a reader of a table dropped meanwhile
//! gets an error, never another table's rows: relation files are never reused).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use walrus_base::{RelFileId, Xid};

use crate::error::{Error, Result};
use crate::txn::{LockWait, TxnManager};

#[derive(Default)]
pub(super) struct TableLocks {
    tables: Mutex<HashMap<RelFileId, TableHold>>,
    /// Signalled whenever a hold is released (vacuum waits on it).
    released: Condvar,
}

#[derive(Default)]
struct TableHold {
    /// The running vacuum, and its cancel flag if it is an autovacuum.
    vacuum: Option<Option<Arc<AtomicBool>>>,
    /// Transactions that wrote rows of the table and have not ended.
    writers: Vec<Xid>,
    /// The transaction whose DDL holds the table.
    ddl: Option<Xid>,
    /// A transaction whose DDL waits for the writers to end.
    ddl_waiting: Option<Xid>,
}

impl TableHold {
    fn is_free(&self) -> bool {
        self.vacuum.is_none()
            && self.writers.is_empty()
            && self.ddl.is_none()
            && self.ddl_waiting.is_none()
    }
}

/// A vacuum's hold on one table; released on drop.
pub(super) struct VacuumGuard<'a> {
    locks: &'a TableLocks,
    relfile: RelFileId,
    /// Set by DDL that wants the table: an autovacuum stops at its next page.
    pub cancel: Arc<AtomicBool>,
}

impl Drop for VacuumGuard<'_> {
    fn drop(&mut self) {
        let mut t = self.locks.tables.lock();
        let_go(&mut t, self.relfile, |h| h.vacuum = None);
        self.locks.released.notify_all();
    }
}

/// Applies `change` to the table's hold, if any, and forgets a hold left empty.
fn let_go(
    t: &mut HashMap<RelFileId, TableHold>,
    relfile: RelFileId,
    change: impl FnOnce(&mut TableHold),
) {
    if let Some(h) = t.get_mut(&relfile) {
        change(h);
        if h.is_free() {
            t.remove(&relfile);
        }
    }
}

/// How long a vacuum waiter sleeps between checks of its interrupt flag.
const WAIT_SLICE: Duration = Duration::from_millis(50);

/// What a transaction found in its way.
enum Blocker {
    Vacuum,
    Txn(Xid),
}

impl TableLocks {
    /// Autovacuum: takes the table if no vacuum or DDL holds it (or waits to).
    pub(super) fn try_vacuum(&self, relfile: RelFileId) -> Option<VacuumGuard<'_>> {
        let mut t = self.tables.lock();
        let h = t.entry(relfile).or_default();
        if h.vacuum.is_some() || h.ddl.is_some() || h.ddl_waiting.is_some() {
            return None;
        }
        let cancel = Arc::new(AtomicBool::new(false));
        h.vacuum = Some(Some(cancel.clone()));
        Some(VacuumGuard {
            locks: self,
            relfile,
            cancel,
        })
    }

    /// Manual VACUUM: cancels an autovacuum of the table and waits for it, another
    /// manual vacuum, or DDL to let go.
    pub(super) fn vacuum(
        &self,
        relfile: RelFileId,
        interrupt: Option<&AtomicBool>,
    ) -> Result<VacuumGuard<'_>> {
        let mut t = self.tables.lock();
        loop {
            let h = t.entry(relfile).or_default();
            match &h.vacuum {
                None if h.ddl.is_none() => {
                    let cancel = Arc::new(AtomicBool::new(false));
                    h.vacuum = Some(None);
                    return Ok(VacuumGuard {
                        locks: self,
                        relfile,
                        cancel,
                    });
                }
                Some(Some(auto_cancel)) => auto_cancel.store(true, Ordering::Release),
                _ => {}
            }
            self.released.wait_for(&mut t, WAIT_SLICE);
            if interrupt.is_some_and(|f| f.load(Ordering::Relaxed)) {
                let_go(&mut t, relfile, |_| {});
                return Err(Error::Canceled);
            }
        }
    }

    /// `xid` is about to write rows of the table: waits for a DDL transaction that
    /// holds it or waits for it, then registers `xid` as a writer until
    /// [`TableLocks::release`].
    pub(super) fn lock_for_write(
        &self,
        relfile: RelFileId,
        xid: Xid,
        txn: &TxnManager,
        how: LockWait<'_>,
    ) -> Result<()> {
        loop {
            let ddl = {
                let mut t = self.tables.lock();
                let h = t.entry(relfile).or_default();
                match h.ddl.or(h.ddl_waiting) {
                    Some(d) if d != xid => d,
                    _ => {
                        h.writers.push(xid);
                        return Ok(());
                    }
                }
            };
            txn.wait_for(xid, ddl, how)?;
            // The DDL transaction ended; its hold goes a moment later.
            std::thread::yield_now();
        }
    }

    /// DDL of `xid` on the table: cancels an autovacuum, waits for any vacuum, for
    /// other DDL and for the other writers to end, then holds the table until
    /// [`TableLocks::release`].
    pub(super) fn begin_ddl(
        &self,
        relfile: RelFileId,
        xid: Xid,
        txn: &TxnManager,
        how: LockWait<'_>,
    ) -> Result<()> {
        let result = self.begin_ddl_inner(relfile, xid, txn, how);
        if result.is_err() {
            let_go(&mut self.tables.lock(), relfile, |h| {
                if h.ddl_waiting == Some(xid) {
                    h.ddl_waiting = None;
                }
            });
        }
        result
    }

    fn begin_ddl_inner(
        &self,
        relfile: RelFileId,
        xid: Xid,
        txn: &TxnManager,
        how: LockWait<'_>,
    ) -> Result<()> {
        // A vacuum is not a transaction, so its wait is here, not in `wait_for`: the
        // same interrupt and lock_timeout apply.
        let vacuum_deadline = how.timeout.map(|t| std::time::Instant::now() + t);
        loop {
            let blocker = {
                let mut t = self.tables.lock();
                let h = t.entry(relfile).or_default();
                if let Some(Some(auto_cancel)) = &h.vacuum {
                    auto_cancel.store(true, Ordering::Release);
                }
                if h.vacuum.is_some() {
                    self.released.wait_for(&mut t, WAIT_SLICE);
                    Blocker::Vacuum
                } else if let Some(d) = h.ddl.or(h.ddl_waiting).filter(|d| *d != xid) {
                    Blocker::Txn(d)
                } else if let Some(&w) = h.writers.iter().find(|w| **w != xid) {
                    h.ddl_waiting = Some(xid);
                    Blocker::Txn(w)
                } else {
                    h.ddl = Some(xid);
                    h.ddl_waiting = None;
                    return Ok(());
                }
            };
            match blocker {
                Blocker::Vacuum => {
                    if how.interrupt.is_some_and(|f| f.load(Ordering::Relaxed)) {
                        return Err(Error::Canceled);
                    }
                    if vacuum_deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                        return Err(Error::LockTimeout);
                    }
                }
                Blocker::Txn(other) => {
                    txn.wait_for(xid, other, how)?;
                    std::thread::yield_now();
                }
            }
        }
    }

    /// The transaction whose DDL holds the table, if any.
    pub(super) fn ddl_holder(&self, relfile: RelFileId) -> Option<Xid> {
        self.tables.lock().get(&relfile).and_then(|h| h.ddl)
    }

    /// Whether a vacuum of the table runs now.
    pub(super) fn vacuum_running(&self, relfile: RelFileId) -> bool {
        self.tables
            .lock()
            .get(&relfile)
            .is_some_and(|h| h.vacuum.is_some())
    }

    /// `xid` ended: drops its writer and DDL holds on the table.
    pub(super) fn release(&self, relfile: RelFileId, xid: Xid) {
        let mut t = self.tables.lock();
        assert!(
            t.contains_key(&relfile),
            "release of a table hold never taken: table holds unbalanced"
        );
        let_go(&mut t, relfile, |h| {
            h.writers.retain(|w| *w != xid);
            if h.ddl == Some(xid) {
                h.ddl = None;
            }
            if h.ddl_waiting == Some(xid) {
                h.ddl_waiting = None;
            }
        });
        self.released.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::clog::Clog;

    /// A transaction as the engine runs one: an xid, ended by `finish` and then
    /// `release` of its holds (in the engine's order).
    struct Tx<'a> {
        txn: &'a TxnManager,
        locks: &'a TableLocks,
        proc: u64,
        xid: Xid,
        held: Vec<RelFileId>,
    }

    impl<'a> Tx<'a> {
        fn begin(txn: &'a TxnManager, locks: &'a TableLocks) -> Tx<'a> {
            let proc = txn.begin();
            let (xid, _) = txn.assign_xid(proc);
            Tx {
                txn,
                locks,
                proc,
                xid,
                held: Vec::new(),
            }
        }
        fn write(&mut self, r: RelFileId) -> Result<()> {
            self.locks
                .lock_for_write(r, self.xid, self.txn, bounded_wait())?;
            self.hold(r);
            Ok(())
        }
        fn ddl(&mut self, r: RelFileId) -> Result<()> {
            self.locks
                .begin_ddl(r, self.xid, self.txn, bounded_wait())?;
            self.hold(r);
            Ok(())
        }
        /// One entry per table, as the engine keeps `table_holds`.
        fn hold(&mut self, r: RelFileId) {
            if !self.held.contains(&r) {
                self.held.push(r);
            }
        }
        fn end(self) {
            self.txn.finish(self.proc, true);
            for r in self.held {
                self.locks.release(r, self.xid);
            }
        }
    }

    /// Waits end after 30 s: a test whose expectation fails must fail, never hang (a
    /// thread scope waits for its threads before it reports a panic).
    fn bounded_wait() -> LockWait<'static> {
        LockWait {
            interrupt: None,
            timeout: Some(Duration::from_secs(30)),
        }
    }

    /// Waits until `txn` has counted more lock waits than `before`: the thread under test
    /// is blocked now. Sleeping a fixed time instead made these tests hang on a loaded
    /// machine, where the thread had not reached its wait yet.
    fn until_waiting(txn: &TxnManager, before: u64) {
        let start = std::time::Instant::now();
        while txn.stats.row_lock_waits.load(Ordering::Acquire) <= before {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the thread never started waiting"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        // It registered; give it a moment to park (harmless if it already has).
        std::thread::sleep(Duration::from_millis(5));
    }

    fn setup() -> (tempfile::TempDir, TxnManager, TableLocks) {
        let dir = tempfile::tempdir().unwrap();
        let txn = TxnManager::new(Clog::open(dir.path(), 2).unwrap(), Xid(100));
        (dir, txn, TableLocks::default())
    }

    const T: RelFileId = RelFileId(16384);

    #[test]
    fn vacuums_exclude_each_other_and_ddl_cancels_an_autovacuum() {
        let (_d, txn, locks) = setup();
        let g = locks.try_vacuum(T).expect("free table");
        assert!(locks.try_vacuum(T).is_none(), "one vacuum per table");
        assert!(locks.try_vacuum(RelFileId(16385)).is_some());
        std::thread::scope(|s| {
            let ddl = s.spawn(|| {
                let mut d = Tx::begin(&txn, &locks);
                d.ddl(T).map(|_| d)
            });
            while !g.cancel.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
            drop(g);
            let d = ddl.join().unwrap().unwrap();
            // Until the DDL's transaction ends no vacuum starts; a manual one waits
            // (and gives up when interrupted).
            assert!(locks.try_vacuum(T).is_none());
            let interrupted = AtomicBool::new(true);
            assert!(matches!(
                locks.vacuum(T, Some(&interrupted)),
                Err(Error::Canceled)
            ));
            let manual = s.spawn(|| {
                locks
                    .vacuum(T, None)
                    .map(|g| g.cancel.load(Ordering::Relaxed))
            });
            std::thread::sleep(Duration::from_millis(20));
            assert!(!manual.is_finished(), "manual VACUUM must wait for the DDL");
            d.end();
            assert!(
                !manual.join().unwrap().unwrap(),
                "a manual vacuum is never cancelled"
            );
        });
        // DDL waits for a manual vacuum instead of cancelling it.
        let g = locks.vacuum(T, None).unwrap();
        std::thread::scope(|s| {
            let ddl = s.spawn(|| {
                let mut d = Tx::begin(&txn, &locks);
                d.ddl(T).map(|_| d)
            });
            std::thread::sleep(Duration::from_millis(20));
            assert!(!g.cancel.load(Ordering::Acquire));
            assert!(!ddl.is_finished(), "DDL must wait for the manual vacuum");
            drop(g);
            ddl.join().unwrap().unwrap().end();
        });
        assert!(locks.tables.lock().is_empty(), "every hold released");
    }

    #[test]
    fn ddl_waits_for_writers_and_later_writers_wait_for_ddl() {
        let (_d, txn, locks) = setup();
        let mut w1 = Tx::begin(&txn, &locks);
        w1.write(T).unwrap();
        // Writers share the table, and a vacuum runs beside them.
        let mut w2 = Tx::begin(&txn, &locks);
        w2.write(T).unwrap();
        drop(locks.try_vacuum(T).expect("vacuum runs beside writers"));
        w2.end();
        std::thread::scope(|s| {
            let waits = txn.stats.row_lock_waits.load(Ordering::Acquire);
            let ddl = s.spawn(|| {
                let mut d = Tx::begin(&txn, &locks);
                d.ddl(T).map(|_| d)
            });
            until_waiting(&txn, waits);
            assert!(!ddl.is_finished(), "DDL waits for the open writer");
            // A writer arriving now queues behind the waiting DDL (no starvation).
            let waits = txn.stats.row_lock_waits.load(Ordering::Acquire);
            let late = s.spawn(|| {
                let mut w = Tx::begin(&txn, &locks);
                w.write(T).map(|_| w)
            });
            until_waiting(&txn, waits);
            assert!(
                !late.is_finished(),
                "a new writer waits for the waiting DDL"
            );
            w1.end();
            let d = ddl.join().unwrap().unwrap();
            std::thread::sleep(Duration::from_millis(20));
            assert!(!late.is_finished(), "and for the DDL's transaction to end");
            d.end();
            late.join().unwrap().unwrap().end();
        });
        // The DDL's own writes do not block it, and it may repeat DDL.
        let mut d = Tx::begin(&txn, &locks);
        d.write(T).unwrap();
        d.ddl(T).unwrap();
        d.ddl(T).unwrap();
        d.end();
        assert!(locks.tables.lock().is_empty(), "every hold released");
    }

    #[test]
    fn two_writers_upgrading_to_ddl_deadlock_is_detected() {
        let (_d, txn, locks) = setup();
        let mut a = Tx::begin(&txn, &locks);
        let mut b = Tx::begin(&txn, &locks);
        a.write(T).unwrap();
        b.write(T).unwrap();
        std::thread::scope(|s| {
            let waits = txn.stats.row_lock_waits.load(Ordering::Acquire);
            let first = s.spawn(|| a.ddl(T).map(|_| a));
            until_waiting(&txn, waits);
            // b waits for a (the waiting DDL), which waits for b: b is the victim.
            match b.ddl(T) {
                Err(Error::Deadlock { .. }) => b.end(),
                other => panic!("expected a deadlock, got {:?}", other.map(|_| ())),
            }
            first.join().unwrap().unwrap().end();
        });
        assert!(locks.tables.lock().is_empty(), "every hold released");
    }
}
