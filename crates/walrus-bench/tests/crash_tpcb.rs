//! Crash tests: a child runs a TPC-B-like workload through the engine API with 8
//! threads and a checkpoint every 150 ms; the test kills it with SIGKILL at a random
//! moment, then `walrus tpcb-check` recovers the directory and verifies:
//! (a) sum(abalance) = sum(tbalance) = sum(bbalance) = sum(history.delta);
//! (b) every commit the child acknowledged (side file, written after commit returned)
//!     is present with its delta;
//! (c) recovery succeeds and every page passes its checksum afterwards.
//! The directory is reused across cycles, so each cycle also recovers from the state the
//! previous check left (it exits without a clean shutdown).
//!
//! Autovacuum runs every 50 ms in the child, so kills also land mid-vacuum.
//!
//! Cycles: 20 per mode by default; `WALRUS_CRASH_CYCLES=300` for the long mode.
//! `WALRUS_TEST_SEED` replays the kill timings of a failed run.

mod common;

use std::time::Duration;

use common::{text, Cluster, Rng};

fn cycles() -> u64 {
    std::env::var("WALRUS_CRASH_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20)
}

fn crash_cycles(sets: &[&str]) -> Cluster {
    crash_cycles_with(sets, &[])
}

fn crash_cycles_with(sets: &[&str], run_args: &[&str]) -> Cluster {
    // Autovacuum wakes every 50 ms, so vacuums (prunes, index deletes, line pointers
    // freed) are in flight when the kills land.
    let mut sets = sets.to_vec();
    sets.push("autovacuum_naptime=50ms");
    let mut c = Cluster::new(&sets);
    c.run_args = run_args.iter().map(|a| a.to_string()).collect();
    run_cycles(c)
}

fn run_cycles(c: Cluster) -> Cluster {
    let mut rng = Rng::from_env();
    for cycle in 0..cycles() {
        let mut child = c.start_workload(8, &[]);
        std::thread::sleep(Duration::from_millis(rng.range(100, 900)));
        child.kill().expect("SIGKILL the workload");
        let out = child.wait_with_output().expect("reap");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stderr.contains("panicked"),
            "cycle {cycle}: the workload panicked:\n{stderr}"
        );
        assert!(
            !stderr.contains("walrus: error"),
            "cycle {cycle}: the workload failed before the kill:\n{stderr}"
        );
        let chk = c.check();
        assert!(
            chk.status.success(),
            "cycle {cycle}: check failed:\n{}",
            text(&chk)
        );
        assert!(text(&chk).contains("OK"), "cycle {cycle}: {}", text(&chk));
    }
    c
}

#[test]
fn crash_tpcb_fpw() {
    let _ = crash_cycles(&["page_protection=fpw", "wal_sync_method=fdatasync"]);
}

#[test]
fn crash_tpcb_dwb() {
    let _ = crash_cycles(&[
        "page_protection=dwb",
        "dwb_batch_pages=16",
        "wal_sync_method=fdatasync",
    ]);
}

/// Incremental checkpoints (the default with dwb): no checkpoint is requested, a small
/// recovery budget (max_wal_size 4MB) makes the page writers chase the redo lag and the
/// checkpointer record an advanced redo point many times per cycle.
#[test]
fn crash_tpcb_dwb_incremental() {
    let _ = crash_cycles_with(
        &[
            "page_protection=dwb",
            "dwb_batch_pages=16",
            "wal_sync_method=fdatasync",
            "max_wal_size=4MB",
            "recovery_time_target=1s",
        ],
        &["--checkpoint-ms", "1000000"],
    );
}

/// The same without torn-page protection (SIGKILL tears no page): incremental
/// checkpoints whose only data-file syncs are the checkpoint's own.
#[test]
fn crash_tpcb_none_incremental() {
    let _ = crash_cycles_with(
        &[
            "page_protection=none",
            "wal_sync_method=fdatasync",
            "max_wal_size=4MB",
        ],
        &["--checkpoint-ms", "1000000"],
    );
}

#[test]
fn crash_tpcb_none_with_fsync() {
    let _ = crash_cycles(&["page_protection=none", "wal_sync_method=fdatasync"]);
}

#[test]
fn crash_tpcb_fpw_lz4_open_datasync() {
    let _ = crash_cycles(&[
        "page_protection=fpw",
        "wal_compression=lz4",
        "wal_sync_method=open_datasync",
    ]);
}

/// Clog truncation under kills: the workload moves the xid counter a clog segment ahead
/// every 60 ms, so autovacuum runs freeze passes (`autovacuum_freeze_max_age` is one
/// segment) and the workload's frequent checkpoints delete old segments, with kills
/// landing mid-pass, mid-checkpoint and mid-truncation. A tuple left without hint bits
/// below the truncation point would make the checker's reads fail; the sums and
/// acknowledged commits must hold as in every mode.
#[test]
fn crash_tpcb_fpw_with_clog_truncation() {
    let c = crash_cycles_with(
        &[
            "page_protection=fpw",
            "wal_sync_method=fdatasync",
            "autovacuum_freeze_max_age=1000000",
        ],
        &["--xid-jump-ms", "60"],
    );
    let lowest = std::fs::read_dir(c.data.join("clog"))
        .expect("clog directory")
        .filter_map(|e| u64::from_str_radix(&e.ok()?.file_name().into_string().ok()?, 16).ok())
        .min()
        .expect("clog segments");
    assert!(
        lowest > 0,
        "no clog segment was ever truncated: the test did not exercise truncation"
    );
}

/// `wal_sync_method = pmem`: the WAL lives in a tmpfs directory apart from the data
/// directory (`walrus init --wal-directory`), mapped through the real libpmem with
/// `PMEM_IS_PMEM_FORCE=1` (tmpfs is not persistent memory). A SIGKILL loses no store
/// into a shared mapping, so every acknowledged commit (drained before it was
/// acknowledged) must be found after recovery, with the sums intact. What a power cut
/// would do to real PMEM is not tested here: tmpfs has none to lose.
///
/// Without libpmem installed this test skips, unless `CI` is set: then it fails.
#[test]
fn crash_tpcb_pmem_wal_directory_on_tmpfs() {
    if !common::libpmem_or_skip() {
        return;
    }
    let wal_tmp = tempfile::Builder::new()
        .prefix("walrus-crash-pmem")
        .tempdir_in("/dev/shm")
        .expect("a directory on tmpfs (/dev/shm)");
    let wal_dir = wal_tmp.path().join("wal");
    let wal_dir = wal_dir.to_str().expect("utf-8 path");
    let c = Cluster::new_with(
        &[
            "page_protection=fpw",
            "wal_sync_method=pmem",
            "autovacuum_naptime=50ms",
        ],
        &["--wal-directory", wal_dir, "--wal-sync-method", "pmem"],
        &[("PMEM_IS_PMEM_FORCE", "1")],
        Some(wal_tmp),
    );
    assert_eq!(
        std::fs::canonicalize(c.data.join("wal")).unwrap(),
        std::fs::canonicalize(wal_dir).unwrap(),
        "the data directory's wal is the tmpfs directory"
    );
    let c = run_cycles(c);
    assert!(
        std::fs::read_dir(wal_dir).unwrap().count() > 2,
        "segments were written in the tmpfs WAL directory"
    );
    // The runs really used the pmem method (and said it is not durable).
    let chk = c.check();
    assert!(
        text(&chk).contains("wal_sync_method = pmem with PMEM_IS_PMEM_FORCE=1"),
        "{}",
        text(&chk)
    );
}

/// `page_protection = atomic` on a file system that writes 8 KiB pages atomically (XFS
/// with reflink on a loop device; `common::atomic_capable_dir`): every data page goes
/// out with `RWF_ATOMIC` through `O_DIRECT`, no images, no double writes, incremental
/// checkpoints; kill -9 at random moments loses no acknowledged commit.
#[test]
fn crash_tpcb_atomic_incremental() {
    if let Some(c) = common::atomic_cluster() {
        let _ = run_cycles(c);
    }
}
