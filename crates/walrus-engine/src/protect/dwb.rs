//! The double-write buffer (`page_protection = dwb`, seed 002, done the way InnoDB's
//! parallel doublewrite does it since 8.0.20).
//!
//! Page writers write dirty pages in **batches**: the sealed (checksummed) copies of up
//! to `dwb_batch_pages` pages go to one *slot* of the preallocated file `dwb` with one
//! sequential write, the slot is synced, then the pages are written home and the home
//! files synced; only then is the slot free again. Several slots let several writers work
//! at once. No full-page image is logged.
//!
//! Why it repairs every torn page: a home write starts only after its copy is durable in
//! a slot, and the slot is reused only after the home write is durable, so a home page
//! torn by a crash always has a whole copy in some slot. A copy torn by a crash (the slot
//! write itself) fails its checksum and is ignored: its home write had not started.
//!
//! Recovery, before redo ([`repair`]): read every slot; for each page keep the valid copy
//! with the highest page LSN (a slot keeps stale copies of older batches beyond its last
//! batch's end, and an older copy must never replace a newer one); restore it home when
//! the home page fails verification (torn, misdirected, or all zeros / past the end of
//! the file because its extension was lost). A valid home page is left alone, whatever
//! its LSN: redo brings it up to date, as after any crash. See the decision table in
//! `README.md`.
//!
//! Commit-status (clog) pages need no double write: a status only ever changes from
//! "in progress" to final, so each 4 KiB half of a torn clog page holds either the old or
//! the new bits, and every status set since the last checkpoint is set again by redo.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Condvar, Mutex};
use walrus_base::{Lsn, PageId, PAGE_SIZE};

use crate::error::{Error, Result};
use crate::io::{self, FileKind};
use crate::storage::page::{self, PageCheck};
use crate::storage::relfile::RelFiles;

/// The double-write file's name in the data directory.
pub const DWB_FILE: &str = "dwb";
/// Slots in the file: how many writers can have a batch in flight at once.
pub const DWB_SLOTS: usize = 8;

/// Counters for `walrus_stat_dwb`.
#[derive(Default, Debug)]
pub struct DwbStats {
    pub batches: AtomicU64,
    pub pages: AtomicU64,
    pub bytes: AtomicU64,
    /// Times a writer waited for a free slot.
    pub slot_waits: AtomicU64,
}

pub struct DoubleWrite {
    path: PathBuf,
    file: File,
    batch_pages: usize,
    /// Free slot numbers; a writer takes one for a batch and gives it back after the
    /// batch's home writes are durable.
    free: Mutex<Vec<usize>>,
    freed: Condvar,
    pub stats: DwbStats,
}

/// A claimed slot, given back when dropped.
pub struct Slot<'a> {
    dwb: &'a DoubleWrite,
    n: usize,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.dwb.free.lock().push(self.n);
        self.dwb.freed.notify_one();
    }
}

impl DoubleWrite {
    /// Opens (creating and preallocating if missing) the double-write file of `dir` with
    /// slots of `batch_pages` pages. A file of another size (a changed `dwb_batch_pages`)
    /// is recreated: call [`repair`] before this, so its copies have been used.
    pub fn open(dir: &Path, batch_pages: usize) -> Result<DoubleWrite> {
        let path = dir.join(DWB_FILE);
        let size = (DWB_SLOTS * batch_pages * PAGE_SIZE) as u64;
        let file = io::open_rw(FileKind::DoubleWrite, &path, true, false)
            .map_err(|e| Error::io("open double-write file", path.display(), e))?;
        let len = file
            .metadata()
            .map_err(|e| Error::io("stat double-write file", path.display(), e))?
            .len();
        if len != size {
            // Zero-filled so that a slot never holds a stale page from another layout.
            io::set_len(FileKind::DoubleWrite, &file, 0)
                .and_then(|_| io::reserve_space(FileKind::DoubleWrite, &file, 0, size))
                .map_err(|e| Error::io("size double-write file", path.display(), e))?;
            if let Err(e) = io::sync_data(FileKind::DoubleWrite, &file) {
                crate::fatal_io("fsync double-write file", &e);
            }
            crate::storage::relfile::sync_dir(dir)?;
        }
        Ok(DoubleWrite {
            path,
            file,
            batch_pages,
            free: Mutex::new((0..DWB_SLOTS).rev().collect()),
            freed: Condvar::new(),
            stats: DwbStats::default(),
        })
    }

    pub fn batch_pages(&self) -> usize {
        self.batch_pages
    }

    /// Writes sealed page copies (at most `batch_pages`) into a free slot with one write
    /// and syncs it. The caller then writes the pages home, syncs their files and drops
    /// the returned slot.
    pub fn write_batch(&self, pages: &[&[u8]]) -> Result<Slot<'_>> {
        assert!(
            !pages.is_empty() && pages.len() <= self.batch_pages,
            "double-write batch of {} pages (slot holds {})",
            pages.len(),
            self.batch_pages
        );
        let n = {
            let mut free = self.free.lock();
            if free.is_empty() {
                self.stats.slot_waits.fetch_add(1, Ordering::Relaxed);
            }
            while free.is_empty() {
                self.freed.wait(&mut free);
            }
            free.pop().expect("a free slot")
        };
        let slot = Slot { dwb: self, n };
        let mut buf = Vec::with_capacity(pages.len() * PAGE_SIZE);
        for p in pages {
            debug_assert_eq!(p.len(), PAGE_SIZE);
            buf.extend_from_slice(p);
        }
        let offset = (n * self.batch_pages * PAGE_SIZE) as u64;
        io::write_at(FileKind::DoubleWrite, &self.file, &buf, offset)
            .map_err(|e| Error::io("write double-write file", self.path.display(), e))?;
        if let Err(e) = io::sync_data(FileKind::DoubleWrite, &self.file) {
            crate::fatal_io("fsync double-write file", &e);
        }
        self.stats.batches.fetch_add(1, Ordering::Relaxed);
        self.stats
            .pages
            .fetch_add(pages.len() as u64, Ordering::Relaxed);
        self.stats
            .bytes
            .fetch_add(buf.len() as u64, Ordering::Relaxed);
        Ok(slot)
    }
}

/// What [`repair`] found and did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DwbRepair {
    /// Valid copies read from the slots.
    pub copies: u64,
    /// Copies that failed their checksum (a torn slot write): ignored.
    pub torn_copies: u64,
    /// Home pages restored from a copy.
    pub restored: u64,
}

/// What to do with a page that has a valid double-write copy: the repair decision table
/// (`README.md`), one row per home-page state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RepairAction {
    /// The home page verifies: leave it (redo brings it up to date).
    KeepHome,
    /// The home page is torn, misdirected, zero or missing: write the copy home.
    RestoreCopy,
}

pub fn decide_repair(home: &PageCheck) -> RepairAction {
    match home {
        PageCheck::Valid => RepairAction::KeepHome,
        PageCheck::New | PageCheck::ChecksumMismatch { .. } | PageCheck::Misdirected { .. } => {
            RepairAction::RestoreCopy
        }
    }
}

/// Recovery's first step when a double-write file exists (whatever the mode now: it may
/// have been `dwb` before the restart): restores every home page a crash tore from its
/// newest valid copy, and syncs what it restored.
pub fn repair(dir: &Path, relfiles: &RelFiles) -> Result<DwbRepair> {
    let path = dir.join(DWB_FILE);
    let mut out = DwbRepair::default();
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(Error::io("read double-write file", path.display(), e)),
    };
    // The newest valid copy of each page.
    let mut newest: std::collections::HashMap<PageId, (Lsn, &[u8])> = Default::default();
    for p in bytes.chunks_exact(PAGE_SIZE) {
        if page::is_new(p) {
            continue; // never used
        }
        let id = page::page_id(p);
        match page::verify(p, id) {
            PageCheck::Valid => {
                out.copies += 1;
                let lsn = page::lsn(p);
                let e = newest.entry(id).or_insert((lsn, p));
                if lsn > e.0 {
                    *e = (lsn, p);
                }
            }
            _ => out.torn_copies += 1,
        }
    }
    let mut touched = std::collections::BTreeSet::new();
    for (id, (_, copy)) in newest {
        if !relfiles.exists(id.relfile) {
            // Dropped since: nothing to repair.
            continue;
        }
        let mut home = vec![0u8; PAGE_SIZE];
        relfiles.read_page(id, &mut home)?;
        if decide_repair(&page::verify(&home, id)) == RepairAction::RestoreCopy {
            tracing::warn!(
                "double-write repair: block {} of relation {} was torn or missing; restored from its double-write copy (LSN {})",
                id.block.0,
                id.relfile.0,
                page::lsn(copy)
            );
            relfiles.note_block_exists(id)?;
            relfiles.write_page(id, copy)?;
            touched.insert(id.relfile);
            out.restored += 1;
        }
    }
    if !touched.is_empty() {
        relfiles.sync_pending()?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repair_decision_rows() {
        assert_eq!(decide_repair(&PageCheck::Valid), RepairAction::KeepHome);
        assert_eq!(decide_repair(&PageCheck::New), RepairAction::RestoreCopy);
        assert_eq!(
            decide_repair(&PageCheck::ChecksumMismatch {
                stored: 1,
                computed: 2
            }),
            RepairAction::RestoreCopy
        );
        assert_eq!(
            decide_repair(&PageCheck::Misdirected {
                found: PageId::new(walrus_base::RelFileId(1), 0)
            }),
            RepairAction::RestoreCopy
        );
    }
}
