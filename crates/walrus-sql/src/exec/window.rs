//! Window functions in a SELECT list: `row_number()`, `rank()` and `dense_rank()` over
//! `(PARTITION BY ... ORDER BY ...)`, as drivers' catalog queries use them. Each call is
//! replaced by a reference to a hidden column of the FROM rows, filled after WHERE from
//! the rows' partition and order keys; the rest of the SELECT runs unchanged. Other
//! window functions, frames, named windows and windows in grouped queries are 0A000.

use std::cmp::Ordering;

use sqlparser::ast::{self, Expr, Ident};
use walrus_engine::access::datum::{Datum, TypeId};

use super::{compare_keys, sort_dirs, Executor, IntKeys};
use crate::error::{SqlError, SqlResult};
use crate::expr::compiled::{Columns, Prepared};
use crate::expr::function_name;
use crate::rel::{ColName, Frame};

/// The qualifier of the hidden columns (not a name a query can write unquoted).
const QUALIFIER: &str = "?window?";

/// One window call taken out of the select list.
pub(super) struct Window {
    kind: Kind,
    partition_by: Vec<Expr>,
    order_by: Vec<ast::OrderByExpr>,
    /// Index of its hidden column in the FROM columns.
    column: usize,
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    RowNumber,
    Rank,
    DenseRank,
}

/// Replaces the window calls of `items` by references to hidden columns appended to
/// `cols` (rows must get a placeholder each: see [`fill`]).
pub(super) fn extract(
    items: &mut [(String, Expr)],
    cols: &mut Vec<ColName>,
) -> SqlResult<Vec<Window>> {
    let mut windows = Vec::new();
    for (_, e) in items.iter_mut() {
        take_windows(e, cols, &mut windows)?;
    }
    Ok(windows)
}

fn take_windows(e: &mut Expr, cols: &mut Vec<ColName>, out: &mut Vec<Window>) -> SqlResult<()> {
    let Expr::Function(f) = e else {
        // Window calls nested in other expressions are not looked for: left in place,
        // they are refused (0A000) when bound.
        return Ok(());
    };
    let Some(over) = &f.over else {
        return Ok(());
    };
    let kind = match function_name(f).as_str() {
        "row_number" => Kind::RowNumber,
        "rank" => Kind::Rank,
        "dense_rank" => Kind::DenseRank,
        other => {
            return Err(SqlError::unsupported(format!(
                "window function {other}() is not supported"
            )))
        }
    };
    let no_args = match &f.args {
        ast::FunctionArguments::None => true,
        ast::FunctionArguments::List(l) => l.args.is_empty() && l.clauses.is_empty(),
        ast::FunctionArguments::Subquery(_) => false,
    };
    if !no_args
        || f.filter.is_some()
        || f.null_treatment.is_some()
        || !f.within_group.is_empty()
        || !matches!(f.parameters, ast::FunctionArguments::None)
    {
        return Err(SqlError::unsupported(format!(
            "{} with arguments or clauses is not supported",
            function_name(f)
        )));
    }
    let spec = match over {
        ast::WindowType::WindowSpec(s) => s,
        ast::WindowType::NamedWindow(_) => {
            return Err(SqlError::unsupported("named windows are not supported"))
        }
    };
    if spec.window_name.is_some() || spec.window_frame.is_some() {
        return Err(SqlError::unsupported(
            "window frames and named windows are not supported",
        ));
    }
    let column = cols.len();
    let name = format!("{} {column}", function_name(f));
    cols.push(ColName {
        qual: Some(QUALIFIER.into()),
        name: name.clone(),
        ty: Some(TypeId::Int8),
        bpchar: false,
        hidden: true,
        origin: None,
    });
    out.push(Window {
        kind,
        partition_by: spec.partition_by.clone(),
        order_by: spec.order_by.clone(),
        column,
    });
    *e = Expr::CompoundIdentifier(vec![
        Ident::with_quote('"', QUALIFIER),
        Ident::with_quote('"', name),
    ]);
    Ok(())
}

impl Window {
    /// The expressions to bind against the FROM columns.
    pub(super) fn exprs(&self) -> impl Iterator<Item = &Expr> {
        self.partition_by
            .iter()
            .chain(self.order_by.iter().map(|o| &o.expr))
    }
}

/// Computes every window's value for `rows` (after WHERE) into its hidden column.
pub(super) fn fill(
    exec: &Executor<'_>,
    windows: &[Window],
    cols: &[ColName],
    rows: &mut [Vec<Datum>],
    outer: Option<&Frame<'_>>,
) -> SqlResult<()> {
    for w in windows {
        let prepared: Vec<Prepared<'_>> = w
            .exprs()
            .map(|e| Prepared::new(e, &Columns::Frame(cols), exec.params))
            .collect();
        // Each row's partition keys then order keys, back to back (`width` per row):
        // one allocation for all rows, sorted through a permutation.
        let (parts, width) = (w.partition_by.len(), prepared.len());
        let mut keys: Vec<Datum> = Vec::with_capacity(rows.len() * width);
        for row in rows.iter() {
            let frame = Frame { cols, row, outer };
            for p in &prepared {
                keys.push(p.eval(row, |e| exec.eval_in(e, Some(&frame), exec))?);
            }
        }
        let mut dirs = vec![(false, false); parts];
        dirs.extend(sort_dirs(&w.order_by));
        let ints = IntKeys::new(&keys, &dirs);
        // Rows `a` and `b` compared on key positions `cols`.
        let compare = |a: usize, b: usize, cols: std::ops::Range<usize>| match &ints {
            Some(k) => k.compare(a, b, cols),
            None => compare_keys(
                &keys[a * width..][cols.clone()],
                &keys[b * width..][cols.clone()],
                &dirs[cols],
            ),
        };
        let same_partition = |a: usize, b: usize| compare(a, b, 0..parts) == Ordering::Equal;
        // Stable (rows equal in both keys keep their order, as a sort in PostgreSQL
        // leaves peers in an order row_number() numbers arbitrarily): ties broken by
        // position, so an unstable sort gives the stable order.
        let order = match ints.as_ref().and_then(|k| k.sorted_positions(rows.len())) {
            Some(order) => order,
            None => {
                let mut order: Vec<usize> = (0..rows.len()).collect();
                order.sort_unstable_by(|&a, &b| compare(a, b, 0..width).then(a.cmp(&b)));
                order
            }
        };
        let (mut number, mut rank, mut dense) = (0i64, 0i64, 0i64);
        for k in 0..order.len() {
            let new_partition = k == 0 || !same_partition(order[k - 1], order[k]);
            if new_partition {
                number = 0;
                rank = 0;
                dense = 0;
            }
            number += 1;
            let peer = !new_partition && compare(order[k - 1], order[k], parts..width).is_eq();
            if !peer {
                rank = number;
                dense += 1;
            }
            let value = match w.kind {
                Kind::RowNumber => number,
                Kind::Rank => rank,
                Kind::DenseRank => dense,
            };
            rows[order[k]][w.column] = Datum::Int8(value);
        }
    }
    Ok(())
}
