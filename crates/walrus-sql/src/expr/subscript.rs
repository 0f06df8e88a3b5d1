//! Array subscripts (`a[i]`) and the integer `&` operator: what catalog queries such as
//! pgjdbc's `getIndexInfo` need (`i.indoption[n - 1] & 1::smallint`).
//!
//! Subscripts follow PostgreSQL's `array_subscript_handler`: one integer index per
//! dimension, counted from the array's lower bound (1 for arrays walrus builds, 0 for
//! `int2vector`); an index outside the array or NULL gives NULL. Slices, several
//! subscripts and subscripts of other types (jsonb, and the catalog's text-kept array
//! columns) are refused with 0A000.

use std::borrow::Cow;

use sqlparser::ast::{AccessExpr, Expr, Subscript};
use walrus_engine::access::datum::{Datum, TypeId};

use super::{eval, untyped, Scope};
use crate::error::{SqlError, SqlResult};

/// A field access chain as an array expression and its one subscript: `a[i]`,
/// `(expr)[i]`, and `t.a[i]`, which sqlparser gives as root `t` with the chain `.a`,
/// `[i]`. `None` for anything else (slices, several subscripts, composite fields).
pub(crate) fn subscripted<'a>(
    root: &'a Expr,
    chain: &'a [AccessExpr],
) -> Option<(Cow<'a, Expr>, &'a Expr)> {
    let (AccessExpr::Subscript(Subscript::Index { index }), dots) = chain.split_last()? else {
        return None;
    };
    if dots.is_empty() {
        return Some((Cow::Borrowed(root), index));
    }
    let Expr::Identifier(first) = root else {
        return None;
    };
    let mut parts = vec![first.clone()];
    for d in dots {
        let AccessExpr::Dot(Expr::Identifier(p)) = d else {
            return None;
        };
        parts.push(p.clone());
    }
    Some((Cow::Owned(Expr::CompoundIdentifier(parts)), index))
}

/// `array[index]`; every other access chain is 0A000.
pub(super) fn eval_access(root: &Expr, chain: &[AccessExpr], s: &Scope<'_>) -> SqlResult<Datum> {
    let Some((array, index)) = subscripted(root, chain) else {
        return Err(SqlError::unsupported(format!(
            "expression {root}{} is not supported",
            chain.iter().map(|a| a.to_string()).collect::<String>()
        )));
    };
    let value = eval(&array, s)?;
    let position = subscript_index(index, eval(index, s)?)?;
    element(&value, position)
}

/// The subscript as PostgreSQL coerces it (to int4 by assignment): an integer, or an
/// untyped literal read as one; `None` for NULL.
fn subscript_index(e: &Expr, v: Datum) -> SqlResult<Option<i32>> {
    let out_of_range = || SqlError::new("22003", "integer out of range");
    Ok(Some(match v {
        Datum::Null => return Ok(None),
        Datum::Int2(i) => i as i32,
        Datum::Int4(i) => i,
        Datum::Int8(i) => i32::try_from(i).map_err(|_| out_of_range())?,
        Datum::Text(t) if untyped(e) => match crate::value::parse_text(TypeId::Int4, &t)? {
            Datum::Int4(i) => i,
            _ => return Ok(None),
        },
        Datum::Text(_) | Datum::Bool(_) => {
            return Err(SqlError::new(
                "42804",
                "array subscript must have type integer",
            ))
        }
        // numeric and float subscripts round in PostgreSQL: not built.
        other => {
            return Err(SqlError::unsupported(format!(
                "array subscripts of type {} are not supported",
                other.type_id().map_or("unknown", |t| t.name())
            )))
        }
    }))
}

/// The element at `position` (from the lower bound), NULL outside the array.
fn element(value: &Datum, position: Option<i32>) -> SqlResult<Datum> {
    match value {
        Datum::Array(a) => Ok(position
            .and_then(|p| usize::try_from(p).ok()?.checked_sub(1))
            .and_then(|i| a.items.get(i).cloned())
            .unwrap_or(Datum::Null)),
        Datum::Int2Vector(items) => Ok(position
            .and_then(|p| usize::try_from(p).ok())
            .and_then(|i| items.get(i).copied())
            .map_or(Datum::Null, Datum::Int2)),
        Datum::Null => Ok(Datum::Null),
        // Text may be one of the catalog's array columns walrus keeps as text
        // (`pg_constraint.conkey`), and jsonb has subscripts in PostgreSQL: refused.
        Datum::Text(_) | Datum::Jsonb(_) => Err(SqlError::unsupported(format!(
            "subscripts of type {} are not supported",
            super::ops::type_name(value)
        ))),
        other => Err(SqlError::new(
            "42804",
            format!(
                "cannot subscript type {} because it does not support subscripting",
                super::ops::type_name(other)
            ),
        )),
    }
}

/// `l & r` over integers (PostgreSQL's int2and / int4and / int8and): the wider of the
/// two integer types, an untyped literal read as the other side's type. Any other type
/// has no `&` in PostgreSQL (42883): walrus has no `bit` or `inet`.
pub(crate) fn bitwise_and(l: &Datum, r: &Datum) -> SqlResult<Datum> {
    let width = |d: &Datum| match d {
        Datum::Int2(_) => Some(2),
        Datum::Int4(_) => Some(4),
        Datum::Int8(_) => Some(8),
        _ => None,
    };
    let no_operator = || {
        SqlError::new(
            "42883",
            format!(
                "operator does not exist: {} & {}",
                super::ops::type_name(l),
                super::ops::type_name(r)
            ),
        )
    };
    // An untyped literal takes the other operand's type; two are ambiguous.
    let (l, r) = match (l, r) {
        (Datum::Text(_), Datum::Text(_)) => {
            return Err(SqlError::new(
                "42725",
                "operator is not unique: unknown & unknown",
            ))
        }
        (Datum::Text(t), other) if width(other).is_some() || other.is_null() => {
            let ty = other.type_id().unwrap_or(TypeId::Int4);
            (crate::value::parse_text(ty, t)?, other.clone())
        }
        (other, Datum::Text(t)) if width(other).is_some() || other.is_null() => {
            let ty = other.type_id().unwrap_or(TypeId::Int4);
            (other.clone(), crate::value::parse_text(ty, t)?)
        }
        _ => (l.clone(), r.clone()),
    };
    let wl = if l.is_null() { Some(0) } else { width(&l) };
    let wr = if r.is_null() { Some(0) } else { width(&r) };
    let (Some(wl), Some(wr)) = (wl, wr) else {
        return Err(no_operator());
    };
    let (Some(a), Some(b)) = (super::as_i64(&l), super::as_i64(&r)) else {
        return Ok(Datum::Null);
    };
    // Both fit the wider type, and so does their AND.
    let v = a & b;
    Ok(match wl.max(wr) {
        2 => Datum::Int2(v as i16),
        8 => Datum::Int8(v),
        _ => Datum::Int4(v as i32),
    })
}
