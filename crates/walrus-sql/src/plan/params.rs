//! Parameter types for the extended protocol's Describe: each `$n` takes the type of
//! where it is used (compared with or assigned to a column, a LIMIT, an INSERT target);
//! what this cannot tell stays unknown (the caller reports text).

use std::sync::Arc;

use sqlparser::ast::{self, Expr, SetExpr, Statement, TableFactor};
use walrus_engine::access::datum::TypeId;
use walrus_engine::catalog::TableDef;

use crate::names::{ident, object_name};

/// Fills in `types[n - 1]` for each `$n` of `st` whose type its use shows (entries
/// already set, e.g. declared by the client, are kept). `table_of` looks a table up by
/// name in the statement's catalog (`None`: no such table).
pub(crate) fn infer_params(
    st: &Statement,
    types: &mut Vec<Option<TypeId>>,
    table_of: &mut dyn FnMut(&str) -> Option<Arc<TableDef>>,
) {
    let note = |n: usize, ty: TypeId, types: &mut Vec<Option<TypeId>>| {
        if n == 0 {
            return;
        }
        if types.len() < n {
            types.resize(n, None);
        }
        if types[n - 1].is_none() {
            types[n - 1] = Some(ty);
        }
    };
    let placeholder = |e: &Expr| match e {
        Expr::Value(v) => match &v.value {
            ast::Value::Placeholder(p) => p.trim_start_matches('$').parse::<usize>().ok(),
            _ => None,
        },
        _ => None,
    };
    let (def, extra): (Option<Arc<TableDef>>, Vec<(usize, TypeId)>) = match st {
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
                                extra.push((n, d.columns[ci].ty));
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
                            extra.push((p, d.columns[ci].ty));
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
            if let Some(ast::LimitClause::LimitOffset { limit: Some(l), .. }) = &q.limit_clause {
                if let Some(p) = placeholder(l) {
                    extra.push((p, TypeId::Int8));
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
    for (n, ty) in extra {
        note(n, ty, types);
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
                        note(p, d.columns[ci].ty, types);
                    }
                }
            }
            std::ops::ControlFlow::<()>::Continue(())
        });
    }
}
