//! Table activity counters across a clean restart (PostgreSQL's `pg_stat/pgstat.stat`).
//!
//! A clean shutdown writes every table's counters to `table_stats` in the data
//! directory; the next open reads them back and removes the file. After a crash the file
//! is absent (removed at the previous open), so the counters start from zero, as
//! PostgreSQL's do after crash recovery. The file is advisory: a damaged one is reported
//! and ignored, never an error that stops the engine.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use walrus_base::RelFileId;

use super::Engine;
use crate::access::heap::activity::ActivitySnapshot;
use crate::error::{Error, Result};

const FILE: &str = "table_stats";
const HEADER: &str = "walrus table stats v3";
/// The previous formats (v2: no scan counters; v1: no analyze counters either), still
/// read.
const HEADER_V2: &str = "walrus table stats v2";
const HEADER_V1: &str = "walrus table stats v1";

/// Times as nanoseconds since the Unix epoch (0: never), exact until the year 2554.
fn nanos(t: Option<SystemTime>) -> u64 {
    t.and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as u64)
}

fn time(ns: u64) -> Option<SystemTime> {
    (ns > 0).then(|| UNIX_EPOCH + Duration::from_nanos(ns))
}

/// One line per table: relfile and the twenty-one counters (the rows last counted as
/// `n + 1`, 0 for never).
fn encode(rows: &[(RelFileId, ActivitySnapshot)]) -> String {
    let mut out = format!("{HEADER}\n");
    for (r, a) in rows {
        let _ = writeln!(
            out,
            "{} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {}",
            r.0,
            a.inserted,
            a.updated,
            a.hot_updated,
            a.deleted,
            a.live,
            a.dead,
            a.vacuums,
            a.autovacuums,
            nanos(a.last_vacuum),
            nanos(a.last_autovacuum),
            a.mod_since_analyze,
            a.counted.map_or(0, |n| n.saturating_add(1)),
            a.analyzes,
            a.autoanalyzes,
            nanos(a.last_analyze),
            nanos(a.last_autoanalyze),
            a.seq_scans,
            a.seq_tup_read,
            a.idx_scans,
            a.idx_tup_fetch,
            a.ins_since_vacuum
        );
    }
    out
}

fn decode(text: &str) -> std::result::Result<Vec<(RelFileId, ActivitySnapshot)>, String> {
    let mut lines = text.lines();
    let fields = match lines.next() {
        Some(HEADER) => 22,
        Some(HEADER_V2) => 17,
        Some(HEADER_V1) => 11,
        _ => return Err("unknown header".into()),
    };
    lines
        .enumerate()
        .map(|(i, line)| {
            let v: Vec<u64> = line
                .split(' ')
                .map(|f| f.parse::<u64>())
                .collect::<std::result::Result<_, _>>()
                .map_err(|e| format!("line {}: {e}", i + 2))?;
            if v.len() != fields {
                return Err(format!(
                    "line {}: {} fields, expected {fields}",
                    i + 2,
                    v.len()
                ));
            }
            let Some(&[r, ins, upd, hot, del, live, dead, vac, avac, lv, lav]) = v.get(..11) else {
                return Err(format!("line {}: too few fields", i + 2));
            };
            // A v1 line has no analyze counters: zero, never analyzed; a v1 or v2 line
            // has no scan or inserts-since-vacuum counters: zero.
            let analyze = |k: usize| v.get(11 + k).copied().unwrap_or(0);
            let scans = |k: usize| v.get(17 + k).copied().unwrap_or(0);
            let relfile = u32::try_from(r).map_err(|_| format!("line {}: relfile", i + 2))?;
            Ok((
                RelFileId(relfile),
                ActivitySnapshot {
                    inserted: ins,
                    updated: upd,
                    hot_updated: hot,
                    deleted: del,
                    live,
                    dead,
                    vacuums: vac,
                    autovacuums: avac,
                    last_vacuum: time(lv),
                    last_autovacuum: time(lav),
                    mod_since_analyze: analyze(0),
                    counted: analyze(1).checked_sub(1),
                    analyzes: analyze(2),
                    autoanalyzes: analyze(3),
                    last_analyze: time(analyze(4)),
                    last_autoanalyze: time(analyze(5)),
                    seq_scans: scans(0),
                    seq_tup_read: scans(1),
                    idx_scans: scans(2),
                    idx_tup_fetch: scans(3),
                    ins_since_vacuum: scans(4),
                },
            ))
        })
        .collect()
}

impl Engine {
    /// At a clean shutdown: saves the counters of every table in the catalog.
    pub(super) fn save_table_stats(&self) -> Result<()> {
        let view = self.catalog_view()?;
        let rows: Vec<(RelFileId, ActivitySnapshot)> = view
            .tables
            .values()
            .map(|t| (t.relfile, self.table_activity(t)))
            .collect();
        let dir = &self.inner.dir;
        let tmp = dir.join(format!("{FILE}.tmp"));
        std::fs::write(&tmp, encode(&rows))
            .map_err(|e| Error::io("write table statistics", tmp.display(), e))?;
        std::fs::rename(&tmp, dir.join(FILE))
            .map_err(|e| Error::io("rename table statistics", tmp.display(), e))
    }

    /// At open: restores the counters a clean shutdown saved (`crashed`: discards them)
    /// and removes the file either way.
    pub(super) fn load_table_stats(&self, crashed: bool) {
        let path = self.inner.dir.join(FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(e) => {
                tracing::warn!("ignoring table statistics file {}: {e}", path.display());
                let _ = std::fs::remove_file(&path);
                return;
            }
        };
        let _ = std::fs::remove_file(&path);
        if crashed {
            return;
        }
        let rows = match decode(&text) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(
                    "ignoring damaged table statistics file {}: {e}",
                    path.display()
                );
                return;
            }
        };
        let Ok(view) = self.catalog_view() else {
            return;
        };
        for (relfile, a) in rows {
            if let Some(t) = view.tables.values().find(|t| t.relfile == relfile) {
                self.inner.rel(t.relfile, t.fillfactor).activity.restore(&a);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_round_trip_and_damage_is_refused() {
        let a = ActivitySnapshot {
            inserted: 10,
            updated: 4,
            hot_updated: 3,
            deleted: 2,
            live: 8,
            dead: 6,
            vacuums: 1,
            autovacuums: 7,
            last_vacuum: None,
            last_autovacuum: time(1_763_900_000_123_456_789),
            mod_since_analyze: 12,
            counted: Some(0),
            analyzes: 2,
            autoanalyzes: 5,
            last_analyze: time(1_763_900_000_000_000_001),
            last_autoanalyze: None,
            seq_scans: 9,
            seq_tup_read: 900,
            idx_scans: 13,
            idx_tup_fetch: 17,
            ins_since_vacuum: 19,
        };
        let text = encode(&[(RelFileId(16384), a.clone())]);
        assert_eq!(decode(&text).unwrap(), vec![(RelFileId(16384), a)]);
        assert!(decode("something else\n").is_err());
        assert!(decode(&format!("{HEADER}\n1 2 3\n")).is_err());
        assert!(decode(&format!("{HEADER}\n1 2 3 4 5 6 7 8 9 10 x\n")).is_err());
        assert!(decode(&format!("{HEADER}\n1 2 3 4 5 6 7 8 9 10 11\n")).is_err());
        // The previous format still reads, never analyzed.
        let v1 = decode(&format!("{HEADER_V1}\n16384 1 2 3 4 5 6 7 8 9 10\n")).unwrap();
        assert_eq!(
            (
                v1[0].1.inserted,
                v1[0].1.analyzes,
                v1[0].1.last_analyze,
                v1[0].1.counted
            ),
            (1, 0, None, None)
        );
        // v2: analyze counters, no scan counters.
        let v2 = decode(&format!(
            "{HEADER_V2}\n16384 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n"
        ))
        .unwrap();
        assert_eq!(
            (v2[0].1.analyzes, v2[0].1.seq_scans, v2[0].1.idx_tup_fetch),
            (13, 0, 0)
        );
    }
}
