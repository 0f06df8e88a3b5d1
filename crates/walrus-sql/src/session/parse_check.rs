//! The relation checks PostgreSQL's parse analysis makes at the extended protocol's
//! Parse: a table a SELECT, INSERT, UPDATE or DELETE names must exist (42P01 in reply
//! to Parse, not at Describe or Execute). walrus has no binder pass separate from
//! execution, so only table names are checked here; a missing column is still found
//! when the statement is first described or run.

use std::ops::ControlFlow;

use sqlparser::ast::{ObjectName, Statement, TableFactor, TableObject, Visit, Visitor};

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

impl Session {
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
        if !self.in_block {
            if let Some(t) = self.txn.take() {
                let _ = t.rollback();
            }
        }
        r
    }
}
