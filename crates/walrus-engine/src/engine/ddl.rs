//! The catalog as a transaction sees it, and DDL: CREATE TABLE, CREATE INDEX (built in
//! bulk from the visible rows), DROP TABLE, TRUNCATE. The catalog is rows in the
//! catalog relation written by the transaction like any others (`catalog/`); committed
//! views are cached until the next DDL commits. DDL runs one at a time under
//! `ddl_lock`, after the table hold that keeps writers and vacuum away
//! (`Transaction::lock_for_ddl`).

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use walrus_base::{RelFileId, Tid};

use super::table_locks::LockMode;
use super::{Engine, Isolation, Transaction};
use crate::access::btree::{BTree, BuildEntries};
use crate::access::datum::{self, encode_key, Datum};
use crate::access::heap::tuple::Viewer;
use crate::access::heap::{Heap, Modify};
use crate::catalog::{self, CatalogView, ColumnDef, IndexDef, TableDef, CATALOG_RELFILE};
use crate::error::{Error, Result};
use crate::xlog;

/// 2BP01 for dropping `what` ("table t", "column c of table t"), on which other
/// tables' foreign keys depend, each through the object named beside it ("table t",
/// "index t_c_key"), in PostgreSQL's words.
pub(super) fn foreign_keys_depend(what: &str, deps: &[(&catalog::ConstraintDef, String)]) -> Error {
    Error::HasDependents {
        message: format!("cannot drop {what} because other objects depend on it"),
        detail: deps
            .iter()
            .map(|(c, on)| format!("constraint {} on table {} depends on {on}", c.name, c.table))
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

impl Engine {
    /// The sessions connected to this engine (`pg_stat_activity`).
    pub fn backends(&self) -> &Arc<super::Backends> {
        &self.inner.backends
    }

    /// Every table lock granted or awaited now (`pg_locks`).
    pub fn table_locks(&self) -> Vec<super::TableLockInfo> {
        self.inner.table_locks.snapshot()
    }

    /// A number that changes whenever DDL commits (a cache of anything derived from the
    /// committed catalog, such as a session's prepared plans, is stale once it moved).
    pub fn catalog_version(&self) -> u64 {
        self.inner.catalog_version.load(Ordering::Acquire)
    }

    /// The committed catalog (cached until the next DDL commits).
    pub fn catalog_view(&self) -> Result<Arc<CatalogView>> {
        let mut t = self.begin(Isolation::ReadCommitted);
        let v = t.catalog()?;
        t.rollback()?;
        Ok(v)
    }

    /// How often the catalog relation was read (every other catalog lookup is served
    /// from a cache), and its size in pages: what the relation cache and the catalog's
    /// vacuum keep small.
    pub fn catalog_stats(&self) -> Result<(u64, u32)> {
        let rel = self.inner.rel(CATALOG_RELFILE, 100);
        let pages = Heap::new(&self.inner.pool, &self.inner.txn, &rel).nblocks()?;
        Ok((self.inner.catalog_reads.load(Ordering::Relaxed), pages))
    }

    /// [`Engine::catalog_view`] read from the catalog relation with a snapshot taken
    /// now, never from the cache.
    pub(crate) fn catalog_view_uncached(&self) -> Result<Arc<CatalogView>> {
        let mut t = self.begin(Isolation::ReadCommitted);
        let v = t.read_catalog()?;
        t.rollback()?;
        Ok(v)
    }
}

/// Helper threads a CREATE INDEX over a large table asks for (PostgreSQL's default
/// `max_parallel_maintenance_workers`), within the process-wide helper limit.
const INDEX_BUILD_HELPERS: usize = 2;

/// Tables smaller than this (8 MB, PostgreSQL's `min_parallel_table_scan_size`) are read
/// by the building session alone.
const PARALLEL_BUILD_MIN_BLOCKS: u32 = 1024;

/// Blocks a build participant claims at a time (1 MiB).
const BUILD_RUN_BLOCKS: u32 = 128;

impl Transaction {
    /// Whether this transaction has changed the catalog (run DDL): rolling it back
    /// then undoes catalog changes its session may have cached plans over.
    pub fn changed_catalog(&self) -> bool {
        self.catalog_changed
    }

    /// The catalog as this transaction sees it: the shared committed view, or, once it
    /// has run DDL, its own view — both cached, so no statement reads the catalog
    /// relation unless DDL committed or this transaction changed the catalog since.
    pub fn catalog(&mut self) -> Result<Arc<CatalogView>> {
        if !self.catalog_changed {
            if let Some(v) = self.inner.catalog_cache.read().clone() {
                return Ok(v);
            }
        } else if let Some((version, v)) = &self.own_catalog {
            if *version == self.inner.catalog_version.load(Ordering::Acquire) {
                return Ok(v.clone());
            }
        }
        self.read_catalog()
    }

    /// The catalog read now, past the shared cache: a DDL transaction leaves the
    /// proc array before it clears the cache, so a cached view can briefly miss a
    /// table whose xid is already below the global xmin (the freeze pass's cutoff).
    pub(crate) fn read_catalog(&mut self) -> Result<Arc<CatalogView>> {
        self.inner.catalog_reads.fetch_add(1, Ordering::Relaxed);
        let version = self.inner.catalog_version.load(Ordering::Acquire);
        let snap = if self.catalog_changed {
            self.snapshot()
        } else {
            self.inner.txn.snapshot(self.proc)
        };
        let viewer = Viewer {
            snapshot: &snap,
            own_xids: &self.own_xids,
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
        if self.catalog_changed {
            // Tagged with the version read before the snapshot: a DDL commit that the
            // snapshot missed bumps the version after it leaves the proc array, so the
            // view is re-read at the next use.
            self.own_catalog = Some((version, view.clone()));
        } else if self.inner.catalog_version.load(Ordering::Acquire) == version {
            *self.inner.catalog_cache.write() = Some(view.clone());
        }
        Ok(view)
    }

    /// The table's definition, read under an AccessShare lock on it (taken now if
    /// this transaction holds no lock on it yet, held until it ends): resolving a
    /// name locks the table, as PostgreSQL's does, so a TRUNCATE, DROP or ALTER TABLE
    /// that commits while this waits shows in the definition returned, and none can
    /// change it afterwards until this transaction ends.
    pub fn table(&mut self, name: &str) -> Result<Arc<TableDef>> {
        self.resolve_locked(name, LockMode::AccessShare, false, true)
    }

    /// The table's definition without taking a lock (the caller holds one, or checks
    /// what it read under the lock it takes next).
    pub(super) fn table_unlocked(&mut self, name: &str) -> Result<Arc<TableDef>> {
        self.catalog()?.table(name)
    }

    pub(super) fn new_relfile(&mut self) -> Result<RelFileId> {
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

    pub(super) fn catalog_insert(&mut self, row: &[u8]) -> Result<Tid> {
        let xid = self.mark_write();
        self.catalog_changed = true;
        self.own_catalog = None;
        let rel = self.inner.rel(CATALOG_RELFILE, 100);
        let tid = Heap::new(&self.inner.pool, &self.inner.txn, &rel).insert(xid, self.cid, row)?;
        // Counted like any table's rows, so autovacuum reclaims the catalog's dead rows.
        self.activity_of(&rel).inserted += 1;
        Ok(tid)
    }

    pub(super) fn catalog_delete(&mut self, tid: Tid) -> Result<()> {
        let xid = self.mark_write();
        self.catalog_changed = true;
        self.own_catalog = None;
        let rel = self.inner.rel(CATALOG_RELFILE, 100);
        match Heap::new(&self.inner.pool, &self.inner.txn, &rel).delete(tid, xid, self.cid)? {
            Modify::Done(_) => {
                self.activity_of(&rel).deleted += 1;
                Ok(())
            }
            Modify::SelfModified => Ok(()),
            _ => Err(Error::SerializationFailure),
        }
    }

    pub fn create_table(
        &mut self,
        name: &str,
        columns: Vec<ColumnDef>,
        fillfactor: u8,
    ) -> Result<Arc<TableDef>> {
        self.create_table_with_defaults(name, columns, Vec::new(), fillfactor)
    }

    /// CREATE TABLE whose columns may have defaults (`defaults[i]` for column `i`;
    /// shorter than the columns, or empty, when the rest have none).
    pub fn create_table_with_defaults(
        &mut self,
        name: &str,
        columns: Vec<ColumnDef>,
        mut defaults: Vec<Option<catalog::ColumnDefault>>,
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
        if view.relation_exists(name) {
            return Err(Error::DuplicateTable(name.to_string()));
        }
        if defaults.iter().all(Option::is_none) {
            defaults.clear();
        } else {
            defaults.resize(columns.len(), None);
        }
        let relfile = self.new_relfile()?;
        let def = TableDef {
            name: name.to_string(),
            relfile,
            columns,
            fillfactor: fillfactor.clamp(10, 100),
            indexes: vec![],
            defaults,
            constraints: vec![],
            referenced_by: vec![],
            attnums: vec![],
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
        // CREATE INDEX waits for writers, not readers; ADD PRIMARY KEY is ALTER TABLE.
        let mode = if primary {
            LockMode::AccessExclusive
        } else {
            LockMode::Share
        };
        let (_ddl, view, def) = self.lock_for_ddl(&inner, table, mode)?;
        if view.relation_exists(name) {
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
        // PostgreSQL's CREATE INDEX; primary key columns must not be NULL. Each row is
        // read where it lies on its page and only its key columns are decoded; the
        // entries go into one buffer (no allocation per row).
        let rel = inner.rel(def.relfile, def.fillfactor);
        let heap = Heap::new(&inner.pool, &inner.txn, &rel);
        let snap = self.snapshot();
        let viewer = Viewer {
            snapshot: &snap,
            own_xids: &self.own_xids,
            cid: self.cid,
        };
        let types = def.types();
        let nblocks = heap.nblocks()?;
        // A large table is read by the session and up to `INDEX_BUILD_HELPERS` helper
        // threads (PostgreSQL's parallel B-tree build), each claiming runs of blocks and
        // reading them through its own ring (so the pool keeps its working set and the
        // index pages the build is writing). Each run's entries are kept apart and put
        // back in block order, so a table loaded in key order needs no sort.
        let helpers = if nblocks >= PARALLEL_BUILD_MIN_BLOCKS {
            INDEX_BUILD_HELPERS
        } else {
            0
        };
        let next_block = AtomicU32::new(0);
        let stop = AtomicBool::new(false);
        // Rows whose key holds a NULL: no duplicates of anything in a unique index.
        let null_keys = parking_lot::Mutex::new(std::collections::HashSet::new());
        let participate = || -> Result<Vec<(u32, BuildEntries)>> {
            let mut runs = Vec::new();
            let mut keyvals: Vec<Datum> = Vec::with_capacity(columns.len());
            let mut ring = inner.pool.ring_for_scan(nblocks);
            while !stop.load(Ordering::Relaxed) {
                let first = next_block.fetch_add(BUILD_RUN_BLOCKS, Ordering::Relaxed);
                if first >= nblocks {
                    break;
                }
                let mut run = BuildEntries::default();
                for b in first..nblocks.min(first + BUILD_RUN_BLOCKS) {
                    heap.for_each_root_row(b, &viewer, ring.as_mut(), |tid, row| {
                        keyvals.clear();
                        for &c in columns {
                            keyvals.push(
                                datum::decode_column(row, &types, c)
                                    .map_err(|e| Error::InvalidInput(e.to_string()))?,
                            );
                        }
                        if keyvals.iter().any(|d| d.is_null()) {
                            if primary {
                                return Err(Error::InvalidInput(format!(
                                    "column \"{}\" of relation \"{table}\" contains null values",
                                    def.columns[columns[0]].name
                                )));
                            }
                            if unique {
                                null_keys.lock().insert(tid);
                            }
                        }
                        run.push_with(tid, |out| encode_key(&keyvals, out));
                        Ok(())
                    })?;
                }
                runs.push((first, run));
            }
            Ok(runs)
        };
        let mut runs: Vec<(u32, BuildEntries)> = if helpers == 0 {
            participate()?
        } else {
            super::scan::run_participants(helpers, &stop, participate)?
                .into_iter()
                .flatten()
                .collect()
        };
        runs.sort_unstable_by_key(|(first, _)| *first);
        let mut entries = BuildEntries::default();
        for (_, run) in runs {
            entries.append(run);
        }
        entries.sort();
        let tree = BTree::open(&inner.pool, relfile, unique, name);
        let null_keys = null_keys.into_inner();
        tree.bulk_build_entries_with_nulls(&entries, xid, &|tid| null_keys.contains(&tid))?;
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
                    constraints: nd.constraints.clone(),
                    referenced_by: nd.referenced_by.clone(),
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

    /// ALTER TABLE forms that change only the table's catalog row (defaults, NOT NULL,
    /// column names): `change` edits a copy of the definition under the table's DDL
    /// hold. The columns in `check_not_null` are first checked against every row that
    /// may still be live, as CREATE INDEX reads them (SET NOT NULL: 23502).
    pub fn alter_table_def(
        &mut self,
        table: &str,
        check_not_null: &[usize],
        change: impl FnOnce(&mut TableDef) -> Result<()>,
    ) -> Result<()> {
        let table_name = table.to_string();
        let not_null = |def: &TableDef, c: usize, v: &Datum| {
            if v.is_null() {
                return Err(Error::Rejected {
                    message: format!(
                        "column \"{}\" of relation \"{table_name}\" contains null values",
                        def.columns[c].name
                    ),
                    sqlstate: "23502",
                });
            }
            Ok(())
        };
        self.alter_table_def_checked(table, check_not_null, &not_null, change)
    }

    /// [`Transaction::alter_table_def`] with any check of the values of `columns` in
    /// every row that may still be live (ALTER COLUMN TYPE to a narrower modifier).
    pub fn alter_table_def_checked(
        &mut self,
        table: &str,
        columns: &[usize],
        check: &dyn Fn(&TableDef, usize, &Datum) -> Result<()>,
        change: impl FnOnce(&mut TableDef) -> Result<()>,
    ) -> Result<()> {
        self.before_write()?;
        let inner = self.inner.clone();
        let (_ddl, view, def) = self.lock_for_ddl(&inner, table, LockMode::AccessExclusive)?;
        if !columns.is_empty() {
            let rel = inner.rel(def.relfile, def.fillfactor);
            let heap = Heap::new(&inner.pool, &inner.txn, &rel);
            let snap = self.snapshot();
            let viewer = Viewer {
                snapshot: &snap,
                own_xids: &self.own_xids,
                cid: self.cid,
            };
            let types = def.types();
            for b in 0..heap.nblocks()? {
                heap.for_each_root_row(b, &viewer, None, |_, row| {
                    for &c in columns {
                        let v = datum::decode_column(row, &types, c)
                            .map_err(|e| Error::InvalidInput(e.to_string()))?;
                        check(&def, c, &v)?;
                    }
                    Ok(())
                })?;
            }
        }
        let mut nd = (*def).clone();
        change(&mut nd)?;
        nd.indexes.clear();
        let tid = view
            .entry_tid(true, table)
            .ok_or_else(|| Error::UndefinedTable(table.to_string()))?;
        self.catalog_delete(tid)?;
        self.catalog_insert(&catalog::encode_table(&nd))?;
        Ok(())
    }

    /// CHECK / FOREIGN KEY: a catalog row of its own. The table is held as for DDL
    /// (its writers finish first, later ones wait), and so is a foreign key's
    /// referenced table; the caller has checked the existing rows against it under
    /// the same holds (it calls this first, then validates in the same transaction).
    pub fn add_constraint(&mut self, c: &catalog::ConstraintDef) -> Result<()> {
        self.before_write()?;
        let inner = self.inner.clone();
        if let Some(fk) = c.foreign_key() {
            if fk.ref_table != c.table {
                drop(self.lock_for_ddl(&inner, &fk.ref_table, LockMode::ShareRowExclusive)?);
            }
        }
        let mode = if c.foreign_key().is_some() {
            LockMode::ShareRowExclusive
        } else {
            LockMode::AccessExclusive
        };
        let (_ddl, view, def) = self.lock_for_ddl(&inner, &c.table, mode)?;
        if def.constraints.iter().any(|x| x.name == c.name)
            || def.indexes.iter().any(|i| i.name == c.name)
        {
            return Err(Error::DuplicateObject(format!(
                "constraint \"{}\" for relation \"{}\" already exists",
                c.name, c.table
            )));
        }
        if let Some(fk) = c.foreign_key() {
            let parent = view.table(&fk.ref_table)?;
            let in_range = |cols: &[usize], n: usize| cols.iter().all(|&i| i < n);
            if fk.columns.len() != fk.ref_columns.len()
                || !in_range(&fk.columns, def.columns.len())
                || !in_range(&fk.ref_columns, parent.columns.len())
            {
                return Err(Error::InvalidInput(format!(
                    "foreign key \"{}\" has mismatched columns",
                    c.name
                )));
            }
        }
        self.catalog_insert(&catalog::encode_constraint(c))?;
        Ok(())
    }

    /// `ALTER TABLE name RENAME TO new_name`: every catalog row that names the table
    /// is rewritten under its AccessExclusive lock — the table's, its indexes', its
    /// constraints' and the foreign keys of other tables that reference it, its
    /// statistics, and the sequences its columns own. No file changes.
    pub fn rename_table(&mut self, name: &str, new_name: &str) -> Result<()> {
        self.before_write()?;
        let inner = self.inner.clone();
        let (_ddl, view, def) = self.lock_for_ddl(&inner, name, LockMode::AccessExclusive)?;
        if view.relation_exists(new_name) {
            return Err(Error::DuplicateTable(new_name.to_string()));
        }
        let tid = view
            .entry_tid(true, name)
            .ok_or_else(|| Error::UndefinedTable(name.to_string()))?;
        self.catalog_delete(tid)?;
        let mut nd = (*def).clone();
        nd.name = new_name.to_string();
        nd.indexes.clear();
        self.catalog_insert(&catalog::encode_table(&nd))?;
        for i in &def.indexes {
            let itid = view
                .entry_tid(false, &i.name)
                .ok_or_else(|| Error::UndefinedTable(i.name.clone()))?;
            self.catalog_delete(itid)?;
            let mut ni = i.clone();
            ni.table = new_name.to_string();
            self.catalog_insert(&catalog::encode_index(&ni))?;
        }
        let mut constraints: Vec<&catalog::ConstraintDef> =
            def.constraints.iter().map(|c| c.as_ref()).collect();
        constraints.extend(
            def.referenced_by
                .iter()
                .filter(|c| c.table != name)
                .map(|c| c.as_ref()),
        );
        for c in constraints {
            let ctid = view.constraint_tid(&c.table, &c.name).ok_or_else(|| {
                Error::UndefinedObject(format!("constraint \"{}\" does not exist", c.name))
            })?;
            self.catalog_delete(ctid)?;
            let mut nc = c.clone();
            if nc.table == name {
                nc.table = new_name.to_string();
            }
            if let catalog::ConstraintKind::ForeignKey(fk) = &mut nc.kind {
                if fk.ref_table == name {
                    fk.ref_table = new_name.to_string();
                }
            }
            self.catalog_insert(&catalog::encode_constraint(&nc))?;
        }
        for stid in view.stats_tids(name) {
            let Some(stats) = view.stats_at(stid) else {
                continue;
            };
            self.catalog_delete(stid)?;
            let mut ns = stats.clone();
            ns.table = new_name.to_string();
            self.catalog_insert(&catalog::encode_stats(&ns))?;
        }
        let owned: Vec<_> = view
            .sequences
            .values()
            .filter(|q| q.owned_by.as_ref().is_some_and(|(t, _)| t == name))
            .cloned()
            .collect();
        for q in owned {
            let stid = view
                .sequence_tid(&q.name)
                .ok_or_else(|| Error::UndefinedTable(q.name.clone()))?;
            self.catalog_delete(stid)?;
            let mut nq = (*q).clone();
            if let Some((t, _)) = &mut nq.owned_by {
                *t = new_name.to_string();
            }
            self.catalog_insert(&catalog::encode_sequence(&nq))?;
        }
        inner.pool.set_relation_name(def.relfile, new_name);
        Ok(())
    }

    /// ALTER TABLE ... DROP CONSTRAINT of a CHECK or FOREIGN KEY constraint.
    pub fn drop_constraint(&mut self, table: &str, name: &str) -> Result<()> {
        self.before_write()?;
        let inner = self.inner.clone();
        let (_ddl, view, _def) = self.lock_for_ddl(&inner, table, LockMode::AccessExclusive)?;
        let tid = view.constraint_tid(table, name).ok_or_else(|| {
            Error::UndefinedObject(format!(
                "constraint \"{name}\" of relation \"{table}\" does not exist"
            ))
        })?;
        self.catalog_delete(tid)?;
        Ok(())
    }

    /// DROP TABLE. Its own constraints go with it. Foreign keys of other tables that
    /// reference it are a dependency: refused (2BP01) unless `cascade`, which drops
    /// those constraints (not their tables), as PostgreSQL's DROP ... CASCADE does.
    pub fn drop_table_cascade(&mut self, name: &str, cascade: bool) -> Result<()> {
        let def = self.table(name)?;
        let foreign: Vec<_> = def
            .referenced_by
            .iter()
            .filter(|c| c.table != name)
            .cloned()
            .collect();
        if !foreign.is_empty() && !cascade {
            let what = format!("table {name}");
            let deps: Vec<_> = foreign.iter().map(|c| (c.as_ref(), what.clone())).collect();
            return Err(foreign_keys_depend(&what, &deps));
        }
        for c in &foreign {
            self.drop_constraint(&c.table, &c.name)?;
        }
        self.drop_table(name)
    }

    pub fn drop_table(&mut self, name: &str) -> Result<()> {
        self.before_write()?;
        let inner = self.inner.clone();
        let (_ddl, view, def) = self.lock_for_ddl(&inner, name, LockMode::AccessExclusive)?;
        for c in &def.constraints {
            if let Some(tid) = view.constraint_tid(name, &c.name) {
                self.catalog_delete(tid)?;
            }
        }
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
        for tid in view.stats_tids(name) {
            self.catalog_delete(tid)?;
        }
        self.dropped.push(def.relfile);
        // Sequences OWNED BY the table's columns (serial, identity) go with it.
        for q in view.sequences.values() {
            if q.owned_by.as_ref().is_some_and(|(t, _)| t == name) {
                if let Some(tid) = view.sequence_tid(&q.name) {
                    self.catalog_delete(tid)?;
                    self.dropped.push(q.relfile);
                }
            }
        }
        Ok(())
    }

    /// ANALYZE's result for `table`: replaces its statistics row (see
    /// `catalog::TableStatsEntry`), transactionally like any catalog change. Writers
    /// are not held off (PostgreSQL's ANALYZE takes a lock that allows them): the
    /// statistics are of the rows this transaction saw.
    pub fn set_table_statistics(&mut self, table: &str, data: String) -> Result<()> {
        self.before_write()?;
        let inner = self.inner.clone();
        let _ddl = inner.ddl_lock.lock();
        let view = self.catalog()?;
        let def = view.table(table)?;
        for tid in view.stats_tids(table) {
            self.catalog_delete(tid)?;
        }
        self.catalog_insert(&catalog::encode_stats(&catalog::TableStatsEntry {
            table: table.to_string(),
            relfile: def.relfile,
            data,
        }))?;
        Ok(())
    }

    /// The number of pages of `def`'s heap (`pg_class.relpages`).
    pub fn table_pages(&self, def: &TableDef) -> Result<u32> {
        let rel = self.inner.rel(def.relfile, def.fillfactor);
        Heap::new(&self.inner.pool, &self.inner.txn, &rel).nblocks()
    }

    /// DROP INDEX: the catalog row goes now, the file when the transaction commits. The
    /// index of a primary key cannot be dropped on its own (PostgreSQL: the constraint
    /// needs it).
    pub fn drop_index(&mut self, name: &str) -> Result<()> {
        self.drop_index_of(name, false)
    }

    /// ALTER TABLE ... DROP CONSTRAINT of a primary key: its index goes (its columns
    /// stay NOT NULL, as in PostgreSQL).
    pub fn drop_primary_key(&mut self, _table: &str, name: &str) -> Result<()> {
        self.drop_index_of(name, true)
    }

    fn drop_index_of(&mut self, name: &str, primary_ok: bool) -> Result<()> {
        self.before_write()?;
        let table = self
            .catalog()?
            .tables
            .values()
            .find(|t| t.indexes.iter().any(|i| i.name == name))
            .map(|t| t.name.clone())
            .ok_or_else(|| Error::UndefinedIndex(name.to_string()))?;
        let inner = self.inner.clone();
        let (_ddl, view, def) = self.lock_for_ddl(&inner, &table, LockMode::AccessExclusive)?;
        // Re-read under the hold: the index may have gone meanwhile.
        let idx = def
            .indexes
            .iter()
            .find(|i| i.name == name)
            .ok_or_else(|| Error::UndefinedIndex(name.to_string()))?;
        if idx.primary && !primary_ok {
            return Err(Error::DependentObjects(format!(
                "cannot drop index {name} because constraint {name} on table {table} requires it"
            )));
        }
        let tid = view
            .entry_tid(false, name)
            .ok_or_else(|| Error::UndefinedIndex(name.to_string()))?;
        self.catalog_delete(tid)?;
        self.dropped.push(idx.relfile);
        Ok(())
    }

    /// TRUNCATE: the table and its indexes get new, empty relation files; the old ones
    /// are unlinked when the transaction commits.
    pub fn truncate(&mut self, name: &str) -> Result<()> {
        self.before_write()?;
        let inner = self.inner.clone();
        let (_ddl, view, def) = self.lock_for_ddl(&inner, name, LockMode::AccessExclusive)?;
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
}
