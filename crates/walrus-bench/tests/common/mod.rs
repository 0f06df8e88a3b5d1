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
}

impl Cluster {
    /// A fresh data directory with small segments and buffers so checkpoints, segment
    /// recycling and eviction all happen within a short run.
    pub fn new(sets: &[&str]) -> Cluster {
        let tmp = tempfile::tempdir().expect("tempdir");
        let data = tmp.path().join("data");
        let out = walrus()
            .arg("init")
            .arg(&data)
            .args(["--wal-segment-size", "1MB"])
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
