//! Splitting a query string into statements: transaction control and SET / SHOW / RESET
//! by their first words, the utility statements sqlparser's grammar does not match
//! (`crate::utility`), and everything else through sqlparser's PostgreSQL dialect.

use sqlparser::ast::Statement;
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;
use walrus_engine::engine::Isolation;

use crate::error::{SqlError, SqlResult};
use crate::utility::{self, Utility};

fn first_words(sql: &str, n: usize) -> Vec<String> {
    sql.split(|c: char| c.is_whitespace() || c == ';')
        .filter(|w| !w.is_empty())
        .take(n)
        .map(|w| w.to_ascii_lowercase())
        .collect()
}

/// A statement after parsing: cached per SQL text for extended-protocol execution.
#[derive(Clone)]
pub(crate) enum Parsed {
    Begin(Option<Isolation>),
    Commit,
    Rollback,
    Setting(String),
    Utility(Utility),
    Sql(Box<Statement>),
}

pub(crate) fn isolation_of(sql: &str) -> Option<Isolation> {
    let l = sql.to_ascii_lowercase();
    if l.contains("repeatable read") || l.contains("serializable") {
        Some(Isolation::RepeatableRead)
    } else if l.contains("read committed") || l.contains("read uncommitted") {
        Some(Isolation::ReadCommitted)
    } else {
        None
    }
}

fn syntax_message(e: &str) -> String {
    // sqlparser: "sql parser error: Expected: ..., found: X at Line: 1, Column: 5"
    let e = e.trim_start_matches("sql parser error: ");
    match e.split_once("found: ") {
        Some((_, rest)) => {
            let tok = rest.split(" at Line").next().unwrap_or(rest).trim();
            if tok == "EOF" {
                "syntax error at end of input".to_string()
            } else {
                format!("syntax error at or near \"{tok}\"")
            }
        }
        None => format!("syntax error: {e}"),
    }
}
/// The statements of `sql`, in order (none for an empty string).
pub(crate) fn parse(sql: &str) -> SqlResult<Vec<Parsed>> {
    let w = first_words(sql, 3);
    let Some(first) = w.first() else {
        return Ok(Vec::new());
    };
    match first.as_str() {
        "begin" | "start" => return Ok(vec![Parsed::Begin(isolation_of(sql))]),
        "commit" | "end" => return Ok(vec![Parsed::Commit]),
        "rollback" | "abort" => return Ok(vec![Parsed::Rollback]),
        "set" | "show" | "reset" => {
            return Ok(vec![Parsed::Setting(
                sql.trim().trim_end_matches(';').to_string(),
            )])
        }
        _ => {}
    }
    if let Some(u) = utility::parse(sql)? {
        return Ok(vec![Parsed::Utility(u)]);
    }
    let stmts = Parser::parse_sql(&PostgreSqlDialect {}, sql)
        .map_err(|e| SqlError::syntax(syntax_message(&e.to_string())))?;
    Ok(stmts
        .into_iter()
        .map(|s| Parsed::Sql(Box::new(s)))
        .collect())
}
