//! Statement execution for one session (see the crate docs).

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use sqlparser::ast::{
    self, AlterTableOperation, ColumnOption, Expr, ObjectType, SetExpr, Statement, TableConstraint,
    TableFactor,
};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;
use walrus_base::Tid;
use walrus_engine::access::datum::{Datum, TypeId};
use walrus_engine::catalog::{ColumnDef, TableDef};
use walrus_engine::engine::{CheckpointReason, Isolation, RowChange, Transaction};
use walrus_engine::Engine;

use crate::error::{SqlError, SqlResult};
use crate::expr::{coerce, eval, type_from_sql, Scope};
use crate::names::{ident, object_name};
use crate::plan::{choose_access, Access};
use crate::result::{Column, Outcome, QueryResult};
use crate::settings::{SettingsView, DATABASE_KEY};
use crate::utility::{self, Utility};
use crate::value::{parse_text, system_time_to_pg};

pub struct Session {
    engine: Engine,
    txn: Option<Transaction>,
    in_block: bool,
    failed: bool,
    block_isolation: Option<Isolation>,
    /// Shared with the statements running (an `Arc` clone each, not a map copy); `SET`
    /// copies on write.
    settings: Arc<BTreeMap<String, String>>,
    now: i64,
    interrupt: Arc<AtomicBool>,
    /// `statement_timeout` and `lock_timeout` in ms (0: off), kept parsed: read at every
    /// statement.
    statement_timeout_ms: u64,
    lock_timeout_ms: u64,
    idle_in_transaction_timeout_ms: u64,
    /// Settings changed inside the current transaction block, with their values from
    /// before it (see [`Session::restore_block_settings`]).
    block_undo: Vec<SettingUndo>,
    /// SQL-level prepared statements (PREPARE / EXECUTE / DEALLOCATE).
    prepared: BTreeMap<String, (Box<Statement>, Vec<TypeId>)>,
    /// Parsed extended-protocol statements by SQL text ([`Session::execute_cached`]).
    parse_cache: std::collections::HashMap<String, Arc<Vec<Parsed>>>,
}

/// A setting's value from before the current transaction block changed it.
struct SettingUndo {
    name: String,
    old: Option<String>,
    /// Changed only with SET LOCAL: restored at COMMIT too.
    local: bool,
}

/// Distinct SQL texts whose parse a session keeps (cleared when full).
const PARSE_CACHE_ENTRIES: usize = 256;

fn now_micros() -> i64 {
    system_time_to_pg(std::time::SystemTime::now())
}

fn first_words(sql: &str, n: usize) -> Vec<String> {
    sql.split(|c: char| c.is_whitespace() || c == ';')
        .filter(|w| !w.is_empty())
        .take(n)
        .map(|w| w.to_ascii_lowercase())
        .collect()
}

fn default_settings() -> BTreeMap<String, String> {
    [
        ("server_version", crate::SERVER_VERSION),
        ("server_version_num", "150018"),
        ("server_encoding", "UTF8"),
        ("client_encoding", "UTF8"),
        ("datestyle", "ISO, MDY"),
        ("timezone", "Etc/UTC"),
        ("integer_datetimes", "on"),
        ("standard_conforming_strings", "on"),
        ("transaction_isolation", "read committed"),
        ("default_transaction_isolation", "read committed"),
        ("max_identifier_length", "63"),
        ("search_path", "\"$user\", public"),
        ("statement_timeout", "0"),
        ("lock_timeout", "0"),
        ("idle_in_transaction_session_timeout", "0"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

impl Session {
    pub fn new(engine: Engine) -> Session {
        let mut settings = default_settings();
        let s = engine.settings();
        settings.insert(
            "shared_buffers".into(),
            format!("{}kB", s.shared_buffers_pages * 8),
        );
        settings.insert("wal_sync_method".into(), s.wal_sync_method.name().into());
        settings.insert(
            "full_page_writes".into(),
            if s.page_protection.name() == "fpw" {
                "on"
            } else {
                "off"
            }
            .into(),
        );
        settings.insert("page_protection".into(), s.page_protection.name().into());
        settings.insert(
            "synchronous_commit".into(),
            if s.synchronous_commit { "on" } else { "off" }.into(),
        );
        settings.insert(
            "checkpoint_timeout".into(),
            format!("{}s", s.checkpoint_timeout.as_secs()),
        );
        settings.insert(
            "max_wal_size".into(),
            format!("{}MB", s.max_wal_size_bytes >> 20),
        );
        settings.insert(
            "autovacuum".into(),
            if s.autovacuum { "on" } else { "off" }.into(),
        );
        settings.insert(
            "autovacuum_naptime".into(),
            format!("{}ms", s.autovacuum_naptime.as_millis()),
        );
        settings.insert(
            "autovacuum_vacuum_threshold".into(),
            s.autovacuum_vacuum_threshold.to_string(),
        );
        settings.insert(
            "autovacuum_vacuum_scale_factor".into(),
            s.autovacuum_vacuum_scale_factor.to_string(),
        );
        Session {
            engine,
            txn: None,
            in_block: false,
            failed: false,
            block_isolation: None,
            settings: Arc::new(settings),
            now: now_micros(),
            interrupt: Arc::new(AtomicBool::new(false)),
            statement_timeout_ms: 0,
            lock_timeout_ms: 0,
            idle_in_transaction_timeout_ms: 0,
            block_undo: Vec::new(),
            prepared: BTreeMap::new(),
            parse_cache: std::collections::HashMap::new(),
        }
    }

    /// PostgreSQL's `idle_in_transaction_session_timeout`: how long the connection may
    /// wait for the client's next command while a transaction is open (`None`: no
    /// limit). The server ends the session when it passes (FATAL 25P03), which rolls the
    /// transaction back and lets go of its locks and snapshot.
    pub fn idle_in_transaction_timeout(&self) -> Option<Duration> {
        (self.idle_in_transaction_timeout_ms > 0 && self.transaction_status() != b'I')
            .then(|| Duration::from_millis(self.idle_in_transaction_timeout_ms))
    }

    /// The cancel flag: set it from another thread to interrupt the running statement.
    pub fn interrupt_flag(&self) -> Arc<AtomicBool> {
        self.interrupt.clone()
    }

    /// PostgreSQL's ReadyForQuery status: `I` idle, `T` in a block, `E` failed block.
    pub fn transaction_status(&self) -> u8 {
        match (self.in_block, self.failed) {
            (false, _) => b'I',
            (true, false) => b'T',
            (true, true) => b'E',
        }
    }

    pub fn setting(&self, name: &str) -> Option<String> {
        self.settings_view().get(&name.to_ascii_lowercase())
    }

    /// Executes a query string (possibly several statements); one result per statement.
    /// Execution stops at the first error, as PostgreSQL's simple query protocol does.
    pub fn execute(&mut self, sql: &str, params: &[Datum]) -> Vec<SqlResult<Outcome>> {
        let stmts = match self.parse(sql) {
            Ok(s) => s,
            Err(e) => {
                self.fail_statement();
                return vec![Err(e)];
            }
        };
        self.run_all(&stmts, params)
    }

    /// Executes a statement of the extended protocol: like [`Session::execute`], but the
    /// parse of each distinct SQL text is kept (bounded), so a prepared statement is
    /// parsed once, not at every Execute. Binding still happens at each execution, so
    /// DDL between executions is seen.
    pub fn execute_cached(&mut self, sql: &str, params: &[Datum]) -> Vec<SqlResult<Outcome>> {
        let stmts = match self.parse_cache.get(sql) {
            Some(p) => p.clone(),
            None => match self.parse(sql) {
                Ok(p) => {
                    if self.parse_cache.len() >= PARSE_CACHE_ENTRIES {
                        self.parse_cache.clear();
                    }
                    let p = Arc::new(p);
                    self.parse_cache.insert(sql.to_string(), p.clone());
                    p
                }
                Err(e) => {
                    self.fail_statement();
                    return vec![Err(e)];
                }
            },
        };
        self.run_all(&stmts, params)
    }

    fn run_all(&mut self, stmts: &[Parsed], params: &[Datum]) -> Vec<SqlResult<Outcome>> {
        let mut out = Vec::with_capacity(stmts.len());
        for st in stmts {
            let r = self.run(st, params);
            let failed = r.is_err();
            out.push(r);
            if failed {
                break;
            }
        }
        out
    }

    /// Extended protocol Describe of a statement: the parameter types (inferred from
    /// where each `$n` is used: compared with or assigned to a column, a LIMIT, an
    /// INSERT target; text otherwise) and, for a SELECT, its result columns.
    pub fn describe(
        &mut self,
        sql: &str,
        declared: &[Option<TypeId>],
    ) -> SqlResult<(Vec<TypeId>, Option<Vec<Column>>)> {
        let parsed = self.parse(sql)?;
        let mut types: Vec<Option<TypeId>> = declared.to_vec();
        let mut columns = None;
        if let [Parsed::Sql(st)] = parsed.as_slice() {
            crate::plan::infer_params(st, &mut types, &mut |name| self.txn().table(name).ok());
            if let Statement::Query(q) = st.as_ref() {
                if !self.failed {
                    let n = types.len();
                    let nulls = vec![Datum::Null; n];
                    let r = self.select(q, &nulls);
                    if !self.in_block {
                        if let Some(t) = self.txn.take() {
                            let _ = t.rollback();
                        }
                    }
                    columns = Some(r?.columns);
                }
            }
        }
        Ok((
            types
                .into_iter()
                .map(|t| t.unwrap_or(TypeId::Text))
                .collect(),
            columns,
        ))
    }

    fn parse(&self, sql: &str) -> SqlResult<Vec<Parsed>> {
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

    fn fail_statement(&mut self) {
        if self.in_block {
            self.failed = true;
        } else if let Some(t) = self.txn.take() {
            let _ = t.rollback();
        }
    }

    fn run(&mut self, st: &Parsed, params: &[Datum]) -> SqlResult<Outcome> {
        if self.failed && !matches!(st, Parsed::Commit | Parsed::Rollback) {
            return Err(SqlError::new(
                "25P02",
                "current transaction is aborted, commands ignored until end of transaction block",
            ));
        }
        match st {
            Parsed::Begin(iso) => {
                if !self.in_block {
                    self.in_block = true;
                    self.block_isolation = *iso;
                    self.now = now_micros();
                }
                return Ok(Outcome::Done(QueryResult::tag("BEGIN")));
            }
            Parsed::Commit => {
                let tag = if self.failed { "ROLLBACK" } else { "COMMIT" };
                let r = self.end_block(!self.failed);
                return r.map(|_| Outcome::Done(QueryResult::tag(tag)));
            }
            Parsed::Rollback => {
                return self
                    .end_block(false)
                    .map(|_| Outcome::Done(QueryResult::tag("ROLLBACK")));
            }
            Parsed::Setting(s) => return self.setting_statement(s).map(Outcome::Done),
            _ => {}
        }
        if !self.in_block {
            self.now = now_micros();
        }
        let lock_timeout = self.lock_timeout();
        if let Some(t) = self.txn.as_mut() {
            t.set_lock_timeout(lock_timeout);
        }
        let timer = match self.statement_timeout_ms {
            0 => Ok(None),
            ms => crate::timeout::arm(Duration::from_millis(ms), self.interrupt.clone()).map(Some),
        };
        // A timer that cannot be armed fails the statement like any other error of it.
        let (timer, result) = match timer {
            Ok(timer) => (
                timer,
                match st {
                    Parsed::Utility(u) => self.utility(u.clone()),
                    Parsed::Sql(s) => self.statement(s, params),
                    _ => unreachable!("handled above"),
                },
            ),
            Err(e) => (None, Err(e)),
        };
        let result = match timer.map(crate::timeout::Armed::disarm) {
            // The timer set the interrupt flag: this statement's cancel, or a late one
            // that must not cancel the next statement.
            Some(true) => {
                self.interrupt
                    .store(false, std::sync::atomic::Ordering::Release);
                match result {
                    Err(e) if e.sqlstate == "57014" => Err(SqlError::new(
                        "57014",
                        "canceling statement due to statement timeout",
                    )),
                    r => r,
                }
            }
            _ => result,
        };
        match result {
            Ok(out) => {
                if !self.in_block && !matches!(out, Outcome::CopyIn { .. }) {
                    if let Some(t) = self.txn.take() {
                        t.commit()?;
                    }
                }
                Ok(out)
            }
            Err(e) => {
                self.fail_statement();
                Err(e)
            }
        }
    }

    fn end_block(&mut self, commit: bool) -> SqlResult<()> {
        self.restore_block_settings(commit);
        self.in_block = false;
        self.failed = false;
        self.block_isolation = None;
        match self.txn.take() {
            Some(t) if commit => t.commit().map_err(SqlError::from),
            Some(t) => t.rollback().map_err(SqlError::from),
            None => Ok(()),
        }
    }

    fn txn(&mut self) -> &mut Transaction {
        if self.txn.is_none() {
            let iso = self.block_isolation.unwrap_or_else(|| {
                match self
                    .settings
                    .get("default_transaction_isolation")
                    .map(String::as_str)
                {
                    Some("repeatable read") | Some("serializable") => Isolation::RepeatableRead,
                    _ => Isolation::ReadCommitted,
                }
            });
            let mut t = self.engine.begin(iso);
            t.set_interrupt(self.interrupt.clone());
            t.set_lock_timeout(self.lock_timeout());
            self.txn = Some(t);
        }
        let t = self.txn.as_mut().expect("just created");
        t
    }

    fn setting_statement(&mut self, s: &str) -> SqlResult<QueryResult> {
        let lower = s.to_ascii_lowercase();
        let words: Vec<&str> = lower.split_whitespace().collect();
        match words.first().copied() {
            Some("show") => {
                let name = words.get(1).copied().unwrap_or("").trim_matches('"');
                if name == "all" {
                    let rows = self
                        .settings_view()
                        .all()
                        .iter()
                        .map(|(k, v)| vec![Datum::Text(k.clone()), Datum::Text(v.clone())])
                        .collect();
                    return Ok(QueryResult {
                        tag: "SHOW".into(),
                        columns: vec![
                            Column {
                                name: "name".into(),
                                ty: TypeId::Text,
                            },
                            Column {
                                name: "setting".into(),
                                ty: TypeId::Text,
                            },
                        ],
                        rows,
                    });
                }
                let name = if name == "transaction" {
                    "transaction_isolation"
                } else {
                    name
                };
                let v = self
                    .setting(name)
                    .ok_or_else(|| crate::guc::unrecognized(name))?;
                Ok(QueryResult {
                    tag: "SHOW".into(),
                    columns: vec![Column {
                        name: name.into(),
                        ty: TypeId::Text,
                    }],
                    rows: vec![vec![Datum::Text(v)]],
                })
            }
            Some("reset") => {
                let name = words.get(1).copied().unwrap_or("");
                let defaults = default_settings();
                let names: Vec<String> = if name == "all" {
                    defaults.keys().cloned().collect()
                } else {
                    vec![name.to_string()]
                };
                for n in names {
                    if let Some(v) = defaults.get(&n) {
                        self.remember_for_block(&n, false);
                        self.put_setting(&n, Some(v.clone()));
                    } else if name != "all" {
                        // A parameter with no walrus default (application_name, ...):
                        // back to unset.
                        crate::guc::check_settable(&n)?;
                        if self.settings.contains_key(&n) {
                            self.remember_for_block(&n, false);
                            self.put_setting(&n, None);
                        }
                    }
                }
                Ok(QueryResult::tag("RESET"))
            }
            _ => {
                // SET [SESSION|LOCAL] name {=|TO} value | SET TRANSACTION ISOLATION LEVEL ...
                let mut rest: Vec<&str> = s.split_whitespace().skip(1).collect();
                let scope = rest.first().map(|w| w.to_ascii_lowercase());
                let local = scope.as_deref() == Some("local");
                if matches!(scope.as_deref(), Some("session") | Some("local")) {
                    rest.remove(0);
                }
                let text = rest.join(" ");
                if text.to_ascii_lowercase().starts_with("transaction")
                    || text
                        .to_ascii_lowercase()
                        .starts_with("session characteristics")
                {
                    if let Some(iso) = isolation_of(&text) {
                        self.block_isolation = Some(iso);
                    }
                    return Ok(QueryResult::tag("SET"));
                }
                // PostgreSQL's two special forms.
                let lower_text = text.to_ascii_lowercase();
                let text = if let Some(v) = lower_text.strip_prefix("time zone ") {
                    format!("timezone = {}", &text[text.len() - v.len()..])
                } else if let Some(v) = lower_text.strip_prefix("names ") {
                    format!("client_encoding = {}", &text[text.len() - v.len()..])
                } else {
                    text
                };
                let (name, value) = match text.split_once('=') {
                    Some((n, v)) => (n.trim().to_string(), v.trim().to_string()),
                    None => {
                        let mut it = text.splitn(3, ' ');
                        let n = it.next().unwrap_or("").to_string();
                        let to = it.next().unwrap_or("");
                        if !to.eq_ignore_ascii_case("to") {
                            return Err(SqlError::syntax(format!(
                                "syntax error at or near \"{to}\""
                            )));
                        }
                        (n, it.next().unwrap_or("").trim().to_string())
                    }
                };
                if name.is_empty() || value.is_empty() {
                    return Err(SqlError::syntax("syntax error at end of input"));
                }
                let mut value = value.trim_matches('\'').to_string();
                let name = name.trim_matches('"').to_ascii_lowercase();
                crate::guc::check_settable(&name)?;
                if local && !self.in_block {
                    // PostgreSQL warns and changes nothing: there is no transaction for
                    // the value to last until.
                    return Ok(QueryResult::tag("SET"));
                }
                if self.time_setting(&name).is_some() {
                    value = crate::timeout::show_ms(crate::timeout::parse_ms(&name, &value)?);
                }
                self.remember_for_block(&name, local);
                self.put_setting(&name, Some(value));
                Ok(QueryResult::tag("SET"))
            }
        }
    }

    /// Before a SET or RESET of `name` inside a transaction block: keeps its value from
    /// before the block (once per name) for the block's end.
    fn remember_for_block(&mut self, name: &str, local: bool) {
        if !self.in_block {
            return;
        }
        if let Some(u) = self.block_undo.iter_mut().find(|u| u.name == name) {
            u.local &= local;
            return;
        }
        let old = self.settings.get(name).cloned();
        self.block_undo.push(SettingUndo {
            name: name.to_string(),
            old,
            local,
        });
    }

    /// At the end of a transaction block, as PostgreSQL: a rollback undoes every SET and
    /// RESET made in it; a commit keeps them, except SET LOCAL, which lasts only until
    /// the block ends. (A `SET LOCAL statement_timeout` in one transaction must not
    /// cancel statements of the next.)
    fn restore_block_settings(&mut self, committed: bool) {
        for u in std::mem::take(&mut self.block_undo) {
            if !committed || u.local {
                self.put_setting(&u.name, u.old);
            }
        }
    }

    /// Sets a setting (`None`: removes it), keeping the parsed value of a time setting
    /// in step with its text. The text was validated when it was first set.
    fn put_setting(&mut self, name: &str, value: Option<String>) {
        if let Some(slot) = self.time_setting(name) {
            *slot = value
                .as_deref()
                .and_then(|v| crate::timeout::parse_ms(name, v).ok())
                .unwrap_or(0);
        }
        let map = Arc::make_mut(&mut self.settings);
        match value {
            Some(v) => map.insert(name.to_string(), v),
            None => map.remove(name),
        };
    }

    fn lock_timeout(&self) -> Option<Duration> {
        (self.lock_timeout_ms > 0).then(|| Duration::from_millis(self.lock_timeout_ms))
    }

    /// The parsed value behind a time setting the session enforces.
    fn time_setting(&mut self, name: &str) -> Option<&mut u64> {
        match name {
            "statement_timeout" => Some(&mut self.statement_timeout_ms),
            "lock_timeout" => Some(&mut self.lock_timeout_ms),
            "idle_in_transaction_session_timeout" => Some(&mut self.idle_in_transaction_timeout_ms),
            _ => None,
        }
    }

    fn utility(&mut self, u: Utility) -> SqlResult<Outcome> {
        match u {
            Utility::Checkpoint => {
                self.engine.checkpoint(CheckpointReason::Requested)?;
                Ok(Outcome::Done(QueryResult::tag("CHECKPOINT")))
            }
            Utility::Analyze => Ok(Outcome::Done(QueryResult::tag("ANALYZE"))),
            Utility::Vacuum { tables, freeze } => {
                if self.in_block {
                    return Err(SqlError::new(
                        "25001",
                        "VACUUM cannot run inside a transaction block",
                    ));
                }
                // A cancel request stops it between pages; what it finished stays done.
                let interrupt = Some(&*self.interrupt);
                match (tables.is_empty(), freeze) {
                    (true, false) => {
                        self.engine.vacuum_with(None, interrupt)?;
                    }
                    // Every table and the catalog: lets the next checkpoint truncate
                    // the commit-status log.
                    (true, true) => {
                        self.engine.vacuum_freeze(None, interrupt)?;
                    }
                    (false, _) => {
                        for t in tables {
                            if freeze {
                                self.engine.vacuum_freeze(Some(&t), interrupt)?;
                            } else {
                                self.engine.vacuum_with(Some(&t), interrupt)?;
                            }
                        }
                    }
                }
                Ok(Outcome::Done(QueryResult::tag("VACUUM")))
            }
            Utility::CopyFrom { table, columns } => {
                let def = self.txn().table(&table)?;
                for c in &columns {
                    if def.column_index(c).is_none() {
                        return Err(SqlError::new(
                            "42703",
                            format!("column \"{c}\" of relation \"{table}\" does not exist"),
                        ));
                    }
                }
                Ok(Outcome::CopyIn { table, columns })
            }
        }
    }

    /// Loads COPY text-format data into `table` in one call (the rows between CopyIn and
    /// CopyDone; a final `\.` line is accepted, as pgbench sends one).
    pub fn copy_in(
        &mut self,
        table: &str,
        columns: &[String],
        data: &str,
    ) -> SqlResult<QueryResult> {
        let n = self.copy_chunk(table, columns, data);
        self.copy_finish(n)
    }

    /// Loads complete lines of COPY data; call [`Session::copy_finish`] at CopyDone.
    pub fn copy_chunk(&mut self, table: &str, columns: &[String], data: &str) -> SqlResult<u64> {
        self.copy_rows(table, columns, data)
    }

    /// Ends a COPY: commits its implicit transaction (or marks the block failed) and
    /// returns the `COPY n` result.
    pub fn copy_finish(&mut self, loaded: SqlResult<u64>) -> SqlResult<QueryResult> {
        match loaded {
            Ok(n) => {
                if !self.in_block {
                    if let Some(t) = self.txn.take() {
                        t.commit()?;
                    }
                }
                Ok(QueryResult::tag(format!("COPY {n}")))
            }
            Err(e) => {
                self.fail_statement();
                Err(e)
            }
        }
    }

    fn copy_rows(&mut self, table: &str, columns: &[String], data: &str) -> SqlResult<u64> {
        let t = self.txn();
        let def = t.table(table)?;
        let targets: Vec<usize> = if columns.is_empty() {
            (0..def.columns.len()).collect()
        } else {
            columns
                .iter()
                .map(|c| def.column_index(c).unwrap_or(usize::MAX))
                .collect()
        };
        let mut n = 0u64;
        for (lineno, line) in data.split('\n').enumerate() {
            let line = line.strip_suffix('\r').unwrap_or(line);
            if line == "\\." {
                break;
            }
            if line.is_empty() {
                continue;
            }
            let fields = utility::copy_fields(line);
            if fields.len() != targets.len() {
                return Err(SqlError::new(
                    "22P04",
                    format!(
                        "{} data for column list on line {}",
                        if fields.len() < targets.len() {
                            "missing"
                        } else {
                            "extra"
                        },
                        lineno + 1
                    ),
                ));
            }
            let mut row = vec![Datum::Null; def.columns.len()];
            for (f, &ci) in fields.into_iter().zip(&targets) {
                if let Some(text) = f {
                    let col = &def.columns[ci];
                    row[ci] = parse_text(col.ty, &text).map_err(|e| {
                        SqlError::new(
                            e.sqlstate,
                            format!("{} (COPY {table}, line {})", e.message, lineno + 1),
                        )
                    })?;
                }
            }
            t.insert(&def, &row)?;
            n += 1;
        }
        Ok(n)
    }

    fn statement(&mut self, st: &Statement, params: &[Datum]) -> SqlResult<Outcome> {
        self.txn().next_statement();
        let r = match st {
            Statement::Prepare {
                name,
                data_types,
                statement,
            } => {
                let n = ident(name);
                if self.prepared.contains_key(&n) {
                    return Err(SqlError::new(
                        "42P05",
                        format!("prepared statement \"{n}\" already exists"),
                    ));
                }
                let types = data_types
                    .iter()
                    .map(type_from_sql)
                    .collect::<SqlResult<Vec<_>>>()?;
                self.prepared.insert(n, (statement.clone(), types));
                QueryResult::tag("PREPARE")
            }
            Statement::Execute {
                name: Some(name),
                parameters,
                ..
            } => {
                let n = object_name(name);
                let (stmt, types) = self.prepared.get(&n).cloned().ok_or_else(|| {
                    SqlError::new(
                        "26000",
                        format!("prepared statement \"{n}\" does not exist"),
                    )
                })?;
                let (now, settings) = (self.now, self.settings_view());
                let get = move |k: &str| settings.get(k);
                let intr = self.interrupt.clone();
                let scope = Scope {
                    columns: &[],
                    row: None,
                    params,
                    now,
                    setting: &get,
                    interrupt: Some(&intr),
                    frame: None,
                    hooks: None,
                };
                let mut args = Vec::with_capacity(parameters.len());
                for (i, e) in parameters.iter().enumerate() {
                    let v = eval(e, &scope)?;
                    args.push(match types.get(i) {
                        Some(t) => coerce(v, *t)?,
                        None => v,
                    });
                }
                return self.statement(&stmt, &args);
            }
            Statement::Deallocate { name, .. } => {
                let n = ident(name);
                if n == "all" {
                    self.prepared.clear();
                } else if self.prepared.remove(&n).is_none() {
                    return Err(SqlError::new(
                        "26000",
                        format!("prepared statement \"{n}\" does not exist"),
                    ));
                }
                QueryResult::tag("DEALLOCATE")
            }
            Statement::Query(q) => self.select(q, params)?,
            Statement::Insert(ins) => self.insert(ins, params)?,
            Statement::Update(u) => self.update(u, params)?,
            Statement::Delete(d) => self.delete(d, params)?,
            Statement::CreateTable(ct) => self.create_table(ct)?,
            Statement::CreateIndex(ci) => {
                let table = object_name(&ci.table_name);
                let name = ci
                    .name
                    .as_ref()
                    .map(object_name)
                    .unwrap_or_else(|| format!("{table}_idx"));
                let cols: Vec<String> = ci
                    .columns
                    .iter()
                    .map(|c| c.column.expr.to_string().to_ascii_lowercase())
                    .collect();
                self.create_index(&table, &name, &cols, ci.unique, false)?;
                QueryResult::tag("CREATE INDEX")
            }
            Statement::Drop {
                object_type: ObjectType::Table,
                if_exists,
                names,
                ..
            } => {
                for n in names {
                    let name = object_name(n);
                    match self.txn().drop_table(&name) {
                        Err(walrus_engine::Error::UndefinedTable(_)) if *if_exists => {}
                        other => other?,
                    }
                }
                QueryResult::tag("DROP TABLE")
            }
            Statement::Truncate(tr) => {
                for t in &tr.table_names {
                    let name = object_name(&t.name);
                    self.txn().truncate(&name)?;
                }
                QueryResult::tag("TRUNCATE TABLE")
            }
            Statement::AlterTable(at) => {
                let table = object_name(&at.name);
                for op in &at.operations {
                    match op {
                        AlterTableOperation::AddConstraint { constraint, .. } => {
                            self.add_constraint(&table, constraint)?
                        }
                        other => {
                            return Err(SqlError::unsupported(format!(
                                "ALTER TABLE {other} is not supported"
                            )))
                        }
                    }
                }
                QueryResult::tag("ALTER TABLE")
            }
            other => {
                let text = other.to_string();
                let word = text
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .to_ascii_uppercase();
                return Err(SqlError::unsupported(format!(
                    "{word} is not supported by walrus"
                )));
            }
        };
        Ok(Outcome::Done(r))
    }

    fn add_constraint(&mut self, table: &str, c: &TableConstraint) -> SqlResult<()> {
        match c {
            TableConstraint::PrimaryKey(pk) => {
                let cols: Vec<String> = pk
                    .columns
                    .iter()
                    .map(|c| c.column.expr.to_string().to_ascii_lowercase())
                    .collect();
                let name = pk
                    .name
                    .as_ref()
                    .map(ident)
                    .unwrap_or_else(|| format!("{table}_pkey"));
                self.create_index(table, &name, &cols, true, true)
            }
            TableConstraint::Unique(u) => {
                let cols: Vec<String> = u
                    .columns
                    .iter()
                    .map(|c| c.column.expr.to_string().to_ascii_lowercase())
                    .collect();
                let name = u
                    .name
                    .as_ref()
                    .map(ident)
                    .unwrap_or_else(|| format!("{table}_{}_key", cols.join("_")));
                self.create_index(table, &name, &cols, true, false)
            }
            other => Err(SqlError::unsupported(format!(
                "constraint {other} is not supported"
            ))),
        }
    }

    fn create_index(
        &mut self,
        table: &str,
        name: &str,
        cols: &[String],
        unique: bool,
        primary: bool,
    ) -> SqlResult<()> {
        let t = self.txn();
        let def = t.table(table)?;
        let mut positions = Vec::new();
        for c in cols {
            positions.push(
                def.column_index(c).ok_or_else(|| {
                    SqlError::new("42703", format!("column \"{c}\" does not exist"))
                })?,
            );
        }
        t.create_index(table, name, &positions, unique, primary)?;
        Ok(())
    }

    fn create_table(&mut self, ct: &ast::CreateTable) -> SqlResult<QueryResult> {
        let name = object_name(&ct.name);
        let mut columns = Vec::new();
        let mut pk: Option<Vec<String>> = None;
        for c in &ct.columns {
            let cname = ident(&c.name);
            let ty = type_from_sql(&c.data_type)?;
            let mut not_null = false;
            for o in &c.options {
                match &o.option {
                    ColumnOption::NotNull => not_null = true,
                    ColumnOption::Null => {}
                    ColumnOption::PrimaryKey(_) => {
                        not_null = true;
                        pk = Some(vec![cname.clone()]);
                    }
                    other => {
                        return Err(SqlError::unsupported(format!(
                            "column option {other} is not supported"
                        )))
                    }
                }
            }
            if columns.iter().any(|x: &ColumnDef| x.name == cname) {
                return Err(SqlError::new(
                    "42701",
                    format!("column \"{cname}\" specified more than once"),
                ));
            }
            columns.push(ColumnDef {
                name: cname,
                ty,
                not_null,
            });
        }
        let mut fillfactor = 100u8;
        let opts = ct.table_options.to_string().to_ascii_lowercase();
        if let Some(i) = opts.find("fillfactor") {
            let digits: String = opts[i..]
                .chars()
                .skip_while(|c| !c.is_ascii_digit())
                .take_while(|c| c.is_ascii_digit())
                .collect();
            let f: u32 = digits
                .parse()
                .map_err(|_| SqlError::syntax("invalid fillfactor"))?;
            if !(10..=100).contains(&f) {
                return Err(SqlError::new(
                    "22023",
                    format!("value {f} out of bounds for option \"fillfactor\""),
                ));
            }
            fillfactor = f as u8;
        }
        let t = self.txn();
        match t.create_table(&name, columns, fillfactor) {
            Err(walrus_engine::Error::DuplicateTable(_)) if ct.if_not_exists => {
                return Ok(QueryResult::tag("CREATE TABLE"))
            }
            other => {
                other?;
            }
        }
        for c in &ct.constraints {
            if let TableConstraint::PrimaryKey(p) = c {
                pk = Some(
                    p.columns
                        .iter()
                        .map(|c| c.column.expr.to_string().to_ascii_lowercase())
                        .collect(),
                );
            } else {
                self.add_constraint(&name, c)?;
            }
        }
        if let Some(cols) = pk {
            self.create_index(&name, &format!("{name}_pkey"), &cols, true, true)?;
        }
        Ok(QueryResult::tag("CREATE TABLE"))
    }

    fn insert(&mut self, ins: &ast::Insert, params: &[Datum]) -> SqlResult<QueryResult> {
        let table = match &ins.table {
            ast::TableObject::TableName(n) => object_name(n),
            other => {
                return Err(SqlError::unsupported(format!(
                    "INSERT into {other} is not supported"
                )))
            }
        };
        if ins.returning.is_some() {
            return Err(SqlError::unsupported(
                "INSERT ... RETURNING is not supported yet",
            ));
        }
        let def = self.txn().table(&table)?;
        let targets: Vec<usize> = if ins.columns.is_empty() {
            (0..def.columns.len()).collect()
        } else {
            ins.columns
                .iter()
                .map(|c| {
                    let n = object_name(c);
                    def.column_index(&n).ok_or_else(|| {
                        SqlError::new(
                            "42703",
                            format!("column \"{n}\" of relation \"{table}\" does not exist"),
                        )
                    })
                })
                .collect::<SqlResult<_>>()?
        };
        let source = ins
            .source
            .as_ref()
            .ok_or_else(|| SqlError::unsupported("INSERT without VALUES is not supported"))?;
        let values = match source.body.as_ref() {
            SetExpr::Values(v) => v,
            SetExpr::Select(_) => {
                // INSERT ... SELECT (pgbench -I G generates its data this way).
                let rows = self.select(source, params)?.rows;
                let mut n = 0u64;
                for r in rows {
                    if r.len() > targets.len() {
                        return Err(SqlError::syntax(
                            "INSERT has more expressions than target columns",
                        ));
                    }
                    let mut row = vec![Datum::Null; def.columns.len()];
                    for (v, &ci) in r.into_iter().zip(&targets) {
                        row[ci] = coerce(v, def.columns[ci].ty)?;
                    }
                    self.txn().insert(&def, &row)?;
                    n += 1;
                }
                return Ok(QueryResult::tag(format!("INSERT 0 {n}")));
            }
            _ => return Err(SqlError::unsupported("this INSERT source is not supported")),
        };
        let (now, settings) = (self.now, self.settings_view());
        let get = move |n: &str| settings.get(n);
        let intr = self.interrupt.clone();
        let mut n = 0;
        for row_exprs in &values.rows {
            if row_exprs.len() > targets.len() {
                return Err(SqlError::syntax(
                    "INSERT has more expressions than target columns",
                ));
            }
            let scope = Scope {
                columns: &[],
                row: None,
                params,
                now,
                setting: &get,
                interrupt: Some(&intr),
                frame: None,
                hooks: None,
            };
            let mut row = vec![Datum::Null; def.columns.len()];
            for (e, &ci) in row_exprs.iter().zip(&targets) {
                row[ci] = coerce(eval(e, &scope)?, def.columns[ci].ty)?;
            }
            self.txn().insert(&def, &row)?;
            n += 1;
        }
        Ok(QueryResult::tag(format!("INSERT 0 {n}")))
    }

    /// Rows of `def` matching `filter`, through a unique index when the filter pins all
    /// its columns with equalities to constants, else a sequential scan (see
    /// [`choose_access`]).
    pub(crate) fn matching_rows(
        &mut self,
        def: &TableDef,
        filter: Option<&Expr>,
        params: &[Datum],
    ) -> SqlResult<Vec<(Tid, Vec<Datum>)>> {
        let (now, settings) = (self.now, self.settings_view());
        let get = move |n: &str| settings.get(n);
        let access = choose_access(def, filter, params, now, &get);
        let t = self.txn();
        let candidates = match access {
            Access::Index { index, key } => {
                t.index_scan(def, index, Bound::Included(&key), Bound::Included(&key))?
            }
            Access::Scan => t.scan_all(def)?,
            Access::Nothing => return Ok(Vec::new()),
        };
        let mut out = Vec::with_capacity(candidates.len());
        for (tid, row) in candidates {
            if row_matches(filter, &def.columns, &row, params, now, &get)? {
                out.push((tid, row));
            }
        }
        Ok(out)
    }

    fn single_table(
        &mut self,
        from: &[ast::TableWithJoins],
    ) -> SqlResult<Option<std::sync::Arc<TableDef>>> {
        match from {
            [] => Ok(None),
            [t] if t.joins.is_empty() => match &t.relation {
                TableFactor::Table { name, .. } => {
                    let n = object_name(name);
                    Ok(Some(self.txn().table(&n)?))
                }
                other => Err(SqlError::unsupported(format!(
                    "FROM {other} is not supported yet"
                ))),
            },
            _ => Err(SqlError::unsupported("joins are not supported yet")),
        }
    }

    fn select(&mut self, q: &ast::Query, params: &[Datum]) -> SqlResult<QueryResult> {
        let rel = crate::query::Executor::new(self, params).run_query(q, None)?;
        Ok(QueryResult {
            tag: format!("SELECT {}", rel.rows.len()),
            columns: rel
                .cols
                .into_iter()
                .map(|c| Column {
                    name: c.name,
                    ty: c.ty.unwrap_or(TypeId::Text),
                })
                .collect(),
            rows: rel.rows,
        })
    }

    /// What expression evaluation needs from the session: statement time, settings and
    /// the cancel flag.
    pub(crate) fn eval_context(&self) -> (i64, SettingsView, Arc<AtomicBool>) {
        (self.now, self.settings_view(), self.interrupt.clone())
    }

    /// The settings as expressions read them (shares the map; no copy).
    pub(crate) fn settings_view(&self) -> SettingsView {
        SettingsView::new(self.settings.clone(), self.engine.clone())
    }

    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Records who connected to what (`current_user`, `current_database()`).
    pub fn set_identity(&mut self, user: &str, database: &str) {
        let settings = Arc::make_mut(&mut self.settings);
        settings.insert("session_authorization".into(), user.to_string());
        settings.insert(DATABASE_KEY.into(), database.to_string());
    }

    pub(crate) fn table_def(&mut self, name: &str) -> SqlResult<std::sync::Arc<TableDef>> {
        Ok(self.txn().table(name)?)
    }

    pub(crate) fn catalog_tables(&mut self) -> SqlResult<Vec<std::sync::Arc<TableDef>>> {
        Ok(self.txn().catalog()?.tables.values().cloned().collect())
    }

    /// Every row of `def` visible to the statement's snapshot.
    pub(crate) fn scan_rows(&mut self, def: &TableDef) -> SqlResult<Vec<Vec<Datum>>> {
        Ok(self
            .txn()
            .scan_all(def)?
            .into_iter()
            .map(|(_, r)| r)
            .collect())
    }

    fn update(&mut self, u: &ast::Update, params: &[Datum]) -> SqlResult<QueryResult> {
        let def = self
            .single_table(std::slice::from_ref(&u.table))?
            .ok_or_else(|| SqlError::syntax("UPDATE needs a table"))?;
        let mut sets: Vec<(usize, Expr)> = Vec::new();
        for a in &u.assignments {
            let name = match &a.target {
                ast::AssignmentTarget::ColumnName(n) => object_name(n),
                other => {
                    return Err(SqlError::unsupported(format!(
                        "assignment to {other} is not supported"
                    )))
                }
            };
            let i = def.column_index(&name).ok_or_else(|| {
                SqlError::new(
                    "42703",
                    format!(
                        "column \"{name}\" of relation \"{}\" does not exist",
                        def.name
                    ),
                )
            })?;
            sets.push((i, a.value.clone()));
        }
        let rows = self.matching_rows(&def, u.selection.as_ref(), params)?;
        let (now, settings) = (self.now, self.settings_view());
        let get = move |n: &str| settings.get(n);
        let intr = self.interrupt.clone();
        let n = self.change_rows(&def, u.selection.as_ref(), rows, params, |t, tid, old| {
            let scope = Scope {
                columns: &def.columns,
                row: Some(old),
                params,
                now,
                setting: &get,
                interrupt: Some(&intr),
                frame: None,
                hooks: None,
            };
            let mut new = old.to_vec();
            for (i, e) in &sets {
                new[*i] = coerce(eval(e, &scope)?, def.columns[*i].ty)?;
            }
            Ok(t.update(&def, tid, &new)?)
        })?;
        Ok(QueryResult::tag(format!("UPDATE {n}")))
    }

    /// Applies `op` (an update or delete) to each matching row. Under READ COMMITTED a
    /// row changed by a transaction that committed meanwhile is re-checked against the
    /// condition on its newest version and, if it still matches, changed there.
    fn change_rows(
        &mut self,
        def: &TableDef,
        filter: Option<&Expr>,
        rows: Vec<(Tid, Vec<Datum>)>,
        params: &[Datum],
        mut op: impl FnMut(&mut Transaction, Tid, &[Datum]) -> SqlResult<RowChange>,
    ) -> SqlResult<u64> {
        let (now, settings) = (self.now, self.settings_view());
        let get = move |n: &str| settings.get(n);
        let mut n = 0;
        for (mut tid, mut row) in rows {
            loop {
                match op(self.txn(), tid, &row)? {
                    RowChange::Done(_) => {
                        n += 1;
                        break;
                    }
                    RowChange::Changed(t2, v2) => {
                        if !row_matches(filter, &def.columns, &v2, params, now, &get)? {
                            break;
                        }
                        tid = t2;
                        row = v2;
                    }
                    RowChange::Gone | RowChange::SelfModified => break,
                }
            }
        }
        Ok(n)
    }

    fn delete(&mut self, d: &ast::Delete, params: &[Datum]) -> SqlResult<QueryResult> {
        let from = match &d.from {
            ast::FromTable::WithFromKeyword(f) | ast::FromTable::WithoutKeyword(f) => f.clone(),
        };
        let def = self
            .single_table(&from)?
            .ok_or_else(|| SqlError::syntax("DELETE needs a table"))?;
        let rows = self.matching_rows(&def, d.selection.as_ref(), params)?;
        let n = self.change_rows(&def, d.selection.as_ref(), rows, params, |t, tid, _| {
            Ok(t.delete(&def, tid)?)
        })?;
        Ok(QueryResult::tag(format!("DELETE {n}")))
    }
}

/// A statement after parsing: cached per SQL text for extended-protocol execution.
#[derive(Clone)]
enum Parsed {
    Begin(Option<Isolation>),
    Commit,
    Rollback,
    Setting(String),
    Utility(Utility),
    Sql(Box<Statement>),
}

fn isolation_of(sql: &str) -> Option<Isolation> {
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

fn row_matches(
    filter: Option<&Expr>,
    columns: &[ColumnDef],
    row: &[Datum],
    params: &[Datum],
    now: i64,
    get: &dyn Fn(&str) -> Option<String>,
) -> SqlResult<bool> {
    match filter {
        None => Ok(true),
        Some(f) => {
            let scope = Scope {
                columns,
                row: Some(row),
                params,
                now,
                setting: get,
                interrupt: None,
                frame: None,
                hooks: None,
            };
            Ok(matches!(eval(f, &scope)?, Datum::Bool(true)))
        }
    }
}
