//! The extended protocol's per-session plan cache.
//!
//! A statement the client Parse'd is planned once and keeps its plan across Bind /
//! Execute; Bind only supplies parameter values. A plan is the statement's parse, plus,
//! for the single-row shape OLTP clients send most (`SELECT cols FROM t WHERE key = $n
//! [AND ...]` pinning every column of a unique index over integer columns), the
//! resolved table descriptor, index, parameter-to-key mapping and result columns, which
//! [`PointLookup`] executes without going through the general executor.
//!
//! walrus has no plan tree: for every other statement the cached plan is its parse, and
//! binding and access-path choice still happen at each execution inside the executor.
//!
//! Invalidation: a plan records the [`PlanKey`] it was made under — the engine's
//! committed catalog version (bumped by every committed DDL, any session's) and the
//! session's own DDL counter (bumped by each DDL statement it runs and by each rollback,
//! so its own uncommitted DDL, and undoing it, both count). A plan whose key differs
//! from the current one is re-planned before it runs. Invalidation is coarse: any DDL
//! re-plans every cached statement (as a catalog version, not per relation).

use std::collections::HashMap;
use std::ops::Bound;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use sqlparser::ast::{self, BinaryOperator, Expr, SelectItem, SetExpr, Statement, TableFactor};
use walrus_engine::access::datum::{Datum, TypeId};
use walrus_engine::catalog::{DeclaredType, TableDef};
use walrus_engine::engine::Transaction;

use super::parse::Parsed;
use crate::error::SqlResult;
use crate::memory::MemoryBudget;
use crate::names::ident;
use crate::result::{Column, QueryResult};
use crate::settings::PlanCacheStats;

/// Distinct SQL texts whose plans a session keeps (cleared when full).
const PLAN_CACHE_ENTRIES: usize = 256;

/// What a plan is valid for: (committed catalog version, the session's own DDL count).
pub(crate) type PlanKey = (u64, u64);

/// Whether a point lookup was tried for a plan, and what came of it.
#[derive(Clone)]
pub(crate) enum LookupState {
    /// Not yet: made after the plan's first successful run (which gives the result
    /// columns as the general executor describes them).
    Untried,
    /// Not that shape.
    No,
    Ready(Arc<PointLookup>),
}

struct CachedPlan {
    parsed: Arc<Vec<Parsed>>,
    made_under: PlanKey,
    lookup: LookupState,
}

#[derive(Default)]
pub(crate) struct PlanCache {
    entries: HashMap<String, CachedPlan>,
    pub(crate) stats: Arc<PlanCacheStats>,
}

impl PlanCache {
    /// The parse of `sql` (cached; a parse never depends on the catalog), for the
    /// protocol's checks and Describe. Counts a plan when the text is new.
    pub(crate) fn parsed(
        &mut self,
        sql: &str,
        key: PlanKey,
        parse: impl FnOnce(&str) -> SqlResult<Vec<Parsed>>,
    ) -> SqlResult<Arc<Vec<Parsed>>> {
        if let Some(p) = self.entries.get(sql) {
            return Ok(p.parsed.clone());
        }
        let parsed = Arc::new(parse(sql)?);
        if self.entries.len() >= PLAN_CACHE_ENTRIES {
            self.entries.clear();
        }
        self.stats.plans.fetch_add(1, Ordering::Relaxed);
        self.entries.insert(
            sql.to_string(),
            CachedPlan {
                parsed: parsed.clone(),
                made_under: key,
                lookup: LookupState::Untried,
            },
        );
        Ok(parsed)
    }

    /// The plan of `sql` for an execution under `key`: reused when it was made under
    /// the same key, else re-planned (a stale point lookup is dropped).
    pub(crate) fn plan(
        &mut self,
        sql: &str,
        key: PlanKey,
        parse: impl FnOnce(&str) -> SqlResult<Vec<Parsed>>,
    ) -> SqlResult<(Arc<Vec<Parsed>>, LookupState)> {
        if let Some(entry) = self.entries.get_mut(sql) {
            if entry.made_under == key {
                self.stats.hits.fetch_add(1, Ordering::Relaxed);
            } else {
                self.stats.invalidations.fetch_add(1, Ordering::Relaxed);
                self.stats.plans.fetch_add(1, Ordering::Relaxed);
                entry.made_under = key;
                entry.lookup = LookupState::Untried;
            }
            return Ok((entry.parsed.clone(), entry.lookup.clone()));
        }
        // New text: planned (and counted) by `parsed`.
        Ok((self.parsed(sql, key, parse)?, LookupState::Untried))
    }

    /// Records what the point-lookup attempt for `sql`'s plan made under `key` gave.
    pub(crate) fn set_lookup(&mut self, sql: &str, key: PlanKey, lookup: LookupState) {
        if let Some(e) = self.entries.get_mut(sql).filter(|e| e.made_under == key) {
            e.lookup = lookup;
        }
    }
}

/// `SELECT cols FROM t WHERE k1 = $a AND k2 = $b ...` whose equalities pin exactly the
/// columns of one unique index of `t`, all integer columns: at most one row, read
/// through the index with the parameters as the key.
pub(crate) struct PointLookup {
    table: Arc<TableDef>,
    /// Position of the index in `table.indexes`.
    index: usize,
    /// For each index column in order: the table column and the 0-based parameter.
    key: Vec<(usize, usize)>,
    /// The table column of each output column.
    projection: Vec<usize>,
    /// The result columns as the general executor described them at the first run.
    columns: Vec<Column>,
}

/// The table name, and the (qualifier, column) of each output and `(column, parameter)`
/// of each equality, of a statement of the point-lookup shape.
pub(crate) struct LookupShape {
    pub(crate) table: String,
    outputs: Vec<(Option<String>, String)>,
    equalities: Vec<(Option<String>, String, usize)>,
    qualifier: String,
}

fn placeholder(e: &Expr) -> Option<usize> {
    match e {
        Expr::Value(v) => match &v.value {
            ast::Value::Placeholder(p) => p
                .strip_prefix('$')?
                .parse::<usize>()
                .ok()
                .filter(|&n| n >= 1)
                .map(|n| n - 1),
            _ => None,
        },
        _ => None,
    }
}

fn column_ref(e: &Expr) -> Option<(Option<String>, String)> {
    match e {
        Expr::Identifier(i) => Some((None, ident(i))),
        Expr::CompoundIdentifier(ids) => match ids.as_slice() {
            [q, c] => Some((Some(ident(q)), ident(c))),
            _ => None,
        },
        _ => None,
    }
}

fn equalities(e: &Expr, out: &mut Vec<(Option<String>, String, usize)>) -> Option<()> {
    match e {
        Expr::BinaryOp {
            left,
            op: BinaryOperator::And,
            right,
        } => {
            equalities(left, out)?;
            equalities(right, out)
        }
        Expr::BinaryOp {
            left,
            op: BinaryOperator::Eq,
            right,
        } => {
            let ((q, c), p) = match (column_ref(left), placeholder(right)) {
                (Some(col), Some(p)) => (col, p),
                _ => (column_ref(right)?, placeholder(left)?),
            };
            out.push((q, c, p));
            Some(())
        }
        _ => None,
    }
}

/// The point-lookup shape of a parse, if it has it. Every field of the query, SELECT
/// and table reference is named: anything set beyond the plain shape disqualifies it.
pub(crate) fn lookup_shape(parsed: &[Parsed]) -> Option<LookupShape> {
    let [Parsed::Sql(st)] = parsed else {
        return None;
    };
    let Statement::Query(q) = st.as_ref() else {
        return None;
    };
    let ast::Query {
        with,
        body,
        order_by,
        limit_clause,
        fetch,
        locks,
        for_clause,
        settings,
        format_clause,
        pipe_operators,
    } = q.as_ref();
    if with.is_some()
        || order_by.is_some()
        || limit_clause.is_some()
        || fetch.is_some()
        || !locks.is_empty()
        || for_clause.is_some()
        || settings.is_some()
        || format_clause.is_some()
        || !pipe_operators.is_empty()
    {
        return None;
    }
    let SetExpr::Select(sel) = body.as_ref() else {
        return None;
    };
    let ast::Select {
        select_token: _,
        optimizer_hints,
        distinct,
        select_modifiers,
        top,
        top_before_distinct: _,
        projection,
        exclude,
        into,
        from,
        lateral_views,
        prewhere,
        selection,
        connect_by,
        group_by,
        cluster_by,
        distribute_by,
        sort_by,
        having,
        named_window,
        qualify,
        window_before_qualify: _,
        value_table_mode,
        flavor: _,
    } = sel.as_ref();
    let no_grouping = match group_by {
        ast::GroupByExpr::Expressions(g, m) => g.is_empty() && m.is_empty(),
        ast::GroupByExpr::All(_) => false,
    };
    if !optimizer_hints.is_empty()
        || distinct.is_some()
        || select_modifiers.is_some()
        || top.is_some()
        || exclude.is_some()
        || into.is_some()
        || !lateral_views.is_empty()
        || prewhere.is_some()
        || !connect_by.is_empty()
        || !no_grouping
        || !cluster_by.is_empty()
        || !distribute_by.is_empty()
        || !sort_by.is_empty()
        || having.is_some()
        || !named_window.is_empty()
        || qualify.is_some()
        || value_table_mode.is_some()
    {
        return None;
    }
    let [twj] = from.as_slice() else {
        return None;
    };
    if !twj.joins.is_empty() {
        return None;
    }
    let TableFactor::Table { name, alias, .. } = &twj.relation else {
        return None;
    };
    if crate::names::table_has_extras(&twj.relation)
        || alias.as_ref().is_some_and(|a| !a.columns.is_empty())
    {
        return None;
    }
    // An unqualified name only: pg_catalog's views are searched first, and those are
    // never point lookups.
    let [part] = name.0.as_slice() else {
        return None;
    };
    let table = ident(part.as_ident()?);
    if crate::catalog_views::is_virtual(None, &table) {
        return None;
    }
    let qualifier = alias
        .as_ref()
        .map(|a| ident(&a.name))
        .unwrap_or_else(|| table.clone());
    let mut outputs = Vec::with_capacity(projection.len());
    for item in projection {
        match item {
            SelectItem::UnnamedExpr(e) => outputs.push(column_ref(e)?),
            _ => return None,
        }
    }
    let mut eqs = Vec::new();
    equalities(selection.as_ref()?, &mut eqs)?;
    Some(LookupShape {
        table,
        outputs,
        equalities: eqs,
        qualifier,
    })
}

impl LookupShape {
    /// The point lookup over `table` (the descriptor the plan's first run used) with the
    /// `columns` that run described, if the shape fits the table exactly.
    pub(crate) fn resolve(
        &self,
        table: Arc<TableDef>,
        columns: Vec<Column>,
    ) -> Option<PointLookup> {
        let column = |q: &Option<String>, c: &str| -> Option<usize> {
            if q.as_ref().is_some_and(|q| *q != self.qualifier) {
                return None;
            }
            table.column_index(c)
        };
        let mut projection = Vec::with_capacity(self.outputs.len());
        for (q, c) in &self.outputs {
            let i = column(q, c)?;
            // char(n) values have padding rules of their own: left to the executor.
            if table.columns[i].declared == DeclaredType::Char {
                return None;
            }
            projection.push(i);
        }
        if columns.len() != projection.len() {
            return None;
        }
        let mut pinned: Vec<(usize, usize)> = Vec::new();
        for (q, c, p) in &self.equalities {
            let i = column(q, c)?;
            if !matches!(
                table.columns[i].ty,
                TypeId::Int2 | TypeId::Int4 | TypeId::Int8
            ) || pinned.iter().any(|(pc, _)| *pc == i)
            {
                return None;
            }
            pinned.push((i, *p));
        }
        // The equalities must be exactly a unique index's columns: then the index key
        // equality is the whole WHERE clause.
        let index = table.indexes.iter().position(|ix| {
            ix.unique
                && ix.columns.len() == pinned.len()
                && ix
                    .columns
                    .iter()
                    .all(|c| pinned.iter().any(|(pc, _)| pc == c))
        })?;
        let key = table.indexes[index]
            .columns
            .iter()
            .map(|c| pinned.iter().find(|(pc, _)| pc == c).copied())
            .collect::<Option<_>>()?;
        Some(PointLookup {
            table,
            index,
            key,
            projection,
            columns,
        })
    }
}

impl PointLookup {
    /// Runs the lookup with `params`. `None`: a parameter this path does not compare
    /// (of another type, or text that is not an integer's canonical spelling): the
    /// general executor then runs the statement.
    pub(crate) fn run(
        &self,
        txn: &mut Transaction,
        params: &[Datum],
        memory: &MemoryBudget,
    ) -> Option<SqlResult<QueryResult>> {
        let mut key = Vec::with_capacity(self.key.len());
        let mut matches_nothing = false;
        for &(col, p) in &self.key {
            match params.get(p)? {
                // `col = NULL` is never true.
                Datum::Null => matches_nothing = true,
                v @ (Datum::Int2(_) | Datum::Int4(_) | Datum::Int8(_)) => {
                    match crate::expr::coerce(v.clone(), self.table.columns[col].ty) {
                        Ok(k) => key.push(k),
                        // Out of the column's range: equal to no value of it (as the
                        // executor's access path decides too).
                        Err(_) => matches_nothing = true,
                    }
                }
                // A parameter the client left untyped arrives as text (pgbench's
                // `-M prepared`). Only an integer's canonical spelling is taken as its
                // value, which no reading of the comparison can take differently;
                // anything else is left to the executor.
                Datum::Text(t) => {
                    let canonical = t
                        .parse::<i64>()
                        .ok()
                        .filter(|n| n.to_string() == *t)
                        .map(Datum::Int8)?;
                    match crate::expr::coerce(canonical, self.table.columns[col].ty) {
                        Ok(k) => key.push(k),
                        Err(_) => return None,
                    }
                }
                _ => return None,
            }
        }
        let mut rows = Vec::new();
        if !matches_nothing {
            let index = &self.table.indexes[self.index];
            let found = match txn.index_scan(
                &self.table,
                index,
                Bound::Included(&key),
                Bound::Included(&key),
            ) {
                Ok(f) => f,
                Err(e) => return Some(Err(e.into())),
            };
            for (_, row) in found {
                // The row as read must still hold the key (the WHERE clause).
                if self
                    .key
                    .iter()
                    .zip(&key)
                    .any(|(&(col, _), k)| row.get(col) != Some(k))
                {
                    continue;
                }
                let out: Vec<Datum> = self.projection.iter().map(|&c| row[c].clone()).collect();
                if let Err(e) = memory.charge_row(&out) {
                    return Some(Err(e));
                }
                rows.push(out);
            }
        }
        Some(Ok(QueryResult {
            tag_only: false,
            tag: format!("SELECT {}", rows.len()),
            columns: self.columns.clone(),
            rows,
        }))
    }
}
