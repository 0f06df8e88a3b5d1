//! One database server under test, PostgreSQL 15 or walrus, behind one interface: create
//! its data directory with matched settings, start it, ask it SQL through `psql`, stop it
//! gracefully (timed) or kill -9 it, and read its checkpoint log lines.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::process::{check_interrupt, run_captured, ProcGuard};
use super::{postgres, walrus_server, Tools};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum System {
    Postgres,
    Walrus,
}

impl System {
    pub fn name(self) -> &'static str {
        match self {
            System::Postgres => "PostgreSQL",
            System::Walrus => "walrus",
        }
    }
}

/// Settings written explicitly into both servers' configuration, PostgreSQL names.
#[derive(Clone, Debug)]
pub struct Settings {
    pub shared_buffers: String,
    pub max_wal_size: String,
    pub checkpoint_timeout: String,
    /// PostgreSQL `full_page_writes`; walrus `page_protection = "fpw"` (on) or `"none"`.
    pub page_images: bool,
    /// Move the WAL directory to tmpfs (`/dev/shm`) after initialisation.
    pub wal_on_tmpfs: bool,
    pub max_connections: u32,
    /// `synchronous_commit` (on: every commit waits for its WAL flush).
    pub synchronous_commit: bool,
    /// walrus only: `page_protection = dwb` (the double-write buffer) instead of what
    /// `page_images` says.
    pub double_write: bool,
    /// walrus only: further `name = value` lines for its walrus.toml (values as TOML).
    pub walrus_extra: Vec<(String, String)>,
    /// walrus only: `wal_sync_method = pmem`, served with `PMEM_IS_PMEM_FORCE=1` (for a
    /// WAL on tmpfs, which is not persistent memory: non-durable).
    pub pmem_forced: bool,
}

impl Settings {
    pub fn new(max_wal_size: &str, checkpoint_timeout: &str) -> Settings {
        Settings {
            shared_buffers: "128MB".into(),
            max_wal_size: max_wal_size.into(),
            checkpoint_timeout: checkpoint_timeout.into(),
            page_images: true,
            wal_on_tmpfs: false,
            max_connections: 200,
            synchronous_commit: true,
            double_write: false,
            walrus_extra: Vec::new(),
            pmem_forced: false,
        }
    }
}

/// One configuration in a scenario: a system, its settings and the label used in reports.
#[derive(Clone, Debug)]
pub struct Variant {
    pub system: System,
    pub label: String,
    pub settings: Settings,
}

pub struct Server {
    pub system: System,
    pub label: String,
    pub port: u16,
    pub data: PathBuf,
    pub log: PathBuf,
    tools: Tools,
    proc: Option<ProcGuard>,
    /// The tmpfs directory holding the WAL, removed with the server.
    tmpfs_wal: Option<PathBuf>,
    /// walrus: serve with `PMEM_IS_PMEM_FORCE=1` (`Settings::pmem_forced`).
    pmem_forced: bool,
}

impl Server {
    /// Creates and configures a data directory under `root` (nothing is started).
    pub fn create(tools: &Tools, v: &Variant, root: &Path, port: u16) -> anyhow::Result<Server> {
        let data = root.join("data");
        std::fs::create_dir_all(root)?;
        let log = root.join("server.log");
        match v.system {
            System::Postgres => postgres::init(tools, &data, port, &v.settings, root)?,
            System::Walrus => walrus_server::init(tools, &data, &v.settings, root)?,
        }
        Ok(Server {
            system: v.system,
            label: v.label.clone(),
            port,
            data,
            log,
            tools: tools.clone(),
            proc: None,
            tmpfs_wal: None,
            pmem_forced: v.settings.pmem_forced,
        })
    }

    /// The pid of the server process (walrus) or postmaster (PostgreSQL), the leader of
    /// the instance's processes.
    pub fn pgid(&self) -> Option<u32> {
        self.proc.as_ref().map(|p| p.pid)
    }

    /// Starts the server and waits until it answers `select 1`; returns the time from
    /// spawn to the first answer.
    pub fn start(&mut self, limit: Duration) -> anyhow::Result<Duration> {
        if self.proc.is_some() {
            bail!("{} is already running", self.label);
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let mut cmd = match self.system {
            System::Postgres => postgres::command(&self.tools, &self.data),
            System::Walrus => {
                let mut cmd = walrus_server::command(&self.tools, &self.data, self.port);
                if self.pmem_forced {
                    cmd.env("PMEM_IS_PMEM_FORCE", "1");
                }
                cmd
            }
        };
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let start = Instant::now();
        let mut g = ProcGuard::spawn(&self.label, &mut cmd)?;
        loop {
            if let Some(status) = g.try_wait() {
                bail!(
                    "{} failed to start ({status}); last lines of {}:\n{}",
                    self.label,
                    self.log.display(),
                    tail(&self.log, 15)
                );
            }
            check_interrupt()?;
            if self
                .query_on("postgres", "select 1", Duration::from_secs(5))
                .is_ok()
            {
                break;
            }
            if start.elapsed() > limit {
                bail!(
                    "{} did not accept connections within {} s; last lines of {}:\n{}",
                    self.label,
                    limit.as_secs(),
                    self.log.display(),
                    tail(&self.log, 15)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let took = start.elapsed();
        self.proc = Some(g);
        Ok(took)
    }

    /// Graceful shutdown (PostgreSQL: fast shutdown, SIGINT; walrus: SIGTERM); both write
    /// a shutdown checkpoint. Returns the time it took.
    pub fn stop(&mut self) -> anyhow::Result<Duration> {
        let Some(mut g) = self.proc.take() else {
            return Ok(Duration::ZERO);
        };
        let sig = match self.system {
            System::Postgres => "INT",
            System::Walrus => "TERM",
        };
        let (took, clean) = g.stop(sig, Duration::from_secs(300));
        if !clean {
            bail!("{} did not stop within 300 s and was killed", self.label);
        }
        Ok(took)
    }

    /// kill -9 of every process of the server (a crash, as the recovery scenario needs).
    pub fn kill9(&mut self) {
        if let Some(mut g) = self.proc.take() {
            g.kill();
        }
    }

    fn query_on(&self, db: &str, sql: &str, limit: Duration) -> anyhow::Result<String> {
        let mut cmd = Command::new(&self.tools.psql);
        cmd.args(["-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1"])
            .args(["-h", &self.tools.host(), "-p", &self.port.to_string()])
            .args(["-U", "bench", "-d", db, "-c", sql])
            .env("PGCONNECT_TIMEOUT", "5");
        let (status, out, err) = run_captured("psql", &mut cmd, &self.tools.scratch, limit)?;
        if !status.success() {
            bail!("{}: `{sql}` failed: {}", self.label, err.trim());
        }
        Ok(out.trim().to_string())
    }

    /// Runs one SQL statement through psql and returns its unaligned output.
    pub fn query(&self, sql: &str) -> anyhow::Result<String> {
        self.query_on("bench", sql, Duration::from_secs(600))
    }

    /// Runs SQL in database `postgres` (used to create database `bench`).
    pub fn query_postgres_db(&self, sql: &str) -> anyhow::Result<String> {
        self.query_on("postgres", sql, Duration::from_secs(120))
    }

    /// Length of the server log, to read only the lines a run added.
    pub fn log_len(&self) -> u64 {
        std::fs::metadata(&self.log).map(|m| m.len()).unwrap_or(0)
    }

    /// Durations (seconds) of the checkpoints completed since log offset `from`, from the
    /// servers' own log lines: PostgreSQL's `log_checkpoints` (`total=X s`) and walrus's
    /// `checkpoint complete (...) took N ms`.
    pub fn checkpoints_since(&self, from: u64) -> Vec<f64> {
        let Ok(bytes) = std::fs::read(&self.log) else {
            return Vec::new();
        };
        let text = String::from_utf8_lossy(&bytes[(from as usize).min(bytes.len())..]);
        text.lines()
            .filter(|l| l.contains("checkpoint complete"))
            .filter_map(|l| match self.system {
                System::Postgres => l
                    .split("total=")
                    .nth(1)
                    .and_then(|r| r.split_whitespace().next())
                    .and_then(|v| v.parse::<f64>().ok()),
                System::Walrus => l
                    .split("took ")
                    .nth(1)
                    .and_then(|r| r.split_whitespace().next())
                    .and_then(|v| v.parse::<f64>().ok())
                    .map(|ms| ms / 1000.0),
            })
            .collect()
    }

    /// Replaces the WAL directory by a symlink to a fresh tmpfs directory holding its
    /// contents (the stand-in for persistent memory). The server must be stopped.
    pub fn move_wal_to_tmpfs(&mut self, shm_root: &Path) -> anyhow::Result<()> {
        assert!(self.proc.is_none(), "move the WAL of a stopped server only");
        let name = match self.system {
            System::Postgres => "pg_wal",
            System::Walrus => "wal",
        };
        let wal = self.data.join(name);
        let target = shm_root.join(format!("{}-{}", self.port, name));
        copy_dir(&wal, &target)
            .with_context(|| format!("cannot copy {} to {}", wal.display(), target.display()))?;
        if self.system == System::Postgres {
            postgres::give_to_pg_user(&self.tools, &target)?;
        }
        std::fs::remove_dir_all(&wal)?;
        std::os::unix::fs::symlink(&target, &wal)?;
        self.tmpfs_wal = Some(target);
        Ok(())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
        if let Some(t) = self.tmpfs_wal.take() {
            let _ = std::fs::remove_dir_all(t);
        }
    }
}

/// Copies a directory tree of regular files, keeping permissions.
fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    std::fs::set_permissions(to, std::fs::metadata(from)?.permissions())?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let target = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_dir(&e.path(), &target)?;
        } else {
            std::fs::copy(e.path(), &target)?;
        }
    }
    Ok(())
}

/// The last `n` lines of a file, for error messages.
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
