//! The SELECT executor: FROM lists with joins (inner, left, right, full, cross, LATERAL),
//! derived tables and table functions, WHERE, GROUP BY / HAVING with aggregates,
//! DISTINCT, UNION / INTERSECT / EXCEPT, ORDER BY, LIMIT / OFFSET, and scalar, EXISTS,
//! IN and ANY subqueries (correlated ones see the enclosing row through [`Frame`]) — over
//! user tables and the virtual `pg_catalog` / `information_schema` tables.
//!
//! Rows are materialised: OLTP statements touch few rows and the catalog tables are
//! small. A lone user table with no joins goes through `Session::matching_rows`, which
//! turns equality on a unique index's columns into an index lookup, so pgbench's point
//! reads never scan. Joins are nested loops (no statistics, no hash join yet).
//!
//! Binding happens before any row is read: every column a clause names must resolve in
//! the FROM list or an enclosing query, so a misspelt column fails with 42703 even on an
//! empty table.

use std::cell::RefCell;
use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use sqlparser::ast::{
    self, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, JoinConstraint, JoinOperator,
    Query, Select, SelectItem, SetExpr, SetOperator, SetQuantifier, TableFactor, TableWithJoins,
};
use walrus_engine::access::datum::{Datum, TypeId};
use walrus_engine::catalog::ColumnDef;

use crate::catalog_views;
use crate::error::{SqlError, SqlResult};
use crate::expr::{coerce, compare_values, eval, function_args, function_name, Hooks, Scope};
use crate::names::{ident, object_name};
use crate::plan::{
    bind, contains_aggregate, contains_subquery, output_name, qualified, rename,
    resolve_group_expr, static_type, table_cols, using_condition,
};
use crate::rel::{col_ref, find_col, ColName, Frame, Rel};
use crate::session::Session;
use crate::value::format_text;

/// A row key for grouping and duplicate elimination (values of different integer
/// widths that compare equal still group apart; the planner never mixes them).
fn row_key(row: &[Datum]) -> String {
    format!("{row:?}")
}

/// Runs SELECTs for one statement of a session.
pub(crate) struct Executor<'s> {
    session: RefCell<&'s mut Session>,
    params: &'s [Datum],
    now: i64,
    settings: crate::settings::SettingsView,
    interrupt: Arc<AtomicBool>,
    catalog: RefCell<Option<catalog_views::Snapshot>>,
}

/// The hooks in force while evaluating over one group of rows.
struct GroupHooks<'a, 's> {
    exec: &'a Executor<'s>,
    cols: &'a [ColName],
    rows: &'a [&'a Vec<Datum>],
}

impl Hooks for Executor<'_> {
    fn subquery(&self, q: &Query, outer: Option<&Frame<'_>>) -> SqlResult<Rel> {
        self.run_query(q, outer)
    }
    fn aggregate(
        &self,
        _f: &ast::Function,
        _outer: Option<&Frame<'_>>,
    ) -> Option<SqlResult<Datum>> {
        None
    }
    fn function(&self, name: &str, args: &[Datum]) -> Option<SqlResult<Datum>> {
        if !catalog_views::is_catalog_function(name) {
            return None; // now(), repeat(), ...: no catalog snapshot needed
        }
        let snap = match self.catalog_snapshot() {
            Ok(()) => self.catalog.borrow(),
            Err(e) => return Some(Err(e)),
        };
        snap.as_ref().and_then(|c| c.function(name, args))
    }
}

impl Hooks for GroupHooks<'_, '_> {
    fn subquery(&self, q: &Query, outer: Option<&Frame<'_>>) -> SqlResult<Rel> {
        self.exec.run_query(q, outer)
    }
    fn aggregate(&self, f: &ast::Function, outer: Option<&Frame<'_>>) -> Option<SqlResult<Datum>> {
        Some(self.exec.aggregate(f, self.cols, self.rows, outer))
    }
    fn function(&self, name: &str, args: &[Datum]) -> Option<SqlResult<Datum>> {
        Hooks::function(self.exec, name, args)
    }
}

impl<'s> Executor<'s> {
    pub(crate) fn new(session: &'s mut Session, params: &'s [Datum]) -> Executor<'s> {
        let (now, settings, interrupt) = session.eval_context();
        Executor {
            session: RefCell::new(session),
            params,
            now,
            settings,
            interrupt,
            catalog: RefCell::new(None),
        }
    }

    fn catalog_snapshot(&self) -> SqlResult<()> {
        if self.catalog.borrow().is_none() {
            let mut session = self.session.borrow_mut();
            let tables = session.catalog_tables()?;
            let snap = catalog_views::Snapshot::take(catalog_views::Source {
                tables,
                engine: session.engine(),
                user: self.settings.get("session_authorization"),
                database: self.settings.get(crate::settings::DATABASE_KEY),
            });
            drop(session);
            *self.catalog.borrow_mut() = Some(snap);
        }
        Ok(())
    }

    /// Evaluates `e` for one row (or group, with `hooks` a [`GroupHooks`]).
    fn eval_in(&self, e: &Expr, frame: Option<&Frame<'_>>, hooks: &dyn Hooks) -> SqlResult<Datum> {
        let get = |k: &str| self.settings.get(k);
        eval(
            e,
            &Scope {
                columns: &[],
                row: None,
                params: self.params,
                now: self.now,
                setting: &get,
                interrupt: Some(&self.interrupt),
                frame,
                hooks: Some(hooks),
            },
        )
    }

    fn check_interrupt(&self) -> SqlResult<()> {
        if self.interrupt.load(std::sync::atomic::Ordering::Acquire) {
            return Err(SqlError::new(
                "57014",
                "canceling statement due to user request",
            ));
        }
        Ok(())
    }

    pub(crate) fn run_query(&self, q: &Query, outer: Option<&Frame<'_>>) -> SqlResult<Rel> {
        if q.with.is_some() {
            return Err(SqlError::unsupported("WITH queries are not supported yet"));
        }
        match q.body.as_ref() {
            SetExpr::Select(sel) => self.select(sel, q, outer),
            body => {
                let mut rel = self.set_expr(body, outer)?;
                let mut keyed = Vec::with_capacity(rel.rows.len());
                let names: Vec<String> = rel.cols.iter().map(|c| c.name.clone()).collect();
                for row in std::mem::take(&mut rel.rows) {
                    let keys = self.sort_keys(q, &names, &row, &mut |e| {
                        let frame = Frame {
                            cols: &rel.cols,
                            row: &row,
                            outer,
                        };
                        self.eval_in(e, Some(&frame), self)
                    })?;
                    keyed.push((keys, row));
                }
                rel.rows = self.order_and_limit(q, keyed, outer)?;
                Ok(rel)
            }
        }
    }

    fn set_expr(&self, body: &SetExpr, outer: Option<&Frame<'_>>) -> SqlResult<Rel> {
        match body {
            SetExpr::Select(sel) => {
                let q = Query {
                    with: None,
                    body: Box::new(SetExpr::Select(sel.clone())),
                    order_by: None,
                    limit_clause: None,
                    fetch: None,
                    locks: vec![],
                    for_clause: None,
                    settings: None,
                    format_clause: None,
                    pipe_operators: vec![],
                };
                self.select(sel, &q, outer)
            }
            SetExpr::Query(q) => self.run_query(q, outer),
            SetExpr::Values(v) => {
                let mut rel = Rel::default();
                for r in &v.rows {
                    let row = r
                        .content
                        .iter()
                        .map(|e| self.eval_in(e, outer, self))
                        .collect::<SqlResult<Vec<_>>>()?;
                    if rel.cols.is_empty() {
                        rel.cols = (1..=row.len())
                            .map(|i| ColName {
                                qual: None,
                                name: format!("column{i}"),
                                ty: row[i - 1].type_id(),
                            })
                            .collect();
                    } else if row.len() != rel.cols.len() {
                        return Err(SqlError::new(
                            "42601",
                            "VALUES lists must all be the same length",
                        ));
                    }
                    rel.rows.push(row);
                }
                Ok(rel)
            }
            SetExpr::SetOperation {
                left,
                op,
                set_quantifier,
                right,
            } => {
                let mut l = self.set_expr(left, outer)?;
                let r = self.set_expr(right, outer)?;
                if l.cols.len() != r.cols.len() {
                    return Err(SqlError::new(
                        "42601",
                        format!("each {op} query must have the same number of columns"),
                    ));
                }
                let all = matches!(set_quantifier, SetQuantifier::All);
                let right_keys: HashSet<String> = r.rows.iter().map(|x| row_key(x)).collect();
                l.rows = match op {
                    SetOperator::Union => {
                        let mut rows = l.rows;
                        rows.extend(r.rows);
                        rows
                    }
                    SetOperator::Intersect => l
                        .rows
                        .into_iter()
                        .filter(|x| right_keys.contains(&row_key(x)))
                        .collect(),
                    SetOperator::Except | SetOperator::Minus => l
                        .rows
                        .into_iter()
                        .filter(|x| !right_keys.contains(&row_key(x)))
                        .collect(),
                };
                if !all {
                    let mut seen = HashSet::new();
                    l.rows.retain(|x| seen.insert(row_key(x)));
                }
                for (c, rc) in l.cols.iter_mut().zip(&r.cols) {
                    c.ty = c.ty.or(rc.ty);
                }
                Ok(l)
            }
            other => Err(SqlError::unsupported(format!(
                "{other} is not supported in a query"
            ))),
        }
    }

    /// ORDER BY keys of one output row: an ordinal or an output column name picks the
    /// output value (PostgreSQL's rule for bare names), anything else is evaluated.
    fn sort_keys(
        &self,
        q: &Query,
        names: &[String],
        out: &[Datum],
        eval_source: &mut dyn FnMut(&Expr) -> SqlResult<Datum>,
    ) -> SqlResult<Vec<Datum>> {
        let Some(ob) = &q.order_by else {
            return Ok(Vec::new());
        };
        let ast::OrderByKind::Expressions(exprs) = &ob.kind else {
            return Err(SqlError::unsupported("ORDER BY ALL is not supported"));
        };
        let mut keys = Vec::with_capacity(exprs.len());
        for o in exprs {
            let picked = match &o.expr {
                Expr::Value(v) => match &v.value {
                    ast::Value::Number(n, _) => {
                        let i: usize = n.parse().unwrap_or(0);
                        Some(out.get(i.wrapping_sub(1)).cloned().ok_or_else(|| {
                            SqlError::new(
                                "42P10",
                                format!("ORDER BY position {n} is not in select list"),
                            )
                        })?)
                    }
                    _ => None,
                },
                Expr::Identifier(id) => names
                    .iter()
                    .position(|n| *n == ident(id))
                    .map(|i| out[i].clone()),
                _ => None,
            };
            keys.push(match picked {
                Some(k) => k,
                None => eval_source(&o.expr)?,
            });
        }
        Ok(keys)
    }

    fn order_and_limit(
        &self,
        q: &Query,
        mut keyed: Vec<(Vec<Datum>, Vec<Datum>)>,
        outer: Option<&Frame<'_>>,
    ) -> SqlResult<Vec<Vec<Datum>>> {
        if let Some(ob) = &q.order_by {
            if let ast::OrderByKind::Expressions(exprs) = &ob.kind {
                let dirs: Vec<(bool, bool)> = exprs
                    .iter()
                    .map(|o| {
                        let desc = matches!(o.options.sort, Some(ast::OrderBySort::Desc));
                        // PostgreSQL: NULLs sort as if larger than every value.
                        (desc, o.options.nulls_first.unwrap_or(desc))
                    })
                    .collect();
                keyed.sort_by(|a, b| {
                    for (i, (x, y)) in a.0.iter().zip(&b.0).enumerate() {
                        let (desc, nulls_first) = dirs[i];
                        let o = match (x.is_null(), y.is_null()) {
                            (true, true) => Ordering::Equal,
                            (true, false) => {
                                if nulls_first {
                                    Ordering::Less
                                } else {
                                    Ordering::Greater
                                }
                            }
                            (false, true) => {
                                if nulls_first {
                                    Ordering::Greater
                                } else {
                                    Ordering::Less
                                }
                            }
                            _ => {
                                let o = compare_values(x, y).unwrap_or(Ordering::Equal);
                                if desc {
                                    o.reverse()
                                } else {
                                    o
                                }
                            }
                        };
                        if o.is_ne() {
                            return o;
                        }
                    }
                    Ordering::Equal
                });
            }
        }
        let mut rows: Vec<Vec<Datum>> = keyed.into_iter().map(|(_, r)| r).collect();
        if let Some(ast::LimitClause::LimitOffset { limit, offset, .. }) = &q.limit_clause {
            let count = |e: &Expr| -> SqlResult<Option<usize>> {
                match coerce(self.eval_in(e, outer, self)?, TypeId::Int8)? {
                    Datum::Null => Ok(None),
                    Datum::Int8(n) if n >= 0 => Ok(Some(n as usize)),
                    _ => Err(SqlError::new(
                        "2201W",
                        "LIMIT and OFFSET must not be negative",
                    )),
                }
            };
            let skip = match offset {
                Some(o) => count(&o.value)?.unwrap_or(0),
                None => 0,
            };
            let take = match limit {
                Some(l) => count(l)?.unwrap_or(usize::MAX),
                None => usize::MAX,
            };
            rows = rows.into_iter().skip(skip).take(take).collect();
        }
        Ok(rows)
    }

    fn select(&self, sel: &Select, q: &Query, outer: Option<&Frame<'_>>) -> SqlResult<Rel> {
        let (from, filtered) = self.scan_from(sel, outer)?;
        // Output items.
        let mut items: Vec<(String, Expr)> = Vec::new();
        for it in &sel.projection {
            match it {
                SelectItem::Wildcard(_) => {
                    for c in &from.cols {
                        items.push((c.name.clone(), qualified(c)));
                    }
                }
                SelectItem::QualifiedWildcard(kind, _) => {
                    let q = match kind {
                        ast::SelectItemQualifiedWildcardKind::ObjectName(n) => object_name(n),
                        other => {
                            return Err(SqlError::unsupported(format!(
                                "{other}.* is not supported"
                            )))
                        }
                    };
                    let before = items.len();
                    for c in from
                        .cols
                        .iter()
                        .filter(|c| c.qual.as_deref() == Some(q.as_str()))
                    {
                        items.push((c.name.clone(), qualified(c)));
                    }
                    if items.len() == before {
                        return Err(SqlError::new(
                            "42P01",
                            format!("missing FROM-clause entry for table \"{q}\""),
                        ));
                    }
                }
                SelectItem::UnnamedExpr(e) => items.push((output_name(e), e.clone())),
                SelectItem::ExprWithAlias { expr, alias } => {
                    items.push((ident(alias), expr.clone()))
                }
                other => {
                    return Err(SqlError::unsupported(format!(
                        "select item {other} is not supported"
                    )))
                }
            }
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
        // WHERE
        let mut rows = from.rows;
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
                    if matches!(self.eval_in(w, Some(&frame), self)?, Datum::Bool(true)) {
                        kept.push(row);
                    }
                }
                rows = kept;
            }
        }
        let cols = &from.cols;
        let grouped = !group_exprs.is_empty()
            || sel.having.is_some()
            || items.iter().any(|(_, e)| contains_aggregate(e));
        let mut keyed: Vec<(Vec<Datum>, Vec<Datum>)> = Vec::new();
        if grouped {
            let mut groups: Vec<Vec<&Vec<Datum>>> = Vec::new();
            let mut index: HashMap<String, usize> = HashMap::new();
            for row in &rows {
                let frame = Frame { cols, row, outer };
                let key = group_exprs
                    .iter()
                    .map(|g| self.eval_in(g, Some(&frame), self))
                    .collect::<SqlResult<Vec<_>>>()?;
                let slot = *index.entry(row_key(&key)).or_insert_with(|| {
                    groups.push(Vec::new());
                    groups.len() - 1
                });
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
                    if !matches!(self.eval_in(h, Some(&frame), &hooks)?, Datum::Bool(true)) {
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
                keyed.push((keys, out));
            }
        } else {
            for (i, row) in rows.iter().enumerate() {
                if i % 1024 == 1023 {
                    self.check_interrupt()?;
                }
                let frame = Frame { cols, row, outer };
                let out = items
                    .iter()
                    .map(|(_, e)| self.eval_in(e, Some(&frame), self))
                    .collect::<SqlResult<Vec<_>>>()?;
                let keys = self.sort_keys(q, &names, &out, &mut |e| {
                    self.eval_in(e, Some(&frame), self)
                })?;
                keyed.push((keys, out));
            }
        }
        match &sel.distinct {
            None | Some(ast::Distinct::All) => {}
            Some(ast::Distinct::Distinct) => {
                let mut seen = HashSet::new();
                keyed.retain(|(_, out)| seen.insert(row_key(out)));
            }
            Some(ast::Distinct::On(_)) => {
                return Err(SqlError::unsupported("SELECT DISTINCT ON is not supported"))
            }
        }
        let rows = self.order_and_limit(q, keyed, outer)?;
        let defs: Vec<ColumnDef> = cols
            .iter()
            .filter_map(|c| {
                c.ty.map(|ty| ColumnDef {
                    name: c.name.clone(),
                    ty,
                    not_null: false,
                })
            })
            .collect();
        let out_cols = items
            .iter()
            .enumerate()
            .map(|(i, (n, e))| {
                let ty = match col_ref(e) {
                    Some((qual, name)) => find_col(cols, qual.as_deref(), &name)
                        .ok()
                        .flatten()
                        .and_then(|c| cols[c].ty),
                    None => static_type(e, &defs),
                };
                ColName {
                    qual: None,
                    name: n.clone(),
                    ty: ty.or_else(|| rows.iter().find_map(|r| r[i].type_id())),
                }
            })
            .collect();
        Ok(Rel {
            cols: out_cols,
            rows,
        })
    }

    /// FROM: the cross product of its items, each a table with its joins. Returns
    /// whether WHERE was already applied (the single-table index path).
    fn scan_from(&self, sel: &Select, outer: Option<&Frame<'_>>) -> SqlResult<(Rel, bool)> {
        if let ([twj], None) = (sel.from.as_slice(), outer) {
            if twj.joins.is_empty() && !sel.selection.as_ref().is_some_and(contains_subquery) {
                if let TableFactor::Table {
                    name,
                    alias,
                    args: None,
                    ..
                } = &twj.relation
                {
                    if let Some(def) = self.user_table(name)? {
                        let rows = self
                            .session
                            .borrow_mut()
                            .matching_rows(&def, sel.selection.as_ref(), self.params)?
                            .into_iter()
                            .map(|(_, r)| r)
                            .collect();
                        let qual = alias
                            .as_ref()
                            .map(|a| ident(&a.name))
                            .unwrap_or_else(|| def.name.clone());
                        let mut rel = Rel {
                            cols: table_cols(&qual, &def.columns),
                            rows,
                        };
                        rename(&mut rel, alias.as_ref())?;
                        return Ok((rel, true));
                    }
                }
            }
        }
        let mut acc = Rel {
            cols: Vec::new(),
            rows: vec![Vec::new()],
        };
        for twj in &sel.from {
            acc = self.joined(acc, twj, outer)?;
        }
        Ok((acc, false))
    }

    /// `left` joined with `twj`'s relation and then its joins, left to right.
    fn joined(&self, left: Rel, twj: &TableWithJoins, outer: Option<&Frame<'_>>) -> SqlResult<Rel> {
        let mut acc = self.join(
            left,
            &twj.relation,
            &JoinOperator::CrossJoin(JoinConstraint::None),
            outer,
        )?;
        for j in &twj.joins {
            acc = self.join(acc, &j.relation, &j.join_operator, outer)?;
        }
        Ok(acc)
    }

    fn join(
        &self,
        left: Rel,
        right: &TableFactor,
        op: &JoinOperator,
        outer: Option<&Frame<'_>>,
    ) -> SqlResult<Rel> {
        use JoinOperator as J;
        let (kind, constraint) = match op {
            J::Join(c) | J::Inner(c) => (b'i', c),
            J::Left(c) | J::LeftOuter(c) => (b'l', c),
            J::Right(c) | J::RightOuter(c) => (b'r', c),
            J::FullOuter(c) => (b'f', c),
            J::CrossJoin(c) => (b'i', c),
            other => {
                return Err(SqlError::unsupported(format!(
                    "join type {other:?} is not supported"
                )))
            }
        };
        let lateral = is_lateral(right);
        // A non-lateral right side is computed once; a lateral one per left row.
        let fixed = if lateral {
            None
        } else {
            Some(self.factor(right, outer)?)
        };
        let mut out = Rel::default();
        let mut right_matched: Vec<bool> = Vec::new();
        // The join condition, built and bound once, when the right side's columns are
        // first known (a lateral side is only known after its first evaluation).
        let mut cond: Option<Option<Expr>> = None;
        for lrow in &left.rows {
            let owned;
            let r: &Rel = match &fixed {
                Some(r) => r,
                None => {
                    let lframe = Frame {
                        cols: &left.cols,
                        row: lrow,
                        outer,
                    };
                    owned = self.factor(right, Some(&lframe))?;
                    &owned
                }
            };
            if cond.is_none() {
                out.cols = left.cols.iter().chain(&r.cols).cloned().collect();
                right_matched = vec![false; r.rows.len()];
                let c = match constraint {
                    JoinConstraint::On(e) => Some(e.clone()),
                    JoinConstraint::Using(names) => using_condition(&left, r, names)?,
                    JoinConstraint::None => None,
                    JoinConstraint::Natural => {
                        return Err(SqlError::unsupported("NATURAL joins are not supported"))
                    }
                };
                if let Some(c) = &c {
                    bind(c, &out.cols, outer, &[])?;
                }
                cond = Some(c);
            }
            let on = cond.as_ref().and_then(|c| c.as_ref());
            let mut matched = false;
            for (ri, rrow) in r.rows.iter().enumerate() {
                let mut row = Vec::with_capacity(lrow.len() + rrow.len());
                row.extend_from_slice(lrow);
                row.extend_from_slice(rrow);
                let keep = match on {
                    None => true,
                    Some(c) => {
                        let frame = Frame {
                            cols: &out.cols,
                            row: &row,
                            outer,
                        };
                        matches!(self.eval_in(c, Some(&frame), self)?, Datum::Bool(true))
                    }
                };
                if keep {
                    matched = true;
                    if let Some(m) = right_matched.get_mut(ri) {
                        *m = true;
                    }
                    out.rows.push(row);
                }
            }
            if !matched && matches!(kind, b'l' | b'f') {
                let mut row = lrow.clone();
                row.extend(std::iter::repeat_n(Datum::Null, r.cols.len()));
                out.rows.push(row);
            }
        }
        if cond.is_none() {
            // No left rows: still learn the right side's columns.
            let r = match fixed {
                Some(r) => r,
                None => {
                    // A lateral item over no rows: evaluate it once against NULLs to
                    // learn its columns (its rows are discarded).
                    let nulls = vec![Datum::Null; left.cols.len()];
                    let frame = Frame {
                        cols: &left.cols,
                        row: &nulls,
                        outer,
                    };
                    let mut r = self.factor(right, Some(&frame))?;
                    r.rows.clear();
                    r
                }
            };
            out.cols = left.cols.iter().chain(&r.cols).cloned().collect();
            if matches!(kind, b'r' | b'f') {
                for rrow in &r.rows {
                    let mut row = vec![Datum::Null; left.cols.len()];
                    row.extend_from_slice(rrow);
                    out.rows.push(row);
                }
            }
            return Ok(out);
        }
        if matches!(kind, b'r' | b'f') {
            if let Some(r) = &fixed {
                for (ri, rrow) in r.rows.iter().enumerate() {
                    if !right_matched[ri] {
                        let mut row = vec![Datum::Null; left.cols.len()];
                        row.extend_from_slice(rrow);
                        out.rows.push(row);
                    }
                }
            }
        }
        Ok(out)
    }

    fn user_table(
        &self,
        name: &ast::ObjectName,
    ) -> SqlResult<Option<Arc<walrus_engine::catalog::TableDef>>> {
        let parts: Vec<String> = name
            .0
            .iter()
            .filter_map(|p| p.as_ident())
            .map(ident)
            .collect();
        let (schema, table) = match parts.as_slice() {
            [t] => (None, t.as_str()),
            [s, t] => (Some(s.as_str()), t.as_str()),
            [_, s, t] => (Some(s.as_str()), t.as_str()),
            _ => return Ok(None),
        };
        if catalog_views::is_virtual(schema, table) {
            return Ok(None);
        }
        if schema.is_some_and(|s| s != "public") {
            return Err(SqlError::new(
                "42P01",
                format!("relation \"{}\" does not exist", parts.join(".")),
            ));
        }
        Ok(Some(self.session.borrow_mut().table_def(table)?))
    }

    /// One FROM item as a relation; `outer` is the enclosing row (for LATERAL items,
    /// the current row of everything to their left).
    fn factor(&self, tf: &TableFactor, outer: Option<&Frame<'_>>) -> SqlResult<Rel> {
        match tf {
            TableFactor::Table {
                name,
                alias,
                args: None,
                ..
            } => {
                let mut rel = match self.user_table(name)? {
                    Some(def) => {
                        let rows = self.session.borrow_mut().scan_rows(&def)?;
                        let qual = alias
                            .as_ref()
                            .map(|a| ident(&a.name))
                            .unwrap_or_else(|| def.name.clone());
                        Rel {
                            cols: table_cols(&qual, &def.columns),
                            rows,
                        }
                    }
                    None => {
                        let parts: Vec<String> = name
                            .0
                            .iter()
                            .filter_map(|p| p.as_ident())
                            .map(ident)
                            .collect();
                        let table = parts.last().cloned().unwrap_or_default();
                        let schema = parts.len().checked_sub(2).map(|i| parts[i].as_str());
                        self.catalog_snapshot()?;
                        let snap = self.catalog.borrow();
                        let snap = snap.as_ref().expect("taken above");
                        let (cols, rows) = snap.table(schema, &table, &self.settings.all())?;
                        let qual = alias
                            .as_ref()
                            .map(|a| ident(&a.name))
                            .unwrap_or_else(|| table.clone());
                        Rel {
                            cols: cols
                                .into_iter()
                                .map(|(n, ty)| ColName {
                                    qual: Some(qual.clone()),
                                    name: n.to_string(),
                                    ty: Some(ty),
                                })
                                .collect(),
                            rows,
                        }
                    }
                };
                rename(&mut rel, alias.as_ref())?;
                Ok(rel)
            }
            TableFactor::Table {
                name,
                alias,
                args: Some(args),
                ..
            } => self.table_function(name, &args.args, alias.as_ref(), outer),
            TableFactor::Function {
                name, args, alias, ..
            } => self.table_function(name, args, alias.as_ref(), outer),
            TableFactor::Derived {
                subquery, alias, ..
            } => {
                let mut rel = self.run_query(subquery, outer)?;
                let qual = alias.as_ref().map(|a| ident(&a.name));
                for c in &mut rel.cols {
                    c.qual = qual.clone();
                }
                rename(&mut rel, alias.as_ref())?;
                Ok(rel)
            }
            TableFactor::NestedJoin {
                table_with_joins,
                alias,
            } => {
                let start = Rel {
                    cols: Vec::new(),
                    rows: vec![Vec::new()],
                };
                let mut rel = self.joined(start, table_with_joins, outer)?;
                if let Some(a) = alias {
                    let q = ident(&a.name);
                    for c in &mut rel.cols {
                        c.qual = Some(q.clone());
                    }
                    rename(&mut rel, Some(a))?;
                }
                Ok(rel)
            }
            other => Err(SqlError::unsupported(format!(
                "FROM {other} is not supported"
            ))),
        }
    }

    fn table_function(
        &self,
        name: &ast::ObjectName,
        args: &[FunctionArg],
        alias: Option<&ast::TableAlias>,
        outer: Option<&Frame<'_>>,
    ) -> SqlResult<Rel> {
        let fname = object_name(name);
        let vals = args
            .iter()
            .map(|a| match a {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e))
                | FunctionArg::Named {
                    arg: FunctionArgExpr::Expr(e),
                    ..
                } => self.eval_in(e, outer, self),
                other => Err(SqlError::unsupported(format!("argument {other}"))),
            })
            .collect::<SqlResult<Vec<_>>>()?;
        let values: Vec<Datum> = match fname.as_str() {
            "generate_series" => generate_series(&vals)?,
            "unnest" => match vals.first() {
                Some(Datum::Null) | None => Vec::new(),
                Some(d) => crate::expr::parse_array_text(&format_text(d).unwrap_or_default())?
                    .into_iter()
                    .map(|t| t.map(Datum::Text).unwrap_or(Datum::Null))
                    .collect(),
            },
            other => {
                return Err(SqlError::new(
                    "42883",
                    format!("function {other}() does not exist"),
                ))
            }
        };
        let qual = alias
            .map(|a| ident(&a.name))
            .unwrap_or_else(|| fname.clone());
        let ty = values
            .iter()
            .find_map(|v| v.type_id())
            .or_else(|| vals.first().and_then(|v| v.type_id()));
        let mut rel = Rel {
            cols: vec![ColName {
                qual: Some(qual),
                name: fname,
                ty,
            }],
            rows: values.into_iter().map(|v| vec![v]).collect(),
        };
        if let Some(a) = alias {
            if a.columns.is_empty() {
                // `generate_series(1, 3) AS g`: the column takes the alias's name.
                rel.cols[0].name = ident(&a.name);
            }
        }
        rename(&mut rel, alias)?;
        Ok(rel)
    }

    /// An aggregate over a group's rows.
    fn aggregate(
        &self,
        f: &ast::Function,
        cols: &[ColName],
        rows: &[&Vec<Datum>],
        outer: Option<&Frame<'_>>,
    ) -> SqlResult<Datum> {
        let name = function_name(f);
        let (star, distinct) = match &f.args {
            FunctionArguments::List(l) => (
                l.args
                    .iter()
                    .any(|a| matches!(a, FunctionArg::Unnamed(FunctionArgExpr::Wildcard))),
                matches!(
                    l.duplicate_treatment,
                    Some(ast::DuplicateTreatment::Distinct)
                ),
            ),
            _ => (name == "count", false),
        };
        let args = function_args(f);
        let mut vals: Vec<Datum> = Vec::new();
        let mut seps: Vec<Datum> = Vec::new();
        let mut counted = 0usize;
        for row in rows {
            let frame = Frame { cols, row, outer };
            if let Some(filter) = &f.filter {
                if !matches!(self.eval_in(filter, Some(&frame), self)?, Datum::Bool(true)) {
                    continue;
                }
            }
            counted += 1;
            if star {
                continue;
            }
            let arg = args.first().ok_or_else(|| {
                SqlError::new("42883", format!("function {name}() does not exist"))
            })?;
            let v = self.eval_in(arg, Some(&frame), self)?;
            if name == "string_agg" {
                let sep = match args.get(1) {
                    Some(s) => self.eval_in(s, Some(&frame), self)?,
                    None => Datum::Null,
                };
                seps.push(sep);
            }
            if !v.is_null() || name == "array_agg" {
                vals.push(v);
            } else if name == "string_agg" {
                seps.pop();
            }
        }
        if distinct {
            let mut seen = HashSet::new();
            vals.retain(|v| seen.insert(row_key(std::slice::from_ref(v))));
        }
        aggregate_result(&name, star, counted, vals, seps)
    }
}

/// Finishes an aggregate from the non-NULL argument values of its group.
fn aggregate_result(
    name: &str,
    star: bool,
    counted: usize,
    vals: Vec<Datum>,
    seps: Vec<Datum>,
) -> SqlResult<Datum> {
    Ok(match name {
        "count" => Datum::Int8(if star { counted } else { vals.len() } as i64),
        "min" | "max" => {
            let mut best: Option<Datum> = None;
            for v in vals {
                let better = match &best {
                    None => true,
                    Some(b) => {
                        let o = compare_values(&v, b)?;
                        if name == "min" {
                            o == Ordering::Less
                        } else {
                            o == Ordering::Greater
                        }
                    }
                };
                if better {
                    best = Some(v);
                }
            }
            best.unwrap_or(Datum::Null)
        }
        "bool_and" | "every" | "bool_or" => {
            if vals.is_empty() {
                return Ok(Datum::Null);
            }
            let want_all = name != "bool_or";
            let mut acc = want_all;
            for v in &vals {
                match v {
                    Datum::Bool(b) => {
                        acc = if want_all { acc && *b } else { acc || *b };
                    }
                    _ => {
                        return Err(SqlError::new(
                            "42883",
                            format!("function {name}() requires boolean arguments"),
                        ))
                    }
                }
            }
            Datum::Bool(acc)
        }
        "string_agg" => {
            if vals.is_empty() {
                return Ok(Datum::Null);
            }
            let mut out = String::new();
            for (i, v) in vals.iter().enumerate() {
                if i > 0 {
                    out.push_str(&seps.get(i).and_then(format_text).unwrap_or_default());
                }
                out.push_str(&format_text(v).unwrap_or_default());
            }
            Datum::Text(out)
        }
        "array_agg" => {
            if vals.is_empty() {
                return Ok(Datum::Null);
            }
            Datum::Text(crate::expr::format_array_text(&vals))
        }
        "sum" | "avg" => {
            if vals.is_empty() {
                return Ok(Datum::Null);
            }
            let ints: Option<Vec<i64>> = vals
                .iter()
                .map(|v| match v {
                    Datum::Int2(x) => Some(*x as i64),
                    Datum::Int4(x) => Some(*x as i64),
                    Datum::Int8(x) => Some(*x),
                    _ => None,
                })
                .collect();
            match ints {
                Some(is) => {
                    let total: i128 = is.iter().map(|&x| x as i128).sum();
                    if name == "sum" {
                        if vals.iter().any(|v| matches!(v, Datum::Int8(_))) {
                            Datum::Numeric(total.to_string())
                        } else {
                            Datum::Int8(
                                i64::try_from(total)
                                    .map_err(|_| SqlError::new("22003", "bigint out of range"))?,
                            )
                        }
                    } else {
                        Datum::Numeric(numeric_ratio(total, is.len() as i128))
                    }
                }
                None => {
                    let fs: Vec<f64> = vals
                        .iter()
                        .filter_map(|v| match v {
                            Datum::Float8(x) => Some(*x),
                            Datum::Numeric(s) => s.parse().ok(),
                            Datum::Text(s) => s.parse().ok(),
                            _ => None,
                        })
                        .collect();
                    if fs.len() != vals.len() {
                        return Err(SqlError::new(
                            "42883",
                            format!("function {name}() does not exist for this argument type"),
                        ));
                    }
                    let total: f64 = fs.iter().sum();
                    let v = if name == "sum" {
                        total
                    } else {
                        total / fs.len() as f64
                    };
                    if vals.iter().all(|x| matches!(x, Datum::Float8(_))) {
                        Datum::Float8(v)
                    } else {
                        Datum::Numeric(v.to_string())
                    }
                }
            }
        }
        other => {
            return Err(SqlError::unsupported(format!(
                "aggregate {other}() is not supported"
            )))
        }
    })
}

/// `num / den` as numeric text with PostgreSQL's 16 fractional digits for `avg`.
fn numeric_ratio(num: i128, den: i128) -> String {
    let neg = (num < 0) != (den < 0) && num != 0;
    let (n, d) = (num.unsigned_abs(), den.unsigned_abs());
    let scale = 10u128.pow(16);
    let scaled = (n * scale * 10 / d + 5) / 10; // round half up at the 16th digit
    let (int, frac) = (scaled / scale, scaled % scale);
    format!("{}{int}.{frac:016}", if neg { "-" } else { "" })
}

fn generate_series(vals: &[Datum]) -> SqlResult<Vec<Datum>> {
    if vals.iter().any(|v| v.is_null()) {
        return Ok(Vec::new());
    }
    let as_i = |d: &Datum| match coerce(d.clone(), TypeId::Int8) {
        Ok(Datum::Int8(v)) => Ok(v),
        _ => Err(SqlError::new(
            "42883",
            "function generate_series() needs integer arguments",
        )),
    };
    let (start, stop) = match vals {
        [a, b] | [a, b, _] => (as_i(a)?, as_i(b)?),
        _ => {
            return Err(SqlError::new(
                "42883",
                "function generate_series() needs two or three arguments",
            ))
        }
    };
    let step = match vals.get(2) {
        Some(s) => as_i(s)?,
        None => 1,
    };
    if step == 0 {
        return Err(SqlError::new("22023", "step size cannot equal zero"));
    }
    let count = if (step > 0 && stop < start) || (step < 0 && stop > start) {
        0
    } else {
        ((stop as i128 - start as i128) / step as i128 + 1) as u128
    };
    if count > 100_000_000 {
        return Err(SqlError::new(
            "54000",
            "generate_series would produce more than 100 million rows",
        ));
    }
    let wide = vals.iter().any(|v| matches!(v, Datum::Int8(_)));
    Ok((0..count as i64)
        .map(|i| {
            let v = start + i * step;
            if wide {
                Datum::Int8(v)
            } else {
                Datum::Int4(v as i32)
            }
        })
        .collect())
}

fn is_lateral(tf: &TableFactor) -> bool {
    match tf {
        TableFactor::Derived { lateral, .. } | TableFactor::Function { lateral, .. } => *lateral,
        // Table functions in FROM may always refer to earlier items (PostgreSQL).
        TableFactor::Table { args: Some(_), .. } => true,
        _ => false,
    }
}
