//! A damaged data directory gets a clear error (or repair where the mode allows), never a
//! panic or a silent wrong answer: corrupted control file, truncated or missing WAL
//! segment, a missing commit-status segment, a flipped bit in a data page, a bad
//! configuration value.

mod common;

use std::os::unix::fs::FileExt;

use common::{bench, text, walrus, Cluster};

/// A directory with some committed data, cleanly shut down.
/// A cluster after a TPC-B load of at least 3,000 committed transactions: more than two
/// of the engine's xid blocks (1,024), so the control file's next xid proves clog pages
/// were written (the clog checks below rely on it). On a loaded machine one second of
/// fdatasync commits may be fewer, so the run repeats until there are enough.
fn loaded() -> Cluster {
    let c = Cluster::new(&[]);
    let mut committed = 0u64;
    for _ in 0..30 {
        let out = bench()
            .arg("tpcb-run")
            .arg("--data")
            .arg(&c.data)
            .arg("--acks")
            .arg(&c.acks)
            .args(["--threads", "2", "--seconds", "1"])
            .output()
            .expect("run workload");
        assert!(out.status.success(), "{}", text(&out));
        committed += text(&out)
            .split("committed ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no commit count in {}", text(&out)));
        if committed >= 3_000 {
            return c;
        }
    }
    panic!("only {committed} transactions committed in 30 one-second runs");
}

fn recover(c: &Cluster) -> std::process::Output {
    walrus()
        .arg("recover")
        .arg(&c.data)
        .output()
        .expect("run recover")
}

#[test]
fn corrupted_control_file_is_refused_clearly() {
    let c = loaded();
    let path = c.data.join("control");
    let mut bytes = std::fs::read(&path).unwrap();
    // One damaged copy: the other one is used.
    bytes[600] ^= 0xFF;
    std::fs::write(&path, &bytes).unwrap();
    let out = recover(&c);
    assert!(
        out.status.success(),
        "one good copy is enough: {}",
        text(&out)
    );
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[100] ^= 0xFF;
    bytes[600] ^= 0xFF;
    std::fs::write(&path, &bytes).unwrap();
    let out = recover(&c);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("neither copy has a valid checksum"),
        "{}",
        text(&out)
    );
    assert!(!text(&out).contains("panicked"));
}

fn wal_segments(c: &Cluster) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(c.data.join("wal"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    v.sort();
    v
}

#[test]
fn truncated_wal_segment_is_refused_clearly() {
    let c = loaded();
    for seg in wal_segments(&c) {
        let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
        f.set_len(4096).unwrap();
    }
    let out = recover(&c);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("expected 1048576"), "{}", text(&out));
    assert!(!text(&out).contains("panicked"));
}

#[test]
fn missing_wal_segment_is_refused_clearly() {
    let c = loaded();
    for seg in wal_segments(&c) {
        std::fs::remove_file(seg).unwrap();
    }
    let out = recover(&c);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("is missing"), "{}", text(&out));
}

#[test]
fn flipped_bit_in_a_data_page_is_reported_with_relation_and_block() {
    let c = loaded();
    // The accounts table is the largest user relation.
    let base = c.data.join("base");
    let biggest = std::fs::read_dir(&base)
        .unwrap()
        .flatten()
        .max_by_key(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
        .unwrap()
        .path();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&biggest)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, 8192 + 3000).unwrap();
    b[0] ^= 0x04;
    f.write_all_at(&b, 8192 + 3000).unwrap();
    let v = walrus().arg("verify").arg(&c.data).output().unwrap();
    assert!(!v.status.success());
    let t = text(&v);
    assert!(t.contains("invalid page in block 1 of relation"), "{t}");
    assert!(t.contains("checksum stored"), "{t}");
    // Reading the table reports the same page instead of returning wrong data.
    let chk = c.check();
    assert!(
        !chk.status.success(),
        "a damaged page must not be read silently"
    );
    let t = text(&chk);
    assert!(
        t.contains("invalid page in block 1") && !t.contains("panicked"),
        "{t}"
    );
}

#[test]
fn bad_configuration_value_is_a_clear_error() {
    let c = Cluster::new(&[]);
    let cfg = c.data.join("walrus.toml");
    let t = std::fs::read_to_string(&cfg).unwrap().replace(
        "wal_sync_method = \"fdatasync\"",
        "wal_sync_method = \"often\"",
    );
    std::fs::write(&cfg, t).unwrap();
    let out = recover(&c);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).contains("invalid value for parameter \"wal_sync_method\""),
        "{}",
        text(&out)
    );
}

#[test]
fn opening_a_non_data_directory_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let out = walrus().arg("recover").arg(tmp.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).contains("not a walrus data directory"),
        "{}",
        text(&out)
    );
}

/// A deleted or cut-short commit-status segment used to read as zeros: every transaction
/// in it "aborted", so committed rows silently disappeared. Now open (and `walrus
/// verify`) refuses the directory and names the segment; an extra segment below the recorded truncation point would be
/// removed instead (clog unit tests).
#[test]
fn missing_clog_segment_is_refused_clearly() {
    let c = loaded();
    let seg = c.data.join("clog").join(format!("{:012X}", 0));
    assert!(seg.exists(), "the workload's xids live in segment 0");
    // Cut short (statuses of written pages lost): `walrus verify` and open both say so.
    let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
    f.set_len(0).unwrap();
    let v = c.verify();
    assert!(!v.status.success(), "{}", text(&v));
    assert!(
        text(&v).contains("commit-status log segment 000000000000 is truncated"),
        "{}",
        text(&v)
    );
    let out = recover(&c);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("is truncated"), "{}", text(&out));
    std::fs::remove_file(&seg).unwrap();
    let out = recover(&c);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("commit-status log segment 000000000000 is missing"),
        "{}",
        text(&out)
    );
    assert!(!text(&out).contains("panicked"));
}

/// Every opener of a data directory takes its lock: while a workload has the directory
/// open, `walrus recover`, `walrus verify` and the checker are refused with the owner's
/// pid instead of recovering or reading files it is changing; once it is gone (killed),
/// they work.
#[test]
fn a_directory_in_use_is_refused_to_every_other_opener() {
    let c = Cluster::new(&[]);
    let mut child = c.start_workload(2, &[]);
    let owner = format!("another walrus (pid {}) is running", child.id());
    for out in [recover(&c), c.verify(), c.check()] {
        assert!(!out.status.success(), "{}", text(&out));
        assert!(text(&out).contains(&owner), "{}", text(&out));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let out = recover(&c);
    assert!(out.status.success(), "{}", text(&out));
}
