//! The `bulk` and `queries` scenarios: what a new user does around pgbench's write
//! transactions — load data, run reporting queries, one client's latency — PostgreSQL
//! against walrus with the same settings (`shared_buffers = 128MB`,
//! `max_wal_size = 1GB`, fsync on, page images on: walrus `fpw`).

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::pgbench::{self, Options, Workload};
use super::process::{check_interrupt, run_captured};
use super::report::{table, Spread};
use super::server::{Server, Settings, System};
use super::{
    alternating, prepare_all, variant, variants_header, variants_row, Ctx, Setup, START_LIMIT,
};

fn settings() -> Settings {
    Settings::new("1GB", "5min")
}

/// Wall-clock seconds of `pgbench -i -s scale` (COPY of `100000 × scale` rows, then
/// the primary keys).
fn time_pgbench_init(ctx: &Ctx, s: &Server, scale: u32) -> anyhow::Result<f64> {
    let t = Instant::now();
    pgbench::initialize(&ctx.tools, s.port, scale)?;
    Ok(t.elapsed().as_secs_f64())
}

/// Runs `sql` through psql with `\timing on`; returns the server-and-network time psql
/// measured (connection setup excluded), or the error text when the statement failed.
fn timed(ctx: &Ctx, s: &Server, sql: &str) -> anyhow::Result<Result<f64, String>> {
    Ok(timed_output(ctx, s, sql)?.map(|(t, _)| t))
}

/// [`timed`], with psql's output.
fn timed_output(ctx: &Ctx, s: &Server, sql: &str) -> anyhow::Result<Result<(f64, String), String>> {
    let mut cmd = Command::new(&ctx.tools.psql);
    cmd.args(["-X", "-A", "-v", "ON_ERROR_STOP=1"])
        .args(["-h", &ctx.tools.host(), "-p", &s.port.to_string()])
        .args(["-U", "bench", "-d", "bench"])
        .args(["-c", "\\timing on", "-c", sql])
        .env("PGCONNECT_TIMEOUT", "5");
    let (status, out, err) = run_captured("psql", &mut cmd, &ctx.tools.scratch, QUERY_LIMIT)?;
    if !status.success() {
        let first = err
            .lines()
            .find(|l| l.contains("ERROR"))
            .unwrap_or(err.trim());
        return Ok(Err(first.trim().to_string()));
    }
    let ms = out
        .lines()
        .filter_map(|l| l.strip_prefix("Time: "))
        .filter_map(|l| l.split_whitespace().next())
        .filter_map(|n| n.parse::<f64>().ok())
        .sum::<f64>();
    if ms <= 0.0 {
        bail!("psql printed no timing for `{sql}`: {out}");
    }
    Ok(Ok((ms / 1000.0, out)))
}

const QUERY_LIMIT: Duration = Duration::from_secs(1800);

/// Writes a CSV file of about `bytes` bytes: `id, k, amount, note` rows (an int8, an
/// int4, a numeric(12,2) and a text of 60–80 characters, some with quotes and commas).
fn write_csv(path: &Path, bytes: u64) -> anyhow::Result<u64> {
    let f = std::fs::File::create(path).with_context(|| format!("{}", path.display()))?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
    let (mut written, mut rows) = (0u64, 0u64);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while written < bytes {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let note = if rows % 10 == 0 {
            format!(
                "\"note {rows}, with a comma and \"\"quotes\"\" {:040}\"",
                x % 1000
            )
        } else {
            format!("note {rows} {:060}", x % 100_000)
        };
        let line = format!(
            "{rows},{},{}.{:02},{note}\n",
            x % 100_000,
            x % 1_000_000,
            x % 100
        );
        w.write_all(line.as_bytes())?;
        written += line.len() as u64;
        rows += 1;
    }
    w.flush()?;
    Ok(rows)
}

#[derive(Clone, Debug, Default)]
struct BulkRun {
    init_small: f64,
    init_large: Option<f64>,
    copy_seconds: f64,
}

/// bulk: `pgbench -i` at two scales and a client-side COPY of a CSV file.
pub(super) fn scenario_bulk(ctx: &mut Ctx) -> anyhow::Result<String> {
    let settings = settings();
    let variants = [
        variant(System::Postgres, "full_page_writes=on", &settings),
        variant(System::Walrus, "page_protection=fpw", &settings),
    ];
    let n = variants.len();
    let mut servers = prepare_all(ctx, "bulk", &variants, Setup::Empty)?;
    let small = ctx.plan.scale;
    let large = (!ctx.plan.quick).then_some(5 * ctx.plan.scale);
    let csv_bytes: u64 = if ctx.plan.quick { 8 << 20 } else { 1 << 30 };
    let csv = ctx.work.join("bulk.csv");
    ctx.progress.step(
        &format!("bulk: writing a {} MB CSV file", csv_bytes >> 20),
        5.0,
    );
    let csv_rows = write_csv(&csv, csv_bytes)?;
    let csv_mb = std::fs::metadata(&csv)?.len() as f64 / (1 << 20) as f64;
    let mut runs: Vec<Vec<BulkRun>> = vec![Vec::new(); n];
    for (rep, i) in alternating(ctx.plan.reps, n) {
        check_interrupt()?;
        let s = &mut servers[i];
        ctx.progress.step(
            &format!(
                "bulk: {} rep {}/{}: pgbench -i -s {small}{}, COPY {csv_mb:.0} MB",
                s.system.name(),
                rep + 1,
                ctx.plan.reps,
                large.map(|l| format!(", -s {l}")).unwrap_or_default()
            ),
            10.0 + csv_mb / 5.0,
        );
        s.start(START_LIMIT)?;
        let init_small = time_pgbench_init(ctx, s, small)?;
        let init_large = match large {
            Some(l) => Some(time_pgbench_init(ctx, s, l)?),
            None => None,
        };
        s.query("drop table if exists bulk_load")?;
        s.query("create table bulk_load (id int8, k int4, amount numeric(12,2), note text)")?;
        let copy = format!(
            "\\copy bulk_load from '{}' with (format csv)",
            csv.display()
        );
        let (copy_seconds, out) = match timed_output(ctx, s, &copy)? {
            Ok(t) => t,
            Err(e) => bail!("{}: COPY failed: {e}", s.label),
        };
        // psql prints the server's `COPY n` (a count(*) over a 1 GB table would be a
        // second benchmark, and walrus materialises its rows).
        let loaded: u64 = out
            .lines()
            .find_map(|l| l.strip_prefix("COPY "))
            .and_then(|n| n.trim().parse().ok())
            .with_context(|| format!("{}: no COPY count in psql's output: {out}", s.label))?;
        if loaded != csv_rows {
            bail!("{}: COPY loaded {loaded} of {csv_rows} rows", s.label);
        }
        s.query("drop table bulk_load")?;
        s.stop()?;
        runs[i].push(BulkRun {
            init_small,
            init_large,
            copy_seconds,
        });
    }
    drop(servers);
    let _ = std::fs::remove_file(&csv);
    let spread = |f: &dyn Fn(&BulkRun) -> Option<f64>| -> Vec<Option<Spread>> {
        runs.iter()
            .map(|r| Spread::of(&r.iter().map(f).collect::<Vec<_>>()))
            .collect()
    };
    let mut rows = vec![variants_row(
        format!("pgbench -i -s {small} (s)"),
        &spread(&|r| Some(r.init_small)),
        2,
    )];
    if let Some(l) = large {
        rows.push(variants_row(
            format!("pgbench -i -s {l} (s)"),
            &spread(&|r| r.init_large),
            2,
        ));
    }
    // pgbench_accounts' text form is about 100 bytes a row (PostgreSQL's COPY stream).
    rows.push(variants_row(
        format!("pgbench -i -s {small}: MB/s of COPY text"),
        &spread(&|r| Some(small as f64 * 100_000.0 * 100.0 / (1 << 20) as f64 / r.init_small)),
        1,
    ));
    rows.push(variants_row(
        format!("COPY of a {csv_mb:.0} MB CSV, {csv_rows} rows (s)"),
        &spread(&|r| Some(r.copy_seconds)),
        2,
    ));
    rows.push(variants_row(
        "COPY CSV (MB/s)".into(),
        &spread(&|r| Some(csv_mb / r.copy_seconds)),
        1,
    ));
    Ok(format!(
        "### bulk: loading data (issue: bulk load at PostgreSQL's speed)\n\n\
         Both servers with `shared_buffers = 128MB`, `max_wal_size = 1GB`, fsync on, page \
         images on (walrus `page_protection = fpw`). Per repetition and server: \
         `pgbench -i` (client-side COPY of pgbench_accounts, then primary keys; the \
         wall-clock time of the whole command) and psql's `\\copy ... with (format csv)` \
         of a generated CSV file into an empty table (int8, int4, numeric(12,2), text; \
         psql's `\\timing`). Servers are reused across repetitions, so later \
         repetitions run on a catalog with the earlier ones' dropped tables. Ratios are \
         walrus / PostgreSQL time (lower is better) — for the MB/s rows, higher is better.\n\n{}\n",
        table(&variants_header(&variants), &rows)
    ))
}

/// The query set: (name, SQL). Run in this order; the update is undone by the next
/// repetition's identical update only in aggregate, which no query depends on.
fn query_set() -> Vec<(&'static str, String)> {
    vec![
        ("count", "select count(*) from pgbench_accounts".into()),
        (
            "filtered sum",
            "select sum(abalance) from pgbench_accounts where bid = 3".into(),
        ),
        (
            "top-N",
            "select aid, abalance from pgbench_accounts order by abalance desc, aid limit 5".into(),
        ),
        (
            "join + group",
            "select b.bid, count(*), sum(a.abalance) from pgbench_accounts a \
             join pgbench_branches b on a.bid = b.bid group by b.bid order by b.bid"
                .into(),
        ),
        (
            "range select",
            "select count(*), sum(abalance) from pgbench_accounts \
             where aid between 20000 and 70000"
                .into(),
        ),
        (
            "bulk update (10%)",
            "update pgbench_accounts set abalance = abalance + 1 where aid % 10 = 0".into(),
        ),
        (
            "create index",
            "create index bench_accounts_bid_abalance on pgbench_accounts (bid, abalance)".into(),
        ),
        (
            "window",
            "select bid, max(rn) from (select bid, row_number() over \
             (partition by bid order by abalance, aid) as rn from pgbench_accounts \
             where aid <= 100000) s group by bid order by bid"
                .into(),
        ),
        (
            "recursive CTE",
            "with recursive r(n) as (select 1 union all select n + 1 from r \
             where n < 100000) select count(*), sum(n) from r"
                .into(),
        ),
    ]
}

/// queries: a fixed query set over pgbench's tables, then one client's latency.
pub(super) fn scenario_queries(ctx: &mut Ctx) -> anyhow::Result<String> {
    let settings = settings();
    let variants = [
        variant(System::Postgres, "full_page_writes=on", &settings),
        variant(System::Walrus, "page_protection=fpw", &settings),
    ];
    let n = variants.len();
    let mut servers = prepare_all(ctx, "queries", &variants, Setup::Pgbench)?;
    let queries = query_set();
    // Per variant, per query: the repetitions' times or the first error.
    let mut times: Vec<Vec<Vec<Option<f64>>>> = vec![vec![Vec::new(); queries.len()]; n];
    let mut errors: Vec<Vec<Option<String>>> = vec![vec![None; queries.len()]; n];
    let mut latency: Vec<[Vec<Option<f64>>; 2]> = vec![[Vec::new(), Vec::new()]; n];
    let select_only = ctx.work.join("select-only.sql");
    std::fs::write(
        &select_only,
        "\\set aid random(1, 100000 * :scale)\n\
         SELECT abalance FROM pgbench_accounts WHERE aid = :aid;\n",
    )?;
    let seconds = ctx.plan.duration.clamp(2, 20);
    let dir = ctx.work.join("pgbench");
    for (rep, i) in alternating(ctx.plan.reps, n) {
        check_interrupt()?;
        let s = &mut servers[i];
        ctx.progress.step(
            &format!(
                "queries: {} rep {}/{}: {} queries, 1-client latency {seconds} s × 2",
                s.system.name(),
                rep + 1,
                ctx.plan.reps,
                queries.len()
            ),
            20.0 + 2.0 * seconds as f64,
        );
        s.start(START_LIMIT)?;
        s.query("drop index if exists bench_accounts_bid_abalance")?;
        s.query("vacuum analyze pgbench_accounts")?;
        for (q, (_, sql)) in queries.iter().enumerate() {
            match timed(ctx, s, sql)? {
                Ok(t) => times[i][q].push(Some(t)),
                Err(e) => {
                    times[i][q].push(None);
                    errors[i][q].get_or_insert(e);
                }
            }
        }
        for (k, workload) in [Workload::TpcbLike, Workload::Script(select_only.clone())]
            .into_iter()
            .enumerate()
        {
            let o = Options {
                workload,
                clients: 1,
                seconds,
                detailed: false,
            };
            let out = pgbench::run(&ctx.tools, s.port, &o, &dir)?;
            latency[i][k].push(Some(out.latency_avg_ms));
        }
        s.stop()?;
    }
    drop(servers);
    let mut rows = Vec::new();
    for (q, (name, _)) in queries.iter().enumerate() {
        let spreads: Vec<Option<Spread>> = (0..n).map(|i| Spread::of(&times[i][q])).collect();
        let mut row = variants_row(format!("{name} (s)"), &spreads, 3);
        for i in 0..n {
            if let Some(e) = &errors[i][q] {
                row[1 + i] = format!("error: {}", e.replace('|', "/"));
            }
        }
        rows.push(row);
    }
    for (k, name) in ["TPC-B-like", "select-only (-S)"].iter().enumerate() {
        let spreads: Vec<Option<Spread>> = (0..n).map(|i| Spread::of(&latency[i][k])).collect();
        rows.push(variants_row(
            format!("1 client, {name}, -M prepared: average latency (ms)"),
            &spreads,
            3,
        ));
    }
    let sqls: String = queries
        .iter()
        .map(|(name, sql)| format!("- {name}: `{sql}`\n"))
        .collect();
    Ok(format!(
        "### queries: reporting queries and one client's latency (issue: query execution \
         at PostgreSQL's speed)\n\n\
         pgbench tables at scale {}, same settings as `bulk`; `vacuum analyze \
         pgbench_accounts` before each repetition; each query's time is psql's \
         `\\timing` (median of the repetitions, min–max in brackets). Then one client \
         (`pgbench -c 1 -M prepared`, {seconds} s each): TPC-B-like and select-only. \
         Ratios are walrus / PostgreSQL (lower is better); an error cell is the server's \
         error (a refused statement counts as not done).\n\n{}\n\n{sqls}",
        ctx.plan.scale,
        table(&variants_header(&variants), &rows),
    ))
}
