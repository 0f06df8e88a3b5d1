//! `walrus-bench compare` against the real PostgreSQL 15 and walrus binaries: the quick
//! insert scenario produces numbers for both systems (not that walrus wins), bad input gets
//! a clear message and a non-zero exit, and a Ctrl-C leaves no process behind. Needs
//! Debian's postgresql-15 and postgresql-client-15 (`.ci/run` installs them); skips with a
//! message outside CI when they are missing.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{bench, text};

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

fn postgres_available() -> bool {
    let ok = Path::new(PG_BIN).join("postgres").is_file()
        && Command::new("pgbench")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("CI").is_err(),
            "PostgreSQL 15 missing in CI: .ci/run must install postgresql-15"
        );
        eprintln!("skipping: PostgreSQL 15 (postgresql-15, postgresql-client-15) not installed");
    }
    ok
}

/// Processes whose working directory lies under `dir` (every server and pgbench the
/// harness starts runs there; PostgreSQL's children inherit the postmaster's).
fn processes_under(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if !name.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        if let Ok(cwd) = std::fs::read_link(e.path().join("cwd")) {
            if cwd.starts_with(dir) {
                let cmd = std::fs::read_to_string(e.path().join("cmdline")).unwrap_or_default();
                found.push(format!("{name}: {}", cmd.replace('\0', " ")));
            }
        }
    }
    found
}

/// The value cells of the first table row named `metric` under `heading`.
fn row<'a>(report: &'a str, heading: &str, metric: &str) -> Vec<&'a str> {
    let section = &report[report
        .find(heading)
        .unwrap_or_else(|| panic!("no {heading}"))..];
    let line = section
        .lines()
        .find(|l| l.starts_with(&format!("| {metric} |")))
        .unwrap_or_else(|| panic!("no row {metric} under {heading}"));
    line.trim_matches('|')
        .split('|')
        .map(str::trim)
        .skip(1)
        .collect()
}

fn leading_number(cell: &str) -> Option<f64> {
    cell.split_whitespace().next()?.parse().ok()
}

/// The bulk and queries scenarios (issue 28) load and query both systems and report a
/// number for every row both can run; the queries walrus refuses show its error.
#[test]
fn quick_bulk_and_queries_report_numbers_for_both_systems() {
    if !postgres_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("report.md");
    let o = bench()
        .args(["compare", "--scenario", "bulk,queries", "--quick"])
        .arg("--out")
        .arg(&out)
        .arg("--work-dir")
        .arg(tmp.path())
        .env("WALRUS_LOG", "warn")
        .output()
        .expect("run walrus-bench compare");
    assert!(o.status.success(), "{}", text(&o));
    let report = std::fs::read_to_string(&out).expect("report written");
    for (heading, metric) in [
        ("### bulk", "pgbench -i -s 1 (s)"),
        ("### bulk", "COPY CSV (MB/s)"),
        ("### queries", "count (s)"),
        ("### queries", "top-N (s)"),
        ("### queries", "join + group (s)"),
        ("### queries", "recursive CTE (s)"),
        (
            "### queries",
            "1 client, TPC-B-like, -M prepared: average latency (ms)",
        ),
    ] {
        let cells = row(&report, heading, metric);
        assert!(
            leading_number(cells[0]).is_some_and(|v| v > 0.0)
                && leading_number(cells[1]).is_some_and(|v| v > 0.0),
            "{metric}: numbers for both systems: {cells:?}\n{report}"
        );
    }
}

#[test]
fn quick_insert_reports_numbers_for_both_systems() {
    if !postgres_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("report.md");
    let start = Instant::now();
    let o = bench()
        .args(["compare", "--scenario", "insert", "--quick"])
        .arg("--out")
        .arg(&out)
        .arg("--work-dir")
        .arg(tmp.path())
        .env("WALRUS_LOG", "warn")
        .output()
        .expect("run walrus-bench compare");
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        start.elapsed() < Duration::from_secs(180),
        "quick mode took {:?}",
        start.elapsed()
    );
    let report = std::fs::read_to_string(&out).expect("report written");
    assert!(
        report.contains("fdatasync"),
        "machine facts missing:\n{report}"
    );
    for heading in ["#### WAL on disk", "#### WAL on tmpfs"] {
        let tps = row(&report, heading, "TPS");
        let (pg, w) = (leading_number(tps[0]), leading_number(tps[1]));
        assert!(
            pg.is_some_and(|v| v > 0.0) && w.is_some_and(|v| v > 0.0),
            "TPS for both systems under {heading}: {tps:?}\n{report}"
        );
        let p99 = row(&report, heading, "latency p99 (ms)");
        assert!(
            leading_number(p99[0]).is_some() && leading_number(p99[1]).is_some(),
            "p99 for both systems: {p99:?}"
        );
        let wal = row(&report, heading, "WAL bytes / transaction (LSN diff)");
        assert!(
            leading_number(wal[0]).is_some() && leading_number(wal[1]).is_some(),
            "WAL bytes for both systems: {wal:?}"
        );
    }
    // With libpmem: the pmem rows (forced, on tmpfs), at 32 clients and at one, labelled
    // non-durable, with numbers for both sides.
    if common::libpmem_or_skip() {
        for heading in [
            "#### walrus `wal_sync_method = pmem`",
            "#### walrus pmem vs fdatasync, both WAL on tmpfs",
            "#### 1 client: one-row insert latency",
        ] {
            let tps = row(&report, heading, "TPS");
            assert!(
                tps.iter()
                    .take(2)
                    .all(|c| leading_number(c).is_some_and(|v| v > 0.0)),
                "TPS under {heading}: {tps:?}\n{report}"
            );
        }
        assert!(report
            .contains("non-durable: measures the syscall and page-cache savings, not persistence"));
    }
    let left = processes_under(tmp.path());
    assert!(left.is_empty(), "processes left behind: {left:?}");
    let dirs: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with("walrus-bench-"))
        .collect();
    assert!(dirs.is_empty(), "work directory not removed: {dirs:?}");
}

#[test]
fn missing_postgres_binaries_give_a_clear_message() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("report.md");
    let o = bench()
        .args(["compare", "--quick", "--pg-bin", "/nonexistent"])
        .arg("--out")
        .arg(&out)
        .output()
        .expect("run walrus-bench compare");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let t = text(&o);
    assert!(
        t.contains("/nonexistent") && t.contains("postgresql-15"),
        "message should name the path and the package: {t}"
    );
    assert!(!t.contains("panicked"), "{t}");
    assert!(!out.exists(), "no report on failure");
}

#[test]
fn busy_port_and_unknown_scenario_give_clear_messages() {
    if !postgres_available() {
        return;
    }
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port();
    let o = bench()
        .args(["compare", "--quick", "--scenario", "insert"])
        .args(["--port", &port.to_string(), "--out", "/dev/null"])
        .output()
        .expect("run walrus-bench compare");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains(&format!("port {port} on 127.0.0.1 is busy")),
        "{}",
        text(&o)
    );
    let o = bench()
        .args(["compare", "--scenario", "tpcc", "--out", "/dev/null"])
        .output()
        .expect("run walrus-bench compare");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("unknown scenario \"tpcc\""),
        "{}",
        text(&o)
    );
}

#[test]
fn ctrl_c_stops_everything() {
    if !postgres_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let err_path = tmp.path().join("stderr");
    let mut child = bench()
        .args(["compare", "--scenario", "insert", "--quick"])
        .args(["--duration", "30"])
        .arg("--out")
        .arg(tmp.path().join("report.md"))
        .arg("--work-dir")
        .arg(tmp.path())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .expect("start walrus-bench compare");
    // Wait until a measured run is under way (both a server and pgbench are running).
    let start = Instant::now();
    loop {
        let err = std::fs::read_to_string(&err_path).unwrap_or_default();
        if err.contains("rep 1/1") {
            break;
        }
        if start.elapsed() > Duration::from_secs(90) || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            panic!("no measured run started: {err}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        !processes_under(tmp.path()).is_empty(),
        "a run should be going on"
    );
    let st = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let status = common::wait_exit(&mut child, Duration::from_secs(60));
    assert!(!status.success(), "an interrupted run must fail");
    let err = std::fs::read_to_string(&err_path).unwrap_or_default();
    assert!(err.contains("interrupted"), "{err}");
    let left = processes_under(tmp.path());
    assert!(left.is_empty(), "processes left behind: {left:?}");
}
