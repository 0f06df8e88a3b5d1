//! A transaction's state: its xid (assigned at the first write), command counter and
//! snapshot, its lock-wait settings (interrupt flag, `lock_timeout`), its pending row
//! counters, and its side of the table locks (`table_locks.rs`): the hold a writer or
//! DDL takes on a table and releases when the transaction ends. What a transaction does
//! is in `ddl.rs` (catalog, DDL) and `dml.rs` (rows, index maintenance); how it ends is
//! in `commit.rs`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use walrus_base::{RelFileId, Xid};

use super::table_locks::LockMode;
use super::{Engine, Inner};
use crate::access::heap::activity::PendingActivity;
use crate::access::heap::HeapRel;
use crate::catalog::{CatalogView, TableDef};
use crate::error::{Error, Result};
use crate::txn::{LockWait, Snapshot};
use crate::xlog;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isolation {
    ReadCommitted,
    RepeatableRead,
}

/// A transaction. Dropping it without commit rolls it back.
pub struct Transaction {
    pub(super) inner: Arc<Inner>,
    pub(super) proc: u64,
    /// The top-level xid (assigned at the first write).
    pub(super) xid: Option<Xid>,
    /// The top-level xid and the xids of subtransactions not rolled back, ascending:
    /// the versions this transaction sees as its own (`Viewer::own_xids`).
    pub(super) own_xids: Vec<Xid>,
    /// Open savepoints, outermost first (`engine/subxact.rs`).
    pub(super) subxacts: Vec<super::subxact::Subxact>,
    pub(super) cid: u32,
    wrote: bool,
    pub(super) isolation: Isolation,
    snapshot: Option<Snapshot>,
    pub(super) created: Vec<RelFileId>,
    pub(super) dropped: Vec<RelFileId>,
    pub(super) catalog_changed: bool,
    /// This transaction's own view of the catalog once it changed it (its uncommitted
    /// DDL included), with the committed-DDL version it was read at: reused until its
    /// own next catalog write or another transaction's DDL commit, so the statements
    /// after a CREATE TABLE (a `pgbench -i` COPY, chunk by chunk) never re-read the
    /// catalog relation.
    pub(super) own_catalog: Option<(u64, Arc<crate::catalog::CatalogView>)>,
    pub(super) interrupt: Option<Arc<AtomicBool>>,
    /// PostgreSQL's `lock_timeout` for this transaction's lock waits (`None`: wait on).
    lock_timeout: Option<Duration>,
    /// Whether commit waits for its WAL flush (`None`: the server's
    /// `synchronous_commit`); the session sets it from its own `synchronous_commit`.
    pub(super) synchronous_commit: Option<bool>,
    pub(super) finished: bool,
    /// This transaction's row changes per table, added to the tables' counters when it
    /// ends (a handful of tables: a linear search beats hashing).
    activity: Vec<(Arc<HeapRel>, PendingActivity)>,
    /// The table locks it holds until it ends, one entry per (table, mode)
    /// (`engine/table_locks.rs`).
    pub(super) table_locks: Vec<(RelFileId, LockMode)>,
    /// The definitions of the tables it writes, as of its registration as their writer
    /// (no other transaction's DDL can change them until it ends). A caller may still
    /// pass a definition it read earlier, before a concurrent CREATE INDEX committed.
    write_defs: Vec<Arc<TableDef>>,
    /// Row locks it holds, with the xid that took each (`engine/row_lock.rs`),
    /// released when it ends or when the savepoint that took one is rolled back.
    pub(super) row_lock_keys: Vec<(crate::txn::row_locks::RowLockKey, Xid)>,
    /// Per index (a handful: searched linearly), the leaf its last insert went to, tried
    /// first by the next (`BTree::insert_hinted`).
    pub(super) leaf_hints: Vec<(RelFileId, Option<u32>)>,
}

impl Engine {
    pub fn begin(&self, isolation: Isolation) -> Transaction {
        let proc = self.inner.txn.begin();
        Transaction {
            inner: self.inner.clone(),
            proc,
            xid: None,
            own_xids: Vec::new(),
            subxacts: Vec::new(),
            cid: 0,
            wrote: false,
            isolation,
            snapshot: None,
            created: Vec::new(),
            dropped: Vec::new(),
            catalog_changed: false,
            own_catalog: None,
            interrupt: None,
            lock_timeout: None,
            synchronous_commit: None,
            finished: false,
            activity: Vec::new(),
            table_locks: Vec::new(),
            write_defs: Vec::new(),
            row_lock_keys: Vec::new(),
            leaf_hints: Vec::new(),
        }
    }
}

impl Transaction {
    pub fn xid(&self) -> Option<Xid> {
        self.xid
    }

    /// The identity its table locks are held by (`TableLockInfo::owner`).
    pub fn lock_owner(&self) -> Xid {
        self.lock_id()
    }

    pub fn isolation(&self) -> Isolation {
        self.isolation
    }

    pub fn set_interrupt(&mut self, flag: Arc<AtomicBool>) {
        self.interrupt = Some(flag);
    }

    /// Bounds each lock wait from now on (`None`: no bound); the session sets it per
    /// statement from `lock_timeout`.
    pub fn set_lock_timeout(&mut self, timeout: Option<Duration>) {
        self.lock_timeout = timeout;
    }

    /// Whether this transaction's commit waits for its WAL to be durable (PostgreSQL's
    /// `synchronous_commit`, which a session may change for itself). Off, the commit
    /// returns before the flush and the WAL writer makes it durable within 3 ×
    /// `wal_writer_delay`; commits that change the catalog are flushed regardless.
    pub fn set_synchronous_commit(&mut self, on: bool) {
        self.synchronous_commit = Some(on);
    }

    pub(super) fn lock_wait(&self) -> LockWait<'_> {
        LockWait {
            interrupt: self.interrupt.as_deref(),
            timeout: self.lock_timeout,
        }
    }

    pub(super) fn check_interrupt(&self) -> Result<()> {
        interrupted(self.interrupt.as_deref())
    }

    /// Starts the next statement: later commands see this one's changes; READ COMMITTED
    /// takes a new snapshot.
    pub fn next_statement(&mut self) {
        if self.wrote {
            self.cid += 1;
            self.wrote = false;
        }
        if self.isolation == Isolation::ReadCommitted {
            self.snapshot = None;
        }
    }

    /// Makes this transaction's changes so far visible to what it reads next (the
    /// command counter, as between statements), without a new snapshot.
    pub(super) fn command_counter_increment(&mut self) {
        if self.wrote {
            self.cid += 1;
            self.wrote = false;
        }
    }

    /// Runs `f` reading through a snapshot taken now, then gives the transaction its
    /// own back: foreign-key checks see the latest committed rows, as PostgreSQL's
    /// referential-integrity checks do, whatever the isolation level.
    pub fn with_fresh_snapshot<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> R {
        let saved = self.snapshot.take();
        self.snapshot = Some(self.inner.txn.extra_snapshot(self.proc));
        let r = f(self);
        self.snapshot = saved;
        r
    }

    pub(super) fn snapshot(&mut self) -> Snapshot {
        if self.snapshot.is_none() {
            self.snapshot = Some(self.inner.txn.snapshot(self.proc));
        }
        self.snapshot.clone().expect("just set")
    }

    /// The top-level xid, assigned now if this is the transaction's first write.
    pub(super) fn ensure_xid(&mut self) -> Xid {
        if let Some(x) = self.xid {
            return x;
        }
        let (xid, reservation) = self.inner.txn.assign_xid(self.proc);
        if let Some(r) = reservation {
            self.inner.pool.wal.insert(&xlog::next_xid_record(r.0), &[]);
        }
        self.xid = Some(xid);
        debug_assert!(self.own_xids.is_empty());
        self.own_xids.push(xid);
        xid
    }

    /// Before a change: the xid the change is stamped with — the innermost open
    /// savepoint's subtransaction xid (assigned at its first write), else the
    /// top-level xid.
    pub(super) fn mark_write(&mut self) -> Xid {
        self.wrote = true;
        let top = self.ensure_xid();
        match self.subxacts.last() {
            None => top,
            Some(s) => match s.xid {
                Some(x) => x,
                None => self.assign_subxid(top),
            },
        }
    }

    /// Before a change that locks a table or a row on behalf of the whole
    /// transaction: the top-level xid (held until the transaction ends, whatever
    /// happens to its savepoints).
    pub(super) fn mark_write_top(&mut self) -> Xid {
        self.mark_write();
        self.ensure_xid()
    }

    /// The pending counters of `rel`'s table.
    pub(super) fn activity_of(&mut self, rel: &Arc<HeapRel>) -> &mut PendingActivity {
        let i = match self.activity.iter().position(|(r, _)| Arc::ptr_eq(r, rel)) {
            Some(i) => i,
            None => {
                self.activity
                    .push((rel.clone(), PendingActivity::default()));
                self.activity.len() - 1
            }
        };
        &mut self.activity[i].1
    }

    /// This transaction's lock identity (`txn::lock_id`), which table locks are held by.
    pub(super) fn lock_id(&self) -> Xid {
        crate::txn::lock_id(self.proc)
    }

    /// Takes `mode` on the table with file `relfile` until this transaction ends
    /// (`table_locks.rs`); at once if it holds that mode already. `nowait`: fail with
    /// 55P03 naming that table instead of waiting.
    pub(super) fn lock_relfile(
        &mut self,
        relfile: RelFileId,
        mode: LockMode,
        nowait: Option<&str>,
    ) -> Result<()> {
        if self.table_locks.contains(&(relfile, mode)) {
            return Ok(());
        }
        let me = self.lock_id();
        self.inner.table_locks.acquire(
            relfile,
            me,
            mode,
            &self.inner.txn,
            self.lock_wait(),
            nowait,
        )?;
        self.table_locks.push((relfile, mode));
        Ok(())
    }

    /// Whether this transaction holds a lock on the table at least as strong as
    /// Share (its own DDL: no other transaction changes the table's rows or
    /// definition until it ends).
    fn holds_ddl_lock(&self, relfile: RelFileId) -> bool {
        self.table_locks
            .iter()
            .any(|&(r, m)| r == relfile && m >= LockMode::Share)
    }

    /// `LOCK TABLE name IN mode MODE [NOWAIT]`, and how DDL resolves the table it
    /// changes: `mode` on the table until this transaction ends, and its definition
    /// read under it (DDL that committed while this waited shows).
    pub fn lock_table(
        &mut self,
        table: &str,
        mode: LockMode,
        nowait: bool,
    ) -> Result<Arc<TableDef>> {
        self.resolve_locked(table, mode, nowait, false)
    }

    /// `table`'s definition under `mode` on it: resolved, locked, and resolved again
    /// until the lock was taken on the file the name still names. `any_lock_will_do`:
    /// a lock this transaction already holds on the table in any mode is enough (a
    /// read's AccessShare conflicts with nothing a holder of another mode lets in).
    pub(super) fn resolve_locked(
        &mut self,
        table: &str,
        mode: LockMode,
        nowait: bool,
        any_lock_will_do: bool,
    ) -> Result<Arc<TableDef>> {
        loop {
            let def = self.catalog()?.table(table)?;
            if any_lock_will_do && self.table_locks.iter().any(|&(r, _)| r == def.relfile) {
                return Ok(def);
            }
            self.lock_relfile(def.relfile, mode, nowait.then_some(table))?;
            // A lock holder releases after its catalog change is visible.
            let now = self.catalog()?.table(table)?;
            if now.relfile == def.relfile {
                return Ok(now);
            }
        }
    }

    /// Before the first read of `def`'s table in this transaction: AccessShare, so
    /// TRUNCATE, DROP and ALTER TABLE wait until this transaction ends (any lock it
    /// holds on the table already excludes them). A table dropped or rewritten
    /// between the caller's read of `def` and the lock is 40001, as a write finds it.
    pub(super) fn lock_for_read(&mut self, def: &TableDef) -> Result<()> {
        if self.table_locks.iter().any(|&(r, _)| r == def.relfile) {
            return Ok(());
        }
        self.lock_relfile(def.relfile, LockMode::AccessShare, None)?;
        match self.table_unlocked(&def.name) {
            Ok(now) if now.relfile == def.relfile => Ok(()),
            Ok(_) | Err(Error::UndefinedTable(_)) => Err(Error::TableRewritten(def.name.clone())),
            Err(e) => Err(e),
        }
    }

    /// For DDL on `table`: takes `mode` on it until this transaction ends (after
    /// the transactions holding conflicting locks end, and any vacuum it conflicts
    /// with), then `ddl_lock`; returns the catalog and the table as they are under
    /// both. The table lock comes first because its wait must not happen under
    /// `ddl_lock`: a holder of the table that then ran DDL itself would wait for
    /// `ddl_lock`, a wait the deadlock check cannot see.
    pub(super) fn lock_for_ddl<'i>(
        &mut self,
        inner: &'i Inner,
        table: &str,
        mode: LockMode,
    ) -> Result<(
        parking_lot::MutexGuard<'i, ()>,
        Arc<CatalogView>,
        Arc<TableDef>,
    )> {
        loop {
            let relfile = self.lock_table(table, mode, false)?.relfile;
            self.mark_write_top();
            // This transaction's DDL changes the table: from now on its callers' own
            // reads of the definition are the current ones.
            self.write_defs.retain(|d| d.relfile != relfile);
            let guard = inner.ddl_lock.lock();
            let view = self.catalog()?;
            let def = view.table(table)?;
            // DDL that committed before the lock may have replaced the table's file.
            if def.relfile == relfile {
                return Ok((guard, view, def));
            }
        }
    }

    /// Before any change: a full disk must show as this operation's error, before it has
    /// changed a page (see `Wal::ensure_headroom`).
    pub(super) fn before_write(&self) -> Result<()> {
        self.inner.pool.wal.ensure_headroom()?;
        let next = self.inner.txn.next_xid().0;
        let clog = &self.inner.txn.clog;
        clog.reserve_space(next, next + CLOG_HEADROOM_XIDS)
            .map_err(|e| {
                Error::io(
                    "extend commit-status log",
                    self.inner.dir.join("clog").display(),
                    e,
                )
            })
    }

    /// Before the first row change of `def`'s table in this transaction: waits for DDL
    /// on it, registers as a writer, and returns the table's definition as it is now.
    /// DDL that committed since the caller read `def` shows here: a new index is used
    /// from now on; a table dropped or truncated (its tids no longer mean anything) is
    /// an error, as PostgreSQL reports one after waiting for the DDL's lock.
    pub(super) fn lock_for_write(&mut self, def: &TableDef) -> Result<Option<Arc<TableDef>>> {
        if let Some(current) = self.write_defs.iter().find(|d| d.relfile == def.relfile) {
            if std::ptr::eq(current.as_ref(), def) || current.indexes == def.indexes {
                return Ok(None);
            }
            return Ok(Some(current.clone()));
        }
        let own_ddl = self.holds_ddl_lock(def.relfile);
        self.mark_write_top();
        self.lock_relfile(def.relfile, LockMode::RowExclusive, None)?;
        if own_ddl {
            // Locked by this transaction's own DDL: the caller's definition is this
            // transaction's own view of the table.
            return Ok(None);
        }
        let now = self.table_unlocked(&def.name)?;
        if now.relfile != def.relfile {
            return Err(Error::TableRewritten(def.name.clone()));
        }
        self.write_defs.push(now.clone());
        Ok((now.indexes != def.indexes).then_some(now))
    }

    /// The transaction ended: publish its row counts and let go of its tables.
    /// Releases every row lock this transaction holds: before it leaves the running set
    /// (its waiters, woken then, find the locks gone).
    pub(super) fn release_row_locks(&mut self) {
        if !self.row_lock_keys.is_empty() {
            self.inner.txn.row_locks.release(&self.row_lock_keys);
            self.row_lock_keys.clear();
        }
    }

    pub(super) fn end_bookkeeping(&mut self, committed: bool) {
        for (rel, pending) in self.activity.drain(..) {
            rel.activity.end_transaction(&pending, committed);
        }
        if !self.table_locks.is_empty() {
            let me = self.lock_id();
            self.table_locks.sort_unstable();
            self.table_locks.dedup_by_key(|(r, _)| *r);
            for (table, _) in self.table_locks.drain(..) {
                self.inner.table_locks.release(table, me);
            }
        }
    }
}

/// Xids beyond the next one whose commit-status space a writer makes sure of (two pages'
/// worth): far more than the transactions that can start between two checks.
const CLOG_HEADROOM_XIDS: u64 = 2 * crate::txn::clog::XIDS_PER_PAGE;

/// `Canceled` once the session's interrupt flag (a cancel request, a timeout) is set:
/// [`Transaction::check_interrupt`], and a parallel scan's helpers, which hold the flag
/// but not the transaction.
pub(super) fn interrupted(flag: Option<&AtomicBool>) -> Result<()> {
    if flag.is_some_and(|f| f.load(Ordering::Relaxed)) {
        return Err(Error::Canceled);
    }
    Ok(())
}
