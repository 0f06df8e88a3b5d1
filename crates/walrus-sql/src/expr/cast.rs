//! SQL type names, literals, and conversion of a value to a type (assignment and casts).

use sqlparser::ast::{CharacterLength, DataType, ExactNumberInfo, Value};
use walrus_engine::access::datum::{Datum, TypeId};
use walrus_engine::catalog::{ColumnDef, DeclaredType};

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
        // float4 would need its own storage and 6-digit text form; kept as float8 it
        // would answer with more digits than PostgreSQL, so it is refused.
        D::Real | D::Float4 => {
            return Err(SqlError::unsupported("type real (float4) is not supported"))
        }
        D::Float(ExactNumberInfo::Precision(p) | ExactNumberInfo::PrecisionAndScale(p, _))
            if *p <= 24 =>
        {
            return Err(SqlError::unsupported("type real (float4) is not supported"))
        }
        D::Double(_) | D::DoublePrecision | D::Float8 | D::Float(_) => TypeId::Float8,
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
        D::Bytea => TypeId::Bytea,
        D::Uuid => TypeId::Uuid,
        D::Time(
            None,
            sqlparser::ast::TimezoneInfo::None | sqlparser::ast::TimezoneInfo::WithoutTimeZone,
        ) => TypeId::Time,
        D::Time(
            None,
            sqlparser::ast::TimezoneInfo::WithTimeZone | sqlparser::ast::TimezoneInfo::Tz,
        ) => TypeId::TimeTz,
        D::Regclass => TypeId::RegClass,
        D::Interval {
            fields: None,
            precision: None,
        } => TypeId::Interval,
        D::JSON => TypeId::Json,
        D::JSONB => TypeId::Jsonb,
        D::Array(sqlparser::ast::ArrayElemTypeDef::SquareBracket(inner, None)) => {
            let elem = type_from_sql(inner)?;
            elem.array_of().ok_or_else(|| {
                SqlError::unsupported("multidimensional array types are not supported")
            })?
        }
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
                "float4" => {
                    return Err(SqlError::unsupported("type real (float4) is not supported"))
                }
                "numeric" => TypeId::Numeric,
                "bool" => TypeId::Bool,
                "timestamptz" => TypeId::TimestampTz,
                "timestamp" => TypeId::Timestamp,
                "date" => TypeId::Date,
                "bytea" => TypeId::Bytea,
                "uuid" => TypeId::Uuid,
                "time" => TypeId::Time,
                "timetz" => TypeId::TimeTz,
                "regclass" => TypeId::RegClass,
                "regproc" => TypeId::RegProc,
                "regtype" => TypeId::RegType,
                "regnamespace" => TypeId::RegNamespace,
                "interval" => TypeId::Interval,
                "json" => TypeId::Json,
                "jsonb" => TypeId::Jsonb,
                // PostgreSQL's internal array type names (`_int4`).
                other if other.starts_with('_') => {
                    match type_from_sql(&D::Custom(
                        sqlparser::ast::ObjectName::from(vec![sqlparser::ast::Ident::new(
                            &other[1..],
                        )]),
                        vec![],
                    )) {
                        Ok(elem) => elem.array_of().ok_or_else(|| {
                            SqlError::unsupported("multidimensional array types are not supported")
                        })?,
                        Err(e) => return Err(e),
                    }
                }
                other if POSTGRES_TYPES_NOT_BUILT.contains(&other) => {
                    return Err(SqlError::unsupported(format!(
                        "type {other} is not supported by walrus"
                    )))
                }
                other => {
                    return Err(SqlError::new(
                        "42704",
                        format!("type \"{other}\" does not exist"),
                    ))
                }
            }
        }
        // PostgreSQL has these; walrus does not (yet): refused as unsupported.
        other => {
            return Err(SqlError::unsupported(format!(
                "type {other} is not supported by walrus"
            )))
        }
    })
}

/// Built-in PostgreSQL type names walrus does not have: 0A000 (not built), not 42704
/// (no such type).
const POSTGRES_TYPES_NOT_BUILT: &[&str] = &[
    "xml",
    "money",
    "inet",
    "cidr",
    "macaddr",
    "macaddr8",
    "bit",
    "varbit",
    "point",
    "line",
    "lseg",
    "box",
    "path",
    "polygon",
    "circle",
    "tsvector",
    "tsquery",
    "regprocedure",
    "regoper",
    "regrole",
    "int4range",
    "int8range",
    "numrange",
    "tsrange",
    "tstzrange",
    "daterange",
    "oidvector",
    "int2vector",
    "xid",
    "xid8",
    "cid",
    "tid",
    "pg_lsn",
    "jsonpath",
    "txid_snapshot",
    "pg_snapshot",
];

/// The OID of a type walrus keeps under a nearer engine type and reports as itself
/// (`oid`, `xid` as int8; `name`, the one-byte `"char"` as text), or `None`.
pub fn kept_type_oid(dt: &DataType) -> Option<u32> {
    if let DataType::Array(sqlparser::ast::ArrayElemTypeDef::SquareBracket(inner, None)) = dt {
        return Some(match kept_type_oid(inner)? {
            26 => 1028,
            19 => 1003,
            18 => 1002,
            _ => 1011,
        });
    }
    let DataType::Custom(name, _) = dt else {
        return None;
    };
    let n = name.0.last()?.to_string().to_ascii_lowercase();
    Some(match n.trim_matches('"') {
        "oid" => 26,
        "xid" => 28,
        "name" => 19,
        "char" => 18,
        "_oid" => 1028,
        "_name" => 1003,
        "_char" => 1002,
        "_xid" => 1011,
        _ => return None,
    })
}

/// The PostgreSQL type OID a SQL type name stands for, as clients see it: `varchar` is
/// 1043 and `char` 1042 although walrus keeps both as text.
pub fn sql_type_oid(dt: &DataType) -> SqlResult<u32> {
    use DataType as D;
    if let Some(oid) = kept_type_oid(dt) {
        return Ok(oid);
    }
    if let D::Custom(name, _) = dt {
        let n = name.0.last().map(|p| p.to_string().to_ascii_lowercase());
        match n.as_deref().map(|n| n.trim_matches('"')) {
            Some("varchar") => return Ok(1043),
            Some("bpchar") => return Ok(1042),
            Some("_varchar") => return Ok(1015),
            Some("_bpchar") => return Ok(1014),
            _ => {}
        }
    }
    Ok(match dt {
        D::Varchar(_) | D::CharVarying(_) | D::CharacterVarying(_) => 1043,
        D::Char(_) | D::Character(_) => 1042,
        D::Array(sqlparser::ast::ArrayElemTypeDef::SquareBracket(inner, None)) => {
            match sql_type_oid(inner)? {
                1043 => 1015,
                1042 => 1014,
                26 => 1028,
                19 => 1003,
                18 => 1002,
                28 => 1011,
                _ => type_from_sql(dt)?.pg_oid(),
            }
        }
        other => type_from_sql(other)?.pg_oid(),
    })
}

/// The declared limit of a type name walrus cannot keep for a column (type modifiers on
/// a type name it parses as custom, e.g. `bpchar(3)`): `Some(description)`.
pub fn declared_limit(dt: &DataType) -> Option<String> {
    match dt {
        DataType::Custom(_, mods) if !mods.is_empty() => Some(dt.to_string()),
        _ => None,
    }
}

/// The largest `varchar(n)` / `char(n)` PostgreSQL accepts.
const MAX_CHAR_LEN: usize = 10 * 1024 * 1024;

fn char_typmod(l: &Option<CharacterLength>, name: &str, default: Option<usize>) -> SqlResult<i32> {
    match varchar_len(l)?.or(default) {
        None => Ok(-1),
        Some(0) => Err(SqlError::new(
            "22023",
            format!("length for type {name} must be at least 1"),
        )),
        Some(n) if n > MAX_CHAR_LEN => Err(SqlError::new(
            "22023",
            format!("length for type {name} cannot exceed {MAX_CHAR_LEN}"),
        )),
        Some(n) => Ok(n as i32 + 4),
    }
}

/// A column's declared type for the catalog: the engine type, PostgreSQL's `atttypmod`
/// (-1, `n + 4` for `varchar(n)`/`char(n)`, `((p << 16) | s) + 4` for `numeric(p,s)`)
/// and the text spelling. `char` without a length is `char(1)`, as in PostgreSQL.
pub fn column_type(dt: &DataType) -> SqlResult<(TypeId, i32, DeclaredType)> {
    use DataType as D;
    if let Some(t) = declared_limit(dt) {
        return Err(SqlError::unsupported(format!(
            "type modifiers on {t} are not supported"
        )));
    }
    Ok(match dt {
        D::Varchar(l) | D::CharVarying(l) | D::CharacterVarying(l) => (
            TypeId::Text,
            char_typmod(l, "varchar", None)?,
            DeclaredType::Varchar,
        ),
        D::Char(l) | D::Character(l) => (
            TypeId::Text,
            char_typmod(l, "char", Some(1))?,
            DeclaredType::Char,
        ),
        D::Numeric(info) | D::Decimal(info) | D::Dec(info) => {
            let typmod = match numeric_limits(info)? {
                None => -1,
                Some((p, s)) => (((p as i32) << 16) | s as i32) + 4,
            };
            (TypeId::Numeric, typmod, DeclaredType::Plain)
        }
        // `varchar(20)[]`: the element's modifier and spelling, as PostgreSQL's
        // atttypmod.
        D::Array(sqlparser::ast::ArrayElemTypeDef::SquareBracket(inner, None)) => {
            let (elem, typmod, declared) = column_type(inner)?;
            let ty = elem.array_of().ok_or_else(|| {
                SqlError::unsupported("multidimensional array types are not supported")
            })?;
            (ty, typmod, declared)
        }
        other => match type_from_sql(other)? {
            // Their values carry a name resolved when made, which a stored row would
            // keep after a rename: not built as column types.
            ty @ (TypeId::RegProc | TypeId::RegClass | TypeId::RegType | TypeId::RegNamespace) => {
                return Err(SqlError::unsupported(format!(
                    "columns of type {} are not supported",
                    ty.name()
                )))
            }
            ty => (ty, -1, DeclaredType::Plain),
        },
    })
}

/// The SQL name of a column's declared type as PostgreSQL's `format_type` spells it
/// (`character varying(10)`, `character(84)`, `numeric(10,2)`); `None` when the
/// column has neither a type modifier nor a text spelling other than `text`.
pub fn declared_type_name(c: &ColumnDef) -> Option<String> {
    if let Some(elem) = c.ty.elem() {
        let name = declared_type_name(&ColumnDef {
            ty: elem,
            ..c.clone()
        })?;
        return Some(format!("{name}[]"));
    }
    let len = || (c.typmod >= 4).then(|| format!("({})", c.typmod - 4));
    match (c.ty, c.declared) {
        (TypeId::Text, DeclaredType::Varchar) => {
            Some(format!("character varying{}", len().unwrap_or_default()))
        }
        (TypeId::Text, DeclaredType::Char) => {
            Some(format!("character{}", len().unwrap_or_default()))
        }
        (TypeId::Numeric, _) if c.typmod >= 4 => {
            let (p, s) = numeric_ps(c.typmod);
            Some(format!("numeric({p},{s})"))
        }
        _ => None,
    }
}

fn numeric_ps(typmod: i32) -> (u64, u64) {
    let t = (typmod - 4) as u32;
    ((t >> 16) as u64 & 0xffff, t as u64 & 0xffff)
}

/// PostgreSQL's assignment of a value to a column (INSERT, UPDATE, COPY): converts it
/// to the column type, then applies the declared type modifier. `varchar(n)` and
/// `char(n)` refuse longer values with 22001 unless the excess is all spaces (cut);
/// `char(n)` pads shorter values with spaces; `numeric(p,s)` rounds to `s` and fails
/// with 22003 past `p - s` integer digits.
pub fn assign(v: Datum, c: &ColumnDef) -> SqlResult<Datum> {
    let v = coerce(v, c.ty)?;
    if c.typmod < 4 && c.declared != DeclaredType::Char {
        return Ok(v);
    }
    // An array column's modifier applies to each element (`varchar(2)[]`).
    let v = match (c.ty.elem(), v) {
        (Some(elem), Datum::Array(mut a)) => {
            let item_col = ColumnDef {
                ty: elem,
                ..c.clone()
            };
            a.items = a
                .items
                .into_iter()
                .map(|d| assign(d, &item_col))
                .collect::<SqlResult<_>>()?;
            return Ok(Datum::Array(a));
        }
        (_, v) => v,
    };
    match (c.ty, v) {
        (TypeId::Text, Datum::Text(s)) if c.typmod >= 4 => {
            let n = (c.typmod - 4) as usize;
            let len = s.chars().count();
            let (name, pad) = match c.declared {
                DeclaredType::Char => ("character", true),
                _ => ("character varying", false),
            };
            if len > n {
                let cut: usize = s.char_indices().nth(n).map(|(i, _)| i).unwrap_or(s.len());
                if s[cut..].chars().any(|ch| ch != ' ') {
                    return Err(SqlError::new(
                        "22001",
                        format!("value too long for type {name}({n})"),
                    ));
                }
                return Ok(Datum::Text(s[..cut].to_string()));
            }
            if pad && len < n {
                let mut s = s;
                pad_with_spaces(&mut s, n - len);
                return Ok(Datum::Text(s));
            }
            Ok(Datum::Text(s))
        }
        (TypeId::Numeric, Datum::Numeric(t)) if c.typmod >= 4 => {
            let (p, s) = numeric_ps(c.typmod);
            Ok(Datum::Numeric(numeric::apply_typmod_text(&t, p, s)?))
        }
        (_, v) => Ok(v),
    }
}

/// Appends `count` spaces (`char(n)` padding) a slice at a time, not a char at a time:
/// COPY pads every row of a `char(n)` column (pgbench's `filler`).
fn pad_with_spaces(s: &mut String, mut count: usize) {
    const SPACES: &str = "                                                                ";
    s.reserve(count);
    while count > 0 {
        let step = count.min(SPACES.len());
        s.push_str(&SPACES[..step]);
        count -= step;
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
/// `s` and fails with 22003 past `p`, `char(n)` truncates and blank-pads to `n`.
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
        D::Char(l) | D::Character(l) => {
            // Explicit cast to char(n): truncated to n characters, blank-padded to n.
            // The value is bpchar; `expr::is_char_column` treats the cast as such.
            let n = varchar_len(l)?.unwrap_or(1);
            Ok(match coerce(v, TypeId::Text)? {
                Datum::Text(t) => {
                    let mut out: String = t.chars().take(n).collect();
                    let len = out.chars().count();
                    out.extend(std::iter::repeat_n(' ', n - len));
                    Datum::Text(out)
                }
                other => other,
            })
        }
        D::Numeric(info) | D::Decimal(info) | D::Dec(info) => {
            let v = coerce(v, TypeId::Numeric)?;
            numeric_typmod(v, info)
        }
        D::Custom(_, mods) if !mods.is_empty() => Err(SqlError::unsupported(format!(
            "type modifiers on {dt} are not supported"
        ))),
        // Each element is cast to the element type, modifier included.
        D::Array(sqlparser::ast::ArrayElemTypeDef::SquareBracket(inner, None)) => {
            let ty = type_from_sql(dt)?;
            match coerce(v, ty)? {
                Datum::Array(mut a) => {
                    a.items = a
                        .items
                        .into_iter()
                        .map(|d| cast_to(d, inner))
                        .collect::<SqlResult<_>>()?;
                    Ok(Datum::Array(a))
                }
                other => Ok(other),
            }
        }
        _ => {
            let ty = type_from_sql(dt)?;
            // PostgreSQL's explicit-only casts between integer (int4 only) and boolean.
            match (ty, &v) {
                (TypeId::Bool, Datum::Int4(i)) => Ok(Datum::Bool(*i != 0)),
                (TypeId::Int4, Datum::Bool(b)) => Ok(Datum::Int4(*b as i32)),
                _ => coerce(v, ty),
            }
        }
    }
}

/// The checked precision and scale of `numeric(p[,s])`; `None` without them.
fn numeric_limits(info: &ExactNumberInfo) -> SqlResult<Option<(u64, u64)>> {
    let (p, s) = match info {
        ExactNumberInfo::None => return Ok(None),
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
    Ok(Some((p, s as u64)))
}

/// Applies `numeric(p[,s])` to a numeric value.
pub fn numeric_typmod(v: Datum, info: &ExactNumberInfo) -> SqlResult<Datum> {
    let Some((p, s)) = numeric_limits(info)? else {
        return Ok(v);
    };
    match v {
        Datum::Numeric(t) => Ok(Datum::Numeric(numeric::apply_typmod_text(&t, p, s)?)),
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

const USECS_PER_DAY: i64 = 86_400_000_000;

/// Converts a value to `ty` (assignment and explicit casts).
pub fn coerce(d: Datum, ty: TypeId) -> SqlResult<Datum> {
    if d.is_null() || d.type_id() == Some(ty) {
        return Ok(d);
    }
    let range = || SqlError::new("22003", format!("{} out of range", ty.name()));
    Ok(match (ty, &d) {
        // To text it is its text form; to int2[] PostgreSQL keeps the lower bound 0
        // (`[0:1]={1,2}`), which walrus's arrays cannot: not built.
        (TypeId::Text, Datum::Int2Vector(_)) => Datum::Text(format_text(&d).unwrap_or_default()),
        (_, Datum::Int2Vector(_)) => {
            return Err(SqlError::unsupported(format!(
                "conversion of int2vector to {} is not supported",
                ty.name()
            )))
        }
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
        // boolean → text spells the word (`true`), unlike boolean output (`t`).
        (TypeId::Text, Datum::Bool(b)) => Datum::Text(if *b { "true" } else { "false" }.into()),
        (TypeId::Text, _) => Datum::Text(format_text(&d).unwrap_or_default()),
        // Between wall-clock and instant: in the session's time zone, as PostgreSQL.
        (TypeId::TimestampTz, Datum::Timestamp(v)) => {
            Datum::TimestampTz(crate::timezone::local_to_utc(*v))
        }
        (TypeId::Timestamp, Datum::TimestampTz(v)) => {
            Datum::Timestamp(crate::timezone::utc_to_local(*v))
        }
        (TypeId::TimestampTz, Datum::Date(d)) => {
            Datum::TimestampTz(crate::timezone::local_to_utc(*d as i64 * USECS_PER_DAY))
        }
        (TypeId::Timestamp, Datum::Date(d)) => Datum::Timestamp(*d as i64 * USECS_PER_DAY),
        (TypeId::Date, Datum::Timestamp(v)) => Datum::Date(v.div_euclid(USECS_PER_DAY) as i32),
        (TypeId::Date, Datum::TimestampTz(v)) => {
            Datum::Date(crate::timezone::utc_to_local(*v).div_euclid(USECS_PER_DAY) as i32)
        }
        // The time of day of a timestamp (timestamptz: in the session zone).
        (TypeId::Time, Datum::Timestamp(v)) => Datum::Time(v.rem_euclid(USECS_PER_DAY)),
        (TypeId::Time, Datum::TimestampTz(v)) => {
            Datum::Time(crate::timezone::utc_to_local(*v).rem_euclid(USECS_PER_DAY))
        }
        // timetz ↔ time and from timestamptz, in the session's zone (timetz.rs).
        (TypeId::TimeTz, Datum::Time(v)) => crate::timetz::from_time(*v),
        (TypeId::TimeTz, Datum::TimestampTz(v)) => crate::timetz::from_timestamptz(*v),
        (TypeId::Time, Datum::TimeTz(v, _)) => Datum::Time(*v),
        // An object identifier is its OID as `oid` (int8 here) and int4 (which wraps
        // past 2^31, as PostgreSQL's oid → int4).
        (TypeId::Int8, Datum::Reg(r)) => Datum::Int8(r.oid as i64),
        (TypeId::Int4, Datum::Reg(r)) => Datum::Int4(r.oid as i32),
        // To a reg* type needs the catalog: the cast expression does that lookup.
        (TypeId::RegProc | TypeId::RegClass | TypeId::RegType | TypeId::RegNamespace, _) => {
            return Err(SqlError::unsupported(format!(
                "conversion of {} to {} outside a cast is not supported",
                d.type_id().map(|t| t.name()).unwrap_or("unknown"),
                ty.name()
            )))
        }
        (TypeId::Interval, Datum::Time(v)) => {
            Datum::Interval(walrus_engine::access::datum::Interval {
                months: 0,
                days: 0,
                micros: *v,
            })
        }
        (TypeId::Jsonb, Datum::Json(t)) => Datum::Jsonb(crate::json::jsonb_in(t)?),
        (TypeId::Json, Datum::Jsonb(t)) => Datum::Json(t.clone()),
        // Arrays convert element by element.
        (TypeId::Array(elem), Datum::Array(a)) => {
            Datum::Array(Box::new(walrus_engine::access::datum::ArrayValue {
                elem: *elem,
                items: a
                    .items
                    .iter()
                    .map(|d| coerce(d.clone(), *elem))
                    .collect::<SqlResult<_>>()?,
            }))
        }
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
