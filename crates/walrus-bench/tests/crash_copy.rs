//! Crash test for bulk COPY (the heap multi-insert path): a real `walrus serve` loads
//! tens of thousands of rows per `\copy` (psql, one transaction each) into a table with
//! a primary key and a secondary index, and is SIGKILLed while a COPY runs (at a varied
//! point, scaled to how long the committed pre-fill COPY took) or right after a COPY's
//! commit reached the client. After each restart (recovery) the test checks:
//! - every COPY acknowledged as committed is fully there (count by its `batch` column);
//! - the interrupted COPY is all or nothing;
//! - the indexes agree with the heap: counts through the primary key range, the
//!   secondary index range and a predicate no index serves match, and sampled keys of
//!   every batch are found (or not) by primary-key lookup exactly as their batch is;
//! - after a clean stop at the end, `walrus verify` passes every page.
//!
//! The power-loss model (powerloss.rs) journals writes inside the TPC-B child process,
//! which `walrus serve` does not do, so only SIGKILL is tested here.
//!
//! Cycles: 8 per mode by default (`WALRUS_COPY_CRASH_CYCLES`); rows per COPY 50000 (about 6 MB)
//! (`WALRUS_COPY_CRASH_ROWS`). `WALRUS_TEST_SEED` replays the kill timings.

mod common;

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{text, walrus, Rng, SqlServer as Server};

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One COPY's rows: ids `first..first+rows`, all with `batch`; `k` runs backwards so the
/// secondary index is filled in another order than the heap.
fn write_batch(path: &Path, batch: u64, first: u64, rows: u64) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    for id in first..first + rows {
        writeln!(
            f,
            "{id}\t{batch}\t{}\tbatch {batch} row {id}: the quick brown fox jumps over the lazy dog, {} {}",
            10_000_000 - id,
            id.wrapping_mul(2_654_435_761) % 1_000_003,
            "x".repeat((id % 40) as usize)
        )
        .unwrap();
    }
    f.flush().unwrap();
}

/// Index/heap consistency and per-batch counts; returns the row count of each batch.
fn check(s: &Server, batches: &[(u64, u64, u64)], cycle: u64) -> Vec<i64> {
    let total = s.int("select count(*) from t");
    // A predicate no index serves (note is not indexed): a sequential scan.
    let by_seq = s.int("select count(*) from t where note like 'batch %'");
    let by_pk = s.int("select count(*) from t where id >= 0 and id < 100000000");
    let by_k = s.int("select count(*) from t where k > -100000000 and k <= 10000000");
    assert_eq!(
        (by_seq, by_pk, by_k),
        (total, total, total),
        "cycle {cycle}: seq-scan / primary-key range / secondary range counts disagree"
    );
    let mut counts = Vec::new();
    let mut sum = 0;
    for &(batch, first, rows) in batches {
        let n = s.int(&format!("select count(*) from t where batch = {batch}"));
        sum += n;
        // Sampled keys through the primary key and the secondary index: found exactly
        // when their batch is present, with the row the COPY wrote.
        let present = i64::from(n > 0);
        for id in [
            first,
            first + rows / 3,
            first + rows / 2 + 1,
            first + rows - 1,
        ] {
            let by_id = s.int(&format!(
                "select count(*) from t where id = {id} and batch = {batch} and k = {}",
                10_000_000 - id
            ));
            let by_key = s.int(&format!(
                "select count(*) from t where k = {} and id = {id}",
                10_000_000 - id
            ));
            assert_eq!(
                (by_id, by_key),
                (present, present),
                "cycle {cycle}: batch {batch} has {n} rows but key {id} is found {by_id} (pk) / {by_key} (k)"
            );
        }
        counts.push(n);
    }
    assert_eq!(sum, total, "cycle {cycle}: rows outside any batch");
    counts
}

fn crash_copy_cycles(settings: &str) {
    let rows = env_or("WALRUS_COPY_CRASH_ROWS", 50_000);
    let cycles = env_or("WALRUS_COPY_CRASH_CYCLES", 8).max(2);
    let mut rng = Rng::from_env();
    let tmp = tempfile::tempdir().unwrap();
    let mut s = Server::new(tmp.path(), settings);
    s.start();
    s.psql("create table t (id int primary key, batch int not null, k int not null, note text)");
    s.psql("create index t_k on t (k)");

    // (batch, first id, rows) of every COPY started, and the row count each must have
    // (None: interrupted and not yet recovered once, so none or all).
    let mut batches: Vec<(u64, u64, u64)> = Vec::new();
    let mut expected: Vec<Option<i64>> = Vec::new();
    let file = tmp.path().join("batch.tsv");
    write_batch(&file, 0, 0, rows);
    let started = Instant::now();
    let o = s.copy_command(&file).output().unwrap();
    assert!(o.status.success(), "pre-fill COPY: {}", text(&o));
    let copy_ms = started.elapsed().as_millis() as u64;
    eprintln!("pre-fill COPY of {rows} rows took {copy_ms} ms");
    batches.push((0, 0, rows));
    expected.push(Some(rows as i64));

    let mut interrupted = 0;
    for cycle in 1..=cycles {
        let first = cycle * rows;
        write_batch(&file, cycle, first, rows);
        let copy = s.copy_command(&file).spawn().unwrap();
        // The last cycle kills right after the commit reached the client; the others at
        // a varied point of the COPY.
        let copy_ok = if cycle == cycles {
            let o = copy.wait_with_output().unwrap();
            s.kill();
            assert!(o.status.success(), "cycle {cycle}: COPY: {}", text(&o));
            true
        } else {
            // The first kill lands early in the COPY for sure; the others anywhere in
            // it or just after it.
            let delay = if cycle == 1 {
                copy_ms / 4
            } else {
                rng.range(copy_ms / 20 + 1, copy_ms + copy_ms / 5 + 2)
            };
            std::thread::sleep(Duration::from_millis(delay));
            s.kill();
            let o = copy.wait_with_output().unwrap();
            eprintln!(
                "cycle {cycle}: killed after {delay} ms, COPY {}",
                if o.status.success() {
                    "acknowledged"
                } else {
                    "interrupted"
                }
            );
            o.status.success()
        };
        interrupted += u64::from(!copy_ok);
        batches.push((cycle, first, rows));
        expected.push(copy_ok.then_some(rows as i64));

        s.start();
        let counts = check(&s, &batches, cycle);
        for (i, &n) in counts.iter().enumerate() {
            let (batch, _, rows) = batches[i];
            if let Some(want) = expected[i] {
                assert_eq!(
                    n, want,
                    "cycle {cycle}: COPY {batch} (acknowledged or recovered before) has {n} rows, not {want}"
                );
            } else {
                assert!(
                    n == 0 || n == rows as i64,
                    "cycle {cycle}: interrupted COPY {batch} is partly there: {n} of {rows} rows"
                );
            }
        }
        eprintln!("cycle {cycle}: counts {counts:?}");
        // What one recovery decided for an interrupted COPY holds from now on.
        for (i, &n) in counts.iter().enumerate() {
            expected[i] = Some(n);
        }
    }
    assert!(
        interrupted > 0,
        "no kill landed during a COPY: the test did not exercise an interrupted COPY"
    );
    s.stop();
    let v = walrus().arg("verify").arg(&s.data).output().unwrap();
    assert!(v.status.success(), "walrus verify: {}", text(&v));
}

#[test]
fn crash_copy_fpw() {
    crash_copy_cycles(
        "page_protection = \"fpw\"\nwal_sync_method = \"fdatasync\"\nshared_buffers = \"2MB\"\n",
    );
}

#[test]
fn crash_copy_dwb() {
    crash_copy_cycles(
        "page_protection = \"dwb\"\ndwb_batch_pages = 16\nwal_sync_method = \"fdatasync\"\nshared_buffers = \"2MB\"\n",
    );
}
