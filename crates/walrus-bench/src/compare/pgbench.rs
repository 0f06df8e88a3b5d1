//! Runs pgbench against one server and parses what it prints: the summary (TPS,
//! average latency, transactions) from stdout, per-second TPS from `-P 1` on stderr, and
//! latency percentiles from the per-transaction logs of `-l` (column 3, microseconds).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::process::{run_captured, ProcGuard};
use super::Tools;

/// What each client runs.
#[derive(Clone, Debug)]
pub enum Workload {
    /// pgbench's built-in TPC-B-like script.
    TpcbLike,
    /// A custom script file (`-f`).
    Script(PathBuf),
}

#[derive(Clone, Debug)]
pub struct Options {
    pub workload: Workload,
    pub clients: u32,
    pub seconds: u64,
    /// Per-second progress and per-transaction logs (off for warm-ups).
    pub detailed: bool,
}

#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub tps: f64,
    pub latency_avg_ms: f64,
    pub transactions: u64,
    pub failed: u64,
    pub per_second_tps: Vec<f64>,
    pub latency_p50_ms: Option<f64>,
    pub latency_p99_ms: Option<f64>,
}

/// `pgbench -i -s SCALE` into database `bench`.
pub fn initialize(tools: &Tools, port: u16, scale: u32) -> anyhow::Result<()> {
    let mut cmd = Command::new(&tools.pgbench);
    cmd.args(["-i", "-q", "-s", &scale.to_string()])
        .args(["-h", &tools.host(), "-p", &port.to_string(), "-U", "bench"])
        .arg("bench");
    let (status, out, err) = run_captured(
        "pgbench -i",
        &mut cmd,
        &tools.scratch,
        Duration::from_secs(1800),
    )?;
    if !status.success() {
        bail!("pgbench -i -s {scale} failed: {}{}", out.trim(), err.trim());
    }
    Ok(())
}

/// A pgbench run in progress.
pub struct Running {
    guard: ProcGuard,
    dir: PathBuf,
    pub started: Instant,
    seconds: u64,
}

pub fn spawn(tools: &Tools, port: u16, o: &Options, dir: &Path) -> anyhow::Result<Running> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)?;
    let threads = o.clients.min(2);
    let mut cmd = Command::new(&tools.pgbench);
    cmd.args(["-h", &tools.host(), "-p", &port.to_string(), "-U", "bench"])
        .args(["-M", "prepared", "-n"])
        .args(["-c", &o.clients.to_string(), "-j", &threads.to_string()])
        .args(["-T", &o.seconds.to_string()]);
    if let Workload::Script(path) = &o.workload {
        cmd.arg("-f").arg(path);
    }
    if o.detailed {
        cmd.args(["-P", "1", "-l"])
            .arg(format!("--log-prefix={}", dir.join("txlog").display()));
    }
    cmd.arg("bench")
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.join("stdout"))?)
        .stderr(std::fs::File::create(dir.join("stderr"))?);
    let guard = ProcGuard::spawn("pgbench", &mut cmd)?;
    Ok(Running {
        guard,
        dir: dir.to_path_buf(),
        started: Instant::now(),
        seconds: o.seconds,
    })
}

impl Running {
    /// Waits for pgbench to finish (its `-T` plus a grace period) and parses its output.
    pub fn finish(mut self) -> anyhow::Result<Outcome> {
        let limit = Duration::from_secs(self.seconds + 120);
        let status = match self.guard.wait_for(limit)? {
            Some(s) => s,
            None => bail!("pgbench did not finish within {} s", limit.as_secs()),
        };
        let out = std::fs::read_to_string(self.dir.join("stdout")).unwrap_or_default();
        let err = std::fs::read_to_string(self.dir.join("stderr")).unwrap_or_default();
        if !status.success() {
            bail!(
                "pgbench failed ({status}): {}\n{}",
                out.trim(),
                tail_lines(&err, 10)
            );
        }
        let mut o =
            parse_summary(&out).with_context(|| format!("unexpected pgbench output:\n{out}"))?;
        o.per_second_tps = parse_progress(&err);
        let mut lat = read_latencies(&self.dir);
        if !lat.is_empty() {
            lat.sort_by(|a, b| a.total_cmp(b));
            o.latency_p50_ms = Some(percentile(&lat, 0.50));
            o.latency_p99_ms = Some(percentile(&lat, 0.99));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        Ok(o)
    }

    /// Kills pgbench (used when the server under it was killed) and returns the per-second
    /// TPS it printed so far.
    pub fn abort(mut self) -> Vec<f64> {
        self.guard.kill();
        let err = std::fs::read_to_string(self.dir.join("stderr")).unwrap_or_default();
        let _ = std::fs::remove_dir_all(&self.dir);
        parse_progress(&err)
    }
}

pub fn run(tools: &Tools, port: u16, o: &Options, dir: &Path) -> anyhow::Result<Outcome> {
    spawn(tools, port, o, dir)?.finish()
}

fn tail_lines(s: &str, n: usize) -> String {
    let l: Vec<&str> = s.lines().collect();
    l[l.len().saturating_sub(n)..].join("\n")
}

fn number_after<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix(key))
        .and_then(|r| r.split_whitespace().next())
}

/// The summary pgbench 15 prints on stdout.
/// A run that completed no transaction has no `tps =` and no latency lines: its TPS is 0
/// and its latency NaN (shown as n/a).
pub fn parse_summary(out: &str) -> Option<Outcome> {
    let transactions: u64 = number_after(out, "number of transactions actually processed: ")?
        .parse()
        .ok()?;
    let tps = match number_after(out, "tps = ") {
        Some(v) => v.parse().ok()?,
        None if transactions == 0 => 0.0,
        None => return None,
    };
    Some(Outcome {
        tps,
        latency_avg_ms: number_after(out, "latency average = ")
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::NAN),
        transactions,
        failed: number_after(out, "number of failed transactions: ")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        ..Outcome::default()
    })
}

/// `progress: 3.0 s, 2210.9 tps, lat 7.182 ms stddev 3.061, 0 failed` lines.
pub fn parse_progress(err: &str) -> Vec<f64> {
    err.lines()
        .filter_map(|l| l.strip_prefix("progress: "))
        .filter_map(|l| l.split(", ").nth(1))
        .filter_map(|f| f.strip_suffix(" tps"))
        .filter_map(|v| v.parse().ok())
        .collect()
}

/// Latencies (ms) of every transaction in the `-l` logs (`txlog.PID`, `txlog.PID.N`):
/// `client_id transaction_no time_us script_no time_epoch time_us_part ...`.
fn read_latencies(dir: &Path) -> Vec<f64> {
    let mut lat = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return lat;
    };
    for e in rd.flatten() {
        if !e.file_name().to_string_lossy().starts_with("txlog") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(e.path()) else {
            continue;
        };
        lat.extend(
            text.lines()
                .filter_map(|l| l.split_whitespace().nth(2))
                .filter_map(|v| v.parse::<f64>().ok())
                .map(|us| us / 1000.0),
        );
    }
    lat
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    assert!(!sorted.is_empty(), "percentile of nothing");
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_pgbench_15_output() {
        let out = "transaction type: <builtin: TPC-B (sort of)>\n\
            number of transactions actually processed: 141935\n\
            number of failed transactions: 0 (0.000%)\n\
            latency average = 6.770 ms\n\
            initial connection time = 12.3 ms\n\
            tps = 2364.123456 (without initial connection time)\n";
        let o = parse_summary(out).unwrap();
        assert_eq!(o.transactions, 141935);
        assert_eq!(o.failed, 0);
        assert!((o.tps - 2364.123456).abs() < 1e-9);
        assert!((o.latency_avg_ms - 6.77).abs() < 1e-9);
        let err = "starting vacuum...\nprogress: 1.0 s, 2210.9 tps, lat 7.182 ms stddev 3.061, 0 failed\n\
                   progress: 2.0 s, 0.0 tps, lat 0.000 ms stddev 0.000, 0 failed\n";
        assert_eq!(parse_progress(err), vec![2210.9, 0.0]);
        assert!(parse_summary("garbage").is_none());
        let none = parse_summary("number of transactions actually processed: 0\n").unwrap();
        assert_eq!(none.tps, 0.0);
        assert!(none.latency_avg_ms.is_nan());
    }

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(|i| i as f64).collect();
        assert_eq!(percentile(&v, 0.5), 50.0);
        assert_eq!(percentile(&v, 0.99), 99.0);
        assert_eq!(percentile(&[3.0], 0.99), 3.0);
    }
}
