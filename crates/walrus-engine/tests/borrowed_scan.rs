//! `Transaction::scan_columns_borrowed` (a page's visible tuples copied out under one
//! latch, rows decoded into one reused buffer) gives exactly what `scan_columns` gives:
//! the same rows, tids and values, in the same order, for every snapshot — dead,
//! updated (HOT and not), deleted, rolled-back and other transactions' uncommitted
//! rows invisible, the transaction's own earlier changes visible — with and without
//! column pruning, on an empty table too, and it stops when told to.

use std::sync::Arc;

use walrus_base::Tid;
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

fn column(name: &str, ty: TypeId) -> ColumnDef {
    ColumnDef {
        name: name.into(),
        ty,
        not_null: false,
        typmod: -1,
        declared: Default::default(),
    }
}

fn table(e: &Engine) -> Arc<TableDef> {
    let mut t = e.begin(Isolation::ReadCommitted);
    let cols = vec![
        column("id", TypeId::Int4),
        column("v", TypeId::Text),
        column("n", TypeId::Int8),
    ];
    t.create_table("t", cols, 100).unwrap();
    t.create_index("t", "t_pkey", &[0], true, true).unwrap();
    t.commit().unwrap();
    e.catalog_view().unwrap().table("t").unwrap()
}

fn row(id: i32, v: Option<&str>, n: Option<i64>) -> Vec<Datum> {
    vec![
        Datum::Int4(id),
        v.map(|s| Datum::Text(s.into())).unwrap_or(Datum::Null),
        n.map(Datum::Int8).unwrap_or(Datum::Null),
    ]
}

type Rows = Vec<(Tid, Vec<Datum>)>;

fn both(t: &mut Transaction, def: &TableDef, wanted: &[bool]) -> (Rows, Rows) {
    let mut owned = Vec::new();
    t.scan_columns(def, wanted, |tid, r| {
        owned.push((tid, r));
        Ok(true)
    })
    .unwrap();
    let mut lent = Vec::new();
    t.scan_columns_borrowed(def, wanted, |tid, r| {
        lent.push((tid, r.to_vec()));
        Ok(true)
    })
    .unwrap();
    (owned, lent)
}

/// Both scans agree under every column choice; returns the rows (all columns).
fn agree(t: &mut Transaction, def: &TableDef, what: &str) -> Rows {
    for wanted in [
        vec![true, true, true],
        vec![false, false, false],
        vec![true, false, true],
        vec![false, true, false],
    ] {
        let (owned, lent) = both(t, def, &wanted);
        assert_eq!(owned, lent, "{what}: wanted {wanted:?}");
    }
    both(t, def, &[true, true, true]).0
}

fn ids(rows: &Rows) -> Vec<i32> {
    let mut v: Vec<i32> = rows
        .iter()
        .map(|(_, r)| match r[0] {
            Datum::Int4(i) => i,
            _ => panic!("id is an int4"),
        })
        .collect();
    v.sort_unstable();
    v
}

fn find(t: &mut Transaction, def: &TableDef, id: i32) -> Tid {
    t.index_lookup(def, &def.indexes[0], &[Datum::Int4(id)])
        .unwrap()
        .pop()
        .unwrap()
        .0
}

#[test]
fn borrowed_scan_sees_what_the_owned_scan_sees() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path());
    let def = table(&e);

    let mut empty = e.begin(Isolation::ReadCommitted);
    assert!(agree(&mut empty, &def, "empty table").is_empty());
    empty.commit().unwrap();

    // Several pages of rows, NULLs in both nullable columns now and then.
    let mut t = e.begin(Isolation::ReadCommitted);
    for i in 0..1200 {
        let v = (i % 7 != 0).then(|| format!("value {i} {}", "x".repeat((i % 50) as usize)));
        let n = (i % 5 != 0).then_some(i as i64 * 1_000_000_007);
        t.insert(&def, &row(i, v.as_deref(), n)).unwrap();
    }
    t.commit().unwrap();

    // A snapshot from before the changes below.
    let mut before = e.begin(Isolation::RepeatableRead);
    assert_eq!(ids(&agree(&mut before, &def, "before")).len(), 1200);

    // Committed updates (same size: HOT; longer: maybe moved) and deletes.
    let mut t = e.begin(Isolation::ReadCommitted);
    for i in (0..1200).step_by(3) {
        let tid = find(&mut t, &def, i);
        let long = "y".repeat(300);
        let v = if i % 2 == 0 { "short" } else { long.as_str() };
        assert!(matches!(
            t.update(&def, tid, &row(i, Some(v), Some(-1))).unwrap(),
            RowChange::Done(_)
        ));
    }
    t.next_statement();
    for i in (1..1200).step_by(10) {
        let tid = find(&mut t, &def, i);
        assert!(matches!(t.delete(&def, tid).unwrap(), RowChange::Done(_)));
    }
    t.commit().unwrap();

    // A rolled-back insert and delete.
    let mut t = e.begin(Isolation::ReadCommitted);
    t.insert(&def, &row(5000, Some("gone"), None)).unwrap();
    let tid = find(&mut t, &def, 2);
    t.delete(&def, tid).unwrap();
    t.rollback().unwrap();

    // An open writer: its own changes are visible to its next statement only.
    let mut w = e.begin(Isolation::ReadCommitted);
    w.insert(&def, &row(6000, Some("mine"), Some(6))).unwrap();
    let tid = find(&mut w, &def, 4);
    w.delete(&def, tid).unwrap();
    let same_statement = ids(&agree(&mut w, &def, "writer, same statement"));
    assert!(!same_statement.contains(&6000) && same_statement.contains(&4));
    w.next_statement();
    let own = ids(&agree(&mut w, &def, "writer, next statement"));
    assert!(own.contains(&6000) && !own.contains(&4));

    let mut other = e.begin(Isolation::ReadCommitted);
    let seen = ids(&agree(&mut other, &def, "other reader"));
    let expected: Vec<i32> = (0..1200).filter(|i| i % 10 != 1).collect();
    assert_eq!(
        seen, expected,
        "deleted rows gone, uncommitted and rolled-back unseen"
    );
    let updated = agree(&mut other, &def, "other reader")
        .into_iter()
        .filter(|(_, r)| r[2] == Datum::Int8(-1))
        .count();
    assert_eq!(
        updated,
        (0..1200).step_by(3).filter(|i| i % 10 != 1).count()
    );

    assert_eq!(
        ids(&agree(&mut before, &def, "old snapshot")),
        (0..1200).collect::<Vec<_>>(),
        "the old snapshot still sees every row, in its old version"
    );

    // Stopping early: the first rows, in scan order.
    let mut first = Vec::new();
    other
        .scan_columns_borrowed(&def, &[true, true, true], |tid, r| {
            first.push((tid, r.to_vec()));
            Ok(first.len() < 7)
        })
        .unwrap();
    let all = agree(&mut other, &def, "other reader");
    assert_eq!(first, all[..7].to_vec());

    w.rollback().unwrap();
    other.commit().unwrap();
    before.commit().unwrap();
    e.shutdown().unwrap();
}
