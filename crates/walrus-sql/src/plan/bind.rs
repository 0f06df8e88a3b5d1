//! Binding: every column reference a clause names must resolve in the FROM list's
//! columns or an enclosing query's, checked before any row is read; and the walks over
//! an expression tree that planning needs (does it contain an aggregate, a subquery).

use sqlparser::ast::{Expr, FunctionArguments};

use crate::error::{SqlError, SqlResult};
use crate::expr::{check_function, function_args, function_name, is_aggregate_name};
use crate::rel::{col_ref, find_col, no_column, ColName, Frame};

/// Calls `f` on `e` and every expression nested in it, not descending into subqueries
/// (they bind against their own FROM list) nor, when `into_aggregates` is false, into
/// aggregate calls.
fn walk(
    e: &Expr,
    into_aggregates: bool,
    f: &mut dyn FnMut(&Expr) -> SqlResult<()>,
) -> SqlResult<()> {
    walk_pruned(e, into_aggregates, &mut |x| f(x).map(|()| true))
}

/// [`walk`] where `f` also says whether to descend into the expression it was given.
fn walk_pruned(
    e: &Expr,
    into_aggregates: bool,
    f: &mut dyn FnMut(&Expr) -> SqlResult<bool>,
) -> SqlResult<()> {
    if !f(e)? {
        return Ok(());
    }
    let mut go = |x: &Expr| walk_pruned(x, into_aggregates, f);
    match e {
        Expr::BinaryOp { left, right, .. }
        | Expr::AnyOp { left, right, .. }
        | Expr::AllOp { left, right, .. } => {
            go(left)?;
            go(right)
        }
        Expr::IsDistinctFrom(a, b) | Expr::IsNotDistinctFrom(a, b) => {
            go(a)?;
            go(b)
        }
        Expr::AtTimeZone {
            timestamp,
            time_zone,
        } => {
            go(timestamp)?;
            go(time_zone)
        }
        Expr::UnaryOp { expr, .. }
        | Expr::Nested(expr)
        | Expr::Cast { expr, .. }
        | Expr::Collate { expr, .. }
        | Expr::IsNull(expr)
        | Expr::IsNotNull(expr)
        | Expr::IsTrue(expr)
        | Expr::IsNotTrue(expr)
        | Expr::IsFalse(expr)
        | Expr::IsNotFalse(expr)
        | Expr::IsUnknown(expr)
        | Expr::Ceil { expr, .. }
        | Expr::Floor { expr, .. }
        | Expr::IsNotUnknown(expr)
        | Expr::InSubquery { expr, .. } => go(expr),
        Expr::Substring {
            expr,
            substring_from,
            substring_for,
            ..
        } => {
            go(expr)?;
            substring_from.iter().try_for_each(|x| go(x))?;
            substring_for.iter().try_for_each(|x| go(x))
        }
        Expr::Trim {
            expr, trim_what, ..
        } => {
            go(expr)?;
            trim_what.iter().try_for_each(|x| go(x))
        }
        Expr::InList { expr, list, .. } => {
            go(expr)?;
            list.iter().try_for_each(&mut go)
        }
        Expr::Between {
            expr, low, high, ..
        } => {
            go(expr)?;
            go(low)?;
            go(high)
        }
        Expr::Like { expr, pattern, .. } | Expr::ILike { expr, pattern, .. } => {
            go(expr)?;
            go(pattern)
        }
        Expr::Case {
            operand,
            conditions,
            else_result,
            ..
        } => {
            if let Some(o) = operand {
                go(o)?;
            }
            for w in conditions {
                go(&w.condition)?;
                go(&w.result)?;
            }
            if let Some(x) = else_result {
                go(x)?;
            }
            Ok(())
        }
        Expr::Array(a) => a.elem.iter().try_for_each(&mut go),
        // `a[i]`, `t.a[i]`: the array and its subscript (other chains are refused when
        // evaluated).
        Expr::CompoundFieldAccess { root, access_chain } => {
            match crate::expr::subscripted(root, access_chain) {
                Some((array, index)) => {
                    go(&array)?;
                    go(index)
                }
                None => Ok(()),
            }
        }
        Expr::Function(func) => {
            if !into_aggregates && is_aggregate_name(&function_name(func)) {
                return Ok(());
            }
            function_args(func).into_iter().try_for_each(&mut go)?;
            if let FunctionArguments::List(l) = &func.args {
                for c in &l.clauses {
                    if let sqlparser::ast::FunctionArgumentClause::OrderBy(o) = c {
                        o.iter().try_for_each(|x| go(&x.expr))?;
                    }
                }
            }
            match &func.filter {
                Some(x) => go(x),
                None => Ok(()),
            }
        }
        _ => Ok(()),
    }
}

pub(crate) fn contains_aggregate(e: &Expr) -> bool {
    walk(e, false, &mut |x| match x {
        Expr::Function(f) if is_aggregate_name(&function_name(f)) => Err(SqlError::new("", "")),
        _ => Ok(()),
    })
    .is_err()
}

/// Calls `found` with each aggregate call of `e`, outside subqueries and outside other
/// aggregates' arguments (the calls a grouped query level computes).
pub(crate) fn aggregate_calls(e: &Expr, found: &mut dyn FnMut(&sqlparser::ast::Function)) {
    let _ = walk(e, false, &mut |x| {
        if let Expr::Function(f) = x {
            if is_aggregate_name(&function_name(f)) {
                found(f);
            }
        }
        Ok(())
    });
}

pub(crate) fn contains_subquery(e: &Expr) -> bool {
    walk(e, true, &mut |x| match x {
        Expr::Subquery(_) | Expr::Exists { .. } | Expr::InSubquery { .. } => {
            Err(SqlError::new("", ""))
        }
        Expr::Function(f) if matches!(f.args, FunctionArguments::Subquery(_)) => {
            Err(SqlError::new("", ""))
        }
        _ => Ok(()),
    })
    .is_err()
}

/// PostgreSQL's grouping rule (42803): in a grouped query, `e` may use a column of
/// `cols` only inside an aggregate or inside a subexpression equal to a GROUP BY
/// expression — or when `dependent` says the column is functionally dependent on the
/// grouped columns (its table's primary key is grouped). Subqueries are not looked into
/// (their own level binds them).
pub(crate) fn check_grouped(
    e: &Expr,
    group: &[Expr],
    cols: &[ColName],
    dependent: &dyn Fn(usize) -> bool,
) -> SqlResult<()> {
    let resolve = |x: &Expr| -> Option<usize> {
        let (qual, name) = col_ref(x)?;
        find_col(cols, qual.as_deref(), &name).ok().flatten()
    };
    let grouped_cols: Vec<usize> = group.iter().filter_map(resolve).collect();
    let group_text: Vec<String> = group
        .iter()
        .map(|g| g.to_string().to_ascii_lowercase())
        .collect();
    walk_pruned(e, false, &mut |x| {
        if let Some(i) = resolve(x) {
            if grouped_cols.contains(&i) || dependent(i) {
                return Ok(false);
            }
            let c = &cols[i];
            let name = match &c.qual {
                Some(q) => format!("{q}.{}", c.name),
                None => c.name.clone(),
            };
            return Err(SqlError::new(
                "42803",
                format!(
                    "column \"{name}\" must appear in the GROUP BY clause or be used in an \
                     aggregate function"
                ),
            ));
        }
        if col_ref(x).is_none() && group_text.contains(&x.to_string().to_ascii_lowercase()) {
            return Ok(false);
        }
        Ok(true)
    })
}

/// Every column reference in `e` must resolve in `cols` or an enclosing frame.
pub(crate) fn bind(
    e: &Expr,
    cols: &[ColName],
    outer: Option<&Frame<'_>>,
    aliases: &[String],
) -> SqlResult<()> {
    walk(e, true, &mut |x| {
        if let Expr::Function(f) = x {
            check_function(f)?;
        }
        if let Some((qual, name)) = col_ref(x) {
            if find_col(cols, qual.as_deref(), &name)?.is_some()
                || (qual.is_none() && aliases.contains(&name))
            {
                return Ok(());
            }
            let mut o = outer;
            let mut qual_known = qual
                .as_deref()
                .is_some_and(|q| cols.iter().any(|c| c.qual.as_deref() == Some(q)));
            while let Some(f) = o {
                if find_col(f.cols, qual.as_deref(), &name)?.is_some() {
                    return Ok(());
                }
                qual_known |= qual
                    .as_deref()
                    .is_some_and(|q| f.cols.iter().any(|c| c.qual.as_deref() == Some(q)));
                o = f.outer;
            }
            if let (Some(q), false) = (qual.as_deref(), qual_known) {
                // PostgreSQL names the missing range variable, not the column.
                return Err(SqlError::new(
                    "42P01",
                    format!("missing FROM-clause entry for table \"{q}\""),
                ));
            }
            return Err(no_column(qual.as_deref(), &name));
        }
        Ok(())
    })
}
