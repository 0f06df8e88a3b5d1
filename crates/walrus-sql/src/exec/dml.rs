//! INSERT (VALUES or SELECT), UPDATE and DELETE on one user table, and the row reads they
//! and single-table SELECTs share: the rows matching a WHERE clause through the access
//! path the planner chose, with READ COMMITTED's re-check of concurrently updated rows.

use std::ops::Bound;
use std::sync::Arc;

use sqlparser::ast::{self, Expr, SetExpr, TableFactor};
use walrus_base::Tid;
use walrus_engine::access::datum::Datum;
use walrus_engine::catalog::{ColumnDef, TableDef};
use walrus_engine::engine::{RowChange, Transaction};

use super::Env;
use crate::error::{SqlError, SqlResult};
use crate::expr::{coerce, eval, Scope};
use crate::names::object_name;
use crate::plan::{choose_access, Access};
use crate::result::QueryResult;

pub(crate) fn insert(
    env: &mut dyn Env,
    ins: &ast::Insert,
    params: &[Datum],
) -> SqlResult<QueryResult> {
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
    let def = env.txn().table(&table)?;
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
            let rows = super::select(env, source, params)?.rows;
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
                env.txn().insert(&def, &row)?;
                n += 1;
            }
            return Ok(QueryResult::tag(format!("INSERT 0 {n}")));
        }
        _ => return Err(SqlError::unsupported("this INSERT source is not supported")),
    };
    let (now, settings) = (env.now(), env.settings());
    let get = move |n: &str| settings.get(n);
    let intr = env.interrupt();
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
        env.txn().insert(&def, &row)?;
        n += 1;
    }
    Ok(QueryResult::tag(format!("INSERT 0 {n}")))
}

/// Rows of `def` matching `filter`, through a unique index when the filter pins all
/// its columns with equalities to constants, else a sequential scan (see
/// [`choose_access`]).
pub(crate) fn matching_rows(
    env: &mut dyn Env,
    def: &TableDef,
    filter: Option<&Expr>,
    params: &[Datum],
) -> SqlResult<Vec<(Tid, Vec<Datum>)>> {
    let (now, settings, memory) = (env.now(), env.settings(), env.memory());
    let get = move |n: &str| settings.get(n);
    let access = choose_access(def, filter, params, now, &get);
    let t = env.txn();
    let mut out = Vec::new();
    match access {
        Access::Index { index, key } => {
            for (tid, row) in
                t.index_scan(def, index, Bound::Included(&key), Bound::Included(&key))?
            {
                if row_matches(filter, &def.columns, &row, params, now, &get)? {
                    memory.charge_row(&row)?;
                    out.push((tid, row));
                }
            }
        }
        // WHERE is applied as the scan goes, so only matching rows are kept (and
        // charged to the statement's memory budget).
        Access::Scan => {
            let mut failed = None;
            t.scan(def, |tid, row| {
                let kept = row_matches(filter, &def.columns, &row, params, now, &get)
                    .and_then(|m| m.then(|| memory.charge_row(&row)).transpose());
                match kept {
                    Ok(Some(())) => out.push((tid, row)),
                    Ok(None) => {}
                    Err(e) => {
                        failed = Some(e);
                        return Ok(false);
                    }
                }
                Ok(true)
            })?;
            if let Some(e) = failed {
                return Err(e);
            }
        }
        Access::Nothing => {}
    }
    Ok(out)
}

fn single_table(
    env: &mut dyn Env,
    from: &[ast::TableWithJoins],
) -> SqlResult<Option<Arc<TableDef>>> {
    match from {
        [] => Ok(None),
        [t] if t.joins.is_empty() => match &t.relation {
            TableFactor::Table { name, .. } => {
                let n = object_name(name);
                Ok(Some(env.txn().table(&n)?))
            }
            other => Err(SqlError::unsupported(format!(
                "FROM {other} is not supported yet"
            ))),
        },
        _ => Err(SqlError::unsupported("joins are not supported yet")),
    }
}

/// Every row of `def` visible to the statement's snapshot.
/// Each is charged to the statement's memory budget as it is read.
pub(crate) fn scan_rows(env: &mut dyn Env, def: &TableDef) -> SqlResult<Vec<Vec<Datum>>> {
    let memory = env.memory();
    let mut out = Vec::new();
    let mut failed = None;
    env.txn().scan(def, |_, row| {
        if let Err(e) = memory.charge_row(&row) {
            failed = Some(e);
            return Ok(false);
        }
        out.push(row);
        Ok(true)
    })?;
    match failed {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

pub(crate) fn update(
    env: &mut dyn Env,
    u: &ast::Update,
    params: &[Datum],
) -> SqlResult<QueryResult> {
    let def = single_table(env, std::slice::from_ref(&u.table))?
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
    let rows = matching_rows(env, &def, u.selection.as_ref(), params)?;
    let (now, settings) = (env.now(), env.settings());
    let get = move |n: &str| settings.get(n);
    let intr = env.interrupt();
    let n = change_rows(
        env,
        &def,
        u.selection.as_ref(),
        rows,
        params,
        |t, tid, old| {
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
        },
    )?;
    Ok(QueryResult::tag(format!("UPDATE {n}")))
}

/// Applies `op` (an update or delete) to each matching row. Under READ COMMITTED a
/// row changed by a transaction that committed meanwhile is re-checked against the
/// condition on its newest version and, if it still matches, changed there.
fn change_rows(
    env: &mut dyn Env,
    def: &TableDef,
    filter: Option<&Expr>,
    rows: Vec<(Tid, Vec<Datum>)>,
    params: &[Datum],
    mut op: impl FnMut(&mut Transaction, Tid, &[Datum]) -> SqlResult<RowChange>,
) -> SqlResult<u64> {
    let (now, settings) = (env.now(), env.settings());
    let get = move |n: &str| settings.get(n);
    let mut n = 0;
    for (mut tid, mut row) in rows {
        loop {
            match op(env.txn(), tid, &row)? {
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

pub(crate) fn delete(
    env: &mut dyn Env,
    d: &ast::Delete,
    params: &[Datum],
) -> SqlResult<QueryResult> {
    let from = match &d.from {
        ast::FromTable::WithFromKeyword(f) | ast::FromTable::WithoutKeyword(f) => f.clone(),
    };
    let def = single_table(env, &from)?.ok_or_else(|| SqlError::syntax("DELETE needs a table"))?;
    let rows = matching_rows(env, &def, d.selection.as_ref(), params)?;
    let n = change_rows(
        env,
        &def,
        d.selection.as_ref(),
        rows,
        params,
        |t, tid, _| Ok(t.delete(&def, tid)?),
    )?;
    Ok(QueryResult::tag(format!("DELETE {n}")))
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
