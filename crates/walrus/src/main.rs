//! The `walrus` binary: `init` a data directory, `serve` it, `stop` the server,
//! `recover` and `verify` a directory, `waldump` its WAL. Benchmarks and crash-test
//! machinery live in the separate `walrus-bench` binary, so nothing here can inject
//! faults into a server's I/O.

#![forbid(unsafe_code)]

mod serve;
mod waldump;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "walrus",
    version,
    about = "walrus: a PostgreSQL-compatible OLTP database built around its write path"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create a data directory with a commented walrus.toml.
    Init {
        #[arg(default_value = "walrus-data")]
        dir: PathBuf,
        /// WAL segment size (fixed at init), e.g. 16MB.
        #[arg(long)]
        wal_segment_size: Option<String>,
        /// Keep the WAL in this directory instead of DIR/wal (PostgreSQL's
        /// `initdb --waldir`), e.g. on a DAX file system for `wal_sync_method = pmem`.
        /// DIR/wal becomes a symbolic link to it.
        #[arg(long)]
        wal_directory: Option<PathBuf>,
        /// `wal_sync_method` to write into walrus.toml (default fdatasync).
        #[arg(long)]
        wal_sync_method: Option<String>,
    },
    /// Run the PostgreSQL-compatible server (creates the data directory if missing).
    Serve(serve::ServeArgs),
    /// Stop the server running on a data directory (SIGTERM; it checkpoints and exits).
    Stop {
        #[arg(default_value = "walrus-data")]
        dir: PathBuf,
    },
    /// Open a data directory (running crash recovery if needed), report, and shut down cleanly.
    Recover {
        #[arg(default_value = "walrus-data")]
        dir: PathBuf,
    },
    /// Read every page of a data directory from disk and verify its checksum, and check
    /// the commit-status log's segment files, without starting the engine. Exits
    /// non-zero if anything is damaged.
    Verify {
        #[arg(default_value = "walrus-data")]
        dir: PathBuf,
    },
    /// Read a data directory's WAL without starting the engine (like pg_waldump): one
    /// line per record, or --stats for count and bytes per record kind.
    Waldump(waldump::WaldumpArgs),
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("WALRUS_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Init {
            dir,
            wal_segment_size,
            wal_directory,
            wal_sync_method,
        } => init(&dir, wal_segment_size, wal_directory, wal_sync_method),
        Command::Serve(a) => serve::serve(a),
        Command::Stop { dir } => serve::stop(&dir),
        Command::Recover { dir } => recover(&dir),
        Command::Verify { dir } => verify(&dir),
        Command::Waldump(a) => waldump::run(a),
    };
    if let Err(e) = result {
        eprintln!("walrus: error: {e:#}");
        std::process::exit(1);
    }
}

fn init(
    dir: &std::path::Path,
    seg: Option<String>,
    wal_directory: Option<PathBuf>,
    wal_sync_method: Option<String>,
) -> anyhow::Result<()> {
    let mut text = walrus_engine::settings::default_config_text(64 << 20);
    if let Some(s) = seg {
        let bytes = walrus_engine::settings::parse_size(&s)
            .ok_or_else(|| anyhow::anyhow!("invalid --wal-segment-size \"{s}\""))?;
        text = walrus_engine::settings::default_config_text(bytes);
    }
    if let Some(w) = wal_directory {
        let w = std::path::absolute(&w)?;
        let w = w
            .to_str()
            .ok_or_else(|| anyhow::anyhow!("--wal-directory must be valid UTF-8"))?;
        // TOML basic strings escape backslashes and quotes.
        let quoted = w.replace('\\', "\\\\").replace('"', "\\\"");
        text = text.replace(
            "wal_directory = \"\"",
            &format!("wal_directory = \"{quoted}\""),
        );
    }
    if let Some(m) = wal_sync_method {
        text = text.replace(
            "wal_sync_method = \"fdatasync\"",
            &format!("wal_sync_method = \"{m}\""),
        );
    }
    walrus_engine::Engine::init(dir, Some(&text))?;
    println!("created walrus data directory {}", dir.display());
    calibrate_replay_rate(dir, None);
    Ok(())
}

/// Measures the WAL replay rate for a new data directory (`Engine::calibrate_replay_rate`)
/// so `recovery_time_target` is planned with this machine's figure from the start. A
/// failure is reported and leaves the default rate; the directory is usable either way.
fn calibrate_replay_rate(dir: &std::path::Path, overrides: Option<&str>) {
    match walrus_engine::Engine::calibrate_replay_rate(dir, overrides) {
        Ok(c) => tracing::info!(
            "replay rate calibrated: {:.1} MB/s ({} MB of WAL replayed after a synthetic crash); recovery_time_target plans with {:.1} MB/s until a crash measures the real load's rate",
            c.bytes_per_sec as f64 / 1e6,
            c.replayed_bytes >> 20,
            c.planned_bytes_per_sec as f64 / 1e6
        ),
        Err(e) => tracing::warn!(
            "replay-rate calibration failed, recovery_time_target uses the default rate until a recovery measures one: {e}"
        ),
    }
}

fn recover(dir: &std::path::Path) -> anyhow::Result<()> {
    let (engine, report) = walrus_engine::Engine::open(dir)?;
    match report {
        Some(r) => println!(
            "recovered: replayed {} records ({} bytes) in {:.3} s, {} page images restored, {} pages restored from the double-write buffer, {} transactions rolled back",
            r.records,
            r.replayed_bytes,
            r.elapsed.as_secs_f64(),
            r.images_restored,
            r.pages_restored_from_double_write,
            r.rolled_back
        ),
        None => println!("data directory was shut down cleanly; nothing to recover"),
    }
    engine.shutdown()?;
    Ok(())
}

fn verify(dir: &std::path::Path) -> anyhow::Result<()> {
    let damaged = walrus_engine::verify_data_directory(dir)?;
    if damaged.is_empty() {
        println!("all pages verified");
        return Ok(());
    }
    for d in &damaged {
        eprintln!("{d}");
    }
    anyhow::bail!("{} problem(s) found", damaged.len())
}
