//! The name checks PostgreSQL's parse analysis makes at the extended protocol's Parse:
//! a table a SELECT, INSERT, UPDATE or DELETE names must exist (42P01 in reply to
//! Parse, not at Describe or Execute), and so must the columns (42703, with the
//! executor's own binding rule, `plan::bind`) of a SELECT over plain user tables and
//! their joins (ON, select list, WHERE), an INSERT's target list, an UPDATE's SET
//! targets, values, WHERE and RETURNING, a DELETE's WHERE and RETURNING. walrus has no
//! binder pass separate from execution, so other shapes (derived tables, WITH, GROUP
//! BY / ORDER BY names) still find a missing column when first described or run.

use std::ops::ControlFlow;

use std::sync::Arc;

use sqlparser::ast::{
    AssignmentTarget, Expr, FromTable, JoinConstraint, JoinOperator, ObjectName, Query, SelectItem,
    SetExpr, Statement, TableFactor, TableObject, Visit, Visitor,
};
use walrus_engine::catalog::TableDef;

use super::Session;
use crate::catalog_views;
use crate::error::{SqlError, SqlResult};
use crate::names::ident;
use crate::rel::ColName;

/// The plain table names (no table functions) a statement reads or writes; `None` when
/// its names may be something other than tables: a `WITH` left in it (a recursive CTE's
/// name), or a statement kind other than SELECT/INSERT/UPDATE/DELETE.
fn named_tables(st: &Statement) -> Option<Vec<ObjectName>> {
    struct Tables {
        names: Vec<ObjectName>,
        with: bool,
    }
    impl Visitor for Tables {
        type Break = ();
        fn pre_visit_query(&mut self, q: &sqlparser::ast::Query) -> ControlFlow<()> {
            if q.with.is_some() {
                self.with = true;
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        }
        fn pre_visit_table_factor(&mut self, tf: &TableFactor) -> ControlFlow<()> {
            if let TableFactor::Table {
                name, args: None, ..
            } = tf
            {
                self.names.push(name.clone());
            }
            ControlFlow::Continue(())
        }
    }
    let mut v = Tables {
        names: Vec::new(),
        with: false,
    };
    match st {
        Statement::Query(_) | Statement::Update(_) | Statement::Delete(_) => {}
        Statement::Insert(i) => match &i.table {
            TableObject::TableName(n) => v.names.push(n.clone()),
            _ => return None,
        },
        _ => return None,
    }
    if st.visit(&mut v).is_break() || v.with {
        return None;
    }
    Some(v.names)
}

/// The one-part or `public.` name of a FROM item that is a plain table (no alias
/// column list, no function call), with its range-variable alias.
fn plain_table(tf: &TableFactor) -> Option<(String, Option<String>)> {
    let TableFactor::Table {
        name,
        alias,
        args: None,
        ..
    } = tf
    else {
        return None;
    };
    if alias.as_ref().is_some_and(|a| !a.columns.is_empty()) {
        return None;
    }
    let parts: Vec<String> = name
        .0
        .iter()
        .map(|p| p.as_ident().map(ident))
        .collect::<Option<_>>()?;
    let table = match parts.as_slice() {
        [t] => t.clone(),
        [s, t] if s == "public" => t.clone(),
        _ => return None,
    };
    Some((table, alias.as_ref().map(|a| ident(&a.name))))
}

/// The expression a join's ON names (`None` without one: USING, NATURAL, a cross
/// join); `Err(())` for a join kind walrus leaves to execution.
fn join_condition(op: &JoinOperator) -> Result<Option<&Expr>, ()> {
    use JoinOperator as J;
    let c = match op {
        J::Join(c)
        | J::Inner(c)
        | J::Left(c)
        | J::LeftOuter(c)
        | J::Right(c)
        | J::RightOuter(c)
        | J::FullOuter(c)
        | J::CrossJoin(c) => c,
        _ => return Err(()),
    };
    Ok(match c {
        JoinConstraint::On(e) => Some(e),
        _ => None,
    })
}

/// The first of `exprs` naming a column `cols` lacks: 42703, or 42P01 for an unknown
/// qualifier; any other binding error is the executor's to report in its own order.
fn first_missing<'a>(exprs: impl IntoIterator<Item = &'a Expr>, cols: &[ColName]) -> SqlResult<()> {
    for e in exprs {
        if let Err(err) = crate::plan::bind(e, cols, None, &[]) {
            if err.sqlstate == "42703" || err.sqlstate == "42P01" {
                return Err(err);
            }
        }
    }
    Ok(())
}

/// The expressions of a select list or RETURNING (wildcards name no column).
fn item_exprs(items: &[SelectItem]) -> impl Iterator<Item = &Expr> {
    items.iter().filter_map(|item| match item {
        SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => Some(e),
        _ => None,
    })
}

impl Session {
    /// A plain user table's columns under its range-variable name and its definition;
    /// `None` for anything else (a catalog view, a derived table, a function), whose
    /// columns are left to execution.
    fn plain_table_cols(&mut self, tf: &TableFactor) -> Option<(Vec<ColName>, Arc<TableDef>)> {
        let (table, alias) = plain_table(tf)?;
        if catalog_views::is_virtual(None, &table) {
            return None;
        }
        // The tables exist (checked first); a failure here is left to execution.
        let def = self.txn().table(&table).ok()?;
        let qual = alias.unwrap_or_else(|| def.name.clone());
        Some((crate::plan::table_cols(&qual, &def), def))
    }

    /// 42703 (or 42P01 for an unknown qualifier) for a column a statement names that its
    /// tables lack, in the order PostgreSQL's parse analysis finds them:
    /// - `SELECT` over plain user tables, joined or not (no WITH, derived tables or
    ///   functions): the ON conditions, the select list, WHERE;
    /// - `INSERT INTO t (cols)`: the target columns, then such a SELECT source;
    /// - `UPDATE t SET ... WHERE ...`: WHERE, RETURNING, the SET values, the SET targets;
    /// - `DELETE FROM t WHERE ...`: WHERE, RETURNING.
    ///
    /// Other shapes are left to execution.
    pub(super) fn check_columns_exist(&mut self, st: &Statement) -> SqlResult<()> {
        match st {
            Statement::Query(q) => self.check_query_columns(q),
            Statement::Insert(i) => {
                let TableObject::TableName(name) = &i.table else {
                    return Ok(());
                };
                let Ok(def) = self.txn().table(&crate::names::object_name(name)) else {
                    return Ok(());
                };
                for c in &i.columns {
                    let n = crate::names::object_name(c);
                    if def.column_index(&n).is_none() {
                        return Err(SqlError::new(
                            "42703",
                            format!("column \"{n}\" of relation \"{}\" does not exist", def.name),
                        ));
                    }
                }
                match &i.source {
                    Some(q) => self.check_query_columns(q),
                    None => Ok(()),
                }
            }
            Statement::Update(u) => {
                if u.from.is_some() || !u.table.joins.is_empty() {
                    return Ok(());
                }
                let Some((cols, def)) = self.plain_table_cols(&u.table.relation) else {
                    return Ok(());
                };
                let returning = u.returning.as_deref().unwrap_or_default();
                first_missing(
                    u.selection
                        .iter()
                        .chain(item_exprs(returning))
                        .chain(u.assignments.iter().map(|a| &a.value)),
                    &cols,
                )?;
                for a in &u.assignments {
                    if let AssignmentTarget::ColumnName(n) = &a.target {
                        let n = crate::names::object_name(n);
                        if def.column_index(&n).is_none() {
                            return Err(SqlError::new(
                                "42703",
                                format!(
                                    "column \"{n}\" of relation \"{}\" does not exist",
                                    def.name
                                ),
                            ));
                        }
                    }
                }
                Ok(())
            }
            Statement::Delete(d) => {
                let FromTable::WithFromKeyword(from) = &d.from else {
                    return Ok(());
                };
                let [t] = from.as_slice() else {
                    return Ok(());
                };
                if d.using.is_some() || !t.joins.is_empty() {
                    return Ok(());
                }
                let Some((cols, _)) = self.plain_table_cols(&t.relation) else {
                    return Ok(());
                };
                let returning = d.returning.as_deref().unwrap_or_default();
                first_missing(d.selection.iter().chain(item_exprs(returning)), &cols)
            }
            _ => Ok(()),
        }
    }

    /// [`Self::check_columns_exist`] for a `SELECT ... FROM` plain tables and their
    /// joins.
    fn check_query_columns(&mut self, q: &Query) -> SqlResult<()> {
        if q.with.is_some() {
            return Ok(());
        }
        let SetExpr::Select(sel) = q.body.as_ref() else {
            return Ok(());
        };
        if sel.from.is_empty() {
            return Ok(());
        }
        let mut cols = Vec::new();
        let mut conditions = Vec::new();
        for twj in &sel.from {
            let Some((c, _)) = self.plain_table_cols(&twj.relation) else {
                return Ok(());
            };
            cols.extend(c);
            for j in &twj.joins {
                let Some((c, _)) = self.plain_table_cols(&j.relation) else {
                    return Ok(());
                };
                cols.extend(c);
                match join_condition(&j.join_operator) {
                    Ok(on) => conditions.extend(on),
                    Err(()) => return Ok(()),
                }
            }
        }
        first_missing(
            conditions
                .into_iter()
                .chain(item_exprs(&sel.projection))
                .chain(sel.selection.as_ref()),
            &cols,
        )
    }

    /// 42P01 for the first table `st` names that does not exist (as the executor would
    /// report it), checked in a transaction of its own outside a block.
    pub(super) fn check_tables_exist(&mut self, st: &Statement) -> SqlResult<()> {
        let Some(names) = named_tables(st) else {
            return Ok(());
        };
        let mut r = Ok(());
        for name in &names {
            let parts: Vec<String> = name
                .0
                .iter()
                .filter_map(|p| p.as_ident())
                .map(ident)
                .collect();
            let (schema, table) = match parts.as_slice() {
                [t] => (None, t.as_str()),
                [s, t] | [_, s, t] => (Some(s.as_str()), t.as_str()),
                _ => continue,
            };
            if catalog_views::is_virtual(schema, table) {
                continue;
            }
            if schema.is_some_and(|s| s != "public") {
                r = Err(SqlError::new(
                    "42P01",
                    format!("relation \"{}\" does not exist", parts.join(".")),
                ));
                break;
            }
            if let Err(e) = self.txn().table(table) {
                r = Err(e.into());
                break;
            }
        }
        if r.is_ok() {
            r = self.check_columns_exist(st);
        }
        if !self.in_block {
            if let Some(t) = self.take_txn() {
                let _ = t.rollback();
            }
        }
        r
    }
}
