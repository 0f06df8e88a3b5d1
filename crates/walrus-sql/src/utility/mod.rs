//! PostgreSQL utility statements that sqlparser's grammar does not match (0.63 rejects
//! `VACUUM ANALYZE t`, `CHECKPOINT` and `WITH (FREEZE ON)`):
//! `VACUUM [ANALYZE|FULL|VERBOSE|FREEZE|(options)] [table, ...]`, `ANALYZE [table]`,
//! `CHECKPOINT`, and COPY in all its PostgreSQL forms (`copy.rs`). Recognized by their
//! first keyword and parsed here; everything else goes to sqlparser.

pub mod copy;

use crate::error::{SqlError, SqlResult};
pub use copy::{CopyFormat, CopyOptions, CopySource, CopyStatement, ForceQuote, HeaderChoice};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Utility {
    /// `freeze`: FREEZE, alone or in the option list (`FREEZE false` turns it off).
    Vacuum {
        tables: Vec<String>,
        freeze: bool,
        /// `VACUUM ANALYZE` / `(ANALYZE)`: the tables are analyzed afterwards.
        analyze: bool,
    },
    /// The tables named (none: every table); each must exist.
    Analyze {
        tables: Vec<String>,
    },
    Checkpoint,
    Copy(CopyStatement),
    /// `CREATE SEQUENCE ...` / `ALTER SEQUENCE ...`, read by `exec/sequence.rs`: its text.
    Sequence(String),
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
        "alter" | "create"
            if w.get(1).is_some_and(|s| s.eq_ignore_ascii_case("sequence"))
                || (first == "create"
                    && w.get(1).is_some_and(|s| {
                        matches!(
                            s.to_ascii_lowercase().as_str(),
                            "temp" | "temporary" | "unlogged"
                        )
                    })
                    && w.get(2).is_some_and(|s| s.eq_ignore_ascii_case("sequence"))) =>
        {
            Ok(Some(Utility::Sequence(sql.trim().to_string())))
        }
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
            let mut analyze = false;
            while i < w.len() {
                let lw = w[i].to_ascii_lowercase();
                match lw.as_str() {
                    "(" => {
                        // Option list: only FREEZE and ANALYZE [boolean] matter here.
                        while i < w.len() && w[i] != ")" {
                            let arg = w.get(i + 1).map(|a| a.to_ascii_lowercase());
                            let on = !matches!(arg.as_deref(), Some("false" | "off" | "0" | "no"));
                            if w[i].eq_ignore_ascii_case("freeze") {
                                freeze = on;
                            } else if w[i].eq_ignore_ascii_case("analyze")
                                || w[i].eq_ignore_ascii_case("analyse")
                            {
                                analyze = on;
                            }
                            i += 1;
                        }
                    }
                    "freeze" => freeze = true,
                    "analyze" | "analyse" => analyze = true,
                    "full" | "verbose" | ")" | "," => {}
                    _ => tables.push(ident(&w[i])),
                }
                i += 1;
            }
            Ok(Some(Utility::Vacuum {
                tables,
                freeze,
                analyze,
            }))
        }
        "copy" => Ok(Some(Utility::Copy(copy::parse(sql)?))),
        _ => Ok(None),
    }
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
                freeze: false,
                analyze: true
            })
        );
        assert_eq!(
            parse("VACUUM (FREEZE, VERBOSE) t").unwrap(),
            Some(Utility::Vacuum {
                tables: vec!["t".into()],
                freeze: true,
                analyze: false
            })
        );
        assert_eq!(
            parse("vacuum freeze").unwrap(),
            Some(Utility::Vacuum {
                tables: vec![],
                freeze: true,
                analyze: false
            })
        );
        assert_eq!(
            parse("VACUUM (VERBOSE, FREEZE off) a, b").unwrap(),
            Some(Utility::Vacuum {
                tables: vec!["a".into(), "b".into()],
                freeze: false,
                analyze: false
            })
        );
        assert_eq!(
            parse("VACUUM (ANALYZE, VERBOSE) a").unwrap(),
            Some(Utility::Vacuum {
                tables: vec!["a".into()],
                freeze: false,
                analyze: true
            })
        );
        assert_eq!(parse("CHECKPOINT").unwrap(), Some(Utility::Checkpoint));
        assert!(matches!(
            parse("copy pgbench_accounts from stdin with (freeze on)").unwrap(),
            Some(Utility::Copy(_))
        ));
        assert_eq!(parse("select 1").unwrap(), None);
    }
}
