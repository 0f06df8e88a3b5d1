//! `walrus-bench`: walrus's test and benchmark machinery, kept out of the shipping
//! `walrus` binary. Engine micro-benchmarks (`micro`), PostgreSQL 15 side by side under
//! pgbench (`compare`), a TPC-B-like load through the engine (`demo`), and the crash
//! tests' child and checker (`tpcb-run`, `tpcb-check`) with the I/O hooks that tear a
//! page write, journal what a power cut would lose, or fail an operation (`hooks`), and
//! `powercut`, which applies such a journal to a data directory.

#![forbid(unsafe_code)]

mod compare;
mod hooks;
mod micro;
mod tpcb;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "walrus-bench",
    version,
    about = "walrus's benchmarks and crash-test machinery (not part of the server)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Engine micro-benchmarks (group commit, WAL insert, buffer hits, B-tree lookups,
    /// recovery replay); prints a Markdown table.
    Micro(micro::MicroArgs),
    /// PostgreSQL 15 and walrus side by side under the same pgbench, one scenario per
    /// seed paper; writes a Markdown report and SVG charts.
    Compare(Box<compare::CompareArgs>),
    /// Open a data directory (creating it if missing, recovering it if it crashed), run
    /// a TPC-B-like load through the engine, and shut down cleanly.
    Demo {
        #[arg(long, default_value = "walrus-data")]
        data: PathBuf,
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        #[arg(long, default_value_t = 8)]
        threads: usize,
    },
    /// TPC-B-like workload through the engine API (the crash tests' child).
    TpcbRun(tpcb::RunArgs),
    /// Recover a data directory and check the TPC-B invariants and acknowledged commits.
    TpcbCheck(tpcb::CheckArgs),
    /// Apply a power-loss journal written by `tpcb-run --powerloss-journal`: undo every
    /// write, creation and rename that no sync had made durable when the process died.
    Powercut(hooks::PowercutArgs),
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
        Command::Micro(a) => micro::run(a),
        Command::Compare(a) => compare::run(*a),
        Command::Demo {
            data,
            seconds,
            threads,
        } => tpcb::demo(&data, seconds, threads),
        Command::TpcbRun(a) => tpcb::run(a),
        Command::TpcbCheck(a) => tpcb::check(a),
        Command::Powercut(a) => hooks::powercut(a),
    };
    if let Err(e) = result {
        eprintln!("walrus-bench: error: {e:#}");
        std::process::exit(1);
    }
}
