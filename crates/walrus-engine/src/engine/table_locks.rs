//! Table-level locks: PostgreSQL's eight relation lock modes and their conflict table.
//!
//! Every transaction has a lock identity from its start (`txn::lock_id`, PostgreSQL's
//! virtual transaction id), so a read-only transaction holds locks too. What takes
//! which mode, as in PostgreSQL:
//! - **reads** (AccessShare): the first scan of a table in a transaction, held until it
//!   ends. Only AccessExclusive conflicts with it, so TRUNCATE, DROP and ALTER TABLE
//!   wait for every transaction that has read the table: a REPEATABLE READ
//!   transaction never sees the table emptied or re-shaped under its snapshot, and no
//!   scan finds its files unlinked.
//! - **writes** (RowExclusive): the first row change; also `SELECT ... FOR UPDATE`.
//! - **CREATE INDEX** (Share): waits for writers, not readers; later writers wait.
//! - **ADD FOREIGN KEY** (ShareRowExclusive, on both tables).
//! - **ALTER TABLE, DROP, TRUNCATE, ADD CHECK** (AccessExclusive).
//! - **LOCK TABLE** any mode.
//! - **vacuum** (ShareUpdateExclusive, not a transaction: kept apart). An autovacuum
//!   is cancelled by a request that conflicts with it; a manual VACUUM is waited for.
//!
//! A request is granted when it conflicts with no other transaction's granted lock and
//! with no earlier waiter's request (so a waiting TRUNCATE is not starved by a stream
//! of readers, as in PostgreSQL), unless the requester already holds a lock on the
//! table (it would otherwise wait for a waiter that waits for it). A waiter sleeps on
//! this table's condition variable and re-checks whenever a lock is released; its
//! waits-for edges (every conflicting holder and earlier waiter) are in the
//! transaction manager's graph with the row-lock waits, so a cycle through table and
//! row locks is found when the edge that closes it is added. The holds are released
//! when the transaction ends (savepoints keep them, which PostgreSQL would release).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use walrus_base::{RelFileId, Xid};

use crate::error::{Error, Result};
use crate::txn::{LockWait, TxnManager};

/// PostgreSQL's table lock modes, weakest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LockMode {
    AccessShare,
    RowShare,
    RowExclusive,
    ShareUpdateExclusive,
    Share,
    ShareRowExclusive,
    Exclusive,
    AccessExclusive,
}

impl LockMode {
    pub const ALL: [LockMode; 8] = [
        LockMode::AccessShare,
        LockMode::RowShare,
        LockMode::RowExclusive,
        LockMode::ShareUpdateExclusive,
        LockMode::Share,
        LockMode::ShareRowExclusive,
        LockMode::Exclusive,
        LockMode::AccessExclusive,
    ];

    /// PostgreSQL's conflict table (lock.c `LockConflicts`), one bit per mode.
    fn conflict_bits(self) -> u8 {
        use LockMode::*;
        let bit = |m: LockMode| 1u8 << (m as u8);
        match self {
            AccessShare => bit(AccessExclusive),
            RowShare => bit(Exclusive) | bit(AccessExclusive),
            RowExclusive => {
                bit(Share) | bit(ShareRowExclusive) | bit(Exclusive) | bit(AccessExclusive)
            }
            ShareUpdateExclusive => {
                bit(ShareUpdateExclusive)
                    | bit(Share)
                    | bit(ShareRowExclusive)
                    | bit(Exclusive)
                    | bit(AccessExclusive)
            }
            Share => {
                bit(RowExclusive)
                    | bit(ShareUpdateExclusive)
                    | bit(ShareRowExclusive)
                    | bit(Exclusive)
                    | bit(AccessExclusive)
            }
            ShareRowExclusive => {
                bit(RowExclusive)
                    | bit(ShareUpdateExclusive)
                    | bit(Share)
                    | bit(ShareRowExclusive)
                    | bit(Exclusive)
                    | bit(AccessExclusive)
            }
            Exclusive => !(bit(AccessShare)),
            AccessExclusive => 0xff,
        }
    }

    pub fn conflicts_with(self, other: LockMode) -> bool {
        self.conflict_bits() & (1 << (other as u8)) != 0
    }

    /// The name `pg_locks.mode` shows.
    pub fn name(self) -> &'static str {
        match self {
            LockMode::AccessShare => "AccessShareLock",
            LockMode::RowShare => "RowShareLock",
            LockMode::RowExclusive => "RowExclusiveLock",
            LockMode::ShareUpdateExclusive => "ShareUpdateExclusiveLock",
            LockMode::Share => "ShareLock",
            LockMode::ShareRowExclusive => "ShareRowExclusiveLock",
            LockMode::Exclusive => "ExclusiveLock",
            LockMode::AccessExclusive => "AccessExclusiveLock",
        }
    }

    /// The mode a `LOCK TABLE ... IN <words> MODE` names (upper case, one space
    /// between words).
    pub fn from_sql(words: &str) -> Option<LockMode> {
        Some(match words {
            "ACCESS SHARE" => LockMode::AccessShare,
            "ROW SHARE" => LockMode::RowShare,
            "ROW EXCLUSIVE" => LockMode::RowExclusive,
            "SHARE UPDATE EXCLUSIVE" => LockMode::ShareUpdateExclusive,
            "SHARE" => LockMode::Share,
            "SHARE ROW EXCLUSIVE" => LockMode::ShareRowExclusive,
            "EXCLUSIVE" => LockMode::Exclusive,
            "ACCESS EXCLUSIVE" => LockMode::AccessExclusive,
            _ => return None,
        })
    }
}

/// The vacuum's mode: it conflicts with what conflicts with ShareUpdateExclusive.
const VACUUM_MODE: LockMode = LockMode::ShareUpdateExclusive;

/// One lock on one table, as `pg_locks` lists it.
#[derive(Clone, Debug)]
pub struct TableLockInfo {
    pub relfile: RelFileId,
    /// The holder's (or waiter's) lock identity.
    pub owner: Xid,
    pub mode: LockMode,
    pub granted: bool,
}

#[derive(Default)]
pub(super) struct TableLocks {
    tables: Mutex<HashMap<RelFileId, TableHold>>,
    /// Signalled whenever a lock is released or a waiter gives up.
    released: Condvar,
}

#[derive(Default)]
struct TableHold {
    /// The running vacuum, and its cancel flag if it is an autovacuum.
    vacuum: Option<Option<Arc<AtomicBool>>>,
    /// Granted locks: (lock identity, mode), one entry per mode a transaction holds.
    granted: Vec<(Xid, LockMode)>,
    /// Requests waiting, in arrival order.
    waiting: Vec<(Xid, LockMode)>,
}

impl TableHold {
    fn is_free(&self) -> bool {
        self.vacuum.is_none() && self.granted.is_empty() && self.waiting.is_empty()
    }

    /// The other transactions `me`'s request for `mode` must wait for now (empty:
    /// grant it): conflicting granted locks, then conflicting requests queued before
    /// `me`'s (or all queued, if `me` has not queued) unless `me` holds a lock here.
    fn blockers(&self, me: Xid, mode: LockMode) -> Vec<Xid> {
        let mut out: Vec<Xid> = self
            .granted
            .iter()
            .filter(|(id, m)| *id != me && mode.conflicts_with(*m))
            .map(|(id, _)| *id)
            .collect();
        if !self.granted.iter().any(|(id, _)| *id == me) {
            let ahead = self
                .waiting
                .iter()
                .position(|(id, _)| *id == me)
                .unwrap_or(self.waiting.len());
            out.extend(
                self.waiting[..ahead]
                    .iter()
                    .filter(|(id, m)| *id != me && mode.conflicts_with(*m))
                    .map(|(id, _)| *id),
            );
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    fn stop_waiting(&mut self, me: Xid) {
        self.waiting.retain(|(id, _)| *id != me);
    }
}

/// A vacuum's hold on one table; released on drop.
pub(super) struct VacuumGuard<'a> {
    locks: &'a TableLocks,
    relfile: RelFileId,
    /// Set by a conflicting lock request: an autovacuum stops at its next page.
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

/// How long a waiter sleeps between checks of its interrupt flag and deadline.
const WAIT_SLICE: Duration = Duration::from_millis(50);

/// What a request found in its way.
enum Blocker {
    Vacuum,
    Txns(Vec<Xid>),
}

impl TableLocks {
    /// Autovacuum: takes the table if no vacuum holds it and no transaction holds or
    /// waits for a conflicting lock.
    pub(super) fn try_vacuum(&self, relfile: RelFileId) -> Option<VacuumGuard<'_>> {
        let mut t = self.tables.lock();
        let h = t.entry(relfile).or_default();
        let conflicting = h
            .granted
            .iter()
            .chain(&h.waiting)
            .any(|(_, m)| VACUUM_MODE.conflicts_with(*m));
        if h.vacuum.is_some() || conflicting {
            let_go(&mut t, relfile, |_| {});
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
    /// manual vacuum, or a conflicting transaction lock to let go.
    pub(super) fn vacuum(
        &self,
        relfile: RelFileId,
        interrupt: Option<&AtomicBool>,
    ) -> Result<VacuumGuard<'_>> {
        let mut t = self.tables.lock();
        loop {
            let h = t.entry(relfile).or_default();
            let conflicting = h
                .granted
                .iter()
                .any(|(_, m)| VACUUM_MODE.conflicts_with(*m));
            match &h.vacuum {
                None if !conflicting => {
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

    /// Takes `mode` on the table for the transaction whose lock identity is `me`,
    /// waiting (bounded by `how`) while another transaction holds or has queued a
    /// conflicting mode, or a vacuum runs that the mode conflicts with. Held until
    /// [`TableLocks::release`]. `nowait`: a conflict is [`Error::LockNotAvailable`]
    /// at once, naming `table`.
    pub(super) fn acquire(
        &self,
        relfile: RelFileId,
        me: Xid,
        mode: LockMode,
        txn: &TxnManager,
        how: LockWait<'_>,
        nowait: Option<&str>,
    ) -> Result<()> {
        let result = self.acquire_inner(relfile, me, mode, txn, how, nowait);
        if result.is_err() {
            txn.clear_waits_for(me);
            let_go(&mut self.tables.lock(), relfile, |h| h.stop_waiting(me));
            self.released.notify_all();
        }
        result
    }

    fn acquire_inner(
        &self,
        relfile: RelFileId,
        me: Xid,
        mode: LockMode,
        txn: &TxnManager,
        how: LockWait<'_>,
        nowait: Option<&str>,
    ) -> Result<()> {
        let deadline = how.timeout.map(|t| Instant::now() + t);
        let mut counted = false;
        let mut t = self.tables.lock();
        loop {
            let blocker = {
                let h = t.entry(relfile).or_default();
                if h.granted.contains(&(me, mode)) {
                    return Ok(());
                }
                if mode.conflicts_with(VACUUM_MODE) {
                    if let Some(Some(auto_cancel)) = &h.vacuum {
                        auto_cancel.store(true, Ordering::Release);
                    }
                }
                let blockers = h.blockers(me, mode);
                if h.vacuum.is_some() && mode.conflicts_with(VACUUM_MODE) {
                    Blocker::Vacuum
                } else if blockers.is_empty() {
                    h.stop_waiting(me);
                    h.granted.push((me, mode));
                    drop(t);
                    if counted {
                        txn.clear_waits_for(me);
                    }
                    return Ok(());
                } else {
                    Blocker::Txns(blockers)
                }
            };
            if let Some(table) = nowait {
                return Err(Error::LockNotAvailable(table.to_string()));
            }
            {
                let h = t.entry(relfile).or_default();
                if !h.waiting.iter().any(|(id, _)| *id == me) {
                    h.waiting.push((me, mode));
                }
            }
            if let Blocker::Txns(holders) = &blocker {
                // Edges first: a cycle is refused before this transaction sleeps.
                drop(t);
                txn.set_waits_for(me, holders)?;
                t = self.tables.lock();
            }
            if !counted {
                counted = true;
                txn.stats.row_lock_waits.fetch_add(1, Ordering::Relaxed);
            }
            let slice = Instant::now() + WAIT_SLICE;
            self.released
                .wait_until(&mut t, deadline.map_or(slice, |d| d.min(slice)));
            if how.interrupt.is_some_and(|f| f.load(Ordering::Relaxed)) {
                return Err(Error::Canceled);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(Error::LockTimeout);
            }
        }
    }

    /// Whether a vacuum of the table runs now.
    pub(super) fn vacuum_running(&self, relfile: RelFileId) -> bool {
        self.tables
            .lock()
            .get(&relfile)
            .is_some_and(|h| h.vacuum.is_some())
    }

    /// The transaction `me` ended: drops every lock it holds on the table.
    pub(super) fn release(&self, relfile: RelFileId, me: Xid) {
        let mut t = self.tables.lock();
        assert!(
            t.contains_key(&relfile),
            "release of a table lock never taken: table locks unbalanced"
        );
        let_go(&mut t, relfile, |h| {
            h.granted.retain(|(id, _)| *id != me);
            h.stop_waiting(me);
        });
        self.released.notify_all();
    }

    /// Every granted and waiting lock, for `pg_locks`.
    pub(super) fn snapshot(&self) -> Vec<TableLockInfo> {
        let t = self.tables.lock();
        let mut out = Vec::new();
        for (&relfile, h) in t.iter() {
            let granted = h.granted.iter().map(|l| (l, true));
            for (&(owner, mode), granted) in granted.chain(h.waiting.iter().map(|l| (l, false))) {
                out.push(TableLockInfo {
                    relfile,
                    owner,
                    mode,
                    granted,
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::clog::Clog;

    /// A transaction as the engine runs one: a lock identity (and an xid, as a
    /// writer has), ended by `finish` and then `release` of its locks (in the
    /// engine's order).
    struct Tx<'a> {
        txn: &'a TxnManager,
        locks: &'a TableLocks,
        proc: u64,
        me: Xid,
        held: Vec<RelFileId>,
    }

    impl<'a> Tx<'a> {
        fn begin(txn: &'a TxnManager, locks: &'a TableLocks) -> Tx<'a> {
            let tx = Tx::reader(txn, locks);
            txn.assign_xid(tx.proc);
            tx
        }
        /// A transaction with no xid (it has written nothing).
        fn reader(txn: &'a TxnManager, locks: &'a TableLocks) -> Tx<'a> {
            let proc = txn.begin();
            Tx {
                txn,
                locks,
                proc,
                me: crate::txn::lock_id(proc),
                held: Vec::new(),
            }
        }
        fn take(&mut self, r: RelFileId, mode: LockMode) -> Result<()> {
            self.locks
                .acquire(r, self.me, mode, self.txn, bounded_wait(), None)?;
            if !self.held.contains(&r) {
                self.held.push(r);
            }
            Ok(())
        }
        fn read(&mut self, r: RelFileId) -> Result<()> {
            self.take(r, LockMode::AccessShare)
        }
        fn write(&mut self, r: RelFileId) -> Result<()> {
            self.take(r, LockMode::RowExclusive)
        }
        fn ddl(&mut self, r: RelFileId) -> Result<()> {
            self.take(r, LockMode::AccessExclusive)
        }
        fn end(self) {
            self.txn.finish(self.proc, true);
            for r in self.held {
                self.locks.release(r, self.me);
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
                Err(Error::Deadlock) => b.end(),
                other => panic!("expected a deadlock, got {:?}", other.map(|_| ())),
            }
            first.join().unwrap().unwrap().end();
        });
        assert!(locks.tables.lock().is_empty(), "every hold released");
    }

    /// PostgreSQL's conflict table is symmetric, AccessShare conflicts with
    /// AccessExclusive only, and AccessExclusive with everything.
    #[test]
    fn conflict_table_is_postgresqls() {
        for a in LockMode::ALL {
            for b in LockMode::ALL {
                assert_eq!(a.conflicts_with(b), b.conflicts_with(a), "{a:?} {b:?}");
            }
            assert!(LockMode::AccessExclusive.conflicts_with(a));
            assert_eq!(
                LockMode::AccessShare.conflicts_with(a),
                a == LockMode::AccessExclusive
            );
        }
        assert!(!LockMode::RowExclusive.conflicts_with(LockMode::RowExclusive));
        assert!(LockMode::Share.conflicts_with(LockMode::RowExclusive));
        assert!(!LockMode::Share.conflicts_with(LockMode::Share));
        assert!(LockMode::ShareRowExclusive.conflicts_with(LockMode::ShareRowExclusive));
        assert!(!LockMode::Exclusive.conflicts_with(LockMode::AccessShare));
        assert_eq!(
            LockMode::from_sql("SHARE UPDATE EXCLUSIVE"),
            Some(LockMode::ShareUpdateExclusive)
        );
    }

    /// A read-only transaction's AccessShare makes TRUNCATE/DROP (AccessExclusive)
    /// wait until it ends; a reader arriving while that DDL waits queues behind it;
    /// CREATE INDEX (Share) does not wait for readers.
    #[test]
    fn readers_hold_off_exclusive_ddl_but_not_create_index() {
        let (_d, txn, locks) = setup();
        let mut r = Tx::reader(&txn, &locks);
        r.read(T).unwrap();
        let mut ci = Tx::begin(&txn, &locks);
        ci.take(T, LockMode::Share).unwrap();
        ci.end();
        std::thread::scope(|s| {
            let waits = txn.stats.row_lock_waits.load(Ordering::Acquire);
            let ddl = s.spawn(|| {
                let mut d = Tx::begin(&txn, &locks);
                d.ddl(T).map(|_| d)
            });
            until_waiting(&txn, waits);
            assert!(!ddl.is_finished(), "TRUNCATE waits for the open reader");
            let waits = txn.stats.row_lock_waits.load(Ordering::Acquire);
            let late = s.spawn(|| {
                let mut l = Tx::reader(&txn, &locks);
                l.read(T).map(|_| l)
            });
            until_waiting(&txn, waits);
            assert!(
                !late.is_finished(),
                "a new reader queues behind the waiting DDL"
            );
            // The first reader reads on (it holds its lock already).
            r.read(T).unwrap();
            r.end();
            let d = ddl.join().unwrap().unwrap();
            std::thread::sleep(Duration::from_millis(20));
            assert!(!late.is_finished(), "and waits for the DDL's transaction");
            d.end();
            late.join().unwrap().unwrap().end();
        });
        assert!(locks.tables.lock().is_empty(), "every lock released");
    }

    /// A cycle through a read-only transaction: R has read T; D holds U exclusively
    /// and waits for T; R then reads U. R has no xid, and the cycle is still found.
    #[test]
    fn deadlock_through_a_reader_is_detected() {
        const U: RelFileId = RelFileId(16390);
        let (_d, txn, locks) = setup();
        let mut r = Tx::reader(&txn, &locks);
        r.read(T).unwrap();
        let mut d = Tx::begin(&txn, &locks);
        d.ddl(U).unwrap();
        std::thread::scope(|s| {
            let waits = txn.stats.row_lock_waits.load(Ordering::Acquire);
            let dt = s.spawn(|| d.ddl(T).map(|_| d));
            until_waiting(&txn, waits);
            match r.read(U) {
                Err(Error::Deadlock) => r.end(),
                other => panic!("expected a deadlock, got {:?}", other.map(|_| ())),
            }
            dt.join().unwrap().unwrap().end();
        });
        assert!(locks.tables.lock().is_empty(), "every lock released");
    }

    /// NOWAIT fails at once and leaves nothing queued; lock_timeout ends a wait.
    #[test]
    fn nowait_and_lock_timeout() {
        let (_d, txn, locks) = setup();
        let mut r = Tx::reader(&txn, &locks);
        r.read(T).unwrap();
        let d = Tx::begin(&txn, &locks);
        let nowait = locks.acquire(
            T,
            d.me,
            LockMode::AccessExclusive,
            &txn,
            bounded_wait(),
            Some("t"),
        );
        assert!(matches!(nowait, Err(Error::LockNotAvailable(ref t)) if t == "t"));
        let short = LockWait {
            interrupt: None,
            timeout: Some(Duration::from_millis(30)),
        };
        let timed = locks.acquire(T, d.me, LockMode::AccessExclusive, &txn, short, None);
        assert!(matches!(timed, Err(Error::LockTimeout)));
        // Nothing of d's is left queued: a second reader is granted at once.
        let mut r2 = Tx::reader(&txn, &locks);
        r2.read(T).unwrap();
        assert_eq!(locks.snapshot().len(), 2);
        r.end();
        r2.end();
        d.end();
        assert!(locks.tables.lock().is_empty(), "every lock released");
    }
}
