//! `wal_sync_method = pmem` as an operator meets it, through the real `walrus` binary and
//! the real libpmem: a WAL directory that is not persistent memory is refused unless
//! libpmem is forced (`PMEM_IS_PMEM_FORCE=1`), and then the log says loudly that the WAL
//! is not durable; without libpmem only the pmem method fails, with the install hint.
//!
//! Without libpmem installed the tests that need it skip, unless `CI` is set: then they
//! fail.

mod common;

use common::{text, walrus};

fn tmpfs_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("walrus-pmem-setup")
        .tempdir_in("/dev/shm")
        .expect("a directory on tmpfs (/dev/shm)")
}

fn init_pmem(data: &std::path::Path, wal: &std::path::Path, force: bool) -> std::process::Output {
    let mut cmd = walrus();
    cmd.arg("init")
        .arg(data)
        .args(["--wal-segment-size", "1MB", "--wal-sync-method", "pmem"])
        .arg("--wal-directory")
        .arg(wal);
    if force {
        cmd.env("PMEM_IS_PMEM_FORCE", "1");
    } else {
        cmd.env_remove("PMEM_IS_PMEM_FORCE");
    }
    cmd.output().expect("run walrus init")
}

/// tmpfs is not persistent memory: `walrus init` refuses it, names the directory and
/// the way to try anyway, and leaves nothing behind, so the same command with the force
/// variable then succeeds; opening it without the variable is refused again, and with it
/// the log says the WAL is NOT durable.
#[test]
fn pmem_on_tmpfs_is_refused_unless_forced_and_then_says_not_durable() {
    if !common::libpmem_or_skip() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let shm = tmpfs_dir();
    let (data, wal) = (tmp.path().join("data"), shm.path().join("wal"));
    let out = init_pmem(&data, &wal, false);
    let msg = text(&out);
    assert!(!out.status.success(), "tmpfs accepted as pmem: {msg}");
    assert!(msg.contains("is not persistent memory"), "{msg}");
    assert!(msg.contains("PMEM_IS_PMEM_FORCE=1"), "{msg}");
    assert!(msg.contains(&wal.display().to_string()), "{msg}");
    assert!(!data.join("wal").exists() && !data.join("walrus.toml").exists());

    let out = init_pmem(&data, &wal, true);
    assert!(out.status.success(), "forced init failed: {}", text(&out));
    assert!(
        std::fs::read_dir(&wal).unwrap().count() >= 1,
        "WAL in {}",
        wal.display()
    );

    let refused = walrus()
        .arg("recover")
        .arg(&data)
        .env_remove("PMEM_IS_PMEM_FORCE")
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(
        text(&refused).contains("is not persistent memory"),
        "{}",
        text(&refused)
    );

    let forced = walrus()
        .arg("recover")
        .arg(&data)
        .env("PMEM_IS_PMEM_FORCE", "1")
        .output()
        .unwrap();
    assert!(forced.status.success(), "{}", text(&forced));
    assert!(
        text(&forced).contains("commits are NOT durable"),
        "the log must say the WAL is not durable: {}",
        text(&forced)
    );
}

/// A library path that lacks libpmem stands for a machine without it: the pmem method
/// fails with "libpmem not found: install libpmem1", every other method opens.
#[test]
fn without_libpmem_only_the_pmem_method_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let empty = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let out = walrus()
        .arg("init")
        .arg(&data)
        .args(["--wal-segment-size", "1MB"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let cfg = data.join("walrus.toml");
    let lib = empty.path().join("libpmem.so.1");
    let base = std::fs::read_to_string(&cfg).unwrap().replace(
        "wal_pmem_library = \"libpmem.so.1\"",
        &format!("wal_pmem_library = \"{}\"", lib.display()),
    );
    std::fs::write(&cfg, &base).unwrap();
    let ok = walrus().arg("recover").arg(&data).output().unwrap();
    assert!(
        ok.status.success(),
        "fdatasync needs no libpmem: {}",
        text(&ok)
    );

    std::fs::write(
        &cfg,
        base.replace(
            "wal_sync_method = \"fdatasync\"",
            "wal_sync_method = \"pmem\"",
        ),
    )
    .unwrap();
    let out = walrus().arg("recover").arg(&data).output().unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out).contains("libpmem not found: install libpmem1"),
        "{}",
        text(&out)
    );
}
