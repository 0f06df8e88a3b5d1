//! A sequential scan of a table larger than a quarter of the buffer pool reads through
//! its own small ring of frames (PostgreSQL's bulk-read strategy): it sees every row,
//! it reuses its ring frames instead of sweeping the pool, and a small table another
//! session keeps reading stays in the pool across the big scan.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use walrus_engine::access::datum::{Datum, TypeId};
use walrus_engine::buffer::SCAN_RING_FRAMES;
use walrus_engine::catalog::{ColumnDef, TableDef};
use walrus_engine::engine::Isolation;
use walrus_engine::Engine;

/// 4 MB of buffers: 512 frames, so a table of more than 128 pages scans through a ring.
fn engine(dir: &std::path::Path) -> Engine {
    let cfg: String = walrus_engine::settings::default_config_text(1 << 20)
        .lines()
        .map(|line| match line.split(" = ").next().unwrap_or("") {
            "shared_buffers" => "shared_buffers = \"4MB\"\n".to_string(),
            "wal_sync_method" => "wal_sync_method = \"none\"\n".to_string(),
            _ => format!("{line}\n"),
        })
        .collect();
    Engine::init(dir, Some(&cfg)).unwrap();
    Engine::open(dir).unwrap().0
}

fn table(e: &Engine, name: &str) -> Arc<TableDef> {
    let mut t = e.begin(Isolation::ReadCommitted);
    let cols = vec![
        ColumnDef {
            name: "id".into(),
            ty: TypeId::Int4,
            not_null: true,
            typmod: -1,
            declared: Default::default(),
        },
        ColumnDef {
            name: "pad".into(),
            ty: TypeId::Text,
            not_null: true,
            typmod: -1,
            declared: Default::default(),
        },
    ];
    t.create_table(name, cols, 100).unwrap();
    t.commit().unwrap();
    e.catalog_view().unwrap().table(name).unwrap()
}

fn fill(e: &Engine, def: &TableDef, rows: i32, pad: usize) {
    let mut t = e.begin(Isolation::ReadCommitted);
    let batch: Vec<Vec<Datum>> = (0..rows)
        .map(|i| vec![Datum::Int4(i), Datum::Text("x".repeat(pad))])
        .collect();
    t.insert_many(def, &batch).unwrap();
    t.commit().unwrap();
}

fn pages(e: &Engine, def: &TableDef) -> u32 {
    let t = e.begin(Isolation::ReadCommitted);
    t.table_pages(def).unwrap()
}

/// Scans `def` in full; returns (rows seen, sum of ids).
fn scan(e: &Engine, def: &TableDef) -> (u64, i64) {
    let mut t = e.begin(Isolation::ReadCommitted);
    let (mut n, mut sum) = (0u64, 0i64);
    t.scan_columns_borrowed(def, &[true, false], |_, r| {
        n += 1;
        if let Datum::Int4(v) = r[0] {
            sum += v as i64;
        }
        Ok(true)
    })
    .unwrap();
    t.commit().unwrap();
    (n, sum)
}

#[test]
fn a_large_scan_reads_through_its_ring_and_leaves_the_pool_alone() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let hot = table(&e, "hot");
    fill(&e, &hot, 400, 100);
    let big = table(&e, "big");
    // ~1 KB rows: 7 to a page, 6,000 rows ≈ 860 pages, well past the 512-frame pool.
    let rows = 6000;
    fill(&e, &big, rows, 1000);
    let blocks = pages(&e, &big);
    assert!(blocks > 600, "the big table has {blocks} pages");
    let expect_sum = (0..rows as i64).sum::<i64>();

    // A first scan sets the fresh rows' hint bits: each page it dirties leaves the ring
    // for the pool, as a vacuum's does, so how much of the pool it takes depends on
    // whether the page writers cleaned the load's pages first. The checkpoint writes
    // them all; what is measured below is the ring over clean pages.
    assert_eq!(scan(&e, &big), (rows as u64, expect_sum));
    e.checkpoint(walrus_engine::engine::CheckpointReason::Requested)
        .unwrap();
    let stats = &e.pool().stats;
    // Warm the small table, then scan the big one twice.
    assert_eq!(scan(&e, &hot).0, 400);
    for _ in 0..2 {
        let (reuses, misses) = (
            stats.ring_reuses.load(Ordering::Relaxed),
            stats.misses.load(Ordering::Relaxed),
        );
        assert_eq!(scan(&e, &big), (rows as u64, expect_sum));
        let reused = stats.ring_reuses.load(Ordering::Relaxed) - reuses;
        let missed = stats.misses.load(Ordering::Relaxed) - misses;
        // The pool cannot hold the table, so the scan reads pages in; every read past
        // the ring's first fill reuses a ring frame (less the few whose frame was
        // pinned or dirty at that moment). Pages still resident are hits.
        assert!(missed > 300, "{missed} pages read of {blocks}");
        assert!(
            reused as usize >= (missed as usize - SCAN_RING_FRAMES) * 9 / 10,
            "{reused} ring reuses for {missed} pages read"
        );
    }
    // The small table was not evicted by the two big scans: reading it again misses
    // nothing.
    let misses = stats.misses.load(Ordering::Relaxed);
    assert_eq!(scan(&e, &hot).0, 400);
    assert_eq!(
        stats.misses.load(Ordering::Relaxed) - misses,
        0,
        "the small table's pages were evicted by the big scans"
    );
}

#[test]
fn a_table_within_a_quarter_of_the_pool_stays_cached() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let t = table(&e, "small");
    // ~100 pages: under the ring threshold of 128, so a scan keeps its pages.
    fill(&e, &t, 700, 1000);
    let blocks = pages(&e, &t);
    assert!((64..=128).contains(&blocks), "{blocks} pages");
    scan(&e, &t);
    let stats = &e.pool().stats;
    let (misses, reuses) = (
        stats.misses.load(Ordering::Relaxed),
        stats.ring_reuses.load(Ordering::Relaxed),
    );
    assert_eq!(scan(&e, &t).0, 700);
    assert_eq!(stats.misses.load(Ordering::Relaxed), misses);
    assert_eq!(stats.ring_reuses.load(Ordering::Relaxed), reuses);
}

/// VACUUM and ANALYZE of a table larger than a quarter of the pool read it through a
/// ring too: a small table kept in the pool is still there after them.
#[test]
fn vacuum_and_analyze_of_a_large_table_leave_the_pool_alone() {
    let dir = tempfile::tempdir().unwrap();
    let big = {
        let e = engine(dir.path());
        let big = table(&e, "big");
        fill(&e, &big, 6000, 1000);
        // Hints set and written: the pages the later passes read are clean.
        e.vacuum_with(Some("big"), None).unwrap();
        e.shutdown().unwrap();
        big
    };
    // After a restart no page is known settled: the vacuum visits every one.
    let e = Engine::open(dir.path()).unwrap().0;
    let hot = table(&e, "hot");
    fill(&e, &hot, 400, 100);
    assert_eq!(scan(&e, &hot).0, 400);
    let stats = &e.pool().stats;
    let (misses, reuses) = (
        stats.misses.load(Ordering::Relaxed),
        stats.ring_reuses.load(Ordering::Relaxed),
    );
    let report = e.vacuum_with(Some("big"), None).unwrap().remove(0);
    assert_eq!(
        report.pages_skipped, 0,
        "every page visited after the restart"
    );
    assert_eq!(report.counts.live, 6000);
    let mut t = e.begin(Isolation::ReadCommitted);
    let sample = t.sample_rows(&big, 100_000, 7).unwrap();
    t.commit().unwrap();
    assert_eq!(
        sample.blocks_read, sample.blocks,
        "the sample read every block"
    );
    assert!(
        stats.misses.load(Ordering::Relaxed) - misses > 1000,
        "both passes read the big table in"
    );
    assert!(
        stats.ring_reuses.load(Ordering::Relaxed) - reuses > 1000,
        "both passes reused their ring frames"
    );
    let misses = stats.misses.load(Ordering::Relaxed);
    assert_eq!(scan(&e, &hot).0, 400);
    assert_eq!(
        stats.misses.load(Ordering::Relaxed) - misses,
        0,
        "the small table's pages were evicted by vacuum or analyze"
    );
}
