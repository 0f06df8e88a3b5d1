#![doc = include_str!("README.md")]

pub mod clog;
pub mod row_locks;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};
use walrus_base::Xid;

use crate::error::{Error, Result};
use clog::{Clog, ClogError, XidStatus};

/// Xids reserved per NEXT_XID WAL record: after a crash, allocation restarts above the
/// last reserved block, so an xid is never handed out twice even if it left no record.
pub const XID_LOG_BLOCK: u64 = 1024;

/// An MVCC snapshot (PostgreSQL's): xids `>= xmax` and those in `xip` are invisible.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub xmin: Xid,
    pub xmax: Xid,
    /// Sorted xids running when the snapshot was taken.
    pub xip: Vec<Xid>,
}

impl Snapshot {
    /// Whether `xid`'s effects are invisible to this snapshot because it was still
    /// running (or not yet started) when the snapshot was taken.
    pub fn in_progress(&self, xid: Xid) -> bool {
        if xid >= self.xmax {
            return true;
        }
        if xid < self.xmin {
            return false;
        }
        self.xip.binary_search(&xid).is_ok()
    }
}

struct ProcEntry {
    xid: Option<Xid>,
    /// Xids of its subtransactions (savepoints) that wrote and have not been rolled
    /// back: running like `xid` until the transaction ends (a snapshot lists them).
    subxids: Vec<Xid>,
    snapshot_xmin: Option<Xid>,
}

/// The lock every running xid holds until it ends: row-lock waiters sleep on it.
struct XidLock {
    done: Mutex<bool>,
    cv: Condvar,
    /// Its transaction's lock identity ([`lock_id`]): waits-for edges and
    /// deadlock cycles are between transactions, not subtransactions, and a table-lock
    /// wait (keyed by the lock identity, which a read-only transaction has too) joins
    /// the same graph as a row-lock wait (keyed by xids).
    top: Xid,
}

impl XidLock {
    fn new(top: Xid) -> Arc<XidLock> {
        Arc::new(XidLock {
            done: Mutex::new(false),
            cv: Condvar::new(),
            top,
        })
    }

    fn release(&self) {
        *self.done.lock() = true;
        self.cv.notify_all();
    }
}

/// Counters for the transaction manager (exported by the server later).
#[derive(Default)]
pub struct TxnStats {
    pub commits: AtomicU64,
    pub aborts: AtomicU64,
    pub row_lock_waits: AtomicU64,
    pub deadlocks: AtomicU64,
}

/// How a wait for another transaction's lock may end early: the session's interrupt flag
/// (a cancel request or `statement_timeout`), and `lock_timeout` (PostgreSQL's, per
/// wait: SQLSTATE 55P03).
#[derive(Clone, Copy, Default)]
pub struct LockWait<'a> {
    pub interrupt: Option<&'a AtomicBool>,
    pub timeout: Option<Duration>,
}

pub struct TxnManager {
    next_xid: AtomicU64,
    /// Xids below this are covered by a logged NEXT_XID reservation.
    xid_reserved_upto: Mutex<u64>,
    procs: Mutex<(u64, BTreeMap<u64, ProcEntry>)>,
    /// A global xmin seen recently (refreshed by every snapshot and every exact
    /// computation): never above the true one, because horizons only advance — a new
    /// snapshot's xmin is a running xid or `next_xid`, both at or above any earlier
    /// horizon. Opportunistic pruning reads it instead of scanning the proc array under
    /// its lock on every attempt (PostgreSQL's GlobalVisState plays the same role).
    recent_global_xmin: AtomicU64,
    xid_locks: Mutex<HashMap<Xid, Arc<XidLock>>>,
    /// Who each waiting transaction (by lock identity) waits for: one holder for a
    /// row-lock wait, every conflicting holder and earlier waiter for a table lock.
    waits_for: Mutex<HashMap<Xid, Vec<Xid>>>,
    pub clog: Clog,
    /// Row locks of `SELECT ... FOR UPDATE` & co (`row_locks.rs`).
    pub row_locks: row_locks::RowLocks,
    /// Held shared by a committer from inserting its commit record until its clog bits
    /// are set; held exclusively by a checkpoint while it picks its redo LSN. So every
    /// commit before the redo LSN is in the clog the checkpoint flushes (PostgreSQL's
    /// DELAY_CHKPT_START).
    pub commit_barrier: RwLock<()>,
    pub stats: TxnStats,
}

/// A transaction's lock identity, PostgreSQL's virtual transaction id: its number in
/// the running set with the top bit set, so it never equals an xid. Every transaction
/// has one from its start, so a read-only one can hold a table lock and be waited for;
/// its xids' locks carry it (`XidLock::top`), so row and table waits form one graph.
pub fn lock_id(proc: u64) -> Xid {
    Xid(LOCK_ID_BIT | proc)
}

const LOCK_ID_BIT: u64 = 1 << 63;

/// What `assign_xid` needs the caller to log before the xid is used.
pub struct XidReservation(pub u64);

impl TxnManager {
    pub fn new(clog: Clog, next_xid: Xid) -> TxnManager {
        let next = next_xid.0.max(Xid::FIRST_NORMAL.0);
        TxnManager {
            next_xid: AtomicU64::new(next),
            xid_reserved_upto: Mutex::new(next),
            procs: Mutex::new((0, BTreeMap::new())),
            recent_global_xmin: AtomicU64::new(Xid::FIRST_NORMAL.0),
            xid_locks: Mutex::new(HashMap::new()),
            waits_for: Mutex::new(HashMap::new()),
            clog,
            row_locks: row_locks::RowLocks::default(),
            commit_barrier: RwLock::new(()),
            stats: TxnStats::default(),
        }
    }

    /// Xids below this may have been handed out (the logged reservation's end).
    pub fn xid_reserved_upto(&self) -> u64 {
        *self.xid_reserved_upto.lock()
    }

    pub fn next_xid(&self) -> Xid {
        Xid(self.next_xid.load(Ordering::Acquire))
    }

    /// Registers a transaction (no xid yet; xids are assigned at the first write).
    pub fn begin(&self) -> u64 {
        let mut p = self.procs.lock();
        p.0 += 1;
        let id = p.0;
        p.1.insert(
            id,
            ProcEntry {
                xid: None,
                subxids: Vec::new(),
                snapshot_xmin: None,
            },
        );
        id
    }

    /// Assigns an xid to transaction `proc`. If the xid crosses the reserved range, the
    /// returned reservation must be WAL-logged (NEXT_XID) before the xid appears in WAL.
    pub fn assign_xid(&self, proc: u64) -> (Xid, Option<XidReservation>) {
        let mut p = self.procs.lock();
        let (xid, reservation) = self.next_xid_reserved();
        self.xid_locks
            .lock()
            .insert(xid, XidLock::new(lock_id(proc)));
        if let Some(e) = p.1.get_mut(&proc) {
            e.xid = Some(xid);
        }
        (xid, reservation)
    }

    /// Assigns an xid to a subtransaction of `proc`, whose top-level xid `top` is
    /// assigned already (so a subxid is always above its top-level xid). Running until
    /// [`TxnManager::end_subxids`] (its savepoint rolled back) or the transaction's end.
    pub fn assign_subxid(&self, proc: u64, top: Xid) -> (Xid, Option<XidReservation>) {
        let mut p = self.procs.lock();
        let (xid, reservation) = self.next_xid_reserved();
        self.xid_locks
            .lock()
            .insert(xid, XidLock::new(lock_id(proc)));
        if let Some(e) = p.1.get_mut(&proc) {
            debug_assert_eq!(e.xid, Some(top), "subxid before its top-level xid");
            e.subxids.push(xid);
        }
        (xid, reservation)
    }

    /// Called under the proc-array lock, so an xid is in the running set as soon as
    /// it exists.
    fn next_xid_reserved(&self) -> (Xid, Option<XidReservation>) {
        let xid = Xid(self.next_xid.fetch_add(1, Ordering::AcqRel));
        let mut reservation = None;
        let mut r = self.xid_reserved_upto.lock();
        if xid.0 >= *r {
            *r = xid.0 + XID_LOG_BLOCK;
            reservation = Some(XidReservation(*r));
        }
        (xid, reservation)
    }

    /// Subtransactions of `proc` rolled back (their aborted status already in the
    /// clog): they leave the running set and their waiters wake, while the
    /// transaction goes on.
    pub fn end_subxids(&self, proc: u64, xids: &[Xid]) {
        if xids.is_empty() {
            return;
        }
        if let Some(e) = self.procs.lock().1.get_mut(&proc) {
            e.subxids.retain(|x| !xids.contains(x));
        }
        let mut locks = self.xid_locks.lock();
        for x in xids {
            if let Some(l) = locks.remove(x) {
                l.release();
            }
        }
    }

    /// Whether `a` and `b` are xids of one running transaction (its top-level xid or
    /// subtransactions not rolled back).
    pub fn same_transaction(&self, a: Xid, b: Xid) -> bool {
        if a == b {
            return true;
        }
        let locks = self.xid_locks.lock();
        matches!((locks.get(&a), locks.get(&b)), (Some(x), Some(y)) if x.top == y.top)
    }

    /// Takes a snapshot and registers its xmin for transaction `proc` (which keeps dead
    /// rows it may still see from being pruned).
    pub fn snapshot(&self, proc: u64) -> Snapshot {
        self.snapshot_with(proc, false)
    }

    /// A snapshot taken for one check inside a transaction that keeps its own (a
    /// foreign-key check under REPEATABLE READ): the registered xmin stays at the older
    /// of the two, so pruning never passes what the kept snapshot still sees.
    pub fn extra_snapshot(&self, proc: u64) -> Snapshot {
        self.snapshot_with(proc, true)
    }

    fn snapshot_with(&self, proc: u64, keep_older: bool) -> Snapshot {
        let mut p = self.procs.lock();
        let xmax = self.next_xid();
        let mut xip: Vec<Xid> = Vec::with_capacity(p.1.len());
        let mut oldest_snapshot = xmax;
        for e in p.1.values() {
            if let Some(x) = e.xid {
                xip.push(x);
            }
            xip.extend_from_slice(&e.subxids);
            if let Some(x) = e.snapshot_xmin {
                oldest_snapshot = oldest_snapshot.min(x);
            }
        }
        xip.sort_unstable();
        let xmin = xip.first().copied().unwrap_or(xmax);
        if let Some(e) = p.1.get_mut(&proc) {
            e.snapshot_xmin = match e.snapshot_xmin {
                Some(old) if keep_older => Some(old.min(xmin)),
                _ => Some(xmin),
            };
        }
        // The global xmin falls out of the same pass (our own older snapshot_xmin, if
        // any, only makes it lower: conservative).
        self.recent_global_xmin
            .fetch_max(xmin.min(oldest_snapshot).0, Ordering::AcqRel);
        Snapshot { xmin, xmax, xip }
    }

    /// Oldest xid any running transaction or snapshot may still need: tuples deleted by
    /// a committed xid below this are dead to everyone.
    pub fn global_xmin(&self) -> Xid {
        let p = self.procs.lock();
        let mut m = self.next_xid();
        for e in p.1.values() {
            if let Some(x) = e.xid {
                m = m.min(x);
            }
            if let Some(x) = e.snapshot_xmin {
                m = m.min(x);
            }
        }
        self.recent_global_xmin.fetch_max(m.0, Ordering::AcqRel);
        m
    }

    /// A horizon for opportunistic pruning: at or below [`global_xmin`](Self::global_xmin)
    /// and free to read (no lock). Pruning with an older horizon only removes less.
    pub fn prune_horizon(&self) -> Xid {
        Xid(self.recent_global_xmin.load(Ordering::Acquire))
    }

    /// Status of `xid` for a writer deciding whether it must wait: an xid still in the
    /// running set counts as in progress even if its clog bits are already set, so no
    /// writer builds on a commit that snapshots taken right now would not yet see
    /// (PostgreSQL checks the proc array before the clog for the same reason).
    pub fn status_for_write(&self, xid: Xid) -> std::result::Result<XidStatus, ClogError> {
        if self.xid_locks.lock().contains_key(&xid) {
            return Ok(XidStatus::InProgress);
        }
        self.try_status(xid)
    }

    /// Status of `xid`. An xid the clog still shows in progress but that is not running
    /// (a crash, or a failure between its abort record and its clog update) is aborted:
    /// running xids are registered before they can appear anywhere and stay registered
    /// until their final status is in the clog. Panics where the clog cannot answer
    /// ([`Clog::get_status`]); paths that change pages use [`TxnManager::try_status`].
    pub fn status(&self, xid: Xid) -> XidStatus {
        match self.try_status(xid) {
            Ok(s) => s,
            Err(e) => panic!("{e}"),
        }
    }

    /// [`TxnManager::status`], or why the clog cannot answer.
    pub fn try_status(&self, xid: Xid) -> std::result::Result<XidStatus, ClogError> {
        Ok(match self.clog.try_get_status(xid)? {
            XidStatus::InProgress if !self.xid_locks.lock().contains_key(&xid) => {
                // It may have finished between the two reads: its clog bits are set
                // before it leaves the running set, so a second read tells.
                match self.clog.try_get_status(xid)? {
                    XidStatus::InProgress => XidStatus::Aborted,
                    s => s,
                }
            }
            s => s,
        })
    }

    /// Ends transaction `proc` after its commit/abort is recorded (clog bits already set
    /// by the caller for an assigned xid): removes it from the running set and wakes
    /// every waiter on its xid.
    pub fn finish(&self, proc: u64, committed: bool) {
        let e = self.procs.lock().1.remove(&proc);
        let Some(e) = e else { return };
        if let Some(xid) = e.xid {
            if committed {
                self.stats.commits.fetch_add(1, Ordering::Relaxed);
            } else {
                self.stats.aborts.fetch_add(1, Ordering::Relaxed);
            }
            let mut locks = self.xid_locks.lock();
            for x in e.subxids.iter().chain(std::iter::once(&xid)) {
                if let Some(l) = locks.remove(x) {
                    l.release();
                }
            }
        }
    }

    /// Waits until `holder` ends (row-lock wait). Detects deadlocks through the
    /// waits-for graph; `interrupt` is polled so a cancel request ends the wait.
    /// `waiter` and `holder` may be subtransaction xids: the graph's edges join their
    /// top-level transactions.
    pub fn wait_for(&self, waiter: Xid, holder: Xid, how: LockWait<'_>) -> Result<()> {
        let (lock, waiter) = {
            let locks = self.xid_locks.lock();
            let Some(lock) = locks.get(&holder).cloned() else {
                return Ok(());
            };
            let waiter = locks.get(&waiter).map_or(waiter, |l| l.top);
            (lock, waiter)
        };
        let holder = lock.top;
        if holder == waiter {
            // Callers recognise their own xids first; waiting here would never end.
            return Err(Error::Internal(format!(
                "transaction {waiter} would wait for itself"
            )));
        }
        self.set_waits_for(waiter, &[holder])?;
        self.stats.row_lock_waits.fetch_add(1, Ordering::Relaxed);
        let deadline = how.timeout.map(|t| Instant::now() + t);
        let result = loop {
            let mut done = lock.done.lock();
            if *done {
                break Ok(());
            }
            // Wake at least every 50 ms to look at the interrupt flag.
            let slice = Instant::now() + Duration::from_millis(50);
            lock.cv
                .wait_until(&mut done, deadline.map_or(slice, |d| d.min(slice)));
            if *done {
                break Ok(());
            }
            drop(done);
            if how.interrupt.is_some_and(|f| f.load(Ordering::Relaxed)) {
                break Err(Error::Canceled);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                break Err(Error::LockTimeout);
            }
        };
        self.clear_waits_for(waiter);
        result
    }

    /// Records that `waiter` (a lock identity) waits for each of `holders` (lock
    /// identities or xids of theirs), replacing what it waited for before, unless one
    /// of them already waits, directly or through others, for `waiter`: then the wait
    /// would never end and is refused (40P01), the waiter being the victim.
    pub fn set_waits_for(&self, waiter: Xid, holders: &[Xid]) -> Result<()> {
        let tops: Vec<Xid> = {
            let locks = self.xid_locks.lock();
            holders
                .iter()
                .map(|h| locks.get(h).map_or(*h, |l| l.top))
                .collect()
        };
        let mut wf = self.waits_for.lock();
        // Depth-first from each holder over the waits-for edges.
        let mut stack = tops.clone();
        let mut seen = std::collections::HashSet::new();
        while let Some(x) = stack.pop() {
            if x == waiter {
                wf.remove(&waiter);
                self.stats.deadlocks.fetch_add(1, Ordering::Relaxed);
                return Err(Error::Deadlock);
            }
            if seen.insert(x) {
                if let Some(next) = wf.get(&x) {
                    stack.extend_from_slice(next);
                }
            }
        }
        wf.insert(waiter, tops);
        Ok(())
    }

    /// `waiter` no longer waits.
    pub fn clear_waits_for(&self, waiter: Xid) {
        self.waits_for.lock().remove(&waiter);
    }

    /// Recovery: the xid counter must pass every xid seen in WAL.
    pub fn advance_next_xid(&self, at_least: Xid) {
        self.next_xid.fetch_max(at_least.0, Ordering::AcqRel);
        let mut r = self.xid_reserved_upto.lock();
        *r = (*r).max(at_least.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cached pruning horizon never passes the exact global xmin (or pruning could
    /// remove a version an open snapshot still sees), and it advances once the oldest
    /// snapshot ends and someone takes a new one.
    #[test]
    fn prune_horizon_trails_the_global_xmin_and_advances() {
        let dir = tempfile::tempdir().unwrap();
        let txn = TxnManager::new(Clog::open(dir.path(), 2).unwrap(), Xid(100));
        let check = |txn: &TxnManager| {
            let (cached, exact) = (txn.prune_horizon(), txn.global_xmin());
            assert!(
                cached <= exact,
                "horizon {cached:?} above global xmin {exact:?}"
            );
        };
        // An old reader: a snapshot taken while writer `a` runs keeps `a` in view.
        let a = txn.begin();
        let (xa, _) = txn.assign_xid(a);
        let reader = txn.begin();
        let old = txn.snapshot(reader);
        assert_eq!(old.xmin, xa);
        check(&txn);
        txn.finish(a, true);
        // Later writers and snapshots: the reader's xmin still bounds the horizon.
        let mut last = Xid(0);
        for _ in 0..5 {
            let w = txn.begin();
            txn.assign_xid(w);
            let s = txn.begin();
            txn.snapshot(s);
            check(&txn);
            assert!(txn.prune_horizon() <= xa, "reader's snapshot ignored");
            assert!(txn.prune_horizon() >= last, "horizon went backwards");
            last = txn.prune_horizon();
            txn.finish(w, true);
            txn.finish(s, true);
        }
        // The reader ends; the next snapshot moves the horizon past `a`.
        txn.finish(reader, true);
        let s = txn.begin();
        txn.snapshot(s);
        check(&txn);
        assert!(txn.prune_horizon() > xa, "horizon did not advance");
    }
}
