//! SQL type names, literals, and conversion of a value to a type (assignment and casts).

use sqlparser::ast::{CharacterLength, DataType, ExactNumberInfo, Value};
use walrus_engine::access::datum::{Datum, TypeId};

use crate::error::{SqlError, SqlResult};
use crate::numeric;
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

/// The declared limit of a type name, which walrus's catalog cannot keep for a column
/// (`varchar(n)`, `char(n)`, `numeric(p,s)`): `Some(description)`.
pub fn declared_limit(dt: &DataType) -> Option<String> {
    use DataType as D;
    match dt {
        D::Varchar(Some(_))
        | D::CharVarying(Some(_))
        | D::CharacterVarying(Some(_))
        | D::Numeric(ExactNumberInfo::Precision(_) | ExactNumberInfo::PrecisionAndScale(..))
        | D::Decimal(ExactNumberInfo::Precision(_) | ExactNumberInfo::PrecisionAndScale(..))
        | D::Dec(ExactNumberInfo::Precision(_) | ExactNumberInfo::PrecisionAndScale(..)) => {
            Some(dt.to_string())
        }
        D::Custom(_, mods) if !mods.is_empty() => Some(dt.to_string()),
        _ => None,
    }
}

fn varchar_len(l: &Option<CharacterLength>) -> SqlResult<Option<usize>> {
    match l {
        None => Ok(None),
        Some(CharacterLength::IntegerLength { length, unit: None }) => Ok(Some(*length as usize)),
        Some(other) => Err(SqlError::unsupported(format!(
            "character length {other} is not supported"
        ))),
    }
}

/// An explicit cast (`CAST(v AS t)`, `v::t`) with the target's type modifier applied as
/// PostgreSQL does: `varchar(n)` truncates to `n` characters, `numeric(p,s)` rounds to
/// `s` and fails with 22003 past `p`. `char(n)` (blank-padded semantics) is refused.
pub fn cast_to(v: Datum, dt: &DataType) -> SqlResult<Datum> {
    use DataType as D;
    match dt {
        D::Varchar(l) | D::CharVarying(l) | D::CharacterVarying(l) => {
            let v = coerce(v, TypeId::Text)?;
            Ok(match (varchar_len(l)?, v) {
                (Some(n), Datum::Text(s)) if s.chars().count() > n => {
                    Datum::Text(s.chars().take(n).collect())
                }
                (_, v) => v,
            })
        }
        D::Char(_) | D::Character(_) => Err(SqlError::unsupported(format!(
            "type {dt} (blank-padded character) is not supported"
        ))),
        D::Numeric(info) | D::Decimal(info) | D::Dec(info) => {
            let v = coerce(v, TypeId::Numeric)?;
            numeric_typmod(v, info)
        }
        D::Custom(_, mods) if !mods.is_empty() => Err(SqlError::unsupported(format!(
            "type modifiers on {dt} are not supported"
        ))),
        _ => coerce(v, type_from_sql(dt)?),
    }
}

/// Applies `numeric(p[,s])` to a numeric value.
pub fn numeric_typmod(v: Datum, info: &ExactNumberInfo) -> SqlResult<Datum> {
    let (p, s) = match info {
        ExactNumberInfo::None => return Ok(v),
        ExactNumberInfo::Precision(p) => (*p, 0i64),
        ExactNumberInfo::PrecisionAndScale(p, s) => (*p, *s),
    };
    if !(1..=1000).contains(&p) {
        return Err(SqlError::new(
            "22023",
            format!("NUMERIC precision {p} must be between 1 and 1000"),
        ));
    }
    if s < 0 || s as u64 > p {
        return Err(SqlError::unsupported(format!(
            "NUMERIC scale {s} outside 0..precision is not supported"
        )));
    }
    match v {
        Datum::Numeric(t) => Ok(Datum::Numeric(numeric::format(&numeric::apply_typmod(
            &numeric::parse(&t)?,
            p,
            s as u64,
        )?))),
        other => Ok(other),
    }
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
            // PostgreSQL rounds half to even (rint) and checks the range before converting.
            let r = f.round_ties_even();
            if !(-(2f64.powi(63))..2f64.powi(63)).contains(&r) {
                return Err(range());
            }
            coerce(Datum::Int8(r as i64), ty)?
        }
        (TypeId::Int2 | TypeId::Int4 | TypeId::Int8, Datum::Numeric(t)) => {
            // Rounds half away from zero, as PostgreSQL's numeric → integer casts.
            let v = numeric::to_i64(&numeric::parse(t)?).ok_or_else(range)?;
            coerce(Datum::Int8(v), ty)?
        }
        (TypeId::Float8, _) if as_f64(&d).is_some() => Datum::Float8(as_f64(&d).unwrap_or(0.0)),
        (TypeId::Numeric, Datum::Float8(f)) => {
            Datum::Numeric(numeric::format(&numeric::from_f64(*f)?))
        }
        (TypeId::Numeric, _) if as_i64(&d).is_some() => {
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
                Datum::Numeric(numeric::canonical(n)?)
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
