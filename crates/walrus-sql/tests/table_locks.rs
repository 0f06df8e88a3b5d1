//! Table locks between sessions, as PostgreSQL behaves: a transaction that has read a
//! table keeps TRUNCATE, DROP and ALTER TABLE waiting until it ends (so a REPEATABLE
//! READ transaction's answers do not change under it), CREATE INDEX does not wait for
//! readers, and `LOCK TABLE` takes any of the eight modes with NOWAIT and
//! `lock_timeout`.

mod common;

use common::{engine, err, in_thread, ok, settle, text_rows};
use walrus_sql::Session;

fn setup(e: &walrus_engine::Engine) {
    let mut s = Session::new(e.clone());
    ok(&mut s, "create table t (a int)");
    ok(
        &mut s,
        "insert into t select g from generate_series(1, 1000) g",
    );
}

/// The wrong answer this fixes: a REPEATABLE READ transaction counted 1000 rows, another
/// session's TRUNCATE committed, and the same count answered 0.
#[test]
fn truncate_waits_for_a_repeatable_read_reader() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    setup(&e);
    let mut a = Session::new(e.clone());
    ok(&mut a, "begin isolation level repeatable read");
    assert_eq!(text_rows(&mut a, "select count(*) from t"), ["1000"]);
    let (truncate, started) = in_thread(&e, &["truncate t", "select count(*) from t"]);
    settle(&started);
    assert!(!truncate.is_finished(), "TRUNCATE waits for the reader");
    assert_eq!(
        text_rows(&mut a, "select count(*) from t"),
        ["1000"],
        "the reader's answer does not change under it"
    );
    // A new reader queues behind the waiting TRUNCATE, as in PostgreSQL.
    let (late, started) = in_thread(&e, &["select count(*) from t"]);
    settle(&started);
    assert!(!late.is_finished(), "a later reader waits for the TRUNCATE");
    ok(&mut a, "commit");
    assert_eq!(truncate.join().unwrap(), ["", "0"]);
    assert_eq!(late.join().unwrap(), ["0"]);
}

/// DROP TABLE and ALTER TABLE wait the same way; an index scan takes the lock as a
/// sequential scan does; CREATE INDEX does not wait for a reader.
#[test]
fn drop_and_alter_wait_for_readers_create_index_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    setup(&e);
    let mut s = Session::new(e.clone());
    ok(&mut s, "create table k (id int primary key, v text)");
    ok(&mut s, "insert into k values (1, 'one')");
    let mut a = Session::new(e.clone());
    ok(&mut a, "begin");
    assert_eq!(text_rows(&mut a, "select v from k where id = 1"), ["one"]);
    assert_eq!(text_rows(&mut a, "select count(*) from t"), ["1000"]);
    let (create_index, started) = in_thread(&e, &["create index t_a on t (a)"]);
    settle(&started);
    assert_eq!(
        create_index.join().unwrap(),
        [""],
        "CREATE INDEX beside a reader"
    );
    let (alter, started) = in_thread(&e, &["alter table k add column w int default 7"]);
    settle(&started);
    assert!(
        !alter.is_finished(),
        "ALTER TABLE waits for the index-scan reader"
    );
    let (drop, started) = in_thread(&e, &["drop table t"]);
    settle(&started);
    assert!(!drop.is_finished(), "DROP TABLE waits for the reader");
    assert_eq!(text_rows(&mut a, "select * from k"), ["1|one"]);
    ok(&mut a, "commit");
    assert_eq!(alter.join().unwrap(), [""]);
    assert_eq!(drop.join().unwrap(), [""]);
    assert_eq!(text_rows(&mut s, "select * from k"), ["1|one|7"]);
}

#[test]
fn lock_table_modes_nowait_and_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    setup(&e);
    let mut a = Session::new(e.clone());
    let mut b = Session::new(e.clone());
    assert_eq!(err(&mut a, "lock table t"), "25P01");
    assert_eq!(err(&mut a, "lock table nosuch in share mode"), "25P01");
    ok(&mut a, "begin");
    assert_eq!(err(&mut a, "lock table nosuch in share mode"), "42P01");
    ok(&mut a, "rollback");
    ok(&mut a, "begin");
    assert_eq!(err(&mut a, "lock table pg_class"), "0A000");
    ok(&mut a, "rollback");
    ok(&mut a, "begin");
    ok(&mut a, "lock table t in share mode");
    // Share lets readers and other sharers in, keeps writers out.
    assert_eq!(text_rows(&mut b, "select count(*) from t"), ["1000"]);
    ok(&mut b, "begin");
    ok(&mut b, "lock t in share mode nowait");
    ok(&mut b, "commit");
    ok(&mut b, "begin");
    assert_eq!(
        err(&mut b, "lock table t in row exclusive mode nowait"),
        "55P03"
    );
    ok(&mut b, "rollback");
    ok(&mut b, "set lock_timeout = '100ms'");
    assert_eq!(err(&mut b, "insert into t values (0)"), "55P03");
    ok(&mut b, "reset lock_timeout");
    ok(&mut a, "commit");
    // ACCESS EXCLUSIVE (the default) keeps readers out until the holder ends.
    ok(&mut a, "begin");
    ok(&mut a, "lock table only t");
    let (reader, started) = in_thread(&e, &["select count(*) from t"]);
    settle(&started);
    assert!(!reader.is_finished(), "a reader waits for ACCESS EXCLUSIVE");
    ok(&mut a, "insert into t values (0)");
    ok(&mut a, "commit");
    assert_eq!(reader.join().unwrap(), ["1001"]);
}

/// Two readers that each try to empty the table the other has read: one of them is
/// refused with 40P01 and the other goes on.
#[test]
fn lock_upgrade_deadlock_is_detected() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    setup(&e);
    let mut a = Session::new(e.clone());
    ok(&mut a, "begin");
    assert_eq!(text_rows(&mut a, "select count(*) from t"), ["1000"]);
    let (b, started) = in_thread(
        &e,
        &["begin", "select count(*) from t", "truncate t", "commit"],
    );
    settle(&started);
    assert_eq!(err(&mut a, "truncate t"), "40P01");
    ok(&mut a, "rollback");
    assert_eq!(b.join().unwrap(), ["", "1000", "", ""]);
}
