//! A TPC-B-like workload through the engine API, and its checker. The crash tests run
//! `walrus-bench tpcb-run` as a child, kill it with SIGKILL (after a power-loss journal
//! was written, `walrus-bench powercut` first undoes what no sync made durable), then
//! run `walrus-bench tpcb-check`.
//!
//! Every transaction: update one account (by primary key), read it back, update its
//! teller and branch, insert a history row carrying a unique tag; after `commit`
//! returns, the tag and delta are appended to the acknowledgement file. Invariants the
//! checker verifies after recovery:
//! 1. sum(accounts.abalance) = sum(tellers.tbalance) = sum(branches.bbalance)
//!    = sum(history.delta) (atomicity: no transaction is half applied);
//! 2. every acknowledged tag is in history with its delta (durability);
//! 3. recovery itself succeeds, and every page on disk passes its checksum after the
//!    checker's checkpoint.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rand::Rng;
use walrus_engine::access::datum::{Datum, TypeId};
use walrus_engine::catalog::{ColumnDef, TableDef};
use walrus_engine::engine::{CheckpointReason, Isolation, RowChange};
use walrus_engine::{Engine, Error};

#[derive(clap::Args)]
pub struct RunArgs {
    #[arg(long)]
    data: PathBuf,
    /// Accounts = 1000 × scale, tellers = 10 × scale, branches = scale.
    #[arg(long, default_value_t = 1)]
    scale: u32,
    #[arg(long, default_value_t = 8)]
    threads: usize,
    /// Run for this long, then shut down cleanly (0 = until killed).
    #[arg(long, default_value_t = 0)]
    seconds: u64,
    /// Request a checkpoint this often.
    #[arg(long, default_value_t = 200)]
    checkpoint_ms: u64,
    /// Where acknowledged commits are appended.
    #[arg(long)]
    acks: PathBuf,
    /// Every this many ms, move the xid counter a commit-status log segment ahead (0 =
    /// never), as years of transactions would: autovacuum's freeze passes and the clog
    /// truncations they allow then run within a crash test's short cycles.
    #[arg(long, default_value_t = 0)]
    xid_jump_ms: u64,
    /// Extra settings, `name=value`, applied over walrus.toml.
    #[arg(long = "set")]
    set: Vec<String>,
    /// Tear the N-th data-page write that changes a page's second half, then abort.
    #[arg(long, default_value_t = 0)]
    tear_write: u64,
    /// Journal what a power cut would lose (for `walrus-bench powercut`).
    #[arg(long)]
    powerloss_journal: Option<PathBuf>,
    /// Fail one I/O operation: KIND:OP:N:ERRNO (data|wal|clog|control, write|sync|reserve,
    /// the N-th such operation after the schema is loaded, EIO|ENOSPC).
    #[arg(long)]
    fail_io: Option<String>,
}

#[derive(clap::Args)]
pub struct CheckArgs {
    #[arg(long)]
    data: PathBuf,
    #[arg(long)]
    acks: PathBuf,
    /// Acknowledged commits may be missing (`synchronous_commit = off`): count them as
    /// `lost_acks=N` and drop them from the file instead of failing. A missing commit
    /// may not be followed by a surviving one of the same worker (WAL is a prefix).
    #[arg(long)]
    allow_lost_acks: bool,
    /// With --allow-lost-acks: the power was cut at this time (ms since the epoch), and
    /// commits acknowledged more than --loss-window-ms before it must have survived.
    #[arg(long)]
    cut_at_ms: Option<u64>,
    #[arg(long, default_value_t = 600)]
    loss_window_ms: u64,
    #[arg(long = "set")]
    set: Vec<String>,
}

fn col(name: &str, ty: TypeId) -> ColumnDef {
    ColumnDef {
        name: name.into(),
        ty,
        not_null: false,
        typmod: -1,
        declared: Default::default(),
    }
}

fn open(data: &std::path::Path, set: &[String]) -> anyhow::Result<Engine> {
    let mut settings = walrus_engine::settings::Settings::load(data)?;
    for s in set {
        let (k, v) = s.split_once('=').context("--set takes name=value")?;
        settings.set(k.trim(), v.trim())?;
    }
    let (engine, report) = Engine::open_with(data, settings)?;
    if let Some(r) = report {
        eprintln!(
            "recovery: {} records, {} bytes, {:.3} s, {} images restored, {} pages restored from the double-write buffer, {} rolled back",
            r.records,
            r.replayed_bytes,
            r.elapsed.as_secs_f64(),
            r.images_restored,
            r.pages_restored_from_double_write,
            r.rolled_back
        );
    }
    Ok(engine)
}

fn ensure_schema(engine: &Engine, scale: u32) -> anyhow::Result<()> {
    if engine.catalog_view()?.tables.contains_key("accounts") {
        return Ok(());
    }
    let mut t = engine.begin(Isolation::ReadCommitted);
    let accounts = t.create_table(
        "accounts",
        vec![
            col("aid", TypeId::Int4),
            col("bid", TypeId::Int4),
            col("abalance", TypeId::Int4),
            col("filler", TypeId::Text),
        ],
        90,
    )?;
    t.create_table(
        "tellers",
        vec![
            col("tid", TypeId::Int4),
            col("bid", TypeId::Int4),
            col("tbalance", TypeId::Int4),
        ],
        50,
    )?;
    t.create_table(
        "branches",
        vec![col("bid", TypeId::Int4), col("bbalance", TypeId::Int4)],
        50,
    )?;
    t.create_table(
        "history",
        vec![
            col("tid", TypeId::Int4),
            col("bid", TypeId::Int4),
            col("aid", TypeId::Int4),
            col("delta", TypeId::Int4),
            col("mtime", TypeId::Timestamp),
            col("tag", TypeId::Int8),
        ],
        100,
    )?;
    t.next_statement();
    let filler = " ".repeat(84);
    for aid in 1..=(1000 * scale) as i32 {
        t.insert(
            &accounts,
            &[
                Datum::Int4(aid),
                Datum::Int4((aid - 1) / 1000 + 1),
                Datum::Int4(0),
                Datum::Text(filler.clone()),
            ],
        )?;
    }
    let tellers = t.table("tellers")?;
    for tid in 1..=(10 * scale) as i32 {
        t.insert(
            &tellers,
            &[
                Datum::Int4(tid),
                Datum::Int4((tid - 1) / 10 + 1),
                Datum::Int4(0),
            ],
        )?;
    }
    let branches = t.table("branches")?;
    for bid in 1..=scale as i32 {
        t.insert(&branches, &[Datum::Int4(bid), Datum::Int4(0)])?;
    }
    t.next_statement();
    t.create_index("accounts", "accounts_pkey", &[0], true, true)?;
    t.create_index("tellers", "tellers_pkey", &[0], true, true)?;
    t.create_index("branches", "branches_pkey", &[0], true, true)?;
    t.commit()?;
    engine.checkpoint(CheckpointReason::Requested)?;
    Ok(())
}

/// Adds `delta` to integer column `col` of the row with primary key `key`, following
/// concurrent updates (READ COMMITTED).
fn add_to(
    t: &mut walrus_engine::engine::Transaction,
    def: &TableDef,
    key: i32,
    col: usize,
    delta: i32,
) -> Result<i32, Error> {
    let pk = &def.indexes[0];
    let rows = t.index_lookup(def, pk, &[Datum::Int4(key)])?;
    let Some((mut tid, mut values)) = rows.into_iter().next() else {
        let why = t.explain_missing(def, pk, &[Datum::Int4(key)]);
        return Err(Error::InvalidInput(format!(
            "{} row {key} not found ({why})",
            def.name
        )));
    };
    loop {
        let Datum::Int4(old) = values[col] else {
            return Err(Error::InvalidInput("bad balance".into()));
        };
        values[col] = Datum::Int4(old + delta);
        match t.update(def, tid, &values)? {
            RowChange::Done(_) => return Ok(old + delta),
            RowChange::Changed(newer, v) => {
                tid = newer;
                values = v;
            }
            RowChange::Gone | RowChange::SelfModified => {
                return Err(Error::InvalidInput(format!(
                    "{} row {key} vanished",
                    def.name
                )))
            }
        }
    }
}

/// `walrus-bench demo`: create the directory if needed and run the load for `seconds`.
/// Milliseconds since the Unix epoch (the acknowledgement file's clock).
pub fn epoch_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

pub fn demo(data: &std::path::Path, seconds: u64, threads: usize) -> anyhow::Result<()> {
    if !data.join("control").exists() {
        Engine::init(data, None)?;
        println!("created walrus data directory {}", data.display());
    }
    let started = Instant::now();
    run(RunArgs {
        data: data.to_path_buf(),
        scale: 1,
        threads,
        seconds,
        checkpoint_ms: 30_000,
        acks: data.join("demo-acks"),
        xid_jump_ms: 0,
        set: Vec::new(),
        tear_write: 0,
        powerloss_journal: None,
        fail_io: None,
    })?;
    println!(
        "ran {:.1} s against {}",
        started.elapsed().as_secs_f64(),
        data.display()
    );
    Ok(())
}

pub fn run(a: RunArgs) -> anyhow::Result<()> {
    crate::hooks::install(crate::hooks::HookConfig {
        tear_write: a.tear_write,
        journal: a.powerloss_journal.clone(),
        fail_io: a.fail_io.clone(),
    })?;
    let engine = open(&a.data, &a.set)?;
    ensure_schema(&engine, a.scale)?;
    crate::hooks::arm_failures();
    let mut acks_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .read(true)
        .open(&a.acks)?;
    // A file written by an older run must end with a newline before we append.
    let existing = std::fs::read(&a.acks)?;
    if existing.last().is_some_and(|&b| b != b'\n') {
        acks_file.write_all(b"\n")?;
    }
    let acks = Arc::new(Mutex::new(acks_file));
    let stop = Arc::new(AtomicBool::new(false));
    let committed = Arc::new(AtomicU64::new(0));
    let run_id: u64 = rand::thread_rng().gen_range(1..1u64 << 22);
    println!("READY");
    std::io::stdout().flush()?;
    let mut handles = Vec::new();
    for w in 0..a.threads {
        let (engine, acks, stop, committed) = (
            engine.clone(),
            acks.clone(),
            stop.clone(),
            committed.clone(),
        );
        let scale = a.scale as i32;
        handles.push(std::thread::spawn(move || -> anyhow::Result<()> {
            let mut rng = rand::thread_rng();
            let view = engine.catalog_view()?;
            let (accounts, tellers, branches, history) = (
                view.table("accounts")?,
                view.table("tellers")?,
                view.table("branches")?,
                view.table("history")?,
            );
            let mut seq = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let aid = rng.gen_range(1..=1000 * scale);
                let tid = rng.gen_range(1..=10 * scale);
                let bid = rng.gen_range(1..=scale);
                let delta = rng.gen_range(-5000..=5000);
                seq += 1;
                // Unique across runs and workers, and below i64::MAX: run | worker | sequence.
                let tag = (run_id << 40) | ((w as u64) << 32) | seq;
                let mut t = engine.begin(Isolation::ReadCommitted);
                let result = (|| -> Result<(), Error> {
                    add_to(&mut t, &accounts, aid, 2, delta)?;
                    t.next_statement();
                    let _ = t.index_lookup(&accounts, &accounts.indexes[0], &[Datum::Int4(aid)])?;
                    t.next_statement();
                    add_to(&mut t, &tellers, tid, 2, delta)?;
                    t.next_statement();
                    add_to(&mut t, &branches, bid, 1, delta)?;
                    t.next_statement();
                    t.insert(
                        &history,
                        &[
                            Datum::Int4(tid),
                            Datum::Int4(bid),
                            Datum::Int4(aid),
                            Datum::Int4(delta),
                            Datum::Timestamp(0),
                            Datum::Int8(tag as i64),
                        ],
                    )?;
                    Ok(())
                })();
                match result {
                    Ok(()) => {
                        t.commit()?;
                        committed.fetch_add(1, Ordering::Relaxed);
                        // One write(2) per line: a kill cannot leave half a line. The
                        // third field is when the commit was acknowledged (ms since the
                        // epoch), for the asynchronous-commit loss bound.
                        let line = format!("{tag} {delta} {}\n", epoch_ms());
                        let mut f = acks.lock().expect("acks lock");
                        f.write_all(line.as_bytes())?;
                    }
                    Err(e) if e.is_retryable() => {
                        t.rollback()?;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            Ok(())
        }));
    }
    let started = Instant::now();
    let mut last_ckpt = Instant::now();
    let mut last_jump = Instant::now();
    while a.seconds == 0 || started.elapsed() < Duration::from_secs(a.seconds) {
        std::thread::sleep(Duration::from_millis(10));
        if a.xid_jump_ms > 0 && last_jump.elapsed() >= Duration::from_millis(a.xid_jump_ms) {
            // As a writer would: the clog segments first, then the xids.
            let txn = engine.txn_manager();
            let to = txn.next_xid().0 + walrus_engine::txn::clog::XIDS_PER_SEGMENT;
            txn.clog.reserve_space(to, to + 1)?;
            txn.advance_next_xid(walrus_base::Xid(to));
            last_jump = Instant::now();
        }
        if last_ckpt.elapsed() >= Duration::from_millis(a.checkpoint_ms) {
            // A failed checkpoint (an injected write error) is that checkpoint's error,
            // as CHECKPOINT's in PostgreSQL: the load goes on and the next one retries.
            if let Err(e) = engine.checkpoint(CheckpointReason::Requested) {
                eprintln!("tpcb-run: checkpoint failed: {e}");
            }
            last_ckpt = Instant::now();
        }
        if handles.iter().any(|h| h.is_finished()) {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().map_err(|_| anyhow::anyhow!("worker panicked"))??;
    }
    let dead_entries = engine.dead_index_entries_removed();
    let autovacuums: u64 = engine
        .catalog_view()?
        .tables
        .values()
        .map(|t| engine.table_activity(t).autovacuums)
        .sum();
    engine.shutdown()?;
    let n = committed.load(Ordering::Relaxed);
    println!(
        "committed {n} ({:.0} tps); index entries of dead chains removed by lookups: {dead_entries}; autovacuums: {autovacuums}",
        n as f64 / started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn sum_col(
    t: &mut walrus_engine::engine::Transaction,
    def: &TableDef,
    col: usize,
) -> anyhow::Result<i64> {
    let mut s = 0i64;
    t.scan(def, |_, v| {
        if let Datum::Int4(x) = v[col] {
            s += x as i64;
        }
        Ok(true)
    })?;
    Ok(s)
}

pub fn check(a: CheckArgs) -> anyhow::Result<()> {
    let engine = open(&a.data, &a.set)?;
    let view = engine.catalog_view()?;
    if !view.tables.contains_key("accounts") {
        // Killed before the schema committed: nothing can have been acknowledged.
        let acks = std::fs::read_to_string(&a.acks).unwrap_or_default();
        if !acks.trim().is_empty() {
            bail!(
                "tables are missing but {} commits were acknowledged",
                acks.lines().count()
            );
        }
        println!("OK (no schema yet)");
        std::process::exit(0);
    }
    let mut t = engine.begin(Isolation::RepeatableRead);
    let (accounts, tellers, branches, history) = (
        view.table("accounts")?,
        view.table("tellers")?,
        view.table("branches")?,
        view.table("history")?,
    );
    let sa = sum_col(&mut t, &accounts, 2)?;
    let st = sum_col(&mut t, &tellers, 2)?;
    let sb = sum_col(&mut t, &branches, 1)?;
    let mut sh = 0i64;
    let mut tags: HashMap<i64, i32> = HashMap::new();
    t.scan(&history, |_, v| {
        if let (Datum::Int4(d), Datum::Int8(tag)) = (&v[3], &v[5]) {
            sh += *d as i64;
            tags.insert(*tag, *d);
        }
        Ok(true)
    })?;
    // Every account must still be reachable through the primary key.
    let naccounts = t.scan_all(&accounts)?.len();
    let probe = naccounts as i32 / 2 + 1;
    if t.index_lookup(&accounts, &accounts.indexes[0], &[Datum::Int4(probe)])?
        .len()
        != 1
    {
        bail!("account {probe} not found through the primary key index");
    }
    t.commit()?;
    if !(sa == st && st == sb && sb == sh) {
        bail!("TPC-B invariant broken: accounts {sa}, tellers {st}, branches {sb}, history {sh}");
    }
    let acks = std::fs::read_to_string(&a.acks).unwrap_or_default();
    let mut acked = 0;
    let mut lost = 0;
    let mut kept = String::new();
    // Worker (tag bits 32..40 with the run id) whose commit was lost: none of its later
    // commits may have survived.
    let mut lost_workers: HashMap<i64, i64> = HashMap::new();
    let lines: Vec<&str> = acks.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let mut it = line.split_whitespace();
        let parsed = match (it.next(), it.next()) {
            (Some(tag), Some(delta)) => tag.parse::<i64>().ok().zip(delta.parse::<i32>().ok()),
            _ => None,
        };
        let acked_at: Option<u64> = it.next().and_then(|t| t.parse().ok());
        let Some((tag, delta)) = parsed else {
            // Only the very last line may be cut short by the kill.
            if i + 1 == lines.len() {
                continue;
            }
            bail!("acknowledgement file line {} is malformed: {line:?}", i + 1);
        };
        acked += 1;
        match tags.get(&tag) {
            Some(&d) if d == delta => {
                if let Some(first_lost) = lost_workers.get(&(tag >> 32)) {
                    bail!(
                        "commit {tag} survived but the same worker's earlier commit \
                         {first_lost} was lost: the durable WAL is not a prefix"
                    );
                }
                kept.push_str(line);
                kept.push('\n');
            }
            Some(&d) => bail!("acknowledged commit {tag} has delta {d}, expected {delta}"),
            None if a.allow_lost_acks => {
                if let (Some(cut), Some(at)) = (a.cut_at_ms, acked_at) {
                    if at + a.loss_window_ms < cut {
                        bail!(
                            "commit {tag}, acknowledged {} ms before the power cut, was lost \
                             (the bound is {} ms)",
                            cut - at,
                            a.loss_window_ms
                        );
                    }
                }
                lost += 1;
                lost_workers.entry(tag >> 32).or_insert(tag);
            }
            None => bail!("acknowledged commit {tag} is missing after recovery"),
        }
    }
    if lost > 0 {
        std::fs::write(&a.acks, kept)?;
    }
    engine.checkpoint(CheckpointReason::Requested)?;
    let damaged = engine.verify_all_pages()?;
    if let Some(d) = damaged.first() {
        bail!("damaged page after recovery: {d}");
    }
    println!(
        "OK sum={sa} history_rows={} acknowledged={acked} lost_acks={lost}",
        tags.len()
    );
    // Exit without a clean shutdown on purpose: the next run recovers again.
    std::process::exit(0);
}
