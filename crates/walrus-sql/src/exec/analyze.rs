//! ANALYZE: one sequential scan of the table counts its rows and, per column, its
//! NULLs, value widths, minimum and maximum exactly; distinct counts come from a
//! uniform sample of at most [`SAMPLE_ROWS`] rows (reservoir sampling over the scan,
//! PostgreSQL's 300 × default_statistics_target) with PostgreSQL's estimator (Haas and
//! Stokes' Duj1) when the sample is not the whole table. Unlike PostgreSQL, which reads
//! only the sampled pages, the whole table is read.

use std::collections::HashMap;

use walrus_engine::access::datum::Datum;
use walrus_engine::catalog::TableDef;
use walrus_engine::engine::Transaction;

use super::KeyPart;
use crate::error::SqlResult;
use crate::expr::compare_values;
use crate::stats::{ColumnStatistics, TableStatistics};

/// Rows kept in the distinct-count sample.
pub(crate) const SAMPLE_ROWS: usize = 30_000;

/// Per-column running totals of the scan.
#[derive(Default)]
struct ColumnTotals {
    nulls: u64,
    width: u64,
    min: Option<Datum>,
    max: Option<Datum>,
    /// Set when two values did not compare (a type without an order): no min/max.
    unordered: bool,
}

/// A small deterministic generator for the reservoir (xorshift64*): the sample need not
/// be unpredictable, only uniform.
struct Xorshift(u64);

impl Xorshift {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n.max(1)
    }
}

/// ANALYZE of `tables` (every user table when empty): each one's statistics gathered
/// and stored in the catalog by the statement's transaction (so they are durable once
/// it commits, and gone if it rolls back).
pub(crate) fn analyze(env: &mut dyn super::Env, tables: &[String]) -> SqlResult<()> {
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
        let stats = analyze_table(env.txn(), &def)?;
        env.txn().set_table_statistics(&def.name, stats.encode())?;
    }
    Ok(())
}

/// Gathers `def`'s statistics as `t` sees the table.
pub(crate) fn analyze_table(t: &mut Transaction, def: &TableDef) -> SqlResult<TableStatistics> {
    let ncols = def.columns.len();
    let mut totals: Vec<ColumnTotals> = (0..ncols).map(|_| ColumnTotals::default()).collect();
    let mut sample: Vec<Vec<KeyPart>> = Vec::new();
    let mut rows = 0u64;
    let mut rng = Xorshift(0x9E37_79B9_7F4A_7C15);
    t.scan(def, |_, row| {
        rows += 1;
        for (c, d) in totals.iter_mut().zip(&row) {
            if d.is_null() {
                c.nulls += 1;
                continue;
            }
            c.width += value_width(d);
            if c.unordered {
                continue;
            }
            let lower = match &c.min {
                None => true,
                Some(m) => match compare_values(d, m) {
                    Ok(o) => o.is_lt(),
                    Err(_) => {
                        c.unordered = true;
                        false
                    }
                },
            };
            if lower {
                c.min = Some(d.clone());
            }
            let higher = match &c.max {
                None => true,
                Some(m) => match compare_values(d, m) {
                    Ok(o) => o.is_gt(),
                    Err(_) => {
                        c.unordered = true;
                        false
                    }
                },
            };
            if higher {
                c.max = Some(d.clone());
            }
        }
        let keys = || row.iter().map(KeyPart::of).collect::<Vec<_>>();
        if sample.len() < SAMPLE_ROWS {
            sample.push(keys());
        } else {
            let slot = rng.below(rows) as usize;
            if slot < SAMPLE_ROWS {
                sample[slot] = keys();
            }
        }
        Ok(true)
    })?;
    let relpages = t.table_pages(def)?;
    let total = rows as f64;
    let mut columns = Vec::with_capacity(ncols);
    for (i, (col, c)) in def.columns.iter().zip(&totals).enumerate() {
        let non_null = rows - c.nulls;
        let null_frac = if rows == 0 {
            0.0
        } else {
            c.nulls as f64 / total
        };
        let n_distinct = distinct_estimate(sample.iter().map(|r| &r[i]), total, null_frac);
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
        reltuples: total,
        relpages,
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

/// The distinct count in PostgreSQL's convention from a sample of one column's keys:
/// exact when the sample is the table; otherwise Duj1, `n·d / (n − f1 + f1·n/N)` with
/// `n` sampled non-null values, `d` distinct among them, `f1` seen once, `N` rows;
/// stored as minus a fraction of the rows when above a tenth of them (or every value
/// distinct), so it scales as the table grows.
pub(crate) fn distinct_estimate<'a>(
    sample: impl Iterator<Item = &'a KeyPart>,
    rows: f64,
    null_frac: f64,
) -> f64 {
    let mut counts: HashMap<&KeyPart, u64> = HashMap::new();
    let mut sampled = 0u64;
    let mut sample_rows = 0u64;
    for k in sample {
        sample_rows += 1;
        if *k == KeyPart::Null {
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
    let whole_table = sample_rows as f64 >= rows;
    if f1 == n && !whole_table || (whole_table && d == n) {
        // Every sampled value distinct: a unique column.
        return -(1.0 - null_frac);
    }
    let estimate = if whole_table {
        d
    } else {
        let non_null_rows = rows * (1.0 - null_frac);
        let est = n * d / (n - f1 + f1 * n / non_null_rows.max(n));
        est.clamp(d, non_null_rows.max(d))
    };
    if estimate > 0.1 * rows {
        -(estimate / rows)
    } else {
        estimate.round()
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
        assert_eq!(distinct_estimate(keys(&k).iter(), 1000.0, 0.0), 5.0);
        // Every value distinct: -1.
        let k: Vec<i64> = (0..1000).collect();
        assert_eq!(distinct_estimate(keys(&k).iter(), 1000.0, 0.0), -1.0);
        // Half as many values as rows: a fraction.
        let k: Vec<i64> = (0..1000).map(|i| i / 2).collect();
        assert_eq!(distinct_estimate(keys(&k).iter(), 1000.0, 0.0), -0.5);
    }

    #[test]
    fn sampled_column_is_extrapolated() {
        // A sample of 1000 rows of a 100,000-row table with 10 values: few values,
        // every one repeated: the estimate stays 10.
        let k: Vec<i64> = (0..1000).map(|i| i % 10).collect();
        assert_eq!(distinct_estimate(keys(&k).iter(), 100_000.0, 0.0), 10.0);
        // All distinct in the sample: unique.
        let k: Vec<i64> = (0..1000).collect();
        assert_eq!(distinct_estimate(keys(&k).iter(), 100_000.0, 0.0), -1.0);
        // Mostly pairs with some singletons: more than seen, at most the rows.
        let k: Vec<i64> = (0..1000).map(|i| if i < 800 { i / 2 } else { i }).collect();
        let est = distinct_estimate(keys(&k).iter(), 100_000.0, 0.0);
        let values = if est < 0.0 { -est * 100_000.0 } else { est };
        assert!(values > 600.0 && values <= 100_000.0, "{est}");
    }

    #[test]
    fn nulls_are_not_values() {
        let mut k = vec![KeyPart::Null; 10];
        k.extend(keys(&[1, 1, 2, 2]));
        // Two values in 14 rows: above a tenth of the rows, so a fraction.
        assert_eq!(
            distinct_estimate(k.iter(), 14.0, 10.0 / 14.0),
            -(2.0 / 14.0)
        );
        let mut k = vec![KeyPart::Null; 100];
        k.extend(keys(&[1, 1, 2, 2]));
        assert_eq!(distinct_estimate(k.iter(), 104.0, 100.0 / 104.0), 2.0);
        assert_eq!(
            distinct_estimate(vec![KeyPart::Null; 3].iter(), 3.0, 1.0),
            0.0
        );
    }
}
