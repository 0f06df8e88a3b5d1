//! Output column types decided before execution, from the expression alone.

use sqlparser::ast::{self, Expr};
use walrus_engine::access::datum::TypeId;
use walrus_engine::catalog::ColumnDef;

use crate::expr::{function_args, function_name, type_from_sql};
use crate::names::ident;

/// The result type of an expression when it can be known without rows.
pub(crate) fn static_type(e: &Expr, cols: &[ColumnDef]) -> Option<TypeId> {
    match e {
        Expr::Identifier(i) => cols.iter().find(|c| c.name == ident(i)).map(|c| c.ty),
        Expr::CompoundIdentifier(ids) => ids
            .last()
            .and_then(|i| cols.iter().find(|c| c.name == ident(i)).map(|c| c.ty)),
        Expr::Cast { data_type, .. } => type_from_sql(data_type).ok(),
        Expr::Nested(i) => static_type(i, cols),
        Expr::Function(f) => match function_name(f).as_str() {
            "count" => Some(TypeId::Int8),
            "avg" => Some(TypeId::Numeric),
            "now" | "current_timestamp" => Some(TypeId::TimestampTz),
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
