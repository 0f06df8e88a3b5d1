//! B-tree tests against a `BTreeMap` model, with concurrency, vacuum deletes, bulk build
//! and redo of every record the workload wrote.

use std::collections::{BTreeMap, HashSet};
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use walrus_base::{Lsn, PageId, RelFileId, Tid, Xid, PAGE_SIZE};

use super::*;
use crate::buffer::page_writer::PageWriters;
use crate::buffer::BufferPool;
use crate::storage::relfile::RelFiles;
use crate::wal::reader::WalReader;
use crate::wal::segment::{Segments, SyncMethod};
use crate::wal::{ImagePolicy, Wal, WalConfig};

const REL: RelFileId = RelFileId(20000);

fn pool(dir: &std::path::Path, frames: usize) -> Arc<BufferPool> {
    let cfg = WalConfig {
        segment_size: 1 << 20,
        buffer_bytes: 1 << 20,
        sync_method: SyncMethod::None,
        compress_images: false,
    };
    let segs = Segments::new(dir, cfg.segment_size, SyncMethod::None).unwrap();
    let wal = Arc::new(Wal::open(
        segs,
        &cfg,
        Lsn::ZERO,
        Lsn::ZERO,
        Lsn::ZERO,
        ImagePolicy::Never,
    ));
    let relfiles = Arc::new(RelFiles::open(dir).unwrap());
    relfiles.create(REL).unwrap();
    Arc::new(BufferPool::new(frames, relfiles, wal).unwrap())
}

fn k(v: u64) -> Vec<u8> {
    v.to_be_bytes().to_vec()
}
/// A wide key (100 bytes) so that modest row counts build a deep tree.
fn wide(v: u64) -> Vec<u8> {
    let mut x = v.to_be_bytes().to_vec();
    x.extend_from_slice(&[0xAA; 92]);
    x
}
fn no_check(_: Tid) -> Result<UniqueCheck> {
    Ok(UniqueCheck::NotLive)
}
fn no_wait(_: Xid) -> Result<()> {
    Ok(())
}

#[test]
fn btree_matches_model_with_eviction() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(dir.path(), 64);
    let mut writers = PageWriters::start(
        pool.clone(),
        Arc::new(crate::buffer::page_writer::FlushControl::new(1, false)),
        Duration::from_millis(2),
    );
    BTree::create(&pool, REL, Xid(3)).unwrap();
    let t = BTree::open(&pool, REL, false, "t_idx");
    let mut model: BTreeMap<(Vec<u8>, Tid), ()> = BTreeMap::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for i in 0..30_000u32 {
        let key = if i % 3 == 0 {
            wide(i as u64)
        } else {
            wide(rng.gen_range(0..5_000))
        };
        let tid = Tid::new(i / 50, (i % 50 + 1) as u16);
        t.insert(&key, tid, Xid(3), &mut no_check, &mut no_wait)
            .unwrap();
        model.insert((key, tid), ());
    }
    assert!(t.root_level().unwrap() >= 2, "tree grew past two levels");
    for probe in [0u64, 1, 17, 2500, 4999, 29_997, 99_999] {
        let want: Vec<Tid> = model
            .range((wide(probe), Tid::new(0, 0))..=(wide(probe), Tid::new(u32::MAX, u16::MAX)))
            .map(|((_, t), _)| *t)
            .collect();
        assert_eq!(t.lookup(&wide(probe)).unwrap(), want, "lookup {probe}");
    }
    let got = t
        .range(Bound::Included(&wide(100)), Bound::Excluded(&wide(900)))
        .unwrap();
    let want: Vec<(Vec<u8>, Tid)> = model
        .keys()
        .filter(|(kk, _)| *kk >= wide(100) && *kk < wide(900))
        .cloned()
        .collect();
    assert_eq!(got, want);
    assert_eq!(
        t.range(Bound::Unbounded, Bound::Unbounded).unwrap().len(),
        model.len()
    );
    writers.stop();
}

#[test]
fn hinted_inserts_land_where_a_descent_would() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(dir.path(), 1024);
    BTree::create(&pool, REL, Xid(3)).unwrap();
    let t = BTree::open(&pool, REL, false, "t_idx");
    let mut model: BTreeMap<(Vec<u8>, Tid), ()> = BTreeMap::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let mut hint = None;
    for i in 0..20_000u32 {
        // Ascending runs (the hint's case), a key out of order every 7th insert (the
        // hinted leaf is the wrong one), and now and then a hint naming any block of
        // the index: the meta page, an internal page, a leaf far away.
        let key = if i % 7 == 0 {
            wide(rng.gen_range(0..20_000))
        } else {
            wide(i as u64)
        };
        if i % 500 == 499 {
            hint = Some(rng.gen_range(0..pool.relfiles.nblocks(REL).unwrap()));
        }
        let tid = Tid::new(i / 50, (i % 50 + 1) as u16);
        t.insert_hinted(&key, tid, Xid(3), &mut no_check, &mut no_wait, &mut hint)
            .unwrap();
        model.insert((key, tid), ());
    }
    assert!(t.root_level().unwrap() >= 2, "tree grew past two levels");
    assert!(hint.is_some(), "an insert without a split leaves its leaf");
    let all = t.range(Bound::Unbounded, Bound::Unbounded).unwrap();
    let want: Vec<(Vec<u8>, Tid)> = model.keys().cloned().collect();
    assert_eq!(all, want);
    for probe in [0u64, 6, 7, 9_999, 19_999] {
        let want: Vec<Tid> = model
            .range((wide(probe), Tid::new(0, 0))..=(wide(probe), Tid::new(u32::MAX, u16::MAX)))
            .map(|((_, t), _)| *t)
            .collect();
        assert_eq!(t.lookup(&wide(probe)).unwrap(), want, "lookup {probe}");
    }
}

#[test]
fn btree_unique_checks_call_back() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(dir.path(), 256);
    BTree::create(&pool, REL, Xid(3)).unwrap();
    let t = BTree::open(&pool, REL, true, "u_idx");
    t.insert(&k(5), Tid::new(0, 1), Xid(3), &mut no_check, &mut no_wait)
        .unwrap();
    let err = t
        .insert(
            &k(5),
            Tid::new(0, 2),
            Xid(3),
            &mut |_| Ok(UniqueCheck::Live),
            &mut no_wait,
        )
        .unwrap_err();
    assert!(matches!(err, Error::UniqueViolation { .. }), "{err}");
    let mut waited = Vec::new();
    let mut first = true;
    t.insert(
        &k(5),
        Tid::new(0, 3),
        Xid(3),
        &mut |_| {
            if first {
                first = false;
                Ok(UniqueCheck::WaitFor(Xid(9)))
            } else {
                Ok(UniqueCheck::NotLive)
            }
        },
        &mut |x| {
            waited.push(x);
            Ok(())
        },
    )
    .unwrap();
    assert_eq!(waited, vec![Xid(9)]);
    assert_eq!(
        t.lookup(&k(5)).unwrap(),
        vec![Tid::new(0, 1), Tid::new(0, 3)]
    );
}

#[test]
fn btree_concurrent_inserts_and_reads() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(dir.path(), 2048);
    BTree::create(&pool, REL, Xid(3)).unwrap();
    let hs: Vec<_> = (0..4u64)
        .map(|th| {
            let pool = pool.clone();
            std::thread::spawn(move || {
                let t = BTree::open(&pool, REL, true, "c_idx");
                for i in 0..5000u64 {
                    let v = i * 4 + th;
                    t.insert(
                        &k(v),
                        Tid::new(v as u32, 1),
                        Xid(3),
                        &mut no_check,
                        &mut no_wait,
                    )
                    .unwrap();
                    if i % 500 == 0 {
                        // Everything this thread inserted so far must be findable.
                        for j in (0..=i).step_by(97) {
                            assert_eq!(
                                t.lookup(&k(j * 4 + th)).unwrap().len(),
                                1,
                                "lost {}",
                                j * 4 + th
                            );
                        }
                    }
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    let t = BTree::open(&pool, REL, true, "c_idx");
    let all = t.range(Bound::Unbounded, Bound::Unbounded).unwrap();
    assert_eq!(all.len(), 20_000);
    assert!(all.windows(2).all(|w| w[0].0 < w[1].0));
}

#[test]
fn btree_delete_tids_and_bulk_build() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(dir.path(), 1024);
    BTree::create(&pool, REL, Xid(3)).unwrap();
    let t = BTree::open(&pool, REL, true, "b_idx");
    let entries: Vec<(Vec<u8>, Tid)> = (0..100_000u64)
        .map(|v| (k(v), Tid::new(v as u32 / 100, (v % 100 + 1) as u16)))
        .collect();
    t.bulk_build(&entries, Xid(3)).unwrap();
    assert_eq!(
        t.range(Bound::Unbounded, Bound::Unbounded).unwrap(),
        entries
    );
    assert_eq!(t.lookup(&k(77_777)).unwrap(), vec![entries[77_777].1]);
    let dead: HashSet<Tid> = entries.iter().step_by(3).map(|(_, t)| *t).collect();
    assert_eq!(
        t.delete_tids(&dead, Xid(3), &mut |_| Ok(())).unwrap(),
        dead.len()
    );
    let left = t.range(Bound::Unbounded, Bound::Unbounded).unwrap();
    assert_eq!(left.len(), entries.len() - dead.len());
    assert!(left.iter().all(|(_, t)| !dead.contains(t)));
    // Inserts still work after bulk build (splits of bulk-built pages).
    for v in 0..2000u64 {
        t.insert(
            &k(v * 3),
            Tid::new(5000, 1 + (v % 100) as u16),
            Xid(3),
            &mut no_check,
            &mut no_wait,
        )
        .unwrap();
    }

    let r2 = RelFileId(20001);
    pool.relfiles.create(r2).unwrap();
    BTree::create(&pool, r2, Xid(3)).unwrap();
    let dup = vec![(k(1), Tid::new(0, 1)), (k(1), Tid::new(0, 2))];
    assert!(matches!(
        BTree::open(&pool, r2, true, "d").bulk_build(&dup, Xid(3)),
        Err(Error::UniqueViolation { .. })
    ));
}

#[test]
fn btree_redo_rebuilds_the_same_pages() {
    let dir = tempfile::tempdir().unwrap();
    let pool = pool(dir.path(), 4096);
    BTree::create(&pool, REL, Xid(3)).unwrap();
    let t = BTree::open(&pool, REL, false, "r_idx");
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    for i in 0..8000u32 {
        t.insert(
            &k(rng.gen_range(0..3000)),
            Tid::new(i, 1),
            Xid(3),
            &mut no_check,
            &mut no_wait,
        )
        .unwrap();
    }
    let dead: HashSet<Tid> = (0..8000).step_by(5).map(|i| Tid::new(i, 1)).collect();
    t.delete_tids(&dead, Xid(3), &mut |_| Ok(())).unwrap();
    let end = pool.wal.flush_all();
    let mut pages: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
    let mut r = WalReader::new(&pool.wal.segments, Lsn::ZERO);
    while let Some(rec) = r.next_record().unwrap() {
        for (i, b) in rec.blocks.iter().enumerate() {
            let p = pages
                .entry(b.page.block.0)
                .or_insert_with(|| vec![0u8; PAGE_SIZE]);
            if page::lsn(p) < rec.end_lsn {
                redo_block(rec.info, i, b.data, rec.main, p, b.page).unwrap();
                page::set_lsn(p, rec.end_lsn);
            }
        }
    }
    assert!(r.position() >= end);
    for (block, redone) in &pages {
        let live = pool.read_page(PageId::new(REL, *block)).unwrap();
        let g = live.read();
        assert_eq!(
            page::item_count(&g),
            page::item_count(redone),
            "block {block}"
        );
        for o in 1..=page::item_count(redone) {
            assert_eq!(
                page::item(&g, o),
                page::item(redone, o),
                "block {block} item {o}"
            );
        }
    }
}

#[test]
fn btree_redo_never_panics_on_garbage() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    for _ in 0..5000 {
        let mut p = vec![0u8; PAGE_SIZE];
        let id = PageId::new(REL, 1);
        if rng.gen_bool(0.5) {
            init_node(&mut p, id, 0, NO_BLOCK);
        }
        let n = rng.gen_range(0..40);
        let data: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
        let _ = redo_block(
            rng.gen_range(0..7),
            rng.gen_range(0..3),
            &data,
            &[],
            &mut p,
            id,
        );
    }
}
