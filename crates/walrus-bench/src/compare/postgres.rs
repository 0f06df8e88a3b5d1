//! PostgreSQL 15 from its binaries: `initdb` into a temporary directory, settings appended
//! to `postgresql.conf`, `postgres -D` started directly (no `pg_ctl`, so the harness owns
//! the postmaster's pid and process group).
//!
//! PostgreSQL refuses to run as root. When the harness is root it runs `initdb` and
//! `postgres` as an unprivileged user (`--pg-user`, default `pgrun`, created with
//! `useradd` when missing) by setting the child's uid and gid (`Command::uid`/`gid`, which
//! also drop supplementary groups), and hands the data and tmpfs directories to that user.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context};

use super::process::run_captured;
use super::server::Settings;
use super::Tools;

/// The uid and gid PostgreSQL runs as when the harness is root; creates the user if needed.
pub fn ensure_pg_user(name: &str, scratch: &Path) -> anyhow::Result<(u32, u32)> {
    let id = |flag: &str| -> Option<u32> {
        let o = Command::new("id").args([flag, name]).output().ok()?;
        if !o.status.success() {
            return None;
        }
        String::from_utf8_lossy(&o.stdout).trim().parse().ok()
    };
    if id("-u").is_none() {
        let mut cmd = Command::new("useradd");
        cmd.args(["-m", name]);
        let (status, _, err) = run_captured("useradd", &mut cmd, scratch, Duration::from_secs(60))
            .context("PostgreSQL refuses to run as root and `useradd` could not be run")?;
        if !status.success() {
            bail!(
                "PostgreSQL refuses to run as root, and creating user {name} failed: {}; \
                 create an unprivileged user and pass --pg-user NAME",
                err.trim()
            );
        }
    }
    match (id("-u"), id("-g")) {
        (Some(u), Some(g)) => Ok((u, g)),
        _ => bail!("cannot find the uid/gid of user {name}"),
    }
}

/// Makes `path` (recursively) belong to the PostgreSQL user, when there is one.
pub fn give_to_pg_user(tools: &Tools, path: &Path) -> anyhow::Result<()> {
    let Some((uid, gid)) = tools.pg_user else {
        return Ok(());
    };
    chown_tree(path, uid, gid).with_context(|| format!("cannot chown {}", path.display()))
}

fn chown_tree(path: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    std::os::unix::fs::chown(path, Some(uid), Some(gid))?;
    if path.is_dir() {
        for e in std::fs::read_dir(path)? {
            chown_tree(&e?.path(), uid, gid)?;
        }
    }
    Ok(())
}

fn as_pg_user(tools: &Tools, cmd: &mut Command) {
    if let Some((uid, gid)) = tools.pg_user {
        cmd.uid(uid).gid(gid);
    }
}

/// `initdb` (superuser `bench`, trust authentication) and the explicit settings.
/// `dynamic_shared_memory_type = mmap` keeps PostgreSQL's dynamic shared memory in the
/// data directory (`pg_dynshmem`) instead of `/dev/shm`, where a killed instance (the
/// recovery scenario, Ctrl-C) would leave its segments behind.
pub fn init(
    tools: &Tools,
    data: &Path,
    port: u16,
    s: &Settings,
    root: &Path,
) -> anyhow::Result<()> {
    give_to_pg_user(tools, root)?;
    let mut cmd = Command::new(tools.pg_bin.join("initdb"));
    cmd.arg("-D")
        .arg(data)
        .args([
            "-U",
            "bench",
            "--auth=trust",
            "-E",
            "UTF8",
            "--locale=C",
            "-N",
        ])
        .current_dir(root);
    as_pg_user(tools, &mut cmd);
    let (status, _, err) =
        run_captured("initdb", &mut cmd, &tools.scratch, Duration::from_secs(300))?;
    if !status.success() {
        bail!("initdb failed for {}: {}", data.display(), err.trim());
    }
    let conf = format!(
        "\n# written by walrus-bench compare\n\
         port = {port}\n\
         listen_addresses = '127.0.0.1'\n\
         unix_socket_directories = '{}'\n\
         max_connections = {}\n\
         shared_buffers = {}\n\
         max_wal_size = {}\n\
         min_wal_size = 32MB\n\
         checkpoint_timeout = {}\n\
         fsync = on\n\
         synchronous_commit = {}\n\
         full_page_writes = {}\n\
         wal_sync_method = fdatasync\n\
         log_checkpoints = on\n\
         logging_collector = off\n\
         dynamic_shared_memory_type = mmap\n",
        tools
            .socket_dir
            .as_ref()
            .map(|d| d.display().to_string())
            .unwrap_or_default(),
        s.max_connections,
        s.shared_buffers,
        s.max_wal_size,
        s.checkpoint_timeout,
        if s.synchronous_commit { "on" } else { "off" },
        if s.page_images { "on" } else { "off" }
    );
    let path = data.join("postgresql.conf");
    let mut text = std::fs::read_to_string(&path)?;
    text.push_str(&conf);
    std::fs::write(&path, text)?;
    Ok(())
}

/// The postmaster command (its own process group is set by the caller's guard).
pub fn command(tools: &Tools, data: &Path) -> Command {
    let mut cmd = Command::new(tools.pg_bin.join("postgres"));
    cmd.arg("-D").arg(data);
    if let Some(parent) = data.parent() {
        cmd.current_dir(parent);
    }
    as_pg_user(tools, &mut cmd);
    cmd
}

/// `postgres --version`, e.g. "15.18".
pub fn version(tools: &Tools) -> String {
    Command::new(tools.pg_bin.join("postgres"))
        .arg("--version")
        .output()
        .ok()
        .map(|o| {
            // "postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)"
            let s = String::from_utf8_lossy(&o.stdout).to_string();
            s.split("(PostgreSQL)")
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .unwrap_or("?")
                .to_string()
        })
        .unwrap_or_else(|| "?".into())
}
