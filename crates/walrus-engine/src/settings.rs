//! Engine settings, spelled as PostgreSQL spells them, read from `walrus.toml` in the
//! data directory. Sizes accept PostgreSQL units (`kB`, `MB`, `GB`, or a number of 8 KiB
//! pages), durations `ms`, `s`, `min`, `h`.

use std::path::Path;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::protect::PLANNED_MODES;
use crate::wal::segment::SyncMethod;

/// The modes themselves are torn-page protection's (`protect`); re-exported here beside
/// the setting that chooses one.
pub use crate::protect::PageProtection;

#[derive(Clone, Debug)]
pub struct Settings {
    pub shared_buffers_pages: usize,
    pub wal_buffers_bytes: usize,
    pub wal_segment_size: u64,
    pub max_wal_size_bytes: u64,
    pub checkpoint_timeout: Duration,
    pub checkpoint_completion_target: f64,
    pub wal_sync_method: SyncMethod,
    /// Where WAL segments live when not in the data directory (PostgreSQL's
    /// `initdb --waldir`): fixed by `walrus init`, which makes `data_dir/wal` a symbolic
    /// link to it; a later open checks that the link still points there.
    pub wal_directory: Option<std::path::PathBuf>,
    /// The libpmem `wal_sync_method = pmem` loads (a name `dlopen` searches for, or a
    /// path, e.g. to a PMDK built from source).
    pub wal_pmem_library: String,
    pub page_protection: PageProtection,
    /// `atomic` or `auto` as written; resolved against the device at init and open.
    pub page_protection_requested: Option<String>,
    /// Pages per double-write batch (one slot of the double-write file).
    pub dwb_batch_pages: usize,
    pub wal_compression: bool,
    pub synchronous_commit: bool,
    /// The WAL writer's sleep between rounds (PostgreSQL's `wal_writer_delay`).
    pub wal_writer_delay: Duration,
    /// Unflushed WAL that wakes the WAL writer early (`wal_writer_flush_after`).
    pub wal_writer_flush_after_bytes: u64,
    pub pagewriter_threads: usize,
    /// An explicit, shutdown or switchover checkpoint should complete within this
    /// (MogDB's range, 5..60 s): page writers join in as the deadline nears.
    pub checkpoint_target_time: Duration,
    /// Keep the estimated crash-recovery time under this (zero: off). Page writers
    /// flush the dirty queue's head fast enough (incremental checkpoints only).
    pub recovery_time_target: Duration,
    /// Page writers may use larger batches and every thread for a checkpoint (MogDB).
    pub extreme_flush_dirty_page: bool,
    /// Checkpoints take their redo point from the dirty-page queue. `None`: decided
    /// by `page_protection` (on unless `fpw`).
    pub incremental_checkpoint: Option<bool>,
    pub bgwriter_delay: Duration,
    pub clog_buffers: usize,
    /// Autovacuum (PostgreSQL's settings and defaults; see `engine/vacuum.rs`).
    pub autovacuum: bool,
    pub autovacuum_naptime: Duration,
    pub autovacuum_vacuum_threshold: u64,
    pub autovacuum_vacuum_scale_factor: f64,
    /// Autovacuum also vacuums a table once the rows inserted since its last vacuum
    /// exceed `autovacuum_vacuum_insert_threshold + autovacuum_vacuum_insert_scale_factor
    /// × reltuples` (PostgreSQL 13's rule: an insert-only table has no dead rows, but its
    /// pages must still be marked settled and frozen). `None`: off (PostgreSQL's -1).
    pub autovacuum_vacuum_insert_threshold: Option<u64>,
    pub autovacuum_vacuum_insert_scale_factor: f64,
    /// Autovacuum analyzes a table once the rows changed since its last ANALYZE exceed
    /// `autovacuum_analyze_threshold + autovacuum_analyze_scale_factor × reltuples`
    /// (the rows its last vacuum or analyze counted).
    pub autovacuum_analyze_threshold: u64,
    pub autovacuum_analyze_scale_factor: f64,
    pub autovacuum_vacuum_cost_delay: Duration,
    pub autovacuum_vacuum_cost_limit: u64,
    /// Xids the commit-status log may hold before autovacuum runs a freeze pass over
    /// every table so the oldest segments can be truncated (PostgreSQL's name; walrus's
    /// 64-bit xids never wrap, so this bounds disk use, not a wraparound horizon).
    pub autovacuum_freeze_max_age: u64,
    /// Cost-based delay of manual VACUUM (off by default, as in PostgreSQL).
    pub vacuum_cost_delay: Duration,
    pub vacuum_cost_limit: u64,
    /// Everything else in the file (server settings such as `port`), kept for `SHOW`.
    pub extra: Vec<(String, String)>,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            shared_buffers_pages: 16384, // 128 MB
            wal_buffers_bytes: 16 << 20,
            wal_segment_size: 64 << 20,
            max_wal_size_bytes: 1 << 30,
            checkpoint_timeout: Duration::from_secs(300),
            checkpoint_completion_target: 0.9,
            wal_sync_method: SyncMethod::Fdatasync,
            wal_directory: None,
            wal_pmem_library: crate::wal::pmem::LIBRARY_DEFAULT.to_string(),
            page_protection: PageProtection::Fpw,
            page_protection_requested: None,
            dwb_batch_pages: 64,
            wal_compression: false,
            synchronous_commit: true,
            wal_writer_delay: Duration::from_millis(200),
            wal_writer_flush_after_bytes: 1 << 20,
            pagewriter_threads: 1,
            checkpoint_target_time: Duration::from_secs(30),
            recovery_time_target: Duration::from_secs(60),
            extreme_flush_dirty_page: false,
            incremental_checkpoint: None,
            bgwriter_delay: Duration::from_millis(10),
            clog_buffers: 32,
            autovacuum: true,
            autovacuum_naptime: Duration::from_secs(60),
            autovacuum_vacuum_threshold: 50,
            autovacuum_vacuum_scale_factor: 0.2,
            autovacuum_vacuum_insert_threshold: Some(1000),
            autovacuum_vacuum_insert_scale_factor: 0.2,
            autovacuum_analyze_threshold: 50,
            autovacuum_analyze_scale_factor: 0.1,
            autovacuum_vacuum_cost_delay: Duration::from_millis(2),
            autovacuum_vacuum_cost_limit: 200,
            autovacuum_freeze_max_age: 200_000_000,
            vacuum_cost_delay: Duration::ZERO,
            vacuum_cost_limit: 200,
            extra: Vec::new(),
        }
    }
}

pub const CONFIG_FILE: &str = "walrus.toml";

/// walrus.toml settings the engine keeps for the layers above it (`Settings::extra`).
pub const SERVER_SETTINGS: [&str; 7] = [
    "port",
    "listen_addresses",
    "unix_socket_directories",
    "max_connections",
    "password",
    "authentication_timeout",
    "statement_memory_limit",
];

/// The commented configuration file `walrus init` writes.
/// [`default_config_text`] with the settings `sets` (name, TOML value) replacing the
/// defaults' lines or added: configurations made by code (init's calibration, tests).
pub fn default_config_with(segment_size: u64, sets: &[(&str, &str)]) -> String {
    let mut text: String = default_config_text(segment_size)
        .lines()
        .filter(|line| {
            let name = line.split(" = ").next().unwrap_or("");
            !sets.iter().any(|(n, _)| *n == name)
        })
        .map(|l| format!("{l}\n"))
        .collect();
    for (n, v) in sets {
        text.push_str(&format!("{n} = {v}\n"));
    }
    text
}

pub fn default_config_text(segment_size: u64) -> String {
    format!(
        r#"# walrus configuration. Setting names follow PostgreSQL's where one exists.
# Sizes: kB, MB, GB (or a plain number of 8 KiB pages); durations: ms, s, min, h.

# Buffer pool size (PostgreSQL: shared_buffers).
shared_buffers = "128MB"
# WAL buffer (ring) size.
wal_buffers = "16MB"
# WAL segment size; fixed when the data directory is created ({seg} here).
wal_segment_size = "{seg}"
# A checkpoint starts when this much WAL was written since the last one (half of it).
max_wal_size = "1GB"
# ... or when this much time has passed.
checkpoint_timeout = "5min"
# Spread a timed checkpoint's writes over this fraction of checkpoint_timeout.
checkpoint_completion_target = 0.9
# fdatasync (default) | fsync | open_datasync | none (tests only: no durability) |
# pmem (WAL segments mapped with libpmem on a DAX file system: a commit is a pmem_drain,
# no system call; needs libpmem1 and wal_directory on persistent memory)
wal_sync_method = "fdatasync"
# Keep WAL outside the data directory, e.g. on a DAX file system for pmem. Fixed when the
# data directory is created (`walrus init --wal-directory`); empty: DIR/wal.
wal_directory = ""
# The libpmem wal_sync_method = pmem loads (Debian: package libpmem1).
wal_pmem_library = "libpmem.so.1"
# Torn-page protection: fpw (full-page images in WAL) | dwb (batched double-write
# buffer: no images) | atomic (RWF_ATOMIC page writes, where the device makes 8 KiB
# writes atomic; refused elsewhere) | auto (atomic if possible, else dwb) | none (detect
# only)
page_protection = "fpw"
# dwb: pages per double-write batch (1..1024); the file "dwb" holds 8 such slots.
dwb_batch_pages = 64
# Compress full-page images: off | lz4
wal_compression = "off"
# Wait for the WAL flush at commit. With "off" a commit returns before its WAL is
# durable; the WAL writer flushes it within 3 x wal_writer_delay.
synchronous_commit = "on"
# The WAL writer flushes every wal_writer_delay (1ms..10s), and early once
# wal_writer_flush_after of WAL is waiting (0: at every asynchronous commit).
wal_writer_delay = "200ms"
wal_writer_flush_after = "1MB"
# Page-writer threads and their sleep between rounds.
pagewriter_threads = 1
bgwriter_delay = "10ms"
# Checkpoints: with page_protection dwb, atomic or none they are incremental (the redo point is
# the oldest change not yet written, advanced by the page writers; no I/O burst);
# incremental_checkpoint = off keeps classic checkpoints. fpw is always classic.
# incremental_checkpoint = "on"
# Page writers keep the estimated crash-recovery time under this (0: off; incremental
# checkpoints only; the replay rate is calibrated at init and measured at each recovery).
recovery_time_target = "60s"
# An explicit, shutdown or switchover checkpoint completes within this (5s..60s).
checkpoint_target_time = "30s"
# Let page writers use larger batches and every thread for such a checkpoint.
extreme_flush_dirty_page = "off"
# Commit-status log pages kept in memory.
clog_buffers = 32
# Autovacuum: every autovacuum_naptime, vacuum each table with more dead row versions
# than autovacuum_vacuum_threshold + autovacuum_vacuum_scale_factor * live rows,
# sleeping autovacuum_vacuum_cost_delay after each autovacuum_vacuum_cost_limit of work
# (a page visited costs 1, a page changed 20 more).
autovacuum = "on"
autovacuum_naptime = "1min"
autovacuum_vacuum_threshold = 50
autovacuum_vacuum_scale_factor = 0.2
# ... and each table with more rows inserted since its last vacuum than
# autovacuum_vacuum_insert_threshold + autovacuum_vacuum_insert_scale_factor * the rows its
# last vacuum or analyze counted (-1: never for inserts alone).
autovacuum_vacuum_insert_threshold = 1000
autovacuum_vacuum_insert_scale_factor = 0.2
# ... and analyze each table with more rows changed since its last ANALYZE than
# autovacuum_analyze_threshold + autovacuum_analyze_scale_factor * the rows its
# last vacuum or analyze counted.
autovacuum_analyze_threshold = 50
autovacuum_analyze_scale_factor = 0.1
autovacuum_vacuum_cost_delay = "2ms"
autovacuum_vacuum_cost_limit = 200
# When the commit-status log holds more transactions than this (256 KiB per million),
# autovacuum freezes every table and the next checkpoint deletes the old segments.
autovacuum_freeze_max_age = 200000000
# The same delay for manual VACUUM (0: none).
vacuum_cost_delay = "0ms"
vacuum_cost_limit = 200
# Server settings.
port = 5433
listen_addresses = "127.0.0.1"
# Directories (comma-separated) for the Unix-domain socket .s.PGSQL.<port>, PostgreSQL's
# default: `psql -h /tmp -p 5433` and `pgbench -h /tmp` connect through it, cheaper than
# loopback TCP. Empty: TCP only.
unix_socket_directories = "/tmp"
max_connections = 100
# With a password, every client authenticates with SCRAM-SHA-256 (plain text here, or
# PostgreSQL's stored form "SCRAM-SHA-256$4096:salt$StoredKey:ServerKey"); without one,
# connections are trusted (keep listen_addresses on loopback then).
# password = "secret"
"#,
        seg = format_size(segment_size)
    )
}

pub fn format_size(bytes: u64) -> String {
    if bytes.is_multiple_of(1 << 30) {
        format!("{}GB", bytes >> 30)
    } else if bytes.is_multiple_of(1 << 20) {
        format!("{}MB", bytes >> 20)
    } else {
        format!("{}kB", bytes >> 10)
    }
}

pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().ok()?;
    let mult = match unit.trim() {
        "" => 8192,
        "B" => 1,
        "kB" | "KB" | "k" => 1 << 10,
        "MB" | "M" => 1 << 20,
        "GB" | "G" => 1 << 30,
        "TB" => 1 << 40,
        _ => return None,
    };
    n.checked_mul(mult)
}

pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().ok()?;
    Some(match unit.trim() {
        "" | "s" => Duration::from_secs(n),
        "ms" => Duration::from_millis(n),
        "min" => Duration::from_secs(n * 60),
        "h" => Duration::from_secs(n * 3600),
        "us" => Duration::from_micros(n),
        _ => return None,
    })
}

fn parse_bool(s: &str) -> Option<bool> {
    match s.to_ascii_lowercase().as_str() {
        "on" | "true" | "yes" | "1" => Some(true),
        "off" | "false" | "no" | "0" => Some(false),
        _ => None,
    }
}

impl Settings {
    /// Applies one `name = value` pair; unknown names are kept in `extra`.
    pub fn set(&mut self, name: &str, value: &str) -> Result<()> {
        let bad = |what: &str| {
            Error::InvalidInput(format!(
                "invalid value for parameter \"{name}\": \"{value}\" ({what})"
            ))
        };
        match name {
            "shared_buffers" => {
                let b = parse_size(value).ok_or_else(|| bad("expected a size"))?;
                self.shared_buffers_pages = ((b / 8192) as usize).max(16);
            }
            "wal_buffers" => {
                self.wal_buffers_bytes =
                    parse_size(value).ok_or_else(|| bad("expected a size"))? as usize
            }
            "wal_segment_size" => {
                let b = parse_size(value).ok_or_else(|| bad("expected a size"))?;
                if !b.is_power_of_two() || !((1 << 20)..=(1 << 30)).contains(&b) {
                    return Err(bad("must be a power of two between 1MB and 1GB"));
                }
                self.wal_segment_size = b;
            }
            "max_wal_size" => {
                self.max_wal_size_bytes = parse_size(value).ok_or_else(|| bad("expected a size"))?
            }
            "checkpoint_timeout" => {
                self.checkpoint_timeout =
                    parse_duration(value).ok_or_else(|| bad("expected a duration"))?
            }
            "checkpoint_completion_target" => {
                let f: f64 = value.parse().map_err(|_| bad("expected a number"))?;
                if !(0.0..=1.0).contains(&f) {
                    return Err(bad("must be between 0 and 1"));
                }
                self.checkpoint_completion_target = f;
            }
            "wal_sync_method" => {
                self.wal_sync_method = SyncMethod::parse(value)
                    .ok_or_else(|| bad("expected fdatasync, fsync, open_datasync, pmem or none"))?
            }
            "wal_directory" => {
                self.wal_directory = match value.trim() {
                    "" => None,
                    v if Path::new(v).is_absolute() => Some(v.into()),
                    _ => return Err(bad("expected an absolute path, or empty")),
                }
            }
            "wal_pmem_library" => {
                if value.trim().is_empty() {
                    return Err(bad("expected a library name or path"));
                }
                self.wal_pmem_library = value.to_string();
            }
            "fsync" => {
                if !parse_bool(value).ok_or_else(|| bad("expected on or off"))? {
                    self.wal_sync_method = SyncMethod::None;
                }
            }
            "page_protection" => {
                self.page_protection_requested = None;
                self.page_protection = match PageProtection::from_name(value) {
                    Some(mode) => mode,
                    // Decided against the data directory's device when it is opened
                    // (`protect::atomic`): `atomic` taken where the device writes 8 KiB
                    // atomically, refused with its figures elsewhere; `auto` either way.
                    None if value == "atomic" || value == "auto" => {
                        self.page_protection_requested = Some(value.to_string());
                        PageProtection::Dwb
                    }
                    None if PLANNED_MODES.contains(&value) => {
                        return Err(Error::FeatureNotSupported(format!(
                            "page_protection = {value} is not built yet; use fpw, dwb, atomic or none"
                        )))
                    }
                    None => return Err(bad("expected fpw, dwb, none, atomic or auto")),
                }
            }
            "dwb_batch_pages" => {
                self.dwb_batch_pages = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=1024).contains(n))
                    .ok_or_else(|| bad("expected 1..1024"))?
            }
            "full_page_writes" => {
                self.page_protection =
                    if parse_bool(value).ok_or_else(|| bad("expected on or off"))? {
                        PageProtection::Fpw
                    } else {
                        PageProtection::None
                    }
            }
            "wal_compression" => {
                self.wal_compression = match value {
                    "lz4" | "on" => true,
                    "off" => false,
                    _ => return Err(bad("expected off or lz4")),
                }
            }
            "synchronous_commit" => {
                self.synchronous_commit =
                    parse_bool(value).ok_or_else(|| bad("expected on or off"))?
            }
            "pagewriter_threads" => {
                self.pagewriter_threads = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=16).contains(n))
                    .ok_or_else(|| bad("expected 1..16"))?
            }
            "checkpoint_target_time" => {
                self.checkpoint_target_time = parse_duration(value)
                    .filter(|d| (Duration::from_secs(5)..=Duration::from_secs(60)).contains(d))
                    .ok_or_else(|| bad("expected a duration between 5s and 60s"))?
            }
            "recovery_time_target" => {
                self.recovery_time_target = parse_duration(value)
                    .filter(|d| *d <= Duration::from_secs(3600))
                    .filter(|d| d.is_zero() || *d >= Duration::from_secs(1))
                    .ok_or_else(|| bad("expected 0 (off) or a duration between 1s and 1h"))?
            }
            "extreme_flush_dirty_page" => {
                self.extreme_flush_dirty_page =
                    parse_bool(value).ok_or_else(|| bad("expected on or off"))?
            }
            "incremental_checkpoint" => {
                self.incremental_checkpoint =
                    Some(parse_bool(value).ok_or_else(|| bad("expected on or off"))?)
            }
            "wal_writer_delay" => {
                // PostgreSQL's range: 1 ms to 10 s.
                self.wal_writer_delay = parse_duration(value)
                    .filter(|d| (Duration::from_millis(1)..=Duration::from_secs(10)).contains(d))
                    .ok_or_else(|| bad("expected a duration between 1ms and 10s"))?
            }
            "wal_writer_flush_after" => {
                // PostgreSQL's range: 0 to 2147483647 pages of 8 kB (0: flush at once).
                self.wal_writer_flush_after_bytes = parse_size(value)
                    .filter(|&b| b / 8192 <= i32::MAX as u64)
                    .ok_or_else(|| bad("expected a size (0 flushes at every commit)"))?
            }
            "bgwriter_delay" => {
                self.bgwriter_delay =
                    parse_duration(value).ok_or_else(|| bad("expected a duration"))?
            }
            "clog_buffers" => {
                self.clog_buffers = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (2..=1024).contains(n))
                    .ok_or_else(|| bad("expected 2..1024"))?
            }
            "autovacuum" => {
                self.autovacuum = parse_bool(value).ok_or_else(|| bad("expected on or off"))?
            }
            "autovacuum_naptime" => {
                self.autovacuum_naptime = parse_duration(value)
                    .filter(|d| {
                        *d >= Duration::from_millis(10) && *d <= Duration::from_secs(86_400)
                    })
                    .ok_or_else(|| bad("expected a duration between 10ms and 1 day"))?
            }
            "autovacuum_freeze_max_age" => {
                self.autovacuum_freeze_max_age = value
                    .parse::<u64>()
                    .ok()
                    .filter(|n| (100_000..=(1u64 << 62)).contains(n))
                    .ok_or_else(|| bad("expected 100000..4611686018427387904"))?
            }
            "autovacuum_vacuum_threshold" | "autovacuum_analyze_threshold" => {
                let n = value
                    .parse::<u64>()
                    .ok()
                    .filter(|n| *n <= i32::MAX as u64)
                    .ok_or_else(|| bad("expected 0..2147483647"))?;
                if name == "autovacuum_vacuum_threshold" {
                    self.autovacuum_vacuum_threshold = n;
                } else {
                    self.autovacuum_analyze_threshold = n;
                }
            }
            "autovacuum_vacuum_scale_factor"
            | "autovacuum_analyze_scale_factor"
            | "autovacuum_vacuum_insert_scale_factor" => {
                let f = value
                    .parse::<f64>()
                    .ok()
                    .filter(|f| (0.0..=100.0).contains(f))
                    .ok_or_else(|| bad("expected a number between 0 and 100"))?;
                match name {
                    "autovacuum_vacuum_scale_factor" => self.autovacuum_vacuum_scale_factor = f,
                    "autovacuum_analyze_scale_factor" => self.autovacuum_analyze_scale_factor = f,
                    _ => self.autovacuum_vacuum_insert_scale_factor = f,
                }
            }
            "autovacuum_vacuum_insert_threshold" => {
                // PostgreSQL's range: -1 (off) to INT_MAX.
                self.autovacuum_vacuum_insert_threshold = match value.parse::<i64>() {
                    Ok(-1) => None,
                    Ok(n) if (0..=i32::MAX as i64).contains(&n) => Some(n as u64),
                    _ => return Err(bad("expected -1 (off) or 0..2147483647")),
                }
            }
            "autovacuum_vacuum_cost_delay" | "vacuum_cost_delay" => {
                let d = parse_duration(value)
                    .filter(|d| *d <= Duration::from_millis(100))
                    .ok_or_else(|| bad("expected a duration between 0 and 100ms"))?;
                if name == "vacuum_cost_delay" {
                    self.vacuum_cost_delay = d;
                } else {
                    self.autovacuum_vacuum_cost_delay = d;
                }
            }
            "autovacuum_vacuum_cost_limit" | "vacuum_cost_limit" => {
                let n = value
                    .parse::<u64>()
                    .ok()
                    .filter(|n| (1..=10_000).contains(n))
                    .ok_or_else(|| bad("expected 1..10000"))?;
                if name == "vacuum_cost_limit" {
                    self.vacuum_cost_limit = n;
                } else {
                    self.autovacuum_vacuum_cost_limit = n;
                }
            }
            // Read by the layers above the engine (the server, the SQL layer).
            n if SERVER_SETTINGS.contains(&n) => {
                self.extra.retain(|(k, _)| k != name);
                self.extra.push((name.to_string(), value.to_string()));
            }
            // A name walrus does not implement is refused, never kept and ignored: a
            // misspelt or PostgreSQL-only setting would otherwise do nothing, silently.
            _ => {
                return Err(Error::InvalidInput(format!(
                    "unrecognized configuration parameter \"{name}\" (walrus implements the \
                     settings its walrus.toml lists)"
                )))
            }
        }
        Ok(())
    }

    /// Reads `walrus.toml` from `dir` (missing file: defaults).
    pub fn load(dir: &Path) -> Result<Settings> {
        let path = dir.join(CONFIG_FILE);
        let mut s = Settings::default();
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(s),
            Err(e) => return Err(Error::io("read configuration file", path.display(), e)),
        };
        s.apply_toml(&text).map_err(|e| {
            Error::InvalidInput(format!("configuration file {}: {e}", path.display()))
        })?;
        Ok(s)
    }

    pub fn apply_toml(&mut self, text: &str) -> Result<()> {
        let table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| Error::InvalidInput(e.to_string()))?;
        for (k, v) in table {
            let value = match v {
                toml::Value::String(s) => s,
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Float(f) => f.to_string(),
                toml::Value::Boolean(b) => {
                    if b {
                        "on".into()
                    } else {
                        "off".into()
                    }
                }
                other => {
                    return Err(Error::InvalidInput(format!(
                        "parameter \"{k}\" has unsupported value {other}"
                    )))
                }
            };
            self.set(&k, &value)?;
        }
        self.check_combination()
    }

    /// Checks settings that depend on each other (their order in the file is free).
    pub fn check_combination(&self) -> Result<()> {
        if self.incremental_checkpoint == Some(true)
            && !self.page_protection.allows_incremental_checkpoint()
        {
            return Err(Error::InvalidInput(format!(
                "incremental_checkpoint = on needs page_protection dwb, atomic or none: with {} the \
                 redo point must stay put between checkpoints, or every change would log a \
                 full-page image",
                self.page_protection.name()
            )));
        }
        Ok(())
    }

    /// Resolves `page_protection = atomic | auto` for data directory `dir`: `atomic` is
    /// taken where the device writes an 8 KiB page atomically and refused with what it
    /// reports elsewhere (`protect::atomic`); `auto` becomes `atomic` or `dwb`, logged
    /// with the probe's answer.
    pub fn resolve_page_protection(&mut self, dir: &Path) -> Result<()> {
        match self.page_protection_requested.as_deref() {
            Some("atomic") => {
                crate::protect::atomic::require_atomic(dir).map_err(Error::FeatureNotSupported)?;
                self.page_protection = PageProtection::Atomic;
                Ok(())
            }
            Some("auto") => {
                match crate::protect::atomic::probe(&dir.join("base")) {
                    Ok(s) if s.covers_page() => {
                        tracing::info!("page_protection = auto: using atomic ({})", s.describe());
                        self.page_protection = PageProtection::Atomic;
                    }
                    found => {
                        let found = found
                            .map(|s| s.describe())
                            .unwrap_or_else(|e| format!("probe failed: {e}"));
                        tracing::info!("page_protection = auto: using dwb ({found})");
                        self.page_protection = PageProtection::Dwb;
                    }
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Whether checkpoints are incremental (redo point from the dirty-page queue).
    pub fn incremental_checkpoints(&self) -> bool {
        self.incremental_checkpoint
            .unwrap_or_else(|| self.page_protection.allows_incremental_checkpoint())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_postgres_units() {
        assert_eq!(parse_size("128MB"), Some(128 << 20));
        assert_eq!(parse_size("16"), Some(16 * 8192));
        assert_eq!(parse_size("12 parsecs"), None);
        assert_eq!(parse_duration("5min"), Some(Duration::from_secs(300)));
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
    }

    #[test]
    fn default_file_parses_and_bad_values_are_clear() {
        let mut s = Settings::default();
        s.apply_toml(&default_config_text(16 << 20)).unwrap();
        assert_eq!(s.shared_buffers_pages, 16384);
        assert_eq!(s.wal_segment_size, 16 << 20);
        let err = s.set("wal_sync_method", "sometimes").unwrap_err();
        assert!(err.to_string().contains("wal_sync_method"), "{err}");
        let err = s.apply_toml("shared_buffers = [1, 2]").unwrap_err();
        assert!(err.to_string().contains("shared_buffers"), "{err}");
        assert!(s.set("page_protection", "standby").is_err());
        // Unknown and PostgreSQL-only names are refused, never kept and ignored.
        for name in ["checkpoint_timout", "fsnyc", "enable_double_write"] {
            let err = s.set(name, "on").unwrap_err();
            assert!(
                err.to_string()
                    .contains("unrecognized configuration parameter"),
                "{name}: {err}"
            );
        }
        // The checkpoint settings check their ranges.
        assert!(s.set("checkpoint_target_time", "2s").is_err());
        assert!(s.set("checkpoint_target_time", "61s").is_err());
        s.set("checkpoint_target_time", "10s").unwrap();
        assert!(s.set("recovery_time_target", "500ms").is_err());
        s.set("recovery_time_target", "0").unwrap();
        assert!(s.recovery_time_target.is_zero());
        assert!(s.set("extreme_flush_dirty_page", "maybe").is_err());
        s.set("port", "6000").unwrap();
        assert_eq!(s.extra.last().unwrap(), &("port".into(), "6000".into()));
        s.set("page_protection", "dwb").unwrap();
        assert!(s.set("dwb_batch_pages", "0").is_err());
        assert!(s.autovacuum && s.autovacuum_naptime == Duration::from_secs(60));
        assert_eq!(s.autovacuum_vacuum_cost_delay, Duration::from_millis(2));
        s.set("autovacuum_naptime", "250ms").unwrap();
        assert_eq!(s.autovacuum_naptime, Duration::from_millis(250));
        let err = s.set("autovacuum_naptime", "0").unwrap_err();
        assert!(err.to_string().contains("autovacuum_naptime"), "{err}");
        assert!(s.set("autovacuum_vacuum_scale_factor", "-1").is_err());
        assert!(s
            .set("autovacuum_vacuum_insert_scale_factor", "101")
            .is_err());
        assert!(s.set("autovacuum_vacuum_insert_threshold", "-2").is_err());
        s.set("autovacuum_vacuum_insert_threshold", "-1").unwrap();
        assert_eq!(s.autovacuum_vacuum_insert_threshold, None);
        s.set("autovacuum_vacuum_insert_threshold", "5").unwrap();
        assert_eq!(s.autovacuum_vacuum_insert_threshold, Some(5));
        assert!(s.set("autovacuum_vacuum_cost_limit", "0").is_err());
        assert_eq!(s.autovacuum_freeze_max_age, 200_000_000);
        s.set("autovacuum_freeze_max_age", "1000000").unwrap();
        assert_eq!(s.autovacuum_freeze_max_age, 1_000_000);
        assert!(s.set("autovacuum_freeze_max_age", "10").is_err());
    }
}
