//! VACUUM and autovacuum (DESIGN §7).
//!
//! A vacuum of one table runs in three phases: prune every page and collect its `DEAD`
//! line pointers, delete the index entries that point at them, then free the pointers.
//! The third phase is only safe because nothing else frees or reuses those pointers in
//! between, and because every index of the table was cleaned. The table locks
//! (`table_locks.rs`) guarantee both:
//! - two vacuums of one table never overlap (the second would delete index entries of
//!   a pointer the first already freed and an insert reused);
//! - DDL that changes a table's index set or removes its files (CREATE INDEX, DROP
//!   TABLE, TRUNCATE) holds the table from the statement until its transaction ends,
//!   so a vacuum never misses an index built after it read the catalog, nor works on
//!   files being unlinked. DDL cancels an autovacuum of the table and waits for a
//!   manual one, as PostgreSQL's lock conflicts do.
//!
//! A **freeze pass** (`Engine::freeze_pass`, DESIGN §6) lets the commit-status log be
//! truncated. It takes a cutoff (the global xmin: every xid below it has finished),
//! then vacuums every table and the catalog relation with `freeze_block` after each
//! page's prune, so every remaining tuple carries WAL-logged hint bits for its xids
//! below the cutoff. Once every relation is done, `(cutoff, end of the pass's WAL)` is
//! left for the checkpointer: the first checkpoint whose redo point is past that WAL
//! has flushed every frozen page, and only then deletes the clog segments below the
//! cutoff. A crash before that replays the FREEZE records (they carry the bits, not
//! a clog lookup); a crash after it finds the hints on disk. Tables created during the
//! pass hold only xids at or above the cutoff. A pass that skips a table (autovacuum
//! yields to DDL) truncates nothing; the next one starts over.
//!
//! Autovacuum is one background thread. Every `autovacuum_naptime` it vacuums each
//! table whose dead row versions exceed `autovacuum_vacuum_threshold +
//! autovacuum_vacuum_scale_factor × live rows`, or whose rows inserted since its last
//! vacuum exceed `autovacuum_vacuum_insert_threshold +
//! autovacuum_vacuum_insert_scale_factor × reltuples` (PostgreSQL's rules and defaults;
//! the second marks an insert-only table's pages settled, so later vacuums and freeze
//! passes skip them), skipping a table another vacuum or DDL holds. It throttles itself with PostgreSQL's
//! cost model (a page visited costs 1, a page dirtied 20 more; after
//! `autovacuum_vacuum_cost_limit` it sleeps `autovacuum_vacuum_cost_delay`), so it
//! takes a bounded share of the page writers' and the WAL's bandwidth from the
//! foreground. It also analyzes each table whose rows changed since its last ANALYZE
//! exceed `autovacuum_analyze_threshold + autovacuum_analyze_scale_factor × the rows
//! the last vacuum or analyze counted` (PostgreSQL's rule on `reltuples`, and its
//! defaults, 50 + 10%), through the analyzer the SQL layer
//! installs (`Engine::set_analyzer`; the statistics are that layer's). The analyze is
//! not throttled: it reads a sample of at most 300 × `default_statistics_target` blocks.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use walrus_base::{Tid, Xid};

use super::{Engine, Inner};
use crate::access::btree::BTree;
use crate::access::heap::{Heap, VacuumCounts};
use crate::catalog::{TableDef, CATALOG_RELFILE};
use crate::error::{Error, Result};
use crate::txn::clog::XIDS_PER_SEGMENT;

/// Vacuum's cost-based delay (PostgreSQL's `vacuum_cost_*`), and its stop check.
struct Throttle<'a> {
    limit: u64,
    delay: Duration,
    balance: u64,
    stop: [Option<&'a AtomicBool>; 3],
    pages: u64,
    dirtied: u64,
    /// Checked per page: on a full disk the vacuum stops with an error before its next
    /// page (a vacuum after a checkpoint logs an image of every page it changes).
    wal: Option<&'a crate::wal::Wal>,
}

/// Cost of a page a vacuum visits, and the extra cost of one it changes (PostgreSQL's
/// `vacuum_cost_page_hit` and `vacuum_cost_page_dirty`).
const COST_PAGE: u64 = 1;
const COST_DIRTY: u64 = 20;

impl Throttle<'_> {
    fn charge(&mut self, dirtied: bool) -> Result<()> {
        if let Some(wal) = self.wal {
            wal.ensure_headroom()?;
        }
        self.pages += 1;
        self.balance += COST_PAGE;
        if dirtied {
            self.dirtied += 1;
            self.balance += COST_DIRTY;
        }
        if self
            .stop
            .iter()
            .flatten()
            .any(|f| f.load(Ordering::Relaxed))
        {
            return Err(Error::Canceled);
        }
        if !self.delay.is_zero() && self.balance >= self.limit {
            // As PostgreSQL: sleep in proportion to the overshoot, at most 4 delays.
            let nap = self
                .delay
                .mul_f64(self.balance as f64 / self.limit as f64)
                .min(self.delay * 4);
            std::thread::sleep(nap);
            self.balance = 0;
        }
        Ok(())
    }
}

/// What one vacuum of a table did.
#[derive(Clone, Debug, Default)]
pub struct VacuumReport {
    pub table: String,
    pub pages_scanned: u64,
    /// Pages skipped as settled (`HeapRel::settled`): nothing to prune, rows counted.
    pub pages_skipped: u64,
    pub pages_dirtied: u64,
    /// Dead line pointers freed (each a row version no snapshot could see).
    pub removed: u64,
    pub index_entries_removed: u64,
    pub counts: VacuumCounts,
    pub elapsed: Duration,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum VacuumKind {
    Manual,
    Auto,
}

impl Engine {
    /// VACUUM: prunes every page, removes index entries of dead rows, frees their line
    /// pointers. Returns the number of dead row versions reclaimed.
    pub fn vacuum(&self, table: &str) -> Result<usize> {
        Ok(self
            .vacuum_with(Some(table), None)?
            .first()
            .map_or(0, |r| r.removed as usize))
    }

    /// VACUUM of one table or (`None`) of every table, with what each did. `interrupt`
    /// (a session's cancel flag) stops it between pages; what it finished stays done.
    pub fn vacuum_with(
        &self,
        table: Option<&str>,
        interrupt: Option<&AtomicBool>,
    ) -> Result<Vec<VacuumReport>> {
        let names: Vec<String> = match table {
            Some(t) => vec![t.to_string()],
            None => self.catalog_view()?.tables.keys().cloned().collect(),
        };
        let mut reports = Vec::new();
        for name in &names {
            match self.vacuum_table(name, VacuumKind::Manual, interrupt, None) {
                Ok(Some(r)) => reports.push(r),
                Ok(None) => {}
                // Dropped since the list was read.
                Err(Error::UndefinedTable(_)) if table.is_none() => {}
                Err(e) => return Err(e),
            }
        }
        // A database-wide VACUUM covers the catalog too, as PostgreSQL's covers the
        // system catalogs.
        if table.is_none() {
            reports.extend(self.vacuum_catalog(VacuumKind::Manual, interrupt)?);
        }
        Ok(reports)
    }

    pub fn vacuum_all(&self) -> Result<usize> {
        Ok(self
            .vacuum_with(None, None)?
            .iter()
            .map(|r| r.removed as usize)
            .sum())
    }

    /// VACUUM FREEZE. Of one table: a vacuum that also gives every tuple the hint bits
    /// for its xids below the global xmin. Of the whole database (`None`): a freeze pass
    /// over every table and the catalog, after which the next checkpoint deletes the
    /// commit-status log segments below the pass's cutoff (`engine/vacuum.rs`).
    pub fn vacuum_freeze(
        &self,
        table: Option<&str>,
        interrupt: Option<&AtomicBool>,
    ) -> Result<Option<FreezeReport>> {
        match table {
            Some(t) => {
                let cutoff = self.inner.txn.global_xmin();
                self.vacuum_table(t, VacuumKind::Manual, interrupt, Some(cutoff))?;
                Ok(None)
            }
            None => self.freeze_pass(VacuumKind::Manual, interrupt),
        }
    }

    /// Freeze passes completed since the engine opened (manual and automatic).
    pub fn freeze_passes(&self) -> u64 {
        self.inner.freeze_passes.load(Ordering::Relaxed)
    }

    /// Whether a vacuum (manual or automatic) of the table is running now.
    pub fn vacuum_in_progress(&self, def: &TableDef) -> bool {
        self.inner.table_locks.vacuum_running(def.relfile)
    }

    /// Autovacuums that stopped early because DDL wanted their table.
    pub fn autovacuums_canceled(&self) -> u64 {
        self.inner.autovacuums_canceled.load(Ordering::Relaxed)
    }
}

impl Engine {
    /// Vacuums one table, holding it against other vacuums and DDL. `Ok(None)`: an
    /// autovacuum found the table held or gone and skipped it.
    pub(super) fn vacuum_table(
        &self,
        name: &str,
        kind: VacuumKind,
        interrupt: Option<&AtomicBool>,
        freeze: Option<Xid>,
    ) -> Result<Option<VacuumReport>> {
        let inner = &self.inner;
        let locks = &inner.table_locks;
        loop {
            let def = self.catalog_view()?.table(name)?;
            let guard = match kind {
                VacuumKind::Auto => match locks.try_vacuum(def.relfile) {
                    Some(g) => g,
                    None => return Ok(None),
                },
                VacuumKind::Manual => locks.vacuum(def.relfile, interrupt)?,
            };
            // Held now: the table's files and index set cannot change until we let go.
            // Re-read the catalog in case DDL committed before we took the hold.
            let now = match self.catalog_view()?.table(name) {
                Ok(d) => d,
                Err(_) if kind == VacuumKind::Auto => return Ok(None),
                Err(e) => return Err(e),
            };
            if now.relfile != def.relfile || now.indexes != def.indexes {
                if kind == VacuumKind::Auto {
                    return Ok(None);
                }
                continue;
            }
            let mut throttle = Throttle::new(inner, kind, [Some(&guard.cancel), interrupt]);
            let report = vacuum_relation(inner, &now, &mut throttle, freeze)?;
            inner.rel(now.relfile, now.fillfactor).activity.vacuumed(
                report.counts.live,
                report.counts.dead_left,
                kind == VacuumKind::Auto,
            );
            drop(guard);
            return Ok(Some(report));
        }
    }
}

/// The catalog relation's name in vacuum reports and logs.
pub const CATALOG_NAME: &str = "walrus_catalog";

impl Engine {
    /// Vacuums the catalog relation: the dead versions DDL leaves (a CREATE/DROP TABLE
    /// cycle leaves two rows) are pruned and their line pointers freed, so the catalog
    /// stays the size of the live schema. It has no indexes, and holding `ddl_lock`
    /// keeps DDL out meanwhile (an autovacuum skips the catalog while DDL runs).
    /// `Ok(None)`: skipped.
    pub(super) fn vacuum_catalog(
        &self,
        kind: VacuumKind,
        interrupt: Option<&AtomicBool>,
    ) -> Result<Option<VacuumReport>> {
        let inner = &self.inner;
        let _ddl = match kind {
            VacuumKind::Auto => match inner.ddl_lock.try_lock() {
                Some(g) => g,
                None => return Ok(None),
            },
            VacuumKind::Manual => inner.ddl_lock.lock(),
        };
        let def = TableDef {
            name: CATALOG_NAME.to_string(),
            relfile: CATALOG_RELFILE,
            columns: Vec::new(),
            fillfactor: 100,
            indexes: Vec::new(),
            defaults: Vec::new(),
            constraints: Vec::new(),
            referenced_by: Vec::new(),
            attnums: Vec::new(),
        };
        let mut throttle = Throttle::new(inner, kind, [interrupt, None]);
        let report = vacuum_relation(inner, &def, &mut throttle, None)?;
        inner.rel(CATALOG_RELFILE, 100).activity.vacuumed(
            report.counts.live,
            report.counts.dead_left,
            kind == VacuumKind::Auto,
        );
        Ok(Some(report))
    }
}

impl<'a> Throttle<'a> {
    /// The cost limits of `kind`; an autovacuum also stops at shutdown.
    fn new(inner: &'a Inner, kind: VacuumKind, stop: [Option<&'a AtomicBool>; 2]) -> Self {
        let s = &inner.settings;
        let (delay, limit) = match kind {
            VacuumKind::Auto => (
                s.autovacuum_vacuum_cost_delay,
                s.autovacuum_vacuum_cost_limit,
            ),
            VacuumKind::Manual => (s.vacuum_cost_delay, s.vacuum_cost_limit),
        };
        Throttle {
            limit: limit.max(1),
            delay,
            balance: 0,
            stop: [
                stop[0],
                stop[1],
                (kind == VacuumKind::Auto).then_some(&inner.shutting_down),
            ],
            pages: 0,
            dirtied: 0,
            wal: Some(&inner.pool.wal),
        }
    }
}

/// What a freeze pass did.
#[derive(Clone, Debug)]
pub struct FreezeReport {
    /// Every tuple's xids below this have durable hint bits once the pass's WAL is
    /// behind a checkpoint's redo point.
    pub cutoff: Xid,
    /// Relations (tables and the catalog) passed over.
    pub relations: usize,
    /// Pages the pass changed (prunes and FREEZE records).
    pub pages_dirtied: u64,
    pub elapsed: Duration,
}

impl Engine {
    /// A freeze pass over every table and the catalog (see the module comment).
    /// `Ok(None)`: an autovacuum pass skipped a table another vacuum or DDL held, so
    /// nothing may be truncated yet.
    pub(super) fn freeze_pass(
        &self,
        kind: VacuumKind,
        interrupt: Option<&AtomicBool>,
    ) -> Result<Option<FreezeReport>> {
        let inner = &self.inner;
        // One pass at a time; a cancel request ends the wait for a running one.
        let _one = loop {
            if let Some(g) = inner.freeze_lock.try_lock_for(Duration::from_millis(50)) {
                break g;
            }
            if interrupt.is_some_and(|i| i.load(Ordering::Acquire)) {
                return Err(Error::Canceled);
            }
        };
        let started = Instant::now();
        // Every xid below the global xmin has finished, and a transaction that starts
        // from now on gets a larger one (xids are assigned under the same lock).
        let cutoff = inner.txn.global_xmin();
        // Read after the cutoff with a fresh snapshot: every table created by an xid
        // below the cutoff is visible to it (that xid has left the proc array). The
        // cache could still hold a view from before such a DDL's commit.
        let names: Vec<String> = self
            .catalog_view_uncached()?
            .tables
            .keys()
            .cloned()
            .collect();
        let mut pages_dirtied = 0;
        for name in &names {
            match self.vacuum_table(name, kind, interrupt, Some(cutoff)) {
                Ok(Some(r)) => pages_dirtied += r.pages_dirtied,
                Ok(None) => return Ok(None),
                // Dropped since the list was read: its files and tuples are gone.
                Err(Error::UndefinedTable(_)) => {}
                Err(e) => return Err(e),
            }
        }
        // The catalog relation: its rows hold the xids of the DDL that wrote them.
        // Only frozen, not vacuumed: concurrent DDL writes it, and the pruning an insert
        // does on a full page already reclaims its dead versions.
        let mut throttle = Throttle::new(inner, kind, [interrupt, None]);
        let rel = inner.rel(CATALOG_RELFILE, 100);
        let heap = Heap::new(&inner.pool, &inner.txn, &rel);
        for b in 0..heap.nblocks()? {
            let changed = heap.freeze_block(b, cutoff)?;
            throttle.charge(changed)?;
        }
        pages_dirtied += throttle.dirtied;
        let upto = inner.pool.wal.insert_lsn();
        let mut pending = inner.clog_truncate_pending.lock();
        if pending.is_none_or(|(c, _)| c <= cutoff) {
            *pending = Some((cutoff, upto));
        }
        inner.freeze_passes.fetch_add(1, Ordering::Relaxed);
        Ok(Some(FreezeReport {
            cutoff,
            relations: names.len() + 1,
            pages_dirtied,
            elapsed: started.elapsed(),
        }))
    }
}

/// After a checkpoint whose redo point is `redo`: deletes the clog segments a finished
/// freeze pass made unnecessary, if its WAL is behind `redo` (see the module comment).
pub(super) fn truncate_clog_after_checkpoint(inner: &Inner, redo: walrus_base::Lsn) {
    let ready = {
        let mut pending = inner.clog_truncate_pending.lock();
        match *pending {
            Some((cutoff, upto)) if upto <= redo => {
                *pending = None;
                Some(cutoff)
            }
            _ => None,
        }
    };
    let Some(cutoff) = ready else { return };
    let clog = &inner.txn.clog;
    let point = Xid(cutoff.0 / XIDS_PER_SEGMENT * XIDS_PER_SEGMENT);
    if point <= clog.oldest_xid() {
        return;
    }
    // The control file learns the new point before any file goes: a file missing at or
    // above the recorded point is then always damage, never a truncation (`Clog::open_at`).
    let recorded = {
        let mut c = inner.control.lock();
        let mut d = c.data().clone();
        d.clog_oldest = point;
        c.update(d)
    };
    if let Err(e) = recorded {
        tracing::warn!("could not record the commit-status log's truncation: {e}");
        return;
    }
    match clog.truncate_below(point) {
        Ok(0) => {}
        Ok(n) => tracing::info!(
            "commit-status log truncated: {n} segment(s) removed; statuses kept from xid {}",
            inner.txn.clog.oldest_xid()
        ),
        // Harmless: the files stay, and the next pass tries again.
        Err(e) => tracing::warn!("could not truncate the commit-status log: {e}"),
    }
}

fn vacuum_relation(
    inner: &Inner,
    def: &TableDef,
    throttle: &mut Throttle<'_>,
    freeze: Option<Xid>,
) -> Result<VacuumReport> {
    let started = Instant::now();
    let rel = inner.rel(def.relfile, def.fillfactor);
    let heap = Heap::new(&inner.pool, &inner.txn, &rel);
    let nblocks = heap.nblocks()?;
    let mut dead: Vec<Tid> = Vec::new();
    let mut counts = VacuumCounts::default();
    let mut pages_skipped = 0;
    let mut ring = inner.pool.ring_for_scan(nblocks);
    for b in 0..nblocks {
        // A page unchanged since it held only live, settled tuples would prune nothing
        // and count the same rows: skipped, as PostgreSQL's vacuum skips the pages its
        // visibility map marks. A freeze pass visits every page.
        if freeze.is_none() {
            if let Some(live) = rel.settled_live(b) {
                counts.live += live as u64;
                pages_skipped += 1;
                continue;
            }
        }
        let mut changed = heap.vacuum_collect(b, ring.as_mut(), &mut dead, &mut counts)?;
        if let Some(cutoff) = freeze {
            changed |= heap.freeze_block(b, cutoff)?;
        }
        throttle.charge(changed)?;
    }
    let mut index_entries_removed = 0;
    if !dead.is_empty() {
        let set: HashSet<Tid> = dead.iter().copied().collect();
        for idx in &def.indexes {
            index_entries_removed += BTree::open(&inner.pool, idx.relfile, idx.unique, &idx.name)
                .delete_tids(&set, Xid::INVALID, &mut |changed| throttle.charge(changed))?
                as u64;
        }
        // Collected block by block, in order: each run is one page's pointers.
        for page in dead.chunk_by(|a, b| a.block == b.block) {
            let offs: Vec<u16> = page.iter().map(|t| t.offset).collect();
            heap.vacuum_release(page[0].block, &offs)?;
            throttle.charge(true)?;
        }
    }
    Ok(VacuumReport {
        table: def.name.clone(),
        pages_scanned: throttle.pages,
        pages_skipped,
        pages_dirtied: throttle.dirtied,
        removed: dead.len() as u64,
        index_entries_removed,
        counts,
        elapsed: started.elapsed(),
    })
}

/// Runs one piece of autovacuum work, turning a panic (an always-on invariant check that
/// failed, such as a clog lookup below the truncation point) into that piece's error, as
/// PostgreSQL logs a failed autovacuum worker and carries on: otherwise the thread would
/// end and no table would be vacuumed again until a restart. Latches, pins and table
/// holds are guards, released while the panic unwinds.
fn contained<T>(work: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).unwrap_or_else(|p| {
        let what = p
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| p.downcast_ref::<&str>().copied())
            .unwrap_or("a panic");
        Err(Error::Internal(format!("autovacuum stopped: {what}")))
    })
}

/// Autovacuum's vacuum rules for one table: more dead row versions than
/// `autovacuum_vacuum_threshold + autovacuum_vacuum_scale_factor × live rows`, or more
/// rows inserted since the last vacuum than `autovacuum_vacuum_insert_threshold +
/// autovacuum_vacuum_insert_scale_factor × reltuples` (PostgreSQL 13's insert rule).
fn needs_autovacuum(
    s: &crate::settings::Settings,
    a: &crate::access::heap::activity::TableActivity,
) -> bool {
    let dead_threshold =
        s.autovacuum_vacuum_threshold + (s.autovacuum_vacuum_scale_factor * a.live() as f64) as u64;
    let by_inserts = s.autovacuum_vacuum_insert_threshold.is_some_and(|base| {
        let threshold =
            base + (s.autovacuum_vacuum_insert_scale_factor * a.counted() as f64) as u64;
        a.ins_since_vacuum() > threshold
    });
    a.dead() > dead_threshold || by_inserts
}

fn autovacuum_table(engine: &Engine, def: &TableDef, rel: &crate::access::heap::HeapRel) {
    let inner = &engine.inner;
    if !needs_autovacuum(&inner.settings, &rel.activity) {
        return;
    }
    match contained(|| engine.vacuum_table(&def.name, VacuumKind::Auto, None, None)) {
        Ok(Some(r)) => tracing::info!(
            "automatic vacuum of table \"{}\": pages: {} scanned, {} skipped as settled, {} dirtied; tuples: {} pruned, {} remain, {} are dead but not yet removable; dead line pointers freed: {}, their index entries removed: {}; {:.1} ms",
            r.table,
            r.pages_scanned,
            r.pages_skipped,
            r.pages_dirtied,
            r.counts.pruned,
            r.counts.live,
            r.counts.dead_left,
            r.removed,
            r.index_entries_removed,
            r.elapsed.as_secs_f64() * 1e3
        ),
        Ok(None) => {}
        Err(Error::Canceled) => {
            if !inner.shutting_down.load(Ordering::Acquire) {
                inner.autovacuums_canceled.fetch_add(1, Ordering::Relaxed);
            }
            tracing::info!(
                "canceling automatic vacuum of table \"{}\" (DDL or shutdown wants it)",
                def.name
            )
        }
        Err(e) => tracing::warn!("automatic vacuum of table \"{}\" failed: {e}", def.name),
    }
}

/// Autovacuum's analyze rule for one table (PostgreSQL's): more rows changed since
/// its last ANALYZE than `autovacuum_analyze_threshold +
/// autovacuum_analyze_scale_factor × the rows the last vacuum or analyze counted`. Runs the SQL layer's analyzer, if
/// one was installed.
fn autoanalyze_table(engine: &Engine, def: &TableDef, rel: &crate::access::heap::HeapRel) {
    let inner = &engine.inner;
    let s = &inner.settings;
    let Some(analyzer) = inner.analyzer.get() else {
        return;
    };
    // Scaled by the rows last counted (PostgreSQL's reltuples), not the running
    // estimate: deletes must not lower the bar they are measured against.
    let (changed, counted) = (rel.activity.mod_since_analyze(), rel.activity.counted());
    let threshold = s.autovacuum_analyze_threshold
        + (s.autovacuum_analyze_scale_factor * counted as f64) as u64;
    if changed <= threshold {
        return;
    }
    let started = Instant::now();
    match contained(|| analyzer(engine, &def.name).map_err(Error::Internal)) {
        Ok(()) => tracing::info!(
            "automatic analyze of table \"{}\": {changed} rows changed since the last; {:.1} ms",
            def.name,
            started.elapsed().as_secs_f64() * 1e3
        ),
        Err(e) => tracing::warn!("automatic analyze of table \"{}\" failed: {e}", def.name),
    }
}

/// The autovacuum thread: see the module comment.
pub(super) fn autovacuum_loop(engine: &Engine) {
    let inner = &engine.inner;
    let s = &inner.settings;
    loop {
        {
            let mut woken = inner.autovacuum_wake.0.lock();
            if !*woken {
                inner
                    .autovacuum_wake
                    .1
                    .wait_for(&mut woken, s.autovacuum_naptime);
            }
            *woken = false;
        }
        if inner.shutting_down.load(Ordering::Acquire) {
            return;
        }
        let view = match engine.catalog_view() {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!("autovacuum: could not read the catalog: {e}");
                continue;
            }
        };
        for def in view.tables.values() {
            if inner.shutting_down.load(Ordering::Acquire) {
                return;
            }
            // A table nobody touched since the engine opened has no counters.
            let Some(rel) = inner.rels.read().get(&def.relfile).cloned() else {
                continue;
            };
            autovacuum_table(engine, def, &rel);
            autoanalyze_table(engine, def, &rel);
        }
        // The catalog, by the same rule as a table.
        let catalog = inner.rel(CATALOG_RELFILE, 100);
        let (dead, live) = (catalog.activity.dead(), catalog.activity.live());
        if dead
            > s.autovacuum_vacuum_threshold
                + (s.autovacuum_vacuum_scale_factor * live as f64) as u64
        {
            match contained(|| engine.vacuum_catalog(VacuumKind::Auto, None)) {
                Ok(Some(r)) => tracing::info!(
                    "automatic vacuum of the catalog: {} pages scanned, {} dead line pointers freed; {:.1} ms",
                    r.pages_scanned,
                    r.removed,
                    r.elapsed.as_secs_f64() * 1e3
                ),
                Ok(None) | Err(Error::Canceled) => {}
                Err(e) => tracing::warn!("automatic vacuum of the catalog failed: {e}"),
            }
        }
        let oldest = inner.txn.clog.oldest_xid().0;
        let age = inner.txn.next_xid().0 - oldest;
        // Only when a pass could free a segment: an old snapshot holding the global
        // xmin in the oldest segment would otherwise cost a full pass every naptime.
        let could_free = inner.txn.global_xmin().0 / XIDS_PER_SEGMENT > oldest / XIDS_PER_SEGMENT;
        if age > s.autovacuum_freeze_max_age
            && could_free
            && inner.clog_truncate_pending.lock().is_none()
        {
            match contained(|| engine.freeze_pass(VacuumKind::Auto, None)) {
                Ok(Some(r)) => tracing::info!(
                    "automatic freeze pass: {} relations, {} pages changed, cutoff xid {}; {:.1} ms",
                    r.relations,
                    r.pages_dirtied,
                    r.cutoff,
                    r.elapsed.as_secs_f64() * 1e3
                ),
                Ok(None) => tracing::info!("automatic freeze pass skipped a busy table; retrying later"),
                Err(Error::Canceled) => {}
                Err(e) => tracing::warn!("automatic freeze pass failed: {e}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::datum::{Datum, TypeId};
    use crate::catalog::ColumnDef;
    use crate::engine::Isolation;

    /// The clog goes only at a checkpoint whose redo point is past the whole pass: an
    /// earlier redo point means recovery could replay the commit records of xids below
    /// the cutoff (and could find a frozen page on disk without its hints).
    #[test]
    fn truncation_waits_for_a_redo_point_past_the_freeze_pass() {
        let dir = tempfile::tempdir().unwrap();
        Engine::init(dir.path(), None).unwrap();
        let (e, _) = Engine::open(dir.path()).unwrap();
        let mut t = e.begin(Isolation::ReadCommitted);
        let col = ColumnDef {
            name: "v".into(),
            ty: TypeId::Int8,
            not_null: false,
            typmod: -1,
            declared: Default::default(),
        };
        let def = t.create_table("t", vec![col], 100).unwrap();
        t.commit().unwrap();
        let mut t = e.begin(Isolation::ReadCommitted);
        t.insert(&def, &[Datum::Int8(1)]).unwrap();
        t.commit().unwrap();
        e.txn_manager()
            .advance_next_xid(Xid(2 * XIDS_PER_SEGMENT + 7));
        let mut t = e.begin(Isolation::ReadCommitted);
        t.insert(&def, &[Datum::Int8(2)]).unwrap();
        t.commit().unwrap();
        let inner = &e.inner;
        let before_pass = inner.pool.wal.insert_lsn();
        let r = e.freeze_pass(VacuumKind::Manual, None).unwrap().unwrap();
        assert!(
            r.cutoff.0 > 2 * XIDS_PER_SEGMENT && r.relations == 2,
            "{r:?}"
        );
        let seg0 = dir.path().join("clog").join(format!("{:012X}", 0));
        inner.txn.clog.flush_all().unwrap(); // as the checkpoint does before it truncates
        truncate_clog_after_checkpoint(inner, before_pass);
        assert!(
            seg0.exists(),
            "a redo point inside the pass truncated the clog"
        );
        assert!(
            inner.clog_truncate_pending.lock().is_some(),
            "still pending"
        );
        truncate_clog_after_checkpoint(inner, inner.pool.wal.insert_lsn());
        assert!(!seg0.exists());
        assert_eq!(inner.txn.clog.oldest_xid(), Xid(2 * XIDS_PER_SEGMENT));
        assert!(inner.clog_truncate_pending.lock().is_none());
        e.shutdown().unwrap();
    }

    #[test]
    fn a_panic_in_autovacuum_work_is_that_works_error() {
        let r: Result<()> = contained(|| panic!("status of xid {} was truncated", 42));
        match r {
            Err(Error::Internal(m)) => assert!(m.contains("xid 42 was truncated"), "{m}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(contained(|| Ok(7)).unwrap(), 7);
    }

    #[test]
    fn throttle_sleeps_after_the_cost_limit_and_stops_when_asked() {
        let stop = AtomicBool::new(false);
        let mut t = Throttle {
            limit: 42,
            delay: Duration::from_millis(5),
            balance: 0,
            stop: [Some(&stop), None, None],
            pages: 0,
            dirtied: 0,
            wal: None,
        };
        let started = Instant::now();
        // Two dirtied pages cost 42: one sleep of one delay.
        t.charge(true).unwrap();
        t.charge(true).unwrap();
        assert!(started.elapsed() >= Duration::from_millis(5));
        assert_eq!((t.pages, t.dirtied, t.balance), (2, 2, 0));
        stop.store(true, Ordering::Relaxed);
        assert!(matches!(t.charge(false), Err(Error::Canceled)));
    }
}
