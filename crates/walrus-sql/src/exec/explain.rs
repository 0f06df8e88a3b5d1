//! `EXPLAIN <query>` in text form, with PostgreSQL's node names, for the query shapes
//! whose plan walrus can state exactly: a SELECT over one user table (no joins,
//! subqueries or window functions) or over no table. The nodes come from the decisions
//! the executor makes, taken by the same functions: the access path from
//! [`crate::plan::choose_access`] with the table's statistics (Index Scan for a
//! unique-index point lookup or an integer range, Seq Scan otherwise; the WHERE clause
//! is a Filter re-checked on every row read, index reads included), aggregation as in
//! `select.rs` (Aggregate without GROUP BY, HashAggregate with it: groups are kept in
//! a hash table), DISTINCT as a HashAggregate over the output columns (the output
//! collector's hash set), ORDER BY as a Sort (a top-N heap under a LIMIT), LIMIT /
//! OFFSET as a Limit. `rows=` are estimates from ANALYZE's statistics
//! ([`crate::plan::estimate`]); for a table never analyzed, from PostgreSQL's default
//! selectivities over an assumed [`UNANALYZED_ROWS`] rows. Other shapes are refused
//! (0A000) rather than described approximately.

use sqlparser::ast::{self, Expr, Query, SelectItem, SetExpr, TableFactor};
use walrus_engine::access::datum::Datum;

use super::{dml, Env, Executor};
use crate::error::{SqlError, SqlResult};
use crate::expr::compiled::{Columns, Prepared};
use crate::names::ident;
use crate::plan::estimate::Estimator;
use crate::plan::{
    choose_access, contains_aggregate, contains_subquery, resolve_group_expr, table_cols, Access,
};
use crate::stats::{ColumnStatistics, TableStatistics};

/// The row count assumed for a table ANALYZE has not seen.
pub(crate) const UNANALYZED_ROWS: f64 = 1000.0;
/// Groups assumed when a grouping column has no statistics (PostgreSQL's 200).
const DEFAULT_GROUPS: f64 = 200.0;

/// One plan node: its name, estimated rows, detail lines and input.
struct Node {
    name: String,
    rows: f64,
    details: Vec<String>,
    input: Option<Box<Node>>,
}

impl Node {
    fn over(name: impl Into<String>, rows: f64, input: Node) -> Node {
        Node {
            name: name.into(),
            rows,
            details: Vec::new(),
            input: Some(Box::new(input)),
        }
    }

    /// PostgreSQL's text layout: an input is `->  ` indented under its parent, detail
    /// lines two places past the node's name.
    fn lines(&self, depth: usize, out: &mut Vec<String>) {
        let head = if depth == 0 {
            String::new()
        } else {
            format!("{}->  ", " ".repeat(6 * (depth - 1) + 2))
        };
        out.push(format!(
            "{head}{}  (rows={})",
            self.name,
            self.rows.round() as i64
        ));
        for d in &self.details {
            out.push(format!("{}{d}", " ".repeat(6 * depth + 2)));
        }
        if let Some(i) = &self.input {
            i.lines(depth + 1, out);
        }
    }
}

fn refuse(what: &str) -> SqlError {
    SqlError::unsupported(format!("EXPLAIN of {what} is not supported"))
}

/// The plan lines of `q` (see the module comment).
pub(crate) fn explain_query(
    env: &mut dyn Env,
    q: &Query,
    params: &[Datum],
) -> SqlResult<Vec<String>> {
    super::select::check_query(q)?;
    if !q.locks.is_empty() {
        return Err(SqlError::unsupported(
            "EXPLAIN of SELECT ... FOR UPDATE / FOR SHARE is not supported",
        ));
    }
    let SetExpr::Select(sel) = q.body.as_ref() else {
        return Err(refuse("a set operation or VALUES"));
    };
    super::select::check_select(sel)?;
    let mut exprs: Vec<&Expr> = Vec::new();
    for it in &sel.projection {
        match it {
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => exprs.push(e),
            _ => {}
        }
    }
    exprs.extend(sel.selection.as_ref());
    exprs.extend(sel.having.as_ref());
    let group: Vec<&Expr> = match &sel.group_by {
        ast::GroupByExpr::Expressions(g, _) => g.iter().collect(),
        ast::GroupByExpr::All(_) => return Err(refuse("GROUP BY ALL")),
    };
    exprs.extend(group.iter().copied());
    let order: Vec<&ast::OrderByExpr> = match q.order_by.as_ref().map(|o| &o.kind) {
        Some(ast::OrderByKind::Expressions(v)) => v.iter().collect(),
        Some(ast::OrderByKind::All(_)) => return Err(refuse("ORDER BY ALL")),
        None => Vec::new(),
    };
    exprs.extend(order.iter().map(|o| &o.expr));
    if exprs.iter().any(|e| contains_subquery(e)) {
        return Err(refuse("a query with subqueries"));
    }
    if exprs.iter().any(|e| has_window(e)) {
        return Err(refuse("a query with window functions"));
    }
    let exec = Executor::new(env, params);
    // The input: one user table, or none.
    // GROUP BY as the executor resolves it (output positions and aliases).
    let mut resolved: Vec<Expr> = group.iter().map(|g| (*g).clone()).collect();
    // The rows a top-N heap keeps (ORDER BY with LIMIT, no DISTINCT or aggregates).
    let aggregated = !group.is_empty()
        || sel.having.is_some()
        || sel.projection.iter().any(|it| match it {
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                contains_aggregate(e)
            }
            _ => false,
        });
    let top_n_cap = match exec.limits(q, None)? {
        (skip, take) if take != usize::MAX && !order.is_empty() => Some(skip.saturating_add(take)),
        _ => None,
    }
    .filter(|_| !aggregated && sel.distinct.is_none());
    let mut top_n_workers = 0;
    let (input, table_stats, workers) = match sel.from.as_slice() {
        [] => (
            Node {
                name: "Result".into(),
                rows: 1.0,
                details: Vec::new(),
                input: None,
            },
            None,
            0,
        ),
        [twj] if twj.joins.is_empty() => {
            let TableFactor::Table {
                name,
                alias,
                args: None,
                ..
            } = &twj.relation
            else {
                return Err(refuse("a FROM item other than a table"));
            };
            if alias.as_ref().is_some_and(|a| !a.columns.is_empty()) {
                return Err(refuse("a table alias with column names"));
            }
            let Some(def) = exec.user_table(name)? else {
                return Err(refuse("a catalog view"));
            };
            let qual = alias
                .as_ref()
                .map(|a| ident(&a.name))
                .unwrap_or_else(|| def.name.clone());
            let cols = table_cols(&qual, &def);
            let items = super::select::select_items(sel, &cols)?;
            resolved = group
                .iter()
                .map(|g| resolve_group_expr(g, &items, &cols))
                .collect::<SqlResult<_>>()?;
            let group: Vec<&Expr> = resolved.iter().collect();
            let mut env = exec.env.borrow_mut();
            let env: &mut dyn Env = &mut **env;
            let (now, settings) = (env.now(), env.settings());
            let get = move |n: &str| settings.get(n);
            let stats = dml::table_statistics(env, &def);
            let filter = sel.selection.as_ref();
            // The executor's own test for parallel top-N (`parallel.rs`).
            if let Some(cap) = top_n_cap {
                let names: Vec<String> = items.iter().map(|(n, _)| n.clone()).collect();
                let sort = super::SortKeys::new(q, &names, Some(&cols), params)?;
                let prepared: Vec<Prepared<'_>> = items
                    .iter()
                    .map(|(_, e)| Prepared::new(e, &Columns::Frame(&cols), params))
                    .collect();
                top_n_workers = super::parallel::top_n_workers(
                    env, &def, filter, &prepared, &sort, cap, params,
                )?;
            }
            let access = choose_access(&def, filter, params, now, &get, &mut || stats.clone());
            let assumed = TableStatistics {
                reltuples: UNANALYZED_ROWS,
                relpages: 0,
                columns: Vec::new(),
            };
            let est = Estimator {
                def: &def,
                stats: stats.as_ref().unwrap_or(&assumed),
                params,
                now,
                get: &get,
            };
            let alias_part = match alias {
                Some(a) => format!(" {}", ident(&a.name)),
                None => String::new(),
            };
            let mut node = match &access {
                Access::Index { index, key } => Node {
                    name: format!(
                        "Index Scan using {} on {}{alias_part}",
                        index.name, def.name
                    ),
                    rows: 1.0_f64.min(est.rows()),
                    details: vec![format!(
                        "Index Cond: ({})",
                        index
                            .columns
                            .iter()
                            .zip(key)
                            .map(|(c, k)| format!(
                                "{} = {}",
                                def.columns[*c].name,
                                crate::value::format_text(k).unwrap_or_else(|| "NULL".into())
                            ))
                            .collect::<Vec<_>>()
                            .join(" AND ")
                    )],
                    input: None,
                },
                Access::Range { index, lo, hi, .. } => {
                    let col = &def.columns[index.columns[0]].name;
                    let bound = |b: &std::ops::Bound<Datum>, lower: bool| match b {
                        std::ops::Bound::Included(d) => Some(format!(
                            "{col} {} {}",
                            if lower { ">=" } else { "<=" },
                            crate::value::format_text(d).unwrap_or_default()
                        )),
                        std::ops::Bound::Excluded(d) => Some(format!(
                            "{col} {} {}",
                            if lower { ">" } else { "<" },
                            crate::value::format_text(d).unwrap_or_default()
                        )),
                        std::ops::Bound::Unbounded => None,
                    };
                    let conds: Vec<String> = [bound(lo, true), bound(hi, false)]
                        .into_iter()
                        .flatten()
                        .collect();
                    Node {
                        name: format!(
                            "Index Scan using {} on {}{alias_part}",
                            index.name, def.name
                        ),
                        rows: est.filtered_rows(filter),
                        details: vec![format!("Index Cond: ({})", conds.join(" AND "))],
                        input: None,
                    }
                }
                Access::Scan => Node {
                    name: format!("Seq Scan on {}{alias_part}", def.name),
                    rows: est.filtered_rows(filter),
                    details: Vec::new(),
                    input: None,
                },
                Access::Nothing => Node {
                    name: "Result".into(),
                    rows: 0.0,
                    details: vec!["One-Time Filter: false".into()],
                    input: None,
                },
            };
            let filtered = !matches!(access, Access::Nothing | Access::Range { exact: true, .. });
            if let (Some(f), true) = (filter, filtered) {
                node.details.push(format!("Filter: ({f})"));
            }
            let group_rows = group_estimate(&group, stats.as_ref(), node.rows);
            // The executor's own test for a parallel plan (`parallel.rs`), over the same
            // calls it would stream.
            let mut level: Vec<&Expr> = sel
                .projection
                .iter()
                .filter_map(|it| match it {
                    SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                        Some(e)
                    }
                    _ => None,
                })
                .collect();
            level.extend(sel.having.as_ref());
            level.extend(order.iter().map(|o| &o.expr));
            let workers = match super::aggregate::streamable_calls(&level) {
                Some(calls) => super::parallel::level_workers(
                    env,
                    &def,
                    super::parallel::RowShape::Table(&def),
                    filter,
                    &group,
                    params,
                    &calls,
                )?,
                None => 0,
            };
            (node, Some(group_rows), workers)
        }
        _ => return Err(refuse("a join or several FROM items")),
    };
    let group: Vec<&Expr> = resolved.iter().collect();
    let mut node = input;
    if aggregated {
        let group_key = || {
            format!(
                "Group Key: {}",
                group
                    .iter()
                    .map(|g| g.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let groups = if group.is_empty() {
            1.0
        } else {
            table_stats.unwrap_or(1.0)
        };
        node = if workers > 0 {
            // PostgreSQL's shape: each participant aggregates its share of a Parallel
            // Seq Scan, the leader gathers and finishes the partial states. The scan's
            // rows are per participant (PostgreSQL's divisor, the leader counting for
            // what its gathering leaves it).
            node.name = node.name.replacen("Seq Scan", "Parallel Seq Scan", 1);
            node.rows /= parallel_divisor(workers);
            let kind = if group.is_empty() {
                "Aggregate"
            } else {
                "HashAggregate"
            };
            let mut partial = Node::over(format!("Partial {kind}"), groups, node);
            if !group.is_empty() {
                partial.details.push(group_key());
            }
            let mut gather = Node::over("Gather", groups * workers as f64, partial);
            gather.details.push(format!("Workers Planned: {workers}"));
            let mut finalize = Node::over(format!("Finalize {kind}"), groups, gather);
            if !group.is_empty() {
                finalize.details.push(group_key());
            }
            finalize
        } else if group.is_empty() {
            Node::over("Aggregate", 1.0, node)
        } else {
            let mut n = Node::over("HashAggregate", groups, node);
            n.details.push(group_key());
            n
        };
        if let Some(h) = &sel.having {
            node.details.push(format!("Filter: ({h})"));
        }
    }
    match &sel.distinct {
        None | Some(ast::Distinct::All) => {}
        Some(ast::Distinct::Distinct) => {
            let rows = node.rows;
            let keys = sel
                .projection
                .iter()
                .map(|it| it.to_string())
                .collect::<Vec<_>>()
                .join(", ");
            node = Node::over("HashAggregate", rows, node);
            node.details.push(format!("Group Key: {keys}"));
        }
        Some(ast::Distinct::On(_)) => return Err(refuse("SELECT DISTINCT ON")),
    }
    if top_n_workers > 0 {
        // PostgreSQL's shape: each participant sorts its share of a Parallel Seq Scan
        // (keeping its best rows), the leader merges the sorted streams.
        node.name = node.name.replacen("Seq Scan", "Parallel Seq Scan", 1);
        node.rows /= parallel_divisor(top_n_workers);
    }
    if !order.is_empty() {
        let rows = node.rows;
        node = Node::over("Sort", rows, node);
        node.details.push(format!(
            "Sort Key: {}",
            order
                .iter()
                .map(|o| {
                    let mut k = o.expr.to_string();
                    if matches!(o.options.sort, Some(ast::OrderBySort::Desc)) {
                        k.push_str(" DESC");
                    }
                    match o.options.nulls_first {
                        Some(true) => k.push_str(" NULLS FIRST"),
                        Some(false) => k.push_str(" NULLS LAST"),
                        None => {}
                    }
                    k
                })
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if let Some(cap) = top_n_cap.filter(|_| node.name == "Sort") {
        node.details
            .push(format!("Sort Method: top-N heapsort of {cap} rows"));
        if top_n_workers > 0 {
            let rows = node.rows * parallel_divisor(top_n_workers);
            node = Node::over("Gather Merge", rows, node);
            node.details
                .push(format!("Workers Planned: {top_n_workers}"));
        }
    }
    if q.limit_clause.is_some() || q.fetch.is_some() {
        let (skip, take) = exec.limits(q, None)?;
        let rows = (node.rows - skip as f64).max(0.0).min(take as f64);
        node = Node::over("Limit", rows, node);
    }
    let mut out = Vec::new();
    node.lines(0, &mut out);
    Ok(out)
}

/// PostgreSQL's divisor of a parallel scan's rows per participant: the helpers, and
/// the leader for what its gathering leaves it.
fn parallel_divisor(workers: usize) -> f64 {
    workers as f64 + (1.0 - 0.3 * workers as f64).max(0.0)
}

/// The estimated number of groups: the product of the grouping columns' distinct
/// counts, at most the input rows.
fn group_estimate(group: &[&Expr], stats: Option<&TableStatistics>, input: f64) -> f64 {
    let mut groups = 1.0;
    for g in group {
        let col: Option<&ColumnStatistics> = match g {
            Expr::Identifier(i) => stats.and_then(|s| s.column(&ident(i))),
            Expr::CompoundIdentifier(ids) => stats.and_then(|s| s.column(&ident(ids.last()?))),
            _ => None,
        };
        groups *= match (col, stats) {
            (Some(c), Some(s)) => {
                c.distinct_values(s.reltuples) + if c.null_frac > 0.0 { 1.0 } else { 0.0 }
            }
            _ => DEFAULT_GROUPS,
        };
    }
    groups.min(input.max(1.0)).round()
}

/// Whether `e` calls a window function (`... OVER (...)`).
fn has_window(e: &Expr) -> bool {
    let mut found = false;
    let _ = ast::visit_expressions(e, |x: &Expr| {
        if let Expr::Function(f) = x {
            found |= f.over.is_some();
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    found
}
