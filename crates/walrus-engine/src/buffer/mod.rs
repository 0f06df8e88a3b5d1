#![doc = include_str!("README.md")]

mod batch_write;
pub mod page_writer;

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use walrus_base::limits::PAGE_TABLE_PARTITIONS;
use walrus_base::{Lsn, PageId, RelFileId};

use crate::error::{Error, Result};
mod arena;

use crate::storage::page::{self, PageBuf, PageCheck};
use crate::storage::relfile::RelFiles;
use crate::wal::record::WalRecord;
use crate::wal::Wal;
use arena::{PageArena, PageSlot};

const NO_PAGE: u64 = u64::MAX;
const FLAG_VALID: u32 = 1;
const FLAG_DIRTY: u32 = 2;
/// A double-write batch holds this frame's copy in flight (`batch_write.rs`): no other
/// batch may stage it until that one finalizes, or an older copy could land home after
/// a newer one.
const FLAG_IO: u32 = 4;
const USAGE_MAX: u32 = 5;

/// Frames in a [`ScanRing`]: 256 KiB, PostgreSQL's `BAS_BULKREAD` size, small enough to
/// stay in the CPU's cache while a scan refills it page after page.
pub const SCAN_RING_FRAMES: usize = 32;

/// The frames one large sequential scan reads its pages into, over and over
/// (PostgreSQL's bulk-read buffer access strategy). A scan of a table bigger than a
/// quarter of the pool would otherwise walk the clock over the whole pool: it would
/// evict every other session's working set for pages it reads once, and copy each page
/// into memory the CPU has not touched for a pool's length. A ring frame is reused only
/// while nobody else has touched it since the scan loaded it (usage 1, unpinned,
/// clean); otherwise the ring takes a fresh victim from the clock in its place.
#[derive(Default)]
pub struct ScanRing {
    frames: Vec<u32>,
    next: usize,
}

fn pack(id: PageId) -> u64 {
    ((id.relfile.0 as u64) << 32) | id.block.0 as u64
}
fn unpack(v: u64) -> PageId {
    PageId::new(RelFileId((v >> 32) as u32), v as u32)
}

/// The page table: page ids are well-spread integers, SipHash buys nothing here.
type PageTable = HashMap<PageId, u32, walrus_base::hash::WordHash>;

struct Frame {
    latch: RwLock<PageSlot>,
    page: AtomicU64,
    pin: AtomicU32,
    usage: AtomicU32,
    flags: AtomicU32,
    /// WAL insert position when the page was first dirtied since its last write.
    rec_lsn: AtomicU64,
}

#[derive(Clone, Copy, Debug)]
struct DirtyEntry {
    rec_lsn: Lsn,
    frame: u32,
    page: u64,
}

#[derive(Default, Debug)]
pub struct BufferStats {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub pages_written: AtomicU64,
    /// Pages written by a page-writer thread (`pg_stat_bgwriter.buffers_clean`).
    pub writes_by_page_writer: AtomicU64,
    /// Pages written by a thread running a checkpoint (`buffers_checkpoint`).
    pub writes_by_checkpoint: AtomicU64,
    /// Pages written by any other thread (`buffers_backend`). Counted by the thread's
    /// role, not by the caller's say-so, so it measures the no-backend-writes rule.
    pub writes_by_backend: AtomicU64,
    /// Times a page writer's cleaning pass stopped at its batch limit with more dirty
    /// candidates ahead of the clock (`maxwritten_clean`).
    pub maxwritten_clean: AtomicU64,
    pub backend_clean_waits: AtomicU64,
    /// Pages a scan's [`ScanRing`] read into one of its own frames again, instead of
    /// taking a victim from the clock.
    pub ring_reuses: AtomicU64,
}

/// Who asked for a page write: decides whether the writer may wait for a latch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Writer {
    PageWriter,
    Checkpointer,
}

thread_local! {
    /// The role of the current thread for write statistics: set by the page-writer
    /// threads and for the duration of a checkpoint; `None` on every other thread.
    static WRITER_ROLE: Cell<Option<Writer>> = const { Cell::new(None) };
}

/// Marks the current thread as a page writer or checkpointer until dropped.
pub struct WriterRole(Option<Writer>);

impl WriterRole {
    pub fn enter(role: Writer) -> WriterRole {
        WriterRole(WRITER_ROLE.with(|r| r.replace(Some(role))))
    }
}

impl Drop for WriterRole {
    fn drop(&mut self) {
        WRITER_ROLE.with(|r| r.set(self.0));
    }
}

/// The dirty-page queue: entries in `rec_lsn` order, plus the `rec_lsn`s of entries a
/// flusher has taken out and is writing. The oldest of both is the redo point an
/// incremental checkpoint may use; several flushers work in parallel on disjoint
/// entries, and a page in flight still holds the redo point back.
#[derive(Default)]
struct DirtyQueue {
    entries: VecDeque<DirtyEntry>,
    in_flight: BTreeMap<Lsn, u32>,
}

impl DirtyQueue {
    fn take_in_flight(&mut self, e: &DirtyEntry) {
        *self.in_flight.entry(e.rec_lsn).or_insert(0) += 1;
    }
    fn release_in_flight(&mut self, e: &DirtyEntry) {
        match self.in_flight.get_mut(&e.rec_lsn) {
            Some(n) if *n > 1 => *n -= 1,
            Some(_) => {
                self.in_flight.remove(&e.rec_lsn);
            }
            None => panic!("dirty-queue entry released twice"),
        }
    }
    fn oldest_in_flight(&self) -> Option<Lsn> {
        self.in_flight.keys().next().copied()
    }
}

pub struct BufferPool {
    frames: Box<[Frame]>,
    table: Vec<Mutex<PageTable>>,
    clock: AtomicUsize,
    /// The clock hand at the last clean-ahead round: cleaning is for victims the sweep
    /// will need, so a hand that has not moved (no allocation since) asks for none.
    clean_ahead_clock: AtomicUsize,
    dirty_queue: Mutex<DirtyQueue>,
    dirty_count: AtomicUsize,
    pub relfiles: Arc<RelFiles>,
    pub wal: Arc<Wal>,
    names: RwLock<HashMap<RelFileId, String>>,
    /// Page writers sleep here; backends short of clean buffers wake them.
    pub(crate) writer_wake: (Mutex<bool>, Condvar),
    clean_wait: (Mutex<()>, Condvar),
    pub stats: BufferStats,
    /// The double-write buffer, in `page_protection = dwb` (set once at open): every page
    /// write then goes through a batch (`batch_write.rs`).
    dwb: std::sync::OnceLock<Arc<crate::protect::dwb::DoubleWrite>>,
    /// While crash recovery replays: the start LSN of the record being applied (0 when
    /// not replaying). A page changed after a write copied it gets this as its new
    /// `rec_lsn` (`batch_write.rs`): during replay the WAL insert position is the end of
    /// the WAL, far past the changes still to be replayed onto the page.
    replay_lsn: AtomicU64,
    /// The frames' page memory; declared last so it is unmapped after every frame.
    _arena: PageArena,
}

/// A pinned page: it stays in its frame until this is dropped.
pub struct PinnedPage<'a> {
    pool: &'a BufferPool,
    frame: u32,
    id: PageId,
}

pub struct PageRead<'a> {
    guard: RwLockReadGuard<'a, PageSlot>,
}

/// An exclusively latched page. Changing it and logging the change must not be
/// interrupted: a panic while this guard is held aborts the process (a PostgreSQL
/// PANIC), because the page may be half-changed and unlogged; recovery repairs it.
pub struct PageWrite<'a> {
    pool: &'a BufferPool,
    frame: u32,
    id: PageId,
    guard: RwLockWriteGuard<'a, PageSlot>,
}

impl BufferPool {
    /// Fails only if the page memory cannot be mapped (`shared_buffers` beyond what the
    /// system allows).
    pub fn new(nframes: usize, relfiles: Arc<RelFiles>, wal: Arc<Wal>) -> Result<BufferPool> {
        assert!(nframes >= 16, "shared_buffers must hold at least 16 pages");
        let (arena, slots) = PageArena::new(nframes).map_err(|e| {
            Error::io(
                "map the buffer pool",
                format!("shared_buffers = {} pages", nframes),
                e,
            )
        })?;
        let frames = slots
            .into_iter()
            .map(|slot| Frame {
                latch: RwLock::new(slot),
                page: AtomicU64::new(NO_PAGE),
                pin: AtomicU32::new(0),
                usage: AtomicU32::new(0),
                flags: AtomicU32::new(0),
                rec_lsn: AtomicU64::new(0),
            })
            .collect();
        Ok(BufferPool {
            frames,
            table: (0..PAGE_TABLE_PARTITIONS)
                .map(|_| Mutex::new(PageTable::default()))
                .collect(),
            clock: AtomicUsize::new(0),
            clean_ahead_clock: AtomicUsize::new(0),
            dirty_queue: Mutex::new(DirtyQueue::default()),
            dirty_count: AtomicUsize::new(0),
            relfiles,
            wal,
            names: RwLock::new(HashMap::new()),
            writer_wake: (Mutex::new(false), Condvar::new()),
            clean_wait: (Mutex::new(()), Condvar::new()),
            stats: BufferStats::default(),
            dwb: std::sync::OnceLock::new(),
            replay_lsn: AtomicU64::new(0),
            _arena: arena,
        })
    }

    /// Routes every page write through the double-write buffer from now on.
    pub fn set_double_write(&self, dwb: Arc<crate::protect::dwb::DoubleWrite>) {
        let _ = self.dwb.set(dwb);
    }

    pub fn double_write(&self) -> Option<&crate::protect::dwb::DoubleWrite> {
        self.dwb.get().map(|d| &**d)
    }

    /// Recovery: the record starting at `lsn` is about to be applied (`None`: replay is
    /// over).
    pub fn set_replay_position(&self, lsn: Option<Lsn>) {
        self.replay_lsn
            .store(lsn.map_or(0, |l| l.0), Ordering::Release);
    }

    /// An LSN at or before the start of every change a page may still receive: the
    /// record being replayed during recovery, else the WAL insert position.
    pub(crate) fn change_floor(&self) -> Lsn {
        match self.replay_lsn.load(Ordering::Acquire) {
            0 => self.wal.insert_lsn(),
            r => Lsn(r),
        }
    }

    pub fn nframes(&self) -> usize {
        self.frames.len()
    }
    pub fn dirty_pages(&self) -> usize {
        self.dirty_count.load(Ordering::Relaxed)
    }

    pub fn set_relation_name(&self, relfile: RelFileId, name: &str) {
        self.names.write().insert(relfile, name.to_string());
    }
    pub fn relation_name(&self, relfile: RelFileId) -> String {
        self.names
            .read()
            .get(&relfile)
            .cloned()
            .unwrap_or_else(|| format!("relfile {relfile}"))
    }

    fn partition(&self, id: PageId) -> &Mutex<PageTable> {
        let h = (id.relfile.0 as usize).wrapping_mul(0x9E37_79B9)
            ^ (id.block.0 as usize).wrapping_mul(0x85EB_CA6B);
        &self.table[h % self.table.len()]
    }

    /// Pins page `id`, reading it from disk (and verifying its checksum) if needed.
    pub fn read_page(&self, id: PageId) -> Result<PinnedPage<'_>> {
        self.pin_page(id, false, None)
    }

    /// [`BufferPool::read_page`] for a large sequential scan: a miss loads the page into
    /// one of `ring`'s frames, and a hit does not make the page look hot to the clock.
    pub fn read_page_in_ring(&self, id: PageId, ring: &mut ScanRing) -> Result<PinnedPage<'_>> {
        self.pin_page(id, false, Some(ring))
    }

    /// The [`ScanRing`] a sequential scan of `nblocks` pages reads through: one when
    /// it is more than a quarter of the pool (PostgreSQL's threshold), else none.
    pub fn ring_for_scan(&self, nblocks: u32) -> Option<ScanRing> {
        (nblocks as usize > self.frames.len() / 4).then(ScanRing::default)
    }

    /// Pins a page that was just allocated: it is not read from disk but zero-filled, and
    /// the caller must initialise it and log a WILL_INIT record for it.
    pub fn new_page(&self, id: PageId) -> Result<PinnedPage<'_>> {
        self.pin_page(id, true, None)
    }

    fn pin_page(
        &self,
        id: PageId,
        fresh: bool,
        mut ring: Option<&mut ScanRing>,
    ) -> Result<PinnedPage<'_>> {
        loop {
            {
                let part = self.partition(id).lock();
                if let Some(&f) = part.get(&id) {
                    let fr = &self.frames[f as usize];
                    fr.pin.fetch_add(1, Ordering::AcqRel);
                    drop(part);
                    // A ring scan's hit keeps a cold page cold (usage at least 1, no more).
                    let u = fr.usage.load(Ordering::Relaxed);
                    let cap = if ring.is_some() { 1 } else { USAGE_MAX };
                    if u < cap {
                        fr.usage.store(u + 1, Ordering::Relaxed);
                    }
                    // Fast path: already loaded. Otherwise wait for the loader (it holds
                    // the latch exclusively until the page is valid) and check it worked.
                    let loaded = |fr: &Frame| {
                        fr.flags.load(Ordering::Acquire) & FLAG_VALID != 0
                            && fr.page.load(Ordering::Acquire) == pack(id)
                    };
                    let ok = loaded(fr) || {
                        let _g = fr.latch.read();
                        loaded(fr)
                    };
                    if ok {
                        self.stats.hits.fetch_add(1, Ordering::Relaxed);
                        return Ok(PinnedPage {
                            pool: self,
                            frame: f,
                            id,
                        });
                    }
                    let prev = fr.pin.fetch_sub(1, Ordering::AcqRel);
                    assert!(prev > 0, "unbalanced pin");
                    continue;
                }
            }
            let victim = match ring.as_deref_mut() {
                Some(ring) => self.ring_victim(ring)?,
                None => self.find_victim()?,
            };
            let fr = &self.frames[victim as usize];
            let mut part = self.partition(id).lock();
            if part.contains_key(&id) {
                // Someone loaded it meanwhile: give the victim back and use theirs.
                drop(part);
                fr.pin.fetch_sub(1, Ordering::AcqRel);
                continue;
            }
            part.insert(id, victim);
            fr.page.store(pack(id), Ordering::Release);
            fr.flags.store(0, Ordering::Release);
            fr.usage.store(1, Ordering::Relaxed);
            let mut g = fr.latch.write();
            drop(part);
            self.stats.misses.fetch_add(1, Ordering::Relaxed);
            let loaded = if fresh {
                g.fill(0);
                Ok(())
            } else {
                self.load(id, &mut g[..])
            };
            match loaded {
                Ok(()) => {
                    fr.flags.store(FLAG_VALID, Ordering::Release);
                    drop(g);
                    return Ok(PinnedPage {
                        pool: self,
                        frame: victim,
                        id,
                    });
                }
                Err(e) => {
                    let mut part = self.partition(id).lock();
                    if part.get(&id) == Some(&victim) {
                        part.remove(&id);
                    }
                    fr.page.store(NO_PAGE, Ordering::Release);
                    drop(part);
                    drop(g);
                    fr.pin.fetch_sub(1, Ordering::AcqRel);
                    return Err(e);
                }
            }
        }
    }

    fn load(&self, id: PageId, buf: &mut [u8]) -> Result<()> {
        self.relfiles.read_page(id, buf)?;
        match page::verify(buf, id) {
            PageCheck::Valid | PageCheck::New => Ok(()),
            PageCheck::ChecksumMismatch { stored, computed } => Err(Error::ChecksumMismatch {
                page: id,
                relation: self.relation_name(id.relfile),
                stored,
                computed,
            }),
            PageCheck::Misdirected { found } => Err(Error::Misdirected {
                expected: id,
                found,
            }),
        }
    }

    /// Clock sweep for a clean, unpinned frame. Returns it pinned (pin = 1) and unmapped.
    /// Backends never write a dirty victim: when only dirty frames are left they wake the
    /// page writers and wait for clean ones (DESIGN §4, seed 002's collapse).
    fn find_victim(&self) -> Result<u32> {
        let n = self.frames.len();
        let mut waits = 0;
        loop {
            let mut dirty_seen = 0;
            for _ in 0..n * (USAGE_MAX as usize + 2) {
                let i = self.clock.fetch_add(1, Ordering::Relaxed) % n;
                let fr = &self.frames[i];
                if fr.pin.load(Ordering::Acquire) != 0 {
                    continue;
                }
                let u = fr.usage.load(Ordering::Relaxed);
                if u > 0 {
                    fr.usage.store(u - 1, Ordering::Relaxed);
                    continue;
                }
                if fr.flags.load(Ordering::Acquire) & FLAG_DIRTY != 0 {
                    dirty_seen += 1;
                    continue;
                }
                if let Some(f) = self.try_claim(i as u32) {
                    return Ok(f);
                }
            }
            if dirty_seen == 0
                && self
                    .frames
                    .iter()
                    .all(|f| f.pin.load(Ordering::Acquire) != 0)
            {
                return Err(Error::InsufficientResources(
                    "no unpinned buffers available".into(),
                ));
            }
            waits += 1;
            self.stats
                .backend_clean_waits
                .fetch_add(1, Ordering::Relaxed);
            self.wake_writers();
            let mut g = self.clean_wait.0.lock();
            self.clean_wait.1.wait_for(&mut g, Duration::from_millis(5));
            if waits > 2000 {
                return Err(Error::InsufficientResources(
                    "no clean buffers became available".into(),
                ));
            }
        }
    }

    /// The next frame of `ring` if nobody has used it since the scan loaded it, else a
    /// clock victim that takes its place in the ring. Returned pinned and unmapped, as
    /// [`BufferPool::find_victim`] does.
    fn ring_victim(&self, ring: &mut ScanRing) -> Result<u32> {
        if ring.frames.len() < SCAN_RING_FRAMES {
            let f = self.find_victim()?;
            ring.frames.push(f);
            return Ok(f);
        }
        let slot = ring.next;
        ring.next = (slot + 1) % SCAN_RING_FRAMES;
        let f = ring.frames[slot];
        if self.frames[f as usize].usage.load(Ordering::Relaxed) <= 1 {
            if let Some(f) = self.try_claim(f) {
                self.stats.ring_reuses.fetch_add(1, Ordering::Relaxed);
                return Ok(f);
            }
        }
        let f = self.find_victim()?;
        ring.frames[slot] = f;
        Ok(f)
    }

    fn try_claim(&self, f: u32) -> Option<u32> {
        let fr = &self.frames[f as usize];
        let old = fr.page.load(Ordering::Acquire);
        if old == NO_PAGE {
            return fr
                .pin
                .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
                .ok()
                .map(|_| f);
        }
        let id = unpack(old);
        let mut part = self.partition(id).lock();
        if fr.page.load(Ordering::Acquire) != old
            || fr.flags.load(Ordering::Acquire) & FLAG_DIRTY != 0
        {
            return None;
        }
        if fr
            .pin
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return None;
        }
        if part.get(&id) == Some(&f) {
            part.remove(&id);
        }
        fr.page.store(NO_PAGE, Ordering::Release);
        fr.flags.store(0, Ordering::Release);
        Some(f)
    }

    pub fn wake_writers(&self) {
        let mut w = self.writer_wake.0.lock();
        *w = true;
        self.writer_wake.1.notify_all();
    }

    /// Appends a WAL record for changes already made to `pages` (each exclusively latched)
    /// and stamps their LSN: the schema of a WAL-logged change (module README).
    pub fn log_change(&self, rec: &WalRecord, pages: &mut [&mut dyn LoggedPage]) -> Lsn {
        for p in pages.iter_mut() {
            p.mark_dirty();
        }
        let slices: Vec<&[u8]> = pages.iter().map(|p| p.bytes()).collect();
        for (b, p) in rec.blocks.iter().zip(pages.iter()) {
            assert_eq!(
                b.page,
                p.page_id(),
                "record block order must match the pages passed"
            );
        }
        let (_, end) = self.wal.insert(rec, &slices);
        for p in pages.iter_mut() {
            p.set_lsn(end);
        }
        end
    }

    fn mark_frame_dirty(&self, f: u32, redo_lsn: Option<Lsn>) {
        let fr = &self.frames[f as usize];
        if fr.flags.load(Ordering::Acquire) & FLAG_DIRTY != 0 {
            return;
        }
        let mut q = self.dirty_queue.lock();
        let rec_lsn = redo_lsn.unwrap_or_else(|| self.wal.insert_lsn());
        let q = &mut q.entries;
        if let Some(last) = q.back() {
            assert!(last.rec_lsn <= rec_lsn, "dirty queue out of rec_lsn order");
        }
        fr.rec_lsn.store(rec_lsn.0, Ordering::Release);
        fr.flags.fetch_or(FLAG_DIRTY, Ordering::AcqRel);
        q.push_back(DirtyEntry {
            rec_lsn,
            frame: f,
            page: fr.page.load(Ordering::Acquire),
        });
        self.dirty_count.fetch_add(1, Ordering::Relaxed);
        if q.len() > self.frames.len() * 4 {
            // Drop entries whose frame was written (or reused) since: keeps the queue bounded.
            q.retain(|e| self.entry_live(e));
        }
    }

    fn entry_live(&self, e: &DirtyEntry) -> bool {
        let fr = &self.frames[e.frame as usize];
        fr.page.load(Ordering::Acquire) == e.page
            && fr.flags.load(Ordering::Acquire) & FLAG_DIRTY != 0
            && fr.rec_lsn.load(Ordering::Acquire) == e.rec_lsn.0
    }

    /// The oldest `rec_lsn` of any dirty page, queued or being written (`None` when
    /// nothing is dirty): the redo LSN an incremental checkpoint may use, provided the
    /// caller read the WAL insert position *before* calling this (a page dirtied after
    /// this call gets a `rec_lsn` at or past that position).
    pub fn oldest_rec_lsn(&self) -> Option<Lsn> {
        let mut q = self.dirty_queue.lock();
        let queued = loop {
            match q.entries.front() {
                Some(e) if self.entry_live(e) => break Some(e.rec_lsn),
                Some(_) => {
                    q.entries.pop_front();
                }
                None => break None,
            }
        };
        match (queued, q.oldest_in_flight()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Dirty-queue length (entries may include some already written, dropped lazily).
    pub fn dirty_queue_len(&self) -> usize {
        self.dirty_queue.lock().entries.len()
    }

    /// The single page-write path. Writes frame `f` if it still holds `expect` and is
    /// dirty. Enforces WAL-before-data, seals the checksum, and is where torn-page
    /// protection hooks in. Returns whether a write happened.
    pub fn write_frame(&self, f: u32, expect: u64, who: Writer) -> Result<bool> {
        let fr = &self.frames[f as usize];
        fr.pin.fetch_add(1, Ordering::AcqRel);
        let _unpin = UnpinOnDrop(fr);
        if fr.page.load(Ordering::Acquire) != expect {
            return Ok(false);
        }
        // Page writers never block on a latch: a backend holding a page exclusively may
        // itself be waiting for them to produce a clean frame. They skip the page and
        // come back. The checkpointer waits (nobody waits for it while holding a latch).
        let g = match who {
            Writer::PageWriter => match fr.latch.try_read() {
                Some(g) => g,
                None => return Ok(false),
            },
            Writer::Checkpointer => fr.latch.read(),
        };
        if fr.page.load(Ordering::Acquire) != expect
            || fr.flags.load(Ordering::Acquire) & (FLAG_DIRTY | FLAG_VALID)
                != (FLAG_DIRTY | FLAG_VALID)
        {
            return Ok(false);
        }
        let id = unpack(expect);
        let mut copy = PageBuf::zeroed();
        copy.0.copy_from_slice(&g[..]);
        let lsn = page::lsn(&copy.0);
        // WAL before data: the page may only reach disk once the WAL describing its
        // latest change is durable.
        self.wal.flush(lsn);
        assert!(
            self.wal.flushed_lsn() >= lsn,
            "WAL before data violated for {id}"
        );
        assert!(
            fr.rec_lsn.load(Ordering::Acquire) <= lsn.0 || lsn == Lsn::ZERO,
            "rec_lsn after page LSN for {id}"
        );
        page::seal(&mut copy.0, id);
        self.relfiles.write_page(id, &copy.0)?;
        // Two writers may write the same unchanged page at once (both under the shared
        // latch, same bytes); only the one that clears the flag counts it.
        if fr.flags.fetch_and(!FLAG_DIRTY, Ordering::AcqRel) & FLAG_DIRTY != 0 {
            fr.rec_lsn.store(0, Ordering::Release);
            self.dirty_count.fetch_sub(1, Ordering::Relaxed);
        }
        drop(g);
        self.count_writes(1);
        self.clean_wait.1.notify_all();
        Ok(true)
    }

    /// Counts `n` pages written by the current thread, by its role.
    fn count_writes(&self, n: u64) {
        self.stats.pages_written.fetch_add(n, Ordering::Relaxed);
        match WRITER_ROLE.with(|r| r.get()) {
            Some(Writer::PageWriter) => &self.stats.writes_by_page_writer,
            Some(Writer::Checkpointer) => &self.stats.writes_by_checkpoint,
            None => &self.stats.writes_by_backend,
        }
        .fetch_add(n, Ordering::Relaxed);
    }

    /// Writes dirty pages from the head of the dirty queue whose `rec_lsn` is below
    /// `upto`, at most `max_pages` of them. Returns (pages written, whether pages below
    /// `upto` remain, queued or still being written by another flusher).
    ///
    /// Any number of threads may flush at once: each takes a disjoint run of entries
    /// off the head under the queue mutex and records their `rec_lsn`s as in flight
    /// until each page is written or put back, so neither `oldest_rec_lsn` nor a
    /// checkpoint's "anything left below `upto`?" can miss a page being written.
    pub fn flush_queue_head(
        &self,
        upto: Lsn,
        max_pages: usize,
        who: Writer,
    ) -> Result<(usize, bool)> {
        let max_pages = self.io_batch_cap(max_pages);
        let batch: Vec<DirtyEntry> = {
            let mut q = self.dirty_queue.lock();
            let mut b = Vec::new();
            while b.len() < max_pages {
                match q.entries.front() {
                    Some(e) if e.rec_lsn < upto => {
                        let e = q.entries.pop_front().expect("front exists");
                        if self.entry_live(&e) {
                            q.take_in_flight(&e);
                            b.push(e);
                        }
                    }
                    _ => break,
                }
            }
            b
        };
        let mut written = 0;
        let mut put_back = Vec::new();
        let mut failure = None;
        if let Some(dwb) = self.dwb.get() {
            let cands: Vec<(u32, u64)> = batch.iter().map(|e| (e.frame, e.page)).collect();
            match self.write_batch_dwb(dwb, &cands, who) {
                Ok((n, not_staged)) => {
                    written = n;
                    put_back = not_staged.into_iter().map(|i| batch[i]).collect();
                }
                Err(err) => {
                    // Keep every entry whose page is still dirty: nothing is forgotten.
                    put_back = batch
                        .iter()
                        .copied()
                        .filter(|e| self.entry_live(e))
                        .collect();
                    failure = Some(err);
                }
            }
        } else {
            for (i, e) in batch.iter().enumerate() {
                match self.write_frame(e.frame, e.page, who) {
                    Ok(true) => written += 1,
                    Ok(false) => {
                        // Latched by someone (page writers do not wait): still dirty, so
                        // it must stay queued for the checkpoint that relies on it.
                        if self.entry_live(e) {
                            put_back.push(*e);
                        }
                    }
                    Err(err) => {
                        // Keep the unwritten entries so the pages are not forgotten.
                        put_back.extend(batch[i..].iter().copied());
                        failure = Some(err);
                        break;
                    }
                }
            }
        }
        let mut q = self.dirty_queue.lock();
        for e in put_back.iter() {
            // In `rec_lsn` order among entries other flushers may have put back meanwhile.
            let at = q.entries.partition_point(|x| x.rec_lsn <= e.rec_lsn);
            q.entries.insert(at, *e);
        }
        for e in batch.iter() {
            q.release_in_flight(e);
        }
        if let Some(err) = failure {
            return Err(err);
        }
        let more = matches!(q.entries.front(), Some(e) if e.rec_lsn < upto)
            || matches!(q.oldest_in_flight(), Some(l) if l < upto);
        if more && written == 0 {
            // Only latched pages, or pages another flusher is writing, are left below
            // `upto`: let them finish.
            drop(q);
            std::thread::sleep(Duration::from_micros(200));
        }
        Ok((written, more))
    }

    /// A batch keeps its frames pinned until written (`dwb`): never more than a quarter
    /// of the pool at once, or a small pool would leave backends no frame to evict.
    fn io_batch_cap(&self, max_pages: usize) -> usize {
        max_pages.min((self.frames.len() / 4).max(1))
    }

    /// Page-writer cleaning ahead of the clock hand: writes dirty, unpinned, unpopular
    /// frames the sweep will reach next, so backends find clean victims.
    pub fn clean_ahead_of_clock(&self, scan: usize, max_pages: usize) -> Result<usize> {
        let max_pages = self.io_batch_cap(max_pages);
        let n = self.frames.len();
        let start = self.clock.load(Ordering::Relaxed);
        // Demand-driven, as PostgreSQL's bgwriter: with no allocation since the last
        // round the sweep needs no new victims, and writing the same hot pages near a
        // still hand every round would only repeat I/O (and move the oldest rec_lsn on
        // early, cutting short the redo lag recovery_time_target allows).
        if self.clean_ahead_clock.swap(start, Ordering::Relaxed) == start {
            return Ok(0);
        }
        let mut written = 0;
        // Dirty, unpinned, unpopular frames the sweep reaches next.
        let mut candidates = (0..scan.min(n)).filter_map(|k| {
            let i = (start + k) % n;
            let fr = &self.frames[i];
            let page = fr.page.load(Ordering::Acquire);
            (fr.flags.load(Ordering::Acquire) & FLAG_DIRTY != 0
                && fr.pin.load(Ordering::Acquire) == 0
                && fr.usage.load(Ordering::Relaxed) <= 1
                && page != NO_PAGE)
                .then_some((i as u32, page))
        });
        if let Some(dwb) = self.dwb.get() {
            let cands: Vec<(u32, u64)> = candidates.by_ref().take(max_pages).collect();
            if cands.len() == max_pages && candidates.next().is_some() {
                self.stats.maxwritten_clean.fetch_add(1, Ordering::Relaxed);
            }
            return Ok(self.write_batch_dwb(dwb, &cands, Writer::PageWriter)?.0);
        }
        for (f, page) in candidates.by_ref() {
            if self.write_frame(f, page, Writer::PageWriter)? {
                written += 1;
                if written >= max_pages {
                    break;
                }
            }
        }
        if written >= max_pages && candidates.next().is_some() {
            self.stats.maxwritten_clean.fetch_add(1, Ordering::Relaxed);
        }
        Ok(written)
    }

    /// Drops every page of `relfile` from the pool without writing it (DROP/TRUNCATE
    /// after the change is durable). Fails if a page is still pinned.
    pub fn discard_relation(&self, relfile: RelFileId) {
        for (i, fr) in self.frames.iter().enumerate() {
            let v = fr.page.load(Ordering::Acquire);
            if v == NO_PAGE || unpack(v).relfile != relfile {
                continue;
            }
            let id = unpack(v);
            let mut part = self.partition(id).lock();
            while fr.pin.load(Ordering::Acquire) != 0 {
                drop(part);
                std::thread::sleep(Duration::from_micros(100));
                part = self.partition(id).lock();
            }
            if fr.page.load(Ordering::Acquire) == v {
                if part.get(&id) == Some(&(i as u32)) {
                    part.remove(&id);
                }
                if fr.flags.load(Ordering::Acquire) & FLAG_DIRTY != 0 {
                    self.dirty_count.fetch_sub(1, Ordering::Relaxed);
                }
                fr.page.store(NO_PAGE, Ordering::Release);
                fr.flags.store(0, Ordering::Release);
            }
        }
    }

    /// Frames currently pinned (for the pins-balanced check in tests and at shutdown).
    pub fn pinned_frames(&self) -> usize {
        self.frames
            .iter()
            .filter(|f| f.pin.load(Ordering::Acquire) != 0)
            .count()
    }
}

struct UnpinOnDrop<'a>(&'a Frame);
impl Drop for UnpinOnDrop<'_> {
    fn drop(&mut self) {
        let prev = self.0.pin.fetch_sub(1, Ordering::AcqRel);
        assert!(prev > 0, "unbalanced pin");
    }
}

impl<'a> PinnedPage<'a> {
    pub fn id(&self) -> PageId {
        self.id
    }
    pub fn read(&self) -> PageRead<'_> {
        PageRead {
            guard: self.pool.frames[self.frame as usize].latch.read(),
        }
    }
    pub fn write(&self) -> PageWrite<'_> {
        PageWrite {
            pool: self.pool,
            frame: self.frame,
            id: self.id,
            guard: self.pool.frames[self.frame as usize].latch.write(),
        }
    }
    pub fn try_write(&self) -> Option<PageWrite<'_>> {
        self.pool.frames[self.frame as usize]
            .latch
            .try_write()
            .map(|guard| PageWrite {
                pool: self.pool,
                frame: self.frame,
                id: self.id,
                guard,
            })
    }
}

impl Drop for PinnedPage<'_> {
    fn drop(&mut self) {
        let prev = self.pool.frames[self.frame as usize]
            .pin
            .fetch_sub(1, Ordering::AcqRel);
        assert!(prev > 0, "unbalanced pin");
    }
}

impl std::ops::Deref for PageRead<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.guard[..]
    }
}

/// What `log_change` needs of an exclusively latched page (a trait so that pages
/// latched with different borrow lifetimes can be logged together).
pub trait LoggedPage {
    fn page_id(&self) -> PageId;
    fn bytes(&self) -> &[u8];
    fn mark_dirty(&mut self);
    fn set_lsn(&mut self, lsn: Lsn);
}

impl LoggedPage for PageWrite<'_> {
    fn page_id(&self) -> PageId {
        self.id
    }
    fn bytes(&self) -> &[u8] {
        &self.guard[..]
    }
    fn mark_dirty(&mut self) {
        PageWrite::mark_dirty(self)
    }
    fn set_lsn(&mut self, lsn: Lsn) {
        PageWrite::set_lsn(self, lsn)
    }
}

impl PageWrite<'_> {
    pub fn id(&self) -> PageId {
        self.id
    }
    /// Marks the page dirty, stamping `rec_lsn` if it was clean. `log_change` does this;
    /// call it directly only for changes redo itself makes.
    pub fn mark_dirty(&mut self) {
        self.pool.mark_frame_dirty(self.frame, None);
    }
    /// Recovery: the page was changed by replaying the record starting at `lsn`; that
    /// is its `rec_lsn` (redo runs in LSN order, so the dirty queue stays ordered).
    pub fn mark_dirty_by_redo(&mut self, lsn: Lsn) {
        self.pool.mark_frame_dirty(self.frame, Some(lsn));
    }
    pub fn set_lsn(&mut self, lsn: Lsn) {
        page::set_lsn(&mut self.guard[..], lsn);
    }
}

impl std::ops::Deref for PageWrite<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.guard[..]
    }
}
impl std::ops::DerefMut for PageWrite<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.guard[..]
    }
}

impl Drop for PageWrite<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("PANIC while holding an exclusive latch on {}: aborting so recovery repairs the page", self.id);
            std::process::abort();
        }
    }
}
