//! `SELECT ... FOR UPDATE | FOR SHARE [OF t] [NOWAIT | SKIP LOCKED]`: PostgreSQL's
//! LockRows, for a query level that reads one table.
//!
//! 1. The rows of the table that pass WHERE under the statement's snapshot are read
//!    with their tids (as an UPDATE reads its targets).
//! 2. With LIMIT / OFFSET, their order is the query's own: the query runs over them (a
//!    CTE standing for the table, with a hidden row number) to get it, since PostgreSQL
//!    locks below the limit, in output order, and a SKIP LOCKED row does not count.
//! 3. Each row is locked in turn (`Transaction::lock_row`). Under READ COMMITTED a row
//!    changed by a transaction that committed meanwhile is re-checked against WHERE on
//!    its newest version and locked there if it still qualifies (PostgreSQL's
//!    EvalPlanQual); a deleted row drops out; NOWAIT fails at the first locked row
//!    (55P03); SKIP LOCKED leaves it out. Locking stops once OFFSET + LIMIT rows are
//!    held.
//! 4. The query runs over the locked rows (their versions as locked): projection,
//!    ORDER BY, LIMIT and OFFSET as written.
//!
//! The lock strength is the strongest clause's (NO KEY UPDATE and KEY SHARE are read
//! as UPDATE and SHARE by the parser: `session/parse.rs` `strengthen_lock_clauses`),
//! the wait policy the most impatient one's, as PostgreSQL combines clauses naming one
//! table. A query level with joins, several FROM items, set operations, grouping,
//! aggregates, DISTINCT or window functions is refused (0A000), the last five with
//! PostgreSQL's own messages.

use sqlparser::ast::{
    self, Expr, Ident, NonBlock, ObjectName, ObjectNamePart, Query, SelectItem, SetExpr,
    TableAlias, TableFactor,
};
use walrus_engine::access::datum::{Datum, TypeId};
use walrus_engine::catalog::TableDef;
use walrus_engine::engine::{LockWaitPolicy, RowLockMode, RowLocked};

use super::{dml, CteRels, Executor};
use crate::error::{SqlError, SqlResult};
use crate::expr::compiled::{Columns, Prepared};
use crate::names::ident;
use crate::plan::{contains_aggregate, table_cols};
use crate::rel::{ColName, Frame, Rel};

/// The CTE names the locking query binds (no user CTE can be in scope: WITH is refused).
const CANDIDATES: &str = "__walrus_lock_candidates";
const LOCKED: &str = "__walrus_locked_rows";
/// The hidden row-number column of the candidates.
const ROW_NUMBER: &str = "__walrus_lock_row";

impl Executor<'_> {
    /// Runs query level `q`, which has locking clauses (see the module comment). Never
    /// inlined: `run_query` recurses once per query level, and this frame must not add
    /// to each of those (1,000 nested levels fit in `max_stack_depth`).
    #[inline(never)]
    pub(super) fn locking_query(&self, q: &Query, outer: Option<&Frame<'_>>) -> SqlResult<Rel> {
        if outer.is_some() {
            return Err(SqlError::unsupported(
                "FOR UPDATE / FOR SHARE in a correlated subquery is not supported",
            ));
        }
        let (mode, policy) = strength(q);
        let what = match mode {
            RowLockMode::Update | RowLockMode::NoKeyUpdate => "FOR UPDATE",
            _ => "FOR SHARE",
        };
        let not_allowed = |with: &str| {
            Err(SqlError::unsupported(format!(
                "{what} is not allowed with {with}"
            )))
        };
        let sel = match q.body.as_ref() {
            SetExpr::Select(sel) => sel,
            SetExpr::SetOperation { .. } => {
                return not_allowed("UNION/INTERSECT/EXCEPT");
            }
            _ => {
                return Err(SqlError::unsupported(format!(
                    "{what} on this query is not supported"
                )))
            }
        };
        if sel.distinct.is_some() {
            return not_allowed("DISTINCT clause");
        }
        if !matches!(&sel.group_by, ast::GroupByExpr::Expressions(e, _) if e.is_empty()) {
            return not_allowed("GROUP BY clause");
        }
        if sel.having.is_some() {
            return not_allowed("HAVING clause");
        }
        let items: Vec<&Expr> = sel
            .projection
            .iter()
            .filter_map(|i| match i {
                SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => Some(e),
                _ => None,
            })
            .collect();
        if items.iter().any(|e| contains_aggregate(e)) {
            return not_allowed("aggregate functions");
        }
        if items.iter().any(|e| has_window(e)) || !sel.named_window.is_empty() {
            return not_allowed("window functions");
        }
        let ([twj], true) = (sel.from.as_slice(), sel.from.len() == 1) else {
            return Err(SqlError::unsupported(format!(
                "{what} over several FROM items or joins is not supported"
            )));
        };
        let TableFactor::Table {
            name,
            alias,
            args: None,
            ..
        } = &twj.relation
        else {
            return Err(SqlError::unsupported(format!(
                "{what} over this FROM item is not supported"
            )));
        };
        if !twj.joins.is_empty() {
            return Err(SqlError::unsupported(format!(
                "{what} over joins is not supported"
            )));
        }
        let Some(def) = self.user_table(name)? else {
            return Err(SqlError::unsupported(format!(
                "{what} cannot be applied to a catalog view or a CTE"
            )));
        };
        let qual = alias
            .as_ref()
            .map(|a| ident(&a.name))
            .unwrap_or_else(|| def.name.clone());
        for clause in &q.locks {
            if let Some(of) = &clause.of {
                let named = of.0.last().and_then(|p| p.as_ident()).map(ident);
                if named.as_deref() != Some(qual.as_str()) {
                    return Err(SqlError::new(
                        "42P01",
                        format!(
                            "relation \"{}\" in {what} clause not found in FROM clause",
                            named.unwrap_or_default()
                        ),
                    ));
                }
            }
        }

        // 1. The candidates.
        let candidates = {
            let mut env = self.env.borrow_mut();
            dml::matching_rows(&mut **env, &def, sel.selection.as_ref(), self.params, None)?
        };
        // 2. Their order, and how many to lock.
        let (skip, take) = self.limits(q, None)?;
        let limited = take != usize::MAX || skip > 0;
        let order: Vec<usize> = if limited && q.order_by.is_some() {
            self.lock_order(q, &def, &qual, alias.as_ref(), &candidates)?
        } else {
            (0..candidates.len()).collect()
        };
        let wanted = skip.saturating_add(take);
        // 3. Lock them.
        let filter = sel
            .selection
            .as_ref()
            .map(|f| Prepared::new(f, &Columns::Table(&def.columns), self.params));
        let mut locked: Vec<Vec<Datum>> = Vec::new();
        for i in order {
            if locked.len() >= wanted {
                break;
            }
            let (mut tid, mut row) = candidates[i].clone();
            loop {
                self.check_interrupt()?;
                let r = self
                    .env
                    .borrow_mut()
                    .txn()
                    .lock_row(&def, tid, mode, policy)?;
                match r {
                    RowLocked::Locked(_) => {
                        locked.push(row);
                        break;
                    }
                    RowLocked::Changed(t2, v2) => {
                        if !self.row_still_matches(filter.as_ref(), &def, &v2)? {
                            break;
                        }
                        (tid, row) = (t2, v2);
                    }
                    RowLocked::Gone | RowLocked::Skipped => break,
                }
            }
        }
        drop(candidates);
        // 4. The query over the locked rows.
        let mut ctes = CteRels::new();
        ctes.insert(
            LOCKED.to_string(),
            Rel {
                cols: table_cols(&qual, &def),
                rows: locked,
            },
        );
        let over_locked = over_cte(q, LOCKED, &qual, alias.as_ref(), None);
        self.run_over(&over_locked, &ctes)
    }

    /// Runs `q` (which reads the CTEs in `ctes`) as a query level of this statement.
    fn run_over(&self, q: &Query, ctes: &CteRels) -> SqlResult<Rel> {
        let mut env = self.env.borrow_mut();
        let mut exec = Executor::new(&mut **env, self.params);
        exec.ctes = Some(ctes);
        exec.run_query(q, None)
    }

    /// The candidates' indexes in the query's output order.
    fn lock_order(
        &self,
        q: &Query,
        def: &TableDef,
        qual: &str,
        alias: Option<&TableAlias>,
        candidates: &[(walrus_base::Tid, Vec<Datum>)],
    ) -> SqlResult<Vec<usize>> {
        let mut cols = table_cols(qual, def);
        cols.push(ColName {
            qual: Some(qual.to_string()),
            name: ROW_NUMBER.to_string(),
            ty: Some(TypeId::Int8),
            bpchar: false,
            hidden: true,
            origin: None,
        });
        let rows = candidates
            .iter()
            .enumerate()
            .map(|(i, (_, row))| {
                let mut r = row.clone();
                r.push(Datum::Int8(i as i64));
                r
            })
            .collect();
        let mut ctes = CteRels::new();
        ctes.insert(CANDIDATES.to_string(), Rel { cols, rows });
        let ordered = over_cte(q, CANDIDATES, qual, alias, Some(qual));
        self.run_over(&ordered, &ctes)?
            .rows
            .iter()
            .map(|r| match r.last() {
                Some(Datum::Int8(i)) => Ok(*i as usize),
                other => Err(SqlError::new(
                    "XX000",
                    format!("lock order: unexpected row number {other:?}"),
                )),
            })
            .collect()
    }

    fn row_still_matches(
        &self,
        filter: Option<&Prepared<'_>>,
        def: &TableDef,
        row: &[Datum],
    ) -> SqlResult<bool> {
        let settings = self.settings.clone();
        let get = move |n: &str| settings.get(n);
        dml::row_matches(filter, &def.columns, row, self.params, self.now, &get)
    }
}

/// The strongest lock strength and the most impatient wait policy among `q`'s clauses.
fn strength(q: &Query) -> (RowLockMode, LockWaitPolicy) {
    let mut mode = RowLockMode::KeyShare;
    let mut policy = LockWaitPolicy::Wait;
    for c in &q.locks {
        let m = match c.lock_type {
            ast::LockType::Update => RowLockMode::Update,
            ast::LockType::Share => RowLockMode::Share,
        };
        mode = mode.max(m);
        policy = match (policy, &c.nonblock) {
            (_, Some(NonBlock::Nowait)) | (LockWaitPolicy::NoWait, _) => LockWaitPolicy::NoWait,
            (_, Some(NonBlock::SkipLocked)) | (LockWaitPolicy::SkipLocked, _) => {
                LockWaitPolicy::SkipLocked
            }
            _ => LockWaitPolicy::Wait,
        };
    }
    (mode, policy)
}

/// `q` without its locking clauses, reading CTE `cte` in place of its table (under the
/// same name or alias). With `row_number_of`, the select list gains the hidden row
/// number (qualified by that name) last, and LIMIT / OFFSET go: every row, in order.
fn over_cte(
    q: &Query,
    cte: &str,
    qual: &str,
    alias: Option<&TableAlias>,
    row_number_of: Option<&str>,
) -> Query {
    let mut q = q.clone();
    q.locks.clear();
    if let SetExpr::Select(sel) = q.body.as_mut() {
        if let Some(twj) = sel.from.first_mut() {
            twj.relation = TableFactor::Table {
                name: ObjectName(vec![ObjectNamePart::Identifier(Ident::new(cte))]),
                alias: Some(alias.cloned().unwrap_or(TableAlias {
                    explicit: true,
                    name: Ident::with_quote('"', qual),
                    columns: Vec::new(),
                    at: None,
                })),
                args: None,
                with_hints: Vec::new(),
                version: None,
                with_ordinality: false,
                partitions: Vec::new(),
                json_path: None,
                sample: None,
                index_hints: Vec::new(),
            };
        }
        if let Some(of) = row_number_of {
            sel.projection
                .push(SelectItem::UnnamedExpr(Expr::CompoundIdentifier(vec![
                    Ident::with_quote('"', of),
                    Ident::new(ROW_NUMBER),
                ])));
        }
    }
    if row_number_of.is_some() {
        q.limit_clause = None;
        q.fetch = None;
    }
    q
}

/// Whether `e` calls a window function.
fn has_window(e: &Expr) -> bool {
    let mut found = false;
    let _ = sqlparser::ast::visit_expressions(e, |x| {
        if let Expr::Function(f) = x {
            if f.over.is_some() {
                found = true;
                return std::ops::ControlFlow::Break(());
            }
        }
        std::ops::ControlFlow::Continue(())
    });
    found
}
