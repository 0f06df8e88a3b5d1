//! ANALYZE: statistics from a sample of the table, PostgreSQL's way. The engine draws
//! the sample (`Transaction::sample_rows`: `300 × default_statistics_target` blocks
//! chosen at random, a reservoir of as many rows over the rows visible on them) and
//! estimates the table's rows from the blocks it read. From the sample come, per
//! column, the null fraction, the average width, the minimum and maximum, and the
//! distinct count (Haas and Stokes' Duj1 estimator when the sample is not the whole
//! table, as PostgreSQL's `compute_scalar_stats`). A table whose visible rows all fit
//! in the sample gets exact statistics.
//!
//! Minimum and maximum of a sample are the sample's extremes: a range past them is
//! estimated at the fewest rows (one), as PostgreSQL's histogram bounds (also a
//! sample's) do. The planner uses them only to estimate range selectivity
//! (`plan/estimate.rs`) and to choose a sequential scan over a wide index range
//! (`plan/access.rs`), where a few rows more or less near the edges do not change the
//! choice.

use std::collections::HashMap;

use walrus_engine::access::datum::Datum;
use walrus_engine::catalog::TableDef;
use walrus_engine::engine::Transaction;
use walrus_engine::Engine;

use super::KeyPart;
use crate::error::{SqlError, SqlResult};
use crate::expr::compare_values;
use crate::stats::{ColumnStatistics, TableStatistics};

/// The setting that sizes the sample, its default and its range (PostgreSQL's).
pub(crate) const STATISTICS_TARGET: &str = "default_statistics_target";
const STATISTICS_TARGET_DEFAULT: u32 = 100;
const STATISTICS_TARGET_MAX: u32 = 10_000;

/// Rows (and blocks) sampled per unit of the statistics target (PostgreSQL's
/// `std_typanalyze`: 300, from Chaudhuri, Motwani and Narasayya's bound for a
/// histogram of that many bins).
const SAMPLE_ROWS_PER_TARGET: usize = 300;

/// `default_statistics_target`'s value from its text (see [`integer_setting`]).
pub(crate) fn statistics_target(value: &str) -> SqlResult<u32> {
    integer_setting(
        STATISTICS_TARGET,
        value,
        1,
        STATISTICS_TARGET_MAX as i32,
        STATISTICS_TARGET_DEFAULT as i32,
    )
    .map(|n| n as u32)
}

/// An integer setting's value from its text: a decimal integer in `min..=max`
/// (`default` for DEFAULT), with PostgreSQL's messages and SQLSTATE 22023 for anything
/// else it would refuse. The forms PostgreSQL's integer parsing also takes (`0x` hex, a
/// leading-zero octal, a fraction it rounds) are refused as unsupported rather than read
/// differently.
pub(crate) fn integer_setting(
    name: &str,
    value: &str,
    min: i32,
    max: i32,
    default: i32,
) -> SqlResult<i32> {
    let v = value.trim();
    if v.eq_ignore_ascii_case("default") {
        return Ok(default);
    }
    let invalid = || {
        SqlError::new(
            "22023",
            format!("invalid value for parameter \"{name}\": \"{value}\""),
        )
    };
    let digits = v.strip_prefix(&['-', '+'][..]).unwrap_or(v);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        let numeric_looking = digits.starts_with(|c: char| c.is_ascii_digit() || c == '.')
            && digits.parse::<f64>().is_ok()
            || digits.to_ascii_lowercase().starts_with("0x");
        if numeric_looking {
            return Err(SqlError::unsupported(format!(
                "{name} must be written as a decimal integer"
            )));
        }
        return Err(invalid());
    }
    if digits.len() > 1 && digits.starts_with('0') {
        return Err(SqlError::unsupported(format!(
            "{name} must be written without leading zeros"
        )));
    }
    let n: i32 = v
        .parse()
        .map_err(|_| invalid().with_hint("Value exceeds integer range."))?;
    if !(min..=max).contains(&n) {
        return Err(SqlError::new(
            "22023",
            format!("{v} is outside the valid range for parameter \"{name}\" ({min} .. {max})"),
        ));
    }
    Ok(n)
}

/// The sample's size for a statistics target.
pub(crate) fn sample_rows_for(target: u32) -> usize {
    SAMPLE_ROWS_PER_TARGET * target as usize
}

/// Per-column totals over the sample.
#[derive(Default)]
struct ColumnTotals {
    nulls: u64,
    width: u64,
    min: Option<Datum>,
    max: Option<Datum>,
    /// Set when two values did not compare (a type without an order): no min/max.
    unordered: bool,
}

impl ColumnTotals {
    fn add(&mut self, d: &Datum) {
        if d.is_null() {
            self.nulls += 1;
            return;
        }
        self.width += value_width(d);
        if self.unordered {
            return;
        }
        let mut beyond = |bound: &Option<Datum>, want: std::cmp::Ordering| match bound {
            None => true,
            Some(m) => match compare_values(d, m) {
                Ok(o) => o == want,
                Err(_) => {
                    self.unordered = true;
                    false
                }
            },
        };
        let lower = beyond(&self.min, std::cmp::Ordering::Less);
        let higher = beyond(&self.max, std::cmp::Ordering::Greater);
        if lower {
            self.min = Some(d.clone());
        }
        if higher {
            self.max = Some(d.clone());
        }
    }
}

/// A seed for the sample's random choices: differs between ANALYZEs, as PostgreSQL's.
fn fresh_seed(def: &TableDef) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ (u64::from(def.relfile.0) << 32)
}

/// ANALYZE of `tables` (every user table when empty): each one's statistics gathered
/// and stored in the catalog by the statement's transaction (so they are durable once
/// it commits, and gone if it rolls back).
pub(crate) fn analyze(env: &mut dyn super::Env, tables: &[String]) -> SqlResult<()> {
    let target = match env.settings().get(STATISTICS_TARGET) {
        Some(v) => statistics_target(&v)?,
        None => STATISTICS_TARGET_DEFAULT,
    };
    let defs: Vec<std::sync::Arc<TableDef>> = if tables.is_empty() {
        let mut all: Vec<_> = env.txn().catalog()?.tables.values().cloned().collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    } else {
        tables
            .iter()
            .map(|t| env.txn().table(t))
            .collect::<Result<_, _>>()?
    };
    for def in defs {
        let stats = analyze_table(env.txn(), &def, sample_rows_for(target), fresh_seed(&def))?;
        env.txn().set_table_statistics(&def.name, stats.encode())?;
        env.engine()
            .record_analyze(&def, stats.reltuples as u64, false);
    }
    Ok(())
}

/// Autovacuum's analyze of one table (`Engine::set_analyzer`): its own transaction,
/// the server's `default_statistics_target` (from walrus.toml, else PostgreSQL's 100).
pub(crate) fn auto_analyze(engine: &Engine, table: &str) -> Result<(), String> {
    let target = engine
        .settings()
        .extra
        .iter()
        .rev()
        .find(|(k, _)| k == STATISTICS_TARGET)
        .and_then(|(_, v)| statistics_target(v).ok())
        .unwrap_or(STATISTICS_TARGET_DEFAULT);
    let mut t = engine.begin(walrus_engine::engine::Isolation::ReadCommitted);
    let run = |t: &mut Transaction| -> SqlResult<(std::sync::Arc<TableDef>, f64)> {
        let def = t.table(table)?;
        let stats = analyze_table(t, &def, sample_rows_for(target), fresh_seed(&def))?;
        t.set_table_statistics(table, stats.encode())?;
        Ok((def, stats.reltuples))
    };
    let (def, rows) = run(&mut t).map_err(|e| e.message)?;
    t.commit().map_err(|e| e.to_string())?;
    engine.record_analyze(&def, rows as u64, true);
    Ok(())
}

/// Gathers `def`'s statistics as `t` sees the table, from a sample of at most
/// `sample_rows` rows drawn with `seed`.
pub(crate) fn analyze_table(
    t: &mut Transaction,
    def: &TableDef,
    sample_rows: usize,
    seed: u64,
) -> SqlResult<TableStatistics> {
    let sample = t.sample_rows(def, sample_rows, seed)?;
    let ncols = def.columns.len();
    let mut totals: Vec<ColumnTotals> = (0..ncols).map(|_| ColumnTotals::default()).collect();
    for row in &sample.rows {
        for (c, d) in totals.iter_mut().zip(row) {
            c.add(d);
        }
    }
    let sampled = sample.rows.len() as u64;
    let total_rows = sample.rows_estimate;
    let mut columns = Vec::with_capacity(ncols);
    for (i, (col, c)) in def.columns.iter().zip(&totals).enumerate() {
        let non_null = sampled - c.nulls;
        let null_frac = if sampled == 0 {
            0.0
        } else {
            c.nulls as f64 / sampled as f64
        };
        let n_distinct = distinct_estimate(
            sample.rows.iter().map(|r| KeyPart::of(&r[i])),
            total_rows,
            null_frac,
        );
        let (min, max) = if c.unordered {
            (None, None)
        } else {
            (
                c.min.as_ref().and_then(crate::value::format_text),
                c.max.as_ref().and_then(crate::value::format_text),
            )
        };
        columns.push(ColumnStatistics {
            name: col.name.clone(),
            null_frac,
            n_distinct,
            // An all-NULL column: its type's size, 0 for a variable-length one
            // (PostgreSQL's rule).
            avg_width: c
                .width
                .checked_div(non_null)
                .map_or_else(|| type_width(col.ty), |w| w as i32),
            min,
            max,
        });
    }
    Ok(TableStatistics {
        reltuples: total_rows,
        relpages: sample.blocks,
        columns,
    })
}

/// The size of a fixed-width type, 0 for a variable-length one.
fn type_width(ty: walrus_engine::access::datum::TypeId) -> i32 {
    use walrus_engine::access::datum::TypeId as T;
    match ty {
        T::Bool => 1,
        T::Int2 => 2,
        T::Int4 | T::Date => 4,
        T::Int8 | T::Float8 | T::Timestamp | T::TimestampTz | T::Time => 8,
        T::Uuid | T::Interval => 16,
        _ => 0,
    }
}

/// A variable-length value's bytes with PostgreSQL's length header (1 byte up to 126
/// bytes of content, 4 beyond), as `avg_width` counts them.
fn varlena(len: usize) -> u64 {
    len as u64 + if len < 127 { 1 } else { 4 }
}

/// About the bytes a value takes (`pg_stats.avg_width`): its type's size, or its
/// content's for variable-length ones.
fn value_width(d: &Datum) -> u64 {
    match d {
        Datum::Null => 0,
        Datum::Bool(_) => 1,
        Datum::Int2(_) => 2,
        Datum::Int4(_) | Datum::Date(_) => 4,
        Datum::Text(s) | Datum::Numeric(s) | Datum::Json(s) | Datum::Jsonb(s) => varlena(s.len()),
        Datum::Bytea(b) => varlena(b.len()),
        Datum::Uuid(_) | Datum::Interval(_) => 16,
        Datum::TimeTz(..) => 12,
        Datum::Reg(_) => 4,
        Datum::Array(a) => 16 + a.items.iter().map(value_width).sum::<u64>(),
        _ => 8,
    }
}

/// The distinct count in PostgreSQL's convention from a sample of one column's keys
/// (PostgreSQL's rules in `compute_scalar_stats`): no value seen twice, a unique column
/// (minus the non-null share); every value seen at least twice, just those values;
/// otherwise Duj1, `n·d / (n − f1 + f1·n/N)` with `n` sampled non-null values, `d`
/// distinct among them, `f1` seen once, `N` the table's non-null rows, kept within
/// `[d, N]` (equal to `d` when the sample is the whole table). Stored as minus a
/// fraction of the rows when above a tenth of them, so it scales as the table grows.
pub(crate) fn distinct_estimate(
    sample: impl Iterator<Item = KeyPart>,
    rows: f64,
    null_frac: f64,
) -> f64 {
    let mut counts: HashMap<KeyPart, u64> = HashMap::new();
    let mut sampled = 0u64;
    for k in sample {
        if k == KeyPart::Null {
            continue;
        }
        sampled += 1;
        *counts.entry(k).or_default() += 1;
    }
    if sampled == 0 {
        return 0.0;
    }
    let d = counts.len() as f64;
    let f1 = counts.values().filter(|&&n| n == 1).count() as f64;
    let n = sampled as f64;
    if f1 == d {
        // No value repeated: a unique column.
        return -(1.0 - null_frac);
    }
    let estimate = if f1 == 0.0 {
        // Every sampled value repeated: assume the column has just these.
        d
    } else {
        let non_null_rows = (rows * (1.0 - null_frac)).max(n);
        let est = n * d / (n - f1 + f1 * n / non_null_rows);
        est.clamp(d, non_null_rows).round()
    };
    if estimate > 0.1 * rows {
        -(estimate / rows)
    } else {
        estimate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(v: &[i64]) -> Vec<KeyPart> {
        v.iter().map(|&x| KeyPart::Int(x)).collect()
    }

    #[test]
    fn whole_table_counts_exactly() {
        // 1000 rows, 5 values: a count.
        let k: Vec<i64> = (0..1000).map(|i| i % 5).collect();
        assert_eq!(distinct_estimate(keys(&k).into_iter(), 1000.0, 0.0), 5.0);
        // Every value distinct: -1.
        let k: Vec<i64> = (0..1000).collect();
        assert_eq!(distinct_estimate(keys(&k).into_iter(), 1000.0, 0.0), -1.0);
        // Half as many values as rows: a fraction.
        let k: Vec<i64> = (0..1000).map(|i| i / 2).collect();
        assert_eq!(distinct_estimate(keys(&k).into_iter(), 1000.0, 0.0), -0.5);
    }

    #[test]
    fn sampled_column_is_extrapolated() {
        // A sample of 1000 rows of a 100,000-row table with 10 values: few values,
        // every one repeated: the estimate stays 10.
        let k: Vec<i64> = (0..1000).map(|i| i % 10).collect();
        assert_eq!(
            distinct_estimate(keys(&k).into_iter(), 100_000.0, 0.0),
            10.0
        );
        // All distinct in the sample: unique.
        let k: Vec<i64> = (0..1000).collect();
        assert_eq!(
            distinct_estimate(keys(&k).into_iter(), 100_000.0, 0.0),
            -1.0
        );
        // Mostly pairs with some singletons: more than seen, at most the rows.
        let k: Vec<i64> = (0..1000).map(|i| if i < 800 { i / 2 } else { i }).collect();
        let est = distinct_estimate(keys(&k).into_iter(), 100_000.0, 0.0);
        let values = if est < 0.0 { -est * 100_000.0 } else { est };
        assert!(values > 600.0 && values <= 100_000.0, "{est}");
    }

    #[test]
    fn nulls_are_not_values() {
        let mut k = vec![KeyPart::Null; 10];
        k.extend(keys(&[1, 1, 2, 2]));
        // Two values in 14 rows: above a tenth of the rows, so a fraction.
        assert_eq!(
            distinct_estimate(k.clone().into_iter(), 14.0, 10.0 / 14.0),
            -(2.0 / 14.0)
        );
        let mut k = vec![KeyPart::Null; 100];
        k.extend(keys(&[1, 1, 2, 2]));
        assert_eq!(
            distinct_estimate(k.clone().into_iter(), 104.0, 100.0 / 104.0),
            2.0
        );
        assert_eq!(
            distinct_estimate(vec![KeyPart::Null; 3].into_iter(), 3.0, 1.0),
            0.0
        );
    }
}
