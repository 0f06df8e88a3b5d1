//! Expression evaluation over one row: literals, `$n` parameters, column references,
//! arithmetic, comparison, boolean logic, casts and the functions pgbench and psql use.
//!
//! Evaluation depends only on values, types and the row frames of `crate::rel`; what
//! it needs from outside (settings, the statement time, the cancel flag, subqueries,
//! aggregates and catalog functions) comes in through [`Scope`] and [`Hooks`], so it
//! never reaches into the session or the executor.
//!
//! - `mod.rs`: [`Scope`], [`Hooks`], [`eval`] and the small helpers it uses;
//! - `cast.rs`: SQL type names, literals and [`coerce`];
//! - `ops.rs`: operators: comparison, arithmetic, boolean logic, LIKE and regexes;
//! - `array.rs`: the text form of arrays;
//! - `functions.rs`: built-in scalar functions.

mod array;
pub(crate) use array::numeric_rank;
mod cast;
pub(crate) mod compiled;
mod functions;
mod ops;
mod subscript;

pub use array::{array_items, format_array_text, make_array, parse_array_text};
pub(crate) use cast::as_i64;
pub use cast::{
    assign, cast_to, coerce, column_type, declared_limit, declared_type_name, kept_type_oid,
    numeric_typmod, sql_type_oid, type_from_sql,
};
pub(crate) use ops::type_name as ops_type_name;
pub use ops::{binary, compare_values, like_match};
pub(crate) use subscript::subscripted;

use std::cmp::Ordering;

use sqlparser::ast::{
    BinaryOperator, CastKind, DataType, Expr, FunctionArg, FunctionArgExpr, FunctionArguments,
    UnaryOperator, Value,
};
use walrus_engine::access::datum::{Datum, TypeId};
use walrus_engine::catalog::ColumnDef;

use crate::error::{SqlError, SqlResult};
use crate::rel::{Frame, Rel};
use crate::value::format_text;

use cast::literal;
pub use functions::check_function;
use functions::function;
use ops::{arith, logic, regex_op};

/// What an expression can see.
pub struct Scope<'a> {
    pub columns: &'a [ColumnDef],
    pub row: Option<&'a [Datum]>,
    pub params: &'a [Datum],
    /// Transaction start time (now() / CURRENT_TIMESTAMP), PostgreSQL microseconds.
    pub now: i64,
    pub setting: &'a dyn Fn(&str) -> Option<String>,
    /// The session's cancel flag (pg_sleep and long evaluations poll it).
    pub interrupt: Option<&'a std::sync::atomic::AtomicBool>,
    /// The row of a multi-table query (qualified names, outer rows of correlated
    /// subqueries). When set, column references resolve here instead of `columns`.
    pub frame: Option<&'a Frame<'a>>,
    /// Subqueries, aggregates over the current group, and catalog-aware functions.
    pub hooks: Option<&'a dyn Hooks>,
}

/// Settings for a [`Scope`] that has none.
fn no_setting(_: &str) -> Option<String> {
    None
}

impl<'a> Scope<'a> {
    /// A scope over `row` of `columns` (both empty for a constant expression) with no
    /// parameters, settings, hooks or interrupt; `now` answers `now()` and its kin
    /// (the statement's clock where there is one).
    pub(crate) fn bare(columns: &'a [ColumnDef], row: Option<&'a [Datum]>, now: i64) -> Scope<'a> {
        Scope {
            columns,
            row,
            params: &[],
            now,
            setting: &no_setting,
            interrupt: None,
            frame: None,
            hooks: None,
        }
    }
}

/// What the query executor lends to expression evaluation.
pub trait Hooks {
    /// Runs a subquery whose enclosing row is `outer`.
    fn subquery(&self, q: &sqlparser::ast::Query, outer: Option<&Frame<'_>>) -> SqlResult<Rel>;
    /// The value of aggregate call `f` over the current group (`None`: not grouped).
    fn aggregate(
        &self,
        f: &sqlparser::ast::Function,
        outer: Option<&Frame<'_>>,
    ) -> Option<SqlResult<Datum>>;
    /// Functions and casts that need the catalog (`pg_get_indexdef`, `::regclass`, ...).
    fn function(&self, name: &str, args: &[Datum]) -> Option<SqlResult<Datum>>;
}

/// Aggregate function names (evaluated over a group, never per row).
/// Whether a WHERE / HAVING / ON / FILTER condition `e` holds for a row, given its
/// value `v`: NULL and false do not; a value of another type than boolean is PostgreSQL's
/// 42804 (an untyped literal or parameter is read as boolean text).
pub fn holds(clause: &str, e: &Expr, v: Datum) -> SqlResult<bool> {
    match v {
        Datum::Bool(b) => Ok(b),
        Datum::Null => Ok(false),
        Datum::Text(t) if matches!(e, Expr::Value(_)) => {
            match crate::value::parse_text(TypeId::Bool, &t)? {
                Datum::Bool(b) => Ok(b),
                _ => Ok(false),
            }
        }
        other => Err(SqlError::new(
            "42804",
            format!(
                "argument of {clause} must be type boolean, not type {}",
                other.type_id().map(|t| t.name()).unwrap_or("unknown")
            ),
        )),
    }
}

pub fn is_aggregate_name(name: &str) -> bool {
    matches!(
        name,
        "count"
            | "sum"
            | "min"
            | "max"
            | "avg"
            | "string_agg"
            | "array_agg"
            | "bool_and"
            | "bool_or"
            | "every"
    )
}

pub fn eval(e: &Expr, s: &Scope<'_>) -> SqlResult<Datum> {
    crate::stack::check()?;
    match e {
        Expr::Value(v) => match &v.value {
            Value::Placeholder(p) => {
                let n: usize = p
                    .trim_start_matches('$')
                    .parse()
                    .map_err(|_| SqlError::syntax(format!("bad parameter {p}")))?;
                s.params
                    .get(n.wrapping_sub(1))
                    .cloned()
                    .ok_or_else(|| SqlError::new("08P01", format!("there is no parameter ${n}")))
            }
            other => literal(other),
        },
        Expr::Identifier(_) | Expr::CompoundIdentifier(_) if s.frame.is_some() => {
            let (qual, name) = crate::rel::col_ref_str(e).unwrap_or_default();
            match s
                .frame
                .map(|f| f.lookup(qual.as_deref(), &name))
                .transpose()?
            {
                Some(Some(d)) => Ok(d),
                _ => Err(crate::rel::no_column(qual.as_deref(), &name)),
            }
        }
        Expr::Identifier(id) => column(s, id),
        Expr::CompoundIdentifier(ids) => match ids.last() {
            Some(id) => column(s, id),
            None => Err(SqlError::new("42703", "column \"\" does not exist")),
        },
        Expr::Case {
            operand,
            conditions,
            else_result,
            ..
        } => {
            let results: Vec<&Expr> = conditions
                .iter()
                .map(|w| &w.result)
                .chain(else_result.as_deref())
                .collect();
            unify_literals(&results)?;
            let subject = operand.as_ref().map(|o| eval(o, s)).transpose()?;
            for w in conditions {
                let hit = match &subject {
                    Some(v) => binary(v, &BinaryOperator::Eq, &eval(&w.condition, s)?)?,
                    None => eval(&w.condition, s)?,
                };
                if matches!(hit, Datum::Bool(true)) {
                    return eval(&w.result, s);
                }
            }
            else_result
                .as_ref()
                .map(|e| eval(e, s))
                .unwrap_or(Ok(Datum::Null))
        }
        Expr::Subquery(q) => {
            let rel = hooks(s)?.subquery(q, s.frame)?;
            if rel.cols.len() != 1 {
                return Err(SqlError::new(
                    "42601",
                    "subquery must return only one column",
                ));
            }
            if rel.rows.len() > 1 {
                return Err(SqlError::new(
                    "21000",
                    "more than one row returned by a subquery used as an expression",
                ));
            }
            Ok(rel
                .rows
                .into_iter()
                .next()
                .and_then(|r| r.into_iter().next())
                .unwrap_or(Datum::Null))
        }
        Expr::Exists { subquery, negated } => {
            let rel = hooks(s)?.subquery(subquery, s.frame)?;
            Ok(Datum::Bool(rel.rows.is_empty() == *negated))
        }
        Expr::InSubquery {
            expr,
            subquery,
            negated,
        } => {
            let v = eval(expr, s)?;
            let rel = hooks(s)?.subquery(subquery, s.frame)?;
            let items: Vec<Datum> = rel
                .rows
                .into_iter()
                .map(|r| r.into_iter().next().unwrap_or(Datum::Null))
                .collect();
            in_values(&v, &items, *negated)
        }
        Expr::Collate { expr, .. } => eval(expr, s),
        Expr::IsTrue(x) => Ok(Datum::Bool(matches!(eval(x, s)?, Datum::Bool(true)))),
        Expr::IsNotTrue(x) => Ok(Datum::Bool(!matches!(eval(x, s)?, Datum::Bool(true)))),
        Expr::IsFalse(x) => Ok(Datum::Bool(matches!(eval(x, s)?, Datum::Bool(false)))),
        Expr::IsNotFalse(x) => Ok(Datum::Bool(!matches!(eval(x, s)?, Datum::Bool(false)))),
        Expr::IsDistinctFrom(a, b) | Expr::IsNotDistinctFrom(a, b) => {
            let (l, r) = (eval(a, s)?, eval(b, s)?);
            let same = match (l.is_null(), r.is_null()) {
                (true, true) => true,
                (false, false) => compare_values(&l, &r)? == Ordering::Equal,
                _ => false,
            };
            Ok(Datum::Bool(
                same == matches!(e, Expr::IsNotDistinctFrom(..)),
            ))
        }
        Expr::Like {
            negated,
            expr,
            pattern,
            escape_char,
            any: false,
        }
        | Expr::ILike {
            negated,
            expr,
            pattern,
            escape_char,
            any: false,
        } => {
            let (v, p) = (eval(expr, s)?, eval(pattern, s)?);
            if matches!(v, Datum::Bytea(_)) || matches!(p, Datum::Bytea(_)) {
                return Err(SqlError::unsupported("LIKE on bytea is not supported"));
            }
            // Their text form is not text: LIKE would read it (PostgreSQL has no such
            // operator for them).
            let not_text = |d: &Datum| {
                matches!(
                    d,
                    Datum::Json(_)
                        | Datum::Jsonb(_)
                        | Datum::Array(_)
                        | Datum::Time(_)
                        | Datum::TimeTz(..)
                        | Datum::Reg(_)
                        | Datum::Interval(_)
                        | Datum::Int2Vector(_)
                )
            };
            if not_text(&v) || not_text(&p) {
                return Err(SqlError::new(
                    "42883",
                    format!(
                        "operator does not exist: {} ~~ {}",
                        ops::type_name(&v),
                        ops::type_name(&p)
                    ),
                ));
            }
            let esc = match escape_char {
                Some(e) => format_text(&eval(e, s)?).and_then(|t| t.chars().next()),
                None => Some('\\'),
            };
            match (format_text(&v), format_text(&p)) {
                (Some(v), Some(p)) => {
                    let fold = matches!(e, Expr::ILike { .. });
                    let m = if fold {
                        like_match(&v.to_lowercase(), &p.to_lowercase(), esc)
                    } else {
                        like_match(&v, &p, esc)
                    };
                    Ok(Datum::Bool(m != *negated))
                }
                _ => Ok(Datum::Null),
            }
        }
        Expr::AnyOp {
            left,
            compare_op,
            right,
            ..
        }
        | Expr::AllOp {
            left,
            compare_op,
            right,
        } => {
            let v = eval(left, s)?;
            let items = match right.as_ref() {
                Expr::Subquery(q) => hooks(s)?
                    .subquery(q, s.frame)?
                    .rows
                    .into_iter()
                    .map(|r| r.into_iter().next().unwrap_or(Datum::Null))
                    .collect(),
                other => match eval(other, s)? {
                    Datum::Null => return Ok(Datum::Null),
                    // `attnum = ANY (indkey)`: the positions do not matter.
                    Datum::Int2Vector(v) => v.into_iter().map(Datum::Int2).collect(),
                    d => array_items(&d)?,
                },
            };
            let all = matches!(e, Expr::AllOp { .. });
            let mut saw_null = false;
            for it in &items {
                match binary(&v, compare_op, it)? {
                    Datum::Bool(b) if b != all => return Ok(Datum::Bool(!all)),
                    Datum::Null => saw_null = true,
                    _ => {}
                }
            }
            Ok(if saw_null {
                Datum::Null
            } else {
                Datum::Bool(all)
            })
        }
        Expr::Array(a) => {
            let items = a
                .elem
                .iter()
                .map(|x| eval(x, s))
                .collect::<SqlResult<Vec<_>>>()?;
            make_array(items)
        }
        Expr::Nested(inner) => eval(inner, s),
        Expr::CompoundFieldAccess { root, access_chain } => {
            subscript::eval_access(root, access_chain, s)
        }
        Expr::UnaryOp { op, expr } => {
            // PostgreSQL folds a minus into a numeric constant: -2147483648 is an integer.
            if let (UnaryOperator::Minus, Some(n)) = (op, numeric_constant(expr)) {
                return literal(&Value::Number(format!("-{n}"), false));
            }
            let v = eval(expr, s)?;
            match op {
                UnaryOperator::Minus => match v {
                    // Keeps the operand's type (-int2 is int2), with its range.
                    Datum::Int2(x) => x
                        .checked_neg()
                        .map(Datum::Int2)
                        .ok_or_else(|| SqlError::new("22003", "smallint out of range")),
                    Datum::Int4(x) => x
                        .checked_neg()
                        .map(Datum::Int4)
                        .ok_or_else(|| SqlError::new("22003", "integer out of range")),
                    Datum::Int8(x) => x
                        .checked_neg()
                        .map(Datum::Int8)
                        .ok_or_else(|| SqlError::new("22003", "bigint out of range")),
                    Datum::Float8(x) => Ok(Datum::Float8(-x)),
                    Datum::Text(_) if !untyped(expr) => {
                        Err(SqlError::new("42883", "operator does not exist: - text"))
                    }
                    other => arith(&Datum::Int4(0), &other, &BinaryOperator::Minus),
                },
                UnaryOperator::Plus => Ok(v),
                UnaryOperator::Not => Ok(match v {
                    Datum::Bool(b) => Datum::Bool(!b),
                    Datum::Null => Datum::Null,
                    _ => {
                        return Err(SqlError::new(
                            "42804",
                            "argument of NOT must be type boolean",
                        ))
                    }
                }),
                other => Err(SqlError::unsupported(format!(
                    "operator {other} is not supported"
                ))),
            }
        }
        Expr::BinaryOp { left, op, right } => {
            if !matches!(left.as_ref(), Expr::BinaryOp { .. }) {
                let l = eval(left, s)?;
                return binary_step(left, op, right, l, s);
            }
            // A left-deep chain (`a + b + c ...`, `x || y || z ...`: the parser builds
            // these in a loop) is folded from its leftmost operand without recursing
            // down the chain, each step exactly as the node alone would evaluate.
            let mut spine = Vec::new();
            let mut leftmost = e;
            while let Expr::BinaryOp { left, op, right } = leftmost {
                spine.push((left.as_ref(), op, right.as_ref()));
                leftmost = left;
            }
            let mut v = eval(leftmost, s)?;
            for (left, op, right) in spine.into_iter().rev() {
                v = binary_step(left, op, right, v, s)?;
            }
            Ok(v)
        }
        Expr::IsNull(x) => Ok(Datum::Bool(eval(x, s)?.is_null())),
        Expr::IsNotNull(x) => Ok(Datum::Bool(!eval(x, s)?.is_null())),
        Expr::Between {
            expr,
            negated,
            low,
            high,
        } => {
            let v = eval(expr, s)?;
            let (lo, hi) = (eval(low, s)?, eval(high, s)?);
            check_comparable(&v, expr, &BinaryOperator::GtEq, &lo, low)?;
            check_comparable(&v, expr, &BinaryOperator::LtEq, &hi, high)?;
            let ge = binary(&v, &BinaryOperator::GtEq, &lo)?;
            let le = binary(&v, &BinaryOperator::LtEq, &hi)?;
            let both = logic(ge, &BinaryOperator::And, || Ok(le))?;
            Ok(if *negated { eval_not(both) } else { both })
        }
        Expr::InList {
            expr,
            list,
            negated,
        } => {
            let v = eval(expr, s)?;
            let items = list
                .iter()
                .map(|i| {
                    let item = eval(i, s)?;
                    check_comparable(&v, expr, &BinaryOperator::Eq, &item, i)?;
                    Ok(item)
                })
                .collect::<SqlResult<Vec<_>>>()?;
            in_values(&v, &items, *negated)
        }
        Expr::Cast {
            kind: CastKind::Cast | CastKind::DoubleColon,
            expr,
            data_type,
            ..
        } => {
            let mut v = eval(expr, s)?;
            if is_char_column(expr, s)
                && !matches!(data_type, DataType::Char(_) | DataType::Character(_))
                && !matches!(data_type, DataType::Custom(n, _) if n.to_string().eq_ignore_ascii_case("bpchar"))
            {
                // char(n) → text / varchar drops the padding.
                v = bpchar_text(v);
            }
            let custom = match data_type {
                DataType::Regclass => Some("regclass".to_string()),
                DataType::Custom(name, _) => name.0.last().map(|p| {
                    p.to_string()
                        .to_ascii_lowercase()
                        .trim_matches('"')
                        .to_string()
                }),
                _ => None,
            };
            if let Some(n) = custom.as_deref() {
                match n {
                    "regclass" | "regtype" | "regnamespace" | "regproc" => {
                        if v.is_null() {
                            return Ok(Datum::Null);
                        }
                        return hooks(s)?
                            .function(&format!("::{n}"), &[v])
                            .unwrap_or_else(|| Err(SqlError::unsupported(format!("cast to {n}"))));
                    }
                    "oid" | "xid" | "regrole" => return coerce(v, TypeId::Int8),
                    "bpchar" => return coerce(v, TypeId::Text),
                    // A name holds at most 63 bytes (NAMEDATALEN - 1), cut at a
                    // character boundary as PostgreSQL's namein does.
                    "name" => {
                        return Ok(match coerce(v, TypeId::Text)? {
                            Datum::Text(mut t) if t.len() > 63 => {
                                let mut end = 63;
                                while !t.is_char_boundary(end) {
                                    end -= 1;
                                }
                                t.truncate(end);
                                Datum::Text(t)
                            }
                            other => other,
                        })
                    }
                    // The one-byte internal type: its first character.
                    "char" => {
                        return Ok(match coerce(v, TypeId::Text)? {
                            Datum::Text(t) => Datum::Text(t.chars().take(1).collect()),
                            other => other,
                        })
                    }
                    _ => {}
                }
            }
            cast_to(v, data_type)
        }
        Expr::TypedString(ts) => {
            let text = match &ts.value.value {
                Value::SingleQuotedString(v) => v.clone(),
                other => other.to_string(),
            };
            cast_to(Datum::Text(text), &ts.data_type)
        }
        // `interval '1 day'`; a trailing field (`interval '1' day`) restricts the
        // fields, which walrus does not do: refused.
        Expr::Interval(sqlparser::ast::Interval {
            value,
            leading_field: None,
            leading_precision: None,
            last_field: None,
            fractional_seconds_precision: None,
        }) => match eval(value, s)? {
            Datum::Null => Ok(Datum::Null),
            Datum::Text(t) => Ok(Datum::Interval(crate::interval::parse_interval(&t)?)),
            other => coerce(other, TypeId::Interval),
        },
        Expr::AtTimeZone {
            timestamp,
            time_zone,
        } => crate::timezone::at_time_zone(eval(timestamp, s)?, eval(time_zone, s)?),
        Expr::Function(f) if function_name(f) == crate::rewrite::REFUSAL_FUNCTION => {
            Err(SqlError::unsupported(match function_args(f).first() {
                Some(Expr::Value(v)) => match &v.value {
                    Value::SingleQuotedString(m) => m.clone(),
                    other => other.to_string(),
                },
                _ => "not supported".to_string(),
            }))
        }
        Expr::Function(f) => function(f, s),
        Expr::IsUnknown(x) | Expr::IsNotUnknown(x) => {
            let unknown = match eval(x, s)? {
                Datum::Null => true,
                Datum::Bool(_) => false,
                other => {
                    return Err(SqlError::new(
                        "42804",
                        format!(
                            "argument of IS UNKNOWN must be type boolean, not type {}",
                            other.type_id().map(|t| t.name()).unwrap_or("unknown")
                        ),
                    ))
                }
            };
            Ok(Datum::Bool(unknown == matches!(e, Expr::IsUnknown(_))))
        }
        Expr::Ceil {
            expr,
            field:
                sqlparser::ast::CeilFloorKind::DateTimeField(sqlparser::ast::DateTimeField::NoDateTime),
        }
        | Expr::Floor {
            expr,
            field:
                sqlparser::ast::CeilFloorKind::DateTimeField(sqlparser::ast::DateTimeField::NoDateTime),
        } => {
            let name = if matches!(e, Expr::Ceil { .. }) {
                "ceil"
            } else {
                "floor"
            };
            functions::rounding(name, &[eval(expr, s)?])
        }
        Expr::Substring {
            expr,
            substring_from,
            substring_for,
            ..
        } => {
            let text = text_arg(expr, s)?;
            let from = substring_from.as_ref().map(|f| eval(f, s)).transpose()?;
            let count = substring_for.as_ref().map(|f| eval(f, s)).transpose()?;
            substring(text, from, count)
        }
        Expr::Trim {
            trim_where,
            trim_what,
            expr,
            trim_characters: None,
        } => {
            let Datum::Text(text) = text_arg(expr, s)? else {
                return Ok(Datum::Null);
            };
            let chars: Vec<char> = match trim_what {
                None => vec![' '],
                Some(w) => match text_arg(w, s)? {
                    Datum::Text(w) => w.chars().collect(),
                    _ => return Ok(Datum::Null),
                },
            };
            let t = match trim_where {
                Some(sqlparser::ast::TrimWhereField::Leading) => {
                    text.trim_start_matches(chars.as_slice())
                }
                Some(sqlparser::ast::TrimWhereField::Trailing) => {
                    text.trim_end_matches(chars.as_slice())
                }
                _ => text.trim_matches(chars.as_slice()),
            };
            Ok(Datum::Text(t.to_string()))
        }
        other => Err(SqlError::unsupported(format!(
            "expression {other} is not supported"
        ))),
    }
}

/// The digits of a (possibly parenthesised) numeric constant.
fn numeric_constant(e: &Expr) -> Option<&str> {
    match e {
        Expr::Value(v) => match &v.value {
            Value::Number(n, _) if !n.starts_with('-') => Some(n),
            _ => None,
        },
        Expr::Nested(inner) => numeric_constant(inner),
        _ => None,
    }
}

fn eval_not(d: Datum) -> Datum {
    match d {
        Datum::Bool(b) => Datum::Bool(!b),
        other => other,
    }
}

fn is_comparison(op: &BinaryOperator) -> bool {
    matches!(
        op,
        BinaryOperator::Eq
            | BinaryOperator::NotEq
            | BinaryOperator::Lt
            | BinaryOperator::Gt
            | BinaryOperator::LtEq
            | BinaryOperator::GtEq
    )
}

/// A string argument (SUBSTRING, TRIM): text as is, a char(n) column without its
/// padding, NULL as NULL; another type is 42883 (no implicit cast to text).
fn text_arg(e: &Expr, s: &Scope<'_>) -> SqlResult<Datum> {
    match eval(e, s)? {
        Datum::Text(t) if is_char_column(e, s) => Ok(bpchar_text(Datum::Text(t))),
        d @ (Datum::Text(_) | Datum::Null) => Ok(d),
        other => Err(SqlError::new(
            "42883",
            format!(
                "function pg_catalog.substring({}) does not exist",
                other.type_id().map(|t| t.name()).unwrap_or("unknown")
            ),
        )),
    }
}

/// `substring(text from start for count)`: characters at 1-based positions from
/// `start` (which may be below 1) up to `start + count`; a negative count is 22011.
pub(crate) fn substring(
    text: Datum,
    from: Option<Datum>,
    count: Option<Datum>,
) -> SqlResult<Datum> {
    let Datum::Text(t) = text else {
        return Ok(Datum::Null);
    };
    let int = |d: Option<Datum>| -> SqlResult<Option<Option<i64>>> {
        match d {
            None => Ok(Some(None)),
            Some(Datum::Null) => Ok(None),
            Some(Datum::Int2(v)) => Ok(Some(Some(v as i64))),
            Some(Datum::Int4(v)) => Ok(Some(Some(v as i64))),
            Some(Datum::Int8(v)) => Ok(Some(Some(v))),
            Some(Datum::Text(v)) => match crate::value::parse_text(TypeId::Int4, &v)? {
                Datum::Int4(v) => Ok(Some(Some(v as i64))),
                _ => Ok(None),
            },
            Some(other) => Err(SqlError::new(
                "42883",
                format!(
                    "function pg_catalog.substring(text, {}) does not exist",
                    other.type_id().map(|t| t.name()).unwrap_or("unknown")
                ),
            )),
        }
    };
    let (Some(start), Some(count)) = (int(from)?, int(count)?) else {
        return Ok(Datum::Null);
    };
    let start = start.unwrap_or(1);
    let end = match count {
        Some(c) if c < 0 => {
            return Err(SqlError::new(
                "22011",
                "negative substring length not allowed",
            ))
        }
        Some(c) => start.saturating_add(c),
        None => i64::MAX,
    };
    Ok(Datum::Text(
        t.chars()
            .enumerate()
            .filter(|(i, _)| {
                let pos = *i as i64 + 1;
                pos >= start && pos < end
            })
            .map(|(_, c)| c)
            .collect(),
    ))
}

/// PostgreSQL resolves the branches of CASE / COALESCE to one type before running: a
/// string literal among number or boolean literals must read as that type (22P02 when
/// it does not, even in a branch never taken).
pub(crate) fn unify_literals(exprs: &[&Expr]) -> SqlResult<()> {
    let typed = exprs.iter().find_map(|e| match e {
        Expr::Value(v) => match &v.value {
            Value::Number(..) | Value::Boolean(_) => literal(&v.value).ok(),
            _ => None,
        },
        _ => None,
    });
    let Some(ty) = typed.and_then(|d| d.type_id()) else {
        return Ok(());
    };
    for e in exprs {
        if let Expr::Value(v) = e {
            if let Value::SingleQuotedString(t) = &v.value {
                crate::value::parse_text(ty, t)?;
            }
        }
    }
    Ok(())
}

/// Whether `e` is an untyped literal or parameter (PostgreSQL's `unknown`), whose text
/// takes the type the other operand asks for.
fn untyped(e: &Expr) -> bool {
    match e {
        Expr::Value(_) => true,
        Expr::Nested(x) => untyped(x),
        _ => false,
    }
}

/// Whether `e` names a `char(n)` column: of the row's frames (searched outwards, as
/// the lookup does), or of the scope's table.
pub(crate) fn is_char_column(e: &Expr, s: &Scope<'_>) -> bool {
    // A cast to char(n) is bpchar too.
    if let Expr::Cast { data_type, .. } = e {
        return matches!(data_type, DataType::Char(_) | DataType::Character(_));
    }
    if let Expr::Nested(inner) = e {
        return is_char_column(inner, s);
    }
    // min / max of a char(n) column are char(n) too.
    if let Expr::Function(f) = e {
        let name = function_name(f);
        let args = function_args(f);
        return matches!(name.as_str(), "min" | "max")
            && args.len() == 1
            && is_char_column(args[0], s);
    }
    if let Some(f) = s.frame {
        let Some((qual, name)) = crate::rel::col_ref(e) else {
            return false;
        };
        let mut frame = Some(f);
        while let Some(f) = frame {
            if let Ok(Some(i)) = crate::rel::find_col(f.cols, qual.as_deref(), &name) {
                return f.cols[i].bpchar;
            }
            frame = f.outer;
        }
        return false;
    }
    is_table_char_column(e, s)
}

/// A `char(n)` value as the text it converts to: without its trailing spaces.
pub(crate) fn bpchar_text(v: Datum) -> Datum {
    match v {
        Datum::Text(mut t) => {
            t.truncate(t.trim_end_matches(' ').len());
            Datum::Text(t)
        }
        other => other,
    }
}

/// Whether `e` names a `char(n)` column of the scope's table.
fn is_table_char_column(e: &Expr, s: &Scope<'_>) -> bool {
    let id = match e {
        Expr::Identifier(id) => id,
        Expr::CompoundIdentifier(ids) => match ids.last() {
            Some(i) => i,
            None => return false,
        },
        _ => return false,
    };
    let lname = crate::names::ident(id);
    s.frame.is_none()
        && s.columns
            .iter()
            .any(|c| c.name == lname && c.declared == walrus_engine::catalog::DeclaredType::Char)
}

fn column(s: &Scope<'_>, id: &sqlparser::ast::Ident) -> SqlResult<Datum> {
    let name = id.value.as_str();
    let quoted = id.quote_style.is_some();
    // `c.name == name.to_ascii_lowercase()` without the copy (once per row and
    // reference); a quoted name is taken as written.
    let folded_eq = |c: &str| {
        c.len() == name.len()
            && c.bytes()
                .zip(name.bytes())
                .all(|(a, b)| a == if quoted { b } else { b.to_ascii_lowercase() })
    };
    let i = s
        .columns
        .iter()
        .position(|c| folded_eq(&c.name))
        .ok_or_else(|| SqlError::new("42703", format!("column \"{name}\" does not exist")))?;
    let row = s
        .row
        .ok_or_else(|| SqlError::new("42703", format!("column \"{name}\" does not exist")))?;
    Ok(row.get(i).cloned().unwrap_or(Datum::Null))
}

pub fn function_args(f: &sqlparser::ast::Function) -> Vec<&Expr> {
    match &f.args {
        FunctionArguments::List(l) => l
            .args
            .iter()
            .filter_map(|a| match a {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e))
                | FunctionArg::Named {
                    arg: FunctionArgExpr::Expr(e),
                    ..
                } => Some(e),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

pub fn function_name(f: &sqlparser::ast::Function) -> String {
    f.name
        .0
        .last()
        .map(|p| p.to_string().to_ascii_lowercase())
        .unwrap_or_default()
}

fn hooks<'a>(s: &Scope<'a>) -> SqlResult<&'a dyn Hooks> {
    s.hooks
        .ok_or_else(|| SqlError::unsupported("subqueries are not supported here"))
}

/// `v IN (items)` with SQL's three-valued result.
/// One binary operator node whose left operand `left` has been evaluated to `l`.
fn binary_step(
    left: &Expr,
    op: &BinaryOperator,
    right: &Expr,
    l: Datum,
    s: &Scope<'_>,
) -> SqlResult<Datum> {
    if matches!(op, BinaryOperator::And | BinaryOperator::Or) {
        return logic(l, op, || eval(right, s));
    }
    let arithmetic = matches!(
        op,
        BinaryOperator::Plus
            | BinaryOperator::Minus
            | BinaryOperator::Multiply
            | BinaryOperator::Divide
            | BinaryOperator::Modulo
            | BinaryOperator::BitwiseAnd
    );
    let null = |e: &Expr| matches!(e, Expr::Value(v) if matches!(v.value, Value::Null));
    if arithmetic && null(left) && null(right) {
        return Err(SqlError::new(
            "42725",
            format!("operator is not unique: unknown {op} unknown"),
        ));
    }
    let (mut l, mut r) = (l, eval(right, s)?);
    if matches!(op, BinaryOperator::StringConcat) {
        // `||` takes text: a char(n) operand loses its padding.
        if is_char_column(left, s) {
            l = bpchar_text(l);
        }
        if is_char_column(right, s) {
            r = bpchar_text(r);
        }
    }
    if arithmetic {
        // A text value (not an untyped literal) has no arithmetic operators: no
        // implicit cast from text to a number in PostgreSQL.
        if typed_text(&l, left) || typed_text(&r, right) {
            let name = |d: &Datum| d.type_id().map(|t| t.name()).unwrap_or("unknown");
            return Err(SqlError::new(
                "42883",
                format!("operator does not exist: {} {op} {}", name(&l), name(&r)),
            ));
        }
    }
    if is_comparison(op) {
        check_comparable(&l, left, op, &r, right)?;
    }
    let (lc, rc) = (is_char_column(left, s), is_char_column(right, s));
    if is_comparison(op) && (lc || rc) {
        // A char(n) column compares without its trailing spaces (bpchar); so does
        // an untyped literal it is compared with (it becomes bpchar). Against a
        // text value the column converts to text and the text keeps its spaces.
        if lc || untyped(left) {
            l = bpchar_text(l);
        }
        if rc || untyped(right) {
            r = bpchar_text(r);
        }
    }
    match op {
        BinaryOperator::PGRegexMatch
        | BinaryOperator::PGRegexIMatch
        | BinaryOperator::PGRegexNotMatch
        | BinaryOperator::PGRegexNotIMatch => regex_op(&l, op, &r),
        BinaryOperator::PGCustomBinaryOperator(parts) => {
            let op = match parts.last().map(String::as_str) {
                Some("~") => BinaryOperator::PGRegexMatch,
                Some("~*") => BinaryOperator::PGRegexIMatch,
                Some("!~") => BinaryOperator::PGRegexNotMatch,
                Some("!~*") => BinaryOperator::PGRegexNotIMatch,
                Some("=") => BinaryOperator::Eq,
                Some("<>") => BinaryOperator::NotEq,
                Some("<") => BinaryOperator::Lt,
                Some(">") => BinaryOperator::Gt,
                Some("<=") => BinaryOperator::LtEq,
                Some(">=") => BinaryOperator::GtEq,
                Some("||") => BinaryOperator::StringConcat,
                _ => {
                    return Err(SqlError::new(
                        "42883",
                        format!("operator does not exist: {}", parts.join(".")),
                    ))
                }
            };
            match op {
                BinaryOperator::PGRegexMatch
                | BinaryOperator::PGRegexIMatch
                | BinaryOperator::PGRegexNotMatch
                | BinaryOperator::PGRegexNotIMatch => regex_op(&l, &op, &r),
                _ => binary(&l, &op, &r),
            }
        }
        _ => binary(&l, op, &r),
    }
}

fn in_values(v: &Datum, items: &[Datum], negated: bool) -> SqlResult<Datum> {
    // `x IN ()` over an empty subquery is false whatever x is, NULL included (SQL's
    // quantified comparison over an empty set; PostgreSQL's `ANY` answers so).
    if items.is_empty() {
        return Ok(Datum::Bool(negated));
    }
    if v.is_null() {
        return Ok(Datum::Null);
    }
    let mut saw_null = false;
    for it in items {
        match binary(v, &BinaryOperator::Eq, it)? {
            Datum::Bool(true) => return Ok(Datum::Bool(!negated)),
            Datum::Null => saw_null = true,
            _ => {}
        }
    }
    Ok(if saw_null {
        Datum::Null
    } else {
        Datum::Bool(negated)
    })
}

/// A value of a number type (integers, double precision, numeric).
pub(crate) fn is_number(d: &Datum) -> bool {
    matches!(
        d,
        Datum::Int2(_) | Datum::Int4(_) | Datum::Int8(_) | Datum::Float8(_) | Datum::Numeric(_)
    )
}

/// A text value that is not an untyped literal (which PostgreSQL types by context).
fn typed_text(d: &Datum, e: &Expr) -> bool {
    matches!(d, Datum::Text(_)) && !untyped(e)
}

/// The comparisons PostgreSQL has no operator for, refused with its 42883 rather than
/// answered through a conversion it would not make: boolean with a number, a text
/// column with a number (no implicit cast between them), time/timetz/interval with a
/// typed text value. `=`, `<`, BETWEEN's bounds and IN's items all go through here.
fn check_comparable(
    l: &Datum,
    left: &Expr,
    op: &BinaryOperator,
    r: &Datum,
    right: &Expr,
) -> SqlResult<()> {
    // A text column (not an untyped literal) has no comparison with a number.
    let text_column =
        |d: &Datum, e: &Expr| matches!(d, Datum::Text(_)) && crate::rel::col_ref(e).is_some();
    // time, timetz and interval read an untyped literal as their own type; a text value
    // has no comparison with them (no implicit cast).
    let timelike = |d: &Datum| matches!(d, Datum::Time(_) | Datum::TimeTz(..) | Datum::Interval(_));
    if (matches!(l, Datum::Bool(_)) && is_number(r))
        || (is_number(l) && matches!(r, Datum::Bool(_)))
        || (text_column(l, left) && is_number(r))
        || (is_number(l) && text_column(r, right))
        || (timelike(l) && typed_text(r, right))
        || (typed_text(l, left) && timelike(r))
    {
        let name = |d: &Datum| d.type_id().map(|t| t.name()).unwrap_or("unknown");
        return Err(SqlError::new(
            "42883",
            format!("operator does not exist: {} {op} {}", name(l), name(r)),
        ));
    }
    Ok(())
}
