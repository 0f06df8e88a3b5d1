//! Parallel aggregation over one table: PostgreSQL's Finalize Aggregate → Gather →
//! Partial Aggregate → Parallel Seq Scan (HashAggregate with GROUP BY), for a query
//! level whose aggregates, WHERE clause and grouping keys are simple enough for the
//! threads to evaluate alone; and parallel top-N ([`top_n`]): Limit → Gather Merge →
//! Sort → Parallel Seq Scan, each participant keeping its own best rows.
//!
//! The session's thread and its helpers scan runs of blocks in turn
//! ([`walrus_engine::engine::Transaction::scan_columns_parallel`]), each folding the
//! rows it reads into its own hash table of groups; the session then merges the tables
//! key by key ([`AggState::merge`]) and puts the groups in the order of their first
//! rows, the serial scan's order of first appearance. The level may be a lone table or
//! an inner equi-join of one with a hashed right side whose key equalities decide alone
//! (participants fold the joined rows). Groups are held within `work_mem`, as the
//! serial plan holds them: a participant's table, or the merged one, past it sends the
//! level to the serial plan, which spills as it must.
//!
//! The answer must be exactly the serial scan's, so the plan is
//! taken only where merging is exact — counts, integer and numeric sums and averages,
//! min / max, bool_and / bool_or — and whenever a participant meets something it cannot
//! evaluate on its own (an expression outside `expr::compiled`, an error, whose order
//! the serial scan decides) or a merge would not be exact (min/max ties between values
//! that print differently), the level runs again serially and gives the serial answer
//! or error. Helpers come from [`MAX_PARALLEL_WORKERS`] shared by all sessions.

use std::collections::hash_map::Entry;
use std::sync::atomic::{AtomicU64, Ordering};

use sqlparser::ast::Expr;
use walrus_base::Tid;
use walrus_engine::access::datum::{Datum, TypeId};
use walrus_engine::catalog::{ColumnDef, TableDef};
use walrus_engine::engine::MAX_PARALLEL_WORKERS;

use super::aggregate::{AggState, StreamCall};
use super::from::{ProbeJoin, ProbeMemo};
use super::sort::{SortEntry, TopN};
use super::{dml, Env, KeyMap, KeyPart};
use crate::error::SqlResult;
use crate::expr::compiled::{Columns, Fast, Prepared};
use crate::plan::{choose_access, Access};

/// Parallel plans that fell back to the serial scan (`walrus_stat_parallel`).
static SERIAL_RERUNS: AtomicU64 = AtomicU64::new(0);

/// How many parallel plans ran again serially since the process started.
pub(crate) fn serial_reruns() -> u64 {
    SERIAL_RERUNS.load(Ordering::Relaxed)
}

/// PostgreSQL's default `min_parallel_table_scan_size` (8 MB) in pages: a smaller
/// table is scanned by the session alone.
pub(super) const MIN_PARALLEL_TABLE_PAGES: u32 = 1024;

pub(crate) const WORKERS_PER_GATHER: &str = "max_parallel_workers_per_gather";

/// `max_parallel_workers_per_gather` from its SET text: PostgreSQL's range, 0..1024,
/// default 2 (its errors: [`super::analyze::integer_setting`]).
pub(crate) fn workers_per_gather_setting(value: &str) -> SqlResult<i32> {
    super::analyze::integer_setting(WORKERS_PER_GATHER, value, 0, 1024, 2)
}

/// `max_parallel_workers_per_gather` as the session has it (checked when SET), at most
/// the helpers all sessions share.
fn workers_per_gather(get: &dyn Fn(&str) -> Option<String>) -> usize {
    get(WORKERS_PER_GATHER)
        .and_then(|v| workers_per_gather_setting(&v).ok())
        .unwrap_or(2)
        .clamp(0, MAX_PARALLEL_WORKERS as i32) as usize
}

/// The helpers PostgreSQL plans for a parallel scan of `pages` pages: one from
/// [`MIN_PARALLEL_TABLE_PAGES`], one more each time the table triples, at most
/// `per_gather`.
fn planned_workers(pages: u32, per_gather: usize) -> usize {
    if pages < MIN_PARALLEL_TABLE_PAGES || per_gather == 0 {
        return 0;
    }
    let (mut n, mut threshold) = (1usize, MIN_PARALLEL_TABLE_PAGES as u64 * 3);
    while pages as u64 >= threshold && n < per_gather {
        n += 1;
        threshold *= 3;
    }
    n
}

/// Whether a participant can evaluate `call` alone and its partial states merge
/// exactly: no FILTER, the argument compiled (`expr::compiled`), and for sum / avg an
/// integer or numeric argument (a float total's rounding depends on the row order).
fn call_runs_in_parallel(call: &StreamCall, row: &RowShape<'_>, params: &[Datum]) -> bool {
    if call.filter().is_some() {
        return false;
    }
    let Some(arg) = call.arg() else {
        return call.star();
    };
    if row.compile(arg, params).is_none() {
        return false;
    }
    match call.name() {
        "sum" | "avg" => matches!(
            crate::plan::static_type(arg, &row.typed()),
            Some(TypeId::Int2 | TypeId::Int4 | TypeId::Int8 | TypeId::Numeric)
        ),
        _ => true,
    }
}

/// The rows a parallel level folds: the table's own (WHERE checked by the scan's
/// rules), or the table's joined to the hashed right side of a probe join (WHERE
/// checked on the joined row, as the serial probe does).
#[derive(Clone, Copy)]
pub(super) enum RowShape<'a> {
    Table(&'a TableDef),
    Joined(&'a ProbeJoin),
}

impl RowShape<'_> {
    fn compile(&self, e: &Expr, params: &[Datum]) -> Option<Fast> {
        match self {
            RowShape::Table(def) => Fast::compile(e, &Columns::Table(&def.columns), params),
            RowShape::Joined(pj) => Fast::compile(e, &Columns::Frame(&pj.cols), params),
        }
    }

    fn typed(&self) -> Vec<ColumnDef> {
        match self {
            RowShape::Table(def) => def.columns.clone(),
            RowShape::Joined(pj) => crate::plan::typed_columns(&pj.cols),
        }
    }
}

/// The helper threads an aggregate or top-N query level over `def` alone is planned
/// with (0: it runs serially): every call runs in parallel ([`call_runs_in_parallel`]),
/// WHERE and the `exprs` the participants evaluate (GROUP BY keys; a top-N level's
/// select list and sort keys) are absent or compiled, the access path is a sequential
/// scan, and the table is large enough. EXPLAIN and the executor both ask this, so the
/// plan shown is the plan run.
#[allow(clippy::too_many_arguments)]
pub(super) fn level_workers(
    env: &mut dyn Env,
    def: &TableDef,
    row: RowShape<'_>,
    filter: Option<&Expr>,
    exprs: &[&Expr],
    params: &[Datum],
    calls: &[StreamCall],
) -> SqlResult<usize> {
    let (now, settings) = (env.now(), env.settings());
    let get = move |n: &str| settings.get(n);
    let per_gather = workers_per_gather(&get);
    if per_gather == 0
        || calls
            .iter()
            .any(|c| !call_runs_in_parallel(c, &row, params))
    {
        return Ok(0);
    }
    let compiles = |e: &Expr| row.compile(e, params).is_some();
    if filter.is_some_and(|f| !compiles(f)) || exprs.iter().any(|g| !compiles(g)) {
        return Ok(0);
    }
    let pages = env.txn().table_pages(def)?;
    if planned_workers(pages, per_gather) == 0 {
        return Ok(0);
    }
    // A probe join scans its left table whole; WHERE applies to the joined rows.
    let access_filter = match row {
        RowShape::Table(_) => filter,
        RowShape::Joined(_) => None,
    };
    let access = choose_access(def, access_filter, params, now, &get, &mut || {
        dml::table_statistics(env, def)
    });
    Ok(match access {
        Access::Scan => planned_workers(pages, per_gather),
        _ => 0,
    })
}

/// One group of one participant: its first row (by tid) and its states.
struct Group {
    /// (tid of the table row, place among that row's join matches), and the row.
    first: ((Tid, u32), Vec<Datum>),
    states: Vec<AggState>,
    /// What the group holds, by the serial group table's measure.
    bytes: u64,
}

/// One participant's share: its groups by key, the memory they take, and whether it
/// met something only the serial scan may answer.
struct Partial<'a> {
    /// Each group's place in `groups` by key.
    index: KeyMap<usize>,
    groups: Vec<Group>,
    bytes: u64,
    bail: bool,
    /// The current row's key, built here to look its group up without allocating.
    key: Vec<KeyPart>,
    /// The last row's key and group: a run of rows in one group (a table clustered on
    /// the key) looks it up once.
    last_key: Vec<KeyPart>,
    last_group: Option<usize>,
    /// A probe join's last key and hits, and its joined row, rebuilt in place: the left
    /// table's wanted columns from each row (the others are NULL in every row), the right
    /// side's only when the matched right row changes (`joined_right`).
    probe: ProbeMemo<'a>,
    joined: Vec<Datum>,
    joined_right: Option<usize>,
}

impl Partial<'_> {
    /// The groups with their keys.
    fn into_groups(self) -> impl Iterator<Item = (Vec<KeyPart>, Group)> {
        let mut keys: Vec<(Vec<KeyPart>, usize)> = self.index.into_iter().collect();
        keys.sort_by_key(|(_, at)| *at);
        keys.into_iter().map(|(k, _)| k).zip(self.groups)
    }
}

/// The groups a parallel aggregation found, each as its first row in scan order and
/// its merged states, in the order of those rows (the serial scan's order of first
/// appearance); `None` when the level must run serially.
pub(super) type Gathered = Option<Vec<(Vec<Datum>, Vec<AggState>)>>;

/// What the participants evaluate, compiled against the table's row.
pub(super) struct ParallelLevel<'a> {
    pub row: RowShape<'a>,
    pub wanted: &'a [bool],
    pub filter: Option<&'a Expr>,
    pub group_keys: &'a [Option<Fast>],
    pub calls: &'a [StreamCall],
    pub fast_args: &'a [Option<Fast>],
    /// Each participant's hash table must stay within it, else the level runs serially
    /// (where it spills as `work_mem` says).
    pub work_mem: u64,
}

/// Runs the parallel plan with `workers` helpers.
pub(super) fn aggregate<'a>(
    env: &mut dyn Env,
    def: &TableDef,
    params: &[Datum],
    level: &ParallelLevel<'a>,
    workers: usize,
) -> SqlResult<Gathered> {
    let where_fast = match level.filter {
        Some(f) => match level.row.compile(f, params) {
            Some(w) => Some(w),
            None => return Ok(None),
        },
        None => None,
    };
    let Some(keys) = level
        .group_keys
        .iter()
        .map(Option::as_ref)
        .collect::<Option<Vec<&Fast>>>()
    else {
        return Ok(None);
    };
    // What the threads need of each call, without the call's AST node.
    let mut plan: Vec<(String, bool, Option<&Fast>)> = Vec::with_capacity(level.calls.len());
    for (c, fast) in level.calls.iter().zip(level.fast_args) {
        if !c.star() && fast.is_none() {
            return Ok(None);
        }
        plan.push((c.name().to_string(), c.star(), fast.as_ref()));
    }
    let state_bytes: u64 = plan
        .iter()
        .map(|(name, _, _)| AggState::start(name).bytes())
        .sum();
    let work_mem = level.work_mem;
    let init = || Partial {
        index: KeyMap::default(),
        groups: Vec::new(),
        bytes: 0,
        bail: false,
        key: Vec::with_capacity(keys.len()),
        last_key: Vec::with_capacity(keys.len()),
        last_group: None,
        probe: ProbeMemo::default(),
        joined: Vec::new(),
        joined_right: None,
    };
    // The group of the key in `p.key`, made for `row` when new; `None`: past
    // `work_mem` (bailed).
    let group_slot = |p: &mut Partial<'a>, at: (Tid, u32), row: &[Datum]| -> Option<usize> {
        if let Some(&slot) = p.index.get(p.key.as_slice()) {
            return Some(slot);
        }
        let bytes = super::select::group_entry_bytes(&p.key, row, state_bytes);
        p.bytes += bytes;
        if p.bytes > work_mem {
            p.bail = true;
            return None;
        }
        p.groups.push(Group {
            bytes,
            first: (at, row.to_vec()),
            states: plan
                .iter()
                .map(|(name, _, _)| AggState::start(name))
                .collect(),
        });
        p.index.insert(p.key.clone(), p.groups.len() - 1);
        Some(p.groups.len() - 1)
    };
    // One row of the level (a joined row under a probe join); false: stop, bailed.
    let fold = |p: &mut Partial<'a>, at: (Tid, u32), row: &[Datum]| -> bool {
        if let Some(w) = &where_fast {
            match w.eval(row) {
                Ok(Some(Datum::Bool(true))) => {}
                Ok(Some(Datum::Bool(false) | Datum::Null)) => return true,
                _ => {
                    p.bail = true;
                    return false;
                }
            }
        }
        p.key.clear();
        for k in &keys {
            match k.eval(row) {
                // json has no equality: the serial path's error.
                Ok(Some(v)) if !matches!(v, Datum::Json(_)) => p.key.push(KeyPart::of(&v)),
                _ => {
                    p.bail = true;
                    return false;
                }
            }
        }
        let slot = match p.last_group {
            Some(slot) if p.key == p.last_key => slot,
            _ => {
                let Some(slot) = group_slot(p, at, row) else {
                    return false;
                };
                std::mem::swap(&mut p.key, &mut p.last_key);
                p.last_group = Some(slot);
                slot
            }
        };
        let group = &mut p.groups[slot];
        for ((name, star, fast), state) in plan.iter().zip(group.states.iter_mut()) {
            let v = match fast {
                None => Datum::Null,
                // A column read in place, as the serial path does (`stream_row`).
                Some(Fast::Column(i)) => {
                    state.add_column(name, row, *i);
                    continue;
                }
                Some(f) => match f.eval(row) {
                    Ok(Some(v)) => v,
                    _ => {
                        p.bail = true;
                        return false;
                    }
                },
            };
            state.add(name, *star, v);
        }
        true
    };
    let probe = match level.row {
        RowShape::Joined(pj) => Some(pj),
        RowShape::Table(_) => None,
    };
    let wanted_left: Vec<usize> = (0..level.wanted.len())
        .filter(|&i| level.wanted[i])
        .collect();
    let each = |p: &mut Partial<'a>, tid: Tid, lrow: &[Datum]| {
        let Some(pj) = probe else {
            return Ok(fold(p, (tid, 0), lrow));
        };
        let mut joined = std::mem::take(&mut p.joined);
        let more = match pj.plain_hits(lrow, &mut p.probe) {
            None => {
                p.bail = true;
                false
            }
            Some(hits) => hits.iter().enumerate().all(|(i, &ri)| {
                if joined.is_empty() {
                    joined.extend_from_slice(lrow);
                    joined.extend_from_slice(pj.right_row(ri));
                } else {
                    for &c in &wanted_left {
                        joined[c].clone_from(&lrow[c]);
                    }
                    if p.joined_right != Some(ri) {
                        joined[lrow.len()..].clone_from_slice(pj.right_row(ri));
                    }
                }
                p.joined_right = Some(ri);
                fold(p, (tid, i as u32), &joined)
            }),
        };
        p.joined = joined;
        Ok(more)
    };
    let partials = env
        .txn()
        .scan_columns_parallel(def, level.wanted, workers, init, each)?;
    let rerun = || {
        SERIAL_RERUNS.fetch_add(1, Ordering::Relaxed);
        Ok(None)
    };
    if partials.iter().any(|p| p.bail) {
        return rerun();
    }
    let mut total: KeyMap<Group> = KeyMap::default();
    let mut held = 0u64;
    for p in partials {
        for (key, g) in p.into_groups() {
            match total.entry(key) {
                Entry::Vacant(e) => {
                    held += g.bytes;
                    if held > work_mem {
                        return rerun();
                    }
                    e.insert(g);
                }
                Entry::Occupied(mut e) => {
                    let t = e.get_mut();
                    for (((name, _, _), state), other) in
                        plan.iter().zip(t.states.iter_mut()).zip(g.states)
                    {
                        if !state.merge(name, other) {
                            return rerun();
                        }
                    }
                    if g.first.0 < t.first.0 {
                        t.first = g.first;
                    }
                }
            }
        }
    }
    let mut groups: Vec<Group> = total.into_values().collect();
    groups.sort_by_key(|g| g.first.0);
    Ok(Some(
        groups.into_iter().map(|g| (g.first.1, g.states)).collect(),
    ))
}

/// Past this many rows (`offset + limit`) a top-N level runs serially: each
/// participant would hold that many rows.
pub(super) const PARALLEL_TOP_N_MAX_ROWS: usize = 10_000;

/// The helpers a lone-table ORDER BY ... LIMIT level over `def` is planned with (0: it
/// runs serially): at most [`PARALLEL_TOP_N_MAX_ROWS`] rows kept (`cap`: offset +
/// limit), every select-list item and evaluated sort key with a fast form, and what
/// [`level_workers`] asks of the scan. EXPLAIN and the executor both ask this.
pub(super) fn top_n_workers(
    env: &mut dyn Env,
    def: &TableDef,
    filter: Option<&Expr>,
    items: &[Prepared<'_>],
    sort: &super::SortKeys<'_>,
    cap: usize,
    params: &[Datum],
) -> SqlResult<usize> {
    if cap > PARALLEL_TOP_N_MAX_ROWS
        || items.iter().any(|p| p.fast.is_none())
        || sort.parallel_form().is_none()
    {
        return Ok(0);
    }
    let evaluated: Vec<&Expr> = items
        .iter()
        .map(|p| p.expr)
        .chain(sort.evaluated())
        .collect();
    level_workers(
        env,
        def,
        RowShape::Table(def),
        filter,
        &evaluated,
        params,
        &[],
    )
}

/// A sort key of a parallel top-N level: an output column, or an expression over the
/// table's row.
pub(super) enum TopKey<'a> {
    Output(usize),
    Eval(&'a Fast),
}

/// What a top-N participant holds: its best rows so far and the buffers of the row
/// being looked at.
struct TopPartial {
    top: TopN,
    bail: bool,
    out: Vec<Datum>,
    keys: Vec<Datum>,
}

/// Parallel top-N (PostgreSQL's Gather Merge over per-worker sorts): each participant
/// keeps the best `cap` rows it reads in a bounded heap, each row numbered by its tid —
/// the serial scan's arrival order, so ties fall exactly as there. The entries of every
/// participant are returned for the session's collector, which keeps the best `cap` of
/// them by the same (keys, number) order: the serial answer. `None` (counted as a
/// serial rerun) when a participant met a value or error only the serial scan may
/// answer.
#[allow(clippy::too_many_arguments)]
pub(super) fn top_n(
    env: &mut dyn Env,
    def: &TableDef,
    params: &[Datum],
    wanted: &[bool],
    filter: Option<&Expr>,
    items: &[&Fast],
    keys: &[TopKey<'_>],
    cap: usize,
    dirs: &[(bool, bool)],
    workers: usize,
) -> SqlResult<Option<Vec<SortEntry>>> {
    let where_fast = match filter {
        Some(f) => match RowShape::Table(def).compile(f, params) {
            Some(w) => Some(w),
            None => return Ok(None),
        },
        None => None,
    };
    let init = || TopPartial {
        top: TopN::new(cap, dirs.to_vec()),
        bail: false,
        out: Vec::with_capacity(items.len()),
        keys: Vec::with_capacity(keys.len()),
    };
    let each = |p: &mut TopPartial, tid: Tid, row: &[Datum]| -> walrus_engine::Result<bool> {
        let bail = |p: &mut TopPartial| {
            p.bail = true;
            Ok(false)
        };
        if let Some(w) = &where_fast {
            match w.eval(row) {
                Ok(Some(Datum::Bool(true))) => {}
                Ok(Some(Datum::Bool(false) | Datum::Null)) => return Ok(true),
                _ => return bail(p),
            }
        }
        p.out.clear();
        for f in items {
            match f.eval(row) {
                Ok(Some(v)) => p.out.push(v),
                _ => return bail(p),
            }
        }
        p.keys.clear();
        for k in keys {
            let v = match k {
                TopKey::Output(i) => p.out[*i].clone(),
                TopKey::Eval(f) => match f.eval(row) {
                    Ok(Some(v)) => v,
                    _ => return bail(p),
                },
            };
            // json and jsonb keys: the serial path's error or refusal.
            if matches!(v, Datum::Json(_) | Datum::Jsonb(_)) {
                return bail(p);
            }
            p.keys.push(v);
        }
        let seq = ((tid.block as u64) << 16) | tid.offset as u64;
        if !p.top.rejects(&p.keys, seq) {
            p.top.push(SortEntry {
                keys: p.keys.clone(),
                seq,
                row: p.out.clone(),
            });
        }
        Ok(true)
    };
    let partials = env
        .txn()
        .scan_columns_parallel(def, wanted, workers, init, each)?;
    if partials.iter().any(|p| p.bail) {
        SERIAL_RERUNS.fetch_add(1, Ordering::Relaxed);
        return Ok(None);
    }
    Ok(Some(
        partials
            .into_iter()
            .flat_map(|p| p.top.into_sorted())
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn planned_workers_follow_postgresql() {
        assert_eq!(planned_workers(MIN_PARALLEL_TABLE_PAGES - 1, 2), 0);
        assert_eq!(planned_workers(MIN_PARALLEL_TABLE_PAGES, 2), 1);
        assert_eq!(planned_workers(3 * MIN_PARALLEL_TABLE_PAGES - 1, 2), 1);
        assert_eq!(planned_workers(3 * MIN_PARALLEL_TABLE_PAGES, 2), 2);
        assert_eq!(planned_workers(100 * MIN_PARALLEL_TABLE_PAGES, 2), 2);
        assert_eq!(planned_workers(100 * MIN_PARALLEL_TABLE_PAGES, 8), 5);
        assert_eq!(planned_workers(100 * MIN_PARALLEL_TABLE_PAGES, 0), 0);
    }
}
