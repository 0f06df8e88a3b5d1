//! `WITH RECURSIVE` at the top of a SELECT, evaluated as PostgreSQL does: each CTE of
//! the form `non-recursive UNION [ALL] recursive` runs its non-recursive term, then its
//! recursive term over the rows the last round added (the working table) until a round
//! adds none (semi-naive: each round reads only the previous round's new rows); `UNION`
//! drops rows already produced. The working table and each finished CTE's rows are
//! bound by name in the executor (`exec::CteRels`): a FROM reference reads them
//! directly, with no SQL text in between. CTEs of the list that do not refer to
//! themselves are run once and bound the same way. A recursive reference anywhere
//! but the recursive term's FROM list, mutual recursion, and recursive WITH below the
//! top level are 0A000.
//!
//! A recursive term that reads the working table alone (`SELECT exprs FROM cte [WHERE
//! cond]`, every expression with a fast form: counters, integer series) is prepared
//! once ([`WorkingTableStep`]) and each later round runs it row by row over the working
//! table, with no planning per round; PostgreSQL likewise plans the term once. The
//! first round, and any round where a value falls outside the fast form or an error
//! is raised, runs through the executor, so every answer and error is the executor's.

use std::collections::HashSet;
use std::ops::ControlFlow;

use sqlparser::ast::{Query, SetExpr, SetOperator, SetQuantifier, TableFactor, Visit, Visitor};
use walrus_engine::access::datum::{Datum, TypeId};

use super::Session;
use crate::error::{SqlError, SqlResult};
use crate::exec;
use crate::expr::compiled::{Columns, Fast};
use crate::names::ident;
use crate::rel::{ColName, Rel};
use crate::result::{Column, QueryResult};

/// Whether `q` names table `name` (unqualified) anywhere.
fn refers_to(q: &Query, name: &str) -> bool {
    struct Finder<'a>(&'a str);
    impl Visitor for Finder<'_> {
        type Break = ();
        fn pre_visit_table_factor(&mut self, t: &TableFactor) -> ControlFlow<()> {
            if let TableFactor::Table {
                name, args: None, ..
            } = t
            {
                if name.0.len() == 1 && name.0[0].as_ident().is_some_and(|i| ident(i) == self.0) {
                    return ControlFlow::Break(());
                }
            }
            ControlFlow::Continue(())
        }
    }
    q.visit(&mut Finder(name)).is_break()
}

/// How many times `q` names table `name` (unqualified).
fn reference_count(q: &Query, name: &str) -> usize {
    struct Counter<'a>(&'a str, usize);
    impl Visitor for Counter<'_> {
        type Break = ();
        fn pre_visit_table_factor(&mut self, t: &TableFactor) -> ControlFlow<()> {
            if let TableFactor::Table {
                name, args: None, ..
            } = t
            {
                if name.0.len() == 1 && name.0[0].as_ident().is_some_and(|i| ident(i) == self.0) {
                    self.1 += 1;
                }
            }
            ControlFlow::Continue(())
        }
    }
    let mut c = Counter(name, 0);
    let _ = q.visit(&mut c);
    c.1
}

/// References to `name` in the FROM items of `q`'s SELECT (derived tables included),
/// not in its other clauses.
fn reference_count_in_from(q: &Query, name: &str) -> usize {
    let SetExpr::Select(sel) = q.body.as_ref() else {
        return 0;
    };
    sel.from
        .iter()
        .map(|twj| {
            let only_from = Query {
                body: Box::new(SetExpr::Select(Box::new(sqlparser::ast::Select {
                    from: vec![twj.clone()],
                    projection: vec![],
                    selection: None,
                    having: None,
                    ..(**sel).clone()
                }))),
                order_by: None,
                with: None,
                ..q.clone()
            };
            reference_count(&only_from, name)
        })
        .sum()
}

/// PostgreSQL's rules for the recursive term: one reference, in its own FROM list (not
/// in a subquery), no aggregates or grouping; an outer join walrus does not check the
/// side of is refused.
fn check_recursive_term(step: &Query, name: &str) -> SqlResult<()> {
    let misplaced = |what: &str| {
        SqlError::new(
            "42P19",
            format!("recursive reference to query \"{name}\" must not appear {what}"),
        )
    };
    if reference_count(step, name) > 1 {
        return Err(misplaced("more than once"));
    }
    let SetExpr::Select(sel) = step.body.as_ref() else {
        return Err(SqlError::unsupported(
            "a recursive term other than a plain SELECT is not supported",
        ));
    };
    // The one reference must be reachable through the FROM list (a derived table
    // counts, as in PostgreSQL), not in an expression's subquery.
    let in_from = reference_count_in_from(step, name);
    if in_from == 0 {
        return Err(misplaced("within a subquery"));
    }
    let outer = sel.from.iter().flat_map(|t| &t.joins).any(|j| {
        !matches!(
            j.join_operator,
            sqlparser::ast::JoinOperator::Inner(_)
                | sqlparser::ast::JoinOperator::Join(_)
                | sqlparser::ast::JoinOperator::CrossJoin(_)
        )
    });
    if outer {
        return Err(SqlError::unsupported(
            "outer joins in a recursive term are not supported",
        ));
    }
    let grouped = !matches!(&sel.group_by, sqlparser::ast::GroupByExpr::Expressions(g, _) if g.is_empty())
        || sel.having.is_some()
        || sel.projection.iter().any(|p| match p {
            sqlparser::ast::SelectItem::UnnamedExpr(e)
            | sqlparser::ast::SelectItem::ExprWithAlias { expr: e, .. } => {
                crate::plan::contains_aggregate(e)
            }
            _ => false,
        });
    if grouped {
        return Err(SqlError::new(
            "42P19",
            "aggregate functions are not allowed in a recursive query's recursive term",
        ));
    }
    Ok(())
}

/// Whether statement `q` reads CTE `name` exactly once: its only reference is an item
/// of the top-level FROM list of a plain SELECT, which the executor evaluates once (a
/// reference in a subquery may be evaluated once per outer row).
fn read_once_by(q: &Query, name: &str) -> bool {
    let SetExpr::Select(sel) = q.body.as_ref() else {
        return false;
    };
    let top_level = sel.from.iter().any(|twj| {
        std::iter::once(&twj.relation)
            .chain(twj.joins.iter().map(|j| &j.relation))
            .any(|f| {
                matches!(f, TableFactor::Table { name: t, args: None, .. }
                if t.0.len() == 1 && t.0[0].as_ident().is_some_and(|i| ident(i) == name))
            })
    });
    top_level && reference_count(q, name) == 1
}

/// Whether any of the CTEs after this one (`rest`) reads `name`.
fn later_ctes_read(rest: &[&Query], name: &str) -> bool {
    rest.iter().any(|q| refers_to(q, name))
}

/// A CTE's rows as the executor binds them (`exec::CteRels`): columns named `cols`,
/// typed as the result columns `described` (the engine type, and the type clients see
/// where it differs: a catalog `oid` column stays `oid`, a `varchar` one `varchar`).
fn bound_rel(cols: &[String], described: &[Column], rows: Vec<Vec<Datum>>) -> Rel {
    Rel {
        cols: cols
            .iter()
            .zip(described)
            .map(|(n, c)| ColName {
                qual: None,
                name: n.clone(),
                ty: Some(c.ty),
                bpchar: false,
                hidden: false,
                origin: (c.type_oid != c.ty.pg_oid() || c.typmod != -1).then_some(
                    crate::rel::Origin {
                        table_oid: 0,
                        attnum: 0,
                        type_oid: c.type_oid,
                        typmod: c.typmod,
                    },
                ),
            })
            .collect(),
        rows,
    }
}

/// A recursive term over the working table alone, prepared once (see the module
/// comment): its WHERE and select list in their fast forms over the working table's
/// columns.
struct WorkingTableStep {
    filter: Option<Fast>,
    items: Vec<Fast>,
}

impl WorkingTableStep {
    /// The prepared form of `step` reading CTE `name` (columns `cols`), or `None` when
    /// it has any other shape or an expression without a fast form.
    fn prepare(step: &Query, name: &str, cols: &[String], params: &[Datum]) -> Option<Self> {
        use sqlparser::ast::{GroupByExpr, SelectItem};
        let SetExpr::Select(sel) = step.body.as_ref() else {
            return None;
        };
        let plain_query = step.with.is_none()
            && step.order_by.is_none()
            && step.limit_clause.is_none()
            && step.fetch.is_none()
            && step.locks.is_empty();
        let plain_select = sel.distinct.is_none()
            && sel.top.is_none()
            && sel.into.is_none()
            && matches!(&sel.group_by, GroupByExpr::Expressions(g, m) if g.is_empty() && m.is_empty())
            && sel.having.is_none()
            && sel.named_window.is_empty()
            && sel.qualify.is_none()
            && sel.lateral_views.is_empty()
            && sel.cluster_by.is_empty()
            && sel.distribute_by.is_empty()
            && sel.sort_by.is_empty()
            && sel.connect_by.is_empty()
            && sel.prewhere.is_none();
        if !plain_query || !plain_select || sel.from.len() != 1 || !sel.from[0].joins.is_empty() {
            return None;
        }
        let relation = &sel.from[0].relation;
        let TableFactor::Table {
            name: table, alias, ..
        } = relation
        else {
            return None;
        };
        let reads_working_table = table.0.len() == 1
            && table.0[0].as_ident().is_some_and(|i| ident(i) == name)
            && !crate::names::table_has_extras(relation)
            && alias.as_ref().is_none_or(|a| a.columns.is_empty());
        if !reads_working_table {
            return None;
        }
        let qual = alias
            .as_ref()
            .map_or_else(|| name.to_string(), |a| ident(&a.name));
        let names: Vec<ColName> = cols
            .iter()
            .map(|c| ColName {
                qual: Some(qual.clone()),
                name: c.clone(),
                ty: None,
                bpchar: false,
                hidden: false,
                origin: None,
            })
            .collect();
        let columns = Columns::Frame(&names);
        let filter = match &sel.selection {
            Some(e) => Some(Fast::compile(e, &columns, params)?),
            None => None,
        };
        let items = sel
            .projection
            .iter()
            .map(|item| match item {
                SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                    Fast::compile(e, &columns, params)
                }
                _ => None,
            })
            .collect::<Option<Vec<_>>>()?;
        Some(WorkingTableStep { filter, items })
    }

    /// The rows one round adds before the UNION's checks, or `None` when the round must
    /// run through the executor instead: a value outside the fast form, a WHERE value
    /// that is not a boolean, or an error (the executor then raises its own).
    fn run(&self, working: &[Vec<Datum>]) -> Option<Vec<Vec<Datum>>> {
        let mut out = Vec::new();
        for row in working {
            if let Some(f) = &self.filter {
                match f.eval(row) {
                    Ok(Some(Datum::Bool(true))) => {}
                    Ok(Some(Datum::Bool(false) | Datum::Null)) => continue,
                    _ => return None,
                }
            }
            let values = self
                .items
                .iter()
                .map(|i| i.eval(row).ok().flatten())
                .collect::<Option<Vec<_>>>()?;
            out.push(values);
        }
        Some(out)
    }
}

impl Session {
    /// Runs a SELECT whose WITH is RECURSIVE (see the module comment).
    pub(super) fn recursive_select(
        &mut self,
        q: &Query,
        params: &[Datum],
    ) -> SqlResult<QueryResult> {
        let mut q = q.clone();
        let Some(with) = q.with.take() else {
            return exec::select(self, &q, params);
        };
        // Each CTE's rows, bound by name for the later CTEs and the statement.
        let mut done = exec::CteRels::new();
        let mut ctes = with.cte_tables.into_iter();
        while let Some(cte) = ctes.next() {
            let rest: Vec<_> = ctes.as_slice().iter().map(|c| &*c.query).collect();
            let name = ident(&cte.alias.name);
            let body = *cte.query;
            let alias_cols: Vec<String> =
                cte.alias.columns.iter().map(|c| ident(&c.name)).collect();
            if !refers_to(&body, &name) {
                let r = exec::select_with(self, &body, params, &done)?;
                let cols = if alias_cols.is_empty() {
                    r.columns.iter().map(|c| c.name.clone()).collect()
                } else {
                    alias_cols
                };
                done.insert(name, bound_rel(&cols, &r.columns, r.rows));
                continue;
            }
            let SetExpr::SetOperation {
                op: SetOperator::Union,
                set_quantifier,
                left,
                right,
            } = body.body.as_ref()
            else {
                return Err(SqlError::unsupported(format!(
                    "recursive query \"{name}\" must be of the form non-recursive-term UNION [ALL] recursive-term"
                )));
            };
            let all = match set_quantifier {
                SetQuantifier::All => true,
                SetQuantifier::None | SetQuantifier::Distinct => false,
                other => {
                    return Err(SqlError::unsupported(format!(
                        "UNION {other} in a recursive query is not supported"
                    )))
                }
            };
            if body.order_by.is_some() || body.limit_clause.is_some() || body.fetch.is_some() {
                return Err(SqlError::unsupported(
                    "ORDER BY / LIMIT in a recursive query is not supported",
                ));
            }
            let term = |e: &SetExpr| Query {
                body: Box::new(e.clone()),
                ..Query::clone(&body)
            };
            let (base, step) = (term(left), term(right));
            if refers_to(&base, &name) {
                return Err(SqlError::unsupported(format!(
                    "recursive reference to query \"{name}\" in its non-recursive term is not supported"
                )));
            }
            check_recursive_term(&step, &name)?;
            let first = exec::select_with(self, &base, params, &done)?;
            let cols: Vec<String> = if alias_cols.is_empty() {
                first.columns.iter().map(|c| c.name.clone()).collect()
            } else {
                if alias_cols.len() != first.columns.len() {
                    return Err(SqlError::new(
                        "42P10",
                        format!(
                            "WITH query \"{name}\" has {} columns available but {} columns specified",
                            first.columns.len(),
                            alias_cols.len()
                        ),
                    ));
                }
                alias_cols
            };
            let types: Vec<TypeId> = first.columns.iter().map(|c| c.ty).collect();
            let mut seen: HashSet<String> = HashSet::new();
            // Rows equal by PostgreSQL's equality are duplicates for UNION.
            let key = |r: &Vec<Datum>| exec::row_key(r);
            // The rows so far; the working table is their tail from `round_start`:
            // the rows the last round added.
            let mut result: Vec<Vec<Datum>> = Vec::new();
            for r in first.rows {
                if all || seen.insert(key(&r)) {
                    result.push(r);
                }
            }
            let mut round_start = 0;
            let fast_step = WorkingTableStep::prepare(&step, &name, &cols, params);
            let mut first_round = true;
            while round_start < result.len() {
                if self.interrupt.load(std::sync::atomic::Ordering::Acquire) {
                    return Err(SqlError::new(
                        "57014",
                        "canceling statement due to user request",
                    ));
                }
                let working = &result[round_start..];
                // Past the first round (which checks the term as the executor does),
                // a prepared term runs without the executor.
                let prepared = match &fast_step {
                    Some(f) if !first_round => f.run(working),
                    _ => None,
                };
                first_round = false;
                let rows = match prepared {
                    Some(rows) => rows,
                    None => {
                        // The working table, bound under the CTE's name while the
                        // recursive term runs over it.
                        done.insert(
                            name.clone(),
                            bound_rel(&cols, &first.columns, working.to_vec()),
                        );
                        // What the round's evaluation held is given back; the rows
                        // kept are charged below.
                        let mark = self.memory.used();
                        let r = exec::select_with(self, &step, params, &done)?;
                        self.memory.release_to(mark);
                        r.rows
                    }
                };
                round_start = result.len();
                for mut row in rows {
                    if row.len() != types.len() {
                        return Err(SqlError::new(
                            "42601",
                            "each UNION query must have the same number of columns",
                        ));
                    }
                    // The recursive term's values take the non-recursive term's types;
                    // a wider number is PostgreSQL's 42804, never rounded into them.
                    for (i, (d, t)) in row.iter_mut().zip(&types).enumerate() {
                        let rank = |t: TypeId| crate::expr::numeric_rank(t);
                        if let (Some(step), Some(base)) = (d.type_id().and_then(rank), rank(*t)) {
                            if step > base {
                                return Err(SqlError::new(
                                    "42804",
                                    format!(
                                        "recursive query \"{name}\" column {} has type {} in non-recursive term but type {} overall",
                                        i + 1,
                                        t.name(),
                                        d.type_id().map_or("unknown", |t| t.name())
                                    ),
                                ));
                            }
                        }
                        *d = crate::expr::coerce(std::mem::replace(d, Datum::Null), *t)?;
                    }
                    if all || seen.insert(key(&row)) {
                        self.memory.charge_row(&row)?;
                        result.push(row);
                    }
                }
            }
            let rel = bound_rel(&cols, &first.columns, result);
            if read_once_by(&q, &name) && !later_ctes_read(&rest, &name) {
                done.insert_read_once(name, rel);
            } else {
                done.insert(name, rel);
            }
        }
        exec::select_with(self, &q, params, &done)
    }
}
