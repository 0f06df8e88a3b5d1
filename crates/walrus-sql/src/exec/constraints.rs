//! CHECK and FOREIGN KEY constraints: their definition (CREATE TABLE, ALTER TABLE ADD
//! CONSTRAINT, with PostgreSQL's default names and its errors), the check of the rows
//! a table already has when one is added, and their enforcement on INSERT, UPDATE and
//! DELETE.
//!
//! **CHECK** is evaluated on each new row version before it is written (after NOT
//! NULL, as PostgreSQL orders them); false is 23514 with the failing row, NULL passes.
//!
//! **FOREIGN KEY**, as PostgreSQL's referential-integrity triggers do it, at the end of
//! the statement (so a statement may insert a parent and its child in any order):
//! - a new or changed referencing row (all key columns non-NULL under MATCH SIMPLE;
//!   all or none under MATCH FULL) needs a referenced row with its key: looked up
//!   through the referenced table's unique index under a fresh snapshot (the latest
//!   committed rows, whatever the isolation level) and locked `KEY SHARE`, so a
//!   concurrent DELETE of it waits for this transaction or fails, and never leaves an
//!   orphan (`txn::row_locks`);
//! - a deleted referenced row, or one whose key changed, applies the constraint's
//!   action to the rows referencing the old key: NO ACTION / RESTRICT fail (23503)
//!   if any exists (NO ACTION only if no other row has the key by then), CASCADE
//!   deletes them or gives them the new key, SET NULL / SET DEFAULT update them — each
//!   change a full row change with its own constraints and cascades.
//!
//! A DEFERRABLE constraint in deferred mode (`INITIALLY DEFERRED`, or `SET CONSTRAINTS
//! ... DEFERRED`) runs its checks (not its actions, as in PostgreSQL) at COMMIT
//! instead, or when `SET CONSTRAINTS ... IMMEDIATE` names it; a deferred check of a row
//! version no longer live by then is skipped.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use sqlparser::ast::{self, Expr};
use walrus_base::Tid;
use walrus_engine::access::datum::{Datum, TypeId};
use walrus_engine::catalog::{ConstraintDef, ConstraintKind, FkAction, ForeignKeyDef, TableDef};
use walrus_engine::engine::{LockWaitPolicy, RowChange, RowLockMode, RowLocked, Transaction};

use super::defaults::default_value;
use super::Env;
use crate::error::{SqlError, SqlResult};
use crate::expr::{assign, coerce, compare_values, eval, holds, Scope};
use crate::names::{ident, object_name};
use crate::stored_expr::{columns_mentioned, parse as parse_default};

/// PostgreSQL's identifier length limit (NAMEDATALEN - 1).
const NAME_MAX: usize = 63;

// ---------------------------------------------------------------------------------
// Definition
// ---------------------------------------------------------------------------------

/// PostgreSQL's `makeObjectName`: `name1_name2_label`, the longer of the first two cut
/// until the whole fits in 63 bytes.
fn object_name_for(name1: &str, name2: Option<&str>, label: &str) -> String {
    let mut a = name1.to_string();
    let mut b = name2.unwrap_or("").to_string();
    let overhead = label.len() + 1 + if name2.is_some() { 1 } else { 0 };
    while a.len() + b.len() + overhead > NAME_MAX {
        let cut = if a.len() >= b.len() { &mut a } else { &mut b };
        let mut n = cut.len() - 1;
        while !cut.is_char_boundary(n) {
            n -= 1;
        }
        cut.truncate(n);
    }
    match name2 {
        Some(_) => format!("{a}_{b}_{label}"),
        None => format!("{a}_{label}"),
    }
}

/// A constraint name PostgreSQL would choose (`ChooseConstraintName`): the first of
/// `base`, `base1`, `base2`, ... (made to fit) no constraint or relation uses.
fn choose_name(
    t: &mut Transaction,
    table: &str,
    column: Option<&str>,
    label: &str,
    taken: &[String],
) -> SqlResult<String> {
    let view = t.catalog()?;
    let used = |n: &str| {
        taken.iter().any(|x| x == n)
            || view.relation_exists(n)
            || view
                .tables
                .values()
                .any(|d| d.constraints.iter().any(|c| c.name == n))
    };
    let mut n = 0;
    loop {
        let label = if n == 0 {
            label.to_string()
        } else {
            format!("{label}{n}")
        };
        let name = object_name_for(table, column, &label);
        if !used(&name) {
            return Ok(name);
        }
        n += 1;
    }
}

/// `CHECK (expr)` of table `def`: checked for what PostgreSQL refuses in one
/// (subqueries, aggregates, window functions, columns of no such name, a non-boolean
/// result), named as PostgreSQL names it unless `name` is given.
pub(crate) fn check_constraint(
    t: &mut Transaction,
    def: &TableDef,
    name: Option<String>,
    expr: &Expr,
    taken: &[String],
) -> SqlResult<ConstraintDef> {
    let mut subquery = false;
    let mut window = false;
    let _ = ast::visit_expressions(expr, |x| {
        match x {
            Expr::Subquery(_) | Expr::Exists { .. } | Expr::InSubquery { .. } => subquery = true,
            Expr::Function(f) if f.over.is_some() => window = true,
            _ => {}
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    if subquery {
        return Err(SqlError::unsupported(
            "cannot use subquery in check constraint",
        ));
    }
    if window {
        return Err(SqlError::new(
            "42P20",
            "window functions are not allowed in check constraints",
        ));
    }
    if crate::plan::contains_aggregate(expr) {
        return Err(SqlError::new(
            "42803",
            "aggregate functions are not allowed in check constraints",
        ));
    }
    let mentioned = columns_mentioned(expr);
    for c in &mentioned {
        if def.column_index(c).is_none() {
            return Err(SqlError::new(
                "42703",
                format!("column \"{c}\" does not exist"),
            ));
        }
    }
    // The type of the result: evaluated once over a row of NULLs.
    let nulls = vec![Datum::Null; def.columns.len()];
    let scope = Scope::bare(&def.columns, Some(&nulls), 0);
    if let Ok(v) = eval(expr, &scope) {
        if !matches!(v, Datum::Null | Datum::Bool(_)) {
            let ty = crate::expr::ops_type_name(&v);
            return Err(SqlError::new(
                "42804",
                format!("argument of CHECK must be type boolean, not type {ty}"),
            ));
        }
    }
    let name = match name {
        Some(n) => n,
        None => {
            let column = (mentioned.len() == 1).then(|| mentioned[0].as_str());
            choose_name(t, &def.name, column, "check", taken)?
        }
    };
    Ok(ConstraintDef {
        name,
        table: def.name.clone(),
        kind: ConstraintKind::Check {
            expr: expr.to_string(),
        },
        deferrable: false,
        initially_deferred: false,
    })
}

fn action(a: &Option<ast::ReferentialAction>) -> FkAction {
    match a {
        None | Some(ast::ReferentialAction::NoAction) => FkAction::NoAction,
        Some(ast::ReferentialAction::Restrict) => FkAction::Restrict,
        Some(ast::ReferentialAction::Cascade) => FkAction::Cascade,
        Some(ast::ReferentialAction::SetNull) => FkAction::SetNull,
        Some(ast::ReferentialAction::SetDefault) => FkAction::SetDefault,
    }
}

/// Whether values of `a` and `b` can be compared as keys (PostgreSQL needs an
/// equality operator between the two types; walrus takes the same type, any two
/// integer widths, or numeric with an integer).
fn key_types_compatible(a: TypeId, b: TypeId) -> bool {
    use TypeId::*;
    let number = |t| matches!(t, Int2 | Int4 | Int8 | Numeric);
    a == b || (number(a) && number(b))
}

/// `FOREIGN KEY (columns) REFERENCES table (columns)` of table `def` (`column`: the
/// column a column-level REFERENCES is written on).
pub(crate) fn foreign_key(
    t: &mut Transaction,
    def: &TableDef,
    fk: &ast::ForeignKeyConstraint,
    column: Option<&str>,
    taken: &[String],
) -> SqlResult<ConstraintDef> {
    if matches!(
        fk.match_kind,
        Some(ast::ConstraintReferenceMatchKind::Partial)
    ) {
        return Err(SqlError::unsupported("MATCH PARTIAL not yet implemented"));
    }
    let (deferrable, initially_deferred) = characteristics(fk.characteristics.as_ref())?;
    let names: Vec<String> = match column {
        Some(c) => vec![c.to_string()],
        None => fk.columns.iter().map(ident).collect(),
    };
    let mut columns = Vec::new();
    for n in &names {
        columns.push(def.column_index(n).ok_or_else(|| {
            SqlError::new(
                "42703",
                format!("column \"{n}\" referenced in foreign key constraint does not exist"),
            )
        })?);
    }
    let ref_name = object_name(&fk.foreign_table);
    let parent = if ref_name == def.name {
        Arc::new(def.clone())
    } else {
        t.table(&ref_name)?
    };
    let ref_columns: Vec<usize> = if fk.referred_columns.is_empty() {
        let pk = parent.indexes.iter().find(|i| i.primary).ok_or_else(|| {
            SqlError::new(
                "42704",
                format!("there is no primary key for referenced table \"{ref_name}\""),
            )
        })?;
        pk.columns.clone()
    } else {
        let mut v = Vec::new();
        for c in &fk.referred_columns {
            let n = ident(c);
            v.push(parent.column_index(&n).ok_or_else(|| {
                SqlError::new(
                    "42703",
                    format!("column \"{n}\" referenced in foreign key constraint does not exist"),
                )
            })?);
        }
        v
    };
    if ref_columns.len() != columns.len() {
        return Err(SqlError::new(
            "42830",
            "number of referencing and referenced columns for foreign key disagree",
        ));
    }
    if parent.index_on(&ref_columns, true).is_none() {
        return Err(SqlError::new(
            "42830",
            format!(
                "there is no unique constraint matching given keys for referenced table \"{ref_name}\""
            ),
        ));
    }
    let name = match &fk.name {
        Some(n) => ident(n),
        None => choose_name(t, &def.name, Some(&names.join("_")), "fkey", taken)?,
    };
    for (&c, &r) in columns.iter().zip(&ref_columns) {
        let (a, b) = (&def.columns[c], &parent.columns[r]);
        if !key_types_compatible(a.ty, b.ty) {
            return Err(SqlError::new(
                "42804",
                format!("foreign key constraint \"{name}\" cannot be implemented"),
            )
            .with_detail(format!(
                "Key columns \"{}\" and \"{}\" are of incompatible types: {} and {}.",
                a.name,
                b.name,
                a.ty.name(),
                b.ty.name()
            )));
        }
    }
    Ok(ConstraintDef {
        name,
        table: def.name.clone(),
        kind: ConstraintKind::ForeignKey(ForeignKeyDef {
            columns,
            ref_table: ref_name,
            ref_columns,
            on_delete: action(&fk.on_delete),
            on_update: action(&fk.on_update),
            match_full: matches!(fk.match_kind, Some(ast::ConstraintReferenceMatchKind::Full)),
        }),
        deferrable,
        initially_deferred,
    })
}

/// `[NOT] DEFERRABLE [INITIALLY DEFERRED | IMMEDIATE]`, checked as PostgreSQL does.
fn characteristics(c: Option<&ast::ConstraintCharacteristics>) -> SqlResult<(bool, bool)> {
    let Some(c) = c else {
        return Ok((false, false));
    };
    if c.enforced == Some(false) {
        return Err(SqlError::unsupported(
            "NOT ENFORCED constraints are not supported",
        ));
    }
    let deferred = matches!(c.initially, Some(ast::DeferrableInitial::Deferred));
    let deferrable = match c.deferrable {
        Some(d) => d,
        None => deferred,
    };
    if deferred && !deferrable {
        return Err(SqlError::syntax(
            "constraint declared INITIALLY DEFERRED must be DEFERRABLE",
        ));
    }
    Ok((deferrable, deferred))
}

/// Adds constraint `c` to its table and checks the rows the table has (PostgreSQL's
/// validation of ALTER TABLE ADD CONSTRAINT; a new table has none).
pub(crate) fn add(t: &mut Transaction, c: &ConstraintDef) -> SqlResult<()> {
    t.add_constraint(c)?;
    t.next_statement();
    let def = t.table(&c.table)?;
    let rows = {
        let mut rows = Vec::new();
        t.scan(&def, |tid, row| {
            rows.push((tid, row));
            Ok(true)
        })?;
        rows
    };
    match &c.kind {
        ConstraintKind::Check { expr } => {
            let e = parse_default(expr)?;
            // now() and its kin read the clock, as the rows' own statements did.
            let now = crate::value::system_time_to_pg(std::time::SystemTime::now());
            for (_, row) in &rows {
                let scope = Scope::bare(&def.columns, Some(row), now);
                if !check_holds(&e, eval(&e, &scope)?)? {
                    return Err(SqlError::new(
                        "23514",
                        format!(
                            "check constraint \"{}\" of relation \"{}\" is violated by some row",
                            c.name, c.table
                        ),
                    ));
                }
            }
        }
        ConstraintKind::ForeignKey(fk) => {
            let c = Arc::new(c.clone());
            for (_, row) in &rows {
                if let Some(key) = child_key(fk, row, &c)? {
                    check_parent_exists(t, &c, fk, &key)?;
                }
            }
        }
    }
    Ok(())
}

fn check_holds(e: &Expr, v: Datum) -> SqlResult<bool> {
    if v.is_null() {
        return Ok(true);
    }
    holds("CHECK", e, v)
}

// ---------------------------------------------------------------------------------
// Enforcement
// ---------------------------------------------------------------------------------

/// A table's constraints as one statement enforces them: CHECK expressions parsed
/// once; the foreign keys it has and those that reference it.
#[derive(Clone)]
pub(crate) struct TableConstraints {
    pub(crate) def: Arc<TableDef>,
    checks: Vec<(Arc<ConstraintDef>, Arc<Expr>)>,
    /// Foreign keys of this table.
    fks: Vec<Arc<ConstraintDef>>,
    /// Foreign keys that reference this table.
    referenced_by: Vec<Arc<ConstraintDef>>,
}

impl TableConstraints {
    pub(crate) fn of(def: &TableDef) -> SqlResult<Option<TableConstraints>> {
        if def.constraints.is_empty() && def.referenced_by.is_empty() {
            return Ok(None);
        }
        let mut checks = Vec::new();
        let mut fks = Vec::new();
        for c in &def.constraints {
            match &c.kind {
                ConstraintKind::Check { expr } => checks.push((c.clone(), parse_default(expr)?)),
                ConstraintKind::ForeignKey(_) => fks.push(c.clone()),
            }
        }
        Ok(Some(TableConstraints {
            def: Arc::new(def.clone()),
            checks,
            fks,
            referenced_by: def.referenced_by.clone(),
        }))
    }

    /// CHECK constraints on a new row version (after NOT NULL, as PostgreSQL orders
    /// them).
    pub(crate) fn check_row(&self, row: &[Datum], scope: &Scope<'_>) -> SqlResult<()> {
        if self.checks.is_empty() {
            return Ok(());
        }
        Transaction::check_row(&self.def, row)?;
        let scope = Scope {
            columns: &self.def.columns,
            row: Some(row),
            frame: None,
            ..*scope
        };
        for (c, e) in &self.checks {
            if !check_holds(e, eval(e, &scope)?)? {
                return Err(SqlError::new(
                    "23514",
                    format!(
                        "new row for relation \"{}\" violates check constraint \"{}\"",
                        self.def.name, c.name
                    ),
                )
                .with_detail(failing_row(row)));
            }
        }
        Ok(())
    }

    /// After a row was inserted at `tid`.
    pub(crate) fn inserted(&self, work: &mut FkWork, tid: Tid, row: &[Datum]) {
        for c in &self.fks {
            work.queue.push_back(Work::ChildCheck {
                constraint: c.clone(),
                table: self.def.clone(),
                tid,
                row: row.to_vec(),
            });
        }
    }

    /// After the row `old` was replaced by `new` (at `tid`).
    pub(crate) fn updated(&self, work: &mut FkWork, tid: Tid, old: &[Datum], new: &[Datum]) {
        for c in &self.fks {
            let fk = c.foreign_key().expect("foreign key");
            let changed = fk.columns.iter().any(|&i| !same(&old[i], &new[i]));
            // A deferred check runs on whatever version is live at commit, so each
            // new version carries one (the row may have been inserted in this
            // transaction with a key that does not exist yet).
            if changed || c.deferrable {
                work.queue.push_back(Work::ChildCheck {
                    constraint: c.clone(),
                    table: self.def.clone(),
                    tid,
                    row: new.to_vec(),
                });
            }
        }
        for c in &self.referenced_by {
            let fk = c.foreign_key().expect("foreign key");
            if fk.ref_columns.iter().any(|&i| !same(&old[i], &new[i])) {
                work.queue.push_back(Work::ParentChanged {
                    constraint: c.clone(),
                    parent: self.def.clone(),
                    old_key: fk.ref_columns.iter().map(|&i| old[i].clone()).collect(),
                    new_key: Some(fk.ref_columns.iter().map(|&i| new[i].clone()).collect()),
                });
            }
        }
    }

    /// After the row `old` was deleted.
    pub(crate) fn deleted(&self, work: &mut FkWork, old: &[Datum]) {
        for c in &self.referenced_by {
            let fk = c.foreign_key().expect("foreign key");
            work.queue.push_back(Work::ParentChanged {
                constraint: c.clone(),
                parent: self.def.clone(),
                old_key: fk.ref_columns.iter().map(|&i| old[i].clone()).collect(),
                new_key: None,
            });
        }
    }
}

/// Byte-for-byte the same stored value (PostgreSQL's test of whether a key changed).
fn same(a: &Datum, b: &Datum) -> bool {
    a == b
}

/// PostgreSQL's `Failing row contains (...)` detail.
fn failing_row(row: &[Datum]) -> String {
    let vals: Vec<String> = row
        .iter()
        .map(|d| crate::value::format_text(d).unwrap_or_else(|| "null".into()))
        .collect();
    format!("Failing row contains ({}).", vals.join(", "))
}

/// A foreign-key task left for the end of the statement (or the commit).
#[derive(Clone)]
pub(crate) enum Work {
    /// The row version at `tid` of `table` needs its referenced row.
    ChildCheck {
        constraint: Arc<ConstraintDef>,
        table: Arc<TableDef>,
        tid: Tid,
        row: Vec<Datum>,
    },
    /// A referenced row was deleted (`new_key` None) or its key changed.
    ParentChanged {
        constraint: Arc<ConstraintDef>,
        parent: Arc<TableDef>,
        old_key: Vec<Datum>,
        new_key: Option<Vec<Datum>>,
    },
}

impl Work {
    fn constraint(&self) -> &Arc<ConstraintDef> {
        match self {
            Work::ChildCheck { constraint, .. } | Work::ParentChanged { constraint, .. } => {
                constraint
            }
        }
    }
}

/// A statement's foreign-key tasks.
#[derive(Clone, Default)]
pub(crate) struct FkWork {
    queue: VecDeque<Work>,
}

// A COPY in progress (`exec/copy`) carries both and is compared and printed in tests:
// by the table and the number of tasks.
impl std::fmt::Debug for TableConstraints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TableConstraints({})", self.def.name)
    }
}

impl PartialEq for TableConstraints {
    fn eq(&self, other: &Self) -> bool {
        self.def.name == other.def.name
    }
}

impl std::fmt::Debug for FkWork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FkWork({} tasks)", self.queue.len())
    }
}

impl PartialEq for FkWork {
    fn eq(&self, other: &Self) -> bool {
        self.queue.len() == other.queue.len()
    }
}

/// The session's deferred foreign-key checks and `SET CONSTRAINTS` state, for the
/// transaction block.
#[derive(Default)]
pub(crate) struct Deferred {
    pending: Vec<Work>,
    /// `SET CONSTRAINTS ALL DEFERRED | IMMEDIATE`.
    all: Option<bool>,
    /// `SET CONSTRAINTS name ... DEFERRED | IMMEDIATE` (after `all`).
    named: HashMap<String, bool>,
}

impl Deferred {
    /// Whether `c`'s checks wait for COMMIT now.
    fn defers(&self, c: &ConstraintDef) -> bool {
        if !c.deferrable {
            return false;
        }
        if let Some(&d) = self.named.get(&c.name) {
            return d;
        }
        self.all.unwrap_or(c.initially_deferred)
    }

    /// The block ended: nothing carries over.
    pub(crate) fn clear(&mut self) {
        *self = Deferred::default();
    }

    /// Checks queued so far (a savepoint remembers it; ROLLBACK TO cuts back to it).
    pub(crate) fn len(&self) -> usize {
        self.pending.len()
    }

    pub(crate) fn truncate(&mut self, len: usize) {
        self.pending.truncate(len);
    }

    /// `SET CONSTRAINTS`: the mode; returns the pending checks that are immediate now
    /// (PostgreSQL runs them at once).
    pub(crate) fn set_mode(
        &mut self,
        names: Option<Vec<ConstraintDef>>,
        deferred: bool,
    ) -> SqlResult<Vec<Work>> {
        match names {
            None => {
                self.all = Some(deferred);
                self.named.clear();
            }
            Some(list) => {
                for c in list {
                    if !c.deferrable {
                        return Err(SqlError::new(
                            "42809",
                            format!("constraint \"{}\" is not deferrable", c.name),
                        ));
                    }
                    self.named.insert(c.name.clone(), deferred);
                }
            }
        }
        let (now, later): (Vec<Work>, Vec<Work>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|w| !self.defers(w.constraint()));
        self.pending = later;
        Ok(now)
    }

    /// Everything pending (at COMMIT).
    pub(crate) fn take_all(&mut self) -> Vec<Work> {
        std::mem::take(&mut self.pending)
    }
}

/// Runs a statement's foreign-key tasks: checks, or defers them; applies the actions
/// (whose own changes add tasks, run in turn). Called once the statement's rows are
/// written; its changes are made visible first.
pub(crate) fn run(env: &mut dyn Env, work: &mut FkWork) -> SqlResult<()> {
    if work.queue.is_empty() {
        return Ok(());
    }
    env.txn().next_statement();
    let mut tables: HashMap<String, Option<Arc<TableConstraints>>> = HashMap::new();
    while let Some(w) = work.queue.pop_front() {
        if matches!(&w, Work::ChildCheck { .. })
            || matches!(&w, Work::ParentChanged { constraint, new_key, .. }
                if action_of(constraint, new_key.is_none()) == FkAction::NoAction)
        {
            if let Some(d) = env.deferred() {
                if d.defers(w.constraint()) {
                    d.pending.push(w);
                    continue;
                }
            }
        }
        run_one(env, w, work, &mut tables)?;
        env.txn().next_statement();
    }
    Ok(())
}

/// Runs checks that were deferred (COMMIT, `SET CONSTRAINTS ... IMMEDIATE`).
pub(crate) fn run_deferred(env: &mut dyn Env, checks: Vec<Work>) -> SqlResult<()> {
    if checks.is_empty() {
        return Ok(());
    }
    env.txn().next_statement();
    let mut work = FkWork::default();
    let mut tables = HashMap::new();
    for w in checks {
        if let Work::ChildCheck { table, tid, .. } = &w {
            if !env.txn().version_is_live(table, *tid)? {
                continue;
            }
        }
        run_one(env, w, &mut work, &mut tables)?;
    }
    // Checks never add actions; a NO ACTION check adds none either.
    debug_assert!(work.queue.is_empty());
    Ok(())
}

fn action_of(c: &ConstraintDef, delete: bool) -> FkAction {
    let fk = c.foreign_key().expect("foreign key");
    if delete {
        fk.on_delete
    } else {
        fk.on_update
    }
}

fn run_one(
    env: &mut dyn Env,
    w: Work,
    work: &mut FkWork,
    tables: &mut HashMap<String, Option<Arc<TableConstraints>>>,
) -> SqlResult<()> {
    match w {
        Work::ChildCheck {
            constraint, row, ..
        } => {
            let fk = constraint.foreign_key().expect("foreign key");
            if let Some(key) = child_key(fk, &row, &constraint)? {
                check_parent_exists(env.txn(), &constraint, fk, &key)?;
            }
            Ok(())
        }
        Work::ParentChanged {
            constraint,
            parent,
            old_key,
            new_key,
        } => {
            let fk = constraint.foreign_key().expect("foreign key");
            if old_key.iter().any(Datum::is_null) {
                return Ok(());
            }
            let act = action_of(&constraint, new_key.is_none());
            if act == FkAction::NoAction && parent_key_exists(env.txn(), &parent, fk, &old_key)? {
                return Ok(());
            }
            let child = env.txn().table(&constraint.table)?;
            let rows = referencing_rows(env.txn(), &child, fk, &old_key)?;
            if rows.is_empty() {
                return Ok(());
            }
            match act {
                FkAction::NoAction | FkAction::Restrict => {
                    Err(still_referenced(&parent, &constraint, fk, &old_key))
                }
                FkAction::Cascade if new_key.is_none() => {
                    let tc = table_constraints(tables, &child)?;
                    for (tid, row) in rows {
                        delete_referencing(
                            env,
                            &child,
                            fk,
                            &old_key,
                            tid,
                            row,
                            tc.as_deref(),
                            work,
                        )?;
                    }
                    Ok(())
                }
                FkAction::Cascade | FkAction::SetNull | FkAction::SetDefault => {
                    let tc = table_constraints(tables, &child)?;
                    for (tid, row) in rows {
                        let sets = new_values(env, &child, fk, act, new_key.as_deref())?;
                        update_referencing(
                            env,
                            &child,
                            fk,
                            &old_key,
                            tid,
                            row,
                            &sets,
                            tc.as_deref(),
                            work,
                        )?;
                    }
                    Ok(())
                }
            }
        }
    }
}

fn table_constraints(
    tables: &mut HashMap<String, Option<Arc<TableConstraints>>>,
    def: &Arc<TableDef>,
) -> SqlResult<Option<Arc<TableConstraints>>> {
    if let Some(t) = tables.get(&def.name) {
        return Ok(t.clone());
    }
    let t = TableConstraints::of(def)?.map(Arc::new);
    tables.insert(def.name.clone(), t.clone());
    Ok(t)
}

/// The key a referencing row carries: `None` when the constraint does not apply to
/// it (a NULL key column under MATCH SIMPLE, all NULL under MATCH FULL).
fn child_key(
    fk: &ForeignKeyDef,
    row: &[Datum],
    c: &ConstraintDef,
) -> SqlResult<Option<Vec<Datum>>> {
    let key: Vec<Datum> = fk.columns.iter().map(|&i| row[i].clone()).collect();
    let nulls = key.iter().filter(|d| d.is_null()).count();
    if nulls == 0 {
        return Ok(Some(key));
    }
    if fk.match_full && nulls < key.len() {
        return Err(SqlError::new(
            "23503",
            format!(
                "insert or update on table \"{}\" violates foreign key constraint \"{}\"",
                c.table, c.name
            ),
        )
        .with_detail("MATCH FULL does not allow mixing of null and nonnull key values."));
    }
    Ok(None)
}

fn key_text(names: &[&str], key: &[Datum]) -> String {
    let vals: Vec<String> = key
        .iter()
        .map(|d| crate::value::format_text(d).unwrap_or_else(|| "null".into()))
        .collect();
    format!("Key ({})=({})", names.join(", "), vals.join(", "))
}

/// The referenced row with `key` exists: found under a fresh snapshot and locked KEY
/// SHARE (a concurrent change of it waits for us, ours for it).
fn check_parent_exists(
    t: &mut Transaction,
    c: &ConstraintDef,
    fk: &ForeignKeyDef,
    key: &[Datum],
) -> SqlResult<()> {
    let parent = t.table(&fk.ref_table)?;
    let found = t.with_fresh_snapshot(|t| -> SqlResult<bool> {
        for (mut tid, _) in lookup(t, &parent, &fk.ref_columns, key)? {
            loop {
                match t.lock_row(&parent, tid, RowLockMode::KeyShare, LockWaitPolicy::Wait)? {
                    RowLocked::Locked(_) => return Ok(true),
                    RowLocked::Changed(t2, v2) => {
                        if !key_matches(&v2, &fk.ref_columns, key)? {
                            break;
                        }
                        tid = t2;
                    }
                    RowLocked::Gone | RowLocked::Skipped => break,
                }
            }
        }
        Ok(false)
    })?;
    if found {
        return Ok(());
    }
    let child = t.table(&c.table)?;
    let names: Vec<&str> = fk
        .columns
        .iter()
        .map(|&i| child.columns[i].name.as_str())
        .collect();
    Err(SqlError::new(
        "23503",
        format!(
            "insert or update on table \"{}\" violates foreign key constraint \"{}\"",
            c.table, c.name
        ),
    )
    .with_detail(format!(
        "{} is not present in table \"{}\".",
        key_text(&names, key),
        fk.ref_table
    )))
}

fn still_referenced(
    parent: &TableDef,
    c: &ConstraintDef,
    fk: &ForeignKeyDef,
    key: &[Datum],
) -> SqlError {
    let names: Vec<&str> = fk
        .ref_columns
        .iter()
        .map(|&i| parent.columns[i].name.as_str())
        .collect();
    SqlError::new(
        "23503",
        format!(
            "update or delete on table \"{}\" violates foreign key constraint \"{}\" on table \"{}\"",
            parent.name, c.name, c.table
        ),
    )
    .with_detail(format!(
        "{} is still referenced from table \"{}\".",
        key_text(&names, key),
        c.table
    ))
}

/// Whether `row`'s `cols` equal `key` (as the key's operators compare).
fn key_matches(row: &[Datum], cols: &[usize], key: &[Datum]) -> SqlResult<bool> {
    for (&c, k) in cols.iter().zip(key) {
        if row[c].is_null() || k.is_null() {
            return Ok(false);
        }
        if compare_values(&row[c], k)? != std::cmp::Ordering::Equal {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Rows of `def` whose `cols` equal `key`, visible to `t`: through an index on exactly
/// those columns when there is one, else a scan.
fn lookup(
    t: &mut Transaction,
    def: &TableDef,
    cols: &[usize],
    key: &[Datum],
) -> SqlResult<Vec<(Tid, Vec<Datum>)>> {
    // The key in each column's own type (an int8 key against an int4 column).
    let mut typed = Vec::with_capacity(key.len());
    for (&c, k) in cols.iter().zip(key) {
        typed.push(coerce(k.clone(), def.columns[c].ty)?);
    }
    if let Some(index) = def.index_on(cols, false) {
        let ordered: Vec<Datum> = index
            .columns
            .iter()
            .map(|ic| typed[cols.iter().position(|c| c == ic).expect("same set")].clone())
            .collect();
        let hits = t.index_lookup(def, index, &ordered)?;
        let mut out = Vec::with_capacity(hits.len());
        for (tid, row) in hits {
            if key_matches(&row, cols, &typed)? {
                out.push((tid, row));
            }
        }
        return Ok(out);
    }
    let mut out = Vec::new();
    let mut failed = None;
    t.scan(def, |tid, row| {
        match key_matches(&row, cols, &typed) {
            Ok(true) => out.push((tid, row)),
            Ok(false) => {}
            Err(e) => {
                failed = Some(e);
                return Ok(false);
            }
        }
        Ok(true)
    })?;
    match failed {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

fn parent_key_exists(
    t: &mut Transaction,
    parent: &TableDef,
    fk: &ForeignKeyDef,
    key: &[Datum],
) -> SqlResult<bool> {
    let parent = t.table(&parent.name)?;
    t.with_fresh_snapshot(|t| Ok(!lookup(t, &parent, &fk.ref_columns, key)?.is_empty()))
}

fn referencing_rows(
    t: &mut Transaction,
    child: &TableDef,
    fk: &ForeignKeyDef,
    key: &[Datum],
) -> SqlResult<Vec<(Tid, Vec<Datum>)>> {
    t.with_fresh_snapshot(|t| lookup(t, child, &fk.columns, key))
}

/// What SET NULL / SET DEFAULT / CASCADE (update) write into the referencing columns.
fn new_values(
    env: &mut dyn Env,
    child: &TableDef,
    fk: &ForeignKeyDef,
    act: FkAction,
    new_key: Option<&[Datum]>,
) -> SqlResult<Vec<(usize, Datum)>> {
    let mut sets = Vec::new();
    match act {
        FkAction::SetNull => {
            for &c in &fk.columns {
                sets.push((c, Datum::Null));
            }
        }
        FkAction::SetDefault => {
            let (now, settings) = (env.now(), env.settings());
            let get = move |n: &str| settings.get(n);
            let hooks = super::defaults::DmlHooks::new(env)?;
            let scope = Scope {
                columns: &[],
                row: None,
                params: &[],
                now,
                setting: &get,
                interrupt: None,
                frame: None,
                hooks: Some(&hooks),
            };
            for &c in &fk.columns {
                let v = default_value(child, c, &scope)?;
                sets.push((c, assign(v, &child.columns[c])?));
            }
        }
        _ => {
            let key = new_key.expect("cascade update has a new key");
            for (&c, v) in fk.columns.iter().zip(key) {
                sets.push((c, assign(v.clone(), &child.columns[c])?));
            }
        }
    }
    Ok(sets)
}

/// ON DELETE CASCADE: deletes one referencing row (waiting for, or following, a
/// concurrent change of it), then queues its own referencing rows' actions.
#[allow(clippy::too_many_arguments)]
fn delete_referencing(
    env: &mut dyn Env,
    child: &Arc<TableDef>,
    fk: &ForeignKeyDef,
    key: &[Datum],
    mut tid: Tid,
    mut row: Vec<Datum>,
    tc: Option<&TableConstraints>,
    work: &mut FkWork,
) -> SqlResult<()> {
    loop {
        match env.txn().delete(child, tid)? {
            RowChange::Done(_) => {
                if let Some(tc) = tc {
                    tc.deleted(work, &row);
                }
                return Ok(());
            }
            RowChange::Changed(t2, v2) => {
                if !key_matches(&v2, &fk.columns, key)? {
                    return Ok(());
                }
                (tid, row) = (t2, v2);
            }
            RowChange::Gone | RowChange::SelfModified => return Ok(()),
        }
    }
}

/// ON DELETE / UPDATE SET NULL, SET DEFAULT and ON UPDATE CASCADE: gives one
/// referencing row `sets`, with its CHECK constraints, then queues what its change
/// implies (the new key's check, its own referencing rows' actions).
#[allow(clippy::too_many_arguments)]
fn update_referencing(
    env: &mut dyn Env,
    child: &Arc<TableDef>,
    fk: &ForeignKeyDef,
    key: &[Datum],
    mut tid: Tid,
    mut row: Vec<Datum>,
    sets: &[(usize, Datum)],
    tc: Option<&TableConstraints>,
    work: &mut FkWork,
) -> SqlResult<()> {
    loop {
        let mut new = row.clone();
        for (c, v) in sets {
            new[*c] = v.clone();
        }
        if let Some(tc) = tc {
            tc.check_row(&new, &Scope::bare(&[], None, env.now()))?;
        }
        match env.txn().update_columns(child, tid, sets)? {
            RowChange::Done(new_tid) => {
                if let Some(tc) = tc {
                    tc.updated(work, new_tid, &row, &new);
                }
                return Ok(());
            }
            RowChange::Changed(t2, v2) => {
                if !key_matches(&v2, &fk.columns, key)? {
                    return Ok(());
                }
                (tid, row) = (t2, v2);
            }
            RowChange::Gone | RowChange::SelfModified => return Ok(()),
        }
    }
}
