//! `statement_memory_limit`: a statement whose materialised rows pass the server's
//! per-statement budget fails with 53200 and rolls back like any error; the session goes
//! on. A limit of 1MB here, so the blow-ups are quick.

use walrus_engine::access::datum::Datum;
use walrus_engine::Engine;
use walrus_sql::{Outcome, Session, SqlError};

fn engine_with(dir: &std::path::Path, extra: &str) -> Engine {
    let cfg = walrus_engine::settings::default_config_text(1 << 20)
        .replace("shared_buffers = \"128MB\"", "shared_buffers = \"8MB\"")
        .replace(
            "wal_sync_method = \"fdatasync\"",
            "wal_sync_method = \"none\"",
        )
        + extra;
    Engine::init(dir, Some(&cfg)).unwrap();
    Engine::open(dir).unwrap().0
}

fn run(s: &mut Session, sql: &str) -> Result<Vec<Vec<Datum>>, SqlError> {
    let mut r = s.execute(sql, &[]);
    assert_eq!(r.len(), 1, "{sql}");
    match r.pop().unwrap() {
        Ok(Outcome::Done(q)) => Ok(q.rows),
        Ok(other) => panic!("{sql}: {other:?}"),
        Err(e) => Err(e),
    }
}

fn ok(s: &mut Session, sql: &str) -> Vec<Vec<Datum>> {
    run(s, sql).unwrap_or_else(|e| panic!("{sql}: {e:?}"))
}

fn text(s: &mut Session, sql: &str) -> String {
    match &ok(s, sql)[..] {
        [row] => walrus_sql::value::format_text(&row[0]).unwrap_or_default(),
        other => panic!("{sql}: {other:?}"),
    }
}

/// The statement fails with PostgreSQL's out_of_memory and walrus's detail and hint.
fn out_of_memory(s: &mut Session, sql: &str) {
    let e = match run(s, sql) {
        Err(e) => e,
        Ok(rows) => panic!("{sql} should run out of memory, got {} rows", rows.len()),
    };
    assert_eq!(
        (e.sqlstate, e.message.as_str()),
        ("53200", "out of memory"),
        "{sql}"
    );
    assert_eq!(
        e.detail.as_deref(),
        Some("the statement's materialised rows need more than statement_memory_limit (1MB)"),
        "{sql}"
    );
    assert!(
        e.hint
            .as_deref()
            .unwrap_or("")
            .contains("raise statement_memory_limit in walrus.toml"),
        "{e:?}"
    );
}

#[test]
fn statements_past_the_memory_limit_fail_and_the_session_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_with(dir.path(), "statement_memory_limit = \"1MB\"\n");
    let mut s = Session::new(e.clone());
    assert_eq!(text(&mut s, "show statement_memory_limit"), "1MB");
    assert_eq!(
        text(
            &mut s,
            "select setting from pg_settings where name = 'statement_memory_limit'"
        ),
        "1MB"
    );
    let set = run(&mut s, "set statement_memory_limit = '2GB'").unwrap_err();
    assert_eq!(set.sqlstate, "55P02");
    assert!(set.message.contains("without restarting"), "{set:?}");

    // Ten million rows from a table function.
    out_of_memory(&mut s, "select * from generate_series(1, 10000000)");
    // A few wide values.
    out_of_memory(
        &mut s,
        "select repeat('x', 100000) from generate_series(1, 20)",
    );
    // Just under the limit: fine (about 140 bytes a row charged here).
    assert_eq!(
        ok(&mut s, "select * from generate_series(1, 5000)").len(),
        5000
    );
    assert_eq!(
        text(&mut s, "select count(*) from generate_series(1, 5000)"),
        "5000"
    );

    // A cross join of two small tables.
    ok(&mut s, "create table t (id int primary key, v text)");
    ok(
        &mut s,
        "insert into t select g, repeat('v', 100) from generate_series(1, 200) g",
    );
    assert_eq!(
        text(&mut s, "select count(*) from t a join t b on a.id = b.id"),
        "200"
    );
    out_of_memory(&mut s, "select a.id, b.id from t a, t b");
    out_of_memory(&mut s, "select count(*) from t a cross join t b");
    // A correlated subquery reads t once per outer row: each result is freed before
    // the next row, so 3000 of them do not add up.
    assert_eq!(
        text(
            &mut s,
            "select count(*) from generate_series(1, 3000) g \
             where exists (select 1 from t where t.id = g)"
        ),
        "200"
    );

    // A table larger than the limit: a filtered scan keeps only its matches; reading
    // every row does not fit.
    ok(&mut s, "create table big (id int primary key, v text)");
    for i in 0..6 {
        ok(
            &mut s,
            &format!(
                "insert into big select g, repeat('b', 300) from generate_series({}, {}) g",
                i * 1000 + 1,
                i * 1000 + 1000
            ),
        );
    }
    assert_eq!(
        text(&mut s, "select count(*) from big where id % 1000 = 7"),
        "6"
    );
    assert_eq!(
        ok(&mut s, "select id from big where length(v) > 300").len(),
        0
    );
    out_of_memory(&mut s, "select * from big");
    out_of_memory(&mut s, "select count(*) from (select * from big) x");
    out_of_memory(&mut s, "update big set v = v || 'x'");
    assert_eq!(
        text(&mut s, "select count(*) from big where v like '%x'"),
        "0"
    );

    // The session goes on; in a block the failure aborts it like any error.
    assert_eq!(text(&mut s, "select 1"), "1");
    ok(&mut s, "begin");
    ok(&mut s, "insert into t values (1000, 'in the block')");
    out_of_memory(&mut s, "select * from generate_series(1, 10000000)");
    assert_eq!(s.transaction_status(), b'E');
    assert_eq!(run(&mut s, "select 1").unwrap_err().sqlstate, "25P02");
    ok(&mut s, "rollback");
    assert_eq!(text(&mut s, "select count(*) from t where id = 1000"), "0");

    // COPY FROM STDIN's data of a record not yet ended is held to the same limit, and
    // the rows before it are not kept.
    let before = text(&mut s, "select count(*) from t");
    let Ok(Outcome::CopyIn(mut copy)) = s.execute("copy t from stdin", &[]).pop().unwrap() else {
        panic!("copy did not start")
    };
    s.copy_data(&mut copy, b"2000\tshort\n2001\t");
    s.copy_data(&mut copy, &vec![b'x'; 64 << 10]);
    s.copy_data(&mut copy, &vec![b'x'; 2 << 20]);
    assert_eq!(s.copy_done(*copy).unwrap_err().sqlstate, "53200");
    assert_eq!(text(&mut s, "select count(*) from t"), before);
    drop(s);
    e.shutdown().unwrap();
}

#[test]
fn the_memory_limit_defaults_to_1gb_and_a_bad_value_fails_statements() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_with(dir.path(), "");
    let mut s = Session::new(e.clone());
    assert_eq!(text(&mut s, "show statement_memory_limit"), "1GB");
    assert_eq!(s.statement_memory_limit(), 1 << 30);
    assert_eq!(
        ok(&mut s, "select * from generate_series(1, 100000)").len(),
        100000
    );
    drop(s);
    e.shutdown().unwrap();

    let dir = tempfile::tempdir().unwrap();
    let e = engine_with(dir.path(), "statement_memory_limit = \"10kB\"\n");
    let mut s = Session::new(e.clone());
    assert_eq!(text(&mut s, "show statement_memory_limit"), "10kB");
    let bad = run(&mut s, "select 1").unwrap_err();
    assert_eq!(bad.sqlstate, "22023");
    assert!(
        bad.message.contains("\"statement_memory_limit\""),
        "{bad:?}"
    );
    drop(s);
    e.shutdown().unwrap();
}

/// A lone table is read as its rows are consumed: a count, a filtered sum, a grouping
/// with few groups, a LIMIT and a top-N over a table four times `statement_memory_limit`
/// hold only their groups / N rows (the peak charged bytes say so), while a query
/// that returns every row still needs them all.
#[test]
fn scans_of_a_table_larger_than_the_limit_stream() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_with(dir.path(), "statement_memory_limit = \"1MB\"\n");
    let mut s = Session::new(e.clone());
    ok(
        &mut s,
        "create table big (id int primary key, g int, v text)",
    );
    for b in 0..10 {
        ok(
            &mut s,
            &format!(
                "insert into big select i, i % 10, repeat('v', 150) \
                 from generate_series({} + 1, {} + 2000) i",
                b * 2000,
                b * 2000
            ),
        );
    }
    // Every row at once does not fit: the table is larger than the limit.
    out_of_memory(&mut s, "select * from big");
    out_of_memory(&mut s, "select v from big order by id");
    let limit = s.statement_memory_limit();
    let mut streamed = |sql: &str, want: &[&str], bound: u64| {
        let rows = ok(&mut s, sql);
        let got: Vec<String> = rows
            .iter()
            .map(|r| {
                r.iter()
                    .map(|d| walrus_sql::value::format_text(d).unwrap_or_default())
                    .collect::<Vec<_>>()
                    .join("|")
            })
            .collect();
        assert_eq!(got, want, "{sql}");
        let peak = s.statement_memory_peak();
        assert!(
            peak <= bound && bound < limit,
            "{sql}: peak {peak} > {bound}"
        );
    };
    streamed("select count(*) from big", &["20000"], 4096);
    streamed("select sum(id) from big where g = 3", &["19996000"], 4096);
    streamed(
        "select count(*), min(v) = repeat('v', 150) from big where id % 7 = 0",
        &["2857|t"],
        4096,
    );
    // Ten groups: ten entries (each with its first row).
    streamed(
        "select g, count(*), sum(id) from big group by g order by g limit 3",
        &["0|2000|20010000", "1|2000|19992000", "2|2000|19994000"],
        16 * 1024,
    );
    // LIMIT without ORDER BY stops the scan.
    streamed(
        "select id from big where g = 5 limit 3",
        &["5", "15", "25"],
        4096,
    );
    streamed("select id from big limit 2 offset 4", &["5", "6"], 4096);
    // Top-N: a heap of five rows, wide ones included.
    streamed(
        "select id, length(v) from big order by g desc, id desc limit 5",
        &[
            "19999|150",
            "19989|150",
            "19979|150",
            "19969|150",
            "19959|150",
        ],
        8 * 1024,
    );
    // DISTINCT over few values.
    streamed(
        "select count(*) from (select distinct g from big) d",
        &["10"],
        64 * 1024,
    );
    // A join with a small table: the big one is scanned and each row probes the
    // small one's hash table; the joined rows are not held (the old path held all
    // 20,000 of them and failed).
    ok(&mut s, "create table grp (g int, name text)");
    ok(
        &mut s,
        "insert into grp select i, 'group ' || i from generate_series(0, 9) i",
    );
    let mut streamed_join = |sql: &str, want: &[&str], bound: u64| {
        let rows = ok(&mut s, sql);
        let got: Vec<String> = rows
            .iter()
            .map(|r| {
                r.iter()
                    .map(|d| walrus_sql::value::format_text(d).unwrap_or_default())
                    .collect::<Vec<_>>()
                    .join("|")
            })
            .collect();
        assert_eq!(got, want, "{sql}");
        let peak = s.statement_memory_peak();
        assert!(peak <= bound, "{sql}: peak {peak} > {bound}");
    };
    streamed_join(
        "select count(*) from big join grp on big.g = grp.g",
        &["20000"],
        16 * 1024,
    );
    streamed_join(
        "select grp.name, count(*), sum(big.id) from big join grp on big.g = grp.g \
         group by grp.name order by grp.name limit 2",
        &["group 0|2000|20010000", "group 1|2000|19992000"],
        32 * 1024,
    );
    streamed_join(
        "select big.id, grp.name from big join grp on grp.g = big.g \
         where big.id % 1000 = 998 and grp.name <> 'group 9' order by big.id desc limit 2",
        &["19998|group 8", "18998|group 8"],
        16 * 1024,
    );
    // Every joined row at once still does not fit.
    out_of_memory(
        &mut s,
        "select big.v, grp.name from big join grp on big.g = grp.g",
    );
}
