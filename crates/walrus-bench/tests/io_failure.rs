//! The I/O failure policy (DESIGN §12), one injected error per path. The TPC-B child runs
//! with `--fail-io KIND:OP:N:ERRNO` (the N-th such operation after the schema is loaded
//! fails) and a power-loss journal, so a failed sync really loses what it should have
//! made durable:
//! - a failed **sync** of WAL, data, the control file or the commit-status log, and a
//!   failed WAL write, stop the process at once (`PANIC`): the kernel may have dropped
//!   the dirty pages and cleared the error, so a retry could report success for data
//!   that never reached the disk. Recovery from WAL then loses no acknowledged commit;
//! - a failed **write** of a data page, the control file or a commit-status page (EIO or
//!   ENOSPC) fails only the work that needed it (a checkpoint, an eviction): the page
//!   stays dirty in memory and is written again later; the process carries on.
//!
//! After either outcome the directory is power-cut, recovered and checked: invariants,
//! every acknowledged commit, every page's checksum.

mod common;

use std::time::{Duration, Instant};

use common::{bench, text, wait_exit, Cluster};

fn run_with_failure(rule: &str, fatal: bool) {
    let c = Cluster::new(&[
        "page_protection=fpw",
        "wal_sync_method=fdatasync",
        "autovacuum_naptime=50ms",
    ]);
    let journal = c.data.parent().unwrap().join("powerloss.journal");
    let mut child = c.start_workload(
        8,
        &[
            "--fail-io".to_string(),
            rule.to_string(),
            "--powerloss-journal".to_string(),
            journal.display().to_string(),
        ],
    );
    if fatal {
        let status = wait_exit(&mut child, Duration::from_secs(60));
        assert!(!status.success(), "{rule}: the child should have stopped");
    } else {
        // Long enough for several checkpoints (every 150 ms) after the failure.
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(1500) {
            if let Some(s) = child.try_wait().unwrap() {
                panic!("{rule}: the child ended ({s}) although the failure is not fatal");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        child.kill().unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("injecting errno"),
        "{rule}: the failure was never injected:\n{err}"
    );
    assert!(!err.contains("panicked"), "{rule}: a Rust panic:\n{err}");
    assert_eq!(
        err.contains("PANIC: could not"),
        fatal,
        "{rule}: expected fatal={fatal}:\n{err}"
    );
    let cut = bench()
        .arg("powercut")
        .arg("--data")
        .arg(&c.data)
        .arg("--journal")
        .arg(&journal)
        .output()
        .unwrap();
    assert!(cut.status.success(), "{}", text(&cut));
    let chk = c.check();
    assert!(
        chk.status.success() && text(&chk).contains("OK"),
        "{rule}: check after the failure:\n{}",
        text(&chk)
    );
    let v = c.verify();
    assert!(v.status.success(), "{rule}: {}", text(&v));
}

#[test]
fn a_failed_wal_write_or_sync_stops_the_server_and_loses_nothing() {
    run_with_failure("wal:write:3:EIO", true);
    run_with_failure("wal:sync:2:EIO", true);
}

#[test]
fn a_failed_data_sync_stops_the_server_and_loses_nothing() {
    run_with_failure("data:sync:1:EIO", true);
}

#[test]
fn a_failed_control_file_or_clog_sync_stops_the_server() {
    run_with_failure("control:sync:1:EIO", true);
    run_with_failure("clog:sync:1:EIO", true);
}

#[test]
fn a_failed_data_write_is_retried_and_loses_nothing() {
    run_with_failure("data:write:2:EIO", false);
    run_with_failure("data:write:1:ENOSPC", false);
}

#[test]
fn a_failed_control_file_or_clog_write_fails_only_that_checkpoint() {
    run_with_failure("control:write:1:EIO", false);
    run_with_failure("clog:write:1:EIO", false);
}
