//! Expression evaluation over one row: literals, `$n` parameters, column references,
//! arithmetic, comparison, boolean logic, casts and the functions pgbench and psql use.

use std::cmp::Ordering;

use sqlparser::ast::{
    BinaryOperator, CastKind, DataType, Expr, FunctionArg, FunctionArgExpr, FunctionArguments,
    UnaryOperator, Value,
};
use walrus_engine::access::datum::{compare_datums, Datum, TypeId};
use walrus_engine::catalog::ColumnDef;

use crate::error::{SqlError, SqlResult};
use crate::value::{format_text, parse_text};

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
}

pub fn type_from_sql(dt: &DataType) -> SqlResult<TypeId> {
    use DataType as D;
    Ok(match dt {
        D::Int(_) | D::Integer(_) | D::Int4(_) => TypeId::Int4,
        D::SmallInt(_) | D::Int2(_) => TypeId::Int2,
        D::BigInt(_) | D::Int8(_) => TypeId::Int8,
        D::Boolean | D::Bool => TypeId::Bool,
        D::Double(_) | D::DoublePrecision | D::Float8 | D::Real | D::Float4 | D::Float(_) => {
            TypeId::Float8
        }
        D::Numeric(_) | D::Decimal(_) | D::Dec(_) => TypeId::Numeric,
        D::Text
        | D::Varchar(_)
        | D::Char(_)
        | D::Character(_)
        | D::CharVarying(_)
        | D::CharacterVarying(_)
        | D::String(_) => TypeId::Text,
        D::Timestamp(_, tz) => match tz {
            sqlparser::ast::TimezoneInfo::WithTimeZone | sqlparser::ast::TimezoneInfo::Tz => {
                TypeId::TimestampTz
            }
            _ => TypeId::Timestamp,
        },
        D::Date => TypeId::Date,
        other => {
            return Err(SqlError::new(
                "42704",
                format!("type \"{other}\" is not supported"),
            ))
        }
    })
}

fn as_i64(d: &Datum) -> Option<i64> {
    match d {
        Datum::Int2(v) => Some(*v as i64),
        Datum::Int4(v) => Some(*v as i64),
        Datum::Int8(v) => Some(*v),
        _ => None,
    }
}

fn as_f64(d: &Datum) -> Option<f64> {
    match d {
        Datum::Float8(v) => Some(*v),
        Datum::Numeric(s) => s.parse().ok(),
        other => as_i64(other).map(|v| v as f64),
    }
}

/// Converts a value to `ty` (assignment and explicit casts).
pub fn coerce(d: Datum, ty: TypeId) -> SqlResult<Datum> {
    if d.is_null() || d.type_id() == Some(ty) {
        return Ok(d);
    }
    let range = || SqlError::new("22003", format!("{} out of range", ty.name()));
    Ok(match (ty, &d) {
        (TypeId::Int2, _) if as_i64(&d).is_some() => {
            Datum::Int2(i16::try_from(as_i64(&d).unwrap_or(0)).map_err(|_| range())?)
        }
        (TypeId::Int4, _) if as_i64(&d).is_some() => {
            Datum::Int4(i32::try_from(as_i64(&d).unwrap_or(0)).map_err(|_| range())?)
        }
        (TypeId::Int8, _) if as_i64(&d).is_some() => Datum::Int8(as_i64(&d).unwrap_or(0)),
        (TypeId::Int2 | TypeId::Int4 | TypeId::Int8, Datum::Float8(f)) => {
            coerce(Datum::Int8(f.round() as i64), ty)?
        }
        (TypeId::Float8, _) if as_f64(&d).is_some() => Datum::Float8(as_f64(&d).unwrap_or(0.0)),
        (TypeId::Numeric, _) if as_i64(&d).is_some() || matches!(d, Datum::Float8(_)) => {
            Datum::Numeric(format_text(&d).unwrap_or_default())
        }
        (TypeId::Text, _) => Datum::Text(format_text(&d).unwrap_or_default()),
        (TypeId::TimestampTz, Datum::Timestamp(v)) => Datum::TimestampTz(*v),
        (TypeId::Timestamp, Datum::TimestampTz(v)) => Datum::Timestamp(*v),
        (_, Datum::Text(s)) => parse_text(ty, s)?,
        _ => {
            return Err(SqlError::new(
                "42846",
                format!(
                    "cannot cast type {} to {}",
                    d.type_id().map(|t| t.name()).unwrap_or("unknown"),
                    ty.name()
                ),
            ))
        }
    })
}

fn literal(v: &Value) -> SqlResult<Datum> {
    Ok(match v {
        Value::Number(n, _) => {
            if let Ok(i) = n.parse::<i32>() {
                Datum::Int4(i)
            } else if let Ok(i) = n.parse::<i64>() {
                Datum::Int8(i)
            } else {
                Datum::Numeric(n.clone())
            }
        }
        Value::SingleQuotedString(s)
        | Value::EscapedStringLiteral(s)
        | Value::DollarQuotedString(sqlparser::ast::DollarQuotedString { value: s, .. }) => {
            Datum::Text(s.clone())
        }
        Value::Boolean(b) => Datum::Bool(*b),
        Value::Null => Datum::Null,
        other => {
            return Err(SqlError::unsupported(format!(
                "literal {other} is not supported"
            )))
        }
    })
}

pub fn eval(e: &Expr, s: &Scope<'_>) -> SqlResult<Datum> {
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
        Expr::Identifier(id) => column(s, &id.value),
        Expr::CompoundIdentifier(ids) => {
            column(s, &ids.last().map(|i| i.value.clone()).unwrap_or_default())
        }
        Expr::Nested(inner) => eval(inner, s),
        Expr::UnaryOp { op, expr } => {
            let v = eval(expr, s)?;
            match op {
                UnaryOperator::Minus => arith(&Datum::Int4(0), &v, &BinaryOperator::Minus),
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
            if matches!(op, BinaryOperator::And | BinaryOperator::Or) {
                return logic(eval(left, s)?, op, || eval(right, s));
            }
            let (l, r) = (eval(left, s)?, eval(right, s)?);
            binary(&l, op, &r)
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
            let ge = binary(&v, &BinaryOperator::GtEq, &eval(low, s)?)?;
            let le = binary(&v, &BinaryOperator::LtEq, &eval(high, s)?)?;
            let both = logic(ge, &BinaryOperator::And, || Ok(le))?;
            Ok(if *negated { eval_not(both) } else { both })
        }
        Expr::InList {
            expr,
            list,
            negated,
        } => {
            let v = eval(expr, s)?;
            let mut found = false;
            for item in list {
                if matches!(
                    binary(&v, &BinaryOperator::Eq, &eval(item, s)?)?,
                    Datum::Bool(true)
                ) {
                    found = true;
                    break;
                }
            }
            Ok(Datum::Bool(found != *negated))
        }
        Expr::Cast {
            kind: CastKind::Cast | CastKind::DoubleColon,
            expr,
            data_type,
            ..
        } => {
            let ty = type_from_sql(data_type)?;
            coerce(eval(expr, s)?, ty)
        }
        Expr::TypedString(ts) => {
            let ty = type_from_sql(&ts.data_type)?;
            let text = match &ts.value.value {
                Value::SingleQuotedString(v) => v.clone(),
                other => other.to_string(),
            };
            parse_text(ty, &text)
        }
        Expr::Function(f) => function(f, s),
        other => Err(SqlError::unsupported(format!(
            "expression {other} is not supported"
        ))),
    }
}

fn eval_not(d: Datum) -> Datum {
    match d {
        Datum::Bool(b) => Datum::Bool(!b),
        other => other,
    }
}

fn column(s: &Scope<'_>, name: &str) -> SqlResult<Datum> {
    let lname = name.to_ascii_lowercase();
    let i = s
        .columns
        .iter()
        .position(|c| c.name == lname)
        .ok_or_else(|| SqlError::new("42703", format!("column \"{name}\" does not exist")))?;
    let row = s
        .row
        .ok_or_else(|| SqlError::new("42703", format!("column \"{name}\" does not exist")))?;
    Ok(row.get(i).cloned().unwrap_or(Datum::Null))
}

fn logic(l: Datum, op: &BinaryOperator, r: impl FnOnce() -> SqlResult<Datum>) -> SqlResult<Datum> {
    let to_b = |d: &Datum| match d {
        Datum::Bool(b) => Ok(Some(*b)),
        Datum::Null => Ok(None),
        _ => Err(SqlError::new(
            "42804",
            "argument of AND/OR must be type boolean",
        )),
    };
    let lb = to_b(&l)?;
    let and = matches!(op, BinaryOperator::And);
    if lb == Some(!and) {
        return Ok(Datum::Bool(!and)); // short-circuit: false AND x, true OR x
    }
    let rb = to_b(&r()?)?;
    Ok(match (lb, rb) {
        (Some(a), Some(b)) => Datum::Bool(if and { a && b } else { a || b }),
        (_, Some(b)) if b != and => Datum::Bool(!and),
        _ => Datum::Null,
    })
}

pub fn binary(l: &Datum, op: &BinaryOperator, r: &Datum) -> SqlResult<Datum> {
    use BinaryOperator as B;
    match op {
        B::Eq | B::NotEq | B::Lt | B::LtEq | B::Gt | B::GtEq => {
            if l.is_null() || r.is_null() {
                return Ok(Datum::Null);
            }
            let ord = compare_values(l, r)?;
            Ok(Datum::Bool(match op {
                B::Eq => ord == Ordering::Equal,
                B::NotEq => ord != Ordering::Equal,
                B::Lt => ord == Ordering::Less,
                B::LtEq => ord != Ordering::Greater,
                B::Gt => ord == Ordering::Greater,
                _ => ord != Ordering::Less,
            }))
        }
        B::StringConcat => {
            if l.is_null() || r.is_null() {
                return Ok(Datum::Null);
            }
            Ok(Datum::Text(format!(
                "{}{}",
                format_text(l).unwrap_or_default(),
                format_text(r).unwrap_or_default()
            )))
        }
        B::Plus | B::Minus | B::Multiply | B::Divide | B::Modulo => arith(l, r, op),
        other => Err(SqlError::unsupported(format!(
            "operator {other} is not supported"
        ))),
    }
}

/// Compares two non-null values, converting a text literal to the other side's type.
pub fn compare_values(l: &Datum, r: &Datum) -> SqlResult<Ordering> {
    match (l, r) {
        (Datum::Text(t), other) if !matches!(other, Datum::Text(_)) => {
            let ty = other.type_id().unwrap_or(TypeId::Text);
            Ok(compare_datums(&parse_text(ty, t)?, other))
        }
        (other, Datum::Text(t)) if !matches!(other, Datum::Text(_)) => {
            let ty = other.type_id().unwrap_or(TypeId::Text);
            Ok(compare_datums(other, &parse_text(ty, t)?))
        }
        (a, b)
            if as_f64(a).is_some()
                && as_f64(b).is_some()
                && (as_i64(a).is_none() || as_i64(b).is_none()) =>
        {
            Ok(as_f64(a)
                .unwrap_or(0.0)
                .partial_cmp(&as_f64(b).unwrap_or(0.0))
                .unwrap_or(Ordering::Equal))
        }
        (a, b) => Ok(compare_datums(a, b)),
    }
}

fn arith(l: &Datum, r: &Datum, op: &BinaryOperator) -> SqlResult<Datum> {
    if l.is_null() || r.is_null() {
        return Ok(Datum::Null);
    }
    // An untyped parameter or literal ('5', $1 sent as text) takes the other side's type.
    match (l, r) {
        (Datum::Text(t), other) if other.type_id().is_some_and(|ty| ty != TypeId::Text) => {
            let ty = other.type_id().unwrap_or(TypeId::Text);
            return arith(&parse_text(ty, t)?, r, op);
        }
        (other, Datum::Text(t)) if other.type_id().is_some_and(|ty| ty != TypeId::Text) => {
            let ty = other.type_id().unwrap_or(TypeId::Text);
            return arith(l, &parse_text(ty, t)?, op);
        }
        _ => {}
    }
    let overflow = || SqlError::new("22003", "integer out of range");
    if let (Some(a), Some(b)) = (as_i64(l), as_i64(r)) {
        let v = match op {
            BinaryOperator::Plus => a.checked_add(b),
            BinaryOperator::Minus => a.checked_sub(b),
            BinaryOperator::Multiply => a.checked_mul(b),
            BinaryOperator::Divide | BinaryOperator::Modulo => {
                if b == 0 {
                    return Err(SqlError::new("22012", "division by zero"));
                }
                if matches!(op, BinaryOperator::Divide) {
                    a.checked_div(b)
                } else {
                    a.checked_rem(b)
                }
            }
            _ => None,
        }
        .ok_or_else(overflow)?;
        // Result type: the wider of the two operand types (PostgreSQL's int rules).
        let wide = matches!(l, Datum::Int8(_)) || matches!(r, Datum::Int8(_));
        return Ok(if wide {
            Datum::Int8(v)
        } else {
            Datum::Int4(i32::try_from(v).map_err(|_| overflow())?)
        });
    }
    match (as_f64(l), as_f64(r)) {
        (Some(a), Some(b)) => {
            let v = match op {
                BinaryOperator::Plus => a + b,
                BinaryOperator::Minus => a - b,
                BinaryOperator::Multiply => a * b,
                BinaryOperator::Divide => {
                    if b == 0.0 {
                        return Err(SqlError::new("22012", "division by zero"));
                    }
                    a / b
                }
                _ => a % b,
            };
            Ok(
                if matches!(l, Datum::Numeric(_)) || matches!(r, Datum::Numeric(_)) {
                    Datum::Numeric(v.to_string())
                } else {
                    Datum::Float8(v)
                },
            )
        }
        _ => Err(SqlError::new(
            "42883",
            format!(
                "operator does not exist: {} {op} {}",
                type_name(l),
                type_name(r)
            ),
        )),
    }
}

fn type_name(d: &Datum) -> &'static str {
    d.type_id().map(|t| t.name()).unwrap_or("unknown")
}

/// Parses PostgreSQL's `X/X` LSN text.
fn parse_lsn(d: &Datum) -> Option<u64> {
    let t = format_text(d)?;
    let (hi, lo) = t.split_once('/')?;
    Some((u64::from_str_radix(hi, 16).ok()? << 32) | u64::from_str_radix(lo, 16).ok()?)
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

fn function(f: &sqlparser::ast::Function, s: &Scope<'_>) -> SqlResult<Datum> {
    let name = function_name(f);
    let args: Vec<Datum> = function_args(f)
        .into_iter()
        .map(|a| eval(a, s))
        .collect::<SqlResult<_>>()?;
    let arg = |i: usize| args.get(i).cloned().unwrap_or(Datum::Null);
    Ok(match name.as_str() {
        "now" | "current_timestamp" | "transaction_timestamp" | "statement_timestamp" => {
            Datum::TimestampTz(s.now)
        }
        "repeat" => {
            let (Some(t), Some(n)) = (format_text(&arg(0)), as_i64(&arg(1))) else {
                return Ok(Datum::Null);
            };
            if n > 100_000_000 / (t.len() as i64).max(1) {
                return Err(SqlError::new("54000", "requested length too large"));
            }
            Datum::Text(t.repeat(n.max(0) as usize))
        }
        "abs" => match arg(0) {
            Datum::Int4(v) => Datum::Int4(
                v.checked_abs()
                    .ok_or_else(|| SqlError::new("22003", "integer out of range"))?,
            ),
            Datum::Int8(v) => Datum::Int8(
                v.checked_abs()
                    .ok_or_else(|| SqlError::new("22003", "bigint out of range"))?,
            ),
            Datum::Float8(v) => Datum::Float8(v.abs()),
            other => other,
        },
        "length" | "char_length" => match format_text(&arg(0)) {
            Some(t) => Datum::Int4(t.chars().count() as i32),
            None => Datum::Null,
        },
        "lower" => format_text(&arg(0))
            .map(|t| Datum::Text(t.to_lowercase()))
            .unwrap_or(Datum::Null),
        "upper" => format_text(&arg(0))
            .map(|t| Datum::Text(t.to_uppercase()))
            .unwrap_or(Datum::Null),
        "coalesce" => args
            .iter()
            .find(|d| !d.is_null())
            .cloned()
            .unwrap_or(Datum::Null),
        "current_setting" => {
            let n = format_text(&arg(0)).unwrap_or_default();
            match (s.setting)(&n.to_ascii_lowercase()) {
                Some(v) => Datum::Text(v),
                None => {
                    return Err(SqlError::new(
                        "42704",
                        format!("unrecognized configuration parameter \"{n}\""),
                    ))
                }
            }
        }
        "version" => Datum::Text(crate::SERVER_VERSION_STRING.to_string()),
        "pg_current_wal_lsn" | "pg_current_wal_insert_lsn" => {
            match (s.setting)(crate::session::WAL_LSN_KEY) {
                Some(l) => Datum::Text(l),
                None => Datum::Null,
            }
        }
        "pg_wal_lsn_diff" => match (parse_lsn(&arg(0)), parse_lsn(&arg(1))) {
            (Some(a), Some(b)) => Datum::Numeric((a as i128 - b as i128).to_string()),
            _ => Datum::Null,
        },
        "pg_sleep" => {
            let secs = match arg(0) {
                Datum::Null => 0.0,
                d => as_f64(&d)
                    .ok_or_else(|| SqlError::new("42883", "function pg_sleep() needs a number"))?,
            };
            let until = std::time::Instant::now()
                + std::time::Duration::from_secs_f64(secs.clamp(0.0, 86_400.0));
            while std::time::Instant::now() < until {
                if s.interrupt
                    .is_some_and(|f| f.load(std::sync::atomic::Ordering::Acquire))
                {
                    return Err(SqlError::new(
                        "57014",
                        "canceling statement due to user request",
                    ));
                }
                std::thread::sleep(
                    std::time::Duration::from_millis(10)
                        .min(until.saturating_duration_since(std::time::Instant::now())),
                );
            }
            Datum::Null
        }
        "pg_backend_pid" => Datum::Int4(std::process::id() as i32),
        "current_database" | "current_schema" => Datum::Text(
            if name == "current_schema" {
                "public"
            } else {
                "postgres"
            }
            .into(),
        ),
        other => {
            return Err(SqlError::new(
                "42883",
                format!("function {other}() does not exist"),
            ))
        }
    })
}
