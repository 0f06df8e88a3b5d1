#![doc = include_str!("README.md")]

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use walrus_base::{Lsn, PageId, RelFileId, Xid};

use crate::buffer::BufferPool;
use crate::error::{Error, Result};
use crate::storage::page;
use crate::txn::clog::XidStatus;
use crate::txn::TxnManager;
use crate::wal::reader::{EndReason, WalReader};
use crate::wal::record::{DecodedRecord, Rmgr};
use crate::wal::segment::Segments;
use crate::xlog;

/// The decision table per block reference belongs to torn-page protection (`protect`),
/// which decides how a block is repaired; the replay loop below carries it out.
/// Re-exported here, where it was first defined.
pub use crate::protect::{decide, BlockAction};

/// The end of valid WAL, found by a first pass that also checks the chain.
pub struct WalEnd {
    pub end: Lsn,
    pub last_start: Lsn,
    pub records: u64,
    pub reason: EndReason,
}

/// First pass: scans from `redo` to the end of valid WAL and makes sure the checkpoint
/// record at `checkpoint` is readable. Syncs every segment read, so WAL replayed onto
/// pages is durable before any of those pages can be written back.
pub fn find_end(segs: &Segments, redo: Lsn, checkpoint: Lsn) -> Result<WalEnd> {
    let mut r = WalReader::new(segs, redo);
    let mut records = 0;
    let mut saw_checkpoint = checkpoint < redo;
    while let Some(rec) = r.next_record()? {
        records += 1;
        if rec.lsn == checkpoint {
            saw_checkpoint = true;
        }
    }
    if !saw_checkpoint {
        let why = match &r.end {
            EndReason::MissingSegment(s) => format!(
                "WAL segment {} is missing; it holds the checkpoint record at {checkpoint}",
                segs.path(*s).display()
            ),
            other => format!("the checkpoint record at {checkpoint} could not be read ({other:?})"),
        };
        return Err(Error::BadWal(why));
    }
    let end = r.position();
    for s in segs.segno(redo)..=segs.segno(end) {
        segs.sync(s);
    }
    Ok(WalEnd {
        end,
        last_start: r.last_record_start().unwrap_or(Lsn::ZERO),
        records,
        reason: r.end.clone(),
    })
}

#[derive(Debug, Default)]
pub struct RedoStats {
    pub records: u64,
    pub bytes: u64,
    pub pages_restored_from_images: u64,
    pub records_applied: u64,
    pub records_skipped_by_lsn: u64,
    pub rolled_back: u64,
    pub elapsed: Duration,
}

/// Facts redo learns that the engine needs afterwards.
pub struct RedoOutcome {
    pub stats: RedoStats,
    pub max_xid: Xid,
    pub next_xid_reserved: Xid,
    pub max_relfile: u32,
}

/// Second pass: replays every record from `redo` to `end`, then marks transactions that
/// never finished as aborted.
pub fn replay(
    segs: &Segments,
    pool: &BufferPool,
    txn: &TxnManager,
    redo: Lsn,
    end: Lsn,
) -> Result<RedoOutcome> {
    let started = Instant::now();
    let mut stats = RedoStats::default();
    let mut in_progress: BTreeSet<Xid> = BTreeSet::new();
    // Subxids logged ahead of their transaction's commit record (`XACT_SUBXIDS`).
    let mut subxids_ahead: HashMap<Xid, Vec<Xid>> = HashMap::new();
    let mut out = RedoOutcome {
        stats: RedoStats::default(),
        max_xid: Xid::INVALID,
        next_xid_reserved: Xid::INVALID,
        max_relfile: 0,
    };
    let total = end.distance_from(redo).max(1);
    let mut last_report = Instant::now();
    let mut r = WalReader::new(segs, redo);
    while let Some(rec) = r.next_record()? {
        if rec.lsn >= end {
            break;
        }
        stats.records += 1;
        stats.bytes += rec.total_len as u64;
        if rec.xid.is_valid() && rec.xid >= Xid::FIRST_NORMAL {
            out.max_xid = out.max_xid.max(rec.xid);
            if rec.rmgr != Rmgr::Xact {
                in_progress.insert(rec.xid);
            }
        }
        pool.set_replay_position(Some(rec.lsn));
        let applied = apply(
            pool,
            txn,
            &rec,
            &mut stats,
            &mut out,
            &mut in_progress,
            &mut subxids_ahead,
        );
        if applied.is_err() {
            pool.set_replay_position(None);
        }
        applied?;
        // Reading the clock per record cost 2.5 % of replay (perf): look every 4096.
        if stats.records % 4096 == 0 && last_report.elapsed() > Duration::from_secs(2) {
            last_report = Instant::now();
            let done = rec.lsn.distance_from(redo);
            let rate = done as f64 / started.elapsed().as_secs_f64().max(1e-6);
            let eta = (total - done.min(total)) as f64 / rate.max(1.0);
            tracing::info!(
                "redo in progress: {} of {} MB replayed ({:.1} MB/s), ETA {:.0} s",
                done >> 20,
                total >> 20,
                rate / 1e6,
                eta
            );
        }
    }
    pool.set_replay_position(None);
    for xid in &in_progress {
        if txn.clog.try_get_status(*xid)? == XidStatus::InProgress {
            txn.clog.set_status(*xid, XidStatus::Aborted);
            stats.rolled_back += 1;
        }
    }
    stats.elapsed = started.elapsed();
    out.stats = stats;
    Ok(out)
}

fn apply(
    pool: &BufferPool,
    txn: &TxnManager,
    rec: &DecodedRecord,
    stats: &mut RedoStats,
    out: &mut RedoOutcome,
    in_progress: &mut BTreeSet<Xid>,
    subxids_ahead: &mut HashMap<Xid, Vec<Xid>>,
) -> Result<()> {
    match rec.rmgr {
        Rmgr::Xlog => match xlog::decode_xlog(rec) {
            Some(xlog::XlogRecord::NextXid(x)) => {
                out.next_xid_reserved = out.next_xid_reserved.max(x)
            }
            Some(xlog::XlogRecord::Checkpoint(c)) => {
                out.next_xid_reserved = out.next_xid_reserved.max(c.next_xid);
                out.max_relfile = out.max_relfile.max(c.next_relfile.saturating_sub(1));
            }
            None => return Err(bad_record(rec, "undecodable xlog record")),
        },
        Rmgr::Xact => {
            let x =
                xlog::decode_xact(rec).ok_or_else(|| bad_record(rec, "undecodable xact record"))?;
            let status = match x.kind {
                xlog::XactKind::SubxidsAhead => {
                    subxids_ahead.entry(rec.xid).or_default().extend(x.subxids);
                    return Ok(());
                }
                xlog::XactKind::Commit => XidStatus::Committed,
                xlog::XactKind::Abort => XidStatus::Aborted,
            };
            let ahead = subxids_ahead.remove(&rec.xid).unwrap_or_default();
            if status == XidStatus::Aborted && !ahead.is_empty() {
                return Err(bad_record(rec, "abort after subxids of a commit"));
            }
            for &xid in ahead
                .iter()
                .chain(&x.subxids)
                .chain(std::iter::once(&rec.xid))
            {
                if txn.clog.try_get_status(xid)? == XidStatus::InProgress {
                    txn.clog.set_status(xid, status);
                }
                in_progress.remove(&xid);
                out.max_xid = out.max_xid.max(xid);
            }
            for relfile in x.unlink {
                pool.discard_relation(relfile);
                pool.relfiles.unlink(relfile)?;
            }
        }
        Rmgr::Storage => {
            let relfile = xlog::decode_storage(rec)
                .ok_or_else(|| bad_record(rec, "undecodable storage record"))?;
            pool.relfiles.create(relfile)?;
            out.max_relfile = out.max_relfile.max(relfile.0);
        }
        Rmgr::Heap | Rmgr::Btree | Rmgr::Sequence => {
            let mut applied = false;
            for (i, b) in rec.blocks.iter().enumerate() {
                if !pool.relfiles.exists(b.page.relfile) {
                    // Dropped later in the WAL (its unlink already happened): skip.
                    continue;
                }
                pool.relfiles.note_block_exists(b.page)?;
                match decide(b.image.is_some(), b.will_init()) {
                    BlockAction::RestoreImage => {
                        let pin = pool.new_page(b.page)?;
                        let mut w = pin.write();
                        let img = b.image.as_ref().expect("decided on image");
                        img.restore(&mut w).map_err(|e| bad_record(rec, &e))?;
                        // The image's own LSN is older; the page now reflects this record.
                        let mut fixed = w.to_vec();
                        fixed[..8].copy_from_slice(&0u64.to_le_bytes());
                        w.copy_from_slice(&fixed);
                        w.set_lsn(rec.end_lsn);
                        w.mark_dirty_by_redo(rec.lsn);
                        stats.pages_restored_from_images += 1;
                        applied = true;
                    }
                    BlockAction::InitAndApply => {
                        let pin = pool.new_page(b.page)?;
                        let mut w = pin.write();
                        if page::lsn(&w) >= rec.end_lsn {
                            continue;
                        }
                        let keep = page::lsn(&w);
                        redo_block(rec, i, &mut w, b.page, true)?;
                        if page::lsn(&w) < keep {
                            return Err(bad_record(rec, "page LSN went backwards"));
                        }
                        w.set_lsn(rec.end_lsn);
                        w.mark_dirty_by_redo(rec.lsn);
                        applied = true;
                    }
                    BlockAction::ReadAndApplyIfNewer => {
                        let pin = pool.read_page(b.page)?;
                        let mut w = pin.write();
                        if page::lsn(&w) >= rec.end_lsn {
                            stats.records_skipped_by_lsn += 1;
                            continue;
                        }
                        redo_block(rec, i, &mut w, b.page, false)?;
                        w.set_lsn(rec.end_lsn);
                        w.mark_dirty_by_redo(rec.lsn);
                        applied = true;
                    }
                }
            }
            if applied {
                stats.records_applied += 1;
            }
        }
    }
    Ok(())
}

fn redo_block(rec: &DecodedRecord, i: usize, p: &mut [u8], id: PageId, init: bool) -> Result<()> {
    let b = &rec.blocks[i];
    let r = match rec.rmgr {
        Rmgr::Heap => crate::access::heap::redo_block(rec.xid, rec.info, i, b.data, p, id, init),
        Rmgr::Btree => crate::access::btree::redo_block(rec.info, i, b.data, rec.main, p, id),
        Rmgr::Sequence => crate::access::sequence::redo_block(rec.info, i, b.data, p, id),
        _ => Err("not a page record".into()),
    };
    r.map_err(|e| bad_record(rec, &e))
}

fn bad_record(rec: &DecodedRecord, why: &str) -> Error {
    Error::Decode {
        what: "WAL record",
        at: rec.lsn.to_string(),
        reason: why.to_string(),
    }
}

/// Relfiles mentioned in WAL before they were created get created by redo; the catalog
/// relation always exists.
pub fn ensure_base(pool: &BufferPool, catalog: RelFileId) -> Result<()> {
    pool.relfiles.create(catalog)
}
