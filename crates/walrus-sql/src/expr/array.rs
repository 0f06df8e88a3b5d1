//! Arrays in expressions: building one from values (`ARRAY[...]`, `array_agg`), reading
//! one's items, and the text form (`{a,b,"c d"}`) that catalog functions still build.

use walrus_engine::access::datum::{ArrayValue, Datum, TypeId};

use crate::error::{SqlError, SqlResult};
use crate::value::format_text;

/// The text form of an array of `items` (catalog views build arrays as text).
pub fn format_array_text(items: &[Datum]) -> String {
    crate::value::format_array(items)
}

/// Numeric types in the order PostgreSQL's array/CASE type resolution prefers them.
pub(crate) fn numeric_rank(t: TypeId) -> Option<u8> {
    match t {
        TypeId::Int2 => Some(0),
        TypeId::Int4 => Some(1),
        TypeId::Int8 => Some(2),
        TypeId::Numeric => Some(3),
        TypeId::Float8 => Some(4),
        _ => None,
    }
}

/// An array of `items` typed as PostgreSQL resolves `ARRAY[...]`: one common type
/// (integers widen to the widest number given; an untyped string takes the others'
/// type); all NULL or no typed item gives `text[]`. Mixed categories are 42804.
pub fn make_array(items: Vec<Datum>) -> SqlResult<Datum> {
    let mut elem: Option<TypeId> = None;
    for d in &items {
        let Some(t) = d.type_id() else { continue };
        if matches!(d, Datum::Text(_)) {
            continue;
        }
        if t.elem().is_some() {
            return Err(SqlError::unsupported(
                "multidimensional arrays are not supported",
            ));
        }
        elem = Some(match elem {
            None => t,
            Some(e) if e == t => e,
            Some(e) => match (numeric_rank(e), numeric_rank(t)) {
                (Some(a), Some(b)) => {
                    if a >= b {
                        e
                    } else {
                        t
                    }
                }
                _ if matches!((e, t), (TypeId::Timestamp, TypeId::TimestampTz)) => t,
                _ if matches!((e, t), (TypeId::TimestampTz, TypeId::Timestamp)) => e,
                _ => {
                    return Err(SqlError::new(
                        "42804",
                        format!(
                            "ARRAY types {} and {} cannot be matched",
                            e.name(),
                            t.name()
                        ),
                    ))
                }
            },
        });
    }
    let elem = elem.unwrap_or(TypeId::Text);
    let items = items
        .into_iter()
        .map(|d| crate::expr::coerce(d, elem))
        .collect::<SqlResult<Vec<_>>>()?;
    Ok(Datum::Array(Box::new(ArrayValue { elem, items })))
}

/// The items of an array value; text in array form (a catalog column, an untyped
/// literal) gives its elements as text.
pub fn array_items(d: &Datum) -> SqlResult<Vec<Datum>> {
    Ok(match d {
        Datum::Array(a) => a.items.clone(),
        // Subscripts from 0: positions would be off by one.
        Datum::Int2Vector(_) => {
            return Err(SqlError::unsupported(
                "int2vector as an array is not supported here",
            ))
        }
        other => parse_array_text(&format_text(other).unwrap_or_default())?
            .into_iter()
            .map(|t| t.map(Datum::Text).unwrap_or(Datum::Null))
            .collect(),
    })
}

/// Parses a one-dimensional array literal; `None` elements are SQL NULLs.
pub fn parse_array_text(t: &str) -> SqlResult<Vec<Option<String>>> {
    let bad = || SqlError::new("22P02", format!("malformed array literal: \"{t}\""));
    let inner = t
        .trim()
        .strip_prefix('{')
        .and_then(|r| r.strip_suffix('}'))
        .ok_or_else(bad)?;
    let mut out = Vec::new();
    let mut chars = inner.chars().peekable();
    if inner.trim().is_empty() {
        return Ok(out);
    }
    loop {
        let mut item = String::new();
        let mut quoted = false;
        while chars.peek() == Some(&' ') {
            chars.next();
        }
        if chars.peek() == Some(&'"') {
            quoted = true;
            chars.next();
            loop {
                match chars.next().ok_or_else(bad)? {
                    '\\' => item.push(chars.next().ok_or_else(bad)?),
                    '"' => break,
                    c => item.push(c),
                }
            }
        }
        while let Some(&c) = chars.peek() {
            if c == ',' {
                break;
            }
            if quoted && c != ' ' {
                return Err(bad());
            }
            item.push(c);
            chars.next();
        }
        let item = if quoted {
            item
        } else {
            item.trim().to_string()
        };
        out.push(if !quoted && item.eq_ignore_ascii_case("null") {
            None
        } else {
            Some(item)
        });
        if chars.next().is_none() {
            break;
        }
    }
    Ok(out)
}
