//! The COPY statement as PostgreSQL 15 takes it: `COPY table [(cols)] FROM STDIN`,
//! `COPY table [(cols)] TO STDOUT`, `COPY (query) TO STDOUT`, with the option list
//! `WITH (FORMAT csv, HEADER, ...)` or the pre-9.0 words psql users still type
//! (`WITH CSV HEADER DELIMITER ','`, `COPY BINARY t`, `USING DELIMITERS`). The
//! options are checked here in the order and with the errors of PostgreSQL's
//! `ProcessCopyOptions`, so a COPY is refused before any data moves.
//!
//! Not built, refused with 0A000: server-side files and programs, `WHERE`, encodings
//! other than UTF8. `FREEZE` (FROM) writes the rows with their xmin hinted committed and,
//! as in PostgreSQL, needs the table created or truncated in the same transaction
//! (55000 otherwise); with TO it is accepted and means nothing, as in PostgreSQL.

use crate::error::{SqlError, SqlResult};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyFormat {
    Text,
    Csv,
    Binary,
}

/// `HEADER`: none, a line to skip (FROM) or write (TO), or one to check against the
/// column names (`HEADER MATCH`, FROM only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderChoice {
    Absent,
    Present,
    Match,
}

/// `FORCE_QUOTE` of a CSV COPY TO.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForceQuote {
    None,
    All,
    Columns(Vec<String>),
}

/// The options in force, defaults filled in; the delimiter, quote and escape are single
/// bytes (PostgreSQL requires one-byte characters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyOptions {
    pub format: CopyFormat,
    pub header: HeaderChoice,
    pub delimiter: u8,
    /// The NULL string (`\N` for text, empty for CSV).
    pub null: String,
    pub quote: u8,
    pub escape: u8,
    pub force_quote: ForceQuote,
    pub force_not_null: Vec<String>,
    pub force_null: Vec<String>,
    /// `FREEZE`: load the rows frozen (FROM only; checked against the table when the
    /// COPY starts).
    pub freeze: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CopySource {
    /// A table and the columns named (none: all, in order).
    Table { name: String, columns: Vec<String> },
    /// `COPY (query) TO`: the query's text.
    Query(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyStatement {
    pub source: CopySource,
    /// FROM (loading) rather than TO.
    pub from: bool,
    pub options: CopyOptions,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    /// An unquoted word, folded to lower case.
    Word(String),
    QuotedIdent(String),
    Str(String),
    Punct(char),
}

struct Token {
    tok: Tok,
    start: usize,
    text: String,
}

fn syntax_near(t: Option<&Token>) -> SqlError {
    match t {
        Some(t) => SqlError::syntax(format!("syntax error at or near \"{}\"", t.text)),
        None => SqlError::syntax("syntax error at end of input"),
    }
}

/// An E'...' string's backslash escapes.
fn unescape_e(raw: &str) -> SqlResult<String> {
    let mut out = Vec::with_capacity(raw.len());
    let b = raw.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' || i + 1 == b.len() {
            out.push(b[i]);
            i += 1;
            continue;
        }
        let c = b[i + 1];
        i += 2;
        match c {
            b'n' => out.push(b'\n'),
            b't' => out.push(b'\t'),
            b'r' => out.push(b'\r'),
            b'b' => out.push(8),
            b'f' => out.push(12),
            b'0'..=b'7' => {
                let mut v = (c - b'0') as u32;
                for _ in 0..2 {
                    match b.get(i) {
                        Some(d @ b'0'..=b'7') => {
                            v = v * 8 + (d - b'0') as u32;
                            i += 1;
                        }
                        _ => break,
                    }
                }
                out.push(v as u8);
            }
            b'x' => {
                let mut v = 0u32;
                let mut n = 0;
                while n < 2 {
                    match b.get(i).and_then(|d| (*d as char).to_digit(16)) {
                        Some(d) => {
                            v = v * 16 + d;
                            i += 1;
                            n += 1;
                        }
                        None => break,
                    }
                }
                if n == 0 {
                    out.push(b'x');
                } else {
                    out.push(v as u8);
                }
            }
            other => out.push(other),
        }
    }
    String::from_utf8(out)
        .map_err(|_| SqlError::new("22021", "invalid byte sequence for encoding \"UTF8\""))
}

fn tokenize(sql: &str) -> SqlResult<Vec<Token>> {
    let b = sql.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if c == b'-' && b.get(i + 1) == Some(&b'-') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        let start = i;
        let e_string = (c == b'e' || c == b'E') && b.get(i + 1) == Some(&b'\'');
        if c == b'\'' || e_string {
            i += if e_string { 2 } else { 1 };
            let body_start = i;
            let mut body = String::new();
            loop {
                match b.get(i) {
                    None => return Err(SqlError::syntax("unterminated quoted string")),
                    Some(b'\\') if e_string => {
                        i += 2;
                    }
                    Some(b'\'') if b.get(i + 1) == Some(&b'\'') => i += 2,
                    Some(b'\'') => break,
                    Some(_) => i += 1,
                }
            }
            let raw = sql[body_start..i.min(b.len())].replace("''", "'");
            i += 1;
            if e_string {
                body.push_str(&unescape_e(&raw)?);
            } else {
                body = raw;
            }
            out.push(Token {
                tok: Tok::Str(body),
                start,
                text: sql[start..i].to_string(),
            });
            continue;
        }
        if c == b'"' {
            i += 1;
            loop {
                match b.get(i) {
                    None => return Err(SqlError::syntax("unterminated quoted identifier")),
                    Some(b'"') if b.get(i + 1) == Some(&b'"') => i += 2,
                    Some(b'"') => break,
                    Some(_) => i += 1,
                }
            }
            let name = sql[start + 1..i].replace("\"\"", "\"");
            i += 1;
            out.push(Token {
                tok: Tok::QuotedIdent(name),
                start,
                text: sql[start..i].to_string(),
            });
            continue;
        }
        if matches!(c, b'(' | b')' | b',' | b';' | b'=' | b'*' | b'.') {
            i += 1;
            out.push(Token {
                tok: Tok::Punct(c as char),
                start,
                text: (c as char).to_string(),
            });
            continue;
        }
        while i < b.len()
            && !b[i].is_ascii_whitespace()
            && !matches!(
                b[i],
                b'(' | b')' | b',' | b';' | b'=' | b'*' | b'.' | b'\'' | b'"'
            )
        {
            i += 1;
        }
        let w = &sql[start..i];
        out.push(Token {
            tok: Tok::Word(w.to_ascii_lowercase()),
            start,
            text: w.to_string(),
        });
    }
    Ok(out)
}

/// One option's argument, as PostgreSQL's grammar gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum OptArg {
    None,
    /// A word or number (`csv`, `true`, `1`).
    Word(String),
    Str(String),
    Star,
    List(Vec<String>),
}

struct Cursor<'a> {
    toks: &'a [Token],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<&'a Token> {
        self.toks.get(self.at)
    }
    fn next(&mut self) -> Option<&'a Token> {
        let t = self.toks.get(self.at);
        self.at += 1;
        t
    }
    fn is_word(&self, w: &str) -> bool {
        matches!(self.peek().map(|t| &t.tok), Some(Tok::Word(x)) if x == w)
    }
    fn is_punct(&self, p: char) -> bool {
        matches!(self.peek().map(|t| &t.tok), Some(Tok::Punct(x)) if *x == p)
    }
    fn eat_word(&mut self, w: &str) -> bool {
        let yes = self.is_word(w);
        if yes {
            self.at += 1;
        }
        yes
    }
    fn eat_punct(&mut self, p: char) -> bool {
        let yes = self.is_punct(p);
        if yes {
            self.at += 1;
        }
        yes
    }
    fn expect_punct(&mut self, p: char) -> SqlResult<()> {
        if self.eat_punct(p) {
            Ok(())
        } else {
            Err(syntax_near(self.peek()))
        }
    }
    fn ident(&mut self) -> SqlResult<String> {
        match self.next() {
            Some(Token {
                tok: Tok::Word(w), ..
            }) => Ok(w.clone()),
            Some(Token {
                tok: Tok::QuotedIdent(q),
                ..
            }) => Ok(q.clone()),
            other => Err(syntax_near(other)),
        }
    }
    fn string(&mut self) -> SqlResult<String> {
        match self.next() {
            Some(Token {
                tok: Tok::Str(s), ..
            }) => Ok(s.clone()),
            other => Err(syntax_near(other)),
        }
    }
    /// `( ident, ... )`.
    fn paren_idents(&mut self) -> SqlResult<Vec<String>> {
        self.expect_punct('(')?;
        let mut out = vec![self.ident()?];
        while self.eat_punct(',') {
            out.push(self.ident()?);
        }
        self.expect_punct(')')?;
        Ok(out)
    }
}

/// Parses a statement that starts with COPY.
pub fn parse(sql: &str) -> SqlResult<CopyStatement> {
    let toks = tokenize(sql)?;
    let mut c = Cursor { toks: &toks, at: 0 };
    c.next(); // COPY
    let mut options: Vec<(String, OptArg)> = Vec::new();
    let (source, from) = if c.is_punct('(') {
        // The query runs to the matching parenthesis (strings are single tokens).
        let open = c
            .next()
            .ok_or_else(|| SqlError::syntax("syntax error at end of input"))?;
        let mut depth = 1;
        let mut close = None;
        while let Some(t) = c.next() {
            match t.tok {
                Tok::Punct('(') => depth += 1,
                // One statement only, as PostgreSQL's grammar.
                Tok::Punct(';') => return Err(syntax_near(Some(t))),
                Tok::Punct(')') => {
                    depth -= 1;
                    if depth == 0 {
                        close = Some(t.start);
                        break;
                    }
                }
                _ => {}
            }
        }
        let close = close.ok_or_else(|| syntax_near(None))?;
        let query = sql[open.start + 1..close].trim().to_string();
        if !c.eat_word("to") {
            return Err(syntax_near(c.peek()));
        }
        (CopySource::Query(query), false)
    } else {
        if c.eat_word("binary") {
            options.push(("format".into(), OptArg::Word("binary".into())));
        }
        let mut name = c.ident()?;
        if c.eat_punct('.') {
            let table = c.ident()?;
            name = if name == "public" {
                table
            } else {
                format!("{name}.{table}")
            };
        }
        let columns = if c.is_punct('(') {
            c.paren_idents()?
        } else {
            Vec::new()
        };
        let from = if c.eat_word("from") {
            true
        } else if c.eat_word("to") {
            false
        } else {
            return Err(syntax_near(c.peek()));
        };
        (CopySource::Table { name, columns }, from)
    };
    let mut file = false;
    if c.eat_word("program") {
        c.string()?;
        file = true;
    } else if c.eat_word("stdin") || c.eat_word("stdout") {
    } else {
        c.string()?;
        file = true;
    }
    // `[USING] DELIMITERS 'x'`, from before 7.3.
    let using = c.eat_word("using");
    if c.eat_word("delimiters") {
        options.push(("delimiter".into(), OptArg::Str(c.string()?)));
    } else if using {
        return Err(syntax_near(c.peek()));
    }
    c.eat_word("with");
    if c.eat_punct('(') {
        loop {
            let name = match c.next() {
                Some(Token {
                    tok: Tok::Word(w) | Tok::QuotedIdent(w),
                    ..
                }) => w.clone(),
                other => return Err(syntax_near(other)),
            };
            let arg = match c.peek().map(|t| &t.tok) {
                Some(Tok::Punct(',' | ')')) | None => OptArg::None,
                Some(Tok::Punct('*')) => {
                    c.next();
                    OptArg::Star
                }
                Some(Tok::Punct('(')) => OptArg::List(c.paren_idents()?),
                Some(Tok::Str(s)) => {
                    let s = s.clone();
                    c.next();
                    OptArg::Str(s)
                }
                Some(Tok::Word(w) | Tok::QuotedIdent(w)) => {
                    let w = w.clone();
                    c.next();
                    OptArg::Word(w)
                }
                Some(_) => return Err(syntax_near(c.peek())),
            };
            options.push((name, arg));
            if c.eat_punct(')') {
                break;
            }
            c.expect_punct(',')?;
        }
    } else {
        old_style_options(&mut c, &mut options)?;
    }
    if c.is_word("where") && !from {
        return Err(SqlError::syntax("WHERE clause not allowed with COPY TO"));
    }
    if c.is_word("where") {
        return Err(SqlError::unsupported(
            "COPY ... WHERE is not supported by walrus",
        ));
    }
    c.eat_punct(';');
    if c.peek().is_some() {
        return Err(syntax_near(c.peek()));
    }
    if file {
        return Err(SqlError::unsupported(
            "COPY to or from a server-side file or program is not supported by walrus",
        )
        .with_hint("Use COPY ... FROM STDIN or TO STDOUT, or psql's \\copy."));
    }
    let options = process_options(from, &options)?;
    Ok(CopyStatement {
        source,
        from,
        options,
    })
}

/// The option words of PostgreSQL's `copy_opt_list` (before 9.0's parenthesised list),
/// turned into their generic names.
fn old_style_options(c: &mut Cursor, out: &mut Vec<(String, OptArg)>) -> SqlResult<()> {
    let word_list = |c: &mut Cursor| -> SqlResult<OptArg> {
        if c.eat_punct('*') {
            return Ok(OptArg::Star);
        }
        let mut cols = vec![c.ident()?];
        while c.eat_punct(',') {
            cols.push(c.ident()?);
        }
        Ok(OptArg::List(cols))
    };
    loop {
        let Some(Token {
            tok: Tok::Word(w), ..
        }) = c.peek()
        else {
            return Ok(());
        };
        let (name, arg) = match w.as_str() {
            "binary" => ("format", OptArg::Word("binary".into())),
            "csv" => ("format", OptArg::Word("csv".into())),
            "freeze" => ("freeze", OptArg::None),
            "header" => ("header", OptArg::None),
            "delimiter" | "null" | "quote" | "escape" | "encoding" => {
                let name = match w.as_str() {
                    "delimiter" => "delimiter",
                    "null" => "null",
                    "quote" => "quote",
                    "escape" => "escape",
                    _ => "encoding",
                };
                c.next();
                c.eat_word("as");
                out.push((name.into(), OptArg::Str(c.string()?)));
                continue;
            }
            "force" => {
                c.next();
                let name = if c.eat_word("quote") {
                    "force_quote"
                } else if c.eat_word("not") {
                    if !c.eat_word("null") {
                        return Err(syntax_near(c.peek()));
                    }
                    "force_not_null"
                } else if c.eat_word("null") {
                    "force_null"
                } else {
                    return Err(syntax_near(c.peek()));
                };
                let arg = word_list(c)?;
                if name != "force_quote" && arg == OptArg::Star {
                    return Err(syntax_near(c.toks.get(c.at - 1)));
                }
                out.push((name.into(), arg));
                continue;
            }
            _ => return Ok(()),
        };
        c.next();
        out.push((name.into(), arg));
    }
}

fn redundant() -> SqlError {
    SqlError::syntax("conflicting or redundant options")
}

/// PostgreSQL's `defGetString`.
fn string_arg(name: &str, arg: &OptArg) -> SqlResult<String> {
    match arg {
        OptArg::Word(w) | OptArg::Str(w) => Ok(w.clone()),
        OptArg::Star => Ok("*".into()),
        OptArg::None => Err(SqlError::syntax(format!("{name} requires a parameter"))),
        OptArg::List(_) => Err(SqlError::syntax(format!("{name} requires a parameter"))),
    }
}

/// PostgreSQL's `defGetBoolean` (no argument: true).
fn bool_arg(name: &str, arg: &OptArg) -> SqlResult<bool> {
    match arg {
        OptArg::None => Ok(true),
        OptArg::Word(w) | OptArg::Str(w) => match w.to_ascii_lowercase().as_str() {
            "true" | "on" | "1" => Ok(true),
            "false" | "off" | "0" => Ok(false),
            _ => Err(SqlError::syntax(format!("{name} requires a Boolean value"))),
        },
        _ => Err(SqlError::syntax(format!("{name} requires a Boolean value"))),
    }
}

fn column_list(name: &str, arg: &OptArg) -> SqlResult<Vec<String>> {
    match arg {
        OptArg::List(cols) => Ok(cols.clone()),
        _ => Err(SqlError::new(
            "22023",
            format!("argument to option \"{name}\" must be a list of column names"),
        )),
    }
}

/// Whether `name` is a spelling of UTF8 (PostgreSQL ignores case and punctuation).
fn is_utf8_name(name: &str) -> bool {
    let clean: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_lowercase())
        .collect();
    clean == "utf8" || clean == "unicode"
}

/// The encoding names PostgreSQL 15 knows (cleaned: lower case, alphanumerics only).
const KNOWN_ENCODINGS: &[&str] = &[
    "sqlascii",
    "eucjp",
    "euccn",
    "euckr",
    "euctw",
    "eucjis2004",
    "mulecode",
    "latin1",
    "latin2",
    "latin3",
    "latin4",
    "latin5",
    "latin6",
    "latin7",
    "latin8",
    "latin9",
    "latin10",
    "win1256",
    "win1258",
    "win866",
    "win874",
    "koi8r",
    "win1251",
    "win1252",
    "iso88595",
    "iso88596",
    "iso88597",
    "iso88598",
    "win1250",
    "win1253",
    "win1254",
    "win1255",
    "win1257",
    "koi8u",
    "sjis",
    "big5",
    "gbk",
    "uhc",
    "gb18030",
    "johab",
    "shiftjis2004",
    "alt",
    "win",
    "mskanji",
    "shiftjis",
    "windows1252",
    "iso88591",
    "iso885915",
    "tcvn",
    "tcvn5712",
    "vscii",
    "abc",
    "koi8",
    "cp866",
    "cp1251",
];

/// PostgreSQL's `ProcessCopyOptions`: each option at most once, then the checks of
/// the combination, in PostgreSQL's order (the first failing check is the error).
fn process_options(from: bool, opts: &[(String, OptArg)]) -> SqlResult<CopyOptions> {
    let mut format = None;
    let mut freeze = None;
    let mut delimiter: Option<String> = None;
    let mut null: Option<String> = None;
    let mut header = None;
    let mut quote: Option<String> = None;
    let mut escape: Option<String> = None;
    let mut force_quote = None;
    let mut force_not_null = None;
    let mut force_null = None;
    let mut encoding = None;
    fn once<T>(slot: &mut Option<T>, v: T) -> SqlResult<()> {
        if slot.is_some() {
            return Err(redundant());
        }
        *slot = Some(v);
        Ok(())
    }
    for (name, arg) in opts {
        match name.as_str() {
            "format" => {
                let f = string_arg(name, arg)?;
                let v = match f.as_str() {
                    "text" => CopyFormat::Text,
                    "csv" => CopyFormat::Csv,
                    "binary" => CopyFormat::Binary,
                    _ => {
                        if format.is_some() {
                            return Err(redundant());
                        }
                        return Err(SqlError::new(
                            "22023",
                            format!("COPY format \"{f}\" not recognized"),
                        ));
                    }
                };
                once(&mut format, v)?;
            }
            "freeze" => {
                if freeze.is_some() {
                    return Err(redundant());
                }
                freeze = Some(bool_arg(name, arg)?);
            }
            "delimiter" => {
                if delimiter.is_some() {
                    return Err(redundant());
                }
                delimiter = Some(string_arg(name, arg)?);
            }
            "null" => {
                if null.is_some() {
                    return Err(redundant());
                }
                null = Some(string_arg(name, arg)?);
            }
            "header" => {
                if header.is_some() {
                    return Err(redundant());
                }
                let bad =
                    || SqlError::syntax(format!("{name} requires a Boolean value or \"match\""));
                let choice = match arg {
                    OptArg::None => HeaderChoice::Present,
                    OptArg::Word(w) | OptArg::Str(w) => match w.to_ascii_lowercase().as_str() {
                        "true" | "on" | "1" => HeaderChoice::Present,
                        "false" | "off" | "0" => HeaderChoice::Absent,
                        "match" if from => HeaderChoice::Match,
                        "match" => {
                            return Err(SqlError::unsupported(format!(
                                "cannot use \"{w}\" with HEADER in COPY TO"
                            )))
                        }
                        _ => return Err(bad()),
                    },
                    _ => return Err(bad()),
                };
                header = Some(choice);
            }
            "quote" => {
                if quote.is_some() {
                    return Err(redundant());
                }
                quote = Some(string_arg(name, arg)?);
            }
            "escape" => {
                if escape.is_some() {
                    return Err(redundant());
                }
                escape = Some(string_arg(name, arg)?);
            }
            "force_quote" => {
                if force_quote.is_some() {
                    return Err(redundant());
                }
                force_quote = Some(match arg {
                    OptArg::Star => ForceQuote::All,
                    _ => ForceQuote::Columns(column_list(name, arg)?),
                });
            }
            "force_not_null" => {
                if force_not_null.is_some() {
                    return Err(redundant());
                }
                force_not_null = Some(column_list(name, arg)?);
            }
            "force_null" => {
                if force_null.is_some() {
                    return Err(redundant());
                }
                force_null = Some(column_list(name, arg)?);
            }
            "encoding" => {
                if encoding.is_some() {
                    return Err(redundant());
                }
                let e = string_arg(name, arg)?;
                let clean: String = e
                    .chars()
                    .filter(|c| c.is_ascii_alphanumeric())
                    .map(|c| c.to_ascii_lowercase())
                    .collect();
                if !is_utf8_name(&e) && !KNOWN_ENCODINGS.contains(&clean.as_str()) {
                    return Err(SqlError::new(
                        "22023",
                        "argument to option \"encoding\" must be a valid encoding name",
                    ));
                }
                encoding = Some(e);
            }
            other => {
                return Err(SqlError::syntax(format!(
                    "option \"{other}\" not recognized"
                )))
            }
        }
    }
    let format = format.unwrap_or(CopyFormat::Text);
    let binary = format == CopyFormat::Binary;
    let csv = format == CopyFormat::Csv;
    if binary && delimiter.is_some() {
        return Err(SqlError::syntax("cannot specify DELIMITER in BINARY mode"));
    }
    if binary && null.is_some() {
        return Err(SqlError::syntax("cannot specify NULL in BINARY mode"));
    }
    let delimiter = delimiter.unwrap_or_else(|| if csv { "," } else { "\t" }.into());
    let null = null.unwrap_or_else(|| if csv { "" } else { "\\N" }.into());
    if delimiter.len() != 1 {
        return Err(SqlError::unsupported(
            "COPY delimiter must be a single one-byte character",
        ));
    }
    let delim = delimiter.as_bytes()[0];
    if delim == b'\r' || delim == b'\n' {
        return Err(SqlError::new(
            "22023",
            "COPY delimiter cannot be newline or carriage return",
        ));
    }
    if null.contains(['\r', '\n']) {
        return Err(SqlError::new(
            "22023",
            "COPY null representation cannot use newline or carriage return",
        ));
    }
    if !csv && b"\\.abcdefghijklmnopqrstuvwxyz0123456789".contains(&delim) {
        return Err(SqlError::new(
            "22023",
            format!("COPY delimiter cannot be \"{delimiter}\""),
        ));
    }
    if binary && header.is_some_and(|h| h != HeaderChoice::Absent) {
        return Err(SqlError::unsupported(
            "cannot specify HEADER in BINARY mode",
        ));
    }
    if !csv && quote.is_some() {
        return Err(SqlError::unsupported(
            "COPY quote available only in CSV mode",
        ));
    }
    let quote = quote.unwrap_or_else(|| "\"".into());
    if csv && quote.len() != 1 {
        return Err(SqlError::unsupported(
            "COPY quote must be a single one-byte character",
        ));
    }
    if csv && delim == quote.as_bytes()[0] {
        return Err(SqlError::new(
            "22023",
            "COPY delimiter and quote must be different",
        ));
    }
    if !csv && escape.is_some() {
        return Err(SqlError::unsupported(
            "COPY escape available only in CSV mode",
        ));
    }
    let escape = escape.unwrap_or_else(|| quote.clone());
    if csv && escape.len() != 1 {
        return Err(SqlError::unsupported(
            "COPY escape must be a single one-byte character",
        ));
    }
    if !csv && force_quote.is_some() {
        return Err(SqlError::unsupported(
            "COPY force quote available only in CSV mode",
        ));
    }
    if force_quote.is_some() && from {
        return Err(SqlError::unsupported(
            "COPY force quote only available using COPY TO",
        ));
    }
    if !csv && force_not_null.is_some() {
        return Err(SqlError::unsupported(
            "COPY force not null available only in CSV mode",
        ));
    }
    if force_not_null.is_some() && !from {
        return Err(SqlError::unsupported(
            "COPY force not null only available using COPY FROM",
        ));
    }
    if !csv && force_null.is_some() {
        return Err(SqlError::unsupported(
            "COPY force null available only in CSV mode",
        ));
    }
    if force_null.is_some() && !from {
        return Err(SqlError::unsupported(
            "COPY force null only available using COPY FROM",
        ));
    }
    if null.as_bytes().contains(&delim) {
        return Err(SqlError::unsupported(
            "COPY delimiter must not appear in the NULL specification",
        ));
    }
    if csv && null.as_bytes().contains(&quote.as_bytes()[0]) {
        return Err(SqlError::unsupported(
            "CSV quote character must not appear in the NULL specification",
        ));
    }
    if let Some(e) = encoding.filter(|e| !is_utf8_name(e)) {
        return Err(SqlError::unsupported(format!(
            "COPY with ENCODING '{e}' is not supported by walrus (only UTF8)"
        )));
    }
    Ok(CopyOptions {
        format,
        header: header.unwrap_or(HeaderChoice::Absent),
        delimiter: delim,
        null,
        quote: quote.as_bytes()[0],
        escape: escape.as_bytes()[0],
        force_quote: force_quote.unwrap_or(ForceQuote::None),
        force_not_null: force_not_null.unwrap_or_default(),
        force_null: force_null.unwrap_or_default(),
        freeze: freeze.unwrap_or(false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(sql: &str) -> (String, &'static str) {
        let e = parse(sql).unwrap_err();
        (e.message, e.sqlstate)
    }

    #[test]
    fn generic_and_old_option_syntax_agree() {
        let a = parse("COPY t (a, b) FROM STDIN WITH (FORMAT csv, HEADER, DELIMITER ';', NULL 'x', FORCE_NOT_NULL (a))").unwrap();
        let b = parse(
            "copy t(a,b) from stdin with delimiter as ';' null as 'x' csv header force not null a;",
        )
        .unwrap();
        assert_eq!(a, b);
        assert_eq!(a.options.format, CopyFormat::Csv);
        assert_eq!(a.options.header, HeaderChoice::Present);
        assert_eq!(a.options.delimiter, b';');
        assert_eq!(a.options.quote, b'"');
        assert_eq!(a.options.escape, b'"');
        assert_eq!(
            a.source,
            CopySource::Table {
                name: "t".into(),
                columns: vec!["a".into(), "b".into()]
            }
        );
        let t = parse("copy public.\"T\" to stdout").unwrap();
        assert!(!t.from);
        assert_eq!(t.options.delimiter, b'\t');
        assert_eq!(t.options.null, "\\N");
        let bin = parse("COPY BINARY t FROM STDIN").unwrap();
        assert_eq!(bin.options.format, CopyFormat::Binary);
        let q = parse("copy (select ')', (1)) to stdout with (format csv, force_quote *)").unwrap();
        assert_eq!(q.source, CopySource::Query("select ')', (1)".into()));
        assert_eq!(q.options.force_quote, ForceQuote::All);
        let e = parse(r"copy t from stdin (delimiter E'\t', null '')").unwrap();
        assert_eq!(e.options.delimiter, b'\t');
        assert!(parse("copy t from stdin using delimiters '|'").is_ok());
        assert!(parse("copy t from stdin (freeze on, encoding 'utf-8')").is_ok());
    }

    /// Messages and SQLSTATEs as PostgreSQL 15 gives them (checked with psql).
    #[test]
    fn refusals_match_postgresql() {
        for (sql, code, msg) in [
            (
                "copy t from stdin (format xml)",
                "22023",
                "COPY format \"xml\" not recognized",
            ),
            (
                "copy t from stdin (format csv, format text)",
                "42601",
                "conflicting or redundant options",
            ),
            (
                "copy t from stdin (delimiter ',,')",
                "0A000",
                "COPY delimiter must be a single one-byte character",
            ),
            (
                "copy t from stdin (delimiter 'a')",
                "22023",
                "COPY delimiter cannot be \"a\"",
            ),
            (
                "copy t from stdin (format binary, header)",
                "0A000",
                "cannot specify HEADER in BINARY mode",
            ),
            (
                "copy t from stdin (format binary, null 'x')",
                "42601",
                "cannot specify NULL in BINARY mode",
            ),
            (
                "copy t from stdin (quote '''')",
                "0A000",
                "COPY quote available only in CSV mode",
            ),
            (
                "copy t from stdin (format csv, quote ',')",
                "22023",
                "COPY delimiter and quote must be different",
            ),
            (
                "copy t from stdin (format csv, force_quote (a))",
                "0A000",
                "COPY force quote only available using COPY TO",
            ),
            (
                "copy t to stdout (format csv, force_not_null (a))",
                "0A000",
                "COPY force not null only available using COPY FROM",
            ),
            (
                "copy t from stdin (format csv, force_not_null a)",
                "22023",
                "argument to option \"force_not_null\" must be a list of column names",
            ),
            (
                "copy t from stdin (bogus 1)",
                "42601",
                "option \"bogus\" not recognized",
            ),
            (
                "copy t to stdout (header match)",
                "0A000",
                "cannot use \"match\" with HEADER in COPY TO",
            ),
            (
                "copy t from stdin (header maybe)",
                "42601",
                "header requires a Boolean value or \"match\"",
            ),
            (
                "copy t from stdin (format csv, null 'a,b')",
                "0A000",
                "COPY delimiter must not appear in the NULL specification",
            ),
            (
                "copy t from stdin (encoding 'nope')",
                "22023",
                "argument to option \"encoding\" must be a valid encoding name",
            ),
            (
                "copy t from stdin (format)",
                "42601",
                "format requires a parameter",
            ),
            (
                "copy (select 1) from stdin",
                "42601",
                "syntax error at or near \"from\"",
            ),
        ] {
            assert_eq!(err(sql), (msg.to_string(), code), "{sql}");
        }
        for sql in [
            "copy t from stdin (encoding 'latin1')",
            "copy t from stdin where a > 1",
            "copy t from '/tmp/x'",
            "copy t to program 'cat'",
        ] {
            assert_eq!(err(sql).1, "0A000", "{sql}");
        }
    }
}
