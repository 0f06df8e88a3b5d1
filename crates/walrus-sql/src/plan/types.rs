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
    if let Some(type_oid) = crate::expr::kept_type_oid(data_type) {
        return Some(Origin {
            table_oid: 0,
            attnum: 0,
            type_oid,
            typmod: -1,
        });
    }
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
/// A name two columns share is left out (the lookups here go by name alone, and a
/// wrong type is worse than none).
pub(crate) fn typed_columns(cols: &[ColName]) -> Vec<ColumnDef> {
    cols.iter()
        .filter(|c| cols.iter().filter(|o| o.name == c.name).count() == 1)
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
            // avg(float8) is float8; over integers and numeric it is numeric.
            "avg" => match function_args(f)
                .first()
                .and_then(|a| static_type(a, cols))?
            {
                TypeId::Float8 => Some(TypeId::Float8),
                TypeId::Int2 | TypeId::Int4 | TypeId::Int8 | TypeId::Numeric => {
                    Some(TypeId::Numeric)
                }
                _ => None,
            },
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
            "current_setting"
            | "version"
            | "repeat"
            | "lower"
            | "upper"
            | "set_config"
            | "pg_get_serial_sequence" => Some(TypeId::Text),
            "nextval" | "currval" | "setval" | "lastval" => Some(TypeId::Int8),
            "to_regtype" => Some(TypeId::RegType),
            "to_regclass" => Some(TypeId::RegClass),
            "pg_relation_size" | "pg_table_size" | "pg_indexes_size" | "pg_total_relation_size" => {
                Some(TypeId::Int8)
            }
            "pg_cancel_backend" | "pg_terminate_backend" => Some(TypeId::Bool),
            "pg_backend_pid" => Some(TypeId::Int4),
            "coalesce" | "greatest" | "least" => common_type(function_args(f).into_iter(), cols),
            // NULLIF(a, b) is a's type (b is only compared with it).
            "nullif" => match function_args(f).as_slice() {
                [a, _] if !untyped_literal(a) => static_type(a, cols),
                args => common_type(args.iter().copied(), cols),
            },
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
            ast::BinaryOperator::StringConcat | ast::BinaryOperator::LongArrow => {
                Some(TypeId::Text)
            }
            ast::BinaryOperator::AtArrow
            | ast::BinaryOperator::ArrowAt
            | ast::BinaryOperator::Question => Some(TypeId::Bool),
            ast::BinaryOperator::Arrow => static_type(left, cols),
            ast::BinaryOperator::Plus
            | ast::BinaryOperator::Minus
            | ast::BinaryOperator::Multiply
            | ast::BinaryOperator::Divide
            | ast::BinaryOperator::Modulo => {
                let (l, r) = (static_type(left, cols)?, static_type(right, cols)?);
                // Only number with number is typed here (an untyped string literal
                // takes the other side's type); date/time arithmetic is left to the
                // values.
                let l = if untyped_literal(left) { r } else { l };
                let r = if untyped_literal(right) { l } else { r };
                let (lr, rr) = (number_rank(l)?, number_rank(r)?);
                if matches!(op, ast::BinaryOperator::Modulo) && lr.max(rr) == FLOAT8_RANK {
                    return None; // no float8 % float8 operator
                }
                Some(NUMBER_TYPES[lr.max(rr)])
            }
            _ => None,
        },
        Expr::Case {
            conditions,
            else_result,
            ..
        } => common_type(
            conditions
                .iter()
                .map(|w| &w.result)
                .chain(else_result.as_deref()),
            cols,
        ),
        _ => None,
    }
}

/// Numeric types from narrowest to widest: PostgreSQL's implicit casts go up this list,
/// and its arithmetic and type resolution pick the wider of two.
const NUMBER_TYPES: [TypeId; 5] = [
    TypeId::Int2,
    TypeId::Int4,
    TypeId::Int8,
    TypeId::Numeric,
    TypeId::Float8,
];
const FLOAT8_RANK: usize = 4;

fn number_rank(t: TypeId) -> Option<usize> {
    NUMBER_TYPES.iter().position(|n| *n == t)
}

/// A NULL or a quoted string without a type: PostgreSQL's `unknown`, which takes its
/// type from the other inputs.
fn untyped_literal(e: &Expr) -> bool {
    match e {
        Expr::Value(v) => matches!(
            v.value,
            ast::Value::Null | ast::Value::SingleQuotedString(_)
        ),
        Expr::Nested(i) => untyped_literal(i),
        _ => false,
    }
}

/// The type PostgreSQL's `select_common_type` gives CASE / COALESCE / GREATEST / LEAST /
/// NULLIF over `inputs`: unknown inputs (NULL, untyped strings) are skipped, all
/// unknown is text; numbers resolve to the widest, date/time types to the widest of
/// date < timestamp < timestamptz; otherwise every known input must have the same
/// type. `None` when an input's type cannot be told statically or the types do not
/// resolve (the evaluation then reports the error or types the values).
fn common_type<'e>(inputs: impl Iterator<Item = &'e Expr>, cols: &[ColumnDef]) -> Option<TypeId> {
    let mut known: Option<TypeId> = None;
    for e in inputs {
        if untyped_literal(e) {
            continue;
        }
        let t = static_type(e, cols)?;
        known = Some(match known {
            None => t,
            Some(k) if k == t => k,
            Some(k) => match (number_rank(k), number_rank(t)) {
                (Some(a), Some(b)) => NUMBER_TYPES[a.max(b)],
                _ => {
                    let rank = |t: TypeId| match t {
                        TypeId::Date => Some(0),
                        TypeId::Timestamp => Some(1),
                        TypeId::TimestampTz => Some(2),
                        _ => None,
                    };
                    match (rank(k), rank(t)) {
                        (Some(a), Some(b)) => {
                            if a >= b {
                                k
                            } else {
                                t
                            }
                        }
                        _ => return None,
                    }
                }
            },
        });
    }
    Some(known.unwrap_or(TypeId::Text))
}
