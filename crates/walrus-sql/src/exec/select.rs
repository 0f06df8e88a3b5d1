//! The SELECT of one query level: FROM (with the single-table access path), binding,
//! WHERE, grouping and aggregates, the select list, DISTINCT, then ORDER BY and LIMIT.

use std::collections::{HashMap, HashSet};

use sqlparser::ast::{self, Expr, Query, Select, SelectItem, TableFactor};
use walrus_engine::access::datum::Datum;

use super::dml::matching_rows;
use super::{row_key, Executor, GroupHooks};
use crate::error::{SqlError, SqlResult};
use crate::memory::row_bytes;
use crate::names::{ident, object_name};
use crate::plan::{
    bind, cast_origin, check_grouped, contains_aggregate, contains_subquery, output_name,
    qualified, rename, resolve_group_expr, static_type, table_cols,
};
use crate::rel::{col_ref, find_col, ColName, Frame, Rel};

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
        locks,
        for_clause,
        settings,
        format_clause,
        pipe_operators,
    } = q;
    let refuse = |what: &str| Err(SqlError::unsupported(format!("{what} is not supported")));
    if with.is_some() {
        return refuse("WITH queries");
    }
    if !locks.is_empty() {
        return refuse("SELECT ... FOR UPDATE / FOR SHARE (row locking clauses)");
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
        let (mut from, filtered) = self.scan_from(sel, outer)?;
        // Output items.
        let mut items: Vec<(String, Expr)> = Vec::new();
        for it in &sel.projection {
            match it {
                SelectItem::Wildcard(_) => {
                    for c in from.cols.iter().filter(|c| !c.hidden) {
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
        let cols = &from.cols;
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
                self.memory.charge(row_bytes(&out) + row_bytes(&keys))?;
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
                self.memory.charge(row_bytes(&out) + row_bytes(&keys))?;
                keyed.push((keys, out));
            }
        }
        match &sel.distinct {
            None | Some(ast::Distinct::All) => {}
            Some(ast::Distinct::Distinct) => {
                for (_, out) in &keyed {
                    super::check_keyable(out)?;
                }
                let mut seen = HashSet::new();
                let mut charged = Ok(());
                keyed.retain(|(_, out)| {
                    let k = row_key(out);
                    if charged.is_ok() {
                        charged = self.charge_key(&k);
                    }
                    seen.insert(k)
                });
                charged?;
            }
            Some(ast::Distinct::On(_)) => {
                return Err(SqlError::unsupported("SELECT DISTINCT ON is not supported"))
            }
        }
        let rows = self.order_and_limit(q, keyed, outer)?;
        let defs = crate::plan::typed_columns(cols);
        let out_cols = items
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
                    origin: source.and_then(|c| c.origin).or_else(|| cast_origin(e)),
                }
            })
            .collect();
        Ok(Rel {
            cols: out_cols,
            rows,
        })
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
                        let rows = matching_rows(
                            &mut **self.env.borrow_mut(),
                            &def,
                            sel.selection.as_ref(),
                            self.params,
                        )?
                        .into_iter()
                        .map(|(_, r)| r)
                        .collect();
                        let qual = alias
                            .as_ref()
                            .map(|a| ident(&a.name))
                            .unwrap_or_else(|| def.name.clone());
                        let mut rel = Rel {
                            cols: table_cols(&qual, &def),
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
}
