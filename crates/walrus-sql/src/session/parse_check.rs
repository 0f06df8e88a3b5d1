//! The name checks PostgreSQL's parse analysis makes at the extended protocol's Parse:
//! a table a SELECT, INSERT, UPDATE or DELETE names must exist (42P01 in reply to
//! Parse, not at Describe or Execute), and in a SELECT over plain user tables every
//! column its select list and WHERE name must too (42703, with the executor's own
//! binding rule, `plan::bind`). walrus has no binder pass separate from execution, so
//! other shapes (joins, derived tables, GROUP BY / ORDER BY names, other statements)
//! still find a missing column when first described or run.

use std::ops::ControlFlow;

use sqlparser::ast::{
    ObjectName, SelectItem, SetExpr, Statement, TableFactor, TableObject, Visit, Visitor,
};

use super::Session;
use crate::catalog_views;
use crate::error::{SqlError, SqlResult};
use crate::names::ident;

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

impl Session {
    /// 42703 (or 42P01 for an unknown qualifier) for a column the select list or WHERE
    /// of a `SELECT ... FROM t [, u ...] [WHERE ...]` over user tables names and no
    /// table has; other statement shapes are left to execution. Only those two errors
    /// are reported here: anything else the binding walk finds is the executor's to
    /// report (or refuse) in its own order.
    pub(super) fn check_columns_exist(&mut self, st: &Statement) -> SqlResult<()> {
        let Statement::Query(q) = st else {
            return Ok(());
        };
        if q.with.is_some() {
            return Ok(());
        }
        let SetExpr::Select(sel) = q.body.as_ref() else {
            return Ok(());
        };
        if sel.from.is_empty() || sel.from.iter().any(|t| !t.joins.is_empty()) {
            return Ok(());
        }
        let mut cols = Vec::new();
        for twj in &sel.from {
            let Some((table, alias)) = plain_table(&twj.relation) else {
                return Ok(());
            };
            if catalog_views::is_virtual(None, &table) {
                return Ok(());
            }
            // The tables exist (checked first); a failure here is left to execution.
            let Ok(def) = self.txn().table(&table) else {
                return Ok(());
            };
            let qual = alias.unwrap_or_else(|| def.name.clone());
            cols.extend(crate::plan::table_cols(&qual, &def));
        }
        let exprs = sel
            .projection
            .iter()
            .filter_map(|item| match item {
                SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => Some(e),
                _ => None,
            })
            .chain(sel.selection.as_ref());
        for e in exprs {
            if let Err(err) = crate::plan::bind(e, &cols, None, &[]) {
                if err.sqlstate == "42703" || err.sqlstate == "42P01" {
                    return Err(err);
                }
            }
        }
        Ok(())
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
            if let Some(t) = self.txn.take() {
                let _ = t.rollback();
            }
        }
        r
    }
}
