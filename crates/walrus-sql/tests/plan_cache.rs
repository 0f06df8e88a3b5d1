//! The extended protocol's plan cache (`session/plan_cache.rs`): a prepared statement is
//! planned once and keeps its plan across executions, and is re-planned after DDL —
//! another session's committed ALTER / CREATE INDEX / DROP / TRUNCATE, or this session's
//! own DDL and its rollback — and never otherwise. Plans are counted by
//! `walrus_stat_plan_cache()`.

mod common;

use common::{engine, err, ok};
use walrus_engine::access::datum::Datum;
use walrus_sql::value::format_text;
use walrus_sql::{Outcome, Session};

/// (plans, hits, invalidations, point_lookups) of the session.
fn stats(s: &mut Session) -> [i64; 4] {
    let q = ok(
        s,
        "select plans, hits, invalidations, point_lookups from walrus_stat_plan_cache()",
    );
    assert_eq!(q.rows.len(), 1);
    let n = |d: &Datum| match d {
        Datum::Int8(v) => *v,
        other => panic!("not a count: {other:?}"),
    };
    [
        n(&q.rows[0][0]),
        n(&q.rows[0][1]),
        n(&q.rows[0][2]),
        n(&q.rows[0][3]),
    ]
}

/// Runs `sql` as the extended protocol does (through the plan cache); rows as text.
fn exec(s: &mut Session, sql: &str, params: &[Datum]) -> Vec<Vec<Option<String>>> {
    let mut r = s.execute_cached(sql, params);
    assert_eq!(r.len(), 1, "{sql}");
    match r.pop().unwrap() {
        Ok(Outcome::Done(q)) => q
            .rows
            .iter()
            .map(|row| row.iter().map(format_text).collect())
            .collect(),
        other => panic!("{sql}: {other:?}"),
    }
}

fn row(vals: &[&str]) -> Vec<Option<String>> {
    vals.iter().map(|v| Some(v.to_string())).collect()
}

const LOOKUP: &str = "select v, w from t where id = $1";

#[test]
fn a_prepared_lookup_is_planned_once_and_answers_like_the_executor() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = Session::new(e.clone());
    ok(&mut s, "create table t (id int primary key, v int, w text)");
    ok(&mut s, "insert into t values (1, 10, 'a'), (2, 20, 'b')");
    assert_eq!(stats(&mut s), [0, 0, 0, 0]);
    assert_eq!(
        exec(&mut s, LOOKUP, &[Datum::Int4(1)]),
        vec![row(&["10", "a"])]
    );
    assert_eq!(stats(&mut s)[0], 1);
    assert_eq!(
        exec(&mut s, LOOKUP, &[Datum::Int4(2)]),
        vec![row(&["20", "b"])]
    );
    assert!(exec(&mut s, LOOKUP, &[Datum::Int4(3)]).is_empty());
    // `id = NULL` is never true; a key out of int4's range equals no row.
    assert!(exec(&mut s, LOOKUP, &[Datum::Null]).is_empty());
    assert!(exec(&mut s, LOOKUP, &[Datum::Int8(1 << 40)]).is_empty());
    assert_eq!(
        exec(&mut s, LOOKUP, &[Datum::Int8(1)]),
        vec![row(&["10", "a"])]
    );
    // An untyped parameter arrives as text: an integer's canonical spelling is looked
    // up; any other text is left to the executor.
    assert_eq!(
        exec(&mut s, LOOKUP, &[Datum::Text("2".into())]),
        vec![row(&["20", "b"])]
    );
    assert_eq!(
        exec(&mut s, LOOKUP, &[Datum::Text("+2".into())]),
        vec![row(&["20", "b"])]
    );
    // Writes, transaction blocks and reads between executions keep the plan; the
    // lookup sees every committed and own change.
    ok(&mut s, "update t set v = 11 where id = 1");
    ok(&mut s, "begin");
    ok(&mut s, "insert into t values (3, 30, 'c')");
    assert_eq!(
        exec(&mut s, LOOKUP, &[Datum::Int4(3)]),
        vec![row(&["30", "c"])]
    );
    ok(&mut s, "commit");
    ok(&mut s, "delete from t where id = 2");
    assert!(exec(&mut s, LOOKUP, &[Datum::Int4(2)]).is_empty());
    assert_eq!(
        exec(&mut s, LOOKUP, &[Datum::Int4(1)]),
        vec![row(&["11", "a"])]
    );
    let [plans, hits, invalidations, lookups] = stats(&mut s);
    assert_eq!((plans, invalidations), (1, 0));
    assert_eq!(hits, 10, "every execution after the first reused the plan");
    // The first run made the lookup; all later ones but the non-canonical text's used it.
    assert_eq!(lookups, 9);
    drop(s);
    e.shutdown().unwrap();
}

#[test]
fn ddl_of_another_session_re_plans_and_nothing_else_does() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = Session::new(e.clone());
    let mut other = Session::new(e.clone());
    ok(&mut s, "create table t (id int primary key, v int, w text)");
    ok(&mut s, "insert into t values (1, 10, 'a')");
    let count = "select count(*) from t where v > $1";
    exec(&mut s, LOOKUP, &[Datum::Int4(1)]);
    exec(&mut s, count, &[Datum::Int4(0)]);
    assert_eq!(stats(&mut s)[0], 2);

    // Another session's writes are no reason to re-plan.
    ok(&mut other, "insert into t values (2, 20, 'b')");
    assert_eq!(exec(&mut s, count, &[Datum::Int4(0)]), vec![row(&["2"])]);
    assert_eq!(stats(&mut s)[0], 2);

    let mut planned = 2;
    let mut invalidated = 0;
    for ddl in [
        "alter table t add constraint t_w_key unique (w)",
        "create index t_v on t (v)",
        "create table u (a int)",
        "drop table u",
    ] {
        ok(&mut other, ddl);
        assert_eq!(
            exec(&mut s, LOOKUP, &[Datum::Int4(1)]),
            vec![row(&["10", "a"])],
            "{ddl}"
        );
        assert_eq!(exec(&mut s, count, &[Datum::Int4(0)]), vec![row(&["2"])]);
        planned += 2;
        invalidated += 2;
        let [plans, _, invalidations, _] = stats(&mut s);
        assert_eq!(
            (plans, invalidations),
            (planned, invalidated),
            "after {ddl}"
        );
        // And once re-planned, kept.
        exec(&mut s, LOOKUP, &[Datum::Int4(2)]);
        assert_eq!(stats(&mut s)[0], planned);
    }

    // The table is dropped and made again with its columns in another order: the old
    // plan's column positions would read the wrong ones.
    ok(&mut other, "drop table t");
    // Gone: the cached lookup is not used, the statement fails as the executor says.
    assert_eq!(err(&mut s, "select v, w from t where id = 1"), "42P01");
    match s.execute_cached(LOOKUP, &[Datum::Int4(1)]).pop() {
        Some(Err(e)) => assert_eq!(e.sqlstate, "42P01"),
        other => panic!("a lookup in a dropped table: {other:?}"),
    }
    ok(
        &mut other,
        "create table t (w text, id int primary key, v int)",
    );
    ok(&mut other, "insert into t values ('z', 1, 99)");
    assert_eq!(
        exec(&mut s, LOOKUP, &[Datum::Int4(1)]),
        vec![row(&["99", "z"])]
    );
    // A rolled-back DDL of another session changes nothing.
    let plans = stats(&mut s)[0];
    ok(&mut other, "begin");
    ok(&mut other, "create index t_v2 on t (v)");
    ok(&mut other, "rollback");
    assert_eq!(
        exec(&mut s, LOOKUP, &[Datum::Int4(1)]),
        vec![row(&["99", "z"])]
    );
    assert_eq!(stats(&mut s)[0], plans);
    // TRUNCATE gives the table a new file: re-planned, and the lookup reads the new one.
    ok(&mut other, "truncate t");
    assert!(exec(&mut s, LOOKUP, &[Datum::Int4(1)]).is_empty());
    assert_eq!(stats(&mut s)[0], plans + 1);
    drop((s, other));
    e.shutdown().unwrap();
}

#[test]
fn the_sessions_own_ddl_and_its_rollback_re_plan() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = Session::new(e.clone());
    ok(&mut s, "create table t (id int primary key, v int, w text)");
    ok(&mut s, "insert into t values (1, 10, 'a')");
    exec(&mut s, LOOKUP, &[Datum::Int4(1)]);
    ok(&mut s, "begin");
    exec(&mut s, LOOKUP, &[Datum::Int4(1)]);
    assert_eq!(stats(&mut s)[0], 1);
    // Uncommitted DDL of the session itself.
    ok(&mut s, "drop table t");
    ok(&mut s, "create table t (w text, v int, id int primary key)");
    ok(&mut s, "insert into t values ('new', 5, 1)");
    assert_eq!(
        exec(&mut s, LOOKUP, &[Datum::Int4(1)]),
        vec![row(&["5", "new"])]
    );
    assert_eq!(stats(&mut s)[0], 2);
    exec(&mut s, LOOKUP, &[Datum::Int4(1)]);
    assert_eq!(stats(&mut s)[0], 2);
    // Rolled back: the old table is back, and so must its plan be.
    ok(&mut s, "rollback");
    assert_eq!(
        exec(&mut s, LOOKUP, &[Datum::Int4(1)]),
        vec![row(&["10", "a"])]
    );
    let [plans, _, invalidations, _] = stats(&mut s);
    assert_eq!((plans, invalidations), (3, 2));
    // A rolled-back transaction that ran no DDL keeps the plans.
    ok(&mut s, "begin");
    ok(&mut s, "update t set v = 12");
    ok(&mut s, "rollback");
    assert_eq!(
        exec(&mut s, LOOKUP, &[Datum::Int4(1)]),
        vec![row(&["10", "a"])]
    );
    assert_eq!(stats(&mut s)[0], 3);
    drop(s);
    e.shutdown().unwrap();
}
