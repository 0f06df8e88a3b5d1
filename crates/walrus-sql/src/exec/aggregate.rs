//! Aggregates over a group of rows (`count`, `sum`, `avg`, `min`, `max`, `string_agg`,
//! `array_agg`, `bool_and`, `bool_or`, `every`), with FILTER and DISTINCT.

use std::cmp::Ordering;
use std::collections::HashSet;

use sqlparser::ast::{self, FunctionArg, FunctionArgExpr, FunctionArguments};
use walrus_engine::access::datum::{Datum, TypeId};

use super::{row_key, Executor};
use crate::error::{SqlError, SqlResult};
use crate::expr::as_i64;
use crate::expr::compiled::Fast;
use crate::expr::{compare_values, function_args, function_name};
use crate::memory::datum_bytes;
use crate::numeric;
use crate::rel::{ColName, Frame};
use crate::value::format_text;

impl Executor<'_> {
    /// An aggregate over a group's rows.
    pub(super) fn aggregate(
        &self,
        f: &ast::Function,
        cols: &[ColName],
        rows: &[&Vec<Datum>],
        outer: Option<&Frame<'_>>,
    ) -> SqlResult<Datum> {
        let name = function_name(f);
        let (star, distinct, order) = match &f.args {
            FunctionArguments::List(l) => {
                let mut order: &[ast::OrderByExpr] = &[];
                for c in &l.clauses {
                    match c {
                        ast::FunctionArgumentClause::OrderBy(o) => order = o,
                        other => {
                            return Err(SqlError::unsupported(format!(
                                "{other} in an aggregate call is not supported"
                            )))
                        }
                    }
                }
                (
                    l.args
                        .iter()
                        .any(|a| matches!(a, FunctionArg::Unnamed(FunctionArgExpr::Wildcard))),
                    matches!(
                        l.duplicate_treatment,
                        Some(ast::DuplicateTreatment::Distinct)
                    ),
                    order,
                )
            }
            _ => (name == "count", false, &[][..]),
        };
        let args = function_args(f);
        if matches!(name.as_str(), "min" | "max") {
            let defs = crate::plan::typed_columns(cols);
            if let Some(a) = args.first() {
                if crate::plan::static_type(a, &defs) == Some(TypeId::Bool) {
                    return Err(no_bool_minmax(&name));
                }
            }
        }
        // (sort keys, value, separator) of each input row that counts.
        let mut entries: Vec<(Vec<Datum>, Datum, Datum)> = Vec::new();
        let mut counted = 0usize;
        // The argument values are this group's alone and freed once the aggregate has
        // its value: charged while collected, given back at the end.
        let mark = self.memory.used();
        for row in rows {
            let frame = Frame { cols, row, outer };
            if let Some(filter) = &f.filter {
                if !matches!(self.eval_in(filter, Some(&frame), self)?, Datum::Bool(true)) {
                    continue;
                }
            }
            counted += 1;
            if star {
                continue;
            }
            let arg = args.first().ok_or_else(|| {
                SqlError::new("42883", format!("function {name}() does not exist"))
            })?;
            let v = self.eval_in(arg, Some(&frame), self)?;
            let sep = if name == "string_agg" {
                match args.get(1) {
                    Some(s) => self.eval_in(s, Some(&frame), self)?,
                    None => Datum::Null,
                }
            } else {
                Datum::Null
            };
            if !v.is_null() || name == "array_agg" {
                let keys = order
                    .iter()
                    .map(|o| self.eval_in(&o.expr, Some(&frame), self))
                    .collect::<SqlResult<Vec<_>>>()?;
                self.memory.charge(
                    datum_bytes(&v) + datum_bytes(&sep) + crate::memory::row_bytes(&keys),
                )?;
                entries.push((keys, v, sep));
            }
        }
        if !order.is_empty() {
            let dirs = super::sort_dirs(order);
            entries.sort_by(|a, b| super::compare_keys(&a.0, &b.0, &dirs));
        }
        if distinct {
            if !order.is_empty() {
                // PostgreSQL: with DISTINCT, ORDER BY may only name the arguments.
                let arg_texts: Vec<String> = args.iter().map(|a| a.to_string()).collect();
                if order
                    .iter()
                    .any(|o| !arg_texts.contains(&o.expr.to_string()))
                {
                    return Err(SqlError::new(
                        "42P10",
                        "in an aggregate with DISTINCT, ORDER BY expressions must appear in argument list",
                    ));
                }
            }
            let mut seen = HashSet::new();
            let mut charged = Ok(());
            entries.retain(|(_, v, _)| {
                let k = row_key(std::slice::from_ref(v));
                if charged.is_ok() {
                    charged = self.charge_key(&k);
                }
                seen.insert(k)
            });
            charged?;
        }
        let (vals, seps): (Vec<Datum>, Vec<Datum>) =
            entries.into_iter().map(|(_, v, s)| (v, s)).unzip();
        let r = aggregate_result(&name, star, counted, vals, seps);
        self.memory.release_to(mark);
        r
    }
}

fn no_bool_minmax(name: &str) -> SqlError {
    SqlError::new(
        "42883",
        format!("function {name}(boolean) does not exist"),
    )
    .with_hint(
        "No function matches the given name and argument types. You might need to add explicit type casts.",
    )
}

/// Finishes an aggregate from the non-NULL argument values of its group.
/// The size PostgreSQL's `construct_md_array` gives a one-dimensional array of `vals`:
/// a 24-byte header (plus a null bitmap when a value is NULL, rounded to 8), each
/// variable-length value with its 4-byte header rounded up to 4, and 8 bytes for any
/// fixed-size one (the widest: an upper bound). Exact for the arrays of long text or
/// bytea values that can reach the limit.
fn array_bytes(vals: &[Datum]) -> usize {
    let nulls = vals.iter().any(Datum::is_null);
    let header = if nulls {
        (24 + vals.len().div_ceil(8)).next_multiple_of(8)
    } else {
        24
    };
    vals.iter().fold(header, |n, v| {
        let elem = match v {
            Datum::Null => 0,
            Datum::Text(s) | Datum::Numeric(s) => (s.len() + 4).next_multiple_of(4),
            Datum::Bytea(b) => (b.len() + 4).next_multiple_of(4),
            _ => 8,
        };
        n.saturating_add(elem)
    })
}

fn aggregate_result(
    name: &str,
    star: bool,
    counted: usize,
    vals: Vec<Datum>,
    seps: Vec<Datum>,
) -> SqlResult<Datum> {
    Ok(match name {
        "count" => Datum::Int8(if star { counted } else { vals.len() } as i64),
        "min" | "max" => {
            // PostgreSQL has no min/max over boolean (bool_and / bool_or are those).
            if let Some(Datum::Bool(_)) = vals.first() {
                return Err(no_bool_minmax(name));
            }
            let mut best: Option<Datum> = None;
            for v in vals {
                let better = match &best {
                    None => true,
                    Some(b) => {
                        let o = compare_values(&v, b)?;
                        if name == "min" {
                            o == Ordering::Less
                        } else {
                            o == Ordering::Greater
                        }
                    }
                };
                if better {
                    best = Some(v);
                }
            }
            best.unwrap_or(Datum::Null)
        }
        "bool_and" | "every" | "bool_or" => {
            if vals.is_empty() {
                return Ok(Datum::Null);
            }
            let want_all = name != "bool_or";
            let mut acc = want_all;
            for v in &vals {
                match v {
                    Datum::Bool(b) => {
                        acc = if want_all { acc && *b } else { acc || *b };
                    }
                    _ => {
                        return Err(SqlError::new(
                            "42883",
                            format!("function {name}() requires boolean arguments"),
                        ))
                    }
                }
            }
            Datum::Bool(acc)
        }
        "string_agg" => {
            if vals.is_empty() {
                return Ok(Datum::Null);
            }
            let texts: Vec<(String, String)> = vals
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    (
                        seps.get(i).and_then(format_text).unwrap_or_default(),
                        format_text(v).unwrap_or_default(),
                    )
                })
                .collect();
            // PostgreSQL's state is one string buffer that also holds the first
            // delimiter (skipped at the end): the same sizes fail here, before the
            // result is built.
            let mut len = 0usize;
            for (sep, v) in &texts {
                crate::memory::check_string_buffer(len, sep.len())?;
                len += sep.len();
                crate::memory::check_string_buffer(len, v.len())?;
                len += v.len();
            }
            crate::memory::check_concat(len - texts[0].0.len(), 0)?;
            let mut out = String::with_capacity(len - texts[0].0.len());
            for (i, (sep, v)) in texts.iter().enumerate() {
                if i > 0 {
                    out.push_str(sep);
                }
                out.push_str(v);
            }
            Datum::Text(out)
        }
        "array_agg" => {
            if vals.is_empty() {
                return Ok(Datum::Null);
            }
            crate::memory::check_array_size(array_bytes(&vals))?;
            crate::expr::make_array(vals)?
        }
        "sum" | "avg" => {
            if vals.is_empty() {
                return Ok(Datum::Null);
            }
            let ints: Option<Vec<i64>> = vals
                .iter()
                .map(|v| match v {
                    Datum::Int2(x) => Some(*x as i64),
                    Datum::Int4(x) => Some(*x as i64),
                    Datum::Int8(x) => Some(*x),
                    _ => None,
                })
                .collect();
            match ints {
                Some(is) => {
                    let total: i128 = is.iter().map(|&x| x as i128).sum();
                    if name == "sum" {
                        if vals.iter().any(|v| matches!(v, Datum::Int8(_))) {
                            Datum::Numeric(total.to_string())
                        } else {
                            Datum::Int8(
                                i64::try_from(total)
                                    .map_err(|_| SqlError::new("22003", "bigint out of range"))?,
                            )
                        }
                    } else {
                        let sum = bigdecimal::BigDecimal::from(
                            bigdecimal::num_bigint::BigInt::from(total),
                        );
                        Datum::Numeric(numeric::format(&numeric::avg(&sum, is.len())?))
                    }
                }
                None if vals.iter().all(|v| matches!(v, Datum::Float8(_))) => {
                    let fs: Vec<f64> = vals
                        .iter()
                        .filter_map(|v| match v {
                            Datum::Float8(x) => Some(*x),
                            _ => None,
                        })
                        .collect();
                    let total: f64 = fs.iter().sum();
                    Datum::Float8(if name == "sum" {
                        total
                    } else {
                        float_avg(total, fs.len())
                    })
                }
                None => {
                    // numeric (mixed with integers): exact, PostgreSQL's scales.
                    let mut total = bigdecimal::BigDecimal::from(0);
                    for v in &vals {
                        let x = match v {
                            Datum::Numeric(t) => numeric::parse(t)?,
                            Datum::Int2(_) | Datum::Int4(_) | Datum::Int8(_) => {
                                bigdecimal::BigDecimal::from(as_i64(v).unwrap_or(0))
                            }
                            other => {
                                return Err(SqlError::new(
                                    "42883",
                                    format!(
                                        "function {name}({}) does not exist",
                                        other.type_id().map(|t| t.name()).unwrap_or("unknown")
                                    ),
                                ))
                            }
                        };
                        total = numeric::arith(&total, '+', &x)?;
                    }
                    Datum::Numeric(numeric::format(&if name == "sum" {
                        total
                    } else {
                        numeric::avg(&total, vals.len())?
                    }))
                }
            }
        }
        other => {
            return Err(SqlError::unsupported(format!(
                "aggregate {other}() is not supported"
            )))
        }
    })
}

/// An aggregate call a grouped query computes row by row, keeping one running state per
/// group instead of the group's rows. Only plain calls qualify (see
/// [`streamable_call`]); anything else takes the row-list path above.
pub(super) struct StreamCall {
    /// The call's node in the query's expressions: how the group hooks recognise it.
    node: *const ast::Function,
    name: String,
    /// `count(*)`.
    star: bool,
    arg: Option<ast::Expr>,
    filter: Option<ast::Expr>,
}

impl StreamCall {
    /// The call's argument (none for `count(*)`).
    pub(super) fn arg(&self) -> Option<&ast::Expr> {
        self.arg.as_ref()
    }

    /// The aggregate's name, lower-case.
    pub(super) fn name(&self) -> &str {
        &self.name
    }

    /// `count(*)`.
    pub(super) fn star(&self) -> bool {
        self.star
    }

    /// The FILTER clause.
    pub(super) fn filter(&self) -> Option<&ast::Expr> {
        self.filter.as_ref()
    }
}

/// The call as a [`StreamCall`] when it can be streamed with exactly the row-list path's
/// answer: `count(*)`, or `count` / `sum` / `avg` / `min` / `max` / `bool_and` /
/// `bool_or` / `every` over one argument, optionally with FILTER — no DISTINCT, no ORDER
/// BY, no aggregate or subquery inside, and nothing `check_function` refuses.
pub(super) fn streamable_call(f: &ast::Function) -> Option<StreamCall> {
    crate::expr::check_function(f).ok()?;
    let name = function_name(f);
    if !matches!(
        name.as_str(),
        "count" | "sum" | "avg" | "min" | "max" | "bool_and" | "bool_or" | "every"
    ) {
        return None;
    }
    let FunctionArguments::List(l) = &f.args else {
        return None;
    };
    if !l.clauses.is_empty()
        || matches!(
            l.duplicate_treatment,
            Some(ast::DuplicateTreatment::Distinct)
        )
    {
        return None;
    }
    let plain =
        |e: &ast::Expr| !crate::plan::contains_aggregate(e) && !crate::plan::contains_subquery(e);
    if let Some(x) = &f.filter {
        if !plain(x) {
            return None;
        }
    }
    let (star, arg) = match l.args.as_slice() {
        [FunctionArg::Unnamed(FunctionArgExpr::Wildcard)] if name == "count" => (true, None),
        [FunctionArg::Unnamed(FunctionArgExpr::Expr(e))] if plain(e) => (false, Some(e.clone())),
        _ => return None,
    };
    Some(StreamCall {
        node: f as *const ast::Function,
        name,
        star,
        arg,
        filter: f.filter.as_deref().cloned(),
    })
}

/// The aggregate calls in `exprs` (a query level's select list, HAVING and ORDER BY)
/// when every one can be streamed; `None` sends the level to the row-list path.
pub(super) fn streamable_calls(exprs: &[&ast::Expr]) -> Option<Vec<StreamCall>> {
    let mut calls = Vec::new();
    let mut all = true;
    for e in exprs {
        crate::plan::aggregate_calls(e, &mut |f| match streamable_call(f) {
            Some(c) => calls.push(c),
            None => all = false,
        });
    }
    all.then_some(calls)
}

impl StreamCall {
    /// Whether `f` is this call's node.
    pub(super) fn is(&self, f: &ast::Function) -> bool {
        std::ptr::eq(self.node, f)
    }

    /// A group's state before its first row.
    pub(super) fn start(&self) -> AggState {
        AggState::start(&self.name)
    }
}

impl AggState {
    /// The state of aggregate `name` before its first row.
    pub(super) fn start(name: &str) -> AggState {
        match name {
            "count" => AggState::Count(0),
            "sum" | "avg" => AggState::Sum(SumState::default()),
            "min" | "max" => AggState::Extreme {
                best: None,
                failed: None,
            },
            _ => AggState::Bools {
                acc: None,
                failed: None,
            },
        }
    }
}

/// Running sum / avg: the exact integer total while every value is an integer, the float
/// total while every value is a float8, the exact numeric total once a NUMERIC arrives
/// after integers, and the error the numeric path meets at the first other value —
/// so the finished value is [`aggregate_result`]'s over the same values in order.
#[derive(Debug)]
pub(super) struct SumState {
    n: usize,
    all_ints: bool,
    any_int8: bool,
    ints: i128,
    all_floats: bool,
    floats: f64,
    /// Integers and numerics so far, exact; started when the first non-integer arrives.
    numeric: Option<bigdecimal::BigDecimal>,
    /// What the numeric path fails with: the first value neither integer nor numeric.
    failed: Option<SqlError>,
}

impl Default for SumState {
    fn default() -> SumState {
        SumState {
            n: 0,
            all_ints: true,
            any_int8: false,
            ints: 0,
            all_floats: true,
            // The float path sums with `Iterator::sum`: start from its identity.
            floats: std::iter::empty::<f64>().sum(),
            numeric: None,
            failed: None,
        }
    }
}

/// One group's running state of one [`StreamCall`].
#[derive(Debug)]
pub(super) enum AggState {
    Count(i64),
    Sum(SumState),
    /// min / max: the best value so far, or the error the row-list path would give.
    Extreme {
        best: Option<Datum>,
        failed: Option<SqlError>,
    },
    /// bool_and / bool_or / every.
    Bools {
        acc: Option<bool>,
        failed: Option<SqlError>,
    },
}

impl AggState {
    /// An estimate of the state's size, for the statement's memory budget.
    pub(super) fn bytes(&self) -> u64 {
        std::mem::size_of::<AggState>() as u64
    }
}

impl AggState {
    /// Feeds a call's argument value (`Null` for `count(*)`) to the state: what
    /// [`Executor::stream_row`] does once FILTER passed and the argument is evaluated.
    /// [`AggState::add`] of a value read in place, for the common cases: a NULL, any
    /// count, an integer into a sum that has seen only integers. False: the caller
    /// passes the value to `add`.
    pub(super) fn add_in_place(&mut self, v: &Datum) -> bool {
        if v.is_null() {
            return true;
        }
        match self {
            AggState::Count(n) => *n += 1,
            AggState::Sum(s) if s.all_ints && s.failed.is_none() => {
                let i = match v {
                    Datum::Int2(x) => *x as i64,
                    Datum::Int4(x) => *x as i64,
                    Datum::Int8(x) => {
                        s.any_int8 = true;
                        *x
                    }
                    _ => return false,
                };
                s.n += 1;
                s.ints += i as i128;
                s.all_floats = false;
            }
            _ => return false,
        }
        true
    }

    /// [`AggState::add`] of `row`'s column `i` (NULL past the row's end), copied only
    /// when [`AggState::add_in_place`] cannot take it as it lies.
    pub(super) fn add_column(&mut self, name: &str, row: &[Datum], i: usize) {
        let v = row.get(i).unwrap_or(&Datum::Null);
        if !self.add_in_place(v) {
            self.add(name, false, v.clone());
        }
    }

    pub(super) fn add(&mut self, name: &str, star: bool, v: Datum) {
        let state = self;
        if star {
            if let AggState::Count(n) = state {
                *n += 1;
            }
            return;
        }
        if v.is_null() {
            return;
        }
        match state {
            AggState::Count(n) => *n += 1,
            AggState::Sum(s) => s.add(name, v),
            AggState::Extreme { best, failed } => {
                if failed.is_some() {
                    return;
                }
                match best {
                    None => {
                        if matches!(v, Datum::Bool(_)) {
                            *failed = Some(no_bool_minmax(name));
                        }
                        *best = Some(v);
                    }
                    Some(b) => match compare_values(&v, b) {
                        Err(e) => *failed = Some(e),
                        Ok(o) => {
                            if beats(name, o) {
                                *b = v;
                            }
                        }
                    },
                }
            }
            AggState::Bools { acc, failed } => match v {
                Datum::Bool(x) => *acc = Some(bool_fold(name, *acc, x)),
                _ => {
                    if failed.is_none() {
                        *failed = Some(SqlError::new(
                            "42883",
                            format!("function {name}() requires boolean arguments"),
                        ));
                    }
                }
            },
        }
    }

    /// Folds `other`, the same call's state over other rows, into this one when the
    /// result is exactly what one state fed every row in scan order would hold. False
    /// (this state then unspecified) when it may not be: an error, which the serial
    /// order decides; a float sum, whose rounding depends on the order; min/max ties
    /// between values that compare equal but differ (`1.0` and `1.00`), where the
    /// serial scan keeps the first.
    pub(super) fn merge(&mut self, name: &str, other: AggState) -> bool {
        match (self, other) {
            (AggState::Count(a), AggState::Count(b)) => {
                *a += b;
                true
            }
            (AggState::Sum(a), AggState::Sum(b)) => a.merge(b),
            (
                AggState::Extreme { best, failed },
                AggState::Extreme {
                    best: other,
                    failed: other_failed,
                },
            ) => {
                if failed.is_some() || other_failed.is_some() {
                    return false;
                }
                match (best.as_mut(), other) {
                    (_, None) => true,
                    (None, Some(v)) => {
                        *best = Some(v);
                        true
                    }
                    (Some(b), Some(v)) => match compare_values(&v, b) {
                        Err(_) => false,
                        Ok(Ordering::Equal) => v == *b,
                        Ok(o) => {
                            if beats(name, o) {
                                *b = v;
                            }
                            true
                        }
                    },
                }
            }
            (
                AggState::Bools { acc, failed },
                AggState::Bools {
                    acc: other,
                    failed: other_failed,
                },
            ) => {
                if failed.is_some() || other_failed.is_some() {
                    return false;
                }
                if let Some(y) = other {
                    *acc = Some(bool_fold(name, *acc, y));
                }
                true
            }
            _ => false,
        }
    }
}

/// Whether a value comparing `o` to min's / max's best so far replaces it.
fn beats(name: &str, o: Ordering) -> bool {
    o == if name == "min" {
        Ordering::Less
    } else {
        Ordering::Greater
    }
}

/// bool_and / every (all) or bool_or (any) of `acc` so far and `x`.
fn bool_fold(name: &str, acc: Option<bool>, x: bool) -> bool {
    let want_all = name != "bool_or";
    let prev = acc.unwrap_or(want_all);
    if want_all {
        prev && x
    } else {
        prev || x
    }
}

impl Executor<'_> {
    /// Feeds one row of a group to a streamed call's state.
    /// `fast` is the argument's fast form, if it has one (`expr::compiled`).
    pub(super) fn stream_row(
        &self,
        call: &StreamCall,
        fast: Option<&Fast>,
        state: &mut AggState,
        frame: &Frame<'_>,
    ) -> SqlResult<()> {
        if let Some(filter) = &call.filter {
            if !matches!(self.eval_in(filter, Some(frame), self)?, Datum::Bool(true)) {
                return Ok(());
            }
        }
        let v = match (&call.arg, fast) {
            (None, _) => Datum::Null,
            // A column argument (`sum(x)`), the commonest: read in place, without
            // `Fast::eval`'s result wrapping (what it would return), and copied only
            // when the state needs more than a count or an integer sum.
            (Some(_), Some(Fast::Column(i))) => {
                state.add_column(&call.name, frame.row, *i);
                return Ok(());
            }
            (Some(a), _) => match fast.map(|f| f.eval(frame.row)).transpose()?.flatten() {
                Some(v) => v,
                None => self.eval_in(a, Some(frame), self)?,
            },
        };
        state.add(&call.name, call.star, v);
        Ok(())
    }

    /// A streamed call's value for a group, as [`Executor::aggregate`] gives it.
    pub(super) fn stream_finish(
        &self,
        call: &StreamCall,
        state: &AggState,
        cols: &[ColName],
    ) -> SqlResult<Datum> {
        match state {
            AggState::Count(n) => Ok(Datum::Int8(*n)),
            AggState::Sum(s) => s.finish(&call.name),
            AggState::Extreme { best, failed } => {
                // The row-list path's static check comes first: min/max over a boolean
                // expression is refused even when no row reached it.
                let defs = crate::plan::typed_columns(cols);
                if let Some(a) = &call.arg {
                    if crate::plan::static_type(a, &defs) == Some(TypeId::Bool) {
                        return Err(no_bool_minmax(&call.name));
                    }
                }
                match failed {
                    Some(e) => Err(e.clone()),
                    None => Ok(best.clone().unwrap_or(Datum::Null)),
                }
            }
            AggState::Bools { acc, failed } => match failed {
                Some(e) => Err(e.clone()),
                None => Ok(acc.map(Datum::Bool).unwrap_or(Datum::Null)),
            },
        }
    }
}

impl SumState {
    /// [`AggState::merge`] for sum / avg: exact for integers and numerics; false for
    /// floats and for a state that met an error.
    fn merge(&mut self, o: SumState) -> bool {
        if self.failed.is_some() || o.failed.is_some() {
            return false;
        }
        if (self.all_floats && self.n > 0) || (o.all_floats && o.n > 0) {
            return false;
        }
        let total = |s: &SumState| {
            if s.all_ints {
                bigdecimal::BigDecimal::from(bigdecimal::num_bigint::BigInt::from(s.ints))
            } else {
                s.numeric.clone().unwrap_or_default()
            }
        };
        if !(self.all_ints && o.all_ints) {
            match numeric::arith(&total(self), '+', &total(&o)) {
                Ok(t) => self.numeric = Some(t),
                Err(_) => return false,
            }
            self.all_ints = false;
        }
        self.n += o.n;
        self.any_int8 |= o.any_int8;
        self.ints += o.ints;
        self.all_floats &= o.all_floats;
        true
    }

    fn add(&mut self, name: &str, v: Datum) {
        self.n += 1;
        let int = match &v {
            Datum::Int2(x) => Some(*x as i64),
            Datum::Int4(x) => Some(*x as i64),
            Datum::Int8(x) => {
                self.any_int8 = true;
                Some(*x)
            }
            _ => None,
        };
        if let Some(i) = int {
            self.ints += i as i128;
        }
        self.all_floats &= matches!(v, Datum::Float8(_));
        if let Datum::Float8(f) = v {
            self.floats += f;
        }
        if self.failed.is_some() {
            self.all_ints &= int.is_some();
            return;
        }
        if self.all_ints && int.is_some() {
            return; // the numeric total starts only when needed
        }
        if self.all_ints {
            // The first non-integer: the numeric path's total so far is the integers'.
            self.all_ints = false;
            self.numeric = Some(bigdecimal::BigDecimal::from(
                bigdecimal::num_bigint::BigInt::from(self.ints),
            ));
        }
        let x = match &v {
            Datum::Numeric(t) => numeric::parse(t),
            Datum::Int2(_) | Datum::Int4(_) | Datum::Int8(_) => {
                Ok(bigdecimal::BigDecimal::from(as_i64(&v).unwrap_or(0)))
            }
            other => Err(SqlError::new(
                "42883",
                format!(
                    "function {name}({}) does not exist",
                    other.type_id().map(|t| t.name()).unwrap_or("unknown")
                ),
            )),
        };
        let total = self.numeric.take().unwrap_or_default();
        match x.and_then(|x| numeric::arith(&total, '+', &x)) {
            Ok(t) => self.numeric = Some(t),
            Err(e) => self.failed = Some(e),
        }
    }

    fn finish(&self, name: &str) -> SqlResult<Datum> {
        if self.n == 0 {
            return Ok(Datum::Null);
        }
        if self.all_ints {
            let total = self.ints;
            return Ok(if name == "sum" {
                if self.any_int8 {
                    Datum::Numeric(total.to_string())
                } else {
                    Datum::Int8(
                        i64::try_from(total)
                            .map_err(|_| SqlError::new("22003", "bigint out of range"))?,
                    )
                }
            } else {
                let sum = bigdecimal::BigDecimal::from(bigdecimal::num_bigint::BigInt::from(total));
                Datum::Numeric(numeric::format(&numeric::avg(&sum, self.n)?))
            });
        }
        if self.all_floats {
            return Ok(Datum::Float8(if name == "sum" {
                self.floats
            } else {
                float_avg(self.floats, self.n)
            }));
        }
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let total = self.numeric.clone().unwrap_or_default();
        Ok(Datum::Numeric(numeric::format(&if name == "sum" {
            total
        } else {
            numeric::avg(&total, self.n)?
        })))
    }
}

/// `avg(float8)` from the values' sum (which starts at `-0.0`, `Iterator::sum`'s
/// identity, so a sum of negative zeros stays `-0` as PostgreSQL's `sum`, whose first
/// value is its state). PostgreSQL's `avg` accumulates from `+0.0` (`float8_accum`'s
/// initial state), so its mean of negative zeros is `0`: the `0.0 +` does that.
fn float_avg(sum: f64, n: usize) -> f64 {
    (0.0 + sum) / n as f64
}
