//! Aggregates over a group of rows (`count`, `sum`, `avg`, `min`, `max`, `string_agg`,
//! `array_agg`, `bool_and`, `bool_or`, `every`), with FILTER and DISTINCT.

use std::cmp::Ordering;
use std::collections::HashSet;

use sqlparser::ast::{self, FunctionArg, FunctionArgExpr, FunctionArguments};
use walrus_engine::access::datum::{Datum, TypeId};

use super::{row_key, Executor};
use crate::error::{SqlError, SqlResult};
use crate::expr::as_i64;
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
            let mut out = String::new();
            for (i, v) in vals.iter().enumerate() {
                if i > 0 {
                    out.push_str(&seps.get(i).and_then(format_text).unwrap_or_default());
                }
                out.push_str(&format_text(v).unwrap_or_default());
            }
            Datum::Text(out)
        }
        "array_agg" => {
            if vals.is_empty() {
                return Ok(Datum::Null);
            }
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
                        total / fs.len() as f64
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
