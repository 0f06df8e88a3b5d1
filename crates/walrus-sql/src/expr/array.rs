//! The text form of arrays (`{a,b,"c d"}`).

use walrus_engine::access::datum::Datum;

use crate::error::{SqlError, SqlResult};
use crate::value::format_text;

/// Arrays travel as PostgreSQL's text form (`{a,b,"c d"}`): walrus has no array type in
/// storage, and the catalog functions psql uses only need to build and search them.
pub fn format_array_text(items: &[Datum]) -> String {
    let mut out = String::from("{");
    for (i, d) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        match format_text(d) {
            None => out.push_str("NULL"),
            Some(t) => {
                let plain = !t.is_empty()
                    && !t.eq_ignore_ascii_case("null")
                    && !t.contains(|c: char| "{},\"\\ ".contains(c));
                if plain {
                    out.push_str(&t);
                } else {
                    out.push('"');
                    for c in t.chars() {
                        if c == '"' || c == '\\' {
                            out.push('\\');
                        }
                        out.push(c);
                    }
                    out.push('"');
                }
            }
        }
    }
    out.push('}');
    out
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
