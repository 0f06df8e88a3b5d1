//! Power-loss tests. SIGKILL keeps the operating system's page cache, so the crash tests
//! cannot catch a missing or failed sync. Here the TPC-B child runs with
//! `--powerloss-journal`: before every write it journals the bytes it replaces, and after
//! every sync what became durable. The test kills it at a random moment, then
//! `walrus-bench powercut` undoes everything no `fdatasync`/`fsync`/`O_DSYNC` (or, for
//! created and renamed files, no directory fsync) had made durable, as a power cut would;
//! with a keep fraction, a random part of the unsynced 4 KiB blocks survives (the disk
//! wrote some), which tears pages. Then `tpcb-check` recovers and checks the invariants
//! and every acknowledged commit, and every page is verified.
//!
//! Cycles: 6 per mode by default; `WALRUS_POWERLOSS_CYCLES=200` for the long mode.
//! `WALRUS_TEST_SEED` replays the kill timings and kept blocks of a failed run.

mod common;

use std::time::Duration;

use common::{bench, text, Cluster, Rng};

fn cycles() -> u64 {
    std::env::var("WALRUS_POWERLOSS_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6)
}

/// Runs power-cut cycles on one directory; returns how many acknowledged commits the
/// checker reported lost in total (it fails the cycle itself unless `lost_acks_allowed`).
fn powerloss_cycles(sets: &[&str], keep_fraction: f64, lost_acks_allowed: bool) -> u64 {
    powerloss_cycles_with(sets, keep_fraction, lost_acks_allowed, &[])
}

fn powerloss_cycles_with(
    sets: &[&str],
    keep_fraction: f64,
    lost_acks_allowed: bool,
    run_args: &[&str],
) -> u64 {
    let mut sets = sets.to_vec();
    sets.push("autovacuum_naptime=50ms");
    powerloss_cycles_on(
        Cluster::new(&sets),
        keep_fraction,
        lost_acks_allowed,
        run_args,
    )
}

fn powerloss_cycles_on(
    mut c: Cluster,
    keep_fraction: f64,
    lost_acks_allowed: bool,
    run_args: &[&str],
) -> u64 {
    c.run_args = run_args.iter().map(|a| a.to_string()).collect();
    if lost_acks_allowed {
        // No explicit checkpoints (each flushes all WAL): only the WAL writer bounds the
        // loss of asynchronous commits.
        c.run_args = vec!["--checkpoint-ms".into(), "1000000".into()];
    }
    let mut rng = Rng::from_env();
    let journal = c.data.parent().unwrap().join("powerloss.journal");
    let mut total_lost = 0;
    let mut undone_something = false;
    // The asynchronous mode's loss bound gets at least 20 cuts in every run (about 1 s
    // each).
    let n = if lost_acks_allowed {
        cycles().max(20)
    } else {
        cycles()
    };
    // A cut that lands right after a checkpoint's syncs undoes nothing; under a busy
    // machine every planned cut can. Keep cutting (up to 4x the cycles) until one has
    // undone a write, so the final assertion is about the engine, not the timing.
    for cycle in 0..4 * n {
        if cycle >= n && undone_something {
            break;
        }
        let mut child = c.start_workload(
            8,
            &[
                "--powerloss-journal".to_string(),
                journal.display().to_string(),
            ],
        );
        std::thread::sleep(Duration::from_millis(rng.range(150, 1200)));
        let cut_at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
            .to_string();
        child.kill().expect("SIGKILL the workload");
        let out = child.wait_with_output().expect("reap");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stderr.contains("panicked") && !stderr.contains("walrus-bench: error"),
            "cycle {cycle}: the workload failed before the power cut:\n{stderr}"
        );
        let cut = bench()
            .arg("powercut")
            .arg("--data")
            .arg(&c.data)
            .arg("--journal")
            .arg(&journal)
            .args(["--keep-fraction", &keep_fraction.to_string()])
            .args(["--seed", &rng.next().to_string()])
            .output()
            .expect("run powercut");
        assert!(cut.status.success(), "cycle {cycle}: {}", text(&cut));
        let report = text(&cut);
        eprintln!("cycle {cycle}: {}", report.trim());
        undone_something |= !report.contains("writes: 0,");
        // Asynchronous commit: whatever was acknowledged more than 3 x wal_writer_delay
        // (200 ms by default) before the cut must have survived.
        let extra: Vec<&str> = if lost_acks_allowed {
            vec![
                "--allow-lost-acks",
                "--cut-at-ms",
                &cut_at,
                "--loss-window-ms",
                "600",
            ]
        } else {
            Vec::new()
        };
        let chk = c.check_with(&extra);
        assert!(
            chk.status.success(),
            "cycle {cycle}: check failed after a power cut:\n{}",
            text(&chk)
        );
        let t = text(&chk);
        assert!(t.contains("OK"), "cycle {cycle}: {t}");
        let summary = String::from_utf8_lossy(&chk.stdout);
        eprintln!("cycle {cycle}: {}", summary.trim());
        total_lost += t
            .split("lost_acks=")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0);
        let v = c.verify();
        assert!(v.status.success(), "cycle {cycle}: {}", text(&v));
    }
    assert!(
        undone_something,
        "no power cut undid any write: the test did not exercise lost page-cache data"
    );
    total_lost
}

#[test]
fn powerloss_tpcb_fpw_fdatasync() {
    powerloss_cycles(
        &["page_protection=fpw", "wal_sync_method=fdatasync"],
        0.0,
        false,
    );
}

/// A random half of the unsynced blocks reached the disk: data pages written after the
/// last checkpoint's sync are torn, and full-page images must repair them.
#[test]
fn powerloss_tpcb_fpw_torn_blocks() {
    powerloss_cycles(
        &["page_protection=fpw", "wal_sync_method=fsync"],
        0.5,
        false,
    );
}

/// With `open_datasync` every WAL write is durable when it returns, so only data pages
/// the page writers wrote since the last checkpoint can be lost; with a checkpoint every
/// 150 ms a busy machine often cut right after one (24 cuts in a row undid nothing, at
/// the start of this session's code too). Checkpoints every 2 s leave every cut (150 ms
/// to 1.2 s into a run) with the run's page writes unsynced.
#[test]
fn powerloss_tpcb_fpw_open_datasync_lz4() {
    powerloss_cycles_with(
        &[
            "page_protection=fpw",
            "wal_sync_method=open_datasync",
            "wal_compression=lz4",
        ],
        0.3,
        false,
        &["--checkpoint-ms", "2000"],
    );
}

/// The double-write buffer: a random half of the unsynced blocks survive, so home pages
/// (and double-write batches) are torn; no page images exist to repair them.
#[test]
fn powerloss_tpcb_dwb_torn_blocks() {
    powerloss_cycles(
        &[
            "page_protection=dwb",
            "dwb_batch_pages=16",
            "wal_sync_method=fdatasync",
        ],
        0.5,
        false,
    );
}

/// Incremental checkpoints with the double-write buffer: no checkpoint is requested; the
/// redo point the checkpointer records comes from the dirty-page queue, so a data-file
/// sync missing before it would lose pages here, torn or whole.
#[test]
fn powerloss_tpcb_dwb_incremental_torn_blocks() {
    powerloss_cycles_with(
        &[
            "page_protection=dwb",
            "dwb_batch_pages=16",
            "wal_sync_method=fdatasync",
            "max_wal_size=4MB",
        ],
        0.5,
        false,
        &["--checkpoint-ms", "1000000"],
    );
}

/// Without page images a torn page cannot be repaired, so only whole unsynced writes are
/// lost here (keep fraction 0): nothing may be lost that a sync covered.
#[test]
fn powerloss_tpcb_none_fdatasync() {
    powerloss_cycles(
        &["page_protection=none", "wal_sync_method=fdatasync"],
        0.0,
        false,
    );
}

/// Asynchronous commit: acknowledged commits may be lost, but only those acknowledged
/// within 3 × `wal_writer_delay` (600 ms) of the cut — the WAL writer flushes every
/// 200 ms — and each worker's lost commits must be its last ones; never atomicity. Commit-status pages carry the LSN
/// of the commit records they reflect and are written only after WAL reaches it; a page
/// written first would survive a power cut that lost the record, and recovery would find
/// a "committed" transaction whose changes are gone.
#[test]
fn powerloss_tpcb_fpw_synchronous_commit_off() {
    powerloss_cycles(
        &[
            "page_protection=fpw",
            "wal_sync_method=fdatasync",
            "synchronous_commit=off",
            "clog_buffers=2",
            // Room for every page: no eviction flushes WAL on the writer's behalf.
            "shared_buffers=64MB",
        ],
        0.3,
        true,
    );
}

/// `page_protection = atomic` on a file system that writes 8 KiB pages atomically (XFS
/// with reflink on a loop device; `common::atomic_capable_dir`): the journal marks each
/// data-page write as atomic, so the power cut keeps or undoes it whole, while a random
/// half of every other unsynced 4 KiB block survives (WAL and clog torn as before). No
/// page images, no double writes, incremental checkpoints: nothing acknowledged is lost
/// and every page verifies. Were the page writes not atomic, the cut would tear them and
/// the check would find pages it cannot repair, as it would for `none`.
#[test]
fn powerloss_tpcb_atomic_torn_blocks() {
    if let Some(c) = common::atomic_cluster() {
        let run_args = c.run_args.clone();
        let run_args: Vec<&str> = run_args.iter().map(String::as_str).collect();
        powerloss_cycles_on(c, 0.5, false, &run_args);
    }
}
