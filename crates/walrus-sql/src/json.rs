//! `json` and `jsonb` text input and output as PostgreSQL 15's: `json` keeps the text
//! as given once it parses; `jsonb` is printed from its parsed form (object keys by
//! length then bytes, the last of duplicate keys kept, numbers as `numeric` prints them,
//! `": "` and `", "` between items). jsonb's `->`, `->>`, `@>`, `<@` and `?` are built
//! ([`operator`]); on `json` they are refused (its `->` keeps the input's own text of
//! the member, which walrus does not keep apart).

use sqlparser::ast::BinaryOperator;
use walrus_engine::access::datum::Datum;

use crate::error::{SqlError, SqlResult};

/// A parsed JSON value.
#[derive(Debug, Clone, PartialEq)]
enum Json {
    Null,
    Bool(bool),
    /// The number's text as written (validated).
    Number(String),
    String(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

/// PostgreSQL's json syntax error (for json and jsonb alike); `_text` is the input,
/// which PostgreSQL names in a CONTEXT line walrus does not send.
fn syntax(_text: &str, detail: String) -> SqlError {
    SqlError::new("22P02", "invalid input syntax for type json").with_detail(detail)
}

struct Parser<'a> {
    text: &'a str,
    b: &'a [u8],
    at: usize,
    /// jsonb: `\u0000` cannot be stored (22P05), as in PostgreSQL.
    binary: bool,
}

impl Parser<'_> {
    fn skip_ws(&mut self) {
        while self.at < self.b.len() && matches!(self.b[self.at], b' ' | b'\t' | b'\n' | b'\r') {
            self.at += 1;
        }
    }

    /// The token starting here, for error details (PostgreSQL's `Token "x" is invalid`).
    fn token_error(&self) -> SqlError {
        if self.at >= self.b.len() {
            return syntax(self.text, "The input string ended unexpectedly.".into());
        }
        let rest = &self.text[self.at..];
        let end = rest
            .char_indices()
            .find(|(i, c)| *i > 0 && (c.is_whitespace() || ",:[]{}\"".contains(*c)))
            .map_or(rest.len(), |(i, _)| i);
        syntax(self.text, format!("Token \"{}\" is invalid.", &rest[..end]))
    }

    fn value(&mut self) -> Result<Json, SqlError> {
        // Nesting is bounded by the stack-depth guard alone, as PostgreSQL's parser.
        crate::stack::check()?;
        self.skip_ws();
        match self.b.get(self.at) {
            None => Err(self.token_error()),
            Some(b'{') => {
                self.at += 1;
                let mut items = Vec::new();
                self.skip_ws();
                if self.b.get(self.at) == Some(&b'}') {
                    self.at += 1;
                    return Ok(Json::Object(items));
                }
                loop {
                    self.skip_ws();
                    if self.b.get(self.at) != Some(&b'"') {
                        return Err(self.token_error());
                    }
                    let key = self.string()?;
                    self.skip_ws();
                    if self.b.get(self.at) != Some(&b':') {
                        return Err(self.token_error());
                    }
                    self.at += 1;
                    let v = self.value()?;
                    items.push((key, v));
                    self.skip_ws();
                    match self.b.get(self.at) {
                        Some(b',') => self.at += 1,
                        Some(b'}') => {
                            self.at += 1;
                            return Ok(Json::Object(items));
                        }
                        _ => return Err(self.token_error()),
                    }
                }
            }
            Some(b'[') => {
                self.at += 1;
                let mut items = Vec::new();
                self.skip_ws();
                if self.b.get(self.at) == Some(&b']') {
                    self.at += 1;
                    return Ok(Json::Array(items));
                }
                loop {
                    items.push(self.value()?);
                    self.skip_ws();
                    match self.b.get(self.at) {
                        Some(b',') => self.at += 1,
                        Some(b']') => {
                            self.at += 1;
                            return Ok(Json::Array(items));
                        }
                        _ => return Err(self.token_error()),
                    }
                }
            }
            Some(b'"') => Ok(Json::String(self.string()?)),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => {
                let rest = &self.b[self.at..];
                for (word, v) in [
                    (&b"true"[..], Json::Bool(true)),
                    (b"false", Json::Bool(false)),
                    (b"null", Json::Null),
                ] {
                    let next = rest.get(word.len());
                    if rest.starts_with(word)
                        && !next.is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
                    {
                        self.at += word.len();
                        return Ok(v);
                    }
                }
                Err(self.token_error())
            }
        }
    }

    fn number(&mut self) -> Result<Json, SqlError> {
        let start = self.at;
        let b = self.b;
        let mut i = self.at;
        let digits = |i: &mut usize| {
            let s = *i;
            while *i < b.len() && b[*i].is_ascii_digit() {
                *i += 1;
            }
            *i - s
        };
        if b[i] == b'-' {
            i += 1;
        }
        let int_start = i;
        let n = digits(&mut i);
        let mut ok = n > 0 && !(n > 1 && b[int_start] == b'0');
        if ok && b.get(i) == Some(&b'.') {
            i += 1;
            ok = digits(&mut i) > 0;
        }
        if ok && matches!(b.get(i), Some(b'e' | b'E')) {
            i += 1;
            if matches!(b.get(i), Some(b'+' | b'-')) {
                i += 1;
            }
            ok = digits(&mut i) > 0;
        }
        // A number runs into the next delimiter: `1x` is one bad token.
        if !ok
            || b.get(i)
                .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'.')
        {
            self.at = start;
            return Err(self.token_error());
        }
        self.at = i;
        Ok(Json::Number(self.text[start..i].to_string()))
    }

    fn string(&mut self) -> Result<String, SqlError> {
        self.at += 1; // the opening quote
        let mut out = String::new();
        let text = self.text;
        loop {
            let Some(c) = text[self.at..].chars().next() else {
                return Err(syntax(text, "The input string ended unexpectedly.".into()));
            };
            self.at += c.len_utf8();
            match c {
                '"' => return Ok(out),
                '\\' => {
                    let Some(e) = text[self.at..].chars().next() else {
                        return Err(syntax(text, "The input string ended unexpectedly.".into()));
                    };
                    self.at += e.len_utf8();
                    match e {
                        '"' => out.push('"'),
                        '\\' => out.push('\\'),
                        '/' => out.push('/'),
                        'b' => out.push('\u{8}'),
                        'f' => out.push('\u{c}'),
                        'n' => out.push('\n'),
                        'r' => out.push('\r'),
                        't' => out.push('\t'),
                        'u' => {
                            let cp = self.hex4()?;
                            self.unicode(cp, &mut out)?;
                        }
                        other => {
                            return Err(syntax(
                                text,
                                format!("Escape sequence \"\\{other}\" is invalid."),
                            ))
                        }
                    }
                }
                c if (c as u32) < 0x20 => {
                    return Err(syntax(
                        text,
                        format!("Character with value 0x{:02x} must be escaped.", c as u32),
                    ))
                }
                c => out.push(c),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, SqlError> {
        let h = self.text.get(self.at..self.at + 4).unwrap_or("");
        if h.len() != 4 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(syntax(
                self.text,
                "\"\\u\" must be followed by four hexadecimal digits.".into(),
            ));
        }
        self.at += 4;
        Ok(u32::from_str_radix(h, 16).unwrap_or(0))
    }

    /// A `\uXXXX` escape. json keeps its text, so only jsonb needs the character: it
    /// must pair surrogates and cannot hold `\u0000`.
    fn unicode(&mut self, cp: u32, out: &mut String) -> Result<(), SqlError> {
        let surrogate_error = |d: &str| syntax(self.text, d.to_string());
        if (0xD800..0xDC00).contains(&cp) {
            if self.text[self.at..].starts_with("\\u") {
                self.at += 2;
                let lo = self.hex4()?;
                if !(0xDC00..0xE000).contains(&lo) {
                    return Err(surrogate_error(
                        "Unicode low surrogate must follow a high surrogate.",
                    ));
                }
                let c = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                out.push(char::from_u32(c).unwrap_or('\u{fffd}'));
                return Ok(());
            }
            if self.binary {
                return Err(surrogate_error(
                    "Unicode low surrogate must follow a high surrogate.",
                ));
            }
            return Ok(());
        }
        if (0xDC00..0xE000).contains(&cp) {
            if self.binary {
                return Err(surrogate_error(
                    "Unicode low surrogate must follow a high surrogate.",
                ));
            }
            return Ok(());
        }
        if cp == 0 && self.binary {
            return Err(
                SqlError::new("22P05", "unsupported Unicode escape sequence")
                    .with_detail("\\u0000 cannot be converted to text."),
            );
        }
        out.push(char::from_u32(cp).unwrap_or('\u{fffd}'));
        Ok(())
    }
}

fn parse(s: &str, binary: bool) -> Result<Json, SqlError> {
    let mut p = Parser {
        text: s,
        b: s.as_bytes(),
        at: 0,
        binary,
    };
    let v = p.value()?;
    p.skip_ws();
    if p.at < p.b.len() {
        return Err(p.token_error());
    }
    Ok(v)
}

/// `json` input: the text itself once it is valid JSON.
pub fn json_in(s: &str) -> Result<String, SqlError> {
    parse(s, false)?;
    Ok(s.to_string())
}

/// `jsonb` input: the normalized text PostgreSQL prints for it.
pub fn jsonb_in(s: &str) -> Result<String, SqlError> {
    let v = normalize(parse(s, true)?)?;
    let mut out = String::with_capacity(s.len());
    write_jsonb(&v, &mut out);
    Ok(out)
}

/// jsonb's stored form: numbers as numeric, objects' keys sorted (length, then bytes)
/// with the last of equal keys kept.
fn normalize(v: Json) -> Result<Json, SqlError> {
    crate::stack::check()?;
    Ok(match v {
        Json::Number(n) => Json::Number(crate::numeric::canonical(&n)?),
        Json::Array(items) => {
            Json::Array(items.into_iter().map(normalize).collect::<Result<_, _>>()?)
        }
        Json::Object(items) => {
            let mut kept: Vec<(String, Json)> = Vec::with_capacity(items.len());
            for (k, v) in items {
                let v = normalize(v)?;
                match kept.iter_mut().find(|(e, _)| *e == k) {
                    Some(slot) => slot.1 = v,
                    None => kept.push((k, v)),
                }
            }
            kept.sort_by(|(a, _), (b, _)| {
                a.len()
                    .cmp(&b.len())
                    .then_with(|| a.as_bytes().cmp(b.as_bytes()))
            });
            Json::Object(kept)
        }
        other => other,
    })
}

/// A string as PostgreSQL's `escape_json` writes it.
fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

fn write_jsonb(v: &Json, out: &mut String) {
    match v {
        Json::Null => out.push_str("null"),
        Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Json::Number(n) => out.push_str(n),
        Json::String(s) => write_string(s, out),
        Json::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_jsonb(item, out);
            }
            out.push(']');
        }
        Json::Object(items) => {
            out.push('{');
            for (i, (k, item)) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_string(k, out);
                out.push_str(": ");
                write_jsonb(item, out);
            }
            out.push('}');
        }
    }
}

/// jsonb's operators: `doc -> key` (an object member by text key, an array element by
/// integer index, negative from the end; NULL when absent), `->>` (the same as text: a
/// string unquoted, JSON null as SQL NULL), `a @> b` / `b <@ a` (containment as
/// PostgreSQL defines it) and `doc ? key` (a top-level key, or a string element of an
/// array). A NULL operand gives NULL.
pub fn operator(l: &Datum, op: &BinaryOperator, r: &Datum) -> SqlResult<Datum> {
    use BinaryOperator as B;
    if l.is_null() || r.is_null() {
        return Ok(Datum::Null);
    }
    // Only jsonb operands are built: a json one (its `->` keeps the member's own
    // text), an array's `@>`, or a text left operand (an error in PostgreSQL, which
    // has no such operator or cannot choose one) is refused, never answered. A text
    // operand beside a jsonb one is an untyped literal, read as jsonb.
    let refuse = || {
        SqlError::unsupported(format!(
            "operator {op} on {} and {} is not supported",
            type_name(l),
            type_name(r)
        ))
    };
    let jsonb_left = matches!(l, Datum::Jsonb(_));
    let jsonb_pair = matches!(
        (l, r),
        (Datum::Jsonb(_), Datum::Jsonb(_) | Datum::Text(_)) | (Datum::Text(_), Datum::Jsonb(_))
    );
    let built = match op {
        B::AtArrow | B::ArrowAt => jsonb_pair,
        _ => jsonb_left,
    };
    if !built {
        return Err(refuse());
    }
    let doc = |d: &Datum| -> SqlResult<Json> {
        match d {
            Datum::Jsonb(t) => parse(t, true),
            Datum::Text(t) => parse(t, true).and_then(normalize),
            _ => Err(refuse()),
        }
    };
    match op {
        B::Arrow | B::LongArrow => {
            let v = doc(l)?;
            let subscript = match r {
                Datum::Int2(i) => Some(*i as i64),
                Datum::Int4(i) => Some(*i as i64),
                Datum::Int8(i) => Some(*i),
                _ => None,
            };
            let member = match (&v, r, subscript) {
                (Json::Object(items), Datum::Text(k), _) => {
                    items.iter().find(|(name, _)| name == k).map(|(_, m)| m)
                }
                // An element by integer subscript, negative from the end (a text key
                // on an array finds nothing, as jsonb -> text does).
                (Json::Array(items), _, Some(i)) => {
                    let i = if i < 0 { items.len() as i64 + i } else { i };
                    usize::try_from(i).ok().and_then(|i| items.get(i))
                }
                _ => None,
            };
            Ok(match member {
                None => Datum::Null,
                Some(m) if matches!(op, B::LongArrow) => match m {
                    Json::Null => Datum::Null,
                    Json::String(s) => Datum::Text(s.clone()),
                    other => Datum::Text(to_text(other)),
                },
                Some(m) => Datum::Jsonb(to_text(m)),
            })
        }
        B::AtArrow => Ok(Datum::Bool(contains(&doc(l)?, &doc(r)?, true))),
        B::ArrowAt => Ok(Datum::Bool(contains(&doc(r)?, &doc(l)?, true))),
        B::Question => {
            let Datum::Text(k) = r else {
                return Err(SqlError::new(
                    "42883",
                    format!("operator does not exist: jsonb ? {}", type_name(r)),
                ));
            };
            Ok(Datum::Bool(match doc(l)? {
                Json::Object(items) => items.iter().any(|(name, _)| name == k),
                Json::Array(items) => items.iter().any(|i| *i == Json::String(k.clone())),
                Json::String(s) => s == *k,
                _ => false,
            }))
        }
        other => Err(SqlError::unsupported(format!(
            "operator {other} is not supported"
        ))),
    }
}

/// A value's type name for an error message (no dependence on `expr`, which uses
/// this module).
fn type_name(d: &Datum) -> &'static str {
    d.type_id().map_or("unknown", |t| t.name())
}

fn to_text(v: &Json) -> String {
    let mut out = String::new();
    write_jsonb(v, &mut out);
    out
}

/// PostgreSQL's jsonb containment: an object contains an object whose every member it
/// has with a contained value; an array contains an array whose every element some
/// element of it contains (and, at the top level only, a lone scalar it holds);
/// scalars contain equal scalars (numbers by value).
fn contains(a: &Json, b: &Json, top: bool) -> bool {
    match (a, b) {
        (Json::Object(x), Json::Object(y)) => y.iter().all(|(k, bv)| {
            x.iter()
                .find(|(ak, _)| ak == k)
                .is_some_and(|(_, av)| contains(av, bv, false))
        }),
        (Json::Array(x), Json::Array(y)) => y
            .iter()
            .all(|bv| x.iter().any(|av| contains(av, bv, false))),
        (Json::Array(x), scalar) if top && !matches!(scalar, Json::Object(_)) => {
            x.iter().any(|av| contains(av, scalar, false))
        }
        (Json::Number(x), Json::Number(y)) => {
            match (crate::numeric::parse(x), crate::numeric::parse(y)) {
                (Ok(p), Ok(q)) => p == q,
                _ => x == y,
            }
        }
        (x, y) => !matches!(x, Json::Array(_) | Json::Object(_)) && x == y,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Outputs printed by PostgreSQL 15 for the same inputs.
    #[test]
    fn jsonb_is_normalized_as_postgresql_does() {
        assert_eq!(
            jsonb_in(r#"{"b":1,"a":2, "aa":[1.50,1e2,-0, 1E-2,"x\u00e9\n\/"],"a":3}"#).unwrap(),
            r#"{"a": 3, "b": 1, "aa": [1.50, 100, 0, 0.01, "xé\n/"]}"#
        );
        assert_eq!(jsonb_in("{}").unwrap(), "{}");
        assert_eq!(jsonb_in(" [ ] ").unwrap(), "[]");
        assert_eq!(jsonb_in("null").unwrap(), "null");
        assert_eq!(jsonb_in("-0.0").unwrap(), "0.0");
        assert_eq!(jsonb_in("1.0e1").unwrap(), "10");
        assert_eq!(
            jsonb_in(r#"{"a":"\ud83d\ude00"}"#).unwrap(),
            "{\"a\": \"😀\"}"
        );
        assert_eq!(
            json_in(r#" [1, {"a" : true} ] "#).unwrap(),
            r#" [1, {"a" : true} ] "#
        );
        assert_eq!(json_in(r#""\u0000""#).unwrap(), r#""\u0000""#);
        assert_eq!(json_in(r#""\ud83d""#).unwrap(), r#""\ud83d""#);
    }

    #[test]
    fn bad_json_has_postgresql_errors() {
        let err = |s: &str, binary: bool| {
            let e = parse(s, binary).unwrap_err();
            (e.sqlstate, e.detail.unwrap_or_default())
        };
        assert_eq!(
            err("[1,2", false),
            ("22P02", "The input string ended unexpectedly.".into())
        );
        assert_eq!(
            err("01", false),
            ("22P02", "Token \"01\" is invalid.".into())
        );
        assert_eq!(
            err("[1,2] x", false),
            ("22P02", "Token \"x\" is invalid.".into())
        );
        assert_eq!(
            err("\"a\tb\"", false),
            ("22P02", "Character with value 0x09 must be escaped.".into())
        );
        assert_eq!(err(r#""\u0000""#, true).0, "22P05");
        assert_eq!(
            err(r#""\ud83d""#, true),
            (
                "22P02",
                "Unicode low surrogate must follow a high surrogate.".into()
            )
        );
    }
}
