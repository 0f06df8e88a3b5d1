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
    /// BEGIN / START TRANSACTION: its isolation level and whether it is READ ONLY.
    Begin(Option<Isolation>, bool),
    Commit,
    Rollback,
    /// `SAVEPOINT name`.
    Savepoint(String),
    /// `ROLLBACK TO [SAVEPOINT] name` and `RELEASE [SAVEPOINT] name` (true for RELEASE).
    SavepointEnd(String, bool),
    /// `SET CONSTRAINTS {ALL | names} {DEFERRED | IMMEDIATE}` (`None`: ALL; true for
    /// DEFERRED).
    SetConstraints(Option<Vec<String>>, bool),
    /// `COMMIT AND CHAIN` / `ROLLBACK AND CHAIN` (true for ROLLBACK): not built.
    Chain(bool),
    Setting(String),
    Utility(Utility),
    Sql(Box<Statement>),
}

/// `SET CONSTRAINTS { ALL | name [, ...] } { DEFERRED | IMMEDIATE }`; names folded
/// unless quoted (a schema qualifier is dropped: walrus has one schema).
fn set_constraints(sql: &str) -> SqlResult<Parsed> {
    use sqlparser::tokenizer::{Token, Tokenizer};
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql)
        .tokenize()
        .map_err(|e| SqlError::syntax(e.to_string()))?;
    let words: Vec<&Token> = tokens
        .iter()
        .filter(|t| !matches!(t, Token::Whitespace(_) | Token::SemiColon))
        .collect();
    let bad = |near: &str| SqlError::syntax(format!("syntax error at or near \"{near}\""));
    let word = |t: &Token| match t {
        Token::Word(w) => Some((w.value.clone(), w.quote_style.is_some())),
        _ => None,
    };
    let Some((last, _)) = words.last().and_then(|t| word(t)) else {
        return Err(SqlError::syntax("syntax error at end of input"));
    };
    let deferred = match last.to_ascii_lowercase().as_str() {
        "deferred" => true,
        "immediate" => false,
        _ => return Err(bad(&last)),
    };
    let body = &words[2..words.len() - 1];
    if let [only] = body {
        if let Some((w, false)) = word(only) {
            if w.eq_ignore_ascii_case("all") {
                return Ok(Parsed::SetConstraints(None, deferred));
            }
        }
    }
    let mut names = Vec::new();
    let mut expect_name = true;
    let mut i = 0;
    while i < body.len() {
        match (expect_name, body[i]) {
            (true, t) => {
                let (w, quoted) = word(t).ok_or_else(|| bad(&t.to_string()))?;
                let mut name = if quoted { w } else { w.to_ascii_lowercase() };
                // schema.name
                if matches!(body.get(i + 1), Some(Token::Period)) {
                    let t2 = body.get(i + 2).ok_or_else(|| bad("."))?;
                    let (w2, q2) = word(t2).ok_or_else(|| bad(&t2.to_string()))?;
                    name = if q2 { w2 } else { w2.to_ascii_lowercase() };
                    i += 2;
                }
                names.push(name);
                expect_name = false;
            }
            (false, Token::Comma) => expect_name = true,
            (false, t) => return Err(bad(&t.to_string())),
        }
        i += 1;
    }
    if names.is_empty() || expect_name {
        return Err(bad(&last));
    }
    Ok(Parsed::SetConstraints(Some(names), deferred))
}

/// `SAVEPOINT name`, `RELEASE [SAVEPOINT] name`, `ROLLBACK [WORK|TRANSACTION] TO
/// [SAVEPOINT] name`, through sqlparser's grammar (so anything else after the name is
/// a syntax error); the name folded to lower case unless quoted, as PostgreSQL does.
fn savepoint_statement(sql: &str) -> SqlResult<Parsed> {
    let stmts = Parser::parse_sql(&PostgreSqlDialect {}, sql)
        .map_err(|e| SqlError::syntax(syntax_message(&e.to_string())))?;
    let fold = |name: &sqlparser::ast::Ident| match name.quote_style {
        Some(_) => name.value.clone(),
        None => name.value.to_ascii_lowercase(),
    };
    match stmts.as_slice() {
        [Statement::Savepoint { name }] => Ok(Parsed::Savepoint(fold(name))),
        [Statement::ReleaseSavepoint { name }] => Ok(Parsed::SavepointEnd(fold(name), true)),
        [Statement::Rollback {
            chain: false,
            savepoint: Some(name),
        }] => Ok(Parsed::SavepointEnd(fold(name), false)),
        _ => Err(SqlError::syntax(format!(
            "syntax error at or near \"{}\"",
            first_words(sql, 1).join("")
        ))),
    }
}

/// The transaction modes of BEGIN / START TRANSACTION: isolation level and READ ONLY.
/// Anything else after the keywords is a syntax error, as in PostgreSQL.
fn begin_modes(sql: &str) -> SqlResult<(Option<Isolation>, bool)> {
    let words: Vec<String> = sql
        .split(|c: char| c.is_whitespace() || c == ';' || c == ',')
        .filter(|w| !w.is_empty())
        .map(|w| w.to_ascii_lowercase())
        .collect();
    let mut i = 1;
    if words.first().is_some_and(|w| w == "start") {
        if words.get(1).map(String::as_str) != Some("transaction") {
            return Err(SqlError::syntax("syntax error at or near \"start\""));
        }
        i = 2;
    } else if matches!(
        words.get(1).map(String::as_str),
        Some("work" | "transaction")
    ) {
        i = 2;
    }
    let mut read_only = false;
    while i < words.len() {
        let two = (words[i].as_str(), words.get(i + 1).map(String::as_str));
        i += match two {
            ("read", Some("only")) => {
                read_only = true;
                2
            }
            ("read", Some("write")) => {
                read_only = false;
                2
            }
            ("isolation", Some("level")) => match words.get(i + 2).map(String::as_str) {
                Some("serializable") => {
                    // Run as REPEATABLE READ it would allow write skew that PostgreSQL's
                    // SERIALIZABLE prevents.
                    return Err(SqlError::unsupported(
                        "SERIALIZABLE isolation is not supported",
                    ));
                }
                Some("repeatable" | "read") => 4,
                _ => return Err(SqlError::syntax("syntax error in transaction mode")),
            },
            ("deferrable", _) => 1,
            ("not", Some("deferrable")) => 2,
            (w, _) => return Err(SqlError::syntax(format!("syntax error at or near \"{w}\""))),
        };
    }
    Ok((isolation_of(sql), read_only))
}

pub(crate) fn isolation_of(sql: &str) -> Option<Isolation> {
    let l = sql.to_ascii_lowercase();
    if l.contains("repeatable read") {
        Some(Isolation::RepeatableRead)
    } else if l.contains("read committed") || l.contains("read uncommitted") {
        Some(Isolation::ReadCommitted)
    } else {
        None
    }
}

/// `sql` with `FOR NO KEY UPDATE` read as `FOR UPDATE` and `FOR KEY SHARE` as `FOR
/// SHARE` (sqlparser knows only the two); `None` when there is neither. The stronger
/// lock returns the same rows and blocks at least everything the weaker one blocks
/// (it also blocks what PostgreSQL lets through: a KEY SHARE locker against a non-key
/// UPDATE, and the reverse), so the difference is in waiting, never in an answer.
fn strengthen_lock_clauses(sql: &str) -> Option<String> {
    use sqlparser::tokenizer::{Token, Tokenizer};
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize().ok()?;
    let word = |t: Option<&Token>| match t {
        Some(Token::Word(w)) if w.quote_style.is_none() => Some(w.value.to_ascii_lowercase()),
        _ => None,
    };
    // The next non-whitespace token after `i`.
    let next =
        |i: usize| (i + 1..tokens.len()).find(|&j| !matches!(tokens[j], Token::Whitespace(_)));
    let mut drop = vec![false; tokens.len()];
    let mut changed = false;
    for i in 0..tokens.len() {
        if word(tokens.get(i)).as_deref() != Some("for") {
            continue;
        }
        let Some(a) = next(i) else { continue };
        match word(tokens.get(a)).as_deref() {
            Some("no") => {
                let Some(b) = next(a) else { continue };
                let Some(c) = next(b) else { continue };
                if word(tokens.get(b)).as_deref() == Some("key")
                    && word(tokens.get(c)).as_deref() == Some("update")
                {
                    drop[a..c].iter_mut().for_each(|d| *d = true);
                    changed = true;
                }
            }
            Some("key") => {
                let Some(b) = next(a) else { continue };
                if word(tokens.get(b)).as_deref() == Some("share") {
                    drop[a..b].iter_mut().for_each(|d| *d = true);
                    changed = true;
                }
            }
            _ => {}
        }
    }
    changed.then(|| {
        tokens
            .iter()
            .zip(&drop)
            .filter(|(_, d)| !**d)
            .map(|(t, _)| t.to_string())
            .collect()
    })
}

/// `sql` with each `AS IDENTITY (options)` list put in the order sqlparser reads
/// (INCREMENT, MINVALUE, MAXVALUE, START, CACHE, CYCLE); `None` when there is none or
/// nothing moved.
fn reorder_identity_options(sql: &str) -> Option<String> {
    use sqlparser::tokenizer::{Token, Tokenizer};
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize().ok()?;
    let word = |t: &Token| match t {
        Token::Word(w) if w.quote_style.is_none() => Some(w.value.to_ascii_lowercase()),
        _ => None,
    };
    let mut out: Vec<String> = Vec::new();
    let mut moved = false;
    let mut i = 0;
    while i < tokens.len() {
        out.push(tokens[i].to_string());
        let opens_list = word(&tokens[i]).as_deref() == Some("identity")
            && tokens[..i]
                .iter()
                .rev()
                .find(|t| !matches!(t, Token::Whitespace(_)))
                .and_then(word)
                .as_deref()
                == Some("as");
        i += 1;
        if !opens_list {
            continue;
        }
        let Some(open) = (i..tokens.len()).find(|&k| !matches!(tokens[k], Token::Whitespace(_)))
        else {
            break;
        };
        if tokens[open] != Token::LParen {
            continue;
        }
        let close = (open..tokens.len()).find(|&k| tokens[k] == Token::RParen)?;
        // Options, each starting at its keyword.
        let mut options: Vec<(u8, Vec<String>)> = Vec::new();
        let mut k = open + 1;
        while k < close {
            if matches!(tokens[k], Token::Whitespace(_)) {
                k += 1;
                continue;
            }
            let w = word(&tokens[k]);
            let next = (k + 1..close)
                .find(|&m| !matches!(tokens[m], Token::Whitespace(_)))
                .and_then(|m| word(&tokens[m]));
            let rank = match (w.as_deref(), next.as_deref()) {
                (Some("increment"), _) => Some(0),
                (Some("minvalue"), _) | (Some("no"), Some("minvalue")) => Some(1),
                (Some("maxvalue"), _) | (Some("no"), Some("maxvalue")) => Some(2),
                (Some("start"), _) => Some(3),
                (Some("cache"), _) => Some(4),
                (Some("cycle"), _) | (Some("no"), Some("cycle")) => Some(5),
                _ => None,
            };
            match (rank, options.last_mut()) {
                (Some(r), _) => options.push((r, vec![tokens[k].to_string()])),
                (None, Some((_, words))) => words.push(tokens[k].to_string()),
                (None, None) => return None,
            }
            k += 1;
        }
        let before: Vec<u8> = options.iter().map(|(r, _)| *r).collect();
        options.sort_by_key(|(r, _)| *r);
        moved |= options.iter().map(|(r, _)| *r).collect::<Vec<_>>() != before;
        out.extend(tokens[i..open].iter().map(|t| t.to_string()));
        out.push("(".into());
        out.push(
            options
                .into_iter()
                .map(|(_, w)| w.join(" "))
                .collect::<Vec<_>>()
                .join(" "),
        );
        out.push(")".into());
        i = close + 1;
    }
    moved.then(|| out.concat())
}

pub(crate) fn syntax_message(e: &str) -> String {
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
/// The statements of `sql`, in order (none for an empty string). A string of several
/// statements is cut at its top-level semicolons and each piece read on its own, so
/// `BEGIN; SELECT 1; COMMIT` or `SELECT ...; SHOW x` is read as PostgreSQL reads it.
pub(crate) fn parse(sql: &str) -> SqlResult<Vec<Parsed>> {
    let pieces = split_statements(sql);
    if pieces.len() <= 1 {
        return parse_one(sql);
    }
    let mut out = Vec::new();
    for piece in pieces {
        out.extend(parse_one(piece)?);
    }
    Ok(out)
}

/// `sql` cut after each top-level `;` (not inside quotes, dollar quotes or comments);
/// pieces holding only blanks and comments are dropped. A string whose quoting does not
/// end comes back whole, for the parser to report.
pub(crate) fn split_statements(sql: &str) -> Vec<&str> {
    let b = sql.as_bytes();
    let mut pieces = Vec::new();
    let (mut start, mut i) = (0, 0);
    let mut substantive = false;
    while i < b.len() {
        match b[i] {
            b';' => {
                if substantive {
                    pieces.push(&sql[start..=i]);
                }
                start = i + 1;
                substantive = false;
                i += 1;
                continue;
            }
            b'-' if b.get(i + 1) == Some(&b'-') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let mut depth = 0;
                while i < b.len() {
                    if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                        depth += 1;
                        i += 2;
                    } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
                if depth != 0 {
                    return vec![sql];
                }
                continue;
            }
            b'\'' | b'"' => {
                let quote = b[i];
                // E'...' strings take backslash escapes.
                let escapes = quote == b'\''
                    && i > 0
                    && matches!(b[i - 1], b'e' | b'E')
                    && (i < 2 || !(b[i - 2].is_ascii_alphanumeric() || b[i - 2] == b'_'));
                i += 1;
                loop {
                    match b.get(i) {
                        None => return vec![sql],
                        Some(b'\\') if escapes => i += 2,
                        Some(&c) if c == quote => {
                            if b.get(i + 1) == Some(&quote) {
                                i += 2;
                            } else {
                                i += 1;
                                break;
                            }
                        }
                        Some(_) => i += 1,
                    }
                }
                substantive = true;
                continue;
            }
            b'$' => {
                // $tag$ ... $tag$ (a tag is empty or an identifier); $1 is a parameter.
                let tag_end = b[i + 1..]
                    .iter()
                    .position(|&c| !(c.is_ascii_alphanumeric() || c == b'_'))
                    .map(|p| i + 1 + p);
                let starts_ident = b.get(i + 1).is_none_or(|c| !c.is_ascii_digit());
                let preceded = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
                if let Some(e) = tag_end.filter(|&e| b[e] == b'$' && starts_ident && !preceded) {
                    let tag = &sql[i..=e];
                    match sql[e + 1..].find(tag) {
                        Some(close) => {
                            i = e + 1 + close + tag.len();
                            substantive = true;
                            continue;
                        }
                        None => return vec![sql],
                    }
                }
            }
            c if c.is_ascii_whitespace() => {
                i += 1;
                continue;
            }
            _ => {}
        }
        substantive = true;
        i += 1;
    }
    if substantive {
        pieces.push(&sql[start..]);
    }
    pieces
}

fn parse_one(sql: &str) -> SqlResult<Vec<Parsed>> {
    let w = first_words(sql, 3);
    let Some(first) = w.first() else {
        return Ok(Vec::new());
    };
    match first.as_str() {
        "begin" | "start" => {
            let (iso, read_only) = begin_modes(sql)?;
            return Ok(vec![Parsed::Begin(iso, read_only)]);
        }
        "commit" | "end" | "rollback" | "abort" => {
            // Only the plain forms; anything more (AND CHAIN, PREPARED, TO SAVEPOINT)
            // must not be taken for a plain COMMIT or ROLLBACK.
            let all = first_words(sql, 6);
            let rest: Vec<&str> = all[1..]
                .iter()
                .map(String::as_str)
                .filter(|x| !matches!(*x, "work" | "transaction"))
                .collect();
            let rest: &[&str] = if rest == ["and", "no", "chain"] {
                &[]
            } else {
                &rest
            };
            let rollback = matches!(first.as_str(), "rollback" | "abort");
            return match rest.first() {
                None => Ok(vec![if rollback {
                    Parsed::Rollback
                } else {
                    Parsed::Commit
                }]),
                Some(&"to") if first == "rollback" => Ok(vec![savepoint_statement(sql)?]),
                Some(&"and") if rest == ["and", "chain"] => Ok(vec![Parsed::Chain(rollback)]),
                Some(_) => Err(SqlError::unsupported(format!(
                    "{} is not supported",
                    sql.trim().trim_end_matches(';').to_ascii_uppercase()
                ))),
            };
        }
        "release" | "savepoint" => return Ok(vec![savepoint_statement(sql)?]),
        "set" if w.get(1).map(String::as_str) == Some("constraints") => {
            return Ok(vec![set_constraints(sql)?]);
        }
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
    let mut stmts = Parser::parse_sql(&PostgreSqlDialect {}, sql)
        .or_else(|e| match reorder_identity_options(sql) {
            // sqlparser reads an identity column's sequence options in one order only;
            // PostgreSQL in any.
            Some(reordered) => Parser::parse_sql(&PostgreSqlDialect {}, &reordered),
            None => Err(e),
        })
        .or_else(|e| match strengthen_lock_clauses(sql) {
            Some(stronger) => Parser::parse_sql(&PostgreSqlDialect {}, &stronger),
            None => Err(e),
        })
        .map_err(|e| SqlError::syntax(syntax_message(&e.to_string())))?;
    crate::stack::walk_statements(&mut stmts)?;
    stmts
        .into_iter()
        .map(|mut s| {
            crate::rewrite::rewrite(&mut s)?;
            Ok(Parsed::Sql(Box::new(s)))
        })
        .collect()
}

#[cfg(test)]
mod split_tests {
    use super::split_statements;

    #[test]
    fn statements_are_cut_at_top_level_semicolons_only() {
        assert_eq!(
            split_statements("begin; select 1; commit"),
            vec!["begin;", " select 1;", " commit"]
        );
        assert_eq!(split_statements("select 1;"), vec!["select 1;"]);
        assert_eq!(split_statements("  ; -- c;\n ;"), Vec::<&str>::new());
        assert_eq!(
            split_statements("select ';', \"a;b\", $$x;y$$, $t$;$t$ /* ; /* ; */ */; show x"),
            vec![
                "select ';', \"a;b\", $$x;y$$, $t$;$t$ /* ; /* ; */ */;",
                " show x"
            ]
        );
        assert_eq!(
            split_statements("select E'a\\';b'; select 2"),
            vec!["select E'a\\';b';", " select 2"]
        );
        assert_eq!(
            split_statements("select $1; select 2"),
            vec!["select $1;", " select 2"]
        );
        // Unterminated quoting: whole, for the parser to report.
        assert_eq!(
            split_statements("select 'a; select 2"),
            vec!["select 'a; select 2"]
        );
    }
}
