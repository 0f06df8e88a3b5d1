//! Parallel aggregation (`exec/parallel.rs`): an aggregate without GROUP BY over a
//! table past `min_parallel_table_scan_size` is planned as PostgreSQL plans it (Finalize
//! Aggregate → Gather → Partial Aggregate → Parallel Seq Scan), really runs on helper
//! threads (`walrus_stat_parallel`), and answers exactly what the serial plan answers
//! (`max_parallel_workers_per_gather = 0`) — sums exact, the transaction's own changes
//! seen, errors the serial scan's — while what it cannot merge exactly runs serially;
//! and ORDER BY ... LIMIT over such a table runs as parallel top-N with the serial
//! answer.

mod common;

use common::{engine, err, ok};
use walrus_sql::Session;

fn rows(s: &mut Session, sql: &str) -> Vec<String> {
    common::text_rows(s, sql)
}

fn plan(s: &mut Session, q: &str) -> Vec<String> {
    rows(s, &format!("explain {q}"))
}

/// (parallel scans, helpers launched, serial reruns).
fn counters(s: &mut Session) -> (i64, i64, i64) {
    let r = rows(
        s,
        "select scans, workers_launched, serial_reruns from walrus_stat_parallel",
    );
    let v: Vec<i64> = r[0].split('|').map(|x| x.parse().unwrap()).collect();
    (v[0], v[1], v[2])
}

/// ~200-byte rows: 60,000 of them fill ~1,600 pages, past PostgreSQL's 8 MB minimum
/// (one helper) and short of three times it (two); and a small table to join.
fn setup(s: &mut Session) {
    ok(
        s,
        "create table big (id int, g int, v numeric(12,2), f float8, pad text)",
    );
    ok(
        s,
        "insert into big select i, i % 7, i * 0.25, i * 0.5, repeat('x', 160) || i \
         from generate_series(1, 60000) i",
    );
    ok(s, "analyze big");
    // The hashed side of a join: g 1..5 (0 and 6 match nothing).
    ok(s, "create table small (g int primary key, name text)");
    ok(
        s,
        "insert into small select i, 'g' || i from generate_series(1, 5) i",
    );
    // Runs of 1,000 rows sharing a key (a table clustered on it), and a hashed side with
    // several rows per key: a participant reuses the last key's group and join hits,
    // and rebuilds the joined row in place.
    ok(
        s,
        "create table runs as select id / 1000 as k, id, pad from big order by id",
    );
    ok(s, "analyze runs");
    ok(s, "create table pair (g int, tag text)");
    ok(
        s,
        "insert into pair values (1, 'a'), (1, 'b'), (3, 'c'), (3, 'd'), (3, 'e'), (7, 'f')",
    );
}

const QUERIES: &[&str] = &[
    "select count(*) from big",
    "select count(*), sum(id), avg(id), min(id), max(id) from big where g = 3",
    "select sum(v), avg(v), min(v), max(v) from big where id % 5 = 1",
    "select count(g), min(pad), max(pad) from big where id > 100 and id <= 50000",
    "select bool_and(id > 0), bool_or(g = 6), every(g < 7) from big",
    "select count(*), sum(id), max(v) from big where id < 0",
    "select count(*) from big having count(*) > 5",
    "select sum(f) from big",
    "select g, count(*), sum(id), min(pad) from big group by g",
    "select g, sum(v) from big where id % 3 = 0 group by g having sum(v) > 100 order by 2 desc",
    "select id % 1000, count(*), max(v) from big group by id % 1000 order by 1 limit 5",
    "select pad, count(*) from big where id <= 3000 group by pad order by pad limit 3",
    "select s.name, count(*), sum(b.id) from big b join small s on b.g = s.g group by s.name",
    "select count(*), max(b.v) from big b join small s on s.g = b.g where s.g < 3 and b.id > 10",
    "select k, count(*), sum(id), max(pad) from runs group by k order by k",
    "select s.name, count(*), sum(r.id) from runs r join small s on r.k = s.g group by s.name",
    "select p.tag, count(*), min(r.id), max(r.pad) from runs r join pair p on r.k = p.g group by p.tag",
    "select r.k, p.tag, count(*), sum(r.id) from runs r join pair p on p.g = r.k group by r.k, p.tag order by 1, 2",
    "select b.g, p.tag, count(*), max(b.pad) from big b join pair p on b.g = p.g group by b.g, p.tag order by 1, 2",
];

#[test]
fn large_aggregates_run_in_parallel_with_the_serial_answer() {
    let dir = tempfile::tempdir().unwrap();
    let mut session = Session::new(engine(dir.path()));
    let s = &mut session;
    setup(s);
    assert_eq!(
        plan(s, "select count(*) from big where g = 3"),
        [
            "Finalize Aggregate  (rows=1)",
            "  ->  Gather  (rows=1)",
            "        Workers Planned: 1",
            "        ->  Partial Aggregate  (rows=1)",
            "              ->  Parallel Seq Scan on big  (rows=5042)",
            "                    Filter: (g = 3)",
        ]
    );
    assert_eq!(
        plan(s, "select g, count(*) from big group by g"),
        [
            "Finalize HashAggregate  (rows=7)",
            "  Group Key: g",
            "  ->  Gather  (rows=7)",
            "        Workers Planned: 1",
            "        ->  Partial HashAggregate  (rows=7)",
            "              Group Key: g",
            "              ->  Parallel Seq Scan on big  (rows=35294)",
        ]
    );
    // GROUP BY naming an output column by position or alias: EXPLAIN resolves it as the
    // executor does, so both plan the same parallel aggregate over `g`.
    for q in [
        "select g, count(*) from big group by 1",
        "select g as k, count(*) from big group by k",
    ] {
        let p = plan(s, q);
        assert_eq!(
            p[..2],
            ["Finalize HashAggregate  (rows=7)", "  Group Key: g"],
            "{q}"
        );
        let before = counters(s).0;
        assert_eq!(rows(s, q).len(), 7);
        assert_eq!(counters(s).0, before + 1, "{q} ran in parallel");
    }
    // A float sum's rounding depends on the row order: serial.
    assert_eq!(plan(s, "select sum(f) from big")[0], "Aggregate  (rows=1)");
    let mut parallel = Vec::new();
    let before = counters(s);
    for q in QUERIES {
        parallel.push(rows(s, q));
    }
    let after = counters(s);
    // Every query but the float sum ran in parallel, each with its helper; none ran again.
    assert_eq!(after.0 - before.0, QUERIES.len() as i64 - 1);
    assert_eq!(after.1 - before.1, QUERIES.len() as i64 - 1);
    assert_eq!(after.2, before.2);
    // PostgreSQL's range and errors.
    assert_eq!(err(s, "set max_parallel_workers_per_gather = -1"), "22023");
    assert_eq!(
        err(s, "set max_parallel_workers_per_gather = 'many'"),
        "22023"
    );
    ok(s, "set max_parallel_workers_per_gather = 0");
    assert_eq!(
        plan(s, "select count(*) from big where g = 3")[..2],
        ["Aggregate  (rows=1)", "  ->  Seq Scan on big  (rows=8571)"]
    );
    for (q, want) in QUERIES.iter().zip(&parallel) {
        assert_eq!(&rows(s, q), want, "{q}");
    }
    assert_eq!(counters(s).0, after.0, "no parallel scan with 0 workers");
    assert_eq!(parallel[0], ["60000"]);
    assert_eq!(parallel[5], ["0|NULL|NULL"]);
    // The join's groups: g 1..5, in the order of their first joined rows.
    assert_eq!(parallel[12].len(), 5);
    assert!(
        parallel[12][0].starts_with("g1|8572|"),
        "{:?}",
        parallel[12]
    );
    // Runs of one key: 61 groups (k 0..60); the joins keep each pair row's matches.
    assert_eq!(parallel[14].len(), 61);
    let pad = |id: i64| format!("{}{id}", "x".repeat(160));
    assert_eq!(
        parallel[14][1],
        format!("1|1000|{}|{}", (1000..2000).sum::<i64>(), pad(1999))
    );
    assert_eq!(parallel[15].len(), 5);
    assert_eq!(
        parallel[16],
        [
            format!("a|1000|1000|{}", pad(1999)),
            format!("b|1000|1000|{}", pad(1999)),
            format!("c|1000|3000|{}", pad(3999)),
            format!("d|1000|3000|{}", pad(3999)),
            format!("e|1000|3000|{}", pad(3999)),
            format!("f|1000|7000|{}", pad(7999)),
        ]
    );
    assert_eq!(parallel[17].len(), 6);
    assert_eq!(parallel[18].len(), 5);
    // Groups come in the order of their first rows, as the serial scan gives them.
    assert_eq!(
        parallel[8]
            .iter()
            .map(|r| r.split('|').next().unwrap())
            .collect::<Vec<_>>(),
        ["1", "2", "3", "4", "5", "6", "0"]
    );
    ok(s, "reset max_parallel_workers_per_gather");
    // One test, so no other test's scans move the process-wide counters meanwhile.
    own_changes(s);
    serial_reruns(s);
    top_n(s);
}

/// ORDER BY ... LIMIT over the large table: PostgreSQL's Limit → Gather Merge → Sort →
/// Parallel Seq Scan, each participant keeping its best rows; ties fall as in the
/// serial scan (rows numbered by tid), offsets and WHERE as there.
fn top_n(s: &mut Session) {
    assert_eq!(
        plan(
            s,
            "select id, g from big where id % 3 = 0 order by g desc, id limit 7"
        ),
        [
            "Limit  (rows=7)",
            "  ->  Gather Merge  (rows=300)",
            "        Workers Planned: 1",
            "        ->  Sort  (rows=176)",
            "              Sort Key: g DESC, id",
            "              Sort Method: top-N heapsort of 7 rows",
            "              ->  Parallel Seq Scan on big  (rows=176)",
            "                    Filter: (id % 3 = 0)",
        ]
    );
    let queries = [
        "select id, g from big order by g desc, id limit 7",
        // Ties on the only key: the first rows of the scan win.
        "select id from big order by g limit 4",
        "select id, pad from big where id % 3 = 0 order by g, v desc limit 5 offset 2",
        "select id * 2 as d, g from big order by 2 desc, d desc limit 3",
        "select g, id from big where id > 59990 order by id % 4, g limit 20",
    ];
    let before = counters(s);
    let parallel: Vec<Vec<String>> = queries.iter().map(|q| rows(s, q)).collect();
    let after = counters(s);
    assert_eq!(
        after.0 - before.0,
        queries.len() as i64,
        "each ran in parallel"
    );
    assert_eq!(after.2, before.2, "none ran again serially");
    assert_eq!(parallel[1], ["7", "14", "21", "28"]);
    assert_eq!(parallel[4].len(), 10);
    // Past the row bound, or an expression without a fast form: serial from the start.
    for q in [
        "select id from big order by g limit 20000",
        "select id from big order by nullif(g, 0) limit 3",
    ] {
        assert_eq!(plan(s, q)[1], "  ->  Sort  (rows=60000)", "{q}");
        rows(s, q);
    }
    assert_eq!(counters(s).0, after.0, "no parallel scan for those");
    // An error in a participant: the serial plan's error.
    assert_eq!(
        err(s, "select id from big order by 1000 / (id - 30000) limit 1"),
        "22012"
    );
    assert_eq!(counters(s).2, after.2 + 1, "the parallel plan fell back");
    ok(s, "set max_parallel_workers_per_gather = 0");
    for (q, want) in queries.iter().zip(&parallel) {
        assert_eq!(&rows(s, q), want, "{q}");
    }
    ok(s, "reset max_parallel_workers_per_gather");
}

/// The transaction's own deletes and inserts are seen by every participant.
fn own_changes(s: &mut Session) {
    ok(s, "begin");
    ok(s, "delete from big where id <= 10");
    ok(s, "insert into big values (-1, 3, 1.5, 0, 'new')");
    let before = counters(s);
    assert_eq!(
        rows(s, "select count(*), sum(id), min(id) from big"),
        [format!("59991|{}|-1", (11..=60000i64).sum::<i64>() - 1)]
    );
    assert_eq!(counters(s).0, before.0 + 1);
    ok(s, "rollback");
    assert_eq!(rows(s, "select count(*), min(id) from big"), ["60000|1"]);
}

/// What only the serial scan may answer runs serially.
fn serial_reruns(s: &mut Session) {
    // An error: the one the serial scan meets first, whichever participant saw one.
    let before = counters(s);
    assert_eq!(err(s, "select sum(1000 / (id - 30000)) from big"), "22012");
    let after = counters(s);
    assert_eq!(after.2, before.2 + 1, "the parallel plan fell back");
    // A group table past work_mem: the serial plan, which spills, answers.
    let q =
        "select id % 5000, count(*), sum(id) from big group by id % 5000 order by 3 desc limit 2";
    let want = rows(s, q);
    ok(s, "set work_mem = '64kB'");
    assert_eq!(rows(s, q), want);
    assert_eq!(counters(s).2, after.2 + 1, "the parallel plan fell back");
    ok(s, "reset work_mem");
}
