//! The WAL buffer: a ring of bytes indexed by `lsn % capacity`, into which inserters copy
//! their records concurrently and from which the writer copies completed ranges out.
//!
//! This is one of the few modules with `unsafe`. The invariant it relies on, kept by
//! `wal::Wal`: (1) a byte range `[lsn, lsn+len)` is written by exactly one inserter, the
//! one that reserved it, and only after the writer has written out the bytes that
//! previously occupied those ring positions (`written_lsn >= lsn + len - capacity`);
//! (2) the writer reads a range only after every inserter into it has published
//! completion (insertion slots, see `wal::Wal::inserted_upto`), and never a range an
//! inserter may be writing. So no byte is ever accessed by a writer and another accessor
//! at the same time.

use std::cell::UnsafeCell;

use walrus_base::Lsn;

pub struct WalBuffer {
    bytes: Box<[UnsafeCell<u8>]>,
}

// SAFETY: all access goes through `copy_in`/`copy_out`, whose callers guarantee the
// disjointness described in the module docs; `UnsafeCell<u8>` has no other state.
unsafe impl Sync for WalBuffer {}

impl WalBuffer {
    pub fn new(capacity: usize) -> WalBuffer {
        assert!(capacity > 0 && capacity.is_multiple_of(8));
        let bytes: Box<[UnsafeCell<u8>]> = (0..capacity).map(|_| UnsafeCell::new(0)).collect();
        // The zeroed allocation comes lazily from the kernel: touch every page now, so
        // inserters never take a page fault inside the insert path (PostgreSQL's WAL
        // buffers live in shared memory set up at start for the same reason).
        for i in (0..capacity).step_by(4096) {
            // SAFETY: `i < capacity`; nothing else can reference the buffer yet.
            unsafe { std::ptr::write_volatile(bytes[i].get(), 0) };
        }
        WalBuffer { bytes }
    }

    pub fn capacity(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// Copies `src` to ring position of `lsn`, wrapping.
    ///
    /// # Safety
    /// The caller owns `[lsn, lsn + src.len())` exclusively (module invariant 1).
    pub unsafe fn copy_in(&self, lsn: Lsn, src: &[u8]) {
        let cap = self.bytes.len();
        assert!(src.len() <= cap);
        let start = (lsn.0 % cap as u64) as usize;
        let first = src.len().min(cap - start);
        let base = UnsafeCell::raw_get(self.bytes.as_ptr());
        // SAFETY: `start + first <= cap` and `src.len() - first <= start`, so both copies
        // stay inside the allocation; exclusivity of the range is the caller's contract.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), base.add(start), first);
            std::ptr::copy_nonoverlapping(src.as_ptr().add(first), base, src.len() - first);
        }
    }

    /// Copies the ring bytes of `[lsn, lsn + dst.len())` out.
    ///
    /// # Safety
    /// Every inserter into that range has completed and none will write it until the
    /// caller advances `written_lsn` past it (module invariant 2).
    pub unsafe fn copy_out(&self, lsn: Lsn, dst: &mut [u8]) {
        let cap = self.bytes.len();
        assert!(dst.len() <= cap);
        let start = (lsn.0 % cap as u64) as usize;
        let first = dst.len().min(cap - start);
        let base = UnsafeCell::raw_get(self.bytes.as_ptr()) as *const u8;
        // SAFETY: bounds as in `copy_in`; the range is quiescent by the caller's contract.
        unsafe {
            std::ptr::copy_nonoverlapping(base.add(start), dst.as_mut_ptr(), first);
            std::ptr::copy_nonoverlapping(base, dst.as_mut_ptr().add(first), dst.len() - first);
        }
    }

    /// The ring bytes of `[lsn, lsn + len)` in place, as one or two slices (two when the
    /// range wraps), handed to `each` in LSN order: the pmem writer copies them straight
    /// into the mapped segment, without staging them in a buffer first.
    ///
    /// # Safety
    /// As for [`WalBuffer::copy_out`]: the range is quiescent for the whole call.
    pub unsafe fn read_in_place(&self, lsn: Lsn, len: usize, mut each: impl FnMut(&[u8])) {
        let cap = self.bytes.len();
        assert!(len <= cap);
        let start = (lsn.0 % cap as u64) as usize;
        let first = len.min(cap - start);
        let base = UnsafeCell::raw_get(self.bytes.as_ptr()) as *const u8;
        // SAFETY: bounds as in `copy_in`; no inserter writes the range while the slices
        // live (the caller's contract), so shared references to it are sound.
        let (head, tail) = unsafe {
            (
                std::slice::from_raw_parts(base.add(start), first),
                std::slice::from_raw_parts(base, len - first),
            )
        };
        each(head);
        if !tail.is_empty() {
            each(tail);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_around() {
        let b = WalBuffer::new(16);
        // SAFETY: single-threaded test, ranges not shared.
        unsafe {
            b.copy_in(Lsn(12), &[1, 2, 3, 4, 5, 6, 7, 8]);
            let mut out = [0u8; 8];
            b.copy_out(Lsn(12), &mut out);
            assert_eq!(out, [1, 2, 3, 4, 5, 6, 7, 8]);
            let mut head = [0u8; 4];
            b.copy_out(Lsn(16), &mut head);
            assert_eq!(head, [5, 6, 7, 8]);
            let mut parts = Vec::new();
            b.read_in_place(Lsn(12), 8, |p| parts.push(p.to_vec()));
            assert_eq!(parts, vec![vec![1, 2, 3, 4], vec![5, 6, 7, 8]]);
        }
    }
}
