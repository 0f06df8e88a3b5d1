//! ANALYZE's row sample, PostgreSQL's two-stage method (`acquire_sample_rows`):
//!
//! 1. **Blocks**: a uniform random choice of `min(target, nblocks)` of the table's blocks,
//!    in block order (Knuth's Algorithm S, as PostgreSQL's `BlockSampler`). A table of
//!    at most `target` blocks is read whole.
//! 2. **Rows**: every row visible to the transaction on a chosen block is counted, and
//!    a reservoir of `target` rows is kept over them. The reservoir skips ahead by a
//!    random count between replacements (Li's Algorithm L, the successor of Vitter's
//!    Algorithm Z that PostgreSQL uses): after the first `target` rows only about
//!    `target · (1 + ln(rows / target))` rows are ever copied. Rows are kept as their
//!    stored bytes and decoded once, at the end.
//!
//! The table's live rows are estimated as PostgreSQL does: the rows counted on the
//! chosen blocks, scaled by `nblocks / chosen blocks`. Exact when every block was read.

use walrus_base::Tid;

use super::Transaction;
use crate::access::datum::{self, Datum};
use crate::access::heap::tuple::Viewer;
use crate::access::heap::Heap;
use crate::catalog::TableDef;
use crate::error::{Error, Result};

/// What ANALYZE's sampling found.
#[derive(Debug)]
pub struct TableSample {
    /// At most the target's number of rows, uniformly chosen, in no particular order.
    pub rows: Vec<Vec<Datum>>,
    /// Visible rows on the blocks read.
    pub rows_seen: u64,
    /// Estimated visible rows of the whole table (`rows_seen` when every block was read).
    pub rows_estimate: f64,
    /// The table's blocks (`pg_class.relpages`), and how many were read.
    pub blocks: u32,
    pub blocks_read: u32,
}

impl TableSample {
    /// Whether the sample is every visible row of the table: statistics from it are
    /// exact.
    pub fn is_whole_table(&self) -> bool {
        self.blocks_read == self.blocks && self.rows.len() as u64 == self.rows_seen
    }
}

/// A small generator (splitmix64): the sample must be uniform, not unpredictable.
pub(crate) struct SampleRng(u64);

impl SampleRng {
    pub(crate) fn new(seed: u64) -> SampleRng {
        SampleRng(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in the open interval (0, 1): never 0, so its logarithm is finite.
    fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// Uniform in `0..n` (`n > 0`).
    fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

/// Chooses `want` of `total` blocks uniformly, yielding them in increasing order
/// (Knuth's Algorithm S: block `t` is taken with probability `still wanted / left`).
pub(crate) struct BlockSampler {
    total: u32,
    want: u32,
    next: u32,
    taken: u32,
}

impl BlockSampler {
    pub(crate) fn new(total: u32, want: u32) -> BlockSampler {
        BlockSampler {
            total,
            want: want.min(total),
            next: 0,
            taken: 0,
        }
    }

    pub(crate) fn next_block(&mut self, rng: &mut SampleRng) -> Option<u32> {
        while self.taken < self.want && self.next < self.total {
            let t = self.next;
            self.next += 1;
            let left = (self.total - t) as f64;
            let wanted = (self.want - self.taken) as f64;
            // Taken for certain once as many are wanted as are left.
            if left * rng.unit() < wanted {
                self.taken += 1;
                return Some(t);
            }
        }
        None
    }
}

/// A reservoir of at most `capacity` items over a stream, each item of the stream
/// equally likely to be in it at any point (Li's Algorithm L).
pub(crate) struct Reservoir<T> {
    pub(crate) items: Vec<T>,
    capacity: usize,
    /// Items of the stream offered so far.
    seen: u64,
    /// The index (in the stream) of the next item that goes in.
    next_in: u64,
    /// Algorithm L's running weight.
    w: f64,
}

impl<T> Reservoir<T> {
    pub(crate) fn new(capacity: usize) -> Reservoir<T> {
        Reservoir {
            items: Vec::with_capacity(capacity.min(1 << 20)),
            capacity,
            seen: 0,
            next_in: 0,
            w: 1.0,
        }
    }

    /// Offers the next item of the stream; `make` is called only when it goes in.
    pub(crate) fn offer(&mut self, rng: &mut SampleRng, make: impl FnOnce() -> T) {
        let i = self.seen;
        self.seen += 1;
        if self.items.len() < self.capacity {
            self.items.push(make());
            if self.items.len() == self.capacity {
                self.w = (rng.unit().ln() / self.capacity as f64).exp();
                self.next_in = self.seen + self.skip(rng);
            }
            return;
        }
        if i < self.next_in || self.capacity == 0 {
            return;
        }
        let slot = rng.below(self.capacity as u64) as usize;
        self.items[slot] = make();
        self.w *= (rng.unit().ln() / self.capacity as f64).exp();
        self.next_in = self.seen + self.skip(rng);
    }

    /// How many items to pass over before the next replacement: geometric with
    /// success probability `w`.
    fn skip(&self, rng: &mut SampleRng) -> u64 {
        let s = (rng.unit().ln() / (1.0 - self.w).ln()).floor();
        // NaN cannot happen (both logarithms are negative or the divisor is -0: +inf);
        // a huge or infinite skip means no later item goes in, which `as` saturates to.
        s as u64
    }
}

impl Transaction {
    /// ANALYZE's sample of `def`: at most `target` rows visible to this transaction,
    /// chosen uniformly (see the module comment), and the table's estimated row count.
    /// `seed` fixes the random choices (tests); ANALYZE passes a fresh one.
    pub fn sample_rows(&mut self, def: &TableDef, target: usize, seed: u64) -> Result<TableSample> {
        self.lock_for_read(def)?;
        let snap = self.snapshot();
        let (own, cid) = (self.own_xids.as_slice(), self.cid);
        let viewer = Viewer {
            snapshot: &snap,
            own_xids: own,
            cid,
        };
        let rel = self.inner.rel(def.relfile, def.fillfactor);
        let heap = Heap::new(&self.inner.pool, &self.inner.txn, &rel);
        let blocks = heap.nblocks()?;
        let mut rng = SampleRng::new(seed);
        let want = u32::try_from(target).unwrap_or(u32::MAX);
        let mut chooser = BlockSampler::new(blocks, want);
        let mut reservoir: Reservoir<(Tid, Vec<u8>)> = Reservoir::new(target);
        let mut rows_seen = 0u64;
        let mut blocks_read = 0u32;
        let mut ring = self.inner.pool.ring_for_scan(want.min(blocks));
        while let Some(b) = chooser.next_block(&mut rng) {
            self.check_interrupt()?;
            blocks_read += 1;
            heap.for_each_visible(b, &viewer, ring.as_mut(), |tid, row| {
                rows_seen += 1;
                reservoir.offer(&mut rng, || (tid, row.to_vec()));
            })?;
        }
        let rows_estimate = if blocks_read == blocks || blocks_read == 0 {
            rows_seen as f64
        } else {
            (rows_seen as f64 / blocks_read as f64 * blocks as f64).round()
        };
        // In table order, as PostgreSQL sorts its sample (nothing here depends on it,
        // but a reader of the sample gets what a scan would give for a small table).
        let mut kept = reservoir.items;
        kept.sort_unstable_by_key(|(tid, _)| *tid);
        let types = def.types();
        let rows = kept
            .iter()
            .map(|(_, row)| {
                datum::decode_row(row, &types).map_err(|e| Error::InvalidInput(e.to_string()))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(TableSample {
            rows,
            rows_seen,
            rows_estimate,
            blocks,
            blocks_read,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_sampler_takes_exactly_the_wanted_blocks_in_order() {
        let mut rng = SampleRng::new(7);
        for (total, want) in [(0, 5), (3, 5), (10, 10), (1000, 30), (100_000, 3000)] {
            let mut s = BlockSampler::new(total, want);
            let mut got = Vec::new();
            while let Some(b) = s.next_block(&mut rng) {
                got.push(b);
            }
            assert_eq!(got.len() as u32, want.min(total), "{total} {want}");
            assert!(got.windows(2).all(|w| w[0] < w[1]));
            assert!(got.iter().all(|&b| b < total));
        }
    }

    #[test]
    fn block_sampler_is_uniform() {
        // 200 of 1000 blocks, 500 times: each block about 100 times.
        let mut rng = SampleRng::new(42);
        let mut hits = vec![0u32; 1000];
        for _ in 0..500 {
            let mut s = BlockSampler::new(1000, 200);
            while let Some(b) = s.next_block(&mut rng) {
                hits[b as usize] += 1;
            }
        }
        let first: u32 = hits[..500].iter().sum();
        let last: u32 = hits[500..].iter().sum();
        assert!(first.abs_diff(last) < 2000, "{first} vs {last}");
        assert!(hits.iter().all(|&h| (50..=160).contains(&h)), "{hits:?}");
    }

    #[test]
    fn reservoir_is_bounded_and_uniform() {
        // A stream of 100,000 items into 1,000 slots, 40 times: every tenth of the
        // stream holds about a tenth of the kept items, and few items are copied.
        let mut rng = SampleRng::new(1);
        let mut per_tenth = [0u64; 10];
        let mut made = 0u64;
        for _ in 0..40 {
            let mut r = Reservoir::new(1000);
            for i in 0..100_000u64 {
                r.offer(&mut rng, || {
                    made += 1;
                    i
                });
            }
            assert_eq!(r.items.len(), 1000);
            let mut sorted = r.items.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), 1000, "an item kept twice");
            for i in r.items {
                per_tenth[(i / 10_000) as usize] += 1;
            }
        }
        for (t, &n) in per_tenth.iter().enumerate() {
            assert!((3600..=4400).contains(&n), "tenth {t}: {n} of 40,000");
        }
        // 1000 · (1 + ln 100) ≈ 5,600 per stream.
        assert!(made < 40 * 8000, "{made} copies");
        // Fewer items than slots: all of them.
        let mut r = Reservoir::new(10);
        for i in 0..7 {
            r.offer(&mut rng, || i);
        }
        assert_eq!(r.items, (0..7).collect::<Vec<_>>());
    }

    fn table_of(
        rows: i64,
    ) -> (
        tempfile::TempDir,
        crate::engine::Engine,
        std::sync::Arc<TableDef>,
    ) {
        use crate::access::datum::TypeId;
        use crate::catalog::ColumnDef;
        use crate::engine::{Engine, Isolation};
        let dir = tempfile::tempdir().unwrap();
        Engine::init(dir.path(), None).unwrap();
        let (e, _) = Engine::open(dir.path()).unwrap();
        let col = |name: &str, ty| ColumnDef {
            name: name.into(),
            ty,
            not_null: false,
            typmod: -1,
            declared: Default::default(),
        };
        let mut t = e.begin(Isolation::ReadCommitted);
        let def = t
            .create_table(
                "t",
                vec![col("id", TypeId::Int8), col("pad", TypeId::Text)],
                100,
            )
            .unwrap();
        let pad = "x".repeat(100);
        let batch: Vec<Vec<Datum>> = (0..rows)
            .map(|i| vec![Datum::Int8(i), Datum::Text(pad.clone())])
            .collect();
        t.insert_many(&def, &batch).unwrap();
        t.commit().unwrap();
        (dir, e, def)
    }

    #[test]
    fn a_large_table_is_sampled_and_its_rows_estimated() {
        let (_dir, e, def) = table_of(30_000);
        let mut t = e.begin(crate::engine::Isolation::ReadCommitted);
        let s = t.sample_rows(&def, 200, 3).unwrap();
        assert!(s.blocks > 400, "{} blocks", s.blocks);
        assert_eq!((s.blocks_read, s.rows.len()), (200, 200));
        assert!(!s.is_whole_table());
        assert!(
            (s.rows_estimate - 30_000.0).abs() < 0.03 * 30_000.0,
            "estimate {}",
            s.rows_estimate
        );
        // Distinct rows, spread over the table.
        let mut ids: Vec<i64> = s
            .rows
            .iter()
            .map(|r| match r[0] {
                Datum::Int8(v) => v,
                ref d => panic!("{d:?}"),
            })
            .collect();
        ids.dedup();
        assert_eq!(
            ids.len(),
            200,
            "sorted by tid, so ids ascend without repeats"
        );
        assert!(
            ids[0] < 3_000 && ids[199] > 27_000,
            "{:?}",
            (ids[0], ids[199])
        );
        t.commit().unwrap();
        e.shutdown().unwrap();
    }

    #[test]
    fn a_small_table_is_read_whole() {
        let (_dir, e, def) = table_of(500);
        let mut t = e.begin(crate::engine::Isolation::ReadCommitted);
        let s = t.sample_rows(&def, 30_000, 3).unwrap();
        assert!(s.is_whole_table());
        assert_eq!(
            (s.rows.len(), s.rows_seen, s.rows_estimate),
            (500, 500, 500.0)
        );
        assert_eq!(s.blocks_read, s.blocks);
        // Every block read, but more rows than the target: the count stays exact.
        let s = t.sample_rows(&def, 100, 3).unwrap();
        assert!(s.blocks <= 100 && !s.is_whole_table());
        assert_eq!((s.rows.len(), s.rows_estimate), (100, 500.0));
        t.commit().unwrap();
        e.shutdown().unwrap();
    }
}
