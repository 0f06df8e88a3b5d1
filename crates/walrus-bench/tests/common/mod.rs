//! Helpers shared by the process-level tests: run the real `walrus` binary and the
//! `walrus-bench` tools, start the TPC-B child, kill it, check the invariants.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The `walrus-bench` binary under test (benchmarks, the TPC-B child and checker).
pub fn bench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_walrus-bench"))
}

/// The real `walrus` binary, which cargo builds beside `walrus-bench` when the workspace
/// is tested (`cargo test --workspace`, the README's test command).
pub fn walrus() -> Command {
    let path = std::path::Path::new(env!("CARGO_BIN_EXE_walrus-bench")).with_file_name("walrus");
    assert!(
        path.is_file(),
        "{} is missing: run the tests with `cargo test --workspace`, or `cargo build -p walrus` first",
        path.display()
    );
    Command::new(path)
}

pub struct Cluster {
    pub _tmp: tempfile::TempDir,
    pub data: PathBuf,
    pub acks: PathBuf,
    pub sets: Vec<String>,
    /// Extra `tpcb-run` arguments.
    pub run_args: Vec<String>,
    /// Environment of every child (`PMEM_IS_PMEM_FORCE=1` for the pmem mode).
    pub env: Vec<(String, String)>,
    /// The WAL directory outside the data directory, when there is one (on tmpfs).
    pub _wal_tmp: Option<tempfile::TempDir>,
}

impl Cluster {
    /// A fresh data directory with small segments and buffers so checkpoints, segment
    /// recycling and eviction all happen within a short run.
    pub fn new(sets: &[&str]) -> Cluster {
        Cluster::new_with(sets, &[], &[], None)
    }

    /// [`Cluster::new`] with extra `walrus init` arguments, an environment for every
    /// child, and a WAL directory kept (and removed) with the cluster.
    pub fn new_with(
        sets: &[&str],
        init_args: &[&str],
        env: &[(&str, &str)],
        wal_tmp: Option<tempfile::TempDir>,
    ) -> Cluster {
        Cluster::new_in(
            std::env::temp_dir().as_path(),
            sets,
            init_args,
            env,
            wal_tmp,
        )
    }

    /// [`Cluster::new_with`] with the data directory under `base` (a file system that
    /// writes pages atomically, for `page_protection = atomic`).
    pub fn new_in(
        base: &Path,
        sets: &[&str],
        init_args: &[&str],
        env: &[(&str, &str)],
        wal_tmp: Option<tempfile::TempDir>,
    ) -> Cluster {
        let tmp = tempfile::tempdir_in(base).expect("tempdir");
        let data = tmp.path().join("data");
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let out = walrus()
            .arg("init")
            .arg(&data)
            .args(["--wal-segment-size", "1MB"])
            .args(init_args)
            .envs(env.iter().cloned())
            .output()
            .expect("run walrus init");
        assert!(
            out.status.success(),
            "init failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let cfg = data.join("walrus.toml");
        let text = std::fs::read_to_string(&cfg)
            .expect("config")
            .replace("shared_buffers = \"128MB\"", "shared_buffers = \"2MB\"");
        std::fs::write(&cfg, text).expect("write config");
        let acks = tmp.path().join("acks");
        Cluster {
            data,
            acks,
            sets: sets.iter().map(|s| s.to_string()).collect(),
            run_args: Vec::new(),
            env,
            _wal_tmp: wal_tmp,
            _tmp: tmp,
        }
    }

    fn set_args(&self) -> Vec<String> {
        self.sets
            .iter()
            .flat_map(|s| ["--set".to_string(), s.clone()])
            .collect()
    }

    /// Starts the workload child with `extra` arguments and waits until it reports READY
    /// (schema loaded).
    pub fn start_workload(&self, threads: usize, extra: &[String]) -> Child {
        let mut cmd = bench();
        cmd.arg("tpcb-run")
            .arg("--data")
            .arg(&self.data)
            .arg("--acks")
            .arg(&self.acks)
            .args(["--threads", &threads.to_string()])
            .args(
                // A checkpoint every 150 ms unless the test chose its own interval.
                (!self.run_args.iter().any(|a| a == "--checkpoint-ms"))
                    .then_some(["--checkpoint-ms", "150"])
                    .into_iter()
                    .flatten(),
            )
            .args(&self.run_args)
            .args(extra)
            .args(self.set_args())
            .envs(self.env.iter().cloned())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn workload");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line == "READY" {
                    let _ = tx.send(());
                }
            }
        });
        if rx.recv_timeout(Duration::from_secs(60)).is_err() {
            let _ = child.kill();
            let out = child.wait_with_output().expect("wait");
            panic!(
                "workload never became ready: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        child
    }

    pub fn check(&self) -> Output {
        self.check_with(&[])
    }

    pub fn check_with(&self, extra: &[&str]) -> Output {
        bench()
            .arg("tpcb-check")
            .args(extra)
            .arg("--data")
            .arg(&self.data)
            .arg("--acks")
            .arg(&self.acks)
            .args(self.set_args())
            .envs(self.env.iter().cloned())
            .output()
            .expect("run tpcb-check")
    }

    pub fn verify(&self) -> Output {
        walrus()
            .arg("verify")
            .arg(&self.data)
            .output()
            .expect("run verify")
    }
}

pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Waits for a child to exit by itself within `limit`; kills it and fails otherwise.
pub fn wait_exit(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            return s;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("child did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A small deterministic RNG (xorshift) seeded from the environment or the clock, so a
/// failing run can be replayed with WALRUS_TEST_SEED.
pub struct Rng(u64);
impl Rng {
    pub fn from_env() -> Rng {
        let seed = std::env::var("WALRUS_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(1)
                    | 1
            });
        eprintln!("WALRUS_TEST_SEED={seed}");
        Rng(seed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo)
    }
}

pub fn data_path(c: &Cluster, rel: &str) -> PathBuf {
    c.data.join(rel)
}

pub fn exists(p: &Path) -> bool {
    p.exists()
}

/// Whether libpmem (`libpmem.so.1`) can be loaded, for the pmem tests: outside CI a
/// missing library skips the test (with a line saying so), under `CI` it fails it.
pub fn libpmem_or_skip() -> bool {
    match walrus_engine::wal::pmem::Pmem::load(walrus_engine::wal::pmem::LIBRARY_DEFAULT) {
        Ok(_) => true,
        Err(e) if std::env::var_os("CI").is_none() => {
            eprintln!("SKIPPED: {e}");
            false
        }
        Err(e) => panic!("CI is set and libpmem is missing: {e}"),
    }
}

/// Where the image of the loop-mounted XFS for atomic-write tests lives, and its mount
/// point.
const ATOMIC_IMAGE: &str = "/tmp/walrus-atomic-xfs.img";
const ATOMIC_MOUNT: &str = "/tmp/walrus-atomic-xfs";

/// A directory whose file system writes an 8 KiB page atomically (statx reports it), for
/// `page_protection = atomic`: `WALRUS_ATOMIC_DIR` when set; otherwise an XFS file system
/// with reflink (Linux 6.16+ makes writes up to its unit max atomic in software) on a
/// loop device, made and mounted once per machine at /tmp/walrus-atomic-xfs (root,
/// `mkfs.xfs` from xfsprogs). Outside CI a machine that cannot provide one skips with a
/// message (`None`); in CI (`CI` set, where `.ci/run` installs xfsprogs) that fails the
/// test — unless the kernel refuses the loop mount itself for lack of privilege (a
/// container without CAP_SYS_ADMIN), which no setup step can change: then it skips, and
/// says so loudly.
pub fn atomic_capable_dir() -> Option<PathBuf> {
    let found = find_atomic_dir();
    match found {
        Ok(dir) => Some(dir),
        Err(why)
            if std::env::var_os("CI").is_some()
                && !(why.contains("\"mount\"")
                    && ["ermission", "not permitted", "superuser"]
                        .iter()
                        .any(|m| why.contains(m))) =>
        {
            panic!("no file system with atomic 8 KiB writes for the atomic tests: {why}")
        }
        Err(why) => {
            eprintln!("skipping: no file system with atomic 8 KiB writes here ({why})");
            None
        }
    }
}

fn find_atomic_dir() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("WALRUS_ATOMIC_DIR") {
        let dir = PathBuf::from(dir);
        return covers(&dir).map(|()| dir);
    }
    // One test process at a time sets the file system up.
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open("/tmp/walrus-atomic-xfs.lock")
        .map_err(|e| format!("lock file: {e}"))?;
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor this function owns; released when `lock` drops.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(format!("flock: {}", std::io::Error::last_os_error()));
    }
    let mount = PathBuf::from(ATOMIC_MOUNT);
    let mounted = std::fs::read_to_string("/proc/mounts")
        .map_err(|e| format!("/proc/mounts: {e}"))?
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some(ATOMIC_MOUNT));
    if !mounted {
        let run = |cmd: &mut Command| -> Result<(), String> {
            let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "{cmd:?} failed: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            }
        };
        std::fs::create_dir_all(&mount).map_err(|e| format!("{ATOMIC_MOUNT}: {e}"))?;
        let image =
            std::fs::File::create(ATOMIC_IMAGE).map_err(|e| format!("{ATOMIC_IMAGE}: {e}"))?;
        image
            .set_len(4 << 30)
            .map_err(|e| format!("{ATOMIC_IMAGE}: {e}"))?;
        drop(image);
        run(Command::new("mkfs.xfs").args(["-q", "-f", "-m", "reflink=1", ATOMIC_IMAGE]))?;
        run(Command::new("mount").args(["-o", "loop", ATOMIC_IMAGE, ATOMIC_MOUNT]))?;
    }
    covers(&mount).map(|()| mount)
}

/// Whether files in `dir` take 8 KiB atomic writes, by whether walrus opens a directory
/// there with `page_protection = atomic` (it refuses with the device's figures if not).
fn covers(dir: &Path) -> Result<(), String> {
    let probe = tempfile::tempdir_in(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let data = probe.path().join("data");
    let out = walrus()
        .arg("init")
        .arg(&data)
        .output()
        .map_err(|e| format!("walrus init: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    let cfg = data.join("walrus.toml");
    let text = std::fs::read_to_string(&cfg).map_err(|e| e.to_string())?;
    std::fs::write(
        &cfg,
        text.replace("page_protection = \"fpw\"", "page_protection = \"atomic\""),
    )
    .map_err(|e| e.to_string())?;
    let out = walrus()
        .arg("recover")
        .arg(&data)
        .output()
        .map_err(|e| format!("walrus recover: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// A cluster with `page_protection = atomic` on [`atomic_capable_dir`] (None: skipped, see
/// there): fdatasync WAL, 4 MB of WAL between timed checkpoints so incremental ones
/// advance the redo point, autovacuum every 50 ms, and no explicit checkpoints from the
/// TPC-B child.
pub fn atomic_cluster() -> Option<Cluster> {
    let base = atomic_capable_dir()?;
    let mut c = Cluster::new_in(
        &base,
        &[
            "page_protection=atomic",
            "wal_sync_method=fdatasync",
            "max_wal_size=4MB",
            "autovacuum_naptime=50ms",
        ],
        &[],
        &[],
        None,
    );
    c.run_args = vec!["--checkpoint-ms".into(), "1000000".into()];
    Some(c)
}

/// psql from PostgreSQL 15 (the process tests drive `walrus serve` with it).
pub const PSQL: &str = "/usr/lib/postgresql/15/bin/psql";

/// A `walrus serve` on a scratch data directory, driven with psql.
pub struct SqlServer {
    pub data: PathBuf,
    pub config: PathBuf,
    pub port: u16,
    pub child: Option<Child>,
}

impl SqlServer {
    /// A server (not started) with its data directory and `settings` (walrus.toml
    /// lines) under `dir`, on a free loopback port.
    pub fn new(dir: &Path, settings: &str) -> SqlServer {
        let config = dir.join("extra.toml");
        std::fs::write(&config, settings).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        SqlServer {
            data: dir.join("data"),
            config,
            port,
            child: None,
        }
    }

    pub fn start(&mut self) {
        let child = walrus()
            .args(["serve", "--data"])
            .arg(&self.data)
            .arg("--config")
            .arg(&self.config)
            .args(["--port", &self.port.to_string()])
            .env("WALRUS_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn walrus serve");
        self.child = Some(child);
        let start = Instant::now();
        loop {
            let o = self.psql_command("select 1").output().expect("psql");
            if o.status.success() {
                return;
            }
            if let Some(s) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("walrus serve exited during startup/recovery: {s}");
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "server did not start: {}",
                text(&o)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn kill(&mut self) {
        let mut child = self.child.take().expect("server running");
        child.kill().expect("SIGKILL the server");
        child.wait().expect("reap server");
    }

    pub fn stop(&mut self) {
        let out = walrus().arg("stop").arg(&self.data).output().unwrap();
        assert!(out.status.success(), "walrus stop: {}", text(&out));
        let mut child = self.child.take().expect("server running");
        wait_exit(&mut child, Duration::from_secs(60));
    }

    pub fn psql_command(&self, command: &str) -> Command {
        let mut c = Command::new(PSQL);
        c.args(["-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1"])
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-U", "walrus", "-d", "walrus", "-c", command])
            .env("PGCONNECT_TIMEOUT", "5")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    pub fn psql(&self, command: &str) -> Output {
        let o = self.psql_command(command).output().expect("run psql");
        assert!(o.status.success(), "{command}: {}", text(&o));
        o
    }

    /// The single integer a query returns.
    pub fn int(&self, query: &str) -> i64 {
        let o = self.psql(query);
        let s = String::from_utf8_lossy(&o.stdout);
        s.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{query}: not an integer: {s:?}"))
    }

    pub fn copy_command(&self, file: &Path) -> Command {
        self.psql_command(&format!("\\copy t from '{}'", file.display()))
    }
}
