//! The engine's transactional behaviour through its public API: MVCC visibility under
//! READ COMMITTED and REPEATABLE READ, row-lock waits and deadlock detection, unique
//! indexes, HOT updates, vacuum, DDL (transactional), and reopening after shutdown.

use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use walrus_engine::access::datum::{Datum, EncodedRows, TypeId};
use walrus_engine::catalog::{ColumnDef, TableDef};
use walrus_engine::engine::{Isolation, RowChange};
use walrus_engine::{Engine, Error};

/// Whether the file at `path` is gone within ten seconds: a committed DROP removes its
/// files on a helper thread (`storage::relfile` rule 6).
fn removed_soon(path: &std::path::Path) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while path.exists() {
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

fn engine(dir: &std::path::Path) -> Engine {
    engine_with(dir, &[])
}

/// An engine whose configuration file sets `name = value` for each of `sets` (values
/// as TOML writes them) over a small test configuration.
fn engine_with(dir: &std::path::Path, sets: &[(&str, &str)]) -> Engine {
    let mut sets = sets.to_vec();
    sets.extend([
        ("shared_buffers", "\"4MB\""),
        ("wal_sync_method", "\"none\""),
    ]);
    let cfg: String = walrus_engine::settings::default_config_text(1 << 20)
        .lines()
        .map(|line| {
            let name = line.split(" = ").next().unwrap_or("");
            match sets.iter().find(|(n, _)| *n == name) {
                Some((n, v)) => format!("{n} = {v}\n"),
                None => format!("{line}\n"),
            }
        })
        .collect();
    Engine::init(dir, Some(&cfg)).unwrap();
    Engine::open(dir).unwrap().0
}

/// `(id int4, v text)`, `id` NOT NULL or not.
fn id_v_columns(id_not_null: bool) -> Vec<ColumnDef> {
    vec![
        ColumnDef {
            name: "id".into(),
            ty: TypeId::Int4,
            not_null: id_not_null,
            typmod: -1,
            declared: Default::default(),
        },
        ColumnDef {
            name: "v".into(),
            ty: TypeId::Text,
            not_null: false,
            typmod: -1,
            declared: Default::default(),
        },
    ]
}

fn table(e: &Engine) -> Arc<TableDef> {
    let mut t = e.begin(Isolation::ReadCommitted);
    t.create_table("t", id_v_columns(true), 100).unwrap();
    t.create_index("t", "t_pkey", &[0], true, true).unwrap();
    t.commit().unwrap();
    e.catalog_view().unwrap().table("t").unwrap()
}

fn row(id: i32, v: &str) -> Vec<Datum> {
    vec![Datum::Int4(id), Datum::Text(v.into())]
}

fn get(
    t: &mut walrus_engine::engine::Transaction,
    def: &TableDef,
    id: i32,
) -> Option<(walrus_base::Tid, Vec<Datum>)> {
    let mut rows = t
        .index_lookup(def, &def.indexes[0], &[Datum::Int4(id)])
        .unwrap();
    assert!(rows.len() <= 1, "at most one visible version: {rows:?}");
    rows.pop()
}

#[test]
fn read_committed_and_repeatable_read_visibility() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let def = table(&e);
    let mut w = e.begin(Isolation::ReadCommitted);
    w.insert(&def, &row(1, "a")).unwrap();
    let mut rc = e.begin(Isolation::ReadCommitted);
    let mut rr = e.begin(Isolation::RepeatableRead);
    assert!(
        get(&mut rc, &def, 1).is_none(),
        "uncommitted insert invisible"
    );
    assert!(get(&mut rr, &def, 1).is_none());
    w.commit().unwrap();
    rc.next_statement();
    rr.next_statement();
    assert_eq!(
        get(&mut rc, &def, 1).unwrap().1,
        row(1, "a"),
        "RC sees the commit at its next statement"
    );
    assert!(get(&mut rr, &def, 1).is_none(), "RR keeps its snapshot");
    // Own changes are visible to later commands only.
    let mut me = e.begin(Isolation::ReadCommitted);
    me.insert(&def, &row(2, "b")).unwrap();
    me.next_statement();
    assert!(get(&mut me, &def, 2).is_some());
    me.rollback().unwrap();
    let mut after = e.begin(Isolation::ReadCommitted);
    assert!(
        get(&mut after, &def, 2).is_none(),
        "rolled-back insert is gone"
    );
    e.shutdown().unwrap();
}

#[test]
fn unique_violation_and_waiting_for_an_uncommitted_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let def = table(&e);
    let mut a = e.begin(Isolation::ReadCommitted);
    a.insert(&def, &row(7, "x")).unwrap();
    a.commit().unwrap();
    let mut b = e.begin(Isolation::ReadCommitted);
    let err = b.insert(&def, &row(7, "y")).unwrap_err();
    assert_eq!(err.sqlstate(), "23505");
    assert!(
        matches!(&err, Error::UniqueViolation { detail, .. } if detail == "Key (id)=(7) already exists."),
        "{err:?}"
    );
    b.rollback().unwrap();
    // A second inserter of the same key waits for the first; when it aborts, it succeeds.
    let mut first = e.begin(Isolation::ReadCommitted);
    first.insert(&def, &row(8, "first")).unwrap();
    let (e2, def2) = (e.clone(), def.clone());
    let second = std::thread::spawn(move || {
        let mut s = e2.begin(Isolation::ReadCommitted);
        s.insert(&def2, &row(8, "second"))
            .map(|_| s.commit().unwrap())
    });
    std::thread::sleep(Duration::from_millis(200));
    assert!(!second.is_finished(), "the second inserter must wait");
    first.rollback().unwrap();
    second.join().unwrap().unwrap();
    let mut r = e.begin(Isolation::ReadCommitted);
    assert_eq!(get(&mut r, &def, 8).unwrap().1, row(8, "second"));
    e.shutdown().unwrap();
}

/// An UPDATE that keeps the primary key but changes another indexed column (no HOT)
/// adds a primary-key entry without a unique check; an inserter of that key meanwhile
/// still waits for the updater, and fails whether it commits or rolls back.
#[test]
fn a_key_kept_by_an_update_still_excludes_a_concurrent_insert() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    table(&e);
    let mut t = e.begin(Isolation::ReadCommitted);
    t.create_index("t", "t_v", &[1], false, false).unwrap();
    t.commit().unwrap();
    let def = e.catalog_view().unwrap().table("t").unwrap();
    assert_eq!(def.indexes.len(), 2);
    let mut a = e.begin(Isolation::ReadCommitted);
    a.insert(&def, &row(5, "a")).unwrap();
    a.commit().unwrap();
    for commit in [true, false] {
        let mut up = e.begin(Isolation::ReadCommitted);
        let (tid, _) = get(&mut up, &def, 5).unwrap();
        let v = if commit { "b" } else { "never" };
        assert!(matches!(
            up.update(&def, tid, &row(5, v)).unwrap(),
            walrus_engine::engine::RowChange::Done(_)
        ));
        let (e2, def2) = (e.clone(), def.clone());
        let inserter = std::thread::spawn(move || {
            let mut s = e2.begin(Isolation::ReadCommitted);
            let r = s.insert(&def2, &row(5, "dup"));
            s.rollback().unwrap();
            r
        });
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            !inserter.is_finished(),
            "the inserter waits for the updater"
        );
        if commit {
            up.commit().unwrap();
        } else {
            up.rollback().unwrap();
        }
        let err = inserter.join().unwrap().unwrap_err();
        assert_eq!(err.sqlstate(), "23505", "{err:?}");
    }
    let mut r = e.begin(Isolation::ReadCommitted);
    assert_eq!(get(&mut r, &def, 5).unwrap().1, row(5, "b"));
    e.shutdown().unwrap();
}

/// Vacuum skips pages left settled (only live, committed, undeleted rows) by COPY
/// FREEZE or by an earlier vacuum, counting their rows, and visits every page a change
/// touched since: the counts are a full visit's, a delete on a settled page is found.
#[test]
fn vacuum_skips_settled_pages_and_visits_changed_ones() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    table(&e);
    let rows: Vec<Vec<Datum>> = (0..3000).map(|i| row(i, &format!("r{i}"))).collect();
    let mut t = e.begin(Isolation::ReadCommitted);
    t.truncate("t").unwrap();
    let fresh = t.table("t").unwrap();
    t.insert_batch_frozen(&fresh, &rows).unwrap();
    t.commit().unwrap();
    let def = e.catalog_view().unwrap().table("t").unwrap();
    let report = |e: &Engine| e.vacuum_with(Some("t"), None).unwrap().remove(0);
    let pages = |e: &Engine| {
        let t = e.begin(Isolation::ReadCommitted);
        let n = t.table_pages(&def).unwrap() as u64;
        t.commit().unwrap();
        n
    };
    let first = report(&e);
    assert_eq!(
        first.pages_skipped,
        pages(&e),
        "every page loaded frozen is settled"
    );
    assert_eq!(first.counts.live, 3000);
    // Delete on one page, update on another (its new version on a third): those pages
    // are visited, the rest skipped.
    let mut t = e.begin(Isolation::ReadCommitted);
    let (deleted, _) = get(&mut t, &def, 5).unwrap();
    t.delete(&def, deleted).unwrap();
    let (old, _) = get(&mut t, &def, 2990).unwrap();
    let walrus_engine::engine::RowChange::Done(new) =
        t.update(&def, old, &row(2990, "changed")).unwrap()
    else {
        panic!("update failed")
    };
    t.commit().unwrap();
    let changed: std::collections::BTreeSet<u32> =
        [deleted.block, old.block, new.block].into_iter().collect();
    let second = report(&e);
    assert_eq!(
        second.pages_skipped,
        pages(&e) - changed.len() as u64,
        "{second:?}"
    );
    assert_eq!(second.counts.live, 2999);
    assert_eq!(second.removed, 1, "the deleted row's pointer: {second:?}");
    // Visited pages with only live rows left are settled again, except the one whose
    // dead pointer that vacuum freed after its visit: settled by the next.
    let third = report(&e);
    assert_eq!(third.pages_skipped, pages(&e) - 1, "{third:?}");
    assert_eq!(third.counts.live, 2999);
    let settled = report(&e);
    assert_eq!(settled.pages_skipped, pages(&e), "{settled:?}");
    // A new row unsettles its page.
    let mut t = e.begin(Isolation::ReadCommitted);
    t.insert(&def, &row(5, "again")).unwrap();
    t.commit().unwrap();
    let fourth = report(&e);
    assert_eq!(fourth.pages_skipped, pages(&e) - 1, "{fourth:?}");
    assert_eq!(fourth.counts.live, 3000);
    // A freeze pass visits every page, and counts the same rows.
    e.vacuum_freeze(Some("t"), None).unwrap();
    let mut t = e.begin(Isolation::ReadCommitted);
    assert_eq!(t.scan_all(&def).unwrap().len(), 3000);
    t.commit().unwrap();
    e.shutdown().unwrap();
}

#[test]
fn updaters_wait_then_follow_the_new_version_or_fail_in_repeatable_read() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let def = table(&e);
    let mut t = e.begin(Isolation::ReadCommitted);
    t.insert(&def, &row(1, "v0")).unwrap();
    t.commit().unwrap();
    let mut rr = e.begin(Isolation::RepeatableRead);
    let (rr_tid, _) = get(&mut rr, &def, 1).unwrap();
    let mut a = e.begin(Isolation::ReadCommitted);
    let (tid, _) = get(&mut a, &def, 1).unwrap();
    assert!(matches!(
        a.update(&def, tid, &row(1, "v1")).unwrap(),
        RowChange::Done(_)
    ));
    let (e2, def2) = (e.clone(), def.clone());
    let b = std::thread::spawn(move || {
        let mut b = e2.begin(Isolation::ReadCommitted);
        let (tid, _) = get(&mut b, &def2, 1).unwrap();
        let r = b.update(&def2, tid, &row(1, "v2-from-b")).unwrap();
        let newest = match r {
            RowChange::Changed(t, v) => {
                assert_eq!(v, row(1, "v1"), "B re-reads the version A committed");
                b.update(&def2, t, &row(1, "v2")).unwrap();
                true
            }
            other => panic!("expected the newer version, got {other:?}"),
        };
        b.commit().unwrap();
        newest
    });
    std::thread::sleep(Duration::from_millis(200));
    assert!(!b.is_finished(), "B waits for A's row lock");
    a.commit().unwrap();
    assert!(b.join().unwrap());
    let err = rr.update(&def, rr_tid, &row(1, "rr")).unwrap_err();
    assert_eq!(err.sqlstate(), "40001");
    let mut r = e.begin(Isolation::ReadCommitted);
    assert_eq!(get(&mut r, &def, 1).unwrap().1, row(1, "v2"));
    e.shutdown().unwrap();
}

#[test]
fn deadlocks_are_detected() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let def = table(&e);
    let mut t = e.begin(Isolation::ReadCommitted);
    t.insert(&def, &row(1, "a")).unwrap();
    t.insert(&def, &row(2, "b")).unwrap();
    t.commit().unwrap();
    let mut a = e.begin(Isolation::ReadCommitted);
    let (t1, _) = get(&mut a, &def, 1).unwrap();
    a.update(&def, t1, &row(1, "a1")).unwrap();
    let (e2, def2) = (e.clone(), def.clone());
    let b = std::thread::spawn(move || {
        let mut b = e2.begin(Isolation::ReadCommitted);
        let (t2, _) = get(&mut b, &def2, 2).unwrap();
        b.update(&def2, t2, &row(2, "b1")).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let (t1, _) = get(&mut b, &def2, 1).unwrap();
        let r = b.update(&def2, t1, &row(1, "b")); // waits for A
        drop(b);
        r.map(|_| ())
    });
    std::thread::sleep(Duration::from_millis(100));
    let (t2, _) = get(&mut a, &def, 2).unwrap();
    let ra = a.update(&def, t2, &row(2, "a")); // waits for B: one of the two must fail
    let rb = b.join().unwrap();
    let codes: Vec<&str> = [ra.as_ref().err(), rb.as_ref().err()]
        .into_iter()
        .flatten()
        .map(|e| e.sqlstate())
        .collect();
    assert!(
        codes.contains(&"40P01"),
        "one side reports a deadlock: {ra:?} / {rb:?}"
    );
    drop(a);
    e.shutdown().unwrap();
}

#[test]
fn hot_updates_vacuum_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let e = engine(dir.path());
        let def = table(&e);
        let mut t = e.begin(Isolation::ReadCommitted);
        for i in 0..200 {
            t.insert(&def, &row(i, "x")).unwrap();
        }
        t.commit().unwrap();
        // Many HOT updates of non-indexed columns, then deletes.
        for round in 0..20 {
            let mut t = e.begin(Isolation::ReadCommitted);
            for i in 0..200 {
                let (tid, _) = get(&mut t, &def, i).unwrap();
                t.update(&def, tid, &row(i, &format!("r{round}"))).unwrap();
            }
            t.commit().unwrap();
        }
        let mut t = e.begin(Isolation::ReadCommitted);
        for i in 0..100 {
            let (tid, _) = get(&mut t, &def, i).unwrap();
            assert!(matches!(t.delete(&def, tid).unwrap(), RowChange::Done(_)));
        }
        t.commit().unwrap();
        let reclaimed = e.vacuum("t").unwrap();
        assert!(reclaimed >= 100, "vacuum reclaimed {reclaimed}");
        let mut t = e.begin(Isolation::ReadCommitted);
        let all = t
            .index_scan(&def, &def.indexes[0], Bound::Unbounded, Bound::Unbounded)
            .unwrap();
        assert_eq!(all.len(), 100);
        assert!(all.iter().all(|(_, v)| v[1] == Datum::Text("r19".into())));
        t.commit().unwrap();
        e.shutdown().unwrap();
    }
    let (e, report) = Engine::open(dir.path()).unwrap();
    assert!(report.is_none(), "clean shutdown needs no recovery");
    let def = e.catalog_view().unwrap().table("t").unwrap();
    let mut t = e.begin(Isolation::ReadCommitted);
    assert_eq!(t.scan_all(&def).unwrap().len(), 100);
    assert_eq!(get(&mut t, &def, 150).unwrap().1, row(150, "r19"));
    assert!(get(&mut t, &def, 50).is_none());
    t.commit().unwrap();
    e.shutdown().unwrap();
}

/// A statement still holding a table's definition from before a committed TRUNCATE or
/// DROP TABLE (reads take no table lock yet) finds the table's files gone: the error
/// names the table and asks for a retry (40001), never the missing file by the server's
/// path (58P01 with the data directory, issue 52), for the heap and an index alike.
#[test]
fn reads_of_a_truncated_or_dropped_table_name_the_table_not_a_path() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let def = table(&e);
    let mut t = e.begin(Isolation::ReadCommitted);
    t.insert(&def, &row(1, "a")).unwrap();
    t.commit().unwrap();
    let check = |err: Error| {
        assert_eq!(err.sqlstate(), "40001", "{err}");
        let text = err.to_string();
        assert!(text.contains("relation \"t\""), "{text}");
        assert!(!text.contains(&*dir.path().to_string_lossy()), "{text}");
    };
    let mut t = e.begin(Isolation::ReadCommitted);
    t.truncate("t").unwrap();
    t.commit().unwrap();
    assert!(removed_soon(&e.pool().relfiles.path(def.relfile)));
    let mut stale = e.begin(Isolation::ReadCommitted);
    check(stale.scan_all(&def).unwrap_err());
    check(
        stale
            .index_lookup(&def, &def.indexes[0], &[Datum::Int4(1)])
            .unwrap_err(),
    );
    stale.rollback().unwrap();
    let def = e.catalog_view().unwrap().table("t").unwrap();
    let mut t = e.begin(Isolation::ReadCommitted);
    t.drop_table("t").unwrap();
    t.commit().unwrap();
    assert!(removed_soon(&e.pool().relfiles.path(def.relfile)));
    let mut stale = e.begin(Isolation::ReadCommitted);
    check(stale.scan_all(&def).unwrap_err());
    stale.rollback().unwrap();
    e.shutdown().unwrap();
}

#[test]
fn ddl_is_transactional() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let def = table(&e);
    let mut t = e.begin(Isolation::ReadCommitted);
    t.insert(&def, &row(1, "a")).unwrap();
    t.commit().unwrap();
    // A rolled-back DROP leaves the table; a committed TRUNCATE empties it.
    let mut d = e.begin(Isolation::ReadCommitted);
    d.drop_table("t").unwrap();
    d.rollback().unwrap();
    let def = e.catalog_view().unwrap().table("t").unwrap();
    let mut t = e.begin(Isolation::ReadCommitted);
    t.truncate("t").unwrap();
    t.commit().unwrap();
    let def2 = e.catalog_view().unwrap().table("t").unwrap();
    assert_ne!(def.relfile, def2.relfile, "truncate switched to a new file");
    assert!(
        removed_soon(&e.pool().relfiles.path(def.relfile)),
        "the old file is gone after commit"
    );
    let mut t = e.begin(Isolation::ReadCommitted);
    assert!(t.scan_all(&def2).unwrap().is_empty());
    t.insert(&def2, &row(1, "again")).unwrap();
    t.commit().unwrap();
    let mut t = e.begin(Isolation::ReadCommitted);
    t.drop_table("t").unwrap();
    t.commit().unwrap();
    assert!(matches!(
        e.catalog_view().unwrap().table("t"),
        Err(Error::UndefinedTable(_))
    ));
    let mut t = e.begin(Isolation::ReadCommitted);
    let err = t.create_table(
        "x",
        vec![ColumnDef {
            name: "a".into(),
            ty: TypeId::Int4,
            not_null: false,
            typmod: -1,
            declared: Default::default(),
        }],
        100,
    );
    assert!(err.is_ok());
    let dup = t.create_table("x", vec![], 100).unwrap_err();
    assert_eq!(dup.sqlstate(), "42P07");
    e.shutdown().unwrap();
}

/// Inserts rows 0..400 into `def` (fillfactor 100: each page filled completely) and
/// returns the ids that landed on page 0.
fn fill_pages(e: &Engine, def: &TableDef) -> Vec<i32> {
    let mut t = e.begin(Isolation::ReadCommitted);
    for i in 0..400 {
        t.insert(def, &row(i, "0123456789abcdefghij")).unwrap();
    }
    t.commit().unwrap();
    let mut t = e.begin(Isolation::ReadCommitted);
    let on_first_page: Vec<i32> = (0..400)
        .filter(|&i| get(&mut t, def, i).unwrap().0.block == 0)
        .collect();
    t.commit().unwrap();
    on_first_page
}

/// Updates row `key` to `v` in a transaction of its own; returns where the new version
/// went.
fn update_alone(e: &Engine, def: &TableDef, key: i32, v: &str) -> walrus_base::Tid {
    let mut t = e.begin(Isolation::ReadCommitted);
    let (tid, _) = get(&mut t, def, key).unwrap();
    let RowChange::Done(new_tid) = t.update(def, tid, &row(key, v)).unwrap() else {
        panic!("update of {key} did not complete");
    };
    t.commit().unwrap();
    new_tid
}

/// A full page whose old versions have died is pruned by the next update that needs room
/// on it (the page's prune xid says there may be something to remove), so that update
/// stays on the page as a HOT update instead of moving the row to another page.
#[test]
fn update_on_a_full_page_prunes_dead_versions_and_stays_on_the_page() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let def = table(&e);
    let on_first_page = fill_pages(&e, &def);
    assert!(
        on_first_page.len() > 20,
        "page 0 holds {} rows",
        on_first_page.len()
    );
    let (a, b) = (on_first_page[0], on_first_page[1]);

    let update_alone = |key: i32| update_alone(&e, &def, key, "0123456789ABCDEFGHIJ");

    // Nothing on the full page is dead yet: the new version has to go elsewhere.
    let moved = update_alone(a);
    assert_ne!(moved.block, 0, "a full page has no room without pruning");

    // Now `a`'s old version on page 0 is dead to every snapshot: the next update on the
    // page prunes it and fits there.
    let stayed = update_alone(b);
    assert_eq!(
        stayed.block, 0,
        "the update should have pruned page 0 and stayed on it"
    );

    let mut t = e.begin(Isolation::ReadCommitted);
    assert_eq!(
        get(&mut t, &def, a).unwrap().1,
        row(a, "0123456789ABCDEFGHIJ")
    );
    assert_eq!(
        get(&mut t, &def, b).unwrap().1,
        row(b, "0123456789ABCDEFGHIJ")
    );
    assert_eq!(t.scan_all(&def).unwrap().len(), 400);
    t.commit().unwrap();
    e.shutdown().unwrap();
}

/// Counts the index entries for `id` (from `explain_missing`'s "N index entries").
fn index_entries(t: &mut walrus_engine::engine::Transaction, def: &TableDef, id: i32) -> usize {
    let s = t.explain_missing(def, &def.indexes[0], &[Datum::Int4(id)]);
    let n = s
        .split("; ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok());
    n.unwrap_or_else(|| panic!("no entry count in {s:?}"))
}

/// A row moved off a full page (a non-HOT update) leaves its old index entry pointing
/// at a chain that pruning later marks `DEAD`. The first lookup that meets it removes
/// it (a logged delete, PostgreSQL's kill_prior_tuple), so later lookups of the key stop
/// visiting it, without waiting for VACUUM; the removal survives a crash. An entry whose
/// old version an open snapshot can still see is kept.
#[test]
fn lookups_remove_index_entries_of_dead_chains() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let def = table(&e);
    let on_first_page = fill_pages(&e, &def);
    let (a, b, c) = (on_first_page[0], on_first_page[1], on_first_page[2]);
    let update_alone = |key: i32, v: &str| update_alone(&e, &def, key, v);

    // `c` moves off the full page while an old snapshot still sees its first version.
    let mut old_reader = e.begin(Isolation::RepeatableRead);
    assert_eq!(
        get(&mut old_reader, &def, c).unwrap().1,
        row(c, "0123456789abcdefghij")
    );
    assert_ne!(update_alone(c, "0123456789ABCDEFGHIJ").block, 0);
    // `a` moves off too; then an update of `b` prunes page 0 (the prune xid is `c`'s,
    // which the reader holds back, so prune only what is dead: nothing yet).
    assert_ne!(update_alone(a, "0123456789ABCDEFGHIJ").block, 0);
    let mut t = e.begin(Isolation::ReadCommitted);
    assert_eq!(index_entries(&mut t, &def, a), 2);
    t.commit().unwrap();
    // The reader ends: both old versions are dead to all; `b`'s update prunes page 0,
    // leaving `a`'s and `c`'s old roots DEAD.
    old_reader.commit().unwrap();
    assert_eq!(update_alone(b, "0123456789ABCDEFGHIJ").block, 0);
    assert_eq!(e.dead_index_entries_removed(), 0);

    let mut t = e.begin(Isolation::ReadCommitted);
    assert_eq!(
        get(&mut t, &def, a).unwrap().1,
        row(a, "0123456789ABCDEFGHIJ")
    );
    assert_eq!(
        e.dead_index_entries_removed(),
        1,
        "the lookup removes a's dead entry"
    );
    assert_eq!(index_entries(&mut t, &def, a), 1);
    assert_eq!(
        get(&mut t, &def, a).unwrap().1,
        row(a, "0123456789ABCDEFGHIJ")
    );
    assert_eq!(e.dead_index_entries_removed(), 1, "nothing left to remove");
    // `c`'s entry is still there until a lookup of `c` meets it.
    assert_eq!(index_entries(&mut t, &def, c), 2);
    t.commit().unwrap();

    // A commit makes the logged delete durable (a lookup alone commits nothing); then a
    // crash: replay removes the entry again.
    assert_eq!(update_alone(b, "0123456789abcdefghij").block, 0);
    e.shutdown_immediate();
    drop(e);
    let (e, report) = Engine::open(dir.path()).unwrap();
    assert!(
        report.is_some(),
        "the engine was not shut down: recovery expected"
    );
    let def = e.catalog_view().unwrap().table("t").unwrap();
    let mut t = e.begin(Isolation::ReadCommitted);
    assert_eq!(index_entries(&mut t, &def, a), 1);
    assert_eq!(
        get(&mut t, &def, a).unwrap().1,
        row(a, "0123456789ABCDEFGHIJ")
    );
    assert_eq!(
        get(&mut t, &def, c).unwrap().1,
        row(c, "0123456789ABCDEFGHIJ")
    );
    assert_eq!(index_entries(&mut t, &def, c), 1);
    assert_eq!(t.scan_all(&def).unwrap().len(), 400);
    t.commit().unwrap();
    e.shutdown().unwrap();
}

/// All entries of `def`'s index named `name`, dead or alive.
fn entries_of(e: &Engine, def: &TableDef, name: &str) -> usize {
    let idx = def.indexes.iter().find(|i| i.name == name).unwrap();
    walrus_engine::access::btree::BTree::open(e.pool(), idx.relfile, idx.unique, &idx.name)
        .range(Bound::Unbounded, Bound::Unbounded)
        .unwrap()
        .len()
}

/// Moves rows `keys` to new ids (`+ shift`): non-HOT updates, each leaving an index
/// entry behind; 100 rows per transaction.
fn move_rows(e: &Engine, def: &TableDef, keys: std::ops::Range<i32>, shift: i32) {
    let keys: Vec<i32> = keys.collect();
    for chunk in keys.chunks(100) {
        let mut t = e.begin(Isolation::ReadCommitted);
        for &k in chunk {
            let (tid, v) = get(&mut t, def, k).unwrap();
            let Datum::Text(text) = &v[1] else { panic!() };
            assert!(matches!(
                t.update(def, tid, &row(k + shift, text)).unwrap(),
                RowChange::Done(_)
            ));
        }
        t.commit().unwrap();
    }
}

/// Polls `cond` every 10 ms for at most `secs` seconds.
fn wait_until(secs: u64, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Autovacuum vacuums a table once its dead row versions exceed threshold + scale
/// factor × live rows, removing the dead versions' index entries, and records it in the
/// table's counters (`pg_stat_user_tables`); with `autovacuum = off` nothing happens
/// until a manual VACUUM, which is counted apart.
#[test]
fn autovacuum_reclaims_dead_rows_and_their_index_entries() {
    for on in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let e = engine_with(
            dir.path(),
            &[
                ("autovacuum", if on { "\"on\"" } else { "\"off\"" }),
                ("autovacuum_naptime", "\"50ms\""),
            ],
        );
        let def = table(&e);
        let mut t = e.begin(Isolation::ReadCommitted);
        for i in 0..1000 {
            t.insert(&def, &row(i, "some text")).unwrap();
        }
        t.commit().unwrap();
        // 600 dead versions > 50 + 0.2 × 1000.
        move_rows(&e, &def, 0..600, 10_000);
        let a = e.table_activity(&def);
        assert_eq!((a.inserted, a.updated, a.hot_updated), (1000, 600, 0));
        if on {
            // (One may already have run while the updates went on.)
            wait_until(30, "autovacuum to remove the dead entries", || {
                let a = e.table_activity(&def);
                a.autovacuums >= 1 && a.dead == 0 && entries_of(&e, &def, "t_pkey") == 1000
            });
        } else {
            std::thread::sleep(Duration::from_millis(500));
            let a = e.table_activity(&def);
            assert_eq!((a.autovacuums, a.dead), (0, 600), "autovacuum = off");
            assert!(entries_of(&e, &def, "t_pkey") > 1000);
            e.vacuum("t").unwrap();
        }
        let a = e.table_activity(&def);
        assert_eq!(entries_of(&e, &def, "t_pkey"), 1000, "autovacuum {on}");
        assert_eq!((a.live, a.dead), (1000, 0), "autovacuum {on}: {a:?}");
        if on {
            assert!(a.autovacuums >= 1 && a.vacuums == 0 && a.last_autovacuum.is_some());
        } else {
            assert_eq!((a.autovacuums, a.vacuums), (0, 1));
            assert!(a.last_vacuum.is_some() && a.last_autovacuum.is_none());
        }
        let mut t = e.begin(Isolation::ReadCommitted);
        assert_eq!(t.scan_all(&def).unwrap().len(), 1000);
        assert_eq!(
            get(&mut t, &def, 10_005).unwrap().1,
            row(10_005, "some text")
        );
        t.commit().unwrap();
        e.shutdown().unwrap();
    }
}

/// PostgreSQL 13's insert rule: an insert-only table (no dead rows at all) is
/// autovacuumed once the rows inserted since its last vacuum exceed
/// `autovacuum_vacuum_insert_threshold + autovacuum_vacuum_insert_scale_factor ×
/// reltuples`, the bar rising with the rows the vacuum counted; at -1 it never is.
#[test]
fn autovacuum_vacuums_insert_only_tables_past_the_insert_threshold() {
    for threshold in ["100", "-1"] {
        let dir = tempfile::tempdir().unwrap();
        let e = engine_with(
            dir.path(),
            &[
                ("autovacuum_naptime", "\"50ms\""),
                ("autovacuum_vacuum_insert_threshold", threshold),
            ],
        );
        let def = table(&e);
        let insert = |ids: std::ops::Range<i32>| {
            let mut t = e.begin(Isolation::ReadCommitted);
            for i in ids {
                t.insert(&def, &row(i, "inserted only")).unwrap();
            }
            t.commit().unwrap();
        };
        // 150 > 100 + 0.2 × 0 (never counted).
        insert(0..150);
        if threshold == "-1" {
            std::thread::sleep(Duration::from_millis(500));
            let a = e.table_activity(&def);
            assert_eq!((a.autovacuums, a.ins_since_vacuum), (0, 150), "{a:?}");
            e.shutdown().unwrap();
            continue;
        }
        wait_until(30, "autovacuum of the insert-only table", || {
            e.table_activity(&def).autovacuums == 1
        });
        let a = e.table_activity(&def);
        assert_eq!((a.ins_since_vacuum, a.dead, a.live), (0, 0, 150), "{a:?}");
        // Now the bar is 100 + 0.2 × 150 = 130: 120 more rows stay under it...
        insert(150..270);
        std::thread::sleep(Duration::from_millis(500));
        let a = e.table_activity(&def);
        assert_eq!((a.autovacuums, a.ins_since_vacuum), (1, 120), "{a:?}");
        // ... and 20 more cross it.
        insert(270..290);
        wait_until(30, "the second autovacuum", || {
            e.table_activity(&def).autovacuums == 2
        });
        let mut t = e.begin(Isolation::ReadCommitted);
        assert_eq!(t.scan_all(&def).unwrap().len(), 290);
        t.commit().unwrap();
        e.shutdown().unwrap();
    }
}

/// DDL that changes a table's indexes cancels an autovacuum of it (which would
/// otherwise free line pointers whose entries in the new index it never removed); the
/// next autovacuum cleans the new index too.
#[test]
fn ddl_cancels_a_running_autovacuum_and_the_next_one_cleans_the_new_index() {
    let dir = tempfile::tempdir().unwrap();
    // Every page visited costs the whole limit: the vacuum crawls (100 ms a page, the
    // longest delay allowed), so it is still running when CREATE INDEX commits even on a
    // machine busy enough to make the index build slow (10 ms a page was not, once).
    let e = engine_with(
        dir.path(),
        &[
            ("autovacuum_naptime", "\"50ms\""),
            ("autovacuum_vacuum_cost_limit", "1"),
            ("autovacuum_vacuum_cost_delay", "\"100ms\""),
        ],
    );
    let def = table(&e);
    let mut t = e.begin(Isolation::ReadCommitted);
    for i in 0..4000 {
        t.insert(&def, &row(i, "0123456789abcdefghij")).unwrap();
    }
    t.commit().unwrap();
    move_rows(&e, &def, 0..2000, 100_000);
    wait_until(30, "an autovacuum to start", || e.vacuum_in_progress(&def));
    let mut t = e.begin(Isolation::ReadCommitted);
    t.create_index("t", "t_v", &[1], false, false).unwrap();
    t.commit().unwrap();
    assert!(
        e.autovacuums_canceled() >= 1,
        "CREATE INDEX cancels the autovacuum"
    );
    let def = e.catalog_view().unwrap().table("t").unwrap();
    // New dead versions with entries in both indexes; only vacuum removes those in
    // t_v (no lookup goes through it).
    move_rows(&e, &def, 2000..3000, 100_000);
    assert!(entries_of(&e, &def, "t_v") > 4000);
    wait_until(120, "autovacuum to clean both indexes", || {
        entries_of(&e, &def, "t_v") == 4000 && entries_of(&e, &def, "t_pkey") == 4000
    });
    let mut t = e.begin(Isolation::ReadCommitted);
    assert_eq!(t.scan_all(&def).unwrap().len(), 4000);
    t.commit().unwrap();
    e.shutdown().unwrap();
}

/// Runs `ddl` in its own transaction beside `open_writer` (which wrote to the table):
/// it must wait until the writer commits, then succeed.
fn ddl_waits_for(
    e: &Engine,
    open_writer: walrus_engine::engine::Transaction,
    what: &str,
    ddl: impl FnOnce(&mut walrus_engine::engine::Transaction) -> walrus_engine::Result<()> + Send,
) {
    std::thread::scope(|s| {
        let ddl = s.spawn(|| {
            let mut t = e.begin(Isolation::ReadCommitted);
            ddl(&mut t)?;
            t.commit()
        });
        std::thread::sleep(Duration::from_millis(50));
        assert!(!ddl.is_finished(), "{what} must wait for the open writer");
        open_writer.commit().unwrap();
        ddl.join().unwrap().unwrap();
    });
}

/// CREATE INDEX waits for the table's open writers and then indexes their rows; a
/// writer still holding the table's old definition (read before the index existed)
/// maintains the new index too. Without table locks the index silently missed rows.
#[test]
fn create_index_waits_for_writers_and_every_later_row_is_indexed() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let def = table(&e);
    let mut open_writer = e.begin(Isolation::ReadCommitted);
    open_writer.insert(&def, &row(1, "first")).unwrap();
    ddl_waits_for(&e, open_writer, "CREATE INDEX", |t| {
        t.create_index("t", "t_v", &[1], false, false)
    });
    // `def` predates t_v: the insert must still reach it.
    let mut stale = e.begin(Isolation::ReadCommitted);
    stale.insert(&def, &row(2, "second")).unwrap();
    stale.commit().unwrap();
    let now = e.catalog_view().unwrap().table("t").unwrap();
    assert_eq!(entries_of(&e, &now, "t_v"), 2);
    let mut t = e.begin(Isolation::ReadCommitted);
    let by_v = t
        .index_lookup(&now, &now.indexes[1], &[Datum::Text("second".into())])
        .unwrap();
    assert_eq!(by_v.len(), 1);
    t.commit().unwrap();
    e.shutdown().unwrap();
}

/// A writer whose table was dropped, or truncated, by a transaction that committed
/// meanwhile gets a clear error (42P01, or 40001 to retry) instead of writing into
/// the unlinked files; DROP waits for the table's open writers.
#[test]
fn writes_after_a_concurrent_drop_or_truncate_fail_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let def = table(&e);
    let mut t = e.begin(Isolation::ReadCommitted);
    t.insert(&def, &row(1, "x")).unwrap();
    t.commit().unwrap();

    let mut late = e.begin(Isolation::ReadCommitted);
    let mut tr = e.begin(Isolation::ReadCommitted);
    tr.truncate("t").unwrap();
    tr.commit().unwrap();
    let err = late.insert(&def, &row(2, "y")).unwrap_err();
    assert!(matches!(err, Error::TableRewritten(_)), "{err}");
    assert_eq!(err.sqlstate(), "40001");
    drop(late);

    let def = e.catalog_view().unwrap().table("t").unwrap();
    let mut open_writer = e.begin(Isolation::ReadCommitted);
    open_writer.insert(&def, &row(3, "z")).unwrap();
    ddl_waits_for(&e, open_writer, "DROP TABLE", |t| t.drop_table("t"));
    let mut late = e.begin(Isolation::ReadCommitted);
    let err = late.insert(&def, &row(4, "w")).unwrap_err();
    assert!(matches!(err, Error::UndefinedTable(_)), "{err}");
    drop(late);
    e.shutdown().unwrap();
    let (e, _) = Engine::open(dir.path()).unwrap();
    assert!(e.catalog_view().unwrap().tables.is_empty());
    e.shutdown().unwrap();
}

/// Writers, CREATE INDEX, manual VACUUM and autovacuum race on one table for a few
/// seconds. Afterwards (one last VACUUM, nothing else running) every index holds
/// exactly one entry per live row and finds each row by its key: no entry lost by an
/// index built beside writers, none left for a freed line pointer, none removed for a
/// live row. No writer transaction may fail: writers own disjoint keys, and a writer
/// only ever waits for DDL before it holds the table, so no cycle can form. (This test
/// found the unique check walking a HOT chain one latch at a time: a prune between two
/// steps let it step into another row's tuple in a reused slot and report a duplicate
/// key that did not exist, 8 runs in 10 before the fix, even with no vacuum or DDL.)
#[test]
fn writers_ddl_and_vacuums_race_and_every_index_stays_exact() {
    use rand::{Rng, SeedableRng};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let e = engine_with(
        dir.path(),
        &[
            ("autovacuum_naptime", "\"10ms\""),
            ("autovacuum_vacuum_threshold", "5"),
            ("autovacuum_vacuum_cost_delay", "\"0ms\""),
        ],
    );
    let def = table(&e);
    const WRITERS: i32 = 3;
    const KEYS: i32 = 100;
    let mut t = e.begin(Isolation::ReadCommitted);
    for k in 0..WRITERS * KEYS {
        t.insert(&def, &row(k, "v0")).unwrap();
    }
    t.commit().unwrap();
    let stop = AtomicBool::new(false);
    let commits = AtomicU64::new(0);
    std::thread::scope(|s| {
        for w in 0..WRITERS {
            let (e, stop, commits) = (&e, &stop, &commits);
            s.spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(w as u64);
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let mut t = e.begin(Isolation::ReadCommitted);
                    let def = t.table("t").unwrap();
                    for _ in 0..5 {
                        let k = w * KEYS + rng.gen_range(0..KEYS);
                        let (tid, _) = get(&mut t, &def, k).expect("every key exists");
                        n += 1;
                        if rng.gen_bool(0.2) {
                            // Delete and re-insert: a new root, a new entry everywhere.
                            assert!(matches!(t.delete(&def, tid).unwrap(), RowChange::Done(_)));
                            if let Err(err) = t.insert(&def, &row(k, &format!("d{w}-{n}"))) {
                                let pkey = &def.indexes[0];
                                let mut key = Vec::new();
                                walrus_engine::access::datum::encode_key(&[Datum::Int4(k)], &mut key);
                                let entries: Vec<String> = walrus_engine::access::btree::BTree::open(
                                    e.pool(), pkey.relfile, true, &pkey.name)
                                    .lookup(&key)
                                    .unwrap()
                                    .into_iter()
                                    .map(|tid| format!("{tid:?}: {}", e.debug_version(&def, tid)))
                                    .collect();
                                panic!("re-insert of {k} (deleted {tid:?}) failed: {err:?}; entries {entries:?}");
                            }
                        } else {
                            let r = t.update(&def, tid, &row(k, &format!("u{w}-{n}"))).unwrap();
                            assert!(matches!(r, RowChange::Done(_)), "{r:?}");
                        }
                        t.next_statement();
                    }
                    t.commit().unwrap();
                    commits.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                e.vacuum("t").unwrap();
                std::thread::sleep(Duration::from_millis(30));
            }
        });
        for i in 0..4 {
            std::thread::sleep(Duration::from_millis(500));
            let mut t = e.begin(Isolation::ReadCommitted);
            t.create_index("t", &format!("t_v{i}"), &[1], false, false)
                .unwrap();
            t.commit().unwrap();
        }
        std::thread::sleep(Duration::from_millis(500));
        stop.store(true, Ordering::Relaxed);
    });
    assert!(
        commits.load(Ordering::Relaxed) > 20,
        "the writers made progress"
    );
    e.vacuum("t").unwrap();
    let def = e.catalog_view().unwrap().table("t").unwrap();
    assert_eq!(def.indexes.len(), 5);
    let mut t = e.begin(Isolation::ReadCommitted);
    let rows = t.scan_all(&def).unwrap();
    assert_eq!(rows.len(), (WRITERS * KEYS) as usize);
    for idx in &def.indexes {
        // An entry points at a chain's root, which may redirect to a heap-only version;
        // one whose line pointer leads to no tuple at all dangles.
        let dangling: Vec<String> =
            walrus_engine::access::btree::BTree::open(e.pool(), idx.relfile, idx.unique, &idx.name)
                .range(Bound::Unbounded, Bound::Unbounded)
                .unwrap()
                .into_iter()
                .map(|(_, tid)| (tid, e.debug_version(&def, tid)))
                .filter(|(_, v)| v.starts_with("Ok(None)"))
                .map(|(tid, v)| format!("{tid:?}: {v}"))
                .collect();
        assert!(
            dangling.is_empty(),
            "{}: dangling entries {dangling:?}",
            idx.name
        );
        assert_eq!(entries_of(&e, &def, &idx.name), rows.len(), "{}", idx.name);
        for (_, values) in &rows {
            let key: Vec<Datum> = idx.columns.iter().map(|&c| values[c].clone()).collect();
            let found = t.index_lookup(&def, idx, &key).unwrap();
            assert_eq!(found.len(), 1, "{} finds {key:?} once", idx.name);
            assert_eq!(&found[0].1, values, "{} finds the row of {key:?}", idx.name);
        }
    }
    t.commit().unwrap();
    e.shutdown().unwrap();
}

/// Table counters survive a clean restart (as PostgreSQL's statistics file does) and
/// start from zero after a crash; a damaged statistics file is ignored, not fatal.
#[test]
fn table_counters_survive_a_clean_restart_but_not_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let def = table(&e);
    let mut t = e.begin(Isolation::ReadCommitted);
    for i in 0..20 {
        t.insert(&def, &row(i, "x")).unwrap();
    }
    t.commit().unwrap();
    move_rows(&e, &def, 0..5, 100);
    e.vacuum("t").unwrap();
    move_rows(&e, &def, 5..8, 100);
    let before = e.table_activity(&def);
    assert_eq!(
        (before.inserted, before.updated, before.vacuums),
        (20, 8, 1)
    );
    assert_eq!((before.live, before.dead), (20, 3));
    e.shutdown().unwrap();

    let (e, _) = Engine::open(dir.path()).unwrap();
    assert_eq!(
        e.table_activity(&def),
        before,
        "restored after a clean shutdown"
    );
    // A crash (no shutdown): the next open starts from zero.
    move_rows(&e, &def, 8..9, 100);
    e.shutdown_immediate();
    drop(e);
    let (e, report) = Engine::open(dir.path()).unwrap();
    assert!(report.is_some(), "that was a crash");
    assert_eq!(e.table_activity(&def), Default::default());
    e.shutdown().unwrap();

    // A damaged file is reported and ignored.
    std::fs::write(
        dir.path().join("table_stats"),
        "walrus table stats v1\n1 2 x\n",
    )
    .unwrap();
    let (e, _) = Engine::open(dir.path()).unwrap();
    assert_eq!(e.table_activity(&def), Default::default());
    assert!(
        !dir.path().join("table_stats").exists(),
        "the file is consumed"
    );
    e.shutdown().unwrap();
}

/// A unique check that meets an unreadable heap page (a checksum failure) reports it. It
/// used to take the unreadable row for "not live" and let the duplicate in: a damaged
/// page then cost a uniqueness violation on top.
#[test]
fn a_unique_check_on_a_damaged_heap_page_is_an_error_not_a_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let relfile;
    let on_first_page;
    {
        let e = engine(dir.path());
        let def = table(&e);
        relfile = def.relfile;
        on_first_page = fill_pages(&e, &def);
        e.shutdown().unwrap();
    }
    // Flip a bit in the middle of block 0 (its tuples), on disk.
    let path = dir.path().join("base").join(relfile.0.to_string());
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[6000] ^= 0x10;
    std::fs::write(&path, &bytes).unwrap();

    let (e, _) = Engine::open(dir.path()).unwrap();
    let def = e.catalog_view().unwrap().table("t").unwrap();
    let key = on_first_page[0];
    let mut t = e.begin(Isolation::ReadCommitted);
    // The new row itself goes to a later page (block 0 is full); only the unique check
    // reads block 0.
    let err = t
        .insert(&def, &row(key, "duplicate"))
        .expect_err("a duplicate of a row on a damaged page was accepted");
    assert_eq!(err.sqlstate(), "XX001", "{err}");
    t.rollback().unwrap();
}

/// A reader holding a table's definition from before a DROP committed (readers take no
/// table lock) gets an error for the vanished file (40001 naming the table, see
/// `reads_of_a_truncated_or_dropped_table_name_the_table_not_a_path`), and leaves no file behind: file
/// numbers are never reused, so before, it silently recreated an empty one that nothing
/// ever removed. Recovery still recreates what its WAL touches (crash tests).
#[test]
fn a_reader_racing_a_drop_gets_an_error_and_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let def = table(&e);
    fill_pages(&e, &def);
    e.shutdown().unwrap();
    // Reopen so the table's pages are not in the buffer pool.
    let (e, _) = Engine::open(dir.path()).unwrap();
    let def = e.catalog_view().unwrap().table("t").unwrap();
    let path = dir.path().join("base").join(def.relfile.0.to_string());
    assert!(path.exists());
    let mut d = e.begin(Isolation::ReadCommitted);
    d.drop_table("t").unwrap();
    d.commit().unwrap();
    // Queued or already removed, the file cannot be read again.
    let mut reader = e.begin(Isolation::ReadCommitted);
    let err = reader
        .scan_all(&def)
        .expect_err("a scan of a dropped table's file succeeded");
    assert_eq!(err.sqlstate(), "40001", "{err}");
    reader.rollback().unwrap();
    assert!(removed_soon(&path), "DROP removed the file");
    let mut reader = e.begin(Isolation::ReadCommitted);
    let err = reader
        .scan_all(&def)
        .expect_err("a scan of a dropped table's file succeeded");
    assert_eq!(err.sqlstate(), "40001", "{err}");
    reader.rollback().unwrap();
    assert!(
        !path.exists(),
        "the reader recreated the dropped table's file"
    );
}

/// lock_timeout also bounds DDL waiting for a manual VACUUM of its table (a vacuum is not
/// a transaction, so that wait is the table locks' own, not the row-lock wait).
#[test]
fn ddl_waiting_for_a_manual_vacuum_honours_lock_timeout() {
    let dir = tempfile::tempdir().unwrap();
    // Every page costs the whole limit: the vacuum crawls.
    let e = engine_with(
        dir.path(),
        &[
            ("vacuum_cost_limit", "1"),
            ("vacuum_cost_delay", "\"10ms\""),
        ],
    );
    let def = table(&e);
    let mut t = e.begin(Isolation::ReadCommitted);
    for i in 0..4000 {
        t.insert(&def, &row(i, "0123456789abcdefghij")).unwrap();
    }
    t.commit().unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let vacuum = s.spawn(|| e.vacuum_with(Some("t"), Some(&stop)));
        wait_until(30, "the vacuum to start", || e.vacuum_in_progress(&def));
        let mut ddl = e.begin(Isolation::ReadCommitted);
        ddl.set_lock_timeout(Some(Duration::from_millis(100)));
        let started = std::time::Instant::now();
        let err = ddl
            .create_index("t", "t_v", &[1], false, false)
            .expect_err("CREATE INDEX ran beside a manual VACUUM");
        assert_eq!(err.sqlstate(), "55P03", "{err}");
        assert!(started.elapsed() < Duration::from_secs(20));
        ddl.rollback().unwrap();
        stop.store(true, std::sync::atomic::Ordering::Release);
        let _ = vacuum.join().unwrap();
    });
    // The table is free again: the index builds.
    let mut t = e.begin(Isolation::ReadCommitted);
    t.create_index("t", "t_v", &[1], false, false).unwrap();
    t.commit().unwrap();
}

/// A checkpoint removes the files of committed drops still queued before it completes:
/// replay from its redo point would not see those drops again (`storage::relfile` rule
/// 6). The file is queued by hand here, as a commit queues it, so no helper thread gets
/// there first.
#[test]
fn a_checkpoint_removes_queued_dropped_files_before_it_completes() {
    use walrus_base::RelFileId;
    use walrus_engine::engine::CheckpointReason;
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let files = &e.pool().relfiles;
    let r = RelFileId(900_000);
    files.create(r).unwrap();
    files.allocate_block(r).unwrap();
    files.queue_unlinks(&[r]);
    files.forget(r);
    assert!(files.path(r).exists());
    e.checkpoint(CheckpointReason::Requested).unwrap();
    assert!(
        !files.path(r).exists(),
        "the checkpoint left a dropped file"
    );
}

/// Clog truncation: a freeze pass gives every old tuple durable hint bits, the next
/// checkpoint deletes the commit-status segments below its cutoff, and every kind of
/// old row (committed, aborted insert, committed and aborted delete, updated) still
/// answers right — to readers, unique checks and writers — after the truncation, a
/// clean restart and a crash. Without the pass the same checkpoint truncates nothing.
#[test]
fn a_freeze_pass_lets_a_checkpoint_truncate_the_clog_and_every_answer_stays_right() {
    use walrus_base::Xid;
    use walrus_engine::engine::CheckpointReason;
    use walrus_engine::txn::clog::XIDS_PER_SEGMENT;

    let dir = tempfile::tempdir().unwrap();
    let clog = dir.path().join("clog");
    let seg_file = |seg: u64| clog.join(format!("{seg:012X}"));
    let e = engine(dir.path());
    let def = table(&e);
    // Old rows, one transaction each, all with xids in clog segment 0.
    let one = |f: &dyn Fn(&mut walrus_engine::engine::Transaction), commit: bool| {
        let mut t = e.begin(Isolation::ReadCommitted);
        f(&mut t);
        if commit {
            t.commit().unwrap()
        } else {
            t.rollback().unwrap()
        }
    };
    for i in 1..=40 {
        one(
            &|t| {
                t.insert(&def, &row(i, "old")).unwrap();
            },
            true,
        );
    }
    for i in 1000..1005 {
        one(
            &|t| {
                t.insert(&def, &row(i, "aborted")).unwrap();
            },
            false,
        );
    }
    let change = |t: &mut walrus_engine::engine::Transaction, id: i32, new: Option<&str>| {
        let (tid, _) = get(t, &def, id).unwrap();
        let r = match new {
            Some(v) => t.update(&def, tid, &row(id, v)).unwrap(),
            None => t.delete(&def, tid).unwrap(),
        };
        assert!(matches!(r, RowChange::Done(_)), "{r:?}");
    };
    for i in 1..=5 {
        one(&|t| change(t, i, None), true); // deleted
    }
    for i in 6..=10 {
        one(&|t| change(t, i, None), false); // delete rolled back
    }
    for i in 11..=15 {
        one(&|t| change(t, i, Some("new")), true); // updated
    }
    for i in 16..=20 {
        one(&|t| change(t, i, Some("lost")), false); // update rolled back
    }
    // Jump three segments ahead (as a long-running server would get there).
    e.txn_manager()
        .advance_next_xid(Xid(3 * XIDS_PER_SEGMENT + 100));
    for i in 2000..2005 {
        one(
            &|t| {
                t.insert(&def, &row(i, "young")).unwrap();
            },
            true,
        );
    }
    assert!(seg_file(0).exists() && seg_file(3).exists());

    let check = |e: &Engine, when: &str| {
        let mut t = e.begin(Isolation::ReadCommitted);
        let mut ids: Vec<(i32, String)> = t
            .scan_all(&def)
            .unwrap()
            .into_iter()
            .map(|(_, r)| match (&r[0], &r[1]) {
                (Datum::Int4(i), Datum::Text(v)) => (*i, v.clone()),
                other => panic!("{other:?}"),
            })
            .collect();
        ids.sort();
        let mut want: Vec<(i32, String)> = (6..=40)
            .map(|i| {
                (
                    i,
                    if (11..=15).contains(&i) { "new" } else { "old" }.to_string(),
                )
            })
            .chain((2000..2005).map(|i| (i, "young".to_string())))
            .collect();
        want.sort();
        assert_eq!(ids, want, "{when}: the visible rows");
        // The unique check sees old committed rows (and not deleted or aborted ones).
        let dup = t.insert(&def, &row(30, "dup"));
        assert!(
            matches!(dup, Err(Error::UniqueViolation { .. })),
            "{when}: {dup:?}"
        );
        t.rollback().unwrap();
        let mut t = e.begin(Isolation::ReadCommitted);
        t.insert(&def, &row(3, "reused key")).unwrap();
        t.insert(&def, &row(1001, "reused key")).unwrap();
        t.rollback().unwrap();
        // Writers change old rows whose last deleter rolled back.
        let mut t = e.begin(Isolation::ReadCommitted);
        change(&mut t, 7, Some("changed"));
        change(&mut t, 17, None);
        t.rollback().unwrap();
    };

    // A checkpoint without a freeze pass truncates nothing.
    e.checkpoint(CheckpointReason::Requested).unwrap();
    assert!(seg_file(0).exists());
    assert_eq!(e.txn_manager().clog.oldest_xid(), Xid(0));

    let report = e
        .vacuum_freeze(None, None)
        .unwrap()
        .expect("a manual pass completes");
    assert!(report.cutoff.0 > 3 * XIDS_PER_SEGMENT, "{report:?}");
    assert!(report.pages_dirtied > 0, "{report:?}");
    assert!(seg_file(0).exists(), "nothing goes before a checkpoint");
    check(&e, "frozen, not truncated");
    e.checkpoint(CheckpointReason::Requested).unwrap();
    assert!(!seg_file(0).exists(), "segment 0 was truncated");
    assert_eq!(e.txn_manager().clog.oldest_xid(), Xid(3 * XIDS_PER_SEGMENT));
    check(&e, "after truncation");

    // A clean restart reads the frozen pages back from disk.
    e.shutdown().unwrap();
    let (e, _) = Engine::open(dir.path()).unwrap();
    assert_eq!(
        e.txn_manager().clog.oldest_xid(),
        Xid(3 * XIDS_PER_SEGMENT),
        "the lowest segment file left is the truncation point"
    );
    check(&e, "after a clean restart");

    // A crash after changes to frozen pages: recovery replays onto them.
    let mut t = e.begin(Isolation::ReadCommitted);
    change(&mut t, 40, Some("old")); // same value: a new version on a frozen page
    t.commit().unwrap();
    e.shutdown_immediate();
    drop(e);
    let (e, report) = Engine::open(dir.path()).unwrap();
    assert!(report.is_some(), "that was a crash");
    check(&e, "after a crash");
    e.shutdown().unwrap();
}

/// Autovacuum starts a freeze pass once the clog holds more than
/// `autovacuum_freeze_max_age` xids — but not while an old snapshot holds the global
/// xmin in the oldest segment (the pass could free nothing, and would rescan every table
/// each naptime); the checkpoint after the pass truncates.
#[test]
fn autovacuum_freezes_when_the_clog_is_old_but_not_while_a_snapshot_pins_it() {
    use walrus_base::Xid;
    use walrus_engine::engine::CheckpointReason;
    use walrus_engine::txn::clog::XIDS_PER_SEGMENT;

    let dir = tempfile::tempdir().unwrap();
    let e = engine_with(
        dir.path(),
        &[
            ("autovacuum_naptime", "\"20ms\""),
            ("autovacuum_freeze_max_age", "1000000"),
        ],
    );
    let def = table(&e);
    let mut t = e.begin(Isolation::ReadCommitted);
    t.insert(&def, &row(1, "old")).unwrap();
    t.commit().unwrap();
    // An old snapshot: REPEATABLE READ keeps its xmin until it ends.
    let mut old = e.begin(Isolation::RepeatableRead);
    assert_eq!(old.scan_all(&def).unwrap().len(), 1);
    e.txn_manager()
        .advance_next_xid(Xid(2 * XIDS_PER_SEGMENT + 9));
    let mut t = e.begin(Isolation::ReadCommitted);
    t.insert(&def, &row(2, "young")).unwrap();
    t.commit().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        e.freeze_passes(),
        0,
        "a pass ran while a snapshot pinned segment 0"
    );
    old.rollback().unwrap();
    wait_until(10, "an automatic freeze pass", || e.freeze_passes() > 0);
    e.checkpoint(CheckpointReason::Requested).unwrap();
    assert_eq!(e.txn_manager().clog.oldest_xid(), Xid(2 * XIDS_PER_SEGMENT));
    let mut t = e.begin(Isolation::ReadCommitted);
    assert_eq!(t.scan_all(&def).unwrap().len(), 2);
    t.rollback().unwrap();
    e.shutdown().unwrap();
}

/// If a page ever escaped a freeze pass (simulated: the clog is truncated with no pass),
/// its rows' lost statuses are never guessed: vacuum, pruning and writers get an error
/// naming the transaction, readers stop with a panic the server reports as XX000, and
/// the process lives on (a panic under an exclusive page latch would abort it, and again
/// after every restart). Other tables keep working.
#[test]
fn a_row_whose_status_was_truncated_without_a_hint_is_an_error_not_a_guess() {
    use walrus_base::Xid;
    use walrus_engine::txn::clog::XIDS_PER_SEGMENT;

    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let def = table(&e);
    let mut t = e.begin(Isolation::ReadCommitted);
    t.insert(&def, &row(1, "old")).unwrap();
    t.commit().unwrap();
    e.txn_manager()
        .advance_next_xid(Xid(2 * XIDS_PER_SEGMENT + 3));
    let mut t = e.begin(Isolation::ReadCommitted);
    t.create_table(
        "other",
        vec![ColumnDef {
            name: "x".into(),
            ty: TypeId::Int4,
            not_null: false,
            typmod: -1,
            declared: Default::default(),
        }],
        100,
    )
    .unwrap();
    t.commit().unwrap();
    let other = e.catalog_view().unwrap().table("other").unwrap();
    e.checkpoint(walrus_engine::engine::CheckpointReason::Requested)
        .unwrap();
    // What a missed page would look like: segment 0 gone, the row without hints.
    e.txn_manager()
        .clog
        .truncate_below(Xid(2 * XIDS_PER_SEGMENT))
        .unwrap();
    fn lost<T>(r: &Result<T, Error>) -> bool {
        matches!(r, Err(Error::Internal(m)) if m.contains("could not access status of transaction"))
    }
    let v = e.vacuum("t");
    assert!(lost(&v), "vacuum: {v:?}");
    let mut t = e.begin(Isolation::ReadCommitted);
    let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| t.scan_all(&def)));
    assert!(read.is_err(), "a reader must not guess the row's status");
    let mut t = e.begin(Isolation::ReadCommitted);
    let dup = t.insert(&def, &row(1, "dup"));
    assert!(lost(&dup), "unique check: {dup:?}");
    t.rollback().unwrap();
    // The engine lives on.
    let mut t = e.begin(Isolation::ReadCommitted);
    t.insert(&other, &[Datum::Int4(5)]).unwrap();
    t.commit().unwrap();
    let mut t = e.begin(Isolation::ReadCommitted);
    assert_eq!(t.scan_all(&other).unwrap().len(), 1);
    t.rollback().unwrap();
}

/// An unreadable clog segment stops a freeze pass with an I/O error (58030) before it
/// changes a page: the status is not guessed as "aborted", which the pass would write
/// as a permanent hint bit and so hide a committed row for good. Once the segment is
/// readable again the pass completes and the row is there.
#[test]
fn an_unreadable_clog_segment_fails_the_freeze_pass_and_hides_no_row() {
    use walrus_base::Xid;
    use walrus_engine::engine::CheckpointReason;
    use walrus_engine::txn::clog::XIDS_PER_SEGMENT;

    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let def = table(&e);
    // The catalog's rows get their hints now (opening the engine reads them), the
    // row below keeps its status only in clog segment 0.
    e.vacuum_freeze(None, None).unwrap().expect("a pass");
    let mut t = e.begin(Isolation::ReadCommitted);
    t.insert(&def, &row(1, "old")).unwrap();
    t.commit().unwrap();
    // Later xids live in another segment.
    {
        let txn = e.txn_manager();
        let jump = 2 * XIDS_PER_SEGMENT + 3;
        txn.clog.reserve_space(txn.next_xid().0, jump + 1).unwrap();
        txn.advance_next_xid(Xid(jump));
    }
    e.checkpoint(CheckpointReason::Requested).unwrap();
    e.shutdown().unwrap();
    drop(e);

    // After a restart no clog page is resident; segment 0 cannot be opened.
    let (e, _) = Engine::open(dir.path()).unwrap();
    let seg0 = dir.path().join("clog").join(format!("{:012X}", 0));
    let aside = dir.path().join("segment-0-aside");
    std::fs::rename(&seg0, &aside).unwrap();
    std::fs::create_dir(&seg0).unwrap();
    let r = e.vacuum_freeze(None, None);
    match &r {
        Err(err @ Error::Io { .. }) => {
            assert_eq!(err.sqlstate(), "58030");
            assert!(err.to_string().contains("commit-status log"), "{err}");
        }
        other => panic!("expected an I/O error, got {other:?}"),
    }
    // The engine lives on for transactions whose statuses it can read.
    let mut t = e.begin(Isolation::ReadCommitted);
    t.insert(&def, &row(3, "during")).unwrap();
    t.commit().unwrap();

    std::fs::remove_dir(&seg0).unwrap();
    std::fs::rename(&aside, &seg0).unwrap();
    e.vacuum_freeze(None, None)
        .unwrap()
        .expect("a manual pass completes");
    let mut t = e.begin(Isolation::ReadCommitted);
    let mut ids: Vec<i32> = t
        .scan_all(&def)
        .unwrap()
        .iter()
        .map(|(_, r)| match r[0] {
            Datum::Int4(i) => i,
            ref d => panic!("{d:?}"),
        })
        .collect();
    ids.sort();
    assert_eq!(ids, vec![1, 3], "no committed row was hidden");
    t.rollback().unwrap();
    e.shutdown().unwrap();
}

/// With `synchronous_commit = off` and nothing else happening (no other commit, no
/// checkpoint), the WAL writer makes an asynchronous commit durable within 3 ×
/// `wal_writer_delay`; DDL commits are flushed at once whatever the setting.
#[test]
fn the_wal_writer_flushes_an_idle_asynchronous_commit_within_its_bound() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_with(
        dir.path(),
        &[
            ("synchronous_commit", "\"off\""),
            ("wal_writer_delay", "\"100ms\""),
            ("wal_writer_flush_after", "\"1GB\""),
            ("checkpoint_timeout", "\"1h\""),
            ("autovacuum", "\"off\""),
        ],
    );
    let def = table(&e);
    assert!(
        e.wal().flushed_lsn() >= e.wal().insert_lsn(),
        "CREATE TABLE's commit was not flushed at once"
    );
    let flushes_before = e
        .wal()
        .stats
        .writer_flushes
        .load(std::sync::atomic::Ordering::Relaxed);
    let mut t = e.begin(Isolation::ReadCommitted);
    t.insert(&def, &row(1, "async")).unwrap();
    t.commit().unwrap();
    let end = e.wal().insert_lsn();
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        e.wal().flushed_lsn() >= end,
        "after 3 x wal_writer_delay the commit ending at {end} is still not durable (flushed {})",
        e.wal().flushed_lsn()
    );
    assert!(
        e.wal()
            .stats
            .writer_flushes
            .load(std::sync::atomic::Ordering::Relaxed)
            > flushes_before,
        "the WAL writer did not flush"
    );
    e.shutdown().unwrap();
}

/// Filling several 1 MB segments: the WAL writer (and the checkpointer) create every
/// segment ahead of the insert position; no session has to create one.
#[test]
fn segments_are_prepared_ahead_of_the_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine_with(
        dir.path(),
        &[
            ("wal_writer_delay", "\"10ms\""),
            ("checkpoint_timeout", "\"1h\""),
            ("max_wal_size", "\"1GB\""),
        ],
    );
    let def = table(&e);
    let start = e.wal().insert_lsn();
    let mut id = 0;
    while e.wal().insert_lsn().distance_from(start) < 6 << 20 {
        let mut t = e.begin(Isolation::ReadCommitted);
        for _ in 0..50 {
            id += 1;
            t.insert(&def, &row(id, &"w".repeat(400))).unwrap();
        }
        t.commit().unwrap();
        // A session's pace, not a bulk load's: the writer gets its rounds.
        std::thread::sleep(Duration::from_millis(2));
    }
    let s = &e.wal().stats;
    let by_sessions = s
        .segments_created_by_sessions
        .load(std::sync::atomic::Ordering::Relaxed);
    let ahead = s
        .segments_prepared_ahead
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(ahead >= 6, "only {ahead} segments were prepared ahead");
    assert_eq!(
        by_sessions, 0,
        "sessions created {by_sessions} segments themselves"
    );
    e.shutdown().unwrap();
}

/// `insert_encoded` (COPY's text path: rows written straight into the stored encoding)
/// stores what `insert_many` stores for the same values, indexes every row, names the
/// row of a duplicate, refuses rows encoded for other column types and a frozen load
/// into a table this transaction did not create, and its rows come back after a crash.
#[test]
fn encoded_rows_insert_like_datum_rows() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let def = table(&e);
    let encode = |ids: std::ops::Range<i32>| {
        let mut rows = EncodedRows::new(
            def.types(),
            def.columns.iter().map(|c| c.not_null).collect(),
        );
        for i in ids {
            let mut w = rows.start_row();
            w.int4(i).unwrap();
            w.text(&format!("row {i:05}")).unwrap();
            w.finish().unwrap();
        }
        rows
    };
    let mut t = e.begin(Isolation::ReadCommitted);
    assert_eq!(
        t.insert_encoded(&def, &encode(0..3000), false).unwrap(),
        3000
    );
    t.commit().unwrap();

    let mut bad = encode(5000..5100);
    let mut w = bad.start_row();
    w.int4(17).unwrap();
    w.text("dup").unwrap();
    w.finish().unwrap();
    let mut t = e.begin(Isolation::ReadCommitted);
    let failure = t.insert_encoded(&def, &bad, false).unwrap_err();
    assert_eq!(failure.row, 100);
    assert!(matches!(failure.error, Error::UniqueViolation { .. }));
    t.rollback().unwrap();

    let other_types = EncodedRows::new(vec![TypeId::Int8, TypeId::Text], vec![true, false]);
    let mut rows = other_types.clone();
    let mut w = rows.start_row();
    w.int8(1).unwrap();
    w.null().unwrap();
    w.finish().unwrap();
    let mut t = e.begin(Isolation::ReadCommitted);
    assert!(t.insert_encoded(&def, &rows, false).is_err());
    assert!(t.insert_encoded(&def, &encode(9000..9001), true).is_err());
    t.rollback().unwrap();

    e.shutdown_immediate();
    drop(e);
    let (e, report) = Engine::open(dir.path()).unwrap();
    assert!(report.is_some(), "a crash: recovery expected");
    let def = e.catalog_view().unwrap().table("t").unwrap();
    let mut t = e.begin(Isolation::ReadCommitted);
    for i in (0..3000).step_by(11) {
        assert_eq!(
            get(&mut t, &def, i).unwrap().1,
            row(i, &format!("row {i:05}"))
        );
    }
    assert!(
        get(&mut t, &def, 5000).is_none(),
        "the failed batch left rows"
    );
    assert_eq!(t.scan_all(&def).unwrap().len(), 3000);
    t.commit().unwrap();
    e.shutdown().unwrap();
}

/// `insert_many` (COPY, multi-row INSERT) writes a heap page per WAL record, keeps the
/// indexes exact, fails a batch with a duplicate as a row-by-row insert would, and its
/// rows come back after a crash.
#[test]
fn bulk_insert_logs_a_page_per_record_and_survives_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let def = table(&e);
    let mut t = e.begin(Isolation::ReadCommitted);
    t.create_table(
        "plain",
        vec![ColumnDef {
            name: "v".into(),
            ty: TypeId::Text,
            not_null: false,
            typmod: -1,
            declared: Default::default(),
        }],
        100,
    )
    .unwrap();
    t.commit().unwrap();
    let plain = e.catalog_view().unwrap().table("plain").unwrap();
    // A checkpoint first, so recovery replays only the bulk inserts below.
    e.checkpoint(walrus_engine::engine::CheckpointReason::Requested)
        .unwrap();

    let rows: Vec<Vec<Datum>> = (0..4000).map(|i| row(i, &format!("row {i:05}"))).collect();
    let mut t = e.begin(Isolation::ReadCommitted);
    let tids = t.insert_many(&def, &rows).unwrap();
    assert_eq!(tids.len(), 4000);
    t.commit().unwrap();

    // A duplicate in the middle of a batch: the unique violation, and after the
    // rollback none of the batch's rows.
    let mut bad: Vec<Vec<Datum>> = (5000..5100).map(|i| row(i, "new")).collect();
    bad[60] = row(17, "dup");
    let mut t = e.begin(Isolation::ReadCommitted);
    match t.insert_many(&def, &bad) {
        Err(Error::UniqueViolation { detail, .. }) => {
            assert!(detail.contains("(id)=(17)"), "{detail}")
        }
        other => panic!("expected a unique violation, got {other:?}"),
    }
    t.rollback().unwrap();
    // A NULL in a NOT NULL column after a duplicate: the duplicate is reported first.
    let mut bad: Vec<Vec<Datum>> = (6000..6010).map(|i| row(i, "new")).collect();
    bad[3] = row(18, "dup");
    bad[7] = vec![Datum::Null, Datum::Text("x".into())];
    let mut t = e.begin(Isolation::ReadCommitted);
    assert!(matches!(
        t.insert_many(&def, &bad),
        Err(Error::UniqueViolation { .. })
    ));
    t.rollback().unwrap();

    let plain_rows: Vec<Vec<Datum>> = (0..4000)
        .map(|i| vec![Datum::Text(format!("plain row number {i:06}"))])
        .collect();
    let mut t = e.begin(Isolation::ReadCommitted);
    t.insert_many(&plain, &plain_rows).unwrap();
    t.commit().unwrap();

    e.shutdown_immediate();
    drop(e);
    let (e, report) = Engine::open(dir.path()).unwrap();
    let report = report.expect("a crash: recovery expected");
    // 4000 index entries are a record each; the 8000 heap rows fill well under 200
    // pages, a record per page (row by row they would be 8000 records).
    assert!(
        report.records < 4000 + 400,
        "{} records replayed",
        report.records
    );
    let def = e.catalog_view().unwrap().table("t").unwrap();
    let mut t = e.begin(Isolation::ReadCommitted);
    for i in (0..4000).step_by(7) {
        assert_eq!(
            get(&mut t, &def, i).unwrap().1,
            row(i, &format!("row {i:05}"))
        );
    }
    assert!(
        get(&mut t, &def, 5000).is_none(),
        "the failed batch left rows"
    );
    assert!(
        get(&mut t, &def, 6000).is_none(),
        "the failed batch left rows"
    );
    assert_eq!(t.scan_all(&def).unwrap().len(), 4000);
    let plain = e.catalog_view().unwrap().table("plain").unwrap();
    let mut back: Vec<Vec<Datum>> = t
        .scan_all(&plain)
        .unwrap()
        .into_iter()
        .map(|(_, r)| r)
        .collect();
    back.sort_by_key(|r| format!("{r:?}"));
    assert_eq!(back, plain_rows);
    t.commit().unwrap();
    e.shutdown().unwrap();
}

/// The xmin hint of every tuple on the table's heap pages (`None` past the last page).
fn xmin_hints(e: &Engine, def: &TableDef) -> Vec<bool> {
    use walrus_engine::access::heap::tuple::{TupleHeader, XMIN_COMMITTED};
    use walrus_engine::storage::page;
    let mut hints = Vec::new();
    for block in 0.. {
        let id = walrus_base::PageId::new(def.relfile, block);
        let Ok(p) = e.pool().read_page(id) else { break };
        let g = p.read();
        if page::is_new(&g[..]) {
            break;
        }
        for n in 1..=page::item_count(&g[..]) {
            if page::line_pointer(&g[..], n).state == page::LpState::Normal {
                let h = TupleHeader::read(page::item(&g[..], n)).unwrap();
                hints.push(h.infomask & XMIN_COMMITTED != 0);
            }
        }
    }
    hints
}

/// COPY FREEZE's engine side: rows loaded into a table truncated (or created) in the same
/// transaction are written with their xmin hinted committed, also by redo after a
/// crash; a table from an earlier transaction is refused; an abort leaves the old
/// rows; other transactions never see the rows before the commit.
#[test]
fn frozen_bulk_insert_needs_a_table_of_this_transaction_and_survives_redo() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let def = table(&e);
    let rows: Vec<Vec<Datum>> = (0..3000).map(|i| row(i, &format!("r{i}"))).collect();

    let mut t = e.begin(Isolation::ReadCommitted);
    assert!(!t.created_in_this_transaction(&def));
    let refused = t.insert_batch_frozen(&def, &rows[..10]).unwrap_err();
    assert!(
        matches!(refused.error, Error::InvalidInput(_)),
        "{:?}",
        refused.error
    );
    t.rollback().unwrap();

    let mut t = e.begin(Isolation::ReadCommitted);
    t.insert_many(&def, &rows[..100]).unwrap();
    t.commit().unwrap();
    assert!(
        xmin_hints(&e, &def).iter().all(|h| !h),
        "a plain load is not hinted"
    );

    // Truncate, load frozen, roll back: the old rows, unhinted, are all there is.
    let mut t = e.begin(Isolation::ReadCommitted);
    t.truncate("t").unwrap();
    let fresh = t.table("t").unwrap();
    assert!(t.created_in_this_transaction(&fresh));
    t.insert_batch_frozen(&fresh, &rows).unwrap();
    t.rollback().unwrap();
    let mut t = e.begin(Isolation::ReadCommitted);
    assert_eq!(t.scan_all(&def).unwrap().len(), 100);
    t.commit().unwrap();

    // Truncate, load frozen, commit: hinted rows; a concurrent reader cannot read the
    // table until the truncation ends (its AccessExclusive lock).
    let mut t = e.begin(Isolation::ReadCommitted);
    t.truncate("t").unwrap();
    let fresh = t.table("t").unwrap();
    t.insert_batch_frozen(&fresh, &rows).unwrap();
    t.next_statement();
    assert_eq!(t.scan_all(&fresh).unwrap().len(), 3000, "own rows visible");
    let mut other = e.begin(Isolation::RepeatableRead);
    other.set_lock_timeout(Some(std::time::Duration::from_millis(50)));
    assert!(matches!(other.scan_all(&def), Err(Error::LockTimeout)));
    t.commit().unwrap();
    let def = e.catalog_view().unwrap().table("t").unwrap();
    let hints = xmin_hints(&e, &def);
    assert_eq!(hints.len(), 3000);
    assert!(
        hints.iter().all(|&h| h),
        "every frozen row carries the hint"
    );
    other.commit().unwrap();

    e.shutdown_immediate();
    drop(e);
    let (e, report) = Engine::open(dir.path()).unwrap();
    assert!(report.is_some(), "a crash: recovery expected");
    let def = e.catalog_view().unwrap().table("t").unwrap();
    let hints = xmin_hints(&e, &def);
    assert_eq!(hints.len(), 3000);
    assert!(hints.iter().all(|&h| h), "redo rebuilt the hints");
    let mut t = e.begin(Isolation::ReadCommitted);
    assert_eq!(t.scan_all(&def).unwrap().len(), 3000);
    let (_, found) = get(&mut t, &def, 2999).expect("row 2999 through the index");
    assert_eq!(found[1], Datum::Text("r2999".into()));
    t.commit().unwrap();
    e.shutdown().unwrap();
}

/// CREATE INDEX over a table past 8 MB reads it on helper threads, each taking runs of
/// blocks that are put back in block order: the index is a serial build's (every row
/// once, in key order, rows loaded out of key order sorted), and a duplicate or a NULL
/// primary key found by any participant fails the build.
#[test]
fn a_parallel_index_build_indexes_every_row_once_in_key_order() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let mut t = e.begin(Isolation::ReadCommitted);
    t.create_table("p", id_v_columns(false), 100).unwrap();
    t.commit().unwrap();
    let def = e.catalog_view().unwrap().table("p").unwrap();
    // 40,000 rows of ~230 bytes (past 1,024 pages), keys scrambled across the blocks.
    const N: i32 = 40_000;
    let pad = "x".repeat(200);
    let mut t = e.begin(Isolation::ReadCommitted);
    let rows: Vec<Vec<Datum>> = (0..N)
        .map(|i| row((i * 7919) % N, &format!("{pad}{i}")))
        .collect();
    t.insert_many(&def, &rows).unwrap();
    t.commit().unwrap();
    assert!(e.pool().relfiles.nblocks(def.relfile).unwrap() >= 1024);

    let scans = walrus_engine::engine::parallel_scan_counts().0;
    let mut t = e.begin(Isolation::ReadCommitted);
    t.create_index("p", "p_id", &[0], true, false).unwrap();
    t.commit().unwrap();
    assert!(
        walrus_engine::engine::parallel_scan_counts().0 > scans,
        "the build ran in parallel"
    );
    let def = e.catalog_view().unwrap().table("p").unwrap();
    let mut t = e.begin(Isolation::ReadCommitted);
    let mut ids = Vec::new();
    t.index_scan_borrowed(
        &def,
        &def.indexes[0],
        Bound::Unbounded,
        Bound::Unbounded,
        &[true, false],
        &mut |_, r| {
            ids.push(match r[0] {
                Datum::Int4(x) => x,
                ref other => panic!("{other:?}"),
            });
            Ok(true)
        },
    )
    .unwrap();
    assert_eq!(ids, (0..N).collect::<Vec<_>>());
    for id in [0, 1, 7919 % N, N - 1] {
        let (_, found) = get(&mut t, &def, id).expect("every key through the index");
        assert_eq!(found[0], Datum::Int4(id));
    }
    t.commit().unwrap();

    // A duplicate and a NULL key, far apart in the table: either fails its build.
    let mut t = e.begin(Isolation::ReadCommitted);
    t.drop_index("p_id").unwrap();
    t.commit().unwrap();
    let def = e.catalog_view().unwrap().table("p").unwrap();
    let mut t = e.begin(Isolation::ReadCommitted);
    t.insert(&def, &row(17, "duplicate")).unwrap();
    t.insert(&def, &[Datum::Null, Datum::Text("null key".into())])
        .unwrap();
    t.commit().unwrap();
    let mut t = e.begin(Isolation::ReadCommitted);
    let err = t
        .create_index("p", "p_unique", &[0], true, false)
        .unwrap_err();
    assert_eq!(err.sqlstate(), "23505", "{err}");
    t.rollback().unwrap();
    let mut t = e.begin(Isolation::ReadCommitted);
    let err = t
        .create_index("p", "p_pkey", &[0], false, true)
        .unwrap_err();
    assert!(err.to_string().contains("contains null values"), "{err}");
    t.rollback().unwrap();
}
