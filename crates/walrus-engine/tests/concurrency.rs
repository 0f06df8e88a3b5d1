//! Concurrent updates of hot rows under READ COMMITTED must never lose an update, with
//! checkpoints (page writes, eviction) running at the same time.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use walrus_engine::access::datum::{Datum, TypeId};
use walrus_engine::catalog::ColumnDef;
use walrus_engine::engine::{CheckpointReason, Isolation, RowChange};
use walrus_engine::Engine;

fn engine(dir: &std::path::Path, extra: &str) -> Engine {
    let cfg = walrus_engine::settings::default_config_text(1 << 20)
        .replace("shared_buffers = \"128MB\"", "shared_buffers = \"1MB\"")
        .replace(
            "wal_sync_method = \"fdatasync\"",
            "wal_sync_method = \"none\"",
        )
        + extra;
    Engine::init(dir, Some(&cfg)).unwrap();
    Engine::open(dir).unwrap().0
}

#[test]
fn hot_row_increments_are_never_lost() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(dir.path(), "");
    let mut t = e.begin(Isolation::ReadCommitted);
    let cols = vec![
        ColumnDef {
            name: "id".into(),
            ty: TypeId::Int4,
            not_null: true,
            typmod: -1,
            declared: Default::default(),
        },
        ColumnDef {
            name: "n".into(),
            ty: TypeId::Int8,
            not_null: true,
            typmod: -1,
            declared: Default::default(),
        },
        ColumnDef {
            name: "pad".into(),
            ty: TypeId::Text,
            not_null: false,
            typmod: -1,
            declared: Default::default(),
        },
    ];
    t.create_table("counters", cols, 100).unwrap();
    let def = t.table("counters").unwrap();
    for id in 0..4 {
        // Wide rows: pages fill quickly, so many updates are not HOT and add index
        // entries while other threads look the rows up.
        t.insert(
            &def,
            &[
                Datum::Int4(id),
                Datum::Int8(0),
                Datum::Text("p".repeat(700)),
            ],
        )
        .unwrap();
    }
    t.next_statement();
    t.create_index("counters", "counters_pkey", &[0], true, true)
        .unwrap();
    t.commit().unwrap();
    let def = e.catalog_view().unwrap().table("counters").unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let ckpt = {
        let (e, stop) = (e.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if std::env::var("NOCKPT").is_err() {
                    e.checkpoint(CheckpointReason::Requested).unwrap();
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        })
    };
    let workers: Vec<_> = (0..6)
        .map(|w| {
            let (e, def, done) = (e.clone(), def.clone(), done.clone());
            std::thread::spawn(move || {
                for i in 0..800 {
                    let id = if i % 2 == 0 { 0 } else { (i + w) % 4 };
                    let mut t = e.begin(Isolation::ReadCommitted);
                    let rows = t
                        .index_lookup(&def, &def.indexes[0], &[Datum::Int4(id)])
                        .unwrap();
                    if rows.len() != 1 {
                        eprintln!(
                            "EXPLAIN {}",
                            t.explain_missing(&def, &def.indexes[0], &[Datum::Int4(id)])
                        );
                        for (tid, v) in &rows {
                            eprintln!("DUP {tid} {v:?} {:?}", e.debug_version(&def, *tid));
                        }
                    }
                    assert_eq!(rows.len(), 1, "row {id} must be visible exactly once");
                    let (mut tid, mut vals) = rows.into_iter().next().unwrap();
                    loop {
                        let Datum::Int8(n) = vals[1] else {
                            panic!("bad value")
                        };
                        vals[1] = Datum::Int8(n + 1);
                        match t.update(&def, tid, &vals).unwrap() {
                            RowChange::Done(_) => break,
                            RowChange::Changed(nt, nv) => {
                                tid = nt;
                                vals = nv;
                            }
                            other => panic!("unexpected {other:?}"),
                        }
                    }
                    t.commit().unwrap();
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    ckpt.join().unwrap();
    let mut t = e.begin(Isolation::ReadCommitted);
    let rows = t.scan_all(&def).unwrap();
    assert_eq!(rows.len(), 4, "one visible version per row: {rows:?}");
    let total: i64 = rows
        .iter()
        .map(|(_, v)| if let Datum::Int8(n) = v[1] { n } else { 0 })
        .sum();
    assert_eq!(total as u64, done.load(Ordering::Relaxed));
    t.commit().unwrap();
    e.shutdown().unwrap();
}
