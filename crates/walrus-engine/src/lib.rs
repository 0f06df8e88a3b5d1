//! walrus-engine: the storage engine of walrus (DESIGN.md §2–§8).
//!
//! Layers, each calling only downward (the only place they are listed):
//!
//! | module     | owns                                                        |
//! |------------|-------------------------------------------------------------|
//! | `engine`   | the public API: open/init, transactions, tables, checkpoints |
//! | `catalog`  | tables, columns, indexes stored in the engine's own heap     |
//! | `access`   | heap (MVCC tuples, HOT, pruning, vacuum) and btree           |
//! | `txn`      | xids, snapshots, row-lock waits, the commit-status log       |
//! | `recovery` | redo from the checkpoint's redo LSN, rollback, end checkpoint |
//! | `buffer`   | buffer pool, clock sweep, dirty queue, page writers          |
//! | `wal`      | records, parallel insert, group commit, segments, reader     |
//! | `storage`  | page format + checksum, relation files, control file         |
//! | `io`       | the OS seam and test-only fault injection                    |
//!
//! `unsafe` is allowed only in `wal::buffer` (concurrent copies into reserved ranges).

#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

pub mod buffer;
pub mod error;
pub mod io;
pub mod storage;
pub mod wal;

pub use error::{Error, Result};

/// A failed `fsync`/`fdatasync` (or a WAL write) leaves the on-disk state unknown; the
/// kernel may have dropped the dirty pages. Like PostgreSQL with `data_sync_retry = off`
/// walrus never retries: it stops at once and lets crash recovery replay the WAL.
pub fn fatal_io(what: &str, err: &std::io::Error) -> ! {
    tracing::error!("PANIC: could not {what}: {err}");
    eprintln!("walrus PANIC: could not {what}: {err}");
    std::process::abort()
}
