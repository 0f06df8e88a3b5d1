//! `walrus waldump` reads a real data directory's WAL (after a workload through the
//! engine) and accounts for every acknowledged commit; bad arguments are clear errors.

mod common;

use common::{bench, text, walrus};

#[test]
fn waldump_stats_count_every_acknowledged_commit() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let acks = tmp.path().join("acks");
    let out = walrus().arg("init").arg(&data).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let out = bench()
        .arg("tpcb-run")
        .arg("--data")
        .arg(&data)
        .arg("--acks")
        .arg(&acks)
        .args(["--threads", "2", "--seconds", "1"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let acked = std::fs::read_to_string(&acks).unwrap().lines().count();
    assert!(acked > 0, "the workload acknowledged nothing");

    // From the very start of WAL (default 64 MB segments: nothing was recycled).
    let out = walrus()
        .arg("waldump")
        .arg(&data)
        .args(["--start", "0/0", "--stats"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let commits: usize = stdout
        .lines()
        .find(|l| l.starts_with("| Xact/COMMIT |"))
        .and_then(|l| l.split('|').nth(2))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no commit row in:\n{stdout}"));
    assert!(
        commits >= acked,
        "{commits} commit records for {acked} acknowledged commits"
    );
    for kind in ["Heap/INSERT", "Heap/UPDATE_SAME_PAGE", "Xlog/CHECKPOINT"] {
        assert!(
            stdout.contains(&format!("| {kind} |")),
            "no {kind} in:\n{stdout}"
        );
    }
    // The indexes' records (bulk build images, inserts or splits, depending on timing).
    assert!(
        stdout.contains("| Btree/"),
        "no B-tree records in:\n{stdout}"
    );
    assert!(!stdout.contains("| unknown |"), "{stdout}");

    // One line per record: the first is the checkpoint `init` wrote at 0/0.
    let out = walrus()
        .arg("waldump")
        .arg(&data)
        .args(["--start", "0/0", "--limit", "3"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    assert!(
        lines[0].starts_with("lsn 0/0 ") && lines[0].contains("Xlog/CHECKPOINT"),
        "{stdout}"
    );
}

#[test]
fn waldump_bad_arguments_are_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let out = walrus().arg("waldump").arg(tmp.path()).output().unwrap();
    assert!(!out.status.success());
    assert!(text(&out).contains("control file"), "{}", text(&out));

    let data = tmp.path().join("data");
    assert!(walrus()
        .arg("init")
        .arg(&data)
        .output()
        .unwrap()
        .status
        .success());
    let out = walrus()
        .arg("waldump")
        .arg(&data)
        .args(["--start", "zz/1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(text(&out).contains("invalid --start"), "{}", text(&out));
}
