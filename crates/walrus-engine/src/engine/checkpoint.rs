//! Checkpoints (DESIGN §5): the checkpointer thread decides when one runs (time,
//! WAL volume, a request, a WAL segment that could not be created) and `run_checkpoint`
//! runs it: the redo point, the dirty pages below it, the file syncs, the checkpoint
//! record, the control file, then WAL segment recycling and clog truncation.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use walrus_base::{Lsn, Xid};

use super::{vacuum, Engine, Inner};
use crate::buffer::Writer;
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

impl Engine {
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

pub(super) fn run_checkpoint(inner: &Inner, reason: CheckpointReason) -> Result<()> {
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
