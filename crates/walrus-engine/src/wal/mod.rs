#![doc = include_str!("README.md")]

pub mod buffer;
mod group_commit;
pub mod pmem;
pub mod reader;
pub mod record;
pub mod segment;
pub mod writer;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crossbeam_utils::CachePadded;
use parking_lot::{Condvar, Mutex};
use walrus_base::limits::{WAL_BUFFER_BYTES_MIN, WAL_INSERT_SLOTS};
use walrus_base::{Lsn, PAGE_SIZE};

use crate::error::Result;
use crate::protect::fpw;
use buffer::WalBuffer;
use record::{PageImage, WalRecord};
use segment::{Segments, SyncMethod};

/// Bytes copied out of the ring per `pwrite` by the writer.
const WRITE_CHUNK_BYTES: usize = 1 << 20;
const SLOT_IDLE: u64 = u64::MAX;

/// The image policy is torn-page protection's decision (`protect::fpw`); the WAL
/// applies it. Re-exported here, where callers that open a `Wal` have always found it.
pub use crate::protect::ImagePolicy;

struct Reserve {
    /// Next free byte: the start of the next record.
    pos: Lsn,
    /// Start of the last record reserved (the next record's `prev`).
    last_start: Lsn,
    /// The redo LSN of the checkpoint in progress or last completed.
    redo: Lsn,
}

struct InsertSlot {
    owner: Mutex<()>,
    /// Start LSN of the record being copied through this slot, or `SLOT_IDLE`.
    in_progress: AtomicU64,
    /// Records and bytes inserted through this slot (per slot, so inserters on different
    /// slots never write a shared counter).
    records: AtomicU64,
    bytes: AtomicU64,
}

#[derive(Default)]
pub struct WalStats {
    pub fpi_count: AtomicU64,
    pub fpi_bytes: AtomicU64,
    pub writes: AtomicU64,
    pub syncs: AtomicU64,
    /// Committers that found their LSN already flushed by someone else's sync.
    pub flush_piggybacks: AtomicU64,
    pub buffer_full_waits: AtomicU64,
    /// Flushes the WAL writer made (it found WAL inserted but not flushed).
    pub writer_flushes: AtomicU64,
    /// Segments created ahead of need (WAL writer, checkpointer).
    pub segments_prepared_ahead: AtomicU64,
    /// Segments a session had to create itself before it could write (`ensure_headroom`).
    pub segments_created_by_sessions: AtomicU64,
    /// `wal_sync_method = pmem`: `pmem_drain` calls (one per write-out), WAL bytes copied
    /// into mapped segments with `pmem_memcpy_nodrain`, and the time those copies and
    /// drains took (the part of a flush the mapping-as-buffer design could save).
    pub pmem_drains: AtomicU64,
    pub pmem_bytes_copied: AtomicU64,
    pub pmem_copy_ns: AtomicU64,
}

pub struct WalConfig {
    pub segment_size: u64,
    pub buffer_bytes: usize,
    pub sync_method: SyncMethod,
    pub compress_images: bool,
}

pub struct Wal {
    pub segments: Segments,
    ring: WalBuffer,
    reserve: Mutex<Reserve>,
    slots: Vec<CachePadded<InsertSlot>>,
    /// Cached copy of `Reserve::redo` for the lock-free image decision.
    redo_lsn: AtomicU64,
    written: CachePadded<AtomicU64>,
    /// Copy of `Reserve::pos` for the lock-free headroom check.
    reserved_pos: CachePadded<AtomicU64>,
    /// Every segment below this LSN exists (see `ensure_headroom`).
    segments_ready_upto: AtomicU64,
    headroom_lock: Mutex<()>,
    flushed: CachePadded<AtomicU64>,
    /// Segments written since their last sync.
    write_state: Mutex<BTreeSet<u64>>,
    /// Who flushes and who waits (see `group_commit`).
    group: group_commit::GroupCommit,
    /// Moving average of a flush's sync time, in ns (sets the committers' polling budget).
    sync_ns_avg: AtomicU64,
    /// The leader's batching rule, learned from its own results (see `lead_flush`).
    batch_wait: BatchWait,
    space: (Mutex<()>, Condvar),
    /// Wakes the WAL writer early (`wake_writer`); the flag avoids a notify per caller.
    writer_wake: (Mutex<()>, Condvar),
    writer_wake_pending: AtomicBool,
    /// Unflushed WAL at which an asynchronous commit wakes the writer.
    writer_flush_after: AtomicU64,
    compress_images: bool,
    policy: Mutex<ImagePolicy>,
    policy_fast: AtomicBool,
    pub stats: WalStats,
}

impl Wal {
    /// Opens the log for appending at `end` (the end of valid WAL found by recovery, or
    /// the start of a fresh log), `last_start` being the start of the last valid record.
    pub fn open(
        segments: Segments,
        cfg: &WalConfig,
        end: Lsn,
        last_start: Lsn,
        redo: Lsn,
        policy: ImagePolicy,
    ) -> Wal {
        let cap = cfg.buffer_bytes.max(WAL_BUFFER_BYTES_MIN);
        let end = Lsn(record::padded_len(end.0 as usize));
        Wal {
            segments,
            ring: WalBuffer::new(cap),
            reserve: Mutex::new(Reserve {
                pos: end,
                last_start,
                redo,
            }),
            slots: (0..WAL_INSERT_SLOTS)
                .map(|_| {
                    CachePadded::new(InsertSlot {
                        owner: Mutex::new(()),
                        in_progress: AtomicU64::new(SLOT_IDLE),
                        records: AtomicU64::new(0),
                        bytes: AtomicU64::new(0),
                    })
                })
                .collect(),
            redo_lsn: AtomicU64::new(redo.0),
            written: CachePadded::new(AtomicU64::new(end.0)),
            reserved_pos: CachePadded::new(AtomicU64::new(end.0)),
            segments_ready_upto: AtomicU64::new(0),
            headroom_lock: Mutex::new(()),
            flushed: CachePadded::new(AtomicU64::new(end.0)),
            write_state: Mutex::new(BTreeSet::new()),
            group: group_commit::GroupCommit::new(),
            sync_ns_avg: AtomicU64::new(0),
            batch_wait: BatchWait::default(),
            space: (Mutex::new(()), Condvar::new()),
            writer_wake: (Mutex::new(()), Condvar::new()),
            writer_wake_pending: AtomicBool::new(false),
            writer_flush_after: AtomicU64::new(1 << 20),
            compress_images: cfg.compress_images,
            policy: Mutex::new(policy),
            policy_fast: AtomicBool::new(policy.logs_images()),
            stats: WalStats::default(),
        }
    }

    pub fn flushed_lsn(&self) -> Lsn {
        Lsn(self.flushed.load(Ordering::Acquire))
    }
    pub fn written_lsn(&self) -> Lsn {
        Lsn(self.written.load(Ordering::Acquire))
    }
    /// The start of the next record (everything before is reserved).
    pub fn insert_lsn(&self) -> Lsn {
        self.reserve.lock().pos
    }
    pub fn redo_lsn(&self) -> Lsn {
        Lsn(self.redo_lsn.load(Ordering::Acquire))
    }
    pub fn image_policy(&self) -> ImagePolicy {
        *self.policy.lock()
    }

    /// Whether a change to `page` must carry a full image now: the policy logs images
    /// (one relaxed load) and `protect::fpw::needs_image` says this change needs one.
    #[inline]
    fn needs_image(&self, will_init: bool, page: &[u8], redo: Lsn) -> bool {
        self.policy_fast.load(Ordering::Relaxed) && fpw::needs_image(will_init, page, redo)
    }

    /// Inserts a record. `pages[i]` is the current content of `rec.blocks[i]`'s page
    /// (already changed, its LSN not yet advanced); a full image of it is attached when
    /// the protection policy requires one. Returns `(start, end)`: the caller sets each
    /// page's LSN to `end` and must hold the page latches until then.
    pub fn insert(&self, rec: &WalRecord, pages: &[&[u8]]) -> (Lsn, Lsn) {
        assert_eq!(
            pages.len(),
            rec.blocks.len(),
            "one page per block reference"
        );
        ENCODE_BUF.with(|cell| {
            let mut buf = cell.borrow_mut();
            self.insert_with(rec, pages, &mut buf)
        })
    }

    fn insert_with(&self, rec: &WalRecord, pages: &[&[u8]], buf: &mut Vec<u8>) -> (Lsn, Lsn) {
        loop {
            let redo = self.redo_lsn();
            let images: Vec<Option<PageImage>> = if rec.blocks.is_empty() {
                Vec::new()
            } else {
                rec.blocks
                    .iter()
                    .zip(pages)
                    .map(|(b, p)| {
                        let init = b.flags & record::BLOCK_WILL_INIT != 0;
                        self.needs_image(init, p, redo)
                            .then(|| PageImage::capture(p, self.compress_images))
                    })
                    .collect()
            };
            record::encode(rec, &images, buf);
            let real_len = buf.len();
            let len = record::padded_len(real_len);
            buf.resize(len as usize, 0);

            let (slot_guard, slot) = self.take_slot();
            let (start, prev) = {
                let mut r = self.lock_reserve();
                if r.redo != redo {
                    // A checkpoint moved the redo LSN after we decided on images: decide
                    // again, or a page first changed after the new redo LSN would lack one.
                    drop(r);
                    drop(slot_guard);
                    continue;
                }
                let start = r.pos;
                let prev = r.last_start;
                r.pos = start.add(len);
                r.last_start = start;
                self.reserved_pos.store(r.pos.0, Ordering::Relaxed);
                self.slots[slot]
                    .in_progress
                    .store(start.0, Ordering::Release);
                (start, prev)
            };
            record::finish(&mut buf[..real_len], start, prev);
            self.wait_for_space(start.add(len));
            // SAFETY: [start, start+len) was reserved above for this call alone, and
            // wait_for_space made sure its previous ring contents are written out.
            unsafe { self.ring.copy_in(start, buf) };
            // Half the ring waits to be written: the WAL writer should write it before
            // an inserter finds the ring full and has to.
            if start.0 - self.written.load(Ordering::Relaxed) > self.ring.capacity() / 2 {
                self.wake_writer();
            }
            let s = &self.slots[slot];
            s.in_progress.store(SLOT_IDLE, Ordering::Release);
            // Only the slot's owner (we hold `owner`) writes these: no locked RMW needed.
            s.records
                .store(s.records.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            s.bytes
                .store(s.bytes.load(Ordering::Relaxed) + len, Ordering::Relaxed);
            drop(slot_guard);

            if !images.is_empty() {
                let nimg = images.iter().flatten().count() as u64;
                if nimg > 0 {
                    self.stats.fpi_count.fetch_add(nimg, Ordering::Relaxed);
                    let ib: usize = images.iter().flatten().map(|i| i.bytes.len()).sum();
                    self.stats.fpi_bytes.fetch_add(ib as u64, Ordering::Relaxed);
                }
            }
            return (start, start.add(real_len as u64));
        }
    }

    /// Records inserted so far (summed over insertion slots).
    pub fn records_inserted(&self) -> u64 {
        self.slots
            .iter()
            .map(|s| s.records.load(Ordering::Relaxed))
            .sum()
    }

    /// Bytes inserted so far, padding included (summed over insertion slots).
    pub fn bytes_inserted(&self) -> u64 {
        self.slots
            .iter()
            .map(|s| s.bytes.load(Ordering::Relaxed))
            .sum()
    }

    /// The reservation critical section is a few instructions: spin (with backoff) rather
    /// than park, like PostgreSQL's `insertpos_lck` spinlock.
    fn lock_reserve(&self) -> parking_lot::MutexGuard<'_, Reserve> {
        let backoff = crossbeam_utils::Backoff::new();
        loop {
            if let Some(g) = self.reserve.try_lock() {
                return g;
            }
            if backoff.is_completed() {
                return self.reserve.lock();
            }
            backoff.spin();
        }
    }

    fn take_slot(&self) -> (parking_lot::MutexGuard<'_, ()>, usize) {
        let first = crate::thread_hint() % self.slots.len();
        for i in 0..self.slots.len() {
            let n = (first + i) % self.slots.len();
            if let Some(g) = self.slots[n].owner.try_lock() {
                return (g, n);
            }
        }
        (self.slots[first].owner.lock(), first)
    }

    fn wait_for_space(&self, end: Lsn) {
        let cap = self.ring.capacity();
        let need = end.0.saturating_sub(cap);
        if self.written.load(Ordering::Acquire) >= need {
            return;
        }
        self.stats.buffer_full_waits.fetch_add(1, Ordering::Relaxed);
        while self.written.load(Ordering::Acquire) < need {
            self.write_upto(Lsn(need));
            if self.written.load(Ordering::Acquire) < need {
                let mut g = self.space.0.lock();
                self.space
                    .1
                    .wait_for(&mut g, std::time::Duration::from_micros(200));
            }
        }
    }

    /// Everything before the returned LSN has been copied into the ring.
    pub fn inserted_upto(&self) -> Lsn {
        let mut upto = self.reserve.lock().pos.0;
        for s in &self.slots {
            upto = upto.min(s.in_progress.load(Ordering::Acquire));
        }
        Lsn(upto)
    }

    /// Writes (without syncing) completed WAL up to `target` or as far as inserted.
    pub fn write_upto(&self, target: Lsn) {
        let mut touched = self.write_state.lock();
        let from = Lsn(self.written.load(Ordering::Acquire));
        let limit = target.min(self.inserted_upto());
        if limit <= from {
            return;
        }
        if self.segments.is_mapped() {
            self.copy_to_mappings(from, limit);
        } else {
            self.write_chunks(from, limit, &mut touched);
        }
        self.stats.writes.fetch_add(1, Ordering::Relaxed);
        self.written.store(limit.0, Ordering::Release);
        drop(touched);
        self.space.1.notify_all();
    }

    /// `pmem`: stores `[from, limit)` from the ring straight into the mapped segments and
    /// drains them, so with this method every byte below `written` is durable (the
    /// drain is a fence on *this* thread's stores: whoever copies must drain, and
    /// inserters and the WAL writer copy too, not only the flush leader).
    fn copy_to_mappings(&self, from: Lsn, limit: Lsn) {
        let started = std::time::Instant::now();
        let len = limit.distance_from(from) as usize;
        let mut at = from;
        // SAFETY: as in `write_chunks`: [from, limit) is below inserted_upto and above
        // `written`, and only `write_upto` (under `write_state`) moves `written`.
        unsafe {
            self.ring.read_in_place(from, len, |part| {
                if let Err(e) = self.segments.write(at, part) {
                    crate::fatal_io(
                        "copy WAL to persistent memory",
                        &std::io::Error::other(e.to_string()),
                    );
                }
                at = at.add(part.len() as u64);
            })
        };
        self.segments.drain();
        self.stats.pmem_drains.fetch_add(1, Ordering::Relaxed);
        self.stats
            .pmem_bytes_copied
            .fetch_add(len as u64, Ordering::Relaxed);
        self.stats
            .pmem_copy_ns
            .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }

    /// Writes `[from, limit)` with `pwrite`, a chunk at a time, noting the segments
    /// written (to be synced by the flush leader).
    fn write_chunks(&self, from: Lsn, limit: Lsn, touched: &mut BTreeSet<u64>) {
        let mut chunk = vec![0u8; WRITE_CHUNK_BYTES.min(limit.distance_from(from) as usize)];
        let mut at = from;
        while at < limit {
            let seg_end = (self.segments.segno(at) + 1) * self.segments.segment_size;
            let n = (limit.0.min(seg_end) - at.0).min(chunk.len() as u64) as usize;
            // SAFETY: [at, at+n) is below inserted_upto (all inserters done) and above
            // `written`, so no inserter may touch it until `written` moves past it, which
            // only `write_upto` does, under `write_state`.
            unsafe { self.ring.copy_out(at, &mut chunk[..n]) };
            if let Err(e) = self.segments.write(at, &chunk[..n]) {
                // The log cannot be extended: nothing later may become durable.
                crate::fatal_io("write WAL", &std::io::Error::other(e.to_string()));
            }
            touched.insert(self.segments.segno(at));
            at = at.add(n as u64);
        }
    }

    /// Group commit: returns once WAL up to `lsn` is durable. One caller at a time leads
    /// and writes and syncs *everything inserted so far*; the others park and are woken
    /// when a flush covers them (`group_commit` has the hand-off and its loom model).
    pub fn flush(&self, lsn: Lsn) {
        if self.flushed.load(Ordering::Acquire) >= lsn.0 {
            return;
        }
        let outcome = self.group.wait(
            lsn.0,
            &|| self.flushed.load(Ordering::Acquire),
            &|| self.lead_flush(lsn),
            self.commit_poll_budget(),
        );
        if outcome == group_commit::Outcome::Covered {
            self.stats.flush_piggybacks.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// How long a committer that cannot lead polls before it parks: twice the average
    /// sync (the flush running now, then the one that will cover it), within
    /// [`COMMIT_POLL_MIN`, `COMMIT_POLL_MAX`]. Zero when syncs are slower than
    /// `COMMIT_POLL_SYNC_LIMIT`: against milliseconds of waiting, a wake-up costs nothing
    /// and polling would only burn CPU.
    fn commit_poll_budget(&self) -> std::time::Duration {
        let avg = self.sync_ns_avg.load(Ordering::Relaxed);
        if avg > COMMIT_POLL_SYNC_LIMIT.as_nanos() as u64 {
            return std::time::Duration::ZERO;
        }
        std::time::Duration::from_nanos(2 * avg).clamp(COMMIT_POLL_MIN, COMMIT_POLL_MAX)
    }

    fn lead_flush(&self, lsn: Lsn) {
        // Natural batching, helped a little: when other committers are already queued
        // behind us, yield while that queue keeps growing (each round gives the
        // committers a previous flush released a slice to add their commit records),
        // then pick the flush limit. No fixed commit_delay: a round that brings nobody
        // ends the wait, and a lone committer never waits.
        //
        // A round can come back empty while committers on the other CPU are still
        // mid-way through their work (16 threads on 2 CPUs: one quiet round left ~3 of
        // 16 for the next flush). So the leader waits a second quiet round while such
        // rounds have recently brought someone often enough, and tries one every 16th
        // flush to find out; where they rarely do (clients whose next commit is a network
        // round trip away), the extra round would only delay the flush.
        let mut seen = self.group.queued();
        if seen >= 2 {
            let quiet_rounds = self
                .batch_wait
                .quiet_rounds(self.stats.syncs.load(Ordering::Relaxed));
            let mut quiet = 0;
            // Whether a second quiet round was tried, and whether one ever paid.
            let (mut tried, mut hit) = (false, false);
            for _ in 0..MAX_BATCH_YIELDS {
                std::thread::yield_now();
                let now = self.group.queued();
                if now > seen {
                    hit |= quiet == 1;
                    seen = now;
                    quiet = 0;
                } else {
                    quiet += 1;
                    tried |= quiet == 2;
                    if quiet == quiet_rounds {
                        break;
                    }
                }
            }
            self.batch_wait.record(tried, hit);
        }
        // Inserters below `lsn` may still be copying: wait for them (PostgreSQL's
        // WaitXLogInsertionsToFinish). They hold no lock we hold, so this ends.
        let mut limit = self.inserted_upto();
        let mut spins = 0u32;
        while limit < lsn {
            assert!(
                self.insert_lsn() >= lsn,
                "flush({lsn}) requested beyond reserved WAL"
            );
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
            limit = self.inserted_upto();
        }
        // pmem: the write *is* the sync (copy, then drain, in write_upto), so it is what
        // the committers' polling budget must follow.
        let write_start = std::time::Instant::now();
        self.write_upto(limit);
        // Every write below `limit` finished inside write_upto above (writes are serialized
        // under write_state), so the touched set now names every segment to sync (none
        // with pmem: written bytes are already drained).
        let segs: Vec<u64> = std::mem::take(&mut *self.write_state.lock())
            .into_iter()
            .collect();
        let sync_start = if self.segments.is_mapped() {
            write_start
        } else {
            std::time::Instant::now()
        };
        for s in segs {
            self.segments.sync(s);
        }
        let took = sync_start.elapsed().as_nanos() as u64;
        let avg = self.sync_ns_avg.load(Ordering::Relaxed);
        // Only the leader writes it: a plain load/store moving average, 1/8 per sync.
        self.sync_ns_avg
            .store(avg - avg / 8 + took / 8, Ordering::Relaxed);
        self.stats.syncs.fetch_add(1, Ordering::Relaxed);
        debug_assert!(self.written.load(Ordering::Acquire) >= limit.0);
        self.flushed.fetch_max(limit.0, Ordering::AcqRel);
    }

    /// Wakes the WAL writer before its delay is over (at most one notify per round).
    pub fn wake_writer(&self) {
        if !self.writer_wake_pending.swap(true, Ordering::AcqRel) {
            let _g = self.writer_wake.0.lock();
            self.writer_wake.1.notify_one();
        }
    }

    /// The WAL writer's sleep: `delay`, or less when woken.
    pub(crate) fn writer_sleep(&self, delay: std::time::Duration) {
        let mut g = self.writer_wake.0.lock();
        if !self.writer_wake_pending.load(Ordering::Acquire) {
            self.writer_wake.1.wait_for(&mut g, delay);
        }
        self.writer_wake_pending.store(false, Ordering::Release);
    }

    /// Sets `wal_writer_flush_after`.
    pub fn set_writer_flush_after(&self, bytes: u64) {
        self.writer_flush_after.store(bytes, Ordering::Relaxed);
    }

    /// An asynchronous commit's record ends at `end`: wake the WAL writer now when
    /// `wal_writer_flush_after` of WAL waits unflushed (PostgreSQL's
    /// XLogSetAsyncXactLSN); otherwise its next round flushes it.
    pub fn note_async_commit(&self, end: Lsn) {
        let waiting = end.0.saturating_sub(self.flushed.load(Ordering::Relaxed));
        if waiting >= self.writer_flush_after.load(Ordering::Relaxed) {
            self.wake_writer();
        }
    }

    /// Flushes everything inserted so far.
    pub fn flush_all(&self) -> Lsn {
        let upto = self.inserted_upto();
        self.flush(upto);
        upto
    }

    /// Starts a checkpoint: the current insert position becomes the redo LSN, atomically
    /// with respect to every inserter's image decision.
    pub fn set_redo_point(&self) -> Lsn {
        let mut r = self.reserve.lock();
        r.redo = r.pos;
        self.redo_lsn.store(r.pos.0, Ordering::Release);
        r.pos
    }

    /// Sets the redo point to `lsn`, an LSN at or before the insert position that an
    /// incremental checkpoint took from the dirty-page queue. The redo point never moves
    /// backwards (asserted), and only modes that log no images use this: with `fpw` an
    /// image decision against a moving redo point would log one for nearly every change.
    pub fn set_redo_to(&self, lsn: Lsn) {
        assert!(
            !self.policy_fast.load(Ordering::Relaxed),
            "incremental redo point with full-page images"
        );
        let mut r = self.reserve.lock();
        assert!(lsn <= r.pos, "redo point past the insert position");
        assert!(lsn >= r.redo, "redo point moved backwards");
        r.redo = lsn;
        self.redo_lsn.store(lsn.0, Ordering::Release);
    }

    /// Switches the image policy (used when the protection mode changes at startup).
    pub fn set_image_policy(&self, p: ImagePolicy) {
        *self.policy.lock() = p;
        self.policy_fast.store(p.logs_images(), Ordering::Release);
    }

    /// Called before an operation that writes WAL changes anything: makes sure the
    /// segments for the next [`WAL_HEADROOM_BYTES`] exist, creating them now if needed.
    /// The flush leader then never has to create a segment itself, where a full disk
    /// could only abort the process; here a full disk is an error of this one operation
    /// (SQLSTATE 53100) and the rest of the system carries on. One atomic load when the
    /// segments are there.
    pub fn ensure_headroom(&self) -> Result<()> {
        let want = self.reserved_pos.load(Ordering::Relaxed) + WAL_HEADROOM_BYTES;
        if self.segments_ready_upto.load(Ordering::Acquire) >= want {
            return Ok(());
        }
        let _one = self.headroom_lock.lock();
        let from = self
            .segments
            .segno(Lsn(self.reserved_pos.load(Ordering::Relaxed)));
        let to = self.segments.segno(Lsn(want - 1));
        let made = self.make_segments(from, to)?;
        self.stats
            .segments_created_by_sessions
            .fetch_add(made, Ordering::Relaxed);
        self.segments_ready_upto
            .fetch_max((to + 1) * self.segments.segment_size, Ordering::Release);
        Ok(())
    }

    /// The checkpointer's preallocation: the segments writers will ask for
    /// (`ensure_headroom`) and one more, so writers rarely create one themselves, and a
    /// full disk shows here first, one segment before any writer is refused, while a
    /// checkpoint can still recycle old segments in time.
    pub fn preallocate_next(&self) -> Result<()> {
        let insert = self.reserved_pos.load(Ordering::Relaxed);
        let from = self.segments.segno(Lsn(insert)) + 1;
        let to = self.segments.segno(Lsn(insert + WAL_HEADROOM_BYTES)) + 1;
        let made = self.make_segments(from, to)?;
        self.stats
            .segments_prepared_ahead
            .fetch_add(made, Ordering::Relaxed);
        Ok(())
    }

    /// Creates (recycled or zero-filled) the segments `from..=to` that do not exist;
    /// returns how many it created.
    fn make_segments(&self, from: u64, to: u64) -> Result<u64> {
        let mut made = 0;
        for segno in from..=to {
            // pmem: an existing segment (recycled, or made before a restart) still has to
            // be mapped ahead of the commit path; `preallocate` does that and creates
            // nothing when the file exists.
            if (self.segments.is_mapped() || !self.segments.exists(segno))
                && self.segments.preallocate(segno)?
            {
                made += 1;
            }
        }
        Ok(made)
    }
}

/// WAL an operation may produce after `Wal::ensure_headroom` let it start: far more than
/// one row change with its page images and splits, times every session at once.
pub const WAL_HEADROOM_BYTES: u64 = 4 << 20;
/// Yield rounds a flush leader waits, at most, for its batch to stop growing.
const MAX_BATCH_YIELDS: usize = 8;
/// How often (in 1/256ths) a second quiet round must have brought a committer for the
/// leader to wait one: it costs a round and gains a commit for the batch.
const LATE_ARRIVALS_FOR_SECOND_ROUND: u64 = 64;
/// Every this many flushes the leader tries a second quiet round regardless, to notice
/// when they start to pay.
const SECOND_ROUND_PROBE_EVERY: u64 = 16;

/// How many quiet rounds (yields that bring no new committer) end a flush leader's wait
/// for its batch: one, or two while second rounds have recently been bringing committers
/// often enough. Written only by the flush leader (one at a time), so plain loads and
/// stores suffice.
#[derive(Default)]
struct BatchWait {
    /// How often a tried second quiet round brought a committer: a moving average, 1/8
    /// per observation, in 1/256ths.
    late_arrivals: AtomicU64,
}

impl BatchWait {
    /// Quiet rounds for the `flush_no`-th flush.
    fn quiet_rounds(&self, flush_no: u64) -> usize {
        let late = self.late_arrivals.load(Ordering::Relaxed);
        if late >= LATE_ARRIVALS_FOR_SECOND_ROUND
            || flush_no.is_multiple_of(SECOND_ROUND_PROBE_EVERY)
        {
            2
        } else {
            1
        }
    }

    /// Records one wait: whether a second quiet round was reached (`tried`) and whether a
    /// committer ever arrived after a quiet round (`hit`).
    fn record(&self, tried: bool, hit: bool) {
        if tried || hit {
            let late = self.late_arrivals.load(Ordering::Relaxed);
            let late = late - late / 8 + if hit { 256 / 8 } else { 0 };
            self.late_arrivals.store(late, Ordering::Relaxed);
        }
    }
}
/// Bounds of a committer's polling budget (see `Wal::commit_poll_budget`).
const COMMIT_POLL_MIN: std::time::Duration = std::time::Duration::from_micros(20);
const COMMIT_POLL_MAX: std::time::Duration = std::time::Duration::from_millis(1);
/// Average sync time above which committers park at once (InnoDB's
/// innodb_log_wait_for_flush_spin_hwm is 400 µs).
const COMMIT_POLL_SYNC_LIMIT: std::time::Duration = std::time::Duration::from_micros(500);

thread_local!(static ENCODE_BUF: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(Vec::with_capacity(1024)));

/// Bytes of an 8 KiB page image before compression, for statistics.
pub const IMAGE_BYTES: usize = PAGE_SIZE;

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use walrus_base::Xid;

    use super::*;
    use crate::wal::reader::WalReader;
    use crate::wal::record::Rmgr;

    /// A WAL on 1 MiB segments in `dir`, from LSN 0, without page images.
    fn test_wal(dir: &std::path::Path, buffer_bytes: usize, sync_method: SyncMethod) -> Wal {
        let cfg = WalConfig {
            segment_size: 1 << 20,
            buffer_bytes,
            sync_method,
            compress_images: false,
        };
        let segs = Segments::new(dir, cfg.segment_size, cfg.sync_method).unwrap();
        Wal::open(
            segs,
            &cfg,
            Lsn::ZERO,
            Lsn::ZERO,
            Lsn::ZERO,
            ImagePolicy::Never,
        )
    }

    /// The leader waits a second quiet round only while such rounds have recently been
    /// bringing committers, and probes with one every 16th flush.
    #[test]
    fn batch_wait_takes_a_second_round_only_while_it_pays() {
        let bw = BatchWait::default();
        // Nothing learned yet: one quiet round, two on every probe.
        assert_eq!(bw.quiet_rounds(1), 1);
        assert_eq!(bw.quiet_rounds(SECOND_ROUND_PROBE_EVERY), 2);
        // Probes that keep finding late committers switch every flush to two rounds.
        for _ in 0..3 {
            bw.record(true, true);
        }
        assert_eq!(bw.quiet_rounds(1), 2);
        // Second rounds that bring nobody switch it back.
        for _ in 0..20 {
            bw.record(true, false);
        }
        assert_eq!(bw.quiet_rounds(1), 1);
        assert_eq!(bw.quiet_rounds(3 * SECOND_ROUND_PROBE_EVERY), 2);
        // A wait that never got to a second round teaches nothing.
        let before = bw.late_arrivals.load(Ordering::Relaxed);
        bw.record(false, false);
        assert_eq!(bw.late_arrivals.load(Ordering::Relaxed), before);
    }

    /// Committers poll for twice the measured sync time, within bounds, and park at once
    /// when the device is slow.
    #[test]
    fn commit_poll_budget_follows_the_measured_sync_time() {
        use std::time::Duration;
        let dir = tempfile::tempdir().unwrap();
        let wal = test_wal(dir.path(), WAL_BUFFER_BYTES_MIN, SyncMethod::Fdatasync);
        let budget_for = |avg: Duration| {
            wal.sync_ns_avg
                .store(avg.as_nanos() as u64, Ordering::Relaxed);
            wal.commit_poll_budget()
        };
        assert_eq!(budget_for(Duration::ZERO), COMMIT_POLL_MIN);
        assert_eq!(
            budget_for(Duration::from_micros(150)),
            Duration::from_micros(300)
        );
        assert_eq!(budget_for(COMMIT_POLL_SYNC_LIMIT), COMMIT_POLL_MAX);
        assert_eq!(
            budget_for(COMMIT_POLL_SYNC_LIMIT + Duration::from_micros(1)),
            Duration::ZERO
        );
        // A real flush feeds the average.
        wal.sync_ns_avg.store(0, Ordering::Relaxed);
        let (_, end) = wal.insert(
            &WalRecord::new(Rmgr::Xact, 1, Xid(3)).with_main(vec![7; 16]),
            &[],
        );
        wal.flush(end);
        assert!(wal.sync_ns_avg.load(Ordering::Relaxed) > 0);
    }

    /// Many threads insert records of varied sizes through a ring barely big enough (so
    /// inserters wait for space) and flush after each: every flush returns only once its
    /// record is durable, and reading the log back yields every record exactly once, each
    /// thread's in order, with an unbroken prev-chain.
    #[test]
    fn concurrent_insert_and_group_commit() {
        let dir = tempfile::tempdir().unwrap();
        let wal = Arc::new(test_wal(
            dir.path(),
            WAL_BUFFER_BYTES_MIN,
            SyncMethod::Fdatasync,
        ));
        let threads = 8u64;
        let per = 1500u64;
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let wal = wal.clone();
                std::thread::spawn(move || {
                    for i in 0..per {
                        let mut body = Vec::new();
                        body.extend_from_slice(&t.to_le_bytes());
                        body.extend_from_slice(&i.to_le_bytes());
                        body.resize(16 + ((i * 37 + t * 11) % 3000) as usize, (i % 251) as u8);
                        let rec = WalRecord::new(Rmgr::Xact, 1, Xid(t + 3)).with_main(body);
                        let (_, end) = wal.insert(&rec, &[]);
                        if i % 3 == 0 {
                            wal.flush(end);
                            assert!(
                                wal.flushed_lsn() >= end,
                                "flush returned before {end} was durable"
                            );
                        }
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        let end = wal.flush_all();
        let stats = &wal.stats;
        assert!(
            stats.syncs.load(Ordering::Relaxed) < threads * per / 3,
            "group commit shares syncs: {} syncs for {} flushes",
            stats.syncs.load(Ordering::Relaxed),
            threads * per / 3
        );
        let mut r = WalReader::new(&wal.segments, Lsn::ZERO);
        let mut next = vec![0u64; threads as usize];
        let mut n = 0;
        while let Some(rec) = r.next_record().unwrap() {
            let t = u64::from_le_bytes(rec.main[0..8].try_into().unwrap());
            let i = u64::from_le_bytes(rec.main[8..16].try_into().unwrap());
            assert_eq!(i, next[t as usize], "thread {t}'s records in order");
            assert_eq!(rec.main.len() as u64, 16 + (i * 37 + t * 11) % 3000);
            next[t as usize] += 1;
            n += 1;
        }
        assert_eq!(n, threads * per);
        assert_eq!(Lsn(record::padded_len(end.0 as usize)), r.position());
    }

    /// Inserting far more than the ring holds without any flush: inserters write the ring
    /// out themselves (never overwriting unwritten bytes) and nothing is lost.
    #[test]
    fn ring_wraps_without_losing_records() {
        let dir = tempfile::tempdir().unwrap();
        let wal = test_wal(dir.path(), 0, SyncMethod::None);
        for i in 0..3000u64 {
            let mut body = i.to_le_bytes().to_vec();
            body.resize(2000, 7);
            wal.insert(&WalRecord::new(Rmgr::Xact, 1, Xid(3)).with_main(body), &[]);
        }
        assert!(wal.stats.buffer_full_waits.load(Ordering::Relaxed) > 0);
        wal.flush_all();
        let mut r = WalReader::new(&wal.segments, Lsn::ZERO);
        let mut i = 0u64;
        while let Some(rec) = r.next_record().unwrap() {
            assert_eq!(u64::from_le_bytes(rec.main[0..8].try_into().unwrap()), i);
            i += 1;
        }
        assert_eq!(i, 3000);
    }

    /// The reader's read-ahead window spans segments; a missing segment still ends the
    /// log exactly where it starts: every record wholly before it is returned, the one
    /// crossing into it is not, and the reason names the segment.
    #[test]
    fn reader_stops_at_a_missing_segment_through_its_read_ahead() {
        let dir = tempfile::tempdir().unwrap();
        let wal = test_wal(dir.path(), 0, SyncMethod::None);
        let mut ends = Vec::new();
        for i in 0..2000u64 {
            let mut body = i.to_le_bytes().to_vec();
            body.resize(1500, 7);
            let (_, end) = wal.insert(&WalRecord::new(Rmgr::Xact, 1, Xid(3)).with_main(body), &[]);
            ends.push(end);
        }
        wal.flush_all();
        let wholly_in_first = ends.iter().filter(|e| e.0 <= 1 << 20).count() as u64;
        std::fs::remove_file(wal.segments.path(1)).unwrap();
        drop(wal); // as after a restart: no segment file still open
        let segs = Segments::new(dir.path(), 1 << 20, SyncMethod::None).unwrap();
        let mut r = WalReader::new(&segs, Lsn::ZERO);
        let mut n = 0u64;
        while let Some(rec) = r.next_record().unwrap() {
            assert_eq!(u64::from_le_bytes(rec.main[0..8].try_into().unwrap()), n);
            n += 1;
        }
        assert_eq!(n, wholly_in_first);
        assert_eq!(r.end, super::reader::EndReason::MissingSegment(1));
    }
}
