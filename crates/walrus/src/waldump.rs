//! `walrus waldump`: reads a data directory's WAL without starting the engine, like
//! PostgreSQL's pg_waldump — one line per record, or `--stats`: count and bytes per
//! record kind, split into record bodies and full-page images. It is how the WAL volume
//! per transaction (compared with PostgreSQL's in BENCHMARKS.md) is taken apart.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context;
use walrus_base::Lsn;
use walrus_engine::storage::control::ControlFile;
use walrus_engine::wal::reader::{EndReason, WalReader};
use walrus_engine::wal::record::DecodedRecord;
use walrus_engine::wal::segment::{Segments, SyncMethod};
use walrus_engine::xlog::kind_name;

#[derive(clap::Args)]
pub struct WaldumpArgs {
    /// Data directory.
    #[arg(default_value = "walrus-data")]
    pub dir: PathBuf,
    /// First record to read (`X/Y` or a byte position); default: the latest checkpoint's
    /// redo LSN (the oldest WAL recovery would need).
    #[arg(long)]
    pub start: Option<String>,
    /// Print totals per record kind instead of one line per record.
    #[arg(long)]
    pub stats: bool,
    /// Stop after this many records.
    #[arg(long)]
    pub limit: Option<u64>,
}

/// Totals for one record kind.
#[derive(Default)]
struct KindTotals {
    count: u64,
    bytes: u64,
    image_bytes: u64,
    images: u64,
}

pub fn run(a: WaldumpArgs) -> anyhow::Result<()> {
    let control = ControlFile::open(&a.dir)
        .with_context(|| format!("opening the control file of {}", a.dir.display()))?;
    let cd = control.data().clone();
    let start = match &a.start {
        Some(s) => parse_lsn(s).with_context(|| format!("invalid --start \"{s}\""))?,
        None => cd.redo_lsn,
    };
    let segs = Segments::new(&a.dir, cd.wal_segment_size, SyncMethod::None)?;
    let mut reader = WalReader::new(&segs, start);
    let mut kinds: BTreeMap<&'static str, KindTotals> = BTreeMap::new();
    let mut n = 0u64;
    while a.limit.is_none_or(|l| n < l) {
        let Some(rec) = reader.next_record()? else {
            break;
        };
        n += 1;
        let (images, image_bytes) = image_totals(&rec);
        if a.stats {
            let k = kinds.entry(kind_name(rec.rmgr, rec.info)).or_default();
            k.count += 1;
            k.bytes += rec.total_len as u64;
            k.images += images;
            k.image_bytes += image_bytes;
        } else {
            println!("{}", describe(&rec));
        }
    }
    if a.stats {
        print_stats(&kinds);
    }
    let why = match &reader.end {
        EndReason::NoRecord | EndReason::NotYet => "end of WAL".to_string(),
        EndReason::Invalid(w) => format!("end of valid WAL ({w})"),
        EndReason::MissingSegment(s) => format!("segment {s} is missing"),
    };
    eprintln!(
        "read {n} records from {start} to {} ({why})",
        reader.position()
    );
    Ok(())
}

fn image_totals(rec: &DecodedRecord) -> (u64, u64) {
    rec.blocks
        .iter()
        .filter_map(|b| b.image.as_ref())
        .fold((0, 0), |(n, bytes), i| {
            (n + 1, bytes + i.bytes.len() as u64)
        })
}

fn describe(rec: &DecodedRecord) -> String {
    let mut line = format!(
        "lsn {} prev {} len {:>5} xid {:>8} {:<22}",
        rec.lsn,
        rec.prev,
        rec.total_len,
        rec.xid.0,
        kind_name(rec.rmgr, rec.info)
    );
    for b in &rec.blocks {
        line.push_str(&format!(
            " blk {}/{} data {}",
            b.page.relfile.0,
            b.page.block.0,
            b.data.len()
        ));
        if let Some(i) = &b.image {
            line.push_str(&format!(" image {}", i.bytes.len()));
        }
    }
    if !rec.main.is_empty() {
        line.push_str(&format!(" main {}", rec.main.len()));
    }
    line
}

fn print_stats(kinds: &BTreeMap<&'static str, KindTotals>) {
    let total: u64 = kinds.values().map(|k| k.bytes).sum::<u64>().max(1);
    println!("| record kind | count | bytes | mean bytes | of which page images | share of WAL |");
    println!("|---|---|---|---|---|---|");
    for (name, k) in kinds {
        println!(
            "| {name} | {} | {} | {:.0} | {} ({} images) | {:.1}% |",
            k.count,
            k.bytes,
            k.bytes as f64 / k.count.max(1) as f64,
            k.image_bytes,
            k.images,
            100.0 * k.bytes as f64 / total as f64
        );
    }
    let count: u64 = kinds.values().map(|k| k.count).sum();
    let images: u64 = kinds.values().map(|k| k.image_bytes).sum();
    println!(
        "| total | {count} | {total} | {:.0} | {images} | 100% |",
        total as f64 / count.max(1) as f64
    );
}

/// `X/Y` (PostgreSQL's LSN notation, hex) or a plain decimal byte position.
fn parse_lsn(s: &str) -> anyhow::Result<Lsn> {
    if let Some((hi, lo)) = s.split_once('/') {
        let hi = u64::from_str_radix(hi, 16)?;
        let lo = u64::from_str_radix(lo, 16)?;
        anyhow::ensure!(
            lo <= u32::MAX as u64,
            "the part after '/' has more than 8 hex digits"
        );
        return Ok(Lsn(hi << 32 | lo));
    }
    Ok(Lsn(s.parse()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_postgres_and_decimal_lsns() {
        assert_eq!(parse_lsn("0/16B3748").unwrap(), Lsn(0x16B3748));
        assert_eq!(parse_lsn("1/0").unwrap(), Lsn(1 << 32));
        assert_eq!(parse_lsn("4096").unwrap(), Lsn(4096));
        assert!(parse_lsn("0/1FFFFFFFF").is_err());
        assert!(parse_lsn("x/1").is_err());
    }
}
