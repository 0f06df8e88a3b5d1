//! The SELECT of one query level: FROM (with the single-table access path), binding,
//! WHERE, grouping and aggregates, the select list, DISTINCT, then ORDER BY and LIMIT.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::ops::ControlFlow;

use sqlparser::ast::{
    self, visit_expressions, Expr, Query, Select, SelectItem, TableFactor, Visit,
};
use walrus_engine::access::datum::{Datum, TypeId};
use walrus_engine::catalog::TableDef;

use super::aggregate::{AggState, StreamCall};
use super::dml::for_each_matching_row;
use super::from::{ProbeJoin, ProbeScratch};
use super::spill::SpillFile;
use super::{row_key, Executor, GroupHooks, KeyMap, KeyPart, OutputRows, StreamHooks};
use crate::error::{SqlError, SqlResult};
use crate::expr::compiled::{Columns, Fast, Prepared};
use crate::memory::row_bytes;
use crate::names::{ident, object_name};
use crate::plan::{
    bind, cast_origin, check_grouped, contains_aggregate, contains_subquery, output_name, rename,
    resolve_group_expr, star_reference, static_type, table_cols,
};
use crate::rel::{col_ref, find_col, ColName, Frame, Rel};

/// The FROM list of one query level as `scan_from` leaves it.
enum FromRows {
    /// Every row read (joins, derived tables, catalog views, several items).
    Read(Rel),
    /// A lone user table: its columns (no rows yet) and how to read it.
    Table(Rel, TableSource),
}

/// A lone user table of the single-table path, read with WHERE applied as it goes;
/// or the left table of an inner equi-join, scanned and joined row by row with its
/// hashed right side (`probe`), WHERE applied to each joined row.
struct TableSource {
    def: std::sync::Arc<TableDef>,
    /// The columns the query level can use (`None`: all).
    wanted: Option<Vec<bool>>,
    probe: Option<Box<ProbeJoin>>,
}

/// Takes one FROM-list row with its position; `false` stops the read.
type RowSink<'a> = dyn FnMut(usize, &[Datum]) -> SqlResult<bool> + 'a;

/// A query level's output items over its FROM columns `cols`, as (output name,
/// expression): wildcards expanded (hidden merged columns left out), unsupported items
/// refused. EXPLAIN resolves GROUP BY positions and aliases against the same list.
pub(super) fn select_items(sel: &Select, cols: &[ColName]) -> SqlResult<Vec<(String, Expr)>> {
    let mut items: Vec<(String, Expr)> = Vec::new();
    for it in &sel.projection {
        match it {
            SelectItem::Wildcard(_) => {
                for (i, c) in cols.iter().enumerate().filter(|(_, c)| !c.hidden) {
                    items.push((c.name.clone(), star_reference(cols, i)));
                }
            }
            SelectItem::QualifiedWildcard(kind, _) => {
                let q = match kind {
                    ast::SelectItemQualifiedWildcardKind::ObjectName(n) => object_name(n),
                    other => {
                        return Err(SqlError::unsupported(format!("{other}.* is not supported")))
                    }
                };
                let before = items.len();
                for (i, c) in cols
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| c.qual.as_deref() == Some(q.as_str()))
                {
                    items.push((c.name.clone(), star_reference(cols, i)));
                }
                if items.len() == before {
                    return Err(SqlError::new(
                        "42P01",
                        format!("missing FROM-clause entry for table \"{q}\""),
                    ));
                }
            }
            SelectItem::UnnamedExpr(e) => items.push((output_name(e), e.clone())),
            SelectItem::ExprWithAlias { expr, alias } => items.push((ident(alias), expr.clone())),
            other => {
                return Err(SqlError::unsupported(format!(
                    "select item {other} is not supported"
                )))
            }
        }
    }
    Ok(items)
}

/// What one group of a streamed aggregation holds, for `work_mem`: its key, its first
/// row, its states (`state_bytes`) and the table entry.
pub(super) fn group_entry_bytes(key: &[KeyPart], row: &[Datum], state_bytes: u64) -> u64 {
    key.iter().map(KeyPart::bytes).sum::<u64>() + 48 + row_bytes(row) + state_bytes
}

/// A streamed aggregation without GROUP BY over no rows still gives one row: its
/// representative row (all NULL) and its states before any row.
fn empty_group(pass: &GroupPass<'_>) -> (Vec<Datum>, Vec<AggState>) {
    (
        vec![Datum::Null; pass.cols.len()],
        pass.calls.iter().map(StreamCall::start).collect(),
    )
}

/// How many partition files a streamed aggregation past `work_mem` spreads rows over.
const GROUP_PARTITIONS: usize = 8;

/// What one streamed-aggregation pass needs besides its rows.
pub(super) struct GroupPass<'a> {
    cols: &'a [ColName],
    outer: Option<&'a Frame<'a>>,
    group_exprs: &'a [Expr],
    calls: &'a [StreamCall],
    having: Option<&'a Expr>,
    items: &'a [(String, Expr)],
    q: &'a Query,
    names: &'a [String],
    work_mem: u64,
    /// The fast forms of `group_exprs` and of each call's argument (`expr::compiled`).
    fast_keys: Vec<Option<Fast>>,
    fast_args: Vec<Option<Fast>>,
}

/// The hash table of one streamed-aggregation pass: groups are added while it stays
/// within `work_mem`; a row of a group not in the full table goes to one of
/// [`GROUP_PARTITIONS`] files by its key's hash, and each file is a pass of its own
/// afterwards (the table's memory given back first).
struct GroupTable {
    /// The budget's mark when the pass began (given back when it ends).
    mark: u64,
    depth: u32,
    /// (position of the first row, that row, one running state per call) per group.
    groups: Vec<(usize, Vec<Datum>, Vec<AggState>)>,
    index: KeyMap<usize>,
    state_bytes: u64,
    table_bytes: u64,
    partitions: Vec<Option<SpillFile>>,
    rows_seen: usize,
    /// The current row's key, built here to look the group up without allocating.
    key: Vec<KeyPart>,
}

impl GroupTable {
    fn new(exec: &Executor<'_>, p: &GroupPass<'_>, depth: u32) -> GroupTable {
        GroupTable {
            mark: exec.memory.used(),
            depth,
            groups: Vec::new(),
            index: KeyMap::default(),
            state_bytes: p.calls.iter().map(|c| c.start().bytes()).sum(),
            table_bytes: 0,
            partitions: Vec::new(),
            rows_seen: 0,
            key: Vec::with_capacity(p.group_exprs.len()),
        }
    }

    /// Adds one row (at position `at` of the FROM list's rows) to its group's states.
    fn add(
        &mut self,
        exec: &Executor<'_>,
        p: &GroupPass<'_>,
        at: usize,
        row: &[Datum],
    ) -> SqlResult<()> {
        self.rows_seen += 1;
        if self.rows_seen % 1024 == 1023 {
            exec.check_interrupt()?;
        }
        let frame = Frame {
            cols: p.cols,
            row,
            outer: p.outer,
        };
        // Aggregates without GROUP BY: one group, no key to hash per row.
        if p.group_exprs.is_empty() && !self.groups.is_empty() {
            let states = &mut self.groups[0].2;
            for ((c, fast), st) in p.calls.iter().zip(&p.fast_args).zip(states.iter_mut()) {
                exec.stream_row(c, fast.as_ref(), st, &frame)?;
            }
            return Ok(());
        }
        let mut key = std::mem::take(&mut self.key);
        key.clear();
        for (g, fast) in p.group_exprs.iter().zip(&p.fast_keys) {
            let v = match fast {
                Some(f) => f.eval(row)?,
                None => None,
            };
            let v = match v {
                Some(v) => v,
                None => exec.eval_in(g, Some(&frame), exec)?,
            };
            super::check_keyable(std::slice::from_ref(&v))?;
            key.push(KeyPart::of(&v));
        }
        let slot = self.group_slot(exec, p, at, row, key)?;
        let Some(slot) = slot else {
            return Ok(());
        };
        let states = &mut self.groups[slot].2;
        for ((c, fast), st) in p.calls.iter().zip(&p.fast_args).zip(states.iter_mut()) {
            exec.stream_row(c, fast.as_ref(), st, &frame)?;
        }
        Ok(())
    }

    /// The slot of `key`'s group, a new one if it fits in `work_mem`, else `None`
    /// after writing the row to its partition file. Gives the key buffer back.
    fn group_slot(
        &mut self,
        exec: &Executor<'_>,
        p: &GroupPass<'_>,
        at: usize,
        row: &[Datum],
        key: Vec<KeyPart>,
    ) -> SqlResult<Option<usize>> {
        if let Some(&slot) = self.index.get(key.as_slice()) {
            self.key = key;
            return Ok(Some(slot));
        }
        // Past this depth the table grows without bound (each pass makes progress, but
        // a pathological hash could keep a partition whole).
        let may_spill = self.depth < 4;
        let bytes = group_entry_bytes(&key, row, self.state_bytes);
        if may_spill && !self.groups.is_empty() && self.table_bytes + bytes > p.work_mem {
            if self.partitions.is_empty() {
                self.partitions.resize_with(GROUP_PARTITIONS, || None);
            }
            let mut h = std::collections::hash_map::DefaultHasher::new();
            self.depth.hash(&mut h);
            key.hash(&mut h);
            let part = &mut self.partitions[(h.finish() % GROUP_PARTITIONS as u64) as usize];
            if part.is_none() {
                *part = Some(SpillFile::create()?);
            }
            let mut spilled = Vec::with_capacity(row.len() + 1);
            spilled.push(Datum::Int8(at as i64));
            spilled.extend_from_slice(row);
            if let Some(f) = part.as_mut() {
                f.write_row(&spilled)?;
            }
            self.key = key;
            return Ok(None);
        }
        exec.memory.charge(bytes)?;
        self.table_bytes += bytes;
        self.groups.push((
            at,
            row.to_vec(),
            p.calls.iter().map(StreamCall::start).collect(),
        ));
        self.key = Vec::with_capacity(key.len());
        self.index.insert(key, self.groups.len() - 1);
        Ok(Some(self.groups.len() - 1))
    }

    /// Adds the finished groups to `done` with the position of their first row, gives
    /// the table's memory back, then runs a pass over each partition file. Returns
    /// whether anything was spilled.
    fn finish(
        self,
        exec: &Executor<'_>,
        p: &GroupPass<'_>,
        done: &mut Vec<(usize, Vec<Datum>, Vec<Datum>)>,
    ) -> SqlResult<bool> {
        let GroupTable {
            mark,
            depth,
            groups,
            index,
            partitions,
            ..
        } = self;
        drop(index);
        for (first, rep, states) in &groups {
            if let Some((keys, out)) = exec.group_output(p, rep, states)? {
                done.push((*first, keys, out));
            }
        }
        drop(groups);
        exec.memory.release_to(mark);
        let spilled = !partitions.is_empty();
        for f in partitions.into_iter().flatten() {
            exec.group_file_pass(p, f, depth + 1, done)?;
        }
        Ok(spilled)
    }
}

/// The output columns of a query level's select list `items` over FROM columns
/// `cols`: a plain column keeps its type and origin, an expression takes its static
/// type, else the type of its first non-NULL value in `rows`.
fn output_cols(items: &[(String, Expr)], cols: &[ColName], rows: &[Vec<Datum>]) -> Vec<ColName> {
    let defs = crate::plan::typed_columns(cols);
    items
        .iter()
        .enumerate()
        .map(|(i, (n, e))| {
            let source = col_ref(e)
                .and_then(|(qual, name)| find_col(cols, qual.as_deref(), &name).ok())
                .flatten()
                .map(|c| &cols[c]);
            let ty = match (col_ref(e), source) {
                (Some(_), Some(c)) => c.ty,
                (Some(_), None) => None,
                (None, _) => static_type(e, &defs),
            };
            ColName {
                qual: None,
                name: n.clone(),
                ty: ty.or_else(|| rows.iter().find_map(|r| r[i].type_id())),
                bpchar: source.is_some_and(|c| c.bpchar),
                hidden: false,
                origin: source
                    .and_then(|c| c.origin)
                    .or_else(|| cast_origin(e))
                    .or_else(|| kept_type_origin(e, cols)),
            }
        })
        .collect()
}

/// The described type of an aggregate or COALESCE over a catalog column walrus keeps
/// under a nearer engine type, as PostgreSQL types it: `max(oid)` is `oid`,
/// `array_agg(typname)` is `name[]`, `coalesce(typname, 'x')` is `name` (`min(typname)`
/// is text, as in PostgreSQL, which has no `name` min).
fn kept_type_origin(e: &Expr, cols: &[ColName]) -> Option<crate::rel::Origin> {
    let Expr::Function(f) = e else {
        return None;
    };
    let args = crate::expr::function_args(f);
    let kept = |a: &Expr| -> Option<u32> {
        let (qual, name) = col_ref(a)?;
        let c = &cols[find_col(cols, qual.as_deref(), &name).ok()??];
        let o = c.origin?;
        (o.table_oid == 0 && matches!(o.type_oid, 18 | 19 | 26 | 28)).then_some(o.type_oid)
    };
    let type_oid = match (crate::expr::function_name(f).as_str(), args.as_slice()) {
        ("max" | "min", [a]) => kept(a).filter(|t| *t == 26)?,
        ("array_agg", [a]) => match kept(a)? {
            26 => 1028,
            19 => 1003,
            18 => 1002,
            _ => 1011,
        },
        ("coalesce", [a, rest @ ..])
            if rest.iter().all(|r| {
                matches!(
                    r,
                    Expr::Value(v) if matches!(
                        v.value,
                        sqlparser::ast::Value::SingleQuotedString(_) | sqlparser::ast::Value::Null
                    )
                )
            }) =>
        {
            kept(a)?
        }
        _ => return None,
    };
    Some(crate::rel::Origin {
        table_oid: 0,
        attnum: 0,
        type_oid,
        typmod: -1,
    })
}

fn items_of(
    exec: &Executor<'_>,
    items: &[(String, Expr)],
    frame: &Frame<'_>,
    hooks: &StreamHooks<'_, '_>,
) -> SqlResult<Vec<Datum>> {
    items
        .iter()
        .map(|(_, e)| exec.eval_in(e, Some(frame), hooks))
        .collect()
}

/// The column names a SELECT over plain tables can use: every name in it (USING lists
/// included), or `None` (decode everything) with a wildcard, a subquery, a NATURAL
/// join, a FROM item other than a plain table, or an alias renaming columns.
fn used_names(sel: &Select, q: &Query) -> Option<HashSet<String>> {
    if sel.projection.iter().any(|i| {
        matches!(
            i,
            SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..)
        )
    }) {
        return None;
    }
    let mut names = HashSet::new();
    for twj in &sel.from {
        let factors = std::iter::once(&twj.relation).chain(twj.joins.iter().map(|j| &j.relation));
        for f in factors {
            match f {
                TableFactor::Table {
                    alias, args: None, ..
                } if alias.as_ref().is_none_or(|a| a.columns.is_empty()) => {}
                _ => return None,
            }
        }
        for j in &twj.joins {
            use ast::JoinOperator as J;
            let c = match &j.join_operator {
                J::Join(c)
                | J::Inner(c)
                | J::Left(c)
                | J::LeftOuter(c)
                | J::Right(c)
                | J::RightOuter(c)
                | J::FullOuter(c)
                | J::CrossJoin(c) => c,
                _ => return None,
            };
            match c {
                ast::JoinConstraint::Using(cols) => {
                    names.extend(cols.iter().map(object_name));
                }
                ast::JoinConstraint::On(_) | ast::JoinConstraint::None => {}
                ast::JoinConstraint::Natural => return None,
            }
        }
    }
    let mut subquery = false;
    let mut look = |e: &Expr| {
        match e {
            Expr::Identifier(i) => {
                names.insert(ident(i));
            }
            Expr::CompoundIdentifier(ids) => {
                if let Some(i) = ids.last() {
                    names.insert(ident(i));
                }
            }
            Expr::Subquery(_) | Expr::Exists { .. } | Expr::InSubquery { .. } => subquery = true,
            Expr::Function(f) if matches!(f.args, ast::FunctionArguments::Subquery(_)) => {
                subquery = true
            }
            _ => {}
        }
        ControlFlow::<()>::Continue(())
    };
    let _ = visit_expressions(sel, &mut look);
    let _ = visit_expressions(&q.order_by, &mut look);
    let _ = visit_expressions(&q.limit_clause, &mut look);
    let _ = visit_expressions(&q.fetch, &mut look);
    (!subquery).then_some(names)
}

/// The columns of the lone table `def` a single-table SELECT can read: every column
/// named anywhere in it (by its last name part, so over-approximated), or `None` (all)
/// when the select list has a wildcard or a subquery is anywhere (it may name columns
/// in ways this does not look for).
fn used_columns(sel: &Select, q: &Query, def: &TableDef) -> Option<Vec<bool>> {
    if sel.projection.iter().any(|i| {
        matches!(
            i,
            SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..)
        )
    }) {
        return None;
    }
    let mut wanted = vec![false; def.columns.len()];
    let complete = mark_used_columns(sel, def, &mut wanted)
        && mark_used_columns(&q.order_by, def, &mut wanted)
        && mark_used_columns(&q.limit_clause, def, &mut wanted)
        && mark_used_columns(&q.fetch, def, &mut wanted);
    complete.then_some(wanted)
}

/// Marks in `wanted` every column of `def` an expression in `node` names (by its last
/// name part, so over-approximated). False when `node` holds a subquery, which may name
/// columns in ways this does not look for: then the marks are not the whole story.
pub(crate) fn mark_used_columns<V: Visit>(node: &V, def: &TableDef, wanted: &mut [bool]) -> bool {
    let mut mark = |name: &str| {
        if let Some(c) = def.column_index(name) {
            wanted[c] = true;
        }
    };
    let mut subquery = false;
    let mut look = |e: &Expr| {
        match e {
            Expr::Identifier(i) => mark(&ident(i)),
            Expr::CompoundIdentifier(ids) => {
                if let Some(i) = ids.last() {
                    mark(&ident(i));
                }
            }
            Expr::Subquery(_) | Expr::Exists { .. } | Expr::InSubquery { .. } => subquery = true,
            Expr::Function(f) if !matches!(f.args, ast::FunctionArguments::Subquery(_)) => {}
            Expr::Function(_) => subquery = true,
            _ => {}
        }
        ControlFlow::<()>::Continue(())
    };
    let _ = visit_expressions(node, &mut look);
    !subquery
}

/// 42712: two FROM items with one name (`from t, t` needs an alias).
fn check_from_names(sel: &Select) -> SqlResult<()> {
    let mut seen: Vec<String> = Vec::new();
    for twj in &sel.from {
        let factors = std::iter::once(&twj.relation).chain(twj.joins.iter().map(|j| &j.relation));
        for f in factors {
            let name = match f {
                TableFactor::Table { name, alias, .. } => Some(
                    alias
                        .as_ref()
                        .map(|a| ident(&a.name))
                        .unwrap_or_else(|| object_name(name)),
                ),
                TableFactor::Derived { alias: Some(a), .. } => Some(ident(&a.name)),
                _ => None,
            };
            if let Some(n) = name {
                if seen.contains(&n) {
                    return Err(SqlError::new(
                        "42712",
                        format!("table name \"{n}\" specified more than once"),
                    ));
                }
                seen.push(n);
            }
        }
    }
    Ok(())
}

/// Refuses the SELECT clauses walrus does not implement, naming them. Every field of
/// sqlparser's `Select` is named: a new one fails to compile until it is decided.
pub(crate) fn check_select(sel: &Select) -> SqlResult<()> {
    let Select {
        select_token: _,
        optimizer_hints,
        distinct: _,
        select_modifiers,
        top,
        top_before_distinct: _,
        projection: _,
        exclude,
        into,
        from: _,
        lateral_views,
        prewhere,
        selection: _,
        connect_by,
        group_by,
        cluster_by,
        distribute_by,
        sort_by,
        having: _,
        named_window,
        qualify,
        window_before_qualify: _,
        value_table_mode,
        flavor,
    } = sel;
    let refuse = |what: &str| Err(SqlError::unsupported(format!("{what} is not supported")));
    if into.is_some() {
        return refuse("SELECT ... INTO");
    }
    if !named_window.is_empty() {
        return refuse("WINDOW clauses (window functions)");
    }
    if qualify.is_some() {
        return refuse("QUALIFY");
    }
    if top.is_some() {
        return refuse("SELECT TOP");
    }
    if !optimizer_hints.is_empty() || select_modifiers.is_some() {
        return refuse("SELECT modifiers and hints");
    }
    if exclude.is_some() {
        return refuse("SELECT * EXCLUDE");
    }
    if !lateral_views.is_empty() {
        return refuse("LATERAL VIEW");
    }
    if prewhere.is_some() {
        return refuse("PREWHERE");
    }
    if !connect_by.is_empty() {
        return refuse("CONNECT BY");
    }
    if !cluster_by.is_empty() || !distribute_by.is_empty() || !sort_by.is_empty() {
        return refuse("CLUSTER BY / DISTRIBUTE BY / SORT BY");
    }
    if value_table_mode.is_some() {
        return refuse("SELECT AS VALUE / STRUCT");
    }
    if !matches!(flavor, ast::SelectFlavor::Standard) {
        return refuse("FROM-first SELECT");
    }
    if let ast::GroupByExpr::Expressions(exprs, modifiers) = group_by {
        if !modifiers.is_empty() {
            return refuse("GROUP BY modifiers (ROLLUP, CUBE, GROUPING SETS, TOTALS)");
        }
        if exprs
            .iter()
            .any(|e| matches!(e, Expr::Rollup(_) | Expr::Cube(_) | Expr::GroupingSets(_)))
        {
            return refuse("GROUP BY ROLLUP, CUBE and GROUPING SETS");
        }
    }
    Ok(())
}

/// Refuses the query-level clauses walrus does not implement (every field named).
pub(crate) fn check_query(q: &Query) -> SqlResult<()> {
    let Query {
        with,
        body: _,
        order_by: _,
        limit_clause: _,
        fetch: _,
        // Row locking clauses: `locking.rs`.
        locks: _,
        for_clause,
        settings,
        format_clause,
        pipe_operators,
    } = q;
    let refuse = |what: &str| Err(SqlError::unsupported(format!("{what} is not supported")));
    if with.is_some() {
        return refuse("WITH queries");
    }
    if for_clause.is_some() {
        return refuse("FOR XML / FOR JSON");
    }
    if settings.is_some() || format_clause.is_some() {
        return refuse("SETTINGS / FORMAT");
    }
    if !pipe_operators.is_empty() {
        return refuse("pipe operators");
    }
    if let Some(ob) = &q.order_by {
        if ob.interpolate.is_some() {
            return refuse("ORDER BY ... INTERPOLATE");
        }
        if let ast::OrderByKind::Expressions(exprs) = &ob.kind {
            for o in exprs {
                if o.with_fill.is_some() {
                    return refuse("ORDER BY ... WITH FILL");
                }
            }
        }
    }
    Ok(())
}

impl Executor<'_> {
    pub(super) fn select(
        &self,
        sel: &Select,
        q: &Query,
        outer: Option<&Frame<'_>>,
    ) -> SqlResult<Rel> {
        check_select(sel)?;
        check_from_names(sel)?;
        let (mut from, source) = match self.scan_from(sel, q, outer)? {
            FromRows::Read(rel) => (rel, None),
            FromRows::Table(rel, src) => (rel, Some(src)),
        };
        // The single-table path applies WHERE as it reads.
        let filtered = source.is_some();
        // Output items.
        let mut items = select_items(sel, &from.cols)?;
        // Window calls become hidden columns, filled after WHERE (window.rs).
        let windows = super::window::extract(&mut items, &mut from.cols)?;
        for w in &windows {
            for e in w.exprs() {
                bind(e, &from.cols, outer, &[])?;
            }
        }
        if !windows.is_empty() {
            let width = from.cols.len();
            from.rows
                .iter_mut()
                .for_each(|r| r.resize(width, Datum::Null));
        }
        let names: Vec<String> = items.iter().map(|(n, _)| n.clone()).collect();
        // Bind every clause before reading a row.
        for (_, e) in &items {
            bind(e, &from.cols, outer, &[])?;
        }
        if let Some(w) = &sel.selection {
            bind(w, &from.cols, outer, &[])?;
            if contains_aggregate(w) {
                return Err(SqlError::new(
                    "42803",
                    "aggregate functions are not allowed in WHERE",
                ));
            }
        }
        let group_exprs: Vec<Expr> = match &sel.group_by {
            ast::GroupByExpr::Expressions(g, _) => g
                .iter()
                .map(|e| resolve_group_expr(e, &items, &from.cols))
                .collect::<SqlResult<_>>()?,
            ast::GroupByExpr::All(_) => {
                return Err(SqlError::unsupported("GROUP BY ALL is not supported"))
            }
        };
        for g in &group_exprs {
            bind(g, &from.cols, outer, &[])?;
        }
        if let Some(h) = &sel.having {
            bind(h, &from.cols, outer, &[])?;
        }
        if let Some(ob) = &q.order_by {
            if let ast::OrderByKind::Expressions(exprs) = &ob.kind {
                for o in exprs {
                    bind(&o.expr, &from.cols, outer, &names)?;
                }
            }
        }
        if matches!(sel.distinct, Some(ast::Distinct::Distinct)) {
            if let Some(ast::OrderByKind::Expressions(exprs)) = q.order_by.as_ref().map(|o| &o.kind)
            {
                for o in exprs {
                    let output = matches!(&o.expr, Expr::Value(_))
                        || matches!(&o.expr, Expr::Identifier(i) if names.contains(&ident(i)))
                        || items.iter().any(|(_, e)| {
                            e == &o.expr || e.to_string().eq_ignore_ascii_case(&o.expr.to_string())
                        });
                    if !output {
                        return Err(SqlError::new(
                            "42P10",
                            "for SELECT DISTINCT, ORDER BY expressions must appear in select list",
                        ));
                    }
                }
            }
        }
        let grouped = !group_exprs.is_empty()
            || sel.having.is_some()
            || items.iter().any(|(_, e)| contains_aggregate(e));
        if grouped && !windows.is_empty() {
            return Err(SqlError::unsupported(
                "window functions in a grouped query are not supported",
            ));
        }
        if grouped {
            let dependent = self.dependent_columns(sel, &group_exprs, &from.cols)?;
            let dep = |i: usize| dependent.contains(&i);
            for (_, e) in &items {
                check_grouped(e, &group_exprs, &from.cols, &dep)?;
            }
            if let Some(h) = &sel.having {
                check_grouped(h, &group_exprs, &from.cols, &dep)?;
            }
            if let Some(ast::OrderByKind::Expressions(exprs)) = q.order_by.as_ref().map(|o| &o.kind)
            {
                for o in exprs {
                    // An output column's name or position refers to an item checked above.
                    let output_ref = matches!(&o.expr, Expr::Value(_))
                        || matches!(&o.expr, Expr::Identifier(i) if names.contains(&ident(i)));
                    if !output_ref && !items.iter().any(|(_, e)| e == &o.expr) {
                        check_grouped(&o.expr, &group_exprs, &from.cols, &dep)?;
                    }
                }
            }
        }
        let cols = &from.cols;
        let distinct = match &sel.distinct {
            None | Some(ast::Distinct::All) => false,
            Some(ast::Distinct::Distinct) => true,
            Some(ast::Distinct::On(_)) => {
                return Err(SqlError::unsupported("SELECT DISTINCT ON is not supported"))
            }
        };
        let streamed = if grouped {
            self.streamable_calls(&items, sel.having.as_ref(), q)
        } else {
            None
        };
        // A lone table is read as the rows are consumed (aggregated, or projected into
        // the output collector) unless something needs every row at once (window
        // functions, aggregates that keep their rows) or may read the database while
        // the scan holds the transaction (a subquery).
        let mut rows = from.rows;
        let stream_source = match source {
            Some(src)
                if windows.is_empty()
                    && (!grouped || streamed.is_some())
                    && self.prepare_streaming(sel, q)? =>
            {
                Some(src)
            }
            Some(src) => {
                rows = self.read_table(&src, sel, cols.len())?;
                None
            }
            None => None,
        };
        // WHERE
        if !filtered {
            if let Some(w) = &sel.selection {
                let mut kept = Vec::with_capacity(rows.len());
                for (i, row) in rows.into_iter().enumerate() {
                    if i % 1024 == 1023 {
                        self.check_interrupt()?;
                    }
                    let frame = Frame {
                        cols: &from.cols,
                        row: &row,
                        outer,
                    };
                    if crate::expr::holds("WHERE", w, self.eval_in(w, Some(&frame), self)?)? {
                        kept.push(row);
                    }
                }
                rows = kept;
            }
        }
        if !windows.is_empty() {
            super::window::fill(self, &windows, &from.cols, &mut rows, outer)?;
        }
        let mut output = self.output_rows(q, distinct, outer)?;
        if let Some(calls) = streamed {
            let pass = GroupPass {
                cols,
                outer,
                group_exprs: &group_exprs,
                calls: &calls,
                having: sel.having.as_ref(),
                items: &items,
                q,
                names: &names,
                work_mem: self.work_mem(),
                fast_keys: group_exprs
                    .iter()
                    .map(|g| Fast::compile(g, &Columns::Frame(cols), self.params))
                    .collect(),
                fast_args: calls
                    .iter()
                    .map(|c| {
                        c.arg()
                            .and_then(|a| Fast::compile(a, &Columns::Frame(cols), self.params))
                    })
                    .collect(),
            };
            match &stream_source {
                Some(src) if self.parallel_aggregate(src, sel, &pass, &mut output)? => {}
                Some(src) => {
                    let mut at = 0usize;
                    self.stream_groups(
                        &pass,
                        &mut |sink| {
                            self.read_table_with(src, sel, &mut |row| {
                                at += 1;
                                sink(at - 1, row)
                            })
                        },
                        &mut output,
                    )?
                }
                None => self.stream_groups(
                    &pass,
                    &mut |sink| {
                        for (i, row) in rows.iter().enumerate() {
                            sink(i, row)?;
                        }
                        Ok(())
                    },
                    &mut output,
                )?,
            }
        } else if grouped {
            let mut groups: Vec<Vec<&Vec<Datum>>> = Vec::new();
            let mut index: HashMap<String, usize> = HashMap::new();
            for row in &rows {
                let frame = Frame { cols, row, outer };
                let key = group_exprs
                    .iter()
                    .map(|g| self.eval_in(g, Some(&frame), self))
                    .collect::<SqlResult<Vec<_>>>()?;
                super::check_keyable(&key)?;
                let key = row_key(&key);
                let slot = match index.get(&key) {
                    Some(&slot) => slot,
                    None => {
                        self.charge_key(&key)?;
                        groups.push(Vec::new());
                        index.insert(key, groups.len() - 1);
                        groups.len() - 1
                    }
                };
                // The group's reference to the row.
                self.memory.charge(8)?;
                groups[slot].push(row);
            }
            if groups.is_empty() && group_exprs.is_empty() {
                groups.push(Vec::new()); // aggregates over no rows still give one row
            }
            let nulls = vec![Datum::Null; cols.len()];
            for g in &groups {
                let rep: &[Datum] = g.first().map(|r| r.as_slice()).unwrap_or(&nulls);
                let frame = Frame {
                    cols,
                    row: rep,
                    outer,
                };
                let hooks = GroupHooks {
                    exec: self,
                    cols,
                    rows: g,
                };
                if let Some(h) = &sel.having {
                    if !crate::expr::holds("HAVING", h, self.eval_in(h, Some(&frame), &hooks)?)? {
                        continue;
                    }
                }
                let out = items
                    .iter()
                    .map(|(_, e)| self.eval_in(e, Some(&frame), &hooks))
                    .collect::<SqlResult<Vec<_>>>()?;
                let keys = self.sort_keys(q, &names, &out, &mut |e| {
                    self.eval_in(e, Some(&frame), &hooks)
                })?;
                output.push(self, keys, out)?;
            }
        } else {
            let mut n = 0usize;
            let fast_items: Vec<Prepared<'_>> = items
                .iter()
                .map(|(_, e)| Prepared::new(e, &Columns::Frame(cols), self.params))
                .collect();
            let sort = super::SortKeys::new(q, &names, Some(cols), self.params)?;
            // One output row and its keys at a time, copied only when kept.
            let (mut out, mut keys) = (Vec::new(), Vec::new());
            let mut project = |row: &[Datum], output: &mut OutputRows| -> SqlResult<()> {
                n += 1;
                if n % 1024 == 1023 {
                    self.check_interrupt()?;
                }
                let frame = Frame { cols, row, outer };
                out.clear();
                for p in &fast_items {
                    out.push(p.eval(row, |e| self.eval_in(e, Some(&frame), self))?);
                }
                sort.fill(
                    &out,
                    &mut |p| p.eval(row, |e| self.eval_in(e, Some(&frame), self)),
                    &mut keys,
                )?;
                output.offer(self, &keys, &out)
            };
            // The statement's own level, a lone table straight to the output: its rows
            // may go to the session's row sink as they are made (see `exec::select`).
            let to_sink = match &stream_source {
                Some(_)
                    if outer.is_none()
                        && self.sink_query == Some(q as *const Query)
                        && output.passes_through() =>
                {
                    let oc = output_cols(&items, cols, &[]);
                    let known = oc.iter().all(|c| c.ty.is_some());
                    let sink = if known {
                        self.sink.borrow_mut().take()
                    } else {
                        None
                    };
                    sink.map(|s| (s, oc))
                }
                _ => None,
            };
            if let (Some(src), Some((mut sink, oc))) = (&stream_source, to_sink) {
                let (mut sent, mut row_out) = (0usize, Vec::new());
                let types: Vec<Option<TypeId>> = oc.iter().map(|c| c.ty).collect();
                let streamed = sink
                    .columns(&oc.into_iter().map(|c| c.to_column()).collect::<Vec<_>>())
                    .and_then(|()| {
                        self.read_table_with(src, sel, &mut |row| {
                            sent += 1;
                            if sent % 1024 == 1023 {
                                self.check_interrupt()?;
                            }
                            let frame = Frame { cols, row, outer };
                            row_out.clear();
                            for p in &fast_items {
                                row_out.push(p.eval(row, |e| self.eval_in(e, Some(&frame), self))?);
                            }
                            super::conform_row(&types, &mut row_out)?;
                            sink.row(&row_out)?;
                            Ok(true)
                        })
                    });
                *self.sink.borrow_mut() = Some(sink);
                streamed?;
                self.streamed.set(Some(sent));
            } else {
                match &stream_source {
                    Some(src)
                        if self.parallel_top_n(src, sel, &fast_items, &sort, &mut output)? => {}
                    // LIMIT without ORDER BY stops the read once it has its rows.
                    Some(src) if !output.full() => self.read_table_with(src, sel, &mut |row| {
                        project(row, &mut output)?;
                        Ok(!output.full())
                    })?,
                    Some(_) => {}
                    None => {
                        for row in &rows {
                            if output.full() {
                                break;
                            }
                            project(row, &mut output)?;
                        }
                    }
                }
            }
        }
        let mut rows = output.finish(self)?;
        let out_cols = output_cols(&items, cols, &rows);
        let types: Vec<Option<TypeId>> = out_cols.iter().map(|c| c.ty).collect();
        for row in &mut rows {
            super::conform_row(&types, row)?;
        }
        Ok(Rel {
            cols: out_cols,
            rows,
        })
    }

    /// The aggregate calls of a grouped query level when every one can be streamed
    /// ([`super::aggregate::streamable_call`]) and no subquery is in the clauses
    /// evaluated per group; `None` sends the query to the row-list path.
    fn streamable_calls(
        &self,
        items: &[(String, Expr)],
        having: Option<&Expr>,
        q: &Query,
    ) -> Option<Vec<StreamCall>> {
        let mut exprs: Vec<&Expr> = items.iter().map(|(_, e)| e).collect();
        exprs.extend(having);
        if let Some(ast::OrderByKind::Expressions(obs)) = q.order_by.as_ref().map(|o| &o.kind) {
            exprs.extend(obs.iter().map(|o| &o.expr));
        }
        if exprs.iter().any(|e| contains_subquery(e)) {
            return None;
        }
        super::aggregate::streamable_calls(&exprs)
    }

    /// GROUP BY with streamed aggregates: one hash table entry per group holding its
    /// first row (for grouped columns) and each call's running state; rows are not kept
    /// per group. Groups come out in order of first appearance, as on the row-list path,
    /// also when the table outgrew `work_mem` and rows of new groups went to partition
    /// files (see [`GroupTable`]). `feed` gives the FROM list's rows (held, or read
    /// from the table as it is scanned) to the sink it is handed, with their positions.
    pub(super) fn stream_groups(
        &self,
        pass: &GroupPass<'_>,
        feed: &mut dyn FnMut(&mut RowSink<'_>) -> SqlResult<()>,
        output: &mut OutputRows,
    ) -> SqlResult<()> {
        let mut done = Vec::new();
        let mut table = GroupTable::new(self, pass, 0);
        let mut any_row = false;
        feed(&mut |at, row| {
            any_row = true;
            table.add(self, pass, at, row)?;
            Ok(true)
        })?;
        let spilled = table.finish(self, pass, &mut done)?;
        // No GROUP BY over no rows is one group of its own; over rows whose one group
        // HAVING dropped it is no row at all (`done` is empty either way).
        if !any_row && pass.group_exprs.is_empty() {
            let (nulls, states) = empty_group(pass);
            if let Some((keys, out)) = self.group_output(pass, &nulls, &states)? {
                done.push((0, keys, out));
            }
        }
        if spilled {
            done.sort_by_key(|(first, _, _)| *first);
        }
        for (_, keys, out) in done {
            output.push(self, keys, out)?;
        }
        Ok(())
    }

    /// A lone-table aggregate level run as a parallel plan (`parallel.rs`), its groups'
    /// output rows pushed to `output` in the serial scan's order. False when the level
    /// does not qualify or a participant met what only the serial scan may answer:
    /// nothing was output, and the caller runs it serially.
    fn parallel_aggregate(
        &self,
        src: &TableSource,
        sel: &Select,
        pass: &GroupPass<'_>,
        output: &mut OutputRows,
    ) -> SqlResult<bool> {
        let row = match &src.probe {
            Some(pj) => super::parallel::RowShape::Joined(pj),
            None => super::parallel::RowShape::Table(&src.def),
        };
        let filter = sel.selection.as_ref();
        let group: Vec<&Expr> = pass.group_exprs.iter().collect();
        let gathered = {
            let mut env = self.env.borrow_mut();
            let workers = super::parallel::level_workers(
                &mut **env,
                &src.def,
                row,
                filter,
                &group,
                self.params,
                pass.calls,
            )?;
            if workers == 0 {
                return Ok(false);
            }
            let all = vec![true; src.def.columns.len()];
            let level = super::parallel::ParallelLevel {
                row,
                wanted: src.wanted.as_deref().unwrap_or(&all),
                filter,
                group_keys: &pass.fast_keys,
                calls: pass.calls,
                fast_args: &pass.fast_args,
                work_mem: pass.work_mem,
            };
            super::parallel::aggregate(&mut **env, &src.def, self.params, &level, workers)?
        };
        let Some(mut groups) = gathered else {
            return Ok(false);
        };
        if groups.is_empty() && pass.group_exprs.is_empty() {
            groups.push(empty_group(pass));
        }
        for (rep, states) in groups {
            if let Some((keys, out)) = self.group_output(pass, &rep, &states)? {
                output.push(self, keys, out)?;
            }
        }
        Ok(true)
    }

    /// A lone-table ORDER BY ... LIMIT level run as parallel top-N (`parallel::top_n`),
    /// its participants' best rows pushed to `output`, which keeps the serial answer's
    /// rows. False when the level does not qualify (a join, DISTINCT, a LIMIT past
    /// [`super::parallel::PARALLEL_TOP_N_MAX_ROWS`], an expression without a fast form,
    /// a small table) or a participant met what only the serial scan may answer:
    /// nothing was output, and the caller runs it serially.
    fn parallel_top_n(
        &self,
        src: &TableSource,
        sel: &Select,
        items: &[Prepared<'_>],
        sort: &super::SortKeys<'_>,
        output: &mut OutputRows,
    ) -> SqlResult<bool> {
        if src.probe.is_some() {
            return Ok(false);
        }
        let Some((cap, dirs)) = output.top_n_cap() else {
            return Ok(false);
        };
        let dirs = dirs.to_vec();
        let filter = sel.selection.as_ref();
        let gathered = {
            let mut env = self.env.borrow_mut();
            let workers = super::parallel::top_n_workers(
                &mut **env,
                &src.def,
                filter,
                items,
                sort,
                cap,
                self.params,
            )?;
            let (Some(fast_items), Some(keys), true) = (
                items
                    .iter()
                    .map(|p| p.fast.as_ref())
                    .collect::<Option<Vec<_>>>(),
                sort.parallel_form(),
                workers > 0,
            ) else {
                return Ok(false);
            };
            let all = vec![true; src.def.columns.len()];
            super::parallel::top_n(
                &mut **env,
                &src.def,
                self.params,
                src.wanted.as_deref().unwrap_or(&all),
                filter,
                &fast_items,
                &keys,
                cap,
                &dirs,
                workers,
            )?
        };
        let Some(entries) = gathered else {
            return Ok(false);
        };
        for e in entries {
            output.push_numbered(self, e)?;
        }
        Ok(true)
    }

    /// One pass of the streamed aggregation over a partition file written by an earlier
    /// pass (each row prefixed by its position in the FROM list's rows).
    fn group_file_pass(
        &self,
        p: &GroupPass<'_>,
        mut file: SpillFile,
        depth: u32,
        done: &mut Vec<(usize, Vec<Datum>, Vec<Datum>)>,
    ) -> SqlResult<()> {
        let mut table = GroupTable::new(self, p, depth);
        {
            let mut reader = file.reader()?;
            while let Some(mut r) = reader.next_row()? {
                let Datum::Int8(at) = r.remove(0) else {
                    return Err(SqlError::new("XX001", "bad partition row"));
                };
                table.add(self, p, at as usize, &r)?;
            }
        }
        drop(file);
        table.finish(self, p, done)?;
        Ok(())
    }

    /// A finished group's output row and ORDER BY keys, or `None` when HAVING drops it.
    fn group_output(
        &self,
        p: &GroupPass<'_>,
        rep: &[Datum],
        states: &[AggState],
    ) -> SqlResult<Option<(Vec<Datum>, Vec<Datum>)>> {
        let frame = Frame {
            cols: p.cols,
            row: rep,
            outer: p.outer,
        };
        let hooks = StreamHooks {
            exec: self,
            cols: p.cols,
            calls: p.calls,
            states,
        };
        if let Some(h) = p.having {
            if !crate::expr::holds("HAVING", h, self.eval_in(h, Some(&frame), &hooks)?)? {
                return Ok(None);
            }
        }
        let out = items_of(self, p.items, &frame, &hooks)?;
        let keys = self.sort_keys(p.q, p.names, &out, &mut |e| {
            self.eval_in(e, Some(&frame), &hooks)
        })?;
        Ok(Some((keys, out)))
    }

    /// The columns of `cols` functionally dependent on the GROUP BY list: every column of
    /// a FROM table whose primary key columns are all grouped (PostgreSQL accepts them
    /// outside aggregates).
    fn dependent_columns(
        &self,
        sel: &Select,
        group: &[Expr],
        cols: &[ColName],
    ) -> SqlResult<Vec<usize>> {
        let grouped: Vec<usize> = group
            .iter()
            .filter_map(|g| {
                let (q, n) = col_ref(g)?;
                find_col(cols, q.as_deref(), &n).ok().flatten()
            })
            .collect();
        let mut out = Vec::new();
        if grouped.is_empty() {
            return Ok(out);
        }
        for twj in &sel.from {
            let factors =
                std::iter::once(&twj.relation).chain(twj.joins.iter().map(|j| &j.relation));
            for f in factors {
                let TableFactor::Table { name, alias, .. } = f else {
                    continue;
                };
                let Some(def) = self.user_table(name)? else {
                    continue;
                };
                let qual = alias
                    .as_ref()
                    .map(|a| ident(&a.name))
                    .unwrap_or_else(|| def.name.clone());
                let Some(pk) = def.indexes.iter().find(|i| i.primary) else {
                    continue;
                };
                let covered = pk.columns.iter().all(|&c| {
                    let cname = &def.columns[c].name;
                    grouped.iter().any(|&g| {
                        cols[g].qual.as_deref() == Some(qual.as_str()) && &cols[g].name == cname
                    })
                });
                if covered {
                    out.extend(
                        cols.iter()
                            .enumerate()
                            .filter(|(_, c)| c.qual.as_deref() == Some(qual.as_str()))
                            .map(|(i, _)| i),
                    );
                }
            }
        }
        Ok(out)
    }

    /// Every row of a lone table (or of its join) that satisfies WHERE, charged as held.
    /// The rows of a lone table that satisfy WHERE, each `width` wide: the columns past
    /// the table's (a window's hidden columns) are NULL placeholders, allocated with
    /// the row rather than grown into later.
    fn read_table(
        &self,
        src: &TableSource,
        sel: &Select,
        width: usize,
    ) -> SqlResult<Vec<Vec<Datum>>> {
        let mut rows = Vec::new();
        self.read_table_with(src, sel, &mut |row| {
            let width = width.max(row.len());
            let mut kept = Vec::with_capacity(width);
            kept.extend_from_slice(row);
            kept.resize(width, Datum::Null);
            self.memory.charge_row(&kept)?;
            rows.push(kept);
            Ok(true)
        })?;
        Ok(rows)
    }

    /// Streams the rows of a lone table that satisfy WHERE to `each` (which returns
    /// `false` to stop), holding none of them. The transaction is borrowed meanwhile:
    /// `each` must not read the database (see [`Executor::prepare_streaming`]).
    fn read_table_with(
        &self,
        src: &TableSource,
        sel: &Select,
        each: &mut dyn FnMut(&[Datum]) -> SqlResult<bool>,
    ) -> SqlResult<()> {
        if let Some(pj) = &src.probe {
            // The left table is scanned whole (WHERE may name either side) and each
            // row joined as it comes; no catalog or table read happens meanwhile
            // (`prepare_streaming` chose this path).
            let mut n = 0usize;
            let mut joined = ProbeScratch::default();
            let filter = sel
                .selection
                .as_ref()
                .map(|w| Prepared::new(w, &Columns::Frame(&pj.cols), self.params));
            let mut env = self.env.borrow_mut();
            return for_each_matching_row(
                &mut **env,
                &src.def,
                None,
                self.params,
                src.wanted.as_deref(),
                &mut |_, lrow| {
                    n += 1;
                    if n % 1024 == 1023 {
                        self.check_interrupt()?;
                    }
                    self.probe_row(pj, lrow, &mut joined, &mut |row| {
                        if let Some(w) = &filter {
                            let frame = Frame {
                                cols: &pj.cols,
                                row,
                                outer: None,
                            };
                            let v = w.eval(row, |e| self.eval_in(e, Some(&frame), self))?;
                            if !crate::expr::holds("WHERE", w.expr, v)? {
                                return Ok(true);
                            }
                        }
                        each(row)
                    })
                },
            );
        }
        for_each_matching_row(
            &mut **self.env.borrow_mut(),
            &src.def,
            sel.selection.as_ref(),
            self.params,
            src.wanted.as_deref(),
            &mut |_, row| each(row),
        )
    }

    /// Whether a query level over a lone table may be evaluated while the table is
    /// scanned: not when a subquery is anywhere in it (it would read the database
    /// while the scan holds the transaction). A catalog function or `reg*` cast reads
    /// the catalog snapshot, which is taken now, before the scan.
    fn prepare_streaming(&self, sel: &Select, q: &Query) -> SqlResult<bool> {
        let mut subquery = false;
        let mut catalog = false;
        let mut look = |e: &Expr| {
            match e {
                Expr::Subquery(_) | Expr::Exists { .. } | Expr::InSubquery { .. } => {
                    subquery = true
                }
                Expr::Function(f) => {
                    if matches!(f.args, ast::FunctionArguments::Subquery(_)) {
                        subquery = true;
                    }
                    let name = f
                        .name
                        .0
                        .last()
                        .map(|p| p.to_string().to_ascii_lowercase())
                        .unwrap_or_default();
                    catalog |= crate::catalog_views::is_catalog_function(&name);
                }
                Expr::Cast { data_type, .. } => {
                    catalog |= data_type
                        .to_string()
                        .to_ascii_lowercase()
                        .starts_with("reg");
                }
                _ => {}
            }
            ControlFlow::<()>::Continue(())
        };
        let _ = visit_expressions(sel, &mut look);
        let _ = visit_expressions(&q.order_by, &mut look);
        let _ = visit_expressions(&q.limit_clause, &mut look);
        let _ = visit_expressions(&q.fetch, &mut look);
        if subquery {
            return Ok(false);
        }
        if catalog {
            self.catalog_snapshot()?;
        }
        Ok(true)
    }

    /// `t JOIN x ON ...` with `t` a plain user table and one inner equi-join whose
    /// right side hashes ([`Executor::probe_join`]): `t` is then scanned row by row and
    /// never held, like a lone table. Not when a subquery is anywhere in the query
    /// level (it would read the database during the scan).
    fn streamed_join(
        &self,
        sel: &Select,
        q: &Query,
        twj: &ast::TableWithJoins,
    ) -> SqlResult<Option<TableSource>> {
        let (
            [join],
            TableFactor::Table {
                name,
                alias,
                args: None,
                ..
            },
        ) = (twj.joins.as_slice(), &twj.relation)
        else {
            return Ok(None);
        };
        if alias.as_ref().is_some_and(|a| !a.columns.is_empty())
            || crate::names::table_has_extras(&twj.relation)
        {
            return Ok(None);
        }
        let Some(def) = self.user_table(name)? else {
            return Ok(None);
        };
        if !self.prepare_streaming(sel, q)? {
            return Ok(None);
        }
        let qual = alias
            .as_ref()
            .map(|a| ident(&a.name))
            .unwrap_or_else(|| def.name.clone());
        let left_cols = table_cols(&qual, &def);
        let before = self.pruned_names.replace(used_names(sel, q));
        let probe = self.probe_join(&left_cols, &join.relation, &join.join_operator);
        *self.pruned_names.borrow_mut() = before;
        let Some(probe) = probe? else {
            return Ok(None);
        };
        Ok(Some(TableSource {
            wanted: used_columns(sel, q, &def),
            def,
            probe: Some(Box::new(probe)),
        }))
    }

    /// FROM: the cross product of its items, each a table with its joins; or, for a
    /// lone user table, its columns and how to read it (WHERE applied as it is read,
    /// through the access path `dml::choose_access` picks), not yet read.
    fn scan_from(&self, sel: &Select, q: &Query, outer: Option<&Frame<'_>>) -> SqlResult<FromRows> {
        if let ([twj], None) = (sel.from.as_slice(), outer) {
            if twj.joins.is_empty() && !sel.selection.as_ref().is_some_and(contains_subquery) {
                if let TableFactor::Table {
                    name,
                    alias,
                    args: None,
                    ..
                } = &twj.relation
                {
                    // `AS x(a, b)` renames columns, which WHERE may use: the general
                    // path applies WHERE after the renaming.
                    let renamed = alias.as_ref().is_some_and(|a| !a.columns.is_empty());
                    if let Some(def) = self.user_table(name)?.filter(|_| !renamed) {
                        let wanted = used_columns(sel, q, &def);
                        let qual = alias
                            .as_ref()
                            .map(|a| ident(&a.name))
                            .unwrap_or_else(|| def.name.clone());
                        let mut rel = Rel {
                            cols: table_cols(&qual, &def),
                            rows: Vec::new(),
                        };
                        rename(&mut rel, alias.as_ref())?;
                        return Ok(FromRows::Table(
                            rel,
                            TableSource {
                                def,
                                wanted,
                                probe: None,
                            },
                        ));
                    }
                }
            }
            if let Some(src) = self.streamed_join(sel, q, twj)? {
                let rel = Rel {
                    cols: src
                        .probe
                        .as_ref()
                        .map(|p| p.cols.clone())
                        .unwrap_or_default(),
                    rows: Vec::new(),
                };
                return Ok(FromRows::Table(rel, src));
            }
        }
        let mut acc = Rel {
            cols: Vec::new(),
            rows: vec![Vec::new()],
        };
        let before = self.pruned_names.replace(used_names(sel, q));
        let joined = sel
            .from
            .iter()
            .try_fold(acc, |acc, twj| self.joined(acc, twj, outer));
        *self.pruned_names.borrow_mut() = before;
        acc = joined?;
        Ok(FromRows::Read(acc))
    }
}
