//! Replay-rate calibration (`recovery_time_target`, DESIGN §5).
//!
//! The page writers turn `recovery_time_target` into a redo lag in bytes with a replay
//! rate. A directory's own crash recoveries measure it; before the first one, `walrus
//! init` (and `walrus serve` creating a directory) measures it here instead of trusting a
//! constant: a scratch data directory inside the new one, on the same file system, with
//! the same `page_protection`, gets a pgbench-like load (a table with a primary key, then
//! random single-row updates) of [`CALIBRATION_WAL_BYTES`] of WAL after a checkpoint,
//! is crashed (no shutdown checkpoint, dirty pages lost), and reopened: its recovery —
//! end-of-WAL scan plus replay, what a restart pays — gives bytes per second, which goes
//! into the real directory's control file marked "calibrated". The first real recovery
//! that replays enough WAL replaces it with a measured rate.
//!
//! The scratch directory syncs nothing (its WAL sync method is `none`): only replay is
//! timed, and replay reads what the page cache holds, as a restart after a process crash
//! does.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::access::datum::{Datum, TypeId};
use crate::catalog::ColumnDef;
use crate::error::{Error, Result};
use crate::settings::{default_config_with, Settings};
use crate::storage::control::ControlFile;

use super::checkpoint::{CheckpointReason, RateSource, MEASURE_MIN_BYTES};
use super::{Engine, Isolation};

/// WAL the synthetic crash replays: well above [`MEASURE_MIN_BYTES`], small enough that
/// init stays around a second.
pub const CALIBRATION_WAL_BYTES: u64 = 12 << 20;
/// Rows of the calibration table (about 3 MB of heap, a 64-page-or-so index).
const TABLE_ROWS: i32 = 20_000;
/// Name of the scratch directory inside the data directory while calibration runs.
pub const SCRATCH_DIR: &str = "replay_calibration.tmp";

/// What a calibration measured.
#[derive(Clone, Copy, Debug)]
pub struct Calibration {
    /// WAL the synthetic recovery replayed.
    pub replayed_bytes: u64,
    /// The reopen that recovered it, wall time (the rate counts only its end-of-WAL scan
    /// and replay).
    pub took: Duration,
    /// The rate the synthetic recovery replayed at.
    pub bytes_per_sec: u64,
    /// The restart's part that does not grow with the WAL.
    pub fixed_ms: u64,
    /// The rate recorded for planning: [`Calibration::bytes_per_sec`] divided by
    /// [`CALIBRATION_MARGIN`].
    pub planned_bytes_per_sec: u64,
}

/// The calibrated rate is planned with at a half. Replay speed depends on the WAL's
/// pages as much as on the machine: the synthetic load's small table replays from a warm
/// pool, a crash of pgbench at scale 10 reads most pages back from the OS, and the
/// machine may be busier at the crash than at `init`. Measured: calibrated 59.7 MB/s, the
/// first real crash then replayed at ~30 MB/s and overshot a 2 s target by 46% (the
/// engine test's load, closer to the synthetic one, replayed faster than calibrated).
/// `recovery_time_target` is a ceiling, so until a crash under the real load measures
/// the real rate, the plan errs toward restarting early.
pub const CALIBRATION_MARGIN: u64 = 2;

impl Engine {
    /// Measures this machine's WAL replay rate for the data directory `dir` (created by
    /// [`Engine::init`], not open) and records it in its control file as calibrated.
    /// `overrides` (TOML) are applied over the directory's walrus.toml, as `walrus serve
    /// --config` does, so the calibration runs with the page protection the server will.
    pub fn calibrate_replay_rate(dir: &Path, overrides: Option<&str>) -> Result<Calibration> {
        let mut settings = Settings::load(dir)?;
        if let Some(text) = overrides {
            settings.apply_toml(text)?;
            settings.resolve_page_protection(dir)?;
        }
        let scratch = dir.join(SCRATCH_DIR);
        remove_scratch(&scratch)?;
        let config = scratch_config(&settings);
        // The scratch engine's own log (its crash recovery above all) would read as if
        // the real directory had crashed: silenced on this thread, where it is opened,
        // recovered and shut down.
        let measured =
            tracing::subscriber::with_default(tracing::subscriber::NoSubscriber::default(), || {
                Engine::init(&scratch, Some(&config)).and_then(|()| crash_and_replay(&scratch))
            });
        // The scratch directory goes whatever happened; a failure to remove it is
        // reported only if the calibration itself worked.
        let removed = remove_scratch(&scratch);
        let cal = measured?;
        removed?;
        let mut control = ControlFile::open(dir)?;
        let mut d = control.data().clone();
        d.replay_rate_bps = cal.planned_bytes_per_sec;
        d.replay_fixed_ms = u32::try_from(cal.fixed_ms).unwrap_or(u32::MAX);
        d.replay_rate_calibrated = true;
        control.update(d)?;
        Ok(cal)
    }
}

fn remove_scratch(scratch: &Path) -> Result<()> {
    match std::fs::remove_dir_all(scratch) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(
            "remove calibration directory",
            scratch.display(),
            e,
        )),
    }
}

/// The scratch directory's settings: the real one's page protection (what replay
/// restores differs by mode), no syncs, no background work that would move the redo
/// point during the load.
fn scratch_config(real: &Settings) -> String {
    let protection = format!("\"{}\"", real.page_protection.name());
    default_config_with(
        16 << 20,
        &[
            ("page_protection", &protection),
            ("wal_sync_method", "\"none\""),
            ("shared_buffers", "\"32MB\""),
            ("max_wal_size", "\"1GB\""),
            ("checkpoint_timeout", "\"1h\""),
            ("recovery_time_target", "0"),
            ("autovacuum", "\"off\""),
        ],
    )
}

/// Loads the scratch directory, crashes it, reopens it (recovery) and returns the
/// rate that recovery measured.
fn crash_and_replay(scratch: &Path) -> Result<Calibration> {
    let (e, _) = Engine::open(scratch)?;
    let col = |name: &str, ty| ColumnDef {
        name: name.into(),
        ty,
        not_null: true,
        typmod: -1,
        declared: Default::default(),
    };
    let mut t = e.begin(Isolation::ReadCommitted);
    t.create_table(
        "calibration",
        vec![
            col("id", TypeId::Int4),
            col("balance", TypeId::Int4),
            col("filler", TypeId::Text),
        ],
        100,
    )?;
    t.create_index("calibration", "calibration_pkey", &[0], true, true)?;
    t.commit()?;
    let def = e.catalog_view()?.table("calibration")?;
    let filler = " ".repeat(84);
    for first in (0..TABLE_ROWS).step_by(1000) {
        let rows: Vec<Vec<Datum>> = (first..(first + 1000).min(TABLE_ROWS))
            .map(|id| vec![Datum::Int4(id), Datum::Int4(0), Datum::Text(filler.clone())])
            .collect();
        let mut t = e.begin(Isolation::ReadCommitted);
        t.insert_many(&def, &rows)?;
        t.commit()?;
    }
    e.checkpoint(CheckpointReason::Requested)?;
    let start = e.wal().insert_lsn();
    let mut rng = 0x2545_f491_4f6c_dd1d_u64;
    while e.wal().insert_lsn().distance_from(start) < CALIBRATION_WAL_BYTES {
        let mut t = e.begin(Isolation::ReadCommitted);
        for _ in 0..10 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let id = (rng % TABLE_ROWS as u64) as i32;
            let Some((tid, mut values)) = t
                .index_lookup(&def, &def.indexes[0], &[Datum::Int4(id)])?
                .pop()
            else {
                return Err(Error::Internal(format!("calibration row {id} not found")));
            };
            if let Datum::Int4(b) = values[1] {
                values[1] = Datum::Int4(b.wrapping_add(1));
            }
            t.update(&def, tid, &values)?;
        }
        t.commit()?;
    }
    e.shutdown_immediate();
    drop(e);
    let started = Instant::now();
    let (e, report) = Engine::open(scratch)?;
    let took = started.elapsed();
    let rate = e.flush_detail().replay_rate;
    e.shutdown()?;
    let replayed = report.map_or(0, |r| r.replayed_bytes);
    if rate.source != RateSource::Measured || replayed < MEASURE_MIN_BYTES {
        return Err(Error::Internal(format!(
            "replay-rate calibration replayed {replayed} bytes, too few to measure"
        )));
    }
    Ok(Calibration {
        replayed_bytes: replayed,
        took,
        bytes_per_sec: rate.bytes_per_sec,
        fixed_ms: rate.fixed_ms,
        planned_bytes_per_sec: (rate.bytes_per_sec / CALIBRATION_MARGIN).max(1),
    })
}
