//! `wal_sync_method = pmem` against the real libpmem (no mocks), on tmpfs (`/dev/shm`).
//!
//! tmpfs is not persistent memory, so the tests that write WAL run with libpmem's
//! `PMEM_IS_PMEM_FORCE=1`, which libpmem reads once, when it is loaded. A test binary is
//! one process, so each test that needs the variable set (or unset) runs its body in a
//! child process of this same test binary with the environment it needs
//! ([`in_child`]); the parent checks that the child ran exactly that test and passed.
//!
//! Invariants checked:
//! - every record inserted and flushed is read back (by `pread`, not through the
//!   mapping) in order, across segment switches, from recycled segments (which still
//!   hold stale records) and after the mappings are gone;
//! - every write-out is drained by the thread that copied it, and every inserted byte is
//!   copied exactly once;
//! - a tmpfs WAL directory is refused without the force variable, naming it;
//! - a library path that lacks libpmem gives "libpmem not found: install libpmem1", and
//!   only the pmem method loads the library.
//!
//! Without libpmem installed these tests skip, unless `CI` is set: then they fail.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use walrus_base::{Lsn, Xid};
use walrus_engine::wal::pmem::{Pmem, LIBRARY_DEFAULT};
use walrus_engine::wal::reader::WalReader;
use walrus_engine::wal::record::{Rmgr, WalRecord};
use walrus_engine::wal::segment::{Segments, SyncMethod};
use walrus_engine::wal::{ImagePolicy, Wal, WalConfig};

const SEGMENT: u64 = 1 << 16;
const CHILD_ENV: &str = "WALRUS_PMEM_TEST_CHILD";

/// Whether libpmem can be loaded; outside CI a missing library skips the test (with a
/// line saying so), under `CI` it fails it.
fn libpmem_or_skip() -> bool {
    match Pmem::load(LIBRARY_DEFAULT) {
        Ok(_) => true,
        Err(e) if std::env::var_os("CI").is_none() => {
            eprintln!("SKIPPED: {e}");
            false
        }
        Err(e) => panic!("CI is set and libpmem is missing: {e}"),
    }
}

/// Runs test `name` in a child process of this test binary, with `PMEM_IS_PMEM_FORCE=1`
/// when `force`, without it otherwise; returns true in the parent (which has then checked
/// the child's result) and false in the child (which must run the body).
fn in_child(name: &str, force: bool) -> bool {
    if std::env::var(CHILD_ENV).as_deref() == Ok(name) {
        assert_eq!(
            Pmem::forced(),
            force,
            "the child has the environment asked for"
        );
        return false;
    }
    let mut cmd = Command::new(std::env::current_exe().expect("test binary"));
    cmd.args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, name);
    if force {
        cmd.env("PMEM_IS_PMEM_FORCE", "1");
    } else {
        cmd.env_remove("PMEM_IS_PMEM_FORCE");
    }
    let out = cmd.output().expect("run the test binary");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "child {name} failed:\n{text}");
    assert!(
        text.contains("1 passed"),
        "child did not run {name}:\n{text}"
    );
    true
}

fn tmpfs_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("walrus-pmem-test")
        .tempdir_in("/dev/shm")
        .expect("a directory on tmpfs (/dev/shm)")
}

fn open_wal(dir: &Path, end: Lsn, last: Lsn) -> Wal {
    let cfg = WalConfig {
        segment_size: SEGMENT,
        buffer_bytes: 0, // the minimum ring: inserters also write it out (and drain)
        sync_method: SyncMethod::Pmem,
        compress_images: false,
    };
    let segs = Segments::open_with(dir, SEGMENT, SyncMethod::Pmem, LIBRARY_DEFAULT)
        .expect("open pmem segments");
    assert!(segs.is_mapped());
    Wal::open(segs, &cfg, end, last, Lsn::ZERO, ImagePolicy::Never)
}

fn record(thread: u64, i: u64) -> WalRecord {
    let mut body = thread.to_le_bytes().to_vec();
    body.extend_from_slice(&i.to_le_bytes());
    body.resize(
        16 + ((i * 37 + thread * 11) % 2000) as usize,
        (i % 251) as u8,
    );
    WalRecord::new(Rmgr::Xact, 1, Xid(thread + 3)).with_main(body)
}

/// Reads every record from `from`; checks each thread's records come in order and
/// returns (records per thread, end of WAL).
fn read_back(segs: &Segments, from: Lsn, threads: usize) -> (Vec<u64>, Lsn) {
    let mut r = WalReader::new(segs, from);
    let mut next = vec![0u64; threads];
    while let Some(rec) = r.next_record().expect("read WAL") {
        let t = u64::from_le_bytes(rec.main[0..8].try_into().unwrap()) as usize;
        let i = u64::from_le_bytes(rec.main[8..16].try_into().unwrap());
        assert_eq!(i, next[t], "thread {t}'s records in order");
        assert_eq!(rec.main.len() as u64, 16 + (i * 37 + t as u64 * 11) % 2000);
        next[t] += 1;
    }
    (next, r.position())
}

/// Concurrent inserts and group commit through mapped segments (64 KiB, so the log
/// switches segments dozens of times), read back; then recycling, writing over recycled
/// segments, and reading back again after the mappings are gone.
#[test]
fn pmem_wal_written_read_back_switched_and_recycled() {
    if !libpmem_or_skip() || in_child("pmem_wal_written_read_back_switched_and_recycled", true) {
        return;
    }
    let tmp = tmpfs_dir();
    let wal = Arc::new(open_wal(tmp.path(), Lsn::ZERO, Lsn::ZERO));
    let (threads, per) = (4u64, 400u64);
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            let wal = wal.clone();
            std::thread::spawn(move || {
                for i in 0..per {
                    let (_, end) = wal.insert(&record(t, i), &[]);
                    if i % 2 == 0 {
                        wal.flush(end);
                        assert!(wal.flushed_lsn() >= end, "flush returned early");
                    }
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    let end = wal.flush_all();
    let drains = wal.stats.pmem_drains.load(Ordering::Relaxed);
    let copied = wal.stats.pmem_bytes_copied.load(Ordering::Relaxed);
    assert!(drains > 0, "the pmem path ran");
    // Whoever writes WAL out (flush leader, or an inserter finding the small ring full)
    // drains its own stores: one drain per write-out, none skipped.
    assert_eq!(drains, wal.stats.writes.load(Ordering::Relaxed));
    assert_eq!(
        copied,
        wal.bytes_inserted(),
        "every inserted byte was copied once"
    );
    assert!(
        wal.segments.list().unwrap().len() > 10,
        "the log switched segments"
    );
    let (counts, at) = read_back(&wal.segments, Lsn::ZERO, threads as usize);
    assert_eq!(counts, vec![per; threads as usize]);
    assert!(at >= end);

    // Recycle all but the last segment: they are renamed ahead and still hold old
    // records. Writing on through them, the reader must stop at the new end and never
    // return a stale record.
    let keep_from = Lsn(wal.segments.segno(end) * SEGMENT);
    let (recycled, _) = wal.segments.recycle_before(keep_from, end, 64).unwrap();
    assert!(recycled > 5, "segments were recycled: {recycled}");
    let mut second_start = None;
    for i in 0..300 {
        let (start, _) = wal.insert(&record(0, per + i), &[]);
        second_start.get_or_insert(start);
    }
    let end2 = wal.flush_all();
    assert!(
        wal.segments.segno(end2) > wal.segments.segno(end) + 2,
        "the second batch ran into recycled segments"
    );
    let first = second_start.unwrap();
    drop(wal); // unmaps every segment
    let segs = Segments::open_with(tmp.path(), SEGMENT, SyncMethod::Pmem, LIBRARY_DEFAULT).unwrap();
    let mut r = WalReader::new(&segs, first);
    let mut n = 0;
    while let Some(rec) = r.next_record().unwrap() {
        assert_eq!(
            u64::from_le_bytes(rec.main[8..16].try_into().unwrap()),
            per + n,
            "no stale record from a recycled segment"
        );
        n += 1;
    }
    assert_eq!(n, 300);
    assert_eq!(
        Lsn(walrus_engine::wal::record::padded_len(end2.0 as usize)),
        r.position()
    );
}

/// Reopened for appending at the end found by a scan, the log continues in the mapped
/// segment it ended in, and both halves read back.
#[test]
fn pmem_wal_continues_after_reopen() {
    if !libpmem_or_skip() || in_child("pmem_wal_continues_after_reopen", true) {
        return;
    }
    let tmp = tmpfs_dir();
    let wal = open_wal(tmp.path(), Lsn::ZERO, Lsn::ZERO);
    for i in 0..100 {
        let (_, end) = wal.insert(&record(0, i), &[]);
        wal.flush(end);
    }
    drop(wal);
    let segs = Segments::open_with(tmp.path(), SEGMENT, SyncMethod::Pmem, LIBRARY_DEFAULT).unwrap();
    let mut r = WalReader::new(&segs, Lsn::ZERO);
    while r.next_record().unwrap().is_some() {}
    let (end, last) = (r.position(), r.last_record_start().unwrap());
    drop(segs);
    let wal = open_wal(tmp.path(), end, last);
    for i in 100..200 {
        let (_, end) = wal.insert(&record(0, i), &[]);
        wal.flush(end);
    }
    let (counts, _) = read_back(&wal.segments, Lsn::ZERO, 1);
    assert_eq!(counts, vec![200]);
}

/// Without `PMEM_IS_PMEM_FORCE`, tmpfs is not persistent memory: the pmem method is
/// refused before anything is written, with a message that names the directory and the
/// way to try it anyway.
#[test]
fn pmem_refuses_a_non_pmem_directory_without_force() {
    if !libpmem_or_skip() || in_child("pmem_refuses_a_non_pmem_directory_without_force", false) {
        return;
    }
    let tmp = tmpfs_dir();
    let err = Segments::open_with(tmp.path(), SEGMENT, SyncMethod::Pmem, LIBRARY_DEFAULT)
        .err()
        .expect("tmpfs must be refused");
    let msg = err.to_string();
    assert!(msg.contains("is not persistent memory"), "{msg}");
    assert!(
        msg.contains(&tmp.path().join("wal").display().to_string()),
        "{msg}"
    );
    assert!(msg.contains("PMEM_IS_PMEM_FORCE=1"), "{msg}");
    assert!(
        std::fs::read_dir(tmp.path().join("wal"))
            .unwrap()
            .next()
            .is_none(),
        "nothing was written"
    );
}

/// A library path that lacks libpmem (an empty directory) fails the pmem method with
/// the install hint; the other methods never load the library.
#[test]
fn missing_libpmem_fails_only_the_pmem_method() {
    let tmp = tempfile::tempdir().unwrap();
    let empty = tempfile::tempdir().unwrap();
    let lib = empty.path().join("libpmem.so.1");
    let lib = lib.to_str().unwrap();
    let err = Segments::open_with(tmp.path(), SEGMENT, SyncMethod::Pmem, lib)
        .err()
        .expect("no library there");
    let msg = err.to_string();
    assert!(msg.contains("libpmem not found: install libpmem1"), "{msg}");
    assert!(msg.contains(lib), "{msg}");
    let segs = Segments::open_with(tmp.path(), SEGMENT, SyncMethod::Fdatasync, lib).unwrap();
    assert!(!segs.is_mapped());
}
