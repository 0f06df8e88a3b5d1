//! A sequential scan a page at a time: the tuples of one block that a snapshot sees,
//! copied out under the page's one shared latch into a buffer the scan reuses. The
//! consumer then runs without any latch held (it may take as long as it likes, or read
//! other pages), and nothing is allocated per row once the buffer has grown to a page.

use std::ops::Range;

use walrus_base::Tid;

use super::tuple::Viewer;
use super::Heap;
use crate::buffer::ScanRing;
use crate::error::Result;

/// The visible tuples of one page: their row bytes (headers stripped) back to back,
/// and each one's tid and place in them. A batch made for a scan of a large table
/// ([`Heap::scan_batch`]) also carries the scan's [`ScanRing`].
#[derive(Default)]
pub struct PageBatch {
    bytes: Vec<u8>,
    rows: Vec<(Tid, Range<usize>)>,
    ring: Option<ScanRing>,
}

impl PageBatch {
    pub fn new() -> PageBatch {
        PageBatch::default()
    }

    /// How many rows the batch holds.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The `i`-th row: its tid and stored bytes (`datum::decode_row`'s input).
    pub fn row(&self, i: usize) -> (Tid, &[u8]) {
        let (tid, r) = &self.rows[i];
        (*tid, &self.bytes[r.clone()])
    }
}

impl Heap<'_> {
    /// A batch for a sequential scan of this heap: one reading through a [`ScanRing`]
    /// when the heap is more than a quarter of the buffer pool.
    pub fn scan_batch(&self) -> Result<PageBatch> {
        Ok(PageBatch {
            ring: self.pool.ring_for_scan(self.nblocks()?),
            ..PageBatch::default()
        })
    }

    /// Replaces `batch`'s contents with the tuples of `block` visible to `v`, in offset
    /// order (what [`Heap::scan_block`] gives, without a copy per row).
    pub fn visible_batch(&self, block: u32, v: &Viewer<'_>, batch: &mut PageBatch) -> Result<()> {
        batch.bytes.clear();
        batch.rows.clear();
        let PageBatch { bytes, rows, ring } = batch;
        self.visible_in(block, v, ring.as_mut(), |tid, row| {
            let start = bytes.len();
            bytes.extend_from_slice(row);
            rows.push((tid, start..bytes.len()));
        })
    }
}
