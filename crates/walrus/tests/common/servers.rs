//! Starting the servers the differential tests compare: PostgreSQL 15 on a scratch
//! directory and `walrus serve` on a fresh data directory, each on a free loopback port.

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::walrus;

/// How long a server may take to accept connections.
pub const START_TIMEOUT: Duration = Duration::from_secs(90);
/// Where Debian's PostgreSQL 15 server binaries live.
pub const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// Sends `sig` to `pid` with the `kill` utility (no `unsafe` in tests).
pub fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .args(["-s", sig, &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// A server process stopped (politely, then by force) when dropped.
pub struct Server {
    pub child: Child,
    /// Signal that asks it to shut down, and the time it gets to do so.
    pub stop_signal: &'static str,
}

impl Drop for Server {
    fn drop(&mut self) {
        signal(self.child.id(), self.stop_signal);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(15) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether PostgreSQL 15's server binaries are installed.
pub fn postgres_installed() -> bool {
    Path::new(PG_BIN).join("postgres").is_file() && Path::new(PG_BIN).join("initdb").is_file()
}

fn id_of(user: &str, flag: &str) -> Option<u32> {
    let o = Command::new("id").args([flag, user]).output().ok()?;
    if !o.status.success() {
        return None;
    }
    String::from_utf8_lossy(&o.stdout).trim().parse().ok()
}

/// PostgreSQL refuses to run as root: as root, run it as `pgrun` (created when missing),
/// as `walrus-bench compare` does.
fn pg_user() -> Option<(u32, u32)> {
    if id_of("root", "-u") != current_uid() {
        return None;
    }
    if id_of("pgrun", "-u").is_none() {
        let _ = Command::new("useradd").args(["-m", "pgrun"]).status();
    }
    Some((id_of("pgrun", "-u")?, id_of("pgrun", "-g")?))
}

fn current_uid() -> Option<u32> {
    let o = Command::new("id").arg("-u").output().ok()?;
    String::from_utf8_lossy(&o.stdout).trim().parse().ok()
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

/// `initdb` and `postgres` on a scratch directory and a free loopback port, C locale,
/// UTC, no fsync (the answers are what is compared, not durability).
pub fn start_postgres(dir: &Path) -> Result<(Server, String), String> {
    let user = pg_user();
    if let Some((uid, gid)) = user {
        // The unprivileged user must be able to reach `dir` through its parent.
        if let Some(parent) = dir.parent() {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o755))
                .map_err(|e| format!("chmod {}: {e}", parent.display()))?;
        }
        chown_tree(dir, uid, gid).map_err(|e| format!("chown {}: {e}", dir.display()))?;
    }
    let as_user = |cmd: &mut Command| {
        if let Some((uid, gid)) = user {
            cmd.uid(uid).gid(gid);
        }
    };
    let data = dir.join("pgdata");
    let mut initdb = Command::new(Path::new(PG_BIN).join("initdb"));
    initdb
        .arg("-D")
        .arg(&data)
        .args([
            "-U",
            "bench",
            "--auth=trust",
            "-E",
            "UTF8",
            "--locale=C",
            "-N",
        ])
        .current_dir(dir);
    as_user(&mut initdb);
    let out = initdb.output().map_err(|e| format!("initdb: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let port = free_port();
    let log = std::fs::File::create(dir.join("postgres.log")).map_err(|e| e.to_string())?;
    let mut cmd = Command::new(Path::new(PG_BIN).join("postgres"));
    cmd.arg("-D").arg(&data);
    for setting in [
        format!("port={port}"),
        "listen_addresses=127.0.0.1".into(),
        "unix_socket_directories=".into(),
        "fsync=off".into(),
        "timezone=UTC".into(),
        "max_connections=10".into(),
        "dynamic_shared_memory_type=mmap".into(),
    ] {
        cmd.arg("-c").arg(setting);
    }
    cmd.current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .process_group(0);
    as_user(&mut cmd);
    let child = cmd.spawn().map_err(|e| format!("postgres: {e}"))?;
    let server = Server {
        child,
        stop_signal: "INT",
    };
    Ok((
        server,
        format!("host=127.0.0.1 port={port} user=bench dbname=postgres"),
    ))
}

/// `walrus serve` on a fresh data directory and a free loopback port.
pub fn start_walrus(dir: &Path) -> Result<(Server, String), String> {
    let port = free_port();
    let child = walrus()
        .args(["serve", "--data"])
        .arg(dir.join("walrus-data"))
        .args(["--port", &port.to_string()])
        .env("WALRUS_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("walrus serve: {e}"))?;
    Ok((
        Server {
            child,
            stop_signal: "TERM",
        },
        format!("host=127.0.0.1 port={port} user=bench dbname=bench"),
    ))
}
