//! The engine's public API: create or open a data directory (running crash recovery),
//! transactions over tables and indexes, checkpoints, vacuum, shutdown.
//!
//! Commit protocol (DESIGN §6): WAL commit record → flush (group commit) → clog bits →
//! release the transaction's row locks (wake waiters). The commit record is inserted and
//! the clog set under the shared `commit_barrier`, so a checkpoint's redo LSN never
//! falls between them.

use std::collections::{HashMap, HashSet};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};
use walrus_base::{Lsn, RelFileId, Tid, Xid, PAGE_SIZE};

use crate::access::btree::{BTree, UniqueCheck};
use crate::access::datum::{self, encode_key, encode_row, Datum};
use crate::access::heap::activity::{ActivitySnapshot, PendingActivity};
use crate::access::heap::tuple::{self, TupleHeader, Viewer};
use crate::access::heap::{Fetched, Heap, HeapRel, Modify};
use crate::buffer::page_writer::PageWriters;
use crate::buffer::{BufferPool, Writer};
use crate::catalog::{self, CatalogView, ColumnDef, IndexDef, TableDef, CATALOG_RELFILE};
use crate::error::{Error, Result};
use crate::settings::{PageProtection, Settings};
use crate::storage::control::{ControlData, ControlFile, DbState, FORMAT_VERSION};
use crate::txn::clog::{Clog, XidStatus};
use crate::txn::{LockWait, Snapshot, TxnManager};
use crate::wal::segment::{Segments, SyncMethod};
use crate::wal::{ImagePolicy, Wal, WalConfig};
use crate::xlog;

mod table_locks;
mod table_stats;
mod vacuum;
use table_locks::TableLocks;
use vacuum::VacuumKind;
pub use vacuum::{FreezeReport, VacuumReport};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isolation {
    ReadCommitted,
    RepeatableRead,
}

/// Why a checkpoint runs (logged, and decides whether it is spread or immediate).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckpointReason {
    Timed,
    WalSize,
    Requested,
    Shutdown,
    EndOfRecovery,
    /// A WAL segment could not be created for lack of disk space: a checkpoint lets the
    /// old segments be recycled into the ones needed next.
    WalSpace,
}

#[derive(Clone, Debug, Default)]
pub struct CheckpointStats {
    pub last_pages_written: u64,
    pub last_duration_ms: u64,
    pub last_redo: Lsn,
    /// Cumulative, as PostgreSQL's `pg_stat_bgwriter`: checkpoints started by
    /// `checkpoint_timeout` vs. by request (`CHECKPOINT`, `max_wal_size`, shutdown);
    /// their sum is the number completed.
    pub timed: u64,
    pub requested: u64,
    /// Milliseconds spent writing buffers and syncing files, summed over checkpoints.
    pub write_ms: u64,
    pub sync_ms: u64,
    pub pages_written: u64,
}

pub struct RecoveryReport {
    pub replayed_bytes: u64,
    pub records: u64,
    pub elapsed: Duration,
    pub rolled_back: u64,
    pub images_restored: u64,
}

struct Inner {
    dir: PathBuf,
    settings: Settings,
    control: Mutex<ControlFile>,
    pool: Arc<BufferPool>,
    txn: TxnManager,
    rels: RwLock<HashMap<RelFileId, Arc<HeapRel>>>,
    next_relfile: AtomicU32,
    catalog_cache: RwLock<Option<Arc<CatalogView>>>,
    catalog_version: AtomicU64,
    checkpoint_lock: Mutex<()>,
    checkpoint_request: (Mutex<bool>, Condvar),
    checkpoint_stats: Mutex<CheckpointStats>,
    last_checkpoint_at: Mutex<Instant>,
    shutting_down: AtomicBool,
    /// Serializes DDL (PostgreSQL would take AccessExclusive locks; walrus keeps DDL
    /// simple: one at a time).
    ddl_lock: Mutex<()>,
    /// Index entries scans removed because their heap root was `DEAD`
    /// (`BTree::delete_dead_entries`).
    dead_index_entries_removed: AtomicU64,
    /// Which tables writers, DDL and vacuums hold (`engine/table_locks.rs`).
    table_locks: TableLocks,
    /// Wakes the autovacuum thread early (shutdown).
    autovacuum_wake: (Mutex<bool>, Condvar),
    /// Autovacuums that stopped because DDL wanted their table.
    autovacuums_canceled: AtomicU64,
    /// One freeze pass at a time (`engine/vacuum.rs`).
    freeze_lock: Mutex<()>,
    /// Freeze passes completed (manual and automatic).
    freeze_passes: AtomicU64,
    /// A finished freeze pass's cutoff and the end of its WAL: the clog below the
    /// cutoff goes at the first checkpoint whose redo point is past that WAL.
    clog_truncate_pending: Mutex<Option<(Xid, Lsn)>>,
}

/// An open walrus engine. Cheap to clone; shut down with [`Engine::shutdown`].
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
    background: Arc<Mutex<Option<Background>>>,
}

struct Background {
    page_writers: PageWriters,
    checkpointer: Option<JoinHandle<()>>,
    autovacuum: Option<JoinHandle<()>>,
}

impl Engine {
    /// Creates a fresh data directory (`walrus init`).
    pub fn init(dir: &Path, settings_text: Option<&str>) -> Result<()> {
        let bad = |reason: String| Error::BadDataDirectory {
            dir: dir.display().to_string(),
            reason,
        };
        if dir.join("control").exists() {
            return Err(bad("it already contains a walrus data directory".into()));
        }
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io("create directory", dir.display(), e))?;
        let mut settings = Settings::default();
        let text = match settings_text {
            Some(t) => t.to_string(),
            None => crate::settings::default_config_text(settings.wal_segment_size),
        };
        settings.apply_toml(&text)?;
        std::fs::write(dir.join(crate::settings::CONFIG_FILE), text)
            .map_err(|e| Error::io("write configuration file", dir.display(), e))?;
        let segs = Segments::new(dir, settings.wal_segment_size, settings.wal_sync_method)?;
        let relfiles = crate::storage::relfile::RelFiles::open(dir)?;
        relfiles.create(CATALOG_RELFILE)?;
        std::fs::create_dir_all(dir.join("clog"))
            .map_err(|e| Error::io("create directory", dir.display(), e))?;
        // The first record of a new cluster: a checkpoint at LSN 0 whose redo is itself.
        let wal = Wal::open(
            segs,
            &wal_config(&settings),
            Lsn::ZERO,
            Lsn::ZERO,
            Lsn::ZERO,
            ImagePolicy::Never,
        );
        let info = xlog::CheckpointInfo {
            redo: Lsn::ZERO,
            next_xid: Xid::FIRST_NORMAL,
            next_relfile: RelFileId::FIRST_USER.0,
        };
        let (start, end) = wal.insert(&xlog::checkpoint_record(&info), &[]);
        wal.flush(end);
        let cluster_id = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1);
        ControlFile::create(
            dir,
            ControlData {
                seq: 0,
                cluster_id,
                format_version: FORMAT_VERSION,
                page_size: PAGE_SIZE as u32,
                wal_segment_size: settings.wal_segment_size,
                state: DbState::ShutDown,
                checkpoint_lsn: start,
                redo_lsn: Lsn::ZERO,
                next_xid: Xid::FIRST_NORMAL,
                next_relfile: RelFileId::FIRST_USER.0,
                clog_oldest: Xid(0),
            },
        )?;
        crate::storage::relfile::sync_dir(dir)?;
        Ok(())
    }

    /// Opens a data directory, running crash recovery if it was not shut down cleanly.
    pub fn open(dir: &Path) -> Result<(Engine, Option<RecoveryReport>)> {
        let settings = Settings::load(dir)?;
        Engine::open_with(dir, settings)
    }

    pub fn open_with(
        dir: &Path,
        mut settings: Settings,
    ) -> Result<(Engine, Option<RecoveryReport>)> {
        if !dir.join("control").exists() {
            return Err(Error::BadDataDirectory {
                dir: dir.display().to_string(),
                reason: "no control file: not a walrus data directory (run `walrus init` first)"
                    .into(),
            });
        }
        let control = ControlFile::open(dir)?;
        let cd = control.data().clone();
        settings.wal_segment_size = cd.wal_segment_size;
        if settings.wal_sync_method == SyncMethod::None {
            tracing::warn!("wal_sync_method = none: commits are NOT durable (testing only)");
        }
        let segs = Segments::new(dir, cd.wal_segment_size, settings.wal_sync_method)?;
        let leftovers = segs.remove_temp_files()?;
        if leftovers > 0 {
            tracing::info!("removed {leftovers} half-created WAL segment file(s)");
        }
        let scan_started = std::time::Instant::now();
        let wal_end = crate::recovery::find_end(&segs, cd.redo_lsn, cd.checkpoint_lsn)?;
        let scan_took = scan_started.elapsed();
        let crashed = cd.state != DbState::ShutDown || wal_end.end > cd.checkpoint_lsn.add(64);
        let policy = match settings.page_protection {
            PageProtection::Fpw => ImagePolicy::FirstChangeAfterRedo,
            PageProtection::None => ImagePolicy::Never,
        };
        let wal = Arc::new(Wal::open(
            segs,
            &wal_config(&settings),
            wal_end.end,
            wal_end.last_start,
            cd.redo_lsn,
            policy,
        ));
        let relfiles = Arc::new(crate::storage::relfile::RelFiles::open(dir)?);
        let pool = Arc::new(BufferPool::new(
            settings.shared_buffers_pages,
            relfiles,
            wal.clone(),
        )?);
        pool.set_relation_name(CATALOG_RELFILE, "walrus_catalog");
        // Xids below the checkpoint's next xid minus one reservation block were handed out
        // (the checkpoint records the reservation's end, up to that block ahead).
        let assigned_below = Xid(cd.next_xid.0.saturating_sub(crate::txn::XID_LOG_BLOCK));
        let clog = Clog::open_at(
            &dir.join("clog"),
            settings.clog_buffers,
            cd.clog_oldest,
            assigned_below,
        )
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidData => Error::BadDataDirectory {
                dir: dir.display().to_string(),
                reason: e.to_string(),
            },
            _ => Error::io("open commit-status log", dir.join("clog").display(), e),
        })?;
        let txn = TxnManager::new(clog, cd.next_xid);
        let page_writers = PageWriters::start(
            pool.clone(),
            settings.pagewriter_threads,
            settings.bgwriter_delay,
        );
        let mut report = None;
        let mut next_relfile = cd.next_relfile;
        if crashed {
            tracing::info!(
                "database system was not properly shut down; automatic recovery in progress from redo LSN {} ({} MB of WAL, {} records; end of WAL found and synced in {:.2} s)",
                cd.redo_lsn,
                wal_end.end.distance_from(cd.redo_lsn) >> 20,
                wal_end.records,
                scan_took.as_secs_f64()
            );
            let out =
                crate::recovery::replay(&wal.segments, &pool, &txn, cd.redo_lsn, wal_end.end)?;
            txn.advance_next_xid(Xid(out.max_xid.0 + 1).max(out.next_xid_reserved));
            next_relfile = next_relfile.max(out.max_relfile + 1);
            let s = &out.stats;
            tracing::info!(
                "redo done at {}: {} records, {} MB in {:.2} s ({:.1} MB/s), {} page images restored, {} transactions rolled back",
                wal_end.end,
                s.records,
                s.bytes >> 20,
                s.elapsed.as_secs_f64(),
                s.bytes as f64 / 1e6 / s.elapsed.as_secs_f64().max(1e-6),
                s.pages_restored_from_images,
                s.rolled_back
            );
            report = Some(RecoveryReport {
                replayed_bytes: s.bytes,
                records: s.records,
                elapsed: s.elapsed,
                rolled_back: s.rolled_back,
                images_restored: s.pages_restored_from_images,
            });
        }
        let inner = Arc::new(Inner {
            dir: dir.to_path_buf(),
            settings,
            control: Mutex::new(control),
            pool,
            txn,
            rels: RwLock::new(HashMap::new()),
            next_relfile: AtomicU32::new(next_relfile),
            catalog_cache: RwLock::new(None),
            catalog_version: AtomicU64::new(0),
            checkpoint_lock: Mutex::new(()),
            checkpoint_request: (Mutex::new(false), Condvar::new()),
            checkpoint_stats: Mutex::new(CheckpointStats::default()),
            last_checkpoint_at: Mutex::new(Instant::now()),
            shutting_down: AtomicBool::new(false),
            ddl_lock: Mutex::new(()),
            dead_index_entries_removed: AtomicU64::new(0),
            table_locks: TableLocks::default(),
            autovacuum_wake: (Mutex::new(false), Condvar::new()),
            autovacuums_canceled: AtomicU64::new(0),
            freeze_lock: Mutex::new(()),
            freeze_passes: AtomicU64::new(0),
            clog_truncate_pending: Mutex::new(None),
        });
        let engine = Engine {
            inner: inner.clone(),
            background: Arc::new(Mutex::new(None)),
        };
        if crashed {
            engine.checkpoint(CheckpointReason::EndOfRecovery)?;
        }
        inner.pool.relfiles.stop_creating_missing();
        // Mark the directory in use: a crash from here on is detected at the next open.
        {
            let mut c = inner.control.lock();
            let mut d = c.data().clone();
            d.state = DbState::InProduction;
            c.update(d)?;
        }
        let ckpt_inner = inner.clone();
        let checkpointer = std::thread::Builder::new()
            .name("walrus-checkpointer".into())
            .spawn(move || checkpointer_loop(&ckpt_inner))
            .map_err(|e| Error::io("start checkpointer thread", "", e))?;
        // Before autovacuum starts: its first round decides from these counters.
        engine.load_table_stats(crashed);
        let autovacuum = if inner.settings.autovacuum {
            // A handle without the background threads: they are joined through the
            // engine's own handle, and this one must not keep them alive.
            let av = Engine {
                inner: inner.clone(),
                background: Arc::new(Mutex::new(None)),
            };
            Some(
                std::thread::Builder::new()
                    .name("walrus-autovacuum".into())
                    .spawn(move || vacuum::autovacuum_loop(&av))
                    .map_err(|e| Error::io("start autovacuum thread", "", e))?,
            )
        } else {
            None
        };
        *engine.background.lock() = Some(Background {
            page_writers,
            checkpointer: Some(checkpointer),
            autovacuum,
        });
        // Refresh relation names for error messages.
        if let Ok(view) = engine.catalog_view() {
            for t in view.tables.values() {
                inner.pool.set_relation_name(t.relfile, &t.name);
                for i in &t.indexes {
                    inner.pool.set_relation_name(i.relfile, &i.name);
                }
            }
        }
        Ok((engine, report))
    }

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

    pub fn checkpoint_stats(&self) -> CheckpointStats {
        self.inner.checkpoint_stats.lock().clone()
    }

    pub fn begin(&self, isolation: Isolation) -> Transaction {
        let proc = self.inner.txn.begin();
        Transaction {
            inner: self.inner.clone(),
            proc,
            xid: None,
            cid: 0,
            wrote: false,
            isolation,
            snapshot: None,
            created: Vec::new(),
            dropped: Vec::new(),
            catalog_changed: false,
            interrupt: None,
            lock_timeout: None,
            finished: false,
            activity: Vec::new(),
            table_holds: Vec::new(),
            write_defs: Vec::new(),
        }
    }

    /// The committed catalog (cached until the next DDL commits).
    pub fn catalog_view(&self) -> Result<Arc<CatalogView>> {
        let mut t = self.begin(Isolation::ReadCommitted);
        let v = t.catalog()?;
        t.rollback()?;
        Ok(v)
    }

    /// [`Engine::catalog_view`] read from the catalog relation with a snapshot taken
    /// now, never from the cache.
    pub(crate) fn catalog_view_uncached(&self) -> Result<Arc<CatalogView>> {
        let mut t = self.begin(Isolation::ReadCommitted);
        let v = t.read_catalog()?;
        t.rollback()?;
        Ok(v)
    }

    /// Runs a checkpoint now (explicit `CHECKPOINT`, shutdown, end of recovery).
    pub fn checkpoint(&self, reason: CheckpointReason) -> Result<()> {
        run_checkpoint(&self.inner, reason)
    }

    pub fn request_checkpoint(&self) {
        let mut r = self.inner.checkpoint_request.0.lock();
        *r = true;
        self.inner.checkpoint_request.1.notify_all();
    }

    /// Clean shutdown: final checkpoint, control file marked shut down.
    pub fn shutdown(&self) -> Result<()> {
        if self.inner.shutting_down.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.request_checkpoint();
        {
            *self.inner.autovacuum_wake.0.lock() = true;
            self.inner.autovacuum_wake.1.notify_all();
        }
        let bg = self.background.lock().take();
        if let Some(mut bg) = bg {
            if let Some(h) = bg.autovacuum.take() {
                let _ = h.join();
            }
            if let Some(h) = bg.checkpointer.take() {
                let _ = h.join();
            }
            run_checkpoint(&self.inner, CheckpointReason::Shutdown)?;
            bg.page_writers.stop();
        }
        if let Err(e) = self.save_table_stats() {
            // Advisory: the counters restart from zero, as after a crash.
            tracing::warn!("could not save table statistics: {e}");
        }
        let mut c = self.inner.control.lock();
        let mut d = c.data().clone();
        d.state = DbState::ShutDown;
        c.update(d)?;
        Ok(())
    }

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
        Ok(reports)
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

    pub fn vacuum_all(&self) -> Result<usize> {
        Ok(self
            .vacuum_with(None, None)?
            .iter()
            .map(|r| r.removed as usize)
            .sum())
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

fn wal_config(s: &Settings) -> WalConfig {
    WalConfig {
        segment_size: s.wal_segment_size,
        buffer_bytes: s.wal_buffers_bytes,
        sync_method: s.wal_sync_method,
        compress_images: s.wal_compression,
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

fn checkpointer_loop(inner: &Arc<Inner>) {
    // The last preallocation found the disk full (logged once per episode).
    let mut wal_space_short = false;
    loop {
        let requested = {
            let mut r = inner.checkpoint_request.0.lock();
            if !*r {
                inner
                    .checkpoint_request
                    .1
                    .wait_for(&mut r, Duration::from_millis(100));
            }
            std::mem::take(&mut *r)
        };
        if inner.shutting_down.load(Ordering::Acquire) {
            return;
        }
        let since = inner.last_checkpoint_at.lock().elapsed();
        let wal = &inner.pool.wal;
        let wal_since = wal.insert_lsn().distance_from(wal.redo_lsn());
        let reason = if requested {
            Some(CheckpointReason::Requested)
        } else if wal_since >= inner.settings.max_wal_size_bytes / 2 {
            Some(CheckpointReason::WalSize)
        } else if since >= inner.settings.checkpoint_timeout && wal_since > 0 {
            Some(CheckpointReason::Timed)
        } else if wal_space_short && wal_since >= inner.settings.wal_segment_size {
            Some(CheckpointReason::WalSpace)
        } else {
            None
        };
        if let Some(reason) = reason {
            if let Err(e) = run_checkpoint(inner, reason) {
                tracing::error!("checkpoint failed: {e}");
            }
        }
        match wal.preallocate_next() {
            Ok(()) if wal_space_short => {
                tracing::info!("WAL segments can be created again");
                wal_space_short = false;
            }
            Ok(()) => {}
            Err(e) if e.is_out_of_space() => {
                if !wal_space_short {
                    tracing::warn!(
                        "could not preallocate a WAL segment: {e}; writes fail with SQLSTATE \
                         53100 until space is freed or a checkpoint recycles old segments"
                    );
                }
                wal_space_short = true;
            }
            Err(e) => tracing::warn!("could not preallocate a WAL segment: {e}"),
        }
    }
}

fn run_checkpoint(inner: &Inner, reason: CheckpointReason) -> Result<()> {
    let _one = inner.checkpoint_lock.lock();
    let started = Instant::now();
    let pool = &inner.pool;
    let wal = &pool.wal;
    let redo = {
        let _b = inner.txn.commit_barrier.write();
        wal.set_redo_point()
    };
    let next_xid = inner.txn.next_xid().max(Xid(inner.txn.xid_reserved_upto()));
    let next_relfile = inner.next_relfile.load(Ordering::Acquire);
    let spread = matches!(reason, CheckpointReason::Timed);
    let target = inner
        .settings
        .checkpoint_timeout
        .mul_f64(inner.settings.checkpoint_completion_target);
    let dirty_at_start = pool.dirty_pages().max(1);
    let mut written = 0usize;
    loop {
        let (n, more) = pool.flush_queue_head(redo, 32, Writer::Checkpointer)?;
        written += n;
        if !more {
            break;
        }
        if spread && !inner.shutting_down.load(Ordering::Acquire) {
            // Pace: stay no further ahead of schedule than the elapsed fraction allows.
            let progress = written as f64 / dirty_at_start as f64;
            let elapsed = started.elapsed().as_secs_f64() / target.as_secs_f64().max(0.001);
            if progress > elapsed && !*inner.checkpoint_request.0.lock() {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
    let write_done = Instant::now();
    let synced = pool.relfiles.sync_pending()?;
    let sync_ms = write_done.elapsed().as_millis() as u64;
    inner.txn.clog.flush_all().map_err(|e| {
        Error::io(
            "flush commit-status log",
            inner.dir.join("clog").display(),
            e,
        )
    })?;
    let info = xlog::CheckpointInfo {
        redo,
        next_xid,
        next_relfile,
    };
    let (start, end) = wal.insert(&xlog::checkpoint_record(&info), &[]);
    wal.flush(end);
    {
        let mut c = inner.control.lock();
        let mut d = c.data().clone();
        d.checkpoint_lsn = start;
        d.redo_lsn = redo;
        d.next_xid = next_xid;
        d.next_relfile = next_relfile;
        c.update(d)?;
    }
    let keep_future = (inner.settings.max_wal_size_bytes / wal.segments.segment_size).max(2);
    let (recycled, removed) = wal
        .segments
        .recycle_before(redo, wal.insert_lsn(), keep_future)?;
    vacuum::truncate_clog_after_checkpoint(inner, redo);
    let ms = started.elapsed().as_millis() as u64;
    *inner.last_checkpoint_at.lock() = Instant::now();
    {
        let mut s = inner.checkpoint_stats.lock();
        s.last_pages_written = written as u64;
        s.last_duration_ms = ms;
        s.last_redo = redo;
        if matches!(reason, CheckpointReason::Timed) {
            s.timed += 1;
        } else {
            s.requested += 1;
        }
        s.write_ms += write_done.duration_since(started).as_millis() as u64;
        s.sync_ms += sync_ms;
        s.pages_written += written as u64;
    }
    tracing::info!(
        "checkpoint complete ({reason:?}): wrote {written} buffers, synced {synced} files; WAL segments recycled {recycled}, removed {removed}; redo lsn {redo}; took {ms} ms"
    );
    Ok(())
}

/// Result of an update or delete through the engine.
#[derive(Debug)]
pub enum RowChange {
    Done(Tid),
    /// READ COMMITTED: the row was changed by a transaction that committed after our
    /// snapshot; this is its newest version. Re-check the statement's condition on it and
    /// call again with this tid.
    Changed(Tid, Vec<Datum>),
    /// The row was deleted concurrently (or no longer exists).
    Gone,
    /// Already changed by this transaction.
    SelfModified,
}

/// A transaction. Dropping it without commit rolls it back.
pub struct Transaction {
    inner: Arc<Inner>,
    proc: u64,
    xid: Option<Xid>,
    cid: u32,
    wrote: bool,
    isolation: Isolation,
    snapshot: Option<Snapshot>,
    created: Vec<RelFileId>,
    dropped: Vec<RelFileId>,
    catalog_changed: bool,
    interrupt: Option<Arc<AtomicBool>>,
    /// PostgreSQL's `lock_timeout` for this transaction's lock waits (`None`: wait on).
    lock_timeout: Option<Duration>,
    finished: bool,
    /// This transaction's row changes per table, added to the tables' counters when it
    /// ends (a handful of tables: a linear search beats hashing).
    activity: Vec<(Arc<HeapRel>, PendingActivity)>,
    /// Tables it holds as a writer or through DDL until it ends
    /// (`engine/table_locks.rs`).
    table_holds: Vec<RelFileId>,
    /// The definitions of the tables it writes, as of its registration as their writer
    /// (no other transaction's DDL can change them until it ends). A caller may still
    /// pass a definition it read earlier, before a concurrent CREATE INDEX committed.
    write_defs: Vec<Arc<TableDef>>,
}

impl Transaction {
    pub fn xid(&self) -> Option<Xid> {
        self.xid
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
    fn lock_wait(&self) -> LockWait<'_> {
        LockWait {
            interrupt: self.interrupt.as_deref(),
            timeout: self.lock_timeout,
        }
    }
    fn check_interrupt(&self) -> Result<()> {
        if self
            .interrupt
            .as_ref()
            .is_some_and(|f| f.load(Ordering::Relaxed))
        {
            return Err(Error::Canceled);
        }
        Ok(())
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

    fn snapshot(&mut self) -> Snapshot {
        if self.snapshot.is_none() {
            self.snapshot = Some(self.inner.txn.snapshot(self.proc));
        }
        self.snapshot.clone().expect("just set")
    }

    fn ensure_xid(&mut self) -> Xid {
        if let Some(x) = self.xid {
            return x;
        }
        let (xid, reservation) = self.inner.txn.assign_xid(self.proc);
        if let Some(r) = reservation {
            self.inner.pool.wal.insert(&xlog::next_xid_record(r.0), &[]);
        }
        self.xid = Some(xid);
        xid
    }

    fn mark_write(&mut self) -> Xid {
        self.wrote = true;
        self.ensure_xid()
    }

    /// The pending counters of `rel`'s table.
    fn activity_of(&mut self, rel: &Arc<HeapRel>) -> &mut PendingActivity {
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

    /// For DDL that changes `table`'s index set or removes its files: holds the table
    /// until this transaction ends (after its other writers and any vacuum let go),
    /// then takes `ddl_lock`; returns the catalog and the table as they are under both.
    /// The hold comes first because its wait must not happen under `ddl_lock`: a
    /// writer of the table that then ran DDL itself would wait for `ddl_lock`, a wait
    /// the deadlock check cannot see.
    fn lock_for_ddl<'i>(
        &mut self,
        inner: &'i Inner,
        table: &str,
    ) -> Result<(
        parking_lot::MutexGuard<'i, ()>,
        Arc<CatalogView>,
        Arc<TableDef>,
    )> {
        loop {
            let relfile = self.catalog()?.table(table)?.relfile;
            if !self.holds_ddl(relfile) {
                let xid = self.mark_write();
                inner
                    .table_locks
                    .begin_ddl(relfile, xid, &inner.txn, self.lock_wait())?;
                if !self.table_holds.contains(&relfile) {
                    self.table_holds.push(relfile);
                }
            }
            // This transaction's DDL changes the table: from now on its callers' own
            // reads of the definition are the current ones.
            self.write_defs.retain(|d| d.relfile != relfile);
            let guard = inner.ddl_lock.lock();
            let view = self.catalog()?;
            let def = view.table(table)?;
            // DDL that committed before the hold may have replaced the table's file.
            if def.relfile == relfile {
                return Ok((guard, view, def));
            }
        }
    }

    fn holds_ddl(&self, relfile: RelFileId) -> bool {
        self.xid
            .is_some_and(|x| self.inner.table_locks.ddl_holder(relfile) == Some(x))
    }

    /// Before any change: a full disk must show as this operation's error, before it has
    /// changed a page (see `Wal::ensure_headroom`).
    fn before_write(&self) -> Result<()> {
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
    fn lock_for_write(&mut self, def: &TableDef) -> Result<Option<Arc<TableDef>>> {
        if let Some(current) = self.write_defs.iter().find(|d| d.relfile == def.relfile) {
            if std::ptr::eq(current.as_ref(), def) || current.indexes == def.indexes {
                return Ok(None);
            }
            return Ok(Some(current.clone()));
        }
        if self.table_holds.contains(&def.relfile) {
            // Held through this transaction's own DDL: the caller's definition is this
            // transaction's own view of the table.
            return Ok(None);
        }
        let xid = self.mark_write();
        self.inner.table_locks.lock_for_write(
            def.relfile,
            xid,
            &self.inner.txn,
            self.lock_wait(),
        )?;
        self.table_holds.push(def.relfile);
        let now = self.table(&def.name)?;
        if now.relfile != def.relfile {
            return Err(Error::TableRewritten(def.name.clone()));
        }
        self.write_defs.push(now.clone());
        Ok((now.indexes != def.indexes).then_some(now))
    }

    /// The transaction ended: publish its row counts and let go of its tables.
    fn end_bookkeeping(&mut self, committed: bool) {
        for (rel, pending) in self.activity.drain(..) {
            rel.activity.end_transaction(&pending, committed);
        }
        if let Some(xid) = self.xid {
            for table in self.table_holds.drain(..) {
                self.inner.table_locks.release(table, xid);
            }
        }
    }

    // ---- catalog ---------------------------------------------------------------------

    pub fn catalog(&mut self) -> Result<Arc<CatalogView>> {
        if !self.catalog_changed {
            if let Some(v) = self.inner.catalog_cache.read().clone() {
                return Ok(v);
            }
        }
        self.read_catalog()
    }

    /// The catalog read now, past the shared cache: a DDL transaction leaves the
    /// proc array before it clears the cache, so a cached view can briefly miss a
    /// table whose xid is already below the global xmin (the freeze pass's cutoff).
    pub(crate) fn read_catalog(&mut self) -> Result<Arc<CatalogView>> {
        let version = self.inner.catalog_version.load(Ordering::Acquire);
        let snap = if self.catalog_changed {
            self.snapshot()
        } else {
            self.inner.txn.snapshot(self.proc)
        };
        let viewer = Viewer {
            snapshot: &snap,
            own_xid: self.xid,
            cid: self.cid + 1,
        };
        let rel = self.inner.rel(CATALOG_RELFILE, 100);
        let heap = Heap::new(&self.inner.pool, &self.inner.txn, &rel);
        let mut rows = Vec::new();
        for b in 0..heap.nblocks()? {
            heap.scan_block(b, &viewer, &mut rows)?;
        }
        let entries = rows
            .iter()
            .map(|(tid, r)| catalog::decode_entry(*tid, r))
            .collect::<Result<Vec<_>>>()?;
        let view = Arc::new(CatalogView::build(entries));
        if !self.catalog_changed && self.inner.catalog_version.load(Ordering::Acquire) == version {
            *self.inner.catalog_cache.write() = Some(view.clone());
        }
        Ok(view)
    }

    pub fn table(&mut self, name: &str) -> Result<Arc<TableDef>> {
        self.catalog()?.table(name)
    }

    fn new_relfile(&mut self) -> Result<RelFileId> {
        let xid = self.mark_write();
        let r = RelFileId(self.inner.next_relfile.fetch_add(1, Ordering::AcqRel));
        let (_, end) = self
            .inner
            .pool
            .wal
            .insert(&xlog::storage_create_record(r, xid), &[]);
        self.inner.pool.wal.flush(end);
        self.inner.pool.relfiles.create(r)?;
        self.created.push(r);
        Ok(r)
    }

    fn catalog_insert(&mut self, row: &[u8]) -> Result<Tid> {
        let xid = self.mark_write();
        self.catalog_changed = true;
        let rel = self.inner.rel(CATALOG_RELFILE, 100);
        Heap::new(&self.inner.pool, &self.inner.txn, &rel).insert(xid, self.cid, row)
    }

    fn catalog_delete(&mut self, tid: Tid) -> Result<()> {
        let xid = self.mark_write();
        self.catalog_changed = true;
        let rel = self.inner.rel(CATALOG_RELFILE, 100);
        match Heap::new(&self.inner.pool, &self.inner.txn, &rel).delete(tid, xid, self.cid)? {
            Modify::Done(_) | Modify::SelfModified => Ok(()),
            _ => Err(Error::SerializationFailure),
        }
    }

    pub fn create_table(
        &mut self,
        name: &str,
        columns: Vec<ColumnDef>,
        fillfactor: u8,
    ) -> Result<Arc<TableDef>> {
        self.before_write()?;
        let inner = self.inner.clone();
        let _ddl = inner.ddl_lock.lock();
        if columns.len() > walrus_base::limits::COLUMNS_MAX {
            return Err(Error::InvalidInput(format!(
                "tables can have at most {} columns",
                walrus_base::limits::COLUMNS_MAX
            )));
        }
        let view = self.catalog()?;
        if view.tables.contains_key(name) || view.index_names().any(|n| n == name) {
            return Err(Error::DuplicateTable(name.to_string()));
        }
        let relfile = self.new_relfile()?;
        let def = TableDef {
            name: name.to_string(),
            relfile,
            columns,
            fillfactor: fillfactor.clamp(10, 100),
            indexes: vec![],
        };
        self.catalog_insert(&catalog::encode_table(&def))?;
        self.inner.pool.set_relation_name(relfile, name);
        self.table(name)
    }

    /// CREATE [UNIQUE] INDEX / ADD PRIMARY KEY: builds the tree in bulk from the rows
    /// visible now (sorted), checking uniqueness.
    pub fn create_index(
        &mut self,
        table: &str,
        name: &str,
        columns: &[usize],
        unique: bool,
        primary: bool,
    ) -> Result<()> {
        self.before_write()?;
        let inner = self.inner.clone();
        let (_ddl, view, def) = self.lock_for_ddl(&inner, table)?;
        if view.tables.contains_key(name) || view.index_names().any(|n| n == name) {
            return Err(Error::DuplicateTable(name.to_string()));
        }
        if primary && def.indexes.iter().any(|i| i.primary) {
            return Err(Error::InvalidInput(format!(
                "multiple primary keys for table \"{table}\" are not allowed"
            )));
        }
        for &c in columns {
            if c >= def.columns.len() {
                return Err(Error::UndefinedColumn(format!("#{c}")));
            }
        }
        let relfile = self.new_relfile()?;
        let xid = self.mark_write();
        BTree::create(&inner.pool, relfile, xid)?;
        let idx = IndexDef {
            name: name.to_string(),
            relfile,
            table: table.to_string(),
            columns: columns.to_vec(),
            unique,
            primary,
        };
        // Every row version that may still be live (not dead to all) is indexed, like
        // PostgreSQL's CREATE INDEX; primary key columns must not be NULL.
        let mut entries: Vec<(Vec<u8>, Tid)> = Vec::new();
        let rel = inner.rel(def.relfile, def.fillfactor);
        let heap = Heap::new(&inner.pool, &inner.txn, &rel);
        let snap = self.snapshot();
        let viewer = Viewer {
            snapshot: &snap,
            own_xid: self.xid,
            cid: self.cid,
        };
        let types = def.types();
        for b in 0..heap.nblocks()? {
            let mut rows = Vec::new();
            heap.scan_block_roots(b, &viewer, &mut rows)?;
            for (tid, row) in rows {
                let values = datum::decode_row(&row, &types)
                    .map_err(|e| Error::InvalidInput(e.to_string()))?;
                let keyvals: Vec<Datum> = columns.iter().map(|&c| values[c].clone()).collect();
                if primary && keyvals.iter().any(|d| d.is_null()) {
                    return Err(Error::InvalidInput(format!(
                        "column \"{}\" of relation \"{table}\" contains null values",
                        def.columns[columns[0]].name
                    )));
                }
                let mut k = Vec::new();
                encode_key(&keyvals, &mut k);
                entries.push((k, tid));
            }
        }
        entries.sort();
        let tree = BTree::open(&inner.pool, relfile, unique, name);
        tree.bulk_build(&entries, xid)?;
        self.catalog_insert(&catalog::encode_index(&idx))?;
        inner.pool.set_relation_name(relfile, name);
        if primary {
            // PRIMARY KEY implies NOT NULL on its columns.
            let mut nd = (*def).clone();
            for &c in columns {
                nd.columns[c].not_null = true;
            }
            nd.indexes.clear();
            if nd
                != (TableDef {
                    indexes: vec![],
                    ..(*def).clone()
                })
            {
                let tid = view
                    .entry_tid(true, table)
                    .ok_or_else(|| Error::UndefinedTable(table.to_string()))?;
                self.catalog_delete(tid)?;
                self.catalog_insert(&catalog::encode_table(&nd))?;
            }
        }
        Ok(())
    }

    pub fn drop_table(&mut self, name: &str) -> Result<()> {
        self.before_write()?;
        let inner = self.inner.clone();
        let (_ddl, view, def) = self.lock_for_ddl(&inner, name)?;
        for i in &def.indexes {
            let tid = view
                .entry_tid(false, &i.name)
                .ok_or_else(|| Error::UndefinedTable(i.name.clone()))?;
            self.catalog_delete(tid)?;
            self.dropped.push(i.relfile);
        }
        let tid = view
            .entry_tid(true, name)
            .ok_or_else(|| Error::UndefinedTable(name.to_string()))?;
        self.catalog_delete(tid)?;
        self.dropped.push(def.relfile);
        Ok(())
    }

    /// TRUNCATE: the table and its indexes get new, empty relation files; the old ones
    /// are unlinked when the transaction commits.
    pub fn truncate(&mut self, name: &str) -> Result<()> {
        self.before_write()?;
        let inner = self.inner.clone();
        let (_ddl, view, def) = self.lock_for_ddl(&inner, name)?;
        let tid = view
            .entry_tid(true, name)
            .ok_or_else(|| Error::UndefinedTable(name.to_string()))?;
        let new_rel = self.new_relfile()?;
        self.catalog_delete(tid)?;
        let mut nd = (*def).clone();
        nd.indexes.clear();
        nd.relfile = new_rel;
        self.catalog_insert(&catalog::encode_table(&nd))?;
        self.dropped.push(def.relfile);
        inner.pool.set_relation_name(new_rel, name);
        for i in &def.indexes {
            let itid = view
                .entry_tid(false, &i.name)
                .ok_or_else(|| Error::UndefinedTable(i.name.clone()))?;
            let r = self.new_relfile()?;
            let xid = self.mark_write();
            BTree::create(&inner.pool, r, xid)?;
            self.catalog_delete(itid)?;
            let ni = IndexDef {
                relfile: r,
                ..i.clone()
            };
            self.catalog_insert(&catalog::encode_index(&ni))?;
            self.dropped.push(i.relfile);
            inner.pool.set_relation_name(r, &i.name);
        }
        Ok(())
    }

    // ---- rows ------------------------------------------------------------------------

    fn check_row(def: &TableDef, values: &[Datum]) -> Result<()> {
        if values.len() != def.columns.len() {
            return Err(Error::InvalidInput(format!(
                "table \"{}\" has {} columns, got {} values",
                def.name,
                def.columns.len(),
                values.len()
            )));
        }
        for (c, v) in def.columns.iter().zip(values) {
            match v.type_id() {
                None if c.not_null => {
                    return Err(Error::NotNullViolation {
                        column: c.name.clone(),
                        table: def.name.clone(),
                    })
                }
                Some(t) if t != c.ty => {
                    return Err(Error::DatatypeMismatch(format!(
                        "column \"{}\" is of type {} but expression is of type {}",
                        c.name,
                        c.ty.name(),
                        t.name()
                    )))
                }
                _ => {}
            }
        }
        Ok(())
    }

    pub fn insert(&mut self, def: &TableDef, values: &[Datum]) -> Result<Tid> {
        self.before_write()?;
        self.check_interrupt()?;
        let fresh = self.lock_for_write(def)?;
        let def = fresh.as_deref().unwrap_or(def);
        Transaction::check_row(def, values)?;
        let xid = self.mark_write();
        let mut row = Vec::new();
        encode_row(values, &mut row);
        let rel = self.inner.rel(def.relfile, def.fillfactor);
        let tid = Heap::new(&self.inner.pool, &self.inner.txn, &rel).insert(xid, self.cid, &row)?;
        self.activity_of(&rel).inserted += 1;
        for idx in &def.indexes {
            self.index_insert(def, idx, values, tid)?;
        }
        Ok(tid)
    }

    fn index_insert(
        &mut self,
        def: &TableDef,
        idx: &IndexDef,
        values: &[Datum],
        tid: Tid,
    ) -> Result<()> {
        let keyvals: Vec<Datum> = idx.columns.iter().map(|&c| values[c].clone()).collect();
        let mut key = Vec::new();
        encode_key(&keyvals, &mut key);
        let xid = self.xid.expect("writer has an xid");
        let inner = self.inner.clone();
        let rel = inner.rel(def.relfile, def.fillfactor);
        let heap = Heap::new(&inner.pool, &inner.txn, &rel);
        let tree = BTree::open(&inner.pool, idx.relfile, idx.unique, &idx.name);
        // NULLs never conflict (SQL semantics).
        let unique = idx.unique && !keyvals.iter().any(|d| d.is_null());
        let mut check = |existing: Tid| -> Result<UniqueCheck> {
            if !unique || existing == tid {
                return Ok(UniqueCheck::NotLive);
            }
            chain_liveness(&heap, existing, xid)
        };
        let how = self.lock_wait();
        let txn = &inner.txn;
        let mut wait = |holder: Xid| -> Result<()> { txn.wait_for(xid, holder, how) };
        tree.insert(&key, tid, xid, &mut check, &mut wait)
            .map_err(|e| match e {
                Error::UniqueViolation { index, .. } => {
                    let cols: Vec<&str> = idx
                        .columns
                        .iter()
                        .map(|&c| def.columns[c].name.as_str())
                        .collect();
                    let vals: Vec<String> = keyvals.iter().map(datum_text).collect();
                    Error::UniqueViolation {
                        index,
                        detail: format!(
                            "Key ({})=({}) already exists.",
                            cols.join(", "),
                            vals.join(", ")
                        ),
                    }
                }
                other => other,
            })
    }

    fn viewer_parts(&mut self) -> (Snapshot, Option<Xid>, u32) {
        (self.snapshot(), self.xid, self.cid)
    }

    /// Sequential scan: calls `f` for each visible row (page at a time); `f` returns
    /// false to stop.
    pub fn scan(
        &mut self,
        def: &TableDef,
        mut f: impl FnMut(Tid, Vec<Datum>) -> Result<bool>,
    ) -> Result<()> {
        let (snap, own, cid) = self.viewer_parts();
        let viewer = Viewer {
            snapshot: &snap,
            own_xid: own,
            cid,
        };
        let rel = self.inner.rel(def.relfile, def.fillfactor);
        let heap = Heap::new(&self.inner.pool, &self.inner.txn, &rel);
        let types = def.types();
        let mut rows = Vec::new();
        for b in 0..heap.nblocks()? {
            self.check_interrupt()?;
            rows.clear();
            heap.scan_block(b, &viewer, &mut rows)?;
            for (tid, row) in rows.drain(..) {
                let values = datum::decode_row(&row, &types)
                    .map_err(|e| Error::InvalidInput(e.to_string()))?;
                if !f(tid, values)? {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    pub fn scan_all(&mut self, def: &TableDef) -> Result<Vec<(Tid, Vec<Datum>)>> {
        let mut out = Vec::new();
        self.scan(def, |t, v| {
            out.push((t, v));
            Ok(true)
        })?;
        Ok(out)
    }

    /// Index scan over key values between `lo` and `hi` (on all key columns).
    pub fn index_scan(
        &mut self,
        def: &TableDef,
        index: &IndexDef,
        lo: Bound<&[Datum]>,
        hi: Bound<&[Datum]>,
    ) -> Result<Vec<(Tid, Vec<Datum>)>> {
        self.check_interrupt()?;
        let enc = |b: Bound<&[Datum]>| -> Bound<Vec<u8>> {
            match b {
                Bound::Included(v) => {
                    let mut k = Vec::new();
                    encode_key(v, &mut k);
                    Bound::Included(k)
                }
                Bound::Excluded(v) => {
                    let mut k = Vec::new();
                    encode_key(v, &mut k);
                    Bound::Excluded(k)
                }
                Bound::Unbounded => Bound::Unbounded,
            }
        };
        let (lo, hi) = (enc(lo), enc(hi));
        // The snapshot must be taken before the index is read: an entry inserted after the
        // read by a transaction that commits before a later snapshot would be missed,
        // while its predecessor already looks deleted.
        let (snap, own, cid) = self.viewer_parts();
        let tree = BTree::open(&self.inner.pool, index.relfile, index.unique, &index.name);
        let hits = tree.range(bound_ref(&lo), bound_ref(&hi))?;
        let viewer = Viewer {
            snapshot: &snap,
            own_xid: own,
            cid,
        };
        let rel = self.inner.rel(def.relfile, def.fillfactor);
        let heap = Heap::new(&self.inner.pool, &self.inner.txn, &rel);
        let types = def.types();
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        let mut dead = Vec::new();
        for (key, root) in hits {
            match heap.fetch_visible(root, &viewer)? {
                Fetched::Visible(tid, row) => {
                    if seen.insert(tid) {
                        let values = datum::decode_row(&row, &types)
                            .map_err(|e| Error::InvalidInput(e.to_string()))?;
                        out.push((tid, values));
                    }
                }
                Fetched::Invisible => {}
                Fetched::DeadRoot => dead.push((key, root)),
            }
        }
        if !dead.is_empty() {
            let removed = tree.delete_dead_entries(dead, &|t| heap.root_is_dead(t))?;
            self.inner
                .dead_index_entries_removed
                .fetch_add(removed as u64, Ordering::Relaxed);
        }
        Ok(out)
    }

    /// Diagnostics for a lookup that found nothing: the index entries for `key` and the
    /// raw versions they lead to.
    pub fn explain_missing(&mut self, def: &TableDef, index: &IndexDef, key: &[Datum]) -> String {
        let mut k = Vec::new();
        encode_key(key, &mut k);
        let tree = BTree::open(&self.inner.pool, index.relfile, index.unique, &index.name);
        let hits = match tree.lookup(&k) {
            Ok(h) => h,
            Err(e) => return format!("index lookup failed: {e}"),
        };
        let snap = self.snapshot();
        let inner = self.inner.clone();
        let rel = inner.rel(def.relfile, def.fillfactor);
        let heap = Heap::new(&inner.pool, &inner.txn, &rel);
        let mut out = format!(
            "snapshot {:?} own {:?}; {} index entries:",
            snap,
            self.xid,
            hits.len()
        );
        for t in hits.iter().rev().take(4) {
            out.push_str(&format!(" [root {t}:"));
            let mut cur = *t;
            for _ in 0..50 {
                match heap.read_version(cur) {
                    Ok(Some((h, _))) => {
                        let txn = &self.inner.txn;
                        let xmax = if h.xmax.is_valid() {
                            format!(
                                "{}:{:?}",
                                h.xmax.0,
                                tuple::xmax_status_for_write(&h, txn).ok()
                            )
                        } else {
                            "-".into()
                        };
                        out.push_str(&format!(
                            " {cur} xmin {}:{:?} xmax {xmax} mask {:#x} ->{}",
                            h.xmin.0,
                            tuple::xmin_status_for_write(&h, txn).ok(),
                            h.infomask,
                            h.ctid
                        ));
                        if h.has(tuple::HOT_UPDATED) && h.ctid.block == cur.block {
                            cur = h.ctid;
                        } else {
                            break;
                        }
                    }
                    other => {
                        out.push_str(&format!(" {cur} {other:?}"));
                        break;
                    }
                }
            }
            out.push(']');
        }
        out
    }

    /// Looks up rows by equality on all columns of `index`.
    pub fn index_lookup(
        &mut self,
        def: &TableDef,
        index: &IndexDef,
        key: &[Datum],
    ) -> Result<Vec<(Tid, Vec<Datum>)>> {
        self.index_scan(def, index, Bound::Included(key), Bound::Included(key))
    }

    pub fn update(&mut self, def: &TableDef, tid: Tid, new_values: &[Datum]) -> Result<RowChange> {
        self.before_write()?;
        let fresh = self.lock_for_write(def)?;
        let def = fresh.as_deref().unwrap_or(def);
        Transaction::check_row(def, new_values)?;
        let xid = self.mark_write();
        let rel = self.inner.rel(def.relfile, def.fillfactor);
        let inner = self.inner.clone();
        let heap = Heap::new(&inner.pool, &inner.txn, &rel);
        let mut row = Vec::new();
        encode_row(new_values, &mut row);
        loop {
            self.check_interrupt()?;
            // HOT is allowed when no indexed column changes.
            let old = heap.read_version(tid)?;
            let Some((_, old_row)) = old else {
                return Ok(RowChange::Gone);
            };
            let old_values = datum::decode_row(&old_row, &def.types())
                .map_err(|e| Error::InvalidInput(e.to_string()))?;
            let hot_ok = def
                .indexes
                .iter()
                .all(|i| i.columns.iter().all(|&c| old_values[c] == new_values[c]));
            let (m, hot) = heap.update(tid, xid, self.cid, &row, hot_ok)?;
            match m {
                Modify::Done(new_tid) => {
                    let a = self.activity_of(&rel);
                    a.updated += 1;
                    a.hot_updated += hot as u64;
                    if !hot {
                        for idx in &def.indexes {
                            self.index_insert(def, idx, new_values, new_tid)?;
                        }
                    }
                    return Ok(RowChange::Done(new_tid));
                }
                other => {
                    if let Some(r) = self.resolve_conflict(&heap, def, other)? {
                        return Ok(r);
                    }
                }
            }
        }
    }

    pub fn delete(&mut self, def: &TableDef, tid: Tid) -> Result<RowChange> {
        self.before_write()?;
        let fresh = self.lock_for_write(def)?;
        let def = fresh.as_deref().unwrap_or(def);
        let xid = self.mark_write();
        let rel = self.inner.rel(def.relfile, def.fillfactor);
        let inner = self.inner.clone();
        let heap = Heap::new(&inner.pool, &inner.txn, &rel);
        loop {
            self.check_interrupt()?;
            match heap.delete(tid, xid, self.cid)? {
                Modify::Done(t) => {
                    self.activity_of(&rel).deleted += 1;
                    return Ok(RowChange::Done(t));
                }
                other => {
                    if let Some(r) = self.resolve_conflict(&heap, def, other)? {
                        return Ok(r);
                    }
                }
            }
        }
    }

    /// Handles a row held or changed by another transaction: waits (then the caller
    /// retries), or reports the newest version / serialization failure.
    fn resolve_conflict(
        &mut self,
        heap: &Heap<'_>,
        def: &TableDef,
        m: Modify,
    ) -> Result<Option<RowChange>> {
        let xid = self.xid.expect("writer");
        match m {
            Modify::Done(_) => unreachable!("handled by caller"),
            Modify::SelfModified => Ok(Some(RowChange::SelfModified)),
            Modify::WouldBlock(holder) => {
                self.inner.txn.wait_for(xid, holder, self.lock_wait())?;
                Ok(None)
            }
            Modify::Concurrent(next) => {
                if self.isolation == Isolation::RepeatableRead {
                    return Err(Error::SerializationFailure);
                }
                let Some((mut t, mut creator)) = next else {
                    return Ok(Some(RowChange::Gone));
                };
                // Follow the update chain to the newest version. A version whose xmin
                // is not the previous version's xmax is another row's tuple in a slot
                // that was freed and reused: the chain was pruned away, the row is gone
                // (PostgreSQL's prior-xmax check).
                for _ in 0..10_000 {
                    let Some((h, row)) = heap.read_version(t)? else {
                        return Ok(Some(RowChange::Gone));
                    };
                    if h.xmin != creator {
                        return Ok(Some(RowChange::Gone));
                    }
                    if !tuple_is_live_head(&h, &self.inner.txn)? {
                        let xmax_status = tuple::xmax_status_for_write(&h, &self.inner.txn)?;
                        if h.has(tuple::UPDATED) && xmax_status == XidStatus::Committed {
                            t = h.ctid;
                            creator = h.xmax;
                            continue;
                        }
                        if xmax_status == XidStatus::Committed {
                            return Ok(Some(RowChange::Gone));
                        }
                    }
                    let values = datum::decode_row(&row, &def.types())
                        .map_err(|e| Error::InvalidInput(e.to_string()))?;
                    return Ok(Some(RowChange::Changed(t, values)));
                }
                Ok(Some(RowChange::Gone))
            }
        }
    }

    // ---- end -------------------------------------------------------------------------

    pub fn commit(mut self) -> Result<()> {
        self.finished = true;
        let inner = self.inner.clone();
        let Some(xid) = self.xid else {
            inner.txn.finish(self.proc, true);
            self.end_bookkeeping(true);
            return Ok(());
        };
        let wal = &inner.pool.wal;
        {
            let _barrier = inner.txn.commit_barrier.read();
            let (_, end) = wal.insert(&xlog::xact_record(xid, true, &self.dropped), &[]);
            if inner.settings.synchronous_commit || !self.dropped.is_empty() {
                wal.flush(end);
            }
            inner.txn.clog.set_status(xid, XidStatus::Committed);
        }
        inner.txn.finish(self.proc, true);
        let mut unlinked = Ok(());
        for r in self.dropped.drain(..) {
            inner.pool.discard_relation(r);
            if let Err(e) = inner.pool.relfiles.unlink(r) {
                unlinked = unlinked.and(Err(e));
            }
            inner.rels.write().remove(&r);
        }
        if self.catalog_changed {
            inner.catalog_version.fetch_add(1, Ordering::AcqRel);
            *inner.catalog_cache.write() = None;
        }
        // Last: a vacuum waiting for this DDL must find the new catalog.
        self.end_bookkeeping(true);
        unlinked
    }

    pub fn rollback(mut self) -> Result<()> {
        self.abort_inner()
    }

    fn abort_inner(&mut self) -> Result<()> {
        if self.finished {
            return Ok(());
        }
        self.finished = true;
        let inner = self.inner.clone();
        if let Some(xid) = self.xid {
            let created = std::mem::take(&mut self.created);
            {
                let _barrier = inner.txn.commit_barrier.read();
                inner
                    .pool
                    .wal
                    .insert(&xlog::xact_record(xid, false, &created), &[]);
                inner.txn.clog.set_status(xid, XidStatus::Aborted);
            }
            inner.txn.finish(self.proc, false);
            let mut unlinked = Ok(());
            for r in created {
                inner.pool.discard_relation(r);
                if let Err(e) = inner.pool.relfiles.unlink(r) {
                    unlinked = unlinked.and(Err(e));
                }
                inner.rels.write().remove(&r);
            }
            self.end_bookkeeping(false);
            unlinked
        } else {
            inner.txn.finish(self.proc, false);
            self.end_bookkeeping(false);
            Ok(())
        }
    }
}

impl Drop for Transaction {
    fn drop(&mut self) {
        if !self.finished {
            if let Err(e) = self.abort_inner() {
                tracing::error!("rollback of an abandoned transaction failed: {e}");
            }
        }
    }
}

/// Whether a version is the live head of its chain (not deleted/updated by a committed
/// transaction).
fn tuple_is_live_head(h: &TupleHeader, txn: &TxnManager) -> Result<bool> {
    // A writer's view: an xmax whose transaction is still in the running set counts as
    // not committed yet, so the caller tries this version and waits for that transaction
    // instead of building on a commit snapshots do not see yet.
    Ok(!h.xmax.is_valid()
        || h.has(tuple::XMAX_INVALID)
        || tuple::xmax_status_for_write(h, txn)? != XidStatus::Committed)
}

/// Unique check: does the HOT chain starting at `root` hold a version that is live or
/// may become live (in progress)?
fn chain_liveness(heap: &Heap<'_>, root: Tid, me: Xid) -> Result<UniqueCheck> {
    let txn = heap.txn;
    // The chain as one consistent picture (see `Heap::chain_headers`); statuses are
    // read afterwards, outside the page latch. A page that cannot be read (a checksum
    // failure) is an error: treating it as "no live duplicate" would let a duplicate in.
    let chain = heap.chain_headers(root)?;
    for h in chain {
        let xmin_ok = if h.xmin == me {
            true
        } else {
            match tuple::xmin_status_for_write(&h, txn)? {
                XidStatus::Committed => true,
                XidStatus::Aborted => false,
                _ => return Ok(UniqueCheck::WaitFor(h.xmin)),
            }
        };
        if xmin_ok {
            let deleted = h.xmax.is_valid() && !h.has(tuple::XMAX_INVALID) && {
                if h.xmax == me {
                    true
                } else {
                    match tuple::xmax_status_for_write(&h, txn)? {
                        XidStatus::Committed => true,
                        XidStatus::Aborted => false,
                        _ => return Ok(UniqueCheck::WaitFor(h.xmax)),
                    }
                }
            };
            if !deleted {
                return Ok(UniqueCheck::Live);
            }
        }
    }
    Ok(UniqueCheck::NotLive)
}

fn bound_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k.as_slice()),
        Bound::Excluded(k) => Bound::Excluded(k.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

pub fn datum_text(d: &Datum) -> String {
    match d {
        Datum::Null => "null".into(),
        Datum::Bool(b) => {
            if *b {
                "t".into()
            } else {
                "f".into()
            }
        }
        Datum::Int2(v) => v.to_string(),
        Datum::Int4(v) => v.to_string(),
        Datum::Int8(v) => v.to_string(),
        Datum::Float8(v) => v.to_string(),
        Datum::Numeric(s) | Datum::Text(s) => s.clone(),
        Datum::Timestamp(v) | Datum::TimestampTz(v) => v.to_string(),
        Datum::Date(v) => v.to_string(),
    }
}

/// Xids beyond the next one whose commit-status space a writer makes sure of (two pages'
/// worth): far more than the transactions that can start between two checks.
const CLOG_HEADROOM_XIDS: u64 = 2 * crate::txn::clog::XIDS_PER_PAGE;
