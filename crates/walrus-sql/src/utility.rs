//! PostgreSQL utility statements that sqlparser's grammar does not match (0.63 rejects
//! `VACUUM ANALYZE t`, `CHECKPOINT` and `WITH (FREEZE ON)`):
//! `VACUUM [ANALYZE|FULL|VERBOSE|FREEZE|(options)] [table, ...]`, `ANALYZE [table]`,
//! `CHECKPOINT`, and `COPY table [(cols)] FROM STDIN [WITH (...)] [FREEZE]`. Recognized by
//! their first keyword and parsed here; everything else goes to sqlparser.

use crate::error::{SqlError, SqlResult};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Utility {
    /// `freeze`: FREEZE, alone or in the option list (`FREEZE false` turns it off).
    Vacuum {
        tables: Vec<String>,
        freeze: bool,
    },
    /// The tables named (none: every table); each must exist.
    Analyze {
        tables: Vec<String>,
    },
    Checkpoint,
    CopyFrom {
        table: String,
        columns: Vec<String>,
    },
}

fn words(sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in sql.chars() {
        match c {
            '(' | ')' | ',' | ';' | '=' => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                if c != ';' {
                    out.push(c.to_string());
                }
            }
            c if c.is_whitespace() => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

fn ident(w: &str) -> String {
    if w.starts_with('"') && w.ends_with('"') && w.len() >= 2 {
        w[1..w.len() - 1].to_string()
    } else {
        w.to_ascii_lowercase()
    }
}

/// Returns the utility statement if `sql` is one, `Ok(None)` otherwise.
pub fn parse(sql: &str) -> SqlResult<Option<Utility>> {
    let w = words(sql);
    let Some(first) = w.first().map(|s| s.to_ascii_lowercase()) else {
        return Ok(None);
    };
    match first.as_str() {
        "checkpoint" => {
            if w.len() > 1 {
                return Err(SqlError::syntax(format!(
                    "syntax error at or near \"{}\"",
                    w[1]
                )));
            }
            Ok(Some(Utility::Checkpoint))
        }
        "analyze" | "analyse" => {
            let mut tables = Vec::new();
            let mut i = 1;
            while i < w.len() {
                let lw = w[i].to_ascii_lowercase();
                match lw.as_str() {
                    // An option list before the tables, or a column list after one.
                    "(" => {
                        while i < w.len() && w[i] != ")" {
                            i += 1;
                        }
                    }
                    "verbose" if tables.is_empty() => {}
                    "," => {}
                    _ => tables.push(ident(&w[i])),
                }
                i += 1;
            }
            Ok(Some(Utility::Analyze { tables }))
        }
        "vacuum" => {
            let mut i = 1;
            let mut tables = Vec::new();
            let mut freeze = false;
            while i < w.len() {
                let lw = w[i].to_ascii_lowercase();
                match lw.as_str() {
                    "(" => {
                        // Option list: only FREEZE [boolean] matters here.
                        while i < w.len() && w[i] != ")" {
                            if w[i].eq_ignore_ascii_case("freeze") {
                                let arg = w.get(i + 1).map(|a| a.to_ascii_lowercase());
                                freeze =
                                    !matches!(arg.as_deref(), Some("false" | "off" | "0" | "no"));
                            }
                            i += 1;
                        }
                    }
                    "freeze" => freeze = true,
                    "analyze" | "analyse" | "full" | "verbose" | ")" | "," => {}
                    _ => tables.push(ident(&w[i])),
                }
                i += 1;
            }
            Ok(Some(Utility::Vacuum { tables, freeze }))
        }
        "copy" => {
            let table = w
                .get(1)
                .map(|t| ident(t))
                .ok_or_else(|| SqlError::syntax("syntax error at end of input"))?;
            let mut i = 2;
            let mut columns = Vec::new();
            if w.get(i).map(String::as_str) == Some("(") {
                i += 1;
                while i < w.len() && w[i] != ")" {
                    if w[i] != "," {
                        columns.push(ident(&w[i]));
                    }
                    i += 1;
                }
                i += 1;
            }
            let dir = w.get(i).map(|s| s.to_ascii_lowercase());
            let src = w.get(i + 1).map(|s| s.to_ascii_lowercase());
            if dir.as_deref() != Some("from") || src.as_deref() != Some("stdin") {
                return Err(SqlError::unsupported(
                    "only COPY ... FROM STDIN is supported",
                ));
            }
            // Options: FREEZE [on|off|true|false|1|0], FORMAT text; anything else refused.
            let mut j = i + 2;
            while j < w.len() {
                let o = w[j].to_ascii_lowercase();
                match o.as_str() {
                    "with" | "(" | ")" | "," | "freeze" | "on" | "off" | "true" | "false" | "1"
                    | "0" => {}
                    "format" => {
                        let f = w
                            .get(j + 1)
                            .map(|s| s.to_ascii_lowercase())
                            .unwrap_or_default();
                        if f != "text" {
                            return Err(SqlError::unsupported(format!(
                                "COPY format \"{f}\" is not supported"
                            )));
                        }
                        j += 1;
                    }
                    other => {
                        return Err(SqlError::unsupported(format!(
                            "COPY option \"{other}\" is not supported"
                        )))
                    }
                }
                j += 1;
            }
            Ok(Some(Utility::CopyFrom { table, columns }))
        }
        _ => Ok(None),
    }
}

/// Splits one line of COPY text format into fields (`\N` = NULL, backslash escapes).
pub fn copy_fields(line: &str) -> Vec<Option<String>> {
    line.split('\t')
        .map(|f| {
            if f == "\\N" {
                return None;
            }
            if !f.contains('\\') {
                return Some(f.to_string());
            }
            let mut out = String::with_capacity(f.len());
            let mut it = f.chars();
            while let Some(c) = it.next() {
                if c != '\\' {
                    out.push(c);
                    continue;
                }
                match it.next() {
                    Some('t') => out.push('\t'),
                    Some('n') => out.push('\n'),
                    Some('r') => out.push('\r'),
                    Some('\\') => out.push('\\'),
                    Some(o) => out.push(o),
                    None => {}
                }
            }
            Some(out)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognizes_what_sqlparser_rejects() {
        assert_eq!(
            parse("vacuum analyze pgbench_branches").unwrap(),
            Some(Utility::Vacuum {
                tables: vec!["pgbench_branches".into()],
                freeze: false
            })
        );
        assert_eq!(
            parse("VACUUM (FREEZE, VERBOSE) t").unwrap(),
            Some(Utility::Vacuum {
                tables: vec!["t".into()],
                freeze: true
            })
        );
        assert_eq!(
            parse("vacuum freeze").unwrap(),
            Some(Utility::Vacuum {
                tables: vec![],
                freeze: true
            })
        );
        assert_eq!(
            parse("VACUUM (VERBOSE, FREEZE off) a, b").unwrap(),
            Some(Utility::Vacuum {
                tables: vec!["a".into(), "b".into()],
                freeze: false
            })
        );
        assert_eq!(parse("CHECKPOINT").unwrap(), Some(Utility::Checkpoint));
        assert_eq!(
            parse("copy pgbench_accounts from stdin with (freeze on)").unwrap(),
            Some(Utility::CopyFrom {
                table: "pgbench_accounts".into(),
                columns: vec![]
            })
        );
        assert_eq!(
            parse("COPY t (a, b) FROM STDIN FREEZE").unwrap(),
            Some(Utility::CopyFrom {
                table: "t".into(),
                columns: vec!["a".into(), "b".into()]
            })
        );
        assert!(parse("copy t to stdout").is_err());
        assert_eq!(parse("select 1").unwrap(), None);
        assert_eq!(
            copy_fields("1\t\\N\ta\\tb"),
            vec![Some("1".into()), None, Some("a\tb".into())]
        );
    }
}
