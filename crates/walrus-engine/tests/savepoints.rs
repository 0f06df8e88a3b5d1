//! Savepoints (subtransactions) through the engine's API: what a rollback to a savepoint
//! undoes and what it keeps, what other transactions see (nothing until the commit, then
//! everything at once), row-lock waits on a subtransaction's changes, unique checks
//! against the transaction's own subtransactions, DDL inside a savepoint, a crash after
//! a commit whose subtransactions were partly rolled back, and many savepoints in one
//! transaction (committed by several WAL records, then replayed after a crash).

use std::sync::Arc;
use std::time::Duration;

use walrus_engine::access::datum::{Datum, TypeId};
use walrus_engine::catalog::{ColumnDef, TableDef};
use walrus_engine::engine::{Isolation, RowChange, Transaction};
use walrus_engine::Engine;

fn engine(dir: &std::path::Path) -> Engine {
    let cfg: String = walrus_engine::settings::default_config_text(1 << 20)
        .lines()
        .map(|line| match line.split(" = ").next().unwrap_or("") {
            "shared_buffers" => "shared_buffers = \"4MB\"\n".to_string(),
            "wal_sync_method" => "wal_sync_method = \"none\"\n".to_string(),
            _ => format!("{line}\n"),
        })
        .collect();
    Engine::init(dir, Some(&cfg)).unwrap();
    Engine::open(dir).unwrap().0
}

fn columns() -> Vec<ColumnDef> {
    let col = |name: &str, ty, not_null| ColumnDef {
        name: name.into(),
        ty,
        not_null,
        typmod: -1,
        declared: Default::default(),
    };
    vec![col("id", TypeId::Int4, true), col("v", TypeId::Text, false)]
}

fn table(e: &Engine, name: &str) -> Arc<TableDef> {
    let mut t = e.begin(Isolation::ReadCommitted);
    t.create_table(name, columns(), 100).unwrap();
    t.create_index(name, &format!("{name}_pkey"), &[0], true, true)
        .unwrap();
    t.commit().unwrap();
    e.catalog_view().unwrap().table(name).unwrap()
}

fn row(id: i32, v: &str) -> Vec<Datum> {
    vec![Datum::Int4(id), Datum::Text(v.into())]
}

/// Every row `t` sees, sorted by id, as (id, v).
fn rows(t: &mut Transaction, def: &TableDef) -> Vec<(i32, String)> {
    t.next_statement();
    let mut out = Vec::new();
    t.scan(def, |_, r| {
        match (&r[0], &r[1]) {
            (Datum::Int4(id), Datum::Text(v)) => out.push((*id, v.clone())),
            other => panic!("unexpected row {other:?}"),
        }
        Ok(true)
    })
    .unwrap();
    out.sort();
    out
}

fn committed_rows(e: &Engine, def: &TableDef) -> Vec<(i32, String)> {
    let mut t = e.begin(Isolation::ReadCommitted);
    let r = rows(&mut t, def);
    t.commit().unwrap();
    r
}

fn tid_of(t: &mut Transaction, def: &TableDef, id: i32) -> walrus_base::Tid {
    t.next_statement();
    let mut hits = t
        .index_lookup(def, &def.indexes[0], &[Datum::Int4(id)])
        .unwrap();
    assert_eq!(hits.len(), 1, "one visible version of {id}");
    hits.pop().unwrap().0
}

fn update(t: &mut Transaction, def: &TableDef, id: i32, v: &str) {
    let tid = tid_of(t, def, id);
    t.next_statement();
    match t.update(def, tid, &row(id, v)).unwrap() {
        RowChange::Done(_) => {}
        other => panic!("update of {id} gave {other:?}"),
    }
}

fn delete(t: &mut Transaction, def: &TableDef, id: i32) {
    let tid = tid_of(t, def, id);
    t.next_statement();
    match t.delete(def, tid).unwrap() {
        RowChange::Done(_) => {}
        other => panic!("delete of {id} gave {other:?}"),
    }
}

fn owned(v: &[(i32, &str)]) -> Vec<(i32, String)> {
    v.iter().map(|(i, s)| (*i, s.to_string())).collect()
}

#[test]
fn rollback_to_undoes_nested_changes_and_release_keeps_them() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let def = table(&e, "t");
    let mut seed = e.begin(Isolation::ReadCommitted);
    for i in 1..=3 {
        seed.insert(&def, &row(i, "base")).unwrap();
    }
    seed.commit().unwrap();

    let mut t = e.begin(Isolation::ReadCommitted);
    t.insert(&def, &row(10, "top")).unwrap();
    let a = t.savepoint();
    t.next_statement();
    t.insert(&def, &row(11, "in a")).unwrap();
    update(&mut t, &def, 1, "changed in a");
    let b = t.savepoint();
    t.next_statement();
    t.insert(&def, &row(12, "in b")).unwrap();
    delete(&mut t, &def, 2);
    update(&mut t, &def, 1, "changed again in b");
    assert_eq!(
        rows(&mut t, &def),
        owned(&[
            (1, "changed again in b"),
            (3, "base"),
            (10, "top"),
            (11, "in a"),
            (12, "in b")
        ])
    );
    // Nothing of it shows to anyone else yet.
    assert_eq!(
        committed_rows(&e, &def),
        owned(&[(1, "base"), (2, "base"), (3, "base")])
    );
    t.rollback_to_savepoint(b).unwrap();
    assert_eq!(
        rows(&mut t, &def),
        owned(&[
            (1, "changed in a"),
            (2, "base"),
            (3, "base"),
            (10, "top"),
            (11, "in a")
        ]),
        "b's insert, delete and update are undone; a's changes stay"
    );
    // b is open again (fresh): its new changes, then a RELEASE of a keeps them all.
    assert_eq!(t.savepoint_depth(), 2);
    t.insert(&def, &row(13, "in b again")).unwrap();
    t.release_savepoint(a);
    assert_eq!(t.savepoint_depth(), 0);
    // Rolled back at the top level after a release: a fresh savepoint's changes go too.
    let c = t.savepoint();
    t.next_statement();
    delete(&mut t, &def, 3);
    t.rollback_to_savepoint(c).unwrap();
    t.commit().unwrap();
    assert_eq!(
        committed_rows(&e, &def),
        owned(&[
            (1, "changed in a"),
            (2, "base"),
            (3, "base"),
            (10, "top"),
            (11, "in a"),
            (13, "in b again")
        ])
    );
    // A rollback of the whole transaction undoes its released savepoints too.
    let mut t = e.begin(Isolation::ReadCommitted);
    let s = t.savepoint();
    t.insert(&def, &row(20, "x")).unwrap();
    t.release_savepoint(s);
    t.rollback().unwrap();
    assert!(!committed_rows(&e, &def).iter().any(|r| r.0 == 20));
    e.shutdown().unwrap();
}

#[test]
fn unique_checks_see_own_subtransactions_and_ignore_rolled_back_ones() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let def = table(&e, "t");
    let mut t = e.begin(Isolation::ReadCommitted);
    let s = t.savepoint();
    t.insert(&def, &row(1, "a")).unwrap();
    t.rollback_to_savepoint(s).unwrap();
    t.next_statement();
    // The rolled-back key is free again.
    t.insert(&def, &row(1, "b")).unwrap();
    t.release_savepoint(s);
    let s2 = t.savepoint();
    t.next_statement();
    // A duplicate of a key inserted by a released savepoint of this transaction is a
    // violation, found without waiting on itself.
    let dup = t.insert(&def, &row(1, "c")).unwrap_err();
    assert_eq!(dup.sqlstate(), "23505", "{dup}");
    t.rollback_to_savepoint(s2).unwrap();
    t.next_statement();
    t.insert(&def, &row(2, "d")).unwrap();
    t.commit().unwrap();
    assert_eq!(committed_rows(&e, &def), owned(&[(1, "b"), (2, "d")]));
    e.shutdown().unwrap();
}

#[test]
fn other_writers_wait_for_a_savepoints_change_until_it_is_rolled_back() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let def = table(&e, "t");
    let mut seed = e.begin(Isolation::ReadCommitted);
    seed.insert(&def, &row(1, "base")).unwrap();
    seed.commit().unwrap();

    let mut a = e.begin(Isolation::ReadCommitted);
    a.insert(&def, &row(5, "a's own")).unwrap();
    let s = a.savepoint();
    update(&mut a, &def, 1, "a in savepoint");
    let (e2, def2) = (e.clone(), def.clone());
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let b = std::thread::spawn(move || {
        let mut b = e2.begin(Isolation::ReadCommitted);
        let tid = tid_of(&mut b, &def2, 1);
        started_tx.send(()).unwrap();
        // Waits on a's subtransaction, then finds the row unchanged.
        let r = b.update(&def2, tid, &row(1, "b")).unwrap();
        assert!(matches!(r, RowChange::Done(_)), "{r:?}");
        b.commit().unwrap();
    });
    started_rx.recv().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(!b.is_finished(), "b waits for a's savepoint");
    a.rollback_to_savepoint(s).unwrap();
    b.join().unwrap();
    // a's top-level insert is untouched, and a still holds it.
    a.commit().unwrap();
    assert_eq!(committed_rows(&e, &def), owned(&[(1, "b"), (5, "a's own")]));
    e.shutdown().unwrap();
}

#[test]
fn a_deadlock_through_a_subtransaction_is_detected() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let def = table(&e, "t");
    let mut seed = e.begin(Isolation::ReadCommitted);
    seed.insert(&def, &row(1, "x")).unwrap();
    seed.insert(&def, &row(2, "y")).unwrap();
    seed.commit().unwrap();
    // a changes row 1 inside a savepoint; b changes row 2, then waits for row 1; a then
    // waits for row 2 from its top level: a cycle between the two transactions.
    let mut a = e.begin(Isolation::ReadCommitted);
    a.insert(&def, &row(3, "a")).unwrap();
    a.savepoint();
    update(&mut a, &def, 1, "a");
    let (e2, def2) = (e.clone(), def.clone());
    let b = std::thread::spawn(move || {
        let mut b = e2.begin(Isolation::ReadCommitted);
        update(&mut b, &def2, 2, "b");
        std::thread::sleep(Duration::from_millis(200));
        let tid = tid_of(&mut b, &def2, 1);
        let r = b.update(&def2, tid, &row(1, "b"));
        drop(b);
        r.map(|_| ())
    });
    std::thread::sleep(Duration::from_millis(50));
    let tid = tid_of(&mut a, &def, 2);
    let ra = a.update(&def, tid, &row(2, "a"));
    drop(a);
    let rb = b.join().unwrap();
    let codes: Vec<&str> = [ra.as_ref().err(), rb.as_ref().err()]
        .into_iter()
        .flatten()
        .map(|e| e.sqlstate())
        .collect();
    assert!(codes.contains(&"40P01"), "{ra:?} / {rb:?}");
    e.shutdown().unwrap();
}

#[test]
fn ddl_inside_a_rolled_back_savepoint_is_undone_and_its_files_removed() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let def = table(&e, "t");
    let mut t = e.begin(Isolation::ReadCommitted);
    let s = t.savepoint();
    t.create_table("made_in_savepoint", columns(), 100).unwrap();
    let made = t.table("made_in_savepoint").unwrap();
    t.create_index("t", "t_v", &[1], false, false).unwrap();
    t.drop_table("t").unwrap();
    t.rollback_to_savepoint(s).unwrap();
    t.next_statement();
    assert_eq!(
        t.table("made_in_savepoint").unwrap_err().sqlstate(),
        "42P01"
    );
    assert!(
        !e.pool().relfiles.path(made.relfile).exists(),
        "the new table's file is removed at the rollback"
    );
    let now = t.table("t").unwrap();
    assert_eq!(now.relfile, def.relfile, "the drop is forgotten");
    assert_eq!(
        now.indexes.len(),
        1,
        "the index made in the savepoint is gone"
    );
    t.insert(&now, &row(1, "after")).unwrap();
    t.commit().unwrap();
    assert_eq!(committed_rows(&e, &def), owned(&[(1, "after")]));
    assert!(e.pool().relfiles.path(def.relfile).exists());
    e.shutdown().unwrap();
}

#[test]
fn a_crash_after_commit_keeps_exactly_the_savepoints_not_rolled_back() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let def = table(&e, "t");
    let mut t = e.begin(Isolation::ReadCommitted);
    t.insert(&def, &row(1, "top")).unwrap();
    let a = t.savepoint();
    t.insert(&def, &row(2, "released")).unwrap();
    let b = t.savepoint();
    t.insert(&def, &row(3, "rolled back")).unwrap();
    t.create_table("gone", columns(), 100).unwrap();
    t.rollback_to_savepoint(b).unwrap();
    t.insert(&def, &row(4, "after rollback")).unwrap();
    t.release_savepoint(a);
    t.commit().unwrap();
    // An open transaction with a savepoint at the crash: none of it survives.
    let mut open = e.begin(Isolation::ReadCommitted);
    open.insert(&def, &row(9, "top, never committed")).unwrap();
    open.savepoint();
    open.insert(&def, &row(8, "savepoint, never committed"))
        .unwrap();
    e.shutdown_immediate();
    drop(open);
    drop(e);
    let (e, report) = Engine::open(dir.path()).unwrap();
    assert!(report.is_some(), "that was a crash");
    assert_eq!(
        committed_rows(&e, &def),
        owned(&[(1, "top"), (2, "released"), (4, "after rollback")])
    );
    assert!(e.catalog_view().unwrap().table("gone").is_err());
    e.shutdown().unwrap();
}

#[test]
fn ten_thousand_savepoints_in_one_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let def = table(&e, "t");
    let mut t = e.begin(Isolation::ReadCommitted);
    for i in 0..10_000 {
        let s = t.savepoint();
        t.next_statement();
        t.insert(&def, &row(i, "kept")).unwrap();
        if i % 2 == 1 {
            t.rollback_to_savepoint(s).unwrap();
        }
        // Odd ones rolled back, even ones stay open (nested ever deeper) until the end.
    }
    assert_eq!(t.savepoint_depth(), 10_000);
    // Another transaction's snapshot meanwhile lists the live subtransactions.
    let mut other = e.begin(Isolation::ReadCommitted);
    assert!(rows(&mut other, &def).is_empty());
    other.commit().unwrap();
    t.commit().unwrap();
    let got = committed_rows(&e, &def);
    assert_eq!(got.len(), 5_000);
    assert!(got.iter().all(|(id, _)| id % 2 == 0));
    // 5,000 live subxids take more than one commit record (`XACT_SUBXIDS` ahead of
    // it): after a crash, redo commits every one of them.
    e.shutdown_immediate();
    drop(e);
    let (e, report) = Engine::open(dir.path()).unwrap();
    assert!(report.is_some(), "that was a crash");
    assert_eq!(committed_rows(&e, &def), got);
    e.shutdown().unwrap();
}
