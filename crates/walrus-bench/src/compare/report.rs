//! Markdown: medians with min/max over repetitions, and walrus / PostgreSQL ratios.
//! A value a server could not report is "n/a", never a zero.

use super::measure::Measurement;

/// Median, minimum and maximum of the repetitions of one metric.
#[derive(Clone, Copy, Debug)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub count: usize,
}

impl Spread {
    /// `None` when any repetition lacks the value (a partial median would mislead).
    pub fn of(values: &[Option<f64>]) -> Option<Spread> {
        let mut v: Vec<f64> = values.iter().copied().collect::<Option<Vec<f64>>>()?;
        if v.is_empty() || v.iter().any(|x| !x.is_finite()) {
            return None;
        }
        v.sort_by(|a, b| a.total_cmp(b));
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Spread {
            median,
            min: v[0],
            max: v[n - 1],
            count: n,
        })
    }

    pub fn show(&self, decimals: usize) -> String {
        if self.count <= 1 || self.min == self.max {
            format!("{:.*}", decimals, self.median)
        } else {
            format!(
                "{:.*} ({:.*}–{:.*})",
                decimals, self.median, decimals, self.min, decimals, self.max
            )
        }
    }
}

pub fn show(s: Option<Spread>, decimals: usize) -> String {
    s.map(|s| s.show(decimals)).unwrap_or_else(|| "n/a".into())
}

pub fn ratio(num: Option<Spread>, den: Option<Spread>) -> String {
    match (num, den) {
        (Some(a), Some(b)) if b.median != 0.0 => format!("{:.2}×", a.median / b.median),
        _ => "—".into(),
    }
}

/// A metric extracted from one run.
pub struct Metric {
    pub name: &'static str,
    pub decimals: usize,
    pub get: fn(&Measurement) -> Option<f64>,
}

fn per_txn(m: &Measurement, v: Option<f64>) -> Option<f64> {
    let t = m.bench.transactions as f64;
    v.filter(|_| t > 0.0).map(|v| v / t)
}

/// The metrics every load scenario reports, in table order.
pub const LOAD_METRICS: &[Metric] = &[
    Metric {
        name: "TPS",
        decimals: 0,
        get: |m| Some(m.bench.tps),
    },
    Metric {
        name: "latency average (ms)",
        decimals: 2,
        get: |m| Some(m.bench.latency_avg_ms),
    },
    Metric {
        name: "latency p50 (ms)",
        decimals: 2,
        get: |m| m.bench.latency_p50_ms,
    },
    Metric {
        name: "latency p99 (ms)",
        decimals: 2,
        get: |m| m.bench.latency_p99_ms,
    },
    Metric {
        name: "lowest 1-s TPS",
        decimals: 0,
        get: |m| lowest_second(&m.bench.per_second_tps),
    },
    Metric {
        name: "WAL bytes / transaction (LSN diff)",
        decimals: 0,
        get: |m| per_txn(m, m.wal_bytes),
    },
    Metric {
        name: "WAL records / transaction (pg_stat_wal)",
        decimals: 2,
        get: |m| per_txn(m, m.wal_records),
    },
    Metric {
        name: "full-page images (pg_stat_wal.wal_fpi)",
        decimals: 0,
        get: |m| m.wal_fpi,
    },
    Metric {
        name: "bytes the disk wrote / transaction (/sys/block, whole device)",
        decimals: 0,
        get: |m| per_txn(m, Some(m.proc.disk_bytes as f64)),
    },
    Metric {
        name: "bytes written / transaction, all files (/proc io, folio-inflated)",
        decimals: 0,
        get: |m| per_txn(m, Some(m.proc.write_bytes as f64)),
    },
    Metric {
        name: "data pages written (pg_stat_bgwriter)",
        decimals: 0,
        get: |m| m.buffers_written,
    },
    Metric {
        name: "checkpoints completed (server log)",
        decimals: 0,
        get: |m| Some(m.checkpoints.len() as f64),
    },
    Metric {
        name: "checkpoint duration, mean (s)",
        decimals: 2,
        get: |m| {
            (!m.checkpoints.is_empty())
                .then(|| m.checkpoints.iter().sum::<f64>() / m.checkpoints.len() as f64)
        },
    },
    Metric {
        name: "server CPU µs / transaction",
        decimals: 0,
        get: |m| per_txn(m, Some(m.proc.cpu_seconds * 1e6)),
    },
];

/// The lowest per-second TPS, ignoring the first and last second (connection set-up and
/// the partial last interval).
pub fn lowest_second(per_sec: &[f64]) -> Option<f64> {
    if per_sec.len() < 3 {
        return None;
    }
    per_sec[1..per_sec.len() - 1]
        .iter()
        .copied()
        .min_by(|a, b| a.total_cmp(b))
}

pub fn spread(runs: &[Measurement], m: &Metric) -> Option<Spread> {
    Spread::of(&runs.iter().map(|r| (m.get)(r)).collect::<Vec<_>>())
}

/// A Markdown table.
pub fn table(header: &[String], rows: &[Vec<String>]) -> String {
    let mut s = format!("| {} |\n", header.join(" | "));
    s.push_str(&format!("|{}\n", "---|".repeat(header.len())));
    for r in rows {
        s.push_str(&format!("| {} |\n", r.join(" | ")));
    }
    s
}

/// The standard PostgreSQL / walrus / ratio table for one pair of configurations.
pub fn pair_table(pg_label: &str, pg: &[Measurement], w_label: &str, w: &[Measurement]) -> String {
    named_pair_table(("PostgreSQL", pg_label, pg), ("walrus", w_label, w))
}

/// Two configurations side by side, each `(system, label, runs)`; the ratio is the
/// second over the first (walrus against walrus in the dwb scenario).
pub fn named_pair_table(
    (a_sys, a_label, a_runs): (&str, &str, &[Measurement]),
    (b_sys, b_label, b_runs): (&str, &str, &[Measurement]),
) -> String {
    let (pg, w) = (a_runs, b_runs);
    let header = vec![
        "metric".to_string(),
        format!("{a_sys} ({a_label})"),
        format!("{b_sys} ({b_label})"),
        if a_sys == b_sys {
            format!("{b_label} / {a_label}")
        } else {
            format!("{b_sys} / {a_sys}")
        },
    ];
    let rows: Vec<Vec<String>> = LOAD_METRICS
        .iter()
        .map(|m| {
            let (a, b) = (spread(pg, m), spread(w, m));
            vec![
                m.name.to_string(),
                show(a, m.decimals),
                show(b, m.decimals),
                ratio(b, a),
            ]
        })
        .collect();
    table(&header, &rows)
}

/// The run whose TPS is the median one, for charts of a typical run.
pub fn median_run(runs: &[Measurement]) -> Option<&Measurement> {
    let mut idx: Vec<usize> = (0..runs.len()).collect();
    idx.sort_by(|&a, &b| runs[a].bench.tps.total_cmp(&runs[b].bench.tps));
    idx.get(idx.len() / 2).map(|&i| &runs[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_is_median_min_max_and_missing_is_na() {
        let s = Spread::of(&[Some(3.0), Some(1.0), Some(2.0)]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        assert_eq!(s.show(0), "2 (1–3)");
        assert!(Spread::of(&[Some(1.0), None]).is_none());
        assert_eq!(show(None, 1), "n/a");
        let even = Spread::of(&[Some(1.0), Some(4.0)]).unwrap();
        assert_eq!(even.median, 2.5);
        assert_eq!(ratio(Some(even), Some(s)), "1.25×");
        assert_eq!(ratio(Some(even), None), "—");
    }
}
