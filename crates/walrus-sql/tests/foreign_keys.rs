//! Foreign keys between sessions, checked with row locks as PostgreSQL does: a DELETE
//! of a referenced row waits for an uncommitted referencing insert and then fails; an
//! insert referencing a row being deleted waits and then fails (or succeeds when the
//! delete rolls back); inserts referencing one row, and a non-key update of it, do
//! not wait for each other. No interleaving leaves an orphan. Constraints survive a
//! restart and a crash.

mod common;

use std::thread;

use common::{engine, err, in_thread, ok, settle, text_rows};
use walrus_engine::Engine;
use walrus_sql::Session;

fn setup(e: &Engine) {
    let mut s = Session::new(e.clone());
    ok(&mut s, "create table p (id int primary key, v text)");
    ok(
        &mut s,
        "create table c (id int primary key, pid int references p)",
    );
    ok(&mut s, "insert into p values (1, 'one'), (2, 'two')");
}

fn orphans(e: &Engine) -> Vec<String> {
    let mut s = Session::new(e.clone());
    text_rows(
        &mut s,
        "select c.id from c where c.pid is not null and not exists (select 1 from p where p.id = c.pid)",
    )
}

#[test]
fn deleting_a_row_an_uncommitted_insert_references_waits_then_fails() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    setup(&e);
    let mut a = Session::new(e.clone());
    ok(&mut a, "begin");
    ok(&mut a, "insert into c values (10, 1)");
    let (del, started) = in_thread(&e, &["delete from p where id = 1"]);
    settle(&started);
    assert!(
        !del.is_finished(),
        "the delete waits for the referencing insert"
    );
    ok(&mut a, "commit");
    assert_eq!(del.join().unwrap(), ["23503"]);
    assert!(orphans(&e).is_empty());
    e.shutdown().unwrap();
}

#[test]
fn inserting_a_reference_to_a_row_being_deleted_waits_for_the_delete() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    setup(&e);
    let mut a = Session::new(e.clone());
    // The delete commits: the insert fails.
    ok(&mut a, "begin");
    ok(&mut a, "delete from p where id = 1");
    let (ins, started) = in_thread(&e, &["insert into c values (10, 1)"]);
    settle(&started);
    assert!(!ins.is_finished(), "the insert waits for the delete");
    ok(&mut a, "commit");
    assert_eq!(ins.join().unwrap(), ["23503"]);
    // The delete rolls back: the insert goes in.
    ok(&mut a, "begin");
    ok(&mut a, "delete from p where id = 2");
    let (ins, started) = in_thread(&e, &["insert into c values (11, 2)"]);
    settle(&started);
    assert!(!ins.is_finished());
    ok(&mut a, "rollback");
    assert_eq!(ins.join().unwrap(), [""], "inserted (no rows returned)");
    assert!(orphans(&e).is_empty());
    e.shutdown().unwrap();
}

#[test]
fn referencing_inserts_and_a_non_key_update_do_not_wait_for_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    setup(&e);
    let mut a = Session::new(e.clone());
    let mut b = Session::new(e.clone());
    ok(&mut a, "begin");
    ok(&mut b, "begin");
    ok(&mut a, "insert into c values (10, 1)");
    ok(&mut b, "set local lock_timeout = '500ms'");
    ok(&mut b, "insert into c values (11, 1)");
    ok(&mut b, "update p set v = 'uno' where id = 1");
    // A key change conflicts with the KEY SHARE locks.
    assert_eq!(err(&mut b, "update p set id = 5 where id = 1"), "55P03");
    ok(&mut a, "commit");
    ok(&mut b, "rollback");
    e.shutdown().unwrap();
}

#[test]
fn racing_deletes_and_inserts_never_leave_an_orphan() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut s = Session::new(e.clone());
    ok(&mut s, "create table p (id int primary key, v text)");
    ok(
        &mut s,
        "create table c (id serial primary key, pid int references p)",
    );
    ok(
        &mut s,
        "insert into p select g, 'x' from generate_series(1, 40) g",
    );
    let inserters: Vec<_> = (0..3)
        .map(|w| {
            let e = e.clone();
            thread::spawn(move || {
                let mut s = Session::new(e);
                for i in 0..120 {
                    let pid = (i * 7 + w * 13) % 40 + 1;
                    let _ = s.execute(&format!("insert into c (pid) values ({pid})"), &[]);
                }
            })
        })
        .collect();
    let deleter = {
        let e = e.clone();
        thread::spawn(move || {
            let mut s = Session::new(e);
            for id in (1..=40).rev() {
                let _ = s.execute(&format!("delete from p where id = {id}"), &[]);
            }
        })
    };
    for t in inserters {
        t.join().unwrap();
    }
    deleter.join().unwrap();
    assert!(orphans(&e).is_empty(), "orphans: {:?}", orphans(&e));
    e.shutdown().unwrap();
}

#[test]
fn constraints_survive_a_restart_and_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    setup(&e);
    let mut s = Session::new(e.clone());
    ok(
        &mut s,
        "alter table c add constraint c_id_small check (id < 1000)",
    );
    e.shutdown().unwrap();
    let (e, _) = Engine::open(dir.path()).unwrap();
    let mut s = Session::new(e.clone());
    assert_eq!(err(&mut s, "insert into c values (1, 9)"), "23503");
    assert_eq!(err(&mut s, "insert into c values (1000, 1)"), "23514");
    ok(&mut s, "insert into c values (1, 1)");
    ok(&mut s, "alter table c drop constraint c_id_small");
    e.shutdown_immediate();
    drop(s);
    drop(e);
    let (e, report) = Engine::open(dir.path()).unwrap();
    assert!(report.is_some(), "that was a crash");
    let mut s = Session::new(e.clone());
    ok(&mut s, "insert into c values (1000, 1)");
    assert_eq!(err(&mut s, "delete from p where id = 1"), "23503");
    e.shutdown().unwrap();
}

/// COPY into a table with constraints checks each row's CHECKs (the failing line named)
/// and, at its end, each row's references; a failure leaves nothing of the COPY.
#[test]
fn copy_checks_constraints() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    setup(&e);
    let mut s = Session::new(e.clone());
    ok(
        &mut s,
        "alter table c add constraint c_id_pos check (id > 0)",
    );
    let copy =
        |s: &mut Session, data: &[u8]| match s.execute("copy c from stdin", &[]).pop().unwrap() {
            Ok(walrus_sql::Outcome::CopyIn(c)) => s.copy_in(*c, data),
            other => panic!("copy: {other:?}"),
        };
    assert_eq!(copy(&mut s, b"1\t1\n2\t2\n3\t\\N\n").unwrap().tag, "COPY 3");
    let bad_check = copy(&mut s, b"4\t1\n-5\t1\n").unwrap_err();
    assert_eq!(bad_check.sqlstate, "23514");
    assert!(
        bad_check
            .context
            .as_deref()
            .unwrap_or("")
            .contains("line 2"),
        "{bad_check:?}"
    );
    assert_eq!(copy(&mut s, b"6\t1\n7\t9\n").unwrap_err().sqlstate, "23503");
    assert_eq!(
        text_rows(&mut s, "select id from c order by id"),
        ["1", "2", "3"]
    );
    e.shutdown().unwrap();
}
