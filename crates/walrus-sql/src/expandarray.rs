//! `information_schema._pg_expandarray(array)`, the set-returning function pgjdbc's
//! `DatabaseMetaData.getPrimaryKeys` and `getIndexInfo` call in a select list (the latter
//! over `pg_index.indkey`, without the composite column), as a rewrite into a LATERAL
//! join the executor runs (`exec/from.rs` has the function in FROM: rows `(x, n)`, each
//! element with its 1-based position).
//!
//! Only the shape pgjdbc sends is rewritten, where PostgreSQL's answer is kept exactly:
//!
//! ```sql
//! SELECT ... FROM (SELECT ..., (information_schema._pg_expandarray(E)).n AS key_seq, ...,
//!                  information_schema._pg_expandarray(E) AS keys, ... FROM ...) result
//! WHERE ... (result.keys).x ...
//! ```
//!
//! Every call in the inner select list has the same argument, so PostgreSQL (10+)
//! expands them in lock step: one output row per element of E for each input row, none
//! for a NULL or empty array: the same rows as `CROSS JOIN LATERAL
//! _pg_expandarray(E)` after the inner FROM. The composite `keys` column is used
//! outside only as `(result.keys).x` / `.n` (no `*` there), so it becomes two plain
//! columns. Any other use of the function is left alone (and fails as an unknown
//! function in a select list).

use std::ops::ControlFlow;

use sqlparser::ast::{
    AccessExpr, Expr, Ident, Query, SelectItem, SetExpr, Statement, TableFactor, VisitMut,
    VisitorMut,
};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;

use crate::names::ident;

/// The join alias the rewrite gives the function's rows.
const ROWS: &str = "_pg_expandarray";

/// The argument of `information_schema._pg_expandarray(arg)`.
fn call_arg(e: &Expr) -> Option<&Expr> {
    let e = match e {
        Expr::Nested(inner) => inner,
        other => other,
    };
    let Expr::Function(f) = e else { return None };
    let parts: Vec<String> = f
        .name
        .0
        .iter()
        .filter_map(|p| p.as_ident())
        .map(ident)
        .collect();
    if parts != ["information_schema", "_pg_expandarray"] || f.over.is_some() {
        return None;
    }
    let sqlparser::ast::FunctionArguments::List(list) = &f.args else {
        return None;
    };
    match list.args.as_slice() {
        [sqlparser::ast::FunctionArg::Unnamed(sqlparser::ast::FunctionArgExpr::Expr(a))]
            if list.clauses.is_empty() && list.duplicate_treatment.is_none() =>
        {
            Some(a)
        }
        _ => None,
    }
}

/// `(root).x` or `(root).n`: the root and the field.
fn field_access(e: &Expr) -> Option<(&Expr, &'static str)> {
    let Expr::CompoundFieldAccess { root, access_chain } = e else {
        return None;
    };
    let [AccessExpr::Dot(Expr::Identifier(f))] = access_chain.as_slice() else {
        return None;
    };
    let field = match ident(f).as_str() {
        "x" => "x",
        "n" => "n",
        _ => return None,
    };
    Some((root, field))
}

fn mentions_call(e: &Expr) -> bool {
    e.to_string()
        .to_ascii_lowercase()
        .contains("_pg_expandarray")
}

fn parse_expr(sql: &str) -> Option<Expr> {
    Parser::new(&PostgreSqlDialect {})
        .try_with_sql(sql)
        .ok()?
        .parse_expr()
        .ok()
}

/// Rewrites pgjdbc's shape in `st` (see the module doc); anything else is left as is.
pub(crate) fn rewrite(st: &mut Statement) {
    // Cheap structural test first: every statement passes here once after parsing.
    let candidate = || -> Option<bool> {
        let Statement::Query(q) = &*st else {
            return None;
        };
        let SetExpr::Select(outer) = q.body.as_ref() else {
            return None;
        };
        let [from] = outer.from.as_slice() else {
            return None;
        };
        let TableFactor::Derived { subquery, .. } = &from.relation else {
            return None;
        };
        let SetExpr::Select(inner) = subquery.body.as_ref() else {
            return None;
        };
        Some(inner.projection.iter().any(|i| match i {
            SelectItem::ExprWithAlias { expr, .. } | SelectItem::UnnamedExpr(expr) => {
                mentions_call(expr)
            }
            _ => false,
        }))
    };
    if candidate() != Some(true) {
        return;
    }
    let mut copy = st.clone();
    if rewrite_query(&mut copy).is_some() {
        *st = copy;
    }
}

fn rewrite_query(st: &mut Statement) -> Option<()> {
    let Statement::Query(q) = st else { return None };
    let SetExpr::Select(outer) = q.body.as_mut() else {
        return None;
    };
    let [from] = outer.from.as_mut_slice() else {
        return None;
    };
    if !from.joins.is_empty() {
        return None;
    }
    let TableFactor::Derived {
        subquery,
        alias: Some(result),
        lateral: false,
        ..
    } = &mut from.relation
    else {
        return None;
    };
    let result = ident(&result.name);
    let SetExpr::Select(inner) = subquery.body.as_mut() else {
        return None;
    };
    // The inner select list: every call has one argument, the same.
    let mut arg: Option<Expr> = None;
    let mut composite: Option<String> = None;
    let mut new_items = Vec::with_capacity(inner.projection.len() + 1);
    let mut same_arg = |a: &Expr| match &arg {
        None => {
            arg = Some(a.clone());
            true
        }
        Some(prev) => prev == a,
    };
    for item in &inner.projection {
        let (expr, alias) = match item {
            SelectItem::ExprWithAlias { expr, alias } => (expr, Some(alias)),
            SelectItem::UnnamedExpr(expr) => (expr, None),
            _ => {
                new_items.push(item.clone());
                continue;
            }
        };
        if !mentions_call(expr) {
            new_items.push(item.clone());
            continue;
        }
        if let Some((root, field)) = field_access(expr) {
            let a = call_arg(root)?;
            if !same_arg(a) {
                return None;
            }
            let alias = alias.cloned().unwrap_or_else(|| Ident::new(field));
            new_items.push(SelectItem::ExprWithAlias {
                expr: parse_expr(&format!("{ROWS}.{field}"))?,
                alias,
            });
        } else {
            let a = call_arg(expr)?;
            if !same_arg(a) || composite.is_some() {
                return None;
            }
            let name = ident(alias?);
            for field in ["x", "n"] {
                new_items.push(SelectItem::ExprWithAlias {
                    expr: parse_expr(&format!("{ROWS}.{field}"))?,
                    alias: Ident::with_quote('"', format!("{name}.{field}")),
                });
            }
            composite = Some(name);
        }
    }
    let arg = arg?;
    // Grouping, aggregates and window functions run before a select-list SRF expands,
    // but after a LATERAL join: such a query is left alone.
    let grouped = match &inner.group_by {
        sqlparser::ast::GroupByExpr::Expressions(e, m) => !e.is_empty() || !m.is_empty(),
        _ => true,
    };
    let aggregate_or_window = inner.projection.iter().any(|i| match i {
        SelectItem::ExprWithAlias { expr, .. } | SelectItem::UnnamedExpr(expr) => {
            crate::plan::contains_aggregate(expr)
                || expr.to_string().to_ascii_uppercase().contains(" OVER ")
        }
        _ => false,
    });
    if grouped || aggregate_or_window || inner.having.is_some() {
        return None;
    }
    if inner.from.is_empty()
        || [&inner.selection, &inner.having]
            .into_iter()
            .flatten()
            .any(mentions_call)
    {
        return None;
    }
    // The LATERAL join after the inner FROM, built from its SQL text.
    let join_sql = format!(
        "SELECT 1 FROM t CROSS JOIN LATERAL information_schema._pg_expandarray({arg}) AS {ROWS}"
    );
    let parsed = Parser::parse_sql(&PostgreSqlDialect {}, &join_sql).ok()?;
    let Some(Statement::Query(jq)) = parsed.into_iter().next() else {
        return None;
    };
    let SetExpr::Select(js) = *jq.body else {
        return None;
    };
    let join = js.from.into_iter().next()?.joins.into_iter().next()?;
    inner.projection = new_items;
    inner.from.last_mut()?.joins.push(join);

    // The outer query: `(result.keys).x` becomes the plain column; no other use of the
    // composite column (and no `*`) may remain.
    if let Some(name) = composite {
        if outer.projection.iter().any(|i| {
            matches!(
                i,
                SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..)
            )
        }) {
            return None;
        }
        struct Fields<'a> {
            result: &'a str,
            name: &'a str,
            stray: bool,
        }
        impl VisitorMut for Fields<'_> {
            type Break = ();
            fn pre_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
                if let Some((root, field)) = field_access(e) {
                    let root = match root {
                        Expr::Nested(r) => r.as_ref(),
                        r => r,
                    };
                    if let Expr::CompoundIdentifier(parts) = root {
                        let parts: Vec<String> = parts.iter().map(ident).collect();
                        if parts == [self.result, self.name] {
                            *e = Expr::CompoundIdentifier(vec![
                                Ident::new(self.result),
                                Ident::with_quote('"', format!("{}.{field}", self.name)),
                            ]);
                            return ControlFlow::Continue(());
                        }
                    }
                }
                match e {
                    Expr::Identifier(i) if ident(i) == self.name => self.stray = true,
                    Expr::CompoundIdentifier(p)
                        if p.last().is_some_and(|i| ident(i) == self.name) =>
                    {
                        self.stray = true
                    }
                    _ => {}
                }
                ControlFlow::Continue(())
            }
        }
        let mut v = Fields {
            result: &result,
            name: &name,
            stray: false,
        };
        let q: &mut Query = q;
        let _ = q.visit(&mut v);
        if v.stray {
            return None;
        }
    }
    Some(())
}

/// `information_schema._pg_expandarray(array)` in FROM: a row `(x, n)` per element, `n`
/// counting from 1; no rows for NULL. `qual` is the name its columns are reached by.
pub(crate) fn rows(
    vals: &[walrus_engine::access::datum::Datum],
    qual: String,
    memory: &crate::memory::MemoryBudget,
) -> crate::error::SqlResult<crate::rel::Rel> {
    use walrus_engine::access::datum::{Datum, TypeId};
    let [arr] = vals else {
        return Err(crate::error::SqlError::new(
            "42883",
            "function information_schema._pg_expandarray() takes one array",
        ));
    };
    let items = match arr {
        Datum::Null => Vec::new(),
        // The catalog's int2[] columns (`pg_constraint.conkey`) are text in walrus: their
        // elements are read as the int2 they are in PostgreSQL.
        Datum::Text(t) => match crate::value::parse_array(TypeId::Int2, t)? {
            Datum::Array(a) => a.items,
            _ => Vec::new(),
        },
        // `pg_index.indkey`: `n` counts from 1 whatever the lower bound (0 here), as
        // the function's body subtracts `array_lower`.
        Datum::Int2Vector(v) => v.iter().copied().map(Datum::Int2).collect(),
        other => crate::expr::array_items(other)?,
    };
    let elem_ty = items
        .iter()
        .find_map(|d| d.type_id())
        .or_else(|| match arr {
            Datum::Int2Vector(_) => Some(TypeId::Int2),
            other => other.type_id().and_then(|t| t.elem()),
        });
    let rows: Vec<Vec<Datum>> = items
        .into_iter()
        .enumerate()
        .map(|(i, x)| vec![x, Datum::Int4(i as i32 + 1)])
        .collect();
    memory.charge_rows(&rows)?;
    let col = |name: &str, ty| crate::rel::ColName {
        qual: Some(qual.clone()),
        name: name.to_string(),
        ty,
        bpchar: false,
        hidden: false,
        origin: None,
    };
    Ok(crate::rel::Rel {
        cols: vec![col("x", elem_ty), col("n", Some(TypeId::Int4))],
        rows,
    })
}
