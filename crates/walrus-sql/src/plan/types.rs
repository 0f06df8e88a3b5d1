//! Output column types decided before execution, from the expression alone.

use std::sync::Arc;

use sqlparser::ast::{self, Expr, Query, SelectItem, SetExpr, TableFactor};
use walrus_engine::access::datum::TypeId;
use walrus_engine::catalog::{ColumnDef, DeclaredType, TableDef};

use super::columns::{output_name, table_cols};
use crate::expr::{column_type, function_args, function_name, type_from_sql};
use crate::names::{ident, object_name};
use crate::rel::{col_ref, find_col, ColName, Origin};
use crate::result::Column;

/// How a cast to a type walrus keeps under another one is described: `$1::varchar` is
/// 1043, `x::numeric(10,2)` has modifier 655366 (no table; PostgreSQL's RowDescription).
pub(crate) fn cast_origin(e: &Expr) -> Option<Origin> {
    let Expr::Cast { data_type, .. } = e else {
        return None;
    };
    let (ty, typmod, declared) = column_type(data_type).ok()?;
    let type_oid = match (declared, ty) {
        (DeclaredType::Varchar, TypeId::Array(_)) => 1015,
        (DeclaredType::Char, TypeId::Array(_)) => 1014,
        (DeclaredType::Varchar, _) => 1043,
        (DeclaredType::Char, _) => 1042,
        (DeclaredType::Plain, _) => ty.pg_oid(),
    };
    (type_oid != ty.pg_oid() || typmod != -1).then_some(Origin {
        table_oid: 0,
        attnum: 0,
        type_oid,
        typmod,
    })
}

/// The result columns of a SELECT over plain tables, from the statement and the catalog
/// alone (no rows read): for Describe when running the query fails at run time. `None`
/// when a column's type cannot be told this way.
pub(crate) fn static_columns(
    q: &Query,
    table_of: &mut dyn FnMut(&str) -> Option<Arc<TableDef>>,
) -> Option<Vec<Column>> {
    let SetExpr::Select(sel) = q.body.as_ref() else {
        return None;
    };
    let mut cols = Vec::new();
    for twj in &sel.from {
        let TableFactor::Table {
            name,
            alias,
            args: None,
            ..
        } = &twj.relation
        else {
            return None;
        };
        if !twj.joins.is_empty() || alias.as_ref().is_some_and(|a| !a.columns.is_empty()) {
            return None;
        }
        let def = table_of(&object_name(name))?;
        let qual = alias
            .as_ref()
            .map(|a| ident(&a.name))
            .unwrap_or_else(|| def.name.clone());
        cols.extend(table_cols(&qual, &def));
    }
    let defs = typed_columns(&cols);
    let mut out = Vec::new();
    for item in &sel.projection {
        let (name, e) = match item {
            SelectItem::Wildcard(_) => {
                out.extend(cols.iter().map(|c| c.to_column()));
                continue;
            }
            SelectItem::UnnamedExpr(e) => (output_name(e), e),
            SelectItem::ExprWithAlias { expr, alias } => (ident(alias), expr),
            _ => return None,
        };
        match col_ref(e) {
            Some((qual, col)) => {
                let i = find_col(&cols, qual.as_deref(), &col).ok()??;
                out.push(Column {
                    name,
                    ..cols[i].to_column()
                });
            }
            None => {
                let ty = static_type(e, &defs)?;
                out.push(match cast_origin(e) {
                    Some(o) => Column {
                        type_oid: o.type_oid,
                        typmod: o.typmod,
                        ..Column::new(name, ty)
                    },
                    None => Column::new(name, ty),
                })
            }
        }
    }
    Some(out)
}

/// The result type of an expression when it can be known without rows.
/// The columns of known type among `cols`, in the form [`static_type`] reads.
pub(crate) fn typed_columns(cols: &[ColName]) -> Vec<ColumnDef> {
    cols.iter()
        .filter_map(|c| {
            c.ty.map(|ty| ColumnDef {
                name: c.name.clone(),
                ty,
                not_null: false,
                typmod: -1,
                declared: Default::default(),
            })
        })
        .collect()
}

pub(crate) fn static_type(e: &Expr, cols: &[ColumnDef]) -> Option<TypeId> {
    match e {
        Expr::Identifier(i) => cols.iter().find(|c| c.name == ident(i)).map(|c| c.ty),
        Expr::CompoundIdentifier(ids) => ids
            .last()
            .and_then(|i| cols.iter().find(|c| c.name == ident(i)).map(|c| c.ty)),
        Expr::Cast { data_type, .. } => type_from_sql(data_type).ok(),
        Expr::Nested(i) => static_type(i, cols),
        Expr::UnaryOp {
            op: ast::UnaryOperator::Not,
            ..
        }
        | Expr::IsNull(_)
        | Expr::IsNotNull(_)
        | Expr::IsTrue(_)
        | Expr::IsFalse(_)
        | Expr::IsNotTrue(_)
        | Expr::IsNotFalse(_)
        | Expr::InList { .. }
        | Expr::Between { .. }
        | Expr::Like { .. }
        | Expr::ILike { .. }
        | Expr::Exists { .. }
        | Expr::InSubquery { .. } => Some(TypeId::Bool),
        Expr::UnaryOp {
            op: ast::UnaryOperator::Minus | ast::UnaryOperator::Plus,
            expr,
        } => static_type(expr, cols),
        Expr::Interval(_) => Some(TypeId::Interval),
        Expr::TypedString(ts) => type_from_sql(&ts.data_type).ok(),
        Expr::Array(_) => None,
        Expr::Function(f) => match function_name(f).as_str() {
            "count" => Some(TypeId::Int8),
            "avg" => Some(TypeId::Numeric),
            "now" | "current_timestamp" => Some(TypeId::TimestampTz),
            "current_date" => Some(TypeId::Date),
            "localtimestamp" => Some(TypeId::Timestamp),
            "localtime" => Some(TypeId::Time),
            "current_time" => Some(TypeId::TimeTz),
            "min" | "max" => function_args(f).first().and_then(|a| static_type(a, cols)),
            "sum" => function_args(f)
                .first()
                .and_then(|a| static_type(a, cols))
                .map(|t| match t {
                    TypeId::Int2 | TypeId::Int4 => TypeId::Int8,
                    TypeId::Int8 => TypeId::Numeric,
                    other => other,
                }),
            "current_setting" | "version" | "repeat" | "lower" | "upper" => Some(TypeId::Text),
            "to_regtype" => Some(TypeId::RegType),
            "to_regclass" => Some(TypeId::RegClass),
            "pg_relation_size" | "pg_table_size" | "pg_indexes_size" | "pg_total_relation_size" => {
                Some(TypeId::Int8)
            }
            _ => None,
        },
        Expr::Value(v) => match &v.value {
            ast::Value::Number(n, _) => Some(if n.parse::<i32>().is_ok() {
                TypeId::Int4
            } else if n.parse::<i64>().is_ok() {
                TypeId::Int8
            } else {
                TypeId::Numeric
            }),
            ast::Value::SingleQuotedString(_) => Some(TypeId::Text),
            ast::Value::Boolean(_) => Some(TypeId::Bool),
            _ => None,
        },
        Expr::BinaryOp { op, left, right } => match op {
            ast::BinaryOperator::Eq
            | ast::BinaryOperator::NotEq
            | ast::BinaryOperator::Lt
            | ast::BinaryOperator::LtEq
            | ast::BinaryOperator::Gt
            | ast::BinaryOperator::GtEq
            | ast::BinaryOperator::And
            | ast::BinaryOperator::Or => Some(TypeId::Bool),
            ast::BinaryOperator::StringConcat => Some(TypeId::Text),
            _ => {
                let (l, r) = (static_type(left, cols)?, static_type(right, cols)?);
                Some(if l == TypeId::Int8 || r == TypeId::Int8 {
                    TypeId::Int8
                } else {
                    l
                })
            }
        },
        _ => None,
    }
}
