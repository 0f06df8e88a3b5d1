//! ANALYZE: what it gathers (row and page counts, null fraction, distinct counts,
//! average width), where it shows (`pg_stats`, `pg_class.reltuples` / `relpages`), that
//! it is transactional and durable (a catalog row: it survives a restart), and that a
//! TRUNCATE or DROP leaves no stale statistics.

mod common;

use common::{engine, err, ok};
use walrus_sql::Session;

fn rows(s: &mut Session, sql: &str) -> Vec<String> {
    common::text_rows(s, sql)
}

const STATS: &str = "select attname, null_frac, n_distinct, avg_width, most_common_vals \
                     from pg_stats where tablename = 't' order by attname";
const CLASS: &str = "select reltuples, relpages > 0 from pg_class where relname = 't'";

fn setup(s: &mut Session) {
    ok(
        s,
        "create table t (id int primary key, g int, note text, flag bool)",
    );
    // 1000 rows: id unique, g ten values, note NULL in a quarter of the rows and
    // 'x' || (id % 500) otherwise (500 values), flag all NULL.
    ok(
        s,
        "insert into t select i, i % 10, case when i % 4 = 0 then null else 'x' || (i % 500) end, null \
         from generate_series(1, 1000) i",
    );
}

#[test]
fn analyze_fills_pg_stats_and_pg_class() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Session::new(engine(dir.path()));
    setup(&mut s);
    // Never analyzed: no pg_stats rows, PostgreSQL's -1 rows.
    assert!(rows(&mut s, STATS).is_empty());
    assert_eq!(rows(&mut s, CLASS), ["-1|f"]);
    assert_eq!(err(&mut s, "analyze nosuch"), "42P01");
    ok(&mut s, "analyze t");
    assert_eq!(
        rows(&mut s, STATS),
        [
            "flag|1|0|1|NULL",
            "g|0|10|4|NULL",
            "id|0|-1|4|NULL",
            // 375 distinct values among 750 non-null of 1000 rows: above a tenth, so
            // a fraction of the rows.
            "note|0.25|-0.375|4|NULL",
        ]
    );
    assert_eq!(rows(&mut s, CLASS), ["1000|t"]);

    // A rolled-back ANALYZE leaves the earlier statistics.
    ok(
        &mut s,
        "insert into t select i, 0, null, true from generate_series(1001, 3000) i",
    );
    ok(&mut s, "begin");
    ok(&mut s, "analyze");
    assert_eq!(rows(&mut s, CLASS), ["3000|t"]);
    ok(&mut s, "rollback");
    assert_eq!(rows(&mut s, CLASS), ["1000|t"]);
    ok(&mut s, "analyze");
    assert_eq!(rows(&mut s, CLASS), ["3000|t"]);

    // TRUNCATE makes a new file: its statistics are not the table's any more.
    ok(&mut s, "truncate t");
    assert!(rows(&mut s, STATS).is_empty());
    assert_eq!(rows(&mut s, CLASS), ["-1|f"]);
    ok(&mut s, "analyze t");
    assert_eq!(rows(&mut s, CLASS), ["0|f"]);
    // A dropped table's namesake starts without statistics.
    ok(&mut s, "drop table t");
    setup(&mut s);
    assert!(rows(&mut s, STATS).is_empty());
}

#[test]
fn statistics_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let before = {
        let e = engine(dir.path());
        let mut s = Session::new(e.clone());
        setup(&mut s);
        ok(&mut s, "analyze");
        let before = (rows(&mut s, STATS), rows(&mut s, CLASS));
        drop(s);
        e.shutdown().unwrap();
        before
    };
    let e = walrus_engine::Engine::open(dir.path()).unwrap().0;
    let mut s = Session::new(e.clone());
    assert_eq!((rows(&mut s, STATS), rows(&mut s, CLASS)), before);
    assert_eq!(before.1, ["1000|t"]);
    drop(s);
    // And after a crash (no shutdown checkpoint): redo replays the catalog row.
    let mut s = Session::new(e.clone());
    ok(
        &mut s,
        "insert into t select i, 1, null, null from generate_series(1001, 1500) i",
    );
    ok(&mut s, "analyze t");
    drop(s);
    e.shutdown_immediate();
    drop(e);
    let e = walrus_engine::Engine::open(dir.path()).unwrap().0;
    let mut s = Session::new(e);
    assert_eq!(rows(&mut s, CLASS), ["1500|t"]);
}

fn plan(s: &mut Session, sql: &str) -> Vec<String> {
    rows(s, &format!("explain {sql}"))
}

/// EXPLAIN names the nodes walrus runs, with row estimates from the statistics, and
/// the statistics change the access path: a range holding a large share of the rows
/// is read by the sequential scan.
#[test]
fn explain_shows_the_plan_chosen_from_statistics() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Session::new(engine(dir.path()));
    ok(
        &mut s,
        "create table acc (aid int primary key, bid int, abalance int, filler text)",
    );
    ok(
        &mut s,
        "insert into acc select i, i % 10, (i * 7919) % 1000, 'f' from generate_series(1, 10000) i",
    );
    let wide = "select count(*) from acc where aid between 1 and 5000";
    // Without statistics a closed integer range always takes the index (estimated
    // with PostgreSQL's default range selectivity, 0.005 of an assumed 1000 rows).
    assert_eq!(
        plan(&mut s, wide),
        [
            "Aggregate  (rows=1)",
            "  ->  Index Scan using acc_pkey on acc  (rows=5)",
            // The range is the whole WHERE clause: no filter on its rows.
            "        Index Cond: (aid >= 1 AND aid <= 5000)",
        ]
    );
    ok(&mut s, "analyze acc");
    assert_eq!(
        plan(&mut s, wide),
        [
            "Aggregate  (rows=1)",
            "  ->  Seq Scan on acc  (rows=5000)",
            "        Filter: (aid BETWEEN 1 AND 5000)",
        ]
    );
    assert_eq!(rows(&mut s, wide), ["5000"]);
    let narrow = "select count(*) from acc where aid between 101 and 200";
    assert_eq!(
        plan(&mut s, narrow),
        [
            "Aggregate  (rows=1)",
            "  ->  Index Scan using acc_pkey on acc  (rows=100)",
            "        Index Cond: (aid >= 101 AND aid <= 200)",
        ]
    );
    assert_eq!(rows(&mut s, narrow), ["100"]);
    // A conjunct on another column keeps the filter on the range's rows.
    let mixed = "select count(*) from acc where aid between 101 and 200 and bid = 3";
    let mixed_plan = plan(&mut s, mixed);
    assert!(
        mixed_plan
            .iter()
            .any(|l| l.contains("Index Cond: (aid >= 101 AND aid <= 200)"))
            && mixed_plan
                .iter()
                .any(|l| l.trim_start().starts_with("Filter:")),
        "{mixed_plan:?}"
    );
    assert_eq!(rows(&mut s, mixed), ["10"]);
    assert_eq!(
        plan(&mut s, "select * from acc where aid = 7"),
        [
            "Index Scan using acc_pkey on acc  (rows=1)",
            "  Index Cond: (aid = 7)",
            "  Filter: (aid = 7)",
        ]
    );
    // Ten values of bid: an equality keeps a tenth, a grouping makes ten groups.
    assert_eq!(
        plan(&mut s, "select sum(abalance) from acc where bid = 3"),
        [
            "Aggregate  (rows=1)",
            "  ->  Seq Scan on acc  (rows=1000)",
            "        Filter: (bid = 3)",
        ]
    );
    assert_eq!(
        plan(
            &mut s,
            "select bid, count(*) from acc group by bid having count(*) > 1 order by bid"
        ),
        [
            "Sort  (rows=10)",
            "  Sort Key: bid",
            "  ->  HashAggregate  (rows=10)",
            "        Group Key: bid",
            "        Filter: (count(*) > 1)",
            "        ->  Seq Scan on acc  (rows=10000)",
        ]
    );
    assert_eq!(
        plan(
            &mut s,
            "select aid from acc order by abalance desc, aid limit 5"
        ),
        [
            "Limit  (rows=5)",
            "  ->  Sort  (rows=10000)",
            "        Sort Key: abalance DESC, aid",
            "        Sort Method: top-N heapsort of 5 rows",
            "        ->  Seq Scan on acc  (rows=10000)",
        ]
    );
    assert_eq!(
        plan(
            &mut s,
            "select distinct bid from acc where abalance < 100 limit 3"
        ),
        [
            "Limit  (rows=3)",
            "  ->  HashAggregate  (rows=1000)",
            "        Group Key: bid",
            "        ->  Seq Scan on acc  (rows=1000)",
            "              Filter: (abalance < 100)",
        ]
    );
    assert_eq!(plan(&mut s, "select 1"), ["Result  (rows=1)"]);
    // What walrus cannot state exactly is refused, not approximated.
    for sql in [
        "select * from acc a join acc b using (aid)",
        "select * from acc where aid in (select bid from acc)",
        "select row_number() over () from acc",
        "select * from pg_class",
    ] {
        assert_eq!(err(&mut s, &format!("explain {sql}")), "0A000", "{sql}");
    }
    assert_eq!(err(&mut s, "explain analyze select 1"), "0A000");
}

#[test]
fn vacuum_analyze_analyzes() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Session::new(engine(dir.path()));
    setup(&mut s);
    ok(&mut s, "vacuum t");
    assert_eq!(rows(&mut s, CLASS), ["-1|f"]);
    ok(&mut s, "vacuum analyze t");
    assert_eq!(rows(&mut s, CLASS), ["1000|t"]);
    ok(
        &mut s,
        "insert into t select i, 1, null, null from generate_series(1001, 1100) i",
    );
    ok(&mut s, "vacuum (analyze)");
    assert_eq!(rows(&mut s, CLASS), ["1100|t"]);
}

/// A table larger than the sample (`default_statistics_target = 1`: 300 blocks and
/// 300 rows) is sampled: the row count is an estimate from the blocks read, close to
/// the truth; distinct counts are extrapolated; the plans stay the sane ones.
#[test]
fn a_large_table_is_sampled() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Session::new(engine(dir.path()));
    ok(
        &mut s,
        "create table big (id int primary key, g int, pad text)",
    );
    ok(
        &mut s,
        "insert into big select i, i % 10, repeat('p', 100) from generate_series(1, 40000) i",
    );
    ok(&mut s, "set default_statistics_target = 1");
    assert_eq!(rows(&mut s, "show default_statistics_target"), ["1"]);
    ok(&mut s, "analyze big");
    let class = rows(
        &mut s,
        "select reltuples, relpages from pg_class where relname = 'big'",
    );
    let (tuples, pages) = class[0].split_once('|').unwrap();
    let tuples: f64 = tuples.parse().unwrap();
    let pages: u32 = pages.parse().unwrap();
    assert!(pages > 600, "{pages} pages: more than the 300 sampled");
    assert!(
        (tuples - 40_000.0).abs() <= 0.03 * 40_000.0,
        "estimated {tuples} rows of 40000"
    );
    assert_eq!(
        rows(
            &mut s,
            "select attname, null_frac, n_distinct from pg_stats where tablename = 'big' order by attname"
        ),
        ["g|0|10", "id|0|-1", "pad|0|1"]
    );
    let plan_of =
        |s: &mut Session, sql: &str| plan(s, sql)[1].split("  (").next().unwrap().to_string();
    assert_eq!(
        plan_of(
            &mut s,
            "select count(*) from big where id between 1 and 30000"
        ),
        "  ->  Seq Scan on big"
    );
    assert_eq!(
        plan_of(
            &mut s,
            "select count(*) from big where id between 100 and 200"
        ),
        "  ->  Index Scan using big_pkey on big"
    );
    // The full target reads the table whole again: exact.
    ok(&mut s, "reset default_statistics_target");
    ok(&mut s, "analyze big");
    assert_eq!(
        rows(
            &mut s,
            "select reltuples from pg_class where relname = 'big'"
        ),
        ["40000"]
    );
}

#[test]
fn default_statistics_target_takes_postgresql_range() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Session::new(engine(dir.path()));
    assert_eq!(rows(&mut s, "show default_statistics_target"), ["100"]);
    for bad in ["0", "10001", "-1", "'abc'", "99999999999"] {
        assert_eq!(
            err(&mut s, &format!("set default_statistics_target = {bad}")),
            "22023",
            "{bad}"
        );
    }
    // Integer spellings PostgreSQL reads differently (rounded, octal, hex): refused.
    for other in ["1.5", "'010'", "'0x10'"] {
        assert_eq!(
            err(&mut s, &format!("set default_statistics_target = {other}")),
            "0A000",
            "{other}"
        );
    }
    ok(&mut s, "set default_statistics_target = 10000");
    assert_eq!(rows(&mut s, "show default_statistics_target"), ["10000"]);
    ok(&mut s, "set default_statistics_target to default");
    assert_eq!(rows(&mut s, "show default_statistics_target"), ["100"]);
}

/// Autovacuum analyzes a table once its changes since the last ANALYZE pass 50 + 10%
/// of its rows: `pg_stat_user_tables` counts it and the planner's row count follows.
#[test]
fn autovacuum_analyzes_changed_tables() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = walrus_engine::settings::default_config_text(1 << 20)
        .replace("shared_buffers = \"128MB\"", "shared_buffers = \"8MB\"")
        .replace(
            "wal_sync_method = \"fdatasync\"",
            "wal_sync_method = \"none\"",
        )
        .replace(
            "autovacuum_naptime = \"1min\"",
            "autovacuum_naptime = \"50ms\"",
        );
    walrus_engine::Engine::init(dir.path(), Some(&cfg)).unwrap();
    let e = walrus_engine::Engine::open(dir.path()).unwrap().0;
    let mut s = Session::new(e.clone());
    let counts = "select analyze_count, autoanalyze_count, n_mod_since_analyze, \
                  last_analyze is not null, last_autoanalyze is not null \
                  from pg_stat_user_tables where relname = 't'";
    let wait_for = |s: &mut Session, autoanalyzes: &str| {
        let start = std::time::Instant::now();
        loop {
            let r = rows(s, counts);
            if r[0].split('|').nth(1) == Some(autoanalyzes) {
                return r;
            }
            assert!(
                start.elapsed() < std::time::Duration::from_secs(30),
                "no autoanalyze: {r:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    ok(&mut s, "create table t (id int, g int)");
    // 40 changes: under the threshold of 50.
    ok(
        &mut s,
        "insert into t select i, i % 7 from generate_series(1, 40) i",
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(rows(&mut s, counts), ["0|0|40|f|f"]);
    assert_eq!(
        plan(&mut s, "select * from t")[0],
        "Seq Scan on t  (rows=1000)"
    );
    ok(
        &mut s,
        "insert into t select i, i % 7 from generate_series(41, 2000) i",
    );
    assert_eq!(wait_for(&mut s, "1"), ["0|1|0|f|t"]);
    assert_eq!(
        plan(&mut s, "select * from t")[0],
        "Seq Scan on t  (rows=2000)"
    );
    assert_eq!(
        rows(&mut s, "select reltuples from pg_class where relname = 't'"),
        ["2000"]
    );
    // 50 + 10% of 2000 = 250: 240 deletes stay under it (the bar does not drop with
    // them), 20 updates more pass it.
    ok(&mut s, "delete from t where id <= 240");
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(rows(&mut s, counts), ["0|1|240|f|t"]);
    ok(&mut s, "update t set g = 0 where id between 241 and 260");
    wait_for(&mut s, "2");
    assert_eq!(
        plan(&mut s, "select * from t")[0],
        "Seq Scan on t  (rows=1760)"
    );
    // A manual ANALYZE counts as one.
    ok(&mut s, "analyze t");
    assert_eq!(rows(&mut s, counts), ["1|2|0|t|t"]);
    drop(s);
    e.shutdown().unwrap();
}
