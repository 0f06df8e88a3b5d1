//! Checkpoints and page writers (DESIGN §5): incremental checkpoints advance the redo
//! point with no request and recycle old WAL; `fpw` refuses them; an explicit checkpoint
//! writes everything below its redo point; backends never write a page.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use walrus_engine::access::datum::{Datum, TypeId};
use walrus_engine::catalog::{ColumnDef, TableDef};
use walrus_engine::engine::{CheckpointReason, Isolation};
use walrus_engine::Engine;

/// The default configuration with `sets` (TOML values) replaced or added, 1 MB WAL
/// segments, no WAL syncs (these tests are about which pages are written when, not
/// durability; the crash and power-loss tests cover that).
fn config(sets: &[(&str, &str)]) -> String {
    let mut sets = sets.to_vec();
    if !sets.iter().any(|(n, _)| *n == "wal_sync_method") {
        sets.push(("wal_sync_method", "\"none\""));
    }
    walrus_engine::settings::default_config_with(1 << 20, &sets)
}

fn engine_with(dir: &std::path::Path, sets: &[(&str, &str)]) -> Engine {
    Engine::init(dir, Some(&config(sets))).unwrap();
    Engine::open(dir).unwrap().0
}

fn table(e: &Engine) -> Arc<TableDef> {
    let col = |name: &str, ty| ColumnDef {
        name: name.into(),
        ty,
        not_null: false,
        typmod: -1,
        declared: Default::default(),
    };
    let mut t = e.begin(Isolation::ReadCommitted);
    t.create_table(
        "t",
        vec![col("id", TypeId::Int4), col("v", TypeId::Text)],
        100,
    )
    .unwrap();
    t.commit().unwrap();
    e.catalog_view().unwrap().table("t").unwrap()
}

/// Inserts `n` rows of about 200 bytes, 100 per transaction.
fn insert_rows(e: &Engine, def: &TableDef, from: i32, n: i32) {
    let pad = "x".repeat(200);
    for chunk in (from..from + n).collect::<Vec<_>>().chunks(100) {
        let mut t = e.begin(Isolation::ReadCommitted);
        for &i in chunk {
            t.insert(def, &[Datum::Int4(i), Datum::Text(pad.clone())])
                .unwrap();
        }
        t.commit().unwrap();
    }
}

fn wal_files(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir.join("wal")).unwrap().count()
}

/// With `dwb`, checkpoints are incremental: under a steady load and no checkpoint
/// request, the redo point in the control file keeps advancing (the page writers write
/// the oldest pages, the checkpointer records the oldest `rec_lsn`), no checkpoint writes
/// a page itself, and the WAL before the redo point is recycled.
#[test]
fn incremental_checkpoints_advance_the_redo_point_and_recycle_wal_unasked() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_with(
        dir.path(),
        &[
            ("page_protection", "\"dwb\""),
            ("max_wal_size", "\"4MB\""),
            ("checkpoint_timeout", "\"1h\""),
            ("autovacuum", "\"off\""),
        ],
    );
    let def = table(&e);
    let before = e.checkpoint_stats();
    let redo0 = e.control_data().redo_lsn;
    let mut next = 0;
    let started = Instant::now();
    // About 20 MB of WAL: five times max_wal_size.
    while e.wal().insert_lsn().distance_from(redo0) < 20 << 20 {
        insert_rows(&e, &def, next, 2000);
        next += 2000;
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "load too slow"
        );
    }
    // The checkpointer wakes every 100 ms: give it a moment to record the last advance.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lag = e
            .wal()
            .insert_lsn()
            .distance_from(e.control_data().redo_lsn);
        if lag <= 4 << 20 || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let after = e.checkpoint_stats();
    let cd = e.control_data();
    // Every checkpoint since (WAL volume or redo advance, none asked for) was incremental.
    let ran = (after.timed + after.requested) - (before.timed + before.requested);
    assert!(ran > 0, "{after:?}");
    assert_eq!(after.incremental - before.incremental, ran, "{after:?}");
    assert_eq!(
        after.pages_written, before.pages_written,
        "a checkpoint wrote pages"
    );
    assert!(
        cd.redo_lsn.distance_from(redo0) > 12 << 20,
        "redo point stuck at {}",
        cd.redo_lsn
    );
    // The redo point trails the insert position by at most the recovery budget
    // (max_wal_size / 2) plus what was written since the last checkpoint.
    let lag = e.wal().insert_lsn().distance_from(cd.redo_lsn);
    assert!(lag <= 4 << 20, "redo lag {lag} bytes");
    // Old segments were recycled: 20 MB written, far fewer 1 MB segments on disk.
    let files = wal_files(dir.path());
    assert!(files <= 12, "{files} WAL segment files kept");
    let detail = e.flush_detail();
    assert!(detail.incremental);
    assert!(detail.threads.iter().map(|t| t.0).sum::<u64>() > 0);
    assert!(detail.lag_target < u64::MAX);
    // Every row is there after a clean restart.
    e.shutdown().unwrap();
    let (e, _) = Engine::open(dir.path()).unwrap();
    let def = e.catalog_view().unwrap().table("t").unwrap();
    let mut t = e.begin(Isolation::ReadCommitted);
    assert_eq!(t.scan_all(&def).unwrap().len(), next as usize);
    t.commit().unwrap();
    e.shutdown().unwrap();
}

/// `fpw` keeps classic checkpoints (the redo point must not move between them), and
/// asking for incremental ones with it is refused with the reason.
#[test]
fn fpw_refuses_incremental_checkpoints_and_stays_classic() {
    let dir = tempfile::tempdir().unwrap();
    let err = Engine::init(
        dir.path(),
        Some(&config(&[
            ("page_protection", "\"fpw\""),
            ("incremental_checkpoint", "\"on\""),
        ])),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("incremental_checkpoint = on needs page_protection dwb, atomic or none"),
        "{err}"
    );
    let dir = tempfile::tempdir().unwrap();
    let e = engine_with(
        dir.path(),
        &[("page_protection", "\"fpw\""), ("max_wal_size", "\"4MB\"")],
    );
    let def = table(&e);
    insert_rows(&e, &def, 0, 20_000);
    assert!(!e.flush_detail().incremental);
    assert_eq!(e.checkpoint_stats().incremental, 0);
    e.shutdown().unwrap();
}

/// An explicit CHECKPOINT in incremental mode is a full one: every dirty page written,
/// the redo point at the insert position; with `extreme_flush_dirty_page` the page
/// writers help. It finishes well within `checkpoint_target_time` here (the precise
/// figure belongs to the benchmark).
#[test]
fn explicit_checkpoint_writes_every_dirty_page_within_its_target() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_with(
        dir.path(),
        &[
            ("page_protection", "\"dwb\""),
            ("shared_buffers", "\"64MB\""),
            ("checkpoint_target_time", "\"10s\""),
            ("extreme_flush_dirty_page", "\"on\""),
            ("pagewriter_threads", "2"),
            ("autovacuum", "\"off\""),
        ],
    );
    let def = table(&e);
    insert_rows(&e, &def, 0, 40_000);
    assert!(e.pool().dirty_pages() > 100, "the load dirtied pages");
    let started = Instant::now();
    e.checkpoint(CheckpointReason::Requested).unwrap();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(30), "checkpoint took {took:?}");
    let s = e.checkpoint_stats();
    assert!(!s.last_incremental);
    assert_eq!(s.last_redo, e.control_data().redo_lsn);
    // Nothing older than the redo point is dirty.
    assert!(
        e.pool().oldest_rec_lsn().is_none_or(|l| l >= s.last_redo),
        "a page older than the redo point is still dirty"
    );
    e.shutdown().unwrap();
}

/// Backends never write a page: with a pool of 64 pages and a table of hundreds, every
/// page a backend needs comes from a frame the page writers cleaned. The counter is by
/// the writing thread's role, so a backend write would show.
#[test]
fn backends_never_write_pages_even_when_eviction_dominates() {
    for mode in ["\"dwb\"", "\"none\"", "\"fpw\""] {
        let dir = tempfile::tempdir().unwrap();
        let e = engine_with(
            dir.path(),
            &[
                ("page_protection", mode),
                ("shared_buffers", "\"512kB\""),
                ("autovacuum", "\"off\""),
            ],
        );
        let def = table(&e);
        insert_rows(&e, &def, 0, 8_000);
        let mut t = e.begin(Isolation::ReadCommitted);
        assert_eq!(t.scan_all(&def).unwrap().len(), 8_000);
        t.commit().unwrap();
        let s = &e.pool().stats;
        assert_eq!(s.writes_by_backend.load(Ordering::Relaxed), 0, "{mode}");
        assert!(
            s.writes_by_page_writer.load(Ordering::Relaxed) > 100,
            "{mode}: the page writers did the evictions' writes"
        );
        e.shutdown().unwrap();
    }
}

/// Writes about `mb` MB of WAL, then crashes (no checkpoint, no flush of dirty pages) and
/// reopens: returns the bytes recovery replayed and what the engine estimated just
/// before the crash.
fn replayed_after_crash(sets: &[(&str, &str)], mb: u64) -> (u64, f64) {
    let dir = tempfile::tempdir().unwrap();
    let mut sets = sets.to_vec();
    sets.extend([
        ("page_protection", "\"dwb\""),
        ("checkpoint_timeout", "\"1h\""),
        ("autovacuum", "\"off\""),
        ("shared_buffers", "\"64MB\""),
    ]);
    let e = engine_with(dir.path(), &sets);
    let def = table(&e);
    let start = e.wal().insert_lsn();
    let mut next = 0;
    while e.wal().insert_lsn().distance_from(start) < mb << 20 {
        insert_rows(&e, &def, next, 2000);
        next += 2000;
    }
    // Let the page writers and the checkpointer catch up with the last rows, as they
    // would under a steady load: at least 1.5 s, and on a loaded machine (the CI's two
    // cores shared with other test binaries) until the estimate is back under the
    // target (1 s where one is set), for at most 10 s more. (The 1.03–1.04 s readings
    // that first called for this wait were the writers holding the lag at the whole
    // budget, which left the estimate up to 5% over at rest: fixed in checkpoint.rs.)
    std::thread::sleep(Duration::from_millis(1500));
    let target = sets
        .iter()
        .any(|(k, v)| *k == "recovery_time_target" && *v != "0");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while target
        && e.flush_detail().estimated_recovery_secs > 1.0
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    let d = e.flush_detail();
    let estimate = d.estimated_recovery_secs;
    e.shutdown_immediate();
    drop(e);
    let (e, report) = Engine::open(dir.path()).unwrap();
    let report = report.expect("the directory needed recovery");
    let def = e.catalog_view().unwrap().table("t").unwrap();
    let mut t = e.begin(Isolation::ReadCommitted);
    assert_eq!(t.scan_all(&def).unwrap().len(), next as usize);
    t.commit().unwrap();
    e.shutdown().unwrap();
    (report.replayed_bytes, estimate)
}

/// `recovery_time_target` bounds what a crash replays: with a 1 s target and the default
/// replay rate (20 MB/s, none measured yet) the budget is 20 MB, so after 48 MB of WAL a
/// crash replays at most that (the page writers keep the redo lag at 95% of it, the
/// checkpointer records the point every twentieth); with the target off it replays nearly
/// everything since the start.
#[test]
fn recovery_time_target_bounds_the_wal_a_crash_replays() {
    let (bounded, estimate) = replayed_after_crash(&[("recovery_time_target", "\"1s\"")], 48);
    assert!(
        bounded <= 20 << 20,
        "replayed {bounded} bytes with a 20 MB budget"
    );
    assert!(
        estimate <= 1.0,
        "estimated recovery {estimate} s over the 1 s target"
    );
    let (unbounded, _) = replayed_after_crash(&[("recovery_time_target", "0")], 48);
    eprintln!(
        "replayed after 48 MB: {bounded} bytes with a 1 s target (estimate {estimate:.2} s), \
         {unbounded} bytes without"
    );
    assert!(
        unbounded >= 40 << 20,
        "without a target the crash replays the whole load, replayed {unbounded}"
    );
}

/// `page_protection = atomic` is decided against the data directory's device: where it
/// does not write 8 KiB atomically (the virtio disk under /tmp here) `atomic` is refused
/// at init with what statx reports and `auto` falls back to `dwb`; where it does, both
/// give `atomic` (the crash and power-loss tests run that case on XFS).
#[test]
fn atomic_is_decided_by_the_device_figures_and_auto_follows() {
    let dir = tempfile::tempdir().unwrap();
    let covered = walrus_engine::protect::atomic::probe(dir.path())
        .unwrap()
        .covers_page();
    let atomic = Engine::init(
        dir.path(),
        Some(&config(&[("page_protection", "\"atomic\"")])),
    );
    if covered {
        atomic.unwrap();
    } else {
        let err = atomic.unwrap_err();
        assert!(
            matches!(err, walrus_engine::Error::FeatureNotSupported(_)),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains("statx"),
            "the refusal says what the device reports: {msg}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let e = engine_with(dir.path(), &[("page_protection", "\"auto\"")]);
    let expected = if covered { "atomic" } else { "dwb" };
    assert_eq!(e.settings().page_protection.name(), expected);
    assert_eq!(e.pool().double_write().is_some(), !covered);
    e.shutdown().unwrap();
}

/// Page writers run during crash recovery (they keep the redo lag too), and with `dwb` a
/// page that redo changes while its copy is being written stays dirty. Its new
/// `rec_lsn` must be the replay position, not the WAL's end: found by the recovery
/// benchmark, where a hot page re-queued at the end of WAL broke the dirty queue's
/// order (and would have let the end-of-recovery checkpoint skip its changes).
#[test]
fn recovery_with_hot_pages_keeps_the_dirty_queue_ordered_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_with(
        dir.path(),
        &[
            ("page_protection", "\"dwb\""),
            ("recovery_time_target", "\"1s\""),
            ("checkpoint_timeout", "\"1h\""),
            ("autovacuum", "\"off\""),
            ("shared_buffers", "\"1MB\""),
            ("pagewriter_threads", "2"),
        ],
    );
    let def = table(&e);
    // About 90 heap pages in a 128-page pool: redo keeps more than half the pool dirty,
    // so the page writers write while it replays.
    insert_rows(&e, &def, 0, 3000);
    let rows_of = |e: &Engine, def: &TableDef| {
        let mut t = e.begin(Isolation::ReadCommitted);
        let rows = t.scan_all(def).unwrap();
        t.commit().unwrap();
        rows
    };
    let start = e.wal().insert_lsn();
    let mut round = 0;
    // Every page hot: the same rows updated over and over, about 24 MB of WAL.
    while e.wal().insert_lsn().distance_from(start) < 24 << 20 {
        round += 1;
        let mut t = e.begin(Isolation::ReadCommitted);
        for (tid, row) in rows_of(&e, &def) {
            let mut row = row.clone();
            row[1] = Datum::Text(format!("{round:06}{}", "y".repeat(194)));
            t.update(&def, tid, &row).unwrap();
        }
        t.commit().unwrap();
    }
    e.shutdown_immediate();
    drop(e);
    let (e, report) = Engine::open(dir.path()).unwrap();
    assert!(report.is_some(), "recovery ran");
    let def = e.catalog_view().unwrap().table("t").unwrap();
    let rows = rows_of(&e, &def);
    assert_eq!(rows.len(), 3000);
    let want = Datum::Text(format!("{round:06}{}", "y".repeat(194)));
    assert!(
        rows.iter().all(|(_, r)| r[1] == want),
        "every row has the last round"
    );
    // And again after the end-of-recovery checkpoint (incremental): nothing it skipped.
    e.shutdown_immediate();
    drop(e);
    let (e, _) = Engine::open(dir.path()).unwrap();
    let def = e.catalog_view().unwrap().table("t").unwrap();
    assert!(rows_of(&e, &def).iter().all(|(_, r)| r[1] == want));
    e.shutdown().unwrap();
}

/// A bulk load into a pool far smaller than the table, with `dwb` and real WAL syncs:
/// the loading backend holds a heap or index page exclusively while it waits for a clean
/// frame, and a page writer whose batch holds that page (copied before the backend took
/// it) must not block on its latch when finishing the batch, or neither moves until the
/// backend gives up ("no clean buffers became available"). Each load is one transaction
/// of multi-row batches into a table with two indexes, as COPY does.
#[test]
fn bulk_load_into_a_tiny_dwb_pool_never_starves_for_clean_buffers() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_with(
        dir.path(),
        &[
            ("page_protection", "\"dwb\""),
            ("dwb_batch_pages", "16"),
            ("shared_buffers", "\"1MB\""),
            ("wal_sync_method", "\"fdatasync\""),
            ("autovacuum", "\"off\""),
        ],
    );
    let def = table(&e);
    let mut t = e.begin(Isolation::ReadCommitted);
    t.create_index("t", "t_pkey", &[0], true, true).unwrap();
    t.create_index("t", "t_v", &[1], false, false).unwrap();
    t.commit().unwrap();
    let def = e.catalog_view().unwrap().table(&def.name).unwrap();
    let pad = "y".repeat(150);
    for load in 0..4 {
        let mut t = e.begin(Isolation::ReadCommitted);
        for chunk in 0..30 {
            let rows: Vec<Vec<Datum>> = (0..1000)
                .map(|i| {
                    let id = load * 30_000 + chunk * 1000 + i;
                    vec![
                        Datum::Int4(id),
                        Datum::Text(format!("{:08} {pad}", 1_000_000 - id)),
                    ]
                })
                .collect();
            t.insert_many(&def, &rows)
                .unwrap_or_else(|err| panic!("load {load}, batch {chunk}: {err}"));
        }
        t.commit().unwrap();
    }
    let mut t = e.begin(Isolation::ReadCommitted);
    assert_eq!(t.scan_all(&def).unwrap().len(), 120_000);
    t.commit().unwrap();
    assert_eq!(e.pool().stats.writes_by_backend.load(Ordering::Relaxed), 0);
    e.shutdown().unwrap();
}

/// `walrus init`'s calibration: a synthetic crash replayed in a scratch directory gives
/// the replay rate before any real recovery; the engine plans `recovery_time_target`
/// with it (reported as "calibrated"), the scratch directory is gone, and a real
/// recovery that replays enough WAL replaces it with a measured rate.
#[test]
fn init_calibrates_the_replay_rate_and_a_real_recovery_replaces_it() {
    use walrus_engine::engine::RateSource;
    let dir = tempfile::tempdir().unwrap();
    // `fpw`: classic checkpoints, none during this test (no timeout, no WAL-size
    // trigger), so the crash below replays everything written.
    let sets = [
        ("page_protection", "\"fpw\""),
        ("checkpoint_timeout", "\"1h\""),
        ("max_wal_size", "\"1GB\""),
        ("autovacuum", "\"off\""),
    ];
    Engine::init(dir.path(), Some(&config(&sets))).unwrap();
    let started = Instant::now();
    let cal = Engine::calibrate_replay_rate(dir.path(), None).unwrap();
    eprintln!(
        "calibration: {} bytes replayed in {:.3} s = {:.1} MB/s; the whole calibration took {:.2} s",
        cal.replayed_bytes,
        cal.took.as_secs_f64(),
        cal.bytes_per_sec as f64 / 1e6,
        started.elapsed().as_secs_f64()
    );
    assert!(cal.replayed_bytes >= 4 << 20, "{cal:?}");
    assert!(cal.bytes_per_sec > 0);
    assert!(!dir.path().join("replay_calibration.tmp").exists());

    let (e, report) = Engine::open(dir.path()).unwrap();
    assert!(report.is_none(), "the real directory needed no recovery");
    let rate = e.flush_detail().replay_rate;
    assert_eq!(rate.source, RateSource::Calibrated);
    // Planned at a margin below what the synthetic crash replayed at.
    assert_eq!(rate.bytes_per_sec, cal.planned_bytes_per_sec);
    assert!(cal.planned_bytes_per_sec < cal.bytes_per_sec);
    // A clean shutdown's checkpoint keeps the calibrated rate (and says so).
    e.shutdown().unwrap();
    let (e, _) = Engine::open(dir.path()).unwrap();
    assert_eq!(e.flush_detail().replay_rate.source, RateSource::Calibrated);

    // A real crash with more than 4 MB to replay measures its own rate.
    let def = table(&e);
    let start = e.wal().insert_lsn();
    let mut next = 0;
    while e.wal().insert_lsn().distance_from(start) < 6 << 20 {
        insert_rows(&e, &def, next, 2000);
        next += 2000;
    }
    e.shutdown_immediate();
    drop(e);
    let (e, report) = Engine::open(dir.path()).unwrap();
    let replayed = report.expect("a crash").replayed_bytes;
    assert!(replayed >= 6 << 20, "replayed {replayed}");
    assert_eq!(e.flush_detail().replay_rate.source, RateSource::Measured);
    e.shutdown().unwrap();
}
