//! `walrus-bench micro`: engine micro-benchmarks, each reported next to the baseline it
//! is judged against, measured in the same run (the machine is shared and noisy, so only
//! ratios are meaningful).

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use walrus_base::{Lsn, PageId, Tid, Xid};
use walrus_engine::access::btree::{BTree, UniqueCheck};
use walrus_engine::access::datum::{encode_key, Datum, TypeId};
use walrus_engine::catalog::ColumnDef;
use walrus_engine::engine::Isolation;
use walrus_engine::wal::record::{Rmgr, WalRecord};
use walrus_engine::wal::segment::{Segments, SyncMethod};
use walrus_engine::wal::{ImagePolicy, Wal, WalConfig};
use walrus_engine::Engine;

#[derive(clap::Args)]
pub struct MicroArgs {
    /// Scratch directory (on the disk to measure); removed afterwards.
    #[arg(long, default_value = "walrus-bench-tmp")]
    dir: PathBuf,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 3)]
    seconds: u64,
    /// Run only measurements whose name contains this (raw, commit, walinsert, buffer,
    /// recovery, pmem). `pmem` needs libpmem and `PMEM_IS_PMEM_FORCE=1` (it runs on
    /// /dev/shm: non-durable).
    #[arg(long)]
    only: Option<String>,
}

pub fn run(a: MicroArgs) -> anyhow::Result<()> {
    let _ = std::fs::remove_dir_all(&a.dir);
    std::fs::create_dir_all(&a.dir)?;
    let r = micro(&a.dir, Duration::from_secs(a.seconds), a.only.as_deref());
    let _ = std::fs::remove_dir_all(&a.dir);
    r
}

fn micro(dir: &Path, secs: Duration, only: Option<&str>) -> anyhow::Result<()> {
    let want = |name: &str| only.is_none_or(|o| name.contains(o));
    println!("| measurement | value | baseline (same run) | ratio |");
    println!("|---|---|---|---|");
    let raw = raw_fdatasync_ops(dir, secs)?;
    println!("| raw 8 KiB pwrite+fdatasync | {raw:.0} ops/s | — | — |");
    if want("walinsert") {
        let gbps = wal_insert_rate(&dir.join("walins"), 2, secs)?;
        println!("| WAL insert, 100-byte records, 2 threads, no sync | {gbps:.2} GB/s | target 1 GB/s | {gbps:.2}× |");
    }
    if want("buffer") {
        let (hit_ns, lookup_ns) = buffer_and_btree(&dir.join("bt"), secs)?;
        println!("| buffer-pool hit (pin + shared latch + unpin) | {hit_ns:.0} ns/op | — | — |");
        println!(
            "| B-tree point lookup, in cache (100k keys) | {lookup_ns:.0} ns/op | buffer hit {hit_ns:.0} ns | {:.1}× |",
            lookup_ns / hit_ns
        );
    }
    if want("recovery") {
        let (mb, records, secs_replay) = recovery_rate(&dir.join("rec"))?;
        println!(
            "| recovery replay | {:.1} MB/s, {:.0}k records/s ({mb:.1} MB in {secs_replay:.2} s) | — | — |",
            mb / secs_replay.max(1e-9),
            records / 1e3 / secs_replay.max(1e-9)
        );
    }
    if want("pmem") {
        pmem_commits(secs)?;
    }
    if !want("commit") {
        return Ok(());
    }
    // The group-commit ceiling on this kind of machine: the same raw loop while one other
    // thread keeps a CPU busy. On a small VM whose virtual disk is served by host threads
    // that compete with the vCPUs, a busy vCPU slows every sync; with 16 committers some
    // CPU work always overlaps the sync, while a lone committer's sync runs on idle CPUs.
    let raw_busy = raw_fdatasync_ops_with_busy_cpu(dir, secs)?;
    println!(
        "| raw 8 KiB pwrite+fdatasync, another thread spinning | {raw_busy:.0} ops/s | idle {raw:.0}/s | {:.2}× |",
        raw_busy / raw
    );
    let (c1, rss1, _) = commits_per_sec(&dir.join("gc1"), 1, secs)?;
    let (c16, rss16, syncs16) = commits_per_sec(&dir.join("gc16"), 16, secs)?;
    println!(
        "| group commit, 1 thread | {c1:.0} commits/s | raw fdatasync {raw:.0}/s | {:.2}× |",
        c1 / raw
    );
    println!(
        "| group commit, 16 threads | {c16:.0} commits/s | 1 thread {c1:.0}/s | {:.2}× |",
        c16 / c1
    );
    println!("| group commit, 16 threads vs raw fdatasync | {c16:.0} commits/s | raw {raw:.0}/s | {:.2}× |", c16 / raw);
    println!(
        "| group commit, 16 threads: WAL syncs | {syncs16:.0} syncs/s | {:.1} commits per sync | — |",
        c16 / syncs16.max(1.0)
    );

    let shared = 16.0 * 1024.0 * 8192.0 / 1048576.0;
    println!(
        "| resident memory during the commit runs, shared_buffers = 128 MB (pool pages are faulted in when first used) | {:.0} MB (1 thr) / {:.0} MB (16 thr) | shared_buffers {shared:.0} MB | {:+.0} MB |",
        rss1, rss16, rss16.max(rss1) - shared
    );
    Ok(())
}

pub(crate) fn raw_fdatasync_ops(dir: &Path, secs: Duration) -> anyhow::Result<f64> {
    let path = dir.join("raw");
    let f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)?;
    f.set_len(64 << 20)?;
    f.sync_all()?;
    let buf = vec![7u8; 8192];
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < secs {
        f.write_all_at(&buf, (n % 4096) * 8192)?;
        f.sync_data()?;
        n += 1;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// [`raw_fdatasync_ops`] while one other thread spins (no syscalls, no memory traffic).
fn raw_fdatasync_ops_with_busy_cpu(dir: &Path, secs: Duration) -> anyhow::Result<f64> {
    let stop = Arc::new(AtomicBool::new(false));
    let spinner = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        })
    };
    let r = raw_fdatasync_ops(dir, secs);
    stop.store(true, Ordering::Relaxed);
    spinner
        .join()
        .map_err(|_| anyhow::anyhow!("spinner panicked"))?;
    r
}

fn rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .map(|l| l.to_string())
        })
        .and_then(|l| {
            l.split_whitespace()
                .nth(1)
                .and_then(|v| v.parse::<f64>().ok())
        })
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

/// Group commit with `wal_sync_method = pmem` against fdatasync, both with the WAL on
/// /dev/shm (tmpfs, forced: non-durable), at 1 and 16 threads; and how long the flush
/// leader's copy into the mapping plus drain takes per drain (what making the WAL
/// buffer the mapping could save at most).
fn pmem_commits(secs: Duration) -> anyhow::Result<()> {
    use walrus_engine::wal::pmem::{Pmem, LIBRARY_DEFAULT};
    if !Pmem::forced() {
        println!("| pmem | skipped: set PMEM_IS_PMEM_FORCE=1 (the WAL goes to /dev/shm) | — | — |");
        return Ok(());
    }
    Pmem::load(LIBRARY_DEFAULT)?;
    let shm = PathBuf::from(format!("/dev/shm/walrus-micro-pmem-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&shm);
    std::fs::create_dir_all(&shm)?;
    let result = (|| -> anyhow::Result<()> {
        for threads in [1usize, 16] {
            let fd = commits_with(
                &shm.join(format!("fd{threads}")),
                threads,
                secs,
                "fdatasync",
            )?;
            let pm = commits_with(&shm.join(format!("pm{threads}")), threads, secs, "pmem")?;
            println!(
                "| group commit, {threads} thread(s), WAL on tmpfs (non-durable): pmem (forced) | {:.0} commits/s | fdatasync on tmpfs {:.0}/s | {:.2}× |",
                pm.rate, fd.rate, pm.rate / fd.rate
            );
            println!(
                "| pmem, {threads} thread(s): copy into the mapping + drain | {:.1} µs per drain, {:.0} B per drain | {:.1} commits per drain | — |",
                pm.copy_ns_per_drain / 1e3,
                pm.bytes_per_drain,
                pm.rate / pm.drains_per_sec.max(1.0)
            );
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&shm);
    result
}

/// What one commit run measured.
struct CommitRun {
    rate: f64,
    rss_mb: f64,
    syncs_per_sec: f64,
    drains_per_sec: f64,
    copy_ns_per_drain: f64,
    bytes_per_drain: f64,
}

/// Commits/s of one-row insert transactions from `threads` threads, with the resident
/// memory at the end and the WAL syncs/s the run needed.
fn commits_per_sec(dir: &Path, threads: usize, secs: Duration) -> anyhow::Result<(f64, f64, f64)> {
    let r = commits_with(dir, threads, secs, "fdatasync")?;
    Ok((r.rate, r.rss_mb, r.syncs_per_sec))
}

/// [`commits_per_sec`] with the given `wal_sync_method`.
fn commits_with(
    dir: &Path,
    threads: usize,
    secs: Duration,
    method: &str,
) -> anyhow::Result<CommitRun> {
    let config = walrus_engine::settings::default_config_text(16 << 20).replace(
        "wal_sync_method = \"fdatasync\"",
        &format!("wal_sync_method = \"{method}\""),
    );
    Engine::init(dir, Some(&config))?;
    let (engine, _) = Engine::open(dir)?;
    let mut t = engine.begin(Isolation::ReadCommitted);
    let def = t.create_table(
        "t",
        vec![
            ColumnDef {
                name: "id".into(),
                ty: TypeId::Int8,
                not_null: false,
                typmod: -1,
                declared: Default::default(),
            },
            ColumnDef {
                name: "v".into(),
                ty: TypeId::Text,
                not_null: false,
                typmod: -1,
                declared: Default::default(),
            },
        ],
        100,
    )?;
    t.commit()?;
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let hs: Vec<_> = (0..threads)
        .map(|i| {
            let (engine, stop, count, def) =
                (engine.clone(), stop.clone(), count.clone(), def.clone());
            std::thread::spawn(move || -> anyhow::Result<()> {
                let mut n = 0i64;
                while !stop.load(Ordering::Relaxed) {
                    let mut t = engine.begin(Isolation::ReadCommitted);
                    t.insert(
                        &def,
                        &[
                            Datum::Int8(i as i64 * 1_000_000_000 + n),
                            Datum::Text("x".repeat(20)),
                        ],
                    )?;
                    t.commit()?;
                    n += 1;
                    count.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            })
        })
        .collect();
    let start = Instant::now();
    let stats = &engine.wal().stats;
    let syncs_before = stats.syncs.load(Ordering::Relaxed);
    let pmem_before = (
        stats.pmem_drains.load(Ordering::Relaxed),
        stats.pmem_copy_ns.load(Ordering::Relaxed),
        stats.pmem_bytes_copied.load(Ordering::Relaxed),
    );
    std::thread::sleep(secs);
    stop.store(true, Ordering::Relaxed);
    for h in hs {
        h.join()
            .map_err(|_| anyhow::anyhow!("bench thread panicked"))??;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let rate = count.load(Ordering::Relaxed) as f64 / elapsed;
    let stats = &engine.wal().stats;
    let syncs = (stats.syncs.load(Ordering::Relaxed) - syncs_before) as f64 / elapsed;
    let drains = (stats.pmem_drains.load(Ordering::Relaxed) - pmem_before.0) as f64;
    let copy_ns = (stats.pmem_copy_ns.load(Ordering::Relaxed) - pmem_before.1) as f64;
    let bytes = (stats.pmem_bytes_copied.load(Ordering::Relaxed) - pmem_before.2) as f64;
    let rss = rss_mb();
    engine.shutdown()?;
    Ok(CommitRun {
        rate,
        rss_mb: rss,
        syncs_per_sec: syncs,
        drains_per_sec: drains / elapsed,
        copy_ns_per_drain: copy_ns / drains.max(1.0),
        bytes_per_drain: bytes / drains.max(1.0),
    })
}

/// Insert rate *into the WAL buffer*: a ring large enough to take the whole run, so no
/// write or sync is on the path (the "sync not on the path"). Stops after `secs`
/// or when the ring is 3/4 full, whichever comes first.
fn wal_insert_rate(dir: &Path, threads: usize, secs: Duration) -> anyhow::Result<f64> {
    std::fs::create_dir_all(dir)?;
    let ring = 1usize << 29;
    let cfg = WalConfig {
        segment_size: 64 << 20,
        buffer_bytes: ring,
        sync_method: SyncMethod::None,
        compress_images: false,
    };
    let segs = Segments::new(dir, cfg.segment_size, SyncMethod::None)?;
    let wal = Arc::new(Wal::open(
        segs,
        &cfg,
        Lsn::ZERO,
        Lsn::ZERO,
        Lsn::ZERO,
        ImagePolicy::Never,
    ));
    // A record whose total size is 100 bytes (40-byte header + 60-byte body).
    let rec = WalRecord::new(Rmgr::Heap, 1, Xid(5)).with_main(vec![0xAB; 60]);
    let stop = Arc::new(AtomicBool::new(false));
    let limit = (ring / 4 * 3) as u64;
    let start = Instant::now();
    let hs: Vec<_> = (0..threads)
        .map(|_| {
            let (wal, stop, rec) = (wal.clone(), stop.clone(), rec.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..1000 {
                        wal.insert(&rec, &[]);
                    }
                    if wal.insert_lsn().0 >= limit {
                        stop.store(true, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    while !stop.load(Ordering::Relaxed) && start.elapsed() < secs {
        std::thread::sleep(Duration::from_millis(1));
    }
    stop.store(true, Ordering::Relaxed);
    for h in hs {
        h.join()
            .map_err(|_| anyhow::anyhow!("bench thread panicked"))?;
    }
    let bytes = wal.bytes_inserted() as f64;
    Ok(bytes / start.elapsed().as_secs_f64() / 1e9)
}

fn buffer_and_btree(dir: &Path, secs: Duration) -> anyhow::Result<(f64, f64)> {
    Engine::init(
        dir,
        Some(&walrus_engine::settings::default_config_text(16 << 20)),
    )?;
    let (engine, _) = Engine::open(dir)?;
    let pool = engine.pool();
    let relfile = walrus_base::RelFileId(90_000);
    pool.relfiles.create(relfile)?;
    BTree::create(pool, relfile, Xid(3))?;
    let tree = BTree::open(pool, relfile, true, "bench_pkey");
    let n = 100_000u32;
    let mut entries = Vec::with_capacity(n as usize);
    for i in 0..n {
        let mut k = Vec::new();
        encode_key(&[Datum::Int4(i as i32)], &mut k);
        entries.push((k, Tid::new(i / 100, (i % 100 + 1) as u16)));
    }
    tree.bulk_build(&entries, Xid(3))?;
    // Buffer hit: the same resident page over and over.
    let id = PageId::new(relfile, 1);
    let start = Instant::now();
    let mut ops = 0u64;
    while start.elapsed() < secs / 2 {
        for _ in 0..10_000 {
            let p = pool.read_page(id)?;
            let g = p.read();
            std::hint::black_box(g[0]);
        }
        ops += 10_000;
    }
    let hit_ns = start.elapsed().as_nanos() as f64 / ops as f64;
    let start = Instant::now();
    let mut ops = 0u64;
    let mut x = 1u32;
    while start.elapsed() < secs / 2 {
        for _ in 0..1000 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            let i = (x >> 8) % n;
            let mut k = Vec::new();
            encode_key(&[Datum::Int4(i as i32)], &mut k);
            let hits = tree.lookup(&k)?;
            anyhow::ensure!(hits.len() == 1, "key {i} not found");
        }
        ops += 1000;
    }
    let lookup_ns = start.elapsed().as_nanos() as f64 / ops as f64;
    let _ = (UniqueCheck::NotLive,);
    engine.shutdown()?;
    Ok((hit_ns, lookup_ns))
}

/// Generates WAL with a child workload (checkpoints effectively off), kills it with
/// SIGKILL and times recovery: MB of WAL replayed, records replayed, seconds. Records/s
/// is the steadier figure: smaller records mean fewer MB for the same redo work.
fn recovery_rate(dir: &Path) -> anyhow::Result<(f64, f64, f64)> {
    let cfg = walrus_engine::settings::default_config_text(16 << 20)
        .replace(
            "checkpoint_timeout = \"5min\"",
            "checkpoint_timeout = \"1h\"",
        )
        .replace("max_wal_size = \"1GB\"", "max_wal_size = \"8GB\"");
    Engine::init(dir, Some(&cfg))?;
    let exe = std::env::current_exe()?;
    let mut child = Command::new(exe)
        .args(["tpcb-run", "--data"])
        .arg(dir)
        .args(["--acks"])
        .arg(dir.join("acks"))
        .args([
            "--threads",
            "4",
            "--checkpoint-ms",
            "100000000",
            "--scale",
            "2",
            "--set",
            "synchronous_commit=off",
        ])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("child.log"))?)
        .spawn()
        .context("start workload child")?;
    std::thread::sleep(Duration::from_secs(8));
    child.kill()?;
    child.wait()?;
    let (engine, report) = Engine::open(dir)?;
    let r = report.context("expected crash recovery")?;
    if r.replayed_bytes < 1 << 20 {
        let log = std::fs::read_to_string(dir.join("child.log")).unwrap_or_default();
        eprintln!("recovery bench: the workload child wrote little WAL; its log:\n{log}");
    }
    engine.shutdown()?;
    Ok((
        r.replayed_bytes as f64 / 1e6,
        r.records as f64,
        r.elapsed.as_secs_f64(),
    ))
}
