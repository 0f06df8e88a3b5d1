//! Batched page writes through the double-write buffer (`page_protection = dwb`).
//!
//! A batch is staged one frame at a time: pin, shared latch (page writers only try it,
//! as in `write_frame`), copy, note the page LSN and the WAL insert position, unlatch.
//! Then WAL is flushed up to the batch's highest page LSN (WAL before data), the copies
//! are sealed and written to a double-write slot (one write, one sync), written home, and
//! their files synced before the slot is given back (`protect::dwb`).
//!
//! No latch is held across the I/O, so a backend may change a page while its copy is in
//! flight. Finalizing looks at each page again under its latch, which it only tries (the
//! holder may be a backend waiting for clean frames from this very batch): unchanged
//! since the copy (same LSN), it is clean now; changed, or latched, it stays dirty, and its `rec_lsn` becomes the
//! insert position noted at the copy — every change after the copy was logged after that
//! point (during crash recovery: the start of the record being replayed, since the insert
//! position is then the end of the WAL) — so a checkpoint whose redo LSN is past it need not wait for the page, and a
//! hot page cannot keep a checkpoint from finishing. Its dirty-queue entry is put back in
//! `rec_lsn` order.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

use walrus_base::{Lsn, PageId};

use super::{unpack, BufferPool, DirtyEntry, UnpinOnDrop, Writer, FLAG_DIRTY, FLAG_IO, FLAG_VALID};
use crate::error::Result;
use crate::protect::dwb::DoubleWrite;
use crate::storage::page::{self, PageBuf};

struct Staged {
    frame: u32,
    page: u64,
    id: PageId,
    copy: Box<PageBuf>,
    lsn: Lsn,
    /// `change_floor()` while the copy was taken (under the page's latch): the WAL insert
    /// position, or during recovery the record being replayed.
    insert_at_copy: Lsn,
}

impl BufferPool {
    /// Writes the frames `cands` (frame, expected page) that are still dirty through the
    /// double-write buffer, in batches of the slot size. Returns the candidates it could
    /// not stage (latched by someone, for a page writer) by index, and the count written.
    pub(super) fn write_batch_dwb(
        &self,
        dwb: &DoubleWrite,
        cands: &[(u32, u64)],
        who: Writer,
    ) -> Result<(usize, Vec<usize>)> {
        let mut written = 0;
        let mut skipped = Vec::new();
        for (chunk_no, chunk) in cands.chunks(dwb.batch_pages()).enumerate() {
            let base = chunk_no * dwb.batch_pages();
            let mut staged = Vec::with_capacity(chunk.len());
            for (i, &(f, expect)) in chunk.iter().enumerate() {
                match self.stage(f, expect, who) {
                    Some(s) => staged.push(s),
                    None => {
                        if self.frames[f as usize].page.load(Ordering::Acquire) == expect
                            && self.frames[f as usize].flags.load(Ordering::Acquire) & FLAG_DIRTY
                                != 0
                        {
                            skipped.push(base + i);
                        }
                    }
                }
            }
            if staged.is_empty() {
                continue;
            }
            let result = self.write_staged(dwb, &mut staged);
            written += self.finalize(&staged, result.is_ok());
            result?;
        }
        Ok((written, skipped))
    }

    /// Copies frame `f` if it still holds `expect`, dirty; leaves it pinned.
    fn stage(&self, f: u32, expect: u64, who: Writer) -> Option<Staged> {
        let fr = &self.frames[f as usize];
        fr.pin.fetch_add(1, Ordering::AcqRel);
        let unpin = UnpinOnDrop(fr);
        if fr.page.load(Ordering::Acquire) != expect {
            return None;
        }
        let g = match who {
            Writer::PageWriter => fr.latch.try_read()?,
            Writer::Checkpointer => fr.latch.read(),
        };
        if fr.page.load(Ordering::Acquire) != expect
            || fr.flags.load(Ordering::Acquire) & (FLAG_DIRTY | FLAG_VALID)
                != (FLAG_DIRTY | FLAG_VALID)
        {
            return None;
        }
        if fr.flags.fetch_or(FLAG_IO, Ordering::AcqRel) & FLAG_IO != 0 {
            return None; // another batch is writing it; that one finalizes it
        }
        let mut copy = PageBuf::zeroed();
        copy.0.copy_from_slice(&g[..]);
        let insert_at_copy = self.change_floor();
        drop(g);
        // The pin stays until `finalize`: the frame cannot be reused meanwhile.
        std::mem::forget(unpin);
        let lsn = page::lsn(&copy.0);
        Some(Staged {
            frame: f,
            page: expect,
            id: unpack(expect),
            copy,
            lsn,
            insert_at_copy,
        })
    }

    fn write_staged(&self, dwb: &DoubleWrite, staged: &mut [Staged]) -> Result<()> {
        // WAL before data, once for the whole batch.
        let max_lsn = staged.iter().map(|s| s.lsn).max().unwrap_or(Lsn::ZERO);
        self.wal.flush(max_lsn);
        assert!(
            self.wal.flushed_lsn() >= max_lsn,
            "WAL before data violated for a double-write batch"
        );
        for s in staged.iter_mut() {
            assert!(
                self.frames[s.frame as usize]
                    .rec_lsn
                    .load(Ordering::Acquire)
                    <= s.lsn.0
                    || s.lsn == Lsn::ZERO,
                "rec_lsn after page LSN for {}",
                s.id
            );
            page::seal(&mut s.copy.0, s.id);
        }
        let copies: Vec<&[u8]> = staged.iter().map(|s| &s.copy.0[..]).collect();
        let slot = dwb.write_batch(&copies)?;
        let mut files = BTreeSet::new();
        for s in staged.iter() {
            self.relfiles.write_page(s.id, &s.copy.0)?;
            files.insert(s.id.relfile);
        }
        // The slot may be reused only once the home writes it protects are durable.
        self.relfiles.sync_files(&files)?;
        drop(slot);
        Ok(())
    }

    /// Marks each staged frame clean if its page did not change since the copy (and the
    /// write succeeded), else keeps it dirty with the copy's insert position as its
    /// `rec_lsn`; unpins. Returns how many became clean.
    fn finalize(&self, staged: &[Staged], wrote: bool) -> usize {
        let mut clean = 0;
        for s in staged {
            let fr = &self.frames[s.frame as usize];
            let _unpin = UnpinOnDrop(fr);
            if !wrote {
                fr.flags.fetch_and(!FLAG_IO, Ordering::AcqRel);
                continue; // still dirty, still queued (or found again by the sweep)
            }
            // Never wait for the latch: its holder may be a backend waiting for this
            // very batch to produce clean frames. Latched means "may be changing": the
            // page stays dirty, exactly as if it had changed.
            let g = fr.latch.try_read();
            // Pinned since staging, so still this page; the batch owns its write.
            debug_assert_eq!(fr.page.load(Ordering::Acquire), s.page);
            fr.flags.fetch_and(!FLAG_IO, Ordering::AcqRel);
            if g.as_ref().is_some_and(|g| page::lsn(&g[..]) == s.lsn) {
                fr.flags.fetch_and(!FLAG_DIRTY, Ordering::AcqRel);
                fr.rec_lsn.store(0, Ordering::Release);
                self.dirty_count.fetch_sub(1, Ordering::Relaxed);
                clean += 1;
            } else {
                let mut q = self.dirty_queue.lock();
                let q = &mut q.entries;
                fr.rec_lsn.store(s.insert_at_copy.0, Ordering::Release);
                let entry = DirtyEntry {
                    rec_lsn: s.insert_at_copy,
                    frame: s.frame,
                    page: s.page,
                };
                let at = q.partition_point(|e| e.rec_lsn <= entry.rec_lsn);
                q.insert(at, entry);
            }
            drop(g);
        }
        if wrote {
            self.count_writes(staged.len() as u64);
        }
        self.clean_wait.1.notify_all();
        clean
    }
}
