//! The engine's public API: create or open a data directory (running crash recovery),
//! transactions over tables and indexes, checkpoints, vacuum, shutdown.
//!
//! This file holds the [`Engine`] handle, the state its clones share (`Inner`), small
//! accessors and diagnostics. The API is split by what it does, one file each in
//! `engine/` (details in `engine/README.md`):
//!
//! | file               | what                                                          |
//! |--------------------|---------------------------------------------------------------|
//! | `open.rs`          | `init`, `open`/`open_with` (recovery hand-off), `shutdown`     |
//! | `checkpoint.rs`    | the checkpointer thread, `run_checkpoint`, checkpoint stats   |
//! | `calibrate.rs`     | init's replay-rate calibration (a synthetic crash, replayed)  |
//! | `transaction.rs`   | `Transaction`, `begin`: xid, snapshot, lock waits, table holds |
//! | `ddl.rs`           | catalog reads, CREATE TABLE/INDEX, DROP TABLE, TRUNCATE       |
//! | `dml.rs`           | insert, update, delete, scans, index maintenance, uniqueness  |
//! | `commit.rs`        | commit, rollback, rollback on drop; the commit protocol       |
//! | `vacuum.rs`        | VACUUM, freeze passes, autovacuum (and its analyze trigger)   |
//! | `sample.rs`        | ANALYZE's row sample: random blocks, a reservoir of rows      |
//! | `rewrite.rs`       | ALTER TABLE forms that rewrite every row (DROP COLUMN)        |
//! | `backends.rs`      | the sessions connected: pg_stat_activity, cancel, terminate   |
//! | `table_locks.rs`   | table locks in PostgreSQL's eight modes, and vacuums' holds   |
//! | `table_stats.rs`   | table counters saved at shutdown, restored at open            |

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use parking_lot::{Condvar, Mutex, RwLock};
use walrus_base::{Lsn, RelFileId, Tid, Xid, PAGE_SIZE};

use crate::access::heap::activity::ActivitySnapshot;
use crate::access::heap::tuple;
use crate::access::heap::{Heap, HeapRel};
use crate::buffer::page_writer::PageWriters;
use crate::buffer::BufferPool;
use crate::catalog::{CatalogView, TableDef};
use crate::error::{Error, Result};
use crate::settings::Settings;
use crate::storage::control::ControlFile;
use crate::txn::TxnManager;
use crate::wal::Wal;

mod backends;
mod calibrate;
mod checkpoint;
mod commit;
mod ddl;
mod dml;
mod open;
mod rewrite;
mod row_lock;
mod sample;
mod scan;
mod sequence;
mod subxact;
mod table_locks;
mod table_stats;
mod transaction;
mod vacuum;
pub use backends::{BackendActivity, BackendHandle, BackendState, Backends};
pub use calibrate::{Calibration, CALIBRATION_WAL_BYTES};
pub use checkpoint::{
    CheckpointReason, CheckpointStats, FlushDetail, RateSource, ReplayRate, RestartCost,
};
pub use dml::{datum_text, BatchFailure, RowChange};
pub use open::RecoveryReport;
pub use row_lock::{LockWaitPolicy, RowLockMode, RowLocked};
pub use sample::TableSample;
pub use scan::{parallel_scan_counts, MAX_PARALLEL_WORKERS};
use table_locks::TableLocks;
pub use table_locks::{LockMode, TableLockInfo};
pub use transaction::{Isolation, Transaction};
pub use vacuum::{FreezeReport, VacuumReport, CATALOG_NAME};

struct Inner {
    dir: PathBuf,
    /// This process's lock on the data directory, released by a clean shutdown (or by
    /// the kernel when the process dies).
    dir_lock: Mutex<Option<crate::storage::dir_lock::DirLock>>,
    settings: Settings,
    control: Mutex<ControlFile>,
    pool: Arc<BufferPool>,
    txn: TxnManager,
    rels: RwLock<HashMap<RelFileId, Arc<HeapRel>>>,
    next_relfile: AtomicU32,
    catalog_cache: RwLock<Option<Arc<CatalogView>>>,
    catalog_version: AtomicU64,
    /// Reads of the catalog relation (cache misses of `Transaction::catalog`).
    catalog_reads: AtomicU64,
    checkpoint_lock: Mutex<()>,
    checkpoint_request: (Mutex<bool>, Condvar),
    checkpoint_stats: Mutex<CheckpointStats>,
    last_checkpoint_at: Mutex<Instant>,
    shutting_down: AtomicBool,
    /// Serializes catalog changes (after the table lock of `table_locks.rs` is taken:
    /// one DDL statement writes the catalog at a time).
    ddl_lock: Mutex<()>,
    /// Index entries scans removed because their heap root was `DEAD`
    /// (`BTree::delete_dead_entries`).
    dead_index_entries_removed: AtomicU64,
    /// Table locks and vacuums' holds (`engine/table_locks.rs`).
    table_locks: TableLocks,
    /// The sessions connected (`engine/backends.rs`).
    backends: Arc<Backends>,
    /// Wakes the autovacuum thread early (shutdown).
    autovacuum_wake: (Mutex<bool>, Condvar),
    /// Autovacuums that stopped because DDL wanted their table.
    autovacuums_canceled: AtomicU64,
    /// What autovacuum runs to analyze a table (set by the SQL layer, which computes
    /// the statistics; without it autovacuum does not analyze).
    analyzer: std::sync::OnceLock<Analyzer>,
    /// One freeze pass at a time (`engine/vacuum.rs`).
    freeze_lock: Mutex<()>,
    /// Freeze passes completed (manual and automatic).
    freeze_passes: AtomicU64,
    /// A finished freeze pass's cutoff and the end of its WAL: the clog below the
    /// cutoff goes at the first checkpoint whose redo point is past that WAL.
    clog_truncate_pending: Mutex<Option<(Xid, Lsn)>>,
    /// The page writers' targets (redo lag, checkpoint help), set by the checkpointer.
    flush_control: Arc<crate::buffer::page_writer::FlushControl>,
    /// The WAL replay rate recovery_time_target is planned with.
    replay_rate: Mutex<checkpoint::ReplayRate>,
    /// `page_protection` differs from the one the control file recorded: the first
    /// checkpoint is a full one (cleared by it).
    protection_changed_pending: AtomicBool,
    /// Each sequence's values in memory, by relation file (`access/sequence.rs`).
    sequences: Mutex<HashMap<RelFileId, Arc<Mutex<crate::access::sequence::SeqCounter>>>>,
}

/// Analyzes one table by name for autovacuum (`Engine::set_analyzer`): the layer that
/// owns the statistics gathers and stores them in its own transaction and reports the
/// analyze with [`Engine::record_analyze`]. An error is logged, not retried at once.
pub type Analyzer = Box<dyn Fn(&Engine, &str) -> std::result::Result<(), String> + Send + Sync>;

/// An open walrus engine. Cheap to clone; shut down with [`Engine::shutdown`].
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
    background: Arc<Mutex<Option<Background>>>,
}

struct Background {
    page_writers: PageWriters,
    wal_writer: Option<crate::wal::writer::WalWriter>,
    checkpointer: Option<JoinHandle<()>>,
    autovacuum: Option<JoinHandle<()>>,
}

impl Engine {
    pub fn settings(&self) -> &Settings {
        &self.inner.settings
    }
    pub fn data_dir(&self) -> &Path {
        &self.inner.dir
    }
    pub fn pool(&self) -> &BufferPool {
        &self.inner.pool
    }
    pub fn wal(&self) -> &Wal {
        &self.inner.pool.wal
    }
    pub fn txn_manager(&self) -> &TxnManager {
        &self.inner.txn
    }
    /// Index entries removed by scans that found their heap chain dead to all.
    pub fn dead_index_entries_removed(&self) -> u64 {
        self.inner
            .dead_index_entries_removed
            .load(Ordering::Relaxed)
    }

    /// The table's activity counters (`pg_stat_user_tables`); zeros for a table not
    /// touched since the engine opened.
    pub fn table_activity(&self, def: &TableDef) -> ActivitySnapshot {
        self.inner
            .rels
            .read()
            .get(&def.relfile)
            .map(|r| r.activity.snapshot())
            .unwrap_or_default()
    }

    /// Installs autovacuum's analyzer (once; a second call is refused with `false`).
    pub fn set_analyzer(&self, analyzer: Analyzer) -> bool {
        self.inner.analyzer.set(analyzer).is_ok()
    }

    /// An ANALYZE of `def` (automatic or not) estimated `live` rows: counted in the
    /// table's activity (`pg_stat_user_tables`), and its changes since the last
    /// analyze start again from zero.
    pub fn record_analyze(&self, def: &TableDef, live: u64, auto: bool) {
        self.inner
            .rel(def.relfile, def.fillfactor)
            .activity
            .analyzed(live, auto);
    }

    /// Debugging aid: the raw header of the version at `tid` and its xids' status.
    pub fn debug_version(&self, def: &TableDef, tid: Tid) -> String {
        let rel = self.inner.rel(def.relfile, def.fillfactor);
        let heap = Heap::new(&self.inner.pool, &self.inner.txn, &rel);
        match heap.read_version(tid) {
            Ok(Some((h, _))) => format!(
                "{h:?} xmin:{:?} xmax:{:?}",
                tuple::xmin_status_for_write(&h, &self.inner.txn).ok(),
                if h.xmax.is_valid() {
                    tuple::xmax_status_for_write(&h, &self.inner.txn).ok()
                } else {
                    None
                }
            ),
            other => format!("{other:?}"),
        }
    }

    /// Reads every page of every relation from disk and verifies its checksum (an
    /// offline-style check; works on a running engine after a checkpoint). Returns the
    /// damaged pages as errors naming relation, block and both checksums.
    pub fn verify_all_pages(&self) -> Result<Vec<Error>> {
        let pool = &self.inner.pool;
        let mut bad = Vec::new();
        let mut buf = vec![0u8; PAGE_SIZE];
        for relfile in pool.relfiles.list()? {
            let n = pool.relfiles.nblocks(relfile)?;
            for b in 0..n {
                let id = walrus_base::PageId::new(relfile, b);
                pool.relfiles.read_page(id, &mut buf)?;
                match crate::storage::page::verify(&buf, id) {
                    crate::storage::page::PageCheck::Valid
                    | crate::storage::page::PageCheck::New => {}
                    crate::storage::page::PageCheck::ChecksumMismatch { stored, computed } => bad
                        .push(Error::ChecksumMismatch {
                            page: id,
                            relation: pool.relation_name(relfile),
                            stored,
                            computed,
                        }),
                    crate::storage::page::PageCheck::Misdirected { found } => {
                        bad.push(Error::Misdirected {
                            expected: id,
                            found,
                        })
                    }
                }
            }
        }
        Ok(bad)
    }
}

impl Inner {
    fn rel(&self, relfile: RelFileId, fillfactor: u8) -> Arc<HeapRel> {
        if let Some(r) = self.rels.read().get(&relfile) {
            return r.clone();
        }
        self.rels
            .write()
            .entry(relfile)
            .or_insert_with(|| Arc::new(HeapRel::new(relfile, fillfactor)))
            .clone()
    }
}
