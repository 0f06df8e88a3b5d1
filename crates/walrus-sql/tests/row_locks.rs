//! `SELECT ... FOR UPDATE | FOR SHARE` between sessions, as PostgreSQL behaves: NOWAIT
//! (55P03), SKIP LOCKED, sharers that coexist and hold off writers, a writer waiting for
//! a locker and re-checking its condition after, a locker waiting for a writer and
//! re-checking (EvalPlanQual), locks released by ROLLBACK TO SAVEPOINT, a deadlock
//! between lockers (40P01), and a job queue on SKIP LOCKED where every job is taken
//! exactly once.

mod common;

use std::thread;
use std::time::Duration;

use common::{engine, err, in_thread, ok, settle, text_rows};
use walrus_engine::Engine;
use walrus_sql::Session;

fn setup(e: &Engine, jobs: usize) {
    let mut s = Session::new(e.clone());
    ok(&mut s, "create table jobs (id int primary key, state text)");
    ok(
        &mut s,
        &format!("insert into jobs select g, 'new' from generate_series(1, {jobs}) g"),
    );
}

#[test]
fn nowait_fails_and_skip_locked_leaves_locked_rows_out() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    setup(&e, 6);
    let mut a = Session::new(e.clone());
    ok(&mut a, "begin");
    assert_eq!(
        text_rows(
            &mut a,
            "select id from jobs where id <= 2 order by id for update"
        ),
        ["1", "2"]
    );
    let mut b = Session::new(e.clone());
    assert_eq!(
        err(&mut b, "select id from jobs order by id for update nowait"),
        "55P03"
    );
    assert_eq!(
        text_rows(
            &mut b,
            "select id from jobs order by id limit 3 for update skip locked"
        ),
        ["3", "4", "5"],
        "the limit counts only rows locked"
    );
    assert!(text_rows(
        &mut b,
        "select id from jobs where id = 1 for share skip locked"
    )
    .is_empty());
    // A plain read is never blocked.
    assert_eq!(text_rows(&mut b, "select count(*) from jobs"), ["6"]);
    ok(&mut a, "commit");
    assert_eq!(
        text_rows(&mut b, "select id from jobs where id = 1 for update nowait"),
        ["1"]
    );
    e.shutdown().unwrap();
}

#[test]
fn sharers_coexist_and_a_writer_waits_for_all_of_them() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    setup(&e, 3);
    let mut a = Session::new(e.clone());
    let mut b = Session::new(e.clone());
    ok(&mut a, "begin");
    ok(&mut b, "begin");
    ok(&mut b, "set local lock_timeout = '200ms'");
    assert_eq!(
        text_rows(&mut a, "select id from jobs where id = 1 for share"),
        ["1"]
    );
    assert_eq!(
        text_rows(&mut b, "select id from jobs where id = 1 for share nowait"),
        ["1"],
        "two sharers do not conflict"
    );
    assert_eq!(
        err(&mut b, "update jobs set state = 'x' where id = 1"),
        "55P03",
        "a sharer's own update waits for the other sharer (lock_timeout below)"
    );
    let (writer, started) = in_thread(&e, &["update jobs set state = 'w' where id = 1"]);
    settle(&started);
    ok(&mut a, "commit");
    thread::sleep(Duration::from_millis(200));
    assert!(!writer.is_finished(), "still held by the second sharer");
    ok(&mut b, "rollback");
    assert_eq!(writer.join().unwrap(), [""]);
    let mut c = Session::new(e.clone());
    assert_eq!(
        text_rows(&mut c, "select state from jobs where id = 1"),
        ["w"]
    );
    e.shutdown().unwrap();
}

#[test]
fn a_writer_blocked_by_a_locker_rechecks_its_condition() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    setup(&e, 3);
    let mut a = Session::new(e.clone());
    ok(&mut a, "begin");
    assert_eq!(
        text_rows(&mut a, "select id from jobs where id = 1 for update"),
        ["1"]
    );
    let (writer, started) = in_thread(
        &e,
        &["update jobs set state = 'taken' where id = 1 and state = 'new' returning id"],
    );
    settle(&started);
    assert!(!writer.is_finished(), "the update waits for the row lock");
    ok(&mut a, "update jobs set state = 'done' where id = 1");
    ok(&mut a, "commit");
    assert_eq!(
        writer.join().unwrap(),
        [""],
        "the newest version no longer matches: nothing updated"
    );
    e.shutdown().unwrap();
}

#[test]
fn a_locker_blocked_by_a_writer_rechecks_the_newest_version() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    setup(&e, 4);
    let mut a = Session::new(e.clone());
    ok(&mut a, "begin");
    ok(&mut a, "update jobs set state = 'done' where id = 3");
    ok(&mut a, "update jobs set state = 'new!' where id = 4");
    let (locker, started) = in_thread(
        &e,
        &["select id, state from jobs where state like 'new%' and id >= 3 order by id for update"],
    );
    settle(&started);
    assert!(!locker.is_finished(), "FOR UPDATE waits for the writer");
    ok(&mut a, "commit");
    assert_eq!(
        locker.join().unwrap(),
        ["4|new!"],
        "3 no longer matches; 4 is returned as it is now"
    );
    // Under REPEATABLE READ the same is a serialization failure.
    ok(&mut a, "begin");
    ok(&mut a, "update jobs set state = 'again' where id = 4");
    let (locker, started) = in_thread(
        &e,
        &[
            "begin isolation level repeatable read",
            "select count(*) from jobs",
            "select id from jobs where id = 4 for update",
        ],
    );
    settle(&started);
    ok(&mut a, "commit");
    assert_eq!(locker.join().unwrap(), ["", "4", "40001"]);
    e.shutdown().unwrap();
}

#[test]
fn rollback_to_savepoint_releases_the_locks_taken_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    setup(&e, 3);
    let mut a = Session::new(e.clone());
    ok(&mut a, "begin");
    assert_eq!(
        text_rows(&mut a, "select id from jobs where id = 1 for update"),
        ["1"]
    );
    ok(&mut a, "savepoint s");
    assert_eq!(
        text_rows(&mut a, "select id from jobs where id = 2 for update"),
        ["2"]
    );
    let mut b = Session::new(e.clone());
    assert_eq!(
        err(&mut b, "select id from jobs where id = 2 for update nowait"),
        "55P03"
    );
    ok(&mut a, "rollback to savepoint s");
    ok(&mut b, "begin");
    assert_eq!(
        text_rows(&mut b, "select id from jobs where id = 2 for update nowait"),
        ["2"],
        "released with the savepoint"
    );
    assert_eq!(
        err(&mut b, "select id from jobs where id = 1 for update nowait"),
        "55P03",
        "the lock taken before the savepoint stays"
    );
    ok(&mut b, "rollback");
    ok(&mut a, "commit");
    e.shutdown().unwrap();
}

#[test]
fn lockers_that_wait_for_each_other_deadlock_and_one_fails() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    setup(&e, 2);
    let mut a = Session::new(e.clone());
    ok(&mut a, "begin");
    ok(&mut a, "select id from jobs where id = 1 for update");
    let (b, started) = in_thread(
        &e,
        &[
            "begin",
            "select id from jobs where id = 2 for update",
            "select pg_sleep(0.3)",
            "select id from jobs where id = 1 for update",
            "rollback",
        ],
    );
    started.recv().unwrap();
    thread::sleep(Duration::from_millis(150));
    let ra = a.execute("select id from jobs where id = 2 for update", &[]);
    let a_failed = ra.last().is_some_and(|r| r.is_err());
    let a_code = ra
        .into_iter()
        .last()
        .and_then(|r| r.err())
        .map(|e| e.sqlstate);
    ok(&mut a, "rollback");
    let rb = b.join().unwrap();
    assert!(
        a_code == Some("40P01") || rb[3] == "40P01",
        "one side reports the deadlock: a {a_code:?}, b {rb:?}"
    );
    assert!(a_failed || rb[3] == "40P01");
    e.shutdown().unwrap();
}

#[test]
fn a_skip_locked_queue_hands_every_job_to_exactly_one_worker() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let jobs = 200;
    setup(&e, jobs);
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let e = e.clone();
            thread::spawn(move || {
                let mut s = Session::new(e);
                let mut taken = 0;
                loop {
                    ok(&mut s, "begin");
                    let got = text_rows(
                        &mut s,
                        "select id from jobs where state = 'new' order by id limit 1 \
                         for update skip locked",
                    );
                    let Some(id) = got.first() else {
                        ok(&mut s, "commit");
                        break;
                    };
                    ok(
                        &mut s,
                        &format!("update jobs set state = 'worker {w}' where id = {id}"),
                    );
                    ok(&mut s, "commit");
                    taken += 1;
                }
                taken
            })
        })
        .collect();
    let total: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
    assert_eq!(total, jobs, "every job taken once (an update per take)");
    let mut s = Session::new(e.clone());
    assert_eq!(
        text_rows(&mut s, "select count(*) from jobs where state = 'new'"),
        ["0"]
    );
    e.shutdown().unwrap();
}
