//! The commit-status log (clog): two bits per xid, in 8 KiB pages of 32 768 xids, kept
//! in a small pool of resident pages and persisted in segment files of 32 pages.
//!
//! Hot path: setting or reading the status of an xid whose page is resident takes no
//! lock: find the slot by scanning the slots' page numbers, pin it (atomic counter),
//! re-check the page number, do one atomic `fetch_or`/`load` on a 64-bit word, unpin.
//!
//! Cold path (page not resident): the pool's exclusive mutex is needed to replace a
//! slot. Committers do not queue on that mutex one by one: each pushes `(xid, status)` on
//! a pending list, the first to find no leader becomes the leader, takes the mutex once,
//! applies every pending update (loading pages as needed) and wakes the others — the
//! group update of PostgreSQL 10 (seed 004). Counters report lock waits and group sizes.
//!
//! Replacement protocol: a slot's page number and pin count share one atomic word
//! (`page << PIN_BITS | pins`). A pinner compare-and-swaps the count up only while the
//! word names its page; the replacer (holding the mutex) compare-and-swaps the page part
//! to `REPLACING` and then waits for the count to drain. Both are read-modify-writes of
//! the same word, so a pin can never slip past a replacement. (The first design kept the
//! two in separate atomics and relied on SeqCst store-load ordering — correct, but a
//! Dekker pattern the loom model checker cannot verify; the loom test in this file found
//! the interleaving it could not exclude, and this layout removes the question.)
//!
//! Truncation (`truncate_below`): segment files whose xids all lie below a freeze
//! pass's cutoff are deleted, lowest first, by the checkpoint that made the pass's
//! hint bits durable (DESIGN §6, `engine/vacuum.rs`). Every tuple still holding such an
//! xid carries a hint bit with its final status, so no reader needs the file again; a
//! lookup below `oldest_xid` means a page escaped the pass: `try_get_status` reports
//! it (`ClogError::Truncated`) and `get_status` panics naming the xid, rather than
//! answer "aborted" from a missing file. The lowest
//! truncation point is recorded in the control file before any file goes, so at open a
//! file below it is the leftover of an interrupted truncation (removed), and a file
//! missing at or above it is damage (refused: those statuses are lost). Segment files
//! are created contiguously (`reserve_space`), so a gap is damage too.
//!
//! No checksums on clog pages, on purpose: status bits only ever go from 0 (in
//! progress) to a final value, every checkpoint fsyncs the clog before it completes, and
//! recovery replays commit/abort records from the redo LSN. So a torn clog page holds, in
//! each sector, either the old or the new bits, both of which contain every status from
//! before the previous checkpoint; everything later is replayed.

use std::collections::HashSet;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{Ordering::Relaxed, Ordering::SeqCst};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use crate::io::{self, FileKind};
use crate::sync::{AtomicBool, AtomicU64};
use walrus_base::{Xid, PAGE_SIZE};

/// Why a status cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ClogError {
    /// Below the truncation point, where only hint bits know (a tuple without them
    /// escaped a freeze pass).
    #[error(
        "could not access status of transaction {xid}: the commit-status log keeps statuses \
         from xid {oldest} on, and the row version has no hint bit for it (a freeze pass \
         missed its page)"
    )]
    Truncated { xid: Xid, oldest: Xid },
    #[error("could not access status of transaction {xid}: could not read \"{path}\": {cause}")]
    Unreadable {
        xid: Xid,
        path: String,
        cause: std::io::Error,
    },
}

/// Bytes of one commit-status page (two bits per xid). Tiny under loom so a model
/// iteration does not create thousands of modelled atomics.
const CLOG_PAGE_BYTES: usize = if cfg!(loom) { 16 } else { PAGE_SIZE };
pub const XIDS_PER_PAGE: u64 = (CLOG_PAGE_BYTES * 4) as u64;
const WORDS: usize = CLOG_PAGE_BYTES / 8;
const PAGES_PER_SEGMENT: u64 = 32;
const PIN_BITS: u32 = 16;
const PIN_MASK: u64 = (1 << PIN_BITS) - 1;
/// Page-number values of a slot holding no page / being replaced.
const NO_PAGE: u64 = u64::MAX >> PIN_BITS;
const REPLACING: u64 = NO_PAGE - 1;

impl Slot {
    fn page(&self) -> u64 {
        self.state.load(SeqCst) >> PIN_BITS
    }
    fn pins(&self) -> u64 {
        self.state.load(SeqCst) & PIN_MASK
    }
    /// Sets the page number of a slot nobody has pinned (only the replacer does this).
    fn set_page(&self, page: u64) {
        debug_assert_eq!(self.pins(), 0);
        self.state.store(page << PIN_BITS, SeqCst);
    }
    fn unpin(&self) {
        let prev = self.state.fetch_sub(1, SeqCst);
        assert!(
            prev & PIN_MASK != 0,
            "clog slot unpinned more often than pinned"
        );
    }
}

#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XidStatus {
    InProgress = 0,
    Committed = 1,
    Aborted = 2,
    SubCommitted = 3,
}

impl XidStatus {
    fn from_bits(b: u64) -> XidStatus {
        match b & 3 {
            0 => XidStatus::InProgress,
            1 => XidStatus::Committed,
            2 => XidStatus::Aborted,
            _ => XidStatus::SubCommitted,
        }
    }
}

struct Slot {
    /// `page << PIN_BITS | pins` (see the replacement protocol above).
    state: AtomicU64,
    dirty: AtomicBool,
    /// Clock reference bit for replacement (set on use, cleared by the sweep).
    referenced: AtomicBool,
    /// Replacement sequence: odd while the slot's contents are being replaced.
    seq: AtomicU64,
    /// The highest WAL position (end of a commit record) whose status this page holds
    /// since it was loaded (PostgreSQL's group LSN of a CLOG page): the page is written
    /// only after WAL is flushed that far. With `synchronous_commit = off` a commit's
    /// status is set before its record is durable; written out first, it would survive a
    /// crash that lost the record (and the xid's reservation, so the xid could be handed
    /// out again and be "committed" at once).
    wal_lsn: AtomicU64,
    words: Box<[AtomicU64]>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClogStats {
    /// Times a caller had to wait for the exclusive pool lock.
    pub lock_waits: u64,
    /// Leader rounds of group update.
    pub group_updates: u64,
    /// Updates applied by leaders in total.
    pub group_members: u64,
    pub max_group_size: u64,
    /// Status sets done lock-free on a resident page.
    pub fast_path_sets: u64,
}

struct Pending {
    xid: Xid,
    status: XidStatus,
    wal_lsn: u64,
    done: Arc<(Mutex<bool>, Condvar)>,
}

#[derive(Default)]
struct Counters {
    lock_waits: AtomicU64,
    group_updates: AtomicU64,
    group_members: AtomicU64,
    max_group_size: AtomicU64,
    fast_path_sets: AtomicU64,
}

/// Marks a slot recently used without writing its cache line when already marked.
fn touch(s: &Slot) {
    if !s.referenced.load(Relaxed) {
        s.referenced.store(true, Relaxed);
    }
}

pub struct Clog {
    dir: PathBuf,
    slots: Box<[Slot]>,
    /// The pool's exclusive lock (slot replacement, page I/O).
    pool_lock: Mutex<()>,
    pending: Mutex<(Vec<Pending>, bool)>,
    counters: Counters,
    /// Segments written since the last `flush_all`.
    touched: Mutex<HashSet<u64>>,
    /// Clock hand for slot replacement (used under `pool_lock` only).
    hand: std::sync::atomic::AtomicUsize,
    /// Segment files for xids below this have their disk space (see `reserve_upto`).
    space_ready_upto: std::sync::atomic::AtomicU64,
    space_lock: Mutex<()>,
    /// Statuses of xids below this were truncated away (see the module comment).
    oldest_xid: AtomicU64,
    /// Flushes WAL up to a position (set by the engine; see `Slot::wal_lsn`).
    wal_flush: std::sync::OnceLock<Box<dyn Fn(u64) + Send + Sync>>,
}

/// Xids one segment file holds.
pub const XIDS_PER_SEGMENT: u64 = XIDS_PER_PAGE * PAGES_PER_SEGMENT;

impl Clog {
    /// Opens a clog that keeps statuses from xid 0 on (tests; see [`Clog::open_at`]).
    pub fn open(dir: &Path, slots: usize) -> std::io::Result<Clog> {
        Clog::open_at(dir, slots, Xid(0), Xid(0))
    }

    /// Opens the clog in `dir`, whose statuses below `oldest` (a segment boundary, from
    /// the control file) were truncated. Removes segment files below it (an interrupted
    /// truncation) and refuses a directory whose files do not run without a gap from
    /// `oldest`'s segment on: a missing segment's statuses are lost, and answering
    /// "aborted" for them would hide committed rows. Xids below `assigned_below` are
    /// known to have been handed out, so their segments must be there too (every writer
    /// reserves its segment before it takes an xid).
    pub fn open_at(
        dir: &Path,
        slots: usize,
        oldest: Xid,
        assigned_below: Xid,
    ) -> std::io::Result<Clog> {
        std::fs::create_dir_all(dir)?;
        let oldest_seg = oldest.0 / XIDS_PER_SEGMENT;
        let mut present = Vec::new();
        for seg in Clog::segments_in(dir)? {
            if seg < oldest_seg {
                io::remove_file(FileKind::Clog, &dir.join(format!("{seg:012X}")))?;
            } else {
                present.push(seg);
            }
        }
        if let Some(problem) = Clog::check_files(dir, oldest, assigned_below)? {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                problem,
            ));
        }
        // Space is ready up to the first file shorter than a whole segment (a
        // reservation cut off by a full disk or a kill), else past the last file: the
        // next reservation starts there and completes that file. `check_files` above
        // made sure no handed-out xid lives in the missing part.
        let seg_bytes = PAGES_PER_SEGMENT * CLOG_PAGE_BYTES as u64;
        let mut want = present.last().map_or(oldest_seg, |&s| s + 1);
        for &seg in &present {
            if std::fs::metadata(dir.join(format!("{seg:012X}")))?.len() < seg_bytes {
                want = seg;
                break;
            }
        }
        let slots = (0..slots.max(2))
            .map(|_| Slot {
                state: AtomicU64::new(NO_PAGE << PIN_BITS),
                dirty: AtomicBool::new(false),
                referenced: AtomicBool::new(false),
                seq: AtomicU64::new(0),
                wal_lsn: AtomicU64::new(0),
                words: (0..WORDS).map(|_| AtomicU64::new(0)).collect(),
            })
            .collect();
        Ok(Clog {
            dir: dir.to_path_buf(),
            slots,
            pool_lock: Mutex::new(()),
            pending: Mutex::new((Vec::new(), false)),
            counters: Counters::default(),
            touched: Mutex::new(HashSet::new()),
            hand: std::sync::atomic::AtomicUsize::new(0),
            space_ready_upto: std::sync::atomic::AtomicU64::new(want * XIDS_PER_SEGMENT),
            space_lock: Mutex::new(()),
            oldest_xid: AtomicU64::new(oldest_seg * XIDS_PER_SEGMENT),
            wal_flush: std::sync::OnceLock::new(),
        })
    }

    /// How a dirty page's WAL is made durable before the page is written (the engine
    /// passes the WAL's flush). Until set (recovery, tests), pages carry no WAL position.
    pub fn set_wal_flush(&self, flush: Box<dyn Fn(u64) + Send + Sync>) {
        let _ = self.wal_flush.set(flush);
    }

    /// The first thing wrong with the segment files in `dir` for a clog that keeps
    /// statuses from `oldest` on and has handed out the xids below `assigned_below`
    /// (`None`: nothing). Files below `oldest` are ignored (leftovers of a truncation).
    /// From `oldest`'s segment on, files must run without a gap, up to the segment of the
    /// last handed-out xid at least; every segment holding handed-out xids must have its
    /// full size up to that xid's page (segments are reserved whole before their first
    /// xid is handed out, so a shorter file lost statuses: reading zeros there would
    /// turn commits into aborts). Also used by `walrus verify`.
    pub fn check_files(
        dir: &Path,
        oldest: Xid,
        assigned_below: Xid,
    ) -> std::io::Result<Option<String>> {
        let oldest_seg = oldest.0 / XIDS_PER_SEGMENT;
        let present: Vec<u64> = Clog::segments_in(dir)?
            .into_iter()
            .filter(|&s| s >= oldest_seg)
            .collect();
        let range = |seg: u64| {
            format!(
                "the statuses of xids {}..{}",
                seg * XIDS_PER_SEGMENT,
                (seg + 1) * XIDS_PER_SEGMENT - 1
            )
        };
        let mut want = oldest_seg;
        for &seg in &present {
            if seg != want {
                break;
            }
            want += 1;
        }
        if present.len() as u64 != want - oldest_seg {
            return Ok(Some(format!(
                "commit-status log segment {want:012X} is missing ({} are lost)",
                range(want)
            )));
        }
        // The last handed-out xid, if it is one whose status the clog keeps.
        let last = (assigned_below > Xid::FIRST_NORMAL && assigned_below > oldest)
            .then(|| assigned_below.0 - 1);
        let Some(last) = last else { return Ok(None) };
        let last_seg = last / XIDS_PER_SEGMENT;
        if last_seg >= want {
            return Ok(Some(format!(
                "commit-status log segment {want:012X} is missing ({} are lost)",
                range(want)
            )));
        }
        let seg_bytes = PAGES_PER_SEGMENT * CLOG_PAGE_BYTES as u64;
        for &seg in present.iter().filter(|&&s| s <= last_seg) {
            let need = if seg < last_seg {
                seg_bytes
            } else {
                (last % XIDS_PER_SEGMENT / XIDS_PER_PAGE + 1) * CLOG_PAGE_BYTES as u64
            };
            let len = std::fs::metadata(dir.join(format!("{seg:012X}")))?.len();
            if len < need {
                return Ok(Some(format!(
                    "commit-status log segment {seg:012X} is truncated: {len} bytes where \
                     {need} were written ({} may be lost)",
                    range(seg)
                )));
            }
        }
        Ok(None)
    }

    /// The segment numbers of the files in `dir`, ascending (other names are ignored).
    fn segments_in(dir: &Path) -> std::io::Result<Vec<u64>> {
        let mut segs = Vec::new();
        for e in std::fs::read_dir(dir)? {
            let name = e?.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.len() == 12 {
                if let Ok(n) = u64::from_str_radix(name, 16) {
                    segs.push(n);
                }
            }
        }
        segs.sort_unstable();
        Ok(segs)
    }

    /// Statuses of xids below this are gone (truncated); tuples carry them as hint bits.
    pub fn oldest_xid(&self) -> Xid {
        Xid(self.oldest_xid.load(SeqCst))
    }

    /// Deletes the segment files whose xids all lie below `cutoff`, lowest first, and
    /// returns how many went. The caller guarantees that every tuple with an xid below
    /// `cutoff` has durable hint bits (a freeze pass whose WAL a completed checkpoint's
    /// redo point has passed). Xids at or above the current next xid are never below a
    /// cutoff, so the segment of the next xid stays.
    pub fn truncate_below(&self, cutoff: Xid) -> std::io::Result<usize> {
        let keep_from = cutoff.0 / XIDS_PER_SEGMENT;
        let _g = self.lock_pool();
        let old = self.oldest_xid.load(SeqCst) / XIDS_PER_SEGMENT;
        if keep_from <= old {
            return Ok(0);
        }
        // Lookups below the new point fail loudly from now on; the resident pages there
        // are clean (the checkpoint flushed them, and no xid there changes status).
        self.oldest_xid.store(keep_from * XIDS_PER_SEGMENT, SeqCst);
        for s in self.slots.iter() {
            let page = s.page();
            if page != NO_PAGE && page != REPLACING && page / PAGES_PER_SEGMENT < keep_from {
                assert!(
                    !s.dirty.load(SeqCst),
                    "clog page {page} is dirty below the truncation point"
                );
                // Claim it as the replacer does (pins drain first), then empty it.
                let mut cur = s.state.load(SeqCst);
                while let Err(now) = s.state.compare_exchange_weak(
                    cur,
                    (REPLACING << PIN_BITS) | (cur & PIN_MASK),
                    SeqCst,
                    SeqCst,
                ) {
                    cur = now;
                }
                s.seq.fetch_add(1, SeqCst);
                while s.pins() != 0 {
                    crate::sync::spin_loop();
                }
                s.set_page(NO_PAGE);
                s.seq.fetch_add(1, SeqCst);
            }
        }
        self.touched.lock().retain(|&seg| seg >= keep_from);
        let mut removed = 0;
        for seg in Clog::segments_in(&self.dir)? {
            if seg >= keep_from {
                break;
            }
            io::remove_file(FileKind::Clog, &self.seg_path(seg))?;
            removed += 1;
        }
        if removed > 0 {
            io::sync_dir(&self.dir)?;
        }
        Ok(removed)
    }

    fn locate(xid: Xid) -> (u64, usize, u32) {
        assert!(xid.is_valid(), "clog lookup of the invalid xid");
        let page = xid.0 / XIDS_PER_PAGE;
        assert!(
            page < REPLACING,
            "xid {xid} beyond the commit-status log's range"
        );
        let within = xid.0 % XIDS_PER_PAGE;
        (page, (within / 32) as usize, ((within % 32) * 2) as u32)
    }

    /// Pins the slot holding `page`, if resident (for sets: a pinned slot cannot be
    /// replaced, so a `fetch_or` on it is never lost).
    fn pin(&self, page: u64) -> Option<&Slot> {
        for s in self.slots.iter() {
            let mut cur = s.state.load(SeqCst);
            while cur >> PIN_BITS == page {
                assert!(cur & PIN_MASK != PIN_MASK, "too many pins on a clog slot");
                match s.state.compare_exchange_weak(cur, cur + 1, SeqCst, SeqCst) {
                    Ok(_) => {
                        touch(s);
                        return Some(s);
                    }
                    Err(now) => cur = now,
                }
            }
        }
        None
    }

    /// Reads a status word without pinning (a seqlock): the slot's replacement sequence
    /// is odd while its contents change, so an even, unchanged sequence around the read
    /// with the right page number proves the word belonged to `page`. No shared cache
    /// line is written on this path.
    fn read_word(&self, page: u64, word: usize) -> Option<u64> {
        for s in self.slots.iter() {
            let before = s.seq.load(SeqCst);
            if before.is_multiple_of(2) && s.page() == page {
                let v = s.words[word].load(SeqCst);
                if s.seq.load(SeqCst) == before {
                    touch(s);
                    return Some(v);
                }
            }
        }
        None
    }

    /// Status of `xid`, for callers that cannot fail: a status lost to truncation or
    /// an unreadable segment stops the caller with a panic naming the xid, never an
    /// invented answer ("aborted" would hide a committed row, and a hint bit set from it
    /// would hide it for good). Paths that change pages use [`Clog::try_get_status`].
    pub fn get_status(&self, xid: Xid) -> XidStatus {
        match self.try_get_status(xid) {
            Ok(s) => s,
            Err(e) => panic!("{e}"),
        }
    }

    /// Status of `xid`, or why it cannot be known. The truncation point is checked
    /// again after the lookup: a truncation running concurrently empties the slots
    /// below its point, and a word read from a slot refilled from a deleted file would
    /// be zeros (in progress), so a lookup that raced one is reported as truncated.
    pub fn try_get_status(&self, xid: Xid) -> Result<XidStatus, ClogError> {
        if xid.0 < Xid::FIRST_NORMAL.0 {
            assert!(xid.is_valid(), "clog lookup of the invalid xid");
            return Ok(XidStatus::Committed);
        }
        let truncated = |oldest: u64| ClogError::Truncated {
            xid,
            oldest: Xid(oldest),
        };
        let oldest = self.oldest_xid.load(SeqCst);
        if xid.0 < oldest {
            return Err(truncated(oldest));
        }
        let (page, word, shift) = Clog::locate(xid);
        let status = loop {
            if let Some(v) = self.read_word(page, word) {
                break XidStatus::from_bits(v >> shift);
            }
            let _g = self.lock_pool();
            // Under the pool lock no truncation runs: re-check before loading a page
            // whose file it may just have deleted.
            let oldest = self.oldest_xid.load(SeqCst);
            if xid.0 < oldest {
                return Err(truncated(oldest));
            }
            if let Err(cause) = self.ensure_resident(page) {
                return Err(ClogError::Unreadable {
                    xid,
                    path: self
                        .seg_path(page / PAGES_PER_SEGMENT)
                        .display()
                        .to_string(),
                    cause,
                });
            }
        };
        let oldest = self.oldest_xid.load(SeqCst);
        if xid.0 < oldest {
            return Err(truncated(oldest));
        }
        Ok(status)
    }

    fn lock_pool(&self) -> parking_lot::MutexGuard<'_, ()> {
        if let Some(g) = self.pool_lock.try_lock() {
            return g;
        }
        self.counters.lock_waits.fetch_add(1, SeqCst);
        self.pool_lock.lock()
    }

    fn set_on(&self, s: &Slot, word: usize, shift: u32, status: XidStatus, xid: Xid, lsn: u64) {
        // The position first: a writer that copies the new bits then reads it (see
        // `write_slot`) flushes WAL at least this far.
        if lsn > 0 {
            s.wal_lsn.fetch_max(lsn, SeqCst);
        }
        let prev = s.words[word].fetch_or((status as u64) << shift, SeqCst);
        let old = XidStatus::from_bits(prev >> shift);
        assert!(
            old == XidStatus::InProgress || old == status,
            "xid {xid} status changing from {old:?} to {status:?}"
        );
        s.dirty.store(true, SeqCst);
    }

    /// Records the final status of `xid` whose WAL needs no flush before the page is
    /// written: an abort, or a status replayed from WAL already on disk.
    pub fn set_status(&self, xid: Xid, status: XidStatus) {
        self.set_status_at(xid, status, walrus_base::Lsn::ZERO);
    }

    /// Records the final status of `xid`, set by the WAL record ending at `wal_lsn`: the
    /// page is not written before WAL is flushed to there.
    pub fn set_status_at(&self, xid: Xid, status: XidStatus, wal_lsn: walrus_base::Lsn) {
        assert!(
            status != XidStatus::InProgress,
            "cannot set an xid back to in progress"
        );
        assert!(
            xid.0 >= Xid::FIRST_NORMAL.0,
            "status of a special xid is fixed"
        );
        assert!(
            xid.0 >= self.oldest_xid.load(SeqCst),
            "status of xid {xid} set below the commit-status log's truncation point"
        );
        let (page, word, shift) = Clog::locate(xid);
        if let Some(s) = self.pin(page) {
            self.set_on(s, word, shift, status, xid, wal_lsn.0);
            s.unpin();
            self.counters.fast_path_sets.fetch_add(1, SeqCst);
            return;
        }
        self.group_update(xid, status, wal_lsn.0);
    }

    fn group_update(&self, xid: Xid, status: XidStatus, wal_lsn: u64) {
        let done = Arc::new((Mutex::new(false), Condvar::new()));
        let lead = {
            let mut p = self.pending.lock();
            p.0.push(Pending {
                xid,
                status,
                wal_lsn,
                done: done.clone(),
            });
            if p.1 {
                false
            } else {
                p.1 = true;
                true
            }
        };
        if !lead {
            let mut d = done.0.lock();
            while !*d {
                done.1.wait(&mut d);
            }
            return;
        }
        let _leading = crate::AbortOnUnwind("commit-status group update leader");
        let _g = self.lock_pool();
        loop {
            let batch = {
                let mut p = self.pending.lock();
                if p.0.is_empty() {
                    p.1 = false;
                    break;
                }
                std::mem::take(&mut p.0)
            };
            self.counters.group_updates.fetch_add(1, SeqCst);
            self.counters
                .group_members
                .fetch_add(batch.len() as u64, SeqCst);
            self.counters
                .max_group_size
                .fetch_max(batch.len() as u64, SeqCst);
            for u in &batch {
                let (page, word, shift) = Clog::locate(u.xid);
                loop {
                    if let Some(s) = self.pin(page) {
                        self.set_on(s, word, shift, u.status, u.xid, u.wal_lsn);
                        s.unpin();
                        break;
                    }
                    if let Err(e) = self.ensure_resident(page) {
                        crate::fatal_io("read commit-status log", &e);
                    }
                }
            }
            for u in batch {
                *u.done.0.lock() = true;
                u.done.1.notify_all();
            }
        }
    }

    /// Gives the segment files for xids from `next` up to `upto` their whole disk space, so that
    /// writing a status page later (at a checkpoint or an eviction, where a failure would
    /// be fatal) cannot find the disk full. Called before a transaction writes anything:
    /// a full disk is then that operation's error. One atomic load when the space is
    /// there.
    pub fn reserve_space(&self, next: u64, upto: u64) -> std::io::Result<()> {
        if self.space_ready_upto.load(Relaxed) >= upto {
            return Ok(());
        }
        let _one = self.space_lock.lock();
        let xids_per_seg = XIDS_PER_PAGE * PAGES_PER_SEGMENT;
        // From the first segment without its space, never from `next`: segment files
        // stay contiguous (a gap means damage at open) even when xids jump ahead.
        debug_assert!(next <= upto);
        let from = self.space_ready_upto.load(Relaxed) / xids_per_seg;
        let to = upto.div_ceil(xids_per_seg);
        for seg in from..to {
            io::reserve_space(
                FileKind::Clog,
                &self.open_seg(seg)?,
                0,
                PAGES_PER_SEGMENT * CLOG_PAGE_BYTES as u64,
            )?;
        }
        self.space_ready_upto.fetch_max(to * xids_per_seg, Relaxed);
        Ok(())
    }

    fn seg_path(&self, seg: u64) -> PathBuf {
        self.dir.join(format!("{seg:012X}"))
    }

    fn open_seg(&self, seg: u64) -> std::io::Result<File> {
        io::open_rw(FileKind::Clog, &self.seg_path(seg), true, false)
    }

    fn write_slot(&self, s: &Slot, page: u64) -> std::io::Result<()> {
        let mut buf = vec![0u8; CLOG_PAGE_BYTES];
        for (i, w) in s.words.iter().enumerate() {
            buf[i * 8..i * 8 + 8].copy_from_slice(&w.load(SeqCst).to_le_bytes());
        }
        // WAL before the commit-status page: read after the words, so every status
        // copied above has its position included (setters store it before the bits).
        let lsn = s.wal_lsn.load(SeqCst);
        if lsn > 0 {
            if let Some(flush) = self.wal_flush.get() {
                flush(lsn);
            }
        }
        let seg = page / PAGES_PER_SEGMENT;
        io::write_at(
            FileKind::Clog,
            &self.open_seg(seg)?,
            &buf,
            (page % PAGES_PER_SEGMENT) * CLOG_PAGE_BYTES as u64,
        )?;
        self.touched.lock().insert(seg);
        Ok(())
    }

    /// Makes `page` resident. Caller holds `pool_lock`.
    fn ensure_resident(&self, page: u64) -> std::io::Result<()> {
        if self.slots.iter().any(|s| s.page() == page) {
            return Ok(());
        }
        // Victim: an empty slot, else clock sweep over reference bits (unpinned only).
        let victim = match self.slots.iter().find(|s| s.page() == NO_PAGE) {
            Some(s) => s,
            None => {
                let n = self.slots.len();
                let mut pick = None;
                for _ in 0..3 * n {
                    let i = self.hand.fetch_add(1, Relaxed) % n;
                    let s = &self.slots[i];
                    if s.pins() != 0 {
                        continue;
                    }
                    if s.referenced.swap(false, Relaxed) {
                        continue;
                    }
                    pick = Some(s);
                    break;
                }
                pick.unwrap_or(&self.slots[self.hand.fetch_add(1, Relaxed) % n])
            }
        };
        // Claim: the page part becomes REPLACING (new pins fail), existing pins drain.
        let mut cur = victim.state.load(SeqCst);
        let old = loop {
            let claimed = (REPLACING << PIN_BITS) | (cur & PIN_MASK);
            match victim
                .state
                .compare_exchange_weak(cur, claimed, SeqCst, SeqCst)
            {
                Ok(_) => break cur >> PIN_BITS,
                Err(now) => cur = now,
            }
        };
        victim.seq.fetch_add(1, SeqCst); // odd: contents changing
        while victim.pins() != 0 {
            crate::sync::spin_loop();
        }
        if old != NO_PAGE && old != REPLACING && victim.dirty.swap(false, SeqCst) {
            if let Err(e) = self.write_slot(victim, old) {
                // Keep the old page (still dirty) and make the slot readable again.
                victim.dirty.store(true, SeqCst);
                victim.set_page(old);
                victim.seq.fetch_add(1, SeqCst);
                return Err(e);
            }
        }
        if let Err(e) = self.load_slot(victim, page) {
            // Nothing of value in the slot now (the old page was written): leave it empty.
            victim.set_page(NO_PAGE);
            victim.seq.fetch_add(1, SeqCst);
            return Err(e);
        }
        victim.seq.fetch_add(1, SeqCst); // even again: contents stable
        Ok(())
    }

    /// Reads `page` into `victim` (which is being replaced: its sequence is odd).
    fn load_slot(&self, victim: &Slot, page: u64) -> std::io::Result<()> {
        // The previous page's statuses were written (after their WAL) or were clean.
        victim.wal_lsn.store(0, SeqCst);
        let mut buf = vec![0u8; CLOG_PAGE_BYTES];
        let seg = page / PAGES_PER_SEGMENT;
        let path = self.seg_path(seg);
        if path.exists() {
            let f = File::open(&path)?;
            let off = (page % PAGES_PER_SEGMENT) * CLOG_PAGE_BYTES as u64;
            let mut done = 0;
            while done < CLOG_PAGE_BYTES {
                match f.read_at(&mut buf[done..], off + done as u64)? {
                    0 => break,
                    n => done += n,
                }
            }
        }
        for (i, w) in victim.words.iter().enumerate() {
            w.store(
                u64::from_le_bytes(buf[i * 8..i * 8 + 8].try_into().expect("8 bytes")),
                SeqCst,
            );
        }
        victim.dirty.store(false, SeqCst);
        victim.referenced.store(true, Relaxed);
        victim.set_page(page);
        Ok(())
    }

    /// Writes every dirty page and fsyncs the touched segments (checkpoint).
    pub fn flush_all(&self) -> std::io::Result<()> {
        let _g = self.lock_pool();
        for s in self.slots.iter() {
            let page = s.page();
            if page != NO_PAGE && page != REPLACING && s.dirty.swap(false, SeqCst) {
                if let Err(e) = self.write_slot(s, page) {
                    s.dirty.store(true, SeqCst);
                    return Err(e);
                }
            }
        }
        let segs: Vec<u64> = self.touched.lock().drain().collect();
        for seg in &segs {
            if let Err(e) = io::sync_data(FileKind::Clog, &self.open_seg(*seg)?) {
                crate::fatal_io("fsync commit-status log", &e);
            }
        }
        if !segs.is_empty() {
            if let Err(e) = io::sync_dir(&self.dir) {
                crate::fatal_io("fsync commit-status log directory", &e);
            }
        }
        Ok(())
    }

    pub fn stats(&self) -> ClogStats {
        let c = &self.counters;
        ClogStats {
            lock_waits: c.lock_waits.load(SeqCst),
            group_updates: c.group_updates.load(SeqCst),
            group_members: c.group_members.load(SeqCst),
            max_group_size: c.max_group_size.load(SeqCst),
            fast_path_sets: c.fast_path_sets.load(SeqCst),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;

    /// WAL before commit-status pages: a page holding an asynchronous commit's status is
    /// written (by a checkpoint, or by an eviction) only after WAL is flushed to the end
    /// of that commit record; a page holding only statuses without a position (aborts,
    /// recovery) asks for no flush. The flush callback sees the file still without the
    /// status, i.e. it runs before the write.
    #[test]
    fn a_page_is_written_only_after_the_wal_of_its_commits() {
        let dir = tempfile::tempdir().unwrap();
        let c = Clog::open(dir.path(), 2).unwrap();
        c.reserve_space(3, 4 * XIDS_PER_PAGE).unwrap();
        let flushed: Arc<Mutex<Vec<(u64, u8)>>> = Arc::default();
        let log = flushed.clone();
        let seg0 = dir.path().join(format!("{:012X}", 0));
        c.set_wal_flush(Box::new(move |lsn| {
            // What page 0's first byte holds on disk at flush time.
            let mut b = [0u8; 1];
            File::open(&seg0).unwrap().read_exact_at(&mut b, 0).unwrap();
            log.lock().push((lsn, b[0]));
        }));
        c.set_status_at(Xid(3), XidStatus::Committed, walrus_base::Lsn(1000));
        c.set_status(Xid(4), XidStatus::Aborted);
        c.flush_all().unwrap();
        assert_eq!(*flushed.lock(), vec![(1000, 0)], "flush before the write");
        // Evictions: pages 1 and 2 push page 0 out and back; page 1's commit at 2000
        // must be flushed before page 1 is written.
        c.set_status_at(
            Xid(XIDS_PER_PAGE + 1),
            XidStatus::Committed,
            walrus_base::Lsn(2000),
        );
        c.set_status(Xid(2 * XIDS_PER_PAGE + 1), XidStatus::Aborted);
        c.set_status(Xid(3 * XIDS_PER_PAGE + 1), XidStatus::Aborted);
        c.flush_all().unwrap();
        let seen: Vec<u64> = flushed.lock().iter().map(|f| f.0).collect();
        assert!(
            seen.contains(&2000),
            "page 1 written without its WAL: {seen:?}"
        );
        assert!(
            seen.iter().all(|&l| l == 1000 || l == 2000),
            "a page without commit positions asked for a flush: {seen:?}"
        );
    }

    #[test]
    fn statuses_survive_replacement_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let c = Clog::open(dir.path(), 2).unwrap();
            for p in 0..6u64 {
                for k in 0..50u64 {
                    let x = Xid(p * XIDS_PER_PAGE + k * 7 + 3);
                    c.set_status(
                        x,
                        if k % 3 == 0 {
                            XidStatus::Aborted
                        } else {
                            XidStatus::Committed
                        },
                    );
                }
            }
            c.flush_all().unwrap();
        }
        let c = Clog::open(dir.path(), 2).unwrap();
        for p in 0..6u64 {
            for k in 0..50u64 {
                let x = Xid(p * XIDS_PER_PAGE + k * 7 + 3);
                let want = if k % 3 == 0 {
                    XidStatus::Aborted
                } else {
                    XidStatus::Committed
                };
                assert_eq!(c.get_status(x), want, "xid {x}");
            }
            assert_eq!(
                c.get_status(Xid(p * XIDS_PER_PAGE + 5)),
                XidStatus::InProgress
            );
        }
        assert_eq!(c.get_status(Xid::BOOTSTRAP), XidStatus::Committed);
    }

    #[test]
    fn concurrent_commits_use_group_update() {
        let dir = tempfile::tempdir().unwrap();
        let c = Arc::new(Clog::open(dir.path(), 4).unwrap());
        let hs: Vec<_> = (0..8u64)
            .map(|t| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for i in 0..20_000u64 {
                        let page = (i * 8 + t) % 50;
                        let x = Xid(page * XIDS_PER_PAGE + 3 + t * 20_000 + i);
                        c.set_status(x, XidStatus::Committed);
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        for t in 0..8u64 {
            for i in (0..20_000u64).step_by(97) {
                let page = (i * 8 + t) % 50;
                assert_eq!(
                    c.get_status(Xid(page * XIDS_PER_PAGE + 3 + t * 20_000 + i)),
                    XidStatus::Committed
                );
            }
        }
        let s = c.stats();
        assert!(s.group_updates > 0, "{s:?}");
        assert!(s.group_members >= s.group_updates, "{s:?}");
    }

    #[test]
    fn resident_pages_take_no_lock() {
        let dir = tempfile::tempdir().unwrap();
        let c = Clog::open(dir.path(), 4).unwrap();
        c.set_status(Xid(10), XidStatus::Committed); // loads page 0 via the group path
        let before = c.stats();
        for x in 11..5000 {
            c.set_status(Xid(x), XidStatus::Committed);
        }
        let after = c.stats();
        assert_eq!(after.fast_path_sets - before.fast_path_sets, 4989);
        assert_eq!(after.lock_waits, before.lock_waits);
        assert_eq!(after.group_updates, before.group_updates);
    }

    #[test]
    fn truncation_deletes_whole_segments_below_the_cutoff_and_lookups_there_fail_loudly() {
        let dir = tempfile::tempdir().unwrap();
        let seg = XIDS_PER_SEGMENT;
        let xids = [Xid(5), Xid(seg + 5), Xid(2 * seg + 5), Xid(3 * seg + 5)];
        {
            let c = Clog::open(dir.path(), 2).unwrap();
            // As every writer does before it takes an xid.
            c.reserve_space(5, 3 * seg + 2 * XIDS_PER_PAGE).unwrap();
            for x in xids {
                c.set_status(x, XidStatus::Committed);
            }
            c.flush_all().unwrap();
            assert_eq!(c.oldest_xid(), Xid(0));
            // A cutoff inside segment 2 keeps segment 2.
            assert_eq!(c.truncate_below(Xid(2 * seg + 100)).unwrap(), 2);
            assert_eq!(c.oldest_xid(), Xid(2 * seg));
            assert_eq!(c.truncate_below(Xid(seg)).unwrap(), 0, "never backwards");
            assert_eq!(c.get_status(xids[2]), XidStatus::Committed);
            let below =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| c.get_status(xids[1])));
            assert!(below.is_err(), "a truncated status is not answered");
            c.set_status(Xid(3 * seg + 6), XidStatus::Aborted);
            c.flush_all().unwrap();
        }
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(!names.contains(&format!("{:012X}", 0)) && !names.contains(&format!("{:012X}", 1)));
        let c = Clog::open_at(dir.path(), 2, Xid(2 * seg), Xid(3 * seg + 7)).unwrap();
        assert_eq!(c.oldest_xid(), Xid(2 * seg));
        assert_eq!(c.get_status(xids[3]), XidStatus::Committed);
        assert_eq!(c.get_status(Xid(3 * seg + 6)), XidStatus::Aborted);
    }

    /// At open, a segment file below the recorded truncation point is a leftover (an
    /// interrupted truncation: removed); one missing at or above it is damage (refused,
    /// naming the segment), whether first or in the middle. Xids that jump ahead still
    /// get every segment file in between.
    #[test]
    fn open_removes_leftovers_and_refuses_a_missing_segment() {
        let dir = tempfile::tempdir().unwrap();
        let seg = XIDS_PER_SEGMENT;
        {
            let c = Clog::open(dir.path(), 2).unwrap();
            c.reserve_space(3, 2 * XIDS_PER_PAGE).unwrap();
            c.reserve_space(3 * seg + 5, 3 * seg + 2 * XIDS_PER_PAGE)
                .unwrap();
        }
        let file = |s: u64| dir.path().join(format!("{s:012X}"));
        assert!((0..4).all(|s| file(s).exists()), "contiguous after a jump");
        let c = Clog::open_at(dir.path(), 2, Xid(seg), Xid(3 * seg + 5)).unwrap();
        assert!(!file(0).exists(), "a leftover below the point is removed");
        assert_eq!(c.oldest_xid(), Xid(seg));
        drop(c);
        std::fs::remove_file(file(2)).unwrap();
        let e = Clog::open_at(dir.path(), 2, Xid(seg), Xid(0))
            .err()
            .expect("refused");
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        assert!(
            e.to_string().contains("segment 000000000002 is missing"),
            "{e}"
        );
        let e = Clog::open_at(dir.path(), 2, Xid(0), Xid(0))
            .err()
            .expect("refused");
        assert!(
            e.to_string().contains("segment 000000000000 is missing"),
            "{e}"
        );
        // The last segment holding handed-out xids is missing: refused too.
        std::fs::copy(file(1), file(2)).unwrap();
        std::fs::remove_file(file(3)).unwrap();
        let e = Clog::open_at(dir.path(), 2, Xid(seg), Xid(3 * seg + 5))
            .err()
            .expect("refused");
        assert!(
            e.to_string().contains("segment 000000000003 is missing"),
            "{e}"
        );
        assert!(Clog::open_at(dir.path(), 2, Xid(seg), Xid(3 * seg)).is_ok());
        // A segment shorter than what its handed-out xids wrote lost statuses...
        let f = OpenOptions::new().write(true).open(file(2)).unwrap();
        f.set_len(CLOG_PAGE_BYTES as u64).unwrap();
        let e = Clog::open_at(dir.path(), 2, Xid(seg), Xid(3 * seg))
            .err()
            .expect("refused");
        assert!(
            e.to_string().contains("segment 000000000002 is truncated"),
            "{e}"
        );
        // ... but the page holding the last handed-out xid is all it needs there.
        assert!(Clog::open_at(dir.path(), 2, Xid(seg), Xid(2 * seg + 10)).is_ok());
    }

    /// A segment whose reservation was cut short (full disk, kill) is completed by the
    /// next reservation after a restart, not taken as ready: statuses written past its
    /// end would otherwise be the first allocation there, and could fail with ENOSPC at
    /// checkpoint time instead of when the xid is handed out.
    #[test]
    fn a_segment_cut_short_is_reserved_again_after_open() {
        let dir = tempfile::tempdir().unwrap();
        let seg = XIDS_PER_SEGMENT;
        let file = dir.path().join(format!("{:012X}", 1));
        {
            let c = Clog::open(dir.path(), 2).unwrap();
            c.reserve_space(3, 2 * seg).unwrap();
        }
        let whole = std::fs::metadata(&file).unwrap().len();
        OpenOptions::new()
            .write(true)
            .open(&file)
            .unwrap()
            .set_len(CLOG_PAGE_BYTES as u64)
            .unwrap();
        let c = Clog::open_at(dir.path(), 2, Xid(0), Xid(10)).unwrap();
        c.reserve_space(seg + 5, seg + 6).unwrap();
        assert_eq!(std::fs::metadata(&file).unwrap().len(), whole);
    }

    /// A lookup below the truncation point is an error value from `try_get_status`
    /// (the writers' and page-changing paths), never zeros read as "in progress".
    #[test]
    fn a_truncated_status_is_an_error_not_a_guess() {
        let dir = tempfile::tempdir().unwrap();
        let seg = XIDS_PER_SEGMENT;
        let c = Clog::open(dir.path(), 2).unwrap();
        c.reserve_space(3, 2 * seg + 1).unwrap();
        c.set_status(Xid(seg - 1), XidStatus::Committed);
        c.set_status(Xid(seg + 1), XidStatus::Committed);
        c.flush_all().unwrap();
        assert_eq!(c.truncate_below(Xid(seg)).unwrap(), 1);
        match c.try_get_status(Xid(seg - 1)) {
            Err(ClogError::Truncated { xid, oldest }) => {
                assert_eq!((xid, oldest), (Xid(seg - 1), Xid(seg)))
            }
            other => panic!("expected a truncation error, got {other:?}"),
        }
        assert_eq!(
            c.try_get_status(Xid(seg + 1)).unwrap(),
            XidStatus::Committed
        );
        let e = crate::error::Error::from(c.try_get_status(Xid(5)).unwrap_err());
        assert_eq!(e.sqlstate(), "XX000");
        assert!(e.to_string().contains("transaction 5"), "{e}");
    }

    #[test]
    #[should_panic(expected = "status changing")]
    fn committed_never_becomes_aborted() {
        let dir = tempfile::tempdir().unwrap();
        let c = Clog::open(dir.path(), 2).unwrap();
        c.set_status(Xid(7), XidStatus::Committed);
        c.set_status(Xid(7), XidStatus::Aborted);
    }
}

/// Model checks (run by `.ci/run` as `RUSTFLAGS="--cfg loom" cargo test -p walrus-engine
/// --lib loom`): every interleaving of a lock-free status set and a lock-free read with
/// the replacement of the slot they use.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;

    fn fresh_dir() -> PathBuf {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let d = std::env::temp_dir().join(format!(
            "walrus-loom-clog-{}-{}",
            std::process::id(),
            N.fetch_add(1, SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn loom_status_set_and_read_race_with_slot_replacement() {
        loom::model(|| {
            let dir = fresh_dir();
            let clog = loom::sync::Arc::new(Clog::open(&dir, 2).unwrap());
            // Page 2 on disk holds a pattern no page-0 word can hold (all "committed").
            let f = clog.open_seg(0).unwrap();
            f.write_all_at(&[0x55u8; CLOG_PAGE_BYTES], 2 * CLOG_PAGE_BYTES as u64)
                .unwrap();
            clog.ensure_resident(0).unwrap();
            clog.ensure_resident(1).unwrap();
            let xid = Xid(10);
            let (page, word, shift) = Clog::locate(xid);
            assert_eq!(page, 0);

            let c = clog.clone();
            let setter = loom::thread::spawn(move || {
                // set_status's lock-free path; its slow path (group update) is not
                // modelled: a miss is simply reported.
                let set = match c.pin(page) {
                    Some(s) => {
                        c.set_on(s, word, shift, XidStatus::Committed, xid, 0);
                        s.unpin();
                        true
                    }
                    None => false,
                };
                (set, c.read_word(page, word))
            });
            // Replacement of one of the two slots by page 2 (the pool lock's holder).
            clog.ensure_resident(2).unwrap();
            let (set, read) = setter.join().unwrap();
            if let Some(v) = read {
                // A seqlock read never returns another page's word: page 0's word holds
                // at most our xid's bits.
                assert_eq!(v & !(3 << shift), 0, "read a word of another page: {v:#x}");
                if set {
                    assert_eq!(XidStatus::from_bits(v >> shift), XidStatus::Committed);
                }
            }
            if set {
                // A set on a pinned slot is never lost: still resident, or written out
                // by the replacement and read back now.
                let state: Vec<(u64, u64, bool)> = clog
                    .slots
                    .iter()
                    .map(|s| (s.page(), s.words[word].load(SeqCst), s.dirty.load(SeqCst)))
                    .collect();
                let mut disk = [0u8; CLOG_PAGE_BYTES];
                let _ = f.read_at(&mut disk, 0);
                assert_eq!(
                    clog.get_status(xid),
                    XidStatus::Committed,
                    "slots before re-read {state:?}, page 0 on disk {disk:?}, read {read:?}"
                );
            }
            let _ = std::fs::remove_dir_all(&dir);
        });
    }
}
