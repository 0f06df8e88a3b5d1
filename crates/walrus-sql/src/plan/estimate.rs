//! Row estimates from ANALYZE's statistics (`crate::stats`): how many rows of a table a
//! WHERE clause keeps, PostgreSQL's way in miniature. `column = constant` keeps one
//! distinct value's share; a range on a numeric column its share of [min, max]
//! (values assumed uniform); `IS [NOT] NULL` the null fraction; AND multiplies, OR
//! adds less the overlap, NOT complements. Anything else takes PostgreSQL's defaults
//! (0.005 for an equality, 1/3 for an inequality, 1/2 otherwise).

use std::ops::Bound;

use sqlparser::ast::{self, Expr};
use walrus_engine::access::datum::Datum;
use walrus_engine::catalog::TableDef;

use crate::expr::{eval, Scope};
use crate::names::ident;
use crate::stats::{ColumnStatistics, TableStatistics};

/// PostgreSQL's selectivity defaults (`selfuncs.h`).
const DEFAULT_EQ_SEL: f64 = 0.005;
const DEFAULT_INEQ_SEL: f64 = 1.0 / 3.0;
const DEFAULT_SEL: f64 = 0.5;

/// Estimates for one table's rows under its statistics.
pub(crate) struct Estimator<'a> {
    pub def: &'a TableDef,
    pub stats: &'a TableStatistics,
    pub params: &'a [Datum],
    pub now: i64,
    pub get: &'a dyn Fn(&str) -> Option<String>,
}

impl Estimator<'_> {
    /// The table's rows (ANALYZE's count).
    pub(crate) fn rows(&self) -> f64 {
        self.stats.reltuples
    }

    /// The estimated rows `filter` keeps (at least one when the table has rows, as
    /// PostgreSQL clamps).
    pub(crate) fn filtered_rows(&self, filter: Option<&Expr>) -> f64 {
        let sel = filter.map_or(1.0, |f| self.selectivity(f));
        let rows = self.rows() * sel;
        if self.rows() > 0.0 {
            rows.round().max(1.0)
        } else {
            0.0
        }
    }

    fn column(&self, e: &Expr) -> Option<&ColumnStatistics> {
        let name = match e {
            Expr::Identifier(i) => ident(i),
            Expr::CompoundIdentifier(ids) => ident(ids.last()?),
            Expr::Nested(x) => return self.column(x),
            _ => return None,
        };
        self.def.column_index(&name)?;
        self.stats.column(&name)
    }

    fn constant(&self, e: &Expr) -> Option<Datum> {
        let scope = Scope {
            columns: &[],
            row: None,
            params: self.params,
            now: self.now,
            setting: self.get,
            interrupt: None,
            frame: None,
            hooks: None,
        };
        eval(e, &scope).ok().filter(|d| !d.is_null())
    }

    /// The share of rows `e` keeps, in [0, 1].
    pub(crate) fn selectivity(&self, e: &Expr) -> f64 {
        use ast::BinaryOperator as Op;
        let s = match e {
            Expr::Nested(x) => self.selectivity(x),
            Expr::BinaryOp {
                left,
                op: Op::And,
                right,
            } => self.selectivity(left) * self.selectivity(right),
            Expr::BinaryOp {
                left,
                op: Op::Or,
                right,
            } => {
                let (a, b) = (self.selectivity(left), self.selectivity(right));
                a + b - a * b
            }
            Expr::UnaryOp {
                op: ast::UnaryOperator::Not,
                expr,
            } => 1.0 - self.selectivity(expr),
            Expr::IsNull(x) => self.column(x).map_or(DEFAULT_EQ_SEL, |c| c.null_frac),
            Expr::IsNotNull(x) => self
                .column(x)
                .map_or(1.0 - DEFAULT_EQ_SEL, |c| 1.0 - c.null_frac),
            Expr::Between {
                expr,
                negated,
                low,
                high,
            } => {
                let inside = match (self.column(expr), self.number(low), self.number(high)) {
                    (Some(c), Some(l), Some(h)) => {
                        range_fraction(c, Bound::Included(l), Bound::Included(h))
                    }
                    _ => None,
                }
                .unwrap_or(DEFAULT_EQ_SEL);
                if *negated {
                    1.0 - inside
                } else {
                    inside
                }
            }
            Expr::BinaryOp { left, op, right } => {
                let (col, other, op) = match (self.column(left), self.column(right)) {
                    (Some(c), None) => (Some(c), right, op.clone()),
                    (None, Some(c)) => (Some(c), left, flip(op)),
                    _ => (None, right, op.clone()),
                };
                match op {
                    Op::Eq => match col {
                        Some(c) if self.constant(other).is_some() => {
                            (1.0 - c.null_frac) / c.distinct_values(self.rows())
                        }
                        _ => DEFAULT_EQ_SEL,
                    },
                    Op::NotEq => match col {
                        Some(c) if self.constant(other).is_some() => {
                            (1.0 - c.null_frac) * (1.0 - 1.0 / c.distinct_values(self.rows()))
                        }
                        _ => 1.0 - DEFAULT_EQ_SEL,
                    },
                    Op::Lt | Op::LtEq | Op::Gt | Op::GtEq => {
                        let k = self.number(other);
                        let b = |inclusive: bool, v: f64| {
                            if inclusive {
                                Bound::Included(v)
                            } else {
                                Bound::Excluded(v)
                            }
                        };
                        match (col, k) {
                            (Some(c), Some(k)) => match op {
                                Op::Lt | Op::LtEq => {
                                    range_fraction(c, Bound::Unbounded, b(op == Op::LtEq, k))
                                }
                                _ => range_fraction(c, b(op == Op::GtEq, k), Bound::Unbounded),
                            },
                            _ => None,
                        }
                        .unwrap_or(DEFAULT_INEQ_SEL)
                    }
                    _ => DEFAULT_SEL,
                }
            }
            _ => DEFAULT_SEL,
        };
        s.clamp(0.0, 1.0)
    }

    fn number(&self, e: &Expr) -> Option<f64> {
        datum_number(&self.constant(e)?)
    }
}

fn flip(op: &ast::BinaryOperator) -> ast::BinaryOperator {
    use ast::BinaryOperator as Op;
    match op {
        Op::Lt => Op::Gt,
        Op::LtEq => Op::GtEq,
        Op::Gt => Op::Lt,
        Op::GtEq => Op::LtEq,
        other => other.clone(),
    }
}

fn datum_number(d: &Datum) -> Option<f64> {
    match d {
        Datum::Int2(v) => Some(*v as f64),
        Datum::Int4(v) => Some(*v as f64),
        Datum::Int8(v) => Some(*v as f64),
        Datum::Float8(v) if v.is_finite() => Some(*v),
        Datum::Numeric(t) => t.parse().ok(),
        _ => None,
    }
}

/// The share of a numeric column's rows between `lo` and `hi`, assuming its non-null
/// values spread evenly over [min, max]; `None` without a numeric min and max. Integer
/// columns count whole values (`between 1 and 1` is one value of `max - min + 1`).
pub(crate) fn range_fraction(c: &ColumnStatistics, lo: Bound<f64>, hi: Bound<f64>) -> Option<f64> {
    let min: f64 = c.min.as_deref()?.parse().ok()?;
    let max: f64 = c.max.as_deref()?.parse().ok()?;
    if !min.is_finite() || !max.is_finite() {
        return None;
    }
    let integral = min.fract() == 0.0 && max.fract() == 0.0;
    let (lo, hi) = if integral {
        // Whole values: an excluded bound moves in by one.
        let lo = match lo {
            Bound::Included(v) => v.ceil(),
            Bound::Excluded(v) => v.floor() + 1.0,
            Bound::Unbounded => min,
        };
        let hi = match hi {
            Bound::Included(v) => v.floor(),
            Bound::Excluded(v) => v.ceil() - 1.0,
            Bound::Unbounded => max,
        };
        (lo.max(min), hi.min(max) + 1.0)
    } else {
        let v = |b: Bound<f64>, d: f64| match b {
            Bound::Included(v) | Bound::Excluded(v) => v,
            Bound::Unbounded => d,
        };
        (v(lo, min).max(min), v(hi, max).min(max))
    };
    let width = if integral { max - min + 1.0 } else { max - min };
    let share = if width <= 0.0 {
        // One value: all or nothing.
        if hi >= lo {
            1.0
        } else {
            0.0
        }
    } else {
        ((hi - lo) / width).clamp(0.0, 1.0)
    };
    Some(share * (1.0 - c.null_frac))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(min: &str, max: &str, null_frac: f64) -> ColumnStatistics {
        ColumnStatistics {
            name: "a".into(),
            null_frac,
            n_distinct: -1.0,
            avg_width: 4,
            min: Some(min.into()),
            max: Some(max.into()),
        }
    }

    #[test]
    fn integer_ranges_count_whole_values() {
        let c = col("1", "100", 0.0);
        let f = |lo, hi| range_fraction(&c, lo, hi).unwrap();
        assert_eq!(f(Bound::Included(1.0), Bound::Included(10.0)), 0.1);
        assert_eq!(f(Bound::Excluded(0.0), Bound::Excluded(11.0)), 0.1);
        assert_eq!(f(Bound::Included(50.0), Bound::Included(50.0)), 0.01);
        assert_eq!(f(Bound::Unbounded, Bound::Unbounded), 1.0);
        assert_eq!(f(Bound::Included(200.0), Bound::Unbounded), 0.0);
        assert_eq!(f(Bound::Included(-5.0), Bound::Included(0.0)), 0.0);
        // Nulls are outside every range.
        let c = col("1", "100", 0.5);
        assert_eq!(
            range_fraction(&c, Bound::Included(1.0), Bound::Included(100.0)),
            Some(0.5)
        );
        // No order, no estimate.
        let mut c = col("a", "z", 0.0);
        assert_eq!(range_fraction(&c, Bound::Unbounded, Bound::Unbounded), None);
        c.min = None;
        assert_eq!(range_fraction(&c, Bound::Unbounded, Bound::Unbounded), None);
    }
}
