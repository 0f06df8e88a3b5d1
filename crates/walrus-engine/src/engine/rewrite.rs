//! Table rewrites: the ALTER TABLE forms that change the stored form of every row
//! (DROP COLUMN, ALTER COLUMN TYPE with a conversion).
//!
//! A rewrite is TRUNCATE followed by a reload, in one transaction: under an
//! AccessExclusive lock the table's catalog row is replaced by the new definition on a
//! new heap file, every row this transaction sees in the old file is converted and
//! inserted into the new one, and each index that survives is built anew on it (its
//! key columns renumbered). The old heap and index files are dropped at commit, as
//! TRUNCATE's are; a rollback or a crash before the commit record leaves the old files
//! and catalog rows in place and the new files unlinked (`created`), so a kill -9 in
//! the middle leaves the old schema or the new one, never a mix. As in PostgreSQL, a
//! rewrite is not MVCC-safe: a transaction whose snapshot predates the commit and that
//! had not read the table sees it empty afterwards (one that had read it made the
//! rewrite wait, `table_locks.rs`).
//!
//! Column positions are what indexes and foreign keys store, so a rewrite that drops
//! columns renumbers them: its own foreign keys and those of other tables that
//! reference it are rewritten too. A constraint or index on a dropped column goes with
//! it (PostgreSQL's automatic dependencies), except another table's foreign key, which
//! needs CASCADE (2BP01 otherwise).

use walrus_base::Tid;

use super::table_locks::LockMode;
use super::Transaction;
use crate::access::datum::{self, Datum};
use crate::access::heap::tuple::Viewer;
use crate::access::heap::Heap;
use crate::catalog::{self, ConstraintDef, ConstraintKind, TableDef};
use crate::error::{Error, Result};

/// Rows converted and inserted per batch (one heap page's worth at a time is read).
const REWRITE_BATCH_ROWS: usize = 1024;

impl Transaction {
    /// Rewrites `table`: column `i` of the old definition becomes column
    /// `old_to_new[i]` (`None`: dropped); `change` then edits the new definition (a
    /// column's type); each row is converted by `convert` (given the old row, it
    /// returns the new one, in the new column order). `cascade`: foreign keys of other
    /// tables on a dropped column are dropped instead of refusing the rewrite.
    pub fn rewrite_table(
        &mut self,
        table: &str,
        old_to_new: &[Option<usize>],
        cascade: bool,
        change: impl FnOnce(&mut TableDef) -> Result<()>,
        convert: &mut dyn FnMut(Vec<Datum>) -> Result<Vec<Datum>>,
    ) -> Result<()> {
        self.before_write()?;
        let inner = self.inner.clone();
        let (ddl, view, old) = self.lock_for_ddl(&inner, table, LockMode::AccessExclusive)?;
        assert_eq!(
            old_to_new.len(),
            old.columns.len(),
            "a rewrite maps every old column"
        );
        let remap = |cols: &[usize]| -> Option<Vec<usize>> {
            cols.iter().map(|&c| old_to_new[c]).collect()
        };
        // Other tables' foreign keys on a dropped column: a dependency outside the table.
        let foreign_lost: Vec<&ConstraintDef> = old
            .referenced_by
            .iter()
            .filter(|c| c.table != table)
            .filter(|c| {
                c.foreign_key()
                    .is_some_and(|f| remap(&f.ref_columns).is_none())
            })
            .map(|c| c.as_ref())
            .collect();
        if let (Some(first), false) = (foreign_lost.first(), cascade) {
            // Named by the first dropped column a foreign key references.
            let column = first
                .foreign_key()
                .and_then(|f| f.ref_columns.iter().find(|&&c| old_to_new[c].is_none()))
                .map_or("", |&c| old.columns[c].name.as_str());
            // A foreign key depends on the referenced unique index, which depends on
            // the column.
            let deps: Vec<_> = foreign_lost
                .iter()
                .map(|c| {
                    let index = c
                        .foreign_key()
                        .and_then(|f| old.index_on(&f.ref_columns, true))
                        .map_or_else(|| format!("table {table}"), |i| format!("index {}", i.name));
                    (*c, index)
                })
                .collect();
            return Err(super::ddl::foreign_keys_depend(
                &format!("column {column} of table {table}"),
                &deps,
            ));
        }

        // The new definition on a new file.
        let new_rel = self.new_relfile()?;
        let mut nd = (*old).clone();
        nd.relfile = new_rel;
        nd.indexes.clear();
        // (new position, old position) of each kept column, in the new order.
        let mut kept: Vec<(usize, usize)> = old_to_new
            .iter()
            .enumerate()
            .filter_map(|(o, n)| n.map(|n| (n, o)))
            .collect();
        kept.sort_unstable();
        assert!(
            kept.iter().enumerate().all(|(i, &(n, _))| i == n),
            "new column positions must be 0..n"
        );
        nd.columns = kept.iter().map(|&(_, o)| old.columns[o].clone()).collect();
        // Attribute numbers stay with their columns (PostgreSQL keeps a dropped one's
        // number unused).
        nd.attnums = kept.iter().map(|&(_, o)| old.attnum(o)).collect();
        if nd
            .attnums
            .iter()
            .enumerate()
            .all(|(i, &n)| n == i as i16 + 1)
        {
            nd.attnums.clear();
        }
        if !old.defaults.is_empty() {
            nd.defaults = kept
                .iter()
                .map(|&(_, o)| old.defaults.get(o).cloned().flatten())
                .collect();
        }
        change(&mut nd)?;
        let tid = view
            .entry_tid(true, table)
            .ok_or_else(|| Error::UndefinedTable(table.to_string()))?;
        self.catalog_delete(tid)?;
        self.catalog_insert(&catalog::encode_table(&nd))?;
        self.dropped.push(old.relfile);
        inner.pool.set_relation_name(new_rel, table);
        for i in &old.indexes {
            let itid = view
                .entry_tid(false, &i.name)
                .ok_or_else(|| Error::UndefinedTable(i.name.clone()))?;
            self.catalog_delete(itid)?;
            self.dropped.push(i.relfile);
        }
        // Foreign keys: this table's own (renumbered, or gone with their column) and
        // other tables' that reference it (renumbered, or dropped under CASCADE).
        let mut touched: Vec<&ConstraintDef> = old.constraints.iter().map(|c| c.as_ref()).collect();
        touched.extend(
            old.referenced_by
                .iter()
                .filter(|c| c.table != table)
                .map(|c| c.as_ref()),
        );
        for c in touched {
            let ConstraintKind::ForeignKey(fk) = &c.kind else {
                continue;
            };
            // Emptied when a column it uses is dropped: then it goes.
            let mut nf = fk.clone();
            if c.table == table {
                nf.columns = remap(&fk.columns).unwrap_or_default();
            }
            if fk.ref_table == table {
                nf.ref_columns = remap(&fk.ref_columns).unwrap_or_default();
            }
            if nf == *fk {
                continue;
            }
            let ctid = view.constraint_tid(&c.table, &c.name).ok_or_else(|| {
                Error::UndefinedObject(format!("constraint \"{}\" does not exist", c.name))
            })?;
            self.catalog_delete(ctid)?;
            if !nf.columns.is_empty() && !nf.ref_columns.is_empty() {
                let nc = ConstraintDef {
                    kind: ConstraintKind::ForeignKey(nf),
                    ..c.clone()
                };
                self.catalog_insert(&catalog::encode_constraint(&nc))?;
            }
        }
        // CREATE INDEX below takes `ddl_lock` itself.
        drop(ddl);

        self.copy_rows_converted(&old, table, convert)?;
        // The index builds must see the rows just copied.
        self.command_counter_increment();
        for i in &old.indexes {
            if let Some(cols) = remap(&i.columns) {
                self.create_index(table, &i.name, &cols, i.unique, i.primary)?;
            }
        }
        Ok(())
    }

    /// Every row of `old`'s file this transaction sees, converted, into the table's
    /// current (new) file, a batch at a time.
    fn copy_rows_converted(
        &mut self,
        old: &TableDef,
        table: &str,
        convert: &mut dyn FnMut(Vec<Datum>) -> Result<Vec<Datum>>,
    ) -> Result<()> {
        let new_def = self.table_unlocked(table)?;
        let inner = self.inner.clone();
        let rel = inner.rel(old.relfile, old.fillfactor);
        let heap = Heap::new(&inner.pool, &inner.txn, &rel);
        let types = old.types();
        // One view of the old file for the whole copy (the inserts go to the new one),
        // owned here because the inserts borrow the transaction.
        let snap = self.snapshot();
        let own_xids = self.own_xids.clone();
        let viewer = Viewer {
            snapshot: &snap,
            own_xids: &own_xids,
            cid: self.cid,
        };
        let mut raw: Vec<(Tid, Vec<u8>)> = Vec::new();
        let mut batch: Vec<Vec<Datum>> = Vec::new();
        for b in 0..heap.nblocks()? {
            self.check_interrupt()?;
            raw.clear();
            heap.scan_block(b, &viewer, &mut raw)?;
            for (_, bytes) in raw.drain(..) {
                let row = datum::decode_row(&bytes, &types)
                    .map_err(|e| Error::InvalidInput(e.to_string()))?;
                batch.push(convert(row)?);
            }
            if batch.len() >= REWRITE_BATCH_ROWS {
                self.insert_many(&new_def, &batch)?;
                batch.clear();
            }
        }
        if !batch.is_empty() {
            self.insert_many(&new_def, &batch)?;
        }
        Ok(())
    }
}
