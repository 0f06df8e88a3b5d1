//! `walrus-bench micro` end to end on a real disk: the commit measurements run, report a
//! positive number on every row they own, and leave no scratch directory behind. (The
//! numbers themselves are benchmarks, recorded in BENCHMARKS.md, not asserted here.)

mod common;

use common::{bench, text};

/// The first number in the `value` column of the row whose name is `name`.
fn value(report: &str, name: &str) -> f64 {
    let line = report
        .lines()
        .find(|l| l.starts_with(&format!("| {name} |")))
        .unwrap_or_else(|| panic!("no row {name:?} in:\n{report}"));
    let cell = line.split('|').nth(2).expect("a value column");
    cell.split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number in {cell:?} ({line})"))
}

#[test]
fn micro_commit_measurements_report_every_row() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("scratch");
    let out = bench()
        .args(["micro", "--only", "commit", "--seconds", "1", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    let report = text(&out);
    assert!(out.status.success(), "bench micro failed:\n{report}");
    for row in [
        "raw 8 KiB pwrite+fdatasync",
        "raw 8 KiB pwrite+fdatasync, another thread spinning",
        "group commit, 1 thread",
        "group commit, 16 threads",
    ] {
        assert!(
            value(&report, row) > 0.0,
            "row {row:?} reports nothing:\n{report}"
        );
    }
    // Each of the sixteen committers waits for a sync covering its commit: at most sixteen
    // commits per sync (one more for a sync cut by the window's edge), at least one.
    let per_sync = report
        .lines()
        .find(|l| l.starts_with("| group commit, 16 threads: WAL syncs |"))
        .and_then(|l| l.split('|').nth(3))
        .and_then(|c| c.split_whitespace().next())
        .and_then(|n| n.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no commits-per-sync figure in:\n{report}"));
    assert!(
        (1.0..=17.0).contains(&per_sync),
        "{per_sync} commits per sync"
    );
    assert!(!dir.exists(), "the scratch directory was left behind");
}
