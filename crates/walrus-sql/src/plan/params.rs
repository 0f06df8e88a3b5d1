//! Parameter types for the extended protocol's Describe, as PostgreSQL OIDs: each `$n`
//! the client left unspecified takes the type of where it is used (assigned to or
//! inserted into a column: the column's declared type; compared with a column; a LIMIT;
//! cast with `$n::type`); what this cannot tell stays 0 (the caller reports text, as
//! PostgreSQL resolves an unknown parameter in a select list).

use std::sync::Arc;

use sqlparser::ast::{self, Expr, SetExpr, Statement, TableFactor};
use walrus_engine::access::datum::TypeId;
use walrus_engine::catalog::{ColumnDef, DeclaredType, TableDef};

use crate::expr::sql_type_oid;
use crate::names::{ident, object_name};
use crate::rel::column_type_oid;

/// `n` of a `$n` placeholder expression.
fn placeholder(e: &Expr) -> Option<usize> {
    match e {
        Expr::Value(v) => match &v.value {
            ast::Value::Placeholder(p) => p.trim_start_matches('$').parse::<usize>().ok(),
            _ => None,
        },
        _ => None,
    }
}

/// The highest `$n` a statement names (0: none): with the declared types, how many
/// parameters its Bind must supply.
pub(crate) fn highest_param(st: &Statement) -> usize {
    let mut highest = 0;
    let _ = ast::visit_expressions(st, |e| {
        if let Some(n) = placeholder(e) {
            highest = highest.max(n);
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    highest
}

/// The type a `column <op> $n` comparison gives `$n`: text for `varchar` (PostgreSQL
/// compares it with text's operators), `bpchar` for `char`.
fn compared_oid(c: &ColumnDef) -> u32 {
    match (c.ty, c.declared) {
        (TypeId::Text, DeclaredType::Char) => 1042,
        (ty, _) => ty.pg_oid(),
    }
}

/// Fills in `oids[n - 1]` for each `$n` of `st` whose type its use shows; entries
/// already non-zero (declared by the client) are kept, and `oids` grows to the highest
/// `$n` the statement uses. `table_of` looks a table up by name in the statement's
/// catalog (`None`: no such table).
pub(crate) fn infer_params(
    st: &Statement,
    oids: &mut Vec<u32>,
    table_of: &mut dyn FnMut(&str) -> Option<Arc<TableDef>>,
) {
    let note = |n: usize, oid: u32, oids: &mut Vec<u32>| {
        if n == 0 {
            return;
        }
        if oids.len() < n {
            oids.resize(n, 0);
        }
        if oids[n - 1] == 0 {
            oids[n - 1] = oid;
        }
    };
    // Every `$n` counts, wherever it stands, and `$n::type` gives it that type.
    let mut highest = 0;
    let mut casts = Vec::new();
    let _ = ast::visit_expressions(st, |e| {
        if let Some(n) = placeholder(e) {
            highest = highest.max(n);
        }
        if let Expr::Cast {
            expr, data_type, ..
        } = e
        {
            if let (Some(n), Ok(oid)) = (placeholder(expr), sql_type_oid(data_type)) {
                casts.push((n, oid));
            }
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    if oids.len() < highest {
        oids.resize(highest, 0);
    }
    for (n, oid) in casts {
        note(n, oid, oids);
    }
    let (def, extra): (Option<Arc<TableDef>>, Vec<(usize, u32)>) = match st {
        Statement::Insert(ins) => {
            let name = match &ins.table {
                ast::TableObject::TableName(n) => object_name(n),
                _ => String::new(),
            };
            let def = table_of(&name);
            let mut extra = Vec::new();
            if let (Some(d), Some(src)) = (&def, &ins.source) {
                if let SetExpr::Values(v) = src.body.as_ref() {
                    let targets: Vec<usize> = if ins.columns.is_empty() {
                        (0..d.columns.len()).collect()
                    } else {
                        ins.columns
                            .iter()
                            .filter_map(|c| d.column_index(&object_name(c)))
                            .collect()
                    };
                    for row in &v.rows {
                        for (e, &ci) in row.iter().zip(&targets) {
                            if let Some(n) = placeholder(e) {
                                extra.push((n, column_type_oid(&d.columns[ci])));
                            }
                        }
                    }
                }
            }
            (def, extra)
        }
        Statement::Update(u) => {
            let def = match &u.table.relation {
                TableFactor::Table { name, .. } => table_of(&object_name(name)),
                _ => None,
            };
            let mut extra = Vec::new();
            if let Some(d) = &def {
                for a in &u.assignments {
                    if let ast::AssignmentTarget::ColumnName(n) = &a.target {
                        if let (Some(ci), Some(p)) =
                            (d.column_index(&object_name(n)), placeholder(&a.value))
                        {
                            extra.push((p, column_type_oid(&d.columns[ci])));
                        }
                    }
                }
            }
            (def, extra)
        }
        Statement::Query(q) => {
            let mut def = None;
            if let SetExpr::Select(sel) = q.body.as_ref() {
                if let [t] = sel.from.as_slice() {
                    if let TableFactor::Table { name, .. } = &t.relation {
                        def = table_of(&object_name(name));
                    }
                }
            }
            let mut extra = Vec::new();
            if let Some(ast::LimitClause::LimitOffset { limit, offset, .. }) = &q.limit_clause {
                let offset = offset.as_ref().map(|o| &o.value);
                for e in limit.iter().chain(offset) {
                    if let Some(p) = placeholder(e) {
                        extra.push((p, TypeId::Int8.pg_oid()));
                    }
                }
            }
            (def, extra)
        }
        Statement::Delete(d) => {
            let from = match &d.from {
                ast::FromTable::WithFromKeyword(f) | ast::FromTable::WithoutKeyword(f) => f.clone(),
            };
            let def = match from.first().map(|t| &t.relation) {
                Some(TableFactor::Table { name, .. }) => table_of(&object_name(name)),
                _ => None,
            };
            (def, Vec::new())
        }
        _ => (None, Vec::new()),
    };
    for (n, oid) in extra {
        note(n, oid, oids);
    }
    // `catalog_column <op> $n`: the catalog view column's PostgreSQL type (`oid` is 26,
    // `typname` 19), for the views a SELECT's FROM names.
    if let Statement::Query(q) = st {
        let views = virtual_tables(q);
        if !views.is_empty() {
            let _ = ast::visit_expressions(st, |e| {
                match e {
                    Expr::BinaryOp { left, right, .. } => {
                        for (a, b) in [(left, right), (right, left)] {
                            if let (Some(oid), Some(p)) =
                                (virtual_column_oid(&views, a), placeholder(b))
                            {
                                note(p, oid, oids);
                            }
                        }
                    }
                    // `column = any($n)`: an array of the column's type.
                    Expr::AnyOp { left, right, .. } | Expr::AllOp { left, right, .. } => {
                        if let (Some(oid), Some(p)) =
                            (virtual_column_oid(&views, left), placeholder(right))
                        {
                            if let Some(array) = array_type_oid(oid) {
                                note(p, array, oids);
                            }
                        }
                    }
                    // `column in ($n, ...)`
                    Expr::InList { expr, list, .. } => {
                        if let Some(oid) = virtual_column_oid(&views, expr) {
                            for p in list.iter().filter_map(placeholder) {
                                note(p, oid, oids);
                            }
                        }
                    }
                    _ => {}
                }
                std::ops::ControlFlow::<()>::Continue(())
            });
        }
    }
    // `column <op> $n` anywhere in the statement gives $n the column's type.
    if let Some(d) = def {
        let _ = ast::visit_expressions(st, |e| {
            if let Expr::BinaryOp { left, right, .. } = e {
                for (a, b) in [(left, right), (right, left)] {
                    let col = match a.as_ref() {
                        Expr::Identifier(i) => d.column_index(&ident(i)),
                        Expr::CompoundIdentifier(ids) => {
                            ids.last().and_then(|i| d.column_index(&ident(i)))
                        }
                        _ => None,
                    };
                    if let (Some(ci), Some(p)) = (col, placeholder(b)) {
                        note(p, compared_oid(&d.columns[ci]), oids);
                    }
                }
            }
            std::ops::ControlFlow::<()>::Continue(())
        });
    }
}

/// The catalog views a SELECT's FROM list names (joins included), as (range name,
/// schema, view).
fn virtual_tables(q: &ast::Query) -> Vec<(String, Option<String>, String)> {
    let SetExpr::Select(sel) = q.body.as_ref() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for twj in &sel.from {
        for f in std::iter::once(&twj.relation).chain(twj.joins.iter().map(|j| &j.relation)) {
            let TableFactor::Table { name, alias, .. } = f else {
                continue;
            };
            let parts: Vec<String> = name
                .0
                .iter()
                .filter_map(|p| p.as_ident())
                .map(ident)
                .collect();
            let (schema, table) = match parts.as_slice() {
                [t] => (None, t.clone()),
                [s, t] | [_, s, t] => (Some(s.clone()), t.clone()),
                _ => continue,
            };
            if crate::catalog_views::is_virtual(schema.as_deref(), &table) {
                let range = alias
                    .as_ref()
                    .map_or_else(|| table.clone(), |a| ident(&a.name));
                out.push((range, schema, table));
            }
        }
    }
    out
}

/// The PostgreSQL type OID of a column reference into one of `views`: by its qualifier,
/// or unqualified when exactly one view has the column.
fn virtual_column_oid(views: &[(String, Option<String>, String)], e: &Expr) -> Option<u32> {
    let (qual, col) = crate::rel::col_ref(e)?;
    let mut found = views
        .iter()
        .filter(|(range, ..)| qual.as_ref().is_none_or(|q| q == range))
        .filter_map(|(_, schema, table)| {
            crate::catalog_views::column_type(schema.as_deref(), table, &col)
        });
    let first = found.next()?;
    found.next().is_none().then_some(first.oid)
}

/// The array type of a catalog column's type (`oid` → `oid[]`).
fn array_type_oid(elem: u32) -> Option<u32> {
    Some(match elem {
        26 => 1028,
        19 => 1003,
        18 => 1002,
        28 => 1011,
        other => crate::value::type_from_oid(other)?.array_of()?.pg_oid(),
    })
}
