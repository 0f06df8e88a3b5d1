#![doc = include_str!("README.md")]

pub mod activity;
mod page_batch;
pub mod tuple;

pub use page_batch::PageBatch;

use std::collections::BTreeSet;

use parking_lot::Mutex;
use walrus_base::limits::HEAP_TUPLE_BYTES_MAX;
use walrus_base::{PageId, RelFileId, Tid, Xid, PAGE_SIZE};

use crate::buffer::{BufferPool, PageWrite, PinnedPage, ScanRing};
use crate::error::{Error, Result};
use crate::storage::page::{self, LpState, PageKind, Placement};
use crate::txn::clog::XidStatus;
use crate::txn::row_locks::RowLockMode;
use crate::txn::TxnManager;
use crate::wal::record::{Rmgr, WalRecord};
use tuple::{TupleHeader, Viewer, TUPLE_HEADER_SIZE};

pub const INFO_INSERT: u8 = 1;
pub const INFO_UPDATE_SAME_PAGE: u8 = 2;
pub const INFO_UPDATE_TWO_PAGES: u8 = 3;
pub const INFO_DELETE: u8 = 4;
pub const INFO_PRUNE: u8 = 5;
pub const INFO_VACUUM: u8 = 6;
/// Hint bits a freeze pass sets so the clog can be truncated: unlike the hints pruning
/// sets in passing, these are logged, because a page that lost them in a crash would
/// need a truncated clog segment again.
pub const INFO_FREEZE: u8 = 7;
/// Several new tuples on one page (a bulk insert: COPY, multi-row INSERT): one record
/// and one latch per page instead of per row, as PostgreSQL's `heap_multi_insert`.
pub const INFO_MULTI_INSERT: u8 = 8;

/// Per-relation state kept in memory: where to insert next and which pages have room.
pub struct HeapRel {
    pub relfile: RelFileId,
    pub fillfactor: u8,
    /// Insertion target per thread group (PostgreSQL keeps one per backend,
    /// `rd_targblock`): concurrent inserters mostly work on different pages instead of
    /// queueing on one page latch.
    last_block: Vec<Mutex<Option<u32>>>,
    /// Blocks known to have at least a fifth of a page free (filled by prune/vacuum).
    fsm: Mutex<BTreeSet<u32>>,
    /// Row counts for `pg_stat_user_tables` and autovacuum.
    pub activity: activity::TableActivity,
    /// Vacuum's skip list, PostgreSQL's visibility map kept in memory only: per block,
    /// 0 = must be visited, `n + 1` = unchanged since a vacuum (or COPY FREEZE) found
    /// only `n` live, settled tuples on it (inserter committed, no deleter or locker,
    /// no dead line pointer), so a vacuum there would prune nothing and count `n`.
    /// Set and cleared under the page's exclusive latch by every heap change; lost at
    /// restart, when every page is visited again. Freeze passes visit every page.
    settled: parking_lot::RwLock<Vec<std::sync::atomic::AtomicU16>>,
    /// Nonzero entries of `settled`: a change skips the map while there are none.
    settled_blocks: std::sync::atomic::AtomicUsize,
    /// A lower bound of the heap file's block count, which only grows for a relfile
    /// (TRUNCATE gives a new one): a block below it exists without asking the file
    /// table (a lock and a lookup per fetch otherwise).
    blocks_seen: std::sync::atomic::AtomicU32,
}

const INSERT_TARGETS: usize = 4;

impl HeapRel {
    fn target(&self) -> &Mutex<Option<u32>> {
        &self.last_block[crate::thread_hint() % self.last_block.len()]
    }

    pub fn new(relfile: RelFileId, fillfactor: u8) -> HeapRel {
        HeapRel {
            relfile,
            fillfactor: fillfactor.clamp(10, 100),
            last_block: (0..INSERT_TARGETS).map(|_| Mutex::new(None)).collect(),
            fsm: Mutex::new(BTreeSet::new()),
            activity: activity::TableActivity::default(),
            settled: parking_lot::RwLock::new(Vec::new()),
            settled_blocks: std::sync::atomic::AtomicUsize::new(0),
            blocks_seen: std::sync::atomic::AtomicU32::new(0),
        }
    }

    /// The live tuples of `block` if it is settled (see `settled`), else `None`.
    pub fn settled_live(&self, block: u32) -> Option<u16> {
        use std::sync::atomic::Ordering::Relaxed;
        if self.settled_blocks.load(Relaxed) == 0 {
            return None;
        }
        let v = self.settled.read();
        let n = v.get(block as usize)?.load(Relaxed);
        n.checked_sub(1)
    }

    /// Marks `block` settled with `live` tuples (under its exclusive latch).
    fn settle(&self, block: u32, live: usize) {
        use std::sync::atomic::{AtomicU16, Ordering::Relaxed};
        let Ok(entry) = u16::try_from(live + 1) else {
            return;
        };
        let i = block as usize;
        if self.settled.read().len() <= i {
            let mut v = self.settled.write();
            let want = (i + 1).max(v.len() * 2);
            v.resize_with(want, || AtomicU16::new(0));
        }
        if self.settled.read()[i].swap(entry, Relaxed) == 0 {
            self.settled_blocks.fetch_add(1, Relaxed);
        }
    }

    /// Forgets `block`'s settled mark (under its exclusive latch, before changing it);
    /// returns the live count the mark held.
    fn unsettle(&self, block: u32) -> Option<u16> {
        use std::sync::atomic::Ordering::Relaxed;
        if self.settled_blocks.load(Relaxed) == 0 {
            return None;
        }
        let v = self.settled.read();
        let old = v.get(block as usize)?.swap(0, Relaxed);
        if old != 0 {
            self.settled_blocks.fetch_sub(1, Relaxed);
        }
        old.checked_sub(1)
    }
}

/// What [`Heap::lock_tuple`] did.
pub enum LockOutcome {
    /// Locked at the version's place (`added`: a new entry, to release at the end).
    Locked {
        at: Tid,
        added: bool,
    },
    Not(Modify),
}

/// Outcome of an update or delete attempt.
#[derive(Debug, PartialEq, Eq)]
pub enum Modify {
    /// Done; for an update, the new version's tid.
    Done(Tid),
    /// Another transaction holds the row (it set xmax and is still running): wait for it,
    /// then retry.
    WouldBlock(Xid),
    /// A committed transaction changed the row after our snapshot: its newest version
    /// (None if it was deleted). READ COMMITTED re-checks that version; REPEATABLE READ
    /// fails with a serialization error.
    /// Carries the newer version's tid and the xid that created it (the old version's
    /// xmax), so a follower can tell the version from a later tuple in a reused slot.
    Concurrent(Option<(Tid, Xid)>),
    /// This transaction already changed the row (in this or an earlier command).
    SelfModified,
}

pub struct Heap<'a> {
    pub pool: &'a BufferPool,
    pub txn: &'a TxnManager,
    pub rel: &'a HeapRel,
}

/// The "old side" of a delete or update, as logged: `off u16 | cmax u32 | ctid block u32
/// | ctid off u16 | set flags u16`. The new `xmax` is not logged: it is always the
/// record's own xid, which redo passes in.
fn old_side(off: u16, cmax: u32, ctid: Tid, set_flags: u16) -> Vec<u8> {
    let mut d = Vec::with_capacity(OLD_SIDE_LEN);
    d.extend_from_slice(&off.to_le_bytes());
    d.extend_from_slice(&cmax.to_le_bytes());
    d.extend_from_slice(&ctid.block.to_le_bytes());
    d.extend_from_slice(&ctid.offset.to_le_bytes());
    d.extend_from_slice(&set_flags.to_le_bytes());
    d
}
const OLD_SIDE_LEN: usize = 14;

/// New-side forms: the whole tuple, or (almost always) its row with only `cmin` and
/// `infomask` of the header, the rest being what every fresh version has (xmin = the
/// record's xid, no xmax, cmax 0, no ctid) — 26 of the header's 32 bytes are not logged.
const NEW_SIDE_FULL: u8 = 0;
const NEW_SIDE_COMPACT: u8 = 1;

/// The header of a fresh version written by `xid`, byte for byte.
fn fresh_header(xid: Xid, cmin: u32, infomask: u16) -> [u8; TUPLE_HEADER_SIZE] {
    let mut b = [0u8; TUPLE_HEADER_SIZE];
    TupleHeader {
        xmin: xid,
        xmax: Xid::INVALID,
        cmin,
        cmax: 0,
        ctid: Tid::INVALID,
        infomask,
    }
    .write(&mut b);
    b
}

/// The "new side" of an insert or update, as logged: `off u16 | form u8 | ...`.
fn new_side(off: u16, tuple: &[u8], xid: Xid) -> Vec<u8> {
    let mut d = Vec::with_capacity(3 + tuple.len());
    write_new_side(off, tuple, xid, &mut d);
    d
}

/// Appends the logged "new side" of `tuple` (see [`new_side`]) to `d`, length first as
/// a multi-insert record lists them: `len u16 | side`.
fn push_new_side(off: u16, tuple: &[u8], xid: Xid, d: &mut Vec<u8>) {
    let len_at = d.len();
    d.extend_from_slice(&[0, 0]);
    write_new_side(off, tuple, xid, d);
    let len = (d.len() - len_at - 2) as u16;
    d[len_at..len_at + 2].copy_from_slice(&len.to_le_bytes());
}

fn write_new_side(off: u16, tuple: &[u8], xid: Xid, d: &mut Vec<u8>) {
    d.extend_from_slice(&off.to_le_bytes());
    match TupleHeader::read(tuple) {
        Some(h) if tuple[..TUPLE_HEADER_SIZE] == fresh_header(xid, h.cmin, h.infomask) => {
            d.push(NEW_SIDE_COMPACT);
            d.extend_from_slice(&h.cmin.to_le_bytes());
            d.extend_from_slice(&h.infomask.to_le_bytes());
            d.extend_from_slice(&tuple[TUPLE_HEADER_SIZE..]);
        }
        _ => {
            d.push(NEW_SIDE_FULL);
            d.extend_from_slice(tuple);
        }
    }
}

/// Applies an "old side" (xmax stamp) to a page. Shared by do and redo.
fn apply_old_side(p: &mut [u8], d: &[u8], xmax: Xid) -> std::result::Result<(), String> {
    if d.len() < OLD_SIDE_LEN {
        return Err("short heap old-side data".into());
    }
    let off = u16::from_le_bytes([d[0], d[1]]);
    let cmax = u32::from_le_bytes(d[2..6].try_into().map_err(|_| "cmax")?);
    let ctid = Tid::new(
        u32::from_le_bytes(d[6..10].try_into().map_err(|_| "ctid")?),
        u16::from_le_bytes([d[10], d[11]]),
    );
    let set = u16::from_le_bytes([d[12], d[13]]);
    let t = normal_item_mut(p, off)?;
    let mut h = TupleHeader::read(t).ok_or("short tuple")?;
    h.xmax = xmax;
    h.cmax = cmax;
    h.ctid = ctid;
    h.infomask &=
        !(tuple::XMAX_COMMITTED | tuple::XMAX_INVALID | tuple::UPDATED | tuple::HOT_UPDATED);
    h.infomask |= set;
    h.write(t);
    // The page may have something to prune once `xmax` is older than every snapshot
    // (PostgreSQL's PageSetPrunable). Done here, so redo sets it identically.
    let old = page::prune_xid(p);
    if old == 0 || xmax.0 < old {
        page::set_prune_xid(p, xmax.0);
    }
    Ok(())
}

/// The oldest xmax of a version on the page that a later prune might remove (0: none),
/// recomputed from the page after each prune. Like hint bits it is only a cache: a
/// replayed page (which lacks the primary's hint bits) may hold an older value, which
/// costs at most one prune attempt that finds nothing.
fn oldest_prunable_xmax(p: &[u8]) -> u64 {
    (1..=page::item_count(p))
        .filter(|&o| page::line_pointer(p, o).state == LpState::Normal)
        .filter_map(|o| TupleHeader::read(page::item(p, o)))
        .filter(|h| h.xmax != Xid::INVALID && !h.has(tuple::XMAX_INVALID))
        .map(|h| h.xmax.0)
        .min()
        .unwrap_or(0)
}

fn apply_new_side(p: &mut [u8], d: &[u8], xid: Xid) -> std::result::Result<u16, String> {
    if d.len() < 3 {
        return Err("short heap new-side data".into());
    }
    let off = u16::from_le_bytes([d[0], d[1]]);
    let tuple: std::borrow::Cow<'_, [u8]> = match d[2] {
        NEW_SIDE_FULL if d.len() >= 3 + TUPLE_HEADER_SIZE => d[3..].into(),
        NEW_SIDE_COMPACT if d.len() >= 9 => {
            let cmin = u32::from_le_bytes(d[3..7].try_into().map_err(|_| "cmin")?);
            let infomask = u16::from_le_bytes([d[7], d[8]]);
            let mut t = Vec::with_capacity(TUPLE_HEADER_SIZE + d.len() - 9);
            t.extend_from_slice(&fresh_header(xid, cmin, infomask));
            t.extend_from_slice(&d[9..]);
            t.into()
        }
        form => {
            return Err(format!(
                "bad heap new-side (form {form}, {} bytes)",
                d.len()
            ))
        }
    };
    if off == 0 || off > page::item_count(p) + 1 {
        return Err(format!(
            "heap insert at offset {off} beyond {} items",
            page::item_count(p)
        ));
    }
    if off <= page::item_count(p) && page::line_pointer(p, off).state != LpState::Unused {
        return Err(format!("heap insert at offset {off}, which is in use"));
    }
    if !page::fits(p, tuple.len()) && page::free_space_after_compact(p) >= tuple.len() + 8 {
        page::compact(p);
    }
    page::add_item(p, &tuple, Placement::Exactly(off)).ok_or("no room for redo insert")?;
    Ok(off)
}

/// Redo of `INFO_MULTI_INSERT`: `count u16`, then per tuple `len u16` and its new side.
fn apply_multi_insert(p: &mut [u8], d: &[u8], xid: Xid) -> std::result::Result<(), String> {
    if d.len() < 2 {
        return Err("short heap multi-insert data".into());
    }
    let count = u16::from_le_bytes([d[0], d[1]]);
    let mut at = 2;
    for i in 0..count {
        let len = d
            .get(at..at + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]) as usize)
            .ok_or_else(|| format!("heap multi-insert truncated at tuple {i}"))?;
        let side = d
            .get(at + 2..at + 2 + len)
            .ok_or_else(|| format!("heap multi-insert truncated in tuple {i}"))?;
        apply_new_side(p, side, xid)?;
        at += 2 + len;
    }
    if at != d.len() {
        return Err(format!(
            "heap multi-insert has {} bytes after {count} tuples",
            d.len() - at
        ));
    }
    Ok(())
}

fn normal_item_mut(p: &mut [u8], off: u16) -> std::result::Result<&mut [u8], String> {
    if off == 0 || off > page::item_count(p) || page::line_pointer(p, off).state != LpState::Normal
    {
        return Err(format!("no tuple at offset {off}"));
    }
    Ok(page::item_mut(p, off))
}

fn init_heap_page(p: &mut [u8], id: PageId) {
    page::init(p, id, PageKind::Heap, 0);
}

impl<'a> Heap<'a> {
    pub fn new(pool: &'a BufferPool, txn: &'a TxnManager, rel: &'a HeapRel) -> Heap<'a> {
        Heap { pool, txn, rel }
    }

    fn page_id(&self, block: u32) -> PageId {
        PageId::new(self.rel.relfile, block)
    }

    pub fn nblocks(&self) -> Result<u32> {
        self.pool.relfiles.nblocks(self.rel.relfile)
    }

    /// Whether `block` is inside the heap file (an index entry or a chain may point
    /// past the end only after a crash lost the heap's extension).
    pub fn has_block(&self, block: u32) -> Result<bool> {
        use std::sync::atomic::Ordering;
        if block < self.rel.blocks_seen.load(Ordering::Relaxed) {
            return Ok(true);
        }
        let n = self.nblocks()?;
        self.rel.blocks_seen.fetch_max(n, Ordering::Relaxed);
        Ok(block < n)
    }

    /// Space that inserts must leave free on a page (fillfactor), for later HOT updates.
    fn reserve_bytes(&self) -> usize {
        PAGE_SIZE * (100 - self.rel.fillfactor as usize) / 100
    }

    /// Inserts a new row version; returns its tid.
    pub fn insert(&self, xid: Xid, cid: u32, row: &[u8]) -> Result<Tid> {
        let t = tuple::build(&TupleHeader::new(xid, cid, 0), row);
        if t.len() > HEAP_TUPLE_BYTES_MAX {
            return Err(Error::RowTooBig {
                size: t.len(),
                max: HEAP_TUPLE_BYTES_MAX,
            });
        }
        self.insert_tuple(xid, &t, None)
    }

    /// Finds a page with room for `len` bytes (+ fillfactor reserve), other than
    /// `avoid`; returns it latched, and whether it is new (needs WILL_INIT).
    fn place(
        &self,
        len: usize,
        avoid: Option<u32>,
        body: impl FnOnce(&mut PageWrite<'_>, bool) -> Result<Tid>,
    ) -> Result<Tid> {
        let need = len + 8 + self.reserve_bytes();
        let candidates = self.insert_candidates();
        for b in candidates {
            if Some(b) == avoid {
                continue;
            }
            let pin = self.pool.read_page(self.page_id(b))?;
            let mut w = pin.write();
            if page::is_new(&w) {
                continue;
            }
            self.prune_if_short(&mut w, need)?;
            if page::free_space(&w) >= need {
                return body(&mut w, false);
            }
            self.rel.fsm.lock().remove(&b);
        }
        let block = self.pool.relfiles.allocate_block(self.rel.relfile)?;
        let pin = self.pool.new_page(self.page_id(block))?;
        let mut w = pin.write();
        init_heap_page(&mut w, self.page_id(block));
        *self.rel.target().lock() = Some(block);
        body(&mut w, true)
    }

    /// Inserts new row versions a page at a time: each page is filled under one latch
    /// and logged as one `INFO_MULTI_INSERT` record. Returns the tids in `rows` order.
    /// Each tuple is built in one reused buffer and its logged form appended straight
    /// to the page's record: no allocation per row.
    ///
    /// `xmin_committed` writes the rows with their xmin already hinted committed (COPY
    /// FREEZE): only for a relation file this transaction created, which nobody else can
    /// read before the commit and which an abort unlinks, so the hint is never seen
    /// wrong. The hint is carried by the WAL record, so redo writes it too.
    pub fn insert_many<R: AsRef<[u8]>>(
        &self,
        xid: Xid,
        cid: u32,
        rows: &[R],
        xmin_committed: bool,
    ) -> Result<Vec<Tid>> {
        let infomask = if xmin_committed {
            tuple::XMIN_COMMITTED
        } else {
            0
        };
        let header = TupleHeader::new(xid, cid, infomask);
        let tuple_len = |r: &R| TUPLE_HEADER_SIZE + r.as_ref().len();
        // Rows before a too-big one are inserted first, as a row-by-row insert would.
        let too_big = rows
            .iter()
            .position(|r| tuple_len(r) > HEAP_TUPLE_BYTES_MAX);
        let fits = &rows[..too_big.unwrap_or(rows.len())];
        let reserve = self.reserve_bytes();
        let mut tids = Vec::with_capacity(rows.len());
        let mut tuple_buf = vec![0u8; TUPLE_HEADER_SIZE];
        header.write(&mut tuple_buf);
        while tids.len() < fits.len() {
            let first = tids.len();
            self.place(tuple_len(&fits[first]), None, |w, fresh| {
                let id = w.id();
                let settled_before = self.rel.unsettle(id.block.0);
                let mut data = Vec::with_capacity(PAGE_SIZE);
                data.extend_from_slice(&0u16.to_le_bytes());
                let mut placed = 0u16;
                // Unused line pointers exist only on a page that had tuples removed;
                // once an item is appended as a new pointer, there are none left to
                // look for.
                let mut reuse_unused = true;
                for r in &fits[first..] {
                    let len = tuple_len(r);
                    // The first tuple was checked by `place`; the rest must leave the
                    // fillfactor reserve free too, and fit the record's block data.
                    if placed > 0
                        && (page::free_space(w) < len + 8 + reserve
                            || data.len() + len + 16 > u16::MAX as usize)
                    {
                        break;
                    }
                    tuple_buf.truncate(TUPLE_HEADER_SIZE);
                    tuple_buf.extend_from_slice(r.as_ref());
                    let count_before = page::item_count(w);
                    let off = page::add_item(w, &tuple_buf, Placement::Append { reuse_unused })
                        .expect("space was checked");
                    if off > count_before {
                        reuse_unused = false;
                    }
                    push_new_side(off, &tuple_buf, xid, &mut data);
                    tids.push(Tid::new(id.block.0, off));
                    placed += 1;
                }
                data[..2].copy_from_slice(&placed.to_le_bytes());
                let mut rec = WalRecord::new(Rmgr::Heap, INFO_MULTI_INSERT, xid);
                rec.block(id, fresh, data);
                self.pool.log_change(&rec, &mut [w]);
                // COPY FREEZE's rows are settled as they land: a fresh page of them, or
                // a settled page they were added to, needs no vacuum.
                if xmin_committed {
                    let before = if fresh { Some(0) } else { settled_before };
                    if let Some(n) = before {
                        self.rel.settle(id.block.0, n as usize + placed as usize);
                    }
                }
                Ok(tids[first])
            })?;
        }
        if let Some(i) = too_big {
            return Err(Error::RowTooBig {
                size: tuple_len(&rows[i]),
                max: HEAP_TUPLE_BYTES_MAX,
            });
        }
        Ok(tids)
    }

    fn insert_tuple(&self, xid: Xid, t: &[u8], avoid: Option<u32>) -> Result<Tid> {
        self.place(t.len(), avoid, |w, fresh| {
            self.rel.unsettle(w.id().block.0);
            let off = page::add_item(w, t, Placement::Append { reuse_unused: true })
                .expect("space was checked");
            let id = w.id();
            let mut rec = WalRecord::new(Rmgr::Heap, INFO_INSERT, xid);
            rec.block(id, fresh, new_side(off, t, xid));
            self.pool.log_change(&rec, &mut [w]);
            Ok(Tid::new(id.block.0, off))
        })
    }

    /// Copies out every tuple version on `block` visible to `v`.
    pub fn scan_block(
        &self,
        block: u32,
        v: &Viewer<'_>,
        out: &mut Vec<(Tid, Vec<u8>)>,
    ) -> Result<()> {
        self.for_each_visible(block, v, None, |tid, row| out.push((tid, row.to_vec())))
    }

    /// Hands `f` every tuple version on `block` visible to `v`, as it lies on the page
    /// (under the page's shared latch: `f` must not touch the buffer pool), without
    /// copying it: ANALYZE's sample copies only the rows it keeps.
    /// The page is read through `ring` when there is one (ANALYZE's sample of a large
    /// table, like a sequential scan, must not push the pool's working set out).
    pub fn for_each_visible(
        &self,
        block: u32,
        v: &Viewer<'_>,
        ring: Option<&mut ScanRing>,
        f: impl FnMut(Tid, &[u8]),
    ) -> Result<()> {
        self.visible_in(block, v, ring, f)
    }

    /// [`Heap::for_each_visible`], reading the page through `ring` if there is one.
    fn visible_in(
        &self,
        block: u32,
        v: &Viewer<'_>,
        ring: Option<&mut ScanRing>,
        mut f: impl FnMut(Tid, &[u8]),
    ) -> Result<()> {
        self.with_block(block, ring, |r| {
            for off in 1..=page::item_count(r) {
                if page::line_pointer(r, off).state != LpState::Normal {
                    continue;
                }
                let t = page::item(r, off);
                let Some(h) = TupleHeader::read(t) else {
                    continue;
                };
                if tuple::visible(&h, v, self.txn) {
                    f(Tid::new(block, off), &t[TUPLE_HEADER_SIZE..]);
                }
            }
        })
    }

    /// Runs `f` on `block` under a shared latch, unless the page is new (all zeros);
    /// reads the page through `ring` if there is one.
    fn with_block(
        &self,
        block: u32,
        ring: Option<&mut ScanRing>,
        f: impl FnOnce(&[u8]),
    ) -> Result<()> {
        let id = self.page_id(block);
        let pin = match ring {
            Some(ring) => self.pool.read_page_in_ring(id, ring)?,
            None => self.pool.read_page(id)?,
        };
        let r = pin.read();
        if !page::is_new(&r) {
            f(&r);
        }
        Ok(())
    }

    /// The headers of the HOT chain an index entry leads to, oldest first, read under
    /// one latch (see [`chain_members`]).
    pub fn chain_headers(&self, root: Tid) -> Result<Vec<TupleHeader>> {
        let mut out = Vec::new();
        if self.has_block(root.block)? {
            self.with_block(root.block, None, |r| {
                out.extend(chain_members(r, root.offset).map(|(_, h)| h));
            })?;
        }
        Ok(out)
    }

    /// Index build: the version of each HOT chain on `block` visible to `v`, with the
    /// chain's *root* tid, where an index entry must point (PostgreSQL's root offsets in
    /// its index build scan). An entry at a heap-only member would dangle once pruning
    /// frees that member, which it does without looking at any index.
    pub fn scan_block_roots(
        &self,
        block: u32,
        v: &Viewer<'_>,
        out: &mut Vec<(Tid, Vec<u8>)>,
    ) -> Result<()> {
        self.with_block(block, None, |r| {
            for off in chain_roots(r) {
                let root = Tid::new(block, off);
                if let (Some((_, row)), _) = walk_chain(r, root, v, self.txn) {
                    out.push((root, row));
                }
            }
        })
    }

    /// [`Heap::scan_block_roots`] handing each row to `f` as it lies on the page (under
    /// the page's shared latch: `f` must not touch the buffer pool), without copying
    /// it: an index build reads only its key columns from each row.
    pub fn for_each_root_row(
        &self,
        block: u32,
        v: &Viewer<'_>,
        ring: Option<&mut ScanRing>,
        mut f: impl FnMut(Tid, &[u8]) -> Result<()>,
    ) -> Result<()> {
        let mut result = Ok(());
        self.with_block(block, ring, |r| {
            for off in chain_roots(r) {
                let root = Tid::new(block, off);
                if let (Some(at), _) = visible_in_chain(r, root, v, self.txn) {
                    result = f(root, &page::item(r, at)[TUPLE_HEADER_SIZE..]);
                    if result.is_err() {
                        return;
                    }
                }
            }
        })?;
        result
    }

    /// The exclusive latch on `pin`'s page for a change to it: the page's settled mark
    /// (`HeapRel::settled`) is forgotten first, under the latch, so no vacuum skips a
    /// changed page. Every heap change latches through here, except inserts (whose
    /// bodies under `place` forget the mark, or keep it for COPY FREEZE's settled rows),
    /// the opportunistic prune (`try_write`), and the freeze pass, which only adds hint
    /// bits and so leaves a settled page settled.
    fn latch_for_change<'p>(&self, pin: &'p PinnedPage<'_>) -> PageWrite<'p> {
        let w = pin.write();
        self.rel.unsettle(w.id().block.0);
        w
    }

    /// Opportunistic pruning after an index fetch walked `walked` chain members
    /// (PostgreSQL's heap_page_prune_opt): a long HOT chain makes every lookup of the
    /// row slower; shorten it when the page is not busy and some version on it died
    /// before every snapshot (`prunable`: its prune xid is below the horizon). Without
    /// that test, while many open snapshots kept the chain's versions alive, every
    /// lookup of a hot row took the page exclusively and re-planned a prune that removed
    /// nothing: 6 % of the server's CPU at 128 pgbench clients.
    fn prune_long_chain(
        &self,
        pin: &PinnedPage<'_>,
        walked: usize,
        prunable: bool,
        horizon: Xid,
    ) -> Result<()> {
        if walked > PRUNE_CHAIN_LEN && prunable {
            if let Some(mut w) = pin.try_write() {
                self.rel.unsettle(w.id().block.0);
                self.prune_with_horizon(&mut w, horizon)?;
            }
        }
        Ok(())
    }

    /// Whether the line pointer an index entry points at is `DEAD`: pruning found its
    /// whole chain dead to every snapshot, and only the index entries keep it. A `DEAD`
    /// pointer is never reused until vacuum has removed those entries.
    pub fn root_is_dead(&self, root: Tid) -> Result<bool> {
        if !self.has_block(root.block)? {
            return Ok(false);
        }
        let pin = self.pool.read_page(self.page_id(root.block))?;
        let r = pin.read();
        Ok(!page::is_new(&r) && root_is_dead(&r, root.offset))
    }

    /// Reads a version regardless of visibility (for following update chains).
    pub fn read_version(&self, tid: Tid) -> Result<Option<(TupleHeader, Vec<u8>)>> {
        if !self.has_block(tid.block)? {
            return Ok(None);
        }
        let pin = self.pool.read_page(self.page_id(tid.block))?;
        let r = pin.read();
        if page::is_new(&r) || tid.offset == 0 || tid.offset > page::item_count(&r) {
            return Ok(None);
        }
        let mut off = tid.offset;
        if page::line_pointer(&r, off).state == LpState::Redirect {
            off = page::line_pointer(&r, off).off;
        }
        if page::line_pointer(&r, off).state != LpState::Normal {
            return Ok(None);
        }
        let t = page::item(&r, off);
        Ok(TupleHeader::read(t).map(|h| (h, t[TUPLE_HEADER_SIZE..].to_vec())))
    }

    /// Checks whether the version `h` at `at` (redirects resolved) may be changed, or
    /// locked, by `xid` in `mode`: not changed by a transaction that committed or still
    /// runs, and not locked by another transaction in a conflicting mode. Called under
    /// the page's latch (`txn::row_locks` explains why that keeps locks and changes
    /// apart).
    fn check_modifiable(
        &self,
        h: &TupleHeader,
        at: Tid,
        xid: Xid,
        mode: RowLockMode,
    ) -> Result<Option<Modify>> {
        if let Some(m) = self.check_xmax(h, xid)? {
            return Ok(Some(m));
        }
        let holder = self
            .txn
            .row_locks
            .conflict((self.rel.relfile, at), h.xmin, mode, |owner| {
                self.txn.same_transaction(owner, xid)
            });
        Ok(holder.map(Modify::WouldBlock))
    }

    fn check_xmax(&self, h: &TupleHeader, xid: Xid) -> Result<Option<Modify>> {
        if !h.xmax.is_valid() || h.has(tuple::XMAX_INVALID) {
            return Ok(None);
        }
        if h.xmax == xid {
            return Ok(Some(Modify::SelfModified));
        }
        Ok(match tuple::xmax_status_for_write(h, self.txn)? {
            crate::txn::clog::XidStatus::Aborted => None,
            crate::txn::clog::XidStatus::Committed => Some(Modify::Concurrent(
                h.has(tuple::UPDATED).then_some((h.ctid, h.xmax)),
            )),
            // Changed by one of this transaction's other live subtransactions.
            _ if self.txn.same_transaction(h.xmax, xid) => Some(Modify::SelfModified),
            _ => Some(Modify::WouldBlock(h.xmax)),
        })
    }

    /// Locks the version at `tid` for `xid` in `mode` (`txn::row_locks`): its place
    /// once locked (or already held), else why not, as for a change (`WouldBlock`
    /// names the holder to wait for).
    pub fn lock_tuple(&self, tid: Tid, xid: Xid, mode: RowLockMode) -> Result<LockOutcome> {
        let pin = self.pool.read_page(self.page_id(tid.block))?;
        let r = pin.read();
        let off = resolve_offset(&r, tid.offset)
            .ok_or_else(|| Error::DataCorrupted(format!("no tuple at {tid}")))?;
        let item = page::item(&r, off);
        let h = TupleHeader::read(item).ok_or_else(|| {
            Error::DataCorrupted(format!("tuple at {tid} is shorter than its header"))
        })?;
        let at = Tid::new(tid.block, off);
        if let Some(m) = self.check_xmax(&h, xid)? {
            return Ok(LockOutcome::Not(m));
        }
        let acquired =
            self.txn
                .row_locks
                .acquire((self.rel.relfile, at), h.xmin, xid, mode, |owner| {
                    self.txn.same_transaction(owner, xid)
                });
        let added = match acquired {
            Ok(added) => added,
            Err(holder) => return Ok(LockOutcome::Not(Modify::WouldBlock(holder))),
        };
        Ok(LockOutcome::Locked { at, added })
    }

    /// Deletes the version at `tid` (stamps xmax).
    pub fn delete(&self, tid: Tid, xid: Xid, cid: u32) -> Result<Modify> {
        let pin = self.pool.read_page(self.page_id(tid.block))?;
        let mut w = self.latch_for_change(&pin);
        let off = resolve_offset(&w, tid.offset)
            .ok_or_else(|| Error::DataCorrupted(format!("no tuple at {tid}")))?;
        let h = TupleHeader::read(page::item(&w, off)).ok_or_else(|| {
            Error::DataCorrupted(format!("tuple at {tid} is shorter than its header"))
        })?;
        let at = Tid::new(tid.block, off);
        if let Some(m) = self.check_modifiable(&h, at, xid, RowLockMode::Update)? {
            return Ok(m);
        }
        let d = old_side(off, cid, Tid::INVALID, 0);
        apply_old_side(&mut w, &d, xid).map_err(Error::DataCorrupted)?;
        let mut rec = WalRecord::new(Rmgr::Heap, INFO_DELETE, xid);
        rec.block(w.id(), false, d);
        self.pool.log_change(&rec, &mut [&mut w]);
        Ok(Modify::Done(Tid::new(tid.block, off)))
    }

    /// Updates the version at `tid` to `row`. `hot_ok` = no indexed column changed, so
    /// the new version may be heap-only on the same page (HOT); `mode` is how the change
    /// meets row locks (`NoKeyUpdate` when no unique index's column changed).
    pub fn update(
        &self,
        tid: Tid,
        xid: Xid,
        cid: u32,
        row: &[u8],
        hot_ok: bool,
        mode: RowLockMode,
    ) -> Result<(Modify, bool)> {
        let mut newh = TupleHeader::new(xid, cid, 0);
        let tuple_len = TUPLE_HEADER_SIZE + row.len();
        if tuple_len > HEAP_TUPLE_BYTES_MAX {
            return Err(Error::RowTooBig {
                size: tuple_len,
                max: HEAP_TUPLE_BYTES_MAX,
            });
        }
        // First try the same page.
        {
            let pin = self.pool.read_page(self.page_id(tid.block))?;
            let mut w = self.latch_for_change(&pin);
            let off = resolve_offset(&w, tid.offset)
                .ok_or_else(|| Error::DataCorrupted(format!("no tuple at {tid}")))?;
            let h = TupleHeader::read(page::item(&w, off)).ok_or_else(|| {
                Error::DataCorrupted(format!("tuple at {tid} is shorter than its header"))
            })?;
            if let Some(m) = self.check_modifiable(&h, Tid::new(tid.block, off), xid, mode)? {
                return Ok((m, false));
            }
            let need = tuple_len + 8;
            self.prune_if_short(&mut w, need)?;
            if page::free_space(&w) >= need {
                // The old version is still at `off` (pruning never removes a version
                // whose xmax is unset or in progress).
                if hot_ok {
                    newh.infomask |= tuple::HEAP_ONLY;
                }
                let t = tuple::build(&newh, row);
                let new_off = page::add_item(&mut w, &t, Placement::Append { reuse_unused: true })
                    .expect("checked");
                let set = tuple::UPDATED | if hot_ok { tuple::HOT_UPDATED } else { 0 };
                let mut d = old_side(off, cid, Tid::new(tid.block, new_off), set);
                apply_old_side(&mut w, &d, xid).map_err(Error::DataCorrupted)?;
                d.extend_from_slice(&new_side(new_off, &t, xid));
                let mut rec = WalRecord::new(Rmgr::Heap, INFO_UPDATE_SAME_PAGE, xid);
                rec.block(w.id(), false, d);
                self.pool.log_change(&rec, &mut [&mut w]);
                let new_tid = Tid::new(tid.block, new_off);
                self.carry_row_locks(Tid::new(tid.block, off), h.xmin, new_tid, xid, mode);
                return Ok((Modify::Done(new_tid), hot_ok));
            }
        }
        // Another page: latch both in block order, re-check the old version.
        let t = tuple::build(&newh, row);
        loop {
            let target = self.find_block_with_room(t.len(), tid.block)?;
            let old_pin = self.pool.read_page(self.page_id(tid.block))?;
            let (new_pin, fresh) = match target {
                Some(b) => (self.pool.read_page(self.page_id(b))?, false),
                None => {
                    // Not published as `last_block` until the page is initialised and
                    // logged below: a page others can see must exist in WAL.
                    let b = self.pool.relfiles.allocate_block(self.rel.relfile)?;
                    (self.pool.new_page(self.page_id(b))?, true)
                }
            };
            let nb = new_pin.id().block.0;
            let (mut ow, mut nw) = if nb < tid.block {
                let n = self.latch_for_change(&new_pin);
                (self.latch_for_change(&old_pin), n)
            } else {
                let o = self.latch_for_change(&old_pin);
                (o, self.latch_for_change(&new_pin))
            };
            if !fresh && (page::is_new(&nw) || page::free_space(&nw) < t.len() + 8) {
                continue;
            }
            let off = resolve_offset(&ow, tid.offset)
                .ok_or_else(|| Error::DataCorrupted(format!("no tuple at {tid}")))?;
            let h = TupleHeader::read(page::item(&ow, off)).ok_or_else(|| {
                Error::DataCorrupted(format!("tuple at {tid} is shorter than its header"))
            })?;
            if let Some(m) = self.check_modifiable(&h, Tid::new(tid.block, off), xid, mode)? {
                // A fresh page stays all zeros (never logged, never published): a
                // harmless hole that readers skip.
                return Ok((m, false));
            }
            if fresh {
                init_heap_page(&mut nw, new_pin.id());
            }
            let new_off = page::add_item(&mut nw, &t, Placement::Append { reuse_unused: true })
                .expect("checked");
            let d_old = old_side(off, cid, Tid::new(nb, new_off), tuple::UPDATED);
            apply_old_side(&mut ow, &d_old, xid).map_err(Error::DataCorrupted)?;
            let mut rec = WalRecord::new(Rmgr::Heap, INFO_UPDATE_TWO_PAGES, xid);
            rec.block(ow.id(), false, d_old);
            rec.block(nw.id(), fresh, new_side(new_off, &t, xid));
            self.pool.log_change(&rec, &mut [&mut ow, &mut nw]);
            if fresh {
                *self.rel.target().lock() = Some(nb);
            }
            let new_tid = Tid::new(nb, new_off);
            self.carry_row_locks(Tid::new(tid.block, off), h.xmin, new_tid, xid, mode);
            return Ok((Modify::Done(new_tid), false));
        }
    }

    /// After a non-key update of the version at `old` (xmin `old_xmin`) to `new`
    /// (xmin `xid`), under the old page's latch: its row locks hold the new version
    /// too (`RowLocks::carry_over`).
    fn carry_row_locks(&self, old: Tid, old_xmin: Xid, new: Tid, xid: Xid, mode: RowLockMode) {
        if mode == RowLockMode::NoKeyUpdate {
            self.txn.row_locks.carry_over(
                (self.rel.relfile, old),
                old_xmin,
                (self.rel.relfile, new),
                xid,
            );
        }
    }

    /// Pages worth trying for a new tuple: this thread's insertion target, then a few
    /// pages the free-space map knows to have room.
    fn insert_candidates(&self) -> Vec<u32> {
        let mut candidates: Vec<u32> = Vec::new();
        if let Some(b) = *self.rel.target().lock() {
            candidates.push(b);
        }
        candidates.extend(self.rel.fsm.lock().iter().rev().take(4).copied());
        candidates
    }

    fn find_block_with_room(&self, len: usize, avoid: u32) -> Result<Option<u32>> {
        let need = len + 8 + self.reserve_bytes();
        let candidates = self.insert_candidates();
        for b in candidates {
            if b == avoid {
                continue;
            }
            let pin = self.pool.read_page(self.page_id(b))?;
            let r = pin.read();
            if !page::is_new(&r) && page::free_space(&r) >= need {
                return Ok(Some(b));
            }
            drop(r);
            self.rel.fsm.lock().remove(&b);
        }
        Ok(None)
    }

    /// Prunes a page that lacks `need` bytes free when pruning can help: it has dead line
    /// pointers' space to reclaim, or a version deleted or updated by an xid older than
    /// every snapshot (the page's prune xid, as PostgreSQL's heap_page_prune_opt checks
    /// `pd_prune_xid`). Without the second test, a full page was never pruned on the
    /// update path, so every update of a row on a full page went to another page (no
    /// HOT, a new index entry, and a page image there after each checkpoint) long after
    /// the old versions had died. The horizon is read once, for test and prune alike.
    fn prune_if_short(&self, w: &mut PageWrite<'_>, need: usize) -> Result<()> {
        if page::free_space(w) >= need {
            return Ok(());
        }
        let reclaimable = page::free_space_after_compact(w) >= need;
        let px = page::prune_xid(w);
        if !reclaimable && px == 0 {
            return Ok(());
        }
        let horizon = self.txn.prune_horizon();
        if reclaimable || Xid(px) < horizon {
            self.prune_with_horizon(w, horizon)?;
        }
        Ok(())
    }

    /// Prunes a page the caller holds exclusively, against the exact global xmin (vacuum):
    /// removes versions dead to everyone, collapses HOT chains (root becomes a redirect
    /// to the first live member), sets hint bits, defragments. WAL-logged as one PRUNE
    /// record. The opportunistic paths use the cheaper `TxnManager::prune_horizon`.
    pub fn prune_latched(&self, w: &mut PageWrite<'_>) -> Result<usize> {
        self.prune_with_horizon(w, self.txn.global_xmin())
    }

    fn prune_with_horizon(&self, w: &mut PageWrite<'_>, horizon: Xid) -> Result<usize> {
        let statuses = PageStatuses::read(w, self.txn)?;
        let plan = plan_prune(w, horizon, &statuses);
        if plan.is_empty() {
            return Ok(0);
        }
        let d = plan.encode();
        plan.apply_hints(w);
        apply_prune(w, &d).map_err(Error::DataCorrupted)?;
        let mut rec = WalRecord::new(Rmgr::Heap, INFO_PRUNE, Xid::INVALID);
        rec.block(w.id(), false, d);
        self.pool.log_change(&rec, &mut [w]);
        if page::free_space(w) > PAGE_SIZE / 5 {
            self.rel.fsm.lock().insert(w.id().block.0);
        }
        Ok(plan.removed())
    }

    /// Vacuum, phase 1 for one block: prune it, push the tids of its dead line pointers
    /// onto `dead` (their index entries must go before the pointers can be reused) and
    /// count the rows left on it. Returns whether the prune changed the page.
    ///
    /// The page is read through `ring` when there is one: a vacuum of a large table
    /// cycles its clean pages through a few frames (PostgreSQL's vacuum strategy) instead
    /// of evicting the pool's working set; a page it dirties leaves the ring for the
    /// pool, where the page writers flush it.
    pub fn vacuum_collect(
        &self,
        block: u32,
        ring: Option<&mut ScanRing>,
        dead: &mut Vec<Tid>,
        counts: &mut VacuumCounts,
    ) -> Result<bool> {
        let id = self.page_id(block);
        let pin = match ring {
            Some(ring) => self.pool.read_page_in_ring(id, ring)?,
            None => self.pool.read_page(id)?,
        };
        let mut w = self.latch_for_change(&pin);
        if page::is_new(&w) {
            return Ok(false);
        }
        let pruned = self.prune_latched(&mut w)?;
        counts.pruned += pruned as u64;
        let statuses = PageStatuses::read(&w, self.txn)?;
        // Whether every tuple is live and settled (see `HeapRel::settled`).
        let (mut settled, mut live) = (true, 0usize);
        for o in 1..=page::item_count(&w) {
            match page::line_pointer(&w, o).state {
                LpState::Dead => {
                    dead.push(Tid::new(block, o));
                    settled = false;
                }
                LpState::Normal => {
                    let Some(mut h) = TupleHeader::read(page::item(&w, o)) else {
                        settled = false;
                        continue;
                    };
                    tuple::set_hints(&mut h, &statuses);
                    settled &= h.has(tuple::XMIN_COMMITTED) && !h.xmax.is_valid();
                    if h.has(tuple::XMIN_COMMITTED) {
                        if h.xmax.is_valid() && h.has(tuple::XMAX_COMMITTED) {
                            counts.dead_left += 1;
                        } else {
                            counts.live += 1;
                            live += 1;
                        }
                    }
                }
                _ => {}
            }
        }
        if settled {
            self.rel.settle(block, live);
        }
        Ok(pruned > 0)
    }

    /// Freeze pass for one block: gives every tuple the hint bits for its xids below
    /// `cutoff` (see [`tuple::freeze_bits`]), WAL-logged as one FREEZE record. Returns
    /// whether the page changed (a page frozen before changes no more).
    pub fn freeze_block(&self, block: u32, cutoff: Xid) -> Result<bool> {
        let pin = self.pool.read_page(self.page_id(block))?;
        let mut w = pin.write();
        if page::is_new(&w) {
            return Ok(false);
        }
        let statuses = PageStatuses::read(&w, self.txn)?;
        let mut d = Vec::new();
        for o in 1..=page::item_count(&w) {
            if page::line_pointer(&w, o).state != LpState::Normal {
                continue;
            }
            if let Some(h) = TupleHeader::read(page::item(&w, o)) {
                let bits = tuple::freeze_bits(&h, cutoff, &statuses)?;
                if bits != 0 {
                    d.extend_from_slice(&o.to_le_bytes());
                    d.extend_from_slice(&bits.to_le_bytes());
                }
            }
        }
        if d.is_empty() {
            return Ok(false);
        }
        apply_freeze(&mut w, &d).map_err(Error::DataCorrupted)?;
        let mut rec = WalRecord::new(Rmgr::Heap, INFO_FREEZE, Xid::INVALID);
        rec.block(w.id(), false, d);
        self.pool.log_change(&rec, &mut [&mut w]);
        Ok(true)
    }

    /// Vacuum, phase 3: the index entries for `offs` are gone; free the line pointers.
    pub fn vacuum_release(&self, block: u32, offs: &[u16]) -> Result<()> {
        if offs.is_empty() {
            return Ok(());
        }
        let pin = self.pool.read_page(self.page_id(block))?;
        let mut w = self.latch_for_change(&pin);
        let mut d = Vec::with_capacity(offs.len() * 2);
        for o in offs {
            d.extend_from_slice(&o.to_le_bytes());
        }
        apply_vacuum(&mut w, &d).map_err(Error::DataCorrupted)?;
        let mut rec = WalRecord::new(Rmgr::Heap, INFO_VACUUM, Xid::INVALID);
        rec.block(w.id(), false, d);
        self.pool.log_change(&rec, &mut [&mut w]);
        if page::free_space(&w) > PAGE_SIZE / 5 {
            self.rel.fsm.lock().insert(block);
        }
        Ok(())
    }
}

/// What a vacuum found on the pages it visited, after pruning them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VacuumCounts {
    /// Versions the vacuum's prunes removed (their line pointers became unused, a
    /// redirect, or `DEAD`).
    pub pruned: u64,
    /// Versions whose inserter committed and that no committed transaction deleted.
    pub live: u64,
    /// Versions deleted by a committed transaction some snapshot may still see.
    pub dead_left: u64,
}

/// Chain members a lookup may walk before it prunes the page.
const PRUNE_CHAIN_LEN: usize = 4;

/// The offsets on page `p` where a HOT chain starts (a redirect, or a normal tuple that
/// is not heap-only): where an index entry for the chain's row points.
fn chain_roots(p: &[u8]) -> impl Iterator<Item = u16> + '_ {
    (1..=page::item_count(p)).filter(move |&off| match page::line_pointer(p, off).state {
        LpState::Redirect => true,
        LpState::Normal => {
            TupleHeader::read(page::item(p, off)).is_some_and(|h| !h.has(tuple::HEAP_ONLY))
        }
        _ => false,
    })
}

fn root_is_dead(p: &[u8], off: u16) -> bool {
    off >= 1 && off <= page::item_count(p) && page::line_pointer(p, off).state == LpState::Dead
}

/// Walks the HOT chain from `root` to the version visible to `v`; returns it and how
/// many versions were looked at.
fn walk_chain(
    r: &[u8],
    root: Tid,
    v: &Viewer<'_>,
    txn: &TxnManager,
) -> (Option<(Tid, Vec<u8>)>, usize) {
    let (found, walked) = visible_in_chain(r, root, v, txn);
    let found = found.map(|off| {
        let t = page::item(r, off);
        (Tid::new(root.block, off), t[TUPLE_HEADER_SIZE..].to_vec())
    });
    (found, walked)
}

/// The offset of the version of the chain at `root` visible to `v`, and how many
/// members were looked at.
fn visible_in_chain(r: &[u8], root: Tid, v: &Viewer<'_>, txn: &TxnManager) -> (Option<u16>, usize) {
    let mut walked = 0;
    for (off, h) in chain_members(r, root.offset) {
        walked += 1;
        if tuple::visible(&h, v, txn) {
            return (Some(off), walked);
        }
    }
    (None, walked)
}

/// The members of the HOT chain at `root` on page `p` (latched by the caller), oldest
/// first, with their offsets: a redirect at the root is followed, then HOT ctids on the
/// page. Every chain walk goes through here, under one latch: a prune (exclusive latch)
/// may free a chain's dead prefix and a HOT update reuse the slot, so a walk latching
/// each member separately could step from a stale pointer into another row's tuple.
/// The walk also stops at a successor its predecessor's updater did not create
/// (PostgreSQL's prior-xmax check) or that is not a normal tuple.
fn chain_members(p: &[u8], root: u16) -> impl Iterator<Item = (u16, TupleHeader)> + '_ {
    let block = page::page_id(p).block.0;
    let mut next = resolve_offset(p, root);
    let mut prior_xmax: Option<Xid> = None;
    let mut steps = 0;
    std::iter::from_fn(move || {
        let off = next.take()?;
        steps += 1;
        if steps > page::item_count(p) as usize
            || page::line_pointer(p, off).state != LpState::Normal
        {
            return None;
        }
        let h = TupleHeader::read(page::item(p, off))?;
        if prior_xmax.is_some_and(|x| x != h.xmin) {
            return None;
        }
        if h.has(tuple::HOT_UPDATED) && h.ctid.block == block {
            next = Some(h.ctid.offset).filter(|&n| n >= 1 && n <= page::item_count(p));
            prior_xmax = Some(h.xmax);
        }
        Some((off, h))
    })
}

fn resolve_offset(p: &[u8], off: u16) -> Option<u16> {
    if off == 0 || off > page::item_count(p) {
        return None;
    }
    let lp = page::line_pointer(p, off);
    match lp.state {
        LpState::Normal => Some(off),
        LpState::Redirect => {
            let t = lp.off;
            (t >= 1
                && t <= page::item_count(p)
                && page::line_pointer(p, t).state == LpState::Normal)
                .then_some(t)
        }
        _ => None,
    }
}

#[derive(Default)]
struct PrunePlan {
    redirects: Vec<(u16, u16)>,
    dead: Vec<u16>,
    unused: Vec<u16>,
    hints: Vec<(u16, u16)>,
}

impl PrunePlan {
    fn is_empty(&self) -> bool {
        self.redirects.is_empty() && self.dead.is_empty() && self.unused.is_empty()
    }
    fn removed(&self) -> usize {
        self.dead.len() + self.unused.len() + self.redirects.len()
    }
    /// The PRUNE record's data: `nr u16 | nd u16 | nu u16`, then the redirects (`from
    /// u16 | to u16`), dead and unused offsets. Hint bits are not logged (as in
    /// PostgreSQL): they are a cache of clog answers, set on the primary's page under the
    /// same latch and page LSN, and a replayed page without them is just as correct.
    fn encode(&self) -> Vec<u8> {
        let mut d = Vec::new();
        for n in [self.redirects.len(), self.dead.len(), self.unused.len()] {
            d.extend_from_slice(&(n as u16).to_le_bytes());
        }
        for (a, b) in &self.redirects {
            d.extend_from_slice(&a.to_le_bytes());
            d.extend_from_slice(&b.to_le_bytes());
        }
        for x in self.dead.iter().chain(&self.unused) {
            d.extend_from_slice(&x.to_le_bytes());
        }
        d
    }

    /// Sets the plan's hint bits on the (primary's) page.
    fn apply_hints(&self, p: &mut [u8]) {
        for &(o, m) in &self.hints {
            if page::line_pointer(p, o).state == LpState::Normal {
                let t = page::item_mut(p, o);
                if let Some(mut h) = TupleHeader::read(t) {
                    h.infomask = m;
                    h.write(t);
                }
            }
        }
    }
}

/// Decides what pruning removes. Chains are walked from their roots (line pointers that
/// are not heap-only tuples); a version is removable when dead to all.
fn plan_prune(p: &[u8], horizon: Xid, txn: &PageStatuses<'_>) -> PrunePlan {
    let n = page::item_count(p);
    let mut plan = PrunePlan::default();
    let mut in_chain = vec![false; n as usize + 1];
    let header = |off: u16| -> Option<TupleHeader> {
        (page::line_pointer(p, off).state == LpState::Normal)
            .then(|| TupleHeader::read(page::item(p, off)))
            .flatten()
    };
    for root in 1..=n {
        let lp = page::line_pointer(p, root);
        let start = match lp.state {
            LpState::Normal => match header(root) {
                Some(h) if !h.has(tuple::HEAP_ONLY) => root,
                _ => continue,
            },
            LpState::Redirect => lp.off,
            _ => continue,
        };
        // Walk the chain.
        let mut members = Vec::new();
        let mut off = start;
        while off >= 1 && off <= n && !in_chain[off as usize] {
            let Some(h) = header(off) else { break };
            in_chain[off as usize] = true;
            let mut hh = h;
            if tuple::set_hints(&mut hh, txn) {
                plan.hints.push((off, hh.infomask));
            }
            members.push((off, tuple::dead_to_all(&hh, horizon, txn)));
            if h.has(tuple::HOT_UPDATED) && h.ctid.block == page::page_id(p).block.0 {
                off = h.ctid.offset;
            } else {
                break;
            }
        }
        let first_live = members.iter().position(|&(_, dead)| !dead);
        let heap_only_members: Vec<u16> = members
            .iter()
            .map(|&(o, _)| o)
            .filter(|&o| o != root)
            .collect();
        match first_live {
            None => {
                // Whole chain dead: root becomes dead (indexes point at it), the rest go.
                if lp.state == LpState::Normal || lp.state == LpState::Redirect {
                    plan.dead.push(root);
                }
                plan.unused.extend(heap_only_members);
            }
            Some(i) => {
                let live_off = members[i].0;
                let dead_before: Vec<u16> = members[..i].iter().map(|&(o, _)| o).collect();
                if dead_before.is_empty() {
                    continue;
                }
                if live_off != root {
                    if lp.state != LpState::Redirect || lp.off != live_off {
                        plan.redirects.push((root, live_off));
                    }
                    plan.unused
                        .extend(dead_before.into_iter().filter(|&o| o != root));
                }
            }
        }
    }
    // Dead versions never reached from a root (orphaned heap-only tuples) are handled
    // when their chain's root is; leave anything else untouched.
    plan.hints
        .retain(|(o, _)| !plan.unused.contains(o) && !plan.dead.contains(o));
    plan
}

fn apply_prune(p: &mut [u8], d: &[u8]) -> std::result::Result<(), String> {
    let rd = |i: usize| -> std::result::Result<u16, String> {
        d.get(i..i + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .ok_or_else(|| "short prune record".to_string())
    };
    let (nr, nd, nu) = (rd(0)? as usize, rd(2)? as usize, rd(4)? as usize);
    let expected = 6 + nr * 4 + (nd + nu) * 2;
    if d.len() != expected {
        return Err(format!(
            "prune record of {} bytes, expected {expected}",
            d.len()
        ));
    }
    let count = page::item_count(p);
    let check = |o: u16| {
        if o >= 1 && o <= count {
            Ok(o)
        } else {
            Err(format!("prune offset {o} out of range"))
        }
    };
    let mut at = 6;
    for _ in 0..nr {
        let (a, b) = (check(rd(at)?)?, check(rd(at + 2)?)?);
        page::set_lp_state(p, a, LpState::Redirect, b);
        at += 4;
    }
    for _ in 0..nd {
        let o = check(rd(at)?)?;
        page::set_lp_state(p, o, LpState::Dead, 0);
        at += 2;
    }
    for _ in 0..nu {
        let o = check(rd(at)?)?;
        page::set_lp_state(p, o, LpState::Unused, 0);
        at += 2;
    }
    page::compact(p);
    let px = oldest_prunable_xmax(p);
    page::set_prune_xid(p, px);
    Ok(())
}

/// The statuses of the xids a latched page's tuples have no hint bit for, read before
/// a change under the exclusive latch (prune, freeze) decides anything. A status the
/// clog cannot give (truncated below its oldest xid: a freeze pass missed this page; or
/// an unreadable segment) is then an error for this operation with nothing changed,
/// not a panic under the latch, which aborts the process (and would again after every
/// restart). PostgreSQL likewise decides tuple states before its critical section.
struct PageStatuses<'a> {
    /// Sorted by xid, one entry per xid.
    known: Vec<(Xid, XidStatus)>,
    txn: &'a TxnManager,
}

impl<'a> PageStatuses<'a> {
    fn read(p: &[u8], txn: &'a TxnManager) -> Result<PageStatuses<'a>> {
        let mut want = Vec::new();
        for o in 1..=page::item_count(p) {
            if page::line_pointer(p, o).state != LpState::Normal {
                continue;
            }
            let Some(h) = TupleHeader::read(page::item(p, o)) else {
                continue;
            };
            if !h.has(tuple::XMIN_COMMITTED | tuple::XMIN_INVALID) {
                want.push(h.xmin);
            }
            if h.xmax.is_valid() && !h.has(tuple::XMAX_COMMITTED | tuple::XMAX_INVALID) {
                want.push(h.xmax);
            }
        }
        want.sort_unstable();
        want.dedup();
        let known = want
            .into_iter()
            .map(|x| Ok((x, txn.try_status(x)?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(PageStatuses { known, txn })
    }
}

impl tuple::StatusSource for PageStatuses<'_> {
    fn xid_status(&self, xid: Xid) -> XidStatus {
        match self.known.binary_search_by_key(&xid, |&(x, _)| x) {
            Ok(i) => self.known[i].1,
            // Not on the page when it was read (never, for the callers above).
            Err(_) => self.txn.status(xid),
        }
    }
}

/// FREEZE record data: `offset u16 | bits u16` per tuple; the bits are ORed into its
/// infomask (hint bits only ever go from unset to their final value).
fn apply_freeze(p: &mut [u8], d: &[u8]) -> std::result::Result<(), String> {
    if !d.len().is_multiple_of(4) {
        return Err(format!("freeze record of {} bytes", d.len()));
    }
    let count = page::item_count(p);
    for c in d.chunks(4) {
        let o = u16::from_le_bytes([c[0], c[1]]);
        let bits = u16::from_le_bytes([c[2], c[3]]);
        if o == 0 || o > count || page::line_pointer(p, o).state != LpState::Normal {
            return Err(format!("freeze of offset {o}, which holds no tuple"));
        }
        let t = page::item_mut(p, o);
        let mut h = TupleHeader::read(t).ok_or_else(|| format!("short tuple at {o}"))?;
        h.infomask |= bits;
        h.write(t);
    }
    Ok(())
}

fn apply_vacuum(p: &mut [u8], d: &[u8]) -> std::result::Result<(), String> {
    let count = page::item_count(p);
    for c in d.chunks(2) {
        if c.len() != 2 {
            return Err("short vacuum record".into());
        }
        let o = u16::from_le_bytes([c[0], c[1]]);
        if o == 0 || o > count {
            return Err(format!("vacuum offset {o} out of range"));
        }
        if page::line_pointer(p, o).state == LpState::Dead {
            page::set_lp_state(p, o, LpState::Unused, 0);
        }
    }
    page::compact(p);
    Ok(())
}

/// Page-level redo for one block of a heap record (pure: no pool access).
pub fn redo_block(
    xid: Xid,
    info: u8,
    block_index: usize,
    data: &[u8],
    page_bytes: &mut [u8],
    id: PageId,
    will_init: bool,
) -> std::result::Result<(), String> {
    if will_init {
        init_heap_page(page_bytes, id);
    } else if page::is_new(page_bytes) {
        return Err(format!("heap redo on uninitialised page {id}"));
    }
    match (info, block_index) {
        (INFO_INSERT, 0) => apply_new_side(page_bytes, data, xid).map(|_| ()),
        (INFO_UPDATE_SAME_PAGE, 0) => {
            if data.len() < OLD_SIDE_LEN {
                return Err("short update record".into());
            }
            apply_new_side(page_bytes, &data[OLD_SIDE_LEN..], xid)?;
            apply_old_side(page_bytes, &data[..OLD_SIDE_LEN], xid)
        }
        (INFO_UPDATE_TWO_PAGES, 0) | (INFO_DELETE, 0) => apply_old_side(page_bytes, data, xid),
        (INFO_UPDATE_TWO_PAGES, 1) => apply_new_side(page_bytes, data, xid).map(|_| ()),
        (INFO_PRUNE, 0) => apply_prune(page_bytes, data),
        (INFO_VACUUM, 0) => apply_vacuum(page_bytes, data),
        (INFO_FREEZE, 0) => apply_freeze(page_bytes, data),
        (INFO_MULTI_INSERT, 0) => apply_multi_insert(page_bytes, data, xid),
        _ => Err(format!(
            "unknown heap record info {info} block {block_index}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use walrus_base::RelFileId;

    fn page() -> (Vec<u8>, PageId) {
        let id = PageId::new(RelFileId(7), 3);
        let mut p = vec![0u8; PAGE_SIZE];
        init_heap_page(&mut p, id);
        (p, id)
    }

    #[test]
    fn fresh_versions_are_logged_compactly_and_redo_rebuilds_them_byte_for_byte() {
        let xid = Xid(1234);
        let row = b"a row's bytes".to_vec();
        let t = tuple::build(&TupleHeader::new(xid, 3, tuple::HEAP_ONLY), &row);
        let d = new_side(1, &t, xid);
        assert_eq!(d[2], NEW_SIDE_COMPACT);
        assert_eq!(
            d.len(),
            3 + 6 + row.len(),
            "only cmin and infomask of the header"
        );
        let (mut p, _) = page();
        assert_eq!(apply_new_side(&mut p, &d, xid).unwrap(), 1);
        assert_eq!(page::item(&p, 1), &t[..]);
    }

    #[test]
    fn multi_insert_redo_rebuilds_every_tuple_and_refuses_damaged_records() {
        let xid = Xid(77);
        let (mut done, id) = page();
        let mut data = 3u16.to_le_bytes().to_vec();
        for i in 0..3u8 {
            let t = tuple::build(&TupleHeader::new(xid, 0, 0), &[i; 20]);
            let off =
                page::add_item(&mut done, &t, Placement::Append { reuse_unused: true }).unwrap();
            let side = new_side(off, &t, xid);
            data.extend_from_slice(&(side.len() as u16).to_le_bytes());
            data.extend_from_slice(&side);
        }
        let mut redone = vec![0u8; PAGE_SIZE];
        redo_block(xid, INFO_MULTI_INSERT, 0, &data, &mut redone, id, true).unwrap();
        assert_eq!(redone, done, "redo rebuilds the page byte for byte");
        for cut in [1, 3, data.len() - 1] {
            let (mut p, id) = page();
            assert!(
                redo_block(xid, INFO_MULTI_INSERT, 0, &data[..cut], &mut p, id, false).is_err()
            );
        }
        let mut long = data.clone();
        long.push(0);
        let (mut p, id) = page();
        assert!(redo_block(xid, INFO_MULTI_INSERT, 0, &long, &mut p, id, false).is_err());
    }

    #[test]
    fn a_version_not_of_the_fresh_form_is_logged_whole() {
        let xid = Xid(1234);
        let mut h = TupleHeader::new(xid, 0, 0);
        h.ctid = Tid::new(9, 2); // not what a fresh version has
        let t = tuple::build(&h, b"row");
        let d = new_side(1, &t, xid);
        assert_eq!(d[2], NEW_SIDE_FULL);
        let (mut p, _) = page();
        apply_new_side(&mut p, &d, xid).unwrap();
        assert_eq!(page::item(&p, 1), &t[..]);
        // Written by another xid than the record's: also whole.
        let t2 = tuple::build(&TupleHeader::new(Xid(99), 0, 0), b"row");
        assert_eq!(new_side(2, &t2, xid)[2], NEW_SIDE_FULL);
    }

    #[test]
    fn old_side_takes_xmax_from_the_record() {
        let (mut p, _) = page();
        let t = tuple::build(&TupleHeader::new(Xid(10), 0, 0), b"row");
        apply_new_side(&mut p, &new_side(1, &t, Xid(10)), Xid(10)).unwrap();
        let d = old_side(1, 5, Tid::new(3, 2), tuple::UPDATED);
        assert_eq!(d.len(), OLD_SIDE_LEN);
        apply_old_side(&mut p, &d, Xid(11)).unwrap();
        let h = TupleHeader::read(page::item(&p, 1)).unwrap();
        assert_eq!((h.xmax, h.cmax, h.ctid), (Xid(11), 5, Tid::new(3, 2)));
        assert!(h.has(tuple::UPDATED) && !h.has(tuple::XMAX_INVALID));
    }

    #[test]
    fn freeze_redo_ors_hint_bits_and_refuses_damaged_records() {
        let (mut p, _) = page();
        let t = tuple::build(&TupleHeader::new(Xid(10), 0, 0), b"row");
        apply_new_side(&mut p, &new_side(1, &t, Xid(10)), Xid(10)).unwrap();
        let mut d = 1u16.to_le_bytes().to_vec();
        d.extend_from_slice(&tuple::XMIN_COMMITTED.to_le_bytes());
        apply_freeze(&mut p, &d).unwrap();
        let h = TupleHeader::read(page::item(&p, 1)).unwrap();
        assert!(h.has(tuple::XMIN_COMMITTED) && h.has(tuple::XMAX_INVALID));
        assert_eq!(h.xmin, Xid(10), "freezing keeps the xid");
        for bad in [&d[..3], &[2u8, 0, 1, 0][..], &[0u8, 0, 1, 0][..]] {
            assert!(apply_freeze(&mut p, bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn damaged_new_sides_are_errors_not_panics() {
        let (mut p, _) = page();
        for d in [
            &[1u8, 0][..],
            &[1, 0, 1, 0],
            &[1, 0, 7, 1, 2, 3],
            &[1, 0, 0, 1, 2],
        ] {
            assert!(apply_new_side(&mut p, d, Xid(5)).is_err(), "{d:?}");
        }
    }
}
