//! A sequential scan a page at a time: the tuples of one block that a snapshot sees,
//! copied out under the page's one shared latch into a buffer the scan reuses. The
//! consumer then runs without any latch held (it may take as long as it likes, or read
//! other pages), and nothing is allocated per row once the buffer has grown to a page.

use std::ops::Range;

use walrus_base::Tid;

use super::tuple::{Viewer, TUPLE_HEADER_SIZE};
use super::{root_is_dead, visible_in_chain, Heap};
use crate::buffer::ScanRing;
use crate::error::Result;
use crate::storage::page;

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

impl Heap<'_> {
    /// Index fetch for the entries whose chains start on one `block` (at offsets
    /// `roots`), under one pin and one shared latch (an index range over a table loaded
    /// in key order lands on each heap page many times in a row): from each root,
    /// redirects and the HOT chain are followed to the version `v` sees.
    /// `batch` is replaced by the version of each chain visible to `v`, in `roots`
    /// order (a chain with none adds nothing); the positions in `roots` of `DEAD` line
    /// pointers (entries nothing can see, which the caller may remove) go to `dead`.
    pub fn fetch_visible_batch(
        &self,
        block: u32,
        roots: &[u16],
        v: &Viewer<'_>,
        batch: &mut PageBatch,
        dead: &mut Vec<usize>,
    ) -> Result<()> {
        batch.bytes.clear();
        batch.rows.clear();
        if !self.has_block(block)? {
            return Ok(());
        }
        let pin = self.pool.read_page(self.page_id(block))?;
        let horizon = self.txn.prune_horizon();
        let (longest, prunable) = {
            let r = pin.read();
            if page::is_new(&r) {
                return Ok(());
            }
            let mut longest = 0;
            for (i, &off) in roots.iter().enumerate() {
                if root_is_dead(&r, off) {
                    dead.push(i);
                    continue;
                }
                let (found, walked) = visible_in_chain(&r, Tid::new(block, off), v, self.txn);
                longest = longest.max(walked);
                if let Some(at) = found {
                    let start = batch.bytes.len();
                    batch
                        .bytes
                        .extend_from_slice(&page::item(&r, at)[TUPLE_HEADER_SIZE..]);
                    batch
                        .rows
                        .push((Tid::new(block, at), start..batch.bytes.len()));
                }
            }
            let px = page::prune_xid(&r);
            (longest, px != 0 && walrus_base::Xid(px) < horizon)
        };
        self.prune_long_chain(&pin, longest, prunable, horizon)
    }
}
