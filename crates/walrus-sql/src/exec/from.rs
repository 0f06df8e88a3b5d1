//! FROM items: user tables, the virtual catalog tables, table functions
//! (`generate_series`, `unnest`), derived tables, nested joins; and joins (nested loops,
//! LATERAL items evaluated per left row).

use std::sync::Arc;

use sqlparser::ast::{
    self, Expr, FunctionArg, FunctionArgExpr, JoinConstraint, JoinOperator, TableFactor,
    TableWithJoins,
};
use walrus_engine::access::datum::{Datum, TypeId};
use walrus_engine::catalog::TableDef;

use super::dml::scan_rows;
use super::Executor;
use crate::catalog_views;
use crate::error::{SqlError, SqlResult};
use crate::expr::coerce;
use crate::memory::{row_bytes, MemoryBudget};
use crate::names::{ident, object_name};
use crate::plan::{bind, rename, table_cols};
use crate::rel::{ColName, Frame, Rel};

impl Executor<'_> {
    /// `left` joined with `twj`'s relation and then its joins, left to right.
    pub(super) fn joined(
        &self,
        left: Rel,
        twj: &TableWithJoins,
        outer: Option<&Frame<'_>>,
    ) -> SqlResult<Rel> {
        let mut acc = self.join(
            left,
            &twj.relation,
            &JoinOperator::CrossJoin(JoinConstraint::None),
            outer,
        )?;
        for j in &twj.joins {
            acc = self.join(acc, &j.relation, &j.join_operator, outer)?;
        }
        Ok(acc)
    }

    fn join(
        &self,
        left: Rel,
        right: &TableFactor,
        op: &JoinOperator,
        outer: Option<&Frame<'_>>,
    ) -> SqlResult<Rel> {
        use JoinOperator as J;
        let (kind, constraint) = match op {
            J::Join(c) | J::Inner(c) => (b'i', c),
            J::Left(c) | J::LeftOuter(c) => (b'l', c),
            J::Right(c) | J::RightOuter(c) => (b'r', c),
            J::FullOuter(c) => (b'f', c),
            J::CrossJoin(c) => (b'i', c),
            other => {
                return Err(SqlError::unsupported(format!(
                    "join type {other:?} is not supported"
                )))
            }
        };
        let lateral = is_lateral(right);
        // A non-lateral right side is computed once; a lateral one per left row.
        let fixed = if lateral {
            None
        } else {
            Some(self.factor(right, outer)?)
        };
        let mut out = Rel::default();
        let mut right_matched: Vec<bool> = Vec::new();
        // The join condition, built and bound once, when the right side's columns are
        // first known (a lateral side is only known after its first evaluation).
        let mut cond: Option<Option<Expr>> = None;
        // USING / NATURAL: the (left, right) positions of the merged columns.
        let mut using: Vec<(usize, usize)> = Vec::new();
        for lrow in &left.rows {
            let owned;
            // What a lateral item's rows for this left row charged: given back once
            // they are joined (the joined rows are charged on their own).
            let mut lateral_bytes = 0;
            let r: &Rel = match &fixed {
                Some(r) => r,
                None => {
                    let lframe = Frame {
                        cols: &left.cols,
                        row: lrow,
                        outer,
                    };
                    let mark = self.memory.used();
                    owned = self.factor(right, Some(&lframe))?;
                    lateral_bytes = self.memory.used().saturating_sub(mark);
                    &owned
                }
            };
            if cond.is_none() {
                out.cols = left.cols.iter().chain(&r.cols).cloned().collect();
                right_matched = vec![false; r.rows.len()];
                using = using_pairs(&left.cols, &r.cols, constraint)?;
                let c = match constraint {
                    JoinConstraint::On(e) => Some(e.clone()),
                    JoinConstraint::Using(_) | JoinConstraint::Natural | JoinConstraint::None => {
                        None
                    }
                };
                if let Some(c) = &c {
                    bind(c, &out.cols, outer, &[])?;
                }
                cond = Some(c);
            }
            let on = cond.as_ref().and_then(|c| c.as_ref());
            let mut matched = false;
            for (ri, rrow) in r.rows.iter().enumerate() {
                let mut row = Vec::with_capacity(lrow.len() + rrow.len());
                row.extend_from_slice(lrow);
                row.extend_from_slice(rrow);
                let keep = match on {
                    None => using_match(&using, &left.cols, &r.cols, lrow, rrow),
                    Some(c) => {
                        let frame = Frame {
                            cols: &out.cols,
                            row: &row,
                            outer,
                        };
                        crate::expr::holds("JOIN/ON", c, self.eval_in(c, Some(&frame), self)?)?
                    }
                };
                if keep {
                    matched = true;
                    if let Some(m) = right_matched.get_mut(ri) {
                        *m = true;
                    }
                    self.memory.charge_row(&row)?;
                    out.rows.push(row);
                }
            }
            if !matched && matches!(kind, b'l' | b'f') {
                let mut row = lrow.clone();
                row.extend(std::iter::repeat_n(Datum::Null, r.cols.len()));
                self.memory.charge_row(&row)?;
                out.rows.push(row);
            }
            self.memory
                .release_to(self.memory.used().saturating_sub(lateral_bytes));
        }
        if cond.is_none() {
            // No left rows: still learn the right side's columns.
            let r = match fixed {
                Some(r) => r,
                None => {
                    // A lateral item over no rows: evaluate it once against NULLs to
                    // learn its columns (its rows are discarded).
                    let nulls = vec![Datum::Null; left.cols.len()];
                    let frame = Frame {
                        cols: &left.cols,
                        row: &nulls,
                        outer,
                    };
                    let mut r = self.factor(right, Some(&frame))?;
                    r.rows.clear();
                    r
                }
            };
            out.cols = left.cols.iter().chain(&r.cols).cloned().collect();
            using = using_pairs(&left.cols, &r.cols, constraint)?;
            if matches!(kind, b'r' | b'f') {
                for rrow in &r.rows {
                    let mut row = vec![Datum::Null; left.cols.len()];
                    row.extend_from_slice(rrow);
                    self.memory.charge_row(&row)?;
                    out.rows.push(row);
                }
            }
            merge_using(&mut out, left.cols.len(), &using, kind);
            return Ok(out);
        }
        if matches!(kind, b'r' | b'f') {
            if let Some(r) = &fixed {
                for (ri, rrow) in r.rows.iter().enumerate() {
                    if !right_matched[ri] {
                        let mut row = vec![Datum::Null; left.cols.len()];
                        row.extend_from_slice(rrow);
                        self.memory.charge_row(&row)?;
                        out.rows.push(row);
                    }
                }
            }
        }
        merge_using(&mut out, left.cols.len(), &using, kind);
        Ok(out)
    }

    pub(super) fn user_table(&self, name: &ast::ObjectName) -> SqlResult<Option<Arc<TableDef>>> {
        let parts: Vec<String> = name
            .0
            .iter()
            .filter_map(|p| p.as_ident())
            .map(ident)
            .collect();
        let (schema, table) = match parts.as_slice() {
            [t] => (None, t.as_str()),
            [s, t] => (Some(s.as_str()), t.as_str()),
            [_, s, t] => (Some(s.as_str()), t.as_str()),
            _ => return Ok(None),
        };
        if catalog_views::is_virtual(schema, table) {
            return Ok(None);
        }
        if schema.is_some_and(|s| s != "public") {
            return Err(SqlError::new(
                "42P01",
                format!("relation \"{}\" does not exist", parts.join(".")),
            ));
        }
        Ok(Some(self.env.borrow_mut().txn().table(table)?))
    }

    /// One FROM item as a relation; `outer` is the enclosing row (for LATERAL items,
    /// the current row of everything to their left).
    fn factor(&self, tf: &TableFactor, outer: Option<&Frame<'_>>) -> SqlResult<Rel> {
        match tf {
            TableFactor::Table {
                name,
                alias,
                args: None,
                ..
            } => {
                let mut rel = match self.user_table(name)? {
                    Some(def) => {
                        let rows = scan_rows(&mut **self.env.borrow_mut(), &def)?;
                        let qual = alias
                            .as_ref()
                            .map(|a| ident(&a.name))
                            .unwrap_or_else(|| def.name.clone());
                        Rel {
                            cols: table_cols(&qual, &def),
                            rows,
                        }
                    }
                    None => {
                        let parts: Vec<String> = name
                            .0
                            .iter()
                            .filter_map(|p| p.as_ident())
                            .map(ident)
                            .collect();
                        let table = parts.last().cloned().unwrap_or_default();
                        let schema = parts.len().checked_sub(2).map(|i| parts[i].as_str());
                        self.virtual_table(schema, &table, alias.as_ref())?
                    }
                };
                rename(&mut rel, alias.as_ref())?;
                Ok(rel)
            }
            TableFactor::Table {
                name,
                alias,
                args: Some(args),
                ..
            } => self.table_function(name, &args.args, alias.as_ref(), outer),
            TableFactor::Function {
                name, args, alias, ..
            } => self.table_function(name, args, alias.as_ref(), outer),
            TableFactor::Derived {
                subquery, alias, ..
            } => {
                let mut rel = self.run_query(subquery, outer)?;
                let qual = alias.as_ref().map(|a| ident(&a.name));
                for c in &mut rel.cols {
                    c.qual = qual.clone();
                }
                rename(&mut rel, alias.as_ref())?;
                Ok(rel)
            }
            TableFactor::NestedJoin {
                table_with_joins,
                alias,
            } => {
                let start = Rel {
                    cols: Vec::new(),
                    rows: vec![Vec::new()],
                };
                let mut rel = self.joined(start, table_with_joins, outer)?;
                if let Some(a) = alias {
                    let q = ident(&a.name);
                    for c in &mut rel.cols {
                        c.qual = Some(q.clone());
                    }
                    rename(&mut rel, Some(a))?;
                }
                Ok(rel)
            }
            other => Err(SqlError::unsupported(format!(
                "FROM {other} is not supported"
            ))),
        }
    }

    /// A `pg_catalog` or `information_schema` table computed from the catalog snapshot.
    fn virtual_table(
        &self,
        schema: Option<&str>,
        table: &str,
        alias: Option<&ast::TableAlias>,
    ) -> SqlResult<Rel> {
        self.catalog_snapshot()?;
        let snap = self.catalog.borrow();
        let snap = snap.as_ref().expect("taken above");
        let (cols, rows) = snap.table(schema, table, &self.settings.all())?;
        self.memory.charge_rows(&rows)?;
        let qual = alias
            .map(|a| ident(&a.name))
            .unwrap_or_else(|| table.to_string());
        Ok(Rel {
            cols: cols
                .into_iter()
                .map(|(n, ty)| ColName {
                    qual: Some(qual.clone()),
                    name: n.to_string(),
                    ty: Some(ty),
                    bpchar: false,
                    hidden: false,
                    origin: None,
                })
                .collect(),
            rows,
        })
    }

    fn table_function(
        &self,
        name: &ast::ObjectName,
        args: &[FunctionArg],
        alias: Option<&ast::TableAlias>,
        outer: Option<&Frame<'_>>,
    ) -> SqlResult<Rel> {
        let fname = object_name(name);
        // Functions returning one row or set of several columns, computed like the
        // statistics views (`walrus_flush_detail()`, `pg_control_checkpoint()`).
        if catalog_views::is_row_function(&fname) {
            if !args.is_empty() {
                return Err(SqlError::new(
                    "42883",
                    format!("function {fname}() takes no arguments"),
                ));
            }
            let mut rel = self.virtual_table(Some("pg_catalog"), &fname, alias)?;
            rename(&mut rel, alias)?;
            return Ok(rel);
        }
        let vals = args
            .iter()
            .map(|a| match a {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e))
                | FunctionArg::Named {
                    arg: FunctionArgExpr::Expr(e),
                    ..
                } => self.eval_in(e, outer, self),
                other => Err(SqlError::unsupported(format!("argument {other}"))),
            })
            .collect::<SqlResult<Vec<_>>>()?;
        let rows: Vec<Vec<Datum>> = match fname.as_str() {
            "generate_series" => generate_series(&vals, &self.memory)?,
            "unnest" => match vals.first() {
                Some(Datum::Null) | None => Vec::new(),
                Some(d) => {
                    let elems = crate::expr::array_items(d)?;
                    let mut rows = Vec::with_capacity(elems.len());
                    for t in elems {
                        let row = vec![t];
                        self.memory.charge_row(&row)?;
                        rows.push(row);
                    }
                    rows
                }
            },
            // generate_subscripts(array, dim [, reverse]): 1..n of a one-dimensional
            // array's dimension 1; nothing for another dimension or an empty array.
            "generate_subscripts" => match (vals.first(), vals.get(1), vals.get(2)) {
                (Some(a), Some(d), rev) if !a.is_null() && !d.is_null() => {
                    let n = crate::expr::array_items(a)?.len() as i32;
                    let dim =
                        crate::expr::coerce(d.clone(), walrus_engine::access::datum::TypeId::Int4)?;
                    let n = if dim == Datum::Int4(1) { n } else { 0 };
                    let reverse = matches!(rev, Some(Datum::Bool(true)));
                    let mut rows: Vec<Vec<Datum>> = (1..=n).map(|i| vec![Datum::Int4(i)]).collect();
                    if reverse {
                        rows.reverse();
                    }
                    self.memory.charge_rows(&rows)?;
                    rows
                }
                _ => Vec::new(),
            },
            other => {
                return Err(SqlError::new(
                    "42883",
                    format!("function {other}() does not exist"),
                ))
            }
        };
        let qual = alias
            .map(|a| ident(&a.name))
            .unwrap_or_else(|| fname.clone());
        let ty = rows
            .iter()
            .find_map(|r| r[0].type_id())
            .or_else(|| match fname.as_str() {
                "generate_subscripts" => Some(walrus_engine::access::datum::TypeId::Int4),
                // unnest of an empty array: its element type.
                _ => vals
                    .first()
                    .and_then(|v| v.type_id())
                    .map(|t| t.elem().unwrap_or(t)),
            });
        let mut rel = Rel {
            cols: vec![ColName {
                qual: Some(qual),
                name: fname,
                ty,
                bpchar: false,
                hidden: false,
                origin: None,
            }],
            rows,
        };
        if let Some(a) = alias {
            if a.columns.is_empty() {
                // `generate_series(1, 3) AS g`: the column takes the alias's name.
                rel.cols[0].name = ident(&a.name);
            }
        }
        rename(&mut rel, alias)?;
        Ok(rel)
    }
}

/// `generate_series`'s rows, charged (all at once, before they are built) to `memory`.
fn generate_series(vals: &[Datum], memory: &MemoryBudget) -> SqlResult<Vec<Vec<Datum>>> {
    if vals.iter().any(|v| v.is_null()) {
        return Ok(Vec::new());
    }
    let as_i = |d: &Datum| match coerce(d.clone(), TypeId::Int8) {
        Ok(Datum::Int8(v)) => Ok(v),
        _ => Err(SqlError::new(
            "42883",
            "function generate_series() needs integer arguments",
        )),
    };
    let (start, stop) = match vals {
        [a, b] | [a, b, _] => (as_i(a)?, as_i(b)?),
        _ => {
            return Err(SqlError::new(
                "42883",
                "function generate_series() needs two or three arguments",
            ))
        }
    };
    let step = match vals.get(2) {
        Some(s) => as_i(s)?,
        None => 1,
    };
    if step == 0 {
        return Err(SqlError::new("22023", "step size cannot equal zero"));
    }
    let count = if (step > 0 && stop < start) || (step < 0 && stop > start) {
        0
    } else {
        ((stop as i128 - start as i128) / step as i128 + 1) as u128
    };
    if count > 100_000_000 {
        return Err(SqlError::new(
            "54000",
            "generate_series would produce more than 100 million rows",
        ));
    }
    let wide = vals.iter().any(|v| matches!(v, Datum::Int8(_)));
    memory.charge((count as u64).saturating_mul(row_bytes(&[Datum::Null])))?;
    Ok((0..count as i64)
        .map(|i| {
            let v = start + i * step;
            vec![if wide {
                Datum::Int8(v)
            } else {
                Datum::Int4(v as i32)
            }]
        })
        .collect())
}

fn is_lateral(tf: &TableFactor) -> bool {
    match tf {
        TableFactor::Derived { lateral, .. } | TableFactor::Function { lateral, .. } => *lateral,
        // Table functions in FROM may always refer to earlier items (PostgreSQL).
        TableFactor::Table { args: Some(_), .. } => true,
        _ => false,
    }
}

/// The (left, right) column positions a USING list or NATURAL join merges; empty for
/// other joins. A NATURAL join merges every column name both sides show.
fn using_pairs(
    left: &[ColName],
    right: &[ColName],
    constraint: &JoinConstraint,
) -> SqlResult<Vec<(usize, usize)>> {
    let names: Vec<String> = match constraint {
        JoinConstraint::Using(names) => names.iter().map(object_name).collect(),
        JoinConstraint::Natural => left
            .iter()
            .filter(|c| !c.hidden && right.iter().any(|r| !r.hidden && r.name == c.name))
            .map(|c| c.name.clone())
            .collect(),
        JoinConstraint::On(_) | JoinConstraint::None => return Ok(Vec::new()),
    };
    let find = |cols: &[ColName], name: &str, side: &str| -> SqlResult<usize> {
        crate::rel::find_col(cols, None, name)?.ok_or_else(|| {
            SqlError::new(
                "42703",
                format!(
                    "column \"{name}\" specified in USING clause does not exist in {side} table"
                ),
            )
        })
    };
    names
        .iter()
        .map(|n| Ok((find(left, n, "left")?, find(right, n, "right")?)))
        .collect()
}

/// Whether the merged columns are equal (`=`; NULL matches nothing).
fn using_match(
    pairs: &[(usize, usize)],
    lcols: &[ColName],
    rcols: &[ColName],
    lrow: &[Datum],
    rrow: &[Datum],
) -> bool {
    pairs.iter().all(|&(li, ri)| {
        let (mut l, mut r) = (lrow[li].clone(), rrow[ri].clone());
        if l.is_null() || r.is_null() {
            return false;
        }
        if lcols[li].bpchar || rcols[ri].bpchar {
            l = crate::expr::bpchar_text(l);
            r = crate::expr::bpchar_text(r);
        }
        crate::expr::compare_values(&l, &r).is_ok_and(|o| o.is_eq())
    })
}

/// Puts the merged columns of a USING / NATURAL join first (the left value, the right
/// one for a RIGHT join, the first non-null for FULL) and hides the two originals from
/// bare names and `*`, as PostgreSQL shows them.
fn merge_using(out: &mut Rel, nleft: usize, pairs: &[(usize, usize)], kind: u8) {
    if pairs.is_empty() {
        return;
    }
    let mut merged = Vec::with_capacity(pairs.len());
    for &(li, ri) in pairs {
        let (l, r) = (&out.cols[li], &out.cols[nleft + ri]);
        merged.push(ColName {
            qual: None,
            name: l.name.clone(),
            ty: l.ty.or(r.ty),
            bpchar: l.bpchar && r.bpchar,
            hidden: false,
            origin: None,
        });
    }
    for &(li, ri) in pairs {
        out.cols[li].hidden = true;
        out.cols[nleft + ri].hidden = true;
    }
    for row in &mut out.rows {
        let vals: Vec<Datum> = pairs
            .iter()
            .map(|&(li, ri)| {
                let (l, r) = (&row[li], &row[nleft + ri]);
                match kind {
                    b'r' => r.clone(),
                    b'f' if l.is_null() => r.clone(),
                    _ => l.clone(),
                }
            })
            .collect();
        row.splice(0..0, vals);
    }
    merged.append(&mut out.cols);
    out.cols = merged;
}
