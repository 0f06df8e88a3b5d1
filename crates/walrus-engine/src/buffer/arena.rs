//! The pool's page memory: one anonymous mapping of `nframes` × 8 KiB, split into one
//! [`PageSlot`] per frame.
//!
//! Why a mapping and not a `Box` per frame: boxing zeroed pages writes every byte at
//! startup, so the pool cost a page fault per 4 KiB before the first query — 170 ms for
//! 128 MB on this VM, seconds for a few GB, and on the restart path after a crash. The
//! kernel hands out an anonymous mapping zero-filled on first touch, so a frame's memory
//! is faulted in when a page is first read into it (next to a disk read, the fault is
//! noise). The mapping is also page-aligned, as `O_DIRECT` would need.
//!
//! This is one of the engine's two `unsafe` modules (with `wal::buffer`). The invariant
//! it relies on: each slot is a distinct 8 KiB range of the mapping, reachable only
//! through its `PageSlot`, which is neither `Clone` nor `Copy` and lives inside its
//! frame's latch; the mapping is unmapped only when the arena is dropped, after every
//! frame (the pool owns both and declares the frames first).

use std::ptr::NonNull;

use walrus_base::PAGE_SIZE;

/// The anonymous mapping that backs every frame's page.
pub(super) struct PageArena {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the arena only hands out pointers (one per slot); it never reads or writes the
// memory itself, so moving or sharing it across threads cannot race.
unsafe impl Send for PageArena {}
// SAFETY: as above; `&PageArena` gives no access to the bytes.
unsafe impl Sync for PageArena {}

impl PageArena {
    /// Maps `nframes` zero-filled pages. Nothing is touched here.
    pub(super) fn new(nframes: usize) -> std::io::Result<(PageArena, Vec<PageSlot>)> {
        let len = nframes
            .checked_mul(PAGE_SIZE)
            .ok_or_else(|| std::io::Error::other("shared_buffers too large"))?;
        // SAFETY: a fresh private anonymous mapping, no address hint, no file: it aliases
        // nothing, and the result is checked for MAP_FAILED below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let base = NonNull::new(p.cast::<u8>())
            .ok_or_else(|| std::io::Error::other("mmap returned a null mapping"))?;
        let slots = (0..nframes)
            .map(|i| PageSlot {
                // SAFETY: `i * PAGE_SIZE + PAGE_SIZE <= len`, so the offset stays inside
                // the mapping; the result is non-null because `base` is.
                page: unsafe { base.add(i * PAGE_SIZE) }.cast::<[u8; PAGE_SIZE]>(),
            })
            .collect();
        Ok((PageArena { base, len }, slots))
    }
}

impl Drop for PageArena {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are exactly the mapping made in `new`, unmapped once, here;
        // every `PageSlot` into it belongs to a frame that was dropped before the arena.
        let rc = unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
        assert_eq!(rc, 0, "munmap of the buffer pool failed");
    }
}

/// One frame's 8 KiB page inside the arena. Held inside the frame's latch, so the latch
/// decides who may read it (shared guard) or change it (exclusive guard).
pub struct PageSlot {
    page: NonNull<[u8; PAGE_SIZE]>,
}

// SAFETY: a slot is the only handle to its range; it moves between threads like the
// `Box` it replaces.
unsafe impl Send for PageSlot {}
// SAFETY: `&PageSlot` only gives `&[u8]` (Deref); writing needs `&mut PageSlot`, which
// the latch grants to one thread at a time.
unsafe impl Sync for PageSlot {}

impl std::ops::Deref for PageSlot {
    type Target = [u8; PAGE_SIZE];
    fn deref(&self) -> &[u8; PAGE_SIZE] {
        // SAFETY: the range is mapped, readable and exclusively this slot's (module doc);
        // a shared borrow of the slot cannot coexist with the `&mut` below.
        unsafe { self.page.as_ref() }
    }
}

impl std::ops::DerefMut for PageSlot {
    fn deref_mut(&mut self) -> &mut [u8; PAGE_SIZE] {
        // SAFETY: as for Deref, and `&mut self` makes this the only borrow of the range.
        unsafe { self.page.as_mut() }
    }
}
