#![doc = include_str!("README.md")]

use std::cmp::Ordering;
use std::collections::HashSet;
use std::ops::Bound;

use walrus_base::limits::BTREE_KEY_BYTES_MAX;
use walrus_base::{PageId, RelFileId, Tid, Xid, PAGE_SIZE};

use crate::access::datum::{encode_tid_suffix, split_tid_suffix};
use crate::buffer::{BufferPool, PageWrite};
use crate::error::{Error, Result};
use crate::storage::page::{self, PageKind, Placement};
use crate::wal::record::{Rmgr, WalRecord};

pub const INFO_INSERT: u8 = 1;
pub const INFO_SPLIT: u8 = 2;
pub const INFO_NEW_ROOT: u8 = 3;
pub const INFO_DELETE: u8 = 4;
pub const INFO_PAGE_IMAGE: u8 = 5;

const META_BLOCK: u32 = 0;
const NO_BLOCK: u32 = u32::MAX;
const NODE_SPECIAL: usize = 8;
const META_SPECIAL: usize = 8;
const CHILD_BYTES: usize = 4;
/// Bulk build leaves this much of each page free for later inserts.
const BULK_FILL: usize = PAGE_SIZE * 9 / 10;

/// Answer of the caller's uniqueness check for an existing entry with an equal key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UniqueCheck {
    NotLive,
    Live,
    WaitFor(Xid),
}

// ---- page helpers -------------------------------------------------------------------

fn right_link(p: &[u8]) -> u32 {
    let s = page::special(p);
    u32::from_le_bytes([s[0], s[1], s[2], s[3]])
}
fn level(p: &[u8]) -> u16 {
    let s = page::special(p);
    u16::from_le_bytes([s[4], s[5]])
}
fn init_node(p: &mut [u8], id: PageId, lvl: u16, right: u32) {
    page::init(p, id, PageKind::BtreeNode, NODE_SPECIAL);
    let s = page::special_mut(p);
    s[0..4].copy_from_slice(&right.to_le_bytes());
    s[4..6].copy_from_slice(&lvl.to_le_bytes());
}
fn is_rightmost(p: &[u8]) -> bool {
    right_link(p) == NO_BLOCK
}
/// First data item: item 1 is the high key on every page except the rightmost.
fn first_data(p: &[u8]) -> u16 {
    if is_rightmost(p) {
        1
    } else {
        2
    }
}
fn high_key(p: &[u8]) -> Option<&[u8]> {
    (!is_rightmost(p)).then(|| page::item(p, 1))
}
fn meta_root(p: &[u8]) -> (u32, u16) {
    let s = page::special(p);
    (
        u32::from_le_bytes([s[0], s[1], s[2], s[3]]),
        u16::from_le_bytes([s[4], s[5]]),
    )
}
fn init_meta(p: &mut [u8], id: PageId, root: u32, lvl: u16) {
    page::init(p, id, PageKind::BtreeMeta, META_SPECIAL);
    let s = page::special_mut(p);
    s[0..4].copy_from_slice(&root.to_le_bytes());
    s[4..6].copy_from_slice(&lvl.to_le_bytes());
}
/// The key part of an item: leaf items end in a tid, internal items in a child block.
fn item_key(item: &[u8], lvl: u16) -> &[u8] {
    let n = if lvl == 0 { 0 } else { CHILD_BYTES };
    &item[..item.len().saturating_sub(n)]
}
fn child_of(item: &[u8]) -> u32 {
    let n = item.len();
    u32::from_be_bytes([item[n - 4], item[n - 3], item[n - 2], item[n - 1]])
}
fn downlink(key: &[u8], child: u32) -> Vec<u8> {
    let mut v = Vec::with_capacity(key.len() + 4);
    v.extend_from_slice(key);
    v.extend_from_slice(&child.to_be_bytes());
    v
}
/// Whether `key` belongs to a page to the right (key >= high key).
fn beyond(p: &[u8], key: &[u8]) -> bool {
    matches!(high_key(p), Some(h) if key >= item_key(h, level(p)))
}
/// Child to follow in an internal page: the last item whose key is <= `key`.
fn choose_child(p: &[u8], key: &[u8]) -> u32 {
    let lvl = level(p);
    let first = first_data(p);
    let pos = page::lower_bound(p, first, |it| {
        if item_key(it, lvl) <= key {
            Ordering::Less
        } else {
            Ordering::Greater
        }
    });
    let pick = if pos > first { pos - 1 } else { first };
    child_of(page::item(p, pick))
}

fn page_bytes(p: &[u8]) -> Vec<u8> {
    p.to_vec()
}

pub struct BTree<'a> {
    pool: &'a BufferPool,
    relfile: RelFileId,
    unique: bool,
    name: String,
}

impl<'a> BTree<'a> {
    /// Creates an empty tree: the metapage and an empty root leaf, both WAL-logged.
    pub fn create(pool: &'a BufferPool, relfile: RelFileId, xid: Xid) -> Result<()> {
        let meta_block = pool.relfiles.allocate_block(relfile)?;
        let root_block = pool.relfiles.allocate_block(relfile)?;
        assert_eq!(meta_block, META_BLOCK, "a new index starts at block 0");
        let (mid, rid) = (
            PageId::new(relfile, meta_block),
            PageId::new(relfile, root_block),
        );
        let mp = pool.new_page(mid)?;
        let rp = pool.new_page(rid)?;
        let mut mw = mp.write();
        let mut rw = rp.write();
        init_meta(&mut mw, mid, root_block, 0);
        init_node(&mut rw, rid, 0, NO_BLOCK);
        let mut rec = WalRecord::new(Rmgr::Btree, INFO_PAGE_IMAGE, xid);
        rec.block(mid, true, page_bytes(&mw));
        rec.block(rid, true, page_bytes(&rw));
        pool.log_change(&rec, &mut [&mut mw, &mut rw]);
        Ok(())
    }

    pub fn open(pool: &'a BufferPool, relfile: RelFileId, unique: bool, name: &str) -> BTree<'a> {
        BTree {
            pool,
            relfile,
            unique,
            name: name.to_string(),
        }
    }

    fn pid(&self, block: u32) -> PageId {
        PageId::new(self.relfile, block)
    }

    fn root(&self) -> Result<(u32, u16)> {
        let m = self.pool.read_page(self.pid(META_BLOCK))?;
        let r = m.read();
        if page::kind(&r) != Some(PageKind::BtreeMeta) {
            return Err(Error::Decode {
                what: "btree metapage",
                at: self.name.clone(),
                reason: "not a metapage".into(),
            });
        }
        Ok(meta_root(&r))
    }

    /// Descends to the page at `target_level` that covers `key` (shared latches, one at a
    /// time, moving right past concurrent splits). Returns its block number.
    fn descend(&self, key: &[u8], target_level: u16) -> Result<u32> {
        let (mut block, root_level) = self.root()?;
        if target_level > root_level {
            return Err(Error::DataCorrupted(format!(
                "btree {} has no level {target_level}",
                self.name
            )));
        }
        loop {
            let pin = self.pool.read_page(self.pid(block))?;
            let r = pin.read();
            if beyond(&r, key) {
                block = right_link(&r);
                continue;
            }
            let lvl = level(&r);
            if lvl == target_level {
                return Ok(block);
            }
            block = choose_child(&r, key);
        }
    }

    /// Exclusively latches the page at `level` covering `key`, starting at `block` and
    /// moving right (latching right before releasing left).
    fn latch_covering<'p>(
        &self,
        mut pin: crate::buffer::PinnedPage<'p>,
        key: &[u8],
    ) -> Result<(crate::buffer::PinnedPage<'p>, u32)>
    where
        'a: 'p,
    {
        loop {
            let next = {
                let w = pin.read();
                if beyond(&w, key) {
                    Some(right_link(&w))
                } else {
                    None
                }
            };
            match next {
                Some(b) => pin = self.pool.read_page(self.pid(b))?,
                None => {
                    let b = pin.id().block.0;
                    return Ok((pin, b));
                }
            }
        }
    }

    pub fn insert(
        &self,
        key: &[u8],
        tid: Tid,
        xid: Xid,
        check: &mut dyn FnMut(Tid) -> Result<UniqueCheck>,
        wait: &mut dyn FnMut(Xid) -> Result<()>,
    ) -> Result<()> {
        self.insert_hinted(key, tid, xid, check, wait, &mut None)
    }

    /// [`BTree::insert`], trying first the leaf `leaf_hint` names (the leaf the caller's
    /// previous insert into this index went to) and leaving there the leaf this insert
    /// went to. A run of inserts in key order (an UPDATE or a COPY walking the table in
    /// the index's order) then skips the descent from the root for most entries.
    pub fn insert_hinted(
        &self,
        key: &[u8],
        tid: Tid,
        xid: Xid,
        check: &mut dyn FnMut(Tid) -> Result<UniqueCheck>,
        wait: &mut dyn FnMut(Xid) -> Result<()>,
        leaf_hint: &mut Option<u32>,
    ) -> Result<()> {
        if key.len() > BTREE_KEY_BYTES_MAX {
            return Err(Error::ProgramLimitExceeded(format!(
                "index row size {} exceeds btree maximum {BTREE_KEY_BYTES_MAX} for index \"{}\"",
                key.len(),
                self.name
            )));
        }
        let mut item = key.to_vec();
        encode_tid_suffix(tid, &mut item);
        loop {
            if self.unique {
                match self.unique_check(key, check)? {
                    UniqueCheck::NotLive => {}
                    UniqueCheck::Live => {
                        return Err(Error::UniqueViolation {
                            index: self.name.clone(),
                            detail: "Key already exists.".into(),
                        })
                    }
                    UniqueCheck::WaitFor(x) => {
                        wait(x)?;
                        continue;
                    }
                }
            }
            if let Some(block) = *leaf_hint {
                if self.insert_at_leaf(block, &item, xid)? {
                    return Ok(());
                }
            }
            *leaf_hint = self.insert_at_level(&item, 0, xid)?;
            return Ok(());
        }
    }

    /// Inserts leaf `item` into leaf `block` if the item certainly belongs there and
    /// fits; `false` (nothing changed) otherwise. It belongs there when the page holds
    /// an item below it (so it is above the page's low bound) and it is not beyond the
    /// high key. Pages of a B-tree are never freed, so `block` is still a leaf of it.
    fn insert_at_leaf(&self, block: u32, item: &[u8], xid: Xid) -> Result<bool> {
        let key = item_key(item, 0);
        let pin = self.pool.read_page(self.pid(block))?;
        let mut w = pin.write();
        if page::kind(&w) != Some(PageKind::BtreeNode) || level(&w) != 0 || beyond(&w, key) {
            return Ok(false);
        }
        let first = first_data(&w);
        let pos = page::lower_bound(&w, first, |it| item_key(it, 0).cmp(key));
        if pos <= first || !page::fits(&w, item.len()) {
            return Ok(false);
        }
        page::add_item(&mut w, item, Placement::Insert(pos)).expect("fits");
        self.log_insert(&mut w, pos, item, xid);
        Ok(true)
    }

    /// Logs the insert of `item` at `pos` on the latched page.
    fn log_insert(&self, w: &mut PageWrite<'_>, pos: u16, item: &[u8], xid: Xid) {
        let mut d = pos.to_le_bytes().to_vec();
        d.extend_from_slice(item);
        let mut rec = WalRecord::new(Rmgr::Btree, INFO_INSERT, xid);
        rec.block(w.id(), false, d);
        self.pool.log_change(&rec, &mut [w]);
    }

    /// Passes every entry whose key equals `key` to `check` (stopping at the first
    /// conflict). A racing insert of the same key is caught because the inserter's heap
    /// tuple exists (in progress) before its index entry: the later inserter sees it.
    fn unique_check(
        &self,
        key: &[u8],
        check: &mut dyn FnMut(Tid) -> Result<UniqueCheck>,
    ) -> Result<UniqueCheck> {
        let mut block = self.descend(key, 0)?;
        loop {
            let pin = self.pool.read_page(self.pid(block))?;
            let r = pin.read();
            if beyond(&r, key) {
                block = right_link(&r);
                continue;
            }
            let first = first_data(&r);
            let mut off = page::lower_bound(&r, first, |it| item_key(it, 0).cmp(key));
            while off <= page::item_count(&r) {
                let it = page::item(&r, off);
                let Some((k, t)) = split_tid_suffix(it) else {
                    break;
                };
                if k != key {
                    return Ok(UniqueCheck::NotLive);
                }
                match check(t)? {
                    UniqueCheck::NotLive => {}
                    other => return Ok(other),
                }
                off += 1;
            }
            // Equal keys may continue on the right sibling.
            match high_key(&r) {
                Some(h) if split_tid_suffix(h).map(|(k, _)| k == key).unwrap_or(false) => {
                    block = right_link(&r)
                }
                _ => return Ok(UniqueCheck::NotLive),
            }
        }
    }

    /// Inserts `item` into the level-`lvl` page covering it, found by a descent from the
    /// root, splitting as needed. Returns the page it went to when there was no split.
    fn insert_at_level(&self, item: &[u8], lvl: u16, xid: Xid) -> Result<Option<u32>> {
        let key = item_key(item, lvl).to_vec();
        let block = self.descend(&key, lvl)?;
        let pin = self.pool.read_page(self.pid(block))?;
        let (pin, block) = self.latch_covering(pin, &key)?;
        let mut w = pin.write();
        // Re-check after taking the exclusive latch: a split may have moved our range.
        if beyond(&w, &key) {
            drop(w);
            return self.insert_at_level(item, lvl, xid);
        }
        let first = first_data(&w);
        let pos = page::lower_bound(&w, first, |it| item_key(it, lvl).cmp(&key));
        if page::fits(&w, item.len()) {
            page::add_item(&mut w, item, Placement::Insert(pos)).expect("fits");
            self.log_insert(&mut w, pos, item, xid);
            return Ok(Some(block));
        }
        if lvl == 0 {
            // A leaf split is the last point where this insert can fail having changed
            // nothing; once its first half is logged the cascade up to a new root must
            // not. So a full disk shows here (usually one atomic compare; an fallocate
            // under the latch once per extension chunk).
            self.pool
                .relfiles
                .reserve(self.relfile, SPLIT_BLOCKS_RESERVED)?;
        }
        self.split_and_insert(w, item, pos, xid)?;
        Ok(None)
    }

    /// Splits the latched page, inserting `item` at `pos`, then adds the downlink for the
    /// new right page one level up (or grows a new root).
    fn split_and_insert(
        &self,
        mut w: PageWrite<'_>,
        item: &[u8],
        pos: u16,
        xid: Xid,
    ) -> Result<()> {
        let lvl = level(&w);
        let old_right = right_link(&w);
        let old_high = high_key(&w).map(|h| h.to_vec());
        let first = first_data(&w);
        let mut items: Vec<Vec<u8>> = (first..=page::item_count(&w))
            .map(|o| page::item(&w, o).to_vec())
            .collect();
        items.insert((pos - first) as usize, item.to_vec());
        // Split point: half the bytes, at least one item each side.
        let total: usize = items.iter().map(|i| i.len() + 12).sum();
        let mut acc = 0;
        let mut split = 1;
        for (i, it) in items.iter().enumerate() {
            acc += it.len() + 12;
            if acc >= total / 2 {
                split = (i + 1).clamp(1, items.len() - 1);
                break;
            }
        }
        let right_items = items.split_off(split);
        let sep = item_key(&right_items[0], lvl).to_vec();
        let new_block = self.pool.relfiles.allocate_block_committed(self.relfile)?;
        let rid = self.pid(new_block);
        let rpin = self.pool.new_page(rid)?;
        let mut rw = rpin.write();
        init_node(&mut rw, rid, lvl, old_right);
        if let Some(h) = &old_high {
            page::add_item(
                &mut rw,
                h,
                Placement::Append {
                    reuse_unused: false,
                },
            )
            .expect("empty page");
        }
        for it in &right_items {
            page::add_item(
                &mut rw,
                it,
                Placement::Append {
                    reuse_unused: false,
                },
            )
            .ok_or_else(|| split_overflow(&self.name))?;
        }
        let lid = w.id();
        let keep_lsn = page::lsn(&w);
        init_node(&mut w, lid, lvl, new_block);
        debug_assert_eq!(page::lsn(&w), keep_lsn);
        // The left page's high key is the separator (for leaves a full key + tid).
        let high = if lvl == 0 {
            right_items[0].clone()
        } else {
            downlink(&sep, 0)
        };
        page::add_item(
            &mut w,
            &high,
            Placement::Append {
                reuse_unused: false,
            },
        )
        .expect("empty page");
        for it in &items {
            page::add_item(
                &mut w,
                it,
                Placement::Append {
                    reuse_unused: false,
                },
            )
            .ok_or_else(|| split_overflow(&self.name))?;
        }
        let mut rec = WalRecord::new(Rmgr::Btree, INFO_SPLIT, xid);
        rec.block(lid, true, page_bytes(&w));
        rec.block(rid, true, page_bytes(&rw));
        self.pool.log_change(&rec, &mut [&mut w, &mut rw]);

        let (root, root_level) = self.root()?;
        if root == lid.block.0 {
            // Grow a new root while still holding both halves, so nobody can split the
            // right half and look for a parent that does not exist yet.
            let nb = self.pool.relfiles.allocate_block_committed(self.relfile)?;
            let nid = self.pid(nb);
            let npin = self.pool.new_page(nid)?;
            let mpin = self.pool.read_page(self.pid(META_BLOCK))?;
            let mut mw = mpin.write();
            let mut nw = npin.write();
            init_node(&mut nw, nid, root_level + 1, NO_BLOCK);
            page::add_item(
                &mut nw,
                &downlink(&[], lid.block.0),
                Placement::Append {
                    reuse_unused: false,
                },
            )
            .expect("room");
            page::add_item(
                &mut nw,
                &downlink(&sep, new_block),
                Placement::Append {
                    reuse_unused: false,
                },
            )
            .expect("room");
            let meta_id = mw.id();
            let keep = page::lsn(&mw);
            init_meta(&mut mw, meta_id, nb, root_level + 1);
            debug_assert_eq!(page::lsn(&mw), keep);
            let mut rec = WalRecord::new(Rmgr::Btree, INFO_NEW_ROOT, xid);
            rec.block(nid, true, page_bytes(&nw));
            rec.block(meta_id, true, page_bytes(&mw));
            self.pool.log_change(&rec, &mut [&mut nw, &mut mw]);
            return Ok(());
        }
        drop(rw);
        drop(w);
        // Lehman–Yao: until the downlink exists, searches reach the new page through the
        // left page's right-link.
        self.insert_at_level(&downlink(&sep, new_block), lvl + 1, xid)
            .map(|_| ())
    }

    /// Entries with `lo <= key <= hi` (key without the tid), in key order.
    pub fn range(&self, lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> Result<Vec<(Vec<u8>, Tid)>> {
        let mut out = Vec::new();
        self.range_visit(lo, hi, &mut |k, t| out.push((k.to_vec(), t)))?;
        Ok(out)
    }

    /// [`BTree::range`] without a copy per entry: `f` sees each entry's key and tid in
    /// key order, called under the leaf's shared latch (it must not read pages).
    pub fn range_visit(
        &self,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        f: &mut dyn FnMut(&[u8], Tid),
    ) -> Result<()> {
        let start: &[u8] = match lo {
            Bound::Included(k) | Bound::Excluded(k) => k,
            Bound::Unbounded => &[],
        };
        let mut block = self.descend(start, 0)?;
        loop {
            let pin = self.pool.read_page(self.pid(block))?;
            let r = pin.read();
            let first = first_data(&r);
            let mut off = page::lower_bound(&r, first, |it| item_key(it, 0).cmp(start));
            while off <= page::item_count(&r) {
                let it = page::item(&r, off);
                off += 1;
                let Some((k, t)) = split_tid_suffix(it) else {
                    continue;
                };
                let after_lo = match lo {
                    Bound::Included(l) => k >= l,
                    Bound::Excluded(l) => k > l,
                    Bound::Unbounded => true,
                };
                if !after_lo {
                    continue;
                }
                let before_hi = match hi {
                    Bound::Included(h) => k <= h,
                    Bound::Excluded(h) => k < h,
                    Bound::Unbounded => true,
                };
                if !before_hi {
                    return Ok(());
                }
                f(k, t);
            }
            if is_rightmost(&r) {
                return Ok(());
            }
            block = right_link(&r);
        }
    }

    pub fn lookup(&self, key: &[u8]) -> Result<Vec<Tid>> {
        Ok(self
            .range(Bound::Included(key), Bound::Included(key))?
            .into_iter()
            .map(|(_, t)| t)
            .collect())
    }

    /// Vacuum: removes every leaf entry whose tid is in `dead`, walking the leaves left
    /// to right. A leaf is read under a shared latch and re-latched exclusively only if
    /// it holds a victim, so concurrent lookups mostly pass; a split in between only
    /// moves entries right, where the walk still goes. `on_leaf(changed)` is called after
    /// each leaf (vacuum's cost accounting and cancellation: an error stops the walk,
    /// and the entries not yet removed are found again by the next vacuum).
    pub fn delete_tids(
        &self,
        dead: &HashSet<Tid>,
        xid: Xid,
        on_leaf: &mut dyn FnMut(bool) -> Result<()>,
    ) -> Result<usize> {
        let victims = |p: &[u8]| -> Vec<u16> {
            (first_data(p)..=page::item_count(p))
                .rev()
                .filter(|&o| {
                    split_tid_suffix(page::item(p, o)).is_some_and(|(_, t)| dead.contains(&t))
                })
                .collect()
        };
        let mut block = self.descend(&[], 0)?;
        let mut removed = 0;
        loop {
            let pin = self.pool.read_page(self.pid(block))?;
            let any = {
                let r = pin.read();
                if victims(&r).is_empty() {
                    Some((is_rightmost(&r), right_link(&r)))
                } else {
                    None
                }
            };
            let (rightmost, next, changed) = match any {
                Some((rightmost, next)) => (rightmost, next, false),
                None => {
                    let mut w = pin.write();
                    let offs = victims(&w);
                    if !offs.is_empty() {
                        self.delete_logged(&mut w, &offs, xid);
                        removed += offs.len();
                    }
                    (is_rightmost(&w), right_link(&w), !offs.is_empty())
                }
            };
            drop(pin);
            on_leaf(changed)?;
            if rightmost {
                return Ok(removed);
            }
            block = next;
        }
    }

    /// Removes the items at `offs` (descending) from a latched page and logs one DELETE.
    fn delete_logged(&self, w: &mut PageWrite<'_>, offs: &[u16], xid: Xid) {
        debug_assert!(
            offs.windows(2).all(|p| p[0] > p[1]),
            "offsets not descending"
        );
        for &o in offs {
            page::remove_item_shift(w, o);
        }
        page::compact(w);
        let d: Vec<u8> = offs.iter().flat_map(|o| o.to_le_bytes()).collect();
        let mut rec = WalRecord::new(Rmgr::Btree, INFO_DELETE, xid);
        rec.block(w.id(), false, d);
        self.pool.log_change(&rec, &mut [w]);
    }

    /// Removes leaf entries a scan found pointing at heap chains dead to every snapshot
    /// (PostgreSQL's kill_prior_tuple). PostgreSQL only sets an unlogged LP_DEAD bit;
    /// walrus sets no unlogged bits on pages (every page write must be covered by the
    /// protection mode), so the entry is deleted and the delete logged, once per entry.
    /// Without it, every non-HOT update of a hot row left one more entry that each later
    /// lookup of the key visited, until a VACUUM.
    ///
    /// `still_dead` re-checks each entry's heap root while the leaf is latched
    /// exclusively (leaf before heap, the unique check's latch order). That check is
    /// stable: while the entry exists, vacuum has not freed the line pointer (it removes
    /// index entries first), so a dead root cannot have been reused by a new tuple.
    /// Returns the number of entries removed.
    pub fn delete_dead_entries(
        &self,
        victims: Vec<(Vec<u8>, Tid)>,
        still_dead: &dyn Fn(Tid) -> Result<bool>,
    ) -> Result<usize> {
        // Leaf items (`key ++ tid`) in tree order, each with its tid.
        let mut items: Vec<(Vec<u8>, Tid)> = victims
            .into_iter()
            .map(|(mut k, t)| {
                encode_tid_suffix(t, &mut k);
                (k, t)
            })
            .collect();
        items.sort_unstable();
        items.dedup();
        let mut removed = 0;
        let mut i = 0;
        while i < items.len() {
            let block = self.descend(&items[i].0, 0)?;
            let pin = self.pool.read_page(self.pid(block))?;
            let (pin, _) = self.latch_covering(pin, &items[i].0)?;
            let mut w = pin.write();
            if beyond(&w, &items[i].0) {
                continue; // split meanwhile: descend again
            }
            // Every victim this leaf covers (they are sorted), in one record.
            let first = first_data(&w);
            let mut offs = Vec::new();
            while i < items.len() && !beyond(&w, &items[i].0) {
                let (item, tid) = (&items[i].0[..], items[i].1);
                let pos = page::lower_bound(&w, first, |it| it.cmp(item));
                if pos <= page::item_count(&w) && page::item(&w, pos) == item && still_dead(tid)? {
                    offs.push(pos);
                }
                i += 1;
            }
            if !offs.is_empty() {
                offs.reverse();
                self.delete_logged(&mut w, &offs, Xid::INVALID);
                removed += offs.len();
            }
        }
        Ok(removed)
    }

    /// Builds the tree bottom-up from entries sorted by (key, tid) into an empty tree.
    pub fn bulk_build(&self, sorted: &[(Vec<u8>, Tid)], xid: Xid) -> Result<()> {
        let mut entries = BuildEntries::with_capacity(sorted.len(), 0);
        for (k, t) in sorted {
            entries.push(k, *t);
        }
        self.bulk_build_entries(&entries, xid)
    }

    /// Builds the tree bottom-up into an empty tree from `entries`, which must be
    /// sorted ([`BuildEntries::sort`]). A key too long for a page, or (unique index)
    /// two equal keys, fail the build.
    pub fn bulk_build_entries(&self, entries: &BuildEntries, xid: Xid) -> Result<()> {
        self.bulk_build_entries_with_nulls(entries, xid, &|_| false)
    }

    /// [`BTree::bulk_build_entries`] where `has_null(tid)` tells the entries whose key
    /// holds a NULL: never duplicates of each other in a unique index (SQL's NULLs are
    /// distinct), however equal their encoded keys.
    pub fn bulk_build_entries_with_nulls(
        &self,
        entries: &BuildEntries,
        xid: Xid,
        has_null: &dyn Fn(Tid) -> bool,
    ) -> Result<()> {
        if entries.is_empty() {
            // The empty root leaf `create` made is already the right tree.
            return Ok(());
        }
        for i in 0..entries.len() {
            let k = entries.key(i);
            if k.len() > BTREE_KEY_BYTES_MAX {
                return Err(Error::ProgramLimitExceeded(format!(
                    "index row size {} exceeds btree maximum",
                    k.len()
                )));
            }
            if i > 0 {
                if self.unique && entries.key(i - 1) == k && !has_null(entries.tid(i)) {
                    return Err(Error::UniqueViolation {
                        index: self.name.clone(),
                        detail: "Key already exists.".into(),
                    });
                }
                assert!(
                    entries.item(i - 1) < entries.item(i),
                    "bulk build input must be sorted and distinct"
                );
            }
        }
        let mut uplinks = self.build_level(entries, 0, xid)?;
        let mut lvl = 1u16;
        while let Some(items) = uplinks {
            uplinks = self.build_level(&items, lvl, xid)?;
            lvl += 1;
        }
        Ok(())
    }

    /// Writes one level of a bulk build: `items` grouped into pages, each logged as an
    /// image. Returns the downlinks for the level above, or `None` once the level was a
    /// single page, which then becomes the root.
    fn build_level(
        &self,
        items: &impl BuildItems,
        lvl: u16,
        xid: Xid,
    ) -> Result<Option<BuildEntries>> {
        let groups = group_items(items);
        let blocks: Vec<u32> = (0..groups.len())
            .map(|_| self.pool.relfiles.allocate_block(self.relfile))
            .collect::<Result<_>>()?;
        let mut uplinks = BuildEntries::with_capacity(groups.len(), 0);
        for (g, range) in groups.iter().enumerate() {
            // An index build logs an image of every page it makes: on a full disk it
            // fails here, between pages, not in the WAL writer.
            self.pool.wal.ensure_headroom()?;
            let id = self.pid(blocks[g]);
            let right = blocks.get(g + 1).copied().unwrap_or(NO_BLOCK);
            let pin = self.pool.new_page(id)?;
            let mut w = pin.write();
            init_node(&mut w, id, lvl, right);
            let append = Placement::Append {
                reuse_unused: false,
            };
            if let Some(next) = groups.get(g + 1) {
                let first_next = items.item(next.start);
                let high_key;
                let hk = if lvl == 0 {
                    first_next
                } else {
                    high_key = downlink(item_key(first_next, lvl), 0);
                    &high_key
                };
                page::add_item(&mut w, hk, append).expect("room");
            }
            for i in range.clone() {
                // The leftmost internal page starts with minus infinity.
                let minus_infinity;
                let it = if lvl > 0 && g == 0 && i == range.start {
                    minus_infinity = downlink(&[], child_of(items.item(i)));
                    &minus_infinity
                } else {
                    items.item(i)
                };
                page::add_item(&mut w, it, append).expect("grouped to fit");
            }
            let mut rec = WalRecord::new(Rmgr::Btree, INFO_PAGE_IMAGE, xid);
            rec.block(id, true, page_bytes(&w));
            self.pool.log_change(&rec, &mut [&mut w]);
            uplinks.push_item(&downlink(item_key(items.item(range.start), lvl), blocks[g]));
        }
        if blocks.len() == 1 {
            let mpin = self.pool.read_page(self.pid(META_BLOCK))?;
            let mut mw = mpin.write();
            let mid = mw.id();
            init_meta(&mut mw, mid, blocks[0], lvl);
            let mut rec = WalRecord::new(Rmgr::Btree, INFO_PAGE_IMAGE, xid);
            rec.block(mid, true, page_bytes(&mw));
            self.pool.log_change(&rec, &mut [&mut mw]);
            return Ok(None);
        }
        Ok(Some(uplinks))
    }

    /// The tree's height (levels above the leaves), for tests and statistics.
    pub fn root_level(&self) -> Result<u16> {
        Ok(self.root()?.1)
    }
}

/// Blocks an insert reserves before it starts: a split at every level of a tree far taller
/// than any real one (eight levels of 8 KiB pages) plus a new root.
const SPLIT_BLOCKS_RESERVED: u32 = 9;

fn split_overflow(name: &str) -> Error {
    Error::Internal(format!(
        "btree split of index \"{name}\" could not place an item"
    ))
}

/// The items of one level of a bulk build, in order.
trait BuildItems {
    fn len(&self) -> usize;
    fn item(&self, i: usize) -> &[u8];
}

/// Entries for a bulk build, each stored as its leaf item (the key, then the tid
/// suffix) back to back in one buffer: an index build over millions of rows makes no
/// allocation per entry. Keys are self-delimiting (memcomparable, NULL-tagged), so
/// the byte order of the items is the (key, tid) order.
#[derive(Debug, Default)]
pub struct BuildEntries {
    bytes: Vec<u8>,
    /// Where each item ends in `bytes`.
    ends: Vec<usize>,
}

impl BuildEntries {
    /// Room for `entries` items of about `key_bytes` bytes each.
    pub fn with_capacity(entries: usize, key_bytes: usize) -> BuildEntries {
        BuildEntries {
            bytes: Vec::with_capacity(entries * (key_bytes + 6)),
            ends: Vec::with_capacity(entries),
        }
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Appends an entry whose key `write_key` appends to the buffer it is given.
    pub fn push_with(&mut self, tid: Tid, write_key: impl FnOnce(&mut Vec<u8>)) {
        write_key(&mut self.bytes);
        encode_tid_suffix(tid, &mut self.bytes);
        self.ends.push(self.bytes.len());
    }

    pub fn push(&mut self, key: &[u8], tid: Tid) {
        self.push_with(tid, |b| b.extend_from_slice(key));
    }

    /// Appends `other`'s entries after these, in their order (its buffers freed first
    /// when this is empty: the first run is taken, not copied).
    pub fn append(&mut self, other: BuildEntries) {
        if self.is_empty() {
            *self = other;
            return;
        }
        let base = self.bytes.len();
        self.bytes.extend_from_slice(&other.bytes);
        self.ends.extend(other.ends.iter().map(|e| e + base));
    }

    fn push_item(&mut self, item: &[u8]) {
        self.bytes.extend_from_slice(item);
        self.ends.push(self.bytes.len());
    }

    fn start(&self, i: usize) -> usize {
        if i == 0 {
            0
        } else {
            self.ends[i - 1]
        }
    }

    /// Entry `i`'s key (its item without the tid suffix).
    pub fn key(&self, i: usize) -> &[u8] {
        &self.bytes[self.start(i)..self.ends[i] - 6]
    }

    /// Entry `i`'s tid.
    pub fn tid(&self, i: usize) -> Tid {
        // Every entry was pushed with its 6-byte tid suffix (as `key` relies on too).
        let item = self.item(i);
        let t = &item[item.len() - 6..];
        Tid::new(
            u32::from_be_bytes([t[0], t[1], t[2], t[3]]),
            u16::from_be_bytes([t[4], t[5]]),
        )
    }

    /// Sorts the entries by (key, tid). Entries already in order (a table loaded in
    /// key order, as a primary key's usually is) are found so in one pass.
    pub fn sort(&mut self) {
        if (1..self.len()).all(|i| self.item(i - 1) <= self.item(i)) {
            return;
        }
        let mut order: Vec<usize> = (0..self.len()).collect();
        order.sort_unstable_by(|&a, &b| self.item(a).cmp(self.item(b)));
        let mut sorted = BuildEntries::with_capacity(self.len(), 0);
        sorted.bytes.reserve(self.bytes.len());
        for i in order {
            sorted.push_item(self.item(i));
        }
        *self = sorted;
    }
}

impl BuildItems for BuildEntries {
    fn len(&self) -> usize {
        self.ends.len()
    }

    fn item(&self, i: usize) -> &[u8] {
        &self.bytes[self.start(i)..self.ends[i]]
    }
}

/// Groups items into pages filled to about 90% (always at least one item a page).
fn group_items(items: &impl BuildItems) -> Vec<std::ops::Range<usize>> {
    // Room is left for the high key, which is the next group's first item.
    let usable = BULK_FILL - page::HEADER_SIZE - NODE_SPECIAL;
    let mut groups = Vec::new();
    let mut start = 0;
    let mut acc = 0;
    for i in 0..items.len() {
        let sz = ((items.item(i).len() + 7) & !7) + 4;
        if acc + 2 * sz > usable && i > start {
            groups.push(start..i);
            start = i;
            acc = 0;
        }
        acc += sz;
    }
    groups.push(start..items.len());
    groups
}

/// Page-level redo for one block of a B-tree record. Never panics on bad data.
pub fn redo_block(
    info: u8,
    block_index: usize,
    data: &[u8],
    _main: &[u8],
    p: &mut [u8],
    id: PageId,
) -> std::result::Result<(), String> {
    match info {
        INFO_SPLIT | INFO_NEW_ROOT | INFO_PAGE_IMAGE => {
            if data.len() != PAGE_SIZE {
                return Err(format!("btree page image of {} bytes", data.len()));
            }
            if block_index > 1 {
                return Err("btree image record with too many blocks".into());
            }
            let lsn_now = page::lsn(p);
            p.copy_from_slice(data);
            // Keep the LSN monotonic; recovery stamps the record's LSN next.
            p[..8].copy_from_slice(&lsn_now.0.to_le_bytes());
            if page::page_id(p) != id {
                return Err(format!(
                    "btree image for {} claims {}",
                    id,
                    page::page_id(p)
                ));
            }
            Ok(())
        }
        INFO_INSERT => {
            if page::kind(p) != Some(PageKind::BtreeNode) || data.len() < 3 {
                return Err("btree insert onto a non-btree page or short data".into());
            }
            let pos = u16::from_le_bytes([data[0], data[1]]);
            if pos == 0 || pos > page::item_count(p) + 1 {
                return Err(format!("btree insert position {pos} out of range"));
            }
            page::add_item(p, &data[2..], Placement::Insert(pos))
                .map(|_| ())
                .ok_or_else(|| "no room for btree redo insert".into())
        }
        INFO_DELETE => {
            if page::kind(p) != Some(PageKind::BtreeNode) || !data.len().is_multiple_of(2) {
                return Err("bad btree delete".into());
            }
            for c in data.chunks(2) {
                let o = u16::from_le_bytes([c[0], c[1]]);
                if o == 0 || o > page::item_count(p) {
                    return Err(format!("btree delete offset {o} out of range"));
                }
                page::remove_item_shift(p, o);
            }
            page::compact(p);
            Ok(())
        }
        _ => Err(format!("unknown btree record info {info}")),
    }
}

#[cfg(test)]
mod tests;
