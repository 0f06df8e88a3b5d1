//! Rewrites of a parsed statement into forms the executor already runs, applied once
//! after parsing:
//! - a non-recursive `WITH` list is inlined: each reference to a CTE by its bare name
//!   becomes a derived table of its query (PostgreSQL 15 inlines such CTEs too; the
//!   answers are the same because walrus has no volatile functions a second evaluation
//!   could change). A top-level `WITH RECURSIVE` is left for the session to evaluate
//!   (`session/recursive.rs`); data-modifying CTEs are 0A000, and one below the top
//!   level is replaced by a query whose evaluation is the 0A000 refusal
//!   (`REFUSAL_FUNCTION`), so a statement fails only if it runs it (asyncpg's type
//!   introspection has one in a CASE branch only domains take).
//! - `current_schema` written without parentheses is the function (a keyword in
//!   PostgreSQL; sqlparser reads it as a column name).
//! - `SELECT pg_partition_ancestors(rel)` (psql's `\d` asks it for the tables that
//!   reference one) returns no rows: walrus has no partitions, and PostgreSQL returns
//!   none for a relation that is neither a partition nor partitioned.

use std::ops::ControlFlow;

use sqlparser::ast::{
    Expr, Function, FunctionArguments, GroupByExpr, Ident, ObjectName, Query, SetExpr, Statement,
    TableAlias, TableFactor, VisitMut, VisitorMut,
};

use crate::error::{SqlError, SqlResult};
use crate::names::ident;

/// Applies every rewrite to `st`.
pub(crate) fn rewrite(st: &mut Statement) -> SqlResult<()> {
    crate::expandarray::rewrite(st);
    let mut v = Rewriter;
    // A top-level WITH RECURSIVE is evaluated by the session (session/recursive.rs):
    // kept, its CTEs and the rest rewritten apart.
    if let Statement::Query(q) = st {
        if q.with.as_ref().is_some_and(|w| w.recursive) {
            let mut with = q.with.take();
            let rest = q.visit(&mut v);
            for cte in with.iter_mut().flat_map(|w| w.cte_tables.iter_mut()) {
                if let ControlFlow::Break(e) = cte.query.visit(&mut v) {
                    return Err(e);
                }
            }
            q.with = with;
            return match rest {
                ControlFlow::Break(e) => Err(e),
                ControlFlow::Continue(()) => Ok(()),
            };
        }
    }
    match st.visit(&mut v) {
        ControlFlow::Break(e) => Err(e),
        ControlFlow::Continue(()) => Ok(()),
    }
}

struct Rewriter;

impl VisitorMut for Rewriter {
    type Break = SqlError;

    fn post_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<SqlError> {
        if let Expr::Identifier(i) = e {
            if i.quote_style.is_none() && i.value.eq_ignore_ascii_case("current_schema") {
                *e = Expr::Function(Function {
                    name: ObjectName::from(vec![Ident::new("current_schema")]),
                    uses_odbc_syntax: false,
                    parameters: FunctionArguments::None,
                    args: FunctionArguments::None,
                    null_treatment: None,
                    filter: None,
                    over: None,
                    within_group: vec![],
                });
            }
        }
        ControlFlow::Continue(())
    }

    /// Queries are left in post-order, so an inner `WITH` is inlined before an outer one
    /// and an inner CTE shadows an outer one of the same name.
    fn pre_visit_query(&mut self, q: &mut Query) -> ControlFlow<SqlError> {
        partition_ancestors_of_a_plain_table(q);
        match check_group_by_constants(&q.body) {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => ControlFlow::Break(e),
        }
    }

    fn post_visit_query(&mut self, q: &mut Query) -> ControlFlow<SqlError> {
        match inline_with(q) {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => ControlFlow::Break(e),
        }
    }
}

/// `SELECT [pg_catalog.]pg_partition_ancestors(x)` with no FROM becomes `SELECT
/// x::regclass WHERE false`: the same column, no rows (see the module comment). Not
/// inlined into the visitor, which recurses per query level.
#[inline(never)]
fn partition_ancestors_of_a_plain_table(q: &mut Query) {
    // The SELECTs of the query's body, set operations walked without recursion.
    let mut pending = vec![q.body.as_mut()];
    while let Some(set) = pending.pop() {
        match set {
            SetExpr::SetOperation { left, right, .. } => {
                pending.push(left);
                pending.push(right);
            }
            SetExpr::Select(sel) => partition_ancestors_select(sel),
            _ => {}
        }
    }
}

fn partition_ancestors_select(sel: &mut sqlparser::ast::Select) {
    if !sel.from.is_empty() || sel.selection.is_some() {
        return;
    }
    let [sqlparser::ast::SelectItem::UnnamedExpr(Expr::Function(f))] = sel.projection.as_slice()
    else {
        return;
    };
    let name: Vec<String> = f
        .name
        .0
        .iter()
        .filter_map(|p| p.as_ident())
        .map(ident)
        .collect();
    if !matches!(
        name.iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .as_slice(),
        ["pg_partition_ancestors"] | ["pg_catalog", "pg_partition_ancestors"]
    ) {
        return;
    }
    let FunctionArguments::List(list) = &f.args else {
        return;
    };
    let [sqlparser::ast::FunctionArg::Unnamed(sqlparser::ast::FunctionArgExpr::Expr(arg))] =
        list.args.as_slice()
    else {
        return;
    };
    let cast = Expr::Cast {
        kind: sqlparser::ast::CastKind::DoubleColon,
        expr: Box::new(arg.clone()),
        data_type: sqlparser::ast::DataType::Regclass,
        format: None,
    };
    sel.projection = vec![sqlparser::ast::SelectItem::ExprWithAlias {
        expr: cast,
        alias: Ident::new("pg_partition_ancestors"),
    }];
    sel.selection = Some(Expr::Value(sqlparser::ast::Value::Boolean(false).into()));
}

/// One CTE ready to inline: its name, column names and query.
struct Cte {
    name: String,
    alias: TableAlias,
    query: Query,
}

/// A constant in GROUP BY is a select-list position, and only an integer can be one
/// (`GROUP BY 'x'`, `false`, `1.5`, NULL: 42601, PostgreSQL's
/// findTargetlistEntrySQL92). Checked here, for every SELECT of the statement before
/// any row is read, as PostgreSQL checks it while parsing: the executor would meet a
/// SELECT in a subquery that is never run, or after a data error, only too late.
/// (Set-operation chains are walked without recursion: they can be long.)
fn check_group_by_constants(body: &SetExpr) -> SqlResult<()> {
    let mut pending = vec![body];
    while let Some(set) = pending.pop() {
        match set {
            SetExpr::SetOperation { left, right, .. } => {
                pending.push(left);
                pending.push(right);
            }
            SetExpr::Select(sel) => {
                if let GroupByExpr::Expressions(exprs, _) = &sel.group_by {
                    for e in exprs {
                        crate::plan::check_group_by_constant(e)?;
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

fn inline_with(q: &mut Query) -> SqlResult<()> {
    crate::stack::check()?;
    let Some(with) = q.with.take() else {
        return Ok(());
    };
    if with.recursive {
        // Refused when it runs, not when the statement is parsed: asyncpg's type
        // introspection has one in a CASE branch only domains take (walrus has none),
        // and the rest of that query runs.
        *q = refusal_query();
        return Ok(());
    }
    let mut ctes: Vec<Cte> = Vec::new();
    for cte in with.cte_tables {
        if cte.from.is_some() {
            return Err(SqlError::unsupported(format!(
                "WITH {} FROM is not supported",
                cte.alias.name
            )));
        }
        if !matches!(
            cte.query.body.as_ref(),
            SetExpr::Select(_)
                | SetExpr::Query(_)
                | SetExpr::SetOperation { .. }
                | SetExpr::Values(_)
        ) {
            return Err(SqlError::unsupported(
                "data-modifying statements in WITH are not supported",
            ));
        }
        let name = ident(&cte.alias.name);
        if ctes.iter().any(|c| c.name == name) {
            return Err(SqlError::new(
                "42712",
                format!("WITH query name \"{name}\" specified more than once"),
            ));
        }
        let mut query = *cte.query;
        // A CTE sees the ones before it.
        replace_refs(&mut query, &ctes)?;
        ctes.push(Cte {
            name,
            alias: cte.alias,
            query,
        });
    }
    replace_refs(q, &ctes)
}

/// The function a query walrus cannot run is replaced by: evaluating it is the refusal
/// (0A000 with its message argument), so the statement fails only if the query runs.
pub(crate) const REFUSAL_FUNCTION: &str = "walrus_refused";

/// A query standing for a WITH RECURSIVE below the top level: one row whose value is the
/// refusal.
fn refusal_query() -> Query {
    let sql = format!(
        "select {REFUSAL_FUNCTION}('WITH RECURSIVE below the top level of a statement is not supported')"
    );
    match sqlparser::parser::Parser::parse_sql(&sqlparser::dialect::PostgreSqlDialect {}, &sql)
        .ok()
        .and_then(|mut v| v.pop())
    {
        Some(Statement::Query(q)) => *q,
        _ => unreachable!("the refusal query parses"),
    }
}

/// Replaces every FROM reference to one of `ctes` in `q` by a derived table.
fn replace_refs(q: &mut Query, ctes: &[Cte]) -> SqlResult<()> {
    crate::stack::check()?;
    if ctes.is_empty() {
        return Ok(());
    }
    struct Refs<'a>(&'a [Cte]);
    impl VisitorMut for Refs<'_> {
        type Break = SqlError;
        // After the children: the inlined query is not visited again, so a CTE whose
        // query names a real table of its own name does not recurse.
        fn post_visit_table_factor(&mut self, t: &mut TableFactor) -> ControlFlow<SqlError> {
            let TableFactor::Table {
                name,
                alias,
                args: None,
                ..
            } = t
            else {
                return ControlFlow::Continue(());
            };
            if name.0.len() != 1 {
                return ControlFlow::Continue(());
            }
            let Some(id) = name.0[0].as_ident() else {
                return ControlFlow::Continue(());
            };
            let n = ident(id);
            let Some(cte) = self.0.iter().find(|c| c.name == n) else {
                return ControlFlow::Continue(());
            };
            let alias = match alias.take() {
                Some(mut a) => {
                    if a.columns.is_empty() {
                        a.columns = cte.alias.columns.clone();
                    }
                    a
                }
                None => cte.alias.clone(),
            };
            *t = TableFactor::Derived {
                lateral: false,
                subquery: Box::new(cte.query.clone()),
                alias: Some(alias),
                sample: None,
            };
            ControlFlow::Continue(())
        }
    }
    match q.visit(&mut Refs(ctes)) {
        ControlFlow::Break(e) => Err(e),
        ControlFlow::Continue(()) => Ok(()),
    }
}
