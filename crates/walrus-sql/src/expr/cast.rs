//! SQL type names, literals, and conversion of a value to a type (assignment and casts).

use sqlparser::ast::{DataType, Value};
use walrus_engine::access::datum::{Datum, TypeId};

use crate::error::{SqlError, SqlResult};
use crate::value::{format_text, parse_text};

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
        D::Custom(name, _) => {
            let n = name
                .0
                .last()
                .map(|p| p.to_string().to_ascii_lowercase())
                .unwrap_or_default();
            match n.trim_matches('"') {
                "text" | "name" | "varchar" | "bpchar" | "char" => TypeId::Text,
                "int2" => TypeId::Int2,
                "int4" | "int" => TypeId::Int4,
                "int8" | "oid" => TypeId::Int8,
                "float8" => TypeId::Float8,
                "numeric" => TypeId::Numeric,
                "bool" => TypeId::Bool,
                "timestamptz" => TypeId::TimestampTz,
                "timestamp" => TypeId::Timestamp,
                "date" => TypeId::Date,
                other => {
                    return Err(SqlError::new(
                        "42704",
                        format!("type \"{other}\" is not supported"),
                    ))
                }
            }
        }
        other => {
            return Err(SqlError::new(
                "42704",
                format!("type \"{other}\" is not supported"),
            ))
        }
    })
}

pub(crate) fn as_i64(d: &Datum) -> Option<i64> {
    match d {
        Datum::Int2(v) => Some(*v as i64),
        Datum::Int4(v) => Some(*v as i64),
        Datum::Int8(v) => Some(*v),
        _ => None,
    }
}

pub(crate) fn as_f64(d: &Datum) -> Option<f64> {
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

pub(crate) fn literal(v: &Value) -> SqlResult<Datum> {
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
