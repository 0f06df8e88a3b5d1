//! One measured pgbench run against a running server, and everything collected around it:
//! statistics views before and after (each may be missing on walrus and is then "n/a"),
//! the server's processes sampled from `/proc`, and its checkpoint log lines.

use std::path::Path;

use super::pgbench::{self, Options, Outcome};
use super::process::{instance_counters, Counters, ProcTotals};
use super::server::Server;
use super::Tools;

/// What one run measured. Optional fields come from SQL that a server may not support.
#[derive(Clone, Debug, Default)]
pub struct Measurement {
    pub bench: Outcome,
    /// `pg_wal_lsn_diff` of `pg_current_wal_lsn()` after and before the run.
    pub wal_bytes: Option<f64>,
    /// Deltas of `pg_stat_wal`.
    pub wal_records: Option<f64>,
    pub wal_fpi: Option<f64>,
    /// Delta of `pg_stat_bgwriter` buffers_checkpoint + buffers_clean + buffers_backend.
    pub buffers_written: Option<f64>,
    pub proc: ProcTotals,
    /// Durations (s) of the checkpoints that completed during the run (server log).
    pub checkpoints: Vec<f64>,
}

/// Values read from the statistics views at one moment.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub lsn: Option<String>,
    stat_wal: Option<Vec<f64>>,
    bgwriter: Option<Vec<f64>>,
}

fn numbers(row: &str) -> Option<Vec<f64>> {
    row.split('|').map(|v| v.trim().parse().ok()).collect()
}

pub fn snapshot(s: &Server) -> Snapshot {
    Snapshot {
        lsn: s.query("select pg_current_wal_lsn()").ok(),
        stat_wal: s
            .query("select wal_records, wal_fpi, wal_bytes from pg_stat_wal")
            .ok()
            .and_then(|r| numbers(&r)),
        bgwriter: s
            .query(
                "select buffers_checkpoint, buffers_clean, buffers_backend from pg_stat_bgwriter",
            )
            .ok()
            .and_then(|r| numbers(&r)),
    }
}

/// `pg_wal_lsn_diff(after, before)` on the server itself.
pub fn lsn_diff(s: &Server, after: &Option<String>, before: &Option<String>) -> Option<f64> {
    let (a, b) = (after.as_ref()?, before.as_ref()?);
    s.query(&format!("select pg_wal_lsn_diff('{a}', '{b}')"))
        .ok()?
        .parse()
        .ok()
}

/// Collects around a run: take [`Probe::begin`] before starting the load and
/// [`Probe::end`] after it.
pub struct Probe {
    before: Snapshot,
    log_from: u64,
    counters: Option<(u32, Counters)>,
}

impl Probe {
    pub fn begin(s: &Server) -> Probe {
        let before = snapshot(s);
        Probe {
            before,
            log_from: s.log_len(),
            counters: s.pgid().map(|p| (p, instance_counters(p))),
        }
    }

    pub fn end(self, s: &Server, bench: Outcome) -> Measurement {
        let proc = self
            .counters
            .map(|(pid, before)| instance_counters(pid).since(&before))
            .unwrap_or_default();
        let after = snapshot(s);
        let delta = |a: &Option<Vec<f64>>, b: &Option<Vec<f64>>, idx: &[usize]| -> Option<f64> {
            let (a, b) = (a.as_ref()?, b.as_ref()?);
            Some(idx.iter().map(|&i| a[i] - b[i]).sum())
        };
        Measurement {
            bench,
            wal_bytes: lsn_diff(s, &after.lsn, &self.before.lsn),
            wal_records: delta(&after.stat_wal, &self.before.stat_wal, &[0]),
            wal_fpi: delta(&after.stat_wal, &self.before.stat_wal, &[1]),
            buffers_written: delta(&after.bgwriter, &self.before.bgwriter, &[0, 1, 2]),
            proc,
            checkpoints: s.checkpoints_since(self.log_from),
        }
    }
}

/// Warm-up, `CHECKPOINT` (so every measured run starts just after a checkpoint, on both
/// systems alike), then the measured run.
pub fn warm_and_measure(
    tools: &Tools,
    s: &Server,
    o: &Options,
    warmup_seconds: u64,
    dir: &Path,
) -> anyhow::Result<Measurement> {
    if warmup_seconds > 0 {
        let w = Options {
            seconds: warmup_seconds,
            detailed: false,
            ..o.clone()
        };
        pgbench::run(tools, s.port, &w, dir)?;
    }
    s.query("checkpoint")?;
    let probe = Probe::begin(s);
    let bench = pgbench::run(tools, s.port, o, dir)?;
    Ok(probe.end(s, bench))
}
