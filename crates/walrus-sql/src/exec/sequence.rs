//! Sequences in SQL: CREATE / ALTER / DROP SEQUENCE with PostgreSQL's options, defaults
//! and checks; `serial` columns and identity columns (each makes a sequence OWNED BY
//! its column); and `nextval`, `currval`, `setval`, `lastval`,
//! `pg_get_serial_sequence`. The values themselves are the engine's
//! (`walrus-engine/src/access/sequence.rs`: logged ahead, never repeated after a crash,
//! never rolled back).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use sqlparser::ast::{self, DataType, SequenceOptions};
use walrus_base::RelFileId;
use walrus_engine::access::datum::{Datum, RegValue, TypeId};
use walrus_engine::catalog::{CatalogView, SequenceDef};
use walrus_engine::engine::Transaction;
use walrus_engine::Engine;

use crate::error::{SqlError, SqlResult};
use crate::names::object_name;
use crate::result::QueryResult;

/// What `currval` and `lastval` read: the values this session's `nextval` and `setval`
/// returned, by sequence.
#[derive(Debug, Default)]
pub(crate) struct SessionSequences {
    current: HashMap<RelFileId, i64>,
    last: Option<RelFileId>,
}

pub(crate) type SharedSessionSequences = Arc<Mutex<SessionSequences>>;

/// The session's state (a panic elsewhere while it was held leaves it usable).
fn state(s: &SharedSessionSequences) -> MutexGuard<'_, SessionSequences> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

/// The bounds of a sequence's data type.
fn type_bounds(ty: TypeId) -> (i64, i64) {
    match ty {
        TypeId::Int2 => (i16::MIN as i64, i16::MAX as i64),
        TypeId::Int4 => (i32::MIN as i64, i32::MAX as i64),
        _ => (i64::MIN, i64::MAX),
    }
}

fn type_name(ty: TypeId) -> &'static str {
    match ty {
        TypeId::Int2 => "smallint",
        TypeId::Int4 => "integer",
        _ => "bigint",
    }
}

/// `AS type` of a sequence: smallint, integer or bigint.
fn sequence_type(dt: &DataType) -> SqlResult<TypeId> {
    match crate::expr::column_type(dt) {
        Ok((ty @ (TypeId::Int2 | TypeId::Int4 | TypeId::Int8), -1, _)) => Ok(ty),
        _ => Err(SqlError::new(
            "22023",
            "sequence type must be smallint, integer, or bigint",
        )),
    }
}

fn option_value(e: &ast::Expr) -> SqlResult<i64> {
    let text = e.to_string().replace(' ', "");
    text.parse::<i64>()
        .map_err(|_| SqlError::syntax(format!("syntax error at or near \"{e}\"")))
}

/// The options a CREATE or ALTER says, before PostgreSQL's defaults fill the rest.
#[derive(Default)]
struct Said {
    data_type: Option<TypeId>,
    increment: Option<i64>,
    min: Option<Option<i64>>,
    max: Option<Option<i64>>,
    start: Option<i64>,
    cache: Option<i64>,
    cycle: Option<bool>,
    /// `OWNED BY t.c` (`Some(None)`: OWNED BY NONE).
    owned_by: Option<Option<(String, String)>>,
    restart: Option<Option<i64>>,
}

fn said(options: &[SequenceOptions], data_type: Option<&DataType>) -> SqlResult<Said> {
    let mut s = Said {
        data_type: data_type.map(sequence_type).transpose()?,
        ..Said::default()
    };
    let conflict = || SqlError::syntax("conflicting or redundant options");
    for o in options {
        match o {
            SequenceOptions::IncrementBy(e, _) if s.increment.is_none() => {
                s.increment = Some(option_value(e)?)
            }
            SequenceOptions::MinValue(v) if s.min.is_none() => {
                s.min = Some(v.as_ref().map(option_value).transpose()?)
            }
            SequenceOptions::MaxValue(v) if s.max.is_none() => {
                s.max = Some(v.as_ref().map(option_value).transpose()?)
            }
            SequenceOptions::StartWith(e, _) if s.start.is_none() => {
                s.start = Some(option_value(e)?)
            }
            SequenceOptions::Cache(e) if s.cache.is_none() => s.cache = Some(option_value(e)?),
            SequenceOptions::Cycle(no) if s.cycle.is_none() => s.cycle = Some(!no),
            _ => return Err(conflict()),
        }
    }
    Ok(s)
}

/// The sequence `said` describes, over `base` (ALTER) or PostgreSQL's defaults
/// (CREATE), checked as PostgreSQL checks it.
fn resolve(name: &str, s: &Said, base: Option<&SequenceDef>) -> SqlResult<SequenceDef> {
    let data_type = s
        .data_type
        .or(base.map(|b| b.data_type))
        .unwrap_or(TypeId::Int8);
    let (tmin, tmax) = type_bounds(data_type);
    let increment = s.increment.or(base.map(|b| b.increment)).unwrap_or(1);
    if increment == 0 {
        return Err(SqlError::new("22023", "INCREMENT must not be zero"));
    }
    // A bound not said keeps the old one unless the type or direction changed it
    // (PostgreSQL resets a default bound when AS changes it).
    let type_changed = base.is_some_and(|b| b.data_type != data_type);
    let min = match s.min {
        Some(Some(v)) => v,
        Some(None) => {
            if increment > 0 {
                1
            } else {
                tmin
            }
        }
        None => match base {
            Some(b) if !(type_changed && b.min == type_bounds(b.data_type).0) => b.min,
            _ => {
                if increment > 0 {
                    1
                } else {
                    tmin
                }
            }
        },
    };
    let max = match s.max {
        Some(Some(v)) => v,
        Some(None) => {
            if increment > 0 {
                tmax
            } else {
                -1
            }
        }
        None => match base {
            Some(b) if !(type_changed && b.max == type_bounds(b.data_type).1) => b.max,
            _ => {
                if increment > 0 {
                    tmax
                } else {
                    -1
                }
            }
        },
    };
    let tn = type_name(data_type);
    if max < tmin || max > tmax {
        return Err(SqlError::new(
            "22023",
            format!("MAXVALUE ({max}) is out of range for sequence data type {tn}"),
        ));
    }
    if min < tmin || min > tmax {
        return Err(SqlError::new(
            "22023",
            format!("MINVALUE ({min}) is out of range for sequence data type {tn}"),
        ));
    }
    if min >= max {
        return Err(SqlError::new(
            "22023",
            format!("MINVALUE ({min}) must be less than MAXVALUE ({max})"),
        ));
    }
    let start = s
        .start
        .or(base.map(|b| b.start))
        .unwrap_or(if increment > 0 { min } else { max });
    if start < min {
        return Err(SqlError::new(
            "22023",
            format!("START value ({start}) cannot be less than MINVALUE ({min})"),
        ));
    }
    if start > max {
        return Err(SqlError::new(
            "22023",
            format!("START value ({start}) cannot be greater than MAXVALUE ({max})"),
        ));
    }
    if let Some(Some(r)) = s.restart {
        if r < min || r > max {
            return Err(SqlError::new(
                "22023",
                format!(
                    "RESTART value ({r}) cannot be {} ({})",
                    if r < min {
                        "less than MINVALUE"
                    } else {
                        "greater than MAXVALUE"
                    },
                    if r < min { min } else { max }
                ),
            ));
        }
    }
    let cache = s.cache.or(base.map(|b| b.cache)).unwrap_or(1);
    if cache < 1 {
        return Err(SqlError::new(
            "22023",
            format!("CACHE ({cache}) must be greater than zero"),
        ));
    }
    if cache > 1 {
        // A per-session cache changes which values each session gets; not built.
        return Err(SqlError::unsupported(
            "sequence CACHE greater than 1 is not supported",
        ));
    }
    Ok(SequenceDef {
        name: name.to_string(),
        relfile: base.map(|b| b.relfile).unwrap_or(RelFileId(0)),
        data_type,
        start,
        increment,
        min,
        max,
        cache,
        cycle: s.cycle.or(base.map(|b| b.cycle)).unwrap_or(false),
        owned_by: match &s.owned_by {
            Some(o) => o.clone(),
            None => base.and_then(|b| b.owned_by.clone()),
        },
    })
}

/// The sequence a `serial` or identity column gets: `table_column_seq`, OWNED BY the
/// column, with the column's type and any options an identity column gave.
pub(crate) fn create_column_sequence(
    t: &mut Transaction,
    table: &str,
    column: &str,
    ty: TypeId,
    options: &[SequenceOptions],
) -> SqlResult<String> {
    let view = t.catalog()?;
    let mut name = format!("{table}_{column}_seq");
    // PostgreSQL picks the first free name: table_column_seq, then ..._seq1, ...
    let mut n = 0;
    while view.relation_exists(&name) {
        n += 1;
        name = format!("{table}_{column}_seq{n}");
    }
    let mut s = said(options, None)?;
    s.data_type = Some(ty);
    s.owned_by = Some(Some((table.to_string(), column.to_string())));
    let def = resolve(&name, &s, None)?;
    t.create_sequence(def)?;
    Ok(name)
}

/// `DROP SEQUENCE [IF EXISTS] names [CASCADE | RESTRICT]`: a sequence a column's
/// default uses cannot go (2BP01); CASCADE, which would drop the default, is refused.
pub(crate) fn drop_sequences(
    t: &mut Transaction,
    names: &[ast::ObjectName],
    if_exists: bool,
    cascade: bool,
) -> SqlResult<QueryResult> {
    if cascade {
        return Err(SqlError::unsupported(
            "DROP SEQUENCE ... CASCADE is not supported",
        ));
    }
    for n in names {
        let name = object_name(n);
        let view = t.catalog()?;
        if !view.sequences.contains_key(&name) {
            if if_exists {
                continue;
            }
            return Err(SqlError::new(
                "42P01",
                format!("sequence \"{name}\" does not exist"),
            ));
        }
        if let Some((table, column)) = users(&view, &name).into_iter().next() {
            return Err(SqlError::new(
                "2BP01",
                format!("cannot drop sequence {name} because other objects depend on it"),
            )
            .with_detail(format!(
                "default value for column {column} of table {table} depends on sequence {name}"
            ))
            .with_hint("Use DROP ... CASCADE to drop the dependent objects too."));
        }
        t.drop_sequence(&name)?;
    }
    Ok(QueryResult::tag("DROP SEQUENCE"))
}

/// The (table, column) pairs whose default or identity uses sequence `name`.
fn users(view: &CatalogView, name: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for t in view.tables.values() {
        for (i, c) in t.columns.iter().enumerate() {
            let uses = match t.default_of(i) {
                Some(walrus_engine::catalog::ColumnDefault::Identity { sequence, .. }) => {
                    sequence == name
                }
                Some(walrus_engine::catalog::ColumnDefault::Expr(e)) => {
                    default_uses_sequence(e, name)
                }
                None => false,
            };
            if uses {
                out.push((t.name.clone(), c.name.clone()));
            }
        }
    }
    out
}

/// Whether default text `text` calls a sequence function on sequence `name` (PostgreSQL
/// records that dependency when the argument is a constant: `nextval('s'::regclass)`).
fn default_uses_sequence(text: &str, name: &str) -> bool {
    use std::ops::ControlFlow;
    let Ok(e) = crate::stored_expr::parse(text) else {
        return false;
    };
    let names_it = |arg: &ast::Expr| {
        let lit = match arg {
            ast::Expr::Cast { expr, .. } => expr.as_ref(),
            other => other,
        };
        match lit {
            ast::Expr::Value(v) => match &v.value {
                ast::Value::SingleQuotedString(s) => crate::catalog_views::qualified_name(s)
                    .is_ok_and(|parts| match parts.as_slice() {
                        [n] => n == name,
                        [schema, n] => schema == "public" && n == name,
                        _ => false,
                    }),
                _ => false,
            },
            _ => false,
        }
    };
    ast::visit_expressions(&*e, |x| {
        if let ast::Expr::Function(f) = x {
            let fname = f.name.to_string().to_ascii_lowercase();
            let fname = fname.strip_prefix("pg_catalog.").unwrap_or(&fname);
            if let ("nextval" | "currval" | "setval", ast::FunctionArguments::List(list)) =
                (fname, &f.args)
            {
                if let Some(ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(a))) =
                    list.args.first()
                {
                    if names_it(a) {
                        return ControlFlow::Break(());
                    }
                }
            }
        }
        ControlFlow::Continue(())
    })
    .is_break()
}

/// `CREATE [TEMP] SEQUENCE [IF NOT EXISTS] name options` and `ALTER SEQUENCE [IF
/// EXISTS] name options`, read from their tokens (PostgreSQL takes the options in any
/// order; sqlparser only in one, and has no ALTER SEQUENCE).
pub(crate) fn sequence_statement(t: &mut Transaction, sql: &str) -> SqlResult<QueryResult> {
    let mut w = Words::new(words(sql)?);
    let create = w.next_is("create");
    if !create && !w.next_is("alter") {
        return Err(SqlError::syntax("syntax error"));
    }
    if create && (w.next_is("temp") || w.next_is("temporary")) {
        return Err(SqlError::unsupported(
            "temporary sequences are not supported",
        ));
    }
    if create && w.next_is("unlogged") {
        return Err(SqlError::unsupported(
            "unlogged sequences are not supported",
        ));
    }
    w.expect("sequence")?;
    let if_clause = if create {
        w.next_is("if") && {
            w.expect("not")?;
            w.expect("exists")?;
            true
        }
    } else {
        w.next_is("if") && {
            w.expect("exists")?;
            true
        }
    };
    let name = w.name()?;
    let mut s = Said::default();
    let conflict = || SqlError::syntax("conflicting or redundant options");
    while let Some(word) = w.peek_lower() {
        w.advance();
        match word.as_str() {
            "as" => {
                if s.data_type.is_some() {
                    return Err(conflict());
                }
                let mut ty = w.word()?;
                // Two-word spellings are not sequence types; one word is enough.
                if ty.eq_ignore_ascii_case("double") {
                    ty.push_str(" precision");
                    w.advance();
                }
                let dt = sqlparser::parser::Parser::new(&sqlparser::dialect::PostgreSqlDialect {})
                    .try_with_sql(&ty)
                    .and_then(|mut p| p.parse_data_type())
                    .map_err(|_| SqlError::new("42704", format!("type \"{ty}\" does not exist")))?;
                s.data_type = Some(sequence_type(&dt)?);
            }
            "increment" => {
                w.next_is("by");
                set_once(&mut s.increment, w.number()?, conflict)?;
            }
            "minvalue" => set_once(&mut s.min, Some(w.number()?), conflict)?,
            "maxvalue" => set_once(&mut s.max, Some(w.number()?), conflict)?,
            "no" => match w.word()?.to_ascii_lowercase().as_str() {
                "minvalue" => set_once(&mut s.min, None, conflict)?,
                "maxvalue" => set_once(&mut s.max, None, conflict)?,
                "cycle" => set_once(&mut s.cycle, false, conflict)?,
                other => {
                    return Err(SqlError::syntax(format!(
                        "syntax error at or near \"{other}\""
                    )))
                }
            },
            "start" => {
                w.next_is("with");
                set_once(&mut s.start, w.number()?, conflict)?;
            }
            "restart" if !create => {
                let with = w.next_is("with");
                let value = if with || w.peek_is_number() {
                    Some(w.number()?)
                } else {
                    None
                };
                set_once(&mut s.restart, value, conflict)?;
            }
            "cache" => set_once(&mut s.cache, w.number()?, conflict)?,
            "cycle" => set_once(&mut s.cycle, true, conflict)?,
            "owned" => {
                w.expect("by")?;
                let target = w.name_parts()?;
                let owned = if target.len() == 1 && target[0] == "none" {
                    None
                } else {
                    let (table, column) = match target.as_slice() {
                        [tb, c] | [_, tb, c] => (tb.clone(), c.clone()),
                        _ => return Err(SqlError::new("42601", "invalid OWNED BY option")),
                    };
                    let def = t.table(&table)?;
                    if def.column_index(&column).is_none() {
                        return Err(SqlError::new(
                            "42703",
                            format!("column \"{column}\" of relation \"{table}\" does not exist"),
                        ));
                    }
                    Some((table, column))
                };
                set_once(&mut s.owned_by, owned, conflict)?;
            }
            other => {
                return Err(SqlError::syntax(format!(
                    "syntax error at or near \"{other}\""
                )))
            }
        }
    }
    if create {
        let def = resolve(&name, &s, None)?;
        match t.create_sequence(def) {
            Err(walrus_engine::Error::DuplicateTable(_)) if if_clause => {}
            other => {
                other?;
            }
        }
        return Ok(QueryResult::tag("CREATE SEQUENCE"));
    }
    let base = match t.catalog()?.sequences.get(&name) {
        Some(b) => b.clone(),
        None if if_clause => return Ok(QueryResult::tag("ALTER SEQUENCE")),
        None => {
            return Err(SqlError::new(
                "42P01",
                format!("relation \"{name}\" does not exist"),
            ))
        }
    };
    let new = resolve(&name, &s, Some(&base))?;
    let restart_at = s.restart.map(|r| r.unwrap_or(new.start));
    t.alter_sequence(&name, new, restart_at)?;
    Ok(QueryResult::tag("ALTER SEQUENCE"))
}

fn set_once<T>(slot: &mut Option<T>, v: T, conflict: impl Fn() -> SqlError) -> SqlResult<()> {
    if slot.is_some() {
        return Err(conflict());
    }
    *slot = Some(v);
    Ok(())
}

/// A cursor over a statement's tokens.
struct Words {
    tokens: Vec<String>,
    at: usize,
}

impl Words {
    fn new(tokens: Vec<String>) -> Words {
        Words { tokens, at: 0 }
    }
    fn peek_lower(&self) -> Option<String> {
        self.tokens.get(self.at).map(|t| t.to_ascii_lowercase())
    }
    fn advance(&mut self) {
        self.at += 1;
    }
    fn next_is(&mut self, kw: &str) -> bool {
        let is = self.peek_lower().as_deref() == Some(kw);
        if is {
            self.at += 1;
        }
        is
    }
    fn expect(&mut self, kw: &str) -> SqlResult<()> {
        if self.next_is(kw) {
            return Ok(());
        }
        Err(match self.tokens.get(self.at) {
            Some(t) => SqlError::syntax(format!("syntax error at or near \"{t}\"")),
            None => SqlError::syntax("syntax error at end of input"),
        })
    }
    fn word(&mut self) -> SqlResult<String> {
        let t = self
            .tokens
            .get(self.at)
            .cloned()
            .ok_or_else(|| SqlError::syntax("syntax error at end of input"))?;
        self.at += 1;
        Ok(t)
    }
    fn peek_is_number(&self) -> bool {
        self.tokens
            .get(self.at)
            .is_some_and(|t| t == "-" || t == "+" || t.parse::<i64>().is_ok())
    }
    fn number(&mut self) -> SqlResult<i64> {
        let mut t = self.word()?;
        let neg = t == "-";
        if neg || t == "+" {
            t = self.word()?;
        }
        let text = if neg { format!("-{t}") } else { t.clone() };
        text.parse::<i64>().map_err(|_| {
            if t.bytes().all(|b| b.is_ascii_digit()) {
                SqlError::new(
                    "22003",
                    format!("value \"{text}\" is out of range for type bigint"),
                )
            } else {
                SqlError::syntax(format!("syntax error at or near \"{t}\""))
            }
        })
    }
    /// A possibly qualified name's parts, folded as identifiers are.
    fn name_parts(&mut self) -> SqlResult<Vec<String>> {
        let mut parts = vec![fold(&self.word()?)];
        while self.tokens.get(self.at).map(String::as_str) == Some(".") {
            self.at += 1;
            parts.push(fold(&self.word()?));
        }
        Ok(parts)
    }
    /// A relation name: `name` or `public.name`.
    fn name(&mut self) -> SqlResult<String> {
        let parts = self.name_parts()?;
        match parts.as_slice() {
            [n] => Ok(n.clone()),
            [s, n] if s == "public" => Ok(n.clone()),
            [s, _] => Err(SqlError::new(
                "3F000",
                format!("schema \"{s}\" does not exist"),
            )),
            _ => Err(SqlError::new(
                "42601",
                "improper qualified name (too many dotted names)",
            )),
        }
    }
}

/// An identifier token as a name: a quoted one as written, else lower-cased.
fn fold(t: &str) -> String {
    match t.strip_prefix('"').and_then(|x| x.strip_suffix('"')) {
        Some(q) => q.replace("\"\"", "\""),
        None => t.to_ascii_lowercase(),
    }
}

/// The statement's tokens as text, whitespace and comments dropped.
fn words(sql: &str) -> SqlResult<Vec<String>> {
    use sqlparser::tokenizer::{Token, Tokenizer};
    let dialect = sqlparser::dialect::PostgreSqlDialect {};
    let tokens = Tokenizer::new(&dialect, sql)
        .tokenize()
        .map_err(|e| SqlError::syntax(e.to_string()))?;
    Ok(tokens
        .into_iter()
        .filter(|t| !matches!(t, Token::Whitespace(_) | Token::SemiColon | Token::EOF))
        .map(|t| t.to_string())
        .collect())
}

/// What the sequence functions need from the statement: the engine, the catalog the
/// transaction sees, and the session's `currval` state.
pub(crate) struct SequenceContext<'a> {
    pub engine: &'a Engine,
    pub catalog: &'a CatalogView,
    pub session: &'a SharedSessionSequences,
}

/// Whether `name` is one of the functions [`function`] answers.
pub(crate) fn is_sequence_function(name: &str) -> bool {
    matches!(
        name,
        "nextval" | "currval" | "setval" | "lastval" | "pg_get_serial_sequence"
    )
}

/// The sequence a function argument names: text (`'name'`, `'schema.name'`, quoted
/// parts as identifiers) or a regclass value.
fn sequence_arg(cx: &SequenceContext<'_>, arg: &Datum) -> SqlResult<Arc<SequenceDef>> {
    let missing = |n: &str| SqlError::new("42P01", format!("relation \"{n}\" does not exist"));
    match arg {
        Datum::Reg(r) => {
            if let Some(q) = cx.catalog.sequences.values().find(|q| q.relfile.0 == r.oid) {
                return Ok(q.clone());
            }
            Err(not_a_sequence(&r.name))
        }
        Datum::Text(t) => {
            let parts = crate::catalog_views::qualified_name(t)?;
            let name = match parts.as_slice() {
                [n] => n.clone(),
                [s, n] if s == "public" => n.clone(),
                _ => return Err(missing(t)),
            };
            match cx.catalog.sequences.get(&name) {
                Some(q) => Ok(q.clone()),
                None if cx.catalog.relation_exists(&name) => Err(not_a_sequence(&name)),
                None => Err(missing(&name)),
            }
        }
        Datum::Int4(_) | Datum::Int8(_) => {
            let oid = match arg {
                Datum::Int4(v) => *v as i64,
                Datum::Int8(v) => *v,
                _ => unreachable!(),
            };
            cx.catalog
                .sequences
                .values()
                .find(|q| q.relfile.0 as i64 == oid)
                .cloned()
                .ok_or_else(|| {
                    SqlError::new("42P01", format!("could not open relation with OID {oid}"))
                })
        }
        other => Err(SqlError::new(
            "42883",
            format!(
                "function nextval({}) does not exist",
                crate::expr::ops_type_name(other)
            ),
        )),
    }
}

fn not_a_sequence(name: &str) -> SqlError {
    SqlError::new("42809", format!("\"{name}\" is not a sequence"))
}

fn int_arg(d: &Datum, f: &str) -> SqlResult<i64> {
    match d {
        Datum::Int2(v) => Ok(*v as i64),
        Datum::Int4(v) => Ok(*v as i64),
        Datum::Int8(v) => Ok(*v),
        Datum::Text(t) => t.trim().parse().map_err(|_| {
            SqlError::new(
                "22P02",
                format!("invalid input syntax for type bigint: \"{t}\""),
            )
        }),
        Datum::Numeric(n) => n
            .parse()
            .map_err(|_| SqlError::new("22003", "bigint out of range")),
        other => Err(SqlError::new(
            "42883",
            format!(
                "function {f}(regclass, {}) does not exist",
                crate::expr::ops_type_name(other)
            ),
        )),
    }
}

/// `nextval`, `currval`, `setval`, `lastval` and `pg_get_serial_sequence`; `None` for
/// any other function. A NULL argument gives NULL (they are strict).
pub(crate) fn function(
    cx: &SequenceContext<'_>,
    name: &str,
    args: &[Datum],
) -> Option<SqlResult<Datum>> {
    if !is_sequence_function(name) {
        return None;
    }
    Some(call(cx, name, args))
}

fn call(cx: &SequenceContext<'_>, name: &str, args: &[Datum]) -> SqlResult<Datum> {
    let arity_ok = match name {
        "lastval" => args.is_empty(),
        "setval" => args.len() == 2 || args.len() == 3,
        "pg_get_serial_sequence" => args.len() == 2,
        _ => args.len() == 1,
    };
    if !arity_ok {
        let types: Vec<&str> = args.iter().map(crate::expr::ops_type_name).collect();
        return Err(SqlError::new(
            "42883",
            format!("function {name}({}) does not exist", types.join(", ")),
        ));
    }
    if args.iter().any(Datum::is_null) {
        return Ok(Datum::Null);
    }
    match name {
        "nextval" => {
            let q = sequence_arg(cx, &args[0])?;
            let v = cx.engine.nextval(&q)?;
            let mut s = state(cx.session);
            s.current.insert(q.relfile, v);
            s.last = Some(q.relfile);
            Ok(Datum::Int8(v))
        }
        "currval" => {
            let q = sequence_arg(cx, &args[0])?;
            state(cx.session)
                .current
                .get(&q.relfile)
                .map(|v| Datum::Int8(*v))
                .ok_or_else(|| {
                    SqlError::new(
                        "55000",
                        format!(
                            "currval of sequence \"{}\" is not yet defined in this session",
                            q.name
                        ),
                    )
                })
        }
        "lastval" => {
            let s = state(cx.session);
            let Some(r) = s.last else {
                return Err(SqlError::new(
                    "55000",
                    "lastval is not yet defined in this session",
                ));
            };
            if !cx.catalog.sequences.values().any(|q| q.relfile == r) {
                return Err(SqlError::new(
                    "55000",
                    "lastval is not yet defined in this session",
                ));
            }
            s.current
                .get(&r)
                .map(|v| Datum::Int8(*v))
                .ok_or_else(|| SqlError::new("55000", "lastval is not yet defined in this session"))
        }
        "setval" => {
            let q = sequence_arg(cx, &args[0])?;
            let v = int_arg(&args[1], "setval")?;
            let called = match args.get(2) {
                None => true,
                Some(Datum::Bool(b)) => *b,
                Some(Datum::Text(t)) => matches!(
                    crate::value::parse_text(TypeId::Bool, t)?,
                    Datum::Bool(true)
                ),
                Some(other) => {
                    return Err(SqlError::new(
                        "42883",
                        format!(
                            "function setval(regclass, bigint, {}) does not exist",
                            crate::expr::ops_type_name(other)
                        ),
                    ))
                }
            };
            cx.engine.setval(&q, v, called)?;
            if called {
                let mut s = state(cx.session);
                s.current.insert(q.relfile, v);
                s.last = Some(q.relfile);
            }
            Ok(Datum::Int8(v))
        }
        "pg_get_serial_sequence" => {
            let (Datum::Text(table), Datum::Text(column)) = (&args[0], &args[1]) else {
                return Err(SqlError::new(
                    "42883",
                    "function pg_get_serial_sequence needs text arguments",
                ));
            };
            let parts = crate::catalog_views::qualified_name(table)?;
            let table = parts.last().cloned().unwrap_or_default();
            let def = cx.catalog.table(&table).map_err(|_| {
                SqlError::new("42P01", format!("relation \"{table}\" does not exist"))
            })?;
            // The column name is taken as is (PostgreSQL does not fold it either).
            if def.column_index(column).is_none() {
                return Err(SqlError::new(
                    "42703",
                    format!("column \"{column}\" of relation \"{table}\" does not exist"),
                ));
            }
            let owned = cx.catalog.sequences.values().find(|q| {
                q.owned_by
                    .as_ref()
                    .is_some_and(|(t, c)| *t == table && c == column)
            });
            Ok(match owned {
                Some(q) => Datum::Text(format!("public.{}", crate::names::quote_ident(&q.name))),
                None => Datum::Null,
            })
        }
        _ => unreachable!("not a sequence function: {name}"),
    }
}

/// `'name'::regclass` where no catalog snapshot is at hand (a column default evaluated
/// by INSERT): tables and sequences.
pub(crate) fn regclass(catalog: &CatalogView, text: &str) -> SqlResult<Datum> {
    let parts = crate::catalog_views::qualified_name(text)?;
    let name = match parts.as_slice() {
        [n] => n.clone(),
        [s, n] if s == "public" => n.clone(),
        _ => {
            return Err(SqlError::new(
                "42P01",
                format!("relation \"{text}\" does not exist"),
            ))
        }
    };
    let oid = catalog
        .sequences
        .get(&name)
        .map(|q| q.relfile.0)
        .or_else(|| catalog.tables.get(&name).map(|t| t.relfile.0))
        .ok_or_else(|| SqlError::new("42P01", format!("relation \"{name}\" does not exist")))?;
    Ok(Datum::Reg(Box::new(RegValue {
        ty: TypeId::RegClass,
        oid,
        name: crate::names::quote_ident(&name),
    })))
}
