//! Child processes that cannot outlive the harness, and the `/proc` sampler that measures
//! them.
//!
//! Every child is started in its own process group (`process_group(0)`), so that a Ctrl-C
//! typed at the terminal reaches only the harness, which then stops everything in order.
//! PostgreSQL's postmaster puts each child it forks in a session of its own (`setsid`), so
//! a group kill is not enough: [`ProcGuard::kill`] stops the leader (no more forks), lists
//! its children by parent pid, and SIGKILLs them all, in `Drop` too, so an error, a panic
//! or an interrupt leave nothing running. Signals are sent with the `kill` utility rather
//! than `libc::kill`, which would need `unsafe` in a `forbid(unsafe_code)` crate.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// Set by the SIGINT/SIGTERM handler; every wait loop polls it.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Acquire)
}

/// Fails with a clear message once a signal has arrived, so the caller unwinds and the
/// guards on its stack stop what it started.
pub fn check_interrupt() -> anyhow::Result<()> {
    if interrupted() {
        bail!("interrupted by a signal; stopped every server and client the harness started");
    }
    Ok(())
}

/// Installs the SIGINT/SIGTERM handler: a thread that waits for either signal and sets
/// the flag. The work itself is stopped by the main thread, which owns the guards.
pub fn install_signal_handler() {
    std::thread::spawn(|| {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            eprintln!("walrus-bench compare: cannot install signal handlers");
            return;
        };
        rt.block_on(async {
            let Ok(mut term) =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            else {
                return;
            };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            INTERRUPTED.store(true, Ordering::Release);
            eprintln!("\nwalrus-bench compare: interrupted, stopping everything it started");
        });
    });
}

/// Sends `signal` (a name such as `TERM`, `INT`, `KILL`, `STOP`) to the given pids and to
/// the process group `group`, if any.
pub fn signal(pids: &[u32], group: Option<u32>, signal: &str) {
    let mut cmd = Command::new("kill");
    cmd.args(["-s", signal, "--"]);
    if let Some(g) = group {
        cmd.arg(format!("-{g}"));
    }
    cmd.args(pids.iter().map(|p| p.to_string()));
    let _ = cmd.stdout(Stdio::null()).stderr(Stdio::null()).status();
}

/// True while `pid` exists and is not a zombie.
fn alive(pid: u32) -> bool {
    read_stat(pid).is_some_and(|s| s.state != 'Z')
}

/// A child process that is killed, with every process it started, when the guard is
/// dropped.
pub struct ProcGuard {
    child: Option<Child>,
    pub pid: u32,
}

impl ProcGuard {
    /// Spawns `cmd` in a new process group.
    pub fn spawn(name: &str, cmd: &mut Command) -> anyhow::Result<ProcGuard> {
        cmd.process_group(0);
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start {name} ({:?})", cmd.get_program()))?;
        Ok(ProcGuard {
            pid: child.id(),
            child: Some(child),
        })
    }

    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Waits up to `limit` for the child to exit by itself; `None` on timeout. Stops at
    /// once (with an error) when a signal arrived.
    pub fn wait_for(&mut self, limit: Duration) -> anyhow::Result<Option<ExitStatus>> {
        let start = Instant::now();
        loop {
            if let Some(s) = self.try_wait() {
                return Ok(Some(s));
            }
            check_interrupt()?;
            if start.elapsed() >= limit {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Signals the leader (PostgreSQL's postmaster passes a shutdown on to its children),
    /// then waits until the leader and every process it had started are gone; kills them
    /// if that takes longer than `limit`. Returns how long it took and whether it ended
    /// without the kill.
    pub fn stop(&mut self, sig: &str, limit: Duration) -> (Duration, bool) {
        let start = Instant::now();
        let members = instance_members(self.pid);
        signal(&[self.pid], None, sig);
        let mut clean = false;
        while start.elapsed() < limit {
            if self.try_wait().is_some() && !members.iter().any(|&p| alive(p)) {
                clean = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let took = start.elapsed();
        self.kill();
        (took, clean)
    }

    /// SIGKILL to the leader, its children and its process group, and reap the leader.
    /// The leader is stopped first so that it cannot fork while its children are listed.
    pub fn kill(&mut self) {
        if self.child.is_none() {
            return;
        }
        // A leader already reaped may have its pid reused: signal only its group then.
        let members = if self.try_wait().is_none() {
            signal(&[self.pid], None, "STOP");
            instance_members(self.pid)
        } else {
            Vec::new()
        };
        signal(&members, Some(self.pid), "KILL");
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        // Children other than the leader are reaped by init once the leader is gone; wait
        // (boundedly) until they have left, so that "nothing left running" holds on return.
        let start = Instant::now();
        while members.iter().any(|&p| alive(p)) && start.elapsed() < Duration::from_secs(5) {
            signal(&members, None, "KILL");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ProcGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs a short command to completion with stdout and stderr captured, in its own
/// process group, polling for interrupts; fails after `limit`.
pub fn run_captured(
    name: &str,
    cmd: &mut Command,
    scratch: &Path,
    limit: Duration,
) -> anyhow::Result<(ExitStatus, String, String)> {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    let out_path = scratch.join(format!("cmd-{n}.out"));
    let err_path = scratch.join(format!("cmd-{n}.err"));
    cmd.stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path)?)
        .stderr(std::fs::File::create(&err_path)?);
    let mut g = ProcGuard::spawn(name, cmd)?;
    let status = match g.wait_for(limit)? {
        Some(s) => s,
        None => bail!("{name} did not finish within {} s", limit.as_secs()),
    };
    let out = std::fs::read_to_string(&out_path).unwrap_or_default();
    let err = std::fs::read_to_string(&err_path).unwrap_or_default();
    let _ = std::fs::remove_file(&out_path);
    let _ = std::fs::remove_file(&err_path);
    Ok((status, out, err))
}

/// The leader and its live children and process-group members. PostgreSQL's children
/// call `setsid()`, so they are found by parent, walrus's threads by the leader itself.
pub fn instance_members(leader: u32) -> Vec<u32> {
    let mut pids = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return pids;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if let Some(st) = read_stat(pid) {
            let member = pid == leader || st.ppid == leader || st.pgrp == leader;
            if member && st.state != 'Z' {
                pids.push(pid);
            }
        }
    }
    pids
}

struct Stat {
    state: char,
    ppid: u32,
    pgrp: u32,
    /// utime + stime of the process itself.
    cpu_ticks: u64,
    /// cutime + cstime: the children it has waited for.
    children_cpu_ticks: u64,
}

/// Fields of `/proc/PID/stat` after the command name (which may contain spaces and
/// parentheses, hence the search for the last `)`).
fn read_stat(pid: u32) -> Option<Stat> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // f[0] = state (field 3), [1] = ppid (4), [2] = pgrp (5), [11..=14] = utime, stime,
    // cutime, cstime (14..=17).
    let n = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
    Some(Stat {
        state: f.first()?.chars().next()?,
        ppid: n(1)? as u32,
        pgrp: n(2)? as u32,
        cpu_ticks: n(11)? + n(12)?,
        children_cpu_ticks: n(13)? + n(14)?,
    })
}

fn read_write_bytes(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("write_bytes:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Clock ticks per second of `/proc/PID/stat` times (`getconf CLK_TCK`, 100 on Linux).
fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// Totals over one measured interval of every process of a server instance.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcTotals {
    /// Bytes the processes caused to be written to storage (`/proc/PID/io`
    /// `write_bytes`, counted when a page-cache page is dirtied).
    pub write_bytes: u64,
    /// User + system CPU seconds (`/proc/PID/stat` utime + stime).
    pub cpu_seconds: f64,
    /// Bytes the machine's disks wrote in the interval (`/sys/block/*/stat`, sectors
    /// written; journal and everything else included). `write_bytes` above is charged per
    /// page-cache folio dirtied, and on a file the kernel caches in large folios (walrus's
    /// zero-filled WAL segments) one small `pwrite` is charged the whole folio: measured
    /// 7 GB of `write_bytes` for 122 MB the disk actually wrote. This is the honest number.
    pub disk_bytes: u64,
}

/// Sectors written so far by the machine's whole disks (virtual and stacked devices such
/// as loop, ram, zram, dm and md are skipped so nothing is counted twice).
fn disk_sectors_written() -> u64 {
    let Ok(dir) = std::fs::read_dir("/sys/block") else {
        return 0;
    };
    dir.flatten()
        .filter(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            !["loop", "ram", "zram", "dm-", "md"]
                .iter()
                .any(|p| n.starts_with(p))
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter_map(|st| st.split_whitespace().nth(6)?.parse::<u64>().ok())
        .sum()
}

/// Cumulative writes and CPU of a server instance at one moment.
///
/// When a parent reaps a child, Linux adds the child's I/O counters to the parent's
/// `/proc/PID/io` and its CPU to the parent's cutime/cstime. So the leader's own counters
/// (including its reaped children) plus those of its live children are the instance's
/// total so far, and a run's cost is the difference of two such readings, with no sampling
/// in between: PostgreSQL's backends that exit at the end of a run are counted through the
/// postmaster, walrus is one process. Before reading, this waits (up to 2 s) until no child
/// is a zombie, i.e. every exited child has been folded into its parent.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counters {
    write_bytes: u64,
    cpu_ticks: u64,
    disk_sectors: u64,
}

pub fn instance_counters(leader: u32) -> Counters {
    let start = Instant::now();
    loop {
        let mut zombie = false;
        let mut c = Counters::default();
        for pid in instance_members(leader) {
            let (Some(w), Some(st)) = (read_write_bytes(pid), read_stat(pid)) else {
                continue;
            };
            c.write_bytes += w;
            c.cpu_ticks += st.cpu_ticks;
            if pid == leader {
                c.cpu_ticks += st.children_cpu_ticks;
            }
        }
        if let Ok(dir) = std::fs::read_dir("/proc") {
            zombie = dir.flatten().any(|e| {
                e.file_name()
                    .to_str()
                    .and_then(|s| s.parse::<u32>().ok())
                    .and_then(read_stat)
                    .is_some_and(|st| st.ppid == leader && st.state == 'Z')
            });
        }
        if !zombie || start.elapsed() > Duration::from_secs(2) {
            c.disk_sectors = disk_sectors_written();
            return c;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Counters {
    /// What happened between `before` and `self`.
    pub fn since(&self, before: &Counters) -> ProcTotals {
        ProcTotals {
            write_bytes: self.write_bytes.saturating_sub(before.write_bytes),
            cpu_seconds: self.cpu_ticks.saturating_sub(before.cpu_ticks) as f64 / clock_ticks(),
            disk_bytes: self.disk_sectors.saturating_sub(before.disk_sectors) * 512,
        }
    }
}
