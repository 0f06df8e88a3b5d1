//! A data directory's life: `walrus init` creates one, [`Engine::open`] opens it (crash
//! recovery when it was not shut down cleanly, then the end-of-recovery checkpoint, the
//! checkpointer and autovacuum; the page writers already run during recovery), and
//! [`Engine::shutdown`] undoes the open: it stops the threads open started, writes the
//! final checkpoint and marks the control file shut down.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};
use walrus_base::{Lsn, RelFileId, Xid, PAGE_SIZE};

use super::checkpoint::{
    checkpointer_loop, run_checkpoint, CheckpointReason, CheckpointStats, ReplayRate, RestartCost,
};
use super::table_locks::TableLocks;
use super::{vacuum, Background, Engine, Inner};
use crate::buffer::page_writer::{FlushControl, PageWriters};
use crate::buffer::BufferPool;
use crate::catalog::CATALOG_RELFILE;
use crate::error::{Error, Result};
use crate::settings::Settings;
use crate::storage::control::{ControlData, ControlFile, DbState, FORMAT_VERSION};
use crate::storage::dir_lock::DirLock;
use crate::txn::clog::Clog;
use crate::txn::TxnManager;
use crate::wal::segment::{Segments, SyncMethod};
use crate::wal::{ImagePolicy, Wal, WalConfig};
use crate::xlog;

pub struct RecoveryReport {
    pub replayed_bytes: u64,
    pub records: u64,
    /// Page records redo applied, and page records it skipped because the page on
    /// disk was already newer (written by a page writer after the record).
    pub records_applied: u64,
    pub records_skipped_by_lsn: u64,
    pub elapsed: Duration,
    pub rolled_back: u64,
    pub images_restored: u64,
    /// Torn home pages restored from the double-write buffer before redo.
    pub pages_restored_from_double_write: u64,
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
        settings.resolve_page_protection(dir)?;
        if let Some(wal_dir) = &settings.wal_directory {
            link_wal_directory(dir, wal_dir)?;
        }
        // Before the configuration file is written: a refused WAL directory (no libpmem,
        // not persistent memory) leaves no data directory behind, and init can be rerun.
        let segs = Segments::open_with(
            dir,
            settings.wal_segment_size,
            settings.wal_sync_method,
            &settings.wal_pmem_library,
        )
        .inspect_err(|_| {
            if settings.wal_directory.is_some() {
                let _ = std::fs::remove_file(dir.join("wal"));
            }
        })?;
        std::fs::write(dir.join(crate::settings::CONFIG_FILE), text)
            .map_err(|e| Error::io("write configuration file", dir.display(), e))?;
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
                replay_rate_bps: 0,
                replay_rate_calibrated: false,
                replay_fixed_ms: 0,
                page_protection: settings.page_protection.code(),
                checkpoint_time: 0,
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
        // A restart's whole cost up to the end of redo is what recovery_time_target
        // bounds: the part that does not grow with the WAL is measured from here.
        let open_started = Instant::now();
        settings.check_combination()?;
        settings.resolve_page_protection(dir)?;
        if !dir.join("control").exists() {
            return Err(Error::BadDataDirectory {
                dir: dir.display().to_string(),
                reason: "no control file: not a walrus data directory (run `walrus init` first)"
                    .into(),
            });
        }
        // Before anything is read or recovered: a second opener must not touch files a
        // live server is changing.
        let dir_lock = DirLock::acquire(dir)?;
        let control = ControlFile::open(dir)?;
        let cd = control.data().clone();
        settings.wal_segment_size = cd.wal_segment_size;
        if settings.wal_sync_method == SyncMethod::None {
            tracing::warn!("wal_sync_method = none: commits are NOT durable (testing only)");
        }
        if let Some(wal_dir) = &settings.wal_directory {
            check_wal_directory(dir, wal_dir)?;
        }
        let segs = Segments::open_with(
            dir,
            cd.wal_segment_size,
            settings.wal_sync_method,
            &settings.wal_pmem_library,
        )?;
        if settings.wal_sync_method == SyncMethod::Pmem {
            if crate::wal::pmem::Pmem::forced() {
                tracing::warn!(
                    "wal_sync_method = pmem with PMEM_IS_PMEM_FORCE=1: libpmem calls {} \
                     persistent memory without checking; on tmpfs or DRAM commits are NOT \
                     durable (testing only)",
                    resolved(segs.dir()).display()
                );
            } else {
                tracing::info!(
                    "wal_sync_method = pmem: WAL segments in {} are mapped persistent memory",
                    resolved(segs.dir()).display()
                );
            }
        }
        let leftovers = segs.remove_temp_files()?;
        if leftovers > 0 {
            tracing::info!("removed {leftovers} half-created WAL segment file(s)");
        }
        let scan_started = std::time::Instant::now();
        let wal_end = crate::recovery::find_end(&segs, cd.redo_lsn, cd.checkpoint_lsn)?;
        let scan_took = scan_started.elapsed();
        let settings_protection_code = settings.page_protection.code();
        let crashed = cd.state != DbState::ShutDown || wal_end.end > cd.checkpoint_lsn.add(64);
        let policy = settings.page_protection.image_policy();
        let wal = Arc::new(Wal::open(
            segs,
            &wal_config(&settings),
            wal_end.end,
            wal_end.last_start,
            cd.redo_lsn,
            policy,
        ));
        let relfiles = Arc::new(crate::storage::relfile::RelFiles::open(dir)?);
        if settings.page_protection == crate::protect::PageProtection::Atomic {
            // Recovery's own page writes (page writers, end-of-recovery checkpoint) are
            // atomic too: no page written from here on can tear.
            relfiles.use_atomic_writes();
        }
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
        // WAL before commit-status pages (asynchronous commits' statuses are set before
        // their record is durable). Recovery sets statuses from WAL already on disk.
        let flush_wal = wal.clone();
        clog.set_wal_flush(Box::new(move |lsn| flush_wal.flush(Lsn(lsn))));
        let txn = TxnManager::new(clog, cd.next_xid);
        // Torn-page repair from the double-write buffer comes before anything reads a
        // page (redo included), whatever the mode is now: it may have been dwb before.
        let mut dwb_restored = 0;
        if crashed {
            let r = crate::protect::dwb::repair(dir, &pool.relfiles)?;
            if r.copies + r.torn_copies > 0 {
                tracing::info!(
                    "double-write buffer: {} valid copies, {} torn copies ignored, {} home pages restored",
                    r.copies,
                    r.torn_copies,
                    r.restored
                );
            }
            dwb_restored = r.restored;
        }
        let dwb_path = dir.join(crate::protect::dwb::DWB_FILE);
        if settings.page_protection == crate::protect::PageProtection::Dwb {
            let dwb = crate::protect::dwb::DoubleWrite::open(dir, settings.dwb_batch_pages)?;
            pool.set_double_write(Arc::new(dwb));
        } else if dwb_path.exists() {
            // Left by an earlier dwb run, already used above: its stale copies must not
            // meet a later crash in another mode.
            std::fs::remove_file(&dwb_path)
                .map_err(|e| Error::io("remove double-write file", dwb_path.display(), e))?;
            crate::storage::relfile::sync_dir(dir)?;
        }
        let flush_control = Arc::new(FlushControl::new(
            settings.pagewriter_threads,
            settings.extreme_flush_dirty_page,
        ));
        let page_writers =
            PageWriters::start(pool.clone(), flush_control.clone(), settings.bgwriter_delay);
        let mut replay_rate = ReplayRate::from_control(&cd);
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
            // Restart cost so far (opening, end-of-WAL scan, replay): what
            // recovery_time_target bounds.
            let took = open_started.elapsed();
            let predicted = replay_rate.seconds_for(out.stats.bytes);
            tracing::info!(
                "recovery: {:.2} s for {} MB of WAL (opening, scan and replay); predicted {:.2} s from the {} replay rate of {:.1} MB/s plus {} ms",
                took.as_secs_f64(),
                out.stats.bytes >> 20,
                predicted,
                replay_rate.source.name(),
                replay_rate.bytes_per_sec as f64 / 1e6,
                replay_rate.fixed_ms
            );
            replay_rate.measure(&RestartCost {
                bytes: out.stats.bytes,
                took,
                scan: scan_took,
                replay: out.stats.elapsed,
            });
            txn.advance_next_xid(Xid(out.max_xid.0 + 1).max(out.next_xid_reserved));
            next_relfile = next_relfile.max(out.max_relfile + 1);
            let s = &out.stats;
            tracing::info!(
                "redo done at {}: {} records ({} applied, {} skipped as older than their page), {} MB in {:.2} s ({:.1} MB/s), {} page images restored, {} transactions rolled back",
                wal_end.end,
                s.records,
                s.records_applied,
                s.records_skipped_by_lsn,
                s.bytes >> 20,
                s.elapsed.as_secs_f64(),
                s.bytes as f64 / 1e6 / s.elapsed.as_secs_f64().max(1e-6),
                s.pages_restored_from_images,
                s.rolled_back
            );
            report = Some(RecoveryReport {
                replayed_bytes: s.bytes,
                records: s.records,
                records_applied: s.records_applied,
                records_skipped_by_lsn: s.records_skipped_by_lsn,
                elapsed: s.elapsed,
                rolled_back: s.rolled_back,
                images_restored: s.pages_restored_from_images,
                pages_restored_from_double_write: dwb_restored,
            });
        }
        let inner = Arc::new(Inner {
            dir: dir.to_path_buf(),
            dir_lock: Mutex::new(Some(dir_lock)),
            settings,
            control: Mutex::new(control),
            pool,
            txn,
            rels: RwLock::new(HashMap::new()),
            next_relfile: AtomicU32::new(next_relfile),
            catalog_cache: RwLock::new(None),
            sequences: Mutex::new(HashMap::new()),
            catalog_version: AtomicU64::new(0),
            catalog_reads: AtomicU64::new(0),
            checkpoint_lock: Mutex::new(()),
            checkpoint_request: (Mutex::new(false), Condvar::new()),
            checkpoint_stats: Mutex::new(CheckpointStats::default()),
            last_checkpoint_at: Mutex::new(Instant::now()),
            shutting_down: AtomicBool::new(false),
            ddl_lock: Mutex::new(()),
            dead_index_entries_removed: AtomicU64::new(0),
            table_locks: TableLocks::default(),
            backends: Arc::default(),
            autovacuum_wake: (Mutex::new(false), Condvar::new()),
            analyzer: std::sync::OnceLock::new(),
            autovacuums_canceled: AtomicU64::new(0),
            freeze_lock: Mutex::new(()),
            freeze_passes: AtomicU64::new(0),
            clog_truncate_pending: Mutex::new(None),
            flush_control,
            replay_rate: Mutex::new(replay_rate),
            protection_changed_pending: AtomicBool::new(
                cd.page_protection != 0 && cd.page_protection != settings_protection_code,
            ),
        });
        let protection_changed = inner.protection_changed_pending.load(Ordering::Acquire);
        if protection_changed {
            tracing::info!(
                "page_protection changed from {} to {}: a full checkpoint runs before the new mode is relied on",
                crate::protect::PageProtection::from_code(cd.page_protection)
                    .map_or("unknown", |p| p.name()),
                inner.settings.page_protection.name()
            );
        }
        super::checkpoint::set_lag_target(&inner);
        let engine = Engine {
            inner: inner.clone(),
            background: Arc::new(Mutex::new(None)),
        };
        if crashed || protection_changed {
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
        // Segments for the first writes exist before any session asks, and the WAL
        // writer keeps them ahead from now on.
        inner
            .pool
            .wal
            .set_writer_flush_after(inner.settings.wal_writer_flush_after_bytes);
        inner.pool.wal.preallocate_next()?;
        let wal_writer = crate::wal::writer::WalWriter::start(
            inner.pool.wal.clone(),
            inner.settings.wal_writer_delay,
        )
        .map_err(|e| Error::io("start WAL writer thread", "", e))?;
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
            wal_writer: Some(wal_writer),
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

    /// Immediate shutdown, like `pg_ctl stop -m immediate`: stops the background threads
    /// without a checkpoint and releases the directory. Nothing more reaches the disk, so
    /// the next open runs crash recovery. Used to simulate a crash in-process; dropping
    /// an engine without any shutdown leaves its threads running and the directory
    /// locked.
    pub fn shutdown_immediate(&self) {
        if self.inner.shutting_down.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Some(mut bg) = self.stop_threads_but_page_writers() {
            bg.page_writers.stop();
        }
        if let Some(lock) = self.inner.dir_lock.lock().take() {
            // Not `release`: the pid file stays, as after a crash.
            drop(lock);
        }
    }

    /// Stops autovacuum, the checkpointer and the WAL writer (in that order); the page
    /// writers keep running for a final checkpoint. `None` if already stopped.
    fn stop_threads_but_page_writers(&self) -> Option<Background> {
        {
            *self.inner.autovacuum_wake.0.lock() = true;
            self.inner.autovacuum_wake.1.notify_all();
        }
        let mut bg = self.background.lock().take()?;
        if let Some(h) = bg.autovacuum.take() {
            let _ = h.join();
        }
        if let Some(h) = bg.checkpointer.take() {
            let _ = h.join();
        }
        if let Some(w) = bg.wal_writer.take() {
            w.stop();
        }
        Some(bg)
    }

    /// Clean shutdown: final checkpoint, control file marked shut down.
    pub fn shutdown(&self) -> Result<()> {
        if self.inner.shutting_down.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.request_checkpoint();
        if let Some(mut bg) = self.stop_threads_but_page_writers() {
            self.log_exact_sequence_states()?;
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
        if let Some(lock) = self.inner.dir_lock.lock().take() {
            lock.release();
        }
        Ok(())
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

/// `walrus init` with `wal_directory`: the WAL goes to `wal_dir` (created if missing, and
/// refused if it already holds segments of another cluster) and `dir/wal` becomes a
/// symbolic link to it, so every reader of `dir/wal` (recovery, `walrus waldump`) finds
/// it, as PostgreSQL's `initdb --waldir` does with `pg_wal`.
fn link_wal_directory(dir: &Path, wal_dir: &Path) -> Result<()> {
    std::fs::create_dir_all(wal_dir)
        .map_err(|e| Error::io("create WAL directory", wal_dir.display(), e))?;
    let occupied = std::fs::read_dir(wal_dir)
        .map_err(|e| Error::io("read directory", wal_dir.display(), e))?
        .next()
        .is_some();
    if occupied {
        return Err(Error::BadDataDirectory {
            dir: dir.display().to_string(),
            reason: format!("wal_directory \"{}\" is not empty", wal_dir.display()),
        });
    }
    let link = dir.join("wal");
    std::os::unix::fs::symlink(wal_dir, &link)
        .map_err(|e| Error::io("create symbolic link", link.display(), e))?;
    crate::storage::relfile::sync_dir(dir)
}

/// At open: `dir/wal` must still lead to `wal_directory` (the setting cannot move WAL;
/// pointing it elsewhere would start an empty log and lose every commit since the last
/// checkpoint).
fn check_wal_directory(dir: &Path, wal_dir: &Path) -> Result<()> {
    let link = dir.join("wal");
    let found = std::fs::canonicalize(&link)
        .map_err(|e| Error::io("resolve WAL directory", link.display(), e))?;
    let wanted = std::fs::canonicalize(wal_dir)
        .map_err(|e| Error::io("resolve wal_directory", wal_dir.display(), e))?;
    if found != wanted {
        return Err(Error::BadDataDirectory {
            dir: dir.display().to_string(),
            reason: format!(
                "wal_directory is \"{}\" but the WAL is in \"{}\" (the WAL location is \
                 fixed by walrus init)",
                wal_dir.display(),
                found.display()
            ),
        });
    }
    Ok(())
}

/// `path` with links resolved (`wal` may lead to `wal_directory`), for log lines.
fn resolved(path: &Path) -> std::path::PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}
