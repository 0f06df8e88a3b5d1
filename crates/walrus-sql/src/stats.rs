//! Planner statistics (ANALYZE): per table its row and page count, per column the null
//! fraction, distinct count (PostgreSQL's `n_distinct` convention: a negative value is
//! minus a fraction of the rows, so it scales with the table), average width and
//! minimum / maximum. Stored durably as the table's statistics row in the engine's
//! catalog (`walrus_engine::catalog::TableStatsEntry`, PostgreSQL's `pg_statistic`),
//! whose data is this module's text encoding; gathered by `exec/analyze.rs`, shown by
//! `pg_stats` / `pg_class`, read by the planner's estimates (`plan/estimate.rs`).

use walrus_engine::catalog::{CatalogView, TableDef};

/// One table's statistics from its last ANALYZE.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TableStatistics {
    /// Live rows seen (`pg_class.reltuples`).
    pub reltuples: f64,
    /// Heap pages (`pg_class.relpages`).
    pub relpages: u32,
    /// One per table column, in column order.
    pub columns: Vec<ColumnStatistics>,
}

/// One column's statistics (a row of `pg_stats`).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ColumnStatistics {
    pub name: String,
    pub null_frac: f64,
    /// Distinct non-null values: positive a count, negative minus a fraction of the rows
    /// (-1: every row distinct).
    pub n_distinct: f64,
    /// Average width in bytes of the non-null values.
    pub avg_width: i32,
    /// Smallest and largest non-null value in text form (`None`: no value, or a type
    /// without an order).
    pub min: Option<String>,
    pub max: Option<String>,
}

impl ColumnStatistics {
    /// The distinct count as a number of values for a table of `rows` rows.
    pub(crate) fn distinct_values(&self, rows: f64) -> f64 {
        if self.n_distinct < 0.0 {
            (-self.n_distinct * rows).max(1.0)
        } else {
            self.n_distinct.max(1.0)
        }
    }
}

const FORMAT_VERSION: &str = "1";

/// Appends one length-prefixed field (`len:text`), so any text round-trips.
fn field(out: &mut String, s: &str) {
    out.push_str(&s.len().to_string());
    out.push(':');
    out.push_str(s);
}

fn opt_field(out: &mut String, s: Option<&str>) {
    match s {
        None => field(out, "N"),
        Some(v) => field(out, &format!("S{v}")),
    }
}

/// Reads the fields written by [`field`].
struct Fields<'a> {
    rest: &'a str,
}

impl<'a> Fields<'a> {
    fn take(&mut self) -> Option<&'a str> {
        let colon = self.rest.find(':')?;
        let len: usize = self.rest[..colon].parse().ok()?;
        let start = colon + 1;
        let v = self.rest.get(start..start + len)?;
        self.rest = &self.rest[start + len..];
        Some(v)
    }
    fn num<T: std::str::FromStr>(&mut self) -> Option<T> {
        self.take()?.parse().ok()
    }
    fn opt(&mut self) -> Option<Option<String>> {
        let v = self.take()?;
        match v.strip_prefix('S') {
            Some(s) => Some(Some(s.to_string())),
            None if v == "N" => Some(None),
            None => None,
        }
    }
}

impl TableStatistics {
    /// The catalog row's data.
    pub(crate) fn encode(&self) -> String {
        let mut out = String::new();
        field(&mut out, FORMAT_VERSION);
        field(&mut out, &self.reltuples.to_string());
        field(&mut out, &self.relpages.to_string());
        field(&mut out, &self.columns.len().to_string());
        for c in &self.columns {
            field(&mut out, &c.name);
            field(&mut out, &c.null_frac.to_string());
            field(&mut out, &c.n_distinct.to_string());
            field(&mut out, &c.avg_width.to_string());
            opt_field(&mut out, c.min.as_deref());
            opt_field(&mut out, c.max.as_deref());
        }
        out
    }

    /// Reads [`TableStatistics::encode`]'s text; `None` when it is not that (a newer
    /// format): the table then counts as never analyzed.
    pub(crate) fn decode(data: &str) -> Option<TableStatistics> {
        let mut f = Fields { rest: data };
        if f.take()? != FORMAT_VERSION {
            return None;
        }
        let reltuples = f.num()?;
        let relpages = f.num()?;
        let n: usize = f.num()?;
        let mut columns = Vec::with_capacity(n.min(4096));
        for _ in 0..n {
            columns.push(ColumnStatistics {
                name: f.take()?.to_string(),
                null_frac: f.num()?,
                n_distinct: f.num()?,
                avg_width: f.num()?,
                min: f.opt()?,
                max: f.opt()?,
            });
        }
        Some(TableStatistics {
            reltuples,
            relpages,
            columns,
        })
    }

    /// The statistics of `def` in `view`, if it was analyzed since its relation file
    /// was made and its columns are still the ones analyzed.
    pub(crate) fn of(view: &CatalogView, def: &TableDef) -> Option<TableStatistics> {
        let entry = view.statistics.get(&def.name)?;
        let s = TableStatistics::decode(&entry.data)?;
        let same_columns = s.columns.len() == def.columns.len()
            && s.columns
                .iter()
                .zip(&def.columns)
                .all(|(a, b)| a.name == b.name);
        same_columns.then_some(s)
    }

    /// A column's statistics by name.
    pub(crate) fn column(&self, name: &str) -> Option<&ColumnStatistics> {
        self.columns.iter().find(|c| c.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_round_trips_any_text() {
        let s = TableStatistics {
            reltuples: 1234.0,
            relpages: 7,
            columns: vec![
                ColumnStatistics {
                    name: "a:b".into(),
                    null_frac: 0.25,
                    n_distinct: -1.0,
                    avg_width: 4,
                    min: Some("1:2 N".into()),
                    max: Some(String::new()),
                },
                ColumnStatistics {
                    name: "c".into(),
                    null_frac: 1.0,
                    n_distinct: 0.0,
                    avg_width: 0,
                    min: None,
                    max: None,
                },
            ],
        };
        assert_eq!(TableStatistics::decode(&s.encode()), Some(s));
        assert_eq!(TableStatistics::decode("1:2"), None);
        assert_eq!(TableStatistics::decode("garbage"), None);
    }

    #[test]
    fn negative_distinct_scales_with_rows() {
        let c = ColumnStatistics {
            name: "x".into(),
            null_frac: 0.0,
            n_distinct: -0.5,
            avg_width: 4,
            min: None,
            max: None,
        };
        assert_eq!(c.distinct_values(1000.0), 500.0);
        let c = ColumnStatistics {
            n_distinct: 10.0,
            ..c
        };
        assert_eq!(c.distinct_values(1000.0), 10.0);
    }
}
