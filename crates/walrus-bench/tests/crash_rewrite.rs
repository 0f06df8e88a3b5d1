//! Crash test for table rewrites (issue 43, item 4): a real `walrus serve` runs
//! `ALTER TABLE ... ALTER COLUMN a TYPE bigint` / `... TYPE int` (each a rewrite of every
//! row into a new file, with the primary key and a secondary index rebuilt) and is
//! SIGKILLed at a varied point, some cycles mid-rewrite. After each restart:
//! - the column's type is the old one or the new one, never anything else;
//! - every row is there, with its values (count, sums, a point lookup through the
//!   primary key, a lookup through the secondary index);
//! - the next rewrite works on the recovered table.
//!
//! A last cycle kills a DROP COLUMN the same way. At the end `walrus verify` passes
//! every page. Cycles: 4 (`WALRUS_REWRITE_CRASH_CYCLES`); `WALRUS_TEST_SEED` replays
//! the kill timings.

mod common;

use std::time::Duration;

use common::{text, walrus, Rng, SqlServer};

const ROWS: i64 = 200_000;

/// What must hold after a restart, whatever the crash interrupted.
fn check_rows(s: &SqlServer, cycle: u64) {
    assert_eq!(
        s.int("select count(*) from w"),
        ROWS,
        "cycle {cycle}: rows lost"
    );
    assert_eq!(
        s.int("select sum(id) from w"),
        ROWS * (ROWS + 1) / 2,
        "cycle {cycle}: ids changed"
    );
    assert_eq!(
        s.int("select sum(a::bigint) from w"),
        3 * ROWS * (ROWS + 1) / 2,
        "cycle {cycle}: values of the rewritten column changed"
    );
    assert_eq!(
        s.int("select a::bigint from w where id = 12345"),
        3 * 12345,
        "cycle {cycle}: primary-key lookup"
    );
    assert_eq!(
        s.int("select count(*) from w where c = 7"),
        ROWS / 100,
        "cycle {cycle}: secondary-index lookup"
    );
}

fn column_type(s: &SqlServer, column: &str) -> String {
    let o = s.psql(&format!(
        "select data_type from information_schema.columns where table_name = 'w' and column_name = '{column}'"
    ));
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

#[test]
fn crash_during_table_rewrites_leaves_the_old_table_or_the_new() {
    let cycles = std::env::var("WALRUS_REWRITE_CRASH_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4u64);
    let mut rng = Rng::from_env();
    let tmp = tempfile::tempdir().unwrap();
    let mut s = SqlServer::new(
        tmp.path(),
        "page_protection = \"fpw\"\nwal_sync_method = \"fdatasync\"\nshared_buffers = \"8MB\"\n",
    );
    s.start();
    s.psql("create table w (id int primary key, a int not null, b text, c int)");
    s.psql(&format!(
        "insert into w select g, 3 * g, 'row ' || g, g % 100 from generate_series(1, {ROWS}) g"
    ));
    s.psql("create index w_c on w (c)");
    let mut interrupted = 0;
    for cycle in 1..=cycles {
        let before = column_type(&s, "a");
        let target = if before == "integer" {
            "bigint"
        } else {
            "integer"
        };
        let mut alter = s
            .psql_command(&format!("alter table w alter column a type {target}"))
            .spawn()
            .expect("spawn psql");
        std::thread::sleep(Duration::from_millis(rng.range(20, 700)));
        s.kill();
        let finished = alter.wait().unwrap().success();
        s.start();
        let after = column_type(&s, "a");
        assert!(
            after == before || after == target,
            "cycle {cycle}: column a is {after:?}, neither {before} nor {target}"
        );
        if finished {
            assert_eq!(
                after, target,
                "cycle {cycle}: an acknowledged ALTER was lost"
            );
        } else {
            interrupted += 1;
        }
        check_rows(&s, cycle);
        eprintln!("cycle {cycle}: {before} -> {target}: now {after} (acknowledged: {finished})");
    }
    // DROP COLUMN killed the same way: b is there with its values, or gone.
    let mut drop = s
        .psql_command("alter table w drop column b")
        .spawn()
        .expect("spawn psql");
    std::thread::sleep(Duration::from_millis(rng.range(20, 800)));
    s.kill();
    let dropped = drop.wait().unwrap().success();
    s.start();
    let b = column_type(&s, "b");
    if dropped {
        assert_eq!(b, "", "an acknowledged DROP COLUMN was lost");
    }
    if b.is_empty() {
        assert_eq!(
            s.int("select count(*) from information_schema.columns where table_name = 'w'"),
            3
        );
    } else {
        assert_eq!(s.int("select count(*) from w where b = 'row ' || id"), ROWS);
    }
    check_rows(&s, cycles + 1);
    // The recovered table takes another rewrite.
    s.psql("alter table w alter column c type bigint");
    check_rows(&s, cycles + 2);
    s.stop();
    let v = walrus().arg("verify").arg(&s.data).output().unwrap();
    assert!(v.status.success(), "walrus verify: {}", text(&v));
    eprintln!("{interrupted} of {cycles} rewrites interrupted by the kill");
}
