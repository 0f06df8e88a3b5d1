//! Sequential scans that hand each row out borrowed: a page's visible tuples are copied
//! out under one latch ([`PageBatch`]) and decoded one by one into a single reused row
//! buffer, so the scan itself allocates nothing per row (only a wanted text or numeric
//! value does).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use walrus_base::Tid;

use super::Transaction;
use crate::access::datum::{Datum, RowColumns};
use crate::access::heap::tuple::Viewer;
use crate::access::heap::{Heap, PageBatch};
use crate::catalog::TableDef;
use crate::error::{Error, Result};

impl Transaction {
    /// [`Transaction::scan_columns`] lending each row to `f` instead of giving it away:
    /// the slice is valid only during the call (it is overwritten by the next row).
    /// Columns `wanted` leaves out read as NULL. `f` returns false to stop.
    pub fn scan_columns_borrowed(
        &mut self,
        def: &TableDef,
        wanted: &[bool],
        mut f: impl FnMut(Tid, &[Datum]) -> Result<bool>,
    ) -> Result<()> {
        self.with_scan(def, |t, heap, viewer| {
            let types = def.types();
            let columns = RowColumns::new(&types, wanted);
            let mut count = heap.rel.activity.seq_scan();
            let mut counted = |tid: Tid, row: &[Datum]| {
                count.rows += 1;
                f(tid, row)
            };
            let mut batch = heap.scan_batch()?;
            let mut row = Vec::with_capacity(types.len());
            for b in 0..heap.nblocks()? {
                t.check_interrupt()?;
                if !lend_block(
                    heap,
                    viewer,
                    b,
                    &columns,
                    &mut batch,
                    &mut row,
                    &mut counted,
                )? {
                    break;
                }
            }
            Ok(())
        })
    }

    /// Runs `f` with `def`'s heap and a viewer of this transaction's snapshot.
    fn with_scan<R>(
        &mut self,
        def: &TableDef,
        f: impl FnOnce(&Self, &Heap<'_>, &Viewer<'_>) -> Result<R>,
    ) -> Result<R> {
        self.lock_for_read(def)?;
        let snap = self.snapshot();
        let viewer = Viewer {
            snapshot: &snap,
            own_xids: &self.own_xids,
            cid: self.cid,
        };
        let rel = self.inner.rel(def.relfile, def.fillfactor);
        let heap = Heap::new(&self.inner.pool, &self.inner.txn, &rel);
        f(self, &heap, &viewer).map_err(|e| file_gone_as_rewritten(e, def))
    }
}

/// A read of `def` that found one of its files (heap or index) gone: a TRUNCATE or DROP
/// TABLE committed between the statement's read of the table's definition and its
/// AccessShare lock (`Transaction::lock_for_read` reports that case first; this catches
/// what passes it), and the file left with it. The error names the
/// table and asks for a retry (40001, [`Error::TableRewritten`]) instead of reporting
/// the missing file (58P01), which told the client nothing about its statement.
pub(super) fn file_gone_as_rewritten(e: Error, def: &TableDef) -> Error {
    let gone = |path: &str| {
        std::iter::once(def.relfile)
            .chain(def.indexes.iter().map(|i| i.relfile))
            .any(|r| path == crate::storage::relfile::shown(r))
    };
    match &e {
        Error::Io { cause, path, .. }
            if cause.kind() == std::io::ErrorKind::NotFound && gone(path) =>
        {
            Error::TableRewritten(def.name.clone())
        }
        _ => e,
    }
}

/// Copies `block`'s rows visible to `viewer` into `batch` and lends each, decoded into
/// `row` (columns `wanted` leaves out read as NULL), to `f`. False when `f` said stop.
#[allow(clippy::too_many_arguments)]
fn lend_block(
    heap: &Heap<'_>,
    viewer: &Viewer<'_>,
    block: u32,
    columns: &RowColumns<'_>,
    batch: &mut PageBatch,
    row: &mut Vec<Datum>,
    f: &mut impl FnMut(Tid, &[Datum]) -> Result<bool>,
) -> Result<bool> {
    heap.visible_batch(block, viewer, batch)?;
    for i in 0..batch.len() {
        let (tid, bytes) = batch.row(i);
        columns
            .decode_into(bytes, row)
            .map_err(|e| Error::InvalidInput(e.to_string()))?;
        if !f(tid, row)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Blocks a parallel scan's participant claims at a time (256 KiB): large enough that
/// claiming costs nothing against reading, small enough that participants finish close
/// together.
const PARALLEL_CHUNK_BLOCKS: u32 = 32;

/// The most parallel-scan helper threads all sessions together may run at once
/// (PostgreSQL's default `max_parallel_workers`). A scan that finds none free runs on
/// its session's thread alone.
pub const MAX_PARALLEL_WORKERS: usize = 8;

static PARALLEL_WORKERS_IN_USE: AtomicUsize = AtomicUsize::new(0);
static PARALLEL_SCANS: AtomicU64 = AtomicU64::new(0);
static PARALLEL_WORKERS_LAUNCHED: AtomicU64 = AtomicU64::new(0);

/// (parallel scans run, helper threads they launched) since the process started:
/// `walrus_stat_parallel`.
pub fn parallel_scan_counts() -> (u64, u64) {
    (
        PARALLEL_SCANS.load(Ordering::Relaxed),
        PARALLEL_WORKERS_LAUNCHED.load(Ordering::Relaxed),
    )
}

/// Helper threads reserved from [`MAX_PARALLEL_WORKERS`], given back when dropped.
struct WorkerGrant(usize);

impl WorkerGrant {
    fn take(want: usize) -> WorkerGrant {
        let mut got = 0;
        let _ = PARALLEL_WORKERS_IN_USE.fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
            got = want.min(MAX_PARALLEL_WORKERS.saturating_sub(used));
            Some(used + got)
        });
        WorkerGrant(got)
    }
}

impl Drop for WorkerGrant {
    fn drop(&mut self) {
        PARALLEL_WORKERS_IN_USE.fetch_sub(self.0, Ordering::AcqRel);
    }
}

impl Transaction {
    /// A parallel sequential scan (PostgreSQL's Parallel Seq Scan under a Gather): the
    /// session's thread and up to `helpers` more (fewer when other sessions' scans hold
    /// them) claim runs of blocks in turn, each with its own page batch and scan ring,
    /// and read them under the transaction's one snapshot. Each participant folds the
    /// rows it reads into its own state (`init` makes one), lent as
    /// [`Transaction::scan_columns_borrowed`] lends them; `each` returning false stops
    /// every participant at its next page. Rows come in no particular order, so the
    /// caller combines the states into what a serial scan would have given. Returns the
    /// states, the session's first.
    pub fn scan_columns_parallel<W: Send>(
        &mut self,
        def: &TableDef,
        wanted: &[bool],
        helpers: usize,
        init: impl Fn() -> W + Sync,
        each: impl Fn(&mut W, Tid, &[Datum]) -> Result<bool> + Sync,
    ) -> Result<Vec<W>> {
        self.with_scan(def, |t, heap, viewer| {
            let nblocks = heap.nblocks()?;
            let types = def.types();
            let columns = RowColumns::new(&types, wanted);
            let next_block = AtomicU32::new(0);
            let stop = AtomicBool::new(false);
            let interrupt = t.interrupt.clone();
            // One scan, however many participants; a participant that fails adds no
            // rows (the statement fails anyway).
            let mut count = heap.rel.activity.seq_scan();
            let rows = AtomicU64::new(0);
            let participate = || -> Result<W> {
                let mut state = init();
                let mut batch = heap.scan_batch()?;
                let mut row = Vec::with_capacity(types.len());
                let mut lent = 0u64;
                let mut lend = |tid, row: &[Datum]| {
                    lent += 1;
                    each(&mut state, tid, row)
                };
                'claims: while !stop.load(Ordering::Relaxed) {
                    let first = next_block.fetch_add(PARALLEL_CHUNK_BLOCKS, Ordering::Relaxed);
                    if first >= nblocks {
                        break;
                    }
                    for b in first..nblocks.min(first + PARALLEL_CHUNK_BLOCKS) {
                        super::transaction::interrupted(interrupt.as_deref())?;
                        if stop.load(Ordering::Relaxed) {
                            break 'claims;
                        }
                        if !lend_block(heap, viewer, b, &columns, &mut batch, &mut row, &mut lend)?
                        {
                            stop.store(true, Ordering::Relaxed);
                            break 'claims;
                        }
                    }
                }
                rows.fetch_add(lent, Ordering::Relaxed);
                Ok(state)
            };
            let states = run_participants(helpers, &stop, participate);
            count.rows = rows.load(Ordering::Relaxed);
            states
        })
    }
}

/// Runs `participate` on this thread and on up to `helpers` scoped threads (as many as
/// [`WorkerGrant`] gives); one failing stops the others at their next page.
pub(super) fn run_participants<W: Send>(
    helpers: usize,
    stop: &AtomicBool,
    participate: impl Fn() -> Result<W> + Sync,
) -> Result<Vec<W>> {
    let run = || {
        let r = participate();
        if r.is_err() {
            stop.store(true, Ordering::Relaxed);
        }
        r
    };
    let grant = WorkerGrant::take(helpers);
    let results: Vec<Result<W>> = std::thread::scope(|s| {
        let spawned: Vec<_> = (0..grant.0)
            .map(|i| {
                std::thread::Builder::new()
                    .name(format!("walrus-parallel-{i}"))
                    .spawn_scoped(s, run)
            })
            .collect();
        PARALLEL_SCANS.fetch_add(1, Ordering::Relaxed);
        PARALLEL_WORKERS_LAUNCHED.fetch_add(
            spawned.iter().filter(|h| h.is_ok()).count() as u64,
            Ordering::Relaxed,
        );
        let mut results = vec![run()];
        for h in spawned {
            results.push(match h {
                Ok(h) => h.join().unwrap_or_else(|_| {
                    Err(Error::Internal("a parallel scan worker panicked".into()))
                }),
                // No thread: the other participants covered its blocks.
                Err(_) => continue,
            });
        }
        results
    });
    drop(grant);
    results.into_iter().collect()
}
