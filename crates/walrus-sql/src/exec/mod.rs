//! Execution: SELECT (FROM lists with joins — inner, left, right, full, cross, LATERAL —
//! derived tables and table functions, WHERE, GROUP BY / HAVING with aggregates,
//! DISTINCT, UNION / INTERSECT / EXCEPT, ORDER BY, LIMIT / OFFSET, and scalar, EXISTS,
//! IN and ANY subqueries, correlated ones seeing the enclosing row through [`Frame`]) over
//! user tables and the virtual `pg_catalog` / `information_schema` tables; INSERT,
//! UPDATE and DELETE (`dml.rs`); DDL (`ddl.rs`); COPY data in and out (`copy/`).
//!
//! A SELECT over one user table streams: the scan hands each row passing WHERE to the
//! streamed aggregation or to the projection and output collector (`select.rs`), which
//! stops the scan once a LIMIT without ORDER BY has its rows. `t JOIN x ON t.a = x.b`
//! (inner, `t` a plain table, `x` hashed within `work_mem`) streams too: each scanned
//! row of `t` probes `x`'s hash table (`from.rs` `probe_join`). Other levels (other
//! joins, derived tables, set operations, window functions) materialise their rows: OLTP
//! statements touch few rows and the catalog tables are small. Every row held is charged to the statement's `statement_memory_limit`
//! budget ([`crate::memory`]), so a blow-up fails with 53200 instead of exhausting the
//! server's memory. A lone user table with no joins goes through [`dml::matching_rows`], which
//! reads through the access path [`crate::plan::choose_access`] picks (equality on a
//! unique index's columns becomes an index lookup, so pgbench's point reads never scan).
//! A closed integer range on a one-column index (`aid between x and y`) reads through
//! the index too.
//!
//! Algorithms (issue 28): ORDER BY with LIMIT keeps a bounded heap of `limit + offset`
//! rows (`sort.rs`), a full sort past `work_mem` writes sorted runs to temporary files
//! and merges them (`spill.rs`); GROUP BY whose aggregates are plain calls keeps one
//! running state per group in a hash table (`select.rs` `stream_groups`, states in
//! `aggregate.rs`), spilling rows of new groups to partition files past `work_mem`;
//! other aggregates (DISTINCT, ORDER BY inside, string_agg, array_agg) keep the rows of
//! each group. Equi-joins hash the smaller side (`from.rs` `hash_join`; past `work_mem`
//! both sides' keys are partitioned to temporary files);
//! other joins are nested loops. Every path gives the rows in the order the simple one
//! gives (stable sort, groups by first appearance, nested-loop join order).
//!
//! Binding happens before the clauses are evaluated over the FROM list's rows: every
//! column a clause names must resolve in the FROM list or an enclosing query
//! (`plan::bind`), so a misspelt column fails with 42703 even on an empty table. (The
//! FROM items themselves are read first, and the single-table path applies WHERE while
//! reading, so an evaluation error there can come before a bind error.)
//!
//! The executor knows the session only through [`Env`]: the statement's transaction, the
//! engine, the statement time, the settings and the cancel flag.

mod aggregate;
pub(crate) mod analyze;
pub(crate) mod constraints;
pub mod copy;
pub(crate) mod ddl;
pub(crate) mod defaults;
pub(crate) mod dml;
pub(crate) mod explain;
mod from;
mod locking;
pub(crate) mod parallel;
mod select;
pub(crate) mod sequence;
mod sort;
mod spill;
mod window;

pub use spill::temp_file_stats;

use std::cell::RefCell;
use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use sqlparser::ast::{self, Expr, Query, SetExpr, SetOperator, SetQuantifier};
use walrus_engine::access::datum::{Datum, TypeId};
use walrus_engine::engine::Transaction;
use walrus_engine::Engine;

use crate::catalog_views;
use crate::error::{SqlError, SqlResult};
use crate::expr::compiled::{Columns, Prepared};
use crate::expr::{coerce, compare_values, eval, Hooks, Scope};
use crate::memory::MemoryBudget;
use crate::rel::{ColName, Frame, Rel};
use crate::result::{QueryResult, RowSink};
use crate::settings::{SettingsView, DATABASE_KEY};

/// What execution needs from the session running the statement.
pub(crate) trait Env {
    /// The statement's transaction, begun on first use.
    fn txn(&mut self) -> &mut Transaction;
    fn engine(&self) -> &Engine;
    /// Transaction start time (now() / CURRENT_TIMESTAMP), PostgreSQL microseconds.
    fn now(&self) -> i64;
    /// The settings as expressions read them (shares the map; no copy).
    fn settings(&self) -> SettingsView;
    /// The session's cancel flag.
    fn interrupt(&self) -> Arc<AtomicBool>;
    /// The running statement's budget for materialised rows (`statement_memory_limit`).
    fn memory(&self) -> Arc<MemoryBudget>;
    /// The sink a lone top-level SELECT streams its rows to, if the session has one for
    /// this statement (taken by [`select`], given back with [`Env::return_row_sink`]).
    fn take_row_sink(&mut self) -> Option<Box<dyn RowSink + Send>> {
        None
    }
    fn return_row_sink(&mut self, _sink: Box<dyn RowSink + Send>) {}
    /// The session's `currval` / `lastval` state.
    fn sequences(&self) -> sequence::SharedSessionSequences {
        Default::default()
    }
    /// The transaction block's deferred foreign-key checks (`None`: no block to defer
    /// to, so every check is immediate).
    fn deferred(&mut self) -> Option<&mut constraints::Deferred> {
        None
    }
}

/// Runs a SELECT (or VALUES, or set operation) and returns its rows with a `SELECT n`
/// tag; columns whose type is not known are reported as text.
///
/// With a row sink from the session (`Env::take_row_sink`), a query level that streams
/// a lone table straight to its output (no ORDER BY, DISTINCT, LIMIT or OFFSET; every
/// output type known before the first row) sends its rows to the sink as they are made
/// instead: the result then has its tag and columns but no rows.
pub(crate) fn select(env: &mut dyn Env, q: &Query, params: &[Datum]) -> SqlResult<QueryResult> {
    let Some(sink) = env.take_row_sink() else {
        return select_with(env, q, params, &CteRels::new());
    };
    let mut exec = Executor::new(env, params);
    *exec.sink.get_mut() = Some(sink);
    exec.sink_query = Some(q as *const Query);
    let rel = exec.run_query(q, None);
    let streamed = exec.streamed.get();
    let sink = exec.sink.take();
    let env = exec.env.into_inner();
    if let Some(sink) = sink {
        env.return_row_sink(sink);
    }
    let mut rel = rel?;
    check_result_types(&rel.cols, &mut rel.rows)?;
    Ok(QueryResult {
        tag_only: false,
        tag: format!("SELECT {}", streamed.unwrap_or(rel.rows.len())),
        columns: rel.cols.into_iter().map(|c| c.to_column()).collect(),
        rows: rel.rows,
    })
}

/// The rows of a WITH query's CTEs, bound by name for the statement: a FROM item that
/// names one (unqualified) reads these rows instead of a table (`session/recursive.rs`
/// fills them; the working table of a recursive CTE is one).
///
/// A CTE the statement reads exactly once (one FROM reference at its top level) is
/// bound *read once*: that read moves its rows out instead of copying them. A second
/// read of such a binding is an internal error, never an empty relation.
#[derive(Default)]
pub(crate) struct CteRels {
    shared: HashMap<String, Rel>,
    read_once: RefCell<HashMap<String, Option<Rel>>>,
}

impl CteRels {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Binds `name` to `rel` for any number of reads.
    pub(crate) fn insert(&mut self, name: String, rel: Rel) {
        self.read_once.get_mut().remove(&name);
        self.shared.insert(name, rel);
    }

    /// Binds `name` to `rel` for one read, which takes the rows.
    pub(crate) fn insert_read_once(&mut self, name: String, rel: Rel) {
        self.shared.remove(&name);
        self.read_once.get_mut().insert(name, Some(rel));
    }

    pub(crate) fn contains(&self, name: &str) -> bool {
        self.shared.contains_key(name) || self.read_once.borrow().contains_key(name)
    }

    /// The rows bound to `name` (copied, or moved out of a read-once binding), or
    /// `None` when no CTE has that name.
    pub(crate) fn read(&self, name: &str, memory: &MemoryBudget) -> Option<SqlResult<Rel>> {
        if let Some(rel) = self.shared.get(name) {
            return Some(memory.charge_rows(&rel.rows).map(|()| rel.clone()));
        }
        let mut once = self.read_once.borrow_mut();
        let slot = once.get_mut(name)?;
        Some(slot.take().ok_or_else(|| {
            SqlError::new(
                "XX000",
                format!("WITH query \"{name}\" was bound for one read and read twice"),
            )
        }))
    }
}

/// Brings a query level's output values to their columns' types where PostgreSQL would
/// have converted them: CASE, COALESCE, GREATEST/LEAST and NULLIF over an int and a
/// numeric branch are numeric (`plan::types::static_type`), so the int branch's values
/// are widened, as each input is converted to the common type. Only widening along
/// PostgreSQL's implicit casts (int2 < int4 < int8 < numeric < float8, date <
/// timestamp < timestamptz) happens here; any other difference is left to
/// [`check_result_types`], which refuses to send it.
pub(crate) fn conform_row(types: &[Option<TypeId>], row: &mut [Datum]) -> SqlResult<()> {
    for (ty, v) in types.iter().zip(row.iter_mut()) {
        let (Some(ty), Some(vt)) = (*ty, v.type_id()) else {
            continue;
        };
        if vt != ty && widens(vt, ty) {
            *v = crate::expr::coerce(std::mem::replace(v, Datum::Null), ty)?;
        }
    }
    Ok(())
}

/// The last check before rows go to a client: every value has its column's declared
/// type (after [`conform_row`]'s widening). A value of another type would be sent
/// under the wrong type OID — in binary form, bytes the client decodes as something
/// else — so it is an internal error (XX000) instead, never wrong data on the wire.
fn check_result_types(cols: &[ColName], rows: &mut [Vec<Datum>]) -> SqlResult<()> {
    let types: Vec<Option<TypeId>> = cols.iter().map(|c| c.ty).collect();
    for row in rows.iter_mut() {
        conform_row(&types, row)?;
        for (c, v) in cols.iter().zip(row.iter_mut()) {
            let declared = c.ty.unwrap_or(TypeId::Text);
            if let Some(vt) = v.type_id() {
                if vt != declared && declared == TypeId::Text {
                    // A column typed text because its first value was an untyped
                    // literal: its other values go out in their text form, as text.
                    *v = Datum::Text(crate::value::format_text(v).unwrap_or_default());
                } else if vt != declared {
                    return Err(SqlError::new(
                        "XX000",
                        format!(
                            "result column \"{}\" is declared {} but a value is {}",
                            c.name,
                            declared.name(),
                            vt.name()
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Whether PostgreSQL converts `from` to `to` implicitly, towards the wider type.
fn widens(from: TypeId, to: TypeId) -> bool {
    const NUMBERS: [TypeId; 5] = [
        TypeId::Int2,
        TypeId::Int4,
        TypeId::Int8,
        TypeId::Numeric,
        TypeId::Float8,
    ];
    const TIMES: [TypeId; 3] = [TypeId::Date, TypeId::Timestamp, TypeId::TimestampTz];
    let up = |list: &[TypeId]| {
        let rank = |t: TypeId| list.iter().position(|x| *x == t);
        matches!((rank(from), rank(to)), (Some(a), Some(b)) if a < b)
    };
    up(&NUMBERS) || up(&TIMES)
}

/// [`select`] with `ctes` visible to every FROM list of the query, subqueries included.
pub(crate) fn select_with(
    env: &mut dyn Env,
    q: &Query,
    params: &[Datum],
    ctes: &CteRels,
) -> SqlResult<QueryResult> {
    let mut exec = Executor::new(env, params);
    exec.ctes = Some(ctes);
    let mut rel = exec.run_query(q, None)?;
    check_result_types(&rel.cols, &mut rel.rows)?;
    Ok(QueryResult {
        tag_only: false,
        tag: format!("SELECT {}", rel.rows.len()),
        columns: rel.cols.into_iter().map(|c| c.to_column()).collect(),
        rows: rel.rows,
    })
}

/// A row key for grouping and duplicate elimination: values PostgreSQL's equality calls
/// equal get one key whatever their type or written form — every integer width, an
/// integral NUMERIC (`1 = 1::bigint = 1.0`), any NUMERIC scale (`2.1 = 2.10`), float
/// zero's sign (`-0 = 0`) and every NaN (`NaN = NaN` in PostgreSQL's float order). A set
/// operation or a grouped UNION ALL subquery mixes widths in one column.
/// `json` has no equality operator in PostgreSQL: grouping, DISTINCT and set
/// operations over a json value are 42883 there, so they are here too (its key would
/// be its text).
pub(crate) fn check_keyable(row: &[Datum]) -> SqlResult<()> {
    if row.iter().any(|d| matches!(d, Datum::Json(_))) {
        return Err(SqlError::new(
            "42883",
            "could not identify an equality operator for type json",
        ));
    }
    Ok(())
}

pub(crate) fn row_key(row: &[Datum]) -> String {
    let norm: Vec<Datum> = row.iter().map(key_datum).collect();
    format!("{norm:?}")
}

/// A hash table keyed by [`KeyPart`] rows (groups, hash-join sides), with walrus's
/// word hasher: keys are the statement's own data.
pub(super) type KeyMap<V> = HashMap<Vec<KeyPart>, V, walrus_base::hash::WordHash>;

/// One value of a hash key (grouping, hash join) under the same equality as
/// [`row_key`], without formatting the common integer case.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum KeyPart {
    Null,
    Int(i64),
    /// Any other value: its normalised form's text.
    Other(String),
}

impl KeyPart {
    pub(super) fn of(d: &Datum) -> KeyPart {
        match d {
            Datum::Null => KeyPart::Null,
            Datum::Int2(v) => KeyPart::Int(*v as i64),
            Datum::Int4(v) => KeyPart::Int(*v as i64),
            Datum::Int8(v) => KeyPart::Int(*v),
            other => match key_datum(other) {
                Datum::Int8(v) => KeyPart::Int(v),
                n => KeyPart::Other(format!("{n:?}")),
            },
        }
    }

    /// An estimate of the key part's size, for the statement's memory budget.
    pub(super) fn bytes(&self) -> u64 {
        std::mem::size_of::<KeyPart>() as u64
            + match self {
                KeyPart::Other(s) => s.len() as u64,
                _ => 0,
            }
    }
}

fn key_datum(d: &Datum) -> Datum {
    match d {
        Datum::Int2(v) => Datum::Int8(*v as i64),
        Datum::Int4(v) => Datum::Int8(*v as i64),
        Datum::Numeric(t) => match crate::numeric::parse(t) {
            Ok(v) => {
                let v = v.normalized();
                let text = crate::numeric::format(&v);
                match text.parse::<i64>() {
                    Ok(i) => Datum::Int8(i),
                    Err(_) => Datum::Numeric(text),
                }
            }
            Err(_) => d.clone(),
        },
        Datum::Float8(f) if *f == 0.0 => Datum::Float8(0.0),
        Datum::Float8(f) if f.is_nan() => Datum::Float8(f64::NAN.abs()),
        // reg* values are equal to each other and to `oid` values by OID.
        Datum::Reg(r) => Datum::Int8(r.oid as i64),
        // `1 mon` = `30 days`: intervals are equal by their span.
        Datum::Interval(iv) => Datum::Text(format!("interval {}", iv.span())),
        Datum::Array(a) => Datum::Array(Box::new(walrus_engine::access::datum::ArrayValue {
            elem: a.elem,
            items: a.items.iter().map(key_datum).collect(),
        })),
        other => other.clone(),
    }
}

/// Whether every branch of a set operand gives column `i` as a bare string literal
/// (PostgreSQL's `unknown`, typed by the other operand).
fn string_literal_item(e: &SetExpr, i: usize) -> bool {
    let string = |x: &Expr| matches!(x, Expr::Value(v) if matches!(v.value, ast::Value::SingleQuotedString(_)));
    match e {
        SetExpr::Select(s) => match s.projection.get(i) {
            Some(ast::SelectItem::UnnamedExpr(x)) => string(x),
            Some(ast::SelectItem::ExprWithAlias { expr, .. }) => string(expr),
            _ => false,
        },
        SetExpr::Query(q) => string_literal_item(&q.body, i),
        SetExpr::SetOperation { left, right, .. } => {
            string_literal_item(left, i) && string_literal_item(right, i)
        }
        _ => false,
    }
}

/// Converts the untyped text literals of column `i` to `ty` (22P02 when one does not
/// read as it).
fn retype_literals(rel: &mut Rel, i: usize, ty: TypeId) -> SqlResult<()> {
    for row in &mut rel.rows {
        if let Datum::Text(t) = &row[i] {
            row[i] = crate::value::parse_text(ty, t)?;
        }
    }
    rel.cols[i].ty = Some(ty);
    Ok(())
}

/// Type categories a set operation cannot mix (PostgreSQL's 42804).
fn type_category(t: TypeId) -> u8 {
    match t {
        TypeId::Int2 | TypeId::Int4 | TypeId::Int8 | TypeId::Float8 | TypeId::Numeric => 0,
        TypeId::Text => 1,
        TypeId::Bool => 2,
        TypeId::Timestamp | TypeId::TimestampTz | TypeId::Date => 3,
        TypeId::Bytea => 4,
        TypeId::Uuid => 5,
        TypeId::Time => 6,
        TypeId::Interval => 7,
        TypeId::Json => 8,
        TypeId::Jsonb => 9,
        TypeId::Array(_) => 10,
        TypeId::TimeTz => 11,
        TypeId::RegProc | TypeId::RegClass | TypeId::RegType | TypeId::RegNamespace => 12,
        TypeId::Int2Vector => 13,
    }
}

/// Whether output column `i` of a set operation's operand is a bare literal, whose type
/// PostgreSQL resolves from the other operand (an untyped `'2'` joins integers).
fn literal_item(e: &SetExpr, i: usize) -> bool {
    match e {
        SetExpr::Select(s) => matches!(
            s.projection.get(i),
            Some(ast::SelectItem::UnnamedExpr(Expr::Value(_)))
                | Some(ast::SelectItem::ExprWithAlias {
                    expr: Expr::Value(_),
                    ..
                })
        ),
        SetExpr::Query(q) => literal_item(&q.body, i),
        SetExpr::SetOperation { left, right, .. } => {
            literal_item(left, i) || literal_item(right, i)
        }
        _ => true,
    }
}

/// ORDER BY directions of each key: (descending, NULLs first), PostgreSQL's defaults
/// (NULLs sort as if larger than every value).
pub(crate) fn sort_dirs(exprs: &[ast::OrderByExpr]) -> Vec<(bool, bool)> {
    exprs
        .iter()
        .map(|o| {
            let desc = matches!(o.options.sort, Some(ast::OrderBySort::Desc));
            (desc, o.options.nulls_first.unwrap_or(desc))
        })
        .collect()
}

/// Compares two rows of sort keys under `dirs`.
pub(crate) fn compare_keys(a: &[Datum], b: &[Datum], dirs: &[(bool, bool)]) -> Ordering {
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let (desc, nulls_first) = dirs[i];
        // Integers of one width, the common sort key, compared directly (what
        // `compare_values` answers for them, without its type dispatch).
        let direct = match (x, y) {
            (Datum::Int4(p), Datum::Int4(q)) => Some(p.cmp(q)),
            (Datum::Int8(p), Datum::Int8(q)) => Some(p.cmp(q)),
            _ => None,
        };
        if let Some(o) = direct {
            let o = if desc { o.reverse() } else { o };
            if o.is_ne() {
                return o;
            }
            continue;
        }
        let o = match (x.is_null(), y.is_null()) {
            (true, true) => Ordering::Equal,
            (true, false) => {
                if nulls_first {
                    Ordering::Less
                } else {
                    Ordering::Greater
                }
            }
            (false, true) => {
                if nulls_first {
                    Ordering::Greater
                } else {
                    Ordering::Less
                }
            }
            _ => {
                let o = compare_values(x, y).unwrap_or(Ordering::Equal);
                if desc {
                    o.reverse()
                } else {
                    o
                }
            }
        };
        if o.is_ne() {
            return o;
        }
    }
    Ordering::Equal
}

/// Sort keys that are all integers (`int2`/`int4`/`int8`, no NULL), flat, `width` per
/// row: compared as `i64`s under their directions, which is what [`compare_keys`]
/// answers for them, without a `Datum` dispatch per comparison.
pub(crate) struct IntKeys {
    keys: Vec<i64>,
    width: usize,
    desc: Vec<bool>,
}

impl IntKeys {
    /// The integer form of `keys` (flat, `dirs.len()` per row), or `None` when any key
    /// is not an integer or is NULL.
    pub(crate) fn new(keys: &[Datum], dirs: &[(bool, bool)]) -> Option<Self> {
        let ints = keys
            .iter()
            .map(|d| match d {
                Datum::Int2(v) => Some(i64::from(*v)),
                Datum::Int4(v) => Some(i64::from(*v)),
                Datum::Int8(v) => Some(*v),
                _ => None,
            })
            .collect::<Option<Vec<i64>>>()?;
        Some(IntKeys {
            keys: ints,
            width: dirs.len(),
            desc: dirs.iter().map(|d| d.0).collect(),
        })
    }

    /// The positions of the `rows` rows in key order, ties by position (the stable
    /// order), for keys of up to three columns: each row's keys packed with its position into one
    /// tuple (a descending key bit-inverted, which reverses `i64` order exactly) and
    /// the tuples sorted as plain integers. `None` for wider keys.
    pub(crate) fn sorted_positions(&self, rows: usize) -> Option<Vec<usize>> {
        const PACKED: usize = 3;
        if self.width > PACKED {
            return None;
        }
        debug_assert_eq!(self.keys.len(), rows * self.width);
        let mut packed: Vec<([i64; PACKED], usize)> = (0..rows)
            .map(|r| {
                let mut k = [0i64; PACKED];
                for (j, slot) in k.iter_mut().enumerate().take(self.width) {
                    let v = self.keys[r * self.width + j];
                    *slot = if self.desc[j] { !v } else { v };
                }
                (k, r)
            })
            .collect();
        packed.sort_unstable();
        Some(packed.into_iter().map(|(_, r)| r).collect())
    }

    /// Rows `a` and `b` compared on key positions `cols`.
    pub(crate) fn compare(&self, a: usize, b: usize, cols: std::ops::Range<usize>) -> Ordering {
        let (ra, rb) = (a * self.width, b * self.width);
        for i in cols {
            let o = self.keys[ra + i].cmp(&self.keys[rb + i]);
            if o.is_ne() {
                return if self.desc[i] { o.reverse() } else { o };
            }
        }
        Ordering::Equal
    }
}

/// Runs SELECTs for one statement of a session.
pub(crate) struct Executor<'s> {
    env: RefCell<&'s mut dyn Env>,
    params: &'s [Datum],
    now: i64,
    settings: SettingsView,
    interrupt: Arc<AtomicBool>,
    /// Every row this statement materialises is charged here.
    memory: Arc<MemoryBudget>,
    catalog: RefCell<Option<catalog_views::Snapshot>>,
    /// While a FROM list of plain tables is read: the only column names the query level
    /// can use (see `select::used_names`); user-table scans decode just those.
    pruned_names: RefCell<Option<HashSet<String>>>,
    /// CTE rows bound by name (see [`CteRels`]); `None` outside WITH RECURSIVE.
    ctes: Option<&'s CteRels>,
    /// Where the statement's own query level may stream its rows (see [`select`]), and
    /// that query (no other level, subqueries and derived tables included, uses it).
    sink: RefCell<Option<Box<dyn RowSink + Send>>>,
    sink_query: Option<*const Query>,
    /// How many rows went to the sink, once the level streamed.
    streamed: std::cell::Cell<Option<usize>>,
    /// The session's `currval` state.
    sequences: sequence::SharedSessionSequences,
}

/// The hooks in force while evaluating over one group of rows.
struct GroupHooks<'a, 's> {
    exec: &'a Executor<'s>,
    cols: &'a [ColName],
    rows: &'a [&'a Vec<Datum>],
}

/// The hooks in force while evaluating over one group of a streamed aggregation: each
/// aggregate call's value comes from the group's running state.
struct StreamHooks<'a, 's> {
    exec: &'a Executor<'s>,
    cols: &'a [ColName],
    calls: &'a [aggregate::StreamCall],
    states: &'a [aggregate::AggState],
}

impl Hooks for StreamHooks<'_, '_> {
    fn subquery(&self, q: &Query, outer: Option<&Frame<'_>>) -> SqlResult<Rel> {
        self.exec.expr_subquery(q, outer)
    }
    fn aggregate(&self, f: &ast::Function, _outer: Option<&Frame<'_>>) -> Option<SqlResult<Datum>> {
        Some(match self.calls.iter().position(|c| c.is(f)) {
            Some(i) => self
                .exec
                .stream_finish(&self.calls[i], &self.states[i], self.cols),
            // Streaming is chosen only when every call was found beforehand.
            None => Err(SqlError::new(
                "XX000",
                "aggregate call not prepared by the grouped query",
            )),
        })
    }
    fn function(&self, name: &str, args: &[Datum]) -> Option<SqlResult<Datum>> {
        Hooks::function(self.exec, name, args)
    }
}

impl Hooks for Executor<'_> {
    fn subquery(&self, q: &Query, outer: Option<&Frame<'_>>) -> SqlResult<Rel> {
        self.expr_subquery(q, outer)
    }
    fn aggregate(
        &self,
        _f: &ast::Function,
        _outer: Option<&Frame<'_>>,
    ) -> Option<SqlResult<Datum>> {
        None
    }
    fn function(&self, name: &str, args: &[Datum]) -> Option<SqlResult<Datum>> {
        if sequence::is_sequence_function(name) {
            return Some(self.sequence_function(name, args));
        }
        if name == "set_config" {
            return Some(match args {
                [Datum::Null, ..] => Err(SqlError::new("22023", "SET requires parameter name")),
                [n, v, l] => {
                    let text = |d: &Datum| crate::value::format_text(d).unwrap_or_default();
                    let local = matches!(l, Datum::Bool(true))
                        || matches!(l, Datum::Text(t) if matches!(t.as_str(), "t" | "true" | "on" | "1"));
                    self.settings
                        .set_config(&text(n), &text(v), local)
                        .map(Datum::Text)
                }
                _ => Err(SqlError::new(
                    "42883",
                    format!(
                        "function set_config with {} arguments does not exist",
                        args.len()
                    ),
                )),
            });
        }
        if !catalog_views::is_catalog_function(name) {
            return None; // now(), repeat(), ...: no catalog snapshot needed
        }
        let snap = match self.catalog_snapshot() {
            Ok(()) => self.catalog.borrow(),
            Err(e) => return Some(Err(e)),
        };
        snap.as_ref().and_then(|c| c.function(name, args))
    }
}

impl Hooks for GroupHooks<'_, '_> {
    fn subquery(&self, q: &Query, outer: Option<&Frame<'_>>) -> SqlResult<Rel> {
        self.exec.expr_subquery(q, outer)
    }
    fn aggregate(&self, f: &ast::Function, outer: Option<&Frame<'_>>) -> Option<SqlResult<Datum>> {
        Some(self.exec.aggregate(f, self.cols, self.rows, outer))
    }
    fn function(&self, name: &str, args: &[Datum]) -> Option<SqlResult<Datum>> {
        Hooks::function(self.exec, name, args)
    }
}

impl<'s> Executor<'s> {
    pub(crate) fn new(env: &'s mut dyn Env, params: &'s [Datum]) -> Executor<'s> {
        let (now, settings, interrupt) = (env.now(), env.settings(), env.interrupt());
        let memory = env.memory();
        let sequences = env.sequences();
        Executor {
            sequences,
            env: RefCell::new(env),
            params,
            now,
            settings,
            interrupt,
            memory,
            catalog: RefCell::new(None),
            pruned_names: RefCell::new(None),
            ctes: None,
            sink: RefCell::new(None),
            sink_query: None,
            streamed: std::cell::Cell::new(None),
        }
    }

    /// `nextval` and the other sequence functions, over the transaction's catalog (the
    /// committed one while a streamed scan holds the transaction).
    fn sequence_function(&self, name: &str, args: &[Datum]) -> SqlResult<Datum> {
        let (engine, catalog, session) = match self.env.try_borrow_mut() {
            Ok(mut env) => {
                let catalog = env.txn().catalog()?;
                (env.engine().clone(), catalog, env.sequences())
            }
            Err(_) => {
                let engine = self.settings.engine().clone();
                let catalog = engine.catalog_view()?;
                (engine, catalog, self.sequences.clone())
            }
        };
        let cx = sequence::SequenceContext {
            engine: &engine,
            catalog: &catalog,
            session: &session,
        };
        sequence::function(&cx, name, args).unwrap_or_else(|| {
            Err(SqlError::new(
                "42883",
                format!("function {name} does not exist"),
            ))
        })
    }

    fn catalog_snapshot(&self) -> SqlResult<()> {
        if self.catalog.borrow().is_none() {
            // A streamed scan holds the transaction; it takes the snapshot beforehand
            // (`select::prepare_streaming`), so this is a missed case, not a user error.
            let Ok(mut env) = self.env.try_borrow_mut() else {
                return Err(SqlError::new(
                    "XX000",
                    "catalog read while a table scan holds the transaction",
                ));
            };
            let view = env.txn().catalog()?;
            let tables: Vec<_> = view.tables.values().cloned().collect();
            let statistics = tables
                .iter()
                .filter_map(|t| {
                    Some((t.name.clone(), crate::stats::TableStatistics::of(&view, t)?))
                })
                .collect();
            let snap = catalog_views::Snapshot::take(catalog_views::Source {
                tables,
                sequences: view.sequences.values().cloned().collect(),
                statistics,
                engine: env.engine(),
                user: self.settings.get("session_authorization"),
                database: self.settings.get(DATABASE_KEY),
            });
            drop(env);
            *self.catalog.borrow_mut() = Some(snap);
        }
        Ok(())
    }

    /// Evaluates `e` for one row (or group, with `hooks` a [`GroupHooks`]).
    fn eval_in(&self, e: &Expr, frame: Option<&Frame<'_>>, hooks: &dyn Hooks) -> SqlResult<Datum> {
        let get = |k: &str| self.settings.get(k);
        eval(
            e,
            &Scope {
                columns: &[],
                row: None,
                params: self.params,
                now: self.now,
                setting: &get,
                interrupt: Some(&self.interrupt),
                frame,
                hooks: Some(hooks),
            },
        )
    }

    /// A subquery inside an expression (scalar, EXISTS, IN, ANY): evaluated per row, its
    /// result dropped as soon as the expression has its value, so what it charged is
    /// given back (a correlated subquery over many rows must not add up its results).
    fn expr_subquery(&self, q: &Query, outer: Option<&Frame<'_>>) -> SqlResult<Rel> {
        let mark = self.memory.used();
        let r = self.run_query(q, outer);
        self.memory.release_to(mark);
        r
    }

    /// Charges a key kept in a hash set or map (grouping, DISTINCT, set operations).
    fn charge_key(&self, key: &str) -> SqlResult<()> {
        self.memory.charge(key.len() as u64 + 48)
    }

    /// The session's `work_mem` in bytes: what one sort or hash table may hold before
    /// it spills to temporary files.
    fn work_mem(&self) -> u64 {
        crate::memory::work_mem_bytes(self.settings.get("work_mem").as_deref())
    }

    fn check_interrupt(&self) -> SqlResult<()> {
        if self.interrupt.load(std::sync::atomic::Ordering::Acquire) {
            return Err(SqlError::new(
                "57014",
                "canceling statement due to user request",
            ));
        }
        Ok(())
    }

    pub(crate) fn run_query(&self, q: &Query, outer: Option<&Frame<'_>>) -> SqlResult<Rel> {
        crate::stack::check()?;
        select::check_query(q)?;
        if !q.locks.is_empty() {
            return self.locking_query(q, outer);
        }
        match q.body.as_ref() {
            SetExpr::Select(sel) => self.select(sel, q, outer),
            body => {
                let mut rel = self.set_expr(body, outer)?;
                let mut output = self.output_rows(q, false, outer)?;
                let names: Vec<String> = rel.cols.iter().map(|c| c.name.clone()).collect();
                let sort = SortKeys::new(q, &names, None, self.params)?;
                for row in std::mem::take(&mut rel.rows) {
                    let frame = Frame {
                        cols: &rel.cols,
                        row: &row,
                        outer,
                    };
                    let mut keys = Vec::new();
                    sort.fill(
                        &row,
                        &mut |p| self.eval_in(p.expr, Some(&frame), self),
                        &mut keys,
                    )?;
                    output.push(self, keys, row)?;
                }
                rel.rows = output.finish(self)?;
                Ok(rel)
            }
        }
    }

    fn set_expr(&self, body: &SetExpr, outer: Option<&Frame<'_>>) -> SqlResult<Rel> {
        crate::stack::check()?;
        match body {
            SetExpr::Select(sel) => {
                let q = Query {
                    with: None,
                    body: Box::new(SetExpr::Select(sel.clone())),
                    order_by: None,
                    limit_clause: None,
                    fetch: None,
                    locks: vec![],
                    for_clause: None,
                    settings: None,
                    format_clause: None,
                    pipe_operators: vec![],
                };
                self.select(sel, &q, outer)
            }
            SetExpr::Query(q) => self.run_query(q, outer),
            SetExpr::Values(v) => {
                let mut rel = Rel::default();
                for r in &v.rows {
                    let row = r
                        .content
                        .iter()
                        .map(|e| self.eval_in(e, outer, self))
                        .collect::<SqlResult<Vec<_>>>()?;
                    if rel.cols.is_empty() {
                        rel.cols = (1..=row.len())
                            .map(|i| ColName {
                                qual: None,
                                name: format!("column{i}"),
                                ty: row[i - 1].type_id(),
                                bpchar: false,
                                hidden: false,
                                origin: None,
                            })
                            .collect();
                    } else if row.len() != rel.cols.len() {
                        return Err(SqlError::new(
                            "42601",
                            "VALUES lists must all be the same length",
                        ));
                    }
                    self.memory.charge_row(&row)?;
                    rel.rows.push(row);
                }
                // A VALUES column's type is the widest of its rows' (PostgreSQL resolves
                // it as UNION's: `values (1), (2.5)` is numeric), and every row's value
                // is widened to it.
                for (i, col) in rel.cols.iter_mut().enumerate() {
                    for row in &rel.rows {
                        if let Some(t) = row[i].type_id() {
                            col.ty = match col.ty {
                                Some(a) if widens(a, t) => Some(t),
                                None => Some(t),
                                keep => keep,
                            };
                        }
                    }
                }
                let types: Vec<Option<TypeId>> = rel.cols.iter().map(|c| c.ty).collect();
                for row in &mut rel.rows {
                    conform_row(&types, row)?;
                }
                Ok(rel)
            }
            SetExpr::SetOperation { .. } => {
                // `a UNION b UNION c ...` is a left-deep chain (the parser builds it in
                // a loop): folded from its leftmost branch without recursing down it,
                // so its length is not bounded by the stack.
                let mut spine = Vec::new();
                let mut leftmost = body;
                while let SetExpr::SetOperation { left, .. } = leftmost {
                    spine.push(leftmost);
                    leftmost = left;
                }
                let mut rel = self.set_expr(leftmost, outer)?;
                for node in spine.into_iter().rev() {
                    if let SetExpr::SetOperation {
                        left,
                        op,
                        set_quantifier,
                        right,
                    } = node
                    {
                        self.check_interrupt()?;
                        rel = self.set_operation(rel, left, op, set_quantifier, right, outer)?;
                    }
                }
                Ok(rel)
            }
            other => Err(SqlError::unsupported(format!(
                "{other} is not supported in a query"
            ))),
        }
    }

    /// One set operation of a chain: `l` (the chain so far, from the branches in
    /// `left`) combined with the `right` branch.
    fn set_operation(
        &self,
        mut l: Rel,
        left: &SetExpr,
        op: &SetOperator,
        set_quantifier: &SetQuantifier,
        right: &SetExpr,
        outer: Option<&Frame<'_>>,
    ) -> SqlResult<Rel> {
        let mut r = self.set_expr(right, outer)?;
        if l.cols.len() != r.cols.len() {
            return Err(SqlError::new(
                "42601",
                format!("each {op} query must have the same number of columns"),
            ));
        }
        for (i, (a, b)) in l.cols.iter().zip(&r.cols).enumerate() {
            if let (Some(ta), Some(tb)) = (a.ty, b.ty) {
                if type_category(ta) != type_category(tb)
                    && !literal_item(left, i)
                    && !literal_item(right, i)
                {
                    return Err(SqlError::new(
                        "42804",
                        format!(
                            "{op} types {} and {} cannot be matched",
                            ta.name(),
                            tb.name()
                        ),
                    ));
                }
            }
        }
        // An untyped literal column takes the other side's type, as PostgreSQL
        // resolves `select 1 union select '1'` to integer (one row).
        for i in 0..l.cols.len() {
            let (ta, tb) = (l.cols[i].ty, r.cols[i].ty);
            if string_literal_item(right, i) && !string_literal_item(left, i) {
                if let Some(t) = ta.filter(|t| *t != TypeId::Text) {
                    retype_literals(&mut r, i, t)?;
                }
            } else if string_literal_item(left, i) && !string_literal_item(right, i) {
                if let Some(t) = tb.filter(|t| *t != TypeId::Text) {
                    retype_literals(&mut l, i, t)?;
                }
            }
        }
        let all = matches!(set_quantifier, SetQuantifier::All);
        if !all || !matches!(op, SetOperator::Union) {
            for x in l.rows.iter().chain(&r.rows) {
                check_keyable(x)?;
            }
        }
        // How many times each right row occurs (INTERSECT ALL and EXCEPT ALL
        // match rows one for one, as multisets).
        let mut right_keys: HashMap<String, usize> = HashMap::new();
        if !matches!(op, SetOperator::Union) {
            for x in &r.rows {
                let k = row_key(x);
                self.charge_key(&k)?;
                *right_keys.entry(k).or_default() += 1;
            }
        }
        let mut take = |x: &Vec<Datum>| -> bool {
            match right_keys.get_mut(&row_key(x)) {
                Some(n) if *n > 0 => {
                    if all {
                        *n -= 1;
                    }
                    true
                }
                _ => false,
            }
        };
        l.rows = match op {
            SetOperator::Union => {
                let mut rows = l.rows;
                rows.extend(r.rows);
                rows
            }
            SetOperator::Intersect => l.rows.into_iter().filter(|x| take(x)).collect(),
            SetOperator::Except | SetOperator::Minus => {
                l.rows.into_iter().filter(|x| !take(x)).collect()
            }
        };
        if !all {
            let mut seen = HashSet::new();
            let mut charged = Ok(());
            l.rows.retain(|x| {
                let k = row_key(x);
                if charged.is_ok() {
                    charged = self.charge_key(&k);
                }
                seen.insert(k)
            });
            charged?;
        }
        // Each column's type is the wider of the two sides' (PostgreSQL resolves a set
        // operation's columns as CASE's: `select 1 union select 2.5` is numeric).
        for (c, rc) in l.cols.iter_mut().zip(&r.cols) {
            c.ty = match (c.ty, rc.ty) {
                (Some(a), Some(b)) if widens(a, b) => Some(b),
                (a, b) => a.or(b),
            };
        }
        let types: Vec<Option<TypeId>> = l.cols.iter().map(|c| c.ty).collect();
        for row in &mut l.rows {
            conform_row(&types, row)?;
        }
        Ok(l)
    }

    /// ORDER BY keys of one output row (see [`SortKeys`], here resolved for the one
    /// row: a group's output).
    fn sort_keys(
        &self,
        q: &Query,
        names: &[String],
        out: &[Datum],
        eval_source: &mut dyn FnMut(&Expr) -> SqlResult<Datum>,
    ) -> SqlResult<Vec<Datum>> {
        let mut keys = Vec::new();
        SortKeys::new(q, names, None, self.params)?.fill(
            out,
            &mut |p| eval_source(p.expr),
            &mut keys,
        )?;
        Ok(keys)
    }

    /// The collector of a query level's output rows: applies DISTINCT (first
    /// occurrence kept) as rows arrive, then ORDER BY and LIMIT / OFFSET. LIMIT and
    /// OFFSET are evaluated here, before any row is read, as PostgreSQL does; under a
    /// LIMIT with ORDER BY only the best `limit + offset` rows are kept (top-N heap).
    fn output_rows(
        &self,
        q: &Query,
        distinct: bool,
        outer: Option<&Frame<'_>>,
    ) -> SqlResult<OutputRows> {
        let dirs = match &q.order_by {
            Some(ob) => match &ob.kind {
                ast::OrderByKind::Expressions(exprs) => Some(sort_dirs(exprs)),
                ast::OrderByKind::All(_) => None,
            },
            None => None,
        };
        let (skip, take) = self.limits(q, outer)?;
        let top = match &dirs {
            Some(d) if take != usize::MAX => {
                Some(sort::TopN::new(skip.saturating_add(take), d.clone()))
            }
            _ => None,
        };
        Ok(OutputRows {
            dirs,
            skip,
            take,
            top,
            all: Vec::new(),
            held: 0,
            work_mem: self.work_mem(),
            runs: Vec::new(),
            seen: distinct.then(HashSet::new),
            seq: 0,
        })
    }

    /// LIMIT / OFFSET (or FETCH FIRST) as (rows skipped, rows taken).
    fn limits(&self, q: &Query, outer: Option<&Frame<'_>>) -> SqlResult<(usize, usize)> {
        // PostgreSQL: 2201W for LIMIT, 2201X for OFFSET.
        let count = |e: &Expr, offset: bool| -> SqlResult<Option<usize>> {
            match coerce(self.eval_in(e, outer, self)?, TypeId::Int8)? {
                Datum::Null => Ok(None),
                Datum::Int8(n) if n >= 0 => Ok(Some(n as usize)),
                _ if offset => Err(SqlError::new("2201X", "OFFSET must not be negative")),
                _ => Err(SqlError::new("2201W", "LIMIT must not be negative")),
            }
        };
        let (mut skip, mut take) = (0usize, usize::MAX);
        match &q.limit_clause {
            None => {}
            Some(ast::LimitClause::LimitOffset {
                limit,
                offset,
                limit_by,
            }) => {
                if !limit_by.is_empty() {
                    return Err(SqlError::unsupported("LIMIT BY is not supported"));
                }
                if let Some(o) = offset {
                    skip = count(&o.value, true)?.unwrap_or(0);
                }
                if let Some(l) = limit {
                    take = count(l, false)?.unwrap_or(usize::MAX);
                }
            }
            Some(ast::LimitClause::OffsetCommaLimit { .. }) => {
                return Err(SqlError::unsupported(
                    "LIMIT offset, count is not supported",
                ))
            }
        }
        if let Some(ast::Fetch {
            with_ties,
            percent,
            quantity,
        }) = &q.fetch
        {
            if *with_ties {
                return Err(SqlError::unsupported(
                    "FETCH FIRST ... WITH TIES is not supported",
                ));
            }
            if *percent {
                return Err(SqlError::unsupported(
                    "FETCH FIRST ... PERCENT is not supported",
                ));
            }
            if matches!(
                &q.limit_clause,
                Some(ast::LimitClause::LimitOffset { limit: Some(_), .. })
            ) {
                return Err(SqlError::syntax("multiple LIMIT clauses not allowed"));
            }
            take = match quantity {
                Some(e) => count(e, false)?.unwrap_or(usize::MAX),
                None => 1,
            };
        }
        Ok((skip, take))
    }
}

/// A query level's ORDER BY keys, resolved once: an ordinal or an output column name
/// picks the output value (PostgreSQL's rule for bare names), anything else is
/// evaluated (through its fast form over the source row where it has one).
struct SortKeys<'q> {
    keys: Vec<SortKey<'q>>,
}

enum SortKey<'q> {
    /// The output row's value at this position.
    Output(usize),
    /// An expression over the source row.
    Eval(Prepared<'q>),
}

impl<'q> SortKeys<'q> {
    /// The keys of `q`'s ORDER BY over output columns `names`; `source` resolves the
    /// evaluated keys' column names for their fast forms (`None`: no fast forms). An
    /// ordinal past the select list is 42P10, as PostgreSQL says before reading a row.
    fn new(
        q: &'q Query,
        names: &[String],
        source: Option<&[ColName]>,
        params: &[Datum],
    ) -> SqlResult<SortKeys<'q>> {
        let Some(ob) = &q.order_by else {
            return Ok(SortKeys { keys: Vec::new() });
        };
        let ast::OrderByKind::Expressions(exprs) = &ob.kind else {
            return Err(SqlError::unsupported("ORDER BY ALL is not supported"));
        };
        let keys = exprs
            .iter()
            .map(|o| {
                let picked = match &o.expr {
                    Expr::Value(v) => match &v.value {
                        ast::Value::Number(n, _) => {
                            let i: usize = n.parse().unwrap_or(0);
                            if i == 0 || i > names.len() {
                                return Err(SqlError::new(
                                    "42P10",
                                    format!("ORDER BY position {n} is not in select list"),
                                ));
                            }
                            Some(i - 1)
                        }
                        _ => None,
                    },
                    Expr::Identifier(id) => {
                        let id = crate::names::ident_ref(id);
                        names.iter().position(|n| *n == *id)
                    }
                    _ => None,
                };
                Ok(match picked {
                    Some(i) => SortKey::Output(i),
                    None => SortKey::Eval(match source {
                        Some(cols) => Prepared::new(&o.expr, &Columns::Frame(cols), params),
                        None => Prepared {
                            expr: &o.expr,
                            fast: None,
                        },
                    }),
                })
            })
            .collect::<SqlResult<Vec<_>>>()?;
        Ok(SortKeys { keys })
    }

    /// The keys as a parallel participant evaluates them, or `None` when one has no
    /// fast form.
    fn parallel_form(&self) -> Option<Vec<parallel::TopKey<'_>>> {
        self.keys
            .iter()
            .map(|k| match k {
                SortKey::Output(i) => Some(parallel::TopKey::Output(*i)),
                SortKey::Eval(p) => p.fast.as_ref().map(parallel::TopKey::Eval),
            })
            .collect()
    }

    /// The expressions evaluated over the source row (not picked from the output).
    fn evaluated(&self) -> impl Iterator<Item = &'q Expr> + '_ {
        self.keys.iter().filter_map(|k| match k {
            SortKey::Eval(p) => Some(p.expr),
            SortKey::Output(_) => None,
        })
    }

    /// The keys of one output row `out` into `keys` (cleared first); `eval` evaluates
    /// an expression key (its fast form first, when the caller has the source row).
    fn fill(
        &self,
        out: &[Datum],
        eval: &mut dyn FnMut(&Prepared<'q>) -> SqlResult<Datum>,
        keys: &mut Vec<Datum>,
    ) -> SqlResult<()> {
        keys.clear();
        for k in &self.keys {
            let key = match k {
                SortKey::Output(i) => out[*i].clone(),
                SortKey::Eval(p) => eval(p)?,
            };
            // json has no ordering in PostgreSQL; jsonb's is not walrus's text order.
            match &key {
                Datum::Json(_) => {
                    return Err(SqlError::new(
                        "42883",
                        "could not identify an ordering operator for type json",
                    ))
                }
                Datum::Jsonb(_) => {
                    return Err(SqlError::unsupported(
                        "ORDER BY a jsonb value is not supported",
                    ))
                }
                _ => {}
            }
            keys.push(key);
        }
        Ok(())
    }
}

/// A query level's output rows on their way to ORDER BY / LIMIT (see
/// [`Executor::output_rows`]).
pub(super) struct OutputRows {
    /// ORDER BY directions; `None` without ORDER BY.
    dirs: Option<Vec<(bool, bool)>>,
    skip: usize,
    take: usize,
    /// The bounded heap when both ORDER BY and LIMIT are given.
    top: Option<sort::TopN>,
    /// Every row otherwise.
    all: Vec<sort::SortEntry>,
    /// What `all` is charged (since the last sorted run was written out).
    held: u64,
    /// Past this many bytes a sort writes `all` out as a sorted run.
    work_mem: u64,
    /// Sorted runs on disk, merged by `finish`.
    runs: Vec<spill::SpillFile>,
    /// DISTINCT's keys of the rows kept so far.
    seen: Option<HashSet<String>>,
    seq: u64,
}

impl OutputRows {
    /// Whether the rows kept already give the whole result: a LIMIT without ORDER BY
    /// that has its `offset + limit` rows (more rows would be dropped unread).
    fn full(&self) -> bool {
        self.dirs.is_none()
            && self.top.is_none()
            && self.take != usize::MAX
            && self.all.len() >= self.skip.saturating_add(self.take)
    }

    /// [`OutputRows::push`] of borrowed keys and row, copied only when kept: a row the
    /// full top-N heap would turn away costs one comparison and no allocation.
    fn offer(&mut self, exec: &Executor<'_>, keys: &[Datum], row: &[Datum]) -> SqlResult<()> {
        if self.seen.is_none() {
            if let Some(top) = &self.top {
                if top.rejects(keys, self.seq) {
                    self.seq += 1;
                    return Ok(());
                }
            }
        }
        self.push(exec, keys.to_vec(), row.to_vec())
    }

    /// The rows a top-N heap keeps (`offset + limit`, with ORDER BY and LIMIT and no
    /// DISTINCT), with the ORDER BY directions; `None` for any other collector.
    fn top_n_cap(&self) -> Option<(usize, &[(bool, bool)])> {
        match (&self.top, &self.dirs) {
            (Some(_), Some(dirs)) if self.seen.is_none() => {
                Some((self.skip.saturating_add(self.take), dirs))
            }
            _ => None,
        }
    }

    /// [`OutputRows::push`] of an entry numbered elsewhere (a parallel participant's,
    /// by tid): its number orders it among ties.
    fn push_numbered(&mut self, exec: &Executor<'_>, e: sort::SortEntry) -> SqlResult<()> {
        self.seq = e.seq;
        self.push(exec, e.keys, e.row)
    }

    /// Whether rows pass through unchanged and all of them are kept, in arrival order
    /// (no ORDER BY, DISTINCT, LIMIT or OFFSET): then they may go straight to a sink.
    fn passes_through(&self) -> bool {
        self.dirs.is_none()
            && self.seen.is_none()
            && self.top.is_none()
            && self.skip == 0
            && self.take == usize::MAX
    }

    /// Adds one output row with its ORDER BY keys, charging what is kept.
    fn push(&mut self, exec: &Executor<'_>, keys: Vec<Datum>, row: Vec<Datum>) -> SqlResult<()> {
        if let Some(seen) = &mut self.seen {
            check_keyable(&row)?;
            let k = row_key(&row);
            if seen.contains(&k) {
                return Ok(());
            }
            exec.charge_key(&k)?;
            seen.insert(k);
        }
        let bytes = crate::memory::row_bytes(&row) + crate::memory::row_bytes(&keys);
        let entry = sort::SortEntry {
            keys,
            seq: self.seq,
            row,
        };
        self.seq += 1;
        match &mut self.top {
            Some(top) => {
                if top.push(entry) {
                    exec.memory.charge(bytes)?;
                    self.held += bytes;
                    if self.held > self.work_mem {
                        // A LIMIT too large for work_mem: what the heap holds becomes the
                        // first rows of an external sort (same order, same rows kept).
                        if let Some(top) = self.top.take() {
                            self.all = top.into_sorted();
                        }
                        self.write_run(exec)?;
                    }
                }
            }
            None => {
                exec.memory.charge(bytes)?;
                self.all.push(entry);
                self.held += bytes;
                if self.held > self.work_mem && self.dirs.is_some() {
                    self.write_run(exec)?;
                }
            }
        }
        Ok(())
    }

    /// Sorts the rows held and writes them out as one run (each entry as a row of its
    /// arrival number, key count, keys and row), giving their memory back.
    fn write_run(&mut self, exec: &Executor<'_>) -> SqlResult<()> {
        let Some(dirs) = &self.dirs else {
            return Ok(());
        };
        self.all.sort_by(|a, b| sort::entry_order(a, b, dirs));
        let mut run = spill::SpillFile::create()?;
        let mut buf = Vec::new();
        for e in self.all.drain(..) {
            buf.clear();
            buf.push(Datum::Int8(e.seq as i64));
            buf.push(Datum::Int8(e.keys.len() as i64));
            buf.extend(e.keys);
            buf.extend(e.row);
            run.write_row(&buf)?;
        }
        self.runs.push(run);
        exec.memory
            .release_to(exec.memory.used().saturating_sub(self.held));
        self.held = 0;
        exec.check_interrupt()
    }

    /// Merges the sorted runs and the rows still held, in order, until `limit` rows.
    fn merge_runs(&mut self, exec: &Executor<'_>, limit: usize) -> SqlResult<Vec<sort::SortEntry>> {
        let dirs = self.dirs.clone().unwrap_or_default();
        let mut rest = std::mem::take(&mut self.all);
        exec.memory
            .release_to(exec.memory.used().saturating_sub(self.held));
        self.held = 0;
        rest.sort_by(|a, b| sort::entry_order(a, b, &dirs));
        let mut rest = rest.into_iter();
        let mut readers = Vec::with_capacity(self.runs.len());
        for r in &mut self.runs {
            readers.push(r.reader()?);
        }
        let read = |rd: &mut spill::SpillReader| -> SqlResult<Option<sort::SortEntry>> {
            let Some(mut v) = rd.next_row()? else {
                return Ok(None);
            };
            let (seq, nkeys) = match (&v[0], &v[1]) {
                (Datum::Int8(s), Datum::Int8(k)) => (*s as u64, *k as usize),
                _ => return Err(SqlError::new("XX001", "bad sort run row")),
            };
            let row = v.split_off(2 + nkeys);
            let keys = v.split_off(2);
            Ok(Some(sort::SortEntry { keys, seq, row }))
        };
        // The head of each run, then of the rows held (last).
        let mut heads: Vec<Option<sort::SortEntry>> = Vec::with_capacity(readers.len() + 1);
        for rd in &mut readers {
            heads.push(read(rd)?);
        }
        heads.push(rest.next());
        let mut out = Vec::new();
        while out.len() < limit {
            let mut best: Option<usize> = None;
            for (i, h) in heads.iter().enumerate() {
                if let Some(e) = h {
                    let better = match best.and_then(|b| heads[b].as_ref()) {
                        None => true,
                        Some(b) => sort::entry_order(e, b, &dirs).is_lt(),
                    };
                    if better {
                        best = Some(i);
                    }
                }
            }
            let Some(b) = best else { break };
            let next = if b < readers.len() {
                read(&mut readers[b])?
            } else {
                rest.next()
            };
            if let Some(e) = std::mem::replace(&mut heads[b], next) {
                exec.memory
                    .charge(crate::memory::row_bytes(&e.row) + crate::memory::row_bytes(&e.keys))?;
                out.push(e);
            }
            if out.len() % 1024 == 1023 {
                exec.check_interrupt()?;
            }
        }
        Ok(out)
    }

    /// The rows in ORDER BY order (stable), OFFSET and LIMIT applied.
    fn finish(mut self, exec: &Executor<'_>) -> SqlResult<Vec<Vec<Datum>>> {
        if !self.runs.is_empty() {
            let limit = self.skip.saturating_add(self.take);
            let merged = self.merge_runs(exec, limit)?;
            return Ok(merged.into_iter().skip(self.skip).map(|e| e.row).collect());
        }
        let sorted = match (self.top, self.dirs) {
            (Some(top), _) => top.into_sorted(),
            (None, Some(dirs)) => {
                let mut all = self.all;
                // The stable sort's scratch buffer: half the entries.
                exec.memory
                    .charge((all.len() / 2 * std::mem::size_of::<sort::SortEntry>()) as u64)?;
                all.sort_by(|a, b| compare_keys(&a.keys, &b.keys, &dirs));
                all
            }
            (None, None) => self.all,
        };
        Ok(sorted
            .into_iter()
            .skip(self.skip)
            .take(self.take)
            .map(|e| e.row)
            .collect())
    }
}
