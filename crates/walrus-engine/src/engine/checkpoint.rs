//! Checkpoints (DESIGN §5): the checkpointer thread decides when one runs (time,
//! WAL volume, a request, a WAL segment that could not be created, the redo point having
//! advanced) and `run_checkpoint` runs it: the redo point, the dirty pages below it, the
//! file syncs, the checkpoint record, the control file, then WAL segment recycling and
//! clog truncation.
//!
//! Two kinds (seed 003, MogDB's incremental checkpoint):
//! - **full**: the redo point is the WAL insert position and every page dirtied before it
//!   is written (explicit `CHECKPOINT`, shutdown, and every checkpoint with `fpw`, where
//!   the redo point must stay put between checkpoints or each change would log an image;
//!   timed ones are spread over `checkpoint_completion_target`). An explicit or shutdown
//!   checkpoint aims at `checkpoint_target_time`: when its measured rate says it would
//!   miss it, the page writers join in (larger batches with `extreme_flush_dirty_page`).
//! - **incremental** (`dwb`, `none`): the redo point is the oldest `rec_lsn` of any dirty
//!   page, which the page writers keep advancing; the checkpoint writes no page, only
//!   syncs the files written since the last one and records the point. The page writers
//!   keep `insert − oldest rec_lsn` under a lag sized from `recovery_time_target` and the
//!   replay rate recovery measured (`ReplayRate`), so a crash replays at most that much.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use walrus_base::{Lsn, Xid};

use super::{vacuum, Engine, Inner};
use crate::buffer::{Writer, WriterRole};
use crate::error::{Error, Result};
use crate::xlog;

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
    /// Incremental mode: the oldest dirty page moved on far enough that recording the
    /// new redo point shortens a crash recovery noticeably.
    RedoAdvanced,
}

/// A WAL replay rate neither measured nor calibrated here (a directory created by the
/// library, not by `walrus init`/`walrus serve`): conservative (recovery on this class of
/// machine replays pgbench WAL at 40–120 MB/s), so the first lag target is safe.
pub const DEFAULT_REPLAY_RATE_BPS: u64 = 20_000_000;

/// Where the replay rate in use comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RateSource {
    /// [`DEFAULT_REPLAY_RATE_BPS`].
    Default,
    /// The synthetic crash `walrus init` replayed ([`super::calibrate`]).
    Calibrated,
    /// This directory's last crash recovery.
    Measured,
}

impl RateSource {
    pub fn name(self) -> &'static str {
        match self {
            RateSource::Default => "default",
            RateSource::Calibrated => "calibrated",
            RateSource::Measured => "measured",
        }
    }
}

/// How long a restart takes, as `recovery_time_target` plans it: `fixed_ms` (opening the
/// directory, the double-write repair, rolling back) plus the WAL after the redo point at
/// `bytes_per_sec` (end-of-WAL scan and redo, page reads into the cold pool included).
/// Learned from the last crash recovery, else from init's calibration, else the default.
///
/// The cold pool's reads are charged per byte ([`ReplayRate::measure`]): a small recovery
/// (the calibration replays 12 MB) then overestimates a larger one, which errs toward
/// restarting early; a crash under the real load measures the real rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplayRate {
    pub bytes_per_sec: u64,
    pub fixed_ms: u64,
    pub source: RateSource,
}

/// One restart's figures, for [`ReplayRate::measure`].
#[derive(Clone, Copy, Debug)]
pub struct RestartCost {
    /// WAL replayed.
    pub bytes: u64,
    /// From the start of opening to the end of redo.
    pub took: Duration,
    /// The end-of-WAL scan.
    pub scan: Duration,
    /// Redo.
    pub replay: Duration,
}

impl ReplayRate {
    pub fn from_control(cd: &crate::storage::control::ControlData) -> ReplayRate {
        let source = match (cd.replay_rate_bps, cd.replay_rate_calibrated) {
            (0, _) => RateSource::Default,
            (_, true) => RateSource::Calibrated,
            (_, false) => RateSource::Measured,
        };
        ReplayRate {
            bytes_per_sec: if cd.replay_rate_bps == 0 {
                DEFAULT_REPLAY_RATE_BPS
            } else {
                cd.replay_rate_bps
            },
            fixed_ms: u64::from(cd.replay_fixed_ms),
            source,
        }
    }

    pub fn seconds_for(&self, bytes: u64) -> f64 {
        self.fixed_ms as f64 / 1000.0 + bytes as f64 / self.bytes_per_sec.max(1) as f64
    }

    /// The WAL a restart of `target` can replay (0 when the fixed part alone takes it).
    pub fn bytes_within(&self, target: Duration) -> u64 {
        let variable = target.as_secs_f64() - self.fixed_ms as f64 / 1000.0;
        (variable.max(0.0) * self.bytes_per_sec as f64) as u64
    }

    /// Takes a restart's figures as the new rate when there was enough WAL
    /// ([`MEASURE_MIN_BYTES`]) to measure. The per-byte cost is the end-of-WAL scan's
    /// plus redo's, averaged over the whole replay; the rest of the restart (opening the
    /// files, the double-write repair, rolling back) is the fixed part.
    ///
    /// Why the whole replay and not only its warm part: redo near the redo point skips
    /// many records (their pages were written since) and redo near the end applies most
    /// of them, so a part of the replay is not a sample of the whole. Measured on the
    /// engine test's load (`tests/recovery_time_target.rs`): redo after its first
    /// quarter ran at 137 MB/s, the whole at 147 MB/s, and the next, 3.5× larger crash
    /// at 150 MB/s. The pool's cold start is then charged per byte, which overestimates a
    /// larger recovery a little: the safe side of a ceiling.
    pub fn measure(&mut self, cost: &RestartCost) {
        if cost.bytes < MEASURE_MIN_BYTES || cost.took.is_zero() {
            return;
        }
        let variable = (cost.scan + cost.replay).as_secs_f64();
        let per_byte = (variable / cost.bytes as f64).max(1e-12);
        let fixed = (cost.took.as_secs_f64() - variable).max(0.0);
        self.bytes_per_sec = (1.0 / per_byte) as u64;
        self.fixed_ms = (fixed * 1000.0).round() as u64;
        self.source = RateSource::Measured;
    }
}

/// The least WAL a recovery must replay for its time to count as a rate.
pub const MEASURE_MIN_BYTES: u64 = 4 << 20;

/// The WAL a crash may replay, in bytes: `recovery_time_target` at the replay rate
/// (`u64::MAX`: no target), never more than half of `max_wal_size`.
fn recovery_budget(inner: &Inner) -> u64 {
    let by_wal = inner.settings.max_wal_size_bytes / 2;
    let target = inner.settings.recovery_time_target;
    if target.is_zero() {
        return by_wal;
    }
    inner.replay_rate.lock().bytes_within(target).min(by_wal)
}

/// The share of the recovery budget the page writers keep as redo lag, in percent. The
/// redo point is recorded every [`REDO_STEP_PERCENT`] of the budget, so a crash replays
/// up to this plus that step: 95 + 5 puts recovery at the target, never over it (with
/// 100 here walrus's own estimate read 1.03–1.04 s against a 1 s target once the load
/// stopped, and stayed there). The target is where recovery lands, not a ceiling kept
/// with a wider margin, because the budget's rate already errs on the slow side: it is
/// learned from the last recovery, whose smaller or colder replay ran slower per byte
/// than a full one (or is the init calibration halved), and the clean-ahead sweep moves
/// the oldest `rec_lsn` on early too. Measured on a quiet machine with 90% here:
/// restarts at 0.64–0.79 of the target, 0.80–0.99 of walrus's own estimate
/// (BENCHMARKS.md).
const LAG_PERCENT: u64 = 100 - REDO_STEP_PERCENT;
/// An incremental checkpoint records the redo point once it moved this share of the
/// recovery budget on (and [`REDO_STEP_MIN_INTERVAL`] passed).
const REDO_STEP_PERCENT: u64 = 5;
/// At most five incremental checkpoints a second: each syncs the files written since the
/// last one and the control file.
const REDO_STEP_MIN_INTERVAL: Duration = Duration::from_millis(200);

/// Sets the page writers' redo-lag target ([`LAG_PERCENT`] of the recovery budget).
/// Classic checkpoints: no lag target.
pub(super) fn set_lag_target(inner: &Inner) {
    let lag = if inner.settings.incremental_checkpoints() {
        recovery_budget(inner) / 100 * LAG_PERCENT
    } else {
        u64::MAX
    };
    inner.flush_control.lag_target.store(lag, Ordering::Release);
}

/// The redo point an incremental checkpoint may record now: the oldest `rec_lsn` of a
/// dirty page, or the insert position when none is dirty. The insert position is read
/// first: a page dirtied after it gets a `rec_lsn` at or past it.
fn incremental_redo(inner: &Inner) -> Lsn {
    let insert = inner.pool.wal.insert_lsn();
    inner
        .pool
        .oldest_rec_lsn()
        .map_or(insert, |oldest| oldest.min(insert))
}

#[derive(Clone, Debug, Default)]
pub struct CheckpointStats {
    pub last_pages_written: u64,
    pub last_duration_ms: u64,
    pub last_redo: Lsn,
    /// Whether the latest checkpoint was incremental.
    pub last_incremental: bool,
    /// Incremental checkpoints completed (also counted in `timed` or `requested`).
    pub incremental: u64,
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

/// The page writers' and checkpoints' state, for `walrus_flush_detail()`.
#[derive(Clone, Debug)]
pub struct FlushDetail {
    /// Per page-writer thread: pages written, batches, pages/s over its last second.
    pub threads: Vec<(u64, u64, u64)>,
    pub dirty_pages: usize,
    pub queue_length: usize,
    pub oldest_rec_lsn: Option<Lsn>,
    /// The redo point a crash now would replay from (the last checkpoint's).
    pub redo_lsn: Lsn,
    pub insert_lsn: Lsn,
    pub incremental: bool,
    /// Seconds a crash now would spend replaying, at `replay_rate`.
    pub estimated_recovery_secs: f64,
    pub recovery_time_target: Duration,
    pub replay_rate: ReplayRate,
    /// The page writers' redo-lag target in bytes (`u64::MAX`: none).
    pub lag_target: u64,
    pub last_checkpoint_ms: u64,
    pub checkpoint_target_time: Duration,
}

impl Engine {
    pub fn flush_detail(&self) -> FlushDetail {
        let inner = &self.inner;
        let pool = &inner.pool;
        let wal = &pool.wal;
        let replay_rate = *inner.replay_rate.lock();
        let redo_lsn = inner.control.lock().data().redo_lsn;
        let insert_lsn = wal.insert_lsn();
        FlushDetail {
            threads: inner
                .flush_control
                .threads
                .iter()
                .map(|t| {
                    (
                        t.pages.load(Ordering::Relaxed),
                        t.batches.load(Ordering::Relaxed),
                        t.rate.load(Ordering::Relaxed),
                    )
                })
                .collect(),
            dirty_pages: pool.dirty_pages(),
            queue_length: pool.dirty_queue_len(),
            oldest_rec_lsn: pool.oldest_rec_lsn(),
            redo_lsn,
            insert_lsn,
            incremental: inner.settings.incremental_checkpoints(),
            estimated_recovery_secs: replay_rate.seconds_for(insert_lsn.distance_from(redo_lsn)),
            recovery_time_target: inner.settings.recovery_time_target,
            replay_rate,
            lag_target: inner.flush_control.lag_target.load(Ordering::Relaxed),
            last_checkpoint_ms: inner.checkpoint_stats.lock().last_duration_ms,
            checkpoint_target_time: inner.settings.checkpoint_target_time,
        }
    }

    /// The control file as of the latest checkpoint (`pg_control_checkpoint()`).
    pub fn control_data(&self) -> crate::storage::control::ControlData {
        self.inner.control.lock().data().clone()
    }

    pub fn checkpoint_stats(&self) -> CheckpointStats {
        self.inner.checkpoint_stats.lock().clone()
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
}

pub(super) fn checkpointer_loop(inner: &Arc<Inner>) {
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
        let incremental = inner.settings.incremental_checkpoints();
        let reason = if requested {
            Some(CheckpointReason::Requested)
        } else if incremental && since >= REDO_STEP_MIN_INTERVAL && {
            let advance = incremental_redo(inner).distance_from(wal.redo_lsn());
            advance > 0 && advance >= recovery_budget(inner) / 100 * REDO_STEP_PERCENT
        } {
            Some(CheckpointReason::RedoAdvanced)
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

pub(super) fn run_checkpoint(inner: &Inner, reason: CheckpointReason) -> Result<()> {
    let _one = inner.checkpoint_lock.lock();
    let _role = WriterRole::enter(Writer::Checkpointer);
    let started = Instant::now();
    let pool = &inner.pool;
    let wal = &pool.wal;
    // Incremental unless the mode forbids it, or a full flush is the point: an explicit
    // CHECKPOINT, shutdown, or the first checkpoint after a protection-mode change.
    let incremental = inner.settings.incremental_checkpoints()
        && !inner.protection_changed_pending.load(Ordering::Acquire)
        && matches!(
            reason,
            CheckpointReason::Timed
                | CheckpointReason::WalSize
                | CheckpointReason::WalSpace
                | CheckpointReason::RedoAdvanced
                | CheckpointReason::EndOfRecovery
        );
    // No commit may sit between its WAL record and its commit-status update while the
    // redo point is chosen: the clog flushed below must hold every commit before it.
    let redo = {
        let _b = inner.txn.commit_barrier.write();
        if incremental {
            // Never behind the last redo point (asserted): every page dirtied before that
            // one was written by the full checkpoint that set it, or is still queued.
            let redo = incremental_redo(inner);
            wal.set_redo_to(redo);
            redo
        } else {
            wal.set_redo_point()
        }
    };
    let next_xid = inner.txn.next_xid().max(Xid(inner.txn.xid_reserved_upto()));
    let next_relfile = inner.next_relfile.load(Ordering::Acquire);
    let written = if incremental {
        0
    } else {
        write_below_redo(inner, reason, redo, started)?
    };
    let write_done = Instant::now();
    // Files dropped before the redo point go before the checkpoint completes: replay
    // from it will not see their drop again (`storage::relfile` rule 6).
    if let Err(e) = pool.relfiles.remove_queued() {
        tracing::warn!("a dropped relation's file stays behind: {e}");
    }
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
        d.page_protection = inner.settings.page_protection.code();
        d.checkpoint_time = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |t| t.as_secs());
        let rate = *inner.replay_rate.lock();
        if rate.source != RateSource::Default {
            d.replay_rate_bps = rate.bytes_per_sec;
            d.replay_fixed_ms = u32::try_from(rate.fixed_ms).unwrap_or(u32::MAX);
            d.replay_rate_calibrated = rate.source == RateSource::Calibrated;
        }
        c.update(d)?;
    }
    inner
        .protection_changed_pending
        .store(false, Ordering::Release);
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
        s.last_incremental = incremental;
        s.incremental += incremental as u64;
        if matches!(
            reason,
            CheckpointReason::Timed | CheckpointReason::RedoAdvanced
        ) {
            s.timed += 1;
        } else {
            s.requested += 1;
        }
        s.write_ms += write_done.duration_since(started).as_millis() as u64;
        s.sync_ms += sync_ms;
        s.pages_written += written as u64;
    }
    // Every checkpoint is logged (PostgreSQL's log_checkpoints), the frequent redo-point
    // steps of incremental mode (up to five a second) at debug level.
    if reason == CheckpointReason::RedoAdvanced {
        tracing::debug!(
            "checkpoint complete ({reason:?}, incremental): synced {synced} files; WAL segments recycled {recycled}, removed {removed}; redo lsn {redo}; took {ms} ms"
        );
    } else {
        tracing::info!(
            "checkpoint complete ({reason:?}{}): wrote {written} buffers, synced {synced} files; WAL segments recycled {recycled}, removed {removed}; redo lsn {redo}; took {ms} ms",
            if incremental { ", incremental" } else { "" }
        );
    }
    Ok(())
}

/// A full checkpoint's writes: every page dirtied before `redo`. Timed ones are spread
/// over `checkpoint_completion_target`; the others aim at `checkpoint_target_time`,
/// calling the page writers in when the rate so far says the checkpointer alone would
/// miss it. Returns the pages the checkpointer itself wrote.
fn write_below_redo(
    inner: &Inner,
    reason: CheckpointReason,
    redo: Lsn,
    started: Instant,
) -> Result<usize> {
    let pool = &inner.pool;
    let spread = matches!(reason, CheckpointReason::Timed);
    let spread_over = inner
        .settings
        .checkpoint_timeout
        .mul_f64(inner.settings.checkpoint_completion_target);
    let deadline = inner.settings.checkpoint_target_time;
    let extreme = inner.settings.extreme_flush_dirty_page;
    let batch =
        pool.double_write().map_or(32, |d| d.batch_pages()).max(32) * if extreme { 4 } else { 1 };
    let dirty_at_start = pool.dirty_pages().max(1);
    let control = &inner.flush_control;
    let mut helped = false;
    let mut written = 0usize;
    let result: Result<()> = (|| {
        loop {
            let (n, more) = pool.flush_queue_head(redo, batch, Writer::Checkpointer)?;
            written += n;
            if !more {
                return Ok(());
            }
            let elapsed = started.elapsed();
            if spread && !inner.shutting_down.load(Ordering::Acquire) {
                // Pace: stay no further ahead of schedule than the elapsed fraction allows.
                let progress = written as f64 / dirty_at_start as f64;
                let on_time = elapsed.as_secs_f64() / spread_over.as_secs_f64().max(0.001);
                if progress > on_time && !*inner.checkpoint_request.0.lock() {
                    std::thread::sleep(Duration::from_millis(10));
                }
            } else if !spread && !helped {
                // Projected finish at the rate so far; help when it passes 80% of the
                // target (at once with extreme_flush_dirty_page).
                let rate = written as f64 / elapsed.as_secs_f64().max(1e-3);
                let left = pool.dirty_pages() as f64;
                let projected = elapsed.as_secs_f64() + left / rate.max(1.0);
                if extreme
                    || (elapsed >= Duration::from_millis(200)
                        && projected > deadline.as_secs_f64() * 0.8)
                {
                    helped = true;
                    control.checkpoint_upto.store(redo.0, Ordering::Release);
                    pool.wake_writers();
                }
            }
        }
    })();
    control.checkpoint_upto.store(0, Ordering::Release);
    result?;
    let took = started.elapsed();
    if !spread && took > deadline {
        let secs = took.as_secs_f64();
        tracing::warn!(
            "checkpoint ({reason:?}) took {secs:.1} s, over checkpoint_target_time {} s: {} pages written at {:.0} pages/s measured{}",
            deadline.as_secs(),
            written,
            written as f64 / secs.max(1e-3),
            if helped { " with the page writers' help" } else { "" }
        );
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn default_rate() -> ReplayRate {
        ReplayRate {
            bytes_per_sec: 1,
            fixed_ms: 0,
            source: RateSource::Default,
        }
    }

    #[test]
    fn a_recovery_measures_the_whole_replay_per_byte_and_the_rest_as_fixed() {
        let mut rate = default_rate();
        rate.measure(&RestartCost {
            bytes: 100_000_000,
            took: Duration::from_millis(1200),
            scan: Duration::from_millis(100),
            replay: Duration::from_millis(900),
        });
        assert_eq!(rate.source, RateSource::Measured);
        assert_eq!(rate.bytes_per_sec, 100_000_000);
        assert_eq!(rate.fixed_ms, 200);
        // The model predicts the restart it was measured on, and plans the rest by it.
        assert!((rate.seconds_for(100_000_000) - 1.2).abs() < 1e-9);
        assert_eq!(rate.bytes_within(Duration::from_millis(2200)), 200_000_000);
        assert_eq!(rate.bytes_within(Duration::from_millis(100)), 0);
    }

    #[test]
    fn a_recovery_too_small_to_time_keeps_the_old_rate() {
        let mut rate = default_rate();
        rate.measure(&RestartCost {
            bytes: MEASURE_MIN_BYTES - 1,
            took: Duration::from_millis(50),
            scan: Duration::from_millis(10),
            replay: Duration::from_millis(30),
        });
        assert_eq!(rate, default_rate());
    }
}
