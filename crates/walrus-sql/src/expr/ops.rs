//! Operators over values: comparison, arithmetic, boolean logic, LIKE and regular
//! expressions, with PostgreSQL's NULL and type rules.

use std::cmp::Ordering;

use sqlparser::ast::BinaryOperator;
use walrus_engine::access::datum::{compare_datums, Datum, TypeId};

use super::cast::{as_f64, as_i64, coerce};
use crate::error::{SqlError, SqlResult};
use crate::numeric;
use crate::value::{format_text, parse_text};

pub(crate) fn logic(
    l: Datum,
    op: &BinaryOperator,
    r: impl FnOnce() -> SqlResult<Datum>,
) -> SqlResult<Datum> {
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

/// Whether a value is of a type whose operators beyond equality belong to a later
/// issue (json, jsonb, arrays, time, interval).
fn io_only(d: &Datum) -> bool {
    matches!(
        d,
        Datum::Json(_)
            | Datum::Jsonb(_)
            | Datum::Array(_)
            | Datum::Time(_)
            | Datum::TimeTz(..)
            | Datum::Interval(_)
            | Datum::Reg(_)
            | Datum::Int2Vector(_)
    )
}

/// Refuses what walrus would answer wrongly for the io-only types: `json` has no
/// equality in PostgreSQL (42883); jsonb ordering and every other operator on these
/// types are not built (0A000).
fn check_io_only(l: &Datum, op: &BinaryOperator, r: &Datum) -> SqlResult<()> {
    use BinaryOperator as B;
    if !io_only(l) && !io_only(r) {
        return Ok(());
    }
    if matches!(l, Datum::Int2Vector(_)) || matches!(r, Datum::Int2Vector(_)) {
        return Err(SqlError::unsupported(format!(
            "operator {op} on {} and {} is not supported",
            type_name(l),
            type_name(r)
        )));
    }
    let comparison = matches!(op, B::Eq | B::NotEq | B::Lt | B::LtEq | B::Gt | B::GtEq);
    // Object identifiers compare with each other and with `oid` values (int8 here) by
    // OID, as PostgreSQL's implicit casts to oid make them.
    let oid_like = |d: &Datum| {
        matches!(
            d,
            Datum::Reg(_) | Datum::Int2(_) | Datum::Int4(_) | Datum::Int8(_) | Datum::Null
        )
    };
    if (matches!(l, Datum::Reg(_)) || matches!(r, Datum::Reg(_)))
        && comparison
        && oid_like(l)
        && oid_like(r)
    {
        return Ok(());
    }
    // time and timetz compare in PostgreSQL through a cast to timetz in the session's
    // zone: not built.
    if matches!(
        (l, r),
        (Datum::Time(_), Datum::TimeTz(..)) | (Datum::TimeTz(..), Datum::Time(_))
    ) {
        return Err(SqlError::unsupported(
            "comparison of time with time with time zone is not supported",
        ));
    }
    if comparison && (matches!(l, Datum::Json(_)) || matches!(r, Datum::Json(_))) {
        return Err(SqlError::new(
            "42883",
            format!(
                "operator does not exist: {} {op} {}",
                type_name(l),
                type_name(r)
            ),
        ));
    }
    let equality = matches!(op, B::Eq | B::NotEq);
    let ordered = |d: &Datum| {
        matches!(
            d,
            Datum::Time(_) | Datum::TimeTz(..) | Datum::Interval(_) | Datum::Array(_)
        )
    };
    let same_type = l.type_id() == r.type_id()
        || matches!(l, Datum::Text(_) | Datum::Null)
        || matches!(r, Datum::Text(_) | Datum::Null);
    // Text here is an untyped literal (a typed text value is refused by the caller,
    // `expr::eval`), read as the other side's type: it orders as that type does.
    let ordered_or_text = |d: &Datum| ordered(d) || d.is_null() || matches!(d, Datum::Text(_));
    if comparison && same_type && (equality || ordered_or_text(l) && ordered_or_text(r)) {
        return Ok(());
    }
    if comparison && !same_type {
        return Err(SqlError::new(
            "42883",
            format!(
                "operator does not exist: {} {op} {}",
                type_name(l),
                type_name(r)
            ),
        ));
    }
    Err(SqlError::unsupported(format!(
        "operator {op} on {} and {} is not supported",
        type_name(l),
        type_name(r)
    )))
}

pub fn binary(l: &Datum, op: &BinaryOperator, r: &Datum) -> SqlResult<Datum> {
    use BinaryOperator as B;
    if matches!(
        op,
        B::Arrow | B::LongArrow | B::AtArrow | B::ArrowAt | B::Question
    ) {
        return crate::json::operator(l, op, r);
    }
    check_io_only(l, op, r)?;
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
            // bytea || bytea is bytea; mixed with text it would need PostgreSQL's
            // literal typing rules, which walrus does not have: refused.
            match (l, r) {
                (Datum::Bytea(a), Datum::Bytea(b)) => {
                    crate::memory::check_concat(a.len(), b.len())?;
                    return Ok(Datum::Bytea([a.as_slice(), b.as_slice()].concat()));
                }
                (Datum::Bytea(_), _) | (_, Datum::Bytea(_)) => {
                    return Err(SqlError::unsupported(
                        "|| between bytea and another type is not supported",
                    ))
                }
                _ => {}
            }
            let (a, b) = (
                format_text(l).unwrap_or_default(),
                format_text(r).unwrap_or_default(),
            );
            crate::memory::check_concat(a.len(), b.len())?;
            Ok(Datum::Text(a + &b))
        }
        B::Plus | B::Minus | B::Multiply | B::Divide | B::Modulo => arith(l, r, op),
        B::BitwiseAnd => super::subscript::bitwise_and(l, r),
        other => Err(SqlError::unsupported(format!(
            "operator {other} is not supported"
        ))),
    }
}

/// PostgreSQL's float order: NaN equals NaN and sorts above every other value,
/// Infinity included (so `= 'NaN'` finds NaNs and `max` is NaN when one is present).
pub fn float_cmp(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
    }
}

/// Compares two non-null values, converting a text literal to the other side's type.
pub fn compare_values(l: &Datum, r: &Datum) -> SqlResult<Ordering> {
    match (l, r) {
        (Datum::Text(t), other) if !matches!(other, Datum::Text(_)) => {
            let ty = other.type_id().unwrap_or(TypeId::Text);
            compare_values(&parse_text(ty, t)?, other)
        }
        (other, Datum::Text(t)) if !matches!(other, Datum::Text(_)) => {
            let ty = other.type_id().unwrap_or(TypeId::Text);
            compare_values(other, &parse_text(ty, t)?)
        }
        // date, timestamp and timestamptz compare as the wider type (timestamptz if
        // either is one, read in the session's zone), as PostgreSQL's cross-type
        // operators do.
        (
            Datum::Date(_) | Datum::Timestamp(_) | Datum::TimestampTz(_),
            Datum::Date(_) | Datum::Timestamp(_) | Datum::TimestampTz(_),
        ) if l.type_id() != r.type_id() => {
            let ty = if matches!(l, Datum::TimestampTz(_)) || matches!(r, Datum::TimestampTz(_)) {
                TypeId::TimestampTz
            } else {
                TypeId::Timestamp
            };
            compare_values(&coerce(l.clone(), ty)?, &coerce(r.clone(), ty)?)
        }
        // Exact when no float is involved (numeric with numeric or an integer).
        (Datum::Numeric(_), _) | (_, Datum::Numeric(_))
            if as_exact(l).is_some() && as_exact(r).is_some() =>
        {
            Ok(numeric::compare(&exact(l)?, &exact(r)?))
        }
        (a, b)
            if as_f64(a).is_some()
                && as_f64(b).is_some()
                && (as_i64(a).is_none() || as_i64(b).is_none()) =>
        {
            Ok(float_cmp(
                as_f64(a).unwrap_or(0.0),
                as_f64(b).unwrap_or(0.0),
            ))
        }
        (a, b) => Ok(compare_datums(a, b)),
    }
}

pub(crate) fn arith(l: &Datum, r: &Datum, op: &BinaryOperator) -> SqlResult<Datum> {
    if l.is_null() || r.is_null() {
        return Ok(Datum::Null);
    }
    // Unary minus reaches here as 0 - x: interval/time arithmetic is not built.
    if io_only(l) || io_only(r) {
        return Err(SqlError::unsupported(format!(
            "operator {op} on {} and {} is not supported",
            type_name(l),
            type_name(r)
        )));
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
    if let (Some(a), Some(b)) = (as_i64(l), as_i64(r)) {
        // Result type: the wider operand type (int2 op int2 is int2, as PostgreSQL).
        let rank = |d: &Datum| match d {
            Datum::Int2(_) => 0,
            Datum::Int4(_) => 1,
            _ => 2,
        };
        let ty = match rank(l).max(rank(r)) {
            0 => TypeId::Int2,
            1 => TypeId::Int4,
            _ => TypeId::Int8,
        };
        let overflow = || SqlError::new("22003", format!("{} out of range", ty.name()));
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
                    // i64::MIN % -1 is 0 in PostgreSQL.
                    Some(a.checked_rem(b).unwrap_or(0))
                }
            }
            _ => None,
        }
        .ok_or_else(overflow)?;
        return Ok(match ty {
            TypeId::Int2 => Datum::Int2(i16::try_from(v).map_err(|_| overflow())?),
            TypeId::Int4 => Datum::Int4(i32::try_from(v).map_err(|_| overflow())?),
            _ => Datum::Int8(v),
        });
    }
    let float = matches!(l, Datum::Float8(_)) || matches!(r, Datum::Float8(_));
    if !float && as_exact(l).is_some() && as_exact(r).is_some() {
        let c = match op {
            BinaryOperator::Plus => '+',
            BinaryOperator::Minus => '-',
            BinaryOperator::Multiply => '*',
            BinaryOperator::Divide => '/',
            _ => '%',
        };
        return Ok(Datum::Numeric(numeric::format(&numeric::arith(
            &exact(l)?,
            c,
            &exact(r)?,
        )?)));
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
                _ => {
                    return Err(SqlError::new(
                        "42883",
                        "operator does not exist: double precision % double precision",
                    ))
                }
            };
            if v.is_infinite() && a.is_finite() && b.is_finite() {
                return Err(SqlError::new("22003", "value out of range: overflow"));
            }
            // PostgreSQL's float8mul / float8div: a zero product of non-zero factors,
            // or a zero quotient of a non-zero dividend by a finite divisor, underflowed.
            let underflow = match op {
                BinaryOperator::Multiply => v == 0.0 && a != 0.0 && b != 0.0,
                BinaryOperator::Divide => v == 0.0 && a != 0.0 && b.is_finite(),
                _ => false,
            };
            if underflow {
                return Err(SqlError::new("22003", "value out of range: underflow"));
            }
            Ok(Datum::Float8(v))
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

/// Whether a value takes part in exact (numeric) arithmetic: numeric or an integer.
fn as_exact(d: &Datum) -> Option<()> {
    matches!(
        d,
        Datum::Numeric(_) | Datum::Int2(_) | Datum::Int4(_) | Datum::Int8(_)
    )
    .then_some(())
}

fn exact(d: &Datum) -> SqlResult<bigdecimal::BigDecimal> {
    match d {
        Datum::Numeric(t) => numeric::parse(t),
        other => Ok(bigdecimal::BigDecimal::from(as_i64(other).unwrap_or(0))),
    }
}

pub(crate) fn type_name(d: &Datum) -> &'static str {
    d.type_id().map(|t| t.name()).unwrap_or("unknown")
}

/// SQL `LIKE`: `%` any run, `_` one character, `esc` quotes the next character.
pub fn like_match(v: &str, p: &str, esc: Option<char>) -> bool {
    let (v, p): (Vec<char>, Vec<char>) = (v.chars().collect(), p.chars().collect());
    // Iterative matcher with one backtrack point for the last `%` (linear in practice).
    let (mut vi, mut pi) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while vi < v.len() {
        let (lit, step) = match p.get(pi) {
            Some(&c) if Some(c) == esc => (p.get(pi + 1).copied(), 2),
            Some('%') => {
                star = Some((pi, vi));
                pi += 1;
                continue;
            }
            Some('_') => (None, 1),
            Some(&c) => (Some(c), 1),
            None => (Some('\0'), 0),
        };
        let ok = step > 0 && lit.is_none_or(|c| c == v[vi]);
        if ok {
            vi += 1;
            pi += step;
        } else if let Some((sp, sv)) = star {
            pi = sp + 1;
            vi = sv + 1;
            star = Some((sp, sv + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '%')
}

/// `~`, `~*`, `!~`, `!~*` with PostgreSQL's (POSIX-like) regular expressions.
pub(crate) fn regex_op(l: &Datum, op: &BinaryOperator, r: &Datum) -> SqlResult<Datum> {
    if io_only(l) || io_only(r) {
        return Err(SqlError::new(
            "42883",
            format!(
                "operator does not exist: {} {op} {}",
                type_name(l),
                type_name(r)
            ),
        ));
    }
    let (Some(text), Some(pat)) = (format_text(l), format_text(r)) else {
        return Ok(Datum::Null);
    };
    let fold = matches!(
        op,
        BinaryOperator::PGRegexIMatch | BinaryOperator::PGRegexNotIMatch
    );
    let re = regex::RegexBuilder::new(&pat)
        .case_insensitive(fold)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| {
            SqlError::new(
                "2201B",
                format!(
                    "invalid regular expression: {}",
                    e.to_string().lines().last().unwrap_or("")
                ),
            )
        })?;
    let negate = matches!(
        op,
        BinaryOperator::PGRegexNotMatch | BinaryOperator::PGRegexNotIMatch
    );
    Ok(Datum::Bool(re.is_match(&text) != negate))
}
