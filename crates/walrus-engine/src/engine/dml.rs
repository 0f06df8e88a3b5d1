//! Row changes and reads of a transaction: insert, update (HOT when no indexed column
//! changes), delete, sequential and index scans; the index maintenance that goes with
//! them and the unique check (`chain_liveness`); and, for a row another transaction
//! holds or changed, the wait or the READ COMMITTED re-check (`resolve_conflict`).
//! Every change first registers the transaction as a writer of its table
//! (`Transaction::lock_for_write`) and makes sure of WAL and clog space
//! (`Transaction::before_write`).

use std::ops::Bound;
use std::sync::atomic::Ordering;

use walrus_base::limits::HEAP_TUPLE_BYTES_MAX;
use walrus_base::{Tid, Xid};

use super::{Isolation, Transaction};
use crate::access::btree::{BTree, UniqueCheck};
use crate::access::datum::{self, encode_key, encode_row, Datum, EncodedRows};
use crate::access::heap::tuple::{self, TupleHeader, Viewer};
use crate::access::heap::{Heap, Modify, PageBatch};
use crate::catalog::{ColumnDef, IndexDef, TableDef};
use crate::error::{Error, Result};
use crate::txn::clog::XidStatus;
use crate::txn::row_locks::RowLockMode;
use crate::txn::TxnManager;

/// A batch insert's error and the row (index into the batch) it belongs to.
#[derive(Debug)]
pub struct BatchFailure {
    pub row: usize,
    pub error: Error,
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

/// The new version an update writes: every column's value, or new values for some
/// columns with the others kept from the version it replaces.
#[derive(Clone, Copy)]
enum NewVersion<'a> {
    Whole(&'a [Datum]),
    Columns(&'a [(usize, Datum)]),
}

impl Transaction {
    /// NOT NULL and value types of a whole new row (also the SQL layer's first step
    /// before CHECK constraints, which PostgreSQL evaluates after NOT NULL).
    pub fn check_row(def: &TableDef, values: &[Datum]) -> Result<()> {
        if values.len() != def.columns.len() {
            return Err(Error::InvalidInput(format!(
                "table \"{}\" has {} columns, got {} values",
                def.name,
                def.columns.len(),
                values.len()
            )));
        }
        for (c, v) in def.columns.iter().zip(values) {
            Transaction::check_value(def, c, v)?;
        }
        Ok(())
    }

    /// [`Transaction::check_row`] for the columns an update sets.
    fn check_columns(def: &TableDef, sets: &[(usize, Datum)]) -> Result<()> {
        for (i, v) in sets {
            let c = def.columns.get(*i).ok_or_else(|| {
                Error::InvalidInput(format!(
                    "table \"{}\" has {} columns, got column number {}",
                    def.name,
                    def.columns.len(),
                    i + 1
                ))
            })?;
            Transaction::check_value(def, c, v)?;
        }
        Ok(())
    }

    /// A value fits column `c`: of its type, or NULL where the column allows it.
    fn check_value(def: &TableDef, c: &ColumnDef, v: &Datum) -> Result<()> {
        match v.type_id() {
            None if c.not_null => Err(Error::NotNullViolation {
                column: c.name.clone(),
                table: def.name.clone(),
            }),
            Some(t) if t != c.ty => Err(Error::DatatypeMismatch(format!(
                "column \"{}\" is of type {} but expression is of type {}",
                c.name,
                c.ty.name(),
                t.name()
            ))),
            _ => Ok(()),
        }
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
            self.index_insert(def, idx, values, tid, true)?;
        }
        Ok(tid)
    }

    /// Inserts many rows (COPY, multi-row INSERT): the heap is filled a page at a time
    /// with one WAL record per page (`Heap::insert_many`), then the index entries
    /// are added row by row (a unique violation names the duplicate a row-by-row insert
    /// would). Errors come in the order a row-by-row insert gives them; an error
    /// leaves rows already written to the transaction, which the statement's rollback
    /// removes.
    pub fn insert_many(&mut self, def: &TableDef, rows: &[Vec<Datum>]) -> Result<Vec<Tid>> {
        self.insert_batch(def, rows).map_err(|f| f.error)
    }

    /// [`Transaction::insert_many`] that also tells which row an error belongs to (COPY
    /// names its line).
    pub fn insert_batch(
        &mut self,
        def: &TableDef,
        rows: &[Vec<Datum>],
    ) -> std::result::Result<Vec<Tid>, BatchFailure> {
        self.insert_batch_with(def, rows, false)
    }

    /// Whether `def`'s relation file was created by this transaction (CREATE TABLE or
    /// TRUNCATE in it): what COPY FREEZE requires. walrus has no subtransactions, so
    /// PostgreSQL's "current subtransaction" is the transaction.
    pub fn created_in_this_transaction(&self, def: &TableDef) -> bool {
        self.created.contains(&def.relfile)
    }

    /// COPY FREEZE: [`Transaction::insert_batch`] writing the rows with their xmin
    /// hinted committed, so no later reader asks the commit-status log about them and
    /// no freeze pass has to visit their pages. Only for a table whose relation file
    /// this transaction created (`created_in_this_transaction`): nobody else reads it
    /// before the commit (the hint does not change what other snapshots see: the xid
    /// is still in progress for them), and an abort unlinks the file.
    pub fn insert_batch_frozen(
        &mut self,
        def: &TableDef,
        rows: &[Vec<Datum>],
    ) -> std::result::Result<Vec<Tid>, BatchFailure> {
        if !self.created_in_this_transaction(def) {
            return Err(BatchFailure {
                row: 0,
                error: Error::InvalidInput(format!(
                    "rows of \"{}\" can be written frozen only in the transaction that created or truncated it",
                    def.name
                )),
            });
        }
        self.insert_batch_with(def, rows, true)
    }

    /// Inserts rows already in the stored encoding (COPY's text path): as
    /// [`Transaction::insert_batch`] (one WAL record per heap page, index entries row
    /// by row), without a `Datum` per value. `rows` must have been written for this
    /// table's column types and NOT NULL columns (its [`EncodedRows`] checked every
    /// value); a table whose columns changed since is refused. `frozen`: COPY FREEZE,
    /// only for a table this transaction created or truncated. Returns the rows written.
    pub fn insert_encoded(
        &mut self,
        def: &TableDef,
        rows: &EncodedRows,
        frozen: bool,
    ) -> std::result::Result<u64, BatchFailure> {
        if rows.is_empty() {
            return Ok(0);
        }
        let at = |row: usize| move |error: Error| BatchFailure { row, error };
        if frozen && !self.created_in_this_transaction(def) {
            return Err(at(0)(Error::InvalidInput(format!(
                "rows of \"{}\" can be written frozen only in the transaction that created or truncated it",
                def.name
            ))));
        }
        self.before_write().map_err(at(0))?;
        self.check_interrupt().map_err(at(0))?;
        let fresh = self.lock_for_write(def).map_err(at(0))?;
        let def = fresh.as_deref().unwrap_or(def);
        let same_shape = rows.types().len() == def.columns.len()
            && def
                .columns
                .iter()
                .zip(rows.types().iter().zip(rows.not_null()))
                .all(|(c, (&ty, &not_null))| c.ty == ty && (not_null || !c.not_null));
        if !same_shape {
            return Err(at(0)(Error::InvalidInput(format!(
                "rows were encoded for another definition of table \"{}\"",
                def.name
            ))));
        }
        let slices: Vec<&[u8]> = rows.rows().collect();
        // Rows before a too-big one are inserted and indexed (their unique checks may
        // fail first), as a row-by-row insert would.
        let too_big = slices
            .iter()
            .position(|r| tuple::TUPLE_HEADER_SIZE + r.len() > HEAP_TUPLE_BYTES_MAX);
        let good = &slices[..too_big.unwrap_or(slices.len())];
        let xid = self.mark_write();
        let rel = self.inner.rel(def.relfile, def.fillfactor);
        let tids = Heap::new(&self.inner.pool, &self.inner.txn, &rel)
            .insert_many(xid, self.cid, good, frozen)
            .map_err(at(0))?;
        self.activity_of(&rel).inserted += tids.len() as u64;
        if !def.indexes.is_empty() {
            let types = def.types();
            for (i, (row, &tid)) in good.iter().zip(&tids).enumerate() {
                let values = datum::decode_row(row, &types)
                    .map_err(|e| Error::Internal(format!("encoded row: {e}")))
                    .map_err(at(i))?;
                for idx in &def.indexes {
                    self.index_insert(def, idx, &values, tid, true)
                        .map_err(at(i))?;
                }
            }
        }
        if let Some(i) = too_big {
            return Err(at(i)(Error::RowTooBig {
                size: tuple::TUPLE_HEADER_SIZE + slices[i].len(),
                max: HEAP_TUPLE_BYTES_MAX,
            }));
        }
        Ok(tids.len() as u64)
    }

    fn insert_batch_with(
        &mut self,
        def: &TableDef,
        rows: &[Vec<Datum>],
        frozen: bool,
    ) -> std::result::Result<Vec<Tid>, BatchFailure> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let at = |row: usize| move |error: Error| BatchFailure { row, error };
        self.before_write().map_err(at(0))?;
        self.check_interrupt().map_err(at(0))?;
        let fresh = self.lock_for_write(def).map_err(at(0))?;
        let def = fresh.as_deref().unwrap_or(def);
        let encoded: Vec<Vec<u8>> = rows
            .iter()
            .map(|values| {
                let mut row = Vec::new();
                encode_row(values, &mut row);
                row
            })
            .collect();
        // Rows before the first bad one are inserted (their unique checks may fail
        // first), as a row-by-row insert would.
        let bad = rows.iter().zip(&encoded).position(|(values, row)| {
            Transaction::check_row(def, values).is_err()
                || tuple::TUPLE_HEADER_SIZE + row.len() > HEAP_TUPLE_BYTES_MAX
        });
        let good = &rows[..bad.unwrap_or(rows.len())];
        let xid = self.mark_write();
        let rel = self.inner.rel(def.relfile, def.fillfactor);
        let tids = Heap::new(&self.inner.pool, &self.inner.txn, &rel)
            .insert_many(xid, self.cid, &encoded[..good.len()], frozen)
            .map_err(at(0))?;
        self.activity_of(&rel).inserted += tids.len() as u64;
        for (i, (values, &tid)) in good.iter().zip(&tids).enumerate() {
            for idx in &def.indexes {
                self.index_insert(def, idx, values, tid, true)
                    .map_err(at(i))?;
            }
        }
        if let Some(i) = bad {
            Transaction::check_row(def, &rows[i]).map_err(at(i))?;
            return Err(at(i)(Error::RowTooBig {
                size: tuple::TUPLE_HEADER_SIZE + encoded[i].len(),
                max: HEAP_TUPLE_BYTES_MAX,
            }));
        }
        Ok(tids)
    }

    /// `INSERT ... ON CONFLICT DO NOTHING`: inserts `values` unless a unique index among
    /// `arbiters` (every unique index when `None`) already holds a live version with the
    /// same key — this transaction's own rows included, after waiting for an in-progress
    /// writer as the unique check does. Returns `None` when the row was skipped. A
    /// conflicting row committed between this check and the insert still fails with the
    /// unique violation where PostgreSQL would skip: an error, never a wrong answer.
    pub fn insert_or_skip(
        &mut self,
        def: &TableDef,
        values: &[Datum],
        arbiters: Option<&[String]>,
    ) -> Result<Option<Tid>> {
        self.before_write()?;
        self.check_interrupt()?;
        let fresh = self.lock_for_write(def)?;
        let def = fresh.as_deref().unwrap_or(def);
        // NOT NULL and type checks come first, as in PostgreSQL's ExecInsert.
        Transaction::check_row(def, values)?;
        let me = self.mark_write();
        let inner = self.inner.clone();
        let rel = inner.rel(def.relfile, def.fillfactor);
        let heap = Heap::new(&inner.pool, &inner.txn, &rel);
        for idx in &def.indexes {
            if !idx.unique || arbiters.is_some_and(|a| !a.contains(&idx.name)) {
                continue;
            }
            let keyvals: Vec<Datum> = idx.columns.iter().map(|&c| values[c].clone()).collect();
            if keyvals.iter().any(|d| d.is_null()) {
                continue; // NULLs never conflict
            }
            let mut key = Vec::new();
            encode_key(&keyvals, &mut key);
            let tree = BTree::open(&inner.pool, idx.relfile, idx.unique, &idx.name);
            'recheck: loop {
                self.check_interrupt()?;
                for existing in tree.lookup(&key)? {
                    match chain_liveness(&heap, existing, me)? {
                        UniqueCheck::Live => return Ok(None),
                        UniqueCheck::NotLive => {}
                        UniqueCheck::WaitFor(holder) => {
                            inner.txn.wait_for(me, holder, self.lock_wait())?;
                            continue 'recheck;
                        }
                    }
                }
                break;
            }
        }
        self.insert(def, values).map(Some)
    }

    /// Adds `tid`'s entry to `idx`; a unique index checks the key first unless
    /// `unique_check` is false (an UPDATE that kept the key: see [`Transaction::update`]).
    fn index_insert(
        &mut self,
        def: &TableDef,
        idx: &IndexDef,
        values: &[Datum],
        tid: Tid,
        unique_check: bool,
    ) -> Result<()> {
        let keyvals: Vec<Datum> = idx.columns.iter().map(|&c| values[c].clone()).collect();
        let mut key = Vec::new();
        encode_key(&keyvals, &mut key);
        let xid = self.xid.expect("writer has an xid");
        let inner = self.inner.clone();
        let rel = inner.rel(def.relfile, def.fillfactor);
        let heap = Heap::new(&inner.pool, &inner.txn, &rel);
        // NULLs never conflict (SQL semantics). Without a check the tree is not asked
        // for one (its search of the key's entries would find nothing to refuse).
        let unique = unique_check && idx.unique && !keyvals.iter().any(|d| d.is_null());
        let tree = BTree::open(&inner.pool, idx.relfile, unique, &idx.name);
        let mut check = |existing: Tid| -> Result<UniqueCheck> {
            if !unique || existing == tid {
                return Ok(UniqueCheck::NotLive);
            }
            chain_liveness(&heap, existing, xid)
        };
        let slot = match self.leaf_hints.iter().position(|h| h.0 == idx.relfile) {
            Some(i) => i,
            None => {
                self.leaf_hints.push((idx.relfile, None));
                self.leaf_hints.len() - 1
            }
        };
        let mut hint = self.leaf_hints[slot].1;
        let how = self.lock_wait();
        let txn = &inner.txn;
        let mut wait = |holder: Xid| -> Result<()> { txn.wait_for(xid, holder, how) };
        let inserted = tree.insert_hinted(&key, tid, xid, &mut check, &mut wait, &mut hint);
        self.leaf_hints[slot].1 = hint;
        inserted.map_err(|e| match e {
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

    /// Sequential scan: calls `f` for each visible row (page at a time); `f` returns
    /// false to stop.
    pub fn scan(
        &mut self,
        def: &TableDef,
        f: impl FnMut(Tid, Vec<Datum>) -> Result<bool>,
    ) -> Result<()> {
        self.scan_columns(def, &vec![true; def.columns.len()], f)
    }

    /// [`Transaction::scan`] decoding only the columns `wanted` marks (the others read
    /// as NULL): for a query that needs few columns of a wide table.
    pub fn scan_columns(
        &mut self,
        def: &TableDef,
        wanted: &[bool],
        mut f: impl FnMut(Tid, Vec<Datum>) -> Result<bool>,
    ) -> Result<()> {
        self.scan_columns_borrowed(def, wanted, |tid, row| f(tid, row.to_vec()))
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
        self.index_scan_columns(def, index, lo, hi, &vec![true; def.columns.len()])
    }

    /// [`Transaction::index_scan`] decoding only the columns `wanted` marks (the others
    /// read as NULL), as [`Transaction::scan_columns`] does.
    pub fn index_scan_columns(
        &mut self,
        def: &TableDef,
        index: &IndexDef,
        lo: Bound<&[Datum]>,
        hi: Bound<&[Datum]>,
        wanted: &[bool],
    ) -> Result<Vec<(Tid, Vec<Datum>)>> {
        let mut out = Vec::new();
        self.index_scan_borrowed(def, index, lo, hi, wanted, &mut |tid, row| {
            out.push((tid, row.to_vec()));
            Ok(true)
        })?;
        Ok(out)
    }

    /// [`Transaction::index_scan_columns`] lending each row to `f` (valid during the
    /// call only), in index order; `f` returns false to stop. The index range is read
    /// first (its keys into one buffer), then the heap: consecutive entries on one heap
    /// page are fetched under one pin and latch ([`Heap::fetch_visible_batch`]), and
    /// each row is decoded into one reused buffer. `f` runs with no latch held.
    pub fn index_scan_borrowed(
        &mut self,
        def: &TableDef,
        index: &IndexDef,
        lo: Bound<&[Datum]>,
        hi: Bound<&[Datum]>,
        wanted: &[bool],
        f: &mut dyn FnMut(Tid, &[Datum]) -> Result<bool>,
    ) -> Result<()> {
        self.lock_for_read(def)?;
        self.index_scan_lending(def, index, lo, hi, wanted, f)
            .map_err(|e| super::scan::file_gone_as_rewritten(e, def))
    }

    fn index_scan_lending(
        &mut self,
        def: &TableDef,
        index: &IndexDef,
        lo: Bound<&[Datum]>,
        hi: Bound<&[Datum]>,
        wanted: &[bool],
        f: &mut dyn FnMut(Tid, &[Datum]) -> Result<bool>,
    ) -> Result<()> {
        self.check_interrupt()?;
        let enc = |b: Bound<&[Datum]>| -> Bound<Vec<u8>> {
            let key = |v: &[Datum]| {
                let mut k = Vec::new();
                encode_key(v, &mut k);
                k
            };
            match b {
                Bound::Included(v) => Bound::Included(key(v)),
                Bound::Excluded(v) => Bound::Excluded(key(v)),
                Bound::Unbounded => Bound::Unbounded,
            }
        };
        let (lo, hi) = (enc(lo), enc(hi));
        // The snapshot must be taken before the index is read: an entry inserted after the
        // read by a transaction that commits before a later snapshot would be missed,
        // while its predecessor already looks deleted.
        let snap = self.snapshot();
        let (own, cid) = (self.own_xids.as_slice(), self.cid);
        let tree = BTree::open(&self.inner.pool, index.relfile, index.unique, &index.name);
        // Each entry's tid and the end of its key in `keys` (keys back to back).
        let mut keys: Vec<u8> = Vec::new();
        let mut hits: Vec<(Tid, usize)> = Vec::new();
        tree.range_visit(bound_ref(&lo), bound_ref(&hi), &mut |k, t| {
            keys.extend_from_slice(k);
            hits.push((t, keys.len()));
        })?;
        let key_of = |i: usize| {
            let start = if i == 0 { 0 } else { hits[i - 1].1 };
            keys[start..hits[i].1].to_vec()
        };
        let viewer = Viewer {
            snapshot: &snap,
            own_xids: own,
            cid,
        };
        let rel = self.inner.rel(def.relfile, def.fillfactor);
        let heap = Heap::new(&self.inner.pool, &self.inner.txn, &rel);
        let types = def.types();
        let columns = datum::RowColumns::new(&types, wanted);
        let mut fetched = rel.activity.index_scan();
        // No two entries lead to one version (a HOT chain has one root, and a line
        // pointer is reused only after vacuum removed its entries): checked in debug
        // builds, where a set of every tid is affordable.
        #[cfg(debug_assertions)]
        let mut seen: std::collections::HashSet<Tid, walrus_base::hash::WordHash> =
            std::collections::HashSet::with_capacity_and_hasher(hits.len(), Default::default());
        let mut dead = Vec::new();
        let mut dead_at = Vec::new();
        let mut batch = PageBatch::new();
        let mut roots: Vec<u16> = Vec::new();
        let mut row = Vec::with_capacity(types.len());
        let mut i = 0;
        'entries: while i < hits.len() {
            // The run of entries whose chains start on this entry's heap page.
            let block = hits[i].0.block;
            let run = hits[i..]
                .iter()
                .take_while(|(t, _)| t.block == block)
                .count();
            roots.clear();
            roots.extend(hits[i..i + run].iter().map(|(t, _)| t.offset));
            dead_at.clear();
            heap.fetch_visible_batch(block, &roots, &viewer, &mut batch, &mut dead_at)?;
            dead.extend(dead_at.iter().map(|&d| (key_of(i + d), hits[i + d].0)));
            i += run;
            for r in 0..batch.len() {
                let (tid, bytes) = batch.row(r);
                #[cfg(debug_assertions)]
                assert!(seen.insert(tid), "index range scan reached {tid} twice");
                columns
                    .decode_into(bytes, &mut row)
                    .map_err(|e| Error::InvalidInput(e.to_string()))?;
                fetched.rows += 1;
                if !f(tid, &row)? {
                    break 'entries;
                }
            }
            self.check_interrupt()?;
        }
        if !dead.is_empty() {
            let removed = tree.delete_dead_entries(dead, &|t| heap.root_is_dead(t))?;
            self.inner
                .dead_index_entries_removed
                .fetch_add(removed as u64, Ordering::Relaxed);
        }
        Ok(())
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

    /// Replaces the row at `tid` with `new_values` (every column).
    pub fn update(&mut self, def: &TableDef, tid: Tid, new_values: &[Datum]) -> Result<RowChange> {
        self.update_version(def, tid, NewVersion::Whole(new_values))
    }

    /// Gives the columns in `sets` new values in the row at `tid`; the other columns
    /// keep their stored bytes, which are copied rather than decoded and re-encoded
    /// ([`datum::splice_row`]): what an SQL UPDATE needs, without reading the columns it
    /// neither sets nor tests.
    pub fn update_columns(
        &mut self,
        def: &TableDef,
        tid: Tid,
        sets: &[(usize, Datum)],
    ) -> Result<RowChange> {
        self.update_version(def, tid, NewVersion::Columns(sets))
    }

    fn update_version(
        &mut self,
        def: &TableDef,
        tid: Tid,
        new: NewVersion<'_>,
    ) -> Result<RowChange> {
        self.before_write()?;
        let fresh = self.lock_for_write(def)?;
        let def = fresh.as_deref().unwrap_or(def);
        match new {
            NewVersion::Whole(values) => Transaction::check_row(def, values)?,
            NewVersion::Columns(sets) => Transaction::check_columns(def, sets)?,
        }
        let xid = self.mark_write();
        let rel = self.inner.rel(def.relfile, def.fillfactor);
        let inner = self.inner.clone();
        let heap = Heap::new(&inner.pool, &inner.txn, &rel);
        let types = def.types();
        let bad = |e: datum::DatumError| Error::InvalidInput(e.to_string());
        let mut row = Vec::new();
        if let NewVersion::Whole(values) = new {
            encode_row(values, &mut row);
        }
        // Spans of the columns up to the last indexed one, in the old and new version.
        let indexed = def.indexes.iter().flat_map(|i| &i.columns);
        let span_count = indexed.clone().max().map_or(0, |&c| c + 1);
        let (mut was, mut is) = (Vec::new(), Vec::new());
        loop {
            self.check_interrupt()?;
            let Some((_, old_row)) = heap.read_version(tid)? else {
                return Ok(RowChange::Gone);
            };
            if let NewVersion::Columns(sets) = new {
                datum::splice_row(&old_row, &types, sets, &mut row).map_err(bad)?;
            }
            // HOT is allowed when no indexed column changes; "changes" is a byte
            // comparison of the stored values, as PostgreSQL's.
            datum::value_spans(&old_row, &types, span_count, &mut was).map_err(bad)?;
            datum::value_spans(&row, &types, span_count, &mut is).map_err(bad)?;
            let same =
                |c: usize| was[c].clone().map(|r| &old_row[r]) == is[c].clone().map(|r| &row[r]);
            let unchanged_index: Vec<bool> = def
                .indexes
                .iter()
                .map(|i| i.columns.iter().all(|&c| same(c)))
                .collect();
            let hot_ok = unchanged_index.iter().all(|&u| u);
            // Against row locks, a change of no unique index's column is PostgreSQL's
            // "no key update" (a foreign-key check's KEY SHARE lock lets it pass).
            let key_changed = def
                .indexes
                .iter()
                .zip(&unchanged_index)
                .any(|(i, &unchanged)| i.unique && !unchanged);
            let mode = if key_changed {
                RowLockMode::Update
            } else {
                RowLockMode::NoKeyUpdate
            };
            let (m, hot) = heap.update(tid, xid, self.cid, &row, hot_ok, mode)?;
            match m {
                Modify::Done(new_tid) => {
                    let a = self.activity_of(&rel);
                    a.updated += 1;
                    a.hot_updated += hot as u64;
                    if !hot {
                        let decoded;
                        let values = match new {
                            NewVersion::Whole(values) => values,
                            NewVersion::Columns(_) => {
                                // Only the indexed columns are read from it.
                                let mut wanted = vec![false; types.len()];
                                for &c in indexed.clone() {
                                    wanted[c] = true;
                                }
                                decoded = datum::decode_row_columns(&row, &types, &wanted)
                                    .map_err(bad)?;
                                &decoded[..]
                            }
                        };
                        for (idx, unchanged) in def.indexes.iter().zip(unchanged_index) {
                            // An unchanged key cannot conflict: the only live entry with
                            // it is this row's own, which the row lock we hold keeps
                            // another inserter waiting on.
                            self.index_insert(def, idx, values, new_tid, !unchanged)?;
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
    pub(super) fn resolve_conflict(
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
                // Inserted by one of this transaction's live subtransactions.
                _ if txn.same_transaction(h.xmin, me) => true,
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
                        _ if txn.same_transaction(h.xmax, me) => true,
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
        Datum::Bytea(b) => {
            let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
            format!("\\x{hex}")
        }
        Datum::Uuid(u) => crate::access::datum::uuid_text(u),
        Datum::Time(v) => v.to_string(),
        Datum::TimeTz(v, zone) => format!("{v} us zone {zone}"),
        Datum::Reg(r) => r.oid.to_string(),
        Datum::Int2Vector(items) => {
            let items: Vec<String> = items.iter().map(i16::to_string).collect();
            items.join(" ")
        }
        Datum::Interval(iv) => format!("{} mons {} days {} us", iv.months, iv.days, iv.micros),
        Datum::Json(s) | Datum::Jsonb(s) => s.clone(),
        Datum::Array(a) => {
            let items: Vec<String> = a.items.iter().map(datum_text).collect();
            format!("{{{}}}", items.join(","))
        }
    }
}
