//! `WITH RECURSIVE` at the top of a SELECT, evaluated as PostgreSQL does: each CTE of
//! the form `non-recursive UNION [ALL] recursive` runs its non-recursive term, then its
//! recursive term over the rows the last round added (the working table) until a round
//! adds none; `UNION` drops rows already produced. The rows are then given to the rest
//! of the statement as a VALUES list of typed literals in place of each reference (the
//! executor runs the query unchanged). CTEs of the list that do not refer to themselves
//! are inlined as derived tables, as without RECURSIVE. A recursive reference anywhere
//! but the recursive term's FROM list, mutual recursion, and recursive WITH below the
//! top level are 0A000.

use std::collections::HashSet;
use std::ops::ControlFlow;

use sqlparser::ast::{
    Query, SetExpr, SetOperator, SetQuantifier, TableFactor, Visit, VisitMut, Visitor, VisitorMut,
};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;
use walrus_engine::access::datum::{Datum, TypeId};

use super::Session;
use crate::error::{SqlError, SqlResult};
use crate::exec;
use crate::names::ident;
use crate::result::QueryResult;
use crate::value::format_text;

/// Whether `q` names table `name` (unqualified) anywhere.
fn refers_to(q: &Query, name: &str) -> bool {
    struct Finder<'a>(&'a str);
    impl Visitor for Finder<'_> {
        type Break = ();
        fn pre_visit_table_factor(&mut self, t: &TableFactor) -> ControlFlow<()> {
            if let TableFactor::Table {
                name, args: None, ..
            } = t
            {
                if name.0.len() == 1 && name.0[0].as_ident().is_some_and(|i| ident(i) == self.0) {
                    return ControlFlow::Break(());
                }
            }
            ControlFlow::Continue(())
        }
    }
    q.visit(&mut Finder(name)).is_break()
}

/// How many times `q` names table `name` (unqualified).
fn reference_count(q: &Query, name: &str) -> usize {
    struct Counter<'a>(&'a str, usize);
    impl Visitor for Counter<'_> {
        type Break = ();
        fn pre_visit_table_factor(&mut self, t: &TableFactor) -> ControlFlow<()> {
            if let TableFactor::Table {
                name, args: None, ..
            } = t
            {
                if name.0.len() == 1 && name.0[0].as_ident().is_some_and(|i| ident(i) == self.0) {
                    self.1 += 1;
                }
            }
            ControlFlow::Continue(())
        }
    }
    let mut c = Counter(name, 0);
    let _ = q.visit(&mut c);
    c.1
}

/// References to `name` in the FROM items of `q`'s SELECT (derived tables included),
/// not in its other clauses.
fn reference_count_in_from(q: &Query, name: &str) -> usize {
    let SetExpr::Select(sel) = q.body.as_ref() else {
        return 0;
    };
    sel.from
        .iter()
        .map(|twj| {
            let only_from = Query {
                body: Box::new(SetExpr::Select(Box::new(sqlparser::ast::Select {
                    from: vec![twj.clone()],
                    projection: vec![],
                    selection: None,
                    having: None,
                    ..(**sel).clone()
                }))),
                order_by: None,
                with: None,
                ..q.clone()
            };
            reference_count(&only_from, name)
        })
        .sum()
}

/// PostgreSQL's rules for the recursive term: one reference, in its own FROM list (not
/// in a subquery), no aggregates or grouping; an outer join walrus does not check the
/// side of is refused.
fn check_recursive_term(step: &Query, name: &str) -> SqlResult<()> {
    let misplaced = |what: &str| {
        SqlError::new(
            "42P19",
            format!("recursive reference to query \"{name}\" must not appear {what}"),
        )
    };
    if reference_count(step, name) > 1 {
        return Err(misplaced("more than once"));
    }
    let SetExpr::Select(sel) = step.body.as_ref() else {
        return Err(SqlError::unsupported(
            "a recursive term other than a plain SELECT is not supported",
        ));
    };
    // The one reference must be reachable through the FROM list (a derived table
    // counts, as in PostgreSQL), not in an expression's subquery.
    let in_from = reference_count_in_from(step, name);
    if in_from == 0 {
        return Err(misplaced("within a subquery"));
    }
    let outer = sel.from.iter().flat_map(|t| &t.joins).any(|j| {
        !matches!(
            j.join_operator,
            sqlparser::ast::JoinOperator::Inner(_)
                | sqlparser::ast::JoinOperator::Join(_)
                | sqlparser::ast::JoinOperator::CrossJoin(_)
        )
    });
    if outer {
        return Err(SqlError::unsupported(
            "outer joins in a recursive term are not supported",
        ));
    }
    let grouped = !matches!(&sel.group_by, sqlparser::ast::GroupByExpr::Expressions(g, _) if g.is_empty())
        || sel.having.is_some()
        || sel.projection.iter().any(|p| match p {
            sqlparser::ast::SelectItem::UnnamedExpr(e)
            | sqlparser::ast::SelectItem::ExprWithAlias { expr: e, .. } => {
                crate::plan::contains_aggregate(e)
            }
            _ => false,
        });
    if grouped {
        return Err(SqlError::new(
            "42P19",
            "aggregate functions are not allowed in a recursive query's recursive term",
        ));
    }
    Ok(())
}

/// A SQL literal that reads back as exactly `d` (typed by `ty`, the column's type).
fn literal(d: &Datum, ty: TypeId) -> String {
    let cast = ty.name();
    match format_text(d) {
        None => format!("NULL::{cast}"),
        Some(t) => format!("'{}'::{cast}", t.replace('\'', "''")),
    }
}

/// The rows as a query: `VALUES (...), ...` or, with none, a SELECT of typed NULLs that
/// returns nothing.
fn rows_query(rows: &[Vec<Datum>], types: &[TypeId]) -> SqlResult<Query> {
    let sql = if rows.is_empty() {
        let cols: Vec<String> = types
            .iter()
            .map(|t| format!("NULL::{}", t.name()))
            .collect();
        format!("SELECT {} WHERE false", cols.join(", "))
    } else {
        let mut s = String::from("VALUES ");
        for (i, r) in rows.iter().enumerate() {
            if i > 0 {
                s.push_str(", ");
            }
            let items: Vec<String> = r.iter().zip(types).map(|(d, t)| literal(d, *t)).collect();
            s.push('(');
            s.push_str(&items.join(", "));
            s.push(')');
        }
        s
    };
    let st = Parser::parse_sql(&PostgreSqlDialect {}, &sql)
        .map_err(|e| SqlError::new("XX000", format!("recursive CTE rows: {e}")))?;
    match st.into_iter().next() {
        Some(sqlparser::ast::Statement::Query(q)) => Ok(*q),
        _ => Err(SqlError::new(
            "XX000",
            "recursive CTE rows did not parse as a query",
        )),
    }
}

/// Replaces every FROM reference to `name` in `q` by `rows` as a derived table named
/// `name` with `columns`.
fn substitute(q: &mut Query, name: &str, rows: &Query, columns: &[String]) {
    struct Sub<'a> {
        name: &'a str,
        rows: &'a Query,
        columns: &'a [String],
    }
    impl VisitorMut for Sub<'_> {
        type Break = ();
        fn post_visit_table_factor(&mut self, t: &mut TableFactor) -> ControlFlow<()> {
            let TableFactor::Table {
                name,
                alias,
                args: None,
                ..
            } = t
            else {
                return ControlFlow::Continue(());
            };
            if name.0.len() != 1 || name.0[0].as_ident().is_none_or(|i| ident(i) != self.name) {
                return ControlFlow::Continue(());
            }
            let mut alias = alias.take().unwrap_or(sqlparser::ast::TableAlias {
                explicit: false,
                name: sqlparser::ast::Ident::new(self.name),
                columns: Vec::new(),
                at: None,
            });
            if alias.columns.is_empty() {
                alias.columns = self
                    .columns
                    .iter()
                    .map(|c| sqlparser::ast::TableAliasColumnDef::from_name(c.clone()))
                    .collect();
            }
            *t = TableFactor::Derived {
                lateral: false,
                subquery: Box::new(self.rows.clone()),
                alias: Some(alias),
                sample: None,
            };
            ControlFlow::Continue(())
        }
    }
    let _ = q.visit(&mut Sub {
        name,
        rows,
        columns,
    });
}

impl Session {
    /// Runs a SELECT whose WITH is RECURSIVE (see the module comment).
    pub(super) fn recursive_select(
        &mut self,
        q: &Query,
        params: &[Datum],
    ) -> SqlResult<QueryResult> {
        let mut q = q.clone();
        let Some(with) = q.with.take() else {
            return exec::select(self, &q, params);
        };
        // Earlier CTEs, materialized or inlined, are substituted into later ones.
        let mut done: Vec<(String, Query, Vec<String>)> = Vec::new();
        for cte in with.cte_tables {
            let name = ident(&cte.alias.name);
            let mut body = *cte.query;
            for (n, rows, cols) in &done {
                substitute(&mut body, n, rows, cols);
            }
            let alias_cols: Vec<String> =
                cte.alias.columns.iter().map(|c| ident(&c.name)).collect();
            if !refers_to(&body, &name) {
                let r = exec::select(self, &body, params)?;
                let cols = if alias_cols.is_empty() {
                    r.columns.iter().map(|c| c.name.clone()).collect()
                } else {
                    alias_cols
                };
                let types: Vec<TypeId> = r.columns.iter().map(|c| c.ty).collect();
                done.push((name, rows_query(&r.rows, &types)?, cols));
                continue;
            }
            let SetExpr::SetOperation {
                op: SetOperator::Union,
                set_quantifier,
                left,
                right,
            } = body.body.as_ref()
            else {
                return Err(SqlError::unsupported(format!(
                    "recursive query \"{name}\" must be of the form non-recursive-term UNION [ALL] recursive-term"
                )));
            };
            let all = match set_quantifier {
                SetQuantifier::All => true,
                SetQuantifier::None | SetQuantifier::Distinct => false,
                other => {
                    return Err(SqlError::unsupported(format!(
                        "UNION {other} in a recursive query is not supported"
                    )))
                }
            };
            if body.order_by.is_some() || body.limit_clause.is_some() || body.fetch.is_some() {
                return Err(SqlError::unsupported(
                    "ORDER BY / LIMIT in a recursive query is not supported",
                ));
            }
            let term = |e: &SetExpr| Query {
                body: Box::new(e.clone()),
                ..Query::clone(&body)
            };
            let (base, step) = (term(left), term(right));
            if refers_to(&base, &name) {
                return Err(SqlError::unsupported(format!(
                    "recursive reference to query \"{name}\" in its non-recursive term is not supported"
                )));
            }
            check_recursive_term(&step, &name)?;
            let first = exec::select(self, &base, params)?;
            let cols: Vec<String> = if alias_cols.is_empty() {
                first.columns.iter().map(|c| c.name.clone()).collect()
            } else {
                if alias_cols.len() != first.columns.len() {
                    return Err(SqlError::new(
                        "42P10",
                        format!(
                            "WITH query \"{name}\" has {} columns available but {} columns specified",
                            first.columns.len(),
                            alias_cols.len()
                        ),
                    ));
                }
                alias_cols
            };
            let types: Vec<TypeId> = first.columns.iter().map(|c| c.ty).collect();
            let mut seen: HashSet<String> = HashSet::new();
            // Rows equal by PostgreSQL's equality are duplicates for UNION.
            let key = |r: &Vec<Datum>| exec::row_key(r);
            let mut result: Vec<Vec<Datum>> = Vec::new();
            let mut working: Vec<Vec<Datum>> = Vec::new();
            for r in first.rows {
                if all || seen.insert(key(&r)) {
                    working.push(r.clone());
                    result.push(r);
                }
            }
            while !working.is_empty() {
                if self.interrupt.load(std::sync::atomic::Ordering::Acquire) {
                    return Err(SqlError::new(
                        "57014",
                        "canceling statement due to user request",
                    ));
                }
                let mut step_q = step.clone();
                substitute(&mut step_q, &name, &rows_query(&working, &types)?, &cols);
                let r = exec::select(self, &step_q, params)?;
                working.clear();
                for row in r.rows {
                    // The recursive term's values take the non-recursive term's types.
                    let row = row
                        .into_iter()
                        .zip(&types)
                        .map(|(d, t)| crate::expr::coerce(d, *t))
                        .collect::<SqlResult<Vec<_>>>()?;
                    if all || seen.insert(key(&row)) {
                        self.memory.charge_row(&row)?;
                        working.push(row.clone());
                        result.push(row);
                    }
                }
            }
            done.push((name, rows_query(&result, &types)?, cols));
        }
        for (n, rows, cols) in &done {
            substitute(&mut q, n, rows, cols);
        }
        exec::select(self, &q, params)
    }
}
