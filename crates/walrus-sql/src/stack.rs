//! The stack-depth guard: PostgreSQL's `check_stack_depth()` for walrus's recursive
//! paths (expression evaluation, the executor's query levels, rewriting, the depth walk
//! after parsing, JSON and array input).
//!
//! A session's statements run on its connection's thread. Each recursive path calls
//! [`check`] once per level; it measures the stack this thread has used since the
//! session's entry point ([`mark_base`]) and answers `54001 stack depth limit exceeded`
//! past `max_stack_depth`, with PostgreSQL's message and hint. It also answers 54001
//! when the thread's real stack is nearly used up ([`SLOP_BYTES`] left, read from the
//! thread's bounds), whatever `max_stack_depth` says, so that a setting larger than the
//! thread's stack, or a thread that was not marked, can never overflow: Rust aborts the
//! whole process on a stack overflow, taking every other session with it.
//!
//! Invariant: a path whose recursion depth depends on the input calls [`check`] at each
//! level, or runs only on a tree that a checked walk has already gone through with frames
//! at least as large ([`crate::session`]'s parse walks every statement first).

use std::cell::Cell;
use std::ops::ControlFlow;

use sqlparser::ast::{
    BinaryOperator, Expr, Query, SetExpr, Statement, Value, Values, VisitMut, VisitorMut,
};

use crate::error::{SqlError, SqlResult};

/// walrus's default `max_stack_depth`, in kB: 8MB where PostgreSQL's is 2MB, because
/// walrus's frames are larger than PostgreSQL's (an AST interpreter; unoptimised test
/// builds larger still). At 8MB walrus answers the deep statements PostgreSQL 15
/// answers at its 2MB (a chain of 2,000 UNION ALLs, 1,000 chained CTEs, JSON nested
/// 5,643 deep: `crates/walrus/tests/server_clients.rs`).
pub const DEFAULT_MAX_STACK_DEPTH_KB: u64 = 8192;
/// PostgreSQL's minimum (100kB).
const MIN_MAX_STACK_DEPTH_KB: u64 = 100;
/// What the thread keeps free beyond any limit: room for the error path, the frames
/// between two checks, and walks that do not check (PostgreSQL's `STACK_DEPTH_SLOP` is
/// 512kB; walrus's frames are larger).
pub const SLOP_BYTES: usize = 1 << 20;
/// The stack size of a session's thread. It is reserved address space: pages are used
/// only as deep as a statement recurses. `max_stack_depth` may be set to at most half
/// of it: the other half is room for the walks that do not check (cloning, dropping,
/// small visitors) over a tree the checked walks accepted.
pub const SESSION_THREAD_STACK_BYTES: usize = 64 << 20;

thread_local! {
    /// The stack address of the session's entry point on this thread (0: not marked).
    static BASE: Cell<usize> = const { Cell::new(0) };
    /// The lowest address the stack may reach before [`check`] refuses: the thread's
    /// stack end plus [`SLOP_BYTES`] (0 when the thread's bounds are unknown).
    static FLOOR: Cell<usize> = const { Cell::new(0) };
    /// `max_stack_depth` in bytes for the statement running on this thread.
    static LIMIT: Cell<usize> = const { Cell::new(DEFAULT_MAX_STACK_DEPTH_KB as usize * 1024) };
}

/// The address of a local of this frame: where the stack is now.
#[inline(never)]
fn here() -> usize {
    let marker = 0u8;
    std::hint::black_box(&marker) as *const u8 as usize
}

/// Marks where this thread's session work starts (once per thread: the first call
/// wins, so a nested entry does not move the base up).
pub fn mark_base() {
    if BASE.with(Cell::get) != 0 {
        return;
    }
    let now = here();
    BASE.with(|b| b.set(now));
    let floor = stacker::remaining_stack()
        .map(|left| now.saturating_sub(left).saturating_add(SLOP_BYTES))
        .unwrap_or(0);
    FLOOR.with(|f| f.set(floor));
}

/// Sets this thread's limit (the session's `max_stack_depth`, in kB).
pub fn set_limit_kb(kb: u64) {
    LIMIT.with(|l| l.set(usize::try_from(kb.saturating_mul(1024)).unwrap_or(usize::MAX)));
}

/// 54001 when this thread has used more than `max_stack_depth` since [`mark_base`], or
/// when its stack is nearly exhausted.
#[inline]
pub fn check() -> SqlResult<()> {
    let mut base = BASE.with(Cell::get);
    if base == 0 {
        // A thread that never marked its base (an embedding, a test) is measured from
        // its first check.
        mark_base();
        base = BASE.with(Cell::get);
    }
    let now = here();
    // Stacks grow down on every platform walrus builds for.
    let used = base.saturating_sub(now);
    let limit = LIMIT.with(Cell::get);
    if used > limit || now < FLOOR.with(Cell::get) {
        return Err(exceeded(limit / 1024));
    }
    Ok(())
}

fn exceeded(limit_kb: usize) -> SqlError {
    SqlError::new("54001", "stack depth limit exceeded").with_hint(format!(
        "Increase the configuration parameter \"max_stack_depth\" (currently {limit_kb}kB), \
         after ensuring the platform's stack depth limit is adequate."
    ))
}

/// The largest `max_stack_depth` this thread can honour, in kB: half of what is left
/// of its stack below the session's base (see [`SESSION_THREAD_STACK_BYTES`]).
fn thread_ceiling_kb() -> u64 {
    mark_base();
    let (base, floor) = (BASE.with(Cell::get), FLOOR.with(Cell::get));
    let room = if floor == 0 {
        SESSION_THREAD_STACK_BYTES.saturating_sub(SLOP_BYTES)
    } else {
        base.saturating_sub(floor)
    };
    (room / 2 / 1024) as u64
}

/// `max_stack_depth` as PostgreSQL takes it (a memory setting, kB by default, at least
/// 100kB, at most what the thread's stack allows: 22023 with PostgreSQL's messages).
pub(crate) fn parse_max_stack_depth_kb(value: &str) -> SqlResult<u64> {
    let kb = crate::memory::parse_memory_kb("max_stack_depth", value, MIN_MAX_STACK_DEPTH_KB)?;
    let ceiling = thread_ceiling_kb();
    if kb > ceiling {
        return Err(SqlError::new(
            "22023",
            format!("\"max_stack_depth\" must not exceed {ceiling}kB."),
        )
        .with_hint(
            "Increase the platform's stack depth limit via \"ulimit -s\" or local equivalent.",
        ));
    }
    Ok(kb)
}

/// The walk every parsed statement gets before anything else reads it: a visit of
/// every node with [`check`] at each query and expression, so that a statement nested
/// past `max_stack_depth` (a long chain of `+`, `AND`, `||` or `UNION ALL`, which the
/// parser builds in a loop, not by recursion) is refused with 54001 here, before the
/// binder, the planner or the executor recurse over it. Those later walks have frames
/// of their own size; the ones that recurse per level call [`check`] too, the others
/// run with [`SESSION_THREAD_STACK_BYTES`] of room over what this walk accepted.
///
/// A refused statement is taken apart without recursion ([`dismantle`]) so that even
/// dropping it cannot overflow the stack.
pub(crate) fn walk_statements(stmts: &mut [Statement]) -> SqlResult<()> {
    struct Depth;
    impl VisitorMut for Depth {
        type Break = SqlError;
        fn pre_visit_query(&mut self, _q: &mut Query) -> ControlFlow<SqlError> {
            to_flow(check())
        }
        fn pre_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<SqlError> {
            balance_logic_chain(e);
            to_flow(check())
        }
    }
    let mut failed = None;
    for st in stmts.iter_mut() {
        if let ControlFlow::Break(e) = st.visit(&mut Depth) {
            failed = Some(e);
            break;
        }
    }
    match failed {
        None => Ok(()),
        Some(e) => {
            for st in stmts.iter_mut() {
                dismantle(st);
            }
            Err(e)
        }
    }
}

/// Chains of `AND` (or of `OR`) longer than this are rebalanced.
const LOGIC_CHAIN_BALANCE_MIN: usize = 32;

/// A long chain of one logical operator (`c1 AND c2 AND ... AND cN`, thousands long in
/// generated WHERE clauses) becomes a balanced tree of the same operands in the same
/// order, so every later walk recurses log N deep instead of N (PostgreSQL flattens
/// such chains into one N-ary node). AND and OR are associative in SQL's three-valued
/// logic, and evaluation still goes left to right, stopping at the same operand.
fn balance_logic_chain(e: &mut Expr) {
    let Expr::BinaryOp { op, .. } = e else {
        return;
    };
    let op = match op {
        BinaryOperator::And => BinaryOperator::And,
        BinaryOperator::Or => BinaryOperator::Or,
        _ => return,
    };
    // Count the left spine first: short chains are left as they are written.
    let mut len = 1;
    let mut at: &Expr = e;
    while let Expr::BinaryOp { left, op: o, .. } = at {
        if *o != op {
            break;
        }
        len += 1;
        at = left;
    }
    if len < LOGIC_CHAIN_BALANCE_MIN {
        return;
    }
    // The operands in order, without recursion: a node of the same operator is
    // replaced by its two sides (left first).
    let mut operands = Vec::new();
    let mut pending = vec![std::mem::replace(e, null())];
    while let Some(x) = pending.pop() {
        match x {
            Expr::BinaryOp { left, op: o, right } if o == op => {
                pending.push(*right);
                pending.push(*left);
            }
            other => operands.push(other),
        }
    }
    *e = balanced(operands, &op);
}

/// `operands` joined by `op` as a balanced tree (recursion log N deep).
fn balanced(mut operands: Vec<Expr>, op: &BinaryOperator) -> Expr {
    if operands.len() == 1 {
        return operands.pop().unwrap_or_else(null);
    }
    let right = operands.split_off(operands.len() / 2);
    Expr::BinaryOp {
        left: Box::new(balanced(operands, op)),
        op: op.clone(),
        right: Box::new(balanced(right, op)),
    }
}

fn to_flow(r: SqlResult<()>) -> ControlFlow<SqlError> {
    match r {
        Ok(()) => ControlFlow::Continue(()),
        Err(e) => ControlFlow::Break(e),
    }
}

/// Breaks the chains the parser builds in loops (binary and postfix operators, set
/// operations) into pieces dropped one at a time, so that no drop recurses deeper than
/// the parser's own recursion limit allows.
fn dismantle(st: &mut Statement) {
    struct Breaker;
    impl VisitorMut for Breaker {
        type Break = ();
        fn pre_visit_query(&mut self, q: &mut Query) -> ControlFlow<()> {
            let body = std::mem::replace(q.body.as_mut(), SetExpr::Values(empty_values()));
            let mut pending = vec![body];
            while let Some(mut set) = pending.pop() {
                match &mut set {
                    SetExpr::SetOperation { left, right, .. } => {
                        let l = std::mem::replace(left.as_mut(), SetExpr::Values(empty_values()));
                        let r = std::mem::replace(right.as_mut(), SetExpr::Values(empty_values()));
                        pending.push(l);
                        pending.push(r);
                    }
                    other => {
                        let _ = other.visit(self);
                    }
                }
            }
            ControlFlow::Continue(())
        }
        fn pre_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
            if !is_chain(e) {
                // Its children are visited (and broken up) next.
                return ControlFlow::Continue(());
            }
            let mut pending = vec![std::mem::replace(e, null())];
            while let Some(mut x) = pending.pop() {
                match &mut x {
                    Expr::BinaryOp { left, right, .. }
                    | Expr::IsDistinctFrom(left, right)
                    | Expr::IsNotDistinctFrom(left, right) => {
                        pending.push(take(left));
                        pending.push(take(right));
                    }
                    Expr::Like { expr, pattern, .. }
                    | Expr::ILike { expr, pattern, .. }
                    | Expr::SimilarTo { expr, pattern, .. } => {
                        pending.push(take(expr));
                        pending.push(take(pattern));
                    }
                    Expr::Between {
                        expr, low, high, ..
                    } => {
                        pending.push(take(expr));
                        pending.push(take(low));
                        pending.push(take(high));
                    }
                    Expr::InList { expr, list, .. } => {
                        pending.push(take(expr));
                        pending.append(list);
                    }
                    Expr::UnaryOp { expr, .. }
                    | Expr::Nested(expr)
                    | Expr::IsNull(expr)
                    | Expr::IsNotNull(expr)
                    | Expr::IsTrue(expr)
                    | Expr::IsNotTrue(expr)
                    | Expr::IsFalse(expr)
                    | Expr::IsNotFalse(expr)
                    | Expr::IsUnknown(expr)
                    | Expr::IsNotUnknown(expr)
                    | Expr::Cast { expr, .. }
                    | Expr::Collate { expr, .. } => pending.push(take(expr)),
                    Expr::AtTimeZone {
                        timestamp,
                        time_zone,
                    } => {
                        pending.push(take(timestamp));
                        pending.push(take(time_zone));
                    }
                    Expr::AnyOp { left, right, .. } | Expr::AllOp { left, right, .. } => {
                        pending.push(take(left));
                        pending.push(take(right));
                    }
                    other => {
                        // Anything else nests only as deep as the parser's recursion
                        // limit; its children are broken up by this same visit.
                        let _ = other.visit(self);
                    }
                }
            }
            ControlFlow::Continue(())
        }
    }
    let _ = st.visit(&mut Breaker);
}

/// The expressions the parser chains in a loop, taken apart by [`dismantle`].
fn is_chain(e: &Expr) -> bool {
    matches!(
        e,
        Expr::BinaryOp { .. }
            | Expr::IsDistinctFrom(..)
            | Expr::IsNotDistinctFrom(..)
            | Expr::Like { .. }
            | Expr::ILike { .. }
            | Expr::SimilarTo { .. }
            | Expr::Between { .. }
            | Expr::InList { .. }
            | Expr::UnaryOp { .. }
            | Expr::Nested(_)
            | Expr::IsNull(_)
            | Expr::IsNotNull(_)
            | Expr::IsTrue(_)
            | Expr::IsNotTrue(_)
            | Expr::IsFalse(_)
            | Expr::IsNotFalse(_)
            | Expr::IsUnknown(_)
            | Expr::IsNotUnknown(_)
            | Expr::Cast { .. }
            | Expr::Collate { .. }
            | Expr::AtTimeZone { .. }
            | Expr::AnyOp { .. }
            | Expr::AllOp { .. }
    )
}

fn null() -> Expr {
    Expr::Value(Value::Null.into())
}

fn take(b: &mut Box<Expr>) -> Expr {
    std::mem::replace(b.as_mut(), null())
}

fn empty_values() -> Values {
    Values {
        explicit_row: false,
        value_keyword: false,
        rows: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recurse(n: usize) -> SqlResult<usize> {
        check()?;
        if n == 0 {
            return Ok(0);
        }
        let pad = std::hint::black_box([0u8; 512]);
        Ok(recurse(n - 1)? + pad[n % 512] as usize)
    }

    #[test]
    fn deep_recursion_is_an_error_not_an_overflow() {
        let t = std::thread::Builder::new()
            .stack_size(8 << 20)
            .spawn(|| {
                mark_base();
                set_limit_kb(2048);
                assert!(recurse(100).is_ok());
                let e = recurse(1_000_000).unwrap_err();
                assert_eq!(e.sqlstate, "54001");
                // Past a limit above the thread's stack, the real bound still holds.
                set_limit_kb(1 << 30);
                assert_eq!(recurse(1_000_000).unwrap_err().sqlstate, "54001");
                // And the thread is usable afterwards.
                set_limit_kb(2048);
                assert!(recurse(100).is_ok());
            })
            .unwrap();
        t.join().unwrap();
    }

    #[test]
    fn max_stack_depth_is_checked_like_postgresql() {
        // On a thread with a session's stack: at most half of it may be the limit.
        std::thread::Builder::new()
            .stack_size(SESSION_THREAD_STACK_BYTES)
            .spawn(|| {
                mark_base();
                assert_eq!(parse_max_stack_depth_kb("2MB").unwrap(), 2048);
                assert_eq!(parse_max_stack_depth_kb("8MB").unwrap(), 8192);
                let low = parse_max_stack_depth_kb("99kB").unwrap_err();
                assert_eq!(low.sqlstate, "22023");
                let e = parse_max_stack_depth_kb("40MB").unwrap_err();
                assert_eq!(e.sqlstate, "22023");
                assert!(e.message.contains("must not exceed"), "{}", e.message);
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
