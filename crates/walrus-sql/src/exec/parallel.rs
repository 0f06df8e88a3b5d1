//! Parallel aggregation over one table: PostgreSQL's Finalize Aggregate → Gather →
//! Partial Aggregate → Parallel Seq Scan, for a query level without GROUP BY whose
//! aggregates and WHERE clause are simple enough for the threads to evaluate alone.
//!
//! The session's thread and its helpers scan runs of blocks in turn
//! ([`walrus_engine::engine::Transaction::scan_columns_parallel`]), each folding the
//! rows it reads into its own aggregate states; the session then merges the states
//! ([`AggState::merge`]). The answer must be exactly the serial scan's, so the plan is
//! taken only where merging is exact — counts, integer and numeric sums and averages,
//! min / max, bool_and / bool_or — and whenever a participant meets something it cannot
//! evaluate on its own (an expression outside `expr::compiled`, an error, whose order
//! the serial scan decides) or a merge would not be exact (min/max ties between values
//! that print differently), the level runs again serially and gives the serial answer
//! or error. Helpers come from [`MAX_PARALLEL_WORKERS`] shared by all sessions.

use std::sync::atomic::{AtomicU64, Ordering};

use sqlparser::ast::Expr;
use walrus_base::Tid;
use walrus_engine::access::datum::{Datum, TypeId};
use walrus_engine::catalog::TableDef;
use walrus_engine::engine::MAX_PARALLEL_WORKERS;

use super::aggregate::{AggState, StreamCall};
use super::{dml, Env};
use crate::error::SqlResult;
use crate::expr::compiled::{Columns, Fast};
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

/// `max_parallel_workers_per_gather` as the session has it (PostgreSQL's default 2).
fn workers_per_gather(get: &dyn Fn(&str) -> Option<String>) -> usize {
    get("max_parallel_workers_per_gather")
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(2)
        .min(MAX_PARALLEL_WORKERS)
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
fn call_runs_in_parallel(call: &StreamCall, def: &TableDef, params: &[Datum]) -> bool {
    if call.filter().is_some() {
        return false;
    }
    let Some(arg) = call.arg() else {
        return call.star();
    };
    if Fast::compile(arg, &Columns::Table(&def.columns), params).is_none() {
        return false;
    }
    match call.name() {
        "sum" | "avg" => matches!(
            crate::plan::static_type(arg, &def.columns),
            Some(TypeId::Int2 | TypeId::Int4 | TypeId::Int8 | TypeId::Numeric)
        ),
        _ => true,
    }
}

/// The helper threads an aggregate query level without GROUP BY over `def` alone is
/// planned with (0: it runs serially): every call runs in parallel
/// ([`call_runs_in_parallel`]), WHERE is absent or compiled, the access path is a
/// sequential scan, and the table is large enough. EXPLAIN and the executor both ask
/// this, so the plan shown is the plan run.
pub(super) fn aggregate_workers(
    env: &mut dyn Env,
    def: &TableDef,
    filter: Option<&Expr>,
    params: &[Datum],
    calls: &[StreamCall],
) -> SqlResult<usize> {
    let (now, settings) = (env.now(), env.settings());
    let get = move |n: &str| settings.get(n);
    let per_gather = workers_per_gather(&get);
    if per_gather == 0 || calls.iter().any(|c| !call_runs_in_parallel(c, def, params)) {
        return Ok(0);
    }
    if filter.is_some_and(|f| Fast::compile(f, &Columns::Table(&def.columns), params).is_none()) {
        return Ok(0);
    }
    let pages = env.txn().table_pages(def)?;
    if planned_workers(pages, per_gather) == 0 {
        return Ok(0);
    }
    let access = choose_access(def, filter, params, now, &get, &mut || {
        dml::table_statistics(env, def)
    });
    Ok(match access {
        Access::Scan => planned_workers(pages, per_gather),
        _ => 0,
    })
}

/// One participant's share: its states, the first row it read (by tid), and whether it
/// met something only the serial scan may answer.
struct Partial {
    states: Vec<AggState>,
    first: Option<(Tid, Vec<Datum>)>,
    bail: bool,
}

/// What a parallel aggregation found: `None` when the level must run serially, else
/// the first row in scan order (`None`: no row matched) with the merged states.
pub(super) type Gathered = Option<Option<(Vec<Datum>, Vec<AggState>)>>;

/// Runs the parallel plan with `workers` helpers. `wanted` are the columns the level
/// reads, `fast_args` each call's argument compiled against the table's row.
#[allow(clippy::too_many_arguments)]
pub(super) fn aggregate(
    env: &mut dyn Env,
    def: &TableDef,
    wanted: &[bool],
    filter: Option<&Expr>,
    params: &[Datum],
    calls: &[StreamCall],
    fast_args: &[Option<Fast>],
    workers: usize,
) -> SqlResult<Gathered> {
    let where_fast = match filter {
        Some(f) => match Fast::compile(f, &Columns::Table(&def.columns), params) {
            Some(w) => Some(w),
            None => return Ok(None),
        },
        None => None,
    };
    // What the threads need of each call, without the call's AST node.
    let mut plan: Vec<(String, bool, Option<&Fast>)> = Vec::with_capacity(calls.len());
    for (c, fast) in calls.iter().zip(fast_args) {
        if !c.star() && fast.is_none() {
            return Ok(None);
        }
        plan.push((c.name().to_string(), c.star(), fast.as_ref()));
    }
    let init = || Partial {
        states: plan
            .iter()
            .map(|(name, _, _)| AggState::start(name))
            .collect(),
        first: None,
        bail: false,
    };
    let each = |p: &mut Partial, tid: Tid, row: &[Datum]| {
        if let Some(w) = &where_fast {
            match w.eval(row) {
                Ok(Some(Datum::Bool(true))) => {}
                Ok(Some(Datum::Bool(false) | Datum::Null)) => return Ok(true),
                _ => {
                    p.bail = true;
                    return Ok(false);
                }
            }
        }
        if p.first.as_ref().is_none_or(|(t, _)| tid < *t) {
            p.first = Some((tid, row.to_vec()));
        }
        for ((name, star, fast), state) in plan.iter().zip(p.states.iter_mut()) {
            let v = match fast {
                None => Datum::Null,
                Some(f) => match f.eval(row) {
                    Ok(Some(v)) => v,
                    _ => {
                        p.bail = true;
                        return Ok(false);
                    }
                },
            };
            state.add(name, *star, v);
        }
        Ok(true)
    };
    let partials = env
        .txn()
        .scan_columns_parallel(def, wanted, workers, init, each)?;
    let rerun = || {
        SERIAL_RERUNS.fetch_add(1, Ordering::Relaxed);
        Ok(None)
    };
    if partials.iter().any(|p| p.bail) {
        return rerun();
    }
    let mut partials = partials.into_iter();
    let Some(mut total) = partials.next() else {
        return Ok(None);
    };
    for p in partials {
        for (((name, _, _), state), other) in plan.iter().zip(total.states.iter_mut()).zip(p.states)
        {
            if !state.merge(name, other) {
                return rerun();
            }
        }
        if let Some((tid, row)) = p.first {
            if total.first.as_ref().is_none_or(|(t, _)| tid < *t) {
                total.first = Some((tid, row));
            }
        }
    }
    Ok(Some(total.first.map(|(_, row)| (row, total.states))))
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
