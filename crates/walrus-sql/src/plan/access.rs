//! Access path choice for a single table: a point lookup through a unique index when the
//! WHERE clause pins all of that index's columns with equalities to constants, else a
//! sequential scan; an integer range on a one-column index reads through the index
//! unless ANALYZE's statistics put more than [`RANGE_SCAN_MAX_SHARE`] of the rows in it
//! (then the sequential scan is cheaper); a range open on one side needs statistics
//! that put it under that share.

use std::ops::Bound;

use sqlparser::ast::{self, Expr};
use walrus_engine::access::datum::{Datum, TypeId};
use walrus_engine::catalog::{IndexDef, TableDef};

use crate::expr::{coerce, eval, Scope};
use crate::names::ident;
use crate::stats::TableStatistics;

/// How to read the rows of a table that may match a filter.
pub(crate) enum Access<'d> {
    /// Every row, through a sequential scan.
    Scan,
    /// The rows whose `index` key equals `key` (already coerced to the column types).
    Index {
        index: &'d IndexDef,
        key: Vec<Datum>,
    },
    /// The rows whose key in a one-column `index` over an integer column lies between
    /// `lo` and `hi` (open on one side only when statistics say the range is small:
    /// without them an open range may well be most of the table, which a sequential
    /// scan reads faster).
    Range {
        index: &'d IndexDef,
        lo: Bound<Datum>,
        hi: Bound<Datum>,
        /// The filter is exactly this range: every conjunct compares the index column
        /// with an integer constant and both ends are bounded (an open end would also
        /// return NULL keys). The rows need no filter then.
        exact: bool,
    },
    /// No row can match: a constant does not fit its column's type.
    Nothing,
}

/// The access path for rows of `def` matching `filter`: through a unique index when the
/// filter pins all its columns with equalities to constants, else a sequential scan.
/// The filter itself must still be applied to what the path returns.
pub(crate) fn choose_access<'d>(
    def: &'d TableDef,
    filter: Option<&Expr>,
    params: &[Datum],
    now: i64,
    get: &dyn Fn(&str) -> Option<String>,
    stats: &mut dyn FnMut() -> Option<TableStatistics>,
) -> Access<'d> {
    let mut eqs: Vec<(usize, Datum)> = Vec::new();
    if let Some(f) = filter {
        collect_equalities(f, def, params, now, get, &mut eqs);
    }
    let index = def
        .indexes
        .iter()
        .filter(|i| i.unique)
        .find(|i| i.columns.iter().all(|c| eqs.iter().any(|(ec, _)| ec == c)));
    match index {
        Some(idx) => {
            let mut key = Vec::new();
            for c in &idx.columns {
                let v = eqs
                    .iter()
                    .find(|(ec, _)| ec == c)
                    .map(|(_, v)| v.clone())
                    .unwrap_or(Datum::Null);
                let col = &def.columns[*c];
                // A text column has no equality with a number or a boolean in
                // PostgreSQL (42883): converting the constant to text would find rows.
                // The scan evaluates the filter, which raises that error.
                if col.ty == TypeId::Text
                    && (crate::expr::is_number(&v) || matches!(v, Datum::Bool(_)))
                {
                    return Access::Scan;
                }
                // A char(n) key is stored blank-padded: the constant is padded the same
                // way (assign), so 'ab' finds 'ab  ' as PostgreSQL's bpchar equality.
                let k = if col.declared == walrus_engine::catalog::DeclaredType::Char {
                    crate::expr::assign(v, col)
                } else {
                    coerce(v, col.ty)
                };
                key.push(match k {
                    Ok(k) => k,
                    // A constant that does not fit the column type matches nothing.
                    Err(_) => return Access::Nothing,
                });
            }
            Access::Index { index: idx, key }
        }
        None => range_access(def, filter, params, now, get, stats),
    }
}

/// Past this share of a table's rows, an index range scan (one heap fetch per entry,
/// in index order) costs more than reading the whole heap in order.
pub(crate) const RANGE_SCAN_MAX_SHARE: f64 = 0.2;

/// A range on an integer column with a one-column index ([`Access::Range`]), from
/// `col BETWEEN a AND b` or `<`, `<=`, `>`, `>=` conjuncts with integer constants (on
/// either side); otherwise a scan. Bounds that do not fit the column's type are not
/// used (the WHERE clause is applied to what the range returns anyway).
fn range_access<'d>(
    def: &'d TableDef,
    filter: Option<&Expr>,
    params: &[Datum],
    now: i64,
    get: &dyn Fn(&str) -> Option<String>,
    stats: &mut dyn FnMut() -> Option<TableStatistics>,
) -> Access<'d> {
    let Some(f) = filter else {
        return Access::Scan;
    };
    let mut bounds: Vec<(usize, bool, Bound<i64>)> = Vec::new();
    collect_ranges(f, def, params, now, get, &mut bounds);
    for idx in def.indexes.iter().filter(|i| i.columns.len() == 1) {
        let c = idx.columns[0];
        let ty = def.columns[c].ty;
        if !matches!(ty, TypeId::Int2 | TypeId::Int4 | TypeId::Int8) {
            continue;
        }
        let (mut lo, mut hi) = (Bound::Unbounded, Bound::Unbounded);
        for (bc, lower, b) in &bounds {
            if *bc != c {
                continue;
            }
            if *lower {
                lo = tighter(lo, *b, true);
            } else {
                hi = tighter(hi, *b, false);
            }
        }
        let open = matches!(lo, Bound::Unbounded) || matches!(hi, Bound::Unbounded);
        if matches!(lo, Bound::Unbounded) && matches!(hi, Bound::Unbounded) {
            continue;
        }
        let typed = |b: Bound<i64>| -> Option<Bound<Datum>> {
            let d = |v: i64| coerce(Datum::Int8(v), ty).ok();
            Some(match b {
                Bound::Included(v) => Bound::Included(d(v)?),
                Bound::Excluded(v) => Bound::Excluded(d(v)?),
                Bound::Unbounded => Bound::Unbounded,
            })
        };
        match (typed(lo), typed(hi)) {
            (Some(typed_lo), Some(typed_hi)) => {
                // With statistics, a range holding a large share of the rows is read
                // by the sequential scan instead.
                let f = |b: Bound<i64>| match b {
                    Bound::Included(v) => Bound::Included(v as f64),
                    Bound::Excluded(v) => Bound::Excluded(v as f64),
                    Bound::Unbounded => Bound::Unbounded,
                };
                let share = stats().and_then(|st| {
                    super::estimate::range_fraction(st.column(&def.columns[c].name)?, f(lo), f(hi))
                });
                // An open range is read through the index only when statistics put
                // it under that share: without them it may well be most of the table.
                match share {
                    Some(s) if s > RANGE_SCAN_MAX_SHARE => return Access::Scan,
                    None if open => continue,
                    _ => {}
                }
                return Access::Range {
                    index: idx,
                    lo: typed_lo,
                    hi: typed_hi,
                    exact: !open
                        && filter.is_some_and(|w| only_bounds_on(w, c, def, params, now, get)),
                };
            }
            // A bound past the column type's range: leave it to the scan.
            _ => continue,
        }
    }
    Access::Scan
}

/// The tighter of two lower (or upper) bounds.
fn tighter(a: Bound<i64>, b: Bound<i64>, lower: bool) -> Bound<i64> {
    let v = |x: &Bound<i64>| match x {
        Bound::Included(v) | Bound::Excluded(v) => Some(*v),
        Bound::Unbounded => None,
    };
    match (v(&a), v(&b)) {
        (None, _) => b,
        (_, None) => a,
        (Some(x), Some(y)) if x == y => {
            if matches!(a, Bound::Excluded(_)) {
                a
            } else {
                b
            }
        }
        (Some(x), Some(y)) => {
            if (x > y) == lower {
                a
            } else {
                b
            }
        }
    }
}

/// Collects `column <op> integer constant` conjuncts (and BETWEEN) of a WHERE clause as
/// (column, is a lower bound, bound).
fn collect_ranges(
    e: &Expr,
    def: &TableDef,
    params: &[Datum],
    now: i64,
    get: &dyn Fn(&str) -> Option<String>,
    out: &mut Vec<(usize, bool, Bound<i64>)>,
) {
    use ast::BinaryOperator as Op;
    let col_of = |x: &Expr| match x {
        Expr::Identifier(i) => def.column_index(&ident(i)),
        Expr::CompoundIdentifier(ids) => ids.last().and_then(|i| def.column_index(&ident(i))),
        _ => None,
    };
    let scope = Scope {
        columns: &[],
        row: None,
        params,
        now,
        setting: get,
        interrupt: None,
        frame: None,
        hooks: None,
    };
    // Only integer constants: `aid < 5.5` must not become `aid < 6`.
    let int = |x: &Expr| match eval(x, &scope) {
        Ok(Datum::Int2(v)) => Some(v as i64),
        Ok(Datum::Int4(v)) => Some(v as i64),
        Ok(Datum::Int8(v)) => Some(v),
        _ => None,
    };
    match e {
        Expr::BinaryOp {
            left,
            op: Op::And,
            right,
        } => {
            collect_ranges(left, def, params, now, get, out);
            collect_ranges(right, def, params, now, get, out);
        }
        Expr::Nested(inner) => collect_ranges(inner, def, params, now, get, out),
        Expr::Between {
            expr,
            negated: false,
            low,
            high,
        } => {
            if let (Some(c), Some(l), Some(h)) = (col_of(expr), int(low), int(high)) {
                out.push((c, true, Bound::Included(l)));
                out.push((c, false, Bound::Included(h)));
            }
        }
        Expr::BinaryOp { left, op, right } => {
            // Normalised to `column op constant`.
            let (c, op, k) = match (col_of(left), col_of(right)) {
                (Some(c), None) => (c, op.clone(), int(right)),
                (None, Some(c)) => {
                    let flipped = match op {
                        Op::Lt => Op::Gt,
                        Op::LtEq => Op::GtEq,
                        Op::Gt => Op::Lt,
                        Op::GtEq => Op::LtEq,
                        other => other.clone(),
                    };
                    (c, flipped, int(left))
                }
                _ => return,
            };
            let Some(k) = k else { return };
            match op {
                Op::Lt => out.push((c, false, Bound::Excluded(k))),
                Op::LtEq => out.push((c, false, Bound::Included(k))),
                Op::Gt => out.push((c, true, Bound::Excluded(k))),
                Op::GtEq => out.push((c, true, Bound::Included(k))),
                _ => {}
            }
        }
        _ => {}
    }
}

/// Whether WHERE clause `e` is nothing but conjuncts [`collect_ranges`] turns into
/// bounds on column `c`.
fn only_bounds_on(
    e: &Expr,
    c: usize,
    def: &TableDef,
    params: &[Datum],
    now: i64,
    get: &dyn Fn(&str) -> Option<String>,
) -> bool {
    conjuncts(e).into_iter().all(|x| {
        let mut bounds = Vec::new();
        collect_ranges(x, def, params, now, get, &mut bounds);
        let expected = if matches!(x, Expr::Between { .. }) {
            2
        } else {
            1
        };
        bounds.len() == expected && bounds.iter().all(|(bc, _, _)| *bc == c)
    })
}

/// The conjuncts of `e`, left to right: `a AND (b AND c)` gives `a`, `b`, `c`
/// (parentheses looked through).
pub(crate) fn conjuncts(e: &Expr) -> Vec<&Expr> {
    let mut out = Vec::new();
    let mut stack = vec![e];
    while let Some(x) = stack.pop() {
        match x {
            Expr::BinaryOp {
                left,
                op: ast::BinaryOperator::And,
                right,
            } => {
                stack.push(right);
                stack.push(left);
            }
            Expr::Nested(inner) => stack.push(inner),
            other => out.push(other),
        }
    }
    out
}

/// Collects `column = constant` conjuncts of a WHERE clause.
fn collect_equalities(
    e: &Expr,
    def: &TableDef,
    params: &[Datum],
    now: i64,
    get: &dyn Fn(&str) -> Option<String>,
    out: &mut Vec<(usize, Datum)>,
) {
    match e {
        Expr::BinaryOp {
            left,
            op: ast::BinaryOperator::And,
            right,
        } => {
            collect_equalities(left, def, params, now, get, out);
            collect_equalities(right, def, params, now, get, out);
        }
        Expr::Nested(inner) => collect_equalities(inner, def, params, now, get, out),
        Expr::BinaryOp {
            left,
            op: ast::BinaryOperator::Eq,
            right,
        } => {
            let col_of = |x: &Expr| match x {
                Expr::Identifier(i) => def.column_index(&ident(i)),
                Expr::CompoundIdentifier(ids) => {
                    ids.last().and_then(|i| def.column_index(&ident(i)))
                }
                _ => None,
            };
            let scope = Scope {
                columns: &[],
                row: None,
                params,
                now,
                setting: get,
                interrupt: None,
                frame: None,
                hooks: None,
            };
            if let Some(c) = col_of(left) {
                if let Ok(v) = eval(right, &scope) {
                    out.push((c, v));
                }
            } else if let Some(c) = col_of(right) {
                if let Ok(v) = eval(left, &scope) {
                    out.push((c, v));
                }
            }
        }
        _ => {}
    }
}
