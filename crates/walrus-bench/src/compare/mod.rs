//! `walrus-bench compare`: PostgreSQL 15 and walrus side by side on this machine, under
//! the same pgbench, with matched settings, one scenario per seed paper.
//!
//! METHOD. Each configuration gets its own temporary data directory, own loopback port and
//! explicitly written settings (`shared_buffers`, `max_wal_size`, `checkpoint_timeout`,
//! `fsync = on`, `synchronous_commit = on`, `wal_sync_method = fdatasync`, and the page
//! protection under test). Both are initialised by the same `pgbench -i` (or the same
//! `CREATE TABLE`), and every measured run is: start the server, warm-up pgbench,
//! `CHECKPOINT`, the measured pgbench (`-M prepared -P 1 -l`), graceful stop. Repetitions
//! alternate the order of the configurations (A B, then B A) so that drift on a shared,
//! noisy machine falls on both sides; the report shows the median with min–max.
//!
//! STOPPING. Every child runs in its own process group behind a guard that kills it and
//! everything it started when dropped; a SIGINT/SIGTERM sets a flag that every wait loop
//! polls, so the harness unwinds through the guards and leaves nothing running (see
//! `process`).

mod chart;
mod measure;
mod pgbench;
mod postgres;
mod process;
mod report;
mod server;
mod sqlwork;
mod walrus_server;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use measure::Measurement;
use pgbench::{Options, Workload};
use process::check_interrupt;
use report::{
    median_run, named_pair_table, pair_table, ratio, show, spread, table, Metric, Spread,
    LOAD_METRICS,
};
use server::{Server, Settings, System, Variant};

const SCENARIOS: &[&str] = &[
    "fpw",
    "dwb",
    "eviction",
    "insert",
    "checkpoint",
    "recovery",
    "scaling",
    "bulk",
    "queries",
];

/// `(repetition, configuration)` pairs: every configuration once per repetition, in
/// forward order on even repetitions and backward on odd ones, so slow drift of a shared
/// machine falls on both systems alike.
fn alternating(reps: u32, n: usize) -> impl Iterator<Item = (u32, usize)> {
    (0..reps)
        .flat_map(move |rep| (0..n).map(move |k| (rep, if rep % 2 == 0 { k } else { n - 1 - k })))
}

/// How long a server may take from spawn to its first answer (recovery included).
const START_LIMIT: Duration = Duration::from_secs(600);

#[derive(clap::Args, Debug)]
pub struct CompareArgs {
    /// Scenarios to run, comma-separated: fpw, dwb, eviction, insert, checkpoint,
    /// recovery, scaling, bulk, queries, or all.
    #[arg(long, default_value = "all")]
    scenario: String,
    /// Smoke check: scale 1, 1 repetition, 3 s per run, scaling at 1/16/128 clients only
    /// (all scenarios in about 2 minutes).
    #[arg(long)]
    quick: bool,
    /// Repetitions of every run (default 3; quick: 1).
    #[arg(long)]
    reps: Option<u32>,
    /// Seconds per measured run (default 60; quick: 3).
    #[arg(long)]
    duration: Option<u64>,
    /// Seconds of warm-up before each measured run (default 10; quick: 1).
    #[arg(long)]
    warmup: Option<u64>,
    /// pgbench scale factor for the tpcb-like scenarios (default 10; quick: 1).
    #[arg(long)]
    scale: Option<u32>,
    /// Markdown report to write.
    #[arg(long, default_value = "bench-report.md")]
    out: PathBuf,
    /// Also append the report to this file (e.g. BENCHMARKS.md).
    #[arg(long)]
    append: Option<PathBuf>,
    /// Directory for the SVG charts (default: bench-charts beside --out).
    #[arg(long)]
    charts: Option<PathBuf>,
    /// Directory holding PostgreSQL 15's initdb and postgres.
    #[arg(long, default_value = "/usr/lib/postgresql/15/bin")]
    pg_bin: PathBuf,
    /// pgbench to use (default: the one in --pg-bin, else on PATH).
    #[arg(long)]
    pgbench: Option<PathBuf>,
    /// The walrus server binary (default: `walrus` beside this `walrus-bench`, as cargo
    /// builds them).
    #[arg(long)]
    walrus_bin: Option<PathBuf>,
    /// psql to use (default: the one in --pg-bin, else on PATH).
    #[arg(long)]
    psql: Option<PathBuf>,
    /// Unprivileged user PostgreSQL runs as when this runs as root (created if missing).
    #[arg(long, default_value = "pgrun")]
    pg_user: String,
    /// First TCP port to use (then the following ones); default: free ports.
    #[arg(long)]
    port: Option<u16>,
    /// Where the data directories go (default /tmp); must be on the disk to measure.
    #[arg(long, default_value = "/tmp")]
    work_dir: PathBuf,
    /// Keep the data directories and logs after the run.
    #[arg(long)]
    keep: bool,
    /// How pgbench and psql reach both servers: `tcp` (loopback, 127.0.0.1) or `unix`
    /// (a Unix-domain socket in a directory of the run, as pgbench does by default).
    #[arg(long, default_value = "tcp", value_parser = ["tcp", "unix"])]
    transport: String,
}

/// Paths of the programs and directories every part uses.
#[derive(Clone, Debug)]
pub struct Tools {
    pub pg_bin: PathBuf,
    pub pgbench: PathBuf,
    pub psql: PathBuf,
    pub walrus: PathBuf,
    /// Where captured output of short commands goes.
    pub scratch: PathBuf,
    /// uid and gid PostgreSQL runs as (only when the harness is root).
    pub pg_user: Option<(u32, u32)>,
    /// `--transport unix`: the directory both servers put their Unix-domain socket in,
    /// which clients are given as host. `None`: loopback TCP only.
    pub socket_dir: Option<PathBuf>,
}

impl Tools {
    /// What clients pass as `-h`: the socket directory or the loopback address.
    pub fn host(&self) -> String {
        match &self.socket_dir {
            Some(d) => d.display().to_string(),
            None => "127.0.0.1".into(),
        }
    }

    /// The transport, as the reports say it.
    pub fn transport(&self) -> &'static str {
        if self.socket_dir.is_some() {
            "Unix-domain socket"
        } else {
            "loopback TCP"
        }
    }
}

/// The sizes of this invocation.
#[derive(Clone, Debug)]
struct Plan {
    scenarios: Vec<&'static str>,
    quick: bool,
    reps: u32,
    duration: u64,
    warmup: u64,
    scale: u32,
}

impl Plan {
    fn from_args(a: &CompareArgs) -> anyhow::Result<Plan> {
        let scenarios: Vec<&'static str> = if a.scenario == "all" {
            SCENARIOS.to_vec()
        } else {
            let mut v = Vec::new();
            for name in a.scenario.split(',') {
                match SCENARIOS.iter().find(|s| **s == name.trim()) {
                    Some(s) => v.push(*s),
                    None => bail!(
                        "unknown scenario \"{name}\": expected one of {} or all",
                        SCENARIOS.join(", ")
                    ),
                }
            }
            v
        };
        let q = a.quick;
        let plan = Plan {
            scenarios,
            quick: q,
            reps: a.reps.unwrap_or(if q { 1 } else { 3 }).max(1),
            duration: a.duration.unwrap_or(if q { 3 } else { 60 }).max(2),
            warmup: a.warmup.unwrap_or(if q { 1 } else { 10 }),
            scale: a.scale.unwrap_or(if q { 1 } else { 10 }).max(1),
        };
        Ok(plan)
    }

    /// Client counts of the scaling scenario (quick: three of them).
    fn scaling_clients(&self) -> Vec<u32> {
        if self.quick {
            vec![1, 16, 128]
        } else {
            vec![1, 4, 16, 64, 128]
        }
    }

    fn init_estimate(&self) -> f64 {
        4.0 + 2.5 * self.scale as f64
    }

    fn run_estimate(&self) -> f64 {
        (self.warmup + self.duration) as f64 + 4.0
    }

    /// Planned seconds per scenario, for "time left" on stderr.
    fn estimate(&self, scenario: &str) -> f64 {
        let reps = self.reps as f64;
        let (i, r) = (self.init_estimate(), self.run_estimate());
        match scenario {
            "fpw" | "dwb" => 4.0 * i + 4.0 * reps * r,
            "eviction" => 4.0 * 5.0 * i + 4.0 * reps * r,
            "insert" => 7.0 * 4.0 + 10.0 * reps * r,
            "checkpoint" => 2.0 * i + 2.0 * reps * (r + 5.0),
            "recovery" => 2.0 * i + 2.0 * reps * (self.duration as f64 + 10.0),
            "scaling" => 2.0 * i + self.scaling_clients().len() as f64 * 2.0 * reps * r,
            "bulk" => 2.0 * reps * (8.0 * i + if self.quick { 5.0 } else { 100.0 }),
            "queries" => 2.0 * i + 2.0 * reps * (20.0 + 2.0 * self.duration.clamp(2, 20) as f64),
            _ => 0.0,
        }
    }
}

/// Progress on stderr: what is running and roughly how long is left.
struct Progress {
    start: Instant,
    planned_total: f64,
    planned_done: f64,
}

impl Progress {
    fn step(&mut self, what: &str, planned: f64) {
        let left = (self.planned_total - self.planned_done).max(0.0);
        let el = self.start.elapsed().as_secs();
        eprintln!(
            "[{:02}:{:02} elapsed, ~{:02}:{:02} left] {what}",
            el / 60,
            el % 60,
            left as u64 / 60,
            left as u64 % 60
        );
        self.planned_done += planned;
    }
}

/// Allocates loopback ports: consecutive from `--port`, or free ones from the kernel.
struct Ports {
    next: Option<u16>,
}

impl Ports {
    fn take(&mut self) -> anyhow::Result<u16> {
        match self.next {
            Some(p) => {
                check_port_free(p)?;
                self.next = p.checked_add(1);
                Ok(p)
            }
            None => Ok(std::net::TcpListener::bind("127.0.0.1:0")?
                .local_addr()?
                .port()),
        }
    }
}

fn check_port_free(p: u16) -> anyhow::Result<()> {
    if std::net::TcpListener::bind(("127.0.0.1", p)).is_err() {
        bail!(
            "port {p} on 127.0.0.1 is busy (another server is listening there); \
             pass a free one with --port N, or leave --port out to use free ports"
        );
    }
    Ok(())
}

/// A directory removed (with everything in it) when dropped, unless kept.
struct DirGuard {
    path: PathBuf,
    keep: bool,
}

impl Drop for DirGuard {
    fn drop(&mut self) {
        if self.keep {
            eprintln!("kept {}", self.path.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

fn make_dir(path: PathBuf, keep: bool) -> anyhow::Result<DirGuard> {
    let _ = std::fs::remove_dir_all(&path);
    create_open_dir(&path)?;
    Ok(DirGuard { path, keep })
}

/// Creates a directory traversable by the unprivileged PostgreSQL user.
fn create_open_dir(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path).with_context(|| format!("cannot create {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
    Ok(())
}

struct Ctx {
    tools: Tools,
    plan: Plan,
    ports: Ports,
    progress: Progress,
    work: PathBuf,
    shm: PathBuf,
    charts: PathBuf,
    /// Charts written, by file name, for the report.
    chart_files: Vec<PathBuf>,
}

/// Finds a client program: explicit path, else in --pg-bin, else on PATH.
/// The `walrus` server binary: `--walrus-bin`, else the one cargo built beside this
/// binary.
fn walrus_binary(explicit: &Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let path = match explicit {
        Some(p) => p.clone(),
        None => std::env::current_exe()
            .context("cannot find walrus-bench's own path")?
            .with_file_name("walrus"),
    };
    if !path.is_file() {
        bail!(
            "the walrus server binary {} does not exist: build it first (cargo build --release \
             -p walrus), or pass --walrus-bin PATH",
            path.display()
        );
    }
    Ok(path)
}

fn find_tool(explicit: &Option<PathBuf>, pg_bin: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let candidates: Vec<PathBuf> = match explicit {
        Some(p) => vec![p.clone()],
        None => vec![pg_bin.join(name), PathBuf::from(name)],
    };
    for c in &candidates {
        let ok = Command::new(c)
            .arg("--version")
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if ok {
            return Ok(c.clone());
        }
    }
    bail!(
        "{name} not found (tried {}): install PostgreSQL 15's client tools \
         (Debian: apt-get install postgresql-client-15) or pass --{name} PATH",
        candidates
            .iter()
            .map(|c| c.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn preflight(a: &CompareArgs) -> anyhow::Result<(PathBuf, PathBuf)> {
    for bin in ["initdb", "postgres"] {
        if !a.pg_bin.join(bin).is_file() {
            bail!(
                "PostgreSQL 15 server binaries not found: {} is missing. Install Debian's \
                 postgresql-15 (apt-get install postgresql-15), or pass --pg-bin DIR with the \
                 directory holding initdb and postgres",
                a.pg_bin.join(bin).display()
            );
        }
    }
    let pgbench = find_tool(&a.pgbench, &a.pg_bin, "pgbench")?;
    let psql = find_tool(&a.psql, &a.pg_bin, "psql")?;
    if let Some(p) = a.port {
        check_port_free(p)?;
    }
    if !Path::new("/proc/self/io").exists() {
        bail!("/proc/PID/io is not available (Linux with task I/O accounting is needed)");
    }
    Ok((pgbench, psql))
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

pub fn run(a: CompareArgs) -> anyhow::Result<()> {
    process::install_signal_handler();
    let plan = Plan::from_args(&a)?;
    let (pgbench, psql) = preflight(&a)?;
    let tag = std::process::id();
    let work = make_dir(a.work_dir.join(format!("walrus-bench-{tag}")), a.keep)?;
    let shm = DirGuard {
        path: PathBuf::from(format!("/dev/shm/walrus-bench-{tag}")),
        keep: false,
    };
    let scratch = work.path.join("scratch");
    std::fs::create_dir_all(&scratch)?;
    let pg_user = if is_root() {
        Some(postgres::ensure_pg_user(&a.pg_user, &scratch)?)
    } else {
        None
    };
    let socket_dir = if a.transport == "unix" {
        // Both servers create their socket here: PostgreSQL runs as pg_user.
        use std::os::unix::fs::PermissionsExt;
        let dir = work.path.join("sockets");
        std::fs::create_dir_all(&dir)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))?;
        Some(dir)
    } else {
        None
    };
    let tools = Tools {
        pg_bin: a.pg_bin.clone(),
        pgbench,
        psql,
        walrus: walrus_binary(&a.walrus_bin)?,
        scratch,
        pg_user,
        socket_dir,
    };
    let charts = a
        .charts
        .clone()
        .unwrap_or_else(|| a.out.parent().unwrap_or(Path::new("")).join("bench-charts"));
    let planned_total: f64 = plan.scenarios.iter().map(|s| plan.estimate(s)).sum();
    let mut ctx = Ctx {
        tools,
        plan: plan.clone(),
        ports: Ports { next: a.port },
        progress: Progress {
            start: Instant::now(),
            planned_total: planned_total + if plan.quick { 1.0 } else { 3.0 },
            planned_done: 0.0,
        },
        work: work.path.clone(),
        shm: shm.path.clone(),
        charts,
        chart_files: Vec::new(),
    };
    ctx.progress.step(
        "measuring fdatasync ops/s on the work directory's disk",
        if plan.quick { 1.0 } else { 3.0 },
    );
    let fsync_rate = crate::micro::raw_fdatasync_ops(
        &ctx.work,
        Duration::from_secs(if plan.quick { 1 } else { 3 }),
    )?;
    let _ = std::fs::remove_file(ctx.work.join("raw"));
    let mut sections = Vec::new();
    for sc in &plan.scenarios {
        check_interrupt()?;
        let section = match *sc {
            "fpw" => scenario_fpw(&mut ctx)?,
            "insert" => scenario_insert(&mut ctx)?,
            "dwb" => scenario_dwb(&mut ctx)?,
            "eviction" => scenario_eviction(&mut ctx)?,
            "checkpoint" => scenario_checkpoint(&mut ctx)?,
            "recovery" => scenario_recovery(&mut ctx)?,
            "scaling" => scenario_scaling(&mut ctx)?,
            "bulk" => sqlwork::scenario_bulk(&mut ctx)?,
            "queries" => sqlwork::scenario_queries(&mut ctx)?,
            other => unreachable!("scenario {other} was validated"),
        };
        sections.push(section);
    }
    let head = header(&ctx, fsync_rate);
    let body = sections.join("\n");
    let render = |target: &Path| -> String {
        let dir = target.parent().unwrap_or(Path::new(""));
        let mut text = format!("{head}\n{body}");
        for c in &ctx.chart_files {
            let name = c.file_name().map(|n| n.to_string_lossy().to_string());
            if let Some(name) = name {
                text = text.replace(&format!("{{{{chart:{name}}}}}"), &relative(c, dir));
            }
        }
        text
    };
    std::fs::write(&a.out, render(&a.out))
        .with_context(|| format!("cannot write {}", a.out.display()))?;
    eprintln!("report written to {}", a.out.display());
    if let Some(app) = &a.append {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(app)
            .with_context(|| format!("cannot append to {}", app.display()))?;
        write!(f, "\n{}", render(app))?;
        eprintln!("report appended to {}", app.display());
    }
    drop(shm);
    drop(work);
    Ok(())
}

/// `path` relative to `dir` when it lies below it, else as given.
fn relative(path: &Path, dir: &Path) -> String {
    let abs = |p: &Path| {
        std::fs::canonicalize(if p.as_os_str().is_empty() {
            Path::new(".")
        } else {
            p
        })
        .unwrap_or_else(|_| p.to_path_buf())
    };
    let (p, d) = (abs(path), abs(dir));
    p.strip_prefix(&d)
        .map(|r| r.display().to_string())
        .unwrap_or_else(|_| p.display().to_string())
}

fn first_line_with(path: &str, key: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()?
        .lines()
        .find(|l| l.starts_with(key))
        .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
}

/// Device and file system holding `dir` (longest matching mount point).
fn disk_of(dir: &Path) -> String {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let best = mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 3 && dir.starts_with(f[1])).then(|| (f[0], f[1], f[2]))
        })
        .max_by_key(|(_, m, _)| m.len());
    match best {
        Some((dev, _, fs)) => {
            let base = dev.rsplit('/').next().unwrap_or(dev);
            let rot = std::fs::read_to_string(format!("/sys/block/{base}/queue/rotational"))
                .map(|r| {
                    if r.trim() == "0" {
                        ", non-rotational"
                    } else {
                        ", rotational"
                    }
                })
                .unwrap_or("");
            format!("{dev} ({fs}{rot})")
        }
        None => "unknown".into(),
    }
}

fn header(ctx: &Ctx, fsync_rate: f64) -> String {
    let date = Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let cpu = first_line_with("/proc/cpuinfo", "model name").unwrap_or_default();
    let mem_gib = first_line_with("/proc/meminfo", "MemTotal")
        .and_then(|v| {
            v.split_whitespace()
                .next()
                .and_then(|n| n.parse::<f64>().ok())
        })
        .map(|kb| kb / 1048576.0)
        .unwrap_or(0.0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let rev = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| format!(" at commit {}", String::from_utf8_lossy(&o.stdout).trim()))
        .unwrap_or_default();
    let p = &ctx.plan;
    format!(
        "## walrus-bench compare: PostgreSQL 15 vs walrus ({date})\n\n\
         Command: `walrus-bench {}`\n\n\
         Machine: {cores} cores ({cpu}), {mem_gib:.0} GiB memory, data on {}, Linux {}; \
         8 KiB pwrite+fdatasync on that disk: **{fsync_rate:.0} ops/s** (measured in this run).\n\
         PostgreSQL {} ({}); walrus {} build{rev}.\n\n\
         Method: each configuration has its own data directory and loopback port; clients \
         (pgbench, psql) reach both servers over {}. These \
         settings are written explicitly on both systems: `shared_buffers = 128MB`, `fsync = on`, \
         `synchronous_commit = on`, `wal_sync_method = fdatasync`, `max_connections = 200`, plus \
         `max_wal_size`/`checkpoint_timeout` and page protection per scenario (PostgreSQL \
         `full_page_writes`, walrus `page_protection`). Each measured run: start the server, \
         {} s warm-up, `CHECKPOINT`, {} s of `pgbench -M prepared -j 2 -P 1 -l`, graceful stop; \
         {} repetition(s), the order of configurations alternating between repetitions; \
         values are median (min–max). Latency percentiles come from pgbench's per-transaction \
         log. WAL bytes: `pg_wal_lsn_diff` of `pg_current_wal_lsn()` after and before the run; \
         full-page images: `pg_stat_wal`; data pages written: `pg_stat_bgwriter` \
         (`buffers_checkpoint + buffers_clean + buffers_backend`); checkpoints: the servers' \
         own log lines (`log_checkpoints`). Bytes the disk wrote: sectors written by the \
         machine's disks (`/sys/block/*/stat`) over the run, journal included — the number \
         to compare. Bytes written and CPU: `/proc/PID/io` \
         `write_bytes` (all files, WAL and data, charged per page-cache folio dirtied, so a \
         small write into a file cached in large folios is charged the whole folio: it \
         overstates walrus's zero-filled WAL segments many times) and `/proc/PID/stat` \
         utime+stime, read before and after the run for the server process (walrus) or the \
         postmaster and its live children (PostgreSQL); backends that exit are included \
         because Linux adds a reaped child's counters to its parent (`cutime`, `cstime`, \
         and `/proc/PID/io`). \"n/a\": the server did not \
         answer that statistics query. Ratios are walrus / PostgreSQL: above 1 is better for \
         TPS, worse for latency, bytes and CPU.\n",
        args.join(" "),
        disk_of(&ctx.work),
        kernel.trim(),
        postgres::version(&ctx.tools),
        ctx.tools.pg_bin.display(),
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        ctx.tools.transport(),
        p.warmup,
        p.duration,
        p.reps,
    )
}

/// How a data directory is filled before the runs.
#[derive(Clone, Copy)]
enum Setup {
    /// `pgbench -i -s SCALE`.
    Pgbench,
    /// The insert scenario's table.
    InsertTable,
    /// Nothing: the scenario fills the database itself.
    Empty,
}

/// Creates, fills and stops one configuration's server; moves its WAL to tmpfs if asked.
/// [`prepare`] for each of a scenario's variants, in order.
fn prepare_all(
    ctx: &mut Ctx,
    scenario: &str,
    variants: &[Variant],
    setup: Setup,
) -> anyhow::Result<Vec<Server>> {
    variants
        .iter()
        .map(|v| prepare(ctx, scenario, v, setup))
        .collect()
}

fn prepare(ctx: &mut Ctx, scenario: &str, v: &Variant, setup: Setup) -> anyhow::Result<Server> {
    check_interrupt()?;
    let est = match setup {
        Setup::Pgbench => ctx.plan.init_estimate(),
        Setup::InsertTable | Setup::Empty => 4.0,
    };
    ctx.progress.step(
        &format!("{scenario}: initialise {} {}", v.system.name(), v.label),
        est,
    );
    let port = ctx.ports.take()?;
    let slug: String = v
        .label
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let root = ctx
        .work
        .join(format!("{scenario}-{}-{slug}", v.system.name()));
    let mut s = Server::create(&ctx.tools, v, &root, port)?;
    // The pmem method refuses a WAL that is not on (forced) persistent memory, so its WAL
    // moves to tmpfs before the first start; the others are loaded on disk first.
    let move_first = v.settings.pmem_forced;
    assert!(
        !move_first || v.settings.wal_on_tmpfs,
        "pmem runs on tmpfs here"
    );
    if move_first {
        move_wal(ctx, &mut s)?;
    }
    s.start(START_LIMIT)?;
    if s.system == System::Postgres {
        s.query_postgres_db("create database bench")?;
    }
    match setup {
        Setup::Pgbench => pgbench::initialize(&ctx.tools, port, ctx.plan.scale)?,
        Setup::InsertTable => {
            s.query("create table ins (id int8, value text)")?;
        }
        Setup::Empty => {}
    }
    s.stop()?;
    if v.settings.wal_on_tmpfs && !move_first {
        move_wal(ctx, &mut s)?;
    }
    Ok(s)
}

fn move_wal(ctx: &Ctx, s: &mut Server) -> anyhow::Result<()> {
    if !ctx.shm.exists() {
        create_open_dir(&ctx.shm)?;
    }
    s.move_wal_to_tmpfs(&ctx.shm)
}

fn variant(system: System, label: &str, settings: &Settings) -> Variant {
    Variant {
        system,
        label: label.into(),
        settings: settings.clone(),
    }
}

/// Runs `reps` measured runs of every server, alternating the order.
fn measure_all(
    ctx: &mut Ctx,
    scenario: &str,
    servers: &mut [Server],
    o: &Options,
) -> anyhow::Result<Vec<Vec<Measurement>>> {
    let n = servers.len();
    let mut results = vec![Vec::new(); n];
    for (rep, i) in alternating(ctx.plan.reps, n) {
        check_interrupt()?;
        let s = &mut servers[i];
        ctx.progress.step(
            &format!(
                "{scenario}: {} {} rep {}/{}, {} clients, {} s warm-up + {} s",
                s.system.name(),
                s.label,
                rep + 1,
                ctx.plan.reps,
                o.clients,
                ctx.plan.warmup,
                o.seconds
            ),
            ctx.plan.run_estimate(),
        );
        s.start(START_LIMIT)?;
        let m = measure::warm_and_measure(
            &ctx.tools,
            s,
            o,
            ctx.plan.warmup,
            &ctx.work.join("pgbench"),
        )?;
        s.stop()?;
        if m.bench.failed > 0 {
            eprintln!("  note: {} failed transactions", m.bench.failed);
        }
        results[i].push(m);
    }
    Ok(results)
}

fn chart_path(ctx: &mut Ctx, name: &str) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(&ctx.charts)
        .with_context(|| format!("cannot create {}", ctx.charts.display()))?;
    let p = ctx.charts.join(name);
    ctx.chart_files.push(p.clone());
    Ok(p)
}

fn tps_spread(runs: &[Measurement]) -> Option<Spread> {
    spread(runs, &LOAD_METRICS[0])
}

/// fpw (PolarDB paper): tpcb-like, 16 clients, frequent checkpoints; page images on/off.
fn scenario_fpw(ctx: &mut Ctx) -> anyhow::Result<String> {
    let max_wal = if ctx.plan.quick { "32MB" } else { "64MB" };
    let mut on = Settings::new(max_wal, "30s");
    on.page_images = true;
    let mut off = on.clone();
    off.page_images = false;
    let variants = [
        variant(System::Postgres, "full_page_writes=on", &on),
        variant(System::Walrus, "page_protection=fpw", &on),
        variant(System::Postgres, "full_page_writes=off", &off),
        variant(System::Walrus, "page_protection=none", &off),
    ];
    let mut servers = prepare_all(ctx, "fpw", &variants, Setup::Pgbench)?;
    let o = Options {
        workload: Workload::TpcbLike,
        clients: 16,
        seconds: ctx.plan.duration,
        detailed: true,
    };
    let r = measure_all(ctx, "fpw", &mut servers, &o)?;
    drop(servers);
    let mut s = format!(
        "### fpw: full-page images under frequent checkpoints (seed: PolarDB, FPW off +30 %)\n\n\
         pgbench tpcb-like, scale {}, 16 clients, `-M prepared`; `checkpoint_timeout = 30s`, \
         `max_wal_size = {max_wal}`, so checkpoints (and the page images after each) are \
         frequent.\n\n#### page images on: `full_page_writes = on` vs `page_protection = fpw`\n\n{}\n\
         #### page images off: `full_page_writes = off` vs `page_protection = none`\n\n{}\n",
        ctx.plan.scale,
        pair_table(&variants[0].label, &r[0], &variants[1].label, &r[1]),
        pair_table(&variants[2].label, &r[2], &variants[3].label, &r[3]),
    );
    let rows: Vec<Vec<String>> = [&LOAD_METRICS[0], &LOAD_METRICS[3], &LOAD_METRICS[5]]
        .iter()
        .map(|m| {
            vec![
                m.name.to_string(),
                ratio(spread(&r[2], m), spread(&r[0], m)),
                ratio(spread(&r[3], m), spread(&r[1], m)),
            ]
        })
        .collect();
    s.push_str(&format!(
        "#### turning page images off, each system against itself\n\n{}\n",
        table(
            &[
                "metric".into(),
                "PostgreSQL off / on".into(),
                "walrus none / fpw".into()
            ],
            &rows
        )
    ));
    let series: Vec<chart::Series> = variants
        .iter()
        .zip(&r)
        .filter_map(|(v, runs)| {
            median_run(runs).map(|m| chart::Series {
                name: format!("{} {}", v.system.name(), v.label),
                points: chart::per_second(&m.bench.per_second_tps),
            })
        })
        .collect();
    let path = chart_path(ctx, "fpw-tps.svg")?;
    chart::line_chart(
        &path,
        "fpw: per-second TPS (median run), checkpoint_timeout=30s",
        "seconds",
        "TPS",
        &series,
        &[],
    )?;
    s.push_str("![fpw: per-second TPS]({{chart:fpw-tps.svg}})\n");
    Ok(s)
}

/// The four page-protection configurations the dwb and eviction scenarios compare, on
/// `base`'s settings: PostgreSQL with page images, walrus dwb, fpw and none, measured
/// under tpcb-like with 16 clients. Returns the three tables: PostgreSQL vs dwb, none vs
/// dwb (the cost of dwb), fpw vs dwb.
fn protection_tables(
    ctx: &mut Ctx,
    scenario: &str,
    base: &Settings,
) -> anyhow::Result<[String; 3]> {
    let fpw = base.clone();
    let mut dwb = base.clone();
    dwb.double_write = true;
    let mut none = base.clone();
    none.page_images = false;
    let variants = [
        variant(System::Postgres, "full_page_writes=on", &fpw),
        variant(System::Walrus, "page_protection=dwb", &dwb),
        variant(System::Walrus, "page_protection=fpw", &fpw),
        variant(System::Walrus, "page_protection=none", &none),
    ];
    let mut servers = prepare_all(ctx, scenario, &variants, Setup::Pgbench)?;
    let o = Options {
        workload: Workload::TpcbLike,
        clients: 16,
        seconds: ctx.plan.duration,
        detailed: true,
    };
    let r = measure_all(ctx, scenario, &mut servers, &o)?;
    drop(servers);
    let walrus = |i: usize| ("walrus", variants[i].label.as_str(), r[i].as_slice());
    Ok([
        pair_table(&variants[0].label, &r[0], &variants[1].label, &r[1]),
        named_pair_table(walrus(3), walrus(1)),
        named_pair_table(walrus(2), walrus(1)),
    ])
}

/// dwb (the double-write paper): the fpw scenario's load, walrus's double-write buffer
/// against PostgreSQL with page images and walrus's own fpw and none.
fn scenario_dwb(ctx: &mut Ctx) -> anyhow::Result<String> {
    let max_wal = if ctx.plan.quick { "32MB" } else { "64MB" };
    let [vs_pg, vs_none, vs_fpw] = protection_tables(ctx, "dwb", &Settings::new(max_wal, "30s"))?;
    Ok(format!(
        "### dwb: the double-write buffer instead of page images (seed: batched double writes)\n\n\
         pgbench tpcb-like, scale {}, 16 clients, `-M prepared`; `checkpoint_timeout = 30s`, \
         `max_wal_size = {max_wal}` (frequent checkpoints, as in the fpw scenario). walrus \
         `dwb` writes every data page through batches of 64 in the double-write file (one \
         write + sync per batch, then the pages home and their files synced) and logs no page \
         images.\n\n#### PostgreSQL with page images vs walrus dwb\n\n{vs_pg}\n\
         #### walrus dwb vs walrus none (no protection: the cost of dwb)\n\n{vs_none}\n\
         #### walrus dwb vs walrus fpw\n\n{vs_fpw}\n",
        ctx.plan.scale,
    ))
}

/// eviction (seed 002's collapse case): a working set several times shared_buffers, so
/// nearly every transaction evicts a dirty page; walrus dwb must not fall the way the
/// seed's single-page double writes did.
fn scenario_eviction(ctx: &mut Ctx) -> anyhow::Result<String> {
    let base_scale = ctx.plan.scale;
    let scale = base_scale * 5;
    let mut base = Settings::new("1GB", "5min");
    base.shared_buffers = "16MB".into();
    ctx.plan.scale = scale;
    let tables = protection_tables(ctx, "eviction", &base);
    ctx.plan.scale = base_scale;
    let [vs_pg, vs_none, vs_fpw] = tables?;
    Ok(format!(
        "### eviction: a working set far larger than shared_buffers (seed 002's collapse case)\n\n\
         pgbench tpcb-like, scale {scale} (about {} MB of accounts), `shared_buffers = 16MB`, \
         16 clients, `-M prepared`, `checkpoint_timeout = 5min`, `max_wal_size = 1GB`: nearly \
         every transaction needs a page that is not resident, and backends never write one \
         (walrus page writers clean ahead of the clock; dwb writes them in batches).\n\n\
         #### walrus dwb vs walrus none (the cost of dwb under eviction)\n\n{vs_none}\n\
         #### PostgreSQL with page images vs walrus dwb\n\n{vs_pg}\n\
         #### walrus dwb vs walrus fpw\n\n{vs_fpw}\n",
        scale * 16 / 10,
    ))
}

/// The label of every result whose WAL was on tmpfs.
const NON_DURABLE: &str =
    "non-durable: measures the syscall and page-cache savings, not persistence";

/// insert (pmem WAL paper): 1 KiB-row inserts, 32 clients; WAL on disk and on tmpfs,
/// and walrus's `wal_sync_method = pmem` on tmpfs (forced), then one client alone.
fn scenario_insert(ctx: &mut Ctx) -> anyhow::Result<String> {
    let disk = Settings::new("1GB", "5min");
    let mut shm = disk.clone();
    shm.wal_on_tmpfs = true;
    let mut asynchronous = disk.clone();
    asynchronous.synchronous_commit = false;
    let mut pmem = shm.clone();
    pmem.pmem_forced = true;
    let mut variants = vec![
        variant(System::Postgres, "WAL on disk", &disk),
        variant(System::Walrus, "WAL on disk", &disk),
        variant(System::Postgres, "WAL on tmpfs", &shm),
        variant(System::Walrus, "WAL on tmpfs", &shm),
        variant(System::Postgres, "synchronous_commit=off", &asynchronous),
        variant(System::Walrus, "synchronous_commit=off", &asynchronous),
    ];
    // The pmem rows need libpmem; without it the rest of the scenario still runs.
    let libpmem = walrus_engine::wal::pmem::Pmem::load(walrus_engine::wal::pmem::LIBRARY_DEFAULT);
    if libpmem.is_ok() {
        variants.push(variant(System::Walrus, "pmem, WAL on tmpfs", &pmem));
    }
    let script = ctx.work.join("insert.sql");
    std::fs::write(
        &script,
        "\\set id random(1, 1000000000)\n\
         insert into ins (id, value) values (:id, repeat('x', 1024));\n",
    )?;
    let mut servers = prepare_all(ctx, "insert", &variants, Setup::InsertTable)?;
    let o = Options {
        workload: Workload::Script(script),
        clients: 32,
        seconds: ctx.plan.duration,
        detailed: true,
    };
    let r = measure_all(ctx, "insert", &mut servers, &o)?;
    let pmem_sections = match &libpmem {
        Ok(_) => {
            // One client alone: the latency of a one-row insert, walrus only (disk,
            // tmpfs, pmem).
            let mut alone = vec![servers.remove(6), servers.remove(3), servers.remove(1)];
            drop(servers);
            let one = Options {
                clients: 1,
                ..o.clone()
            };
            let single = measure_all(ctx, "insert-1-client", &mut alone, &one)?;
            drop(alone);
            pmem_insert_sections(&variants, &r, &single)
        }
        Err(e) => {
            drop(servers);
            format!("#### walrus `wal_sync_method = pmem`\n\nnot measured: {e}\n")
        }
    };
    let rows: Vec<Vec<String>> = [&LOAD_METRICS[0], &LOAD_METRICS[3]]
        .iter()
        .map(|m| {
            vec![
                m.name.to_string(),
                ratio(spread(&r[2], m), spread(&r[0], m)),
                ratio(spread(&r[3], m), spread(&r[1], m)),
            ]
        })
        .collect();
    Ok(format!(
        "### insert: 1 KiB rows, WAL on disk vs on tmpfs (seed: WAL on persistent memory, +94 %)\n\n\
         `CREATE TABLE ins (id int8, value text)`; each transaction is one \
         `INSERT ... VALUES (:id, repeat('x', 1024))` (custom `-f` script), 32 clients, \
         `-M prepared`; `max_wal_size = 1GB`, `checkpoint_timeout = 5min`. The tmpfs runs \
         replace the WAL directory (`pg_wal`, walrus `wal`) by a symlink to `/dev/shm` after \
         initialisation: the stand-in for persistent memory (its fdatasync costs nothing; \
         non-durable). The asynchronous rows keep the WAL on disk with \
         `synchronous_commit = off` on both systems (PostgreSQL's walwriter and walrus's WAL \
         writer at `wal_writer_delay = 200ms`: a crash may lose the last ~600 ms of commits).\n\n\
         #### WAL on disk\n\n{}\n#### WAL on tmpfs ({NON_DURABLE})\n\n{}\n\
         #### synchronous_commit = off, WAL on disk\n\n{}\n\
         #### moving the WAL to tmpfs, each system against itself\n\n{}\n{pmem_sections}",
        pair_table(&variants[0].label, &r[0], &variants[1].label, &r[1]),
        pair_table(&variants[2].label, &r[2], &variants[3].label, &r[3]),
        pair_table(&variants[4].label, &r[4], &variants[5].label, &r[5]),
        table(
            &[
                "metric".into(),
                "PostgreSQL tmpfs / disk".into(),
                "walrus tmpfs / disk".into()
            ],
            &rows
        ),
    ))
}

/// The insert scenario's pmem tables: 32 clients against walrus fdatasync on disk and on
/// tmpfs (`r`, indexed like `variants`), then one client (`single`: pmem, tmpfs, disk).
fn pmem_insert_sections(
    variants: &[Variant],
    r: &[Vec<Measurement>],
    single: &[Vec<Measurement>],
) -> String {
    format!(
        "#### walrus `wal_sync_method = pmem` (libpmem, `PMEM_IS_PMEM_FORCE=1`, WAL on tmpfs; \
         {NON_DURABLE}) vs fdatasync, WAL on disk\n\n{}\n\
         #### walrus pmem vs fdatasync, both WAL on tmpfs ({NON_DURABLE}): what the \
         method itself buys\n\n{}\n\
         #### 1 client: one-row insert latency, walrus\n\n\
         pmem and the tmpfs row: {NON_DURABLE}.\n\n{}\n{}\n",
        named_pair_table(
            ("walrus", &variants[1].label, &r[1]),
            ("walrus", &variants[6].label, &r[6])
        ),
        named_pair_table(
            ("walrus", &variants[3].label, &r[3]),
            ("walrus", &variants[6].label, &r[6])
        ),
        named_pair_table(
            ("walrus", &variants[1].label, &single[2]),
            ("walrus", &variants[6].label, &single[0])
        ),
        named_pair_table(
            ("walrus", &variants[3].label, &single[1]),
            ("walrus", &variants[6].label, &single[0])
        ),
    )
}

/// What the checkpoint scenario measures per run.
#[derive(Clone, Debug)]
struct CheckpointRun {
    m: Measurement,
    issued_at: f64,
    checkpoint_seconds: f64,
    tps_before: Option<f64>,
    tps_during: Option<f64>,
    /// The lowest 1-s TPS of the run over its median (after the first second).
    lowest_over_median: Option<f64>,
    shutdown_seconds: f64,
}

/// The header of a table with one column per variant (PostgreSQL first), then each other
/// variant's ratio to PostgreSQL.
fn variants_header(variants: &[Variant]) -> Vec<String> {
    let mut header: Vec<String> = vec!["metric".into()];
    header.extend(
        variants
            .iter()
            .map(|v| format!("{} {}", v.system.name(), v.label)),
    );
    header.extend(
        variants[1..]
            .iter()
            .map(|v| format!("{} / PostgreSQL", v.label)),
    );
    header
}

/// One row of a [`variants_header`] table: each variant's spread, then the ratios.
fn variants_row(name: String, spreads: &[Option<Spread>], decimals: usize) -> Vec<String> {
    let mut row = vec![name];
    row.extend(spreads.iter().map(|s| show(*s, decimals)));
    row.extend(spreads[1..].iter().map(|s| ratio(*s, spreads[0])));
    row
}

/// Rows of per-run metrics (name, decimals, getter) over every variant's runs.
type RunMetric<'a, R> = (&'a str, usize, fn(&R) -> Option<f64>);

fn metric_rows<R>(runs: &[Vec<R>], metrics: &[RunMetric<'_, R>]) -> Vec<Vec<String>> {
    metrics
        .iter()
        .map(|(name, dec, get)| {
            let spreads: Vec<Option<Spread>> = runs
                .iter()
                .map(|r| Spread::of(&r.iter().map(get).collect::<Vec<_>>()))
                .collect();
            variants_row(name.to_string(), &spreads, *dec)
        })
        .collect()
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// Sleeps until `deadline`, polling for interrupts.
fn sleep_until(deadline: Instant) -> anyhow::Result<()> {
    while Instant::now() < deadline {
        check_interrupt()?;
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// checkpoint (MogDB incremental checkpoint): an explicit CHECKPOINT with many dirty pages
/// in the middle of a tpcb-like load, then a shutdown.
fn scenario_checkpoint(ctx: &mut Ctx) -> anyhow::Result<String> {
    let settings = Settings::new("16GB", "60min");
    let mut classic = settings.clone();
    classic.double_write = true;
    classic
        .walrus_extra
        .push(("incremental_checkpoint".into(), "\"off\"".into()));
    // A small recovery budget (2 s at the replay rate `walrus init` calibrated), so the
    // page writers are writing ahead of the CHECKPOINT.
    let mut incremental = settings.clone();
    incremental.double_write = true;
    incremental
        .walrus_extra
        .push(("recovery_time_target".into(), "\"2s\"".into()));
    let variants = [
        variant(System::Postgres, "full_page_writes=on", &settings),
        variant(System::Walrus, "page_protection=fpw", &settings),
        variant(System::Walrus, "dwb, incremental, 2s target", &incremental),
        variant(System::Walrus, "dwb, classic", &classic),
    ];
    let n = variants.len();
    let mut servers = prepare_all(ctx, "checkpoint", &variants, Setup::Pgbench)?;
    let seconds = ctx.plan.duration.max(4);
    let o = Options {
        workload: Workload::TpcbLike,
        clients: 16,
        seconds,
        detailed: true,
    };
    let dir = ctx.work.join("pgbench");
    let mut runs: Vec<Vec<CheckpointRun>> = vec![Vec::new(); n];
    for (rep, i) in alternating(ctx.plan.reps, n) {
        check_interrupt()?;
        let s = &mut servers[i];
        ctx.progress.step(
            &format!(
                "checkpoint: {} {} rep {}/{}: load {} s, CHECKPOINT at {} s, shutdown",
                s.system.name(),
                s.label,
                rep + 1,
                ctx.plan.reps,
                seconds,
                seconds / 2
            ),
            ctx.plan.run_estimate() + 5.0,
        );
        s.start(START_LIMIT)?;
        if ctx.plan.warmup > 0 {
            let w = Options {
                seconds: ctx.plan.warmup,
                detailed: false,
                ..o.clone()
            };
            pgbench::run(&ctx.tools, s.port, &w, &dir)?;
        }
        s.query("checkpoint")?;
        let probe = measure::Probe::begin(s);
        let running = pgbench::spawn(&ctx.tools, s.port, &o, &dir)?;
        sleep_until(running.started + Duration::from_secs(seconds / 2))?;
        let issued_at = running.started.elapsed().as_secs_f64();
        let t = Instant::now();
        s.query("checkpoint")?;
        let checkpoint_seconds = t.elapsed().as_secs_f64();
        let bench = running.finish()?;
        let m = probe.end(s, bench);
        let shutdown_seconds = s.stop()?.as_secs_f64();
        let ps = &m.bench.per_second_tps;
        let first = issued_at.floor() as usize;
        let last = (issued_at + checkpoint_seconds).ceil() as usize;
        let before: Vec<f64> = ps.iter().take(first).skip(1).copied().collect();
        let during: Vec<f64> = ps
            .iter()
            .take(last.min(ps.len()))
            .skip(first)
            .copied()
            .collect();
        // The worst second of the run against its median (after the first second).
        let mut steady: Vec<f64> = ps.iter().skip(1).copied().collect();
        steady.sort_by(f64::total_cmp);
        let lowest_over_median =
            (!steady.is_empty()).then(|| steady[0] / steady[steady.len() / 2].max(1e-9));
        runs[i].push(CheckpointRun {
            issued_at,
            checkpoint_seconds,
            tps_before: mean(&before),
            tps_during: mean(&during),
            lowest_over_median,
            shutdown_seconds,
            m,
        });
    }
    drop(servers);
    type Get = fn(&CheckpointRun) -> Option<f64>;
    let metrics: [(&str, usize, Get); 7] = [
        ("CHECKPOINT duration (s)", 2, |r| Some(r.checkpoint_seconds)),
        ("lowest 1-s TPS / median 1-s TPS", 2, |r| {
            r.lowest_over_median
        }),
        ("TPS before CHECKPOINT (mean of 1-s)", 0, |r| r.tps_before),
        ("TPS during CHECKPOINT (mean of 1-s)", 0, |r| r.tps_during),
        ("TPS during / before", 2, |r| {
            Some(r.tps_during? / r.tps_before?)
        }),
        ("shutdown after the load (s)", 2, |r| {
            Some(r.shutdown_seconds)
        }),
        ("data pages written (pg_stat_bgwriter)", 0, |r| {
            r.m.buffers_written
        }),
    ];
    let header = variants_header(&variants);
    let mut rows = metric_rows(&runs, &metrics);
    let load = |i: usize| -> Vec<Measurement> { runs[i].iter().map(|r| r.m.clone()).collect() };
    for m in [&LOAD_METRICS[0], &LOAD_METRICS[3], &LOAD_METRICS[5]] {
        let spreads: Vec<Option<Spread>> = (0..n).map(|i| spread(&load(i), m)).collect();
        rows.push(variants_row(
            format!("whole run: {}", m.name),
            &spreads,
            m.decimals,
        ));
    }
    let mut s = format!(
        "### checkpoint: an explicit CHECKPOINT with many dirty pages, and a shutdown \
         (seed: MogDB incremental checkpoint)\n\n\
         pgbench tpcb-like, scale {}, 16 clients, `-M prepared`, {seconds} s; no checkpoint \
         during the load by itself on PostgreSQL and walrus `fpw` / `dwb, classic` \
         (`checkpoint_timeout = 60min`, `max_wal_size = 16GB`): their CHECKPOINT writes every \
         page dirtied since the warm-up, unspread (PostgreSQL's explicit CHECKPOINT is \
         immediate). walrus `dwb, incremental` has its page writers keep the redo lag under \
         `recovery_time_target = 2s` (at the replay rate `walrus init` calibrated) during the \
         load, so its CHECKPOINT may find fewer dirty pages: that is the mechanism being \
         measured, not a like-for-like flush. \
         `CHECKPOINT` is issued from another connection at {} s; after the load, a graceful \
         shutdown (which checkpoints again) is timed.\n\n{}\n",
        ctx.plan.scale,
        seconds / 2,
        table(&header, &rows)
    );
    let mut series = Vec::new();
    let mut markers = Vec::new();
    for (i, v) in variants.iter().enumerate() {
        let sys = &v.system;
        let ms: Vec<Measurement> = runs[i].iter().map(|r| r.m.clone()).collect();
        let Some(med) = median_run(&ms) else { continue };
        let run = runs[i]
            .iter()
            .find(|r| r.m.bench.tps == med.bench.tps)
            .expect("the median run is one of the runs");
        series.push(chart::Series {
            name: format!("{} {}", sys.name(), v.label),
            points: chart::per_second(&med.bench.per_second_tps),
        });
        markers.push(chart::Marker {
            name: format!("{} {} CHECKPOINT issued", sys.name(), v.label),
            x: run.issued_at,
            series_index: i,
        });
        markers.push(chart::Marker {
            name: format!("{} {} CHECKPOINT done", sys.name(), v.label),
            x: run.issued_at + run.checkpoint_seconds,
            series_index: i,
        });
    }
    let path = chart_path(ctx, "checkpoint-tps.svg")?;
    chart::line_chart(
        &path,
        "checkpoint: per-second TPS around an explicit CHECKPOINT (median run)",
        "seconds",
        "TPS",
        &series,
        &markers,
    )?;
    s.push_str("![checkpoint: per-second TPS]({{chart:checkpoint-tps.svg}})\n");
    Ok(s)
}

#[derive(Clone, Debug)]
struct RecoveryRun {
    load_tps: Option<f64>,
    wal_mb: Option<f64>,
    restart_seconds: f64,
    /// Seconds the load ran before the kill.
    load_seconds: f64,
    /// walrus with a target: its own estimate of the replay time just before the kill
    /// (`walrus_flush_detail()`).
    estimate_seconds: Option<f64>,
    /// walrus with a target: restart time over `recovery_time_target`.
    restart_over_target: Option<f64>,
}

/// The longest the recovery scenario loads a server with a `recovery_time_target`
/// while waiting for its redo lag to reach the target.
const RECOVERY_LOAD_LIMIT: Duration = Duration::from_secs(720);
/// ... or for its estimate to stop growing (the lag capped by something else).
const RECOVERY_PLATEAU: Duration = Duration::from_secs(60);

/// walrus's estimated replay time now (`walrus_flush_detail()`'s total row).
fn estimated_recovery_seconds(s: &Server) -> Option<f64> {
    s.query("select estimated_recovery_s from walrus_flush_detail() where thread = 'total'")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// recovery: load with rare checkpoints, kill -9, time from restart to accepting
/// connections, WAL replayed.
fn scenario_recovery(ctx: &mut Ctx) -> anyhow::Result<String> {
    let settings = Settings::new("16GB", "60min");
    // The target variants get a pool large enough to hold the dirty pages of the lag the
    // target allows (scale 10 is ~160 MB): with 128 MB, eviction writes the oldest pages
    // first and caps the lag at about a pool's worth of WAL (measured: 0.5 s of replay
    // after 10 minutes of load with a 10 s target).
    let target = |secs: u32| {
        let mut s = settings.clone();
        s.shared_buffers = "1GB".into();
        s.double_write = true;
        s.walrus_extra
            .push(("recovery_time_target".into(), format!("\"{secs}s\"")));
        s
    };
    let variants = [
        variant(System::Postgres, "full_page_writes=on", &settings),
        variant(System::Walrus, "page_protection=fpw", &settings),
        variant(System::Walrus, "dwb, recovery_time_target=10s", &target(10)),
        variant(System::Walrus, "dwb, recovery_time_target=2s", &target(2)),
    ];
    let targets: [Option<f64>; 4] = [None, None, Some(10.0), Some(2.0)];
    let n = variants.len();
    let mut servers = prepare_all(ctx, "recovery", &variants, Setup::Pgbench)?;
    let seconds = ctx.plan.duration;
    let o = Options {
        workload: Workload::TpcbLike,
        clients: 16,
        // Longer than the load: the server is killed under it.
        seconds: seconds + 600,
        detailed: true,
    };
    let dir = ctx.work.join("pgbench");
    let mut runs: Vec<Vec<RecoveryRun>> = vec![Vec::new(); n];
    for (rep, i) in alternating(ctx.plan.reps, n) {
        check_interrupt()?;
        let s = &mut servers[i];
        ctx.progress.step(
            &format!(
                "recovery: {} {} rep {}/{}: load {seconds} s, kill -9, restart",
                s.system.name(),
                s.label,
                rep + 1,
                ctx.plan.reps
            ),
            seconds as f64 + 10.0,
        );
        s.start(START_LIMIT)?;
        s.query("checkpoint")?;
        let before = measure::snapshot(s);
        let running = pgbench::spawn(&ctx.tools, s.port, &o, &dir)?;
        sleep_until(running.started + Duration::from_secs(seconds))?;
        // With a target, the kill comes in the steady state: once walrus's own estimate
        // of the replay is at 95% of the target or more (the page writers hold it at
        // 95–100% of the budget, which is the target less the restart's fixed part) or
        // stopped growing, however long the load needs to build that much
        // WAL. Killing earlier would measure a recovery the writers had not yet let
        // grow to the target.
        let mut estimate = None;
        if let Some(t) = targets[i] {
            // (highest estimate so far, when it was reached)
            let mut best = (0.0f64, Instant::now());
            loop {
                estimate = estimated_recovery_seconds(s);
                if let Some(e) = estimate.filter(|&e| e > best.0 * 1.02) {
                    best = (e, Instant::now());
                }
                if estimate.is_some_and(|e| e >= 0.95 * t)
                    || best.1.elapsed() >= RECOVERY_PLATEAU
                    || running.started.elapsed() >= RECOVERY_LOAD_LIMIT
                {
                    break;
                }
                check_interrupt()?;
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        let load_seconds = running.started.elapsed().as_secs_f64();
        s.kill9();
        let per_sec = running.abort();
        let restart = s.start(START_LIMIT)?;
        let after = measure::snapshot(s);
        let wal = measure::lsn_diff(s, &after.lsn, &before.lsn);
        s.stop()?;
        runs[i].push(RecoveryRun {
            load_tps: per_sec.get(1..).and_then(mean),
            wal_mb: wal.map(|b| b / 1048576.0),
            restart_seconds: restart.as_secs_f64(),
            load_seconds,
            estimate_seconds: estimate,
            restart_over_target: targets[i].map(|t| restart.as_secs_f64() / t),
        });
    }
    drop(servers);
    type Get = fn(&RecoveryRun) -> Option<f64>;
    let metrics: [(&str, usize, Get); 7] = [
        ("TPS of the load (mean of 1-s)", 0, |r| r.load_tps),
        ("load before the kill (s)", 0, |r| Some(r.load_seconds)),
        ("walrus's estimated replay before the kill (s)", 2, |r| {
            r.estimate_seconds
        }),
        ("restart / recovery_time_target", 2, |r| {
            r.restart_over_target
        }),
        (
            "WAL to replay (MB, LSN at restart − LSN of the checkpoint)",
            1,
            |r| r.wal_mb,
        ),
        ("restart to accepting connections (s)", 2, |r| {
            Some(r.restart_seconds)
        }),
        ("replay rate (MB/s of that time)", 1, |r| {
            Some(r.wal_mb? / r.restart_seconds)
        }),
    ];
    let header = variants_header(&variants);
    let rows = metric_rows(&runs, &metrics);
    Ok(format!(
        "### recovery: kill -9 under load, time to accept connections again\n\n\
         pgbench tpcb-like, scale {}, 16 clients, `-M prepared`; `CHECKPOINT` at the start, \
         then no checkpoint on PostgreSQL and walrus `fpw` (`checkpoint_timeout = 60min`, \
         `max_wal_size = 16GB`); walrus `dwb` checkpoints incrementally and its page \
         writers keep the estimated replay near `recovery_time_target` (the replay rate \
         `walrus init` calibrated until a recovery measured one: each rep's recovery \
         teaches the next; `shared_buffers = 1GB` for them, so the pool can hold the dirty \
         pages of that much lag). After {seconds} s — for walrus with a target, once its own \
         estimate (`walrus_flush_detail()`) reached 95% of the target, stopped growing for \
         {} s, or after {} s — every \
         process of the server gets SIGKILL; restart time is from spawning the server to \
         its first answer to `select 1` (crash recovery included). The faster system \
         generates more WAL in the same time, so compare the rate too.\n\n{}\n",
        ctx.plan.scale,
        RECOVERY_PLATEAU.as_secs(),
        RECOVERY_LOAD_LIMIT.as_secs(),
        table(&header, &rows)
    ))
}

/// scaling (CLOG group update paper): tpcb-like at 1..128 clients.
fn scenario_scaling(ctx: &mut Ctx) -> anyhow::Result<String> {
    let settings = Settings::new("1GB", "5min");
    let variants = [
        variant(System::Postgres, "full_page_writes=on", &settings),
        variant(System::Walrus, "page_protection=fpw", &settings),
    ];
    let mut servers = prepare_all(ctx, "scaling", &variants, Setup::Pgbench)?;
    let levels = ctx.plan.scaling_clients();
    let mut by_level: Vec<Vec<Vec<Measurement>>> = Vec::new();
    for &clients in &levels {
        let o = Options {
            workload: Workload::TpcbLike,
            clients,
            seconds: ctx.plan.duration,
            detailed: true,
        };
        by_level.push(measure_all(ctx, "scaling", &mut servers, &o)?);
    }
    drop(servers);
    let p99: &Metric = &LOAD_METRICS[3];
    let rows: Vec<Vec<String>> = levels
        .iter()
        .zip(&by_level)
        .map(|(c, r)| {
            let (a, b) = (tps_spread(&r[0]), tps_spread(&r[1]));
            vec![
                c.to_string(),
                show(a, 0),
                show(b, 0),
                ratio(b, a),
                show(spread(&r[0], p99), 2),
                show(spread(&r[1], p99), 2),
            ]
        })
        .collect();
    let mut s = format!(
        "### scaling: tpcb-like from 1 to {} clients (seed: CLOG group update)\n\n\
         pgbench tpcb-like, scale {}, `-M prepared`, `-j 2` (1 thread for 1 client); \
         `max_wal_size = 1GB`, `checkpoint_timeout = 5min`.\n\n{}\n",
        levels.last().copied().unwrap_or(0),
        ctx.plan.scale,
        table(
            &[
                "clients".into(),
                "PostgreSQL TPS".into(),
                "walrus TPS".into(),
                "walrus / PostgreSQL".into(),
                "PostgreSQL p99 (ms)".into(),
                "walrus p99 (ms)".into()
            ],
            &rows
        )
    );
    let series: Vec<chart::Series> = [System::Postgres, System::Walrus]
        .iter()
        .enumerate()
        .map(|(i, sys)| chart::Series {
            name: sys.name().into(),
            points: levels
                .iter()
                .zip(&by_level)
                .filter_map(|(c, r)| tps_spread(&r[i]).map(|t| (*c as f64, t.median)))
                .collect(),
        })
        .collect();
    let path = chart_path(ctx, "scaling-tps.svg")?;
    chart::line_chart(
        &path,
        "scaling: TPS (median) vs clients",
        "clients",
        "TPS",
        &series,
        &[],
    )?;
    s.push_str("![scaling: TPS vs clients]({{chart:scaling-tps.svg}})\n");
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::alternating;

    #[test]
    fn repetitions_alternate_the_order_of_configurations() {
        let order: Vec<(u32, usize)> = alternating(3, 2).collect();
        assert_eq!(order, [(0, 0), (0, 1), (1, 1), (1, 0), (2, 0), (2, 1)]);
        assert_eq!(alternating(0, 2).count(), 0);
    }
}
