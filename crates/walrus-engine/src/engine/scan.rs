//! Sequential scans that hand each row out borrowed: a page's visible tuples are copied
//! out under one latch ([`PageBatch`]) and decoded one by one into a single reused row
//! buffer, so the scan itself allocates nothing per row (only a wanted text or numeric
//! value does).

use walrus_base::Tid;

use super::Transaction;
use crate::access::datum::{self, Datum};
use crate::access::heap::tuple::Viewer;
use crate::access::heap::Heap;
use crate::catalog::TableDef;
use crate::error::{Error, Result};

impl Transaction {
    /// [`Transaction::scan_columns`] lending each row to `f` instead of giving it away:
    /// the slice is valid only during the call (it is overwritten by the next row).
    /// Columns `wanted` leaves out read as NULL. `f` returns false to stop.
    pub fn scan_columns_borrowed(
        &mut self,
        def: &TableDef,
        wanted: &[bool],
        mut f: impl FnMut(Tid, &[Datum]) -> Result<bool>,
    ) -> Result<()> {
        let snap = self.snapshot();
        let viewer = Viewer {
            snapshot: &snap,
            own_xid: self.xid,
            cid: self.cid,
        };
        let rel = self.inner.rel(def.relfile, def.fillfactor);
        let heap = Heap::new(&self.inner.pool, &self.inner.txn, &rel);
        let types = def.types();
        let mut batch = heap.scan_batch()?;
        let mut row = Vec::with_capacity(types.len());
        for b in 0..heap.nblocks()? {
            self.check_interrupt()?;
            heap.visible_batch(b, &viewer, &mut batch)?;
            for i in 0..batch.len() {
                let (tid, bytes) = batch.row(i);
                datum::decode_row_columns_into(bytes, &types, wanted, &mut row)
                    .map_err(|e| Error::InvalidInput(e.to_string()))?;
                if !f(tid, &row)? {
                    return Ok(());
                }
            }
        }
        Ok(())
    }
}
