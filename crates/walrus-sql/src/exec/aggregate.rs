//! Aggregates over a group of rows (`count`, `sum`, `avg`, `min`, `max`, `string_agg`,
//! `array_agg`, `bool_and`, `bool_or`, `every`), with FILTER and DISTINCT.

use std::cmp::Ordering;
use std::collections::HashSet;

use sqlparser::ast::{self, FunctionArg, FunctionArgExpr, FunctionArguments};
use walrus_engine::access::datum::Datum;

use super::{row_key, Executor};
use crate::error::{SqlError, SqlResult};
use crate::expr::{compare_values, format_array_text, function_args, function_name};
use crate::memory::datum_bytes;
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
        let (star, distinct) = match &f.args {
            FunctionArguments::List(l) => (
                l.args
                    .iter()
                    .any(|a| matches!(a, FunctionArg::Unnamed(FunctionArgExpr::Wildcard))),
                matches!(
                    l.duplicate_treatment,
                    Some(ast::DuplicateTreatment::Distinct)
                ),
            ),
            _ => (name == "count", false),
        };
        let args = function_args(f);
        let mut vals: Vec<Datum> = Vec::new();
        let mut seps: Vec<Datum> = Vec::new();
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
            if name == "string_agg" {
                let sep = match args.get(1) {
                    Some(s) => self.eval_in(s, Some(&frame), self)?,
                    None => Datum::Null,
                };
                self.memory.charge(datum_bytes(&sep))?;
                seps.push(sep);
            }
            if !v.is_null() || name == "array_agg" {
                self.memory.charge(datum_bytes(&v))?;
                vals.push(v);
            } else if name == "string_agg" {
                seps.pop();
            }
        }
        if distinct {
            let mut seen = HashSet::new();
            let mut charged = Ok(());
            vals.retain(|v| {
                let k = row_key(std::slice::from_ref(v));
                if charged.is_ok() {
                    charged = self.charge_key(&k);
                }
                seen.insert(k)
            });
            charged?;
        }
        let r = aggregate_result(&name, star, counted, vals, seps);
        self.memory.release_to(mark);
        r
    }
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
            Datum::Text(format_array_text(&vals))
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
                        Datum::Numeric(numeric_ratio(total, is.len() as i128))
                    }
                }
                None => {
                    let fs: Vec<f64> = vals
                        .iter()
                        .filter_map(|v| match v {
                            Datum::Float8(x) => Some(*x),
                            Datum::Numeric(s) => s.parse().ok(),
                            Datum::Text(s) => s.parse().ok(),
                            _ => None,
                        })
                        .collect();
                    if fs.len() != vals.len() {
                        return Err(SqlError::new(
                            "42883",
                            format!("function {name}() does not exist for this argument type"),
                        ));
                    }
                    let total: f64 = fs.iter().sum();
                    let v = if name == "sum" {
                        total
                    } else {
                        total / fs.len() as f64
                    };
                    if vals.iter().all(|x| matches!(x, Datum::Float8(_))) {
                        Datum::Float8(v)
                    } else {
                        Datum::Numeric(v.to_string())
                    }
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

/// `num / den` as numeric text with PostgreSQL's 16 fractional digits for `avg`.
fn numeric_ratio(num: i128, den: i128) -> String {
    let neg = (num < 0) != (den < 0) && num != 0;
    let (n, d) = (num.unsigned_abs(), den.unsigned_abs());
    let scale = 10u128.pow(16);
    let scaled = (n * scale * 10 / d + 5) / 10; // round half up at the 16th digit
    let (int, frac) = (scaled / scale, scaled % scale);
    format!("{}{int}.{frac:016}", if neg { "-" } else { "" })
}
