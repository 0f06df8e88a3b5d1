//! FROM items: user tables, the virtual catalog tables, table functions
//! (`generate_series`, `unnest`), derived tables, nested joins; and joins (nested loops,
//! LATERAL items evaluated per left row).

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use sqlparser::ast::{
    self, Expr, FunctionArg, FunctionArgExpr, JoinConstraint, JoinOperator, TableFactor,
    TableWithJoins,
};
use walrus_engine::access::datum::{Datum, TypeId};
use walrus_engine::catalog::TableDef;

use super::dml::scan_rows;
use super::spill::SpillFile;
use super::{Executor, KeyMap, KeyPart};
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
        // A FROM list starts from the unit relation (no columns, one empty row):
        // crossed with it, a side computed once is that side, rows not copied.
        let unit = left.cols.is_empty() && matches!(left.rows.as_slice(), [r] if r.is_empty());
        if unit && matches!(op, J::CrossJoin(JoinConstraint::None)) {
            if let Some(r) = fixed {
                return Ok(r);
            }
        }
        if let Some(r) = &fixed {
            if let Some(out) = self.hash_join(&left, r, kind, constraint, outer)? {
                return Ok(out);
            }
        }
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

    /// A hash join of `left` and the (non-lateral) right side when the join condition
    /// is equality of columns (USING, NATURAL, or ON with `l = r` conjuncts) whose
    /// types hash under PostgreSQL's equality; `None` leaves the join to the nested
    /// loop. The smaller side is hashed; the output is in the nested loop's order (left
    /// rows in order, each with its matches in right order, then unmatched right rows),
    /// and NULL keys match nothing. With other ON conjuncts the whole ON is evaluated on
    /// each key-matched pair.
    fn hash_join(
        &self,
        left: &Rel,
        right: &Rel,
        kind: u8,
        constraint: &JoinConstraint,
        outer: Option<&Frame<'_>>,
    ) -> SqlResult<Option<Rel>> {
        if left.rows.is_empty() || right.rows.is_empty() {
            return Ok(None);
        }
        let nleft = left.cols.len();
        let mut out = Rel {
            cols: left.cols.iter().chain(&right.cols).cloned().collect(),
            rows: Vec::new(),
        };
        let using = using_pairs(&left.cols, &right.cols, constraint)?;
        let (keys, on) = match constraint {
            JoinConstraint::On(e) => {
                bind(e, &out.cols, outer, &[])?;
                let (keys, rest) = equi_keys(e, &out.cols, nleft);
                (keys, rest.then_some(e))
            }
            JoinConstraint::Using(_) | JoinConstraint::Natural => (using.clone(), None),
            JoinConstraint::None => return Ok(None),
        };
        if keys.is_empty() {
            return Ok(None);
        }
        let mut kinds = Vec::with_capacity(keys.len());
        for &(li, ri) in &keys {
            match hash_kind(&left.cols[li], &right.cols[ri]) {
                Some(k) => kinds.push(k),
                None => return Ok(None),
            }
        }
        // The key of one row's side; `None` when a value is not of the declared kind
        // (the nested loop decides then), `Some(None)` when a key value is NULL.
        let key_of = |row: &[Datum], left_side: bool| -> Option<Option<Vec<KeyPart>>> {
            let mut key = Vec::with_capacity(keys.len());
            let mut null = false;
            for (&(li, ri), k) in keys.iter().zip(&kinds) {
                let d = &row[if left_side { li } else { ri }];
                if d.is_null() {
                    null = true;
                    continue;
                }
                if !k.admits(d) {
                    return None;
                }
                key.push(KeyPart::of(d));
            }
            Some((!null).then_some(key))
        };
        let build_left = left.rows.len() < right.rows.len();
        let (build, probe) = if build_left {
            (&left.rows, &right.rows)
        } else {
            (&right.rows, &left.rows)
        };
        let Some(pairs) = self.join_pairs(build, probe, build_left, &key_of)? else {
            return Ok(None);
        };
        let mut right_matched = vec![false; right.rows.len()];
        let mut p = 0;
        for (li, lrow) in left.rows.iter().enumerate() {
            if li % 1024 == 1023 {
                self.check_interrupt()?;
            }
            let mut matched = false;
            while p < pairs.len() && pairs[p].0 == li {
                let ri = pairs[p].1;
                p += 1;
                let rrow = &right.rows[ri];
                // Room for the merged USING columns `merge_using` puts in front.
                let mut row = Vec::with_capacity(lrow.len() + rrow.len() + using.len());
                row.extend_from_slice(lrow);
                row.extend_from_slice(rrow);
                if let Some(c) = on {
                    let frame = Frame {
                        cols: &out.cols,
                        row: &row,
                        outer,
                    };
                    if !crate::expr::holds("JOIN/ON", c, self.eval_in(c, Some(&frame), self)?)? {
                        continue;
                    }
                }
                matched = true;
                right_matched[ri] = true;
                self.memory.charge_row(&row)?;
                out.rows.push(row);
            }
            if !matched && matches!(kind, b'l' | b'f') {
                let mut row = lrow.clone();
                row.extend(std::iter::repeat_n(Datum::Null, right.cols.len()));
                self.memory.charge_row(&row)?;
                out.rows.push(row);
            }
        }
        if matches!(kind, b'r' | b'f') {
            for (ri, rrow) in right.rows.iter().enumerate() {
                if !right_matched[ri] {
                    let mut row = vec![Datum::Null; nleft];
                    row.extend_from_slice(rrow);
                    self.memory.charge_row(&row)?;
                    out.rows.push(row);
                }
            }
        }
        merge_using(&mut out, nleft, &using, kind);
        Ok(Some(out))
    }

    /// The (left row, right row) pairs whose keys are equal, in nested-loop order, or
    /// `None` when a key value is not of its column's kind. The `build` side is hashed in
    /// memory while its table stays within `work_mem`; past it both sides' keys go to
    /// [`JOIN_PARTITIONS`] partition files by hash and each partition is joined on its
    /// own (one level: a partition is not split again).
    fn join_pairs(
        &self,
        build: &[Vec<Datum>],
        probe: &[Vec<Datum>],
        build_left: bool,
        key_of: &KeyOf<'_>,
    ) -> SqlResult<Option<Vec<(usize, usize)>>> {
        let mark = self.memory.used();
        let work_mem = self.work_mem();
        let mut table: KeyMap<Vec<usize>> = KeyMap::default();
        let mut table_bytes = 0u64;
        let mut overflow = false;
        for (i, row) in build.iter().enumerate() {
            match key_of(row, build_left) {
                None => return Ok(None),
                Some(None) => {}
                Some(Some(k)) => {
                    let bytes = k.iter().map(KeyPart::bytes).sum::<u64>() + 64;
                    table_bytes += bytes;
                    if table_bytes > work_mem {
                        overflow = true;
                        break;
                    }
                    self.memory.charge(bytes)?;
                    table.entry(k).or_default().push(i);
                }
            }
        }
        let pair = |b: usize, p: usize| if build_left { (b, p) } else { (p, b) };
        let mut pairs: Vec<(usize, usize)> = Vec::new();
        if !overflow {
            for (i, row) in probe.iter().enumerate() {
                if i % 1024 == 1023 {
                    self.check_interrupt()?;
                }
                match key_of(row, !build_left) {
                    None => return Ok(None),
                    Some(None) => {}
                    Some(Some(k)) => {
                        if let Some(hits) = table.get(&k) {
                            self.memory.charge(16 * hits.len() as u64)?;
                            pairs.extend(hits.iter().map(|&b| pair(b, i)));
                        }
                    }
                }
            }
            drop(table);
            if build_left {
                pairs.sort_unstable();
            }
            return Ok(Some(pairs));
        }
        drop(table);
        self.memory.release_to(mark);
        // Partition both sides: each file row is the row's position and its key.
        let mut parts: Vec<[Option<SpillFile>; 2]> = Vec::new();
        parts.resize_with(JOIN_PARTITIONS, || [None, None]);
        for (side, rows) in [(0, build), (1, probe)] {
            let on_left = (side == 0) == build_left;
            for (i, row) in rows.iter().enumerate() {
                if i % 1024 == 1023 {
                    self.check_interrupt()?;
                }
                let Some(k) = key_of(row, on_left) else {
                    return Ok(None);
                };
                let Some(k) = k else { continue };
                let mut h = std::collections::hash_map::DefaultHasher::new();
                k.hash(&mut h);
                let f = &mut parts[(h.finish() % JOIN_PARTITIONS as u64) as usize][side];
                if f.is_none() {
                    *f = Some(SpillFile::create()?);
                }
                let mut out = Vec::with_capacity(k.len() + 1);
                out.push(Datum::Int8(i as i64));
                out.extend(k.into_iter().map(|p| match p {
                    KeyPart::Int(v) => Datum::Int8(v),
                    KeyPart::Other(t) => Datum::Text(t),
                    KeyPart::Null => Datum::Null,
                }));
                if let Some(f) = f.as_mut() {
                    f.write_row(&out)?;
                }
            }
        }
        let read = |r: Vec<Datum>| -> SqlResult<(usize, Vec<KeyPart>)> {
            let mut it = r.into_iter();
            let Some(Datum::Int8(at)) = it.next() else {
                return Err(SqlError::new("XX001", "bad join partition row"));
            };
            let key = it
                .map(|d| match d {
                    Datum::Int8(v) => KeyPart::Int(v),
                    Datum::Text(t) => KeyPart::Other(t),
                    _ => KeyPart::Null,
                })
                .collect();
            Ok((at as usize, key))
        };
        for [b, p] in parts {
            let (Some(mut b), Some(mut p)) = (b, p) else {
                continue; // a partition with one side empty has no pairs
            };
            let mark = self.memory.used();
            let mut table: KeyMap<Vec<usize>> = KeyMap::default();
            let mut rd = b.reader()?;
            while let Some(r) = rd.next_row()? {
                let (at, k) = read(r)?;
                self.memory
                    .charge(k.iter().map(KeyPart::bytes).sum::<u64>() + 64)?;
                table.entry(k).or_default().push(at);
            }
            let mut rd = p.reader()?;
            while let Some(r) = rd.next_row()? {
                let (at, k) = read(r)?;
                if let Some(hits) = table.get(&k) {
                    pairs.extend(hits.iter().map(|&b| pair(b, at)));
                }
            }
            drop(table);
            self.memory.release_to(mark);
            self.check_interrupt()?;
        }
        self.memory.charge(16 * pairs.len() as u64)?;
        pairs.sort_unstable();
        Ok(Some(pairs))
    }

    /// The hashed right side of `left JOIN right ON ...` for a left table that is
    /// scanned, not held (`select.rs`'s single-table path): an inner join whose ON has
    /// `l = r` conjuncts over columns that hash ([`hash_kind`]), its right side read once
    /// and hashed within `work_mem`. `None` leaves the join to [`Executor::join`]
    /// (outer or lateral joins, no equality, keys that do not hash, a right side too
    /// large for `work_mem`).
    pub(super) fn probe_join(
        &self,
        left_cols: &[ColName],
        right: &TableFactor,
        op: &JoinOperator,
    ) -> SqlResult<Option<ProbeJoin>> {
        let on = match op {
            JoinOperator::Join(JoinConstraint::On(e))
            | JoinOperator::Inner(JoinConstraint::On(e)) => e,
            _ => return Ok(None),
        };
        if is_lateral(right) {
            return Ok(None);
        }
        let right = self.factor(right, None)?;
        let nleft = left_cols.len();
        let cols: Vec<ColName> = left_cols.iter().chain(&right.cols).cloned().collect();
        bind(on, &cols, None, &[])?;
        let (keys, rest) = equi_keys(on, &cols, nleft);
        if keys.is_empty() {
            return Ok(None);
        }
        let mut kinds = Vec::with_capacity(keys.len());
        for &(li, ri) in &keys {
            match hash_kind(&left_cols[li], &right.cols[ri]) {
                Some(k) => kinds.push(k),
                None => return Ok(None),
            }
        }
        let work_mem = self.work_mem();
        let mut table: KeyMap<Vec<usize>> = KeyMap::default();
        let mut table_bytes = 0u64;
        for (i, row) in right.rows.iter().enumerate() {
            match side_key(&keys, &kinds, row, false) {
                None => return Ok(None),
                Some(None) => {}
                Some(Some(k)) => {
                    let bytes = k.iter().map(KeyPart::bytes).sum::<u64>() + 64;
                    table_bytes += bytes;
                    if table_bytes > work_mem {
                        return Ok(None);
                    }
                    self.memory.charge(bytes)?;
                    table.entry(k).or_default().push(i);
                }
            }
        }
        Ok(Some(ProbeJoin {
            cols,
            right: right.rows,
            table,
            keys,
            kinds,
            on: on.clone(),
            rest,
        }))
    }

    /// Joins one left row with the hashed right side, handing each joined row to `each`
    /// (which returns `false` to stop) in the nested loop's order: matches in right-row
    /// order; a NULL key matches nothing. Returns whether to go on.
    /// `scratch` holds the buffers each joined row and key are built in.
    pub(super) fn probe_row(
        &self,
        pj: &ProbeJoin,
        lrow: &[Datum],
        scratch: &mut ProbeScratch,
        each: &mut dyn FnMut(&[Datum]) -> SqlResult<bool>,
    ) -> SqlResult<bool> {
        let ProbeScratch { row, key } = scratch;
        let all: Vec<usize>;
        let (hits, check_on): (&[usize], bool) =
            match side_key_into(&pj.keys, &pj.kinds, lrow, true, key) {
                Some(false) => return Ok(true),
                Some(true) => match pj.table.get(key.as_slice()) {
                    Some(h) => (h.as_slice(), pj.rest),
                    None => return Ok(true),
                },
                // A value not of its column's kind: every right row, the whole ON decides.
                None => {
                    all = (0..pj.right.len()).collect();
                    (all.as_slice(), true)
                }
            };
        for &ri in hits {
            let rrow = &pj.right[ri];
            row.clear();
            row.extend_from_slice(lrow);
            row.extend_from_slice(rrow);
            if check_on {
                let frame = Frame {
                    cols: &pj.cols,
                    row: &row[..],
                    outer: None,
                };
                if !crate::expr::holds(
                    "JOIN/ON",
                    &pj.on,
                    self.eval_in(&pj.on, Some(&frame), self)?,
                )? {
                    continue;
                }
            }
            if !each(&row[..])? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    pub(super) fn user_table(&self, name: &ast::ObjectName) -> SqlResult<Option<Arc<TableDef>>> {
        let parts: Vec<String> = name
            .0
            .iter()
            .filter_map(|p| p.as_ident())
            .map(ident)
            .collect();
        let (schema, table) = match parts.as_slice() {
            [t] if self.ctes.is_some_and(|c| c.contains(t)) => return Ok(None),
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
                        let wanted = self.pruned_names.borrow().as_ref().map(|names| {
                            def.columns
                                .iter()
                                .map(|c| names.contains(&c.name))
                                .collect::<Vec<bool>>()
                        });
                        let rows =
                            scan_rows(&mut **self.env.borrow_mut(), &def, wanted.as_deref())?;
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
                        if let [n] = parts.as_slice() {
                            if let Some(bound) = self.ctes.and_then(|c| c.read(n, &self.memory)) {
                                return self.cte_rel(n, bound?, alias.as_ref());
                            }
                        }
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
            TableFactor::UNNEST {
                alias,
                array_exprs,
                with_offset: false,
                with_offset_alias: None,
                with_ordinality,
            } => self.unnest(array_exprs, *with_ordinality, alias.as_ref(), outer),
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

    /// A FROM reference to a CTE bound by name: a copy of its rows (charged), its
    /// columns qualified by the alias or the CTE's name and renamed by the alias.
    /// CTE `name`'s rows `bound` (see [`super::CteRels::read`]) as a FROM item.
    fn cte_rel(
        &self,
        name: &str,
        mut bound: Rel,
        alias: Option<&ast::TableAlias>,
    ) -> SqlResult<Rel> {
        let qual = alias
            .map(|a| ident(&a.name))
            .unwrap_or_else(|| name.to_string());
        for c in &mut bound.cols {
            c.qual = Some(qual.clone());
        }
        rename(&mut bound, alias)?;
        Ok(bound)
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
                .map(|(n, ct)| ColName {
                    qual: Some(qual.clone()),
                    name: n.to_string(),
                    ty: Some(ct.ty),
                    bpchar: false,
                    hidden: false,
                    // PostgreSQL's column type where the engine keeps the values under
                    // another (`name` as text, `oid` as int8).
                    origin: (ct.oid != ct.ty.pg_oid() || ct.typmod != -1).then_some(
                        crate::rel::Origin {
                            table_oid: 0,
                            attnum: 0,
                            type_oid: ct.oid,
                            typmod: ct.typmod,
                        },
                    ),
                })
                .collect(),
            rows,
        })
    }

    /// `unnest(a [, b ...]) [WITH ORDINALITY]` in FROM: one column per array, as many
    /// rows as the longest array has elements (the shorter ones padded with NULLs), and
    /// `ordinality` (bigint, from 1) last when asked for; a NULL array has none. A lone
    /// array's column is named `unnest`, or by the alias when the alias names no
    /// columns, as in PostgreSQL.
    fn unnest(
        &self,
        array_exprs: &[ast::Expr],
        with_ordinality: bool,
        alias: Option<&ast::TableAlias>,
        outer: Option<&Frame<'_>>,
    ) -> SqlResult<Rel> {
        let mut columns: Vec<(Vec<Datum>, Option<TypeId>)> = Vec::new();
        for e in array_exprs {
            let v = self.eval_in(e, outer, self)?;
            let ty = v.type_id();
            if !v.is_null() && ty.is_some_and(|t| t.elem().is_none()) {
                return Err(SqlError::new(
                    "42883",
                    format!(
                        "function unnest({}) does not exist",
                        ty.map_or("unknown", |t| t.name())
                    ),
                )
                .with_hint(
                    "No function matches the given name and argument types. You might need to add explicit type casts.",
                ));
            }
            let items = if v.is_null() {
                Vec::new()
            } else {
                crate::expr::array_items(&v)?
            };
            columns.push((items, ty.and_then(|t| t.elem())));
        }
        let n = columns
            .iter()
            .map(|(items, _)| items.len())
            .max()
            .unwrap_or(0);
        let mut rows = Vec::with_capacity(n);
        for i in 0..n {
            let mut row: Vec<Datum> = columns
                .iter()
                .map(|(items, _)| items.get(i).cloned().unwrap_or(Datum::Null))
                .collect();
            if with_ordinality {
                row.push(Datum::Int8(i as i64 + 1));
            }
            self.memory.charge_row(&row)?;
            rows.push(row);
        }
        let qual = alias
            .map(|a| ident(&a.name))
            .unwrap_or_else(|| "unnest".to_string());
        let col = |name: String, ty: Option<TypeId>| ColName {
            qual: Some(qual.clone()),
            name,
            ty,
            bpchar: false,
            hidden: false,
            origin: None,
        };
        let lone_named = match alias {
            Some(a) if a.columns.is_empty() && columns.len() == 1 => Some(ident(&a.name)),
            _ => None,
        };
        let mut cols: Vec<ColName> = columns
            .iter()
            .map(|(items, ty)| {
                let ty = items.iter().find_map(|d| d.type_id()).or(*ty);
                col(lone_named.clone().unwrap_or_else(|| "unnest".into()), ty)
            })
            .collect();
        if with_ordinality {
            cols.push(col("ordinality".into(), Some(TypeId::Int8)));
        }
        let mut rel = Rel { cols, rows };
        rename(&mut rel, alias)?;
        Ok(rel)
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
        let qualified = |schema: &str| {
            name.0.len() == 2 && name.0[0].as_ident().is_some_and(|i| ident(i) == schema)
        };
        if fname == "_pg_expandarray" && qualified("information_schema") {
            let qual = alias
                .map(|a| ident(&a.name))
                .unwrap_or_else(|| fname.clone());
            let mut rel = crate::expandarray::rows(&vals, qual, &self.memory)?;
            rename(&mut rel, alias)?;
            return Ok(rel);
        }
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

/// The hashed right side of a join whose left table is streamed (see
/// [`Executor::probe_join`]).
pub(super) struct ProbeJoin {
    /// The joined row's columns: the left table's, then the right side's.
    pub(super) cols: Vec<ColName>,
    right: Vec<Vec<Datum>>,
    /// Right rows (positions, ascending) by key.
    table: KeyMap<Vec<usize>>,
    keys: Vec<(usize, usize)>,
    kinds: Vec<HashKind>,
    on: Expr,
    /// Whether ON has conjuncts besides the key equalities (then it is evaluated on
    /// each key-matched pair).
    rest: bool,
}

impl ProbeJoin {
    /// The right rows `lrow` joins, in [`Executor::probe_row`]'s order, when the key
    /// equalities alone decide (no other ON conjunct, every key value of its column's
    /// kind): what a parallel participant can join without the executor. `None` when
    /// ON must be evaluated. A row whose key equals the last one probed through `memo`
    /// gets the last hits without hashing, so a run of rows sharing a key (a table clustered on it, as
    /// pgbench's accounts are on `bid`) hashes once.
    pub(super) fn plain_hits<'a>(
        &'a self,
        lrow: &[Datum],
        memo: &mut ProbeMemo<'a>,
    ) -> Option<&'a [usize]> {
        if self.rest {
            return None;
        }
        if !side_key_into(&self.keys, &self.kinds, lrow, true, &mut memo.key)? {
            return Some(&[]);
        }
        if let Some(hits) = memo.hits.filter(|_| memo.key == memo.last) {
            return Some(hits);
        }
        let hits = self
            .table
            .get(memo.key.as_slice())
            .map_or(&[][..], |h| h.as_slice());
        std::mem::swap(&mut memo.key, &mut memo.last);
        memo.hits = Some(hits);
        Some(hits)
    }

    /// Right row `i`.
    pub(super) fn right_row(&self, i: usize) -> &[Datum] {
        &self.right[i]
    }
}

/// What [`ProbeJoin::plain_hits`] keeps between the rows of one stream: the key
/// being built, and the last key probed with its hits.
#[derive(Default)]
pub(super) struct ProbeMemo<'a> {
    key: Vec<KeyPart>,
    last: Vec<KeyPart>,
    hits: Option<&'a [usize]>,
}

/// One side's key for the (left, right) column pairs `keys`: `None` when a value is not
/// of its column's kind, `Some(None)` when a key value is NULL.
fn side_key(
    keys: &[(usize, usize)],
    kinds: &[HashKind],
    row: &[Datum],
    left_side: bool,
) -> Option<Option<Vec<KeyPart>>> {
    let mut key = Vec::with_capacity(keys.len());
    Some(side_key_into(keys, kinds, row, left_side, &mut key)?.then_some(key))
}

/// [`side_key`] built in `key` (cleared first), for the probe side's row after row:
/// `Some(false)` when a key value is NULL.
fn side_key_into(
    keys: &[(usize, usize)],
    kinds: &[HashKind],
    row: &[Datum],
    left_side: bool,
    key: &mut Vec<KeyPart>,
) -> Option<bool> {
    key.clear();
    for (&(li, ri), k) in keys.iter().zip(kinds) {
        let d = &row[if left_side { li } else { ri }];
        if d.is_null() {
            return Some(false);
        }
        if !k.admits(d) {
            return None;
        }
        key.push(KeyPart::of(d));
    }
    Some(true)
}

/// The buffers one probe side reuses from row to row: the joined row, the key.
#[derive(Default)]
pub(super) struct ProbeScratch {
    row: Vec<Datum>,
    key: Vec<KeyPart>,
}

/// Which values a hash join key column takes: the integer and NUMERIC types compare
/// equal across widths ([`KeyPart`] normalises them alike); any other type only with
/// itself. `char(n)` columns are left to the nested loop (their padding rule).
#[derive(Clone, Copy)]
enum HashKind {
    Number,
    Exact(TypeId),
}

impl HashKind {
    fn admits(self, d: &Datum) -> bool {
        match (self, d.type_id()) {
            (HashKind::Number, Some(t)) => is_number(t),
            (HashKind::Exact(k), Some(t)) => k == t,
            (_, None) => true,
        }
    }
}

fn is_number(t: TypeId) -> bool {
    matches!(
        t,
        TypeId::Int2 | TypeId::Int4 | TypeId::Int8 | TypeId::Numeric
    )
}

fn exact_equality(t: TypeId) -> bool {
    matches!(
        t,
        TypeId::Bool
            | TypeId::Text
            | TypeId::Float8
            | TypeId::Date
            | TypeId::Time
            | TypeId::TimeTz
            | TypeId::Timestamp
            | TypeId::TimestampTz
            | TypeId::Bytea
            | TypeId::Uuid
    )
}

fn hash_kind(l: &ColName, r: &ColName) -> Option<HashKind> {
    if l.bpchar || r.bpchar {
        return None;
    }
    match (l.ty?, r.ty?) {
        (a, b) if is_number(a) && is_number(b) => Some(HashKind::Number),
        // Types whose equality is byte equality of the value; json has no equality
        // operator, interval's equality is not field-wise ('1 day' = '24 hours'),
        // arrays compare element by element: those take the nested loop, which
        // evaluates the real operator.
        (a, b) if a == b && exact_equality(a) => Some(HashKind::Exact(a)),
        _ => None,
    }
}

/// The `left column = right column` conjuncts of an ON condition as (left, right)
/// positions (`nleft` columns on the left), and whether anything else is in it.
fn equi_keys(on: &Expr, cols: &[ColName], nleft: usize) -> (Vec<(usize, usize)>, bool) {
    let conjuncts = crate::plan::conjuncts(on);
    let resolve = |x: &Expr| -> Option<usize> {
        let (q, n) = crate::rel::col_ref(x)?;
        crate::rel::find_col(cols, q.as_deref(), &n).ok().flatten()
    };
    let mut keys = Vec::new();
    let mut rest = false;
    for c in conjuncts {
        let pair = match c {
            Expr::BinaryOp {
                left,
                op: ast::BinaryOperator::Eq,
                right,
            } => match (resolve(left), resolve(right)) {
                (Some(a), Some(b)) if a < nleft && b >= nleft => Some((a, b - nleft)),
                (Some(a), Some(b)) if b < nleft && a >= nleft => Some((b, a - nleft)),
                _ => None,
            },
            _ => None,
        };
        match pair {
            Some(p) => keys.push(p),
            None => rest = true,
        }
    }
    (keys, rest)
}

/// A row's hash join key on one side (`true`: the left): `None` when a value is not of
/// its column's kind, `Some(None)` when a key value is NULL.
type KeyOf<'a> = dyn Fn(&[Datum], bool) -> Option<Option<Vec<KeyPart>>> + 'a;

/// How many partition files a hash join past `work_mem` spreads each side over.
const JOIN_PARTITIONS: usize = 32;

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
