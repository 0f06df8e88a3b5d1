//! The session: one connection's statement dispatch, transaction state and settings.
//!
//! A [`Session`] owns the connection's transaction (implicit per statement, or an
//! explicit block), the aborted-block state (every statement fails with 25P02 until
//! ROLLBACK, as in PostgreSQL), session settings (`settings.rs`), SQL-level prepared
//! statements and the extended protocol's plan cache (`plan_cache.rs`). It parses
//! (`parse.rs`), arms the statement timeout, and hands each statement to the executor
//! (`crate::exec`) through the [`Env`] it implements; it never evaluates rows itself,
//! except a cached point lookup's one index probe (`plan_cache.rs`).

mod explain;
mod parse;
mod parse_check;
mod plan_cache;
mod recursive;
mod settings;

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use sqlparser::ast::{ObjectType, Statement};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;
use walrus_engine::access::datum::{Datum, TypeId};
use walrus_engine::engine::{
    BackendHandle, BackendState, CheckpointReason, Isolation, Transaction,
};
use walrus_engine::settings::format_size;
use walrus_engine::Engine;

use self::parse::{parse, Parsed};
use self::plan_cache::{lookup_shape, LookupState, PlanCache, PlanKey, PointLookup};
use self::settings::{default_settings, SettingUndo};
use crate::error::{SqlError, SqlResult};
use crate::exec::{self, copy, ddl, dml, Env};
use crate::expr::{coerce, eval, type_from_sql, Scope};
use crate::memory::{self, MemoryBudget};
use crate::names::{ident, object_name};
use crate::plan;
use crate::result::{Column, Outcome, QueryResult, RowSink};
use crate::result::{CopyIn, CopyOut};
use crate::settings::{SettingsView, DATABASE_KEY};
use crate::utility::{CopySource, CopyStatement, Utility};
use crate::value::system_time_to_pg;

pub struct Session {
    engine: Engine,
    /// This session's entry among the engine's backends (`pg_stat_activity`, its pid).
    backend: BackendHandle,
    txn: Option<Transaction>,
    in_block: bool,
    failed: bool,
    block_isolation: Option<Isolation>,
    /// The block was started READ ONLY: statements that write fail with 25006.
    block_read_only: bool,
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
    /// Open savepoints, outermost first: their names and the settings as they were
    /// when each was set (a ROLLBACK TO restores them, as PostgreSQL's subtransaction
    /// abort does). Entry `i` is the engine transaction's savepoint level `i`.
    savepoints: Vec<SavepointState>,
    /// The block is the implicit one around a multi-statement query string: no
    /// savepoints in it (PostgreSQL's 25P01).
    implicit_block: bool,
    /// Deferred foreign-key checks and `SET CONSTRAINTS` modes of the transaction.
    deferred: crate::exec::constraints::Deferred,
    /// SQL-level prepared statements (PREPARE / EXECUTE / DEALLOCATE).
    prepared: BTreeMap<String, (Box<Statement>, Vec<TypeId>)>,
    /// Statements prepared through the extended protocol, by name: their SQL, for
    /// `EXPLAIN ... EXECUTE name` (explain.rs).
    protocol_statements: std::collections::HashMap<String, String>,
    /// Plans of extended-protocol statements by SQL text ([`Session::execute_cached`]).
    plan_cache: PlanCache,
    /// `currval` / `lastval` state (shared with the statements running).
    sequences: crate::exec::sequence::SharedSessionSequences,
    /// `set_config()` calls of the running statement (applied when it ends).
    pending_settings: crate::settings::PendingSettings,
    /// Counts this session's DDL statements and its rollbacks of transactions that
    /// ran DDL: with the engine's committed catalog version, what a cached plan is
    /// valid for ([`PlanKey`]).
    own_ddl: u64,
    /// The running statement's budget for materialised rows (`statement_memory_limit`),
    /// reset at each statement's start.
    memory: Arc<MemoryBudget>,
    /// A `statement_memory_limit` in walrus.toml that is not a valid size: every
    /// statement fails with it (the server refuses to start with one; this is for
    /// sessions opened on an engine directly).
    memory_setting_error: Option<SqlError>,
    /// The `TimeZone` setting, parsed; installed for value I/O (crate::timezone) when it
    /// changes and when the session starts work.
    time_zone: crate::timezone::SessionZone,
    /// `max_stack_depth` in kB (kept in step with the setting by `put_setting`).
    max_stack_depth_kb: u64,
    /// Set by [`Session::execute_streaming`] for its lone SELECT: where the rows go.
    row_sink: Option<Box<dyn RowSink + Send>>,
}

/// A savepoint of the session's block ([`Session::savepoints`]).
struct SavepointState {
    name: String,
    settings: Arc<BTreeMap<String, String>>,
    block_undo: Vec<SettingUndo>,
    /// Deferred foreign-key checks queued before it.
    deferred_len: usize,
}

/// What a describe computes: result columns by running the query with NULL parameters,
/// from the statement alone, or none.
#[derive(Clone, Copy)]
enum Describe {
    Run,
    Static,
    ParamsOnly,
}

/// How much of a statement's text `pg_stat_activity.query` keeps (PostgreSQL's
/// `track_activity_query_size` default).
const TRACKED_QUERY_BYTES: usize = 1024;

/// The `unknown` pseudo-type's OID: a client declaring it leaves the type to the server.
const UNKNOWN_OID: u32 = 705;

/// 25P02: a statement other than COMMIT / ROLLBACK in an aborted block.
fn aborted() -> SqlError {
    SqlError::new(
        "25P02",
        "current transaction is aborted, commands ignored until end of transaction block",
    )
}

fn now_micros() -> i64 {
    system_time_to_pg(std::time::SystemTime::now())
}

impl Session {
    /// A session on `engine`. The first one also gives the engine's autovacuum the SQL
    /// layer's ANALYZE (`Engine::set_analyzer`), which it needs to analyze tables.
    pub fn new(engine: Engine) -> Session {
        crate::timezone::install(&Default::default());
        engine.set_analyzer(Box::new(crate::exec::analyze::auto_analyze));
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
        let on_off = |b: bool| if b { "on" } else { "off" }.to_string();
        settings.insert(
            "incremental_checkpoint".into(),
            on_off(s.incremental_checkpoints()),
        );
        settings.insert(
            "recovery_time_target".into(),
            format!("{}s", s.recovery_time_target.as_secs()),
        );
        settings.insert(
            "checkpoint_target_time".into(),
            format!("{}s", s.checkpoint_target_time.as_secs()),
        );
        settings.insert(
            "extreme_flush_dirty_page".into(),
            on_off(s.extreme_flush_dirty_page),
        );
        settings.insert(
            "pagewriter_threads".into(),
            s.pagewriter_threads.to_string(),
        );
        settings.insert("dwb_batch_pages".into(), s.dwb_batch_pages.to_string());
        settings.insert(
            "synchronous_commit".into(),
            if s.synchronous_commit { "on" } else { "off" }.into(),
        );
        settings.insert(
            "wal_writer_delay".into(),
            format!("{}ms", s.wal_writer_delay.as_millis()),
        );
        settings.insert(
            "wal_writer_flush_after".into(),
            match s.wal_writer_flush_after_bytes {
                0 => "0".to_string(),
                b if b % (1 << 30) == 0 => format!("{}GB", b >> 30),
                b if b % (1 << 20) == 0 => format!("{}MB", b >> 20),
                b => format!("{}kB", b / 1024),
            },
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
        settings.insert(
            "autovacuum_vacuum_insert_threshold".into(),
            s.autovacuum_vacuum_insert_threshold
                .map_or("-1".to_string(), |n| n.to_string()),
        );
        settings.insert(
            "autovacuum_vacuum_insert_scale_factor".into(),
            s.autovacuum_vacuum_insert_scale_factor.to_string(),
        );
        settings.insert(
            "autovacuum_analyze_threshold".into(),
            s.autovacuum_analyze_threshold.to_string(),
        );
        settings.insert(
            "autovacuum_analyze_scale_factor".into(),
            s.autovacuum_analyze_scale_factor.to_string(),
        );
        let (memory_limit, memory_setting_error) = match memory::statement_memory_limit(s) {
            Ok(limit) => {
                settings.insert(memory::SETTING.into(), format_size(limit));
                (limit, None)
            }
            Err(e) => {
                // SHOW tells what the file says.
                if let Some((_, v)) = s.extra.iter().rev().find(|(k, _)| k == memory::SETTING) {
                    settings.insert(memory::SETTING.into(), v.clone());
                }
                (memory::DEFAULT_LIMIT, Some(e))
            }
        };
        let interrupt = Arc::new(AtomicBool::new(false));
        let backend = engine.backends().register(interrupt.clone(), now_micros());
        settings.insert(
            crate::settings::BACKEND_PID_KEY.into(),
            backend.pid().to_string(),
        );
        Session {
            engine,
            backend,
            txn: None,
            in_block: false,
            failed: false,
            block_isolation: None,
            block_read_only: false,
            settings: Arc::new(settings),
            now: now_micros(),
            interrupt,
            statement_timeout_ms: 0,
            lock_timeout_ms: 0,
            idle_in_transaction_timeout_ms: 0,
            block_undo: Vec::new(),
            savepoints: Vec::new(),
            implicit_block: false,
            deferred: Default::default(),
            prepared: BTreeMap::new(),
            protocol_statements: Default::default(),
            plan_cache: PlanCache::default(),
            sequences: Default::default(),
            pending_settings: Default::default(),
            own_ddl: 0,
            memory: Arc::new(MemoryBudget::new(memory_limit)),
            memory_setting_error,
            time_zone: Default::default(),
            max_stack_depth_kb: crate::stack::DEFAULT_MAX_STACK_DEPTH_KB,
            row_sink: None,
        }
    }

    /// `statement_memory_limit` in bytes.
    pub fn statement_memory_limit(&self) -> u64 {
        self.memory.limit()
    }

    /// The most the last statement had charged to `statement_memory_limit` at once.
    pub fn statement_memory_peak(&self) -> u64 {
        self.memory.peak()
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

    /// The running transaction, taken to be ended.
    fn take_txn(&mut self) -> Option<Transaction> {
        self.txn.take()
    }

    /// This session's process id as clients see it (`pg_backend_pid()`, the cancel
    /// key, `pg_stat_activity.pid`).
    pub fn pid(&self) -> i32 {
        self.backend.pid()
    }

    /// The client's address and port, and how a `pg_terminate_backend` wakes this
    /// session while it waits for the client (the server shuts the socket's read side).
    pub fn set_client(
        &mut self,
        addr: Option<String>,
        port: Option<i32>,
        application_name: &str,
        wake: Box<dyn Fn() + Send + Sync>,
    ) {
        self.backend.update(|a| {
            a.client_addr = addr;
            a.client_port = port;
            a.application_name = application_name.to_string();
        });
        self.backend.set_wake(wake);
    }

    /// Whether `pg_terminate_backend` asked this session to end: the server then sends
    /// 57P01 and closes the connection.
    pub fn terminate_requested(&self) -> bool {
        self.backend.terminate_requested()
    }

    /// A statement that `pg_terminate_backend` interrupted fails with PostgreSQL's
    /// 57P01 ("terminating connection due to administrator command"), not as a cancel;
    /// the server then ends the connection.
    fn terminated_as_such(&self, mut results: Vec<SqlResult<Outcome>>) -> Vec<SqlResult<Outcome>> {
        if self.backend.terminate_requested() {
            for r in &mut results {
                if matches!(r, Err(e) if e.sqlstate == "57014") {
                    *r = Err(SqlError::new(
                        "57P01",
                        "terminating connection due to administrator command",
                    ));
                }
            }
        }
        results
    }

    /// `pg_stat_activity`: a statement (`sql`) starts. Its text is kept up to
    /// PostgreSQL's `track_activity_query_size` default (1024 bytes), so a huge
    /// statement is not copied whole.
    fn activity_start(&self, sql: &str) {
        let now = now_micros();
        let mut end = sql.len().min(TRACKED_QUERY_BYTES);
        while !sql.is_char_boundary(end) {
            end -= 1;
        }
        self.backend.update(|a| {
            a.state = BackendState::Active;
            a.query.clear();
            a.query.push_str(&sql[..end]);
            a.query_start = Some(now);
            a.state_change = Some(now);
        });
    }

    /// `pg_stat_activity`: the statement ended; the state says whether a transaction
    /// block stays open (and failed). The transaction's start and lock identity were
    /// published when it began (`txn`), and are cleared here once it has ended.
    fn activity_end(&self) {
        let now = now_micros();
        let state = match (self.in_block || self.txn.is_some(), self.failed) {
            (false, _) => BackendState::Idle,
            (true, false) => BackendState::IdleInTransaction,
            (true, true) => BackendState::IdleInTransactionAborted,
        };
        let xid = self.txn.as_ref().and_then(|t| t.xid());
        let open = self.txn.is_some();
        self.backend.update(|a| {
            a.state = state;
            a.state_change = Some(now);
            a.backend_xid = xid;
            if !open {
                a.xact_start = None;
                a.lock_owner = None;
            }
        });
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
        self.activity_start(sql);
        let r = self.execute_inner(sql, params);
        self.activity_end();
        self.terminated_as_such(r)
    }

    fn execute_inner(&mut self, sql: &str, params: &[Datum]) -> Vec<SqlResult<Outcome>> {
        self.sync_stack_limit();
        let stmts = match parse(sql) {
            Ok(s) => s,
            Err(e) => {
                self.fail_statement();
                return vec![Err(e)];
            }
        };
        self.run_all(&stmts, params)
    }

    /// [`Session::execute`] for the simple query protocol, where a query string that is
    /// one SELECT may stream its rows to `sink` as the scan produces them (a lone table
    /// read straight to the output: `exec::select`) rather than hold them all. When it
    /// did, the sink has had the columns and every row, and the `Done` result carries
    /// only the tag and columns. The sink is dropped at the end of the call: a caller
    /// that needs to know what went out keeps its own handle on the sink's state.
    pub fn execute_streaming(
        &mut self,
        sql: &str,
        sink: Box<dyn RowSink + Send>,
    ) -> Vec<SqlResult<Outcome>> {
        self.activity_start(sql);
        let r = self.execute_streaming_inner(sql, sink);
        self.activity_end();
        self.terminated_as_such(r)
    }

    fn execute_streaming_inner(
        &mut self,
        sql: &str,
        sink: Box<dyn RowSink + Send>,
    ) -> Vec<SqlResult<Outcome>> {
        self.sync_stack_limit();
        let stmts = match parse(sql) {
            Ok(s) => s,
            Err(e) => {
                self.fail_statement();
                return vec![Err(e)];
            }
        };
        if !matches!(stmts.as_slice(), [Parsed::Sql(st)] if matches!(**st, Statement::Query(_))) {
            return self.run_all(&stmts, &[]);
        }
        self.row_sink = Some(sink);
        // The sink never outlives this call, even when the statement panics (the
        // caller reports that): no later statement may find it.
        let results =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.run_all(&stmts, &[])));
        self.row_sink = None;
        results.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    }

    /// Executes a statement of the extended protocol: like [`Session::execute`], but
    /// through the session's plan cache (`plan_cache.rs`): each distinct SQL text is
    /// planned once and its plan reused until DDL (committed by anyone, or this
    /// session's own) invalidates it.
    pub fn execute_cached(&mut self, sql: &str, params: &[Datum]) -> Vec<SqlResult<Outcome>> {
        self.activity_start(sql);
        let r = self.execute_cached_inner(sql, params);
        self.activity_end();
        self.terminated_as_such(r)
    }

    fn execute_cached_inner(&mut self, sql: &str, params: &[Datum]) -> Vec<SqlResult<Outcome>> {
        self.sync_stack_limit();
        let key = self.plan_key();
        let (stmts, lookup) = match self.plan_cache.plan(sql, key, parse) {
            Ok(p) => p,
            Err(e) => {
                self.fail_statement();
                return vec![Err(e)];
            }
        };
        match lookup {
            LookupState::Ready(l) => match stmts.first() {
                Some(st) => vec![self.run_planned(st, params, Some(&l))],
                None => Vec::new(),
            },
            LookupState::No => self.run_all(&stmts, params),
            LookupState::Untried => {
                let Some(shape) = lookup_shape(&stmts) else {
                    self.plan_cache.set_lookup(sql, key, LookupState::No);
                    return self.run_all(&stmts, params);
                };
                // The descriptor the run uses, read before it, in its transaction.
                let table = self.txn().table(&shape.table).ok();
                let results = self.run_all(&stmts, params);
                let lookup = match (table, results.as_slice()) {
                    (Some(t), [Ok(Outcome::Done(q))]) => {
                        match shape.resolve(t, q.columns.clone()) {
                            Some(l) => LookupState::Ready(Arc::new(l)),
                            None => LookupState::No,
                        }
                    }
                    // Failed (or no such table): tried again at the next execution.
                    _ => LookupState::Untried,
                };
                self.plan_cache.set_lookup(sql, key, lookup);
                results
            }
        }
    }

    /// Gives this thread's stack-depth guard the session's `max_stack_depth`
    /// (`crate::stack`); its base is the connection thread's entry when the server
    /// marked it, else this call.
    fn sync_stack_limit(&self) {
        crate::stack::mark_base();
        crate::stack::set_limit_kb(self.max_stack_depth_kb);
    }

    /// What a plan made now is valid for.
    fn plan_key(&self) -> PlanKey {
        (self.engine.catalog_version(), self.own_ddl)
    }

    /// The parse of `sql`, from the plan cache or parsed now (and kept).
    fn parsed(&mut self, sql: &str) -> SqlResult<Arc<Vec<Parsed>>> {
        self.sync_stack_limit();
        let key = self.plan_key();
        self.plan_cache.parsed(sql, key, parse)
    }

    fn run_all(&mut self, stmts: &[Parsed], params: &[Datum]) -> Vec<SqlResult<Outcome>> {
        crate::timezone::install(&self.time_zone);
        // Several statements in one query string outside a block run in one implicit
        // transaction, as in PostgreSQL: all commit together, or an error rolls back
        // the ones before it. (A string that itself begins or ends blocks runs each
        // statement as it says.)
        let implicit = stmts.len() > 1
            && !self.in_block
            && !stmts.iter().any(|s| {
                matches!(
                    s,
                    Parsed::Begin(..) | Parsed::Commit | Parsed::Rollback | Parsed::Chain(_)
                )
            });
        if implicit {
            if let Err(e) = self.run(&Parsed::Begin(None, false), params) {
                return vec![Err(e)];
            }
            self.implicit_block = true;
        }
        let out = self.run_each(stmts, params);
        if implicit && self.in_block {
            let ok = out.iter().all(|r| r.is_ok());
            let end = if ok { Parsed::Commit } else { Parsed::Rollback };
            if let Err(e) = self.run(&end, params) {
                let mut out = out;
                if ok {
                    out.push(Err(e));
                }
                return out;
            }
        }
        out
    }

    fn run_each(&mut self, stmts: &[Parsed], params: &[Datum]) -> Vec<SqlResult<Outcome>> {
        let mut out = Vec::with_capacity(stmts.len());
        for st in stmts {
            // A SET max_stack_depth (or its undo at a block's end) applies from the
            // next statement on.
            self.sync_stack_limit();
            let r = self.run(st, params);
            let failed = r.is_err();
            out.push(r);
            if failed {
                break;
            }
        }
        out
    }

    /// The extended protocol's Parse: the checks PostgreSQL makes before answering
    /// ParseComplete, so their errors reach the client at Parse (a syntax error, more
    /// than one statement, a statement other than COMMIT/ROLLBACK in an aborted block, a
    /// table that does not exist: `parse_check.rs`).
    /// The caller reports an error with [`Session::protocol_error`].
    pub fn check_parse(&mut self, sql: &str) -> SqlResult<()> {
        let parsed = self.parsed(sql)?;
        if parsed.len() > 1 {
            return Err(SqlError::new(
                "42601",
                "cannot insert multiple commands into a prepared statement",
            ));
        }
        self.check_not_aborted(&parsed)?;
        match parsed.as_slice() {
            [Parsed::Sql(st)] => self.check_tables_exist(st),
            _ => Ok(()),
        }
    }

    /// Whether `sql` is a COPY: the extended protocol's Describe of its portal answers
    /// NoData without running it (its data exchange belongs to Execute).
    pub fn is_copy(&mut self, sql: &str) -> bool {
        self.parsed(sql)
            .is_ok_and(|p| matches!(p.as_slice(), [Parsed::Utility(Utility::Copy(_))]))
    }

    /// Bind in an aborted block: only COMMIT / ROLLBACK / ROLLBACK TO may run (25P02),
    /// as PostgreSQL checks at Bind (its `IsTransactionExitStmt`; psycopg sends ROLLBACK
    /// TO through the extended protocol).
    pub fn check_bind(&mut self, sql: &str) -> SqlResult<()> {
        let parsed = self.parsed(sql)?;
        self.check_not_aborted(&parsed)
    }

    fn check_not_aborted(&self, parsed: &[Parsed]) -> SqlResult<()> {
        if self.failed
            && !matches!(
                parsed,
                [Parsed::Commit | Parsed::Rollback | Parsed::SavepointEnd(_, false)]
            )
        {
            return Err(aborted());
        }
        Ok(())
    }

    /// An error the extended protocol found outside execution (at Parse, Bind or
    /// Describe) ends the statement like an error of its execution: the implicit
    /// transaction rolls back, an explicit block becomes aborted (25P02 until ROLLBACK).
    pub fn protocol_error(&mut self) {
        self.fail_statement();
    }

    /// Extended protocol Describe of a statement: the parameter type OIDs (each one the
    /// client declared in Parse — 0 means unspecified — is kept; the rest are inferred
    /// from where each `$n` is used, text when nothing tells) and, for a statement that
    /// returns rows, its result columns. A SELECT is run with NULL parameters to learn
    /// its column types; a run-time error of that run (22012 for `select 1/0`) is not
    /// the Describe's: the columns are then typed from the statement alone, and the
    /// error comes at Execute, as in PostgreSQL.
    pub fn describe(
        &mut self,
        sql: &str,
        declared: &[u32],
    ) -> SqlResult<(Vec<u32>, Option<Vec<Column>>)> {
        self.describe_with(sql, declared, Describe::Run)
    }

    /// [`Session::describe`] without running anything: for a portal whose run (at
    /// Describe) failed, whose error is then sent at Execute. Fails when the columns'
    /// types cannot be told from the statement alone.
    pub fn describe_static(
        &mut self,
        sql: &str,
        declared: &[u32],
    ) -> SqlResult<(Vec<u32>, Option<Vec<Column>>)> {
        self.describe_with(sql, declared, Describe::Static)
    }

    /// How many parameters a Bind of `sql` must supply: the `declared` types' count or
    /// the highest `$n` the statement names, whichever is larger (PostgreSQL's
    /// `num_params`), so Bind can refuse a wrong count with 08P01 as PostgreSQL does
    /// instead of ignoring extra values or failing later on a missing one.
    pub fn param_count(&mut self, sql: &str, declared: usize) -> SqlResult<usize> {
        let parsed = self.parsed(sql)?;
        Ok(match parsed.as_slice() {
            [Parsed::Sql(st)] => declared.max(plan::highest_param(st)),
            _ => declared,
        })
    }

    /// The parameter type OIDs alone ([`Session::describe`]'s first half): for Bind to
    /// read binary parameters the client sent without a type or a Describe.
    pub fn param_types(&mut self, sql: &str, declared: &[u32]) -> SqlResult<Vec<u32>> {
        self.describe_with(sql, declared, Describe::ParamsOnly)
            .map(|(oids, _)| oids)
    }

    fn describe_with(
        &mut self,
        sql: &str,
        declared: &[u32],
        mode: Describe,
    ) -> SqlResult<(Vec<u32>, Option<Vec<Column>>)> {
        let parsed = self.parsed(sql)?;
        // 705 (`unknown`) declared is as good as unspecified.
        let mut oids: Vec<u32> = declared
            .iter()
            .map(|&o| if o == UNKNOWN_OID { 0 } else { o })
            .collect();
        let r = match parsed.as_slice() {
            [Parsed::Sql(st)] => {
                plan::infer_params(st, &mut oids, &mut |name| self.txn().table(name).ok());
                match mode {
                    Describe::Run => self.describe_columns(st, oids.len(), true),
                    Describe::Static => self.describe_columns(st, oids.len(), false),
                    Describe::ParamsOnly => Ok(None),
                }
            }
            _ => Ok(None),
        };
        // Describe leaves no transaction behind outside a block.
        if !self.in_block {
            if let Some(t) = self.take_txn() {
                let _ = t.rollback();
            }
        }
        let columns = r?;
        let oids = oids
            .iter()
            .zip(declared.iter().chain(std::iter::repeat(&0)))
            .map(|(&inferred, &declared)| match (declared, inferred) {
                (0 | UNKNOWN_OID, 0) => TypeId::Text.pg_oid(),
                (0 | UNKNOWN_OID, inferred) => inferred,
                (declared, _) => declared,
            })
            .collect();
        Ok((oids, columns))
    }

    /// The result columns of one statement for Describe (`None`: it returns no rows).
    fn describe_columns(
        &mut self,
        st: &Statement,
        nparams: usize,
        run: bool,
    ) -> SqlResult<Option<Vec<Column>>> {
        let static_columns = |s: &mut Session, q: &sqlparser::ast::Query| {
            plan::static_columns(q, &mut |name| s.txn().table(name).ok())
        };
        if let Statement::Query(q) = st {
            if !run {
                return static_columns(self, q).map(Some).ok_or_else(|| {
                    SqlError::unsupported("cannot describe this statement's result types")
                });
            }
            if self.failed {
                return Err(aborted());
            }
            if let Some(e) = &self.memory_setting_error {
                return Err(e.clone());
            }
            self.memory.reset();
            let nulls = vec![Datum::Null; nparams];
            let run = if q.with.as_ref().is_some_and(|w| w.recursive) {
                self.recursive_select(q, &nulls)
            } else {
                exec::select(self, q, &nulls)
            };
            return match run {
                Ok(r) => Ok(Some(r.columns)),
                Err(e) if e.is_run_time() => static_columns(self, q).map(Some).ok_or(e),
                Err(e) => Err(e),
            };
        }
        // EXPLAIN's one json column (explain.rs).
        if let Statement::Explain { .. } = st {
            return Ok(Some(vec![Column::new("QUERY PLAN", TypeId::Json)]));
        }
        // DML with RETURNING describes its output columns.
        let target = match st {
            Statement::Insert(i) => match (&i.table, &i.returning) {
                (sqlparser::ast::TableObject::TableName(n), Some(r)) => {
                    Some((object_name(n), r, None))
                }
                _ => None,
            },
            Statement::Update(u) => match (&u.table.relation, &u.returning) {
                (sqlparser::ast::TableFactor::Table { name, alias, .. }, Some(r)) => {
                    Some((object_name(name), r, alias.as_ref().map(|a| ident(&a.name))))
                }
                _ => None,
            },
            Statement::Delete(d) => match (&d.from, &d.returning) {
                (sqlparser::ast::FromTable::WithFromKeyword(f), Some(r)) => {
                    match f.first().map(|t| &t.relation) {
                        Some(sqlparser::ast::TableFactor::Table { name, alias, .. }) => {
                            Some((object_name(name), r, alias.as_ref().map(|a| ident(&a.name))))
                        }
                        _ => None,
                    }
                }
                _ => None,
            },
            _ => None,
        };
        match target {
            Some((table, items, alias)) => {
                let def = self.txn().table(&table)?;
                let items = dml::returning_items(items, &def, alias.as_deref())?;
                Ok(Some(dml::returning_columns(&items, &def)))
            }
            None => Ok(None),
        }
    }

    /// The connection caught a panic outside a statement's execution (parsing, describe,
    /// COPY data): treat it as that statement's error, so no transaction is left open
    /// with part of it applied.
    pub fn statement_panicked(&mut self) {
        self.fail_statement();
        self.activity_end();
    }

    fn fail_statement(&mut self) {
        if self.in_block {
            self.failed = true;
        } else if let Some(t) = self.take_txn() {
            self.deferred.clear();
            self.note_rollback(&t);
            let _ = t.rollback();
        }
    }

    /// A transaction that ran DDL is being rolled back: plans made over its catalog
    /// changes are stale.
    fn note_rollback(&mut self, t: &Transaction) {
        if t.changed_catalog() {
            self.own_ddl += 1;
        }
    }

    fn run(&mut self, st: &Parsed, params: &[Datum]) -> SqlResult<Outcome> {
        self.run_planned(st, params, None)
    }

    /// Runs one statement; a SELECT with a cached `lookup` plan runs through it.
    fn run_planned(
        &mut self,
        st: &Parsed,
        params: &[Datum],
        lookup: Option<&PointLookup>,
    ) -> SqlResult<Outcome> {
        if self.failed
            && !matches!(
                st,
                Parsed::Commit | Parsed::Rollback | Parsed::SavepointEnd(_, false)
            )
        {
            return Err(aborted());
        }
        match st {
            Parsed::Begin(iso, read_only) => {
                if !self.in_block {
                    self.in_block = true;
                    self.block_isolation = *iso;
                    self.block_read_only = *read_only;
                    self.now = now_micros();
                }
                return Ok(Outcome::Done(QueryResult::tag("BEGIN")));
            }
            Parsed::Chain(rollback) => {
                let what = if *rollback { "ROLLBACK" } else { "COMMIT" };
                if !self.in_block {
                    return Err(SqlError::new(
                        "25P01",
                        format!("{what} AND CHAIN can only be used in transaction blocks"),
                    ));
                }
                self.fail_statement();
                return Err(SqlError::unsupported(format!(
                    "{what} AND CHAIN is not supported"
                )));
            }
            Parsed::Savepoint(name) => return self.savepoint(name),
            Parsed::SetConstraints(names, deferred) => {
                return self
                    .set_constraints(names.as_deref(), *deferred)
                    .inspect_err(|_| self.fail_statement())
            }
            Parsed::SavepointEnd(name, release) => return self.savepoint_end(name, *release),
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
        if let Some(e) = &self.memory_setting_error {
            let e = e.clone();
            self.fail_statement();
            return Err(e);
        }
        self.memory.reset();
        if !self.in_block {
            self.now = now_micros();
        }
        let lock_timeout = self.lock_timeout();
        let synchronous = self.synchronous_commit();
        if let Some(t) = self.txn.as_mut() {
            t.set_lock_timeout(lock_timeout);
            t.set_synchronous_commit(synchronous);
        }
        let timer = match self.statement_timeout_ms {
            0 => Ok(None),
            ms => crate::timeout::arm(Duration::from_millis(ms), self.interrupt.clone()).map(Some),
        };
        // A timer that cannot be armed fails the statement like any other error of it.
        let (timer, result) = match timer {
            Ok(timer) => (
                timer,
                // A panic inside the statement (an always-on invariant check) is this
                // statement's XX000 and takes the error path below: the implicit
                // transaction rolls back, or the block becomes aborted. Left to unwind
                // further, it left the transaction open with the statement half
                // applied, and the next autocommit statement committed it.
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match st {
                    Parsed::Utility(u) => self.utility(u.clone()),
                    Parsed::Sql(s) => match lookup {
                        Some(l) => self.point_lookup(l, s, params),
                        None => self.statement(s, params),
                    },
                    _ => unreachable!("handled above"),
                }))
                .unwrap_or_else(|_| Err(internal_error())),
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
                if !self.in_block && !matches!(out, Outcome::CopyIn(_)) {
                    if let Err(e) = self.run_deferred_checks() {
                        self.fail_statement();
                        return Err(e);
                    }
                    if let Some(t) = self.take_txn() {
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

    /// The deferred foreign-key checks, before a commit (PostgreSQL runs them at
    /// COMMIT); the queue is empty afterwards either way.
    fn run_deferred_checks(&mut self) -> SqlResult<()> {
        let pending = self.deferred.take_all();
        self.deferred.clear();
        if pending.is_empty() || self.txn.is_none() {
            return Ok(());
        }
        crate::exec::constraints::run_deferred(self, pending)
    }

    /// `SET CONSTRAINTS`: outside a block PostgreSQL only warns; inside, the mode
    /// changes and checks made immediate by it run now.
    fn set_constraints(&mut self, names: Option<&[String]>, deferred: bool) -> SqlResult<Outcome> {
        let tag = || Ok(Outcome::Done(QueryResult::tag("SET CONSTRAINTS")));
        let named = match names {
            None => None,
            Some(list) => {
                let view = self.txn().catalog()?;
                let mut out = Vec::new();
                for n in list {
                    let found = view
                        .tables
                        .values()
                        .flat_map(|t| t.constraints.iter())
                        .find(|c| c.name == *n)
                        .map(|c| (**c).clone());
                    match found {
                        Some(c) => out.push(c),
                        // UNIQUE / PRIMARY KEY constraints exist and are not deferrable.
                        None if view.index_names().any(|i| i == n) => {
                            return Err(SqlError::new(
                                "42809",
                                format!("constraint \"{n}\" is not deferrable"),
                            ))
                        }
                        None => {
                            return Err(SqlError::new(
                                "42704",
                                format!("constraint \"{n}\" does not exist"),
                            ))
                        }
                    }
                }
                Some(out)
            }
        };
        if !self.in_block {
            // PostgreSQL warns and changes nothing.
            return tag();
        }
        let now = self.deferred.set_mode(named, deferred)?;
        crate::exec::constraints::run_deferred(self, now)?;
        tag()
    }

    fn end_block(&mut self, commit: bool) -> SqlResult<()> {
        if commit {
            if let Err(e) = self.run_deferred_checks() {
                // The commit fails and the transaction is rolled back, as PostgreSQL's.
                let _ = self.end_block(false);
                return Err(e);
            }
        }
        self.deferred.clear();
        // The value in force at COMMIT decides, as in PostgreSQL (a SET just before it).
        let synchronous = self.synchronous_commit();
        if let Some(t) = self.txn.as_mut() {
            t.set_synchronous_commit(synchronous);
        }
        self.restore_block_settings(commit);
        self.savepoints.clear();
        self.in_block = false;
        self.implicit_block = false;
        self.failed = false;
        self.block_isolation = None;
        self.block_read_only = false;
        match self.take_txn() {
            Some(t) if commit => t.commit().map_err(SqlError::from),
            Some(t) => {
                self.note_rollback(&t);
                t.rollback().map_err(SqlError::from)
            }
            None => Ok(()),
        }
    }

    /// `SAVEPOINT name`: a subtransaction of the block's transaction.
    fn savepoint(&mut self, name: &str) -> SqlResult<Outcome> {
        if !self.in_block || self.implicit_block {
            return Err(SqlError::new(
                "25P01",
                "SAVEPOINT can only be used in transaction blocks",
            ));
        }
        let level = self.txn().savepoint();
        assert_eq!(level, self.savepoints.len(), "savepoint stacks out of step");
        self.savepoints.push(SavepointState {
            name: name.to_string(),
            settings: self.settings.clone(),
            block_undo: self.block_undo.clone(),
            deferred_len: self.deferred.len(),
        });
        Ok(Outcome::Done(QueryResult::tag("SAVEPOINT")))
    }

    /// `RELEASE [SAVEPOINT] name` (`release`) or `ROLLBACK TO [SAVEPOINT] name`. The
    /// innermost savepoint of that name is meant (names may repeat); a ROLLBACK TO
    /// also ends a failed block's aborted state and keeps the savepoint.
    fn savepoint_end(&mut self, name: &str, release: bool) -> SqlResult<Outcome> {
        let what = if release {
            "RELEASE SAVEPOINT"
        } else {
            "ROLLBACK TO SAVEPOINT"
        };
        if !self.in_block || self.implicit_block {
            return Err(SqlError::new(
                "25P01",
                format!("{what} can only be used in transaction blocks"),
            ));
        }
        let Some(level) = self.savepoints.iter().rposition(|s| s.name == name) else {
            self.fail_statement();
            return Err(SqlError::new(
                "3B001",
                format!("savepoint \"{name}\" does not exist"),
            ));
        };
        // A savepoint began the block's transaction (`Session::savepoint`).
        let Some(t) = self.txn.as_mut() else {
            return Err(SqlError::new("XX000", "savepoint without its transaction"));
        };
        if release {
            t.release_savepoint(level);
            self.savepoints.truncate(level);
            return Ok(Outcome::Done(QueryResult::tag("RELEASE")));
        }
        if t.changed_catalog() {
            // Plans made over the catalog changes being undone are stale.
            self.own_ddl += 1;
        }
        if let Err(e) = t.rollback_to_savepoint(level) {
            self.fail_statement();
            return Err(e.into());
        }
        self.savepoints.truncate(level + 1);
        let saved = &self.savepoints[level];
        let (settings, undo) = (saved.settings.clone(), saved.block_undo.clone());
        // Checks of rows the rollback took away are gone with them.
        self.deferred.truncate(saved.deferred_len);
        self.restore_settings_to(&settings);
        self.block_undo = undo;
        self.failed = false;
        Ok(Outcome::Done(QueryResult::tag("ROLLBACK")))
    }

    /// A SELECT through its cached point lookup; the general executor runs it when a
    /// parameter's type is not one the lookup compares.
    fn point_lookup(
        &mut self,
        lookup: &PointLookup,
        st: &Statement,
        params: &[Datum],
    ) -> SqlResult<Outcome> {
        self.txn().next_statement();
        let memory = self.memory.clone();
        match lookup.run(self.txn(), params, &memory) {
            Some(r) => {
                self.plan_cache
                    .stats
                    .point_lookups
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                r.map(Outcome::Done)
            }
            None => self.statement(st, params),
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
                    Some("repeatable read") => Isolation::RepeatableRead,
                    _ => Isolation::ReadCommitted,
                }
            });
            let mut t = self.engine.begin(iso);
            let (owner, now) = (t.lock_owner(), now_micros());
            self.backend.update(|a| {
                a.xact_start = Some(now);
                a.lock_owner = Some(owner);
            });
            t.set_interrupt(self.interrupt.clone());
            t.set_lock_timeout(self.lock_timeout());
            t.set_synchronous_commit(self.synchronous_commit());
            self.txn = Some(t);
        }
        let t = self.txn.as_mut().expect("just created");
        t
    }

    fn utility(&mut self, u: Utility) -> SqlResult<Outcome> {
        match u {
            Utility::Sequence(sql) => Ok(Outcome::Done(crate::exec::sequence::sequence_statement(
                self.txn(),
                &sql,
            )?)),
            Utility::Checkpoint => {
                self.engine.checkpoint(CheckpointReason::Requested)?;
                Ok(Outcome::Done(QueryResult::tag("CHECKPOINT")))
            }
            Utility::Analyze { tables } => {
                crate::exec::analyze::analyze(self, &tables)?;
                Ok(Outcome::Done(QueryResult::tag("ANALYZE")))
            }
            Utility::Vacuum {
                tables,
                freeze,
                analyze,
            } => {
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
                        for t in &tables {
                            if freeze {
                                self.engine.vacuum_freeze(Some(t), interrupt)?;
                            } else {
                                self.engine.vacuum_with(Some(t), interrupt)?;
                            }
                        }
                    }
                }
                if analyze {
                    crate::exec::analyze::analyze(self, &tables)?;
                }
                Ok(Outcome::Done(QueryResult::tag("VACUUM")))
            }
            Utility::Copy(stmt) => self.copy_statement(stmt),
        }
    }

    /// COPY: FROM STDIN checks the table, columns and options and hands the data
    /// exchange to the caller ([`Outcome::CopyIn`]); TO STDOUT runs the query (a
    /// table's is `SELECT cols FROM table`) and returns its rows to write.
    fn copy_statement(&mut self, stmt: CopyStatement) -> SqlResult<Outcome> {
        self.txn().next_statement();
        let CopyStatement {
            source,
            from,
            options,
        } = stmt;
        let (query, what) = match source {
            CopySource::Table { name, columns } if from => {
                if self.in_block && self.block_read_only {
                    return Err(SqlError::new(
                        "25006",
                        "cannot execute COPY FROM in a read-only transaction",
                    ));
                }
                let def = self.txn().table(&name)?;
                if options.freeze && !self.txn().created_in_this_transaction(&def) {
                    return Err(SqlError::new(
                        "55000",
                        "cannot perform COPY FREEZE because the table was not created or truncated in the current subtransaction",
                    ));
                }
                let copy = CopyIn::begin((*def).clone(), &columns, options, self.now)?;
                return Ok(Outcome::CopyIn(Box::new(copy)));
            }
            CopySource::Table { name, columns } => {
                let quote = |n: &str| format!("\"{}\"", n.replace('"', "\"\""));
                let relation = match self.txn().table(&name) {
                    Ok(def) => {
                        copy::check_table_columns(&def, &columns, &options)?;
                        quote(&name)
                    }
                    // Not a user table: a catalog view, or the error for a missing
                    // relation from the SELECT.
                    Err(_) => name.split('.').map(quote).collect::<Vec<_>>().join("."),
                };
                let list = if columns.is_empty() {
                    "*".to_string()
                } else {
                    columns
                        .iter()
                        .map(|c| quote(c))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                (
                    format!("SELECT {list} FROM {relation}"),
                    format!(" of relation \"{name}\""),
                )
            }
            CopySource::Query(q) => (q, String::new()),
        };
        let mut stmts = Parser::parse_sql(&PostgreSqlDialect {}, &query)
            .map_err(|e| SqlError::syntax(parse::syntax_message(&e.to_string())))?;
        let q = match (stmts.pop(), stmts.is_empty()) {
            (Some(Statement::Query(q)), true) => q,
            (Some(Statement::Insert(_) | Statement::Update(_) | Statement::Delete(_)), true) => {
                return Err(SqlError::unsupported(
                    "COPY (INSERT/UPDATE/DELETE ...) TO is not supported by walrus",
                ))
            }
            _ => {
                return Err(SqlError::unsupported(
                    "COPY (query) TO supports only a single SELECT in walrus",
                ))
            }
        };
        let result = exec::select(self, &q, &[])?;
        Ok(Outcome::CopyOut(Box::new(CopyOut::new(
            options, result, &what,
        )?)))
    }

    /// Takes one CopyData message of a `COPY ... FROM STDIN`: complete records are
    /// loaded now, an incomplete one is held (up to `statement_memory_limit`). An
    /// error is kept for [`Session::copy_done`], which reports it.
    pub fn copy_data(&mut self, copy: &mut CopyIn, data: &[u8]) {
        crate::timezone::install(&self.time_zone);
        self.feed_copy(copy, data, false);
        if copy.pending_bytes() > 0 {
            if let Err(e) = self.memory.check(copy.pending_bytes() as u64) {
                copy.fail(e);
            }
        }
    }

    fn feed_copy(&mut self, copy: &mut CopyIn, data: &[u8], at_end: bool) {
        let fed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            copy.feed(self.txn(), data, at_end)
        }));
        if fed.is_err() {
            copy.fail(internal_error());
        }
    }

    /// CopyDone: the rest of the data is loaded, and the COPY ends: `COPY n` and its
    /// implicit transaction commits, or its error and nothing of it stays.
    pub fn copy_done(&mut self, mut copy: CopyIn) -> SqlResult<QueryResult> {
        self.feed_copy(&mut copy, &[], true);
        let loaded = match copy.take_error() {
            Some(e) => Err(e),
            // The loaded rows' foreign keys, as at the end of any statement.
            None => crate::exec::constraints::run(self, &mut copy.fk_work).map(|()| copy.loaded()),
        };
        self.copy_finish(loaded)
    }

    /// CopyFail: the client gave up; nothing of the COPY stays.
    pub fn copy_fail(&mut self, copy: CopyIn, why: &str) -> SqlResult<QueryResult> {
        self.copy_abort(
            copy,
            SqlError::new("57014", format!("COPY from stdin failed: {why}")),
        )
    }

    /// Ends a COPY FROM STDIN with `error` (a protocol violation): nothing of it stays.
    pub fn copy_abort(&mut self, _copy: CopyIn, error: SqlError) -> SqlResult<QueryResult> {
        self.copy_finish(Err(error))
    }

    /// A whole COPY FROM STDIN's data in one call (tests, embedders).
    pub fn copy_in(&mut self, mut copy: CopyIn, data: &[u8]) -> SqlResult<QueryResult> {
        crate::timezone::install(&self.time_zone);
        self.copy_data(&mut copy, data);
        self.copy_done(copy)
    }

    /// Ends a COPY: commits its implicit transaction (or marks the block failed) and
    /// returns the `COPY n` result.
    fn copy_finish(&mut self, loaded: SqlResult<u64>) -> SqlResult<QueryResult> {
        match loaded {
            Ok(n) => {
                if !self.in_block {
                    if let Err(e) = self.run_deferred_checks() {
                        self.fail_statement();
                        return Err(e);
                    }
                    if let Some(t) = self.take_txn() {
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

    fn statement(&mut self, st: &Statement, params: &[Datum]) -> SqlResult<Outcome> {
        if self.in_block && self.block_read_only {
            let write = match st {
                Statement::Insert(_) => Some("INSERT"),
                Statement::Update(_) => Some("UPDATE"),
                Statement::Delete(_) => Some("DELETE"),
                Statement::CreateTable(_) => Some("CREATE TABLE"),
                Statement::CreateIndex(_) => Some("CREATE INDEX"),
                Statement::Drop {
                    object_type: ObjectType::Index,
                    ..
                } => Some("DROP INDEX"),
                Statement::Drop { .. } => Some("DROP TABLE"),
                Statement::Truncate(_) => Some("TRUNCATE TABLE"),
                Statement::AlterTable(_) => Some("ALTER TABLE"),
                Statement::Query(q) => q
                    .locks
                    .iter()
                    .map(|l| l.lock_type)
                    .max_by_key(|t| matches!(t, sqlparser::ast::LockType::Update))
                    .map(|t| match t {
                        sqlparser::ast::LockType::Update => "SELECT FOR UPDATE",
                        sqlparser::ast::LockType::Share => "SELECT FOR SHARE",
                    }),
                _ => None,
            };
            if let Some(w) = write {
                return Err(SqlError::new(
                    "25006",
                    format!("cannot execute {w} in a read-only transaction"),
                ));
            }
        }
        if matches!(
            st,
            Statement::CreateTable(_)
                | Statement::CreateIndex(_)
                | Statement::Drop { .. }
                | Statement::Truncate(_)
                | Statement::AlterTable(_)
        ) {
            // Plans made before this statement are stale once it changes the catalog.
            self.own_ddl += 1;
        }
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
            Statement::Query(q) if q.with.as_ref().is_some_and(|w| w.recursive) => {
                self.recursive_select(q, params)?
            }
            Statement::Query(q) => {
                let r = exec::select(self, q, params);
                self.apply_pending_settings()?;
                r?
            }
            Statement::Insert(ins) => dml::insert(self, ins, params)?,
            Statement::Update(u) => dml::update(self, u, params)?,
            Statement::Delete(d) => dml::delete(self, d, params)?,
            Statement::CreateTable(ct) => match &ct.query {
                Some(q) => dml::create_table_as(self, ct, q, params)?,
                None => ddl::create_table(self.txn(), ct)?,
            },
            Statement::CreateIndex(ci) => ddl::create_index_statement(self.txn(), ci)?,
            Statement::Drop {
                object_type: ObjectType::Table,
                if_exists,
                names,
                cascade,
                ..
            } => ddl::drop_objects(self.txn(), names, *if_exists, false, *cascade)?,
            Statement::Drop {
                object_type: ObjectType::Sequence,
                if_exists,
                names,
                cascade,
                ..
            } => crate::exec::sequence::drop_sequences(self.txn(), names, *if_exists, *cascade)?,
            Statement::Drop {
                object_type: ObjectType::Index,
                cascade: true,
                ..
            } => {
                return Err(SqlError::unsupported(
                    "DROP INDEX ... CASCADE is not supported",
                ))
            }
            Statement::Drop {
                object_type: ObjectType::Index,
                if_exists,
                names,
                ..
            } => ddl::drop_objects(self.txn(), names, *if_exists, true, false)?,
            Statement::Truncate(tr) => ddl::truncate(self.txn(), tr)?,
            Statement::Lock(l) => {
                // Outside a block the lock would end with the statement: PostgreSQL
                // takes that for a mistake (an implicit block of several statements
                // is a block).
                if !self.in_block {
                    return Err(SqlError::new(
                        "25P01",
                        "LOCK TABLE can only be used in transaction blocks",
                    ));
                }
                ddl::lock_tables(self.txn(), l)?
            }
            Statement::AlterTable(at) => ddl::alter_table(self, at)?,
            Statement::Explain { .. } => self.explain(st)?,
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

    /// Applies the `set_config()` calls the statement made (the first bad one fails
    /// the statement, as it would have in PostgreSQL).
    fn apply_pending_settings(&mut self) -> SqlResult<()> {
        let pending: Vec<_> = std::mem::take(
            &mut *self
                .pending_settings
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        for (name, value, local) in pending {
            self.apply_set(&name, value, local)?;
        }
        Ok(())
    }

    /// The settings as expressions read them (shares the map; no copy).
    pub(crate) fn settings_view(&self) -> SettingsView {
        SettingsView::new(self.settings.clone(), self.engine.clone())
            .with_plan_stats(self.plan_cache.stats.clone())
            .with_pending(self.pending_settings.clone())
    }

    /// A `-c name=value` of the startup packet's `options` (libpq's `PGOPTIONS`):
    /// applied as `SET name = value` before the first statement.
    pub fn set_startup_option(&mut self, name: &str, value: &str) -> Result<(), SqlError> {
        let name = name.trim().to_ascii_lowercase().replace('-', "_");
        self.apply_set(&name, value.to_string(), false).map(|_| ())
    }

    /// Records who connected to what (`current_user`, `current_database()`).
    pub fn set_identity(&mut self, user: &str, database: &str) {
        self.backend.update(|a| {
            a.user = user.to_string();
            a.database = database.to_string();
        });
        let settings = Arc::make_mut(&mut self.settings);
        settings.insert("session_authorization".into(), user.to_string());
        settings.insert(DATABASE_KEY.into(), database.to_string());
    }

    /// The settings the server, not the engine, reads at startup (`port`,
    /// `listen_addresses`, `unix_socket_directories`, ...), with the values in effect, for
    /// SHOW and `pg_settings`; SET refuses them as PostgreSQL does (55P02).
    pub fn set_server_settings(&mut self, values: &[(String, String)]) {
        let settings = Arc::make_mut(&mut self.settings);
        for (name, value) in values {
            settings.insert(name.clone(), value.clone());
        }
    }
}

impl Env for Session {
    fn txn(&mut self) -> &mut Transaction {
        Session::txn(self)
    }

    fn engine(&self) -> &Engine {
        &self.engine
    }

    fn now(&self) -> i64 {
        self.now
    }

    fn settings(&self) -> SettingsView {
        self.settings_view()
    }

    fn interrupt(&self) -> Arc<AtomicBool> {
        self.interrupt.clone()
    }

    fn memory(&self) -> Arc<MemoryBudget> {
        self.memory.clone()
    }

    fn take_row_sink(&mut self) -> Option<Box<dyn RowSink + Send>> {
        self.row_sink.take()
    }

    fn return_row_sink(&mut self, sink: Box<dyn RowSink + Send>) {
        self.row_sink = Some(sink);
    }

    fn sequences(&self) -> crate::exec::sequence::SharedSessionSequences {
        self.sequences.clone()
    }

    fn deferred(&mut self) -> Option<&mut crate::exec::constraints::Deferred> {
        Some(&mut self.deferred)
    }
}

/// What a client hears when its statement panicked inside the session.
pub fn internal_error() -> SqlError {
    SqlError::new("XX000", "internal error while executing the statement")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine(dir: &std::path::Path) -> Engine {
        let cfg = walrus_engine::settings::default_config_text(1 << 20)
            .replace("shared_buffers = \"128MB\"", "shared_buffers = \"8MB\"")
            .replace(
                "wal_sync_method = \"fdatasync\"",
                "wal_sync_method = \"none\"",
            );
        Engine::init(dir, Some(&cfg)).unwrap();
        Engine::open(dir).unwrap().0
    }

    fn one(s: &mut Session, sql: &str) -> SqlResult<Outcome> {
        s.execute(sql, &[]).pop().unwrap()
    }

    fn rows(s: &mut Session, sql: &str) -> Vec<Vec<Option<String>>> {
        match one(s, sql) {
            Ok(Outcome::Done(q)) => q
                .rows
                .iter()
                .map(|r| r.iter().map(crate::value::format_text).collect())
                .collect(),
            other => panic!("{sql}: {other:?}"),
        }
    }

    /// A statement that panics after changing a row leaves no trace: in autocommit its
    /// transaction rolls back and the next statement starts a fresh one; in a block the
    /// block is aborted (25P02) until ROLLBACK. Before, the panic unwound past the
    /// session and the next autocommit statement committed the half-applied update.
    #[test]
    fn a_panicking_statement_leaves_no_trace() {
        let dir = tempfile::tempdir().unwrap();
        let e = engine(dir.path());
        let mut s = Session::new(e.clone());
        one(&mut s, "create table t (id int primary key, v int)").unwrap();
        one(&mut s, "insert into t values (1, 10), (2, 20)").unwrap();
        let upd = "update t set v = case when id = 2 then walrus_test_panic() else v + 1 end";
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let r = one(&mut s, upd);
        assert_eq!(r.unwrap_err().sqlstate, "XX000");
        one(&mut s, "insert into t values (3, 30)").unwrap();
        assert_eq!(
            rows(&mut s, "select id, v from t order by id"),
            vec![
                vec![Some("1".into()), Some("10".into())],
                vec![Some("2".into()), Some("20".into())],
                vec![Some("3".into()), Some("30".into())],
            ]
        );
        one(&mut s, "begin").unwrap();
        one(&mut s, "insert into t values (4, 40)").unwrap();
        assert_eq!(one(&mut s, upd).unwrap_err().sqlstate, "XX000");
        std::panic::set_hook(prev);
        assert_eq!(one(&mut s, "select 1").unwrap_err().sqlstate, "25P02");
        one(&mut s, "rollback").unwrap();
        assert_eq!(
            rows(&mut s, "select count(*) from t"),
            vec![vec![Some("3".into())]]
        );
        drop(s);
        e.shutdown().unwrap();
    }
}
