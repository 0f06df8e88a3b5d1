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
//! Autovacuum is one background thread. Every `autovacuum_naptime` it vacuums each
//! table whose dead row versions exceed `autovacuum_vacuum_threshold +
//! autovacuum_vacuum_scale_factor × live rows` (PostgreSQL's rule and defaults),
//! skipping a table another vacuum or DDL holds. It throttles itself with PostgreSQL's
//! cost model (a page visited costs 1, a page dirtied 20 more; after
//! `autovacuum_vacuum_cost_limit` it sleeps `autovacuum_vacuum_cost_delay`), so it
//! takes a bounded share of the page writers' and the WAL's bandwidth from the
//! foreground.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use walrus_base::{Tid, Xid};

use super::{Engine, Inner};
use crate::access::btree::BTree;
use crate::access::heap::{Heap, VacuumCounts};
use crate::catalog::TableDef;
use crate::error::{Error, Result};

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
    /// Vacuums one table, holding it against other vacuums and DDL. `Ok(None)`: an
    /// autovacuum found the table held or gone and skipped it.
    pub(super) fn vacuum_table(
        &self,
        name: &str,
        kind: VacuumKind,
        interrupt: Option<&AtomicBool>,
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
            let s = &inner.settings;
            let (delay, limit) = match kind {
                VacuumKind::Auto => (
                    s.autovacuum_vacuum_cost_delay,
                    s.autovacuum_vacuum_cost_limit,
                ),
                VacuumKind::Manual => (s.vacuum_cost_delay, s.vacuum_cost_limit),
            };
            let mut throttle = Throttle {
                limit: limit.max(1),
                delay,
                balance: 0,
                stop: [
                    Some(&guard.cancel),
                    interrupt,
                    (kind == VacuumKind::Auto).then_some(&inner.shutting_down),
                ],
                pages: 0,
                dirtied: 0,
                wal: Some(&inner.pool.wal),
            };
            let report = vacuum_relation(inner, &now, &mut throttle)?;
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

fn vacuum_relation(
    inner: &Inner,
    def: &TableDef,
    throttle: &mut Throttle<'_>,
) -> Result<VacuumReport> {
    let started = Instant::now();
    let rel = inner.rel(def.relfile, def.fillfactor);
    let heap = Heap::new(&inner.pool, &inner.txn, &rel);
    let nblocks = heap.nblocks()?;
    let mut dead: Vec<Tid> = Vec::new();
    let mut counts = VacuumCounts::default();
    for b in 0..nblocks {
        let changed = heap.vacuum_collect(b, &mut dead, &mut counts)?;
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
        pages_dirtied: throttle.dirtied,
        removed: dead.len() as u64,
        index_entries_removed,
        counts,
        elapsed: started.elapsed(),
    })
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
            let (dead, live) = (rel.activity.dead(), rel.activity.live());
            let threshold = s.autovacuum_vacuum_threshold
                + (s.autovacuum_vacuum_scale_factor * live as f64) as u64;
            if dead <= threshold {
                continue;
            }
            match engine.vacuum_table(&def.name, VacuumKind::Auto, None) {
                Ok(Some(r)) => tracing::info!(
                    "automatic vacuum of table \"{}\": pages: {} scanned, {} dirtied; tuples: {} pruned, {} remain, {} are dead but not yet removable; dead line pointers freed: {}, their index entries removed: {}; {:.1} ms",
                    r.table,
                    r.pages_scanned,
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
