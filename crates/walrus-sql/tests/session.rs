//! SQL sessions against a real engine: pgbench's initialization statements verbatim
//! (as pgbench 15 sends them, captured from a PostgreSQL server log), the TPC-B
//! transaction with parameters, transaction blocks, and a table of bad statements with
//! their PostgreSQL SQLSTATEs.

use walrus_engine::access::datum::Datum;
mod common;

use common::{engine, err, ok};
use walrus_sql::{Outcome, QueryResult, Session};

fn scalar(s: &mut Session, sql: &str) -> Datum {
    let q = ok(s, sql);
    assert_eq!(q.rows.len(), 1, "{sql}: {q:?}");
    q.rows[0][0].clone()
}

#[test]
fn pgbench_init_and_tpcb_transactions() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = Session::new(e.clone());
    ok(
        &mut s,
        "drop table if exists pgbench_accounts, pgbench_branches, pgbench_history, pgbench_tellers",
    );
    ok(&mut s, "create table pgbench_history(tid int,bid int,aid    int,delta int,mtime timestamp,filler char(22))");
    ok(&mut s, "create table pgbench_tellers(tid int not null,bid int,tbalance int,filler char(84)) with (fillfactor=100)");
    ok(&mut s, "create table pgbench_accounts(aid    int not null,bid int,abalance int,filler char(84)) with (fillfactor=100)");
    ok(&mut s, "create table pgbench_branches(bid int not null,bbalance int,filler char(88)) with (fillfactor=100)");
    assert_eq!(ok(&mut s, "begin").tag, "BEGIN");
    assert_eq!(s.transaction_status(), b'T');
    ok(
        &mut s,
        "truncate table pgbench_accounts, pgbench_branches, pgbench_history, pgbench_tellers",
    );
    ok(
        &mut s,
        "insert into pgbench_branches(bid,bbalance) values(1,0)",
    );
    for t in 1..=10 {
        ok(
            &mut s,
            &format!("insert into pgbench_tellers(tid,bid,tbalance) values ({t},1,0)"),
        );
    }
    match s
        .execute("copy pgbench_accounts from stdin with (freeze on)", &[])
        .pop()
        .unwrap()
    {
        Ok(Outcome::CopyIn(c)) => {
            let mut data = String::new();
            for aid in 1..=1000 {
                data.push_str(&format!("{aid}\t1\t0\t{}\n", " ".repeat(84)));
            }
            data.push_str("\\.\n");
            assert_eq!(s.copy_in(*c, data.as_bytes()).unwrap().tag, "COPY 1000");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(ok(&mut s, "commit").tag, "COMMIT");
    assert_eq!(s.transaction_status(), b'I');
    for t in [
        "pgbench_branches",
        "pgbench_tellers",
        "pgbench_accounts",
        "pgbench_history",
    ] {
        assert_eq!(ok(&mut s, &format!("vacuum analyze {t}")).tag, "VACUUM");
    }
    ok(&mut s, "alter table pgbench_branches add primary key (bid)");
    ok(&mut s, "alter table pgbench_tellers add primary key (tid)");
    ok(&mut s, "alter table pgbench_accounts add primary key (aid)");
    assert_eq!(
        scalar(&mut s, "select count(*) from pgbench_accounts"),
        Datum::Int8(1000)
    );

    // The tpcb-like script, as pgbench -M prepared sends it (parameters bound).
    let mut total = 0i64;
    for i in 0..50i32 {
        let (aid, tid, delta) = (
            Datum::Int4(i * 17 % 1000 + 1),
            Datum::Int4(i % 10 + 1),
            Datum::Int4(i * 31 % 5001 - 2500),
        );
        total += (i * 31 % 5001 - 2500) as i64;
        ok(&mut s, "BEGIN;");
        let p = [delta.clone(), aid.clone()];
        assert!(
            matches!(s.execute("UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2;", &p).pop(), Some(Ok(Outcome::Done(QueryResult { ref tag, .. }))) if tag == "UPDATE 1")
        );
        let r = s
            .execute(
                "SELECT abalance FROM pgbench_accounts WHERE aid = $1;",
                std::slice::from_ref(&aid),
            )
            .pop()
            .unwrap()
            .unwrap();
        assert!(matches!(r, Outcome::Done(ref q) if q.rows.len() == 1));
        s.execute(
            "UPDATE pgbench_tellers SET tbalance = tbalance + $1 WHERE tid = $2;",
            &[delta.clone(), tid.clone()],
        )
        .pop()
        .unwrap()
        .unwrap();
        s.execute(
            "UPDATE pgbench_branches SET bbalance = bbalance + $1 WHERE bid = $2;",
            &[delta.clone(), Datum::Int4(1)],
        )
        .pop()
        .unwrap()
        .unwrap();
        s.execute(
            "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES ($1, $2, $3, $4, CURRENT_TIMESTAMP);",
            &[tid, Datum::Int4(1), aid, delta],
        )
        .pop()
        .unwrap()
        .unwrap();
        ok(&mut s, "END;");
    }
    let sums: Vec<Datum> = [
        "select sum(abalance) from pgbench_accounts",
        "select sum(tbalance) from pgbench_tellers",
        "select sum(bbalance) from pgbench_branches",
        "select sum(delta) from pgbench_history",
    ]
    .iter()
    .map(|q| scalar(&mut s, q))
    .collect();
    assert!(
        sums.iter().all(|d| *d == Datum::Int8(total)),
        "{sums:?} vs {total}"
    );
    // select-only script and ordering/limit.
    let q = ok(&mut s, "select aid, abalance from pgbench_accounts where aid >= 10 and aid < 20 order by aid desc limit 3");
    assert_eq!(
        q.rows.iter().map(|r| r[0].clone()).collect::<Vec<_>>(),
        vec![Datum::Int4(19), Datum::Int4(18), Datum::Int4(17)]
    );
    assert_eq!(q.columns[0].name, "aid");
    e.shutdown().unwrap();
}

#[test]
fn expressions_settings_and_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = Session::new(e.clone());
    assert_eq!(scalar(&mut s, "select 1"), Datum::Int4(1));
    assert_eq!(scalar(&mut s, "select 2 + 3 * 4"), Datum::Int4(14));
    let Datum::Text(l1) = scalar(&mut s, "select pg_current_wal_lsn()") else {
        panic!("lsn is text")
    };
    ok(&mut s, "create table w (a int)");
    ok(&mut s, "insert into w values (1), (2), (3)");
    let Datum::Text(l2) = scalar(&mut s, "select pg_current_wal_lsn()") else {
        panic!("lsn is text")
    };
    let Datum::Numeric(diff) = scalar(&mut s, &format!("select pg_wal_lsn_diff('{l2}', '{l1}')"))
    else {
        panic!("numeric")
    };
    assert!(
        diff.parse::<i64>().unwrap() > 0,
        "WAL advanced: {l1} -> {l2}"
    );
    assert_eq!(
        scalar(&mut s, "select repeat('ab', 3)"),
        Datum::Text("ababab".into())
    );
    assert_eq!(
        scalar(&mut s, "select current_setting('server_version')"),
        Datum::Text("15.18".into())
    );
    assert_eq!(ok(&mut s, "set synchronous_commit = off").tag, "SET");
    assert_eq!(
        scalar(&mut s, "show synchronous_commit"),
        Datum::Text("off".into())
    );
    assert_eq!(scalar(&mut s, "select '7'::int8 + 1"), Datum::Int8(8));
    assert_eq!(
        scalar(&mut s, "select 1 = 1 and not false"),
        Datum::Bool(true)
    );
    ok(
        &mut s,
        "create table t (id bigint primary key, name text, price numeric, at timestamp)",
    );
    ok(&mut s, "insert into t values (1, 'one', 1.5, '2026-11-22 10:00:00'), (2, 'two', 2.25, now()), (3, null, null, null)");
    assert_eq!(scalar(&mut s, "select count(name) from t"), Datum::Int8(2));
    assert_eq!(scalar(&mut s, "select max(id) from t"), Datum::Int8(3));
    assert_eq!(
        scalar(&mut s, "select name from t where id = 1"),
        Datum::Text("one".into())
    );
    assert_eq!(
        ok(&mut s, "select * from t where name is null").rows.len(),
        1
    );
    assert_eq!(ok(&mut s, "delete from t where id = 3").tag, "DELETE 1");
    // A failed statement inside a block aborts the block until ROLLBACK.
    ok(&mut s, "begin");
    ok(&mut s, "update t set name = 'uno' where id = 1");
    assert_eq!(
        err(&mut s, "insert into t values (2, 'dup', 0, null)"),
        "23505"
    );
    assert_eq!(s.transaction_status(), b'E');
    assert_eq!(err(&mut s, "select 1"), "25P02");
    assert_eq!(ok(&mut s, "rollback").tag, "ROLLBACK");
    assert_eq!(
        scalar(&mut s, "select name from t where id = 1"),
        Datum::Text("one".into()),
        "the block's update was rolled back"
    );
    // Outside a block a failing statement leaves nothing behind.
    assert_eq!(
        err(
            &mut s,
            "insert into t values (10, 'a', 0, null), (10, 'b', 0, null)"
        ),
        "23505"
    );
    assert_eq!(ok(&mut s, "select * from t where id = 10").rows.len(), 0);
    ok(&mut s, "checkpoint");
    // SQL-level prepared statements.
    assert_eq!(
        ok(
            &mut s,
            "prepare get_name (bigint) as select name from t where id = $1"
        )
        .tag,
        "PREPARE"
    );
    assert_eq!(
        scalar(&mut s, "execute get_name(2)"),
        Datum::Text("two".into())
    );
    assert_eq!(
        ok(
            &mut s,
            "prepare bump (bigint) as update t set price = price + 1 where id = $1"
        )
        .tag,
        "PREPARE"
    );
    assert_eq!(ok(&mut s, "execute bump(1)").tag, "UPDATE 1");
    assert_eq!(err(&mut s, "prepare get_name as select 1"), "42P05");
    assert_eq!(ok(&mut s, "deallocate get_name").tag, "DEALLOCATE");
    assert_eq!(err(&mut s, "execute get_name(1)"), "26000");
    ok(&mut s, "deallocate all");
    e.shutdown().unwrap();
}

#[test]
fn bad_statements_get_postgres_sqlstates() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = Session::new(e.clone());
    ok(
        &mut s,
        "create table k (a int primary key, b text not null)",
    );
    let cases: &[(&str, &str)] = &[
        ("selec 1", "42601"),
        ("select (1", "42601"),
        ("select * from nosuch", "42P01"),
        ("select nosuch from k", "42703"),
        ("insert into k values (1, null)", "23502"),
        ("insert into k values ('x', 'y')", "22P02"),
        ("select 1/0", "22012"),
        ("select 2147483647 + 1", "22003"),
        ("create table k (a int)", "42P07"),
        ("copy k to program 'cat'", "0A000"),
        ("grant all on k to bob", "0A000"),
        ("select nosuchfn(1)", "42883"),
        ("show nosuchsetting", "42704"),
        ("vacuum nosuch", "42P01"),
        // A misspelt parameter is an error, not a setting kept silently.
        ("set statment_timeout = 5", "42704"),
        ("reset nosuchsetting", "42704"),
        ("set shared_buffers = '1GB'", "55P02"),
        ("set server_version to '9'", "55P02"),
    ];
    for (sql, want) in cases {
        assert_eq!(err(&mut s, sql), *want, "{sql}");
        assert_eq!(s.transaction_status(), b'I', "session usable after {sql}");
    }
    assert_eq!(scalar(&mut s, "select 1"), Datum::Int4(1));
    // What clients do set is accepted: PostgreSQL parameters, custom placeholders, and
    // SET TIME ZONE / SET NAMES.
    for sql in [
        "set application_name = 'walrus test'",
        "SET extra_float_digits = 3",
        "set \"DateStyle\" to 'ISO, MDY'",
        "set myapp.tenant = 'acme'",
        "set time zone 'UTC'",
        "set names 'UTF8'",
        "reset application_name",
    ] {
        ok(&mut s, sql);
    }
    assert_eq!(
        scalar(&mut s, "show myapp.tenant"),
        Datum::Text("acme".into())
    );
    assert_eq!(scalar(&mut s, "show timezone"), Datum::Text("UTC".into()));
    // Other zones are the session's zone for timestamptz I/O; SHOW spells them as
    // PostgreSQL 15 does. Unknown names are 22023, POSIX specifications 0A000.
    for (sql, shown) in [
        ("set timezone = 'Etc/UTC'", "Etc/UTC"),
        ("set time zone 'GMT'", "GMT"),
        ("set time zone 'america/new_york'", "America/New_York"),
        ("set timezone = '+05:30'", "+05:30"),
        ("set time zone 5", "<+05>-05"),
        ("set timezone to 'Asia/Kolkata'", "Asia/Kolkata"),
    ] {
        ok(&mut s, sql);
        assert_eq!(scalar(&mut s, "show timezone"), Datum::Text(shown.into()));
    }
    assert_eq!(
        scalar(&mut s, "select '2024-01-01 10:00+00'::timestamptz::text"),
        Datum::Text("2024-01-01 15:30:00+05:30".into())
    );
    assert_eq!(err(&mut s, "set timezone = 'Nowhere/Land'"), "22023");
    assert_eq!(
        err(&mut s, "set timezone = 'EST5EDT4,M3.2.0,M11.1.0'"),
        "0A000"
    );
    ok(&mut s, "set time zone default");
    assert_eq!(
        scalar(&mut s, "show timezone"),
        Datum::Text("Etc/UTC".into())
    );
    // Parameters walrus keeps no value of its own for show PostgreSQL's default.
    assert_eq!(scalar(&mut s, "show work_mem"), Datum::Text("4MB".into()));
    ok(&mut s, "set work_mem = '64MB'");
    assert_eq!(
        scalar(&mut s, "select current_setting('work_mem')"),
        Datum::Text("64MB".into())
    );
    ok(&mut s, "reset work_mem");
    assert_eq!(scalar(&mut s, "show work_mem"), Datum::Text("4MB".into()));
    assert_eq!(
        scalar(
            &mut s,
            "select setting from pg_settings where name = 'enable_seqscan'"
        ),
        Datum::Text("on".into())
    );
    e.shutdown().unwrap();
}

/// `lock_timeout` and `statement_timeout` do what PostgreSQL's do (they used to be
/// accepted by SET and ignored, so a client relying on them waited forever): a lock wait
/// past `lock_timeout` fails with 55P03, a statement past `statement_timeout` with 57014
/// "due to statement timeout"; the session and the lock holder carry on; RESET and 0
/// turn them off; a bad value is 22023 and leaves the old one.
#[test]
fn lock_timeout_and_statement_timeout_cancel_with_postgres_errors() {
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut holder = Session::new(e.clone());
    let mut s = Session::new(e.clone());
    ok(&mut holder, "create table k (id int primary key, v int)");
    ok(&mut holder, "insert into k values (1, 0)");
    ok(&mut holder, "begin");
    ok(&mut holder, "update k set v = 1 where id = 1");

    ok(&mut s, "set lock_timeout = '150ms'");
    assert_eq!(
        scalar(&mut s, "show lock_timeout"),
        Datum::Text("150ms".into())
    );
    let t = Instant::now();
    match s
        .execute("update k set v = 2 where id = 1", &[])
        .pop()
        .unwrap()
    {
        Err(e) => {
            assert_eq!(e.sqlstate, "55P03", "{e}");
            assert_eq!(e.message, "canceling statement due to lock timeout");
        }
        Ok(o) => panic!("the update did not wait for the row lock: {o:?}"),
    }
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_millis(140) && waited < Duration::from_secs(20),
        "lock_timeout of 150 ms gave up after {waited:?}"
    );
    // A bad value is refused and the old one stays.
    assert_eq!(err(&mut s, "set lock_timeout = 'soon'"), "22023");
    assert_eq!(
        scalar(&mut s, "show lock_timeout"),
        Datum::Text("150ms".into())
    );
    ok(&mut s, "reset lock_timeout");

    // statement_timeout cancels a lock wait too, with its own message, and a sleep.
    ok(&mut s, "set statement_timeout = 200");
    assert_eq!(
        scalar(&mut s, "show statement_timeout"),
        Datum::Text("200ms".into())
    );
    for sql in ["update k set v = 3 where id = 1", "select pg_sleep(30)"] {
        let t = Instant::now();
        match s.execute(sql, &[]).pop().unwrap() {
            Err(e) => {
                assert_eq!(e.sqlstate, "57014", "{sql}: {e}");
                assert_eq!(e.message, "canceling statement due to statement timeout");
            }
            Ok(o) => panic!("{sql} outlived statement_timeout: {o:?}"),
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{sql}: {:?}",
            t.elapsed()
        );
    }
    // The session goes on, and a statement that finishes in time is not canceled by
    // the timer it armed.
    for _ in 0..20 {
        assert_eq!(scalar(&mut s, "select 1"), Datum::Int4(1));
    }
    ok(&mut s, "set statement_timeout = 0");
    assert_eq!(
        scalar(&mut s, "show statement_timeout"),
        Datum::Text("0".into())
    );

    // The holder was never disturbed; once it commits, the row is free again.
    ok(&mut holder, "commit");
    ok(&mut s, "update k set v = 4 where id = 1");
    assert_eq!(scalar(&mut s, "select v from k"), Datum::Int4(4));
}

/// Settings inside a transaction block follow PostgreSQL: SET LOCAL lasts until the block
/// ends, a ROLLBACK undoes every SET and RESET of the block, a COMMIT keeps plain SETs,
/// and SET LOCAL outside a block changes nothing. (They all used to stick, so a
/// `SET LOCAL statement_timeout` in one transaction cancelled statements of later ones.)
#[test]
fn set_local_and_rolled_back_sets_end_with_their_block() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = Session::new(e);
    let show = |s: &mut Session, name: &str| scalar(s, &format!("show {name}"));
    let text = |v: &str| Datum::Text(v.into());

    ok(&mut s, "set local statement_timeout = '1s'");
    assert_eq!(
        show(&mut s, "statement_timeout"),
        text("0"),
        "outside a block"
    );

    ok(&mut s, "begin");
    ok(&mut s, "set local statement_timeout = 50");
    assert_eq!(show(&mut s, "statement_timeout"), text("50ms"));
    ok(&mut s, "set lock_timeout = '2s'");
    ok(&mut s, "commit");
    assert_eq!(
        show(&mut s, "statement_timeout"),
        text("0"),
        "SET LOCAL ended"
    );
    assert_eq!(
        show(&mut s, "lock_timeout"),
        text("2s"),
        "a plain SET stays"
    );
    // The local timeout is really gone, not just its display.
    ok(&mut s, "select pg_sleep(0.2)");

    ok(&mut s, "begin");
    ok(&mut s, "set lock_timeout = '5s'");
    ok(&mut s, "set datestyle = 'ISO, DMY'");
    ok(&mut s, "reset statement_timeout");
    ok(&mut s, "rollback");
    assert_eq!(show(&mut s, "lock_timeout"), text("2s"), "rolled back");
    assert_eq!(show(&mut s, "datestyle"), text("ISO, MDY"), "rolled back");

    // A failed block's COMMIT is a rollback: its SETs go too.
    ok(&mut s, "begin");
    ok(&mut s, "set lock_timeout = 0");
    err(&mut s, "select * from no_such_table");
    ok(&mut s, "commit");
    assert_eq!(show(&mut s, "lock_timeout"), text("2s"));
}

/// `VACUUM FREEZE` of the whole database is a freeze pass: the next `CHECKPOINT`
/// deletes the commit-status segments below its cutoff, and the rows read the same.
/// `VACUUM (FREEZE) t` of one table and `VACUUM FREEZE` inside a block behave as in
/// PostgreSQL (a vacuum; 25001).
#[test]
fn vacuum_freeze_then_checkpoint_truncates_the_commit_status_log() {
    use walrus_engine::txn::clog::XIDS_PER_SEGMENT;
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = Session::new(e.clone());
    ok(&mut s, "create table f (id int primary key, v text)");
    ok(&mut s, "insert into f values (1, 'a'), (2, 'b'), (3, 'c')");
    ok(&mut s, "begin");
    ok(&mut s, "insert into f values (4, 'rolled back')");
    ok(&mut s, "rollback");
    ok(&mut s, "delete from f where id = 2");
    let txn = e.txn_manager();
    txn.advance_next_xid(walrus_base::Xid(txn.next_xid().0 + 2 * XIDS_PER_SEGMENT));
    ok(&mut s, "insert into f values (5, 'e')");
    ok(&mut s, "VACUUM (FREEZE) f");
    ok(&mut s, "checkpoint");
    let seg0 = dir.path().join("clog").join(format!("{:012X}", 0));
    assert!(seg0.exists(), "one table's freeze does not truncate");
    ok(&mut s, "begin");
    assert_eq!(err(&mut s, "vacuum freeze"), "25001");
    ok(&mut s, "rollback");
    let frozen = "select datfrozenxid from pg_database";
    assert_eq!(scalar(&mut s, frozen), Datum::Int8(3), "nothing frozen yet");
    assert_eq!(ok(&mut s, "VACUUM FREEZE").tag, "VACUUM");
    ok(&mut s, "checkpoint");
    assert!(!seg0.exists(), "segment 0 truncated");
    assert_eq!(
        scalar(&mut s, frozen),
        Datum::Int8(2 * XIDS_PER_SEGMENT as i64),
        "datfrozenxid is the truncation point"
    );
    let next = e.txn_manager().next_xid().0 as i64;
    assert_eq!(
        scalar(&mut s, "select age(datfrozenxid) from pg_database"),
        Datum::Int8(next - 2 * XIDS_PER_SEGMENT as i64)
    );
    assert_eq!(
        err(&mut s, "select age(-9223372036854775807 - 1)"),
        "22003",
        "an age past bigint is an error, not a wrapped number"
    );
    let q = ok(&mut s, "select id, v from f order by id");
    let got: Vec<String> = q.rows.iter().map(|r| format!("{:?}", r[1])).collect();
    assert_eq!(got.len(), 3, "{got:?}");
    assert_eq!(err(&mut s, "insert into f values (3, 'dup')"), "23505");
    ok(&mut s, "insert into f values (2, 'key of a deleted row')");
    ok(&mut s, "update f set v = 'z' where id = 1");
}

/// `synchronous_commit` is the session's own, as in PostgreSQL: `off` makes this
/// session's commits return before their WAL is flushed (the WAL writer flushes it
/// later), `on`/`local` wait; DDL is flushed whatever the setting; `remote_write` and
/// `remote_apply` promise a standby walrus has not got and are refused; RESET goes back to
/// walrus.toml's value. The WAL writer's settings show as PostgreSQL shows them, and
/// `walrus_stat_wal` counts its work.
#[test]
fn synchronous_commit_is_per_session_and_the_wal_writer_shows_itself() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = walrus_engine::settings::default_config_text(1 << 20)
        .replace("shared_buffers = \"128MB\"", "shared_buffers = \"8MB\"")
        // The writer sleeps 10 s: within this test only commits flush.
        .replace("wal_writer_delay = \"200ms\"", "wal_writer_delay = \"10s\"")
        .replace(
            "wal_writer_flush_after = \"1MB\"",
            "wal_writer_flush_after = \"1GB\"",
        );
    walrus_engine::Engine::init(dir.path(), Some(&cfg)).unwrap();
    let e = walrus_engine::Engine::open(dir.path()).unwrap().0;
    let mut s = Session::new(e.clone());
    let show = |s: &mut Session, what: &str| match scalar(s, &format!("show {what}")) {
        Datum::Text(t) => t,
        other => panic!("{other:?}"),
    };
    assert_eq!(show(&mut s, "wal_writer_delay"), "10000ms");
    assert_eq!(show(&mut s, "wal_writer_flush_after"), "1GB");
    assert_eq!(show(&mut s, "synchronous_commit"), "on");
    ok(&mut s, "set synchronous_commit = off");
    assert_eq!(show(&mut s, "synchronous_commit"), "off");
    ok(&mut s, "create table a (id int primary key)");
    let wal = e.wal();
    assert!(wal.flushed_lsn() >= wal.insert_lsn(), "DDL commits flush");
    ok(&mut s, "insert into a values (1)");
    assert!(
        wal.flushed_lsn() < wal.insert_lsn(),
        "an asynchronous commit waited for its flush"
    );
    ok(&mut s, "set synchronous_commit to local");
    ok(&mut s, "insert into a values (2)");
    assert!(wal.flushed_lsn() >= wal.insert_lsn(), "local waits like on");
    // The value in force at COMMIT decides.
    ok(&mut s, "begin");
    ok(&mut s, "insert into a values (3)");
    ok(&mut s, "set synchronous_commit = off");
    ok(&mut s, "commit");
    assert!(wal.flushed_lsn() < wal.insert_lsn());
    assert_eq!(
        err(&mut s, "set synchronous_commit = remote_apply"),
        "0A000"
    );
    assert_eq!(err(&mut s, "set synchronous_commit = sometimes"), "22023");
    ok(&mut s, "reset synchronous_commit");
    assert_eq!(show(&mut s, "synchronous_commit"), "on");
    let q = ok(
        &mut s,
        "select walwriter_flushes, segments_prepared_ahead, segments_created_by_sessions from walrus_stat_wal",
    );
    assert_eq!(q.rows.len(), 1);
    assert!(
        matches!(q.rows[0][1], Datum::Int8(n) if n >= 1),
        "open prepares segments ahead: {:?}",
        q.rows
    );
    assert_eq!(q.rows[0][2], Datum::Int8(0), "{:?}", q.rows);
    // The sync method and what it promises; the pmem counters stay zero without pmem.
    let q = ok(
        &mut s,
        "select wal_sync_method, durability, pmem_drains, pmem_bytes_copied from walrus_stat_wal",
    );
    assert_eq!(
        q.rows[0],
        vec![
            Datum::Text("fdatasync".into()),
            Datum::Text("durable".into()),
            Datum::Int8(0),
            Datum::Int8(0)
        ]
    );
    drop(s);
    e.shutdown().unwrap();
}

/// `page_protection = dwb` shows itself: SHOW says so, a checkpoint's writes go through
/// double-write batches, and `walrus_stat_dwb` counts them.
#[test]
fn the_double_write_buffer_shows_in_walrus_stat_dwb() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = walrus_engine::settings::default_config_text(1 << 20)
        .replace("shared_buffers = \"128MB\"", "shared_buffers = \"8MB\"")
        .replace("page_protection = \"fpw\"", "page_protection = \"dwb\"");
    walrus_engine::Engine::init(dir.path(), Some(&cfg)).unwrap();
    let e = walrus_engine::Engine::open(dir.path()).unwrap().0;
    let mut s = Session::new(e.clone());
    assert_eq!(
        scalar(&mut s, "show page_protection"),
        Datum::Text("dwb".into())
    );
    assert_eq!(
        scalar(&mut s, "show full_page_writes"),
        Datum::Text("off".into())
    );
    ok(&mut s, "create table t (id int primary key, pad text)");
    ok(
        &mut s,
        "insert into t select g, repeat('x', 200) from generate_series(1, 2000) g",
    );
    ok(&mut s, "checkpoint");
    let q = ok(
        &mut s,
        "select batches, pages, avg_batch_pages from walrus_stat_dwb",
    );
    let (Datum::Int8(batches), Datum::Int8(pages)) = (&q.rows[0][0], &q.rows[0][1]) else {
        panic!("{:?}", q.rows)
    };
    assert!(*batches >= 1 && *pages >= 50, "{:?}", q.rows);
    assert!(dir.path().join("dwb").exists());
    drop(s);
    e.shutdown().unwrap();
}

/// Seed 003 and 004 are observable the PostgreSQL way: `walrus_flush_detail()` shows the
/// page writers and the incremental redo point, `pg_control_checkpoint()` the control
/// file's latest checkpoint, `walrus_stat_clog` the commit-status log's group update,
/// and `SHOW` the checkpoint settings.
#[test]
fn checkpoint_and_clog_state_show_in_views_and_functions() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = walrus_engine::settings::default_config_text(1 << 20)
        .replace("shared_buffers = \"128MB\"", "shared_buffers = \"8MB\"")
        .replace("page_protection = \"fpw\"", "page_protection = \"dwb\"")
        .replace(
            "recovery_time_target = \"60s\"",
            "recovery_time_target = \"5s\"",
        );
    walrus_engine::Engine::init(dir.path(), Some(&cfg)).unwrap();
    let e = walrus_engine::Engine::open(dir.path()).unwrap().0;
    let mut s = Session::new(e.clone());
    assert_eq!(
        scalar(&mut s, "show incremental_checkpoint"),
        Datum::Text("on".into())
    );
    assert_eq!(
        scalar(&mut s, "show recovery_time_target"),
        Datum::Text("5s".into())
    );
    ok(&mut s, "create table t (id int primary key, pad text)");
    for i in 0..20 {
        ok(
            &mut s,
            &format!("insert into t values ({i}, repeat('x', 100))"),
        );
    }
    ok(&mut s, "checkpoint");
    // The control file's redo point is the one the flush detail reports.
    let redo = scalar(&mut s, "select redo_lsn from pg_control_checkpoint()");
    let q = ok(
        &mut s,
        "select redo_lsn, checkpoint_mode, recovery_time_target_s, replay_rate_source \
         from walrus_flush_detail() where thread = 'total'",
    );
    assert_eq!(q.rows.len(), 1, "{:?}", q.rows);
    assert_eq!(q.rows[0][0], redo);
    assert_eq!(q.rows[0][1], Datum::Text("incremental".into()));
    assert_eq!(q.rows[0][2], Datum::Float8(5.0));
    assert_eq!(q.rows[0][3], Datum::Text("default".into()));
    let q = ok(
        &mut s,
        "select backend_clean_waits >= 0 from walrus_flush_detail() where thread = 'total'",
    );
    assert_eq!(q.rows[0][0], Datum::Bool(true));
    let q = ok(&mut s, "select count(*) from walrus_flush_detail()");
    assert_eq!(
        q.rows[0][0],
        Datum::Int8(2),
        "one page writer and the total"
    );
    let q = ok(
        &mut s,
        "select full_page_writes, timeline_id, checkpoint_time is not null \
         from pg_control_checkpoint()",
    );
    assert_eq!(
        q.rows[0],
        vec![Datum::Bool(false), Datum::Int4(1), Datum::Bool(true)]
    );
    // Twenty-odd commits set their status through the clog.
    let q = ok(
        &mut s,
        "select fast_path_sets + group_members from walrus_stat_clog",
    );
    let Datum::Int8(sets) = q.rows[0][0] else {
        panic!("{:?}", q.rows)
    };
    assert!(sets >= 20, "{sets}");
    assert_eq!(err(&mut s, "select * from walrus_flush_detail(1)"), "42883");
    drop(s);
    e.shutdown().unwrap();
}

/// A query string of several statements (issue 45): each read on its own (BEGIN, SET,
/// SHOW among them), and outside a block one implicit transaction, as in PostgreSQL.
#[test]
fn several_statements_in_one_string_run_as_postgresql_runs_them() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = Session::new(e);
    let tags = |r: Vec<walrus_sql::SqlResult<Outcome>>| -> Vec<String> {
        r.into_iter()
            .map(|o| match o {
                Ok(Outcome::Done(q)) => q.tag,
                Ok(other) => panic!("{other:?}"),
                Err(e) => format!("ERROR {}", e.sqlstate),
            })
            .collect()
    };
    assert_eq!(
        tags(s.execute(
            "begin; create table m (a int primary key); insert into m values (1); commit",
            &[]
        )),
        vec!["BEGIN", "CREATE TABLE", "INSERT 0 1", "COMMIT"]
    );
    assert_eq!(
        tags(s.execute("set timezone = 'UTC'; show timezone; select ';' as x", &[])),
        vec!["SET", "SHOW", "SELECT 1"]
    );
    assert_eq!(s.transaction_status(), b'I');
    // An error rolls back the statements before it in the same string.
    assert_eq!(
        tags(s.execute(
            "insert into m values (2); insert into m values (1); insert into m values (3)",
            &[]
        )),
        vec!["INSERT 0 1", "ERROR 23505"]
    );
    assert_eq!(s.transaction_status(), b'I');
    assert_eq!(scalar(&mut s, "select count(*) from m"), Datum::Int8(1));
    assert_eq!(
        tags(s.execute("insert into m values (2); insert into m values (3)", &[])),
        vec!["INSERT 0 1", "INSERT 0 1"]
    );
    assert_eq!(scalar(&mut s, "select count(*) from m"), Datum::Int8(3));
    // VACUUM cannot run inside the implicit transaction.
    assert_eq!(
        tags(s.execute("select 1; vacuum m", &[])),
        vec!["SELECT 1", "ERROR 25001"]
    );
}
