//! ORDER BY's row collector: every row sorted (stable: ties keep their arrival order),
//! or, under a LIMIT, a bounded heap of the best `limit + offset` rows (PostgreSQL's
//! top-N heapsort). Both give exactly the rows and order a stable sort followed by the
//! limit gives: each row carries its arrival number as the last sort key.

use std::cmp::Ordering;

use walrus_engine::access::datum::Datum;

use super::compare_keys;

/// One row with its ORDER BY keys and arrival number (the tie-breaker).
pub(super) struct SortEntry {
    pub keys: Vec<Datum>,
    pub seq: u64,
    pub row: Vec<Datum>,
}

/// Orders entries by their keys under `dirs`, then by arrival.
pub(super) fn entry_order(a: &SortEntry, b: &SortEntry, dirs: &[(bool, bool)]) -> Ordering {
    compare_keys(&a.keys, &b.keys, dirs).then(a.seq.cmp(&b.seq))
}

/// The `cap` first entries in sort order, kept in a binary max-heap (the worst kept
/// entry on top), so a row that cannot make the cut costs one comparison.
pub(super) struct TopN {
    cap: usize,
    dirs: Vec<(bool, bool)>,
    heap: Vec<SortEntry>,
}

impl TopN {
    pub(super) fn new(cap: usize, dirs: Vec<(bool, bool)>) -> TopN {
        TopN {
            cap,
            dirs,
            heap: Vec::new(),
        }
    }

    /// Offers an entry; returns whether the heap grew (the caller charges memory then).
    pub(super) fn push(&mut self, e: SortEntry) -> bool {
        if self.heap.len() < self.cap {
            self.heap.push(e);
            self.sift_up(self.heap.len() - 1);
            return true;
        }
        if self.cap == 0 || entry_order(&e, &self.heap[0], &self.dirs).is_ge() {
            return false;
        }
        self.heap[0] = e;
        self.sift_down(0);
        false
    }

    /// Whether [`TopN::push`] would turn away an entry with these keys and arrival
    /// number (the heap is full and the entry sorts at or after its worst).
    pub(super) fn rejects(&self, keys: &[Datum], seq: u64) -> bool {
        if self.heap.len() < self.cap {
            return false;
        }
        self.cap == 0
            || compare_keys(keys, &self.heap[0].keys, &self.dirs)
                .then(seq.cmp(&self.heap[0].seq))
                .is_ge()
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.heap.len()
    }

    /// The kept entries in sort order.
    pub(super) fn into_sorted(self) -> Vec<SortEntry> {
        let dirs = self.dirs;
        let mut v = self.heap;
        v.sort_by(|a, b| entry_order(a, b, &dirs));
        v
    }

    fn greater(&self, i: usize, j: usize) -> bool {
        entry_order(&self.heap[i], &self.heap[j], &self.dirs).is_gt()
    }

    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if !self.greater(i, parent) {
                break;
            }
            self.heap.swap(i, parent);
            i = parent;
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        let n = self.heap.len();
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut big = i;
            if l < n && self.greater(l, big) {
                big = l;
            }
            if r < n && self.greater(r, big) {
                big = r;
            }
            if big == i {
                return;
            }
            self.heap.swap(i, big);
            i = big;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(k: Option<i64>, seq: u64) -> SortEntry {
        SortEntry {
            keys: vec![k.map(Datum::Int8).unwrap_or(Datum::Null)],
            seq,
            row: vec![Datum::Int8(seq as i64)],
        }
    }

    /// The heap keeps what a stable full sort then a limit keeps, in every direction and
    /// NULL placement, with many ties.
    #[test]
    fn top_n_matches_stable_sort_then_limit() {
        let mut x: u64 = 0x9e3779b97f4a7c15;
        let keys: Vec<Option<i64>> = (0..500)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if x.is_multiple_of(11) {
                    None
                } else {
                    Some((x % 23) as i64)
                }
            })
            .collect();
        for dirs in [(false, false), (true, true), (false, true), (true, false)] {
            for cap in [0, 1, 2, 7, 100, 499, 500, 900] {
                let mut all: Vec<SortEntry> = keys
                    .iter()
                    .enumerate()
                    .map(|(i, k)| entry(*k, i as u64))
                    .collect();
                all.sort_by(|a, b| compare_keys(&a.keys, &b.keys, &[dirs]));
                all.truncate(cap);
                let mut top = TopN::new(cap, vec![dirs]);
                for (i, k) in keys.iter().enumerate() {
                    let e = entry(*k, i as u64);
                    let rejected = top.rejects(&e.keys, e.seq);
                    let before: Vec<u64> = top.heap.iter().map(|e| e.seq).collect();
                    top.push(e);
                    let after: Vec<u64> = top.heap.iter().map(|e| e.seq).collect();
                    assert_eq!(rejected, before == after, "rejects agrees with push");
                }
                assert!(top.len() <= cap);
                let got: Vec<u64> = top.into_sorted().iter().map(|e| e.seq).collect();
                let want: Vec<u64> = all.iter().map(|e| e.seq).collect();
                assert_eq!(got, want, "dirs {dirs:?} cap {cap}");
            }
        }
    }
}
