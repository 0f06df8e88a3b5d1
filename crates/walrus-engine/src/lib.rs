//! walrus-engine: the storage engine of walrus (DESIGN.md §2–§8).
//!
//! Layers, each calling only downward (the only place they are listed):
//!
//! | module     | owns                                                                |
//! |------------|---------------------------------------------------------------------|
//! | `engine`   | public API: open, checkpoint, transaction, ddl, dml, commit, vacuum |
//! | `catalog`  | tables, columns, indexes stored in the engine's own heap            |
//! | `access`   | heap (MVCC tuples, HOT, pruning, vacuum) and btree                  |
//! | `txn`      | xids, snapshots, row-lock waits, the commit-status log              |
//! | `recovery` | redo from the checkpoint's redo LSN, rollback, end checkpoint       |
//! | `buffer`   | buffer pool, clock sweep, dirty queue, page writers                 |
//! | `wal`      | records, parallel insert, group commit, segments, reader            |
//! | `protect`  | torn-page protection: the mode, image decision, redo table          |
//! | `storage`  | page format + checksum, relation files, control file                |
//! | `io`       | the OS seam; test harnesses hook it (tears, power cuts, errors)     |
//!
//! `unsafe` is allowed only in `wal::buffer` (concurrent copies into reserved ranges),
//! `wal::pmem` (libpmem loaded at run time) and `buffer::arena` (the pool's page memory,
//! one lazily zero-filled mapping).

#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

pub mod access;
pub mod buffer;
pub mod catalog;
pub mod engine;
pub mod error;
pub mod io;
pub mod protect;
pub mod recovery;
pub mod settings;
pub mod storage;
pub(crate) mod sync;
pub mod txn;
pub mod wal;
pub mod xlog;

pub use engine::Engine;
pub use error::{Error, Result};

/// Reads every page of every relation file in `dir` and verifies its checksum, and checks
/// the commit-status log's files (`Clog::check_files`), without starting the engine (no
/// recovery, no WAL). Returns one error per damaged page or clog problem.
pub fn verify_data_directory(dir: &std::path::Path) -> Result<Vec<Error>> {
    // Not a data directory: say so before creating a lock file in it.
    drop(storage::control::ControlFile::open(dir)?);
    // A live server's pages may be mid-write: verify only a directory nobody has open.
    let lock = storage::dir_lock::DirLock::acquire(dir)?;
    let result = verify_locked(dir);
    lock.release();
    result
}

fn verify_locked(dir: &std::path::Path) -> Result<Vec<Error>> {
    let control = storage::control::ControlFile::open(dir)?;
    let relfiles = storage::relfile::RelFiles::open(dir)?;
    let mut bad = Vec::new();
    // The commit-status log: the same check the engine makes at open.
    let cd = control.data();
    let assigned_below = walrus_base::Xid(cd.next_xid.0.saturating_sub(txn::XID_LOG_BLOCK));
    let clog_dir = dir.join("clog");
    match txn::clog::Clog::check_files(&clog_dir, cd.clog_oldest, assigned_below) {
        Ok(None) => {}
        Ok(Some(problem)) => bad.push(Error::BadDataDirectory {
            dir: dir.display().to_string(),
            reason: problem,
        }),
        Err(e) => bad.push(Error::io("read commit-status log", clog_dir.display(), e)),
    }
    let mut buf = vec![0u8; walrus_base::PAGE_SIZE];
    for relfile in relfiles.list()? {
        for b in 0..relfiles.nblocks(relfile)? {
            let id = walrus_base::PageId::new(relfile, b);
            relfiles.read_page(id, &mut buf)?;
            match storage::page::verify(&buf, id) {
                storage::page::PageCheck::Valid | storage::page::PageCheck::New => {}
                storage::page::PageCheck::ChecksumMismatch { stored, computed } => {
                    bad.push(Error::ChecksumMismatch {
                        page: id,
                        relation: format!("relfile {relfile}"),
                        stored,
                        computed,
                    })
                }
                storage::page::PageCheck::Misdirected { found } => bad.push(Error::Misdirected {
                    expected: id,
                    found,
                }),
            }
        }
    }
    Ok(bad)
}

/// A small number that differs between threads (assigned on first use): spreads threads
/// over WAL insertion slots and heap insertion targets.
pub fn thread_hint() -> usize {
    use std::cell::Cell;
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local!(static HINT: Cell<usize> = const { Cell::new(usize::MAX) });
    HINT.with(|h| {
        if h.get() == usize::MAX {
            h.set(NEXT.fetch_add(1, Ordering::Relaxed));
        }
        h.get()
    })
}

/// Stops the process if dropped while its thread unwinds from a panic. Held by the
/// leaders other threads wait on (the group-commit flush leader, the commit-status group
/// update leader): a panic there would otherwise leave the leader flag set or the
/// followers parked, and every later commit would hang while the process stayed up.
/// Stopping hands the directory to crash recovery instead.
pub(crate) struct AbortOnUnwind(pub &'static str);

impl Drop for AbortOnUnwind {
    fn drop(&mut self) {
        if std::thread::panicking() {
            tracing::error!(
                "PANIC: the {} panicked; stopping for crash recovery",
                self.0
            );
            eprintln!(
                "walrus PANIC: the {} panicked; stopping for crash recovery",
                self.0
            );
            std::process::abort();
        }
    }
}

/// A failed `fsync`/`fdatasync` (or a WAL write) leaves the on-disk state unknown; the
/// kernel may have dropped the dirty pages. Like PostgreSQL with `data_sync_retry = off`
/// walrus never retries: it stops at once and lets crash recovery replay the WAL.
pub fn fatal_io(what: &str, err: &std::io::Error) -> ! {
    tracing::error!("PANIC: could not {what}: {err}");
    eprintln!("walrus PANIC: could not {what}: {err}");
    std::process::abort()
}
