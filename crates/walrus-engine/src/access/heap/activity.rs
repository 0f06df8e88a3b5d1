//! Per-table activity counters: PostgreSQL's `pg_stat_user_tables`, and what autovacuum
//! decides from.
//!
//! A transaction counts its own inserts, updates and deletes privately
//! ([`PendingActivity`]) and adds them here when it ends, so a rolled-back update counts
//! its new version as dead, not the old one. The counters live in memory; a clean
//! shutdown saves them and the next open restores them (`engine/table_stats.rs`). After
//! a crash they start from zero, as PostgreSQL's do, and the first vacuum of a table
//! recounts its live and dead rows. Changes since the last ANALYZE are counted the
//! same way (PostgreSQL's `n_mod_since_analyze`: committed inserts, updates and
//! deletes), for autovacuum's analyze rule.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::SystemTime;

use parking_lot::Mutex;

/// Cumulative counters of one table (one relation file: TRUNCATE starts a new set).
pub struct TableActivity {
    inserted: AtomicU64,
    updated: AtomicU64,
    hot_updated: AtomicU64,
    deleted: AtomicU64,
    /// Estimates: commits add to them while a vacuum counts, and a vacuum overwrites
    /// them with what it counted, as PostgreSQL's do.
    live: AtomicI64,
    dead: AtomicI64,
    vacuums: AtomicU64,
    autovacuums: AtomicU64,
    last_vacuum: Mutex<Option<SystemTime>>,
    last_autovacuum: Mutex<Option<SystemTime>>,
    /// Rows inserted, updated or deleted by committed transactions since the last
    /// ANALYZE (`n_mod_since_analyze`): what autovacuum's analyze rule reads.
    mod_since_analyze: AtomicU64,
    /// Rows inserted since the last vacuum, committed or rolled back (`n_ins_since_vacuum`,
    /// PostgreSQL's `inserts_since_vacuum`: a rolled-back insert left a dead version for
    /// the vacuum to find too).
    ins_since_vacuum: AtomicU64,
    /// Live rows the last vacuum or analyze counted, -1 before the first (PostgreSQL's
    /// `pg_class.reltuples`, which autovacuum's analyze threshold scales with: unlike
    /// `live`, it does not move with every commit).
    counted: AtomicI64,
    analyzes: AtomicU64,
    autoanalyzes: AtomicU64,
    last_analyze: Mutex<Option<SystemTime>>,
    last_autoanalyze: Mutex<Option<SystemTime>>,
    /// Sequential scans started and the rows they returned (`seq_scan`,
    /// `seq_tup_read`); index scans started and the live rows they fetched from the
    /// heap (`idx_scan`, `idx_tup_fetch`). Counted when a scan ends, whether its
    /// transaction commits or not, as PostgreSQL counts them.
    seq_scans: AtomicU64,
    seq_tup_read: AtomicU64,
    idx_scans: AtomicU64,
    idx_tup_fetch: AtomicU64,
}

impl Default for TableActivity {
    fn default() -> TableActivity {
        TableActivity {
            inserted: AtomicU64::new(0),
            updated: AtomicU64::new(0),
            hot_updated: AtomicU64::new(0),
            deleted: AtomicU64::new(0),
            live: AtomicI64::new(0),
            dead: AtomicI64::new(0),
            vacuums: AtomicU64::new(0),
            autovacuums: AtomicU64::new(0),
            last_vacuum: Mutex::new(None),
            last_autovacuum: Mutex::new(None),
            mod_since_analyze: AtomicU64::new(0),
            counted: AtomicI64::new(-1),
            analyzes: AtomicU64::new(0),
            autoanalyzes: AtomicU64::new(0),
            last_analyze: Mutex::new(None),
            last_autoanalyze: Mutex::new(None),
            seq_scans: AtomicU64::new(0),
            seq_tup_read: AtomicU64::new(0),
            ins_since_vacuum: AtomicU64::new(0),
            idx_scans: AtomicU64::new(0),
            idx_tup_fetch: AtomicU64::new(0),
        }
    }
}

/// One scan of a table, recorded in its [`TableActivity`] when dropped: however the
/// scan ends (done, stopped by a LIMIT, or failed), as PostgreSQL counts it.
pub struct ScanCount<'a> {
    activity: &'a TableActivity,
    index: bool,
    /// Rows the scan returned (sequential) or fetched from the heap (index).
    pub rows: u64,
}

impl Drop for ScanCount<'_> {
    fn drop(&mut self) {
        let a = self.activity;
        let (scans, rows) = if self.index {
            (&a.idx_scans, &a.idx_tup_fetch)
        } else {
            (&a.seq_scans, &a.seq_tup_read)
        };
        scans.fetch_add(1, Ordering::Relaxed);
        rows.fetch_add(self.rows, Ordering::Relaxed);
    }
}

/// One transaction's changes to one table, not yet visible in [`TableActivity`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PendingActivity {
    pub inserted: u64,
    pub updated: u64,
    pub hot_updated: u64,
    pub deleted: u64,
}

/// A copy of the counters, as `pg_stat_user_tables` shows them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ActivitySnapshot {
    pub inserted: u64,
    pub updated: u64,
    pub hot_updated: u64,
    pub deleted: u64,
    pub live: u64,
    pub dead: u64,
    pub vacuums: u64,
    pub autovacuums: u64,
    pub last_vacuum: Option<SystemTime>,
    pub last_autovacuum: Option<SystemTime>,
    pub mod_since_analyze: u64,
    /// Live rows the last vacuum or analyze counted (`None`: neither ran).
    pub counted: Option<u64>,
    pub analyzes: u64,
    pub autoanalyzes: u64,
    pub last_analyze: Option<SystemTime>,
    pub last_autoanalyze: Option<SystemTime>,
    pub seq_scans: u64,
    pub seq_tup_read: u64,
    pub ins_since_vacuum: u64,
    pub idx_scans: u64,
    pub idx_tup_fetch: u64,
}

impl TableActivity {
    /// Adds a finished transaction's changes. The row counts (`n_tup_ins`, `n_tup_upd`,
    /// `n_tup_hot_upd`, `n_tup_del`, `n_ins_since_vacuum`) count attempted changes,
    /// committed or not, as PostgreSQL's do. Committed: its deletes and the old versions
    /// of its updates are dead. Rolled back: its inserts and the new versions of its
    /// updates are dead, and no row is live, gone or changed for ANALYZE.
    pub fn end_transaction(&self, p: &PendingActivity, committed: bool) {
        self.inserted.fetch_add(p.inserted, Ordering::Relaxed);
        self.updated.fetch_add(p.updated, Ordering::Relaxed);
        self.hot_updated.fetch_add(p.hot_updated, Ordering::Relaxed);
        self.deleted.fetch_add(p.deleted, Ordering::Relaxed);
        self.ins_since_vacuum
            .fetch_add(p.inserted, Ordering::Relaxed);
        if committed {
            self.live
                .fetch_add(p.inserted as i64 - p.deleted as i64, Ordering::Relaxed);
            self.dead
                .fetch_add((p.updated + p.deleted) as i64, Ordering::Relaxed);
            self.mod_since_analyze
                .fetch_add(p.inserted + p.updated + p.deleted, Ordering::Relaxed);
        } else {
            self.dead
                .fetch_add((p.inserted + p.updated) as i64, Ordering::Relaxed);
        }
    }

    /// A vacuum finished: it counted `live` rows and `dead_left` dead versions it could
    /// not remove yet (some snapshot may still see them).
    pub fn vacuumed(&self, live: u64, dead_left: u64, auto: bool) {
        self.live.store(live as i64, Ordering::Relaxed);
        self.counted.store(live as i64, Ordering::Relaxed);
        self.dead.store(dead_left as i64, Ordering::Relaxed);
        self.ins_since_vacuum.store(0, Ordering::Relaxed);
        let now = Some(SystemTime::now());
        if auto {
            self.autovacuums.fetch_add(1, Ordering::Relaxed);
            *self.last_autovacuum.lock() = now;
        } else {
            self.vacuums.fetch_add(1, Ordering::Relaxed);
            *self.last_vacuum.lock() = now;
        }
    }

    /// An ANALYZE finished: it estimated `live` rows. The changes since the last one
    /// start again from zero (PostgreSQL's rule: changes committed while it ran are
    /// forgotten too).
    pub fn analyzed(&self, live: u64, auto: bool) {
        let live = live.min(i64::MAX as u64) as i64;
        self.live.store(live, Ordering::Relaxed);
        self.counted.store(live, Ordering::Relaxed);
        self.mod_since_analyze.store(0, Ordering::Relaxed);
        let now = Some(SystemTime::now());
        if auto {
            self.autoanalyzes.fetch_add(1, Ordering::Relaxed);
            *self.last_autoanalyze.lock() = now;
        } else {
            self.analyzes.fetch_add(1, Ordering::Relaxed);
            *self.last_analyze.lock() = now;
        }
    }

    /// Rows changed by committed transactions since the last ANALYZE.
    pub fn mod_since_analyze(&self) -> u64 {
        self.mod_since_analyze.load(Ordering::Relaxed)
    }

    /// Live rows the last vacuum or analyze counted; 0 before the first (PostgreSQL
    /// takes a never-counted table's `reltuples` as 0 in its thresholds).
    pub fn counted(&self) -> u64 {
        self.counted.load(Ordering::Relaxed).max(0) as u64
    }

    /// Rows inserted since the last vacuum, committed or not (`n_ins_since_vacuum`).
    pub fn ins_since_vacuum(&self) -> u64 {
        self.ins_since_vacuum.load(Ordering::Relaxed)
    }

    /// Dead row versions (estimate, never negative).
    pub fn dead(&self) -> u64 {
        self.dead.load(Ordering::Relaxed).max(0) as u64
    }

    /// Live rows (estimate, never negative).
    pub fn live(&self) -> u64 {
        self.live.load(Ordering::Relaxed).max(0) as u64
    }

    /// Puts back counters saved at a clean shutdown (`engine/table_stats.rs`).
    pub fn restore(&self, s: &ActivitySnapshot) {
        self.inserted.store(s.inserted, Ordering::Relaxed);
        self.updated.store(s.updated, Ordering::Relaxed);
        self.hot_updated.store(s.hot_updated, Ordering::Relaxed);
        self.deleted.store(s.deleted, Ordering::Relaxed);
        self.live.store(s.live as i64, Ordering::Relaxed);
        self.dead.store(s.dead as i64, Ordering::Relaxed);
        self.vacuums.store(s.vacuums, Ordering::Relaxed);
        self.autovacuums.store(s.autovacuums, Ordering::Relaxed);
        *self.last_vacuum.lock() = s.last_vacuum;
        *self.last_autovacuum.lock() = s.last_autovacuum;
        self.mod_since_analyze
            .store(s.mod_since_analyze, Ordering::Relaxed);
        self.counted.store(
            s.counted.map_or(-1, |n| n.min(i64::MAX as u64) as i64),
            Ordering::Relaxed,
        );
        self.analyzes.store(s.analyzes, Ordering::Relaxed);
        self.autoanalyzes.store(s.autoanalyzes, Ordering::Relaxed);
        *self.last_analyze.lock() = s.last_analyze;
        *self.last_autoanalyze.lock() = s.last_autoanalyze;
        self.seq_scans.store(s.seq_scans, Ordering::Relaxed);
        self.seq_tup_read.store(s.seq_tup_read, Ordering::Relaxed);
        self.ins_since_vacuum
            .store(s.ins_since_vacuum, Ordering::Relaxed);
        self.idx_scans.store(s.idx_scans, Ordering::Relaxed);
        self.idx_tup_fetch.store(s.idx_tup_fetch, Ordering::Relaxed);
    }

    /// Counts a sequential scan starting now; its rows are added as it returns them.
    pub fn seq_scan(&self) -> ScanCount<'_> {
        ScanCount {
            activity: self,
            index: false,
            rows: 0,
        }
    }

    /// Counts an index scan starting now; add the live rows it fetches from the heap.
    pub fn index_scan(&self) -> ScanCount<'_> {
        ScanCount {
            activity: self,
            index: true,
            rows: 0,
        }
    }

    pub fn snapshot(&self) -> ActivitySnapshot {
        ActivitySnapshot {
            inserted: self.inserted.load(Ordering::Relaxed),
            updated: self.updated.load(Ordering::Relaxed),
            hot_updated: self.hot_updated.load(Ordering::Relaxed),
            deleted: self.deleted.load(Ordering::Relaxed),
            live: self.live(),
            dead: self.dead(),
            vacuums: self.vacuums.load(Ordering::Relaxed),
            autovacuums: self.autovacuums.load(Ordering::Relaxed),
            last_vacuum: *self.last_vacuum.lock(),
            last_autovacuum: *self.last_autovacuum.lock(),
            mod_since_analyze: self.mod_since_analyze(),
            counted: u64::try_from(self.counted.load(Ordering::Relaxed)).ok(),
            analyzes: self.analyzes.load(Ordering::Relaxed),
            autoanalyzes: self.autoanalyzes.load(Ordering::Relaxed),
            last_analyze: *self.last_analyze.lock(),
            last_autoanalyze: *self.last_autoanalyze.lock(),
            seq_scans: self.seq_scans.load(Ordering::Relaxed),
            seq_tup_read: self.seq_tup_read.load(Ordering::Relaxed),
            ins_since_vacuum: self.ins_since_vacuum.load(Ordering::Relaxed),
            idx_scans: self.idx_scans.load(Ordering::Relaxed),
            idx_tup_fetch: self.idx_tup_fetch.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_and_rollback_count_different_versions_dead() {
        let a = TableActivity::default();
        assert_eq!((a.counted(), a.snapshot().counted), (0, None));
        let p = PendingActivity {
            inserted: 10,
            updated: 4,
            hot_updated: 3,
            deleted: 2,
        };
        a.end_transaction(&p, true);
        let s = a.snapshot();
        assert_eq!(
            (s.inserted, s.updated, s.hot_updated, s.deleted),
            (10, 4, 3, 2)
        );
        assert_eq!((s.live, s.dead), (8, 6));
        a.end_transaction(&p, false);
        let s = a.snapshot();
        // A rollback's changes count as attempted (PostgreSQL's n_tup_*), its new rows
        // and versions as dead (10 + 4), and no row as live or gone.
        assert_eq!(
            (s.inserted, s.updated, s.hot_updated, s.deleted),
            (20, 8, 6, 4)
        );
        assert_eq!((s.live, s.dead, s.ins_since_vacuum), (8, 20, 20));
        a.vacuumed(8, 1, true);
        let s = a.snapshot();
        assert_eq!((s.live, s.dead, s.autovacuums, s.vacuums), (8, 1, 1, 0));
        assert!(s.last_autovacuum.is_some() && s.last_vacuum.is_none());
        // Committed changes count toward the next analyze; rolled-back ones do not.
        assert_eq!((s.mod_since_analyze, s.counted), (16, Some(8)));
        a.analyzed(9, false);
        let s = a.snapshot();
        assert_eq!(
            (s.mod_since_analyze, s.live, s.analyzes, s.autoanalyzes),
            (0, 9, 1, 0)
        );
        assert_eq!((a.counted(), s.counted), (9, Some(9)));
        assert!(s.last_analyze.is_some() && s.last_autoanalyze.is_none());
        a.end_transaction(&p, true);
        a.analyzed(17, true);
        let s = a.snapshot();
        assert_eq!((s.mod_since_analyze, s.analyzes, s.autoanalyzes), (0, 1, 1));
        assert!(s.last_autoanalyze.is_some());
    }
}
