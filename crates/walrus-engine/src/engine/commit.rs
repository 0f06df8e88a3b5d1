//! How a transaction ends: commit, rollback, and the rollback of a transaction dropped
//! without either.
//!
//! Commit protocol (DESIGN §6): WAL commit record → flush (group commit) → clog bits →
//! release the transaction's row locks (wake waiters). With `synchronous_commit = off`
//! the flush is skipped; the clog page then carries the record's end LSN and is written
//! only after WAL is flushed that far. The commit record is inserted and
//! the clog set under the shared `commit_barrier`, so a checkpoint's redo LSN never
//! falls between them.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{Inner, Transaction};
use crate::error::Result;
use crate::txn::clog::XidStatus;
use crate::xlog;

impl Transaction {
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
            // Subtransactions that wrote and were not rolled back commit with it: one
            // record names them all, and their clog bits are set before the transaction
            // leaves the running set, so no snapshot sees some of its changes without
            // the others (a snapshot taken before lists them all as running).
            let subxids = &self.own_xids[1..];
            let mut end = walrus_base::Lsn(0);
            for record in xlog::commit_records(xid, subxids, &self.dropped) {
                end = wal.insert(&record, &[]).1;
            }
            // DDL (a catalog change, a dropped file) is always durable at commit, as in
            // PostgreSQL: an asynchronous CREATE TABLE could otherwise vanish in a crash
            // after rows were acknowledged into it.
            let synchronous = self
                .synchronous_commit
                .unwrap_or(inner.settings.synchronous_commit);
            if synchronous || !self.dropped.is_empty() || self.catalog_changed {
                wal.flush(end);
            } else {
                wal.note_async_commit(end);
            }
            // The page holding this status is not written before WAL reaches `end`
            // (it may not be yet, with synchronous_commit = off).
            for &sub in subxids {
                inner.txn.clog.set_status_at(sub, XidStatus::Committed, end);
            }
            inner.txn.clog.set_status_at(xid, XidStatus::Committed, end);
            // Under the barrier: a checkpoint whose redo point follows this commit
            // record finds the files queued and removes them before it completes.
            if !self.dropped.is_empty() {
                inner.pool.relfiles.queue_unlinks(&self.dropped);
            }
        }
        self.release_row_locks();
        inner.txn.finish(self.proc, true);
        if !self.dropped.is_empty() {
            for r in self.dropped.drain(..) {
                inner.pool.discard_relation(r);
                inner.pool.relfiles.forget(r);
                inner.rels.write().remove(&r);
            }
            remove_dropped_files(&inner);
        }
        if self.catalog_changed {
            inner.catalog_version.fetch_add(1, Ordering::AcqRel);
            *inner.catalog_cache.write() = None;
        }
        // Last: a vacuum waiting for this DDL must find the new catalog.
        self.end_bookkeeping(true);
        Ok(())
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
                // Its live subtransactions' bits too (redo and a reader that finds them
                // no longer running would conclude the same; this spares the lookup).
                for &x in self.own_xids.iter().rev() {
                    inner.txn.clog.set_status(x, XidStatus::Aborted);
                }
            }
            self.release_row_locks();
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

/// Removes the queued files of committed drops on a helper thread (`storage::relfile`
/// rule 6), or here when no thread can be started.
fn remove_dropped_files(inner: &Arc<Inner>) {
    let removing = |inner: &Inner| {
        if let Err(e) = inner.pool.relfiles.remove_queued() {
            tracing::warn!("a dropped relation's file stays behind: {e}");
        }
    };
    let helper = inner.clone();
    let spawned = std::thread::Builder::new()
        .name("walrus-unlink".into())
        .spawn(move || removing(&helper));
    if spawned.is_err() {
        removing(inner);
    }
}
